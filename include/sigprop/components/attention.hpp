// sigprop/components/attention.hpp -- single-head scaled dot-product attention:
//   Q = X Wq, K = X Wk, V = X Wv   (d_in -> d_k, i.i.d. N(0, q_var), N(0, k_var), N(0, v_var)),
//   P = softmax_keys(Q K^T / sqrt(d_k))   (full, non-causal, over the L keys),
//   Y = dropout_p(P) V                    (inverted dropout on the probabilities).
//
// Reference: Kedia et al., "Transformers Get Stable" (ICML 2024), appendix B.8,
// corrected where the Monte Carlo twin (montecarlo/components/attention.hpp)
// contradicts it; docs/components/attention.md lists every correction with the
// measurement behind it.
//
// Derivation (B.8, with the same decomposition). Split each input row into a
// part shared by all positions and a position-specific part,
// x_k = c + delta_k, with E[c_j^2] = r s^2 + mu^2 ("common") and
// Var[delta_kj] = (1 - r) s^2 (pos_var). The shared part adds the same amount to
// every score of a query and cancels in the softmax, so for query i the
// scores are s_ik = w_i . delta_k with w_i = x_i Wq Wk^T / sqrt(d_k): given
// w_i they are i.i.d. N(0, sigma_i^2), and delta_kj is tilted by the weighting
// to mean gamma_ij = Cov(delta_kj, s_ik). With t = d_in q_var k_var (d_k
// cancels) and m2 = s^2 + mu^2:
//   score_var    sigma^2 = E[sigma_i^2] = (1 - r) s^2 d_in t m2   (B.8: (1-r) d_in^2 s^4 q k)
//   tilt_var     gamma^2 = E[gamma_ij^2] = t m2 ((1 - r)^2 s^4 + (d_in - 1) (r^d s^2)^2)
//   corr_queries rho     = Corr(w_i, w_m) = (r s^2 + mu^2)/m2   (Linear's r_out)
// The softmax enters only through two sums of squared weights,
//   F_var = L E[sum_k P_ik^2]        -> e^{sigma^2}      (L, d_in, d_k -> inf),
//   F_cov = L E[sum_k P_ik P_mk]     -> e^{rho sigma^2}  (two queries i != m),
// computed here with the fluctuation of the query norm to second order (the
// exact second cumulant of the Wishart quadratic form, fluctuation c below,
// whose part 1/d_in from the row's own norm becomes nu/d_in)
// and the finite number of keys exactly for one query:
//   F_var = e^{sigma^2 + c sigma^4} G(sigma^2, L),
//   G(a, n) = n^2 E[p_1^2] e^{-a} for p = softmax of n i.i.d. N(0, a) logits
//   (tabulated from the exact quadrature of softmax.hpp; the delta method
//   1/G = 1 + (e^a - 1)(2 e^a - 1)/n, used before, is 86 % low at a = 4,
//   L = 300), and for two queries through the delta method's ratio:
//   F_cov = e^{rho sigma^2 + (1 + rho^2) ((1 - rho^2) V + rho^2 kappa) c sigma^4 / 2}
//           / (1 + (1/G - 1) share),   share = (e^{rho sigma^2} - 1)/(e^{sigma^2} - 1),
//   with V(sigma^2, L) the exact curvature of L^2 E[P_ik P_mk] in the two
//   queries' score covariance at 0 (detail/softmax_concentration.hpp; the
//   form before had 1, F_cov 5 % high at sigma^2 = 2.56, L = 128, r = 0) and
//   kappa the curvature of F_var below.
// Then, for the output before V, O = dropout(P) X:
//   E[O^2]   = common - shift n^2 + gamma^2 C + F_var pos_var/L + nu_pos gamma^2 O
//              + p/(1 - p) (F_var m2/L + nu_pos gamma^2 O)
//   Cov_len  = common - shift n^2 + rho gamma^2 n^2 + F_cov (pos_var + rho gamma^2)/L
// with n = 1 - F_var/L, shift = (1 - nu) rho (2 - rho) gamma^2 the shared part
// that rows of fixed norm lose to the weighting (compute_terms),
// with the tilt factors C = E[1 - 5 S2 + 4 S3 + 6 S2^2 - 6 S4] and O = E[4 S2
// - 10 S3 + 6 S4] (S_m = sum_k P_ik^m; Stein's lemma, exact for Gaussian rows
// given the query: detail/softmax_concentration.hpp) and nu_pos below (1 for
// Gaussian rows, 0 for rows of fixed norm, whose own terms carry no tilt).
// The form used before, gamma^2 (1 - F_var/L)^2 + F_var (pos_var + gamma^2)/L,
// agrees to first order in S2 = F_var/L (its two errors, +3 S2 gamma^2 and
// -3 S2 gamma^2, cancel): at sigma^2 = 2.56, L = 128 it was 1.4 % high for
// Gaussian rows, 10.5 % for rows of fixed norm (now 0.5 %, 1.7 %;
// docs/components/attention.md).
// and Y = O Wv multiplies both by d_in v_var (Linear, B.2). mean 0, and r^d_out
// = 0: distinct value units use independent columns of Wv.
// Backward, value path dX = dropout(P)^T g Wv^T (B.8's backward), with the
// exact sum rules sum_k P_ik = 1 for the covariance:
//   Var     = d_k v_var g^2 (F_var/(L (1 - p)) + r_g (L - 1) F_cov / L)
//   Cov_len = d_k v_var g^2 ((1 - F_var/L)/(L - 1) + r_g (1 - F_cov/L))
// The paper's forms are the limit F_var = F_cov = 1 of the backward, and its
// forward has F_cov = 1, no rho gamma^2 term and the dropout factor on the
// position-specific part only. At q_var k_var = 0 (uniform attention) or r = 1
// every formula above is exact for any L.
// Backward, softmax path dX = dQ Wq^T + dK Wk^T with dS = P .* (dP - rowsum(P
// .* dP)), dP = (g V^T) .* mask, dQ = dS K / sqrt(d_k), dK = dS^T Q / sqrt(d_k)
// (not in B.8). To first order in the scores, dS_ik = P_ik (m_ik g_i . v_k -
// sum_l P_il m_il g_i . v_l): the shared part of V cancels except through the
// dropout mask, and sum_k dS_ik = 0 removes the shared part of K from dQ.
// With A = d_k v_var g^2 d_in t / L, the values seen by the Jacobian
// D = (pos_var + p common)/(1 - p) and the Jacobian weight
// F_jac = L E[sum_k P_ik^2 (1 - 2 P_ik + sum_l P_il^2)] (the centring of dS;
// given the query it is e^{sigma^2} J(sigma^2, L) exactly, J tabulated like G;
// its first-order form F_var (1 - (2 - F_var)/L) fails at large sigma^2):
//   Q path: keys contribute incoherently, plus a coherent part: the weighted
//   covariance of g_i . v_k and k_k over the keys is pos_var g_i Wv^T Wk (the
//   same value and key rows), independent of L (pos_cov_sq below):
//     Var_Q = A (F_jac pos_var D + L (1 - F_var/L)^2 pos_cov_sq / d_in)
//     Cov_Q = A r_g (F_cov pos_var^2 + L (1 - F_var/L)^2 pos_cov_sq / d_in)
//   K path: a sum over the queries of key k; the shared parts of g (r_g) and
//   of q (common) add coherently over the L - 1 other queries:
//     Var_K = A (F_jac (pos_var m2 + p (common pos_var + shared4)) / (1 - p)
//                + (L - 1) r_g F_cov pos_var common_eff)
//     Cov_K = -Var_K / (L - 1)   (exact: sum_k dK_k = sum_i (sum_k dS_ik) q_i = 0)
//   shared4 = E|c|^4 / d_in^2 = common^2 + 2 r s^2 (r s^2 + 2 mu^2)/d_in (one
//   input row c enters both q and v when all positions share it), and
//   common_eff = common + (pos_var^3 + 2 pos_var^2 common + 2 pos_var common^2)
//                t (1 + (d_in + 1)/d_k):
//   the two queries' weights on key k, to first order
//   (s_ik - sbar_i)(s_mk - sbar_m), correlate with q_i . q_m. With
//   x_i = c + u_i, s_ik - sbar_i = x_i . a, a = Wq kt_k / sqrt(d_k), and
//   G = Wq Wq^T, the excess of E[(x_i . a)(x_m . a) x_i G x_m^T] over the
//   product of the two means is pos_var^2 a^T G a (both tilts, u_i and u_m),
//   2 pos_var (c . a) a^T G c^T (one tilt against the shared part) and
//   2 common^2 a^T G a (the shared part's own fourth moment); each contracts
//   E[(Wq^T Wq)^2] = q_var^2 d_in (d_in + d_k + 1) I (Wishart), which is
//   t (1 + (d_in + 1)/d_k) per unit of the coherent q_i . q_m = q_var d_k |c|^2.
//   (The form before had t (2 + d_in/d_k) and no middle term: 7-11 % high in
//   the key gradient at r = 0, r_g = 0.9, score 0.25-0.5, d_in/d_k = 2;
//   docs/components/attention.md, "Key path".)
// The two paths, and Q with K, are uncorrelated to this order (measured: the
// cross terms are below 1 percent of the total), so backward() adds var and
// cov_len of the value and softmax paths. At r = 1 and p = 0 the softmax path
// vanishes exactly (dP_ik is constant along k); at r = 1, p > 0 only the
// dropout term of Var_K remains, exact (n = 1 - 1/L, shared4 = E|x|^4 / d_in^2).
//
// Keys of rows with a fixed norm (a LayerNorm's output, norm_var_ratio nu =
// 0) make one query's scores lighter-tailed than Gaussian, excess kurtosis
//   kappa = 6 (nu_pos - 1)(1 + a)/(d_in + 1),  nu_pos = (2 rho + nu (1 - rho))/(1 + rho)
// (1 + a: the removed norm fluctuation 2 tr(S^2)/tr(S)^2 of a hidden
// covariance of spread a)
// (a score is |w_i| |x_k| times a coordinate of a uniform direction in
// d_in - 1 dimensions, of kurtosis 3 (d_in - 1)/(d_in + 1); nu_pos is the
// norm fluctuation of the position-specific part, whose squared norm is
// 2 rho/(1 + rho) independent of the row's and (1 - rho)/(1 + rho) explained
// by it for Gaussian rows). G and J change by e^{kappa D_G}, e^{kappa D_J}
// (the kurtosis slopes of detail/softmax_concentration.hpp): F_var -2 % at
// sigma^2 = 1, -4.7 % at 2.56 for d_in = 128, L = 128, nu = 0, rho = 0.
// For two queries the scores' fourth cumulant moves the numerator of F_cov
// by kappa sigma^4 (2 (1 + rho)^2 - 1)/12 (-2.5 % at sigma^2 = 2.56, rho = 0,
// d_in = 128), G keeping the rest of its factor (rho = 1 gives F_var).
//
// Rotary position embeddings (RotaryEmbedding, Su et al. 2021): the head's
// coordinate pairs split into the share f_L that stays put over the L keys,
// where everything above holds, and the share 1 - f_L that turns, where the
// keys' shared part joins the scores and dQ like a position-specific part and
// the tilt and the queries' coherence average away (detail/rotary.hpp;
// compute_terms, forward_with, softmax_outputs_of; measured in
// docs/components/attention.md, "Rotary position embeddings").
//
// Assumptions: Gaussian input, zero-mean weights; the hidden correlation r^d
// belongs to the position-specific part (the convention of
// montecarlo::sample_activations) and is capped there by Cauchy-Schwarz; the
// approximations are good while the scores are moderate (sigma^2 up to ~2 at
// L = 300): beyond that attention concentrates on few keys and F_var
// falls below its expansion (docs/components/attention.md has the numbers).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <utility>

