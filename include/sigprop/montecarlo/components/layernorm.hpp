// sigprop/montecarlo/components/layernorm.hpp -- the empirical twin of
// sigprop::LayerNorm: a real row normalization (biased variance, no epsilon)
// and real backprop through it.
#pragma once

#include <algorithm>

#include "sigprop/components/layernorm.hpp"
#include "sigprop/montecarlo/sampler.hpp"
#include "sigprop/montecarlo/validation.hpp"

namespace sigprop::montecarlo {

/// LayerNorm of each row of `x` and its backward pass for the upstream
/// gradient `g` (Xu et al. 2019, Eq. 17):
///   y = (x - mean(x)) / sd(x),  g_in = (g - mean(g) - y mean(g .* y)) / sd(x).
struct LayerNormPass {
  Eigen::MatrixXd out, grad_in;
};

inline LayerNormPass layernorm_pass(const Eigen::MatrixXd& x, const Eigen::MatrixXd& g) {
  const double d = static_cast<double>(x.cols());
  const Eigen::MatrixXd centered = x.colwise() - x.rowwise().mean();
  const Eigen::VectorXd inv_sd = (centered.rowwise().squaredNorm() / d).cwiseSqrt().cwiseInverse();
  LayerNormPass p;
  p.out = inv_sd.asDiagonal() * centered;
  const Eigen::VectorXd g_mean = g.rowwise().mean();
  const Eigen::VectorXd gy_mean = g.cwiseProduct(p.out).rowwise().mean();
  p.grad_in = inv_sd.asDiagonal() * ((g.colwise() - g_mean) - gy_mean.asDiagonal() * p.out);
  return p;
}

/// Inputs are drawn with sample_activations_separable (the covariance model
/// LayerNorm is derived for; with corr_dim = 0 the compound-symmetric model of
/// appendix E), the upstream gradient with sample_gradient.
inline SimulationResult simulate(const LayerNorm<double>& layer, const Moments<double>& in,
                                 const GradMoments<double>& grad, const SimulationSetup& setup) {
  constexpr const char* fn = "sigprop::montecarlo::simulate(LayerNorm)";
  require_setup(fn, setup);
  const Eigen::Index d = to_size(fn, "d", layer.d());
  Random rng(setup.seed);
  MomentAccumulator fwd, bwd;
  for (std::size_t t = 0; t < setup.trials; ++t) {
    const Eigen::MatrixXd x = sample_activations_separable(setup.seq_len, d, in, rng);
    const Eigen::MatrixXd g = sample_gradient(setup.seq_len, d, grad, rng);
    const LayerNormPass p = layernorm_pass(x, g);
    fwd.add(p.out);
    bwd.add(p.grad_in);
  }
  return {fwd.result(), bwd.grad_result()};
}

namespace detail {

// The output's mean and variance are identities of every sample (each row sums
// to 0 and has squared norm d), so their spread over trials is rounding alone:
// floor the standard error at 1e-12, above the rounding of a sum of L d <= 1e7
// terms (about 1e-16 sqrt(1e7) = 3e-13) and far below any modelling error.
inline Estimate with_rounding_floor(Estimate e) {
  e.std_error = std::max(e.std_error, 1e-12);
  return e;
}

}  // namespace detail

/// Table 21 grid: mu in [-10, 10], s^2 and g^2 in [0.1, 10], r, r_g in [0, 1),
/// d in [10, 1000], L in [100, 1000] (r^d = 0 as in the paper). Scales and
/// widths are drawn log-uniformly, means and correlations uniformly;
/// `opt.scale` shrinks the upper ends. Trials: opt.trials_for(d).
inline ValidationReport validate_layernorm(const GridOptions& opt) {
  ValidationReport report("layernorm");
  Random rng(opt.seed);
  for (std::size_t i = 0; i < opt.points; ++i) {
    const double d = static_cast<double>(log_uniform_int(rng, 10, 1000 * opt.scale + 10));
    const Moments<double> in{uniform_in(rng, -10, 10), std::exp(uniform_in(rng, std::log(0.1), std::log(10))),
                             uniform_in(rng, 0, 1), 0};
    const GradMoments<double> g{std::exp(uniform_in(rng, std::log(0.1), std::log(10))), uniform_in(rng, 0, 1)};
    SimulationSetup setup;
    setup.seq_len = log_uniform_int(rng, 100, 1000 * opt.scale + 100);
    setup.trials = opt.trials_for(d);
    setup.seed = rng.next();
    const LayerNorm<double> layer(d);
    const Moments<double> out = layer.forward(in);
    const GradMoments<double> grad_in = layer.backward(in, g);
    SimulationResult sim = simulate(layer, in, g, setup);
    sim.forward.mean = detail::with_rounding_floor(sim.forward.mean);
    sim.forward.var = detail::with_rounding_floor(sim.forward.var);
    report.add_all(out, grad_in, sim);
  }
  return report;
}

}  // namespace sigprop::montecarlo
