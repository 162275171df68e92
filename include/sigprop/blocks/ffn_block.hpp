// sigprop/blocks/ffn_block.hpp -- the feed-forward block: Linear d -> m d,
// activation (ReLU or GeLU), dropout q on the hidden units, Linear m d -> d,
// dropout p on the output; and its gated variant (GLU family: ReGLU, GeGLU,
// SwiGLU).
//
// Reference: Kedia et al. (ICML 2024), appendix C.2. Built by composition:
//   serial(Linear(d, m d, w1), Activation, Dropout(q), Linear(m d, d, w2), Dropout(p)),
// q = 0 (BERT, GPT-2) or q = p (PyTorch's nn.TransformerEncoderLayer:
// linear2(dropout(activation(linear1(x))))); docs/models.md, "Dropout".
// Gated (Shazeer 2020, Eq. 6; blocks/gated.hpp), hidden width h (8d/3 in
// Llama-style models, keeping the parameter count of a 4d FFN):
//   serial(gated(serial(Linear(d, h, w1), Activation), Linear(d, h, wv)),
//          Dropout(q), Linear(h, d, w2), Dropout(p)).
#pragma once

#include <optional>
#include <type_traits>
#include <utility>

#include "sigprop/blocks/gated.hpp"

#include "sigprop/components/dropout.hpp"
#include "sigprop/components/gelu.hpp"
#include "sigprop/components/linear.hpp"
#include "sigprop/components/relu.hpp"
#include "sigprop/core/serial.hpp"

namespace sigprop {

template <class T, class Activation>
using FfnBlock = Serial<T, Linear<T>, Activation, Dropout<T>, Linear<T>, Dropout<T>>;

/// FFN block of width d with hidden width m d; `Activation` is Relu<T> or
/// Gelu<T> (`activation` its instance, e.g. Gelu<T>(GeluForm::tanh)); b1, b2
/// the per-entry variances of the two maps' biases; dropout `hidden_p` after
/// the activation (PyTorch's encoder layer; 0: none), p on the output.
template <class Activation, class T>
FfnBlock<T, Activation> ffn_block(T d, T ffn_mult, T w1, T w2, T p, T b1, T b2, T hidden_p,
                                  Activation activation = Activation()) {
  require_width("sigprop::ffn_block", "ffn_mult", ffn_mult);
  return serial(Linear<T>(d, ffn_mult * d, w1, b1), std::move(activation), Dropout<T>(hidden_p),
                Linear<T>(ffn_mult * d, d, w2, b2), Dropout<T>(p));
}

/// The same without dropout after the activation.
template <class Activation, class T>
FfnBlock<T, Activation> ffn_block(T d, T ffn_mult, T w1, T w2, T p, T b1, T b2) {
  return ffn_block<Activation>(d, ffn_mult, w1, w2, p, b1, b2, T(0 * p));
}

/// The same without biases; dropout `hidden_p` (default 0) after the activation.
template <class Activation, class T>
FfnBlock<T, Activation> ffn_block(T d, T ffn_mult, T w1, T w2, T p,
                                  const std::optional<std::common_type_t<T>>& hidden_p = {}) {
  return ffn_block<Activation>(d, ffn_mult, w1, w2, p, T(0 * w1), T(0 * w1), hidden_p ? *hidden_p : T(0 * p));
}

/// The same without biases or dropout after the activation, with `activation`.
template <class Activation, class T>
FfnBlock<T, Activation> ffn_block(T d, T ffn_mult, T w1, T w2, T p, Activation activation) {
  return ffn_block<Activation>(d, ffn_mult, w1, w2, p, T(0 * w1), T(0 * w1), T(0 * p), std::move(activation));
}

template <class T, class Activation>
using GluFfnBlock =
    Serial<T, Gated<T, Serial<T, Linear<T>, Activation>, Linear<T>>, Dropout<T>, Linear<T>, Dropout<T>>;

/// Gated FFN block of width d and hidden width `hidden`: W2 dropout(Activation(x W1) * (x V)),
/// then dropout. Activation Silu<T> gives SwiGLU, Gelu<T> GeGLU, Relu<T> ReGLU.
/// w1, wv, w2 are the per-entry variances of W1, V, W2; b1, bv, b2 of their
/// biases; `hidden_p` the dropout on the gated product (0: none), p on the output.
template <class Activation, class T>
GluFfnBlock<T, Activation> glu_ffn_block(T d, T hidden, T w1, T wv, T w2, T p, T b1, T bv, T b2, T hidden_p,
                                         Activation activation = Activation()) {
  require_width("sigprop::glu_ffn_block", "hidden", hidden);
  return serial(gated(serial(Linear<T>(d, hidden, w1, b1), std::move(activation)), Linear<T>(d, hidden, wv, bv)),
                Dropout<T>(hidden_p), Linear<T>(hidden, d, w2, b2), Dropout<T>(p));
}

/// The same without dropout on the gated product.
template <class Activation, class T>
GluFfnBlock<T, Activation> glu_ffn_block(T d, T hidden, T w1, T wv, T w2, T p, T b1, T bv, T b2) {
  return glu_ffn_block<Activation>(d, hidden, w1, wv, w2, p, b1, bv, b2, T(0 * p));
}

/// The same without biases; `hidden_p` (default 0) the dropout on the gated product.
template <class Activation, class T>
GluFfnBlock<T, Activation> glu_ffn_block(T d, T hidden, T w1, T wv, T w2, T p,
                                         const std::optional<std::common_type_t<T>>& hidden_p = {}) {
  return glu_ffn_block<Activation>(d, hidden, w1, wv, w2, p, T(0 * w1), T(0 * w1), T(0 * w1),
                                   hidden_p ? *hidden_p : T(0 * p));
}

/// The same without biases or dropout on the gated product, with `activation`.
template <class Activation, class T>
GluFfnBlock<T, Activation> glu_ffn_block(T d, T hidden, T w1, T wv, T w2, T p, Activation activation) {
  return glu_ffn_block<Activation>(d, hidden, w1, wv, w2, p, T(0 * w1), T(0 * w1), T(0 * w1), T(0 * p),
                                   std::move(activation));
}

}  // namespace sigprop
