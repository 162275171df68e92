// sigprop/components/causal_attention.hpp -- single-head attention with the
// causal mask: query i (positions 1..L) attends to keys 1..i only,
//   P = softmax over k <= i of Q K^T / sqrt(d_k),   Y = dropout_p(P) V.
//
// References: Vaswani et al., "Attention Is All You Need" (2017), section
// 3.2.3 (the mask); Radford et al. (2019, GPT-2) and Touvron et al. (2023,
// Llama) use it in every layer. Not in the seed papers, which analyse
// encoders; the moments below extend attention.hpp.
//
// Everything in attention.hpp holds per query with L replaced by its number
// of keys n = i, and only the softmax sums change (detail::CausalMask,
// detail/attention_causal.hpp):
//   per query   S2_i = F_var(i)/i, shrink_i^2, J_i = F_jac(i)/i   (n = 1: S2 = 1, J = 0);
//   per key k   sum_{i>=k} S2_i/i, sum_{i>=k} J_i/i, and over the query pairs
//               that both attend to k, 2 sum_{i>=k} F_cov(i) (H_L - H_i)/i;
//   pairs       X_im = F_cov(i)/m for i < m, the mean over pairs
//               2 sum_i F_cov(i) (H_L - H_i)/(L (L - 1)), and
//               mean shrink_i shrink_m = ((sum shrink)^2 - sum shrink^2)/(L (L - 1));
//   centring    the pairs weighted by 1 - <P>_i - <P>_m + X_im,
//               <P>_n = (1 - J_n/S2_n + S2_n)/2.
// Keys whose pairs are not one correlation r (with_key_spread, spread_of_pairs;
// R_i the correlations of keys 1..i, H = I - 11'/i, w_i = (i - 1)/i^2):
//   query = sum_i w_i |H R_i H|_F^2/(i - 1) / (sum_i w_i (1 - r)^2)   (times the pos_var^2 terms),
//   key   = sum_i w_i tr(H R_i H)/(i - 1) / (sum_i w_i (1 - r))       (times the pos_var terms)
// of the softmax path (docs/decoders.md, "The keys' spread").
// forward()/backward() give the sequence averages (the moment state of the
// whole sequence); the position_* functions give each position's moments.
// The per-key-count factors are evaluated at n = 2..64, then on a geometric
// grid of ratio 2^(1/16) up to L, interpolated in log n in between, memoized
// per input. docs/components/causal_attention.md derives the sums and gives
// the accuracy against a simulation with the real mask
// (montecarlo/components/causal_attention.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "sigprop/components/attention.hpp"
#include "sigprop/components/detail/attention_causal.hpp"

namespace sigprop {

template <class T = double>
class CausalAttention : public BasicAttention<T, detail::CausalMask> {
  using Base = BasicAttention<T, detail::CausalMask>;
  using Real = math::real_of<T>;
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;

 public:
  /// As Attention, with `seq_len` an integer >= 2 (the positions 1..L).
  /// With rotary embeddings, query i's keys 1..i turn by the angles (k - i) theta_j.
  using Base::Base;
  using Base::name;

  /// The same head without the mask (every query attends to all L keys).
  Attention<T> full() const {
    return Attention<T>(this->d_in(), this->d_k(), this->seq_len(), this->q_var(), this->k_var(), this->v_var(),
                        this->p(), this->gradient(), this->rotary(), this->logit_scale())
        .with_biases(this->q_bias(), this->k_bias(), this->v_bias());
  }

  /// The same head with backward() through the paths `gradient`.
  CausalAttention with_gradient(AttentionGradient gradient) const {
    return CausalAttention(this->d_in(), this->d_k(), this->seq_len(), this->q_var(), this->k_var(), this->v_var(),
                           this->p(), gradient, this->rotary(), this->logit_scale())
        .with_biases(this->q_bias(), this->k_bias(), this->v_bias())
        .with_key_spread(this->key_spread().query, this->key_spread().key);
  }

  /// This head with the softmax path's factors for keys that are not
  /// exchangeable (detail::KeySpread; both finite and >= 0): the query path's
  /// terms in two position-specific variances times `query`, those in one
  /// times `key`.
  CausalAttention with_key_spread(const T& query, const T& key) const {
    CausalAttention a = *this;
    a.set_key_spread(query, key);
    return a;
  }

