// The papers' comparisons recomputed with the calculus (models/reproductions.hpp;
// the full output is examples/reproductions, recorded in docs/schemes.md).
#include <string>

#include "catch.hpp"
#include "sigprop/models/reproductions.hpp"

using namespace sigprop;

TEST_CASE("reproductions: growth laws are told apart", "[reproductions]") {
  const std::vector<double> n = {12, 24, 48, 96, 192, 384, 768};
  std::vector<double> power, expo, logn, flat;
  for (double x : n) {
    power.push_back(3 * std::pow(x, -0.5));
    expo.push_back(std::exp(-0.02 * x));
    logn.push_back(1 + std::log(x));
    flat.push_back(1 + 0.1 * std::sin(x));
  }
  CHECK(fit_growth(n, power).law == "N^-0.50");
  CHECK(fit_growth(n, power).power == Approx(-0.5).epsilon(1e-12));
  CHECK(fit_growth(n, expo).law == "e^(-0.02 N)");
  CHECK(fit_growth(n, logn).law == "log N");
  CHECK(fit_growth(n, flat).law == "1");
}

TEST_CASE("reproductions: DeepScaleLM Table 3 growth with depth", "[reproductions]") {
  const auto rows = table3();
  const auto row = [&](const char* scheme, Arch arch) {
    for (const auto& r : rows)
      if (r.scheme == scheme && r.arch == arch) return r;
    FAIL("no row " << scheme);
    return rows[0];
  };
  // Post-LN Xavier: the gradient vanishes exponentially (2e-14 at N = 768), sensitivity ~ N.
  const auto post = row("xavier", Arch::post_ln);
  CHECK(post.backward_fit.rate == Approx(-0.0377).epsilon(0.02));
  CHECK(post.sensitivity_fit.power == Approx(1).margin(0.05));
  // DS-Init: gradient flat, sensitivity 1/N, both architectures.
  for (Arch a : {Arch::post_ln, Arch::pre_ln}) {
    const auto ds = row("ds-init", a);
    CHECK(ds.backward_fit.law == "1");
    CHECK(ds.sensitivity_fit.power == Approx(-1).margin(0.05));
  }
  // DeepNet: gradient flat, sensitivity N^-0.5.
  const auto deep = row("deepnet", Arch::post_ln);
  CHECK(deep.backward_fit.law == "1");
  CHECK(deep.sensitivity_fit.power == Approx(-0.5).margin(0.02));
  // DSLM: everything flat; the sensitivity tends to k = 2.
  for (Arch a : {Arch::post_ln, Arch::pre_ln}) {
    const auto dslm = row("dslm", a);
    CHECK(dslm.backward_fit.law == "1");
    CHECK(dslm.sensitivity_fit.law == "1");
    CHECK(dslm.sensitivity.back() == Approx(2).margin(0.05));
    if (a == Arch::pre_ln) CHECK(dslm.forward_fit.law == "1");
  }
  // Pre-LN Xavier: forward ~N, gradient grows towards the input, sensitivity
  // O(1) by the median and log N by the mean (the paper's Table 3 entry).
  const auto pre = row("xavier", Arch::pre_ln);
  CHECK(pre.forward_fit.power == Approx(1).margin(0.1));
  CHECK(pre.backward.back() > 20 * pre.backward.front() / 5);
  CHECK(pre.sensitivity_fit.law == "1");
  CHECK(pre.sensitivity_mean_fit.law == "log N");
  // LayerScale at a fixed beta = 0.1: sensitivity grows with N (beta N), and so
  // does the forward variance once beta^2 N is of order 1 (measured 14 at N = 768).
  const auto ls = row("layerscale", Arch::pre_ln);
  CHECK(ls.sensitivity.back() > 10 * ls.sensitivity.front());
  CHECK(ls.forward.back() == Approx(14.4).epsilon(0.02));
}

