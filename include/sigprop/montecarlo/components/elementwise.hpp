// sigprop/montecarlo/components/elementwise.hpp -- the simulation shared by
// every entrywise activation (ReLU, GeLU, SiLU): the real forward y = f(x) on an
// L x d input and real backprop of loss = sum(y .* g), dx = g .* f'(x).
#pragma once

#include <cmath>

#include "sigprop/montecarlo/sampler.hpp"
#include "sigprop/montecarlo/statistics.hpp"
#include "sigprop/montecarlo/validation.hpp"

namespace sigprop::montecarlo {

/// Simulates y = value(x), dx = g .* derivative(x) entrywise on setup.seq_len x
/// setup.width inputs with the moments `in` and upstream gradients `grad`.
template <class Value, class Derivative>
SimulationResult simulate_elementwise(const char* function, Value value, Derivative derivative,
                                      const Moments<double>& in, const GradMoments<double>& grad,
                                      const SimulationSetup& setup) {
  require_setup(function, setup);
  Random rng(setup.seed);
  MomentAccumulator fwd, bwd;
  for (std::size_t t = 0; t < setup.trials; ++t) {
    const Eigen::MatrixXd x = sample_activations(setup.seq_len, setup.width, in, rng);
    const Eigen::MatrixXd g = sample_gradient(setup.seq_len, setup.width, grad, rng);
    fwd.add(x.unaryExpr(value));
    bwd.add(g.cwiseProduct(x.unaryExpr(derivative)));
  }
  return {fwd.result(), bwd.grad_result()};
}

/// Table 21 grid for an entrywise activation: s^2 and g^2 log-uniform in
/// [0.1, 10], r and r_g uniform in [0, 1), d in [10, 1000] and L in
/// [100, 1000] log-uniform (upper ends shrunk by opt.scale), mean 0 as in the
/// paper, or, with max_standardized_mean > 0, mean = a s with a uniform in
/// [-max_standardized_mean, max_standardized_mean] (not in the paper; keep it
/// small enough that a simulated tensor has positive entries, e.g. 2).
/// `simulate` is called as simulate(layer, in, grad, setup).
template <class Layer, class Simulate>
ValidationReport validate_elementwise(const std::string& component, const Layer& layer,
                                      Simulate simulate, const GridOptions& opt,
                                      double max_standardized_mean = 0) {
  ValidationReport report(component);
  Random rng(opt.seed);
  for (std::size_t i = 0; i < opt.points; ++i) {
    Moments<double> in = table21_input(rng);
    if (max_standardized_mean > 0)
      in.mean = uniform_in(rng, -max_standardized_mean, max_standardized_mean) * std::sqrt(in.var);
    const GradMoments<double> g = table21_grad(rng);
    const SimulationSetup setup = table21_setup(rng, opt);
    report.add_all(layer.forward(in), layer.backward(in, g), simulate(layer, in, g, setup));
  }
  return report;
}

}  // namespace sigprop::montecarlo
