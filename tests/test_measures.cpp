// Whole-model measures (models/measures.hpp): their definitions on hand-made
// cases and their errors. Their agreement with simulation is in test_models.
#include "support.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "sigprop/models/measures.hpp"
#include "sigprop/models/schemes.hpp"
#include "sigprop/montecarlo.hpp"

using namespace sigprop;
using sigprop::test::within;

namespace {
ModelConfig small(Arch arch) { return sigprop::test::model_of(arch, 4, 128, 2, 64); }
}  // namespace

TEST_CASE("measures: Linear's weight-gradient norm", "[measures]") {
  const Linear<double> lin(100, 50, 0.01);
  const Moments<double> x{0.5, 2, 0.3, 0};
  const GradMoments<double> g{3, 0.2};
  const double L = 10;
  // d_in d_out L [(s^2 + mu^2) g + (L - 1)(r s^2 + mu^2) r_g g]
  const double expected = 100 * 50 * L * (2.25 * 3 + 9 * (0.6 + 0.25) * 0.2 * 3);
  CHECK(lin.weight_grad_sq(x, g, L) == Approx(expected).epsilon(1e-14));
  CHECK_THROWS_WITH(lin.weight_grad_sq({0, -1, 0, 0}, g, L), Catch::Contains("var = -1"));
  CHECK_THROWS_WITH(lin.weight_grad_sq(x, g, 0), Catch::Contains("seq_len = 0"));
}

TEST_CASE("measures: Serial::backward_all hands back every part's input gradient", "[measures]") {
  const auto block = ffn_block<Relu<double>>(64.0, 4.0, 0.01, 0.02, 0.1);
  const Moments<double> x{0, 1, 0.4, 0};
  const GradMoments<double> g{2, 0.3};
  const auto grads = block.backward_all(x, g);
  CHECK(grads[5].var == g.var);
  CHECK(grads[0].var == Approx(block.backward(x, g).var).epsilon(1e-15));
  CHECK(grads[0].corr_len == Approx(block.backward(x, g).corr_len).epsilon(1e-15));
  const auto states = block.forward_all(x);
  CHECK(grads[3].var == Approx(block.part<3>().backward(states[3], grads[4]).var).epsilon(1e-15));
}

TEST_CASE("measures: Spike No More bounds by hand, and their domain", "[measures]") {
  ModelConfig c = small(Arch::pre_ln);
  const ModelWeights w = initialize(c, Scheme::spike_vanilla);
  const Trace t = trace(c, w);
  const auto b = spike_bounds(c, w, t);
  REQUIRE(b.size() == 4);
  const double d = 128, dffn = 512, dh = 64, h = 2, L = 64, N = 4;
  const double s = std::sqrt(2 / (5 * d)), so = s / std::sqrt(2 * N);
  const double sx = std::sqrt(t.mid[1].forward.var * (1 - t.mid[1].forward.corr_dim));
  CHECK(b[1].ffn == Approx(1 + s * so * std::pow(std::sqrt(d) + std::sqrt(dffn), 2) / sx).epsilon(1e-13));
  const double jz = h * ((std::sqrt(L) + 2 + 1 / std::sqrt(L)) * s * s * s * std::sqrt(d * d * d * dh) +
                         s * (std::sqrt(d) + std::sqrt(dh)));
  const double sa = std::sqrt(t.rows[1].forward.var * (1 - t.rows[1].forward.corr_dim));
  CHECK(b[1].attention == Approx(1 + so * 2 * std::sqrt(d) * jz / sa).epsilon(1e-13));
  CHECK(spike_bound_log10(b) ==
        Approx(std::log10(b[0].attention * b[0].ffn * b[1].attention * b[1].ffn * b[2].attention * b[2].ffn *
                          b[3].attention * b[3].ffn))
            .epsilon(1e-12));
  ModelConfig post = small(Arch::post_ln);
  const ModelWeights wp = initialize(post, Scheme::xavier);
  CHECK_THROWS_WITH(spike_bounds(post, wp, trace(post, wp)), Catch::Contains("arch = post-ln"));
  ModelConfig deeper = c;
  deeper.layers = 5;
  CHECK_THROWS_WITH(spike_bounds(deeper, w, t), Catch::Contains("weights.layers.size() = 4"));
  CHECK_THROWS_WITH(weight_grad_norms(deeper, w, t), Catch::Contains("weights.layers.size() = 4"));
}

