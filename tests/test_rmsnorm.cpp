// RMSNorm: the closed form (LayerNorm's kernel over d + 1 units, gain g0),
// checked against independent evaluations, a sample-by-sample identity with
// LayerNorm over d + 1 units, finite differences of the twin's backprop,
// Monte Carlo at small d and over a Table 21-like grid, the domain
// restriction, errors, and float and batched lanes.
#include "support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "sigprop/montecarlo/components/layernorm.hpp"
#include "sigprop/montecarlo/components/rmsnorm.hpp"

using sigprop::GradMoments;
using sigprop::LayerNorm;
using sigprop::Moments;
using sigprop::RmsNorm;
using sigprop::test::cos_angle_by_quadrature;
using sigprop::test::cos_angle_k3;
using sigprop::test::z_score;
namespace mc = sigprop::montecarlo;

namespace {

// Helmert basis: d orthonormal columns spanning the complement of the all-ones
// vector in R^{d+1}; column j (1-based) is (1, ..., 1, -j, 0, ...)/sqrt(j (j + 1)).
Eigen::MatrixXd helmert(Eigen::Index d) {
  Eigen::MatrixXd q = Eigen::MatrixXd::Zero(d + 1, d);
  for (Eigen::Index j = 1; j <= d; ++j) {
    const double norm = std::sqrt(static_cast<double>(j * (j + 1)));
    q.col(j - 1).head(j).setConstant(1 / norm);
    q(j, j - 1) = -static_cast<double>(j) / norm;
  }
  return q;
}

}  // namespace

TEST_CASE("RmsNorm: closed form is LayerNorm's kernel over d + 1 units", "[rmsnorm]") {
  for (double d : {3.0, 4.0, 5.0, 8.0, 16.0, 47.0, 48.0, 100.0, 768.0, 1e6})
    for (double rho : {0.0, 0.3, 0.7072, 0.99, 1.0})
      for (double gain : {1.0, 0.5, 2.0}) {
        INFO("d = " << d << ", rho = " << rho << ", gain = " << gain);
        const RmsNorm<double> rms(d, gain);
        const LayerNorm<double> ln(d + 1);
        const Moments<double> in{0, 1.7, rho, 0};
        const GradMoments<double> g{0.6, 0.45};
        const auto out = rms.forward(in);
        const auto ref = ln.forward(in);
        CHECK(out.mean == 0);
        CHECK(out.var == gain * gain);
        CHECK(out.corr_dim == 0);  // LayerNorm's is -1/d: rows are not centered
        CHECK(ref.corr_dim == Approx(-1 / d).epsilon(1e-15));
        CHECK(out.corr_len == ref.corr_len);
        const auto gb = rms.backward(in, g);
        const auto gref = ln.backward(in, g);
        CHECK(gb.var == Approx(gain * gain * gref.var).epsilon(1e-15));
        CHECK(gb.corr_len == gref.corr_len);
        // Var[g_in] = g0^2 Var[g] (d - 1)/((d - 2) s^2), written out independently.
        CHECK(gb.var == Approx(gain * gain * 0.6 * (d - 1) / ((d - 2) * 1.7)).epsilon(1e-14));
      }
}

