// sigprop/models/config.hpp -- the architecture of a whole transformer and the
// per-layer weight variances and residual scales of one initialization.
//
// Shared by the closed-form stacks (stack.hpp), the initialization schemes
// (schemes.hpp) and the whole-model simulation (montecarlo/models.hpp).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "sigprop/components/attention.hpp"
#include "sigprop/core/moments.hpp"
#include "sigprop/core/validate.hpp"

namespace sigprop {

/// Where the LayerNorms sit (Kedia et al. 2024, section 2; Xiong et al. 2020).
enum class Arch {
  pre_ln,   ///< x = lambda x + beta f(LN(x))
  post_ln,  ///< x = LN(lambda x + beta f(x))
  no_ln,    ///< x = lambda x + beta f(x), no normalization (T-Fixup, ReZero, SkipInit)
};

inline const char* to_string(Arch a) {
  switch (a) {
    case Arch::pre_ln: return "pre-ln";
    case Arch::post_ln: return "post-ln";
    case Arch::no_ln: return "no-ln";
  }
  return "?";
}

/// The architecture spelled `name` ("pre-ln", "post-ln", "no-ln").
inline Arch arch_from_string(const std::string& name) {
  for (Arch a : {Arch::pre_ln, Arch::post_ln, Arch::no_ln})
    if (name == to_string(a)) return a;
  detail::raise_domain("sigprop::arch_from_string", "arch", "'" + name + "'", "{pre-ln, post-ln, no-ln}");
}

/// gelu is x Phi(x), gelu_tanh its tanh approximation (GPT-2's; Gelu with GeluForm::tanh).
enum class FfnActivation { relu, gelu, silu, gelu_tanh };

inline const char* to_string(FfnActivation a) {
  switch (a) {
    case FfnActivation::relu: return "relu";
    case FfnActivation::gelu: return "gelu";
    case FfnActivation::gelu_tanh: return "gelu_tanh";
    case FfnActivation::silu: return "silu";
  }
  return "?";
}

/// Which normalization the LayerNorm positions hold: LayerNorm (BERT, GPT-2)
/// or RMSNorm (Llama; components/rmsnorm.hpp).
enum class Norm { layernorm, rmsnorm };

/// The shape of the model; widths are counts, p the dropout probability of
/// the embedding and the block outputs, and of the attention probabilities
/// unless `attention_dropout` is set (docs/models.md, "Dropout").
struct ModelConfig {
  Arch arch = Arch::pre_ln;
  std::size_t layers = 12;       ///< N
  std::size_t d = 768;           ///< model width
  std::size_t heads = 12;        ///< H (head width d / H)
  std::size_t ffn_mult = 4;      ///< m (FFN width m d)
  FfnActivation activation = FfnActivation::relu;
  std::size_t seq_len = 256;     ///< L
  double dropout = 0.1;          ///< p
  std::optional<double> attention_dropout;  ///< on the attention probabilities; unset: p (GPT-2's attn_pdrop)
  double ffn_dropout = 0;        ///< after the FFN activation (PyTorch's nn.TransformerEncoderLayer: p)
  double initializer_range = 0.02;  ///< the std of the bert, gpt2 and llama schemes (Hugging Face's name)
  bool final_layernorm = false;  ///< Pre-LN only: a LayerNorm after the last layer
  /// The attention gradient paths of the trace (all_paths is the real
  /// gradient; value_path_only reproduces the paper's B.8 backward).
  AttentionGradient attention_gradient = AttentionGradient::all_paths;
  /// Decoder options (docs/decoders.md): the normalization, the causal mask
  /// on every attention, and the gated FFN W2 (act(x W1) * (x V)).
  Norm norm = Norm::layernorm;
  bool causal = false;
  bool gated_ffn = false;
  /// FFN hidden width; 0 means ffn_mult d (Llama's gated FFN uses about 8d/3).
  std::size_t ffn_hidden = 0;
  /// Rotary position embeddings on every head's queries and keys, pair j
  /// turned by i base^(-2j/d_k) at position i (Llama, GPT-NeoX: base 10000);
  /// 0: none (components/detail/rotary.hpp).
  double rotary_base = 0;
  /// The initial gain of every norm and bias of every LayerNorm (RMSNorm has
  /// none), the same for all units: out = ln_gain normalized + ln_bias.
  double ln_gain = 1, ln_bias = 0;
  /// The attention logits Q K^T divided by sqrt(d_k), or by d_k (muP).
  LogitScale logit_scale = LogitScale::inv_sqrt_dk;

