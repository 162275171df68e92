// tests/fuzz/fuzz_api.cpp -- libFuzzer target over the component, block and
// stack APIs: components built from fuzzed parameters (NaN, +-inf, negative,
// huge and tiny values included) and fed fuzzed input moments; every call
// must throw sigprop::domain_error / sigprop::overflow_error or return finite
// results with variances >= 0 and correlations in [-1, 1] (oracles.hpp).
// Build: SIGPROP_FUZZ=ON (clang); run: bash scripts/fuzz.sh (docs/fuzzing.md).
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "oracles.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string failure = sigprop::fuzz::check_api_input(data, size);
  if (!failure.empty()) {
    std::fprintf(stderr, "fuzz_api oracle failure: %s\n", failure.c_str());
    std::abort();
  }
  return 0;
}