TEST_CASE("RmsNorm: the kernel is the mean cosine in R^d and not in R^(d-1)", "[rmsnorm]") {
  // Independent evaluations with k = d: elementary at d = 3, quadrature otherwise.
  for (double rho : {0.1, 0.3, 0.5, 0.7072, 0.95, 0.999999})
    CHECK(RmsNorm<double>(3).forward({0, 1, rho, 0}).corr_len == Approx(cos_angle_k3(rho)).epsilon(1e-13));
  CHECK(RmsNorm<double>(3).forward({0, 1, 0.5, 0}).corr_len == Approx(0.43599).margin(1e-5));
  for (double d : {4.0, 5.0, 6.0, 12.0, 31.0, 47.0, 48.0, 49.0, 200.0, 1001.0})
    for (double rho : {0.1, 0.5, 0.7071, 0.7072, 0.9, 0.999}) {
      INFO("d = " << d << ", rho = " << rho);
      const double exact = cos_angle_by_quadrature(d, rho);
      CHECK(RmsNorm<double>(d).forward({0, 1, rho, 0}).corr_len == Approx(exact).epsilon(1e-12));
      // LayerNorm over d units (k = d - 1) is a different map, about
      // rho (1 - rho^2)/(2 d (d - 1)) away; asked for half of that, far above
      // the 1e-12 agreement.
      CHECK(std::abs(LayerNorm<double>(d).corr_len_map(rho) - exact) > rho * (1 - rho * rho) / (4 * d * d));
    }
  // The gradient covariance is g0^2 r_g Var[g] F'(rho)/s^2 with F' the slope of
  // the forward map (central difference, h = 1e-5: truncation ~1e-10).
  for (double d : {3.0, 4.0, 9.0, 64.0, 768.0})
    for (double rho : {0.0, 0.3, 0.6, 0.9}) {
      const RmsNorm<double> rms(d, 1.3);
      const double h = 1e-5;
      const double slope = (rms.corr_len_map(rho + h) - rms.corr_len_map(rho - h)) / (2 * h);
      INFO("d = " << d << ", rho = " << rho);
      CHECK(rms.grad_corr_factor(rho) == Approx(slope).epsilon(1e-8));
      const auto gb = rms.backward({0, 1.5, rho, 0}, {2.0, 0.4});
      CHECK(gb.cov_len() == Approx(1.3 * 1.3 * 0.4 * 2.0 * slope / 1.5).epsilon(1e-8));
    }
}

TEST_CASE("RmsNorm: gain scaling", "[rmsnorm]") {
  const Moments<double> in{0, 0.8, 0.6, 0};
  const GradMoments<double> g{1.5, 0.7};
  const RmsNorm<double> one(10);
  CHECK(one.gain() == 1);
  CHECK(one.d() == 10);
  for (double gain : {1e-3, 0.25, 1.0, 3.0, 1e3}) {
    const RmsNorm<double> rms(10, gain);
    CHECK(rms.forward(in).var == Approx(gain * gain * one.forward(in).var).epsilon(1e-15));
    CHECK(rms.forward(in).corr_len == one.forward(in).corr_len);
    CHECK(rms.backward(in, g).var == Approx(gain * gain * one.backward(in, g).var).epsilon(1e-15));
    CHECK(rms.backward(in, g).corr_len == one.backward(in, g).corr_len);
  }
  // The input scale cancels forwards and divides the gradient variance.
  CHECK(one.forward({0, 5, 0.6, 0}).corr_len == one.forward(in).corr_len);
  CHECK(one.backward({0, 8, 0.6, 0}, g).var == Approx(one.backward(in, g).var / 10).epsilon(1e-15));
  // r = 1 stays fixed forwards and backwards; r = 0 maps to 0.
  CHECK(one.corr_len_map(1.0) == Approx(1).epsilon(4e-15));
  CHECK(one.corr_len_map(0.0) == 0);
  CHECK(one.backward({0, 1, 1, 0}, {1, 0.7}).corr_len == Approx(0.7).epsilon(1e-14));
}

