// sigprop/components/rmsnorm.hpp -- y = g0 x / rms(x), rms(x) = sqrt(mean of
// x^2 over the d hidden units of each position) (no epsilon, no centering;
// the gain g0 > 0 at its initial value, 1 by default).
//
// Reference: Zhang and Sennrich, "Root Mean Square Layer Normalization"
// (NeurIPS 2019); the backward Jacobian is the centering-free case of Xu et
// al. (2019), Eq. 17. Derivation and the simulations that confirm it:
// docs/components/rmsnorm.md.
//
// Input model and domain. Each position is a mean-zero Gaussian vector whose d
// entries are uncorrelated with variance s^2 (corr_dim = 0), and two positions
// have correlation r^l entry by entry. This is the residual stream of a
// pre-norm decoder, a sum of Linear outputs (mean 0, corr_dim 0 exactly).
// Only then is the closed form exact, so mean != 0 and corr_dim != 0 are
// rejected; montecarlo::simulate measures such inputs instead.
//
// RMSNorm over d units is LayerNorm over d + 1 units. Write x = s u with u
// standard normal in R^d; then y = g0 sqrt(d) u/|u|, which is LayerNorm's
// geometry (layernorm.hpp: a standard normal vector in a k-dimensional space,
// normalized) with k = d instead of k = d - 1. Hence, with F and F' the
// kernel and slope of LayerNorm<T>(d + 1):
//   E[y] = 0, Var[y] = g0^2 (every row has squared norm g0^2 d),
//   r^d_out = 0 (rows are not centered; y_j -> -y_j under x_j -> -x_j),
//   r^l_out = F(r^l) = E[cos angle(u, u')];
// backward g_in = (g0/rms(x)) (I - yhat yhat^T/d) g, yhat = x/rms(x), a
// projection of rank d - 1 scaled by g0 sqrt(d)/(s |u|), E[1/chi^2_d] = 1/(d - 2):
//   Var[g_in] = g0^2 Var[g] (d - 1)/((d - 2) s^2),
//   Cov^l[g_in] = g0^2 r_g Var[g] F'(r^l)/s^2,
// LayerNorm(d + 1)'s backward at r^d = 0 times g0^2. d <= 2 has no finite
// gradient variance (E[1/chi^2_2] = inf) and is rejected.
#pragma once

#include <cmath>

#include "sigprop/components/layernorm.hpp"
#include "sigprop/core/component.hpp"
#include "sigprop/core/validate.hpp"

namespace sigprop {

template <class T = double>
class RmsNorm : public Component<RmsNorm<T>, T> {
 public:
  static constexpr const char* name = "sigprop::RmsNorm";
  static constexpr int homogeneity = 0;
  static constexpr bool sets_norm_coupling = true;

  /// `d`: the number of hidden units normalized over, an integer >= 3;
  /// `gain`: the gain g0 > 0 every unit is multiplied by (its initial value).
  RmsNorm(T d, T gain) : d_(checked_width(d)), gain_(checked_gain(gain)), kernel_(T(d_ + 1)) {}

  /// Gain 1, as at the usual initialization.
  explicit RmsNorm(T d) : RmsNorm(d, T(0 * d + 1)) {}

  const T& d() const { return d_; }
  const T& gain() const { return gain_; }

  /// The LayerNorm over d + 1 units whose kernel this RMSNorm shares.
  const LayerNorm<T>& kernel() const { return kernel_; }

  /// The closed form is exact for mean-zero inputs with uncorrelated hidden
  /// units (a pre-norm residual stream); a constant position has no direction.
  void require_input(const Moments<T>& in) const {
    require_positive(name, "var", in.var);
    require_zero(in.mean, "mean");
    require_zero(in.corr_dim, "corr_dim");
  }

  Moments<T> forward_impl(const Moments<T>& in) const {
    Moments<T> out = kernel_.forward_impl(in);  // mean 0, var 1, corr_len F(r)
    out.var = gain_ * gain_ * out.var;
    out.corr_dim = 0 * in.mean;
    return out;
  }

  GradMoments<T> backward_impl(const Moments<T>& in, const GradMoments<T>& g) const {
    // At r^d = 0 the kernel's k is d; RMSNorm does not centre, so the kernel
    // sees the all-ones direction as isotropic (its rank d + 1 - 1 - a_x is
    // RMSNorm's d - a_x) and the input gradient keeps g's align_mean.
    GradMoments<T> through = g;
    through.align_mean = 0 * g.var + 1;
    GradMoments<T> out = kernel_.backward_impl(in, through);
    out.var = gain_ * gain_ * out.var;
    out.align_mean = align_mean_of(g);
    return out;
  }

  /// r^l_out as a function of the input length correlation (LayerNorm(d + 1)'s F).
  T corr_len_map(const T& corr_len) const { return kernel_.corr_len_map(corr_len); }

  /// F'(r^l): the slope of corr_len_map, which scales the gradient covariance.
  T grad_corr_factor(const T& corr_len) const { return kernel_.grad_corr_factor(corr_len); }

  /// 1 - r^l_out from one_minus_corr = 1 - r^l in [0, 2] (LayerNorm(d + 1)'s
  /// corr_complement; docs/accuracy.md).
  T corr_complement(const T& one_minus_corr) const {
    sigprop::detail::require(name, "one_minus_corr", one_minus_corr, [](double v) { return v >= 0 && v <= 2; },
                             "[0, 2] (1 - r for a correlation r in [-1, 1])");
    return kernel_.corr_complement(one_minus_corr);
  }

 private:
  static T checked_width(const T& d) {
    sigprop::detail::require(
        name, "d", d,
        // d + 1 must be a valid LayerNorm width (at most 1e15).
        [](double v) { return std::isfinite(v) && v >= 3 && v <= 1e15 - 1 && std::floor(v) == v; },
        "{3, 4, 5, ..., 999999999999999} (an integer width; d <= 2 has no finite gradient variance)");
    return d;
  }

  static T checked_gain(const T& gain) {
    require_positive(name, "gain", gain);
    return gain;
  }

  static void require_zero(const T& x, const char* parameter) {
    if constexpr (!is_scalar_v<T>)
      if ((x == 0).all()) return;
    sigprop::detail::require(name, parameter, x, [](double v) { return v == 0; },
                             "{0} (the closed form is exact only for mean-zero inputs whose hidden "
                             "units are uncorrelated, such as a pre-norm residual stream; "
                             "montecarlo::simulate measures other inputs)");
  }

  T d_;
  T gain_;
  LayerNorm<T> kernel_;  // LayerNorm over d + 1 units: the same geometry, k = d
};

}  // namespace sigprop
