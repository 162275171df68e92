// sigprop/components/layernorm.hpp -- y = (x - mean(x)) / sd(x) over the d
// hidden units of each position (biased variance, no epsilon; gain 1 and bias
// 0 as at initialization).
//
// Reference: Kedia et al., "Transformers Get Stable" (ICML 2024), appendix
// B.6 (A.6 in the later version); the backward Jacobian is Xu et al. (2019),
// Eq. 17. The paper keeps only the large-d limit; the results below are exact
// for Gaussian inputs at every d >= 4 (derivation and the simulations that
// confirm them: docs/components/layernorm.md).
//
// Input model. Each position is a Gaussian vector whose d entries have
// variance s^2 and pairwise correlation r^d, and two positions have
// correlation r^l entry by entry; the covariance is separable (Kronecker:
// Cov[x_ij, x_kl] = s^2 R^l_ik R^d_jl), the one model valid for every
// (r^l, r^d) and the one a centering projection (an earlier LayerNorm)
// produces. Centering removes the mean and the common part of a position, so
// each centered position is u sqrt(s^2 (1 - r^d)) with u standard normal in
// the k = d - 1 dimensional subspace orthogonal to the all-ones vector, and two
// positions have per-coordinate correlation rho = r^l. Then, with alpha = k/2,
//   H0 = 2F1(1/2, 1/2; alpha; rho^2),   H1 = 2F1(1/2, 1/2; alpha + 1; rho^2),
//   c0 = (2/k) (Gamma(alpha + 1/2) / Gamma(alpha))^2:
// forward (B.6):
//   E[y] = 0, Var[y] = 1, r^d_out = -1/(d - 1)       (every output row sums to 0
//                                                     and has squared norm d);
//   r^l_out = E[cos angle(u, u')] = F(rho) = rho c0 H1  (the paper: r (1 - 1/d));
// backward g_in = (I - 1 1^T/d - y y^T/d) g / sd(x) (Xu et al. Eq. 17), a
// projection of rank d - 2 scaled by 1/sd(x), with E[1/chi^2_k] = 1/(k - 2):
//   Var[g_in] = Var[g] (d - 2) / ((d - 3) s^2 (1 - r^d))   (the paper: Var[g]/s^2),
//   Cov^l[g_in] = r_g Var[g] F'(rho) / (s^2 (1 - r^d)),
//   F'(rho) = E[(k - 2 + cos^2)/(|u||u'|)] = c0 (k H0 - (k - 1) H1)  (Price's theorem:
//   the Jacobian covariance is the slope of the forward correlation map), F'(1) = (k-1)/(k-2).
// d <= 3 has no finite gradient variance (E[1/chi^2_2] = inf) and is rejected.
//
// Norm fluctuation and gradient alignment (moments.hpp). The variance above
// is E|P g|^2/d times E[1/sd(x)^2], each taken for Gaussian inputs and an
// isotropic g. In general:
// * E|P g|^2 = E|g|^2 (1 - (a_1 + a_x)/d), with a_1 = align_mean and
//   a_x = align_activation of g (the projection removes the all-ones and the
//   input direction; isotropic g has a_1 = a_x = 1: rank d - 2);
// * E[1/sd^2] = d E[1/Q], Q = |x_c|^2 of mean m = (d - 1) s^2 (1 - r^d) and
//   relative variance 2 nu_r/k, k = d - 1 (nu_r = norm_var_ratio): modelled
//   as Q ~ m chi^2_n/n with the same two moments, n = k/nu_r, so
//   E[m/Q] = n/(n - 2) = k/(k - 2 nu_r) (Gaussian: k/(k - 2)), for nu_r <= 1;
//   beyond, a Gaussian row times an independent scale (detail::inverse_norm_factor).
// Hence, for nu_r <= 1,
//   Var[g_in] = Var[g] (d - a_1 - a_x) / ((d - 1 - 2 nu_r) s^2 (1 - r^d)),
// which is the Gaussian (d - 2)/((d - 3) ...) at a_1 = a_x = nu_r = 1. In a
// Post-LN stack with a small branch every LayerNorm sees nu_r ~ 0 and a
// gradient already projected by the LayerNorm above (a_1 ~ a_x ~ 0), and the
// factor is ~d/(d - 1), not (d - 2)/(d - 3). The correlation keeps the
// Gaussian slope ratio. Outputs: nu_r = 0 (every row has squared norm d);
// the input gradient has a_1 = a_x = 0 (P removes both directions).
// A gradient coupled to the row norm (norm_coupling c = Cov[log |g_i|^2,
// log(m/Q_i)], a Pre-LN stack's LayerNorms above) multiplies the variance
// by e^c (log-normal row energies), and the input gradient carries
// c + 2 nu_r/(d - 1) (docs/components/layernorm.md, "Gradient coupled to
// the row norm").
#pragma once

