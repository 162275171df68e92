// sigprop/core/hidden_spread.hpp -- how each map changes the shape of one
// sequence's hidden covariance (Moments::hidden_spread, Moments::linear_share).
//
// S is the d x d covariance of a sequence's position-specific parts
// delta_i = x_i - mean_k x_k (population over positions, the weights fixed);
// the closed forms of attention take it isotropic, but every random weight
// matrix spreads its eigenvalues and LayerNorm keeps them (measured in a
// Post-LN Xavier GeLU stack on i.i.d. tokens: spread 0.007 at the input,
// 0.35 after two layers, 2.8 at the top; docs/validation.md). With
// a = d tr(S^2)/tr(S)^2 - 1 and V = tr(S)/d the position-specific variance:
//   y = x W, W d_in x d_out i.i.d. Gaussian (E over W, Wishart moments):
//     E tr((W^T S W)^2) = s_w^4 d_out ((d_out + 1) tr S^2 + (tr S)^2), so
//     a_out = (1 + a_in)(d_out + 1)/d_in                (Linear; the map of
//     norm_var_ratio for 1 + a, components/linear.hpp);
//   an elementwise map phi: in one sequence, unit j's position-specific
//   part is c_j delta_ij plus a part uncorrelated across units (isotropic),
//   c_j = E[phi'(m_j + delta)] the slope at the unit's shared value m_j.
//   Then S_out = D S D + N with D = diag(c_j), whose off-diagonal (spread)
//   part has weight E[c_j^2]^2, and E[c_j^2] = E[phi'(x_i) phi'(x_k)] for two
//   positions i != k of correlation corr_len: the backward map's
//   Var[g_x] Corr_len[g_x] for a unit gradient of correlation 1. With
//   k = E[c^2] V_in / V_out
//     a_out = a_in k^2,   linear_share_out = linear_share_in k
//   (inverted dropout: c = 1; the mask noise is isotropic);
//   a sum y = lambda x + beta f(x) (blocks/residual.hpp): with S_y = lambda^2
//   S_x + beta^2 S_f + lambda beta (C + C^T), C = S_x J the covariance of x
//   with the part of f linear in x (J random, zero mean, E J J^T = V_lin/V_x I
//   per unit), E tr((C + C^T)^2) = 2 V_lin/V_x (d + 1) tr S_x^2 and the
//   terms odd in J vanish:
//     a_y = (A^2 a_x + B^2 a_f + 2 A B_lin (1 + a_x)) / (A + B)^2,
//   A = lambda^2 V_x, B = beta^2 V_f, B_lin = linear_share_f B. The cross
//   term is what keeps the stream's spread growing in a Post-LN stack: the
//   branch output's own spread, weighted by B^2, is not enough.
//   a normalization y = x/|x| (LayerNorm, RMSNorm) divides each row by its
//   own norm, which is larger along S's large directions: with |x|^2 =
//   E|x|^2 (1 + eps), 1/(1 + eps) to second order and Gaussian fourth
//   moments, Cov[y] ~ S (1 + 2 tr S^2/T^2) - 2 w S^2/T (T = tr S, w the
//   position-specific share of E|x|^2), so
//     a_out = (1 + a)(1 + 4 w (1 + a)/d) - 4 w d tr(S^3)/T^3 - 1,
//   and for a Wishart-like spectrum (Marchenko-Pastur, whose third moment
//   is 1 + 3 a + a^2 in units of the mean) a_out = a (1 - 4 w/d); the
//   linear share is kept (a row's scale is common to its units);
//   inverted dropout also spreads the units' variances: unit j's position-
//   specific variance holds p/(1 - p) m_j^2 of its shared value m_j ~
//   N(mu, r s^2), adding (p/(1 - p))^2 Var[m_j^2]/V_out^2.
// Not modelled: the same spread of the units' variances by an activation
// when the shared part is large (corr_len well above 0; measured for ReLU
// at corr_len 0.5: 1.34 against 0.74, docs/validation.md).
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
