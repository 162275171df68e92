// reproductions -- the comparisons of the source papers recomputed with the
// calculus (models/reproductions.hpp), printed as the markdown tables of
// docs/schemes.md; tests/test_reproductions.cpp pins their key numbers.
//
//   reproductions [table3|xiong|admin|spike|all]   (default all)
#include <cstdio>
#include <cstring>
#include <string>

#include "sigprop/models/reproductions.hpp"

namespace {

using namespace sigprop;

std::string fit_text(const GrowthFit& f) { return f.law; }

void print_series(const std::vector<double>& v) {
  for (std::size_t i = 0; i < v.size(); ++i) std::printf("%s%.3g", i ? ", " : "", v[i]);
}

void table3_section() {
  std::printf("## DeepScaleLM Table 3: growth with depth N = 12 ... 768\n\n");
  std::printf("| arch | scheme | forward | backward | sensitivity (median) | sensitivity (mean, Davis et al.) | paper |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const DepthGrowth& g : table3()) {
    std::printf("| %s | %s | %s | %s | %s | %s | %s |\n", to_string(g.arch), g.scheme.c_str(),
                g.arch == Arch::post_ln ? "(1, LayerNorm output)" : fit_text(g.forward_fit).c_str(),
                fit_text(g.backward_fit).c_str(), fit_text(g.sensitivity_fit).c_str(),
                fit_text(g.sensitivity_mean_fit).c_str(), g.paper.c_str());
  }
  std::printf("\nValues at N = 12, 24, 48, 96, 192, 384, 768 (backward = gradient variance at the input / at the output):\n\n");
  for (const DepthGrowth& g : table3()) {
    std::printf("- %s %s: backward ", to_string(g.arch), g.scheme.c_str());
    print_series(g.backward);
    if (g.arch == Arch::pre_ln) {
      std::printf("; forward ");
      print_series(g.forward);
    }
    std::printf("; sensitivity ");
    print_series(g.sensitivity);
    std::printf("\n");
  }
  std::printf("\n");
}

void xiong_section() {
  std::printf("## Xiong et al. Lemma 2 (d = 512, L = 256, one head, W_Q = W_K = 0, FFN width d, ReLU, p = 0)\n\n");
  for (double r : {0.0, 0.2}) {
    const auto post = xiong_post_ln(6, r);
    std::printf("Post-LN, input length correlation %.1f: E||x^{post,5}||^2 / d per layer = ", r);
    print_series(post);
    std::printf(" (lemma: 1.5)\n\n");
  }
  std::printf("| l | lower 1 + l/2 | E||x_l||^2 / d, r = 0 | r = 0.2 | upper 1 + 3l/2 |\n|---|---|---|---|---|\n");
  const auto iid = xiong_pre_ln(12, 0), corr = xiong_pre_ln(12, 0.2);
  for (std::size_t l = 0; l < iid.size(); ++l)
    std::printf("| %zu | %.2f | %.4f | %.4f | %.2f |\n", l, iid[l].lower, iid[l].norm_sq_per_d,
                corr[l].norm_sq_per_d, iid[l].upper);
  const LastLayerGradient g = xiong_theorem1();
  std::printf("\nTheorem 1: E||dW2||_F^2 of the last layer (r = 0.2; Pre-LN with its final LayerNorm):\n\n");
  std::printf("| N | Post-LN | Pre-LN | Pre-LN x N |\n|---|---|---|---|\n");
  for (std::size_t i = 0; i < g.depths.size(); ++i)
    std::printf("| %.0f | %.4g | %.4g | %.4g |\n", g.depths[i], g.post_ln[i], g.pre_ln[i], g.pre_ln[i] * g.depths[i]);
  std::printf("| fit | %s | %s | |\n\n", g.post_fit.law.c_str(), g.pre_fit.law.c_str());
}

void admin_section() {
  std::printf("## Admin: output change sum_i beta_ii^2 (Xavier, d = 768, 12 heads, L = 256, p = 0.1)\n\n");
  const OutputChange o = admin_output_change();
  std::printf("| N | Pre-LN | Post-LN | Admin | Admin (code) |\n|---|---|---|---|---|\n");
  for (std::size_t i = 0; i < o.depths.size(); ++i)
    std::printf("| %.0f | %.3f | %.3f | %.3f | %.3f |\n", o.depths[i], o.pre_ln[i], o.post_ln[i], o.admin[i],
                o.admin_code[i]);
  std::printf("| fit | %s | %s | %s | %s |\n\n", o.pre_fit.law.c_str(), o.post_fit.law.c_str(), o.admin_fit.law.c_str(),
              o.admin_code_fit.law.c_str());
  ModelConfig c;
  c.layers = 48;
  c.arch = Arch::pre_ln;
  const auto pre = residual_shares(trace(c, initialize(c, Scheme::xavier)));
  c.arch = Arch::post_ln;
  const auto post = residual_shares(trace(c, initialize(c, Scheme::xavier)));
  const auto admin = residual_shares(trace(c, initialize(c, Scheme::admin)));
  std::printf("beta_ii^2 at N = 48 (sublayer i; i beta_ii^2 for Pre-LN and Admin):\n\n");
  std::printf("| i | Pre-LN | i x Pre-LN | Post-LN | Admin | i x Admin |\n|---|---|---|---|---|---|\n");
  for (std::size_t i : {1u, 2u, 4u, 8u, 16u, 32u, 64u, 96u}) {
    const double k = static_cast<double>(i);
    std::printf("| %zu | %.4f | %.3f | %.4f | %.4f | %.3f |\n", i, pre[i - 1], k * pre[i - 1], post[i - 1],
                admin[i - 1], k * admin[i - 1]);
  }
  std::printf("\n");
}

void spike_section() {
  std::printf("## Spike No More: bounds at the paper's shapes (L = 2048, d_ffn = 4d, p = 0.1, GeLU)\n\n");
  std::printf("| model | init | sigma_x layer 1 | FFN bound (Eq. 15) layer 1 / last | attention bound (Eq. 20) layer 1 / last | log10 product (Eq. 7) |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (const SpikeRow& r : spike_shapes())
    std::printf("| %s | %s | %.3g | %.3g / %.3g | %.3g / %.3g | %.1f |\n", r.model.c_str(), r.init.c_str(),
                r.shortcut_sd_first, r.ffn_first, r.ffn_last, r.attn_first, r.attn_last, r.log10_product);
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "all";
  if (what != "all" && what != "table3" && what != "xiong" && what != "admin" && what != "spike") {
    std::fprintf(stderr, "reproductions: error: '%s' is not one of table3, xiong, admin, spike, all\n", what.c_str());
    return 2;
  }
  if (what == "all" || what == "table3") table3_section();
  if (what == "all" || what == "xiong") xiong_section();
  if (what == "all" || what == "admin") admin_section();
  if (what == "all" || what == "spike") spike_section();
  return 0;
}
