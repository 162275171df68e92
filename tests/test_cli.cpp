// The command-line tool, called in-process through sigprop::cli::run.
#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "catch.hpp"

#include "../cli/run.hpp"

namespace {

struct Outcome {
  int status;
  std::string out, err;
};

Outcome run(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int status = sigprop::cli::run(args, out, err);
  return {status, out.str(), err.str()};
}

// One error line on stderr, nothing on stdout, status 2, naming the flag, the
// value and the range.
void require_usage_error(const std::vector<std::string>& args, const std::string& flag,
                         const std::string& value, const std::string& range) {
  const Outcome o = run(args);
  INFO("stderr: " << o.err);
  CHECK(o.status == 2);
  CHECK(o.out.empty());
  CHECK(std::count(o.err.begin(), o.err.end(), '\n') == 1);
  CHECK(o.err.find(flag) != std::string::npos);
  CHECK(o.err.find(value) != std::string::npos);
  CHECK(o.err.find(range) != std::string::npos);
}

}  // namespace

TEST_CASE("cli: component json is exactly one object with the documented keys", "[cli]") {
  const Outcome o = run({"component", "linear", "--d-in", "100", "--d-out", "50", "--weight-var",
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
                     "}}\n");
}

TEST_CASE("cli: text output and --flag=value", "[cli]") {
  const Outcome o = run({"component", "dropout", "--p=0.5", "--var", "2"});
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
  require_usage_error({"component", "linear", "--d-in", "0"}, "--d-in", "0", "whole number >= 1");
  require_usage_error({"component", "linear", "--d-out", "2.5"}, "--d-out", "2.5", "whole number >= 1");
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
    const Outcome o = run(args);
    CHECK(o.status == 0);
    CHECK(!o.out.empty());
    CHECK(o.err.empty());
  }
  CHECK(run({}).status == 2);
}
