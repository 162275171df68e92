// sigprop/io/hf_config.hpp -- a Hugging Face `config.json` (transformers) as
// a model shape: the one reader behind `sigprop table|init|sweep --hf-config`
// and the Python package's `from_hf_config`.
//
// Model types bert, roberta (Post-LN encoders with an embedding LayerNorm),
// gpt2 (Pre-LN decoder, learned positions) and llama, mistral, qwen2 (the
// llama preset with the file's FFN width and rotary base). Every value the
// file gives is kept in HfConfig; the ones ModelConfig cannot express yet
// (biases, norm epsilon, initializer range, separate attention
// dropout) are listed in docs/python.md, "Hugging Face configs"; grouped K/V
// heads change no moment at initialization (docs/decoders.md). Optional: needs nlohmann-json and is included only where used.
#pragma once

#include <cmath>
#include <cstddef>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "sigprop/core/errors.hpp"
#include "sigprop/models/config.hpp"
#include "sigprop/models/schemes.hpp"

namespace sigprop::io {

/// What a Hugging Face config describes: the shape the model layer traces
/// (`config`, `input`) and every parsed value, including those it does not
/// use yet.
struct HfConfig {
  std::string model_type;
  ModelConfig config;  ///< arch, widths, activation, causal, rotary, seq_len, dropout
  InputSpec input;     ///< vocabulary, embedding tables, embedding LayerNorm
  std::size_t kv_heads = 0;         ///< num_key_value_heads (GQA: no change at initialization)
  std::string activation;           ///< hidden_act / activation_function as written
  double norm_eps = 0;              ///< layer_norm_eps / layer_norm_epsilon / rms_norm_eps
  double initializer_range = 0.02;  ///< std of every weight in the Hugging Face init
  Scheme scheme = Scheme::bert;     ///< the model's own initialization (bert, gpt2 or llama at initializer_range)
  std::size_t max_positions = 0;    ///< max_position_embeddings / n_positions
  std::size_t type_vocab_size = 0;  ///< segment table rows (BERT: 2)
  double hidden_dropout = 0;        ///< hidden_dropout_prob / resid_pdrop (config.dropout)
  double attention_dropout = 0;     ///< attention_probs_dropout_prob / attn_pdrop / attention_dropout
  double embedding_dropout = 0;     ///< embd_pdrop (GPT-2), else hidden_dropout
  bool tie_word_embeddings = false;
  bool qkv_bias = false;            ///< biases on Q, K, V (Qwen2; Llama's attention_bias)
  bool learned_positions = false;   ///< a learned position table (BERT, GPT-2)
};

/// The model types read, as the error for another one lists them.
inline const char* hf_model_types() { return "{bert, roberta, gpt2, llama, mistral, qwen2}"; }

namespace detail {

using sigprop::detail::format_number;
using sigprop::detail::raise_domain;

constexpr const char* hf_function = "sigprop::read_hf_config";

// The first of `keys` present (and not null) in `j`, or null.
inline const nlohmann::json* hf_find(const nlohmann::json& j, std::initializer_list<const char*> keys,
                                     std::string* name = nullptr) {
  for (const char* k : keys) {
    const auto it = j.find(k);
    if (it != j.end() && !it->is_null()) {
      if (name) *name = k;
      return &*it;
    }
  }
  return nullptr;
}

inline std::string hf_key_list(std::initializer_list<const char*> keys) {
  std::string all;
  for (const char* k : keys) all += (all.empty() ? "" : "/") + std::string(k);
  return all;
}

// "name = value is outside the valid range: what".
[[noreturn]] inline void hf_outside(const std::string& name, const std::string& value, const std::string& what) {
  raise_domain(hf_function, name + " = " + value + " is outside the valid range: " + what);
}

[[noreturn]] inline void hf_missing(const std::string& model_type, std::initializer_list<const char*> keys) {
  raise_domain(hf_function, hf_key_list(keys) + " is missing (model_type '" + model_type + "' needs it)");
}

// A finite number under one of `keys`, if there is one.
inline std::optional<double> hf_number(const nlohmann::json& j, std::initializer_list<const char*> keys) {
  std::string name;
  const nlohmann::json* v = hf_find(j, keys, &name);
  if (!v) return std::nullopt;
  if (!v->is_number()) hf_outside(name, v->dump(), "a number");
  const double x = v->get<double>();
  if (!std::isfinite(x)) hf_outside(name, format_number(x), "a finite number");
  return x;
}

// A whole number >= 1 under one of `keys`; required unless a fallback is given.
inline std::size_t hf_count(const nlohmann::json& j, const std::string& model_type,
                            std::initializer_list<const char*> keys, std::optional<std::size_t> fallback = {}) {
  std::string name;
  const nlohmann::json* v = hf_find(j, keys, &name);
  if (!v) {
    if (!fallback) hf_missing(model_type, keys);
    return *fallback;
  }
  const double x = v->is_number() ? v->get<double>() : NAN;
  if (!(x >= 1 && x <= 1e15 && std::floor(x) == x))
    hf_outside(name, v->dump(), "a whole number in [1, 1e+15]");
  return static_cast<std::size_t>(x);
}

inline double hf_probability(const nlohmann::json& j, std::initializer_list<const char*> keys, double fallback) {
  std::string name;
  hf_find(j, keys, &name);
  const double p = hf_number(j, keys).value_or(fallback);
  if (!(p >= 0 && p < 1)) raise_domain(hf_function, name, p, "[0, 1)");
  return p;
}

inline bool hf_flag(const nlohmann::json& j, const char* key, bool fallback) {
  const nlohmann::json* v = hf_find(j, {key});
  if (!v) return fallback;
  if (!v->is_boolean()) hf_outside(key, v->dump(), "true or false");
  return v->get<bool>();
}

// hidden_act / activation_function -> the FFN activation.
inline FfnActivation hf_activation(const char* key, const std::string& name) {
  static const std::pair<const char*, FfnActivation> names[] = {
      {"gelu", FfnActivation::gelu},
      {"gelu_new", FfnActivation::gelu_tanh},  // the tanh form (components/gelu.hpp)
      {"gelu_pytorch_tanh", FfnActivation::gelu_tanh},
      {"silu", FfnActivation::silu},
      {"swish", FfnActivation::silu},
      {"relu", FfnActivation::relu},
  };
  for (const auto& [n, a] : names)
    if (name == n) return a;
  raise_domain(hf_function, key, "'" + name + "'", "{gelu, gelu_new, gelu_pytorch_tanh, silu, swish, relu}");
}

}  // namespace detail

/// The model shape of a parsed config.json; `seq_len` replaces the file's
/// max_position_embeddings as the sequence length.
inline HfConfig hf_config_from_json(const nlohmann::json& j, std::optional<std::size_t> seq_len = {}) {
  using namespace detail;
  if (!j.is_object()) raise_domain(hf_function, "the config is not a JSON object");
  HfConfig h;
  const nlohmann::json* type = hf_find(j, {"model_type"});
  if (!type) raise_domain(hf_function, "model_type is missing (supported: " + std::string(hf_model_types()) + ")");
  h.model_type = type->is_string() ? type->get<std::string>() : type->dump();
  const std::string& t = h.model_type;
  const bool encoder = t == "bert" || t == "roberta";
  const bool gpt2 = t == "gpt2";
  const bool llama = t == "llama" || t == "mistral" || t == "qwen2";
  if (!type->is_string() || !(encoder || gpt2 || llama))
    raise_domain(hf_function, "model_type", type->is_string() ? "'" + t + "'" : t, hf_model_types());

  ModelConfig c;
  const char* activation_key = "hidden_act";
  c.d = hf_count(j, t, {"hidden_size", "n_embd"});
  c.layers = hf_count(j, t, {"num_hidden_layers", "n_layer"});
  c.heads = hf_count(j, t, {"num_attention_heads", "n_head"});
  h.input.vocab = static_cast<double>(hf_count(j, t, {"vocab_size"}));
  h.max_positions = hf_count(j, t, {"max_position_embeddings", "n_positions"},
                             seq_len ? std::optional<std::size_t>(*seq_len) : std::nullopt);
  c.seq_len = seq_len.value_or(h.max_positions);
  h.initializer_range = hf_number(j, {"initializer_range"}).value_or(0.02);
  if (!(h.initializer_range > 0)) raise_domain(hf_function, "initializer_range", h.initializer_range, "(0, inf)");

  if (encoder) {
    // Devlin et al. 2019: Post-LN, embedding LayerNorm, token + position + segment tables.
    c.arch = Arch::post_ln;
    h.scheme = Scheme::bert;
    c.ffn_hidden = hf_count(j, t, {"intermediate_size"});
    activation_key = "hidden_act";
    h.activation = "gelu";
    h.norm_eps = hf_number(j, {"layer_norm_eps"}).value_or(1e-12);
    h.hidden_dropout = hf_probability(j, {"hidden_dropout_prob"}, 0.1);
    h.attention_dropout = hf_probability(j, {"attention_probs_dropout_prob"}, 0.1);
    h.embedding_dropout = h.hidden_dropout;
    h.type_vocab_size = hf_count(j, t, {"type_vocab_size"}, 2);
    h.input.segment = true;
    h.input.embedding_layernorm = true;
    h.learned_positions = true;
    h.tie_word_embeddings = hf_flag(j, "tie_word_embeddings", true);
  } else if (gpt2) {
    // Radford et al. 2019: the gpt2 preset, learned positions, FFN n_inner (4d when null).
    c = with_architecture(c, "gpt2");
    h.scheme = Scheme::gpt2;
    if (hf_find(j, {"n_inner"})) c.ffn_hidden = hf_count(j, t, {"n_inner"});
    activation_key = "activation_function";
    h.activation = "gelu_new";
    h.norm_eps = hf_number(j, {"layer_norm_epsilon"}).value_or(1e-5);
    h.hidden_dropout = hf_probability(j, {"resid_pdrop"}, 0.1);
    h.attention_dropout = hf_probability(j, {"attn_pdrop"}, 0.1);
    h.embedding_dropout = hf_probability(j, {"embd_pdrop"}, 0.1);
    h.input.segment = false;
    h.learned_positions = true;
    h.tie_word_embeddings = hf_flag(j, "tie_word_embeddings", true);
  } else {
    // Touvron et al. 2023: the llama preset with the file's FFN width and rotary base.
    c = with_architecture(c, "llama");
    h.scheme = Scheme::llama;
    c.ffn_hidden = hf_count(j, t, {"intermediate_size"});
    activation_key = "hidden_act";
    h.activation = "silu";
    h.norm_eps = hf_number(j, {"rms_norm_eps"}).value_or(1e-6);
    c.rotary_base = hf_number(j, {"rope_theta"}).value_or(10000);
    h.attention_dropout = hf_probability(j, {"attention_dropout"}, 0);
    h.input.position = h.input.segment = false;
    h.qkv_bias = t == "qwen2" || hf_flag(j, "attention_bias", false);
    h.tie_word_embeddings = hf_flag(j, "tie_word_embeddings", false);
  }
  // The activation: the file's name (a string), or the type's default.
  if (const nlohmann::json* a = hf_find(j, {activation_key})) {
    if (!a->is_string()) hf_outside(activation_key, a->dump(), "a string");
    h.activation = a->get<std::string>();
  }
  c.activation = hf_activation(activation_key, h.activation);
  c.dropout = h.hidden_dropout;
  c.attention_dropout = h.attention_dropout;
  c.initializer_range = h.initializer_range;
  h.kv_heads = hf_count(j, t, {"num_key_value_heads"}, c.heads);
  if (c.heads % h.kv_heads != 0)
    hf_outside("num_key_value_heads", std::to_string(h.kv_heads),
               "a divisor of num_attention_heads = " + std::to_string(c.heads));
  c.validate(hf_function);
  h.config = c;
  return h;
}

/// The same from the text of a config.json.
inline HfConfig parse_hf_config(const std::string& text, std::optional<std::size_t> seq_len = {}) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) detail::raise_domain(detail::hf_function, "the config is not valid JSON");
  return hf_config_from_json(j, seq_len);
}

/// The same from a file.
inline HfConfig read_hf_config(const std::string& path, std::optional<std::size_t> seq_len = {}) {
  std::ifstream in(path);
  if (!in) detail::raise_domain(detail::hf_function, "cannot read the file '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_hf_config(text.str(), seq_len);
}

}  // namespace sigprop::io
