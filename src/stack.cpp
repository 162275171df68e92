// The model layer compiled once for the project's own binaries
// (SIGPROP_SEPARATE_COMPILATION; docs/architecture.md, "Separate compilation").
#include "sigprop/models/impl/stack.ipp"
