// The model layer compiled once for the project's own binaries
// (SIGPROP_SEPARATE_COMPILATION; docs/architecture.md, "Separate compilation").
// The attention sublayer's traced passes for one lane type: BatchChunk.
#include "sigprop/models/detail/trace_with.hpp"

namespace sigprop::detail {
SIGPROP_TRACE_ATTENTION(, BatchChunk, BatchLayerWeights<BatchChunk>)
}  // namespace sigprop::detail
