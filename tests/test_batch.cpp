// Batched evaluation: every component, block and stack on Eigen arrays (one
// lane per configuration) gives, lane by lane, what the scalar evaluation
// gives. The formulas are the same templated code, so the only differences
// are the vectorized transcendentals (math::atan, math::asin: a few ulp) and
// the order of floating-point operations; 1e-12 relative bounds both with a
// wide margin while catching any lane mix-up or formula divergence (which
// would be of order 1).
#include <array>
#include <cmath>
#include <random>
#include <vector>

#include "catch.hpp"
#include "sigprop/sigprop.hpp"

namespace {

using sigprop::Batch;
using sigprop::GradMoments;
using sigprop::Moments;

constexpr double tolerance = 1e-12;

double rel(double a, double b) { return std::abs(a - b) / std::max({std::abs(a), std::abs(b), 1e-300}); }

struct Lanes {
  std::mt19937_64 rng{2024};
  std::vector<Moments<double>> in;
  std::vector<GradMoments<double>> grad;
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); }
  explicit Lanes(int n, bool zero_mean = false) {
    for (int i = 0; i < n; ++i) {
      in.push_back({zero_mean || i % 3 ? 0.0 : uniform(-1, 1), uniform(0.2, 3), uniform(0, 0.95),
                    i % 2 ? 0.0 : uniform(-0.002, 0.05)});
      grad.push_back({uniform(0.5, 2), uniform(0, 0.9)});
      // The whole-vector moments away from their defaults in most lanes.
      if (i % 4) {
        in.back().norm_var_ratio = uniform(0.5, 2);
        grad.back().align_activation = uniform(0.5, 1.5);
        grad.back().align_mean = uniform(0.5, 1.5);
        grad.back().norm_coupling = uniform(-0.05, 0.1);
      }
    }
  }
  Batch pick(double Moments<double>::*m) const {
    Batch b(static_cast<Eigen::Index>(in.size()));
    for (std::size_t i = 0; i < in.size(); ++i) b(static_cast<Eigen::Index>(i)) = in[i].*m;
    return b;
  }
  Moments<Batch> moments() const {
    return {pick(&Moments<double>::mean), pick(&Moments<double>::var), pick(&Moments<double>::corr_len),
            pick(&Moments<double>::corr_dim), pick(&Moments<double>::norm_var_ratio)};
  }
  Batch pick_grad(double GradMoments<double>::*m) const {
    Batch b(static_cast<Eigen::Index>(grad.size()));
    for (std::size_t i = 0; i < grad.size(); ++i) b(static_cast<Eigen::Index>(i)) = grad[i].*m;
    return b;
  }
  GradMoments<Batch> grads() const {
    return {pick_grad(&GradMoments<double>::var), pick_grad(&GradMoments<double>::corr_len),
            pick_grad(&GradMoments<double>::align_activation), pick_grad(&GradMoments<double>::align_mean),
            pick_grad(&GradMoments<double>::norm_coupling)};
  }
};

// make(x) builds the component from lane parameters x (a double or a Batch
// lane-parameter source); compares forward and backward lane by lane.
template <class MakeScalar, class MakeBatch>
void check_lanes(const Lanes& lanes, MakeScalar make_scalar, MakeBatch make_batch) {
  const auto batched = make_batch();
  const Moments<Batch> in = lanes.moments();
  const GradMoments<Batch> g = lanes.grads();
  const Moments<Batch> out = batched.forward(in);
  const GradMoments<Batch> back = batched.backward(in, g);
  double worst = 0;
  for (std::size_t i = 0; i < lanes.in.size(); ++i) {
    const auto one = make_scalar(i);
    const Moments<double> o = one.forward(lanes.in[i]);
    const GradMoments<double> b = one.backward(lanes.in[i], lanes.grad[i]);
    const auto k = static_cast<Eigen::Index>(i);
    for (double e : {rel(o.mean, out.mean(k)), rel(o.var, out.var(k)), std::abs(o.corr_len - out.corr_len(k)),
                     std::abs(o.corr_dim - out.corr_dim(k)), rel(o.norm_var_ratio, out.norm_var_ratio(k)),
                     rel(b.var, back.var(k)), std::abs(b.corr_len - back.corr_len(k)),
                     std::abs(b.align_activation - back.align_activation(k)),
                     std::abs(b.align_mean - back.align_mean(k)),
                     std::abs(b.norm_coupling - back.norm_coupling(k))})
      worst = std::max(worst, e);
  }
  INFO("largest lane difference " << worst);
  CHECK(worst <= tolerance);
}