TEST_CASE("RmsNorm twin: RMSNorm over d units is LayerNorm over d + 1 sample by sample", "[rmsnorm][montecarlo]") {
  // For X (L x (d+1)) and the Helmert basis Q of the complement of the ones
  // vector, V = X Q has the centered rows of X as coordinates, so
  //   rmsnorm(V) = sqrt(d/(d+1)) layernorm(X) Q,
  //   rmsnorm_backward(V, G) = sqrt(d/(d+1)) layernorm_backward(X, G Q^T) Q.
  // If the rows of X are isotropic N(0, s^2 I_{d+1}), the rows of V are
  // isotropic N(0, s^2 I_d) with the same correlation across positions: the
  // identity in distribution behind the closed form, here per sample.
  mc::Random rng(7);
  for (Eigen::Index d : {3, 4, 8, 16, 100}) {
    INFO("d = " << d);
    const Eigen::MatrixXd q = helmert(d);
    CHECK((q.transpose() * q - Eigen::MatrixXd::Identity(d, d)).cwiseAbs().maxCoeff() < 1e-14);
    CHECK((Eigen::RowVectorXd::Ones(d + 1) * q).cwiseAbs().maxCoeff() < 1e-14);
    const Eigen::MatrixXd x = 3 + 2 * rng.normal_matrix(20, d + 1).array();  // the mean of X is removed by LayerNorm
    const Eigen::MatrixXd gv = rng.normal_matrix(20, d);
    const Eigen::MatrixXd v = x * q;
    const double scale = std::sqrt(static_cast<double>(d) / static_cast<double>(d + 1));
    const auto ln = mc::ops::layernorm_forward(x);
    for (double gain : {1.0, 0.3}) {
      const auto rms = mc::ops::rmsnorm_forward(v, gain);
      CHECK((rms.y - gain * scale * ln.y * q).cwiseAbs().maxCoeff() < 1e-12);
      const Eigen::MatrixXd dv = mc::ops::rmsnorm_backward(rms, gv);
      const Eigen::MatrixXd dv_ref = gain * scale * mc::ops::layernorm_backward(ln, gv * q.transpose()) * q;
      CHECK((dv - dv_ref).cwiseAbs().maxCoeff() < 1e-12 * dv.cwiseAbs().maxCoeff());
    }
    // Each output row has squared norm g0^2 d and (unlike LayerNorm's) a nonzero sum.
    const auto rms = mc::ops::rmsnorm_forward(v, 1.5);
    CHECK(((rms.y.rowwise().squaredNorm().array() / (2.25 * static_cast<double>(d))) - 1).abs().maxCoeff() < 1e-13);
    CHECK(rms.y.rowwise().sum().cwiseAbs().maxCoeff() > 1e-3);
  }
}

TEST_CASE("RmsNorm twin: backprop matches finite differences", "[rmsnorm][montecarlo]") {
  mc::Random rng(5);
  const Eigen::MatrixXd x = rng.normal_matrix(3, 5).array() + 0.4;
  const Eigen::MatrixXd g = rng.normal_matrix(3, 5);
  for (double eps : {0.0, 0.1}) {
    const double gain = 1.7;
    const Eigen::MatrixXd dx = mc::ops::rmsnorm_backward(mc::ops::rmsnorm_forward(x, gain, eps), g);
    const auto loss = [&](const Eigen::MatrixXd& xx) { return mc::ops::rmsnorm_forward(xx, gain, eps).y.cwiseProduct(g).sum(); };
    const double h = 1e-6;  // central difference: truncation ~h^2, rounding ~1e-16/h
    for (Eigen::Index i = 0; i < x.size(); ++i) {
      Eigen::MatrixXd up = x, down = x;
      up.data()[i] += h;
      down.data()[i] -= h;
      INFO("eps = " << eps << ", entry " << i);
      CHECK(dx.data()[i] == Approx((loss(up) - loss(down)) / (2 * h)).margin(1e-8));
    }
  }
}

