// attention_grid -- the attention row of the validation at the paper's full
// Table 21 sizes, split in two steps because the simulations are long (L up
// to 10^4) and the closed form changes more often than the simulations:
//
//   attention_grid simulate FILE [--points N] [--scale S] [--samples K] [--seed X] [--replica R]
//       simulates the grid of montecarlo::attention_grid point by point and
//       appends one CSV line per point to FILE (the layer, its input, the
//       upstream gradient and every measured moment with its standard error,
//       by gradient path); an interrupted run keeps the points done. Replica
//       R > 0 simulates the same points with independent random streams.
//   attention_grid resimulate --point I [--trials N] [--seed X] [--points N] [--scale S]
//       simulates point I (1-based) of the same grid again with its own
//       number of trials and seed, and prints the measured forward variance,
//       covariance and gradient variance next to the closed forms (to follow
//       up a point whose saved estimate stands out).
//   attention_grid evaluate FILE[,FILE...] [--format text|markdown]
//       compares the current closed forms with the saved simulations (the
//       replicas of one grid in several files are pooled point by point): the
//       Table 20 percentiles (as validation_report prints them), the same
//       split by the domain-of-validity flag (core/domain.hpp), and the five
//       worst points of the gradient variance.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "sigprop/montecarlo.hpp"

namespace mc = sigprop::montecarlo;
using sigprop::Attention;
using sigprop::GradMoments;
using sigprop::Moments;

namespace {

[[noreturn]] void usage_error(const std::string& message) {
  std::cerr << "attention_grid: error: " << message << "\n";
  std::exit(2);
}

double parse(const std::string& flag, const std::string& value) {
  char* end = nullptr;
  const double x = std::strtod(value.c_str(), &end);
  if (end == value.c_str() || *end != '\0') usage_error(flag + " expects a number, got '" + value + "'");
  return x;
}

constexpr const char* header =
    "d_in,d_k,seq_len,q_var,k_var,v_var,p,mean,var,corr_len,corr_dim,grad_var,grad_corr_len,trials,"
    "f_mean,f_mean_se,f_var,f_var_se,f_cov,f_cov_se,"
    "b_var,b_var_se,b_cov,b_cov_se,bv_var,bv_var_se,bv_cov,bv_cov_se,bs_var,bs_var_se,bs_cov,bs_cov_se";

void write(std::ostream& out, const mc::AttentionGridPoint& pt, const mc::AttentionSimulationResult& s) {
  const Attention<double>& a = pt.layer;
  char buf[64];
  auto put = [&](double x, bool last = false) {
    std::snprintf(buf, sizeof buf, "%.17g%s", x, last ? "\n" : ",");
    out << buf;
  };
  for (double x : {a.d_in(), a.d_k(), a.seq_len(), a.q_var(), a.k_var(), a.v_var(), a.p(), pt.in.mean,
                   pt.in.var, pt.in.corr_len, pt.in.corr_dim, pt.grad_out.var, pt.grad_out.corr_len,
                   static_cast<double>(pt.setup.trials)})
    put(x);
  const mc::Estimate est[] = {s.forward.mean, s.forward.var, s.forward.cov_len,
                              s.backward.var, s.backward.cov_len, s.backward_value_path.var,
                              s.backward_value_path.cov_len, s.backward_softmax_path.var,
                              s.backward_softmax_path.cov_len};
  for (std::size_t i = 0; i < std::size(est); ++i) {
    put(est[i].value);
    put(est[i].std_error, i + 1 == std::size(est));
  }
}

struct Saved {
  mc::AttentionGridPoint point;
  mc::AttentionSimulationResult sim;
};

std::vector<Saved> read(const std::string& path) {
  std::ifstream in(path);
  if (!in) usage_error("cannot read '" + path + "'");
  std::vector<Saved> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line.rfind("d_in", 0) == 0) continue;
    std::vector<double> v;
    std::stringstream s(line);
    for (std::string cell; std::getline(s, cell, ',');) v.push_back(parse("a CSV cell", cell));
    if (v.size() != 32) usage_error("'" + path + "': a line with " + std::to_string(v.size()) + " cells, expected 32");
    mc::SimulationSetup setup;
    setup.trials = static_cast<std::size_t>(v[13]);
    const Attention<double> layer(v[0], v[1], v[2], v[3], v[4], v[5], v[6]);
    auto est = [&](std::size_t i) { return mc::Estimate{v[i], v[i + 1]}; };
    mc::AttentionSimulationResult sim;
    sim.forward.mean = est(14);
    sim.forward.var = est(16);
    sim.forward.cov_len = est(18);
    sim.backward.var = est(20);
    sim.backward.cov_len = est(22);
    sim.backward_value_path.var = est(24);
    sim.backward_value_path.cov_len = est(26);
    sim.backward_softmax_path.var = est(28);
    sim.backward_softmax_path.cov_len = est(30);
    out.push_back({{layer, Moments<double>{v[7], v[8], v[9], v[10]}, GradMoments<double>{v[11], v[12]}, setup},
                   sim});
  }
  return out;
}

