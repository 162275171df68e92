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
// The four moments are Gauss-Legendre quadratures (Boost.Math, 30 points
// per panel) over [-12, 12] standard deviations, split at phi's kink x = 0.
// The rule neglects the correlation between the entries of a row (corr_dim).
// Checked by tests/test_vector_moments.cpp.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>

#include <boost/math/quadrature/gauss.hpp>

#include "sigprop/core/lanes.hpp"
#include "sigprop/core/math.hpp"
#include "sigprop/core/memo.hpp"
#include "sigprop/core/moments.hpp"

namespace sigprop::detail {

/// (kappa - 1)/2 of phi(mu + s z), z ~ N(0, 1), in double.
template <class Phi>
double activation_kurtosis_ratio(double mu, double var, Phi phi) {
  using boost::math::quadrature::gauss;
  const double s = std::sqrt(var);
  if (!(s > 0)) return 1;  // a constant row: the rule's Gaussian value
  constexpr double reach = 12;
  const double kink = std::clamp(-mu / s, -reach, reach);
  // Raw moments of d = (phi - phi(mu))/scale: the shift keeps the centred
  // moments and avoids cancellation at large means, the scale (the RMS of
  // phi - phi(mu)) keeps the fourth power inside double's range.
  const double shift = phi(mu);
  const auto moment = [&](int k, double scale) {
    const auto f = [&](double z) { return std::pow((phi(mu + s * z) - shift) / scale, k) * math::normal_pdf(z); };
    return gauss<double, 30>::integrate(f, -reach, kink) + gauss<double, 30>::integrate(f, kink, reach);
  };
  const double scale = std::sqrt(moment(2, 1));
  if (!(scale > 0) || !std::isfinite(scale)) return 1;  // phi constant to double precision
  std::array<double, 5> raw{};
  for (int k = 1; k <= 4; ++k) raw[k] = moment(k, scale);
  const double m = raw[1], var_phi = raw[2] - m * m;
  if (!(var_phi > 1e-12)) return 1;
  const double fourth = raw[4] - 4 * m * raw[3] + 6 * m * m * raw[2] - 3 * m * m * m * m;
  return (fourth / (var_phi * var_phi) - 1) / 2;
}

/// The output's norm_var_ratio of the elementwise activation Tag with scalar
/// map phi (header comment), lane by lane; memoized per thread.
template <class Tag, class T, class Phi>
T activation_norm_var_ratio(const Moments<T>& in, Phi phi) {
  const T nu_in = norm_var_ratio_of(in);
  return memoized<Tag>(std::array<T, 3>{in.mean, in.var, nu_in}, [&] {
    T out = nu_in;
    for (std::size_t i = 0; i < lane_count(in.mean); ++i) {
      const double nu = activation_kurtosis_ratio(static_cast<double>(lane(in.mean, i)),
                                                  static_cast<double>(lane(in.var, i)), phi) +
                        static_cast<double>(lane(nu_in, i)) - 1;
      set_lane(out, i, std::max(nu, 0.0));
    }
    return out;
  });
}

}  // namespace sigprop::detail
