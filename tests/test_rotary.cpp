// Rotary position embeddings on attention heads (components/detail/rotary.hpp,
// components/attention.hpp, components/causal_attention.hpp): the Dirichlet
// kernel share by hand, no rotation = the plain head, simulation with real
// rotated queries and keys, errors.
#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdio>
#include <vector>

#include "support.hpp"
#include "sigprop/montecarlo/components/causal_attention.hpp"

using namespace sigprop;
using sigprop::test::outside;
using sigprop::test::within;
namespace mc = sigprop::montecarlo;

TEST_CASE("Rotary: the share of pairs that stay put, by direct sums", "[rotary]") {
  // f_n = mean_j |(1/n) sum_{k < n} e^{i k theta_j}|^2, theta_j = base^(-2j/d_k).
  const RotaryEmbedding rotary{10000};
  for (double d_k : {2.0, 8.0, 32.0, 33.0, 128.0})
    for (double n : {1.0, 2.0, 7.0, 64.0, 1000.0}) {
      const int pairs = static_cast<int>(d_k / 2);
      double sum = 0;
      for (int j = 0; j < pairs; ++j) {
        const double theta = std::pow(10000.0, -2.0 * j / d_k);
        std::complex<double> mean = 0;
        for (int k = 0; k < static_cast<int>(n); ++k) mean += std::polar(1.0, k * theta) / n;
        sum += std::norm(mean);
      }
      INFO("d_k " << d_k << " n " << n);
      CHECK(detail::rotary_keep(rotary, n, d_k) == Approx(sum / pairs).epsilon(1e-10));
    }
  CHECK(detail::rotary_keep(RotaryEmbedding{}, 100.0, 32.0) == 1);
  // The per-thread cache returns what a fresh evaluation gives.
  CHECK(detail::rotary_keep(rotary, 77.0, 32.0) == detail::rotary_keep_of(10000, 77, 32));
  CHECK(detail::rotary_keep(rotary, 77.0, 32.0) == detail::rotary_keep_of(10000, 77, 32));
  CHECK(detail::rotary_keep(rotary, 1.0, 32.0) == Approx(1).epsilon(1e-15));
  // The first pair turns by one radian per position: gone after a few keys;
  // the slowest (theta = 10000^(-15/16)) barely turns over 256 keys.
  CHECK(detail::rotary_keep(rotary, 256.0, 2.0) < 1e-4);
  CHECK(detail::rotary_keep(rotary, 256.0, 32.0) == Approx(0.42).margin(0.05));
  // Batched lanes: each its own n and d_k.
  const Eigen::Array2d n{64, 256}, dk{32, 64};
  const Eigen::Array2d both = detail::rotary_keep(rotary, n, dk);
  CHECK(both(0) == detail::rotary_keep(rotary, 64.0, 32.0));
  CHECK(both(1) == detail::rotary_keep(rotary, 256.0, 64.0));
}

TEST_CASE("Rotary: base 0 is the plain head, bit for bit", "[rotary]") {
  const Moments<double> in{0.1, 1.3, 0.4, 0.05};
  const GradMoments<double> g{0.7, 0.3};
  const Attention<double> plain(96, 32, 128, 0.01, 0.012, 0.01, 0.1);
  const Attention<double> none(96, 32, 128, 0.01, 0.012, 0.01, 0.1, AttentionGradient::all_paths, {});
  CHECK(plain.forward(in).var == none.forward(in).var);
  CHECK(plain.forward(in).corr_len == none.forward(in).corr_len);
  CHECK(plain.backward(in, g).var == none.backward(in, g).var);
  CHECK(plain.backward(in, g).corr_len == none.backward(in, g).corr_len);
  const CausalAttention<double> causal(96, 32, 128, 0.01, 0.012, 0.01, 0.1);
  const CausalAttention<double> causal_none(96, 32, 128, 0.01, 0.012, 0.01, 0.1, AttentionGradient::all_paths, {});
  CHECK(causal.forward(in).var == causal_none.forward(in).var);
  CHECK(causal.backward(in, g).var == causal_none.backward(in, g).var);
  // And a rotation changes them (a separate memo entry, not the plain one's).
  const Attention<double> rotated(96, 32, 128, 0.01, 0.012, 0.01, 0.1, AttentionGradient::all_paths, {10000});
  CHECK(rotated.backward(in, g).var != plain.backward(in, g).var);
  CHECK(rotated.rotary().base == 10000);
  // with_gradient keeps every parameter, the rotation included.
  const CausalAttention<double> causal_rotated(96, 32, 128, 0.01, 0.012, 0.01, 0.1, AttentionGradient::all_paths,
                                               {10000});
  const CausalAttention<double> value_only = causal_rotated.with_gradient(AttentionGradient::value_path_only);
  CHECK(value_only.full().rotary().base == 10000);
  CHECK(value_only.full().gradient() == AttentionGradient::value_path_only);
  const CausalAttention<double> direct(96, 32, 128, 0.01, 0.012, 0.01, 0.1, AttentionGradient::value_path_only,
                                       {10000});
  CHECK(value_only.backward(in, g).var == direct.backward(in, g).var);
  CHECK(value_only.backward(in, g).var != causal_rotated.backward(in, g).var);
}

