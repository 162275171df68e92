// sigprop/components/softmax.hpp -- p = softmax(x) over the n entries of the
// hidden ("dim") axis of each position: p_j = e^{x_j} / sum_k e^{x_k}.
//
// Reference: Kedia et al., "Transformers Get Stable" (ICML 2024), appendix
// B.7 (A.7 in the later version) and Table 1. The paper normalizes over L
// entries whose pairwise correlation it writes r^d (Table 1) or r^l (B.7);
// here the normalized axis is the hidden axis, so:
//   corr_dim  = correlation among the n normalized entries of one position
//               (the paper's r); the output's is exactly -1/(n - 1) since the
//               entries sum to 1;
//   corr_len  = correlation of two positions at the same entry (not in the
//               paper; mapped exactly below).
// Input model as for LayerNorm: separable (Kronecker) covariance. Softmax is
// shift-invariant, so the mean and the common part of a position drop out and
// p is the softmax of n i.i.d. N(0, a) logits, a = s^2 (1 - r^d); two
// positions have per-entry logit correlation rho = r^l.
//
// Moments (mean 1/n exactly). With Jacobian dp/dx = diag(p) - p p^T,
// g_in = p .* (g - p.g) for an upstream g with i.i.d. entries (variance g^2,
// correlation r_g between positions), so
//   Var[p]        = E[p_1^2] - 1/n^2,
//   Var[g_in]     = g^2 E[p_1^2 (1 - 2 p_1 + sum_k p_k^2)],
//   Cov^l[p]      = E[p_1 p'_1] - 1/n^2,
//   Cov^l[g_in]   = r_g g^2 E[p_1 p'_1 (1 - p_1 - p'_1 + sum_k p_k p'_k)].
// Forms:
//   exact (default): those expectations evaluated numerically to ~3e-8
//     relative through the Laplace transform of the log-normal,
//     1/S^m = int t^{m-1} e^{-tS} dt / Gamma(m), which turns each of them into
//     a one- (within a position) or two-dimensional (two positions) integral
//     over t of Gaussian expectations (see detail::SoftmaxQuadrature).
//     Supported for a <= 100 (beyond it the softmax is essentially one-hot).
//   full (B.7, log-normal sum of Lo 2013), b = a n/(n - 1):
//     Var[p] = (e^b - 1) e^{2b} / ((n - 1) e^a + 1)^2,  Var[g_in] = (Var[p] + 1/n^2) g^2;
//   simplified (B.7 last line, Table 1):
//     Var[p] = (e^a - 1)/n^2,  Var[g_in] = e^a g^2/n^2.
//   For full and simplified (which treat the denominator as a constant)
//   corr_len = (e^{a rho} - 1)/(e^a - 1) and r_g,in = r_g e^{-a (1 - rho)}.
// Simulation shows the paper's forms are biased by O(e^{2a}/n) relative and
// that their backward, keeping only diag(p) of the Jacobian, misses a relative
// -(2 e^{2a} - e^a)/n; the exact form is within sampling noise
// (docs/components/softmax.md).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <boost/math/quadrature/gauss.hpp>
#include <boost/math/tools/toms748_solve.hpp>

#include <Eigen/Core>

#include "sigprop/core/component.hpp"
#include "sigprop/core/errors.hpp"

