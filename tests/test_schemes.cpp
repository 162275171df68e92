// Initialization schemes and the DeepScaleLM solver (models/schemes.hpp).
#include <cmath>

#include "catch.hpp"
#include "sigprop/components/layernorm.hpp"
#include "sigprop/models/measures.hpp"
#include "sigprop/models/schemes.hpp"
#include "support.hpp"

using namespace sigprop;

namespace {
ModelConfig scheme_model(Arch arch, FfnActivation act = FfnActivation::relu) {
  return sigprop::test::model_of(arch, 6, 256, 4, 128, 0.1, act);
}
}  // namespace

TEST_CASE("schemes: the per-entry variances of each preset", "[schemes]") {
  const ModelConfig c = scheme_model(Arch::pre_ln);
  const double d = 256, dk = 64, m = 4, p = 0.1;
  const auto x = initialize(c, Scheme::xavier);
  CHECK(x.layers[0].q == Approx(2 / (d + dk)).epsilon(1e-15));
  CHECK(x.layers[0].v == Approx(2 / (d + dk)).epsilon(1e-15));
  CHECK(x.layers[0].o == Approx(1 / d).epsilon(1e-15));
  CHECK(x.layers[0].ffn1 == Approx(2 / (d + m * d)).epsilon(1e-15));
  CHECK(x.layers[0].attn_skip == 1);
  CHECK(x.layers[0].attn_branch == 1);
  CHECK(x.embedding_var == Approx((1 - p) / 3).epsilon(1e-15));
  CHECK(x.input.var == Approx(1).epsilon(1e-14));  // (1-p)/K per table, then dropout
  const auto b = initialize(c, Scheme::bert);
  CHECK(b.layers[3].ffn2 == Approx(4e-4).epsilon(1e-15));
  CHECK(b.embedding_var == Approx(4e-4).epsilon(1e-15));
  const auto s = initialize(c, Scheme::dslm_simple);
  CHECK(s.layers[0].q == Approx(1 / d).epsilon(1e-15));
  CHECK(s.layers[0].v == Approx(std::sqrt((1 - p) / 2) / d).epsilon(1e-15));
  CHECK(s.layers[0].attn_branch == Approx(std::sqrt(2.0 / 6)).epsilon(1e-15));  // beta^2 = 2/N
  CHECK(s.layers[0].ffn_skip == Approx(std::sqrt(1 - 2.0 / 6)).epsilon(1e-15));
  ResidualScaling k3;
  k3.k = 2;
  k3.alpha = 0.5;
  const auto s3 = initialize(c, Scheme::dslm_simple, {}, k3);
  CHECK(s3.layers[0].ffn_branch == Approx(std::sqrt(2 / std::sqrt(6.0))).epsilon(1e-15));
}

TEST_CASE("schemes: full DSLM gives unit block outputs, also for GeLU (root finding)", "[schemes]") {
  for (Arch arch : {Arch::pre_ln, Arch::post_ln}) {
    for (FfnActivation act : {FfnActivation::relu, FfnActivation::gelu}) {
      const ModelConfig c = scheme_model(arch, act);
      const auto w = initialize(c, Scheme::dslm);
      const auto t = trace(c, w);
      for (const auto& r : t.rows) CHECK(r.forward.var == Approx(1).epsilon(1e-10));
      for (const auto& r : t.mid) CHECK(r.forward.var == Approx(1).epsilon(1e-10));
      // V = O and W1 = W2 differ per layer (the correlation entering each layer changes).
      CHECK(w.layers[0].v != Approx(w.layers[5].v).epsilon(1e-3));
      CHECK(w.layers[0].v == w.layers[0].o);
      CHECK(w.layers[0].ffn1 == w.layers[0].ffn2);
    }
  }
  // ReLU, m = 4, Pre-LN: the FFN block needs 2 d^2 w^2/(1-p) = 1, the paper's (1/d) sqrt((1-p)/2).
  const auto w = initialize(scheme_model(Arch::pre_ln), Scheme::dslm);
  CHECK(w.layers[2].ffn1 == Approx(std::sqrt(0.9 / 2) / 256).epsilon(1e-8));
}

