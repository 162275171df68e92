// sigprop/models/impl/measures.ipp -- the definitions of models/measures.hpp
// (docs/schemes.md, "Quantities in the trace").
#pragma once

#include <cstddef>
#include <vector>

#include "sigprop/models/detail/sublayers.hpp"
#include "sigprop/models/measures.hpp"

namespace sigprop {

namespace detail {

// Each block's parts see the moments Serial::forward_all and backward_all
// give them; O, W1 and W2 contribute Linear's weight_grad_sq, V, K and Q
// Attention::weight_grad_sq.
template <class Activation>
std::vector<WeightGradNorms> weight_grad_norms_with(const ModelConfig& config, const ModelWeights& weights,
                                                    const Trace& t) {
  const StackShape<double> s = shape_of(config);
  const double L = s.seq_len;
  std::vector<WeightGradNorms> out;
  for (std::size_t n = 0; n < config.layers; ++n) {
    const LayerWeights& w = weights.layers[n];
    WeightGradNorms g;
    {
      const auto block = make_attention_block(s, w);
      const auto io = branch_io(s, w, Sublayer::attention, block, t.rows[n].forward, t.mid[n].backward);
      const auto states = block.forward_all(io.input);
      const auto grads = block.backward_all(io.input, io.grad_out);
      // grads[1]: the gradient at the heads' concatenated outputs, one head's output per entry.
      const auto& one_head = block.template part<0>().head();
      const auto head = one_head.weight_grad_sq(io.input, grads[1]);
      g.v = s.heads * head.value;
      g.key = s.heads * head.key;
      g.key_isotropic = s.heads * one_head.weight_grad_sq(io.input, grads[1], 1.0).key;
      g.query = s.heads * head.query;
      g.o = block.template part<1>().weight_grad_sq(states[1], grads[2], L);
    }
    {
      const auto block = make_ffn_block<Activation>(s, w);
      const auto io = branch_io(s, w, Sublayer::ffn, block, t.mid[n].forward, t.rows[n + 1].backward);
      const auto states = block.forward_all(io.input);
      const auto grads = block.backward_all(io.input, io.grad_out);
      g.ffn1 = block.template part<0>().weight_grad_sq(states[0], grads[1], L);
      g.ffn2 = block.template part<3>().weight_grad_sq(states[3], grads[4], L);
    }
    out.push_back(g);
  }
  return out;
}

}  // namespace detail

SIGPROP_DECL std::vector<WeightGradNorms> weight_grad_norms(const ModelConfig& config, const ModelWeights& weights,
                                                            const Trace& t) {
  constexpr const char* fn = "sigprop::weight_grad_norms";
  config.validate(fn);
  detail::require_encoder(fn, config);
  detail::require_trace_of(fn, config, weights, t);
  return config.activation == FfnActivation::relu ? detail::weight_grad_norms_with<Relu<double>>(config, weights, t)
                                                  : detail::weight_grad_norms_with<Gelu<double>>(config, weights, t);
}

}  // namespace sigprop
