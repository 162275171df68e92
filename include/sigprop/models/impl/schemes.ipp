// sigprop/models/impl/schemes.ipp -- the definitions of models/schemes.hpp
// (docs/schemes.md).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include <boost/math/tools/roots.hpp>

#include "sigprop/components/dropout.hpp"
#include "sigprop/components/embedding.hpp"
#include "sigprop/components/layernorm.hpp"
#include "sigprop/models/detail/forward_pairs.hpp"
#include "sigprop/models/detail/sublayers.hpp"
#include "sigprop/models/schemes.hpp"

namespace sigprop {

namespace detail {


inline double table_count(const InputSpec& in) {
  return static_cast<double>(in.token) + static_cast<double>(in.position) + static_cast<double>(in.segment);
}

/// The variance s that makes `output_var(s)` equal 1, where output_var grows
/// with s (TOMS 748 on log output_var(s) after bracketing the guess by
/// factors of 2; Boost.Math tools/roots.hpp). The bracket stays within a few
/// factors of 2 of the guess, so no block is evaluated far from where it is
/// used.
template <class F>
double solve_unit_variance(const char* what, F output_var, double guess) {
  const auto f = [&](double s) { return std::log(output_var(s)); };
  std::uintmax_t iterations = 200;
  const auto r = boost::math::tools::bracket_and_solve_root(
      f, guess, 2.0, true, boost::math::tools::eps_tolerance<double>(40), iterations);
  if (iterations >= 200)
    raise_domain("sigprop::initialize", std::string("no variance gives unit output for ") + what);
  return (r.first + r.second) / 2;
}

// Full DeepScaleLM: walk the stack, choosing V = O and W1 = W2 per layer so
// that each block outputs unit variance for the moments that reach it (the
// paper's (1/d) sqrt((1-p)/r_n) is the large-L, r > 0 limit of this, and
// blows up as r -> 0; solving the closed forms for unit variance does not).
// The moments are trace()'s: a causal Pre-LN stack's length correlations
// from the pairs of positions (forward_pairs.hpp).
template <class Activation>
void solve_dslm_with(const ModelConfig& config, const WeightOverrides& overrides, ModelWeights& weights) {
  const StackShape<double> s = shape_of(config);
  Moments<double> x = weights.input;
  ForwardPairs pairs = start_forward_pairs(s, weights.layers, x);
  for (auto& w : weights.layers) {
    const auto block_input = [&](const Moments<double>& m) {
      if (config.arch != Arch::pre_ln) return m;
      return with_norm(s, [&](const auto& norm) { return norm.forward(m); });
    };
    const auto block_var = [&](const LayerWeights& t, Sublayer which, const Moments<double>& h) {
      return with_block<Activation>(s, t, which, [&](const auto& block) { return block.forward(h).var; });
    };
    const Moments<double> h = block_input(x);
    if (!overrides.v && !overrides.o) {
      const double vo = solve_unit_variance("the attention block", [&](double v) {
        LayerWeights t = w;
        t.v = t.o = v;
        return block_var(t, Sublayer::attention, h);
      }, w.v);
      w.v = w.o = vo;
    }
    Moments<double> mid =
        on_sublayer<Activation>(s, w, Sublayer::attention, [&](const auto& sub) { return sub.forward(x); });
    forward_pairs<Activation>(pairs, Sublayer::attention, s, w, x, mid);
    const Moments<double> h2 = block_input(mid);
    if (!overrides.ffn1 && !overrides.ffn2) {
      // W1 = W2 (= V in the gated FFN).
      const double f = solve_unit_variance("the FFN block", [&](double v) {
        LayerWeights t = w;
        t.ffn1 = t.ffn2 = t.ffn_gate = v;
        return block_var(t, Sublayer::ffn, h2);
      }, w.ffn1);
      w.ffn1 = w.ffn2 = w.ffn_gate = f;
    }
    Moments<double> out = on_sublayer<Activation>(s, w, Sublayer::ffn, [&](const auto& sub) { return sub.forward(mid); });
    forward_pairs<Activation>(pairs, Sublayer::ffn, s, w, mid, out);
    x = out;
  }
}

inline void solve_dslm(const ModelConfig& config, const WeightOverrides& overrides, ModelWeights& weights) {
  with_activation<double>(config.activation, [&](auto activation) {
    solve_dslm_with<typename decltype(activation)::type>(config, overrides, weights);
  });
}

// Admin: omega_i from the branch variances of a profiling pass (the trace of
// the same model with omega = 1), sublayers in order attn_1, ffn_1, attn_2, ...
inline void solve_admin(const ModelConfig& config, bool code_variant, ModelWeights& weights) {
  ModelWeights profile = weights;
  for (auto& w : profile.layers) w.set_residual(1, 1);
  const auto run = [&] {
    ModelConfig c = config;
    c.attention_gradient = AttentionGradient::value_path_only;  // the forward pass is all it needs
    return trace(c, profile);
  };
  const Trace t = run();
  double sum = code_variant ? weights.input.var : 0;
  for (std::size_t n = 0; n < weights.layers.size(); ++n) {
    LayerWeights& w = weights.layers[n];
    w.attn_skip = std::sqrt(sum);
    w.attn_branch = 1;
    sum += t.mid[n].branch_var;
    w.ffn_skip = std::sqrt(sum);
    w.ffn_branch = 1;
    sum += t.rows[n + 1].branch_var;
  }
}

}  // namespace detail

SIGPROP_DECL EmbeddingMoments embedding_moments(const ModelConfig& config, const InputSpec& input,
                                                const TableVariances& tables, double scale) {
  constexpr const char* fn = "sigprop::embedding_moments";
  require_positive(fn, "scale", scale);
  EmbeddingConfig<double> e;
  e.vocab = input.vocab;
  e.seq_len = static_cast<double>(config.seq_len);
  e.token = input.token;
  e.position = input.position;
  e.segment = input.segment;
  for (const auto& [name, v] : {std::pair{"token_var", tables.token}, std::pair{"position_var", tables.position},
                                std::pair{"segment_var", tables.segment}}) {
    require_variance(fn, name, v);
    check_result(fn, "scale^2 * table variance", scale * scale * v);
  }
  e.token_var = scale * scale * tables.token;
  e.position_var = scale * scale * tables.position;
  e.segment_var = scale * scale * tables.segment;
  EmbeddingMoments out;
  out.output = Dropout<double>(config.dropout).forward(Embedding<double>(e).forward({}));
  out.input = input.embedding_layernorm
                  ? LayerNorm<double>(static_cast<double>(config.d), config.ln_gain, config.ln_bias).forward(out.output)
                  : out.output;
  return out;
}

/// Per-layer weights of `scheme` for the model shape `config` (any
/// architecture: `native_arch(scheme)` is the one it was published with).
SIGPROP_DECL ModelWeights initialize(const ModelConfig& config, Scheme scheme, const InputSpec& input,
                                     ResidualScaling scaling, const WeightOverrides& overrides) {
  constexpr const char* fn = "sigprop::initialize";
  config.validate(fn);
  require_positive(fn, "embedding_scale", input.embedding_scale);
  require_positive(fn, "initializer_range", config.initializer_range);
  const double d = static_cast<double>(config.d), dk = static_cast<double>(config.head_width());
  const double hidden = static_cast<double>(config.hidden_width()), p = config.dropout;
  const double N = static_cast<double>(config.layers), range2 = config.initializer_range * config.initializer_range;
  if (scheme == Scheme::dslm || scheme == Scheme::dslm_simple) scaling.enabled = true;
  check_result(fn, "initializer_range^2", range2);

  // Per-entry variances of the xavier row, the base of most schemes.
  LayerWeights xavier;
  xavier.q = xavier.k = xavier.v = 2 / (d + dk);
  xavier.o = 1 / d;
  xavier.ffn1 = xavier.ffn2 = 2 / (d + hidden);

  LayerWeights base = xavier;
  double table_var = (1 - p) / std::max(detail::table_count(input), 1.0);
  double embedding_scale = input.embedding_scale;
  bool embedding_layernorm = input.embedding_layernorm;
  switch (scheme) {
    case Scheme::xavier:
    case Scheme::ds_init:  // scaled per layer below
    case Scheme::admin:    // omega solved below
    case Scheme::admin_code:
      break;
    case Scheme::bert:
    case Scheme::llama:
    case Scheme::gpt2:
      base.q = base.k = base.v = base.o = base.ffn1 = base.ffn2 = table_var = range2;
      if (scheme == Scheme::gpt2) base.o = base.ffn2 = range2 / (2 * N);  // the residual projections
      break;
    case Scheme::dslm:
    case Scheme::dslm_simple:
      base.q = base.k = 1 / d;
      base.v = base.o = base.ffn1 = base.ffn2 = std::sqrt((1 - p) / 2) / d;
      break;
    case Scheme::deepnet: {
      const double b2 = 1 / std::sqrt(8 * N);  // b^2, b = (8N)^(-1/4)
      base.q = base.k = 1 / d;
      base.v = base.o = b2 / d;
      base.ffn1 = base.ffn2 = b2 * xavier.ffn1;
      base.set_residual(std::pow(2 * N, 0.25), 1);
      break;
    }
    case Scheme::t_fixup: {
      const double s2 = 0.67 * 0.67 / std::sqrt(N);
      base.v *= s2;
      base.o *= s2;
      base.ffn1 *= s2;
      base.ffn2 *= s2;
      break;
    }
    case Scheme::layerscale:
      base.set_residual(1, N <= 18 ? 0.1 : N <= 24 ? 1e-5 : 1e-6);
      break;
    case Scheme::rezero:
    case Scheme::skipinit:
      base.set_residual(1, 0);
      break;
    case Scheme::spike_vanilla:
    case Scheme::scaled_embed:
    case Scheme::embed_ln: {
      const double v = 2 / (5 * d);
      base.q = base.k = base.v = base.ffn1 = v;
      base.o = base.ffn2 = v / (2 * N);
      table_var = v;
      if (scheme == Scheme::scaled_embed) embedding_scale *= std::sqrt(d);
      if (scheme == Scheme::embed_ln) embedding_layernorm = true;
      break;
    }
    case Scheme::xavier_scaled_embed:
      table_var = 1 / d;  // Xavier of a d x d map, so that the scaled embedding has std 1
      embedding_scale *= std::sqrt(d);
      break;
    case Scheme::torch_default:  // uniform draws of these variances (docs/schemes.md)
      base.q = base.k = base.v = 2 / (d + 3 * d);
      base.o = base.ffn1 = base.ffn1_bias = 1 / (3 * d);
      base.ffn2 = base.ffn2_bias = 1 / (3 * hidden);
      table_var = 1;
      break;
  }
  base.ffn_gate = base.ffn1;  // the gated FFN's V has W1's shape and fan-in
  base.ffn_gate_bias = base.ffn1_bias;
  if (scaling.enabled) {
    require_positive(fn, "beta2_k", scaling.k);
    require_finite(fn, "beta2_alpha", scaling.alpha);
    const double beta2 = scaling.k / std::pow(N, scaling.alpha);
    if (!(beta2 > 0 && beta2 <= 1))
      detail::raise_domain(fn, "beta^2 = k/N^alpha", beta2, "(0, 1] (lambda^2 = 1 - beta^2 must be >= 0)");
    base.set_residual(std::sqrt(1 - beta2), std::sqrt(beta2));
  }
  for (const auto& [name, value] : {std::pair{"overrides.embedding", overrides.embedding}, std::pair{"overrides.q", overrides.q},
                                    std::pair{"overrides.k", overrides.k}, std::pair{"overrides.v", overrides.v},
                                    std::pair{"overrides.o", overrides.o}, std::pair{"overrides.ffn1", overrides.ffn1},
                                    std::pair{"overrides.ffn2", overrides.ffn2}, std::pair{"overrides.bias", overrides.bias},
                                    std::pair{"overrides.q_bias", overrides.q_bias}, std::pair{"overrides.k_bias", overrides.k_bias},
                                    std::pair{"overrides.v_bias", overrides.v_bias}, std::pair{"overrides.o_bias", overrides.o_bias},
                                    std::pair{"overrides.ffn1_bias", overrides.ffn1_bias},
                                    std::pair{"overrides.ffn2_bias", overrides.ffn2_bias}})
    if (value) require_variance(fn, name, *value);
  if (!input.measured) detail::require_vocab(fn, input.vocab);
  if (overrides.embedding) table_var = *overrides.embedding;
  const auto apply = [&](LayerWeights& w) {
    if (overrides.q) w.q = *overrides.q;
    if (overrides.k) w.k = *overrides.k;
    if (overrides.v) w.v = *overrides.v;
    if (overrides.o) w.o = *overrides.o;
    if (overrides.ffn1) w.ffn1 = w.ffn_gate = *overrides.ffn1;
    if (overrides.ffn2) w.ffn2 = *overrides.ffn2;
    if (overrides.bias)
      w.q_bias = w.k_bias = w.v_bias = w.o_bias = w.ffn1_bias = w.ffn2_bias = w.ffn_gate_bias = *overrides.bias;
    for (const auto& [slot, value] : {std::pair{&w.q_bias, overrides.q_bias}, std::pair{&w.k_bias, overrides.k_bias},
                                      std::pair{&w.v_bias, overrides.v_bias}, std::pair{&w.o_bias, overrides.o_bias},
                                      std::pair{&w.ffn1_bias, overrides.ffn1_bias},
                                      std::pair{&w.ffn_gate_bias, overrides.ffn1_bias},
                                      std::pair{&w.ffn2_bias, overrides.ffn2_bias}})
      if (value) *slot = *value;
  };

  ModelWeights weights;
  if (input.measured) {
    weights.input = Embedding<double>::measured(*input.measured).forward({});
  } else {
    weights.embedding_var = table_var;
    weights.embedding_scale = embedding_scale;
    weights.embedding_layernorm = embedding_layernorm;
    check_result(fn, "embedding_scale^2 * embedding_var", embedding_scale * embedding_scale * table_var);
    InputSpec tables = input;
    tables.embedding_layernorm = embedding_layernorm;
    const EmbeddingMoments e = embedding_moments(config, tables, {table_var, table_var, table_var}, embedding_scale);
    weights.embedding_output = e.output;
    weights.input = e.input;
  }
  weights.layers.assign(config.layers, base);
  for (std::size_t n = 0; n < weights.layers.size(); ++n) {
    LayerWeights& w = weights.layers[n];
    if (scheme == Scheme::ds_init) {  // variance 1/l in layer l (std 1/sqrt l)
      const double l = static_cast<double>(n + 1);
      for (double* x : {&w.q, &w.k, &w.v, &w.o, &w.ffn1, &w.ffn2, &w.ffn_gate}) *x /= l;
    }
    apply(w);
  }
  if (scheme == Scheme::dslm) detail::solve_dslm(config, overrides, weights);
  if ((scheme == Scheme::admin || scheme == Scheme::admin_code) && !scaling.enabled)
    detail::solve_admin(config, scheme == Scheme::admin_code, weights);
  return weights;
}

}  // namespace sigprop
