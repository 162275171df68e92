// The model layer compiled once for the project's own binaries
// (SIGPROP_SEPARATE_COMPILATION; docs/architecture.md, "Separate compilation").
// One lane type and activation of the trace: double, Gelu.
#include "sigprop/models/detail/trace_with.hpp"

namespace sigprop::detail {
SIGPROP_TRACE_WITH(, Gelu, double, LayerWeights)
}  // namespace sigprop::detail
