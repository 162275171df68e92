// Gated FFN blocks (blocks/gated.hpp, glu_ffn_block): the combinator's
// algebra, and the whole block against a simulation with real matrices and
// real backprop.
#include "support.hpp"

#include <cmath>
#include <cstdio>
#include <vector>

#include "sigprop/blocks/ffn_block.hpp"
#include "sigprop/components/silu.hpp"
#include "sigprop/montecarlo/components/gated.hpp"
#include "sigprop/montecarlo/statistics.hpp"

using namespace sigprop;
using sigprop::test::outside;
using sigprop::test::within;
namespace mc = sigprop::montecarlo;

TEST_CASE("Gated: moments of a product of independent branches", "[gated]") {
  // Two Linear branches: a and b are zero-mean with E[a^2] = d w_a m2.
  const double d = 64;
  const auto g = gated(Linear<double>(d, 32, 0.5 / d), Linear<double>(d, 32, 2.0 / d));
  const Moments<double> x{0.5, 2, 0.3, 0.1};
  const double m2 = 2 + 0.25, len = 0.6 + 0.25;
  const Moments<double> y = g.forward(x);
  CHECK(y.mean == 0);
  CHECK(y.var == Approx(0.5 * m2 * 2.0 * m2).epsilon(1e-14));
  CHECK(y.corr_len == Approx(len * len / (m2 * m2)).epsilon(1e-14));
  CHECK(y.corr_dim == 0);  // distinct output units use independent columns
  // Backward: d gate = g * b, d value = g * a, each through its Linear.
  const GradMoments<double> gy{3, 0.4};
  const GradMoments<double> gx = g.backward(x, gy);
  const double through_gate = 32 * (0.5 / d) * 3 * (2.0 * m2), through_value = 32 * (2.0 / d) * 3 * (0.5 * m2);
  CHECK(gx.var == Approx(through_gate + through_value).epsilon(1e-14));
  CHECK(gx.corr_len == Approx(0.4 * len / m2).epsilon(1e-14));
}

