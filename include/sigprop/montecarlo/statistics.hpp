// sigprop/montecarlo/statistics.hpp -- measuring moments of simulated tensors.
//
// The statistics of Kedia et al. (ICML 2024), appendix E, measured over
// independent trials (fresh weights and inputs each):
//   mean, variance  over all entries;
//   length covariance = mean over hidden units of the off-diagonal entries of
//     the L x L second-moment matrix, minus mean^2;
//   hidden covariance likewise across hidden units within a position.
// Raw moments are averaged per trial and centred with the mean pooled over all
// trials, so the estimate has no 1/d bias from a per-trial mean. Standard
// errors come from the spread across trials (ratios by the delta method).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "sigprop/core/errors.hpp"

namespace sigprop::montecarlo {

/// A measured value with its standard error.
struct Estimate {
  double value = 0;
  double std_error = 0;
};

/// Measured forward moments.
struct MomentEstimates {
  Estimate mean, var, cov_len, cov_dim, corr_len, corr_dim;
};

/// Measured gradient moments.
struct GradEstimates {
  Estimate var, cov_len, corr_len;
};

namespace detail {

struct RawMoments {
  double m1 = 0, m2 = 0, len = 0, dim = 0;  // E[x], E[x^2], E[x_i x_k]_len, E[x_j x_k]_dim
};

inline RawMoments raw_moments(const Eigen::MatrixXd& x) {
  const double L = static_cast<double>(x.rows()), d = static_cast<double>(x.cols());
  const double n = L * d;
  RawMoments r;
  r.m1 = x.sum() / n;
  const double sq = x.squaredNorm();
  r.m2 = sq / n;
  // sum_j [(sum_i x_ij)^2 - sum_i x_ij^2] / (d L (L - 1))
  r.len = L > 1 ? (x.colwise().sum().squaredNorm() - sq) / (d * L * (L - 1)) : 0;
  r.dim = d > 1 ? (x.rowwise().sum().squaredNorm() - sq) / (L * d * (d - 1)) : 0;
  return r;
}

inline Estimate mean_estimate(const std::vector<double>& v) {
  const double n = static_cast<double>(v.size());
  double s = 0;
  for (double x : v) s += x;
  const double mean = s / n;
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  const double se = v.size() > 1 ? std::sqrt(ss / (n - 1) / n)
                                 : std::numeric_limits<double>::infinity();
  return {mean, se};
}

// ratio of means num/den with the delta-method standard error.
inline Estimate ratio_estimate(const std::vector<double>& num, const std::vector<double>& den) {
  const Estimate a = mean_estimate(num), b = mean_estimate(den);
  if (b.value == 0) return {0, std::numeric_limits<double>::infinity()};
  const double q = a.value / b.value;
  std::vector<double> lin(num.size());
  for (std::size_t t = 0; t < num.size(); ++t) lin[t] = (num[t] - q * den[t]) / b.value;
  return {q, mean_estimate(lin).std_error};
}

}  // namespace detail

/// Accumulates the statistics of one simulated tensor over trials.
class MomentAccumulator {
 public:
  /// Adds one trial's L x d tensor (rows are positions).
  void add(const Eigen::MatrixXd& x) { trials_.push_back(detail::raw_moments(x)); }

  std::size_t trials() const { return trials_.size(); }

  MomentEstimates result() const {
    if (trials_.empty())
      sigprop::detail::raise_domain("sigprop::montecarlo::MomentAccumulator", "no trials were added");
    std::vector<double> m1, var, len, dim;
    double pooled = 0;
    for (const auto& t : trials_) pooled += t.m1;
    pooled /= static_cast<double>(trials_.size());
    for (const auto& t : trials_) {
      m1.push_back(t.m1);
      var.push_back(t.m2 - pooled * pooled);
      len.push_back(t.len - pooled * pooled);
      dim.push_back(t.dim - pooled * pooled);
    }
    MomentEstimates e;
    e.mean = detail::mean_estimate(m1);
    e.var = detail::mean_estimate(var);
    e.cov_len = detail::mean_estimate(len);
    e.cov_dim = detail::mean_estimate(dim);
    e.corr_len = detail::ratio_estimate(len, var);
    e.corr_dim = detail::ratio_estimate(dim, var);
    return e;
  }

