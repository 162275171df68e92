// sigprop/components/relu.hpp -- y = max(x, 0) entrywise.
//
// Reference: Kedia et al., "Transformers Get Stable" (ICML 2024), appendix
// B.4 (A.4 in the later version), for mean-zero inputs; extended here to any
// input mean. Exact for Gaussian inputs x ~ N(mu, s^2) with correlation r
// between the two entries of a pair (two positions: r = corr_len; two hidden
// units: r = corr_dim, which may be negative, e.g. -1/(d-1) after LayerNorm).
//
// Write x = mu + s U, a = mu/s, so relu(x) = s (U + a)^+. With Phi, phi the
// standard normal CDF and density and Q(a) = Phi(-a):
//   mean  E[y]   = mu Phi(a) + s phi(a)                       (truncated normal)
//   var   Var[y] = s^2 V(a),  V(a) = C(a, 1)
//   cov   Cov[y_1, y_2] = s^2 C(a, r),  r_out = C(a, r) / C(a, 1), where
//   C(a, r) = r P + a^2 (Phi Q - 2 T(a, b)) + 2 a phi (Q - Phi(-a b))
//             + sqrt(1 - r^2)/(2 pi) e^{-a^2/(1+r)} - phi^2,
//   b = sqrt((1 - r)/(1 + r)),  P = P(U_1 < a, U_2 < a) = Phi(a) - 2 T(a, b).
// This is E[(U_1 + a)^+ (U_2 + a)^+] - E[(U + a)^+]^2 written so that no
// term cancels for large positive a. The cross moment is Rosenbaum's
// (J. R. Stat. Soc. B 23, 1961, "Moments of a truncated bivariate normal
// distribution") at equal truncation points; the orthant probability is
// Owen's (Ann. Math. Stat. 27, 1956, "Tables for computing bivariate normal
// probabilities"; with h = k: Phi2(h, h; r) = Phi(h) - 2 T(h, sqrt((1-r)/(1+r)))),
// T being Owen's T function (boost::math::owens_t). docs/components/relu.md
// has the derivation.
//
// mu = 0 (a = 0) gives the paper's arcsine kernel (B.4):
//   mean s/sqrt(2 pi), var s^2 (pi - 1)/(2 pi),
//   E[y_1 y_2] = s^2/(2 pi) (sqrt(1 - r^2) + r (pi - acos r)),
//   r_out = (sqrt(1 - r^2) + r (pi - acos r) - 1)/(pi - 1).
// Table 1's 0.7 r + 0.3 r^2 is a polynomial fit and is not used.
//
// Backward (B.4): dx = g 1{x > 0}, g independent of x with zero mean:
//   Var[dx] = g^2 P(x > 0) = g^2 Phi(a),
//   Cov[dx_1, dx_2] = r_g g^2 P(x_1 > 0, x_2 > 0) = r_g g^2 Phi2(a, a; r_len)
//   (= r_g g^2 (1/4 + asin(r)/(2 pi)) at mu = 0), so r_g,in = r_g P / Phi(a).
//
// Numerics: b and sqrt(1 - r^2) are formed from 1 - r and 1 + r (no
// cancellation at r = +-1); 1 + r gets 4/max added (relu_one_plus_r) so
// that r = -1 needs no branch. |a| is clamped to 40, beyond which
// Phi and phi are 0 or 1 to double precision (a constant input, s = 0, is the
// limit a = +-40, or a = 0 when mu = 0 too). The correlations are ratios of
// tiny numbers for a far below 0; they are evaluated at a >= a_floor (-33.9
// for double, -11.9 for float), where the variance is still a normal number:
// below it the output variance is under 1e-250 of the input's and its
// correlation is reported as at a_floor. For negative a the variance is a
// difference of terms of size |a| phi(a) (cancellation ~a^4): Relu<double>
// evaluates negative means in long double (Relu::widened; 0.5 eps at a = -2
// against a 50-digit reference, docs/accuracy.md); for a >= 0 a few ulps.
#pragma once

#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include <boost/math/quadrature/gauss.hpp>
#include <boost/math/tools/fraction.hpp>
#include <boost/math/special_functions/owens_t.hpp>

#include "sigprop/components/detail/activation_norm.hpp"
#include "sigprop/core/component.hpp"

