#!/bin/sh
# bootstrap.sh — start execd next to an image's own command.
#
# The OpenSandbox lifecycle server copies execd and this script into every
# sandbox's /opt/opensandbox/ and makes this script the entrypoint, with the
# sandbox's command as its arguments:
#
#   /opt/opensandbox/bootstrap.sh [COMMAND ARGS...]
#   /opt/opensandbox/bootstrap.sh -c "shell command"
#
# In order, it:
#   1. trusts the egress proxy's CA when OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT
#      is true: waits (bounded) for the CA file, installs it in the system store
#      and in the user's NSS database where the tools exist, and exports
#      NODE_EXTRA_CA_CERTS (the CA) and REQUESTS_CA_BUNDLE / SSL_CERT_FILE (a
#      bundle of the system roots plus the CA);
#   2. exports EXECD_ENVS (default /opt/opensandbox/.env) after creating it;
#   3. sources EXECD_BOOTSTRAP_PRE_SCRIPT, so what it exports reaches execd
#      and the command;
#   4. applies the token policy and starts execd in the background:
#        - a token source (EXECD_ACCESS_TOKEN, EXECD_ACCESS_TOKEN_FILE, or
#          --access-token / --access-token-file in EXECD_ARGS) is enforced;
#        - with none, execd runs with --insecure-no-auth and ONE warning line
#          goes to stderr, unless EXECD_REQUIRE_TOKEN is true: then nothing is
#          started and the script exits 78;
#   5. with EXECD_INIT true (the server's runtime.execd_run_as_init), execs
#      `execd --init -- COMMAND...` instead: execd is this process (PID 1),
#      supervises the command and exits with its status.  Otherwise
#      runs the command in the background, forwards SIGTERM/SIGINT/SIGHUP to it
#      and to execd, waits for it and exits with its status (after asking execd
#      to finish).  Without a command it waits for execd and exits with its
#      status.
#
# Environment:
#   EXECD                   execd binary (default /opt/opensandbox/execd)
#   EXECD_ARGS              extra execd arguments, split on whitespace
#   EXECD_ACCESS_TOKEN      the token (execd reads it from its environment)
#   EXECD_ACCESS_TOKEN_FILE file holding the token (read by execd; EXECD_ACCESS_TOKEN wins)
#   EXECD_REQUIRE_TOKEN     1/true/yes/on: refuse to run execd without a token
#   EXECD_INIT              1/true/yes/on: exec execd --init with the command (step 5)
#   EXECD_ENVS              env file execd re-reads for every command
#   EXECD_LOG_FILE          append execd's stderr (its log) to this file
#   EXECD_BOOTSTRAP_PRE_SCRIPT  file sourced (with `.`) before execd starts
#   OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT  true: trust the egress proxy CA
#   OPENSANDBOX_MITM_CA_FILE     its path (default /opt/opensandbox/mitmproxy-ca-cert.pem)
#   OPENSANDBOX_MITM_CA_TIMEOUT  seconds to wait for it (default 300)
#   BOOTSTRAP_CMD           shell command to run (takes precedence over the
#                           arguments, as upstream's bootstrap does)
#   BOOTSTRAP_SHELL         shell for BOOTSTRAP_CMD and -c (default bash, else sh)
#   EXECD_STOP_TIMEOUT      seconds to wait for execd after the command ended
#                           (default 10; then SIGKILL)
#
# POSIX sh only (tested with dash and busybox sh): it runs in whatever image
# it is injected into.

EXECD=${EXECD:-/opt/opensandbox/execd}
EXECD_STOP_TIMEOUT=${EXECD_STOP_TIMEOUT:-10}
OPENSANDBOX_DIR=/opt/opensandbox

log() { printf 'bootstrap: %s\n' "$*" >&2; }

truthy() {
    case ${1:-} in
        1 | [Tt][Rr][Uu][Ee] | [Yy][Ee][Ss] | [Oo][Nn]) return 0 ;;
    esac
    return 1
}