TEST_CASE("RmsNorm: Monte Carlo at small d pins the finite-d forms", "[rmsnorm][montecarlo]") {
  // Small widths, where k = d (this form) and k = d - 1 (LayerNorm over d
  // units) differ by percents and the large-d forms (r, g0^2 g^2/s^2) by up
  // to 2x. Each prediction must lie within 4 standard errors of the sample
  // (fixed seeds; a correct formula fails a check with probability 6e-5, the
  // 22 checks together with 0.14%), and at d = 4 and 8 the alternatives must
  // be more than 6 standard errors off. The output variance is checked as the
  // identity it is.
  //
  // The gradient variance involves 1/chi^2_d, which has no finite second
  // moment at d <= 4, so its plain standard error is not meaningful there
  // (asserted only at d >= 8). At every d it is also measured radially
  // factored: the radius |x| of an isotropic Gaussian row is independent of
  // its direction, and rms(x)^2 |g_in|^2 = g0^2 |(I - n n^T) g|^2 (n = x/|x|) depends on
  // the direction and g only, so Var[g_in] = E[rms^2 |g_in|^2]/d * E[1/rms^2]
  // with E[1/rms^2] = d/(s^2 (d - 2)) (a chi-square moment). The sampled
  // factor, E[rms^2 |g_in|^2]/(g0^2 d Var[g]), has finite variance and tests the
  // rank of the Jacobian, (d - 1)/d (LayerNorm over d units: (d - 2)/d).
  struct Case {
    double d, var, corr_len, gain, grad_var, grad_corr;
  };
  const Case cases[] = {
      {3, 1, 0.5, 1, 1, 0.5}, {4, 2, 0.5, 0.7, 1, 0.5}, {8, 0.5, 0.3, 1.5, 2, 0.8}, {16, 1, 0.95, 1, 1, 0.9}};
  for (const auto& c : cases) {
    const RmsNorm<double> rms(c.d, c.gain);
    const Moments<double> in{0, c.var, c.corr_len, 0};
    const GradMoments<double> g{c.grad_var, c.grad_corr};
    const auto out = rms.forward(in);
    const auto gin = rms.backward(in, g);
    mc::SimulationSetup setup;
    setup.seq_len = 64;
    setup.trials = 20000;
    setup.seed = 31 + static_cast<std::uint64_t>(c.d);
    const auto sim = mc::simulate(rms, in, g, setup);

    // The radially factored gradient variance, from the twin's own pass.
    const auto di = static_cast<Eigen::Index>(c.d);
    mc::Random rng(setup.seed + 1000);
    std::vector<double> factor;
    for (std::size_t t = 0; t < setup.trials; ++t) {
      const Eigen::MatrixXd x = mc::sample_activations_separable(setup.seq_len, di, in, rng);
      const Eigen::MatrixXd gr = mc::sample_gradient(setup.seq_len, di, g, rng);
      const auto p = mc::rmsnorm_pass(x, gr, c.gain);
      const Eigen::VectorXd rms_sq = x.rowwise().squaredNorm() / c.d;
      factor.push_back(rms_sq.dot(p.grad_in.rowwise().squaredNorm()) /
                       (static_cast<double>(setup.seq_len) * c.gain * c.gain * c.d * c.grad_var));
    }
    const mc::Estimate rank = mc::detail::mean_estimate(factor);
    const double to_var = c.gain * c.gain * c.grad_var * c.d / (c.var * (c.d - 2));  // E[1/rms^2] g0^2 Var[g]
    const mc::Estimate factored{rank.value * to_var, rank.std_error * to_var};

    // The alternatives: LayerNorm over d units (k = d - 1; none at d = 3) and the large-d forms.
    const double ln_corr = c.d >= 4 ? LayerNorm<double>(c.d).corr_len_map(c.corr_len) : NAN;
    const double ln_grad_var = c.gain * c.gain * c.grad_var * (c.d - 2) / ((c.d - 3) * c.var);
    const double large_d_grad_var = c.gain * c.gain * c.grad_var / c.var;
    std::printf("d = %2.0f: corr_len exact %.5f  MC %.5f +- %.5f  LN(d) %.5f  large-d %.5f | corr_dim MC %+.5f +- %.5f"
                " | grad var exact %.4f  MC %.4f +- %.4f  factored %.4f +- %.4f  LN(d) %.4f  large-d %.4f"
                " | grad cov exact %.4f  MC %.4f +- %.4f\n",
                c.d, out.corr_len, sim.forward.corr_len.value, sim.forward.corr_len.std_error, ln_corr, c.corr_len,
                sim.forward.corr_dim.value, sim.forward.corr_dim.std_error, gin.var, sim.backward.var.value,
                sim.backward.var.std_error, factored.value, factored.std_error,
                ln_grad_var, large_d_grad_var,
                gin.cov_len(), sim.backward.cov_len.value, sim.backward.cov_len.std_error);
    INFO("d = " << c.d);
    CHECK(z_score(sim.forward.mean, 0) < 4);
    // Each row has squared norm g0^2 d, so the measured variance is g0^2 - mean^2.
    CHECK(sim.forward.var.value + sim.forward.mean.value * sim.forward.mean.value ==
          Approx(c.gain * c.gain).epsilon(1e-12));
    CHECK(z_score(sim.forward.corr_dim, 0) < 4);
    CHECK(z_score(sim.forward.cov_len, out.cov_len()) < 4);
    CHECK(z_score(factored, gin.var) < 4);
    CHECK(z_score(sim.backward.cov_len, gin.cov_len()) < 4);
    if (c.d >= 8) CHECK(z_score(sim.backward.var, gin.var) < 4);
    if (c.d == 4) {  // LayerNorm over d units, and the large-d forms
      CHECK(z_score(sim.forward.cov_len, ln_corr * out.var) > 6);
      CHECK(z_score(sim.forward.cov_len, c.corr_len * out.var) > 6);
      CHECK(z_score(factored, ln_grad_var) > 6);
      CHECK(z_score(factored, large_d_grad_var) > 6);
    }
    if (c.d == 8) {
      CHECK(z_score(sim.backward.var, ln_grad_var) > 6);
      CHECK(z_score(factored, ln_grad_var) > 6);
      CHECK(z_score(sim.backward.var, large_d_grad_var) > 6);
    }
  }
}