  /// This head with biases on Q, K and V (Attention::with_biases).
  CausalAttention with_biases(const T& q_bias, const T& k_bias, const T& v_bias) const {
    CausalAttention a = *this;
    a.set_biases(q_bias, k_bias, v_bias);
    return a;
  }

  /// The keys' spread of an input whose positions have the covariance
  /// `pairs` (L x L, equal variances: a normalized stream's) against one
  /// correlation r between all of them, for with_key_spread(): over the
  /// queries i = 2..L, weighted as uniform attention weights them, the
  /// squared Frobenius norm and the trace of their keys' centred correlations
  /// (docs/decoders.md, "The keys' spread").
  static detail::KeySpread<double> spread_of_pairs(const Eigen::MatrixXd& pairs, double r) {
    const Eigen::Index L = pairs.rows();
    if (L < 2 || pairs.cols() != L)
      detail::raise_domain(name, "pairs is " + std::to_string(L) + " x " + std::to_string(pairs.cols()) +
                                     ", outside the valid range {L x L, L >= 2}");
    if (!pairs.allFinite()) detail::raise_domain(name, "pairs has an entry that is not finite");
    require_positive(name, "pairs(0, 0)", pairs(0, 0));
    require_correlation(name, "r", r);
    // H R H = H (R - r 11') H: the sums below are of R - r, whose entries are
    // of the order of 1 - r (no cancellation as r -> 1).
    const double unit = 1 / pairs(0, 0);
    Eigen::VectorXd rows = Eigen::VectorXd::Zero(L);  // (R_i - r) 1 over the keys so far
    double total = 0, frobenius = 0, trace = 0, weights = 0, query = 0, key = 0;
    for (Eigen::Index m = 0; m < L; ++m) {
      const Eigen::VectorXd before = (pairs.col(m).head(m) * unit).array() - r;
      const double own = pairs(m, m) * unit - r, sum = before.sum();
      rows.head(m) += before;
      rows(m) = sum + own;
      total += 2 * sum + own;
      frobenius += 2 * before.squaredNorm() + own * own;
      trace += own;
      if (m == 0) continue;
      const double i = double(m + 1), w = (i - 1) / (i * i);
      query += w * (frobenius - 2 * rows.head(m + 1).squaredNorm() / i + total * total / (i * i)) / (i - 1);
      key += w * (trace - total / i) / (i - 1);
      weights += w;
    }
    const double apart = 1 - r;  // (rounding can leave a sum of squares just below 0)
    return {std::max(math::ratio_or(query, weights * apart * apart, 1.0), 0.0),
            std::max(math::ratio_or(key, weights * apart, 1.0), 0.0)};
  }

  /// The softmax sums averaged over the sequence (validated like forward()).
  SoftmaxSums<T> softmax_sums(const Moments<T>& in) const {
    require_moments(name, in);
    return detail::causal_sums(this->params(), in);
  }

  static constexpr std::size_t profile_every_count = detail::profile_every_count;
  static constexpr double profile_ratio = detail::profile_ratio;

  /// The per-query softmax sums S2_n, J_n, F_cov(n), C_n, O_n for n = 1..L
  /// of lane 0: as forward() uses them (grid and interpolation), or, with
  /// `every_count`, evaluated at every key count (the reference; O(L)).
  detail::CausalProfile<Real> key_count_profile(const Moments<T>& in, bool every_count) const {
    require_moments(name, in);
    return detail::causal_profile(detail::lane_params(this->params(), 0), detail::lane_moments(in, 0), every_count);
  }

  /// Each position's output moments, i = 1..L (scalar T): its variance and
  /// its mean correlation with the other positions (validated like forward()).
  std::vector<Moments<T>> position_forward(const Moments<T>& in) const {
    require_moments(name, in);
    static_assert(is_scalar_v<T>, "sigprop::CausalAttention: per-position results are for scalar T");
    const detail::CausalProfile<Real> f = detail::causal_profile_of(this->params(), in);
    const std::size_t L = f.sum_sq.size();
    const AttentionTerms<T> a = this->terms_of(in);
    T shrink_sum = 0;
    for (std::size_t n = 0; n < L; ++n) shrink_sum += 1 - f.sum_sq[n];
    // prefix sums of F_cov(m) for the pairs m < i, suffix sums of F_cov(i)/m for m > i
    std::vector<Moments<T>> out;
    T prefix = 0;
    const std::vector<T> tail = harmonic_tail(L);
    for (std::size_t n = 0; n < L; ++n) {
      const T i = static_cast<T>(n + 1), shrink = 1 - f.sum_sq[n];
      SoftmaxSums<T> s = detail::query_side<T>(f, n);
      s.shrink_cross = shrink * (shrink_sum - shrink) / T(L - 1);
      s.pair_cross = (prefix / i + f.cross[n] * tail[n]) / T(L - 1);
      out.push_back(this->checked(name, detail::output_moments(this->params(), a, s)));
      prefix += f.cross[n];
    }
    return out;
  }

