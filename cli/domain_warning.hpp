// cli/domain_warning.hpp -- the warning the tool prints on stderr when a
// result comes from closed forms used outside their validated region
// (core/domain.hpp). The result is still printed and the status is 0.
#pragma once

#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

#include "sigprop/sigprop.hpp"

namespace sigprop::cli {

/// "1-3, 7, 9-24" for a sorted list of layers.
inline std::string layer_ranges(const std::vector<std::size_t>& layers) {
  std::string out;
  for (std::size_t i = 0; i < layers.size();) {
    std::size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(layers[i]);
    if (j > i) out += "-" + std::to_string(layers[j]);
    i = j + 1;
  }
  return out;
}

inline void warn_outside_domain(const std::string& what, const Domain<double>& worst, std::ostream& err) {
  err << "sigprop: warning: " << what << " outside the validated domain of the closed forms: "
      << describe(worst) << "; the numbers are indicative only, check them by simulation "
      << "(docs/validation.md, \"Domain of validity\")\n";
}

/// Warns when any layer of the trace is flagged.
inline void warn_outside_domain(const Trace& t, std::ostream& err) {
  const DomainSummary s = outside_domain(t);
  if (s.empty()) return;
  warn_outside_domain("layer" + std::string(s.layers.size() > 1 ? "s " : " ") + layer_ranges(s.layers) +
                          (s.layers.size() > 1 ? " are" : " is"),
                      s.worst, err);
}

}  // namespace sigprop::cli
