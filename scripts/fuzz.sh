#!/usr/bin/env bash
# Builds the libFuzzer targets (clang++, ASan + UBSan) and runs them:
#   bash scripts/fuzz.sh                 # both targets, 10000 executions each
#   bash scripts/fuzz.sh cli 1000000     # fuzz_cli, 10^6 executions
#   bash scripts/fuzz.sh api 10000000    # fuzz_api, 10^7 executions
# Each target starts from its seed corpus (tests/fuzz/corpus/<target>/) and the
# regression inputs (tests/fuzz/regressions/<target>/); inputs it finds go to
# <build>/corpus/<target>/, crashes to <build>/artifacts/, the log to
# <build>/<target>.log. Exits non-zero on a crash, an oracle failure or a
# sanitizer report. Build directory: build-fuzz (override with
# SIGPROP_FUZZ_BUILD_DIR); extra libFuzzer flags in SIGPROP_FUZZ_FLAGS.
# Missing Debian packages (clang, its fuzzer runtime) are installed first.
set -euo pipefail
cd "$(dirname "$0")/.."

which=${1:-all}
runs=${2:-10000}
case "$which" in
  cli) targets=(fuzz_cli) ;;
  api) targets=(fuzz_api) ;;
  all) targets=(fuzz_cli fuzz_api) ;;
  *) echo "usage: bash scripts/fuzz.sh [cli|api|all] [RUNS]" >&2; exit 2 ;;
esac

# shellcheck source=packages.sh
source scripts/packages.sh
ensure_packages cmake make clang libclang-rt-14-dev libeigen3-dev libboost-dev nlohmann-json3-dev

build=${SIGPROP_FUZZ_BUILD_DIR:-build-fuzz}
cmake -S . -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSIGPROP_WERROR=ON \
  -DSIGPROP_FUZZ=ON -DSIGPROP_BUILD_TESTS=OFF -DSIGPROP_BUILD_EXAMPLES=OFF -DSIGPROP_INSTALL=OFF >/dev/null
cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" --target "${targets[@]}"

status=0
for t in "${targets[@]}"; do
  mkdir -p "$build/corpus/$t" "$build/artifacts"
  echo "== $t: $runs executions"
  start=$(date +%s)
  # shellcheck disable=SC2086
  if "$build/tests/fuzz/$t" -runs="$runs" -print_final_stats=1 -artifact_prefix="$build/artifacts/$t-" \
       ${SIGPROP_FUZZ_FLAGS:-} "$build/corpus/$t" "tests/fuzz/corpus/$t" "tests/fuzz/regressions/$t" \
       >"$build/$t.log" 2>&1; then
    result=ok
  else
    result=FAILED
    status=1
  fi
  seconds=$(( $(date +%s) - start ))
  executed=$(sed -n 's/^stat::number_of_executed_units: *//p' "$build/$t.log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$build/$t.log")
  reports=$(grep -c -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|oracle failure' "$build/$t.log" || true)
  echo "$t: $result, ${executed:-?} executions in ${seconds} s (${rate:-?} exec/s), $reports crash/sanitizer/oracle reports"
  [ "$result" = ok ] || tail -n 40 "$build/$t.log"
done
exit $status
