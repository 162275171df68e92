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
#pragma once

#include <array>
#include <cstddef>

#include "sigprop/core/lanes.hpp"

namespace sigprop::detail {

template <class Tag, class T, std::size_t N, class Compute>
auto memoized(const std::array<T, N>& key, Compute compute) {
  using Value = decltype(compute());
  struct Entry {
    std::array<T, N> key;
    Value value;
    bool valid = false;
  };
  static thread_local Entry last;
  const auto same = [](const T& a, const T& b) {
    if constexpr (is_scalar_v<T>) return a == b;
    else return a.size() == b.size() && (a == b).all();
  };
  bool hit = last.valid;
  for (std::size_t i = 0; i < N && hit; ++i) hit = same(last.key[i], key[i]);
  if (!hit) {
    last.value = compute();
    last.key = key;
    last.valid = true;
  }
  return last.value;
}

}  // namespace sigprop::detail
