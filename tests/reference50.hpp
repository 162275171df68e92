// The closed forms in double against a 50-digit reference
// (boost::multiprecision::cpp_bin_float_50): shared by tests/test_reference50.cpp
// (which asserts the bounds) and examples/accuracy_report.cpp (which prints
// the table of docs/accuracy.md).
//
// The reference is the library's own templated code instantiated with
// T = cpp_bin_float_50 (one formula, one place): the components' scalar
// branches call their math functions unqualified, so a multiprecision type
// finds its own (and Boost.Math's Owen's T, gamma and Carlson integrals) by
// argument-dependent lookup. This measures what rounding in double does to
// each formula; that the formulas themselves are right is checked by Monte
// Carlo (docs/validation.md) and, for the 50-digit values, against the
// defining formulas written out independently (test_reference50.cpp).
// The paper's softmax forms are the exception: Softmax<T> also holds the
// double-only quadrature of the exact form, so their reference is the
// formula (B.7) written out in 50 digits here.
//
// Inputs are exact doubles: r = +-(1 - 2^-k), k = 1..52, and 199 points on
// [-0.99, 0.99] for correlation maps; variances 2^j over many octaves for the
// variance maps; 1 - r = 2^-k and 3 2^-k in [2^-52, 10^-2] for complements.
// Errors are relative, in units of eps = 2^-52 (one eps relative is between
// one and two ulps). A point counts in the peak and RMS when the problem is
// well conditioned there: the condition number kappa = |x f'(x)/f(x)| (x the
// varied input, from a centred difference of the reference) is at most 4,
// and, for a correlation map, |f| >= 1/16 (near its zero a map is a sum of
// O(1) terms and is accurate in absolute terms, reported separately).
#pragma once

// Boost.Math would otherwise use __float128 for the 50-digit Owen's T and need libquadmath.
#ifndef BOOST_MATH_DISABLE_FLOAT128
#define BOOST_MATH_DISABLE_FLOAT128
#endif

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <boost/multiprecision/cpp_bin_float.hpp>

#include "sigprop/sigprop.hpp"

