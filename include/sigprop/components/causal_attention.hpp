// sigprop/components/causal_attention.hpp -- single-head attention with the
// causal mask: query i (positions 1..L) attends to keys 1..i only,
//   P = softmax over k <= i of Q K^T / sqrt(d_k),   Y = dropout_p(P) V.
//
// References: Vaswani et al., "Attention Is All You Need" (2017), section
// 3.2.3 (the mask); Radford et al. (2019, GPT-2) and Touvron et al. (2023,
// Llama) use it in every layer. Not in the seed papers, which analyse
// encoders; the moments below extend attention.hpp.
//
// Derivation. Everything in attention.hpp holds per query with L replaced by
// its number of keys n = i: given the query, its scores over its i keys are
// i.i.d. as before, so its softmax sums are those of full attention over i
// keys, S2_i = F_var(i)/i, J_i = F_jac(i)/i, shrink_i = 1 - S2_i (n = 1:
// P = 1, S2 = 1, J = 0). Two queries i < m share the keys 1..i; query m puts
// about i/m of its weight on them, so X_im = E sum_{k<=i} P_ik P_mk =
// F_cov(i)/m (uniform attention: exactly 1/m). The formulas of attention.hpp
// are written in these sums (SoftmaxSums), and only the sums change:
//   per query   S2_i, shrink_i^2, J_i;
//   per key k   sum_{i>=k} S2_i/i, sum_{i>=k} J_i/i (each query spreads its sums
//               evenly over its keys), and the query pairs that both attend to k,
//               sum_{i != m >= k} X_ik... = 2 sum_{i>=k} F_cov(i) (H_L - H_i)/i
//               (H_n the harmonic number);
//   averages    the means over positions of these (the per-key means equal the
//               per-query ones), and over query pairs
//               mean shrink_i shrink_m = ((sum shrink)^2 - sum shrink^2)/(L (L - 1)),
//               mean X_im = 2 sum_i F_cov(i) (H_L - H_i)/(L (L - 1)).
// forward()/backward() give the sequence averages (the moment state of the
// whole sequence: mean variance, mean covariance over position pairs); the
// position_* functions give each position's variance (and, forward, its mean
// covariance with the other positions).
//
// Query pairs also share the centring of the softmax Jacobian, dS_ik =
// P_ik g_i . (v_k - vbar_i): for i < m, E[(v_k - vbar_i) . (v_k - vbar_m)] =
// pos_var (1 - <P>_i - <P>_m + X_im) with <P>_n = E sum P^3 / E sum P^2 =
// (1 - J_n/S2_n + S2_n)/2 (1/n when uniform: then 1 - 1/i exactly). The
// softmax path's pair sums carry it (SoftmaxSums::key_pairs_centred,
// pair_cross_centred); for full attention it is 1 - O(1/L) and not applied.
//
// Cost: one evaluation of attention.hpp's intermediate moments per key count
// n = 2..64, then on a geometric grid of ratio 2^(1/16) up to L (cubic
// interpolation in log n in between; 160 evaluations at L = 4096),
// memoized per input. Validated against a
// simulation with the real mask (montecarlo/components/causal_attention.hpp,
// tests/test_causal_attention.cpp, docs/components/causal_attention.md).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "sigprop/components/attention.hpp"
#include "sigprop/core/memo.hpp"

namespace sigprop {

namespace detail {

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

}  // namespace detail

template <class T = double>
class CausalAttention : public Component<CausalAttention<T>, T> {
  using Real = math::real_of<T>;

 public:
  static constexpr const char* name = "sigprop::CausalAttention";
  static constexpr bool exact_forms = false;

  /// As Attention, with `seq_len` an integer >= 2 (the positions 1..L).
  /// With rotary embeddings, query i's keys 1..i turn by the angles (k - i) theta_j.
  CausalAttention(T d_in, T d_k, T seq_len, T q_var, T k_var, T v_var, T p = 0,
                  AttentionGradient gradient = AttentionGradient::all_paths, RotaryEmbedding rotary = {})
      : full_(checked_head(d_in, d_k, seq_len, q_var, k_var, v_var, p, gradient, rotary)) {}

  /// The same head without the mask (every query attends to all L keys).
  const Attention<T>& full() const { return full_; }