Batch lane_values(const std::vector<double>& v) {
  return Eigen::Map<const Batch>(v.data(), static_cast<Eigen::Index>(v.size()));
}

}  // namespace

TEST_CASE("every component evaluates a batch lane by lane like scalars", "[batch]") {
  const int n = 37;  // not a multiple of the SIMD width: the tail lanes are checked too
  Lanes lanes(n);
  std::vector<double> d_in, d_out, w, p, seq, d_k;
  for (int i = 0; i < n; ++i) {
    d_in.push_back(64.0 * (1 + i % 5));
    d_out.push_back(128.0 * (1 + i % 3));
    w.push_back(lanes.uniform(0.5, 2) / d_in.back());
    p.push_back(lanes.uniform(0, 0.5));
    seq.push_back(64.0 + 32 * (i % 7));
    d_k.push_back(16.0 * (1 + i % 4));
  }
  const Batch D_in = lane_values(d_in), D_out = lane_values(d_out), W = lane_values(w), P = lane_values(p);
  const Batch Seq = lane_values(seq), D_k = lane_values(d_k);
  SECTION("Linear") {
    check_lanes(lanes, [&](std::size_t i) { return sigprop::Linear<double>(d_in[i], d_out[i], w[i]); },
                [&] { return sigprop::Linear<Batch>(D_in, D_out, W); });
  }
  SECTION("Dropout") {
    check_lanes(lanes, [&](std::size_t i) { return sigprop::Dropout<double>(p[i]); },
                [&] { return sigprop::Dropout<Batch>(P); });
  }
  SECTION("ReLU") {
    check_lanes(lanes, [](std::size_t) { return sigprop::Relu<double>(); }, [] { return sigprop::Relu<Batch>(); });
  }
  SECTION("GeLU") {
    check_lanes(lanes, [](std::size_t) { return sigprop::Gelu<double>(); }, [] { return sigprop::Gelu<Batch>(); });
  }
  SECTION("LayerNorm") {
    check_lanes(lanes, [&](std::size_t i) { return sigprop::LayerNorm<double>(d_in[i]); },
                [&] { return sigprop::LayerNorm<Batch>(D_in); });
  }
  SECTION("LayerNorm at small widths and |r| up to 1 (recurrence and closed-form lanes)") {
    Lanes near_one(n);
    std::vector<double> small;
    for (int i = 0; i < n; ++i) {
      small.push_back(4.0 + (i % 12) * 3);  // d = 4 .. 37: alpha below the series threshold
      auto& m = near_one.in[static_cast<std::size_t>(i)];
      m.corr_len = i % 5 == 0 ? (i % 2 ? 1.0 : -1.0) : (i % 2 ? 1 : -1) * near_one.uniform(0.5, 1);
    }
    const Batch Small = lane_values(small);
    check_lanes(near_one, [&](std::size_t i) { return sigprop::LayerNorm<double>(small[i]); },
                [&] { return sigprop::LayerNorm<Batch>(Small); });
  }
  SECTION("Softmax") {
    std::vector<double> seq_int;
    for (int i = 0; i < n; ++i) seq_int.push_back(std::floor(seq[static_cast<std::size_t>(i)] / 8));
    const Batch Seq_int = lane_values(seq_int);
    check_lanes(lanes, [&](std::size_t i) { return sigprop::Softmax<double>(seq_int[i]); },
                [&] { return sigprop::Softmax<Batch>(Seq_int); });
  }
  SECTION("Embedding") {
    sigprop::EmbeddingConfig<Batch> cb;
    cb.vocab = Batch::Constant(n, 30000);
    cb.seq_len = Seq;
    cb.weight_var = W;
    check_lanes(
        lanes,
        [&](std::size_t i) {
          sigprop::EmbeddingConfig<double> c;
          c.vocab = 30000;
          c.seq_len = seq[i];
          c.weight_var = w[i];
          return sigprop::Embedding<double>(c);
        },
        [&] { return sigprop::Embedding<Batch>(cb); });
  }
  SECTION("Attention") {
    Lanes centred(n, true);
    std::vector<double> q;
    for (int i = 0; i < n; ++i) q.push_back(centred.uniform(0.2, 1.5) / d_in[static_cast<std::size_t>(i)]);
    const Batch Q = lane_values(q);
    check_lanes(centred,
                [&](std::size_t i) { return sigprop::Attention<double>(d_in[i], d_k[i], seq[i], q[i], q[i], w[i], p[i]); },
                [&] { return sigprop::Attention<Batch>(D_in, D_k, Seq, Q, Q, W, P); });
  }
  SECTION("attention and FFN blocks in residual sublayers") {
    const Batch heads = D_in / D_k;
    std::vector<double> h(d_in.size());
    for (std::size_t i = 0; i < h.size(); ++i) h[i] = d_in[i] / d_k[i];
    const Batch skip = Batch::Constant(n, 0.9), branch = Batch::Constant(n, std::sqrt(0.19));
    check_lanes(
        lanes,
        [&](std::size_t i) {
          return sigprop::residual(sigprop::serial(sigprop::LayerNorm<double>(d_in[i]),
                                                   sigprop::attention_block<double>(d_in[i], h[i], seq[i], {w[i], w[i], w[i], w[i]}, p[i])),
                                   0.9, std::sqrt(0.19));
        },
        [&] {
          return sigprop::residual(sigprop::serial(sigprop::LayerNorm<Batch>(D_in),
                                                   sigprop::attention_block<Batch>(D_in, heads, Seq, {W, W, W, W}, P)),
                                   skip, branch);
        });
    check_lanes(
        lanes,
        [&](std::size_t i) {
          return sigprop::serial(sigprop::residual(sigprop::ffn_block<sigprop::Gelu<double>>(d_in[i], 4.0, w[i], w[i] / 4, p[i])),
                                 sigprop::LayerNorm<double>(d_in[i]));
        },
        [&] {
          // Batched residual scales are given explicitly (one lane each).
          const Batch one = Batch::Ones(n);
          return sigprop::serial(sigprop::residual(sigprop::ffn_block<sigprop::Gelu<Batch>>(D_in, Batch(4 * one),
                                                                                             W, Batch(W / 4), P),
                                                   one, one),
                                 sigprop::LayerNorm<Batch>(D_in));
        });
  }
}