namespace sigprop {

/// Which variance formula Softmax uses.
enum class SoftmaxForm {
  exact,      ///< numerical evaluation of the exact expectations (default)
  full,       ///< the paper's log-normal-sum approximation (B.7)
  simplified  ///< the paper's (e^a - 1)/n^2 (B.7, Table 1)
};

inline const char* to_string(SoftmaxForm f) {
  switch (f) {
    case SoftmaxForm::exact: return "exact";
    case SoftmaxForm::full: return "full";
    case SoftmaxForm::simplified: return "simplified";
  }
  return "?";
}

namespace detail {

/// Exact moments of p = softmax of n i.i.d. N(0, a) logits, and of a second
/// position p' whose logits have per-entry correlation rho with the first.
struct SoftmaxExact {
  double var = 0;       // Var[p_1]
  double grad_var = 0;  // E[p_1^2 (1 - 2 p_1 + sum_k p_k^2)]
  double cov_len = 0;   // Cov[p_1, p'_1]
  double grad_cov = 0;  // E[p_1 p'_1 (1 - p_1 - p'_1 + sum_k p_k p'_k)]
};

// Laplace transform of the log-normal. With w = e^{z - s}, z ~ N(0, a),
//   Psi_m(s) = E[w^m e^{-w}],
// 1/S^m = int_0^inf t^{m-1} e^{-t S} dt / Gamma(m) and t = e^{-s} give, for
// the i.i.d. entries of one position,
//   E[p_1^m] = int Psi_m Psi_0^{n-1} ds / Gamma(m),
//   E[p_1^2 p_2^2] = int Psi_2^2 Psi_0^{n-2} ds / Gamma(4),
//   Var[p_1] = (n-1)/n int Psi_0^n Var_mu(w) ds   (Var_mu: w under the tilted
//     weight e^{-w}; from Var[p_1] = (n-1)/n (E[p_1^2] - E[p_1 p_2]) without the
//     cancellation of E[p_1^2] - 1/n^2 at small a);
// and for two positions (w' = e^{z' - s'}, Phi_mm'(s, s') = E[w^m w'^m' e^{-w-w'}]):
//   E[p_1^m p'^m'_1] = iint Phi_mm' Phi_00^{n-1} ds ds' / (Gamma(m) Gamma(m')),
//   Cov[p_1, p'_1] = (n-1)/n iint Phi_00^n Cov_mu(w, w') ds ds'.
// Gaussian expectations: composite Gauss-Legendre (8 points per panel) on
// [-8.5, 8.5] standard deviations, panels narrow enough (2/sigma) to resolve
// e^{-w}. Integrals over s: composite Gauss-Legendre on panels of width 2 near
// the transition of Psi_0^n (where n (1 - Psi_0) = 1), widening to 8 in the
// exponentially decaying tails, from Psi_0^n < e^{-60} up to E[w] < e^{-32}/n.
// For two positions, z' = rho z + sqrt(1 - rho^2) xi, and E over xi is
// tabulated once as a function of s' - sigma rho x and read by quintic Hermite
// interpolation (derivatives Psi_m' = Psi_{m+1} - m Psi_m).
// Against the same scheme at 2-4x the resolution (10-point panels, half
// widths) the four moments agree to < 3e-8 relative over n in [2, 1e4], a in
// [1e-4, 16], rho in [-0.5, 0.99]; a forward or backward call costs ~2-10 ms.
class SoftmaxQuadrature {
 public:
  static constexpr double max_logit_var = 100;

  SoftmaxQuadrature(double n, double a) : n_(n), a_(a), sigma_(std::sqrt(a)) {
    x_rule_ = normal_rule(sigma_);
    place_s_nodes();
  }

  // Logits whose variance is a scale mixture, a w with w = 1 - spread or
  // 1 + spread equally likely (Var w = spread^2, excess kurtosis 3 spread^2):
  // one_position only. Used for the slopes in the logits' kurtosis
  // (softmax_kurtosis_slopes).
  SoftmaxQuadrature(double n, double a, double spread) : n_(n), a_(a), sigma_(std::sqrt(a)) {
    x_rule_ = normal_rule(sigma_);
    if (spread != 0)
      for (double w : {1 - spread, 1 + spread}) {
        const double scale = std::sqrt(a * w);
        mixture_.push_back({scale, normal_rule(scale)});
      }
    place_s_nodes();
  }

