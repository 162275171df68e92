// Shared test helpers: the normal density and distribution, Gaussian
// integrals and other independent references, measured-against-predicted
// checks in standard errors, printing a validation report and asserting it
// against the paper's Table 20.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <Eigen/Core>
#include <boost/math/constants/constants.hpp>
#include <boost/math/quadrature/gauss_kronrod.hpp>

#include "catch.hpp"
#include "sigprop/core/moments.hpp"
#include "sigprop/models/config.hpp"
#include "sigprop/montecarlo/validation.hpp"

namespace sigprop::test {

// --- references written out independently of the library -------------------

inline const double pi = boost::math::constants::pi<double>();

/// The model of a whole-model test: its architecture, sizes, dropout and
/// activation; the rest ModelConfig's defaults.
inline ModelConfig model_of(Arch arch, std::size_t layers, std::size_t d, std::size_t heads, std::size_t seq_len,
                            double dropout = 0.1, FfnActivation activation = FfnActivation::relu) {
  ModelConfig c;
  c.arch = arch;
  c.layers = layers;
  c.d = d;
  c.heads = heads;
  c.seq_len = seq_len;
  c.dropout = dropout;
  c.activation = activation;
  return c;
}

/// A decoder preset (with_architecture: "gpt2", "llama") of the given sizes.
inline ModelConfig preset_of(const std::string& arch, std::size_t layers, std::size_t d, std::size_t heads,
                             std::size_t seq_len) {
  ModelConfig c;
  c.layers = layers;
  c.d = d;
  c.heads = heads;
  c.seq_len = seq_len;
  return with_architecture(c, arch);
}

/// The standard normal density. T is named, not deduced (phi<long double>,
/// phi<Big>), so that an argument such as -x of a multiprecision type is not
/// taken for the type.
template <class T = double>
T phi(const std::common_type_t<T>& z) {
  using std::exp;
  using std::sqrt;
  return exp(-z * z / 2) / sqrt(2 * boost::math::constants::pi<T>());
}

/// The standard normal distribution function.
template <class T = double>
T Phi(const std::common_type_t<T>& z) {
  using std::erfc;
  using std::sqrt;
  return erfc(-z / sqrt(T(2))) / 2;
}

/// The density of N(0, var).
inline double normal_pdf(double x, double var) { return std::exp(-x * x / (2 * var)) / std::sqrt(2 * pi * var); }

inline double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

/// E[f(Z); lo < Z < hi] for a standard normal Z: Boost's adaptive
/// Gauss-Kronrod with `Points` points (its own map of infinite ends), at most
/// `max_depth` bisections, relative tolerance `tol`.
template <unsigned Points, class F>
double gauss_integral(F f, double lo, double hi, unsigned max_depth, double tol) {
  return boost::math::quadrature::gauss_kronrod<double, Points>::integrate(
      [&](double z) { return f(z) * phi(z); }, lo, hi, max_depth, tol);
}

/// E[f(Z)] over the real line, 31 points, relative tolerance 1e-11.
template <class F>
double gauss_integral(F f) {
  const double inf = std::numeric_limits<double>::infinity();
  return gauss_integral<31>(f, -inf, inf, 10, 1e-11);
}

/// E[f(Z); Z > lo], 61 points, relative tolerance 1e-13 (integrands smooth
/// on the half-line).
template <class F>
double gauss_integral_above(F f, double lo) {
  return gauss_integral<61>(f, lo, std::numeric_limits<double>::infinity(), 12, 1e-13);
}

/// ReLU's output correlation at mean 0 (the arcsine kernel, appendix B.4).
inline double arcsine_corr(double r) { return (std::sqrt(1 - r * r) + r * (pi - std::acos(r)) - 1) / (pi - 1); }

/// E[cos angle(u, u')] for standard normal u, u' in R^3 with per-coordinate
/// correlation rho, in elementary form: c0 = 8/(3 pi),
/// 2F1(1/2, 1/2; 5/2; x) = 3/(4x) (sqrt(1 - x) - (1 - 2x) asin(sqrt x)/sqrt x).
inline double cos_angle_k3(double rho) {
  return 2 / (pi * rho) * (std::sqrt(1 - rho * rho) - (1 - 2 * rho * rho) * std::asin(rho) / rho);
}

/// The same in R^k: rho c0 2F1(1/2, 1/2; k/2 + 1; rho^2),
/// c0 = (2/k) (Gamma((k + 1)/2)/Gamma(k/2))^2, with Euler's integral
/// 2F1(1/2, 1/2; c; x) = 2 Gamma(c)/(Gamma(1/2) Gamma(c - 1/2)) int_0^{pi/2} cos^{2c-2}(t)/sqrt(1 - x sin^2 t) dt
/// by adaptive Gauss-Kronrod (cut at t = 12/sqrt(k), beyond which cos^k t < e^{-70}).
inline double cos_angle_by_quadrature(double k, double rho) {
  const double c = k / 2 + 1, x = rho * rho;
  auto f = [&](double t) { return std::pow(std::cos(t), 2 * c - 2) / std::sqrt(1 - x * std::sin(t) * std::sin(t)); };
  const double integral = boost::math::quadrature::gauss_kronrod<double, 61>::integrate(
      f, 0.0, std::min(pi / 2, 12 / std::sqrt(k)), 15, 1e-14);
  const double h1 = 2 * std::exp(std::lgamma(c) - std::lgamma(0.5) - std::lgamma(c - 0.5)) * integral;
  const double c0 = 2 / k * std::exp(2 * (std::lgamma((k + 1) / 2) - std::lgamma(k / 2)));
  return rho * c0 * h1;
}

// --- a measurement against a prediction -------------------------------------

/// |measured - predicted| in standard errors.
inline double z_score(const montecarlo::Estimate& e, double predicted) {
  return std::abs(e.value - predicted) / e.std_error;
}

/// |measured - predicted| <= z standard errors plus the allowances (a
/// documented bias of the closed form, a finite-width term), added in the
/// order given. For a correct formula and Gaussian noise the check fails with
/// probability 2 (1 - Phi(z)) at most: 6e-5 at z = 4, 6e-7 at z = 5.
template <class... Allowance>
bool within(const montecarlo::Estimate& e, double predicted, double z, Allowance... allowance) {
  return std::abs(e.value - predicted) <= ((z * e.std_error) + ... + allowance);
}

/// The opposite, that a form the simulation must tell apart is told apart:
/// |measured - value| > z standard errors plus the allowances (false for NaN).
template <class... Allowance>
bool outside(const montecarlo::Estimate& e, double value, double z, Allowance... allowance) {
  return std::abs(e.value - value) > ((z * e.std_error) + ... + allowance);
}

/// CHECK(within(...)), with the numbers in the failure message.
template <class... Allowance>
void check_within(const std::string& what, const montecarlo::Estimate& e, double predicted, double z,
                  Allowance... allowance) {
  INFO(what << ": measured " << e.value << " +- " << e.std_error << ", predicted " << predicted << " (z "
            << z_score(e, predicted) << ", allowed " << z << " plus " << (0.0 + ... + allowance) << ")");
  CHECK(within(e, predicted, z, allowance...));
}

// --- validation reports -------------------------------------------------------

/// Prints ours vs the paper's percentiles (and the sampling-noise margin).
inline void print_report(const montecarlo::ValidationReport& r) {
  std::printf("%-10s %-9s %6s  %-20s %-20s %-20s\n", "component", "quantity", "points",
              "ours p50/p90/p99 %", "paper p50/p90/p99 %", "noise p50/p90/p99 %");
  for (auto q : montecarlo::all_quantities) {
    if (!r.has(q)) continue;
    const auto e = r.errors(q);
    const auto p = montecarlo::paper_percentiles(r.component(), q);
    const auto n = r.noise_margin(q);
    std::printf("%-10s %-9s %6zu  %5.2f/%5.2f/%6.2f    %5.1f/%5.1f/%5.1f      %5.2f/%5.2f/%5.2f\n",
                r.component().c_str(), montecarlo::to_string(q), r.points(q), e.p50, e.p90, e.p99,
                p.p50, p.p90, p.p99, n.p50, n.p90, n.p99);
  }
}

/// Asserts that each of our percentiles is no worse than the paper's plus the
/// noise margin of our sample (ValidationReport::noise_margin explains it):
/// the paper's grid was larger, so at equal formula accuracy our percentiles
/// can only differ from theirs by sampling noise.
inline void require_no_worse_than_paper(const montecarlo::ValidationReport& r) {
  for (auto q : montecarlo::all_quantities) {
    if (!r.has(q)) continue;
    const auto e = r.errors(q);
    const auto p = montecarlo::paper_percentiles(r.component(), q);
    const auto n = r.noise_margin(q);
    if (p.p50 < 0) continue;
    INFO(r.component() << " " << montecarlo::to_string(q) << ": ours " << e.p50 << "/" << e.p90
                       << "/" << e.p99 << ", paper " << p.p50 << "/" << p.p90 << "/" << p.p99
                       << ", noise " << n.p50 << "/" << n.p90 << "/" << n.p99);
    CHECK(e.p50 <= p.p50 + n.p50);
    CHECK(e.p90 <= p.p90 + n.p90);
    CHECK(e.p99 <= p.p99 + n.p99);
  }
}

/// For exact closed forms: every grid point within `z` standard errors. With
/// z = 5 a correct formula fails with probability < 6e-7 per point.
inline void require_within_standard_errors(const montecarlo::ValidationReport& r, double z = 5) {
  for (auto q : montecarlo::all_quantities) {
    if (!r.has(q)) continue;
    INFO(r.component() << " " << montecarlo::to_string(q) << ": max z = " << r.max_z(q));
    CHECK(r.max_z(q) <= z);
  }
}

/// The same formula serves float, double and batched lanes: for a component
/// without parameters, float results agree with double to `float_tol` (float
/// rounding, 6e-8, amplified by a few operations) and Eigen-array lanes agree
/// with the scalar double results to 1e-13 (vectorized exp/sqrt differ from
/// the scalar library functions in the last bits).
template <template <class> class Component>
void require_same_formula(const std::vector<Moments<double>>& inputs, const GradMoments<double>& grad,
                          double float_tol = 1e-6) {
  using Lanes = Eigen::ArrayXd;
  const auto n = static_cast<Eigen::Index>(inputs.size());
  Moments<Lanes> batch{Lanes(n), Lanes(n), Lanes(n), Lanes(n)};
  for (Eigen::Index i = 0; i < n; ++i) {
    const auto& in = inputs[static_cast<std::size_t>(i)];
    batch.mean(i) = in.mean, batch.var(i) = in.var, batch.corr_len(i) = in.corr_len, batch.corr_dim(i) = in.corr_dim;
  }
  const Component<Lanes> batched;
  const auto out = batched.forward(batch);
  const auto g = batched.backward(batch, {Lanes::Constant(n, grad.var), Lanes::Constant(n, grad.corr_len)});
  for (Eigen::Index i = 0; i < n; ++i) {
    const auto& in = inputs[static_cast<std::size_t>(i)];
    const auto d = Component<double>().forward(in);
    const auto gd = Component<double>().backward(in, grad);
    const Moments<float> in_f{float(in.mean), float(in.var), float(in.corr_len), float(in.corr_dim)};
    const auto f = Component<float>().forward(in_f);
    const auto gf = Component<float>().backward(in_f, {float(grad.var), float(grad.corr_len)});
    INFO("input " << i << ": mean " << in.mean << ", var " << in.var << ", corr_len " << in.corr_len
                  << ", corr_dim " << in.corr_dim);
    CHECK(f.mean == Approx(d.mean).epsilon(float_tol).margin(float_tol));
    CHECK(f.var == Approx(d.var).epsilon(float_tol).margin(float_tol));
    CHECK(f.corr_len == Approx(d.corr_len).margin(float_tol));
    CHECK(f.corr_dim == Approx(d.corr_dim).margin(float_tol));
    CHECK(gf.var == Approx(gd.var).epsilon(float_tol).margin(float_tol));
    CHECK(gf.corr_len == Approx(gd.corr_len).margin(float_tol));
    CHECK(out.mean(i) == Approx(d.mean).epsilon(1e-13).margin(1e-15));
    CHECK(out.var(i) == Approx(d.var).epsilon(1e-13).margin(1e-15));
    CHECK(out.corr_len(i) == Approx(d.corr_len).epsilon(1e-13).margin(1e-15));
    CHECK(out.corr_dim(i) == Approx(d.corr_dim).epsilon(1e-13).margin(1e-15));
    CHECK(g.var(i) == Approx(gd.var).epsilon(1e-13).margin(1e-15));
    CHECK(g.corr_len(i) == Approx(gd.corr_len).epsilon(1e-13).margin(1e-15));
  }
}

/// `a` and `b` give the same forward and backward moments at (`in`, `g`)
/// (variances to 1e-14 relative, correlations to 1e-14 absolute): two ways
/// of writing one map.
template <class A, class B>
void check_same_map(const A& a, const B& b, const Moments<double>& in, const GradMoments<double>& g) {
  const auto fa = a.forward(in), fb = b.forward(in);
  CHECK(fa.var == Approx(fb.var).epsilon(1e-14));
  CHECK(fa.corr_len == Approx(fb.corr_len).margin(1e-14));
  const auto ga = a.backward(in, g), gb = b.backward(in, g);
  CHECK(ga.var == Approx(gb.var).epsilon(1e-14));
  CHECK(ga.corr_len == Approx(gb.corr_len).margin(1e-14));
}

}  // namespace sigprop::test
