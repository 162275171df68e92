// sigprop/core/component.hpp -- the interface every component, block and stack
// shares (the `stax` layer shape of neural-tangents: same two maps everywhere).
//
//   Moments<T>     forward(const Moments<T>& in) const;
//   GradMoments<T> backward(const Moments<T>& in, const GradMoments<T>& grad_out) const;
//
// `backward` receives the forward *input* moments because several backward
// maps depend on them (ReLU on r, LayerNorm on the input variance, GeLU on
// the input variance and r). Derived types implement forward_impl and
// backward_impl and a `static constexpr const char* name` used in error
// messages; this base validates inputs and results in one place.
//
//   Domain<T>      domain(const Moments<T>& in) const;
//
// reports how far `in` drives the closed forms from their validated region
// (core/domain.hpp); components whose forms are exact keep the default, 0.
#pragma once

#include "sigprop/core/domain.hpp"
#include "sigprop/core/hidden_spread.hpp"
#include "sigprop/core/moments.hpp"
#include "sigprop/core/validate.hpp"
#include "sigprop/numerics/math.hpp"

namespace sigprop {

template <class Derived, class T>
class Component {
 public:
  using value_type = T;

  Moments<T> forward(const Moments<T>& in) const {
    require_moments(Derived::name, in);
    return forward_trusted(in);
  }

  GradMoments<T> backward(const Moments<T>& in, const GradMoments<T>& grad_out) const {
    require_moments(Derived::name, in);
    require_grad_moments(Derived::name, grad_out);
    return backward_trusted(in, grad_out);
  }

  /// forward() for an input that already passed require_moments or is a
  /// checked output of another component (what compositions hand their
  /// parts): the component's own preconditions and the result checks run,
  /// the generic input checks are not repeated.
  Moments<T> forward_trusted(const Moments<T>& in) const {
    self().require_input(in);
    if constexpr (Derived::results_from_parts) return self().forward_impl(in);
    else return checked(Derived::name, self().forward_impl(in));
  }

  /// backward() for inputs as in forward_trusted().
  GradMoments<T> backward_trusted(const Moments<T>& in, const GradMoments<T>& grad_out) const {
    self().require_input(in);
    if constexpr (Derived::results_from_parts) return self().backward_impl(in, grad_out);
    else return finished(self().backward_impl(in, grad_out), grad_out);
  }

  /// backward_trusted() of a composition from the record of its forward
  /// pass (core/record.hpp; compositions that declare a Record).
  template <class Record>
  GradMoments<T> backward_recorded(const Record& r, const GradMoments<T>& grad_out) const {
    if constexpr (Derived::results_from_parts) return self().backward_recorded_impl(r, grad_out);
    else return finished(self().backward_recorded_impl(r, grad_out), grad_out);
  }

  /// Validity measures of the closed forms at input `in` (validated like forward()).
  Domain<T> domain(const Moments<T>& in) const {
    require_moments(Derived::name, in);
    return domain_trusted(in);
  }

  /// domain() for inputs as in forward_trusted().
  Domain<T> domain_trusted(const Moments<T>& in) const {
    self().require_input(in);
    return self().domain_impl(in);
  }

  /// Whether every closed form of the component is exact (its domain() is
  /// identically 0, so combinators need not evaluate it). Components with
  /// approximations (Attention) set it to false.
  static constexpr bool exact_forms = true;

  /// The degree k of positive homogeneity, f(t x) = t^k f(x) for t > 0: 1
  /// (Linear, ReLU, dropout), 0 (normalizations), or -1 for neither. By
  /// Euler's theorem x . J^T g = k f(x) . g, which is how a residual sum
  /// carries the gradient's alignment with the activation (Residual).
  static constexpr int homogeneity = -1;

  /// Whether backward_impl sets the gradient's norm_coupling (normalizations
  /// and the combinators that contain them); otherwise backward() keeps the
  /// output gradient's.
  static constexpr bool sets_norm_coupling = false;

  /// Whether the map acts entry by entry (its output has the input's width).
  static constexpr bool elementwise = false;

  /// Whether an output position depends on other input positions
  /// (attention); otherwise each position is mapped on its own. A residual
  /// sum reads it for the skip-branch cross term of its input gradient.
  static constexpr bool mixes_positions = false;

  /// Whether forward_impl returns a part's checked output and backward_impl
  /// a part's finished gradient unchanged (Serial: its last part's output,
  /// its first part's gradient), so the checks and defaults, which are
  /// idempotent, need not run again.
  static constexpr bool results_from_parts = false;

  /// Extra input preconditions of a component (none by default).
  void require_input(const Moments<T>&) const {}

  /// Exact forms by default: every measure 0.
  Domain<T> domain_impl(const Moments<T>& in) const { return Domain<T>::zero_like(in.var); }

 protected:
  static Moments<T> checked(const char* function, Moments<T> out) {
    out.norm_var_ratio = norm_var_ratio_of(out);  // a batch left unset: 1 (Gaussian) in every lane
    out.hidden_spread = hidden_spread_of(out);    // 0 (isotropic)
    out.linear_share = linear_share_of(out);      // 1
    if (!all_fields_finite(out)) check_fields(function, out);
    out.var = math::clamp_nonnegative(out.var);
    out.norm_var_ratio = math::nonnegative_or_zero(out.norm_var_ratio);
    out.hidden_spread = math::nonnegative_or_zero(out.hidden_spread);
    out.linear_share = math::min_of(math::nonnegative_or_zero(out.linear_share), T(0 * out.var + 1));
    out.corr_len = math::clamp_correlation(out.corr_len);
    out.corr_dim = math::clamp_correlation(out.corr_dim);
    return out;
  }

 private:
  // The checks and defaults every backward result gets.
  static GradMoments<T> finished(GradMoments<T> out, const GradMoments<T>& grad_out) {
    out.align_activation = align_activation_of(out);  // a batch left unset: 1 in every lane
    out.align_mean = align_mean_of(out);
    // A map that does not divide by a norm keeps the gradient's coupling to it.
    out.norm_coupling = Derived::sets_norm_coupling ? norm_coupling_of(out) : norm_coupling_of(grad_out);
    if (!all_fields_finite(out)) check_fields(Derived::name, out);
    out.align_activation = math::nonnegative_or_zero(out.align_activation);
    out.align_mean = math::nonnegative_or_zero(out.align_mean);
    out.corr_len = math::clamp_correlation(out.corr_len);
    return out;
  }

  const Derived& self() const { return static_cast<const Derived&>(*this); }
};

}  // namespace sigprop