#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include <boost/math/constants/constants.hpp>
#include <boost/math/policies/policy.hpp>
#include <boost/math/special_functions/ellint_rd.hpp>
#include <boost/math/special_functions/ellint_rf.hpp>
#include <boost/math/special_functions/gamma.hpp>

#include "sigprop/core/component.hpp"
#include "sigprop/core/errors.hpp"
#include "sigprop/core/math.hpp"
#include "sigprop/core/memo.hpp"

namespace sigprop {

namespace detail {

// Boost.Math's own promotion of double is off: where double needs more
// (c0, the contiguous relation), the code below asks for long double itself.
using layernorm_policy = boost::math::policies::policy<boost::math::policies::promote_double<false>,
                                                       boost::math::policies::promote_float<false>>;

// H0 = 2F1(1/2, 1/2; alpha; x) and D = H0 - 2F1(1/2, 1/2; alpha + 1; x), the
// difference formed without cancellation (used as k D with k up to 1e9).
template <class Real>
struct HalfHalfPair {
  Real h0;    // 2F1(1/2, 1/2; alpha; x)
  Real diff;  // 2F1(1/2, 1/2; alpha; x) - 2F1(1/2, 1/2; alpha + 1; x)
};

// Gauss's series, term t_n = ((1/2)_n)^2 x^n / ((alpha)_n n!); the difference
// uses 1/(alpha)_n - 1/(alpha + 1)_n = n / ((alpha)_n (alpha + n)). The tail
// after term n is at most t_n min(x/(1 - x), (n + alpha)/(alpha - 3/2)) (the
// term ratio is at most x and at most (n + 1/2)/(n + alpha)) for both sums, so
// they stop once that bound is below half an ulp of the smaller one, D.
template <class Real>
HalfHalfPair<Real> half_half_series(Real alpha, Real x, Real y) {
  const Real eps = std::numeric_limits<Real>::epsilon() / 2;
  Real term = 1, h0 = 1, diff = 0;
  for (int n = 0; n < 100000; ++n) {
    const Real nn = static_cast<Real>(n);
    term *= (nn + Real(0.5)) * (nn + Real(0.5)) / ((nn + alpha) * (nn + 1)) * x;
    h0 += term;
    diff += term * (nn + 1) / (alpha + nn + 1);
    Real tail = y > 0 ? x / y : std::numeric_limits<Real>::infinity();
    if (alpha > Real(1.5)) tail = std::min(tail, (nn + 1 + alpha) / (alpha - Real(1.5)));
    if (term * tail <= eps * diff) return {h0, diff};
  }
  throw overflow_error("sigprop::LayerNorm: the hypergeometric series did not converge (alpha = " +
                       format_number(static_cast<double>(alpha)) +
                       ", x = " + format_number(static_cast<double>(x)) + ")");
}

// Above this alpha the series needs at most ~150 terms even at x = 1.
template <class Real>
inline const Real half_half_series_alpha = 24;  // const, not constexpr: multiprecision Real is no literal type

// For x >= 1/2 and alpha < half_half_series_alpha (where the series would be
// slow): Gauss's contiguous relation in c (DLMF 15.5.18 with a = b = 1/2),
//   H(c + 1) = c (c - 1) [(1 - x) H(c - 1) - (1 - 2x) H(c)] / ((c - 1/2)^2 x),
// run upwards from closed forms. For x > 1/2 the other solution of the
// recurrence decays like ((1 - x)/x)^c, so the upward direction is stable.
// Starting values (DLMF 15.4.ii, 19.2.8 and 19.25.1 in Carlson's form, y = 1 - x):
//   c = 1/2: (1 - x) H = sqrt(y);      c = 3/2: H = asin(sqrt x)/sqrt x;
//   c = 1:   (1 - x) H = (2/pi) y R_F(0, y, 1);
//   c = 2:   H = 4/(pi x) (E - y K) = (4 y/(3 pi)) R_D(0, 1, y).
// Needs 2 alpha to be an integer (d an integer).
template <class Real>
HalfHalfPair<Real> half_half_recurrence(Real alpha, Real x, Real y) {
  const Real pi = boost::math::constants::pi<Real>();
  const layernorm_policy pol;
  using std::atan2;  // unqualified: multiprecision Real finds its own by ADL
  using std::floor;
  using std::sqrt;
  Real c, h, prev_scaled;  // c, H(c), (1 - x) H(c - 1)
  if (floor(alpha) != alpha) {
    c = Real(1.5);
    const Real sx = sqrt(x), sy = sqrt(y);
    h = atan2(sx, sy) / sx;
    prev_scaled = sy;
  } else {
    c = 2;
    h = 4 * y / (3 * pi) * boost::math::ellint_rd(Real(0), Real(1), y, pol);
    prev_scaled = 2 / pi * y * boost::math::ellint_rf(Real(0), y, Real(1), pol);
  }
  // Walk up to H(alpha) and H(alpha + 1).
  Real h_alpha = h;  // right when alpha is the starting c
  while (c < alpha + 1) {
    const Real next = c * (c - 1) * (prev_scaled - (y - x) * h) / ((c - Real(0.5)) * (c - Real(0.5)) * x);
    prev_scaled = y * h;
    h = next;
    c += 1;
    if (c == alpha) h_alpha = h;
  }
  return {h_alpha, h_alpha - h};
}

// Where the series is slow: x = 1 (Gauss) or the recurrence.
template <class Real>
HalfHalfPair<Real> half_half_at_one_or_by_recurrence(Real alpha, Real x, Real y) {
  if (y == 0) {  // Gauss: 2F1(a, b; c; 1) = Gamma(c) Gamma(c - a - b) / (Gamma(c - a) Gamma(c - b))
    const layernorm_policy pol;
    const Real r = boost::math::tgamma_delta_ratio(alpha - Real(0.5), Real(0.5), pol);  // G(a-1/2)/G(a)
    const Real h0 = 1 / (r * r * (alpha - 1));
    // H1/H0 = alpha (alpha - 1)/(alpha - 1/2)^2, so H0 - H1 = H0 / (4 (alpha - 1/2)^2).
    return {h0, h0 / (4 * (alpha - Real(0.5)) * (alpha - Real(0.5)))};
  }
  return half_half_recurrence(alpha, x, y);
}

// In double, the recurrence and Gauss's value at x = 1 run in long double
// (and c0, layernorm_c0): Carlson's R_F and R_D and the gamma ratio carry a
// few eps each, which the recurrence amplified (for d = 17 to 48 the slope
// F' was off by up to 180 eps, for d = 5 and 9 the RMS was 3-4 eps;
// docs/accuracy.md). With the 11 extra bits every d from 4 to 60 is within
// 5.4 eps peak and 1.7 eps RMS, at about 1.4 times the cost of the double
// recurrence.
template <class Real>
HalfHalfPair<Real> half_half(Real alpha, Real x, Real y) {
  if (y > 0 && (x <= Real(0.5) || alpha >= half_half_series_alpha<Real>)) return half_half_series(alpha, x, y);
  if constexpr (std::is_same_v<Real, double>) {
    const HalfHalfPair<long double> wide = half_half<long double>(alpha, x, y);
    return {static_cast<double>(wide.h0), static_cast<double>(wide.diff)};
  } else {
    return half_half_at_one_or_by_recurrence(alpha, x, y);
  }
}

// F(rho) and F'(rho) (see the header comment), for d >= 4 and |rho| <= 1.
template <class Real>
struct LayerNormAngle {
  Real corr;   // F(rho) = E[cos angle]
  Real slope;  // F'(rho)
};

// Tag of LayerNorm's per-thread memo of c0 (core/memo.hpp).
struct LayerNormC0Tag {};

// c0 = (2/k) (Gamma(alpha + 1/2) / Gamma(alpha))^2, k = d - 1, alpha = k/2:
// depends on d only (LayerNorm computes it once per width).
template <class Real>
Real layernorm_c0(Real d) {
  // Below d = 49 (the contiguous relation's widths) the gamma ratio in double
  // is off by up to 3.8 eps (d = 5), so it is taken in long double (about
  // 1 us instead of 0.09); above, double is within 1.2 eps.
  if constexpr (std::is_same_v<Real, double>) {
    if (d < 2 * half_half_series_alpha<double> + 1) return static_cast<double>(layernorm_c0<long double>(d));
  }
  const layernorm_policy pol;
  const Real k = d - 1, alpha = k / 2;
  const Real ratio = boost::math::tgamma_delta_ratio(alpha, Real(0.5), pol);  // G(a)/G(a+1/2)
  return 2 / (k * ratio * ratio);
}

// F and F' from H0 and D = H0 - H1 at |rho|.
template <class Real>
LayerNormAngle<Real> layernorm_angle_from(Real d, Real rho, Real c0, const HalfHalfPair<Real>& h) {
  using std::abs;
  const Real k = d - 1;
  const Real abs_rho = std::min(Real(abs(rho)), Real(1));
  const Real corr = abs_rho * c0 * (h.h0 - h.diff);
  // k H0 - (k - 1) H1 = H0 + (k - 1) (H0 - H1)
  const Real slope = c0 * (h.h0 + (k - 1) * h.diff);
  return {rho < 0 ? -corr : corr, slope};
}

template <class Real>
LayerNormAngle<Real> layernorm_angle(Real d, Real rho, Real c0) {
  using std::abs;
  const Real abs_rho = std::min(Real(abs(rho)), Real(1));
  const Real x = abs_rho * abs_rho, y = (1 - abs_rho) * (1 + abs_rho);
  return layernorm_angle_from(d, rho, c0, half_half((d - 1) / 2, x, y));
}

template <class Real>
LayerNormAngle<Real> layernorm_angle(Real d, Real rho) {
  return layernorm_angle(d, rho, layernorm_c0(d));
}

// c0 G for G = H1(1) - H1(1 - y), H1 = 2F1(1/2, 1/2; alpha + 1; .), at
// 0 < y < 1/8 (c0 H1(1) = 1). Subtracting keeps only eps/G of relative
// accuracy, G ~ y/(4 (alpha - 1)); instead:
// * alpha >= half_half_series_alpha: Gauss's series term by term,
//   sum_n t_n (1 - x^n) (t_n its coefficients) with 1 - x^n = -expm1(n log1p(-y)); the tail after
//   term n is at most y n t_n (n + 5/4)/(alpha - 5/4) (1 - x^m <= m y, and
//   the ratio of m t_m is at most (m + 5/4)/(m + alpha + 1)) and at most
//   t_n (n + 1/2)/(alpha - 1/2);
// * half-integer alpha = j + 1/2 (even d), the connection formula about
//   x = 1 (DLMF 15.8.4; c - a - b = alpha, A1 = H1(1) = 1/c0,
//   Gamma(alpha + 1) Gamma(-alpha)/pi = -1/sin(pi alpha) = (-1)^(j + 1)):
//     c0 G = -sum_{n >= 1} tau_n + (-1)^j c0 y^alpha 2F1(alpha + 1/2, alpha + 1/2; alpha + 1; y),
//     tau_n = (1/2)_n^2 y^n/((1 - alpha)_n n!)  (tau_1 = -y/(4 (alpha - 1)));
// * integer alpha = m (odd d), the logarithmic case (DLMF 15.8.10):
//     c0 G = -sum_{n=1}^{m-1} tau_n + c0 ((-y)^m/pi) sum_{k >= 0} rho_k L_k,
//     rho_k = (m + 1/2)_k^2 y^k/(k! (m + 1)_k),
//     L_k = ln y - psi(k + 1) - psi(k + m + 1) + 2 psi(k + m + 1/2),
//     L_0 = ln y - H_m - 4 ln 2 + 4 sum_{i=1}^m 1/(2i - 1).
// Both are checked against H1(1) - H1(1 - y) in 50 digits
// (tests/test_reference50.cpp). At y < 1/8 the terms fall by at least a
// factor 2 y (n + 1/2)^2/(n (n + 1 - alpha)) once n > 2 alpha, and the
// parts cancel by at most a factor 2 (alpha = 3/2).
template <class Real>
Real half_half_complement(Real alpha, Real c0, Real y) {
  using std::abs;
  using std::expm1;
  using std::floor;
  using std::log;
  using std::log1p;
  using std::pow;
  const Real eps = std::numeric_limits<Real>::epsilon() / 4;
  const int max_terms = 100000;
  if (alpha >= half_half_series_alpha<Real>) {
    const Real log_x = log1p(-y);
    Real term = 1, sum = 0;
    for (int n = 1; n < max_terms; ++n) {
      const Real nn = static_cast<Real>(n);
      term *= (nn - Real(0.5)) * (nn - Real(0.5)) / ((nn + alpha) * nn);  // t_n of H1, without x^n
      sum += term * -expm1(nn * log_x);
      const Real tail = std::min(y * nn * term * (nn + Real(1.25)) / (alpha - Real(1.25)),
                                 term * (nn + Real(0.5)) / (alpha - Real(0.5)));
      if (tail <= eps * sum) return c0 * sum;
    }
  } else {
    const bool integer = floor(alpha) == alpha;
    // -sum tau_n: all n for half-integer alpha, n < alpha for integer alpha.
    Real tau = 1, head = 0;
    for (int n = 1; n < max_terms; ++n) {
      const Real nn = static_cast<Real>(n);
      if (integer && nn >= alpha) break;
      tau *= (nn - Real(0.5)) * (nn - Real(0.5)) / ((nn - alpha) * nn) * y;
      head -= tau;
      if (nn > 2 * alpha + 2 && abs(tau) <= eps * abs(head)) break;
    }
    Real rest = 0;
    if (integer) {
      const Real pi = boost::math::constants::pi<Real>();
      Real l = log(y) - 4 * boost::math::constants::ln_two<Real>();
      for (int i = 1; i <= static_cast<int>(alpha); ++i) l += 4 / Real(2 * i - 1) - 1 / Real(i);
      Real rho = 1, sum = l;
      for (int k = 1; k < max_terms; ++k) {
        const Real kk = static_cast<Real>(k);
        rho *= (kk - Real(0.5) + alpha) * (kk - Real(0.5) + alpha) / (kk * (alpha + kk)) * y;
        l += 2 / (kk + alpha - Real(0.5)) - 1 / kk - 1 / (kk + alpha);
        sum += rho * l;
        if (abs(rho * l) <= eps * std::max(Real(abs(sum)), Real(1))) break;
      }
      const Real sign = static_cast<int>(alpha) % 2 == 0 ? 1 : -1;
      rest = sign * c0 * pow(y, alpha) / pi * sum;
    } else {
      Real sigma = 1, sum = 1;
      for (int n = 1; n < max_terms; ++n) {
        const Real nn = static_cast<Real>(n);
        sigma *= (nn - Real(0.5) + alpha) * (nn - Real(0.5) + alpha) / ((nn + alpha) * nn) * y;
        sum += sigma;
        if (sigma <= eps * sum) break;
      }
      const Real sign = static_cast<int>(alpha - Real(0.5)) % 2 == 0 ? 1 : -1;
      rest = sign * c0 * pow(y, alpha) * sum;
    }
    return head + rest;
  }
  throw overflow_error("sigprop::LayerNorm: the complement's series did not converge (alpha = " +
                       format_number(static_cast<double>(alpha)) + ", y = " + format_number(static_cast<double>(y)) +
                       ")");
}

// 1 - F(1 - delta) for delta in [0, 2], for d >= 4. In double it runs in long
// double. delta >= 1/16: 1 - F, where F <= 1 - 1/20 and the subtraction loses
// at most a factor 20 (0.01 eps of double in long double); below,
// delta + rho c0 G of two positive terms (half_half_complement).
template <class Real>
Real layernorm_corr_complement(Real d, Real delta) {
  if constexpr (std::is_same_v<Real, double>) {
    return static_cast<double>(layernorm_corr_complement<long double>(d, delta));
  } else {
    if (delta == 0) return 0;
    const Real c0 = layernorm_c0(d), rho = 1 - delta;
    if (delta >= Real(1) / 16) return 1 - layernorm_angle(d, rho, c0).corr;
    return delta + rho * half_half_complement((d - 1) / 2, c0, delta * (2 - delta));
  }
}

// Gauss's series of half_half_series on every lane of a batch at once (the
// same terms and stopping rule per lane; a lane stops adding terms once its
// own rule is met, so each lane gets the scalar series' sum). For lanes with
// y > 0 and alpha >= half_half_series_alpha or x <= 1/2 (half_half's
// choice of the series); the caller evaluates the others lane by lane.
template <class T>
HalfHalfPair<T> half_half_series_lanes(const T& alpha, const T& x, const T& y) {
  using Real = math::real_of<T>;
  const Real eps = std::numeric_limits<Real>::epsilon() / 2;
  const T ratio_tail = x / y;  // x/(1 - x): y > 0 on these lanes
  // The width bound only where alpha > 3/2: elsewhere its factor alpha - 3/2
  // is set to -1, which no non-negative bound can reach.
  const T width_factor = math::select(math::less(Real(1.5), alpha), alpha - Real(1.5), -1);
  T term = T::Ones(alpha.size()), h0 = term, diff = T::Zero(alpha.size());
  T stopped = T::Zero(alpha.size());  // a mask (core/select.hpp)
  for (int n = 0; n < 100000; ++n) {
    const Real nn = static_cast<Real>(n);
    term *= (nn + Real(0.5)) * (nn + Real(0.5)) / ((nn + alpha) * (nn + 1)) * x;
    h0 = math::select(stopped, h0, h0 + term);
    diff = math::select(stopped, diff, diff + term * (nn + 1) / (alpha + nn + 1));
    // term min(x/y, (n + 1 + alpha)/(alpha - 3/2)) <= eps diff, without the division
    const T bound = eps * diff;
    stopped = math::mask_or(stopped, math::mask_or(math::less_equal(term * ratio_tail, bound),
                                                   math::less_equal(term * (nn + 1 + alpha), bound * width_factor)));
    if (math::all_of(stopped)) return {h0, diff};
  }
  throw overflow_error("sigprop::LayerNorm: the hypergeometric series did not converge in a batch");
}

/// E[m/Q] for Q = |x_c|^2 over a k-dimensional subspace (k = d - 1 for
/// LayerNorm, d for RMSNorm), of mean m and norm_var_ratio nu (relative
/// variance 2 nu/k). Up to the Gaussian's nu = 1, Q ~ m chi^2_n/n with
/// n = k/nu, exact for the scaled chi-square with these two moments:
/// k/(k - 2 nu). Beyond, a row is taken as a Gaussian row times an
/// independent scale carrying the excess relative variance 2 (nu - 1)/k,
/// whose E[m/scale^2] is taken to second order:
///   k/(k - 2) (1 + 2 (nu - 1)/k).
/// Continuous at nu = 1 and finite for every nu (k > 2). The chi-square form
/// beyond nu = 1 had a pole at nu = k/2, which the upper tail of a heavy-tailed
/// activation or attention output reaches at small d, although E[1/Q] depends
/// on the lower tail.
template <class T>
T inverse_norm_factor(const T& nu, const T& k) {
  const T below = math::min_of(nu, T(0 * nu + 1)), excess = math::max_of(T(nu - 1), T(0 * nu));
  return k / (k - 2 * below) * (1 + 2 * excess / k);
}

}  // namespace detail

template <class T = double>
class LayerNorm : public Component<LayerNorm<T>, T> {
  using Real = math::real_of<T>;
  // float lanes are evaluated in double (the series and recurrence cost the same).
  using Work = std::conditional_t<(sizeof(Real) < sizeof(double)), double, Real>;

