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
// (numerics/quadrature.hpp); the pair moments of delta come from its Hermite
// expansion in z = (x - mu)/s (numerics/hermite_expansion.hpp), used when its
// Parseval sums close to 1e-13 of the erf form's moments, else by nested
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
/// (header comment).
class GeluTanhGap {
 public:
  GeluTanhGap(double mean, double var) : mu_(mean), var_(var), s_(std::sqrt(var)) {
    gap_mean_ = integrate([this](double z) { return gelu_tanh_gap(at(z)); });
    gap_var_ = integrate([this](double z) {
      const double d = gelu_tanh_gap(at(z)) - gap_mean_;
      return d * d;
    });
  }

  /// E[delta].
  double mean() const { return gap_mean_; }

  /// 2 Cov[f(x1), delta(x2)] + Cov[delta(x1), delta(x2)] at correlation r;
  /// `erf_var` = Var[f], the scale it is accurate against.
  double cov(double r, double erf_var) const {
    if (r == 0) return 0;  // independent
    const double v = var_ * (1 - r) * (1 + r);
    const double cross = integrate([&](double z) {
      return (gelu_tanh_gap(at(z)) - gap_mean_) * gelu_mean(mu_ + r * s_ * z, v);
    });
    return 2 * cross + gap_pair(r, erf_var);
  }

  /// 2 E[f'(x1) delta'(x2)] + E[delta'(x1) delta'(x2)] at correlation r;
  /// `erf_second` = E[f'^2], the scale it is accurate against.
  double grad_cross(double r, double erf_second) const {
    const double v = var_ * (1 - r) * (1 + r);
    const double cross = integrate([&](double z) {
      return gelu_tanh_gap_derivative(at(z)) * gelu_grad_mean(mu_ + r * s_ * z, v);
    });
    return 2 * cross + gap_slope_pair(r, erf_second);
  }

 private:
  using Expansion = HermiteExpansion<double>;

  double at(double z) const { return mu_ + s_ * z; }

  template <class F>
  static double integrate(F f) {
    return gaussian_expectation<double>(f);
  }

  // Cov[delta1, delta2]: Mehler's sum where the expansion's Parseval sum is
  // within 1e-13 Var[f] of Var[delta] (relative: at least 1e-14), else
  // nested quadrature.
  double gap_pair(double r, double erf_var) const {
    if (!value_expansion_)
      value_expansion_ = Expansion::expand([this](double z) { return gelu_tanh_gap(at(z)); }, gap_var_,
                                           Expansion::Check::value, tolerance(erf_var, gap_var_));
    if (*value_expansion_) return (*value_expansion_)->value_pair(r);
    return nested(r, [](double x) { return gelu_tanh_gap(x); }, gap_mean_);
  }

  // E[delta1' delta2'], from the expansion of delta (u' = s delta') where
  // its derivative sum closes, else nested quadrature.
  double gap_slope_pair(double r, double erf_second) const {
    if (gap_slope_sq_ < 0)
      gap_slope_sq_ = integrate([this](double z) {
        const double d = gelu_tanh_gap_derivative(at(z));
        return d * d;
      });
    const double energy = var_ * gap_slope_sq_;
    if (!slope_expansion_)
      slope_expansion_ = Expansion::expand([this](double z) { return gelu_tanh_gap(at(z)); }, energy,
                                           Expansion::Check::derivative, tolerance(erf_second, gap_slope_sq_));
    if (*slope_expansion_) return (*slope_expansion_)->derivative_pair(r) / var_;
    return nested(r, [](double x) { return gelu_tanh_gap_derivative(x); }, 0);
  }

  static double tolerance(double scale, double energy) {
    return energy > 0 ? std::max(1e-14, 1e-13 * scale / energy) : 1e-14;
  }

  // E[(h(x1) - shift) h(x2)] by nested adaptive quadrature.
  template <class H>
  double nested(double r, H h, double shift) const {
    const double c = std::sqrt((1 - r) * (1 + r));
    return integrate([&](double z) {
      const double partner = integrate([&](double w) { return h(at(r * z + c * w)); });
      return (h(at(z)) - shift) * partner;
    });
  }

  double mu_, var_, s_;
  double gap_mean_ = 0, gap_var_ = 0;
  mutable double gap_slope_sq_ = -1;  // E[delta'^2], on first use
  mutable std::optional<std::optional<Expansion>> value_expansion_, slope_expansion_;
};

}  // namespace sigprop::detail