  /// Each position's input-gradient variance, k = 1..L (scalar T; corr_len
  /// is the sequence average of backward(); validated like backward()).
  std::vector<GradMoments<T>> position_backward(const Moments<T>& in, const GradMoments<T>& g) const {
    require_grad_moments(name, g);
    const std::vector<T> uniform(static_cast<std::size_t>(lane(this->seq_len(), 0)), g.var);
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
    const detail::CausalProfile<Real> f = detail::causal_profile_of(this->params(), in);
    const std::size_t L = f.sum_sq.size();
    if (grad_var.size() != L)
      detail::raise_domain(name, "grad_var.size()", std::to_string(grad_var.size()),
                           "{seq_len = " + std::to_string(L) + "}");
    for (const T& v : grad_var) require_variance(name, "grad_var", v);
    require_correlation(name, "grad_corr", grad_corr);
    const AttentionTerms<T> a = this->terms_of(in);
    const SoftmaxSums<T> mean = detail::causal_sums(this->params(), in);
    T mean_grad = 0;
    for (const T& v : grad_var) mean_grad += v / T(L);
    const T corr = backward_with(in, a, mean, {mean_grad, grad_corr}).corr_len;
    // Suffix sums over the later queries m > i of sqrt(g_m)/m, <P>_m sqrt(g_m)/m
    // and sqrt(g_m)/m^2 (the pair sums of the profile, weighted).
    std::vector<T> root(L), later(L, T(0)), later_favoured(L, T(0)), later_sq(L, T(0));
    for (std::size_t n = 0; n < L; ++n) root[n] = std::sqrt(grad_var[n]);
    for (std::size_t n = L - 1; n-- > 0;) {
      const T m = static_cast<T>(n + 2);
      later[n] = later[n + 1] + root[n + 1] / m;
      later_favoured[n] = later_favoured[n + 1] + detail::favoured(f, n + 1) * root[n + 1] / m;
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
                           ((1 - detail::favoured(f, n)) * later[n] - later_favoured[n] + f.cross[n] * later_sq[n]) / i;
      SoftmaxSums<T> s = detail::query_side<T>(f, n);
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
      out[n] = {backward_with(in, a, s, {T(1), grad_corr}).var, corr};
    }
    return out;
  }

  /// The value path's input-gradient covariance between positions (scalar
  /// T): entry (k - 1, k' - 1) for k, k' = 1..L, per input feature, for an
  /// upstream gradient with covariance `upstream(i - 1, m - 1)` between the
  /// outputs at positions i and m (per output unit; any structure). With
  /// dX = dropout(P)^T g Wv^T and A = dropout(P),
  ///   out(k, k') = d_k v_var sum_{i >= k, m >= k'} upstream(i, m) E[A_ik A_mk']
  /// and, by exchangeability of a query's keys and sum_k P_ik = 1,
  ///   E[A_ik^2] = S2_i / (i (1 - p)),      E[A_ik A_ik'] = (1 - S2_i) / (i (i - 1)),
  ///   E[A_ik A_mk] = F_cov(i) / (i m),     E[A_ik A_mk'] = (1 - F_cov(i)/m) / (i (m - 1))
  /// for i < m: two-dimensional suffix sums, O(L^2). Validated like
  /// backward(); `upstream` must be L x L and finite with a non-negative
  /// diagonal (docs/components/causal_attention.md).
  Matrix value_pair_backward(const Moments<T>& in, const Matrix& upstream) const {
    static_assert(is_scalar_v<T>, "sigprop::CausalAttention: per-position results are for scalar T");
    require_moments(name, in);
    const PairWeights w(detail::causal_profile_of(this->params(), in), 1 - this->p());
    const Eigen::Index L = w.size();
    require_pairs(upstream, L, "upstream");
    const auto &inv_i = w.inv_i, &cross_i = w.cross_i, &inv_m1 = w.inv_m1, &inv_mm1 = w.inv_mm1;
    using Array = typename PairWeights::Array;
    // Off the diagonal: the suffix sums S(k, k') = sum_{i >= k, m >= k'} of
    // upstream * other, down each column, then across the columns.
    Matrix out(L, L);
    for (Eigen::Index b = 0; b < L; ++b) {
      const Eigen::Index below = L - b - 1;
      out.col(b).head(b).array() =
          upstream.col(b).head(b).array() * (inv_i.head(b) * inv_m1(b) - cross_i.head(b) * inv_mm1(b));
      out(b, b) = upstream(b, b) * w.other_diagonal(b);
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
      t(b) += upstream(b, b) * w.same_diagonal(b) +
              cross_i(b) * (upstream.col(b).tail(below).array() * inv_i.tail(below)).sum();
    }
    T diagonal = 0;
    for (Eigen::Index k = L; k-- > 0;) out(k, k) = diagonal += t(k);
    out *= this->d_k() * this->v_var();
    return out;
  }

