// The model layer compiled once for the project's own binaries
// (SIGPROP_SEPARATE_COMPILATION; docs/architecture.md, "Separate compilation").
// One lane type and activation of the trace: BatchChunk, Relu.
#include "sigprop/models/detail/trace_with.hpp"

namespace sigprop::detail {
SIGPROP_TRACE_WITH(, Relu, BatchChunk, BatchLayerWeights<BatchChunk>)
}  // namespace sigprop::detail
