// The vectorized transcendentals of core/math.hpp against the C library's
// scalar functions, in units in the last place of the reference.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <Eigen/Core>

#include "catch.hpp"
#include "sigprop/core/math.hpp"

namespace {

using Array = Eigen::ArrayXd;

// |x - ref| in ulps of ref (the spacing of doubles at |ref|).
double ulps(double x, double ref) {
  if (x == ref) return 0;
  const double a = std::abs(ref);
  const double spacing = a == 0 ? std::numeric_limits<double>::denorm_min()
                                : std::nextafter(a, std::numeric_limits<double>::infinity()) - a;
  return std::abs(x - ref) / spacing;
}

template <class F, class G>
double max_ulps(const std::vector<double>& xs, F vectorized, G reference) {
  const Array x = Eigen::Map<const Array>(xs.data(), static_cast<Eigen::Index>(xs.size()));
  const Array y = vectorized(x);
  double worst = 0;
  for (Eigen::Index i = 0; i < x.size(); ++i) worst = std::max(worst, ulps(y(i), reference(x(i))));
  return worst;
}

}  // namespace

TEST_CASE("math::atan on arrays is within 3 ulp of std::atan", "[math]") {
  std::mt19937_64 rng(7);
  std::vector<double> xs;
  // Log-uniform magnitudes over the whole double range, both signs, plus the
  // reduction boundaries tan(pi/8), tan(3 pi/8) and their neighbours.
  std::uniform_real_distribution<double> exponent(-300, 300), unit(-1, 1);
  for (int i = 0; i < 100000; ++i) xs.push_back((unit(rng) < 0 ? -1 : 1) * std::pow(10.0, exponent(rng)));
  for (int i = 0; i < 100000; ++i) xs.push_back(4 * unit(rng));
  for (double b : {0.4142135623730950488, 2.414213562373095049, 1.0})
    for (double x = b * (1 - 1e-12); x < b * (1 + 1e-12); x = std::nextafter(x, 10.0) + b * 1e-15) xs.push_back(x);
  xs.push_back(0.0);
  xs.push_back(-0.0);
  const double worst = max_ulps(xs, [](const Array& x) { return sigprop::math::atan(x); },
                                [](double x) { return std::atan(x); });
  INFO("max error " << worst << " ulp over " << xs.size() << " points");
  CHECK(worst <= 3);
  // Limits and non-finite input.
  Array special(4);
  special << std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
      std::numeric_limits<double>::quiet_NaN(), 0.0;
  const Array y = sigprop::math::atan(special);
  CHECK(y(0) == std::atan(special(0)));
  CHECK(y(1) == std::atan(special(1)));
  CHECK(std::isnan(y(2)));
  CHECK(y(3) == 0.0);
}

TEST_CASE("math::asin on arrays is within 4 ulp of std::asin", "[math]") {
  std::mt19937_64 rng(11);
  std::vector<double> xs;
  std::uniform_real_distribution<double> unit(-1, 1), exponent(-300, 0);
  for (int i = 0; i < 100000; ++i) xs.push_back(unit(rng));
  for (int i = 0; i < 50000; ++i) xs.push_back((unit(rng) < 0 ? -1 : 1) * std::pow(10.0, exponent(rng)));
  // Near +-1, where asin has its square-root singularity: r = 1 - 2^-k.
  for (int k = 1; k <= 53; ++k) {
    xs.push_back(1 - std::ldexp(1.0, -k));
    xs.push_back(-1 + std::ldexp(1.0, -k));
  }
  for (double b : {1.0, -1.0, 0.0, std::sqrt(0.5), -std::sqrt(0.5)}) xs.push_back(b);
  const double worst = max_ulps(xs, [](const Array& x) { return sigprop::math::asin(x); },
                                [](double x) { return std::asin(x); });
  INFO("max error " << worst << " ulp over " << xs.size() << " points");
  CHECK(worst <= 4);
  Array outside(3);
  outside << 1 + 1e-15, -1 - 1e-15, std::numeric_limits<double>::quiet_NaN();
  CHECK(sigprop::math::asin(outside).isNaN().all());
}

TEST_CASE("math::acos_stable on arrays is as accurate as on scalars", "[math]") {
  // Reference acos in long double (64-bit mantissa on x86-64). Both paths
  // carry the conditioning of forming (1 - r)/2 (about 10 eps relative near
  // r = -1); the array path adds at most its asin's 4 ulp (4 eps relative).
  std::vector<double> rs;
  for (int i = 0; i <= 2000; ++i) rs.push_back(-1 + i / 1000.0);
  for (int i = 0; i <= 2000; ++i) rs.push_back(0.999 + i * 1e-7);
  for (int k = 1; k <= 52; ++k) rs.push_back(1 - std::ldexp(1.0, -k));
  const Array r = Eigen::Map<const Array>(rs.data(), static_cast<Eigen::Index>(rs.size()));
  const Array batched = sigprop::math::acos_stable(r);
  double worst_batched = 0, worst_scalar = 0;
  for (Eigen::Index i = 0; i < r.size(); ++i) {
    const long double ref = std::acos(static_cast<long double>(r(i)));
    if (ref == 0) continue;
    const auto rel = [ref](double x) { return static_cast<double>(std::abs((x - ref) / ref)); };
    worst_batched = std::max(worst_batched, rel(batched(i)));
    worst_scalar = std::max(worst_scalar, rel(sigprop::math::acos_stable(r(i))));
  }
  const double eps = std::numeric_limits<double>::epsilon();
  INFO("arrays " << worst_batched / eps << " eps, scalars " << worst_scalar / eps << " eps");
  CHECK(worst_batched <= worst_scalar + 4 * eps);
  CHECK(worst_batched <= 16 * eps);
}
