// decoder_attention -- do grouped-query attention, rotary position embeddings
// and the causal mask change the moments of an attention block at
// initialization? A simulation of the real block (H heads, Q/K/V projections
// d -> d/H, softmax attention, W_O, no dropout; real backprop through every
// path) under each variant, against sigprop's attention_block (full, one K/V
// head per query head; with RotaryEmbedding{10000} for the rotary variants)
// or, for the causal variants, causal_attention_block. The rotary rows also
// show the prediction without rotation. docs/decoders.md records the output.
//
//   decoder_attention [--trials N] [--seed X]
//
// Grouped-query attention (Ainslie et al., "GQA", 2023): H query heads share
// `kv_heads` key/value heads (H/kv_heads query heads per group); multi-query
// attention is kv_heads = 1. Rotary embeddings (Su et al., "RoFormer", 2021):
// each pair (2j, 2j + 1) of a head's query and key coordinates at position i
// is rotated by the angle i theta_j, theta_j = 10000^(-2j/d_k). Causal: query
// i attends to keys 1..i.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "sigprop/blocks/attention_block.hpp"
#include "sigprop/montecarlo/ops.hpp"
#include "sigprop/montecarlo/sampler.hpp"
#include "sigprop/montecarlo/statistics.hpp"

namespace mc = sigprop::montecarlo;
using Matrix = mc::ops::Matrix;

namespace {

struct Variant {
  const char* label;
  int kv_heads;  // 0: one per query head
  bool rotary, causal;
};

constexpr double rotary_base = 10000;

Matrix rotate(const Matrix& x, double sign) { return mc::ops::rotate_pairs(x, rotary_base, sign); }

Matrix softmax_rows_masked(const Matrix& s, bool causal) {
  Matrix p = Matrix::Zero(s.rows(), s.cols());
  for (Eigen::Index i = 0; i < s.rows(); ++i) {
    const Eigen::Index n = causal ? i + 1 : s.cols();
    const double m = s.row(i).head(n).maxCoeff();
    double sum = 0;
    for (Eigen::Index k = 0; k < n; ++k) sum += p(i, k) = std::exp(s(i, k) - m);
    p.row(i).head(n) /= sum;
  }
  return p;
}

struct Measured {
  mc::MomentEstimates forward;
  mc::GradEstimates backward;
  std::vector<double> position_var;  // output variance at each position (pooled over trials)
};

Measured simulate(const Variant& v, int L, int d, int H, const sigprop::Moments<double>& in,
                  const sigprop::GradMoments<double>& grad, double w, int trials, std::uint64_t seed) {
  const int dk = d / H, kv = v.kv_heads > 0 ? v.kv_heads : H, group = H / kv;
  mc::Random rng(seed);
  mc::MomentAccumulator fwd, bwd;
  std::vector<double> position_var(static_cast<std::size_t>(L), 0.0);
  const double scale = 1 / std::sqrt(static_cast<double>(dk));
  for (int t = 0; t < trials; ++t) {
    const Matrix x = mc::sample_activations(L, d, in, rng);
    std::vector<Matrix> wq, wk, wv;
    for (int h = 0; h < H; ++h) wq.push_back(rng.normal_matrix(d, dk, w));
    for (int g = 0; g < kv; ++g) {
      wk.push_back(rng.normal_matrix(d, dk, w));
      wv.push_back(rng.normal_matrix(d, dk, w));
    }
    const Matrix wo = rng.normal_matrix(d, d, w);
    Matrix concat(L, d);
    std::vector<Matrix> q(H), k(kv), val(kv), probs(H);
    for (int g = 0; g < kv; ++g) {
      k[g] = x * wk[g];
      if (v.rotary) k[g] = rotate(k[g], 1);
      val[g] = x * wv[g];
    }
    for (int h = 0; h < H; ++h) {
      q[h] = x * wq[h];
      if (v.rotary) q[h] = rotate(q[h], 1);
      probs[h] = softmax_rows_masked((q[h] * k[h / group].transpose()) * scale, v.causal);
      concat.middleCols(h * dk, dk) = probs[h] * val[h / group];
    }
    const Matrix y = concat * wo;
    fwd.add(y);
    for (int i = 0; i < L; ++i) position_var[static_cast<std::size_t>(i)] += y.row(i).squaredNorm() / d / trials;
    const Matrix g = mc::sample_gradient(L, d, grad, rng);
    const Matrix gc = g * wo.transpose();
    Matrix dx = Matrix::Zero(L, d);
    std::vector<Matrix> dk_acc(kv, Matrix::Zero(L, dk)), dv_acc(kv, Matrix::Zero(L, dk));
    for (int h = 0; h < H; ++h) {
      const int gi = h / group;
      const Matrix go = gc.middleCols(h * dk, dk);
      dv_acc[gi] += probs[h].transpose() * go;
      const Matrix ds = mc::ops::softmax_rows_backward(probs[h], go * val[gi].transpose()) * scale;
      Matrix dq = ds * k[gi];
      dk_acc[gi] += ds.transpose() * q[h];
      if (v.rotary) dq = rotate(dq, -1);
      dx += dq * wq[h].transpose();
    }
    for (int gi = 0; gi < kv; ++gi) {
      const Matrix dkey = v.rotary ? rotate(dk_acc[gi], -1) : dk_acc[gi];
      dx += dkey * wk[gi].transpose() + dv_acc[gi] * wv[gi].transpose();
    }
    bwd.add(dx);
  }
  return {fwd.result(), bwd.grad_result(), position_var};
}

}  // namespace