TEST_CASE("measures: output change and sensitivity from the residual shares", "[measures]") {
  const ModelConfig c = small(Arch::pre_ln);
  const Trace t = trace(c, initialize(c, Scheme::dslm_simple));
  const auto shares = residual_shares(t);
  REQUIRE(shares.size() == 8);
  double sum = 0;
  for (double x : shares) sum += x;
  CHECK(output_change(t) == Approx(sum).epsilon(1e-15));
  // Each term is N Var[beta f] / Var[lambda x] = N beta_ii^2 / (1 - beta_ii^2), N = 4.
  const auto terms = sensitivity_terms(t);
  for (std::size_t i = 0; i < terms.size(); ++i) CHECK(terms[i] == Approx(4 * shares[i] / (1 - shares[i])).epsilon(1e-14));
  std::vector<double> sorted = terms;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sensitivity(t) == Approx((sorted[3] + sorted[4]) / 2).epsilon(1e-15));
  // ReZero: no branch, no dependency, no sensitivity.
  const ModelConfig z = small(Arch::no_ln);
  const Trace tz = trace(z, initialize(z, Scheme::rezero));
  CHECK(output_change(tz) == 0);
  CHECK(sensitivity(tz) == 0);
  CHECK(tz.rows[4].forward.var == Approx(tz.rows[0].forward.var).epsilon(1e-15));
}

TEST_CASE("measures: one head's key and value weight gradients against simulation", "[measures][montecarlo]") {
  namespace mc = sigprop::montecarlo;
  // (r, score = d_in^2 q_var k_var, d_in, L, p, r_g, d_k): correlated inputs
  // with small and moderate scores, dropout, gradient correlation, and one
  // i.i.d. point where the coherent value term is the whole correction.
  struct Point {
    double r, score;
    int d_in, seq_len;
    double p, r_g;
    int d_k;
  };
  const Point points[] = {{0.3, 0.01, 128, 64, 0, 0, 64},  {0.3, 1, 128, 64, 0.3, 0, 64},
                          {0.7, 1, 128, 64, 0, 0.5, 64},   {0.8, 2.5, 128, 128, 0.1, 0.1, 32},
                          {0.5, 2, 256, 64, 0.1, 0, 64},   {0.0, 2, 128, 128, 0, 0, 64}};
  mc::Random rng(17);
  for (const Point& pt : points) {
    const double q = std::sqrt(pt.score) / pt.d_in, v = 1.0 / pt.d_in;
    const Moments<double> x{0, 1, pt.r, 0};
    const GradMoments<double> g{1, pt.r_g};
    std::vector<double> keys, values, queries;
    for (int t = 0; t < 200; ++t) {
      const auto X = mc::sample_activations(pt.seq_len, pt.d_in, x, rng);
      const auto wq = rng.normal_matrix(pt.d_in, pt.d_k, q), wk = rng.normal_matrix(pt.d_in, pt.d_k, q),
                 wv = rng.normal_matrix(pt.d_in, pt.d_k, v);
      mc::ops::Matrix out;
      const auto cache = mc::ops::attention_head_forward(X, wq, wk, wv, pt.p, rng, out);
      mc::ops::Matrix dx = mc::ops::Matrix::Zero(pt.seq_len, pt.d_in);
      mc::ops::HeadWeightGrads w;
      mc::ops::attention_head_backward(cache, X, wq, wk, wv, mc::sample_gradient(pt.seq_len, pt.d_k, g, rng), dx, &w);
      keys.push_back(w.k);
      values.push_back(w.v);
      queries.push_back(w.q);
    }
    const auto mk = mc::detail::mean_estimate(keys), mv = mc::detail::mean_estimate(values),
               mq = mc::detail::mean_estimate(queries);
    const Attention<double> a(pt.d_in, pt.d_k, pt.seq_len, q, q, v, pt.p);
    const auto pred = a.weight_grad_sq(x, g);
    INFO("r " << pt.r << " score " << pt.score << ": key " << pred.key << " vs " << mk.value << " +- " << mk.std_error
              << ", value " << pred.value << " vs " << mv.value << " +- " << mv.std_error << ", query "
              << pred.query << " vs " << mq.value << " +- " << mq.std_error);
    // 4 standard errors (1-3 % here) plus 5 % for the higher orders in the scores.
    CHECK(within(mk, pred.key, 4, 0.05 * mk.value));
    CHECK(within(mv, pred.value, 4, 0.05 * mv.value));
    CHECK(within(mq, pred.query, 4, 0.05 * mq.value));
    // Without the coherent parts the key is 8-50 % low: the check can fail.
    const auto indep = weight_grad_sq<double>(pt.d_in, pt.d_k, pt.seq_len, x, a.projection_grads(x, g).key);
    CHECK(indep < 0.93 * mk.value);
  }
}

