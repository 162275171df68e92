// sigprop/models/stack.hpp -- whole transformers: Pre-LN and Post-LN stacks
// with scaled residuals, and the per-layer trace of forward and backward
// moments at initialization.
//
// Reference: Kedia et al. (ICML 2024), section 2 and appendix G. Each
// sublayer is built by composing components, nothing is re-derived:
//   Pre-LN : residual(serial(LayerNorm(d), block), lambda, beta)
//   Post-LN: serial(residual(block, lambda, beta), LayerNorm(d))
//   no LN  : residual(block, lambda, beta)
// with block = attention_block(...) (causal_attention_block with the causal
// mask) or ffn_block<Relu|Gelu|Silu>(...) (glu_ffn_block when gated), and
// LN a LayerNorm or an RMSNorm (ModelConfig::norm). Each row
// also records the residual dependency beta_{i,i}^2 of the sublayer that
// produced it (Liu et al. 2020, "Admin", section 4.1).
#pragma once

#include <algorithm>
#include <any>
#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "sigprop/blocks/attention_block.hpp"
#include "sigprop/blocks/ffn_block.hpp"
#include "sigprop/blocks/residual.hpp"
#include "sigprop/components/layernorm.hpp"
#include "sigprop/components/rmsnorm.hpp"
#include "sigprop/components/silu.hpp"
#include "sigprop/models/config.hpp"

namespace sigprop {

/// One boundary of the residual stream: its forward moments and the moments
/// of the gradient of the loss with respect to it. T = double for one
/// configuration, an Eigen array for a batch (one lane per configuration).
template <class T>
struct BasicTraceRow {
  std::size_t layer = 0;
  Moments<T> forward;
  GradMoments<T> backward;
  /// Validity measures of the closed forms that produced this row (the
  /// worst over the layer's sublayers; core/domain.hpp). 0 for the input row.
  Domain<T> domain;
  /// Var[f(h)] of the branch of the sublayer that produced this row (before
  /// its scale beta); 0 for the input row.
  T branch_var{0};
  /// Admin's residual dependency beta_{i,i}^2 = Var[beta f] / Var[lambda x + beta f]
  /// of that sublayer (Liu et al. 2020, Eq. 5 with the sum before its
  /// LayerNorm); 0 for the input row.
  T residual_share{0};
  /// The flags of `domain` with the default limits (scalar rows).
  Caveat caveats() const { return sigprop::caveats(domain); }
};

/// Per-layer record: rows[n] for n = 0..N (n = 0 the model input, n the
/// output of layer n); mid[n - 1] after layer n's attention sublayer; output
/// is what the model emits (after the final LayerNorm when there is one).
template <class T>
struct BasicTrace {
  std::vector<BasicTraceRow<T>> rows;
  std::vector<BasicTraceRow<T>> mid;
  BasicTraceRow<T> output;
};

using TraceRow = BasicTraceRow<double>;
using Trace = BasicTrace<double>;

/// The lane type of batched evaluation: one configuration per entry.
using Batch = Eigen::ArrayXd;
using BatchTrace = BasicTrace<Batch>;

/// What every lane of a stack shares (its structure) and the sizes that may
/// differ from lane to lane.
template <class T>
struct StackShape {
  Arch arch = Arch::pre_ln;
  FfnActivation activation = FfnActivation::relu;
  bool final_layernorm = false;
  AttentionGradient attention_gradient = AttentionGradient::all_paths;
  Norm norm = Norm::layernorm;
  bool causal = false, gated = false;
  RotaryEmbedding rotary;
  std::size_t layers = 0;
  T d, heads, hidden, seq_len, dropout;  ///< hidden: the FFN's hidden width
};

/// The weights of one layer for every lane of a batch (LayerWeights, lane-wise).
template <class T>
struct BatchLayerWeights {
  T q, k, v, o, ffn1, ffn2, ffn_gate, attn_skip, attn_branch, ffn_skip, ffn_branch;
};

namespace detail {

inline StackShape<double> shape_of(const ModelConfig& c) {
  StackShape<double> s;
  s.arch = c.arch;
  s.activation = c.activation;
  s.final_layernorm = c.final_layernorm;
  s.attention_gradient = c.attention_gradient;
  s.norm = c.norm;
  s.causal = c.causal;
  s.gated = c.gated_ffn;
  s.rotary = {c.rotary_base};
  s.layers = c.layers;
  s.d = static_cast<double>(c.d);
  s.heads = static_cast<double>(c.heads);
  s.hidden = static_cast<double>(c.hidden_width());
  s.seq_len = static_cast<double>(c.seq_len);
  s.dropout = c.dropout;
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
      if (rms) return apply(residual(serial(RmsNorm<T>(s.d), std::move(block)), skip, branch));
      return apply(residual(serial(LayerNorm<T>(s.d), std::move(block)), skip, branch));
    case Arch::post_ln:
      if (rms) return apply(serial(residual(std::move(block), skip, branch), RmsNorm<T>(s.d)));
      return apply(serial(residual(std::move(block), skip, branch), LayerNorm<T>(s.d)));
    case Arch::no_ln: break;
  }
  return apply(residual(std::move(block), skip, branch));
}

// The stack's normalization (LayerNorm or RMSNorm) handed to `apply`.
template <class T, class Apply>
auto with_norm(const StackShape<T>& s, Apply apply) {
  if (s.norm == Norm::rmsnorm) return apply(RmsNorm<T>(s.d));
  return apply(LayerNorm<T>(s.d));
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
                            s.attention_gradient, s.rotary);
}

