// sigprop/montecarlo/components/gelu.hpp -- the empirical twin of
// sigprop::Gelu: real x Phi(x) (erf form) or its tanh approximation (tanh
// form, as GPT-2 computes it) and real backprop g .* GeLU'(x).
#pragma once

#include "sigprop/components/gelu.hpp"
#include "sigprop/montecarlo/components/elementwise.hpp"
#include "sigprop/montecarlo/ops.hpp"

namespace sigprop::montecarlo {

inline SimulationResult simulate(const Gelu<double>& layer, const Moments<double>& in,
                                 const GradMoments<double>& grad, const SimulationSetup& setup) {
  const ops::Activation a = layer.form() == GeluForm::tanh ? ops::Activation::gelu_tanh : ops::Activation::gelu;
  return simulate_elementwise(
      "sigprop::montecarlo::simulate(Gelu)", [a](double x) { return ops::activation_value(a, x); },
      [a](double x) { return ops::activation_derivative(a, x); }, in, grad, setup);
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
