// sigprop/components/silu.hpp -- y = SiLU(x) = x sigma(x) entrywise, sigma the
// logistic sigmoid 1/(1 + e^-x) (also called Swish-1; the gate of SwiGLU).
//
// References: Elfwing, Uchibe and Doya, "Sigmoid-weighted linear units for
// neural network function approximation in reinforcement learning" (Neural
// Networks 107, 2018); Ramachandran, Zoph and Le, "Searching for activation
// functions" (2017, arXiv:1710.05941); Shazeer, "GLU variants improve
// transformer" (2020, arXiv:2002.05202).
//
// Input x ~ N(mu, s^2), a pair of entries with correlation r (corr_len or
// corr_dim, through the same kernel); g independent of x with mean 0:
//   mean  E[SiLU(x)]
//   var   Var[SiLU(x)]
//   corr  Cov[SiLU(x1), SiLU(x2)] / Var[SiLU(x)]
//   Var[dx]         = Var[g] E[SiLU'(x)^2],    SiLU'(x) = sigma(x) (1 + x sigma(-x))
//   Corr[dx1, dx2]  = r_g E[SiLU'(x1) SiLU'(x2)] / E[SiLU'(x)^2]   (r = corr_len).
// No closed form is known: these Gaussian expectations are evaluated
// numerically for any input mean, to about 1e-15. The correlations come from
// the Hermite expansion (Mehler's formula, numerics/hermite_expansion.hpp) where
// its Parseval sums close, else at large variances from the ReLU split
// SiLU = ReLU - h (relu.hpp's closed form plus integrals over h's support),
// else from nested adaptive Gauss-Kronrod (numerics/quadrature.hpp).
// s = 0, or a standardized variance below 1e-292: SiLU(mu), variance 0, the
// input's correlations; E[SiLU'^2] = SiLU'(mu)^2 and r_g.
// Docs: docs/components/silu.md ("How the moments are evaluated", "Accuracy").
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>

#include "sigprop/components/detail/activation_norm.hpp"
#include "sigprop/components/relu.hpp"
#include "sigprop/core/component.hpp"
#include "sigprop/core/memo.hpp"
#include "sigprop/numerics/hermite_expansion.hpp"
#include "sigprop/numerics/quadrature.hpp"
#include "sigprop/numerics/sigmoid.hpp"

namespace sigprop {

namespace detail {

/// Moments of SiLU(mu + s z), z ~ N(0, 1), s > 0 (header comment). Scalar
/// only; R is at least double.
template <class R>
class SiluQuadrature {
 public:
  using Expansion = HermiteExpansion<R>;

  /// How the nested quadrature takes the partner's conditional expectation:
  /// `automatic` by a fixed Gauss-Hermite rule where the partner is narrow,
  /// `adaptive` always adaptively (the tests' reference).
  enum class PartnerRule { automatic, adaptive };

  SiluQuadrature(R mean, R var, PartnerRule partner = PartnerRule::automatic)
      : mu_(mean), s_(std::sqrt(var)), kink_(-mean / s_), at_mu_(mean), partner_(partner) {
    // E[u] cancels (u is odd to first order): its floor is the rms of u.
    const R rms = std::sqrt(outer(
        [this](R z) {
          const R v = u(z);
          return v * v;
        },
        0));
    shift_ = outer([this](R z) { return u(z); }, rms);
  }

  /// E[SiLU(x)].
  R mean() const { return silu_value(mu_) + s_ * shift_; }

  /// Var[SiLU(x)] / s^2.
  R var_per_var() const {
    return outer(
        [this](R z) {
          const R c = u(z) - shift_;
          return c * c;
        },
        0);
  }

