// Domain edges, table-driven: one row per (function, parameter) with its
// documented valid interval (docs/domains.md). For each row: NaN, +inf and
// -inf throw sigprop::domain_error, and so does one ULP outside each finite
// end, with a message naming the function, the parameter and the value; the
// exact edge (when it belongs to the domain) and one ULP inside give finite
// results, checked against a known value where the row has one and against
// each other (continuity) otherwise. At an infinite end, +-DBL_MAX gives a
// finite result or a clean sigprop::overflow_error, never NaN. Adding a
// function is one row. Covered: the components and their input moments, the
// blocks, the stacks (trace, trace_batch, sweep), the initialization solver
// (initialize) and the flags of every CLI subcommand; the last test fails when
// a public function, class or subcommand is missing from docs/domains.md.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "catch.hpp"
#include "sigprop/sigprop.hpp"

#include "cli_support.hpp"

using namespace sigprop;

namespace {

const double inf = std::numeric_limits<double>::infinity();
const double nan_value = std::numeric_limits<double>::quiet_NaN();

/// How a parameter takes its values.
enum class Kind {
  real,     ///< any double
  integer,  ///< a whole number held in a double: one ULP beside a whole edge is not whole and throws
  count,    ///< a std::size_t field: no NaN or inf; edge - 1 throws, the edge and edge + 1 pass
};

// LayerNorm's E[m/Q] for norm_var_ratio nu over k dimensions (components/layernorm.hpp).
double inverse_norm(double nu, double k) {
  return k / (k - 2 * std::min(nu, 1.0)) * (1 + 2 * std::max(nu - 1, 0.0) / k);
}

struct Row {
  std::string function;   // as named in the message
  std::string parameter;  // as named in the message ("parameter = value")
  double lo, hi;          // the valid interval's ends
  bool lo_closed, hi_closed;
  std::function<double(double)> call;  // evaluates with the parameter set; returns a result
  Kind kind = Kind::real;
  /// Known result at a valid v (NaN where none is known; then edge and one
  /// ULP inside are compared with each other).
  std::function<double(double)> expected = nullptr;
  /// At a finite end the message may name the checked expression instead
  /// (e.g. "var * (1 - corr_dim)"); it must then contain this text.
  std::string shown = "";
  /// One ULP inside the upper end may throw a clean sigprop exception (a pole
  /// the next function in the chain rejects, documented in docs/domains.md).
  bool pole_hi = false;
  /// The upper edge is not evaluated (too slow for this test; its rejection
  /// one step outside still is).
  bool skip_hi_eval = false;
  /// DBL_MAX is not evaluated (the domain's real upper end is set by another
  /// quantity, documented in docs/domains.md).
  bool skip_huge = false;
};

std::string show(double v) { return sigprop::detail::format_number(v); }

void expect_throw(const Row& row, double v) {
  INFO(row.function << " " << row.parameter << " = " << show(v));
  try {
    const double y = row.call(v);
    FAIL("no exception; result " << y);
  } catch (const domain_error& e) {
    const std::string m = e.what();
    INFO(m);
    CHECK(m.find(row.function) != std::string::npos);
    const bool named = m.find(row.parameter + " = " + show(v)) != std::string::npos ||
                       (!row.shown.empty() && m.find(row.shown) != std::string::npos);
    CHECK(named);
  }
}

bool close(double a, double b, double tol) { return std::abs(a - b) <= tol * std::max(1.0, std::abs(b)); }

// Evaluates a valid point; NaN when it threw (a failure unless allowed).
double expect_value(const Row& row, double v, bool may_throw = false) {
  INFO(row.function << " " << row.parameter << " = " << show(v));
  double y = nan_value;
  try {
    y = row.call(v);
  } catch (const domain_error& e) {
    INFO(e.what());
    CHECK(may_throw);
    return nan_value;
  } catch (const overflow_error& e) {
    INFO(e.what());
    CHECK(may_throw);
    return nan_value;
  }
  {
    CHECK(std::isfinite(y));
    if (row.expected) {
      const double e = row.expected(v);
      if (!std::isnan(e)) {
        INFO("expected " << show(e) << ", got " << show(y));
        CHECK(std::abs(y - e) <= 1e-12 * std::abs(e) + 1e-300);
      }
    }
  }
  return y;
}

// +-DBL_MAX at an infinite end: a finite result or a clean sigprop exception
// (an overflow, or a derived quantity such as d ffn_mult = inf rejected), never NaN.
void expect_huge(const Row& row, double v) {
  INFO(row.function << " " << row.parameter << " = " << show(v));
  try {
    const double y = row.call(v);
    CHECK(std::isfinite(y));
  } catch (const overflow_error& e) {
    CHECK(std::string(e.what()).find("sigprop::") != std::string::npos);
  } catch (const domain_error& e) {
    const std::string m = e.what();
    INFO(m);
    CHECK(m.find("sigprop::") != std::string::npos);
    CHECK(m.find("nan") == std::string::npos);
  }
}

void check_end(const Row& row, double edge, bool closed, double outward, bool pole, bool evaluate) {
  const bool whole = row.kind != Kind::real;
  const double out = whole ? (row.kind == Kind::count ? edge + outward : std::nextafter(edge, edge + outward)) : std::nextafter(edge, edge + outward);
  if (!(row.kind == Kind::count && out < 0)) expect_throw(row, closed ? out : edge);
  if (row.lo == row.hi) {  // a single point: {edge}
    expect_value(row, edge);
    if (row.kind == Kind::real) expect_throw(row, std::nextafter(edge, edge - outward));
    return;
  }
  if (!evaluate) return;
  if (row.kind == Kind::integer) expect_throw(row, std::nextafter(edge, edge - outward));  // not whole
  const double y_edge = closed ? expect_value(row, edge) : nan_value;
  const double inside = whole ? edge - outward : std::nextafter(edge, edge - outward);
  const double y_in = expect_value(row, inside, pole);
  // Continuity: a real parameter one ULP inside its edge moves the result by rounding only.
  if (row.kind == Kind::real && !std::isnan(y_edge) && !std::isnan(y_in)) {
    INFO(row.function << " " << row.parameter << ": edge " << show(y_edge) << ", one ULP inside " << show(y_in));
    CHECK(close(y_in, y_edge, 1e-6));
  }
}

void check_row(const Row& row) {
  if (row.kind != Kind::count) {
    expect_throw(row, nan_value);
    expect_throw(row, inf);
    expect_throw(row, -inf);
    if (!row.skip_huge) {
      if (row.hi == inf) expect_huge(row, DBL_MAX);
      if (row.lo == -inf) expect_huge(row, -DBL_MAX);
    }
  }
  if (std::isfinite(row.lo)) check_end(row, row.lo, row.lo_closed, -1, false, true);
  if (std::isfinite(row.hi) && row.hi != row.lo)
    check_end(row, row.hi, row.hi_closed, +1, row.pole_hi, !row.skip_hi_eval);
}

// ---------------------------------------------------------------------------
// Rows

const Moments<double> x0{0.2, 1.5, 0.3, 0};

// An input's moments with one field set (the others those of `base`).
Moments<double> with(const std::string& field, double v, Moments<double> x = x0) {
  if (field == "mean") x.mean = v;
  if (field == "var") x.var = v;
  if (field == "corr_len") x.corr_len = v;
  if (field == "corr_dim") x.corr_dim = v;
  if (field == "norm_var_ratio") x.norm_var_ratio = v;
  if (field == "hidden_spread") x.hidden_spread = v;
  if (field == "linear_share") x.linear_share = v;
  return x;
}

GradMoments<double> grad_with(const std::string& field, double v) {
  GradMoments<double> g{1.0, 0.1};
  if (field == "grad_var") g.var = v;
  if (field == "grad_corr_len") g.corr_len = v;
  if (field == "grad_align_activation") g.align_activation = v;
  if (field == "grad_align_mean") g.align_mean = v;
  if (field == "grad_norm_coupling") g.norm_coupling = v;
  return g;
}

// The input moments of forward/backward: every field at its generic domain.
template <class C>
std::vector<Row> moment_rows(const std::string& function, C c, Moments<double> base = x0) {
  auto fwd = [c, base](const std::string& field) {
    return [c, base, field](double v) { return c.forward(with(field, v, base)).var; };
  };
  auto bwd = [c, base](const std::string& field) {
    return [c, base, field](double v) { return c.backward(base, grad_with(field, v)).var; };
  };
  return {
      {function, "mean", -inf, inf, false, false, fwd("mean")},
      {function, "var", 0, inf, true, false, fwd("var")},
      {function, "corr_len", -1, 1, true, true, fwd("corr_len")},
      {function, "corr_dim", -1, 1, true, true, fwd("corr_dim")},
      {function, "norm_var_ratio", 0, inf, true, false, fwd("norm_var_ratio")},
      {function, "hidden_spread", 0, inf, true, false, fwd("hidden_spread")},
      {function, "linear_share", 0, 1, true, true, fwd("linear_share")},
      {function, "grad_var", 0, inf, true, false, bwd("grad_var")},
      {function, "grad_corr_len", -1, 1, true, true, bwd("grad_corr_len")},
      {function, "grad_align_activation", 0, inf, true, false, bwd("grad_align_activation")},
      {function, "grad_align_mean", 0, inf, true, false, bwd("grad_align_mean")},
      {function, "grad_norm_coupling", -inf, inf, false, false, bwd("grad_norm_coupling")},
  };
}

void append(std::vector<Row>& to, const std::vector<Row>& rows) { to.insert(to.end(), rows.begin(), rows.end()); }

double known_none(double) { return nan_value; }

// sum_i p_i^2 of Zipf over 1..|V| by direct summation (small whole |V|).
double zipf_collision_direct(double vocab) {
  if (vocab != std::floor(vocab) || vocab > 100) return nan_value;
  double h = 0, s = 0;
  for (double i = 1; i <= vocab; ++i) h += 1 / i, s += 1 / (i * i);
  return s / (h * h);
}

std::vector<Row> component_rows() {
  std::vector<Row> r = {
      {"sigprop::Linear", "d_in", 1, inf, true, false, [](double v) { return Linear<double>(v, 8, 0.1).forward({}).var; },
       Kind::real, [](double v) { return 0.1 * v; }},
      {"sigprop::Linear", "d_out", 1, inf, true, false, [](double v) { return Linear<double>(8, v, 0.1).forward({}).var; },
       Kind::real, [](double) { return 0.8; }},
      {"sigprop::Linear", "weight_var", 0, inf, true, false,
       [](double v) { return Linear<double>(8, 8, v).forward({}).var; }, Kind::real, [](double v) { return 8 * v; }},
      {"sigprop::Dropout", "p", 0, 1, true, false, [](double v) { return Dropout<double>(v).forward({}).var; },
       Kind::real, [](double v) { return 1 / (1 - v); }},
  };
  append(r, moment_rows("sigprop::Linear", Linear<double>(8, 8, 0.1)));
  append(r, moment_rows("sigprop::Dropout", Dropout<double>(0.1)));
  append(r, moment_rows("sigprop::Relu", Relu<double>()));
  append(r, moment_rows("sigprop::Gelu", Gelu<double>()));
  append(r, moment_rows("sigprop::Silu", Silu<double>()));

  // corr_complement(1 - r): one_minus_corr in [0, 2], 0 at 0; LayerNorm's is 2 at r = -1 (F(-1) = -1).
  const auto complement_known = [](double v) { return v == 0 ? 0.0 : v == 2 ? 2.0 : nan_value; };
  append(r, {
      {"sigprop::Relu", "one_minus_corr", 0, 2, true, true, [](double v) { return Relu<double>::corr_complement(v); }},
      {"sigprop::Relu", "one_minus_corr", 0, 2, true, true,
       [](double v) { return Relu<double>::corr_complement(0.5, 1.0, v); }},
      {"sigprop::Relu", "mean", -inf, inf, false, false, [](double v) { return Relu<double>::corr_complement(v, 1.0, 0.01); }},
      {"sigprop::Relu", "var", 0, inf, true, false, [](double v) { return Relu<double>::corr_complement(0.5, v, 0.01); }},
      {"sigprop::Gelu", "one_minus_corr", 0, 2, true, true, [](double v) { return Gelu<double>::corr_complement(1.0, v); }},
      {"sigprop::Gelu", "var", 0, inf, false, false, [](double v) { return Gelu<double>::corr_complement(v, 0.01); }},
      {"sigprop::LayerNorm", "one_minus_corr", 0, 2, true, true,
       [](double v) { return LayerNorm<double>(8).corr_complement(v); }, Kind::real, complement_known},
      {"sigprop::RmsNorm", "one_minus_corr", 0, 2, true, true,
       [](double v) { return RmsNorm<double>(8).corr_complement(v); }, Kind::real, complement_known},
  });

  // Embedding: the output moments of the tables; vocab 1 makes every token equal (r = 1).
  const auto embedding = [](auto set) {
    EmbeddingConfig<double> c;
    set(c);
    return Embedding<double>(c);
  };
  append(r, {
      {"sigprop::Embedding", "vocab", 1, inf, true, false,
       [=](double v) {
         return embedding([v](auto& c) { c.vocab = v, c.position = c.segment = false; }).forward().corr_len;
       },
       Kind::real, zipf_collision_direct},
      {"sigprop::Embedding", "seq_len", 2, inf, true, false,
       [=](double v) { return embedding([v](auto& c) { c.seq_len = v, c.token = c.position = false; }).forward().corr_len; },
       Kind::real, [](double L) { return 2 * (L - 2) / (3 * (L - 1)); }},
      {"sigprop::Embedding", "weight_var", 0, inf, true, false,
       [=](double v) { return embedding([v](auto& c) { c.weight_var = v; }).forward().var; }, Kind::real,
       [](double v) { return 3 * v; }},
      {"sigprop::Embedding", "token_var", 0, inf, true, false,
       [=](double v) { return embedding([v](auto& c) { c.token_var = v; }).forward().var; }, Kind::real,
       [](double v) { return 2 + v; }},
      {"sigprop::Embedding", "position_var", 0, inf, true, false,
       [=](double v) { return embedding([v](auto& c) { c.position_var = v; }).forward().var; }, Kind::real,
       [](double v) { return 2 + v; }},
      {"sigprop::Embedding", "segment_var", 0, inf, true, false,
       [=](double v) { return embedding([v](auto& c) { c.segment_var = v; }).forward().var; }, Kind::real,
       [](double v) { return 2 + v; }},
      // row_grad_var: token ranks 1..|V| (|V| = 100), positions 1..L (L = 16), segments {1, 2}.
      {"sigprop::Embedding::row_grad_var", "row", 1, 100, true, true,
       [=](double v) {
         return embedding([](auto& c) { c.vocab = 100, c.seq_len = 16; }).row_grad_var(EmbeddingTable::token, v, {1, 0});
       },
       Kind::integer},
      {"sigprop::Embedding::row_grad_var", "row", 1, 16, true, true,
       [=](double v) {
         return embedding([](auto& c) { c.seq_len = 16; }).row_grad_var(EmbeddingTable::position, v, {2, 0.5});
       },
       Kind::integer, [](double) { return 2.0; }},
      {"sigprop::Embedding::row_grad_var", "row", 1, 2, true, true,
       [=](double v) {
         return embedding([](auto& c) { c.seq_len = 16; }).row_grad_var(EmbeddingTable::segment, v, {1, 0});
       },
       Kind::integer, [](double) { return 8.0; }},
      {"sigprop::zipf_harmonic", "vocab", 1, inf, true, false, [](double v) { return zipf_harmonic(v); }, Kind::real,
       [](double v) { return v == 1 ? 1.0 : nan_value; }},
      {"sigprop::zipf_inverse_square_sum", "vocab", 1, inf, true, false,
       [](double v) { return zipf_inverse_square_sum(v); }, Kind::real, [](double v) { return v == 1 ? 1.0 : nan_value; }},
      {"sigprop::zipf_probability", "rank", 1, 100, true, true, [](double v) { return zipf_probability(100.0, v); },
       Kind::real},
      {"sigprop::token_length_correlation", "vocab", 1, inf, true, false,
       [](double v) { return token_length_correlation(v, 256.0, TokenCorrelation::iid_exact); }, Kind::real,
       zipf_collision_direct},
      {"sigprop::token_length_correlation", "seq_len", 2, inf, true, false,
       [](double v) { return token_length_correlation(100.0, v, TokenCorrelation::paper_counts); }},
      {"sigprop::token_length_correlation", "vocab", 4, inf, true, false,
       [](double v) { return token_length_correlation(v, 256.0, TokenCorrelation::paper_large_vocab); }},
      {"sigprop::segment_length_correlation", "seq_len", 2, inf, true, false,
       [](double v) { return segment_length_correlation(v, SegmentCorrelation::nonempty_exact); }, Kind::real,
       [](double L) { return 2 * (L - 2) / (3 * (L - 1)); }},
  });
  append(r, moment_rows("sigprop::Embedding", embedding([](auto&) {})));

  // LayerNorm(8): x0 has var 1.5, norm_var_ratio 1; the backward variance is
  // Var[g] (d - a_1 - a_x) / ((d - 1 - 2 nu) var (1 - r^d)).
  const LayerNorm<double> ln(8);
  const double ln_corr = ln.forward(with("var", 1)).corr_len;  // scale invariance: the value at every var
  append(r, {
      {"sigprop::LayerNorm", "d", 4, 1e15, true, true,
       [](double v) { return LayerNorm<double>(v).backward(x0, {1, 0.1}).var; }, Kind::integer,
       [](double d) { return (d - 2) / ((d - 3) * 1.5); }},
      {"sigprop::LayerNorm", "mean", -inf, inf, false, false, [=](double v) { return ln.forward(with("mean", v)).corr_len; },
       Kind::real, [=](double) { return ln_corr; }},
      {"sigprop::LayerNorm", "var", 0, inf, false, false, [=](double v) { return ln.forward(with("var", v)).corr_len; },
       Kind::real, [=](double) { return ln_corr; }},
      {"sigprop::LayerNorm", "corr_len", -1, 1, true, true, [=](double v) { return ln.forward(with("corr_len", v)).corr_len; },
       Kind::real, [](double v) { return v == 1 ? 1.0 : nan_value; }},
      {"sigprop::LayerNorm", "corr_dim", -1, 1, true, false,
       [=](double v) { return ln.backward(with("corr_dim", v), {1, 0.1}).var; }, Kind::real,
       [](double v) { return 6 / (5 * 1.5 * (1 - v)); }},
      // No pole: E[m/Q] = k/(k - 2 nu) up to nu = 1, k/(k - 2) (1 + 2 (nu - 1)/k) beyond (k = 7).
      {"sigprop::LayerNorm", "norm_var_ratio", 0, inf, true, false,
       [=](double v) { return ln.backward(with("norm_var_ratio", v), {1, 0.1}).var; }, Kind::real,
       [](double v) { return 6 * inverse_norm(v, 7) / (7 * 1.5); }},
      {"sigprop::LayerNorm", "grad_var", 0, inf, true, false, [=](double v) { return ln.backward(x0, {v, 0.1}).var; },
       Kind::real, [](double v) { return v * 6 / (5 * 1.5); }},
      {"sigprop::LayerNorm", "grad_corr_len", -1, 1, true, true,
       [=](double v) { return ln.backward(x0, grad_with("grad_corr_len", v)).corr_len; }},
      // a_1 + a_x <= d: with a_1 = 0, a_x in [0, d].
      {"sigprop::LayerNorm", "grad_align_activation", 0, 8, true, true,
       [=](double v) {
         GradMoments<double> g = grad_with("grad_align_activation", v);
         g.align_mean = 0;
         return ln.backward(x0, g).var;
       },
       Kind::real, [](double v) { return (8 - v) / (5 * 1.5); }, "grad_align_mean + grad_align_activation"},
  });

  // RmsNorm(8): the kernel LayerNorm(9); mean-zero input with r^d = 0.
  const Moments<double> xr{0, 1.5, 0.3, 0};
  const RmsNorm<double> rms(8);
  const double rms_corr = rms.forward(with("var", 1, xr)).corr_len;
  append(r, {
      {"sigprop::RmsNorm", "d", 3, 1e15 - 1, true, true,
       [=](double v) { return RmsNorm<double>(v).backward(xr, {1, 0.1}).var; }, Kind::integer,
       [](double d) { return (d - 1) / ((d - 2) * 1.5); }},
      {"sigprop::RmsNorm", "gain", 0, inf, false, false, [=](double v) { return RmsNorm<double>(8, v).forward(xr).var; },
       Kind::real, [](double v) { return v * v; }},
      {"sigprop::RmsNorm", "mean", 0, 0, true, true, [=](double v) { return rms.forward(with("mean", v, xr)).var; }},
      {"sigprop::RmsNorm", "corr_dim", 0, 0, true, true, [=](double v) { return rms.forward(with("corr_dim", v, xr)).var; }},
      {"sigprop::RmsNorm", "var", 0, inf, false, false, [=](double v) { return rms.forward(with("var", v, xr)).corr_len; },
       Kind::real, [=](double) { return rms_corr; }},
      {"sigprop::RmsNorm", "norm_var_ratio", 0, inf, true, false,
       [=](double v) { return rms.backward(with("norm_var_ratio", v, xr), {1, 0.1}).var; }, Kind::real,
       [](double v) { return 7 * inverse_norm(v, 8) / (8 * 1.5); }},
      {"sigprop::RmsNorm", "corr_len", -1, 1, true, true, [=](double v) { return rms.forward(with("corr_len", v, xr)).corr_len; },
       Kind::real, [](double v) { return v == 1 ? 1.0 : nan_value; }},
  });

  // Softmax(16), exact form: logit variance var (1 - r^d) in [0, 100].
  const Softmax<double> sm(16);
  append(r, {
      {"sigprop::Softmax", "n", 2, 1e15, true, true, [](double v) { return Softmax<double>(v).forward(x0).var; },
       Kind::integer},
      {"sigprop::Softmax", "var", 0, 100, true, true, [=](double v) { return sm.forward(with("var", v)).var; },
       Kind::real, [](double v) { return v == 0 ? 0.0 : nan_value; }, "var * (1 - corr_dim)"},
      {"sigprop::Softmax", "corr_len", -1, 1, true, true, [=](double v) { return sm.forward(with("corr_len", v)).corr_len; }},
      {"sigprop::Softmax", "grad_var", 0, inf, true, false, [=](double v) { return sm.backward(x0, {v, 0.1}).var; }},
  });
  const Softmax<double> sm_full(16, SoftmaxForm::full), sm_simple(16, SoftmaxForm::simplified);
  append(r, moment_rows("sigprop::Softmax", sm_full));
  append(r, moment_rows("sigprop::Softmax", sm_simple));

  // Attention and CausalAttention (d_in 64, d_k 16, L 16, weights 1/64).
  const double w = 1.0 / 64;
  const auto attention = [w](int which, double v) {
    double a[7] = {64, 16, 16, w, w, w, 0.1};
    a[which] = v;
    return Attention<double>(a[0], a[1], a[2], a[3], a[4], a[5], a[6]).forward(x0).var;
  };
  const auto causal = [w](int which, double v) {
    double a[7] = {64, 16, 16, w, w, w, 0.1};
    a[which] = v;
    return CausalAttention<double>(a[0], a[1], a[2], a[3], a[4], a[5], a[6]).forward(x0).var;
  };
  const char* names[7] = {"d_in", "d_k", "seq_len", "q_var", "k_var", "v_var", "p"};
  for (int i = 0; i < 7; ++i) {
    const double lo = i < 2 ? 1 : i == 2 ? 2 : 0;
    const double hi = i == 6 ? 1 : inf;
    r.push_back({"sigprop::Attention", names[i], lo, hi, true, false, [=](double v) { return attention(i, v); }});
    if (i == 2)
      r.push_back({"sigprop::CausalAttention", "seq_len", 2, 1e7, true, true, [=](double v) { return causal(i, v); },
                   Kind::integer, known_none, "", false, true});
    else
      r.push_back({"sigprop::CausalAttention", names[i], lo, hi, true, false, [=](double v) { return causal(i, v); }});
  }
  // Rotary embeddings: base in {0} or (1, inf); with them d_k in [2, 65536].
  const auto rotary = [w](bool masked, double base, double d_k) {
    const AttentionGradient all = AttentionGradient::all_paths;
    return masked ? CausalAttention<double>(64, d_k, 16, w, w, w, 0.1, all, {base}).forward(x0).var
                  : Attention<double>(64, d_k, 16, w, w, w, 0.1, all, {base}).forward(x0).var;
  };
  for (bool masked : {false, true}) {
    const std::string fn = masked ? "sigprop::CausalAttention" : "sigprop::Attention";
    r.push_back({fn, "rotary.base", 1, inf, false, false, [=](double v) { return rotary(masked, v, 16); }});
    r.push_back({fn, "rotary.base", 0, 0, true, true, [=](double v) { return rotary(masked, v, 16); }});
    r.push_back({fn, "d_k (with rotary embeddings)", 2, 65536, true, true,
                 [=](double v) { return rotary(masked, 10000, v); }, Kind::integer, known_none,
                 "d_k = "});  // NaN and inf: named by the width check before
  }
  append(r, moment_rows("sigprop::Attention", Attention<double>(64, 16, 16, w, w, w, 0.1)));
  append(r, moment_rows("sigprop::CausalAttention", CausalAttention<double>(64, 16, 16, w, w, w, 0.1)));
  return r;
}

std::vector<Row> block_rows() {
  const double w = 1.0 / 64;
  const Attention<double> head(64, 16, 16, w, w, w, 0.1);
  const double one_head = head.backward(x0, {1, 0.1}).var;
  const Linear<double> branch(8, 8, 0.125);
  std::vector<Row> r = {
      {"sigprop::MultiHead", "heads", 1, inf, true, false,
       [=](double v) { return multi_head(head, v).backward(x0, {1, 0.1}).var; }, Kind::real,
       [=](double v) { return v * one_head; }},
      // var = lambda^2 1.5 + beta^2 (1.5 + 0.2^2) for a Linear branch of gain 1.
      {"sigprop::Residual", "skip_scale", -inf, inf, false, false,
       [=](double v) { return residual(branch, v, 1.0).forward(x0).var; }, Kind::real,
       [](double v) { return v * v * 1.5 + 1.54; }},
      {"sigprop::Residual", "branch_scale", -inf, inf, false, false,
       [=](double v) { return residual(branch, 1.0, v).forward(x0).var; }, Kind::real,
       [](double v) { return 1.5 + v * v * 1.54; }},
      {"sigprop::attention_block", "heads", 1, 64, true, true,
       [=](double v) { return attention_block<double>(64, v, 16, {w, w, w, w}, 0.1).forward(x0).var; }, Kind::real,
       known_none, "d / heads"},
      {"sigprop::causal_attention_block", "heads", 1, 64, true, true,
       [=](double v) { return causal_attention_block<double>(64, v, 16, {w, w, w, w}, 0.1).forward(x0).var; },
       Kind::real, known_none, "d / heads"},
      {"sigprop::ffn_block", "ffn_mult", 1, inf, true, false,
       [=](double v) { return ffn_block<Relu<double>>(64.0, v, w, w, 0.1).forward(x0).var; }},
      // The builders' other parameters are checked by the parts they build (Linear, Dropout).
      {"sigprop::glu_ffn_block", "hidden", 1, inf, true, false,
       [=](double v) { return glu_ffn_block<Silu<double>>(64.0, v, w, w, w, 0.1).forward(x0).var; }},
  };
  append(r, moment_rows("sigprop::Residual", residual(branch)));
  append(r, moment_rows("sigprop::Serial", serial(Linear<double>(8, 8, 0.125), Relu<double>())));
  append(r, moment_rows("sigprop::Gated", gated(serial(Linear<double>(8, 8, 0.125), Silu<double>()),
                                                 Linear<double>(8, 8, 0.125))));
  append(r, moment_rows("sigprop::MultiHead", multi_head(head, 4.0)));
  return r;
}

// A small Pre-LN model: 2 layers, d = 16, 2 heads, L = 8.
ModelConfig small_model() {
  ModelConfig c;
  c.layers = 2;
  c.d = 16;
  c.heads = 2;
  c.seq_len = 8;
  return c;
}

double final_var(const Trace& t) { return t.rows.back().forward.var; }

std::vector<Row> stack_rows() {
  const ModelConfig c0 = small_model();
  const ModelWeights w0 = initialize(c0, Scheme::xavier);
  const auto traced = [c0, w0](auto set) {
    ModelConfig c = c0;
    ModelWeights w = w0;
    set(c, w);
    w.layers.resize(c.layers, w0.layers[0]);
    return final_var(trace(c, w));
  };
  std::vector<Row> r = {
      {"sigprop::trace", "layers", 1, inf, true, false,
       [=](double v) { return traced([v](ModelConfig& c, ModelWeights&) { c.layers = static_cast<std::size_t>(v); }); },
       Kind::count},
      {"sigprop::trace", "d", 4, inf, true, false,
       [=](double v) { return traced([v](ModelConfig& c, ModelWeights&) { c.d = static_cast<std::size_t>(v), c.heads = 1; }); },
       Kind::count},
      {"sigprop::trace", "d", 3, inf, true, false,
       [=](double v) {
         return traced([v](ModelConfig& c, ModelWeights&) {
           c = with_architecture(c, "llama");
           c.d = static_cast<std::size_t>(v), c.heads = 1;
         });
       },
       Kind::count},
      {"sigprop::trace", "heads", 1, inf, true, false,
       [=](double v) { return traced([v](ModelConfig& c, ModelWeights&) { c.heads = static_cast<std::size_t>(v), c.d = 4 * (c.heads + 1) * std::max<std::size_t>(c.heads, 1); }); },
       Kind::count},
      {"sigprop::trace", "ffn_mult", 1, inf, true, false,
       [=](double v) { return traced([v](ModelConfig& c, ModelWeights&) { c.ffn_mult = static_cast<std::size_t>(v); }); },
       Kind::count},
      {"sigprop::trace", "seq_len", 2, inf, true, false,
       [=](double v) { return traced([v](ModelConfig& c, ModelWeights&) { c.seq_len = static_cast<std::size_t>(v); }); },
       Kind::count},
      {"sigprop::trace", "rotary.base", 1, inf, false, false,
       [=](double v) { return traced([v](ModelConfig& c, ModelWeights&) { c.rotary_base = v; }); }},
      // p -> 1: the variances grow as 1/(1 - p) and the dropout's norm
      // fluctuation 3p/(2(1 - p)) with them; near 1 a product may overflow (a clean throw).
      {"sigprop::trace", "dropout", 0, 1, true, false,
       [=](double v) { return traced([v](ModelConfig& c, ModelWeights&) { c.dropout = v; }); }, Kind::real, known_none,
       "", true},
      {"sigprop::trace", "dropout", 0, 1, true, false,
       [=](double v) {
         return traced([v](ModelConfig& c, ModelWeights&) { c.dropout = v, c.arch = Arch::no_ln; });
       },
       Kind::real, known_none, "", true},
      {"sigprop::trace", "attention_dropout", 0, 1, true, false,
       [=](double v) { return traced([v](ModelConfig& c, ModelWeights&) { c.attention_dropout = v; }); }, Kind::real,
       known_none, "", true},
      {"sigprop::trace", "ffn_dropout", 0, 1, true, false,
       [=](double v) { return traced([v](ModelConfig& c, ModelWeights&) { c.ffn_dropout = v; }); }, Kind::real,
       known_none, "", true},
      {"sigprop::trace", "grad_var", 0, inf, true, false,
       [=](double v) { return trace(c0, w0, {v, 0.1}).rows[0].backward.var; }},
      {"sigprop::trace", "grad_corr_len", -1, 1, true, true,
       [=](double v) { return trace(c0, w0, {1, v}).rows[0].backward.corr_len; }},
      // Per-layer weights are checked by the components they build.
      {"sigprop::Attention", "q_var", 0, inf, true, false,
       [=](double v) { return traced([v](ModelConfig&, ModelWeights& w) { w.layers[1].q = v; }); }},
      {"sigprop::Residual", "skip_scale", -inf, inf, false, false,
       [=](double v) { return traced([v](ModelConfig&, ModelWeights& w) { w.layers[0].attn_skip = v; }); }},
  };
  for (const char* field : {"mean", "var", "corr_len", "corr_dim"})
    r.push_back({"sigprop::trace", field, std::string(field) == "mean" ? -inf : std::string(field) == "var" ? 0 : -1,
                 std::string(field).rfind("corr", 0) == 0 ? 1 : inf, std::string(field) != "mean",
                 std::string(field).rfind("corr", 0) == 0,
                 [=](double v) {
                   return traced([=](ModelConfig& c, ModelWeights& w) {
                     c.arch = Arch::no_ln;
                     w.input = with(field, v, w.input);
                   });
                 },
                 Kind::real});

  // trace_batch: two lanes, the second one's parameter set.
  const auto batched = [c0, w0](auto set) {
    std::vector<ModelConfig> cs{c0, c0};
    std::vector<ModelWeights> ws{w0, w0};
    set(cs[1], ws[1]);
    return trace_batch(cs, ws).rows.back().forward.var(1);
  };
  append(r, {
      {"sigprop::trace_batch", "dropout", 0, 1, true, false,
       [=](double v) { return batched([v](ModelConfig& c, ModelWeights&) { c.dropout = v; }); },
       Kind::real, known_none, "", true},
      {"sigprop::trace_batch", "seq_len", 2, inf, true, false,
       [=](double v) { return batched([v](ModelConfig& c, ModelWeights&) { c.seq_len = static_cast<std::size_t>(v); }); },
       Kind::count},
      {"sigprop::trace_batch", "grad_var", 0, inf, true, false,
       [=](double v) {
         return trace_batch({c0, c0}, {w0, w0}, {v, 0.1}).rows[0].backward.var(1) / trace(c0, w0).rows[0].backward.var;
       },
       Kind::real, [](double v) { return v; }},
  });

  // sweep: one point; bounds.low <= bounds.high.
  const auto swept = [c0](SweepBounds b, double dropout) {
    SweepPoint p;
    p.config = c0;
    p.config.dropout = dropout;
    const SweepSummary s = sweep({p}, b).front();
    // A trace that overflows is reported, not thrown: count it as trace's throw.
    if (s.overflow) throw overflow_error(s.overflow_message);
    return s.final_var;
  };
  append(r, {
      {"sigprop::sweep", "bounds.low", -inf, 2, false, true, [=](double v) { return swept({v, 2}, 0.1); }},
      {"sigprop::sweep", "bounds.high", 0.5, inf, true, false, [=](double v) { return swept({0.5, v}, 0.1); }},
      {"sigprop::sweep", "dropout", 0, 1, true, false, [=](double v) { return swept({0.5, 2}, v); }, Kind::real,
       known_none, "", true},
  });
  return r;
}

// The initialization solver: the dslm scheme solves each block for unit output variance.
std::vector<Row> init_rows() {
  const ModelConfig c0 = small_model();
  const auto dslm = [c0](auto set) {
    ModelConfig c = c0;
    ResidualScaling s;
    set(c, s);
    return initialize(c, Scheme::dslm, {}, s).layers[1].v;
  };
  std::vector<Row> r = {
      // p -> 1: the embedding dropout's norm fluctuation passes LayerNorm's limit.
      {"sigprop::initialize", "dropout", 0, 1, true, false,
       [=](double v) { return dslm([v](ModelConfig& c, ResidualScaling&) { c.dropout = v; }); }, Kind::real,
       known_none, "", true},
      // R^2 overflows beyond about 1.3e154: a clean throw.
      {"sigprop::initialize", "initializer_range", 0, inf, false, false,
       [=](double v) {
         ModelConfig c = c0;
         c.initializer_range = v;
         return initialize(c, Scheme::gpt2).layers[0].o;
       }},
      // beta^2 = k/N^alpha in (0, 1]: with N = 1, k in (0, 1] and alpha any finite value; the branch scale is sqrt(k).
      {"sigprop::initialize", "beta2_k", 0, 1, false, true,
       [=](double v) {
         ModelConfig c = c0;
         c.layers = 1;
         ResidualScaling s;
         s.k = v;
         return initialize(c, Scheme::dslm, {}, s).layers[0].attn_branch;
       },
       Kind::real, [](double v) { return std::sqrt(v); }, "beta^2 = k/N^alpha"},
      {"sigprop::initialize", "beta2_alpha", -inf, inf, false, false,
       [=](double v) {
         ModelConfig c = c0;
         c.layers = 1;
         ResidualScaling s;
         s.k = 0.25, s.alpha = v;
         return initialize(c, Scheme::dslm, {}, s).layers[0].attn_branch;
       },
       Kind::real, [](double) { return 0.5; }},
      {"sigprop::initialize", "embedding_scale", 0, inf, false, false,
       [=](double v) {
         InputSpec in;
         in.embedding_scale = v;
         return initialize(c0, Scheme::xavier, in).input.var;
       },
       Kind::real, [](double v) { return v * v; }},
      {"sigprop::initialize", "vocab", 1, inf, true, false,
       [=](double v) {
         InputSpec in;
         in.vocab = v;
         return initialize(c0, Scheme::dslm, in).layers[1].v;
       }},
      {"sigprop::initialize", "layers", 1, inf, true, false,
       [=](double v) {
         ModelConfig c = c0;
         c.layers = static_cast<std::size_t>(v);
         ResidualScaling s;
         s.k = 1;  // beta^2 = 1/N <= 1 at every depth
         return initialize(c, Scheme::dslm, {}, s).layers.back().v;
       },
       Kind::count},
  };
  const char* fields[] = {"embedding", "q", "k", "v", "o", "ffn1", "ffn2"};
  for (int i = 0; i < 7; ++i)
    r.push_back({"sigprop::initialize", std::string("overrides.") + fields[i], 0, inf, true, false,
                 [=](double v) {
                   WeightOverrides o;
                   std::optional<double>* slots[] = {&o.embedding, &o.q, &o.k, &o.v, &o.o, &o.ffn1, &o.ffn2};
                   *slots[i] = v;
                   const ModelWeights w = initialize(c0, Scheme::xavier, {}, {}, o);
                   const double got[] = {w.embedding_var, w.layers[0].q, w.layers[0].k, w.layers[0].v,
                                         w.layers[0].o, w.layers[0].ffn1, w.layers[0].ffn2};
                   return got[i];
                 },
                 Kind::real, [](double v) { return v; }});
  return r;
}

// The measures read off a trace: per-layer weights and the trace's moments.
std::vector<Row> measure_rows() {
  ModelConfig c0 = small_model();
  c0.layers = 2;
  const ModelWeights w0 = initialize(c0, Scheme::xavier);
  const Trace t0 = trace(c0, w0);
  // spike_bounds with layer 0's weight `field` set to v (the trace kept: the
  // bounds read its spread, not the weights' effect on it).
  const auto bound = [=](double LayerWeights::*field) {
    return [=](double v) {
      ModelWeights w = w0;
      w.layers[0].*field = v;
      const auto b = spike_bounds(c0, w, t0);
      return b[0].attention + b[0].ffn;
    };
  };
  const auto norms = [=](double LayerWeights::*field) {
    return [=](double v) {
      ModelWeights w = w0;
      w.layers[0].*field = v;
      const auto g = weight_grad_norms(c0, w, trace(c0, w));
      return g[0].v + g[0].o + g[0].ffn1 + g[0].ffn2;
    };
  };
  const auto spike_row = [=](const char* field, double LayerWeights::*member, bool variance) {
    const std::string name = std::string("layers[0].") + field;
    return variance ? Row{"sigprop::spike_bounds", name, 0, inf, true, false, bound(member)}
                    : Row{"sigprop::spike_bounds", name, -inf, inf, false, false, bound(member)};
  };
  std::vector<Row> r = {
      spike_row("q", &LayerWeights::q, true),
      spike_row("k", &LayerWeights::k, true),
      spike_row("v", &LayerWeights::v, true),
      spike_row("o", &LayerWeights::o, true),
      spike_row("ffn1", &LayerWeights::ffn1, true),
      spike_row("ffn2", &LayerWeights::ffn2, true),
      spike_row("attn_skip", &LayerWeights::attn_skip, false),
      spike_row("attn_branch", &LayerWeights::attn_branch, false),
      spike_row("ffn_skip", &LayerWeights::ffn_skip, false),
      spike_row("ffn_branch", &LayerWeights::ffn_branch, false),
      // The trace's moments, named by row: a variance of 0 at the edge is a
      // spread of 0, which the bounds divide by (a pole at the lower end).
      {"sigprop::spike_bounds: t.rows[1]", "corr_len", -1, 1, true, true,
       [=](double v) {
         Trace t = t0;
         t.rows[1].forward.corr_len = v;
         return spike_bounds(c0, w0, t)[1].attention;
       }},
      {"sigprop::spike_bounds: t.mid[0]", "grad_var", 0, inf, true, false,
       [=](double v) {
         Trace t = t0;
         t.mid[0].backward.var = v;
         return spike_bounds(c0, w0, t)[0].ffn;
       }},
      // weight_grad_norms builds each layer's blocks: its weights are named
      // by the component they build.
      {"sigprop::Linear", "weight_var", 0, inf, true, false, norms(&LayerWeights::o)},
      {"sigprop::Linear", "weight_var", 0, inf, true, false, norms(&LayerWeights::ffn2)},
      {"sigprop::weight_grad_norms: t.rows[2]", "var", 0, inf, true, false,
       [=](double v) {
         Trace t = t0;
         t.rows[2].forward.var = v;
         return weight_grad_norms(c0, w0, t)[1].ffn2;
       }},
  };
  return r;
}

// ---------------------------------------------------------------------------
// CLI rows: the flag's value as typed; status 2 with one error line naming
// the flag and the value outside, status 0 at the edge and inside.

struct CliRow {
  std::vector<std::string> command;  // e.g. {"component", "linear"}
  std::string flag;                  // without dashes
  double lo, hi;
  bool lo_closed, hi_closed;
  bool whole = false;  // a whole number
  bool pole = false;   // one ULP inside an end may exit 2 cleanly (one line): a pole the library rejects
  bool skip_hi_eval = false;  // the upper edge is not evaluated (too slow); one step outside still is
};

using Outcome = sigprop::test::CliOutcome;

Outcome run_cli(const CliRow& row, const std::string& value) {
  std::vector<std::string> args = row.command;
  args.push_back("--" + row.flag);
  args.push_back(value);
  return sigprop::test::run_cli(args);
}

std::string joined(const std::vector<std::string>& words) {
  std::string s;
  for (const auto& w : words) s += w + " ";
  return s;
}

void cli_rejects(const CliRow& row, const std::string& value) {
  const Outcome o = run_cli(row, value);
  INFO("sigprop " << joined(row.command) << "--" << row.flag << " " << value << "\nstderr: " << o.err);
  CHECK(o.status == 2);
  CHECK(o.out.empty());
  CHECK(std::count(o.err.begin(), o.err.end(), '\n') == 1);
  CHECK(o.err.find("--" + row.flag) != std::string::npos);
  CHECK(o.err.find(value) != std::string::npos);
  CHECK(o.err.find("error: sigprop: ") == std::string::npos);  // the program name once
}

void cli_accepts(const CliRow& row, const std::string& value, bool may_reject = false) {
  const Outcome o = run_cli(row, value);
  INFO("sigprop " << joined(row.command) << "--" << row.flag << " " << value << "\nstderr: " << o.err);
  if (may_reject && o.status == 2) {
    CHECK(std::count(o.err.begin(), o.err.end(), '\n') == 1);
    return;
  }
  CHECK(o.status == 0);
  CHECK(!o.out.empty());
  CHECK(o.out.find("nan") == std::string::npos);
}

void check_cli_row(const CliRow& row) {
  for (const char* v : {"nan", "inf", "-inf"}) cli_rejects(row, v);
  const auto end = [&](double edge, bool closed, double outward, bool pole) {
    cli_rejects(row, show(closed ? std::nextafter(edge, edge + outward) : edge));
    if (outward > 0 && row.skip_hi_eval) return;
    if (closed) cli_accepts(row, show(edge));
    cli_accepts(row, show(row.whole ? edge - outward : std::nextafter(edge, edge - outward)), pole);
  };
  if (std::isfinite(row.lo)) end(row.lo, row.lo_closed, -1, row.pole);
  if (std::isfinite(row.hi)) end(row.hi, row.hi_closed, +1, row.pole);
}

std::vector<CliRow> cli_rows() {
  const double big = 1e15;  // the largest whole number a flag takes
  std::vector<CliRow> r;
  const std::vector<std::string> components = {"linear", "dropout", "relu", "gelu", "layernorm",
                                               "softmax", "attention", "embedding"};
  for (const auto& name : components) {
    const std::vector<std::string> cmd = {"component", name};
    r.push_back({cmd, "mean", -inf, inf, false, false});
    // pole: LayerNorm's gradient variance ~ 1/var overflows one ULP above 0
    r.push_back({cmd, "var", 0, name == "softmax" ? 100 : inf, false, name == "softmax", false, name == "layernorm"});
    r.push_back({cmd, "corr-len", -1, 1, true, true});
    r.push_back({cmd, "corr-dim", -1, 1, true, name != "layernorm"});
    r.push_back({cmd, "grad-var", 0, inf, false, false});
    r.push_back({cmd, "grad-corr-len", -1, 1, true, true});
  }
  const std::vector<std::string> linear = {"component", "linear"}, attention = {"component", "attention"},
                                 embedding = {"component", "embedding"};
  r.insert(r.end(), {
      {linear, "d-in", 1, big, true, true, true},
      {linear, "d-out", 1, big, true, true, true},
      {linear, "weight-var", 0, inf, true, false},
      {{"component", "dropout"}, "p", 0, 1, true, false},
      {{"component", "layernorm"}, "d", 4, big, true, true, true},
      {{"component", "softmax"}, "n", 2, big, true, true, true},
      {attention, "d-in", 1, big, true, true, true},
      {attention, "d-k", 1, big, true, true, true},
      {attention, "seq", 2, big, true, true, true},
      {attention, "rotary", 1, inf, false, false},
      {attention, "q-var", 0, inf, true, false},
      {attention, "k-var", 0, inf, true, false},
      {attention, "v-var", 0, inf, true, false},
      {attention, "p", 0, 1, true, false},
      {embedding, "vocab", 1, big, true, true, true},
      {embedding, "seq", 2, big, true, true, true},
      {embedding, "weight-var", 0, inf, true, false},
  });
  const std::vector<std::string> small = {"--layers", "2", "--d", "16", "--heads", "2", "--seq", "8"};
  for (const std::string command : {"table", "init"}) {
    const auto with_small = [&](std::vector<std::string> drop) {
      std::vector<std::string> cmd = {command};
      for (std::size_t i = 0; i < small.size(); i += 2)
        if (std::find(drop.begin(), drop.end(), small[i]) == drop.end()) cmd.insert(cmd.end(), {small[i], small[i + 1]});
      return cmd;
    };
    r.insert(r.end(), {
        {with_small({"--layers"}), "layers", 1, 100000, true, true, true, false, true},
        {{command, "--layers", "2", "--heads", "1", "--seq", "8"}, "d", 4, big, true, true, true},
        {with_small({"--heads"}), "heads", 1, inf, true, false, true},
        {with_small({}), "ffn-mult", 1, big, true, true, true},
        {with_small({"--seq"}), "seq", 2, big, true, true, true},
        {with_small({}), "dropout", 0, 1, true, false, false, true},
        {with_small({}), "beta2-k", 0, 2, false, true, false, true},  // pole: K/2 underflows to 0
        {with_small({}), "beta2-alpha", -inf, inf, false, false},
        {with_small({}), "vocab", 1, big, true, true, true},
        {with_small({}), "q-var", 0, inf, true, false},
        {with_small({}), "k-var", 0, inf, true, false},
        {with_small({}), "v-var", 0, inf, true, false},
        {with_small({}), "o-var", 0, inf, true, false},
        {with_small({}), "ffn1-var", 0, inf, true, false},
        {with_small({}), "ffn2-var", 0, inf, true, false},
        {with_small({}), "grad-var", 0, inf, false, false},
        {with_small({}), "grad-corr-len", -1, 1, true, true},
        {with_small({}), "rotary", 1, inf, false, false},
    });
    std::vector<std::string> measured = with_small({});
    measured.insert(measured.end(), {"--input-corr-len", "0"});
    r.push_back({measured, "input-var", 0, inf, false, false, false, true});  // pole: LayerNorm's 1/var
    std::vector<std::string> measured_var = with_small({});
    measured_var.insert(measured_var.end(), {"--input-var", "1"});
    r.push_back({measured_var, "input-corr-len", -1, 1, true, true});
  }
  // --positions on a causal model: each listed position a whole number in [1, --seq].
  r.push_back({{"table", "--arch", "gpt2", "--layers", "2", "--d", "16", "--heads", "2", "--seq", "8"}, "positions", 1,
               8, true, true, true});
  const std::vector<std::string> sweep = {"sweep", "--d", "16", "--head-dim", "8", "--seq", "8", "--scheme", "xavier"};
  std::vector<std::string> sweep_shallow = sweep;
  sweep_shallow.insert(sweep_shallow.end(), {"--layers", "2"});
  r.insert(r.end(), {
      {sweep, "layers", 1, 100000, true, true, true, false, true},
      {sweep_shallow, "dropout", 0, 1, true, false, false, true},
      {sweep_shallow, "ffn-mult", 1, big, true, true, true},
      {sweep_shallow, "rotary", 1, inf, false, false},
      {{"sweep", "--d", "16", "--head-dim", "8", "--layers", "2"}, "seq", 2, big, true, true, true},
      // d: its upper end here; the lower end (4, and a multiple of --head-dim)
      // in "CLI word, list and pair flags".
      {{"sweep", "--head-dim", "1", "--seq", "8", "--layers", "2"}, "d", -inf, big, false, true, true},
      {{"sweep", "--d", "16", "--seq", "8", "--layers", "2"}, "head-dim", 1, inf, true, false, true},
      // beta^2 = K/N^A <= 1 at N = 2: K in (0, 2] at A = 1 (pole: K/2 underflows
      // to 0 above 0); A in [1, inf) at K = 2 (large A underflows, a clean status 2).
      {sweep_shallow, "beta2-k", 0, 2, false, true, false, true},
      {sweep_shallow, "beta2-alpha", 1, inf, true, false, false, true},
  });
  return r;
}

}  // namespace