void print(const mc::ValidationReport& r, const char* label, bool markdown) {
  for (auto q : mc::all_quantities) {
    if (!r.has(q)) continue;
    const auto e = r.errors(q);
    const auto n = r.noise_margin(q);
    if (markdown)
      std::printf("| %s | %s | %zu | %.2f / %.2f / %.2f | %.2f / %.2f / %.2f | %.1f |\n", label, mc::to_string(q),
                  r.points(q), e.p50, e.p90, e.p99, n.p50, n.p90, n.p99, r.max_z(q));
    else
      std::printf("%-22s %-9s %5zu  %6.2f %6.2f %7.2f   noise %6.2f %6.2f %6.2f  max z %5.1f\n", label,
                  mc::to_string(q), r.points(q), e.p50, e.p90, e.p99, n.p50, n.p90, n.p99, r.max_z(q));
  }
}

int simulate(const std::string& path, const mc::GridOptions& opt, std::uint64_t replica) {
  auto grid = mc::attention_grid(opt);
  for (auto& pt : grid) pt.setup.seed += 0x9E3779B97F4A7C15ull * replica;
  std::size_t done = 0;
  {
    std::ifstream existing(path);
    for (std::string line; std::getline(existing, line);)
      if (!line.empty() && line.rfind("d_in", 0) != 0) ++done;
  }
  std::ofstream out(path, std::ios::app);
  if (!out) usage_error("cannot write '" + path + "'");
  if (done == 0) out << header << "\n";
  for (std::size_t i = done; i < grid.size(); ++i) {
    const auto& pt = grid[i];
    const auto start = std::chrono::steady_clock::now();
    const auto sim = mc::simulate_paths(pt.layer, pt.in, pt.grad_out, pt.setup);
    write(out, pt, sim);
    out.flush();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "point %zu/%zu  d_in %g d_k %g L %g trials %zu  %.1f s\n", i + 1, grid.size(),
                 pt.layer.d_in(), pt.layer.d_k(), pt.layer.seq_len(), pt.setup.trials, s);
  }
  return 0;
}

int resimulate(const mc::GridOptions& opt, std::size_t point, std::size_t trials, std::uint64_t seed) {
  const auto grid = mc::attention_grid(opt);
  if (point < 1 || point > grid.size())
    usage_error("--point = " + std::to_string(point) + " is outside the valid range [1, " +
                std::to_string(grid.size()) + "]");
  auto pt = grid[point - 1];
  pt.setup.trials = trials;
  pt.setup.seed = seed;
  const auto sim = mc::simulate_paths(pt.layer, pt.in, pt.grad_out, pt.setup);
  const Moments<double> f = pt.layer.forward(pt.in);
  const GradMoments<double> b = pt.layer.backward(pt.in, pt.grad_out);
  const auto line = [](const char* what, double ours, const mc::Estimate& m) {
    std::printf("%-9s ours %.6g  simulated %.6g +- %.2g  (%+.2f %%, z %+.1f)\n", what, ours, m.value, m.std_error,
                100 * (ours - m.value) / m.value, (ours - m.value) / m.std_error);
  };
  std::printf("point %zu: d_in %g d_k %g L %g r %g p %g, %zu trials, seed %llu\n", point, pt.layer.d_in(),
              pt.layer.d_k(), pt.layer.seq_len(), pt.in.corr_len, pt.layer.p(), trials,
              static_cast<unsigned long long>(seed));
  line("var", f.var, sim.forward.var);
  line("cov", f.cov_len(), sim.forward.cov_len);
  line("grad var", b.var, sim.backward.var);
  return 0;
}

// The mean of independent replicas of one estimate.
mc::Estimate pool(const std::vector<mc::Estimate>& e) {
  double value = 0, var = 0;
  for (const auto& x : e) {
    value += x.value;
    var += x.std_error * x.std_error;
  }
  const double n = static_cast<double>(e.size());
  return {value / n, std::sqrt(var) / n};
}

