// sigprop/components/detail/attention_terms.hpp -- one attention head's
// intermediate moments (components/attention.hpp), one named step each:
// the rows' split, the score variance, the tilt, the shift of the shared
// part, the query-norm fluctuation, the keys' kurtosis, and the softmax
// weights F_var, F_cov (the pair covariance), F_jac (the Jacobian weight)
// with the tilt factors C and O. The formulas are those of attention.hpp's
// header; docs/components/attention.md ("Formulas", "Code structure")
// derives each step and gives the measurements behind it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <tuple>

#include "sigprop/components/detail/rotary.hpp"
#include "sigprop/components/detail/softmax_concentration.hpp"
#include "sigprop/core/errors.hpp"
#include "sigprop/core/lanes.hpp"
#include "sigprop/numerics/math.hpp"
#include "sigprop/core/moments.hpp"

namespace sigprop {

/// What a head divides its logits Q K^T by: sqrt(d_k) (Vaswani et al. 2017)
/// or d_k (muP: Yang et al., "Tensor Programs V", 2022), docs/components/attention.md
/// ("Logit scale").
enum class LogitScale { inv_sqrt_dk, inv_dk };

inline const char* to_string(LogitScale s) { return s == LogitScale::inv_dk ? "inv-dk" : "inv-sqrt-dk"; }

}  // namespace sigprop

namespace sigprop::detail {

/// The parameters of one head: widths d_in, d_k, the sequence length, the
/// weight variances of Wq, Wk, Wv, the dropout probability, the rotary
/// embedding, the bias variances of Q, K, V and the logit scale.
template <class T>
struct HeadParams {
  T d_in, d_k, seq_len, q_var, k_var, v_var, p;
  RotaryEmbedding rotary;
  T q_bias, k_bias, v_bias;
  LogitScale logit_scale = LogitScale::inv_sqrt_dk;