  // Var[p] and the gradient variance factor.
  void one_position(SoftmaxExact& out) const {
    double var = 0, grad = 0;
    for (std::size_t k = 0; k < s_.size(); ++k) {
      const Psi p = psi_at(s_[k]);
      var += s_w_[k] * (n_ - 1) / n_ * pow_log(p.log0, n_) * p.tilted_var;
      grad += s_w_[k] * (pow_log(p.log0, n_ - 1) * (p.m[2] - p.m[3] + p.m[4] / 6) +
                         (n_ - 1) / 6 * p.m[2] * p.m[2] * pow_log(p.log0, n_ - 2));
    }
    out.var = var;
    out.grad_var = grad;
  }

  // E[S_3], E[S_4] and E[S_2^2] for S_m = sum_k p_k^m (one position):
  //   E[S_m] = n int Psi_m Psi_0^{n-1} ds / (m - 1)!,
  //   E[S_2^2] = E[S_4] + n (n - 1) int Psi_2^2 Psi_0^{n-2} ds / 3!.
  void power_sums(double& s3, double& s4, double& s2_sq) const {
    s3 = s4 = s2_sq = 0;
    for (std::size_t k = 0; k < s_.size(); ++k) {
      const Psi p = psi_at(s_[k], false);
      s3 += s_w_[k] * n_ * pow_log(p.log0, n_ - 1) * p.m[3] / 2;
      s4 += s_w_[k] * n_ * pow_log(p.log0, n_ - 1) * p.m[4] / 6;
      s2_sq += s_w_[k] * n_ * (n_ - 1) * pow_log(p.log0, n_ - 2) * p.m[2] * p.m[2] / 6;
    }
    s2_sq += s4;
  }

  // Cov^l[p] and the gradient covariance factor for logit correlation rho.
  // Every Phi_mm'(s_k, s'_l) is a sum over the x nodes of (a function of s_k)
  // times (a function of s'_l): a matrix product. Cov_mu(w, w') is formed with
  // w - c_k, c_k the one-position tilted mean at s_k, so that its cancellation
  // costs only ~1/(sigma |rho|) ulps instead of ~1/(a |rho|).
  void two_positions(double rho, bool want_cov, bool want_grad, SoftmaxExact& out) const {
    using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    const double rho_c = std::sqrt(std::max(0.0, (1 - rho) * (1 + rho)));
    const Table table(*this, sigma_ * rho_c, sigma_ * std::abs(rho));
    const auto nx = static_cast<Eigen::Index>(x_rule_.x.size()), ns = static_cast<Eigen::Index>(s_.size());
    // Functions of (s_k, x_i): weight e^{-w}, times w - c_k, w, w^2; and weight (1 - e^{-w}).
    Matrix e0(ns, nx), e_centered(ns, nx), e1(ns, nx), e2(ns, nx);
    Eigen::VectorXd q_first(ns);
    for (Eigen::Index k = 0; k < ns; ++k) {
      const Psi p = psi(x_rule_, sigma_, s_[static_cast<std::size_t>(k)], false);
      const double centre = p.m[0] > 0 ? p.m[1] / p.m[0] : 0;
      q_first(k) = p.q0;
      for (Eigen::Index i = 0; i < nx; ++i) {
        const double w = std::exp(sigma_ * x_rule_.x[static_cast<std::size_t>(i)] - s_[static_cast<std::size_t>(k)]);
        const double e = x_rule_.w[static_cast<std::size_t>(i)] * std::exp(-w);
        e0(k, i) = e;
        e_centered(k, i) = e * (w - centre);
        e1(k, i) = e * w;
        e2(k, i) = e * w * w;
      }
    }
    // Functions of (s'_l, x_i): E_xi[w'^m e^{-w'}] (m = 0, 1, 2) and 1 - E_xi[e^{-w'}].
    Matrix g0(ns, nx), g1(ns, nx), g2(ns, nx), gq(ns, nx);
    for (Eigen::Index l = 0; l < ns; ++l)
      for (Eigen::Index i = 0; i < nx; ++i) {
        const auto v = table.at(s_[static_cast<std::size_t>(l)] - sigma_ * rho * x_rule_.x[static_cast<std::size_t>(i)]);
        gq(l, i) = v.q0;
        g0(l, i) = 1 - v.q0;
        g1(l, i) = v.m1;
        g2(l, i) = v.m2;
      }
    const Matrix phi00 = e0 * g0.transpose(), q00 = e0 * gq.transpose();
    Matrix c10, c11, phi01, phi11, phi21, phi12, phi22;
    if (want_cov) {
      c10 = e_centered * g0.transpose();
      c11 = e_centered * g1.transpose();
      phi01 = e0 * g1.transpose();
    }
    if (want_grad) {
      phi11 = e1 * g1.transpose();
      phi21 = e2 * g1.transpose();
      phi12 = e1 * g2.transpose();
      phi22 = e2 * g2.transpose();
    }
    double cov = 0, grad = 0;
    for (Eigen::Index k = 0; k < ns; ++k)
      for (Eigen::Index l = 0; l < ns; ++l) {
        const double p00 = phi00(k, l);
        if (!(p00 > 0)) continue;
        const double q = q_first(k) + q00(k, l);  // 1 - Phi_00, all terms >= 0
        const double log00 = q < 0.5 ? std::log1p(-q) : std::log(p00);
        const double weight = s_w_[static_cast<std::size_t>(k)] * s_w_[static_cast<std::size_t>(l)];
        if (want_cov) {
          const double cov_mu = (c11(k, l) - c10(k, l) * phi01(k, l) / p00) / p00;
          cov += weight * (n_ - 1) / n_ * pow_log(log00, n_) * cov_mu;
        }
        if (want_grad)
          grad += weight * (pow_log(log00, n_ - 1) * (phi11(k, l) - phi21(k, l) - phi12(k, l) + phi22(k, l)) +
                            (n_ - 1) * phi11(k, l) * phi11(k, l) * pow_log(log00, n_ - 2));
      }
    if (want_cov) out.cov_len = cov;
    if (want_grad) out.grad_cov = grad;
  }

