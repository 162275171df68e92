// Decoder stacks (with_architecture: llama, gpt2) against whole-model
// simulation: the sequence-averaged trace, each position's forward moments
// and gradient, and the simulation's per-position measurements.
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

namespace {

// A decoder model simulated with a unit, uncorrelated gradient at the top
// (as trace's default), with each row's position pairs if asked.
mc::ModelSimulation simulate(const ModelConfig& config, const ModelWeights& weights, std::size_t trials,
                             std::uint64_t seed, bool position_pairs = false) {
  mc::SimulationSetup setup;
  setup.trials = trials;
  setup.seed = seed;
  setup.position_pairs = position_pairs;
  return mc::simulate_model(config, weights, {1, 0}, setup);
}

// The q-quantile of v (the nearest rank below).
double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))];
}

// The encoder stacks' thresholds applied to the per-position gradient: the
// relative errors of its row averages (median <= 3 %, p90 <= 10 %) and of
// each position (median <= 5 %, p90 <= 13 %).
void check_gradient_thresholds(const std::vector<double>& row_errors, const std::vector<double>& position_errors) {
  CHECK(percentile(row_errors, 0.5) <= 0.03);
  CHECK(percentile(row_errors, 0.9) <= 0.10);
  CHECK(percentile(position_errors, 0.5) <= 0.05);
  CHECK(percentile(position_errors, 0.9) <= 0.13);
}

}  // namespace

TEST_CASE("decoders: per-layer variances against whole-model simulation", "[decoders][montecarlo]") {
  std::uint64_t seed = 211;
  for (const auto& k : mc::decoder_models()) {
    mc::SimulationSetup setup;
    setup.trials = 16;
    setup.seed = ++seed;
    const mc::ModelCaseResult r = mc::run_case(k, setup);
    const std::size_t N = k.config.layers;
    const bool xavier = k.scheme == Scheme::xavier;
    for (std::size_t n = 0; n <= N; ++n) {
      const auto& m = r.measured.forward[n].var;
      const auto& g = r.measured.backward[n].var;
      INFO(k.label << " row " << n << ": forward " << r.predicted.rows[n].forward.var << " vs " << m.value << " +- "
                   << m.std_error << ", gradient " << r.predicted.rows[n].backward.var << " vs " << g.value << " +- "
                   << g.std_error);
      // Forward: 4 standard errors plus 5 % (the sequence-averaged state;
      // measured 0-4.5 %, docs/decoders.md).
      CHECK(within(m, r.predicted.rows[n].forward.var, 4, 0.05 * m.value));
      // Gradient: the averaged state misses the spread of the per-position
      // variances that the norms divide by; the error compounds downwards,
      // most where the blocks carry a large share of the stream (DSLM: up to
      // 48 % low at the input of six layers, docs/decoders.md). Checked where
      // it holds: the top two rows of every model, and every row above the
      // input of the Xavier models.
      if (n + 2 > N || (xavier && n >= 1))
        CHECK(within(g, r.predicted.rows[n].backward.var, 4, 0.08 * g.value));
    }
  }
}

