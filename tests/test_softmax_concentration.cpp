// The softmax concentration factors (components/detail/softmax_concentration.hpp)
// G(a, n) = n^2 E[p_1^2] e^{-a} and J(a, n) = n^2 E[p_1^2 (1 - 2 p_1 +
// sum_k p_k^2)] e^{-a}, their slopes in the logits' kurtosis and the tilt
// factors C and O: the tables against the exact quadrature, their
// continuations beyond the tables, Monte Carlo with real softmaxes, and float
// and batched lanes.
#include "catch.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <utility>

#include <boost/math/quadrature/gauss_kronrod.hpp>
#include <Eigen/Core>

#include "sigprop/components/detail/softmax_concentration.hpp"
#include "sigprop/montecarlo/random.hpp"

using sigprop::detail::softmax_concentration;
using sigprop::detail::softmax_concentration_exact;
using sigprop::detail::softmax_jacobian_concentration;
using sigprop::detail::softmax_jacobian_concentration_exact;
namespace table = sigprop::detail::concentration_table;

namespace {

// An off-grid point of the tables: a uniform in a (odd k) or in sqrt(a) (even
// k), n uniform in ln n.
std::pair<double, double> table_point(sigprop::montecarlo::Random& rng, int k) {
  const double u_last = std::log(table::n_max);
  const double r = rng.uniform();
  return {table::a_max * (k % 2 ? r : r * r),
          std::exp(table::u_first + (u_last - table::u_first) * rng.uniform())};
}

// 1/(1 + (e^a - 1)(2 e^a - 1)/n): the delta method for the ratio of sums.
double delta_method(double a, double n) { return 1 / (1 + std::expm1(a) * (2 * std::exp(a) - 1) / n); }

// G (1 - (2 - e^a G)/n): J to first order in the spread of p around 1/n, the
// attention's softmax-path "centring" before J.
double first_order_jacobian(double a, double n) {
  const double g = softmax_concentration(a, n);
  return g * (1 - (2 - std::exp(a) * g) / n);
}

// J(a, 2) = 8 e^{-a} E[p_1^2 p_2^2] = e^{-a}/2 E[sech^4(D/2)], D/2 ~ N(0, a/2):
// with two entries 1 - 2 p_1 + p_1^2 + p_2^2 = 2 p_2^2, and p_1 p_2 =
// sech^2(D/2)/4 for the logit difference D ~ N(0, 2a). A one-dimensional
// integral, independent of the quadrature of softmax.hpp.
double jacobian_concentration_two(double a) {
  using GK = boost::math::quadrature::gauss_kronrod<double, 61>;
  const double c = std::sqrt(a / 2);
  const double e = GK::integrate(
      [c](double x) {
        const double h = 1 / std::cosh(c * x);
        return std::exp(-x * x / 2) * h * h * h * h;
      },
      -40.0, 40.0, 15, 1e-14);
  return std::exp(-a) / 2 * 0.3989422804014327 * e;
}

struct Sample {
  double value, std_error;
};

struct Samples {
  Sample g, j;  // n e^{-a} sum_k p_k^2 and n e^{-a} sum_k p_k^2 (1 - 2 p_k + sum_l p_l^2)
};

// G and J from the same `trials` softmaxes of n i.i.d. N(0, a) logits.
Samples monte_carlo(double a, Eigen::Index n, long trials, std::uint64_t seed) {
  sigprop::montecarlo::Random rng(seed);
  const double sd = std::sqrt(a), scale = static_cast<double>(n) * std::exp(-a);
  Eigen::ArrayXd z(n);
  double sum = 0, sum_sq = 0, sum_j = 0, sum_sq_j = 0;
  for (long t = 0; t < trials; ++t) {
    for (Eigen::Index i = 0; i < n; ++i) z(i) = sd * rng.normal();
    const Eigen::ArrayXd e = (z - z.maxCoeff()).exp();  // p = e / sum(e)
    const double x = scale * e.square().sum() / (e.sum() * e.sum());
    const Eigen::ArrayXd p = e / e.sum();
    const double y = scale * (p.square() * (1 - 2 * p + p.square().sum())).sum();
    sum += x;
    sum_sq += x * x;
    sum_j += y;
    sum_sq_j += y * y;
  }
  const double count = static_cast<double>(trials);
  auto sample = [count](double total, double total_sq) {
    const double mean = total / count;
    return Sample{mean, std::sqrt((total_sq / count - mean * mean) / (count - 1))};
  };
  return {sample(sum, sum_sq), sample(sum_j, sum_sq_j)};
}

}  // namespace

