// python/src/module.cpp -- the extension module sigprop._sigprop: bindings of
// the model layer (linked compiled, sigprop::compiled), the command-line
// tool's component and sweep code (sigprop_cli_core) and the Hugging Face
// reader (io/hf_config.hpp). No formula here: values are converted, C++ is
// called, results are returned. The Python API on top: python/sigprop/,
// docs/python.md.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstddef>
#include <deque>
#include <functional>
#include <iterator>
#include <tuple>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli/args.hpp"
#include "cli/run.hpp"
#include "sigprop/io/hf_config.hpp"
#include "sigprop/models/measures.hpp"
#include "sigprop/models/positions.hpp"
#include "sigprop/models/schemes.hpp"
#include "sigprop/models/stack.hpp"
#include "sigprop/models/sweep.hpp"

namespace py = pybind11;
using namespace sigprop;

namespace {

constexpr const char* config_function = "sigprop.ModelConfig";

// The Python ModelConfig: the model shape, its embedding input, the K/V
// head count (grouped-query attention changes no moment at initialization,
// docs/decoders.md, so the trace does not read it), and the Hugging Face
// config it came from, if any.
struct PyModelConfig {
  ModelConfig config;
  InputSpec input;
  std::size_t kv_heads = 0;  // 0: as many as heads
  std::optional<io::HfConfig> hf;
};

// ---- conversions with the project's messages ---------------------------

[[noreturn]] void type_error(const std::string& name, const py::handle& value, const char* expected) {
  throw py::type_error(std::string(config_function) + ": " + name + " must be " + expected + ", not " +
                       std::string(py::str(py::type::of(value).attr("__name__"))));
}

bool is_bool(const py::handle& v) { return py::isinstance<py::bool_>(v); }

double to_double(const std::string& name, const py::handle& v) {
  if (is_bool(v) || !(py::isinstance<py::int_>(v) || py::isinstance<py::float_>(v) || py::hasattr(v, "__float__")))
    type_error(name, v, "a number");
  return py::cast<double>(py::float_(py::reinterpret_borrow<py::object>(v)));
}

// A count: a whole number >= 1 (widths, lengths, depths).
std::size_t to_count(const std::string& name, const py::handle& v, double min = 1) {
  const double x = to_double(name, v);
  require_width(config_function, name.c_str(), x, min);
  if (!(x <= cli::max_count && std::floor(x) == x))
    detail::raise_domain(config_function, name + " = " + detail::format_number(x) +
                                              " is outside the valid range: a whole number in [1, 1e+15]");
  return static_cast<std::size_t>(x);
}

bool to_bool(const std::string& name, const py::handle& v) {
  if (!is_bool(v)) type_error(name, v, "True or False");
  return v.cast<bool>();
}

std::string to_text(const std::string& name, const py::handle& v) {
  if (!py::isinstance<py::str>(v)) type_error(name, v, "a string");
  return v.cast<std::string>();
}

// ---- ModelConfig: one line per field ------------------------------------

using ConfigClass = py::class_<PyModelConfig>;
using Getter = std::function<py::object(const PyModelConfig&)>;
using Setter = std::function<void(PyModelConfig&, const py::handle&)>;

struct ConfigField {
  std::string name;
  Getter get;
  Setter set;
};

std::vector<ConfigField>& config_fields() {
  static std::vector<ConfigField> fields;
  return fields;
}

void add_field(ConfigClass& cls, const std::string& name, Getter get, Setter set, const char* doc) {
  config_fields().push_back({name, get, set});
  cls.def_property(
      name.c_str(), [get](const PyModelConfig& c) { return get(c); },
      [set](PyModelConfig& c, const py::object& v) { set(c, v); }, doc);
}

// A field of a reference into PyModelConfig: counts, numbers, flags.
template <class Ref>
void count_field(ConfigClass& cls, const std::string& name, Ref ref, const char* doc, double min = 1) {
  add_field(
      cls, name, [ref](const PyModelConfig& c) { return py::int_(static_cast<std::size_t>(ref(const_cast<PyModelConfig&>(c)))); },
      [ref, name, min](PyModelConfig& c, const py::handle& v) { ref(c) = static_cast<std::decay_t<decltype(ref(c))>>(to_count(name, v, min)); },
      doc);
}
template <class Ref>
void number_field(ConfigClass& cls, const std::string& name, Ref ref, const char* doc) {
  add_field(
      cls, name, [ref](const PyModelConfig& c) { return py::float_(ref(const_cast<PyModelConfig&>(c))); },
      [ref, name](PyModelConfig& c, const py::handle& v) { ref(c) = to_double(name, v); }, doc);
}
template <class Ref>
void flag_field(ConfigClass& cls, const std::string& name, Ref ref, const char* doc) {
  add_field(
      cls, name, [ref](const PyModelConfig& c) { return py::bool_(ref(const_cast<PyModelConfig&>(c))); },
      [ref, name](PyModelConfig& c, const py::handle& v) { ref(c) = to_bool(name, v); }, doc);
}
// An enumeration bound with py::enum_ (a new C++ value is one .value line
// there): read as its name, set from the name or the enum.
template <class E, class Ref>
void enum_field(ConfigClass& cls, const std::string& name, const py::object& type, Ref ref, const char* doc) {
  add_field(
      cls, name, [ref](const PyModelConfig& c) { return py::object(py::cast(ref(const_cast<PyModelConfig&>(c))).attr("name")); },
      [ref, name, type](PyModelConfig& c, const py::handle& v) {
        if (py::isinstance(v, type)) {
          ref(c) = v.cast<E>();
          return;
        }
        const std::string s = to_text(name, v);
        const py::dict members = type.attr("__members__");
        if (!members.contains(s)) {
          std::string all;
          for (const auto& item : members) all += (all.empty() ? "" : ", ") + item.first.cast<std::string>();
          detail::raise_domain(config_function, name, "'" + s + "'", "{" + all + "}");
        }
        ref(c) = members[py::str(s)].cast<E>();
      },
      doc);
}

#define SIGPROP_REF(expr) [](PyModelConfig & c) -> auto& { return expr; }

void bind_config_fields(ConfigClass& cls, const py::object& activation, const py::object& norm,
                        const py::object& gradient, const py::object& logit_scale) {
  // arch: the architecture, or a preset applied to the current sizes
  // (models/config.hpp, with_architecture).
  add_field(
      cls, "arch", [](const PyModelConfig& c) { return py::str(to_string(c.config.arch)); },
      [](PyModelConfig& c, const py::handle& v) {
        const std::string name = to_text("arch", v);
        c.config = with_architecture(c.config, name);
        c.input = with_architecture(c.input, name);  // the presets' embedding tables
      },
      "pre-ln | post-ln | no-ln, or the presets llama, gpt2 (set: applies the preset)");
  count_field(cls, "layers", SIGPROP_REF(c.config.layers), "N");
  count_field(cls, "d", SIGPROP_REF(c.config.d), "model width");
  count_field(cls, "heads", SIGPROP_REF(c.config.heads), "attention heads H");
  add_field(
      cls, "kv_heads",
      [](const PyModelConfig& c) { return py::int_(c.kv_heads ? c.kv_heads : c.config.heads); },
      [](PyModelConfig& c, const py::handle& v) { c.kv_heads = to_count("kv_heads", v); },
      "K/V heads (grouped-query attention: no change to the moments at initialization, docs/decoders.md)");
  count_field(cls, "ffn_mult", SIGPROP_REF(c.config.ffn_mult), "FFN width multiple m (when ffn_width is not set)");
  add_field(
      cls, "ffn_width", [](const PyModelConfig& c) { return py::int_(c.config.hidden_width()); },
      [](PyModelConfig& c, const py::handle& v) { c.config.ffn_hidden = to_count("ffn_width", v); },
      "FFN hidden width (default ffn_mult d)");
  enum_field<FfnActivation>(cls, "activation", activation, SIGPROP_REF(c.config.activation), "FFN activation");
  count_field(cls, "seq_len", SIGPROP_REF(c.config.seq_len), "sequence length L", 2);
  number_field(cls, "dropout", SIGPROP_REF(c.config.dropout), "dropout probability p");
  add_field(
      cls, "attention_dropout",
      [](const PyModelConfig& c) -> py::object {
        if (!c.config.attention_dropout) return py::none();
        return py::float_(*c.config.attention_dropout);
      },
      [](PyModelConfig& c, const py::handle& v) {
        if (v.is_none()) c.config.attention_dropout.reset();
        else c.config.attention_dropout = to_double("attention_dropout", v);
      },
      "dropout on the attention probabilities (None: dropout)");
  number_field(cls, "ffn_dropout", SIGPROP_REF(c.config.ffn_dropout), "dropout after the FFN activation");
  number_field(cls, "initializer_range", SIGPROP_REF(c.config.initializer_range),
               "the std of the bert, gpt2 and llama schemes");
  number_field(cls, "ln_gain", SIGPROP_REF(c.config.ln_gain), "every norm's initial gain");
  number_field(cls, "ln_bias", SIGPROP_REF(c.config.ln_bias), "every LayerNorm's initial bias");
  flag_field(cls, "final_layernorm", SIGPROP_REF(c.config.final_layernorm), "Pre-LN: a norm after the last layer");
  enum_field<AttentionGradient>(cls, "attention_gradient", gradient, SIGPROP_REF(c.config.attention_gradient),
                                "all_paths or value_path_only (the paper's B.8)");
  enum_field<Norm>(cls, "norm", norm, SIGPROP_REF(c.config.norm), "layernorm or rmsnorm");
  enum_field<LogitScale>(cls, "logit_scale", logit_scale, SIGPROP_REF(c.config.logit_scale),
                         "attention logits over sqrt(d_k) (inv_sqrt_dk) or d_k (inv_dk, muP)");
  flag_field(cls, "causal", SIGPROP_REF(c.config.causal), "causal attention mask");
  flag_field(cls, "gated_ffn", SIGPROP_REF(c.config.gated_ffn), "gated FFN act(x W1) * (x V)");
  number_field(cls, "rotary_base", SIGPROP_REF(c.config.rotary_base), "rotary position embeddings' base (0: none)");
  number_field(cls, "vocab", SIGPROP_REF(c.input.vocab), "vocabulary size of the token table");
  flag_field(cls, "token_table", SIGPROP_REF(c.input.token), "embedding: a token table");
  flag_field(cls, "position_table", SIGPROP_REF(c.input.position), "embedding: a learned position table");
  flag_field(cls, "segment_table", SIGPROP_REF(c.input.segment), "embedding: a segment table");
  number_field(cls, "embedding_scale", SIGPROP_REF(c.input.embedding_scale), "multiplier on the summed tables");
  flag_field(cls, "embedding_layernorm", SIGPROP_REF(c.input.embedding_layernorm), "a LayerNorm on the embedding");
}

void check_config(const PyModelConfig& c) {
  c.config.validate(config_function);
  require_width(config_function, "vocab", c.input.vocab);
  if (c.kv_heads && c.config.heads % c.kv_heads != 0)
    detail::raise_domain(config_function, "kv_heads = " + std::to_string(c.kv_heads) +
                                              " is outside the valid range: a divisor of heads = " +
                                              std::to_string(c.config.heads));
}

void set_from(PyModelConfig& c, const py::dict& values, bool arch) {
  for (const auto& item : values) {
    const std::string key = py::str(item.first);
    if ((key == "arch") != arch) continue;
    bool known = false;
    for (const ConfigField& f : config_fields())
      if (f.name == key) {
        f.set(c, item.second);
        known = true;
      }
    if (!known) throw py::type_error(std::string(config_function) + "() got an unexpected keyword argument '" + key + "'");
  }
}

// Keyword arguments: everything but arch, then arch (a preset reads the
// sizes), then everything again (explicit values win over the preset).
PyModelConfig make_config(const py::dict& kwargs) {
  PyModelConfig c;
  set_from(c, kwargs, false);
  set_from(c, kwargs, true);
  set_from(c, kwargs, false);
  check_config(c);
  return c;
}

py::dict config_dict(const PyModelConfig& c) {
  py::dict d;
  for (const ConfigField& f : config_fields()) d[py::str(f.name)] = f.get(c);
  return d;
}

py::object hf_dict(const PyModelConfig& c) {
  if (!c.hf) return py::none();
  const io::HfConfig& h = *c.hf;
  py::dict d;
  d["model_type"] = h.model_type;
  d["kv_heads"] = h.kv_heads;
  d["activation"] = h.activation;
  d["norm_eps"] = h.norm_eps;
  d["initializer_range"] = h.initializer_range;
  d["scheme"] = to_string(h.scheme);
  d["max_positions"] = h.max_positions;
  d["type_vocab_size"] = h.type_vocab_size;
  d["hidden_dropout"] = h.hidden_dropout;
  d["attention_dropout"] = h.attention_dropout;
  d["embedding_dropout"] = h.embedding_dropout;
  d["tie_word_embeddings"] = h.tie_word_embeddings;
  d["qkv_bias"] = h.qkv_bias;
  d["learned_positions"] = h.learned_positions;
  return d;
}

PyModelConfig from_hf(io::HfConfig h) {
  PyModelConfig c;
  c.config = h.config;
  c.input = h.input;
  c.kv_heads = h.kv_heads;
  c.hf = std::move(h);
  return c;
}

// ---- traces as columns ---------------------------------------------------

// The names of Domain's fields (core/domain.hpp, in the order of fields()).
constexpr const char* domain_names[] = {"score_var", "key_weight", "width_term"};
static_assert(std::tuple_size_v<decltype(Domain<double>{}.fields())> == std::size(domain_names));

// f(name, value) for every number of a trace row, named as the CLI's columns.
template <class Row, class F>
void row_columns(Row& r, const std::string& prefix, F&& f) {
  std::size_t k = 0;
  for_each_field([&](auto& x) { f(prefix + Moments<double>::field_names[k++], x); }, r.forward);
  k = 0;
  for_each_field([&](auto& x) { f(prefix + GradMoments<double>::field_names[k++], x); }, r.backward);
  k = 0;
  for_each_field([&](auto& x) { f(prefix + domain_names[k++], x); }, r.domain);
  f(prefix + "branch_var", r.branch_var);
  f(prefix + "residual_share", r.residual_share);
}

// The columns of trace rows (length N + 1; the mid columns NaN at row 0,
// where the CLI prints null).
py::dict trace_columns(const Trace& t) {
  const std::size_t rows = t.rows.size();
  std::deque<std::pair<std::string, std::vector<double>>> columns;  // references stay valid
  const auto column = [&](const std::string& name) -> std::vector<double>& {
    for (auto& c : columns)
      if (c.first == name) return c.second;
    columns.emplace_back(name, std::vector<double>(rows, NAN));
    return columns.back().second;
  };
  std::vector<double>& layer = column("layer");
  for (std::size_t n = 0; n < rows; ++n) {
    layer[n] = static_cast<double>(t.rows[n].layer);
    row_columns(t.rows[n], "", [&](const std::string& name, double x) { column(name)[n] = x; });
  }
  for (std::size_t n = 1; n < rows; ++n)
    row_columns(t.mid[n - 1], "mid_", [&](const std::string& name, double x) { column(name)[n] = x; });
  py::dict d;
  for (auto& [name, values] : columns) d[py::str(name)] = py::array_t<double>(values.size(), values.data());
  py::array_t<bool> flags(rows);
  for (std::size_t n = 0; n < rows; ++n) flags.mutable_at(n) = any(t.rows[n].caveats());
  d["outside_domain"] = flags;
  d["layer"] = d["layer"].attr("astype")("int64");
  return d;
}

py::dict row_dict(const TraceRow& r) {
  py::dict d;
  row_columns(r, "", [&](const std::string& name, double x) { d[py::str(name)] = x; });
  return d;
}

py::dict trace_result(const Trace& t) {
  py::dict d;
  d["columns"] = trace_columns(t);
  d["output"] = row_dict(t.output);
  d["output_change"] = output_change(t);
  d["sensitivity"] = sensitivity(t);
  return d;
}

template <class M>
py::dict moments_dict(const M& m) {
  py::dict d;
  std::size_t k = 0;
  for_each_field([&](const double& x) { d[py::str(M::field_names[k++])] = x; }, m);
  return d;
}

// Position traces: rows[n][j] -> 2-D columns [layer, position].
template <class M>
py::dict position_columns(const std::vector<std::vector<M>>& rows, const std::vector<std::vector<M>>& mid,
                          std::size_t positions, bool mid_from_one) {
  // mid[n - 1] belongs to row n (after layer n's attention sublayer).
  py::dict d;
  const std::size_t n_rows = rows.size();
  constexpr std::size_t count = std::tuple_size_v<decltype(std::declval<M&>().fields())>;
  for (std::size_t k = 0; k < count; ++k) {
    py::array_t<double> col({n_rows, positions}), mcol({n_rows, positions});
    for (std::size_t n = 0; n < n_rows; ++n)
      for (std::size_t j = 0; j < positions; ++j) {
        std::size_t i = 0;
        for_each_field([&](const double& x) { if (i++ == k) col.mutable_at(n, j) = x; }, rows[n][j]);
        const std::size_t m = mid_from_one ? n - 1 : n;
        double v = NAN;
        if ((!mid_from_one || n > 0) && m < mid.size()) {
          i = 0;
          for_each_field([&](const double& x) { if (i++ == k) v = x; }, mid[m][j]);
        }
        mcol.mutable_at(n, j) = v;
      }
    d[py::str(M::field_names[k])] = col;
    d[py::str("mid_" + std::string(M::field_names[k]))] = mcol;
  }
  return d;
}

template <class M>
M moments_from(const py::kwargs& kw) {
  M m;
  for (const auto& item : kw) {
    const std::string key = py::str(item.first);
    std::size_t k = 0;
    bool known = false;
    for_each_field(
        [&](double& x) {
          const std::string field = M::field_names[k++];
          // The attribute name (GradMoments: without "grad_") or the field's.
          if (key == field || (field.rfind("grad_", 0) == 0 && key == field.substr(5))) {
            x = to_double(key, item.second);
            known = true;
          }
        },
        m);
    if (!known) throw py::type_error("unexpected keyword argument '" + key + "'");
  }
  return m;
}

template <class M>
void bind_moments(py::module_& m, const char* name, const char* doc) {
  py::class_<M> cls(m, name, doc);
  cls.def(py::init([](const py::kwargs& kw) { return moments_from<M>(kw); }));
  constexpr std::size_t count = std::tuple_size_v<decltype(std::declval<M&>().fields())>;
  for (std::size_t k = 0; k < count; ++k) {
    std::string field = M::field_names[k];
    // GradMoments' names carry "grad_" (as in messages); attributes drop it.
    const std::string attribute = field.rfind("grad_", 0) == 0 ? field.substr(5) : field;
    cls.def_property(
        attribute.c_str(),
        [k](const M& x) {
          double v = 0;
          std::size_t i = 0;
          for_each_field([&](const double& f) { if (i++ == k) v = f; }, x);
          return v;
        },
        [k, field](M& x, const py::object& value) {
          const double v = to_double(field, value);
          std::size_t i = 0;
          for_each_field([&](double& f) { if (i++ == k) f = v; }, x);
        });
  }
  cls.def("to_dict", [](const M& x) { return moments_dict(x); });
  cls.def("__repr__", [name](const M& x) {
    return std::string(name) + "(" + std::string(py::str(moments_dict(x))) + ")";
  });
}

std::optional<std::size_t> seq_len_of(const py::object& v) {
  if (v.is_none()) return std::nullopt;
  return to_count("seq_len", v, 2);
}

Scheme scheme_of(const py::handle& s) { return scheme_from_string(to_text("scheme", s)); }

}  // namespace