TEST_CASE("RmsNorm: Monte Carlo over a Table 21 grid in the domain", "[rmsnorm][montecarlo]") {
  // 60 random points (widths and lengths shrunk by 4 for speed, gain in
  // [0.5, 2]), each with enough trials for 20000 independent hidden units
  // (about 1 percent relative standard error on a variance).
  mc::GridOptions grid;
  grid.points = 60;
  grid.scale = 0.25;
  grid.seed = 2027;
  const auto report = mc::validate_rmsnorm(grid);
  sigprop::test::print_report(report);
  for (auto q : mc::all_quantities) std::printf("rmsnorm %-9s max z %.2f\n", mc::to_string(q), report.max_z(q));
  // The closed forms are exact: every point within 5 standard errors (300
  // checks; a correct formula fails one with probability < 2e-4 in all).
  sigprop::test::require_within_standard_errors(report, 5);
  // And the relative errors are those of sampling noise.
  for (auto q : mc::all_quantities) {
    const auto e = report.errors(q);
    const auto n = report.noise_margin(q);
    INFO(mc::to_string(q) << ": " << e.p50 << "/" << e.p90 << "/" << e.p99 << " vs noise " << n.p50 << "/" << n.p90
                          << "/" << n.p99);
    CHECK(e.p50 <= n.p50 + 1e-9);
    CHECK(e.p90 <= n.p90 + 1e-9);
    CHECK(e.p99 <= n.p99 + 1e-9);
  }
}

TEST_CASE("RmsNorm: Monte Carlo over the full-size Table 21 grid", "[.][rmsnorm][montecarlo][full]") {
  // Hidden (run by name or with [full]; about a minute): the unshrunk sizes,
  // d in [10, 1010] and L in [100, 1100], 60 points, the same assertions.
  mc::GridOptions grid;
  grid.points = 60;
  grid.seed = 2027;
  const auto report = mc::validate_rmsnorm(grid);
  sigprop::test::print_report(report);
  for (auto q : mc::all_quantities) std::printf("rmsnorm %-9s max z %.2f\n", mc::to_string(q), report.max_z(q));
  sigprop::test::require_within_standard_errors(report, 5);
}

