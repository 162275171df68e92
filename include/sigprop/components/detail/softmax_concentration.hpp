// sigprop/components/detail/softmax_concentration.hpp -- the finite-length
// concentration factors of a softmax p of n i.i.d. N(0, a) logits:
//   G(a, n) = n^2 E[p_1^2] e^{-a},                            (forward)
//   J(a, n) = n^2 E[p_1^2 (1 - 2 p_1 + sum_k p_k^2)] e^{-a},  (Jacobian)
// so that n E[sum_k p_k^2] = e^a G(a, n) and
// n E[sum_k p_k^2 (1 - 2 p_k + sum_l p_l^2)] = e^a J(a, n).
//
// G. G(0, n) = 1, G = 1 - a/n + O(a^2) for small a, and G -> 1 as n -> inf at
// fixed a: the delta method for the ratio of sums gives 1/G = 1 + (e^a - 1)
// (2 e^a - 1)/n + ..., accurate only once n >> e^{2a} (at a = 4, n = 300 it
// gives 0.049 for G = 0.361). Reference: Kedia et al., "Transformers Get
// Stable" (ICML 2024), appendix B.7: its log-normal sum treats the denominator
// as a constant, which is G = 1.
//
// J. The softmax Jacobian dp/dx = diag(p) - p p^T maps an upstream gradient g
// with i.i.d. entries (variance g^2) to g_in = p .* (g - p.g), of variance
// g^2 E[p_1^2 (1 - 2 p_1 + sum_k p_k^2)] (softmax.hpp), n^{-2} e^a J. The
// attention's softmax-path gradient, dS = P .* (dP - rowsum(P .* dP)), carries
// the same factor for each query over its L keys. J replaces its first-order
// form there (first order in the spread of p around 1/n: sum_k p_k^3 ~
// sum_k p_k^2 / n, sum_k p_k^2 at its mean), the "centring"
// F_var (1 - (2 - F_var)/L), i.e.
//   J ~ G (1 - (2 - e^a G)/n),
// which fails at large score variance, once a few keys dominate: 46 % high at
// a = 2.56, n = 128 (0.624 for J = 0.427), 66 % at a = 4, n = 300, 8 % at
// a = 1, n = 128 (section 7 of concentration_table --verify tabulates it).
// J(0, n) = 1 - 1/n exactly (p = 1/n), J = (1 - 1/n)(1 - 4 a/n + O(a^2)) for
// small a (second order in p_k - 1/n), J < G (e^a (G - J)/n = E[2 S_3 - S_2^2]
// with S_m = sum_k p_k^m, and S_2^2 <= S_3 by Cauchy-Schwarz), and J -> 1 as
// n -> inf at fixed a.
//
// Exact values come from the quadrature of softmax.hpp (detail::SoftmaxQuadrature,
// ~1 ms a call): softmax_concentration_exact = (n^2 Var[p_1] + 1) e^{-a}, and
// softmax_jacobian_concentration_exact = n^2 e^{-a} times the backward factor
// grad_var (1 - 1/n exactly at a = 0).
//
// softmax_concentration and softmax_jacobian_concentration (~55 ns each)
// interpolate log G and log K, K = J / (1 - 1/n), in a generated table
// (softmax_concentration_table.hpp, written by examples/concentration_table.cpp
// from the exact functions; with the five tables below, 7 x 2583 entries in
// ~2 min), and J = (1 - 1/n) K.
// K rather than J: the a = 0 row of log J, log(1 - e^{-u}), has large high
// derivatives in u = ln n at small n and was interpolated 1e-3 off near n = 2;
// the row of log K is exactly 0, so J(0, n) = 1 - 1/n exactly here too.
// The grid, the same for both:
//   rows     sigma = sqrt(a) = i h, h = sqrt(10)/40, i = 0 .. 40 (a in [0, 10]);
//   columns  u = ln n, 63 nodes from ln 2 to ln 1e7 (step 0.249).
// Scheme: four-point Lagrange interpolation (DLMF 3.3.1) on the two nodes
// either side, shifted inwards at the table's edges, in sigma and in u (the
// 4 x 4 tensor product; one routine, concentration_interpolate, for both
// tables). On the first interval, sigma < h, the rows 0 .. 3 are
// interpolated in a = sigma^2 instead (nodes a = 0, h^2, 4 h^2, 9 h^2): G and
// K are smooth in a (the logits' law is even in sigma), and a cubic in sigma
// would add a spurious O(sqrt a) term.
// Rows uniform in sigma rather than in a: log G has large high derivatives in
// a at small a and n (G(a, 2) = 4 E[logistic(sqrt(2a) Z)^2] e^{-a}), and a
// uniform grid in a was off by 8.5e-4 at step 0.25 and 1.1e-4 at step 0.125.
// Accuracy, relative to the exact functions over the table (examples/
// concentration_table --check 20000, 20000 random points): G max 1.9e-5, RMS
// 3.6e-6; J max 1.9e-5, RMS 3.9e-6; at the 7542 half-step points G max
// 1.8e-5, J max 1.7e-5. The small-a slopes, -1/n for G and -4 (1 - 1/n)/n
// for J, are reproduced to 2e-4 for n <= 100; for J the error grows to 1.5e-3
// at n = 1e3 and 1.5 % at 1e4, where 4 a/n on the first rows approaches the
// exact quadrature's resolution (at large n its J is ~3e-8 relative high for
// a > 0, and exact at a = 0): a slope error of that size in J itself.
// The exact quadrature itself, against an independent adaptive quadrature
// (concentration_table --verify): G to 3e-6 for n <= 1e7 (1e-7 for n <= 1e6);
// J to 7e-7 for n <= 1e7 (largest at a ~ 4, n = 1e7; 3e-8 for n <= 1e6), and
// at n = 2 J is 6.3e-7 low as a -> 0 (against the one-dimensional integral
// J(a, 2) = e^{-a}/2 E[sech^4(sqrt(a/2) Z)]).
// Outside the table:
//   n > 1e7: 1/F - 1 is continued as c/n from the last column, for F = G and
//     F = K,
//       1/F(a, n) = 1 + (1/F(a, n_max) - 1) n_max/n   (continuous at n_max),
//     the delta method's asymptotic form (for J the same form to O(1/n^2)).
//     Against the independent quadrature it is good to 1e-6 (G) and 4e-6 (J)
//     for a <= 4 at any n; where n_max is not >> e^{2a} the true 1/F - 1 falls
//     faster than 1/n and the continuation overestimates F (at n = 1e8, G: a =
//     5 +4.5e-5, a = 6 +8e-4, a = 8 +3 %, a = 10 +21 %; J: a = 5 +1.2e-4, a = 6
//     +1.7e-3, a = 8 +5 %, a = 10 +29 %).
//     The table stops at 1e7 because SoftmaxQuadrature integrates the
//     Gaussian over 8.5 standard deviations, which for n >~ 1e7 cuts off the
//     weight of w^2 centred 2 sqrt(a) out (and of w^3, w^4 for J) and biases
//     the exact values low (G, a = 6: -1.8e-6 at n = 1e7, -4.3e-5 at 1e8,
//     -1.3e-4 at 1e9; a = 8: -5.7e-4 at 1e9. J, a = 5: -1.2e-5 at 1e8, -2.5e-5
//     at 1e9; a = 6: -1.1e-4 at 1e9; a = 8: -1.8e-4 at 1e9).
//   a > 10: log G and log K continued linearly in a from the last two rows;
//     outside the attention closed form's domain, and indicative only (G: 3e-4
//     to 2e-2 off at a = 10.5, 3e-3 to 0.2 at a = 12; J: 1e-3 to 2e-2 at a =
//     10.5, 1e-2 to 0.2 at a = 12; for n from 2 to 1e6).
//
// Kurtosis slopes. The attention's keys are often rows of fixed norm (a
// LayerNorm's output): one query's scores are then lighter-tailed than
// Gaussian. For logits of excess kurtosis kappa from a scale mixture (variance
// a w, E w = 1, Var w = kappa/3), log G and log J change by kappa times
//   D_G(a, n) = d log G / d kappa,  D_J(a, n) = d log J / d kappa  (at kappa = 0).
// First order in kappa the law of the logits is the Edgeworth form
// phi + (kappa/24) phi'''' whatever mixes them, so D_G and D_J hold for any
// small symmetric perturbation of that kind. D = 0 at a = 0 (and O(a^2)); as n -> inf
// at fixed a, log G -> log E e^{2z} - 2 log E e^z, whose kappa-slope is
// (16 - 2) a^2/24 = 7 a^2/12 (the cumulant expansion log E e^{t z} =
// t^2 a/2 + kappa t^4 a^2/24); at finite n the concentrated softmax caps the
// heavy tail's weight: D_G = 1.02 at a = 2.56, n = 128 against 3.82 at n = inf.
// Exact values (softmax_kurtosis_slopes_exact, ~6 ms): the quadrature of
// softmax.hpp for the two-point mixture w = 1 -+ e (kappa = 3 e^2) at e = 0.025
// and 0.05, the difference quotients of log G and log J combined by Richardson
// extrapolation (their O(e^2) error cancels). Fast values interpolate the
// tables slope_g and slope_j of the same grid (the slopes themselves, not
// their logs: D_J changes sign); beyond n_max the last column is held, beyond
// a_max the rows are continued linearly in a. Accuracy: see
// examples/concentration_table --check.
//
// Tilt factors. The softmax-weighted average z = sum_k p_k x_k of rows x_k =
// delta_k whose logits are s_k = w . delta_k (delta_k i.i.d. N(0, I)) moves
// towards w; Stein's lemma (E[delta f] = w E[df/ds], twice) gives exactly
//   E[sum_{k != l} p_k p_l delta_k . delta_l] = |w|^2 C,
//     C(a, n) = E[1 - 5 S_2 + 4 S_3 + 6 S_2^2 - 6 S_4],
//   E[sum_k p_k^2 |delta_k|^2] = d E[S_2] + |w|^2 O,
//     O(a, n) = E[4 S_2 - 10 S_3 + 6 S_4],
// with S_m = sum_k p_k^m, from d^2(p_k p_l)/ds_k ds_l = p_k p_l ((1 - 2 p_k)
// (1 - 2 p_l) + 2 p_k p_l) and d^2(p_k^2)/ds_k^2 = 2 p_k^2 (1 - p_k)(2 - 3 p_k).
// The first is the tilt of the average, the second the heavier weight of
// longer rows: a row of fixed norm has none (O enters times the rows' norm
// fluctuation). Their first-order forms 1 - 5 S_2 and 4 S_2 differ from the
// (1 - S_2)^2 and S_2 used before, which cancelled to first order in S_2
// (docs/components/attention.md). C -> 1 and O -> 0 as n -> inf like 1/n; at
// a = 0, S_m = n^{1-m}. Exact values (softmax_tilt_factors_exact): E[S_3],
// E[S_4], E[S_2^2] from the quadrature of softmax.hpp (SoftmaxQuadrature::
// power_sums). Fast values interpolate the tables tilt_cross and tilt_own of
// the same grid; beyond n_max, 1 - C and O continue as c/n.
//
// Pair curvature. Two softmaxes over the same n keys whose logit vectors
// have correlation rho (two queries' scores, covariance eps = rho a):
//   H(eps; a, n) = n^2 E[p_1 p'_1],  H(0) = 1 (independent), H(a) = e^a G.
// Attention averages H over the fluctuation of eps between query pairs
// (components/attention.hpp, F_cov), which needs its curvature at eps = 0,
//   V(a, n) = H''(0)/H(0) = H''(0).
// The delta method's H = e^eps/(1 + k (e^eps - 1)), k = (1/G - 1)/(e^a - 1),
// has V = (1 - k)(1 - 2 k): 0.837 at a = 2.56, n = 128 where V = 0.726, 0.844
// at a = 4, n = 128 where V = 0.559 (e^eps alone, the large-n limit: 1).
// V(a, 2) = 0 (p_1 + p_2 = 1 makes H linear in eps), V -> 1 as n -> inf like
// 1/n, V(0, n) the limit a -> 0 of the same second difference.
// Exact values (softmax_pair_curvature_exact, ~40 ms): the second difference
// of H from the two-position quadrature of softmax.hpp (Cov[p_1, p'_1] at
// rho = -+ e) at two steps e and 2 e, combined by Richardson extrapolation.
// Fast values interpolate the table pair_curvature of the same grid; beyond
// n_max, 1 - V continues as c/n. Accuracy (concentration_table --check 4000):
// absolute error at most 5.6e-4, RMS 1.4e-5.
//
// All seven tables share the grid: softmax_factors(a, n) finds the stencil
// of (a, n) once (ConcentrationPoint) and reads every table with it, giving
// exactly what the seven functions give one by one.
//
// Preconditions (the caller validates): a >= 0 and finite, n >= 2 and finite.
// Nothing is clamped: a negative or NaN argument gives NaN, and n < 2 an
// extrapolation of the table.
#pragma once

