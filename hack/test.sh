#!/usr/bin/env bash
# `make test`: lint, unit tests, then the e2e suites against a local control plane of
# its own (target/test-cluster, its own ports), torn down at the end whatever happens.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
cd "$repo"
# Each step is stamped with the minutes and seconds since make test began, so a slow run
# shows which phase took the time.
log() { printf '\n[test %d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*" >&2; }

export CLUSTER_DIR=$repo/target/test-cluster
export APISERVER_PORT=${TEST_APISERVER_PORT:-36543}
export ETCD_PORT=${TEST_ETCD_PORT:-32479}
export ROLLGATE_TEST_KUBECONFIG=$CLUSTER_DIR/kubeconfig

# On a fresh machine every tool below is built from source on 2 cores. The control plane
# and the test binaries are the path to the first e2e test, so they run at normal CPU
# priority; the tools only some e2e files need (helm, promtool) and the image's static
# build run niced, take what CPU is left, and are waited for only where they are needed.
log "control plane binaries (cached outside the clone; a cold build takes a while)"
bash hack/build-control-plane.sh >/dev/null &
build_pid=$!

mkdir -p "$repo/target"
log "promtool (the alert rules' tests; cached outside the clone), in the background, niced"
promtool_log=$repo/target/build-promtool.log
nice -n 10 bash hack/build-promtool.sh >"$promtool_log" 2>&1 &
promtool_pid=$!

log "helm, for the chart (cached outside the clone, keyed by HELM_VERSION), in the background, niced"
nice -n 10 bash hack/build-helm.sh >/dev/null &
helm_pid=$!

log "static musl release build of the image's binary, in the background, niced (cache outside the clone)"
musl_log=$repo/target/musl-check.log
nice -n 19 bash hack/musl-check.sh >"$musl_log" 2>&1 &
musl_pid=$!

log "lint: cargo fmt --check, cargo clippy -D warnings"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings

log "lint: no import cycle in any crate (hack/import-graph.py)"
python3 hack/import-graph.py --with-tests src crates/alibaba-lb/src crates/lb-emulator/src

log "lint: hadolint of the Dockerfile (venv cached outside the clone)"
bash hack/hadolint.sh

log "unit tests (planners, checks, CLI) and the cloud client against its emulator"
cargo test -p rollgate --locked --lib --bins
cargo test -p alibaba-lb -p lb-emulator --locked

log "the official Alibaba Cloud Python SDKs against the emulator (venv cached outside the clone)"
bash crates/lb-emulator/sdk-check/run.sh

wait "$build_pid"
# kubectl of the pinned version comes with the control plane.
PATH="$(bash hack/build-control-plane.sh):$PATH"
export PATH

trap 'bash hack/cluster-down.sh' EXIT
log "starting the test control plane"
NODES=0 bash hack/cluster-up.sh

# The e2e files that need helm or promtool run last, after those builds are waited for;
# every other file runs as soon as the control plane is up. Their tests that need the
# cluster are `#[ignore = "needs a cluster: make test"]` (plain `cargo test` runs on any
# machine): `--include-ignored` runs those and the rest, every test in the file.
late_e2e=(helm monitoring)
early_e2e=()
for file in tests/*.rs; do
  name=$(basename "$file" .rs)
  [[ " ${late_e2e[*]} " == *" $name "* ]] || early_e2e+=("$name")
done
export RUST_TEST_THREADS=${RUST_TEST_THREADS:-6}

# The bed's API server calls a webhook configured by Service at the Service's ClusterIP
# (SERVICE_CIDR, 10.96.0.0/16): off loopback, where no test may send anything. So no
# webhook configuration left in the bed may name a Service; tests that install one
# (deploy/, the chart) dry-run it or remove it before they end.
webhooks_stay_on_loopback() {
  local named
  named=$(KUBECONFIG=$ROLLGATE_TEST_KUBECONFIG kubectl get \
    mutatingwebhookconfigurations,validatingwebhookconfigurations -o json |
    python3 -c '
import json, sys
for o in json.load(sys.stdin)["items"]:
    for w in o.get("webhooks") or []:
        service = w.get("clientConfig", {}).get("service")
        if service:
            print("%s %s: webhook %s -> Service %s/%s" % (o["kind"], o["metadata"]["name"],
                  w["name"], service["namespace"], service["name"]))
')
  if [ -n "$named" ]; then
    printf '[test] after the %s e2e tests, a webhook configuration names a Service, which the API server reaches off loopback:\n%s\n' "$1" "$named" >&2
    exit 1
  fi
}

e2e() {
  local args=()
  for name in "$@"; do args+=(--test "$name"); done
  cargo test -p rollgate --locked "${args[@]}" -- --include-ignored --nocapture
}

# One file at a time: two at once failed on 2026-12-07 (daemonset_two_updaters'
# yurt-manager acts on every namespace's DaemonSets, and load timed out gates_drain's
# rollouts).
log "e2e tests (all but ${late_e2e[*]})"
# The readiness-gate tests run the lb-emulator binary beside rollgate's.
cargo build -p lb-emulator --locked --bin lb-emulator
e2e "${early_e2e[@]}"
webhooks_stay_on_loopback early

log "waiting for helm and promtool (built in the background)"
if ! wait "$promtool_pid"; then
  cat "$promtool_log" >&2
  echo "[test] hack/build-promtool.sh failed (log above)" >&2
  exit 1
fi
wait "$helm_pid"
# tests/helm.rs would only skip without helm: here it is never missing.
PATH="$(bash hack/build-helm.sh):$PATH"
export PATH

log "lint: helm lint --strict of charts/rollgate"
helm lint --strict charts/rollgate

log "e2e tests (${late_e2e[*]})"
e2e "${late_e2e[@]}"
webhooks_stay_on_loopback late

# The benchmark harness, reduced (50 nodes, 1 s pod start; debug build, so its figures
# say nothing about the product): it fails only when a measurement cannot be made, so the
# harness cannot rot. Includes yurt-manager's side when its binary is there (YURT_MANAGER).
log "benchmark harness, quick run (BENCH_QUICK=1; results in target/bench-quick)"
BENCH_QUICK=1 ROLLGATE_BENCH_OUT=$repo/target/bench-quick cargo test -p rollgate --locked --bench rollout
ROLLGATE_BENCH_OUT=$repo/target/bench-quick cargo test -p rollgate --locked --bench report
# The readiness gates at fleet scale, reduced (20 Services x 2 pods, the new code only,
# emulator rate limits on): it fails when a throttling error reaches a gate, a gate is not
# True at the end, or a flip or a pending Service's wait for a look stalls (over 30 s);
# its latencies are otherwise printed, not compared with the goals (`make bench`).
log "readiness-gate fleet bench, quick run (ROLLGATE_BENCH_GATES_FLEET_QUICK=1)"
ROLLGATE_BENCH_GATES_FLEET_QUICK=1 ROLLGATE_BENCH_OUT=$repo/target/bench-quick \
  cargo test -p rollgate --locked --bench gates_fleet

log "waiting for the static musl build (hack/musl-check.sh)"
if ! wait "$musl_pid"; then
  cat "$musl_log" >&2
  echo "[test] hack/musl-check.sh failed (log above)" >&2
  exit 1
fi
cat "$musl_log" >&2
