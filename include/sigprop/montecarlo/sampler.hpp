// sigprop/montecarlo/sampler.hpp -- inputs with prescribed moments.
//
// The validation setting of Kedia et al. (ICML 2024), appendix E: entries of
// an L x d tensor are Gaussian with a compound-symmetric covariance along
// length (variance s^2 on the diagonal, r s^2 off it), independently per
// hidden unit; optionally also correlated along the hidden axis (r^d):
//   x_ij = mu + sqrt(r s^2) a_j + sqrt(r^d s^2) b_i + sqrt((1 - r - r^d) s^2) e_ij
// with a, b, e i.i.d. N(0, 1). This needs r, r^d >= 0 and r + r^d <= 1.
#pragma once

#include <algorithm>
#include <cmath>

#include <Eigen/Core>

#include "sigprop/core/moments.hpp"
#include "sigprop/core/validate.hpp"
#include "sigprop/montecarlo/random.hpp"
#include "sigprop/montecarlo/statistics.hpp"

namespace sigprop::montecarlo {

/// L x d matrix with the given forward moments (rows are positions).
inline Eigen::MatrixXd sample_activations(Eigen::Index seq_len, Eigen::Index width,
                                          const Moments<double>& m, Random& rng) {
  constexpr const char* fn = "sigprop::montecarlo::sample_activations";
  require_width(fn, "seq_len", static_cast<double>(seq_len));
  require_width(fn, "width", static_cast<double>(width));
  require_moments(fn, m);
  sigprop::detail::require(fn, "corr_len", m.corr_len, [](double v) { return v >= 0; },
                  "[0, 1] (a simulated input needs a non-negative correlation)");
  sigprop::detail::require(
      fn, "corr_dim", m.corr_dim, [&](double v) { return v >= 0 && v + m.corr_len <= 1; },
                  "[0, 1 - corr_len]");
  const double a = std::sqrt(m.corr_len * m.var);
  const double b = std::sqrt(m.corr_dim * m.var);
  const double e = std::sqrt((1 - m.corr_len - m.corr_dim) * m.var);
  Eigen::MatrixXd x = rng.normal_matrix(seq_len, width, e * e);
  if (a > 0) x.rowwise() += a * rng.normal_matrix(1, width).row(0);
  if (b > 0) x.colwise() += b * rng.normal_matrix(seq_len, 1).col(0);
  x.array() += m.mean;
  return x;
}

/// L x d matrix with the given moments and a separable (Kronecker) covariance,
/// Cov[x_ij, x_kl] = s^2 R^l_ik R^d_jl: a sample with r^d = 0 multiplied on the
/// right by the square root of the compound-symmetric R^d,
///   x_i = mu + sqrt(1 - r^d) (z_i - mean(z_i)) + sqrt(1 + (d - 1) r^d) mean(z_i).
/// Valid for r^d in [-1/(d - 1), 1]; a centering projection (LayerNorm)
/// produces this structure, and the normalizing components are derived for it.
/// With r^d = 0 it is the distribution of sample_activations.
inline Eigen::MatrixXd sample_activations_separable(Eigen::Index seq_len, Eigen::Index width,
                                                    const Moments<double>& m, Random& rng) {
  constexpr const char* fn = "sigprop::montecarlo::sample_activations_separable";
  require_moments(fn, m);
  const double d = static_cast<double>(width);
  sigprop::detail::require(fn, "corr_dim", m.corr_dim,
                           [d](double v) { return d > 1 ? v >= -1 / (d - 1) : v == 0; },
                           "[-1/(width - 1), 1]");
  Eigen::MatrixXd z = sample_activations(seq_len, width, Moments<double>{0, m.var, m.corr_len, 0}, rng);
  const Eigen::VectorXd row_mean = z.rowwise().mean();
  z.colwise() -= row_mean;
  z *= std::sqrt(1 - m.corr_dim);
  z.colwise() += std::sqrt(std::max(1 + (d - 1) * m.corr_dim, 0.0)) * row_mean;
  z.array() += m.mean;
  return z;
}

/// L x d upstream gradient with the given moments (zero mean).
inline Eigen::MatrixXd sample_gradient(Eigen::Index seq_len, Eigen::Index width,
                                       const GradMoments<double>& g, Random& rng) {
  return sample_activations(seq_len, width, Moments<double>{0, g.var, g.corr_len, 0}, rng);
}

/// Simulates a row-wise map (LayerNorm, softmax) of an L x width input drawn
/// with sample_activations_separable: `pass(x, g)` returns the output and the
/// input gradient (members `out`, `grad_in`) for the upstream gradient g.
template <class Pass>
SimulationResult simulate_rowwise(Eigen::Index width, const Moments<double>& in,
                                  const GradMoments<double>& grad, const SimulationSetup& setup,
                                  Pass pass) {
  Random rng(setup.seed);
  MomentAccumulator fwd, bwd;
  for (std::size_t t = 0; t < setup.trials; ++t) {
    const Eigen::MatrixXd x = sample_activations_separable(setup.seq_len, width, in, rng);
    const Eigen::MatrixXd g = sample_gradient(setup.seq_len, width, grad, rng);
    const auto p = pass(x, g);
    fwd.add(p.out);
    bwd.add(p.grad_in);
  }
  return {fwd.result(), bwd.grad_result()};
}

}  // namespace sigprop::montecarlo
