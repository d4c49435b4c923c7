#!/usr/bin/env bash
# Starts a real local control plane on loopback: etcd, kube-apiserver (RBAC on),
# kube-controller-manager, kube-scheduler, and kwok simulating the kubelets of
# NODES nodes. Idempotent: running it again keeps what is running and only adds
# missing nodes. Admin kubeconfig: target/cluster/kubeconfig. The API server writes an
# audit log of pod deletions (and rollgate's pod status writes) to logs/audit.log.
#
# Environment (all optional):
#   NODES               simulated nodes to have (default 3)
#   POD_START_DELAY_MS  time from a pod's creation to its containers being ready (default 2000)
#   POD_STOP_DELAY_MS   time a deleted pod takes to go away (default 500)
#   POD_REREPORT_DELAY_MS  time the simulated kubelet of a node coming back takes to
#                       report its pods Ready again, after the node-lifecycle controller
#                       marked them NotReady during the cut (default 0: at once; a real
#                       kubelet takes seconds). Per pod: annotation
#                       pod-rereport.stage.kwok.x-k8s.io/delay (e.g. "5s").
#   NODE_GRACE_SECONDS  heartbeat loss before a node is NotReady (default 15)
#   BED_IMAGE_PULL_DELAY  the image pull model (default off): a Go duration such as "20s".
#                       A pod whose images are not all on its node starts that much later,
#                       a pull Job takes that long, and a started pod puts its images in
#                       its node's status.images (hack/bed-image-puller.py, which keeps the
#                       images; its pid in pids/bed-image-puller.pid). Off, nothing changes.
#   CLUSTER_DIR         state folder (default target/cluster)
#   APISERVER_PORT, ETCD_PORT  (default 36443, 32379)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

NODES=${NODES:-3}
POD_START_DELAY_MS=${POD_START_DELAY_MS:-2000}
POD_STOP_DELAY_MS=${POD_STOP_DELAY_MS:-500}
POD_REREPORT_DELAY_MS=${POD_REREPORT_DELAY_MS:-0}
BED_IMAGE_PULL_DELAY=${BED_IMAGE_PULL_DELAY:-}
NODE_GRACE_SECONDS=${NODE_GRACE_SECONDS:-15}
CLUSTER_DIR=${CLUSTER_DIR:-$repo/target/cluster}
APISERVER_PORT=${APISERVER_PORT:-36443}
ETCD_PORT=${ETCD_PORT:-32379}
ETCD_PEER_PORT=$((ETCD_PORT + 1))
SERVICE_CIDR=10.96.0.0/16
# Node podCIDRs (/24 each) come from here: 4096 nodes, disjoint from the service range.
CLUSTER_CIDR=10.64.0.0/12

log() { printf '[cluster-up] %s\n' "$*" >&2; }
started=$(date +%s)

bin_dir=$(bash "$here/build-control-plane.sh")
export PATH="$bin_dir:$PATH"
mkdir -p "$CLUSTER_DIR"/{pki,pids,logs,etcd}
cd "$CLUSTER_DIR"

# ---------- certificates (made once per cluster folder) ----------
pki=$CLUSTER_DIR/pki
make_client_cert() { # name CN O
  local name=$1 cn=$2 org=$3
  [ -f "$pki/$name.crt" ] && return 0
  openssl req -new -newkey rsa:2048 -nodes -keyout "$pki/$name.key" -out "$pki/$name.csr" \
    -subj "/O=$org/CN=$cn" 2>/dev/null
  openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 365 -out "$pki/$name.crt" -extfile <(printf 'extendedKeyUsage=clientAuth') 2>/dev/null
}
if [ ! -f "$pki/ca.crt" ]; then
  log "creating certificates"
  openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$pki/ca.key" -out "$pki/ca.crt" \
    -days 365 -subj "/CN=rollgate-test-ca" 2>/dev/null
  openssl req -new -newkey rsa:2048 -nodes -keyout "$pki/apiserver.key" -out "$pki/apiserver.csr" \
    -subj "/CN=kube-apiserver" 2>/dev/null
  openssl x509 -req -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 365 -out "$pki/apiserver.crt" -extfile <(printf '%s\n' \
      'subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local' \
      'extendedKeyUsage=serverAuth') 2>/dev/null
  openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
