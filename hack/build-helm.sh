#!/usr/bin/env bash
# Builds helm from its Go module into a cache outside the clone, keyed by HELM_VERSION
# (hack/versions.env), so it is built once per version and machine, like the control
# plane. The chart's tests (tests/helm.rs) and hack/test.sh put the printed directory on
# PATH.
#
# Prints the bin directory on stdout when done.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

cache_root=${ROLLGATE_CACHE_DIR:-$HOME/.cache/rollgate}
bin_dir="$cache_root/helm-$HELM_VERSION/bin"
mkdir -p "$bin_dir"
log() { printf '[build-helm] %s\n' "$*" >&2; }

if [ ! -x "$bin_dir/helm" ]; then
  start=$(date +%s)
  log "building helm $HELM_VERSION from its Go module"
  export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
  # helm's go.mod has no replace directives, so `go install module@version` builds it
  # with exactly the dependency versions its release pinned. The ldflags set what
  # `helm version` prints, as helm's own Makefile does; the major version is in the path.
  major=${HELM_VERSION%%.*}
  pkg="helm.sh/helm/$major/internal/version"
  GOBIN="$bin_dir/.tmp" go install -trimpath \
    -ldflags "-s -w -X $pkg.version=$HELM_VERSION -X $pkg.gitTreeState=clean" \
    "helm.sh/helm/$major/cmd/helm@$HELM_VERSION"
  mv "$bin_dir/.tmp/helm" "$bin_dir/helm"
  rmdir "$bin_dir/.tmp"
  log "helm $HELM_VERSION built in $(($(date +%s) - start)) s"
fi
echo "$bin_dir"
