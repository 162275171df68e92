// sigprop/components/softmax.hpp -- p = softmax(x) over the n entries of the
// hidden ("dim") axis of each position: p_j = e^{x_j} / sum_k e^{x_k}.
//
// Reference: Kedia et al., "Transformers Get Stable" (ICML 2024), appendix
// B.7 (A.7 in the later version) and Table 1. The paper normalizes over L
// entries whose pairwise correlation it writes r^d (Table 1) or r^l (B.7);
// here the normalized axis is the hidden axis, so:
//   corr_dim  = correlation among the n normalized entries of one position
//               (the paper's r); the output's is exactly -1/(n - 1) since the
//               entries sum to 1;
//   corr_len  = correlation of two positions at the same entry (not in the
//               paper; mapped exactly below).
// Input model as for LayerNorm: separable (Kronecker) covariance. Softmax is
// shift-invariant, so the mean and the common part of a position drop out and
// p is the softmax of n i.i.d. N(0, a) logits, a = s^2 (1 - r^d); two
// positions have per-entry logit correlation rho = r^l.
//
// Moments (mean 1/n exactly). With Jacobian dp/dx = diag(p) - p p^T,
// g_in = p .* (g - p.g) for an upstream g with i.i.d. entries (variance g^2,
// correlation r_g between positions), so
//   Var[p]        = E[p_1^2] - 1/n^2,
//   Var[g_in]     = g^2 E[p_1^2 (1 - 2 p_1 + sum_k p_k^2)],
//   Cov^l[p]      = E[p_1 p'_1] - 1/n^2,
//   Cov^l[g_in]   = r_g g^2 E[p_1 p'_1 (1 - p_1 - p'_1 + sum_k p_k p'_k)].
// Forms:
//   exact (default): those expectations evaluated numerically to ~3e-8
//     relative through the Laplace transform of the log-normal,
//     1/S^m = int t^{m-1} e^{-tS} dt / Gamma(m), which turns each of them into
//     a one- (within a position) or two-dimensional (two positions) integral
//     over t of Gaussian expectations (see detail::SoftmaxQuadrature).
//     Supported for a <= 100 (beyond it the softmax is essentially one-hot).
//   full (B.7, log-normal sum of Lo 2013), b = a n/(n - 1):
//     Var[p] = (e^b - 1) e^{2b} / ((n - 1) e^a + 1)^2,  Var[g_in] = (Var[p] + 1/n^2) g^2;
//   simplified (B.7 last line, Table 1):
//     Var[p] = (e^a - 1)/n^2,  Var[g_in] = e^a g^2/n^2.
//   For full and simplified (which treat the denominator as a constant)
//   corr_len = (e^{a rho} - 1)/(e^a - 1) and r_g,in = r_g e^{-a (1 - rho)}.
// The paper's forms are biased by O(e^{2a}/n) relative; the exact form is
// within sampling noise (docs/components/softmax.md, "Corrections to the
// paper").
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "sigprop/core/component.hpp"
#include "sigprop/core/errors.hpp"
#include "sigprop/numerics/softmax_quadrature.hpp"

namespace sigprop {

/// Which variance formula Softmax uses.
enum class SoftmaxForm {
  exact,      ///< numerical evaluation of the exact expectations (default)
  full,       ///< the paper's log-normal-sum approximation (B.7)
  simplified  ///< the paper's (e^a - 1)/n^2 (B.7, Table 1)
};

inline const char* to_string(SoftmaxForm f) {
  switch (f) {
    case SoftmaxForm::exact: return "exact";
    case SoftmaxForm::full: return "full";
    case SoftmaxForm::simplified: return "simplified";
  }
  return "?";
}

namespace detail {

// Lane-wise evaluation of a scalar kernel of (n, a, rho) returning R.
template <class T, class F>
auto softmax_lanes(const T& n, const T& a, const T& rho, F f) {
  using R = decltype(f(0.0, 0.0, 0.0));
  if constexpr (is_scalar_v<T>) {
    return std::vector<R>{f(static_cast<double>(n), static_cast<double>(a), static_cast<double>(rho))};
  } else {
    std::vector<R> out;
    for (Eigen::Index i = 0; i < n.size(); ++i)
      out.push_back(f(static_cast<double>(n(i)), static_cast<double>(a(i)), static_cast<double>(rho(i))));
    return out;
  }
}

template <class T, class V, class Get>
T from_lanes(const T& like, const std::vector<V>& values, Get get) {
  if constexpr (is_scalar_v<T>) {
    (void)like;
    return static_cast<T>(get(values[0]));
  } else {
    T out(like.size());
    for (Eigen::Index i = 0; i < like.size(); ++i)
      out(i) = static_cast<typename T::Scalar>(get(values[static_cast<std::size_t>(i)]));
    return out;
  }
}

}  // namespace detail

template <class T = double>
class Softmax : public Component<Softmax<T>, T> {
 public:
  static constexpr const char* name = "sigprop::Softmax";

