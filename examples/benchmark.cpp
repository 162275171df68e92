// benchmark -- how fast the closed forms are, and what they replace.
//
//   benchmark [--format text|json] [--lanes B] [--layers N] [--d D] [--heads H]
//             [--seq L] [--skip-montecarlo] [--repeats R] [--calls K]
//             [--only scalar|batched|trace]
//
// On one core (the process runs one thread), for one model shape (default:
// Pre-LN, ReLU, DeepScaleLM-simple weights, d = 256, H = 4, L = 128, dropout
// 0.1, N = 192 layers):
//   scalar_layer_updates_per_s   one layer's full moment update -- the
//       forward and backward maps of the attention sublayer (LayerNorm,
//       attention block, residual) and of the FFN sublayer (LayerNorm, FFN
//       block, residual), the backward from the forward pass's records as in
//       the trace -- for one configuration, T = double; the B configurations
//       below are updated one after the other;
//   batched_layer_updates_per_s  the same update for the B configurations
//       (one lane each, each a different d, L, p, weight scale and input
//       correlation), evaluated as trace_batch does, in chunks of
//       batch_chunk lanes (T = BatchChunk, a fixed-size Eigen array),
//       counted per lane;
//   stack192_trace_us            sigprop::trace of the whole N-layer model
//       (forward, backward and the domain-of-validity measures of every layer);
//   montecarlo192_ms             one forward and backward pass of the same
//       model with random weights (montecarlo::simulate_model; two trials,
//       the minimum it runs, divided by two): the profiling run the trace replaces.
// Each time is the median of R repeats (default 7) of a loop long enough to
// take at least 50 ms; with --calls K, one loop of exactly K calls (to count
// instructions under a simulator such as callgrind: K scalar updates of all
// the configurations, K batched passes over them, K traces). --only runs one
// of the three (the others print -1). docs/performance.md records the
// numbers and what bounds them.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <string>
#include <type_traits>
#include <vector>

#include "sigprop/models/detail/sublayers.hpp"
#include "sigprop/models/schemes.hpp"
#include "sigprop/montecarlo/models.hpp"

namespace {

using namespace sigprop;
using Clock = std::chrono::steady_clock;

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "benchmark: error: %s\n", message.c_str());
  std::exit(2);
}

std::size_t parse_count(const std::string& flag, const std::string& value) {
  char* end = nullptr;
  const long long x = std::strtoll(value.c_str(), &end, 10);
  if (end == value.c_str() || *end != '\0' || x < 1 || x > 100000000)
    usage_error(flag + " = " + value + " is outside the valid range {1, 2, ..., 1e8}");
  return static_cast<std::size_t>(x);
}

// Seconds per call of f: the median over `repeats` of loops of at least 50 ms,
// or with `calls` > 0 one loop of that many calls.
template <class F>
double seconds_per_call(F f, std::size_t repeats, std::size_t calls_fixed) {
  if (calls_fixed > 0) {
    const auto t0 = Clock::now();
    for (std::size_t i = 0; i < calls_fixed; ++i) f();
    return std::chrono::duration<double>(Clock::now() - t0).count() / static_cast<double>(calls_fixed);
  }
  std::size_t calls = 1;
  for (;;) {  // calibrate the loop length
    const auto t0 = Clock::now();
    for (std::size_t i = 0; i < calls; ++i) f();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (s >= 0.05) break;
    calls *= s < 0.005 ? 10 : 2;
  }
  std::vector<double> per_call;
  for (std::size_t r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    for (std::size_t i = 0; i < calls; ++i) f();
    per_call.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / static_cast<double>(calls));
  }
  std::nth_element(per_call.begin(), per_call.begin() + static_cast<long>(repeats / 2), per_call.end());
  return per_call[repeats / 2];
}

// One layer's moment update (forward and backward of both sublayers) for the
// shape s and weights w: the body of the stack trace, without its bookkeeping.
template <class T, class W>
struct LayerUpdate {
  StackShape<T> shape;
  W weights;
  Moments<T> input;
  GradMoments<T> grad_top;

  T operator()() const {
    // Pre-LN sublayers, as detail::with_sublayer builds them for the trace.
    const auto attention = residual(serial(LayerNorm<T>(shape.d), detail::make_attention_block(shape, weights)),
                                    T(weights.attn_skip), T(weights.attn_branch));
    const auto ffn = residual(serial(LayerNorm<T>(shape.d), detail::make_ffn_block<Relu<T>>(shape, weights)),
                              T(weights.ffn_skip), T(weights.ffn_branch));
    // As the trace does: each sublayer's forward pass keeps its record
    // (core/record.hpp), from which the backward pass runs.
    require_moments("benchmark", input);
    const auto mid = detail::record(attention, input);
    const auto out = detail::record(ffn, mid.first);
    const GradMoments<T> g_mid = detail::backward_recorded(ffn, out.second, grad_top);
    const GradMoments<T> g_in = detail::backward_recorded(attention, mid.second, g_mid);
    return T(out.first.var + g_in.var);
  }
};

