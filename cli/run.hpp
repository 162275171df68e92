// cli/run.hpp -- the sigprop command-line tool as a function, so that tests
// can call it without a process and without exit() (cli/run.cpp, docs/cli.md).
//
// Exit status: 0 success, 2 bad usage or a value outside its valid range
// or a result that overflows (one line on stderr naming the flag or quantity,
// the value and the valid range; nothing on stdout).
#pragma once

#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

#include "sigprop/config.hpp"
#include "sigprop/core/domain.hpp"
#include "sigprop/core/moments.hpp"
#include "sigprop/models/sweep.hpp"

namespace sigprop::cli {

inline constexpr const char* version = "0.1.0";

/// The tool's top-level usage text.
void usage(std::ostream& out);

/// The names `sigprop component` accepts, in the order of its help.
std::vector<std::string> component_names();

/// The whole tool. `args` excludes the program name.
int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// The commands' work without the printing, for the Python package
// (python/, docs/python.md): the same parsing, checks and computation.

/// One component's moments (`sigprop component`).
struct ComponentResult {
  Moments<double> forward;
  GradMoments<double> backward;
  Domain<double> domain;
};

/// A component of `sigprop component`: its name, parameter flags (without
/// dashes) and their help.
struct ComponentInfo {
  std::string name;
  std::vector<std::string> parameters;
  std::string help;
};
std::vector<ComponentInfo> components();

/// Component `name` with its parameters given as flags (`{"--d-in", "512"}`),
/// applied to `in` and `grad`. Throws usage_error (args.hpp) or domain_error.
ComponentResult evaluate_component(const std::string& name, const std::vector<std::string>& parameters,
                                   const Moments<double>& in, const GradMoments<double>& grad);

/// One row of `sigprop sweep`: the design and its summary; beta2_k and
/// beta2_alpha are NaN where no residual scaling applies (csv: empty).
struct SweepRow {
  std::string arch, scheme;
  std::size_t layers = 0, d = 0, heads = 0;
  double dropout = 0, beta2_k = 0, beta2_alpha = 0;
  SweepSummary summary;
};

/// The rows `sigprop sweep` prints for the grid flags `words` (its --format ignored).
std::vector<SweepRow> sweep_table(const std::vector<std::string>& words);

/// sweep() on `jobs` threads (`sigprop sweep --jobs`): the same summaries,
/// in the order of `points`.
std::vector<SweepSummary> sweep_on_threads(const std::vector<SweepPoint>& points, const SweepBounds& bounds,
                                           std::size_t jobs);

}  // namespace sigprop::cli