  /// The same head with backward() through the paths `gradient`.
  CausalAttention with_gradient(AttentionGradient gradient) const {
    return CausalAttention(full_.d_in(), full_.d_k(), full_.seq_len(), full_.q_var(), full_.k_var(), full_.v_var(),
                           full_.p(), gradient, full_.rotary());
  }

  Domain<T> domain_impl(const Moments<T>& in) const { return full_.domain_trusted(in); }

  Moments<T> forward_impl(const Moments<T>& in) const {
    const AttentionTerms<T> a = full_.terms(in);
    const SoftmaxSums<T> s = averages(in);
    Moments<T> out = full_.forward_with(a, s);
    out.norm_var_ratio = full_.norm_var_ratio_with(in, a, s, T(0 * in.var + 1));  // one head
    out.hidden_spread = full_.hidden_spread_with(in, T(0 * in.var + 1));
    out.linear_share = full_.linear_share_with(in, a, s, out);
    return out;
  }

  /// The output's hidden_spread for `heads` heads concatenated
  /// (Attention::hidden_spread_with), validated like forward().
  T hidden_spread_of_heads(const Moments<T>& in, const T& heads) const { return full_.hidden_spread_of_heads(in, heads); }

  /// The output's norm_var_ratio for `heads` heads concatenated
  /// (Attention::norm_var_ratio_with with the softmax sums averaged over
  /// the positions), validated like forward().
  T norm_var_ratio_of_heads(const Moments<T>& in, const T& heads) const {
    return full_.norm_var_ratio_with(in, full_.terms(in), softmax_sums(in), heads);
  }

  GradMoments<T> backward_impl(const Moments<T>& in, const GradMoments<T>& g) const {
    return full_.backward_with(in, full_.terms(in), averages(in), g);
  }

  /// The softmax sums averaged over the sequence (SoftmaxSums; validated like forward()).
  SoftmaxSums<T> softmax_sums(const Moments<T>& in) const {
    require_moments(name, in);
    return averages(in);
  }

  /// Key counts up to which the per-query softmax factors are evaluated at
  /// every count, and the ratio of the geometric grid beyond (interpolated
  /// in between; docs/components/causal_attention.md has the accuracy).
  static constexpr std::size_t profile_every_count = 64;
  static constexpr double profile_ratio = 1.0442737824274138;  // 2^(1/16)

  /// The per-query softmax sums S2_n, J_n, F_cov(n), C_n, O_n for n = 1..L
  /// of lane 0: as forward() uses them (grid and interpolation), or, with
  /// `every_count`, evaluated at every key count (the reference; O(L)).
  detail::CausalProfile<Real> key_count_profile(const Moments<T>& in, bool every_count) const {
    require_moments(name, in);
    return lane_profile(in, 0, every_count);
  }

  /// Each position's output moments, i = 1..L (scalar T): its variance and
  /// its mean correlation with the other positions (validated like forward()).
  std::vector<Moments<T>> position_forward(const Moments<T>& in) const {
    require_moments(name, in);
    static_assert(is_scalar_v<T>, "sigprop::CausalAttention: per-position results are for scalar T");
    const auto& f = profile(in);
    const std::size_t L = f.sum_sq.size();
    const AttentionTerms<T> a = full_.terms(in);
    T shrink_sum = 0;
    for (std::size_t n = 0; n < L; ++n) shrink_sum += 1 - f.sum_sq[n];
    // prefix sums of F_cov(m) for the pairs m < i, suffix sums of F_cov(i)/m for m > i
    std::vector<Moments<T>> out;
    T prefix = 0;
    const std::vector<T> tail = harmonic_tail(L);
    for (std::size_t n = 0; n < L; ++n) {
      const T i = static_cast<T>(n + 1), shrink = 1 - f.sum_sq[n];
      SoftmaxSums<T> s = query_side(f, n);
      s.shrink_cross = shrink * (shrink_sum - shrink) / T(L - 1);
      s.pair_cross = (prefix / i + f.cross[n] * tail[n]) / T(L - 1);
      out.push_back(this->checked(name, full_.forward_with(a, s)));
      prefix += f.cross[n];
    }
    return out;
  }

