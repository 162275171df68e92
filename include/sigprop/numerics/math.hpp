// sigprop/numerics/math.hpp -- numerically careful building blocks shared by the
// closed forms, written once for scalars and Eigen arrays (one lane per
// configuration). Formulas call these or unqualified std functions brought in
// with `using std::sqrt;` so that argument-dependent lookup picks Eigen's
// array overloads for batches.
#pragma once

#include <algorithm>
#include <cmath>

#include <boost/math/constants/constants.hpp>

#include "sigprop/core/lanes.hpp"
#include "sigprop/numerics/select.hpp"

namespace sigprop::math {

namespace detail {
// Lazily picks T::Scalar and T::PlainObject (std::conditional_t would name
// double::Scalar).
template <class T, bool Scalar = is_scalar_v<T>>
struct lane_traits {
  using real = T;
  using plain = T;
};
template <class T>
struct lane_traits<T, false> {
  using real = typename T::Scalar;
  using plain = typename T::PlainObject;
};
}  // namespace detail

/// The real type of a lane: T for scalars, T::Scalar for Eigen arrays.
template <class T>
using real_of = typename detail::lane_traits<T>::real;

/// The value type of a scalar or of an Eigen expression (its PlainObject).
template <class T>
using plain_t = typename detail::lane_traits<T>::plain;

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

/// x where x > 1e-30, else 0, lane-wise: for O(1) ratios that a deep stack
/// can shrink geometrically (a gradient's alignment), which would otherwise
/// reach subnormal numbers, slow on every core, long before they underflow.
template <class T>
T nonnegative_or_zero(const T& x) {
  const real_of<T> tiny = real_of<T>(1e-30);
  if constexpr (is_scalar_v<T>) return x > tiny ? x : T(0);
  else return math::select(math::less(tiny, x), x, 0);
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

namespace detail {

// atan on |y| <= tan(pi/8) by its Taylor series y sum_n (-1)^n y^(2n) / (2n + 1),
// 22 terms: the first term left out is below tan(pi/8)^44 / 45 < 1.4e-17
// relative. Horner's scheme in z = y^2, on whole arrays (Eigen vectorizes it).
template <class T>
T atan_reduced(const T& y) {
  constexpr int terms = 22;
  const T z = y * y;
  T sum = T::Constant(y.size(), real_of<T>((terms % 2 ? 1.0 : -1.0) / (2 * terms - 1)));
  for (int n = terms - 2; n >= 0; --n) sum = sum * z + real_of<T>((n % 2 ? -1.0 : 1.0) / (2 * n + 1));
  return y * sum;
}

}  // namespace detail

/// atan(x), lane-wise. Scalars: std::atan (or a multiprecision type's atan). Eigen arrays: vectorized (Eigen
/// 3.4 has no packet atan): the argument reduction of Cephes' atan (Moshier,
/// "Methods and Programs for Mathematical Functions", 1989: |x| > tan(3 pi/8)
/// -> pi/2 - atan(1/|x|); |x| > tan(pi/8) -> pi/4 + atan((|x| - 1)/(|x| + 1)))
/// and the Taylor series on |y| <= tan(pi/8). Measured accuracy
/// (tests/test_math.cpp): within 3 ulp of std::atan (double).
template <class T>
T atan(const T& x) {
  if constexpr (is_scalar_v<T>) {
    using std::atan;  // multiprecision scalars: their atan by ADL
    return atan(x);
  } else {
    using R = real_of<T>;
    const R pi_2 = boost::math::constants::half_pi<R>(), pi_4 = pi_2 / 2;
    const T t = x.abs();
    const T big = math::less(R(2.414213562373095049), t);   // tan(3 pi/8); masks (numerics/select.hpp)
    const T mid = math::less(R(0.4142135623730950488), t);  // tan(pi/8)
    const T y = math::select(big, -1 / t, math::select(mid, (t - 1) / (t + 1), t));
    const T result = math::select(big, pi_2, math::select(mid, pi_4, 0)) + detail::atan_reduced(y);
    return math::select(math::less(x, 0), -result, result);
  }
}

/// asin(x), lane-wise. Scalars: std::asin. Eigen arrays: vectorized, as
/// atan(|x| / c) for |x| <= c and pi/2 - atan(c / |x|) above, c = sqrt((1 - x)(1 + x))
/// (no cancellation near |x| = 1). NaN outside [-1, 1]. Measured accuracy
/// (tests/test_math.cpp): within 4 ulp of std::asin (double).
template <class T>
T asin(const T& x) {
  if constexpr (is_scalar_v<T>) {
    using std::asin;
    return asin(x);
  } else {
    using R = real_of<T>;
    const T t = x.abs();
    const T c = ((1 - x) * (1 + x)).sqrt();
    const T small = math::less_equal(t, c);
    const T angle = math::atan(math::select(small, t / c, c / t));
    const T result = math::select(small, angle, boost::math::constants::half_pi<R>() - angle);
    return math::select(math::less(x, 0), -result, result);
  }
}

/// acos(r) = 2 asin(sqrt((1 - r)/2)): accurate near r = 1 where acos is not.
template <class T>
T acos_stable(const T& r) {
  using std::sqrt;
  return 2 * math::asin(T(sqrt(clamp_nonnegative(T((1 - r) / 2)))));
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

/// a / b where b > 0, else `fallback` (the limit of a degenerate, constant
/// input). Either argument may be an Eigen expression; the result is a plain value.
template <class A, class B, class F>
auto ratio_or(const A& a, const B& b, const F& fallback) {
  using T = plain_t<A>;
  if constexpr (is_scalar_v<T>) return b > 0 ? T(a / b) : T(fallback);
  else return T(math::select(math::less(0, b), a / b, real_of<T>(fallback)));
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
    if (v == 0) return real_of<T>(0.5);  // zero-mean inputs: skip the erfc
    return erfc(-v * boost::math::constants::one_div_root_two<real_of<T>>()) / 2;
  });
}

}  // namespace sigprop::math
