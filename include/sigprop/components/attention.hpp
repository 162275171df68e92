// sigprop/components/attention.hpp -- single-head scaled dot-product attention:
//   Q = X Wq, K = X Wk, V = X Wv   (d_in -> d_k, i.i.d. N(0, q_var), N(0, k_var), N(0, v_var)),
//   P = softmax_keys(Q K^T / sqrt(d_k))   (over the keys the mask allows),
//   Y = dropout_p(P) V                    (inverted dropout on the probabilities).
//
// Reference: Kedia et al., "Transformers Get Stable" (ICML 2024), appendix B.8,
// corrected where the Monte Carlo twin (montecarlo/components/attention.hpp)
// contradicts it. docs/components/attention.md derives every formula below,
// lists the corrections with the measurements behind them, and describes the
// code ("Code structure").
//
// Rows split as x_k = c + delta_k, E[c_j^2] = common = r s^2 + mu^2,
// Var[delta_kj] = pos_var = (1 - r) s^2, m2 = s^2 + mu^2, t = d_in q_var k_var:
//   score_var    sigma^2 = (1 - r) s^2 d_in t m2   (B.8: (1-r) d_in^2 s^4 q k)
//   tilt_var     gamma^2 = t m2 ((1 - r)^2 s^4 (1 + a) + (d_in - 1) (r^d s^2)^2)
//   corr_queries rho     = common / m2
// The softmax enters through sums of its weights (detail::SoftmaxSums), for
// full attention over L keys
//   F_var = L E[sum_k P_ik^2]      = e^{sigma^2 + kappa c sigma^4} G(sigma^2, L) e^{kurt D_G}
//   F_cov = L E[sum_k P_ik P_mk]   = e^{rho sigma^2 + (1 + rho^2) ((1 - rho^2) V + rho^2 kappa) c sigma^4 / 2}
//                                    / (1 + (1/G - 1) share),  share = (e^{rho sigma^2} - 1)/(e^{sigma^2} - 1)
//   F_jac = L E[sum_k P_ik^2 (1 - 2 P_ik + sum_l P_il^2)] = F_var J/G
// (G, J, V and the tilt factors C, O tabulated from exact quadratures,
// detail/softmax_concentration.hpp; c sigma^4 the query-norm fluctuation,
// kappa its curvature; kurt = 6 (nu_pos - 1)(1 + a)/(d_in + 1) the keys'
// kurtosis for rows of fixed norm, nu_pos = (2 rho + nu (1 - rho))/(1 + rho)).
// Forward, O = dropout(P) X, with n = 1 - F_var/L:
//   E[O^2]  = common - shift n^2 + gamma^2 C + F_var pos_var/L + nu_pos gamma^2 O
//             + p/(1 - p) (F_var m2/L + nu_pos gamma^2 O)
//   Cov_len = common - shift n^2 + rho gamma^2 n^2 + F_cov (pos_var + rho gamma^2)/L
//   shift   = (1 - nu) rho (2 - rho) gamma^2,
// and Y = O Wv multiplies both by d_in v_var (Linear); mean 0, r^d_out = 0.
// Biases (with_biases): a key bias moves all scores of a query alike and has
// no effect; a query bias q_b shared by all queries makes t m2 -> t m2 + k_var q_b
// in sigma^2, gamma^2 and rho = (t common + k_var q_b)/(t m2 + k_var q_b);
// a value bias adds q_v (1 + p/(1 - p) F_var/L) to E[Y^2] and q_v to Cov_len.
// Backward, value path dX = dropout(P)^T g Wv^T:
//   Var     = d_k v_var g^2 (F_var/(L (1 - p)) + r_g (L - 1) F_cov / L)
//   Cov_len = d_k v_var g^2 ((1 - F_var/L)/(L - 1) + r_g (1 - F_cov/L))
// Softmax path dX = dQ Wq^T + dK Wk^T, with A = d_k v_var g^2 d_in t / L and
// D = (pos_var + p common)/(1 - p):
//   Var_Q = A (F_jac pos_var D + L n^2 pos_cov_sq / d_in)
//   Cov_Q = A r_g (F_cov e pos_var^2 + L n^2 pos_cov_sq / d_in)
//   Var_K = A (F_jac (pos_var m2 + p (common pos_var + shared4)) / (1 - p)
//              + (L - 1) r_g F_cov e pos_var common_eff),   Cov_K = -Var_K / (L - 1)
//   shared4 = common^2 + 2 r s^2 (r s^2 + 2 mu^2)/d_in,
//   common_eff = common + (pos_var^3 + 2 pos_var^2 common + 2 pos_var common^2) t (1 + (d_in + 1)/d_k),
//   e = 1 - 2 (S2 + rho (<P> - S2)) + F_cov/L   (the pair's centring, S2 = F_var/L,
//       <P> = (1 - F_jac/F_var + S2)/2 the weight of the key a query favours).
// backward() adds the paths and twice the value path's covariance with the
// key path (the query path's vanishes), by Stein's lemma over the keys:
//   Cov_VK  = d_k v_var g^2 sigma^2 (own + r_g pairs) / d_in,   Cov_len: -Cov_VK/(L - 1)
//   own     = J + (C - 1 + S2 + O)/3 + p/(1 - p) O/2,            J = F_jac/L
//   pairs   = (L - 1) F_cov/L (rho e - 2 (<P>_pair - S2)),        <P>_pair = (1 + F_cov/L - e)/2
// (full attention without rotary embeddings; not derived for the causal
// mask's per-key sums nor with rotary embeddings, left out there). Rotary
// embeddings keep the share f_L of the coordinate pairs where all of this
// holds (detail/rotary.hpp). Exact for any L at q_var k_var = 0 or r = 1;
// good while sigma^2 is moderate (up to ~2 at L = 300), which domain() reports.
//
// The code: BasicAttention<T, Mask> is the one head; the mask (FullMask here,
// detail::CausalMask in causal_attention.hpp) supplies the softmax sums.
// detail/attention_terms.hpp computes the intermediate moments step by step,
// detail/attention_maps.hpp the forward and backward maps from them.
#pragma once

