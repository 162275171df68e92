// sigprop/components/gelu.hpp -- y = GeLU(x) = x Phi(x) entrywise (the erf
// form), or its tanh approximation x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
// (GeluForm::tanh, GPT-2's; detail/gelu_tanh.hpp, exact for that function).
//
// Reference: Kedia et al., "Transformers Get Stable" (ICML 2024), appendix
// B.5, for mean-zero inputs. Exact for Gaussian inputs x ~ N(0, q) with
// correlation r between the two entries of a pair (r = corr_len for two
// positions, r = corr_dim for two hidden units; both go through the same
// kernel and may be negative). With a = q/(1 + q):
//   mean  E[y] = q / sqrt(2 pi (q + 1))
//   var   q/(2 pi) (pi/2 - a + asin(a) + 2q/((1 + q) sqrt(1 + 2q)))
//   cov   q/(4 pi) (pi r + 2r asin(r a) + 2q (q(1 - r^2) + 1 + r^2)/((q + 1) sqrt(D)) - 2q/(q + 1))
//         D = (q + 1)^2 - (r q)^2 = ((1 - r) q + 1)((1 + r) q + 1)
// Backward, dx = g GeLU'(x), GeLU'(x) = Phi(x) + x phi(x), g independent of x:
//   Var[dx]       = g^2 E[GeLU'(x)^2]
//                 = g^2 (1/4 + asin(a)/(2 pi) + q(5q + 3)/(2 pi (q + 1)(2q + 1)^(3/2)))
//   Cov[dx1, dx2] = r_g g^2 E[GeLU'(x1) GeLU'(x2)]   (r = corr_len)
//                 = r_g g^2 (1/4 + asin(r a)/(2 pi)
//                            + r q ((2q + 3)(q + 1) - 2 (r q)^2)/(2 pi (q + 1) D^(3/2)))
// All five are checked against quadrature of the defining integrals and by
// Monte Carlo (docs/components/gelu.md). The code evaluates them divided by q (finite at
// q = 0, where r_out -> r) with D kept as the product of its two factors, so
// nothing overflows before the result does, and (2q + 3)(q + 1) - 2(rq)^2 =
// 2D + q + 1.
//
// Nonzero input mean (not in the paper): the mean is closed form for any mu,
//   E[GeLU(x)] = mu Phi(c) + s^2/sqrt(1 + s^2) phi(c),  c = mu/sqrt(1 + s^2)
// (Stein's lemma with E[Phi(x)] = Phi(c), E[phi(x)] = phi(c)/sqrt(1 + s^2)).
// The variance, covariances and gradient moments are 1-D integrals over
// x = mu + s z, z ~ N(0, 1), by adaptive Gauss-Kronrod to 1e-12 relative
// (detail::gaussian_expectation, numerics/quadrature.hpp), with the
// inner expectation over the partner y | x ~ N(mu + r s z, s^2 (1 - r^2)) in
// closed form:
//   E[GeLU(y)]  = m Phi(m/sqrt(1 + v)) + v/sqrt(1 + v) phi(m/sqrt(1 + v)),
//   E[GeLU'(y)] = Phi(m/sqrt(1 + v)) + m phi(m/sqrt(1 + v))/(1 + v)^(3/2)
// for y ~ N(m, v). The forward integrands are centred (GeLU(x) - E[GeLU(x)],
// for mu > 0 as s z - (x Phi(-x) - E[x Phi(-x)])), so nothing cancels when
// |mu| >> s: about 1e-13 (docs/components/gelu.md). For s^2 <= 1/16 an exact Hermite series
// (GeluHermiteSeries below) replaces the quadrature: full precision for a
// nearly constant input (s -> 0), where the centred integrand loses
// 1e-16 |GeLU(mu)|/s, and about a microsecond. When the output variance or E[GeLU'^2] is 0 (s = 0, or
// underflow for mu below about -37 sqrt(1 + 2 s^2)) the correlations are
// reported as the input's: the limit s -> 0, where GeLU acts linearly.
#pragma once

#include <array>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include <boost/math/quadrature/gauss.hpp>

#include "sigprop/components/detail/activation_norm.hpp"
#include "sigprop/components/detail/gelu_tanh.hpp"
#include "sigprop/components/detail/gelu_tanh_moments.hpp"
#include "sigprop/core/component.hpp"
#include "sigprop/numerics/quadrature.hpp"