 private:
  struct Rule {
    std::vector<double> x, w;  // nodes and weights of E[f(X)], X ~ N(0, 1)
  };

  // Composite 8-point Gauss-Legendre for E[f(X)], panels of width min(2, 2/scale).
  static Rule normal_rule(double scale) {
    const double half = 8.5, width = std::min(2.0, 2 / std::max(scale, 1e-300));
    const int panels = static_cast<int>(std::ceil(2 * half / width));
    const double h = 2 * half / panels;
    const auto& gx = boost::math::quadrature::gauss<double, 8>::abscissa();
    const auto& gw = boost::math::quadrature::gauss<double, 8>::weights();
    const double inv_sqrt_2pi = 0.3989422804014327;
    Rule r;
    for (int p = 0; p < panels; ++p) {
      const double mid = -half + h * (p + 0.5);
      for (std::size_t j = 0; j < gx.size(); ++j)
        for (double sign : {-1.0, 1.0}) {
          const double x = mid + sign * gx[j] * h / 2;
          r.x.push_back(x);
          r.w.push_back(gw[j] * h / 2 * inv_sqrt_2pi * std::exp(-x * x / 2));
        }
    }
    return r;
  }

  struct Psi {
    double m[5];       // Psi_0 .. Psi_4
    double q0;         // 1 - Psi_0, without cancellation
    double log0;       // log Psi_0
    double tilted_var;  // Var of w under the weight e^{-w}
  };