#include "sigprop/components/detail/rotary.hpp"
#include "sigprop/components/detail/softmax_concentration.hpp"
#include "sigprop/components/linear.hpp"
#include "sigprop/core/component.hpp"
#include "sigprop/core/memo.hpp"

namespace sigprop {

/// The moments of one attention layer's input that its closed forms use
/// (see the derivation at the top of this header).
template <class T>
struct AttentionTerms {
  T second;        ///< m2 = s^2 + mu^2, E[x^2]
  T pos_var;       ///< (1 - r) s^2, variance of the position-specific part
  T common;        ///< r s^2 + mu^2, second moment of the part shared by all positions
  T corr_queries;  ///< rho, correlation of two queries' score vectors w_i, w_m
  T score_var;     ///< sigma^2, variance of the position-specific part of a score
  T tilt_var;      ///< gamma^2, squared shift of a value's mean under the softmax weights
  T pos_cov_sq;    ///< (1 - r)^2 s^4 + (d_in - 1)(r^d s^2)^2, so gamma^2 = t m2 pos_cov_sq
  T weight_sq;     ///< F_var = L E[sum_k P_ik^2]
  T weight_cross;  ///< F_cov = L E[sum_k P_ik P_mk], i != m
  T weight_jacobian;  ///< F_jac = L E[sum_k P_ik^2 (1 - 2 P_ik + sum_l P_il^2)] (softmax Jacobian)
  T width_term;    ///< c sigma^4, the second-order query-norm fluctuation term
  T pos_norm_var;  ///< nu_pos, the norm fluctuation of a row's position-specific part (1: Gaussian)
  T tilt_cross;    ///< C, the weighted average's tilt E[sum_{k!=l} P_ik P_il ...] per gamma^2
  T tilt_own;      ///< O, the weight of longer rows E[sum_k P_ik^2 |x_k|^2] - E[S2] d per gamma^2 d
  T shared_shift;  ///< (1 - nu) rho (2 - rho) gamma^2, the shared part that rows of fixed norm lose to the weighting
  T rotary_keep;   ///< f_L, the share of rotary pairs that stay put over the L keys (1 without rotation)
};

/// The sums over the softmax weights that the closed forms use, per query i
/// (S2_i = E sum_k P_ik^2, J_i = E sum_k P_ik^2 (1 - 2 P_ik + sum_l P_il^2),
/// shrink_i = 1 - S2_i), per key k (sums over the queries that attend to it),
/// and over pairs of queries i != m (X_im = E sum_k P_ik P_mk). Full
/// attention over L keys: S2 = F_var/L, J = F_jac/L, X = F_cov/L for every
/// query, and key k collects S2, J and (L - 1) X. The causal mask changes only
/// these sums (CausalAttention, components/causal_attention.hpp).
template <class T>
struct SoftmaxSums {
  T sum_sq;        ///< S2 of the query (or its mean over the queries)
  T shrink_sq;     ///< shrink^2 (or its mean)
  T jacobian;      ///< J of the query (or its mean)
  T key_sq;        ///< sum over the queries of E P_ik^2 at key k (or its mean)
  T key_jacobian;  ///< sum over the queries of E P_ik^2 (1 - 2 P_ik + sum_l P_il^2) at key k
  T key_pairs;     ///< sum over query pairs i != m of E P_ik P_mk at key k (or its mean)
  T shrink_cross;  ///< mean over query pairs of shrink_i shrink_m
  T pair_cross;    ///< mean over query pairs of X_im
  /// key_pairs and pair_cross with each pair weighted by the centring of the
  /// softmax Jacobian that the pair shares: dS_ik = P_ik g_i . (v_k - vbar_i),
  /// and for two queries E[(v_k - vbar_i) . (v_k - vbar_m)] is pos_var times
  /// shrink of the query with fewer keys. Full attention: ~1, not applied.
  T key_pairs_centred;
  T pair_cross_centred;
  /// The tilt factors C and O of the query (or their means): E|sum_k P_ik
  /// x_k|^2 per unit is common + S2 pos_var + gamma^2 (C + nu_pos O)
  /// (detail/softmax_concentration.hpp, "Tilt factors").
  T tilt_cross;
  T tilt_own;
  /// With rotary embeddings, f_n of the query's n keys (or its mean): the
  /// share of the head's coordinate pairs that keep the tilt and the query
  /// correlation (detail/rotary.hpp; 1 without rotation).
  T rotary_keep;
};

/// Moments of the gradients at one head's projection outputs (Attention::projection_grads).
template <class T>
struct ProjectionGrads {
  GradMoments<T> query, key, value;
};

/// E||dLoss/dW||_F^2 of one head's key, value and query projections over
/// one sequence (Attention::weight_grad_sq).
template <class T>
struct HeadWeightGrads {
  T key, value, query;
};

/// Which gradient paths backward() includes: both (the real gradient), or
/// the value path alone, as in the paper's B.8 (kept to measure what the
/// softmax path adds, e.g. in whole-model comparisons).
enum class AttentionGradient { all_paths, value_path_only };

template <class T = double>
class Attention : public Component<Attention<T>, T> {
 public:
  static constexpr const char* name = "sigprop::Attention";
  static constexpr bool exact_forms = false;

