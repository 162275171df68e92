// sigprop/core/math.hpp -- numerically careful building blocks shared by the
// closed forms, written once for scalars and Eigen arrays (one lane per
// configuration). Formulas call these or unqualified std functions brought in
// with `using std::sqrt;` so that argument-dependent lookup picks Eigen's
// array overloads for batches.
#pragma once

#include <algorithm>
#include <cmath>

#include <boost/math/constants/constants.hpp>

#include "sigprop/core/lanes.hpp"

namespace sigprop::math {

template <class T>
using real_of = std::conditional_t<is_scalar_v<T>, T, typename T::Scalar>;

template <class T>
constexpr real_of<T> pi() {
  return boost::math::constants::pi<real_of<T>>();
}

/// max(x, 0), lane-wise.
template <class T>
T clamp_nonnegative(const T& x) {
  if constexpr (is_scalar_v<T>) return x > 0 ? x : T(0);
  else return x.max(real_of<T>(0));
}

/// Clamp to [-1, 1], lane-wise (guards correlations against rounding).
template <class T>
T clamp_correlation(const T& x) {
  if constexpr (is_scalar_v<T>) return std::clamp(x, T(-1), T(1));
  else return x.max(real_of<T>(-1)).min(real_of<T>(1));
}

/// sqrt(1 - r^2) as sqrt((1 - r)(1 + r)): no cancellation as r -> +-1.
template <class T>
T sqrt_one_minus_square(const T& r) {
  using std::sqrt;
  return sqrt(clamp_nonnegative((1 - r) * (1 + r)));
}

/// acos(r) = 2 asin(sqrt((1 - r)/2)): accurate near r = 1 where acos is not.
template <class T>
T acos_stable(const T& r) {
  using std::asin;
  using std::sqrt;
  return 2 * asin(sqrt(clamp_nonnegative((1 - r) / 2)));
}

/// a / b where b > 0, else `fallback` (the limit of a degenerate, constant input).
template <class T, class F>
T ratio_or(const T& a, const T& b, const F& fallback) {
  if constexpr (is_scalar_v<T>) return b > 0 ? a / b : T(fallback);
  else return (b > 0).select(a / b, real_of<T>(fallback));
}

}  // namespace sigprop::math