TEST_CASE("schemes: overrides, measured input and errors", "[schemes][errors]") {
  const ModelConfig c = scheme_model(Arch::pre_ln);
  WeightOverrides o;
  o.q = 0.5;
  o.ffn2 = 0.25;
  o.embedding = 0.1;
  const auto w = initialize(c, Scheme::xavier, {}, {}, o);
  for (const auto& l : w.layers) {
    CHECK(l.q == 0.5);
    CHECK(l.ffn2 == 0.25);
  }
  CHECK(w.embedding_var == 0.1);
  InputSpec measured;
  measured.measured = Moments<double>{0, 2, 0.4, 0};
  const auto m = initialize(c, Scheme::xavier, measured);
  CHECK(m.input.var == 2);
  CHECK(m.input.corr_len == 0.4);
  ResidualScaling bad;
  bad.k = 12;  // beta^2 = 12/6 > 1
  CHECK_THROWS_WITH(initialize(c, Scheme::dslm, {}, bad), Catch::Contains("beta^2") && Catch::Contains("(0, 1]"));
  ModelConfig odd = c;
  odd.heads = 5;
  CHECK_THROWS_WITH(initialize(odd, Scheme::xavier), Catch::Contains("heads = 5"));
  ModelConfig drop = c;
  drop.dropout = 1;
  CHECK_THROWS_WITH(initialize(drop, Scheme::xavier), Catch::Contains("dropout = 1"));
}

TEST_CASE("schemes: names, native architectures and parsing", "[schemes]") {
  for (const SchemeInfo& i : schemes()) {
    CHECK(scheme_from_string(i.name) == i.scheme);
    CHECK(std::string(to_string(i.scheme)) == i.name);
  }
  CHECK(schemes().size() == 19);
  CHECK(native_arch(Scheme::torch_default) == Arch::post_ln);
  CHECK(native_arch(Scheme::admin) == Arch::post_ln);
  CHECK(native_architecture(Scheme::admin) == "post-ln");
  CHECK(native_architecture(Scheme::gpt2) == "gpt2");
  CHECK(native_architecture(Scheme::llama) == "llama");
  CHECK(native_arch(Scheme::t_fixup) == Arch::no_ln);
  CHECK(native_arch(Scheme::embed_ln) == Arch::pre_ln);
  CHECK_THROWS_WITH(scheme_from_string("fixup"), Catch::Contains("scheme = 'fixup'") && Catch::Contains("t-fixup"));
  CHECK(arch_from_string("no-ln") == Arch::no_ln);
  CHECK_THROWS_WITH(arch_from_string("mid-ln"), Catch::Contains("arch = 'mid-ln'"));
}