int main(int argc, char** argv) {
  int trials = 24;
  std::uint64_t seed = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--trials") trials = std::atoi(argv[i + 1]);
    else if (flag == "--seed") seed = std::strtoull(argv[i + 1], nullptr, 10);
    else {
      std::fprintf(stderr, "decoder_attention: error: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (trials < 2) {
    std::fprintf(stderr, "decoder_attention: error: --trials = %d is outside the valid range [2, inf)\n", trials);
    return 2;
  }
  const int L = 256, d = 256, H = 8;
  const Variant variants[] = {
      {"MHA (sigprop's model)", 0, false, false}, {"GQA, 2 K/V heads", 2, false, false},
      {"MQA, 1 K/V head", 1, false, false},       {"rotary", 0, true, false},
      {"causal", 0, false, true},                 {"causal + rotary + GQA 2", 2, true, true},
  };
  // Xavier-like weights 1/d (score variance (1 - r) d^2 w^2 = 1 - r at unit input).
  const double w = 1.0 / d;
  std::printf("L %d, d %d, H %d, weights 1/d, %d trials; prediction: sigprop::attention_block "
              "(causal rows: causal_attention_block)\n\n", L, d, H, trials);
  std::printf("| r | variant | var (meas / pred) | corr_len (meas / pred) | grad var (meas / pred) | grad corr (meas / pred) |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (double r : {0.0, 0.5, 0.9}) {
    const sigprop::Moments<double> in{0, 1, r, 0};
    const sigprop::GradMoments<double> grad{1, 0.2};
    for (const Variant& v : variants) {
      const sigprop::RotaryEmbedding rotary{v.rotary ? rotary_base : 0};
      const auto gradient = sigprop::AttentionGradient::all_paths;
      const auto block = sigprop::attention_block<double>(d, H, L, {w, w, w, w}, 0, gradient, rotary);
      const auto causal = sigprop::causal_attention_block<double>(d, H, L, {w, w, w, w}, 0, gradient, rotary);
      const auto fwd = v.causal ? causal.forward(in) : block.forward(in);
      const auto bwd = v.causal ? causal.backward(in, grad) : block.backward(in, grad);
      const Measured m = simulate(v, L, d, H, in, grad, w, trials, ++seed);
      std::printf("| %.1f | %s | %.4f +- %.4f / %.4f | %.4f +- %.4f / %.4f | %.4f +- %.4f / %.4f | %.4f +- %.4f / %.4f |\n",
                  r, v.label, m.forward.var.value, m.forward.var.std_error, fwd.var, m.forward.corr_len.value,
                  m.forward.corr_len.std_error, fwd.corr_len, m.backward.var.value, m.backward.var.std_error, bwd.var,
                  m.backward.corr_len.value, m.backward.corr_len.std_error, bwd.corr_len);
      if (v.rotary) {  // the prediction without rotation, for comparison
        const auto plain = sigprop::attention_block<double>(d, H, L, {w, w, w, w}, 0);
        const auto plain_causal = sigprop::causal_attention_block<double>(d, H, L, {w, w, w, w}, 0);
        const auto pf = v.causal ? plain_causal.forward(in) : plain.forward(in);
        const auto pb = v.causal ? plain_causal.backward(in, grad) : plain.backward(in, grad);
        std::printf("|   | (without rotation) | %.4f | %.4f | %.4f | %.4f |\n", pf.var, pf.corr_len, pb.var, pb.corr_len);
      }
      if (v.causal) {
        // One head's per-position variance through W_O (Linear: d w_o E[o^2]).
        const auto predicted = causal.part<0>().head().position_forward(in);
        std::printf("|   | output var at positions 1, 2, 4, ..., %d (meas / pred): ", L);
        for (int i = 1; i <= L; i *= 2)
          std::printf("%s%.3f / %.3f", i > 1 ? ", " : "", m.position_var[static_cast<std::size_t>(i - 1)],
                      d * w * predicted[static_cast<std::size_t>(i - 1)].var);
        std::printf(" | | | | |\n");
      }
      std::fflush(stdout);
    }
  }
  return 0;
}