as_root() {
    if [ "$(id -u 2>/dev/null)" = 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo -n "$@"
    else
        "$@"
    fi
}

if [ ! -x "$EXECD" ]; then
    log "execd not found or not executable at $EXECD"
    exit 127
fi

# ---------------------------------------------------------------------------
# 1. Egress proxy CA (transparent TLS interception by the egress sidecar).
# ---------------------------------------------------------------------------

# install_ca_system CERT: add CERT to the system trust store (best effort).
install_ca_system() {
    if command -v update-ca-certificates >/dev/null 2>&1; then
        as_root mkdir -p /usr/local/share/ca-certificates &&
            as_root cp "$1" /usr/local/share/ca-certificates/opensandbox-egress-ca.crt &&
            as_root update-ca-certificates >/dev/null 2>&1 ||
            log "warning: update-ca-certificates failed; the system store lacks the egress CA"
    elif command -v update-ca-trust >/dev/null 2>&1; then
        as_root mkdir -p /etc/pki/ca-trust/source/anchors &&
            as_root cp "$1" /etc/pki/ca-trust/source/anchors/opensandbox-egress-ca.pem &&
            { as_root update-ca-trust extract || as_root update-ca-trust; } >/dev/null 2>&1 ||
            log "warning: update-ca-trust failed; the system store lacks the egress CA"
    else
        log "warning: no update-ca-certificates or update-ca-trust; the system store lacks the egress CA"
    fi
}

# install_ca_nss CERT: add CERT to $HOME/.pki/nssdb (Chrome, Firefox) when
# certutil exists.
install_ca_nss() {
    command -v certutil >/dev/null 2>&1 || return 0
    [ -n "${HOME:-}" ] && [ -d "$HOME" ] || return 0
    nss_dir=$HOME/.pki/nssdb
    mkdir -p "$nss_dir" 2>/dev/null || return 0
    if [ -f "$nss_dir/cert8.db" ] && [ ! -f "$nss_dir/cert9.db" ]; then
        nss_db=dbm:$nss_dir
    else
        nss_db=sql:$nss_dir
        [ -f "$nss_dir/cert9.db" ] ||
            certutil -N -d "$nss_db" --empty-password >/dev/null 2>&1 || return 0
    fi
    certutil -D -d "$nss_db" -n opensandbox-egress-ca >/dev/null 2>&1
    certutil -A -d "$nss_db" -n opensandbox-egress-ca -t C,, -i "$1" >/dev/null 2>&1 ||
        log "warning: could not add the egress CA to $nss_dir"
}

# merged_bundle CERT: print the path of a PEM bundle holding a full root set
# plus CERT (empty when no root set was found).  REQUESTS_CA_BUNDLE and
# SSL_CERT_FILE replace the default roots, so they need all of them.
merged_bundle() {
    roots=
    for py in python3 python; do
        if command -v "$py" >/dev/null 2>&1; then
            roots=$("$py" -c 'import certifi; print(certifi.where())' 2>/dev/null) || roots=
            break
        fi
    done
    for r in "$roots" /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt \
        /etc/ssl/cert.pem /etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem; do
        [ -n "$r" ] && [ -s "$r" ] || continue
        # Next to the CA (/opt/opensandbox/ as upstream), else in TMPDIR.
        for dir in "$(dirname "$1")" "${TMPDIR:-/tmp}"; do
            out=$dir/merged-ca-certificates.pem
            if { cat "$r" && echo && cat "$1"; } >"$out" 2>/dev/null; then
                echo "$out"
                return 0
            fi
        done
        return 0
    done
}

if truthy "${OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT:-}"; then
    ca=${OPENSANDBOX_MITM_CA_FILE:-$OPENSANDBOX_DIR/mitmproxy-ca-cert.pem}
    ca_timeout=${OPENSANDBOX_MITM_CA_TIMEOUT:-300}
    waited=0
    while [ ! -s "$ca" ] && [ "$waited" -lt "$ca_timeout" ]; do
        sleep 1
        waited=$((waited + 1))
    done
    if [ -s "$ca" ]; then
        install_ca_system "$ca"
        install_ca_nss "$ca"
        export NODE_EXTRA_CA_CERTS="$ca" # added to Node's built-in roots
        bundle=$(merged_bundle "$ca")
        if [ -z "$bundle" ]; then
            log "warning: no root bundle found to merge with the egress CA; REQUESTS_CA_BUNDLE and SSL_CERT_FILE hold only the egress CA"
            bundle=$ca
        fi
        export REQUESTS_CA_BUNDLE="$bundle" SSL_CERT_FILE="$bundle"
        log "egress CA $ca trusted (after ${waited}s)"
    else
        log "warning: $ca did not appear within ${ca_timeout}s; continuing without trusting the egress CA"
    fi
fi

# ---------------------------------------------------------------------------
# 2. EXECD_ENVS, 3. pre-script.
# ---------------------------------------------------------------------------

EXECD_ENVS=${EXECD_ENVS:-$OPENSANDBOX_DIR/.env}
mkdir -p "$(dirname "$EXECD_ENVS")" 2>/dev/null
touch "$EXECD_ENVS" 2>/dev/null || log "warning: cannot create EXECD_ENVS file $EXECD_ENVS"
export EXECD_ENVS

if [ -n "${EXECD_BOOTSTRAP_PRE_SCRIPT:-}" ]; then
    if [ -f "$EXECD_BOOTSTRAP_PRE_SCRIPT" ] && [ -r "$EXECD_BOOTSTRAP_PRE_SCRIPT" ]; then
        # `.` searches PATH for a name without a slash: make it literal.
        case $EXECD_BOOTSTRAP_PRE_SCRIPT in
            */*) pre_script=$EXECD_BOOTSTRAP_PRE_SCRIPT ;;
            *) pre_script=./$EXECD_BOOTSTRAP_PRE_SCRIPT ;;
        esac
        log "sourcing $EXECD_BOOTSTRAP_PRE_SCRIPT"
        # shellcheck disable=SC1090
        . "$pre_script"
    else
        log "warning: EXECD_BOOTSTRAP_PRE_SCRIPT=$EXECD_BOOTSTRAP_PRE_SCRIPT is not a readable file"
    fi
fi

# ---------------------------------------------------------------------------
# 4. Token policy, then execd.
# ---------------------------------------------------------------------------

# Scan EXECD_ARGS (split on whitespace, no globbing) for a token flag, an
# explicit --insecure-no-auth and the port.
token_in_args=
insecure_in_args=
port=44772
scan_execd_args() {
    prev=
    for a in "$@"; do
        case $prev in
            --port | -port) port=$a ;;
        esac
        case $a in
            --access-token | -access-token | --access-token=* | -access-token=* | \
                --access-token-file | -access-token-file | --access-token-file=* | -access-token-file=*)
                token_in_args=1 ;;
            --insecure-no-auth | -insecure-no-auth) insecure_in_args=1 ;;
            --port=* | -port=*) port=${a#*=} ;;
        esac
        prev=$a
    done
}
set -f
# shellcheck disable=SC2086
scan_execd_args $EXECD_ARGS
set +f

# execd reads EXECD_ACCESS_TOKEN and EXECD_ACCESS_TOKEN_FILE itself, in that
# order after its flags (first found wins), so both pass through unchanged.
insecure_arg=
if [ -z "${EXECD_ACCESS_TOKEN:-}" ] && [ -z "${EXECD_ACCESS_TOKEN_FILE:-}" ] && [ -z "$token_in_args" ]; then
    if truthy "${EXECD_REQUIRE_TOKEN:-}"; then
        log "refusing to start execd: EXECD_REQUIRE_TOKEN=$EXECD_REQUIRE_TOKEN but no access token is configured (set EXECD_ACCESS_TOKEN or EXECD_ACCESS_TOKEN_FILE, or put --access-token-file PATH in EXECD_ARGS)"
        exit 78
    fi
    [ -z "$insecure_in_args" ] && insecure_arg=--insecure-no-auth
    user=$(id -un 2>/dev/null) || user="uid $(id -u 2>/dev/null)"
    log "WARNING: no access token configured (EXECD_ACCESS_TOKEN, EXECD_ACCESS_TOKEN_FILE, --access-token[-file] in EXECD_ARGS): execd runs with --insecure-no-auth, so anyone who can reach port $port can run commands and read and write files as $user in this sandbox; set a token, or EXECD_REQUIRE_TOKEN=1 to refuse to start without one"
fi

if [ -n "${EXECD_LOG_FILE:-}" ]; then
    mkdir -p "$(dirname "$EXECD_LOG_FILE")" 2>/dev/null
    if ! : >>"$EXECD_LOG_FILE" 2>/dev/null; then
        log "warning: cannot append to EXECD_LOG_FILE=$EXECD_LOG_FILE; execd logs to stderr"
        EXECD_LOG_FILE=
    fi
fi

# Background jobs of a non-interactive shell start with SIGINT and SIGQUIT
# ignored, and a process cannot undo an ignore it inherited from its shell
# (most programs never install a handler for SIGINT then).  Where coreutils'
# `env --default-signal` exists, use it so a forwarded SIGINT really
# interrupts the command.
launcher=
if env --default-signal=INT true >/dev/null 2>&1; then
    launcher="env --default-signal=INT,QUIT"
fi

# EXECD_INIT (the server's runtime.execd_run_as_init): execd itself becomes
# this process (PID 1 in the sandbox) and runs the command as its entrypoint:
# it reaps every orphan, passes TERM/INT/HUP/USR1/USR2/WINCH to the command
# and exits with its status. Both share this script's stdout and stderr
# (EXECD_LOG_FILE is not applied: the command's output would go there too).
if truthy "${EXECD_INIT:-}"; then
    shell=${BOOTSTRAP_SHELL:-}
    [ -z "$shell" ] && { shell=$(command -v bash 2>/dev/null) || shell="sh"; }
    if [ -n "${BOOTSTRAP_CMD:-}" ]; then
        set -- "$shell" -c "$BOOTSTRAP_CMD"
    elif [ $# -ge 2 ] && [ "$1" = "-c" ]; then
        shift
        set -- "$shell" -c "$*"
    fi
    [ -n "${EXECD_LOG_FILE:-}" ] && log "EXECD_INIT: EXECD_LOG_FILE is not applied (execd and the command share stderr)"
    [ $# -gt 0 ] && set -- -- "$@"
    set -f
    # shellcheck disable=SC2086
    exec $launcher "$EXECD" --init $EXECD_ARGS $insecure_arg "$@"
fi

# start_execd ARGS...: start execd in the background, $execd_pid.
start_execd() {
    [ -n "$insecure_arg" ] && set -- "$@" "$insecure_arg"
    if [ -n "${EXECD_LOG_FILE:-}" ]; then
        $launcher "$EXECD" "$@" 2>>"$EXECD_LOG_FILE" &
    else
        $launcher "$EXECD" "$@" &
    fi
    execd_pid=$!
}
set -f
# shellcheck disable=SC2086
start_execd $EXECD_ARGS
set +f

# ---------------------------------------------------------------------------
# 5. The command.
# ---------------------------------------------------------------------------

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

shell=${BOOTSTRAP_SHELL:-}
if [ -z "$shell" ]; then
    shell=$(command -v bash 2>/dev/null) || shell="sh"
fi
if [ -n "${BOOTSTRAP_CMD:-}" ]; then
    set -- "$shell" -c "$BOOTSTRAP_CMD"
elif [ $# -ge 2 ] && [ "$1" = "-c" ]; then
    shift
    set -- "$shell" -c "$*"
fi

if [ $# -eq 0 ]; then
    # Nothing else to run: execd is the workload.
    wait_for "$execd_pid"
    exit "$status"
fi

$launcher "$@" &
user_pid=$!
# A signal that arrived before the command existed went to execd only.
[ -n "$got_signal" ] && kill -s "$got_signal" "$user_pid" 2>/dev/null

wait_for "$user_pid"
user_status=$status

# The command is gone: stop execd (unless a signal already told it to) and
# give it EXECD_STOP_TIMEOUT seconds to drain.
if kill -0 "$execd_pid" 2>/dev/null; then
    [ -z "$got_signal" ] && kill -s TERM "$execd_pid" 2>/dev/null
    # (Not holding our stdout/stderr: whoever reads them sees EOF at once.)
    (
        sleep "$EXECD_STOP_TIMEOUT"
        kill -s KILL "$execd_pid" 2>/dev/null
    ) </dev/null >/dev/null 2>&1 &
    killer=$!
    wait_for "$execd_pid"
    kill "$killer" 2>/dev/null
fi

exit "$user_status"