#include <algorithm>
#include <cmath>
#include <type_traits>

#include <Eigen/Core>

#include "sigprop/components/detail/softmax_concentration_table.hpp"
#include "sigprop/components/softmax.hpp"
#include "sigprop/core/math.hpp"

namespace sigprop::detail {

/// G(a, n) from the exact quadrature (slow: ~1 ms).
inline double softmax_concentration_exact(double a, double n) {
  if (a == 0) return 1;
  const SoftmaxExact e = softmax_exact(n, a, 0, SoftmaxNeed::forward);
  return (n * n * e.var + 1) * std::exp(-a);
}

/// J(a, n) from the exact quadrature (slow: ~1 ms). At a = 0 softmax_exact
/// returns grad_var = (1 - 1/n)/n^2, which n^2 times would only round to 1 - 1/n.
inline double softmax_jacobian_concentration_exact(double a, double n) {
  if (a == 0) return 1 - 1 / n;
  const SoftmaxExact e = softmax_exact(n, a, 0, SoftmaxNeed::backward);
  return n * n * e.grad_var * std::exp(-a);
}

/// D_G and D_J (the kurtosis slopes at the top of this file).
struct KurtosisSlopes {
  double g = 0, j = 0;
};

/// D_G(a, n) and D_J(a, n) from the exact quadrature (slow: ~6 ms).
inline KurtosisSlopes softmax_kurtosis_slopes_exact(double a, double n) {
  KurtosisSlopes out;
  if (a == 0) return out;
  const auto moments = [&](double spread) {
    SoftmaxExact e;
    SoftmaxQuadrature(n, a, spread).one_position(e);
    return e;
  };
  const SoftmaxExact base = moments(0);
  // log of n^2 E[p^2] (= G e^a) and of J e^a / n^2, as in the exact functions above.
  const auto log_g = [&](const SoftmaxExact& e) { return std::log(n * n * e.var + 1); };
  const auto log_j = [](const SoftmaxExact& e) { return std::log(e.grad_var); };
  double quotient_g[2], quotient_j[2];
  const double spreads[2] = {0.025, 0.05};
  for (int k = 0; k < 2; ++k) {
    const SoftmaxExact e = moments(spreads[k]);
    const double kurtosis = 3 * spreads[k] * spreads[k];
    quotient_g[k] = (log_g(e) - log_g(base)) / kurtosis;
    quotient_j[k] = (log_j(e) - log_j(base)) / kurtosis;
  }
  // Richardson: the quotients err by c e^2, and the spreads differ by 2x.
  out.g = (4 * quotient_g[0] - quotient_g[1]) / 3;
  out.j = (4 * quotient_j[0] - quotient_j[1]) / 3;
  return out;
}

/// C and O (the tilt factors at the top of this file).
struct TiltFactors {
  double cross = 0, own = 0;
};

/// C(a, n) and O(a, n) from the exact quadrature (slow: ~2 ms); exact at a = 0.
inline TiltFactors softmax_tilt_factors_exact(double a, double n) {
  double s2 = 1 / n, s3 = s2 * s2, s4 = s3 * s2, s2_sq = s3;
  if (a != 0) {
    const SoftmaxQuadrature q(n, a);
    SoftmaxExact e;
    q.one_position(e);
    s2 = n * e.var + 1 / n;
    q.power_sums(s3, s4, s2_sq);
  }
  return {1 - 5 * s2 + 4 * s3 + 6 * s2_sq - 6 * s4, 4 * s2 - 10 * s3 + 6 * s4};
}

/// V(a, n) = H''(0) (the pair curvature at the top of this file) from the
/// two-position quadrature (slow: ~40 ms). The covariance steps are
/// eps = e a with e = 0.025 and 0.05 for a >= 1, and e = min(0.025/a, 0.2)
/// and twice that below, so that the second difference stays well above the
/// quadrature's rounding; for a < 1e-3 it is taken at a = 1e-3 (H is smooth
/// in a; V(1e-3, n) differs from V(a, n) by O(1e-3/n)).
inline double softmax_pair_curvature_exact(double a, double n) {
  const double at = std::max(a, 1e-3), e = std::min(0.025 / std::min(at, 1.0), 0.2);
  const auto pair_h = [&](double rho) {
    return n * n * softmax_exact(n, at, rho, SoftmaxNeed::forward).cov_len + 1;
  };
  const auto second_difference = [&](double step) {
    const double eps = step * at;
    return (pair_h(step) + pair_h(-step) - 2) / (eps * eps);
  };
  // Richardson: the differences err by c eps^2, and the steps differ by 2x.
  return (4 * second_difference(e) - second_difference(2 * e)) / 3;
}

// A table of the generated header: log_g or log_j, row i, column j at [i * u_count + j].
using ConcentrationTable = double[concentration_table::sigma_count * concentration_table::u_count];

// Four-point Lagrange weights for the nodes 0, 1, 2, 3 at position t.
inline void concentration_weights(double t, double (&w)[4]) {
  const double t1 = t - 1, t2 = t - 2, t3 = t - 3, sixth = 1.0 / 6;
  w[0] = -t1 * t2 * t3 * sixth;
  w[1] = t * t2 * t3 * 0.5;
  w[2] = -t * t1 * t3 * 0.5;
  w[3] = t * t1 * t2 * sixth;
}

// The same in x = t^2 for the nodes x = 0, 1, 4, 9 (t = 0, 1, 2, 3).
inline void concentration_even_weights(double t, double (&w)[4]) {
  const double x = t * t, x1 = x - 1, x4 = x - 4, x9 = x - 9;
  w[0] = -x1 * x4 * x9 * (1.0 / 36);
  w[1] = x * x4 * x9 * (1.0 / 24);
  w[2] = -x * x1 * x9 * (1.0 / 60);
  w[3] = x * x1 * x4 * (1.0 / 360);
}

// The table along row i, columns j0 .. j0 + 3.
inline double concentration_row(const ConcentrationTable& log_f, int i, int j0, const double (&w)[4]) {
  const double* r = log_f + i * concentration_table::u_count + j0;
  return w[0] * r[0] + w[1] * r[1] + w[2] * r[2] + w[3] * r[3];
}

// The seven tables of softmax_factors interleaved node by node, built at
// compile time: a stencil's 16 nodes are then 16 reads of one row of eight
// (the eighth unused), and the seven tables are combined at once, each in the
// same order of operations as a read of its own table (ConcentrationPoint::read).
struct FactorNode {
  alignas(64) double value[8];
};
inline constexpr int factor_count = 7;  // log_g, log_j, slope_g, slope_j, tilt_cross, tilt_own, pair_curvature

struct FactorNodes {
  FactorNode node[concentration_table::sigma_count * concentration_table::u_count];
};

constexpr FactorNodes interleave_factor_tables() {
  namespace table = concentration_table;
  FactorNodes out{};
  const double* tables[factor_count] = {table::log_g,   table::log_j,      table::slope_g,       table::slope_j,
                                        table::tilt_cross, table::tilt_own, table::pair_curvature};
  for (int i = 0; i < table::sigma_count * table::u_count; ++i) {
    for (int t = 0; t < factor_count; ++t) out.node[i].value[t] = tables[t][i];
    out.node[i].value[factor_count] = 0;
  }
  return out;
}

inline constexpr FactorNodes factor_nodes = interleave_factor_tables();

// Eight values, one per interleaved table.
struct FactorValues {
  double value[8];
};

// The interleaved tables along row i, columns j0 .. j0 + 3 (concentration_row for all).
inline FactorValues factor_row(int i, int j0, const double (&w)[4]) {
  const FactorNode* r = factor_nodes.node + i * concentration_table::u_count + j0;
  FactorValues out;
  for (int t = 0; t < 8; ++t)
    out.value[t] = w[0] * r[0].value[t] + w[1] * r[1].value[t] + w[2] * r[2].value[t] + w[3] * r[3].value[t];
  return out;
}

// One point (a, u = ln n) of the tables: the stencil and its weights, found
// once and read in every table that shares the grid (n beyond n_max is read
// at the last column; the continuations are applied by the callers). The
// scheme at the top of this file. No transcendental function but sqrt, so
// batches build it lane by lane between vectorized log and exp.
class ConcentrationPoint {
 public:
  ConcentrationPoint(double a, double u) : a_(a) {
    namespace table = concentration_table;
    constexpr double per_u = 1 / table::u_step, per_sigma = 1 / table::sigma_step;
    constexpr int u_last = table::u_count - 1, s_last = table::sigma_count - 1;
    // Stencils: the two nodes either side, shifted inwards at the edges. The
    // comparisons send NaN to a valid stencil, and the weights carry it on.
    double pu = (u - table::u_first) * per_u;
    if (pu > u_last) pu = u_last;  // n > n_max: the last column, continued by the caller
    j0_ = pu >= 1 ? (pu < u_last - 1 ? static_cast<int>(pu) - 1 : u_last - 3) : 0;
    concentration_weights(pu - j0_, wu_);
    beyond_a_ = !(a <= table::a_max);
    if (beyond_a_) return;
    const double ps = std::sqrt(a) * per_sigma;
    i0_ = ps >= 1 ? (ps < s_last - 1 ? static_cast<int>(ps) - 1 : s_last - 3) : 0;
    if (ps >= 1) concentration_weights(ps - i0_, ws_);
    else concentration_even_weights(ps, ws_);  // sigma < h: in a (no spurious O(sqrt a) term)
  }

