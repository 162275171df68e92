// LayerNorm (appendix B.6): the exact finite-d closed forms, checked against
// independent evaluations, their limits, errors, float and batched lanes, and
// Monte Carlo at small d (where the paper's large-d forms fail) and over the
// Table 21 grid.
#include "support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "sigprop/montecarlo/components/layernorm.hpp"

using sigprop::GradMoments;
using sigprop::LayerNorm;
using sigprop::Moments;
using sigprop::test::cos_angle_by_quadrature;
using sigprop::test::cos_angle_k3;
using sigprop::test::z_score;

TEST_CASE("LayerNorm: forward closed form at hand-computed points", "[layernorm]") {
  const LayerNorm<double> ln4(4);
  const Moments<double> in{3.0, 2.0, 0.5, 0.1};
  const auto out = ln4.forward(in);
  CHECK(out.mean == 0);
  CHECK(out.var == 1);
  CHECK(out.corr_dim == Approx(-1.0 / 3).epsilon(1e-15));
  // At d = 4 the angle is in R^3 (k = d - 1).
  // cos_angle_k3(0.5) = 0.4359908..., where the paper's r (1 - 1/d) gives 0.375.
  CHECK(out.corr_len == Approx(cos_angle_k3(0.5)).epsilon(1e-14));
  CHECK(out.corr_len == Approx(0.43599).margin(1e-5));
  // (cos_angle_k3 itself cancels like 1/rho^2 ulps, so rho >= 0.1 here.)
  for (double rho : {0.1, 0.3, 0.7, 0.7072, 0.95, 0.999999})
    CHECK(ln4.forward({0, 1, rho, 0}).corr_len == Approx(cos_angle_k3(rho)).epsilon(1e-13));
  // Other widths against the quadrature (accurate to ~1e-14 here), on both
  // sides of the series / recurrence switch (x = 1/2, alpha = 24 at d = 49).
  for (double d : {5.0, 6.0, 7.0, 12.0, 31.0, 48.0, 49.0, 50.0, 200.0, 1001.0})
    for (double rho : {0.1, 0.5, 0.7071, 0.7072, 0.9, 0.999}) {
      INFO("d = " << d << ", rho = " << rho);
      CHECK(LayerNorm<double>(d).forward({0, 1, rho, 0}).corr_len ==
            Approx(cos_angle_by_quadrature(d - 1, rho)).epsilon(1e-12));
    }
}

TEST_CASE("LayerNorm: large-d behaviour and the paper's r (1 - 1/d)", "[layernorm]") {
  // E[cos] = rho (1 - (1 - rho^2)/(2k)) + O(1/k^2): the paper's r (1 - 1/d) is
  // off by O(r/d) at small r and does not keep r = 1 fixed.
  for (double d : {1000.0, 100000.0})
    for (double rho : {0.2, 0.6, 0.9}) {
      const double k = d - 1;
      const double out = LayerNorm<double>(d).forward({0, 1, rho, 0}).corr_len;
      CHECK(out == Approx(rho * (1 - (1 - rho * rho) / (2 * k))).margin(2 / (k * k)));
    }
}

TEST_CASE("LayerNorm: backward closed form", "[layernorm]") {
  // Var[g_in] = g^2 (d - 2)/((d - 3) s^2 (1 - r^d)): twice the paper's g^2/s^2 at d = 4.
  const LayerNorm<double> ln4(4);
  const auto g = ln4.backward({1.0, 2.0, 0.5, 0.25}, {3.0, 0.8});
  CHECK(g.var == Approx(3 * 2.0 / (2.0 * 0.75)).epsilon(1e-14));
  // The gradient covariance is r_g g^2 F'(rho)/(s^2 (1 - r^d)) with F' the slope
  // of the forward map (Price's theorem); check F' against a central difference
  // of the forward map, h = 1e-5 (truncation ~h^2 F''' ~ 1e-10, rounding ~1e-11).
  for (double d : {4.0, 5.0, 9.0, 64.0, 768.0})
    for (double rho : {0.0, 0.3, 0.6, 0.9}) {
      const LayerNorm<double> ln(d);
      const double h = 1e-5;
      const double slope = (ln.corr_len_map(rho + h) - ln.corr_len_map(rho - h)) / (2 * h);
      INFO("d = " << d << ", rho = " << rho);
      CHECK(ln.grad_corr_factor(rho) == Approx(slope).epsilon(1e-8));
      const auto gb = ln.backward({0, 1.5, rho, 0}, {2.0, 0.4});
      CHECK(gb.cov_len() == Approx(0.4 * 2.0 * slope / 1.5).epsilon(1e-8));
    }
}