 public:
  static constexpr const char* name = "sigprop::LayerNorm";
  static constexpr int homogeneity = 0;
  static constexpr bool sets_norm_coupling = true;

  /// `d`: the number of hidden units normalized over; an integer >= 4.
  explicit LayerNorm(T d) : d_(d) {
    sigprop::detail::require(
        name, "d", d_,
        [](double v) { return std::isfinite(v) && v >= 4 && v <= 1e15 && std::floor(v) == v; },
        "{4, 5, 6, ...} (an integer width; d <= 3 has no finite gradient variance)");
    // c0 (a gamma ratio in long double, about 1 us) depends on d only: the
    // LayerNorms of a stack share their width, so the last one is kept.
    c0_ = detail::memoized<detail::LayerNormC0Tag>(std::array<T, 1>{d_}, [&] {
      return math::map_lanes(d_, [](Real d) { return static_cast<Real>(detail::layernorm_c0<Work>(d)); });
    });
  }

  const T& d() const { return d_; }

  /// A constant position (zero variance, or r^d = 1) has no direction to
  /// normalize.
  void require_input(const Moments<T>& in) const {
    require_positive(name, "var", in.var);
    sigprop::detail::require(name, "corr_dim", in.corr_dim, [](double v) { return v < 1; },
                             "[-1, 1) (r^d = 1 makes every position constant)");
  }

