// The hidden spread of core/hidden_spread.hpp (the anisotropy of one
// sequence's hidden covariance) against simulation: its maps through Linear,
// the activations, dropout, LayerNorm and a residual sum, and what it changes
// in attention (the tilt of the softmax-weighted average).
//
// Every check: |predicted - measured| within 5 standard errors (a correct
// formula fails with probability < 6e-7 per check) plus a stated relative
// margin for the rule's approximations; each discriminating check also asserts
// that the form it replaces misses by more than 5 standard errors.
#include "support.hpp"

#include <cmath>
#include <cstdio>

#include "sigprop/montecarlo.hpp"
#include "sigprop/sigprop.hpp"

namespace {

using namespace sigprop;
namespace mc = sigprop::montecarlo;
using Matrix = Eigen::MatrixXd;

void check_close(const char* what, const mc::Estimate& e, double predicted, double margin) {
  std::printf("%-40s predicted %.4f measured %.4f +- %.4f\n", what, predicted, e.value, e.std_error);
  sigprop::test::check_within(what, e, predicted, 5, margin * std::abs(predicted));
}

void check_misses(const char* what, const mc::Estimate& e, double old_form) {
  INFO(what << ": the replaced form " << old_form << ", measured " << e.value << " +- " << e.std_error);
  std::printf("%-40s replaced form %.4f\n", what, old_form);
  CHECK(sigprop::test::outside(e, old_form, 5));
}

mc::Estimate spread_of(const std::vector<Matrix>& xs) {
  mc::VectorMomentAccumulator acc;
  for (const Matrix& x : xs) acc.add(x);
  return acc.hidden_spread();
}

// Rows of moments m (sample_activations) times a fresh d x d Gaussian matrix
// of variance 1/d: mean 0, variance and corr_len kept, and the hidden
// covariance of the position-specific part spread by Linear's rule.
Matrix spread_rows(Eigen::Index L, Eigen::Index d, const Moments<double>& m, mc::Random& rng) {
  return mc::sample_activations(L, d, m, rng) * rng.normal_matrix(d, d, 1.0 / static_cast<double>(d));
}

Moments<double> spread_moments(double d, double corr_len) {
  Moments<double> m{0, 1, corr_len, 0};
  m.hidden_spread = spread::linear_map(0.0, d, d);
  return m;
}

}  // namespace

TEST_CASE("hidden_spread: Linear maps and a LayerNorm against simulation", "[hidden_spread][montecarlo]") {
  const Eigen::Index L = 96, d = 64, wide = 160;
  mc::Random rng(20261126);
  std::vector<Matrix> up, down, normed;
  for (int t = 0; t < 200; ++t) {
    const Matrix x = mc::sample_activations(L, d, Moments<double>{0, 1, 0.3, 0}, rng);
    up.push_back(x * rng.normal_matrix(d, wide, 1.0 / d));
    down.push_back(up.back() * rng.normal_matrix(wide, d, 1.0 / wide));
    normed.push_back(mc::ops::layernorm_forward(down.back()).y);
  }
  const Moments<double> in{0, 1, 0.3, 0};
  const Moments<double> a = Linear<double>(d, wide, 1.0 / d).forward(in);
  const Moments<double> b = Linear<double>(wide, d, 1.0 / wide).forward(a);
  const Moments<double> c = LayerNorm<double>(d).forward(b);
  // The estimator's own bias is (1 + a)/(L - 1) (the sample covariance's
  // second moment): 2 % at a = 1.5, L = 96.
  check_close("Linear 64 -> 160", spread_of(up), a.hidden_spread, 0.03);
  check_close("Linear 160 -> 64", spread_of(down), b.hidden_spread, 0.03);
  const mc::Estimate after_norm = spread_of(normed);
  check_close("LayerNorm", after_norm, c.hidden_spread, 0.03);
  check_misses("LayerNorm keeping the input's", after_norm, b.hidden_spread);
}

