// A 12-layer decoder against the whole-model simulation: the rows `sigprop
// table` prints for it (the forward trace, the gradient averaged over the
// positions) and each position's variances (docs/decoders.md, "Decoders at
// depth"). The 24- and 48-layer measurements are examples/decoder_depth.cpp's.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "support.hpp"
#include "sigprop/montecarlo.hpp"

using namespace sigprop;
using sigprop::test::outside;
using sigprop::test::within;
namespace mc = sigprop::montecarlo;

TEST_CASE("decoders at depth: a 12-layer gpt2 against whole-model simulation", "[decoders][montecarlo][depth]") {
  // gpt2 (Pre-LN, causal, GeLU, final LayerNorm), Xavier, dropout 0.1,
  // d = 128, H = 2, L = 64, input variance 1 and length correlation 0.2:
  // the model of the report that the table's input row was 37 % low on.
  const ModelConfig c = test::preset_of("gpt2", 12, 128, 2, 64);
  InputSpec input;
  input.measured = Moments<double>{0, 1, 0.2, 0};
  const ModelWeights w = initialize(c, Scheme::xavier, input);
  mc::SimulationSetup setup;
  setup.trials = 48;
  setup.seed = 1212;
  setup.position_pairs = true;
  const mc::ModelSimulation s = mc::simulate_model(c, w, {1, 0}, setup);
  const Trace averaged = trace(c, w);
  const PositionGradientTrace g = trace_position_gradients(c, w);
  const PositionTrace p = trace_positions(c, w);
  const Trace t = with_position_gradients(averaged, g);
  std::printf("12-layer gpt2, predicted - measured by row (forward var %%, corr_len, gradient var %%, grad corr; "
              "gradient var %% of the sequence-averaged state):\n");
  double corr_error = 0;  // the rows' mean signed error of the length correlation
  for (std::size_t n = 0; n <= c.layers; ++n) {
    const mc::Estimate &f = s.forward[n].var, &r = s.forward[n].corr_len, &b = s.backward[n].var,
                       &bc = s.backward[n].corr_len;
    const TraceRow& row = t.rows[n];
    std::printf("  %2zu  %+5.1f  %+.3f  %+5.1f  %+.3f  %+5.1f\n", n, 100 * (row.forward.var / f.value - 1),
                row.forward.corr_len - r.value, 100 * (row.backward.var / b.value - 1), row.backward.corr_len - bc.value,
                100 * (averaged.rows[n].backward.var / b.value - 1));
    INFO("row " << n << ": forward " << row.forward.var << " vs " << f.value << " +- " << f.std_error << ", corr_len "
                << row.forward.corr_len << " vs " << r.value << " +- " << r.std_error << ", gradient "
                << row.backward.var << " (sequence state " << averaged.rows[n].backward.var << ") vs " << b.value
                << " +- " << b.std_error << ", grad corr " << row.backward.corr_len << " vs " << bc.value << " +- "
                << bc.std_error);
    // Forward variance: 4 standard errors plus 2 % (measured within 1.1 %
    // at 128 trials, docs/decoders.md, "Decoders at depth"; here up to +3.0 %).
    CHECK(within(f, row.forward.var, 4, 0.02 * f.value));
    // Length correlation: 3 standard errors plus the target 0.01 (measured
    // within 0.005 at 128 trials, +0.016 at most here; with one correlation
    // for every pair of positions the trace was +0.030 ... +0.040 high from
    // row 6 on, docs/decoders.md, "Decoders at depth").
    CHECK(within(r, row.forward.corr_len, 3, 0.01));
    corr_error += (row.forward.corr_len - r.value) / double(c.layers + 1);
    // Gradient variance (the positions' average): 4 standard errors plus
    // 6 % (measured -1.5 to -5.3 % at 128 trials, -4 to -11 % here).
    CHECK(within(b, row.backward.var, 4, 0.06 * b.value));
    // Its correlation: 4 standard errors plus 0.01 (measured within 0.004).
    CHECK(within(bc, row.backward.corr_len, 4, 0.01));
  }
  // On average over the rows within 0.015 (here +0.008; the rows share
  // their trials, so the mean's noise is about one row's standard error,
  // 0.004-0.007; one correlation for every pair gave about +0.03).
  std::printf("length correlation: mean signed error over the rows %+.4f\n", corr_error);
  CHECK(std::abs(corr_error) <= 0.015);
  // The sequence-averaged state, which the table printed before, misses the
  // input row by more than 2 standard errors plus 25 % (measured -40 %).
  CHECK(outside(s.backward[0].var, averaged.rows[0].backward.var, 2, 0.25 * s.backward[0].var.value));
  // Each position's forward and gradient variance: 4 standard errors plus
  // 6 % and 25 % (the gradient's first positions are heavy-tailed), and the
  // relative errors over all 13 x 64 positions (here forward p50 2.4 %, p90
  // 4.3 %, gradient 5.1 % and 9.7 %; at 48 trials a position's standard
  // error is 2-3 % forward and 5-10 % for the gradient, so the gradient's
  // p50 cannot go far below 4 % on noise alone): forward at most 3.5 / 6 %,
  // gradient 7 / 13 %. Each position's mean correlation with the others
  // (from the pairs of positions): p90 within 0.02 (here 0.015, 0.011 at 64
  // trials in examples/decoder_depth; the closed forms' per-position
  // correlation was 0.046 off there).
  std::vector<double> forward_errors, gradient_errors, corr_errors;
  for (std::size_t n = 0; n <= c.layers; ++n) {
    const Eigen::MatrixXd& P = s.forward_pairs[n];
    const Eigen::VectorXd inv = P.diagonal().cwiseSqrt().cwiseInverse();
    for (std::size_t i = 0; i < c.seq_len; ++i) {
      const mc::Estimate &f = s.forward_by_position[n][i], &b = s.backward_by_position[n][i];
      INFO("row " << n << " position " << i + 1 << ": forward " << p.rows[n][i].var << " vs " << f.value << " +- "
                  << f.std_error << ", gradient " << g.rows[n][i].var << " vs " << b.value << " +- " << b.std_error);
      CHECK(within(f, p.rows[n][i].var, 4, 0.06 * f.value));
      CHECK(within(b, g.rows[n][i].var, 4, 0.25 * b.value));
      forward_errors.push_back(std::abs(p.rows[n][i].var / f.value - 1));
      gradient_errors.push_back(std::abs(g.rows[n][i].var / b.value - 1));
      const auto k = static_cast<Eigen::Index>(i);
      const double measured = inv(k) * (P.col(k).dot(inv) - P(k, k) * inv(k)) / double(c.seq_len - 1);
      corr_errors.push_back(std::abs(p.rows[n][i].corr_len - measured));
    }
  }
  const auto fp = mc::percentiles_of(forward_errors), gp = mc::percentiles_of(gradient_errors);
  std::printf("per position: forward p50 %.1f %%, p90 %.1f %%; gradient p50 %.1f %%, p90 %.1f %%\n", 100 * fp.p50,
              100 * fp.p90, 100 * gp.p50, 100 * gp.p90);
  const double corr_p90 = mc::percentiles_of(corr_errors).p90;
  std::printf("per position: mean correlation with the others, p90 of the errors %.4f\n", corr_p90);
  CHECK(fp.p50 <= 0.035);
  CHECK(fp.p90 <= 0.06);
  CHECK(gp.p50 <= 0.07);
  CHECK(gp.p90 <= 0.13);
  CHECK(corr_p90 <= 0.02);
}