  /// Cov[SiLU(x1), SiLU(x2)] / s^2 at correlation r; `var_per_var` is
  /// var_per_var() (the floor of the tolerance).
  R cov_per_var(R r, R var_per_var) const {
    if (r == 0) return 0;  // independent Gaussians
    const R c = std::sqrt((1 - r) * (1 + r)), inner_floor = std::sqrt(var_per_var);
    return outer(
        [&](R z) {
          const R partner =
              c == 0 ? u(r * z) : inner(z, r, c, [&](R w) { return u(r * z + c * w); }, inner_floor);
          return (u(z) - shift_) * (partner - shift_);
        },
        var_per_var, partner_kink(r), partner_width(r, c));
  }

  /// Corr[SiLU(x1), SiLU(x2)] at correlation r; `var_per_var` is
  /// var_per_var(). From the Hermite expansion of u where it closes against
  /// var_per_var (numerics/hermite_expansion.hpp), else cov_per_var / var_per_var.
  R corr(R r, R var_per_var) const {
    if (r == 0) return 0;
    const auto& e = expansion(Expansion::Check::value, var_per_var);
    if (e) return e->value_pair(r) / e->value_energy();
    return (splits(r) ? cov_per_var_split(r, var_per_var) : cov_per_var(r, var_per_var)) / var_per_var;
  }

  /// E[SiLU'(x1) SiLU'(x2)] / E[SiLU'(x)^2] at correlation r; `second` is
  /// grad_second(). As corr(), with the derivative's Parseval sum.
  R grad_corr(R r, R second) const {
    const auto& e = expansion(Expansion::Check::derivative, second);
    if (e) return e->derivative_pair(r) / e->derivative_energy();
    return (splits(r) ? grad_cross_split(r, second) : grad_cross(r, second)) / second;
  }

  /// Whether the correlations at r not given by the expansion come from the
  /// ReLU split rather than the nested quadrature: s >= 3, mu/s >= -4 and
  /// r <= 0.999 (nearer 1 the split's terms cancel; docs/components/silu.md).
  bool splits(R r) const { return s_ >= 3 && kink_ <= 4 && r <= R(0.999); }

  /// cov_per_var by the ReLU split: SiLU = ReLU - h, h = silu_relu_gap, so
  ///   Cov[SiLU1, SiLU2] = s^2 C(a, r) - 2 Cov[ReLU1, h2] + Cov[h1, h2]
  /// with C the ReLU's closed form (relu.hpp, a = mu/s), Cov[ReLU1, h2] =
  /// E[h(x2) (E[ReLU(x1) | x2] - E ReLU)] and E[ReLU(x1) | x2] =
  /// sc phi(m/sc) + m Phi(m/sc), m = mu + r (x2 - mu), sc = s sqrt(1 - r^2);
  /// the integrals are over h's support only. `var_per_var` is var_per_var().
  R cov_per_var_split(R r, R var_per_var) const {
    if (r == 0) return 0;
    const R a = -kink_, cdf = math::normal_cdf(a), pdf = math::normal_pdf(a);
    using Wide = std::conditional_t<std::is_same_v<R, double>, long double, R>;
    const Wide aw = Wide(mu_) / Wide(s_);
    const R relu = R(relu_standardized_cov(aw, math::normal_cdf(aw), math::normal_cdf(-aw), math::normal_pdf(aw), Wide(r)));
    const R var = s_ * s_ * var_per_var, relu_mean = s_ * (pdf + a * cdf);
    const R sc = s_ * std::sqrt((1 - r) * (1 + r));
    const auto partner = [&](R x) { return mu_ + r * (x - mu_); };
    const auto relu_given = [&](R m) {  // E[(m + sc w)^+], w ~ N(0, 1)
      return sc > 0 ? sc * math::normal_pdf(m / sc) + m * math::normal_cdf(m / sc) : std::max(m, R(0));
    };
    const R feature = mu_ - mu_ / r, width = sc / std::abs(r);  // where the partner's m crosses 0
    const R relu_gap = gap_expect(
        [&](R x) { return silu_relu_gap(x) * (relu_given(partner(x)) - relu_mean); }, mu_, s_, var, feature, width);
    const R gap_mean = gap_expect([](R x) { return silu_relu_gap(x); }, mu_, s_, R(0));
    const R gap_pair = gap_expect(
        [&](R x) {
          // The inner integral is at most max h = 0.2785 and its error enters
          // times h: it is skipped where h 0.2785 < 1e-16 var, its floor is var / h.
          const R h = silu_relu_gap(x);
          if (!(h * R(0.2785) >= negligible() * var)) return R(0);
          return h * gap_expect([](R y) { return silu_relu_gap(y); }, partner(x), sc, var / h);
        },
        mu_, s_, var, feature, width);
    return relu + (gap_pair - gap_mean * gap_mean - 2 * relu_gap) / (s_ * s_);
  }

