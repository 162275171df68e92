// A user's program: the header-only library, a component and a whole model.
#include <cmath>
#include <cstdio>

#include <sigprop/sigprop.hpp>

int main() {
  const sigprop::Linear<double> layer(64, 64, 1.0 / 64);
  const auto out = layer.forward({0, 1, 0.5, 0});
  std::printf("%.6f\n", out.var);
  if (!(out.var > 0.999 && out.var < 1.001)) return 1;
  // The header-only trace agrees with the separately compiled one the
  // command-line tool uses (sigprop table --scheme xavier --layers 2 --d 64
  // --heads 4 --seq 32 --format json: var of layer 2).
  sigprop::ModelConfig c;
  c.layers = 2;
  c.d = 64;
  c.heads = 4;
  c.seq_len = 32;
  const sigprop::Trace t = sigprop::trace(c, sigprop::initialize(c, sigprop::Scheme::xavier));
  const double expected = 3.0984790671602664, var = t.rows.back().forward.var;
  std::printf("%.17g\n", var);
  return std::abs(var - expected) <= 1e-12 * expected ? 0 : 1;
}
