#!/usr/bin/env bash
# Stops the local control plane started by cluster-up.sh, by pid files only.
# PURGE=1 also removes the cluster folder (certificates, etcd data, logs).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
CLUSTER_DIR=${CLUSTER_DIR:-$(cd "$here/.." && pwd)/target/cluster}
log() { printf '[cluster-down] %s\n' "$*" >&2; }
[ -d "$CLUSTER_DIR/pids" ] || { log "nothing to stop in $CLUSTER_DIR"; exit 0; }

stop() { # name
  local f="$CLUSTER_DIR/pids/$1.pid"
  [ -f "$f" ] || return 0
  local pid
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    log "stopping $1 (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && { log "$1 ignored SIGTERM, killing"; kill -KILL "$pid" 2>/dev/null || true; }
  fi
  rm -f "$f"
}
# Anything the demo or tests started and registered here goes first, then the bed in
# reverse start order.
for f in "$CLUSTER_DIR"/pids/*.pid; do
  name=$(basename "$f" .pid)
  case $name in etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kwok) ;; *) stop "$name" ;; esac
done
for name in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do stop "$name"; done
if [ "${PURGE:-0}" = 1 ]; then rm -rf "$CLUSTER_DIR"; log "removed $CLUSTER_DIR"; fi
