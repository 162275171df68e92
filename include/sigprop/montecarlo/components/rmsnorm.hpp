// sigprop/montecarlo/components/rmsnorm.hpp -- the empirical twin of
// sigprop::RmsNorm: a real root-mean-square normalization of each row (gain
// g0, no centering, no epsilon) and real backprop through it.
#pragma once

#include <algorithm>
#include <cmath>

#include <Eigen/Core>

#include "sigprop/components/rmsnorm.hpp"
#include "sigprop/montecarlo/random.hpp"
#include "sigprop/montecarlo/sampler.hpp"
#include "sigprop/montecarlo/statistics.hpp"
#include "sigprop/montecarlo/validation.hpp"

namespace sigprop::montecarlo {

namespace ops {

/// RMSNorm over each row: y = gain * x / sqrt(mean_row(x^2) + eps).
struct RmsNormCache {
  Eigen::MatrixXd y;         // output, gain * x_hat
  Eigen::MatrixXd x_hat;     // x / rms(x), each row of squared norm d (eps = 0)
  Eigen::VectorXd inv_rms;   // 1 / sqrt(mean_row(x^2) + eps)
  double gain = 1;
};

inline RmsNormCache rmsnorm_forward(const Eigen::MatrixXd& x, double gain = 1, double eps = 0) {
  const double d = static_cast<double>(x.cols());
  RmsNormCache c;
  c.gain = gain;
  c.inv_rms = (x.rowwise().squaredNorm().array() / d + eps).rsqrt().matrix();
  c.x_hat = c.inv_rms.asDiagonal() * x;
  c.y = gain * c.x_hat;
  return c;
}

/// dx = gain * inv_rms * (g - x_hat * mean_row(g .* x_hat)): the Jacobian of a
/// row is gain inv_rms (I - x x^T inv_rms^2/d) = gain inv_rms (I - x_hat x_hat^T/d)
/// (with or without eps).
inline Eigen::MatrixXd rmsnorm_backward(const RmsNormCache& c, const Eigen::MatrixXd& g) {
  const double d = static_cast<double>(g.cols());
  const Eigen::VectorXd gx_mean = g.cwiseProduct(c.x_hat).rowwise().sum() / d;
  Eigen::MatrixXd dx = g;
  dx -= gx_mean.asDiagonal() * c.x_hat;
  return (c.gain * c.inv_rms).asDiagonal() * dx;
}

}  // namespace ops

/// RMSNorm of each row of `x` and its backward pass for the upstream gradient `g`.
struct RmsNormPass {
  Eigen::MatrixXd out, grad_in;
};

inline RmsNormPass rmsnorm_pass(const Eigen::MatrixXd& x, const Eigen::MatrixXd& g, double gain = 1) {
  const ops::RmsNormCache c = ops::rmsnorm_forward(x, gain);
  return {c.y, ops::rmsnorm_backward(c, g)};
}

/// Inputs are drawn with sample_activations_separable (for the closed form's
/// domain, mean 0 and corr_dim 0, i.i.d. rows of isotropic Gaussians correlated
/// r^l across positions), the upstream gradient with sample_gradient. Inputs
/// outside that domain (mean != 0, corr_dim != 0) are simulated too: this is
/// how to measure them.
inline SimulationResult simulate(const RmsNorm<double>& layer, const Moments<double>& in,
                                 const GradMoments<double>& grad, const SimulationSetup& setup) {
  constexpr const char* fn = "sigprop::montecarlo::simulate(RmsNorm)";
  require_setup(fn, setup);
  const double gain = layer.gain();
  return simulate_rowwise(to_size(fn, "d", layer.d()), in, grad, setup,
                          [gain](const Eigen::MatrixXd& x, const Eigen::MatrixXd& g) {
                            return rmsnorm_pass(x, g, gain);
                          });
}

namespace detail {

// Every output row has squared norm gain^2 d, so the per-trial raw second
// moment is gain^2 up to rounding and the measured variance, m2 - m1^2 with
// m1 the pooled mean, deviates from gain^2 by m1^2 alone. The accumulator's
// standard error treats m1 as fixed (it is rounding only); here m1 is a real
// sample mean, so the delta method for m2 - m1^2 adds 2 |m1| se(m1). Floored
// at 1e-12 gain^2, above the rounding of a sum of L d <= 1e7 terms.
inline Estimate rmsnorm_output_variance(const MomentEstimates& e, double gain) {
  Estimate v = e.var;
  const double centering = 2 * std::abs(e.mean.value) * e.mean.std_error;
  v.std_error = std::max(std::hypot(v.std_error, centering), 1e-12 * gain * gain);
  return v;
}

}  // namespace detail

/// Table 21 grid in the closed form's domain: mean 0 and r^d = 0; s^2 and g^2
/// in [0.1, 10], r, r_g in [0, 1), d in [10, 1000], L in [100, 1000]
/// (table21_input / table21_grad / table21_setup), and a gain g0
/// log-uniform in [0.5, 2]. Trials: opt.trials_for(d).
inline ValidationReport validate_rmsnorm(const GridOptions& opt) {
  ValidationReport report("rmsnorm");
  Random rng(opt.seed);
  for (std::size_t i = 0; i < opt.points; ++i) {
    const Moments<double> in = table21_input(rng);
    const GradMoments<double> g = table21_grad(rng);
    const SimulationSetup setup = table21_setup(rng, opt);
    const double gain = log_uniform_in(rng, 0.5, 2);
    const RmsNorm<double> layer(static_cast<double>(setup.width), gain);
    const Moments<double> out = layer.forward(in);
    const GradMoments<double> grad_in = layer.backward(in, g);
    SimulationResult sim = simulate(layer, in, g, setup);
    sim.forward.var = detail::rmsnorm_output_variance(sim.forward, gain);
    report.add_all(out, grad_in, sim);
  }
  return report;
}

}  // namespace sigprop::montecarlo
