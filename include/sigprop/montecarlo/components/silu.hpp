// sigprop/montecarlo/components/silu.hpp -- the empirical twin of
// sigprop::Silu: real x sigma(x) and real backprop
// g .* sigma(x) (1 + x (1 - sigma(x))).
#pragma once

#include "sigprop/components/silu.hpp"
#include "sigprop/montecarlo/components/elementwise.hpp"
#include "sigprop/montecarlo/ops.hpp"

namespace sigprop::montecarlo {

inline SimulationResult simulate(const Silu<double>&, const Moments<double>& in,
                                 const GradMoments<double>& grad, const SimulationSetup& setup) {
  return simulate_elementwise(
      "sigprop::montecarlo::simulate(Silu)",
      [](double x) { return ops::activation_value(ops::Activation::silu, x); },
      [](double x) { return ops::activation_derivative(ops::Activation::silu, x); }, in, grad, setup);
}

/// The Table 21 grid (mean 0; see validate_elementwise). SiLU has no row in
/// the paper's Table 20.
inline ValidationReport validate_silu(const GridOptions& opt) {
  return validate_elementwise(
      "silu", Silu<double>(),
      [](const Silu<double>& layer, const Moments<double>& in, const GradMoments<double>& g,
         const SimulationSetup& setup) { return simulate(layer, in, g, setup); },
      opt);
}

/// The Table 21 grid with a nonzero input mean: mean / s uniform in [-2, 2].
inline ValidationReport validate_silu_nonzero_mean(const GridOptions& opt) {
  return validate_elementwise(
      "silu-mean", Silu<double>(),
      [](const Silu<double>& layer, const Moments<double>& in, const GradMoments<double>& g,
         const SimulationSetup& setup) { return simulate(layer, in, g, setup); },
      opt, 2.0);
}

}  // namespace sigprop::montecarlo
