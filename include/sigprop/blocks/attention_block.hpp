// sigprop/blocks/attention_block.hpp -- the attention block of a transformer
// layer: H heads (Q/K/V projections d -> d/H, softmax attention with dropout
// on the probabilities), concatenation, output projection W_O (d x d) and
// dropout on the output. LayerNorm placement is left to the stack.
//
// Reference: Kedia et al. (ICML 2024), appendix C.1. Built by composition:
//   serial(multi_head(Attention(d, d/H, L, q, k, v, p_attn), H), Linear(d, d, o), Dropout(p)),
// p_attn the dropout on the probabilities (GPT-2's attn_pdrop; p unless given),
// and the decoder's block with CausalAttention in place of Attention; either
// with rotary position embeddings on every head (components/detail/rotary.hpp)
// with biases on Q, K, V (the heads' with_biases) and O (Linear), and either
// logit scale (LogitScale).
#pragma once

#include <optional>
#include <type_traits>

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

/// The attention block for width d, H heads, sequence length L, dropout p on
/// the output and `attention_p` on the attention probabilities, with biases
/// on Q, K, V and O of per-entry variances `bias` and logits Q K^T scaled by
/// `logit_scale`.
template <class T>
AttentionBlock<T> attention_block(T d, T heads, T seq_len, const AttentionWeights<T>& w, T p,
                                  AttentionGradient gradient, RotaryEmbedding rotary, const AttentionWeights<T>& bias,
                                  T attention_p, LogitScale logit_scale = LogitScale::inv_sqrt_dk) {
  require_width("sigprop::attention_block", "heads", heads);
  require_width("sigprop::attention_block", "d / heads", T(d / heads));
  return serial(multi_head(Attention<T>(d, d / heads, seq_len, w.q, w.k, w.v, attention_p, gradient, rotary,
                                        logit_scale)
                               .with_biases(bias.q, bias.k, bias.v),
                           heads),
                Linear<T>(d, d, w.o, bias.o), Dropout<T>(p));
}

/// The same with dropout p on the probabilities too.
template <class T>
AttentionBlock<T> attention_block(T d, T heads, T seq_len, const AttentionWeights<T>& w, T p,
                                  AttentionGradient gradient, RotaryEmbedding rotary, const AttentionWeights<T>& bias) {
  return attention_block<T>(d, heads, seq_len, w, p, gradient, rotary, bias, p);
}

/// The same without biases; `attention_p` (default p) on the probabilities.
template <class T>
AttentionBlock<T> attention_block(T d, T heads, T seq_len, const AttentionWeights<T>& w, T p,
                                  AttentionGradient gradient = AttentionGradient::all_paths,
                                  RotaryEmbedding rotary = {},
                                  const std::optional<std::common_type_t<T>>& attention_p = {},
                                  LogitScale logit_scale = LogitScale::inv_sqrt_dk) {
  return attention_block<T>(d, heads, seq_len, w, p, gradient, rotary, {0 * w.q, 0 * w.q, 0 * w.q, 0 * w.q},
                            attention_p ? T(*attention_p) : p, logit_scale);
}

/// The same with dropout p on the probabilities and logit scale `logit_scale`.
template <class T>
AttentionBlock<T> attention_block(T d, T heads, T seq_len, const AttentionWeights<T>& w, T p,
                                  AttentionGradient gradient, RotaryEmbedding rotary, LogitScale logit_scale) {
  return attention_block<T>(d, heads, seq_len, w, p, gradient, rotary, std::nullopt, logit_scale);
}

template <class T>
using CausalAttentionBlock = Serial<T, MultiHead<T, CausalAttention<T>>, Linear<T>, Dropout<T>>;

/// The causal (decoder) attention block: every head masked to keys 1..i;
/// dropout and biases as attention_block's.
template <class T>
CausalAttentionBlock<T> causal_attention_block(T d, T heads, T seq_len, const AttentionWeights<T>& w, T p,
                                              AttentionGradient gradient, RotaryEmbedding rotary,
                                              const AttentionWeights<T>& bias, T attention_p,
                                              LogitScale logit_scale = LogitScale::inv_sqrt_dk,
                                              const std::optional<detail::KeySpread<T>>& spread = std::nullopt) {
  require_width("sigprop::causal_attention_block", "heads", heads);
  require_width("sigprop::causal_attention_block", "d / heads", T(d / heads));
  CausalAttention<T> head =
      CausalAttention<T>(d, d / heads, seq_len, w.q, w.k, w.v, attention_p, gradient, rotary, logit_scale)
          .with_biases(bias.q, bias.k, bias.v);
  if (spread) head = head.with_key_spread(spread->query, spread->key);
  return serial(multi_head(std::move(head), heads),
                Linear<T>(d, d, w.o, bias.o), Dropout<T>(p));
}

/// The same with dropout p on the probabilities too.
template <class T>
CausalAttentionBlock<T> causal_attention_block(T d, T heads, T seq_len, const AttentionWeights<T>& w, T p,
                                              AttentionGradient gradient, RotaryEmbedding rotary,
                                              const AttentionWeights<T>& bias) {
  return causal_attention_block<T>(d, heads, seq_len, w, p, gradient, rotary, bias, p);
}

/// The same without biases; `attention_p` (default p) on the probabilities.
template <class T>
CausalAttentionBlock<T> causal_attention_block(T d, T heads, T seq_len, const AttentionWeights<T>& w, T p,
                                              AttentionGradient gradient = AttentionGradient::all_paths,
                                              RotaryEmbedding rotary = {},
                                              const std::optional<std::common_type_t<T>>& attention_p = {},
                                              LogitScale logit_scale = LogitScale::inv_sqrt_dk) {
  return causal_attention_block<T>(d, heads, seq_len, w, p, gradient, rotary, {0 * w.q, 0 * w.q, 0 * w.q, 0 * w.q},
                                   attention_p ? T(*attention_p) : p, logit_scale);
}

/// The same with dropout p on the probabilities and logit scale `logit_scale`.
template <class T>
CausalAttentionBlock<T> causal_attention_block(T d, T heads, T seq_len, const AttentionWeights<T>& w, T p,
                                              AttentionGradient gradient, RotaryEmbedding rotary,
                                              LogitScale logit_scale) {
  return causal_attention_block<T>(d, heads, seq_len, w, p, gradient, rotary, std::nullopt, logit_scale);
}

}  // namespace sigprop
