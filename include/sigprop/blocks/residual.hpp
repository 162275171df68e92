// sigprop/blocks/residual.hpp -- y = lambda * x + beta * f(x).
//
// Reference: Kedia et al. (ICML 2024), section 2 and appendix G ("adding two
// branches"); DeepScaleLM's scaled residual (section 3.5). At initialization
// the skip x and the branch f(x) are uncorrelated (f ends in a zero-mean
// weight matrix), so variances and covariances add:
//   Var[y]   = lambda^2 Var[x] + beta^2 Var[f],
//   Cov_l[y] = lambda^2 Cov_l[x] + beta^2 Cov_l[f]   (r_y: variance-weighted average),
// and likewise along the hidden axis. Backward: dx = lambda g + beta J_f^T g,
// again two uncorrelated terms, so gradient variances and covariances add.
#pragma once

#include <utility>

#include "sigprop/core/component.hpp"

namespace sigprop {

template <class T, class Branch>
class Residual : public Component<Residual<T, Branch>, T> {
 public:
  static constexpr const char* name = "sigprop::Residual";
  static constexpr bool exact_forms = Branch::exact_forms;

  /// `skip_scale` is lambda and `branch_scale` is beta (both 1 for a plain residual).
  Residual(Branch branch, T skip_scale = T(1), T branch_scale = T(1))
      : branch_(std::move(branch)), skip_scale_(skip_scale), branch_scale_(branch_scale) {
    require_finite(name, "skip_scale", skip_scale_);
    require_finite(name, "branch_scale", branch_scale_);
  }

  const Branch& branch() const { return branch_; }
  const T& skip_scale() const { return skip_scale_; }
  const T& branch_scale() const { return branch_scale_; }

  Moments<T> forward_impl(const Moments<T>& in) const {
    return combine(in, branch_.forward(in));
  }

  /// The output given the branch output already computed (saves a pass).
  Moments<T> combine(const Moments<T>& in, const Moments<T>& branch_out) const {
    const T skip2 = skip_scale_ * skip_scale_, branch2 = branch_scale_ * branch_scale_;
    Moments<T> out;
    out.mean = skip_scale_ * in.mean + branch_scale_ * branch_out.mean;
    out.var = skip2 * in.var + branch2 * branch_out.var;
    out.corr_len = math::ratio_or(skip2 * in.cov_len() + branch2 * branch_out.cov_len(), out.var, 0);
    out.corr_dim = math::ratio_or(skip2 * in.cov_dim() + branch2 * branch_out.cov_dim(), out.var, 0);
    return out;
  }

  Domain<T> domain_impl(const Moments<T>& in) const { return branch_.domain(in); }

  GradMoments<T> backward_impl(const Moments<T>& in, const GradMoments<T>& g) const {
    const GradMoments<T> through = branch_.backward(in, g);
    const T skip2 = skip_scale_ * skip_scale_, branch2 = branch_scale_ * branch_scale_;
    GradMoments<T> out;
    out.var = skip2 * g.var + branch2 * through.var;
    out.corr_len = math::ratio_or(skip2 * g.cov_len() + branch2 * through.cov_len(), out.var, 0);
    return out;
  }

 private:
  Branch branch_;
  T skip_scale_, branch_scale_;
};

/// residual(f, lambda, beta): x -> lambda x + beta f(x).
template <class Branch, class T = typename Branch::value_type>
Residual<T, Branch> residual(Branch branch, T skip_scale = T(1), T branch_scale = T(1)) {
  return Residual<T, Branch>(std::move(branch), skip_scale, branch_scale);
}

}  // namespace sigprop
