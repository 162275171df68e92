// sigprop/models/stack.hpp -- whole transformers: Pre-LN and Post-LN stacks
// with scaled residuals, and the per-layer trace of forward and backward
// moments at initialization.
//
// Reference: Kedia et al. (ICML 2024), section 2 and appendix G. Each
// sublayer is built by composing components, nothing is re-derived:
//   Pre-LN : residual(serial(LayerNorm(d), block), lambda, beta)
//   Post-LN: serial(residual(block, lambda, beta), LayerNorm(d))
// with block = attention_block(...) or ffn_block<Relu|Gelu>(...).
#pragma once

#include <cstddef>
#include <vector>

#include "sigprop/blocks/attention_block.hpp"
#include "sigprop/blocks/ffn_block.hpp"
#include "sigprop/blocks/residual.hpp"
#include "sigprop/components/layernorm.hpp"
#include "sigprop/models/config.hpp"

namespace sigprop {

/// One boundary of the residual stream: its forward moments and the moments
/// of the gradient of the loss with respect to it.
struct TraceRow {
  std::size_t layer = 0;
  Moments<double> forward;
  GradMoments<double> backward;
  /// Validity measures of the closed forms that produced this row (the
  /// worst over the layer's sublayers; core/domain.hpp). 0 for the input row.
  Domain<double> domain;
  /// The flags of `domain` with the default limits.
  Caveat caveats() const { return sigprop::caveats(domain); }
};

/// Per-layer record: rows[n] for n = 0..N (n = 0 the model input, n the
/// output of layer n); mid[n - 1] after layer n's attention sublayer; output
/// is what the model emits (after the final LayerNorm when there is one).
struct Trace {
  std::vector<TraceRow> rows;
  std::vector<TraceRow> mid;
  TraceRow output;
};

namespace detail {

// A sublayer around `block`, placed according to the architecture.
template <class Block, class Apply>
auto with_sublayer(const ModelConfig& c, const LayerWeights& w, Block block, Apply apply) {
  const double d = static_cast<double>(c.d);
  if (c.arch == Arch::pre_ln)
    return apply(residual(serial(LayerNorm<double>(d), std::move(block)), w.skip_scale, w.branch_scale));
  return apply(serial(residual(std::move(block), w.skip_scale, w.branch_scale), LayerNorm<double>(d)));
}

inline auto make_attention_block(const ModelConfig& c, const LayerWeights& w) {
  return attention_block<double>(static_cast<double>(c.d), static_cast<double>(c.heads),
                                 static_cast<double>(c.seq_len), {w.q, w.k, w.v, w.o}, c.dropout,
                                 c.attention_gradient);
}

template <class Activation>
auto make_ffn_block(const ModelConfig& c, const LayerWeights& w) {
  return ffn_block<Activation>(static_cast<double>(c.d), static_cast<double>(c.ffn_mult), w.ffn1,
                               w.ffn2, c.dropout);
}

template <class Activation>
Trace trace_with(const ModelConfig& c, const ModelWeights& weights, const GradMoments<double>& top) {
  const std::size_t N = c.layers;
  Trace t;
  t.rows.resize(N + 1);
  t.mid.resize(N);
  t.rows[0].forward = weights.input;
  for (std::size_t n = 0; n < N; ++n) {
    const LayerWeights& w = weights.layers[n];
    const auto fwd = [](const Moments<double>& x) {
      return [&x](const auto& sub) { return sub.forward(x); };
    };
    const auto domain = [](const Moments<double>& x) {
      return [&x](const auto& sub) { return sub.domain(x); };
    };
    t.mid[n].layer = n + 1;
    t.mid[n].forward = with_sublayer(c, w, make_attention_block(c, w), fwd(t.rows[n].forward));
    t.mid[n].domain = with_sublayer(c, w, make_attention_block(c, w), domain(t.rows[n].forward));
    t.rows[n + 1].layer = n + 1;
    t.rows[n + 1].forward = with_sublayer(c, w, make_ffn_block<Activation>(c, w), fwd(t.mid[n].forward));
    t.rows[n + 1].domain = t.mid[n].domain.worst(
        with_sublayer(c, w, make_ffn_block<Activation>(c, w), domain(t.mid[n].forward)));
  }
  t.output = t.rows[N];
  t.rows[N].backward = top;
  if (c.arch == Arch::pre_ln && c.final_layernorm) {
    const LayerNorm<double> final_norm(static_cast<double>(c.d));
    t.output.forward = final_norm.forward(t.rows[N].forward);
    t.rows[N].backward = final_norm.backward(t.rows[N].forward, top);
  }
  t.output.backward = top;
  for (std::size_t n = N; n-- > 0;) {
    const LayerWeights& w = weights.layers[n];
    const auto bwd = [](const Moments<double>& x, const GradMoments<double>& g) {
      return [&x, &g](const auto& sub) { return sub.backward(x, g); };
    };
    t.mid[n].backward = with_sublayer(c, w, make_ffn_block<Activation>(c, w),
                                      bwd(t.mid[n].forward, t.rows[n + 1].backward));
    t.rows[n].backward = with_sublayer(c, w, make_attention_block(c, w),
                                       bwd(t.rows[n].forward, t.mid[n].backward));
  }
  return t;
}

}  // namespace detail

/// The layers (1-based) whose closed forms are outside the validated region,
/// with the worst measures over them; empty when the whole trace is inside.
struct DomainSummary {
  std::vector<std::size_t> layers;
  Domain<double> worst;
  bool empty() const { return layers.empty(); }
};

inline DomainSummary outside_domain(const Trace& t, const DomainLimits& limits = {}) {
  DomainSummary s;
  for (const TraceRow& row : t.rows) {
    if (!any(caveats(row.domain, limits))) continue;
    s.layers.push_back(row.layer);
    s.worst = s.worst.worst(row.domain);
  }
  return s;
}

/// The per-layer trace of a model of shape `config` initialized with
/// `weights`, given the gradient moments at the model output (default:
/// variance 1, correlation 0).
inline Trace trace(const ModelConfig& config, const ModelWeights& weights,
                   const GradMoments<double>& grad_top = {1, 0}) {
  constexpr const char* fn = "sigprop::trace";
  config.validate(fn);
  require_grad_moments(fn, grad_top);
  require_moments(fn, weights.input);
  if (weights.layers.size() != config.layers)
    throw domain_error(std::string(fn) + ": weights.layers.size() = " +
                       std::to_string(weights.layers.size()) +
                       " is outside the valid range {layers = " + std::to_string(config.layers) + "}");
  return config.activation == FfnActivation::relu
             ? detail::trace_with<Relu<double>>(config, weights, grad_top)
             : detail::trace_with<Gelu<double>>(config, weights, grad_top);
}

}  // namespace sigprop
