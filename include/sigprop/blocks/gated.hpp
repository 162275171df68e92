// sigprop/blocks/gated.hpp -- y = gate(x) * value(x) entrywise: the gated
// linear unit family (GLU, ReGLU, GeGLU, SwiGLU).
//
// References: Dauphin et al., "Language Modeling with Gated Convolutional
// Networks" (ICML 2017), the GLU; Shazeer, "GLU Variants Improve
// Transformer" (2020), Eq. 5-6: FFN_SwiGLU(x) = (Swish(x W) * x V) W2, and
// ReGLU/GeGLU with ReLU/GeLU in place of Swish (SiLU).
//
// Moments. At initialization the two branches start with independent
// zero-mean weight matrices, so given the input they are uncorrelated, and
// to leading order in 1/d (the norm of x that both see concentrates) their
// second moments factor. With a = gate(x), b = value(x), S = E[a^2],
// C = E[a_i a_k] (two positions, one unit), D = E[a_j a_l] (one position, two
// units), and likewise for b:
//   E[y] = m_a m_b,  E[y^2] = S_a S_b,  E[y_i y_k] = C_a C_b,  E[y_j y_l] = D_a D_b.
// Backward, g at y independent of a and b: d(gate) = g * b and d(value) = g * a,
//   Var[d gate] = Var[g] S_b,  Cov_l[d gate] = Cov_l[g] C_b   (likewise with a),
// and dx = gate'^T d(gate) + value'^T d(value) is a sum of two terms through
// independent zero-mean weights, so their variances and covariances add.
// Checked against a simulation of the real block with real backprop
// (tests/test_gated.cpp, docs/components/gated.md).
#pragma once

#include <utility>

#include "sigprop/core/component.hpp"
#include "sigprop/core/record.hpp"

namespace sigprop {

template <class T, class Gate, class Value>
class Gated : public Component<Gated<T, Gate, Value>, T> {
 public:
  static constexpr const char* name = "sigprop::Gated";
  static constexpr bool exact_forms = Gate::exact_forms && Value::exact_forms;
  static constexpr bool mixes_positions = Gate::mixes_positions || Value::mixes_positions;

  Gated(Gate gate, Value value) : gate_(std::move(gate)), value_(std::move(value)) {}

  const Gate& gate() const { return gate_; }
  const Value& value() const { return value_; }

  Moments<T> forward_impl(const Moments<T>& in) const {
    return combine(gate_.forward(in), value_.forward(in));
  }

  /// The output for branch outputs `a` (gate) and `b` (value).
  static Moments<T> combine(const Moments<T>& a, const Moments<T>& b) {
    const T mean = a.mean * b.mean, mean_sq = mean * mean;
    const T second = raw(a.var, a.mean) * raw(b.var, b.mean);
    Moments<T> out;
    out.mean = mean;
    out.var = second - mean_sq;
    out.corr_len = math::ratio_or(raw(a.cov_len(), a.mean) * raw(b.cov_len(), b.mean) - mean_sq, out.var, 1);
    out.corr_dim = math::ratio_or(raw(a.cov_dim(), a.mean) * raw(b.cov_dim(), b.mean) - mean_sq, out.var, 0);
    // Position-specific part: a_j delta b + b_j delta a + rest, the slopes
    // the other factor's value shared by two positions, E[a_i a_k] = raw(cov_len):
    // two independent linear images (core/hidden_spread.hpp).
    const T k_b = spread::image_share(b, out, raw(a.cov_len(), a.mean));
    const T k_a = spread::image_share(a, out, raw(b.cov_len(), b.mean));
    out.hidden_spread = hidden_spread_of(b) * k_b * k_b + hidden_spread_of(a) * k_a * k_a;
    out.linear_share = math::min_of(T(linear_share_of(b) * k_b + linear_share_of(a) * k_a), T(0 * k_a + 1));
    return out;
  }

  /// The record of a forward pass (core/record.hpp): each branch's record and output.
  struct Record {
    detail::record_t<Gate> gate;
    Moments<T> gate_out;
    detail::record_t<Value> value;
    Moments<T> value_out;
  };

  /// The output for a validated `in`, and the record of the pass.
  std::pair<Moments<T>, Record> record(const Moments<T>& in) const {
    auto [a, gate_record] = detail::record(gate_, in);
    auto [b, value_record] = detail::record(value_, in);
    Moments<T> out = this->checked(name, combine(a, b));
    return {std::move(out), Record{std::move(gate_record), a, std::move(value_record), b}};
  }

  GradMoments<T> backward_impl(const Moments<T>& in, const GradMoments<T>& g) const {
    return backward_recorded_impl(record(in).second, g);
  }

  GradMoments<T> backward_recorded_impl(const Record& r, const GradMoments<T>& g) const {
    const Moments<T>& a = r.gate_out;
    const Moments<T>& b = r.value_out;
    const GradMoments<T> to_gate = scaled(g, b);
    require_grad_moments(Gate::name, to_gate);
    const GradMoments<T> through_gate = detail::backward_recorded(gate_, r.gate, to_gate);
    const GradMoments<T> to_value = scaled(g, a);
    require_grad_moments(Value::name, to_value);
    const GradMoments<T> through_value = detail::backward_recorded(value_, r.value, to_value);
    GradMoments<T> out;
    out.var = through_gate.var + through_value.var;
    out.corr_len = math::ratio_or(through_gate.cov_len() + through_value.cov_len(), out.var, 0);
    return out;
  }

  /// The worse of the two branches' validity measures.
  Domain<T> domain_impl(const Moments<T>& in) const { return gate_.domain_trusted(in).worst(value_.domain_trusted(in)); }

  /// domain() from the record of the forward pass.
  Domain<T> domain_recorded(const Record& r) const {
    return detail::domain_recorded(gate_, r.gate).worst(detail::domain_recorded(value_, r.value));
  }

 private:
  // E[x_1 x_2] from a covariance and the mean.
  static T raw(const T& cov, const T& mean) { return cov + mean * mean; }

  // The gradient g * c for a factor c independent of g.
  static GradMoments<T> scaled(const GradMoments<T>& g, const Moments<T>& c) {
    const T second = raw(c.var, c.mean);
    GradMoments<T> out;
    out.var = g.var * second;
    out.corr_len = math::ratio_or(g.corr_len * raw(c.cov_len(), c.mean), second, 0);
    return out;
  }

  Gate gate_;
  Value value_;
};

/// gated(gate, value): x -> gate(x) * value(x) entrywise.
template <class Gate, class Value>
Gated<typename Gate::value_type, Gate, Value> gated(Gate gate, Value value) {
  return Gated<typename Gate::value_type, Gate, Value>(std::move(gate), std::move(value));
}

}  // namespace sigprop
