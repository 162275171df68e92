// sigprop/montecarlo/components/linear.hpp -- the empirical twin of
// sigprop::Linear: a real x W + b with Gaussian W and b (b drawn once per trial
// and added to every row; uniform with SimulationSetup::uniform_weights), and
// real backprop g W^T.
#pragma once

#include "sigprop/components/linear.hpp"
#include "sigprop/montecarlo/sampler.hpp"
#include "sigprop/montecarlo/validation.hpp"

namespace sigprop::montecarlo {

inline SimulationResult simulate(const Linear<double>& layer, const Moments<double>& in,
                                 const GradMoments<double>& grad, const SimulationSetup& setup) {
  constexpr const char* fn = "sigprop::montecarlo::simulate(Linear)";
  require_setup(fn, setup);
  const Eigen::Index d_in = to_size(fn, "d_in", layer.d_in());
  const Eigen::Index d_out = to_size(fn, "d_out", layer.d_out());
  Random rng(setup.seed);
  MomentAccumulator fwd, bwd;
  for (std::size_t t = 0; t < setup.trials; ++t) {
    const Eigen::MatrixXd x = sample_activations(setup.seq_len, d_in, in, rng);
    const Eigen::MatrixXd w = rng.weight_matrix(d_in, d_out, layer.weight_var(), setup.uniform_weights);
    const Eigen::MatrixXd g = sample_gradient(setup.seq_len, d_out, grad, rng);
    Eigen::MatrixXd y = x * w;
    if (layer.bias_var() > 0) y.rowwise() += rng.weight_matrix(1, d_out, layer.bias_var(), setup.uniform_weights).row(0);
    fwd.add(y);
    bwd.add(g * w.transpose());
  }
  return {fwd.result(), bwd.grad_result()};
}

/// Table 21 grid: mu in [-10, 10], s^2 in [0.1, 10], r, r_g in [0, 1),
/// g^2 in [0.1, 10], d_in, d_out in [10, 1000], L in [100, 1000],
/// s_w^2 in [1e-2, 1e2]/d_in. Scales and widths are drawn log-uniformly,
/// means and correlations uniformly; `opt.scale` shrinks the upper ends.
inline ValidationReport validate_linear(const GridOptions& opt) {
  ValidationReport report("linear");
  Random rng(opt.seed);
  for (std::size_t i = 0; i < opt.points; ++i) {
    const double d_in = static_cast<double>(log_uniform_int(rng, 10, 1000 * opt.scale + 10));
    const double d_out = static_cast<double>(log_uniform_int(rng, 10, 1000 * opt.scale + 10));
    const double weight_var = log_uniform_in(rng, 1e-2, 1e2) / d_in;
    const Moments<double> in = table21_input(rng, 10);
    const GradMoments<double> g = table21_grad(rng);
    SimulationSetup setup;
    setup.seq_len = log_uniform_int(rng, 100, 1000 * opt.scale + 100);
    setup.trials = opt.trials_for(std::min(d_in, d_out));
    setup.seed = rng.next();
    const Linear<double> layer(d_in, d_out, weight_var);
    report.add_all(layer.forward(in), layer.backward(in, g), simulate(layer, in, g, setup));
  }
  return report;
}

}  // namespace sigprop::montecarlo
