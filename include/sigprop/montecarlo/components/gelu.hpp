// sigprop/montecarlo/components/gelu.hpp -- the empirical twin of
// sigprop::Gelu: real x Phi(x) (erf form) and real backprop
// g .* (Phi(x) + x phi(x)).
#pragma once

#include "sigprop/components/gelu.hpp"
#include "sigprop/montecarlo/components/elementwise.hpp"
#include "sigprop/montecarlo/ops.hpp"

namespace sigprop::montecarlo {

inline SimulationResult simulate(const Gelu<double>&, const Moments<double>& in,
                                 const GradMoments<double>& grad, const SimulationSetup& setup) {
  return simulate_elementwise(
      "sigprop::montecarlo::simulate(Gelu)",
      [](double x) { return ops::activation_value(ops::Activation::gelu, x); },
      [](double x) { return ops::activation_derivative(ops::Activation::gelu, x); }, in, grad, setup);
}

/// Table 21 grid (mean 0; see validate_elementwise).
inline ValidationReport validate_gelu(const GridOptions& opt) {
  return validate_elementwise(
      "gelu", Gelu<double>(),
      [](const Gelu<double>& layer, const Moments<double>& in, const GradMoments<double>& g,
         const SimulationSetup& setup) { return simulate(layer, in, g, setup); },
      opt);
}

/// The Table 21 grid with a nonzero input mean (not in the paper): mean / s
/// uniform in [-2, 2].
inline ValidationReport validate_gelu_nonzero_mean(const GridOptions& opt) {
  return validate_elementwise(
      "gelu-mean", Gelu<double>(),
      [](const Gelu<double>& layer, const Moments<double>& in, const GradMoments<double>& g,
         const SimulationSetup& setup) { return simulate(layer, in, g, setup); },
      opt, 2.0);
}

}  // namespace sigprop::montecarlo
