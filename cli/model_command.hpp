// cli/model_command.hpp -- `sigprop table` (per-layer trace of a whole model)
// and `sigprop init` (per-layer, per-weight standard deviations of a scheme).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "args.hpp"
#include "domain_warning.hpp"
#include "output.hpp"
#include "sigprop/io/hf_config.hpp"
#include "sigprop/models/measures.hpp"
#include "sigprop/models/positions.hpp"
#include "sigprop/models/schemes.hpp"

namespace sigprop::cli {

/// A model shape, its initialization and the gradient at the top, from flags.
struct ModelSpec {
  ModelConfig config;
  Scheme scheme = Scheme::xavier;
  InputSpec input;
  ResidualScaling scaling;
  WeightOverrides overrides;
  GradMoments<double> grad_top{1, 0};
  std::string format = "text";
  std::string hf_model_type;  ///< the model_type of --hf-config FILE, if given
};

/// The deepest model a command traces (a trace holds every layer's moments:
/// about 40 MB at this depth; far deeper ones ran out of memory and aborted).
inline constexpr std::size_t max_layers = 100000;

/// --layers: at most max_layers (a trace holds every layer's rows).
inline std::size_t require_layers(std::size_t n) {
  if (n > max_layers)
    throw usage_error("--layers = " + std::to_string(n) + " is outside the valid range: a whole number in [1, " +
                      std::to_string(max_layers) + "]");
  return n;
}

/// The names --activation takes.
inline std::vector<std::string> activation_names() { return {"relu", "gelu", "gelu_tanh", "silu"}; }

/// The activation --activation names (one of activation_names(), checked by Args::choice).
inline FfnActivation activation_of(const std::string& name) {
  return name == "relu" ? FfnActivation::relu : name == "gelu" ? FfnActivation::gelu
                      : name == "gelu_tanh" ? FfnActivation::gelu_tanh : FfnActivation::silu;
}


/// --beta2-k K and --beta2-alpha A: beta^2 = K/N^A in (0, 1] wherever the
/// residual scaling applies (given explicitly, or the dslm schemes).
inline void require_beta2(const ResidualScaling& scaling, Scheme scheme, std::size_t layers) {
  if (!scaling.enabled && scheme != Scheme::dslm && scheme != Scheme::dslm_simple) return;
  const double beta2 = scaling.k / std::pow(static_cast<double>(layers), scaling.alpha);
  if (!(beta2 > 0 && beta2 <= 1))
    throw usage_error("--beta2-k = " + exact(scaling.k) + " and --beta2-alpha = " + exact(scaling.alpha) +
                      " give beta^2 = K/N^A = " + exact(beta2) + " at --layers = " + std::to_string(layers) +
                      ", outside the valid range (0, 1]");
}

inline const std::set<std::string>& model_flags() {
  static const std::set<std::string> flags = {
      "arch", "scheme", "layers", "d", "heads", "ffn-mult", "activation", "seq", "dropout",
      "attn-dropout", "ffn-dropout", "initializer-range",
      "vocab", "tables", "input-var", "input-corr-len", "beta2-k", "beta2-alpha", "grad-var",
      "grad-corr-len", "format", "final-ln", "embedding-var", "q-var", "k-var", "v-var",
      "o-var", "ffn1-var", "ffn2-var", "rotary", "bias-var", "q-bias-var", "k-bias-var", "v-bias-var",
      "o-bias-var", "ffn1-bias-var", "ffn2-bias-var", "ln-gain", "ln-bias", "hf-config", "logit-scale"};
  return flags;
}

inline void model_flags_usage(std::ostream& out) {
  out << "model (defaults: a BERT-base-like Pre-LN model):\n"
         "  --hf-config FILE   a Hugging Face config.json (bert, roberta, gpt2, llama, mistral,\n"
         "         qwen2) as the defaults; the flags below replace its values (docs/python.md)\n"
         "  --scheme NAME (xavier; with --hf-config the model's own: bert, gpt2 or llama\n"
         "         at its initializer_range): " << scheme_names("|") << "\n"
         "  --arch pre-ln|post-ln|no-ln|llama|gpt2 (the scheme's own: pre-ln for xavier, bert, dslm,\n"
         "         dslm-simple, layerscale and the spike schemes; post-ln for admin,\n"
         "         admin-code, deepnet, ds-init; no-ln for t-fixup, rezero, skipinit;\n"
         "         gpt2 and llama for their schemes);\n"
         "         llama: pre-RMSNorm, causal, rotary base 10000, SwiGLU of width 8d/3, no\n"
         "         dropout, final norm, token table only; gpt2: pre-LN, causal, tanh GeLU,\n"
         "         final LayerNorm, token and position tables (docs/decoders.md)\n"
         "  --final-ln (Pre-LN: LayerNorm after the last layer)\n"
         "  --layers N (12)  --d D (768)  --heads H (12)  --ffn-mult M (4)\n"
         "  --activation relu|gelu|gelu_tanh|silu (relu; gelu_tanh: GPT-2's tanh form)\n"
         "  --seq L (256)  --dropout P (0.1)\n"
         "  --attn-dropout P (--dropout) on the attention probabilities (GPT-2's attn_pdrop)\n"
         "  --ffn-dropout P (0) after the FFN activation, or on the gated product (PyTorch's\n"
         "         nn.TransformerEncoderLayer: P = --dropout; BERT, GPT-2: 0)\n"
         "  --initializer-range R (0.02) the std of the bert, gpt2 and llama schemes\n"
         "  --rotary BASE (0: none; llama: 10000) rotary position embeddings on every head's\n"
         "         queries and keys, pair j turned by i BASE^(-2j/d_k) at position i\n"
         "  --logit-scale inv-sqrt-dk|inv-dk (inv-sqrt-dk) attention logits Q K^T/sqrt(d_k),\n"
         "         or Q K^T/d_k (muP)\n"
         "input (an embedding, then dropout; or measured moments):\n"
         "  --vocab V (32000)  --tables token,position,segment (all three; gpt2:\n"
         "         token,position; llama: token)\n"
         "  --input-var V --input-corr-len R   measured model input (replaces the embedding)\n"
         "residual scaling beta^2 = K/N^A, lambda^2 = 1 - beta^2 (dslm schemes; given\n"
         "explicitly, applied to any scheme):  --beta2-k K (2)  --beta2-alpha A (1)\n"
         "per-entry weight variances replacing the scheme's (all layers):\n"
         "  --embedding-var --q-var --k-var --v-var --o-var --ffn1-var --ffn2-var\n"
         "per-entry bias variances (drawn once, shared by all positions; 0 by default,\n"
         "torch-default: W1, W2 as their weights):  --bias-var (all)  --q-bias-var\n"
         "  --k-bias-var --v-bias-var --o-bias-var --ffn1-bias-var --ffn2-bias-var\n"
         "norms at initialization:  --ln-gain G (1; LayerNorm and RMSNorm)  --ln-bias B (0; LayerNorm)\n"
         "gradient at the model output:  --grad-var G (1)  --grad-corr-len R (0)\n";
}

inline ModelSpec parse_model(const Args& a, const std::vector<std::string>& formats) {
  constexpr const char* fn = "sigprop";
  ModelSpec s;
  ModelConfig& c = s.config;
  std::vector<std::string> scheme_list;
  for (const SchemeInfo& i : schemes()) scheme_list.push_back(i.name);
  s.scheme = scheme_from_string(a.choice("scheme", scheme_list, "xavier"));
  const std::string arch =
      a.choice("arch", {"pre-ln", "post-ln", "no-ln", "llama", "gpt2"}, native_architecture(s.scheme));
  // --hf-config FILE: the file's model (io/hf_config.hpp) replaces the
  // defaults; flags given with it replace the file's values.
  std::optional<io::HfConfig> hf;
  if (a.has("hf-config")) {
    hf = io::read_hf_config(a.text("hf-config", ""), a.has("seq") ? std::optional<std::size_t>(static_cast<std::size_t>(
                                                                        a.count("seq", 256)))
                                                                  : std::nullopt);
    c = hf->config;
    s.input = hf->input;
    s.hf_model_type = hf->model_type;
    if (!a.has("scheme")) s.scheme = hf->scheme;  // the model's own initialization
  }
  c.layers = require_layers(static_cast<std::size_t>(a.count("layers", static_cast<double>(c.layers))));
  c.d = static_cast<std::size_t>(a.count("d", static_cast<double>(c.d)));
  c.heads = static_cast<std::size_t>(a.count("heads", static_cast<double>(c.heads)));
  c.ffn_mult = static_cast<std::size_t>(a.count("ffn-mult", static_cast<double>(c.ffn_mult)));
  c.seq_len = static_cast<std::size_t>(a.count("seq", static_cast<double>(c.seq_len)));
  // The decoder presets set the activation, dropout, FFN, rotary embeddings
  // and embedding tables; explicit flags win.
  if (!hf || a.has("arch")) {
    c = with_architecture(c, arch);
    s.input = with_architecture(s.input, arch);
  }
  if (a.has("ffn-mult")) c.ffn_hidden = 0;
  if (a.has("activation")) {
    const std::string act = a.choice("activation", activation_names(), "relu");
    c.activation = activation_of(act);
  }
  c.dropout = a.number("dropout", c.dropout);
  require_probability(fn, "--dropout", c.dropout);
  if (a.has("attn-dropout")) c.attention_dropout = a.number("attn-dropout", 0);
  c.ffn_dropout = a.number("ffn-dropout", c.ffn_dropout);
  c.initializer_range = a.number("initializer-range", c.initializer_range);
  require_probability(fn, "--attn-dropout", c.attention_p());
  require_probability(fn, "--ffn-dropout", c.ffn_dropout);
  require_positive(fn, "--initializer-range", c.initializer_range);
  if (c.d < 4) throw usage_error("--d = " + std::to_string(c.d) + " is outside the valid range: a whole number >= 4");
  if (c.seq_len < 2) throw usage_error("--seq = 1 is outside the valid range: a whole number >= 2");
  if (c.d % c.heads != 0)
    throw usage_error("--heads = " + std::to_string(c.heads) + " is outside the valid range: a divisor of --d = " +
                      std::to_string(c.d));
  if (a.has("rotary")) c.rotary_base = parse_rotary(a, static_cast<double>(c.d / c.heads));
  c.logit_scale = parse_logit_scale(a);
  c.final_layernorm = c.final_layernorm || a.has("final-ln");
  c.ln_gain = a.number("ln-gain", 1);
  c.ln_bias = a.number("ln-bias", 0);
  require_positive(fn, "--ln-gain", c.ln_gain);
  require_finite(fn, "--ln-bias", c.ln_bias);
  if (c.ln_bias != 0 && c.norm == Norm::rmsnorm)
    throw usage_error("--ln-bias applies to LayerNorm only (RMSNorm has no bias)");
  if (c.final_layernorm && c.arch != Arch::pre_ln)
    throw usage_error("--final-ln applies to --arch pre-ln only");

  s.input.vocab = a.count("vocab", s.input.vocab);
  if (a.has("tables")) {
    s.input.token = s.input.position = s.input.segment = false;
    for (const std::string& t : split(a.text("tables", ""), ',')) {
      if (t == "token") s.input.token = true;
      else if (t == "position") s.input.position = true;
      else if (t == "segment") s.input.segment = true;
      else throw usage_error("--tables = '" + a.text("tables", "") + "': '" + t +
                             "' is not one of token, position, segment");
    }
  }
  if (a.has("input-var") != a.has("input-corr-len"))
    throw usage_error("--input-var and --input-corr-len go together (measured input moments)");
  if (a.has("input-var")) {
    const Moments<double> m{0, a.number("input-var", 1), a.number("input-corr-len", 0), 0};
    require_positive(fn, "--input-var", m.var);
    require_correlation(fn, "--input-corr-len", m.corr_len);
    s.input.measured = m;
  }
  s.scaling.k = a.number("beta2-k", 2);
  s.scaling.alpha = a.number("beta2-alpha", 1);
  s.scaling.enabled = a.has("beta2-k") || a.has("beta2-alpha");
  require_positive(fn, "--beta2-k", s.scaling.k);
  require_beta2(s.scaling, s.scheme, c.layers);
  const auto override_of = [&](const char* flag, std::optional<double>& slot) {
    if (!a.has(flag)) return;
    const double v = a.number(flag, 0);
    require_variance(fn, (std::string("--") + flag).c_str(), v);
    slot = v;
  };
  override_of("embedding-var", s.overrides.embedding);
  override_of("q-var", s.overrides.q);
  override_of("k-var", s.overrides.k);
  override_of("v-var", s.overrides.v);
  override_of("o-var", s.overrides.o);
  override_of("ffn1-var", s.overrides.ffn1);
  override_of("ffn2-var", s.overrides.ffn2);
  override_of("bias-var", s.overrides.bias);
  override_of("q-bias-var", s.overrides.q_bias);
  override_of("k-bias-var", s.overrides.k_bias);
  override_of("v-bias-var", s.overrides.v_bias);
  override_of("o-bias-var", s.overrides.o_bias);
  override_of("ffn1-bias-var", s.overrides.ffn1_bias);
  override_of("ffn2-bias-var", s.overrides.ffn2_bias);
  s.grad_top = {a.number("grad-var", 1), a.number("grad-corr-len", 0)};
  require_positive(fn, "--grad-var", s.grad_top.var);
  require_correlation(fn, "--grad-corr-len", s.grad_top.corr_len);
  s.format = a.choice("format", formats, "text");
  return s;
}

inline ModelWeights weights_of(const ModelSpec& s) {
  return initialize(s.config, s.scheme, s.input, s.scaling, s.overrides);
}

inline std::string describe(const ModelSpec& s) {
  const ModelConfig& c = s.config;
  std::ostringstream o;
  o << architecture_name(c) << ", " << to_string(s.scheme) << ", N = " << c.layers
    << ", d = " << c.d << ", H = " << c.heads << ", FFN width " << c.hidden_width() << ", "
    << to_string(c.activation) << ", L = " << c.seq_len
    << ", p = " << c.dropout;
  if (c.attention_p() != c.dropout) o << ", attention p = " << c.attention_p();
  if (c.ffn_dropout != 0) o << ", FFN hidden p = " << c.ffn_dropout;
  if (c.initializer_range != 0.02) o << ", initializer range " << c.initializer_range;
  if (c.rotary_base != 0) o << ", rotary base " << c.rotary_base;
  if (c.ln_gain != 1 || c.ln_bias != 0) o << ", norm gain " << c.ln_gain << " bias " << c.ln_bias;
  if (c.logit_scale != LogitScale::inv_sqrt_dk) o << ", logits / d_k";
  if (!s.hf_model_type.empty()) o << " (" << s.hf_model_type << " config)";
  return o.str();
}

inline void table_usage(std::ostream& out) {
  out << "usage: sigprop table [model flags] [--format text|csv|json]\n\n"
         "Per-layer moments of the residual stream at initialization, n = 0..N (n = 0 is\n"
         "the model input, n the output of layer n): variance, length correlation, and\n"
         "the gradient's variance and length correlation (csv/json add the mean, the\n"
         "hidden correlation, the values after each layer's attention sublayer, and\n"
         "each sublayer's branch variance Var[f] and residual dependency beta_ii^2 =\n"
         "Var[beta f] / Var[lambda x + beta f]), the expected squared Frobenius norms\n"
         "of the gradients of V, O, W1, W2 over one sequence, and for Pre-LN the\n"
         "Spike No More bounds on the attention and FFN Jacobian norms (Eq. 20, 15;\n"
         "docs/schemes.md). The text form ends with Admin's\n"
         "output-change estimate sum_i beta_ii^2 and the sensitivity (median over the\n"
         "sublayers of N beta_ii^2 / (1 - beta_ii^2)). For causal models (llama, gpt2;\n"
         "up to --seq 4096) the gradient columns are the average over the positions of\n"
         "each position's gradient (docs/decoders.md).\n\n"
         "  --positions LIST (causal models: llama, gpt2) instead, each listed position's\n"
         "         forward moments and gradient (up to --seq 4096), one row per layer and\n"
         "         position: whole numbers in [1, --seq] or 'last', comma separated\n"
         "         (e.g. 1,16,last)\n\n";
  model_flags_usage(out);
}

/// --positions LIST for a causal model: whole numbers in [1, --seq] or
/// `last`, comma separated; returned sorted, each once.
inline std::vector<std::size_t> parse_positions(const Args& a, const ModelConfig& c) {
  const std::string text = a.text("positions", "");
  if (!c.causal)
    throw usage_error("--positions = '" + text +
                      "' applies to causal models only (--arch llama|gpt2): without the mask every position has "
                      "the sequence average");
  std::vector<std::size_t> positions;
  for (const std::string& piece : split(text, ',')) {
    double v = static_cast<double>(c.seq_len);
    if (piece != "last") {
      const char* problem = number_problem(piece, v);
      if (!problem && !(v >= 1 && v <= static_cast<double>(c.seq_len) && std::floor(v) == v))
        problem = "is outside the valid range";
      if (problem)
        throw usage_error("--positions = '" + text + "': '" + piece + "' " + problem +
                          ": a whole number in [1, --seq = " + std::to_string(c.seq_len) + "] or 'last'");
    }
    positions.push_back(static_cast<std::size_t>(v));
  }
  std::sort(positions.begin(), positions.end());
  positions.erase(std::unique(positions.begin(), positions.end()), positions.end());
  return positions;
}

/// `sigprop table --positions`: each chosen position's forward moments
/// (trace_positions) and, for Pre-LN models up to max_pair_positions tokens,
/// its gradient (trace_position_gradients; docs/decoders.md), one row per
/// layer and position.
inline int positions_table(const ModelSpec& spec, const ModelWeights& weights, std::vector<std::size_t> positions,
                           std::ostream& out) {
  const bool gradients = spec.config.arch == Arch::pre_ln && spec.config.seq_len <= max_pair_positions;
  const PositionGradientTrace g =
      gradients ? trace_position_gradients(spec.config, weights, positions, spec.grad_top) : PositionGradientTrace{};
  const PositionTrace p = trace_positions(spec.config, weights, std::move(positions));
  const char* columns[] = {"layer",        "position", "var",           "corr_len",   "mean",
                           "corr_dim",     "mid_var",  "mid_corr_len",  "grad_var",   "grad_corr_len",
                           "mid_grad_var"};
  const std::string none = spec.format == "csv" ? "" : "null";
  const auto values = [&](std::size_t n, std::size_t j) {
    const Moments<double>& m = p.rows[n][j];
    std::vector<std::string> v = {std::to_string(n), std::to_string(p.positions[j]), exact(m.var),
                                  exact(m.corr_len), exact(m.mean), exact(m.corr_dim)};
    v.push_back(n == 0 ? none : exact(p.mid[n - 1][j].var));
    v.push_back(n == 0 ? none : exact(p.mid[n - 1][j].corr_len));
    v.push_back(gradients ? exact(g.rows[n][j].var) : none);
    v.push_back(gradients ? exact(g.rows[n][j].corr_len) : none);
    v.push_back(gradients && n > 0 ? exact(g.mid[n - 1][j].var) : none);
    return v;
  };
  if (spec.format == "text") {
    out << "# " << describe(spec) << "; each position's moments (mid: after the attention sublayer"
        << (gradients ? "" : "; no gradient: Pre-LN models up to 4096 tokens only") << ")\n";
    char line[200];
    std::snprintf(line, sizeof line, "%6s  %9s  %12s  %9s  %12s  %12s  %12s  %13s\n", "layer", "position", "var",
                  "corr_len", "mid_var", "mid_corr_len", "grad_var", "grad_corr_len");
    out << line;
    for (std::size_t n = 0; n < p.rows.size(); ++n)
      for (std::size_t j = 0; j < p.positions.size(); ++j) {
        const Moments<double>& m = p.rows[n][j];
        char mid[64] = "", grad[64] = "";
        if (n > 0) std::snprintf(mid, sizeof mid, "%12.6g  %12.6f", p.mid[n - 1][j].var, p.mid[n - 1][j].corr_len);
        if (gradients) std::snprintf(grad, sizeof grad, "%12.6g  %13.6f", g.rows[n][j].var, g.rows[n][j].corr_len);
        std::snprintf(line, sizeof line, "%6zu  %9zu  %12.6g  %9.6f  %26s  %27s\n", n, p.positions[j], m.var,
                      m.corr_len, mid, grad);
        out << line;
      }
    return 0;
  }
  RecordWriter records(out, spec.format == "csv", {std::begin(columns), std::end(columns)});
  for (std::size_t n = 0; n < p.rows.size(); ++n)
    for (std::size_t j = 0; j < p.positions.size(); ++j) records.row(values(n, j));
  records.finish();
  return 0;
}

inline void init_usage(std::ostream& out) {
  out << "usage: sigprop init --scheme NAME [model flags] [--format text|csv|json]\n\n"
         "Per-layer, per-weight standard deviations of an initialization scheme, one row\n"
         "per layer and weight (embedding, q, k, v, o, ffn1, ffn2; q/k/v are per head),\n"
         "and the residual scales of each sublayer, x <- lambda x + beta f(x), as rows\n"
         "attn_skip, attn_branch, ffn_skip, ffn_branch (lambda and beta themselves). Row 0\n"
         "has the embedding tables' std, embedding_scale (the multiplier on their sum) and\n"
         "embedding_ln (1 with a LayerNorm on the embedding). Layers with biases add rows\n"
         "q_bias, k_bias, v_bias, o_bias, ffn1_bias, ffn2_bias (the std of each entry).\n\n";
  model_flags_usage(out);
}

inline int table_command(const std::vector<std::string>& words, std::ostream& out, std::ostream& warn) {
  std::set<std::string> flags = model_flags();
  flags.insert("positions");
  const Args args(words, flags, {"final-ln"});
  if (!args.positional().empty()) throw usage_error("table: unexpected argument '" + args.positional()[0] + "'");
  const ModelSpec spec = parse_model(args, {"text", "csv", "json"});
  const std::vector<std::size_t> positions =
      args.has("positions") ? parse_positions(args, spec.config) : std::vector<std::size_t>{};
  const ModelWeights weights = weights_of(spec);
  const Trace averaged = trace(spec.config, weights, spec.grad_top);
  warn_outside_domain(averaged, warn);
  if (!positions.empty()) return positions_table(spec, weights, positions, out);
  // Causal models: the gradient rows are the average over the positions of
  // each position's gradient (docs/decoders.md, "Decoder stacks").
  const bool by_position = has_position_gradients(spec.config);
  const Trace t = by_position ? with_position_gradients(averaged, trace_position_gradients(spec.config, weights, {1},
                                                                                            spec.grad_top))
                              : averaged;
  const std::size_t N = spec.config.layers;
  if (spec.format == "text") {
    out << "# " << describe(spec) << "\n";
    if (by_position)
      out << "# grad_var, grad_corr_len: the average over the positions of each position's gradient\n";
    else if (spec.config.causal)
      out << "# grad_var, grad_corr_len: the sequence-averaged state, which under the mask underestimates the\n"
             "# gradient towards the input (per-position gradients: Pre-LN models up to 4096 tokens only)\n";
    char line[160];
    std::snprintf(line, sizeof line, "%6s  %12s  %9s  %12s  %13s\n", "layer", "var", "corr_len", "grad_var",
                  "grad_corr_len");
    out << line;
    for (const auto& r : t.rows) {
      std::snprintf(line, sizeof line, "%6zu  %12.6g  %9.6f  %12.6g  %13.6f%s\n", r.layer, r.forward.var,
                    r.forward.corr_len, r.backward.var, r.backward.corr_len, any(r.caveats()) ? "  !" : "");
      out << line;
    }
    if (!outside_domain(t).empty()) out << "# !: outside the validated domain of the closed forms (see stderr)\n";
    out << "# output change sum beta_ii^2 = " << brief(output_change(t)) << ", sensitivity (median) = "
        << brief(sensitivity(t)) << "\n";
    return 0;
  }
  const char* columns[] = {"layer", "var", "corr_len", "grad_var", "grad_corr_len", "mean", "corr_dim",
                           "mid_var", "mid_corr_len", "mid_grad_var", "mid_grad_corr_len", "score_var",
                           "outside_domain", "branch_var", "residual_share", "mid_branch_var",
                           "mid_residual_share", "q_grad_sq", "k_grad_sq", "v_grad_sq", "o_grad_sq", "ffn1_grad_sq", "ffn2_grad_sq",
                           "spike_attn_bound", "spike_ffn_bound"};
  // Weight-gradient norms and Spike No More bounds are derived for encoder
  // stacks (models/measures.hpp); decoders leave those cells empty.
  const ModelConfig& c = spec.config;
  const std::vector<WeightGradNorms> grads =
      is_encoder(c) ? weight_grad_norms(c, weights, t) : std::vector<WeightGradNorms>{};
  const std::vector<SpikeBounds> spikes =
      c.arch == Arch::pre_ln && !c.gated_ffn ? spike_bounds(c, weights, t) : std::vector<SpikeBounds>{};
  const std::string none = spec.format == "csv" ? "" : "null";
  const auto values = [&](std::size_t n) {
    const TraceRow& r = t.rows[n];
    std::vector<std::string> v = {std::to_string(n), exact(r.forward.var), exact(r.forward.corr_len),
                                  exact(r.backward.var), exact(r.backward.corr_len), exact(r.forward.mean),
                                  exact(r.forward.corr_dim)};
    if (n == 0) {
      v.insert(v.end(), 4, spec.format == "csv" ? "" : "null");
    } else {
      const TraceRow& m = t.mid[n - 1];
      for (double x : {m.forward.var, m.forward.corr_len, m.backward.var, m.backward.corr_len})
        v.push_back(exact(x));
    }
    const bool outside = any(r.caveats());
    v.push_back(exact(r.domain.score_var));
    v.push_back(spec.format == "csv" ? (outside ? "1" : "0") : (outside ? "true" : "false"));
    v.push_back(exact(r.branch_var));
    v.push_back(exact(r.residual_share));
    if (n == 0) {
      v.insert(v.end(), 10, none);
      return v;
    }
    v.push_back(exact(t.mid[n - 1].branch_var));
    v.push_back(exact(t.mid[n - 1].residual_share));
    if (grads.empty()) {
      v.insert(v.end(), 6, none);
    } else {
      const WeightGradNorms& g = grads[n - 1];
      for (double x : {g.query, g.key, g.v, g.o, g.ffn1, g.ffn2}) v.push_back(exact(x));
    }
    v.push_back(spikes.empty() ? none : exact(spikes[n - 1].attention));
    v.push_back(spikes.empty() ? none : exact(spikes[n - 1].ffn));
    return v;
  };
  RecordWriter records(out, spec.format == "csv", {std::begin(columns), std::end(columns)});
  for (std::size_t n = 0; n <= N; ++n) records.row(values(n));
  records.finish();
  return 0;
}

inline int init_command(const std::vector<std::string>& words, std::ostream& out, std::ostream& warn) {
  const Args args(words, model_flags(), {"final-ln"});
  if (!args.positional().empty()) throw usage_error("init: unexpected argument '" + args.positional()[0] + "'");
  const ModelSpec spec = parse_model(args, {"text", "csv", "json"});
  const ModelWeights w = weights_of(spec);
  warn_outside_domain(trace(spec.config, w, spec.grad_top), warn);
  struct Row {
    std::size_t layer;
    const char* weight;
    double std;
  };
  std::vector<Row> rows;
  if (!spec.input.measured) {
    rows.push_back({0, "embedding", std::sqrt(w.embedding_var)});
    rows.push_back({0, "embedding_scale", w.embedding_scale});
    rows.push_back({0, "embedding_ln", w.embedding_layernorm ? 1.0 : 0.0});
  }
  for (std::size_t n = 0; n < w.layers.size(); ++n) {
    const LayerWeights& l = w.layers[n];
    for (const auto& [name, var] : {std::pair<const char*, double>{"q", l.q}, {"k", l.k}, {"v", l.v}, {"o", l.o},
                                    {"ffn1", l.ffn1}, {"ffn2", l.ffn2}})
      rows.push_back({n + 1, name, std::sqrt(var)});
    if (spec.config.gated_ffn) rows.push_back({n + 1, "ffn_gate", std::sqrt(l.ffn_gate)});
    // Bias rows only where the layer has a bias (the std of each entry).
    const double gate_bias = spec.config.gated_ffn ? l.ffn_gate_bias : 0;
    if (l.q_bias + l.k_bias + l.v_bias + l.o_bias + l.ffn1_bias + l.ffn2_bias + gate_bias > 0) {
      for (const auto& [name, var] : {std::pair<const char*, double>{"q_bias", l.q_bias}, {"k_bias", l.k_bias},
                                      {"v_bias", l.v_bias}, {"o_bias", l.o_bias}, {"ffn1_bias", l.ffn1_bias},
                                      {"ffn2_bias", l.ffn2_bias}})
        rows.push_back({n + 1, name, std::sqrt(var)});
      if (spec.config.gated_ffn) rows.push_back({n + 1, "ffn_gate_bias", std::sqrt(l.ffn_gate_bias)});
    }
    for (const auto& [name, scale] : {std::pair<const char*, double>{"attn_skip", l.attn_skip},
                                      {"attn_branch", l.attn_branch}, {"ffn_skip", l.ffn_skip},
                                      {"ffn_branch", l.ffn_branch}})
      rows.push_back({n + 1, name, scale});
  }
  if (spec.format == "text") {
    out << "# " << describe(spec) << "\n";
    out << "# residual sublayers: x <- attn_skip x + attn_branch Attn(x), x <- ffn_skip x + ffn_branch FFN(x)\n";
    char line[96];
    std::snprintf(line, sizeof line, "%6s  %-15s  %12s\n", "layer", "weight", "std");
    out << line;
    for (const auto& r : rows) {
      std::snprintf(line, sizeof line, "%6zu  %-15s  %12.6g\n", r.layer, r.weight, r.std);
      out << line;
    }
  } else if (spec.format == "csv") {
    out << "layer,weight,std\n";
    for (const auto& r : rows) out << r.layer << "," << r.weight << "," << exact(r.std) << "\n";
  } else {
    out << "[";
    for (std::size_t i = 0; i < rows.size(); ++i)
      out << (i ? ",\n " : "") << "{\"layer\": " << rows[i].layer << ", \"weight\": " << quoted(rows[i].weight)
          << ", \"std\": " << exact(rows[i].std) << "}";
    out << "]\n";
  }
  return 0;
}

}  // namespace sigprop::cli
