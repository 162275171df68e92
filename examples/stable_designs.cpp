// stable_designs -- for a depth budget, which architecture, initialization,
// dropout and residual scaling keep every layer's forward variance and
// gradient variance (relative to the model output's) within [0.5, 2]?
//
//   stable_designs [--layers N (192)] [--d D (1024)] [--seq L (256)] [--low 0.5] [--high 2]
//
// Evaluates the grid arch {pre-ln, post-ln} x scheme {xavier, bert, dslm,
// dslm-simple} x dropout {0, 0.1} x beta^2 = k/N^alpha with k {0.5, 1, 2, 4},
// alpha {0.5, 1, 1.5} (applied to every scheme) through sigprop::sweep (one
// batched trace per structure) and prints the designs that stay in the band,
// then the closest misses and how many designs diverge (variance overflow).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "sigprop/models/sweep.hpp"

namespace {

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "stable_designs: error: %s\n", message.c_str());
  std::exit(2);
}

double parse(const std::string& flag, const char* value) {
  char* end = nullptr;
  const double x = std::strtod(value, &end);
  if (end == value || *end != '\0' || !std::isfinite(x)) usage_error(flag + " expects a number, got '" + value + "'");
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace sigprop;
  double layers = 192, d = 1024, seq = 256;
  SweepBounds bounds;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage_error(flag + " needs a value (or is unknown)");
    const double v = parse(flag, argv[i + 1]);
    if (flag == "--layers") layers = v;
    else if (flag == "--d") d = v;
    else if (flag == "--seq") seq = v;
    else if (flag == "--low") bounds.low = v;
    else if (flag == "--high") bounds.high = v;
    else usage_error("unknown flag " + flag);
  }
  try {
    for (auto [name, v] : {std::pair<const char*, double>{"--layers", layers}, {"--d", d}, {"--seq", seq}})
      if (!(v >= 1 && v <= 1e6 && std::floor(v) == v))
        usage_error(std::string(name) + " = " + std::to_string(v) + " is outside the valid range {1, ..., 1e6}");
    std::vector<SweepPoint> points;
    for (Arch arch : {Arch::pre_ln, Arch::post_ln})
      for (Scheme scheme : {Scheme::xavier, Scheme::bert, Scheme::dslm, Scheme::dslm_simple})
        for (double p : {0.0, 0.1})
          for (double k : {0.5, 1.0, 2.0, 4.0})
            for (double alpha : {0.5, 1.0, 1.5}) {
              SweepPoint pt;
              pt.config.arch = arch;
              pt.config.layers = static_cast<std::size_t>(layers);
              pt.config.d = static_cast<std::size_t>(d);
              pt.config.heads = std::max<std::size_t>(1, pt.config.d / 64);
              pt.config.seq_len = static_cast<std::size_t>(seq);
              pt.config.dropout = p;
              pt.scheme = scheme;
              pt.scaling = {k, alpha, true};
              if (k / std::pow(layers, alpha) > 1) continue;  // beta^2 <= 1
              points.push_back(pt);
            }
    const std::vector<SweepSummary> s = sweep(points, bounds);
    std::printf("N = %.0f, d = %.0f, L = %.0f: %zu designs; band [%g, %g] for the forward variance of every\n"
                "layer and the gradient variance relative to the model output's\n\n",
                layers, d, seq, points.size(), bounds.low, bounds.high);
    const auto row = [&](std::size_t i) {
      const SweepPoint& p = points[i];
      std::printf("%-7s  %-11s  %4.2f  %4.1f  %4.1f   %9.4g %9.4g   %9.4g %9.4g  %s\n",
                  p.config.arch == Arch::pre_ln ? "pre-ln" : "post-ln", to_string(p.scheme), p.config.dropout,
                  p.scaling.k, p.scaling.alpha, s[i].var_min, s[i].var_max, s[i].grad_min, s[i].grad_max,
                  s[i].outside_domain ? "outside domain" : "");
    };
    const char* header = "arch     scheme          p     k  alpha    var_min   var_max    grad_min  grad_max\n";
    std::printf("within the band:\n%s", header);
    std::size_t inside = 0;
    for (std::size_t i = 0; i < points.size(); ++i)
      if (s[i].within_bounds) {
        row(i);
        ++inside;
      }
    if (inside == 0) std::printf("(none)\n");
    // The closest misses: the smallest worst-case log-distance outside the band.
    const auto miss = [&](std::size_t i) {
      if (s[i].overflow) return std::numeric_limits<double>::infinity();  // diverged: no figures
      const double lo = std::log(bounds.low), hi = std::log(bounds.high);
      double m = 0;
      for (double v : {s[i].var_min, s[i].var_max, s[i].grad_min, s[i].grad_max})
        m = std::max({m, lo - std::log(v), std::log(v) - hi});
      return m;
    };
    std::vector<std::size_t> order(points.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return miss(a) < miss(b); });
    std::printf("\nclosest misses:\n%s", header);
    std::size_t shown = 0;
    for (std::size_t i : order)
      if (!s[i].within_bounds && !s[i].overflow && shown++ < 8) row(i);
    const auto diverged = std::count_if(s.begin(), s.end(), [](const SweepSummary& x) { return x.overflow; });
    if (diverged > 0) std::printf("\n%td designs diverge (their variance overflows)\n", diverged);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stable_designs: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