namespace sigprop {

namespace detail {

/// Standardized mean a = mu/s of an input with standard deviation s, clamped
/// to [-40, 40]; a constant input (s = 0) maps to +-40, or 0 when mu = 0.
template <class T>
T relu_standardized_mean(const T& mean, const T& sd) {
  return math::map_lanes(mean, sd, [](math::real_of<T> mu, math::real_of<T> s) {
    using R = math::real_of<T>;
    const R limit = 40;
    if (!(s > 0)) return mu > 0 ? limit : mu < 0 ? -limit : R(0);
    const R a = mu / s;
    return a > limit ? limit : a < -limit ? -limit : a;
  });
}

/// Lowest standardized mean at which the correlations are evaluated: 0.9 times
/// the point -sqrt(-2 ln(min normal)) where phi underflows (-33.9 for double).
template <class R>
R relu_correlation_floor() {
  using std::log;
  using std::sqrt;
  return R(-0.9) * sqrt(R(-2) * log(std::numeric_limits<R>::min()));
}

/// Owen's T(h, b), lane-wise. At h = 0 (every zero-mean input, the case of
/// the transformer stacks) T(0, b) = atan(b)/(2 pi) (Owen 1956, eq. 2.3),
/// vectorized for batches (math::atan); other h by Boost.Math (default
/// policy: double is evaluated in long double).
template <class T>
T owens_t(const T& h, const T& b) {
  using R = math::real_of<T>;
  const auto general = [](R x, R y) { return static_cast<R>(boost::math::owens_t(x, y)); };
  const R two_pi = 2 * math::pi<T>();
  if constexpr (is_scalar_v<T>) {
    return h == 0 ? math::atan(b) / two_pi : general(h, b);
  } else {
    T out = math::atan(b) / two_pi;
    for (Eigen::Index i = 0; i < h.size(); ++i)
      if (h(i) != 0) out(i) = general(h(i), b(i));
    return out;
  }
}

/// 1 + r, kept > 0 at r = -1 so that b = sqrt((1 - r)/(1 + r)) and
/// a^2/(1 + r) stay finite: adds 4/max, far below any nonzero 1 + r and large
/// enough that 2/(4/max) = max/2 does not overflow (about 2^-1022 for double,
/// like its min(); a multiprecision type's min() is so small that 2/min()
/// overflows, and b = inf made a b = 0 inf a NaN at a = 0).
template <class T>
T relu_one_plus_r(const T& r) {
  using Real = math::real_of<T>;
  return 1 + r + Real(4) / std::numeric_limits<Real>::max();
}

/// Owen's T(a, b) with b = sqrt((1 - r)/(1 + r)), and the orthant probability
/// P(U_1 < a, U_2 < a) = Phi(a) - 2 T (U standard normal pair, correlation r).
template <class T>
struct ReluOrthant {
  T b, owen_t, orthant;
  ReluOrthant(const T& a, const T& cdf_a, const T& r) {
    using std::sqrt;
    b = sqrt((1 - r) / relu_one_plus_r(r));
    owen_t = owens_t(a, b);
    orthant = math::clamp_nonnegative(T(cdf_a - 2 * owen_t));  // rounding can cross 0
  }
};

/// C(a, r) = Cov[(U_1 + a)^+, (U_2 + a)^+] for a standard normal pair with
/// correlation r (header comment). `cdf`, `sf`, `pdf` are Phi(a), Phi(-a), phi(a).
template <class T>
T relu_standardized_cov(const T& a, const T& cdf, const T& sf, const T& pdf, const T& r) {
  using std::exp;
  const ReluOrthant<T> o(a, cdf, r);
  const T one_plus_r = relu_one_plus_r(r);
  const T upper_ab = math::normal_cdf(T(-a * o.b));  // Phi(-a b)
  const T a2 = a * a;
  return r * o.orthant + a2 * (cdf * sf - 2 * o.owen_t) + 2 * a * pdf * (sf - upper_ab) +
         math::sqrt_one_minus_square(r) / (2 * math::pi<T>()) * exp(-a2 / one_plus_r) -
         pdf * pdf;
}

/// Terms (k + 1, x), k = 1, 2, ..., of the continued fraction
/// T_2(x) = 2/(x + 3/(x + 4/(x + ...))), the tail of Laplace's continued
/// fraction for the Mills ratio Phi(-x)/phi(x) = 1/(x + 1/(x + 2/(x + ...)))
/// (DLMF 7.9.3; Abramowitz and Stegun 26.2.14), in Boost.Math's generator form.
template <class Real>
struct MillsTailFraction {
  using result_type = std::pair<Real, Real>;
  Real x;
  int k = 1;
  result_type operator()() {
    ++k;
    return {Real(k), x};
  }
};

/// C(a, 1) = Var[(U + a)^+] for a <= -2, without the cancellation of the
/// closed form (whose terms Phi(a), a^2 Phi(a) Phi(-a) and a phi(a) are
/// about a^4/2 times the result: 18 eps at a = -8, 1052 at a = -16 and
/// 10690 at a = -30 in long double, relative to double's eps). With x = -a,
/// T_1 = 1/(x + T_2) and the Mills ratio R = 1/(x + T_1),
///   E[(U + a)^+]   = phi(a) (1 - x R)                 = phi(a) T_1/(x + T_1),
///   E[(U + a)^+^2] = phi(a) ((1 + x^2) R - x)         = phi(a) T_2/((x + T_1)(x + T_2)),
/// products and quotients of positive numbers; the squared mean subtracted
/// from the second is about phi(a)/(2x) of it (0.014 at a = -2). Within 0.002 eps of a
/// 50-digit evaluation for a = -2 to -30 in long double (156 terms of the
/// fraction at a = -2, 52 at -4, 8 at the correlation floor).
template <class Real>
Real relu_standardized_var_below(Real a) {
  using std::exp;
  using std::sqrt;
  MillsTailFraction<Real> terms{-a};
  const Real t2 = boost::math::tools::continued_fraction_a(terms, std::numeric_limits<Real>::epsilon());
  const Real x = -a, t1 = 1 / (x + t2);
  const Real pdf = math::normal_pdf(a);
  const Real mean = pdf * t1 / (x + t1);
  return pdf * t2 / ((x + t1) * (x + t2)) - mean * mean;
}

/// 1 - r_out of the mean-zero map from delta = 1 - r, without cancellation
/// near r = 1 (where r_out = 1 - delta + O(delta^(3/2)) and subtracting
/// r_out from 1 would keep eps/delta of relative accuracy). With
/// u = sqrt(delta/2), r = 1 - 2u^2, acos r = 2 asin u and
/// sqrt(1 - r^2) = 2u sqrt(1 - u^2), the header's map gives
///   (pi - 1)(1 - r_out) = pi delta - sqrt(1 - r^2) + r acos r
///                       = 4u^2 acos u + 2 g(u),  g(u) = asin u - u sqrt(1 - u^2),
/// a sum of non-negative terms. g is summed from its Taylor series for
/// u <= 1/2, g(u) = sum_n 2 binom(2n, n) u^(2n+3)/(4^n (2n + 3)) (integrate
/// g'(u) = 2u^2/sqrt(1 - u^2) term by term; ratio of terms <= u^2 <= 1/4).
template <class Real>
Real relu_corr_complement_zero_mean(Real delta) {
  using std::acos;
  using std::asin;
  using std::sqrt;
  const Real u = sqrt(delta / 2), u2 = u * u;
  Real g;
  if (u <= Real(0.5)) {
    Real coefficient = 2, power = u2 * u, sum = 0;  // 2 binom(2n, n)/4^n, u^(2n+3)
    for (int n = 0; n < 200; ++n) {  // 200 terms: 1/4^200 is below any precision's eps
      const Real term = coefficient * power / (2 * n + 3);
      sum += term;
      if (term <= std::numeric_limits<Real>::epsilon() / 4 * sum) break;
      coefficient *= Real(2 * n + 1) / Real(2 * n + 2);
      power *= u2;
    }
    g = sum;
  } else {
    g = asin(u) - u * sqrt((1 - u) * (1 + u));
  }
  const Real pi = boost::math::constants::pi<Real>();
  return (4 * u2 * acos(u) + 2 * g) / (pi - 1);
}

/// 1 - r_out at standardized mean a != 0 from delta = 1 - r in (0, 2]. By
/// Price's theorem dC(a, r)/dr = E[1{U_1 > -a} 1{U_2 > -a}] = P(a, r), the
/// orthant probability, so
///   1 - r_out = (C(a, 1) - C(a, r))/C(a, 1) = int_r^1 P(a, t) dt / C(a, 1),
/// an integral of a positive function (nothing cancels). With
/// 1 - t = delta v^2 the integrand 2 delta v P(a, 1 - delta v^2) is analytic
/// in v: P = Phi(a) - 2 T(a, b), b = sqrt(w/(2 - w)), w = delta v^2 formed
/// directly (t = 1 - w would round w away), and T(a, .) is analytic for
/// |b| < 1 (poles of 1/(1 + x^2) at +-i); for delta <= 1/2, b <= 1/sqrt 3 on
/// [0, 1] and 20-point Gauss-Legendre converges like 3.1^-40. Far below zero
/// P(a, t) falls off on the scale 1 - t ~ 4/a^2, so the rule is used while
/// a^2 delta <= 16 (all of 1 - r <= 10^-2 down to the correlation floor);
/// the divisor C(a, 1) comes from relu_standardized_var_below for a <= -2.
/// For delta > 1/2, 1 - r_out >= delta/2 >= 1/4 (P is increasing in t and
/// C(a, -1) <= 0), and for a^2 delta > 16, 1 - r_out >= 0.99 (measured at
/// a = -4 to -30): the subtraction 1 - C(a, r)/C(a, 1) loses at most a
/// factor 4 to rounding, but the closed form's own cancellation below
/// a = -2 remains there (docs/accuracy.md, "Known gaps").
template <class Real>
Real relu_corr_complement(Real a, Real delta) {
  using std::sqrt;
  const Real cdf = math::normal_cdf(a), sf = math::normal_cdf(Real(-a)), pdf = math::normal_pdf(a);
  if (delta > Real(0.5) || a * a * delta > 16)
    return 1 - relu_standardized_cov(a, cdf, sf, pdf, Real(1 - delta)) / relu_standardized_cov(a, cdf, sf, pdf, Real(1));
  const Real var_std =
      a <= -2 ? relu_standardized_var_below(a) : relu_standardized_cov(a, cdf, sf, pdf, Real(1));
  using Rule = boost::math::quadrature::gauss<Real, 20>;
  Real sum = 0;
  for (std::size_t i = 0; i < Rule::abscissa().size(); ++i)
    for (const Real node : {Rule::abscissa()[i], Real(-Rule::abscissa()[i])}) {
      const Real v = (1 + node) / 2, w = delta * v * v;
      const Real orthant = cdf - 2 * owens_t(a, Real(sqrt(w / (2 - w))));
      sum += Rule::weights()[i] * orthant * v;
    }
  return sum * delta / var_std;  // (1/2 for [0, 1]) times dt/dv = 2 delta v
}

}  // namespace detail

template <class T = double>
class Relu : public Component<Relu<T>, T> {
 public:
  static constexpr const char* name = "sigprop::Relu";
  static constexpr bool elementwise = true;
  static constexpr int homogeneity = 1;

