// sigprop/montecarlo/validation.hpp -- comparing closed forms with simulation
// the way Kedia et al. (ICML 2024) report it in appendix E, Table 20.
//
// Error of one quantity at one grid point: |measured - predicted| / |measured|;
// for means and covariances the denominator is the predicted variance when
// that is larger than |measured| (a covariance near 0 is not a relative
// target). Reported as the 50th/90th/99th percentiles over the grid.
//
// Sampling noise: each measurement carries a standard error se. Pure noise
// alone would give relative errors |N(0, se/|m|)|, whose p-th percentile is
// z_p * (p-th percentile of se/|m|) with z_50 = 0.674, z_90 = 1.645,
// z_99 = 2.576. `noise_margin` returns that figure: a test asserting
// "ours <= paper + noise_margin" allows exactly what our smaller sample size
// adds, nothing more.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <boost/math/tools/toms748_solve.hpp>

#include "sigprop/core/moments.hpp"
#include "sigprop/montecarlo/random.hpp"
#include "sigprop/montecarlo/statistics.hpp"

namespace sigprop::montecarlo {

/// The columns of Table 20.
enum class Quantity { mean, var, cov, grad_var, grad_cov };

inline const char* to_string(Quantity q) {
  switch (q) {
    case Quantity::mean: return "mean";
    case Quantity::var: return "var";
    case Quantity::cov: return "cov";
    case Quantity::grad_var: return "grad var";
    case Quantity::grad_cov: return "grad cov";
  }
  return "?";
}

inline constexpr std::array<Quantity, 5> all_quantities{Quantity::mean, Quantity::var, Quantity::cov,
                                                        Quantity::grad_var, Quantity::grad_cov};

/// p50/p90/p99 of relative errors, in percent.
struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0;
};

/// Percentile with linear interpolation between order statistics (the
/// default of numpy.percentile), q in [0, 100].
inline double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q / 100 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const auto hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

inline Percentiles percentiles_of(const std::vector<double>& v) {
  return {percentile(v, 50), percentile(v, 90), percentile(v, 99)};
}

/// Table 20 of Kedia et al. (percent); a negative entry means "not reported".
struct PaperRow {
  const char* component;
  std::array<Percentiles, 5> by_quantity;  // indexed like all_quantities
};

inline const std::vector<PaperRow>& paper_table20() {
  static const std::vector<PaperRow> rows = {
      {"linear", {{{0.0, 0.4, 1.3}, {0.4, 1.4, 2.8}, {0.4, 1.4, 2.8}, {0.2, 1.0, 2.2}, {0.2, 1.0, 2.2}}}},
      {"relu", {{{0.3, 1.3, 2.3}, {0.5, 1.9, 3.4}, {0.3, 1.6, 3.1}, {0.6, 1.5, 2.6}, {0.2, 1.1, 2.3}}}},
      {"gelu", {{{0.1, 1.0, 2.4}, {0.2, 0.6, 1.3}, {0.1, 0.5, 1.2}, {0.2, 0.6, 1.1}, {0.1, 0.4, 0.9}}}},
      {"layernorm", {{{0, 0, 0}, {0, 0, 0}, {0.1, 0.5, 1.0}, {0.4, 1.5, 3.2}, {0.2, 0.9, 2.2}}}},
      {"dropout", {{{0.0, 0.1, 0.5}, {0.1, 0.5, 1.5}, {0.0, 0.4, 1.3}, {0.1, 0.7, 1.5}, {0.1, 0.5, 1.2}}}},
      {"softmax", {{{0, 0, 0}, {0.2, 0.9, 4.0}, {-1, -1, -1}, {0.1, 0.6, 4.5}, {-1, -1, -1}}}},
      {"attention", {{{0.2, 1.0, 2.5}, {1.4, 4.1, 7.8}, {1.3, 3.9, 7.4}, {2.2, 13.3, 44.5}, {1.6, 4.5, 8.2}}}},
  };
  return rows;
}

/// The paper's percentiles for `component` and `q`; p50 < 0 if not reported.
inline Percentiles paper_percentiles(const std::string& component, Quantity q) {
  for (const auto& row : paper_table20())
    if (component == row.component) return row.by_quantity[static_cast<std::size_t>(q)];
  return {-1, -1, -1};
}

/// Relative errors of a component over a grid, per quantity.
class ValidationReport {
 public:
  explicit ValidationReport(std::string component) : component_(std::move(component)) {}

  const std::string& component() const { return component_; }

  /// Adds one comparison. `scale` is the predicted variance used as the
  /// denominator floor for means and covariances (pass 0 for variances).
  void add(Quantity q, const Estimate& measured, double predicted, double scale = 0) {
    const double denom = std::max(std::abs(measured.value), scale);
    auto& s = samples_[q];
    s.errors.push_back(100 * std::abs(measured.value - predicted) / denom);
    s.noise.push_back(100 * measured.std_error / denom);
    s.z.push_back(measured.std_error > 0 ? std::abs(measured.value - predicted) / measured.std_error
                                         : 0);
  }

  /// Records every Table 20 quantity of a forward + backward comparison.
  void add_all(const Moments<double>& in_pred_out, const GradMoments<double>& grad_pred,
               const SimulationResult& sim, bool with_cov = true, bool with_grad_cov = true) {
    add(Quantity::mean, sim.forward.mean, in_pred_out.mean, in_pred_out.var);
    add(Quantity::var, sim.forward.var, in_pred_out.var);
    if (with_cov) add(Quantity::cov, sim.forward.cov_len, in_pred_out.cov_len(), in_pred_out.var);
    add(Quantity::grad_var, sim.backward.var, grad_pred.var);
    if (with_grad_cov)
      add(Quantity::grad_cov, sim.backward.cov_len, grad_pred.cov_len(), grad_pred.var);
  }