  // Psi_m(s) for z = scale * X; shared by the 1D integrals and the table.
  static Psi psi(const Rule& r, double scale, double s, bool with_tilted_var = true) {
    Psi p{};
    for (std::size_t i = 0; i < r.x.size(); ++i) {
      const double w = std::exp(scale * r.x[i] - s), e = r.w[i] * std::exp(-w);
      p.m[0] += e;
      p.m[1] += e * w;
      p.m[2] += e * w * w;
      p.m[3] += e * w * w * w;
      p.m[4] += e * w * w * w * w;
      p.q0 += r.w[i] * -std::expm1(-w);
    }
    p.log0 = p.q0 < 0.5 ? std::log1p(-p.q0) : std::log(p.m[0]);
    if (with_tilted_var && p.m[0] > 0) {
      const double mean = p.m[1] / p.m[0];
      double v = 0;
      for (std::size_t i = 0; i < r.x.size(); ++i) {
        const double w = std::exp(scale * r.x[i] - s);
        v += r.w[i] * std::exp(-w) * (w - mean) * (w - mean);
      }
      p.tilted_var = v / p.m[0];
    }
    return p;
  }

  // Psi_0^k = e^{k log Psi_0}, with Psi_0^0 = 1 even where Psi_0 = 0.
  static double pow_log(double log_value, double k) { return k == 0 ? 1 : std::exp(k * log_value); }

  // -n log Psi_0(s): decreasing in s, from +inf to 0.
  double minus_n_log(double s) const { return -n_ * psi_at(s).log0; }

  // Psi_m(s) of this quadrature's logits: one Gaussian, or the equal-weight
  // scale mixture (tilted variance centred at the mixture's tilted mean).
  Psi psi_at(double s, bool with_tilted_var = true) const {
    if (mixture_.empty()) return psi(x_rule_, sigma_, s, with_tilted_var);
    Psi p{};
    const double half = 1.0 / static_cast<double>(mixture_.size());
    for (const Component& c : mixture_) {
      const Psi q = psi(c.rule, c.scale, s, false);
      for (int m = 0; m < 5; ++m) p.m[m] += half * q.m[m];
      p.q0 += half * q.q0;
    }
    p.log0 = p.q0 < 0.5 ? std::log1p(-p.q0) : std::log(p.m[0]);
    if (with_tilted_var && p.m[0] > 0) {
      const double mean = p.m[1] / p.m[0];
      double v = 0;
      for (const Component& c : mixture_)
        for (std::size_t i = 0; i < c.rule.x.size(); ++i) {
          const double w = std::exp(c.scale * c.rule.x[i] - s);
          v += half * c.rule.w[i] * std::exp(-w) * (w - mean) * (w - mean);
        }
      p.tilted_var = v / p.m[0];
    }
    return p;
  }

  // Outer nodes: the transition s_c (n (1 - Psi_0) ~ 1), the lower end where
  // Psi_0^n < e^{-60}, the upper end where E[w] = e^{a/2 - s} < e^{-32}/n.
  void place_s_nodes() {
    const double start = std::log(n_) + a_ / 2;  // E[w] = 1/n here, so -n log Psi_0 <= ~1
    auto lower_root = [&](double level) {
      double hi = start, lo = start - 1;
      while (minus_n_log(lo) < level) {
        hi = lo;
        lo -= 1 + (start - lo);
      }
      std::uintmax_t iterations = 60;
      // In log scale, and finite where Psi_0 underflows to 0.
      auto f = [&](double s) { return std::log(std::min(minus_n_log(s), 1e300) / level); };
      const auto r = boost::math::tools::toms748_solve(f, lo, hi, boost::math::tools::eps_tolerance<double>(20),
                                                       iterations);
      return (r.first + r.second) / 2;
    };
    const double s_c = minus_n_log(start) >= 1 ? start : lower_root(1.0);
    const double s_lo = lower_root(60.0);
    const double s_hi = start + 32;
    std::vector<double> edges{s_c};
    auto width = [](double t) { return t < 8 ? 2.0 : t < 24 ? 4.0 : 8.0; };
    for (double e = s_c; e < s_hi;) {
      e = std::min(s_hi, e + width(e - s_c));
      edges.push_back(e);
    }
    for (double e = s_c; e > s_lo;) {
      e = std::max(s_lo, e - width(s_c - e));
      edges.insert(edges.begin(), e);
    }
    const auto& gx = boost::math::quadrature::gauss<double, 8>::abscissa();
    const auto& gw = boost::math::quadrature::gauss<double, 8>::weights();
    for (std::size_t p = 0; p + 1 < edges.size(); ++p) {
      const double mid = (edges[p] + edges[p + 1]) / 2, half = (edges[p + 1] - edges[p]) / 2;
      for (std::size_t j = 0; j < gx.size(); ++j)
        for (double sign : {-1.0, 1.0}) {
          s_.push_back(mid + sign * gx[j] * half);
          s_w_.push_back(gw[j] * half);
        }
    }
    s_lo_ = s_lo;
    s_hi_ = s_hi;
  }

