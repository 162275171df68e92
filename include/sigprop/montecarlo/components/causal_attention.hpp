// sigprop/montecarlo/components/causal_attention.hpp -- the empirical twin of
// sigprop::CausalAttention: the attention trial of attention.hpp with the
// causal mask (query i attends to keys 1..i), real backprop through every
// path, and each position's output and input-gradient variance.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <Eigen/Cholesky>

#include "sigprop/components/causal_attention.hpp"
#include "sigprop/montecarlo/components/attention.hpp"

namespace sigprop::montecarlo {

/// The sequence-wide statistics, and per position i = 1..L the mean square
/// of the output and of the input gradient (both have mean 0: zero-mean Wv,
/// and a gradient through zero-mean weights).
struct CausalAttentionSimulation {
  SimulationResult overall;
  std::vector<Estimate> position_var, position_grad_var;
};

/// The upstream gradient varies by position: row i of the sampled gradient
/// (variance 1, correlation `grad_corr` between positions) is scaled by
/// sqrt(grad_var[i - 1]), so positions i, m have covariance grad_corr
/// sqrt(g_i g_m), as CausalAttention::position_backward assumes.
inline CausalAttentionSimulation simulate_positions(const CausalAttention<double>& layer, const Moments<double>& in,
                                                    const std::vector<double>& grad_var, double grad_corr,
                                                    const SimulationSetup& setup) {
  constexpr const char* fn = "sigprop::montecarlo::simulate(CausalAttention)";
  require_setup(fn, setup);
  const Attention<double>& head = layer.full();
  const Eigen::Index d_in = to_size(fn, "d_in", head.d_in());
  const Eigen::Index d_k = to_size(fn, "d_k", head.d_k());
  const Eigen::Index seq_len = to_size(fn, "seq_len", head.seq_len());
  if (grad_var.size() != static_cast<std::size_t>(seq_len))
    sigprop::detail::raise_domain(fn, "grad_var.size()", std::to_string(grad_var.size()),
                                  "{seq_len = " + std::to_string(seq_len) + "}");
  for (double v : grad_var) require_variance(fn, "grad_var", v);
  require_correlation(fn, "grad_corr", grad_corr);
  Eigen::VectorXd grad_scale(seq_len);
  for (Eigen::Index i = 0; i < seq_len; ++i) grad_scale(i) = std::sqrt(grad_var[static_cast<std::size_t>(i)]);
  Random rng(setup.seed);
  MomentAccumulator fwd, bwd;
  std::vector<std::vector<double>> out_sq(static_cast<std::size_t>(seq_len)), grad_sq(out_sq.size());
  for (std::size_t trial = 0; trial < setup.trials; ++trial) {
    const HeadDraw h = draw_head(head, in, rng);
    const Eigen::MatrixXd g = grad_scale.asDiagonal() * sample_gradient(seq_len, d_k, {1, grad_corr}, rng);
    const AttentionTrial t = attention_trial(h, g, true);
    const Eigen::MatrixXd dx = t.grad_value_path + t.grad_softmax_path;
    fwd.add(t.out);
    bwd.add(dx);
    for (Eigen::Index i = 0; i < seq_len; ++i) {
      out_sq[static_cast<std::size_t>(i)].push_back(t.out.row(i).squaredNorm() / static_cast<double>(d_k));
      grad_sq[static_cast<std::size_t>(i)].push_back(dx.row(i).squaredNorm() / static_cast<double>(d_in));
    }
  }
  CausalAttentionSimulation s{{fwd.result(), bwd.grad_result()}, {}, {}};
  for (std::size_t i = 0; i < out_sq.size(); ++i) {
    s.position_var.push_back(detail::mean_estimate(out_sq[i]));
    s.position_grad_var.push_back(detail::mean_estimate(grad_sq[i]));
  }
  return s;
}

/// The Cholesky factor L (L L^T = m) of a covariance between positions `m`
/// (named `what`), which must be positive definite and seq_len x seq_len.
inline Eigen::MatrixXd cholesky_root(const char* fn, const std::string& what, const Eigen::MatrixXd& m,
                                     Eigen::Index seq_len) {
  const Eigen::LLT<Eigen::MatrixXd> factor(m);
  if (m.rows() != seq_len || m.cols() != seq_len || factor.info() != Eigen::Success)
    sigprop::detail::raise_domain(fn, what + " must be a positive definite seq_len x seq_len matrix");
  return factor.matrixL();
}

/// The value path's input-gradient covariance between positions, as
/// CausalAttention::value_pair_backward predicts it: the upstream gradient
/// (L x d_k) has covariance `upstream` between positions in every column
/// (its Cholesky factor times standard normals), and each trial's
/// dX_value dX_value^T / d_in estimates the matrix. Returns the trials' mean
/// and its standard error, entry by entry.
struct PairCovarianceSimulation {
  Eigen::MatrixXd mean, std_error;
};

inline PairCovarianceSimulation simulate_value_pairs(const CausalAttention<double>& layer, const Moments<double>& in,
                                                     const Eigen::MatrixXd& upstream, const SimulationSetup& setup) {
  constexpr const char* fn = "sigprop::montecarlo::simulate_value_pairs";
  require_setup(fn, setup);
  require_moments(fn, in);
  const Attention<double>& head = layer.full();
  const Eigen::Index d_in = to_size(fn, "d_in", head.d_in());
  const Eigen::Index d_k = to_size(fn, "d_k", head.d_k());
  const Eigen::Index seq_len = to_size(fn, "seq_len", head.seq_len());
  const Eigen::MatrixXd root = cholesky_root(fn, "upstream", upstream, seq_len);
  Random rng(setup.seed);
  Eigen::MatrixXd sum = Eigen::MatrixXd::Zero(seq_len, seq_len), sum_sq = sum;
  for (std::size_t trial = 0; trial < setup.trials; ++trial) {
    const HeadDraw h = draw_head(head, in, rng);
    const Eigen::MatrixXd g = root * rng.normal_matrix(seq_len, d_k, 1.0);
    const AttentionTrial t = attention_trial(h, g, true);
    const Eigen::MatrixXd cov = t.grad_value_path * t.grad_value_path.transpose() / static_cast<double>(d_in);
    sum += cov;
    sum_sq += cov.cwiseProduct(cov);
  }
  const double n = static_cast<double>(setup.trials);
  PairCovarianceSimulation s;
  s.mean = sum / n;
  const Eigen::MatrixXd spread = (sum_sq / n - s.mean.cwiseProduct(s.mean)).cwiseMax(0.0) * (n / std::max(n - 1, 1.0));
  s.std_error = (spread / n).cwiseSqrt();
  return s;
}

/// The softmax path's input-gradient variance (the mean over positions and
/// trials), as CausalAttention::softmax_path predicts it with the keys'
/// spread of `pairs` (CausalAttention::key_spread): the input has the
/// covariance `pairs` between positions in every hidden unit (its Cholesky
/// factor times standard normals, mean 0), the upstream gradient moments `grad`.
inline Estimate simulate_softmax_path(const CausalAttention<double>& layer, const Eigen::MatrixXd& pairs,
                                      const GradMoments<double>& grad, const SimulationSetup& setup) {
  constexpr const char* fn = "sigprop::montecarlo::simulate_softmax_path";
  require_setup(fn, setup);
  require_grad_moments(fn, grad);
  const Attention<double>& head = layer.full();
  const Eigen::Index d_in = to_size(fn, "d_in", head.d_in());
  const Eigen::Index d_k = to_size(fn, "d_k", head.d_k());
  const Eigen::Index seq_len = to_size(fn, "seq_len", head.seq_len());
  const Eigen::MatrixXd root = cholesky_root(fn, "pairs", pairs, seq_len);
  Random rng(setup.seed);
  std::vector<double> per_trial;
  for (std::size_t trial = 0; trial < setup.trials; ++trial) {
    HeadDraw h = draw_head(head, {0, 1, 0, 0}, rng);
    h.x = root * rng.normal_matrix(seq_len, d_in, 1.0);
    const Eigen::MatrixXd g = sample_gradient(seq_len, d_k, grad, rng);
    per_trial.push_back(attention_trial(h, g, true).grad_softmax_path.squaredNorm() /
                        static_cast<double>(seq_len * d_in));
  }
  return detail::mean_estimate(per_trial);
}

/// The same for an upstream gradient of moments `grad` at every position.
inline CausalAttentionSimulation simulate_positions(const CausalAttention<double>& layer, const Moments<double>& in,
                                                    const GradMoments<double>& grad, const SimulationSetup& setup) {
  constexpr const char* fn = "sigprop::montecarlo::simulate(CausalAttention)";
  require_grad_moments(fn, grad);
  const auto seq_len = to_size(fn, "seq_len", layer.full().seq_len());
  return simulate_positions(layer, in, std::vector<double>(static_cast<std::size_t>(seq_len), grad.var),
                            grad.corr_len, setup);
}

/// The sequence-wide statistics only (the layer's own seq_len is L).
inline SimulationResult simulate(const CausalAttention<double>& layer, const Moments<double>& in,
                                 const GradMoments<double>& grad, const SimulationSetup& setup) {
  return simulate_positions(layer, in, grad, setup).overall;
}

}  // namespace sigprop::montecarlo