TEST_CASE("measures: one head's query weight gradient for i.i.d. inputs and a correlated gradient",
          "[measures][montecarlo]") {
  namespace mc = sigprop::montecarlo;
  // At r = 0 and r_g > 0 the queries share the third moment of the keys and
  // values (Attention::weight_grad_sq, "shared third moment"): without it the
  // query is 13-15 % low at scores 1-2. (score, L, r_g); d_in 128, d_k 64.
  struct Point {
    double score;
    int seq_len;
    double r_g;
  };
  const Point points[] = {{2, 128, 0.5}, {1, 64, 0.9}, {0.25, 64, 0.9}};
  const int d = 128, dk = 64;
  const Moments<double> x{0, 1, 0, 0};
  mc::Random rng(23);
  for (const Point& pt : points) {
    const double q = std::sqrt(pt.score) / d, v = 1.0 / d;
    const GradMoments<double> g{1, pt.r_g};
    std::vector<double> queries;
    for (int t = 0; t < 300; ++t) {
      const auto X = mc::sample_activations(pt.seq_len, d, x, rng);
      const auto wq = rng.normal_matrix(d, dk, q), wk = rng.normal_matrix(d, dk, q), wv = rng.normal_matrix(d, dk, v);
      mc::ops::Matrix out;
      const auto cache = mc::ops::attention_head_forward(X, wq, wk, wv, 0, rng, out);
      mc::ops::Matrix dx = mc::ops::Matrix::Zero(pt.seq_len, d);
      mc::ops::HeadWeightGrads w;
      mc::ops::attention_head_backward(cache, X, wq, wk, wv, mc::sample_gradient(pt.seq_len, dk, g, rng), dx, &w);
      queries.push_back(w.q);
    }
    const auto mq = mc::detail::mean_estimate(queries);
    const Attention<double> a(d, dk, pt.seq_len, q, q, v);
    const double pred = a.weight_grad_sq(x, g).query;
    const double indep = weight_grad_sq<double>(d, dk, pt.seq_len, x, a.projection_grads(x, g).query);
    INFO("score " << pt.score << " r_g " << pt.r_g << ": query " << pred << " (independent factors " << indep
                  << ") vs " << mq.value << " +- " << mq.std_error);
    // 4 standard errors (1.2-2.4 % here) plus 5 %, as above.
    CHECK(within(mq, pred, 4, 0.05 * mq.value));
    // The independent-factor form alone is 13-15 % low where the scores are
    // not small: the check can fail.
    if (pt.score >= 1) CHECK(indep < 0.92 * mq.value);
  }
}

