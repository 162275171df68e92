// sigprop/components/embedding.hpp -- the model input: the sum of K lookup
// tables (token, position, segment; any subset), each with entries i.i.d.
// N(0, s_k^2), over a sequence of L positions.
//
// Reference: Kedia et al., "Transformers Get Stable" (ICML 2024), appendix
// B.1 "Embeddings" (A.1 in the later version). With the tables independent
// and zero-mean:
//   E[x] = 0,  Var[x] = sum_k s_k^2,  r^d = 0 (hidden units use independent
//   table columns),
//   r^l = sum_k s_k^2 r_k / sum_k s_k^2   (B.1 "Final Model Input Embeddings"),
// where r_k = P(two distinct positions look up the same row of table k):
//
// Token table, tokens i.i.d. Zipf, p_i = c/i, c = 1/H_|V| (B.1 "Token
// Embeddings"). Two distinct positions hold the same token with probability
//   r_tok = sum_i p_i^2 = (pi^2/6 - psi_1(|V| + 1)) / (psi(|V| + 1) + gamma)^2
// exactly for every |V| and L (psi, psi_1: digamma, trigamma). The paper
// instead writes sum_i N_i (N_i - 1)/(L (L - 1)) -- itself exact, since
// E[N_i (N_i - 1)] = L (L - 1) p_i^2 for multinomial counts -- but then plugs
// in the expected count N_i = p_i L, which drops the variance of N_i and gives
// (L sum_i p_i^2 - 1)/(L - 1); its large-|V| form is pi^2/(6 log(|V|)^2).
// Simulation rejects both for i.i.d. tokens (docs/components/embedding.md);
// both are kept as named variants.
//
// Segment table, two segments split at s: positions 0..s-1 form segment A,
// s..L-1 segment B (B.1 "Segment Type Embeddings"). Two distinct positions
// a < b are separated iff a < s <= b, i.e. for b - a split points; a uniformly
// random pair has E[b - a] = (L + 1)/3. Hence
//   s uniform on {1, ..., L-1} (both segments non-empty, as in BERT):
//       r_seg = 1 - (L + 1)/(3 (L - 1)) = 2 (L - 2)/(3 (L - 1));
//   s uniform on {0, ..., L} (the paper's "x uniform between 0 and L"):
//       r_seg = 1 - 1/3 = 2/3 exactly.
// The paper's (2/3 L^2 - L)/(L (L - 1)) = (2L - 3)/(3 (L - 1)) mixes a
// continuous E[x^2] = L^2/3 with the discrete "- L" and is exact for neither
// (1/(3 (L - 1)) below the {0, ..., L} model; confirmed by simulation).
//
// Position table: every position has its own row, r_pos = 0.
//
// The paper's check, |V| = 32000, L = 256, three equal tables:
// pi^2/(18 log(|V|)^2) + 2/9 = 0.2273 (this is paper_large_vocab with the
// {0, ..., L} split); the exact default gives 0.2259; observed on real text
// 0.221.
//
// Backward: x = sum_k E_k[idx_k(l)], so dLoss/dE_k[idx_k(l)] = dLoss/dx_l for
// every table k: backward returns the incoming gradient moments unchanged.
// row_grad_var gives the variance of the gradient that accumulates in one
// table row (the sum over the positions that looked it up).
#pragma once

#include <cmath>
#include <optional>
#include <string>

#include <boost/math/constants/constants.hpp>
#include <boost/math/special_functions/digamma.hpp>
#include <boost/math/special_functions/trigamma.hpp>

#include "sigprop/core/component.hpp"

