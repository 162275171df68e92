// Decoder stacks (with_architecture: llama, gpt2): the presets, DeepScaleLM
// solved for them, the per-position traces' positions and domains. Their
// Monte Carlo comparisons are in test_decoder_models.cpp.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "catch.hpp"
#include "sigprop/montecarlo.hpp"

using namespace sigprop;
namespace mc = sigprop::montecarlo;


TEST_CASE("decoders: the presets set what they name", "[decoders]") {
  ModelConfig c;
  c.d = 768;
  const ModelConfig llama = with_architecture(c, "llama");
  CHECK(llama.norm == Norm::rmsnorm);
  CHECK(llama.causal);
  CHECK(llama.gated_ffn);
  CHECK(llama.activation == FfnActivation::silu);
  CHECK(llama.hidden_width() == 2048);  // 8 * 768 / 3 = 2048
  CHECK(llama.dropout == 0);
  CHECK(llama.final_layernorm);
  CHECK(llama.rotary_base == 10000);
  CHECK(architecture_name(llama) == "llama");
  const ModelConfig gpt2 = with_architecture(c, "gpt2");
  CHECK(gpt2.norm == Norm::layernorm);
  CHECK(gpt2.causal);
  CHECK_FALSE(gpt2.gated_ffn);
  CHECK(gpt2.activation == FfnActivation::gelu_tanh);
  CHECK(gpt2.rotary_base == 0);
  CHECK(gpt2.hidden_width() == 4 * 768);
  // The embedding tables follow the models: learned positions in gpt2, rotary ones in llama.
  const InputSpec gpt2_input = with_architecture(InputSpec{}, "gpt2"), llama_input = with_architecture(InputSpec{}, "llama");
  CHECK((gpt2_input.token && gpt2_input.position && !gpt2_input.segment));
  CHECK((llama_input.token && !llama_input.position && !llama_input.segment));
  CHECK(with_architecture(InputSpec{}, "pre-ln").segment);
  CHECK(architecture_name(gpt2) == "gpt2");
  CHECK_FALSE(is_encoder(gpt2));
  CHECK(is_encoder(with_architecture(c, "post-ln")));
  CHECK_THROWS_WITH(with_architecture(c, "bert"), Catch::Contains("arch = 'bert'") && Catch::Contains("llama"));
  // Measures derived for encoders refuse decoders by name.
  ModelConfig small = llama;
  small.layers = 2;
  small.d = 64;
  small.heads = 2;
  small.seq_len = 16;
  small.ffn_hidden = 176;
  const ModelWeights w = initialize(small, Scheme::xavier);
  CHECK_THROWS_WITH(weight_grad_norms(small, w, trace(small, w)), Catch::Contains("llama"));
}

TEST_CASE("decoders: DeepScaleLM gives every block unit output variance", "[decoders]") {
  for (const char* arch : {"llama", "gpt2"}) {
    ModelConfig c;
    c.layers = 6;
    c.d = 128;
    c.heads = 4;
    c.seq_len = 64;
    c = with_architecture(c, arch);
    InputSpec input;
    input.measured = Moments<double>{0, 1, 0.2, 0};
    const ModelWeights w = initialize(c, Scheme::dslm, input);
    const Trace t = trace(c, w);
    for (std::size_t n = 1; n <= c.layers; ++n) {
      INFO(arch << " layer " << n);
      CHECK(t.mid[n - 1].branch_var == Approx(1).epsilon(1e-9));
      CHECK(t.rows[n].branch_var == Approx(1).epsilon(1e-9));
      // lambda^2 + beta^2 = 1 at the averaged state; the row's variance is
      // the pairs of positions' (docs/decoders.md), where each position's
      // value average has its own variance: within 2 % of it.
      CHECK(t.rows[n].forward.var == Approx(1).epsilon(0.02));
    }
  }
}

