// sigprop/components/detail/attention_causal.hpp -- the causal mask's
// softmax sums (components/causal_attention.hpp): query i attends to its
// i keys, so its sums are those of full attention over i keys, taken from
// attention_terms() at every key count n (a profile) and averaged over the
// sequence. docs/components/causal_attention.md derives the averages.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <tuple>
#include <vector>

#include "sigprop/components/detail/attention_maps.hpp"
#include "sigprop/core/memo.hpp"
#include "sigprop/core/validate.hpp"

namespace sigprop::detail {

/// Per key count n = 1..L (index n - 1): S2_n, J_n, F_cov(n) (softmax sums of
/// one query over n keys, and n E sum_k P_ik P_mk for two queries over them).
template <class Real>
struct CausalProfile {
  std::vector<Real> sum_sq, jacobian, cross;
  /// Over the later queries m > i: sum_m X_im = F_cov(i) (H_L - H_i), and the
  /// same with each pair's centring, sum_m X_im (1 - <P>_i - <P>_m + X_im).
  std::vector<Real> pairs, pairs_centred;
  /// The tilt factors C and O of the query with n keys (0 at n = 1).
  std::vector<Real> tilt_cross, tilt_own;
  /// f_n, the share of rotary pairs that stay put over its n keys (1 without rotation).
  std::vector<Real> rotary_keep;
};

/// Key counts up to which the per-query factors are evaluated at every
/// count, and the ratio of the geometric grid beyond (cubic interpolation in
/// log n in between; docs/components/causal_attention.md has the accuracy).
inline constexpr std::size_t profile_every_count = 64;
inline constexpr double profile_ratio = 1.0442737824274138;  // 2^(1/16)

/// <P>_n = E sum P^3 / E sum P^2 = (1 - J_n/S2_n + S2_n)/2 of query n + 1:
/// the weight of the key its own weighting favours (1/n when uniform).
template <class Real>
Real favoured(const CausalProfile<Real>& f, std::size_t n) {
  return (1 - f.jacobian[n] / f.sum_sq[n] + f.sum_sq[n]) / 2;
}

/// The query-side sums of query n + 1; the rest is filled by the caller.
template <class T, class Real>
SoftmaxSums<T> query_side(const CausalProfile<Real>& f, std::size_t n) {
  const T shrink = 1 - f.sum_sq[n];
  SoftmaxSums<T> s{};
  s.sum_sq = f.sum_sq[n];
  s.shrink_sq = shrink * shrink;
  s.jacobian = f.jacobian[n];
  s.tilt_cross = f.tilt_cross[n];
  s.tilt_own = f.tilt_own[n];
  s.rotary_keep = f.rotary_keep[n];
  return s;
}

/// The moments with the whole-vector fields a batch may leave unset filled in.
template <class T>
Moments<T> with_defaults(Moments<T> m) {
  m.norm_var_ratio = norm_var_ratio_of(m);
  m.hidden_spread = hidden_spread_of(m);
  m.linear_share = linear_share_of(m);
  return m;
}

/// Lane i of a head's parameters and input.
template <class T, class Real = math::real_of<T>>
HeadParams<Real> lane_params(const HeadParams<T>& h, std::size_t i) {
  const auto at = [i](const T& x) { return static_cast<Real>(lane(x, i)); };
  return {at(h.d_in), at(h.d_k),    at(h.seq_len), at(h.q_var),  at(h.k_var),  at(h.v_var),
          at(h.p),    h.rotary,     at(h.q_bias),  at(h.k_bias), at(h.v_bias), h.logit_scale};
}
template <class T, class Real = math::real_of<T>>
Moments<Real> lane_moments(const Moments<T>& in, std::size_t i) {
  const auto at = [i](const T& x) { return static_cast<Real>(lane(x, i)); };
  Moments<Real> x{at(in.mean), at(in.var), at(in.corr_len), at(in.corr_dim)};
  x.norm_var_ratio = at(norm_var_ratio_of(in));
  x.hidden_spread = at(hidden_spread_of(in));
  x.linear_share = at(linear_share_of(in));
  return x;
}

/// The key counts at which the profile evaluates the head: every n up to
/// profile_every_count (or up to L with `every_count`), then ratio profile_ratio.
inline std::vector<std::size_t> profile_grid(std::size_t L, bool every_count) {
  std::vector<std::size_t> grid;
  for (std::size_t n = 2; n <= L; ++n) {
    if (every_count || n <= profile_every_count || grid.empty()) {
      grid.push_back(n);
      continue;
    }
    const auto next = static_cast<std::size_t>(std::ceil(static_cast<double>(grid.back()) * profile_ratio));
    if (n == std::min(next, L)) grid.push_back(n);
  }
  return grid;
}

/// The profile of one scalar head: F_var, F_jac, F_cov, C, O and f_n from
/// attention_terms() over n keys at the grid's counts, by cubic Lagrange
/// interpolation in log n in between (they vary smoothly, like 1/n). Where one
/// of the weights' bounds (1 <= F_var <= n, 0 <= F_jac, F_cov <= F_var) starts
/// or stops binding within the four points, the factors have a kink there and
/// those counts are evaluated exactly.
template <class Real>
CausalProfile<Real> causal_profile(const HeadParams<Real>& h, const Moments<Real>& x, bool every_count) {
  const auto L = static_cast<std::size_t>(h.seq_len);
  CausalProfile<Real> f;
  f.sum_sq.assign(L, Real(1));
  f.jacobian.assign(L, Real(0));
  f.cross.assign(L, Real(1));
  f.tilt_cross.assign(L, Real(0));  // one key: z = x_1, no tilt
  f.tilt_own.assign(L, Real(0));
  f.rotary_keep.assign(L, Real(1));
  constexpr std::size_t factors = 6;
  struct Point {
    std::array<Real, factors> value;
    unsigned bound;  // which of the bounds bind
  };
  const auto evaluate = [&](std::size_t n) {
    HeadParams<Real> over_n = h;
    over_n.seq_len = static_cast<Real>(n);
    const AttentionTerms<Real> a = attention_terms(over_n, x);
    const unsigned bound = (a.weight_sq <= 1 || a.weight_sq >= over_n.seq_len ? 1u : 0u) |
                           (a.weight_jacobian <= 0 || a.weight_jacobian >= a.weight_sq ? 2u : 0u) |
                           (a.weight_cross <= 0 || a.weight_cross >= a.weight_sq ? 4u : 0u);
    return Point{{a.weight_sq, a.weight_jacobian, a.weight_cross, a.tilt_cross, a.tilt_own, a.rotary_keep}, bound};
  };
  const std::vector<std::size_t> grid = profile_grid(L, every_count);
  std::vector<Point> at_grid(grid.size());
  std::vector<Real> log_n(grid.size());
  for (std::size_t j = 0; j < grid.size(); ++j) {
    at_grid[j] = evaluate(grid[j]);
    log_n[j] = std::log(static_cast<Real>(grid[j]));
  }
  for (std::size_t j = 0, n = 2; n <= L; ++n) {
    while (j + 1 < grid.size() && grid[j + 1] <= n) ++j;  // grid[j] <= n < grid[j + 1]
    std::array<Real, factors> v = at_grid[j].value;
    if (grid[j] != n) {  // the four grid points around n (three at the ends)
      const std::size_t first = j == 0 ? 0 : std::min(j - 1, grid.size() - std::min<std::size_t>(4, grid.size()));
      const std::size_t last = std::min(first + 4, grid.size());
      bool smooth = true;
      for (std::size_t a = first; a < last; ++a) smooth = smooth && at_grid[a].bound == at_grid[first].bound;
      if (smooth) {
        const Real t = std::log(static_cast<Real>(n));
        v.fill(Real(0));
        for (std::size_t a = first; a < last; ++a) {
          Real weight = 1;
          for (std::size_t b = first; b < last; ++b)
            if (b != a) weight *= (t - log_n[b]) / (log_n[a] - log_n[b]);
          for (std::size_t k = 0; k < factors; ++k) v[k] += weight * at_grid[a].value[k];
        }
      } else {
        v = evaluate(n).value;
      }
    }
    const Real keys = static_cast<Real>(n);
    f.sum_sq[n - 1] = v[0] / keys;
    f.jacobian[n - 1] = v[1] / keys;
    f.cross[n - 1] = v[2];
    f.tilt_cross[n - 1] = v[3];
    f.tilt_own[n - 1] = v[4];
    f.rotary_keep[n - 1] = v[5];
  }
  // The pair sums over m > i from the suffix sums of 1/m, <P>_m/m and 1/m^2.
  f.pairs.assign(L, Real(0));
  f.pairs_centred.assign(L, Real(0));
  Real inv = 0, favoured_sum = 0, inv_sq = 0;  // sums over m > i
  for (std::size_t n = L; n-- > 0;) {
    const Real favoured_i = favoured(f, n);
    f.pairs[n] = f.cross[n] * inv;
    f.pairs_centred[n] = f.cross[n] * ((1 - favoured_i) * inv - favoured_sum + f.cross[n] * inv_sq);
    const Real m = static_cast<Real>(n + 1);
    inv += 1 / m;
    favoured_sum += favoured_i / m;
    inv_sq += 1 / (m * m);
  }
  return f;
}

/// The profile of lane 0, memoized per input (the per-position results).
template <class T>
CausalProfile<math::real_of<T>> causal_profile_of(const HeadParams<T>& h, const Moments<T>& in) {
  struct Tag;
  return memoized<Tag>(head_key(h, in), [&] { return causal_profile(lane_params(h, 0), lane_moments(in, 0), false); });
}

/// The sequence averages of the sums of one profile
/// (docs/components/causal_attention.md).
template <class T, class Real>
void set_averages(SoftmaxSums<T>& s, std::size_t lane_index, const CausalProfile<Real>& f) {
  const std::size_t L = f.sum_sq.size();
  const Real len = static_cast<Real>(L), pairs = len * (len - 1);
  Real sum_sq = 0, shrink_sq = 0, shrink = 0, jacobian = 0, cross = 0, cross_centred = 0;
  Real tilt_cross = 0, tilt_own = 0, keep = 0;
  for (std::size_t n = L; n-- > 0;) {
    const Real r = 1 - f.sum_sq[n];
    tilt_cross += f.tilt_cross[n];
    tilt_own += f.tilt_own[n];
    keep += f.rotary_keep[n];
    sum_sq += f.sum_sq[n];
    shrink += r;
    shrink_sq += r * r;
    jacobian += f.jacobian[n];
    cross += f.pairs[n];
    cross_centred += f.pairs_centred[n];
  }
  const Real pair_cross = 2 * cross / pairs;
  set_lane(s.sum_sq, lane_index, sum_sq / len);
  set_lane(s.shrink_sq, lane_index, shrink_sq / len);
  set_lane(s.jacobian, lane_index, jacobian / len);
  set_lane(s.key_sq, lane_index, sum_sq / len);
  set_lane(s.key_jacobian, lane_index, jacobian / len);
  set_lane(s.key_pairs, lane_index, (len - 1) * pair_cross);
  set_lane(s.shrink_cross, lane_index, (shrink * shrink - shrink_sq) / pairs);
  set_lane(s.pair_cross, lane_index, pair_cross);
  set_lane(s.pair_cross_centred, lane_index, 2 * cross_centred / pairs);
  set_lane(s.key_pairs_centred, lane_index, 2 * cross_centred / len);
  set_lane(s.tilt_cross, lane_index, tilt_cross / len);
  set_lane(s.tilt_own, lane_index, tilt_own / len);
  set_lane(s.rotary_keep, lane_index, keep / len);
}

/// The causal mask's sums averaged over the sequence, lane by lane (a lane
/// equal to the one before copies it), memoized per input.
template <class T>
SoftmaxSums<T> causal_sums(const HeadParams<T>& h, const Moments<T>& in) {
  struct Tag;
  return memoized<Tag>(head_key(h, in), [&] {
    SoftmaxSums<T> s;
    std::apply([&](auto&... x) { ((x = in.var), ...); }, s.fields());
    const Moments<T> filled = with_defaults(in);
    const auto key = head_key(h, filled);
    for (std::size_t i = 0; i < lane_count(in.var); ++i) {
      if (std::apply([i](const auto&... k) { return same_as_previous_lane(i, k...); }, key))
        std::apply([i](auto&... x) { (set_lane(x, i, lane(x, i - 1)), ...); }, s.fields());
      else
        set_averages(s, i, causal_profile(lane_params(h, i), lane_moments(in, i), false));
    }
    return s;
  });
}

/// The causal mask: query i (positions 1..L) attends to keys 1..i.
struct CausalMask {
  static constexpr const char* name = "sigprop::CausalAttention";
  /// The value-key covariance (attention_maps.hpp) is not derived for the
  /// per-key sums of the causal mask: left out.
  static constexpr bool value_key_cross = false;

  template <class T>
  static void require_seq_len(const char* function, const T& seq_len) {
    require(function, "seq_len", seq_len, [](double v) { return v >= 2 && std::floor(v) == v && v <= 1e7; },
            "{2, 3, ..., 10^7} (an integer length)");
  }

  template <class T>
  static SoftmaxSums<T> sums(const HeadParams<T>& h, const Moments<T>& in, const AttentionTerms<T>&) {
    return causal_sums(h, in);
  }
};

}  // namespace sigprop::detail
