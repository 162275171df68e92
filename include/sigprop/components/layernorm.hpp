// sigprop/components/layernorm.hpp -- y = g0 (x - mean(x)) / sd(x) + b0 over
// the d hidden units of each position (biased variance, no epsilon; the gain
// g0 > 0 and bias b0 at their initial values, 1 and 0 by default: every unit
// alike, so the output's mean is b0, its variance g0^2 and its correlations
// those of the normalized rows; the gradient is multiplied by g0).
//
// Reference: Kedia et al., "Transformers Get Stable" (ICML 2024), appendix
// B.6 (A.6 in the later version); the backward Jacobian is Xu et al. (2019),
// Eq. 17. The paper keeps only the large-d limit; the results below are exact
// for Gaussian inputs at every d >= 4 (derivation and the simulations that
// confirm them: docs/components/layernorm.md).
//
// Input model. Each position is a Gaussian vector whose d entries have
// variance s^2 and pairwise correlation r^d, and two positions have
// correlation r^l entry by entry; the covariance is separable (Kronecker:
// Cov[x_ij, x_kl] = s^2 R^l_ik R^d_jl), the one model valid for every
// (r^l, r^d) and the one a centering projection (an earlier LayerNorm)
// produces. Centering removes the mean and the common part of a position, so
// each centered position is u sqrt(s^2 (1 - r^d)) with u standard normal in
// the k = d - 1 dimensional subspace orthogonal to the all-ones vector, and two
// positions have per-coordinate correlation rho = r^l. Then, with alpha = k/2,
//   H0 = 2F1(1/2, 1/2; alpha; rho^2),   H1 = 2F1(1/2, 1/2; alpha + 1; rho^2),
//   c0 = (2/k) (Gamma(alpha + 1/2) / Gamma(alpha))^2:
// forward (B.6):
//   E[y] = 0, Var[y] = 1, r^d_out = -1/(d - 1)       (every output row sums to 0
//                                                     and has squared norm d);
//   r^l_out = E[cos angle(u, u')] = F(rho) = rho c0 H1  (the paper: r (1 - 1/d));
// backward g_in = (I - 1 1^T/d - y y^T/d) g / sd(x) (Xu et al. Eq. 17), a
// projection of rank d - 2 scaled by 1/sd(x), with E[1/chi^2_k] = 1/(k - 2):
//   Var[g_in] = Var[g] (d - 2) / ((d - 3) s^2 (1 - r^d))   (the paper: Var[g]/s^2),
//   Cov^l[g_in] = r_g Var[g] F'(rho) / (s^2 (1 - r^d)),
//   F'(rho) = E[(k - 2 + cos^2)/(|u||u'|)] = c0 (k H0 - (k - 1) H1)  (Price's theorem:
//   the Jacobian covariance is the slope of the forward correlation map), F'(1) = (k-1)/(k-2).
// d <= 3 has no finite gradient variance (E[1/chi^2_2] = inf) and is rejected.
//
// Norm fluctuation and gradient alignment (moments.hpp): with a_1 = align_mean,
// a_x = align_activation of g and nu_r = norm_var_ratio of x (all 1 for
// Gaussian x and isotropic g), for nu_r <= 1,
//   Var[g_in] = Var[g] (d - a_1 - a_x) / ((d - 1 - 2 nu_r) s^2 (1 - r^d)),
// beyond nu_r = 1 through detail::inverse_norm_factor; the correlation keeps
// the Gaussian slope ratio. Outputs: nu_r = 0, and the input gradient has
// a_1 = a_x = 0. A gradient coupled to the row norm (norm_coupling c)
// multiplies the variance by e^c, and the input gradient carries
// c + 2 nu_r/(d - 1). Derivations: docs/components/layernorm.md, "Norm
// fluctuation and gradient alignment" and "Gradient coupled to the row norm".
#pragma once

#include <cmath>
#include <type_traits>
#include <utility>

#include <boost/math/special_functions/gamma.hpp>

#include "sigprop/core/component.hpp"
#include "sigprop/core/errors.hpp"
#include "sigprop/core/memo.hpp"
#include "sigprop/numerics/hypergeometric.hpp"
#include "sigprop/numerics/math.hpp"

