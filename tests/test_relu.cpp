// ReLU (appendix B.4, extended to nonzero means): exact unit checks against
// independent quadrature, limits, errors, and the Monte Carlo grids.
#include "support.hpp"

#include <cmath>
#include <limits>

#include "sigprop/montecarlo/components/relu.hpp"

using sigprop::GradMoments;
using sigprop::Moments;
using sigprop::Relu;
using sigprop::test::arcsine_corr;
using sigprop::test::gauss_integral_above;
using sigprop::test::Phi;
using sigprop::test::pi;
using sigprop::test::within;

namespace {

const double inf = std::numeric_limits<double>::infinity();

// Defining integrals of relu(x), x = mu + s z1, and of its partner
// x' = mu + s (r z1 + sqrt(1 - r^2) z2), over the region where both are > 0
// (a direct 2-D quadrature; |r| < 1). Nothing here uses the closed forms.
struct ReluByQuadrature {
  double mean, var, corr, grad_corr;  // grad_corr = P(x > 0, x' > 0) / P(x > 0)
  ReluByQuadrature(double mu, double s2, double r) {
    const double s = std::sqrt(s2), c = std::sqrt(1 - r * r), z0 = -mu / s;
    mean = gauss_integral_above([&](double z) { return mu + s * z; }, z0);
    const double second = gauss_integral_above([&](double z) { return (mu + s * z) * (mu + s * z); }, z0);
    const auto inner = [&](double z1, bool weighted) {
      return gauss_integral_above(
          [&](double z2) { return weighted ? mu + s * (r * z1 + c * z2) : 1.0; },
          (z0 - r * z1) / c);
    };
    const double cross = gauss_integral_above([&](double z1) { return (mu + s * z1) * inner(z1, true); }, z0);
    const double both = gauss_integral_above([&](double z1) { return inner(z1, false); }, z0);
    const double positive = gauss_integral_above([](double) { return 1.0; }, z0);
    var = second - mean * mean;
    corr = (cross - mean * mean) / var;
    grad_corr = both / positive;
  }
};

}  // namespace

TEST_CASE("Relu: mean-zero closed form at hand-computed points", "[relu]") {
  const Relu<double> relu;
  const auto out = relu.forward({0, 4.0, 0.5, -0.5});
  CHECK(out.mean == Approx(2 / std::sqrt(2 * pi)).epsilon(1e-15));
  CHECK(out.var == Approx(4 * (pi - 1) / (2 * pi)).epsilon(1e-15));
  // r_out(1/2) = (sqrt(3)/2 + pi/4 + pi/12 - 1)/(pi - 1), asin(1/2) = pi/6
  CHECK(out.corr_len == Approx((std::sqrt(3.0) / 2 + pi / 4 + pi / 12 - 1) / (pi - 1)).epsilon(1e-14));
  // r_out(-1/2) = (sqrt(3)/2 - pi/4 + pi/12 - 1)/(pi - 1)
  CHECK(out.corr_dim == Approx((std::sqrt(3.0) / 2 - pi / 4 + pi / 12 - 1) / (pi - 1)).epsilon(1e-14));
  const auto g = relu.backward({0, 4.0, 0.5, 0}, {3.0, 0.6});
  CHECK(g.var == Approx(1.5).epsilon(1e-15));
  CHECK(g.corr_len == Approx(0.6 * (0.5 + 1.0 / 6)).epsilon(1e-14));  // (1/2 + asin(1/2)/pi) r_g
}

TEST_CASE("Relu: mean 0 reproduces the arcsine kernel to 1e-14", "[relu]") {
  // One formula serves every mean; at mu = 0 it must reduce to B.4's form.
  const Relu<double> relu;
  for (int i = -64; i <= 64; ++i) {
    const double r = i / 64.0;
    const auto out = relu.forward({0, 2.5, r, r});
    INFO("r = " << r);
    CHECK(out.corr_len == Approx(arcsine_corr(r)).margin(1e-14));
    CHECK(out.corr_dim == out.corr_len);  // both axes share the kernel
    CHECK(relu.backward({0, 2.5, r, 0}, {1, 1}).corr_len ==
          Approx(0.5 + std::asin(r) / pi).margin(1e-14));
  }
}

TEST_CASE("Relu: closed forms agree with 2-D quadrature of the defining integrals", "[relu]") {
  // Tolerances: the quadrature is converged to ~1e-13 relative; the closed
  // form loses about (mu/s)^6 * 1e-16 to cancellation for mu < 0
  // (< 1e-12 for |mu|/s <= 3). 1e-10 leaves a factor 100 of headroom.
  const Relu<double> relu;
  for (double mu : {-1.5, -0.4, 0.0, 0.7, 2.5})
    for (double s2 : {0.3, 4.0})
      for (double r : {-0.8, 0.0, 0.35, 0.95}) {
        const ReluByQuadrature ref(mu, s2, r);
        const Moments<double> in{mu, s2, r, -r / 2};
        const auto out = relu.forward(in);
        const auto g = relu.backward(in, {2.0, 0.7});
        INFO("mu = " << mu << ", s2 = " << s2 << ", r = " << r);
        CHECK(out.mean == Approx(ref.mean).epsilon(1e-10));
        CHECK(out.var == Approx(ref.var).epsilon(1e-10));
        CHECK(out.corr_len == Approx(ref.corr).margin(1e-10));
        CHECK(out.corr_dim == Approx(ReluByQuadrature(mu, s2, -r / 2).corr).margin(1e-10));
        CHECK(g.var == Approx(2.0 * 0.5 * std::erfc(-mu / std::sqrt(2 * s2))).epsilon(1e-14));
        CHECK(g.corr_len == Approx(0.7 * ref.grad_corr).margin(1e-10));
      }
}

