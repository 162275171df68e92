// cli/component_command.hpp -- `sigprop component NAME`: one component's
// forward and backward moments, so a number can be checked without C++.
#pragma once

#include <functional>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "args.hpp"
#include "domain_warning.hpp"
#include "output.hpp"
#include "run.hpp"
#include "sigprop/sigprop.hpp"

namespace sigprop::cli {

namespace detail {

template <class C>
ComponentResult evaluate(const C& component, const Moments<double>& in,
                         const GradMoments<double>& grad) {
  return {component.forward(in), component.backward(in, grad), component.domain(in)};
}

using Evaluator = std::function<ComponentResult(const Args&, const Moments<double>&,
                                                const GradMoments<double>&)>;

struct ComponentEntry {
  const char* name;
  std::set<std::string> flags;  // component parameters
  const char* help;
  Evaluator run;
};

inline const std::vector<ComponentEntry>& component_table() {
  static const std::vector<ComponentEntry> table = {
      {"linear", {"d-in", "d-out", "weight-var", "bias-var"},
       "--d-in N (512) --d-out N (512) --weight-var V (1/d-in) --bias-var B (0)",
       [](const Args& a, const Moments<double>& in, const GradMoments<double>& g) {
         const double d_in = a.count("d-in", 512);
         return evaluate(Linear<double>(d_in, a.count("d-out", 512),
                                        a.number("weight-var", 1 / d_in), a.number("bias-var", 0)),
                         in, g);
       }},
      {"dropout", {"p"}, "--p P (0.1)",
       [](const Args& a, const Moments<double>& in, const GradMoments<double>& g) {
         return evaluate(Dropout<double>(a.number("p", 0.1)), in, g);
       }},
      {"relu", {}, "(no parameters)",
       [](const Args&, const Moments<double>& in, const GradMoments<double>& g) {
         return evaluate(Relu<double>(), in, g);
       }},
      {"gelu", {"form"}, "--form erf|tanh (erf: x Phi(x); tanh: GPT-2's approximation)",
       [](const Args& a, const Moments<double>& in, const GradMoments<double>& g) {
         const bool tanh = a.choice("form", {"erf", "tanh"}, "erf") == "tanh";
         return evaluate(Gelu<double>(tanh ? GeluForm::tanh : GeluForm::erf), in, g);
       }},
      {"layernorm", {"d", "gain", "bias"}, "--d D (768, >= 4) --gain G (1) --bias B (0)",
       [](const Args& a, const Moments<double>& in, const GradMoments<double>& g) {
         return evaluate(LayerNorm<double>(a.count("d", 768), a.number("gain", 1), a.number("bias", 0)), in, g);
       }},
      {"softmax", {"n", "form"},
       "--n N (256, entries along the normalized axis; their correlation is --corr-dim)\n"
       "              --form exact|full|simplified (exact)",
       [](const Args& a, const Moments<double>& in, const GradMoments<double>& g) {
         const std::string form = a.choice("form", {"exact", "full", "simplified"}, "exact");
         return evaluate(Softmax<double>(a.count("n", 256), form == "exact" ? SoftmaxForm::exact
                                                            : form == "full" ? SoftmaxForm::full
                                                                             : SoftmaxForm::simplified),
                         in, g);
       }},
      {"attention", {"d-in", "d-k", "seq", "q-var", "k-var", "v-var", "p", "rotary", "logit-scale"},
       "--d-in N (512) --d-k N (64) --seq L (256) --q-var --k-var --v-var (1/d-in)\n"
       "              --p P (0, dropout on the attention probabilities)\n"
       "              --rotary BASE (0: none; rotary position embeddings on Q and K)\n"
       "              --logit-scale inv-sqrt-dk|inv-dk (logits Q K^T/sqrt(d_k) or Q K^T/d_k)",
       [](const Args& a, const Moments<double>& in, const GradMoments<double>& g) {
         const double d_in = a.count("d-in", 512), d_k = a.count("d-k", 64);
         const RotaryEmbedding rotary{parse_rotary(a, d_k)};
         return evaluate(Attention<double>(d_in, d_k, a.count("seq", 256), a.number("q-var", 1 / d_in),
                                           a.number("k-var", 1 / d_in), a.number("v-var", 1 / d_in),
                                           a.number("p", 0), AttentionGradient::all_paths, rotary,
                                           parse_logit_scale(a)),
                         in, g);
       }},
      {"embedding", {"vocab", "seq", "tables", "weight-var"},
       "--vocab V (32000) --seq L (256) --tables token,position,segment (all)\n"
       "              --weight-var V (1, per table); the input moments are ignored",
       [](const Args& a, const Moments<double>& in, const GradMoments<double>& g) {
         EmbeddingConfig<double> c;
         c.vocab = a.count("vocab", 32000);
         c.seq_len = a.count("seq", 256);
         c.weight_var = a.number("weight-var", 1);
         if (a.has("tables")) {
           c.token = c.position = c.segment = false;
           std::stringstream list(a.text("tables", ""));
           for (std::string t; std::getline(list, t, ',');) {
             if (t == "token") c.token = true;
             else if (t == "position") c.position = true;
             else if (t == "segment") c.segment = true;
             else throw usage_error("--tables = '" + a.text("tables", "") + "': '" + t +
                                    "' is not one of token, position, segment");
           }
         }
         return evaluate(Embedding<double>(c), in, g);
       }},
  };
  return table;
}

inline const ComponentEntry* find_component(const std::string& name) {
  for (const auto& e : component_table())
    if (name == e.name) return &e;
  return nullptr;
}

}  // namespace detail

inline void component_usage(std::ostream& out) {
  out << "usage: sigprop component NAME [--mean M] [--var V] [--corr-len R] [--corr-dim R]\n"
         "                          [--grad-var G] [--grad-corr-len R] [parameters]\n"
         "                          [--format text|json]\n"
         "\n"
         "Forward and backward moments of one component at initialization.\n"
         "Input defaults: mean 0, var 1, correlations 0, grad-var 1.\n"
         "\n"
         "NAME and its parameters (defaults in parentheses; weight variances are per entry):\n";
  for (const auto& e : detail::component_table())
    out << "  " << e.name << std::string(12 - std::string(e.name).size(), ' ') << e.help << "\n";
}

/// Runs `sigprop component ...`; `words` excludes "sigprop component".
inline int component_command(const std::vector<std::string>& words, std::ostream& out, std::ostream& warn) {
  static const std::set<std::string> state_flags = {"mean", "var", "corr-len", "corr-dim",
                                                    "grad-var", "grad-corr-len", "format"};
  // The component name is the first word that is not a flag or a flag's value.
  std::string name;
  if (!words.empty() && words[0].rfind("--", 0) != 0) name = words[0];
  if (name.empty()) throw usage_error("component: missing NAME (see sigprop component --help)");
  const detail::ComponentEntry* entry = detail::find_component(name);
  if (!entry) {
    std::string names;
    for (const auto& e : detail::component_table()) names += (names.empty() ? "" : ", ") + std::string(e.name);
    throw usage_error("component: unknown NAME '" + name + "' (one of " + names + ")");
  }
  std::set<std::string> allowed = state_flags;
  allowed.insert(entry->flags.begin(), entry->flags.end());
  const Args args(std::vector<std::string>(words.begin() + 1, words.end()), allowed);
  if (!args.positional().empty())
    throw usage_error("component: unexpected argument '" + args.positional()[0] + "'");
  const std::string format = args.choice("format", {"text", "json"}, "text");

  constexpr const char* fn = "sigprop component";
  Moments<double> in{args.number("mean", 0), args.number("var", 1), args.number("corr-len", 0),
                     args.number("corr-dim", 0)};
  GradMoments<double> grad{args.number("grad-var", 1), args.number("grad-corr-len", 0)};
  require_positive(fn, "--var", in.var);
  require_correlation(fn, "--corr-len", in.corr_len);
  require_correlation(fn, "--corr-dim", in.corr_dim);
  require_positive(fn, "--grad-var", grad.var);
  require_correlation(fn, "--grad-corr-len", grad.corr_len);

  const ComponentResult r = entry->run(args, in, grad);
  const bool outside = any(caveats(r.domain));
  if (outside) warn_outside_domain(name + " is", r.domain, warn);
  if (format == "json") {
    out << "{\"component\": " << quoted(name) << ", \"forward\": {\"mean\": " << exact(r.forward.mean)
        << ", \"var\": " << exact(r.forward.var) << ", \"corr_len\": " << exact(r.forward.corr_len)
        << ", \"corr_dim\": " << exact(r.forward.corr_dim) << "}, \"backward\": {\"grad_var\": "
        << exact(r.backward.var) << ", \"grad_corr_len\": " << exact(r.backward.corr_len)
        << "}, \"domain\": {\"score_var\": " << exact(r.domain.score_var) << ", \"key_weight\": "
        << exact(r.domain.key_weight) << ", \"width_term\": " << exact(r.domain.width_term)
        << ", \"outside\": " << (outside ? "true" : "false") << "}}\n";
  } else {
    out << "component " << name << "\n"
        << "forward   mean " << brief(r.forward.mean) << "  var " << brief(r.forward.var)
        << "  corr_len " << brief(r.forward.corr_len) << "  corr_dim " << brief(r.forward.corr_dim)
        << "\n"
        << "backward  grad_var " << brief(r.backward.var) << "  grad_corr_len "
        << brief(r.backward.corr_len) << "\n";
  }
  return 0;
}

}  // namespace sigprop::cli
