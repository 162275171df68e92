// Embedding (appendix B.1): exact unit values, the paper's variants and its
// 0.227 check, and Monte Carlo of real lookup tables with i.i.d. Zipf tokens.
//
// Monte Carlo tolerances: every comparison is |measured - predicted| <= 5 se,
// se the standard error from the spread over independent trials (fresh
// tables, tokens and split each trial). A correct formula fails one such
// check with probability 5.7e-7. A rejected formula must be more than 10 se
// away; the measured distances are printed and quoted in
// docs/components/embedding.md.
#include "support.hpp"

#include <cmath>
#include <cstdio>

#include "sigprop/montecarlo/components/embedding.hpp"

using sigprop::Embedding;
using sigprop::EmbeddingConfig;
using sigprop::EmbeddingTable;
using sigprop::GradMoments;
using sigprop::Moments;
using sigprop::SegmentCorrelation;
using sigprop::TokenCorrelation;
using sigprop::test::pi;
using sigprop::test::z_score;
namespace mc = sigprop::montecarlo;

namespace {

// Direct summations, the independent check of the digamma/trigamma forms.
double harmonic_by_sum(int v) {
  double s = 0;
  for (int i = v; i >= 1; --i) s += 1.0 / i;
  return s;
}
double collision_by_sum(int v) {
  const double h = harmonic_by_sum(v);
  double s = 0;
  for (int i = v; i >= 1; --i) s += 1.0 / (static_cast<double>(i) * i * h * h);
  return s;
}
// P(two distinct positions in the same segment) by enumerating every split
// s in [lo, hi] and every pair a < b: the pair is together iff not a < s <= b.
double segment_by_enumeration(int L, int lo, int hi) {
  double together = 0, total = 0;
  for (int s = lo; s <= hi; ++s)
    for (int a = 0; a < L; ++a)
      for (int b = a + 1; b < L; ++b) {
        together += (a < s && s <= b) ? 0 : 1;
        total += 1;
      }
  return together / total;
}

EmbeddingConfig<double> only(EmbeddingTable t, double vocab, double seq_len) {
  EmbeddingConfig<double> c;
  c.vocab = vocab;
  c.seq_len = seq_len;
  c.token = t == EmbeddingTable::token;
  c.position = t == EmbeddingTable::position;
  c.segment = t == EmbeddingTable::segment;
  return c;
}

// Every forward quantity within 5 standard errors; returns the simulation.
mc::SimulationResult check_forward(const char* label, const Embedding<double>& emb, Eigen::Index width,
                                   std::size_t trials, std::uint64_t seed) {
  mc::SimulationSetup setup;
  setup.width = width;
  setup.trials = trials;
  setup.seed = seed;
  const auto sim = mc::simulate(emb, GradMoments<double>{1, 0}, setup);
  const auto pred = emb.forward();
  std::printf("%-34s corr_len measured %.5f +- %.5f, predicted %.5f (z %.2f); var %.4f +- %.4f vs %.4f\n",
              label, sim.forward.corr_len.value, sim.forward.corr_len.std_error, pred.corr_len,
              z_score(sim.forward.corr_len, pred.corr_len), sim.forward.var.value, sim.forward.var.std_error,
              pred.var);
  INFO(label);
  CHECK(z_score(sim.forward.mean, 0) <= 5);
  CHECK(z_score(sim.forward.var, pred.var) <= 5);
  CHECK(z_score(sim.forward.cov_len, pred.cov_len()) <= 5);
  CHECK(z_score(sim.forward.corr_len, pred.corr_len) <= 5);
  CHECK(z_score(sim.forward.cov_dim, 0) <= 5);
  return sim;
}

}  // namespace