  std::size_t head_width() const { return d / heads; }
  std::size_t hidden_width() const { return ffn_hidden > 0 ? ffn_hidden : ffn_mult * d; }
  double attention_p() const { return attention_dropout.value_or(dropout); }

  void validate(const char* function) const {
    require_width(function, "layers", static_cast<double>(layers));
    // The norms need d >= 4 (LayerNorm) or d >= 3 (RMSNorm) for a finite gradient variance.
    require_width(function, "d", static_cast<double>(d), norm == Norm::rmsnorm ? 3 : 4);
    require_width(function, "heads", static_cast<double>(heads));
    require_width(function, "ffn_mult", static_cast<double>(ffn_mult));
    require_width(function, "seq_len", static_cast<double>(seq_len), 2);
    require_probability(function, "dropout", dropout);
    require_probability(function, "attention_dropout", attention_p());
    require_probability(function, "ffn_dropout", ffn_dropout);
    detail::require_rotary(function, RotaryEmbedding{rotary_base}, heads > 0 ? static_cast<double>(d / heads) : 0.0);
    require_positive(function, "ln_gain", ln_gain);
    require_finite(function, "ln_bias", ln_bias);
    if (norm == Norm::rmsnorm && ln_bias != 0)
      detail::raise_domain(function, "ln_bias", ln_bias, "{0} with RMSNorm (it has no bias)");
    if (d % heads != 0)
      detail::raise_domain(function, "heads = " + std::to_string(heads) +
                                         " is outside the valid range: a divisor of d = " + std::to_string(d));
  }
};

/// The decoder presets: "llama" (pre-RMSNorm with a final RMSNorm, causal
/// attention with rotary position embeddings of base 10000, SwiGLU FFN of
/// hidden width 8d/3 rounded up to a multiple of 8, no dropout; Touvron et
/// al. 2023) and "gpt2" (pre-LayerNorm with a final LayerNorm, causal
/// attention, FFN of width 4d with the tanh GeLU; learned position
/// embeddings, the embedding's tables: preset_tables; Radford et al. 2019),
/// applied to `c`'s sizes (layers, d, heads, seq_len); "pre-ln", "post-ln"
/// and "no-ln" set the architecture alone. Biases are zero at initialization
/// in both (LayerWeights' bias variances and ModelConfig::ln_bias model others).
inline ModelConfig with_architecture(ModelConfig c, const std::string& name) {
  if (name == "llama") {
    c.arch = Arch::pre_ln;
    c.norm = Norm::rmsnorm;
    c.final_layernorm = true;
    c.causal = true;
    c.gated_ffn = true;
    c.activation = FfnActivation::silu;
    c.ffn_hidden = (8 * c.d / 3 + 7) / 8 * 8;
    c.dropout = 0;
    c.rotary_base = 10000;
  } else if (name == "gpt2") {
    c.arch = Arch::pre_ln;
    c.norm = Norm::layernorm;
    c.final_layernorm = true;
    c.causal = true;
    c.gated_ffn = false;
    c.activation = FfnActivation::gelu_tanh;
    c.rotary_base = 0;
    c.ffn_mult = 4;
    c.ffn_hidden = 0;
  } else {
    try {
      c.arch = arch_from_string(name);
    } catch (const domain_error&) {
      detail::raise_domain("sigprop::with_architecture", "arch", "'" + name + "'",
                           "{pre-ln, post-ln, no-ln, llama, gpt2}");
    }
  }
  return c;
}

/// Whether `c` uses none of the decoder options (full attention, plain FFN
/// with ReLU or GeLU, LayerNorm): the stacks the seed papers analyse.
inline bool is_encoder(const ModelConfig& c) {
  return !c.causal && !c.gated_ffn && c.norm == Norm::layernorm && c.activation != FfnActivation::silu;
}

/// The name with_architecture() knows `c` by: "llama" or "gpt2" for a causal
/// pre-norm stack with their norm and FFN, otherwise the architecture's own
/// (decoder options outside the presets are listed after it).
inline std::string architecture_name(const ModelConfig& c) {
  if (c.causal && c.arch == Arch::pre_ln && c.norm == Norm::rmsnorm && c.gated_ffn) return "llama";
  if (c.causal && c.arch == Arch::pre_ln && c.norm == Norm::layernorm && !c.gated_ffn) return "gpt2";
  std::string name = to_string(c.arch);
  if (c.norm == Norm::rmsnorm) name += "+rmsnorm";
  if (c.causal) name += "+causal";
  if (c.gated_ffn) name += "+gated";
  return name;
}

/// Per-entry weight variances of one layer and the residual scales of its
/// two sublayers, x <- lambda x + beta f(x) (lambda: skip, beta: branch).
struct LayerWeights {
  double q = 0, k = 0, v = 0, o = 0;  ///< attention projections (d x d/H per head; O is d x d)
  double ffn1 = 0, ffn2 = 0;          ///< FFN d x m d and m d x d
  double ffn_gate = 0;                ///< the gated FFN's V (d x m d); unused otherwise
  double attn_skip = 1, attn_branch = 1;  ///< lambda, beta of the attention sublayer
  double ffn_skip = 1, ffn_branch = 1;    ///< lambda, beta of the FFN sublayer
  /// Per-entry variances of the biases of the same maps (each drawn once,
  /// shared by all positions; components/linear.hpp, attention.hpp).
  double q_bias = 0, k_bias = 0, v_bias = 0, o_bias = 0, ffn1_bias = 0, ffn2_bias = 0, ffn_gate_bias = 0;