fi
make_client_cert admin kubernetes-admin system:masters
make_client_cert controller-manager system:kube-controller-manager system:kube-controller-manager
make_client_cert scheduler system:kube-scheduler system:kube-scheduler
# kwok plays every kubelet; it needs broad node/pod/lease write access.
make_client_cert kwok kwok-simulated-kubelets system:masters

server=https://127.0.0.1:$APISERVER_PORT
write_kubeconfig() { # name
  local name=$1
  cat >"$CLUSTER_DIR/$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: rollgate-local
  cluster:
    server: $server
    certificate-authority: $pki/ca.crt
users:
- name: $name
  user:
    client-certificate: $pki/$name.crt
    client-key: $pki/$name.key
contexts:
- name: rollgate-local
  context: {cluster: rollgate-local, user: $name}
current-context: rollgate-local
EOF
}
for n in admin controller-manager scheduler kwok; do write_kubeconfig "$n"; done
cp "$CLUSTER_DIR/admin.kubeconfig" "$CLUSTER_DIR/kubeconfig"
export KUBECONFIG=$CLUSTER_DIR/kubeconfig

# ---------- processes ----------
running() { local f="$CLUSTER_DIR/pids/$1.pid"; [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null; }
start() { # name command...
  local name=$1; shift
  if running "$name"; then log "$name already running (pid $(cat "pids/$name.pid"))"; return 0; fi
  log "starting $name"
  nohup "$@" >"logs/$name.log" 2>&1 &
  echo $! >"pids/$name.pid"
}
wait_for() { # description seconds command...
  local what=$1 secs=$2; shift 2
  local deadline=$(($(date +%s) + secs))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      log "timed out after ${secs}s waiting for $what; see $CLUSTER_DIR/logs/"
      return 1
    fi
    sleep 0.5
  done
}

start etcd etcd --name rollgate-test --data-dir "$CLUSTER_DIR/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "rollgate-test=http://127.0.0.1:$ETCD_PEER_PORT" \
  --listen-metrics-urls "http://127.0.0.1:$((ETCD_PORT + 2))" \
  --unsafe-no-fsync --quota-backend-bytes 4294967296 --log-level warn
wait_for etcd 30 curl -sf "http://127.0.0.1:$((ETCD_PORT + 2))/health"

# Audit log: only what the e2e tests read (who deleted which pod, which PodNeedUpgrade
# condition the controller wrote), so it stays small. Tests find it at
# $CLUSTER_DIR/logs/audit.log (next to the kubeconfig). The policy is rewritten on every
# run, but an already-running kube-apiserver keeps the flags it was started with: a
# cluster started before auditing existed needs cluster-down.sh + cluster-up.sh.
cat >"$CLUSTER_DIR/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
# Every pod deletion, from anyone (rollgate, kube-controller-manager, tests).
- level: Metadata
  verbs: [delete, deletecollection]
  resources: [{group: "", resources: [pods]}]
# Status writes of rollgate's ServiceAccounts, with their body (the PodNeedUpgrade
# condition written); the simulated kubelets' own status writes are left out.
- level: Request
  verbs: [patch, update]
  userGroups: ["system:serviceaccounts:rollgate-system"]
  resources: [{group: "", resources: [pods/status]}]
# Events rollgate writes.
- level: Metadata
  verbs: [create, patch, update]
  userGroups: ["system:serviceaccounts:rollgate-system"]
  resources: [{group: "", resources: [events]}, {group: events.k8s.io, resources: [events]}]
- level: None
EOF

start kube-apiserver kube-apiserver \
  --bind-address 127.0.0.1 --secure-port "$APISERVER_PORT" \
  --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
  --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
  --client-ca-file "$pki/ca.crt" \
  --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-cluster-ip-range "$SERVICE_CIDR" \
  --authorization-mode Node,RBAC \
  --allow-privileged \
  --max-requests-inflight 1000 --max-mutating-requests-inflight 500 \
  --profiling=false \
  --audit-policy-file "$CLUSTER_DIR/audit-policy.yaml" \
  --audit-log-path "$CLUSTER_DIR/logs/audit.log" --audit-log-format json \
  --audit-log-mode blocking --audit-log-maxsize 200 --audit-log-maxbackup 2
wait_for "kube-apiserver /readyz" 90 kubectl get --raw /readyz

start kube-controller-manager kube-controller-manager \
  --kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig" \
  --authentication-kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig" \
  --authorization-kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port 0 \
  --leader-elect=false \
  --allocate-node-cidrs --cluster-cidr "$CLUSTER_CIDR" --node-cidr-mask-size 24 \
  --service-cluster-ip-range "$SERVICE_CIDR" \
  --root-ca-file "$pki/ca.crt" --service-account-private-key-file "$pki/sa.key" \
  --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
  --use-service-account-credentials \
  --node-monitor-period 1s --node-monitor-grace-period "${NODE_GRACE_SECONDS}s" \
  --kube-api-qps 300 --kube-api-burst 600 \
  --concurrent-daemonset-syncs 4
cat >"$CLUSTER_DIR/scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: $CLUSTER_DIR/scheduler.kubeconfig
  qps: 300
  burst: 600
leaderElection:
  leaderElect: false
EOF
start kube-scheduler kube-scheduler --config "$CLUSTER_DIR/scheduler.yaml" \
  --authentication-kubeconfig "$CLUSTER_DIR/scheduler.kubeconfig" \
  --authorization-kubeconfig "$CLUSTER_DIR/scheduler.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port 0

sed -e "s/__POD_START_DELAY_MS__/$POD_START_DELAY_MS/g" -e "s/__POD_STOP_DELAY_MS__/$POD_STOP_DELAY_MS/g" \
  -e "s/__POD_REREPORT_DELAY_MS__/$POD_REREPORT_DELAY_MS/g" \
  -e "${BED_IMAGE_PULL_DELAY:+s/#IMAGE_PULL_GATE //}" \
  "$here/kwok-stages.yaml" >"$CLUSTER_DIR/kwok-stages.yaml"
if [ -n "$BED_IMAGE_PULL_DELAY" ]; then
  # Before kwok: the gate holds every pod until the puller has marked it. A running kwok
  # keeps the stage file it started with, like the API server keeps its flags: turning
  # the model on or off needs cluster-down.sh + cluster-up.sh.
  start bed-image-puller python3 "$here/bed-image-puller.py" --kubeconfig "$CLUSTER_DIR/kubeconfig" \
    --delay "$BED_IMAGE_PULL_DELAY" --start-delay-ms "$POD_START_DELAY_MS" \
    --nodes rollgate.test/heartbeat=on
fi
# Lease renewed every duration/4; kept well inside the node grace period.
start kwok kwok --kubeconfig "$CLUSTER_DIR/kwok.kubeconfig" \
  --config "$CLUSTER_DIR/kwok-stages.yaml" \
  --manage-nodes-with-label-selector rollgate.test/heartbeat=on \
  --node-lease-duration-seconds "$((NODE_GRACE_SECONDS > 8 ? NODE_GRACE_SECONDS - 4 : 4))" \
  --cidr 10.63.0.0/16 --node-ip 10.62.0.1 -v WARN

wait_for "the default ServiceAccount" 60 kubectl -n default get serviceaccount default

# ---------- nodes ----------
# Named rollgate-node-N, spread over four edge pools. Tests make their own nodes
# (with their own names) through the Rust harness; these are for the demo and benchmarks.
have=$(kubectl get nodes -l rollgate.test/bed-node=true -o name | wc -l)
if [ "$have" -lt "$NODES" ]; then
  log "creating nodes $have..$((NODES - 1))"
  {
    for ((i = have; i < NODES; i++)); do
      cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: rollgate-node-$i
  labels:
    type: kwok
    kubernetes.io/hostname: rollgate-node-$i
    kubernetes.io/os: linux
    rollgate.test/bed-node: "true"
    rollgate.test/heartbeat: "on"
    rollgate.test/pool: edge-$((i % 4))
EOF
    done
  } | kubectl apply -f - >/dev/null
fi
# A demo stopped half-way can leave bed nodes cut off: every run starts with them back.
kubectl label nodes -l rollgate.test/bed-node=true rollgate.test/heartbeat=on --overwrite >/dev/null
log "waiting for $NODES nodes to be Ready"
wait_for "$NODES Ready nodes" 120 bash -c \
  "[ \$(kubectl get nodes -l rollgate.test/bed-node=true --no-headers 2>/dev/null | awk '\$2==\"Ready\"' | wc -l) -ge $NODES ]"
log "up in $(($(date +%s) - started)) s: $NODES nodes Ready; export KUBECONFIG=$CLUSTER_DIR/kubeconfig"
