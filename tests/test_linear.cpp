// Linear (appendix B.2): exact unit checks and the Monte Carlo grid.
#include "support.hpp"

#include "sigprop/montecarlo/components/linear.hpp"

using sigprop::GradMoments;
using sigprop::Linear;
using sigprop::Moments;

TEST_CASE("Linear: closed form at hand-computed points", "[linear]") {
  const Linear<double> layer(100, 50, 0.02);
  const Moments<double> in{2.0, 3.0, 0.5, 0.1};
  const auto out = layer.forward(in);
  CHECK(out.mean == 0);
  CHECK(out.var == Approx(100 * 0.02 * (3 + 4)).epsilon(1e-14));
  CHECK(out.corr_len == Approx((0.5 * 3 + 4) / 7.0).epsilon(1e-14));
  CHECK(out.corr_dim == 0);
  const auto g = layer.backward(in, {2.0, 0.3});
  CHECK(g.var == Approx(50 * 0.02 * 2).epsilon(1e-14));
  CHECK(g.corr_len == 0.3);
}

TEST_CASE("Linear: limits", "[linear]") {
  const Linear<double> layer(10, 10, 0.1);
  CHECK(layer.forward({0, 1, 0, 0}).corr_len == 0);  // r -> 0 with zero mean stays 0
  CHECK(layer.forward({0, 1, 1, 0}).corr_len == 1);  // r = 1 is a fixed point
  CHECK(layer.forward({5, 0, 0, 0}).corr_len == 1);  // a constant input is fully correlated
  CHECK(layer.forward({1e6, 1, 0, 0}).corr_len == Approx(1).epsilon(1e-11));
}

TEST_CASE("Linear: bad parameters throw with the parameter and range", "[linear][errors]") {
  CHECK_THROWS_AS(Linear<double>(0, 10, 0.1), sigprop::domain_error);
  CHECK_THROWS_WITH(Linear<double>(10, 0, 0.1), Catch::Contains("d_out = 0") && Catch::Contains("[1, inf)"));
  CHECK_THROWS_WITH(Linear<double>(10, 10, -1), Catch::Contains("weight_var = -1"));
  const Linear<double> layer(10, 10, 0.1);
  CHECK_THROWS_WITH(layer.forward({0, -1, 0, 0}), Catch::Contains("var = -1"));
  CHECK_THROWS_WITH(layer.forward({0, 1, 1.5, 0}), Catch::Contains("corr_len = 1.5") && Catch::Contains("[-1, 1]"));
  CHECK_THROWS_WITH(layer.forward({std::nan(""), 1, 0, 0}), Catch::Contains("mean = nan"));
  CHECK_THROWS_WITH(layer.backward({0, 1, 0, 0}, {-2, 0}), Catch::Contains("grad_var = -2"));
  CHECK_THROWS_AS(Linear<double>(10, 10, 1e308).forward({1e10, 1e10, 0, 0}), sigprop::overflow_error);
}

TEST_CASE("Linear: float and double share the formula", "[linear]") {
  const auto d = Linear<double>(64, 32, 0.05).forward({0.5, 2, 0.3, 0});
  const auto f = Linear<float>(64, 32, 0.05f).forward({0.5f, 2, 0.3f, 0});
  CHECK(f.var == Approx(d.var).epsilon(1e-6));
  CHECK(f.corr_len == Approx(d.corr_len).epsilon(1e-6));
}

TEST_CASE("Linear: Monte Carlo over the Table 21 grid", "[linear][montecarlo]") {
  // 60 random points of Table 21 (widths and lengths shrunk by 4 for speed),
  // each with enough trials for 20000 independent columns (about 1 percent
  // relative standard error on a variance).
  sigprop::montecarlo::GridOptions grid;
  grid.points = 60;
  grid.scale = 0.25;
  grid.seed = 2024;
  const auto report = sigprop::montecarlo::validate_linear(grid);
  sigprop::test::print_report(report);
  sigprop::test::require_no_worse_than_paper(report);
  // The closed form is exact, so every point must agree within 5 standard errors.
  sigprop::test::require_within_standard_errors(report);
}
