// tests/fuzz/oracles.hpp -- the fuzzers' input decoding and oracles, shared by
// the libFuzzer targets (fuzz_cli.cpp, fuzz_api.cpp; clang only) and by the
// replay of the corpus and the regression inputs in the normal test suite
// (tests/test_fuzz_replay.cpp; any compiler). One decoder and one oracle, so
// that a replayed input is checked exactly as the fuzzer checked it.
//
// Oracles (docs/fuzzing.md):
//  - CLI: exit status 0 or 2; on 2 nothing on stdout and exactly one line on
//    stderr, starting "sigprop: error:"; on 0 something on stdout, every stderr
//    line a "sigprop: warning:", and no "nan" printed.
//  - API: a sigprop::domain_error or sigprop::overflow_error (nothing else is
//    thrown), or every result finite with variances >= 0 and |r| <= 1
//    (exactly: the component base clamps correlations against rounding,
//    docs/architecture.md).
// Each check returns "" when the input passes, else what failed.
//
// Inputs are decoded with ByteReader rather than libFuzzer's
// FuzzedDataProvider, which ships with clang's runtime only: the replay test
// must decode the same bytes the same way under g++.
#pragma once

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iterator>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "../../cli/run.hpp"
#include "sigprop/sigprop.hpp"

namespace sigprop::fuzz {

/// Reads typed values off the front of the fuzzer's bytes; past the end
/// every read returns zero bytes, so any input decodes.
class ByteReader {
 public:
  ByteReader(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  bool empty() const { return at_ >= size_; }

  std::uint8_t byte() { return at_ < size_ ? data_[at_++] : 0; }

  /// An integer in [0, n) (n >= 1).
  std::size_t below(std::size_t n) { return n <= 256 ? byte() % n : (byte() << 8 | byte()) % n; }

  /// Any double bit pattern (NaN, +-inf, subnormals included).
  double raw_double() {
    std::uint64_t bits = 0;
    for (int i = 0; i < 8; ++i) bits = bits << 8 | byte();
    double x;
    std::memcpy(&x, &bits, sizeof x);
    return x;
  }

  /// A double biased towards the edges of the library's domains: the
  /// special values, values next to 0 and 1, plain small numbers, or any bit
  /// pattern.
  double value() {
    static const double specials[] = {
        0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 0.1, 0.9,
        std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
        -std::numeric_limits<double>::infinity(), std::numeric_limits<double>::max(),
        std::numeric_limits<double>::lowest(), std::numeric_limits<double>::min(),
        std::numeric_limits<double>::denorm_min(), std::numeric_limits<double>::epsilon(),
        1 - std::numeric_limits<double>::epsilon() / 2, 1 + std::numeric_limits<double>::epsilon(),
        -1 + std::numeric_limits<double>::epsilon() / 2, 1e-300, 1e300, 1e15, 1e7, 1e-12};
    const std::uint8_t kind = byte();
    switch (kind % 4) {
      case 0:
        return specials[byte() % std::size(specials)];
      case 1:  // a small number: k / 16 for k in [-128, 127]
        return static_cast<std::int8_t>(byte()) / 16.0;
      case 2:  // a power of two times a sign
        return std::ldexp(kind & 4 ? -1.0 : 1.0, static_cast<std::int8_t>(byte()) * 8);
      default:
        return raw_double();
    }
  }

  /// A correlation-like value: mostly in [-1, 1] (near the edges often),
  /// sometimes anything.
  double correlation() {
    const std::uint8_t kind = byte();
    switch (kind % 4) {
      case 0:  // r = +-(1 - 2^-k), k = 0..63
        return (kind & 4 ? -1 : 1) * (1 - std::ldexp(1.0, -(byte() % 64)));
      case 1:
        return (byte() / 127.5) - 1;
      default:
        return value();
    }
  }

  /// A width, length or count: mostly small whole numbers, sometimes any value.
  double width() {
    const std::uint8_t kind = byte();
    switch (kind % 4) {
      case 0:
        return byte() % 8;
      case 1:
        return 1 + byte() + 256.0 * (byte() % 16);
      case 2:
        return std::ldexp(1.0, byte() % 64);
      default:
        return value();
    }
  }

  bool flag() { return byte() & 1; }

  /// The rest of the input.
  std::string rest() {
    std::string s(reinterpret_cast<const char*>(data_ + std::min(at_, size_)), size_ - std::min(at_, size_));
    at_ = size_;
    return s;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t at_ = 0;
};

// ---------------------------------------------------------------------------
// The command-line tool.

/// The structured form starts with this byte; any other input is text whose
/// lines (split on newline or NUL) are the arguments.
inline constexpr std::uint8_t structured_marker = 0x01;

/// Words the structured form draws from: the commands, every flag, the
/// component names and the enumerated values.
inline const std::vector<std::string>& cli_words() {
  static const std::vector<std::string> words = {
      // commands and help
      "component", "table", "init", "sweep", "help", "--help", "-h", "--version",
      // component names
      "linear", "dropout", "relu", "gelu", "layernorm", "softmax", "attention", "embedding",
      // component flags
      "--mean", "--var", "--corr-len", "--corr-dim", "--grad-var", "--grad-corr-len", "--format",
      "--d-in", "--d-out", "--weight-var", "--p", "--d", "--n", "--form", "--d-k", "--seq", "--q-var",
      "--k-var", "--v-var", "--vocab", "--tables",
      // model flags
      "--arch", "--scheme", "--layers", "--heads", "--ffn-mult", "--activation", "--dropout",
      "--input-var", "--input-corr-len", "--beta2-k", "--beta2-alpha", "--final-ln",
      "--embedding-var", "--o-var", "--ffn1-var", "--ffn2-var", "--head-dim", "--bounds",
      // enumerated values
      "text", "json", "csv", "exact", "full", "simplified", "pre-ln", "post-ln", "no-ln", "llama",
      "gpt2", "silu", "token", "position", "segment", "token,position", "xavier", "bert", "dslm",
      "dslm-simple", "admin", "admin-code", "deepnet", "ds-init", "t-fixup", "layerscale",
      "rezero", "skipinit", "spike-vanilla", "scaled-embed", "embed-ln", "xavier-scaled-embed",
      "xavier,dslm", "pre-ln,post-ln",
      // numbers that are edges of the flags' ranges, and malformed ones
      "0", "1", "-1", "2", "3", "4", "0.5", "-0.5", "1e-300", "1e308", "1e309", "nan", "inf", "-inf",
      "", "1x", " 1", "0x10", "1:4:1", "2:8:2", "1,2", "0.5,2", "0,0.1", "4:1:1", "1:2:0", "1e15",
      "0.9999999999999999", "1.0000000000000002", "-0", "64", "768", "12", "5",
      // table --positions (causal models)
      "--positions", "last", "1,last", "3,1,1", "1,,2"};
  return words;
}

/// The arguments encoded by a fuzzer input.
inline std::vector<std::string> cli_args(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> args;
  if (size > 0 && data[0] == structured_marker) {
    ByteReader in(data + 1, size - 1);
    const auto& words = cli_words();
    while (!in.empty() && args.size() < 64) {
      const std::uint8_t kind = in.byte();
      if (kind < 200) {
        args.push_back(words[kind % words.size()]);
      } else if (kind < 220) {  // a number as the tool prints it
        std::ostringstream s;
        s.precision(17);
        s << in.value();
        args.push_back(s.str());
      } else if (kind < 240) {  // a flag with an inline value
        std::string w = words[in.byte() % words.size()];
        args.push_back(w + "=" + words[in.byte() % words.size()]);
      } else {  // a few raw bytes
        std::string w;
        for (std::size_t n = in.byte() % 8; n > 0 && !in.empty(); --n) w += static_cast<char>(in.byte());
        args.push_back(w);
      }
    }
    return args;
  }
  std::string word;
  for (std::size_t i = 0; i < size; ++i) {
    const char c = static_cast<char>(data[i]);
    if (c == '\n' || c == '\0') {
      args.push_back(word);
      word.clear();
    } else {
      word += c;
    }
  }
  if (!word.empty()) args.push_back(word);
  return args;
}

namespace detail {

// Every number a word holds: the word itself, or its comma- or colon-
// separated parts (the sweep's lists and ranges).
inline std::vector<double> numbers_in(const std::string& word) {
  std::vector<double> out;
  std::string part;
  const auto flush = [&] {
    char* end = nullptr;
    const double v = std::strtod(part.c_str(), &end);
    if (!part.empty() && end != part.c_str()) out.push_back(std::fabs(v));
    part.clear();
  };
  for (char c : word) {
    if (c == ',' || c == ':') flush();
    else part += c;
  }
  flush();
  return out;
}

}  // namespace detail

/// Inputs whose legitimate work is large (a deep stack, a long causal
/// sequence, a big sweep grid) are skipped, not judged: the fuzzer is after
/// wrong behaviour, and these would only make it slow. The tool itself is
/// not changed. The work is bounded by the layers summed over the grid's
/// points (a sweep's lists multiply) and by the sequence length, which
/// causal attention walks position by position.
inline bool cli_too_costly(const std::vector<std::string>& args) {
  const bool sweep = !args.empty() && args[0] == "sweep";
  double points = 1, layers = sweep ? 48 : 12, seq = 256;  // the defaults
  bool positions = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i], value;
    const auto eq = flag.find('=');
    if (eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    } else if (i + 1 < args.size()) {
      value = args[i + 1];
    }
    if (flag.rfind("--", 0) != 0) continue;
    positions = positions || flag == "--positions";
    const std::vector<double> v = detail::numbers_in(value);
    double count = 1;
    for (char c : value) count += c == ',';
    if (value.find(':') != std::string::npos)
      count = v.size() == 3 && v[2] > 0 ? std::fabs(v[1] - v[0]) / v[2] + 1 : 1e9;
    points *= std::max(count, 1.0);
    for (double x : v) {
      if (flag == "--layers") layers = std::max(layers, x);
      if (flag == "--seq" && x > 4096) return true;
      if (flag == "--seq") seq = std::max(seq, x);
    }
  }
  // table --positions carries the gradient's L x L pairs: O(layers L^2).
  if (positions && seq > 512) return true;
  // Measured per layer (Release, `sigprop table/sweep ... --layers 192`):
  // ~0.02 ms for ReLU stacks (weight 1); ~0.16 ms with SiLU (llama), ~1.1 ms
  // in a one-point batched sweep; ~0.1 ms for causal GeLU (gpt2), ~0.6 ms in
  // a sweep.
  double weight = 1;
  for (const std::string& a : args) {
    if (a.find("silu") != std::string::npos || a.find("llama") != std::string::npos)
      weight = std::max(weight, sweep ? 64.0 : 8.0);
    if (a.find("gpt2") != std::string::npos) weight = std::max(weight, 8.0);
  }
  return points * layers * weight > 256;
}

/// Runs the tool on `args` and checks the CLI oracle.
inline std::string check_cli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  int status = -1;
  try {
    status = sigprop::cli::run(args, out, err);
  } catch (const std::exception& e) {
    return std::string("run() let an exception escape: ") + e.what();
  }
  const std::string o = out.str(), e = err.str();
  if (status != 0 && status != 2) return "exit status " + std::to_string(status);
  if (status == 2) {
    if (!o.empty()) return "status 2 with output on stdout: " + o.substr(0, 200);
    if (e.rfind("sigprop: error: ", 0) != 0) return "status 2, stderr does not start 'sigprop: error: ': " + e;
    if (e.find('\n') != e.size() - 1) return "status 2, stderr is not exactly one line: " + e;
    return "";
  }
  if (o.empty()) return "status 0 with nothing on stdout";
  std::istringstream lines(e);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("sigprop: warning: ", 0) != 0) return "status 0, stderr line is not a warning: " + line;
  // A NaN printed as a result (words like "nan" never appear otherwise).
  std::string word;
  for (char c : o + " ") {
    if (std::isalpha(static_cast<unsigned char>(c))) {
      word += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      continue;
    }
    if (word == "nan") return "status 0 and a nan on stdout: " + o.substr(0, 400);
    word.clear();
  }
  return "";
}

