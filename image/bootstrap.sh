#!/bin/sh
# bootstrap.sh — run execd next to an image's own entrypoint.
#
# Used when the static execd is injected into an arbitrary user image (the way
# OpenSandbox injects its daemon): copy `execd-static` and this script into the
# container (e.g. /opt/opensandbox/) and make this script the entrypoint, with
# the image's original command as its arguments:
#
#   /opt/opensandbox/bootstrap.sh [ORIGINAL ENTRYPOINT ARGS...]
#
# It starts execd in the background, then runs the user command in the
# background too, forwards SIGTERM/SIGINT/SIGHUP to both, waits for the user
# command and exits with its status (after asking execd to finish and waiting
# for it).  Without a user command it waits for execd and exits with execd's
# status.
#
# Environment:
#   EXECD             path of the execd binary (default /opt/opensandbox/execd)
#   EXECD_ARGS        extra arguments for execd, split on whitespace
#                     (e.g. "--port 44772 --log-level info"); the token is best
#                     passed as EXECD_ACCESS_TOKEN (execd reads it directly)
#                     or as --access-token-file in EXECD_ARGS
#   BOOTSTRAP_CMD     user command as a shell string, used when no arguments
#                     are given (run with $BOOTSTRAP_SHELL -c, default sh)
#   BOOTSTRAP_SHELL   shell for BOOTSTRAP_CMD and for `bootstrap.sh -c "cmd"`
#   EXECD_STOP_TIMEOUT seconds to wait for execd after the user command ended
#                     (default 10; then SIGKILL)
#
# POSIX sh only: the script has to work in whatever image it is injected into.

EXECD=${EXECD:-/opt/opensandbox/execd}
EXECD_STOP_TIMEOUT=${EXECD_STOP_TIMEOUT:-10}

log() { echo "bootstrap: $*" >&2; }

if [ ! -x "$EXECD" ]; then
    log "execd not found or not executable at $EXECD"
    exit 127
fi

# Background jobs of a non-interactive shell start with SIGINT and SIGQUIT
# ignored, and a process cannot undo an ignore it inherited from its shell
# (most programs never install a handler for SIGINT then).  Where coreutils'
# `env --default-signal` exists, use it so the forwarded SIGINT really
# interrupts the user command.
launcher=
if env --default-signal=INT true >/dev/null 2>&1; then
    launcher="env --default-signal=INT,QUIT"
fi

# Start execd.  EXECD_ARGS is split on whitespace deliberately; no globbing.
set -f
# shellcheck disable=SC2086
$launcher "$EXECD" $EXECD_ARGS &
execd_pid=$!
set +f

user_pid=
got_signal=

forward() {
    got_signal=$1
    [ -n "$user_pid" ] && kill -s "$1" "$user_pid" 2>/dev/null
    kill -s "$1" "$execd_pid" 2>/dev/null
}
trap 'forward TERM' TERM
trap 'forward INT' INT
trap 'forward HUP' HUP

# wait_for PID: wait until PID has really exited (a trapped signal interrupts
# `wait` early) and leave its exit status in $status.
wait_for() {
    while :; do
        wait "$1"
        status=$?
        # A process that was interrupted-not-reaped still exists (possibly as
        # a zombie); one that has been reaped does not.
        kill -0 "$1" 2>/dev/null || return 0
    done
}

# Work out the user command.
if [ $# -gt 0 ] && [ "$1" = "-c" ] && [ $# -ge 2 ]; then
    set -- "${BOOTSTRAP_SHELL:-sh}" -c "$2"
elif [ $# -eq 0 ] && [ -n "${BOOTSTRAP_CMD:-}" ]; then
    set -- "${BOOTSTRAP_SHELL:-sh}" -c "$BOOTSTRAP_CMD"
fi

if [ $# -eq 0 ]; then
    # Nothing else to run: execd is the workload.
    wait_for "$execd_pid"
    exit "$status"
fi

$launcher "$@" &
user_pid=$!
# A signal that arrived before the user command existed went to execd only.
[ -n "$got_signal" ] && kill -s "$got_signal" "$user_pid" 2>/dev/null

wait_for "$user_pid"
user_status=$status

# The user command is gone: stop execd (unless a signal already told it to)
# and give it EXECD_STOP_TIMEOUT seconds to drain.
if kill -0 "$execd_pid" 2>/dev/null; then
    [ -z "$got_signal" ] && kill -s TERM "$execd_pid" 2>/dev/null
    (
        sleep "$EXECD_STOP_TIMEOUT"
        kill -s KILL "$execd_pid" 2>/dev/null
    ) &
    killer=$!
    wait_for "$execd_pid"
    kill "$killer" 2>/dev/null
fi

exit "$user_status"