  Relu() = default;

  Moments<T> forward_impl(const Moments<T>& in) const {
    Moments<T> out;
    if constexpr (std::is_same_v<T, double>) out = widened(in) ? forward_in<long double>(in) : forward_in<T>(in);
    else out = forward_in<T>(in);
    out.norm_var_ratio =
        detail::activation_norm_rule(detail::relu_kurtosis_ratio(in.mean, in.var), norm_var_ratio_of(in));
    spread::carry_elementwise(*this, in, out);  // core/hidden_spread.hpp
    return out;
  }

  /// 1 - r_out for a mean-zero input, from one_minus_corr = 1 - r in [0, 2]:
  /// accurate to a few eps relative where 1 - forward(...).corr_len keeps
  /// only eps/(1 - r) (detail::relu_corr_complement_zero_mean; docs/accuracy.md).
  static T corr_complement(const T& one_minus_corr) {
    using Real = math::real_of<T>;
    sigprop::detail::require(name, "one_minus_corr", one_minus_corr, [](double v) { return v >= 0 && v <= 2; },
                             "[0, 2] (1 - r for a correlation r in [-1, 1])");
    return math::map_lanes(one_minus_corr, [](Real delta) { return detail::relu_corr_complement_zero_mean(delta); });
  }

  /// 1 - r_out for an input of mean `mean` and variance `var`, from
  /// one_minus_corr = 1 - r in [0, 2] (detail::relu_corr_complement: Price's
  /// integral of the orthant probability; docs/accuracy.md). A double is
  /// evaluated in long double. Below the correlation floor (a < a_floor) the
  /// map is the floor's, as in forward.
  static T corr_complement(const T& mean, const T& var, const T& one_minus_corr) {
    using Real = math::real_of<T>;
    using Wide = std::conditional_t<std::is_same_v<Real, double>, long double, Real>;
    using std::sqrt;
    require_finite(name, "mean", mean);
    require_variance(name, "var", var);
    sigprop::detail::require(name, "one_minus_corr", one_minus_corr, [](double v) { return v >= 0 && v <= 2; },
                             "[0, 2] (1 - r for a correlation r in [-1, 1])");
    const T a = clamp_below(detail::relu_standardized_mean(mean, T(sqrt(var))));
    return math::map_lanes(a, one_minus_corr, [](Real a_lane, Real delta) {
      if (a_lane == 0) return detail::relu_corr_complement_zero_mean(delta);
      if (delta == 0) return Real(0);
      return static_cast<Real>(detail::relu_corr_complement(Wide(a_lane), Wide(delta)));
    });
  }

