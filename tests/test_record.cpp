// Records of the forward pass (core/record.hpp): a backward through nested
// compositions evaluates each part's forward map once, and the recorded maps
// are the public ones, bit for bit, for the sublayers the stacks build.
#include <cstddef>
#include <tuple>

#include "catch.hpp"
#include "sigprop/sigprop.hpp"

using namespace sigprop;

namespace {

// Linear that counts how often its maps run (one counter per thread of the test).
struct Counts {
  std::size_t forward = 0, backward = 0, domain = 0;
};
Counts counts;

class CountingLinear : public Component<CountingLinear, double> {
 public:
  static constexpr const char* name = "CountingLinear";
  static constexpr bool exact_forms = false;  // so that compositions ask for its domain
  static constexpr int homogeneity = 1;

  explicit CountingLinear(double weight_var) : linear_(64, 64, weight_var) {}
  double d_out() const { return 64; }

  Moments<double> forward_impl(const Moments<double>& in) const {
    ++counts.forward;
    return linear_.forward_trusted(in);
  }
  GradMoments<double> backward_impl(const Moments<double>& in, const GradMoments<double>& g) const {
    ++counts.backward;
    return linear_.backward_trusted(in, g);
  }
  Domain<double> domain_impl(const Moments<double>& in) const {
    ++counts.domain;
    return Domain<double>::zero_like(in.var);
  }

 private:
  Linear<double> linear_;
};

bool all_lanes(bool b) { return b; }
template <class A>
bool all_lanes(const A& a) {
  return a.all();
}

// forward, backward and domain from one record equal the public maps, exactly.
template <class C, class T>
void check_recorded_maps(const C& c, const Moments<T>& x, const GradMoments<T>& g) {
  const auto pass = detail::record(c, x);
  const Moments<T> out = c.forward(x);
  const GradMoments<T> back = c.backward(x, g);
  const GradMoments<T> recorded = detail::backward_recorded(c, pass.second, g);
  const Domain<T> domain = c.domain(x), domain_recorded = detail::domain_recorded(c, pass.second);
  CHECK(all_lanes(pass.first.mean == out.mean && pass.first.var == out.var && pass.first.corr_len == out.corr_len &&
                  pass.first.corr_dim == out.corr_dim && pass.first.norm_var_ratio == out.norm_var_ratio &&
                  pass.first.hidden_spread == out.hidden_spread && pass.first.linear_share == out.linear_share));
  CHECK(all_lanes(recorded.var == back.var && recorded.corr_len == back.corr_len &&
                  recorded.align_activation == back.align_activation && recorded.align_mean == back.align_mean &&
                  recorded.norm_coupling == back.norm_coupling));
  CHECK(all_lanes(domain_recorded.score_var == domain.score_var && domain_recorded.key_weight == domain.key_weight &&
                  domain_recorded.width_term == domain.width_term));
}

}  // namespace

TEST_CASE("record: a backward through nested compositions runs each part's forward once", "[record]") {
  // Four levels: residual(serial(a, serial(b, residual(serial(c, e))))).
  const auto model = residual(serial(CountingLinear(1.0 / 64), serial(CountingLinear(1.0 / 64),
                                                                        residual(serial(CountingLinear(1.0 / 64),
                                                                                        CountingLinear(1.0 / 64)),
                                                                                 0.8, 0.6))),
                              0.8, 0.6);
  const Moments<double> x{0.1, 1.5, 0.3, 0.1};
  const GradMoments<double> g{1, 0.2};

  counts = {};
  const GradMoments<double> back = model.backward(x, g);
  CHECK(back.var > 0);
  // Replaying the forward pass at every level of nesting (before the
  // records) ran 9 forward maps here, the innermost parts three times.
  CHECK(counts.forward == 4);
  CHECK(counts.backward == 4);

  counts = {};
  (void)model.domain(x);
  CHECK(counts.forward == 4);
  CHECK(counts.domain == 4);

  counts = {};
  (void)model.forward(x);
  CHECK(counts.forward == 4);
  CHECK(counts.backward == 0);
}