/// The CLI oracle on one fuzzer input ("" also for a skipped input).
inline std::string check_cli_input(const std::uint8_t* data, std::size_t size) {
  const std::vector<std::string> args = cli_args(data, size);
  if (cli_too_costly(args)) return "";
  return check_cli(args);
}

// ---------------------------------------------------------------------------
// The component and stack APIs.

namespace detail {

inline std::string describe_moments(const Moments<double>& m) {
  std::ostringstream s;
  s.precision(17);
  s << "{mean " << m.mean << ", var " << m.var << ", corr_len " << m.corr_len << ", corr_dim " << m.corr_dim
    << ", norm_var_ratio " << m.norm_var_ratio << "}";
  return s.str();
}

inline std::string describe_grad(const GradMoments<double>& g) {
  std::ostringstream s;
  s.precision(17);
  s << "{var " << g.var << ", corr_len " << g.corr_len << ", align_activation " << g.align_activation
    << ", align_mean " << g.align_mean << ", norm_coupling " << g.norm_coupling << "}";
  return s.str();
}

inline bool is_correlation(double r) { return std::isfinite(r) && r >= -1 && r <= 1; }
inline bool is_variance(double v) { return std::isfinite(v) && v >= 0; }

}  // namespace detail

inline std::string check_result(const char* what, const Moments<double>& m) {
  if (std::isfinite(m.mean) && detail::is_variance(m.var) && detail::is_correlation(m.corr_len) &&
      detail::is_correlation(m.corr_dim) && std::isfinite(m.norm_var_ratio))
    return "";
  return std::string(what) + " = " + detail::describe_moments(m);
}

