// The command-line tool, called in-process through sigprop::cli::run.
#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "catch.hpp"

#include "../cli/output.hpp"
#include "cli_support.hpp"
#include "sigprop/sigprop.hpp"

namespace {

using Outcome = sigprop::test::CliOutcome;
using sigprop::test::run_cli;

// One error line on stderr, nothing on stdout, status 2, naming the flag, the
// value and the range.
void require_usage_error(const std::vector<std::string>& args, const std::string& flag,
                         const std::string& value, const std::string& range) {
  const Outcome o = run_cli(args);
  INFO("stderr: " << o.err);
  CHECK(o.status == 2);
  CHECK(o.out.empty());
  CHECK(std::count(o.err.begin(), o.err.end(), '\n') == 1);
  CHECK(o.err.find(flag) != std::string::npos);
  CHECK(o.err.find(value) != std::string::npos);
  CHECK(o.err.find(range) != std::string::npos);
}

// A small decoder preset as the tests below run it: d = 64, 2 heads.
sigprop::ModelConfig small_decoder(const char* arch, std::size_t layers, std::size_t seq_len) {
  sigprop::ModelConfig c;
  c.layers = layers;
  c.d = 64;
  c.heads = 2;
  c.seq_len = seq_len;
  return sigprop::with_architecture(c, arch);
}

}  // namespace

TEST_CASE("cli: component json is exactly one object with the documented keys", "[cli]") {
  const Outcome o = run_cli({"component", "linear", "--d-in", "100", "--d-out", "50", "--weight-var",
                         "0.02", "--mean", "2", "--var", "3", "--corr-len", "0.5", "--grad-var",
                         "2", "--grad-corr-len", "0.3", "--format", "json"});
  REQUIRE(o.status == 0);
  CHECK(o.err.empty());
  // Same numbers as the library: var = 100*0.02*(3+4) = 14, r = (1.5+4)/7.
  const sigprop::Linear<double> layer(100, 50, 0.02);
  const auto f = layer.forward({2, 3, 0.5, 0});
  const auto g = layer.backward({2, 3, 0.5, 0}, {2, 0.3});
  using sigprop::cli::exact;
  CHECK(o.out == "{\"component\": \"linear\", \"forward\": {\"mean\": 0, \"var\": " + exact(f.var) +
                     ", \"corr_len\": " + exact(f.corr_len) + ", \"corr_dim\": 0}, \"backward\": " +
                     "{\"grad_var\": " + exact(g.var) + ", \"grad_corr_len\": " + exact(g.corr_len) +
                     "}, \"domain\": {\"score_var\": 0, \"key_weight\": 0, \"width_term\": 0, " +
                     "\"outside\": false}}\n");
}

TEST_CASE("cli: text output and --flag=value", "[cli]") {
  const Outcome o = run_cli({"component", "dropout", "--p=0.5", "--var", "2"});
  REQUIRE(o.status == 0);
  CHECK(o.out.find("var 4") != std::string::npos);  // 2/(1-0.5)
  CHECK(o.out.find("grad_var 2") != std::string::npos);
}

TEST_CASE("cli: bad input exits with status 2 and one clear line", "[cli][errors]") {
  require_usage_error({"component", "dropout", "--p", "1"}, "--p", "1", "[0, 1)");
  require_usage_error({"component", "dropout", "--p", "-0.5"}, "--p", "-0.5", "[0, 1)");
  require_usage_error({"component", "linear", "--var", "0"}, "--var", "0", "(0, inf)");
  require_usage_error({"component", "linear", "--var", "-1"}, "--var", "-1", "(0, inf)");
  require_usage_error({"component", "linear", "--corr-len", "1.5"}, "--corr-len", "1.5", "[-1, 1]");
  require_usage_error({"component", "linear", "--corr-dim", "-2"}, "--corr-dim", "-2", "[-1, 1]");
  require_usage_error({"component", "linear", "--grad-corr-len", "3"}, "--grad-corr-len", "3", "[-1, 1]");
  require_usage_error({"component", "linear", "--grad-var", "0"}, "--grad-var", "0", "(0, inf)");
  require_usage_error({"component", "linear", "--d-in", "0"}, "--d-in", "0", "whole number in [1, 1e+15]");
  require_usage_error({"component", "linear", "--d-out", "2.5"}, "--d-out", "2.5", "whole number in [1, 1e+15]");
  require_usage_error({"component", "linear", "--var", "abc"}, "--var", "abc", "not a number");
  require_usage_error({"component", "linear", "--var", "nan"}, "--var", "nan", "finite");
  require_usage_error({"component", "linear", "--var", "inf"}, "--var", "inf", "finite");
  require_usage_error({"component", "linear", "--var", "1x"}, "--var", "1x", "not a number");
  require_usage_error({"component", "linear", "--format", "xml"}, "--format", "xml", "text|json");
  require_usage_error({"component", "relux"}, "NAME", "relux", "one of");
  require_usage_error({"component", "dropout", "--bogus", "1"}, "--bogus", "bogus", "unknown flag");
  require_usage_error({"component", "dropout", "--d-in", "1"}, "--d-in", "d-in", "unknown flag");
  require_usage_error({"component", "dropout", "--p"}, "--p", "--p", "needs a value");
  require_usage_error({"frobnicate"}, "command", "frobnicate", "unknown command");
}

