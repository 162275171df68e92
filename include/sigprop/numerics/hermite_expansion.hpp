// sigprop/numerics/hermite_expansion.hpp -- the Hermite expansion of
// a function of a standard Gaussian, and the pair moments it gives in closed
// form (Mehler's formula).
//
// A function f with E[f(z)^2] < inf, z ~ N(0, 1), has the expansion
//   f(z) = sum_k a_k h_k(z),   a_k = E[f(z) h_k(z)],
// h_k = He_k / sqrt(k!) the orthonormal (probabilists') Hermite polynomials.
// For a pair z1, z2 of standard Gaussians with correlation r, Mehler's formula
// E[h_j(z1) h_k(z2)] = delta_jk r^k gives
//   Cov[f(z1), f(z2)]    = sum_{k >= 1} a_k^2 r^k,
//   E[f'(z1) f'(z2)]     = sum_{k >= 1} k a_k^2 r^(k - 1)
// (the second since h_k' = sqrt(k) h_{k-1}; Stein's lemma), and at r = 1
// Parseval's Var[f] = sum_{k >= 1} a_k^2, E[f'^2] = sum_{k >= 1} k a_k^2
// (O'Donnell, "Analysis of Boolean Functions", 2014, ch. 11; for the
// correlation maps of wide networks: Daniely, Frostig and Singer, NeurIPS
// 2016, "dual activations"). One set of 1-D coefficients therefore replaces
// a 2-D integral for every r.
//
// Coefficients. a_k for k < K = N/2 by the N-point Gauss-Hermite rule for the
// Gaussian weight, N = 64, 128, 256 or 512 (exact when f is a polynomial of
// degree below 2N - k). Nodes: eigenvalues of the Jacobi matrix of the h_k
// (off-diagonal sqrt(k)), Golub and Welsch, "Calculation of Gauss quadrature
// rules" (Math. Comp. 23, 1969), by Eigen's tridiagonal solver, then three
// Newton steps on h_N. Weights: w_j = 1/(N h_{N-1}(z_j)^2) (Gautschi,
// "Orthogonal Polynomials", 2004, eq. 1.4.13 with the Christoffel-Darboux
// identity). The products w_j h_k(z_j) are formed from the Hermite functions
// psi_k = h_k sqrt(phi), which stay below 1 in magnitude, so nothing
// overflows at the outer nodes (|z| up to 45 for N = 512).
//
// When to trust it. Truncating at K leaves at most the energy not yet
// captured, Var[f] - sum_{1 <= k < K} a_k^2, in every pair moment (|r| <= 1),
// and errors of the coefficients show in the same difference. A caller passes
// Var[f] (or E[f'^2]) computed independently (by adaptive quadrature) and the
// expansion is used only if that difference is within `tolerance` of it: the
// rule size grows until it is, and the caller falls back to 2-D quadrature
// when even N = 256 does not close. For SiLU this holds up to input variance
// about 4 (docs/components/silu.md); the coefficients of a function analytic
// in the strip |Im z| < tau decay like exp(-tau sqrt(2k)), and SiLU(mu + s z)
// has its poles at Im z = +-pi/s.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <optional>
#include <type_traits>
#include <vector>

#include <Eigen/Core>
#include <Eigen/Eigenvalues>

#include "sigprop/numerics/math.hpp"

namespace sigprop::detail {

/// The N-point Gauss-Hermite rule for the standard Gaussian weight and the
/// projection onto the first N/2 orthonormal Hermite polynomials:
/// a_k = sum_j projection(k, j) f(z_j), projection(k, j) = w_j h_k(z_j).
template <class R>
struct GaussHermiteRule {
  using Vector = Eigen::Matrix<R, Eigen::Dynamic, 1>;
  using Matrix = Eigen::Matrix<R, Eigen::Dynamic, Eigen::Dynamic>;

  Vector nodes;
  Matrix projection;  // N/2 x N

  explicit GaussHermiteRule(int n) : nodes(n), projection(n / 2, n) {
    using std::sqrt;
    Vector diagonal = Vector::Zero(n), off(n - 1);
    for (int k = 0; k + 1 < n; ++k) off(k) = sqrt(R(k + 1));
    Eigen::SelfAdjointEigenSolver<Matrix> solver;
    solver.computeFromTridiagonal(diagonal, off, Eigen::EigenvaluesOnly);
    std::vector<R> psi(static_cast<std::size_t>(n));
    for (int j = 0; j < n; ++j) {
      R z = solver.eigenvalues()(j);
      for (int step = 0; step < 3; ++step) {  // Newton on h_N, h_N' = sqrt(N) h_{N-1}
        hermite_functions(z, psi);
        const R last = recurrence_step(z, psi, n);
        z -= last / (sqrt(R(n)) * psi.back());
      }
      nodes(j) = z;
      hermite_functions(z, psi);
      // w_j h_k(z_j) = sqrt(phi) psi_k / (N psi_{N-1}^2), from w_j = phi/(N psi_{N-1}^2).
      const R scale = psi.front() / (R(n) * psi.back() * psi.back());
      for (int k = 0; k < n / 2; ++k) projection(k, j) = scale * psi[static_cast<std::size_t>(k)];
    }
  }