TEST_CASE("Embedding: Zipf sums through Boost match direct summation", "[embedding]") {
  CHECK(sigprop::zipf_harmonic(1.0) == Approx(1).epsilon(1e-15));
  CHECK(sigprop::zipf_harmonic(2.0) == Approx(1.5).epsilon(1e-15));
  CHECK(sigprop::zipf_harmonic(10.0) == Approx(7381.0 / 2520).epsilon(1e-15));
  CHECK(sigprop::zipf_inverse_square_sum(1.0) == Approx(1).epsilon(1e-15));
  CHECK(sigprop::zipf_inverse_square_sum(3.0) == Approx(49.0 / 36).epsilon(1e-15));
  CHECK(sigprop::zipf_collision_probability(1.0) == Approx(1).epsilon(1e-15));
  CHECK(sigprop::zipf_collision_probability(2.0) == Approx((1 + 0.25) / 2.25).epsilon(1e-15));
  for (int v : {3, 10, 100, 1000, 32000}) {
    INFO("|V| = " << v);
    // Summed smallest term first, the direct sums are good to ~1e-15 relative.
    CHECK(sigprop::zipf_harmonic(static_cast<double>(v)) == Approx(harmonic_by_sum(v)).epsilon(1e-13));
    CHECK(sigprop::zipf_collision_probability(static_cast<double>(v)) ==
          Approx(collision_by_sum(v)).epsilon(1e-13));
  }
  // p_i sums to 1 and p_1 = 1/H.
  double total = 0;
  for (int i = 1; i <= 50; ++i) total += sigprop::zipf_probability(50.0, static_cast<double>(i));
  CHECK(total == Approx(1).epsilon(1e-14));
  CHECK(sigprop::zipf_probability(32000.0, 1.0) == Approx(1 / 10.950722471602016).epsilon(1e-14));
}

TEST_CASE("Embedding: token correlation variants", "[embedding]") {
  // |V| = 10, L = 8 (reference values from 30-digit arithmetic).
  using sigprop::token_length_correlation;
  const double s2 = collision_by_sum(10);
  CHECK(s2 == Approx(0.180649716687083).epsilon(1e-13));
  CHECK(token_length_correlation(10.0, 8.0, TokenCorrelation::iid_exact) == Approx(s2).epsilon(1e-14));
  CHECK(token_length_correlation(10.0, 8.0, TokenCorrelation::paper_counts) ==
        Approx((8 * s2 - 1) / 7).epsilon(1e-13));
  CHECK(token_length_correlation(10.0, 8.0, TokenCorrelation::paper_large_vocab) ==
        Approx(pi * pi / (6 * std::log(10.0) * std::log(10.0))).epsilon(1e-14));
  // |V| = 32000, L = 256.
  CHECK(token_length_correlation(32000.0, 256.0, TokenCorrelation::iid_exact) ==
        Approx(0.0137168597841109).epsilon(1e-13));
  CHECK(token_length_correlation(32000.0, 256.0, TokenCorrelation::paper_counts) ==
        Approx(0.00984908276365648).epsilon(1e-12));
  CHECK(token_length_correlation(32000.0, 256.0, TokenCorrelation::paper_large_vocab) ==
        Approx(0.0152861673837487).epsilon(1e-13));
  // The count form goes negative for short sequences (L sum p_i^2 < 1).
  CHECK(token_length_correlation(32000.0, 32.0, TokenCorrelation::paper_counts) < 0);
  // One token: every position reads the same row.
  CHECK(token_length_correlation(1.0, 8.0, TokenCorrelation::iid_exact) == Approx(1).epsilon(1e-15));
  CHECK(token_length_correlation(1.0, 8.0, TokenCorrelation::paper_counts) == Approx(1).epsilon(1e-15));
}

