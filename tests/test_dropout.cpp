// Dropout (appendix B.3): exact unit checks and the Monte Carlo grid.
#include "support.hpp"

#include "sigprop/montecarlo/components/dropout.hpp"

using sigprop::Dropout;
using sigprop::Moments;

TEST_CASE("Dropout: closed form at hand-computed points", "[dropout]") {
  const Dropout<double> layer(0.2);
  const auto out = layer.forward({1.5, 2.0, 0.4, 0.2});
  CHECK(out.mean == 1.5);
  CHECK(out.var == Approx((2 + 0.2 * 2.25) / 0.8).epsilon(1e-14));
  CHECK(out.corr_len == Approx(0.4 * 2 * 0.8 / (2 + 0.2 * 2.25)).epsilon(1e-14));
  CHECK(out.corr_dim == Approx(0.2 * 2 * 0.8 / (2 + 0.2 * 2.25)).epsilon(1e-14));
  const auto g = layer.backward({1.5, 2.0, 0.4, 0}, {3.0, 0.5});
  CHECK(g.var == Approx(3 / 0.8).epsilon(1e-14));
  CHECK(g.corr_len == Approx(0.4).epsilon(1e-14));
}

TEST_CASE("Dropout: p = 0 is the identity", "[dropout]") {
  const Moments<double> in{0.3, 1.7, 0.6, 0.1};
  const auto out = Dropout<double>(0).forward(in);
  CHECK(out.mean == in.mean);
  CHECK(out.var == in.var);
  CHECK(out.corr_len == Approx(in.corr_len).epsilon(1e-15));
}

TEST_CASE("Dropout: p outside [0, 1) throws", "[dropout][errors]") {
  CHECK_THROWS_WITH(Dropout<double>(1.0), Catch::Contains("p = 1") && Catch::Contains("[0, 1)"));
  CHECK_THROWS_WITH(Dropout<double>(-0.1), Catch::Contains("p = -0.1"));
  CHECK_THROWS_AS(Dropout<double>(std::nan("")), sigprop::domain_error);
}

TEST_CASE("Dropout: Monte Carlo over the Table 21 grid", "[dropout][montecarlo]") {
  // 60 random points of Table 21 (widths and lengths shrunk by 4 for speed),
  // each with enough trials for 20000 independent columns (about 1 percent
  // relative standard error on a variance).
  sigprop::montecarlo::GridOptions grid;
  grid.points = 60;
  grid.scale = 0.25;
  grid.seed = 2025;
  const auto report = sigprop::montecarlo::validate_dropout(grid);
  sigprop::test::print_report(report);
  sigprop::test::require_no_worse_than_paper(report);
  sigprop::test::require_within_standard_errors(report);
}