  /// The weight of node j (projection onto h_0 = 1).
  R weight(Eigen::Index j) const { return projection(0, j); }

  /// The rule with 64 << level nodes (level 0 to 3), each built on first use
  /// (thread-safe statics).
  static const GaussHermiteRule& of_level(int level) {
    switch (level) {
      case 0: {
        static const GaussHermiteRule rule(64);
        return rule;
      }
      case 1: {
        static const GaussHermiteRule rule(128);
        return rule;
      }
      case 2: {
        static const GaussHermiteRule rule(256);
        return rule;
      }
      default: {
        static const GaussHermiteRule rule(512);
        return rule;
      }
    }
  }
  static constexpr int levels = 4;

 private:
  // psi_k(z) = h_k(z) sqrt(phi(z)) for k < psi.size(): psi_0 = (2 pi)^(-1/4) e^(-z^2/4),
  // psi_{k+1} = (z psi_k - sqrt(k) psi_{k-1}) / sqrt(k + 1).
  static void hermite_functions(R z, std::vector<R>& psi) {
    using std::exp;
    using std::sqrt;
    psi[0] = exp(-z * z / 4) / sqrt(sqrt(2 * math::pi<R>()));
    if (psi.size() > 1) psi[1] = z * psi[0];
    for (std::size_t k = 1; k + 1 < psi.size(); ++k)
      psi[k + 1] = (z * psi[k] - sqrt(R(k)) * psi[k - 1]) / sqrt(R(k + 1));
  }
  // psi_N from psi_{N-1} and psi_{N-2}.
  static R recurrence_step(R z, const std::vector<R>& psi, int n) {
    using std::sqrt;
    const std::size_t m = psi.size();
    return (z * psi[m - 1] - sqrt(R(n - 1)) * psi[m - 2]) / sqrt(R(n));
  }
};

/// The Hermite coefficients a_1 .. a_{K-1} of a function of z ~ N(0, 1) and
/// the pair moments they give (header comment). a_0 = E[f] is not kept: the
/// pair moments are covariances.
template <class R>
class HermiteExpansion {
 public:
  /// Which Parseval sum `expand` checks against the caller's value.
  enum class Check { value, derivative };

  /// The expansion of f from the smallest rule whose Parseval sum is within
  /// `tolerance` (relative) of `energy`: Var[f] for Check::value, E[f'^2] for
  /// Check::derivative. Empty if none closes (then use 2-D quadrature).
  template <class F>
  static std::optional<HermiteExpansion> expand(F f, R energy, Check check, R tolerance) {
    if constexpr (!std::is_floating_point_v<R>) {
      return std::nullopt;  // multiprecision types keep the 2-D quadrature
    } else {
      if (!(energy > 0) || !std::isfinite(energy)) return std::nullopt;
      for (int level = 0; level < GaussHermiteRule<R>::levels; ++level) {
        const auto& rule = GaussHermiteRule<R>::of_level(level);
        typename GaussHermiteRule<R>::Vector values(rule.nodes.size());
        for (Eigen::Index j = 0; j < values.size(); ++j) values(j) = f(rule.nodes(j));
        HermiteExpansion e;
        e.coeff_ = rule.projection * values;
        e.coeff_(0) = 0;  // the mean
        if (!e.coeff_.allFinite()) return std::nullopt;
        const R sum = check == Check::value ? e.value_energy() : e.derivative_energy();
        if (std::abs(sum - energy) <= tolerance * energy) return e;
      }
      return std::nullopt;
    }
  }

  /// Cov[f(z1), f(z2)] = sum_{k >= 1} a_k^2 r^k (Mehler), by Horner.
  R value_pair(R r) const {
    R sum = 0;
    for (Eigen::Index k = coeff_.size() - 1; k >= 1; --k) sum = sum * r + coeff_(k) * coeff_(k);
    return sum * r;
  }
  /// E[f'(z1) f'(z2)] = sum_{k >= 1} k a_k^2 r^(k - 1).
  R derivative_pair(R r) const {
    R sum = 0;
    for (Eigen::Index k = coeff_.size() - 1; k >= 1; --k) sum = sum * r + R(k) * coeff_(k) * coeff_(k);
    return sum;
  }
  /// The pair moments at r = 1: Var[f] and E[f'^2] as the truncated expansion has them.
  R value_energy() const { return value_pair(1); }
  R derivative_energy() const { return derivative_pair(1); }

 private:
  typename GaussHermiteRule<R>::Vector coeff_;
};

}  // namespace sigprop::detail
