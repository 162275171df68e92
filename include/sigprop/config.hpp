// sigprop/config.hpp -- header-only (the default) or a separately compiled
// model layer.
//
// By default every function is defined in the headers. With
// SIGPROP_SEPARATE_COMPILATION defined, the model layer's functions
// (trace, trace_batch, trace_positions, trace_position_gradients,
// initialize, weight_grad_norms, spike_bounds, sweep) are only declared,
// and their definitions (models/impl/*.ipp) are compiled once into the
// library sigprop::compiled (src/). docs/architecture.md, "Separate
// compilation".
#pragma once

#if defined(SIGPROP_SEPARATE_COMPILATION)
#define SIGPROP_DECL
#else
#define SIGPROP_HEADER_ONLY 1
#define SIGPROP_DECL inline
#endif
