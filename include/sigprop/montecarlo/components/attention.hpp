// sigprop/montecarlo/components/attention.hpp -- the empirical twin of
// sigprop::Attention: real single-head scaled dot-product attention with
// Gaussian Wq, Wk, Wv, a real softmax over the keys, a real inverted-dropout
// mask on the attention probabilities, and real backpropagation through every
// path (values, and the softmax through queries and keys).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "sigprop/components/attention.hpp"
#include "sigprop/montecarlo/components/dropout.hpp"
#include "sigprop/montecarlo/ops.hpp"
#include "sigprop/montecarlo/sampler.hpp"
#include "sigprop/montecarlo/validation.hpp"

namespace sigprop::montecarlo {

/// One simulation with the input gradient split by path: the value path
/// (through V = X Wv) and the softmax path (through Q = X Wq and K = X Wk).
/// `backward` is their sum, the real gradient.
struct AttentionSimulationResult {
  MomentEstimates forward;
  GradEstimates backward;
  GradEstimates backward_value_path;
  GradEstimates backward_softmax_path;
};

/// The L x d_k output Y of one trial and the three parts of dLoss/dX for
/// loss = sum(Y .* g).
struct AttentionTrial {
  Eigen::MatrixXd out, grad_value_path, grad_softmax_path;
};

/// One forward and backward pass: x is L x d_in, g is L x d_k, mask is the
/// L x L inverted-dropout mask (empty for p = 0); `causal`: query i attends
/// to keys 1..i only (the scores above the diagonal are -inf); `rotary`:
/// queries and keys turned by ops::rotate_pairs (and back in the backward);
/// `logit_scale`: the scores divided by sqrt(d_k) or by d_k.
inline AttentionTrial attention_trial(const Eigen::MatrixXd& x, const Eigen::MatrixXd& wq,
                                      const Eigen::MatrixXd& wk, const Eigen::MatrixXd& wv,
                                      const Eigen::MatrixXd& mask, const Eigen::MatrixXd& g, bool causal = false,
                                      RotaryEmbedding rotary = {}, const ops::HeadBiases& bias = {},
                                      LogitScale logit_scale = LogitScale::inv_sqrt_dk) {
  AttentionTrial t;
  const ops::AttentionCache c = ops::attention_head_forward(x, wq, wk, wv, mask, t.out, causal, rotary.base, bias,
                                                            logit_scale == LogitScale::inv_dk ? 1.0 : 0.5);
  const ops::HeadGrads d = ops::attention_head_grads(c, g);
  t.grad_value_path = d.v * wv.transpose();
  t.grad_softmax_path = d.q * wq.transpose() + d.k * wk.transpose();
  return t;
}

/// One trial's random head: the input (L x d_in), the projections Wq, Wk, Wv
/// (d_in x d_k) and the dropout mask (empty for p = 0), drawn from `rng` in
/// that order. The layer's sizes are whole numbers (checked by the callers).
struct HeadDraw {
  Eigen::MatrixXd x, wq, wk, wv, mask;
  RotaryEmbedding rotary;  // the layer's
  ops::HeadBiases bias;    // drawn after the mask, only where the layer has them
  LogitScale logit_scale = LogitScale::inv_sqrt_dk;  // the layer's
};

inline HeadDraw draw_head(const Attention<double>& layer, const Moments<double>& in, Random& rng) {
  const auto d_in = static_cast<Eigen::Index>(layer.d_in()), d_k = static_cast<Eigen::Index>(layer.d_k());
  const auto seq_len = static_cast<Eigen::Index>(layer.seq_len());
  HeadDraw h;
  h.x = sample_activations(seq_len, d_in, in, rng);
  h.wq = rng.normal_matrix(d_in, d_k, layer.q_var());
  h.wk = rng.normal_matrix(d_in, d_k, layer.k_var());
  h.wv = rng.normal_matrix(d_in, d_k, layer.v_var());
  if (layer.p() > 0) h.mask = dropout_mask(seq_len, seq_len, layer.p(), rng);
  h.rotary = layer.rotary();
  const auto bias = [&](double var) { return var > 0 ? Eigen::RowVectorXd(rng.normal_matrix(1, d_k, var)) : Eigen::RowVectorXd(); };
  h.bias.q = bias(layer.q_bias());
  h.bias.k = bias(layer.k_bias());
  h.bias.v = bias(layer.v_bias());
  h.logit_scale = layer.logit_scale();
  return h;
}

/// attention_trial on a drawn head.
inline AttentionTrial attention_trial(const HeadDraw& h, const Eigen::MatrixXd& g, bool causal = false) {
  return attention_trial(h.x, h.wq, h.wk, h.wv, h.mask, g, causal, h.rotary, h.bias, h.logit_scale);
}

inline AttentionSimulationResult simulate_paths(const Attention<double>& layer,
                                                const Moments<double>& in,
                                                const GradMoments<double>& grad,
                                                const SimulationSetup& setup) {
  constexpr const char* fn = "sigprop::montecarlo::simulate(Attention)";
  require_setup(fn, setup);
  to_size(fn, "d_in", layer.d_in());  // validates the sizes draw_head uses
  const Eigen::Index d_k = to_size(fn, "d_k", layer.d_k());
  const Eigen::Index seq_len = to_size(fn, "seq_len", layer.seq_len());
  Random rng(setup.seed);
  MomentAccumulator fwd, bwd, bwd_value, bwd_softmax;
  for (std::size_t trial = 0; trial < setup.trials; ++trial) {
    const HeadDraw h = draw_head(layer, in, rng);
    const Eigen::MatrixXd g = sample_gradient(seq_len, d_k, grad, rng);
    const AttentionTrial t = attention_trial(h, g);
    fwd.add(t.out);
    bwd.add(t.grad_value_path + t.grad_softmax_path);
    bwd_value.add(t.grad_value_path);
    bwd_softmax.add(t.grad_softmax_path);
  }
  return {fwd.result(), bwd.grad_result(), bwd_value.grad_result(), bwd_softmax.grad_result()};
}

/// The layer's own seq_len is the simulated L (setup.seq_len and setup.width
/// are not used); the measured gradient is the real one, through all paths.
inline SimulationResult simulate(const Attention<double>& layer, const Moments<double>& in,
                                 const GradMoments<double>& grad, const SimulationSetup& setup) {
  const AttentionSimulationResult r = simulate_paths(layer, in, grad, setup);
  return {r.forward, r.backward};
}

/// The comparisons of one grid, all labelled "attention" (the Table 20 row
/// they are compared with): the closed form against the real gradient (all
/// paths), against the gradient through V alone (value_path()) and through
/// Q and K alone (softmax_path()), and the paper's forms as printed (B.8)
/// against the real and the value-path gradient, from the same simulations.
struct AttentionValidation {
  ValidationReport total{"attention"};
  ValidationReport value_path{"attention"};
  ValidationReport softmax_path{"attention"};
  ValidationReport paper_total{"attention"};
  ValidationReport paper_value_path{"attention"};

