#!/usr/bin/env bash
# Builds promtool (Prometheus' rule checker and unit tester) from its Go module
# (PROMETHEUS_MODULE_VERSION in hack/versions.env) into the cache outside the clone, once
# per version, and prints its bin directory. Used by tests/monitoring.rs; `make test`
# starts the build early, in the background.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=go-tool.sh
source "$here/go-tool.sh"
# `remove_all_sd`: Prometheus' own build tag that leaves out every service-discovery
# plugin (the cloud SDKs, client-go): `promtool test rules` needs none of them, and they
# are most of a cold build.
go_tool promtool "$PROMETHEUS_MODULE_VERSION" \
  "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_MODULE_VERSION" "" remove_all_sd
