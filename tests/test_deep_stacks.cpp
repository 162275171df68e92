// 10,000-layer traces under every initialization scheme (models/schemes.hpp),
// Pre-LN and Post-LN, ReLU and GeLU, and the decoder presets llama and gpt2:
// every layer's variances stay finite and >= 0 and every correlation stays in
// [-1, 1] exactly (no drift past 1 from rounding), and the whole-vector
// moments (core/moments.hpp) stay finite and >= 0. The encoder matrix (64
// traces) takes about 2 s in Release and runs by default; the decoder
// presets take about 2 minutes (the SiLU quadrature and the causal sums per
// layer), so their case is hidden: run it with `test_deep_stacks [deep-decoders]`.
#include <cmath>
#include <string>
#include <vector>

#include "catch.hpp"
#include "sigprop/models/schemes.hpp"

using namespace sigprop;

namespace {

constexpr std::size_t deep_layers = 10000;

struct Combination {
  std::string arch;  // with_architecture's name
  FfnActivation activation;
};

// Counts the rows violating each invariant; one CHECK per trace keeps the
// report short when something breaks (the first bad layer is named).
void check_trace(const Trace& t, const std::string& what) {
  std::size_t bad = 0;
  std::string first;
  auto row_ok = [](const TraceRow& r) {
    const auto& f = r.forward;
    const auto& g = r.backward;
    return std::isfinite(f.mean) && std::isfinite(f.var) && f.var >= 0 &&
           f.corr_len >= -1 && f.corr_len <= 1 && f.corr_dim >= -1 && f.corr_dim <= 1 &&
           std::isfinite(g.var) && g.var >= 0 && g.corr_len >= -1 && g.corr_len <= 1 &&
           std::isfinite(f.norm_var_ratio) && f.norm_var_ratio >= 0 && std::isfinite(g.align_activation) &&
           g.align_activation >= 0 && std::isfinite(g.align_mean) && g.align_mean >= 0 &&
           std::isfinite(g.norm_coupling);
  };
  auto visit = [&](const TraceRow& r, const char* where) {
    if (row_ok(r)) return;
    if (bad++ == 0)
      first = std::string(where) + " layer " + std::to_string(r.layer) +
              ": var " + std::to_string(r.forward.var) + " corr_len " +
              std::to_string(r.forward.corr_len) + " grad var " + std::to_string(r.backward.var) +
              " grad corr_len " + std::to_string(r.backward.corr_len);
  };
  for (const auto& r : t.rows) visit(r, "rows");
  for (const auto& r : t.mid) visit(r, "mid");
  visit(t.output, "output");
  INFO(what << ": " << bad << " bad rows; first " << first);
  CHECK(t.rows.size() == deep_layers + 1);
  CHECK(bad == 0);
}

Trace deep_trace(const std::string& arch, FfnActivation act, Scheme scheme) {
  ModelConfig c;
  c.layers = deep_layers;
  c.activation = act;
  c = with_architecture(c, arch);
  return trace(c, initialize(c, scheme));
}

}  // namespace

// Post-LN schemes forced onto Pre-LN: their skip scales make the stream
// variance grow without bound, so a 10,000-layer trace must end in a clean
// overflow_error naming the variance, never a NaN or a result out of range.
bool overflows(const std::string& arch, Scheme s) {
  return arch == "pre-ln" && (s == Scheme::admin || s == Scheme::admin_code || s == Scheme::deepnet);
}

TEST_CASE("deep stacks: 10,000 layers, every scheme, Pre-LN and Post-LN, ReLU and GeLU",
          "[deep]") {
  for (const SchemeInfo& info : schemes())
    for (const char* arch : {"pre-ln", "post-ln"})
      for (FfnActivation act : {FfnActivation::relu, FfnActivation::gelu}) {
        if (overflows(arch, info.scheme)) {
          INFO(info.name << " " << arch);
          CHECK_THROWS_WITH(deep_trace(arch, act, info.scheme),
                            Catch::Contains("var = inf overflows") && !Catch::Contains("nan"));
          continue;
        }
        const std::string what =
            std::string(info.name) + " " + arch + " " + to_string(act);
        check_trace(deep_trace(arch, act, info.scheme), what);
      }
}

TEST_CASE("deep stacks: 10,000 layers of the decoder presets llama and gpt2",
          "[.][deep-decoders]") {
  for (const char* arch : {"llama", "gpt2"})
    for (Scheme s : {Scheme::xavier, Scheme::dslm, Scheme::dslm_simple}) {
      const std::string what = std::string(arch) + " " + to_string(s);
      check_trace(deep_trace(arch, FfnActivation::gelu, s), what);
    }
}
