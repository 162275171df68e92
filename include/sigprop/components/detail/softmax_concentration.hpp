// sigprop/components/detail/softmax_concentration.hpp -- the finite-length
// concentration factors of a softmax p of n i.i.d. N(0, a) logits, with
// S_m = sum_k p_k^m:
//   G(a, n) = n^2 E[p_1^2] e^{-a}                             (forward)
//   J(a, n) = n^2 E[p_1^2 (1 - 2 p_1 + S_2)] e^{-a}           (Jacobian)
//   D_G, D_J = d log G / d kappa, d log J / d kappa            (kurtosis slopes:
//              logits of small excess kurtosis kappa, at kappa = 0)
//   C(a, n) = E[1 - 5 S_2 + 4 S_3 + 6 S_2^2 - 6 S_4]           (tilt factors:
//   O(a, n) = E[4 S_2 - 10 S_3 + 6 S_4]                         Stein's lemma)
//   V(a, n) = H''(0), H(eps) = n^2 E[p_1 p'_1]                 (pair curvature:
//              two softmaxes whose logits have covariance eps)
// Reference: Kedia et al., "Transformers Get Stable" (ICML 2024), appendix
// B.7, whose log-normal sum is G = 1. The *_exact functions
// (numerics/softmax_quadrature.hpp) evaluate them by quadrature (1-40 ms);
// the fast ones (~55 ns) interpolate the generated table
// softmax_concentration_table.hpp: rows sigma = sqrt(a) in [0, sqrt(10)],
// columns u = ln n in [ln 2, ln 1e7], four-point Lagrange in sigma and u (in
// a = sigma^2 on the first interval), log G and log K = log(J / (1 - 1/n))
// rather than G and J; beyond n_max continued as c/n, beyond a_max linearly
// in a. Derivations, scheme and accuracy: docs/components/softmax.md,
// "Concentration factors (attention)".
//
// Preconditions (the caller validates): a >= 0 and finite, n >= 2 and finite.
// Nothing is clamped: a negative or NaN argument gives NaN, and n < 2 an
// extrapolation of the table.
#pragma once

#include <algorithm>
#include <cmath>
#include <type_traits>

#include <Eigen/Core>

#include "sigprop/components/detail/softmax_concentration_table.hpp"
#include "sigprop/numerics/math.hpp"
#include "sigprop/numerics/softmax_quadrature.hpp"

namespace sigprop::detail {

// A table of the generated header: its column in every node (concentration_table::log_g, ...).
using ConcentrationTable = int;

// Four-point Lagrange weights for the nodes 0, 1, 2, 3 at position t.
inline void concentration_weights(double t, double (&w)[4]) {
  const double t1 = t - 1, t2 = t - 2, t3 = t - 3, sixth = 1.0 / 6;
  w[0] = -t1 * t2 * t3 * sixth;
  w[1] = t * t2 * t3 * 0.5;
  w[2] = -t * t1 * t3 * 0.5;
  w[3] = t * t1 * t2 * sixth;
}

// The same in x = t^2 for the nodes x = 0, 1, 4, 9 (t = 0, 1, 2, 3).
inline void concentration_even_weights(double t, double (&w)[4]) {
  const double x = t * t, x1 = x - 1, x4 = x - 4, x9 = x - 9;
  w[0] = -x1 * x4 * x9 * (1.0 / 36);
  w[1] = x * x4 * x9 * (1.0 / 24);
  w[2] = -x * x1 * x9 * (1.0 / 60);
  w[3] = x * x1 * x4 * (1.0 / 360);
}

// The table along row i, columns j0 .. j0 + 3.
inline double concentration_row(ConcentrationTable t, int i, int j0, const double (&w)[4]) {
  const concentration_table::Node* r = concentration_table::nodes + i * concentration_table::u_count + j0;
  return w[0] * r[0].value[t] + w[1] * r[1].value[t] + w[2] * r[2].value[t] + w[3] * r[3].value[t];
}

// Eight values, one per column of a node (the seven tables and the zero).
struct FactorValues {
  double value[8];
};

// Every table along row i, columns j0 .. j0 + 3 (concentration_row for all
// columns at once, each in the same order of operations).
inline FactorValues factor_row(int i, int j0, const double (&w)[4]) {
  const concentration_table::Node* r = concentration_table::nodes + i * concentration_table::u_count + j0;
  FactorValues out;
  for (int t = 0; t < 8; ++t)
    out.value[t] = w[0] * r[0].value[t] + w[1] * r[1].value[t] + w[2] * r[2].value[t] + w[3] * r[3].value[t];
  return out;
}

// One point (a, u = ln n) of the tables: the stencil and its weights, found
// once and read in every table that shares the grid (n beyond n_max is read
// at the last column; the continuations are applied by the callers). The
// scheme in the header comment. No transcendental function but sqrt, so
// batches build it lane by lane between vectorized log and exp.
class ConcentrationPoint {
 public:
  ConcentrationPoint(double a, double u) : a_(a) {
    namespace table = concentration_table;
    constexpr double per_u = 1 / table::u_step, per_sigma = 1 / table::sigma_step;
    constexpr int u_last = table::u_count - 1, s_last = table::sigma_count - 1;
    // Stencils: the two nodes either side, shifted inwards at the edges. The
    // comparisons send NaN to a valid stencil, and the weights carry it on.
    double pu = (u - table::u_first) * per_u;
    if (pu > u_last) pu = u_last;  // n > n_max: the last column, continued by the caller
    j0_ = pu >= 1 ? (pu < u_last - 1 ? static_cast<int>(pu) - 1 : u_last - 3) : 0;
    concentration_weights(pu - j0_, wu_);
    beyond_a_ = !(a <= table::a_max);
    if (beyond_a_) return;
    const double ps = std::sqrt(a) * per_sigma;
    i0_ = ps >= 1 ? (ps < s_last - 1 ? static_cast<int>(ps) - 1 : s_last - 3) : 0;
    if (ps >= 1) concentration_weights(ps - i0_, ws_);
    else concentration_even_weights(ps, ws_);  // sigma < h: in a (no spurious O(sqrt a) term)
  }

