#!/usr/bin/env bash
# Builds the local control plane from Go modules into a cache outside the clone, keyed
# by version, so later runs (and CI on the same machine) reuse it. A fresh machine
# rebuilds from scratch: expect tens of minutes on 2 cores.
#
# Prints the bin directory on stdout when done.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

cache_root=${ROLLGATE_CACHE_DIR:-$HOME/.cache/rollgate}
bin_dir="$cache_root/control-plane-k8s-$KUBERNETES_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION/bin"
build_root="$cache_root/build"
mkdir -p "$bin_dir" "$build_root"
export CGO_ENABLED=0
export GOFLAGS="-mod=mod -buildvcs=false"
export GOTOOLCHAIN=local

log() { printf '[build-control-plane] %s\n' "$*" >&2; }

# Writes a wrapper go.mod that requires MODULE@VERSION and replaces every module that
# MODULE's own go.mod maps to a local path (Go ignores replaces inside dependencies).
wrapper_module() {
  local dir=$1 module=$2 version=$3 replaced_version=$4
  mkdir -p "$dir"
  (cd "$dir" && go mod download -json "$module@$version" >/dev/null)
  local modfile
  modfile="$(go env GOMODCACHE)/cache/download/$module/@v/$version.mod"
  {
    echo "module rollgate.local/build/$(basename "$dir")"
    echo
    echo "go $(awk '/^go /{print $2; exit}' "$modfile")"
    grep -E '^godebug ' "$modfile" || true
    echo
    echo "require $module $version"
    echo
    echo "replace ("
    # Lines like: k8s.io/api => ./staging/src/k8s.io/api  or  go.etcd.io/etcd/api/v3 => ../api
    grep -E '^\s*[^ /]+\.[^ ]+ => \.\.?/' "$modfile" |
      awk -v v="$replaced_version" '$3 !~ /FORBIDDEN/ {print "\t" $1 " => " $1 " " v}'
    echo ")"
  } >"$dir/go.mod"
  printf 'package main\n' >"$dir/doc.go"
}

build_kubernetes() {
  local want=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
  local missing=0
  for b in "${want[@]}"; do [ -x "$bin_dir/$b" ] || missing=1; done
  [ $missing = 0 ] && return 0
  local dir="$build_root/kubernetes-$KUBERNETES_VERSION"
  log "building Kubernetes $KUBERNETES_VERSION (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl)"
  wrapper_module "$dir" k8s.io/kubernetes "$KUBERNETES_VERSION" "$KUBERNETES_STAGING_VERSION"
  local pkg=k8s.io/component-base/version
  local cpkg=k8s.io/client-go/pkg/version
  local date
  date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  local ldflags="-s -w"
  for p in $pkg $cpkg; do
    ldflags+=" -X $p.gitVersion=$KUBERNETES_VERSION -X $p.gitCommit=module -X $p.gitTreeState=clean -X $p.buildDate=$date"
    ldflags+=" -X $p.gitMajor=1 -X $p.gitMinor=$(echo "$KUBERNETES_VERSION" | cut -d. -f2)"
  done
  (
    cd "$dir"
    # go.sum is filled by -mod=mod; `go mod download` first makes failures clearer.
    go mod download
    # One `go build` for all four: their shared packages compile once with both cores
    # busy, and the (single-threaded) links overlap instead of running one by one.
    local out="$bin_dir/.kubernetes.tmp" pkgs=()
    for b in "${want[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
    rm -rf "$out" && mkdir -p "$out"
    log "  go build ${want[*]}"
    go build -tags selinux,notest -trimpath -ldflags "$ldflags" -o "$out/" "${pkgs[@]}"
    for b in "${want[@]}"; do mv "$out/$b" "$bin_dir/$b"; done
    rmdir "$out"
  )
}

build_etcd() {
  [ -x "$bin_dir/etcd" ] && return 0
  local dir="$build_root/etcd-$ETCD_VERSION"
  log "building etcd $ETCD_VERSION"
  wrapper_module "$dir" go.etcd.io/etcd/server/v3 "$ETCD_VERSION" "$ETCD_VERSION"
  (
    cd "$dir"
    go mod download
    go build -trimpath -ldflags "-s -w" -o "$bin_dir/etcd.tmp" go.etcd.io/etcd/server/v3
    mv "$bin_dir/etcd.tmp" "$bin_dir/etcd"
  )
}

build_kwok() {
  [ -x "$bin_dir/kwok" ] && return 0
  log "building kwok $KWOK_VERSION"
  GOBIN="$build_root/kwok-$KWOK_VERSION" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  mv "$build_root/kwok-$KWOK_VERSION/kwok" "$bin_dir/kwok"
}

start=$(date +%s)
# In parallel: each is mostly compiling on both cores, but each ends in a link on one.
build_etcd &
etcd_pid=$!
build_kwok &
kwok_pid=$!
build_kubernetes
wait "$etcd_pid"
wait "$kwok_pid"
log "control plane ready in $bin_dir ($(($(date +%s) - start)) s)"
echo "$bin_dir"