template <class T>
T floor_of(const T& x) {
  if constexpr (std::is_same_v<T, double>) return std::floor(x);
  else return x.floor();
}

template <class T>
T constant(double v) {
  if constexpr (std::is_same_v<T, double>) return v;
  else return T::Constant(v);
}

// The layer updates of `lanes` configurations, lane i with width
// d (1 + floor(4 t)), length L (1 + floor(8 t)), dropout 0.3 t, weight scale
// 0.5 + t and input length correlation 0.9 t, t = i / lanes; one update per
// lane for T = double, one per chunk of batch_chunk lanes for T = BatchChunk.
template <class T>
std::vector<LayerUpdate<T, BatchLayerWeights<T>>> layer_updates(const ModelConfig& c, const LayerWeights& w,
                                                               const Moments<double>& x,
                                                               const GradMoments<double>& top,
                                                               std::size_t lanes) {
  constexpr std::size_t width = std::is_same_v<T, double> ? 1 : static_cast<std::size_t>(batch_chunk);
  std::vector<LayerUpdate<T, BatchLayerWeights<T>>> updates;
  for (std::size_t start = 0; start < lanes; start += width) {
    T t;
    if constexpr (std::is_same_v<T, double>) t = static_cast<double>(start) / static_cast<double>(lanes);
    else t = (T::LinSpaced(batch_chunk, 0, batch_chunk - 1) + static_cast<double>(start)) / static_cast<double>(lanes);
    StackShape<T> s;
    s.arch = c.arch;
    s.d = c.d * (1 + floor_of<T>(t * 4));
    s.heads = constant<T>(static_cast<double>(c.heads));
    s.hidden = constant<T>(static_cast<double>(c.hidden_width()));
    s.seq_len = c.seq_len * (1 + floor_of<T>(t * 8));
    s.dropout = 0.3 * t;
    s.attention_dropout = s.dropout;
    s.ffn_dropout = constant<T>(0);
    s.ln_gain = constant<T>(1);
    s.ln_bias = constant<T>(0);
    const T scale = 0.5 + t;
    const BatchLayerWeights<T> bw{scale * w.q,    scale * w.k,    scale * w.v,
                                  scale * w.o,    scale * w.ffn1, scale * w.ffn2,
                                  scale * w.ffn_gate,
                                  constant<T>(w.attn_skip), constant<T>(w.attn_branch),
                                  constant<T>(w.ffn_skip),  constant<T>(w.ffn_branch),
                                  constant<T>(w.q_bias),    constant<T>(w.k_bias),  constant<T>(w.v_bias),
                                  constant<T>(w.o_bias),    constant<T>(w.ffn1_bias), constant<T>(w.ffn2_bias),
                                  constant<T>(w.ffn_gate_bias)};
    const Moments<T> bx{constant<T>(x.mean), constant<T>(x.var), 0.9 * t, constant<T>(0)};
    const GradMoments<T> btop{constant<T>(1), constant<T>(top.corr_len)};
    updates.push_back({s, bw, bx, btop});
  }
  return updates;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

const char* simd_level() {
#if defined(__AVX512F__)
  return "AVX-512";
#elif defined(__AVX2__)
  return "AVX2";
#elif defined(__AVX__)
  return "AVX";
#elif defined(__SSE2__)
  return "SSE2";
#else
  return "none";
#endif
}

}  // namespace

