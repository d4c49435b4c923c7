#!/usr/bin/env bash
# Builds helm from its Go module (HELM_VERSION in hack/versions.env) into the cache
# outside the clone, once per version, and prints its bin directory. The chart's tests
# (tests/helm.rs) and hack/test.sh put it on PATH. helm's go.mod asks for go 1.26.0.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=go-tool.sh
source "$here/go-tool.sh"
# What `helm version` prints, as helm's own Makefile sets it; the major is in the path.
major=${HELM_VERSION%%.*}
pkg="helm.sh/helm/$major/internal/version"
go_tool helm "$HELM_VERSION" "helm.sh/helm/$major/cmd/helm@$HELM_VERSION" \
  "-X $pkg.version=$HELM_VERSION -X $pkg.gitTreeState=clean"
