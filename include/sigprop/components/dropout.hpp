// sigprop/components/dropout.hpp -- inverted dropout with probability p:
// y = x * m / (1 - p), m ~ Bernoulli(1 - p) independent per entry.
//
// Reference: Kedia et al. (ICML 2024), appendix B.3 (A.3 later). Exact:
//   E[y] = mu,  Var[y] = (s^2 + p mu^2)/(1 - p),
//   covariances between distinct entries are unchanged (independent masks), so
//   r_out = r s^2 (1 - p)/(s^2 + p mu^2) along length and along the hidden axis;
//   backward dx = g m/(1 - p): Var[dx] = Var[g]/(1 - p), covariance unchanged,
//   so r_g,in = (1 - p) r_g.
// Docs: docs/components/dropout.md.
#pragma once

#include "sigprop/core/component.hpp"

namespace sigprop {

template <class T = double>
class Dropout : public Component<Dropout<T>, T> {
 public:
  static constexpr const char* name = "sigprop::Dropout";
  static constexpr bool elementwise = true;
  static constexpr int homogeneity = 1;

  explicit Dropout(T p) : p_(p) { require_probability(name, "p", p_); }

  const T& p() const { return p_; }

  Moments<T> forward_impl(const Moments<T>& in) const {
    const T keep = 1 - p_;
    Moments<T> out;
    out.mean = in.mean;
    out.var = (in.var + p_ * in.mean * in.mean) / keep;
    // Cov is unchanged, so r_out = Cov / Var[y]; Var[y] = 0 only for a constant 0 input.
    out.corr_len = math::ratio_or(in.corr_len * in.var, out.var, 0);
    out.corr_dim = math::ratio_or(in.corr_dim * in.var, out.var, 0);
    // The mask adds Var[sum m_j x_j^2/(1 - p)] = (p/(1 - p)) sum E[x_j^4], with
    // E[x^4] = 3 E[x^2]^2 for Gaussian entries: 3p/(2(1 - p)) in units of 2 E^2/d.
    out.norm_var_ratio = norm_var_ratio_of(in) + 3 * p_ / (2 * keep);
    // The mask's noise: isotropic, and unit j's share p/(1 - p) m_j^2 of its
    // shared value m_j ~ N(mu, r s^2) (core/hidden_spread.hpp).
    spread::carry_elementwise(*this, in, out);
    const T shared = math::clamp_nonnegative(T(in.corr_len * in.var)), odds = p_ / keep;
    const T heterogeneity = 2 * shared * shared + 4 * in.mean * in.mean * shared;
    out.hidden_spread += math::ratio_or(T(odds * odds * heterogeneity), T(spread::position_var(out) * spread::position_var(out)), 0);
    return out;
  }

  GradMoments<T> backward_impl(const Moments<T>&, const GradMoments<T>& g) const {
    // x . g_in = y . g: the activation alignment is kept; the all-ones
    // component of m g/(1 - p) is (1 - p) a_1 + p of isotropic.
    GradMoments<T> out = keeping_activation_alignment(T(g.var / (1 - p_)), T((1 - p_) * g.corr_len), g);
    out.align_mean = (1 - p_) * align_mean_of(g) + p_;
    return out;
  }

 private:
  T p_;
};

}  // namespace sigprop
