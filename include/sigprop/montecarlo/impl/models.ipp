// sigprop/montecarlo/impl/models.ipp -- the definitions of
// montecarlo/models.hpp (docs/architecture.md, "Separate compilation").
#pragma once

#include <array>
#include <cmath>
#include <utility>
#include <vector>

#include "sigprop/montecarlo/components/rmsnorm.hpp"
#include "sigprop/montecarlo/models.hpp"
#include "sigprop/montecarlo/ops.hpp"
#include "sigprop/montecarlo/sampler.hpp"

namespace sigprop::montecarlo {

namespace detail {

struct LayerParams {
  std::vector<ops::Matrix> wq, wk, wv;  // per head, d x d/H
  ops::Matrix wo, w1, w2, wgate;  // wgate: V of the gated FFN
  std::vector<ops::HeadBiases> heads;  // per head; empty vectors: no bias
  Eigen::RowVectorXd bo, b1, b2, bgate;
};

// LayerNorm or RMSNorm over the rows, then the affine map at its initial
// values (ln_gain, ln_bias), with what its backward needs.
struct NormCache {
  ops::LayerNormCache layernorm;
  ops::RmsNormCache rmsnorm;
  bool rms = false;
  double gain = 1;
  ops::Matrix out;  // gain * normalized + bias
  const ops::Matrix& y() const { return out; }
};

inline NormCache norm_forward(const ModelConfig& c, const ops::Matrix& x) {
  NormCache n;
  n.rms = c.norm == Norm::rmsnorm;
  n.gain = c.ln_gain;
  if (n.rms) n.rmsnorm = ops::rmsnorm_forward(x);
  else n.layernorm = ops::layernorm_forward(x);
  n.out = (n.rms ? n.rmsnorm.y : n.layernorm.y) * c.ln_gain;
  n.out.array() += c.ln_bias;
  return n;
}

inline ops::Matrix norm_backward(const NormCache& n, const ops::Matrix& g) {
  const ops::Matrix scaled = n.gain * g;
  return n.rms ? ops::rmsnorm_backward(n.rmsnorm, scaled) : ops::layernorm_backward(n.layernorm, scaled);
}

// A bias of per-entry variance `var` (drawn only when var > 0, so that
// models without biases draw the same numbers as before).
inline Eigen::RowVectorXd draw_bias(Eigen::Index n, double var, bool uniform, Random& rng) {
  if (!(var > 0)) return {};
  return rng.weight_matrix(1, n, var, uniform).row(0);
}

struct SublayerCache {
  ops::Matrix input;                 // x entering the sublayer (the residual stream)
  NormCache pre_norm;                // Pre-LN: LN(x)
  NormCache post_norm;               // Post-LN: LN(sum)
  std::vector<ops::AttentionCache> heads;
  ops::GatedCache ffn;               // h W1 and its activation (and h V when gated)
  ops::Matrix concat, out_mask;
};

inline LayerParams draw_layer(const ModelConfig& c, const LayerWeights& w, Random& rng, bool uniform = false) {
  const auto d = static_cast<Eigen::Index>(c.d), dk = static_cast<Eigen::Index>(c.head_width());
  const auto m = static_cast<Eigen::Index>(c.hidden_width());
  LayerParams p;
  for (std::size_t h = 0; h < c.heads; ++h) {
    p.wq.push_back(rng.weight_matrix(d, dk, w.q, uniform));
    p.wk.push_back(rng.weight_matrix(d, dk, w.k, uniform));
    p.wv.push_back(rng.weight_matrix(d, dk, w.v, uniform));
  }
  p.wo = rng.weight_matrix(d, d, w.o, uniform);
  p.w1 = rng.weight_matrix(d, m, w.ffn1, uniform);
  p.w2 = rng.weight_matrix(m, d, w.ffn2, uniform);
  if (c.gated_ffn) p.wgate = rng.weight_matrix(d, m, w.ffn_gate, uniform);
  for (std::size_t h = 0; h < c.heads; ++h)
    p.heads.push_back({draw_bias(dk, w.q_bias, uniform, rng), draw_bias(dk, w.k_bias, uniform, rng),
                       draw_bias(dk, w.v_bias, uniform, rng)});
  p.bo = draw_bias(d, w.o_bias, uniform, rng);
  p.b1 = draw_bias(m, w.ffn1_bias, uniform, rng);
  p.b2 = draw_bias(d, w.ffn2_bias, uniform, rng);
  if (c.gated_ffn) p.bgate = draw_bias(m, w.ffn_gate_bias, uniform, rng);
  return p;
}

inline ops::Activation to_op(FfnActivation a) {
  switch (a) {
    case FfnActivation::relu: return ops::Activation::relu;
    case FfnActivation::gelu: return ops::Activation::gelu;
    case FfnActivation::gelu_tanh: return ops::Activation::gelu_tanh;
    case FfnActivation::silu: break;
  }
  return ops::Activation::silu;
}

// Dropout on a sublayer's output; the mask is kept for the backward pass.
inline ops::Matrix output_dropout(const ModelConfig& c, ops::Matrix y, SublayerCache& cache, Random& rng) {
  if (c.dropout > 0) {
    cache.out_mask = ops::dropout_mask(y.rows(), y.cols(), c.dropout, rng);
    y = y.cwiseProduct(cache.out_mask);
  }
  return y;
}

// Branch f(h) of the attention sublayer; fills the cache.
inline ops::Matrix attention_branch(const ModelConfig& c, const LayerParams& p, const ops::Matrix& h,
                                    SublayerCache& cache, Random& rng) {
  const auto dk = static_cast<Eigen::Index>(c.head_width());
  cache.concat.resize(h.rows(), static_cast<Eigen::Index>(c.d));
  cache.heads.clear();
  for (std::size_t i = 0; i < c.heads; ++i) {
    ops::Matrix out;
    cache.heads.push_back(
        ops::attention_head_forward(h, p.wq[i], p.wk[i], p.wv[i], c.attention_p(), rng, out, c.causal,
                                    c.rotary_base, p.heads[i], c.logit_scale == LogitScale::inv_dk ? 1.0 : 0.5));
    cache.concat.middleCols(static_cast<Eigen::Index>(i) * dk, dk) = out;
  }
  return output_dropout(c, ops::affine(cache.concat, p.wo, p.bo), cache, rng);
}

// Squared norms of one layer's weight gradients.
struct LayerGradNorms {
  double q = 0, k = 0, v = 0, o = 0, ffn1 = 0, ffn2 = 0;
};

inline ops::Matrix attention_branch_backward(const ModelConfig& c, const LayerParams& p,
                                             const ops::Matrix& h, const SublayerCache& cache,
                                             ops::Matrix g, LayerGradNorms& norms) {
  const auto dk = static_cast<Eigen::Index>(c.head_width());
  if (c.dropout > 0) g = g.cwiseProduct(cache.out_mask);
  norms.o = (cache.concat.transpose() * g).squaredNorm();
  const ops::Matrix g_concat = g * p.wo.transpose();
  ops::Matrix dh = ops::Matrix::Zero(h.rows(), h.cols());
  norms.q = norms.k = norms.v = 0;
  for (std::size_t i = 0; i < c.heads; ++i) {
    ops::HeadWeightGrads head;
    ops::attention_head_backward(cache.heads[i], h, p.wq[i], p.wk[i], p.wv[i],
                                 g_concat.middleCols(static_cast<Eigen::Index>(i) * dk, dk), dh, &head);
    norms.q += head.q;
    norms.k += head.k;
    norms.v += head.v;
  }
  return dh;
}

// The FFN branch, with dropout c.ffn_dropout on its hidden units (the
// activation's output, or the gated product) and c.dropout on its output.
inline ops::Matrix ffn_branch(const ModelConfig& c, const LayerParams& p, const ops::Matrix& h,
                              SublayerCache& cache, Random& rng) {
  const ops::Matrix mask = c.ffn_dropout > 0 ? ops::dropout_mask(h.rows(), p.w1.cols(), c.ffn_dropout, rng) : ops::Matrix();
  if (c.gated_ffn)
    return output_dropout(
        c, ops::gated_forward(to_op(c.activation), h, p.w1, p.wgate, p.w2, cache.ffn, mask, p.b1, p.bgate, p.b2),
        cache, rng);
  cache.ffn.pre = ops::affine(h, p.w1, p.b1);
  cache.ffn.act = ops::activation_forward(to_op(c.activation), cache.ffn.pre);
  cache.ffn.mask = mask;
  if (mask.size() == 0) return output_dropout(c, ops::affine(cache.ffn.act, p.w2, p.b2), cache, rng);
  return output_dropout(c, ops::affine(cache.ffn.act.cwiseProduct(mask), p.w2, p.b2), cache, rng);
}

inline ops::Matrix ffn_branch_backward(const ModelConfig& c, const LayerParams& p, const ops::Matrix& h,
                                       const SublayerCache& cache, ops::Matrix g, LayerGradNorms& norms) {
  if (c.dropout > 0) g = g.cwiseProduct(cache.out_mask);
  if (c.gated_ffn) {
    ops::GatedWeightGrads w;
    ops::Matrix dx = ops::gated_backward(to_op(c.activation), cache.ffn, h, p.w1, p.wgate, p.w2, g, &w);
    norms.ffn1 = w.w1;
    norms.ffn2 = w.w2;
    return dx;
  }
  const bool masked = cache.ffn.mask.size() > 0;
  norms.ffn2 = ((masked ? ops::Matrix(cache.ffn.act.cwiseProduct(cache.ffn.mask)) : cache.ffn.act).transpose() * g).squaredNorm();
  ops::Matrix g_act = g * p.w2.transpose();
  if (masked) g_act = g_act.cwiseProduct(cache.ffn.mask);
  const ops::Matrix g_hidden = ops::activation_backward(to_op(c.activation), cache.ffn.pre, g_act);
  norms.ffn1 = (h.transpose() * g_hidden).squaredNorm();
  return g_hidden * p.w1.transpose();
}

}  // namespace detail

SIGPROP_DECL ModelSimulation simulate_model(const ModelConfig& config, const ModelWeights& weights,
                                            const GradMoments<double>& grad_top,
                                            const SimulationSetup& setup) {
  constexpr const char* fn = "sigprop::montecarlo::simulate_model";
  config.validate(fn);
  require_setup(fn, setup);
  const std::size_t N = config.layers;
  if (weights.layers.size() != N)
    sigprop::detail::raise_domain(fn, "weights.layers.size()", std::to_string(weights.layers.size()),
                                  "{layers = " + std::to_string(N) + "}");
  const auto L = static_cast<Eigen::Index>(config.seq_len), d = static_cast<Eigen::Index>(config.d);
  const bool pre = config.arch == Arch::pre_ln, post = config.arch == Arch::post_ln;
  std::vector<MomentAccumulator> fwd(N + 1), mid(N), branch(2 * N);
  std::vector<VectorMomentAccumulator> norms(N + 1), norms_mid(N), branch_vectors(2 * N);
  std::vector<std::vector<double>> shares(2 * N);
  std::vector<MomentAccumulator> bwd(N + 1), bwd_mid(N);
  std::vector<std::array<std::vector<double>, 6>> grad_norms(N);  // per layer: q, k, v, o, ffn1, ffn2 per trial
  // per row and position, one mean square per trial
  std::vector<std::vector<std::vector<double>>> fwd_pos(N + 1, std::vector<std::vector<double>>(config.seq_len)),
      bwd_pos = fwd_pos, mid_pos(N, std::vector<std::vector<double>>(config.seq_len));
  const auto add_by_position = [&](std::vector<std::vector<double>>& to, const ops::Matrix& m) {
    for (Eigen::Index i = 0; i < m.rows(); ++i)
      to[static_cast<std::size_t>(i)].push_back(m.row(i).squaredNorm() / static_cast<double>(m.cols()));
  };
  const bool pairs = setup.position_pairs;
  std::vector<Eigen::MatrixXd> fwd_pairs(pairs ? N + 1 : 0, Eigen::MatrixXd::Zero(L, L)), mid_pairs(pairs ? N : 0, Eigen::MatrixXd::Zero(L, L)),
      bwd_pairs = fwd_pairs, bwd_mid_pairs = mid_pairs;
  const auto add_pairs = [&](std::vector<Eigen::MatrixXd>& to, std::size_t row, const ops::Matrix& m) {
    if (pairs) to[row].noalias() += m * m.transpose() / static_cast<double>(m.cols() * setup.trials);
  };
  Random rng(setup.seed);

  for (std::size_t t = 0; t < setup.trials; ++t) {
    std::vector<detail::LayerParams> params;
    for (std::size_t n = 0; n < N; ++n)
      params.push_back(detail::draw_layer(config, weights.layers[n], rng, setup.uniform_weights));
    // caches[2n] is layer n's attention sublayer, caches[2n + 1] its FFN sublayer
    std::vector<detail::SublayerCache> caches(2 * N);
    ops::Matrix x = weights.embedding_layernorm
                        ? ops::layernorm_forward(sample_activations(L, d, weights.embedding_output, rng)).y
                        : sample_activations(L, d, weights.input, rng);
    if (weights.embedding_layernorm) x = ((x * config.ln_gain).array() + config.ln_bias).matrix();
    fwd[0].add(x);
    norms[0].add(x);
    add_by_position(fwd_pos[0], x);
    add_pairs(fwd_pairs, 0, x);
    for (std::size_t n = 0; n < N; ++n) {
      const LayerWeights& w = weights.layers[n];
      for (int sub = 0; sub < 2; ++sub) {
        detail::SublayerCache& cache = caches[2 * n + static_cast<std::size_t>(sub)];
        cache.input = x;
        const ops::Matrix* h = &x;
        if (pre) {
          cache.pre_norm = detail::norm_forward(config, x);
          h = &cache.pre_norm.y();
        }
        const ops::Matrix f = sub == 0 ? detail::attention_branch(config, params[n], *h, cache, rng)
                                       : detail::ffn_branch(config, params[n], *h, cache, rng);
        const std::size_t at = 2 * n + static_cast<std::size_t>(sub);
        branch[at].add(f);
        branch_vectors[at].add(f);
        shares[at].push_back(cross_share(x, f));
        const double skip = sub == 0 ? w.attn_skip : w.ffn_skip, scale = sub == 0 ? w.attn_branch : w.ffn_branch;
        ops::Matrix sum = skip * x + scale * f;
        if (post) {
          cache.post_norm = detail::norm_forward(config, sum);
          x = cache.post_norm.y();
        } else {
          x = std::move(sum);
        }
        if (sub == 0) {
          mid[n].add(x);
          norms_mid[n].add(x);
          add_by_position(mid_pos[n], x);
          add_pairs(mid_pairs, n, x);
        }
      }
      fwd[n + 1].add(x);
      norms[n + 1].add(x);
      add_by_position(fwd_pos[n + 1], x);
      add_pairs(fwd_pairs, n + 1, x);
    }
    // Final LayerNorm (Pre-LN option): the gradient is given at its output.
    ops::Matrix g = sample_gradient(L, d, grad_top, rng);
    if (pre && config.final_layernorm) g = detail::norm_backward(detail::norm_forward(config, x), g);
    bwd[N].add(g);
    add_by_position(bwd_pos[N], g);
    add_pairs(bwd_pairs, N, g);
    for (std::size_t n = N; n-- > 0;) {
      const LayerWeights& w = weights.layers[n];
      detail::LayerGradNorms norms;
      for (int sub = 1; sub >= 0; --sub) {
        const detail::SublayerCache& cache = caches[2 * n + static_cast<std::size_t>(sub)];
        if (post) g = detail::norm_backward(cache.post_norm, g);
        const ops::Matrix& h = pre ? cache.pre_norm.y() : cache.input;
        const double skip = sub == 0 ? w.attn_skip : w.ffn_skip, scale = sub == 0 ? w.attn_branch : w.ffn_branch;
        ops::Matrix gh = sub == 0 ? detail::attention_branch_backward(config, params[n], h, cache, scale * g, norms)
                                  : detail::ffn_branch_backward(config, params[n], h, cache, scale * g, norms);
        if (pre) gh = detail::norm_backward(cache.pre_norm, gh);
        g = skip * g + gh;
        if (sub == 1) {
          bwd_mid[n].add(g);
          add_pairs(bwd_mid_pairs, n, g);
        }
      }
      bwd[n].add(g);
      add_by_position(bwd_pos[n], g);
      add_pairs(bwd_pairs, n, g);
      const double values[6] = {norms.q, norms.k, norms.v, norms.o, norms.ffn1, norms.ffn2};
      for (std::size_t j = 0; j < 6; ++j) grad_norms[n][j].push_back(values[j]);
    }
  }
  ModelSimulation s;
  s.forward_pairs = std::move(fwd_pairs);
  s.forward_mid_pairs = std::move(mid_pairs);
  s.backward_pairs = std::move(bwd_pairs);
  s.backward_mid_pairs = std::move(bwd_mid_pairs);
  for (auto& a : fwd) s.forward.push_back(a.result());
  for (auto& a : bwd) s.backward.push_back(a.grad_result());
  for (auto& a : mid) s.forward_mid.push_back(a.result());
  for (auto& a : bwd_mid) s.backward_mid.push_back(a.grad_result());
  for (auto& a : norms) s.norm_var.push_back(a.norm_var_ratio());
  for (auto& a : norms_mid) s.norm_var_mid.push_back(a.norm_var_ratio());
  for (auto& a : norms) s.hidden_spread.push_back(a.hidden_spread());
  for (auto& a : branch_vectors) s.branch_spread.push_back(a.hidden_spread());
  for (auto& v : shares) s.branch_share.push_back(detail::mean_estimate(v));
  for (auto& a : norms_mid) s.hidden_spread_mid.push_back(a.hidden_spread());
  for (std::size_t n = 0; n <= N; ++n) {
    s.forward_by_position.emplace_back();
    s.backward_by_position.emplace_back();
    for (const auto& v : fwd_pos[n]) s.forward_by_position.back().push_back(detail::mean_estimate(v));
    for (const auto& v : bwd_pos[n]) s.backward_by_position.back().push_back(detail::mean_estimate(v));
  }
  for (std::size_t n = 0; n < N; ++n) {
    s.forward_mid_by_position.emplace_back();
    for (const auto& v : mid_pos[n]) s.forward_mid_by_position.back().push_back(detail::mean_estimate(v));
    const auto& v = grad_norms[n];
    using sigprop::montecarlo::detail::mean_estimate;
    s.weight_grads.push_back({mean_estimate(v[0]), mean_estimate(v[1]), mean_estimate(v[2]), mean_estimate(v[3]),
                              mean_estimate(v[4]), mean_estimate(v[5])});
    s.branch_attn.push_back(branch[2 * n].result());
    s.branch_ffn.push_back(branch[2 * n + 1].result());
  }
  return s;
}

SIGPROP_DECL ModelErrors compare_trace(const Trace& predicted, const ModelSimulation& measured) {
  ModelErrors e;
  for (std::size_t n = 0; n < predicted.rows.size(); ++n) {
    const double fs = measured.forward[n].var.value, bs = measured.backward[n].var.value;
    e.forward.push_back(100 * std::abs(predicted.rows[n].forward.var - fs) / fs);
    e.backward.push_back(100 * std::abs(predicted.rows[n].backward.var - bs) / bs);
  }
  return e;
}

SIGPROP_DECL std::vector<ModelCase> validation_models() {
  auto config = [](Arch arch, std::size_t layers, std::size_t d, std::size_t heads, std::size_t seq_len,
                   double dropout, FfnActivation activation) {
    ModelConfig c;
    c.arch = arch;
    c.layers = layers;
    c.d = d;
    c.heads = heads;
    c.seq_len = seq_len;
    c.dropout = dropout;
    c.activation = activation;
    return c;
  };
  using A = Arch;
  using F = FfnActivation;
  const Moments<double> iid{0, 1, 0, 0};
  return {
      {"pre-ln xavier relu", config(A::pre_ln, 8, 128, 4, 128, 0.1, F::relu), Scheme::xavier},
      {"post-ln xavier relu", config(A::post_ln, 8, 128, 4, 128, 0.1, F::relu), Scheme::xavier},
      {"pre-ln dslm relu", config(A::pre_ln, 8, 128, 4, 128, 0.1, F::relu), Scheme::dslm},
      {"pre-ln dslm-simple gelu", config(A::pre_ln, 8, 128, 4, 128, 0.1, F::gelu), Scheme::dslm_simple},
      {"post-ln dslm-simple relu", config(A::post_ln, 8, 128, 4, 128, 0.0, F::relu), Scheme::dslm_simple},
      {"post-ln bert gelu", config(A::post_ln, 6, 64, 2, 64, 0.2, F::gelu), Scheme::bert},
      {"pre-ln dslm gelu", config(A::pre_ln, 12, 96, 3, 96, 0.0, F::gelu), Scheme::dslm},
      {"pre-ln bert relu", config(A::pre_ln, 4, 192, 6, 64, 0.1, F::relu), Scheme::bert},
      {"pre-ln xavier relu, IID input", config(A::pre_ln, 8, 128, 4, 128, 0.1, F::relu), Scheme::xavier, iid},
      {"post-ln xavier gelu, IID input", config(A::post_ln, 8, 128, 4, 128, 0.0, F::gelu), Scheme::xavier, iid},
  };
}

SIGPROP_DECL std::vector<ModelCase> decoder_models() {
  const auto config = [](const char* arch, std::size_t layers, std::size_t d, std::size_t heads) {
    ModelConfig c;
    c.layers = layers;
    c.d = d;
    c.heads = heads;
    c.seq_len = 64;
    return with_architecture(c, arch);
  };
  return {
      {"llama xavier", config("llama", 4, 128, 4), Scheme::xavier},
      {"llama dslm", config("llama", 6, 96, 3), Scheme::dslm},
      {"gpt2 xavier", config("gpt2", 4, 128, 4), Scheme::xavier},
      {"gpt2 dslm", config("gpt2", 6, 96, 3), Scheme::dslm},
  };
}

SIGPROP_DECL std::vector<ModelCase> scheme_models() {
  const auto config = [](Scheme s, std::size_t layers, std::size_t d, std::size_t heads, double dropout,
                         FfnActivation activation) {
    ModelConfig c;
    c.arch = native_arch(s);
    c.layers = layers;
    c.d = d;
    c.heads = heads;
    c.seq_len = 64;
    c.dropout = dropout;
    c.activation = activation;
    return c;
  };
  using S = Scheme;
  using F = FfnActivation;
  const auto with_embedding = [](ModelCase k) {
    k.embedding = true;
    return k;
  };
  return {
      {"admin (post-ln)", config(S::admin, 6, 128, 4, 0.1, F::relu), S::admin},
      {"admin-code (post-ln)", config(S::admin_code, 6, 128, 4, 0.1, F::gelu), S::admin_code},
      {"deepnet (post-ln)", config(S::deepnet, 6, 128, 4, 0.1, F::gelu), S::deepnet},
      {"ds-init (post-ln)", config(S::ds_init, 6, 128, 4, 0.1, F::relu), S::ds_init},
      {"t-fixup (no-ln)", config(S::t_fixup, 6, 128, 4, 0.1, F::relu), S::t_fixup},
      {"layerscale (pre-ln)", config(S::layerscale, 6, 128, 4, 0.1, F::gelu), S::layerscale},
      {"rezero (no-ln)", config(S::rezero, 4, 64, 2, 0.1, F::relu), S::rezero},
      with_embedding({"spike-vanilla (pre-ln)", config(S::spike_vanilla, 6, 128, 4, 0.0, F::gelu), S::spike_vanilla}),
      with_embedding({"scaled-embed (pre-ln)", config(S::scaled_embed, 6, 128, 4, 0.0, F::gelu), S::scaled_embed}),
      with_embedding({"embed-ln (pre-ln)", config(S::embed_ln, 6, 128, 4, 0.1, F::gelu), S::embed_ln}),
      with_embedding({"xavier-scaled-embed (pre-ln)", config(S::xavier_scaled_embed, 6, 128, 4, 0.1, F::relu),
                      S::xavier_scaled_embed}),
  };
}

SIGPROP_DECL std::pair<ModelConfig, ModelWeights> case_model(const ModelCase& k,
                                                             AttentionGradient gradient) {
  ModelConfig c = k.config;
  c.attention_gradient = gradient;
  InputSpec input;
  if (!k.embedding) input.measured = k.input;
  return {c, initialize(c, k.scheme, input)};
}

SIGPROP_DECL ModelCaseResult run_case(const ModelCase& k, const SimulationSetup& setup) {
  const auto [config, weights] = case_model(k);
  ModelCaseResult r;
  r.predicted = trace(config, weights);
  r.measured = simulate_model(config, weights, {1, 0}, setup);
  r.errors = compare_trace(r.predicted, r.measured);
  return r;
}

}  // namespace sigprop::montecarlo
