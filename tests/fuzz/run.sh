#!/usr/bin/env bash
# Runs every libFuzzer target of a fuzz build for SECONDS each, starting from
# the committed seed corpus (tests/fuzz/corpus/<target>); new inputs go to the
# build directory, never into the tree. Prints one line per target with its
# exec count and fails if any target found a crash, leak or timeout.
#   tests/fuzz/run.sh BUILD_DIR SECONDS [TARGET...]
set -u
build=${1:?build dir}; seconds=${2:?seconds}; shift 2
here=$(cd "$(dirname "$0")" && pwd)
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in "$build"/fuzz_*; do [ -x "$f" ] && targets+=("$(basename "$f")"); done
fi
failed=0
for t in "${targets[@]}"; do
  work="$build/fuzz-work/$t"; mkdir -p "$work/corpus" "$work/artifacts" "$here/corpus/$t"
  log="$work/last.log"
  "$build/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
    "$work/corpus" "$here/corpus/$t" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if [ $rc -ne 0 ]; then
    failed=1
    echo "FAIL $t (exit $rc, ${execs:-?} execs); log: $log"
    grep -E "ERROR|SUMMARY|Test unit written" "$log" | head -5
  else
    echo "ok   $t: ${execs:-?} execs in ${seconds}s"
  fi
done
exit $failed
