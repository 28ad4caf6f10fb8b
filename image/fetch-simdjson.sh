#!/bin/sh
# fetch-simdjson.sh OUTDIR
#
# Debian ships simdjson only as a shared library (libsimdjson-dev has no .a),
# so the fully static execd compiles simdjson's amalgamated single source file
# itself.  This script takes that file from Debian's *source package* of
# simdjson (the upstream orig tarball carries singleheader/simdjson.{cpp,h}),
# downloaded and hash-checked by apt from the same mirror the machine already
# uses.  Nothing is committed to the repository.
#
# Output: OUTDIR/simdjson.cpp and OUTDIR/simdjson.h (plus OUTDIR/VERSION).
# Idempotent: when both files exist it does nothing.  The downloaded source
# package is also kept in a cache directory (SIMDJSON_CACHE_DIR, default
# ${XDG_CACHE_HOME:-$HOME/.cache}/execd/simdjson) so a fresh OUTDIR does not
# hit the network again.
#
# Environment:
#   SIMDJSON_VERSION    Debian source version to fetch (default: the version of
#                       the installed libsimdjson-dev, else apt's candidate).
#   SIMDJSON_CACHE_DIR  where downloaded source packages are kept.
set -eu

if [ $# -ne 1 ]; then
    echo "usage: $0 OUTDIR" >&2
    exit 2
fi
out=$1

if [ -s "$out/simdjson.cpp" ] && [ -s "$out/simdjson.h" ]; then
    exit 0
fi

log() { echo "fetch-simdjson: $*" >&2; }

cache=${SIMDJSON_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/execd/simdjson}
mkdir -p "$cache" "$out"

version=${SIMDJSON_VERSION:-}
if [ -z "$version" ]; then
    version=$(dpkg-query -W -f '${source:Version}' libsimdjson-dev 2>/dev/null || true)
fi

# Find an orig tarball already in the cache (for the wanted upstream version
# if we know it).
find_tarball() {
    if [ -n "$version" ]; then
        upstream=${version#*:}
        upstream=${upstream%-*}
        ls "$cache"/simdjson_"$upstream".orig.tar.* 2>/dev/null | head -n 1
    else
        ls "$cache"/simdjson_*.orig.tar.* 2>/dev/null | sort -V | tail -n 1
    fi
}

tarball=$(find_tarball || true)

if [ -z "$tarball" ]; then
    command -v apt-get >/dev/null 2>&1 || { log "apt-get not found"; exit 1; }
    work=$(mktemp -d "${TMPDIR:-/tmp}/fetch-simdjson.XXXXXX")
    trap 'rm -rf "$work"' EXIT INT TERM
    mkdir -p "$work/sources.list.d" "$work/lists/partial" "$work/dl"

    # Turn every configured binary source ("deb") into a source-package
    # source ("deb-src") in a private apt configuration, so the system's apt
    # state is left untouched and no deb-src line is required on the host.
    n=0
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        n=$((n + 1))
        sed -n 's/^[[:space:]]*deb[[:space:]]/deb-src /p' "$f" > "$work/sources.list.d/$n.list"
    done
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        n=$((n + 1))
        sed 's/^Types:.*$/Types: deb-src/' "$f" > "$work/sources.list.d/$n.sources"
    done
    if [ "$n" -eq 0 ]; then
        log "no apt sources configured"
        exit 1
    fi

    user=$(id -un 2>/dev/null || echo root)
    set -- -o Dir::Etc::SourceList=/dev/null \
        -o Dir::Etc::SourceParts="$work/sources.list.d" \
        -o Dir::State::Lists="$work/lists" \
        -o Dir::Cache::pkgcache="" -o Dir::Cache::srcpkgcache="" \
        -o APT::Sandbox::User="$user" -o Debug::NoLocking=true \
        -o Acquire::Retries=3

    log "updating a private deb-src index"
    apt-get "$@" -qq update >&2
    spec=simdjson
    [ -n "$version" ] && spec="simdjson=$version"
    log "downloading Debian source package $spec"
    if ! (cd "$work/dl" && apt-get "$@" -qq source --download-only "$spec" >&2); then
        if [ -n "$version" ]; then
            log "version $version not available, trying apt's candidate"
            version=
            (cd "$work/dl" && apt-get "$@" -qq source --download-only simdjson >&2)
        else
            exit 1
        fi
    fi
    # apt has verified the files against the signed Sources index.
    cp "$work"/dl/simdjson_* "$cache"/
    tarball=$(find_tarball || true)
    if [ -z "$tarball" ]; then
        tarball=$(ls "$cache"/simdjson_*.orig.tar.* 2>/dev/null | sort -V | tail -n 1)
    fi
fi

if [ -z "$tarball" ] || [ ! -f "$tarball" ]; then
    log "no simdjson orig tarball found"
    exit 1
fi

log "extracting singleheader/ from $(basename "$tarball")"
ex=$(mktemp -d "${TMPDIR:-/tmp}/simdjson-x.XXXXXX")
tar -xf "$tarball" -C "$ex" --wildcards '*/singleheader/simdjson.cpp' '*/singleheader/simdjson.h'
cpp=$(find "$ex" -path '*/singleheader/simdjson.cpp' | head -n 1)
hdr=$(find "$ex" -path '*/singleheader/simdjson.h' | head -n 1)
if [ -z "$cpp" ] || [ -z "$hdr" ]; then
    rm -rf "$ex"
    log "tarball has no singleheader/simdjson.{cpp,h}"
    exit 1
fi
# Write atomically so an interrupted run never leaves half a file behind.
cp "$hdr" "$out/simdjson.h.tmp.$$" && mv "$out/simdjson.h.tmp.$$" "$out/simdjson.h"
cp "$cpp" "$out/simdjson.cpp.tmp.$$" && mv "$out/simdjson.cpp.tmp.$$" "$out/simdjson.cpp"
basename "$tarball" | sed 's/^simdjson_//; s/\.orig\.tar\..*$//' > "$out/VERSION"
rm -rf "$ex"
log "wrote $out/simdjson.cpp and $out/simdjson.h ($(cat "$out/VERSION"))"