  /// One grid point: the layer, its input, its predicted gradient by path
  /// and everything measured.
  struct Point {
    Attention<double> layer;
    Moments<double> in;
    GradMoments<double> grad_out, predicted_grad, predicted_value_path, predicted_softmax_path;
    AttentionSimulationResult measured;
  };
  std::vector<Point> points;
};

/// One point of the attention grid: the layer, its input moments, the
/// upstream gradient moments and the simulation setup.
struct AttentionGridPoint {
  Attention<double> layer;
  Moments<double> in;
  GradMoments<double> grad_out;
  SimulationSetup setup;
};

/// Table 21 grid for single-head attention: mu = 0, s^2 = 1, r and r_g in
/// [0, 1), g^2 in [0.1, 10], d_in in [100, 1000], d_k in {32, 64, 128, 256},
/// L in [300, 10^4], p in [0, 1) (capped at 0.9: at p -> 1 a finite sample
/// keeps almost no probabilities). Table 21 gives no Q/K/V scales; q_var and
/// k_var are drawn log-uniformly in [0.1, 2]/d_in each (score variance
/// d_in^2 q_var k_var in [0.01, 4], around the 1/d_in of Xavier and
/// DeepScaleLM) and v_var in [0.1, 10]/d_in. Widths and lengths are drawn
/// log-uniformly, `opt.scale` shrinks their upper ends towards the lower ones.
/// Trials: opt.trials_for(d_k), since the d_k value units of a trial are
/// independent draws given the input and the attention probabilities.
inline std::vector<AttentionGridPoint> attention_grid(const GridOptions& opt) {
  std::vector<AttentionGridPoint> grid;
  Random rng(opt.seed);
  auto log_uniform = [&](double lo, double hi) {
    return std::exp(uniform_in(rng, std::log(lo), std::log(hi)));
  };
  auto upper = [&](double lo, double hi) { return lo + (hi - lo) * opt.scale; };
  constexpr double head_widths[] = {32, 64, 128, 256};
  for (std::size_t i = 0; i < opt.points; ++i) {
    const double d_in = static_cast<double>(log_uniform_int(rng, 100, upper(100, 1000)));
    const double d_k = head_widths[std::min(static_cast<std::size_t>(4 * rng.uniform()), std::size_t{3})];
    const double seq_len = static_cast<double>(log_uniform_int(rng, 300, upper(300, 1e4)));
    const double q_var = log_uniform(0.1, 2) / d_in, k_var = log_uniform(0.1, 2) / d_in;
    const double v_var = log_uniform(0.1, 10) / d_in;
    const double p = uniform_in(rng, 0, 0.9);
    const Moments<double> in{0, 1, uniform_in(rng, 0, 1), 0};
    const GradMoments<double> g{log_uniform(0.1, 10), uniform_in(rng, 0, 1)};
    SimulationSetup setup;
    setup.trials = opt.trials_for(d_k);
    setup.seed = rng.next();
    grid.push_back({Attention<double>(d_in, d_k, seq_len, q_var, k_var, v_var, p), in, g, setup});
  }
  return grid;
}

/// Adds one simulated grid point to the comparisons.
inline void add_point(AttentionValidation& report, const AttentionGridPoint& point,
                      const AttentionSimulationResult& sim) {
  const Attention<double>& layer = point.layer;
  const SimulationResult total{sim.forward, sim.backward};
  const SimulationResult value{sim.forward, sim.backward_value_path};
  const SimulationResult softmax{sim.forward, sim.backward_softmax_path};
  const Moments<double> out = layer.forward(point.in);
  const GradMoments<double> grad = layer.backward(point.in, point.grad_out),
                            value_grad = layer.value_path(point.in, point.grad_out),
                            softmax_grad = layer.softmax_path(point.in, point.grad_out);
  report.total.add_all(out, grad, total);
  report.value_path.add_all(out, value_grad, value);
  report.softmax_path.add_all(out, softmax_grad, softmax);
  report.paper_total.add_all(layer.forward_paper(point.in), layer.backward_paper(point.in, point.grad_out), total);
  report.paper_value_path.add_all(layer.forward_paper(point.in),
                                  layer.backward_paper(point.in, point.grad_out), value);
  report.points.push_back({layer, point.in, point.grad_out, grad, value_grad, softmax_grad, sim});
}

/// Simulates every point of attention_grid(opt) and compares.
inline AttentionValidation validate_attention_paths(const GridOptions& opt) {
  AttentionValidation report;
  for (const AttentionGridPoint& point : attention_grid(opt))
    add_point(report, point, simulate_paths(point.layer, point.in, point.grad_out, point.setup));
  return report;
}

/// The Table 20 comparison: the closed form against the real gradient.
inline ValidationReport validate_attention(const GridOptions& opt) {
  return validate_attention_paths(opt).total;
}

}  // namespace sigprop::montecarlo
