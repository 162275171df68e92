// sigprop/components/linear.hpp -- y = x W, W (d_in x d_out) i.i.d. N(0, weight_var).
//
// Reference: Kedia et al., "Transformers Get Stable" (ICML 2024), appendix
// B.2 (A.2 in the later version). Exact for any input distribution with
// per-entry mean `mean`, since W is zero-mean and independent of x:
//   E[y] = 0,  Var[y] = d_in * s_w^2 * (s^2 + mu^2),
//   Cov_len[y] = d_in * s_w^2 * (r s^2 + mu^2)  =>  r_out = (r s^2 + mu^2)/(s^2 + mu^2),
//   r^d_out = 0 (distinct output units use independent columns of W);
//   backward dx = g W^T:  Var[dx] = d_out * s_w^2 * Var[g],  r_g unchanged.
#pragma once

#include "sigprop/core/component.hpp"

namespace sigprop {

template <class T = double>
class Linear : public Component<Linear<T>, T> {
 public:
  static constexpr const char* name = "sigprop::Linear";

  /// `weight_var` is the per-entry variance of W.
  Linear(T d_in, T d_out, T weight_var) : d_in_(d_in), d_out_(d_out), weight_var_(weight_var) {
    require_width(name, "d_in", d_in_);
    require_width(name, "d_out", d_out_);
    require_variance(name, "weight_var", weight_var_);
  }

  const T& d_in() const { return d_in_; }
  const T& d_out() const { return d_out_; }
  const T& weight_var() const { return weight_var_; }

  Moments<T> forward_impl(const Moments<T>& in) const {
    const T mean_sq = in.mean * in.mean;
    const T second = in.var + mean_sq;  // E[x^2]
    Moments<T> out;
    out.mean = 0 * in.mean;
    out.var = d_in_ * weight_var_ * second;
    out.corr_len = math::ratio_or(in.corr_len * in.var + mean_sq, second, 1);
    out.corr_dim = 0 * in.mean;
    return out;
  }

  GradMoments<T> backward_impl(const Moments<T>&, const GradMoments<T>& g) const {
    return {d_out_ * weight_var_ * g.var, g.corr_len};
  }

 private:
  T d_in_, d_out_, weight_var_;
};

}  // namespace sigprop
