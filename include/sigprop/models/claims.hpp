// sigprop/models/claims.hpp -- summary figures of a trace used to check the
// paper's whole-model claims (Kedia et al. 2024, section 3 and appendices F, G).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "sigprop/models/stack.hpp"

namespace sigprop {

/// Extremes and growth of a trace's per-layer moments.
struct TraceSummary {
  double var_min = 0, var_max = 0, grad_min = 0, grad_max = 0, corr_max = 0;
  /// Least-squares slope of var_n over the upper half of the layers (linear growth).
  double var_slope = 0;
  /// Geometric mean of grad_{n-1}/grad_n over the middle half of the layers
  /// (the per-layer factor of an exponential trend).
  double grad_ratio = 0;
};

inline TraceSummary summarize(const Trace& t) {
  TraceSummary s;
  s.var_min = s.var_max = t.rows[0].forward.var;
  s.grad_min = s.grad_max = t.rows[0].backward.var;
  for (const auto& r : t.rows) {
    s.var_min = std::min(s.var_min, r.forward.var);
    s.var_max = std::max(s.var_max, r.forward.var);
    s.grad_min = std::min(s.grad_min, r.backward.var);
    s.grad_max = std::max(s.grad_max, r.backward.var);
    s.corr_max = std::max(s.corr_max, r.forward.corr_len);
  }
  const std::size_t N = t.rows.size() - 1;
  double sx = 0, sy = 0, sxx = 0, sxy = 0, k = 0;
  for (std::size_t n = N / 2; n <= N; ++n, ++k) {
    const double x = static_cast<double>(n), y = t.rows[n].forward.var;
    sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  s.var_slope = k > 1 ? (k * sxy - sx * sy) / (k * sxx - sx * sx) : 0;
  const std::size_t lo = N / 4, hi = 3 * N / 4;
  s.grad_ratio = hi > lo ? std::pow(t.rows[lo].backward.var / t.rows[hi].backward.var,
                                    1.0 / static_cast<double>(hi - lo))
                         : 1;
  return s;
}

}  // namespace sigprop
