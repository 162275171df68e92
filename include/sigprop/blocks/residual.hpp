// sigprop/blocks/residual.hpp -- y = lambda * x + beta * f(x).
//
// Reference: Kedia et al. (ICML 2024), section 2 and appendix G ("adding two
// branches"); DeepScaleLM's scaled residual (section 3.5). At initialization
// the skip x and the branch f(x) are uncorrelated (f ends in a zero-mean
// weight matrix), so variances and covariances add:
//   Var[y]   = lambda^2 Var[x] + beta^2 Var[f],
//   Cov_l[y] = lambda^2 Cov_l[x] + beta^2 Cov_l[f]   (r_y: variance-weighted average),
// and likewise along the hidden axis. Backward: dx = lambda g + beta J_f^T g,
// two terms whose variances and length covariances add, plus their cross
// term through the branch's weights where g lacks its part along the sum
// (skip_branch_cross: at one position and across two).
// The whole-vector moments (core/moments.hpp) of the sum and of its input
// gradient are energy-weighted mixtures, derived at combine() and
// backward_impl().
#pragma once

#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "sigprop/core/component.hpp"
#include "sigprop/core/record.hpp"
#include "sigprop/core/serial.hpp"

namespace sigprop {

namespace detail {

template <class C, class = void>
struct has_d_out : std::false_type {};
template <class C>
struct has_d_out<C, std::void_t<decltype(std::declval<const C&>().d_out())>> : std::true_type {};

template <class C, class = void>
struct has_d : std::false_type {};
template <class C>
struct has_d<C, std::void_t<decltype(std::declval<const C&>().d())>> : std::true_type {};

template <class T, class First, class... Rest>
std::optional<T> last_width(const First& first, const Rest&... rest);

// The output width of a branch, where it can be read off: a Linear's d_out,
// a normalization's d, the last such part of a chain behind elementwise maps.
template <class T, class C>
std::optional<T> output_width(const C& c) {
  if constexpr (has_d_out<C>::value) return c.d_out();
  else if constexpr (has_d<C>::value) return c.d();
  else if constexpr (is_serial_v<C>) {
    return std::apply([](const auto&... parts) { return last_width<T>(parts...); }, c.parts());
  } else {
    return std::nullopt;
  }
}

template <class T, class First, class... Rest>
std::optional<T> last_width(const First& first, const Rest&... rest) {
  if constexpr (sizeof...(Rest) > 0) {
    const std::optional<T> later = last_width<T>(rest...);
    const bool later_all_elementwise = (Rest::elementwise && ...);
    if (later || !later_all_elementwise) return later;
  }
  return output_width<T>(first);
}

}  // namespace detail

template <class T, class Branch>
class Residual : public Component<Residual<T, Branch>, T> {
 public:
  static constexpr const char* name = "sigprop::Residual";
  static constexpr bool exact_forms = Branch::exact_forms;
  static constexpr int homogeneity = Branch::homogeneity == 1 ? 1 : -1;
  static constexpr bool mixes_positions = Branch::mixes_positions;
  static constexpr bool sets_norm_coupling = true;

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
    return sum_of(in, branch_.forward_trusted(branch_input(in)));
  }

  /// The branch's input: `in`, all of whose position-specific part is
  /// linear in itself (Moments::linear_share = 1, core/hidden_spread.hpp).
  static Moments<T> branch_input(Moments<T> in) {
    in.linear_share = 0 * in.var + 1;
    return in;
  }

  /// The output given the branch output already computed (saves a pass);
  /// checked like forward() (a sum that overflows throws overflow_error).
  Moments<T> combine(const Moments<T>& in, const Moments<T>& branch_out) const {
    return this->checked(name, sum_of(in, branch_out));
  }

