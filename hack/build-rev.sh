#!/usr/bin/env bash
# Builds the controller binary (`rollgate`, release) of another commit, for the benches
# that run today's code beside this clone's in one run (gates_fleet). Prints the
# binary's path on stdout; everything else goes to stderr.
#
#   bash hack/build-rev.sh REV      (a commit, branch or tag of this repository)
#
# The source comes from `git archive` (no worktree is registered, nothing in the clone
# changes) into target/rev-src/<commit>, removed after the build. Every commit builds
# in one target dir of its own, target/rev-build, so third-party crates compile once;
# on its first use it is seeded with this clone's release dependencies when they are
# built (they are the same crates, so only the three workspace crates compile). The
# binary is kept as target/rev-bin/rollgate-<commit>: a second call is instant.
#
# BUILD_REV_PROFILE=dev builds a debug binary instead (rollgate-<commit>-dev), and
# BUILD_REV_TARGET_DIR another target dir (e.g. this clone's own target, whose debug
# dependencies are built already; only the uplifted target/<profile>/rollgate of that
# dir is replaced, so rebuild this clone's binary afterwards).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
log() { printf '[build-rev] %s\n' "$*" >&2; }

rev=${1:?usage: hack/build-rev.sh REV}
commit=$(git -C "$repo" rev-parse --verify "$rev^{commit}")
profile=${BUILD_REV_PROFILE:-release}
case $profile in
  release) suffix="" out=release ;;
  dev) suffix="-dev" out=debug ;;
  *) echo "BUILD_REV_PROFILE must be release or dev, not $profile" >&2; exit 2 ;;
esac
bin=$repo/target/rev-bin/rollgate-$commit$suffix
if [ -x "$bin" ]; then
  log "$rev ($commit): cached, $bin"
  echo "$bin"
  exit 0
fi

src=$repo/target/rev-src/$commit
build=${BUILD_REV_TARGET_DIR:-$repo/target/rev-build}
rm -rf "$src"
mkdir -p "$src" "$build"
git -C "$repo" archive "$commit" | tar -x -C "$src"
if [ ! -d "$build/$out/deps" ] && [ -d "$repo/target/$out/deps" ]; then
  log "seeding $build with this clone's $out dependencies ($(du -sh "$repo/target/$out/deps" | cut -f1))"
  mkdir -p "$build/$out"
  for dir in deps build .fingerprint; do
    if [ -d "$repo/target/$out/$dir" ]; then cp -a "$repo/target/$out/$dir" "$build/$out/"; fi
  done
fi
log "building rollgate at $rev ($commit), profile $profile, in $build"
CARGO_TARGET_DIR=$build cargo build --profile "$profile" --locked --manifest-path "$src/Cargo.toml" \
  -p rollgate --bin rollgate >&2
mkdir -p "$(dirname "$bin")"
cp "$build/$out/rollgate" "$bin.tmp"
mv "$bin.tmp" "$bin"
rm -rf "$src"
log "$rev ($commit): $bin"
echo "$bin"
