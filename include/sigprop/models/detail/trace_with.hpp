// sigprop/models/detail/trace_with.hpp -- the trace of a stack whose
// runtime settings have become types (models/detail/sublayers.hpp): each
// layer's sublayers forward, their records kept (core/record.hpp), then the
// backward pass from the records. With SIGPROP_SEPARATE_COMPILATION the
// attention sublayer's passes are compiled once per lane type, the rest once
// per lane type and activation (src/trace_*.cpp).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "sigprop/models/detail/forward_pairs.hpp"
#include "sigprop/models/detail/sublayers.hpp"
#include "sigprop/models/stack.hpp"

namespace sigprop {

namespace detail {

// One sublayer's traced passes, its block chosen by `with_block` (a generic
// callable taking `apply`): the forward pass, its record appended to
// `records`, and the backward pass of layer n from that record.
template <class T, class W, class WithBlock>
SublayerForward<T> traced_forward(const WithBlock& with_block, const StackShape<T>& s, const W& w, Sublayer which,
                                  const Moments<T>& x, SublayerRecords& records) {
  return with_block([&](auto block) { return sublayer_forward(s, w, which, std::move(block), x, &records); });
}

template <class T, class W, class WithBlock>
GradMoments<T> traced_backward(const WithBlock& with_block, const StackShape<T>& s, const W& w, Sublayer which,
                               SublayerRecords& records, std::size_t n, const GradMoments<T>& g) {
  // The backward maps from the forward passes' records (no replay); the
  // gradients are checked outputs or the validated top gradient.
  return with_block([&](auto block) {
    return with_sublayer(s, w, which, std::move(block), [&](const auto& sub) {
      using Sub = std::decay_t<decltype(sub)>;
      return detail::backward_recorded(sub, records_of<Sub>(records)[n], g);
    });
  });
}

// The attention sublayer's passes do not depend on the FFN's activation:
// with SIGPROP_SEPARATE_COMPILATION they are compiled once per lane type
// (src/trace_attention_*.cpp), the FFN's once per lane type and activation.
template <class T, class W>
SublayerForward<T> attention_forward(const StackShape<T>& s, const W& w, const Moments<T>& x,
                                     SublayerRecords& records) {
  const auto with_block = [&](auto apply) { return with_attention_block(s, w, std::move(apply)); };
  return traced_forward(with_block, s, w, Sublayer::attention, x, records);
}

template <class T, class W>
GradMoments<T> attention_backward(const StackShape<T>& s, const W& w, SublayerRecords& records, std::size_t n,
                                  const GradMoments<T>& g, const std::optional<KeySpread<T>>& spread) {
  const auto with_block = [&](auto apply) { return with_attention_block(s, w, std::move(apply), spread); };
  return traced_backward(with_block, s, w, Sublayer::attention, records, n, g);
}

template <class Activation, class T, class W>
SublayerForward<T> ffn_forward(const StackShape<T>& s, const W& w, const Moments<T>& x, SublayerRecords& records) {
  const auto with_block = [&](auto apply) { return with_ffn_block<Activation>(s, w, std::move(apply)); };
  return traced_forward(with_block, s, w, Sublayer::ffn, x, records);
}

template <class Activation, class T, class W>
GradMoments<T> ffn_backward(const StackShape<T>& s, const W& w, SublayerRecords& records, std::size_t n,
                            const GradMoments<T>& g) {
  const auto with_block = [&](auto apply) { return with_ffn_block<Activation>(s, w, std::move(apply)); };
  return traced_backward(with_block, s, w, Sublayer::ffn, records, n, g);
}

// The trace; with `positions`, the pairs' columns of each row (lane 0).
template <class Activation, class T, class W>
BasicTrace<T> trace_with(const StackShape<T>& s, const std::vector<W>& layers, const Moments<T>& input,
                         const GradMoments<T>& top, PositionPairs* positions) {
  const std::size_t N = s.layers;
  BasicTrace<T> t;
  t.rows.resize(N + 1);
  t.mid.resize(N);
  t.rows[0].forward = input;
  t.rows[0].domain = Domain<T>::zero_like(input.var);
  t.rows[0].branch_var = t.rows[0].residual_share = 0 * input.var;
  SublayerRecords attention_records{{}, N}, ffn_records{{}, N};  // for the backward pass
  const auto record = [](BasicTraceRow<T>& row, const SublayerForward<T>& f) {
    row.forward = f.out;
    row.branch_var = f.branch_var;
    row.residual_share = f.residual_share;
    row.domain = f.domain;
  };
  // Causal Pre-LN: each row's length correlation from the pairs of positions.
  // With them, each attention sublayer's backward at its keys' spread.
  ForwardPairs pairs = start_forward_pairs(s, layers, input);
  std::vector<std::optional<KeySpread<T>>> spread(N);
  for (std::size_t n = 0; n < N; ++n) {
    t.mid[n].layer = n + 1;
    record(t.mid[n], attention_forward(s, layers[n], t.rows[n].forward, attention_records));
    forward_pairs<Activation>(pairs, Sublayer::attention, s, layers[n], t.rows[n].forward, t.mid[n].forward);
    spread[n] = key_spread_of(pairs, input.var);
    record_columns(pairs, Sublayer::attention, positions);
    t.rows[n + 1].layer = n + 1;
    record(t.rows[n + 1], ffn_forward<Activation>(s, layers[n], t.mid[n].forward, ffn_records));
    forward_pairs<Activation>(pairs, Sublayer::ffn, s, layers[n], t.mid[n].forward, t.rows[n + 1].forward);
    record_columns(pairs, Sublayer::ffn, positions);
    t.rows[n + 1].domain = t.mid[n].domain.worst(t.rows[n + 1].domain);
  }
  t.output = t.rows[N];
  t.rows[N].backward = top;
  if (s.arch == Arch::pre_ln && s.final_layernorm) {
    with_norm(s, [&](const auto& final_norm) {
      t.output.forward = final_norm.forward(t.rows[N].forward);
      t.rows[N].backward = final_norm.backward(t.rows[N].forward, top);
      return 0;
    });
  }
  t.output.backward = top;
  for (std::size_t n = N; n-- > 0;) {
    t.mid[n].backward = ffn_backward<Activation>(s, layers[n], ffn_records, n, t.rows[n + 1].backward);
    t.rows[n].backward = attention_backward(s, layers[n], attention_records, n, t.mid[n].backward, spread[n]);
  }
  return t;
}

#ifdef SIGPROP_SEPARATE_COMPILATION
// Compiled once per lane type (src/trace_attention_*.cpp) and per lane type
// and activation (src/trace_*.cpp).
#define SIGPROP_TRACE_ATTENTION(extern_, T, W)                                                                 \
  extern_ template SublayerForward<T> attention_forward<T, W>(const StackShape<T>&, const W&, const Moments<T>&, \
                                                              SublayerRecords&);                                \
  extern_ template GradMoments<T> attention_backward<T, W>(const StackShape<T>&, const W&, SublayerRecords&,     \
                                                           std::size_t, const GradMoments<T>&,                   \
                                                           const std::optional<KeySpread<T>>&);
SIGPROP_TRACE_ATTENTION(extern, double, LayerWeights)
SIGPROP_TRACE_ATTENTION(extern, BatchChunk, BatchLayerWeights<BatchChunk>)

#define SIGPROP_TRACE_WITH(extern_, Activation, T, W)                                               \
  extern_ template BasicTrace<T> trace_with<Activation<T>, T, W>(const StackShape<T>&, const std::vector<W>&, \
                                                                 const Moments<T>&, const GradMoments<T>&,     \
                                                                 PositionPairs*);
SIGPROP_TRACE_WITH(extern, Relu, double, LayerWeights)
SIGPROP_TRACE_WITH(extern, Gelu, double, LayerWeights)
SIGPROP_TRACE_WITH(extern, Silu, double, LayerWeights)
SIGPROP_TRACE_WITH(extern, Relu, BatchChunk, BatchLayerWeights<BatchChunk>)
SIGPROP_TRACE_WITH(extern, Gelu, BatchChunk, BatchLayerWeights<BatchChunk>)
SIGPROP_TRACE_WITH(extern, Silu, BatchChunk, BatchLayerWeights<BatchChunk>)
#endif

template <class T, class W>
BasicTrace<T> trace_dispatch(const StackShape<T>& s, const std::vector<W>& layers, const Moments<T>& input,
                             const GradMoments<T>& top, PositionPairs* positions = nullptr) {
  return with_activation<T>(s.activation, [&](auto activation) {
    return trace_with<typename decltype(activation)::type>(s, layers, input, top, positions);
  });
}

// trace() (its checks and messages), with `positions` the pairs' columns.
inline Trace checked_trace(const ModelConfig& config, const ModelWeights& weights, const GradMoments<double>& grad_top,
                           PositionPairs* positions) {
  constexpr const char* fn = "sigprop::trace";
  config.validate(fn);
  require_grad_moments(fn, grad_top);
  require_moments(fn, weights.input);
  if (weights.layers.size() != config.layers)
    raise_domain(fn, "weights.layers.size()", std::to_string(weights.layers.size()),
                 "{layers = " + std::to_string(config.layers) + "}");
  return trace_dispatch(shape_of(config), weights.layers, weights.input, grad_top, positions);
}

}  // namespace detail

}  // namespace sigprop