template <class Activation, class T, class W>
auto make_ffn_block(const StackShape<T>& s, const W& w) {
  return ffn_block<Activation>(s.d, T(s.hidden / s.d), T(w.ffn1), T(w.ffn2), s.dropout);
}

// The block of sublayer `which` as the shape says (full or causal attention;
// plain or gated FFN), handed to `apply`.
template <class Activation, class T, class W, class Apply>
auto with_block(const StackShape<T>& s, const W& w, Sublayer which, Apply apply) {
  if (which == Sublayer::attention) {
    if (s.causal)
      return apply(causal_attention_block<T>(s.d, s.heads, s.seq_len, {w.q, w.k, w.v, w.o}, s.dropout,
                                             s.attention_gradient, s.rotary));
    return apply(make_attention_block(s, w));
  }
  if (s.gated) return apply(glu_ffn_block<Activation>(s.d, s.hidden, T(w.ffn1), T(w.ffn_gate), T(w.ffn2), s.dropout));
  return apply(make_ffn_block<Activation>(s, w));
}

// with_sublayer around the block with_block builds.
template <class Activation, class T, class W, class Apply>
auto on_sublayer(const StackShape<T>& s, const W& w, Sublayer which, Apply apply) {
  return with_block<Activation>(s, w, which,
                                [&](auto block) { return with_sublayer(s, w, which, std::move(block), apply); });
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

template <class Activation, class T, class W>
BasicTrace<T> trace_with(const StackShape<T>& s, const std::vector<W>& layers, const Moments<T>& input,
                         const GradMoments<T>& top) {
  const std::size_t N = s.layers;
  BasicTrace<T> t;
  t.rows.resize(N + 1);
  t.mid.resize(N);
  t.rows[0].forward = input;
  t.rows[0].domain = Domain<T>::zero_like(input.var);
  t.rows[0].branch_var = t.rows[0].residual_share = 0 * input.var;
  SublayerRecords attention_records{{}, N}, ffn_records{{}, N};  // for the backward pass
  for (std::size_t n = 0; n < N; ++n) {
    const W& w = layers[n];
    const auto record = [](BasicTraceRow<T>& row, const SublayerForward<T>& f) {
      row.forward = f.out;
      row.branch_var = f.branch_var;
      row.residual_share = f.residual_share;
      row.domain = f.domain;
    };
    t.mid[n].layer = n + 1;
    const auto forward_of = [&](Sublayer which, const Moments<T>& x) {
      SublayerRecords* records = which == Sublayer::attention ? &attention_records : &ffn_records;
      return with_block<Activation>(s, w, which, [&](auto block) {
        return sublayer_forward(s, w, which, std::move(block), x, records);
      });
    };
    record(t.mid[n], forward_of(Sublayer::attention, t.rows[n].forward));
    t.rows[n + 1].layer = n + 1;
    record(t.rows[n + 1], forward_of(Sublayer::ffn, t.mid[n].forward));
    t.rows[n + 1].domain = t.mid[n].domain.worst(t.rows[n + 1].domain);
  }
  t.output = t.rows[N];
  t.rows[N].backward = top;
  if (s.arch == Arch::pre_ln && s.final_layernorm) {
    with_norm(s, [&](const auto& final_norm) {
      t.output.forward = final_norm.forward(t.rows[N].forward);
      t.rows[N].backward = final_norm.backward(t.rows[N].forward, top);
      return 0;
    });
  }
  t.output.backward = top;
  for (std::size_t n = N; n-- > 0;) {
    const W& w = layers[n];
    // The backward maps from the forward passes' records (no replay); the
    // gradients are checked outputs or the validated `top`.
    const auto bwd = [n](SublayerRecords& records, const GradMoments<T>& g) {
      return [&records, n, &g](const auto& sub) {
        using Sub = std::decay_t<decltype(sub)>;
        return detail::backward_recorded(sub, records_of<Sub>(records)[n], g);
      };
    };
    t.mid[n].backward = on_sublayer<Activation>(s, w, Sublayer::ffn, bwd(ffn_records, t.rows[n + 1].backward));
    t.rows[n].backward = on_sublayer<Activation>(s, w, Sublayer::attention, bwd(attention_records, t.mid[n].backward));
  }
  return t;
}

template <class T, class W>
BasicTrace<T> trace_dispatch(const StackShape<T>& s, const std::vector<W>& layers,
                             const Moments<T>& input, const GradMoments<T>& top) {
  switch (s.activation) {
    case FfnActivation::relu: return trace_with<Relu<T>>(s, layers, input, top);
    case FfnActivation::gelu: return trace_with<Gelu<T>>(s, layers, input, top);
    case FfnActivation::silu: break;
  }
  return trace_with<Silu<T>>(s, layers, input, top);
}

}  // namespace detail

