// attention_domain -- where the attention closed forms stop being accurate:
// the relative error of the forward variance and of the gradient variance
// against simulation as the score variance grows, for a few widths and
// lengths, next to the validity measures of core/domain.hpp and their flags.
// Its output is the table of docs/validation.md, "Domain of validity".
//
//   attention_domain [--samples K] [--seed X] [--format text|markdown]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "sigprop/montecarlo.hpp"

namespace mc = sigprop::montecarlo;
using sigprop::Attention;

int main(int argc, char** argv) {
  double samples = 8000;
  std::uint64_t seed = 31;
  bool markdown = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--samples") samples = std::atof(value.c_str());
    else if (flag == "--seed") seed = std::strtoull(value.c_str(), nullptr, 10);
    else if (flag == "--format") markdown = value == "markdown";
    else {
      std::fprintf(stderr, "attention_domain: error: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  struct Shape {
    double d_in, d_k, L;
  };
  const Shape shapes[] = {{128, 32, 128}, {256, 64, 512}, {512, 128, 2048}};
  const double scores[] = {0.5, 1, 2, 3, 4, 6, 8, 12};
  const char* head = markdown ? "| d_in | d_k | L | sigma^2 | E[sum P^2] | c sigma^4 | flags | var err % | grad var err % |\n|---|---|---|---|---|---|---|---|---|\n"
                              : "  d_in   d_k     L  sigma^2  E[sum P^2]  c sigma^4  flags   var err %  grad var err %\n";
  std::printf("%s", head);
  for (const Shape& s : shapes) {
    for (double score : scores) {
      // Independent positions (r = 0, r_g = 0), no dropout: sigma^2 = score.
      const double qk = std::sqrt(score) / s.d_in;
      const Attention<double> layer(s.d_in, s.d_k, s.L, qk, qk, 1 / s.d_in, 0);
      const sigprop::Moments<double> in{0, 1, 0, 0};
      const sigprop::GradMoments<double> g{1, 0};
      mc::SimulationSetup setup;
      setup.trials = static_cast<std::size_t>(std::ceil(samples / s.d_k));
      setup.seed = seed++;
      const auto sim = mc::simulate_paths(layer, in, g, setup);
      const auto d = layer.domain(in);
      const auto out = layer.forward(in);
      const auto grad = layer.backward(in, g);
      const double fe = 100 * (out.var / sim.forward.var.value - 1);
      const double fse = 100 * sim.forward.var.std_error / sim.forward.var.value;
      const double ge = 100 * (grad.var / sim.backward.var.value - 1);
      const double gse = 100 * sim.backward.var.std_error / sim.backward.var.value;
      const std::string flags = sigprop::any(sigprop::caveats(d)) ? "outside" : "-";
      if (markdown)
        std::printf("| %g | %g | %g | %g | %.3g | %.3g | %s | %+.1f +- %.1f | %+.1f +- %.1f |\n", s.d_in, s.d_k, s.L,
                    d.score_var, d.key_weight, d.width_term, flags.c_str(), fe, fse, ge, gse);
      else
        std::printf("%6g %5g %5g  %7g  %10.3g  %9.3g  %-7s %+6.1f +- %.1f   %+6.1f +- %.1f\n", s.d_in, s.d_k, s.L,
                    d.score_var, d.key_weight, d.width_term, flags.c_str(), fe, fse, ge, gse);
      std::fflush(stdout);
    }
  }
  return 0;
}
