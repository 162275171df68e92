// sigprop/components/detail/gelu_tanh.hpp -- the tanh approximation of GeLU
// (GPT-2's gelu_new; PyTorch's approximate='tanh'):
//   u(x) = x/2 (1 + tanh(c (x + k x^3))) = x sigma(2 c (x + k x^3)),
//   c = sqrt(2/pi), k = 0.044715, sigma the logistic sigmoid.
//
// Reference: Hendrycks and Gimpel, "Gaussian Error Linear Units (GELUs)"
// (2016, arXiv:1606.08415), section 2. Its moments are taken exactly for u,
// as those of the erf form f(x) = x Phi(x) (components/gelu.hpp) plus the
// difference delta = u - f, |delta| < 4.8e-4, for x ~ N(mu, s^2) and a pair
// with correlation r:
//   E[u]          = E[f] + E[delta]
//   Cov[u1, u2]   = Cov[f1, f2] + 2 E[(delta(x2) - E delta) E[f(x1) | x2]] + Cov[delta1, delta2]
//   E[u1' u2']    = E[f1' f2'] + 2 E[delta'(x2) E[f'(x1) | x2]] + E[delta1' delta2']
// (at r = 1 the variance and E[u'^2]). The cross terms are 1-D Gaussian
// expectations with the inner ones in closed form (gelu_mean, gelu_grad_mean
// at x1 | x2 ~ N(mu + r (x2 - mu), s^2 (1 - r^2))), by adaptive Gauss-Kronrod
// over the gap's support |x| < 12 (numerics/quadrature.hpp) to 1e-13 of the
// erf form's moments; the pair moments of delta come from its Hermite
// expansion in z = (x - mu)/s (numerics/hermite_expansion.hpp), used when its
// Parseval sums close to 1e-12 of the erf form's moments, else by nested
// quadrature. docs/components/gelu.md ("The tanh form").
#pragma once

#include <algorithm>
#include <cmath>
#include <optional>

#include "sigprop/numerics/hermite_expansion.hpp"
#include "sigprop/numerics/math.hpp"
#include "sigprop/numerics/quadrature.hpp"

namespace sigprop::detail {

// E[GeLU(y)] and E[GeLU'(y)] for y ~ N(m, v) (components/gelu.hpp, which
// includes this header).
template <class T>
T gelu_mean(const T& m, const T& v);
template <class T>
T gelu_grad_mean(const T& m, const T& v);

/// The sigmoid's argument 2 c (x + k x^3) of the tanh form, and its derivative.
inline double gelu_tanh_arg(double x) { return 1.5957691216057308 * (x + 0.044715 * x * x * x); }
inline double gelu_tanh_arg_derivative(double x) { return 1.5957691216057308 * (1 + 3 * 0.044715 * x * x); }

inline double gelu_tanh_sigmoid(double y) { return 1 / (1 + std::exp(-y)); }

/// u(x) = x sigma(2 c (x + k x^3)).
inline double gelu_tanh_value(double x) { return x * gelu_tanh_sigmoid(gelu_tanh_arg(x)); }

/// u'(x) = sigma(y) + x sigma(y) sigma(-y) y'.
inline double gelu_tanh_derivative(double x) {
  const double y = gelu_tanh_arg(x);
  return gelu_tanh_sigmoid(y) + x * gelu_tanh_sigmoid(y) * gelu_tanh_sigmoid(-y) * gelu_tanh_arg_derivative(x);
}

/// delta(x) = u(x) - x Phi(x), with the two tails' differences formed
/// without cancellation (for x > 0 as x (Phi(-x) - sigma(-y))).
inline double gelu_tanh_gap(double x) {
  const double y = gelu_tanh_arg(x);
  return x > 0 ? x * (math::normal_cdf(-x) - gelu_tanh_sigmoid(-y)) : x * (gelu_tanh_sigmoid(y) - math::normal_cdf(x));
}

/// delta'(x) = (sigma(y) - Phi(x)) + x (sigma(y) sigma(-y) y' - phi(x)).
inline double gelu_tanh_gap_derivative(double x) {
  const double y = gelu_tanh_arg(x);
  const double step = x > 0 ? math::normal_cdf(-x) - gelu_tanh_sigmoid(-y) : gelu_tanh_sigmoid(y) - math::normal_cdf(x);
  return step + x * (gelu_tanh_sigmoid(y) * gelu_tanh_sigmoid(-y) * gelu_tanh_arg_derivative(x) - math::normal_pdf(x));
}

/// The corrections to the erf form's moments at x ~ N(mu, s^2), s > 0
/// (header comment). `erf_var` and `erf_second` (Var[f], E[f'^2]) set the
/// absolute accuracy: about 1e-13 of them.
class GeluTanhGap {
 public:
  GeluTanhGap(double mean, double var) : mu_(mean), var_(var), s_(std::sqrt(var)) {
    const double scale = std::max(std::abs(gelu_mean(mean, var)), s_);
    gap_mean_ = expect([](double x) { return gelu_tanh_gap(x); }, scale / 10);
  }
  /// The same with E[delta] known (mean() of an equal gap).
  GeluTanhGap(double mean, double var, double gap_mean)
      : mu_(mean), var_(var), s_(std::sqrt(var)), gap_mean_(gap_mean) {}

