// Whole models: the closed-form trace against whole-model simulation
// (real multi-head attention, LayerNorm, FFN, dropout, backprop).
#include <cmath>
#include <cstdio>
#include <vector>

#include "support.hpp"

#include "sigprop/models/schemes.hpp"
#include "sigprop/montecarlo/models.hpp"

namespace mc = sigprop::montecarlo;
using sigprop::Arch;
using sigprop::FfnActivation;
using sigprop::ModelConfig;
using sigprop::Scheme;

namespace {

struct Case {
  const char* label;
  Arch arch;
  Scheme scheme;
  std::size_t layers, d, heads, seq_len;
  double dropout;
  FfnActivation activation;
};

struct Errors {
  std::vector<double> forward, backward;
};

// Per-layer relative errors |sim - pred| / sim of var and grad var at n = 0..N.
Errors compare(const Case& k, std::size_t trials, std::uint64_t seed, bool print) {
  ModelConfig c;
  c.arch = k.arch;
  c.layers = k.layers;
  c.d = k.d;
  c.heads = k.heads;
  c.seq_len = k.seq_len;
  c.dropout = k.dropout;
  c.activation = k.activation;
  sigprop::InputSpec input;
  input.measured = sigprop::Moments<double>{0, 1, 0.2, 0};
  const auto weights = sigprop::initialize(c, k.scheme, input);
  const auto trace = sigprop::trace(c, weights);
  mc::SimulationSetup setup;
  setup.trials = trials;
  setup.seed = seed;
  const auto sim = mc::simulate_model(c, weights, {1, 0}, setup);
  Errors e;
  if (print) std::printf("%s\n  n   var pred    sim      err%%   grad pred   sim      err%%\n", k.label);
  for (std::size_t n = 0; n <= k.layers; ++n) {
    const double fp = trace.rows[n].forward.var, fs = sim.forward[n].var.value;
    const double bp = trace.rows[n].backward.var, bs = sim.backward[n].var.value;
    e.forward.push_back(100 * std::abs(fp - fs) / fs);
    e.backward.push_back(100 * std::abs(bp - bs) / bs);
    if (print)
      std::printf("%3zu %9.4g %9.4g %7.2f  %9.4g %9.4g %7.2f\n", n, fp, fs, e.forward.back(), bp, bs,
                  e.backward.back());
  }
  return e;
}

}  // namespace

TEST_CASE("models: per-layer variance and gradient variance against whole-model simulation",
          "[models][montecarlo]") {
  const std::vector<Case> cases = {
      {"pre-ln xavier relu", Arch::pre_ln, Scheme::xavier, 8, 128, 4, 128, 0.1, FfnActivation::relu},
      {"post-ln xavier relu", Arch::post_ln, Scheme::xavier, 8, 128, 4, 128, 0.1, FfnActivation::relu},
      {"pre-ln dslm relu", Arch::pre_ln, Scheme::dslm, 8, 128, 4, 128, 0.1, FfnActivation::relu},
      {"pre-ln dslm-simple gelu", Arch::pre_ln, Scheme::dslm_simple, 8, 128, 4, 128, 0.1, FfnActivation::gelu},
      {"post-ln dslm-simple relu", Arch::post_ln, Scheme::dslm_simple, 8, 128, 4, 128, 0.0, FfnActivation::relu},
      {"post-ln bert gelu", Arch::post_ln, Scheme::bert, 6, 64, 2, 64, 0.2, FfnActivation::gelu},
      {"pre-ln dslm gelu", Arch::pre_ln, Scheme::dslm, 12, 96, 3, 96, 0.0, FfnActivation::gelu},
      {"pre-ln bert relu", Arch::pre_ln, Scheme::bert, 4, 192, 6, 64, 0.1, FfnActivation::relu},
  };
  std::vector<double> forward, backward;
  std::uint64_t seed = 7;
  for (const auto& k : cases) {
    const Errors e = compare(k, 16, ++seed, true);
    forward.insert(forward.end(), e.forward.begin(), e.forward.end());
    backward.insert(backward.end(), e.backward.begin(), e.backward.end());
  }
  const auto f = mc::percentiles_of(forward), b = mc::percentiles_of(backward);
  std::printf("forward var error p50 %.2f%% p90 %.2f%%; grad var error p50 %.2f%% p90 %.2f%%\n", f.p50,
              f.p90, b.p50, b.p90);
  CHECK(f.p50 <= 5);
  CHECK(f.p90 <= 12);
  CHECK(b.p50 <= 15);
  CHECK(b.p90 <= 30);
}