TEST_CASE("domain edges: components", "[domain]") {
  for (const Row& row : component_rows()) check_row(row);
}

TEST_CASE("domain edges: blocks", "[domain]") {
  for (const Row& row : block_rows()) check_row(row);
}

TEST_CASE("domain edges: stacks (trace, trace_batch, sweep)", "[domain]") {
  for (const Row& row : stack_rows()) check_row(row);
}

TEST_CASE("domain edges: the initialization solver", "[domain]") {
  for (const Row& row : init_rows()) check_row(row);
}

TEST_CASE("domain edges: measures read off a trace (spike_bounds, weight_grad_norms)", "[domain]") {
  for (const Row& row : measure_rows()) check_row(row);
  // The trace and the weights must belong to the config.
  ModelConfig c = small_model();
  c.layers = 2;
  const ModelWeights w = initialize(c, Scheme::xavier);
  Trace t = trace(c, w);
  t.rows.pop_back();
  CHECK_THROWS_WITH(spike_bounds(c, w, t), Catch::Contains("sigprop::spike_bounds") && Catch::Contains("t.rows.size() = 2"));
  CHECK_THROWS_WITH(weight_grad_norms(c, w, t), Catch::Contains("sigprop::weight_grad_norms") &&
                                                    Catch::Contains("t.rows.size() = 2"));
  // A zero spread across the hidden units (corr_dim = 1) is a pole of the bounds.
  t = trace(c, w);
  t.mid[1].forward.corr_dim = 1;
  CHECK_THROWS_WITH(spike_bounds(c, w, t), Catch::Contains("t.mid[1] var * (1 - corr_dim) = 0"));
}