  /// Gradient view (the gradient's mean is zero by construction of the
  /// backward maps; it is still estimated, not assumed).
  GradEstimates grad_result() const {
    const MomentEstimates e = result();
    return {e.var, e.cov_len, e.corr_len};
  }

 private:
  std::vector<detail::RawMoments> trials_;
};

/// The linear share (core/hidden_spread.hpp) of one trial's branch output f
/// in the residual input x (both L x d, rows are positions): the excess of
/// their sample cross-covariance C = dx^T df/(L - 1) over what independent
/// rows give, in the units of the residual rule,
///   (d ||C||_F^2 / (tr S_x tr S_f) - d/(L - 1)) / (1 + a_x),
/// a_x = d tr(S_x^2)/tr(S_x)^2 - 1 - d/(L - 1). Averaged over trials it is
/// the share that makes the rule's cross term 2 A B_lin (1 + a_x) exact.
inline double cross_share(const Eigen::MatrixXd& x, const Eigen::MatrixXd& f) {
  const double L = static_cast<double>(x.rows()), d = static_cast<double>(x.cols());
  const Eigen::MatrixXd dx = x.rowwise() - x.colwise().mean(), df = f.rowwise() - f.colwise().mean();
  const Eigen::MatrixXd sx = dx.transpose() * dx / (L - 1), c = dx.transpose() * df / (L - 1);
  const double tx = sx.trace(), tf = df.squaredNorm() / (L - 1);
  if (!(tx > 0) || !(tf > 0)) return 0;
  const double spread_x = d * sx.squaredNorm() / (tx * tx) - 1 - d / (L - 1);
  return (d * c.squaredNorm() / (tx * tf) - d / (L - 1)) / (1 + spread_x);
}

/// Accumulates the whole-vector moments of core/moments.hpp over trials:
/// norm_var_ratio of an activation and the alignments of its gradient.
class VectorMomentAccumulator {
 public:
  /// Adds one trial's activation x (L x d, rows are positions) and, if
  /// non-empty, the gradient g at the same point.
  void add(const Eigen::MatrixXd& x, const Eigen::MatrixXd& g = {}) {
    const double d = static_cast<double>(x.cols());
    const Eigen::MatrixXd centred = x.colwise() - x.rowwise().mean();
    const Eigen::VectorXd q = centred.rowwise().squaredNorm();
    width_ = d;
    sq_norm_.push_back(q.mean());
    sq_norm_within_.push_back((q.array() - q.mean()).square().mean());
    // The hidden covariance of the position-specific part within the trial.
    const double L = static_cast<double>(x.rows());
    const Eigen::MatrixXd deviations = x.rowwise() - x.colwise().mean();
    // Sample-size corrections from the rows' own fourth moments (n = L - 1,
    // q_i = |delta_i|^2): E ||S^||_F^2 = tr(S^2)(1 - 1/n) + E[q^2]/n and
    // E tr(S^)^2 = tr(S)^2 + Var[q]/n, so Gaussian rows, rows of fixed norm
    // and dropout's heavier tails all read 0 for an isotropic S.
    const double n = L - 1;
    const Eigen::MatrixXd cov = deviations.transpose() * deviations / n;
    const Eigen::ArrayXd row_sq = deviations.rowwise().squaredNorm().array();
    const double q2 = row_sq.square().mean(), q_var = (row_sq - row_sq.mean()).square().sum() / (L - 1);
    const double trace = cov.trace();
    const double trace_sq = (cov.squaredNorm() - q2 / n) / (1 - 1 / n), trace2 = trace * trace - q_var / n;
    if (trace2 > 0) hidden_spread_.push_back(d * trace_sq / trace2 - 1);
    if (g.size() == 0) return;
    // Per row: (g . x_c/|x_c|)^2, (g . 1)^2/d and |g|^2/d.
    const Eigen::VectorXd along_x = g.cwiseProduct(centred).rowwise().sum().array().square() / q.array();
    along_activation_.push_back(along_x.sum());
    along_mean_.push_back(g.rowwise().sum().squaredNorm() / d);
    energy_.push_back(g.squaredNorm() / d);
  }

