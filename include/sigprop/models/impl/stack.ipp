// sigprop/models/impl/stack.ipp -- the definitions of models/stack.hpp:
// inline in the header-only build, compiled once into sigprop::compiled with
// SIGPROP_SEPARATE_COMPILATION (docs/architecture.md).
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <type_traits>
#include <vector>

#include "sigprop/models/detail/trace_with.hpp"
#include "sigprop/models/stack.hpp"

namespace sigprop {

namespace detail {

// Lanes [at, at + count) of `to` from the first `count` lanes of `from`.
inline void scatter(const BasicTraceRow<BatchChunk>& from, BasicTraceRow<Batch>& to, Eigen::Index at,
                    Eigen::Index count) {
  const auto put = [&](Batch& y, const BatchChunk& x) { y.segment(at, count) = x.head(count); };
  for_each_row_field(put, to, from);
}

// A batched row of `lanes` lanes, every field sized.
inline BasicTraceRow<Batch> batch_row(std::size_t layer, Eigen::Index lanes) {
  BasicTraceRow<Batch> r;
  r.layer = layer;
  const auto size = [lanes](Batch& x) { x.resize(lanes); };
  for_each_row_field(size, r);
  return r;
}

}  // namespace detail

SIGPROP_DECL Trace trace(const ModelConfig& config, const ModelWeights& weights, const GradMoments<double>& grad_top) {
  return detail::checked_trace(config, weights, grad_top, nullptr);
}

SIGPROP_DECL BatchTrace trace_batch(const std::vector<ModelConfig>& configs, const std::vector<ModelWeights>& weights,
                                    const GradMoments<double>& grad_top) {
  constexpr const char* fn = "sigprop::trace_batch";
  if (configs.empty()) detail::raise_domain(fn, "configs.size()", "0", "[1, inf)");
  if (weights.size() != configs.size())
    detail::raise_domain(fn, "weights.size()", std::to_string(weights.size()),
                         "{configs.size() = " + std::to_string(configs.size()) + "}");
  require_grad_moments(fn, grad_top);
  const ModelConfig& first = configs.front();
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const ModelConfig& c = configs[i];
    c.validate(fn);
    require_moments(fn, weights[i].input);
    if (detail::structure_of(c) != detail::structure_of(first))  // a batch shares its structure
      detail::raise_domain(fn, "configs[" + std::to_string(i) +
                                   "].arch, activation, layers, final_layernorm, attention_gradient, norm, causal, "
                                   "gated_ffn, rotary_base or logit_scale differs from configs[0]'s: a batch shares its structure");
    if (weights[i].layers.size() != c.layers)
      detail::raise_domain(fn, "weights[" + std::to_string(i) + "].layers.size()",
                           std::to_string(weights[i].layers.size()), "{layers = " + std::to_string(c.layers) + "}");
  }
  const std::size_t n = configs.size(), N = first.layers;
  const auto lanes = static_cast<Eigen::Index>(n);
  BatchTrace out;
  for (std::size_t k = 0; k <= N; ++k) out.rows.push_back(detail::batch_row(k, lanes));
  for (std::size_t k = 1; k <= N; ++k) out.mid.push_back(detail::batch_row(k, lanes));
  out.output = detail::batch_row(N, lanes);
  StackShape<BatchChunk> s;
  s.structure() = detail::structure_of(first);
  std::vector<BatchLayerWeights<BatchChunk>> layers(N);
  Moments<BatchChunk> input;
  GradMoments<BatchChunk> top;
  for_each_field([](BatchChunk& to, double from) { to.setConstant(from); }, top, grad_top);
  for (std::size_t start = 0; start < n; start += batch_chunk) {
    const std::size_t count = std::min<std::size_t>(batch_chunk, n - start);
    for (int j = 0; j < batch_chunk; ++j) {
      // Lanes past the end repeat the last configuration (computed, not kept).
      const std::size_t i = start + std::min<std::size_t>(static_cast<std::size_t>(j), count - 1);
      const auto put = [j](BatchChunk& to, double from) { to(j) = from; };
      const StackShape<double> one = detail::shape_of(configs[i]);
      for_each_field(put, s, one);
      for_each_field(put, input, weights[i].input);
      for (std::size_t k = 0; k < N; ++k) for_each_field(put, layers[k], weights[i].layers[k]);
    }
    const BasicTrace<BatchChunk> chunk = detail::trace_dispatch(s, layers, input, top);
    const auto at = static_cast<Eigen::Index>(start), c = static_cast<Eigen::Index>(count);
    for (std::size_t k = 0; k <= N; ++k) detail::scatter(chunk.rows[k], out.rows[k], at, c);
    for (std::size_t k = 0; k < N; ++k) detail::scatter(chunk.mid[k], out.mid[k], at, c);
    detail::scatter(chunk.output, out.output, at, c);
  }
  return out;
}

}  // namespace sigprop