  /// Every field, in the order of BatchLayerWeights' (see Moments::fields).
  auto fields() const {
    return std::tie(q, k, v, o, ffn1, ffn2, ffn_gate, attn_skip, attn_branch, ffn_skip, ffn_branch, q_bias, k_bias,
                    v_bias, o_bias, ffn1_bias, ffn2_bias, ffn_gate_bias);
  }
  auto fields() {
    return std::tie(q, k, v, o, ffn1, ffn2, ffn_gate, attn_skip, attn_branch, ffn_skip, ffn_branch, q_bias, k_bias,
                    v_bias, o_bias, ffn1_bias, ffn2_bias, ffn_gate_bias);
  }

  /// Both sublayers get lambda = skip, beta = branch.
  void set_residual(double skip, double branch) {
    attn_skip = ffn_skip = skip;
    attn_branch = ffn_branch = branch;
  }
};

/// An initialization: the model input moments (after the embedding, its
/// dropout and, with an embedding LayerNorm, that LayerNorm) and each layer's
/// weights.
struct ModelWeights {
  Moments<double> input{0, 1, 0, 0};
  double embedding_var = 0;  ///< per-entry variance of each embedding table (0: input given directly)
  double embedding_scale = 1;  ///< multiplier on the summed tables (Scaled Embed: sqrt(d))
  /// An embedding LayerNorm (Spike No More's Embed LN): `input` is its output
  /// and `embedding_output` what it normalizes.
  bool embedding_layernorm = false;
  Moments<double> embedding_output{0, 1, 0, 0};
  std::vector<LayerWeights> layers;
};

}  // namespace sigprop