  /// Widths d_in, d_k, sequence length seq_len (>= 2), the per-entry
  /// variances of Wq, Wk, Wv, the dropout probability p on the attention
  /// probabilities, the gradient paths backward() includes, and rotary
  /// position embeddings on the queries and keys (none by default).
  Attention(T d_in, T d_k, T seq_len, T q_var, T k_var, T v_var, T p = 0,
            AttentionGradient gradient = AttentionGradient::all_paths, RotaryEmbedding rotary = {})
      : d_in_(d_in), d_k_(d_k), seq_len_(seq_len), q_var_(q_var), k_var_(k_var), v_var_(v_var),
        p_(p), gradient_(gradient), rotary_(rotary) {
    require_width(name, "d_in", d_in_);
    require_width(name, "d_k", d_k_);
    require_width(name, "seq_len", seq_len_, 2);
    require_variance(name, "q_var", q_var_);
    require_variance(name, "k_var", k_var_);
    require_variance(name, "v_var", v_var_);
    require_probability(name, "p", p_);
    detail::require_rotary(name, rotary_, d_k_);
  }

  const T& d_in() const { return d_in_; }
  const T& d_k() const { return d_k_; }
  const T& seq_len() const { return seq_len_; }
  const T& q_var() const { return q_var_; }
  const T& k_var() const { return k_var_; }
  const T& v_var() const { return v_var_; }
  const T& p() const { return p_; }
  AttentionGradient gradient() const { return gradient_; }
  const RotaryEmbedding& rotary() const { return rotary_; }

  /// The intermediate moments for input `in` (validated like forward()).
  AttentionTerms<T> terms(const Moments<T>& in) const {
    require_moments(name, in);
    return terms_of(in);
  }

  /// Validity measures (core/domain.hpp): the score variance, the weight
  /// E[sum_k P_ik^2] = F_var / L of the keys attended, and c sigma^4.
  Domain<T> domain_impl(const Moments<T>& in) const { return domain_with(terms_of(in)); }

  Moments<T> forward_impl(const Moments<T>& in) const { return forward_from_terms(in, terms_of(in)); }

  /// The record of a forward pass (core/record.hpp): the input and its
  /// terms, which the backward map and the validity measures reuse (a
  /// trace's backward pass comes long after the memo's entry is gone).
  struct Record {
    Moments<T> in;
    AttentionTerms<T> terms;
  };

  /// The output for a validated `in`, as forward_trusted() gives it, and the record.
  std::pair<Moments<T>, Record> record(const Moments<T>& in) const {
    Record r{in, terms_of(in)};
    return {this->checked(name, forward_from_terms(in, r.terms)), r};
  }

  GradMoments<T> backward_recorded_impl(const Record& r, const GradMoments<T>& g) const {
    return backward_with(r.in, r.terms, softmax_sums(r.terms), g);
  }

  Domain<T> domain_recorded(const Record& r) const { return domain_with(r.terms); }

 private:
  Domain<T> domain_with(const AttentionTerms<T>& a) const {
    return {a.score_var, a.weight_sq / seq_len_, a.width_term};
  }

  Moments<T> forward_from_terms(const Moments<T>& in, const AttentionTerms<T>& a) const {
    const SoftmaxSums<T> s = softmax_sums(a);
    Moments<T> out = forward_with(a, s);
    out.norm_var_ratio = norm_var_ratio_with(in, a, s, T(0 * in.var + 1));  // one head
    out.hidden_spread = hidden_spread_with(in, T(0 * in.var + 1));
    out.linear_share = linear_share_with(in, a, s, out);
    return out;
  }

 public:

