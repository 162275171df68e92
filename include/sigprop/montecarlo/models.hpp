// sigprop/montecarlo/models.hpp -- whole-model simulation: real multi-head
// attention, LayerNorm, FFN, dropout and residual scaling with random weights,
// forward and real backpropagation, measuring every layer's residual stream.
//
// Layer n (Kedia et al. 2024, section 2 and appendix G):
//   Pre-LN : x <- lambda x + beta Attn(LN(x));  x <- lambda x + beta FFN(LN(x))
//   Post-LN: x <- LN(lambda x + beta Attn(x));  x <- LN(lambda x + beta FFN(x))
//   no LN  : x <- lambda x + beta Attn(x);      x <- lambda x + beta FFN(x)
//   Attn(h) = Dropout(concat_h(head_h(h)) W_O),  FFN(h) = Dropout(Dropout_q(act(h W1)) W2)
// (the heads drop their probabilities with config.attention_p(), Dropout_q
// is config.ffn_dropout). Decoder options: LN an RMSNorm, every head causal,
// the gated FFN Dropout(Dropout_q(act(h W1) * (h V)) W2).
// The model input is drawn with the given moments (compound symmetric along
// length; with an embedding LayerNorm, the embedding output is drawn and
// normalized) and the gradient at the top with (grad var, grad corr_len).
#pragma once

#include <utility>
#include <vector>

#include <Eigen/Core>

#include "sigprop/config.hpp"
#include "sigprop/models/config.hpp"
#include "sigprop/models/schemes.hpp"
#include "sigprop/models/stack.hpp"
#include "sigprop/montecarlo/statistics.hpp"

namespace sigprop::montecarlo {

/// Measured squared Frobenius norms of one layer's weight gradients.
struct WeightGradEstimates {
  Estimate q, k, v, o, ffn1, ffn2;
};

/// Measured statistics at every layer boundary n = 0..N (n = 0 is the model
/// input, n the output of layer n), and after each layer's attention sublayer
/// (index n - 1 for layer n). Gradients are w.r.t. the same tensors.
struct ModelSimulation {
  std::vector<MomentEstimates> forward;
  std::vector<GradEstimates> backward;
  std::vector<MomentEstimates> forward_mid;
  std::vector<GradEstimates> backward_mid;
  /// Moments of each sublayer's branch output f (before beta), per layer:
  /// attention (branch_attn) and FFN (branch_ffn).
  std::vector<MomentEstimates> branch_attn, branch_ffn;
  /// norm_var_ratio (core/moments.hpp) of the activations of `forward` and
  /// `forward_mid`: what a LayerNorm at that point divides by.
  std::vector<Estimate> norm_var, norm_var_mid;
  /// VectorMomentAccumulator::hidden_spread of the same activations: how far
  /// the hidden covariance within a sequence is from isotropic
  /// (core/hidden_spread.hpp).
  std::vector<Estimate> hidden_spread, hidden_spread_mid;
  /// Per sublayer (2 n attention, 2 n + 1 FFN of layer n): the hidden spread
  /// of the branch output f and its linear share in the residual input
  /// (cross_share).
  std::vector<Estimate> branch_spread, branch_share;

  /// Per layer: E||dLoss/dW||_F^2 of each weight matrix over one sequence
  /// (Q, K, V summed over the heads).
  std::vector<WeightGradEstimates> weight_grads;

  /// Per row n = 0..N and position i = 1..L (index i - 1): the mean square
  /// over the hidden units of the activations and of the gradient at that
  /// position. Under a causal mask the positions are not exchangeable
  /// (docs/decoders.md); without one every position reads alike.
  std::vector<std::vector<Estimate>> forward_by_position, backward_by_position;
  /// The same between the sublayers of layer n (forward_mid).
  std::vector<std::vector<Estimate>> forward_mid_by_position;
  /// With SimulationSetup::position_pairs: per row, the L x L mean over the
  /// trials of X X^T / d (entry (i - 1, m - 1): the mean over hidden units of
  /// x_i x_m), of the activations (forward_pairs, rows 0..N; forward_mid_pairs
  /// between the sublayers) and of the gradient (backward_pairs,
  /// backward_mid_pairs). Empty otherwise.
  std::vector<Eigen::MatrixXd> forward_pairs, forward_mid_pairs, backward_pairs, backward_mid_pairs;
};

/// Simulates `setup.trials` independent models (fresh weights, inputs, masks
/// and top gradients each) of shape `config` initialized with `weights`.
/// setup.seq_len and setup.width are ignored (the config fixes L and d).
SIGPROP_DECL ModelSimulation simulate_model(const ModelConfig& config, const ModelWeights& weights,
                                            const GradMoments<double>& grad_top,
                                            const SimulationSetup& setup);

/// Per-layer relative errors (percent) |measured - predicted| / measured of
/// the forward variance and the gradient variance at n = 0..N.
struct ModelErrors {
  std::vector<double> forward, backward;
};

SIGPROP_DECL ModelErrors compare_trace(const Trace& predicted, const ModelSimulation& measured);

/// A model of the whole-model validation: shape, scheme and input moments
/// (or, with `embedding`, the scheme's own embedding: three tables, |V| =
/// 32000, with its scale and LayerNorm).
struct ModelCase {
  const char* label;
  ModelConfig config;
  Scheme scheme;
  Moments<double> input{0, 1, 0.2, 0};
  bool embedding = false;
};

/// The whole-model validation set (docs/validation.md, "Whole models"):
/// Pre-LN and Post-LN with Xavier, DSLM, DSLM-simplified and BERT-style
/// initialization, ReLU and GeLU, with and without dropout, and two models
/// fed IID tokens (length correlation 0).
SIGPROP_DECL std::vector<ModelCase> validation_models();

/// The decoder presets (with_architecture: llama, gpt2) with Xavier and
/// DeepScaleLM weights at small sizes (docs/decoders.md, "Decoder stacks").
SIGPROP_DECL std::vector<ModelCase> decoder_models();

/// The schemes of models/schemes.hpp beyond those of validation_models(),
/// each with the architecture it was published with, at small sizes
/// (docs/schemes.md, "Monte Carlo checks").
SIGPROP_DECL std::vector<ModelCase> scheme_models();

/// One validation model: the trace (with `gradient` paths in attention), the
/// simulation and their per-layer errors.
struct ModelCaseResult {
  Trace predicted;
  ModelSimulation measured;
  ModelErrors errors;
};

/// The case's configuration with the attention gradient `gradient`, and its weights.
SIGPROP_DECL std::pair<ModelConfig, ModelWeights> case_model(const ModelCase& k,
                                                             AttentionGradient gradient = AttentionGradient::all_paths);

SIGPROP_DECL ModelCaseResult run_case(const ModelCase& k, const SimulationSetup& setup);

}  // namespace sigprop::montecarlo

#ifdef SIGPROP_HEADER_ONLY
#include "sigprop/montecarlo/impl/models.ipp"
#endif
