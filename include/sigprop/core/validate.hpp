// sigprop/core/validate.hpp -- input checks shared by every component.
//
// Each check names the function, the parameter, the offending value and the
// valid range in its message (see errors.hpp). Batched values are checked lane
// by lane and the first failing lane is reported.
#pragma once

#include <cmath>
#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>

#include "sigprop/core/errors.hpp"
#include "sigprop/core/lanes.hpp"
#include "sigprop/core/moments.hpp"

namespace sigprop {

namespace detail {

// The valid range as text: a string literal, or a callable that builds it
// (only called when a check fails, so a passing check allocates nothing).
template <class Range>
std::string range_text(const Range& range) {
  if constexpr (std::is_invocable_v<const Range&>) return range();
  else return std::string(range);
}

// Out of line and marked cold: the report of a failing lane.
template <class Range>
[[noreturn, gnu::noinline, gnu::cold]] void raise_outside(const char* function, const char* parameter, double v,
                                                          const Range& range) {
  raise_domain(function, parameter, v, range_text(range));
}

// Every lane of `value` must satisfy `ok`; the first that does not is
// reported. The passing case runs inline (a comparison or two per lane; the
// checks below test batches in one vectorized pass first).
template <class T, class Pred, class Range>
void require(const char* function, const char* parameter, const T& value, Pred ok, const Range& range) {
  for (std::size_t i = 0; i < lane_count(value); ++i) {
    const double v = static_cast<double>(lane(value, i));
    if (!ok(v)) raise_outside(function, parameter, v, range);
  }
}

}  // namespace detail

/// Finite value of any sign.
template <class T>
void require_finite(const char* function, const char* parameter, const T& x) {
  if constexpr (is_scalar_v<T>) {
    using std::isfinite;  // and boost::multiprecision's by ADL
    if (isfinite(x)) return;  // the passing case inline; the message only on failure
  } else if (x.isFinite().all()) {
    return;  // batches: one vectorized pass when every lane is valid
  }
  detail::require(function, parameter, x, [](double v) { return std::isfinite(v); },
                  "(-inf, inf)");
}

/// Variance: finite and >= 0.
template <class T>
void require_variance(const char* function, const char* parameter, const T& x) {
  if constexpr (is_scalar_v<T>) {
    using std::isfinite;
    if (isfinite(x) && x >= 0) return;
  } else if ((x.isFinite() && x >= 0).all()) {
    return;
  }
  detail::require(function, parameter, x,
                  [](double v) { return std::isfinite(v) && v >= 0; }, "[0, inf)");
}

/// Strictly positive finite value (a variance that is divided by, a scale).
template <class T>
void require_positive(const char* function, const char* parameter, const T& x) {
  detail::require(function, parameter, x,
                  [](double v) { return std::isfinite(v) && v > 0; }, "(0, inf)");
}

/// Correlation in [-1, 1].
template <class T>
void require_correlation(const char* function, const char* parameter, const T& x) {
  if constexpr (is_scalar_v<T>) {
    if (x >= -1 && x <= 1) return;
  } else if ((x >= -1 && x <= 1).all()) {
    return;
  }
  detail::require(function, parameter, x, [](double v) { return v >= -1 && v <= 1; },
                  "[-1, 1]");
}

/// Dropout probability in [0, 1): inverted dropout has a pole at p = 1.
template <class T>
void require_probability(const char* function, const char* parameter, const T& x) {
  if constexpr (!is_scalar_v<T>)
    if ((x >= 0 && x < 1).all()) return;
  detail::require(function, parameter, x, [](double v) { return v >= 0 && v < 1; },
                  "[0, 1)");
}

/// Width, length or count: finite and >= `min` (1 unless a formula needs more).
template <class T>
void require_width(const char* function, const char* parameter, const T& x, double min = 1) {
  detail::require(function, parameter, x,
                  [min](double v) { return std::isfinite(v) && v >= min; },
                  [min] { return "[" + detail::format_number(min) + ", inf)"; });
}

/// Forward moments entering `function`.
template <class T>
void require_moments(const char* function, const Moments<T>& m) {
  require_finite(function, "mean", m.mean);
  require_variance(function, "var", m.var);
  require_correlation(function, "corr_len", m.corr_len);
  require_correlation(function, "corr_dim", m.corr_dim);
  require_variance(function, "norm_var_ratio", norm_var_ratio_of(m));
  require_variance(function, "hidden_spread", hidden_spread_of(m));
  detail::require(function, "linear_share", linear_share_of(m), [](double v) { return v >= 0 && v <= 1; },
                  "[0, 1]");
}

/// Gradient moments entering `function`'s backward map.
template <class T>
void require_grad_moments(const char* function, const GradMoments<T>& g) {
  require_variance(function, "grad_var", g.var);
  require_correlation(function, "grad_corr_len", g.corr_len);
  require_variance(function, "grad_align_activation", align_activation_of(g));
  require_variance(function, "grad_align_mean", align_mean_of(g));
  require_finite(function, "grad_norm_coupling", norm_coupling_of(g));
}

/// Whether every lane of every value is finite (one pass; the checks that
/// name the failing value run only when this is false).
template <class T, class... More>
bool all_finite(const T& first, const More&... more) {
  if constexpr (is_scalar_v<T>) {
    using std::isfinite;
    return (isfinite(first) && ... && isfinite(more));
  } else {
    // x - x is 0 for a finite x and NaN otherwise: one vectorized sum, one test.
    const T zero = (first - first) + ((more - more) + ...);
    return (zero == 0).all();
  }
}

namespace detail {

template <class T>
[[gnu::noinline, gnu::cold]] void report_non_finite(const char* function, const char* quantity, const T& x) {
  for (std::size_t i = 0; i < lane_count(x); ++i) {
    const double v = static_cast<double>(lane(x, i));
    if (!std::isfinite(v))
      raise_overflow(function, quantity, v,
                     "the input moments are outside the range this closed form can represent");
  }
}

}  // namespace detail

/// Results: every value finite (else overflow_error), correlations clamped to
/// [-1, 1] against rounding (a drift of more than 1e-9 is a bug and throws).
template <class T>
void check_result(const char* function, const char* quantity, const T& x) {
  if constexpr (is_scalar_v<T>) {
    using std::isfinite;
    if (isfinite(x)) return;
  } else if (x.isFinite().all()) {
    return;
  }
  detail::report_non_finite(function, quantity, x);
}

/// Whether every field of `m` is finite in every lane.
template <class M>
bool all_fields_finite(const M& m) {
  return std::apply([](const auto&... x) { return all_finite(x...); }, m.fields());
}

/// check_result(function, name, field) for every field of `m` (the first
/// that is not finite throws overflow_error naming it).
template <class M>
void check_fields(const char* function, const M& m) {
  std::size_t k = 0;
  for_each_field([&](const auto& x) { check_result(function, M::field_names[k++], x); }, m);
}

}  // namespace sigprop