namespace sigprop::reference50 {

using Big = boost::multiprecision::cpp_bin_float_50;

inline double eps() { return std::numeric_limits<double>::epsilon(); }

/// One function of one input x (a correlation, a variance or 1 - r): ours in
/// double, the reference in 50 digits, and the bounds asserted.
struct Case {
  std::string function;
  std::vector<double> inputs;
  std::function<double(double)> ours;
  std::function<Big(const Big&)> reference;
  bool correlation = true;  // |f| < 1/16 counts in absolute terms only
  double peak_limit = 8, rms_limit = 2;  // the targets, or the measured bound of a known gap
  bool asserted = true;                   // false: printed for contrast only
};

struct Accuracy {
  std::string function;
  std::size_t points = 0, ill_conditioned = 0, small = 0;
  double peak = 0, rms = 0;  // relative, in eps, over the well-conditioned points
  double peak_at = 0;        // the input of the peak
  double abs_peak = 0;       // absolute, in eps, over every point
  double peak_limit = 8, rms_limit = 2;
  bool asserted = true;
};

inline Accuracy measure(const Case& c) {
  Accuracy a;
  a.function = c.function;
  a.peak_limit = c.peak_limit;
  a.rms_limit = c.rms_limit;
  a.asserted = c.asserted;
  double sum_sq = 0;
  std::size_t counted = 0;
  for (double v : c.inputs) {
    const Big x = v;
    const Big ref = c.reference(x);
    const Big diff = abs(Big(c.ours(v)) - ref);
    ++a.points;
    a.abs_peak = std::max(a.abs_peak, static_cast<double>(diff) / eps());
    if (c.correlation && abs(ref) < Big(1) / 16) {
      ++a.small;
      continue;
    }
    // kappa: a one-sided difference at a relative step 1e-20 (backwards
    // where a step forwards would leave [-1, 1]); its O(1e-20) error is far
    // below what deciding kappa <= 4 needs.
    const Big h = (x == 0 ? Big(1) : abs(x)) * Big("1e-20");
    const Big step = c.correlation && x + h > 1 ? -h : h;
    const Big slope = (c.reference(x + step) - ref) / step;
    if (ref == 0 || static_cast<double>(abs(x * slope / ref)) > 4) {
      ++a.ill_conditioned;
      continue;
    }
    const double err = static_cast<double>(diff / abs(ref)) / eps();
    sum_sq += err * err;
    ++counted;
    if (err > a.peak) {
      a.peak = err;
      a.peak_at = v;
    }
  }
  a.rms = counted > 0 ? std::sqrt(sum_sq / static_cast<double>(counted)) : 0;
  return a;
}

// --- inputs -----------------------------------------------------------------

/// r = +-(1 - 2^-k), k = 1..52, and `uniform` points on [-0.99, 0.99]
/// (199: steps of 0.01; the Owen's T references in 50 digits take 67, steps of 0.03).
inline std::vector<double> corr_grid(int uniform = 199) {
  std::vector<double> r;
  for (int k = 1; k <= 52; ++k) {
    r.push_back(1 - std::ldexp(1.0, -k));
    r.push_back(-(1 - std::ldexp(1.0, -k)));
  }
  for (int i = 0; i < uniform; ++i) r.push_back(-0.99 + 1.98 * i / (uniform - 1));
  return r;
}

/// Variances 2^j and 3 2^j for j = lo..hi.
inline std::vector<double> var_grid(int lo, int hi) {
  std::vector<double> q;
  for (int j = lo; j <= hi; ++j) {
    q.push_back(std::ldexp(1.0, j));
    q.push_back(3 * std::ldexp(1.0, j));
  }
  return q;
}

/// 1 - r = 2^-k and 3 2^-k in [2^-52, 10^-2].
inline std::vector<double> complement_grid() {
  std::vector<double> delta;
  for (int k = 7; k <= 52; ++k) {
    delta.push_back(std::ldexp(1.0, -k));
    if (3 * std::ldexp(1.0, -k) <= 1e-2) delta.push_back(3 * std::ldexp(1.0, -k));
  }
  return delta;
}

inline std::string num(double x) { return sigprop::detail::format_number(x); }

// --- the cases ----------------------------------------------------------------

inline Moments<double> at(double mean, double var, double r) { return Moments<double>{mean, var, r, 0}; }
inline Moments<Big> at(const Big& mean, const Big& var, const Big& r) { return Moments<Big>{mean, var, r, Big(0)}; }

inline void relu_cases(std::vector<Case>& cases) {
  const Relu<double> relu;
  const Relu<Big> big;
  const GradMoments<double> g{1, 1};
  const GradMoments<Big> gb{Big(1), Big(1)};
  cases.push_back({"Relu r_out, mean 0", corr_grid(),
                   [=](double r) { return relu.forward(at(0, 1, r)).corr_len; },
                   [=](const Big& r) { return big.forward_impl(at(Big(0), Big(1), r)).corr_len; }});
  cases.push_back({"Relu gradient r_out / r_g, mean 0", corr_grid(),
                   [=](double r) { return relu.backward(at(0, 1, r), g).corr_len; },
                   [=](const Big& r) { return big.backward_impl(at(Big(0), Big(1), r), gb).corr_len; }});
  cases.push_back({"Relu var, mean 0 (var = 2^-30..2^30)", var_grid(-30, 30),
                   [=](double q) { return relu.forward(at(0, q, 0.5)).var; },
                   [=](const Big& q) { return big.forward_impl(at(Big(0), q, Big(0.5))).var; }, false});
  // Negative means run through long double in Relu<double> (relu.hpp). At
  // mu/s = -8 and -30 every point is ill-conditioned (kappa ~ a^2 > 4) and
  // the cancellation outgrows long double's extra bits: printed, not asserted.
  for (double mu : {-30.0, -8.0, -2.0, 0.7, 3.0}) {
    const std::string label = " (mu/s = " + num(mu) + ")";
    const bool asserted = mu > -8;
    Case var{"Relu var" + label + ", var = 2^-10..2^10", var_grid(-10, 10),
             [=](double q) { return relu.forward(at(mu * std::sqrt(q), q, 0.5)).var; },
             // Relu::forward_impl's var = s^2 C(a, 1), at the same double mean as ours
             [=](const Big& q) {
               const Big a = detail::relu_standardized_mean(Big(mu * std::sqrt(static_cast<double>(q))), Big(sqrt(q)));
               return q * detail::relu_standardized_cov(a, math::normal_cdf(a), math::normal_cdf(Big(-a)),
                                                        math::normal_pdf(a), Big(1));
             },
             false};
    var.asserted = asserted;
    cases.push_back(var);
    // r_out = C(a, r)/C(a, 1) by the code of Relu::forward_impl, without its corr_dim.
    const Big a = mu, cdf = math::normal_cdf(a), sf = math::normal_cdf(Big(-a)), pdf = math::normal_pdf(a);
    const Big var_std = detail::relu_standardized_cov(a, cdf, sf, pdf, Big(1));
    Case corr{"Relu r_out" + label, corr_grid(67), [=](double r) { return relu.forward(at(mu, 1, r)).corr_len; },
              [=](const Big& r) { return detail::relu_standardized_cov(a, cdf, sf, pdf, r) / var_std; }};
    corr.asserted = asserted;
    cases.push_back(corr);
    cases.push_back({"Relu gradient var" + label, {0.5},
                     [=](double r) { return relu.backward(at(mu, 1, r), g).var; },
                     [=](const Big& r) { return big.backward_impl(at(Big(mu), Big(1), r), gb).var; }, false});
    Case grad{"Relu gradient r_out / r_g" + label, corr_grid(67),
              [=](double r) { return relu.backward(at(mu, 1, r), g).corr_len; },
              [=](const Big& r) { return big.backward_impl(at(Big(mu), Big(1), r), gb).corr_len; }};
    grad.asserted = asserted;
    cases.push_back(grad);
  }
}

inline void gelu_cases(std::vector<Case>& cases) {
  using Z = detail::GeluZeroMean<Big>;
  const Gelu<double> gelu;
  const GradMoments<double> g{1, 1};
  cases.push_back({"Gelu var, mean 0 (q = 2^-20..2^20)", var_grid(-20, 20),
                   [=](double q) { return gelu.forward(at(0, q, 0.5)).var; },
                   [](const Big& q) { return q * Z::var_per_q(q); }, false});
  cases.push_back({"Gelu gradient var, mean 0 (q = 2^-20..2^20)", var_grid(-20, 20),
                   [=](double q) { return gelu.backward(at(0, q, 0.5), g).var; },
                   [](const Big& q) { return Z::grad_cross(q, Big(1)); }, false});
  for (double q : {0.01, 0.1, 1.0, 10.0, 100.0}) {
    const std::string label = " (q = " + num(q) + ")";
    cases.push_back({"Gelu r_out, mean 0" + label, corr_grid(),
                     [=](double r) { return gelu.forward(at(0, q, r)).corr_len; },
                     [=](const Big& r) { return Z::cov_per_q(Big(q), r) / Z::var_per_q(Big(q)); }});
    cases.push_back({"Gelu gradient r_out / r_g, mean 0" + label, corr_grid(),
                     [=](double r) { return gelu.backward(at(0, q, r), g).corr_len; },
                     [=](const Big& r) { return Z::grad_cross(Big(q), r) / Z::grad_cross(Big(q), Big(1)); }});
  }
}

inline void layernorm_cases(std::vector<Case>& cases) {
  // d = 17, 33, 47: the contiguous relation's longest runs (alpha < 24).
  for (double d : {4.0, 5.0, 9.0, 17.0, 33.0, 47.0, 64.0, 768.0}) {
    const LayerNorm<double> ln(d);
    const std::string label = " (d = " + num(d) + ")";
    const Big c0 = detail::layernorm_c0(Big(d));
    Case corr{"LayerNorm r_out" + label, corr_grid(), [=](double r) { return ln.corr_len_map(r); },
              [=](const Big& r) { return detail::layernorm_angle<Big>(Big(d), r, c0).corr; }};
    Case slope{"LayerNorm slope F'(r)" + label, corr_grid(), [=](double r) { return ln.grad_corr_factor(r); },
               [=](const Big& r) { return detail::layernorm_angle<Big>(Big(d), r, c0).slope; }, false};
    cases.push_back(corr);
    cases.push_back(slope);
  }
}

inline void dropout_linear_cases(std::vector<Case>& cases) {
  for (double p : {0.1, 0.5}) {
    const Dropout<double> drop(p);
    const Dropout<Big> big{Big(p)};
    const std::string label = " (p = " + num(p) + ", mean 1)";
    cases.push_back({"Dropout var" + label + ", var = 2^-20..2^20", var_grid(-20, 20),
                     [=](double q) { return drop.forward(at(1, q, 0.5)).var; },
                     [=](const Big& q) { return big.forward_impl(at(Big(1), q, Big(0.5))).var; }, false});
    cases.push_back({"Dropout r_out" + label, corr_grid(), [=](double r) { return drop.forward(at(1, 1, r)).corr_len; },
                     [=](const Big& r) { return big.forward_impl(at(Big(1), Big(1), r)).corr_len; }});
    cases.push_back({"Dropout gradient r_out / r_g (p = " + num(p) + ")", corr_grid(),
                     [=](double r) { return drop.backward(at(1, 1, 0.5), GradMoments<double>{1, r}).corr_len; },
                     [=](const Big& r) {
                       return big.backward_impl(at(Big(1), Big(1), Big(0.5)), GradMoments<Big>{Big(1), r}).corr_len;
                     }});
  }
  const Linear<double> fc(512, 2048, 2.0 / (512 + 2048));
  const Linear<Big> big{Big(512), Big(2048), Big(2.0 / (512 + 2048))};
  cases.push_back({"Linear var (mean 0.5, var = 2^-20..2^20)", var_grid(-20, 20),
                   [=](double q) { return fc.forward(at(0.5, q, 0.5)).var; },
                   [=](const Big& q) { return big.forward_impl(at(Big(0.5), q, Big(0.5))).var; }, false});
  cases.push_back({"Linear r_out (mean 0.5, var 2)", corr_grid(), [=](double r) { return fc.forward(at(0.5, 2, r)).corr_len; },
                   [=](const Big& r) { return big.forward_impl(at(Big(0.5), Big(2), r)).corr_len; }});
  cases.push_back({"Linear gradient var (grad var = 2^-20..2^20)", var_grid(-20, 20),
                   [=](double q) { return fc.backward(at(0.5, 2, 0.5), GradMoments<double>{q, 0.5}).var; },
                   [=](const Big& q) { return big.backward_impl(at(Big(0.5), Big(2), Big(0.5)), GradMoments<Big>{q, Big(0.5)}).var; },
                   false});
}

// The paper's softmax forms (B.7), a = s^2 (1 - r^d), written out in 50 digits:
//   full:       Var[p] = (e^b - 1) e^{2b} / ((n - 1) e^a + 1)^2,  b = a n/(n - 1);
//   simplified: Var[p] = (e^a - 1)/n^2;  both: corr_len = (e^{a rho} - 1)/(e^a - 1),
//   r_g,in = r_g e^{-a (1 - rho)}.
inline void softmax_cases(std::vector<Case>& cases) {
  const double n = 256;
  const Softmax<double> full(n, SoftmaxForm::full), simplified(n, SoftmaxForm::simplified);
  const Big bn = n;
  cases.push_back({"Softmax full var (n = 256, a = 2^-20..2^5)", var_grid(-20, 5),
                   [=](double a) { return full.forward(at(0, a, 0.5)).var; },
                   [=](const Big& a) {
                     const Big b = a * bn / (bn - 1), den = (bn - 1) * exp(a) + 1;
                     return expm1(b) * exp(2 * b) / (den * den);
                   },
                   false});
  cases.push_back({"Softmax simplified var (n = 256, a = 2^-20..2^5)", var_grid(-20, 5),
                   [=](double a) { return simplified.forward(at(0, a, 0.5)).var; },
                   [=](const Big& a) { return expm1(a) / (bn * bn); }, false});
  // a = 0.01, 1, 3: at larger a the maps' condition number a |r| exceeds 4 almost everywhere.
  for (double a : {0.01, 1.0, 3.0}) {
    cases.push_back({"Softmax simplified/full r_out (a = " + num(a) + ")", corr_grid(),
                     [=](double r) { return simplified.forward(at(0, a, r)).corr_len; },
                     [=](const Big& r) { return expm1(Big(a) * r) / expm1(Big(a)); }});
    cases.push_back({"Softmax simplified/full gradient r_out / r_g (a = " + num(a) + ")", corr_grid(),
                     [=](double r) { return simplified.backward(at(0, a, r), GradMoments<double>{1, 1}).corr_len; },
                     [=](const Big& r) { return exp(-Big(a) * (1 - r)); }});
  }
}

/// Every closed form of a correlation or a variance (docs/accuracy.md, first table).
inline std::vector<Case> closed_form_cases() {
  std::vector<Case> cases;
  relu_cases(cases);
  gelu_cases(cases);
  layernorm_cases(cases);
  dropout_linear_cases(cases);
  softmax_cases(cases);
  return cases;
}

/// 1 - r_out near r = 1 (docs/accuracy.md, second table): the components'
/// corr_complement(1 - r) against 1 - r_out(1 - delta) in 50 digits, and,
/// for contrast (not asserted), 1 - forward(...).corr_len in double.
inline std::vector<Case> complement_cases() {
  std::vector<Case> cases;
  const Relu<double> relu;
  const Relu<Big> big_relu;
  Case c{"Relu corr_complement, mean 0", complement_grid(),
         [](double delta) { return Relu<double>::corr_complement(delta); },
         [=](const Big& delta) { return 1 - big_relu.forward_impl(at(Big(0), Big(1), 1 - delta)).corr_len; }, false, 4,
         2};
  cases.push_back(c);
  Case naive = c;
  naive.function = "Relu 1 - r_out by subtraction (contrast)";
  naive.ours = [=](double delta) { return 1 - relu.forward(at(0, 1, 1 - delta)).corr_len; };
  naive.asserted = false;
  cases.push_back(naive);
  // ReLU at a nonzero mean (Price's integral of the orthant probability, in
  // long double; below mu/s = -2 the variance that divides it from the Mills
  // ratio's continued fraction, relu.hpp), down to the correlation floor.
  for (double mu : {-30.0, -16.0, -8.0, -4.0, -2.0, -0.3, 0.7, 3.0}) {
    const Big a = mu, cdf = math::normal_cdf(a), sf = math::normal_cdf(Big(-a)), pdf = math::normal_pdf(a);
    const Big var_std = detail::relu_standardized_cov(a, cdf, sf, pdf, Big(1));
    Case rc{"Relu corr_complement (mu/s = " + num(mu) + ")", complement_grid(),
            [=](double delta) { return Relu<double>::corr_complement(mu, 1.0, delta); },
            [=](const Big& delta) { return 1 - detail::relu_standardized_cov(a, cdf, sf, pdf, Big(1 - delta)) / var_std; },
            false, 4, 2};
    cases.push_back(rc);
  }
  using Z = detail::GeluZeroMean<Big>;
  const Gelu<double> gelu;
  // Above q = 10 the complement is Price's integral of grad_cross (gelu.hpp).
  for (double q : {0.01, 0.1, 1.0, 1.618, 10.0, 100.0, 1000.0, 1e4, 1e6}) {
    Case gc{"Gelu corr_complement, mean 0 (q = " + num(q) + ")", complement_grid(),
            [=](double delta) { return Gelu<double>::corr_complement(q, delta); },
            [=](const Big& delta) { return 1 - Z::cov_per_q(Big(q), 1 - delta) / Z::var_per_q(Big(q)); }, false, 4, 2};
    cases.push_back(gc);
    if (q == 1.0) {
      Case gn = gc;
      gn.function = "Gelu 1 - r_out by subtraction (q = 1, contrast)";
      gn.ours = [=](double delta) { return 1 - gelu.forward(at(0, 1, 1 - delta)).corr_len; };
      gn.asserted = false;
      cases.push_back(gn);
    }
  }
  // LayerNorm's and RMSNorm's (LayerNorm over d + 1 units) complement of F.
  for (double d : {4.0, 5.0, 17.0, 64.0, 768.0, 1e6}) {
    const LayerNorm<double> ln(d);
    const Big c0 = detail::layernorm_c0(Big(d));
    cases.push_back({"LayerNorm corr_complement (d = " + num(d) + ")", complement_grid(),
                     [=](double delta) { return ln.corr_complement(delta); },
                     [=](const Big& delta) { return 1 - detail::layernorm_angle<Big>(Big(d), 1 - delta, c0).corr; }, false,
                     4, 2});
  }
  const RmsNorm<double> rms(8);
  const Big c0_rms = detail::layernorm_c0(Big(9));
  cases.push_back({"RmsNorm corr_complement (d = 8)", complement_grid(),
                   [=](double delta) { return rms.corr_complement(delta); },
                   [=](const Big& delta) { return 1 - detail::layernorm_angle<Big>(Big(9), 1 - delta, c0_rms).corr; }, false, 4,
                   2});
  return cases;
}

inline std::vector<Accuracy> measure_all(const std::vector<Case>& cases) {
  std::vector<Accuracy> all;
  for (const Case& c : cases) all.push_back(measure(c));
  return all;
}

/// The markdown table of docs/accuracy.md.
inline void print_table(std::FILE* out, const std::vector<Accuracy>& all) {
  std::fprintf(out,
               "| function | points | kappa > 4 | abs(f) < 1/16 | peak (eps) | at | RMS (eps) | peak abs (eps) | bound |\n"
               "|---|---|---|---|---|---|---|---|---|\n");
  for (const Accuracy& a : all) {
    const std::string bound = a.asserted ? num(a.peak_limit) + " / " + num(a.rms_limit) : "-";
    std::fprintf(out, "| %s | %zu | %zu | %zu | %.3g | %.17g | %.3g | %.3g | %s |\n", a.function.c_str(), a.points,
                 a.ill_conditioned, a.small, a.peak, a.peak_at, a.rms, a.abs_peak, bound.c_str());
  }
}

}  // namespace sigprop::reference50