TEST_CASE("Softmax concentration: the table against the exact quadrature", "[softmax][concentration]") {
  // Off-grid points, half uniform in a and half in sqrt(a), uniform in ln n.
  // Over 20000 such points (examples/concentration_table --check 20000) the
  // relative error is at most 1.9e-5; the bound here is the documented 1e-4.
  sigprop::montecarlo::Random rng(29);
  for (int k = 0; k < 30; ++k) {
    const auto [a, n] = table_point(rng, k);
    INFO("a = " << a << ", n = " << n);
    CHECK(softmax_concentration(a, n) == Approx(softmax_concentration_exact(a, n)).epsilon(1e-4));
  }
  // Edges: a = 0 is exactly 1 (uniform softmax) at every n, in and beyond the table.
  for (double n : {2.0, 300.0, 1e7, 1e12}) {
    CHECK(softmax_concentration(0.0, n) == 1);
    CHECK(softmax_concentration_exact(0.0, n) == 1);
  }
  // n = 2 (the first column), the corners of the table, a just above 0.
  for (double a : {1e-4, 0.3, 4.0, 9.5, 10.0}) {
    INFO("a = " << a);
    CHECK(softmax_concentration(a, 2.0) == Approx(softmax_concentration_exact(a, 2.0)).epsilon(1e-4));
    CHECK(softmax_concentration(a, table::n_max) ==
          Approx(softmax_concentration_exact(a, table::n_max)).epsilon(1e-4));
  }
  // Small a: G = 1 - a/n + O(a^2) (Var[p] = a (n - 1)/n^3 to first order);
  // a cubic in sigma = sqrt(a) on the first interval would get the slope wrong.
  for (double a : {1e-8, 1e-6, 1e-4})
    for (double n : {2.0, 50.0, 1e4}) {
      INFO("a = " << a << ", n = " << n);
      CHECK((1 - softmax_concentration(a, n)) / a == Approx(1 / n).epsilon(1e-3));
    }
}

TEST_CASE("Softmax concentration: beyond the table", "[softmax][concentration]") {
  // n > n_max: 1/G - 1 falls as 1/n from the last column. Against an
  // independent quadrature this is good to 1e-6 for a <= 4 up to n = 1e9
  // (the exact quadrature itself is low there by up to 3e-6 at a = 4).
  for (double a : {0.5, 2.0, 4.0})
    for (double n : {3e7, 1e8, 1e9}) {
      INFO("a = " << a << ", n = " << n);
      CHECK(softmax_concentration(a, n) == Approx(softmax_concentration_exact(a, n)).epsilon(1e-4));
    }
  for (double a : {1.0, 6.0, 10.0}) {
    INFO("a = " << a);
    // Continuous at n_max, increasing towards 1 with 1 - G ~ c/n.
    const double at_max = softmax_concentration(a, table::n_max);
    CHECK(softmax_concentration(a, table::n_max * (1 + 1e-12)) == Approx(at_max).epsilon(1e-10));
    const double g1 = softmax_concentration(a, 1e9), g2 = softmax_concentration(a, 1e11);
    CHECK(at_max < g1);
    CHECK(g1 < g2);
    CHECK(g2 < 1);
    // (1/G - 1) n is constant (to the rounding of 1/G - 1 ~ 1e-8 at a = 1).
    CHECK((1 / g1 - 1) * 1e9 == Approx((1 / at_max - 1) * table::n_max).epsilon(1e-6));
  }
  // a > a_max: log G continued linearly in a; continuous at a_max, decreasing,
  // and indicative only (measured: 3e-4 to 2e-2 off at a = 10.5, more beyond).
  for (double n : {2.0, 300.0, 1e4}) {
    INFO("n = " << n);
    const double at_max = softmax_concentration(table::a_max, n);
    CHECK(softmax_concentration(table::a_max * (1 + 1e-12), n) == Approx(at_max).epsilon(1e-9));
    CHECK(softmax_concentration(10.5, n) < at_max);
    CHECK(softmax_concentration(10.5, n) == Approx(softmax_concentration_exact(10.5, n)).epsilon(0.05));
  }
  // Outside the preconditions nothing is clamped: NaN in, NaN out.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(std::isnan(softmax_concentration(nan, 300.0)));
  CHECK(std::isnan(softmax_concentration(2.0, nan)));
  CHECK(std::isnan(softmax_concentration(-1.0, 300.0)));
}