inline std::string check_result(const char* what, const GradMoments<double>& g) {
  if (detail::is_variance(g.var) && detail::is_correlation(g.corr_len) && std::isfinite(g.align_activation) &&
      std::isfinite(g.align_mean) && std::isfinite(g.norm_coupling))
    return "";
  return std::string(what) + " = " + detail::describe_grad(g);
}

inline std::string check_result(const char* what, const Domain<double>& d) {
  if (!std::isnan(d.score_var) && !std::isnan(d.key_weight) && !std::isnan(d.width_term)) return "";
  std::ostringstream s;
  s << what << " = {score_var " << d.score_var << ", key_weight " << d.key_weight << ", width_term "
    << d.width_term << "}";
  return s.str();
}

/// The moments a fuzzer input feeds a component: anything, edges often.
inline Moments<double> fuzzed_moments(ByteReader& in) {
  Moments<double> m;
  m.mean = in.flag() ? 0.0 : in.value();
  m.var = in.value();
  m.corr_len = in.correlation();
  m.corr_dim = in.flag() ? 0.0 : in.correlation();
  if (in.byte() % 4 == 0) m.norm_var_ratio = in.value();
  return m;
}

inline GradMoments<double> fuzzed_grad(ByteReader& in) {
  GradMoments<double> g;
  g.var = in.value();
  g.corr_len = in.correlation();
  const int extra = in.byte() % 4;
  if (extra == 0) {
    g.align_activation = in.value();
    g.align_mean = in.value();
  } else if (extra == 1) {
    g.norm_coupling = in.value();
  }
  return g;
}

