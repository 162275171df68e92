// decoder_depth -- decoders at depth (docs/decoders.md, "Decoders at depth"):
// gpt2- and llama-style stacks of 12, 24 and 48 layers, with and without
// rotary embeddings and dropout, Xavier and DeepScaleLM (and GPT-2's and
// Llama's own initializations from their embeddings), against the
// whole-model simulation (montecarlo::simulate_model with the position
// pairs). Per model, over the rows n = 0..N:
//   forward variance, relative error p50 / p90 (trace(); its average over the
//   positions is trace_positions'), length correlation, absolute error p50 /
//   p90 (the ratio of the position averages, as the simulation measures it);
//   gradient variance p50 / p90 of the average over the positions of
//   trace_position_gradients (what `sigprop table` prints) and of the
//   sequence-averaged trace, its correlation's absolute error p90;
//   per position (every position of every row): forward and gradient
//   variance p50 / p90, and each position's mean correlation with the others
//   (forward and gradient) p90;
// then, with --profile, the signed errors at five rows of each model.
// --diagnose I, for model I of each depth instead: every sublayer's branch
// output length correlation measured, predicted by the block from the
// measured input state (variance and length correlation of the stream),
// and the shift that the measured pairs of positions' correlations give a
// value average under uniform causal weights, against that of one
// correlation for every pair; then every sublayer's gradient gain
// Var[g_in]/Var[g_out] - 1 (g_out the gradient at the sublayer's output,
// g_in at its input, both averaged over the positions), measured and as
// `sigprop table` prints it, and the attention sublayer's for an i.i.d.
// upstream gradient (variance 1, correlation 0) as trace_position_gradients
// gives it, all paths and the value path alone (scripts/attention_gain_probe.py
// measures the same on the real stream) (docs/decoders.md, "Decoders at depth").
//
// --seq L gives every model L tokens instead of 64, --d D the width D
// instead of 128, --dropout P every model the dropout P, --input V,R the
// Xavier and DeepScaleLM models the input variance V and length
// correlation R instead of 1 and 0.2.
//
//   decoder_depth [--trials N] [--seed X] [--layers 12,24,48] [--seq L] [--d D] [--dropout P] [--input V,R]
//                 [--only I] [--profile 1] [--diagnose I]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "sigprop/models/detail/sublayers.hpp"
#include "sigprop/models/impl/positions.ipp"
#include "sigprop/models/positions.hpp"
#include "sigprop/montecarlo/models.hpp"
#include "sigprop/montecarlo/validation.hpp"

namespace mc = sigprop::montecarlo;