TEST_CASE("Softmax Jacobian concentration: the table against the exact quadrature", "[softmax][concentration]") {
  // Off-grid points as for G. Over 20000 such points (concentration_table
  // --check 20000) the relative error is at most 1.9e-5; the bound here is the
  // documented 1e-4.
  sigprop::montecarlo::Random rng(31);
  for (int k = 0; k < 30; ++k) {
    const auto [a, n] = table_point(rng, k);
    INFO("a = " << a << ", n = " << n);
    CHECK(softmax_jacobian_concentration(a, n) ==
          Approx(softmax_jacobian_concentration_exact(a, n)).epsilon(1e-4));
  }
  // a = 0: p = 1/n and J = 1 - 1/n, exactly from both (the table holds
  // log(J / (1 - 1/n)), 0 on that row), in and beyond the table.
  for (double n : {2.0, 3.0, 300.0, 1e7, 1e12}) {
    INFO("n = " << n);
    CHECK(softmax_jacobian_concentration(0.0, n) == 1 - 1 / n);
    CHECK(softmax_jacobian_concentration_exact(0.0, n) == 1 - 1 / n);
  }
  // n = 2 against a one-dimensional integral: the exact quadrature to 1e-6
  // (measured: 6.3e-7 low as a -> 0, 5e-8 or less from a = 0.1 up), the table
  // to 1e-4; a just above 0, inside the first interval (a < h^2 = 0.00625),
  // on and between rows, the last row.
  for (double a : {1e-4, 3e-3, 0.3, 1.0, 4.0, 9.5, 10.0}) {
    INFO("a = " << a);
    const double two = jacobian_concentration_two(a);
    CHECK(softmax_jacobian_concentration_exact(a, 2.0) == Approx(two).epsilon(1e-6));
    CHECK(softmax_jacobian_concentration(a, 2.0) == Approx(two).epsilon(1e-4));
    CHECK(softmax_jacobian_concentration(a, table::n_max) ==
          Approx(softmax_jacobian_concentration_exact(a, table::n_max)).epsilon(1e-4));
  }
  // Small a: J = (1 - 1/n)(1 - 4 a/n + O(a^2)) (expanding p_k = (1 + delta_k)/n
  // to second order in delta, E[sum delta^2] = (n - 1) a). Smooth in a: a cubic
  // in sigma = sqrt(a) on the first interval would get the slope wrong. (The
  // slope is off by 2e-4 at most for n <= 100, 1.5e-3 at n = 1e3 and 1.5 % at
  // 1e4, where 4 a/n on the first rows approaches the exact quadrature's ~3e-8
  // relative resolution.)
  for (double a : {1e-8, 1e-6, 1e-4})
    for (double n : {2.0, 10.0, 100.0}) {
      INFO("a = " << a << ", n = " << n);
      CHECK((1 - softmax_jacobian_concentration(a, n) / (1 - 1 / n)) / a == Approx(4 / n).epsilon(1e-3));
    }
  // J < G: J - G = n^2 e^{-a} E[p_1^2 (S_2 - 2 p_1)] = n e^{-a} E[S_2^2 - 2 S_3]
  // with S_m = sum_k p_k^m, and S_2^2 <= S_1 S_3 = S_3 (Cauchy-Schwarz).
  for (double a : {0.5, 2.56, 6.0})
    for (double n : {2.0, 128.0, 1e5}) {
      INFO("a = " << a << ", n = " << n);
      CHECK(softmax_jacobian_concentration(a, n) < softmax_concentration(a, n));
    }
}

TEST_CASE("Softmax Jacobian concentration: beyond the table", "[softmax][concentration]") {
  // n > n_max: with K = J / (1 - 1/n), 1/K - 1 falls as 1/n from the last
  // column. Against an independent quadrature this is good to 4e-6 for a <= 4
  // up to n = 1e9 (the exact quadrature itself is low there by up to 3.3e-6 at
  // a = 4).
  for (double a : {0.5, 2.0, 4.0})
    for (double n : {3e7, 1e8, 1e9}) {
      INFO("a = " << a << ", n = " << n);
      CHECK(softmax_jacobian_concentration(a, n) ==
            Approx(softmax_jacobian_concentration_exact(a, n)).epsilon(1e-4));
    }
  for (double a : {1.0, 6.0, 10.0}) {
    INFO("a = " << a);
    auto k = [a](double n) { return softmax_jacobian_concentration(a, n) / (1 - 1 / n); };
    // Continuous at n_max, increasing towards 1 with 1 - K ~ c/n.
    const double at_max = softmax_jacobian_concentration(a, table::n_max);
    CHECK(softmax_jacobian_concentration(a, table::n_max * (1 + 1e-12)) == Approx(at_max).epsilon(1e-10));
    const double j1 = softmax_jacobian_concentration(a, 1e9), j2 = softmax_jacobian_concentration(a, 1e11);
    CHECK(at_max < j1);
    CHECK(j1 < j2);
    CHECK(j2 < 1);
    // (1/K - 1) n is constant (to the rounding of 1/K - 1 ~ 1e-8 at a = 1).
    CHECK((1 / k(1e9) - 1) * 1e9 == Approx((1 / k(table::n_max) - 1) * table::n_max).epsilon(1e-6));
  }
  // a > a_max: log K continued linearly in a; continuous at a_max, decreasing,
  // and indicative only (measured: 1e-3 to 2e-2 off at a = 10.5, more beyond).
  for (double n : {2.0, 300.0, 1e4}) {
    INFO("n = " << n);
    const double at_max = softmax_jacobian_concentration(table::a_max, n);
    CHECK(softmax_jacobian_concentration(table::a_max * (1 + 1e-12), n) == Approx(at_max).epsilon(1e-9));
    CHECK(softmax_jacobian_concentration(10.5, n) < at_max);
    CHECK(softmax_jacobian_concentration(10.5, n) ==
          Approx(softmax_jacobian_concentration_exact(10.5, n)).epsilon(0.05));
  }
  // Outside the preconditions nothing is clamped: NaN in, NaN out.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(std::isnan(softmax_jacobian_concentration(nan, 300.0)));
  CHECK(std::isnan(softmax_jacobian_concentration(2.0, nan)));
  CHECK(std::isnan(softmax_jacobian_concentration(-1.0, 300.0)));
}

