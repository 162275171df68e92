// sigprop/montecarlo/components/dropout.hpp -- the empirical twin of
// sigprop::Dropout: real Bernoulli masks, the same mask in the backward pass.
#pragma once

#include "sigprop/components/dropout.hpp"
#include "sigprop/montecarlo/ops.hpp"
#include "sigprop/montecarlo/sampler.hpp"
#include "sigprop/montecarlo/validation.hpp"

namespace sigprop::montecarlo {

using ops::dropout_mask;  // one mask sampler for every simulation

inline SimulationResult simulate(const Dropout<double>& layer, const Moments<double>& in,
                                 const GradMoments<double>& grad, const SimulationSetup& setup) {
  require_setup("sigprop::montecarlo::simulate(Dropout)", setup);
  Random rng(setup.seed);
  MomentAccumulator fwd, bwd;
  for (std::size_t t = 0; t < setup.trials; ++t) {
    const Eigen::MatrixXd x = sample_activations(setup.seq_len, setup.width, in, rng);
    const Eigen::MatrixXd mask = dropout_mask(setup.seq_len, setup.width, layer.p(), rng);
    const Eigen::MatrixXd g = sample_gradient(setup.seq_len, setup.width, grad, rng);
    fwd.add(x.cwiseProduct(mask));
    bwd.add(g.cwiseProduct(mask));
  }
  return {fwd.result(), bwd.grad_result()};
}

/// Table 21 grid: mu in [-10, 10], s^2 and g^2 in [0.1, 10], r, r_g, p in
/// [0, 1) (p capped at 0.95: at p -> 1 a finite sample has almost no kept
/// entries), d in [10, 1000], L in [100, 1000].
inline ValidationReport validate_dropout(const GridOptions& opt) {
  ValidationReport report("dropout");
  Random rng(opt.seed);
  for (std::size_t i = 0; i < opt.points; ++i) {
    const Dropout<double> layer(uniform_in(rng, 0, 0.95));
    const Moments<double> in = table21_input(rng, 10);
    const GradMoments<double> g = table21_grad(rng);
    const SimulationSetup setup = table21_setup(rng, opt);
    report.add_all(layer.forward(in), layer.backward(in, g), simulate(layer, in, g, setup));
  }
  return report;
}

}  // namespace sigprop::montecarlo