  /// grad_cross by the split SiLU' = 1{x > 0} + q, q = silu_step_gap:
  ///   E[SiLU'1 SiLU'2] = P(x1 > 0, x2 > 0) + 2 E[q(x2) Phi(m/sc)] + E[q1 q2],
  /// the orthant probability in closed form (relu.hpp), m and sc as above.
  R grad_cross_split(R r, R second) const {
    if (r == 0) return grad_cross(r, second);  // E[SiLU']^2, one 1-D integral
    const R a = -kink_;
    const ReluOrthant<R> both_positive(a, math::normal_cdf(a), r);  // P(U1 < a, U2 < a)
    const R sc = s_ * std::sqrt((1 - r) * (1 + r));
    const auto partner = [&](R x) { return mu_ + r * (x - mu_); };
    const auto step_given = [&](R m) {  // P(m + sc w > 0)
      return sc > 0 ? math::normal_cdf(m / sc) : R(m > 0 ? 1 : 0);
    };
    const R feature = mu_ - mu_ / r, width = sc / std::abs(r);  // where the partner's m crosses 0
    const R step_gap =
        gap_expect([&](R x) { return silu_step_gap(x) * step_given(partner(x)); }, mu_, s_, second, feature, width);
    const R gap_pair = gap_expect(
        [&](R x) {
          const R q = silu_step_gap(x);  // as in cov_per_var_split, with max |q| = 1/2
          if (!(std::abs(q) / 2 >= negligible() * second)) return R(0);
          return q * gap_expect([](R y) { return silu_step_gap(y); }, partner(x), sc, second / std::abs(q));
        },
        mu_, s_, second, feature, width);
    return both_positive.orthant + 2 * step_gap + gap_pair;
  }

  /// Where the expansion's Parseval check fails with every rule, so that
  /// corr() and grad_corr() do not attempt it (four rules, up to 512 nodes):
  /// s >= 4.5 with -12 <= mu/s <= 3.5 (test_silu, "the expansion is not
  /// attempted where it cannot close").
  bool expansion_hopeless() const { return s_ >= R(4.5) && kink_ <= 12 && kink_ >= R(-3.5); }

  /// The expansion as Expansion::expand builds it, attempted regardless of
  /// expansion_hopeless() (for the test of that region).
  std::optional<Expansion> attempt_expansion(typename Expansion::Check check, R energy) const {
    return Expansion::expand([this](R z) { return u(z); }, energy, check, expansion_tolerance());
  }

  /// Whether corr() and grad_corr() use the Hermite expansion at this input.
  bool corr_by_expansion(R var_per_var) const { return expansion(Expansion::Check::value, var_per_var).has_value(); }
  bool grad_corr_by_expansion(R second) const { return expansion(Expansion::Check::derivative, second).has_value(); }

  /// E[SiLU'(x)^2].
  R grad_second() const {
    return outer(
        [this](R z) {
          const R d = derivative(z);
          return d * d;
        },
        0);
  }