TEST_CASE("Softmax concentration: Monte Carlo with real softmaxes", "[softmax][concentration][montecarlo]") {
  // Each sample is bounded (0 <= n e^{-a} sum p^2 <= n e^{-a}, and the J sample
  // is at most twice that since 1 - 2 p_k + sum p^2 <= 1 + sum p^2) and, with
  // these trials, the standard error is honest: over 16 seeds per point the
  // RMS of (estimate - exact)/(standard error) was 0.8-1.2 for G and 0.9-1.3
  // for J (1.02 over 64 seeds at a = 1, n = 30, the largest). A correct G or J
  // then falls outside 5 standard errors with probability < 6e-7 per point.
  struct Point {
    double a;
    Eigen::Index n;
    long trials;
  };
  const Point points[] = {{1, 30, 200000}, {4, 300, 100000}, {2, 1000, 20000}, {6, 1000, 20000},
                          {2.56, 128, 200000}};
  std::uint64_t seed = 41;
  for (const Point& p : points) {
    const double n = static_cast<double>(p.n);
    const Samples s = monte_carlo(p.a, p.n, p.trials, seed++);
    const double g = softmax_concentration(p.a, n), tolerance = 5 * s.g.std_error;
    const double j = softmax_jacobian_concentration(p.a, n), tolerance_j = 5 * s.j.std_error;
    std::printf("a = %g, n = %g: Monte Carlo %.5f +- %.5f, G %.5f, delta method %.5f; "
                "Monte Carlo %.5f +- %.5f, J %.5f, first order %.5f\n",
                p.a, n, s.g.value, s.g.std_error, g, delta_method(p.a, n), s.j.value, s.j.std_error, j,
                first_order_jacobian(p.a, n));
    INFO("a = " << p.a << ", n = " << n << ": Monte Carlo " << s.g.value << " +- " << s.g.std_error << ", G " << g
                << "; Monte Carlo " << s.j.value << " +- " << s.j.std_error << ", J " << j);
    CHECK(std::abs(s.g.value - g) < tolerance);
    CHECK(std::abs(s.j.value - j) < tolerance_j);
    if (p.a == 4) {
      // The delta method (G 0.049 at a = 4, n = 300) and the paper's constant
      // denominator (G = 1) are off by more than 50 tolerances.
      CHECK(std::abs(s.g.value - delta_method(p.a, n)) > 50 * tolerance);
      CHECK(std::abs(s.g.value - 1) > 50 * tolerance);
    }
    if (p.a == 4 || p.a == 2.56) {
      // The first-order centring G (1 - (2 - e^a G)/n) is 46 % high at a = 2.56,
      // n = 128 (0.624 for J = 0.427) and 66 % at a = 4, n = 300: ~100
      // tolerances.
      CHECK(std::abs(s.j.value - first_order_jacobian(p.a, n)) > 50 * tolerance_j);
    }
  }
}

