#!/usr/bin/env bash
# Builds promtool (Prometheus' rule checker and unit tester) from its Go module into a
# cache outside the clone, keyed by version, and prints its bin directory. Used by
# tests/monitoring.rs through `make test`. A fresh machine downloads and builds it once
# (a few minutes on 2 cores).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

cache_root=${ROLLGATE_CACHE_DIR:-$HOME/.cache/rollgate}
bin_dir="$cache_root/promtool-$PROMETHEUS_MODULE_VERSION/bin"
if [ ! -x "$bin_dir/promtool" ]; then
  mkdir -p "$bin_dir"
  printf '[build-promtool] building promtool %s\n' "$PROMETHEUS_MODULE_VERSION" >&2
  CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false" GOTOOLCHAIN=local GOBIN="$bin_dir.tmp" \
    go install -trimpath -ldflags "-s -w" \
    "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_MODULE_VERSION"
  mv "$bin_dir.tmp/promtool" "$bin_dir/promtool"
  rmdir "$bin_dir.tmp"
fi
echo "$bin_dir"