  /// Each position's input-gradient variance, k = 1..L (scalar T; corr_len
  /// is the sequence average of backward(); validated like backward()).
  std::vector<GradMoments<T>> position_backward(const Moments<T>& in, const GradMoments<T>& g) const {
    require_grad_moments(name, g);
    const std::vector<T> uniform(static_cast<std::size_t>(lane(full_.seq_len(), 0)), g.var);
    return position_backward(in, uniform, g.corr_len);
  }

  /// The same for an upstream gradient whose variance differs by position:
  /// grad_var[i - 1] at query position i, correlation grad_corr between any
  /// two (so the covariance of positions i, m is grad_corr sqrt(g_i g_m)).
  /// Each query's terms carry its own g_i, each pair's sqrt(g_i g_m).
  std::vector<GradMoments<T>> position_backward(const Moments<T>& in, const std::vector<T>& grad_var,
                                                const T& grad_corr) const {
    require_moments(name, in);
    static_assert(is_scalar_v<T>, "sigprop::CausalAttention: per-position results are for scalar T");
    const auto& f = profile(in);
    const std::size_t L = f.sum_sq.size();
    if (grad_var.size() != L)
      throw domain_error(std::string(name) + ": grad_var.size() = " + std::to_string(grad_var.size()) +
                         " is outside the valid range {seq_len = " + std::to_string(L) + "}");
    for (const T& v : grad_var) require_variance(name, "grad_var", v);
    require_correlation(name, "grad_corr", grad_corr);
    const AttentionTerms<T> a = full_.terms(in);
    const SoftmaxSums<T> mean = averages(in);
    T mean_grad = 0;
    for (const T& v : grad_var) mean_grad += v / T(L);
    const T corr = full_.backward_with(in, a, mean, {mean_grad, grad_corr}).corr_len;
    // Suffix sums over the later queries m > i of sqrt(g_m)/m, <P>_m sqrt(g_m)/m
    // and sqrt(g_m)/m^2 (the pair sums of the profile, weighted).
    std::vector<T> root(L), later(L, T(0)), later_favoured(L, T(0)), later_sq(L, T(0));
    for (std::size_t n = 0; n < L; ++n) root[n] = std::sqrt(grad_var[n]);
    for (std::size_t n = L - 1; n-- > 0;) {
      const T m = static_cast<T>(n + 2);
      later[n] = later[n + 1] + root[n + 1] / m;
      later_favoured[n] = later_favoured[n + 1] + favoured(f, n + 1) * root[n + 1] / m;
      later_sq[n] = later_sq[n + 1] + root[n + 1] / (m * m);
    }
    std::vector<GradMoments<T>> out(L);
    T key_sq = 0, key_jacobian = 0, key_pairs = 0, key_pairs_centred = 0;
    for (std::size_t n = L; n-- > 0;) {
      const T i = static_cast<T>(n + 1), gi = grad_var[n];
      key_sq += f.sum_sq[n] * gi / i;
      key_jacobian += f.jacobian[n] * gi / i;
      key_pairs += 2 * f.cross[n] * root[n] * later[n] / i;
      key_pairs_centred += 2 * f.cross[n] * root[n] *
                           ((1 - favoured(f, n)) * later[n] - later_favoured[n] + f.cross[n] * later_sq[n]) / i;
      SoftmaxSums<T> s = query_side(f, n);
      s.sum_sq *= gi;
      s.shrink_sq *= gi;
      s.jacobian *= gi;
      s.key_sq = key_sq;
      s.key_jacobian = key_jacobian;
      s.key_pairs = key_pairs;
      s.key_pairs_centred = key_pairs_centred;
      s.shrink_cross = mean.shrink_cross * gi;
      s.pair_cross = mean.pair_cross * gi;
      s.pair_cross_centred = mean.pair_cross_centred * gi;
      out[n] = {full_.backward_with(in, a, s, {T(1), grad_corr}).var, corr};
    }
    return out;
  }