TEST_CASE("Softmax concentration: float and batched lanes", "[softmax][concentration]") {
  Eigen::ArrayXd a(7), n(7);
  a << 0, 0.37, 2.5, 4, 9.9, 12, 3;
  n << 300, 2, 1000, 5e6, 64, 300, 4e9;  // in the table, on its edges and beyond both ends
  const Eigen::ArrayXd g = softmax_concentration(a, n), j = softmax_jacobian_concentration(a, n);
  const Eigen::ArrayXf af = a.cast<float>(), nf = n.cast<float>();
  const Eigen::ArrayXf gf = softmax_concentration(af, nf), jf = softmax_jacobian_concentration(af, nf);
  for (Eigen::Index i = 0; i < a.size(); ++i) {
    INFO("lane " << i << ": a = " << a(i) << ", n = " << n(i));
    CHECK(g(i) == softmax_concentration(a(i), n(i)));
    CHECK(j(i) == softmax_jacobian_concentration(a(i), n(i)));
    // float lanes and float scalars: computed in double from the float inputs.
    const float expected = static_cast<float>(softmax_concentration(double(af(i)), double(nf(i))));
    CHECK(gf(i) == expected);
    CHECK(softmax_concentration(af(i), nf(i)) == expected);
    CHECK(gf(i) == Approx(g(i)).epsilon(1e-6));
    const float expected_j = static_cast<float>(softmax_jacobian_concentration(double(af(i)), double(nf(i))));
    CHECK(jf(i) == expected_j);
    CHECK(softmax_jacobian_concentration(af(i), nf(i)) == expected_j);
    CHECK(jf(i) == Approx(j(i)).epsilon(1e-6));
  }
  // Eigen expressions (a + step with an array, as in a central difference) are
  // evaluated first.
  const Eigen::ArrayXd a_up = a + 0.1;
  CHECK((softmax_concentration(a + 0.1, n) == softmax_concentration(a_up, n)).all());
  CHECK((softmax_jacobian_concentration(a + 0.1, n) == softmax_jacobian_concentration(a_up, n)).all());
  CHECK((softmax_jacobian_concentration(a_up, n * 1.0) == softmax_jacobian_concentration(a_up, n)).all());
}

TEST_CASE("Softmax kurtosis slopes and tilt factors: tables against the exact quadrature",
          "[softmax][concentration]") {
  // examples/concentration_table --check 4000: absolute error at most 5.4e-4
  // (D_G, D_J, where they reach ~20) and 7.7e-4 (C, O, at n ~ 2); RMS 8e-5 and
  // 3e-5. The bound here is 2e-3.
  using sigprop::detail::softmax_kurtosis_slope;
  using sigprop::detail::softmax_kurtosis_slopes_exact;
  using sigprop::detail::softmax_tilt_cross;
  using sigprop::detail::softmax_tilt_factors_exact;
  using sigprop::detail::softmax_tilt_own;
  sigprop::montecarlo::Random rng(31);
  for (int k = 0; k < 12; ++k) {
    const auto [a, n] = table_point(rng, k);
    INFO("a = " << a << ", n = " << n);
    const auto slopes = softmax_kurtosis_slopes_exact(a, n);
    const auto tilt = softmax_tilt_factors_exact(a, n);
    CHECK(std::abs(softmax_kurtosis_slope(table::slope_g, a, n) - slopes.g) < 2e-3);
    CHECK(std::abs(softmax_kurtosis_slope(table::slope_j, a, n) - slopes.j) < 2e-3);
    CHECK(std::abs(softmax_tilt_cross(a, n) - tilt.cross) < 2e-3);
    CHECK(std::abs(softmax_tilt_own(a, n) - tilt.own) < 2e-3);
  }
  // a = 0: no slope; p = 1/n, S_m = n^{1-m}, exactly.
  for (double n : {2.0, 300.0}) {
    CHECK(softmax_kurtosis_slopes_exact(0, n).g == 0);
    CHECK(softmax_tilt_factors_exact(0, n).cross == Approx(1 - 5 / n + 10 / (n * n) - 6 / (n * n * n)));
    CHECK(softmax_tilt_factors_exact(0, n).own == Approx(4 / n - 10 / (n * n) + 6 / (n * n * n)));
  }
  // One key pair at n = 2 and a = 0: C = 2 (1/4)(1 - 1 - 1 + 6/4) = 1/4.
  CHECK(softmax_tilt_factors_exact(0, 2).cross == Approx(0.25).epsilon(1e-15));
  // Large n at fixed a: the cumulant limit D_G -> 7 a^2/12; C -> 1, O -> 0 like 1/n.
  CHECK(softmax_kurtosis_slopes_exact(1, 1e7).g == Approx(7.0 / 12).epsilon(1e-3));
  CHECK(softmax_tilt_cross(1.0, 1e9) == Approx(1 - (1 - softmax_tilt_cross(1.0, table::n_max)) / 100));
  CHECK(softmax_tilt_own(1.0, 1e9) == Approx(softmax_tilt_own(1.0, table::n_max) / 100));
  // Batched lanes equal the scalar function.
  Eigen::ArrayXd a(3), n(3);
  a << 0.5, 2.56, 11;
  n << 128, 3, 2e7;
  const Eigen::ArrayXd c = softmax_tilt_cross(a, n);
  for (int i = 0; i < 3; ++i) CHECK(c(i) == softmax_tilt_cross(a(i), n(i)));
}

