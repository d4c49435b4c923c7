#!/usr/bin/env bash
# `make test`: lint, unit tests, then the e2e suites against a local control plane of
# its own (target/test-cluster, its own ports), torn down at the end whatever happens.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
cd "$repo"
log() { printf '\n[test] %s\n' "$*" >&2; }

export CLUSTER_DIR=$repo/target/test-cluster
export APISERVER_PORT=${TEST_APISERVER_PORT:-36543}
export ETCD_PORT=${TEST_ETCD_PORT:-32479}
export ROLLGATE_TEST_KUBECONFIG=$CLUSTER_DIR/kubeconfig

log "control plane binaries (cached outside the clone; a cold build takes a while)"
bash hack/build-control-plane.sh >/dev/null &
build_pid=$!

log "lint: cargo fmt --check, cargo clippy -D warnings"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings

log "unit and component tests"
cargo test --workspace --locked --lib --bins
for extra in hack/test-extra.d/*.sh; do
  [ -f "$extra" ] || continue
  log "extra suite: $extra"
  bash "$extra"
done

wait "$build_pid"
trap 'bash hack/cluster-down.sh' EXIT
log "starting the test control plane"
NODES=0 bash hack/cluster-up.sh

log "e2e tests"
RUST_TEST_THREADS=${RUST_TEST_THREADS:-6} cargo test -p rollgate --locked --test '*' -- --nocapture
