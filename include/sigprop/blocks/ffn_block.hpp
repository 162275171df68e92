// sigprop/blocks/ffn_block.hpp -- the feed-forward block: Linear d -> m d,
// activation (ReLU or GeLU), Linear m d -> d, dropout on the output.
//
// Reference: Kedia et al. (ICML 2024), appendix C.2. Built by composition:
//   serial(Linear(d, m d, w1), Activation, Linear(m d, d, w2), Dropout(p)).
#pragma once

#include "sigprop/components/dropout.hpp"
#include "sigprop/components/gelu.hpp"
#include "sigprop/components/linear.hpp"
#include "sigprop/components/relu.hpp"
#include "sigprop/core/serial.hpp"

namespace sigprop {

template <class T, class Activation>
using FfnBlock = Serial<T, Linear<T>, Activation, Linear<T>, Dropout<T>>;

/// FFN block of width d with hidden width m d; `Activation` is Relu<T> or Gelu<T>.
template <class Activation, class T>
FfnBlock<T, Activation> ffn_block(T d, T ffn_mult, T w1, T w2, T p) {
  require_width("sigprop::ffn_block", "ffn_mult", ffn_mult);
  return serial(Linear<T>(d, ffn_mult * d, w1), Activation(), Linear<T>(ffn_mult * d, d, w2),
                Dropout<T>(p));
}

}  // namespace sigprop