  /// The value path's output covariance between positions (scalar T): entry
  /// (i - 1, m - 1) for queries i, m = 1..L, per output unit, for values whose
  /// covariance between positions k and k' is `values(k - 1, k' - 1)` per
  /// input unit (any structure). With value_pair_backward's weights,
  ///   out(i, m) = d_in v_var sum_{k <= i, k' <= m} E[A_ik A_mk'] values(k, k')
  ///             = d_in v_var (same(i, m) D(j) + other(i, m) (S(i, m) - D(j))),  j = min(i, m),
  /// S the two-dimensional prefix sums of `values`, D those of its diagonal:
  /// O(L^2). The scores are taken as independent of the values' pairs
  /// (docs/decoders.md, "Decoders at depth"). Validated like forward();
  /// `values` as `upstream` in value_pair_backward (passed by value: a
  /// moved-in matrix becomes the result, without another L x L).
  Matrix value_pair_forward(const Moments<T>& in, Matrix values) const {
    static_assert(is_scalar_v<T>, "sigprop::CausalAttention: per-position results are for scalar T");
    require_moments(name, in);
    const PairWeights w(detail::causal_profile_of(this->params(), in), 1 - this->p());
    const Eigen::Index L = w.size();
    require_pairs(values, L, "values");
    using Array = typename PairWeights::Array;
    Array D(L);
    T running = 0;
    for (Eigen::Index a = 0; a < L; ++a) D(a) = running += values(a, a);
    Matrix& out = values;  // the prefix sums, then the result, in place
    for (Eigen::Index b = 0; b < L; ++b)
      for (Eigen::Index a = 1; a < L; ++a) out(a, b) += out(a - 1, b);
    for (Eigen::Index b = 1; b < L; ++b) out.col(b) += out.col(b - 1);
    for (Eigen::Index b = 0; b < L; ++b) {
      const Eigen::Index below = L - b - 1;
      // rows a < b: the earlier query is a; rows a > b: it is b
      const Array same_above = w.cross_i.head(b) * w.inv_i(b),
                  other_above = w.inv_i.head(b) * w.inv_m1(b) - w.cross_i.head(b) * w.inv_mm1(b);
      out.col(b).head(b).array() =
          same_above * D.head(b) + other_above * (out.col(b).head(b).array() - D.head(b));
      out(b, b) = w.same_diagonal(b) * D(b) + w.other_diagonal(b) * (out(b, b) - D(b));
      const Array same_below = w.cross_i(b) * w.inv_i.tail(below),
                  other_below = w.inv_i(b) * w.inv_m1.tail(below) - w.cross_i(b) * w.inv_mm1.tail(below);
      out.col(b).tail(below).array() = same_below * D(b) + other_below * (out.col(b).tail(below).array() - D(b));
    }
    out *= this->d_in() * this->v_var();
    return values;
  }

  /// value_pair_forward's means on and off the diagonal for values of one
  /// correlation between all positions (in's variance and length
  /// covariance), O(L): the closed form's value average,
  ///   diagonal = d_in v_var mean_i (S2_i var / (1 - p) + (1 - S2_i) cov),
  ///   off      = d_in v_var (cov + (var - cov) pair_cross).
  struct PairMeans {
    T diagonal, off;
  };
  PairMeans value_pair_means(const Moments<T>& in) const {
    static_assert(is_scalar_v<T>, "sigprop::CausalAttention: per-position results are for scalar T");
    require_moments(name, in);
    const detail::CausalProfile<Real> f = detail::causal_profile_of(this->params(), in);
    const T var = in.var, cov = in.cov_len(), keep = 1 - this->p();
    T diagonal = 0;
    for (const Real s2 : f.sum_sq) diagonal += T(s2) * var / keep + (1 - T(s2)) * cov;
    diagonal /= static_cast<T>(f.sum_sq.size());
    const T off = cov + (var - cov) * softmax_sums(in).pair_cross, gain = this->d_in() * this->v_var();
    return {gain * diagonal, gain * off};
  }

