// sigprop/sigprop.hpp -- umbrella header: the whole closed-form calculus.
// (The Monte Carlo simulator is separate: sigprop/montecarlo.hpp.)
#pragma once

#include "sigprop/core/component.hpp"
#include "sigprop/core/errors.hpp"
#include "sigprop/core/moments.hpp"
#include "sigprop/core/validate.hpp"

#include "sigprop/components/dropout.hpp"
#include "sigprop/components/linear.hpp"