TEST_CASE("hidden_spread: activations and dropout keep the share of their output linear in the input",
          "[hidden_spread][montecarlo]") {
  const Eigen::Index L = 96, d = 64;
  mc::Random rng(7);
  // Activations on rows without a shared part (corr_len 0), where every
  // unit's slope is E[phi'] (a shared part spreads the units' variances too:
  // not modelled, core/hidden_spread.hpp); dropout with a shared part
  // (corr_len 0.5), whose m_j^2 spreads them by (p/(1 - p))^2 Var[m_j^2]/V^2.
  std::vector<Matrix> relu, gelu, drop, relu_shared;
  for (int t = 0; t < 300; ++t) {
    const Matrix x = spread_rows(L, d, Moments<double>{0, 1, 0, 0}, rng);
    relu.push_back(mc::ops::activation_forward(mc::ops::Activation::relu, x));
    gelu.push_back(mc::ops::activation_forward(mc::ops::Activation::gelu, Matrix(x.array() * 2.0 + 0.5)));
    const Matrix shared = spread_rows(L, d, Moments<double>{0, 1, 0.5, 0}, rng);
    drop.push_back(shared.cwiseProduct(mc::ops::dropout_mask(L, d, 0.3, rng)));
    relu_shared.push_back(mc::ops::activation_forward(mc::ops::Activation::relu, shared));
  }
  const Moments<double> in = spread_moments(d, 0);
  Moments<double> shifted = in;  // 2 x + 0.5
  shifted.mean = 0.5;
  shifted.var = 4;
  const Moments<double> with_shared = spread_moments(d, 0.5);
  const Moments<double> r = Relu<double>().forward(in), g = Gelu<double>().forward(shifted),
                        p = Dropout<double>(0.3).forward(with_shared);
  const mc::Estimate relu_measured = spread_of(relu), drop_measured = spread_of(drop);
  // Margin 10 %: the rule takes the nonlinear part isotropic, but its
  // variance follows each unit's S_jj (measured 2.5-8 % above the rule).
  check_close("ReLU", relu_measured, r.hidden_spread, 0.1);
  check_close("GeLU, mean 0.5, var 4", spread_of(gelu), g.hidden_spread, 0.1);
  check_close("Dropout 0.3, corr_len 0.5", drop_measured, p.hidden_spread, 0.1);
  check_misses("ReLU keeping the input's", relu_measured, in.hidden_spread);
  // The known gap (core/hidden_spread.hpp): with a large shared part the
  // units' unequal variances add spread the activations' rule does not carry.
  const double relu_shared_predicted = Relu<double>().forward(spread_moments(d, 0.5)).hidden_spread;
  const mc::Estimate relu_shared_measured = spread_of(relu_shared);
  std::printf("%-40s predicted %.4f measured %.4f +- %.4f (not modelled)\n", "ReLU, corr_len 0.5",
              relu_shared_predicted, relu_shared_measured.value, relu_shared_measured.std_error);
  CHECK(relu_shared_measured.value > relu_shared_predicted);
  // Dropout without the spread of the units' variances: a_in k^2 alone.
  const double k = 0.5 / (p.var * (1 - p.corr_len));
  check_misses("Dropout without m_j^2", drop_measured, with_shared.hidden_spread * k * k);
}

TEST_CASE("hidden_spread: a residual sum carries the branch's part linear in its input",
          "[hidden_spread][residual][montecarlo]") {
  // x + FFN(x) with x spread by a square map: the sum's spread holds the
  // cross term 2 A B_lin (1 + a_x) (core/hidden_spread.hpp).
  const Eigen::Index L = 96, d = 64, hidden = 128;
  const double w1 = 2.0 / d, w2 = 0.6 / hidden;
  mc::Random rng(11);
  std::vector<Matrix> sums;
  for (int t = 0; t < 300; ++t) {
    const Matrix x = spread_rows(L, d, Moments<double>{0, 1, 0.2, 0}, rng);
    const Matrix h = mc::ops::activation_forward(mc::ops::Activation::relu, Matrix(x * rng.normal_matrix(d, hidden, w1)));
    sums.push_back(x + h * rng.normal_matrix(hidden, d, w2));
  }
  const Moments<double> in = spread_moments(d, 0.2);
  const auto block = residual(serial(Linear<double>(d, hidden, w1), Relu<double>(), Linear<double>(hidden, d, w2)));
  const Moments<double> out = block.forward(in);
  const mc::Estimate measured = spread_of(sums);
  check_close("x + FFN(x)", measured, out.hidden_spread, 0.05);
  // Without the cross term (linear_share 0 in the branch's output).
  Moments<double> f = block.branch().forward(in);
  f.linear_share = 0;
  const double no_cross = spread::residual_sum(in, f, spread::position_var(in), spread::position_var(f));
  check_misses("x + FFN(x) without the cross term", measured, no_cross);
}

TEST_CASE("attention: the tilt reads the input's hidden spread", "[hidden_spread][attention][montecarlo]") {
  // One head on rows of spread ~1: the softmax-weighted average is tilted
  // along S w_i, of squared size t m2 pos_var^2 (1 + spread).
  const Eigen::Index L = 64, d = 64, dk = 32;
  // Q/K weight variance for a score variance sigma^2 = (1 - r) d^2 q^2 = 2.2.
  const double r = 0.2, q = std::sqrt(2.2 / (d * d * (1 - r))), v = 1.0 / d;
  mc::Random rng(5);
  mc::MomentAccumulator out;
  for (int t = 0; t < 600; ++t) {
    const Matrix x = spread_rows(L, d, Moments<double>{0, 1, r, 0}, rng);
    Matrix y;
    mc::ops::attention_head_forward(x, rng.normal_matrix(d, dk, q), rng.normal_matrix(d, dk, q),
                                    rng.normal_matrix(d, dk, v), 0, rng, y);
    out.add(y);
  }
  const Attention<double> head(d, dk, L, q, q, v, 0);
  const Moments<double> in = spread_moments(d, r);
  Moments<double> isotropic = in;
  isotropic.hidden_spread = 0;
  const mc::MomentEstimates e = out.result();
  check_close("attention corr_len", e.corr_len, head.forward(in).corr_len, 0.01);
  check_misses("attention corr_len, isotropic rows", e.corr_len, head.forward(isotropic).corr_len);
}