  // E_xi[w'^m e^{-w'}] for w' = e^{scale xi - v}, xi ~ N(0, 1), tabulated in v
  // on a grid of step 0.1 with the values and two derivatives of Psi_0, Psi_1,
  // Psi_2 (quintic Hermite: error ~ 0.1^6 f^(6) / 46080 ~ 1e-11 for these
  // unit-scale functions).
  class Table {
   public:
    struct Value {
      double q0, m1, m2;  // 1 - Psi_0, Psi_1, Psi_2 at v
    };

    Table(const SoftmaxQuadrature& q, double scale, double reach) {
      const Rule r = normal_rule(scale);
      v0_ = q.s_lo_ - reach * 8.5 - 2 * step_;
      const double v1 = q.s_hi_ + reach * 8.5 + 2 * step_;
      const auto count = static_cast<std::size_t>(std::ceil((v1 - v0_) / step_)) + 1;
      psi_.reserve(count);
      for (std::size_t i = 0; i < count; ++i)
        psi_.push_back(psi(r, scale, v0_ + step_ * static_cast<double>(i), false));
    }

    Value at(double v) const {
      const double pos = std::clamp((v - v0_) / step_, 0.0, static_cast<double>(psi_.size() - 2));
      const auto i = static_cast<std::size_t>(pos);
      const double t = pos - static_cast<double>(i);
      const Psi& a = psi_[i];
      const Psi& b = psi_[i + 1];
      // Quintic Hermite basis on [0, 1].
      const double t2 = t * t, t3 = t2 * t, t4 = t3 * t, t5 = t4 * t;
      const double h0 = 1 - 10 * t3 + 15 * t4 - 6 * t5, h1 = t - 6 * t3 + 8 * t4 - 3 * t5,
                   h2 = (t2 - 3 * t3 + 3 * t4 - t5) / 2, h3 = 10 * t3 - 15 * t4 + 6 * t5,
                   h4 = -4 * t3 + 7 * t4 - 3 * t5, h5 = (t3 - 2 * t4 + t5) / 2;
      const double h = step_, hh = step_ * step_;
      auto interp = [&](double fa, double da, double sa, double fb, double db, double sb) {
        return fa * h0 + h * da * h1 + hh * sa * h2 + fb * h3 + h * db * h4 + hh * sb * h5;
      };
      // Psi_m' = Psi_{m+1} - m Psi_m, Psi_m'' = Psi_{m+2} - (2m + 1) Psi_{m+1} + m^2 Psi_m.
      Value out;
      out.q0 = interp(a.q0, -a.m[1], -(a.m[2] - a.m[1]), b.q0, -b.m[1], -(b.m[2] - b.m[1]));
      out.m1 = interp(a.m[1], a.m[2] - a.m[1], a.m[3] - 3 * a.m[2] + a.m[1], b.m[1], b.m[2] - b.m[1],
                      b.m[3] - 3 * b.m[2] + b.m[1]);
      out.m2 = interp(a.m[2], a.m[3] - 2 * a.m[2], a.m[4] - 5 * a.m[3] + 4 * a.m[2], b.m[2],
                      b.m[3] - 2 * b.m[2], b.m[4] - 5 * b.m[3] + 4 * b.m[2]);
      return out;
    }