TEST_CASE("Embedding: segment correlation equals enumeration over splits and pairs", "[embedding]") {
  using sigprop::segment_length_correlation;
  for (int L : {2, 3, 4, 7, 16, 33}) {
    INFO("L = " << L);
    const double l = L;
    CHECK(segment_length_correlation(l, SegmentCorrelation::nonempty_exact) ==
          Approx(segment_by_enumeration(L, 1, L - 1)).margin(1e-15));
    CHECK(segment_length_correlation(l, SegmentCorrelation::inclusive_exact) ==
          Approx(segment_by_enumeration(L, 0, L)).epsilon(1e-15));
    CHECK(segment_length_correlation(l, SegmentCorrelation::inclusive_exact) == Approx(2.0 / 3).epsilon(1e-15));
    CHECK(segment_length_correlation(l, SegmentCorrelation::paper) ==
          Approx((2.0 / 3 * l * l - l) / (l * (l - 1))).epsilon(1e-14));
    // The paper's form is 1/(3 (L - 1)) below the {0, ..., L} split it assumes.
    CHECK(segment_length_correlation(l, SegmentCorrelation::inclusive_exact) -
              segment_length_correlation(l, SegmentCorrelation::paper) ==
          Approx(1 / (3 * (l - 1))).epsilon(1e-12));
  }
  CHECK(segment_length_correlation(256.0, SegmentCorrelation::nonempty_exact) ==
        Approx(508.0 / 765).epsilon(1e-15));
}

TEST_CASE("Embedding: the paper's 0.227 check and the exact default", "[embedding]") {
  // |V| = 32000, L = 256, token + position + segment with equal variances.
  EmbeddingConfig<double> c;  // the defaults are exactly this point
  const auto exact = Embedding<double>(c).forward();
  CHECK(exact.mean == 0);
  CHECK(exact.var == 3);
  CHECK(exact.corr_dim == 0);
  // (sum p_i^2 + 2 (L - 2)/(3 (L - 1)))/3, 30-digit reference.
  CHECK(exact.corr_len == Approx(0.225923049121937).epsilon(1e-13));

  c.token_corr = TokenCorrelation::paper_large_vocab;
  c.segment_corr = SegmentCorrelation::inclusive_exact;
  const double paper = Embedding<double>(c).forward().corr_len;
  const double log_v = std::log(32000.0);
  CHECK(paper == Approx(pi * pi / (18 * log_v * log_v) + 2.0 / 9).epsilon(1e-14));
  CHECK(paper == Approx(0.227317611350138).epsilon(1e-13));
  CHECK(std::round(paper * 1000) == 227);  // the paper's printed 0.227

  c.segment_corr = SegmentCorrelation::paper;  // the paper's finite-L segment form instead of 2/3
  CHECK(Embedding<double>(c).forward().corr_len == Approx(0.226881881502644).epsilon(1e-13));
  c.token_corr = TokenCorrelation::paper_counts;
  CHECK(Embedding<double>(c).forward().corr_len == Approx(0.225069519962613).epsilon(1e-12));
  std::printf("|V| = 32000, L = 256: exact default %.6f, paper large-|V| + 2/9 %.6f, observed 0.221\n",
              exact.corr_len, paper);
}

TEST_CASE("Embedding: variance weighting, table subsets, float", "[embedding]") {
  EmbeddingConfig<double> c;
  c.vocab = 100;
  c.seq_len = 32;
  c.token_var = 2.0;
  c.position_var = 0.5;
  c.segment_var = 1.0;
  c.weight_var = 7;  // unused: every table has its own variance
  const Embedding<double> emb(c);
  const double r_tok = collision_by_sum(100), r_seg = 2.0 * 30 / (3 * 31);
  const auto out = emb.forward();
  CHECK(out.var == Approx(3.5).epsilon(1e-15));
  CHECK(out.corr_len == Approx((2 * r_tok + r_seg) / 3.5).epsilon(1e-13));
  CHECK(emb.table_var(EmbeddingTable::position) == 0.5);
  CHECK(emb.table_corr_len(EmbeddingTable::position) == 0);

  // GPT-style: token + position only.
  c = EmbeddingConfig<double>{};
  c.segment = false;
  c.weight_var = 0.02;
  const auto gpt = Embedding<double>(c).forward();
  CHECK(gpt.var == Approx(0.04).epsilon(1e-15));
  CHECK(gpt.corr_len == Approx(0.0137168597841109 / 2).epsilon(1e-13));
  CHECK(Embedding<double>(c).table_var(EmbeddingTable::segment) == 0);

  // A zero-variance table contributes nothing; all zero gives the constant 0.
  c = EmbeddingConfig<double>{};
  c.segment_var = 0.0;
  CHECK(Embedding<double>(c).forward().corr_len == Approx(0.0137168597841109 / 2).epsilon(1e-13));
  c.weight_var = 0;
  const auto zero = Embedding<double>(c).forward();
  CHECK(zero.var == 0);
  CHECK(zero.corr_len == 0);

  // forward ignores its argument (only validates it).
  const Embedding<double> dflt(EmbeddingConfig<double>{});
  CHECK(dflt.forward({5, 2, 0.9, 0.1}).corr_len == dflt.forward().corr_len);

  EmbeddingConfig<float> cf;
  const auto f = Embedding<float>(cf).forward();
  CHECK(f.corr_len == Approx(0.225923049121937).epsilon(1e-6));
  CHECK(f.var == 3);
}

