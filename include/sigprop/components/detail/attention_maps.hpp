// sigprop/components/detail/attention_maps.hpp -- one attention head's
// output and input-gradient moments from its intermediate moments
// (attention_terms.hpp) and the sums over its softmax weights, which are
// all that a mask changes (SoftmaxSums: full attention here, the causal
// mask in attention_causal.hpp). The formulas are those of
// components/attention.hpp's header; docs/components/attention.md derives
// them.
#pragma once

#include <tuple>

#include "sigprop/components/detail/attention_terms.hpp"
#include "sigprop/components/linear.hpp"
#include "sigprop/core/hidden_spread.hpp"
#include "sigprop/core/validate.hpp"

namespace sigprop {

/// Which gradient paths backward() includes: both (the real gradient), or
/// the value path alone, as in the paper's B.8 (kept to measure what the
/// softmax path adds, e.g. in whole-model comparisons).
enum class AttentionGradient { all_paths, value_path_only };

namespace detail {

/// The sums over the softmax weights that the closed forms use, per query i
/// (S2_i = E sum_k P_ik^2, J_i = E sum_k P_ik^2 (1 - 2 P_ik + sum_l P_il^2),
/// shrink_i = 1 - S2_i), per key k (sums over the queries that attend to it),
/// and over pairs of queries i != m (X_im = E sum_k P_ik P_mk); each the
/// mean over the sequence where it varies.
template <class T>
struct SoftmaxSums {
  T sum_sq;        ///< S2 of the query
  T shrink_sq;     ///< shrink^2
  T jacobian;      ///< J of the query
  T key_sq;        ///< sum over the queries of E P_ik^2 at key k
  T key_jacobian;  ///< sum over the queries of E P_ik^2 (1 - 2 P_ik + sum_l P_il^2) at key k
  T key_pairs;     ///< sum over query pairs i != m of E P_ik P_mk at key k
  T shrink_cross;  ///< mean over query pairs of shrink_i shrink_m
  T pair_cross;    ///< mean over query pairs of X_im
  /// key_pairs and pair_cross with each pair weighted by the centring of the
  /// softmax Jacobian that the pair shares, 1 - <P>_i - <P>_m + X_im.
  T key_pairs_centred;
  T pair_cross_centred;
  /// The tilt factors C and O of the query: E|sum_k P_ik x_k|^2 per unit is
  /// common + S2 pos_var + gamma^2 (C + nu_pos O).
  T tilt_cross;
  T tilt_own;
  /// f_n of the query's n keys with rotary embeddings (1 without).
  T rotary_keep;