TEST_CASE("Softmax pair curvature: the table against the exact quadrature", "[softmax][concentration]") {
  // examples/concentration_table --check 4000: absolute error at most 5.6e-4
  // (at a ~ 1e-3, n ~ 3, where V changes fastest in n), RMS 1.4e-5. The
  // bound here is 2e-3.
  using sigprop::detail::softmax_pair_curvature;
  using sigprop::detail::softmax_pair_curvature_exact;
  sigprop::montecarlo::Random rng(37);
  for (int k = 0; k < 12; ++k) {
    const auto [a, n] = table_point(rng, k);
    INFO("a = " << a << ", n = " << n);
    CHECK(std::abs(softmax_pair_curvature(a, n) - softmax_pair_curvature_exact(a, n)) < 2e-3);
  }
  // n = 2: p_1 + p_2 = 1 makes H linear in the covariance.
  CHECK(std::abs(softmax_pair_curvature_exact(2.56, 2)) < 1e-9);
  // The delta method's (1 - k)(1 - 2 k) at a = 2.56, n = 128 is 0.837; the exact 0.726.
  CHECK(softmax_pair_curvature(2.56, 128.0) == Approx(0.726).margin(2e-3));
  // Large n: V -> 1, 1 - V continued as c/n.
  CHECK(softmax_pair_curvature(1.0, 1e7) == Approx(1).margin(1e-5));
  CHECK(softmax_pair_curvature(4.0, 1e9) == Approx(1 - (1 - softmax_pair_curvature(4.0, table::n_max)) / 100));
  Eigen::ArrayXd a(2), n(2);
  a << 0.5, 2.56;
  n << 128, 2e7;
  const Eigen::ArrayXd v = softmax_pair_curvature(a, n);
  for (int i = 0; i < 2; ++i) CHECK(v(i) == softmax_pair_curvature(a(i), n(i)));
}

TEST_CASE("Softmax pair curvature: Monte Carlo with real softmaxes", "[softmax][concentration][montecarlo]") {
  // Two softmaxes over n keys with logits s and s' = rho s + sqrt(1 - rho^2) z
  // (variance a each, covariance rho a): the second difference of
  // H = n E[sum_k p_k p'_k] at rho = -e, 0, e, with common random numbers,
  // against the same second difference from the two-position quadrature
  // (no step error between the two), and against the delta method's
  // curvature (1 - k)(1 - 2 k), which it must miss by more than 10 standard
  // errors. a = 2.56, n = 128, e = 0.1, 40000 samples.
  const int n = 128;
  const double a = 2.56, e = 0.1;
  constexpr long samples = 40000;
  sigprop::montecarlo::Random rng(59);
  double sum = 0, sum_sq = 0;
  const auto softmax = [](Eigen::ArrayXd s) {
    s -= s.maxCoeff();
    const Eigen::ArrayXd w = s.exp();
    return Eigen::ArrayXd(w / w.sum());
  };
  for (long t = 0; t < samples; ++t) {
    const Eigen::ArrayXd s = std::sqrt(a) * rng.normal_matrix(n, 1).col(0).array();
    const Eigen::ArrayXd z = std::sqrt(a) * rng.normal_matrix(n, 1).col(0).array();
    const Eigen::ArrayXd p = softmax(s);
    const auto pair_h = [&](double rho) { return n * (p * softmax(rho * s + std::sqrt(1 - rho * rho) * z)).sum(); };
    const double second = (pair_h(e) + pair_h(-e) - 2 * pair_h(0)) / (e * a * e * a);
    sum += second, sum_sq += second * second;
  }
  const double mc = sum / samples, se = std::sqrt((sum_sq / samples - mc * mc) / samples);
  using sigprop::detail::softmax_exact;
  using sigprop::detail::SoftmaxNeed;
  const auto exact_h = [&](double rho) { return n * n * softmax_exact(n, a, rho, SoftmaxNeed::forward).cov_len + 1; };
  const double exact = (exact_h(e) + exact_h(-e) - 2) / (e * a * e * a);
  const double k = (1 / softmax_concentration(a, n) - 1) / std::expm1(a), delta = (1 - k) * (1 - 2 * k);
  std::printf("pair curvature: second difference %.4f +- %.4f, quadrature %.4f, table V %.4f, delta method %.4f\n",
              mc, se, exact, sigprop::detail::softmax_pair_curvature(a, 128.0), delta);
  CHECK(std::abs(mc - exact) < 5 * se);
  CHECK(std::abs(mc - delta) > 10 * se);
}