  /// The value path's input-gradient covariance between positions (scalar
  /// T): entry (k - 1, k' - 1) for k, k' = 1..L, per input feature, for an
  /// upstream gradient with covariance `upstream(i - 1, m - 1)` between the
  /// outputs at positions i and m (per output unit; independent of the input,
  /// any structure). With dX = dropout(P)^T g Wv^T and A = dropout(P),
  ///   out(k, k') = d_k v_var sum_{i >= k, m >= k'} upstream(i, m) E[A_ik A_mk']
  /// and, by exchangeability of a query's keys and sum_k P_ik = 1,
  ///   E[A_ik^2] = S2_i / (i (1 - p)),      E[A_ik A_ik'] = (1 - S2_i) / (i (i - 1)),
  ///   E[A_ik A_mk] = F_cov(i) / (i m),     E[A_ik A_mk'] = (1 - F_cov(i)/m) / (i (m - 1))
  /// for i < m (the later query's weight on the shared keys as in the header's
  /// X_im, the same approximation as position_backward, whose value path is
  /// this matrix's diagonal for upstream(i, m) = r sqrt(g_i g_m)). The two
  /// weights depend on (i, m) only, so the sums are two-dimensional suffix
  /// sums: O(L^2). Validated like backward(); `upstream` must be L x L and
  /// finite with a non-negative diagonal.
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> value_pair_backward(
      const Moments<T>& in, const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>& upstream) const {
    static_assert(is_scalar_v<T>, "sigprop::CausalAttention: per-position results are for scalar T");
    using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
    require_moments(name, in);
    const auto& f = profile(in);
    const Eigen::Index L = static_cast<Eigen::Index>(f.sum_sq.size());
    if (upstream.rows() != L || upstream.cols() != L)
      throw domain_error(std::string(name) + ": upstream is " + std::to_string(upstream.rows()) + " x " +
                         std::to_string(upstream.cols()) + ", outside the valid range {seq_len x seq_len = " +
                         std::to_string(L) + " x " + std::to_string(L) + "}");
    for (Eigen::Index i = 0; i < L; ++i) require_variance(name, "upstream(i, i)", upstream(i, i));
    if (!upstream.allFinite())  // then find the first entry, column by column
      for (Eigen::Index m = 0; m < L; ++m)
        for (Eigen::Index i = 0; i < L; ++i)
          if (!std::isfinite(upstream(i, m)))
            throw domain_error(std::string(name) + ": upstream(" + std::to_string(i) + ", " + std::to_string(m) +
                               ") = " + detail::format_number(double(upstream(i, m))) +
                               " is outside the valid range (-inf, inf)");
    const T keep = 1 - full_.p();
    // The weights of k = k' (same) and of k != k' (other) for the queries at
    // indices a < b (positions i = a + 1 < m = b + 1), symmetric in (a, b):
    //   same = F_cov(i) / (i m),  other = 1/(i (m - 1)) - F_cov(i) / (i m (m - 1)),
    // as products of per-index vectors; on the diagonal the S2_i forms.
    using Array = Eigen::Array<T, Eigen::Dynamic, 1>;
    Array inv_i(L), cross_i(L), inv_m1(L), inv_mm1(L);  // 1/i, F_cov(i)/i, 1/(i - 1), 1/(i (i - 1))
    for (Eigen::Index a = 0; a < L; ++a) {
      const T i = static_cast<T>(a + 1);
      inv_i(a) = 1 / i;
      cross_i(a) = T(f.cross[a]) / i;
      inv_m1(a) = a == 0 ? T(0) : 1 / (i - 1);
      inv_mm1(a) = a == 0 ? T(0) : 1 / (i * (i - 1));
    }
    const auto same_diagonal = [&](Eigen::Index a) { return T(f.sum_sq[a]) / (static_cast<T>(a + 1) * keep); };
    const auto other_diagonal = [&](Eigen::Index a) {
      const T i = static_cast<T>(a + 1);
      return a == 0 ? T(0) : (1 - T(f.sum_sq[a])) / (i * (i - 1));
    };
    // Off the diagonal: the suffix sums S(k, k') = sum_{i >= k, m >= k'} of
    // upstream * other, down each column, then across the columns (both
    // passes contiguous in Eigen's column-major storage).
    Matrix out(L, L);
    for (Eigen::Index b = 0; b < L; ++b) {
      const Eigen::Index below = L - b - 1;
      out.col(b).head(b).array() =
          upstream.col(b).head(b).array() * (inv_i.head(b) * inv_m1(b) - cross_i.head(b) * inv_mm1(b));
      out(b, b) = upstream(b, b) * other_diagonal(b);
      out.col(b).tail(below).array() =
          upstream.col(b).tail(below).array() * (inv_i(b) * inv_m1.tail(below) - cross_i(b) * inv_mm1.tail(below));
    }
    for (Eigen::Index b = 0; b < L; ++b)
      for (Eigen::Index a = L - 1; a-- > 0;) out(a, b) += out(a + 1, b);
    for (Eigen::Index b = L - 1; b-- > 0;) out.col(b) += out.col(b + 1);
    // On it: S(k, k) of upstream * same = sum_{a >= k} t(a), t(a) the terms
    // whose smaller index is a: (a, a), (a, b) and (b, a) for b > a.
    Array t = Array::Zero(L);
    for (Eigen::Index b = 0; b < L; ++b) {
      const Eigen::Index below = L - b - 1;
      t.head(b) += upstream.col(b).head(b).array() * cross_i.head(b) * inv_i(b);
      t(b) += upstream(b, b) * same_diagonal(b) +
              cross_i(b) * (upstream.col(b).tail(below).array() * inv_i.tail(below)).sum();
    }
    T diagonal = 0;
    for (Eigen::Index k = L; k-- > 0;) out(k, k) = diagonal += t(k);
    out *= full_.d_k() * full_.v_var();
    return out;
  }

