// sigprop/models/sweep.hpp -- design-space sweeps: many model configurations
// evaluated through the batched trace, each summarized by the figures a
// practitioner screens designs with.
//
// The points are grouped by structure (arch, activation, depth, final
// LayerNorm), each group is initialized point by point (the schemes solve
// per configuration) and traced in one trace_batch call, one lane per point.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "sigprop/models/measures.hpp"
#include "sigprop/models/schemes.hpp"
#include "sigprop/models/stack.hpp"

namespace sigprop {

/// One configuration of a sweep: the model shape and its initialization.
struct SweepPoint {
  ModelConfig config;
  Scheme scheme = Scheme::xavier;
  ResidualScaling scaling;  ///< beta^2 = k/N^alpha (dslm schemes always; others when enabled)
  InputSpec input;
};

/// The band the per-layer variances must stay in: the forward variance of
/// every layer output (n = 1..N) and the gradient variance at every layer
/// boundary (n = 0..N) relative to the gradient variance at the model output.
struct SweepBounds {
  double low = 0.5;
  double high = 2;
};

/// The summary of one configuration's trace.
struct SweepSummary {
  double final_var = 0;        ///< forward variance at the output of layer N
  double final_corr_len = 0;   ///< its length correlation r^l
  double var_min = 0, var_max = 0;    ///< forward variance over the layer outputs n = 1..N
  double grad_min = 0, grad_max = 0;  ///< gradient variance over n = 0..N, relative to the top's
  double grad_ratio = 0;       ///< grad_max / grad_min: the spread of gradient scales across layers
  bool within_bounds = false;  ///< every forward and relative gradient variance inside the bounds
  bool outside_domain = false; ///< some layer outside the validated domain (core/domain.hpp)
  double output_change = 0;    ///< Admin's sum of beta_{i,i}^2 over the sublayers (models/measures.hpp)
  double sensitivity = 0;      ///< median over the sublayers of N beta_{i,i}^2 / (1 - beta_{i,i}^2)
  /// The trace overflowed: some moment left double's range (the design
  /// diverges, e.g. Admin's skip scales forced onto Pre-LN). The figures are
  /// then NaN, within_bounds is false and `overflow_message` says where.
  bool overflow = false;
  std::string overflow_message;
};

/// The summary of a trace (the rows as in stack.hpp) against `bounds`.
inline SweepSummary summarize_trace(const Trace& t, const SweepBounds& bounds, const DomainLimits& limits = {}) {
  SweepSummary s;
  const std::size_t N = t.rows.size() - 1;
  s.final_var = t.rows[N].forward.var;
  s.final_corr_len = t.rows[N].forward.corr_len;
  s.var_min = s.var_max = t.rows[1].forward.var;
  const double top = t.output.backward.var;
  s.grad_min = s.grad_max = t.rows[0].backward.var / top;
  for (std::size_t n = 0; n <= N; ++n) {
    const TraceRow& r = t.rows[n];
    if (n > 0) {
      s.var_min = std::min(s.var_min, r.forward.var);
      s.var_max = std::max(s.var_max, r.forward.var);
    }
    s.grad_min = std::min(s.grad_min, r.backward.var / top);
    s.grad_max = std::max(s.grad_max, r.backward.var / top);
  }
  s.grad_ratio = s.grad_max / s.grad_min;
  s.within_bounds = s.var_min >= bounds.low && s.var_max <= bounds.high && s.grad_min >= bounds.low &&
                    s.grad_max <= bounds.high;
  s.outside_domain = !outside_domain(t, limits).empty();
  s.output_change = output_change(t);
  s.sensitivity = sensitivity(t);
  return s;
}

namespace detail {

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

}  // namespace detail

/// Summaries of every point, in the order given, with gradient `grad_top` at
/// each model's output. Throws domain_error (naming the point) for an invalid
/// one. A point whose trace overflows does not stop the sweep: its summary has
/// `overflow` set. The other points of its group are traced again without it,
/// so a point's figures do not depend on which other points diverge.
inline std::vector<SweepSummary> sweep(const std::vector<SweepPoint>& points, const SweepBounds& bounds = {},
                                       const GradMoments<double>& grad_top = {1, 0}) {
  constexpr const char* fn = "sigprop::sweep";
  require_finite(fn, "bounds.low", bounds.low);
  require_finite(fn, "bounds.high", bounds.high);
  if (!(bounds.low <= bounds.high))
    throw domain_error(std::string(fn) + ": bounds.low = " + detail::format_number(bounds.low) +
                       " is outside the valid range (-inf, bounds.high = " + detail::format_number(bounds.high) + "]");
  using Key = std::tuple<int, int, std::size_t, bool, int>;
  std::map<Key, std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const ModelConfig& c = points[i].config;
    groups[{static_cast<int>(c.arch), static_cast<int>(c.activation), c.layers, c.final_layernorm,
            static_cast<int>(c.attention_gradient)}]
        .push_back(i);
  }
  std::vector<SweepSummary> out(points.size());
  for (const auto& [key, members] : groups) {
    std::vector<ModelConfig> configs;
    std::vector<ModelWeights> weights;
    for (std::size_t i : members) {
      const SweepPoint& p = points[i];
      configs.push_back(p.config);
      try {
        weights.push_back(initialize(p.config, p.scheme, p.input, p.scaling));
      } catch (const domain_error& e) {  // name the point
        throw domain_error(std::string(fn) + ": points[" + std::to_string(i) + "]: " + e.what());
      }
    }
    try {
      const BatchTrace batch = trace_batch(configs, weights, grad_top);
      for (std::size_t j = 0; j < members.size(); ++j) out[members[j]] = summarize_trace(lane_of(batch, j), bounds);
      continue;
    } catch (const overflow_error&) {  // some lane diverged: find which, point by point
    }
    std::vector<ModelConfig> kept_configs;
    std::vector<ModelWeights> kept_weights;
    std::vector<std::size_t> kept;
    std::vector<SweepSummary> scalar;  // the fallback, summarized at once (a trace is N rows)
    for (std::size_t j = 0; j < members.size(); ++j) {
      try {
        scalar.push_back(summarize_trace(trace(configs[j], weights[j], grad_top), bounds));
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
      for (std::size_t j = 0; j < kept.size(); ++j) out[kept[j]] = summarize_trace(lane_of(batch, j), bounds);
    } catch (const overflow_error&) {  // a lane at the edge of double's range: its scalar trace did not overflow
      for (std::size_t j = 0; j < kept.size(); ++j) out[kept[j]] = scalar[j];
    }
  }
  return out;
}

}  // namespace sigprop
