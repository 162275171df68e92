// sigprop/blocks/attention_block.hpp -- the attention block of a transformer
// layer: H heads (Q/K/V projections d -> d/H, softmax attention with dropout
// on the probabilities), concatenation, output projection W_O (d x d) and
// dropout on the output. LayerNorm placement is left to the stack.
//
// Reference: Kedia et al. (ICML 2024), appendix C.1. Built by composition:
//   serial(multi_head(Attention(d, d/H, L, q, k, v, p), H), Linear(d, d, o), Dropout(p)),
// and the decoder's block with CausalAttention in place of Attention; either
// with rotary position embeddings on every head (components/detail/rotary.hpp)
// and either logit scale (LogitScale).
#pragma once

#include "sigprop/blocks/multi_head.hpp"
#include "sigprop/components/attention.hpp"
#include "sigprop/components/causal_attention.hpp"
#include "sigprop/components/dropout.hpp"
#include "sigprop/components/linear.hpp"
#include "sigprop/core/serial.hpp"

namespace sigprop {

/// Per-entry weight variances of an attention block.
template <class T>
struct AttentionWeights {
  T q, k, v, o;
};

template <class T>
using AttentionBlock = Serial<T, MultiHead<T, Attention<T>>, Linear<T>, Dropout<T>>;

/// The attention block for width d, H heads, sequence length L, dropout p.
template <class T>
AttentionBlock<T> attention_block(T d, T heads, T seq_len, const AttentionWeights<T>& w, T p,
                                  AttentionGradient gradient = AttentionGradient::all_paths,
                                  RotaryEmbedding rotary = {}, LogitScale logit_scale = LogitScale::inv_sqrt_dk) {
  require_width("sigprop::attention_block", "heads", heads);
  require_width("sigprop::attention_block", "d / heads", T(d / heads));
  return serial(multi_head(Attention<T>(d, d / heads, seq_len, w.q, w.k, w.v, p, gradient, rotary, logit_scale), heads),
                Linear<T>(d, d, w.o), Dropout<T>(p));
}

template <class T>
using CausalAttentionBlock = Serial<T, MultiHead<T, CausalAttention<T>>, Linear<T>, Dropout<T>>;

/// The causal (decoder) attention block: every head masked to keys 1..i.
template <class T>
CausalAttentionBlock<T> causal_attention_block(T d, T heads, T seq_len, const AttentionWeights<T>& w, T p,
                                              AttentionGradient gradient = AttentionGradient::all_paths,
                                              RotaryEmbedding rotary = {}, LogitScale logit_scale = LogitScale::inv_sqrt_dk) {
  require_width("sigprop::causal_attention_block", "heads", heads);
  require_width("sigprop::causal_attention_block", "d / heads", T(d / heads));
  return serial(multi_head(CausalAttention<T>(d, d / heads, seq_len, w.q, w.k, w.v, p, gradient, rotary, logit_scale), heads),
                Linear<T>(d, d, w.o), Dropout<T>(p));
}

}  // namespace sigprop