  bool has(Quantity q) const { return samples_.count(q) > 0; }
  std::size_t points(Quantity q) const { return has(q) ? samples_.at(q).errors.size() : 0; }

  /// Our percentiles of the relative error (percent).
  Percentiles errors(Quantity q) const { return percentiles_of(samples_.at(q).errors); }

  /// What sampling noise alone contributes at each percentile (percent): the
  /// percentiles of the mixture of |N(0, se_i/|m_i|)| over the grid points,
  /// taken at the level q + 2.5 sqrt(q(1-q)/n) (capped at 1 - 1/(2n)) because
  /// a percentile of n points itself fluctuates by about sqrt(q(1-q)/n) in
  /// level (the binomial standard error of the order statistic).
  Percentiles noise_margin(Quantity q) const {
    const auto& n = samples_.at(q).noise;
    return {noise_percentile(n, 0.50), noise_percentile(n, 0.90), noise_percentile(n, 0.99)};
  }

  /// Largest |measured - predicted| / se over the grid.
  double max_z(Quantity q) const {
    const auto& z = samples_.at(q).z;
    return z.empty() ? 0 : *std::max_element(z.begin(), z.end());
  }

  /// Raw per-point errors (percent), in the order added.
  const std::vector<double>& raw_errors(Quantity q) const { return samples_.at(q).errors; }

 private:
  // x with mean_i P(|N(0, s_i)| <= x) = q (after the level adjustment), by TOMS 748 (Alefeld, Potra and
  // Shi, ACM TOMS 21(3), 1995) on the bracket [0, 4 max s_i].
  static double noise_percentile(const std::vector<double>& sd, double q) {
    const double n = static_cast<double>(sd.size());
    q = std::min(q + 2.5 * std::sqrt(q * (1 - q) / n), 1 - 0.5 / n);
    double top = 0;
    for (double s : sd) top = std::max(top, s);
    if (!(top > 0) || !std::isfinite(top)) return top;
    auto excess = [&](double x) {
      double c = 0;
      for (double s : sd) c += s > 0 ? std::erf(x / (s * std::sqrt(2.0))) : 1.0;
      return c / static_cast<double>(sd.size()) - q;
    };
    std::uintmax_t iterations = 100;
    const auto r = boost::math::tools::toms748_solve(excess, 0.0, 6 * top,
                                                     boost::math::tools::eps_tolerance<double>(30),
                                                     iterations);
    return (r.first + r.second) / 2;
  }

  struct Samples {
    std::vector<double> errors, noise, z;
  };
  std::string component_;
  std::map<Quantity, Samples> samples_;
};

/// Size of a validation grid. `scale` in (0, 1] shrinks widths and lengths
/// from the paper's Table 21 ranges so that the unit tests stay fast.
///
/// Trials per point: with random weights, a trial contributes about as many
/// independent values as it has independent columns (hidden units or output
/// units), so the relative standard error of a variance is about
/// sqrt(2 / (columns * trials)). `trials_for` picks enough trials for
/// `independent_samples` columns in total, between min_trials and max_trials.
struct GridOptions {
  std::size_t points = 40;
  double scale = 1;
  std::uint64_t seed = 2024;
  std::size_t independent_samples = 20000;
  std::size_t min_trials = 4;
  std::size_t max_trials = 4096;

  std::size_t trials_for(double columns) const {
    const double t = std::ceil(static_cast<double>(independent_samples) / std::max(columns, 1.0));
    return static_cast<std::size_t>(std::clamp(t, static_cast<double>(min_trials),
                                               static_cast<double>(max_trials)));
  }
};

/// Log-uniform integer in [lo, hi].
inline Eigen::Index log_uniform_int(Random& rng, double lo, double hi) {
  return static_cast<Eigen::Index>(std::lround(std::exp(std::log(lo) + rng.uniform() * (std::log(hi) - std::log(lo)))));
}

/// Uniform in [lo, hi).
inline double uniform_in(Random& rng, double lo, double hi) { return lo + rng.uniform() * (hi - lo); }

/// Log-uniform in [lo, hi).
inline double log_uniform_in(Random& rng, double lo, double hi) {
  return std::exp(uniform_in(rng, std::log(lo), std::log(hi)));
}

/// Table 21 input moments: s^2 log-uniform in [0.1, 10], r uniform in [0, 1),
/// mean uniform in [-mean_range, mean_range] (0 when mean_range is 0).
inline Moments<double> table21_input(Random& rng, double mean_range = 0) {
  Moments<double> in{0, log_uniform_in(rng, 0.1, 10), uniform_in(rng, 0, 1), 0};
  if (mean_range > 0) in.mean = uniform_in(rng, -mean_range, mean_range);
  return in;
}

/// Table 21 upstream gradient: g^2 log-uniform in [0.1, 10], r_g uniform in [0, 1).
inline GradMoments<double> table21_grad(Random& rng) {
  return {log_uniform_in(rng, 0.1, 10), uniform_in(rng, 0, 1)};
}

/// Table 21 sizes for a width-preserving component: d in [10, 1000] and
/// L in [100, 1000] (upper ends shrunk by opt.scale), log-uniform; trials for
/// d independent columns; a fresh seed.
inline SimulationSetup table21_setup(Random& rng, const GridOptions& opt) {
  SimulationSetup setup;
  setup.width = log_uniform_int(rng, 10, 1000 * opt.scale + 10);
  setup.seq_len = log_uniform_int(rng, 100, 1000 * opt.scale + 100);
  setup.trials = opt.trials_for(static_cast<double>(setup.width));
  setup.seed = rng.next();
  return setup;
}

}  // namespace sigprop::montecarlo