TEST_CASE("Embedding: backward is the identity; row gradients", "[embedding]") {
  EmbeddingConfig<double> c;
  c.vocab = 50;
  c.seq_len = 32;
  const Embedding<double> emb(c);
  const GradMoments<double> g{2.0, 0.4};
  const auto back = emb.backward({}, g);
  CHECK(back.var == 2.0);
  CHECK(back.corr_len == 0.4);

  const double h = harmonic_by_sum(50), p1 = 1 / h, p7 = 1 / (7 * h);
  CHECK(emb.row_grad_var(EmbeddingTable::token, 1, g) ==
        Approx(2 * (32 * p1 + 0.4 * 32 * 31 * p1 * p1)).epsilon(1e-13));
  CHECK(emb.row_grad_var(EmbeddingTable::token, 7, g) ==
        Approx(2 * (32 * p7 + 0.4 * 32 * 31 * p7 * p7)).epsilon(1e-13));
  CHECK(emb.row_grad_var(EmbeddingTable::position, 5, g) == 2.0);
  // Segment, split on {1, ..., 31}: E[N] = 16, E[N (N - 1)] = 32*30/3 = 320.
  CHECK(emb.row_grad_var(EmbeddingTable::segment, 1, g) == Approx(2 * (16 + 0.4 * 320)).epsilon(1e-14));
  c.segment_corr = SegmentCorrelation::inclusive_exact;  // E[N (N - 1)] = 32*31/3
  CHECK(Embedding<double>(c).row_grad_var(EmbeddingTable::segment, 2, g) ==
        Approx(2 * (16 + 0.4 * 32 * 31 / 3.0)).epsilon(1e-14));
}

TEST_CASE("Embedding: measured input moments", "[embedding]") {
  // The later version's speech experiment measured variance 2.2, correlation 0.29.
  const auto emb = Embedding<double>::measured({0, 2.2, 0.29, 0});
  CHECK(emb.is_measured());
  const auto out = emb.forward();
  CHECK(out.var == 2.2);
  CHECK(out.corr_len == 0.29);
  CHECK(emb.backward({}, {3, 0.5}).var == 3);
  CHECK_THROWS_WITH(Embedding<double>::measured({0, -1, 0.2, 0}), Catch::Contains("var = -1"));
  CHECK_THROWS_WITH(Embedding<double>::measured({0, 1, 1.5, 0}),
                    Catch::Contains("corr_len = 1.5") && Catch::Contains("[-1, 1]"));
  CHECK_THROWS_WITH(Embedding<double>::measured({std::nan(""), 1, 0, 0}), Catch::Contains("mean = nan"));
  CHECK_THROWS_WITH(Embedding<double>::measured({0, INFINITY, 0, 0}), Catch::Contains("var = inf"));
  CHECK_THROWS_AS(emb.row_grad_var(EmbeddingTable::token, 1, {1, 0}), sigprop::domain_error);
  CHECK_THROWS_AS(mc::simulate_row_grad(emb, EmbeddingTable::token, 1, {1, 0}, {}), sigprop::domain_error);

  // Its simulation is the Gaussian stand-in of appendix E.
  mc::SimulationSetup setup;
  setup.seq_len = 64;
  setup.width = 64;
  setup.trials = 64;
  setup.seed = 5;
  const auto sim = mc::simulate(emb, {1, 0}, setup);
  CHECK(z_score(sim.forward.var, 2.2) <= 5);
  CHECK(z_score(sim.forward.corr_len, 0.29) <= 5);
}

