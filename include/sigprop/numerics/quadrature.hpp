// sigprop/numerics/quadrature.hpp -- adaptive Gauss-Kronrod quadrature on
// Boost.Math's rules, for Gaussian expectations whose integrand can cancel.
//
// adaptive_gauss_kronrod: the 61-point Kronrod rule with its embedded 30-point
// Gauss rule (boost::math::quadrature::gauss_kronrod<R, 61>, gauss<R, 30>),
// error estimate |K61 - G30|, and the global bisection of the worst piece of
// QUADPACK's routine QAG (Piessens et al., QUADPACK, 1983) until the summed
// estimate is below 1e-12 max(|integral|, floor). The absolute floor is why it
// is not Boost's own adaptive driver: that one is relative to the integral
// only, which a covariance near 0 does not have. The caller places cuts at the
// integrand's kinks and narrow features.
//
// gaussian_expectation: E[f(Z)], Z ~ N(0, 1), by Boost's adaptive
// gauss_kronrod<R, 31> on the whole line (relative tolerance 1e-12): GeLU's
// moments, which the first driver does not reproduce to 1e-12 at extreme
// inputs (docs/components/gelu.md, "Nonzero mean").
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include <boost/math/quadrature/gauss.hpp>
#include <boost/math/quadrature/gauss_kronrod.hpp>

#include "sigprop/numerics/math.hpp"

namespace sigprop::detail {

/// The Gauss-Kronrod 61-point rule on [a, b] and its error estimate
/// |K61 - G30|, reported as 0 at the rounding level 50 eps sum |w f|, below
/// which bisecting a cancelling integrand cannot help.
template <class R, class G>
R gauss_kronrod_piece(const G& g, R a, R b, R& error) {
  error = 0;
  if (!(a < b)) return 0;
  using Kronrod = boost::math::quadrature::gauss_kronrod<R, 61>;
  using Gauss = boost::math::quadrature::gauss<R, 30>;
  const auto& x = Kronrod::abscissa();
  const auto& wk = Kronrod::weights();
  const auto& wg = Gauss::weights();  // at the odd Kronrod nodes
  const R mid = a + (b - a) / 2, half = (b - a) / 2;
  const R f0 = g(mid);
  R kronrod = wk[0] * f0, gauss = 0, l1 = wk[0] * std::abs(f0);
  for (std::size_t i = 1; i < x.size(); ++i) {
    const R fp = g(mid + half * x[i]), fm = g(mid - half * x[i]);
    kronrod += wk[i] * (fp + fm);
    l1 += wk[i] * (std::abs(fp) + std::abs(fm));
    if (i % 2 == 1) gauss += wg[i / 2] * (fp + fm);
  }
  const R difference = std::abs(kronrod - gauss);
  error = difference > 50 * std::numeric_limits<R>::epsilon() * l1 ? half * difference : R(0);
  return half * kronrod;
}

/// Integral of g over [cuts[0], cuts[n - 1]] (the n cuts sorted) by global
/// adaptive bisection: split the piece with the largest error estimate until
/// the summed estimate is below 1e-12 max(|integral|, floor), within a budget
/// of 64 pieces (3904 points).
template <class R, class G>
R adaptive_gauss_kronrod(const G& g, const R* cuts, std::size_t n, R floor) {
  constexpr std::size_t budget = 64;
  constexpr R tolerance = R(1e-12);
  R a[budget], b[budget], value[budget], error[budget];
  std::size_t pieces = 0;
  for (std::size_t i = 0; i + 1 < n; ++i) {
    a[pieces] = cuts[i];
    b[pieces] = cuts[i + 1];
    value[pieces] = gauss_kronrod_piece(g, a[pieces], b[pieces], error[pieces]);
    ++pieces;
  }
  while (pieces < budget) {
    R total = 0, total_error = 0;
    std::size_t worst = 0;
    for (std::size_t i = 0; i < pieces; ++i) {
      total += value[i];
      total_error += error[i];
      if (error[i] > error[worst]) worst = i;
    }
    if (total_error <= tolerance * std::max(std::abs(total), floor)) break;
    const R mid = a[worst] + (b[worst] - a[worst]) / 2;
    a[pieces] = mid;
    b[pieces] = b[worst];
    b[worst] = mid;
    value[worst] = gauss_kronrod_piece(g, a[worst], mid, error[worst]);
    value[pieces] = gauss_kronrod_piece(g, mid, b[pieces], error[pieces]);
    ++pieces;
  }
  R sum = 0;
  for (std::size_t i = 0; i < pieces; ++i) sum += value[i];
  return sum;
}

/// Inserts c into the sorted cuts[0 .. n - 1] (room for one more) and counts it.
template <class R>
void insert_cut(R* cuts, std::size_t& n, R c) {
  std::size_t i = n++;
  for (; cuts[i - 1] > c; --i) cuts[i] = cuts[i - 1];
  cuts[i] = c;
}

/// E[f(Z)], Z ~ N(0, 1), by Boost.Math's adaptive Gauss-Kronrod (31 points,
/// depth 15) on the whole line, to 1e-12 relative.
template <class R, class F>
R gaussian_expectation(F f) {
  using boost::math::quadrature::gauss_kronrod;
  const R inf = std::numeric_limits<R>::infinity();
  return gauss_kronrod<R, 31>::integrate([&f](R z) { return f(z) * math::normal_pdf(z); }, -inf, inf, 15,
                                         R(1e-12));
}

}  // namespace sigprop::detail