TEST_CASE("schemes: the papers' per-entry variances and residual scales", "[schemes]") {
  ModelConfig c = scheme_model(Arch::post_ln);  // N = 6, d = 256, H = 4, m = 4, p = 0.1
  const double N = 6, d = 256, dk = 64, m = 4;
  const double xavier_ffn = 2 / (d + m * d);
  // DeepNet (encoder): alpha = (2N)^(1/4), b = (8N)^(-1/4) on V, O, W1, W2.
  const auto deep = initialize(c, Scheme::deepnet);
  CHECK(deep.layers[2].attn_skip == Approx(std::pow(2 * N, 0.25)).epsilon(1e-15));
  CHECK(deep.layers[2].ffn_branch == 1);
  CHECK(deep.layers[0].q == Approx(1 / d).epsilon(1e-15));
  CHECK(deep.layers[0].v == Approx(1 / (d * std::sqrt(8 * N))).epsilon(1e-15));
  CHECK(deep.layers[0].ffn2 == Approx(xavier_ffn / std::sqrt(8 * N)).epsilon(1e-15));
  // DS-Init: layer l gets the Xavier variance / l.
  const auto ds = initialize(c, Scheme::ds_init);
  CHECK(ds.layers[3].q == Approx(2 / (d + dk) / 4).epsilon(1e-15));
  CHECK(ds.layers[3].ffn1 == Approx(xavier_ffn / 4).epsilon(1e-15));
  // T-Fixup: V, O, W1, W2 times (0.67 N^(-1/4))^2; Q, K Xavier.
  const auto tf = initialize(c, Scheme::t_fixup);
  CHECK(tf.layers[0].o == Approx(0.67 * 0.67 / std::sqrt(N) / d).epsilon(1e-15));
  CHECK(tf.layers[0].k == Approx(2 / (d + dk)).epsilon(1e-15));
  // LayerScale: eps by depth (CaiT); ReZero and SkipInit: beta = 0.
  CHECK(initialize(c, Scheme::layerscale).layers[0].attn_branch == 0.1);
  c.layers = 24;
  CHECK(initialize(c, Scheme::layerscale).layers[0].ffn_branch == 1e-5);
  c.layers = 36;
  CHECK(initialize(c, Scheme::layerscale).layers[0].ffn_branch == 1e-6);
  c.layers = 6;
  CHECK(initialize(c, Scheme::rezero).layers[5].ffn_branch == 0);
  CHECK(initialize(c, Scheme::skipinit).layers[5].attn_skip == 1);
  // Spike No More: every matrix 2/(5d), W2 and O / (2N); tables 2/(5d).
  c.arch = Arch::pre_ln;
  const auto v = initialize(c, Scheme::spike_vanilla);
  CHECK(v.layers[1].q == Approx(2 / (5 * d)).epsilon(1e-15));
  CHECK(v.layers[1].o == Approx(2 / (5 * d) / (2 * N)).epsilon(1e-15));
  CHECK(v.layers[1].ffn2 == Approx(2 / (5 * d) / (2 * N)).epsilon(1e-15));
  CHECK(v.embedding_var == Approx(2 / (5 * d)).epsilon(1e-15));
  CHECK(v.input.var == Approx(3 * 2 / (5 * d) / 0.9).epsilon(1e-14));  // three tables, then dropout (1/(1-p))
  // Scaled Embed: the sum times sqrt(d), so each table contributes 2/5.
  const auto se = initialize(c, Scheme::scaled_embed);
  CHECK(se.embedding_scale == Approx(16).epsilon(1e-15));
  CHECK(se.input.var == Approx(3 * 0.4 / 0.9).epsilon(1e-14));
  // Embed LN: unit-variance input, the LayerNorm of the embedding output.
  const auto eln = initialize(c, Scheme::embed_ln);
  CHECK(eln.embedding_layernorm);
  CHECK(eln.input.var == Approx(1).epsilon(1e-15));
  CHECK(eln.input.corr_len == Approx(LayerNorm<double>(d).corr_len_map(eln.embedding_output.corr_len)).epsilon(1e-15));
  // Xavier + Scaled Embed: tables 1/d, times sqrt(d): std 1 per table.
  const auto xs = initialize(c, Scheme::xavier_scaled_embed);
  CHECK(xs.embedding_var == Approx(1 / d).epsilon(1e-15));
  CHECK(xs.input.var == Approx(3 / 0.9).epsilon(1e-12));
  // An explicit residual scaling replaces the scheme's own scales.
  ResidualScaling k2;
  k2.enabled = true;
  const auto ls = initialize(c, Scheme::layerscale, {}, k2);
  CHECK(ls.layers[0].attn_branch == Approx(std::sqrt(2 / N)).epsilon(1e-15));
  InputSpec bad;
  bad.embedding_scale = -1;
  CHECK_THROWS_WITH(initialize(c, Scheme::xavier, bad), Catch::Contains("embedding_scale = -1"));
}

