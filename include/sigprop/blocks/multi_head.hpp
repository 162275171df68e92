// sigprop/blocks/multi_head.hpp -- H independent heads on the same input,
// outputs concatenated.
//
// Reference: Kedia et al. (ICML 2024), appendix C.1: every output entry comes
// from one head, so the forward per-entry moments are those of one head (of
// width d_k = d/H). Backward: the input gradient is the sum of the H heads'
// input gradients; the heads have independent zero-mean weights, so their
// contributions are uncorrelated and gradient variance and covariance are H
// times one head's (the correlation is unchanged).
#pragma once

#include <type_traits>
#include <utility>

#include "sigprop/core/component.hpp"
#include "sigprop/core/record.hpp"

namespace sigprop {

namespace detail {
template <class Head, class = void>
struct heads_norm_var_ratio : std::false_type {};
template <class Head>
struct heads_norm_var_ratio<Head, std::void_t<decltype(std::declval<const Head&>().norm_var_ratio_of_heads(
                                      std::declval<const Moments<typename Head::value_type>&>(),
                                      std::declval<const typename Head::value_type&>()))>> : std::true_type {};
}  // namespace detail

template <class T, class Head>
class MultiHead : public Component<MultiHead<T, Head>, T> {
 public:
  static constexpr const char* name = "sigprop::MultiHead";
  static constexpr bool exact_forms = Head::exact_forms;
  static constexpr int homogeneity = Head::homogeneity;
  static constexpr bool mixes_positions = Head::mixes_positions;

  MultiHead(Head head, T heads) : head_(std::move(head)), heads_(heads) {
    require_width(name, "heads", heads_);
  }

  const Head& head() const { return head_; }
  const T& heads() const { return heads_; }

  /// The per-entry moments of one head; the norm_var_ratio and
  /// hidden_spread of the concatenation when the head provides them
  /// (attention: the heads share the softmax-weighted input,
  /// components/attention.hpp).
  Moments<T> forward_impl(const Moments<T>& in) const { return of_heads(in, head_.forward_trusted(in)); }

  Domain<T> domain_impl(const Moments<T>& in) const { return head_.domain_trusted(in); }

  GradMoments<T> backward_impl(const Moments<T>& in, const GradMoments<T>& g) const {
    return of_heads(head_.backward_trusted(in, g));
  }

  /// The record of a forward pass (core/record.hpp): the head's.
  using Record = detail::record_t<Head>;

  /// The output for a validated `in`, as forward_trusted() gives it, and the record.
  std::pair<Moments<T>, Record> record(const Moments<T>& in) const {
    auto [one, r] = detail::record(head_, in);
    return {this->checked(name, of_heads(in, one)), std::move(r)};
  }

  GradMoments<T> backward_recorded_impl(const Record& r, const GradMoments<T>& g) const {
    return of_heads(detail::backward_recorded(head_, r, g));
  }

  Domain<T> domain_recorded(const Record& r) const { return detail::domain_recorded(head_, r); }

 private:
  // The concatenation's moments from one head's output.
  Moments<T> of_heads(const Moments<T>& in, Moments<T> out) const {
    if constexpr (detail::heads_norm_var_ratio<Head>::value) {
      out.norm_var_ratio = head_.norm_var_ratio_of_heads(in, heads_);
      out.hidden_spread = head_.hidden_spread_of_heads(in, heads_);
    }
    return out;
  }

  // The input gradient from one head's: H uncorrelated contributions.
  GradMoments<T> of_heads(GradMoments<T> one) const {
    one.var = heads_ * one.var;
    return one;
  }

  Head head_;
  T heads_;
};

template <class Head, class T = typename Head::value_type>
MultiHead<T, Head> multi_head(Head head, T heads) {
  return MultiHead<T, Head>(std::move(head), heads);
}

}  // namespace sigprop
