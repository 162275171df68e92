// Domain edges, table-driven: one row per (function, parameter) with its
// documented valid interval. For each row: NaN, +inf, -inf and one ULP
// outside each finite end throw sigprop::domain_error naming the function,
// the parameter and the value; the exact edge (when it belongs to the
// domain) and one ULP inside give finite results. Adding a function is one
// row. This covers the component constructors and the forward/backward
// input moments of the element-wise components; the blocks, stacks, init
// solver and CLI rows are not in the table yet.
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "catch.hpp"
#include "sigprop/components/dropout.hpp"
#include "sigprop/components/gelu.hpp"
#include "sigprop/components/linear.hpp"
#include "sigprop/components/relu.hpp"
#include "sigprop/components/silu.hpp"

using namespace sigprop;

namespace {

const double inf = std::numeric_limits<double>::infinity();

struct Row {
  const char* function;   // as named in the message
  const char* parameter;  // as named in the message
  double lo, hi;          // the valid interval's ends
  bool lo_closed, hi_closed;
  std::function<double(double)> call;  // evaluates with the parameter set; returns a result
};

// An input's moments with one field set (the others valid).
Moments<double> with(const char* field, double v) {
  Moments<double> x{0.2, 1.5, 0.3, 0};
  const std::string f = field;
  if (f == "mean") x.mean = v;
  if (f == "var") x.var = v;
  if (f == "corr_len") x.corr_len = v;
  return x;
}

template <class C>
std::vector<Row> moment_rows(const char* function, C c) {
  auto fwd = [c](const char* field) {
    return [c, field](double v) { return c.forward(with(field, v)).var; };
  };
  auto bwd_var = [c](double v) { return c.backward(with("mean", 0.2), {v, 0.1}).var; };
  auto bwd_corr = [c](double v) { return c.backward(with("mean", 0.2), {1.0, v}).var; };
  return {
      {function, "mean", -inf, inf, false, false, fwd("mean")},
      {function, "var", 0, inf, true, false, fwd("var")},
      {function, "corr_len", -1, 1, true, true, fwd("corr_len")},
      {function, "grad_var", 0, inf, true, false, bwd_var},
      {function, "grad_corr_len", -1, 1, true, true, bwd_corr},
  };
}

std::vector<Row> rows() {
  std::vector<Row> r = {
      {"sigprop::Linear", "d_in", 1, inf, true, false,
       [](double v) { return Linear<double>(v, 8, 0.1).forward({}).var; }},
      {"sigprop::Linear", "d_out", 1, inf, true, false,
       [](double v) { return Linear<double>(8, v, 0.1).forward({}).var; }},
      {"sigprop::Linear", "weight_var", 0, inf, true, false,
       [](double v) { return Linear<double>(8, 8, v).forward({}).var; }},
      {"sigprop::Dropout", "p", 0, 1, true, false,
       [](double v) { return Dropout<double>(v).forward({}).var; }},
  };
  for (auto& x : moment_rows("sigprop::Linear", Linear<double>(8, 8, 0.1))) r.push_back(x);
  for (auto& x : moment_rows("sigprop::Dropout", Dropout<double>(0.1))) r.push_back(x);
  for (auto& x : moment_rows("sigprop::Relu", Relu<double>())) r.push_back(x);
  for (auto& x : moment_rows("sigprop::Gelu", Gelu<double>())) r.push_back(x);
  for (auto& x : moment_rows("sigprop::Silu", Silu<double>())) r.push_back(x);
  return r;
}

void expect_throw(const Row& row, double v) {
  INFO(row.function << " " << row.parameter << " = " << v);
  try {
    const double y = row.call(v);
    FAIL("no exception; result " << y);
  } catch (const domain_error& e) {
    const std::string m = e.what();
    INFO(m);
    CHECK(m.find(row.function) != std::string::npos);
    CHECK(m.find(std::string(row.parameter) + " =") != std::string::npos);
  }
}

void expect_finite(const Row& row, double v) {
  INFO(row.function << " " << row.parameter << " = " << v);
  double y = 0;
  CHECK_NOTHROW(y = row.call(v));
  CHECK(std::isfinite(y));
}

}  // namespace

TEST_CASE("domain edges: NaN, +-inf, one ULP outside, the edge, one ULP inside", "[domain]") {
  for (const Row& row : rows()) {
    expect_throw(row, std::nan(""));
    if (!(row.lo == -inf && row.hi == inf)) {
      if (row.hi == inf) expect_throw(row, -inf);
      if (row.lo == -inf) expect_throw(row, inf);
    } else {
      expect_throw(row, inf);
      expect_throw(row, -inf);
    }
    if (row.hi == inf && row.lo != -inf) expect_throw(row, inf);
    if (std::isfinite(row.lo)) {
      if (row.lo_closed) {
        expect_throw(row, std::nextafter(row.lo, -inf));
        expect_finite(row, row.lo);
      } else {
        expect_throw(row, row.lo);
      }
      expect_finite(row, std::nextafter(row.lo, inf));
    }
    if (std::isfinite(row.hi)) {
      if (row.hi_closed) {
        expect_throw(row, std::nextafter(row.hi, inf));
        expect_finite(row, row.hi);
      } else {
        expect_throw(row, row.hi);
      }
      expect_finite(row, std::nextafter(row.hi, -inf));
    }
  }
}

#ifdef SIGPROP_SOURCE_DIR
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

namespace {
std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
}  // namespace

// Every public component and block appears in docs/domains.md's table: the
// names listed here and every `class X : public Component<` of the headers.
TEST_CASE("domain edges: docs/domains.md lists every public component", "[domain][docs]") {
  namespace fs = std::filesystem;
  const fs::path root = SIGPROP_SOURCE_DIR;
  const std::string doc = read_text(root / "docs" / "domains.md");
  REQUIRE(!doc.empty());
  std::vector<std::string> names = {"Embedding", "Linear",  "Dropout",         "Relu",
                                    "Gelu",      "Silu",    "LayerNorm",       "RmsNorm",
                                    "Softmax",   "Attention", "CausalAttention", "Gated",
                                    "MultiHead", "Residual"};
  const std::regex component_class(R"(class\s+(\w+)\s*:\s*public\s+Component<)");
  for (const char* dir : {"components", "blocks"})
    for (const auto& entry : fs::directory_iterator(root / "include" / "sigprop" / dir)) {
      if (entry.path().extension() != ".hpp") continue;
      const std::string text = read_text(entry.path());
      for (std::sregex_iterator it(text.begin(), text.end(), component_class), end; it != end; ++it)
        names.push_back((*it)[1]);
    }
  for (const std::string& n : names) {
    INFO(n);
    CHECK(doc.find("| `" + n + "` |") != std::string::npos);
  }
}
#endif