std::vector<Saved> read_pooled(const std::string& paths) {
  std::vector<std::vector<Saved>> files;
  std::stringstream list(paths);
  for (std::string path; std::getline(list, path, ',');) files.push_back(read(path));
  std::vector<Saved> out = files.front();
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::vector<mc::AttentionSimulationResult> sims;
    for (const auto& f : files)
      if (i < f.size()) sims.push_back(f[i].sim);
    auto field = [&](auto member) {
      std::vector<mc::Estimate> e;
      for (const auto& s : sims) e.push_back(member(s));
      return pool(e);
    };
    auto& s = out[i].sim;
    s.forward.mean = field([](const auto& x) { return x.forward.mean; });
    s.forward.var = field([](const auto& x) { return x.forward.var; });
    s.forward.cov_len = field([](const auto& x) { return x.forward.cov_len; });
    s.backward.var = field([](const auto& x) { return x.backward.var; });
    s.backward.cov_len = field([](const auto& x) { return x.backward.cov_len; });
    s.backward_value_path.var = field([](const auto& x) { return x.backward_value_path.var; });
    s.backward_value_path.cov_len = field([](const auto& x) { return x.backward_value_path.cov_len; });
    s.backward_softmax_path.var = field([](const auto& x) { return x.backward_softmax_path.var; });
    s.backward_softmax_path.cov_len = field([](const auto& x) { return x.backward_softmax_path.cov_len; });
  }
  return out;
}

int evaluate(const std::string& paths, bool markdown) {
  const auto saved = read_pooled(paths);
  mc::AttentionValidation all, inside, outside;
  for (const auto& s : saved) {
    mc::add_point(all, s.point, s.sim);
    const bool flagged = sigprop::any(sigprop::caveats(s.point.layer.domain(s.point.in)));
    mc::add_point(flagged ? outside : inside, s.point, s.sim);
  }
  if (markdown) {
    std::printf("| comparison | quantity | points | ours p50 / p90 / p99 %% | noise p50 / p90 / p99 %% | max z |\n");
    std::printf("|---|---|---|---|---|---|\n");
  }
  print(all.total, "all points", markdown);
  if (!inside.points.empty() && !outside.points.empty()) {
    print(inside.total, "inside the domain", markdown);
    print(outside.total, "outside the domain", markdown);
  }
  print(all.value_path, "value path only", markdown);
  print(all.softmax_path, "softmax path only", markdown);
  print(all.paper_total, "paper's forms (B.8)", markdown);
  // The five worst gradient-variance points.
  std::vector<std::size_t> order(all.points.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  const auto& err = all.total.raw_errors(mc::Quantity::grad_var);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return err[a] > err[b]; });
  std::printf("\nworst gradient-variance points (error %%, z, score variance, d_in, d_k, L, r, r_g, p):\n");
  for (std::size_t k = 0; k < std::min<std::size_t>(5, order.size()); ++k) {
    const auto& pt = all.points[order[k]];
    const auto m = pt.measured.backward.var;
    const auto d = pt.layer.domain(pt.in);
    std::printf("  %6.2f  %5.1f  %6.3f  %5g %4g %6g  %.3f %.3f %.3f\n", err[order[k]],
                std::abs(m.value - pt.predicted_grad.var) / m.std_error, d.score_var, pt.layer.d_in(),
                pt.layer.d_k(), pt.layer.seq_len(), pt.in.corr_len, pt.grad_out.corr_len, pt.layer.p());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 3) usage_error("usage: attention_grid simulate|evaluate FILE [options] | resimulate --point I [options]");
    const std::string mode = argv[1];
    const bool has_path = mode != "resimulate";
    const std::string path = has_path ? argv[2] : "";
    mc::GridOptions opt;
    opt.points = 40;
    opt.scale = 1;
    opt.independent_samples = 4000;
    bool markdown = false;
    std::uint64_t replica = 0, seed = 1;
    std::size_t point = 0, trials = 100;
    for (int i = has_path ? 3 : 2; i < argc; i += 2) {
      const std::string flag = argv[i];
      if (i + 1 >= argc) usage_error(flag + " expects a value");
      const std::string value = argv[i + 1];
      if (flag == "--points") opt.points = static_cast<std::size_t>(parse(flag, value));
      else if (flag == "--scale") opt.scale = parse(flag, value);
      else if (flag == "--samples") opt.independent_samples = static_cast<std::size_t>(parse(flag, value));
      else if (flag == "--seed" && mode == "resimulate") seed = static_cast<std::uint64_t>(parse(flag, value));
      else if (flag == "--seed") opt.seed = static_cast<std::uint64_t>(parse(flag, value));
      else if (flag == "--format") markdown = value == "markdown";
      else if (flag == "--replica") replica = static_cast<std::uint64_t>(parse(flag, value));
      else if (flag == "--point") point = static_cast<std::size_t>(parse(flag, value));
      else if (flag == "--trials") trials = static_cast<std::size_t>(parse(flag, value));
      else usage_error("unknown flag " + flag);
    }
    if (mode == "simulate") return simulate(path, opt, replica);
    if (mode == "evaluate") return evaluate(path, markdown);
    if (mode == "resimulate") return resimulate(opt, point, trials, seed);
    usage_error("unknown mode '" + mode + "' (simulate, evaluate or resimulate)");
  } catch (const std::exception& e) {
    std::cerr << "attention_grid: error: " << e.what() << "\n";
    return 2;
  }
}