TEST_CASE("RmsNorm: inputs outside the domain are simulated and not predicted", "[rmsnorm][montecarlo]") {
  // What the closed form would get wrong: a nonzero mean survives RMSNorm, and
  // r^d != 0 leaves the output hidden-correlated. The twin measures both.
  const RmsNorm<double> rms(16);
  mc::SimulationSetup setup;
  setup.seq_len = 32;
  setup.trials = 200;
  setup.seed = 3;
  const auto shifted = mc::simulate(rms, {1, 1, 0.3, 0}, {1, 0.5}, setup);
  std::printf("mean 1: output mean %.4f +- %.4f\n", shifted.forward.mean.value, shifted.forward.mean.std_error);
  CHECK(shifted.forward.mean.value > 0.5);  // E[y] = E[x/rms(x)] ~ 1/sqrt(2)
  CHECK(z_score(shifted.forward.mean, 0) > 20);
  const auto correlated = mc::simulate(rms, {0, 1, 0.3, 0.3}, {1, 0.5}, setup);
  std::printf("corr_dim 0.3: output corr_dim %.4f +- %.4f\n", correlated.forward.corr_dim.value,
              correlated.forward.corr_dim.std_error);
  CHECK(z_score(correlated.forward.corr_dim, 0) > 20);
  CHECK_THROWS_AS(rms.forward({1, 1, 0.3, 0}), sigprop::domain_error);
  CHECK_THROWS_AS(rms.forward({0, 1, 0.3, 0.3}), sigprop::domain_error);
  // Exactly centered rows (mean 0, r^d = -1/(d - 1) in the separable model,
  // such as the output of a centering step): rms(x) = sd(x), so the forward is
  // LayerNorm over the same d units sample by sample. The backward is not: the
  // RMSNorm Jacobian keeps the all-ones direction (rank d - 1, LayerNorm's
  // d - 2), so Var[g_in] is g0^2 (d - 1)/(d - 2) times LayerNorm(d)'s, and the
  // gradient covariance gains g0^2 r_g Var[g] E[1/(|u||u'|)]/(s^2 (1 - r^d)),
  // u, u' in R^k, k = d - 1, with E[1/(|u||u'|)] = c0 k H0/(k - 1)^2
  // (E[|u|^a |u'|^a] = (E|u|^a)^2 2F1(-a/2, -a/2; k/2; rho^2)).
  const Moments<double> centered{0, 1.3, 0.4, -1.0 / 15};
  const GradMoments<double> g{0.9, 0.6};
  const LayerNorm<double> ln(16);
  const double grad_var = ln.backward(centered, g).var * 15 / 14;
  const double k = 15, h0 = sigprop::detail::half_half(k / 2, 0.16, 0.84).h0;
  const double inv_norms = sigprop::detail::layernorm_c0(16.0) * k * h0 / ((k - 1) * (k - 1));
  const double grad_cov = ln.backward(centered, g).cov_len() + 0.6 * 0.9 * inv_norms / (1.3 * (1 + 1.0 / 15));
  setup.seq_len = 64;
  setup.trials = 2000;
  const auto sim = mc::simulate(rms, centered, g, setup);
  std::printf("centered rows: corr_len %.5f +- %.5f (LayerNorm(16) %.5f), grad var %.4f +- %.4f (%.4f; "
              "LayerNorm(16) %.4f), grad cov %.4f +- %.4f (%.4f; LayerNorm(16) %.4f)\n",
              sim.forward.corr_len.value, sim.forward.corr_len.std_error, ln.forward(centered).corr_len,
              sim.backward.var.value, sim.backward.var.std_error, grad_var, ln.backward(centered, g).var,
              sim.backward.cov_len.value, sim.backward.cov_len.std_error, grad_cov, ln.backward(centered, g).cov_len());
  CHECK(sim.forward.corr_dim.value == Approx(-1.0 / 15).epsilon(1e-9));
  CHECK(z_score(sim.forward.cov_len, ln.forward(centered).cov_len()) < 4);
  CHECK(z_score(sim.backward.var, grad_var) < 4);
  CHECK(z_score(sim.backward.var, ln.backward(centered, g).var) > 6);
  CHECK(z_score(sim.backward.cov_len, grad_cov) < 4);
  CHECK(z_score(sim.backward.cov_len, ln.backward(centered, g).cov_len()) > 4);
}