TEST_CASE("schemes: Admin's omega from the profiling trace", "[schemes]") {
  const ModelConfig c = scheme_model(Arch::post_ln);
  // The profiling pass: the same model with omega = 1 (plain Post-LN Xavier).
  const Trace profile = trace(c, initialize(c, Scheme::xavier));
  for (bool code : {false, true}) {
    const auto w = initialize(c, code ? Scheme::admin_code : Scheme::admin);
    double sum = code ? w.input.var : 0;
    for (std::size_t n = 0; n < c.layers; ++n) {
      CHECK(w.layers[n].attn_skip == Approx(std::sqrt(sum)).epsilon(1e-12).margin(1e-300));
      sum += profile.mid[n].branch_var;
      CHECK(w.layers[n].ffn_skip == Approx(std::sqrt(sum)).epsilon(1e-12));
      sum += profile.rows[n + 1].branch_var;
      CHECK(w.layers[n].attn_branch == 1);
    }
  }
  // omega_1 = 0 (the formula as printed): the first sublayer's output is its branch alone.
  const Trace t = trace(c, initialize(c, Scheme::admin));
  CHECK(t.mid[0].residual_share == 1);
  CHECK(std::isinf(sensitivity_terms(t)[0]));
}

TEST_CASE("schemes: Admin's residual dependencies, Pre-LN 1/i against Post-LN constant", "[schemes][measures]") {
  ModelConfig c = scheme_model(Arch::pre_ln);
  c.layers = 48;
  c.dropout = 0;
  const Trace pre = trace(c, initialize(c, Scheme::xavier));
  c.arch = Arch::post_ln;
  const Trace post = trace(c, initialize(c, Scheme::xavier));
  const Trace admin = trace(c, initialize(c, Scheme::admin));
  const auto sp = residual_shares(pre), so = residual_shares(post);
  // Sublayer 2n - 2 is layer n's attention, 2n - 1 its FFN.
  // Pre-LN: beta_ii^2 = Var[f_i] / Var[x_i] with Var[x_i] growing linearly, so n beta_ii^2 levels off
  // (measured 0.189 at n = 20, 0.178 at n = 48).
  CHECK(20 * sp[39] == Approx(48 * sp[95]).epsilon(0.1));
  CHECK(20 * sp[38] == Approx(48 * sp[94]).epsilon(0.1));
  // Post-LN: constant once the correlation has settled (0.242 FFN, 0.615 attention at d = 256).
  CHECK(so[95] == Approx(so[47]).epsilon(1e-3));
  CHECK(so[94] == Approx(so[46]).epsilon(1e-3));
  CHECK(so[95] > 0.2);
  // Output change: O(log N) vs O(N); Admin close to Pre-LN.
  CHECK(output_change(post) > 5 * output_change(pre));
  CHECK(output_change(admin) == Approx(output_change(pre)).epsilon(0.5));
}

TEST_CASE("schemes: gpt2 and llama, R^2 everywhere and GPT-2's R^2/(2N) on the residual projections", "[schemes]") {
  ModelConfig c = with_architecture(scheme_model(Arch::pre_ln), "gpt2");  // N = 6, d = 256
  const double R2 = 0.02 * 0.02, N = 6;
  const auto g = initialize(c, Scheme::gpt2);
  CHECK(g.embedding_var == Approx(R2).epsilon(1e-15));
  for (const LayerWeights& w : g.layers) {
    for (double v : {w.q, w.k, w.v, w.ffn1}) CHECK(v == Approx(R2).epsilon(1e-15));
    for (double v : {w.o, w.ffn2}) CHECK(v == Approx(R2 / (2 * N)).epsilon(1e-15));
    CHECK(w.attn_branch == 1);
    CHECK(w.ffn_skip == 1);
  }
  c = with_architecture(scheme_model(Arch::pre_ln), "llama");
  c.initializer_range = 0.05;
  const auto l = initialize(c, Scheme::llama);
  CHECK(l.embedding_var == Approx(0.0025).epsilon(1e-15));
  for (const LayerWeights& w : l.layers)
    for (double v : {w.q, w.k, w.v, w.o, w.ffn1, w.ffn2, w.ffn_gate}) CHECK(v == Approx(0.0025).epsilon(1e-15));
  const auto b = initialize(c, Scheme::bert);  // bert reads the same range
  CHECK(b.layers[0].o == Approx(0.0025).epsilon(1e-15));
  c.initializer_range = 0;
  CHECK_THROWS_WITH(initialize(c, Scheme::gpt2), Catch::Contains("initializer_range = 0"));
}
