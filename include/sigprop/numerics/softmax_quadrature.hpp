// sigprop/numerics/softmax_quadrature.hpp -- the exact moments of a softmax p
// of n i.i.d. N(0, a) logits (and of two softmaxes whose logits are
// correlated) by quadrature: E[p_1^2], the Jacobian's gradient factor, the
// power sums E[S_3], E[S_4], E[S_2^2] and the pair covariance, and from them
// the exact concentration factors G, J, D_G, D_J, C, O and V that the
// generated table (components/detail/softmax_concentration_table.hpp) holds.
//
// Method: the Laplace transform of the log-normal turns each expectation into
// a one- or two-dimensional integral of Gaussian expectations; both levels are
// composite Gauss-Legendre (Boost.Math's nodes). Derivation, accuracy and cost:
// docs/components/softmax.md, "Formulas".
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <boost/math/quadrature/gauss.hpp>
#include <boost/math/tools/toms748_solve.hpp>

#include <Eigen/Core>

namespace sigprop::detail {

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
/// G(a, n) from the exact quadrature (slow: ~1 ms).
inline double softmax_concentration_exact(double a, double n) {
  if (a == 0) return 1;
  const SoftmaxExact e = softmax_exact(n, a, 0, SoftmaxNeed::forward);
  return (n * n * e.var + 1) * std::exp(-a);
}

/// J(a, n) from the exact quadrature (slow: ~1 ms). At a = 0 softmax_exact
/// returns grad_var = (1 - 1/n)/n^2, which n^2 times would only round to 1 - 1/n.
inline double softmax_jacobian_concentration_exact(double a, double n) {
  if (a == 0) return 1 - 1 / n;
  const SoftmaxExact e = softmax_exact(n, a, 0, SoftmaxNeed::backward);
  return n * n * e.grad_var * std::exp(-a);
}

/// D_G and D_J (the kurtosis slopes of components/detail/softmax_concentration.hpp).
struct KurtosisSlopes {
  double g = 0, j = 0;
};

/// D_G(a, n) and D_J(a, n) from the exact quadrature (slow: ~6 ms).
inline KurtosisSlopes softmax_kurtosis_slopes_exact(double a, double n) {
  KurtosisSlopes out;
  if (a == 0) return out;
  const auto moments = [&](double spread) {
    SoftmaxExact e;
    SoftmaxQuadrature(n, a, spread).one_position(e);
    return e;
  };
  const SoftmaxExact base = moments(0);
  // log of n^2 E[p^2] (= G e^a) and of J e^a / n^2, as in the exact functions above.
  const auto log_g = [&](const SoftmaxExact& e) { return std::log(n * n * e.var + 1); };
  const auto log_j = [](const SoftmaxExact& e) { return std::log(e.grad_var); };
  double quotient_g[2], quotient_j[2];
  const double spreads[2] = {0.025, 0.05};
  for (int k = 0; k < 2; ++k) {
    const SoftmaxExact e = moments(spreads[k]);
    const double kurtosis = 3 * spreads[k] * spreads[k];
    quotient_g[k] = (log_g(e) - log_g(base)) / kurtosis;
    quotient_j[k] = (log_j(e) - log_j(base)) / kurtosis;
  }
  // Richardson: the quotients err by c e^2, and the spreads differ by 2x.
  out.g = (4 * quotient_g[0] - quotient_g[1]) / 3;
  out.j = (4 * quotient_j[0] - quotient_j[1]) / 3;
  return out;
}

/// C and O (the tilt factors of components/detail/softmax_concentration.hpp).
struct TiltFactors {
  double cross = 0, own = 0;
};

/// C(a, n) and O(a, n) from the exact quadrature (slow: ~2 ms); exact at a = 0.
inline TiltFactors softmax_tilt_factors_exact(double a, double n) {
  double s2 = 1 / n, s3 = s2 * s2, s4 = s3 * s2, s2_sq = s3;
  if (a != 0) {
    const SoftmaxQuadrature q(n, a);
    SoftmaxExact e;
    q.one_position(e);
    s2 = n * e.var + 1 / n;
    q.power_sums(s3, s4, s2_sq);
  }
  return {1 - 5 * s2 + 4 * s3 + 6 * s2_sq - 6 * s4, 4 * s2 - 10 * s3 + 6 * s4};
}

/// V(a, n) = H''(0) (the pair curvature of
/// components/detail/softmax_concentration.hpp) from the two-position
/// quadrature (slow: ~40 ms). The covariance steps are
/// eps = e a with e = 0.025 and 0.05 for a >= 1, and e = min(0.025/a, 0.2)
/// and twice that below, so that the second difference stays well above the
/// quadrature's rounding; for a < 1e-3 it is taken at a = 1e-3 (H is smooth
/// in a; V(1e-3, n) differs from V(a, n) by O(1e-3/n)).
inline double softmax_pair_curvature_exact(double a, double n) {
  const double at = std::max(a, 1e-3), e = std::min(0.025 / std::min(at, 1.0), 0.2);
  const auto pair_h = [&](double rho) {
    return n * n * softmax_exact(n, at, rho, SoftmaxNeed::forward).cov_len + 1;
  };
  const auto second_difference = [&](double step) {
    const double eps = step * at;
    return (pair_h(step) + pair_h(-step) - 2) / (eps * eps);
  };
  // Richardson: the differences err by c eps^2, and the steps differ by 2x.
  return (4 * second_difference(e) - second_difference(2 * e)) / 3;
}

}  // namespace sigprop::detail
