// sigprop/sigprop.hpp -- umbrella header: the whole closed-form calculus.
// (The Monte Carlo simulator is separate: sigprop/montecarlo.hpp.)
#pragma once

#include "sigprop/core/component.hpp"
#include "sigprop/core/errors.hpp"
#include "sigprop/core/moments.hpp"
#include "sigprop/core/validate.hpp"

#include "sigprop/core/serial.hpp"

#include "sigprop/components/attention.hpp"
#include "sigprop/components/causal_attention.hpp"
#include "sigprop/components/dropout.hpp"
#include "sigprop/components/embedding.hpp"
#include "sigprop/components/gelu.hpp"
#include "sigprop/components/layernorm.hpp"
#include "sigprop/components/linear.hpp"
#include "sigprop/components/relu.hpp"
#include "sigprop/components/rmsnorm.hpp"
#include "sigprop/components/silu.hpp"
#include "sigprop/components/softmax.hpp"

#include "sigprop/blocks/attention_block.hpp"
#include "sigprop/blocks/ffn_block.hpp"
#include "sigprop/blocks/gated.hpp"
#include "sigprop/blocks/multi_head.hpp"
#include "sigprop/blocks/residual.hpp"

#include "sigprop/models/claims.hpp"
#include "sigprop/models/config.hpp"
#include "sigprop/models/measures.hpp"
#include "sigprop/models/positions.hpp"
#include "sigprop/models/reproductions.hpp"
#include "sigprop/models/schemes.hpp"
#include "sigprop/models/stack.hpp"
#include "sigprop/models/sweep.hpp"