namespace sigprop {

namespace detail {

// F(rho) and F'(rho) (see the header comment), for d >= 4 and |rho| <= 1.
template <class Real>
struct LayerNormAngle {
  Real corr;   // F(rho) = E[cos angle]
  Real slope;  // F'(rho)
};

// Tag of LayerNorm's per-thread memo of c0 (core/memo.hpp).
struct LayerNormC0Tag {};

// c0 = (2/k) (Gamma(alpha + 1/2) / Gamma(alpha))^2, k = d - 1, alpha = k/2:
// depends on d only (LayerNorm computes it once per width).
template <class Real>
Real layernorm_c0(Real d) {
  // Below d = 49 (the contiguous relation's widths) the gamma ratio is taken
  // in long double: in double it loses a few eps (docs/accuracy.md).
  if constexpr (std::is_same_v<Real, double>) {
    if (d < 2 * half_half_series_alpha<double> + 1) return static_cast<double>(layernorm_c0<long double>(d));
  }
  const layernorm_policy pol;
  const Real k = d - 1, alpha = k / 2;
  const Real ratio = boost::math::tgamma_delta_ratio(alpha, Real(0.5), pol);  // G(a)/G(a+1/2)
  return 2 / (k * ratio * ratio);
}

// F and F' from H0 and D = H0 - H1 at |rho|.
template <class Real>
LayerNormAngle<Real> layernorm_angle_from(Real d, Real rho, Real c0, const HalfHalfPair<Real>& h) {
  using std::abs;
  const Real k = d - 1;
  const Real abs_rho = std::min(Real(abs(rho)), Real(1));
  const Real corr = abs_rho * c0 * (h.h0 - h.diff);
  // k H0 - (k - 1) H1 = H0 + (k - 1) (H0 - H1)
  const Real slope = c0 * (h.h0 + (k - 1) * h.diff);
  return {rho < 0 ? -corr : corr, slope};
}

template <class Real>
LayerNormAngle<Real> layernorm_angle(Real d, Real rho, Real c0) {
  using std::abs;
  const Real abs_rho = std::min(Real(abs(rho)), Real(1));
  const Real x = abs_rho * abs_rho, y = (1 - abs_rho) * (1 + abs_rho);
  return layernorm_angle_from(d, rho, c0, half_half((d - 1) / 2, x, y));
}

template <class Real>
LayerNormAngle<Real> layernorm_angle(Real d, Real rho) {
  return layernorm_angle(d, rho, layernorm_c0(d));
}

// 1 - F(1 - delta) for delta in [0, 2], for d >= 4. In double it runs in long
// double. delta >= 1/16: 1 - F, where F <= 1 - 1/20 and the subtraction loses
// at most a factor 20 (0.01 eps of double in long double); below,
// delta + rho c0 G of two positive terms (half_half_complement).
template <class Real>
Real layernorm_corr_complement(Real d, Real delta) {
  if constexpr (std::is_same_v<Real, double>) {
    return static_cast<double>(layernorm_corr_complement<long double>(d, delta));
  } else {
    if (delta == 0) return 0;
    const Real c0 = layernorm_c0(d), rho = 1 - delta;
    if (delta >= Real(1) / 16) return 1 - layernorm_angle(d, rho, c0).corr;
    return delta + rho * half_half_complement((d - 1) / 2, c0, delta * (2 - delta));
  }
}

/// E[m/Q] for Q = |x_c|^2 over a k-dimensional subspace (k = d - 1 for
/// LayerNorm, d for RMSNorm), of mean m and norm_var_ratio nu (relative
/// variance 2 nu/k). Up to the Gaussian's nu = 1, Q ~ m chi^2_n/n with
/// n = k/nu, exact for the scaled chi-square with these two moments:
/// k/(k - 2 nu). Beyond, a row is taken as a Gaussian row times an
/// independent scale carrying the excess relative variance 2 (nu - 1)/k,
/// whose E[m/scale^2] is taken to second order:
///   k/(k - 2) (1 + 2 (nu - 1)/k).
/// Continuous at nu = 1 and finite for every nu (k > 2): the chi-square form
/// would have a pole at nu = k/2 (docs/components/layernorm.md).
template <class T>
T inverse_norm_factor(const T& nu, const T& k) {
  const T below = math::min_of(nu, T(0 * nu + 1)), excess = math::max_of(T(nu - 1), T(0 * nu));
  return k / (k - 2 * below) * (1 + 2 * excess / k);
}

}  // namespace detail

template <class T = double>
class LayerNorm : public Component<LayerNorm<T>, T> {
  using Real = math::real_of<T>;
  // float lanes are evaluated in double (the series and recurrence cost the same).
  using Work = std::conditional_t<(sizeof(Real) < sizeof(double)), double, Real>;

 public:
  static constexpr const char* name = "sigprop::LayerNorm";
  static constexpr int homogeneity = 0;
  static constexpr bool sets_norm_coupling = true;