   private:
    static constexpr double step_ = 0.1;
    double v0_ = 0;
    std::vector<Psi> psi_;
  };

  struct Component {
    double scale;
    Rule rule;
  };

  double n_, a_, sigma_;
  Rule x_rule_;
  std::vector<Component> mixture_;  // empty: Gaussian logits
  std::vector<double> s_, s_w_;
  double s_lo_ = 0, s_hi_ = 0;
};

/// Which exact moments to evaluate.
enum class SoftmaxNeed { forward, backward, backward_with_cov };

/// The exact moments: forward (Var, Cov^l) or backward (the gradient factors;
/// the covariance factor only when asked, it needs the two-position integral).
inline SoftmaxExact softmax_exact(double n, double a, double rho, SoftmaxNeed need) {
  SoftmaxExact out;
  if (a == 0) {  // constant output 1/n; the limits a -> 0 of the ratios are rho and 1
    out.grad_var = (1 - 1 / n) / (n * n);
    out.grad_cov = out.grad_var;
    return out;
  }
  const SoftmaxQuadrature q(n, a);
  q.one_position(out);
  if (need == SoftmaxNeed::forward && rho != 0) q.two_positions(rho, true, false, out);
  if (need == SoftmaxNeed::backward_with_cov) q.two_positions(rho, false, true, out);
  return out;
}

// Lane-wise evaluation of a scalar kernel of (n, a, rho) returning R.
template <class T, class F>
auto softmax_lanes(const T& n, const T& a, const T& rho, F f) {
  using R = decltype(f(0.0, 0.0, 0.0));
  if constexpr (is_scalar_v<T>) {
    return std::vector<R>{f(static_cast<double>(n), static_cast<double>(a), static_cast<double>(rho))};
  } else {
    std::vector<R> out;
    for (Eigen::Index i = 0; i < n.size(); ++i)
      out.push_back(f(static_cast<double>(n(i)), static_cast<double>(a(i)), static_cast<double>(rho(i))));
    return out;
  }
}

template <class T, class V, class Get>
T from_lanes(const T& like, const std::vector<V>& values, Get get) {
  if constexpr (is_scalar_v<T>) {
    (void)like;
    return static_cast<T>(get(values[0]));
  } else {
    T out(like.size());
    for (Eigen::Index i = 0; i < like.size(); ++i)
      out(i) = static_cast<typename T::Scalar>(get(values[static_cast<std::size_t>(i)]));
    return out;
  }
}

}  // namespace detail

template <class T = double>
class Softmax : public Component<Softmax<T>, T> {
 public:
  static constexpr const char* name = "sigprop::Softmax";

  /// `n`: the number of entries normalized over (an integer >= 2).
  explicit Softmax(T n, SoftmaxForm form = SoftmaxForm::exact) : n_(n), form_(form) {
    sigprop::detail::require(
        name, "n", n_, [](double v) { return std::isfinite(v) && v >= 2 && v <= 1e15 && std::floor(v) == v; },
        "{2, 3, 4, ...} (an integer count of normalized entries)");
    if (form_ != SoftmaxForm::exact && form_ != SoftmaxForm::full && form_ != SoftmaxForm::simplified)
      throw domain_error(std::string(name) + ": form = " + std::to_string(static_cast<int>(form_)) +
                         " is not a SoftmaxForm");
  }

  const T& n() const { return n_; }
  SoftmaxForm form() const { return form_; }

  /// The exact form evaluates logit variances s^2 (1 - r^d) up to 100.
  void require_input(const Moments<T>& in) const {
    if (form_ != SoftmaxForm::exact) return;
    const T a = logit_var(in);
    sigprop::detail::require(name, "var * (1 - corr_dim)", a,
                             [](double v) { return v <= detail::SoftmaxQuadrature::max_logit_var; },
                             "[0, 100] (the exact form's range; beyond it the softmax is essentially "
                             "one-hot)");
  }