namespace sigprop {

namespace detail {

/// Mean-zero closed forms (B.5), divided by q where they scale with q.
/// asin(r a), a = q/(1 + q), is evaluated as atan(r q/sqrt(D)) (the same angle:
/// 1 - (r a)^2 = D/(1 + q)^2): asin at r a -> 1 would amplify the rounding
/// of a by 1/sqrt(1 - (r a)^2), about sqrt(q/2) at large q (130 eps at q = 3e6
/// against the 50-digit reference, docs/accuracy.md); atan is well conditioned.
template <class T>
struct GeluZeroMean {
  /// Var[GeLU(x)] / q.
  static T var_per_q(const T& q) {
    using std::sqrt;
    const T a = q / (1 + q), sqrt_1_2q = sqrt(1 + 2 * q);  // D at r = 1 is 1 + 2q
    return (math::pi<T>() / 2 - a + math::atan(T(q / sqrt_1_2q)) + 2 * a / sqrt_1_2q) / (2 * math::pi<T>());
  }
  /// Cov[GeLU(x1), GeLU(x2)] / q for correlation r.
  static T cov_per_q(const T& q, const T& r) {
    using std::sqrt;
    const T a = q / (1 + q);
    const T sqrt_d = sqrt((1 - r) * q + 1) * sqrt((1 + r) * q + 1);
    const T inner = q * (1 - r) * (1 + r) + 1 + r * r;
    return (math::pi<T>() * r + 2 * r * math::atan(T(r * q / sqrt_d)) + 2 * a * inner / sqrt_d - 2 * a) /
           (4 * math::pi<T>());
  }
  /// 1 - r_out = (Var - Cov(r))/Var from delta = 1 - r, without the
  /// subtraction's eps/delta loss near r = 1. With a = q/(1 + q),
  ///   4 pi (Var - Cov(r))/q = pi delta + 2 A + 2 a B,
  ///   A = asin a - r asin(r a) = asin(a delta (1 + r)/(sqrt(1 - r^2 a^2) + r sqrt(1 - a^2))) + delta asin(r a)
  ///       (asin x - asin y = asin((x^2 - y^2)/(x sqrt(1 - y^2) + y sqrt(1 - x^2))), for r >= 0),
  ///   B = 2/sqrt(1 + 2q) - (q(1 - r^2) + 1 + r^2)/sqrt(D)
  ///     = (2 (1 - 1/t) - (q - 1) delta (2 - delta)/t)/sqrt(1 + 2q),
  ///       t = sqrt(1 + e), e = delta q^2 (2 - delta)/(1 + 2q)  (D = (1 + 2q)(1 + e)),
  ///       1 - 1/t = e/(t (1 + t)).
  /// For r < 0 nothing cancels and A is taken as written.
  /// Above q = 10 the closed form below loses to cancellation (its A and
  /// aB terms are each about sqrt(q) times the result: 17 eps at q = 1000),
  /// and the complement is taken from Price's theorem instead,
  /// d Cov/dr = q E[GeLU'(x1) GeLU'(x2)], so that
  ///   1 - r_out = (Var - Cov(r))/Var = int_r^1 grad_cross(q, t) dt / var_per_q(q),
  /// an integral of a positive function: nothing cancels. With w = 1 - t and
  /// y = log(1 + w q) (grad_cross varies on the scale w ~ 1/q near t = 1 and
  /// smoothly in y), Gauss-Legendre with 20 nodes on pieces of length at most
  /// 4 in y; the integrand is formed from w itself (grad_cross_at), since
  /// t = 1 - w would round w away where w < eps. At most 3.5 eps up to q = 1e4,
  /// 6.5 at 1e6 (docs/accuracy.md).
  static T corr_complement(const T& q, const T& delta) {
    if constexpr (is_scalar_v<T>) {
      return q > 10 ? complement_by_integral_wide(q, delta) : complement_closed(q, delta);
    } else {
      const T closed = complement_closed(q, delta);
      if (!(q > 10).any()) return closed;
      const T integral = math::map_lanes(q, delta, [](math::real_of<T> x, math::real_of<T> d) {
        return x > 10 ? complement_by_integral_wide(x, d) : d;
      });
      return math::select(math::less(10, q), integral, closed);
    }
  }