TEST_CASE("Softmax tilt factors and kurtosis slope: Monte Carlo with real softmaxes",
          "[softmax][concentration][montecarlo]") {
  // Rows delta_k ~ N(0, I_d) and logits s_k = w . delta_k, |w|^2 = a: Stein's
  // lemma gives E[sum_{k != l} p_k p_l delta_k . delta_l] = a C and
  // E[sum_k p_k^2 |delta_k|^2] = d E[S2] + a O exactly. The first-order forms
  // (1 - S2)^2 and S2 miss both by more than 10 standard errors. Then rows
  // scaled to norm sqrt(d) (a logit kurtosis of -6/(d + 2)): E[S2] changes
  // by e^{kappa D_G}, within 5 standard errors plus 10 % of the change (the
  // first order in kappa; the rows are not a scale mixture of Gaussians).
  const int d = 64, n = 32;
  const double a = 2;
  constexpr long trials = 40000;
  sigprop::montecarlo::Random rng(53);
  Eigen::VectorXd w = rng.normal_matrix(d, 1).col(0);
  w *= std::sqrt(a) / w.norm();
  double cross = 0, cross_sq = 0, own = 0, own_sq = 0, s2 = 0, s2_sq = 0, s2_fixed = 0, s2_fixed_sq = 0;
  for (long t = 0; t < trials; ++t) {
    const Eigen::MatrixXd x = rng.normal_matrix(n, d);
    for (int fixed = 0; fixed < 2; ++fixed) {
      Eigen::MatrixXd rows = x;
      if (fixed) rows = (x.rowwise().norm().cwiseInverse() * std::sqrt(static_cast<double>(d))).asDiagonal() * x;
      Eigen::ArrayXd s = (rows * w).array();
      s -= s.maxCoeff();
      const Eigen::ArrayXd e = s.exp(), p = e / e.sum();
      const double sum_sq = p.square().sum();
      if (fixed) {
        s2_fixed += sum_sq, s2_fixed_sq += sum_sq * sum_sq;
        continue;
      }
      const Eigen::VectorXd z = rows.transpose() * p.matrix();
      const Eigen::ArrayXd norms = rows.rowwise().squaredNorm().array();
      const double own_sample = (p.square() * norms).sum(), cross_sample = z.squaredNorm() - own_sample;
      cross += cross_sample, cross_sq += cross_sample * cross_sample;
      own += own_sample - d * sum_sq, own_sq += std::pow(own_sample - d * sum_sq, 2);
      s2 += sum_sq, s2_sq += sum_sq * sum_sq;
    }
  }
  const auto mean_se = [](double sum, double sum_sq) {
    const double m = sum / trials;
    return std::pair<double, double>{m, std::sqrt((sum_sq / trials - m * m) / trials)};
  };
  const auto [c_mc, c_se] = mean_se(cross, cross_sq);
  const auto [o_mc, o_se] = mean_se(own, own_sq);
  const auto [s2_mc, s2_se] = mean_se(s2, s2_sq);
  const auto [f_mc, f_se] = mean_se(s2_fixed, s2_fixed_sq);
  const auto tilt = sigprop::detail::softmax_tilt_factors_exact(a, n);
  const double g = softmax_concentration(a, n), s2_exact = g * std::exp(a) / n;
  std::printf("tilt: cross %.5f +- %.5f (a C = %.5f, first order %.5f); own %.5f +- %.5f (a O = %.5f, first "
              "order %.5f)\n",
              c_mc, c_se, a * tilt.cross, a * std::pow(1 - s2_exact, 2), o_mc, o_se, a * tilt.own, a * s2_exact);
  CHECK(std::abs(s2_mc - s2_exact) < 5 * s2_se);
  CHECK(std::abs(c_mc - a * tilt.cross) < 5 * c_se);
  CHECK(std::abs(o_mc - a * tilt.own) < 5 * o_se);
  CHECK(std::abs(c_mc - a * std::pow(1 - s2_exact, 2)) > 10 * c_se);
  CHECK(std::abs(o_mc - a * s2_exact) > 10 * o_se);
  // Rows of fixed norm.
  const double kurtosis = -6.0 / (d + 2);
  const double predicted = s2_exact * std::exp(kurtosis * sigprop::detail::softmax_kurtosis_slope(table::slope_g, a, 32.0));
  std::printf("fixed-norm rows: E[S2] %.5f +- %.5f, predicted %.5f (Gaussian rows %.5f)\n", f_mc, f_se, predicted,
              s2_exact);
  CHECK(std::abs(f_mc - predicted) < 5 * f_se + 0.1 * std::abs(predicted - s2_exact));
  CHECK(std::abs(f_mc - s2_exact) > 5 * f_se);
}