  /// The share of the output's position-specific variance that is linear in
  /// the input's own row within one sequence, times the input's own
  /// linear_share (core/hidden_spread.hpp). By Stein's lemma the linear
  /// coefficient of z_i = sum_k P_ik x_k in delta_i is E[dz_i/d delta_i] =
  /// M E[sum_k P_ik (delta_k - z_i)(delta_k - z_i)^T] (M = Wq Wk^T/sqrt(d_k),
  /// the query path; the weight P_ii ~ 1/L of the row itself neglected).
  /// Over many sequences that is M S (1 - E[S2]), of variance (1 - rho)
  /// gamma^2 (1 - S2)^2 per unit: the tilt moving with the query's
  /// position-specific part. Within one sequence S is the sequence's own key
  /// covariance S^, whose Wishart fluctuation E[S^ A S^] = S A S + tr(A S)
  /// S/L adds t m2 pos_var^2 (d_in + 1)/L (the scores' first-order mixing,
  /// as large as the tilt at d_in = L; measured 0.525 against 0.495 in the
  /// first attention branch of model_validation --detail 9, 0.246 without it).
  /// `out` is forward_with(a, s).
  T linear_share_with(const Moments<T>& in, const AttentionTerms<T>& a, const SoftmaxSums<T>& s,
                      const Moments<T>& out) const {
    const T key_sampling = d_in_ * q_var_ * k_var_ * a.second * a.pos_var * a.pos_var * (d_in_ + 1) / seq_len_;
    const T tilt = d_in_ * v_var_ * (1 - a.corr_queries) * (a.tilt_var * s.rotary_keep + key_sampling) * s.shrink_sq;
    const T share = math::ratio_or(tilt, T(out.var * (1 - out.corr_len)), 0);
    return linear_share_of(in) * math::min_of(math::clamp_nonnegative(share), T(0 * share + 1));
  }

  /// The output's hidden_spread (core/hidden_spread.hpp) for `heads` heads
  /// concatenated (MultiHead), validated like forward().
  T hidden_spread_of_heads(const Moments<T>& in, const T& heads) const {
    require_moments(name, in);
    return hidden_spread_with(in, heads);
  }

  /// The weighted average z_i = sum_k P_ik x_k mixes the rows' position-
  /// specific parts with weights that do not depend on their direction, so
  /// its hidden covariance keeps the input's shape (the tilt, of covariance
  /// S^2, is neglected); Wv (d_in -> heads d_k) is Linear's map.
  T hidden_spread_with(const Moments<T>& in, const T& heads) const {
    return spread::linear_map(hidden_spread_of(in), d_in_, T(heads * d_k_));
  }

  /// The output's norm_var_ratio (core/moments.hpp) for `heads` heads
  /// concatenated (MultiHead), validated like forward().
  T norm_var_ratio_of_heads(const Moments<T>& in, const T& heads) const {
    require_moments(name, in);
    const AttentionTerms<T> a = terms_of(in);
    return norm_var_ratio_with(in, a, softmax_sums(a), heads);
  }

  /// The output's norm_var_ratio over `heads` heads of width d_k. Each
  /// head's output is z_i Wv with z_i = sum_k P_ik x_k and Wv independent
  /// of z, so Linear's rule applies to z (d_in -> heads d_k: the heads are
  /// taken to share z's norm, exact as the scores go to 0, where every head
  /// averages the same keys alike). Per unit of z, with A = r s^2 the part
  /// shared by all positions, M = mu^2 and E = m - A - M the rest of
  /// m = E|z|^2/d_in (the weighted position-specific part, tilt and dropout):
  ///   Var|z|^2 / (2 d_in) = f A^2 + E^2 + 2 A E + 2 M (A + E),  nu_z = that / m^2,
  /// the sum of a Gaussian-like shared vector, a weighted average of L
  /// position-specific vectors, their cross term and the mean's cross
  /// terms. The shared vector's norm fluctuates like the input's rows,
  /// f = nu_in, unless the rows are normalized (nu_in = 0, a LayerNorm
  /// output): then it is divided by the norm of the row it belongs to and
  /// f = (1 - r)^2 (1 - S2)^2 (S2 = E sum_k P_ik^2); linear in between.
  /// Not modelled: the query-to-query fluctuation of S2 (relative variance
  /// O(e^{4 sigma^2}/L)). Checked by tests/test_vector_moments.cpp
  /// (docs/components/attention.md, "Norm fluctuation of the output").
  T norm_var_ratio_with(const Moments<T>& in, const AttentionTerms<T>& a, const SoftmaxSums<T>& s,
                        const T& heads) const {
    const T m = weighted_second(a, s);
    const T shared = in.corr_len * in.var, fixed = in.mean * in.mean;
    const T own = math::clamp_nonnegative(T(m - shared - fixed));
    const T nu_in = norm_var_ratio_of(in), rest = 1 - in.corr_len, spread = rest * (1 - s.sum_sq);
    const T f = (1 - math::min_of(nu_in, T(0 * nu_in + 1))) * spread * spread + nu_in;
    const T var_half = f * shared * shared + own * own + 2 * shared * own + 2 * fixed * (shared + own);
    const T nu_z = math::ratio_or(var_half, T(m * m), 1);
    return Linear<T>::norm_var_ratio_map(nu_z, d_in_, T(heads * d_k_));
  }

  /// The softmax sums of full attention over the L keys (SoftmaxSums).
  SoftmaxSums<T> softmax_sums(const AttentionTerms<T>& a) const {
    const T& L = seq_len_;
    const T sum_sq = a.weight_sq / L, shrink = 1 - sum_sq, jacobian = a.weight_jacobian / L;
    const T pair_cross = a.weight_cross / L;
    return {sum_sq,          shrink * shrink, jacobian,   sum_sq,       jacobian,      (L - 1) * pair_cross,
            shrink * shrink, pair_cross,      (L - 1) * pair_cross, pair_cross, a.tilt_cross, a.tilt_own,
            a.rotary_keep};
  }

  /// The output moments for the intermediate moments `a` and softmax sums
  /// `s` (forward() is forward_with(terms(in), softmax_sums(terms(in))) with
  /// the norm_var_ratio_with of its input):
  /// E[O_i^2] and the mean over query pairs of E[O_i O_m] of the header,
  /// with gamma_ij (1 - F_var/L) = gamma_ij shrink_i.
  Moments<T> forward_with(const AttentionTerms<T>& a, const SoftmaxSums<T>& s) const {
    const T second = weighted_second(a, s);
    const T tilt_cross_queries = a.corr_queries * a.tilt_var * s.rotary_keep;  // rotary: the pairs that stay put
    const T cov = a.common - a.shared_shift * s.shrink_cross + tilt_cross_queries * s.shrink_cross +
                  s.pair_cross * (a.pos_var + tilt_cross_queries);
    Moments<T> out;
    out.mean = 0 * second;
    out.var = d_in_ * v_var_ * second;
    out.corr_len = math::ratio_or(cov, second, 1);
    out.corr_dim = 0 * second;
    return out;
  }

  /// The input gradient for terms `a` and softmax sums `s` (backward() is
  /// backward_with(in, terms(in), softmax_sums(terms(in)), g)).
  GradMoments<T> backward_with(const Moments<T>& in, const AttentionTerms<T>& a, const SoftmaxSums<T>& s,
                               const GradMoments<T>& g) const {
    const PathMoments value = value_path_of(s, g);
    if (gradient_ == AttentionGradient::value_path_only) return grad_of(value);
    const PathMoments softmax = softmax_path_of(a, s, in, g);
    return grad_of({value.var + softmax.var, value.cov + softmax.cov});
  }

