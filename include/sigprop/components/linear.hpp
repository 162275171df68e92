// sigprop/components/linear.hpp -- y = x W + b, W (d_in x d_out) i.i.d. N(0, weight_var),
// b (d_out) i.i.d. N(0, bias_var) drawn once and shared by all positions (0 by default).
//
// Reference: Kedia et al., "Transformers Get Stable" (ICML 2024), appendix
// B.2 (A.2 in the later version). Exact for any input distribution with
// per-entry mean `mean`, since W is zero-mean and independent of x:
//   E[y] = 0,  Var[y] = d_in * s_w^2 * (s^2 + mu^2),
//   Cov_len[y] = d_in * s_w^2 * (r s^2 + mu^2)  =>  r_out = (r s^2 + mu^2)/(s^2 + mu^2),
//   r^d_out = 0 (distinct output units use independent columns of W);
//   backward dx = g W^T:  Var[dx] = d_out * s_w^2 * Var[g],  r_g unchanged.
// A bias adds s_b^2 to the variance and to the covariance of two positions
// (the mean stays 0 over initializations), and leaves the backward map:
//   Var[y] = d_in s_w^2 m2 + s_b^2,  Cov_len[y] = d_in s_w^2 (r s^2 + mu^2) + s_b^2.
// Weight gradient over one sequence of L positions, dW = x^T g, with x and g
// uncorrelated at initialization (the usual mean-field assumption; checked by
// simulation in docs/schemes.md):
//   E||dW||_F^2 = d_in d_out L [ (s^2 + mu^2) Var[g] + (L - 1)(r s^2 + mu^2) r_g Var[g] ].
// Docs: docs/components/linear.md.
#pragma once

#include "sigprop/core/component.hpp"
#include "sigprop/core/hidden_spread.hpp"

namespace sigprop {

/// E||dLoss/dW||_F^2 for y = x W with W d_in x d_out, over a sequence of
/// `seq_len` positions, given the input moments and the gradient at y.
template <class T>
T weight_grad_sq(const T& d_in, const T& d_out, const T& seq_len, const Moments<T>& in, const GradMoments<T>& g) {
  const T mean_sq = in.mean * in.mean;
  const T per_entry = seq_len * g.var * ((in.var + mean_sq) + (seq_len - 1) * (in.cov_len() + mean_sq) * g.corr_len);
  return d_in * d_out * per_entry;
}

template <class T = double>
class Linear : public Component<Linear<T>, T> {
 public:
  static constexpr const char* name = "sigprop::Linear";
  static constexpr int homogeneity = 1;

  /// `weight_var` is the per-entry variance of W, `bias_var` that of b.
  Linear(T d_in, T d_out, T weight_var, T bias_var)
      : d_in_(d_in), d_out_(d_out), weight_var_(weight_var), bias_var_(bias_var) {
    require_width(name, "d_in", d_in_);
    require_width(name, "d_out", d_out_);
    require_variance(name, "weight_var", weight_var_);
    require_variance(name, "bias_var", bias_var_);
  }

  /// No bias.
  Linear(T d_in, T d_out, T weight_var) : Linear(d_in, d_out, weight_var, T(0 * weight_var)) {}

  const T& d_in() const { return d_in_; }
  const T& d_out() const { return d_out_; }
  const T& weight_var() const { return weight_var_; }
  const T& bias_var() const { return bias_var_; }

  Moments<T> forward_impl(const Moments<T>& in) const {
    const T mean_sq = in.mean * in.mean;
    const T second = in.var + mean_sq;  // E[x^2]
    const T weighted = d_in_ * weight_var_;
    Moments<T> out;
    out.mean = 0 * in.mean;
    out.var = weighted * second + bias_var_;
    // (weighted cov + bias)/(weighted m2 + bias), written as r_x + (1 - r_x) bias/var.
    const T corr_x = math::ratio_or(in.corr_len * in.var + mean_sq, second, 1);
    out.corr_len = corr_x + (1 - corr_x) * math::ratio_or(bias_var_, out.var, 0);
    out.corr_dim = 0 * in.mean;
    out.norm_var_ratio = norm_var_ratio_map(in);
    out.hidden_spread = spread::linear_map(hidden_spread_of(in), d_in_, d_out_);
    out.linear_share = linear_share_of(in);
    return out;
  }

  /// The output's norm_var_ratio (moments.hpp). Given the input, the outputs
  /// are Gaussian with variance proportional to |x|^2, so
  /// |y|^2 = |x|^2 chi^2_{d_out}/d_out up to scale and relative variances
  /// compose: (1 + 2 nu_in/d_in)(1 + 2/d_out) - 1 = (2/d_out)(1 + nu_in (d_out + 2)/d_in),
  /// read with d_out - 1 and d_in for the centred norms: 1 + nu_in (d_out + 1)/d_in.
  /// A bias's share of the variance has no norm fluctuation: the input's
  /// term is scaled by the squared share of x W.
  T norm_var_ratio_map(const Moments<T>& in) const {
    const T weighted = d_in_ * weight_var_ * (in.var + in.mean * in.mean);
    const T share = math::ratio_or(weighted, T(weighted + bias_var_), 1);
    return norm_var_ratio_map(T(norm_var_ratio_of(in) * share * share), d_in_, d_out_);
  }

  /// The same rule for any map that multiplies a d_in-vector of norm ratio
  /// `nu_in` by an independent Gaussian d_in x d_out matrix (attention's
  /// value projection of the softmax-weighted input, components/attention.hpp).
  static T norm_var_ratio_map(const T& nu_in, const T& d_in, const T& d_out) { return 1 + nu_in * (d_out + 1) / d_in; }

  GradMoments<T> backward_impl(const Moments<T>&, const GradMoments<T>& g) const {
    return keeping_activation_alignment(T(d_out_ * weight_var_ * g.var), g.corr_len, g);
  }

  /// E||dLoss/dW||_F^2 over `seq_len` positions for input `in` and gradient
  /// `g` at the output (validated like backward()).
  T weight_grad_sq(const Moments<T>& in, const GradMoments<T>& g, const T& seq_len) const {
    require_moments(name, in);
    require_grad_moments(name, g);
    require_width(name, "seq_len", seq_len);
    return sigprop::weight_grad_sq(d_in_, d_out_, seq_len, in, g);
  }

 private:
  T d_in_, d_out_, weight_var_, bias_var_;
};

}  // namespace sigprop
