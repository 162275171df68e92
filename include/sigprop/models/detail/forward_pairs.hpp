// sigprop/models/detail/forward_pairs.hpp -- the forward covariance of every
// pair of positions of a causal Pre-LN stack, an L x L matrix C per row (per
// hidden unit), from which trace() takes each row's variance and length
// correlation (docs/decoders.md, "Decoders at depth"). Per sublayer, at the averaged
// stream x (var_f, cov_f: the branch's closed form there; h = Norm(x)):
//   R_im = n(C_im / sqrt(C_ii C_mm))      the norm at each position (n its correlation map),
//   attention: Y = CausalAttention::value_pair_forward(h, h_var R),
//              F_im = g (Y_im - Y1_off) + cov_f,   F_ii = g/(1 - p) (Y_ii - Y1_diag) + var_f,
//   FFN:       F_im = k(C_im / sqrt(C_ii C_mm)),   F_ii = var_f,
//   C <- lambda^2 C + beta^2 F,   var = mean_i C_ii,   corr_len = mean_{i != m} C_im / var,
// g = d v_o the output projection's gain, p the block's dropout, Y1_off and
// Y1_diag the means of Y off and on the diagonal for one correlation between
// all positions (h's): the score-driven terms and the biases stay the closed
// form's at the averaged state, the value average takes the pairs. k(r) is
// the branch's (norm and FFN) covariance at correlation r; n and k on a grid
// of correlations.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <optional>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "sigprop/models/detail/sublayers.hpp"

namespace sigprop {

namespace detail {

/// f(r) from its values on an even grid of `points` correlations over
/// [lo, hi], linearly interpolated (clamped to the grid beyond it).
class CorrelationKernel {
 public:
  static constexpr int points = 33;

  template <class F>
  CorrelationKernel(double lo, double hi, F f) : lo_(lo) {
    const double step = (hi - lo) / (points - 1);
    per_step_ = step > 0 ? 1 / step : 0;  // 0: one value (lo = hi)
    for (int j = 0; j < points; ++j)
      value_[static_cast<std::size_t>(j)] = step > 0 || j == 0 ? f(lo + j * step) : value_[0];
  }

  double operator()(double r) const {
    const double t = std::clamp((r - lo_) * per_step_, 0.0, double(points - 1));
    const auto j = static_cast<std::size_t>(std::min(static_cast<int>(t), points - 2));
    return value_[j] + (t - double(j)) * (value_[j + 1] - value_[j]);
  }