TEST_CASE("decoders: trace_positions at chosen positions", "[decoders]") {
  // A position's stream does not depend on the others': the chosen
  // positions equal those columns of the whole table, exactly.
  for (const char* arch : {"llama", "gpt2"}) {
    ModelConfig c = with_architecture(ModelConfig{}, arch);
    c.layers = 3;
    c.seq_len = 50;
    const ModelWeights w = initialize(c, Scheme::dslm);
    const PositionTrace all = trace_positions(c, w);
    const PositionTrace some = trace_positions(c, w, {1, 7, 50});
    REQUIRE(all.positions.size() == 50);
    CHECK(all.positions.front() == 1);
    CHECK(all.positions.back() == 50);
    REQUIRE(some.positions == std::vector<std::size_t>{1, 7, 50});
    for (std::size_t n = 0; n <= c.layers; ++n)
      for (std::size_t j = 0; j < 3; ++j) {
        INFO(arch << " row " << n << " position " << some.positions[j]);
        CHECK(some.rows[n][j].var == all.rows[n][some.positions[j] - 1].var);
        CHECK(some.rows[n][j].corr_len == all.rows[n][some.positions[j] - 1].corr_len);
        if (n < c.layers) CHECK(some.mid[n][j].var == all.mid[n][some.positions[j] - 1].var);
      }
    CHECK_THROWS_WITH(trace_positions(c, w, {0}),
                      Catch::Contains("sigprop::trace_positions: positions[0] = 0 is outside the valid range [1, seq_len = 50]"));
    CHECK_THROWS_WITH(trace_positions(c, w, {2, 51}), Catch::Contains("positions[1] = 51 is outside the valid range [3, seq_len = 50]"));
    CHECK_THROWS_WITH(trace_positions(c, w, {4, 4}), Catch::Contains("positions[1] = 4 is outside the valid range [5, seq_len = 50]"));
    CHECK_THROWS_AS(trace_positions(c, w, {9, 2}), domain_error);
    ModelConfig encoder = c;
    encoder.causal = false;
    CHECK_THROWS_WITH(trace_positions(encoder, w),
                      Catch::Contains("sigprop::trace_positions: causal = false is outside the valid range {true}"));
  }
}

TEST_CASE("decoders: trace_position_gradients' domain", "[decoders]") {
  ModelConfig c = with_architecture(ModelConfig{}, "gpt2");
  c.layers = 2;
  c.seq_len = 20;
  const ModelWeights w = initialize(c, Scheme::xavier);
  const PositionGradientTrace all = trace_position_gradients(c, w);
  const PositionGradientTrace some = trace_position_gradients(c, w, {1, 20});
  REQUIRE(some.positions == std::vector<std::size_t>{1, 20});
  for (std::size_t n = 0; n <= c.layers; ++n) {
    CHECK(some.rows[n][0].var == all.rows[n][0].var);
    CHECK(some.rows[n][1].var == all.rows[n][19].var);
    CHECK(some.rows[n][1].corr_len == all.rows[n][19].corr_len);
  }
  // The gradient piles up at the first positions (docs/decoders.md).
  CHECK(all.rows[0][0].var > 2 * all.rows[0][19].var);
  CHECK_THROWS_WITH(trace_position_gradients(c, w, {0}),
                    Catch::Contains("sigprop::trace_position_gradients: positions[0] = 0 is outside the valid range [1, seq_len = 20]"));
  CHECK_THROWS_WITH(trace_position_gradients(c, w, {}, {-1, 0}),
                    Catch::Contains("sigprop::trace: grad_var = -1 is outside the valid range [0, inf)"));
  // Blocks that send no gradient, sublayers without a skip: finite, not 0/0.
  for (int variant = 0; variant < 3; ++variant) {
    ModelWeights z = w;
    for (LayerWeights& l : z.layers) {
      if (variant == 0) l.v = 0;
      if (variant == 1) l.o = 0;
      if (variant == 2) l.q = l.k = l.attn_skip = l.ffn_skip = 0;
    }
    const PositionGradientTrace zg = trace_position_gradients(c, z);
    for (const auto& row : zg.rows)
      for (const GradMoments<double>& p : row) {
        INFO("variant " << variant);
        CHECK(std::isfinite(p.var));
        CHECK(p.var >= 0);
      }
  }
  // A uniform correlation below -1/(L - 1) is no covariance of L positions
  // (found by fuzz_api: negative variances from grad_top.corr_len = -0.94).
  CHECK_NOTHROW(trace_position_gradients(c, w, {}, {1, -1.0 / 19}));
  CHECK_THROWS_WITH(trace_position_gradients(c, w, {}, {1, -0.06}),
                    Catch::Contains("sigprop::trace_position_gradients: grad_top.corr_len = -0.06 is outside the valid range [-0.0526"));
  ModelConfig post = c;
  post.arch = Arch::post_ln;
  CHECK_THROWS_WITH(trace_position_gradients(post, initialize(post, Scheme::xavier)),
                    Catch::Contains("sigprop::trace_position_gradients: arch = post-ln is outside the valid range {pre-ln}"));
  ModelConfig long_sequence = c;
  long_sequence.seq_len = max_pair_positions + 1;
  CHECK_THROWS_WITH(trace_position_gradients(long_sequence, initialize(long_sequence, Scheme::xavier)),
                    Catch::Contains("sigprop::trace_position_gradients: seq_len = 4097 is outside the valid range [2, 4096]"));
  ModelConfig encoder = c;
  encoder.causal = false;
  CHECK_THROWS_WITH(trace_position_gradients(encoder, w),
                    Catch::Contains("sigprop::trace_position_gradients: causal = false is outside the valid range {true}"));
}