TEST_CASE("cli: help and version go to stdout with status 0", "[cli]") {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--help"}, {"component", "--help"}, {"--version"}}) {
    const Outcome o = run_cli(args);
    CHECK(o.status == 0);
    CHECK(!o.out.empty());
    CHECK(o.err.empty());
  }
  CHECK(run_cli({}).status == 2);
}

TEST_CASE("cli: every component evaluates and matches the library", "[cli]") {
  for (const char* name : {"embedding", "linear", "dropout", "relu", "gelu", "layernorm", "softmax", "attention"}) {
    const Outcome o = run_cli({"component", name, "--corr-len", "0.4", "--format", "json"});
    INFO(name << ": " << o.err);
    CHECK(o.status == 0);
    CHECK(o.out.rfind(std::string("{\"component\": \"") + name + "\", \"forward\": {\"mean\": ", 0) == 0);
    CHECK(std::count(o.out.begin(), o.out.end(), '\n') == 1);
  }
  // ReLU at r = 0.4 against the library.
  const Outcome o = run_cli({"component", "relu", "--var", "2", "--corr-len", "0.4", "--format", "json"});
  const auto f = sigprop::Relu<double>().forward({0, 2, 0.4, 0});
  CHECK(o.out.find("\"var\": " + sigprop::cli::exact(f.var)) != std::string::npos);
  CHECK(o.out.find("\"corr_len\": " + sigprop::cli::exact(f.corr_len)) != std::string::npos);
  require_usage_error({"component", "layernorm", "--d", "3"}, "--d", "3", "{4, 5, 6");
  require_usage_error({"component", "softmax", "--form", "fast"}, "--form", "fast", "exact|full|simplified");
  require_usage_error({"component", "embedding", "--tables", "token,words"}, "--tables", "words", "token, position, segment");
  // Overflowing exponentials: status 2, one line naming the quantity.
  const Outcome big = run_cli({"component", "attention", "--corr-len", "0.5", "--q-var", "1", "--k-var", "1"});
  CHECK(big.status == 2);
  CHECK(big.out.empty());
  CHECK(big.err.find("overflows") != std::string::npos);
}

TEST_CASE("cli: table and init formats", "[cli][models]") {
  const Outcome csv = run_cli({"table", "--layers", "3", "--d", "64", "--heads", "4", "--format", "csv"});
  REQUIRE(csv.status == 0);
  CHECK(csv.out.rfind("layer,var,corr_len,grad_var,grad_corr_len", 0) == 0);
  CHECK(std::count(csv.out.begin(), csv.out.end(), '\n') == 5);  // header + n = 0..3
  const Outcome json = run_cli({"table", "--layers", "3", "--d", "64", "--heads", "4", "--format", "json"});
  REQUIRE(json.status == 0);
  CHECK(json.out.front() == '[');
  CHECK(std::count(json.out.begin(), json.out.end(), '{') == 4);
  const Outcome text = run_cli({"table"});
  REQUIRE(text.status == 0);
  CHECK(std::count(text.out.begin(), text.out.end(), '\n') == 3 + 13);  // description, header, n = 0..12, measures
  const Outcome init = run_cli({"init", "--scheme", "dslm", "--layers", "2", "--format", "csv"});
  REQUIRE(init.status == 0);
  CHECK(init.out.rfind("layer,weight,std\n0,embedding,", 0) == 0);
  CHECK(std::count(init.out.begin(), init.out.end(), '\n') == 1 + 3 + 2 * 10);  // header, embedding rows, 6 weights + 4 scales per layer
  // Measured input replaces the embedding: no embedding row.
  const Outcome measured = run_cli({"init", "--scheme", "xavier", "--layers", "1", "--input-var", "1",
                                "--input-corr-len", "0.2", "--format", "csv"});
  CHECK(measured.out.find("embedding") == std::string::npos);
  require_usage_error({"table", "--arch", "mid-ln"}, "--arch", "mid-ln", "pre-ln|post-ln");
  require_usage_error({"table", "--dropout", "1"}, "--dropout", "1", "[0, 1)");
  require_usage_error({"table", "--heads", "5"}, "--heads", "5", "divisor");
  require_usage_error({"table", "--input-var", "1"}, "--input-var", "input-corr-len", "together");
  require_usage_error({"init", "--scheme", "dslm", "--layers", "1", "--beta2-k", "5"}, "beta", "5", "(0, 1]");
}