TEST_CASE("Embedding: bad configuration throws with the parameter and range", "[embedding][errors]") {
  auto with = [](auto edit) {
    EmbeddingConfig<double> c;
    edit(c);
    return c;
  };
  CHECK_THROWS_WITH(Embedding<double>(with([](auto& c) { c.vocab = 0; })),
                    Catch::Contains("vocab = 0") && Catch::Contains("[1, inf)"));
  CHECK_THROWS_WITH(Embedding<double>(with([](auto& c) { c.vocab = std::nan(""); })),
                    Catch::Contains("vocab = nan"));
  CHECK_THROWS_WITH(Embedding<double>(with([](auto& c) { c.seq_len = 1; })),
                    Catch::Contains("seq_len = 1") && Catch::Contains("[2, inf)"));
  CHECK_THROWS_WITH(Embedding<double>(with([](auto& c) { c.weight_var = -1; })),
                    Catch::Contains("weight_var = -1") && Catch::Contains("[0, inf)"));
  CHECK_THROWS_WITH(Embedding<double>(with([](auto& c) { c.token_var = -0.5; })),
                    Catch::Contains("token_var = -0.5"));
  CHECK_THROWS_WITH(Embedding<double>(with([](auto& c) { c.segment_var = INFINITY; })),
                    Catch::Contains("segment_var = inf"));
  CHECK_THROWS_WITH(Embedding<double>(with([](auto& c) { c.token = c.position = c.segment = false; })),
                    Catch::Contains("no table is enabled"));
  CHECK_THROWS_WITH(Embedding<double>(with([](auto& c) {
                      c.vocab = 3;
                      c.token_corr = TokenCorrelation::paper_large_vocab;
                    })),
                    Catch::Contains("vocab = 3") && Catch::Contains("[4, inf)"));
  CHECK_NOTHROW(Embedding<double>(with([](auto& c) {
    c.vocab = 3;
    c.token_corr = TokenCorrelation::paper_large_vocab;
    c.token = false;
  })));
  CHECK_THROWS_WITH(sigprop::zipf_harmonic(0.5), Catch::Contains("zipf_harmonic") && Catch::Contains("vocab = 0.5"));
  CHECK_THROWS_WITH(sigprop::zipf_probability(10.0, 11.0), Catch::Contains("rank = 11"));
  CHECK_THROWS_WITH(sigprop::segment_length_correlation(1.0, SegmentCorrelation::paper),
                    Catch::Contains("seq_len = 1"));

  const Embedding<double> emb(with([](auto& c) {
    c.vocab = 10;
    c.seq_len = 8;
  }));
  CHECK_THROWS_WITH(emb.row_grad_var(EmbeddingTable::token, 0, {1, 0}), Catch::Contains("row = 0"));
  CHECK_THROWS_WITH(emb.row_grad_var(EmbeddingTable::token, 11, {1, 0}), Catch::Contains("row = 11"));
  CHECK_THROWS_WITH(emb.row_grad_var(EmbeddingTable::position, 9, {1, 0}),
                    Catch::Contains("row = 9") && Catch::Contains("{1, ..., 8}"));
  CHECK_THROWS_WITH(emb.row_grad_var(EmbeddingTable::segment, 3, {1, 0}), Catch::Contains("row = 3"));
  CHECK_THROWS_WITH(emb.row_grad_var(EmbeddingTable::position, 1, {-1, 0}), Catch::Contains("grad_var = -1"));
  const Embedding<double> no_segment(with([](auto& c) { c.segment = false; }));
  CHECK_THROWS_WITH(no_segment.row_grad_var(EmbeddingTable::segment, 1, {1, 0}),
                    Catch::Contains("segment table is not part"));

  // Simulation sizes: integer vocabulary and length, vocabulary within the sampler's table.
  CHECK_THROWS_WITH(mc::simulate(Embedding<double>(with([](auto& c) { c.vocab = 10.5; })), {1, 0}, {}),
                    Catch::Contains("vocab = 10.5"));
  CHECK_THROWS_WITH(mc::simulate(Embedding<double>(with([](auto& c) { c.vocab = 2e7; })), {1, 0}, {}),
                    Catch::Contains("vocab = 20000000"));
  CHECK_THROWS_WITH(mc::simulate(Embedding<double>(with([](auto& c) { c.seq_len = 8.5; })), {1, 0}, {}),
                    Catch::Contains("seq_len = 8.5"));
}