int main(int argc, char** argv) {
  std::string format = "text";
  std::size_t lanes = 256, repeats = 7, calls = 0;  // lanes: a multiple of batch_chunk
  bool montecarlo = true;
  std::string only = "all";
  ModelConfig c;
  c.layers = 192;
  c.d = 256;
  c.heads = 4;
  c.seq_len = 128;
  c.dropout = 0.1;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--skip-montecarlo") {
      montecarlo = false;
      continue;
    }
    if (i + 1 >= argc) usage_error(flag + " needs a value (or is unknown)");
    const std::string value = argv[++i];
    if (flag == "--format") {
      if (value != "text" && value != "json") usage_error("--format = " + value + " is outside the valid range {text, json}");
      format = value;
    } else if (flag == "--lanes") lanes = parse_count(flag, value);
    else if (flag == "--layers") c.layers = parse_count(flag, value);
    else if (flag == "--d") c.d = parse_count(flag, value);
    else if (flag == "--heads") c.heads = parse_count(flag, value);
    else if (flag == "--seq") c.seq_len = parse_count(flag, value);
    else if (flag == "--repeats") repeats = parse_count(flag, value);
    else if (flag == "--calls") calls = parse_count(flag, value);
    else if (flag == "--only") {
      if (value != "scalar" && value != "batched" && value != "trace")
        usage_error("--only = " + value + " is outside the valid range {scalar, batched, trace}");
      only = value;
      montecarlo = false;
    }
    else usage_error("unknown flag " + flag);
  }
  try {
    const ModelWeights weights = initialize(c, Scheme::dslm_simple);
    const LayerWeights& w = weights.layers.front();
    const Moments<double> x = weights.input;
    const GradMoments<double> top{1, 0.2};

    // The configurations: lane i of `lanes` has its own width, length,
    // dropout, weight scale and input correlation. The scalar path updates
    // them one at a time (T = double), the batched path in chunks of
    // batch_chunk lanes (fixed-size arrays), as trace_batch does. Both cycle
    // through all of them, so neither reuses a memo entry (core/memo.hpp)
    // from the previous call: each update pays what a layer of a trace pays.
    if (lanes % batch_chunk != 0)
      usage_error("--lanes = " + std::to_string(lanes) + " is outside the valid range: a multiple of " +
                  std::to_string(batch_chunk));
    const auto scalar_updates = layer_updates<double>(c, w, x, top, lanes);
    const auto batched_updates = layer_updates<BatchChunk>(c, w, x, top, lanes);
    volatile double sink = 0;
    const auto runs = [&only](const char* part) { return only == "all" || only == part; };
    const double skipped = -1;
    const double scalar_s = !runs("scalar") ? skipped : seconds_per_call(
        [&] {
          for (const auto& u : scalar_updates) sink = sink + u();
        },
        repeats, calls);
    const double batched_s = !runs("batched") ? skipped : seconds_per_call(
        [&] {
          for (const auto& u : batched_updates) sink = sink + u()(0);
        },
        repeats, calls);

    // The whole-stack trace.
    const double trace_s = !runs("trace") ? skipped : seconds_per_call(
        [&] { sink = sink + trace(c, weights).output.forward.var; }, repeats, calls);

    // The Monte Carlo pass it replaces.
    double mc_s = -1;
    if (montecarlo) {
      montecarlo::SimulationSetup setup;
      setup.trials = 2;
      const auto t0 = Clock::now();
      const auto sim = montecarlo::simulate_model(c, weights, top, setup);
      mc_s = std::chrono::duration<double>(Clock::now() - t0).count() / 2;
      sink = sink + sim.forward.back().var.value;
    }

    const auto rate = [lanes](double s) { return s > 0 ? static_cast<double>(lanes) / s : -1.0; };
    const double scalar_rate = rate(scalar_s), batched_rate = rate(batched_s);
    const double speedup = scalar_rate > 0 && batched_rate > 0 ? batched_rate / scalar_rate : -1.0;
    const double trace_us = trace_s > 0 ? trace_s * 1e6 : -1.0;
    if (format == "json") {
      std::printf("{\"machine\": \"%s\", \"simd\": \"%s\", \"threads\": 1, "
                  "\"model\": {\"arch\": \"pre-ln\", \"activation\": \"relu\", \"scheme\": \"dslm-simple\", "
                  "\"layers\": %zu, \"d\": %zu, \"heads\": %zu, \"seq_len\": %zu, \"dropout\": %g}, "
                  "\"batch_lanes\": %zu, \"scalar_layer_updates_per_s\": %.6g, "
                  "\"batched_layer_updates_per_s\": %.6g, \"batched_speedup\": %.4g, "
                  "\"stack192_trace_us\": %.6g, \"montecarlo192_ms\": %.6g}\n",
                  cpu_model().c_str(), simd_level(), c.layers, c.d, c.heads, c.seq_len, c.dropout, lanes,
                  scalar_rate, batched_rate, speedup, trace_us, montecarlo ? mc_s * 1e3 : -1.0);
    } else {
      std::printf("machine: %s, SIMD %s, one thread\n", cpu_model().c_str(), simd_level());
      std::printf("model: Pre-LN, ReLU, dslm-simple, %zu layers, d = %zu, H = %zu, L = %zu, p = %g\n", c.layers,
                  c.d, c.heads, c.seq_len, c.dropout);
      const double per_lane = 1e9 / static_cast<double>(lanes);
      if (scalar_s > 0)
        std::printf("scalar layer updates      %12.4g /s  (%.0f ns each, %zu configurations)\n", scalar_rate,
                    scalar_s * per_lane, lanes);
      if (batched_s > 0)
        std::printf("batched layer updates     %12.4g /s  (%zu lanes, %.1f ns per lane, %.2fx scalar)\n",
                    batched_rate, lanes, batched_s * per_lane, speedup);
      if (trace_s > 0) std::printf("%zu-layer trace            %12.4g us\n", c.layers, trace_us);
      if (montecarlo) std::printf("%zu-layer Monte Carlo pass %12.4g ms (forward + backward, one trial)\n", c.layers, mc_s * 1e3);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "benchmark: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