  // The table interpolated at this point; beyond a_max continued linearly in a
  // from the last two rows.
  double read(ConcentrationTable t) const {
    namespace table = concentration_table;
    if (!beyond_a_) {
      double value = 0;
      for (int k = 0; k < 4; ++k) value += ws_[k] * concentration_row(t, i0_ + k, j0_, wu_);
      return value;
    }
    constexpr int s_last = table::sigma_count - 1;
    const double s1 = s_last * table::sigma_step, s0 = (s_last - 1) * table::sigma_step;
    const double f1 = concentration_row(t, s_last, j0_, wu_), f0 = concentration_row(t, s_last - 1, j0_, wu_);
    return f1 + (f1 - f0) * (a_ - s1 * s1) / ((s1 - s0) * (s1 + s0));
  }

  // read() of the seven tables at once (the columns of a node).
  FactorValues read_factors() const {
    namespace table = concentration_table;
    FactorValues out;
    if (!beyond_a_) {
      for (int t = 0; t < 8; ++t) out.value[t] = 0;
      for (int k = 0; k < 4; ++k) {
        const FactorValues row = factor_row(i0_ + k, j0_, wu_);
        for (int t = 0; t < 8; ++t) out.value[t] += ws_[k] * row.value[t];
      }
      return out;
    }
    constexpr int s_last = table::sigma_count - 1;
    const double s1 = s_last * table::sigma_step, s0 = (s_last - 1) * table::sigma_step;
    const FactorValues f1 = factor_row(s_last, j0_, wu_), f0 = factor_row(s_last - 1, j0_, wu_);
    for (int t = 0; t < 8; ++t)
      out.value[t] = f1.value[t] + (f1.value[t] - f0.value[t]) * (a_ - s1 * s1) / ((s1 - s0) * (s1 + s0));
    return out;
  }

