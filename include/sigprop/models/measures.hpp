// sigprop/models/measures.hpp -- whole-model figures read off a trace.
//
//   residual dependency  beta_ii^2 = Var[beta f] / Var[lambda x + beta f]
//                        (Liu et al., EMNLP 2020, "Admin", section 4.1)
//   output change        sum_i beta_ii^2                      (Admin, Theorem 2)
//   sensitivity          median_i N beta_ii^2 / (1 - beta_ii^2)
//                        (Kedia et al., ICML 2024, "Discussion of relative strength")
//   weight gradients     E||dLoss/dW||_F^2 of Q, K, V, O, W1, W2
//                        (Xiong et al., ICML 2020, Theorem 1)
//   Spike No More bounds FFN 1 + sigma_1 sigma_2 (sqrt d + sqrt d_ffn)^2 / sigma_x' (Eq. 15),
//                        attention 1 + sigma_O C_attn / sigma_x (Eq. 20 with Eq. 75)
//                        (Takase et al. 2024)
// docs/schemes.md, "Quantities in the trace", has the forms, their
// generalizations and their checks against simulation.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "sigprop/config.hpp"
#include "sigprop/models/config.hpp"
#include "sigprop/models/stack.hpp"

namespace sigprop {

/// beta_{i,i}^2 of every sublayer in order: attention of layer 1, FFN of
/// layer 1, attention of layer 2, ...
inline std::vector<double> residual_shares(const Trace& t) {
  std::vector<double> out;
  for (std::size_t n = 0; n < t.mid.size(); ++n) {
    out.push_back(t.mid[n].residual_share);
    out.push_back(t.rows[n + 1].residual_share);
  }
  return out;
}

/// Admin's output-change estimate sum_i beta_{i,i}^2 (Theorem 2, up to its constant).
inline double output_change(const Trace& t) {
  double sum = 0;
  for (double s : residual_shares(t)) sum += s;
  return sum;
}

/// The per-sublayer sensitivity terms N beta_{i,i}^2 / (1 - beta_{i,i}^2)
/// (+inf where the skip path is 0, as in Admin's first sublayer).
inline std::vector<double> sensitivity_terms(const Trace& t) {
  const double N = static_cast<double>(t.mid.size());
  std::vector<double> out;
  for (double s : residual_shares(t))
    out.push_back(s < 1 ? N * s / (1 - s) : std::numeric_limits<double>::infinity());
  return out;
}

/// The sensitivity as the DeepScaleLM paper uses it: the median of the
/// per-sublayer terms (the mean of an even count's two middle terms).
inline double sensitivity(const Trace& t) {
  std::vector<double> v = sensitivity_terms(t);
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t k = v.size() / 2;
  return v.size() % 2 ? v[k] : (v[k - 1] + v[k]) / 2;
}

/// E||dLoss/dW||_F^2 of one layer's weight matrices over one sequence of L
/// positions (the loss summed over positions; Q, K and V summed over the
/// heads, i.e. the d x d matrices). `query` and `key` are
/// Attention::weight_grad_sq's with the layer input's hidden spread as the
/// trace carries it
/// (core/hidden_spread.hpp); `key_isotropic` the same with the input taken
/// as isotropic (Attention::weight_grad_sq with spread 1), right for a
/// Gaussian input such as the first layer's and low in deeper layers
/// (docs/schemes.md, "Quantities in the trace").
struct WeightGradNorms {
  double v = 0, o = 0, ffn1 = 0, ffn2 = 0, key = 0, key_isotropic = 0, query = 0;
};

namespace detail {

// `weights` and `t` belong to `config`: one entry per layer (t.rows one more),
// every row's moments valid.
inline void require_trace_of(const char* fn, const ModelConfig& config, const ModelWeights& weights, const Trace& t) {
  if (weights.layers.size() != config.layers || t.mid.size() != config.layers ||
      t.rows.size() != config.layers + 1)
    raise_domain(fn, "weights.layers.size() = " + std::to_string(weights.layers.size()) + ", t.mid.size() = " +
                         std::to_string(t.mid.size()) + " and t.rows.size() = " + std::to_string(t.rows.size()) +
                         " are outside the valid range {layers = " + std::to_string(config.layers) +
                         ", layers, layers + 1}");
  for (const auto& [rows, name] : {std::pair{&t.rows, "t.rows"}, std::pair{&t.mid, "t.mid"}})
    for (std::size_t i = 0; i < rows->size(); ++i) {
      // An invalid row is named after the function: "t.rows[i]: var = ...".
      const std::string where = std::string(fn) + ": " + name + "[" + std::to_string(i) + "]";
      require_moments(where.c_str(), (*rows)[i].forward);
      require_grad_moments(where.c_str(), (*rows)[i].backward);
    }
}

// A layer's weight variances in [0, inf) and residual scales finite, named
// `layers[n].field`.
inline void require_layer_weights(const char* fn, std::size_t n, const LayerWeights& w) {
  const std::string at = "layers[" + std::to_string(n) + "].";
  const std::pair<const char*, double> variances[] = {{"q", w.q}, {"k", w.k}, {"v", w.v}, {"o", w.o},
                                                      {"ffn1", w.ffn1}, {"ffn2", w.ffn2}};
  for (const auto& [name, value] : variances) require_variance(fn, (at + name).c_str(), value);
  const std::pair<const char*, double> scales[] = {{"attn_skip", w.attn_skip}, {"attn_branch", w.attn_branch},
                                                   {"ffn_skip", w.ffn_skip}, {"ffn_branch", w.ffn_branch}};
  for (const auto& [name, value] : scales) require_finite(fn, (at + name).c_str(), value);
}

// The measures below are derived for the encoder stacks (full attention,
// plain FFN, LayerNorm); the decoder options are rejected by name.
inline void require_encoder(const char* fn, const ModelConfig& c) {
  if (!is_encoder(c))
    raise_domain(fn, "the model (" + architecture_name(c) + ", " + to_string(c.activation) +
                         ") is outside the valid range (encoder stacks: full attention, plain ReLU/GeLU FFN, "
                         "LayerNorm); not derived for decoders yet");
}

}  // namespace detail

/// The weight-gradient norms of every layer of the model `config`
/// initialized with `weights`, whose trace is `t` (from trace()).
SIGPROP_DECL std::vector<WeightGradNorms> weight_grad_norms(const ModelConfig& config, const ModelWeights& weights,
                                                            const Trace& t);

/// Takase et al.'s bounds for one layer: attention (Eq. 20) and FFN (Eq. 15).
struct SpikeBounds {
  double attention = 0, ffn = 0;
};

/// The bounds of every layer of a Pre-LN model `config` with `weights`,
/// whose trace is `t`.
inline std::vector<SpikeBounds> spike_bounds(const ModelConfig& config, const ModelWeights& weights, const Trace& t) {
  constexpr const char* fn = "sigprop::spike_bounds";
  config.validate(fn);
  if (config.arch != Arch::pre_ln)
    detail::raise_domain(fn, "arch", to_string(config.arch), "{pre-ln} (the bounds are derived for Pre-LN layers)");
  if (config.gated_ffn)
    detail::raise_domain(fn, "gated_ffn", "true", "{false} (Eq. 15 is for the plain FFN)");
  detail::require_trace_of(fn, config, weights, t);
  using std::sqrt;
  const double d = static_cast<double>(config.d), h = static_cast<double>(config.heads);
  const double d_head = d / h, d_ffn = static_cast<double>(config.hidden_width());
  const double L = static_cast<double>(config.seq_len);
  const double c_ffn = (sqrt(d) + sqrt(d_ffn)) * (sqrt(d) + sqrt(d_ffn));
  // sigma_x of the bounds: the spread of a row across the hidden units, > 0.
  const auto spread = [&](const Moments<double>& x, const std::string& where) {
    const double s2 = x.var * (1 - x.corr_dim);
    if (!(s2 > 0))
      detail::raise_domain(fn, where + " var * (1 - corr_dim)", s2, "(0, inf) (the bounds divide by it)");
    return sqrt(s2);
  };
  std::vector<SpikeBounds> out;
  for (std::size_t n = 0; n < config.layers; ++n) {
    const LayerWeights& w = weights.layers[n];
    detail::require_layer_weights(fn, n, w);
    const double sq = sqrt(w.q), sk = sqrt(w.k), sv = sqrt(w.v);
    const double jz = h * ((sqrt(L) + 2 + 1 / sqrt(L)) * sq * sk * sv * sqrt(d * d * d * d_head) +
                           sv * (sqrt(d) + sqrt(d_head)));  // Eq. 75
    const double c_attn = 2 * sqrt(d) * jz;
    SpikeBounds b;
    const std::string at = "[" + std::to_string(n) + "]";
    b.attention = w.attn_skip + w.attn_branch * sqrt(w.o) * c_attn / spread(t.rows[n].forward, "t.rows" + at);
    b.ffn = w.ffn_skip + w.ffn_branch * sqrt(w.ffn1) * sqrt(w.ffn2) * c_ffn / spread(t.mid[n].forward, "t.mid" + at);
    check_result(fn, "attention bound", b.attention);
    check_result(fn, "ffn bound", b.ffn);
    out.push_back(b);
  }
  return out;
}

/// log10 of the gradient-norm bound's factor, the product of all layers'
/// bounds (Eq. 7), kept as a logarithm because it overflows at depth.
inline double spike_bound_log10(const std::vector<SpikeBounds>& bounds) {
  double sum = 0;
  for (const SpikeBounds& b : bounds) sum += std::log10(b.attention) + std::log10(b.ffn);
  return sum;
}

}  // namespace sigprop

#ifdef SIGPROP_HEADER_ONLY
#include "sigprop/models/impl/measures.ipp"
#endif