namespace sigprop {

/// The lookup tables of an embedding.
enum class EmbeddingTable { token, position, segment };

inline const char* to_string(EmbeddingTable t) {
  switch (t) {
    case EmbeddingTable::token: return "token";
    case EmbeddingTable::position: return "position";
    case EmbeddingTable::segment: return "segment";
  }
  return "?";
}

/// Length correlation of the token table (tokens i.i.d. Zipf).
enum class TokenCorrelation {
  iid_exact,         ///< sum_i p_i^2, exact (default; confirmed by simulation)
  paper_counts,      ///< (L sum_i p_i^2 - 1)/(L - 1), B.1 with N_i = p_i L
  paper_large_vocab  ///< pi^2/(6 log(|V|)^2), B.1's final approximation
};

/// Length correlation of the segment table (two segments, random split).
enum class SegmentCorrelation {
  nonempty_exact,   ///< split uniform on {1, ..., L-1}: 2 (L - 2)/(3 (L - 1)) (default)
  inclusive_exact,  ///< split uniform on {0, ..., L}: 2/3
  paper             ///< B.1's (2/3 L^2 - L)/(L (L - 1)); simulated as the {0, ..., L} split
};

/// Configuration of an Embedding. Every table's entries are i.i.d.
/// N(0, weight_var) unless its own variance is given. For batched T every
/// value field must be set (the defaults are scalar).
template <class T = double>
struct EmbeddingConfig {
  T vocab{32000};   ///< |V|, number of token-table rows (Zipf over ranks 1..|V|)
  T seq_len{256};   ///< L, sequence length (>= 2: a length correlation needs two positions)
  T weight_var{1};  ///< per-entry variance of every table without an override
  std::optional<T> token_var, position_var, segment_var;  ///< per-table overrides
  bool token = true, position = true, segment = true;      ///< which tables are summed
  TokenCorrelation token_corr = TokenCorrelation::iid_exact;
  SegmentCorrelation segment_corr = SegmentCorrelation::nonempty_exact;
};

namespace detail {

/// Validates the inputs of the free Zipf / segment functions.
template <class T>
void require_vocab(const char* function, const T& vocab) {
  require_width(function, "vocab", vocab, 1);
}

template <class T>
void require_seq_len(const char* function, const T& seq_len) {
  require_width(function, "seq_len", seq_len, 2);
}

}  // namespace detail

/// H_|V| = sum_{i=1}^{|V|} 1/i = psi(|V| + 1) + gamma, the Zipf normalizer
/// (B.1: c = 1/H_|V|; the paper's gamma + log|V| is its large-|V| form).
template <class T>
T zipf_harmonic(const T& vocab) {
  detail::require_vocab("sigprop::zipf_harmonic", vocab);
  using R = math::real_of<T>;
  return math::map_lanes(vocab, [](R v) {
    const double h = boost::math::digamma(static_cast<double>(v) + 1) +
                     boost::math::constants::euler<double>();
    return static_cast<R>(h);
  });
}

/// sum_{i=1}^{|V|} 1/i^2 = pi^2/6 - psi_1(|V| + 1).
template <class T>
T zipf_inverse_square_sum(const T& vocab) {
  detail::require_vocab("sigprop::zipf_inverse_square_sum", vocab);
  using R = math::real_of<T>;
  return math::map_lanes(vocab, [](R v) {
    const double s = boost::math::constants::pi_sqr_div_six<double>() -
                     boost::math::trigamma(static_cast<double>(v) + 1);
    return static_cast<R>(s);
  });
}

/// Probability that two i.i.d. Zipf tokens are equal: sum_i p_i^2
/// = (sum_i 1/i^2)/H_|V|^2.
template <class T>
T zipf_collision_probability(const T& vocab) {
  const T h = zipf_harmonic(vocab);
  return zipf_inverse_square_sum(vocab) / (h * h);
}

/// Zipf probability of the token of rank i: p_i = 1/(i H_|V|).
template <class T>
T zipf_probability(const T& vocab, const T& rank) {
  constexpr const char* fn = "sigprop::zipf_probability";
  detail::require_vocab(fn, vocab);
  require_width(fn, "rank", rank, 1);
  for (std::size_t i = 0; i < lane_count(rank); ++i) {
    const double r = static_cast<double>(lane(rank, i));
    const double v = static_cast<double>(lane(vocab, lane_count(vocab) == 1 ? 0 : i));
    if (r > v) sigprop::detail::raise_domain(fn, "rank", r, "[1, vocab = " + sigprop::detail::format_number(v) + "]");
  }
  return 1 / (rank * zipf_harmonic(vocab));
}

/// Length correlation of the token table (B.1 "Token Embeddings") in the
/// chosen form; see the header comment for the derivations.
template <class T>
T token_length_correlation(const T& vocab, const T& seq_len, TokenCorrelation form) {
  constexpr const char* fn = "sigprop::token_length_correlation";
  detail::require_vocab(fn, vocab);
  detail::require_seq_len(fn, seq_len);
  using std::log;
  switch (form) {
    case TokenCorrelation::iid_exact:
      return zipf_collision_probability(vocab) + 0 * seq_len;
    case TokenCorrelation::paper_counts:
      return (seq_len * zipf_collision_probability(vocab) - 1) / (seq_len - 1);
    case TokenCorrelation::paper_large_vocab: {
      // pi^2/(6 log^2|V|) <= 1 needs log|V| >= pi/sqrt(6), i.e. |V| >= 3.6.
      sigprop::detail::require(fn, "vocab", vocab, [](double v) { return v >= 4; },
                               "[4, inf) (the large-|V| form pi^2/(6 log(|V|)^2) exceeds 1 below "
                               "|V| = 3.6)");
      const T lv = log(vocab);
      return math::pi<T>() * math::pi<T>() / (6 * lv * lv) + 0 * seq_len;
    }
  }
  return 0 * vocab;
}

/// Length correlation of the segment table (B.1 "Segment Type Embeddings"):
/// the probability that two distinct positions fall in the same segment.
template <class T>
T segment_length_correlation(const T& seq_len, SegmentCorrelation form) {
  detail::require_seq_len("sigprop::segment_length_correlation", seq_len);
  const T& L = seq_len;
  switch (form) {
    // Each as a ratio of terms O(1), finite up to L = DBL_MAX.
    case SegmentCorrelation::nonempty_exact:  // 1 - (L + 1)/(3 (L - 1))
      return 2 * ((L - 2) / (L - 1)) / 3;
    case SegmentCorrelation::inclusive_exact:  // 1 - (L + 1)/(3 (L + 1)) = 2/3 for every L
      return (2 + 2 / L) / (3 + 3 / L);
    case SegmentCorrelation::paper:  // (2/3 L^2 - L)/(L (L - 1)) = (2 - 1/(L - 1))/3
      return (2 - 1 / (L - 1)) / 3;
  }
  return 0 * L;
}

template <class T = double>
class Embedding : public Component<Embedding<T>, T> {
  using Base = Component<Embedding<T>, T>;