  Moments<T> forward_impl(const Moments<T>& in) const { return forward_with(in, angle(in.corr_len)); }

  GradMoments<T> backward_impl(const Moments<T>& in, const GradMoments<T>& g) const {
    return backward_with(in, angle(in.corr_len), g);
  }

  /// The record of a forward pass (core/record.hpp): the input and F, F' at
  /// its length correlation, which the backward map reuses.
  struct Record {
    Moments<T> in;
    detail::LayerNormAngle<T> angle;
  };

  /// The output for a validated `in`, as forward_trusted() gives it, and the record.
  std::pair<Moments<T>, Record> record(const Moments<T>& in) const {
    require_input(in);
    Record r{in, angle(in.corr_len)};
    return {this->checked(name, forward_with(in, r.angle)), r};
  }

  GradMoments<T> backward_recorded_impl(const Record& r, const GradMoments<T>& g) const {
    return backward_with(r.in, r.angle, g);
  }

  Domain<T> domain_recorded(const Record& r) const { return this->domain_impl(r.in); }  // exact forms

 private:
  Moments<T> forward_with(const Moments<T>& in, const detail::LayerNormAngle<T>& a) const {
    Moments<T> out;
    out.mean = 0 * in.mean;
    out.var = 0 * in.mean + 1;
    out.corr_len = a.corr;
    out.corr_dim = -1 / (d_ - 1) + 0 * in.mean;
    out.norm_var_ratio = 0 * in.mean;
    out.hidden_spread = spread::normalized(in, d_);  // core/hidden_spread.hpp
    out.linear_share = linear_share_of(in);
    return out;
  }