  /// grad_cross(q, 1 - w) with its factors (1 - r) q + 1 and (1 + r) q + 1
  /// formed from w.
  static T grad_cross_at(const T& q, const T& w) { return grad_cross_of(q, T(1 - w), T(w * q + 1), T((2 - w) * q + 1)); }

 private:
  // In double the integral runs in long double: the sum of up to 160 terms
  // carried 6.5 eps at q = 1e6 in double, 0.5 eps with the 11 extra bits.
  template <class R>
  static R complement_by_integral_wide(R q, R delta) {
    using Wide = std::conditional_t<std::is_same_v<R, double>, long double, R>;
    return static_cast<R>(complement_by_integral(Wide(q), Wide(delta)));
  }

  template <class R>
  static R complement_by_integral(R q, R delta) {
    using Rule = boost::math::quadrature::gauss<R, 20>;
    const auto& x = Rule::abscissa();
    const auto& wt = Rule::weights();
    // y at t = r (delta q overflows only for q near the largest double)
    const R top = std::isfinite(delta * q) ? std::log1p(delta * q) : std::log(delta) + std::log(q);
    const R pieces = std::max(R(1), std::ceil(top / 4)), h = top / pieces;
    R sum = 0;
    for (R j = 0; j < pieces; ++j)
      for (std::size_t i = 0; i < x.size(); ++i)
        for (const R node : {x[i], R(-x[i])}) {  // the 20-point rule lists its 10 positive nodes
          const R y = h * (j + (1 + node) / 2), e = std::expm1(y);
          const R w = std::isfinite(e) ? e / q : std::exp(y - std::log(q)) - 1 / q;
          sum += wt[i] * GeluZeroMean<R>::grad_cross_at(q, w) * (w + 1 / q);  // dw/dy = e^y/q
        }
    return sum * h / 2 / GeluZeroMean<R>::var_per_q(q);
  }

 public:
  static T complement_closed(const T& q, const T& delta) {
    using std::sqrt;
    const T a = q / (1 + q), r = 1 - delta, ra = r * a;
    const T one_minus_a = 1 / (1 + q);
    const T sqrt_1_ra2 = sqrt(T((one_minus_a + a * delta) * (1 + ra)));  // sqrt(1 - r^2 a^2)
    const T sqrt_1_a2 = sqrt(T(one_minus_a * (1 + a)));                   // sqrt(1 - a^2)
    const T close = math::asin(T(math::clamp_correlation(
                        T(a * delta * (1 + r) / math::max_of(T(sqrt_1_ra2 + r * sqrt_1_a2), T(0 * q + 1e-300)))))) +
                    delta * math::asin(ra);
    const T far = math::asin(a) - r * math::asin(ra);
    T big_a;
    if constexpr (is_scalar_v<T>) big_a = r >= 0 ? close : far;
    else big_a = math::select(math::less_equal(0, r), close, far);
    const T e = delta * q * q * (2 - delta) / (1 + 2 * q);
    const T t = sqrt(T(1 + e));
    const T big_b = (2 * e / (t * (1 + t)) - (q - 1) * delta * (2 - delta) / t) / sqrt(T(1 + 2 * q));
    return (math::pi<T>() * delta + 2 * big_a + 2 * a * big_b) / (4 * math::pi<T>() * var_per_q(q));
  }
  /// E[GeLU'(x1) GeLU'(x2)] for correlation r (r = 1: E[GeLU'(x)^2]).
  static T grad_cross(const T& q, const T& r) { return grad_cross_of(q, r, T((1 - r) * q + 1), T((1 + r) * q + 1)); }