namespace {

struct DepthCase {
  std::string label;
  sigprop::ModelConfig config;
  sigprop::Scheme scheme;
  bool embedding = false;  // the input from the preset's embedding tables, not variance 1 and correlation 0.2
};

// The models at depth N: width d (128), H = 2, L tokens, input variance 1 and
// length correlation 0.2; under the gpt2 and llama schemes (std 0.02) the
// input is the preset's embedding instead.
std::vector<DepthCase> depth_models(std::size_t N, std::size_t L, std::size_t d, double dropout_override) {
  const auto make = [N, L, d, dropout_override](const char* arch, double dropout, double rotary) {
    sigprop::ModelConfig c;
    c.layers = N;
    c.d = d;
    c.heads = 2;
    c.seq_len = L;
    c = sigprop::with_architecture(c, arch);
    c.dropout = dropout_override >= 0 ? dropout_override : dropout;
    c.rotary_base = rotary;
    return c;
  };
  const auto p = [dropout_override](const char* preset) {
    char label[32];
    std::snprintf(label, sizeof label, "p=%g", dropout_override);
    return dropout_override < 0 ? std::string(preset) : std::string(label);
  };
  using S = sigprop::Scheme;
  const std::string n = " N=" + std::to_string(N) + (L == 64 ? "" : " L=" + std::to_string(L)) +
                        (d == 128 ? "" : " d=" + std::to_string(d));
  return {
      {"gpt2 xavier " + p("p=0.1") + n, make("gpt2", 0.1, 0), S::xavier},
      {"gpt2 xavier " + p("p=0") + " rotary" + n, make("gpt2", 0, 10000), S::xavier},
      {"gpt2 dslm " + p("p=0.1") + n, make("gpt2", 0.1, 0), S::dslm},
      {"llama xavier " + p("p=0") + n, make("llama", 0, 0), S::xavier},
      {"llama xavier " + p("p=0.1") + " rotary" + n, make("llama", 0.1, 10000), S::xavier},
      {"llama dslm " + p("p=0") + " rotary" + n, make("llama", 0, 10000), S::dslm},
      {"gpt2 gpt2 " + p("p=0.1") + n, make("gpt2", 0.1, 0), S::gpt2, true},
      {"llama llama " + p("p=0") + " rotary" + n, make("llama", 0, 10000), S::llama, true},
  };
}

// Each position's mean correlation with the others, from the L x L mean of X X^T / d.
std::vector<double> pair_correlations(const Eigen::MatrixXd& P) {
  const Eigen::Index L = P.rows();
  const Eigen::VectorXd inv = P.diagonal().cwiseSqrt().cwiseInverse();
  std::vector<double> out;
  for (Eigen::Index i = 0; i < L; ++i)
    out.push_back(inv(i) * (P.col(i).dot(inv) - P(i, i) * inv(i)) / double(L - 1));
  return out;
}

double signed_percent(double predicted, double measured) { return 100 * (predicted - measured) / measured; }

// The length correlation (mean covariance of two positions over the mean
// variance) of Y(i, m) = (1/(i m)) sum_{k <= i, k' <= m} R(k, k'): the value
// average of queries i and m under uniform causal weights, for the unit-
// variance values' correlations R.
double causal_average_corr(const Eigen::MatrixXd& R) {
  const Eigen::Index L = R.rows();
  Eigen::MatrixXd S = R;  // 2-D prefix sums
  for (Eigen::Index m = 0; m < L; ++m)
    for (Eigen::Index i = 1; i < L; ++i) S(i, m) += S(i - 1, m);
  for (Eigen::Index m = 1; m < L; ++m) S.col(m) += S.col(m - 1);
  double diagonal = 0, off = 0;
  for (Eigen::Index m = 0; m < L; ++m)
    for (Eigen::Index i = 0; i < L; ++i) (i == m ? diagonal : off) += S(i, m) / (double(i + 1) * double(m + 1));
  return off / double(L - 1) / diagonal;
}

// The shift of causal_average_corr from the pairs' correlations (each
// position normalized, as the norm does) to one correlation, their mean.
double pair_shift(const Eigen::MatrixXd& P) {
  const Eigen::Index L = P.rows();
  const Eigen::VectorXd inv = P.diagonal().cwiseSqrt().cwiseInverse();
  const Eigen::MatrixXd R = inv.asDiagonal() * P * inv.asDiagonal();
  const double mean = (R.sum() - R.trace()) / double(L * (L - 1));
  Eigen::MatrixXd U = Eigen::MatrixXd::Constant(L, L, mean);
  U.diagonal().setOnes();
  return causal_average_corr(R) - causal_average_corr(U);
}

// The mean over the queries i = 2..L of the mean correlation among their
// keys 1..i, from the L x L mean of X X^T / d (each position normalized).
double prefix_correlation(const Eigen::MatrixXd& P) {
  const Eigen::Index L = P.rows();
  const Eigen::VectorXd inv = P.diagonal().cwiseSqrt().cwiseInverse();
  const Eigen::MatrixXd R = inv.asDiagonal() * P * inv.asDiagonal();
  double block = R(0, 0), mean = 0;  // block: the sum of R over keys 1..i
  for (Eigen::Index i = 1; i < L; ++i) {
    block += 2 * R.col(i).head(i).sum() + R(i, i);
    mean += (block - double(i + 1)) / (double(i + 1) * double(i)) / double(L - 1);
  }
  return mean;
}

// Every sublayer's branch output correlation: measured, predicted by the
// block at the measured input state, and the pairs' shift (pair_shift).
void diagnose(const DepthCase& k, const sigprop::ModelWeights& w, const mc::ModelSimulation& s) {
  using sigprop::detail::Sublayer;
  const sigprop::Trace t = sigprop::trace(k.config, w);
  const auto shape = sigprop::detail::shape_of(k.config);
  const std::size_t N = k.config.layers;
  std::printf("\n%s: branch output corr_len, measured +- se / block at the measured input / + pairs' shift\n\n",
              k.label.c_str());
  std::printf("| n | attention | FFN |\n|---|---|---|\n");
  for (std::size_t n = 0; n < N; ++n) {
    std::printf("| %zu |", n + 1);
    for (Sublayer which : {Sublayer::attention, Sublayer::ffn}) {
      const bool attention = which == Sublayer::attention;
      sigprop::Moments<double> x = attention ? t.rows[n].forward : t.mid[n].forward;
      const auto& measured_in = attention ? s.forward[n] : s.forward_mid[n];
      x.var = measured_in.var.value;
      x.corr_len = measured_in.corr_len.value;
      const auto& g = attention ? t.mid[n].backward : t.rows[n + 1].backward;
      const auto run = [&](const auto& block) {
        auto input = sigprop::detail::branch_io(shape, w.layers[n], which, block, x, g).input;
        input.linear_share = 1;
        return block.forward(input).corr_len;
      };
      const double predicted = sigprop::detail::with_activation<double>(k.config.activation, [&](auto activation) {
        return sigprop::detail::with_block<typename decltype(activation)::type>(shape, w.layers[n], which, run);
      });
      const auto& m = attention ? s.branch_attn[n].corr_len : s.branch_ffn[n].corr_len;
      const double shift = attention ? pair_shift(s.forward_pairs[n]) : 0.0;
      std::printf(" %.4f +- %.4f / %.4f (%+.4f)", m.value, m.std_error, predicted, predicted - m.value);
      if (attention) std::printf(" / %.4f (%+.4f)", predicted + shift, predicted + shift - m.value);
      std::printf(" |");
    }
    std::printf("\n");
  }
  std::printf("\n%s: the attention input's length correlation, measured (all pairs of positions) / the mean over the\n"
              "queries of their keys' correlation / predicted; the keys' spread trace() takes (query, key)\n\n"
              "| n | all pairs | a query's keys | predicted | keys' spread |\n|---|---|---|---|---|\n",
              k.label.c_str());
  const sigprop::detail::PositionPairs pairs = sigprop::detail::recorded_trace(k.config, w).pairs;
  for (std::size_t n = 0; n < N; ++n)
    std::printf("| %zu | %.4f | %.4f | %.4f | %.3f, %.3f |\n", n, s.forward[n].corr_len.value,
                prefix_correlation(s.forward_pairs[n]), t.rows[n].forward.corr_len,
                n < pairs.spread.size() ? pairs.spread[n].query : 1.0, n < pairs.spread.size() ? pairs.spread[n].key : 1.0);
  const sigprop::Trace p = sigprop::with_position_gradients(t, sigprop::trace_position_gradients(k.config, w));
  const auto gain = [](double in, double out) { return in / out - 1; };
  std::printf("\n%s: sublayer gradient gain Var[g_in]/Var[g_out] - 1, measured / predicted (relative error); the\n"
              "attention sublayer's for an i.i.d. upstream gradient as trace_position_gradients gives it\n\n",
              k.label.c_str());
  std::printf("| n | attention | FFN | attention, i.i.d. upstream | its value path |\n|---|---|---|---|---|\n");
  for (std::size_t n = 0; n < N; ++n) {
    const double am = gain(s.backward[n].var.value, s.backward_mid[n].var.value),
                 ap = gain(p.rows[n].backward.var, p.mid[n].backward.var),
                 fm = gain(s.backward_mid[n].var.value, s.backward[n + 1].var.value),
                 fp = gain(p.mid[n].backward.var, p.rows[n + 1].backward.var);
    // The first n + 1 layers without the last FFN branch and the final
    // norm: the last attention sublayer gets the top gradient itself.
    sigprop::ModelConfig first = k.config;
    first.layers = n + 1;
    first.final_layernorm = false;
    sigprop::ModelWeights upto = w;
    upto.layers.resize(n + 1);
    upto.layers[n].ffn_branch = 0;
    const sigprop::PositionGradientTrace alone = sigprop::trace_position_gradients(first, upto);
    const double iid = gain(alone.average[n].var, alone.mid_average[n].var);
    first.attention_gradient = sigprop::AttentionGradient::value_path_only;
    const sigprop::PositionGradientTrace values = sigprop::trace_position_gradients(first, upto);
    const double iid_values = gain(values.average[n].var, values.mid_average[n].var);
    std::printf("| %zu | %.5f / %.5f (%+.1f %%) | %.5f / %.5f (%+.1f %%) | %.5f | %.5f |\n", n + 1, am, ap,
                signed_percent(ap, am), fm, fp, signed_percent(fp, fm), iid, iid_values);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t trials = 32;
  std::uint64_t seed = 5;
  std::vector<std::size_t> depths = {12, 24, 48};
  std::size_t seq_len = 64, width = 128;
  double dropout = -1;  // each model's own
  sigprop::Moments<double> input_state{0, 1, 0.2, 0};
  long only = -1, diagnosed = -1;
  bool profile = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--trials") trials = std::strtoul(value.c_str(), nullptr, 10);
    else if (flag == "--seed") seed = std::strtoull(value.c_str(), nullptr, 10);
    else if (flag == "--seq") seq_len = std::strtoul(value.c_str(), nullptr, 10);
    else if (flag == "--d") width = std::strtoul(value.c_str(), nullptr, 10);
    else if (flag == "--dropout") dropout = std::strtod(value.c_str(), nullptr);
    else if (flag == "--input") {
      char* rest = nullptr;
      input_state.var = std::strtod(value.c_str(), &rest);
      input_state.corr_len = *rest == ',' ? std::strtod(rest + 1, nullptr) : input_state.corr_len;
    }
    else if (flag == "--only") only = std::strtol(value.c_str(), nullptr, 10);
    else if (flag == "--profile") profile = value == "1";
    else if (flag == "--diagnose") diagnosed = std::strtol(value.c_str(), nullptr, 10);
    else if (flag == "--layers") {
      depths.clear();
      for (std::size_t at = 0; at < value.size();) {
        const std::size_t comma = std::min(value.find(',', at), value.size());
        depths.push_back(std::strtoul(value.substr(at, comma - at).c_str(), nullptr, 10));
        at = comma + 1;
      }
    } else {
      std::fprintf(stderr, "decoder_depth: error: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (diagnosed < 0)
    std::printf("| model | fwd var p50 / p90 %% | corr_len p50 / p90 | grad var p50 / p90 %% (positions) | grad var p50 / "
              "p90 %% (sequence state) | grad corr p90 | per position: fwd var p50 / p90 %% | grad var p50 / p90 %% | "
              "corr p90 fwd / grad |\n|---|---|---|---|---|---|---|---|---|\n");
  std::vector<std::string> profiles;
  for (std::size_t N : depths) {
    const auto models = depth_models(N, seq_len, width, dropout);
    for (std::size_t m = 0; m < models.size(); ++m) {
      if (only >= 0 && static_cast<std::size_t>(only) != m) continue;
      if (diagnosed >= 0 && static_cast<std::size_t>(diagnosed) != m) continue;
      const DepthCase& k = models[m];
      sigprop::InputSpec input = sigprop::with_architecture(sigprop::InputSpec{}, k.label.substr(0, k.label.find(' ')));
      if (!k.embedding) input.measured = input_state;
      const sigprop::ModelWeights w = sigprop::initialize(k.config, k.scheme, input);
      mc::SimulationSetup setup;
      setup.trials = trials;
      setup.seed = seed + 100 * N + m;
      setup.position_pairs = true;
      const mc::ModelSimulation s = mc::simulate_model(k.config, w, {1, 0}, setup);
      if (diagnosed >= 0) {
        diagnose(k, w, s);
        continue;
      }
      const sigprop::Trace averaged = sigprop::trace(k.config, w);
      const sigprop::PositionGradientTrace g = sigprop::trace_position_gradients(k.config, w);
      const sigprop::PositionTrace p = sigprop::trace_positions(k.config, w);
      const sigprop::Trace t = sigprop::with_position_gradients(averaged, g);
      std::vector<double> fwd, corr, grad, grad_before, grad_corr, pos_fwd, pos_grad, pos_corr, pos_grad_corr;
      std::string line = "| " + k.label + " profile (rows";
      std::string fwd_row = " | fwd var %", corr_row = " | corr_len", grad_row = " | grad var %", gc_row = " | grad corr";
      for (std::size_t n = 0; n <= N; ++n) {
        fwd.push_back(std::abs(signed_percent(t.rows[n].forward.var, s.forward[n].var.value)));
        corr.push_back(std::abs(t.rows[n].forward.corr_len - s.forward[n].corr_len.value));
        grad.push_back(std::abs(signed_percent(t.rows[n].backward.var, s.backward[n].var.value)));
        grad_before.push_back(std::abs(signed_percent(averaged.rows[n].backward.var, s.backward[n].var.value)));
        grad_corr.push_back(std::abs(t.rows[n].backward.corr_len - s.backward[n].corr_len.value));
        const std::vector<double> fc = pair_correlations(s.forward_pairs[n]), gc = pair_correlations(s.backward_pairs[n]);
        for (std::size_t i = 0; i < k.config.seq_len; ++i) {
          pos_fwd.push_back(std::abs(signed_percent(p.rows[n][i].var, s.forward_by_position[n][i].value)));
          pos_grad.push_back(std::abs(signed_percent(g.rows[n][i].var, s.backward_by_position[n][i].value)));
          pos_corr.push_back(std::abs(p.rows[n][i].corr_len - fc[i]));
          pos_grad_corr.push_back(std::abs(g.rows[n][i].corr_len - gc[i]));
        }
        if (n % (N / 4) == 0) {
          char cell[160];
          line += " " + std::to_string(n);
          std::snprintf(cell, sizeof cell, " %+.1f", signed_percent(t.rows[n].forward.var, s.forward[n].var.value));
          fwd_row += cell;
          std::snprintf(cell, sizeof cell, " %+.3f (%.3f)", t.rows[n].forward.corr_len - s.forward[n].corr_len.value,
                        s.forward[n].corr_len.std_error);
          corr_row += cell;
          std::snprintf(cell, sizeof cell, " %+.1f (%.1f)", signed_percent(t.rows[n].backward.var, s.backward[n].var.value),
                        100 * s.backward[n].var.std_error / s.backward[n].var.value);
          grad_row += cell;
          std::snprintf(cell, sizeof cell, " %+.3f", t.rows[n].backward.corr_len - s.backward[n].corr_len.value);
          gc_row += cell;
        }
      }
      profiles.push_back(line + ")" + fwd_row + corr_row + grad_row + gc_row + " |");
      const auto pf = mc::percentiles_of(fwd), pc = mc::percentiles_of(corr), pg = mc::percentiles_of(grad),
                 pb = mc::percentiles_of(grad_before), pgc = mc::percentiles_of(grad_corr),
                 ppf = mc::percentiles_of(pos_fwd), ppg = mc::percentiles_of(pos_grad),
                 ppc = mc::percentiles_of(pos_corr), ppgc = mc::percentiles_of(pos_grad_corr);
      std::printf("| %s | %.2f / %.2f | %.4f / %.4f | %.2f / %.2f | %.2f / %.2f | %.4f | %.2f / %.2f | %.2f / %.2f | "
                  "%.4f / %.4f |\n",
                  k.label.c_str(), pf.p50, pf.p90, pc.p50, pc.p90, pg.p50, pg.p90, pb.p50, pb.p90, pgc.p90, ppf.p50,
                  ppf.p90, ppg.p50, ppg.p90, ppc.p90, ppgc.p90);
      std::fflush(stdout);
    }
  }
  if (profile) {
    std::printf("\nSigned errors at five rows (predicted - measured; forward and gradient variance in %%, the\n"
                "gradient's relative standard error in parentheses; correlations absolute, the forward one's\n"
                "standard error in parentheses):\n\n");
    for (const auto& l : profiles) std::printf("%s\n", l.c_str());
  }
  return 0;
}
