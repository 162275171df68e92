// model_validation -- the whole-model comparison of docs/validation.md: for
// every model of montecarlo::validation_models(), the per-layer relative
// error of the forward variance and of the gradient variance against a
// whole-model simulation, with the attention gradient through all paths
// (sigprop's default) and through the value path only (the paper's B.8
// backward, "before").
//
//   model_validation [--trials N] [--seed X] [--set stacks|schemes|decoders] [--detail I]
//
// --set schemes runs montecarlo::scheme_models() instead (docs/schemes.md),
// --set decoders montecarlo::decoder_models() (docs/decoders.md; no
// weight-gradient norms there). --detail I prints, for model I of the set
// (0-based) only, every layer's predicted and measured forward and gradient
// variance, length correlation of the activations and of the gradient (also
// between the sublayers) and norm_var_ratio with the simulation's
// standard error, the hidden spread (core/hidden_spread.hpp; measured by
// montecarlo::VectorMomentAccumulator::hidden_spread) and the attention
// branch's output length correlation; for a causal model (--set decoders)
// also the measured forward and gradient mean square at positions 1, 2, 4,
// ..., L of every row against the trace's sequence average.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "sigprop/models/detail/sublayers.hpp"
#include "sigprop/models/measures.hpp"
#include "sigprop/montecarlo/models.hpp"
#include "sigprop/montecarlo/validation.hpp"

namespace mc = sigprop::montecarlo;

