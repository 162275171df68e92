// sigprop/numerics/hypergeometric.hpp -- Gauss's hypergeometric function
// 2F1(1/2, 1/2; c; x) as LayerNorm's angle needs it: the pair
// H0 = 2F1(1/2, 1/2; alpha; x), D = H0 - 2F1(1/2, 1/2; alpha + 1; x) (the
// difference without cancellation), the complement H1(1) - H1(1 - y) near
// x = 1, and Gauss's series on a batch at once.
//
// Method: Gauss's series where it converges fast (x <= 1/2 or alpha >= 24);
// otherwise Gauss's contiguous relation in c from closed forms (Carlson's R_F,
// R_D), run in long double for double; near x = 1 the connection formulas.
// References: DLMF 15.4, 15.5.18, 15.8.4, 15.8.10, 19.25.1. Derivations and
// accuracy: docs/components/layernorm.md.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include <boost/math/constants/constants.hpp>
#include <boost/math/policies/policy.hpp>
#include <boost/math/special_functions/ellint_rd.hpp>
#include <boost/math/special_functions/ellint_rf.hpp>
#include <boost/math/special_functions/gamma.hpp>

#include "sigprop/core/errors.hpp"
#include "sigprop/numerics/math.hpp"
#include "sigprop/numerics/select.hpp"

namespace sigprop::detail {

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

// H0 and D. In double, the recurrence and Gauss's value at x = 1 run in long
// double: the recurrence amplifies the few eps of Carlson's R_F, R_D and the
// gamma ratio (docs/components/layernorm.md, docs/accuracy.md).
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
  T stopped = T::Zero(alpha.size());  // a mask (numerics/select.hpp)
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

}  // namespace sigprop::detail