TEST_CASE("decoders: per-position forward variances against whole-model simulation", "[decoders][montecarlo]") {
  // trace_positions (models/positions.hpp) against the simulation's mean
  // square at positions 1, 2, 4, ..., L of every row and every sublayer
  // boundary, for both presets under both schemes.
  std::uint64_t seed = 401;
  std::size_t average_misses = 0, position_one = 0;
  std::vector<double> errors;
  for (const auto& k : mc::decoder_models()) {
    const auto [config, weights] = mc::case_model(k);
    const PositionTrace p = trace_positions(config, weights);
    const Trace t = trace(config, weights);
    const auto s = simulate(config, weights, 32, ++seed);
    const std::size_t L = config.seq_len;
    REQUIRE(p.rows.size() == config.layers + 1);
    REQUIRE(p.mid.size() == config.layers);
    const auto compare = [&](const Moments<double>& predicted, const Moments<double>& average, const mc::Estimate& m,
                             std::size_t i) {
      const double v = predicted.var + predicted.mean * predicted.mean;
      INFO(k.label << " position " << i << ": " << v << " vs " << m.value << " +- " << m.std_error);
      // 4 standard errors (2-4 % at 32 trials) plus the 5 % allowance of
      // the sequence averages (the test above).
      CHECK(within(m, v, 4, 0.05 * m.value));
      errors.push_back(std::abs(v / m.value - 1));
      if (i == 1) {
        ++position_one;
        const double a = average.var + average.mean * average.mean;
        if (outside(m, a, 4, 0.05 * m.value)) ++average_misses;
      }
    };
    for (std::size_t n = 0; n <= config.layers; ++n) {
      double mean_var = 0;
      for (std::size_t i = 0; i < L; ++i) mean_var += p.rows[n][i].var / static_cast<double>(L);
      INFO(k.label << " row " << n);
      // The positions average to the sequence's state (the residual sums are
      // linear in the variances, and the head's positions average to its
      // sequence average).
      CHECK(mean_var == Approx(t.rows[n].forward.var).epsilon(1e-3));
      for (std::size_t i = 1; i <= L; i *= 2) {
        compare(p.rows[n][i - 1], t.rows[n].forward, s.forward_by_position[n][i - 1], i);
        if (n < config.layers) compare(p.mid[n][i - 1], t.mid[n].forward, s.forward_mid_by_position[n][i - 1], i);
      }
    }
  }
  std::sort(errors.begin(), errors.end());
  std::printf("per-position forward variances: %zu checks, median %.1f %%, p90 %.1f %%, worst %.1f %%; the sequence "
              "average misses %zu of %zu first positions\n",
              errors.size(), 100 * errors[errors.size() / 2], 100 * errors[errors.size() * 9 / 10],
              100 * errors.back(), average_misses, position_one);
  // Position 1 carries its own value (1.26-1.6 times the average beyond the
  // input): the sequence average is no prediction there.
  CHECK(average_misses >= position_one / 2);
}