  /// E[delta].
  double mean() const { return gap_mean_; }

  /// 2 Cov[f(x1), delta(x2)] + Cov[delta(x1), delta(x2)] at correlation r.
  double cov(double r, double erf_var) const {
    if (r == 0) return 0;  // independent
    const double v = var_ * (1 - r) * (1 + r);
    // E[(delta(x2) - E delta) E[f(x1) | x2]], with E[E[f(x1) | x2]] = E[f]
    const double cross =
        expect([&](double x) { return gelu_tanh_gap(x) * gelu_mean(mu_ + r * (x - mu_), v); }, erf_var / 10) -
        gap_mean_ * gelu_mean(mu_, var_);
    return 2 * cross + gap_pair(r, erf_var);
  }

  /// 2 E[f'(x1) delta'(x2)] + E[delta'(x1) delta'(x2)] at correlation r.
  double grad_cross(double r, double erf_second) const {
    const double v = var_ * (1 - r) * (1 + r);
    const double cross = expect(
        [&](double x) { return gelu_tanh_gap_derivative(x) * gelu_grad_mean(mu_ + r * (x - mu_), v); }, erf_second / 10);
    return 2 * cross + gap_slope_pair(r, erf_second);
  }

 private:
  using Expansion = HermiteExpansion<double>;

  // Beyond |x| = 12 the gap and its derivative are below 1e-30.
  static constexpr double support = 12;

  // E[h(x)], x ~ N(mu, s^2), for h vanishing outside |x| < support: over z
  // in [-12, 12] where x is inside it, cut where x = -3, 0, 3 (the gap's
  // features), to 1e-12 max(|E h|, floor) (numerics/quadrature.hpp).
  template <class H>
  double expect(H h, double floor, double mu, double s) const {
    const double lo = std::max(-12.0, (-support - mu) / s), hi = std::min(12.0, (support - mu) / s);
    if (!(lo < hi)) return 0;
    double cuts[6] = {lo, hi};
    std::size_t n = 2;
    for (const double x : {-3.0, 0.0, 3.0}) {
      const double z = (x - mu) / s;
      if (z > lo && z < hi) insert_cut(cuts, n, z);
    }
    return adaptive_gauss_kronrod([&](double z) { return h(mu + s * z) * math::normal_pdf(z); }, cuts, n, floor);
  }
  template <class H>
  double expect(H h, double floor) const {
    return expect(h, floor, mu_, s_);
  }

  // Cov[delta1, delta2]: Mehler's sum where the expansion's Parseval sum is
  // within 1e-12 Var[f] of Var[delta], else nested quadrature.
  double gap_pair(double r, double erf_var) const {
    if (!value_expansion_) {
      const double energy =
          expect([](double x) { return gelu_tanh_gap(x) * gelu_tanh_gap(x); }, erf_var / 10) - gap_mean_ * gap_mean_;
      value_expansion_ = Expansion::expand([this](double z) { return gelu_tanh_gap(mu_ + s_ * z); }, energy,
                                           Expansion::Check::value, tolerance(erf_var, energy));
    }
    if (*value_expansion_) return (*value_expansion_)->value_pair(r);
    return nested(r, [](double x) { return gelu_tanh_gap(x); }, erf_var) - gap_mean_ * gap_mean_;
  }

  // E[delta1' delta2'], from the expansion of delta (u' = s delta') where
  // its derivative sum closes, else nested quadrature.
  double gap_slope_pair(double r, double erf_second) const {
    if (!slope_expansion_) {
      const double slope_sq =
          expect([](double x) { return gelu_tanh_gap_derivative(x) * gelu_tanh_gap_derivative(x); }, erf_second / 10);
      slope_expansion_ = Expansion::expand([this](double z) { return gelu_tanh_gap(mu_ + s_ * z); }, var_ * slope_sq,
                                           Expansion::Check::derivative, tolerance(erf_second, slope_sq));
    }
    if (*slope_expansion_) return (*slope_expansion_)->derivative_pair(r) / var_;
    return nested(r, [](double x) { return gelu_tanh_gap_derivative(x); }, erf_second);
  }

  static double tolerance(double scale, double energy) {
    return energy > 0 ? std::max(1e-14, 1e-12 * scale / energy) : 1e-14;
  }

  // E[h(x1) h(x2)] by nested quadrature: x2 | x1 ~ N(mu + r (x1 - mu), s^2 (1 - r^2)).
  template <class H>
  double nested(double r, H h, double scale) const {
    const double c = s_ * std::sqrt((1 - r) * (1 + r));
    return expect(
        [&](double x) {
          const double m = mu_ + r * (x - mu_);
          return h(x) * (c > 0 ? expect(h, scale / 10, m, c) : h(m));
        },
        scale / 10);
  }

  double mu_, var_, s_;
  double gap_mean_ = 0;
  mutable std::optional<std::optional<Expansion>> value_expansion_, slope_expansion_;
};

}  // namespace sigprop::detail
