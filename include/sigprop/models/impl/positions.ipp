// sigprop/models/impl/positions.ipp -- the definitions of
// models/positions.hpp (docs/decoders.md, "Positions").
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "sigprop/models/detail/forward_pairs.hpp"
#include "sigprop/models/detail/sublayers.hpp"
#include "sigprop/models/detail/trace_with.hpp"
#include "sigprop/models/positions.hpp"

namespace sigprop {

namespace detail {

// trace() with the pairs' columns of each row (forward_pairs.hpp).
struct RecordedTrace {
  Trace averaged;
  PositionPairs pairs;
};

inline RecordedTrace recorded_trace(const ModelConfig& config, const ModelWeights& weights,
                                    const GradMoments<double>& grad_top = {1, 0}) {
  RecordedTrace r;
  r.averaged = checked_trace(config, weights, grad_top, &r.pairs);
  return r;
}

// Each position's variance and corr_len from the pairs of positions where
// trace() carries them (t.pairs), else the closed form's.
template <class Activation>
PositionTrace trace_positions_with(const StackShape<double>& s, const std::vector<LayerWeights>& layers,
                                   const RecordedTrace& t, std::vector<std::size_t> positions) {
  const Trace& averaged = t.averaged;
  const std::size_t N = s.layers, P = positions.size();
  PositionTrace p;
  p.positions = std::move(positions);
  p.rows.assign(N + 1, std::vector<Moments<double>>(P, averaged.rows[0].forward));
  p.mid.assign(N, std::vector<Moments<double>>(P));
  const bool carried = t.pairs.rows.size() == N && t.pairs.mid.size() == N;
  const auto from_pairs = [&](std::vector<Moments<double>>& row, const PositionColumn& column) {
    for (std::size_t j = 0; j < P; ++j) {
      const auto i = static_cast<Eigen::Index>(p.positions[j] - 1);
      row[j].var = column.var(i);
      row[j].corr_len = column.corr(i);
    }
  };
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
    if (carried) from_pairs(p.mid[n], t.pairs.mid[n]);
    on_sublayer<Activation>(s, w, Sublayer::ffn, [&](const auto& sub) {
      for (std::size_t j = 0; j < P; ++j) p.rows[n + 1][j] = sub.forward(p.mid[n][j]);
      return 0;
    });
    if (carried) from_pairs(p.rows[n + 1], t.pairs.rows[n]);
  }
  return p;
}

// The upstream gradient `g` with unit variance and correlation c (its other
// fields kept: alignments, norm coupling).
inline GradMoments<double> unit_gradient(GradMoments<double> g, double c) {
  g.var = 1;
  g.corr_len = c;
  return g;
}

// The keys' spread trace() took layer n's attention backward at (none
// where it carries no pairs).
using Spread = std::optional<KeySpread<double>>;

inline Spread spread_of(const PositionPairs& pairs, std::size_t n) {
  return n < pairs.spread.size() ? Spread(pairs.spread[n]) : std::nullopt;
}

// One Pre-LN sublayer's branch backward (norm, then block) at the stream x.
template <class Activation>
GradMoments<double> branch_backward(const StackShape<double>& s, const LayerWeights& w, Sublayer which,
                                    const Moments<double>& x, const GradMoments<double>& g,
                                    const Spread& spread = std::nullopt) {
  return on_sublayer<Activation>(
      s, w, which,
      [&](const auto& sub) {
        const auto& res = residual_of<double>(sub);
        return res.branch().backward(res.branch_input(x), g);
      },
      spread);
}

// Each position's own stream in a Pre-LN sublayer's branch: sqrt(r_i), r_i
// the norm's backward gain at position i's stream (trace_positions: its
// variance, mean and norm fluctuation; the sequence's other fields) over its
// gain at the averaged stream, for the gradient the block sends it at the
// averaged state. The block sees the same normalized input at every
// position; the norm divides by each position's own scale (its 1/V_i).
template <class Activation>
Eigen::VectorXd position_roots(const StackShape<double>& s, const LayerWeights& w, Sublayer which,
                               const std::vector<Moments<double>>& x, const Moments<double>& average,
                               const GradMoments<double>& upstream, const Spread& spread = std::nullopt) {
  Eigen::VectorXd root(static_cast<Eigen::Index>(x.size()));
  on_sublayer<Activation>(s, w, which, [&](const auto& sub) {
    const auto& branch = residual_of<double>(sub).branch();  // serial(norm, block) in Pre-LN
    const auto& norm = branch.template part<0>();
    const GradMoments<double> to_norm =
        branch.template part<1>().backward(norm.forward(average), unit_gradient(upstream, 0));
    const double at_average = norm.backward(average, to_norm).var;
    for (std::size_t i = 0; i < x.size(); ++i) {
      Moments<double> own = average;
      own.mean = x[i].mean;
      own.var = x[i].var;
      own.norm_var_ratio = x[i].norm_var_ratio;
      // (a block that sends the norm no gradient leaves the positions alike)
      root(static_cast<Eigen::Index>(i)) = std::sqrt(math::ratio_or(norm.backward(own, to_norm).var, at_average, 1.0));
    }
    return 0;
  }, spread);
  return root;
}

// 1/sqrt(C_ii) (0 where C_ii = 0), for correlations from a covariance.
inline Eigen::VectorXd inverse_roots(const Eigen::MatrixXd& C) {
  return C.diagonal().unaryExpr([](double v) { return v > 0 ? 1 / std::sqrt(v) : 0.0; });
}

// One sublayer on the gradient's pairs: C <- skip^2 C + branch^2 diag(root) B diag(root)
// for a position-wise branch (the FFN sublayer's) at the averaged stream,
// B = k_off C off the diagonal and k_diag C_ii on it, k_diag and k_off from
// the branch's backward for the upstream `upstream` at correlation 1/2 (the
// backward is linear in it). In place.
template <class Activation>
void positionwise_pairs(const StackShape<double>& s, const LayerWeights& w, Sublayer which,
                        const Moments<double>& average, const GradMoments<double>& upstream,
                        const Eigen::VectorXd& root, Eigen::MatrixXd& C) {
  constexpr double c = 0.5;
  const GradMoments<double> gain = branch_backward<Activation>(s, w, which, average, unit_gradient(upstream, c));
  const double skip2 = skip_of<double>(w, which) * skip_of<double>(w, which);
  const double branch2 = branch_of<double>(w, which) * branch_of<double>(w, which);
  const double k_off = branch2 * gain.var * gain.corr_len / c, k_diag = branch2 * gain.var;
  const Eigen::ArrayXd diagonal = C.diagonal().array() * (skip2 + k_diag * root.array().square());
  for (Eigen::Index m = 0; m < C.cols(); ++m) C.col(m).array() *= skip2 + k_off * root(m) * root.array();
  C.diagonal() = diagonal.matrix();
}

// The same for the attention sublayer: B is the head's value path between
// every pair (value_pair_backward) and its softmax paths on the diagonal
// (position_backward with all paths minus the value path, at the pairs'
// mean correlation), for the block's dropout on the upstream (1/(1 - p) on
// the diagonal), scaled to the branch's gain at the averaged state for
// `upstream` (the heads, W_o and the norm are linear in the upstream
// covariance; at a uniform covariance the pairs' diagonal is
// position_backward's).
template <class Activation>
void attention_pairs(const StackShape<double>& s, const LayerWeights& w, const Moments<double>& x,
                     const GradMoments<double>& upstream, const Eigen::VectorXd& root, const Spread& spread,
                     Eigen::MatrixXd& C) {
  const Eigen::Index L = C.rows();
  with_block<Activation>(s, w, Sublayer::attention, [&](const auto& block) {
    if constexpr (std::is_same_v<std::decay_t<decltype(block)>, CausalAttentionBlock<double>>) {
      const Moments<double> h = branch_io(s, w, Sublayer::attention, block, x, upstream).input;
      const CausalAttention<double>& head = block.template part<0>().head();
      const CausalAttention<double> value_path = head.with_gradient(AttentionGradient::value_path_only);
      const double keep = 1 - s.dropout;
      constexpr double c = 0.5;
      const std::vector<double> flat(static_cast<std::size_t>(L), 1 / keep);
      double flat_diagonal = 0;
      for (const auto& p : head.position_backward(h, flat, c * keep)) flat_diagonal += p.var / double(L);
      const double gain =
          branch_backward<Activation>(s, w, Sublayer::attention, x, unit_gradient(upstream, c), spread).var;
      Eigen::MatrixXd in = C;
      in.diagonal() /= keep;
      Eigen::MatrixXd pairs = head.value_pair_backward(h, in);
      if (s.attention_gradient != AttentionGradient::value_path_only) {
        const Eigen::VectorXd inv = inverse_roots(in);
        const double corr = std::clamp((inv.dot(in * inv) - double((inv.array() > 0).count())) /
                                           double(L * (L - 1)), -1.0, 1.0);
        std::vector<double> var(static_cast<std::size_t>(L));
        for (Eigen::Index i = 0; i < L; ++i) var[static_cast<std::size_t>(i)] = in(i, i);
        const auto all = head.position_backward(h, var, corr), value = value_path.position_backward(h, var, corr);
        for (Eigen::Index i = 0; i < L; ++i)
          pairs(i, i) += all[static_cast<std::size_t>(i)].var - value[static_cast<std::size_t>(i)].var;
      }
      const double skip2 = w.attn_skip * w.attn_skip,
                   scale = w.attn_branch * w.attn_branch * math::ratio_or(gain, flat_diagonal, 0.0);
      for (Eigen::Index m = 0; m < L; ++m)
        C.col(m) = skip2 * C.col(m) + (scale * root(m)) * root.cwiseProduct(pairs.col(m));
    }
    return 0;
  }, spread);
}

// The listed positions' gradients: the variance from C, the mean
// correlation with the other positions, the other fields the sequence's (g).
// C must stay a covariance: every variance finite and non-negative (a
// rounding residue below 1e-12 of the largest is set to 0).
inline std::vector<GradMoments<double>> position_grads(Eigen::MatrixXd& C, const GradMoments<double>& g,
                                                       const std::vector<std::size_t>& positions, const std::string& where) {
  const Eigen::Index L = C.rows();
  constexpr const char* fn = "sigprop::trace_position_gradients";
  const double largest = C.diagonal().cwiseAbs().maxCoeff();
  for (Eigen::Index i = 0; i < L; ++i) {
    check_result(fn, "grad_var", C(i, i));
    if (C(i, i) >= 0) continue;
    if (C(i, i) >= -1e-12 * largest) {
      C(i, i) = 0;
      continue;
    }
    raise_domain(fn, "the gradient's variance at position " + std::to_string(i + 1) + " " + where, C(i, i),
                 "[0, inf) (the pairs of positions are no covariance there)");
  }
  const Eigen::VectorXd inv = inverse_roots(C);
  std::vector<GradMoments<double>> out;
  for (std::size_t p : positions) {
    const Eigen::Index i = static_cast<Eigen::Index>(p) - 1;
    GradMoments<double> r = g;
    r.var = C(i, i);
    // sum over m != i of C_im / sqrt(C_ii C_mm)
    const double others = inv(i) * (C.col(i).dot(inv) - C(i, i) * inv(i));
    r.corr_len = std::clamp(others / double(L - 1), -1.0, 1.0);
    out.push_back(r);
  }
  return out;
}

// The average over all positions of C (a checked covariance, position_grads):
// var the mean of the diagonal, corr_len the mean off-diagonal entry over it,
// the other fields the sequence's (g).
inline GradMoments<double> position_average(const Eigen::MatrixXd& C, const GradMoments<double>& g) {
  const Eigen::Index L = C.rows();
  double off = 0;  // the entries off the diagonal, column by column (exactly 0 for a diagonal C)
  for (Eigen::Index m = 0; m < L; ++m) off += C.col(m).head(m).sum() + C.col(m).tail(L - m - 1).sum();
  GradMoments<double> r = g;
  r.var = C.trace() / double(L);
  r.corr_len = std::clamp(math::ratio_or(off / double(L - 1), C.trace(), 0.0), -1.0, 1.0);
  return r;
}

template <class Activation>
PositionGradientTrace trace_position_gradients_with(const StackShape<double>& s,
                                                    const std::vector<LayerWeights>& layers, const RecordedTrace& t,
                                                    const PositionTrace& forward,
                                                    std::vector<std::size_t> positions) {
  const Trace& averaged = t.averaged;
  const std::size_t N = s.layers;
  const Eigen::Index L = static_cast<Eigen::Index>(s.seq_len);
  PositionGradientTrace out;
  out.positions = std::move(positions);
  out.rows.resize(N + 1);
  out.mid.resize(N);
  out.average.resize(N + 1);
  out.mid_average.resize(N);
  // The model output's gradient (uniform correlation), through the final
  // norm at each position's stream.
  const GradMoments<double>& top = averaged.output.backward;
  Eigen::MatrixXd C = Eigen::MatrixXd::Constant(L, L, top.var * top.corr_len);
  C.diagonal().setConstant(top.var);
  if (s.final_layernorm) {
    Eigen::VectorXd root(L);
    with_norm(s, [&](const auto& norm) {
      const double at_average = norm.backward(averaged.rows[N].forward, top).var;
      for (Eigen::Index i = 0; i < L; ++i)
        root(i) = std::sqrt(math::ratio_or(norm.backward(forward.rows[N][static_cast<std::size_t>(i)], top).var,
                                           at_average, 1.0));
      return 0;
    });
    C = averaged.rows[N].backward.var / top.var * (root.asDiagonal() * C * root.asDiagonal());
  }
  out.rows[N] = position_grads(C, averaged.rows[N].backward, out.positions, "of row " + std::to_string(N));
  out.average[N] = position_average(C, averaged.rows[N].backward);
  for (std::size_t n = N; n-- > 0;) {
    const LayerWeights& w = layers[n];
    const Moments<double>& x_mid = averaged.mid[n].forward;
    const GradMoments<double>& g_ffn = averaged.rows[n + 1].backward;
    positionwise_pairs<Activation>(s, w, Sublayer::ffn, x_mid, g_ffn,
                                   position_roots<Activation>(s, w, Sublayer::ffn, forward.mid[n], x_mid, g_ffn), C);
    out.mid[n] = position_grads(C, averaged.mid[n].backward, out.positions,
                                "between the sublayers of layer " + std::to_string(n + 1));
    out.mid_average[n] = position_average(C, averaged.mid[n].backward);
    const Moments<double>& x = averaged.rows[n].forward;
    const GradMoments<double>& g_attention = averaged.mid[n].backward;
    const Spread spread = spread_of(t.pairs, n);
    attention_pairs<Activation>(
        s, w, x, g_attention,
        position_roots<Activation>(s, w, Sublayer::attention, forward.rows[n], x, g_attention, spread), spread, C);
    out.rows[n] = position_grads(C, averaged.rows[n].backward, out.positions, "of row " + std::to_string(n));
    out.average[n] = position_average(C, averaged.rows[n].backward);
  }
  return out;
}

// Positions to report: every one (empty), or increasing, each in [1, seq_len].
inline std::vector<std::size_t> checked_positions(const char* fn, std::vector<std::size_t> positions,
                                                  std::size_t seq_len) {
  if (positions.empty()) {
    positions.resize(seq_len);
    for (std::size_t i = 0; i < positions.size(); ++i) positions[i] = i + 1;
  }
  for (std::size_t j = 0; j < positions.size(); ++j) {
    const std::size_t low = j == 0 ? 1 : positions[j - 1] + 1;
    if (positions[j] < low || positions[j] > seq_len)
      raise_domain(fn, "positions[" + std::to_string(j) + "]", std::to_string(positions[j]),
                   "[" + std::to_string(low) + ", seq_len = " + std::to_string(seq_len) +
                       "] (increasing positions 1..seq_len)");
  }
  return positions;
}

inline void require_causal(const char* fn, const ModelConfig& config) {
  if (!config.causal)
    raise_domain(fn, "causal", "false",
                 "{true} (without the mask every position has the sequence average of trace())");
}

}  // namespace detail