 private:
  // grad_cross from the factors one_minus = (1 - r) q + 1, one_plus = (1 + r) q + 1.
  static T grad_cross_of(const T& q, const T& r, const T& one_minus, const T& one_plus) {
    using std::sqrt;
    const T a = q / (1 + q);
    const T q1_over_d = (q + 1) / one_minus / one_plus;  // (q + 1)/D
    const T sqrt_d = sqrt(one_minus) * sqrt(one_plus);
    return (math::atan(T(r * q / sqrt_d)) + r * a * (2 + q1_over_d) / sqrt_d) / (2 * math::pi<T>()) +
           math::real_of<T>(0.25);
  }
};

/// Closed-form E[GeLU(y)] for y ~ N(m, v), any mean.
template <class T>
T gelu_mean(const T& m, const T& v) {
  using std::sqrt;
  const T c = sqrt(1 + v);
  const T h = m / c;
  return m * math::normal_cdf(h) + v / c * math::normal_pdf(h);
}

/// Closed-form E[GeLU'(y)] for y ~ N(m, v), any mean.
template <class T>
T gelu_grad_mean(const T& m, const T& v) {
  using std::sqrt;
  const T c = sqrt(1 + v);
  const T h = m / c;
  return math::normal_cdf(h) + m * math::normal_pdf(h) / (c * c * c);
}

/// E[y Phi(-y)] = E[y] - E[GeLU(y)] for y ~ N(m, v): what GeLU removes from
/// the identity, small when m >> sqrt(1 + v).
template <class T>
T gelu_deficit(const T& m, const T& v) {
  using std::sqrt;
  const T c = sqrt(1 + v);
  const T h = m / c;
  return m * math::normal_cdf(T(-h)) - v / c * math::normal_pdf(h);
}

/// Moments of GeLU(mu + s z), z ~ N(0, 1), for small variance s^2 <= 1/16 by
/// the Hermite (Mehler) expansion of f(mu + s z) in z (O'Donnell, "Analysis of
/// Boolean Functions", 2014, Sec. 11.2):
///   Cov[f(x1), f(x2)] = sum_{n>=1} r^n s^(2n) M_n^2/n!,
///   E[f'(x1) f'(x2)]  = sum_{n>=1} n r^(n-1) s^(2n-2) M_n^2/n!  (its d/dr over s^2),
/// M_n = E[f^(n)(x)], the n-th mu-derivative of the closed-form mean. With
/// sigma = sqrt(1 + s^2), c = mu/sigma and d/dmu [He_k(c) phi(c)] =
/// -He_(k+1)(c) phi(c)/sigma:
///   M_1 = Phi(c) + c phi(c)/sigma^2,
///   M_n = (-1)^n phi(c) (He_(n-2)(c)/sigma^(n-1) - He_n(c)/sigma^(n+1)),  n >= 2.
/// Every term is a square (no cancellation for r >= 0), so a nearly constant
/// input keeps full precision where the quadrature's centred integrand loses
/// 1e-16 |GeLU(mu)|/s and runs to full depth. Terms e_n = s^(2n-2) M_n^2/n! use
/// u_k = phi(c) He_k(c)/sqrt(k!) (a linear recurrence, so no overflow); the
/// sum stops when Cramer's bound |He_k(x)| <= 1.086435 sqrt(k!) e^(x^2/4)
/// (Abramowitz and Stegun 22.14.17) puts the tail below eps/8 of the sum.
template <class R>
class GeluHermiteSeries {
 public:
  /// The variances where the terms shrink at least like (1/17)^n.
  static constexpr double max_var = 1.0 / 16;

  GeluHermiteSeries(R mean, R var) {
    using std::sqrt;
    const R sigma2 = 1 + var, sigma = sqrt(sigma2), c = mean / sigma, a = var / sigma2;
    const R pdf = math::normal_pdf(c);
    const R m1 = math::normal_cdf(c) + c * pdf / sigma2;
    terms_.push_back(m1 * m1);  // e_1 = M_1^2
    const R eps = std::numeric_limits<R>::epsilon();
    const R cramer = R(1.086435) * std::exp(-c * c / 4) / sqrt(2 * math::pi<R>());
    const R bound_b = cramer * (sigma / sqrt(R(2)) + 1 / sigma);
    const R bound_e = bound_b * bound_b / sigma2;  // e_n <= bound_e a^(n-1), n >= 2
    R u_prev = pdf, u = c * pdf;                   // u_0, u_1
    R a_power = 1, sum = terms_[0];                // a^(n-1), sum of e_1..e_n
    for (int n = 2; n <= max_terms; ++n) {
      const R u_next = (c * u - sqrt(R(n - 1)) * u_prev) / sqrt(R(n));  // u_n
      a_power *= a;
      const R b = u_prev * sigma / sqrt(R(n) * (n - 1)) - u_next / sigma;
      terms_.push_back(a_power * b * b / sigma2);
      sum += terms_.back();
      u_prev = u;
      u = u_next;
      // sum_{m > n} m e_m <= bound_e (n + 1) a^n/(1 - a)^2
      if (bound_e * (n + 1) * a_power * a / ((1 - a) * (1 - a)) <= eps / 8 * sum) break;
    }
    var_ = var;
  }