TEST_CASE("Relu: limits r -> 0, r -> +-1 and a constant input", "[relu]") {
  const Relu<double> relu;
  for (double mu : {-2.0, -0.5, 0.0, 0.5, 3.0}) {
    INFO("mu = " << mu);
    // Independent inputs give independent outputs; independent masks leave the
    // gradient covariance r_g g^2 P(x > 0)^2, so r_g,in = r_g Phi(mu/s).
    CHECK(relu.forward({mu, 1.3, 0, 0}).corr_len == Approx(0).margin(1e-14));
    CHECK(relu.backward({mu, 1.3, 0, 0}, {1, 0.8}).corr_len ==
          Approx(0.8 * 0.5 * std::erfc(-mu / std::sqrt(2 * 1.3))).epsilon(1e-14));
    // r = 1 is a fixed point, forward and backward.
    const auto one = relu.forward({mu, 1.3, 1, 1});
    CHECK(one.corr_len == Approx(1).margin(1e-15));
    CHECK(relu.backward({mu, 1.3, 1, 0}, {1, 0.8}).corr_len == Approx(0.8).epsilon(1e-15));
  }
  // r -> 1 at mu = 0: 1 - r_out = (pi d - (2 sqrt 2/3) d^1.5)/(pi - 1) + O(d^2),
  // d = 1 - r (expansion of the arcsine kernel); relative remainder ~d = 1e-6.
  const double d = 1e-6;
  const double complement = 1 - relu.forward({0, 1, 1 - d, 0}).corr_len;
  CHECK(complement == Approx((pi * d - 2 * std::sqrt(2.0) / 3 * std::pow(d, 1.5)) / (pi - 1)).epsilon(1e-5));
  // r = -1 at mu = 0: relu(x) relu(-x) = 0, so Cov = -E[relu]^2 and r_out = -1/(pi - 1).
  CHECK(relu.forward({0, 1, -1, -1}).corr_len == Approx(-1 / (pi - 1)).epsilon(1e-14));
  CHECK(relu.backward({0, 1, -1, 0}, {1, 1}).corr_len == Approx(0).margin(1e-15));
  // r = -1 at mu = a s > 0: both positive iff 0 < x < 2 mu, so the gradient
  // correlation is (2 Phi(a) - 1)/Phi(a).
  const double Phi1 = Phi(1.0);
  CHECK(relu.backward({2, 4, -1, 0}, {1, 1}).corr_len == Approx((2 * Phi1 - 1) / Phi1).epsilon(1e-13));
  // A constant input (var = 0): relu(mu) exactly, correlations from the limit
  // s -> 0 (identity for mu > 0, the arcsine kernel for mu = 0).
  const auto c = relu.forward({2.5, 0, 0.3, 0.1});
  CHECK(c.mean == 2.5);
  CHECK(c.var == 0);
  CHECK(c.corr_len == Approx(0.3).epsilon(1e-15));
  CHECK(relu.forward({-2.5, 0, 0.3, 0}).mean == 0);
  CHECK(relu.forward({0, 0, 0.3, 0}).corr_len == Approx(arcsine_corr(0.3)).margin(1e-15));
  // Far below zero the output underflows to 0 without NaN.
  const auto low = relu.forward({-1000, 1, 0.5, 0.5});
  CHECK(low.mean == 0);
  CHECK(low.var == 0);
  CHECK(std::isfinite(low.corr_len));
}

TEST_CASE("Relu: the correlation map is increasing and stays in [-1, 1]", "[relu]") {
  // Strictly increasing for r > 0. For r < 0 and mu < 0 both outputs are
  // rarely positive together: E[y1 y2] falls below double precision (e.g.
  // e^{-a^2/(1+r)} < 1e-16 of E[y]^2) and the computed map is flat up to
  // rounding (likewise P(x1 > 0, x2 > 0) in the backward map), so there it
  // must only not decrease by more than 1e-12.
  const Relu<double> relu;
  for (double mu : {-3.0, -1.0, 0.0, 1.0, 4.0}) {
    double previous = -2, previous_grad = -2;
    for (int i = -50; i <= 50; ++i) {
      const double r = i / 50.0;
      const double out = relu.forward({mu, 0.8, r, 0}).corr_len;
      const double grad = relu.backward({mu, 0.8, r, 0}, {1, 1}).corr_len;
      INFO("mu = " << mu << ", r = " << r);
      if (r > 0) CHECK(out > previous);
      CHECK(out >= previous - 1e-12);
      if (r > 0) CHECK(grad > previous_grad);
      CHECK(grad >= previous_grad - 1e-12);
      CHECK(std::abs(out) <= 1);
      previous = out;
      previous_grad = grad;
    }
  }
}

