#!/usr/bin/env bash
# Sourced by the build-<tool>.sh scripts: `go_tool NAME VERSION PACKAGE@VERSION [LDFLAGS] [TAGS]`
# installs one Go command from its module into a cache outside the clone, keyed by
# version (`$ROLLGATE_CACHE_DIR`, default ~/.cache/rollgate/NAME-VERSION/bin), once per
# version and machine, and prints that bin directory. Only for modules whose go.mod has
# no replace directive (`go install module@version` then builds exactly the versions the
# release pinned).
go_tool() {
  local name=$1 version=$2 package=$3 ldflags=${4:-} tags=${5:-}
  local bin_dir="${ROLLGATE_CACHE_DIR:-$HOME/.cache/rollgate}/$name-$version/bin"
  mkdir -p "$bin_dir"
  if [ ! -x "$bin_dir/$name" ]; then
    local start
    start=$(date +%s)
    printf '[build-%s] building %s %s from its Go module\n' "$name" "$name" "$version" >&2
    CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-mod=mod -buildvcs=false" GOBIN="$bin_dir/.tmp" \
      go install -trimpath -tags "$tags" -ldflags "-s -w $ldflags" "$package"
    mv "$bin_dir/.tmp/$name" "$bin_dir/$name"
    rmdir "$bin_dir/.tmp"
    printf '[build-%s] built in %s s\n' "$name" "$(($(date +%s) - start))" >&2
  fi
  echo "$bin_dir"
}
