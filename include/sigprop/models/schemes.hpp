// sigprop/models/schemes.hpp -- initialization schemes: per-layer weight
// variances, residual scales and embedding options for a model shape.
//
// Every scheme of the source papers and the usual rivals (docs/schemes.md
// lists each with its reference and the choices made where a paper is
// silent). Widths: d, head width d_k = d/H, FFN width m d, N layers,
// dropout p, layer index l = 1..N; "xavier" below is the xavier row.
//
//   xavier      Glorot and Bengio (AISTATS 2010): every matrix 2/(fan_in + fan_out);
//               Q/K/V per head (d x d/H), as in the DeepScaleLM paper
//   bert        Devlin et al. (NAACL 2019): every matrix and table 0.02^2
//   dslm-simple Kedia et al. (ICML 2024) 3.5, G.5: Q, K: 1/d; V, O, W1, W2:
//               (1/d) sqrt((1-p)/2); beta^2 = k/N^alpha (k = 2, alpha = 1)
//   dslm        the same with V = O and W1 = W2 solved per layer for unit
//               block output variance (G.3, G.4; see below)
//   admin       Liu et al. (EMNLP 2020) 4.3: Post-LN, xavier, shortcut scale
//               omega_i = sqrt(sum_{j<i} Var[f_j]) over the sublayers j before
//               sublayer i, Var[f_j] from a profiling pass of the same model with
//               omega = 1 (here: the closed-form trace instead of a forward pass);
//               omega_1 = 0 as the formula reads
//   admin-code  the authors' code: omega_i^2 = Var[x_0] + sum_{j<i} Var[f_j]
//   deepnet     Wang et al. (2022) DeepNorm, encoder: Post-LN with skip scale
//               alpha = (2N)^(1/4); Q, K: 1/d (Xavier of d x d), V, O: (1/d) b^2,
//               W1, W2: xavier b^2, b = (8N)^(-1/4)
//   ds-init     Zhang et al. (EMNLP 2019): xavier of layer l times 1/l (std 1/sqrt l)
//   t-fixup     Huang et al. (ICML 2020), encoder: no LayerNorm, xavier with V, O,
//               W1, W2 times (0.67 N^(-1/4))^2
//   layerscale  Touvron et al. (ICCV 2021, CaiT): Pre-LN, xavier, branch scale
//               eps = 0.1 (N <= 18), 1e-5 (N <= 24), 1e-6 (deeper)
//   rezero      Bachlechner et al. (2021): no LayerNorm, xavier, branch scale 0
//   skipinit    De and Smith (NeurIPS 2020): the same at initialization
//   spike-vanilla       Takase et al. ("Spike No More") 4: Pre-LN, every matrix and
//                       table 2/(5d), W2 and O further times 1/(2N)
//   scaled-embed        spike-vanilla with the embedding times sqrt(d)
//   embed-ln            spike-vanilla with a LayerNorm on the embedding
//   xavier-scaled-embed xavier with tables 1/d and the embedding times sqrt(d) (std 1
//                       per table: the paper's Table 5 has it meet the large-shortcut
//                       condition, which the tables' own Xavier 2/(|V| + d) would not)
//   torch-default       PyTorch's modules left as constructed (nn.TransformerEncoderLayer,
//                       Post-LN): Q, K, V 1/(2d) (xavier_uniform_ of the 3d x d in_proj),
//                       O 1/(3d), W1 1/(3d), W2 1/(3 m d) (kaiming_uniform_(a = sqrt 5));
//                       biases 0 but W1's and W2's, 1/(3 fan_in); tables 1 (N(0, 1))
//   gpt2        Radford et al. (2019), Hugging Face's GPT2: every matrix and table R^2,
//               O and W2 R^2/(2N); R = config.initializer_range (0.02)
//   llama       Touvron et al. (2023), Hugging Face's Llama: every matrix and table R^2
// (bert uses R as well.) gpt2 and llama are published with their own
// architectures (native_architecture: the presets of with_architecture).
// Embeddings (all other schemes): K tables followed by dropout; each table
// gets (1-p)/K so the model input has variance 1.
#pragma once

#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <utility>

#include "sigprop/config.hpp"
#include "sigprop/models/stack.hpp"