PYBIND11_MODULE(_sigprop, m) {
  m.doc() = "sigprop's C++ core (docs/python.md): bindings only";

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const cli::usage_error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  bind_moments<Moments<double>>(m, "Moments", "Forward moments of one activation entry (core/moments.hpp)");
  bind_moments<GradMoments<double>>(m, "GradMoments", "Moments of the gradient (core/moments.hpp)");

  // The enumerations: a new C++ value is one .value line.
  py::enum_<FfnActivation> activation(m, "Activation");
  activation.value("relu", FfnActivation::relu)
      .value("gelu", FfnActivation::gelu)
      .value("silu", FfnActivation::silu)
      .value("gelu_tanh", FfnActivation::gelu_tanh);
  py::enum_<Norm> norm(m, "Norm");
  norm.value("layernorm", Norm::layernorm).value("rmsnorm", Norm::rmsnorm);
  py::enum_<AttentionGradient> gradient(m, "AttentionGradient");
  gradient.value("all_paths", AttentionGradient::all_paths)
      .value("value_path_only", AttentionGradient::value_path_only);
  py::enum_<LogitScale> logit_scale(m, "LogitScale");
  logit_scale.value("inv_sqrt_dk", LogitScale::inv_sqrt_dk).value("inv_dk", LogitScale::inv_dk);

  ConfigClass config(m, "ModelConfig", "A transformer's shape and embedding (models/config.hpp; docs/python.md)");
  bind_config_fields(config, activation, norm, gradient, logit_scale);
  config.def(py::init([](const py::kwargs& kwargs) { return make_config(kwargs); }))
      .def("validate", &check_config)
      .def("to_dict", &config_dict)
      .def_property_readonly("hf", &hf_dict, "the Hugging Face config's parsed values, or None")
      .def_property_readonly("architecture_name",
                             [](const PyModelConfig& c) { return architecture_name(c.config); })
      .def("copy", [](const PyModelConfig& c) { return c; })
      .def("__eq__", [](const PyModelConfig& a, const PyModelConfig& b) {
        return config_dict(a).equal(config_dict(b));
      })
      .def("__repr__", [](const PyModelConfig& c) {
        std::string s = "ModelConfig(";
        bool first = true;
        for (const auto& item : config_dict(c)) {
          s += (first ? "" : ", ") + std::string(py::str(item.first)) + "=" + std::string(py::repr(item.second));
          first = false;
        }
        return s + ")";
      })
      .def(py::pickle([](const PyModelConfig& c) { return config_dict(c); },
                      [](const py::dict& d) { return make_config(d); }));

  py::class_<LayerWeights>(m, "LayerWeights", "Per-entry weight variances and residual scales of one layer")
      .def(py::init<>())
      .def_readwrite("q", &LayerWeights::q)
      .def_readwrite("k", &LayerWeights::k)
      .def_readwrite("v", &LayerWeights::v)
      .def_readwrite("o", &LayerWeights::o)
      .def_readwrite("ffn1", &LayerWeights::ffn1)
      .def_readwrite("ffn2", &LayerWeights::ffn2)
      .def_readwrite("ffn_gate", &LayerWeights::ffn_gate)
      .def_readwrite("attn_skip", &LayerWeights::attn_skip)
      .def_readwrite("attn_branch", &LayerWeights::attn_branch)
      .def_readwrite("ffn_skip", &LayerWeights::ffn_skip)
      .def_readwrite("ffn_branch", &LayerWeights::ffn_branch)
      .def_readwrite("q_bias", &LayerWeights::q_bias)
      .def_readwrite("k_bias", &LayerWeights::k_bias)
      .def_readwrite("v_bias", &LayerWeights::v_bias)
      .def_readwrite("o_bias", &LayerWeights::o_bias)
      .def_readwrite("ffn1_bias", &LayerWeights::ffn1_bias)
      .def_readwrite("ffn2_bias", &LayerWeights::ffn2_bias)
      .def_readwrite("ffn_gate_bias", &LayerWeights::ffn_gate_bias);
  py::class_<ModelWeights>(m, "ModelWeights", "An initialization: input moments and each layer's weights")
      .def(py::init<>())
      .def_readwrite("input", &ModelWeights::input)
      .def_readwrite("embedding_var", &ModelWeights::embedding_var)
      .def_readwrite("embedding_scale", &ModelWeights::embedding_scale)
      .def_readwrite("embedding_layernorm", &ModelWeights::embedding_layernorm)
      .def_readwrite("embedding_output", &ModelWeights::embedding_output)
      .def_readwrite("layers", &ModelWeights::layers);

  m.def(
      "initialize",
      [](const PyModelConfig& c, const py::handle& scheme, std::optional<double> beta2_k,
         std::optional<double> beta2_alpha, const py::dict& overrides) {
        check_config(c);
        ResidualScaling scaling;
        scaling.enabled = beta2_k || beta2_alpha;
        scaling.k = beta2_k.value_or(scaling.k);
        scaling.alpha = beta2_alpha.value_or(scaling.alpha);
        WeightOverrides w;
        for (const auto& item : overrides) {
          const std::string key = py::str(item.first);
          std::optional<double>* slot = key == "embedding_var" ? &w.embedding
                                        : key == "q_var"       ? &w.q
                                        : key == "k_var"       ? &w.k
                                        : key == "v_var"       ? &w.v
                                        : key == "o_var"       ? &w.o
                                        : key == "ffn1_var"    ? &w.ffn1
                                        : key == "ffn2_var"    ? &w.ffn2
                                                               : nullptr;
          if (!slot) throw py::type_error("initialize() got an unexpected keyword argument '" + key + "'");
          const double v = to_double(key, item.second);
          require_variance("sigprop.initialize", key.c_str(), v);
          *slot = v;
        }
        const Scheme s = scheme_of(scheme);
        py::gil_scoped_release release;
        return initialize(c.config, s, c.input, scaling, w);
      },
      py::arg("config"), py::arg("scheme"), py::arg("beta2_k") = py::none(), py::arg("beta2_alpha") = py::none(),
      py::arg("overrides") = py::dict());

  m.def(
      "trace",
      [](const PyModelConfig& c, const ModelWeights& w, const GradMoments<double>& grad, bool position_gradients) {
        check_config(c);
        Trace t;
        {
          py::gil_scoped_release release;
          t = trace(c.config, w, grad);
          // Causal Pre-LN: every row's gradient the average over the
          // positions, as `sigprop table` prints it (models/positions.hpp).
          if (position_gradients && has_position_gradients(c.config))
            t = with_position_gradients(std::move(t), trace_position_gradients(c.config, w, {1}, grad));
        }
        return trace_result(t);
      },
      py::arg("config"), py::arg("weights"), py::arg("grad"), py::arg("position_gradients") = true);

  // The model input of an embedding whose tables have their own variances
  // (models/schemes.hpp embedding_moments): the embedding's output and the
  // input after the embedding LayerNorm, if any.
  m.def(
      "embedding_input",
      [](const PyModelConfig& c, double token_var, double position_var, double segment_var, double scale) {
        check_config(c);
        const EmbeddingMoments e =
            embedding_moments(c.config, c.input, TableVariances{token_var, position_var, segment_var}, scale);
        return py::make_tuple(e.output, e.input);
      },
      py::arg("config"), py::arg("token_var"), py::arg("position_var"), py::arg("segment_var"), py::arg("scale") = 1.0);

  m.def(
      "trace_batch",
      [](const std::vector<PyModelConfig>& cs, const std::vector<ModelWeights>& ws,
         const GradMoments<double>& grad) {
        std::vector<ModelConfig> configs;
        for (const PyModelConfig& c : cs) {
          check_config(c);
          configs.push_back(c.config);
        }
        std::vector<Trace> traces;
        {
          py::gil_scoped_release release;
          const BatchTrace b = trace_batch(configs, ws, grad);
          for (std::size_t i = 0; i < configs.size(); ++i) traces.push_back(lane_of(b, i));
        }
        py::list out;
        for (const Trace& t : traces) out.append(trace_result(t));
        return out;
      },
      py::arg("configs"), py::arg("weights"), py::arg("grad"));

  m.def(
      "trace_positions",
      [](const PyModelConfig& c, const ModelWeights& w, std::vector<std::size_t> positions) {
        check_config(c);
        PositionTrace p;
        {
          py::gil_scoped_release release;
          p = trace_positions(c.config, w, std::move(positions));
        }
        py::dict d = position_columns(p.rows, p.mid, p.positions.size(), true);
        d["position"] = py::array_t<std::size_t>(p.positions.size(), p.positions.data());
        return d;
      },
      py::arg("config"), py::arg("weights"), py::arg("positions"));

  m.def(
      "trace_position_gradients",
      [](const PyModelConfig& c, const ModelWeights& w, std::vector<std::size_t> positions,
         const GradMoments<double>& grad) {
        check_config(c);
        PositionGradientTrace p;
        {
          py::gil_scoped_release release;
          p = trace_position_gradients(c.config, w, std::move(positions), grad);
        }
        py::dict d = position_columns(p.rows, p.mid, p.positions.size(), true);
        d["position"] = py::array_t<std::size_t>(p.positions.size(), p.positions.data());
        return d;
      },
      py::arg("config"), py::arg("weights"), py::arg("positions"), py::arg("grad"));

  m.def("schemes", [] {
    py::list out;
    for (const SchemeInfo& i : schemes()) {
      py::dict d;
      d["name"] = i.name;
      d["arch"] = to_string(i.arch);
      d["reference"] = i.reference;
      out.append(d);
    }
    return out;
  });

  m.def(
      "read_hf_config",
      [](const std::string& path, const py::object& seq_len) {
        return from_hf(io::read_hf_config(path, seq_len_of(seq_len)));
      },
      py::arg("path"), py::arg("seq_len"));
  m.def(
      "parse_hf_config",
      [](const std::string& text, const py::object& seq_len) {
        return from_hf(io::parse_hf_config(text, seq_len_of(seq_len)));
      },
      py::arg("text"), py::arg("seq_len"));

  // The command-line tool's components and sweep (cli/run.hpp).
  py::class_<cli::ComponentResult>(m, "ComponentResult")
      .def_readonly("forward", &cli::ComponentResult::forward)
      .def_readonly("backward", &cli::ComponentResult::backward)
      .def_property_readonly("domain", [](const cli::ComponentResult& r) {
        py::dict d;
        std::size_t k = 0;
        for_each_field([&](const double& x) { d[domain_names[k++]] = x; }, r.domain);
        return d;
      });
  m.def("components", [] {
    py::list out;
    for (const cli::ComponentInfo& i : cli::components()) out.append(py::make_tuple(i.name, i.parameters, i.help));
    return out;
  });
  m.def("evaluate_component", &cli::evaluate_component, py::arg("name"), py::arg("parameters"), py::arg("input"),
        py::arg("grad"));

  m.def(
      "sweep_table",
      [](const std::vector<std::string>& words) {
        std::vector<cli::SweepRow> rows;
        {
          py::gil_scoped_release release;
          rows = cli::sweep_table(words);
        }
        py::dict d;
        const auto column = [&](const char* name, auto get) {
          py::list values;
          for (const cli::SweepRow& r : rows) values.append(get(r));
          d[name] = values;
        };
        column("arch", [](const cli::SweepRow& r) { return r.arch; });
        column("scheme", [](const cli::SweepRow& r) { return r.scheme; });
        column("layers", [](const cli::SweepRow& r) { return r.layers; });
        column("d", [](const cli::SweepRow& r) { return r.d; });
        column("heads", [](const cli::SweepRow& r) { return r.heads; });
        column("dropout", [](const cli::SweepRow& r) { return r.dropout; });
        column("beta2_k", [](const cli::SweepRow& r) { return r.beta2_k; });
        column("beta2_alpha", [](const cli::SweepRow& r) { return r.beta2_alpha; });
        column("final_var", [](const cli::SweepRow& r) { return r.summary.final_var; });
        column("final_corr_len", [](const cli::SweepRow& r) { return r.summary.final_corr_len; });
        column("var_min", [](const cli::SweepRow& r) { return r.summary.var_min; });
        column("var_max", [](const cli::SweepRow& r) { return r.summary.var_max; });
        column("grad_min", [](const cli::SweepRow& r) { return r.summary.grad_min; });
        column("grad_max", [](const cli::SweepRow& r) { return r.summary.grad_max; });
        column("grad_ratio", [](const cli::SweepRow& r) { return r.summary.grad_ratio; });
        column("within_bounds", [](const cli::SweepRow& r) { return r.summary.within_bounds; });
        column("outside_domain", [](const cli::SweepRow& r) { return r.summary.outside_domain; });
        column("output_change", [](const cli::SweepRow& r) { return r.summary.output_change; });
        column("sensitivity", [](const cli::SweepRow& r) { return r.summary.sensitivity; });
        column("overflow", [](const cli::SweepRow& r) { return r.summary.overflow; });
        return d;
      },
      py::arg("words"));
}
