// sigprop/core/moments.hpp -- the moment state that every component maps.
//
// Notation follows the DeepScaleLM paper (Kedia et al., "Transformers Get
// Stable", ICML 2024, section 2): an activation tensor is L x d (sequence
// positions x hidden units); corr_len is r^l (correlation of two positions in
// the same hidden unit), corr_dim is r^d (two hidden units of one position).
#pragma once

namespace sigprop {

/// Forward moments of one activation entry.
template <class T>
struct Moments {
  T mean{0};      ///< E[x]
  T var{1};       ///< Var[x]
  T corr_len{0};  ///< r^l: Corr[x_{i,j}, x_{k,j}], i != k (along sequence length)
  T corr_dim{0};  ///< r^d: Corr[x_{i,j}, x_{i,k}], j != k (along hidden dimension)

  /// Covariance of two positions in one hidden unit: corr_len * var.
  T cov_len() const { return corr_len * var; }
  /// Covariance of two hidden units of one position: corr_dim * var.
  T cov_dim() const { return corr_dim * var; }
};

/// Backward moments of the gradient dLoss/dx (its mean is zero throughout).
template <class T>
struct GradMoments {
  T var{1};       ///< Var[g]
  T corr_len{0};  ///< Corr[g_{i,j}, g_{k,j}], i != k

  T cov_len() const { return corr_len * var; }
};

}  // namespace sigprop