TEST_CASE("decoders at depth: a llama under its own initialization, from its token table", "[decoders][montecarlo][depth]") {
  // Every weight N(0, 0.02^2) (Hugging Face's), the input a token table of
  // 1000 rows (variance 4e-4): the branches overtake the stream within a few
  // layers, and each position's value average has its own variance. With
  // the closed forms' variances the length correlation was +0.04-0.07 high
  // at rows 2-6 and the variance 4-9 % low (docs/decoders.md, "Decoders at
  // depth").
  const ModelConfig c = test::preset_of("llama", 6, 128, 8, 32);  // FFN width 344, dropout 0
  InputSpec input = with_architecture(InputSpec{}, "llama");
  input.vocab = 1000;
  const ModelWeights w = initialize(c, Scheme::llama, input);
  mc::SimulationSetup setup;
  setup.trials = 128;
  setup.seed = 7;
  const mc::ModelSimulation s = mc::simulate_model(c, w, {1, 0}, setup);
  const Trace t = with_position_gradients(trace(c, w), trace_position_gradients(c, w));
  for (std::size_t n = 0; n <= c.layers; ++n) {
    const TraceRow& row = t.rows[n];
    std::printf("llama scheme row %zu: var %.4g vs %.4g, corr %.4f vs %.4f +- %.4f, grad %.4g vs %.4g +- %.2g\n", n,
                row.forward.var, s.forward[n].var.value, row.forward.corr_len, s.forward[n].corr_len.value,
                s.forward[n].corr_len.std_error, row.backward.var, s.backward[n].var.value,
                s.backward[n].var.std_error);
    INFO("row " << n);
    // 4 standard errors plus the allowances (measured within 1 %
    // and 0.004; the gradient within 6 %, its standard error 2-6 %).
    CHECK(within(s.forward[n].var, row.forward.var, 4, 0.02 * s.forward[n].var.value));
    CHECK(within(s.forward[n].corr_len, row.forward.corr_len, 4, 0.01));
    CHECK(within(s.backward[n].var, row.backward.var, 4, 0.06 * s.backward[n].var.value));
  }
}
