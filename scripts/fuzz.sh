#!/usr/bin/env bash
# `make fuzz`: builds the libFuzzer targets of tests/fuzz with clang
# (-fsanitize=fuzzer,address,undefined) in BUILD (default build-fuzz) and runs each for
# FUZZ_SECONDS (default 60) from the committed seeds. Crashes land in BUILD/fuzz-artifacts.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-build-fuzz}
case "$BUILD" in /*) ;; *) BUILD="$top/$BUILD" ;; esac
SECONDS_EACH=${FUZZ_SECONDS:-60}
JOBS=${JOBS:-$(nproc)}

mkdir -p "$BUILD"
if ! { CC=clang cmake -S "$top" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHL_FUZZ=ON &&
       cmake --build "$BUILD" -j "$JOBS" --target fuzz_message fuzz_bson fuzz_matcher fuzz_keystring fuzz_routing fuzz_expression fuzz_scram; } >"$BUILD/build.log" 2>&1; then
  tail -n 40 "$BUILD/build.log"
  echo "fuzz: build failed (log $BUILD/build.log)"
  exit 1
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
mkdir -p "$BUILD/fuzz-artifacts"
failed=0
for t in message bson matcher keystring routing expression scram; do
  work="$BUILD/fuzz-corpus/$t"   # grows as the fuzzer finds new coverage; not committed
  mkdir -p "$work"
  echo "== fuzz_$t for ${SECONDS_EACH}s"
  if "$BUILD/tests/fuzz/fuzz_$t" -max_total_time="$SECONDS_EACH" -timeout=10 -max_len=65536 \
      -dict="$top/tests/fuzz/wire.dict" -artifact_prefix="$BUILD/fuzz-artifacts/$t-" \
      -print_final_stats=1 "$work" "$top/tests/fuzz/corpus/$t" >"$BUILD/fuzz-$t.log" 2>&1; then
    grep -E '^stat::(number_of_executed_units|new_units_added)|Done [0-9]+ runs' \
      "$BUILD/fuzz-$t.log" || true
    echo "fuzz_$t: ok"
  else
    tail -n 60 "$BUILD/fuzz-$t.log"
    echo "fuzz_$t: FAILED (log $BUILD/fuzz-$t.log, inputs in $BUILD/fuzz-artifacts)"
    failed=1
  fi
done
exit "$failed"