TEST_CASE("reproductions: Xiong et al. Lemma 2", "[reproductions]") {
  for (double r : {0.0, 0.2})
    for (double v : xiong_post_ln(6, r)) CHECK(v == Approx(1.5).epsilon(1e-12));
  for (double r : {0.0, 0.2}) {
    for (const XiongRow& row : xiong_pre_ln(12, r)) {
      INFO("r = " << r << " l = " << row.layer);
      CHECK(row.norm_sq_per_d >= row.lower * (1 - 1e-12));
      CHECK(row.norm_sq_per_d <= row.upper * (1 + 1e-12));
    }
  }
  // i.i.d. tokens: uniform attention averages them away, so layer 1 sits on the lower bound.
  CHECK(xiong_pre_ln(1, 0)[1].norm_sq_per_d == Approx(1.5).margin(0.005));
}

TEST_CASE("reproductions: Xiong et al. Theorem 1, the last W2 gradient over depth", "[reproductions]") {
  const LastLayerGradient g = xiong_theorem1();
  // Post-LN: flat (the last layer sees the same LayerNorm-normalized input at every depth).
  CHECK(g.post_fit.law == "1");
  CHECK(g.post_ln.back() == Approx(g.post_ln.front()).epsilon(1e-9));
  // Pre-LN: the final LayerNorm divides by a stream whose variance grows ~N, so the squared norm falls ~1/N.
  CHECK(g.pre_fit.power == Approx(-1).margin(0.1));
  CHECK(g.pre_ln.back() * g.depths.back() == Approx(g.pre_ln[3] * g.depths[3]).epsilon(0.1));
}

TEST_CASE("reproductions: Admin's output change, O(log N) against O(N)", "[reproductions]") {
  const OutputChange o = admin_output_change();
  CHECK(o.post_fit.power == Approx(1).margin(0.05));
  CHECK(o.pre_fit.law == "log N");
  CHECK(o.admin_fit.law == "log N");
  CHECK(o.admin_code_fit.law == "log N");
  CHECK(o.post_ln.back() > 50 * o.pre_ln.back());
  CHECK(o.admin.back() == Approx(o.pre_ln.back()).epsilon(0.3));
}

TEST_CASE("reproductions: Spike No More's bounds at 350M, 1.7B and 13B", "[reproductions]") {
  const auto rows = spike_shapes();
  REQUIRE(rows.size() == 15);
  const auto at = [&](const std::string& model, const std::string& init) {
    for (const auto& r : rows)
      if (r.model == model && r.init == init) return r;
    FAIL("no row " << model << " " << init);
    return rows[0];
  };
  for (const char* m : {"350M", "1.7B", "13B"}) {
    INFO(m);
    // Small sub-layers and a large shortcut keep the FFN bound of layer 1 small ...
    CHECK(at(m, "scaled-embed").ffn_first < 2);
    CHECK(at(m, "embed-ln").ffn_first < 2);
    // ... Vanilla's shortcut (embedding std sqrt(2/(5d))) does not, nor Xavier's.
    CHECK(at(m, "spike-vanilla").ffn_first > 10);
    CHECK(at(m, "xavier").ffn_first > 10);
    // A large shortcut alone (Xavier + Scaled Embed) sits between.
    CHECK(at(m, "xavier-scaled-embed").ffn_first > 2);
    CHECK(at(m, "xavier-scaled-embed").ffn_first < 5);
    CHECK(at(m, "embed-ln").log10_product < at(m, "spike-vanilla").log10_product);
    CHECK(at(m, "scaled-embed").log10_product < at(m, "spike-vanilla").log10_product);
  }
  // Vanilla's bound grows with d (the paper: spikes more frequent at 1.7B than at 350M).
  CHECK(at("350M", "spike-vanilla").ffn_first < at("1.7B", "spike-vanilla").ffn_first);
  CHECK(at("1.7B", "spike-vanilla").ffn_first < at("13B", "spike-vanilla").ffn_first);
  CHECK(at("350M", "spike-vanilla").ffn_first == Approx(18.4).epsilon(0.01));
}
