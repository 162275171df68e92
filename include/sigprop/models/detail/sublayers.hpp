// sigprop/models/detail/sublayers.hpp -- the one place where a model's
// runtime settings (arch, norm, activation, causal, gated) become the types
// of its composed sublayers:
//   Pre-LN : residual(serial(Norm(d), block), lambda, beta)
//   Post-LN: serial(residual(block, lambda, beta), Norm(d))
//   no LN  : residual(block, lambda, beta)
// block = attention_block / causal_attention_block, or ffn_block<Act> /
// glu_ffn_block<Act>; Norm = LayerNorm or RMSNorm; Act = Relu, Gelu or Silu
// (with_activation; gelu_tanh is Gelu with GeluForm::tanh, activation_of). Kedia et al. (ICML 2024), section 2; docs/models.md.
#pragma once

#include <any>
#include <cstddef>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "sigprop/blocks/attention_block.hpp"
#include "sigprop/blocks/ffn_block.hpp"
#include "sigprop/blocks/residual.hpp"
#include "sigprop/components/gelu.hpp"
#include "sigprop/components/layernorm.hpp"
#include "sigprop/components/relu.hpp"
#include "sigprop/components/rmsnorm.hpp"
#include "sigprop/components/silu.hpp"
#include "sigprop/models/stack.hpp"

namespace sigprop {

/// What every lane of a stack shares: its structure.
struct StackStructure {
  Arch arch = Arch::pre_ln;
  FfnActivation activation = FfnActivation::relu;
  bool final_layernorm = false;
  AttentionGradient attention_gradient = AttentionGradient::all_paths;
  Norm norm = Norm::layernorm;
  bool causal = false, gated = false;
  RotaryEmbedding rotary;
  LogitScale logit_scale = LogitScale::inv_sqrt_dk;
  std::size_t layers = 0;

  auto tied() const {
    return std::tie(arch, activation, final_layernorm, attention_gradient, norm, causal, gated, rotary.base,
                    logit_scale, layers);
  }
  bool operator==(const StackStructure& o) const { return tied() == o.tied(); }
  bool operator!=(const StackStructure& o) const { return !(*this == o); }
};

/// A stack's structure and the sizes that may differ from lane to lane.
template <class T>
struct StackShape : StackStructure {
  T d, heads, hidden, seq_len, dropout;  ///< hidden: the FFN's hidden width
  T ln_gain, ln_bias;                    ///< the norms' affine gain and (LayerNorm) bias
  T attention_dropout, ffn_dropout;      ///< on the attention probabilities; after the FFN activation

  /// The sizes that may differ from lane to lane (see Moments::fields).
  auto fields() {
    return std::tie(d, heads, hidden, seq_len, dropout, ln_gain, ln_bias, attention_dropout, ffn_dropout);
  }
  auto fields() const {
    return std::tie(d, heads, hidden, seq_len, dropout, ln_gain, ln_bias, attention_dropout, ffn_dropout);
  }

  /// The shared structure, to copy from one shape to another.
  StackStructure& structure() { return *this; }
};

/// The weights of one layer for every lane of a batch (LayerWeights, lane-wise).
template <class T>
struct BatchLayerWeights {
  T q, k, v, o, ffn1, ffn2, ffn_gate, attn_skip, attn_branch, ffn_skip, ffn_branch;
  T q_bias, k_bias, v_bias, o_bias, ffn1_bias, ffn2_bias, ffn_gate_bias;

