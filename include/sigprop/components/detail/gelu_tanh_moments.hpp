// sigprop/components/detail/gelu_tanh_moments.hpp -- the tanh form's moments
// (components/gelu.hpp, GeluForm::tanh) from the erf form's, lane by lane:
//   E[u] = E[f] + E[delta],   Var[u], Cov[u1, u2], E[u'^2], E[u1' u2']
// with the gap's terms from GeluTanhGap (gelu_tanh.hpp), memoized per thread
// (core/memo.hpp). docs/components/gelu.md ("The tanh form").
#pragma once

#include <array>
#include <cstddef>

#include "sigprop/components/detail/gelu_tanh.hpp"
#include "sigprop/core/lanes.hpp"
#include "sigprop/core/memo.hpp"
#include "sigprop/core/moments.hpp"

namespace sigprop::detail {

struct GeluTanhForwardTag;  // the memo entries: forward, backward,
struct GeluTanhBackwardTag;
struct GeluTanhForwardBaseTag;  // and their parts that depend on the mean and variance only
struct GeluTanhBackwardBaseTag;

// The gap's mean E[delta] and `part(gap, erf_value)` lane by lane (the
// erf form's value where the variance is 0): the parts of the tanh form
// that depend on the mean and variance only, memoized apart from the
// correlations' (a map over correlations at one input keeps them).
template <class Tag, class T, class Part>
std::array<T, 2> gelu_tanh_base(const Moments<T>& in, const T& erf_value, Part part) {
  return memoized<Tag>(std::array<T, 2>{in.mean, in.var}, [&] {
    std::array<T, 2> r{0 * in.var, erf_value};
    for (std::size_t i = 0; i < lane_count(in.mean); ++i) {
      const double mu = double(lane(in.mean, i)), var = double(lane(in.var, i));
      if (!(var > 0)) continue;
      const GeluTanhGap gap(mu, var);
      set_lane(r[0], i, gap.mean());
      set_lane(r[1], i, part(gap, double(lane(erf_value, i))));
    }
    return r;
  });
}

// The tanh form: the erf form's moments in `out` plus the gap's, lane by
// lane (gelu_tanh.hpp); memoized per thread (core/memo.hpp). At
// variance 0 the output is u(mu) and the correlations stay the input's.
template <class T>
void gelu_tanh_forward(const Moments<T>& in, Moments<T>& out) {
  const auto m = memoized<GeluTanhForwardTag>(
      std::array<T, 4>{in.mean, in.var, in.corr_len, in.corr_dim}, [&] {
        // the gap's mean and the variance
        const std::array<T, 2> base = gelu_tanh_base<GeluTanhForwardBaseTag>(
            in, out.var, [](const GeluTanhGap& gap, double erf_var) { return erf_var + gap.cov(1, erf_var); });
        std::array<T, 4> r{out.mean, out.var, out.corr_len, out.corr_dim};
        for (std::size_t i = 0; i < lane_count(in.mean); ++i) {
          const double mu = double(lane(in.mean, i)), var = double(lane(in.var, i));
          if (!(var > 0)) {
            set_lane(r[0], i, gelu_tanh_value(mu));
            continue;
          }
          const double erf_var = double(lane(out.var, i));
          const GeluTanhGap gap(mu, var, double(lane(base[0], i)));
          const double v = double(lane(base[1], i));
          set_lane(r[0], i, double(lane(out.mean, i)) + gap.mean());
          set_lane(r[1], i, v);
          for (std::size_t k : {2, 3}) {
            const double r_in = double(lane(k == 2 ? in.corr_len : in.corr_dim, i));
            const double c = double(lane(r[k], i)) * erf_var + gap.cov(r_in, erf_var);
            set_lane(r[k], i, v > 0 ? c / v : r_in);
          }
        }
        return r;
      });
  out.mean = m[0];
  out.var = m[1];
  out.corr_len = m[2];
  out.corr_dim = m[3];
}

// E[u'^2] and the gradient correlation's factor of the tanh form from the
// erf form's (`second`, `corr`), lane by lane; memoized.
template <class T>
void gelu_tanh_backward(const Moments<T>& in, T& second, T& corr) {
  const auto m = memoized<GeluTanhBackwardTag>(
      std::array<T, 3>{in.mean, in.var, in.corr_len}, [&] {
        // the gap's mean and E[u'^2]
        const std::array<T, 2> base = gelu_tanh_base<GeluTanhBackwardBaseTag>(
            in, second, [](const GeluTanhGap& gap, double erf_second) {
              return erf_second + gap.grad_cross(1, erf_second);
            });
        std::array<T, 2> r{second, corr};
        for (std::size_t i = 0; i < lane_count(in.mean); ++i) {
          const double mu = double(lane(in.mean, i)), var = double(lane(in.var, i));
          if (!(var > 0)) {
            const double d = gelu_tanh_derivative(mu);
            set_lane(r[0], i, d * d);
            set_lane(r[1], i, 1.0);
            continue;
          }
          const double erf_second = double(lane(second, i));
          const GeluTanhGap gap(mu, var, double(lane(base[0], i)));
          const double sec = double(lane(base[1], i));
          const double r_in = double(lane(in.corr_len, i));
          const double cross = double(lane(corr, i)) * erf_second + gap.grad_cross(r_in, erf_second);
          set_lane(r[0], i, sec);
          set_lane(r[1], i, sec > 0 ? cross / sec : 1.0);
        }
        return r;
      });
  second = m[0];
  corr = m[1];
}

}  // namespace sigprop::detail
