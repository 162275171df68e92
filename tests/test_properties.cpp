// Property tests of the correlation and variance maps over seeded random
// inputs (10^4 cases per property and map): |r_out| <= 1, variances finite
// and >= 0, monotonicity of corr_len out in corr_len in, the fixed point
// map(1) = 1 where r = 1 must be kept, odd symmetry where it holds, and the
// r -> 0 and r -> 1 limits (continuity at both ends).
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"
#include "sigprop/blocks/ffn_block.hpp"
#include "sigprop/components/dropout.hpp"
#include "sigprop/components/gelu.hpp"
#include "sigprop/components/layernorm.hpp"
#include "sigprop/components/linear.hpp"
#include "sigprop/components/relu.hpp"
#include "sigprop/components/rmsnorm.hpp"
#include "sigprop/components/silu.hpp"

using namespace sigprop;

namespace {

constexpr int cases = 10000;
const double eps = std::numeric_limits<double>::epsilon();

struct Map {
  std::string name;
  std::function<Moments<double>(const Moments<double>&)> forward;
  std::function<GradMoments<double>(const Moments<double>&, const GradMoments<double>&)> backward;
  bool keeps_one;   // map(r = 1) = 1
  bool odd;         // corr_len out is odd in corr_len in at mean 0
  bool zero_mean;   // evaluated at mean 0 only (maps whose mean enters as a bias)
  // corr_len out non-decreasing on [-1, 1] (monotone activations: E[f'(x) f'(y)]
  // >= 0) or only on [0, 1] (GeLU, SiLU: the Hermite series sum c_n^2 r^n of
  // the output covariance is non-decreasing for r >= 0 only).
  bool monotone_on_negative = true;
  Map negative_not_monotone() const {
    Map m = *this;
    m.monotone_on_negative = false;
    return m;
  }
};

template <class C>
Map make(const std::string& name, C c, bool keeps_one, bool odd, bool zero_mean = false) {
  return {name, [c](const Moments<double>& x) { return c.forward(x); },
          [c](const Moments<double>& x, const GradMoments<double>& g) { return c.backward(x, g); },
          keeps_one, odd, zero_mean};
}

std::vector<Map> maps() {
  return {
      make("Linear", Linear<double>(256, 512, 1.0 / 256), true, true),
      make("Dropout", Dropout<double>(0.1), false, true, true),
      make("Relu", Relu<double>(), true, false),
      make("Gelu", Gelu<double>(), true, false).negative_not_monotone(),
      make("Silu", Silu<double>(), true, false).negative_not_monotone(),
      make("LayerNorm", LayerNorm<double>(256), true, false),
      make("RmsNorm", RmsNorm<double>(256), true, false, true),
      make("ffn_block<Relu>", ffn_block<Relu<double>>(256.0, 4.0, 1.0 / 256, 1.0 / 1024, 0.0), true,
           false),
  };
}

// A random input: var in [1e-3, 1e3] log-uniform, mean/std in [-2, 2] (0 for
// zero_mean maps), corr_len in [lo, 1], corr_dim 0.
Moments<double> draw(std::mt19937_64& rng, const Map& m, double lo) {
  std::uniform_real_distribution<double> u(0, 1);
  Moments<double> x;
  x.var = std::pow(10.0, -3 + 6 * u(rng));
  x.mean = m.zero_mean ? 0 : (-2 + 4 * u(rng)) * std::sqrt(x.var);
  x.corr_len = lo + (1 - lo) * u(rng);
  x.corr_dim = 0;
  return x;
}

}  // namespace

TEST_CASE("properties: finite non-negative variances and |r| <= 1, forward and backward",
          "[properties]") {
  std::mt19937_64 rng(1);
  for (const Map& m : maps()) {
    int bad = 0;
    for (int i = 0; i < cases; ++i) {
      const auto x = draw(rng, m, -1);
      const GradMoments<double> g{std::pow(10.0, -2 + 4 * std::uniform_real_distribution<double>(0, 1)(rng)),
                                  x.corr_len};
      const auto y = m.forward(x);
      const auto b = m.backward(x, g);
      const bool ok = std::isfinite(y.var) && y.var >= 0 && std::abs(y.corr_len) <= 1 &&
                      std::abs(y.corr_dim) <= 1 && std::isfinite(b.var) && b.var >= 0 &&
                      std::abs(b.corr_len) <= 1;
      if (!ok && bad++ == 0) UNSCOPED_INFO(m.name << " first bad input: mean " << x.mean << " var " << x.var
                                           << " corr_len " << x.corr_len);
    }
    INFO(m.name);
    CHECK(bad == 0);
  }
}