  /// Every field, for loops over the sums.
  auto fields() {
    return std::tie(sum_sq, shrink_sq, jacobian, key_sq, key_jacobian, key_pairs, shrink_cross, pair_cross,
                    key_pairs_centred, pair_cross_centred, tilt_cross, tilt_own, rotary_keep);
  }
};

/// Full attention over L keys: S2 = F_var/L, J = F_jac/L, X = F_cov/L for
/// every query, and key k collects S2, J and (L - 1) X.
template <class T>
SoftmaxSums<T> full_sums(const AttentionTerms<T>& a, const T& L) {
  const T sum_sq = a.weight_sq / L, shrink = 1 - sum_sq, jacobian = a.weight_jacobian / L;
  const T pair_cross = a.weight_cross / L;
  SoftmaxSums<T> s;
  s.sum_sq = s.key_sq = sum_sq;
  s.shrink_sq = s.shrink_cross = shrink * shrink;
  s.jacobian = s.key_jacobian = jacobian;
  // Each pair of queries shares the softmax Jacobian's centring
  // 1 - 2 <P>_pair + X: <P>_pair = E[P_ik^2 P_mk]/E[P_ik P_mk], the weight
  // query i puts on a key that query m favours, S2 for independent queries,
  // <P> = (1 - J/S2 + S2)/2 for the same query, linear in between in the
  // queries' correlation rho.
  const T favoured = (1 - a.weight_jacobian / a.weight_sq + sum_sq) / 2;
  const T pair_favoured = sum_sq + a.corr_queries * (favoured - sum_sq);
  const T centring = 1 - 2 * pair_favoured + pair_cross;
  s.key_pairs = (L - 1) * pair_cross;
  s.key_pairs_centred = s.key_pairs * centring;
  s.pair_cross = pair_cross;
  s.pair_cross_centred = pair_cross * centring;
  s.tilt_cross = a.tilt_cross;
  s.tilt_own = a.tilt_own;
  s.rotary_keep = a.rotary_keep;
  return s;
}

/// E[z_i^2] per unit of z_i = sum_k dropout(P)_ik x_k (the header's E[O^2]
/// over d_in v_var): the tilt gamma^2 C of the cross terms, gamma^2 O of the
/// own terms where the norms fluctuate, 1/(1 - p) on the own terms.
template <class T>
T weighted_second(const HeadParams<T>& h, const AttentionTerms<T>& a, const SoftmaxSums<T>& s) {
  const T own_tilt = a.pos_norm_var * a.tilt_var * s.tilt_own;
  return a.common - a.shared_shift * s.shrink_sq + a.tilt_var * s.rotary_keep * s.tilt_cross + s.sum_sq * a.pos_var +
         own_tilt + h.p / (1 - h.p) * (s.sum_sq * a.second + own_tilt);
}

/// The output's mean, variance and correlations (the header's E[O^2] and
/// Cov_len, times d_in v_var); the whole-vector moments are set apart.
template <class T>
Moments<T> output_moments(const HeadParams<T>& h, const AttentionTerms<T>& a, const SoftmaxSums<T>& s) {
  const T second = weighted_second(h, a, s);
  const T tilt_cross_queries = a.corr_queries * a.tilt_var * s.rotary_keep;  // rotary: the pairs that stay put
  const T cov = a.common - a.shared_shift * s.shrink_cross + tilt_cross_queries * s.shrink_cross +
                s.pair_cross * (a.pos_var + tilt_cross_queries);
  // A value bias b_v is shared by all keys: sum_k dropout(P)_ik b_v has
  // second moment q_v (1 + p/(1 - p) S2) and covariance q_v between queries.
  const T value_bias = h.v_bias * (1 + h.p / (1 - h.p) * s.sum_sq);
  Moments<T> out;
  out.mean = 0 * second;
  out.var = h.d_in * h.v_var * second + value_bias;
  const T corr = math::ratio_or(cov, second, 1);  // without the bias
  out.corr_len = corr + math::ratio_or(T(h.v_bias - corr * value_bias), out.var, 0);
  out.corr_dim = 0 * second;
  return out;
}

/// The output's norm_var_ratio over `heads` heads of width d_k: Linear's rule
/// applied to z = sum_k P_ik x_k, whose squared norm fluctuates as a shared
/// vector, a weighted average of position-specific ones and their cross
/// terms (docs/components/attention.md, "Norm fluctuation of the output").
template <class T>
T norm_var_ratio_of_heads(const HeadParams<T>& h, const Moments<T>& in, const AttentionTerms<T>& a,
                          const SoftmaxSums<T>& s, const T& heads) {
  const T m = weighted_second(h, a, s);
  const T shared = in.corr_len * in.var, fixed = in.mean * in.mean;
  const T own = math::clamp_nonnegative(T(m - shared - fixed));
  const T nu_in = norm_var_ratio_of(in), rest = 1 - in.corr_len, spread = rest * (1 - s.sum_sq);
  const T f = (1 - math::min_of(nu_in, T(0 * nu_in + 1))) * spread * spread + nu_in;
  const T var_half = f * shared * shared + own * own + 2 * shared * own + 2 * fixed * (shared + own);
  const T nu_z = math::ratio_or(var_half, T(m * m), 1);
  return Linear<T>::norm_var_ratio_map(nu_z, h.d_in, T(heads * h.d_k));
}

/// The output's hidden_spread over `heads` heads: the weighted average keeps
/// the input's shape, Wv (d_in -> heads d_k) is Linear's map.
template <class T>
T hidden_spread_of_heads(const HeadParams<T>& h, const Moments<T>& in, const T& heads) {
  return spread::linear_map(hidden_spread_of(in), h.d_in, T(heads * h.d_k));
}

/// The share of the output's position-specific variance linear in the input's
/// own row, times the input's linear_share: the tilt moving with the query's
/// position-specific part, (1 - rho) gamma^2 (1 - S2)^2, plus the Wishart
/// fluctuation of one sequence's key covariance, t m2 pos_var^2 (d_in + 1)/L
/// (docs/components/attention.md). `out` is output_moments(h, a, s).
template <class T>
T linear_share(const HeadParams<T>& h, const Moments<T>& in, const AttentionTerms<T>& a, const SoftmaxSums<T>& s,
               const Moments<T>& out) {
  const T key_sampling = h.score_scale(a.second) * a.pos_var * a.pos_var * (h.d_in + 1) / h.seq_len;
  const T tilt = h.d_in * h.v_var * (1 - a.corr_queries) * (a.tilt_var * s.rotary_keep + key_sampling) * s.shrink_sq;
  const T share = math::ratio_or(tilt, T(out.var * (1 - out.corr_len)), 0);
  return linear_share_of(in) * math::min_of(math::clamp_nonnegative(share), T(0 * share + 1));
}

/// The forward map: output_moments with the whole-vector moments of one head.
template <class T>
Moments<T> attention_forward(const HeadParams<T>& h, const Moments<T>& in, const AttentionTerms<T>& a,
                             const SoftmaxSums<T>& s) {
  Moments<T> out = output_moments(h, a, s);
  out.norm_var_ratio = norm_var_ratio_of_heads(h, in, a, s, T(0 * in.var + 1));  // one head
  out.hidden_spread = hidden_spread_of_heads(h, in, T(0 * in.var + 1));
  out.linear_share = linear_share(h, in, a, s, out);
  return out;
}

/// Second moment and length covariance of one gradient path.
template <class T>
struct PathMoments {
  T var, cov;
};

template <class T>
GradMoments<T> grad_of(const PathMoments<T>& m) {
  return {m.var, math::ratio_or(m.cov, m.var, 0)};
}

/// A gradient result checked like backward()'s (finite, correlation clamped).
template <class T>
GradMoments<T> checked_grad(const char* function, GradMoments<T> out) {
  check_result(function, "grad_var", out.var);
  check_result(function, "grad_corr_len", out.corr_len);
  out.corr_len = math::clamp_correlation(out.corr_len);
  return out;
}

/// A correlation shared by all L positions is at least -1/(L - 1); a traced
/// r_g below it is lifted to it so that variances stay non-negative.
template <class T>
T feasible_corr(const HeadParams<T>& h, const T& r) {
  return math::max_of(r, T(-1 / (h.seq_len - 1)));
}

/// A projection's output gradient taken back through it, dX = G W^T (Linear).
template <class T>
PathMoments<T> through(const HeadParams<T>& h, const PathMoments<T>& m, const T& weight_var) {
  return {h.d_k * weight_var * m.var, h.d_k * weight_var * m.cov};
}

/// dLoss/dV = dropout(P)^T g: per key E|sum_i P_ik g_i|^2, and the mean over
/// key pairs from sum_k dV_k = sum_i (sum_k dropout(P)_ik) g_i.
template <class T>
PathMoments<T> value_output(const HeadParams<T>& h, const SoftmaxSums<T>& s, const GradMoments<T>& g) {
  const T& L = h.seq_len;
  const T r_g = feasible_corr(h, g.corr_len);
  // At r_g = -1/(L - 1) with near-uniform attention the sum cancels to 0
  // and rounding may leave it slightly negative.
  const T var = g.var * math::clamp_nonnegative(T(s.key_sq / (1 - h.p) + r_g * s.key_pairs));
  const T cov = g.var * ((1 - s.sum_sq) / (L - 1) + r_g * (1 - s.key_pairs / (L - 1)));
  return {var, cov};
}

/// How far each query's keys are apart against one correlation r between
/// all pairs: the query path's and the key path's factors (1 for
/// exchangeable keys; CausalAttention::spread_of_pairs computes them from the
/// pairs of positions, docs/decoders.md, "The keys' spread").
template <class T>
struct KeySpread {
  T query, key;
};

/// The gradients at the outputs of the query and key projections through the
/// softmax Jacobian (the header's Var_Q, Cov_Q, Var_K, Cov_K); the query's
/// for Q scaled as score_q_var() has it (times logit_gain() for dLoss/dQ).
template <class T>
struct SoftmaxOutputs {
  PathMoments<T> query, key;
};

template <class T>
SoftmaxOutputs<T> softmax_outputs(const HeadParams<T>& h, const AttentionTerms<T>& a, const SoftmaxSums<T>& s,
                                  const Moments<T>& in, const GradMoments<T>& g, const KeySpread<T>& spread) {
  const T& L = h.seq_len;
  const T base = h.v_var * g.var * h.d_in * h.d_in;  // times k_var for dQ, q_var for dK
  const T shared_var = in.corr_len * in.var;          // r s^2
  const T shared4 = a.common * a.common + 2 * shared_var * (shared_var + 2 * in.mean * in.mean) / h.d_in;
  // Rotary embeddings: the coherent parts need the same direction at every
  // key or in every query, so they are left in the share f that stays put;
  // the keys' shared part joins their position-specific variance in 1 - f.
  const T& keep = s.rotary_keep;
  const T common_eff = a.common * keep + (a.pos_var * a.pos_var * a.pos_var + 2 * a.pos_var * a.pos_var * a.common +
                                          2 * a.pos_var * a.common * a.common * keep * keep) *
                                             h.t() * (1 + (h.d_in + 1) / h.d_k);
  const T r_g = feasible_corr(h, g.corr_len);
  const T coherent = a.pos_cov_sq / h.d_in;
  // keys (pos_var + common (1 - keep)) times values ((pos_var + p common)/(1 - p));
  // for spread keys a product of two position-specific variances takes the
  // query factor, a term with one of them the key factor.
  const T rotated = a.common * (1 - keep);
  const T keys_values = (spread.query * a.pos_var * a.pos_var +
                         spread.key * a.pos_var * (h.p * a.common + rotated) + rotated * h.p * a.common) /
                        (1 - h.p);
  const PathMoments<T> query{base * h.k_var * (s.jacobian * keys_values + s.shrink_sq * coherent * keep),
                             base * h.k_var * r_g * keep *
                                 (s.pair_cross_centred * a.pos_var * a.pos_var + s.shrink_cross * coherent)};
  const T key_var =
      s.key_jacobian * (spread.key * a.pos_var * (a.second + h.p * a.common) + h.p * shared4) / (1 - h.p) +
      r_g * s.key_pairs_centred * spread.key * a.pos_var * common_eff;
  // A query bias is a part of every query shared by all, of second moment
  // q_bias/(d_in q_var) in units of the input: it joins m2 and the queries' common part.
  const T query_bias = h.score_q_bias() / h.d_in;
  const T bias_var = s.key_jacobian * (spread.key * a.pos_var * (1 + h.p) + h.p * a.common) / (1 - h.p) +
                     r_g * s.key_pairs_centred * spread.key * a.pos_var;
  // A negative r_g makes the coherent key term negative; the variance it
  // belongs to cannot be (only reachable far outside the validated domain).
  const T key_var_bounded = base * h.score_q_var() * math::clamp_nonnegative(key_var) +
                            base * query_bias * math::clamp_nonnegative(bias_var);
  return {query, {key_var_bounded, -key_var_bounded / (L - 1)}};
}

/// The gradient through V alone, dX = dropout(P)^T g Wv^T.
template <class T>
PathMoments<T> value_path(const HeadParams<T>& h, const SoftmaxSums<T>& s, const GradMoments<T>& g) {
  return through(h, value_output(h, s, g), h.v_var);
}

/// The gradient through the softmax alone, dX = dQ Wq^T + dK Wk^T.
template <class T>
PathMoments<T> softmax_path(const HeadParams<T>& h, const AttentionTerms<T>& a, const SoftmaxSums<T>& s,
                            const Moments<T>& in, const GradMoments<T>& g, const KeySpread<T>& spread) {
  const SoftmaxOutputs<T> o = softmax_outputs(h, a, s, in, g, spread);
  const PathMoments<T> q = through(h, o.query, h.score_q_var()), k = through(h, o.key, h.k_var);
  return {q.var + k.var, q.cov + k.cov};
}

/// Cov(value path, key path) at one position per unit of the input, and
/// across two positions (the key path sums to 0 over the positions): the
/// header's Cov_VK (components/attention.hpp).
template <class T>
PathMoments<T> value_key_cross(const HeadParams<T>& h, const AttentionTerms<T>& a, const SoftmaxSums<T>& s,
                               const GradMoments<T>& g) {
  if (h.rotary.enabled()) return {0 * g.var, 0 * g.var};
  const T r_g = feasible_corr(h, g.corr_len);
  const T own = s.jacobian + (s.tilt_cross - 1 + s.sum_sq + s.tilt_own) / 3 + h.p / (1 - h.p) * s.tilt_own / 2;
  const T centring = math::ratio_or(s.key_pairs_centred, s.key_pairs, 1);
  const T pair_favoured = (1 + s.pair_cross - centring) / 2;
  const T pairs = s.key_pairs * (a.corr_queries * centring - 2 * (pair_favoured - s.sum_sq));
  const T cross = h.v_var * h.d_k * g.var * a.score_var * (own + r_g * pairs) / h.d_in;
  return {cross, -cross / (h.seq_len - 1)};
}

/// The backward map: the value path plus, unless `gradient` excludes it, the
/// softmax path at the keys' spread and, where the mask has it (`value_key`:
/// full attention), twice their covariance (the key path's, value_key_cross;
/// the query path's vanishes to the order modelled).
template <class T>
GradMoments<T> attention_backward(const HeadParams<T>& h, AttentionGradient gradient, const Moments<T>& in,
                                  const AttentionTerms<T>& a, const SoftmaxSums<T>& s, const GradMoments<T>& g,
                                  const KeySpread<T>& spread, bool value_key) {
  const PathMoments<T> value = value_path(h, s, g);
  if (gradient == AttentionGradient::value_path_only) return grad_of(value);
  const PathMoments<T> softmax = softmax_path(h, a, s, in, g, spread);
  const PathMoments<T> cross = value_key ? value_key_cross(h, a, s, g) : PathMoments<T>{0 * g.var, 0 * g.var};
  return grad_of(PathMoments<T>{value.var + softmax.var + 2 * cross.var, value.cov + softmax.cov + 2 * cross.cov});
}

}  // namespace detail

}  // namespace sigprop
