#!/usr/bin/env bash
# Benchmarks on a local control plane of their own (target/bench-cluster, its own ports),
# torn down on exit. Each bench merges its figures into target/bench/results.json; then
# `report` prints the Markdown table of every section (also target/bench/results.md) and
# draws the plots (target/bench/*.png). What the benches print goes to
# target/bench/results.txt.
#
#   rollout         DaemonSet rollouts at 200 and 1,000 nodes beside native RollingUpdate,
#                   and beside OpenYurt's yurt-manager when its binary is there (issues 12, 13);
#                   then with and without rollgate.io/pull-ahead on 200 nodes whose image
#                   pulls take 20 s (the bed's pull model on a kwok of the bench's own, issue 26)
#   agent_get_pods  the node agent's GET /pods with 110 pods under load
#   footprint       the controller's memory and CPU at 1,000 nodes x 10 DaemonSets
#   gates           the readiness-gate controller: 500 pending pods, and the capacity proof of tests/gates_walk_through.rs
#   daemonset_fleet the DaemonSet controller's code at 10,000 nodes x 20 DaemonSets, simulated
#                   (no control plane; today's path beside it in the same run; BENCH_QUICK: 1,000 nodes)
#   gates_fleet     the readiness-gate controller at 1,000 LoadBalancer Services (700 CLB, 300 NLB)
#                   x 10 gated pods, emulator rate limits on: one rollout, 100 at once; today's code
#                   (built from ROLLGATE_BENCH_BASELINE_REV by hack/build-rev.sh) beside the new one
#
# Environment (all optional):
#   BENCHES            which benches (default: all of the above that exist; BENCH_QUICK: rollout)
#   BENCH_QUICK=1      a reduced run (50 nodes, 1 s pod start) in a few minutes
#   YURT_MANAGER       OpenYurt's yurt-manager (default ../shared/baselines/openyurt-v1.7.0/yurt-manager)
#   BENCH_CLUSTER_DIR, BENCH_APISERVER_PORT, BENCH_ETCD_PORT   the bench's control plane
#                      (target/bench-cluster, 36643, 32579), so two clones can bench side by side
#   POD_START_DELAY_MS, POD_STOP_DELAY_MS, NODE_GRACE_SECONDS   the simulated nodes (3000, 500, 20)
#   POD_REREPORT_DELAY_MS  how long a returning node's kubelet takes to report its pods again (3000)
#   ROLLGATE_BENCH_OUT the results folder (target/bench)
#   ROLLGATE_BENCH_BASELINE_REV  gates_fleet's "today" (default: the merge base of HEAD and main;
#                      none when that is HEAD itself, or with `none`: the new code alone),
#                      or ROLLGATE_BENCH_BASELINE_BIN, a binary built already
#   ROLLGATE_BENCH_NEW_REV       gates_fleet's "new", built the same way (default: this clone's
#                      build), or ROLLGATE_BENCH_NEW_BIN
#   and the knobs each bench documents at its top (ROLLGATE_BENCH_*).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
cd "$repo"

default_benches="rollout agent_get_pods footprint daemonset_fleet"
[ -f benches/gates.rs ] && default_benches="$default_benches gates"
[ -f benches/gates_fleet.rs ] && default_benches="$default_benches gates_fleet"
[ "${BENCH_QUICK:-}" = 1 ] && default_benches="rollout daemonset_fleet"
BENCHES=${BENCHES:-$default_benches}
export CLUSTER_DIR=${BENCH_CLUSTER_DIR:-$repo/target/bench-cluster}
export APISERVER_PORT=${BENCH_APISERVER_PORT:-36643} ETCD_PORT=${BENCH_ETCD_PORT:-32579}
export POD_START_DELAY_MS=${POD_START_DELAY_MS:-3000} POD_STOP_DELAY_MS=${POD_STOP_DELAY_MS:-500}
# 20 s: shorter grace periods make nodes flap NotReady when the machine is loaded
# (kwok renews the Leases late), which stalls every rollout on them.
export NODE_GRACE_SECONDS=${NODE_GRACE_SECONDS:-20}
# A real kubelet takes seconds to report its pods again after a reconnect; the bed's
# default (0) re-readies them at once, which would flatter a controller that waits for
# that report in the comeback rows.
export POD_REREPORT_DELAY_MS=${POD_REREPORT_DELAY_MS:-3000}
export ROLLGATE_BENCH_OUT=${ROLLGATE_BENCH_OUT:-$repo/target/bench}
mkdir -p "$ROLLGATE_BENCH_OUT"
results=$ROLLGATE_BENCH_OUT/results.txt
log() { printf '[bench] %s\n' "$*" >&2; }

PATH="$(bash "$here/build-control-plane.sh"):$PATH"
export PATH
log "building release"
cargo build --release --locked -p rollgate -p lb-emulator --bins