TEST_CASE("properties: corr_len out is non-decreasing in corr_len in (GeLU, SiLU: on [0, 1])", "[properties]") {
  std::mt19937_64 rng(2);
  for (const Map& m : maps()) {
    int bad = 0;
    double worst = 0;
    for (int i = 0; i < cases; ++i) {
      auto a = draw(rng, m, m.monotone_on_negative ? -1 : 0);
      auto b = a;
      b.corr_len = a.corr_len + (1 - a.corr_len) * std::uniform_real_distribution<double>(0, 1)(rng);
      const double ya = m.forward(a).corr_len, yb = m.forward(b).corr_len;
      // Tolerance: a few ulps of the outputs (the maps are evaluated by
      // separate roundings at each end).
      if (yb < ya - 8 * eps) {
        ++bad;
        worst = std::max(worst, ya - yb);
      }
    }
    INFO(m.name << " worst decrease " << worst);
    CHECK(bad == 0);
  }
}

TEST_CASE("properties: the fixed point map(1) = 1 and the limit r -> 1", "[properties]") {
  std::mt19937_64 rng(3);
  for (const Map& m : maps()) {
    if (!m.keeps_one) continue;
    int bad_fixed = 0, bad_limit = 0;
    for (int i = 0; i < cases; ++i) {
      auto x = draw(rng, m, 1);
      x.corr_len = 1;
      const double y1 = m.forward(x).corr_len;
      if (std::abs(y1 - 1) > 4 * eps) ++bad_fixed;
      // Continuity at 1: the maps are Lipschitz in r with |mean|/std <= 2
      // (ReLU's slope at r = 1 is Var[x]/Var[relu(x)] * P(x > 0), below 64
      // there), so 1 - map(1 - delta) <= 64 delta; delta = 2^-k, k = 10..40.
      const int k = 10 + static_cast<int>(i % 31);
      x.corr_len = 1 - std::ldexp(1.0, -k);
      const double y = m.forward(x).corr_len;
      if (!(y <= 1 && 1 - y <= 64 * std::ldexp(1.0, -k) + 8 * eps)) ++bad_limit;
    }
    INFO(m.name << ": " << bad_fixed << " fixed-point and " << bad_limit << " limit failures");
    CHECK(bad_fixed == 0);
    CHECK(bad_limit == 0);
  }
}

TEST_CASE("properties: odd symmetry at mean 0 and the limit r -> 0", "[properties]") {
  std::mt19937_64 rng(4);
  for (const Map& m : maps()) {
    int bad_odd = 0, bad_limit = 0;
    for (int i = 0; i < cases; ++i) {
      auto x = draw(rng, m, -1);
      x.mean = 0;
      if (m.odd) {
        auto xn = x;
        xn.corr_len = -x.corr_len;
        if (m.forward(xn).corr_len != -m.forward(x).corr_len) ++bad_odd;
      }
      // Continuity at 0 (the same Lipschitz bound): |map(delta) - map(0)| <= 64 delta.
      const int k = 10 + static_cast<int>(i % 31);
      auto x0 = x;
      x0.corr_len = 0;
      auto xd = x;
      xd.corr_len = std::ldexp(1.0, -k);
      const double y0 = m.forward(x0).corr_len, yd = m.forward(xd).corr_len;
      if (!(std::abs(yd - y0) <= 64 * std::ldexp(1.0, -k) + 8 * eps)) ++bad_limit;
      if (m.odd && y0 != 0) ++bad_odd;
    }
    INFO(m.name << ": " << bad_odd << " symmetry and " << bad_limit << " limit failures");
    CHECK(bad_odd == 0);
    CHECK(bad_limit == 0);
  }
}