TEST_CASE("record: recorded maps equal the public ones for the stacks' sublayers", "[record]") {
  const double d = 256, L = 128, p = 0.1;
  const Moments<double> x{0.05, 1.3, 0.4, 0.02};
  const GradMoments<double> g{0.7, 0.15};
  const auto attention = [&] { return attention_block<double>(d, 4, L, {1 / d, 1 / d, 1 / d, 1 / d}, p); };
  const auto ffn = [&] { return ffn_block<Gelu<double>>(d, 4.0, 1 / d, 0.25 / d, p); };
  SECTION("Pre-LN: residual(serial(LayerNorm, block))") {
    check_recorded_maps(residual(serial(LayerNorm<double>(d), attention()), 0.9, 0.4), x, g);
    check_recorded_maps(residual(serial(LayerNorm<double>(d), ffn()), 0.9, 0.4), x, g);
  }
  SECTION("Post-LN: serial(residual(block), LayerNorm)") {
    check_recorded_maps(serial(residual(attention(), 0.9, 0.4), LayerNorm<double>(d)), x, g);
    check_recorded_maps(serial(residual(ffn(), 0.9, 0.4), LayerNorm<double>(d)), x, g);
  }
  SECTION("parts with records of their own: Attention and MultiHead (the softmax terms), LayerNorm (its angle)") {
    const auto head = [&](auto one) {
      using T = decltype(one);
      return Attention<T>(T(0 * one + d), T(0 * one + d / 4), T(0 * one + L), T(0 * one + 1 / d),
                          T(0 * one + 1 / d), T(0 * one + 1 / d), T(0 * one + p));
    };
    check_recorded_maps(head(1.0), x, g);
    check_recorded_maps(multi_head(head(1.0), 4.0), x, g);
    check_recorded_maps(LayerNorm<double>(d), x, g);
    using B = BatchChunk;
    const B lanes = B::LinSpaced(0.5, 2.0);
    const Moments<B> xb{B::Constant(0.05), lanes, B::LinSpaced(-0.3, 0.95), B::Constant(0.02)};
    const GradMoments<B> gb{B::Constant(0.7), B::Constant(0.15)};
    check_recorded_maps(head(B(B::Ones())), xb, gb);
    check_recorded_maps(multi_head(head(B(B::Ones())), B(B::Constant(4))), xb, gb);
    check_recorded_maps(LayerNorm<B>(B::Constant(d)), xb, gb);
    // The record's input is the pass's input, at every level of nesting.
    const auto sublayer = serial(residual(attention(), 0.9, 0.4), LayerNorm<double>(d));
    const auto pass = detail::record(sublayer, x);
    CHECK(detail::recorded_input(pass.second).var == x.var);
    CHECK(detail::recorded_input(std::get<1>(pass.second)).var == sublayer.part<0>().forward(x).var);
  }
  SECTION("Llama: residual(serial(RMSNorm, SwiGLU block)), scalar and a batch of 8") {
    const auto sublayer = [](auto one) {
      using T = decltype(one);
      return residual(serial(RmsNorm<T>(T(0 * one + 256)),
                             glu_ffn_block<Silu<T>>(T(0 * one + 256), T(0 * one + 683), T(0 * one + 1.0 / 256),
                                                    T(0 * one + 1.0 / 256), T(0 * one + 1.0 / 683), T(0 * one))),
                      T(0 * one + 0.9), T(0 * one + 0.4));
    };
    const Moments<double> centred{0, 1.3, 0.4, 0};  // RMSNorm's domain: mean 0, hidden units uncorrelated
    check_recorded_maps(sublayer(1.0), centred, g);
    using B = BatchChunk;
    const B lanes = B::LinSpaced(0.5, 2.0);
    const Moments<B> xb{B::Zero(), lanes, B::Constant(0.4), B::Zero()};
    const GradMoments<B> gb{B::Constant(0.7), B::Constant(0.15)};
    check_recorded_maps(sublayer(B(B::Ones())), xb, gb);
  }
}