  GradMoments<T> backward_with(const Moments<T>& in, const detail::LayerNormAngle<T>& a,
                               const GradMoments<T>& g) const {
    const T centered_var = in.var * (1 - in.corr_dim);  // per-coordinate variance after centering
    const T slope_at_one = (d_ - 2) / (d_ - 3);         // F'(1) = (k - 1)/(k - 2)
    // E|P g|^2/(d Var[g]) times d E[1/Q] (see the header comment)
    const T aligned = align_mean_of(g) + align_activation_of(g);
    require_aligned_energy(aligned);
    GradMoments<T> out;
    using std::exp;
    const T nu = norm_var_ratio_of(in), coupling = norm_coupling_of(g);
    // E[|P g_i|^2 m/Q_i] = E|P g|^2 E[m/Q] e^{c} for log-normal row energies
    // with Cov[log |g_i|^2, log(m/Q_i)] = c (the header comment).
    out.var = g.var * (d_ - aligned) * detail::inverse_norm_factor(nu, T(d_ - 1)) * exp(coupling) /
              ((d_ - 1) * centered_var);
    out.corr_len = g.corr_len * a.slope / slope_at_one;
    out.align_activation = 0 * g.var;
    out.align_mean = 0 * g.var;
    // g_in,i = P g_i / sd(x_i): the input gradient's log-energy gains
    // log(m/Q_i), of variance Var[Q]/m^2 = 2 nu/(d - 1).
    out.norm_coupling = coupling + 2 * nu / (d_ - 1);
    return out;
  }

