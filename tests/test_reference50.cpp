// Accuracy of the closed forms in double against a 50-digit reference
// (boost::multiprecision::cpp_bin_float_50; the cases and the method are in
// reference50.hpp, shared with examples/accuracy_report, which prints the
// table of docs/accuracy.md). Asserted: peak <= 8 eps and RMS <= 2 eps
// relative where the problem is well conditioned, and 1 - r_out from the
// components' corr_complement within 4 eps for 1 - r in [2^-52, 10^-2];
// known gaps assert their measured bounds (docs/accuracy.md explains them).
// The 50-digit instantiation of the library's formulas is itself checked
// against the defining formulas written out independently below.

#include "reference50.hpp"

#include <boost/math/special_functions/owens_t.hpp>

#include "support.hpp"

namespace {

using sigprop::GradMoments;
using sigprop::Moments;
using sigprop::reference50::Big;
using sigprop::test::phi;
using sigprop::test::Phi;
using sigprop::test::pi;

const double eps = std::numeric_limits<double>::epsilon();
const Big big_pi = boost::math::constants::pi<Big>();

// --- the defining formulas, written out independently in 50 digits -----------

// ReLU, x ~ N(mu, 1), a = mu (Rosenbaum 1961; Owen 1956; relu.hpp):
// C(a, r) = r P + a^2 (Phi Q - 2T) + 2 a phi (Q - Phi(-a b)) + sqrt(1 - r^2)/(2 pi) e^(-a^2/(1+r)) - phi^2.
Big relu_cov(const Big& a, const Big& r) {
  const Big b = r == -1 ? Big(std::numeric_limits<double>::infinity()) : sqrt((1 - r) / (1 + r));
  const Big t = r == -1 ? Phi<Big>(-abs(a)) / 2 : boost::math::owens_t(a, b);
  const Big cdf = Phi<Big>(a), sf = Phi<Big>(-a), pdf = phi<Big>(a);
  const Big orthant = cdf - 2 * t;
  const Big tail = r == -1 ? Big(0) : sqrt((1 - r) * (1 + r)) / (2 * big_pi) * exp(-a * a / (1 + r));
  const Big upper_ab = r == -1 ? Big(a > 0 ? 0 : 1) : Phi<Big>(-a * b);
  return r * orthant + a * a * (cdf * sf - 2 * t) + 2 * a * pdf * (sf - upper_ab) + tail - pdf * pdf;
}

// ReLU at mean 0 (B.4): r_out = (sqrt(1 - r^2) + r (pi - acos r) - 1)/(pi - 1);
// gradient correlation factor P(x_1 > 0, x_2 > 0)/P(x > 0) = 1/2 + asin(r)/pi.
Big relu_corr_zero_mean(const Big& r) {
  return (sqrt((1 - r) * (1 + r)) + r * (big_pi - acos(r)) - 1) / (big_pi - 1);
}
Big relu_grad_factor_zero_mean(const Big& r) { return Big(1) / 2 + asin(r) / big_pi; }

// GeLU at mean 0 (B.5), x ~ N(0, q), a = q/(1 + q), D = (q + 1)^2 - (r q)^2.
Big gelu_var(const Big& q) {
  const Big a = q / (1 + q);
  return q / (2 * big_pi) * (big_pi / 2 - a + asin(a) + 2 * q / ((1 + q) * sqrt(1 + 2 * q)));
}
Big gelu_cov(const Big& q, const Big& r) {
  const Big a = q / (1 + q), d = (q + 1) * (q + 1) - (r * q) * (r * q);
  return q / (4 * big_pi) *
         (big_pi * r + 2 * r * asin(r * a) + 2 * q * (q * (1 - r * r) + 1 + r * r) / ((q + 1) * sqrt(d)) -
          2 * q / (q + 1));
}
Big gelu_grad_second(const Big& q) {
  const Big a = q / (1 + q);
  return Big(1) / 4 + asin(a) / (2 * big_pi) + q * (5 * q + 3) / (2 * big_pi * (q + 1) * pow(2 * q + 1, Big(1.5)));
}
Big gelu_grad_cross(const Big& q, const Big& r) {
  const Big a = q / (1 + q), d = (q + 1) * (q + 1) - (r * q) * (r * q);
  return Big(1) / 4 + asin(r * a) / (2 * big_pi) +
         r * q * ((2 * q + 3) * (q + 1) - 2 * (r * q) * (r * q)) / (2 * big_pi * (q + 1) * pow(d, Big(1.5)));
}

// LayerNorm over d units (B.6, exact): F(rho) = rho c0 2F1(1/2, 1/2; k/2 + 1; rho^2),
// c0 = (2/k) (Gamma(k/2 + 1/2)/Gamma(k/2))^2, k = d - 1. The series is summed
// directly (its terms fall like n^-(k/2 + 1) rho^(2n)).
Big layernorm_corr(double d, const Big& rho) {
  const Big k = Big(d) - 1, alpha = k / 2, x = rho * rho;
  Big term = 1, sum = 1;
  for (int n = 0; n < 200000; ++n) {
    term *= (Big(n) + Big(0.5)) * (Big(n) + Big(0.5)) / ((alpha + 1 + n) * (n + 1)) * x;
    sum += term;
    if (term < sum * Big("1e-45")) break;
  }
  const Big ratio = boost::math::tgamma(alpha + Big(0.5)) / boost::math::tgamma(alpha);
  return rho * 2 / k * ratio * ratio * sum;
}


void require_table(const std::vector<sigprop::reference50::Accuracy>& all) {
  for (const auto& a : all) {
    if (!a.asserted) continue;
    INFO(a.function << ": peak " << a.peak << " eps at " << a.peak_at << ", RMS " << a.rms << " eps, abs "
                    << a.abs_peak << " eps");
    CHECK(a.points > a.ill_conditioned + a.small);
    CHECK(a.peak <= a.peak_limit);
    CHECK(a.rms <= a.rms_limit);
  }
}

}  // namespace

