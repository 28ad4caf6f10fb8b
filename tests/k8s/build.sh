#!/bin/bash
# Builds everything the single-node cluster of `make test-k8s` runs, from the
# Go module proxy, into $EXECD_K8S_CACHE/bin (default ~/.cache/execd/k8s/bin):
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl
#     (k8s.io/kubernetes $K8S_VERSION: the module is copied out of the module
#     cache, its go.work removed and each replace of a staging module turned
#     into a require of the published v0.x version; CGO_ENABLED=0)
#   etcd (go.etcd.io/etcd/server/v3 $ETCD_VERSION, the same way)
#   agent-sandbox-controller (sigs.k8s.io/agent-sandbox $AGENT_SANDBOX_VERSION, go install)
#   pause (the kubernetes module's build/pause/linux/pause.c, static)
# A binary already built for the same version is kept. Go's build cache
# (GOCACHE) and module cache are the usual ones, so a second build after
# `make clean` takes seconds to minutes, not the ~20 minutes of a cold one.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.34.7}  # the proxy serves it though its version list stops at v1.34.4
ETCD_VERSION=${ETCD_VERSION:-v3.7.3}
AGENT_SANDBOX_VERSION=${AGENT_SANDBOX_VERSION:-v1.0.3}  # served; the version list names only v1.0.1
cache=${EXECD_K8S_CACHE:-$HOME/.cache/execd/k8s}
bin=$cache/bin
mkdir -p "$bin" "$cache/src"
export GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0
jobs=${JOBS:-2}

stamp_ok() { [ -x "$bin/$1" ] && [ "$(cat "$bin/.$1.version" 2>/dev/null)" = "$2" ]; }
stamp() { echo "$2" > "$bin/.$1.version"; }

# copy_module MODULE VERSION -> a writable copy whose staging replaces are requires
copy_module() {
  local mod=$1 ver=$2 dir dst
  dir=$(cd /tmp && go mod download -json "$mod@$ver" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -d "$dir" ] || { echo "k8s build: go mod download $mod@$ver gave no directory" >&2; return 1; }
  dst="$cache/src/$(echo "$mod" | tr / _)@$ver"
  if [ ! -f "$dst/.prepared" ]; then
    rm -rf "$dst"
    cp -r "$dir" "$dst"
    chmod -R u+w "$dst"
    rm -f "$dst/go.work" "$dst/go.work.sum"
    echo "$dst"
    return 0
  fi
  echo "$dst"
}

build_kubernetes() {
  local want=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl) todo=() b src staging
  for b in "${want[@]}"; do stamp_ok "$b" "$K8S_VERSION" || todo+=("$b"); done
  [ ${#todo[@]} -eq 0 ] && return 0
  src=$(copy_module k8s.io/kubernetes "$K8S_VERSION")
  staging="v0.${K8S_VERSION#v1.}"
  if [ ! -f "$src/.prepared" ]; then
    (cd "$src"
     for m in $(go mod edit -json | python3 -c 'import json,sys; print("\n".join(r["Old"]["Path"] for r in json.load(sys.stdin).get("Replace") or []))'); do
       case "$m" in
         # The proxy refuses these two at the staging version; nothing the
         # binaries import needs them, so their replace just goes.
         k8s.io/sample-cli-plugin|k8s.io/sample-controller) go mod edit -dropreplace="$m" -droprequire="$m" ;;
         *) go mod edit -dropreplace="$m" -require="$m@$staging" ;;
       esac
     done
     go mod download >/dev/null 2>&1 || true
     touch .prepared)
  fi
  local ld="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1"
  ld="$ld -X k8s.io/component-base/version.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2)"
  ld="$ld -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
  for b in "${todo[@]}"; do
    echo "k8s build: $b $K8S_VERSION"
    (cd "$src" && go build -p "$jobs" -trimpath -ldflags "$ld" -o "$bin/$b" "./cmd/$b")
    stamp "$b" "$K8S_VERSION"
  done
  if ! stamp_ok pause "$K8S_VERSION"; then
    cc -static -Os -DVERSION="$K8S_VERSION" -o "$bin/pause" "$src/build/pause/linux/pause.c"
    stamp pause "$K8S_VERSION"
  fi
}

build_etcd() {
  stamp_ok etcd "$ETCD_VERSION" && return 0
  local src
  src=$(copy_module go.etcd.io/etcd/server/v3 "$ETCD_VERSION")
  if [ ! -f "$src/.prepared" ]; then
    (cd "$src"
     for r in $(go mod edit -json | python3 -c 'import json,sys; print("\n".join(r["Old"]["Path"] for r in json.load(sys.stdin).get("Replace") or []))'); do
       go mod edit -dropreplace="$r" -require="$r@$ETCD_VERSION"
     done
     touch .prepared)
  fi
  echo "k8s build: etcd $ETCD_VERSION"
  (cd "$src" && go build -p "$jobs" -trimpath -ldflags "-s -w" -o "$bin/etcd" .)
  stamp etcd "$ETCD_VERSION"
}

build_agent_sandbox() {
  stamp_ok agent-sandbox-controller "$AGENT_SANDBOX_VERSION" && return 0
  echo "k8s build: agent-sandbox-controller $AGENT_SANDBOX_VERSION"
  (cd /tmp && GOFLAGS=-buildvcs=false GOBIN="$bin" go install -ldflags "-s -w" \
     "sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller@$AGENT_SANDBOX_VERSION")
  stamp agent-sandbox-controller "$AGENT_SANDBOX_VERSION"
  # Its CRDs, for kubectl apply.
  local dir
  dir=$(cd /tmp && go mod download -json "sigs.k8s.io/agent-sandbox@$AGENT_SANDBOX_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  rm -rf "$cache/agent-sandbox-crds" && mkdir -p "$cache/agent-sandbox-crds"
  cp "$dir"/k8s/crds/*.yaml "$cache/agent-sandbox-crds/"
}

t0=$(date +%s)
build_kubernetes
build_etcd
build_agent_sandbox
echo "k8s build: done in $(( $(date +%s) - t0 )) s; $(du -sh "$bin" | cut -f1) of binaries in $bin"