  R var() const { return var_ * sum_of(R(1), false); }
  R cov(R r) const { return var_ * sum_of(r, false); }
  R grad_second() const { return sum_of(R(1), true); }
  R grad_cross(R r) const { return sum_of(r, true); }

 private:
  static constexpr int max_terms = 1000;  // (1/17)^1000 underflows any bound

  // sum_n r^n e_n (derivative = false) or sum_n n r^(n-1) e_n (true).
  R sum_of(R r, bool derivative) const {
    R total = 0, r_power = 1;  // r^(n-1)
    for (std::size_t i = 0; i < terms_.size(); ++i) {
      const R n = R(i + 1);
      total += (derivative ? n * r_power : r_power * r) * terms_[i];
      r_power *= r;
    }
    return total;
  }

  std::vector<R> terms_;
  R var_;
};

/// Moments of GeLU(mu + s z), z ~ N(0, 1), for any mean by 1-D quadrature
/// (header comment). Scalar only; R is at least double.
template <class R>
class GeluQuadrature {
 public:
  GeluQuadrature(R mean, R var)
      : mu_(mean), var_(var), s_(std::sqrt(var)), mean_(gelu_mean(mean, var)),
        deficit_(gelu_deficit(mean, var)) {}

  /// Var[GeLU(x)].
  R var() const {
    return integrate([this](R z) {
      const R d = centred_value(z);
      return d * d;
    });
  }

  /// Cov[GeLU(x1), GeLU(x2)] for correlation r.
  R cov(R r) const {
    const R v = var_ * (1 - r) * (1 + r);  // Var[x2 | x1]
    return integrate([&](R z) { return centred_value(z) * centred_partner(z, r, v); });
  }

  /// E[GeLU'(x1) GeLU'(x2)] for correlation r.
  R grad_cross(R r) const {
    const R v = var_ * (1 - r) * (1 + r);
    return integrate(
        [&](R z) { return derivative(mu_ + s_ * z) * gelu_grad_mean(R(mu_ + r * s_ * z), v); });
  }

  /// E[GeLU'(x)^2].
  R grad_second() const {
    return integrate([this](R z) {
      const R d = derivative(mu_ + s_ * z);
      return d * d;
    });
  }

  static R value(R x) { return x * math::normal_cdf(x); }
  static R derivative(R x) { return math::normal_cdf(x) + x * math::normal_pdf(x); }

 private:
  // GeLU(x) - E[GeLU(x)] at x = mu + s z. For mu > 0 written as
  // s z - (x Phi(-x) - E[x Phi(-x)]), which does not cancel when mu >> s.
  R centred_value(R z) const {
    const R x = mu_ + s_ * z;
    if (mu_ > 0) return s_ * z - (x * math::normal_cdf(R(-x)) - deficit_);
    return value(x) - mean_;
  }

  // E[GeLU(x2) | x1] - E[GeLU(x)], x2 | x1 ~ N(mu + r s z, v); same split.
  R centred_partner(R z, R r, R v) const {
    const R m = mu_ + r * s_ * z;
    if (mu_ > 0) return r * s_ * z - (gelu_deficit(m, v) - deficit_);
    return gelu_mean(m, v) - mean_;
  }

  template <class F>
  static R integrate(F f) {
    return gaussian_expectation<R>(f);
  }

  R mu_, var_, s_, mean_, deficit_;
};

struct GeluTanhNormTag;  // the tanh form's norm_var_ratio memo entry

}  // namespace detail

/// Which GeLU: the erf form x Phi(x) or the tanh approximation (header comment).
enum class GeluForm { erf, tanh };

template <class T = double>
class Gelu : public Component<Gelu<T>, T> {
 public:
  static constexpr const char* name = "sigprop::Gelu";
  static constexpr bool elementwise = true;

  Gelu() = default;
  explicit Gelu(GeluForm form) : form_(form) {}