// The name parsers: every name they print parses back; anything else (case,
// spacing, separators, the empty string) throws naming the function and the value.
TEST_CASE("domain edges: arch_from_string, with_architecture, scheme_from_string", "[domain]") {
  for (Arch a : {Arch::pre_ln, Arch::post_ln, Arch::no_ln}) {
    CHECK(arch_from_string(to_string(a)) == a);
    CHECK(with_architecture(ModelConfig{}, to_string(a)).arch == a);
  }
  for (const char* preset : {"llama", "gpt2"}) CHECK(architecture_name(with_architecture(ModelConfig{}, preset)) == std::string(preset));
  for (const SchemeInfo& i : schemes()) CHECK(scheme_from_string(i.name) == i.scheme);
  const std::vector<std::string> bad = {"", " ", "PRE-LN", "pre_ln", "pre-ln ", " pre-ln", "llama2", "Llama",
                                        "dslm\n", "xavier,dslm"};
  for (const std::string& name : bad) {
    INFO("'" << name << "'");
    CHECK_THROWS_WITH(arch_from_string(name), Catch::Contains("sigprop::arch_from_string: arch = '" + name + "'"));
    CHECK_THROWS_WITH(with_architecture(ModelConfig{}, name),
                      Catch::Contains("sigprop::with_architecture: arch = '" + name + "'") && Catch::Contains("llama"));
    CHECK_THROWS_WITH(scheme_from_string(name),
                      Catch::Contains("sigprop::scheme_from_string: scheme = '" + name + "'") && Catch::Contains("dslm"));
  }
}