  /// E[SiLU'(x1) SiLU'(x2)] at correlation r; `second` is grad_second().
  R grad_cross(R r, R second) const {
    const R inner_floor = std::sqrt(second);
    if (r == 0) {  // E[SiLU'(x)]^2
      const R m = outer([this](R z) { return derivative(z); }, inner_floor);
      return m * m;
    }
    const R c = std::sqrt((1 - r) * (1 + r));
    return outer(
        [&](R z) {
          const R partner = c == 0 ? derivative(r * z)
                                   : inner(z, r, c, [&](R w) { return derivative(r * z + c * w); }, inner_floor);
          return derivative(z) * partner;
        },
        second, partner_kink(r), partner_width(r, c));
  }

 private:
  // (SiLU(mu + s t) - SiLU(mu)) / s and SiLU'(mu + s t).
  R u(R t) const { return silu_difference(mu_, at_mu_, R(s_ * t)) / s_; }
  R derivative(R t) const { return silu_derivative_near(mu_, at_mu_, R(s_ * t)); }

  // E[f(z)] over z ~ N(0, 1); SiLU's transition is at z = -mu/s, of width 1/s.
  template <class F>
  R outer(F f, R floor, R partner_kink = std::numeric_limits<R>::quiet_NaN(), R partner_width = 0) const {
    return expect(f, floor, kink_, s_, partner_kink, partner_width);
  }

  // The partner's transition as a function of z: its argument mu + r s z
  // crosses 0 at z = kink/r, over a width max(c, 1/s)/|r| (c = sqrt(1 - r^2)).
  // Returned for r < 0 only: for r > 0 it lies beside the own kink's cuts.
  R partner_kink(R r) const { return r < 0 ? kink_ / r : std::numeric_limits<R>::quiet_NaN(); }
  R partner_width(R r, R c) const { return std::max(c, 1 / s_) / std::abs(r); }

  // E[f(w)] over the partner's w ~ N(0, 1), x2 = mu + s (r z + c w): the
  // transition is at w = (-mu/s - r z)/c, of width 1/(s c).
  template <class F>
  R inner(R z, R r, R c, F f, R floor) const {
    if (partner_ == PartnerRule::automatic && s_ * c <= narrow_partner()) return narrow_expect(f);
    return expect(f, floor, (kink_ - r * z) / c, s_ * c);
  }

  // E[f(W)], W ~ N(0, 1), for a partner narrower than narrow_partner(): f(w)
  // is SiLU or SiLU' at m + scale w, analytic in the strip |Im w| < pi/scale
  // (the sigmoid's poles at +-i pi), so the fixed Gauss-Hermite rule of
  // narrow_nodes() nodes converges to rounding (docs/components/silu.md,
  // "Narrow partners").
  template <class F>
  static R narrow_expect(F f) {
    static const GaussHermiteRule<R> rule(narrow_nodes());
    R sum = 0;
    for (Eigen::Index j = 0; j < rule.nodes.size(); ++j) sum += rule.weight(j) * f(rule.nodes(j));
    return sum;
  }

  // E[f(Z)], Z ~ N(0, 1), to 1e-12 max(|E f|, floor), for f built from
  // SiLU(m + scale Z) with kink = -m/scale and, for a pair, the partner's
  // conditional expectation, whose transition lies at partner_kink with width
  // partner_width (cut like the own kink where narrower than 0.1). The range
  // reaches 12 beyond the integrand's peak (docs/components/silu.md, "Range
  // and cuts").
  template <class F>
  static R expect(F f, R floor, R kink, R scale, R partner_kink = std::numeric_limits<R>::quiet_NaN(),
                  R partner_width = 0) {
    const auto g = [&](R z) {
      const R density = math::normal_pdf(z);
      return density > 0 ? f(z) * density : R(0);
    };
    const R reach = kink > 0 ? std::min(R(38), 12 + std::min(2 * scale, std::max(kink, std::sqrt(scale * kink)))) : R(12);
    R cuts[9] = {-reach, 0, reach};
    std::size_t n = 3;
    const auto cut = [&](R c) {
      if (std::abs(c) < reach) insert_cut(cuts, n, c);  // not outside, nor NaN
    };
    if (scale > 1)
      for (R c : {kink, R(kink - 40 / scale), R(kink + 40 / scale)}) cut(c);
    if (partner_width < R(0.1))
      for (R c : {partner_kink, R(partner_kink - 40 * partner_width), R(partner_kink + 40 * partner_width)}) cut(c);
    return adaptive_gauss_kronrod(g, cuts, n, floor);
  }