TEST_CASE("decoders with rotary embeddings against whole-model simulation", "[decoders][montecarlo][rotary]") {
  // The four decoder models with rotary embeddings (base 10000) on every
  // head, simulated with rotated queries and keys (256 trials): the
  // sequence-averaged trace row by row, trace_positions at positions 1, 2,
  // 4, ..., L and trace_position_gradients at every position, with the
  // allowances and thresholds of the tests without rotation.
  std::uint64_t seed = 901;
  std::vector<double> forward_errors, gradient_errors, position_errors, pair_errors, pair_rows, plain_rows;
  for (auto k : mc::decoder_models()) {
    k.config.rotary_base = 10000;
    const auto [config, weights] = mc::case_model(k);
    const Trace t = trace(config, weights);
    const PositionTrace p = trace_positions(config, weights);
    const PositionGradientTrace g = trace_position_gradients(config, weights);
    ModelConfig plain = config;
    plain.rotary_base = 0;
    const PositionGradientTrace g_plain = trace_position_gradients(plain, weights);
    const auto s = simulate(config, weights, 256, ++seed);
    const std::size_t N = config.layers, L = config.seq_len;
    const bool xavier = k.scheme == Scheme::xavier;
    for (std::size_t n = 0; n <= N; ++n) {
      const auto& m = s.forward[n].var;
      const auto& row = s.backward[n].var;
      INFO(k.label << " row " << n << ": forward " << t.rows[n].forward.var << " vs " << m.value << " +- "
                   << m.std_error << ", gradient " << t.rows[n].backward.var << " vs " << row.value << " +- "
                   << row.std_error);
      CHECK(within(m, t.rows[n].forward.var, 4, 0.05 * m.value));
      forward_errors.push_back(std::abs(t.rows[n].forward.var / m.value - 1));
      if (n + 2 > N || (xavier && n >= 1)) {
        CHECK(within(row, t.rows[n].backward.var, 4, 0.08 * row.value));
        gradient_errors.push_back(std::abs(t.rows[n].backward.var / row.value - 1));
      }
      for (std::size_t i = 1; i <= L; i *= 2) {
        const auto& mp = s.forward_by_position[n][i - 1];
        const double v = p.rows[n][i - 1].var + p.rows[n][i - 1].mean * p.rows[n][i - 1].mean;
        INFO("position " << i << ": " << v << " vs " << mp.value << " +- " << mp.std_error);
        CHECK(within(mp, v, 4, 0.05 * mp.value));
        position_errors.push_back(std::abs(v / mp.value - 1));
      }
      double predicted = 0, predicted_plain = 0, measured = 0;
      for (std::size_t i = 1; i <= L; ++i) {
        const mc::Estimate& mg = s.backward_by_position[n][i - 1];
        INFO("gradient at position " << i << ": " << g.rows[n][i - 1].var << " vs " << mg.value << " +- "
                                     << mg.std_error);
        CHECK(within(mg, g.rows[n][i - 1].var, 4, 0.22 * mg.value));
        pair_errors.push_back(std::abs(g.rows[n][i - 1].var / mg.value - 1));
        predicted += g.rows[n][i - 1].var;
        predicted_plain += g_plain.rows[n][i - 1].var;
        measured += mg.value;
      }
      CHECK(within(row, predicted / L, 4, 0.10 * row.value));
      pair_rows.push_back(std::abs(predicted / measured - 1));
      plain_rows.push_back(std::abs(predicted_plain / measured - 1));
    }
  }
  std::sort(forward_errors.begin(), forward_errors.end());
  std::sort(gradient_errors.begin(), gradient_errors.end());
  std::printf("rotary decoders: forward rows median %.1f %%, worst %.1f %%; averaged-trace gradient rows (checked) "
              "median %.1f %%, worst %.1f %%; each position's forward median %.1f %%, worst %.1f %%; each position's "
              "gradient median %.1f %%, p90 %.1f %%, worst %.1f %%, their row averages median %.1f %%, p90 %.1f %% "
              "(without the rotation: %.1f %%, %.1f %%)\n",
              100 * percentile(forward_errors, 0.5), 100 * forward_errors.back(),
              100 * percentile(gradient_errors, 0.5), 100 * gradient_errors.back(),
              100 * percentile(position_errors, 0.5), 100 * percentile(position_errors, 1),
              100 * percentile(pair_errors, 0.5), 100 * percentile(pair_errors, 0.9), 100 * percentile(pair_errors, 1),
              100 * percentile(pair_rows, 0.5), 100 * percentile(pair_rows, 0.9), 100 * percentile(plain_rows, 0.5),
              100 * percentile(plain_rows, 0.9));
  check_gradient_thresholds(pair_rows, pair_errors);  // as for the decoders without rotation
}