 public:
  static constexpr const char* name = "sigprop::Embedding";

  explicit Embedding(const EmbeddingConfig<T>& config) : config_(config) {
    if (!config_.token && !config_.position && !config_.segment)
      detail::raise_domain(name, "no table is enabled (enable at least one of token, position, segment)");
    detail::require_vocab(name, config_.vocab);
    detail::require_seq_len(name, config_.seq_len);
    require_variance(name, "weight_var", config_.weight_var);
    if (config_.token_var) require_variance(name, "token_var", *config_.token_var);
    if (config_.position_var) require_variance(name, "position_var", *config_.position_var);
    if (config_.segment_var) require_variance(name, "segment_var", *config_.segment_var);
    // Evaluates (and so validates) the chosen correlation forms once.
    if (config_.token)
      (void)token_length_correlation(config_.vocab, config_.seq_len, config_.token_corr);
  }

  /// An embedding whose output moments were measured (for example on real
  /// data, as the paper does for speech in its section 5): forward returns
  /// `moments`, backward is still the identity.
  static Embedding measured(const Moments<T>& moments) {
    require_moments(name, moments);
    return Embedding(moments);
  }

  bool is_measured() const { return measured_.has_value(); }
  /// The configuration (the defaults for a measured embedding).
  const EmbeddingConfig<T>& config() const { return config_; }

  bool has_table(EmbeddingTable t) const {
    if (is_measured()) return false;
    switch (t) {
      case EmbeddingTable::token: return config_.token;
      case EmbeddingTable::position: return config_.position;
      case EmbeddingTable::segment: return config_.segment;
    }
    return false;
  }

  /// Per-entry variance of table `t` (0 if it is not summed).
  T table_var(EmbeddingTable t) const {
    const T zero = 0 * config_.weight_var;
    if (!has_table(t)) return zero;
    switch (t) {
      case EmbeddingTable::token: return config_.token_var.value_or(config_.weight_var);
      case EmbeddingTable::position: return config_.position_var.value_or(config_.weight_var);
      case EmbeddingTable::segment: return config_.segment_var.value_or(config_.weight_var);
    }
    return zero;
  }

  /// r_k: probability that two distinct positions read the same row of table `t`.
  T table_corr_len(EmbeddingTable t) const {
    switch (t) {
      case EmbeddingTable::token:
        return token_length_correlation(config_.vocab, config_.seq_len, config_.token_corr);
      case EmbeddingTable::position: return 0 * config_.seq_len;
      case EmbeddingTable::segment:
        return segment_length_correlation(config_.seq_len, config_.segment_corr);
    }
    return 0 * config_.seq_len;
  }

  using Base::forward;
  /// The output moments (an embedding has no input moments).
  Moments<T> forward() const { return Base::forward(Moments<T>{}); }