TEST_CASE("RmsNorm: bad parameters and inputs throw with the parameter and range", "[rmsnorm][errors]") {
  CHECK_THROWS_WITH(RmsNorm<double>(2), Catch::Contains("sigprop::RmsNorm: d = 2") &&
                                            Catch::Contains("{3, 4, 5, ...") && Catch::Contains("gradient variance"));
  CHECK_THROWS_WITH(RmsNorm<double>(4.5), Catch::Contains("sigprop::RmsNorm: d = 4.5"));
  CHECK_THROWS_WITH(RmsNorm<double>(1e15), Catch::Contains("sigprop::RmsNorm: d = 1e+15"));
  CHECK_NOTHROW(RmsNorm<double>(1e15 - 1));
  CHECK_THROWS_AS(RmsNorm<double>(std::nan("")), sigprop::domain_error);
  CHECK_THROWS_AS(RmsNorm<double>(INFINITY), sigprop::domain_error);
  CHECK_THROWS_WITH(RmsNorm<double>(8, 0), Catch::Contains("gain = 0") && Catch::Contains("(0, inf)"));
  CHECK_THROWS_WITH(RmsNorm<double>(8, -1), Catch::Contains("gain = -1") && Catch::Contains("(0, inf)"));
  CHECK_THROWS_AS(RmsNorm<double>(8, std::nan("")), sigprop::domain_error);
  CHECK_THROWS_AS(RmsNorm<double>(8, INFINITY), sigprop::domain_error);
  {
    // No pole in norm_var_ratio: the kernel LayerNorm(d + 1)'s E[m/Q] over k = d
    // dimensions is k/(k - 2 nu) up to nu = 1 and k/(k - 2) (1 + 2 (nu - 1)/k)
    // beyond; rank d - 1 = 3 of the projection at d = 4.
    const RmsNorm<double> small(4);
    Moments<double> x{0, 1, 0.5, 0};
    x.norm_var_ratio = 1;  // Gaussian: (d - 1)/(d - 2)
    CHECK(small.backward(x, {1, 0.5}).var == Approx(1.5));
    x.norm_var_ratio = 2;  // the chi-square form's old pole d/2: 3 * 2 * (1 + 2/4) / 4
    CHECK(small.backward(x, {1, 0.5}).var == Approx(2.25));
    x.norm_var_ratio = INFINITY;
    CHECK_THROWS_WITH(small.backward(x, {1, 0.5}), Catch::Contains("norm_var_ratio = inf"));
  }
  const RmsNorm<double> rms(8);
  // (Catch's composed matchers refer to their parts, so they are spelled out per check.)
#define SIGPROP_OUTSIDE_ZERO(what)                                                                      \
  Catch::Contains(what) && Catch::Contains("outside the valid range {0}") && Catch::Contains("mean-zero") && \
      Catch::Contains("uncorrelated")
  CHECK_THROWS_WITH(rms.forward({0.5, 1, 0.5, 0}), SIGPROP_OUTSIDE_ZERO("mean = 0.5"));
  CHECK_THROWS_WITH(rms.forward({-1e-9, 1, 0.5, 0}), SIGPROP_OUTSIDE_ZERO("mean = -1e-09"));
  CHECK_THROWS_WITH(rms.forward({0, 1, 0.5, 0.1}), SIGPROP_OUTSIDE_ZERO("corr_dim = 0.1"));
  CHECK_THROWS_WITH(rms.forward({0, 1, 0.5, -0.1}), SIGPROP_OUTSIDE_ZERO("corr_dim = -0.1"));
  CHECK_THROWS_WITH(rms.backward({0.5, 1, 0.5, 0}, {1, 0.5}), SIGPROP_OUTSIDE_ZERO("mean = 0.5"));
  CHECK_THROWS_WITH(rms.domain({0, 1, 0.5, 0.2}), SIGPROP_OUTSIDE_ZERO("corr_dim = 0.2"));
#undef SIGPROP_OUTSIDE_ZERO
  CHECK_THROWS_WITH(rms.forward({0, 0, 0.5, 0}), Catch::Contains("var = 0") && Catch::Contains("(0, inf)"));
  CHECK_THROWS_WITH(rms.forward({0, 1, 1.5, 0}), Catch::Contains("corr_len = 1.5"));
  CHECK_THROWS_WITH(rms.backward({0, 1, 0.5, 0}, {-1, 0}), Catch::Contains("grad_var = -1"));
  CHECK_THROWS_AS(rms.backward({0, 1e-300, 0.5, 0}, {1e300, 0.5}), sigprop::overflow_error);
  // The domain is exact, so every measure is 0.
  const auto dom = rms.domain({0, 1, 0.5, 0});
  CHECK(dom.score_var == 0);
  CHECK(dom.key_weight == 0);
  CHECK(dom.width_term == 0);
  CHECK(RmsNorm<double>::exact_forms);
}

