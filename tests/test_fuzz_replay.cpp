// Replays the fuzzers' seed corpus and every input that once failed
// (tests/fuzz/corpus/<target>/, tests/fuzz/regressions/<target>/) through the
// fuzzers' own decoding and oracles (tests/fuzz/oracles.hpp), without
// libFuzzer and with any compiler. Inputs of bugs still open are kept in
// tests/fuzz/open/<target>/ and replayed as [!mayfail] (docs/fuzzing.md).
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "fuzz/oracles.hpp"
#include "support.hpp"

namespace {

namespace fs = std::filesystem;

const fs::path fuzz_dir = fs::path(__FILE__).parent_path() / "fuzz";

std::vector<fs::path> inputs(const std::string& kind, const std::string& target) {
  std::vector<fs::path> files;
  const fs::path dir = fuzz_dir / kind / target;
  if (fs::is_directory(dir))
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.is_regular_file()) files.push_back(entry.path());
  return files;
}

std::vector<std::uint8_t> bytes_of(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

template <class Check>
void replay(const std::vector<fs::path>& files, Check check) {
  for (const fs::path& file : files) {
    const std::vector<std::uint8_t> data = bytes_of(file);
    INFO(file.filename().string());
    CHECK(check(data.data(), data.size()) == "");
  }
}

}  // namespace

TEST_CASE("fuzz_cli: seed corpus and regressions pass the CLI oracle", "[fuzz]") {
  const auto corpus = inputs("corpus", "fuzz_cli");
  CHECK(corpus.size() >= 20);  // the directory is found and holds the seeds
  replay(corpus, sigprop::fuzz::check_cli_input);
  const auto regressions = inputs("regressions", "fuzz_cli");
  CHECK(!regressions.empty());
  replay(regressions, sigprop::fuzz::check_cli_input);
}

TEST_CASE("fuzz_api: seed corpus and regressions pass the API oracle", "[fuzz]") {
  const auto corpus = inputs("corpus", "fuzz_api");
  CHECK(corpus.size() >= 20);
  replay(corpus, sigprop::fuzz::check_api_input);
  const auto regressions = inputs("regressions", "fuzz_api");
  CHECK(!regressions.empty());
  replay(regressions, sigprop::fuzz::check_api_input);
}

TEST_CASE("fuzz: inputs of open bugs", "[fuzz][!mayfail]") {
  sigprop::fuzz::skip_open_bugs = false;
  replay(inputs("open", "fuzz_cli"), sigprop::fuzz::check_cli_input);
  replay(inputs("open", "fuzz_api"), sigprop::fuzz::check_api_input);
  sigprop::fuzz::skip_open_bugs = true;
}

TEST_CASE("fuzz: the oracles reject what they must", "[fuzz]") {
  using sigprop::fuzz::check_cli;
  using sigprop::fuzz::check_result;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(check_result("x", sigprop::Moments<double>{0, 1, 0.5, 0}) == "");
  CHECK(check_result("x", sigprop::Moments<double>{0, -1e-300, 0, 0}) != "");
  CHECK(check_result("x", sigprop::Moments<double>{0, 1, 1 + 1e-16 * 3, 0}) != "");
  CHECK(check_result("x", sigprop::Moments<double>{nan, 1, 0, 0}) != "");
  CHECK(check_result("x", sigprop::GradMoments<double>{-1, 0}) != "");
  CHECK(check_result("x", sigprop::GradMoments<double>{1, -1.5}) != "");
  // The tool's good and bad paths both pass; the decoder splits on newline and NUL.
  CHECK(check_cli({"component", "relu", "--var", "2"}) == "");
  CHECK(check_cli({"component", "relu", "--var", "nan"}) == "");
  const std::string text("component\nrelu\0--var\n-1", 23);
  const auto args = sigprop::fuzz::cli_args(reinterpret_cast<const std::uint8_t*>(text.data()), text.size());
  CHECK(args == std::vector<std::string>{"component", "relu", "--var", "-1"});
  CHECK(sigprop::fuzz::cli_too_costly({"table", "--layers", "100000"}));
  CHECK(!sigprop::fuzz::cli_too_costly({"table", "--layers", "12"}));
  // table --positions carries the gradient's pairs of positions: O(layers L^2).
  CHECK(!sigprop::fuzz::cli_too_costly({"table", "--arch", "gpt2", "--positions", "1"}));
  CHECK(sigprop::fuzz::cli_too_costly({"table", "--arch", "gpt2", "--seq", "1024", "--positions", "1"}));
  CHECK(!sigprop::fuzz::cli_too_costly({"table", "--arch", "gpt2", "--seq", "1024"}));
}
