// sigprop/models/schemes.hpp -- initialization schemes: per-layer weight
// variances and residual scales for a model shape.
//
// References: Kedia et al. (ICML 2024) section 3.5 and appendices G.3-G.6, N
// (DeepScaleLM); Glorot and Bengio (AISTATS 2010) for Xavier; Devlin et al.
// (NAACL 2019) for BERT's N(0, 0.02^2).
//
//   xavier      every matrix 2/(fan_in + fan_out); Q/K/V per head (d x d/H), as
//               in the paper, so C1 = d^2 so sv/(1-p) ~ 2.2 and C2 ~ 0.4 at p = 0.1
//   bert        every matrix (and embedding table) 0.02^2
//   dslm-simple Q, K: 1/d; V, O, W1, W2: (1/d) sqrt((1-p)/2) (block output
//               variance 1 for a ReLU FFN with m = 4); beta^2 = k/N^alpha
//   dslm        Q, K: 1/d; V = O and W1 = W2 chosen per layer so that each block
//               outputs variance exactly 1 given the moments that reach it
//               (the paper's (1/d) sqrt((1-p)/r_n) is the large-L, r > 0 limit
//               of this, and blows up as r -> 0; solving the closed forms for
//               unit variance does not). beta^2 = k/N^alpha.
// Embeddings: K tables followed by dropout; each table gets (1-p)/K so the
// model input has variance 1 (all schemes but bert).
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include <boost/math/tools/roots.hpp>

#include "sigprop/components/embedding.hpp"
#include "sigprop/models/stack.hpp"

