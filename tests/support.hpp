// Shared test helpers: printing a validation report and asserting it against
// the paper's Table 20.
#pragma once

#include <cstdio>
#include <string>

#include "catch.hpp"
#include "sigprop/montecarlo/validation.hpp"

namespace sigprop::test {

/// Prints ours vs the paper's percentiles (and the sampling-noise margin).
inline void print_report(const montecarlo::ValidationReport& r) {
  std::printf("%-10s %-9s %6s  %-20s %-20s %-20s\n", "component", "quantity", "points",
              "ours p50/p90/p99 %", "paper p50/p90/p99 %", "noise p50/p90/p99 %");
  for (auto q : montecarlo::all_quantities) {
    if (!r.has(q)) continue;
    const auto e = r.errors(q);
    const auto p = montecarlo::paper_percentiles(r.component(), q);
    const auto n = r.noise_margin(q);
    std::printf("%-10s %-9s %6zu  %5.2f/%5.2f/%6.2f    %5.1f/%5.1f/%5.1f      %5.2f/%5.2f/%5.2f\n",
                r.component().c_str(), montecarlo::to_string(q), r.points(q), e.p50, e.p90, e.p99,
                p.p50, p.p90, p.p99, n.p50, n.p90, n.p99);
  }
}

/// Asserts that each of our percentiles is no worse than the paper's plus the
/// noise margin of our sample (ValidationReport::noise_margin explains it):
/// the paper's grid was larger, so at equal formula accuracy our percentiles
/// can only differ from theirs by sampling noise.
inline void require_no_worse_than_paper(const montecarlo::ValidationReport& r) {
  for (auto q : montecarlo::all_quantities) {
    if (!r.has(q)) continue;
    const auto e = r.errors(q);
    const auto p = montecarlo::paper_percentiles(r.component(), q);
    const auto n = r.noise_margin(q);
    if (p.p50 < 0) continue;
    INFO(r.component() << " " << montecarlo::to_string(q) << ": ours " << e.p50 << "/" << e.p90
                       << "/" << e.p99 << ", paper " << p.p50 << "/" << p.p90 << "/" << p.p99
                       << ", noise " << n.p50 << "/" << n.p90 << "/" << n.p99);
    CHECK(e.p50 <= p.p50 + n.p50);
    CHECK(e.p90 <= p.p90 + n.p90);
    CHECK(e.p99 <= p.p99 + n.p99);
  }
}

/// For exact closed forms: every grid point within `z` standard errors. With
/// z = 5 a correct formula fails with probability < 6e-7 per point.
inline void require_within_standard_errors(const montecarlo::ValidationReport& r, double z = 5) {
  for (auto q : montecarlo::all_quantities) {
    if (!r.has(q)) continue;
    INFO(r.component() << " " << montecarlo::to_string(q) << ": max z = " << r.max_z(q));
    CHECK(r.max_z(q) <= z);
  }
}

}  // namespace sigprop::test