  Moments<T> forward_impl(const Moments<T>& in) const {
    using std::exp;
    using std::expm1;
    const T a = logit_var(in);
    Moments<T> out;
    out.mean = 1 / n_ + 0 * in.mean;
    out.corr_dim = -1 / (n_ - 1) + 0 * in.mean;
    if (form_ == SoftmaxForm::exact) {
      const auto lanes = detail::softmax_lanes(n_, a, in.corr_len, [](double n, double av, double rho) {
        return detail::softmax_exact(n, av, rho, detail::SoftmaxNeed::forward);
      });
      out.var = detail::from_lanes(a, lanes, [](const detail::SoftmaxExact& e) { return e.var; });
      const T cov = detail::from_lanes(a, lanes, [](const detail::SoftmaxExact& e) { return e.cov_len; });
      out.corr_len = where_positive(out.var, cov / out.var, in.corr_len);
      return out;
    }
    if (form_ == SoftmaxForm::full) {
      // (e^b - 1) e^{2b} / ((n-1) e^a + 1)^2 = (e^b - 1) e^{2(b - a)} / (n - 1 + e^{-a})^2,
      // b - a = a/(n - 1): finite while e^b - 1 is, and no large exponent
      // whose rounding e^x would amplify (11 eps at n = 256 through
      // e^{2b - 2 log((n-1) e^a + 1)}, docs/accuracy.md).
      const T b = a * n_ / (n_ - 1);
      const T den = n_ - 1 + exp(-a);
      out.var = expm1(b) * exp(2 * a / (n_ - 1)) / (den * den);
    } else {
      out.var = expm1(a) / (n_ * n_);
    }
    out.corr_len = simplified_corr(a, in.corr_len);
    return out;
  }

  GradMoments<T> backward_impl(const Moments<T>& in, const GradMoments<T>& g) const {
    using std::exp;
    const T a = logit_var(in);
    GradMoments<T> out;
    if (form_ == SoftmaxForm::exact) {
      const auto need = lane_any_nonzero(g.corr_len) ? detail::SoftmaxNeed::backward_with_cov
                                                     : detail::SoftmaxNeed::backward;
      const auto lanes = detail::softmax_lanes(n_, a, in.corr_len, [need](double n, double av, double rho) {
        return detail::softmax_exact(n, av, rho, need);
      });
      const T factor = detail::from_lanes(a, lanes, [](const detail::SoftmaxExact& e) { return e.grad_var; });
      const T cov_factor = detail::from_lanes(a, lanes, [](const detail::SoftmaxExact& e) { return e.grad_cov; });
      out.var = g.var * factor;
      out.corr_len = g.corr_len * cov_factor / factor;
      return out;
    }
    const T var = forward_impl(in).var;
    out.var = (var + 1 / (n_ * n_)) * g.var;
    out.corr_len = g.corr_len * exp(-a * (1 - in.corr_len));
    return out;
  }

 private:
  // Variance of the logits once the common part of a position is removed.
  static T logit_var(const Moments<T>& in) { return in.var * (1 - in.corr_dim); }

  // (e^{a rho} - 1)/(e^a - 1), and its a -> 0 limit rho.
  static T simplified_corr(const T& a, const T& rho) {
    using std::expm1;
    return where_positive(a, expm1(a * rho) / expm1(a), rho);
  }

  // x where c > 0, else y (the a -> 0 limit of a ratio), lane-wise.
  static T where_positive(const T& c, const T& x, const T& y) {
    if constexpr (is_scalar_v<T>) return c > 0 ? x : y;
    else return math::select(math::less(0, c), x, y);
  }

  static bool lane_any_nonzero(const T& x) {
    for (std::size_t i = 0; i < lane_count(x); ++i)
      if (lane(x, i) != 0) return true;
    return false;
  }

  T n_;
  SoftmaxForm form_;
};

}  // namespace sigprop
