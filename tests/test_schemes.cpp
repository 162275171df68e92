// Initialization schemes and the DeepScaleLM solver (models/schemes.hpp).
#include <cmath>

#include "catch.hpp"
#include "sigprop/models/schemes.hpp"

using namespace sigprop;

namespace {
ModelConfig small(Arch arch, FfnActivation act = FfnActivation::relu) {
  ModelConfig c;
  c.arch = arch;
  c.layers = 6;
  c.d = 256;
  c.heads = 4;
  c.seq_len = 128;
  c.dropout = 0.1;
  c.activation = act;
  return c;
}
}  // namespace

TEST_CASE("schemes: the per-entry variances of each preset", "[schemes]") {
  const ModelConfig c = small(Arch::pre_ln);
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
      const ModelConfig c = small(arch, act);
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
  const auto w = initialize(small(Arch::pre_ln), Scheme::dslm);
  CHECK(w.layers[2].ffn1 == Approx(std::sqrt(0.9 / 2) / 256).epsilon(1e-8));
}

TEST_CASE("schemes: overrides, measured input and errors", "[schemes][errors]") {
  const ModelConfig c = small(Arch::pre_ln);
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
