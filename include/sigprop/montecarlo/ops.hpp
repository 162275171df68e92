// sigprop/montecarlo/ops.hpp -- the real computations of a transformer layer on
// L x d matrices (rows are positions), forward and backward, written once and
// used by every simulation (components, blocks, whole models).
//
// Each op's forward returns what its backward needs; backward maps the
// gradient of the output to the gradient of the input (loss = sum(out .* g)).
#pragma once

#include <cmath>
#include <limits>

#include <Eigen/Core>
#include <boost/math/constants/constants.hpp>

#include "sigprop/montecarlo/random.hpp"

namespace sigprop::montecarlo::ops {

using Matrix = Eigen::MatrixXd;

/// Inverted-dropout mask: 1/(1-p) with probability 1-p, else 0.
inline Matrix dropout_mask(Eigen::Index rows, Eigen::Index cols, double p, Random& rng) {
  Matrix m(rows, cols);
  const double keep = 1 - p;
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = rng.uniform() < keep ? 1 / keep : 0;
  return m;
}

/// LayerNorm over each row (gain 1, bias 0, biased variance, `eps` inside the root).
/// x W + b on every row (b empty: x W).
inline Matrix affine(const Matrix& x, const Matrix& w, const Eigen::RowVectorXd& b) {
  Matrix y = x * w;
  if (b.size() > 0) y.rowwise() += b;
  return y;
}

struct LayerNormCache {
  Matrix y;                  // normalized output
  Eigen::VectorXd inv_std;   // 1 / sqrt(var_row + eps)
};

inline LayerNormCache layernorm_forward(const Matrix& x, double eps = 0) {
  const Eigen::Index d = x.cols();
  LayerNormCache c;
  const Eigen::VectorXd mean = x.rowwise().mean();
  c.y = x.colwise() - mean;
  const Eigen::VectorXd var = c.y.rowwise().squaredNorm() / static_cast<double>(d);
  c.inv_std = (var.array() + eps).rsqrt();
  c.y = c.inv_std.asDiagonal() * c.y;
  return c;
}

/// dx = inv_std * (g - mean_row(g) - y * mean_row(g .* y)).
inline Matrix layernorm_backward(const LayerNormCache& c, const Matrix& g) {
  const double d = static_cast<double>(g.cols());
  const Eigen::VectorXd g_mean = g.rowwise().sum() / d;
  const Eigen::VectorXd gy_mean = g.cwiseProduct(c.y).rowwise().sum() / d;
  Matrix dx = g.colwise() - g_mean;
  dx -= gy_mean.asDiagonal() * c.y;
  return c.inv_std.asDiagonal() * dx;
}

/// Softmax of each row (shifted by the row maximum for stability).
inline Matrix softmax_rows(const Matrix& x) {
  Matrix e = (x.colwise() - x.rowwise().maxCoeff()).array().exp().matrix();
  const Eigen::VectorXd inv_sum = e.rowwise().sum().cwiseInverse();
  return inv_sum.asDiagonal() * e;
}

/// Backward of softmax_rows with output `p`: dx = p .* (g - rowsum(g .* p)).
inline Matrix softmax_rows_backward(const Matrix& p, const Matrix& g) {
  const Eigen::VectorXd pg = p.cwiseProduct(g).rowwise().sum();
  return p.cwiseProduct(g.colwise() - pg);
}

/// Elementwise activations: value and derivative. gelu is x Phi(x), gelu_tanh
/// x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) as GPT-2 computes it.
enum class Activation { relu, gelu, silu, gelu_tanh };

inline constexpr double gelu_tanh_k = 0.044715;

inline double activation_value(Activation a, double x) {
  if (a == Activation::relu) return x > 0 ? x : 0;
  if (a == Activation::silu) return x / (1 + std::exp(-x));
  if (a == Activation::gelu_tanh)
    return 0.5 * x * (1 + std::tanh(boost::math::constants::root_two_div_pi<double>() * (x + gelu_tanh_k * x * x * x)));
  return 0.5 * x * std::erfc(-x * boost::math::constants::one_div_root_two<double>());
}

inline double activation_derivative(Activation a, double x) {
  if (a == Activation::relu) return x > 0 ? 1 : 0;
  if (a == Activation::silu) {
    const double sigmoid = 1 / (1 + std::exp(-x));
    return sigmoid * (1 + x * (1 - sigmoid));
  }
  if (a == Activation::gelu_tanh) {
    const double c = boost::math::constants::root_two_div_pi<double>();
    const double t = std::tanh(c * (x + gelu_tanh_k * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * gelu_tanh_k * x * x);
  }
  const double cdf = 0.5 * std::erfc(-x * boost::math::constants::one_div_root_two<double>());
  return cdf + x * std::exp(-0.5 * x * x) * boost::math::constants::one_div_root_two_pi<double>();
}

inline Matrix activation_forward(Activation a, const Matrix& x) {
  return x.unaryExpr([a](double v) { return activation_value(a, v); });
}

inline Matrix activation_backward(Activation a, const Matrix& x, const Matrix& g) {
  return g.cwiseProduct(x.unaryExpr([a](double v) { return activation_derivative(a, v); }));
}

/// The gated FFN's hidden layer (GLU; Shazeer 2020): H = act(X W1) .* (X V),
/// the block's output (H .* M) W2, M a dropout mask (none when empty). Kept
/// for the backward pass: X W1, its activation, X V and M.
struct GatedCache {
  Matrix pre, act, value, mask;  ///< X W1, act(X W1), X V, M
};

inline Matrix gated_forward(Activation a, const Matrix& x, const Matrix& w1, const Matrix& v, const Matrix& w2,
                            GatedCache& c, const Matrix& mask = Matrix(), const Eigen::RowVectorXd& b1 = {},
                            const Eigen::RowVectorXd& bv = {}, const Eigen::RowVectorXd& b2 = {}) {
  c.pre = affine(x, w1, b1);
  c.act = activation_forward(a, c.pre);
  c.value = affine(x, v, bv);
  c.mask = mask;
  if (mask.size() == 0) return affine(c.act.cwiseProduct(c.value), w2, b2);
  return affine(c.act.cwiseProduct(c.value).cwiseProduct(mask), w2, b2);
}

/// Squared Frobenius norms of the gated FFN's weight gradients
/// dW1 = X^T d(X W1) and dW2 = H^T g.
struct GatedWeightGrads {
  double w1 = 0, w2 = 0;
};

/// dH = (g W2^T) .* M, dX = (dH .* X V .* act'(X W1)) W1^T + (dH .* act(X W1)) V^T;
/// with `weights`, also the squared norms of dW1 and dW2.
inline Matrix gated_backward(Activation a, const GatedCache& c, const Matrix& x, const Matrix& w1, const Matrix& v,
                             const Matrix& w2, const Matrix& g, GatedWeightGrads* weights = nullptr) {
  const bool masked = c.mask.size() > 0;
  const Matrix dh = masked ? Matrix((g * w2.transpose()).cwiseProduct(c.mask)) : Matrix(g * w2.transpose());
  const Matrix d_pre = activation_backward(a, c.pre, dh.cwiseProduct(c.value));
  if (weights) {
    const Matrix hidden = masked ? Matrix(c.act.cwiseProduct(c.value).cwiseProduct(c.mask)) : Matrix(c.act.cwiseProduct(c.value));
    weights->w2 = (hidden.transpose() * g).squaredNorm();
    weights->w1 = (x.transpose() * d_pre).squaredNorm();
  }
  return d_pre * w1.transpose() + dh.cwiseProduct(c.act) * v.transpose();
}

/// Rotary position embeddings (Su et al., "RoFormer", 2021, eq. 34): the
/// coordinate pair (2j, 2j + 1) of row i (positions from 0) turned by the
/// angle sign i theta_j, theta_j = base^(-2j/cols). The rotation is
/// orthogonal, so sign = -1 is both its inverse and its backward. base 0:
/// x unchanged.
inline Matrix rotate_pairs(const Matrix& x, double base, double sign = 1) {
  if (base == 0) return x;
  Matrix y = x;
  const auto width = static_cast<double>(x.cols());
  for (Eigen::Index j = 0; j + 1 < x.cols(); j += 2) {
    const double theta = std::pow(base, -static_cast<double>(j) / width);
    for (Eigen::Index i = 0; i < x.rows(); ++i) {
      const double angle = sign * static_cast<double>(i) * theta, c = std::cos(angle), s = std::sin(angle);
      y(i, j) = c * x(i, j) - s * x(i, j + 1);
      y(i, j + 1) = s * x(i, j) + c * x(i, j + 1);
    }
  }
  return y;
}

/// One attention head: S = Q K^T / d_k^e (e = 1/2, or 1 for muP's logit
/// scale), P = softmax over each row (keys),
/// P_drop = P .* mask (inverted dropout on the probabilities), O = P_drop V.
struct AttentionCache {
  Matrix q, k, v, probs, mask;  ///< q and k as the scores see them (rotated)
  double scale = 1;
  double rotary_base = 0;
};

/// Biases of one head's Q, K and V (1 x d_k each; empty: none), added to
/// every position before the rotation.
struct HeadBiases {
  Eigen::RowVectorXd q, k, v;
};

/// One head's forward with a given inverted-dropout mask on the probabilities
/// (L x L; empty: no dropout). `causal`: query i attends to keys 1..i (the
/// scores above the diagonal are -inf); `rotary_base` > 0: Q and K turned by
/// rotate_pairs; `logit_power` the exponent e.
inline AttentionCache attention_head_forward(const Matrix& x, const Matrix& wq, const Matrix& wk,
                                             const Matrix& wv, const Matrix& mask, Matrix& out,
                                             bool causal = false, double rotary_base = 0,
                                             const HeadBiases& bias = {}, double logit_power = 0.5) {
  AttentionCache c;
  c.rotary_base = rotary_base;
  c.q = rotate_pairs(affine(x, wq, bias.q), rotary_base);
  c.k = rotate_pairs(affine(x, wk, bias.k), rotary_base);
  c.v = affine(x, wv, bias.v);
  const auto d_k = static_cast<double>(wq.cols());
  c.scale = logit_power == 0.5 ? 1 / std::sqrt(d_k) : std::pow(d_k, -logit_power);
  Matrix scores = (c.q * c.k.transpose()) * c.scale;
  if (causal) scores.triangularView<Eigen::StrictlyUpper>().setConstant(-std::numeric_limits<double>::infinity());
  c.probs = softmax_rows(scores);
  c.mask = mask;
  out = mask.size() > 0 ? Matrix(c.probs.cwiseProduct(mask) * c.v) : Matrix(c.probs * c.v);
  return c;
}

/// The same with the mask drawn from `rng` at dropout p (none for p = 0).
inline AttentionCache attention_head_forward(const Matrix& x, const Matrix& wq, const Matrix& wk,
                                             const Matrix& wv, double p, Random& rng,
                                             Matrix& out, bool causal = false, double rotary_base = 0,
                                             const HeadBiases& bias = {}, double logit_power = 0.5) {
  const Matrix mask = p > 0 ? dropout_mask(x.rows(), x.rows(), p, rng) : Matrix();
  return attention_head_forward(x, wq, wk, wv, mask, out, causal, rotary_base, bias, logit_power);
}

/// The gradients of one head's Q = x Wq, K = x Wk (before the rotation) and
/// V = x Wv for loss = sum(out .* g): the value path is V's, the softmax path
/// Q's and K's.
struct HeadGrads {
  Matrix q, k, v;
};

inline HeadGrads attention_head_grads(const AttentionCache& c, const Matrix& g) {
  const bool dropped = c.mask.size() > 0;
  HeadGrads d;
  d.v = dropped ? Matrix(c.probs.cwiseProduct(c.mask).transpose() * g) : Matrix(c.probs.transpose() * g);
  Matrix dp = g * c.v.transpose();
  if (dropped) dp = dp.cwiseProduct(c.mask);
  const Matrix ds = softmax_rows_backward(c.probs, dp) * c.scale;
  d.q = rotate_pairs(ds * c.k, c.rotary_base, -1);
  d.k = rotate_pairs(ds.transpose() * c.q, c.rotary_base, -1);
  return d;
}

/// Squared Frobenius norms of one head's weight gradients dWq = x^T dQ, ...
struct HeadWeightGrads {
  double q = 0, k = 0, v = 0;
};

/// Backward of one head through the value path and the softmax (Q, K) path.
/// Adds the input gradient to `dx`; with `weights`, also the squared norms of
/// the weight gradients.
inline void attention_head_backward(const AttentionCache& c, const Matrix& x, const Matrix& wq,
                                    const Matrix& wk, const Matrix& wv, const Matrix& g,
                                    Matrix& dx, HeadWeightGrads* weights = nullptr) {
  const HeadGrads d = attention_head_grads(c, g);
  dx += d.q * wq.transpose();
  dx += d.k * wk.transpose();
  dx += d.v * wv.transpose();
  if (weights) {
    weights->q = (x.transpose() * d.q).squaredNorm();
    weights->k = (x.transpose() * d.k).squaredNorm();
    weights->v = (x.transpose() * d.v).squaredNorm();
  }
}

}  // namespace sigprop::montecarlo::ops