  /// dLoss/dX = value path (through V) + softmax path (through Q and K); the
  /// two are uncorrelated to the order modelled, so variances and
  /// covariances add.
  GradMoments<T> backward_impl(const Moments<T>& in, const GradMoments<T>& g) const {
    const AttentionTerms<T> a = terms_of(in);
    return backward_with(in, a, softmax_sums(a), g);
  }

  /// The gradient through V alone, dX = dropout(P)^T g Wv^T (validated like backward()).
  GradMoments<T> value_path(const Moments<T>& in, const GradMoments<T>& g) const {
    require_moments(name, in);
    require_grad_moments(name, g);
    return checked_grad(grad_of(value_path_of(softmax_sums(terms_of(in)), g)));
  }

  /// The gradient through the softmax alone, dX = dQ Wq^T + dK Wk^T
  /// (validated like backward()).
  GradMoments<T> softmax_path(const Moments<T>& in, const GradMoments<T>& g) const {
    require_moments(name, in);
    require_grad_moments(name, g);
    const AttentionTerms<T> a = terms_of(in);
    return checked_grad(grad_of(softmax_path_of(a, softmax_sums(a), in, g)));
  }

  /// The gradients at the outputs of one head's projections, dLoss/dQ,
  /// dLoss/dK and dLoss/dV (Q = X Wq etc.; validated like backward()): what
  /// the weight gradients dWq = X^T dQ, ... are made of (weight_grad_sq).
  ProjectionGrads<T> projection_grads(const Moments<T>& in, const GradMoments<T>& g) const {
    require_moments(name, in);
    require_grad_moments(name, g);
    const AttentionTerms<T> a = terms_of(in);
    const SoftmaxSums<T> sums = softmax_sums(a);
    const ProjectionPaths s = softmax_outputs_of(a, sums, in, g);
    return {checked_grad(grad_of(s.query)), checked_grad(grad_of(s.key)),
            checked_grad(grad_of(value_output_of(sums, g)))};
  }

  /// E||dLoss/dW||_F^2 of this head's Wk, Wv and Wq over one sequence, for input
  /// `in` and gradient `g` at the head's output (validated like backward()).
  /// dWk = X^T dK and dWv = X^T dV pair X with gradients that contain X
  /// itself: dK_k = sum_i dS_ik q_i carries v_k = x_k Wv through dS, and
  /// dV_k = sum_i P_ik g_i carries k_k = x_k Wk through P. Besides Linear's
  /// independent-factor form (weight_grad_sq over the projection gradients),
  /// each has a coherent part, E[x_k^T u_k] = (1 - r) s^2 I contracted with
  /// the other projection (first order in the scores, softmax rows summing to 1):
  ///   (1 - r)^2 s^4 d_in^2 d_k s_q^2 s_{v|k}^2 Var[g] [L m2 + L (L - 1) r_g (r s^2 + mu^2)].
  /// Against a single-head simulation with the gradient independent of the
  /// input (tests/test_measures.cpp, docs/schemes.md) both are within 5 % for
  /// r > 0; the key's is 10-18 % high for i.i.d. inputs with r_g >= 0.5.
  ///
  /// dWq = X^T dQ with dQ_i = sum_k dS_ik k_k / sqrt(d_k): x_i enters dQ_i only
  /// through P_ik(q_i), whose first-order term gives a coherent part of
  /// relative size sigma^2/d_k (negligible), so Linear's form carries Wq,
  /// plus one term at small r: to first order dQ_i = q_i Wk^T M(g_i) Wk / d_k
  /// with M(g) = (1/L) sum_k (u_k . Wv g^T) u_k^T x_k, the keys' and values'
  /// sample third moment, shared by all queries. It has mean 0 but
  /// E||M||^2 = pos_var^2 |Wv g^T|^2 d_in^2 m2 / L, and the query pairs i != m
  /// with correlated gradients pair it with (x_i . x_m)(x_i . x_m)-type terms,
  ///   (L - 1) r_g Var[g] q_var k_var^2 v_var d_in^4 d_k pos_var^2 m2
  ///     (spread pos_var^2 + 2 pos_var (r s^2 + mu^2)),
  /// which is L r_g times 1/L: the same order as the diagonal for i.i.d.
  /// inputs (without it Wq is 13-15 % low at r = 0, r_g >= 0.5, scores 1-2).
  /// Measured (tests/test_measures.cpp, docs/schemes.md): within 4 % at
  /// r > 0 and small r_g; at r_g = 0.9 and r in (0, 0.5] up to 12 % high,
  /// which is the query gradient's length covariance (projection_grads) over-
  /// predicted by 3 % at score 0.5, 5 % at 1, 12 % at 2 and 35-48 % at 4.
  ///
  /// The coherent part is quadratic in the position-specific part u of the
  /// input: it contracts tr(Sigma^2), Sigma = E[u^T u] for the given weights,
  /// which the isotropic Sigma = (1 - r) s^2 I makes ((1 - r) s^2)^2 d_in.
  /// `spread` = d_in tr(Sigma^2) / tr(Sigma)^2, in [1, d_in] (1 when
  /// isotropic), multiplies it: an input that has passed through random
  /// weight matrices is anisotropic (one Gaussian linear map d -> d gives
  /// spread 2 + 1/d), which is what the other overload cannot see.
  HeadWeightGrads<T> weight_grad_sq(const Moments<T>& in, const GradMoments<T>& g, const T& spread) const {
    require_width(name, "spread", spread);
    for (std::size_t i = 0; i < lane_count(spread); ++i) {
      const double v = static_cast<double>(lane(spread, i)), d = static_cast<double>(lane(d_in_, i));
      if (v > d) detail::raise_domain(name, "spread", v, "[1, d_in = " + detail::format_number(d) + "]");
    }
    const ProjectionGrads<T> p = projection_grads(in, g);
    const AttentionTerms<T> a = terms_of(in);
    const T& L = seq_len_;
    const T sequence = L * a.second + L * (L - 1) * feasible_corr(g.corr_len) * a.common;
    const T coherent = spread * a.pos_var * a.pos_var * d_in_ * d_in_ * d_k_ * q_var_ * g.var * sequence;
    const T d2 = d_in_ * d_in_;
    const T shared_third = (L - 1) * feasible_corr(g.corr_len) * g.var * q_var_ * k_var_ * k_var_ * v_var_ * d2 * d2 *
                           d_k_ * a.pos_var * a.pos_var * a.second *
                           (spread * a.pos_var * a.pos_var + 2 * a.pos_var * a.common);
    return {sigprop::weight_grad_sq(d_in_, d_k_, L, in, p.key) + coherent * v_var_,
            sigprop::weight_grad_sq(d_in_, d_k_, L, in, p.value) + coherent * k_var_,
            sigprop::weight_grad_sq(d_in_, d_k_, L, in, p.query) + shared_third};
  }

  /// The same with the input's carried hidden spread (Moments::hidden_spread;
  /// spread = 1 + hidden_spread, at most d_in).
  HeadWeightGrads<T> weight_grad_sq(const Moments<T>& in, const GradMoments<T>& g) const {
    return weight_grad_sq(in, g, T(math::min_of(T(1 + hidden_spread_of(in)), d_in_)));
  }