TEST_CASE("measures: the key gradient's tilt term for i.i.d. inputs and a correlated gradient",
          "[measures][montecarlo]") {
  namespace mc = sigprop::montecarlo;
  // dK = dS^T Q / sqrt(d_k) at r = 0, r_g = 0.9 (d_in 128, d_k 64, L 64): the
  // r_g part is the tilt term common_eff (attention.hpp, "K path"), with the
  // Wishart factor t (1 + (d_in + 1)/d_k). The earlier t (2 + d_in/d_k) was
  // 11 % high at score 0.5 and 17-22 % at score 1; now within 1-9 %.
  const int d = 128, dk = 64, L = 64;
  const Moments<double> x{0, 1, 0, 0};
  const GradMoments<double> g{1, 0.9};
  mc::Random rng(31);
  for (double score : {0.5, 1.0}) {
    const double q = std::sqrt(score) / d, v = 1.0 / d;
    std::vector<double> key_var;
    for (int t = 0; t < 400; ++t) {
      const auto X = mc::sample_activations(L, d, x, rng);
      const auto wq = rng.normal_matrix(d, dk, q), wk = rng.normal_matrix(d, dk, q), wv = rng.normal_matrix(d, dk, v);
      mc::ops::Matrix out;
      const auto c = mc::ops::attention_head_forward(X, wq, wk, wv, 0, rng, out);
      const mc::ops::Matrix dp = mc::sample_gradient(L, dk, g, rng) * c.v.transpose();
      const mc::ops::Matrix dkey = (mc::ops::softmax_rows_backward(c.probs, dp) * c.scale).transpose() * c.q;
      key_var.push_back(dkey.squaredNorm() / (L * dk));
    }
    const auto m = mc::detail::mean_estimate(key_var);
    const double pred = Attention<double>(d, dk, L, q, q, v).projection_grads(x, g).key.var;
    INFO("score " << score << ": dK variance " << pred << " vs " << m.value << " +- " << m.std_error);
    // 4 standard errors (6 %) plus 5 % for the score's saturation, which the
    // first-order tilt lacks (+4-7 % at score 1, docs/components/attention.md):
    // the earlier factor (+22 % at score 1 here) fails.
    CHECK(within(m, pred, 4, 0.05 * m.value));
  }
}

TEST_CASE("measures: the key weight gradient of an anisotropic input scales its coherent part by the spread",
          "[measures][montecarlo]") {
  namespace mc = sigprop::montecarlo;
  // Position-specific part u with covariance (1 - r) diag(1 - a, 1 + a, ...):
  // spread = d tr(Sigma^2) / tr(Sigma)^2 = 1 + a^2. Xavier-like Q/K/V
  // (d_in 128, d_k 32, variance 1/80), L 128, uncorrelated gradient.
  const int d = 128, dk = 32, L = 128;
  const double w = 1.0 / 80, a = 0.9, spread = 1 + a * a;
  const Attention<double> att(d, dk, L, w, w, w);
  const GradMoments<double> g{1, 0};
  Eigen::VectorXd scale(d);
  for (int j = 0; j < d; ++j) scale(j) = std::sqrt(j % 2 ? 1 + a : 1 - a);
  mc::Random rng(29);
  for (double r : {0.3, 0.75}) {
    const Moments<double> x{0, 1, r, 0};
    std::vector<double> keys;
    for (int t = 0; t < 200; ++t) {
      const mc::ops::Matrix u = mc::sample_activations(L, d, {0, 1 - r, 0, 0}, rng) * scale.asDiagonal();
      const mc::ops::Matrix c = rng.normal_matrix(1, d, r);
      const mc::ops::Matrix X = u.rowwise() + c.row(0);
      const auto wq = rng.normal_matrix(d, dk, w), wk = rng.normal_matrix(d, dk, w), wv = rng.normal_matrix(d, dk, w);
      mc::ops::Matrix out;
      const auto cache = mc::ops::attention_head_forward(X, wq, wk, wv, 0, rng, out);
      mc::ops::Matrix dx = mc::ops::Matrix::Zero(L, d);
      mc::ops::HeadWeightGrads h;
      mc::ops::attention_head_backward(cache, X, wq, wk, wv, mc::sample_gradient(L, dk, g, rng), dx, &h);
      keys.push_back(h.k);
    }
    const auto mk = mc::detail::mean_estimate(keys);
    const double pred = att.weight_grad_sq(x, g, spread).key, isotropic = att.weight_grad_sq(x, g).key;
    INFO("r " << r << ": key " << pred << " (isotropic " << isotropic << ") vs " << mk.value << " +- " << mk.std_error);
    // Same tolerance as the isotropic points (4 se, 2-3 % here, plus 5 %).
    CHECK(within(mk, pred, 4, 0.05 * mk.value));
    // The isotropic form is 15-25 % low here: the check can fail.
    CHECK(isotropic < 0.9 * mk.value);
  }
  const Moments<double> x{0, 1, 0.5, 0};
  CHECK_THROWS_WITH(att.weight_grad_sq(x, g, 0.5), Catch::Contains("spread = 0.5") && Catch::Contains("[1, inf)"));
  CHECK_THROWS_WITH(att.weight_grad_sq(x, g, 200), Catch::Contains("spread = 200") && Catch::Contains("d_in = 128"));
}
