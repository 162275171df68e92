// sigprop/montecarlo/components/embedding.hpp -- the empirical twin of
// sigprop::Embedding: real Gaussian lookup tables (fresh each trial), real
// i.i.d. Zipf token draws, a real random segment split, and the real sum of
// the looked-up rows; backward, the real scatter-add of the output gradient
// into the table rows.
//
// The token table has |V| rows but a sequence reads at most L of them, so
// only the rows of the tokens that occur are drawn (the distinct tokens are
// found by sorting): |V| = 32000 costs no more than |V| = 10. Rows that do
// not occur never touch the output, so this is the same distribution as
// drawing the whole table.
#pragma once

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "sigprop/components/embedding.hpp"
#include "sigprop/montecarlo/sampler.hpp"
#include "sigprop/montecarlo/validation.hpp"

namespace sigprop::montecarlo {

/// Tokens of rank 1..|V| with P(i) = (1/i)/H_|V| (Zipf's law, appendix B.1),
/// by inversion: a binary search of u H_|V| in the cumulative sums of 1/i.
class ZipfSampler {
 public:
  /// Largest vocabulary the tabulated inverse supports (80 MB of sums).
  static constexpr double max_vocab = 1e7;

  explicit ZipfSampler(double vocab) {
    constexpr const char* fn = "sigprop::montecarlo::ZipfSampler";
    const Eigen::Index v = to_size(fn, "vocab", vocab);
    if (vocab > max_vocab)
      sigprop::detail::raise_domain(fn, "vocab", vocab,
                                    "{1, ..., 1e7} (the sampler tabulates the cumulative sums)");
    cumulative_.resize(static_cast<std::size_t>(v));
    double s = 0;
    for (std::size_t i = 0; i < cumulative_.size(); ++i) {
      s += 1 / static_cast<double>(i + 1);
      cumulative_[i] = s;
    }
  }

  Eigen::Index vocab() const { return static_cast<Eigen::Index>(cumulative_.size()); }

  /// One token rank in [1, |V|].
  Eigen::Index operator()(Random& rng) const {
    const double u = rng.uniform() * cumulative_.back();
    const auto it = std::upper_bound(cumulative_.begin(), cumulative_.end(), u);
    const auto i = std::min<std::ptrdiff_t>(it - cumulative_.begin(),
                                            static_cast<std::ptrdiff_t>(cumulative_.size()) - 1);
    return static_cast<Eigen::Index>(i) + 1;
  }

 private:
  std::vector<double> cumulative_;
};

/// The random split point s of the two segments (positions < s form
/// segment A) under the model of `form`: uniform on {1, ..., L-1} for
/// nonempty_exact, on {0, ..., L} for inclusive_exact and for the paper's
/// "x uniform between 0 and L".
inline Eigen::Index draw_segment_split(Eigen::Index seq_len, SegmentCorrelation form,
                                       Random& rng) {
  const auto draw = [&rng](Eigen::Index lo, Eigen::Index hi) {  // uniform on {lo, ..., hi}
    const auto n = static_cast<double>(hi - lo + 1);
    return std::min(lo + static_cast<Eigen::Index>(rng.uniform() * n), hi);
  };
  return form == SegmentCorrelation::nonempty_exact ? draw(1, seq_len - 1) : draw(0, seq_len);
}

/// One simulated input sequence and its embedding output.
struct EmbeddingTrial {
  std::vector<Eigen::Index> tokens;  ///< token rank per position (empty without a token table)
  std::vector<Eigen::Index> rows;    ///< row of `token_table` read by each position
  std::vector<Eigen::Index> distinct;  ///< the distinct token ranks, sorted (row k is distinct[k])
  Eigen::Index split = 0;            ///< positions < split form segment A
  Eigen::MatrixXd output;            ///< L x d, rows are positions
};

/// Draws fresh tables, tokens and split, and sums the looked-up rows.
class EmbeddingSimulator {
 public:
  EmbeddingSimulator(const Embedding<double>& embedding, Eigen::Index width)
      : embedding_(embedding), width_(width) {
    constexpr const char* fn = "sigprop::montecarlo::EmbeddingSimulator";
    if (embedding.is_measured())
      sigprop::detail::raise_domain(fn, "a measured embedding has no tables to simulate (sample its moments "
                                    "with sample_activations)");
    seq_len_ = to_size(fn, "seq_len", embedding.config().seq_len);
    to_size(fn, "width", static_cast<double>(width));
    if (embedding.has_table(EmbeddingTable::token)) zipf_.emplace(embedding.config().vocab);
  }

  Eigen::Index seq_len() const { return seq_len_; }

  EmbeddingTrial draw(Random& rng) const {
    const Eigen::Index L = seq_len_, d = width_;
    EmbeddingTrial t;
    t.output = Eigen::MatrixXd::Zero(L, d);
    if (zipf_) {
      t.tokens.resize(static_cast<std::size_t>(L));
      for (auto& k : t.tokens) k = (*zipf_)(rng);
      t.distinct = t.tokens;
      std::sort(t.distinct.begin(), t.distinct.end());
      t.distinct.erase(std::unique(t.distinct.begin(), t.distinct.end()), t.distinct.end());
      const Eigen::MatrixXd table = rng.normal_matrix(
          static_cast<Eigen::Index>(t.distinct.size()), d, embedding_.table_var(EmbeddingTable::token));
      t.rows.resize(t.tokens.size());
      for (Eigen::Index l = 0; l < L; ++l) {
        const auto k = t.tokens[static_cast<std::size_t>(l)];
        const auto row = std::lower_bound(t.distinct.begin(), t.distinct.end(), k) - t.distinct.begin();
        t.rows[static_cast<std::size_t>(l)] = static_cast<Eigen::Index>(row);
        t.output.row(l) += table.row(static_cast<Eigen::Index>(row));
      }
    }
    if (embedding_.has_table(EmbeddingTable::position))
      t.output += rng.normal_matrix(L, d, embedding_.table_var(EmbeddingTable::position));
    if (embedding_.has_table(EmbeddingTable::segment)) {
      const Eigen::MatrixXd table =
          rng.normal_matrix(2, d, embedding_.table_var(EmbeddingTable::segment));
      t.split = draw_segment_split(L, embedding_.config().segment_corr, rng);
      for (Eigen::Index l = 0; l < L; ++l) t.output.row(l) += table.row(l < t.split ? 0 : 1);
    }
    return t;
  }