#include <cstddef>
#include <utility>

#include "sigprop/components/detail/attention_maps.hpp"
#include "sigprop/components/linear.hpp"
#include "sigprop/core/component.hpp"
#include "sigprop/core/memo.hpp"

namespace sigprop {

using detail::AttentionTerms;
using detail::SoftmaxSums;

/// Moments of the gradients at one head's projection outputs (BasicAttention::projection_grads).
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

namespace detail {

/// No mask: every query attends to all L keys.
struct FullMask {
  static constexpr const char* name = "sigprop::Attention";
  /// backward() adds the value path's covariance with the key path (Cov_VK).
  static constexpr bool value_key_cross = true;

  template <class T>
  static void require_seq_len(const char* function, const T& seq_len) {
    require_width(function, "seq_len", seq_len, 2);
  }

  template <class T>
  static SoftmaxSums<T> sums(const HeadParams<T>& h, const Moments<T>&, const AttentionTerms<T>& a) {
    return full_sums(a, h.seq_len);
  }
};

}  // namespace detail

/// One attention head whose mask (detail::FullMask, detail::CausalMask)
/// supplies the softmax sums; Attention and CausalAttention name the two.
template <class T, class Mask>
class BasicAttention : public Component<BasicAttention<T, Mask>, T> {
 public:
  static constexpr const char* name = Mask::name;
  static constexpr bool exact_forms = false;
  static constexpr bool mixes_positions = true;

  /// Widths d_in, d_k, sequence length seq_len (>= 2), the per-entry
  /// variances of Wq, Wk, Wv, the dropout probability p on the attention
  /// probabilities, the gradient paths backward() includes, rotary
  /// position embeddings on the queries and keys (none by default) and the
  /// logit scale (1/sqrt(d_k) by default).
  BasicAttention(T d_in, T d_k, T seq_len, T q_var, T k_var, T v_var, T p = 0,
                 AttentionGradient gradient = AttentionGradient::all_paths, RotaryEmbedding rotary = {},
                 LogitScale logit_scale = LogitScale::inv_sqrt_dk)
      : h_{d_in, d_k, seq_len, q_var, k_var, v_var, p, rotary, T(0 * q_var), T(0 * q_var), T(0 * q_var), logit_scale},
        gradient_(gradient),
        spread_{T(0 * q_var + 1), T(0 * q_var + 1)} {
    require_width(name, "d_in", h_.d_in);
    require_width(name, "d_k", h_.d_k);
    Mask::require_seq_len(name, h_.seq_len);
    require_variance(name, "q_var", h_.q_var);
    require_variance(name, "k_var", h_.k_var);
    require_variance(name, "v_var", h_.v_var);
    require_probability(name, "p", h_.p);
    detail::require_rotary(name, h_.rotary, h_.d_k);
  }