  GeluForm form() const { return form_; }

  Moments<T> forward_impl(const Moments<T>& in) const {
    using Z = detail::GeluZeroMean<T>;
    const T& q = in.var;
    const T var_per_q = Z::var_per_q(q);
    Moments<T> out;
    out.mean = detail::gelu_mean(in.mean, q);
    out.var = q * var_per_q;
    out.corr_len = Z::cov_per_q(q, in.corr_len) / var_per_q;
    out.corr_dim = Z::cov_per_q(q, in.corr_dim) / var_per_q;
    for_nonzero_mean_lanes(in, [&](std::size_t i, const auto& quad) {
      const Real var = quad.var();
      set_lane(out.var, i, var);
      set_lane(out.corr_len, i, var > 0 ? quad.cov(lane(in.corr_len, i)) / var : lane(in.corr_len, i));
      set_lane(out.corr_dim, i, var > 0 ? quad.cov(lane(in.corr_dim, i)) / var : lane(in.corr_dim, i));
    });
    if (form_ == GeluForm::tanh) detail::gelu_tanh_forward(in, out);  // detail/gelu_tanh_moments.hpp
    out.norm_var_ratio =
        form_ == GeluForm::tanh
            ? detail::smooth_activation_norm_var_ratio<detail::GeluTanhNormTag>(in, &detail::gelu_tanh_value)
            : detail::smooth_activation_norm_var_ratio<Gelu>(in, &detail::GeluQuadrature<double>::value);
    spread::carry_elementwise(*this, in, out);  // core/hidden_spread.hpp
    return out;
  }

  /// 1 - r_out of the erf form for a mean-zero input of variance `var`, from
  /// one_minus_corr = 1 - r in [0, 2]: accurate to a few eps relative where
  /// 1 - forward(...).corr_len keeps only eps/(1 - r) (docs/accuracy.md).
  static T corr_complement(const T& var, const T& one_minus_corr) {
    require_positive(name, "var", var);
    sigprop::detail::require(name, "one_minus_corr", one_minus_corr, [](double v) { return v >= 0 && v <= 2; },
                             "[0, 2] (1 - r for a correlation r in [-1, 1])");
    return detail::GeluZeroMean<T>::corr_complement(var, one_minus_corr);
  }

  GradMoments<T> backward_impl(const Moments<T>& in, const GradMoments<T>& g) const {
    using Z = detail::GeluZeroMean<T>;
    // E[GeLU'(x)^2] >= 1/4 at mean 0 (the closed form's first term).
    T second = Z::grad_cross(in.var, T(0 * in.var + 1));
    T corr = Z::grad_cross(in.var, in.corr_len) / second;
    for_nonzero_mean_lanes(in, [&](std::size_t i, const auto& quad) {
      const Real sec = quad.grad_second();
      set_lane(second, i, sec);
      // sec = 0 only for s = 0 at GeLU'(mu) = 0 or on underflow: the s -> 0 limit.
      set_lane(corr, i, sec > 0 ? quad.grad_cross(lane(in.corr_len, i)) / sec : Real(1));
    });
    if (form_ == GeluForm::tanh) detail::gelu_tanh_backward(in, second, corr);
    return keeping_activation_alignment(T(g.var * second), T(g.corr_len * corr), g);
  }

 private:
  GeluForm form_ = GeluForm::erf;

  using Real = std::conditional_t<(sizeof(math::real_of<T>) < sizeof(double)), double,
                                  math::real_of<T>>;
  // Lanes with mean != 0 replace the closed forms by the Hermite series
  // (variance <= 1/16) or by quadrature: a branch on the data, so scalar code
  // takes it per call and batches per lane.
  template <class F>
  static void for_nonzero_mean_lanes(const Moments<T>& in, F f) {
    using Series = detail::GeluHermiteSeries<Real>;
    for (std::size_t i = 0; i < lane_count(in.mean); ++i) {
      const Real mean = Real(lane(in.mean, i)), var = Real(lane(in.var, i));
      if (mean == 0) continue;
      if (var <= Real(Series::max_var))
        f(i, Series(mean, var));
      else
        f(i, detail::GeluQuadrature<Real>(mean, var));
    }
  }
};

}  // namespace sigprop