TEST_CASE("Embedding: the Zipf sampler draws p_i = 1/(i H)", "[embedding][montecarlo]") {
  // 4e5 draws over |V| = 1000; each bucket count is binomial with
  // se = sqrt(n p (1 - p)); z <= 5.
  const mc::ZipfSampler zipf(1000);
  mc::Random rng(11);
  const int n = 400000;
  std::vector<double> counts(1001, 0);
  for (int k = 0; k < n; ++k) counts[static_cast<std::size_t>(zipf(rng))] += 1;
  const double h = harmonic_by_sum(1000);
  auto check_bucket = [&](double observed, double p) {
    const double se = std::sqrt(n * p * (1 - p));
    INFO("p = " << p << ", observed " << observed << ", expected " << n * p);
    CHECK(std::abs(observed - n * p) <= 5 * se);
  };
  for (int i : {1, 2, 3, 10, 1000}) check_bucket(counts[static_cast<std::size_t>(i)], 1 / (i * h));
  double tail = 0;  // ranks 501..1000
  for (int i = 501; i <= 1000; ++i) tail += counts[static_cast<std::size_t>(i)];
  check_bucket(tail, (harmonic_by_sum(1000) - harmonic_by_sum(500)) / h);
  CHECK(counts[0] == 0);
  CHECK(mc::ZipfSampler(1)(rng) == 1);
}

TEST_CASE("Embedding: Monte Carlo of the default forms", "[embedding][montecarlo]") {
  // BERT point: |V| = 32000, L = 256, three tables. Trials vary mostly by the
  // split point (sd of one trial's r about 0.06), so 1500 trials give
  // se(r) ~ 0.0015.
  check_forward("BERT |V|=32000 L=256 d=64", Embedding<double>(EmbeddingConfig<double>{}), 64, 1500, 101);

  // Unequal per-table variances, L = 32, |V| = 100, the {0, ..., L} split.
  EmbeddingConfig<double> c;
  c.vocab = 100;
  c.seq_len = 32;
  c.token_var = 2.0;
  c.position_var = 0.5;
  c.segment_var = 1.0;
  c.segment_corr = SegmentCorrelation::inclusive_exact;
  check_forward("mixed |V|=100 L=32 vars 2/0.5/1", Embedding<double>(c), 64, 1500, 102);

  // GPT-style token + position, |V| = 1000, L = 64.
  c = EmbeddingConfig<double>{};
  c.vocab = 1000;
  c.seq_len = 64;
  c.segment = false;
  check_forward("token+position |V|=1000 L=64", Embedding<double>(c), 64, 1500, 103);

  // A single-token vocabulary: every position reads one row, so each trial's
  // length and variance sums are the same numbers: r = 1 up to rounding.
  // (The uniform four-argument signature; the input moments are ignored.)
  const auto one = mc::simulate(Embedding<double>(only(EmbeddingTable::token, 1, 16)), Moments<double>{},
                                {1, 0}, {16, 32, 64, 104});
  CHECK(one.forward.corr_len.value == Approx(1).margin(1e-9));
}