namespace sigprop {

enum class Scheme {
  xavier, bert, dslm, dslm_simple, admin, admin_code, deepnet, ds_init, t_fixup, layerscale, rezero, skipinit,
  spike_vanilla, scaled_embed, embed_ln, xavier_scaled_embed, torch_default, gpt2, llama
};

/// A scheme's name (as the command line spells it), the architecture it was
/// published with, and where it comes from.
struct SchemeInfo {
  Scheme scheme;
  const char* name;
  Arch arch;
  const char* reference;
};

inline const std::array<SchemeInfo, 19>& schemes() {
  static const std::array<SchemeInfo, 19> table{{
      {Scheme::xavier, "xavier", Arch::pre_ln, "Glorot and Bengio, AISTATS 2010"},
      {Scheme::bert, "bert", Arch::pre_ln, "Devlin et al., NAACL 2019"},
      {Scheme::dslm, "dslm", Arch::pre_ln, "Kedia et al., ICML 2024, 3.5 and G.3-G.4"},
      {Scheme::dslm_simple, "dslm-simple", Arch::pre_ln, "Kedia et al., ICML 2024, 3.5 and G.5"},
      {Scheme::admin, "admin", Arch::post_ln, "Liu et al., EMNLP 2020, 4.3"},
      {Scheme::admin_code, "admin-code", Arch::post_ln, "Liu et al., EMNLP 2020, the authors' code"},
      {Scheme::deepnet, "deepnet", Arch::post_ln, "Wang et al., DeepNet, 2022 (encoder)"},
      {Scheme::ds_init, "ds-init", Arch::post_ln, "Zhang et al., EMNLP 2019"},
      {Scheme::t_fixup, "t-fixup", Arch::no_ln, "Huang et al., ICML 2020 (encoder)"},
      {Scheme::layerscale, "layerscale", Arch::pre_ln, "Touvron et al., ICCV 2021 (CaiT)"},
      {Scheme::rezero, "rezero", Arch::no_ln, "Bachlechner et al., UAI 2021"},
      {Scheme::skipinit, "skipinit", Arch::no_ln, "De and Smith, NeurIPS 2020"},
      {Scheme::spike_vanilla, "spike-vanilla", Arch::pre_ln, "Takase et al., Spike No More, 4 (Vanilla)"},
      {Scheme::scaled_embed, "scaled-embed", Arch::pre_ln, "Takase et al., Spike No More, 4 (Scaled Embed)"},
      {Scheme::embed_ln, "embed-ln", Arch::pre_ln, "Takase et al., Spike No More, 4 (Embed LN)"},
      {Scheme::xavier_scaled_embed, "xavier-scaled-embed", Arch::pre_ln,
       "Takase et al., Spike No More, B.1 (Xavier Init + Scaled Embed)"},
      {Scheme::torch_default, "torch-default", Arch::post_ln, "PyTorch 1.13 nn.MultiheadAttention, nn.Linear, nn.Embedding"},
      {Scheme::gpt2, "gpt2", Arch::pre_ln, "Radford et al., 2019 (GPT-2); Hugging Face's GPT2"},
      {Scheme::llama, "llama", Arch::pre_ln, "Touvron et al., 2023 (Llama); Hugging Face's Llama"},
  }};
  return table;
}

inline const SchemeInfo& info(Scheme s) {
  for (const SchemeInfo& i : schemes())
    if (i.scheme == s) return i;
  return schemes()[0];
}

inline const char* to_string(Scheme s) { return info(s).name; }

/// The architecture the scheme was published with (the default of the CLI).
inline Arch native_arch(Scheme s) { return info(s).arch; }

/// The with_architecture() name of the model the scheme was published with:
/// "gpt2" and "llama" for their schemes, native_arch's name otherwise.
inline std::string native_architecture(Scheme s) {
  if (s == Scheme::gpt2) return "gpt2";
  if (s == Scheme::llama) return "llama";
  return to_string(native_arch(s));
}

/// All scheme names, comma-separated.
inline std::string scheme_names(const char* separator = ", ") {
  std::string all;
  for (const SchemeInfo& i : schemes()) all += (all.empty() ? "" : separator) + std::string(i.name);
  return all;
}

/// The scheme called `name`; throws domain_error naming the valid names.
inline Scheme scheme_from_string(const std::string& name) {
  for (const SchemeInfo& i : schemes())
    if (name == i.name) return i.scheme;
  detail::raise_domain("sigprop::scheme_from_string", "scheme", "'" + name + "'", "{" + scheme_names() + "}");
}

/// What feeds the first layer: an embedding (tables summed, times
/// `embedding_scale`, then dropout, then optionally a LayerNorm) or measured
/// input moments.
struct InputSpec {
  double vocab = 32000;
  bool token = true, position = true, segment = true;
  double embedding_scale = 1;        ///< multiplies the summed tables (schemes may multiply it further)
  bool embedding_layernorm = false;  ///< a LayerNorm on the embedding (schemes may set it)
  std::optional<Moments<double>> measured;  ///< replaces the embedding model when set
};

/// The embedding tables of the decoder presets (models/config.hpp): "gpt2"
/// learns token and position tables, "llama" a token table alone (its
/// positions enter through the rotary embeddings); other names keep `input`'s.
inline InputSpec with_architecture(InputSpec input, const std::string& name) {
  if (name == "gpt2" || name == "llama") {
    input.token = true;
    input.position = name == "gpt2";
    input.segment = false;
  }
  return input;
}

/// beta^2 = k / N^alpha, lambda^2 = 1 - beta^2 (DeepScaleLM, section 3.5).
struct ResidualScaling {
  double k = 2;
  double alpha = 1;
  /// Applied by the dslm schemes; set to apply it to any scheme (it then
  /// replaces the scheme's own residual scales).
  bool enabled = false;
};

/// Explicit per-entry variances that replace the scheme's, in every layer
/// (`bias`: every bias; ffn1 and ffn1_bias also the gated FFN's V).
struct WeightOverrides {
  std::optional<double> embedding, q, k, v, o, ffn1, ffn2;
  std::optional<double> bias, q_bias, k_bias, v_bias, o_bias, ffn1_bias, ffn2_bias;
};

/// Per-entry variances of the embedding's tables, each before the scale.
struct TableVariances {
  double token = 0, position = 0, segment = 0;
};

/// The embedding's output, Dropout(p)(Embedding(tables) * scale), and the
/// model input it gives (after the embedding LayerNorm when
/// `input.embedding_layernorm`); the tables are those `input` names
/// (docs/models.md, "Embeddings").
struct EmbeddingMoments {
  Moments<double> output, input;
};
SIGPROP_DECL EmbeddingMoments embedding_moments(const ModelConfig& config, const InputSpec& input,
                                                const TableVariances& tables, double scale = 1);

/// Per-layer weights of `scheme` for the model shape `config` (any
/// architecture: `native_arch(scheme)` is the one it was published with).
SIGPROP_DECL ModelWeights initialize(const ModelConfig& config, Scheme scheme, const InputSpec& input = {},
                                     ResidualScaling scaling = {}, const WeightOverrides& overrides = {});

}  // namespace sigprop

#ifdef SIGPROP_HEADER_ONLY
#include "sigprop/models/impl/schemes.ipp"
#endif
