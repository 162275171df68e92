// sigprop/core/domain.hpp -- where a closed form stands relative to the region
// in which it was validated against simulation.
//
// Most maps in sigprop are exact for Gaussian inputs (Linear, Dropout, ReLU,
// GeLU, LayerNorm, Softmax). Attention is not: its forms are expansions in the
// score variance, in 1/d_k, 1/d_in and in 1/L (components/attention.hpp). Each
// expansion has a measure that grows as it weakens; a component reports them
// for a given input through `domain(in)`, combinators report the worst over
// their parts, and the stack trace records them per layer. `caveats` turns
// the measures into flags with the limits below, which are where the
// simulation starts to disagree by more than the validated accuracy
// (docs/validation.md, "Domain of validity", has the measurements).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <tuple>

#include "sigprop/core/lanes.hpp"
#include "sigprop/numerics/math.hpp"

namespace sigprop {

/// Measures of how far an input drives a closed form from its validated
/// region; 0 means "exact here". Lane-wise for batched T.
template <class T>
struct Domain {
  /// Attention: variance sigma^2 of the position-specific part of the scores.
  /// Large values make the softmax nearly one-hot.
  T score_var{0};
  /// Attention: F_var / L = E[sum_k P_ik^2], the weight of the keys a query
  /// attends to (1/F_var L is the effective number of keys as a fraction of
  /// L); near 1 a single key takes all the weight.
  T key_weight{0};
  /// Attention: c sigma^4, the second-order term of the query-norm
  /// fluctuation (c ~ 1/d_k + 1/d_in); large at small widths.
  T width_term{0};

  /// Zero measures shaped like `like` (one lane per configuration).
  static Domain zero_like(const T& like) {
    const T zero = 0 * like;
    return {zero, zero, zero};
  }

  /// Every field, in declaration order (see Moments::fields).
  auto fields() { return std::tie(score_var, key_weight, width_term); }
  auto fields() const { return std::tie(score_var, key_weight, width_term); }

  /// The worse of two measures, lane by lane.
  Domain worst(const Domain& other) const {
    return {math::max_of(score_var, other.score_var), math::max_of(key_weight, other.key_weight),
            math::max_of(width_term, other.width_term)};
  }
};

/// Limits of the validated region (inclusive). Beyond one of them sigprop
/// still returns its closed form but flags the result.
/// Measured with examples/attention_domain (docs/validation.md, "Domain of
/// validity"): at r = 0 the forward and gradient variances are within 3.5
/// percent of simulation up to sigma^2 = 6 for (d_in, d_k, L) = (128, 32,
/// 128), (256, 64, 512) and (512, 128, 2048); at sigma^2 = 8 the narrowest
/// shape is 7.6 percent off (E[sum P^2] = 0.23, c sigma^4 = 3.0), and at
/// sigma^2 = 12 every shape is 11-17 percent off.
struct DomainLimits {
  double score_var = 6;     ///< sigma^2 up to which attention was validated
  double key_weight = 0.2;  ///< E[sum_k P^2] up to which (at least ~5 effective keys)
  double width_term = 2;    ///< c sigma^4 up to which the second-order norm average holds
};

/// Flags, one bit per way of leaving the validated region.
enum class Caveat : std::uint32_t {
  none = 0,
  concentrated_scores = 1u << 0,  ///< score_var above the limit: softmax nearly one-hot
  few_keys = 1u << 1,             ///< key_weight above the limit: attention on few keys
  narrow_heads = 1u << 2,         ///< width_term above the limit: d_k or d_in too small
};

inline Caveat operator|(Caveat a, Caveat b) {
  return static_cast<Caveat>(static_cast<std::uint32_t>(a) | static_cast<std::uint32_t>(b));
}
inline bool any(Caveat c) { return c != Caveat::none; }
inline bool has(Caveat set, Caveat flag) {
  return (static_cast<std::uint32_t>(set) & static_cast<std::uint32_t>(flag)) != 0;
}

/// The flags of one configuration (a scalar Domain, or one lane of a batch).
inline Caveat caveats(const Domain<double>& d, const DomainLimits& limits = {}) {
  Caveat c = Caveat::none;
  if (d.score_var > limits.score_var) c = c | Caveat::concentrated_scores;
  if (d.key_weight > limits.key_weight) c = c | Caveat::few_keys;
  if (d.width_term > limits.width_term) c = c | Caveat::narrow_heads;
  return c;
}

/// One lane of a batched Domain as a scalar one.
template <class T>
Domain<double> lane_of(const Domain<T>& d, std::size_t i) {
  return {static_cast<double>(lane(d.score_var, i)), static_cast<double>(lane(d.key_weight, i)),
          static_cast<double>(lane(d.width_term, i))};
}

/// A one-line reason for each flag set, with the measure and its limit, e.g.
/// "attention score variance 32.7 > 6 (softmax nearly one-hot)".
inline std::string describe(const Domain<double>& d, const DomainLimits& limits = {}) {
  const auto num = [](double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4g", x);
    return std::string(buf);
  };
  const Caveat c = caveats(d, limits);
  std::string out;
  auto add = [&out](const std::string& s) { out += (out.empty() ? "" : "; ") + s; };
  if (has(c, Caveat::concentrated_scores))
    add("attention score variance " + num(d.score_var) + " > " +
        num(limits.score_var) + " (softmax nearly one-hot)");
  if (has(c, Caveat::few_keys))
    add("attention weight on its top keys E[sum P^2] " + num(d.key_weight) +
        " > " + num(limits.key_weight) + " (fewer than " +
        num(1 / limits.key_weight) + " effective keys)");
  if (has(c, Caveat::narrow_heads))
    add("query-norm fluctuation term " + num(d.width_term) + " > " +
        num(limits.width_term) + " (d_k or d_in too small for the expansion)");
  return out;
}

}  // namespace sigprop