TEST_CASE("Embedding: simulation rejects the paper's token forms for i.i.d. tokens", "[embedding][montecarlo]") {
  // Token table only. Measured r against the exact sum p_i^2 (z <= 5) and
  // against the paper's count and large-|V| forms (z > 10 each).
  struct Point {
    double vocab, seq_len;
    Eigen::Index width;
    std::size_t trials;
  };
  std::uint64_t seed = 200;
  for (const Point& p : {Point{10, 8, 32, 4000}, Point{1000, 64, 64, 3000}, Point{32000, 256, 64, 3000}}) {
    auto cfg = only(EmbeddingTable::token, p.vocab, p.seq_len);
    char label[64];
    std::snprintf(label, sizeof label, "token |V|=%g L=%g", p.vocab, p.seq_len);
    const auto sim = check_forward(label, Embedding<double>(cfg), p.width, p.trials, ++seed);
    const auto& r = sim.forward.corr_len;
    cfg.token_corr = TokenCorrelation::paper_counts;
    const double counts = Embedding<double>(cfg).forward().corr_len;
    cfg.token_corr = TokenCorrelation::paper_large_vocab;
    const double large = Embedding<double>(cfg).forward().corr_len;
    std::printf("%-34s paper counts %.5f (z %.1f), paper large-|V| %.5f (z %.1f)\n", "", counts,
                z_score(r, counts), large, z_score(r, large));
    INFO(label);
    CHECK(z_score(r, counts) > 10);
    CHECK(z_score(r, large) > 10);
  }
}

TEST_CASE("Embedding: simulated segment splits against the exact forms and the paper's", "[embedding][montecarlo]") {
  // Segment table only at L = 4, where the forms differ most: {1, 2, 3}
  // split 4/9, {0, ..., 4} split 2/3, paper 5/9. One trial's r is 0, 1/3 or 1
  // (sd ~ 0.4), so 4000 trials give se ~ 0.006.
  auto cfg = only(EmbeddingTable::segment, 10, 4);
  cfg.segment_corr = SegmentCorrelation::nonempty_exact;
  check_forward("segment L=4 split {1..3}", Embedding<double>(cfg), 16, 4000, 301);
  cfg.segment_corr = SegmentCorrelation::inclusive_exact;
  const auto sim = check_forward("segment L=4 split {0..4}", Embedding<double>(cfg), 16, 4000, 302);
  cfg.segment_corr = SegmentCorrelation::paper;  // simulated with the same {0, ..., L} split
  const double paper = Embedding<double>(cfg).forward().corr_len;
  std::printf("%-34s paper (2/3 L^2 - L)/(L (L - 1)) %.5f (z %.1f)\n", "", paper,
              z_score(sim.forward.corr_len, paper));
  CHECK(z_score(sim.forward.corr_len, paper) > 10);
  // A longer sequence, L = 64.
  cfg = only(EmbeddingTable::segment, 10, 64);
  check_forward("segment L=64 split {1..63}", Embedding<double>(cfg), 16, 2000, 303);
}

TEST_CASE("Embedding: Monte Carlo of the row gradients (scatter-add)", "[embedding][montecarlo]") {
  // |V| = 50, L = 32, gradient (g2, r_g) = (2, 0.4). Each trial's row
  // variance averages d = 32 hidden units; its spread across trials (token
  // counts, split) sets se; z <= 5.
  EmbeddingConfig<double> c;
  c.vocab = 50;
  c.seq_len = 32;
  const Embedding<double> emb(c);
  const GradMoments<double> g{2.0, 0.4};
  mc::SimulationSetup setup;
  setup.width = 32;
  setup.trials = 3000;
  struct Row {
    EmbeddingTable table;
    double row;
  };
  std::uint64_t seed = 400;
  for (const Row& r : {Row{EmbeddingTable::token, 1}, Row{EmbeddingTable::token, 7},
                       Row{EmbeddingTable::token, 50}, Row{EmbeddingTable::position, 5},
                       Row{EmbeddingTable::segment, 1}, Row{EmbeddingTable::segment, 2}}) {
    setup.seed = ++seed;
    const auto est = mc::simulate_row_grad(emb, r.table, r.row, g, setup);
    const double pred = emb.row_grad_var(r.table, r.row, g);
    std::printf("row grad %-8s row %-3g measured %.4f +- %.4f, predicted %.4f (z %.2f)\n",
                sigprop::to_string(r.table), r.row, est.value, est.std_error, pred, z_score(est, pred));
    INFO(sigprop::to_string(r.table) << " row " << r.row);
    CHECK(z_score(est, pred) <= 5);
  }
}
