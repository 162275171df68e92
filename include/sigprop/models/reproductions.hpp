// sigprop/models/reproductions.hpp -- the comparisons of the source papers,
// recomputed with the calculus: the growth with depth of DeepScaleLM's
// Table 3, Xiong et al.'s Lemma 2, Admin's output change, and Spike No
// More's bounds at its model shapes. examples/reproductions prints them
// (docs/schemes.md records the output); tests/test_reproductions pins them.
//
// References: Kedia et al. (ICML 2024) Table 3 and appendix "Discussion of
// relative strength"; Xiong et al. (ICML 2020) Lemma 2; Liu et al. (EMNLP
// 2020) section 4.1 and Theorem 2; Takase et al. ("Spike No More") Table 4,
// Eq. 7, 15, 20.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include "sigprop/models/measures.hpp"
#include "sigprop/models/schemes.hpp"

namespace sigprop {

/// How a positive quantity Q(N) grows with depth, fitted by least squares
/// over the depths given as a power N^a, an exponential e^(c N) (both on
/// log Q), a logarithm a ln N + b and a line a N + b (both on Q); `law`
/// names the fit with the smallest residual of log Q ("1" when Q changes by
/// less than 25 % over the whole range).
struct GrowthFit {
  double power = 0;        ///< a in Q ~ N^a
  double rate = 0;         ///< c in Q ~ e^(c N)
  double log_slope = 0;    ///< a in Q ~ a ln N + b
  double slope = 0;        ///< a in Q ~ a N + b
  double rms_power = 0, rms_exp = 0, rms_log = 0, rms_linear = 0;  ///< residual RMS of log Q under each law
  std::string law;         ///< e.g. "N^1.00", "e^(-0.034 N)", "log N", "linear, 2.16 N", "1"
};

inline GrowthFit fit_growth(const std::vector<double>& depth, const std::vector<double>& q) {
  const std::size_t n = depth.size();
  // Least-squares line y = slope x + intercept.
  struct Line {
    double slope, intercept;
    double at(double x) const { return slope * x + intercept; }
  };
  const auto line = [n](const std::vector<double>& x, const std::vector<double>& y) {
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (std::size_t i = 0; i < n; ++i) sx += x[i], sy += y[i], sxx += x[i] * x[i], sxy += x[i] * y[i];
    const double k = static_cast<double>(n);
    const double slope = (k * sxy - sx * sy) / (k * sxx - sx * sx);
    return Line{slope, (sy - slope * sx) / k};
  };
  std::vector<double> log_n(n), log_q(n);
  for (std::size_t i = 0; i < n; ++i) log_n[i] = std::log(depth[i]), log_q[i] = std::log(q[i]);
  const auto rms = [&](auto predict_log) {
    double s = 0;
    for (std::size_t i = 0; i < n; ++i) s += std::pow(predict_log(i) - log_q[i], 2);
    return std::sqrt(s / static_cast<double>(n));
  };
  GrowthFit f;
  const Line power = line(log_n, log_q), exponential = line(depth, log_q), logarithm = line(log_n, q),
             linear = line(depth, q);
  f.power = power.slope;
  f.rate = exponential.slope;
  f.log_slope = logarithm.slope;
  f.slope = linear.slope;
  const auto log_of = [](double x) { return x > 0 ? std::log(x) : 1e300; };
  f.rms_power = rms([&](std::size_t i) { return power.at(log_n[i]); });
  f.rms_exp = rms([&](std::size_t i) { return exponential.at(depth[i]); });
  f.rms_log = rms([&](std::size_t i) { return log_of(logarithm.at(log_n[i])); });
  f.rms_linear = rms([&](std::size_t i) { return log_of(linear.at(depth[i])); });
  double lo = q[0], hi = q[0];
  for (double v : q) lo = std::min(lo, v), hi = std::max(hi, v);
  char text[48];
  if (hi <= 1.25 * lo) {
    f.law = "1";
  } else if (f.rms_log < std::min({f.rms_power, f.rms_exp, f.rms_linear}) && f.log_slope > 0) {
    f.law = "log N";
  } else if (f.rms_linear < std::min(f.rms_power, f.rms_exp) && f.slope > 0) {
    std::snprintf(text, sizeof text, "linear, %.3g N", f.slope);
    f.law = text;
  } else if (f.rms_exp < f.rms_power) {
    std::snprintf(text, sizeof text, "e^(%.3g N)", f.rate);
    f.law = text;
  } else {
    std::snprintf(text, sizeof text, "N^%.2f", f.power);
    f.law = text;
  }
  return f;
}

/// One row of DeepScaleLM's Table 3: a scheme on one architecture, the
/// growth of its figures over the depths, and the paper's entries.
struct DepthGrowth {
  std::string scheme;
  Arch arch = Arch::pre_ln;
  std::vector<double> depths;
  std::vector<double> forward;           ///< final forward variance / input variance
  std::vector<double> backward;          ///< gradient variance at the input / at the output
  std::vector<double> sensitivity_mean;  ///< mean over sublayers of N beta_ii^2/(1 - beta_ii^2) (Davis et al.)
  std::vector<double> sensitivity;       ///< the median (the DeepScaleLM paper's choice)
  GrowthFit forward_fit, backward_fit, sensitivity_mean_fit, sensitivity_fit;
  std::string paper;                     ///< Table 3's entries for this row
};

/// Table 3's model: BERT-base widths (d = 768, 12 heads, L = 256, p = 0.1,
/// ReLU) at depth N. LayerScale's branch scale is held at 0.1 for every N
/// (Table 3's "beta N" is for a fixed beta), which replaces CaiT's
/// depth buckets.
inline DepthGrowth depth_growth(Scheme scheme, Arch arch, const std::vector<double>& depths, const char* paper,
                                std::size_t d = 768, std::size_t heads = 12, std::size_t seq_len = 256) {
  DepthGrowth g;
  g.scheme = to_string(scheme);
  g.arch = arch;
  g.depths = depths;
  g.paper = paper;
  for (double N : depths) {
    ModelConfig c;
    c.arch = arch;
    c.layers = static_cast<std::size_t>(N);
    c.d = d;
    c.heads = heads;
    c.seq_len = seq_len;
    ModelWeights w = initialize(c, scheme);
    if (scheme == Scheme::layerscale)
      for (auto& l : w.layers) l.set_residual(1, 0.1);
    const Trace t = trace(c, w);
    g.forward.push_back(t.rows.back().forward.var / t.rows[0].forward.var);
    g.backward.push_back(t.rows[0].backward.var / t.rows.back().backward.var);
    const auto terms = sensitivity_terms(t);
    double sum = 0;
    for (double x : terms) sum += x;
    g.sensitivity_mean.push_back(sum / static_cast<double>(terms.size()));
    g.sensitivity.push_back(sensitivity(t));
  }
  g.forward_fit = fit_growth(depths, g.forward);
  g.backward_fit = fit_growth(depths, g.backward);
  g.sensitivity_mean_fit = fit_growth(depths, g.sensitivity_mean);
  g.sensitivity_fit = fit_growth(depths, g.sensitivity);
  return g;
}

/// The rows of Table 3 (Vanilla = Xavier; DeepNet is Post-LN only).
inline std::vector<DepthGrowth> table3(const std::vector<double>& depths = {12, 24, 48, 96, 192, 384, 768}) {
  return {
      depth_growth(Scheme::xavier, Arch::post_ln, depths, "backward e^(+-N), sensitivity N"),
      depth_growth(Scheme::ds_init, Arch::post_ln, depths, "backward 1, sensitivity 1/N"),
      depth_growth(Scheme::layerscale, Arch::post_ln, depths, "backward 1, sensitivity beta N"),
      depth_growth(Scheme::deepnet, Arch::post_ln, depths, "backward 1, sensitivity N^-0.5"),
      depth_growth(Scheme::dslm, Arch::post_ln, depths, "backward 1, sensitivity 1"),
      depth_growth(Scheme::xavier, Arch::pre_ln, depths, "forward N, backward N, sensitivity log N"),
      depth_growth(Scheme::ds_init, Arch::pre_ln, depths, "forward 1, backward 1, sensitivity 1/N"),
      depth_growth(Scheme::layerscale, Arch::pre_ln, depths, "forward 1, backward 1, sensitivity beta N"),
      depth_growth(Scheme::dslm, Arch::pre_ln, depths, "forward 1, backward 1, sensitivity 1"),
  };
}

/// Xiong et al.'s Lemma 2 setting: Xavier (1/d for every d x d map), one
/// head, W_Q = W_K = 0 (uniform attention), FFN width d, ReLU, no dropout,
/// input entries N(0, 1) with length correlation `corr_len` (0: i.i.d.).
inline ModelConfig xiong_config(Arch arch, std::size_t layers, std::size_t d = 512, std::size_t seq_len = 256) {
  ModelConfig c;
  c.arch = arch;
  c.layers = layers;
  c.d = d;
  c.heads = 1;
  c.ffn_mult = 1;
  c.seq_len = seq_len;
  c.dropout = 0;
  c.activation = FfnActivation::relu;
  return c;
}

inline ModelWeights xiong_weights(const ModelConfig& c, double corr_len) {
  InputSpec in;
  in.measured = Moments<double>{0, 1, corr_len, 0};
  WeightOverrides o;
  o.q = o.k = 0;
  o.v = o.o = o.ffn1 = o.ffn2 = 1 / static_cast<double>(c.d);
  return initialize(c, Scheme::xavier, in, {}, o);
}

/// Per layer l = 0..N of the Pre-LN stack: E||x_l||^2 / d and the lemma's
/// bounds 1 + l/2 and 1 + 3l/2.
struct XiongRow {
  std::size_t layer;
  double norm_sq_per_d, lower, upper;
};

inline std::vector<XiongRow> xiong_pre_ln(std::size_t layers, double corr_len, std::size_t d = 512) {
  const ModelConfig c = xiong_config(Arch::pre_ln, layers, d);
  const Trace t = trace(c, xiong_weights(c, corr_len));
  std::vector<XiongRow> out;
  for (const TraceRow& r : t.rows) {
    const double l = static_cast<double>(r.layer);
    out.push_back({r.layer, r.forward.var + r.forward.mean * r.forward.mean, 1 + l / 2, 1 + 3 * l / 2});
  }
  return out;
}

/// Post-LN: E||x^{post,5}||^2 / d, the sum entering each layer's last
/// LayerNorm (the lemma: 1.5), for layers 1..N.
inline std::vector<double> xiong_post_ln(std::size_t layers, double corr_len, std::size_t d = 512) {
  const ModelConfig c = xiong_config(Arch::post_ln, layers, d);
  const ModelWeights w = xiong_weights(c, corr_len);
  const Trace t = trace(c, w);
  std::vector<double> out;
  for (std::size_t n = 1; n <= layers; ++n) {
    const LayerWeights& l = w.layers[n - 1];
    const Moments<double>& x = t.mid[n - 1].forward;  // the LayerNorm output entering the FFN sublayer
    out.push_back(l.ffn_skip * l.ffn_skip * (x.var + x.mean * x.mean) +
                  l.ffn_branch * l.ffn_branch * t.rows[n].branch_var);
  }
  return out;
}

/// Xiong et al.'s Theorem 1 in the Lemma 2 setting (r = 0.2): the expected
/// squared Frobenius norm of the last layer's W2 gradient over depth N, for
/// Post-LN and for Pre-LN with its final LayerNorm (the theorem: the norm is
/// flat for Post-LN and falls like 1/sqrt(N) for Pre-LN, so its square like 1/N).
struct LastLayerGradient {
  std::vector<double> depths, post_ln, pre_ln;
  GrowthFit post_fit, pre_fit;
};

inline LastLayerGradient xiong_theorem1(const std::vector<double>& depths = {6, 12, 24, 48, 96, 192, 384},
                                        std::size_t d = 512) {
  LastLayerGradient g;
  g.depths = depths;
  for (double N : depths) {
    for (Arch arch : {Arch::post_ln, Arch::pre_ln}) {
      ModelConfig c = xiong_config(arch, static_cast<std::size_t>(N), d);
      c.final_layernorm = arch == Arch::pre_ln;
      const ModelWeights w = xiong_weights(c, 0.2);
      const double last = weight_grad_norms(c, w, trace(c, w)).back().ffn2;
      (arch == Arch::post_ln ? g.post_ln : g.pre_ln).push_back(last);
    }
  }
  g.post_fit = fit_growth(depths, g.post_ln);
  g.pre_fit = fit_growth(depths, g.pre_ln);
  return g;
}

/// Admin's output change sum_i beta_ii^2 over depth, for Pre-LN, Post-LN,
/// Admin and Admin's code variant (Xavier weights, BERT-base widths).
struct OutputChange {
  std::vector<double> depths, pre_ln, post_ln, admin, admin_code;
  GrowthFit pre_fit, post_fit, admin_fit, admin_code_fit;
};

inline OutputChange admin_output_change(const std::vector<double>& depths = {6, 12, 24, 48, 96, 192, 384},
                                        std::size_t d = 768, std::size_t heads = 12) {
  OutputChange o;
  o.depths = depths;
  for (double N : depths) {
    ModelConfig c;
    c.layers = static_cast<std::size_t>(N);
    c.d = d;
    c.heads = heads;
    c.arch = Arch::pre_ln;
    o.pre_ln.push_back(output_change(trace(c, initialize(c, Scheme::xavier))));
    c.arch = Arch::post_ln;
    o.post_ln.push_back(output_change(trace(c, initialize(c, Scheme::xavier))));
    o.admin.push_back(output_change(trace(c, initialize(c, Scheme::admin))));
    o.admin_code.push_back(output_change(trace(c, initialize(c, Scheme::admin_code))));
  }
  o.pre_fit = fit_growth(depths, o.pre_ln);
  o.post_fit = fit_growth(depths, o.post_ln);
  o.admin_fit = fit_growth(depths, o.admin);
  o.admin_code_fit = fit_growth(depths, o.admin_code);
  return o;
}

/// Spike No More's model shapes (Table 4: d_ffn = 4d, L = 2048, p = 0.1,
/// GPT-2 vocabulary, token and position tables) and its inits: the FFN and
/// attention bounds of the first and last layer and log10 of their product
/// over the layers. "xavier" is the paper's Xavier Init (tables Xavier of a
/// d x d map, 1/d, unscaled).
struct SpikeRow {
  std::string model, init;
  double ffn_first, ffn_last, attn_first, attn_last, log10_product;
  double shortcut_sd_first;  ///< sigma_x entering layer 1
};

inline std::vector<SpikeRow> spike_shapes() {
  struct Shape {
    const char* name;
    std::size_t layers, d, heads;
  };
  const Shape shapes[] = {{"350M", 24, 1024, 16}, {"1.7B", 24, 2304, 24}, {"13B", 40, 5120, 40}};
  std::vector<SpikeRow> out;
  for (const Shape& s : shapes) {
    for (Scheme scheme :
         {Scheme::spike_vanilla, Scheme::scaled_embed, Scheme::embed_ln, Scheme::xavier, Scheme::xavier_scaled_embed}) {
      ModelConfig c;
      c.layers = s.layers;
      c.d = s.d;
      c.heads = s.heads;
      c.seq_len = 2048;
      c.dropout = 0.1;
      c.activation = FfnActivation::gelu;
      InputSpec in;
      in.vocab = 50257;
      in.segment = false;
      WeightOverrides o;
      if (scheme == Scheme::xavier) o.embedding = 1 / static_cast<double>(s.d);
      const ModelWeights w = initialize(c, scheme, in, {}, o);
      const Trace t = trace(c, w);
      const auto b = spike_bounds(c, w, t);
      out.push_back({s.name, to_string(scheme), b.front().ffn, b.back().ffn, b.front().attention,
                     b.back().attention, spike_bound_log10(b), std::sqrt(t.rows[0].forward.var)});
    }
  }
  return out;
}

}  // namespace sigprop