TEST_CASE("cli: table --positions prints trace_positions and trace_position_gradients for causal models", "[cli][models]") {
  // Positions sorted and each once; the numbers are the library's.
  const std::vector<std::string> base = {"table", "--arch", "gpt2", "--layers", "2", "--d", "64", "--heads", "2",
                                         "--seq", "32"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const Outcome csv = run_cli(with({"--positions", "last,1,1", "--format", "csv"}));
  REQUIRE(csv.status == 0);
  CHECK(csv.err.empty());
  const sigprop::ModelConfig c = small_decoder("gpt2", 2, 32);
  const sigprop::ModelWeights w =
      sigprop::initialize(c, sigprop::Scheme::xavier, sigprop::with_architecture(sigprop::InputSpec{}, "gpt2"));
  const sigprop::PositionTrace p = sigprop::trace_positions(c, w, {1, 32});
  const sigprop::PositionGradientTrace g = sigprop::trace_position_gradients(c, w, {1, 32});
  using sigprop::cli::exact;
  std::string expected =
      "layer,position,var,corr_len,mean,corr_dim,mid_var,mid_corr_len,grad_var,grad_corr_len,mid_grad_var\n";
  for (std::size_t n = 0; n <= 2; ++n)
    for (std::size_t j = 0; j < 2; ++j) {
      const auto& m = p.rows[n][j];
      expected += std::to_string(n) + "," + std::to_string(p.positions[j]) + "," + exact(m.var) + "," +
                  exact(m.corr_len) + "," + exact(m.mean) + "," + exact(m.corr_dim) + "," +
                  (n ? exact(p.mid[n - 1][j].var) + "," + exact(p.mid[n - 1][j].corr_len) : std::string(",")) + "," +
                  exact(g.rows[n][j].var) + "," + exact(g.rows[n][j].corr_len) + "," +
                  (n ? exact(g.mid[n - 1][j].var) : std::string()) + "\n";
    }
  CHECK(csv.out == expected);
  // Beyond 4096 tokens the gradient's pairs are not carried: its columns are empty.
  const Outcome long_csv = run_cli({"table", "--arch", "gpt2", "--layers", "1", "--d", "64", "--heads", "2", "--seq",
                                "5000", "--positions", "1", "--format", "csv"});
  REQUIRE(long_csv.status == 0);
  CHECK(long_csv.out.find("\n1,1,") != std::string::npos);
  CHECK(long_csv.out.substr(long_csv.out.size() - 4) == ",,,\n");
  const Outcome json = run_cli(with({"--positions", "4", "--format", "json"}));
  REQUIRE(json.status == 0);
  CHECK(std::count(json.out.begin(), json.out.end(), '{') == 3);  // layers 0..2 at one position
  CHECK(json.out.find("\"mid_var\": null") != std::string::npos);
  const Outcome text = run_cli(with({"--positions", "1,16"}));
  REQUIRE(text.status == 0);
  CHECK(std::count(text.out.begin(), text.out.end(), '\n') == 2 + 3 * 2);  // description, header, 3 layers x 2
  CHECK(text.out.find("grad_var") != std::string::npos);
  require_usage_error({"table", "--positions", "1"}, "--positions", "1", "causal");
  require_usage_error(with({"--positions", "0,3"}), "--positions", "'0'", "[1, --seq = 32]");
  require_usage_error(with({"--positions", "33"}), "--positions", "'33'", "[1, --seq = 32]");
  require_usage_error(with({"--positions", "1.5"}), "--positions", "'1.5'", "whole number");
  require_usage_error(with({"--positions", "1,,2"}), "--positions", "''", "is not a number");
  require_usage_error({"init", "--arch", "llama", "--positions", "1"}, "--positions", "unknown", "help");
}

TEST_CASE("cli: a causal model's table and sweep give the positions' average gradient", "[cli][models]") {
  // The gradient rows of `table` are with_position_gradients' (the average
  // over the positions of trace_position_gradients), the text form says so,
  // and sweep's gradient figures are those of the same rows.
  const sigprop::ModelConfig c = small_decoder("gpt2", 2, 32);
  const sigprop::InputSpec tables = sigprop::with_architecture(sigprop::InputSpec{}, "gpt2");
  const sigprop::ModelWeights w = sigprop::initialize(c, sigprop::Scheme::xavier, tables);
  const sigprop::Trace t =
      sigprop::with_position_gradients(sigprop::trace(c, w), sigprop::trace_position_gradients(c, w, {1}));
  const Outcome csv = run_cli({"table", "--arch", "gpt2", "--layers", "2", "--d", "64", "--heads", "2", "--seq", "32",
                           "--format", "csv"});
  REQUIRE(csv.status == 0);
  using sigprop::cli::exact;
  for (std::size_t n = 0; n <= 2; ++n) {
    const auto& r = t.rows[n];
    const std::string row = "\n" + std::to_string(n) + "," + exact(r.forward.var) + "," + exact(r.forward.corr_len) +
                            "," + exact(r.backward.var) + "," + exact(r.backward.corr_len) + ",";
    INFO("row " << n << ": " << row);
    CHECK(csv.out.find(row) != std::string::npos);
  }
  const Outcome text = run_cli({"table", "--arch", "gpt2", "--layers", "2", "--d", "64", "--heads", "2", "--seq", "32"});
  REQUIRE(text.status == 0);
  CHECK(text.out.find("# grad_var, grad_corr_len: the average over the positions") != std::string::npos);
  CHECK(run_cli({"table", "--layers", "2", "--d", "64", "--heads", "2"}).out.find("average over the positions") ==
        std::string::npos);
  // Beyond 4096 tokens: the sequence-averaged state, said so.
  const Outcome long_text =
      run_cli({"table", "--arch", "gpt2", "--layers", "1", "--d", "64", "--heads", "2", "--seq", "5000"});
  REQUIRE(long_text.status == 0);
  CHECK(long_text.out.find("# grad_var, grad_corr_len: the sequence-averaged state") != std::string::npos);
  sigprop::SweepPoint point;
  point.config = c;
  point.input = tables;
  const sigprop::SweepSummary s = sigprop::sweep({point})[0];
  const sigprop::SweepSummary expected = sigprop::summarize_trace(t, {});
  CHECK(s.grad_min == Approx(expected.grad_min).epsilon(1e-12));
  CHECK(s.grad_max == Approx(expected.grad_max).epsilon(1e-12));
  CHECK(s.grad_max != Approx(sigprop::summarize_trace(sigprop::trace(c, w), {}).grad_max).epsilon(1e-3));
}

TEST_CASE("cli: --rotary puts rotary embeddings on every head (table, sweep)", "[cli][models]") {
  // The numbers are the library's with ModelConfig::rotary_base, and differ
  // from the model without rotation.
  sigprop::ModelConfig c = small_decoder("llama", 3, 64);
  const sigprop::InputSpec tables = sigprop::with_architecture(sigprop::InputSpec{}, "llama");
  c.rotary_base = 10000;
  const sigprop::Trace t = sigprop::trace(c, sigprop::initialize(c, sigprop::Scheme::xavier, tables));
  c.rotary_base = 0;
  const sigprop::Trace plain = sigprop::trace(c, sigprop::initialize(c, sigprop::Scheme::xavier, tables));
  const Outcome csv = run_cli({"table", "--arch", "llama", "--layers", "3", "--d", "64", "--heads", "2", "--seq", "64",
                           "--rotary", "10000", "--format", "csv"});
  INFO(csv.err);
  REQUIRE(csv.status == 0);
  using sigprop::cli::exact;
  // (the gradient column of a causal model: the average over the positions)
  c.rotary_base = 10000;
  const sigprop::ModelWeights w = sigprop::initialize(c, sigprop::Scheme::xavier, tables);
  const double grad_var = sigprop::with_position_gradients(t, sigprop::trace_position_gradients(c, w, {1})).rows[3].backward.var;
  c.rotary_base = 0;
  const std::string last_row = "3," + exact(t.rows[3].forward.var) + "," + exact(t.rows[3].forward.corr_len) + "," +
                               exact(grad_var) + ",";
  CHECK(csv.out.find("\n" + last_row) != std::string::npos);
  CHECK(t.rows[0].backward.var != plain.rows[0].backward.var);
  const Outcome text = run_cli({"table", "--arch", "llama", "--layers", "3", "--d", "64", "--heads", "2", "--rotary",
                            "10000"});
  CHECK(text.out.find("rotary base 10000") != std::string::npos);
  const Outcome swept = run_cli({"sweep", "--arch", "llama", "--scheme", "xavier", "--layers", "3", "--d", "64",
                             "--head-dim", "32", "--seq", "64", "--rotary", "10000"});
  REQUIRE(swept.status == 0);
  const auto s = sigprop::summarize_trace(t, {});
  CHECK(swept.out.find("," + exact(s.final_var) + ",") != std::string::npos);
  require_usage_error({"table", "--rotary", "1"}, "--rotary", "1", "{0} or (1, inf)");
  require_usage_error({"sweep", "--rotary", "-5"}, "--rotary", "-5", "{0} or (1, inf)");
  require_usage_error({"table", "--d", "8", "--heads", "8", "--rotary", "10000"}, "--rotary", "head width 1",
                      "at least 2");
  require_usage_error({"component", "attention", "--d-k", "1", "--rotary", "10000"}, "--rotary", "head width 1",
                      "at least 2");
  const Outcome component = run_cli({"component", "attention", "--rotary", "10000", "--corr-len", "0.5", "--format",
                                 "json"});
  REQUIRE(component.status == 0);
  const sigprop::Attention<double> head(512, 64, 256, 1.0 / 512, 1.0 / 512, 1.0 / 512, 0,
                                        sigprop::AttentionGradient::all_paths, {10000});
  CHECK(component.out.find(exact(head.backward({0, 1, 0.5, 0}, {1, 0}).var)) != std::string::npos);
}

TEST_CASE("cli: results outside the validated domain are flagged, not refused", "[cli][domain]") {
  // Q/K at 16x the Xavier variance: score variance ~40, softmax nearly one-hot.
  const std::vector<std::string> hot = {"table", "--layers", "3", "--d", "128", "--heads", "4",
                                        "--seq", "128", "--q-var", "0.05", "--k-var", "0.05"};
  const Outcome text = run_cli(hot);
  INFO("stderr: " << text.err);
  CHECK(text.status == 0);
  CHECK(text.err.rfind("sigprop: warning: layers 1-3 are outside the validated domain", 0) == 0);
  CHECK(text.err.find("score variance") != std::string::npos);
  CHECK(std::count(text.err.begin(), text.err.end(), '\n') == 1);
  CHECK(std::count(text.out.begin(), text.out.end(), '!') == 3 + 1);  // three rows and the legend
  std::vector<std::string> csv_args = hot;
  csv_args.insert(csv_args.end(), {"--format", "csv"});
  const Outcome csv = run_cli(csv_args);
  CHECK(csv.status == 0);
  CHECK(csv.out.find(",score_var,outside_domain,branch_var,residual_share,mid_branch_var,mid_residual_share,"
                     "q_grad_sq,k_grad_sq,v_grad_sq,o_grad_sq,ffn1_grad_sq,ffn2_grad_sq,spike_attn_bound,spike_ffn_bound\n") !=
        std::string::npos);
  CHECK(csv.out.find(",0,0,0,0,,,,,,,,,,\n") != std::string::npos);  // the input row: inside, no branch
  CHECK(std::count(csv.out.begin(), csv.out.end(), '\n') == 5);
  // Xavier Q/K: inside, no warning, no marks.
  const Outcome plain = run_cli({"table", "--layers", "3", "--d", "128", "--heads", "4", "--seq", "128"});
  CHECK(plain.status == 0);
  CHECK(plain.err.empty());
  CHECK(plain.out.find('!') == std::string::npos);
  // One component: the flag is in the json, the warning on stderr.
  const Outcome one = run_cli({"component", "attention", "--d-in", "128", "--d-k", "32", "--seq", "128",
                           "--q-var", "0.05", "--k-var", "0.05", "--format", "json"});
  CHECK(one.status == 0);
  CHECK(one.out.find("\"outside\": true") != std::string::npos);
  CHECK(one.err.rfind("sigprop: warning: attention is outside", 0) == 0);
  const Outcome calm = run_cli({"component", "attention", "--d-in", "128", "--d-k", "32", "--seq", "128", "--format", "json"});
  CHECK(calm.out.find("\"outside\": false") != std::string::npos);
  CHECK(calm.err.empty());
}

TEST_CASE("cli: sweep prints one summary per grid point, matching the library", "[cli][sweep]") {
  const Outcome csv = run_cli({"sweep", "--arch", "pre-ln,post-ln", "--scheme", "xavier,dslm", "--layers", "4:8:4",
                           "--d", "128", "--head-dim", "32", "--seq", "64", "--dropout", "0,0.1"});
  INFO(csv.err);
  REQUIRE(csv.status == 0);
  CHECK(csv.err.empty());
  std::istringstream lines(csv.out);
  std::string header, line;
  std::getline(lines, header);
  CHECK(header == "arch,scheme,layers,d,heads,dropout,beta2_k,beta2_alpha,final_var,final_corr_len,var_min,var_max,"
                  "grad_min,grad_max,grad_ratio,within_bounds,outside_domain,output_change,sensitivity,overflow");
  std::vector<std::string> rows;
  while (std::getline(lines, line)) rows.push_back(line);
  CHECK(rows.size() == 2 * 2 * 2 * 2);  // arch x scheme x layers {4, 8} x dropout
  // The last row: post-ln, dslm, 8 layers, p = 0.1, against the library's trace.
  sigprop::ModelConfig c;
  c.arch = sigprop::Arch::post_ln;
  c.layers = 8;
  c.d = 128;
  c.heads = 4;
  c.seq_len = 64;
  c.dropout = 0.1;
  const auto s = sigprop::summarize_trace(sigprop::trace(c, sigprop::initialize(c, sigprop::Scheme::dslm)), {});
  CHECK(rows.back().rfind("post-ln,dslm,8,128,4,0.1,2,1," + sigprop::cli::exact(s.final_var) + ",", 0) == 0);

  const Outcome json = run_cli({"sweep", "--layers", "4", "--d", "128", "--seq", "64", "--format", "json"});
  REQUIRE(json.status == 0);
  CHECK(json.out.front() == '[');
  CHECK(json.out.find("\"within_bounds\": ") != std::string::npos);
  CHECK(std::count(json.out.begin(), json.out.end(), '{') == 1);

  const Outcome help = run_cli({"sweep", "--help"});
  CHECK(help.status == 0);
  CHECK(help.out.find("START:STOP:STEP") != std::string::npos);
}

TEST_CASE("cli: sweep --jobs N gives the rows of one thread", "[cli][sweep]") {
  // Two structures (arch x layers) and an overflowing point among them.
  const std::vector<std::string> grid = {"sweep", "--arch", "pre-ln,post-ln", "--scheme", "admin,xavier,dslm",
                                         "--layers", "4,192", "--d", "128", "--head-dim", "32", "--seq", "32",
                                         "--dropout", "0,0.1"};
  const Outcome one = run_cli(grid);
  REQUIRE(one.status == 0);
  CHECK(one.out.find(",1\n") != std::string::npos);  // an overflow row
  for (const char* jobs : {"2", "3", "7", "256"}) {
    std::vector<std::string> with = grid;
    with.insert(with.end(), {"--jobs", jobs});
    const Outcome many = run_cli(with);
    INFO("--jobs " << jobs << ": " << many.err);
    REQUIRE(many.status == 0);
    CHECK(many.out == one.out);
  }
  // An invalid point is named by its index among all points, as the serial sweep names it.
  std::vector<sigprop::SweepPoint> points(6);
  for (sigprop::SweepPoint& p : points) {
    p.config.layers = 2;
    p.config.d = 64;
    p.config.heads = 2;
    p.config.seq_len = 16;
  }
  points[3].config.heads = 3;
  for (std::size_t jobs : {1, 2, 4})
    CHECK_THROWS_WITH(sigprop::cli::sweep_on_threads(points, {}, jobs), Catch::Contains("points[3]"));
  require_usage_error({"sweep", "--jobs", "0"}, "--jobs", "0", "whole number in [1, 1e+15]");
  require_usage_error({"sweep", "--jobs", "257"}, "--jobs", "257", "[1, 256]");
}

TEST_CASE("cli: a diverging configuration is marked overflow and the sweep goes on", "[cli][sweep]") {
  // Admin forced onto Pre-LN: the stream variance passes 1e308 before layer 192
  // (docs/domains.md); the same sweep point by point through the library.
  const Outcome csv = run_cli({"sweep", "--arch", "pre-ln", "--scheme", "admin,dslm", "--layers", "192"});
  INFO(csv.err);
  REQUIRE(csv.status == 0);
  CHECK(csv.err.empty());
  CHECK(csv.out.find("\npre-ln,admin,192,512,8,0.1,,,,,,,,,,0,0,,,1\n") != std::string::npos);
  CHECK(csv.out.find("\npre-ln,dslm,192,512,8,0.1,2,1,1.") != std::string::npos);
  CHECK(csv.out.find(",0\n", csv.out.find("\npre-ln,dslm,")) != std::string::npos);  // dslm: overflow = 0
  const Outcome json = run_cli({"sweep", "--arch", "pre-ln", "--scheme", "admin", "--layers", "192", "--format", "json"});
  REQUIRE(json.status == 0);
  CHECK(json.out.find("\"final_var\": null") != std::string::npos);
  CHECK(json.out.find("\"within_bounds\": false") != std::string::npos);
  CHECK(json.out.find("\"overflow\": true") != std::string::npos);
  CHECK(json.out.find("nan") == std::string::npos);
}

TEST_CASE("cli: sweep rejects bad grids with status 2", "[cli][sweep][errors]") {
  require_usage_error({"sweep", "--dropout", "0,1"}, "--dropout", "1", "[0, 1)");
  require_usage_error({"sweep", "--layers", "8:4:1"}, "--layers", "8:4:1", "START:STOP:STEP");
  require_usage_error({"sweep", "--layers", "0"}, "--layers", "0", "whole number in [1, 1e+15]");
  require_usage_error({"sweep", "--d", "100"}, "--d", "100", "multiple of --head-dim");
  require_usage_error({"sweep", "--bounds", "2,0.5"}, "--bounds", "2,0.5", "LO <= HI");
  require_usage_error({"sweep", "--scheme", "dslm,foo"}, "--scheme", "foo", "not one of");
  require_usage_error({"sweep", "--beta2-k", "-1"}, "--beta2-k", "-1", "(0, inf)");
  require_usage_error({"sweep", "--format", "text"}, "--format", "text", "csv|json");
}

TEST_CASE("cli: every scheme by name, with its own architecture unless --arch is given", "[cli][schemes]") {
  for (const sigprop::SchemeInfo& i : sigprop::schemes()) {
    const Outcome t = run_cli({"table", "--scheme", i.name, "--layers", "3", "--d", "64", "--heads", "2", "--seq", "32"});
    INFO(i.name << ": " << t.err);
    REQUIRE(t.status == 0);
    CHECK(t.out.rfind("# " + sigprop::native_architecture(i.scheme) + ", " + i.name + ",", 0) == 0);
    CHECK(t.out.find("# output change sum beta_ii^2 = ") != std::string::npos);
    const Outcome init = run_cli({"init", "--scheme", i.name, "--layers", "2", "--d", "64", "--heads", "2", "--format", "csv"});
    CHECK(init.status == 0);
    CHECK(init.out.find("\n2,ffn_branch,") != std::string::npos);
  }
  const Outcome composed = run_cli({"table", "--scheme", "t-fixup", "--arch", "pre-ln", "--layers", "2"});
  CHECK(composed.out.rfind("# pre-ln, t-fixup,", 0) == 0);
  const Outcome scale = run_cli({"init", "--scheme", "scaled-embed", "--d", "256", "--heads", "4", "--layers", "1",
                             "--format", "csv"});
  CHECK(scale.out.find("0,embedding_scale,16\n") != std::string::npos);
  CHECK(scale.out.find("0,embedding_ln,0\n") != std::string::npos);
  const Outcome admin = run_cli({"init", "--scheme", "admin", "--layers", "2", "--format", "csv"});
  CHECK(admin.out.find("1,attn_skip,0\n") != std::string::npos);  // omega_1 = 0
  require_usage_error({"table", "--scheme", "fixup"}, "--scheme", "fixup", "t-fixup");
  const Outcome sweep = run_cli({"sweep", "--scheme", "admin,rezero,dslm", "--layers", "4", "--d", "128"});
  REQUIRE(sweep.status == 0);
  CHECK(sweep.out.find("\npost-ln,admin,4,") != std::string::npos);
  CHECK(sweep.out.find("\nno-ln,rezero,4,") != std::string::npos);
  CHECK(sweep.out.find("\npre-ln,dslm,4,") != std::string::npos);
  const Outcome json = run_cli({"sweep", "--scheme", "admin", "--arch", "post-ln,no-ln", "--layers", "2", "--d", "128",
                            "--format", "json"});
  CHECK(json.status == 0);
  CHECK(json.out.find("\"arch\": \"no-ln\"") != std::string::npos);
  CHECK(json.out.find("inf") == std::string::npos);  // a sensitivity of +inf is written null
}

// The std printed by `init --format csv` for `weight` of `layer`.
double init_std(const std::string& csv, std::size_t layer, const std::string& weight) {
  const std::string key = "\n" + std::to_string(layer) + "," + weight + ",";
  const std::size_t at = csv.find(key);
  REQUIRE(at != std::string::npos);
  return std::stod(csv.substr(at + key.size()));
}

TEST_CASE("cli: init --scheme gpt2 and llama print R and R/sqrt(2N)", "[cli][schemes]") {
  const Outcome gpt2 = run_cli({"init", "--scheme", "gpt2", "--layers", "3", "--d", "64", "--heads", "2", "--format", "csv"});
  REQUIRE(gpt2.status == 0);
  const double R = 0.02, N = 3;
  CHECK(init_std(gpt2.out, 0, "embedding") == Approx(R).epsilon(1e-15));
  for (std::size_t n = 1; n <= 3; ++n)
    for (const char* w : {"q", "k", "v", "ffn1"}) CHECK(init_std(gpt2.out, n, w) == Approx(R).epsilon(1e-15));
  for (std::size_t n = 1; n <= 3; ++n)
    for (const char* w : {"o", "ffn2"}) CHECK(init_std(gpt2.out, n, w) == Approx(R / std::sqrt(2 * N)).epsilon(1e-15));
  CHECK(gpt2.out.find(",ffn_gate,") == std::string::npos);  // the gpt2 architecture: plain FFN
  const Outcome table = run_cli({"table", "--scheme", "gpt2", "--layers", "2", "--d", "64", "--heads", "2", "--seq", "16"});
  CHECK(table.out.rfind("# gpt2, gpt2, N = 2, d = 64, H = 2, FFN width 256, gelu_tanh, L = 16, p = 0.1\n", 0) == 0);

  const Outcome llama = run_cli({"init", "--scheme", "llama", "--layers", "2", "--d", "96", "--heads", "2",
                             "--initializer-range", "0.05", "--format", "csv"});
  REQUIRE(llama.status == 0);
  CHECK(init_std(llama.out, 0, "embedding") == Approx(0.05).epsilon(1e-15));
  for (std::size_t n = 1; n <= 2; ++n)
    for (const char* w : {"q", "k", "v", "o", "ffn1", "ffn2", "ffn_gate"})
      CHECK(init_std(llama.out, n, w) == Approx(0.05).epsilon(1e-15));
  const Outcome llama_table = run_cli({"table", "--scheme", "llama", "--layers", "2", "--d", "96", "--heads", "2"});
  CHECK(llama_table.out.rfind("# llama, llama, N = 2, d = 96, H = 2, FFN width 256, silu, L = 256, p = 0, rotary base 10000\n", 0) == 0);
  // --initializer-range changes bert's 0.02 too.
  const Outcome bert = run_cli({"init", "--scheme", "bert", "--layers", "1", "--initializer-range", "0.1", "--format", "csv"});
  CHECK(init_std(bert.out, 1, "ffn2") == Approx(0.1).epsilon(1e-15));
  require_usage_error({"init", "--scheme", "gpt2", "--initializer-range", "0"}, "--initializer-range", "0", "(0, inf)");
}

TEST_CASE("cli: --attn-dropout and --ffn-dropout reach the model (table, sweep)", "[cli][models]") {
  const Outcome o = run_cli({"table", "--layers", "2", "--d", "64", "--heads", "2", "--seq", "32", "--attn-dropout", "0.3",
                         "--ffn-dropout", "0.2", "--format", "csv"});
  REQUIRE(o.status == 0);
  sigprop::ModelConfig c;
  c.layers = 2;
  c.d = 64;
  c.heads = 2;
  c.seq_len = 32;
  c.attention_dropout = 0.3;
  c.ffn_dropout = 0.2;
  const sigprop::Trace t = sigprop::trace(c, sigprop::initialize(c, sigprop::Scheme::xavier));
  const std::string row2 = "\n2," + sigprop::cli::exact(t.rows[2].forward.var) + "," +
                           sigprop::cli::exact(t.rows[2].forward.corr_len) + "," + sigprop::cli::exact(t.rows[2].backward.var) + ",";
  CHECK(o.out.find(row2) != std::string::npos);
  const Outcome text = run_cli({"table", "--layers", "2", "--d", "64", "--heads", "2", "--seq", "32", "--attn-dropout", "0",
                            "--ffn-dropout", "0.1"});
  CHECK(text.out.rfind("# pre-ln, xavier, N = 2, d = 64, H = 2, FFN width 256, relu, L = 32, p = 0.1, attention p = 0, "
                       "FFN hidden p = 0.1\n", 0) == 0);
  const Outcome sweep = run_cli({"sweep", "--scheme", "xavier", "--layers", "2", "--d", "64", "--head-dim", "32", "--seq", "32",
                             "--attn-dropout", "0.3", "--ffn-dropout", "0.2", "--format", "csv"});
  REQUIRE(sweep.status == 0);
  // final_var, the ninth column of the one row after the header.
  std::istringstream rows(sweep.out);
  std::string header, row, cell;
  std::getline(rows, header);
  std::getline(rows, row);
  std::istringstream cells(row);
  for (int i = 0; i < 9; ++i) std::getline(cells, cell, ',');
  CHECK(std::stod(cell) == Approx(t.rows[2].forward.var).epsilon(1e-12));
  require_usage_error({"table", "--ffn-dropout", "1"}, "--ffn-dropout", "1", "[0, 1)");
  require_usage_error({"table", "--attn-dropout", "-0.5"}, "--attn-dropout", "-0.5", "[0, 1)");
  require_usage_error({"sweep", "--ffn-dropout", "1.5"}, "--ffn-dropout", "1.5", "[0, 1)");
}

TEST_CASE("cli: the presets' rotary embeddings and tables, --logit-scale and gelu_tanh", "[cli][models]") {
  // llama has rotary embeddings by default (--rotary 0 turns them off) and a
  // token table only; gpt2 the tanh GeLU and token and position tables;
  // explicit flags win. The numbers are the library's.
  using sigprop::cli::exact;
  const auto last_var = [](const Outcome& o) {
    const std::size_t at = o.out.rfind("\n3,");
    return o.out.substr(at + 3, o.out.find(',', at + 3) - at - 3);
  };
  const std::vector<std::string> llama = {"table", "--arch", "llama", "--layers", "3", "--d", "64", "--heads", "2",
                                          "--seq", "64", "--format", "csv"};
  auto with = [](std::vector<std::string> a, std::vector<std::string> extra) {
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const Outcome preset = run_cli(llama), on = run_cli(with(llama, {"--rotary", "10000"})), off = run_cli(with(llama, {"--rotary", "0"}));
  REQUIRE(preset.status == 0);
  CHECK(preset.out == on.out);
  CHECK(preset.out != off.out);
  sigprop::ModelConfig c = small_decoder("llama", 3, 64);
  c.rotary_base = 0;
  const sigprop::InputSpec tokens = sigprop::with_architecture(sigprop::InputSpec{}, "llama");
  CHECK(last_var(off) == exact(sigprop::trace(c, sigprop::initialize(c, sigprop::Scheme::xavier, tokens)).rows[3].forward.var));
  const Outcome all_tables = run_cli(with(llama, {"--tables", "token,position,segment"}));
  CHECK(last_var(all_tables) == exact(sigprop::trace(sigprop::with_architecture(c, "llama"),
                                                     sigprop::initialize(sigprop::with_architecture(c, "llama"),
                                                                         sigprop::Scheme::xavier))
                                          .rows[3]
                                          .forward.var));
  // gpt2 with logits over d_k and an explicit --activation gelu.
  const std::vector<std::string> gpt2 = {"table", "--arch", "gpt2", "--layers", "3", "--d", "64", "--heads", "2",
                                         "--seq", "32", "--logit-scale", "inv-dk", "--format", "csv"};
  sigprop::ModelConfig g = small_decoder("gpt2", 3, 32);
  g.logit_scale = sigprop::LogitScale::inv_dk;
  const sigprop::InputSpec learned = sigprop::with_architecture(sigprop::InputSpec{}, "gpt2");
  const Outcome scaled = run_cli(gpt2);
  REQUIRE(scaled.status == 0);
  CHECK(last_var(scaled) == exact(sigprop::trace(g, sigprop::initialize(g, sigprop::Scheme::xavier, learned)).rows[3].forward.var));
  g.activation = sigprop::FfnActivation::gelu;
  CHECK(last_var(run_cli(with(gpt2, {"--activation", "gelu"}))) ==
        exact(sigprop::trace(g, sigprop::initialize(g, sigprop::Scheme::xavier, learned)).rows[3].forward.var));
  CHECK(run_cli(with(gpt2, {"--activation", "gelu"})).out != scaled.out);
  const Outcome text = run_cli({"table", "--arch", "gpt2", "--layers", "2", "--d", "64", "--heads", "2", "--logit-scale", "inv-dk"});
  CHECK(text.out.find("gelu_tanh") != std::string::npos);
  CHECK(text.out.find("logits / d_k") != std::string::npos);
  const Outcome component = run_cli({"component", "gelu", "--form", "tanh", "--var", "2", "--format", "json"});
  REQUIRE(component.status == 0);
  CHECK(component.out.find(exact(sigprop::Gelu<double>(sigprop::GeluForm::tanh).forward({0, 2, 0, 0}).var)) !=
        std::string::npos);
  require_usage_error({"table", "--logit-scale", "sqrt"}, "--logit-scale", "sqrt", "inv-sqrt-dk");
  require_usage_error({"component", "gelu", "--form", "cubic"}, "--form", "cubic", "tanh");
  require_usage_error({"table", "--activation", "gelu-tanh"}, "--activation", "gelu-tanh", "gelu_tanh");
}