  /// `n`: the number of entries normalized over (an integer >= 2).
  explicit Softmax(T n, SoftmaxForm form = SoftmaxForm::exact) : n_(n), form_(form) {
    sigprop::detail::require(
        name, "n", n_, [](double v) { return std::isfinite(v) && v >= 2 && v <= 1e15 && std::floor(v) == v; },
        "{2, 3, 4, ...} (an integer count of normalized entries)");
    if (form_ != SoftmaxForm::exact && form_ != SoftmaxForm::full && form_ != SoftmaxForm::simplified)
      sigprop::detail::raise_domain(name,
                                    "form = " + std::to_string(static_cast<int>(form_)) + " is not a SoftmaxForm");
  }

  const T& n() const { return n_; }
  SoftmaxForm form() const { return form_; }

  /// The exact form evaluates logit variances s^2 (1 - r^d) up to 100.
  void require_input(const Moments<T>& in) const {
    if (form_ != SoftmaxForm::exact) return;
    const T a = logit_var(in);
    sigprop::detail::require(name, "var * (1 - corr_dim)", a,
                             [](double v) { return v <= detail::SoftmaxQuadrature::max_logit_var; },
                             "[0, 100] (the exact form's range; beyond it the softmax is essentially "
                             "one-hot)");
  }

  Moments<T> forward_impl(const Moments<T>& in) const {
    using std::exp;
    using std::expm1;
    const T a = logit_var(in);
    Moments<T> out;
    out.mean = 1 / n_ + 0 * in.mean;
    out.corr_dim = -1 / (n_ - 1) + 0 * in.mean;
    if (form_ == SoftmaxForm::exact) {
      const auto lanes = detail::softmax_lanes(n_, a, in.corr_len, [](double n, double av, double rho) {
        return detail::softmax_exact(n, av, rho, detail::SoftmaxNeed::forward);
      });
      out.var = detail::from_lanes(a, lanes, [](const detail::SoftmaxExact& e) { return e.var; });
      const T cov = detail::from_lanes(a, lanes, [](const detail::SoftmaxExact& e) { return e.cov_len; });
      out.corr_len = where_positive(out.var, cov / out.var, in.corr_len);
      return out;
    }
    if (form_ == SoftmaxForm::full) {
      // (e^b - 1) e^{2b} / ((n-1) e^a + 1)^2 = (e^b - 1) e^{2(b - a)} / (n - 1 + e^{-a})^2,
      // b - a = a/(n - 1): finite while e^b - 1 is, and no large exponent
      // whose rounding e^x would amplify (11 eps at n = 256 through
      // e^{2b - 2 log((n-1) e^a + 1)}, docs/accuracy.md).
      const T b = a * n_ / (n_ - 1);
      const T den = n_ - 1 + exp(-a);
      out.var = expm1(b) * exp(2 * a / (n_ - 1)) / (den * den);
    } else {
      out.var = expm1(a) / (n_ * n_);
    }
    out.corr_len = simplified_corr(a, in.corr_len);
    return out;
  }

  GradMoments<T> backward_impl(const Moments<T>& in, const GradMoments<T>& g) const {
    using std::exp;
    const T a = logit_var(in);
    GradMoments<T> out;
    if (form_ == SoftmaxForm::exact) {
      const auto need = lane_any_nonzero(g.corr_len) ? detail::SoftmaxNeed::backward_with_cov
                                                     : detail::SoftmaxNeed::backward;
      const auto lanes = detail::softmax_lanes(n_, a, in.corr_len, [need](double n, double av, double rho) {
        return detail::softmax_exact(n, av, rho, need);
      });
      const T factor = detail::from_lanes(a, lanes, [](const detail::SoftmaxExact& e) { return e.grad_var; });
      const T cov_factor = detail::from_lanes(a, lanes, [](const detail::SoftmaxExact& e) { return e.grad_cov; });
      out.var = g.var * factor;
      out.corr_len = g.corr_len * cov_factor / factor;
      return out;
    }
    const T var = forward_impl(in).var;
    out.var = (var + 1 / (n_ * n_)) * g.var;
    out.corr_len = g.corr_len * exp(-a * (1 - in.corr_len));
    return out;
  }

 private:
  // Variance of the logits once the common part of a position is removed.
  static T logit_var(const Moments<T>& in) { return in.var * (1 - in.corr_dim); }

  // (e^{a rho} - 1)/(e^a - 1), and its a -> 0 limit rho.
  static T simplified_corr(const T& a, const T& rho) {
    using std::expm1;
    return where_positive(a, expm1(a * rho) / expm1(a), rho);
  }

  // x where c > 0, else y (the a -> 0 limit of a ratio), lane-wise.
  static T where_positive(const T& c, const T& x, const T& y) {
    if constexpr (is_scalar_v<T>) return c > 0 ? x : y;
    else return math::select(math::less(0, c), x, y);
  }

  static bool lane_any_nonzero(const T& x) {
    for (std::size_t i = 0; i < lane_count(x); ++i)
      if (lane(x, i) != 0) return true;
    return false;
  }

  T n_;
  SoftmaxForm form_;
};

}  // namespace sigprop