TEST_CASE("trace_batch equals trace lane by lane for every stack", "[batch]") {
  using namespace sigprop;
  for (Arch arch : {Arch::pre_ln, Arch::post_ln, Arch::no_ln}) {
    for (FfnActivation act : {FfnActivation::relu, FfnActivation::gelu}) {
      std::vector<ModelConfig> configs;
      std::vector<ModelWeights> weights;
      for (int i = 0; i < 9; ++i) {
        ModelConfig c;
        c.arch = arch;
        c.activation = act;
        c.layers = 24;
        c.d = 128 * static_cast<std::size_t>(1 + i % 3);
        c.heads = 2 + 2 * static_cast<std::size_t>(i % 2);
        c.seq_len = 64 + 64 * static_cast<std::size_t>(i % 4);
        c.dropout = 0.05 * i;
        c.final_layernorm = arch == Arch::pre_ln;
        configs.push_back(c);
        // Schemes with per-sublayer residual scales (admin) and depth-dependent weights (ds-init) too.
        // Without LayerNorm, Xavier's variance grows geometrically (attention overflows by
        // layer 24), so that stack gets the schemes made for it.
        const auto pick = arch == Arch::no_ln
                              ? std::array<Scheme, 5>{Scheme::t_fixup, Scheme::rezero, Scheme::dslm_simple,
                                                      Scheme::layerscale, Scheme::t_fixup}
                              : std::array<Scheme, 5>{Scheme::xavier, Scheme::dslm, Scheme::dslm_simple,
                                                      Scheme::admin, Scheme::ds_init};
        const Scheme s = pick[static_cast<std::size_t>(i % 5)];
        weights.push_back(initialize(c, s));
      }
      const BatchTrace batch = trace_batch(configs, weights);
      double worst = 0;
      for (std::size_t i = 0; i < configs.size(); ++i) {
        const Trace one = trace(configs[i], weights[i]);
        const Trace lane = lane_of(batch, i);
        REQUIRE(lane.rows.size() == one.rows.size());
        for (std::size_t n = 0; n < one.rows.size(); ++n) {
          const TraceRow &a = one.rows[n], &b = lane.rows[n];
          for (double e : {rel(a.forward.var, b.forward.var), std::abs(a.forward.corr_len - b.forward.corr_len),
                           rel(a.backward.var, b.backward.var), std::abs(a.backward.corr_len - b.backward.corr_len),
                           rel(a.forward.norm_var_ratio, b.forward.norm_var_ratio),
                           std::abs(a.backward.align_activation - b.backward.align_activation),
                           std::abs(a.backward.align_mean - b.backward.align_mean),
                           std::abs(a.backward.norm_coupling - b.backward.norm_coupling),
                           std::abs(a.residual_share - b.residual_share), rel(a.branch_var, b.branch_var),
                           // The domain measures are compared with limits of order 1; near
                           // r = 1 the score variance is a small difference (1 - r), so it
                           // is compared absolutely.
                           std::abs(a.domain.score_var - b.domain.score_var)})
            worst = std::max(worst, e);
        }
        worst = std::max(worst, rel(one.output.forward.var, lane.output.forward.var));
      }
      INFO("arch " << static_cast<int>(arch) << " activation " << static_cast<int>(act) << ": largest difference " << worst);
      CHECK(worst <= tolerance);
    }
  }
}

