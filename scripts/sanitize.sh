#!/usr/bin/env bash
# Sanitized test run: builds the fast part of the unit tests with clang++ and
# AddressSanitizer + UndefinedBehaviorSanitizer (every report fatal) and runs
# them. Called by .ci/run after the README's test command.
#   bash scripts/sanitize.sh
# Build directory: build-asan (override with SIGPROP_SANITIZE_BUILD_DIR). The
# tests run: SIGPROP_SANITIZE_TESTS, an extended regular expression over the
# test names (default: the fast subset chosen by measurement in
# docs/fuzzing.md; '.*' for all of them). Missing Debian packages are
# installed first.
set -euo pipefail
cd "$(dirname "$0")/.."

# The fast subset (docs/fuzzing.md, "Sanitized tests"): every test whose
# sanitized build and run together take seconds, not minutes.
default_tests='^test_(batch|causal_attention|cli|decoders|domain_edges|embedding|fuzz_replay|math|record|reproductions|schemes|softmax_concentration|vector_moments)$'
tests=${SIGPROP_SANITIZE_TESTS:-$default_tests}

# shellcheck source=packages.sh
source scripts/packages.sh
ensure_packages cmake make clang libclang-rt-14-dev libeigen3-dev libboost-dev nlohmann-json3-dev catch2

build=${SIGPROP_SANITIZE_BUILD_DIR:-build-asan}
jobs=$(nproc 2>/dev/null || echo 2)
flags="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -O1 -gline-tables-only"
# Portable instruction set (x86-64: SSE2, two doubles per register): the
# README's test command builds for the host (AVX2 where it runs), so the two
# runs together check both widths of the batched code.
cmake -S . -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=None -DSIGPROP_WERROR=ON \
  -DSIGPROP_BINARY_ARCH=portable \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DSIGPROP_BUILD_TESTS=ON -DSIGPROP_UNITY_TESTS=OFF -DSIGPROP_BUILD_EXAMPLES=OFF -DSIGPROP_BUILD_PYTHON=OFF \
  -DSIGPROP_INSTALL=OFF -DSIGPROP_TEST_SELECTION="$tests" >/dev/null

targets=()
for source in tests/test_*.cpp; do
  name=$(basename "$source" .cpp)
  if [[ $name =~ $tests ]]; then targets+=("$name"); fi
done
if [ ${#targets[@]} -eq 0 ]; then
  echo "sanitize.sh: no test matches '$tests'" >&2
  exit 2
fi
echo "sanitized build of ${#targets[@]} tests: ${targets[*]}"
cmake --build "$build" -j "$jobs" --target sigprop_selected_tests

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:halt_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir "$build" -j "$jobs" --output-on-failure -R "$(IFS='|'; echo "^(${targets[*]})\$")"