  /// The logits' variance relative to 1/sqrt(d_k): 1, or 1/d_k for inv_dk.
  T logit_gain() const { return logit_scale == LogitScale::inv_dk ? T(1 / d_k) : T(0 * d_k + 1); }
  /// q_var as the scores see it: a head with logits Q K^T/d_k is one with
  /// logits Q K^T/sqrt(d_k) and Wq scaled by 1/sqrt(d_k), forward and in dX.
  T score_q_var() const { return logit_scale == LogitScale::inv_dk ? T(q_var / d_k) : q_var; }
  /// q_bias as the scores see it (the query bias scales with Wq).
  T score_q_bias() const { return logit_scale == LogitScale::inv_dk ? T(q_bias / d_k) : q_bias; }
  /// t = d_in q_var k_var (d_k cancels in the scores at 1/sqrt(d_k)).
  T t() const { return d_in * score_q_var() * k_var; }
  /// k_var E[q^2] = t m2 + k_var q_bias for input second moment m2: what
  /// scales the scores (a query bias b_q adds b_q . (Wk^T x_k), which varies
  /// with the key; a key bias adds q_i . b_k, the same for every key of a
  /// query, and leaves the softmax alone).
  T score_scale(const T& m2) const { return t() * m2 + k_var * score_q_bias(); }
  /// Every field, for keys.
  auto fields() const {
    return std::tuple_cat(std::tie(d_in, d_k, seq_len, q_var, k_var, v_var, p, rotary.base, q_bias, k_bias, v_bias),
                          std::make_tuple(static_cast<int>(logit_scale)));
  }
};

/// The key of everything computed from a head and its input (core/memo.hpp).
template <class T>
auto head_key(const HeadParams<T>& h, const Moments<T>& in) {
  return std::tuple_cat(h.fields(), in.fields());
}

/// The moments of one head's input that its closed forms use (the
/// derivation at the top of components/attention.hpp).
template <class T>
struct AttentionTerms {
  T second;        ///< m2 = s^2 + mu^2, E[x^2]
  T pos_var;       ///< (1 - r) s^2, variance of the position-specific part
  T common;        ///< r s^2 + mu^2, second moment of the part shared by all positions
  T corr_queries;  ///< rho, correlation of two queries' score vectors w_i, w_m
  T corr_rows;     ///< common / m2, the share of a row shared by all positions
  T score_var;     ///< sigma^2, variance of the position-specific part of a score
  T tilt_var;      ///< gamma^2, squared shift of a value's mean under the softmax weights
  T pos_cov_sq;    ///< (1 - r)^2 s^4 + (d_in - 1)(r^d s^2)^2, so gamma^2 = t m2 pos_cov_sq
  T weight_sq;     ///< F_var = L E[sum_k P_ik^2]
  T weight_cross;  ///< F_cov = L E[sum_k P_ik P_mk], i != m
  T weight_jacobian;  ///< F_jac = L E[sum_k P_ik^2 (1 - 2 P_ik + sum_l P_il^2)] (softmax Jacobian)
  T width_term;    ///< c sigma^4, the second-order query-norm fluctuation term
  T pos_norm_var;  ///< nu_pos, the norm fluctuation of a row's position-specific part (1: Gaussian)
  T tilt_cross;    ///< C, the weighted average's tilt per gamma^2
  T tilt_own;      ///< O, the weight of longer rows per gamma^2
  T shared_shift;  ///< (1 - nu) rho (2 - rho) gamma^2, the shared part that rows of fixed norm lose
  T rotary_keep;   ///< f_L, the share of rotary pairs that stay put over the L keys (1 without rotation)
};

/// x clamped to [-bound, bound], lane-wise (bound >= 0).
template <class T>
T clamp_abs(const T& x, const T& bound) {
  if constexpr (is_scalar_v<T>) return std::clamp(x, -bound, bound);
  else return x.max(-bound).min(bound);
}

/// An exponential of the score variance must be finite: report the exponent
/// (under Attention's name for either mask).
template <class T>
void require_finite_exp(const T& value, const T& exponent) {
  for (std::size_t i = 0; i < lane_count(value); ++i) {
    if (!std::isfinite(static_cast<double>(lane(value, i))))
      raise_overflow("sigprop::Attention", "the exponential of the score variance, exponent",
                     static_cast<double>(lane(exponent, i)),
                     "the score variance (1 - r) s2 d_in^2 q_var k_var (s2 + mu^2) is too large; "
                     "attention is then one-hot and outside this closed form");
  }
}

/// Rows split into the part shared by all positions and the position-
/// specific part: m2, pos_var, common and rho.
template <class T>
AttentionTerms<T> split_rows(const Moments<T>& in) {
  AttentionTerms<T> a;
  a.second = in.var + in.mean * in.mean;
  a.pos_var = (1 - in.corr_len) * in.var;
  a.common = in.corr_len * in.var + in.mean * in.mean;
  a.corr_queries = a.corr_rows = math::ratio_or(a.common, a.second, 1);
  return a;
}

/// A query bias is shared by all queries: rho = (t common + k_var q_bias)/(t m2 + k_var q_bias).
template <class T>
void query_bias_terms(const HeadParams<T>& h, AttentionTerms<T>& a) {
  a.corr_queries = a.corr_rows + (1 - a.corr_rows) * math::ratio_or(T(h.k_var * h.score_q_bias()), h.score_scale(a.second), 0);
}

/// sigma^2 of the position-specific parts, (1 - r) s^2 d_in t m2 (with a
/// query bias, t m2 + k_var q_bias).
template <class T>
T position_score_var(const HeadParams<T>& h, const AttentionTerms<T>& a) {
  return a.pos_var * h.d_in * h.t() * a.second + a.pos_var * h.d_in * h.k_var * h.score_q_bias();
}

/// sigma^2: with rotary embeddings the keys' shared part joins the scores in
/// the share 1 - f_L of the pairs that turn, d_in t m2 common (1 - f_L).
template <class T>
T score_variance(const HeadParams<T>& h, const AttentionTerms<T>& a, const T& position_score) {
  const T keys = a.common * (1 - a.rotary_keep) * h.d_in;
  return position_score + keys * h.t() * a.second + keys * h.k_var * h.score_q_bias();
}

/// E[(S^2)_jj] for S the hidden covariance of the position-specific part:
/// pos_var^2 (1 + hidden_spread) plus (d_in - 1) times the squared covariance
/// of two hidden units (a positive corr_dim capped by Cauchy-Schwarz, a
/// negative one from centring the rows, corr_dim pos_var).
template <class T>
T position_cov_sq(const HeadParams<T>& h, const Moments<T>& in, const T& pos_var) {
  const T hidden_cov = clamp_abs(T(math::max_of(in.corr_dim, T(0 * in.var)) * in.var), pos_var) +
                       math::min_of(in.corr_dim, T(0 * in.var)) * pos_var;
  return pos_var * pos_var * (1 + hidden_spread_of(in)) + (h.d_in - 1) * hidden_cov * hidden_cov;
}

/// gamma^2 = t m2 E[(S^2)_jj], the squared shift of a value's mean under the
/// softmax weights (the tilt).
template <class T>
T tilt_variance(const HeadParams<T>& h, const AttentionTerms<T>& a) {
  return h.score_scale(a.second) * a.pos_cov_sq;
}

/// The shared part that rows of fixed norm lose to the weighting,
/// (1 - nu) rho (2 - rho) gamma^2, at most the shared part itself.
template <class T>
T shared_shift(const Moments<T>& in, const AttentionTerms<T>& a) {
  const T fixed_norm = 1 - math::min_of(norm_var_ratio_of(in), T(0 * in.var + 1));
  const T rho = math::min_of(math::clamp_nonnegative(a.corr_rows), T(0 * in.var + 1));
  return math::min_of(T(fixed_norm * rho * (2 - rho) * a.tilt_var), a.common);
}

/// c sigma^4: the relative fluctuation of |w_i|^2 (Wishart moments of
/// Wq Wk^T / sqrt(d_k)) plus (nu - 1)/d_in from the row's own norm.
template <class T>
T width_term(const HeadParams<T>& h, const Moments<T>& in, const T& score_var) {
  const T fluct = ((h.d_in + 1) * (h.d_in + h.d_k + 1) + h.d_in * h.d_k + 2) / (h.d_in * h.d_in * h.d_k);
  return (fluct + (norm_var_ratio_of(in) - 1) / h.d_in) * (score_var * score_var);
}

/// nu_pos = (2 rho + nu (1 - rho))/(1 + rho), the norm fluctuation of the
/// rows' position-specific part.
template <class T>
T pos_norm_var_ratio(const Moments<T>& in, const T& shared_fraction) {
  const T rho = math::min_of(math::clamp_nonnegative(shared_fraction), T(0 * shared_fraction + 1));
  return (2 * rho + norm_var_ratio_of(in) * (1 - rho)) / (1 + rho);
}

/// The excess kurtosis of one query's scores, 6 (nu_pos - 1)(1 + a)/(d_in + 1)
/// (kept finite: inf times a zero slope would be NaN).
template <class T>
T key_kurtosis(const HeadParams<T>& h, const Moments<T>& in, const T& pos_norm_var) {
  return clamp_abs(T(6 * (pos_norm_var - 1) * (1 + hidden_spread_of(in)) / (h.d_in + 1)),
                   T(0 * h.seq_len + std::numeric_limits<math::real_of<T>>::max()));
}

/// kappa = f''/f of f(x) = e^x G(x, L), by central differences of step 0.1
/// (taken at 0.1 below it): what the query-norm average multiplies c sigma^4 by.
template <class T>
T norm_curvature(const T& score_var, const T& L) {
  const T step = 0 * L + 0.1;
  const T centre = math::max_of(score_var, step);
  const T log_mid = softmax_log_concentration(centre, L);
  const T log_up = softmax_log_concentration(T(centre + step), L);
  const T log_down = softmax_log_concentration(T(centre - step), L);
  const T slope = 1 + (log_up - log_down) / (2 * step);
  const T curvature = (log_up - 2 * log_mid + log_down) / (step * step);
  return slope * slope + curvature;
}

/// What the softmax weights share: the tabulated factors at (sigma^2, L),
/// the keys' kurtosis, the query-norm curvature and e^{sigma^2}.
template <class T>
struct WeightInputs {
  SoftmaxFactors<T> tables;
  T kurtosis, curvature, exp_score;
  T one;  ///< 1 in every lane

