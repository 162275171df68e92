// sigprop/core/record.hpp -- what a component's backward map keeps from its
// forward pass.
//
// A backward map needs the forward input moments of every part it goes
// through (core/component.hpp). A plain component's record is its input; a
// composition (Serial, Residual, Gated, MultiHead) keeps its parts' records,
// so the backward of nested compositions replays the forward pass once, at
// the top, instead of once per level of nesting, and a caller that keeps the
// record of its forward pass (the stack trace) does not replay it at all.
// Components whose backward reuses costly intermediate results keep those
// too (Attention: its softmax terms; LayerNorm: F and F' at its input's
// correlation). docs/performance.md, "What was done".
//
// A component C opts in by declaring
//
//   using Record = ...;
//   std::pair<Moments<T>, Record> record(const Moments<T>& in) const;   // in validated
//   GradMoments<T> backward_recorded_impl(const Record&, const GradMoments<T>&) const;
//   Domain<T> domain_recorded(const Record&) const;
//
// and Component::backward_recorded finishes the gradient as backward_trusted
// does. The functions below treat both kinds alike.
#pragma once

#include <tuple>
#include <type_traits>
#include <utility>

#include "sigprop/core/moments.hpp"
#include "sigprop/core/domain.hpp"

namespace sigprop::detail {

template <class C, class = void>
struct has_record : std::false_type {};
template <class C>
struct has_record<C, std::void_t<typename C::Record>> : std::true_type {};

template <class C, bool = has_record<C>::value>
struct record_type {
  using type = Moments<typename C::value_type>;  // a plain component: its input
};
template <class C>
struct record_type<C, true> {
  using type = typename C::Record;
};

/// What `C`'s backward map needs from its forward pass.
template <class C>
using record_t = typename record_type<C>::type;

/// The input moments of the pass that a record holds: a plain part's record
/// itself, a record's `in`, or for a Serial's tuple its first part's input.
template <class T>
const Moments<T>& recorded_input(const Moments<T>& r) {
  return r;
}
template <class R>
const auto& recorded_input(const R& r) {
  return r.in;
}
template <class... R>
const auto& recorded_input(const std::tuple<R...>& r) {
  return recorded_input(std::get<0>(r));
}

/// C's output for a validated input `in` and its record.
template <class C, class T>
std::pair<Moments<T>, record_t<C>> record(const C& c, const Moments<T>& in) {
  if constexpr (has_record<C>::value) return c.record(in);
  else return {c.forward_trusted(in), in};
}

/// C's backward map from a record of its forward pass.
template <class C, class T>
GradMoments<T> backward_recorded(const C& c, const record_t<C>& r, const GradMoments<T>& grad_out) {
  if constexpr (has_record<C>::value) return c.backward_recorded(r, grad_out);
  else return c.backward_trusted(r, grad_out);
}

/// C's validity measures from a record of its forward pass.
template <class C>
auto domain_recorded(const C& c, const record_t<C>& r) {
  if constexpr (has_record<C>::value) return c.domain_recorded(r);
  else return c.domain_trusted(r);
}

}  // namespace sigprop::detail