TEST_CASE("attention: the part of the output linear in the query's own row is the tilt",
          "[hidden_spread][attention][montecarlo]") {
  // Two linear shares of one head's output y_i in its input row x_i.
  // Population (the weights fixed, over many sequences): Stein's lemma gives
  // E[d y_i/d x_i] = Cov(y_i, x_i)/pos_var for Gaussian rows of isotropic
  // covariance, estimated from many sequences (its sampling noise, tr Var/n,
  // subtracted); V_lin = ||E[d y_i/d x_i]||_F^2 pos_var/d_out per unit,
  // against the tilt's (1 - rho) gamma^2 shrink^2. Within one sequence (what
  // the residual sum's spread uses, core/hidden_spread.hpp): to first order
  // y_i - ybar = x_i M S^ Wv with S^ the sequence's own key covariance, whose
  // Wishart fluctuation adds (d_in + 1)/L of the isotropic tilt; measured by
  // montecarlo::cross_share (sample-size corrected), against
  // Attention::forward's linear_share. Both within 5 standard errors plus 5 %
  // (the weight P_ii of the row itself is neglected), and each misses the
  // other's form.
  const Eigen::Index L = 64, d = 64, dk = 32;
  const double r = 0.0, q = std::sqrt(2.0 / (d * d)), v = 1.0 / d;
  mc::Random rng(3);
  std::vector<double> linear, total, within;
  for (int w = 0; w < 12; ++w) {
    const Matrix wq = rng.normal_matrix(d, dk, q), wk = rng.normal_matrix(d, dk, q), wv = rng.normal_matrix(d, dk, v);
    const int sequences = 150;
    Matrix sum = Matrix::Zero(d, dk), sum_sq = Matrix::Zero(d, dk);
    double pos = 0;
    for (int s = 0; s < sequences; ++s) {
      const Matrix x = mc::sample_activations(L, d, Moments<double>{0, 1, r, 0}, rng);
      Matrix y;
      mc::ops::attention_head_forward(x, wq, wk, wv, 0, rng, y);
      const Matrix dx = x.rowwise() - x.colwise().mean(), dy = y.rowwise() - y.colwise().mean();
      const Matrix c = dx.transpose() * dy / static_cast<double>(L - 1);
      sum += c;
      sum_sq += c.cwiseProduct(c);
      pos += dy.squaredNorm() / static_cast<double>((L - 1) * dk);
      within.push_back(mc::cross_share(x, y));
    }
    const Matrix mean = sum / sequences;
    const double noise = (sum_sq / sequences - mean.cwiseProduct(mean)).sum() / (sequences - 1);
    linear.push_back((mean.squaredNorm() - noise) / dk);  // pos_var of the input = 1
    total.push_back(pos / sequences);
  }
  const mc::Estimate share = mc::detail::ratio_estimate(linear, total);
  const mc::Estimate share_within = mc::detail::mean_estimate(within);
  const Attention<double> head(d, dk, L, q, q, v, 0);
  const Moments<double> in{0, 1, r, 0};
  const auto a = head.terms(in);
  const auto s = head.softmax_sums(a);
  const Moments<double> o = head.forward_with(a, s);
  const double population =
      d * v * (1 - a.corr_queries) * a.tilt_var * s.shrink_sq / (o.var * (1 - o.corr_len));
  check_close("attention linear_share, population", share, population, 0.05);
  check_close("attention linear_share, within a sequence", share_within, head.forward(in).linear_share, 0.05);
  check_misses("attention linear_share 0", share_within, 0.0);
  check_misses("within a sequence, the population form", share_within, population);
  check_misses("population, the within-sequence form", share, head.forward(in).linear_share);
}

TEST_CASE("hidden_spread: defaults, validation and batches", "[hidden_spread]") {
  Moments<double> m;
  CHECK(m.hidden_spread == 0);
  CHECK(m.linear_share == 1);
  m.hidden_spread = -0.1;
  CHECK_THROWS_WITH(Linear<double>(4, 4, 1).forward(m),
                    Catch::Matchers::Contains("hidden_spread") && Catch::Matchers::Contains("-0.1"));
  m.hidden_spread = 0;
  m.linear_share = 1.5;
  CHECK_THROWS_WITH(Relu<double>().forward(m), Catch::Matchers::Contains("linear_share") &&
                                                   Catch::Matchers::Contains("[0, 1]"));
  // A batch that leaves the fields unset reads the defaults in every lane.
  using A = Eigen::ArrayXd;
  Moments<A> batch{A::Zero(3), A::Constant(3, 1.0), A::Constant(3, 0.2), A::Zero(3)};
  const Moments<A> y = Linear<A>(A::Constant(3, 8.0), A::Constant(3, 8.0), A::Constant(3, 0.125)).forward(batch);
  CHECK(y.hidden_spread(1) == Approx(9.0 / 8));
  CHECK(y.linear_share(2) == 1);
  const Moments<double> one = Linear<double>(8, 8, 0.125).forward(Moments<double>{0, 1, 0.2, 0});
  CHECK(one.hidden_spread == Approx(9.0 / 8));
}
