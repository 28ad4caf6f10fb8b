#!/usr/bin/env bash
# tests/run-integration: the integration suite against several execd binaries
# at the same time. A run mostly waits (on the daemon's timers, on its
# clients, on the sleeps of the commands it runs), so runs side by side take
# about as long as the longest alone would on an idle machine.
#
#   tests/run-integration.sh PYTEST NAME=BINARY[,OPTION]... [-- PYTEST_ARGS...]
#
# Options:
#   sanitized   sets EXECD_SANITIZED=1 (the suite's slack for ASan builds);
#   workers=N   N pytest workers (pytest-xdist), a test file to each at a
#               time: the ASan run is the longest and mostly waits;
#   files=LIST  only the test files LIST names (one per line, # comments).
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
  IFS=, read -r binary options <<<"${spec#*=}"
  sanitized= args=() targets=(tests/integration)
  for option in ${options//,/ }; do
    case $option in
      sanitized) sanitized=1 ;;
      workers=*) args+=(-n "${option#workers=}" --dist loadfile) ;;
      files=*) mapfile -t targets < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' -e 's|^|tests/integration/|' "${option#files=}") ;;
      *) echo "run-integration: unknown option $option in $spec" >&2; exit 2 ;;
    esac
  done
  # No .pytest_cache: the runs share the directory it would be written to.
  (
    export EXECD_BIN=$binary
    [ -n "$sanitized" ] && export EXECD_SANITIZED=1
    exec "$pytest" -q -p no:cacheprovider "${args[@]}" "${targets[@]}" "${extra[@]}"
  ) >"$logs/$name.log" 2>&1 </dev/null &
  name_of[$!]=$name
  echo "integration: $name ($binary${options:+, $options}) started"
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
