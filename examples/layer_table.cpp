// layer_table -- the main example: per-layer variance of the residual stream
// and of its gradient for a BERT-base-like model (12 layers, d = 768, 12
// heads, L = 256, dropout 0.1), Pre-LN and Post-LN, under Xavier and
// DeepScaleLM initialization.
//
// Everything here is also available from the command line, e.g.
//   sigprop table --arch pre-ln --scheme dslm --layers 12
#include <cstdio>
#include <exception>

#include "sigprop/models/schemes.hpp"

int main() {
  using namespace sigprop;
  ModelConfig config;  // defaults: 12 layers, d = 768, 12 heads, m = 4, ReLU, L = 256, p = 0.1
  try {
    for (Arch arch : {Arch::pre_ln, Arch::post_ln}) {
      for (Scheme scheme : {Scheme::xavier, Scheme::dslm}) {
        config.arch = arch;
        const Trace t = trace(config, initialize(config, scheme));
        std::printf("%s, %s init (BERT-base shape, embedding input, gradient variance 1 at the top)\n",
                    arch == Arch::pre_ln ? "Pre-LN" : "Post-LN", to_string(scheme));
        std::printf("%6s  %10s  %9s  %12s  %13s\n", "layer", "var", "corr_len", "grad_var", "grad_corr_len");
        for (const TraceRow& r : t.rows)
          std::printf("%6zu  %10.4f  %9.4f  %12.5g  %13.4f\n", r.layer, r.forward.var, r.forward.corr_len,
                      r.backward.var, r.backward.corr_len);
        std::printf("\n");
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "layer_table: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