 public:
  /// Two orthogonal directions hold at most all of the energy: a_1 + a_x <= d.
  void require_aligned_energy(const T& aligned) const {
    if constexpr (!is_scalar_v<T>)
      if ((aligned <= d_).all()) return;
    for (std::size_t i = 0; i < lane_count(aligned); ++i)
      if (!(lane(aligned, i) <= lane(d_, i)))
        sigprop::detail::raise_domain(name, "grad_align_mean + grad_align_activation",
                                      static_cast<double>(lane(aligned, i)),
                                      "[0, d] (d = " + sigprop::detail::format_number(static_cast<double>(lane(d_, i))) + ")");
  }

  /// r^l_out = E[cos angle] as a function of the input length correlation.
  T corr_len_map(const T& corr_len) const { return angle(corr_len).corr; }

  /// 1 - r^l_out from one_minus_corr = 1 - r^l in [0, 2], accurate to a few
  /// eps relative where 1 - corr_len_map(r) keeps only eps/(1 - r)
  /// (detail::layernorm_corr_complement; docs/accuracy.md).
  T corr_complement(const T& one_minus_corr) const {
    sigprop::detail::require(name, "one_minus_corr", one_minus_corr, [](double v) { return v >= 0 && v <= 2; },
                             "[0, 2] (1 - r for a correlation r in [-1, 1])");
    return math::map_lanes(d_, one_minus_corr, [](Real d, Real delta) {
      return static_cast<Real>(detail::layernorm_corr_complement<Work>(Work(d), Work(delta)));
    });
  }

