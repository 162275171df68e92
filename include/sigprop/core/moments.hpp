// sigprop/core/moments.hpp -- the moment state that every component maps.
//
// Notation follows the DeepScaleLM paper (Kedia et al., "Transformers Get
// Stable", ICML 2024, section 2): an activation tensor is L x d (sequence
// positions x hidden units); corr_len is r^l (correlation of two positions in
// the same hidden unit), corr_dim is r^d (two hidden units of one position).
//
// Four further moments describe one position's vector as a whole; only the
// normalizations' backward maps read them (docs/components/layernorm.md,
// "Norm fluctuation and gradient alignment", "Gradient coupled to the row
// norm"), every other map keeps or resets them:
//   norm_var_ratio    Var[|x_c|^2] of the centred vector in units of its
//                     Gaussian value 2 E[|x_c|^2]^2/(d - 1): 1 for Gaussian
//                     entries, 0 for a normalization's output (norm sqrt(d));
//   align_activation  E[(g . x_c/|x_c|)^2] / (E|g|^2/d), the gradient's energy
//                     along the activation's direction: 1 for a gradient
//                     isotropic in R^d, 0 after a normalization's backward;
//   align_mean        E[(g . 1/sqrt(d))^2] / (E|g|^2/d) = 1 + (d - 1) Corr[g_ij, g_ik]
//                     along the all-ones direction, 0 after LayerNorm's backward.
//   norm_coupling     Cov[log |g_i|^2, log(1/|x_c,i|^2)]: 0 for a gradient
//                     independent of the row norms (the top of a stack);
//                     normalizations and residual sums change it.
// In a Post-LN stack both differ from 1 by O(1), which moves each LayerNorm's
// gradient factor by O(1/d) and the whole stack's by O(N/d).
//
// Two more describe the shape of one sequence's hidden covariance (only
// attention reads them; core/hidden_spread.hpp has the maps):
//   hidden_spread     d tr(S^2)/tr(S)^2 - 1 for S the d x d covariance of the
//                     position-specific parts x_i - mean_k x_k of one
//                     sequence: 0 for isotropic S (the default), about 1
//                     after one square Gaussian weight matrix;
//   linear_share      the share of the position-specific variance that is a
//                     linear image of the input of the innermost residual
//                     branch (1 outside any branch and after a residual sum).
#pragma once

#include <tuple>
#include <type_traits>

#include <Eigen/Core>

#include "sigprop/core/lanes.hpp"

namespace sigprop {

namespace detail {

// The default of a whole-vector moment: `value` (1 for the Gaussian,
// isotropic ones, 0 for the coupling). A dynamic batch cannot know its lane
// count here, so it starts empty, which lanes_or() reads as `value` in every
// lane.
template <class T, int value>
T by_default() {
  if constexpr (is_scalar_v<T>) return T(value);
  else if constexpr (T::SizeAtCompileTime == Eigen::Dynamic) return T();
  else return T::Constant(value);
}

// `value`, or `fallback` in every lane of `like` where a batch left `value`
// unset (empty).
template <int fallback, class T>
T lanes_or(const T& value, const T& like) {
  if constexpr (is_scalar_v<T>) {
    (void)like;
    return value;
  } else {
    return value.size() == like.size() ? value : T(0 * like + fallback);
  }
}

}  // namespace detail

/// Forward moments of one activation entry.
template <class T>
struct Moments {
  T mean{0};      ///< E[x]
  T var{1};       ///< Var[x]
  T corr_len{0};  ///< r^l: Corr[x_{i,j}, x_{k,j}], i != k (along sequence length)
  T corr_dim{0};  ///< r^d: Corr[x_{i,j}, x_{i,k}], j != k (along hidden dimension)
  /// Var[|x_c|^2] / (2 E[|x_c|^2]^2 / (d - 1)) for one position's centred
  /// vector x_c: 1 for Gaussian entries (the default), 0 after a normalization.
  T norm_var_ratio = detail::by_default<T, 1>();
  /// d tr(S^2)/tr(S)^2 - 1 of a sequence's position-specific hidden
  /// covariance S: 0 for isotropic S (the default).
  T hidden_spread = detail::by_default<T, 0>();
  /// Share of the position-specific variance linear in the innermost
  /// residual branch's input: 1 (the default) outside a branch.
  T linear_share = detail::by_default<T, 1>();