  const T& d_in() const { return h_.d_in; }
  const T& d_k() const { return h_.d_k; }
  const T& seq_len() const { return h_.seq_len; }
  const T& q_var() const { return h_.q_var; }
  const T& k_var() const { return h_.k_var; }
  const T& v_var() const { return h_.v_var; }
  const T& p() const { return h_.p; }
  const T& q_bias() const { return h_.q_bias; }
  const T& k_bias() const { return h_.k_bias; }
  const T& v_bias() const { return h_.v_bias; }
  AttentionGradient gradient() const { return gradient_; }
  const RotaryEmbedding& rotary() const { return h_.rotary; }
  LogitScale logit_scale() const { return h_.logit_scale; }
  /// The softmax path's factors for keys apart by more than one correlation (1, 1 by default).
  const detail::KeySpread<T>& key_spread() const { return spread_; }

  Moments<T> forward_impl(const Moments<T>& in) const {
    const AttentionTerms<T> a = terms_of(in);
    return detail::attention_forward(h_, in, a, Mask::sums(h_, in, a));
  }

  GradMoments<T> backward_impl(const Moments<T>& in, const GradMoments<T>& g) const {
    const AttentionTerms<T> a = terms_of(in);
    return detail::attention_backward(h_, gradient_, in, a, Mask::sums(h_, in, a), g, spread_, Mask::value_key_cross);
  }

  /// Validity measures (core/domain.hpp): the score variance, the weight
  /// E[sum_k P_ik^2] = F_var / L of the keys attended, and c sigma^4.
  Domain<T> domain_impl(const Moments<T>& in) const { return domain_of(terms_of(in)); }

  /// The record of a forward pass (core/record.hpp): the input, its terms
  /// and softmax sums, which the backward map and the validity measures
  /// reuse (a trace's backward pass comes long after the memo's entry is gone).
  struct Record {
    Moments<T> in;
    AttentionTerms<T> terms;
    SoftmaxSums<T> sums;
  };

  /// The output for a validated `in`, as forward_trusted() gives it, and the record.
  std::pair<Moments<T>, Record> record(const Moments<T>& in) const {
    Record r{in, terms_of(in), {}};
    r.sums = Mask::sums(h_, in, r.terms);
    return {this->checked(name, detail::attention_forward(h_, in, r.terms, r.sums)), r};
  }

  GradMoments<T> backward_recorded_impl(const Record& r, const GradMoments<T>& g) const {
    return detail::attention_backward(h_, gradient_, r.in, r.terms, r.sums, g, spread_, Mask::value_key_cross);
  }

  Domain<T> domain_recorded(const Record& r) const { return domain_of(r.terms); }

  /// The output's norm_var_ratio and hidden_spread for `heads` heads
  /// concatenated (MultiHead; validated like forward()).
  T norm_var_ratio_of_heads(const Moments<T>& in, const T& heads) const {
    require_moments(name, in);
    const AttentionTerms<T> a = terms_of(in);
    return detail::norm_var_ratio_of_heads(h_, in, a, Mask::sums(h_, in, a), heads);
  }
  T hidden_spread_of_heads(const Moments<T>& in, const T& heads) const {
    require_moments(name, in);
    return detail::hidden_spread_of_heads(h_, in, heads);
  }

  /// The intermediate moments for input `in` (validated like forward()).
  AttentionTerms<T> terms(const Moments<T>& in) const {
    require_moments(name, in);
    return terms_of(in);
  }

  /// The gradient through V alone, dX = dropout(P)^T g Wv^T (validated like backward()).
  GradMoments<T> value_path(const Moments<T>& in, const GradMoments<T>& g) const {
    require_moments(name, in);
    require_grad_moments(name, g);
    const AttentionTerms<T> a = terms_of(in);
    return detail::checked_grad(name, detail::grad_of(detail::value_path(h_, Mask::sums(h_, in, a), g)));
  }