 private:
  Embedding<double> embedding_;
  Eigen::Index width_, seq_len_ = 0;
  std::optional<ZipfSampler> zipf_;
};

/// Simulates the embedding output over `setup.trials` sequences of the
/// embedding's own length L (which overrides setup.seq_len) and width
/// setup.width. The backward gradient reaching every looked-up row is the
/// output gradient itself (dx_l/dE_k[idx_k(l)] = I), so `backward` measures
/// the sampled gradient: the identity backward is not tested by this, see
/// simulate_row_grad. A measured embedding is simulated as Gaussian inputs
/// with its moments (the setting of appendix E).
inline SimulationResult simulate(const Embedding<double>& embedding, const GradMoments<double>& grad,
                                 const SimulationSetup& setup) {
  constexpr const char* fn = "sigprop::montecarlo::simulate(Embedding)";
  require_setup(fn, setup);
  require_grad_moments(fn, grad);
  Random rng(setup.seed);
  MomentAccumulator fwd, bwd;
  if (embedding.is_measured()) {
    const Moments<double> m = embedding.forward();
    for (std::size_t t = 0; t < setup.trials; ++t) {
      fwd.add(sample_activations(setup.seq_len, setup.width, m, rng));
      bwd.add(sample_gradient(setup.seq_len, setup.width, grad, rng));
    }
    return {fwd.result(), bwd.grad_result()};
  }
  const EmbeddingSimulator sim(embedding, setup.width);
  for (std::size_t t = 0; t < setup.trials; ++t) {
    fwd.add(sim.draw(rng).output);
    bwd.add(sample_gradient(sim.seq_len(), setup.width, grad, rng));
  }
  return {fwd.result(), bwd.grad_result()};
}

/// The uniform signature of the simulators; `in` is ignored like in forward.
inline SimulationResult simulate(const Embedding<double>& embedding, const Moments<double>&,
                                 const GradMoments<double>& grad, const SimulationSetup& setup) {
  return simulate(embedding, grad, setup);
}

/// Variance of the gradient accumulated in one row of `table` (the twin of
/// Embedding::row_grad_var): per trial, fresh tokens and split, an L x d
/// output gradient with moments `grad`, and the scatter-add
/// dE[r] = sum_{l : idx(l) = r} g_l over all positions; the requested row
/// (token rank, position 1..L, segment 1..2; zero if no position read it)
/// contributes its d hidden units.
inline Estimate simulate_row_grad(const Embedding<double>& embedding, EmbeddingTable table, double row,
                                  const GradMoments<double>& grad, const SimulationSetup& setup) {
  constexpr const char* fn = "sigprop::montecarlo::simulate_row_grad(Embedding)";
  require_setup(fn, setup);
  require_grad_moments(fn, grad);
  (void)embedding.row_grad_var(table, row, grad);  // validates table and row
  const auto wanted = to_size(fn, "row", row);
  const EmbeddingSimulator sim(embedding, setup.width);
  const Eigen::Index L = sim.seq_len(), d = setup.width;
  Random rng(setup.seed);
  MomentAccumulator acc;
  for (std::size_t t = 0; t < setup.trials; ++t) {
    const EmbeddingTrial trial = sim.draw(rng);
    const Eigen::MatrixXd g = sample_gradient(L, d, grad, rng);
    Eigen::MatrixXd row_grad = Eigen::MatrixXd::Zero(1, d);
    switch (table) {
      case EmbeddingTable::token: {
        // Scatter-add into the rows of the tokens that occur, then read rank `wanted`.
        Eigen::MatrixXd table_grad = Eigen::MatrixXd::Zero(static_cast<Eigen::Index>(trial.distinct.size()), d);
        for (Eigen::Index l = 0; l < L; ++l) table_grad.row(trial.rows[static_cast<std::size_t>(l)]) += g.row(l);
        const auto it = std::lower_bound(trial.distinct.begin(), trial.distinct.end(), wanted);
        if (it != trial.distinct.end() && *it == wanted)
          row_grad = table_grad.row(static_cast<Eigen::Index>(it - trial.distinct.begin()));
        break;
      }
      case EmbeddingTable::position:
        row_grad = g.row(wanted - 1);
        break;
      case EmbeddingTable::segment: {
        Eigen::MatrixXd table_grad = Eigen::MatrixXd::Zero(2, d);
        for (Eigen::Index l = 0; l < L; ++l) table_grad.row(l < trial.split ? 0 : 1) += g.row(l);
        row_grad = table_grad.row(wanted - 1);
        break;
      }
    }
    acc.add(row_grad);
  }
  return acc.result().var;
}

}  // namespace sigprop::montecarlo
