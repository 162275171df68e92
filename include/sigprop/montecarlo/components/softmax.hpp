// sigprop/montecarlo/components/softmax.hpp -- the empirical twin of
// sigprop::Softmax: a real softmax over the n entries of each row and real
// backprop through its full Jacobian diag(p) - p p^T.
#pragma once

#include <algorithm>

#include "sigprop/components/softmax.hpp"
#include "sigprop/montecarlo/ops.hpp"
#include "sigprop/montecarlo/sampler.hpp"
#include "sigprop/montecarlo/validation.hpp"

namespace sigprop::montecarlo {

/// Softmax of each row of `x` (shifted by the row maximum) and its backward
/// pass for the upstream gradient `g`: g_in = p .* (g - sum_k p_k g_k).
struct SoftmaxPass {
  Eigen::MatrixXd out, grad_in;
};

inline SoftmaxPass softmax_pass(const Eigen::MatrixXd& x, const Eigen::MatrixXd& g) {
  SoftmaxPass p;
  p.out = ops::softmax_rows(x);
  p.grad_in = ops::softmax_rows_backward(p.out, g);
  return p;
}

/// Rows are positions, columns the n normalized entries. Inputs are drawn
/// with sample_activations_separable (corr_dim: among the n entries; corr_len:
/// between rows), the upstream gradient with sample_gradient.
inline SimulationResult simulate(const Softmax<double>& layer, const Moments<double>& in,
                                 const GradMoments<double>& grad, const SimulationSetup& setup) {
  constexpr const char* fn = "sigprop::montecarlo::simulate(Softmax)";
  require_setup(fn, setup);
  return simulate_rowwise(to_size(fn, "n", layer.n()), in, grad, setup, softmax_pass);
}

/// Table 21 grid: s^2 in [1e-4, 1], g^2 in [0.1, 10], the correlation among
/// the normalized entries (the paper's r; corr_dim here) in [0, 1), n (the
/// paper's L) in [300, 1e4]. Not in the paper, drawn as well: the input mean
/// in [-10, 10] (it must have no effect), the correlation between rows
/// corr_len and r_g in [0, 1 - corr_dim) and [0, 1), 16 to 64 rows. Scales and
/// sizes are drawn log-uniformly, the rest uniformly; `opt.scale` shrinks the
/// upper end of n. Trials: opt.trials_for(n), at least 32. The covariance
/// between rows (not in the paper's Table 20) is recorded too.
inline ValidationReport validate_softmax(const GridOptions& opt, SoftmaxForm form = SoftmaxForm::exact) {
  ValidationReport report("softmax");
  Random rng(opt.seed);
  for (std::size_t i = 0; i < opt.points; ++i) {
    const double n = static_cast<double>(log_uniform_int(rng, 300, 10000 * opt.scale + 300));
    Moments<double> in;
    in.mean = uniform_in(rng, -10, 10);
    in.var = std::exp(uniform_in(rng, std::log(1e-4), std::log(1.0)));
    in.corr_dim = uniform_in(rng, 0, 1);
    in.corr_len = uniform_in(rng, 0, 1 - in.corr_dim);
    const GradMoments<double> g = table21_grad(rng);
    SimulationSetup setup;
    setup.seq_len = log_uniform_int(rng, 16, 64);
    // At least 32 trials: the z-scores divide by a standard error estimated
    // from the spread over trials, which is itself too noisy with fewer.
    setup.trials = std::max<std::size_t>(opt.trials_for(n), 32);
    setup.seed = rng.next();
    const Softmax<double> layer(n, form);
    const Moments<double> out = layer.forward(in);
    const GradMoments<double> grad_in = layer.backward(in, g);
    SimulationResult sim = simulate(layer, in, g, setup);
    // The mean is 1/n in every sample (each row sums to 1): its spread over
    // trials is rounding alone, so floor the standard error at 1e-12 relative.
    sim.forward.mean.std_error = std::max(sim.forward.mean.std_error, 1e-12 * out.mean);
    report.add_all(out, grad_in, sim);
  }
  return report;
}

}  // namespace sigprop::montecarlo