  /// The gradient through the softmax alone, dX = dQ Wq^T + dK Wk^T
  /// (validated like backward()).
  GradMoments<T> softmax_path(const Moments<T>& in, const GradMoments<T>& g) const {
    require_moments(name, in);
    require_grad_moments(name, g);
    const AttentionTerms<T> a = terms_of(in);
    return detail::checked_grad(name, detail::grad_of(detail::softmax_path(h_, a, Mask::sums(h_, in, a), in, g, spread_)));
  }

  /// The gradients at the outputs of the head's projections, dLoss/dQ,
  /// dLoss/dK and dLoss/dV (validated like backward()): what the weight
  /// gradients dWq = X^T dQ, ... are made of.
  ProjectionGrads<T> projection_grads(const Moments<T>& in, const GradMoments<T>& g) const {
    require_moments(name, in);
    require_grad_moments(name, g);
    const AttentionTerms<T> a = terms_of(in);
    const SoftmaxSums<T> s = Mask::sums(h_, in, a);
    const detail::SoftmaxOutputs<T> o = detail::softmax_outputs(h_, a, s, in, g, spread_);
    const T gain = h_.logit_gain();
    const detail::PathMoments<T> query{o.query.var * gain, o.query.cov * gain};
    return {detail::checked_grad(name, detail::grad_of(query)), detail::checked_grad(name, detail::grad_of(o.key)),
            detail::checked_grad(name, detail::grad_of(detail::value_output(h_, s, g)))};
  }

 protected:
  const detail::HeadParams<T>& params() const { return h_; }

  /// Biases of per-entry variances q_bias, k_bias, v_bias on Q, K and V,
  /// each drawn once and shared by all positions (Attention::with_biases).
  void set_biases(const T& q_bias, const T& k_bias, const T& v_bias) {
    require_variance(name, "q_bias", q_bias);
    require_variance(name, "k_bias", k_bias);
    require_variance(name, "v_bias", v_bias);
    h_.q_bias = q_bias;
    h_.k_bias = k_bias;
    h_.v_bias = v_bias;
  }

  /// The softmax path's query and key factors (detail::KeySpread), each finite and >= 0.
  void set_key_spread(const T& query, const T& key) {
    require_variance(name, "key_spread.query", query);
    require_variance(name, "key_spread.key", key);
    spread_ = {query, key};
  }

  // Needed several times for one input (forward, the heads' norm
  // fluctuation, domain, the backward's replay of the forward pass when
  // there is no record): memoized per thread (core/memo.hpp).
  AttentionTerms<T> terms_of(const Moments<T>& in) const {
    return detail::memoized<BasicAttention>(detail::head_key(h_, in), [&] { return detail::attention_terms(h_, in); });
  }

 private:
  Domain<T> domain_of(const AttentionTerms<T>& a) const {
    return {a.score_var, a.weight_sq / h_.seq_len, a.width_term};
  }

  detail::HeadParams<T> h_;
  AttentionGradient gradient_;
  detail::KeySpread<T> spread_;
};

/// Full (non-causal) attention: every query attends to all L keys.
template <class T = double>
class Attention : public BasicAttention<T, detail::FullMask> {
  using Base = BasicAttention<T, detail::FullMask>;

 public:
  using Base::Base;
  using Base::name;

  /// This head with biases of per-entry variances q_bias, k_bias, v_bias on
  /// Q, K and V (docs/components/attention.md, "Biases").
  Attention with_biases(const T& q_bias, const T& k_bias, const T& v_bias) const {
    Attention a = *this;
    a.set_biases(q_bias, k_bias, v_bias);
    return a;
  }

  /// The softmax sums for terms `a` and the output moments for terms and
  /// sums (forward() is their composition with the whole-vector moments).
  SoftmaxSums<T> softmax_sums(const AttentionTerms<T>& a) const { return detail::full_sums(a, this->seq_len()); }
  Moments<T> forward_with(const AttentionTerms<T>& a, const SoftmaxSums<T>& s) const {
    return detail::output_moments(this->params(), a, s);
  }

