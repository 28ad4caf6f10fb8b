#!/usr/bin/env bash
# tests/run-integration: the integration suite against several execd binaries
# at the same time. A run mostly waits (on the daemon's timers, on its
# clients, on the sleeps of the commands it runs), so the release, ASan and
# static runs together take about as long as the ASan run alone (~9 of the
# ~18 minutes they take one after another on two cores).
#
#   tests/run-integration.sh PYTEST NAME=BINARY[,sanitized]... [-- PYTEST_ARGS...]
#
# ",sanitized" sets EXECD_SANITIZED=1 (the suite's slack for ASan builds).
# Each run's output goes to a log of its own, printed whole when that run
# ends; the exit status is 1 if any run failed. Ctrl-C interrupts every run
# (pytest then stops the daemons it started).
set -u
cd "$(dirname "$0")/.."

pytest=$1
shift
specs=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  specs+=("$1")
  shift
done
[ $# -gt 0 ] && shift
extra=("$@")

logs=$(mktemp -d)
declare -A name_of
for spec in "${specs[@]}"; do
  name=${spec%%=*}
  binary=${spec#*=}
  sanitized=
  case $binary in *,sanitized) binary=${binary%,sanitized} sanitized=1 ;; esac
  # No .pytest_cache: the runs share the directory it would be written to.
  (
    export EXECD_BIN=$binary
    [ -n "$sanitized" ] && export EXECD_SANITIZED=1
    exec "$pytest" -q -p no:cacheprovider tests/integration "${extra[@]}"
  ) >"$logs/$name.log" 2>&1 </dev/null &
  name_of[$!]=$name
  echo "integration: $name ($binary) started"
done

trap 'kill -INT "${!name_of[@]}" 2>/dev/null; wait; rm -rf "$logs"; exit 130' INT TERM

status=0
while [ ${#name_of[@]} -gt 0 ]; do
  wait -n -p ended "${!name_of[@]}"
  rc=$?
  name=${name_of[$ended]}
  unset "name_of[$ended]"
  echo "== integration: $name, exit status $rc"
  cat "$logs/$name.log"
  [ "$rc" -eq 0 ] || status=1
done
rm -rf "$logs"
exit $status