 private:
  double lo_, per_step_;
  std::array<double, points> value_{};
};

/// The means of a covariance's diagonal and of the entries off it; their
/// ratio is the length correlation a measurement of the sequence gives.
struct PairMeans {
  double diagonal, off;
  double corr() const { return std::clamp(math::ratio_or(off, diagonal, 0.0), -1.0, 1.0); }
};

inline PairMeans pair_means(const Eigen::MatrixXd& C) {
  const auto L = static_cast<double>(C.rows());
  const double trace = C.trace();
  return {trace / L, (C.sum() - trace) / (L * (L - 1))};
}

/// R_im = f(C_im / sqrt(C_ii C_mm)) off the diagonal (R: L x L, reused
/// from one call to the next); its diagonal is the caller's.
template <class F>
void correlations_through(const Eigen::MatrixXd& C, F f, Eigen::MatrixXd& R) {
  const Eigen::Index L = C.rows();
  const Eigen::VectorXd inv = C.diagonal().unaryExpr([](double v) { return v > 0 ? 1 / std::sqrt(v) : 0.0; });
  R.resize(L, L);
  double lo = 1, hi = -1;
  for (Eigen::Index m = 0; m < L; ++m) {
    R.col(m) = C.col(m).cwiseProduct(inv) * inv(m);
    if (m > 0) lo = std::min(lo, R.col(m).head(m).minCoeff()), hi = std::max(hi, R.col(m).head(m).maxCoeff());
  }
  const CorrelationKernel k(std::max(lo, -1.0), std::min(hi, 1.0), f);
  R = R.unaryExpr(k);
}

/// The causal attention sublayer of a Pre-LN stack on the pairs C (in
/// place) at the averaged stream x; returns the keys' spread at its input.
inline KeySpread<double> attention_pairs_forward(const StackShape<double>& s, const LayerWeights& w,
                                                 const Moments<double>& x, Eigen::MatrixXd& C,
                                                 Eigen::MatrixXd& work) {
  KeySpread<double> spread{1, 1};
  with_attention_block(s, w, [&](auto block) {
    with_sublayer(s, w, Sublayer::attention, std::move(block), [&](const auto& sub) {
      const auto& branch = residual_of<double>(sub).branch();  // serial(norm, block)
      const auto& norm = branch.template part<0>();
      const auto& attention = branch.template part<1>();
      if constexpr (std::is_same_v<std::decay_t<decltype(attention)>, CausalAttentionBlock<double>>) {
        const Moments<double> h = norm.forward(x), f = attention.forward(h);
        const auto& head = attention.template part<0>().head();
        const auto& projection = attention.template part<1>();
        const double gain = projection.d_in() * projection.weight_var(),
                     keep = 1 - attention.template part<2>().p();
        correlations_through(C, [&](double r) {
          Moments<double> at = x;
          at.corr_len = r;
          return h.var * norm.forward(at).corr_len;
        }, work);
        work.diagonal().setConstant(h.var);
        spread = CausalAttention<double>::spread_of_pairs(work, h.corr_len);
        work = head.value_pair_forward(h, std::move(work));
        const Eigen::MatrixXd& Y = work;
        const auto [Y1_diagonal, Y1_off] = head.value_pair_means(h);  // at h's one correlation
        const Eigen::ArrayXd own = (gain / keep) * (Y.diagonal().array() - Y1_diagonal) + f.var;
        const double skip2 = w.attn_skip * w.attn_skip, beta2 = w.attn_branch * w.attn_branch;
        const Eigen::ArrayXd diagonal = skip2 * C.diagonal().array() + beta2 * own;
        C = skip2 * C + beta2 * (gain * Y.array() + (f.cov_len() - gain * Y1_off)).matrix();
        C.diagonal() = diagonal.matrix();
      }  // (else: with_attention_block builds the causal block here)
    });
  });
  return spread;
}

/// The FFN sublayer of a Pre-LN stack on the pairs C (in place) at the
/// averaged stream x (Activation: scalar).
template <class Activation>
void ffn_pairs_forward(const StackShape<double>& s, const LayerWeights& w, const Moments<double>& x,
                         Eigen::MatrixXd& C, Eigen::MatrixXd& work) {
  on_sublayer<Activation>(s, w, Sublayer::ffn, [&](const auto& sub) {
    const auto& branch = residual_of<double>(sub).branch();  // serial(norm, FFN block)
    Eigen::MatrixXd& F = work;
    correlations_through(C, [&](double r) {
      Moments<double> at = x;
      at.corr_len = r;
      return branch.forward(at).cov_len();
    }, F);
    F.diagonal().setConstant(branch.forward(x).var);
    const double skip = w.ffn_skip, beta = w.ffn_branch;
    C = skip * skip * C + beta * beta * F;
  });
}

/// Each position's variance and mean correlation with the other positions,
/// from one row's pairs C: C_ii and sum_{m != i} C_im / sqrt(C_ii C_mm) / (L - 1).
struct PositionColumn {
  Eigen::VectorXd var, corr;
};

inline PositionColumn position_column(const Eigen::MatrixXd& C) {
  const Eigen::VectorXd inv = C.diagonal().unaryExpr([](double v) { return v > 0 ? 1 / std::sqrt(v) : 0.0; });
  const double others = double(C.rows() - 1);
  PositionColumn c{C.diagonal(), (inv.asDiagonal() * (C * inv) - C.diagonal().cwiseProduct(inv.cwiseAbs2())) / others};
  c.corr = c.corr.cwiseMax(-1.0).cwiseMin(1.0);
  return c;
}

/// trace()'s pairs of positions as each position's column, per row (1..N:
/// rows[n - 1]) and between the sublayers (mid[n]), for its first lane;
/// empty where it carries none (not causal Pre-LN, or too long).
struct PositionPairs {
  std::vector<PositionColumn> rows, mid;
  std::vector<KeySpread<double>> spread;  ///< each layer's attention input's (key_spread)
};

/// The scalar activation of a batched one (Relu<BatchChunk> -> Relu<double>).
template <class A>
struct scalar_activation;
template <template <class> class A, class T>
struct scalar_activation<A<T>> {
  using type = A<double>;
};

/// Lane i of a stack's shape, weights and moments.
template <class T>
StackShape<double> lane_shape(const StackShape<T>& s, std::size_t i) {
  StackShape<double> one;
  one.structure() = s;
  for_each_field([i](double& to, const T& from) { to = static_cast<double>(lane(from, i)); }, one, s);
  return one;
}

template <class W>
LayerWeights lane_weights(const W& w, std::size_t i) {
  LayerWeights one;
  for_each_field([i](double& to, const auto& from) { to = static_cast<double>(lane(from, i)); }, one, w);
  return one;
}

/// The pairs of every lane of a trace: one L x L covariance per lane, none
/// for a lane that repeats the one before (same shape, input and weights:
/// trace_batch's trailing lanes) or whose pairs are not carried (not causal
/// Pre-LN, or longer than max_forward_pair_positions).
struct ForwardPairs {
  std::vector<Eigen::MatrixXd> lanes;
  std::vector<bool> repeats;
  std::vector<KeySpread<double>> spread;  // each lane's at the last attention sublayer's input
  Eigen::MatrixXd work;  // the sublayers' L x L, reused
};

template <class T, class W>
ForwardPairs start_forward_pairs(const StackShape<T>& s, const std::vector<W>& layers, const Moments<T>& input) {
  ForwardPairs p;
  if (!s.causal || s.arch != Arch::pre_ln) return p;
  const std::size_t lanes = lane_count(input.var);
  p.lanes.resize(lanes);
  p.repeats.assign(lanes, false);
  p.spread.assign(lanes, {1, 1});
  for (std::size_t i = 0; i < lanes; ++i) {
    bool repeat = i > 0;
    const auto same = [&](const auto& a, const auto& b) { repeat = repeat && lane(a, i) == lane(b, i - 1); };
    if (repeat) {
      for_each_field(same, s, s);
      for_each_field(same, input, input);
      for (const W& w : layers) for_each_field(same, w, w);
    }
    p.repeats[i] = repeat;
    const double L = lane(s.seq_len, i);
    if (repeat || L > double(max_forward_pair_positions)) continue;
    const auto n = static_cast<Eigen::Index>(L);
    const double var = lane(input.var, i), cov = lane(input.corr_len, i) * var;
    p.lanes[i] = Eigen::MatrixXd::Constant(n, n, cov);
    p.lanes[i].diagonal().setConstant(var);
  }
  return p;
}

/// Sublayer `which` of layer w on every carried lane's pairs, at the averaged
/// stream x; sets `out.corr_len` (the sublayer's output) to the pairs' mean.
template <class Activation, class T, class W>
void forward_pairs(ForwardPairs& p, Sublayer which, const StackShape<T>& s, const W& w, const Moments<T>& x,
                   Moments<T>& out) {
  for (std::size_t i = 0; i < p.lanes.size(); ++i) {
    if (p.repeats[i]) {
      set_lane(out.var, i, lane(out.var, i - 1));
      set_lane(out.corr_len, i, lane(out.corr_len, i - 1));
      p.spread[i] = p.spread[i - 1];
      continue;
    }
    Eigen::MatrixXd& C = p.lanes[i];
    if (C.size() == 0) continue;
    const StackShape<double> one = lane_shape(s, i);
    const LayerWeights weights = lane_weights(w, i);
    const Moments<double> at = lane_moments(x, i);
    using Scalar = typename scalar_activation<Activation>::type;
    if (which == Sublayer::attention)
      p.spread[i] = attention_pairs_forward(one, weights, at, C, p.work);
    else
      ffn_pairs_forward<Scalar>(one, weights, at, C, p.work);
    const PairMeans means = pair_means(C);
    set_lane(out.var, i, means.diagonal);
    set_lane(out.corr_len, i, means.corr());
  }
}

/// The keys' spread of the last attention sublayer, lane by lane, in
/// `like`'s lane type (none where no lane carries pairs).
template <class T>
std::optional<KeySpread<T>> key_spread_of(const ForwardPairs& p, const T& like) {
  if (p.lanes.empty()) return std::nullopt;
  KeySpread<T> out{T(0 * like + 1), T(0 * like + 1)};
  for (std::size_t i = 0; i < p.lanes.size(); ++i) {
    set_lane(out.query, i, p.spread[i].query);
    set_lane(out.key, i, p.spread[i].key);
  }
  return out;
}

/// Appends the first lane's columns after sublayer `which` to `record` (if
/// any, and if the pairs are carried), and after the attention sublayer the
/// spread at its input.
inline void record_columns(const ForwardPairs& p, Sublayer which, PositionPairs* record) {
  if (!record || p.lanes.empty() || p.lanes[0].size() == 0) return;
  (which == Sublayer::attention ? record->mid : record->rows).push_back(position_column(p.lanes[0]));
  if (which == Sublayer::attention) record->spread.push_back(p.spread[0]);
}

}  // namespace detail

}  // namespace sigprop