 private:
  double a_, ws_[4] = {0, 0, 0, 0}, wu_[4];
  int i0_ = 0, j0_;
  bool beyond_a_;
};

// log f(a, n) interpolated at u = ln n (ConcentrationPoint), with n beyond
// n_max read at the last column.
inline double concentration_log(ConcentrationTable log_f, double a, double u) {
  return ConcentrationPoint(a, u).read(log_f);
}

// The continuations beyond n_max (the header comment), from the value at
// n_max: a factor F -> 1 with 1/F - 1 ~ c/n (G, K) from its log; a value
// with 1 - v ~ c/n (C, V); a value ~ c/n (O). The kurtosis slopes are held.
inline double continued_factor(double log_value, double n) {
  return 1 / (1 + std::expm1(-log_value) * (concentration_table::n_max / n));
}
inline double continued_complement(double value, double n) {
  return 1 - (1 - value) * (concentration_table::n_max / n);
}
inline double continued_decay(double value, double n) { return value * (concentration_table::n_max / n); }

// f(a, n) = exp(log_f interpolated), for a factor f -> 1 as n -> inf: the
// scheme and the continuations in the header comment. Scalars (double) or
// Eigen arrays of double (one lane per configuration; log and exp vectorized).
template <class T>
T concentration_interpolate(ConcentrationTable log_f, const T& a, const T& n) {
  namespace table = concentration_table;
  if constexpr (is_scalar_v<T>) {
    const double log_value = concentration_log(log_f, a, std::log(n));
    if (!(n > table::n_max)) return std::exp(log_value);
    return continued_factor(log_value, n);
  } else {
    const T u = n.log();
    T log_value(a.size());
    for (Eigen::Index i = 0; i < a.size(); ++i) log_value(i) = concentration_log(log_f, a(i), u(i));
    T out = log_value.exp();
    for (Eigen::Index i = 0; i < a.size(); ++i)
      if (n(i) > table::n_max) out(i) = continued_factor(log_value(i), n(i));
    return out;
  }
}

// log f(a, n): concentration_interpolate without its exponential (beyond
// n_max the log of the continued factor, -log1p(expm1(-log f(a, n_max)) n_max/n)).
template <class T>
T concentration_log_interpolate(ConcentrationTable log_f, const T& a, const T& n) {
  namespace table = concentration_table;
  const auto continued = [](double log_value, double nv) {
    return -std::log1p(std::expm1(-log_value) * (table::n_max / nv));
  };
  if constexpr (is_scalar_v<T>) {
    const double log_value = concentration_log(log_f, a, std::log(n));
    return n > table::n_max ? continued(log_value, n) : log_value;
  } else {
    const T u = n.log();
    T out(a.size());
    for (Eigen::Index i = 0; i < a.size(); ++i) {
      out(i) = concentration_log(log_f, a(i), u(i));
      if (n(i) > table::n_max) out(i) = continued(out(i), n(i));
    }
    return out;
  }
}

/// log G(a, n) by interpolation: the log of softmax_concentration, read
/// without forming G (for double, float or Eigen arrays).
template <class T>
T softmax_log_concentration(const T& a, const T& n) {
  using R = math::real_of<T>;
  if constexpr (std::is_same_v<R, double>) {
    return concentration_log_interpolate(concentration_table::log_g, a, n);
  } else {
    return math::map_lanes(a, n, [](R av, R nv) {
      return static_cast<R>(
          concentration_log_interpolate<double>(concentration_table::log_g, static_cast<double>(av), static_cast<double>(nv)));
    });
  }
}

/// G(a, n) by interpolation (the accuracy and the domain: see the header comment).
inline double softmax_concentration(double a, double n) {
  return concentration_interpolate<double>(concentration_table::log_g, a, n);
}

/// J(a, n) by interpolation of K = J / (1 - 1/n) (see the header comment).
inline double softmax_jacobian_concentration(double a, double n) {
  return (1 - 1 / n) * concentration_interpolate<double>(concentration_table::log_j, a, n);
}

/// G for float or Eigen arrays: double lanes through the vectorized path,
/// float computed in double.
template <class T>
T softmax_concentration(const T& a, const T& n) {
  using R = math::real_of<T>;
  if constexpr (std::is_same_v<R, double>) {
    return concentration_interpolate(concentration_table::log_g, a, n);
  } else {
    return math::map_lanes(a, n, [](R av, R nv) {
      return static_cast<R>(softmax_concentration(static_cast<double>(av), static_cast<double>(nv)));
    });
  }
}

/// J for float or Eigen arrays (as softmax_concentration).
template <class T>
T softmax_jacobian_concentration(const T& a, const T& n) {
  using R = math::real_of<T>;
  if constexpr (std::is_same_v<R, double>) {
    return T((1 - 1 / n) * concentration_interpolate(concentration_table::log_j, a, n));
  } else {
    return math::map_lanes(a, n, [](R av, R nv) {
      return static_cast<R>(softmax_jacobian_concentration(static_cast<double>(av), static_cast<double>(nv)));
    });
  }
}

// A table's value at (a, n) itself (not its exponential), for double, float
// or Eigen arrays lane by lane; beyond n_max, `beyond(value at n_max, n)`.
template <class T, class Beyond>
T concentration_table_value(ConcentrationTable table, const T& a, const T& n, Beyond beyond) {
  using R = math::real_of<T>;
  const auto one = [&table, &beyond](double av, double nv) {
    const double value = concentration_log(table, av, std::log(std::min(nv, concentration_table::n_max)));
    return nv > concentration_table::n_max ? beyond(value, nv) : value;
  };
  if constexpr (is_scalar_v<T>) return static_cast<T>(one(static_cast<double>(a), static_cast<double>(n)));
  else
    return math::map_lanes(a, n, [&one](R av, R nv) {
      return static_cast<R>(one(static_cast<double>(av), static_cast<double>(nv)));
    });
}

/// D_G(a, n) (or D_J with the table slope_j) by interpolation (held at n_max beyond it).
template <class T>
T softmax_kurtosis_slope(ConcentrationTable slopes, const T& a, const T& n) {
  return concentration_table_value(slopes, a, n, [](double value, double) { return value; });
}

/// C(a, n) by interpolation; beyond n_max 1 - C continued as c/n.
template <class T>
T softmax_tilt_cross(const T& a, const T& n) {
  return concentration_table_value(concentration_table::tilt_cross, a, n, continued_complement);
}

/// O(a, n) by interpolation; beyond n_max continued as c/n.
template <class T>
T softmax_tilt_own(const T& a, const T& n) {
  return concentration_table_value(concentration_table::tilt_own, a, n, continued_decay);
}

/// V(a, n) by interpolation; beyond n_max 1 - V continued as c/n.
template <class T>
T softmax_pair_curvature(const T& a, const T& n) {
  return concentration_table_value(concentration_table::pair_curvature, a, n, continued_complement);
}

/// Every tabulated factor at one point (a, n): G, J, D_G, D_J, C, O, V.
template <class T>
struct SoftmaxFactors {
  T concentration, jacobian, slope_g, slope_j, tilt_cross, tilt_own, pair_curvature;
};

/// All seven factors at (a, n), each as its own function gives it, with the
/// stencil found once (ConcentrationPoint) instead of once per table: for
/// double, float or Eigen arrays lane by lane (log and exp vectorized).
template <class T>
SoftmaxFactors<T> softmax_factors(const T& a, const T& n) {
  namespace table = concentration_table;
  using R = math::real_of<T>;
  // One lane: the log-factors (G, K) before their exp, the rest finished.
  struct Lane {
    double log_g, log_k, slope_g, slope_j, tilt_cross, tilt_own, pair_curvature;
  };
  const auto lane_of = [](double av, double nv, double uv) {
    const FactorValues f = ConcentrationPoint(av, uv).read_factors();  // the order of the columns
    Lane l{f.value[0], f.value[1], f.value[2], f.value[3], f.value[4], f.value[5], f.value[6]};
    if (nv > table::n_max) {
      l.tilt_cross = continued_complement(l.tilt_cross, nv);
      l.tilt_own = continued_decay(l.tilt_own, nv);
      l.pair_curvature = continued_complement(l.pair_curvature, nv);
    }
    return l;
  };
  const auto factor = [](double log_value, double nv) {
    return nv > table::n_max ? continued_factor(log_value, nv) : std::exp(log_value);
  };
  if constexpr (is_scalar_v<T>) {
    const double av = static_cast<double>(a), nv = static_cast<double>(n);
    const Lane l = lane_of(av, nv, std::log(nv));
    return {static_cast<T>(factor(l.log_g, nv)), static_cast<T>((1 - 1 / nv) * factor(l.log_k, nv)),
            static_cast<T>(l.slope_g), static_cast<T>(l.slope_j), static_cast<T>(l.tilt_cross),
            static_cast<T>(l.tilt_own), static_cast<T>(l.pair_curvature)};
  } else {
    // Double lanes of T's shape (a fixed-size chunk stays off the heap).
    using Lanes = Eigen::Array<double, T::RowsAtCompileTime, 1, 0, T::MaxRowsAtCompileTime, 1>;
    const Eigen::Index size = a.size();
    const Lanes nd = n.template cast<double>(), u = nd.log();
    Lanes log_g(size), log_k(size);
    SoftmaxFactors<T> out{a, a, a, a, a, a, a};  // shapes; every lane is overwritten
    for (Eigen::Index i = 0; i < size; ++i) {
      const Lane l = lane_of(static_cast<double>(a(i)), nd(i), u(i));
      log_g(i) = l.log_g, log_k(i) = l.log_k;
      out.slope_g(i) = static_cast<R>(l.slope_g), out.slope_j(i) = static_cast<R>(l.slope_j);
      out.tilt_cross(i) = static_cast<R>(l.tilt_cross), out.tilt_own(i) = static_cast<R>(l.tilt_own);
      out.pair_curvature(i) = static_cast<R>(l.pair_curvature);
    }
    Lanes g = log_g.exp(), k = log_k.exp();
    for (Eigen::Index i = 0; i < size; ++i)
      if (nd(i) > table::n_max) g(i) = continued_factor(log_g(i), nd(i)), k(i) = continued_factor(log_k(i), nd(i));
    out.concentration = g.template cast<R>();
    out.jacobian = ((1 - 1 / nd) * k).template cast<R>();
    return out;
  }
}

/// The same for Eigen arguments of different types (an expression such as
/// a + step with an array): both evaluated to a's plain array type first.
template <class A, class N>
auto softmax_concentration(const Eigen::ArrayBase<A>& a, const Eigen::ArrayBase<N>& n) {
  using T = typename Eigen::ArrayBase<A>::PlainObject;
  return softmax_concentration(T(a), T(n));
}

template <class A, class N>
auto softmax_jacobian_concentration(const Eigen::ArrayBase<A>& a, const Eigen::ArrayBase<N>& n) {
  using T = typename Eigen::ArrayBase<A>::PlainObject;
  return softmax_jacobian_concentration(T(a), T(n));
}

}  // namespace sigprop::detail