TEST_CASE("trace_batch of decoder stacks: repeated lanes are copied, different ones are not", "[batch]") {
  // SiLU and causal attention evaluate a batch lane by lane and copy a lane
  // whose inputs equal the previous lane's (trace_batch pads a chunk with its
  // last configuration). Lanes 1 and 2 are the same configuration, lane 3
  // differs from them only in the sequence length (so only causal attention
  // sees it), lanes 4-7 are padding.
  using namespace sigprop;
  for (const char* arch : {"llama", "gpt2"}) {
    std::vector<ModelConfig> configs;
    std::vector<ModelWeights> weights;
    for (std::size_t seq : {64, 96, 96, 80}) {
      ModelConfig c = with_architecture(ModelConfig{}, arch);
      c.layers = 6;
      c.d = 128;
      c.heads = 4;
      c.seq_len = seq;
      configs.push_back(c);
      weights.push_back(initialize(c, Scheme::xavier));
    }
    const BatchTrace batch = trace_batch(configs, weights);
    double worst = 0;
    for (std::size_t i = 0; i < configs.size(); ++i) {
      const Trace one = trace(configs[i], weights[i]), lane = lane_of(batch, i);
      for (std::size_t n = 0; n < one.rows.size(); ++n)
        worst = std::max({worst, rel(one.rows[n].forward.var, lane.rows[n].forward.var),
                          std::abs(one.rows[n].forward.corr_len - lane.rows[n].forward.corr_len),
                          rel(one.rows[n].backward.var, lane.rows[n].backward.var),
                          std::abs(one.rows[n].backward.corr_len - lane.rows[n].backward.corr_len)});
    }
    INFO(arch << ": largest difference " << worst);
    CHECK(worst <= tolerance);
    // Lane 3 is not a copy of lane 2.
    CHECK(lane_of(batch, 3).output.forward.corr_len != lane_of(batch, 2).output.forward.corr_len);
  }
}

TEST_CASE("trace_batch rejects lanes of different structure", "[batch][errors]") {
  using namespace sigprop;
  ModelConfig a, b;
  a.layers = b.layers = 4;
  b.arch = Arch::post_ln;
  const std::vector<ModelConfig> configs{a, b};
  const std::vector<ModelWeights> weights{initialize(a, Scheme::xavier), initialize(b, Scheme::xavier)};
  CHECK_THROWS_WITH(trace_batch(configs, weights), Catch::Contains("configs[1].") && Catch::Contains("structure"));
  CHECK_THROWS_AS(trace_batch({}, {}), domain_error);
  CHECK_THROWS_WITH(trace_batch({a}, weights), Catch::Contains("weights.size() = 2"));
  std::vector<ModelConfig> bad{a};
  bad[0].dropout = 1;
  CHECK_THROWS_WITH(trace_batch(bad, {weights[0]}), Catch::Contains("dropout = 1"));
}