  /// The paper's forms (B.8 as printed, SPEC.md), kept for comparison: they
  /// assume near-uniform attention and miss the corrections listed above.
  Moments<T> forward_paper(const Moments<T>& in) const {
    require_moments(name, in);
    using std::exp;
    const T& L = seq_len_;
    const T r = in.corr_len, s2 = in.var;
    const T t = d_in_ * q_var_ * k_var_;
    const T e = exp((1 - r) * d_in_ * t * s2 * s2);
    require_finite_exp(e, (1 - r) * d_in_ * t * s2 * s2);
    const T tilt = (1 - r) * (1 - r) * t * s2 * s2 * s2;
    const T second = ((L - 1) * tilt + e / (1 - p_) * (4 * tilt + (1 - r) * s2)) / L + r * s2;
    const T cov = r * s2 + (2 * tilt + (1 - r) * s2) / L;
    Moments<T> out;
    out.mean = 0 * L;
    out.var = d_in_ * v_var_ * second;
    out.corr_len = math::ratio_or(cov, second, 1);
    out.corr_dim = 0 * L;
    return this->checked(name, out);
  }

  GradMoments<T> backward_paper(const Moments<T>& in, const GradMoments<T>& g) const {
    require_moments(name, in);
    require_grad_moments(name, g);
    const T& L = seq_len_;
    const T scale = d_k_ * v_var_ * g.var;
    const T var = scale * (1 + (L - 1) * g.corr_len * (1 - p_)) / (L * (1 - p_));
    const T cov = scale * (1 + (L - 1) * g.corr_len) / L;
    return checked_grad({var, math::ratio_or(cov, var, 0)});
  }

 private:
  // Second moment and length covariance of one gradient path.
  struct PathMoments {
    T var, cov;
  };

  static GradMoments<T> grad_of(const PathMoments& m) {
    return {m.var, math::ratio_or(m.cov, m.var, 0)};
  }

  // The gradients at the projections' outputs of one head, dLoss/dQ,
  // dLoss/dK and dLoss/dV (Q = X Wq, ...); the input gradient is each one
  // taken back through its projection, dX = G W^T (Linear's backward).
  struct ProjectionPaths {
    PathMoments query, key, value;
  };

  PathMoments through(const PathMoments& m, const T& weight_var) const {
    return {d_k_ * weight_var * m.var, d_k_ * weight_var * m.cov};
  }

  // dLoss/dV = dropout(P)^T g: per key E|sum_i P_ik g_i|^2, and the mean
  // over key pairs from sum_k dV_k = sum_i (sum_k dropout(P)_ik) g_i (rows of
  // P sum to 1; the masks add p/(1 - p) S2_i).
  PathMoments value_output_of(const SoftmaxSums<T>& s, const GradMoments<T>& g) const {
    const T& L = seq_len_;
    const T r_g = feasible_corr(g.corr_len);
    // At r_g = -1/(L - 1) with near-uniform attention the sum cancels to 0
    // (key_pairs = (L - 1) key_sq) and rounding may leave it slightly negative.
    const T var = g.var * math::clamp_nonnegative(T(s.key_sq / (1 - p_) + r_g * s.key_pairs));
    const T cov = g.var * ((1 - s.sum_sq) / (L - 1) + r_g * (1 - s.key_pairs / (L - 1)));
    return {var, cov};
  }

  PathMoments value_path_of(const SoftmaxSums<T>& s, const GradMoments<T>& g) const {
    return through(value_output_of(s, g), v_var_);
  }

  // dLoss/dQ and dLoss/dK through the softmax Jacobian.
  ProjectionPaths softmax_outputs_of(const AttentionTerms<T>& a, const SoftmaxSums<T>& s, const Moments<T>& in,
                                     const GradMoments<T>& g) const {
    const T& L = seq_len_;
    const T t = d_in_ * q_var_ * k_var_;
    const T base = v_var_ * g.var * d_in_ * d_in_;  // times k_var for dQ, q_var for dK
    const T shared_var = in.corr_len * in.var;  // r s^2
    const T shared4 = a.common * a.common + 2 * shared_var * (shared_var + 2 * in.mean * in.mean) / d_in_;
    const T values = (a.pos_var + p_ * a.common) / (1 - p_);
    // Rotary embeddings: the shared query part's coherence (common) needs the
    // same direction in both queries, f; in the tilt terms each query's
    // rotation meets its own inverse (q_i^T R_(m-i) q_m against the scores'
    // R_(k-i), R_(k-m)) and they keep their size; the shared part's fourth
    // moment pairs two shared directions, f^2.
    const T& keep = s.rotary_keep;
    const T common_eff = a.common * keep + (a.pos_var * a.pos_var * a.pos_var + 2 * a.pos_var * a.pos_var * a.common +
                                            2 * a.pos_var * a.common * a.common * keep * keep) *
                                               t * (1 + (d_in_ + 1) / d_k_);
    const T r_g = feasible_corr(g.corr_len);
    const T coherent = a.pos_cov_sq / d_in_;
    // Rotary embeddings (detail/rotary.hpp): in the share 1 - f of the pairs
    // that turn over the keys, sum_k dS_ik = 0 no longer removes the keys'
    // shared part from dQ_i (it joins their position-specific variance), and
    // the coherent parts, which need the same direction at every key or in
    // every query, are left in the share f that stays put.
    const T keys = a.pos_var + a.common * (1 - keep);
    const PathMoments query{base * k_var_ * (s.jacobian * keys * values + s.shrink_sq * coherent * keep),
                            base * k_var_ * r_g * keep *
                                (s.pair_cross_centred * a.pos_var * a.pos_var + s.shrink_cross * coherent)};
    const T key_var =
        s.key_jacobian * (a.pos_var * a.second + p_ * (a.common * a.pos_var + shared4)) / (1 - p_) +
        r_g * s.key_pairs_centred * a.pos_var * common_eff;
    // A negative r_g makes the coherent key term negative; the variance it
    // belongs to cannot be (only reachable far outside the validated domain).
    const T key_var_bounded = base * q_var_ * math::clamp_nonnegative(key_var);
    return {query, {key_var_bounded, -key_var_bounded / (L - 1)}, {0 * L, 0 * L}};
  }

  PathMoments softmax_path_of(const AttentionTerms<T>& a, const SoftmaxSums<T>& s, const Moments<T>& in,
                              const GradMoments<T>& g) const {
    const ProjectionPaths o = softmax_outputs_of(a, s, in, g);
    const PathMoments q = through(o.query, q_var_), k = through(o.key, k_var_);
    return {q.var + k.var, q.cov + k.cov};
  }

  // E[z_i^2] per unit of z_i = sum_k dropout(P)_ik x_k, the head's output
  // E[O_i^2] over d_in v_var (the header's first form).
  // Stein's lemma (detail/softmax_concentration.hpp, "Tilt factors"): the
  // weighted rows' cross terms tilt the average by gamma^2 C, their own
  // terms add gamma^2 O where the rows' norms fluctuate (nu_pos); inverted
  // dropout multiplies the own terms' second moment by 1/(1 - p).
  T weighted_second(const AttentionTerms<T>& a, const SoftmaxSums<T>& s) const {
    const T own_tilt = a.pos_norm_var * a.tilt_var * s.tilt_own;
    return a.common - a.shared_shift * s.shrink_sq + a.tilt_var * s.rotary_keep * s.tilt_cross +
           s.sum_sq * a.pos_var + own_tilt +
           p_ / (1 - p_) * (s.sum_sq * a.second + own_tilt);
  }