TEST_CASE("Softmax factors: one stencil gives every table's own value", "[softmax][concentration]") {
  // softmax_factors reads the seven tables at one stencil; each factor must
  // equal its own function exactly, inside the table and beyond n_max and
  // a_max, for double, float and batched lanes (dynamic and fixed size).
  using sigprop::detail::softmax_factors;
  namespace d = sigprop::detail;
  const double as[] = {0, 0.003, 0.7, 2.56, 9.99, 11.5}, ns[] = {2, 3.5, 128, 1e5, 1e7, 3e8};
  Eigen::ArrayXd a_lanes(36), n_lanes(36);
  int k = 0;
  for (double a : as)
    for (double n : ns) {
      INFO("a = " << a << ", n = " << n);
      const auto f = softmax_factors(a, n);
      CHECK(f.concentration == d::softmax_concentration(a, n));
      CHECK(f.jacobian == d::softmax_jacobian_concentration(a, n));
      CHECK(f.slope_g == d::softmax_kurtosis_slope(table::slope_g, a, n));
      CHECK(f.slope_j == d::softmax_kurtosis_slope(table::slope_j, a, n));
      CHECK(f.tilt_cross == d::softmax_tilt_cross(a, n));
      CHECK(f.tilt_own == d::softmax_tilt_own(a, n));
      CHECK(f.pair_curvature == d::softmax_pair_curvature(a, n));
      const auto single = softmax_factors(static_cast<float>(a), static_cast<float>(n));
      CHECK(single.concentration == Approx(f.concentration).epsilon(1e-6));
      CHECK(single.pair_curvature == Approx(f.pair_curvature).epsilon(1e-5).margin(1e-6));
      a_lanes(k) = a, n_lanes(k) = n, ++k;
    }
  const auto batch = softmax_factors(a_lanes, n_lanes);
  for (int i = 0; i < 36; ++i) {
    const auto f = softmax_factors(a_lanes(i), n_lanes(i));
    CHECK(batch.concentration(i) == Approx(f.concentration).epsilon(1e-15));
    CHECK(batch.jacobian(i) == Approx(f.jacobian).epsilon(1e-15));
    CHECK(batch.tilt_own(i) == f.tilt_own);
    CHECK(batch.pair_curvature(i) == f.pair_curvature);
  }
  using Chunk = Eigen::Array<double, 4, 1>;
  const Chunk a4(0.5, 2.56, 4.0, 11.0), n4(2.0, 128.0, 1e7, 2e7);
  const auto chunk = softmax_factors(a4, n4);
  for (int i = 0; i < 4; ++i) CHECK(chunk.slope_j(i) == softmax_factors(a4(i), n4(i)).slope_j);
}

TEST_CASE("Softmax log concentration: log G read without forming G", "[softmax][concentration]") {
  // softmax_log_concentration skips the exp and log of log(softmax_concentration);
  // it may differ from that by their rounding only: at most a few eps of
  // |log G| plus eps (log G ~ 0 where G -> 1), inside the table and beyond
  // n_max and a_max, for double, float and batched lanes.
  namespace d = sigprop::detail;
  const double eps = std::numeric_limits<double>::epsilon();
  const double as[] = {0, 0.003, 0.1, 0.7, 2.56, 9.99, 11.5}, ns[] = {2, 3.5, 128, 1e5, 1e7, 3e8, 1e12};
  Eigen::ArrayXd a_lanes(49), n_lanes(49);
  int k = 0;
  for (double a : as)
    for (double n : ns) {
      INFO("a = " << a << ", n = " << n);
      const double direct = d::softmax_log_concentration(a, n), via_g = std::log(d::softmax_concentration(a, n));
      CHECK(std::abs(direct - via_g) <= 4 * eps * (std::abs(via_g) + 1));
      CHECK(d::softmax_log_concentration(static_cast<float>(a), static_cast<float>(n)) ==
            Approx(direct).epsilon(1e-6).margin(1e-6));
      a_lanes(k) = a, n_lanes(k) = n, ++k;
    }
  const Eigen::ArrayXd batch = d::softmax_log_concentration(a_lanes, n_lanes);
  for (int i = 0; i < 49; ++i)
    CHECK(std::abs(batch(i) - d::softmax_log_concentration(a_lanes(i), n_lanes(i))) <=
          4 * eps * (std::abs(batch(i)) + 1));
}