namespace sigprop {

enum class Scheme { xavier, bert, dslm, dslm_simple };

inline const char* to_string(Scheme s) {
  switch (s) {
    case Scheme::xavier: return "xavier";
    case Scheme::bert: return "bert";
    case Scheme::dslm: return "dslm";
    case Scheme::dslm_simple: return "dslm-simple";
  }
  return "?";
}

/// What feeds the first layer: an embedding (tables summed, then dropout) or
/// measured input moments.
struct InputSpec {
  double vocab = 32000;
  bool token = true, position = true, segment = true;
  std::optional<Moments<double>> measured;  ///< replaces the embedding model when set
};

/// beta^2 = k / N^alpha, lambda^2 = 1 - beta^2 (DeepScaleLM, section 3.5).
struct ResidualScaling {
  double k = 2;
  double alpha = 1;
  bool enabled = false;  ///< applied by the dslm schemes; set to apply it to any scheme
};

/// Explicit per-entry variances that replace the scheme's, in every layer.
struct WeightOverrides {
  std::optional<double> embedding, q, k, v, o, ffn1, ffn2;
};

namespace detail {

inline double table_count(const InputSpec& in) {
  return static_cast<double>(in.token) + static_cast<double>(in.position) + static_cast<double>(in.segment);
}

/// Model input moments: Dropout(p)(Embedding(tables)).
inline Moments<double> embedding_input(const ModelConfig& c, const InputSpec& in, double table_var) {
  if (in.measured) return Embedding<double>::measured(*in.measured).forward({});
  EmbeddingConfig<double> e;
  e.vocab = in.vocab;
  e.seq_len = static_cast<double>(c.seq_len);
  e.weight_var = table_var;
  e.token = in.token;
  e.position = in.position;
  e.segment = in.segment;
  return Dropout<double>(c.dropout).forward(Embedding<double>(e).forward({}));
}

/// The variance s that makes `output_var(s)` equal 1, where output_var grows
/// with s (TOMS 748 on log s after bracketing; Boost.Math tools/roots.hpp).
template <class F>
double solve_unit_variance(const char* what, F output_var, double guess) {
  const auto f = [&](double log_s) { return std::log(output_var(std::exp(log_s))); };
  std::uintmax_t iterations = 200;
  const auto r = boost::math::tools::bracket_and_solve_root(
      f, std::log(guess), 2.0, true, boost::math::tools::eps_tolerance<double>(40), iterations);
  if (iterations >= 200)
    throw domain_error(std::string("sigprop::initialize: no variance gives unit output for ") + what);
  return std::exp((r.first + r.second) / 2);
}

}  // namespace detail

/// Per-layer weights of `scheme` for the model shape `config`.
inline ModelWeights initialize(const ModelConfig& config, Scheme scheme, const InputSpec& input = {},
                               ResidualScaling scaling = {}, const WeightOverrides& overrides = {}) {
  constexpr const char* fn = "sigprop::initialize";
  config.validate(fn);
  const double d = static_cast<double>(config.d), dk = static_cast<double>(config.head_width());
  const double m = static_cast<double>(config.ffn_mult), p = config.dropout;
  const double N = static_cast<double>(config.layers);
  const bool dslm = scheme == Scheme::dslm || scheme == Scheme::dslm_simple;
  if (dslm) scaling.enabled = true;
  double beta2 = 1, lambda2 = 1;
  if (scaling.enabled) {
    require_positive(fn, "beta2_k", scaling.k);
    require_finite(fn, "beta2_alpha", scaling.alpha);
    beta2 = scaling.k / std::pow(N, scaling.alpha);
    if (!(beta2 > 0 && beta2 <= 1))
      throw domain_error(std::string(fn) + ": beta^2 = k/N^alpha = " + sigprop::detail::format_number(beta2) +
                         " is outside the valid range (0, 1] (lambda^2 = 1 - beta^2 must be >= 0)");
    lambda2 = 1 - beta2;
  }

  LayerWeights base;
  base.skip_scale = std::sqrt(lambda2);
  base.branch_scale = std::sqrt(beta2);
  double table_var = (1 - p) / std::max(detail::table_count(input), 1.0);
  switch (scheme) {
    case Scheme::xavier:
      base.q = base.k = base.v = 2 / (d + dk);
      base.o = 1 / d;
      base.ffn1 = base.ffn2 = 2 / (d + m * d);
      break;
    case Scheme::bert:
      base.q = base.k = base.v = base.o = base.ffn1 = base.ffn2 = 0.02 * 0.02;
      table_var = 0.02 * 0.02;
      break;
    case Scheme::dslm:
    case Scheme::dslm_simple:
      base.q = base.k = 1 / d;
      base.v = base.o = base.ffn1 = base.ffn2 = std::sqrt((1 - p) / 2) / d;
      break;
  }
  if (overrides.embedding) table_var = *overrides.embedding;
  const auto apply = [&](LayerWeights& w) {
    if (overrides.q) w.q = *overrides.q;
    if (overrides.k) w.k = *overrides.k;
    if (overrides.v) w.v = *overrides.v;
    if (overrides.o) w.o = *overrides.o;
    if (overrides.ffn1) w.ffn1 = *overrides.ffn1;
    if (overrides.ffn2) w.ffn2 = *overrides.ffn2;
  };
  apply(base);

  ModelWeights weights;
  weights.embedding_var = input.measured ? 0 : table_var;
  weights.input = detail::embedding_input(config, input, table_var);
  weights.layers.assign(config.layers, base);
  if (scheme != Scheme::dslm) return weights;

  // Full DeepScaleLM: walk the stack, choosing V = O and W1 = W2 per layer so
  // that each block outputs unit variance for the moments that reach it.
  Moments<double> x = weights.input;
  for (auto& w : weights.layers) {
    const auto block_input = [&](const Moments<double>& s) {
      return config.arch == Arch::pre_ln ? LayerNorm<double>(d).forward(s) : s;
    };
    const Moments<double> h = block_input(x);
    if (!overrides.v && !overrides.o) {
      const double s = detail::solve_unit_variance("the attention block", [&](double vo) {
        LayerWeights t = w;
        t.v = t.o = vo;
        return detail::make_attention_block(config, t).forward(h).var;
      }, w.v);
      w.v = w.o = s;
    }
    const auto sub_attn = [&](const auto& sub) { return sub.forward(x); };
    const Moments<double> mid = detail::with_sublayer(config, w, detail::make_attention_block(config, w), sub_attn);
    const Moments<double> h2 = block_input(mid);
    if (!overrides.ffn1 && !overrides.ffn2) {
      const double s = detail::solve_unit_variance("the FFN block", [&](double f) {
        LayerWeights t = w;
        t.ffn1 = t.ffn2 = f;
        return config.activation == FfnActivation::relu
                   ? detail::make_ffn_block<Relu<double>>(config, t).forward(h2).var
                   : detail::make_ffn_block<Gelu<double>>(config, t).forward(h2).var;
      }, w.ffn1);
      w.ffn1 = w.ffn2 = s;
    }
    const auto sub_ffn = [&](const auto& sub) { return sub.forward(mid); };
    x = config.activation == FfnActivation::relu
            ? detail::with_sublayer(config, w, detail::make_ffn_block<Relu<double>>(config, w), sub_ffn)
            : detail::with_sublayer(config, w, detail::make_ffn_block<Gelu<double>>(config, w), sub_ffn);
  }
  return weights;
}

}  // namespace sigprop
