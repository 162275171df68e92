// sigprop/components/detail/activation_norm.hpp -- the norm_var_ratio
// (core/moments.hpp) of an elementwise activation's output.
//
// Given the row's scale, the entries of a pre-activation row are i.i.d.
// N(mu, s^2) (the output of a Linear map is Gaussian given its input, and a
// LayerNorm output fed through one has a fixed scale). The centred squared
// norm of phi(x) over n entries is then a sum of n i.i.d. terms (phi - E phi)^2,
// whose variance in units of the Gaussian value 2 n Var[phi]^2 is
//   nu_phi = (kappa - 1)/2,  kappa = E[(phi - E phi)^4] / Var[phi]^2,
// 1 for a linear phi (kappa = 3), 2.20 for ReLU at mean 0 (kappa = 5.41).
// The scale's own fluctuation, nu_in - 1 of the input, passes on as through
// a map homogeneous of degree 1:
//   nu_out = max(0, (kappa - 1)/2 + nu_in - 1).
// ReLU's moments are closed forms (truncated normal moments, vectorized);
// GeLU's and SiLU's are Gauss-Legendre quadratures (Boost.Math, 20 points
// on each side of x = 0 over [-8, 8] standard deviations; 4e-8 relative for
// ReLU against its closed form), memoized. The
// rule neglects the correlation between the entries of a row (corr_dim).
// Checked by tests/test_vector_moments.cpp.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>

#include <boost/math/quadrature/gauss.hpp>

#include "sigprop/core/lanes.hpp"
#include "sigprop/core/memo.hpp"
#include "sigprop/core/moments.hpp"
#include "sigprop/numerics/math.hpp"

namespace sigprop::detail {

/// nu_out from (kappa - 1)/2 of phi and the input's norm_var_ratio (header comment).
template <class T>
T activation_norm_rule(const T& kurtosis_ratio, const T& nu_in) {
  return math::clamp_nonnegative(T(kurtosis_ratio + nu_in - 1));
}

/// (kappa - 1)/2 from raw moments E[d^k], k = 1..4, of any shift d of phi;
/// 1 (the Gaussian value) where phi is constant to the precision at hand.
/// Formed as (mu4/mu2)/mu2, which stays finite where mu2^2 underflows.
template <class T>
T kurtosis_ratio_of(const T& m1, const T& m2, const T& m3, const T& m4) {
  const T var = m2 - m1 * m1;
  const T fourth = m4 - 4 * m1 * m3 + 6 * m1 * m1 * m2 - 3 * m1 * m1 * m1 * m1;
  const T usable = math::max_of(var, T(1e-12 * m2));  // below: rounding only
  const T kappa = math::ratio_or(T(math::ratio_or(fourth, usable, 0)), usable, 3);
  return (kappa - 1) / 2;
}

/// (kappa - 1)/2 of ReLU(x), x ~ N(mu, s^2): with a = mu/s and
/// M_j = E[z^j 1{z > -a}] = (j - 1) M_{j-2} + (-a)^{j-1} phi(a) (integration by parts),
/// E[ReLU(x)^k] = s^k sum_j C(k, j) a^{k-j} M_j. Vectorized.
template <class T>
T relu_kurtosis_ratio(const T& mean, const T& var) {
  using std::sqrt;
  const T s = sqrt(var);
  const T a = math::ratio_or(mean, s, 0);
  const T pdf = math::normal_pdf(a), cdf = math::normal_cdf(a);
  const T m0 = cdf, m1 = pdf, m2 = cdf - a * pdf, m3 = 2 * pdf + a * a * pdf, m4 = 3 * m2 - a * a * a * pdf;
  // moments of (a + z) 1{z > -a}, in units of s
  const T e1 = a * m0 + m1;
  const T e2 = a * a * m0 + 2 * a * m1 + m2;
  const T e3 = a * a * a * m0 + 3 * a * a * m1 + 3 * a * m2 + m3;
  const T e4 = a * a * a * a * m0 + 4 * a * a * a * m1 + 6 * a * a * m2 + 4 * a * m3 + m4;
  return kurtosis_ratio_of(e1, e2, e3, e4);
}

/// (kappa - 1)/2 of phi(mu + s z), z ~ N(0, 1), for a smooth scalar phi, in double.
template <class Phi>
double smooth_kurtosis_ratio(double mu, double var, Phi phi) {
  using boost::math::quadrature::gauss;
  const double s = std::sqrt(var);
  if (!(s > 0)) return 1;  // a constant row: the rule's Gaussian value
  constexpr double reach = 8;  // pdf(8) = 5e-15
  const double kink = std::clamp(-mu / s, -reach, reach);
  // Moments of d = (phi - phi(mu))/scale: the shift keeps the centred moments
  // and avoids cancellation at large means, the scale (the RMS of
  // phi - phi(mu)) keeps the fourth power inside double's range.
  const double shift = phi(mu);
  const auto integrate = [&](auto f) {
    return gauss<double, 20>::integrate(f, -reach, kink) + gauss<double, 20>::integrate(f, kink, reach);
  };
  const double scale = std::sqrt(integrate([&](double z) {
    const double d = phi(mu + s * z) - shift;
    return d * d * math::normal_pdf(z);
  }));
  if (!(scale > 0) || !std::isfinite(scale)) return 1;
  std::array<double, 4> m{};
  for (std::size_t k = 0; k < 4; ++k)
    m[k] = integrate([&](double z) {
      const double d = (phi(mu + s * z) - shift) / scale;
      double power = d;
      for (std::size_t j = 0; j < k; ++j) power *= d;
      return power * math::normal_pdf(z);
    });
  return kurtosis_ratio_of(m[0], m[1], m[2], m[3]);
}

/// The output's norm_var_ratio of the smooth elementwise activation Tag with
/// scalar map phi, lane by lane; memoized per thread.
template <class Tag, class T, class Phi>
T smooth_activation_norm_var_ratio(const Moments<T>& in, Phi phi) {
  const T nu_in = norm_var_ratio_of(in);
  return memoized<Tag>(std::array<T, 3>{in.mean, in.var, nu_in}, [&] {
    T kurtosis_ratio = nu_in;
    for (std::size_t i = 0; i < lane_count(in.mean); ++i)
      set_lane(kurtosis_ratio, i,
               smooth_kurtosis_ratio(static_cast<double>(lane(in.mean, i)), static_cast<double>(lane(in.var, i)), phi));
    return activation_norm_rule(kurtosis_ratio, nu_in);
  });
}

}  // namespace sigprop::detail