TEST_CASE("RmsNorm: float and batched lanes agree with double", "[rmsnorm]") {
  for (double d : {3.0, 7.0, 30.0, 768.0})
    for (double rho : {0.2, 0.8, 0.99}) {
      const Moments<double> in{0, 2, rho, 0};
      const Moments<float> in_f{0, 2, static_cast<float>(rho), 0};
      const auto a = RmsNorm<double>(d, 1.25).forward(in);
      const auto f = RmsNorm<float>(static_cast<float>(d), 1.25f).forward(in_f);
      CHECK(f.var == Approx(a.var).epsilon(1e-6));
      CHECK(f.corr_len == Approx(a.corr_len).epsilon(1e-6));
      CHECK(f.corr_dim == 0);
      const auto ga = RmsNorm<double>(d, 1.25).backward(in, {1.5, 0.6});
      const auto gf = RmsNorm<float>(static_cast<float>(d), 1.25f).backward(in_f, {1.5f, 0.6f});
      CHECK(gf.var == Approx(ga.var).epsilon(1e-6));
      CHECK(gf.corr_len == Approx(ga.corr_len).epsilon(1e-6));
    }
  using A = Eigen::ArrayXd;
  A d(6), gain(6), r(6), rg(6);
  d << 3, 4, 47, 48, 1000, 5;
  gain << 1, 0.5, 2, 1.5, 1, 0.8;
  r << 0, 0.3, 0.75, 0.99, 1, 0.5;
  rg << 0.1, 0.2, 0.3, 0.4, 0.5, 0.6;
  const RmsNorm<A> batch(d, gain);
  const RmsNorm<A> unit(d);
  const Moments<A> in{A::Zero(6), A::Constant(6, 2.0), r, A::Zero(6)};
  const auto out = batch.forward(in);
  const auto gout = batch.backward(in, GradMoments<A>{A::Constant(6, 3.0), rg});
  CHECK((unit.gain() == 1).all());
  for (Eigen::Index i = 0; i < 6; ++i) {
    INFO("lane " << i);
    const RmsNorm<double> one(d(i), gain(i));
    const Moments<double> m{0, 2.0, r(i), 0};
    CHECK(out.mean(i) == 0);
    CHECK(out.var(i) == one.forward(m).var);
    CHECK(out.corr_len(i) == Approx(one.forward(m).corr_len).epsilon(1e-14).margin(1e-15));
    CHECK(out.corr_dim(i) == 0);
    CHECK(gout.var(i) == Approx(one.backward(m, {3.0, rg(i)}).var).epsilon(1e-14));
    CHECK(gout.corr_len(i) == Approx(one.backward(m, {3.0, rg(i)}).corr_len).epsilon(1e-14).margin(1e-15));
    CHECK(unit.forward(in).var(i) == 1);
  }
  A bad = d;
  bad(2) = 2;
  CHECK_THROWS_WITH(RmsNorm<A>(bad), Catch::Contains("d = 2"));
  A bad_gain = gain;
  bad_gain(4) = 0;
  CHECK_THROWS_WITH(RmsNorm<A>(d, bad_gain), Catch::Contains("gain = 0"));
  Moments<A> shifted = in;
  shifted.mean(3) = 0.25;
  CHECK_THROWS_WITH(batch.forward(shifted), Catch::Contains("mean = 0.25") && Catch::Contains("{0}"));
  Moments<A> correlated = in;
  correlated.corr_dim(5) = 0.2;
  CHECK_THROWS_WITH(batch.backward(correlated, GradMoments<A>{A::Constant(6, 3.0), rg}),
                    Catch::Contains("corr_dim = 0.2") && Catch::Contains("{0}"));
}
