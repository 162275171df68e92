// sigprop/montecarlo/components/gated.hpp -- the empirical twin of the gated
// FFN block (blocks/ffn_block.hpp, glu_ffn_block): the real gated FFN of
// ops.hpp (ops::gated_forward, ops::gated_backward; the same the whole-model
// simulation runs) with Gaussian W1, V, W2, dropout on the gated product and
// on the output, and real backprop.
#pragma once

#include "sigprop/blocks/ffn_block.hpp"
#include "sigprop/montecarlo/ops.hpp"
#include "sigprop/montecarlo/sampler.hpp"
#include "sigprop/montecarlo/validation.hpp"

namespace sigprop::montecarlo {

/// Simulates `block` with the entrywise activation `activation` (the one the
/// block's type names) on setup.seq_len positions.
template <class Activation>
SimulationResult simulate(const GluFfnBlock<double, Activation>& block, ops::Activation activation,
                          const Moments<double>& in, const GradMoments<double>& grad, const SimulationSetup& setup) {
  constexpr const char* fn = "sigprop::montecarlo::simulate(GluFfnBlock)";
  require_setup(fn, setup);
  const Linear<double>& first = block.template part<0>().gate().template part<0>();
  const Linear<double>& value = block.template part<0>().value();
  const double q = block.template part<1>().p();
  const Linear<double>& second = block.template part<2>();
  const double p = block.template part<3>().p();
  const Eigen::Index d = to_size(fn, "d", first.d_in()), h = to_size(fn, "hidden", first.d_out());
  Random rng(setup.seed);
  MomentAccumulator fwd, bwd;
  for (std::size_t t = 0; t < setup.trials; ++t) {
    const ops::Matrix x = sample_activations(setup.seq_len, d, in, rng);
    const ops::Matrix w1 = rng.normal_matrix(d, h, first.weight_var()), v = rng.normal_matrix(d, h, value.weight_var()),
                      w2 = rng.normal_matrix(h, d, second.weight_var());
    ops::GatedCache cache;
    const ops::Matrix mask = q > 0 ? ops::dropout_mask(setup.seq_len, h, q, rng) : ops::Matrix();
    ops::Matrix y = ops::gated_forward(activation, x, w1, v, w2, cache, mask);
    ops::Matrix g = sample_gradient(setup.seq_len, d, grad, rng);
    if (p > 0) {
      const ops::Matrix mask = ops::dropout_mask(y.rows(), y.cols(), p, rng);
      y = y.cwiseProduct(mask);
      g = g.cwiseProduct(mask);
    }
    fwd.add(y);
    bwd.add(ops::gated_backward(activation, cache, x, w1, v, w2, g));
  }
  return {fwd.result(), bwd.grad_result()};
}

}  // namespace sigprop::montecarlo