  // A correlation shared by all L positions is at least -1/(L - 1) (the
  // compound-symmetric covariance must be positive semi-definite); a traced
  // r_g below it is lifted to it so that variances stay non-negative.
  T feasible_corr(const T& r) const { return math::max_of(r, T(-1 / (seq_len_ - 1))); }

  static GradMoments<T> checked_grad(GradMoments<T> out) {
    check_result(name, "grad_var", out.var);
    check_result(name, "grad_corr_len", out.corr_len);
    out.corr_len = math::clamp_correlation(out.corr_len);
    return out;
  }

  // Needed several times for one input (forward, the heads' norm
  // fluctuation, domain, the backward's replay of the forward pass when
  // there is no record): memoized per thread (core/memo.hpp).
  AttentionTerms<T> terms_of(const Moments<T>& in) const {
    return detail::memoized<Attention>(
        std::array<T, 14>{d_in_, d_k_, seq_len_, q_var_, k_var_, v_var_, p_, in.mean, in.var, in.corr_len,
                          in.corr_dim, norm_var_ratio_of(in), hidden_spread_of(in), T(0 * d_k_ + rotary_.base)},
        [&] { return compute_terms(in); });
  }

  AttentionTerms<T> compute_terms(const Moments<T>& in) const {
    using std::exp;
    using std::expm1;
    const T& L = seq_len_;
    const T t = d_in_ * q_var_ * k_var_;
    AttentionTerms<T> a;
    a.second = in.var + in.mean * in.mean;
    a.pos_var = (1 - in.corr_len) * in.var;
    a.common = in.corr_len * in.var + in.mean * in.mean;
    a.corr_queries = math::ratio_or(a.common, a.second, 1);
    // Rotary embeddings (detail/rotary.hpp): in the share 1 - f_L of the
    // coordinate pairs that turn over the keys, the keys' shared part adds a
    // term to the scores that varies from key to key like a position-specific
    // one, d_in t m2 common (1 - f_L).
    a.rotary_keep = detail::rotary_keep(rotary_, L, d_k_);
    const T pos_score = a.pos_var * d_in_ * t * a.second;
    a.score_var = pos_score + a.common * (1 - a.rotary_keep) * d_in_ * t * a.second;
    // Covariance of two hidden units within the position-specific part. A
    // positive corr_dim is the per-position offset of the paper's inputs
    // (appendix E: one value added to every unit of a position, all of it
    // position-specific), bounded by that part's variance (Cauchy-Schwarz).
    // A negative one comes from centering the rows (LayerNorm), which acts
    // on the shared and the position-specific parts alike (the separable
    // covariance of montecarlo::sample_activations_separable): corr_dim pos_var.
    const T hidden_cov = clamp_abs(T(math::max_of(in.corr_dim, T(0 * in.var)) * in.var), a.pos_var) +
                         math::min_of(in.corr_dim, T(0 * in.var)) * a.pos_var;
    // E[(S^2)_jj] for S the hidden covariance of the position-specific part:
    // pos_var^2 (1 + hidden_spread) when S is not isotropic (core/hidden_spread.hpp).
    a.pos_cov_sq = a.pos_var * a.pos_var * (1 + hidden_spread_of(in)) + (d_in_ - 1) * hidden_cov * hidden_cov;
    a.tilt_var = t * a.second * a.pos_cov_sq;
    // Rows of fixed norm: |x_k|^2 = |xbar|^2 + 2 xbar . delta_k + |delta_k|^2 is
    // constant, so the keys with the longer position-specific parts, whose
    // squared scores are larger, lie further from the shared part:
    // xbar . delta_k = -(|delta_k|^2 - E)/2. The second-order softmax weight
    // (s_ik - sbar_i)^2/2 then moves every query's average away from xbar,
    // E[xbar . (z_i - xbar)] = -shift/2 per unit with shift = (1 - nu) rho
    // (2 - rho) gamma^2, rho (2 - rho) the fraction of |delta_k|^2's
    // Gaussian covariance with the squared scores that the normalization
    // leaves (measured: 0.455, 0.785, 1.01 against 0.44, 0.75, 0.96 at rho =
    // 0.25, 0.5, 0.8, d_in = 128; 0 for Gaussian rows). It lowers the
    // output's shared part and its second moment alike, times the
    // self-normalization shrink^2 (forward_with, weighted_second; measured,
    // docs/components/attention.md, "Rows of fixed norm lose part of the
    // shared vector").
    const T fixed_norm = 1 - math::min_of(norm_var_ratio_of(in), T(0 * in.var + 1));
    const T rho = math::min_of(math::clamp_nonnegative(a.corr_queries), T(0 * in.var + 1));
    a.shared_shift = math::min_of(T(fixed_norm * rho * (2 - rho) * a.tilt_var), a.common);
    // Relative fluctuation of |w_i|^2: E tr((M M^T)^2) / (E tr(M M^T))^2 for
    // M = Wq Wk^T / sqrt(d_k), from the Wishart moments of Wq^T Wq and Wk^T Wk.
    const T fluct = ((d_in_ + 1) * (d_in_ + d_k_ + 1) + d_in_ * d_k_ + 2) / (d_in_ * d_in_ * d_k_);
    // e^{sigma^2} (B.8's e^{(1 - r) d_in t s2^2}) and the larger exponentials
    // built on it must be finite: each check reports its exponent.
    const T exp_score = exp(a.score_var);
    require_finite_exp(exp_score, a.score_var);
    const T s4 = a.score_var * a.score_var;
    a.width_term = (fluct + (norm_var_ratio_of(in) - 1) / d_in_) * s4;
    // Finite L, one query: the exact concentration factor of a softmax over L
    // i.i.d. N(0, sigma^2) scores, G = L^2 E[P^2] e^{-sigma^2}
    // (detail/softmax_concentration.hpp).
    // Keys of rows with a fixed norm: the scores' kurtosis moves G and J by
    // e^{kappa D} (header; the product bounded to [-1, 1], far beyond the
    // first order's validity, so that no ratio of the two turns NaN).
    a.pos_norm_var = pos_norm_var_ratio(in, a.corr_queries);
    // (Kept finite: a norm fluctuation near the largest double overflowed it
    // to inf, and inf times a zero slope at score variance 0 is NaN.)
    const T kurtosis = clamp_abs(T(6 * (a.pos_norm_var - 1) * (1 + hidden_spread_of(in)) / (d_in_ + 1)),
                                 T(0 * L + std::numeric_limits<math::real_of<T>>::max()));
    const T bound = 0 * L + 1;
    // Every tabulated factor at (sigma^2, L), the table stencil found once.
    const detail::SoftmaxFactors<T> tables = detail::softmax_factors(a.score_var, L);
    const auto key_exponent = [&](const T& slope) { return clamp_abs(T(kurtosis * slope), bound); };
    const T plain_concentration = tables.concentration;
    const T g_exponent = key_exponent(tables.slope_g);
    const T concentration = plain_concentration * exp(g_exponent);
    // The query-norm fluctuation (variance 2 c sigma^4 of sigma_i^2) averaged
    // over f(x) = e^x G(x, L) to second order: E f = f e^{kappa c sigma^4} with
    // kappa = f''/f = (1 + (log G)')^2 + (log G)'' (1 for G = 1, the large-L
    // limit; smaller where G falls with sigma^2). Derivatives by central
    // differences of step 0.1 in sigma^2 (taken at 0.1 below it).
    const T step = 0 * L + 0.1;
    const T centre = math::max_of(a.score_var, step);
    const T log_mid = detail::softmax_log_concentration(centre, L);
    const T log_up = detail::softmax_log_concentration(T(centre + step), L);
    const T log_down = detail::softmax_log_concentration(T(centre - step), L);
    const T slope = 1 + (log_up - log_down) / (2 * step);
    const T curvature = (log_up - 2 * log_mid + log_down) / (step * step);
    const T kappa = slope * slope + curvature;
    const T jensen_var = exp(a.score_var + kappa * a.width_term);
    require_finite_exp(jensen_var, a.score_var + kappa * a.width_term);
    // Two queries' scores of one key correlate through their shared part
    // (rho), with rotary embeddings only in the pairs that stay put (f_L);
    // score_corr is that correlation of the whole scores.
    const T cross = a.corr_queries * a.rotary_keep * pos_score;
    const T score_corr = rotary_.enabled() ? math::ratio_or(cross, a.score_var, 0) : a.corr_queries;
    // Two queries: their norms fluctuate with correlation rho^2 and the keys'
    // with both, so the curvature enters with weight rho^2 (kappa at rho = 1,
    // where F_cov = F_var; the pair curvature V below at rho = 0, where only
    // the shared keys couple them).
    const T rho2 = score_corr * score_corr;
    // Two queries: 1/H - 1 = (1/G - 1)(e^{rho sigma^2} - 1)/(e^{sigma^2} - 1),
    // the ratio of the delta method's two corrections (exact at rho = 0 and
    // rho = 1). At sigma^2 = 0, G = 1 and the share does not enter.
    const T cross_excess = expm1(cross), var_excess = expm1(a.score_var);
    const T share = math::ratio_or(cross_excess, var_excess, 1);
    // Keys of fixed norm: the numerator L^2 E[e^{s_i + s_m}]/(E e^{s_i} E e^{s_m})
    // moves by the scores' fourth cumulant, kappa sigma^4 (2 (1 + rho)^2 - 1)/12
    // (7/12 at rho = 1, the large-L limit of D_G); G keeps the rest of its
    // kurtosis factor, so that rho = 1 gives F_var again.
    // (bounded to [-1, 1] at rho = 1 like the factors of G and J).
    const T pair_limit = clamp_abs(T(kurtosis * s4 * 7 / 12), bound);
    const T pair_kurtosis = pair_limit * (2 * (1 + score_corr) * (1 + score_corr) - 1) / 7;
    const T pair_concentration = plain_concentration * exp(g_exponent - pair_limit);
    // The score covariance eps = w_i . w_m pos_var fluctuates (variance
    // (1 + rho^2) c sigma^4) around rho sigma^2, and F_cov given eps is
    // H(eps) = L^2 E[P_ik P_mk]: its average is H e^{(H''/H) var/2}. At rho = 0
    // H''/H is the exact pair curvature V(sigma^2, L) (the curvature of e^eps
    // alone, 1, made F_cov 5 % high at sigma^2 = 2.56, L = 128, where V =
    // 0.73); towards rho = 1 the curvature of F_var takes over as before.
    const T pair_curvature = tables.pair_curvature;
    const T jensen_cross =
        exp(cross + pair_kurtosis + (1 + rho2) / 2 * ((1 - rho2) * pair_curvature + rho2 * kappa) * a.width_term);
    // Bounds that hold for any weights: 1 <= L sum_k P_ik^2 <= L (uniform,
    // one-hot), and 0 <= sum_k P_ik P_mk <= (sum_k P_ik^2 + sum_k P_mk^2)/2.
    // The expansions above leave them only far outside the validated domain.
    const T one = 0 * L + 1, zero = 0 * L;
    a.weight_sq = math::min_of(math::max_of(T(jensen_var * concentration), one), L);
    a.weight_cross = math::min_of(
        math::max_of(T(jensen_cross / (1 + (1 / pair_concentration - 1) * share)), zero), a.weight_sq);
    // The softmax Jacobian's weight, exact for one query given its norm:
    // J = L^2 E[P^2 (1 - 2 P + sum P^2)] e^{-sigma^2} (tabulated like G), with
    // the same norm average. Its first-order form F_var (1 - (2 - F_var)/L),
    // used before, is 40 percent high at sigma^2 = 2.56, L = 128.
    a.weight_jacobian = math::min_of(
        math::max_of(T(a.weight_sq * tables.jacobian * exp(key_exponent(tables.slope_j)) / concentration),
                     zero),
        a.weight_sq);
    // The tilt factors for i.i.d. Gaussian scores of variance sigma^2, their
    // deviations from the large-L limits (C = 1, O = 0; both ~ S2) scaled
    // like S2 by the query-norm and key-kurtosis factors.
    const T scaling = a.weight_sq / (exp_score * plain_concentration);
    a.tilt_cross = 1 - (1 - tables.tilt_cross) * scaling;
    a.tilt_own = tables.tilt_own * scaling;
    return a;
  }