 private:
  Moments<T> sum_of(const Moments<T>& in, const Moments<T>& branch_out) const {
    const T skip2 = skip_scale_ * skip_scale_, branch2 = branch_scale_ * branch_scale_;
    Moments<T> out;
    out.mean = skip_scale_ * in.mean + branch_scale_ * branch_out.mean;
    out.var = skip2 * in.var + branch2 * branch_out.var;
    out.corr_len = math::ratio_or(skip2 * in.cov_len() + branch2 * branch_out.cov_len(), out.var, 0);
    out.corr_dim = math::ratio_or(skip2 * in.cov_dim() + branch2 * branch_out.cov_dim(), out.var, 0);
    // |x + f|^2 = |x|^2 + |f|^2 + 2 x.f with x.f of variance a b (d - 1) (f
    // ends in a fresh weight matrix), so in units of 2 (a + b)^2/(d - 1)
    //   nu_out = (nu_x a^2 + nu_f b^2 + 2 a b) / (a + b)^2   (= 1 for two Gaussians).
    // In terms of the branch share t = b/(a + b), which cannot overflow:
    //   nu_out = nu_x (1 - t)^2 + nu_f t^2 + 2 t (1 - t).
    const auto [a, b] = centred_energies(in, branch_out);
    const T t = math::ratio_or(b, a + b, 0);
    out.norm_var_ratio = norm_var_ratio_of(in) * (1 - t) * (1 - t) + norm_var_ratio_of(branch_out) * t * t + 2 * t * (1 - t);
    out.hidden_spread = spread::residual_sum(in, branch_out, T(skip2 * spread::position_var(in)),
                                             T(branch2 * spread::position_var(branch_out)));
    out.linear_share = 0 * out.var + 1;
    return out;
  }

 public:

  Domain<T> domain_impl(const Moments<T>& in) const { return branch_.domain_trusted(in); }

  /// The record of a forward pass (core/record.hpp): the input, the
  /// branch's record and its output.
  struct Record {
    Moments<T> in;
    detail::record_t<Branch> branch;
    Moments<T> branch_out;
  };

  /// The output for a validated `in`, and the record of the pass.
  std::pair<Moments<T>, Record> record(const Moments<T>& in) const {
    auto [f, branch_record] = detail::record(branch_, branch_input(in));
    Moments<T> out = this->checked(name, sum_of(in, f));
    return {std::move(out), Record{in, std::move(branch_record), std::move(f)}};
  }

  /// domain() from the record of the forward pass: the branch's, at its input.
  Domain<T> domain_recorded(const Record& r) const { return detail::domain_recorded(branch_, r.branch); }

  GradMoments<T> backward_impl(const Moments<T>& in, const GradMoments<T>& g) const {
    // The branch output is needed before the branch's backward; the record
    // keeps it with the branch's own (one forward pass, as without the sum).
    auto [f, branch_record] = detail::record(branch_, branch_input(in));
    return backward_recorded_impl(Record{in, std::move(branch_record), std::move(f)}, g);
  }

  GradMoments<T> backward_recorded_impl(const Record& r, const GradMoments<T>& g) const {
    const T skip2 = skip_scale_ * skip_scale_, branch2 = branch_scale_ * branch_scale_;
    const Moments<T>& in = r.in;
    const Moments<T>& f = r.branch_out;
    // Alignment of g (at the sum s) with a direction at cos^2 = c to s: the
    // direction of s holds a_s of the isotropic share, the complement is
    // taken isotropic, so c a_s + (1 - c); c = a/(a + b) for the skip x,
    // b/(a + b) for the branch output f.
    const auto [a, b] = centred_energies(in, f);
    const T skip_share = math::ratio_or(a, a + b, 1), along_sum = align_activation_of(g);
    GradMoments<T> to_branch = g;
    to_branch.align_activation = (1 - skip_share) * along_sum + skip_share;
    // Coupling of g to the input's row norm: g sees the norm of s = lambda x
    // + beta f only, whose log-norm regresses on x's with slope
    // Cov[u_s, u_x]/Var[u_s] = skip_share nu_x/nu_s (the norm fluctuations of
    // x and f independent; sum_of()'s nu_s).
    const T nu_sum = norm_var_ratio_of(sum_of(in, f));
    const T coupling_in = skip_share * math::ratio_or(norm_var_ratio_of(in), nu_sum, 0) * norm_coupling_of(g);
    to_branch.norm_coupling = coupling_in;
    const GradMoments<T> through = detail::backward_recorded(branch_, r.branch, to_branch);
    const T skip_part = skip2 * g.var, branch_part = branch2 * through.var;
    GradMoments<T> out;
    const auto [cross_var, cross_cov] =
        skip_branch_cross(g, along_sum, math::ratio_or(b, a + b, 0), through.corr_len);
    out.var = skip_part + branch_part + cross_var;
    // The log-energy of the sum of the two terms: their energy-weighted mean.
    out.norm_coupling =
        math::ratio_or(skip_part * coupling_in + branch_part * norm_coupling_of(through), skip_part + branch_part, 0);
    out.corr_len =
        math::ratio_or(skip_part * g.corr_len + branch_part * through.corr_len + cross_cov, out.var, 0);
    out.align_mean =
        math::ratio_or(skip_part * align_mean_of(g) + branch_part * align_mean_of(through), out.var, 1);
    // x . g_x = lambda x . g_s + beta x . J_f^T g_s, and by Euler's theorem
    // x . J_f^T g_s = k f . g_s for a branch homogeneous of degree k:
    // k = 1: x . g_x = s . g_s, so E[(x . g_x)^2] = E[(s . g_s)^2];
    // k = 0: x . g_x = lambda x . g_s;
    // otherwise the two terms are taken uncorrelated.
    const T x_second = in.var + in.mean * in.mean;
    if constexpr (Branch::homogeneity == 1) {
      const Moments<T> s = sum_of(in, f);
      out.align_activation = along_sum * math::ratio_or(T(s.var + s.mean * s.mean), x_second, 1) *
                             math::ratio_or(g.var, out.var, 1);
    } else {
      const T skip_align = skip_share * along_sum + 1 - skip_share;
      if constexpr (Branch::homogeneity == 0)
        out.align_activation = math::ratio_or(skip_part * skip_align, out.var, 1);
      else
        out.align_activation =
            math::ratio_or(skip_part * skip_align + branch_part * align_activation_of(through), out.var, 1);
    }
    return out;
  }