  // The table interpolated at this point; beyond a_max continued linearly in a
  // from the last two rows.
  double read(const ConcentrationTable& t) const {
    namespace table = concentration_table;
    if (!beyond_a_) {
      double value = 0;
      for (int k = 0; k < 4; ++k) value += ws_[k] * concentration_row(t, i0_ + k, j0_, wu_);
      return value;
    }
    constexpr int s_last = table::sigma_count - 1;
    const double s1 = s_last * table::sigma_step, s0 = (s_last - 1) * table::sigma_step;
    const double f1 = concentration_row(t, s_last, j0_, wu_), f0 = concentration_row(t, s_last - 1, j0_, wu_);
    return f1 + (f1 - f0) * (a_ - s1 * s1) / ((s1 - s0) * (s1 + s0));
  }

  // read() of the seven interleaved tables (factor_nodes) at once.
  FactorValues read_factors() const {
    namespace table = concentration_table;
    FactorValues out;
    if (!beyond_a_) {
      for (int t = 0; t < 8; ++t) out.value[t] = 0;
      for (int k = 0; k < 4; ++k) {
        const FactorValues row = factor_row(i0_ + k, j0_, wu_);
        for (int t = 0; t < 8; ++t) out.value[t] += ws_[k] * row.value[t];
      }
      return out;
    }
    constexpr int s_last = table::sigma_count - 1;
    const double s1 = s_last * table::sigma_step, s0 = (s_last - 1) * table::sigma_step;
    const FactorValues f1 = factor_row(s_last, j0_, wu_), f0 = factor_row(s_last - 1, j0_, wu_);
    for (int t = 0; t < 8; ++t)
      out.value[t] = f1.value[t] + (f1.value[t] - f0.value[t]) * (a_ - s1 * s1) / ((s1 - s0) * (s1 + s0));
    return out;
  }

