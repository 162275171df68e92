// sigprop/numerics/select.hpp -- lane-wise comparisons and selection that stay
// vectorized.
//
// Eigen 3.4's `(x < y).select(a, b)` has no packet path: a comparison yields
// bool coefficients, and Select evaluates coefficient by coefficient (every
// lane a branch, `a` and `b` computed lane by lane). Here a comparison is a
// mask of the arrays' own scalar type, all bits set where it holds (what
// Eigen's packet comparisons pcmp_lt and pcmp_le return), and selection is
// Eigen's pselect (a blend), as small functors in the manner of Eigen's own
// (functors/BinaryFunctors.h, with functor_traits). Both branches are
// evaluated in every lane and the blend keeps one: an unused branch may hold
// an inf or a NaN (a / b where b = 0), which never reaches the result.
//
// Masks are for Eigen arrays of float or double. A stored mask holds NaNs
// (all bits set); it is only for select, mask_or and all_of.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include <Eigen/Core>

#include "sigprop/core/lanes.hpp"

namespace sigprop::math {

namespace detail {

// A scalar with every bit set (a NaN), the scalar form of a true mask lane.
template <class Scalar>
Scalar all_bits_set() {
  static_assert(sizeof(Scalar) == 8 || sizeof(Scalar) == 4, "masks are for float and double lanes");
  using Bits = std::conditional_t<sizeof(Scalar) == 8, std::uint64_t, std::uint32_t>;
  const Bits bits = ~Bits(0);
  Scalar s;
  std::memcpy(&s, &bits, sizeof s);
  return s;
}

// A mask lane is set when any bit is (0 and -0 are the unset forms a
// scalar evaluation can meet).
template <class Scalar>
bool mask_set(Scalar m) {
  using Bits = std::conditional_t<sizeof(Scalar) == 8, std::uint64_t, std::uint32_t>;
  Bits bits;
  std::memcpy(&bits, &m, sizeof bits);
  return (bits << 1) != 0;
}

template <class Scalar>
struct less_mask_op {
  EIGEN_STRONG_INLINE Scalar operator()(const Scalar& a, const Scalar& b) const {
    return a < b ? all_bits_set<Scalar>() : Scalar(0);
  }
  template <class Packet>
  EIGEN_STRONG_INLINE Packet packetOp(const Packet& a, const Packet& b) const {
    return Eigen::internal::pcmp_lt(a, b);
  }
};

template <class Scalar>
struct less_equal_mask_op {
  EIGEN_STRONG_INLINE Scalar operator()(const Scalar& a, const Scalar& b) const {
    return a <= b ? all_bits_set<Scalar>() : Scalar(0);
  }
  template <class Packet>
  EIGEN_STRONG_INLINE Packet packetOp(const Packet& a, const Packet& b) const {
    return Eigen::internal::pcmp_le(a, b);
  }
};

template <class Scalar>
struct mask_or_op {
  EIGEN_STRONG_INLINE Scalar operator()(const Scalar& a, const Scalar& b) const {
    return mask_set(a) || mask_set(b) ? all_bits_set<Scalar>() : Scalar(0);
  }
  template <class Packet>
  EIGEN_STRONG_INLINE Packet packetOp(const Packet& a, const Packet& b) const {
    return Eigen::internal::por(a, b);
  }
};

template <class Scalar>
struct select_op {
  EIGEN_STRONG_INLINE Scalar operator()(const Scalar& mask, const Scalar& a, const Scalar& b) const {
    return mask_set(mask) ? a : b;
  }
  template <class Packet>
  EIGEN_STRONG_INLINE Packet packetOp(const Packet& mask, const Packet& a, const Packet& b) const {
    return Eigen::internal::pselect(mask, a, b);
  }
};

// An argument as an Eigen expression of `rows` lanes: arrays and
// expressions as they are, a number as a constant.
template <class Plain, class V>
decltype(auto) lanes_of(const V& v, Eigen::Index rows) {
  if constexpr (is_scalar_v<V>) return Plain::Constant(rows, typename Plain::Scalar(v));
  else return v.derived();
}

// The plain array type of the first Eigen argument.
template <class X, class Y>
using plain_of_pair = typename std::conditional_t<is_scalar_v<X>, Y, X>::PlainObject;

template <class X, class Y>
Eigen::Index rows_of_pair(const X& x, const Y& y) {
  if constexpr (is_scalar_v<X>) return y.rows();
  else {
    (void)y;
    return x.rows();
  }
}

template <template <class> class Op, class X, class Y>
auto compare(const X& x, const Y& y) {
  using Plain = plain_of_pair<X, Y>;
  const Eigen::Index rows = rows_of_pair(x, y);
  return lanes_of<Plain>(x, rows).binaryExpr(lanes_of<Plain>(y, rows), Op<typename Plain::Scalar>());
}

}  // namespace detail

/// The mask of x < y, lane-wise (either argument may be a number).
template <class X, class Y>
auto less(const X& x, const Y& y) {
  return detail::compare<detail::less_mask_op>(x, y);
}

/// The mask of x <= y, lane-wise.
template <class X, class Y>
auto less_equal(const X& x, const Y& y) {
  return detail::compare<detail::less_equal_mask_op>(x, y);
}

/// The mask of either mask, lane-wise.
template <class A, class B>
auto mask_or(const Eigen::ArrayBase<A>& a, const Eigen::ArrayBase<B>& b) {
  return a.derived().binaryExpr(b.derived(), detail::mask_or_op<typename A::Scalar>());
}

/// Whether every lane of a mask is set.
template <class M>
bool all_of(const Eigen::ArrayBase<M>& mask) {
  const typename M::PlainObject m = mask;
  for (Eigen::Index i = 0; i < m.size(); ++i)
    if (!detail::mask_set(m(i))) return false;
  return true;
}

/// a where the mask is set, else b, lane-wise (a and b arrays, expressions
/// or numbers); the mask's plain array type.
template <class M, class A, class B>
typename M::PlainObject select(const Eigen::ArrayBase<M>& mask, const A& a, const B& b) {
  using Plain = typename M::PlainObject;
  const auto& then_lanes = detail::lanes_of<Plain>(a, mask.rows());
  const auto& else_lanes = detail::lanes_of<Plain>(b, mask.rows());
  using Then = std::decay_t<decltype(then_lanes)>;
  using Else = std::decay_t<decltype(else_lanes)>;
  return Eigen::CwiseTernaryOp<detail::select_op<typename Plain::Scalar>, const M, const Then, const Else>(
      mask.derived(), then_lanes, else_lanes);
}

}  // namespace sigprop::math

namespace Eigen::internal {

template <class Scalar>
struct functor_traits<sigprop::math::detail::less_mask_op<Scalar>> {
  enum { Cost = NumTraits<Scalar>::AddCost, PacketAccess = packet_traits<Scalar>::HasCmp };
};
template <class Scalar>
struct functor_traits<sigprop::math::detail::less_equal_mask_op<Scalar>> {
  enum { Cost = NumTraits<Scalar>::AddCost, PacketAccess = packet_traits<Scalar>::HasCmp };
};
template <class Scalar>
struct functor_traits<sigprop::math::detail::mask_or_op<Scalar>> {
  enum { Cost = NumTraits<Scalar>::AddCost, PacketAccess = packet_traits<Scalar>::Vectorizable };
};
template <class Scalar>
struct functor_traits<sigprop::math::detail::select_op<Scalar>> {
  enum { Cost = NumTraits<Scalar>::AddCost, PacketAccess = packet_traits<Scalar>::Vectorizable };
};

}  // namespace Eigen::internal
