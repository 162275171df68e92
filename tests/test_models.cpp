// Whole models: the closed-form trace against whole-model simulation
// (real multi-head attention, LayerNorm, FFN, dropout, backprop) over
// montecarlo::validation_models(): Pre-LN and Post-LN, Xavier, DSLM,
// DSLM-simplified and BERT-style initialization, ReLU and GeLU, and two
// models fed IID tokens.
#include <cstdio>
#include <string>
#include <vector>

#include "support.hpp"

#include "sigprop/models/measures.hpp"
#include "sigprop/montecarlo/models.hpp"

using sigprop::test::within;
namespace mc = sigprop::montecarlo;

namespace {

// The weight-gradient norms of every layer against the simulation: within 4
// standard errors plus 6 % (the systematic part measured with 32 trials over
// both model sets is within about 5 %, docs/schemes.md). ReZero's branches get
// no gradient at all (beta = 0): both sides are 0.
void check_weight_grads(const mc::ModelCase& k, const mc::ModelCaseResult& r) {
  const auto [config, weights] = mc::case_model(k);
  const auto g = sigprop::weight_grad_norms(config, weights, r.predicted);
  REQUIRE(g.size() == r.measured.weight_grads.size());
  for (std::size_t n = 0; n < g.size(); ++n) {
    const auto& m = r.measured.weight_grads[n];
    INFO(k.label << " layer " << n + 1);
    for (const auto& [pred, est] : {std::pair<double, mc::Estimate>{g[n].v, m.v}, {g[n].o, m.o}, {g[n].ffn1, m.ffn1},
                                    {g[n].ffn2, m.ffn2}})
      CHECK(within(est, pred, 4, 0.06 * est.value));
    // Key and query: 4 standard errors plus 20 % (first layers at Xavier
    // scores 13-20 % high, docs/schemes.md), 35 % where the carried spread
    // is known to be low in the upper layers (Pre-LN DSLM GeLU 0.72-0.87,
    // Post-LN Xavier GeLU with IID input 0.54-0.80 of the simulation); the
    // key without its coherent part is 8-50 % low, with an isotropic input
    // down to 0.28.
    const std::string label = k.label;
    const double margin = label == "pre-ln dslm gelu" || label == "post-ln xavier gelu, IID input" ? 0.35 : 0.2;
    for (const auto& [pred, est] : {std::pair<double, mc::Estimate>{g[n].key, m.k}, {g[n].query, m.q}})
      CHECK(within(est, pred, 4, margin * est.value));
  }
}

// Simulates every case (16 trials, seeds from `seed`), prints the per-layer
// table, checks the weight-gradient norms and, with `per_layer`, every
// layer's variances and branch variances against the simulation, then the
// aggregate targets over all layers of all cases.
void run_model_set(const char* name, const std::vector<mc::ModelCase>& cases, std::uint64_t seed, bool per_layer) {
  std::vector<double> forward, backward;
  for (const auto& k : cases) {
    mc::SimulationSetup setup;
    setup.trials = 16;
    setup.seed = ++seed;
    const mc::ModelCaseResult r = mc::run_case(k, setup);
    std::printf("%s\n  n   var pred    sim      err%%   grad pred   sim      err%%\n", k.label);
    for (std::size_t n = 0; n < r.predicted.rows.size(); ++n) {
      const auto& f = r.measured.forward[n].var;
      const auto& b = r.measured.backward[n].var;
      std::printf("%3zu %9.4g %9.4g %7.2f  %9.4g %9.4g %7.2f\n", n, r.predicted.rows[n].forward.var, f.value,
                  r.errors.forward[n], r.predicted.rows[n].backward.var, b.value, r.errors.backward[n]);
      if (!per_layer) continue;
      // Within 4 standard errors of the simulation plus 3 % for the
      // finite-width terms the closed forms leave out (about 2 % at d = 128,
      // docs/validation.md); a wrong scale or a missing path is far outside.
      INFO(k.label << " layer " << n);
      CHECK(within(f, r.predicted.rows[n].forward.var, 4, 0.03 * f.value));
      CHECK(within(b, r.predicted.rows[n].backward.var, 4, 0.03 * b.value));
    }
    // Each sublayer's branch variance (and so beta_ii^2) against the simulation.
    for (std::size_t n = 0; per_layer && n < k.config.layers; ++n) {
      INFO(k.label << " branches of layer " << n + 1);
      const auto& a = r.measured.branch_attn[n].var;
      const auto& f = r.measured.branch_ffn[n].var;
      CHECK(within(a, r.predicted.mid[n].branch_var, 4, 0.03 * a.value));
      CHECK(within(f, r.predicted.rows[n + 1].branch_var, 4, 0.03 * f.value));
    }
    // Every layer of these models is inside the validated domain.
    CHECK(sigprop::outside_domain(r.predicted).empty());
    check_weight_grads(k, r);
    forward.insert(forward.end(), r.errors.forward.begin(), r.errors.forward.end());
    backward.insert(backward.end(), r.errors.backward.begin(), r.errors.backward.end());
  }
  const auto f = mc::percentiles_of(forward), b = mc::percentiles_of(backward);
  std::printf("%s: forward var error p50 %.2f%% p90 %.2f%%; grad var error p50 %.2f%% p90 %.2f%%\n", name, f.p50,
              f.p90, b.p50, b.p90);
  // Issue targets: median <= 3% and 90th percentile <= 10% for both. With 16
  // trials of L x d entries the per-layer standard errors are about 0.5-2%
  // (printed by the simulation), well inside these limits.
  CHECK(f.p50 <= 3);
  CHECK(f.p90 <= 10);
  CHECK(b.p50 <= 3);
  CHECK(b.p90 <= 10);
}

}  // namespace

TEST_CASE("models: per-layer variance and gradient variance against whole-model simulation",
          "[models][montecarlo]") {
  // Per-layer checks are left to the aggregate here: three models keep a
  // documented 4-5 % gradient offset at d = 64-128 (docs/validation.md).
  run_model_set("stacks", mc::validation_models(), 7, false);
}

TEST_CASE("models: every further scheme against whole-model simulation", "[models][schemes][montecarlo]") {
  run_model_set("schemes", mc::scheme_models(), 101, true);
}
