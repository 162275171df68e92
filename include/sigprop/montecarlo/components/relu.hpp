// sigprop/montecarlo/components/relu.hpp -- the empirical twin of
// sigprop::Relu: real max(x, 0) and real backprop g .* 1{x > 0}.
#pragma once

#include "sigprop/components/relu.hpp"
#include "sigprop/montecarlo/components/elementwise.hpp"
#include "sigprop/montecarlo/ops.hpp"

namespace sigprop::montecarlo {

inline SimulationResult simulate(const Relu<double>&, const Moments<double>& in,
                                 const GradMoments<double>& grad, const SimulationSetup& setup) {
  return simulate_elementwise(
      "sigprop::montecarlo::simulate(Relu)",
      [](double x) { return ops::activation_value(ops::Activation::relu, x); },
      [](double x) { return ops::activation_derivative(ops::Activation::relu, x); }, in, grad, setup);
}

/// Table 21 grid (mean 0; see validate_elementwise).
inline ValidationReport validate_relu(const GridOptions& opt) {
  return validate_elementwise(
      "relu", Relu<double>(),
      [](const Relu<double>& layer, const Moments<double>& in, const GradMoments<double>& g,
         const SimulationSetup& setup) { return simulate(layer, in, g, setup); },
      opt);
}

/// The Table 21 grid with a nonzero input mean (not in the paper): mean / s
/// uniform in [-2, 2].
inline ValidationReport validate_relu_nonzero_mean(const GridOptions& opt) {
  return validate_elementwise(
      "relu-mean", Relu<double>(),
      [](const Relu<double>& layer, const Moments<double>& in, const GradMoments<double>& g,
         const SimulationSetup& setup) { return simulate(layer, in, g, setup); },
      opt, 2.0);
}

}  // namespace sigprop::montecarlo