  /// kurtosis times a kurtosis slope, bounded to [-1, 1].
  T exponent(const T& slope) const { return clamp_abs(T(kurtosis * slope), one); }
  /// G with the keys' kurtosis factor e^{kappa D_G}.
  T concentration() const {
    using std::exp;
    return tables.concentration * exp(exponent(tables.slope_g));
  }
};

/// F_var = e^{sigma^2 + kappa c sigma^4} G e^{kappa D_G}, within [1, L].
template <class T>
T variance_weight(const AttentionTerms<T>& a, const WeightInputs<T>& w, const T& L) {
  using std::exp;
  const T jensen_var = exp(a.score_var + w.curvature * a.width_term);
  require_finite_exp(jensen_var, T(a.score_var + w.curvature * a.width_term));
  return math::min_of(math::max_of(T(jensen_var * w.concentration()), w.one), L);
}

/// F_cov, the pair covariance of two queries' weights: the numerator
/// e^{rho sigma^2 + ...} with the pair curvature V and the kurtosis moving
/// the fourth cumulant, over 1 + (1/G - 1) share, within [0, F_var].
template <class T>
T pair_weight(const HeadParams<T>& h, const AttentionTerms<T>& a, const WeightInputs<T>& w,
              const T& position_score) {
  using std::exp;
  using std::expm1;
  const T cross = a.corr_queries * a.rotary_keep * position_score;
  const T score_corr = h.rotary.enabled() ? math::ratio_or(cross, a.score_var, 0) : a.corr_queries;
  const T rho2 = score_corr * score_corr;
  const T share = math::ratio_or(T(expm1(cross)), T(expm1(a.score_var)), 1);
  const T pair_limit = clamp_abs(T(w.kurtosis * (a.score_var * a.score_var) * 7 / 12), w.one);
  const T pair_kurtosis = pair_limit * (2 * (1 + score_corr) * (1 + score_corr) - 1) / 7;
  const T pair_concentration = w.tables.concentration * exp(w.exponent(w.tables.slope_g) - pair_limit);
  const T jensen_cross = exp(cross + pair_kurtosis +
                             (1 + rho2) / 2 * ((1 - rho2) * w.tables.pair_curvature + rho2 * w.curvature) *
                                 a.width_term);
  return math::min_of(math::max_of(T(jensen_cross / (1 + (1 / pair_concentration - 1) * share)), T(w.one - 1)),
                      a.weight_sq);
}

/// F_jac = F_var J e^{kappa D_J} / (G e^{kappa D_G}), the softmax Jacobian's
/// weight, within [0, F_var].
template <class T>
T jacobian_weight(const AttentionTerms<T>& a, const WeightInputs<T>& w) {
  using std::exp;
  const T zero = w.one - 1;
  return math::min_of(
      math::max_of(T(a.weight_sq * w.tables.jacobian * exp(w.exponent(w.tables.slope_j)) / w.concentration()), zero),
      a.weight_sq);
}

/// The tilt factors C and O: their deviations from the large-L limits (1, 0)
/// scaled like S2 by the query-norm and kurtosis factors.
template <class T>
void tilt_factors(AttentionTerms<T>& a, const WeightInputs<T>& w) {
  const T scaling = a.weight_sq / (w.exp_score * w.tables.concentration);
  a.tilt_cross = 1 - (1 - w.tables.tilt_cross) * scaling;
  a.tilt_own = w.tables.tilt_own * scaling;
}

/// Every intermediate moment of head `h` for input `in`, in the order of the
/// header's derivation.
template <class T>
AttentionTerms<T> attention_terms(const HeadParams<T>& h, const Moments<T>& in) {
  using std::exp;
  const T& L = h.seq_len;
  AttentionTerms<T> a = split_rows(in);
  query_bias_terms(h, a);
  a.rotary_keep = rotary_keep(h.rotary, L, h.d_k);
  const T position_score = position_score_var(h, a);
  a.score_var = score_variance(h, a, position_score);
  a.pos_cov_sq = position_cov_sq(h, in, a.pos_var);
  a.tilt_var = tilt_variance(h, a);
  a.shared_shift = shared_shift(in, a);
  WeightInputs<T> w;
  w.one = 0 * L + 1;
  w.exp_score = exp(a.score_var);
  require_finite_exp(w.exp_score, a.score_var);
  a.width_term = width_term(h, in, a.score_var);
  a.pos_norm_var = pos_norm_var_ratio(in, a.corr_rows);
  w.kurtosis = key_kurtosis(h, in, a.pos_norm_var);
  w.tables = softmax_factors(a.score_var, L);
  w.curvature = norm_curvature(a.score_var, L);
  a.weight_sq = variance_weight(a, w, L);
  a.weight_cross = pair_weight(h, a, w, position_score);
  a.weight_jacobian = jacobian_weight(a, w);
  tilt_factors(a, w);
  return a;
}

}  // namespace sigprop::detail
