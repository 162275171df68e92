// Where dropout sits (ModelConfig::attention_dropout, ffn_dropout): the
// FFN's hidden dropout (PyTorch's nn.TransformerEncoderLayer) and the
// attention probabilities' own probability (GPT-2's attn_pdrop), in the
// plain and the gated FFN, against whole-model simulation; and that the
// simulation tells the placements apart (docs/models.md, "Dropout").
#include <cstdio>
#include <vector>

#include "support.hpp"
#include "sigprop/montecarlo.hpp"

using namespace sigprop;
using sigprop::test::outside;
using sigprop::test::within;
namespace mc = sigprop::montecarlo;

namespace {

ModelConfig encoder(Arch arch) { return sigprop::test::model_of(arch, 4, 128, 4, 64); }

struct Run {
  Trace predicted, other;  // `other`: the placement the model does not have
  mc::ModelSimulation measured;
};

// The model `c` (Xavier, measured input with length correlation 0.2)
// traced, traced as `other` (same weights), and simulated.
Run run(const ModelConfig& c, const ModelConfig& other, std::size_t trials, std::uint64_t seed) {
  InputSpec input;
  input.measured = Moments<double>{0, 1, 0.2, 0};
  const ModelWeights w = initialize(c, Scheme::xavier, input);
  mc::SimulationSetup setup;
  setup.trials = trials;
  setup.seed = seed;
  return {trace(c, w), trace(other, w), mc::simulate_model(c, w, {1, 0}, setup)};
}

// Every row n >= 1: the forward variance and length correlation and the
// gradient variance within 4 standard errors plus the whole-model
// allowances (3 % of a variance, docs/validation.md; 0.01 of a
// correlation); and the number of rows where `other` is outside the same
// band for the forward correlation and for the gradient variance.
struct Misses {
  int corr = 0, grad = 0;
};

Misses check_rows(const char* label, const Run& r) {
  Misses m;
  const std::size_t rows = r.predicted.rows.size();
  for (std::size_t n = 1; n < rows; ++n) {
    const auto& f = r.measured.forward[n];
    const auto& g = r.measured.backward[n];
    const TraceRow& p = r.predicted.rows[n];
    const TraceRow& o = r.other.rows[n];
    std::printf("%s row %zu: corr %.4f (other %.4f) vs %.4f +- %.4f; grad %.4g (other %.4g) vs %.4g +- %.2g\n", label,
                n, p.forward.corr_len, o.forward.corr_len, f.corr_len.value, f.corr_len.std_error, p.backward.var,
                o.backward.var, g.var.value, g.var.std_error);
    INFO(label << " row " << n);
    CHECK(within(f.var, p.forward.var, 4, 0.03 * f.var.value));
    CHECK(within(f.corr_len, p.forward.corr_len, 4, 0.01));
    CHECK(within(g.var, p.backward.var, 4, 0.03 * g.var.value));
    m.corr += outside(f.corr_len, o.forward.corr_len, 4, 0.01);
    m.grad += outside(g.var, o.backward.var, 4, 0.03 * g.var.value);
  }
  return m;
}

}  // namespace

TEST_CASE("dropout placement: FFN hidden dropout against whole-model simulation", "[dropout][models][montecarlo]") {
  // PyTorch's stock encoder layer: Post-LN, dropout p after the FFN
  // activation as well. Traced without it, the correlation is 0.01-0.04
  // high (10-17 standard errors in rows 3-4 at 128 trials) and the
  // gradient 4-7 % low (docs/models.md, "Dropout").
  ModelConfig c = encoder(Arch::post_ln);
  c.ffn_dropout = 0.1;
  ModelConfig without = c;
  without.ffn_dropout = 0;
  const Misses m = check_rows("post-ln ffn dropout", run(c, without, 128, 11));
  CHECK(m.corr >= 2);
}

TEST_CASE("dropout placement: attention dropout apart from the residual dropout", "[dropout][models][montecarlo]") {
  // p = 0.1 on the block outputs, 0.3 on the attention probabilities; the
  // other: 0.1 everywhere (its gradient is 11 % low in row 1, its
  // correlation 0.02 high in rows 2-4).
  ModelConfig c = encoder(Arch::pre_ln);
  c.attention_dropout = 0.3;
  ModelConfig same = c;
  same.attention_dropout.reset();
  const Misses m = check_rows("pre-ln attention dropout 0.3", run(c, same, 128, 12));
  CHECK(m.corr + m.grad >= 3);
}

TEST_CASE("dropout placement: gated FFN (Llama) with hidden and output dropout", "[dropout][decoders][montecarlo]") {
  // Dropout on the gated product act(x W1) * (x V); without it the
  // correlation is 0.02-0.03 high in rows 2-4 (256 trials: the band of
  // 4 standard errors plus 0.01 is 0.023 there).
  ModelConfig c = encoder(Arch::pre_ln);
  c = with_architecture(c, "llama");
  c.dropout = 0.1;
  c.ffn_dropout = 0.3;
  ModelConfig without = c;
  without.ffn_dropout = 0;
  const Misses m = check_rows("llama ffn dropout 0.3", run(c, without, 256, 13));
  CHECK(m.corr >= 2);
}

TEST_CASE("dropout placement: the defaults keep one p everywhere, and bad values are named", "[dropout][errors]") {
  ModelConfig c = encoder(Arch::pre_ln);
  CHECK(c.attention_p() == 0.1);
  CHECK(c.ffn_dropout == 0);
  c.dropout = 0.25;
  CHECK(c.attention_p() == 0.25);
  c.attention_dropout = 0;
  CHECK(c.attention_p() == 0);
  c.attention_dropout = 1;
  CHECK_THROWS_WITH(c.validate("f"), Catch::Contains("attention_dropout = 1"));
  c.attention_dropout.reset();
  c.ffn_dropout = -0.1;
  CHECK_THROWS_WITH(c.validate("f"), Catch::Contains("ffn_dropout = -0.1"));
}
