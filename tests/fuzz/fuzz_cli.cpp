// tests/fuzz/fuzz_cli.cpp -- libFuzzer target over the command-line tool's
// argument handling: the input bytes become an argument vector (lines, or a
// structured draw from the tool's own commands and flags; oracles.hpp) and
// sigprop::cli::run must exit 0 or 2, print nothing on stdout on error and
// exactly one "sigprop: error:" line on stderr. Build: SIGPROP_FUZZ=ON (clang);
// run: bash scripts/fuzz.sh (docs/fuzzing.md).
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "oracles.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string failure = sigprop::fuzz::check_cli_input(data, size);
  if (!failure.empty()) {
    std::fprintf(stderr, "fuzz_cli oracle failure: %s\n", failure.c_str());
    std::abort();
  }
  return 0;
}