  /// Covariance of two positions in one hidden unit: corr_len * var.
  T cov_len() const { return corr_len * var; }
  /// Covariance of two hidden units of one position: corr_dim * var.
  T cov_dim() const { return corr_dim * var; }

  /// Every field, in declaration order: the one list that keys, lane
  /// comparisons and other loops over the state are derived from.
  auto fields() const { return std::tie(mean, var, corr_len, corr_dim, norm_var_ratio, hidden_spread, linear_share); }
};

/// m.norm_var_ratio (1 in the lanes of a batch that left it unset).
template <class T>
T norm_var_ratio_of(const Moments<T>& m) {
  return detail::lanes_or<1>(m.norm_var_ratio, m.var);
}

/// m.hidden_spread (0 in the lanes of a batch that left it unset).
template <class T>
T hidden_spread_of(const Moments<T>& m) {
  return detail::lanes_or<0>(m.hidden_spread, m.var);
}

/// m.linear_share (1 in the lanes of a batch that left it unset).
template <class T>
T linear_share_of(const Moments<T>& m) {
  return detail::lanes_or<1>(m.linear_share, m.var);
}

/// Backward moments of the gradient dLoss/dx (its mean is zero throughout).
template <class T>
struct GradMoments {
  T var{1};       ///< Var[g]
  T corr_len{0};  ///< Corr[g_{i,j}, g_{k,j}], i != k
  /// E[(g . x_c/|x_c|)^2] / (E|g|^2/d) with x the forward activation at the
  /// same point: 1 isotropic (the default), 0 after a normalization's backward.
  T align_activation = detail::by_default<T, 1>();
  /// E[(g . 1/sqrt(d))^2] / (E|g|^2/d): 1 isotropic (the default), 0 after
  /// LayerNorm's backward (its input gradient sums to zero over the units).
  T align_mean = detail::by_default<T, 1>();
  /// Cov[log |g_i|^2, log(1/|x_c,i|^2)] over positions i (and models): how
  /// much larger the gradient is where the residual stream's row norm is
  /// small. 0 for a gradient independent of the activation (the default);
  /// every normalization's backward adds the relative variance of the norm
  /// it divides by, 2 nu/(d - 1), and a residual sum carries it to its input.
  T norm_coupling = detail::by_default<T, 0>();

  T cov_len() const { return corr_len * var; }
};

/// g.align_activation (1 in the lanes of a batch that left it unset).
template <class T>
T align_activation_of(const GradMoments<T>& g) {
  return detail::lanes_or<1>(g.align_activation, g.var);
}

/// g.align_mean (1 in the lanes of a batch that left it unset).
template <class T>
T align_mean_of(const GradMoments<T>& g) {
  return detail::lanes_or<1>(g.align_mean, g.var);
}

/// g.norm_coupling (0 in the lanes of a batch that left it unset).
template <class T>
T norm_coupling_of(const GradMoments<T>& g) {
  return detail::lanes_or<0>(g.norm_coupling, g.var);
}

/// The input gradient {var, corr_len} of a map y = f(x) that keeps the output
/// gradient's alignment with the activation, x . J^T g = y . g up to the norm
/// ratio that the variances already carry (y = x W, ReLU, inverted dropout;
/// GeLU and SiLU approximately), with an isotropic all-ones component.
template <class T>
GradMoments<T> keeping_activation_alignment(const T& var, const T& corr_len, const GradMoments<T>& g) {
  GradMoments<T> out{var, corr_len};
  out.align_activation = align_activation_of(g);
  return out;
}

}  // namespace sigprop