int main(int argc, char** argv) {
  std::size_t trials = 64;
  std::uint64_t seed = 11;
  std::string set = "stacks";
  long detail = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--trials") trials = std::strtoul(argv[i + 1], nullptr, 10);
    else if (flag == "--seed") seed = std::strtoull(argv[i + 1], nullptr, 10);
    else if (flag == "--detail") detail = std::strtol(argv[i + 1], nullptr, 10);
    else if (flag == "--set" && (std::string(argv[i + 1]) == "stacks" || std::string(argv[i + 1]) == "schemes" ||
                                 std::string(argv[i + 1]) == "decoders"))
      set = argv[i + 1];
    else {
      std::fprintf(stderr, "model_validation: error: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  const auto models = set == "stacks"    ? mc::validation_models()
                      : set == "schemes" ? mc::scheme_models()
                                         : mc::decoder_models();
  if (detail >= 0) {
    if (static_cast<std::size_t>(detail) >= models.size()) {
      std::fprintf(stderr, "model_validation: error: --detail %ld is outside the valid range [0, %zu)\n", detail,
                   models.size());
      return 2;
    }
    const auto& k = models[static_cast<std::size_t>(detail)];
    mc::SimulationSetup setup;
    setup.trials = trials;
    setup.seed = seed + 1 + static_cast<std::uint64_t>(detail);  // the seed the table run gives this model
    const mc::ModelCaseResult r = mc::run_case(k, setup);
    const auto model = mc::case_model(k);  // (config, weights)
    const auto& weights = model.second;
    const auto shape = sigprop::detail::shape_of(model.first);
    // A sublayer's branch output predicted from the trace's input to it
    // (the residual input, of linear_share 1, as Residual gives its branch).
    using sigprop::detail::Sublayer;
    const auto branch_output = [&](std::size_t n, Sublayer which) {
      const auto& w = weights.layers[n];
      const bool attention = which == Sublayer::attention;
      const auto& x = attention ? r.predicted.rows[n].forward : r.predicted.mid[n].forward;
      const auto& g = attention ? r.predicted.mid[n].backward : r.predicted.rows[n + 1].backward;
      const auto run = [&](const auto& block) {
        auto input = sigprop::detail::branch_io(shape, w, which, block, x, g).input;
        input.linear_share = 1;
        return block.forward(input);
      };
      return sigprop::detail::with_activation<double>(model.first.activation, [&](auto activation) {
        return sigprop::detail::with_block<typename decltype(activation)::type>(shape, w, which, run);
      });
    };
    const auto attention_branch = [&](std::size_t n) { return branch_output(n, Sublayer::attention); };
    std::printf("%s: predicted / measured +- standard error (relative error %%)\n\n", k.label);
    std::printf("| n | forward var | gradient var | corr_len | gradient corr_len | gradient corr_len after the attention "
                "sublayer | norm_var_ratio | norm_var_ratio after the attention sublayer | hidden spread | attention "
                "branch corr_len of layer n + 1 |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
    for (std::size_t n = 0; n < r.measured.backward.size(); ++n) {
      const auto& f = r.measured.forward[n].var;
      const auto& b = r.measured.backward[n].var;
      const auto& c = r.measured.forward[n].corr_len;
      const auto& nu = r.measured.norm_var[n];
      const auto& spread = r.measured.hidden_spread[n];
      const double spread_predicted = sigprop::hidden_spread_of(r.predicted.rows[n].forward);
      const auto& gc = r.measured.backward[n].corr_len;
      const double pf = r.predicted.rows[n].forward.var, pb = r.predicted.rows[n].backward.var;
      std::printf("| %zu | %.4g / %.4g +- %.2g (%+.2f) | %.4g / %.4g +- %.2g (%+.2f) | %.4f / %.4f +- %.2g | %.4f / %.4f +- %.2g |",
                  n, pf, f.value, f.std_error, 100 * (pf - f.value) / f.value, pb, b.value, b.std_error,
                  100 * (pb - b.value) / b.value, r.predicted.rows[n].forward.corr_len, c.value, c.std_error,
                  r.predicted.rows[n].backward.corr_len, gc.value, gc.std_error);
      if (n < r.measured.backward_mid.size()) {
        const auto& gm = r.measured.backward_mid[n].corr_len;
        std::printf(" %.4f / %.4f +- %.2g |", r.predicted.mid[n].backward.corr_len, gm.value, gm.std_error);
      } else {
        std::printf(" |");
      }
      std::printf(" %.3f / %.3f +- %.2g |", static_cast<double>(sigprop::norm_var_ratio_of(r.predicted.rows[n].forward)),
                  nu.value, nu.std_error);
      if (n < r.measured.norm_var_mid.size()) {
        const auto& m = r.measured.norm_var_mid[n];
        const auto& branch = r.measured.branch_attn[n].corr_len;
        std::printf(" %.3f / %.3f +- %.2g | %.3f / %.3f +- %.2g | %.4f / %.4f +- %.2g |\n",
                    static_cast<double>(sigprop::norm_var_ratio_of(r.predicted.mid[n].forward)), m.value, m.std_error,
                    spread_predicted, spread.value, spread.std_error, attention_branch(n).corr_len, branch.value,
                    branch.std_error);
      } else {
        std::printf(" | %.3f / %.3f +- %.2g | |\n", spread_predicted, spread.value, spread.std_error);
      }
    }
    std::printf("\nBranch outputs: hidden spread and linear share in the residual input "
                "(montecarlo::cross_share), predicted from the trace's input / measured +- standard error\n\n");
    std::printf("| n | attention spread | attention linear_share | FFN spread | FFN linear_share |\n|---|---|---|---|---|\n");
    for (std::size_t n = 0; n + 1 < r.measured.backward.size(); ++n) {
      const auto a = branch_output(n, Sublayer::attention), f = branch_output(n, Sublayer::ffn);
      const auto& ms = r.measured.branch_spread;
      const auto& mh = r.measured.branch_share;
      std::printf("| %zu | %.3f / %.3f +- %.2g | %.3f / %.3f +- %.2g | %.3f / %.3f +- %.2g | %.3f / %.3f +- %.2g |\n", n,
                  a.hidden_spread, ms[2 * n].value, ms[2 * n].std_error, a.linear_share, mh[2 * n].value,
                  mh[2 * n].std_error, f.hidden_spread, ms[2 * n + 1].value, ms[2 * n + 1].std_error, f.linear_share,
                  mh[2 * n + 1].value, mh[2 * n + 1].std_error);
    }
    if (model.first.causal) {
      // The trace carries one state for the whole sequence; under the mask
      // the positions differ (docs/decoders.md, "Positions").
      std::printf("\nPer position (causal mask): measured mean square of the activations / of the gradient at "
                  "position i +- standard error; the trace's sequence average in the last column\n\n| n |");
      std::vector<std::size_t> positions;
      for (std::size_t i = 1; i <= model.first.seq_len; i *= 2) positions.push_back(i);
      if (positions.back() != model.first.seq_len) positions.push_back(model.first.seq_len);
      for (std::size_t i : positions) std::printf(" i = %zu |", i);
      std::printf(" average, measured | trace |\n|---|");
      for (std::size_t j = 0; j <= positions.size() + 1; ++j) std::printf("---|");
      std::printf("\n");
      for (std::size_t n = 0; n < r.measured.backward.size(); ++n) {
        const auto& fp = r.measured.forward_by_position[n];
        const auto& bp = r.measured.backward_by_position[n];
        std::printf("| %zu |", n);
        for (std::size_t i : positions)
          std::printf(" %.3g / %.3g +- %.2g |", fp[i - 1].value, bp[i - 1].value, bp[i - 1].std_error);
        std::printf(" %.4g / %.4g | %.4g / %.4g |\n", r.measured.forward[n].var.value, r.measured.backward[n].var.value,
                    r.predicted.rows[n].forward.var, r.predicted.rows[n].backward.var);
      }
    }
    return 0;
  }
  std::printf("| model | forward var p50 / p90 %% | grad var p50 / p90 %%, value path only | grad var p50 / p90 %% |\n");
  std::printf("|---|---|---|---|\n");
  std::vector<double> forward, before, after;
  std::vector<std::string> weight_lines;
  std::vector<double> weight_all;
  std::vector<std::string> key_lines;
  for (const auto& k : models) {
    mc::SimulationSetup setup;
    setup.trials = trials;
    setup.seed = ++seed;
    const mc::ModelCaseResult all = mc::run_case(k, setup);
    // The same simulation against the value-path-only trace.
    const auto [config, weights] = mc::case_model(k, sigprop::AttentionGradient::value_path_only);
    const auto value_only = mc::compare_trace(sigprop::trace(config, weights), all.measured);
    const auto f = mc::percentiles_of(all.errors.forward), b = mc::percentiles_of(value_only.backward),
               a = mc::percentiles_of(all.errors.backward);
    std::printf("| %s | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f |\n", k.label, f.p50, f.p90, b.p50, b.p90, a.p50,
                a.p90);
    std::fflush(stdout);
    // Weight-gradient norms of V, O, W1, W2 (models/measures.hpp), per-layer relative error.
    const auto [base_config, base_weights] = mc::case_model(k);
    forward.insert(forward.end(), all.errors.forward.begin(), all.errors.forward.end());
    before.insert(before.end(), value_only.backward.begin(), value_only.backward.end());
    after.insert(after.end(), all.errors.backward.begin(), all.errors.backward.end());
    if (!sigprop::is_encoder(base_config)) {
      // Decoders: per-layer errors instead of weight-gradient norms.
      std::printf("|   | forward %% by layer:");
      for (double e : all.errors.forward) std::printf(" %.1f", e);
      std::printf("; gradient %% by layer:");
      for (double e : all.errors.backward) std::printf(" %.1f", e);
      std::printf(" | | |\n");
      continue;
    }
    const auto grads = sigprop::weight_grad_norms(base_config, base_weights, all.predicted);
    std::vector<double> errs[4];
    for (std::size_t n = 0; n < grads.size(); ++n) {
      const auto& m = all.measured.weight_grads[n];
      const double pred[4] = {grads[n].v, grads[n].o, grads[n].ffn1, grads[n].ffn2};
      const double meas[4] = {m.v.value, m.o.value, m.ffn1.value, m.ffn2.value};
      for (int j = 0; j < 4; ++j)
        if (meas[j] > 0) {
          errs[j].push_back(100 * std::abs(pred[j] - meas[j]) / meas[j]);
          weight_all.push_back(errs[j].back());
        }
    }
    // The key with the carried hidden spread and with an isotropic layer
    // input, predicted / measured by layer.
    // ("-" where the simulation's gradient is 0, e.g. ReZero's branches.)
    std::string keys = std::string("| ") + k.label + " |", isotropic = " |", queries = " |";
    const auto ratio = [](double pred, double measured) {
      char cell[32];
      if (measured > 0)
        std::snprintf(cell, sizeof cell, " %.2f", pred / measured);
      else
        std::snprintf(cell, sizeof cell, " -");
      return std::string(cell);
    };
    for (std::size_t n = 0; n < grads.size(); ++n) {
      const auto& m = all.measured.weight_grads[n];
      keys += ratio(grads[n].key, m.k.value);
      isotropic += ratio(grads[n].key_isotropic, m.k.value);
      queries += ratio(grads[n].query, m.q.value);
    }
    key_lines.push_back(keys + isotropic + queries + " |");
    if (!errs[0].empty()) {
      char line[256];
      const auto pv = mc::percentiles_of(errs[0]), po = mc::percentiles_of(errs[1]), p1 = mc::percentiles_of(errs[2]),
                 p2 = mc::percentiles_of(errs[3]);
      std::snprintf(line, sizeof line, "| %s | %.1f / %.1f | %.1f / %.1f | %.1f / %.1f | %.1f / %.1f |", k.label, pv.p50,
                    pv.p90, po.p50, po.p90, p1.p50, p1.p90, p2.p50, p2.p90);
      weight_lines.push_back(line);
    }
  }
  const auto f = mc::percentiles_of(forward), b = mc::percentiles_of(before), a = mc::percentiles_of(after);
  std::printf("| all layers of all models | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f |\n", f.p50, f.p90, b.p50, b.p90,
              a.p50, a.p90);
  if (weight_lines.empty()) return 0;
  std::printf("\nWeight-gradient norms E||dW||_F^2, per-layer relative error p50 / p90 %%:\n\n");
  std::printf("| model | V | O | W1 | W2 |\n|---|---|---|---|---|\n");
  for (const auto& l : weight_lines) std::printf("%s\n", l.c_str());
  const auto w = mc::percentiles_of(weight_all);
  std::printf("| all matrices, all layers | %.1f / %.1f (p99 %.1f) | | | |\n", w.p50, w.p90, w.p99);
  std::printf("\nKey and query weight gradients predicted / measured, layers 1..N: the key with the carried hidden "
              "spread (key) and with an isotropic layer input (key_isotropic), the query (query):\n\n");
  std::printf("| model | key | key_isotropic | query |\n|---|---|---|---|\n");
  for (const auto& l : key_lines) std::printf("%s\n", l.c_str());
  return 0;
}
