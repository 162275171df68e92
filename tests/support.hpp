// Shared test helpers: printing a validation report and asserting it against
// the paper's Table 20.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "catch.hpp"
#include "sigprop/core/moments.hpp"
#include "sigprop/montecarlo/validation.hpp"

namespace sigprop::test {

/// Prints ours vs the paper's percentiles (and the sampling-noise margin).
inline void print_report(const montecarlo::ValidationReport& r) {
  std::printf("%-10s %-9s %6s  %-20s %-20s %-20s\n", "component", "quantity", "points",
              "ours p50/p90/p99 %", "paper p50/p90/p99 %", "noise p50/p90/p99 %");
  for (auto q : montecarlo::all_quantities) {
    if (!r.has(q)) continue;
    const auto e = r.errors(q);
    const auto p = montecarlo::paper_percentiles(r.component(), q);
    const auto n = r.noise_margin(q);
    std::printf("%-10s %-9s %6zu  %5.2f/%5.2f/%6.2f    %5.1f/%5.1f/%5.1f      %5.2f/%5.2f/%5.2f\n",
                r.component().c_str(), montecarlo::to_string(q), r.points(q), e.p50, e.p90, e.p99,
                p.p50, p.p90, p.p99, n.p50, n.p90, n.p99);
  }
}

/// Asserts that each of our percentiles is no worse than the paper's plus the
/// noise margin of our sample (ValidationReport::noise_margin explains it):
/// the paper's grid was larger, so at equal formula accuracy our percentiles
/// can only differ from theirs by sampling noise.
inline void require_no_worse_than_paper(const montecarlo::ValidationReport& r) {
  for (auto q : montecarlo::all_quantities) {
    if (!r.has(q)) continue;
    const auto e = r.errors(q);
    const auto p = montecarlo::paper_percentiles(r.component(), q);
    const auto n = r.noise_margin(q);
    if (p.p50 < 0) continue;
    INFO(r.component() << " " << montecarlo::to_string(q) << ": ours " << e.p50 << "/" << e.p90
                       << "/" << e.p99 << ", paper " << p.p50 << "/" << p.p90 << "/" << p.p99
                       << ", noise " << n.p50 << "/" << n.p90 << "/" << n.p99);
    CHECK(e.p50 <= p.p50 + n.p50);
    CHECK(e.p90 <= p.p90 + n.p90);
    CHECK(e.p99 <= p.p99 + n.p99);
  }
}

/// For exact closed forms: every grid point within `z` standard errors. With
/// z = 5 a correct formula fails with probability < 6e-7 per point.
inline void require_within_standard_errors(const montecarlo::ValidationReport& r, double z = 5) {
  for (auto q : montecarlo::all_quantities) {
    if (!r.has(q)) continue;
    INFO(r.component() << " " << montecarlo::to_string(q) << ": max z = " << r.max_z(q));
    CHECK(r.max_z(q) <= z);
  }
}

/// The same formula serves float, double and batched lanes: for a component
/// without parameters, float results agree with double to `float_tol` (float
/// rounding, 6e-8, amplified by a few operations) and Eigen-array lanes agree
/// with the scalar double results to 1e-13 (vectorized exp/sqrt differ from
/// the scalar library functions in the last bits).
template <template <class> class Component>
void require_same_formula(const std::vector<Moments<double>>& inputs, const GradMoments<double>& grad,
                          double float_tol = 1e-6) {
  using Lanes = Eigen::ArrayXd;
  const auto n = static_cast<Eigen::Index>(inputs.size());
  Moments<Lanes> batch{Lanes(n), Lanes(n), Lanes(n), Lanes(n)};
  for (Eigen::Index i = 0; i < n; ++i) {
    const auto& in = inputs[static_cast<std::size_t>(i)];
    batch.mean(i) = in.mean, batch.var(i) = in.var, batch.corr_len(i) = in.corr_len, batch.corr_dim(i) = in.corr_dim;
  }
  const Component<Lanes> batched;
  const auto out = batched.forward(batch);
  const auto g = batched.backward(batch, {Lanes::Constant(n, grad.var), Lanes::Constant(n, grad.corr_len)});
  for (Eigen::Index i = 0; i < n; ++i) {
    const auto& in = inputs[static_cast<std::size_t>(i)];
    const auto d = Component<double>().forward(in);
    const auto gd = Component<double>().backward(in, grad);
    const Moments<float> in_f{float(in.mean), float(in.var), float(in.corr_len), float(in.corr_dim)};
    const auto f = Component<float>().forward(in_f);
    const auto gf = Component<float>().backward(in_f, {float(grad.var), float(grad.corr_len)});
    INFO("input " << i << ": mean " << in.mean << ", var " << in.var << ", corr_len " << in.corr_len
                  << ", corr_dim " << in.corr_dim);
    CHECK(f.mean == Approx(d.mean).epsilon(float_tol).margin(float_tol));
    CHECK(f.var == Approx(d.var).epsilon(float_tol).margin(float_tol));
    CHECK(f.corr_len == Approx(d.corr_len).margin(float_tol));
    CHECK(f.corr_dim == Approx(d.corr_dim).margin(float_tol));
    CHECK(gf.var == Approx(gd.var).epsilon(float_tol).margin(float_tol));
    CHECK(gf.corr_len == Approx(gd.corr_len).margin(float_tol));
    CHECK(out.mean(i) == Approx(d.mean).epsilon(1e-13).margin(1e-15));
    CHECK(out.var(i) == Approx(d.var).epsilon(1e-13).margin(1e-15));
    CHECK(out.corr_len(i) == Approx(d.corr_len).epsilon(1e-13).margin(1e-15));
    CHECK(out.corr_dim(i) == Approx(d.corr_dim).epsilon(1e-13).margin(1e-15));
    CHECK(g.var(i) == Approx(gd.var).epsilon(1e-13).margin(1e-15));
    CHECK(g.corr_len(i) == Approx(gd.corr_len).epsilon(1e-13).margin(1e-15));
  }
}

}  // namespace sigprop::test