/// The layers (1-based) whose closed forms are outside the validated region,
/// with the worst measures over them; empty when the whole trace is inside.
struct DomainSummary {
  std::vector<std::size_t> layers;
  Domain<double> worst;
  bool empty() const { return layers.empty(); }
};

inline DomainSummary outside_domain(const Trace& t, const DomainLimits& limits = {}) {
  DomainSummary s;
  for (const TraceRow& row : t.rows) {
    if (!any(caveats(row.domain, limits))) continue;
    s.layers.push_back(row.layer);
    s.worst = s.worst.worst(row.domain);
  }
  return s;
}

/// The per-layer trace of a model of shape `config` initialized with
/// `weights`, given the gradient moments at the model output (default:
/// variance 1, correlation 0).
inline Trace trace(const ModelConfig& config, const ModelWeights& weights,
                   const GradMoments<double>& grad_top = {1, 0}) {
  constexpr const char* fn = "sigprop::trace";
  config.validate(fn);
  require_grad_moments(fn, grad_top);
  require_moments(fn, weights.input);
  if (weights.layers.size() != config.layers)
    throw domain_error(std::string(fn) + ": weights.layers.size() = " +
                       std::to_string(weights.layers.size()) +
                       " is outside the valid range {layers = " + std::to_string(config.layers) + "}");
  return detail::trace_dispatch(detail::shape_of(config), weights.layers, weights.input, grad_top);
}

/// Lanes per evaluation of the batched trace: configurations are traced in
/// chunks of this many, as fixed-size Eigen arrays (kept in registers and on
/// the stack, no heap allocation per operation; 8 doubles are one AVX-512
/// vector or two AVX2 ones). Measured on the benchmark's layer update
/// (docs/performance.md): chunks of 8 or 16 lanes were 1.6-1.8x faster per
/// lane than one dynamic array of 256.
inline constexpr int batch_chunk = 8;
using BatchChunk = Eigen::Array<double, batch_chunk, 1>;