 private:
  // 2 lambda beta E[g_s,i . (J_f^T g_s)_k]/d, the covariance of the skip
  // and branch terms of the input gradient through the branch's weights, at
  // one position (i = k: to the variance) and across two (to the length
  // covariance). The part of g_s missing along the sum's direction (1 - a_s
  // of isotropic) meets E[s^ . J_f s^] = (lambda/beta) c_f (Euler's
  // J_f x = f for a branch of degree 1, taken as such unless the branch is
  // of degree 0, where J_f x = 0 and the term is O(1/d^2)), so
  //   cross = -2 lambda^2 (1 - a_s) c_f Var[g_s] / d,
  // c_f the branch's share of the sum's energy: -0.8 % of Var[g_x] at
  // lambda = beta = 1, d = 64 after a LayerNorm (tests/test_vector_moments.cpp).
  // A position-wise branch meets g_s,i through its own Jacobian at i:
  // `cross` at one position, and across two the share of it carried by the
  // branch gradient's length correlation r_f, `r_f cross`. Attention's
  // Jacobian spreads position m's gradient over every position k with the
  // weights P_mk, so the term collects sum_m P_mk Corr[g_s,m, g_s,i] =
  // 1/L + (1 - 1/L) r_s of `cross`, the same at one position and across two
  // (r_s the length correlation of g_s; the 1/L is dropped).
  // docs/components/layernorm.md, "Skip-branch cross term along length".
  std::pair<T, T> skip_branch_cross(const GradMoments<T>& g, const T& along_sum, const T& branch_share,
                                    const T& branch_corr) const {
    if constexpr (Branch::homogeneity == 0) {
      return {0 * g.var, 0 * g.var};
    } else {
      const std::optional<T> width = detail::output_width<T>(branch_);
      if (!width) return {0 * g.var, 0 * g.var};
      const T cross = -2 * skip_scale_ * skip_scale_ * (1 - along_sum) * branch_share * g.var / *width;
      if constexpr (Branch::mixes_positions) return {T(cross * g.corr_len), T(cross * g.corr_len)};
      else return {cross, T(cross * branch_corr)};
    }
  }

  // Per-unit energies of the centred skip and branch terms in the sum.
  std::pair<T, T> centred_energies(const Moments<T>& in, const Moments<T>& branch_out) const {
    return {T(skip_scale_ * skip_scale_ * in.var * (1 - in.corr_dim)),
            T(branch_scale_ * branch_scale_ * branch_out.var * (1 - branch_out.corr_dim))};
  }

  Branch branch_;
  T skip_scale_, branch_scale_;
};

/// residual(f, lambda, beta): x -> lambda x + beta f(x).
template <class Branch, class T = typename Branch::value_type>
Residual<T, Branch> residual(Branch branch, T skip_scale = T(1), T branch_scale = T(1)) {
  return Residual<T, Branch>(std::move(branch), skip_scale, branch_scale);
}

}  // namespace sigprop
