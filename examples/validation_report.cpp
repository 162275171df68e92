// validation_report -- the Monte Carlo validation of every component over the
// paper's Table 21 ranges, printed next to the paper's Table 20.
//
//   validation_report [--points N] [--scale S] [--samples K] [--seed X]
//                     [--only NAME[,NAME...]] [--format text|markdown]
//
// Each grid point draws its parameters at random from Table 21 (widths and
// lengths shrunk by --scale), simulates with enough trials for K independent
// columns, and records |measured - predicted| / |measured| per quantity
// (appendix E of Kedia et al.). The "noise" columns are what sampling noise
// alone would produce at each percentile (ValidationReport::noise_margin).
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "sigprop/montecarlo.hpp"

namespace mc = sigprop::montecarlo;

namespace {

struct Entry {
  const char* name;
  std::function<mc::ValidationReport(const mc::GridOptions&)> validate;
};

const std::vector<Entry>& entries() {
  static const std::vector<Entry> list = {
      {"linear", mc::validate_linear},
      {"relu", mc::validate_relu},
      {"gelu", mc::validate_gelu},
      {"layernorm", mc::validate_layernorm},
      {"dropout", mc::validate_dropout},
      {"softmax", [](const mc::GridOptions& o) { return mc::validate_softmax(o); }},
      {"attention", mc::validate_attention},
      {"relu-mean", mc::validate_relu_nonzero_mean},
      {"gelu-mean", mc::validate_gelu_nonzero_mean},
  };
  return list;
}

bool selected(const std::string& only, const std::string& name) {
  if (only.empty()) return true;
  std::stringstream s(only);
  for (std::string item; std::getline(s, item, ',');)
    if (item == name) return true;
  return false;
}

void print(const mc::ValidationReport& r, bool markdown, double seconds) {
  for (auto q : mc::all_quantities) {
    if (!r.has(q)) continue;
    const auto e = r.errors(q);
    const auto p = mc::paper_percentiles(r.component(), q);
    const auto n = r.noise_margin(q);
    char paper[64];
    if (p.p50 < 0) std::snprintf(paper, sizeof paper, "-");
    else std::snprintf(paper, sizeof paper, "%.1f / %.1f / %.1f", p.p50, p.p90, p.p99);
    if (markdown)
      std::printf("| %s | %s | %zu | %.2f / %.2f / %.2f | %s | %.2f / %.2f / %.2f | %.1f |\n",
                  r.component().c_str(), mc::to_string(q), r.points(q), e.p50, e.p90, e.p99, paper,
                  n.p50, n.p90, n.p99, r.max_z(q));
    else
      std::printf("%-10s %-9s %6zu  %6.2f %6.2f %7.2f   %-20s  %6.2f %6.2f %6.2f  %6.1f  (%.0f s)\n",
                  r.component().c_str(), mc::to_string(q), r.points(q), e.p50, e.p90, e.p99, paper,
                  n.p50, n.p90, n.p99, r.max_z(q), seconds);
  }
}

[[noreturn]] void usage_error(const std::string& message) {
  std::cerr << "validation_report: error: " << message << "\n";
  std::exit(2);
}

double parse(const std::string& flag, const std::string& value) {
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (value.empty() || end != value.c_str() + value.size() || !(v > 0) || !std::isfinite(v))
    usage_error(flag + " = '" + value + "' is outside the valid range (0, inf)");
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  mc::GridOptions opt;
  opt.points = 200;
  std::string only, format = "text";
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::cout << "usage: validation_report [--points N] [--scale S] [--samples K] [--seed X]\n"
                   "                         [--only NAME[,NAME...]] [--format text|markdown]\n";
      return 0;
    }
    if (i + 1 >= argc) usage_error("flag " + flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--points") opt.points = static_cast<std::size_t>(parse(flag, value));
    else if (flag == "--scale") opt.scale = parse(flag, value);
    else if (flag == "--samples") opt.independent_samples = static_cast<std::size_t>(parse(flag, value));
    else if (flag == "--seed") opt.seed = static_cast<std::uint64_t>(parse(flag, value));
    else if (flag == "--only") only = value;
    else if (flag == "--format") {
      if (value != "text" && value != "markdown") usage_error("--format = '" + value + "' is not one of text|markdown");
      format = value;
    } else usage_error("unknown flag " + flag);
  }
  const bool markdown = format == "markdown";
  std::printf("# points %zu, scale %g, independent samples %zu, seed %llu\n", opt.points, opt.scale,
              opt.independent_samples, static_cast<unsigned long long>(opt.seed));
  if (markdown)
    std::printf("| component | quantity | points | ours p50 / p90 / p99 %% | paper p50 / p90 / p99 %% "
                "| noise p50 / p90 / p99 %% | max z |\n|---|---|---|---|---|---|---|\n");
  else
    std::printf("%-10s %-9s %6s  %-22s   %-20s  %-20s  %6s\n", "component", "quantity", "points",
                "ours p50 p90 p99 %", "paper p50/p90/p99 %", "noise p50 p90 p99 %", "max z");
  for (const auto& e : entries()) {
    if (!selected(only, e.name)) continue;
    const auto start = std::chrono::steady_clock::now();
    const auto report = e.validate(opt);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    print(report, markdown, seconds);
    std::fflush(stdout);
  }
  return 0;
}
