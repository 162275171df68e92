// sigprop/blocks/ffn_block.hpp -- the feed-forward block: Linear d -> m d,
// activation (ReLU or GeLU), Linear m d -> d, dropout on the output; and its
// gated variant (GLU family: ReGLU, GeGLU, SwiGLU).
//
// Reference: Kedia et al. (ICML 2024), appendix C.2. Built by composition:
//   serial(Linear(d, m d, w1), Activation, Linear(m d, d, w2), Dropout(p)).
// Gated (Shazeer 2020, Eq. 6; blocks/gated.hpp), hidden width h (8d/3 in
// Llama-style models, keeping the parameter count of a 4d FFN):
//   serial(gated(serial(Linear(d, h, w1), Activation), Linear(d, h, wv)),
//          Linear(h, d, w2), Dropout(p)).
#pragma once

#include <utility>

#include "sigprop/blocks/gated.hpp"

#include "sigprop/components/dropout.hpp"
#include "sigprop/components/gelu.hpp"
#include "sigprop/components/linear.hpp"
#include "sigprop/components/relu.hpp"
#include "sigprop/core/serial.hpp"

namespace sigprop {

template <class T, class Activation>
using FfnBlock = Serial<T, Linear<T>, Activation, Linear<T>, Dropout<T>>;

/// FFN block of width d with hidden width m d; `Activation` is Relu<T> or
/// Gelu<T> (`activation` its instance, e.g. Gelu<T>(GeluForm::tanh)).
template <class Activation, class T>
FfnBlock<T, Activation> ffn_block(T d, T ffn_mult, T w1, T w2, T p, Activation activation = Activation()) {
  require_width("sigprop::ffn_block", "ffn_mult", ffn_mult);
  return serial(Linear<T>(d, ffn_mult * d, w1), std::move(activation), Linear<T>(ffn_mult * d, d, w2),
                Dropout<T>(p));
}

template <class T, class Activation>
using GluFfnBlock =
    Serial<T, Gated<T, Serial<T, Linear<T>, Activation>, Linear<T>>, Linear<T>, Dropout<T>>;

/// Gated FFN block of width d and hidden width `hidden`: W2 (Activation(x W1) * (x V)),
/// then dropout. Activation Silu<T> gives SwiGLU, Gelu<T> GeGLU, Relu<T> ReGLU.
/// w1, wv, w2 are the per-entry variances of W1, V, W2.
template <class Activation, class T>
GluFfnBlock<T, Activation> glu_ffn_block(T d, T hidden, T w1, T wv, T w2, T p, Activation activation = Activation()) {
  require_width("sigprop::glu_ffn_block", "hidden", hidden);
  return serial(gated(serial(Linear<T>(d, hidden, w1), std::move(activation)), Linear<T>(d, hidden, wv)),
                Linear<T>(hidden, d, w2), Dropout<T>(p));
}

}  // namespace sigprop