TEST_CASE("Rotary: attention heads against simulation with rotated queries and keys", "[rotary][montecarlo]") {
  // Single heads, full and causal, d_in 128, v_var 1/d_in, base 10000;
  // score = d_in^2 q_var k_var. The simulation turns Q and K by
  // montecarlo::ops::rotate_pairs and back-propagates through the rotation.
  struct Point {
    double r, score;
    int seq_len;
    double r_g, p;
    bool causal;
    double d_k;
  };
  const Point points[] = {{0.0, 1, 128, 0.2, 0, false, 32},  {0.5, 1, 128, 0.2, 0, false, 32},
                          {0.5, 2, 128, 0.5, 0, false, 32},  {0.9, 1, 128, 0.2, 0, false, 32},
                          {0.3, 1, 256, 0.2, 0.1, false, 64}, {0.0, 1, 128, 0.2, 0, true, 32},
                          {0.5, 1, 128, 0.2, 0, true, 32},   {0.5, 2, 128, 0.5, 0, true, 32},
                          {0.9, 1, 128, 0.2, 0, true, 32},   {0.7, 2, 256, 0.3, 0, true, 64}};
  const double d = 128;
  std::uint64_t seed = 300;
  int plain_misses = 0;
  std::vector<double> errors, corr_errors;
  for (const Point& pt : points) {
    const double w = std::sqrt(pt.score) / d;
    const CausalAttention<double> causal(d, pt.d_k, pt.seq_len, w, w, 1 / d, pt.p, AttentionGradient::all_paths,
                                         {10000});
    const Attention<double>& full = causal.full();
    const Moments<double> in{0, 1, pt.r, 0};
    const GradMoments<double> g{1, pt.r_g};
    mc::SimulationSetup setup;
    setup.trials = 512;
    setup.seed = ++seed;
    const mc::CausalAttentionSimulation positions =
        pt.causal ? mc::simulate_positions(causal, in, g, setup) : mc::CausalAttentionSimulation{};
    const mc::SimulationResult sim = pt.causal ? positions.overall : mc::simulate(full, in, g, setup);
    const auto& f = sim.forward;
    const auto& b = sim.backward;
    const Moments<double> y = pt.causal ? causal.forward(in) : full.forward(in);
    const GradMoments<double> gx = pt.causal ? causal.backward(in, g) : full.backward(in, g);
    std::printf("%s r %.1f score %.0f L %3d r_g %.1f p %.1f d_k %.0f: var %+.2f %% (se %.2f), corr %+.4f "
                "(se %.4f), grad var %+.2f %% (se %.2f), grad corr %+.4f (se %.4f)\n",
                pt.causal ? "causal" : "full  ", pt.r, pt.score, pt.seq_len, pt.r_g, pt.p, pt.d_k,
                100 * (y.var / f.var.value - 1), 100 * f.var.std_error / f.var.value, y.corr_len - f.corr_len.value,
                f.corr_len.std_error, 100 * (gx.var / b.var.value - 1), 100 * b.var.std_error / b.var.value,
                gx.corr_len - b.corr_len.value, b.corr_len.std_error);
    INFO((pt.causal ? "causal" : "full") << " r " << pt.r << " score " << pt.score << " L " << pt.seq_len);
    // 4 standard errors plus the allowance of the heads without rotation
    // (5 % on variances, 0.01 on correlations; 0.015 on the gradient's, whose
    // largest gap here is +0.0145, the full head at r = 0.9, 5.6 standard errors).
    CHECK(within(f.var, y.var, 4, 0.05 * f.var.value));
    CHECK(within(f.corr_len, y.corr_len, 4, 0.01));
    CHECK(within(b.var, gx.var, 4, 0.05 * b.var.value));
    CHECK(within(b.corr_len, gx.corr_len, 4, 0.015));
    errors.push_back(std::abs(y.var / f.var.value - 1));
    errors.push_back(std::abs(gx.var / b.var.value - 1));
    corr_errors.push_back(std::abs(gx.corr_len - b.corr_len.value));
    if (pt.causal) {  // every position's output variance, 1, 2, 4, ..., L
      const auto predicted = causal.position_forward(in);
      for (int i = 1; i <= pt.seq_len; i *= 2) {
        const auto& m = positions.position_var[static_cast<std::size_t>(i - 1)];
        INFO("position " << i << ": " << predicted[static_cast<std::size_t>(i - 1)].var << " vs " << m.value);
        CHECK(within(m, predicted[static_cast<std::size_t>(i - 1)].var, 4, 0.05 * m.value));
      }
    }
    // The same head without rotation fails the comparison where the rotation
    // matters (a shared part r > 0 at score 1-2, or the tilt at r = 0).
    const CausalAttention<double> plain(d, pt.d_k, pt.seq_len, w, w, 1 / d, pt.p);
    const Moments<double> py = pt.causal ? plain.forward(in) : plain.full().forward(in);
    const GradMoments<double> pg = pt.causal ? plain.backward(in, g) : plain.full().backward(in, g);
    if (outside(f.var, py.var, 4, 0.05 * f.var.value) ||
        outside(b.var, pg.var, 4, 0.05 * b.var.value) ||
        outside(b.corr_len, pg.corr_len, 4, 0.015))
      ++plain_misses;
  }
  // Measured: the unrotated head misses at 8 of the 10 (gradient variance up
  // to 37 % high, its correlation up to 0.14 low, forward variance 12 % high
  // at r = 0); where the shared part dominates (r = 0.9) the rotation
  // matters least.
  CHECK(plain_misses >= 7);
  std::sort(errors.begin(), errors.end());
  std::sort(corr_errors.begin(), corr_errors.end());
  std::printf("rotary: variance errors (20): median %.2f %%, p90 %.2f %%, max %.2f %%; gradient corr max %.4f\n",
              100 * errors[errors.size() / 2], 100 * errors[errors.size() * 9 / 10], 100 * errors.back(),
              corr_errors.back());
}

