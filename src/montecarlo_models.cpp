// The model layer compiled once for the project's own binaries
// (SIGPROP_SEPARATE_COMPILATION; docs/architecture.md, "Separate compilation"):
// the whole-model simulation.
#include "sigprop/montecarlo/impl/models.ipp"