TEST_CASE("domain edges: CLI subcommands exit 2 with one line naming the flag and the value", "[domain][cli]") {
  for (const CliRow& row : cli_rows()) check_cli_row(row);
}

#ifdef SIGPROP_SOURCE_DIR
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

namespace {
std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
}  // namespace

// Every public component, block, builder, stack function and CLI subcommand
// appears in a row of docs/domains.md's tables: the classes deriving from
// Component<, every function an error message names ("sigprop::name" in the
// headers), the builders listed here, the commands of `sigprop --help` and
// the components of `sigprop component --help`.
// The CLI flags that take words, lists or pairs: anything outside the listed
// words, a malformed list or range, or bounds out of order exit 2 with one
// line naming the flag and the value, nothing on stdout.
TEST_CASE("domain edges: CLI word, list and pair flags", "[domain][cli]") {
  const auto rejects = [](std::vector<std::string> args, const std::string& flag, const std::string& value) {
    args.insert(args.end(), {"--" + flag, value});
    std::ostringstream out, err;
    const int status = sigprop::cli::run(args, out, err);
    const std::string e = err.str();
    INFO("sigprop " << joined(args) << "\nstderr: " << e);
    CHECK(status == 2);
    CHECK(out.str().empty());
    CHECK(std::count(e.begin(), e.end(), '\n') == 1);
    CHECK(e.find("--" + flag) != std::string::npos);
    CHECK(e.find(value) != std::string::npos);
  };
  const std::vector<std::string> table = {"table", "--layers", "2", "--d", "16", "--heads", "2", "--seq", "8"};
  const std::vector<std::string> sweep = {"sweep", "--layers", "2", "--d", "16", "--head-dim", "8", "--seq", "8"};
  for (const std::vector<std::string>& cmd : {table, sweep, std::vector<std::string>{"init", "--layers", "2"}}) {
    for (const char* v : {"", "Pre-LN", "pre_ln", "pre-ln ", "llama2"}) rejects(cmd, "arch", v);
    for (const char* v : {"", "DSLM", "dslm ", "dslm_simple", "fixup"}) rejects(cmd, "scheme", v);
    for (const char* v : {"", "ReLU", "tanh", "swiglu"}) rejects(cmd, "activation", v);
    for (const char* v : {"", "JSON", "xml"}) rejects(cmd, "format", v);
  }
  rejects(table, "tables", "token,words");
  rejects(table, "tables", "");
  // sweep lists and ranges: an empty element, a step <= 0, STOP < START, a
  // missing part, a fraction in a whole-number list, more than 100000 values.
  const std::vector<std::string> sweep_any_depth = {"sweep", "--d", "16", "--head-dim", "8", "--seq", "8"};
  for (const char* v : {"1,,2", ",", "2,", "2:4", "1:5:0", "5:1:1", "1:5:-1", "1:1e9:1", "1:2:3:4", "1:3:", " 2"})
    rejects(sweep_any_depth, "layers", v);
  rejects(sweep_any_depth, "layers", "1.5");  // also as an element of 1:3:0.5
  const std::vector<std::string> sweep_any_width = {"sweep", "--head-dim", "4", "--seq", "8", "--layers", "2"};
  for (const char* v : {"0", "3", "6", "4.5"}) rejects(sweep_any_width, "d", v);
  for (const char* v : {"0:0.5:-0.1", "0.1,", "1", "nan"}) rejects(sweep, "dropout", v);
  for (const char* v : {"2,1", "1", "0.5,2,3", "nan,2", "0.5,inf", ""}) rejects(sweep, "bounds", v);
  for (const char* v : {"dslm,foo", "dslm,,xavier"}) rejects(sweep, "scheme", v);
  // beta^2 = K/N^A outside (0, 1] at any point of the grid names both flags.
  rejects(sweep, "beta2-k", "4");
  // The edges of --bounds: LO = HI and the widest finite pair are accepted.
  for (const char* v : {"1,1", "-1.7976931348623157e308,1.7976931348623157e308"}) {
    std::vector<std::string> args = sweep;
    args.insert(args.end(), {"--bounds", v});
    std::ostringstream out, err;
    INFO(v);
    CHECK(sigprop::cli::run(args, out, err) == 0);
    CHECK(err.str().empty());
  }
}