SIGPROP_DECL PositionTrace trace_positions(const ModelConfig& config, const ModelWeights& weights,
                                           std::vector<std::size_t> positions) {
  constexpr const char* fn = "sigprop::trace_positions";
  detail::require_causal(fn, config);
  const detail::RecordedTrace t = detail::recorded_trace(config, weights);  // validates config and weights
  positions = detail::checked_positions(fn, std::move(positions), config.seq_len);
  const auto s = detail::shape_of(config);
  return detail::with_activation<double>(s.activation, [&](auto activation) {
    using Activation = typename decltype(activation)::type;
    return detail::trace_positions_with<Activation>(s, weights.layers, t, std::move(positions));
  });
}

SIGPROP_DECL PositionGradientTrace trace_position_gradients(const ModelConfig& config, const ModelWeights& weights,
                                                            std::vector<std::size_t> positions,
                                                            const GradMoments<double>& grad_top) {
  constexpr const char* fn = "sigprop::trace_position_gradients";
  detail::require_causal(fn, config);
  if (config.arch != Arch::pre_ln)
    detail::raise_domain(fn, "arch", to_string(config.arch),
                         "{pre-ln} (the per-position gradient is derived for Pre-LN stacks, docs/decoders.md)");
  if (config.seq_len > max_pair_positions)
    detail::raise_domain(fn, "seq_len", std::to_string(config.seq_len),
                         "[2, " + std::to_string(max_pair_positions) + "] (the gradient's L x L pairs of positions)");
  const detail::RecordedTrace t = detail::recorded_trace(config, weights, grad_top);  // validates the arguments
  // One correlation between every pair of L positions is a covariance only
  // down to -1/(L - 1) (its matrix has the eigenvalue 1 + (L - 1) r).
  const double lowest = -1 / double(config.seq_len - 1);
  if (!(grad_top.corr_len >= lowest))
    detail::raise_domain(fn, "grad_top.corr_len", grad_top.corr_len,
                         "[" + detail::format_number(lowest) +
                             ", 1] (-1/(seq_len - 1): below it no L positions' gradients have that correlation)");
  positions = detail::checked_positions(fn, std::move(positions), config.seq_len);
  const auto s = detail::shape_of(config);
  return detail::with_activation<double>(s.activation, [&](auto activation) {
    using Activation = typename decltype(activation)::type;
    // every position's stream (trace_positions: the variances from the pairs of positions)
    const PositionTrace forward =
        detail::trace_positions_with<Activation>(s, weights.layers, t, detail::checked_positions(fn, {}, config.seq_len));
    return detail::trace_position_gradients_with<Activation>(s, weights.layers, t, forward,
                                                             std::move(positions));
  });
}

}  // namespace sigprop