TEST_CASE("LayerNorm: limits and symmetry", "[layernorm]") {
  for (double d : {4.0, 5.0, 10.0, 47.0, 48.0, 49.0, 768.0, 1e6}) {
    INFO("d = " << d);
    const LayerNorm<double> ln(d);
    CHECK(ln.corr_len_map(0.0) == 0);
    CHECK(ln.corr_len_map(1.0) == Approx(1).epsilon(4e-15));  // map(1) = 1
    CHECK(ln.corr_len_map(1 - 1e-15) == Approx(1).epsilon(1e-14));
    CHECK(ln.corr_len_map(-0.4) == -ln.corr_len_map(0.4));
    // r = 1 stays fixed backwards too: F'(1)/F'(1) = 1.
    CHECK(ln.backward({0, 1, 1, 0}, {1, 0.7}).corr_len == Approx(0.7).epsilon(1e-14));
    CHECK(ln.backward({0, 1, 1, 0}, {1, 0}).corr_len == 0);
    // Normalization shrinks a positive correlation, monotonically.
    double previous = 0;
    for (double rho = 0.05; rho < 1; rho += 0.05) {
      const double out = ln.corr_len_map(rho);
      CHECK(out < rho);
      CHECK(out > previous);
      previous = out;
    }
  }
  // The mean of the input and its scale have no effect on the forward map.
  const LayerNorm<double> ln(16);
  CHECK(ln.forward({-7, 0.3, 0.4, 0.2}).corr_len == ln.forward({0, 5, 0.4, 0}).corr_len);
}

TEST_CASE("LayerNorm: bad parameters and inputs throw with the parameter and range", "[layernorm][errors]") {
  CHECK_THROWS_WITH(LayerNorm<double>(3), Catch::Contains("d = 3") && Catch::Contains("{4, 5, 6, ...}"));
  CHECK_THROWS_WITH(LayerNorm<double>(10.5), Catch::Contains("d = 10.5"));
  CHECK_THROWS_AS(LayerNorm<double>(std::nan("")), sigprop::domain_error);
  CHECK_THROWS_AS(LayerNorm<double>(INFINITY), sigprop::domain_error);
  const LayerNorm<double> ln(8);
  CHECK_THROWS_WITH(ln.forward({0, 0, 0.5, 0}), Catch::Contains("var = 0") && Catch::Contains("(0, inf)"));
  CHECK_THROWS_WITH(ln.forward({0, 1, 0.5, 1}), Catch::Contains("corr_dim = 1") && Catch::Contains("[-1, 1)"));
  CHECK_THROWS_WITH(ln.forward({0, 1, 1.5, 0}), Catch::Contains("corr_len = 1.5"));
  CHECK_THROWS_WITH(ln.backward({0, 1, 0.5, 0}, {-1, 0}), Catch::Contains("grad_var = -1"));
  // A tiny input variance divides a huge gradient: the result is not representable.
  CHECK_THROWS_AS(ln.backward({0, 1e-300, 0.5, 0}, {1e300, 0.5}), sigprop::overflow_error);
}

TEST_CASE("LayerNorm: float, double and batched lanes share the formula", "[layernorm]") {
  for (double d : {4.0, 7.0, 30.0, 768.0})
    for (double rho : {0.2, 0.8, 0.99}) {
      const auto a = LayerNorm<double>(d).forward({0.5, 2, rho, 0.1});
      const auto f = LayerNorm<float>(static_cast<float>(d)).forward({0.5f, 2, static_cast<float>(rho), 0.1f});
      CHECK(f.corr_len == Approx(a.corr_len).epsilon(1e-6));
      const auto ga = LayerNorm<double>(d).backward({0.5, 2, rho, 0.1}, {1.5, 0.6});
      const auto gf = LayerNorm<float>(static_cast<float>(d)).backward({0.5f, 2, static_cast<float>(rho), 0.1f}, {1.5f, 0.6f});
      CHECK(gf.var == Approx(ga.var).epsilon(1e-6));
      CHECK(gf.corr_len == Approx(ga.corr_len).epsilon(1e-6));
    }
  using A = Eigen::ArrayXd;
  A d(5), r(5), rd(5), rg(5);
  d << 4, 5, 48, 49, 1000;
  r << 0, 0.3, 0.75, 0.99, 1;
  rd << 0, -0.2, 0.1, 0, 0.5;
  rg << 0.1, 0.2, 0.3, 0.4, 0.5;
  const LayerNorm<A> batch(d);
  const Moments<A> in{A::Constant(5, 1.0), A::Constant(5, 2.0), r, rd};
  const auto out = batch.forward(in);
  const auto gout = batch.backward(in, GradMoments<A>{A::Constant(5, 3.0), rg});
  for (Eigen::Index i = 0; i < 5; ++i) {
    const LayerNorm<double> one(d(i));
    const Moments<double> m{1.0, 2.0, r(i), rd(i)};
    CHECK(out.corr_len(i) == one.forward(m).corr_len);
    CHECK(out.corr_dim(i) == one.forward(m).corr_dim);
    CHECK(gout.var(i) == one.backward(m, {3.0, rg(i)}).var);
    CHECK(gout.corr_len(i) == one.backward(m, {3.0, rg(i)}).corr_len);
  }
  A bad = d;
  bad(2) = 3;
  CHECK_THROWS_WITH(LayerNorm<A>(bad), Catch::Contains("d = 3"));
}

