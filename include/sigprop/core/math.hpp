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

namespace detail {
// Lazily picks T::Scalar: std::conditional_t would name double::Scalar.
template <class T, bool Scalar = is_scalar_v<T>>
struct real_of_impl {
  using type = T;
};
template <class T>
struct real_of_impl<T, false> {
  using type = typename T::Scalar;
};
}  // namespace detail

/// The real type of a lane: T for scalars, T::Scalar for Eigen arrays.
template <class T>
using real_of = typename detail::real_of_impl<T>::type;

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
  return sqrt(clamp_nonnegative(T((1 - r) * (1 + r))));
}

/// acos(r) = 2 asin(sqrt((1 - r)/2)): accurate near r = 1 where acos is not.
template <class T>
T acos_stable(const T& r) {
  using std::asin;
  using std::sqrt;
  return 2 * asin(sqrt(clamp_nonnegative(T((1 - r) / 2))));
}

/// The larger of x and y, lane-wise.
template <class T>
T max_of(const T& x, const T& y) {
  if constexpr (is_scalar_v<T>) return x < y ? y : x;
  else return x.max(y);
}

/// The smaller of x and y, lane-wise.
template <class T>
T min_of(const T& x, const T& y) {
  if constexpr (is_scalar_v<T>) return y < x ? y : x;
  else return x.min(y);
}

/// a / b where b > 0, else `fallback` (the limit of a degenerate, constant input).
template <class T, class F>
T ratio_or(const T& a, const T& b, const F& fallback) {
  if constexpr (is_scalar_v<T>) return b > 0 ? a / b : T(fallback);
  else return (b > 0).select(a / b, real_of<T>(fallback));
}

/// f applied lane by lane: scalar special functions (erfc, Owen's T) on batches.
template <class T, class F>
T map_lanes(const T& x, F f) {
  if constexpr (is_scalar_v<T>) return f(x);
  else return x.unaryExpr(f);
}

/// f(x, y) applied lane by lane.
template <class T, class F>
T map_lanes(const T& x, const T& y, F f) {
  if constexpr (is_scalar_v<T>) return f(x, y);
  else return x.binaryExpr(y, f);
}

/// Standard normal density phi(x) = e^{-x^2/2} / sqrt(2 pi), lane-wise.
template <class T>
T normal_pdf(const T& x) {
  using std::exp;
  return boost::math::constants::one_div_root_two_pi<real_of<T>>() * exp(-x * x / 2);
}

/// Standard normal CDF Phi(x) = erfc(-x / sqrt 2) / 2, lane-wise. Accurate to
/// a few ulps relative in the lower tail, so Phi(-x) is the upper tail 1 - Phi(x)
/// without cancellation.
template <class T>
T normal_cdf(const T& x) {
  return map_lanes(x, [](real_of<T> v) {
    using std::erfc;
    return erfc(-v * boost::math::constants::one_div_root_two<real_of<T>>()) / 2;
  });
}

}  // namespace sigprop::math