/// The traces of many configurations at once, one lane per configuration,
/// through the same templated code as trace() (lane i equals
/// trace(configs[i], weights[i], grad_top) up to rounding). The lanes must
/// share the structure: arch, activation, layers, final_layernorm,
/// attention_gradient, norm, causal and gated_ffn; widths, lengths, dropout
/// and weights may differ.
inline BatchTrace trace_batch(const std::vector<ModelConfig>& configs,
                              const std::vector<ModelWeights>& weights,
                              const GradMoments<double>& grad_top = {1, 0}) {
  constexpr const char* fn = "sigprop::trace_batch";
  const auto fail = [&](const std::string& what) { throw domain_error(std::string(fn) + ": " + what); };
  if (configs.empty()) fail("configs.size() = 0 is outside the valid range [1, inf)");
  if (weights.size() != configs.size())
    fail("weights.size() = " + std::to_string(weights.size()) + " is outside the valid range {configs.size() = " +
         std::to_string(configs.size()) + "}");
  require_grad_moments(fn, grad_top);
  const ModelConfig& first = configs.front();
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const ModelConfig& c = configs[i];
    c.validate(fn);
    require_moments(fn, weights[i].input);
    if (c.arch != first.arch || c.activation != first.activation || c.layers != first.layers ||
        c.final_layernorm != first.final_layernorm || c.attention_gradient != first.attention_gradient ||
        c.norm != first.norm || c.causal != first.causal || c.gated_ffn != first.gated_ffn ||
        c.rotary_base != first.rotary_base)
      fail("configs[" + std::to_string(i) + "].arch, activation, layers, final_layernorm, attention_gradient, "
           "norm, causal, gated_ffn or rotary_base differs from configs[0]'s: a batch shares its structure");
    if (weights[i].layers.size() != c.layers)
      fail("weights[" + std::to_string(i) + "].layers.size() = " + std::to_string(weights[i].layers.size()) +
           " is outside the valid range {layers = " + std::to_string(c.layers) + "}");
  }
  const std::size_t n = configs.size(), N = first.layers;
  const auto lanes = static_cast<Eigen::Index>(n);
  BatchTrace out;
  const auto empty_row = [lanes](std::size_t layer) {
    BasicTraceRow<Batch> r;
    r.layer = layer;
    r.forward = {Batch(lanes), Batch(lanes), Batch(lanes), Batch(lanes), Batch(lanes), Batch(lanes), Batch(lanes)};
    r.backward = {Batch(lanes), Batch(lanes), Batch(lanes), Batch(lanes), Batch(lanes)};
    r.domain = {Batch(lanes), Batch(lanes), Batch(lanes)};
    r.branch_var = r.residual_share = Batch(lanes);
    return r;
  };
  for (std::size_t k = 0; k <= N; ++k) out.rows.push_back(empty_row(k));
  for (std::size_t k = 1; k <= N; ++k) out.mid.push_back(empty_row(k));
  out.output = empty_row(N);
  const auto scatter = [](const BasicTraceRow<BatchChunk>& from, BasicTraceRow<Batch>& to, Eigen::Index at,
                          Eigen::Index count) {
    const auto put = [&](const BatchChunk& x, Batch& y) { y.segment(at, count) = x.head(count); };
    put(from.forward.mean, to.forward.mean);
    put(from.forward.var, to.forward.var);
    put(from.forward.corr_len, to.forward.corr_len);
    put(from.forward.corr_dim, to.forward.corr_dim);
    put(from.forward.norm_var_ratio, to.forward.norm_var_ratio);
    put(from.forward.hidden_spread, to.forward.hidden_spread);
    put(from.forward.linear_share, to.forward.linear_share);
    put(from.backward.var, to.backward.var);
    put(from.backward.corr_len, to.backward.corr_len);
    put(from.backward.align_activation, to.backward.align_activation);
    put(from.backward.align_mean, to.backward.align_mean);
    put(from.backward.norm_coupling, to.backward.norm_coupling);
    put(from.domain.score_var, to.domain.score_var);
    put(from.domain.key_weight, to.domain.key_weight);
    put(from.domain.width_term, to.domain.width_term);
    put(from.branch_var, to.branch_var);
    put(from.residual_share, to.residual_share);
  };
  StackShape<BatchChunk> s;
  s.arch = first.arch;
  s.activation = first.activation;
  s.final_layernorm = first.final_layernorm;
  s.attention_gradient = first.attention_gradient;
  s.norm = first.norm;
  s.causal = first.causal;
  s.gated = first.gated_ffn;
  s.rotary = {first.rotary_base};
  s.layers = N;
  std::vector<BatchLayerWeights<BatchChunk>> layers(N);
  Moments<BatchChunk> input;
  const GradMoments<BatchChunk> top{BatchChunk::Constant(grad_top.var), BatchChunk::Constant(grad_top.corr_len),
                                    BatchChunk::Constant(grad_top.align_activation),
                                    BatchChunk::Constant(grad_top.align_mean),
                                    BatchChunk::Constant(grad_top.norm_coupling)};
  for (std::size_t start = 0; start < n; start += batch_chunk) {
    const std::size_t count = std::min<std::size_t>(batch_chunk, n - start);
    for (int j = 0; j < batch_chunk; ++j) {
      // Lanes past the end repeat the last configuration (computed, not kept).
      const std::size_t i = start + std::min<std::size_t>(static_cast<std::size_t>(j), count - 1);
      const StackShape<double> one = detail::shape_of(configs[i]);
      s.d(j) = one.d;
      s.heads(j) = one.heads;
      s.hidden(j) = one.hidden;
      s.seq_len(j) = one.seq_len;
      s.dropout(j) = one.dropout;
      const Moments<double>& x = weights[i].input;
      input.mean(j) = x.mean;
      input.var(j) = x.var;
      input.corr_len(j) = x.corr_len;
      input.corr_dim(j) = x.corr_dim;
      input.norm_var_ratio(j) = x.norm_var_ratio;
      input.hidden_spread(j) = x.hidden_spread;
      input.linear_share(j) = x.linear_share;
      for (std::size_t k = 0; k < N; ++k) {
        const LayerWeights& a = weights[i].layers[k];
        BatchLayerWeights<BatchChunk>& b = layers[k];
        b.q(j) = a.q;
        b.k(j) = a.k;
        b.v(j) = a.v;
        b.o(j) = a.o;
        b.ffn1(j) = a.ffn1;
        b.ffn2(j) = a.ffn2;
        b.ffn_gate(j) = a.ffn_gate;
        b.attn_skip(j) = a.attn_skip;
        b.attn_branch(j) = a.attn_branch;
        b.ffn_skip(j) = a.ffn_skip;
        b.ffn_branch(j) = a.ffn_branch;
      }
    }
    const BasicTrace<BatchChunk> chunk = detail::trace_dispatch(s, layers, input, top);
    const auto at = static_cast<Eigen::Index>(start), c = static_cast<Eigen::Index>(count);
    for (std::size_t k = 0; k <= N; ++k) scatter(chunk.rows[k], out.rows[k], at, c);
    for (std::size_t k = 0; k < N; ++k) scatter(chunk.mid[k], out.mid[k], at, c);
    scatter(chunk.output, out.output, at, c);
  }
  return out;
}

/// Lane i of a batched trace as the trace of one configuration.
inline Trace lane_of(const BatchTrace& b, std::size_t i) {
  const auto row = [i](const BasicTraceRow<Batch>& r) {
    TraceRow o;
    o.layer = r.layer;
    o.forward = {lane(r.forward.mean, i), lane(r.forward.var, i), lane(r.forward.corr_len, i),
                 lane(r.forward.corr_dim, i), lane(r.forward.norm_var_ratio, i), lane(r.forward.hidden_spread, i),
                 lane(r.forward.linear_share, i)};
    o.backward = {lane(r.backward.var, i), lane(r.backward.corr_len, i), lane(r.backward.align_activation, i),
                  lane(r.backward.align_mean, i), lane(r.backward.norm_coupling, i)};
    o.domain = lane_of(r.domain, i);
    o.branch_var = lane(r.branch_var, i);
    o.residual_share = lane(r.residual_share, i);
    return o;
  };
  Trace t;
  for (const auto& r : b.rows) t.rows.push_back(row(r));
  for (const auto& r : b.mid) t.mid.push_back(row(r));
  t.output = row(b.output);
  return t;
}

}  // namespace sigprop
