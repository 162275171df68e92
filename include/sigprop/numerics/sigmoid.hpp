// sigprop/numerics/sigmoid.hpp -- the logistic sigmoid sigma(x) = 1/(1 + e^-x)
// and SiLU(x) = x sigma(x) in scalar arithmetic, without overflow and without
// cancellation: both tails of sigma from one e^-|x|, and the differences
// SiLU(mu + d) - SiLU(mu), SiLU'(mu + d), ReLU - SiLU, SiLU' - 1{x > 0} that
// SiLU's Gaussian expectations integrate (components/silu.hpp,
// docs/components/silu.md, "How the moments are evaluated").
#pragma once

#include <cmath>
#include <limits>

namespace sigprop::detail {

/// The logistic sigmoid at x and -x from one e = exp(-|x|) <= 1: no overflow,
/// and the lower tail e/(1 + e) keeps its relative accuracy.
template <class R>
struct SiluSigmoid {
  R plus, minus;  // sigma(x), sigma(-x) = 1 - sigma(x)
  explicit SiluSigmoid(R x) {
    // exp underflows to 0 past -log(denorm_min) (744 for double); skipping the
    // call there skips libm's slow underflow path (a large-variance input
    // reaches it at most quadrature nodes).
    static const R underflow = -std::log(std::numeric_limits<R>::denorm_min());
    const R e = std::abs(x) < underflow ? std::exp(-std::abs(x)) : R(0);
    const R upper = 1 / (1 + e), lower = e / (1 + e);
    plus = x >= 0 ? upper : lower;
    minus = x >= 0 ? lower : upper;
  }
};

template <class R>
R silu_value(R x) {
  return x * SiluSigmoid<R>(x).plus;
}

/// SiLU'(x) = sigma(x) (1 + x sigma(-x)).
template <class R>
R silu_derivative(R x) {
  const SiluSigmoid<R> sig(x);
  return sig.plus * (1 + x * sig.minus);
}

/// e^-d - 1 + d, |d| <= 1, without the cancellation of expm1(-d) + d: below
/// 1/2 its Taylor series (d^2/2)(1 - d/3 (1 - d/4 (1 - ... (1 - d/18)))), the
/// first term left out below 1e-20 relative.
template <class R>
R silu_exp_remainder(R d) {
  if (std::abs(d) >= R(0.5)) return std::expm1(-d) + d;
  R t = 1;
  for (int k = 18; k >= 3; --k) t = 1 - d / R(k) * t;
  return d * d / 2 * t;
}

/// SiLU(mu + d) - SiLU(mu) = d sigma(x) + mu (sigma(x) - sigma(mu)), x = mu + d.
/// For |d| <= 1, with sigma(x) - sigma(mu) = sigma(x) sigma(-mu) (1 - e^-d) and
/// B = mu sigma(-mu), it is sigma(x) (d (1 + B) - B (e^-d - 1 + d)): the part
/// linear in d is separate, so nothing cancels even where 1 + B = SiLU'(mu)/sigma(mu)
/// vanishes (the SiLU minimum). Further apart, the difference of the smaller
/// sigmoid tails. `at_mu` is sigma at mu.
template <class R>
R silu_difference(R mu, const SiluSigmoid<R>& at_mu, R d) {
  const R x = mu + d;
  const SiluSigmoid<R> sig(x);
  if (std::abs(d) <= 1) {
    const R b = mu * at_mu.minus;
    return sig.plus * (d * (1 + b) - b * silu_exp_remainder(d));
  }
  const R diff = mu >= 0 && x >= 0 ? at_mu.minus - sig.minus : sig.plus - at_mu.plus;  // sigma(x) - sigma(mu)
  return d * sig.plus + mu * diff;
}

/// SiLU'(mu + d) = sigma(x) (1 + x sigma(-x)). For |d| <= 1 the bracket is
/// (1 + B) + d sigma(-x) - B sigma(x) (1 - e^-d), B = mu sigma(-mu), which keeps
/// its relative accuracy where SiLU' vanishes (the minimum) as long as mu does
/// not sit there too. `at_mu` is sigma at mu.
template <class R>
R silu_derivative_near(R mu, const SiluSigmoid<R>& at_mu, R d) {
  const R x = mu + d;
  if (std::abs(d) > 1) return silu_derivative(x);
  const SiluSigmoid<R> sig(x);
  const R b = mu * at_mu.minus;
  return sig.plus * ((1 + b) + d * sig.minus + b * sig.plus * std::expm1(-d));
}

/// ReLU(x) - SiLU(x) = |x| sigma(-|x|) >= 0: at most 0.2785, below
/// |x| e^-|x|, with a kink at 0 (the ReLU split).
template <class R>
R silu_relu_gap(R x) {
  const R t = std::abs(x);
  return t * SiluSigmoid<R>(t).minus;
}

/// SiLU'(x) - 1{x > 0} = sign(x) sigma(-|x|) (|x| sigma(|x|) - 1): at most 1/2
/// in size, below (1 + |x|) e^-|x|, with a jump from 1/2 to -1/2 at 0.
template <class R>
R silu_step_gap(R x) {
  const R t = std::abs(x);
  const SiluSigmoid<R> sig(t);
  const R v = sig.minus * (t * sig.plus - 1);
  return x > 0 ? v : -v;
}

}  // namespace sigprop::detail