TEST_CASE("Relu: float, double and batched lanes share the formula", "[relu]") {
  sigprop::test::require_same_formula<Relu>({{0.0, 2, 0.3, -0.1}, {-0.8, 2, 0.3, -0.1}, {1.7, 2, 0.3, -0.1}, {0, 1, 0.5, 0}, {0.5, 2, -1, -0.2}, {-1, 0.5, 0.9, 0.1}, {2, 0, 1, -1}}, {1.5, 0.4});
}

TEST_CASE("Relu: bad input throws with the parameter and range", "[relu][errors]") {
  const Relu<double> relu;
  CHECK_THROWS_AS(relu.forward({0, -1, 0, 0}), sigprop::domain_error);
  CHECK_THROWS_WITH(relu.forward({0, -1, 0, 0}),
                    Catch::Contains("sigprop::Relu") && Catch::Contains("var = -1") &&
                        Catch::Contains("[0, inf)"));
  CHECK_THROWS_WITH(relu.forward({0, 1, 1.5, 0}), Catch::Contains("corr_len = 1.5") && Catch::Contains("[-1, 1]"));
  CHECK_THROWS_WITH(relu.forward({0, 1, 0, -1.0000001}), Catch::Contains("corr_dim = -1.0000001"));
  CHECK_THROWS_WITH(relu.forward({std::nan(""), 1, 0, 0}), Catch::Contains("mean = nan"));
  CHECK_THROWS_WITH(relu.forward({inf, 1, 0, 0}), Catch::Contains("mean = inf"));
  CHECK_THROWS_WITH(relu.backward({0, 1, 0, 0}, {-2, 0}), Catch::Contains("grad_var = -2"));
  CHECK_THROWS_WITH(relu.backward({0, 1, 0, 0}, {1, -1.5}), Catch::Contains("grad_corr_len = -1.5"));
  // The output never exceeds the input's scale, so extreme finite inputs stay finite.
  const auto big = relu.forward({1e300, 1e300, 0.5, 0});
  CHECK(big.mean == Approx(1e300).epsilon(1e-15));
  CHECK(std::isfinite(big.var));
}

TEST_CASE("Relu: Monte Carlo, correlation along the hidden axis", "[relu][montecarlo]") {
  // The forward map applies the same kernel to corr_dim; the grid below only
  // draws corr_len (Table 21), so check corr_dim here. 64 trials of 256 x 256
  // (4096 independent hidden-unit pairs per position, 256 positions):
  // standard errors of the covariances about 0.3 percent.
  sigprop::montecarlo::SimulationSetup setup;
  setup.trials = 64;
  setup.seed = 77;
  for (double mu : {0.0, -0.6, 1.2}) {
    const Moments<double> in{mu, 1.7, 0.4, 0.35};
    const auto pred = Relu<double>().forward(in);
    const auto sim = sigprop::montecarlo::simulate(Relu<double>(), in, {1, 0.5}, setup);
    INFO("mu = " << mu << ": cov_dim " << sim.forward.cov_dim.value << " +- "
                 << sim.forward.cov_dim.std_error << " vs " << pred.cov_dim());
    // 5 standard errors: a correct formula fails with probability < 6e-7.
    CHECK(within(sim.forward.cov_dim, pred.cov_dim(), 5));
    CHECK(within(sim.forward.cov_len, pred.cov_len(), 5));
  }
}

TEST_CASE("Relu: Monte Carlo over the Table 21 grid", "[relu][montecarlo]") {
  // 60 random points of Table 21 (mean 0; widths and lengths shrunk by 4 for
  // speed), each with enough trials for 20000 independent columns (about 1
  // percent relative standard error on a variance).
  sigprop::montecarlo::GridOptions grid;
  grid.points = 60;
  grid.scale = 0.25;
  grid.seed = 2026;
  const auto report = sigprop::montecarlo::validate_relu(grid);
  sigprop::test::print_report(report);
  sigprop::test::require_no_worse_than_paper(report);
  // The closed forms are exact, so every point must agree within 5 standard errors.
  sigprop::test::require_within_standard_errors(report);
}

TEST_CASE("Relu: Monte Carlo with a nonzero input mean", "[relu][montecarlo]") {
  // Not in the paper (no Table 20 row): mean/s uniform in [-2, 2], 30 points,
  // otherwise as above. The forms are exact, so 5 standard errors everywhere.
  sigprop::montecarlo::GridOptions grid;
  grid.points = 30;
  grid.scale = 0.25;
  grid.seed = 2027;
  const auto report = sigprop::montecarlo::validate_relu_nonzero_mean(grid);
  sigprop::test::print_report(report);
  sigprop::test::require_within_standard_errors(report);
}
