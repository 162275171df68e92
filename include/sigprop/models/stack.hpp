// sigprop/models/stack.hpp -- whole transformers: Pre-LN, Post-LN and no-LN
// stacks with scaled residuals, and the per-layer trace of forward and
// backward moments at initialization.
//
// Reference: Kedia et al. (ICML 2024), section 2 and appendix G. Each
// sublayer is a composition of components (models/detail/sublayers.hpp);
// each row also records the residual dependency beta_{i,i}^2 of the
// sublayer that produced it (Liu et al. 2020, "Admin", section 4.1).
// docs/models.md; the definitions are in models/impl/stack.ipp.
#pragma once

#include <cstddef>
#include <vector>

#include <Eigen/Core>

#include "sigprop/config.hpp"
#include "sigprop/core/domain.hpp"
#include "sigprop/core/moments.hpp"
#include "sigprop/models/config.hpp"

namespace sigprop {

/// One boundary of the residual stream: its forward moments and the moments
/// of the gradient of the loss with respect to it. T = double for one
/// configuration, an Eigen array for a batch (one lane per configuration).
template <class T>
struct BasicTraceRow {
  std::size_t layer = 0;
  Moments<T> forward;
  GradMoments<T> backward;
  /// Validity measures of the closed forms that produced this row (the
  /// worst over the layer's sublayers; core/domain.hpp). 0 for the input row.
  Domain<T> domain;
  /// Var[f(h)] of the branch of the sublayer that produced this row (before
  /// its scale beta); 0 for the input row.
  T branch_var{0};
  /// Admin's residual dependency beta_{i,i}^2 = Var[beta f] / Var[lambda x + beta f]
  /// of that sublayer (Liu et al. 2020, Eq. 5 with the sum before its
  /// LayerNorm); 0 for the input row.
  T residual_share{0};
  /// The flags of `domain` with the default limits (scalar rows).
  Caveat caveats() const { return sigprop::caveats(domain); }
};

/// Per-layer record: rows[n] for n = 0..N (n = 0 the model input, n the
/// output of layer n); mid[n - 1] after layer n's attention sublayer; output
/// is what the model emits (after the final LayerNorm when there is one).
template <class T>
struct BasicTrace {
  std::vector<BasicTraceRow<T>> rows;
  std::vector<BasicTraceRow<T>> mid;
  BasicTraceRow<T> output;
};

using TraceRow = BasicTraceRow<double>;
using Trace = BasicTrace<double>;

/// The lane type of batched evaluation: one configuration per entry.
using Batch = Eigen::ArrayXd;
using BatchTrace = BasicTrace<Batch>;

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

/// The longest sequence whose pairs of positions trace() carries for a
/// causal Pre-LN stack (an L x L covariance per row, O(N L^2); beyond it the
/// length correlation is the closed forms' alone, docs/decoders.md, "Decoders
/// at depth").
inline constexpr std::size_t max_forward_pair_positions = 2048;

/// The per-layer trace of a model of shape `config` initialized with
/// `weights`, given the gradient moments at the model output (default:
/// variance 1, correlation 0). For a causal Pre-LN stack of at most
/// max_forward_pair_positions tokens, every row's length correlation is the
/// mean over the pairs of positions of their covariance, carried through the
/// stack (the rows' variances and gradients are taken at it).
SIGPROP_DECL Trace trace(const ModelConfig& config, const ModelWeights& weights,
                         const GradMoments<double>& grad_top = {1, 0});

/// Lanes per evaluation of the batched trace: configurations are traced in
/// chunks of this many, as fixed-size Eigen arrays (in registers and on the
/// stack; docs/performance.md).
inline constexpr int batch_chunk = 8;
using BatchChunk = Eigen::Array<double, batch_chunk, 1>;

/// The traces of many configurations at once, one lane per configuration,
/// through the same templated code as trace() (lane i equals
/// trace(configs[i], weights[i], grad_top) up to rounding). The lanes must
/// share the structure: arch, activation, layers, final_layernorm,
/// attention_gradient, norm, causal, gated_ffn and rotary_base; widths,
/// lengths, dropout and weights may differ.
SIGPROP_DECL BatchTrace trace_batch(const std::vector<ModelConfig>& configs, const std::vector<ModelWeights>& weights,
                                    const GradMoments<double>& grad_top = {1, 0});

/// f(a.x, b.x, ...) for every number x of trace rows: their forward and
/// backward moments, validity measures, branch variance and residual share.
template <class F, class First, class... Rest>
void for_each_row_field(F&& f, First&& first, Rest&&... rest) {
  for_each_field(f, first.forward, rest.forward...);
  for_each_field(f, first.backward, rest.backward...);
  for_each_field(f, first.domain, rest.domain...);
  f(first.branch_var, rest.branch_var...);
  f(first.residual_share, rest.residual_share...);
}

/// Lane i of a batched row as the row of one configuration.
inline TraceRow lane_of(const BasicTraceRow<Batch>& r, std::size_t i) {
  TraceRow o;
  o.layer = r.layer;
  const auto get = [i](double& to, const Batch& from) { to = lane(from, i); };
  for_each_row_field(get, o, r);
  return o;
}

/// Lane i of a batched trace as the trace of one configuration.
inline Trace lane_of(const BatchTrace& b, std::size_t i) {
  Trace t;
  for (const auto& r : b.rows) t.rows.push_back(lane_of(r, i));
  for (const auto& r : b.mid) t.mid.push_back(lane_of(r, i));
  t.output = lane_of(b.output, i);
  return t;
}

}  // namespace sigprop

#ifdef SIGPROP_HEADER_ONLY
#include "sigprop/models/impl/stack.ipp"
#endif