  /// F'(rho): the slope of corr_len_map, which scales the gradient covariance.
  T grad_corr_factor(const T& corr_len) const { return angle(corr_len).slope; }

 private:
  // F and F' at rho. Scalars: one evaluation. Batches of double: Gauss's
  // series on all lanes at once where half_half would use it, the
  // recurrence (small d, |rho| > 1/sqrt 2) and rho = +-1 lane by lane.
  // Memoized per thread (core/memo.hpp): forward, the backward's replay of
  // it and the backward's slope all ask for the same angle (a backward from
  // a record takes it from there).
  detail::LayerNormAngle<T> angle(const T& rho) const {
    return detail::memoized<LayerNorm>(std::array<T, 2>{d_, rho}, [&] { return compute_angle(rho); });
  }

  detail::LayerNormAngle<T> compute_angle(const T& rho) const {
    if constexpr (is_scalar_v<T> || !std::is_same_v<Real, Work>) {
      T corr = rho, slope = rho;
      for (std::size_t i = 0; i < lane_count(rho); ++i) {
        const auto a = detail::layernorm_angle<Work>(Work(lane(d_, i)), Work(lane(rho, i)), Work(lane(c0_, i)));
        set_lane(corr, i, static_cast<Real>(a.corr));
        set_lane(slope, i, static_cast<Real>(a.slope));
      }
      return {corr, slope};
    } else {
      const T abs_rho = rho.abs().min(Real(1));
      const T x = abs_rho * abs_rho, y = (1 - abs_rho) * (1 + abs_rho);
      const T alpha = (d_ - 1) / 2;
      const auto by_series = (y > 0) && (x <= Real(0.5) || alpha >= detail::half_half_series_alpha<Real>);
      detail::HalfHalfPair<T> h{T::Zero(rho.size()), T::Zero(rho.size())};
      if (by_series.any()) {
        // Lanes not by series get a harmless x = 0 (one term) here and are replaced below.
        const T xs = by_series.select(x, Real(0)), ys = by_series.select(y, Real(1));
        h = detail::half_half_series_lanes(alpha, xs, ys);
      }
      for (Eigen::Index i = 0; i < rho.size(); ++i)
        if (!by_series(i)) {
          const auto one = detail::half_half(alpha(i), x(i), y(i));
          h.h0(i) = one.h0;
          h.diff(i) = one.diff;
        }
      const T k = d_ - 1;
      const T corr = abs_rho * c0_ * (h.h0 - h.diff);
      return {math::select(math::less(rho, 0), -corr, corr), c0_ * (h.h0 + (k - 1) * h.diff)};
    }
  }


  T d_;
  T c0_;  // layernorm_c0(d), lane-wise
};

}  // namespace sigprop
