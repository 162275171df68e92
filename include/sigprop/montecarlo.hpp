// sigprop/montecarlo.hpp -- umbrella header of the Monte Carlo simulator: the
// empirical twin of every closed form, with real random weights and inputs
// and real backpropagation.
#pragma once

#include "sigprop/sigprop.hpp"

#include "sigprop/montecarlo/random.hpp"
#include "sigprop/montecarlo/sampler.hpp"
#include "sigprop/montecarlo/statistics.hpp"
#include "sigprop/montecarlo/validation.hpp"

#include "sigprop/montecarlo/ops.hpp"

#include "sigprop/montecarlo/components/attention.hpp"
#include "sigprop/montecarlo/components/causal_attention.hpp"
#include "sigprop/montecarlo/components/dropout.hpp"
#include "sigprop/montecarlo/components/elementwise.hpp"
#include "sigprop/montecarlo/components/embedding.hpp"
#include "sigprop/montecarlo/components/gated.hpp"
#include "sigprop/montecarlo/components/gelu.hpp"
#include "sigprop/montecarlo/components/layernorm.hpp"
#include "sigprop/montecarlo/components/linear.hpp"
#include "sigprop/montecarlo/components/relu.hpp"
#include "sigprop/montecarlo/components/rmsnorm.hpp"
#include "sigprop/montecarlo/components/silu.hpp"
#include "sigprop/montecarlo/components/softmax.hpp"

#include "sigprop/montecarlo/models.hpp"