  // nu_pos, the norm fluctuation of the rows' position-specific part, from
  // the rows' nu and the shared fraction rho of their second moment (header).
  static T pos_norm_var_ratio(const Moments<T>& in, const T& shared_fraction) {
    const T rho = math::min_of(math::clamp_nonnegative(shared_fraction), T(0 * shared_fraction + 1));
    return (2 * rho + norm_var_ratio_of(in) * (1 - rho)) / (1 + rho);
  }

  // x clamped to [-bound, bound], lane-wise (bound >= 0).
  static T clamp_abs(const T& x, const T& bound) {
    if constexpr (is_scalar_v<T>) return std::clamp(x, -bound, bound);
    else return x.max(-bound).min(bound);
  }

  // An exponential of the score variance must be finite: report the exponent.
  static void require_finite_exp(const T& value, const T& exponent) {
    for (std::size_t i = 0; i < lane_count(value); ++i) {
      if (!std::isfinite(static_cast<double>(lane(value, i))))
        detail::raise_overflow(
            name, "the exponential of the score variance, exponent",
            static_cast<double>(lane(exponent, i)),
            "the score variance (1 - r) s2 d_in^2 q_var k_var (s2 + mu^2) is too large; "
            "attention is then one-hot and outside this closed form");
    }
  }

  T d_in_, d_k_, seq_len_, q_var_, k_var_, v_var_, p_;
  AttentionGradient gradient_;
  RotaryEmbedding rotary_;
};

}  // namespace sigprop
