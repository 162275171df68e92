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

#include "sigprop/config.hpp"
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
  WeightOverrides overrides;  ///< e.g. the bias variances
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

/// Summaries of every point, in the order given, with gradient `grad_top` at
/// each model's output. For a causal Pre-LN point (has_position_gradients,
/// models/positions.hpp) the gradient figures are those of the average over
/// the positions (trace_position_gradients, O(N L^2) per point), as
/// `sigprop table` prints them. Throws domain_error (naming the point) for an invalid
/// one. A point whose trace overflows does not stop the sweep: its summary has
/// `overflow` set. The other points of its group are traced again without it,
/// so a point's figures do not depend on which other points diverge.
SIGPROP_DECL std::vector<SweepSummary> sweep(const std::vector<SweepPoint>& points, const SweepBounds& bounds = {},
                                             const GradMoments<double>& grad_top = {1, 0});

}  // namespace sigprop

#ifdef SIGPROP_HEADER_ONLY
#include "sigprop/models/impl/sweep.ipp"
#endif
