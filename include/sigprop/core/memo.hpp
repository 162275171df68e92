// sigprop/core/memo.hpp -- a one-entry memo per thread for the expensive,
// pure parts of a closed form.
//
// The backward map of a composition called without a record replays the
// forward pass to recover each part's input (core/record.hpp), and some
// closed forms ask for the same intermediate result twice (the attention
// heads' norm fluctuation), so a component sees the same input several
// times in a row.
// memoized() returns the last result when the key (every parameter and input
// the result depends on) is exactly equal, lane by lane, to the last one, and
// computes it otherwise. One entry per thread and per Tag: pure and
// thread-safe, and a miss costs one comparison.
//
// The key is a std::array of values or a tuple, typically built from the
// parts' fields() ties (Moments::fields(), a component's parameters), so
// that no key lists fields by hand; the memo keeps a copy of its values.
#pragma once

#include <array>
#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include "sigprop/core/lanes.hpp"

namespace sigprop::detail {

// What the memo keeps of a key: a tuple of references (a tie) as values.
template <class Key>
struct stored_key {
  using type = Key;
};
template <class... A>
struct stored_key<std::tuple<A...>> {
  using type = std::tuple<std::decay_t<A>...>;
};

// Exactly equal: a scalar by ==, a batch lane by lane and of the same size.
template <class A, class B>
bool same_key_entry(const A& a, const B& b) {
  if constexpr (is_scalar_v<A>) return a == b;
  else return a.size() == b.size() && (a == b).all();
}

template <class A, class B, std::size_t... I>
bool same_key(const A& a, const B& b, std::index_sequence<I...>) {
  return (same_key_entry(std::get<I>(a), std::get<I>(b)) && ...);
}

template <class Tag, class Key, class Compute>
auto memoized(const Key& key, Compute compute) {
  using Value = decltype(compute());
  using Stored = typename stored_key<Key>::type;
  struct Entry {
    Stored key;
    Value value;
    bool valid = false;
  };
  static thread_local Entry last;
  if (!(last.valid && same_key(last.key, key, std::make_index_sequence<std::tuple_size_v<Key>>{}))) {
    last.value = compute();
    last.key = key;
    last.valid = true;
  }
  return last.value;
}

}  // namespace sigprop::detail