  /// E||dLoss/dW||_F^2 of this head's Wk, Wv and Wq over one sequence, for
  /// input `in` and gradient `g` at the head's output (validated like
  /// backward()): Linear's independent-factor form over the projection
  /// gradients plus the coherent parts of dWk and dWv, quadratic in the
  /// position-specific part, times `spread` = d_in tr(Sigma^2)/tr(Sigma)^2
  /// in [1, d_in], and the keys' and values' shared third moment in dWq
  /// (docs/components/attention.md, "Weight gradients"; docs/schemes.md).
  HeadWeightGrads<T> weight_grad_sq(const Moments<T>& in, const GradMoments<T>& g, const T& spread) const {
    require_width(name, "spread", spread);
    for (std::size_t i = 0; i < lane_count(spread); ++i) {
      const double v = static_cast<double>(lane(spread, i)), d = static_cast<double>(lane(this->d_in(), i));
      if (v > d) detail::raise_domain(name, "spread", v, "[1, d_in = " + detail::format_number(d) + "]");
    }
    const ProjectionGrads<T> p = this->projection_grads(in, g);
    const AttentionTerms<T> a = this->terms_of(in);
    const detail::HeadParams<T>& h = this->params();
    const T& L = h.seq_len;
    const T r_g = detail::feasible_corr(h, g.corr_len);
    const T sequence = L * a.second + L * (L - 1) * r_g * a.common;
    // With logits Q K^T/d_k: score_q_var() in place of q_var, and dWq a
    // factor logit_gain() (the scaled Wq's gradient; attention.hpp's constructor).
    const T coherent = spread * a.pos_var * a.pos_var * h.d_in * h.d_in * h.d_k * h.score_q_var() * g.var * sequence;
    const T d2 = h.d_in * h.d_in;
    const T shared_third = h.logit_gain() * (L - 1) * r_g * g.var * h.score_q_var() * h.k_var * h.k_var * h.v_var * d2 * d2 * h.d_k *
                           a.pos_var * a.pos_var * a.second *
                           (spread * a.pos_var * a.pos_var + 2 * a.pos_var * a.common);
    return {sigprop::weight_grad_sq(h.d_in, h.d_k, L, in, p.key) + coherent * h.v_var,
            sigprop::weight_grad_sq(h.d_in, h.d_k, L, in, p.value) + coherent * h.k_var,
            sigprop::weight_grad_sq(h.d_in, h.d_k, L, in, p.query) + shared_third};
  }

  /// The same with the input's carried hidden spread (Moments::hidden_spread;
  /// spread = 1 + hidden_spread, at most d_in).
  HeadWeightGrads<T> weight_grad_sq(const Moments<T>& in, const GradMoments<T>& g) const {
    return weight_grad_sq(in, g, T(math::min_of(T(1 + hidden_spread_of(in)), this->d_in())));
  }

  /// The paper's forms (B.8 as printed, SPEC.md), kept for comparison: they
  /// assume near-uniform attention and miss the corrections of the header.
  Moments<T> forward_paper(const Moments<T>& in) const {
    require_moments(name, in);
    using std::exp;
    const detail::HeadParams<T>& h = this->params();
    const T& L = h.seq_len;
    const T r = in.corr_len, s2 = in.var;
    const T t = h.t();
    const T e = exp((1 - r) * h.d_in * t * s2 * s2);
    detail::require_finite_exp(e, T((1 - r) * h.d_in * t * s2 * s2));
    const T tilt = (1 - r) * (1 - r) * t * s2 * s2 * s2;
    const T second = ((L - 1) * tilt + e / (1 - h.p) * (4 * tilt + (1 - r) * s2)) / L + r * s2;
    const T cov = r * s2 + (2 * tilt + (1 - r) * s2) / L;
    Moments<T> out;
    out.mean = 0 * L;
    out.var = h.d_in * h.v_var * second;
    out.corr_len = math::ratio_or(cov, second, 1);
    out.corr_dim = 0 * L;
    return this->checked(name, out);
  }

  GradMoments<T> backward_paper(const Moments<T>& in, const GradMoments<T>& g) const {
    require_moments(name, in);
    require_grad_moments(name, g);
    const detail::HeadParams<T>& h = this->params();
    const T& L = h.seq_len;
    const T scale = h.d_k * h.v_var * g.var;
    const T var = scale * (1 + (L - 1) * g.corr_len * (1 - h.p)) / (L * (1 - h.p));
    const T cov = scale * (1 + (L - 1) * g.corr_len) / L;
    return detail::checked_grad(name, GradMoments<T>{var, math::ratio_or(cov, var, 0)});
  }
};

}  // namespace sigprop
