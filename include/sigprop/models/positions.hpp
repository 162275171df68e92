// sigprop/models/positions.hpp -- each position's moments through a decoder
// stack. Under the causal mask query i reads keys 1..i, so the positions
// are not exchangeable: trace() carries the sequence average,
// trace_positions() every position's residual stream, and
// trace_position_gradients() every pair of positions' gradients:
//   x_i -> Residual::combine(x_i, f_i)   (then the norm in Post-LN),
//   f_i = W_o Dropout(CausalAttention::position_forward(h)_i),
//   C <- lambda^2 C + beta^2 diag(root) B diag(root)   (gradient pairs).
// docs/decoders.md, "Positions"; the definitions are in
// models/impl/positions.ipp.
#pragma once

#include <cstddef>
#include <vector>

#include "sigprop/config.hpp"
#include "sigprop/models/stack.hpp"

namespace sigprop {

/// Per position of a decoder stack: rows[n][j] the forward moments of the
/// residual stream at position positions[j] (1-based) after layer n (n = 0:
/// the model input), mid[n - 1][j] after layer n's attention sublayer. With
/// every position (the default), rows[n][i - 1] is position i.
struct PositionTrace {
  std::vector<std::size_t> positions;
  std::vector<std::vector<Moments<double>>> rows, mid;
};

/// Per position of a Pre-LN decoder stack: rows[n][j] the gradient moments
/// at position positions[j] of row n (as Trace::rows[n].backward), mid[n][j]
/// between the sublayers of layer n + 1 (Trace::mid[n].backward); see
/// trace_position_gradients(). average[n] and mid_average[n] are the row's
/// average over all L positions (whichever are listed): var the mean of the
/// positions' variances, corr_len the mean covariance of two positions over
/// it (what a measurement of the whole sequence gives), the other fields the
/// sequence's.
struct PositionGradientTrace {
  std::vector<std::size_t> positions;
  std::vector<std::vector<GradMoments<double>>> rows, mid;
  std::vector<GradMoments<double>> average, mid_average;
};

/// Each position's forward moments through a decoder stack (config.causal):
/// every position 1..L, or only `positions` (1-based, increasing, each in
/// [1, seq_len]; a few positions of a long sequence cost O(N) sublayer
/// evaluations each, plus the heads' O(N L) profile and, where trace()
/// carries the pairs of positions, their O(N L^2)). With every position, the
/// average of the variances of rows[n] is trace(config, weights).rows[n].forward.var;
/// corr_len is the position's mean correlation with the others, from the
/// pairs of positions where trace() carries them (Pre-LN, at most
/// max_forward_pair_positions tokens).
SIGPROP_DECL PositionTrace trace_positions(const ModelConfig& config, const ModelWeights& weights,
                                           std::vector<std::size_t> positions = {});

/// The longest sequence trace_position_gradients carries: its L x L pairs of
/// positions take 128 MB each at 4096 (a few are held at once).
inline constexpr std::size_t max_pair_positions = 4096;

/// Each position's gradient through a Pre-LN decoder stack (config.causal,
/// arch pre-ln), for the gradient `grad_top` at the model output as in
/// trace(): rows[n][j] at position positions[j] of row n (the gradient
/// reaching the residual stream after layer n; n = N after the final norm),
/// mid[n][j] between layer n + 1's sublayers. var is the position's gradient
/// variance, corr_len the mean correlation of its gradient with the other
/// positions'. Every position (empty `positions`) or the listed ones; the
/// cost is O(N L^2) either way; seq_len at most max_pair_positions.
SIGPROP_DECL PositionGradientTrace trace_position_gradients(const ModelConfig& config, const ModelWeights& weights,
                                                            std::vector<std::size_t> positions = {},
                                                            const GradMoments<double>& grad_top = {1, 0});

/// Whether trace_position_gradients applies to `config`: a causal Pre-LN
/// model of at most max_pair_positions tokens.
inline bool has_position_gradients(const ModelConfig& config) {
  return config.causal && config.arch == Arch::pre_ln && config.seq_len <= max_pair_positions;
}

/// `t` (a trace() of the same model) with every row's gradient the average
/// over the positions of `g` (PositionGradientTrace::average): under the
/// mask the sequence-averaged state misses the gradient at the lower rows
/// (docs/decoders.md, "Decoder stacks"); `sigprop table` and sweep() report
/// this average for the models of has_position_gradients().
inline Trace with_position_gradients(Trace t, const PositionGradientTrace& g) {
  for (std::size_t n = 0; n < t.rows.size(); ++n) t.rows[n].backward = g.average[n];
  for (std::size_t n = 0; n < t.mid.size(); ++n) t.mid[n].backward = g.mid_average[n];
  return t;
}

}  // namespace sigprop

#ifdef SIGPROP_HEADER_ONLY
#include "sigprop/models/impl/positions.ipp"
#endif