TEST_CASE("LayerNorm: Monte Carlo at small d pins the finite-d forms", "[layernorm][montecarlo]") {
  // Small widths, where the exact forms and the paper's large-d forms differ by
  // 10-100%. Each prediction must lie within 5 standard errors of the sample
  // (a correct formula fails with probability < 6e-7 per check); for d = 6 the
  // paper's forms are also shown to miss by far more than that. Input mean and
  // r^d != 0 are exercised (they must not matter / only rescale).
  // At d = 4, 5 the gradient variance 1/chi^2_{d-1} has no finite second
  // moment, so its standard error is meaningless: only the forward is checked.
  struct Case {
    double d, mean, var, corr_len, corr_dim, grad_var, grad_corr;
  };
  const Case cases[] = {{4, 2, 1, 0.5, 0, 1, 0.5},          {5, -1, 2, 0.9, 0.1, 1, 0.5},
                        {6, -3, 0.5, 0.3, 0.2, 2, 0.8},     {8, 0, 1, 0.95, -1.0 / 7, 1, 0.9},
                        {12, 5, 3, 0.6, 0.4, 0.5, 0.6},     {16, 0, 1, 0.2, 0, 1, 1.0}};
  for (const auto& c : cases) {
    const LayerNorm<double> ln(c.d);
    const Moments<double> in{c.mean, c.var, c.corr_len, c.corr_dim};
    const GradMoments<double> g{c.grad_var, c.grad_corr};
    const auto out = ln.forward(in);
    const auto gin = ln.backward(in, g);
    sigprop::montecarlo::SimulationSetup setup;
    setup.seq_len = 64;
    setup.trials = 3000;
    setup.seed = 11 + static_cast<std::uint64_t>(c.d);
    const auto sim = sigprop::montecarlo::simulate(ln, in, g, setup);
    std::printf("d = %4.0f: corr_len exact %.5f  MC %.5f +- %.5f  paper %.5f | grad var exact %.5f  MC %.5f +- %.5f  "
                "paper %.5f | grad cov exact %.5f  MC %.5f +- %.5f\n",
                c.d, out.corr_len, sim.forward.corr_len.value, sim.forward.corr_len.std_error,
                c.corr_len * (1 - 1 / c.d), gin.var, sim.backward.var.value, sim.backward.var.std_error,
                c.grad_var / c.var, gin.cov_len(), sim.backward.cov_len.value, sim.backward.cov_len.std_error);
    INFO("d = " << c.d << ": corr_len " << out.corr_len << " vs " << sim.forward.corr_len.value << " +- "
                << sim.forward.corr_len.std_error << ", grad var " << gin.var << " vs "
                << sim.backward.var.value << " +- " << sim.backward.var.std_error << ", grad cov "
                << gin.cov_len() << " vs " << sim.backward.cov_len.value << " +- "
                << sim.backward.cov_len.std_error);
    CHECK(std::abs(sim.forward.mean.value) < 1e-12);
    CHECK(sim.forward.var.value == Approx(1).epsilon(1e-12));
    CHECK(sim.forward.corr_dim.value == Approx(out.corr_dim).epsilon(1e-10));
    CHECK(z_score(sim.forward.cov_len, out.cov_len()) < 5);
    if (c.d >= 6) {
      CHECK(z_score(sim.backward.var, gin.var) < 5);
      CHECK(z_score(sim.backward.cov_len, gin.cov_len()) < 5);
    }
    if (c.d == 6) {  // the paper's r (1 - 1/d) and g^2/s^2
      CHECK(z_score(sim.forward.cov_len, c.corr_len * (1 - 1 / c.d)) > 5);
      CHECK(z_score(sim.backward.var, c.grad_var / c.var) > 5);
    }
  }
}

TEST_CASE("LayerNorm: Monte Carlo over the Table 21 grid", "[layernorm][montecarlo]") {
  // 60 random points of Table 21 (widths and lengths shrunk by 4 for speed),
  // each with enough trials for 20000 independent hidden units (about 1
  // percent relative standard error on a variance).
  sigprop::montecarlo::GridOptions grid;
  grid.points = 60;
  grid.scale = 0.25;
  grid.seed = 2026;
  const auto report = sigprop::montecarlo::validate_layernorm(grid);
  sigprop::test::print_report(report);
  sigprop::test::require_no_worse_than_paper(report);
  // The closed forms are exact, so every point must agree within 5 standard errors.
  sigprop::test::require_within_standard_errors(report);
}