TEST_CASE("domain edges: docs/domains.md lists every public function", "[domain][docs]") {
  namespace fs = std::filesystem;
  const fs::path root = SIGPROP_SOURCE_DIR;
  const std::string doc = read_text(root / "docs" / "domains.md");
  REQUIRE(!doc.empty());
  std::string table;  // the table lines
  {
    std::stringstream lines(doc);
    for (std::string line; std::getline(lines, line);)
      if (line.rfind("| ", 0) == 0) table += line + "\n";
  }
  std::set<std::string> names = {"glu_ffn_block", "serial", "residual", "multi_head", "gated"};
  const std::regex component_class(R"(class\s+(\w+)\s*:\s*public\s+Component<)");
  const std::regex named_function(R"re("sigprop::([A-Za-z_]\w*(?:::\w+)?))re");
  for (const char* dir : {"components", "blocks", "core", "models"})
    for (const auto& entry : fs::directory_iterator(root / "include" / "sigprop" / dir)) {
      if (entry.path().extension() != ".hpp") continue;
      const std::string text = read_text(entry.path());
      for (const std::regex* re : {&component_class, &named_function})
        for (std::sregex_iterator it(text.begin(), text.end(), *re), end; it != end; ++it) names.insert((*it)[1]);
    }
  CHECK(names.size() > 30);
  for (const std::string& n : names) {
    INFO(n);
    CHECK(table.find("`" + n + "`") != std::string::npos);
  }
  // CLI: the commands of the usage text, and every component NAME.
  std::ostringstream usage;
  sigprop::cli::usage(usage);
  const std::string u = usage.str();
  const std::regex command_line(R"(\n  (\w+) )");
  int commands = 0;
  for (std::sregex_iterator it(u.begin(), u.end(), command_line), end; it != end; ++it, ++commands) {
    INFO((*it)[1]);
    CHECK(table.find("`sigprop " + std::string((*it)[1]) + "`") != std::string::npos);
  }
  CHECK(commands >= 4);
  for (const std::string& name : sigprop::cli::component_names()) {
    INFO(name);
    CHECK(table.find("`sigprop component " + name + "`") != std::string::npos);
  }
}
#endif
