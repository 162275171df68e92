// sigprop/models/measures.hpp -- whole-model figures read off a trace: the
// residual dependencies of the sublayers, Admin's output-change estimate and
// the sensitivity of Davis et al. in the form the DeepScaleLM paper uses.
//
// References:
//   Liu et al., "Understanding the Difficulty of Training Transformers"
//   (EMNLP 2020, "Admin"), section 4.1 and Theorem 2: the residual
//   dependency of sublayer i on its own branch, beta_{i,i}^2 =
//   Var[a_i] / Var[x_{i-1} + a_i] (a_i the scaled branch output), and
//   the output change under a parameter perturbation, of order
//   sum_i beta_{i,i}^2: O(log N) for Pre-LN (beta_{i,i}^2 ~ 1/i), O(N) for
//   Post-LN (constant).
//   Kedia et al. (ICML 2024), appendix "Discussion of relative strength":
//   with skip variance 1, the sensitivity of Davis et al. (ICML 2021) is the
//   mean over sublayers of N beta^2; the paper uses the median. In general
//   the term of sublayer i is N Var[beta f] / Var[lambda x], which is
//   N beta_{i,i}^2 / (1 - beta_{i,i}^2).
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <vector>

#include "sigprop/models/stack.hpp"

namespace sigprop {

/// beta_{i,i}^2 of every sublayer in order: attention of layer 1, FFN of
/// layer 1, attention of layer 2, ...
inline std::vector<double> residual_shares(const Trace& t) {
  std::vector<double> out;
  for (std::size_t n = 0; n < t.mid.size(); ++n) {
    out.push_back(t.mid[n].residual_share);
    out.push_back(t.rows[n + 1].residual_share);
  }
  return out;
}

/// Admin's output-change estimate sum_i beta_{i,i}^2 (Theorem 2, up to its constant).
inline double output_change(const Trace& t) {
  double sum = 0;
  for (double s : residual_shares(t)) sum += s;
  return sum;
}

/// The per-sublayer sensitivity terms N beta_{i,i}^2 / (1 - beta_{i,i}^2)
/// (+inf where the skip path is 0, as in Admin's first sublayer).
inline std::vector<double> sensitivity_terms(const Trace& t) {
  const double N = static_cast<double>(t.mid.size());
  std::vector<double> out;
  for (double s : residual_shares(t))
    out.push_back(s < 1 ? N * s / (1 - s) : std::numeric_limits<double>::infinity());
  return out;
}

/// The sensitivity as the DeepScaleLM paper uses it: the median of the
/// per-sublayer terms (the mean of an even count's two middle terms).
inline double sensitivity(const Trace& t) {
  std::vector<double> v = sensitivity_terms(t);
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t k = v.size() / 2;
  return v.size() % 2 ? v[k] : (v[k - 1] + v[k]) / 2;
}

}  // namespace sigprop
