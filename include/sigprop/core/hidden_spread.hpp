// sigprop/core/hidden_spread.hpp -- how each map changes the shape of one
// sequence's hidden covariance S (Moments::hidden_spread a = d tr(S^2)/tr(S)^2 - 1,
// Moments::linear_share), with V = var (1 - corr_len):
//   Linear d_in -> d_out   a_out = (1 + a)(d_out + 1)/d_in
//   elementwise phi        a_out = a k^2, share times k, k = E[phi'(x_i) phi'(x_k)] V_in/V_out
//   residual sum           a_y = (A^2 a_x + B^2 a_f + 2 A B share_f (1 + a_x))/(A + B)^2,
//                          A = lambda^2 V_x, B = beta^2 V_f
//   normalization          a_out = a (1 - 4 w/d), w the position-specific share of E[x^2]
//   inverted dropout       + (p/(1 - p))^2 Var[m_j^2]/V_out^2
// Wishart moments and Stein's lemma; docs/hidden_spread.md, "The maps",
// has the derivations, the checks against simulation and the known gaps.
#pragma once

#include "sigprop/core/moments.hpp"
#include "sigprop/numerics/math.hpp"

namespace sigprop::spread {

/// Position-specific variance V = var (1 - corr_len) of one entry.
template <class T>
T position_var(const Moments<T>& m) {
  return math::clamp_nonnegative(T(m.var * (1 - m.corr_len)));
}

/// hidden_spread after y = x W, W d_in x d_out i.i.d. Gaussian (header).
template <class T>
T linear_map(const T& spread_in, const T& d_in, const T& d_out) {
  return (1 + spread_in) * (d_out + 1) / d_in;
}

/// k = slope_sq V_in / V_out, the share of the output's position-specific
/// variance that is the image of the input's with mean squared slope
/// `slope_sq` (at most 1).
template <class T>
T image_share(const Moments<T>& in, const Moments<T>& out, const T& slope_sq) {
  const T linear = slope_sq * position_var(in);
  return math::min_of(T(math::ratio_or(linear, position_var(out), 0)), T(0 * linear + 1));
}

/// Sets out.hidden_spread and out.linear_share of the elementwise map
/// `component` (input `in`, output `out`): E[c^2] from its backward map
/// (header; a_out = a_in k^2, share_out = share_in k).
template <class T, class Elementwise>
void carry_elementwise(const Elementwise& component, const Moments<T>& in, Moments<T>& out) {
  const T one = 0 * in.var + 1;
  const GradMoments<T> unit = component.backward_impl(in, GradMoments<T>{one, one});
  const T k = image_share(in, out, T(unit.var * unit.corr_len));
  out.hidden_spread = hidden_spread_of(in) * k * k;
  out.linear_share = linear_share_of(in) * k;
}

/// hidden_spread after dividing each row by its norm (header): a (1 - 4 w/d),
/// w the position-specific share of the row's second moment.
template <class T>
T normalized(const Moments<T>& in, const T& d) {
  const T w = math::ratio_or(position_var(in), T(in.var + in.mean * in.mean), 0);
  return hidden_spread_of(in) * math::clamp_nonnegative(T(1 - 4 * w / d));
}

/// hidden_spread of lambda x + beta f(x) (header), from the two terms'
/// scaled position-specific variances A = lambda^2 V_x, B = beta^2 V_f, in
/// terms of the branch share t = B/(A + B) (which cannot overflow):
///   a_y = (1 - t)^2 a_x + t^2 a_f + 2 t (1 - t) linear_share_f (1 + a_x).
template <class T>
T residual_sum(const Moments<T>& x, const Moments<T>& f, const T& skip_var, const T& branch_var) {
  const T spread_x = hidden_spread_of(x);
  const T t = math::ratio_or(branch_var, T(skip_var + branch_var), 0), s = 1 - t;
  return s * s * spread_x + t * t * hidden_spread_of(f) + 2 * t * s * linear_share_of(f) * (1 + spread_x);
}

}  // namespace sigprop::spread