  /// `d`: the number of hidden units normalized over, an integer >= 4;
  /// `gain` > 0 and `bias`: the affine map's initial values, the same for every unit.
  LayerNorm(T d, T gain, T bias) : LayerNorm(d) {
    require_positive(name, "gain", gain);
    require_finite(name, "bias", bias);
    gain_ = gain;
    bias_ = bias;
  }

  /// Gain 1 and bias 0, as at the usual initialization.
  explicit LayerNorm(T d) : d_(d), gain_(0 * d + 1), bias_(0 * d) {
    sigprop::detail::require(
        name, "d", d_,
        [](double v) { return std::isfinite(v) && v >= 4 && v <= 1e15 && std::floor(v) == v; },
        "{4, 5, 6, ...} (an integer width; d <= 3 has no finite gradient variance)");
    // c0 (a gamma ratio in long double, about 1 us) depends on d only: the
    // LayerNorms of a stack share their width, so the last one is kept.
    c0_ = detail::memoized<detail::LayerNormC0Tag>(std::array<T, 1>{d_}, [&] {
      return math::map_lanes(d_, [](Real d) { return static_cast<Real>(detail::layernorm_c0<Work>(d)); });
    });
  }

  const T& d() const { return d_; }
  const T& gain() const { return gain_; }
  const T& bias() const { return bias_; }

  /// A constant position (zero variance, or r^d = 1) has no direction to
  /// normalize.
  void require_input(const Moments<T>& in) const {
    require_positive(name, "var", in.var);
    sigprop::detail::require(name, "corr_dim", in.corr_dim, [](double v) { return v < 1; },
                             "[-1, 1) (r^d = 1 makes every position constant)");
  }

  Moments<T> forward_impl(const Moments<T>& in) const { return forward_with(in, angle(in.corr_len)); }

  GradMoments<T> backward_impl(const Moments<T>& in, const GradMoments<T>& g) const {
    return backward_with(in, angle(in.corr_len), g);
  }

  /// The record of a forward pass (core/record.hpp): the input and F, F' at
  /// its length correlation, which the backward map reuses.
  struct Record {
    Moments<T> in;
    detail::LayerNormAngle<T> angle;
  };

  /// The output for a validated `in`, as forward_trusted() gives it, and the record.
  std::pair<Moments<T>, Record> record(const Moments<T>& in) const {
    require_input(in);
    Record r{in, angle(in.corr_len)};
    return {this->checked(name, forward_with(in, r.angle)), r};
  }

  GradMoments<T> backward_recorded_impl(const Record& r, const GradMoments<T>& g) const {
    return backward_with(r.in, r.angle, g);
  }

  Domain<T> domain_recorded(const Record& r) const { return this->domain_impl(r.in); }  // exact forms

 private:
  Moments<T> forward_with(const Moments<T>& in, const detail::LayerNormAngle<T>& a) const {
    Moments<T> out;
    out.mean = bias_ + 0 * in.mean;
    out.var = gain_ * gain_ + 0 * in.mean;
    out.corr_len = a.corr;
    out.corr_dim = -1 / (d_ - 1) + 0 * in.mean;
    out.norm_var_ratio = 0 * in.mean;
    out.hidden_spread = spread::normalized(in, d_);  // core/hidden_spread.hpp
    out.linear_share = linear_share_of(in);
    return out;
  }

  GradMoments<T> backward_with(const Moments<T>& in, const detail::LayerNormAngle<T>& a,
                               const GradMoments<T>& g) const {
    const T centered_var = in.var * (1 - in.corr_dim);  // per-coordinate variance after centering
    const T slope_at_one = (d_ - 2) / (d_ - 3);         // F'(1) = (k - 1)/(k - 2)
    // E|P g|^2/(d Var[g]) times d E[1/Q] (see the header comment)
    const T aligned = align_mean_of(g) + align_activation_of(g);
    require_aligned_energy(aligned);
    GradMoments<T> out;
    using std::exp;
    const T nu = norm_var_ratio_of(in), coupling = norm_coupling_of(g);
    // E[|P g_i|^2 m/Q_i] = E|P g|^2 E[m/Q] e^{c} for log-normal row energies
    // with Cov[log |g_i|^2, log(m/Q_i)] = c (the header comment).
    out.var = gain_ * gain_ * g.var * (d_ - aligned) * detail::inverse_norm_factor(nu, T(d_ - 1)) * exp(coupling) /
              ((d_ - 1) * centered_var);
    out.corr_len = g.corr_len * a.slope / slope_at_one;
    out.align_activation = 0 * g.var;
    out.align_mean = 0 * g.var;
    // g_in,i = P g_i / sd(x_i): the input gradient's log-energy gains
    // log(m/Q_i), of variance Var[Q]/m^2 = 2 nu/(d - 1).
    out.norm_coupling = coupling + 2 * nu / (d_ - 1);
    return out;
  }