  // E[f(X)], X ~ N(m, sigma^2), for f = silu_relu_gap or silu_step_gap times
  // a factor that is smooth except for a transition of width `width` at
  // `feature` (the partner's own kink; width 0 for a kink or jump): over
  // |x| <= 80 (beyond, f < 81 e^-80 = 1e-33) and 12 sigma around m, cut at
  // f's kink 0, at the feature and 12 widths either side of it, so that no
  // piece holds a feature narrower than itself.
  template <class F>
  static R gap_expect(F f, R m, R sigma, R floor, R feature = std::numeric_limits<R>::quiet_NaN(),
                      R width = 0) {
    if (!(sigma > 0)) return f(m);
    const R support = 80;
    R cuts[6] = {std::max(m - 12 * sigma, -support), std::min(m + 12 * sigma, support)};
    if (!(cuts[0] < cuts[1])) return 0;
    std::size_t n = 2;
    for (R c : {R(0), feature, R(feature - 12 * width), R(feature + 12 * width)})
      if (c > cuts[0] && c < cuts[n - 1]) insert_cut(cuts, n, c);  // not outside, nor NaN
    return adaptive_gauss_kronrod([&](R x) { return f(x) * math::normal_pdf((x - m) / sigma) / sigma; }, cuts, n,
                                  floor);
  }

  // The partner's spread s sqrt(1 - r^2) up to which narrow_expect replaces
  // the adaptive inner integral, and its nodes (docs/components/silu.md).
  static constexpr R narrow_partner() { return R(0.5); }
  static constexpr int narrow_nodes() { return 24; }
  // A contribution below this times the floor is left out (10^-4 of the tolerance).
  static constexpr R negligible() { return R(1e-16); }
  // The Parseval check of the Hermite expansion against the 1-D moments
  // (docs/components/silu.md).
  static constexpr R expansion_tolerance() { return R(1e-14); }

  // The Hermite expansion of u (one per check, built on first use; not
  // attempted where it cannot close).
  const std::optional<Expansion>& expansion(typename Expansion::Check check, R energy) const {
    const std::size_t which = check == Expansion::Check::value ? 0 : 1;
    if (!expanded_[which]) {
      if (!expansion_hopeless()) expansions_[which] = attempt_expansion(check, energy);
      expanded_[which] = true;
    }
    return expansions_[which];
  }

  R mu_, s_, kink_;
  SiluSigmoid<R> at_mu_;
  PartnerRule partner_;
  R shift_ = 0;
  mutable std::optional<Expansion> expansions_[2];  // value, derivative
  mutable bool expanded_[2] = {false, false};
};

struct SiluForwardTag;
struct SiluBackwardTag;

}  // namespace detail

template <class T = double>
class Silu : public Component<Silu<T>, T> {
 public:
  static constexpr const char* name = "sigprop::Silu";
  static constexpr bool elementwise = true;

  Silu() = default;

  Moments<T> forward_impl(const Moments<T>& in) const {
    Moments<T> out = in;
    // The quadratures, memoized per thread (core/memo.hpp): the backward of a
    // composition called without a record replays the forward once.
    const auto moments = detail::memoized<detail::SiluForwardTag>(
        std::array<T, 4>{in.mean, in.var, in.corr_len, in.corr_dim}, [&] { return quadrature_forward(in); });
    out.mean = moments[0];
    out.var = moments[1];
    out.corr_len = moments[2];
    out.corr_dim = moments[3];
    out.norm_var_ratio = detail::smooth_activation_norm_var_ratio<Silu>(in, [](double x) { return detail::silu_value(x); });
    spread::carry_elementwise(*this, in, out);  // core/hidden_spread.hpp
    return out;
  }

