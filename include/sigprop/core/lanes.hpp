// sigprop/core/lanes.hpp -- uniform access to scalar and batched values.
//
// A moment value T is either a scalar (double, float) or an Eigen array whose
// lanes are independent configurations. Validation walks the lanes so that it
// can report the first offending one; the formulas never need this.
#pragma once

#include <cstddef>
#include <limits>
#include <type_traits>

#include <Eigen/Core>

namespace sigprop {

/// A scalar is a real number type with std::numeric_limits: double, float,
/// or a multiprecision type such as boost::multiprecision::cpp_bin_float_50
/// (the 50-digit reference of tests/test_reference50.cpp instantiates the
/// closed forms with it); Eigen arrays are batches.
template <class T>
inline constexpr bool is_scalar_v = std::is_arithmetic_v<T> || std::numeric_limits<T>::is_specialized;

template <class T>
std::size_t lane_count(const T& x) {
  if constexpr (is_scalar_v<T>) {
    (void)x;
    return 1;
  } else {
    return static_cast<std::size_t>(x.size());
  }
}

template <class T>
auto lane(const T& x, std::size_t i) {
  if constexpr (is_scalar_v<T>) {
    (void)i;
    return x;
  } else {
    return x(static_cast<Eigen::Index>(i));
  }
}

/// Sets lane i of x to v (x itself for a scalar), converted to x's real type.
template <class T, class V>
void set_lane(T& x, std::size_t i, const V& v) {
  if constexpr (is_scalar_v<T>) {
    (void)i;
    x = static_cast<T>(v);
  } else {
    x(static_cast<Eigen::Index>(i)) = static_cast<typename T::Scalar>(v);
  }
}

/// Whether lane i of every argument equals lane i - 1 (never for i = 0, or
/// for a NaN). Components that evaluate a batch lane by lane (quadratures,
/// causal attention's profile) copy the previous lane's result then:
/// trace_batch fills a chunk's trailing lanes with its last configuration.
template <class... A>
bool same_as_previous_lane(std::size_t i, const A&... a) {
  return i > 0 && ((lane(a, i) == lane(a, i - 1)) && ...);
}

}  // namespace sigprop
