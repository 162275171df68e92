// sigprop/core/serial.hpp -- composition of components, applied in order.
//
// Like neural-tangents' stax.serial: a fold over layers. The backward map
// re-runs the forward pass from `in` to record each part's input moments (a
// part's backward map may depend on them; core/record.hpp), then walks the
// parts in reverse.
#pragma once

#include <array>
#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include "sigprop/core/component.hpp"
#include "sigprop/core/record.hpp"

namespace sigprop {

template <class T, class... Parts>
class Serial : public Component<Serial<T, Parts...>, T> {
  static_assert(sizeof...(Parts) > 0, "sigprop::Serial needs at least one part");

 public:
  static constexpr const char* name = "sigprop::Serial";
  static constexpr std::size_t size = sizeof...(Parts);
  static constexpr bool exact_forms = (Parts::exact_forms && ...);
  static constexpr bool mixes_positions = (Parts::mixes_positions || ...);
  static constexpr bool sets_norm_coupling = true;  // each part's backward carries it
  static constexpr bool results_from_parts = true;  // the last part's output, the first part's gradient
  /// Degrees multiply along the chain; once a part of degree 0 has seen a
  /// homogeneous input, the rest sees an input that does not depend on t.
  static constexpr int homogeneity = [] {
    int degree = 1;
    for (int part : {Parts::homogeneity...}) {
      if (degree == 0 || degree == -1) break;
      degree = part == -1 ? -1 : degree * part;
    }
    return degree;
  }();

  explicit Serial(Parts... parts) : parts_(std::move(parts)...) {}

  const std::tuple<Parts...>& parts() const { return parts_; }
  template <std::size_t I>
  const auto& part() const { return std::get<I>(parts_); }

  Moments<T> forward_impl(const Moments<T>& in) const {
    return forward_from<0>(in);
  }

  /// Input moments of every part (element I is what part I receives) and the output.
  std::array<Moments<T>, size + 1> forward_all(const Moments<T>& in) const {
    require_moments(name, in);
    return states_of(in);
  }

  /// Gradient moments at the input of every part (element I is what part I
  /// hands back; element `size` is grad_out) for input `in`.
  std::array<GradMoments<T>, size + 1> backward_all(const Moments<T>& in, const GradMoments<T>& grad_out) const {
    const auto states = forward_all(in);
    require_grad_moments(name, grad_out);
    std::array<GradMoments<T>, size + 1> grads{};
    grads[size] = grad_out;
    fill_grads<size>(states, grads);
    return grads;
  }

  /// Every part's record of its forward pass (core/record.hpp): nested
  /// compositions keep their parts' records, so a backward replays the
  /// forward pass once.
  using Record = std::tuple<detail::record_t<Parts>...>;

  /// The output for a validated `in`, and the record of the pass.
  std::pair<Moments<T>, Record> record(const Moments<T>& in) const {
    Record r{};
    const Moments<T> out = record_from<0>(in, r);  // checked by the last part (results_from_parts)
    return {out, r};
  }

  GradMoments<T> backward_impl(const Moments<T>& in, const GradMoments<T>& grad_out) const {
    Record r{};
    record_from<0>(in, r);
    return backward_recorded_impl(r, grad_out);
  }

  GradMoments<T> backward_recorded_impl(const Record& r, const GradMoments<T>& grad_out) const {
    return backward_recorded_from<size>(r, grad_out);
  }

  /// The worst validity measures over the parts, each at its own input.
  Domain<T> domain_impl(const Moments<T>& in) const {
    if constexpr (exact_forms) return Domain<T>::zero_like(in.var);  // no forward pass needed
    Record r{};
    record_from<0>(in, r);
    return domain_recorded(r);
  }

  /// domain() from the record of the forward pass.
  Domain<T> domain_recorded(const Record& r) const {
    const Domain<T> first = detail::domain_recorded(std::get<0>(parts_), std::get<0>(r));
    return domain_recorded_from<1>(r, Domain<T>::zero_like(first.score_var).worst(first));
  }

 private:
  // Every part's input for a validated `in` (parts get checked outputs).
  std::array<Moments<T>, size + 1> states_of(const Moments<T>& in) const {
    std::array<Moments<T>, size + 1> states{};
    states[0] = in;
    fill_states<0>(states);
    return states;
  }

  template <std::size_t I>
  Moments<T> forward_from(const Moments<T>& x) const {
    if constexpr (I == size) return x;
    else return forward_from<I + 1>(std::get<I>(parts_).forward_trusted(x));
  }

  template <std::size_t I>
  void fill_states(std::array<Moments<T>, size + 1>& states) const {
    if constexpr (I < size) {
      states[I + 1] = std::get<I>(parts_).forward_trusted(states[I]);
      fill_states<I + 1>(states);
    }
  }

  // Parts I.. from input x: fills their records, returns the output.
  template <std::size_t I>
  Moments<T> record_from(const Moments<T>& x, Record& r) const {
    if constexpr (I == size) {
      return x;
    } else {
      auto [out, part_record] = detail::record(std::get<I>(parts_), x);
      std::get<I>(r) = std::move(part_record);
      return record_from<I + 1>(out, r);
    }
  }

  template <std::size_t I>
  Domain<T> domain_recorded_from(const Record& r, const Domain<T>& acc) const {
    if constexpr (I == size) return acc;
    else return domain_recorded_from<I + 1>(r, acc.worst(detail::domain_recorded(std::get<I>(parts_), std::get<I>(r))));
  }

  // Gradient at the input of part I-1 .. 0 from the records, given the gradient at the output of part I-1.
  template <std::size_t I>
  GradMoments<T> backward_recorded_from(const Record& r, const GradMoments<T>& g) const {
    if constexpr (I == 0) return g;
    else return backward_recorded_from<I - 1>(r, detail::backward_recorded(std::get<I - 1>(parts_), std::get<I - 1>(r), g));
  }

  template <std::size_t I>
  void fill_grads(const std::array<Moments<T>, size + 1>& states, std::array<GradMoments<T>, size + 1>& grads) const {
    if constexpr (I > 0) {
      grads[I - 1] = std::get<I - 1>(parts_).backward_trusted(states[I - 1], grads[I]);
      fill_grads<I - 1>(states, grads);
    }
  }

  std::tuple<Parts...> parts_;
};

/// True for Serial<...> (compositions that can be taken apart with part<I>()).
template <class C>
struct is_serial : std::false_type {};
template <class T, class... Parts>
struct is_serial<Serial<T, Parts...>> : std::true_type {};
template <class C>
inline constexpr bool is_serial_v = is_serial<C>::value;

/// serial(a, b, c): x -> c(b(a(x))). All parts must share the value type T.
template <class First, class... Rest>
Serial<typename First::value_type, First, Rest...> serial(First first, Rest... rest) {
  return Serial<typename First::value_type, First, Rest...>(std::move(first), std::move(rest)...);
}

}  // namespace sigprop