  GradMoments<T> backward_impl(const Moments<T>& in, const GradMoments<T>& g) const {
    if constexpr (std::is_same_v<T, double>)
      if (widened(in)) return backward_in<long double>(in, g);
    return backward_in<T>(in, g);
  }

 private:
  // At a negative mean the moments are small differences of terms of size
  // |a| phi(a) and Phi(a), and the orthant probability Phi(a) - 2T(a, b)
  // cancels too (docs/accuracy.md). Scalar double therefore evaluates them
  // in long double (11 more bits on x86-64) when a < 0, down to the floor
  // a_floor, below which the correlations are those at the floor. Batches
  // and the mean-zero path of the stacks stay in T.
  static bool widened(const Moments<double>& in) {
    const double floor = detail::relu_correlation_floor<double>();
    return in.mean < 0 && in.var > 0 && in.mean >= floor * std::sqrt(in.var);
  }

  // The forward map evaluated in W (T, or long double for a scalar double).
  template <class W>
  static Moments<T> forward_in(const Moments<T>& input) {
    using std::sqrt;
    const Moments<W> in{W(input.mean), W(input.var), W(input.corr_len), W(input.corr_dim)};
    const W sd = sqrt(in.var);
    const W a = detail::relu_standardized_mean(in.mean, sd);
    const W cdf = math::normal_cdf(a), pdf = math::normal_pdf(a);
    const W sf = math::normal_cdf(W(-a));
    // Moments at the true a; correlations at a clamped to the floor (header comment).
    const W var_std = detail::relu_standardized_cov(a, cdf, sf, pdf, W(0 * a + 1));
    const W a_corr = clamp_below(a);
    // Unless some lane is below the floor, a_corr = a: reuse what is computed.
    const bool clamped = !all_equal(a_corr, a);
    const W cdf_c = clamped ? math::normal_cdf(a_corr) : cdf, pdf_c = clamped ? math::normal_pdf(a_corr) : pdf;
    const W sf_c = clamped ? math::normal_cdf(W(-a_corr)) : sf;
    const W var_corr = clamped ? detail::relu_standardized_cov(a_corr, cdf_c, sf_c, pdf_c, W(0 * a + 1)) : var_std;
    Moments<T> out;
    out.mean = static_cast<T>(in.mean * cdf + sd * pdf);
    out.var = static_cast<T>(in.var * var_std);
    out.corr_len = static_cast<T>(detail::relu_standardized_cov(a_corr, cdf_c, sf_c, pdf_c, in.corr_len) / var_corr);
    out.corr_dim = static_cast<T>(detail::relu_standardized_cov(a_corr, cdf_c, sf_c, pdf_c, in.corr_dim) / var_corr);
    return out;
  }

  // The backward map evaluated in W.
  template <class W>
  static GradMoments<T> backward_in(const Moments<T>& in, const GradMoments<T>& g) {
    using std::sqrt;
    const W a = detail::relu_standardized_mean(W(in.mean), W(sqrt(W(in.var))));
    const W a_corr = clamp_below(a);
    const W cdf_c = math::normal_cdf(a_corr);
    const detail::ReluOrthant<W> o(a_corr, cdf_c, W(in.corr_len));
    return keeping_activation_alignment(static_cast<T>(W(g.var) * math::normal_cdf(a)),
                                        static_cast<T>(W(g.corr_len) * o.orthant / cdf_c), g);
  }

  template <class W>
  static bool all_equal(const W& x, const W& y) {
    if constexpr (is_scalar_v<W>) return x == y;
    else return (x == y).all();
  }

  // a clamped below at the floor of T's range (also when evaluated in a wider W).
  template <class W>
  static W clamp_below(const W& a) {
    const auto floor = static_cast<math::real_of<W>>(detail::relu_correlation_floor<math::real_of<T>>());
    if constexpr (is_scalar_v<W>) return a < floor ? W(floor) : a;
    else return a.max(floor);
  }
};

}  // namespace sigprop
