// The vectorized transcendentals of numerics/math.hpp against the C library's
// scalar functions, in units in the last place of the reference.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <Eigen/Core>

#include "catch.hpp"
#include "sigprop/numerics/math.hpp"

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

// numerics/select.hpp: the vectorized comparisons and selection give what the
// scalar ?: gives, lane by lane, including NaN, signed zeros and infinities,
// on fixed-size chunks (all lanes in packets), on dynamic arrays of odd
// length (the last lanes by the scalar functors) and on float lanes.
namespace {

template <class T>
void check_select_against_scalar(const T& x, const T& y) {
  using R = typename T::Scalar;
  const T lt = sigprop::math::select(sigprop::math::less(x, y), x, y);
  const T le = sigprop::math::select(sigprop::math::less_equal(x, y), R(1), R(-1));
  const T either = sigprop::math::select(
      sigprop::math::mask_or(sigprop::math::less(x, R(0)), sigprop::math::less(y, R(0))), x / y, R(7));
  const T stored = sigprop::math::less(R(0), x);  // a stored mask, read again
  const T positive = sigprop::math::select(stored, x, R(0));
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    const R xi = x(i), yi = y(i);
    INFO("lane " << i << ": x = " << xi << ", y = " << yi);
    const R want_lt = xi < yi ? xi : yi, want_either = (xi < 0 || yi < 0) ? xi / yi : R(7);
    CHECK((lt(i) == want_lt || (std::isnan(lt(i)) && std::isnan(want_lt))));
    CHECK(std::signbit(lt(i)) == std::signbit(want_lt));
    CHECK(le(i) == (xi <= yi ? 1 : -1));
    CHECK((either(i) == want_either || (std::isnan(either(i)) && std::isnan(want_either))));
    CHECK(positive(i) == (xi > 0 ? xi : R(0)));
  }
  const bool all_below = sigprop::math::all_of(sigprop::math::less(x, y));
  bool want_all = true;
  for (Eigen::Index i = 0; i < x.size(); ++i) want_all = want_all && x(i) < y(i);
  CHECK(all_below == want_all);
}

}  // namespace

TEST_CASE("math::select and the masks of numerics/select.hpp agree with ?: lane by lane", "[math][select]") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<double> xs = {1, -2, 0.0, -0.0, 3, nan, inf, -inf, 5, 1e-300, -7, 2, 0.5, 8, -1, 4, 6};
  const std::vector<double> ys = {2, -3, -0.0, 0.0, 3, 1, 1, nan, -inf, 0, -7, 1, 0.25, 9, 2, -4, 6};
  const auto n = static_cast<Eigen::Index>(xs.size());
  const Eigen::ArrayXd x = Eigen::Map<const Eigen::ArrayXd>(xs.data(), n), y = Eigen::Map<const Eigen::ArrayXd>(ys.data(), n);
  SECTION("fixed-size chunks of 8 lanes") {
    using Chunk = Eigen::Array<double, 8, 1>;
    for (Eigen::Index start = 0; start + 8 <= n; start += 4)
      check_select_against_scalar<Chunk>(x.segment<8>(start), y.segment<8>(start));
  }
  SECTION("dynamic arrays of every length up to 17") {
    for (Eigen::Index len = 1; len <= n; ++len)
      check_select_against_scalar<Eigen::ArrayXd>(x.head(len), y.head(len));
  }
  SECTION("float lanes") {
    check_select_against_scalar<Eigen::ArrayXf>(x.cast<float>(), y.cast<float>());
  }
  SECTION("all_of over lanes that all hold") {
    const Eigen::Array<double, 8, 1> a = Eigen::Array<double, 8, 1>::LinSpaced(8, 0, 7);
    CHECK(sigprop::math::all_of(sigprop::math::less(a, 8)));
    CHECK_FALSE(sigprop::math::all_of(sigprop::math::less(a, 7)));
  }
}