/// Bugs found by the fuzzer and still open (docs/fuzzing.md, "Open"): while
/// set, their known signature is not reported, so that a long run can look
/// for other failures. Their inputs are in tests/fuzz/open/<target>/, which
/// the replay test checks with this unset.
inline bool skip_open_bugs = true;

namespace detail {

// Open bugs, by component and input (none at present; the last one, RmsNorm
// accepting norm_var_ratio >= d/2, is fixed and its inputs are regressions).
template <class C>
bool is_open_bug(const Moments<double>&) {
  return false;
}

/// forward, backward and domain of one component on fuzzed moments.
template <class C>
std::string check_component(const C& c, ByteReader& in) {
  const Moments<double> x = fuzzed_moments(in);
  const GradMoments<double> g = fuzzed_grad(in);
  const std::string where = std::string(C::name) + " at x = " + describe_moments(x) + ", g = " + describe_grad(g);
  std::string failure;
  try {
    failure = check_result("forward", c.forward(x));
  } catch (const sigprop::domain_error&) {
  } catch (const sigprop::overflow_error&) {
  }
  if (failure.empty() && !is_open_bug<C>(x)) {
    try {
      failure = check_result("backward", c.backward(x, g));
    } catch (const sigprop::domain_error&) {
    } catch (const sigprop::overflow_error&) {
    }
  }
  if (failure.empty()) {
    try {
      failure = check_result("domain", c.domain(x));
    } catch (const sigprop::domain_error&) {
    } catch (const sigprop::overflow_error&) {
    }
  }
  return failure.empty() ? "" : where + ": " + failure;
}

inline std::string check_trace(const char* what, const Trace& t) {
  const auto row = [&](const char* part, std::size_t n, const TraceRow& r) -> std::string {
    std::string f = check_result("forward", r.forward);
    if (f.empty()) f = check_result("backward", r.backward);
    if (f.empty()) f = check_result("domain", r.domain);
    if (f.empty() && !(is_variance(r.branch_var) && std::isfinite(r.residual_share)))
      f = "branch_var " + std::to_string(r.branch_var) + ", residual_share " + std::to_string(r.residual_share);
    return f.empty() ? "" : std::string(what) + " " + part + "[" + std::to_string(n) + "]: " + f;
  };
  for (std::size_t n = 0; n < t.rows.size(); ++n)
    if (auto f = row("rows", n, t.rows[n]); !f.empty()) return f;
  for (std::size_t n = 0; n < t.mid.size(); ++n)
    if (auto f = row("mid", n, t.mid[n]); !f.empty()) return f;
  return row("output", 0, t.output);
}

inline AttentionGradient fuzzed_gradient(ByteReader& in) {
  return in.flag() ? AttentionGradient::all_paths : AttentionGradient::value_path_only;
}

// Rotary embeddings: the common bases, one just above 1, or any value.
inline RotaryEmbedding fuzzed_rotary(ByteReader& in) {
  switch (in.byte() % 4) {
    case 0: return {10000};
    case 1: return {500000};
    case 2: return {1 + std::abs(in.value())};
    default: return {in.value()};
  }
}

// Limits on the work one input may ask for (see cli_too_costly): the layers
// of a traced model, the positions a causal head walks, and the sequence
// length up to which a causal model's positions are traced one by one.
inline constexpr double max_layers = 64;
inline constexpr double max_causal_seq = 4096;
inline constexpr std::size_t max_position_seq = 1024;  // trace_positions: O(seq_len) per position and layer
inline constexpr std::size_t max_pair_seq = 128;       // trace_position_gradients: O(seq_len^2) per layer

inline std::string check_model(ByteReader& in) {
  ModelConfig c;
  static const char* const archs[] = {"pre-ln", "post-ln", "no-ln", "llama", "gpt2"};
  c.layers = 1 + in.byte() % static_cast<std::size_t>(max_layers);
  const std::size_t head_widths[] = {1, 2, 4, 8, 16, 64};
  c.heads = 1 + in.byte() % 16;
  c.d = in.flag() ? c.heads * head_widths[in.byte() % std::size(head_widths)] : in.byte();
  c.ffn_mult = in.byte() % 6;
  c.seq_len = in.flag() ? 1 + in.byte() : static_cast<std::size_t>(std::ldexp(1.0, in.byte() % 13));
  c.activation = static_cast<FfnActivation>(in.byte() % 3);
  c.dropout = in.flag() ? in.byte() / 256.0 : in.value();
  c.final_layernorm = in.flag();
  c.attention_gradient = fuzzed_gradient(in);
  const Scheme scheme = schemes()[in.byte() % schemes().size()].scheme;
  InputSpec input;
  input.vocab = in.flag() ? 32000 : in.width();
  input.token = in.flag();
  input.position = in.flag();
  input.segment = in.flag();
  if (in.byte() % 4 == 0) input.embedding_scale = in.value();
  input.embedding_layernorm = in.flag();
  if (in.byte() % 4 == 0) input.measured = fuzzed_moments(in);
  ResidualScaling scaling;
  if (in.flag()) scaling = {in.value(), in.value(), true};
  WeightOverrides o;
  for (std::optional<double>* slot : {&o.embedding, &o.q, &o.k, &o.v, &o.o, &o.ffn1, &o.ffn2})
    if (in.byte() % 8 == 0) *slot = in.value();
  const GradMoments<double> grad_top = in.flag() ? GradMoments<double>{1, 0} : fuzzed_grad(in);
  const char* arch = archs[in.byte() % std::size(archs)];
  try {
    c = with_architecture(c, arch);
    if (c.causal && c.seq_len > max_causal_seq) return "";
    const ModelWeights w = initialize(c, scheme, input, scaling, o);
    const Trace t = trace(c, w, grad_top);
    if (auto f = check_trace("trace", t); !f.empty()) return f;
    if (!std::isfinite(output_change(t)) || std::isnan(sensitivity(t)))
      return "output_change " + std::to_string(output_change(t)) + ", sensitivity " + std::to_string(sensitivity(t));
    // Each position's moments (trace_positions) at up to three positions,
    // decoded after the model so that earlier inputs still decode the same
    // model. A step of 0 repeats a position, like one past seq_len an error.
    if (c.causal && c.seq_len <= max_position_seq && in.flag()) {
      std::vector<std::size_t> positions;
      std::size_t p = 0;
      for (std::size_t k = 1 + in.byte() % 3; k > 0; --k) {
        p += in.below(c.seq_len + 1);
        positions.push_back(in.flag() ? c.seq_len : p);
      }
      const PositionTrace pt = trace_positions(c, w, positions);
      for (std::size_t n = 0; n < pt.rows.size(); ++n)
        for (std::size_t j = 0; j < pt.positions.size(); ++j) {
          std::string f = check_result("forward", pt.rows[n][j]);
          if (f.empty() && n < pt.mid.size()) f = check_result("forward", pt.mid[n][j]);
          if (!f.empty())
            return "trace_positions rows[" + std::to_string(n) + "], position " + std::to_string(pt.positions[j]) +
                   ": " + f;
        }
    }
    // Each position's gradient (trace_position_gradients, O(N L^2)), decoded
    // after the positions above for the same reason.
    if (c.causal && c.arch == Arch::pre_ln && c.seq_len <= max_pair_seq && in.flag()) {
      const PositionGradientTrace pg = trace_position_gradients(c, w, {1, c.seq_len}, grad_top);
      for (std::size_t n = 0; n < pg.rows.size(); ++n)
        for (std::size_t j = 0; j < pg.positions.size(); ++j) {
          std::string f = check_result("backward", pg.rows[n][j]);
          if (f.empty() && n < pg.mid.size()) f = check_result("backward", pg.mid[n][j]);
          if (!f.empty())
            return "trace_position_gradients rows[" + std::to_string(n) + "], position " +
                   std::to_string(pg.positions[j]) + ": " + f;
        }
    }
    // The same model with rotary embeddings, decoded last for the same reason.
    if (in.flag()) {
      c.rotary_base = fuzzed_rotary(in).base;
      const Trace rotated = trace(c, initialize(c, scheme, input, scaling, o), grad_top);
      if (auto f = check_trace("trace (rotary)", rotated); !f.empty()) return f;
    }
  } catch (const sigprop::domain_error&) {
  } catch (const sigprop::overflow_error&) {
  }
  return "";
}

}  // namespace detail