  /// Var[|x_c|^2] / (2 E[|x_c|^2]^2/(d - 1)), split by the law of total
  /// variance into the variance within a trial and that of the trial's mean
  /// row norm (the part all rows share: the weights, the part common to all
  /// positions), per trial around the pooled mean. The split keeps the
  /// shared part's fourth moment out of the standard error.
  Estimate norm_var_ratio() const {
    require(!sq_norm_.empty());
    if (sq_norm_.size() < 2)
      sigprop::detail::raise_domain("sigprop::montecarlo::VectorMomentAccumulator", "trials",
                                    std::to_string(sq_norm_.size()), "[2, inf) (norm_var_ratio's standard error)");
    const double m = detail::mean_estimate(sq_norm_).value, n = static_cast<double>(sq_norm_.size());
    std::vector<double> per_trial;
    for (std::size_t t = 0; t < sq_norm_.size(); ++t) {
      const double shared = (sq_norm_[t] - m) * (sq_norm_[t] - m) * n / (n - 1);
      per_trial.push_back((width_ - 1) / 2 * (sq_norm_within_[t] + shared) / (m * m));
    }
    return detail::mean_estimate(per_trial);
  }

  /// The spread of the hidden covariance S of the position-specific part
  /// within a trial, d tr(S^2)/tr(S)^2 - 1 (core/hidden_spread.hpp), with
  /// tr(S^2) and tr(S)^2 corrected for the L rows' sampling (add()): 0 for
  /// rows whose covariance is isotropic, ~1 after a square random linear
  /// map. Its mean over the trials.
  Estimate hidden_spread() const {
    require(!hidden_spread_.empty());
    return detail::mean_estimate(hidden_spread_);
  }

  /// E[(g . x_c/|x_c|)^2] / (E|g|^2/d).
  Estimate align_activation() const {
    require(!energy_.empty());
    return detail::ratio_estimate(along_activation_, energy_);
  }

  /// E[(g . 1)^2/d] / (E|g|^2/d).
  Estimate align_mean() const {
    require(!energy_.empty());
    return detail::ratio_estimate(along_mean_, energy_);
  }

 private:
  static void require(bool added) {
    if (!added) sigprop::detail::raise_domain("sigprop::montecarlo::VectorMomentAccumulator", "no trials were added");
  }

  double width_ = 0;
  std::vector<double> sq_norm_, sq_norm_within_, along_activation_, along_mean_, energy_, hidden_spread_;
};

/// What one simulation of a component measured.
struct SimulationResult {
  MomentEstimates forward;
  GradEstimates backward;
};

/// Where and how long to simulate. Widths a component fixes itself (Linear's
/// d_in, LayerNorm's d, attention's d_in) override `width`.
struct SimulationSetup {
  Eigen::Index seq_len = 256;  ///< L
  Eigen::Index width = 256;    ///< hidden width of the input for width-free components
  std::size_t trials = 16;     ///< independent trials (>= 2, for standard errors)
  std::uint64_t seed = 1;
  /// simulate_model: also record each row's position pairs (ModelSimulation::
  /// forward_pairs and the others; L x L per row, so off by default).
  bool position_pairs = false;
  /// Weights (and biases) uniform of the same variance instead of Gaussian
  /// (Random::uniform_matrix; PyTorch's default initializations).
  bool uniform_weights = false;
};

/// A component's width as a simulation size: a positive integer.
inline Eigen::Index to_size(const char* function, const char* parameter, double value) {
  if (!(value >= 1 && value <= 1e9 && std::floor(value) == value))
    sigprop::detail::raise_domain(function, parameter, value, "{1, 2, ..., 1e9} (a simulated width)");
  return static_cast<Eigen::Index>(value);
}

/// Checks a setup before simulating.
inline void require_setup(const char* function, const SimulationSetup& s) {
  to_size(function, "seq_len", static_cast<double>(s.seq_len));
  to_size(function, "width", static_cast<double>(s.width));
  if (s.trials < 2)
    sigprop::detail::raise_domain(function, "trials", std::to_string(s.trials),
                                  "[2, inf) (standard errors need two trials)");
}

}  // namespace sigprop::montecarlo
