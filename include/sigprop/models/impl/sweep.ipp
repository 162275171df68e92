// sigprop/models/impl/sweep.ipp -- the definitions of models/sweep.hpp.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "sigprop/models/positions.hpp"
#include "sigprop/models/sweep.hpp"

namespace sigprop {

namespace detail {

/// The most points of one structure traced in one batch by sweep().
inline constexpr std::size_t sweep_batch = 64;

/// The summary of a point whose trace overflowed (see SweepSummary::overflow).
inline SweepSummary overflowed_summary(const std::string& message) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  SweepSummary s;
  s.final_var = s.final_corr_len = s.var_min = s.var_max = nan;
  s.grad_min = s.grad_max = s.grad_ratio = s.output_change = s.sensitivity = nan;
  s.overflow = true;
  s.overflow_message = message;
  return s;
}

/// A point's trace with, for a causal Pre-LN model (has_position_gradients),
/// every row's gradient the average over its positions (models/positions.hpp).
inline Trace position_averaged(Trace t, const ModelConfig& config, const ModelWeights& weights,
                               const GradMoments<double>& grad_top) {
  if (!has_position_gradients(config)) return t;
  return with_position_gradients(std::move(t), trace_position_gradients(config, weights, {1}, grad_top));
}

}  // namespace detail

SIGPROP_DECL std::vector<SweepSummary> sweep(const std::vector<SweepPoint>& points, const SweepBounds& bounds,
                                             const GradMoments<double>& grad_top) {
  constexpr const char* fn = "sigprop::sweep";
  require_finite(fn, "bounds.low", bounds.low);
  require_finite(fn, "bounds.high", bounds.high);
  if (!(bounds.low <= bounds.high))
    detail::raise_domain(fn, "bounds.low", bounds.low, "(-inf, bounds.high = " + detail::format_number(bounds.high) + "]");
  using Key = std::tuple<int, int, std::size_t, bool, int>;
  std::map<Key, std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const ModelConfig& c = points[i].config;
    groups[{static_cast<int>(c.arch), static_cast<int>(c.activation), c.layers, c.final_layernorm,
            static_cast<int>(c.attention_gradient)}]
        .push_back(i);
  }
  // Each structure's points traced in batches of at most sweep_batch lanes:
  // a trace of thousands of lanes is read lane by lane from arrays beyond
  // the cache (docs/performance.md, "Sweeps").
  std::vector<std::vector<std::size_t>> batches;
  for (const auto& group : groups)
    for (std::size_t start = 0; start < group.second.size(); start += detail::sweep_batch)
      batches.emplace_back(group.second.begin() + static_cast<std::ptrdiff_t>(start),
                           group.second.begin() +
                               static_cast<std::ptrdiff_t>(std::min(start + detail::sweep_batch, group.second.size())));
  std::vector<SweepSummary> out(points.size());
  for (const std::vector<std::size_t>& members : batches) {
    std::vector<ModelConfig> configs;
    std::vector<ModelWeights> weights;
    for (std::size_t i : members) {
      const SweepPoint& p = points[i];
      configs.push_back(p.config);
      try {
        weights.push_back(initialize(p.config, p.scheme, p.input, p.scaling, p.overrides));
      } catch (const domain_error& e) {  // name the point
        detail::raise_domain(fn, "points[" + std::to_string(i) + "]: " + e.what());
      }
    }
    try {
      const BatchTrace batch = trace_batch(configs, weights, grad_top);
      for (std::size_t j = 0; j < members.size(); ++j)
        out[members[j]] =
            summarize_trace(detail::position_averaged(lane_of(batch, j), configs[j], weights[j], grad_top), bounds);
      continue;
    } catch (const overflow_error&) {  // some lane diverged: find which, point by point
    }
    std::vector<ModelConfig> kept_configs;
    std::vector<ModelWeights> kept_weights;
    std::vector<std::size_t> kept;
    std::vector<SweepSummary> scalar;  // the fallback, summarized at once (a trace is N rows)
    for (std::size_t j = 0; j < members.size(); ++j) {
      try {
        scalar.push_back(summarize_trace(
            detail::position_averaged(trace(configs[j], weights[j], grad_top), configs[j], weights[j], grad_top),
            bounds));
        kept_configs.push_back(configs[j]);
        kept_weights.push_back(weights[j]);
        kept.push_back(members[j]);
      } catch (const overflow_error& e) {
        out[members[j]] = detail::overflowed_summary(e.what());
      }
    }
    if (kept.empty()) continue;
    try {
      const BatchTrace batch = trace_batch(kept_configs, kept_weights, grad_top);
      for (std::size_t j = 0; j < kept.size(); ++j)
        out[kept[j]] = summarize_trace(
            detail::position_averaged(lane_of(batch, j), kept_configs[j], kept_weights[j], grad_top), bounds);
    } catch (const overflow_error&) {  // a lane at the edge of double's range: its scalar trace did not overflow
      for (std::size_t j = 0; j < kept.size(); ++j) out[kept[j]] = scalar[j];
    }
  }
  return out;
}

}  // namespace sigprop