  /// `in` is ignored (an embedding is the start of the network; the base
  /// class still rejects invalid moments).
  Moments<T> forward_impl(const Moments<T>&) const {
    if (measured_) return *measured_;
    const T v_tok = table_var(EmbeddingTable::token);
    const T v_pos = table_var(EmbeddingTable::position);
    const T v_seg = table_var(EmbeddingTable::segment);
    const T var = v_tok + v_pos + v_seg;
    T cov = 0 * var;  // sum_k s_k^2 r_k; the position table adds nothing
    if (config_.token) cov = cov + v_tok * table_corr_len(EmbeddingTable::token);
    if (config_.segment) cov = cov + v_seg * table_corr_len(EmbeddingTable::segment);
    Moments<T> out;
    out.mean = 0 * config_.weight_var;  // 0 even when var overflows (reported as var)
    out.var = var;
    // All tables at variance 0: the output is the constant 0; report r = 0.
    out.corr_len = math::ratio_or(cov, var, 0);
    out.corr_dim = 0 * config_.weight_var;
    return out;
  }

  /// dLoss/dE_k[idx_k(l)] = dLoss/dx_l: the gradient passes unchanged.
  GradMoments<T> backward_impl(const Moments<T>&, const GradMoments<T>& g) const { return g; }

  /// Variance of the gradient accumulated in one row of table `t` (one
  /// hidden unit), dLoss/dE[row] = sum_{l : idx(l) = row} g_l, given the
  /// moments (g2, r_g) of the gradient at the output. With N the number of
  /// positions that read the row, Var = g2 (E[N] + r_g E[N (N - 1)]):
  ///   token, rank i in [1, |V|]:  E[N] = L p_i, E[N (N - 1)] = L (L - 1) p_i^2
  ///     (multinomial counts; exact for i.i.d. tokens whatever token_corr says);
  ///   position, row in [1, L]:    N = 1;
  ///   segment, row in {1, 2}:     E[N] = L/2, E[N (N - 1)] = L (L - 2)/3 for the
  ///     {1, ..., L-1} split, L (L - 1)/3 for {0, ..., L}, L^2/3 - L/2 for the
  ///     paper's continuous split (both segments alike by symmetry).
  T row_grad_var(EmbeddingTable t, const T& row, const GradMoments<T>& g) const {
    constexpr const char* fn = "sigprop::Embedding::row_grad_var";
    if (!has_table(t))
      detail::raise_domain(fn, std::string("the ") + to_string(t) + " table is not part of this embedding");
    require_grad_moments(fn, g);
    const T& L = config_.seq_len;
    const T one = 1 + 0 * row;
    T count = one, pairs = 0 * row;  // E[N], E[N (N - 1)]
    switch (t) {
      case EmbeddingTable::token: {
        require_row(fn, row, config_.vocab + 0 * row);  // ranks 1..|V|, named as this function's row
        const T p = zipf_probability(config_.vocab, row);
        count = L * p;
        pairs = L * (L - 1) * p * p;
        break;
      }
      case EmbeddingTable::position:
        require_row(fn, row, L);
        break;
      case EmbeddingTable::segment:
        require_row(fn, row, 2 * one);
        count = L / 2;
        switch (config_.segment_corr) {
          case SegmentCorrelation::nonempty_exact: pairs = L * (L - 2) / 3; break;
          case SegmentCorrelation::inclusive_exact: pairs = L * (L - 1) / 3; break;
          case SegmentCorrelation::paper: pairs = L * L / 3 - L / 2; break;
        }
        break;
    }
    const T out = g.var * (count + g.corr_len * pairs);
    check_result(fn, "row_grad_var", out);
    return out;
  }

 private:
  explicit Embedding(const Moments<T>& moments) : measured_(moments) {}

  static void require_row(const char* fn, const T& row, const T& rows) {
    require_width(fn, "row", row, 1);
    for (std::size_t i = 0; i < lane_count(row); ++i) {
      const double r = static_cast<double>(lane(row, i));
      const double n = static_cast<double>(lane(rows, lane_count(rows) == 1 ? 0 : i));
      if (r > n || r != std::floor(r))
        sigprop::detail::raise_domain(fn, "row", r,
                                      "{1, ..., " + sigprop::detail::format_number(n) + "}");
    }
  }

  EmbeddingConfig<T> config_;
  std::optional<Moments<T>> measured_;
};

}  // namespace sigprop
