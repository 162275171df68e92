// cli/sweep_command.hpp -- `sigprop sweep`: a grid of model configurations,
// one summary line each (models/sweep.hpp), evaluated through the batched trace.
#pragma once

#include <cmath>
#include <cstdio>
#include <exception>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "args.hpp"
#include "model_command.hpp"
#include "output.hpp"
#include "run.hpp"
#include "sigprop/models/sweep.hpp"

namespace sigprop::cli {

inline void sweep_usage(std::ostream& out) {
  out << "usage: sigprop sweep [grid flags] [--bounds LO,HI] [--format csv|json]\n\n"
         "Evaluates every combination of the listed values and prints, per configuration,\n"
         "the final forward variance and length correlation, the smallest and largest\n"
         "forward variance over the layer outputs, the smallest and largest gradient\n"
         "variance over the layers relative to the one at the model output and their\n"
         "ratio, whether all of them stay within the bounds, and whether any layer is\n"
         "outside the validated domain of the closed forms; then Admin's output-change\n"
         "estimate (the sum of beta_ii^2 over the sublayers) and the sensitivity (median\n"
         "over the sublayers of N beta_ii^2 / (1 - beta_ii^2)). A configuration whose\n"
         "trace overflows (a variance beyond double's range: the design diverges) gets\n"
         "overflow = 1 and empty figures (json: true and null) instead of stopping the sweep.\n\n"
         "Each grid flag takes a comma-separated list, and numeric ones also a range\n"
         "START:STOP:STEP (inclusive), e.g. --layers 24:192:24:\n"
         "  --scheme NAME,... (dslm; with --hf-config the model's own): " << scheme_names(",") << "\n"
         "  --arch pre-ln,post-ln,no-ln,llama,gpt2 (each scheme's own, as in sigprop table)\n"
         "  --layers N,... (48)  --d D,... (512)  --dropout P,... (0.1)\n"
         "  --beta2-k K,... (2)  --beta2-alpha A,... (1)   residual scaling beta^2 = K/N^A\n"
         "                       (dslm schemes always; other schemes only when given)\n"
         "fixed for the whole grid:\n"
         "  --hf-config FILE   every point starts from a Hugging Face config.json's model;\n"
         "         the grid flags given replace its values (docs/python.md)\n"
         "  --head-dim K (64, heads = d/K)  --ffn-mult M (4)\n"
         "  --activation relu|gelu|gelu_tanh|silu (relu)  --seq L (256)  --bounds LO,HI (0.5,2)\n"
         "  --rotary BASE (0: none; llama: 10000)  --logit-scale inv-sqrt-dk|inv-dk (inv-sqrt-dk)\n"
         "         (as in sigprop table)\n"
         "  --bias-var V (every bias; 0)  --ln-gain G (1)  --ln-bias B (0)   as in sigprop table\n"
         "  --attn-dropout P (each point's --dropout)  --ffn-dropout P (0)  --initializer-range R\n"
         "         (0.02): as in sigprop table\n"
         "  --jobs N (1)   threads, each tracing every N-th point (the same rows)\n";
}

namespace detail {

// "a,b,c" or "start:stop:step" (inclusive) as numbers.
inline std::vector<double> number_list(const Args& a, const std::string& flag, const std::string& fallback) {
  const std::string text = a.text(flag, fallback);
  std::vector<double> out;
  const auto parse = [&](const std::string& s) {
    double v = 0;
    if (const char* problem = number_problem(s, v))
      throw usage_error("--" + flag + " = '" + text + "': '" + s + "' " + problem);
    return v;
  };
  if (text.find(':') != std::string::npos) {
    std::vector<double> parts;
    for (const std::string& s : split(text, ':')) parts.push_back(parse(s));
    if (parts.size() != 3 || !(parts[2] > 0) || parts[1] < parts[0])
      throw usage_error("--" + flag + " = '" + text + "' is not a range START:STOP:STEP with STEP > 0, STOP >= START");
    const double count = std::floor((parts[1] - parts[0]) / parts[2] * (1 + 1e-12)) + 1;
    if (count > 100000) throw usage_error("--" + flag + " = '" + text + "' has more than 100000 values");
    for (double k = 0; k < count; ++k) out.push_back(parts[0] + k * parts[2]);
    return out;
  }
  for (const std::string& s : split(text, ',')) out.push_back(parse(s));
  return out;
}

inline std::vector<std::size_t> count_list(const Args& a, const std::string& flag, const std::string& fallback) {
  std::vector<std::size_t> out;
  for (double v : number_list(a, flag, fallback)) {
    out.push_back(static_cast<std::size_t>(require_count(flag, v, exact(v))));
  }
  return out;
}

inline std::vector<std::string> word_list(const Args& a, const std::string& flag, const std::string& fallback,
                                          const std::vector<std::string>& options) {
  std::vector<std::string> out;
  for (const std::string& s : split(a.text(flag, fallback), ',')) {
    bool known = false;
    for (const auto& o : options) known = known || o == s;
    if (!known) {
      std::string all;
      for (const auto& o : options) all += (all.empty() ? "" : "|") + o;
      throw usage_error("--" + flag + " = '" + a.text(flag, fallback) + "': '" + s + "' is not one of " + all);
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace detail

/// The flags of `sigprop sweep`.
inline const std::set<std::string>& sweep_flags() {
  static const std::set<std::string> flags = {
      "arch",     "scheme",    "layers",   "d",       "dropout",      "beta2-k",     "beta2-alpha",
      "head-dim", "ffn-mult",  "activation", "seq",   "bounds",       "format",      "rotary",
      "hf-config", "bias-var", "ln-gain",  "ln-bias", "attn-dropout", "ffn-dropout", "initializer-range",
      "logit-scale", "jobs"};
  return flags;
}

/// A parsed grid: its points in the order of the output, the bounds, the
/// format and the number of threads.
struct SweepGrid {
  std::vector<SweepPoint> points;
  SweepBounds bounds;
  std::string format;
  std::size_t jobs = 1;
};

inline SweepGrid parse_sweep(const Args& a) {
  if (!a.positional().empty()) throw usage_error("sweep: unexpected argument '" + a.positional()[0] + "'");
  // --hf-config FILE: every point starts from the file's model
  // (io/hf_config.hpp); the grid flags given replace its values.
  std::optional<io::HfConfig> hf;
  if (a.has("hf-config"))
    hf = io::read_hf_config(a.text("hf-config", ""), a.has("seq") ? std::optional<std::size_t>(static_cast<std::size_t>(
                                                                        a.count("seq", 256)))
                                                                  : std::nullopt);
  std::vector<std::string> scheme_options;
  for (const SchemeInfo& i : sigprop::schemes()) scheme_options.push_back(i.name);
  // The default scheme: dslm, or the Hugging Face model's own initialization.
  const auto scheme_names_given = detail::word_list(a, "scheme", hf ? to_string(hf->scheme) : "dslm", scheme_options);
  // "" stands for each scheme's own architecture.
  const auto archs = a.has("arch") ? detail::word_list(a, "arch", "", {"pre-ln", "post-ln", "no-ln", "llama", "gpt2"})
                                   : std::vector<std::string>{""};
  const auto layers = detail::count_list(a, "layers", hf ? std::to_string(hf->config.layers) : "48");
  for (std::size_t n : layers) require_layers(n);
  const auto widths = detail::count_list(a, "d", hf ? std::to_string(hf->config.d) : "512");
  const auto dropouts = detail::number_list(a, "dropout", hf ? exact(hf->config.dropout) : "0.1");
  const auto ks = detail::number_list(a, "beta2-k", "2");
  const auto alphas = detail::number_list(a, "beta2-alpha", "1");
  const bool scaling_given = a.has("beta2-k") || a.has("beta2-alpha");
  const double head_dim = a.count("head-dim", hf ? static_cast<double>(hf->config.head_width()) : 64);
  const double ffn_mult = a.count("ffn-mult", 4);
  const double seq = a.count("seq", hf ? static_cast<double>(hf->config.seq_len) : 256);
  const double rotary = hf && !a.has("rotary") ? hf->config.rotary_base : parse_rotary(a, head_dim);
  const LogitScale logit_scale = parse_logit_scale(a);
  if (seq < 2) throw usage_error("--seq = 1 is outside the valid range: a whole number >= 2");
  const std::string activation = a.choice("activation", activation_names(), "relu");
  const auto bounds_list = detail::number_list(a, "bounds", "0.5,2");
  if (bounds_list.size() != 2 || !(bounds_list[0] <= bounds_list[1]))
    throw usage_error("--bounds = '" + a.text("bounds", "") + "' is not LO,HI with LO <= HI");
  const SweepBounds bounds{bounds_list[0], bounds_list[1]};
  const std::string format = a.choice("format", {"csv", "json"}, "csv");
  for (double p : dropouts) require_probability("sigprop", "--dropout", p);
  const double ffn_dropout = a.number("ffn-dropout", 0), initializer_range =
      a.number("initializer-range", hf ? hf->initializer_range : 0.02);
  require_probability("sigprop", "--ffn-dropout", ffn_dropout);
  require_positive("sigprop", "--initializer-range", initializer_range);
  if (a.has("attn-dropout")) require_probability("sigprop", "--attn-dropout", a.number("attn-dropout", 0));
  for (double k : ks) require_positive("sigprop", "--beta2-k", k);
  WeightOverrides overrides;
  if (a.has("bias-var")) overrides.bias = a.number("bias-var", 0);
  if (overrides.bias) require_variance("sigprop", "--bias-var", *overrides.bias);
  const double ln_gain = a.number("ln-gain", 1), ln_bias = a.number("ln-bias", 0);
  require_positive("sigprop", "--ln-gain", ln_gain);
  require_finite("sigprop", "--ln-bias", ln_bias);

  std::vector<SweepPoint> points;
  for (const auto& arch : archs)
    for (const auto& scheme : scheme_names_given)
      for (std::size_t n : layers)
        for (std::size_t d : widths)
          for (double p : dropouts)
            for (double k : ks)
              for (double alpha : alphas) {
                SweepPoint pt;
                ModelConfig& c = pt.config;
                pt.scheme = scheme_from_string(scheme);
                c.activation = activation_of(activation);
                if (hf) {
                  c = hf->config;
                  pt.input = hf->input;
                  if (a.has("ffn-mult")) c.ffn_hidden = 0;
                }
                c.layers = n;
                c.d = d;
                if (d < 4 || d % static_cast<std::size_t>(head_dim) != 0)
                  throw usage_error("--d = " + std::to_string(d) + " is outside the valid range: a multiple of --head-dim = " +
                                    exact(head_dim) + ", at least 4");
                c.heads = d / static_cast<std::size_t>(head_dim);
                c.ffn_mult = static_cast<std::size_t>(ffn_mult);
                c.seq_len = static_cast<std::size_t>(seq);
                c.rotary_base = rotary;
                c.logit_scale = logit_scale;
                if (hf) {
                  // The file's architecture unless --arch is given.
                  if (!arch.empty()) {
                    c = with_architecture(c, arch);
                    pt.input = with_architecture(pt.input, arch);
                  }
                  if (a.has("activation")) c.activation = activation_of(activation);
                  c.dropout = p;
                } else {
                  const std::string name = arch.empty() ? native_architecture(pt.scheme) : arch;
                  c = with_architecture(c, name);
                  pt.input = with_architecture(pt.input, name);
                  // The presets set the activation, dropout, rotary embeddings and
                  // embedding tables; explicit flags win.
                  if (a.has("activation") || (name != "llama" && name != "gpt2")) c.activation = activation_of(activation);
                  if (a.has("dropout") || name != "llama") c.dropout = p;
                }
                if (a.has("rotary")) c.rotary_base = rotary;
                if (a.has("attn-dropout")) c.attention_dropout = a.number("attn-dropout", 0);
                c.ffn_dropout = ffn_dropout;
                c.initializer_range = initializer_range;
                pt.scaling = {k, alpha, scaling_given};
                pt.overrides = overrides;
                c.ln_gain = ln_gain;
                if (ln_bias != 0 && c.norm == Norm::rmsnorm)
                  throw usage_error("--ln-bias applies to LayerNorm only (RMSNorm has no bias)");
                c.ln_bias = ln_bias;
                require_beta2(pt.scaling, pt.scheme, n);
                points.push_back(pt);
              }
  if (points.size() > 1000000) throw usage_error("the grid has " + std::to_string(points.size()) + " points (at most 1000000)");
  const auto jobs = static_cast<std::size_t>(a.count("jobs", 1));
  if (jobs > 256)
    throw usage_error("--jobs = " + a.text("jobs", "") + " is outside the valid range: a whole number in [1, 256]");
  return {std::move(points), bounds, format, jobs};
}

// Thread j takes the points j, j + jobs, ... (so each gets a share of every
// structure), each batched as sweep() batches them. A point's summary does
// not depend on the others, so the rows are those of one thread; an invalid
// point is reported by the serial sweep, which names it by its index in
// `points`. (Declared in run.hpp; this header is compiled once, in run.cpp.)
std::vector<SweepSummary> sweep_on_threads(const std::vector<SweepPoint>& points, const SweepBounds& bounds,
                                                  std::size_t jobs) {
  jobs = std::min(jobs, points.size());
  if (jobs <= 1) return sweep(points, bounds);
  std::vector<std::vector<SweepSummary>> shares(jobs);
  std::vector<std::exception_ptr> errors(jobs);
  std::vector<std::thread> threads;
  for (std::size_t j = 0; j < jobs; ++j)
    threads.emplace_back([&, j] {
      try {
        std::vector<SweepPoint> mine;
        for (std::size_t i = j; i < points.size(); i += jobs) mine.push_back(points[i]);
        shares[j] = sweep(mine, bounds);
      } catch (...) {
        errors[j] = std::current_exception();
      }
    });
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) return sweep(points, bounds);  // throws, naming the point
  std::vector<SweepSummary> out(points.size());
  for (std::size_t i = 0; i < points.size(); ++i) out[i] = shares[i % jobs][i / jobs];
  return out;
}

/// Every point of `grid` with its summary, as the rows of the output.
inline std::vector<SweepRow> sweep_rows(const SweepGrid& grid) {
  const std::vector<SweepSummary> results = sweep_on_threads(grid.points, grid.bounds, grid.jobs);
  std::vector<SweepRow> rows;
  for (std::size_t i = 0; i < grid.points.size(); ++i) {
    const SweepPoint& pt = grid.points[i];
    const bool scaled = pt.scaling.enabled || pt.scheme == Scheme::dslm || pt.scheme == Scheme::dslm_simple;
    rows.push_back({architecture_name(pt.config), to_string(pt.scheme), pt.config.layers, pt.config.d,
                    pt.config.heads, pt.config.dropout, scaled ? pt.scaling.k : NAN, scaled ? pt.scaling.alpha : NAN,
                    results[i]});
  }
  return rows;
}

inline int sweep_command(const std::vector<std::string>& words, std::ostream& out, std::ostream&) {
  const SweepGrid grid = parse_sweep(Args(words, sweep_flags()));
  const std::vector<SweepRow> rows = sweep_rows(grid);

  const char* columns[] = {"arch", "scheme", "layers", "d", "heads", "dropout", "beta2_k", "beta2_alpha",
                           "final_var", "final_corr_len", "var_min", "var_max", "grad_min", "grad_max",
                           "grad_ratio", "within_bounds", "outside_domain", "output_change", "sensitivity", "overflow"};
  const bool csv = grid.format == "csv";
  RecordWriter records(out, csv, {std::begin(columns), std::end(columns)});
  for (const SweepRow& row : rows) {
    const SweepSummary& s = row.summary;
    const bool scaled = !std::isnan(row.beta2_k);
    const auto flag = [csv](bool b) { return std::string(csv ? (b ? "1" : "0") : (b ? "true" : "false")); };
    const auto text = [csv](const std::string& w) { return csv ? w : quoted(w); };
    // An overflowed trace (the design diverges) has no figures: empty in csv, null in json.
    const std::string missing = csv ? "" : "null";
    const auto figure = [&](double x) { return s.overflow ? missing : exact(x); };
    const std::vector<std::string> v = {
        text(row.arch), text(row.scheme),
        std::to_string(row.layers), std::to_string(row.d), std::to_string(row.heads),
        exact(row.dropout), scaled ? exact(row.beta2_k) : (csv ? "" : "null"),
        scaled ? exact(row.beta2_alpha) : (csv ? "" : "null"), figure(s.final_var), figure(s.final_corr_len),
        figure(s.var_min), figure(s.var_max), figure(s.grad_min), figure(s.grad_max), figure(s.grad_ratio),
        flag(s.within_bounds), flag(s.outside_domain), figure(s.output_change),
        s.overflow || !(csv || std::isfinite(s.sensitivity)) ? missing : exact(s.sensitivity),  // +inf: a sublayer without skip
        flag(s.overflow)};
    records.row(v);
  }
  records.finish();
  return 0;
}

}  // namespace sigprop::cli