TEST_CASE("sweep summarizes each point like its scalar trace, and the bounds can fail", "[batch][sweep]") {
  using namespace sigprop;
  std::vector<SweepPoint> points;
  for (Arch arch : {Arch::pre_ln, Arch::post_ln})
    for (Scheme scheme : {Scheme::xavier, Scheme::dslm})
      for (std::size_t layers : {6u, 12u}) {
        SweepPoint p;
        p.config.arch = arch;
        p.config.layers = layers;
        p.config.d = 256;
        p.config.heads = 4;
        p.config.seq_len = 128;
        p.scheme = scheme;
        if (scheme == Scheme::dslm) p.scaling = {1, 1.5, true};  // beta^2 = 1/N^1.5: gradients stay in the band
        points.push_back(p);
      }
  const SweepBounds bounds{0.5, 2};
  const std::vector<SweepSummary> s = sweep(points, bounds);
  REQUIRE(s.size() == points.size());
  std::size_t inside = 0;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const SweepPoint& p = points[i];
    const SweepSummary one =
        summarize_trace(trace(p.config, initialize(p.config, p.scheme, p.input, p.scaling)), bounds);
    CHECK(rel(one.final_var, s[i].final_var) <= tolerance);
    CHECK(rel(one.grad_ratio, s[i].grad_ratio) <= tolerance);
    CHECK(rel(one.output_change, s[i].output_change) <= tolerance);
    CHECK(rel(one.sensitivity, s[i].sensitivity) <= tolerance);
    CHECK(one.within_bounds == s[i].within_bounds);
    CHECK(s[i].grad_ratio >= 1);
    CHECK(s[i].var_min <= s[i].final_var);
    CHECK(s[i].final_var <= s[i].var_max);
    inside += s[i].within_bounds;
  }
  // Pre-LN Xavier grows the forward variance linearly with depth (far above
  // 2 at 12 layers); Post-LN keeps it at 1 by construction.
  CHECK(!s[1].within_bounds);  // points[1]: pre-ln, xavier, 12 layers
  CHECK(inside > 0);
  CHECK(inside < points.size());
  CHECK_THROWS_WITH(sweep(points, {2, 0.5}), Catch::Contains("bounds.low = 2"));
  std::vector<SweepPoint> bad = points;
  bad[5].config.dropout = 1.5;
  CHECK_THROWS_WITH(sweep(bad), Catch::Contains("points[5]") && Catch::Contains("dropout = 1.5"));
}

TEST_CASE("sweep marks a diverging point and summarizes the others as without it", "[batch][sweep]") {
  using namespace sigprop;
  // Eleven 192-layer Pre-LN points (two chunks of 8 lanes); points 3 and 9 use
  // Admin's skip scales, which make the Pre-LN stream variance overflow
  // (docs/domains.md). The trace of either throws; the sweep must not.
  std::vector<SweepPoint> points;
  for (int i = 0; i < 11; ++i) {
    SweepPoint p;
    p.config.arch = Arch::pre_ln;
    p.config.layers = 192;
    p.config.d = 128 * (1 + i % 3);
    p.config.heads = 4;
    p.config.seq_len = 64;
    p.config.dropout = 0.05 * (i % 2);
    p.scheme = (i == 3 || i == 9) ? Scheme::admin : (i % 2 ? Scheme::dslm : Scheme::xavier);
    points.push_back(p);
  }
  const SweepPoint& diverging = points[3];
  CHECK_THROWS_AS(trace(diverging.config, initialize(diverging.config, diverging.scheme, diverging.input,
                                                     diverging.scaling)),
                  sigprop::overflow_error);
  const std::vector<SweepSummary> s = sweep(points);
  REQUIRE(s.size() == points.size());
  std::vector<SweepPoint> rest;
  for (int i = 0; i < 11; ++i)
    if (i != 3 && i != 9) rest.push_back(points[static_cast<std::size_t>(i)]);
  const std::vector<SweepSummary> alone = sweep(rest);
  std::size_t k = 0;
  for (std::size_t i = 0; i < points.size(); ++i) {
    INFO("point " << i);
    if (i == 3 || i == 9) {
      CHECK(s[i].overflow);
      CHECK(!s[i].within_bounds);
      CHECK(std::isnan(s[i].final_var));
      CHECK(std::isnan(s[i].grad_ratio));
      CHECK_THAT(s[i].overflow_message, Catch::Contains("overflows"));
      continue;
    }
    const SweepSummary& a = alone[k++];
    CHECK(!s[i].overflow);
    CHECK(s[i].overflow_message.empty());
    // Exactly the figures of a sweep without the diverging points.
    CHECK(s[i].final_var == a.final_var);
    CHECK(s[i].final_corr_len == a.final_corr_len);
    CHECK(s[i].grad_ratio == a.grad_ratio);
    CHECK(s[i].var_max == a.var_max);
    CHECK(s[i].within_bounds == a.within_bounds);
    CHECK(std::isfinite(s[i].final_var));
  }
}
