#!/usr/bin/env bash
# Quick start on a fresh Debian 12 machine (as root, or with sudo):
#   bash scripts/quickstart.sh example   # build and run the main example
#   bash scripts/quickstart.sh test      # build and run the whole test suite
# Missing Debian packages are installed first. Build directory: build/
# (override with SIGPROP_BUILD_DIR; compiler with CXX).
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=packages.sh
source scripts/packages.sh
ensure_packages cmake make g++ libeigen3-dev libboost-dev catch2

build=${SIGPROP_BUILD_DIR:-build}
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSIGPROP_WERROR=ON >/dev/null

case "${1:-}" in
  example)
    cmake --build "$build" -j "$jobs" --target layer_table >/dev/null
    "$build/examples/layer_table"
    ;;
  test)
    # What the test suite runs (the tests, the tool, the table generator);
    # `cmake --build "$build"` builds the examples as well.
    cmake --build "$build" -j "$jobs" --target sigprop_test_targets
    ctest --test-dir "$build" -j "$jobs" --output-on-failure
    ;;
  *)
    echo "usage: bash scripts/quickstart.sh example|test" >&2
    exit 2
    ;;
esac