TEST_CASE("Rotary: bad parameters are named", "[rotary][domain]") {
  CHECK_THROWS_WITH(Attention<double>(64, 16, 32, 0.01, 0.01, 0.01, 0, AttentionGradient::all_paths, {0.5}),
                    Catch::Contains("rotary.base") && Catch::Contains("0.5") && Catch::Contains("(1, inf)"));
  CHECK_THROWS_WITH(Attention<double>(64, 16, 32, 0.01, 0.01, 0.01, 0, AttentionGradient::all_paths,
                                      {std::nan("")}),
                    Catch::Contains("rotary.base"));
  CHECK_THROWS_WITH(CausalAttention<double>(64, 1, 32, 0.01, 0.01, 0.01, 0, AttentionGradient::all_paths, {10000}),
                    Catch::Contains("d_k (with rotary embeddings)") && Catch::Contains("{2, 3, ..., 65536}"));
  CHECK_THROWS_WITH(Attention<double>(1e6, 1e5, 32, 1e-6, 1e-6, 1e-6, 0, AttentionGradient::all_paths, {10000}),
                    Catch::Contains("d_k (with rotary embeddings) = 100000"));
  CHECK_NOTHROW(Attention<double>(65536, 65536, 32, 1e-9, 1e-9, 1e-9, 0, AttentionGradient::all_paths, {10000}));
  CHECK_THROWS_AS(CausalAttention<double>(64, 16, 32, 0.01, 0.01, 0.01, 0, AttentionGradient::all_paths,
                                          {-std::numeric_limits<double>::infinity()}),
                  domain_error);
  CHECK_NOTHROW(Attention<double>(64, 1, 32, 0.01, 0.01, 0.01, 0, AttentionGradient::all_paths, {}));
}
