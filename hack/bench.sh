#!/usr/bin/env bash
# Benchmarks on a local control plane of their own (target/bench-cluster, its own ports),
# torn down on exit. Results are printed and written to target/bench-results.txt.
#
#   rollout_makespan  AdvancedRollingUpdate of 200 nodes at max-unavailable 10% (issue 3)
#   agent_get_pods    the node agent's GET /pods with 110 pods under load (issue 4)
#   footprint         the controller's memory and CPU at 1,000 nodes x 10 DaemonSets (issue 10)
#   gates             500 gated pods pending at once behind one CLB (emulator) (issue 9)
#
# Environment (all optional): BENCHES (default "rollout_makespan agent_get_pods footprint gates"),
# BENCH_CLUSTER_DIR / BENCH_APISERVER_PORT / BENCH_ETCD_PORT (below), and the
# knobs each bench documents at its top (ROLLGATE_BENCH_*).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
cd "$repo"

BENCHES=${BENCHES:-"rollout_makespan agent_get_pods footprint gates"}
# BENCH_CLUSTER_DIR, BENCH_APISERVER_PORT and BENCH_ETCD_PORT move the bench's control
# plane, so two clones on one machine can bench side by side.
export CLUSTER_DIR=${BENCH_CLUSTER_DIR:-$repo/target/bench-cluster}
export APISERVER_PORT=${BENCH_APISERVER_PORT:-36643} ETCD_PORT=${BENCH_ETCD_PORT:-32579}
export POD_START_DELAY_MS=3000 POD_STOP_DELAY_MS=500
results=$repo/target/bench-results.txt
log() { printf '[bench] %s\n' "$*" >&2; }

log "building release"
cargo build --release --locked -p rollgate -p lb-emulator --bins

teardown() { CLUSTER_DIR=$CLUSTER_DIR bash "$here/cluster-down.sh" || true; }
trap teardown EXIT
NODES=0 bash "$here/cluster-up.sh"
export ROLLGATE_TEST_KUBECONFIG=$CLUSTER_DIR/kubeconfig
export ROLLGATE_BENCH_STOP_DELAY_MS=$POD_STOP_DELAY_MS

{
  echo "# rollgate benchmarks, $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "# machine: $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
} >"$results"
status=0
for bench in $BENCHES; do
  log "running $bench"
  # Only the bench's report goes to the results (stdout); its narrative stays on stderr.
  if ! cargo bench --locked --bench "$bench" | tee -a "$results"; then
    log "$bench FAILED"
    echo "$bench: FAILED (see the output above)" >>"$results"
    status=1
  fi
  echo >>"$results"
done
log "results written to $results"
exit $status
