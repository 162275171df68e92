#!/usr/bin/env bash
# Quick start on a fresh Debian 12 machine (as root, or with sudo):
#   bash scripts/quickstart.sh example   # build and run the main example
#   bash scripts/quickstart.sh test      # build and run the whole test suite
#   bash scripts/quickstart.sh python    # build and install the Python package into .venv
# Missing Debian packages are installed first. Build directory: build/
# (override with SIGPROP_BUILD_DIR; compiler with CXX).
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=packages.sh
source scripts/packages.sh
ensure_packages cmake make g++ libeigen3-dev libboost-dev catch2 nlohmann-json3-dev
# The Python package (python/, docs/python.md): built and tested with Debian's
# interpreter and packages.
python_packages=(python3-dev python3-venv python3-setuptools python3-wheel pybind11-dev python3-numpy
                 python3-pandas python3-matplotlib python3-pytest python3-hypothesis python3-distributed
                 python3-torch)
case "${1:-}" in
  test | python) ensure_packages "${python_packages[@]}" ;;
esac

build=${SIGPROP_BUILD_DIR:-build}
jobs=$(nproc 2>/dev/null || echo 2)
python_flag=()
case "${1:-}" in
  test | python) python_flag=(-DSIGPROP_BUILD_PYTHON=ON) ;;
esac
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSIGPROP_WERROR=ON "${python_flag[@]}" >/dev/null

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
  python)
    # A virtual environment seeing Debian's numpy, pandas, matplotlib (and
    # torch, if installed); setup.py builds the extension in "$build".
    /usr/bin/python3 -m venv --system-site-packages .venv
    SIGPROP_BUILD_DIR="$build" SIGPROP_JOBS="$jobs" .venv/bin/pip install --no-build-isolation --no-index \
      --disable-pip-version-check --root-user-action=ignore . >/dev/null
    .venv/bin/python -c "import sigprop; print('sigprop', sigprop.__version__, 'installed in .venv')"
    ;;
  *)
    echo "usage: bash scripts/quickstart.sh example|test|python" >&2
    exit 2
    ;;
esac