TEST_CASE("decoders: the table's gradient rows are the positions' average", "[decoders]") {
  // with_position_gradients (what `sigprop table` and sweep report for causal
  // models): every row's gradient variance is the mean of the positions'
  // variances, its correlation the mean covariance of two positions over it;
  // they differ from the sequence-averaged state where the mask piles the
  // gradient up at the first positions (docs/decoders.md).
  ModelConfig c = with_architecture(ModelConfig{}, "gpt2");
  c.layers = 3;
  c.d = 128;
  c.heads = 2;
  c.seq_len = 24;
  const ModelWeights w = initialize(c, Scheme::dslm);
  REQUIRE(has_position_gradients(c));
  const Trace averaged = trace(c, w);
  const PositionGradientTrace all = trace_position_gradients(c, w);
  const PositionGradientTrace one = trace_position_gradients(c, w, {5});
  const Trace t = with_position_gradients(averaged, one);
  const double L = double(c.seq_len);
  for (std::size_t n = 0; n <= c.layers; ++n) {
    double var = 0;
    for (const GradMoments<double>& p : all.rows[n]) var += p.var / L;
    INFO("row " << n);
    CHECK(t.rows[n].backward.var == Approx(var).epsilon(1e-12));
    CHECK(t.rows[n].forward.var == averaged.rows[n].forward.var);
    CHECK(one.average[n].corr_len == all.average[n].corr_len);
    CHECK(std::abs(t.rows[n].backward.corr_len) <= 1);
    if (n < c.layers) {
      double mid = 0;
      for (const GradMoments<double>& p : all.mid[n]) mid += p.var / L;
      CHECK(t.mid[n].backward.var == Approx(mid).epsilon(1e-12));
    }
  }
  // The top row is the model's output gradient (uncorrelated) through the
  // final norm: uncorrelated, exactly.
  CHECK(t.rows[c.layers].backward.corr_len == 0);
  // With an upstream correlation the pairs' mean covariance is carried: at
  // the top, through the final norm's per-position gains sqrt(r_i r_m), the
  // row's correlation is 0.3 (sum_{i != m} sqrt(r_i r_m)) / ((L - 1) sum r_i).
  const PositionGradientTrace correlated = trace_position_gradients(c, w, {}, {1, 0.3});
  double roots = 0, gains = 0;
  for (const GradMoments<double>& p : correlated.rows[c.layers]) {
    roots += std::sqrt(p.var);
    gains += p.var;
  }
  CHECK(correlated.average[c.layers].corr_len == Approx(0.3 * (roots * roots - gains) / ((L - 1) * gains)).epsilon(1e-10));
  // At the input the average is above the sequence-averaged state's.
  CHECK(t.rows[0].backward.var > 1.2 * averaged.rows[0].backward.var);
  ModelConfig encoder = c;
  encoder.causal = false;
  CHECK_FALSE(has_position_gradients(encoder));
  ModelConfig long_decoder = c;
  long_decoder.seq_len = max_pair_positions + 1;
  CHECK_FALSE(has_position_gradients(long_decoder));
}
