// sigprop/montecarlo/components/layernorm.hpp -- the empirical twin of
// sigprop::LayerNorm: a real row normalization (biased variance, no epsilon)
// and real backprop through it.
#pragma once

#include <algorithm>

#include "sigprop/components/layernorm.hpp"
#include "sigprop/montecarlo/ops.hpp"
#include "sigprop/montecarlo/sampler.hpp"
#include "sigprop/montecarlo/validation.hpp"

namespace sigprop::montecarlo {

/// LayerNorm of each row of `x` and its backward pass for the upstream
/// gradient `g` (Xu et al. 2019, Eq. 17), with the affine map g0 y + b0:
///   y = (x - mean(x)) / sd(x),  g_in = g0 (g - mean(g) - y mean(g .* y)) / sd(x).
struct LayerNormPass {
  Eigen::MatrixXd out, grad_in;
};

inline LayerNormPass layernorm_pass(const Eigen::MatrixXd& x, const Eigen::MatrixXd& g, double gain = 1,
                                    double bias = 0) {
  const ops::LayerNormCache c = ops::layernorm_forward(x);
  if (gain == 1 && bias == 0) return {c.y, ops::layernorm_backward(c, g)};
  return {((gain * c.y).array() + bias).matrix(), ops::layernorm_backward(c, gain * g)};
}

/// Inputs are drawn with sample_activations_separable (the covariance model
/// LayerNorm is derived for; with corr_dim = 0 the compound-symmetric model of
/// appendix E), the upstream gradient with sample_gradient.
inline SimulationResult simulate(const LayerNorm<double>& layer, const Moments<double>& in,
                                 const GradMoments<double>& grad, const SimulationSetup& setup) {
  constexpr const char* fn = "sigprop::montecarlo::simulate(LayerNorm)";
  require_setup(fn, setup);
  const double gain = layer.gain(), bias = layer.bias();
  return simulate_rowwise(to_size(fn, "d", layer.d()), in, grad, setup,
                          [gain, bias](const Eigen::MatrixXd& x, const Eigen::MatrixXd& g) {
                            return layernorm_pass(x, g, gain, bias);
                          });
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
    const Moments<double> in = table21_input(rng, 10);
    const GradMoments<double> g = table21_grad(rng);
    const SimulationSetup setup = table21_setup(rng, opt);
    const LayerNorm<double> layer(static_cast<double>(setup.width));
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