/// The API oracle on one fuzzer input: the first byte picks the component,
/// block or model, the rest its parameters and input moments.
inline std::string check_api_input(const std::uint8_t* data, std::size_t size) {
  ByteReader in(data, size);
  const std::uint8_t subject = in.byte();
  // Parameters are read before the try block's construction so that a
  // throwing constructor and a throwing map are handled alike.
  const auto guarded = [](auto make, ByteReader& r) -> std::string {
    try {
      const auto c = make();
      return detail::check_component(c, r);
    } catch (const sigprop::domain_error&) {
    } catch (const sigprop::overflow_error&) {
    }
    return "";
  };
  try {
    switch (subject % 20) {
      case 0: {
        const double a = in.width(), b = in.width(), w = in.value();
        return guarded([&] { return Linear<double>(a, b, w); }, in);
      }
      case 1:
        return guarded([] { return Relu<double>(); }, in);
      case 2:
        return guarded([] { return Gelu<double>(); }, in);
      case 3:
        return guarded([] { return Silu<double>(); }, in);
      case 4: {
        const double d = in.width();
        return guarded([&] { return LayerNorm<double>(d); }, in);
      }
      case 5: {
        const double d = in.width(), gain = in.flag() ? 1.0 : in.value();
        return guarded([&] { return RmsNorm<double>(d, gain); }, in);
      }
      case 6: {
        const double p = in.flag() ? in.byte() / 256.0 : in.value();
        return guarded([&] { return Dropout<double>(p); }, in);
      }
      case 7: {
        const double n = in.width();
        const auto form = static_cast<SoftmaxForm>(in.byte() % 3);
        return guarded([&] { return Softmax<double>(n, form); }, in);
      }
      case 8:
      case 9: {
        const double d = in.width(), dk = in.width(), L = in.width();
        const double q = in.value(), k = in.value(), v = in.value(), p = in.flag() ? 0.0 : in.value();
        const AttentionGradient grad = detail::fuzzed_gradient(in);
        const bool masked = subject % 20 == 9;
        if (masked && L > detail::max_causal_seq) return "";
        // Then, on the bytes left, the same head with rotary embeddings (read
        // after the first so that earlier inputs still decode the same head).
        const auto head = [&](RotaryEmbedding rotary, ByteReader& r) {
          if (masked) return guarded([&] { return CausalAttention<double>(d, dk, L, q, k, v, p, grad, rotary); }, r);
          return guarded([&] { return Attention<double>(d, dk, L, q, k, v, p, grad, rotary); }, r);
        };
        const std::string plain = head({}, in);
        if (!plain.empty() || !in.flag()) return plain;
        return head(detail::fuzzed_rotary(in), in);
      }
      case 10: {
        EmbeddingConfig<double> c;
        c.vocab = in.width();
        c.seq_len = in.width();
        c.weight_var = in.value();
        if (in.flag()) c.token_var = in.value();
        if (in.flag()) c.position_var = in.value();
        if (in.flag()) c.segment_var = in.value();
        c.token = in.flag();
        c.position = in.flag();
        c.segment = in.flag();
        c.token_corr = static_cast<TokenCorrelation>(in.byte() % 3);
        c.segment_corr = static_cast<SegmentCorrelation>(in.byte() % 3);
        return guarded([&] { return Embedding<double>(c); }, in);
      }
      case 11: {
        const Moments<double> m = fuzzed_moments(in);
        return guarded([&] { return Embedding<double>::measured(m); }, in);
      }
      case 12: {
        const double d = in.width(), m = in.width(), w1 = in.value(), w2 = in.value(), p = in.value();
        switch (in.byte() % 3) {
          case 0: return guarded([&] { return ffn_block<Relu<double>>(d, m, w1, w2, p); }, in);
          case 1: return guarded([&] { return ffn_block<Gelu<double>>(d, m, w1, w2, p); }, in);
          default: return guarded([&] { return ffn_block<Silu<double>>(d, m, w1, w2, p); }, in);
        }
      }
      case 13: {
        const double d = in.width(), h = in.width(), w1 = in.value(), wv = in.value(), w2 = in.value(),
                     p = in.value();
        switch (in.byte() % 3) {
          case 0: return guarded([&] { return glu_ffn_block<Relu<double>>(d, h, w1, wv, w2, p); }, in);
          case 1: return guarded([&] { return glu_ffn_block<Gelu<double>>(d, h, w1, wv, w2, p); }, in);
          default: return guarded([&] { return glu_ffn_block<Silu<double>>(d, h, w1, wv, w2, p); }, in);
        }
      }
      case 14: {
        const double d = in.width(), heads = in.width(), L = in.width(), p = in.flag() ? 0.1 : in.value();
        const AttentionWeights<double> w{in.value(), in.value(), in.value(), in.value()};
        const AttentionGradient grad = detail::fuzzed_gradient(in);
        const bool masked = !in.flag();
        if (masked && L > detail::max_causal_seq) return "";
        const auto block = [&](RotaryEmbedding rotary, ByteReader& r) {
          if (masked) return guarded([&] { return causal_attention_block(d, heads, L, w, p, grad, rotary); }, r);
          return guarded([&] { return attention_block(d, heads, L, w, p, grad, rotary); }, r);
        };
        const std::string plain = block({}, in);
        if (!plain.empty() || !in.flag()) return plain;
        return block(detail::fuzzed_rotary(in), in);
      }
      case 15: {  // a Pre-LN style residual sublayer around an FFN
        const double d = in.width(), skip = in.value(), branch = in.value(), w = in.value();
        return guarded(
            [&] {
              return residual(serial(LayerNorm<double>(d), Linear<double>(d, d, w), Relu<double>()), skip, branch);
            },
            in);
      }
      case 16: {  // a Post-LN style residual with an attention branch, then LayerNorm
        const double d = in.width(), L = in.width(), skip = in.value(), branch = in.value(), v = in.value();
        return guarded(
            [&] {
              return serial(residual(Attention<double>(d, d, L, v, v, v), skip, branch), LayerNorm<double>(d));
            },
            in);
      }
      case 17: {
        const double d = in.width(), dk = in.width(), L = in.width(), heads = in.width(), v = in.value();
        return guarded([&] { return multi_head(Attention<double>(d, dk, L, v, v, v), heads); }, in);
      }
      case 18: {  // gated: Silu(x W1) * (x V)
        const double d = in.width(), h = in.width(), w1 = in.value(), wv = in.value();
        return guarded(
            [&] { return gated(serial(Linear<double>(d, h, w1), Silu<double>()), Linear<double>(d, h, wv)); },
            in);
      }
      default:
        return detail::check_model(in);
    }
  } catch (const sigprop::domain_error&) {
  } catch (const sigprop::overflow_error&) {
  } catch (const std::exception& e) {
    return std::string("undocumented exception: ") + e.what();
  }
  return "";
}

}  // namespace sigprop::fuzz