if [[ " $BENCHES " == *" gates_fleet "* ]]; then
  # Today's code beside the new in the same run (the gain is a ratio): a release build
  # of a fixed commit, cached by commit (hack/build-rev.sh).
  if [ -z "${ROLLGATE_BENCH_BASELINE_BIN:-}" ]; then
    baseline_rev=${ROLLGATE_BENCH_BASELINE_REV:-$(git merge-base HEAD main 2>/dev/null || echo none)}
    if [ "$baseline_rev" = none ] || [ "$(git rev-parse "$baseline_rev")" = "$(git rev-parse HEAD)" ]; then
      # HEAD against itself measures nothing: name today's code to compare with.
      log "gates_fleet: the new code alone (no baseline; set ROLLGATE_BENCH_BASELINE_REV to compare)"
      unset ROLLGATE_BENCH_BASELINE_REV
    else
      log "gates_fleet: today's code, $baseline_rev"
      ROLLGATE_BENCH_BASELINE_BIN=$(bash "$here/build-rev.sh" "$baseline_rev")
      ROLLGATE_BENCH_BASELINE_REV=$(git rev-parse --short "$baseline_rev")
      export ROLLGATE_BENCH_BASELINE_BIN ROLLGATE_BENCH_BASELINE_REV
    fi
  fi
  if [ -z "${ROLLGATE_BENCH_NEW_BIN:-}" ] && [ -n "${ROLLGATE_BENCH_NEW_REV:-}" ]; then
    log "gates_fleet: the new code, $ROLLGATE_BENCH_NEW_REV"
    ROLLGATE_BENCH_NEW_BIN=$(bash "$here/build-rev.sh" "$ROLLGATE_BENCH_NEW_REV")
    ROLLGATE_BENCH_NEW_REV=$(git rev-parse --short "$ROLLGATE_BENCH_NEW_REV")
    export ROLLGATE_BENCH_NEW_BIN ROLLGATE_BENCH_NEW_REV
  fi
fi

teardown() { CLUSTER_DIR=$CLUSTER_DIR bash "$here/cluster-down.sh" || true; }
trap teardown EXIT
export ROLLGATE_TEST_KUBECONFIG=$CLUSTER_DIR/kubeconfig
export ROLLGATE_BENCH_STOP_DELAY_MS=$POD_STOP_DELAY_MS

{
  echo "# rollgate benchmarks, $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "# machine: $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
} >"$results"
# Every bench runs on a new control plane (a new etcd; the same certificates and ports):
# what one bench, or an interrupted run, leaves behind slows the next. On 2026-12-07,
# after the rollout bench's 1,000-node rounds (kube-apiserver at 1.6 GB, 18,000 Events,
# namespaces still in deletion), the footprint bench's 10,000 Running pods never counted
# Ready in kube-controller-manager's DaemonSet status; and a bed started on that etcd
# ran none of the agent bench's pods. A used bed's logs are kept in logs-<bench>.
previous_bench=earlier
fresh_bed() {
  teardown
  rm -rf "$CLUSTER_DIR/etcd" "$CLUSTER_DIR/logs-$previous_bench"
  [ ! -d "$CLUSTER_DIR/logs" ] || mv "$CLUSTER_DIR/logs" "$CLUSTER_DIR/logs-$previous_bench"
  NODES=0 bash "$here/cluster-up.sh"
}
status=0
bench_started=$SECONDS
timings=()
for bench in $BENCHES; do
  fresh_bed
  previous_bench=$bench
  log "running $bench (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  started=$SECONDS
  # Only the bench's report goes to the results (stdout); its narrative stays on stderr.
  if ! cargo bench --locked --bench "$bench" | tee -a "$results"; then
    log "$bench FAILED"
    echo "$bench: FAILED (see the output above)" >>"$results"
    status=1
  fi
  if [ "$bench" = gates ]; then
    # The capacity proof (6 replicas, maxUnavailable 1, maxSurge 1, with and without
    # gates) is the e2e test's scenario; run here, it records gates.min_healthy_*.
    log "gates: the capacity proof (tests/gates_walk_through.rs), recorded"
    # Its whole output goes to a log of its own; the results keep its figures, and a
    # failure shows the log's end, where the reason is.
    proof_log=$ROLLGATE_BENCH_OUT/capacity-proof.log
    if ROLLGATE_BENCH_RECORD=1 cargo test --release --locked -p rollgate --test gates_walk_through \
      gates_keep_capacity -- --include-ignored --nocapture >"$proof_log" 2>&1; then
      grep 'capacity proof' "$proof_log" | tee -a "$results" || true
    else
      log "gates capacity proof FAILED; the end of $proof_log:"
      tail -n 40 "$proof_log" >&2
      echo "gates capacity proof: FAILED (see $proof_log)" >>"$results"
      status=1
    fi
  fi
  timings+=("$bench $((SECONDS - started)) s")
  echo >>"$results"
done
{
  echo "# time per bench (with its cluster set-up; the release build before them is not counted):"
  for timing in "${timings[@]}"; do echo "#   $timing"; done
  echo "#   all benches $((SECONDS - bench_started)) s"
  echo
} | tee -a "$results" >&2
log "the table and the plots"
cargo bench --locked --bench report | tee -a "$results" || status=1
log "results in $ROLLGATE_BENCH_OUT (results.json, results.md, results.txt, *.png)"
exit $status