  auto fields() {
    return std::tie(q, k, v, o, ffn1, ffn2, ffn_gate, attn_skip, attn_branch, ffn_skip, ffn_branch, q_bias, k_bias,
                    v_bias, o_bias, ffn1_bias, ffn2_bias, ffn_gate_bias);
  }
  auto fields() const {
    return std::tie(q, k, v, o, ffn1, ffn2, ffn_gate, attn_skip, attn_branch, ffn_skip, ffn_branch, q_bias, k_bias,
                    v_bias, o_bias, ffn1_bias, ffn2_bias, ffn_gate_bias);
  }
};

namespace detail {

/// A type handed to a generic lambda: f(type_tag<Relu<T>>{}).
template <class T>
struct type_tag {
  using type = T;
};

// The FFN activation as a type, handed to `apply`: apply(type_tag<Relu<T>>{}).
template <class T, class Apply>
auto with_activation(FfnActivation activation, Apply apply) {
  switch (activation) {
    case FfnActivation::relu: return apply(type_tag<Relu<T>>{});
    case FfnActivation::gelu:
    case FfnActivation::gelu_tanh: return apply(type_tag<Gelu<T>>{});
    case FfnActivation::silu: break;
  }
  return apply(type_tag<Silu<T>>{});
}

inline StackStructure structure_of(const ModelConfig& c) {
  StackStructure s;
  s.arch = c.arch;
  s.activation = c.activation;
  s.final_layernorm = c.final_layernorm;
  s.attention_gradient = c.attention_gradient;
  s.norm = c.norm;
  s.causal = c.causal;
  s.gated = c.gated_ffn;
  s.rotary = {c.rotary_base};
  s.logit_scale = c.logit_scale;
  s.layers = c.layers;
  return s;
}

inline StackShape<double> shape_of(const ModelConfig& c) {
  StackShape<double> s;
  s.structure() = structure_of(c);
  s.d = static_cast<double>(c.d);
  s.heads = static_cast<double>(c.heads);
  s.hidden = static_cast<double>(c.hidden_width());
  s.seq_len = static_cast<double>(c.seq_len);
  s.dropout = c.dropout;
  s.ln_gain = c.ln_gain;
  s.ln_bias = c.ln_bias;
  s.attention_dropout = c.attention_p();
  s.ffn_dropout = c.ffn_dropout;
  return s;
}

// Which sublayer of a layer: its residual scales in LayerWeights.
enum class Sublayer { attention, ffn };

template <class T, class W>
T skip_of(const W& w, Sublayer which) {
  return T(which == Sublayer::attention ? w.attn_skip : w.ffn_skip);
}
template <class T, class W>
T branch_of(const W& w, Sublayer which) {
  return T(which == Sublayer::attention ? w.attn_branch : w.ffn_branch);
}

// A sublayer around `block`, placed according to the architecture, handed to
// `apply` (the composed component). W is LayerWeights (scalar) or
// BatchLayerWeights<T>.
template <class T, class W, class Block, class Apply>
auto with_sublayer(const StackShape<T>& s, const W& w, Sublayer which, Block block, Apply apply) {
  const T skip = skip_of<T>(w, which), branch = branch_of<T>(w, which);
  const bool rms = s.norm == Norm::rmsnorm;
  switch (s.arch) {
    case Arch::pre_ln:
      if (rms) return apply(residual(serial(RmsNorm<T>(s.d, s.ln_gain), std::move(block)), skip, branch));
      return apply(residual(serial(LayerNorm<T>(s.d, s.ln_gain, s.ln_bias), std::move(block)), skip, branch));
    case Arch::post_ln:
      if (rms) return apply(serial(residual(std::move(block), skip, branch), RmsNorm<T>(s.d, s.ln_gain)));
      return apply(serial(residual(std::move(block), skip, branch), LayerNorm<T>(s.d, s.ln_gain, s.ln_bias)));
    case Arch::no_ln: break;
  }
  return apply(residual(std::move(block), skip, branch));
}

// The stack's normalization (LayerNorm or RMSNorm) handed to `apply`.
template <class T, class Apply>
auto with_norm(const StackShape<T>& s, Apply apply) {
  if (s.norm == Norm::rmsnorm) return apply(RmsNorm<T>(s.d, s.ln_gain));
  return apply(LayerNorm<T>(s.d, s.ln_gain, s.ln_bias));
}

// The residual stage of a composed sublayer (see with_sublayer).
template <class T, class Sub>
const auto& residual_of(const Sub& sub) {
  if constexpr (is_serial_v<Sub>) return sub.template part<0>();
  else return sub;
}

// Forward through a sublayer, keeping the branch variance, Admin's
// beta_{i,i}^2 of its residual sum and the validity measures: all from one
// recorded forward pass (core/record.hpp).
template <class T>
struct SublayerForward {
  Moments<T> out;
  T branch_var, residual_share;
  Domain<T> domain;
};

// A composed sublayer's output given its residual sum: the sum itself, or
// in Post-LN the LayerNorm that follows it.
template <class T, class Sub>
Moments<T> after_residual(const Sub& sub, const Moments<T>& sum) {
  if constexpr (is_serial_v<Sub>) return sub.template part<1>().forward(sum);
  else return sum;
}

// The record (core/record.hpp) of a composed sublayer's residual stage.
template <class Sub>
const auto& residual_record_of(const detail::record_t<Sub>& record) {
  if constexpr (is_serial_v<Sub>) return std::get<0>(record);
  else return record;
}

// A composed sublayer's residual sum given its record and output: the
// output, or in Post-LN the input of the LayerNorm that follows it.
template <class T, class Sub>
const Moments<T>& residual_sum_of(const detail::record_t<Sub>& record, const Moments<T>& out) {
  if constexpr (is_serial_v<Sub>) return detail::recorded_input(std::get<1>(record));
  else return out;
}

// The records of one kind of sublayer's forward passes, one per layer, kept
// for the backward pass: a std::vector of the composed sublayer's record
// type (core/record.hpp), which with_sublayer and with_block choose at run
// time, hence the std::any (one allocation per trace and kind of sublayer).
struct SublayerRecords {
  std::any records;
  std::size_t layers = 0;  // reserved on first use
};

template <class Sub>
std::vector<detail::record_t<Sub>>& records_of(SublayerRecords& store) {
  using Records = std::vector<detail::record_t<Sub>>;
  if (!store.records.has_value()) store.records.emplace<Records>().reserve(store.layers);
  return *std::any_cast<Records>(&store.records);
}

// The forward pass of a sublayer; with `records`, its record is appended
// to them.
template <class T, class W, class Block>
SublayerForward<T> sublayer_forward(const StackShape<T>& s, const W& w, Sublayer which, Block block,
                                    const Moments<T>& x, SublayerRecords* records = nullptr) {
  return with_sublayer(s, w, which, std::move(block), [&](const auto& sub) {
    using Sub = std::decay_t<decltype(sub)>;
    auto pass = detail::record(sub, x);  // x: a validated input or a checked output
    const auto& res = residual_of<T>(sub);
    const Moments<T>& f = residual_record_of<Sub>(pass.second).branch_out;
    SublayerForward<T> r;
    r.out = pass.first;
    r.branch_var = f.var;
    r.residual_share = math::ratio_or(res.branch_scale() * res.branch_scale() * f.var,
                                      residual_sum_of<T, Sub>(pass.second, pass.first).var, 0);
    r.domain = detail::domain_recorded(sub, pass.second);
    if (records) records_of<Sub>(*records).push_back(std::move(pass.second));
    return r;
  });
}

// What a sublayer's block sees: its input h (LN(x) in Pre-LN, x otherwise)
// and the gradient at its output (beta times the gradient reaching the
// residual sum; in Post-LN, after the backward of the LayerNorm that follows
// it). The placement is with_sublayer's.
template <class T>
struct BranchIO {
  Moments<T> input;
  GradMoments<T> grad_out;
};

template <class T, class W, class Block>
BranchIO<T> branch_io(const StackShape<T>& s, const W& w, Sublayer which, const Block& block, const Moments<T>& x,
                      const GradMoments<T>& g_out) {
  const T skip = skip_of<T>(w, which), branch = branch_of<T>(w, which);
  BranchIO<T> io{x, g_out};
  if (s.arch == Arch::pre_ln) io.input = with_norm(s, [&](const auto& norm) { return norm.forward(x); });
  if (s.arch == Arch::post_ln) {
    const Moments<T> sum = residual(block, skip, branch).forward(x);
    io.grad_out = with_norm(s, [&](const auto& norm) { return norm.backward(sum, g_out); });
  }
  io.grad_out.var = branch * branch * io.grad_out.var;
  return io;
}

template <class T, class W>
auto make_attention_block(const StackShape<T>& s, const W& w) {
  return attention_block<T>(s.d, s.heads, s.seq_len, {w.q, w.k, w.v, w.o}, s.dropout,
                            s.attention_gradient, s.rotary, {w.q_bias, w.k_bias, w.v_bias, w.o_bias},
                            s.attention_dropout, s.logit_scale);
}

// The activation component of with_activation's type for the shape's
// FfnActivation (the GeLU's form is a runtime field, not a type).
template <class Activation, class T>
Activation activation_of(const StackShape<T>& s) {
  if constexpr (std::is_same_v<Activation, Gelu<T>>)
    return Gelu<T>(s.activation == FfnActivation::gelu_tanh ? GeluForm::tanh : GeluForm::erf);
  else return Activation();
}

template <class Activation, class T, class W>
auto make_ffn_block(const StackShape<T>& s, const W& w) {
  return ffn_block<Activation>(s.d, T(s.hidden / s.d), T(w.ffn1), T(w.ffn2), s.dropout, T(w.ffn1_bias),
                               T(w.ffn2_bias), s.ffn_dropout, activation_of<Activation>(s));
}

// The attention block as the shape says (full or causal), handed to
// `apply`; a causal head's softmax path at the keys' `spread` if given.
template <class T, class W, class Apply>
auto with_attention_block(const StackShape<T>& s, const W& w, Apply apply,
                          const std::optional<KeySpread<T>>& spread = std::nullopt) {
  if (s.causal)
    return apply(causal_attention_block<T>(s.d, s.heads, s.seq_len, {w.q, w.k, w.v, w.o}, s.dropout,
                                           s.attention_gradient, s.rotary, {w.q_bias, w.k_bias, w.v_bias, w.o_bias},
                                           s.attention_dropout, s.logit_scale, spread));
  return apply(make_attention_block(s, w));
}

// The FFN block as the shape says (plain or gated), handed to `apply`.
template <class Activation, class T, class W, class Apply>
auto with_ffn_block(const StackShape<T>& s, const W& w, Apply apply) {
  if (s.gated)
    return apply(glu_ffn_block<Activation>(s.d, s.hidden, T(w.ffn1), T(w.ffn_gate), T(w.ffn2), s.dropout,
                                           T(w.ffn1_bias), T(w.ffn_gate_bias), T(w.ffn2_bias), s.ffn_dropout,
                                           activation_of<Activation>(s)));
  return apply(make_ffn_block<Activation>(s, w));
}

// The block of sublayer `which`, handed to `apply` (`spread`: the attention's).
template <class Activation, class T, class W, class Apply>
auto with_block(const StackShape<T>& s, const W& w, Sublayer which, Apply apply,
                const std::optional<KeySpread<T>>& spread = std::nullopt) {
  if (which == Sublayer::attention) return with_attention_block(s, w, std::move(apply), spread);
  return with_ffn_block<Activation>(s, w, std::move(apply));
}

// with_sublayer around the block with_block builds.
template <class Activation, class T, class W, class Apply>
auto on_sublayer(const StackShape<T>& s, const W& w, Sublayer which, Apply apply,
                 const std::optional<KeySpread<T>>& spread = std::nullopt) {
  return with_block<Activation>(
      s, w, which, [&](auto block) { return with_sublayer(s, w, which, std::move(block), apply); }, spread);
}

// The scalar forms used by the schemes (one configuration).
inline auto make_attention_block(const ModelConfig& c, const LayerWeights& w) {
  return make_attention_block(shape_of(c), w);
}

template <class Activation>
auto make_ffn_block(const ModelConfig& c, const LayerWeights& w) {
  return make_ffn_block<Activation>(shape_of(c), w);
}

template <class Block, class Apply>
auto with_sublayer(const ModelConfig& c, const LayerWeights& w, Sublayer which, Block block, Apply apply) {
  return with_sublayer(shape_of(c), w, which, std::move(block), std::move(apply));
}

}  // namespace detail

}  // namespace sigprop