 private:
  double a_, ws_[4] = {0, 0, 0, 0}, wu_[4];
  int i0_ = 0, j0_;
  bool beyond_a_;
};

// log f(a, n) interpolated at u = ln n (ConcentrationPoint), with n beyond
// n_max read at the last column.
inline double concentration_log(const ConcentrationTable& log_f, double a, double u) {
  return ConcentrationPoint(a, u).read(log_f);
}

// The continuations beyond n_max (the top of this file), from the value at
// n_max: a factor F -> 1 with 1/F - 1 ~ c/n (G, K) from its log; a value
// with 1 - v ~ c/n (C, V); a value ~ c/n (O). The kurtosis slopes are held.
inline double continued_factor(double log_value, double n) {
  return 1 / (1 + std::expm1(-log_value) * (concentration_table::n_max / n));
}
inline double continued_complement(double value, double n) {
  return 1 - (1 - value) * (concentration_table::n_max / n);
}
inline double continued_decay(double value, double n) { return value * (concentration_table::n_max / n); }

// f(a, n) = exp(log_f interpolated), for a factor f -> 1 as n -> inf: the
// scheme and the continuations at the top of this file. Scalars (double) or
// Eigen arrays of double (one lane per configuration; log and exp vectorized).
template <class T>
T concentration_interpolate(const ConcentrationTable& log_f, const T& a, const T& n) {
  namespace table = concentration_table;
  if constexpr (is_scalar_v<T>) {
    const double log_value = concentration_log(log_f, a, std::log(n));
    if (!(n > table::n_max)) return std::exp(log_value);
    return continued_factor(log_value, n);
  } else {
    const T u = n.log();
    T log_value(a.size());
    for (Eigen::Index i = 0; i < a.size(); ++i) log_value(i) = concentration_log(log_f, a(i), u(i));
    T out = log_value.exp();
    for (Eigen::Index i = 0; i < a.size(); ++i)
      if (n(i) > table::n_max) out(i) = continued_factor(log_value(i), n(i));
    return out;
  }
}

// log f(a, n): concentration_interpolate without its exponential (beyond
// n_max the log of the continued factor, -log1p(expm1(-log f(a, n_max)) n_max/n)).
template <class T>
T concentration_log_interpolate(const ConcentrationTable& log_f, const T& a, const T& n) {
  namespace table = concentration_table;
  const auto continued = [](double log_value, double nv) {
    return -std::log1p(std::expm1(-log_value) * (table::n_max / nv));
  };
  if constexpr (is_scalar_v<T>) {
    const double log_value = concentration_log(log_f, a, std::log(n));
    return n > table::n_max ? continued(log_value, n) : log_value;
  } else {
    const T u = n.log();
    T out(a.size());
    for (Eigen::Index i = 0; i < a.size(); ++i) {
      out(i) = concentration_log(log_f, a(i), u(i));
      if (n(i) > table::n_max) out(i) = continued(out(i), n(i));
    }
    return out;
  }
}

/// log G(a, n) by interpolation: the log of softmax_concentration, read
/// without forming G (for double, float or Eigen arrays).
template <class T>
T softmax_log_concentration(const T& a, const T& n) {
  using R = math::real_of<T>;
  if constexpr (std::is_same_v<R, double>) {
    return concentration_log_interpolate(concentration_table::log_g, a, n);
  } else {
    return math::map_lanes(a, n, [](R av, R nv) {
      return static_cast<R>(
          concentration_log_interpolate<double>(concentration_table::log_g, static_cast<double>(av), static_cast<double>(nv)));
    });
  }
}

/// G(a, n) by interpolation (the accuracy and the domain: see the top of this file).
inline double softmax_concentration(double a, double n) {
  return concentration_interpolate<double>(concentration_table::log_g, a, n);
}

/// J(a, n) by interpolation of K = J / (1 - 1/n) (see the top of this file).
inline double softmax_jacobian_concentration(double a, double n) {
  return (1 - 1 / n) * concentration_interpolate<double>(concentration_table::log_j, a, n);
}

/// G for float or Eigen arrays: double lanes through the vectorized path,
/// float computed in double.
template <class T>
T softmax_concentration(const T& a, const T& n) {
  using R = math::real_of<T>;
  if constexpr (std::is_same_v<R, double>) {
    return concentration_interpolate(concentration_table::log_g, a, n);
  } else {
    return math::map_lanes(a, n, [](R av, R nv) {
      return static_cast<R>(softmax_concentration(static_cast<double>(av), static_cast<double>(nv)));
    });
  }
}

/// J for float or Eigen arrays (as softmax_concentration).
template <class T>
T softmax_jacobian_concentration(const T& a, const T& n) {
  using R = math::real_of<T>;
  if constexpr (std::is_same_v<R, double>) {
    return T((1 - 1 / n) * concentration_interpolate(concentration_table::log_j, a, n));
  } else {
    return math::map_lanes(a, n, [](R av, R nv) {
      return static_cast<R>(softmax_jacobian_concentration(static_cast<double>(av), static_cast<double>(nv)));
    });
  }
}

// A table's value at (a, n) itself (not its exponential), for double, float
// or Eigen arrays lane by lane; beyond n_max, `beyond(value at n_max, n)`.
template <class T, class Beyond>
T concentration_table_value(const ConcentrationTable& table, const T& a, const T& n, Beyond beyond) {
  using R = math::real_of<T>;
  const auto one = [&table, &beyond](double av, double nv) {
    const double value = concentration_log(table, av, std::log(std::min(nv, concentration_table::n_max)));
    return nv > concentration_table::n_max ? beyond(value, nv) : value;
  };
  if constexpr (is_scalar_v<T>) return static_cast<T>(one(static_cast<double>(a), static_cast<double>(n)));
  else
    return math::map_lanes(a, n, [&one](R av, R nv) {
      return static_cast<R>(one(static_cast<double>(av), static_cast<double>(nv)));
    });
}

/// D_G(a, n) (or D_J with the table slope_j) by interpolation (held at n_max beyond it).
template <class T>
T softmax_kurtosis_slope(const ConcentrationTable& slopes, const T& a, const T& n) {
  return concentration_table_value(slopes, a, n, [](double value, double) { return value; });
}

/// C(a, n) by interpolation; beyond n_max 1 - C continued as c/n.
template <class T>
T softmax_tilt_cross(const T& a, const T& n) {
  return concentration_table_value(concentration_table::tilt_cross, a, n, continued_complement);
}

/// O(a, n) by interpolation; beyond n_max continued as c/n.
template <class T>
T softmax_tilt_own(const T& a, const T& n) {
  return concentration_table_value(concentration_table::tilt_own, a, n, continued_decay);
}

/// V(a, n) by interpolation; beyond n_max 1 - V continued as c/n.
template <class T>
T softmax_pair_curvature(const T& a, const T& n) {
  return concentration_table_value(concentration_table::pair_curvature, a, n, continued_complement);
}

/// Every tabulated factor at one point (a, n): G, J, D_G, D_J, C, O, V.
template <class T>
struct SoftmaxFactors {
  T concentration, jacobian, slope_g, slope_j, tilt_cross, tilt_own, pair_curvature;
};

/// All seven factors at (a, n), each as its own function gives it, with the
/// stencil found once (ConcentrationPoint) instead of once per table: for
/// double, float or Eigen arrays lane by lane (log and exp vectorized).
template <class T>
SoftmaxFactors<T> softmax_factors(const T& a, const T& n) {
  namespace table = concentration_table;
  using R = math::real_of<T>;
  // One lane: the log-factors (G, K) before their exp, the rest finished.
  struct Lane {
    double log_g, log_k, slope_g, slope_j, tilt_cross, tilt_own, pair_curvature;
  };
  const auto lane_of = [](double av, double nv, double uv) {
    const FactorValues f = ConcentrationPoint(av, uv).read_factors();  // the order of factor_nodes
    Lane l{f.value[0], f.value[1], f.value[2], f.value[3], f.value[4], f.value[5], f.value[6]};
    if (nv > table::n_max) {
      l.tilt_cross = continued_complement(l.tilt_cross, nv);
      l.tilt_own = continued_decay(l.tilt_own, nv);
      l.pair_curvature = continued_complement(l.pair_curvature, nv);
    }
    return l;
  };
  const auto factor = [](double log_value, double nv) {
    return nv > table::n_max ? continued_factor(log_value, nv) : std::exp(log_value);
  };
  if constexpr (is_scalar_v<T>) {
    const double av = static_cast<double>(a), nv = static_cast<double>(n);
    const Lane l = lane_of(av, nv, std::log(nv));
    return {static_cast<T>(factor(l.log_g, nv)), static_cast<T>((1 - 1 / nv) * factor(l.log_k, nv)),
            static_cast<T>(l.slope_g), static_cast<T>(l.slope_j), static_cast<T>(l.tilt_cross),
            static_cast<T>(l.tilt_own), static_cast<T>(l.pair_curvature)};
  } else {
    // Double lanes of T's shape (a fixed-size chunk stays off the heap).
    using Lanes = Eigen::Array<double, T::RowsAtCompileTime, 1, 0, T::MaxRowsAtCompileTime, 1>;
    const Eigen::Index size = a.size();
    const Lanes nd = n.template cast<double>(), u = nd.log();
    Lanes log_g(size), log_k(size);
    SoftmaxFactors<T> out{a, a, a, a, a, a, a};  // shapes; every lane is overwritten
    for (Eigen::Index i = 0; i < size; ++i) {
      const Lane l = lane_of(static_cast<double>(a(i)), nd(i), u(i));
      log_g(i) = l.log_g, log_k(i) = l.log_k;
      out.slope_g(i) = static_cast<R>(l.slope_g), out.slope_j(i) = static_cast<R>(l.slope_j);
      out.tilt_cross(i) = static_cast<R>(l.tilt_cross), out.tilt_own(i) = static_cast<R>(l.tilt_own);
      out.pair_curvature(i) = static_cast<R>(l.pair_curvature);
    }
    Lanes g = log_g.exp(), k = log_k.exp();
    for (Eigen::Index i = 0; i < size; ++i)
      if (nd(i) > table::n_max) g(i) = continued_factor(log_g(i), nd(i)), k(i) = continued_factor(log_k(i), nd(i));
    out.concentration = g.template cast<R>();
    out.jacobian = ((1 - 1 / nd) * k).template cast<R>();
    return out;
  }
}

/// The same for Eigen arguments of different types (an expression such as
/// a + step with an array): both evaluated to a's plain array type first.
template <class A, class N>
auto softmax_concentration(const Eigen::ArrayBase<A>& a, const Eigen::ArrayBase<N>& n) {
  using T = typename Eigen::ArrayBase<A>::PlainObject;
  return softmax_concentration(T(a), T(n));
}

template <class A, class N>
auto softmax_jacobian_concentration(const Eigen::ArrayBase<A>& a, const Eigen::ArrayBase<N>& n) {
  using T = typename Eigen::ArrayBase<A>::PlainObject;
  return softmax_jacobian_concentration(T(a), T(n));
}

}  // namespace sigprop::detail