 private:
  // The weights E[A_ik A_mk'] of two queries i < m (value_pair_backward's
  // formulas) as products of per-index vectors, index a = i - 1:
  //   same = E[A_ik A_mk] = cross_i(a) inv_i(b),
  //   other = E[A_ik A_mk'] = inv_i(a) inv_m1(b) - cross_i(a) inv_mm1(b)   (k != k'),
  // and on the diagonal same_diagonal(a) = S2_i/(i (1 - p)), other_diagonal(a) = (1 - S2_i)/(i (i - 1)).
  struct PairWeights {
    using Array = Eigen::Array<T, Eigen::Dynamic, 1>;
    Array inv_i, cross_i, inv_m1, inv_mm1;  // 1/i, F_cov(i)/i, 1/(i - 1), 1/(i (i - 1))
    std::vector<Real> sum_sq;
    T keep;

    PairWeights(const detail::CausalProfile<Real>& f, const T& keep_) : sum_sq(f.sum_sq), keep(keep_) {
      const Eigen::Index L = static_cast<Eigen::Index>(f.sum_sq.size());
      inv_i.resize(L);
      cross_i.resize(L);
      inv_m1.resize(L);
      inv_mm1.resize(L);
      for (Eigen::Index a = 0; a < L; ++a) {
        const T i = static_cast<T>(a + 1);
        inv_i(a) = 1 / i;
        cross_i(a) = T(f.cross[static_cast<std::size_t>(a)]) / i;
        inv_m1(a) = a == 0 ? T(0) : 1 / (i - 1);
        inv_mm1(a) = a == 0 ? T(0) : 1 / (i * (i - 1));
      }
    }
    Eigen::Index size() const { return inv_i.size(); }
    T same_diagonal(Eigen::Index a) const {
      return T(sum_sq[static_cast<std::size_t>(a)]) / (static_cast<T>(a + 1) * keep);
    }
    T other_diagonal(Eigen::Index a) const {
      const T i = static_cast<T>(a + 1);
      return a == 0 ? T(0) : (1 - T(sum_sq[static_cast<std::size_t>(a)])) / (i * (i - 1));
    }
  };

  GradMoments<T> backward_with(const Moments<T>& in, const AttentionTerms<T>& a, const SoftmaxSums<T>& s,
                               const GradMoments<T>& g) const {
    return detail::attention_backward(this->params(), this->gradient(), in, a, s, g, this->key_spread(),
                                      detail::CausalMask::value_key_cross);
  }

  // H_L - H_i for i = 1..L (index i - 1).
  static std::vector<T> harmonic_tail(std::size_t L) {
    std::vector<T> tail(L, T(0));
    for (std::size_t n = L - 1; n-- > 0;) tail[n] = tail[n + 1] + T(1) / static_cast<T>(n + 2);
    return tail;
  }

  // `upstream` (named `what`) is L x L, with a non-negative diagonal, finite.
  static void require_pairs(const Matrix& upstream, Eigen::Index L, const std::string& what) {
    if (upstream.rows() != L || upstream.cols() != L)
      detail::raise_domain(name, what + " is " + std::to_string(upstream.rows()) + " x " +
                                     std::to_string(upstream.cols()) +
                                     ", outside the valid range {seq_len x seq_len = " + std::to_string(L) + " x " +
                                     std::to_string(L) + "}");
    for (Eigen::Index i = 0; i < L; ++i) require_variance(name, (what + "(i, i)").c_str(), upstream(i, i));
    if (!upstream.allFinite())  // then find the first entry, column by column
      for (Eigen::Index m = 0; m < L; ++m)
        for (Eigen::Index i = 0; i < L; ++i)
          if (!std::isfinite(upstream(i, m)))
            detail::raise_domain(name, what + "(" + std::to_string(i) + ", " + std::to_string(m) + ")",
                                 double(upstream(i, m)), "(-inf, inf)");
  }
};

}  // namespace sigprop