  GradMoments<T> backward_impl(const Moments<T>& in, const GradMoments<T>& g) const {
    const auto factors = detail::memoized<detail::SiluBackwardTag>(
        std::array<T, 3>{in.mean, in.var, in.corr_len}, [&] { return quadrature_backward(in); });
    const T& second = factors[0];
    const T& ratio = factors[1];
    return keeping_activation_alignment(T(g.var * second), T(g.corr_len * ratio), g);
  }

 private:
  using Real = std::conditional_t<(sizeof(math::real_of<T>) < sizeof(double)), double,
                                  math::real_of<T>>;
  using Quadrature = detail::SiluQuadrature<Real>;

  // mean, var, corr_len, corr_dim of the output (header comment), lane by lane.
  static std::array<T, 4> quadrature_forward(const Moments<T>& in) {
    std::array<T, 4> out{in.mean, in.var, in.corr_len, in.corr_dim};
    auto& [mean, var_out, corr_len, corr_dim] = out;
    for (std::size_t i = 0; i < lane_count(in.mean); ++i) {
      if (same_as_previous_lane(i, in.mean, in.var, in.corr_len, in.corr_dim)) {
        for (T* x : {&mean, &var_out, &corr_len, &corr_dim}) set_lane(*x, i, lane(*x, i - 1));
        continue;
      }
      const Real mu = Real(lane(in.mean, i)), var = Real(lane(in.var, i));
      const Real r_len = Real(lane(in.corr_len, i)), r_dim = Real(lane(in.corr_dim, i));
      if (!(var > 0)) {  // a constant input: SiLU(mu), correlations unchanged
        set_lane(mean, i, detail::silu_value(mu));
        set_lane(var_out, i, 0);
        continue;
      }
      const Quadrature quad(mu, var);
      const Real per_var = quad.var_per_var();
      set_lane(mean, i, quad.mean());
      set_lane(var_out, i, var * per_var);
      if (!(per_var >= tiny())) continue;  // correlations stay the input's (header comment)
      const Real c_len = quad.corr(r_len, per_var);
      set_lane(corr_len, i, c_len);
      set_lane(corr_dim, i, r_dim == r_len ? c_len : quad.corr(r_dim, per_var));
    }
    return out;
  }

  // E[SiLU'^2] and the gradient correlation's factor, lane by lane.
  static std::array<T, 2> quadrature_backward(const Moments<T>& in) {
    std::array<T, 2> out{in.var, in.var};
    auto& [second, ratio] = out;
    for (std::size_t i = 0; i < lane_count(in.mean); ++i) {
      if (same_as_previous_lane(i, in.mean, in.var, in.corr_len)) {
        set_lane(second, i, lane(second, i - 1));
        set_lane(ratio, i, lane(ratio, i - 1));
        continue;
      }
      const Real mu = Real(lane(in.mean, i)), var = Real(lane(in.var, i));
      if (!(var > 0)) {  // constant input: dx = g SiLU'(mu)
        const Real d = detail::silu_derivative(mu);
        set_lane(second, i, d * d);
        set_lane(ratio, i, 1);
        continue;
      }
      const Quadrature quad(mu, var);
      const Real sec = quad.grad_second();
      set_lane(second, i, sec);
      set_lane(ratio, i, sec >= tiny() ? quad.grad_corr(Real(lane(in.corr_len, i)), sec) : Real(1));
    }
    return out;
  }

  // Smallest standardized second moment divided by: min normal / epsilon
  // (1e-292 in double), so its integrands are normal numbers.
  static Real tiny() { return std::numeric_limits<Real>::min() / std::numeric_limits<Real>::epsilon(); }

};

}  // namespace sigprop
