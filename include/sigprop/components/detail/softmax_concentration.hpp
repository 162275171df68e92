// sigprop/components/detail/softmax_concentration.hpp -- the finite-length
// concentration factor of a softmax,
//   G(a, n) = n^2 E[p_1^2] e^{-a},   p = softmax of n i.i.d. N(0, a) logits,
// so that n E[sum_k p_k^2] = e^a G(a, n). G(0, n) = 1, G = 1 - a/n + O(a^2)
// for small a, and G -> 1 as n -> inf at fixed a: the delta method for the
// ratio of sums gives 1/G = 1 + (e^a - 1)(2 e^a - 1)/n + ..., accurate only
// once n >> e^{2a} (at a = 4, n = 300 it gives 0.049 for G = 0.361).
//
// Reference: Kedia et al., "Transformers Get Stable" (ICML 2024), appendix
// B.7: its log-normal sum treats the denominator as a constant, which is
// G = 1. The exact value comes from the quadrature of softmax.hpp
// (detail::SoftmaxQuadrature) as G = (n^2 Var[p_1] + 1) e^{-a}, ~1 ms a call:
// softmax_concentration_exact.
//
// softmax_concentration (~50 ns) interpolates log G in a generated table
// (softmax_concentration_table.hpp, written by examples/concentration_table.cpp
// from softmax_concentration_exact, 2583 entries in ~2 s):
//   rows     sigma = sqrt(a) = i h, h = sqrt(10)/40, i = 0 .. 40 (a in [0, 10]);
//   columns  u = ln n, 63 nodes from ln 2 to ln 1e7 (step 0.249).
// Scheme: four-point Lagrange interpolation (DLMF 3.3.1) on the two nodes
// either side, shifted inwards at the table's edges, in sigma and in u (the
// 4 x 4 tensor product). On the first interval, sigma < h, the rows 0 .. 3 are
// interpolated in a = sigma^2 instead (nodes a = 0, h^2, 4 h^2, 9 h^2): G is
// smooth in a, and a cubic in sigma would add a spurious O(sqrt a) term.
// Rows uniform in sigma rather than in a: log G has large high derivatives in
// a at small a and n (G(a, 2) = 4 E[logistic(sqrt(2a) Z)^2] e^{-a}), and a
// uniform grid in a was off by 8.5e-4 at step 0.25 and 1.1e-4 at step 0.125.
// Accuracy, relative to softmax_concentration_exact over the table: max
// 1.9e-5, RMS 3.6e-6 at 20000 random points (examples/concentration_table
// --check 20000), max 1.8e-5 at the 7542 half-step points. The exact
// quadrature itself agrees with an independent adaptive quadrature to
// 3e-6 for n <= 1e7 (1e-7 for n <= 1e6; concentration_table --verify).
// Outside the table:
//   n > 1e7: 1/G - 1 is continued as c/n from the last column,
//       1/G(a, n) = 1 + (1/G(a, n_max) - 1) n_max/n   (continuous at n_max),
//     the delta method's asymptotic form. Against the independent quadrature
//     it is good to 1e-6 for a <= 4 at any n; where n_max is not >> e^{2a}
//     the true 1/G - 1 falls faster than 1/n and the continuation
//     overestimates G (at n = 1e8: a = 5 +4.5e-5, a = 6 +8e-4, a = 8 +3 %,
//     a = 10 +21 %).
//     The table stops at 1e7 because SoftmaxQuadrature integrates the
//     Gaussian over 8.5 standard deviations, which for n >~ 1e7 cuts off the
//     weight of w^2 centred 2 sqrt(a) out and biases E[p_1^2] low (a = 6:
//     -1.8e-6 at n = 1e7, -4.3e-5 at 1e8, -1.3e-4 at 1e9; a = 8: -5.7e-4 at 1e9).
//   a > 10: log G continued linearly in a from the last two rows; outside the
//     attention closed form's domain, and indicative only (3e-4 to 2e-2 off
//     at a = 10.5, 3e-3 to 0.2 at a = 12, for n from 2 to 1e6).
// Preconditions (the caller validates): a >= 0 and finite, n >= 2 and finite.
// Nothing is clamped: a negative or NaN argument gives NaN, and n < 2 an
// extrapolation of the table.
#pragma once

#include <cmath>

#include "sigprop/components/detail/softmax_concentration_table.hpp"
#include "sigprop/components/softmax.hpp"
#include "sigprop/core/math.hpp"

namespace sigprop::detail {

/// G(a, n) from the exact quadrature (slow: ~1 ms).
inline double softmax_concentration_exact(double a, double n) {
  if (a == 0) return 1;
  const SoftmaxExact e = softmax_exact(n, a, 0, SoftmaxNeed::forward);
  return (n * n * e.var + 1) * std::exp(-a);
}

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

// log G along row i, columns j0 .. j0 + 3.
inline double concentration_row(int i, int j0, const double (&w)[4]) {
  const double* r = concentration_table::log_g + i * concentration_table::u_count + j0;
  return w[0] * r[0] + w[1] * r[1] + w[2] * r[2] + w[3] * r[3];
}

/// G(a, n) by interpolation (the accuracy and the domain: see the top of this file).
inline double softmax_concentration(double a, double n) {
  namespace table = concentration_table;
  constexpr double per_u = 1 / table::u_step, per_sigma = 1 / table::sigma_step;
  constexpr int u_last = table::u_count - 1, s_last = table::sigma_count - 1;
  // Stencils: the two nodes either side, shifted inwards at the edges. The
  // comparisons send NaN to a valid stencil, and the weights carry it on.
  double pu = (std::log(n) - table::u_first) * per_u;
  if (pu > u_last) pu = u_last;  // n > n_max: the last column, continued below
  const int j0 = pu >= 1 ? (pu < u_last - 1 ? static_cast<int>(pu) - 1 : u_last - 3) : 0;
  double wu[4];
  concentration_weights(pu - j0, wu);
  double log_g;
  if (a <= table::a_max) {
    const double ps = std::sqrt(a) * per_sigma;
    const int i0 = ps >= 1 ? (ps < s_last - 1 ? static_cast<int>(ps) - 1 : s_last - 3) : 0;
    double ws[4];
    if (ps >= 1) concentration_weights(ps - i0, ws);
    else concentration_even_weights(ps, ws);  // sigma < h: in a (no spurious O(sqrt a) term)
    log_g = 0;
    for (int k = 0; k < 4; ++k) log_g += ws[k] * concentration_row(i0 + k, j0, wu);
  } else {
    const double s1 = s_last * table::sigma_step, s0 = (s_last - 1) * table::sigma_step;
    const double g1 = concentration_row(s_last, j0, wu), g0 = concentration_row(s_last - 1, j0, wu);
    log_g = g1 + (g1 - g0) * (a - s1 * s1) / ((s1 - s0) * (s1 + s0));
  }
  if (!(n > table::n_max)) return std::exp(log_g);
  return 1 / (1 + std::expm1(-log_g) * (table::n_max / n));
}

/// G lane by lane for float or Eigen arrays (computed in double).
template <class T>
T softmax_concentration(const T& a, const T& n) {
  using R = math::real_of<T>;
  return math::map_lanes(a, n, [](R av, R nv) {
    return static_cast<R>(softmax_concentration(static_cast<double>(av), static_cast<double>(nv)));
  });
}

}  // namespace sigprop::detail