TEST_CASE("the 50-digit instantiation agrees with the defining formulas", "[reference50]") {
  // If a component's code were wrong in 50 digits the reference would be too:
  // compare it with the formulas of the papers written out independently.
  const sigprop::Relu<Big> relu;
  const Big tol("1e-40");
  // r = -1 included: 1 + r is kept positive by 4/max, not min(), which in 50
  // digits made b = sqrt(2/min) infinite and a b a NaN at a = 0.
  for (double rd : {-1.0, -0.999, -0.5, 0.0, 0.3, 0.9, 1 - std::ldexp(1.0, -40), 1.0}) {
    const Big r = rd;
    INFO("r = " << rd);
    // The public maps (with their validation), not only the _impl kernels.
    const auto out = relu.forward(Moments<Big>{Big(0), Big(1), r, Big(0)});
    CHECK(abs(out.corr_len - relu_corr_zero_mean(r)) < tol);
    const auto g = relu.backward(Moments<Big>{Big(0), Big(1), r, Big(0)}, GradMoments<Big>{Big(1), Big(1)});
    CHECK(abs(g.corr_len - relu_grad_factor_zero_mean(r)) < tol);
    for (double mu : {-2.0, 0.7, 3.0}) {
      const auto o = relu.forward_impl(Moments<Big>{Big(mu), Big(1), r, Big(0)});
      CHECK(abs(o.var - relu_cov(Big(mu), Big(1))) < tol);
      CHECK(abs(o.corr_len - relu_cov(Big(mu), r) / relu_cov(Big(mu), Big(1))) < tol);
    }
    using Z = sigprop::detail::GeluZeroMean<Big>;
    for (double qd : {0.1, 1.0, 10.0}) {
      const Big q = qd;
      CHECK(abs(q * Z::var_per_q(q) - gelu_var(q)) < tol);
      CHECK(abs(q * Z::cov_per_q(q, r) - gelu_cov(q, r)) < tol);
      CHECK(abs(Z::grad_cross(q, Big(1)) - gelu_grad_second(q)) < tol);
      CHECK(abs(Z::grad_cross(q, r) - gelu_grad_cross(q, r)) < tol);
    }
    if (abs(r) <= Big("0.9"))
      for (double d : {4.0, 9.0, 64.0, 768.0})
        CHECK(abs(sigprop::detail::layernorm_angle<Big>(Big(d), r).corr - layernorm_corr(d, r)) < tol);
  }
  // LayerNorm's complement (the connection formulas about rho = 1 for even
  // and odd d, Gauss's series term by term for d >= 49) in 50 digits against
  // the 50-digit subtraction, which keeps 50 - 16 digits at 1 - r >= 2^-52.
  for (double d : {4.0, 5.0, 6.0, 7.0, 9.0, 20.0, 47.0, 48.0, 49.0, 64.0, 768.0, 1e6}) {
    const Big c0 = sigprop::detail::layernorm_c0(Big(d));
    for (double delta : {std::ldexp(1.0, -52), 1e-9, 1e-4, 0.01, 0.06, 0.0625, 0.5, 1.5}) {
      INFO("d = " << d << ", 1 - r = " << delta);
      const Big subtracted = 1 - sigprop::detail::layernorm_angle<Big>(Big(d), 1 - Big(delta), c0).corr;
      const Big complement = sigprop::detail::layernorm_corr_complement<Big>(Big(d), Big(delta));
      CHECK(abs(complement / subtracted - 1) < Big("1e-32"));
    }
  }
}