 public:
  /// Two orthogonal directions hold at most all of the energy: a_1 + a_x <= d.
  void require_aligned_energy(const T& aligned) const {
    if constexpr (!is_scalar_v<T>)
      if ((aligned <= d_).all()) return;
    for (std::size_t i = 0; i < lane_count(aligned); ++i)
      if (!(lane(aligned, i) <= lane(d_, i)))
        sigprop::detail::raise_domain(name, "grad_align_mean + grad_align_activation",
                                      static_cast<double>(lane(aligned, i)),
                                      "[0, d] (d = " + sigprop::detail::format_number(static_cast<double>(lane(d_, i))) + ")");
  }

  /// r^l_out = E[cos angle] as a function of the input length correlation.
  T corr_len_map(const T& corr_len) const { return angle(corr_len).corr; }

  /// 1 - r^l_out from one_minus_corr = 1 - r^l in [0, 2], accurate to a few
  /// eps relative where 1 - corr_len_map(r) keeps only eps/(1 - r)
  /// (detail::layernorm_corr_complement; docs/accuracy.md).
  T corr_complement(const T& one_minus_corr) const {
    sigprop::detail::require(name, "one_minus_corr", one_minus_corr, [](double v) { return v >= 0 && v <= 2; },
                             "[0, 2] (1 - r for a correlation r in [-1, 1])");
    return math::map_lanes(d_, one_minus_corr, [](Real d, Real delta) {
      return static_cast<Real>(detail::layernorm_corr_complement<Work>(Work(d), Work(delta)));
    });
  }

  /// F'(rho): the slope of corr_len_map, which scales the gradient covariance.
  T grad_corr_factor(const T& corr_len) const { return angle(corr_len).slope; }

 private:
  // F and F' at rho. Scalars: one evaluation. Batches of double: Gauss's
  // series on all lanes at once where half_half would use it, the
  // recurrence (small d, |rho| > 1/sqrt 2) and rho = +-1 lane by lane.
  // Memoized per thread (core/memo.hpp): forward, the backward's replay of
  // it and the backward's slope all ask for the same angle (a backward from
  // a record takes it from there).
  detail::LayerNormAngle<T> angle(const T& rho) const {
    return detail::memoized<LayerNorm>(std::array<T, 2>{d_, rho}, [&] { return compute_angle(rho); });
  }

  detail::LayerNormAngle<T> compute_angle(const T& rho) const {
    if constexpr (is_scalar_v<T> || !std::is_same_v<Real, Work>) {
      T corr = rho, slope = rho;
      for (std::size_t i = 0; i < lane_count(rho); ++i) {
        const auto a = detail::layernorm_angle<Work>(Work(lane(d_, i)), Work(lane(rho, i)), Work(lane(c0_, i)));
        set_lane(corr, i, static_cast<Real>(a.corr));
        set_lane(slope, i, static_cast<Real>(a.slope));
      }
      return {corr, slope};
    } else {
      const T abs_rho = rho.abs().min(Real(1));
      const T x = abs_rho * abs_rho, y = (1 - abs_rho) * (1 + abs_rho);
      const T alpha = (d_ - 1) / 2;
      const auto by_series = (y > 0) && (x <= Real(0.5) || alpha >= detail::half_half_series_alpha<Real>);
      detail::HalfHalfPair<T> h{T::Zero(rho.size()), T::Zero(rho.size())};
      if (by_series.any()) {
        // Lanes not by series get a harmless x = 0 (one term) here and are replaced below.
        const T xs = by_series.select(x, Real(0)), ys = by_series.select(y, Real(1));
        h = detail::half_half_series_lanes(alpha, xs, ys);
      }
      for (Eigen::Index i = 0; i < rho.size(); ++i)
        if (!by_series(i)) {
          const auto one = detail::half_half(alpha(i), x(i), y(i));
          h.h0(i) = one.h0;
          h.diff(i) = one.diff;
        }
      const T k = d_ - 1;
      const T corr = abs_rho * c0_ * (h.h0 - h.diff);
      return {math::select(math::less(rho, 0), -corr, corr), c0_ * (h.h0 + (k - 1) * h.diff)};
    }
  }


  T d_;
  T gain_, bias_;
  T c0_;  // layernorm_c0(d), lane-wise
};

}  // namespace sigprop