 private:
  // H_L - H_i for i = 1..L (index i - 1).
  static std::vector<T> harmonic_tail(std::size_t L) {
    std::vector<T> tail(L, T(0));
    for (std::size_t n = L - 1; n-- > 0;) tail[n] = tail[n + 1] + T(1) / static_cast<T>(n + 2);
    return tail;
  }

  // <P>_n = E sum P^3 / E sum P^2 = (1 - J_n/S2_n + S2_n)/2 of query n + 1:
  // the weight of the key its own weighting favours (1/n when uniform).
  static Real favoured(const detail::CausalProfile<Real>& f, std::size_t n) {
    return (1 - f.jacobian[n] / f.sum_sq[n] + f.sum_sq[n]) / 2;
  }

  // The query-side sums of query n + 1; the rest filled by the caller.
  static SoftmaxSums<T> query_side(const detail::CausalProfile<Real>& f, std::size_t n) {
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

  // The sequence averages of the header, lane by lane.
  SoftmaxSums<T> averages(const Moments<T>& in) const {
    return detail::memoized<CausalAttention>(key_of(in), [&] {
      SoftmaxSums<T> s{in.var, in.var, in.var, in.var, in.var, in.var, in.var,
                       in.var, in.var, in.var, in.var, in.var, in.var};
      const T nu = norm_var_ratio_of(in), spread = hidden_spread_of(in);
      for (std::size_t lane_index = 0; lane_index < lane_count(in.var); ++lane_index) {
        if (same_as_previous_lane(lane_index, full_.d_in(), full_.d_k(), full_.seq_len(), full_.q_var(),
                                  full_.k_var(), full_.v_var(), full_.p(), in.mean, in.var, in.corr_len,
                                  in.corr_dim, nu, spread)) {
          for (T* x : {&s.sum_sq, &s.shrink_sq, &s.jacobian, &s.key_sq, &s.key_jacobian, &s.key_pairs,
                       &s.shrink_cross, &s.pair_cross, &s.pair_cross_centred, &s.key_pairs_centred, &s.tilt_cross,
                       &s.tilt_own, &s.rotary_keep})
            set_lane(*x, lane_index, lane(*x, lane_index - 1));
          continue;
        }
        const detail::CausalProfile<Real> f = lane_profile(in, lane_index);
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
      return s;
    });
  }

  // The per-key-count profile of a scalar head, memoized per input.
  // The unmasked head, its parameters checked under this component's name.
  static Attention<T> checked_head(T d_in, T d_k, T seq_len, T q_var, T k_var, T v_var, T p,
                                   AttentionGradient gradient, RotaryEmbedding rotary) {
    require_width(name, "d_in", d_in);
    require_width(name, "d_k", d_k);
    detail::require(name, "seq_len", seq_len,
                    [](double v) { return v >= 2 && std::floor(v) == v && v <= 1e7; }, "{2, 3, ..., 10^7} (an integer length)");
    require_variance(name, "q_var", q_var);
    require_variance(name, "k_var", k_var);
    require_variance(name, "v_var", v_var);
    require_probability(name, "p", p);
    detail::require_rotary(name, rotary, d_k);
    return Attention<T>(d_in, d_k, seq_len, q_var, k_var, v_var, p, gradient, rotary);
  }

  const detail::CausalProfile<Real>& profile(const Moments<T>& in) const {
    static thread_local detail::CausalProfile<Real> last;
    static thread_local std::array<T, 14> last_key{};
    static thread_local bool valid = false;
    const auto key = key_of(in);
    if (!valid || key != last_key) {
      last = lane_profile(in, 0);
      last_key = key;
      valid = true;
    }
    return last;
  }

  std::array<T, 14> key_of(const Moments<T>& in) const {
    return {full_.d_in(), full_.d_k(), full_.seq_len(), full_.q_var(), full_.k_var(), full_.v_var(), full_.p(),
            in.mean, in.var, in.corr_len, in.corr_dim, norm_var_ratio_of(in), hidden_spread_of(in),
            T(0 * in.var + full_.rotary().base)};
  }

  // S2_n, J_n, F_cov(n) for n = 1..L of one lane, from Attention over n keys.
  detail::CausalProfile<Real> lane_profile(const Moments<T>& in, std::size_t i, bool every_count = false) const {
    const auto at = [i](const T& x) { return static_cast<Real>(lane(x, i)); };
    Moments<Real> x{at(in.mean), at(in.var), at(in.corr_len), at(in.corr_dim)};
    x.norm_var_ratio = at(norm_var_ratio_of(in));  // the keys' norm fluctuation (Attention)
    x.hidden_spread = at(hidden_spread_of(in));    // the tilt's hidden covariance (Attention)
    const auto L = static_cast<std::size_t>(at(full_.seq_len()));
    detail::CausalProfile<Real> f;
    f.sum_sq.assign(L, Real(1));
    f.jacobian.assign(L, Real(0));
    f.cross.assign(L, Real(1));
    f.tilt_cross.assign(L, Real(0));  // one key: z = x_1, no tilt
    f.tilt_own.assign(L, Real(0));
    f.rotary_keep.assign(L, Real(1));
    // The factors F_var, F_jac, F_cov and the tilts C, O at the key counts of
    // the grid (every n up to profile_every_count, then ratio profile_ratio),
    // by cubic Lagrange interpolation in log n in between: they vary smoothly,
    // like 1/n, so the grid costs O(log L) evaluations instead of O(L). Where
    // one of Attention's bounds (1 <= F_var <= n, 0 <= F_jac, F_cov <= F_var)
    // starts or stops binding within the four points, the factors have a kink
    // there and those counts are evaluated exactly.
    constexpr std::size_t factors = 6;
    struct Point {
      std::array<Real, factors> value;
      unsigned bound;  // which of the bounds bind
    };
    const auto evaluate = [&](std::size_t n) {
      const Real keys = static_cast<Real>(n);
      const Attention<Real> head(at(full_.d_in()), at(full_.d_k()), keys, at(full_.q_var()), at(full_.k_var()),
                                 at(full_.v_var()), at(full_.p()), AttentionGradient::all_paths, full_.rotary());
      const AttentionTerms<Real> a = head.terms(x);
      const unsigned bound = (a.weight_sq <= 1 || a.weight_sq >= keys ? 1u : 0u) |
                             (a.weight_jacobian <= 0 || a.weight_jacobian >= a.weight_sq ? 2u : 0u) |
                             (a.weight_cross <= 0 || a.weight_cross >= a.weight_sq ? 4u : 0u);
      return Point{{a.weight_sq, a.weight_jacobian, a.weight_cross, a.tilt_cross, a.tilt_own, a.rotary_keep}, bound};
    };
    std::vector<std::size_t> grid;
    for (std::size_t n = 2; n <= L; ++n) {
      if (every_count || n <= profile_every_count || grid.empty()) {
        grid.push_back(n);
        continue;
      }
      const auto next = static_cast<std::size_t>(std::ceil(static_cast<double>(grid.back()) * profile_ratio));
      if (n == std::min(next, L)) grid.push_back(n);
    }
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


  Attention<T> full_;
};

}  // namespace sigprop
