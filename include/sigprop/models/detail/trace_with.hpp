// sigprop/models/detail/trace_with.hpp -- the trace of a stack whose
// runtime settings have become types (models/detail/sublayers.hpp): each
// layer's sublayers forward, their records kept (core/record.hpp), then the
// backward pass from the records. With SIGPROP_SEPARATE_COMPILATION it is
// compiled once per lane type and activation (src/trace_*.cpp).
#pragma once

#include <cstddef>
#include <type_traits>
#include <vector>

#include "sigprop/models/detail/sublayers.hpp"
#include "sigprop/models/stack.hpp"

namespace sigprop {

namespace detail {

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

#ifdef SIGPROP_SEPARATE_COMPILATION
// Compiled once per lane type and activation (src/trace_*.cpp).
#define SIGPROP_TRACE_WITH(extern_, Activation, T, W)                                               \
  extern_ template BasicTrace<T> trace_with<Activation<T>, T, W>(const StackShape<T>&, const std::vector<W>&, \
                                                                 const Moments<T>&, const GradMoments<T>&);
SIGPROP_TRACE_WITH(extern, Relu, double, LayerWeights)
SIGPROP_TRACE_WITH(extern, Gelu, double, LayerWeights)
SIGPROP_TRACE_WITH(extern, Silu, double, LayerWeights)
SIGPROP_TRACE_WITH(extern, Relu, BatchChunk, BatchLayerWeights<BatchChunk>)
SIGPROP_TRACE_WITH(extern, Gelu, BatchChunk, BatchLayerWeights<BatchChunk>)
SIGPROP_TRACE_WITH(extern, Silu, BatchChunk, BatchLayerWeights<BatchChunk>)
#endif

template <class T, class W>
BasicTrace<T> trace_dispatch(const StackShape<T>& s, const std::vector<W>& layers, const Moments<T>& input,
                             const GradMoments<T>& top) {
  return with_activation<T>(s.activation, [&](auto activation) {
    return trace_with<typename decltype(activation)::type>(s, layers, input, top);
  });
}

}  // namespace detail

}  // namespace sigprop