TEST_CASE("decoders: per-position gradient variances against whole-model simulation", "[decoders][montecarlo]") {
  // trace_position_gradients (models/positions.hpp) against the simulation's
  // mean square of the gradient at every position of every row, for both
  // presets under both schemes. The sequence-averaged trace misses the
  // decoders' input rows by 30-40 % (the test above, docs/decoders.md); the
  // per-position gradient carries the pairs of positions that the mask
  // couples, and its average over the positions is held to the encoder
  // stacks' thresholds (median <= 3 %, p90 <= 10 % over the rows).
  std::uint64_t seed = 503;
  std::vector<double> errors, row_errors;
  for (const auto& k : mc::decoder_models()) {
    const auto [config, weights] = mc::case_model(k);
    const PositionGradientTrace g = trace_position_gradients(config, weights);
    const Trace t = trace(config, weights);
    const auto s = simulate(config, weights, 256, ++seed, true);
    const std::size_t N = config.layers, L = config.seq_len;
    REQUIRE(g.rows.size() == N + 1);
    REQUIRE(g.mid.size() == N);
    REQUIRE(s.backward_pairs.size() == N + 1);
    std::printf("%-12s row average, %% error by row from the input:", k.label);
    for (std::size_t n = 0; n <= N; ++n) {
      double predicted = 0, measured = 0;
      for (std::size_t i = 1; i <= L; ++i) {
        const GradMoments<double>& p = g.rows[n][i - 1];
        const mc::Estimate& m = s.backward_by_position[n][i - 1];
        INFO(k.label << " row " << n << " position " << i << ": " << p.var << " vs " << m.value << " +- "
                     << m.std_error);
        // The simulated pairs' diagonal is the same mean square.
        CHECK(s.backward_pairs[n](i - 1, i - 1) == Approx(m.value).epsilon(1e-12));
        // 4 standard errors (1.5-4 % at 256 trials) plus the largest error
        // measured at 512 trials, 21 % (llama dslm, position 1 of the input
        // row; docs/decoders.md).
        CHECK(within(m, p.var, 4, 0.22 * m.value));
        CHECK(std::abs(p.corr_len) <= 1);
        errors.push_back(std::abs(p.var / m.value - 1));
        predicted += p.var;
        measured += m.value;
      }
      const double error = predicted / measured - 1;
      std::printf(" %+.1f", 100 * error);
      row_errors.push_back(std::abs(error));
      INFO(k.label << " row " << n << ": " << predicted / L << " (averaged trace " << t.rows[n].backward.var
                   << ") vs " << measured / L);
      // Each row within 4 standard errors of the row's mean square plus 10 %
      // (measured at most 10.0 % at 512 trials, llama dslm's input row),
      // where the averaged trace misses the dslm models' input rows by 33-41 %.
      const mc::Estimate& row = s.backward[n].var;
      CHECK(within(row, predicted / L, 4, 0.10 * row.value));
      if (n == 0 && k.scheme == Scheme::dslm) CHECK(std::abs(t.rows[0].backward.var * L / measured - 1) > 0.25);
    }
    std::printf("\n");
  }
  std::printf("per-position gradient variances: %zu positions, median %.1f %%, p90 %.1f %%, worst %.1f %%; "
              "their row averages: %zu rows, median %.1f %%, p90 %.1f %%\n",
              errors.size(), 100 * percentile(errors, 0.5), 100 * percentile(errors, 0.9),
              100 * percentile(errors, 1), row_errors.size(), 100 * percentile(row_errors, 0.5),
              100 * percentile(row_errors, 0.9));
  check_gradient_thresholds(row_errors, errors);
}

TEST_CASE("decoders: the simulation's per-position moments", "[decoders][montecarlo]") {
  // montecarlo::ModelSimulation::forward_by_position / backward_by_position:
  // their average over the positions is the row's mean square, and under the
  // causal mask the gradient piles up at the first positions, which every
  // later query reads (docs/decoders.md, "Positions"); without the mask the
  // positions read alike.
  const auto check = [](const mc::ModelCase& k, bool causal) {
    mc::SimulationSetup setup;
    setup.trials = 32;
    setup.seed = 307;
    const auto [config, weights] = mc::case_model(k);
    const auto s = mc::simulate_model(config, weights, {1, 0}, setup);
    const std::size_t L = config.seq_len;
    for (std::size_t n = 0; n < s.forward.size(); ++n) {
      double f = 0, b = 0;
      for (std::size_t i = 0; i < L; ++i) {
        f += s.forward_by_position[n][i].value / static_cast<double>(L);
        b += s.backward_by_position[n][i].value / static_cast<double>(L);
      }
      INFO(k.label << " row " << n);
      // var is about the sample mean of the entries, the mean squares about
      // 0: they differ by the squared mean over L d entries (mean 0 here).
      CHECK(f == Approx(s.forward[n].var.value).epsilon(0.01));
      CHECK(b == Approx(s.backward[n].var.value).epsilon(0.01));
    }
    const auto& first = s.backward_by_position[0].front();
    const auto& last = s.backward_by_position[0].back();
    INFO(k.label << ": input gradient at position 1 " << first.value << " +- " << first.std_error << ", at L "
                 << last.value << " +- " << last.std_error);
    if (causal)
      CHECK(first.value > 10 * last.value);  // measured 91 against 1.05 at 128 trials (llama dslm)
    else  // their difference within 4 standard errors of 0
      CHECK(within({first.value - last.value, std::hypot(first.std_error, last.std_error)}, 0, 4));
  };
  check(mc::decoder_models()[1], true);      // llama dslm
  check(mc::validation_models()[2], false);  // pre-ln dslm relu, no mask
}

