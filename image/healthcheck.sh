#!/bin/bash
# execd-healthcheck: docker HEALTHCHECK for the execd sandbox image.
#
# Sends `GET /ping` to the local execd over bash's /dev/tcp (no curl needed in
# the image) and succeeds on HTTP 200.  The port is taken from EXECD_PORT, else
# from execd's own command line (PID 1 in the image: `--port N` / `--port=N`),
# else 44772.  If a token is configured (EXECD_ACCESS_TOKEN, or the file named
# by --access-token-file / EXECD_ACCESS_TOKEN_FILE) it is sent in
# X-EXECD-ACCESS-TOKEN, so the probe also works with a daemon that protects
# /ping.
set -u

port=${EXECD_PORT:-}
token=${EXECD_ACCESS_TOKEN:-}
token_file=${EXECD_ACCESS_TOKEN_FILE:-}

if [ -r /proc/1/cmdline ]; then
    mapfile -d '' -t argv < /proc/1/cmdline
    for ((i = 0; i < ${#argv[@]}; i++)); do
        a=${argv[i]}
        next=${argv[i + 1]:-}
        case $a in
            --port|-port) [ -z "$port" ] && port=$next ;;
            --port=*|-port=*) [ -z "$port" ] && port=${a#*=} ;;
            --access-token|-access-token) token=$next ;;
            --access-token=*|-access-token=*) token=${a#*=} ;;
            --access-token-file|-access-token-file) token_file=$next ;;
            --access-token-file=*|-access-token-file=*) token_file=${a#*=} ;;
        esac
    done
fi
port=${port:-44772}
if [ -z "$token" ] && [ -n "$token_file" ] && [ -r "$token_file" ]; then
    IFS= read -r token < "$token_file" || true
fi

exec 3<>"/dev/tcp/127.0.0.1/$port" || exit 1
crlf=$'\r\n'
req="GET /ping HTTP/1.1${crlf}Host: 127.0.0.1${crlf}Connection: close${crlf}"
[ -n "$token" ] && req+="X-EXECD-ACCESS-TOKEN: ${token}${crlf}"
printf '%s%s' "$req" "$crlf" >&3
IFS= read -r -t 3 status <&3 || exit 1
exec 3<&-
case $status in
    "HTTP/1."[01]" 200"*) exit 0 ;;
    *) echo "unhealthy: ${status%$'\r'}" >&2; exit 1 ;;
esac