TEST_CASE("closed forms agree with a 50-digit reference", "[reference50][report]") {
  const auto all = sigprop::reference50::measure_all(sigprop::reference50::closed_form_cases());
  sigprop::reference50::print_table(stdout, all);
  require_table(all);
}

TEST_CASE("corr_complement: 1 - r_out within 4 eps for 1 - r in [2^-52, 10^-2]", "[reference50][report]") {
  const auto all = sigprop::reference50::measure_all(sigprop::reference50::complement_cases());
  sigprop::reference50::print_table(stdout, all);
  require_table(all);
}

TEST_CASE("corr_complement: domain, limits and batches", "[reference50]") {
  CHECK_THROWS_WITH(sigprop::Relu<double>::corr_complement(-1e-300),
                    Catch::Contains("sigprop::Relu: one_minus_corr = -1e-300") && Catch::Contains("[0, 2]"));
  CHECK_THROWS_AS(sigprop::Relu<double>::corr_complement(std::nan("")), sigprop::domain_error);
  CHECK(sigprop::Relu<double>::corr_complement(0) == 0);
  CHECK(sigprop::Relu<double>::corr_complement(2) == Approx(pi / (pi - 1)).epsilon(1e-15));  // r = -1: r_out = -1/(pi - 1)
  // Over all of (0, 2]: within 4 eps of the 50-digit 1 - r_out.
  for (double delta : {0.02, 0.1, 0.5, 1.0, 1.5, 1.99}) {
    const Big ref = 1 - relu_corr_zero_mean(1 - Big(delta));
    CHECK(static_cast<double>(abs((Big(sigprop::Relu<double>::corr_complement(delta)) - ref) / ref)) <= 4 * eps);
    for (double q : {0.1, 1.0, 10.0}) {
      const Big gref = 1 - gelu_cov(Big(q), 1 - Big(delta)) / gelu_var(Big(q));
      INFO("q = " << q << ", 1 - r = " << delta);
      CHECK(static_cast<double>(abs((Big(sigprop::Gelu<double>::corr_complement(q, delta)) - gref) / gref)) <= 4 * eps);
    }
  }
  // ReLU at a nonzero mean: the domain, the ends, both regions of (0, 2].
  CHECK_THROWS_WITH(sigprop::Relu<double>::corr_complement(std::nan(""), 1, 0.5), Catch::Contains("sigprop::Relu: mean = nan"));
  CHECK_THROWS_WITH(sigprop::Relu<double>::corr_complement(1, -1, 0.5), Catch::Contains("sigprop::Relu: var = -1"));
  CHECK_THROWS_WITH(sigprop::Relu<double>::corr_complement(1, 1, 2.5), Catch::Contains("sigprop::Relu: one_minus_corr = 2.5"));
  CHECK(sigprop::Relu<double>::corr_complement(0.7, 1, 0) == 0);
  CHECK(sigprop::Relu<double>::corr_complement(0, 3, 0.01) == sigprop::Relu<double>::corr_complement(0.01));
  for (double mu : {-2.0, 0.7, 3.0})
    for (double delta : {1e-30, 0.01, 0.5, 0.5000000000000001, 1.0, 2.0}) {
      const Big ref = 1 - relu_cov(Big(mu), 1 - Big(delta)) / relu_cov(Big(mu), Big(1));
      INFO("mu = " << mu << ", 1 - r = " << delta);
      CHECK(static_cast<double>(abs((Big(sigprop::Relu<double>::corr_complement(mu, 1, delta)) - ref) / ref)) <= 4 * eps);
    }
  const Eigen::ArrayXd means = (Eigen::ArrayXd(3) << -1, 0, 2).finished();
  const Eigen::ArrayXd relu_batch = sigprop::Relu<Eigen::ArrayXd>::corr_complement(means, Eigen::ArrayXd::Constant(3, 2.0),
                                                                                    Eigen::ArrayXd::Constant(3, 1e-3));
  for (Eigen::Index i = 0; i < means.size(); ++i)
    CHECK(relu_batch(i) == sigprop::Relu<double>::corr_complement(means(i), 2.0, 1e-3));

  const Eigen::ArrayXd deltas = (Eigen::ArrayXd(3) << 1e-10, 0.01, 1.5).finished();
  const Eigen::ArrayXd batch = sigprop::Relu<Eigen::ArrayXd>::corr_complement(deltas);
  for (Eigen::Index i = 0; i < deltas.size(); ++i)
    CHECK(batch(i) == sigprop::Relu<double>::corr_complement(deltas(i)));

  CHECK_THROWS_WITH(sigprop::Gelu<double>::corr_complement(1, 2.5),
                    Catch::Contains("sigprop::Gelu: one_minus_corr = 2.5") && Catch::Contains("[0, 2]"));
  CHECK_THROWS_WITH(sigprop::Gelu<double>::corr_complement(0, 0.5), Catch::Contains("sigprop::Gelu: var = 0"));
  CHECK(sigprop::Gelu<double>::corr_complement(1, 0) == 0);

  // LayerNorm and RMSNorm: the domain, the ends, every region of (0, 2]
  // (connection formulas and Gauss's series below 1/16, subtraction in long
  // double above, rho <= 0) within 4 eps, and batches lane by lane.
  const sigprop::LayerNorm<double> ln5(5), ln64(64);
  CHECK_THROWS_WITH(ln5.corr_complement(std::nextafter(2.0, 3.0)),
                    Catch::Contains("sigprop::LayerNorm: one_minus_corr = 2.0000000000000004") && Catch::Contains("[0, 2]"));
  CHECK_THROWS_AS(ln5.corr_complement(-0.0 - 1e-300), sigprop::domain_error);
  CHECK_THROWS_WITH(sigprop::RmsNorm<double>(8).corr_complement(std::nan("")), Catch::Contains("sigprop::RmsNorm: one_minus_corr"));
  CHECK(ln5.corr_complement(0) == 0);
  CHECK(ln5.corr_complement(2) == 2);  // F(-1) = -1
  for (double d : {5.0, 6.0, 64.0}) {
    const sigprop::LayerNorm<double> ln(d);
    const Big c0 = sigprop::detail::layernorm_c0(Big(d));
    // 1 - r far below eps: the slope at rho = 1, F'(1) = (d - 2)/(d - 3)
    CHECK(ln.corr_complement(1e-300) == Approx(1e-300 * (d - 2) / (d - 3)).epsilon(1e-15));
    for (double delta : {1e-30, 1e-9, 0.01, 0.0624, 0.0625, 0.3, 1.0, 1.7}) {
      const Big ref = 1 - sigprop::detail::layernorm_angle<Big>(Big(d), 1 - Big(delta), c0).corr;
      INFO("d = " << d << ", 1 - r = " << delta);
      CHECK(static_cast<double>(abs((Big(ln.corr_complement(delta)) - ref) / ref)) <= 4 * eps);
    }
  }
  const Eigen::ArrayXd widths = (Eigen::ArrayXd(3) << 5, 64, 1000).finished();
  const Eigen::ArrayXd ln_delta = (Eigen::ArrayXd(3) << 1e-12, 0.01, 1.5).finished();
  const Eigen::ArrayXd ln_batch = sigprop::LayerNorm<Eigen::ArrayXd>(widths).corr_complement(ln_delta);
  for (Eigen::Index i = 0; i < widths.size(); ++i)
    CHECK(ln_batch(i) == sigprop::LayerNorm<double>(widths(i)).corr_complement(ln_delta(i)));
  CHECK(ln64.corr_complement(0.5) == Approx(1 - ln64.corr_len_map(0.5)).epsilon(1e-15));

  const Eigen::ArrayXd q = (Eigen::ArrayXd(3) << 0.5, 2.0, 8.0).finished();
  const Eigen::ArrayXd delta = (Eigen::ArrayXd(3) << 1e-12, 0.3, 1.9).finished();
  const Eigen::ArrayXd gbatch = sigprop::Gelu<Eigen::ArrayXd>::corr_complement(q, delta);
  for (Eigen::Index i = 0; i < q.size(); ++i)
    CHECK(gbatch(i) == Approx(sigprop::Gelu<double>::corr_complement(q(i), delta(i))).epsilon(1e-14));
}
