// sigprop/components/detail/rotary.hpp -- how much of a head's query-key
// geometry rotary position embeddings leave unchanged over n keys.
//
// Rotary embeddings (Su et al., "RoFormer", 2021, section 3.4.2, eq. 34):
// coordinate pair j = 0..d_k/2 - 1 of a head's query and key at position i is
// rotated by the angle i theta_j, theta_j = base^(-2j/d_k) (base 10000 in
// RoFormer, GPT-NeoX and Llama). A score q_i . k_k then sees the key through
// the rotation by (k - i) theta_j. Averaged over n consecutive keys, pair j's
// rotation shrinks to the Dirichlet kernel
//   D_n(theta) = (1/n) sum_{k < n} e^{i k theta},
//   |D_n(theta)|^2 = sin^2(n theta/2) / (n^2 sin^2(theta/2))
// (1 as theta -> 0: a slow pair barely turns over the keys; ~1/(n theta)^2 for
// a fast one). The fraction kept, f_n = mean over the pairs of |D_n(theta_j)|^2,
// is what attention.hpp needs: the pairs split into those that stay put over
// the keys (fraction f_n, where the head behaves as without rotation) and
// those that turn (1 - f_n, where the keys' shared part varies from key to key
// like a position-specific part and a query's tilt averages away).
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <map>
#include <string>

#include "sigprop/core/errors.hpp"
#include "sigprop/core/lanes.hpp"

namespace sigprop {

/// Rotary position embeddings on a head's queries and keys (Su et al. 2021):
/// pair j of the coordinates at position i rotated by i base^(-2j/d_k).
/// `base` 0 means no rotation (the default); otherwise base > 1.
struct RotaryEmbedding {
  double base = 0;
  bool enabled() const { return base != 0; }
};

namespace detail {

/// The widest head rotary_keep() takes: its cost is one sine per pair.
inline constexpr double max_rotary_width = 65536;

/// Checks `rotary` for a head of width d_k (every lane): base 0, or finite
/// and > 1 with a whole d_k of at least one coordinate pair and at most
/// max_rotary_width coordinates (d_k in {2, ..., 65536}).
template <class T>
void require_rotary(const char* function, const RotaryEmbedding& rotary, const T& d_k) {
  if (!rotary.enabled()) return;
  if (!(std::isfinite(rotary.base) && rotary.base > 1))
    raise_domain(function, "rotary.base", rotary.base, "{0} or (1, inf)");
  for (std::size_t i = 0; i < lane_count(d_k); ++i) {
    const double v = static_cast<double>(lane(d_k, i));
    if (!(v >= 2 && v <= max_rotary_width && std::floor(v) == v))
      raise_domain(function, "d_k (with rotary embeddings)", v, "{2, 3, ..., 65536} (whole coordinate pairs)");
  }
}

/// f_n for one configuration (the header; 1 for n = 1).
inline double rotary_keep_of(double base, double n, double width) {
  const auto pairs = static_cast<std::size_t>(std::floor(width / 2));
  double sum = 0;
  for (std::size_t j = 0; j < pairs; ++j) {
    const double theta = std::pow(base, -2.0 * static_cast<double>(j) / width);
    const double half = std::sin(theta / 2);  // > 0: theta >= 1/base > 0
    const double kernel = half > 0 ? std::sin(n * theta / 2) / (n * half) : 1.0;
    sum += kernel * kernel;
  }
  return sum / static_cast<double>(pairs);
}

/// f_n = mean over the floor(d_k/2) coordinate pairs of |D_n(theta_j)|^2 (the
/// header), lane by lane; 1 without rotation or for n = 1. Cached per thread
/// (up to 2^16 entries): a trace asks for the same key counts in every layer
/// (CausalAttention's profile grid), each one sine per pair.
template <class T>
T rotary_keep(const RotaryEmbedding& rotary, const T& keys, const T& d_k) {
  T out = 0 * keys + 1;
  if (!rotary.enabled()) return out;
  static thread_local std::map<std::array<double, 3>, double> cache;
  for (std::size_t lane_index = 0; lane_index < lane_count(keys); ++lane_index) {
    const std::array<double, 3> key{rotary.base, static_cast<double>(lane(keys, lane_index)),
                                    static_cast<double>(lane(d_k, lane_index))};
    if (std::isnan(key[1]) || std::isnan(key[2])) {  // no order for NaN: not cached
      set_lane(out, lane_index, rotary_keep_of(key[0], key[1], key[2]));
      continue;
    }
    auto found = cache.find(key);
    if (found == cache.end()) {
      if (cache.size() >= 65536) cache.clear();
      found = cache.emplace(key, rotary_keep_of(key[0], key[1], key[2])).first;
    }
    set_lane(out, lane_index, found->second);
  }
  return out;
}

}  // namespace detail

}  // namespace sigprop