TEST_CASE("glu_ffn_block against simulation (ReGLU, GeGLU, SwiGLU)", "[gated][montecarlo]") {
  // (activation, d, input mean, var, r, r_g, dropout); hidden width 8d/3,
  // W1, V ~ 1/d (ReLU's W1 2/d), W2 ~ 1/h.
  struct Point {
    mc::ops::Activation act;
    int d;
    double mean, var, r, r_g, p;
  };
  const Point points[] = {
      {mc::ops::Activation::gelu, 64, 0, 1, 0.2, 0, 0},       {mc::ops::Activation::gelu, 256, 0, 1, 0.6, 0.3, 0.1},
      {mc::ops::Activation::relu, 128, 0, 2, 0.9, 0.5, 0},    {mc::ops::Activation::relu, 64, 0.5, 1, 0.4, 0.2, 0.2},
      {mc::ops::Activation::gelu, 128, -0.3, 0.5, 0.0, 0, 0}, {mc::ops::Activation::gelu, 256, 0, 4, 0.95, 0.8, 0},
      {mc::ops::Activation::silu, 128, 0, 1, 0.3, 0.2, 0},    {mc::ops::Activation::silu, 256, 0, 2, 0.8, 0.5, 0.1},
      {mc::ops::Activation::silu, 64, 0.4, 1, 0.0, 0, 0},
  };
  std::uint64_t seed = 41;
  int ungated_misses = 0;
  for (const Point& pt : points) {
    const double d = pt.d, h = std::round(8 * d / 3);
    const Moments<double> in{pt.mean, pt.var, pt.r, 0};
    const GradMoments<double> g{1, pt.r_g};
    mc::SimulationSetup setup;
    setup.seq_len = 128;
    setup.trials = 48;
    setup.seed = ++seed;
    Moments<double> fwd, ungated;
    GradMoments<double> bwd;
    mc::SimulationResult sim;
    if (pt.act == mc::ops::Activation::gelu) {
      const auto block = glu_ffn_block<Gelu<double>>(d, h, 1 / d, 1 / d, 1 / h, pt.p);
      fwd = block.forward(in);
      bwd = block.backward(in, g);
      sim = mc::simulate(block, pt.act, in, g, setup);
      ungated = ffn_block<Gelu<double>>(d, h / d, 1 / d, 1 / h, pt.p).forward(in);
    } else if (pt.act == mc::ops::Activation::silu) {
      const auto block = glu_ffn_block<Silu<double>>(d, h, 1 / d, 1 / d, 1 / h, pt.p);
      fwd = block.forward(in);
      bwd = block.backward(in, g);
      sim = mc::simulate(block, pt.act, in, g, setup);
      ungated = ffn_block<Silu<double>>(d, h / d, 1 / d, 1 / h, pt.p).forward(in);
    } else {
      const auto block = glu_ffn_block<Relu<double>>(d, h, 2 / d, 1 / d, 1 / h, pt.p);
      fwd = block.forward(in);
      bwd = block.backward(in, g);
      sim = mc::simulate(block, pt.act, in, g, setup);
      ungated = ffn_block<Relu<double>>(d, h / d, 2 / d, 1 / h, pt.p).forward(in);
    }
    // Tolerance: 4 standard errors plus the neglected finite-width term.
    // Both branches see the same input norm |x|^2, whose relative variance
    // is (2 s^4 + 4 mu^2 s^2)/(d m2^2) <= 2/d; the factorized second moments
    // miss that covariance (docs/components/gated.md: measured -1 to -4 %
    // at d = 64). Allowed: 3/d relative on variances, 1.5/d on correlations.
    const auto& f = sim.forward;
    const auto& b = sim.backward;
    const auto rel = [](double pred, const mc::Estimate& m) { return 100 * (pred - m.value) / m.value; };
    std::printf("%s d %3d mean %+.1f r %.2f p %.1f: var %+.2f %% (se %.2f %%), corr_len %+.4f (se %.4f), "
                "grad var %+.2f %% (se %.2f %%), grad corr %+.4f (se %.4f)\n",
                pt.act == mc::ops::Activation::gelu ? "GeGLU" : pt.act == mc::ops::Activation::silu ? "SwiGLU" : "ReGLU",
                pt.d, pt.mean, pt.r, pt.p,
                rel(fwd.var, f.var), 100 * f.var.std_error / f.var.value, fwd.corr_len - f.corr_len.value,
                f.corr_len.std_error, rel(bwd.var, b.var), 100 * b.var.std_error / b.var.value,
                bwd.corr_len - b.corr_len.value, b.corr_len.std_error);
    INFO("d " << pt.d << " r " << pt.r << ": var " << fwd.var << " vs " << f.var.value << " +- " << f.var.std_error
              << ", corr " << fwd.corr_len << " vs " << f.corr_len.value << " +- " << f.corr_len.std_error << ", grad "
              << bwd.var << " vs " << b.var.value << " +- " << b.var.std_error << ", grad corr " << bwd.corr_len
              << " vs " << b.corr_len.value << " +- " << b.corr_len.std_error);
    CHECK(within(f.mean, fwd.mean, 4, 1e-12));
    CHECK(within(f.var, fwd.var, 4, 3 / d * f.var.value));
    CHECK(within(f.corr_len, fwd.corr_len, 4, 1.5 / d));
    CHECK(within(b.var, bwd.var, 4, 3 / d * b.var.value));
    CHECK(within(b.corr_len, bwd.corr_len, 4, 1.5 / d));
    // The ungated block of the same widths is a different function, and the
    // same comparison tells it apart at most points: the comparison can fail.
    if (outside(f.var, ungated.var, 4, 3 / d * f.var.value)) ++ungated_misses;
  }
  CHECK(ungated_misses >= 4);
}
