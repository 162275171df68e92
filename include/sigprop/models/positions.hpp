// sigprop/models/positions.hpp -- each position's forward moments through a
// decoder stack. Under the causal mask query i reads keys 1..i, so the
// positions are not exchangeable: position 1's attention output is its own
// value, position L's an average of L values (docs/decoders.md,
// "Positions"). trace() carries the sequence average; trace_positions()
// carries every position's residual stream.
//
// Built by composition, as trace() is: position i's stream x_i goes through
// the FFN sublayer as through any position-wise map (the composed
// sublayer's forward of x_i), and through the attention sublayer as
//   x_i -> Residual::combine(x_i, f_i)   (then the LayerNorm in Post-LN),
// where f_i is the attention block's output at position i: the head's
// CausalAttention::position_forward at the block's input (query i with its
// own key count), then the output projection and dropout. The block's input
// is the sequence average's: in Pre-LN it is the norm of x_i, whose moments
// do not depend on the position's variance; in Post-LN the previous
// sublayer's norm makes every position alike. Without norms (no-LN) the
// heads see the average input, an approximation.
//
// Cost: with every position, O(N L) sublayer evaluations and (2N + 1) L
// moment states; at 192 layers and L = 2048, 0.26 s for gpt2 and 6 s for
// llama (SiLU's moments at every position), against 0.04-0.05 s for
// trace(). A few chosen positions cost O(N) sublayer evaluations each
// (docs/decoders.md).
//
// Measured against the whole-model simulation's per-position mean squares
// (tests/test_decoders.cpp, docs/decoders.md): within a few percent at every
// position of the llama and gpt2 presets, where the sequence average misses
// position 1 by up to 60 %.
#pragma once

#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

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

namespace detail {

template <class Activation>
PositionTrace trace_positions_with(const StackShape<double>& s, const std::vector<LayerWeights>& layers,
                                   const Trace& averaged, std::vector<std::size_t> positions) {
  const std::size_t N = s.layers, P = positions.size();
  PositionTrace p;
  p.positions = std::move(positions);
  p.rows.assign(N + 1, std::vector<Moments<double>>(P, averaged.rows[0].forward));
  p.mid.assign(N, std::vector<Moments<double>>(P));
  for (std::size_t n = 0; n < N; ++n) {
    const LayerWeights& w = layers[n];
    with_block<Activation>(s, w, Sublayer::attention, [&](const auto& block) {
      if constexpr (std::is_same_v<std::decay_t<decltype(block)>, CausalAttentionBlock<double>>) {
        const auto& heads = block.template part<0>();
        const Moments<double> h =
            branch_io(s, w, Sublayer::attention, block, averaged.rows[n].forward, averaged.mid[n].backward).input;
        // The whole-vector fields of the H heads' output are the sequence's.
        const Moments<double> all_heads = heads.forward(h);
        std::vector<Moments<double>> f = heads.head().position_forward(h);
        for (Moments<double>& fi : f) {
          fi.norm_var_ratio = all_heads.norm_var_ratio;
          fi.hidden_spread = all_heads.hidden_spread;
          fi.linear_share = all_heads.linear_share;
          fi = block.template part<2>().forward(block.template part<1>().forward(fi));
        }
        with_sublayer(s, w, Sublayer::attention, block, [&](const auto& sub) {
          for (std::size_t j = 0; j < P; ++j)
            p.mid[n][j] = after_residual<double>(
                sub, residual_of<double>(sub).combine(p.rows[n][j], f[p.positions[j] - 1]));
          return 0;
        });
      }
      return 0;
    });
    on_sublayer<Activation>(s, w, Sublayer::ffn, [&](const auto& sub) {
      for (std::size_t j = 0; j < P; ++j) p.rows[n + 1][j] = sub.forward(p.mid[n][j]);
      return 0;
    });
  }
  return p;
}

}  // namespace detail

/// Each position's forward moments through a decoder stack (config.causal;
/// the header comment has the method): every position 1..L, or only
/// `positions` (1-based, increasing, each in [1, seq_len]; a position's
/// stream does not depend on the others', so a few positions of a long
/// sequence cost O(N) sublayer evaluations each, plus the heads' O(N L)
/// profile). With every position, the average of rows[n] is
/// trace(config, weights).rows[n].forward (tests/test_decoders.cpp).
inline PositionTrace trace_positions(const ModelConfig& config, const ModelWeights& weights,
                                     std::vector<std::size_t> positions = {}) {
  constexpr const char* fn = "sigprop::trace_positions";
  if (!config.causal)
    throw domain_error(std::string(fn) +
                       ": causal = false is outside the valid range {true} (without the mask every position has "
                       "the sequence average of trace())");
  const Trace averaged = trace(config, weights);  // validates config and weights
  if (positions.empty()) {
    positions.resize(config.seq_len);
    for (std::size_t i = 0; i < positions.size(); ++i) positions[i] = i + 1;
  }
  for (std::size_t j = 0; j < positions.size(); ++j) {
    const std::size_t low = j == 0 ? 1 : positions[j - 1] + 1;
    if (positions[j] < low || positions[j] > config.seq_len)
      throw domain_error(std::string(fn) + ": positions[" + std::to_string(j) + "] = " +
                         std::to_string(positions[j]) + " is outside the valid range [" + std::to_string(low) +
                         ", seq_len = " + std::to_string(config.seq_len) + "] (increasing positions 1..seq_len)");
  }
  const auto s = detail::shape_of(config);
  switch (s.activation) {
    case FfnActivation::relu:
      return detail::trace_positions_with<Relu<double>>(s, weights.layers, averaged, std::move(positions));
    case FfnActivation::gelu:
      return detail::trace_positions_with<Gelu<double>>(s, weights.layers, averaged, std::move(positions));
    case FfnActivation::silu: break;
  }
  return detail::trace_positions_with<Silu<double>>(s, weights.layers, averaged, std::move(positions));
}

}  // namespace sigprop