TEST_CASE("decoders under their own schemes (gpt2, llama) against whole-model simulation", "[decoders][schemes][montecarlo]") {
  // Each scheme on the preset it names (native_architecture), with its own
  // embedding (three tables of variance R^2, dropout p); 16 trials.
  std::uint64_t seed = 601;
  for (const Scheme scheme : {Scheme::gpt2, Scheme::llama}) {
    const ModelConfig c = test::preset_of(native_architecture(scheme), 4, 128, 4, 64);
    mc::ModelCase k{to_string(scheme), c, scheme};
    k.embedding = true;
    mc::SimulationSetup setup;
    setup.trials = 16;
    setup.seed = ++seed;
    const mc::ModelCaseResult r = mc::run_case(k, setup);
    for (std::size_t n = 0; n <= c.layers; ++n) {
      const auto& m = r.measured.forward[n];
      const auto& g = r.measured.backward[n].var;
      std::printf("%s row %zu: var %.5g vs %.5g +- %.2g, corr %.4f vs %.4f +- %.4f, grad %.5g vs %.5g +- %.2g\n",
                  k.label, n, r.predicted.rows[n].forward.var, m.var.value, m.var.std_error,
                  r.predicted.rows[n].forward.corr_len, m.corr_len.value, m.corr_len.std_error,
                  r.predicted.rows[n].backward.var, g.value, g.std_error);
      INFO(k.label << " row " << n);
      CHECK(within(m.var, r.predicted.rows[n].forward.var, 4, 0.05 * m.var.value));
      CHECK(within(m.corr_len, r.predicted.rows[n].forward.corr_len, 4, 0.01));
      // The gradient: the decoders' allowance (8 %) above the input; at the
      // input the averaged state's known offset (docs/decoders.md; llama's
      // row 0 reads 25 % low, docs/schemes.md).
      if (n >= 1) CHECK(within(g, r.predicted.rows[n].backward.var, 4, 0.08 * g.value));
    }
  }
}

TEST_CASE("decoders: logits over d_k against whole-model simulation", "[decoders][montecarlo][logit]") {
  // gpt2 (tanh GeLU) with S = Q K^T/d_k in every head and Xavier's Wq times
  // 8 (d_k = 32: scores a quarter of Xavier's variance); the trace against
  // the simulated model with the same logits, with the thresholds of the
  // per-layer test above, and the row correlations within 4 standard errors
  // plus 0.02. The trace with logits over sqrt(d_k) must miss somewhere.
  ModelConfig c = test::preset_of("gpt2", 4, 128, 4, 64);
  c.logit_scale = LogitScale::inv_dk;
  InputSpec input;
  input.measured = Moments<double>{0, 1, 0.2, 0};
  ModelWeights w = initialize(c, Scheme::xavier, input);
  for (LayerWeights& l : w.layers) l.q *= 8;
  const Trace t = trace(c, w);
  ModelConfig plain = c;
  plain.logit_scale = LogitScale::inv_sqrt_dk;
  const Trace u = trace(plain, w);
  const mc::ModelSimulation m = simulate(c, w, 16, 4300);
  int misses = 0;
  for (std::size_t n = 0; n <= c.layers; ++n) {
    const auto& f = m.forward[n];
    const auto& g = m.backward[n].var;
    INFO("row " << n << ": var " << t.rows[n].forward.var << " vs " << f.var.value << " +- " << f.var.std_error
                << ", corr " << t.rows[n].forward.corr_len << " vs " << f.corr_len.value << " +- "
                << f.corr_len.std_error << ", gradient " << t.rows[n].backward.var << " vs " << g.value);
    CHECK(within(f.var, t.rows[n].forward.var, 4, 0.05 * f.var.value));
    CHECK(within(f.corr_len, t.rows[n].forward.corr_len, 4, 0.02));
    if (n >= 1) CHECK(within(g, t.rows[n].backward.var, 4, 0.08 * g.value));
    if (outside(f.corr_len, u.rows[n].forward.corr_len, 4, 0.02) ||
        outside(f.var, u.rows[n].forward.var, 4, 0.05 * f.var.value))
      ++misses;
  }
  CHECK(misses >= 1);
}
