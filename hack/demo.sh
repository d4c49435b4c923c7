#!/usr/bin/env bash
# `make demo`: rollgate on a local control plane, narrated.
#   1. AdvancedRollingUpdate: an edge DaemonSet upgrades on Ready nodes within its
#      budget while 3 nodes are cut off, then the cut-off nodes upgrade on their own
#      when they come back.
#   2. OTA: nothing upgrades by itself; an operator on a node asks the node API
#      (127.0.0.1:10267) which pods need an upgrade, pre-pulls, and triggers it.
#   3. Load-balancer readiness gates: the CLB walk-through against the lb-emulator
#      (simulated health: registration 1 s, health check 3 s), and a rollout with gates
#      beside one without, with the lowest healthy backend count of each. The gates are
#      injected: the namespace carries rollgate.io/readiness-gate-inject=enabled and the
#      Deployment has no readinessGates (part 4 shows the hand-written form).
#   4. Both together: an ingress DaemonSet on every node behind a load balancer, gated
#      on it, upgraded by AdvancedRollingUpdate while 3 nodes are cut off; the load
#      balancer keeps (Ready nodes - max-unavailable) healthy backends throughout.
# The cluster stays up afterwards; `make cluster-down` stops it and everything the demo
# started (their pid files live next to the cluster's).
# Every table the narration promises is checked (`promised`, hack/lb-server-group.py,
# hack/lb-capacity.py's floors): the demo stops when one is empty or says otherwise.
# Ports: APISERVER_PORT and ETCD_PORT (hack/cluster-up.sh), AGENT_PORT, DEMO_METRICS_PORT,
# DEMO_WEBHOOK_PORT; CLUSTER_DIR for a cluster of its own.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
cd "$repo"

export NODES=${DEMO_NODES:-10}
export POD_START_DELAY_MS=${POD_START_DELAY_MS:-2000}
CLUSTER_DIR=${CLUSTER_DIR:-$repo/target/cluster}
export CLUSTER_DIR
AGENT_PORT=${AGENT_PORT:-10267}
# The controller's metrics and probes (its /readyz says when the demo can go on).
METRICS_PORT=${DEMO_METRICS_PORT:-18080}
# The readiness-gate injection webhook (HTTPS on loopback; the API server calls it).
WEBHOOK_PORT=${DEMO_WEBHOOK_PORT:-18443}
NS=rollgate-demo
BIN=${ROLLGATE_BIN:-$repo/target/release/rollgate}
EMU_BIN=${LB_EMULATOR_BIN:-$repo/target/release/lb-emulator}

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }
# Passes a table through (stdin to stdout) and stops the demo when it has no row under
# its header: the narration promised one. The `$ command` line `run` prints is not a row.
promised() { # what the table shows
  local table rows
  table=$(cat)
  printf '%s\n' "$table"
  rows=$(printf '%s\n' "$table" | grep -v '^\$ ' | sed 1d | grep -c . || true)
  if [ "$rows" -eq 0 ]; then
    echo "demo: $1 is empty, but the narration promised it" >&2
    exit 1
  fi
}

say "Starting the local control plane with $NODES simulated edge nodes"
bash hack/cluster-up.sh
PATH="$(bash hack/build-control-plane.sh):$PATH"
export KUBECONFIG=$CLUSTER_DIR/kubeconfig
kubectl delete namespace "$NS" --ignore-not-found --wait=true >/dev/null
for n in $(kubectl get nodes -l rollgate.test/bed-node=true -o name); do
  kubectl label "$n" rollgate.test/heartbeat=on --overwrite >/dev/null
done
kubectl wait --for=condition=Ready node -l rollgate.test/bed-node=true --timeout=90s >/dev/null
kubectl create namespace "$NS" >/dev/null

# The network to the nodes given (node/NAME...) drops: their simulated kubelets stop
# heartbeating, and kube-controller-manager marks them NotReady after its grace period.
cut_nodes() {
  local n
  for n in "$@"; do run kubectl label "$n" rollgate.test/heartbeat=off --overwrite; done
  echo "waiting for kube-controller-manager to mark them NotReady (grace period)..."
  for n in "$@"; do
    until [ "$(kubectl get "$n" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" != "True" ]; do sleep 1; done
  done
}

# The network to the nodes given comes back: their kubelets heartbeat again.
restore_nodes() {
  local n
  for n in "$@"; do run kubectl label "$n" rollgate.test/heartbeat=on --overwrite; done
}

start_bg() { # name, command...
  local name=$1; shift
  local pidfile=$CLUSTER_DIR/pids/demo-$name.pid
  if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    kill "$(cat "$pidfile")"; sleep 1
  fi
  nohup "$@" >"$CLUSTER_DIR/logs/demo-$name.log" 2>&1 &
  echo $! >"$pidfile"
}

say "Installing rollgate's RBAC (deploy/) and starting the controller with its ServiceAccount's token"
kubectl apply -f deploy/agent/rbac.yaml -f deploy/controller/rbac.yaml >/dev/null
token=$(kubectl -n rollgate-system create token rollgate-controller --duration 8h)
sed -e '/client-certificate:/d' -e "s|client-key: .*|token: $token|" "$CLUSTER_DIR/admin.kubeconfig" >"$CLUSTER_DIR/demo-controller.kubeconfig"
# The cloud is the emulator (loopback only; simulated health never contacts a pod IP).
rm -f "$CLUSTER_DIR/demo-emulator.addr"
start_bg lb-emulator "$EMU_BIN" --listen 127.0.0.1:0 --address-file "$CLUSTER_DIR/demo-emulator.addr" \
  --registration-delay-ms 1000 --health-delay-ms 3000
for _ in $(seq 1 50); do [ -s "$CLUSTER_DIR/demo-emulator.addr" ] && break; sleep 0.2; done
EMU=$(cat "$CLUSTER_DIR/demo-emulator.addr")
start_bg controller env KUBECONFIG="$CLUSTER_DIR/demo-controller.kubeconfig" \
  ALIBABA_CLOUD_REGION_ID=cn-hangzhou ALIBABA_CLOUD_SLB_ENDPOINT="$EMU" ALIBABA_CLOUD_NLB_ENDPOINT="$EMU" \
  ALIBABA_CLOUD_ECS_ENDPOINT="$EMU" ALIBABA_CLOUD_VPC_ENDPOINT="$EMU" ROLLGATE_CLOUD_VPC_ID=vpc-emulator \
  ROLLGATE_CLOUD_SCHEME=http ALIBABA_CLOUD_ACCESS_KEY_ID=emulator-access-key-id \
  ALIBABA_CLOUD_ACCESS_KEY_SECRET=emulator-access-key-secret ALIBABA_CLOUD_ECS_METADATA_DISABLED=true \
  ROLLGATE_CLUSTER_ID=demo ROLLGATE_GATE_DRAIN_TIME=3s \
  "$BIN" controller --watch-namespace "$NS" --metrics-addr 127.0.0.1:$METRICS_PORT \
  --webhook-listen 127.0.0.1:$WEBHOOK_PORT
# deploy/'s injection webhook, calling the controller on loopback instead of its Service
# (no caBundle: the controller writes its own CA there).
cat <<EOF | kubectl apply -f - >/dev/null
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: rollgate-readiness-gate-injector}
webhooks:
  - name: readiness-gates.rollgate.io
    clientConfig: {url: "https://127.0.0.1:$WEBHOOK_PORT/mutate-pods"}
    failurePolicy: Ignore
    timeoutSeconds: 3
    sideEffects: None
    admissionReviewVersions: [v1]
    rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods], scope: Namespaced}]
    namespaceSelector: {matchLabels: {rollgate.io/readiness-gate-inject: enabled}}
    objectSelector: {matchExpressions: [{key: rollgate.io/readiness-gate-inject, operator: NotIn, values: [disabled]}]}
EOF
# Terway's part on a real cluster: every pod IP is on an ENI of the VPC. Here a loop
# gives each new pod IP an ENI in the emulator's inventory (its VPC vpc-emulator).
start_bg terway-enis bash -c 'given=" "; while sleep 0.3; do
  for ip in $(kubectl -n "$0" get pod -o jsonpath="{.items[*].status.podIP}"); do
    case "$given" in *" $ip "*) continue ;; esac
    curl -sf -XPOST "$1/_emulator/enis" -H "content-type: application/json" \
      -d "{\"private_ips\":[\"$ip\"]}" >/dev/null && given="$given$ip "
  done
done' "$NS" "$EMU"
for _ in $(seq 1 50); do curl -sf 127.0.0.1:$METRICS_PORT/readyz >/dev/null && break; sleep 0.2; done
echo "controller ready: $(curl -s 127.0.0.1:$METRICS_PORT/readyz); log: $CLUSTER_DIR/logs/demo-controller.log"
ca_bundle() { kubectl get mutatingwebhookconfiguration rollgate-readiness-gate-injector -o jsonpath='{.webhooks[0].clientConfig.caBundle}'; }
for _ in $(seq 1 100); do [ -n "$(ca_bundle)" ] && break; sleep 0.2; done
[ -n "$(ca_bundle)" ] ||
  { echo "the controller did not write the webhook's CA bundle; see $CLUSTER_DIR/logs/demo-controller.log" >&2; exit 1; }

# ---------------------------------------------------------------- AdvancedRollingUpdate
say "1. AdvancedRollingUpdate: an edge DaemonSet with max-unavailable 30%"
cat <<'EOF' | tee >(cat >&2) | kubectl -n "$NS" apply -f - >/dev/null
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: edge-agent
  annotations:
    apps.openyurt.io/update-strategy: AdvancedRollingUpdate
    apps.openyurt.io/max-unavailable: 30%
spec:
  selector: {matchLabels: {app: edge-agent}}
  updateStrategy: {type: OnDelete}
  template:
    metadata: {labels: {app: edge-agent}}
    spec:
      nodeSelector: {rollgate.test/bed-node: "true"}
      containers: [{name: agent, image: "registry.local/edge-agent:v1"}]
EOF
kubectl -n "$NS" rollout status ds/edge-agent --timeout=120s >/dev/null 2>&1 || true
until [ "$(kubectl -n "$NS" get ds edge-agent -o jsonpath='{.status.numberReady}')" = "$NODES" ]; do sleep 1; done
echo "edge-agent:v1 Ready on all $NODES nodes"

mapfile -t cut < <(kubectl get nodes -l rollgate.test/bed-node=true -o name | sed -n 1,3p)
say "The network to 3 edge nodes drops (their kubelets stop heartbeating)"
cut_nodes "${cut[@]}"
run kubectl get nodes -l rollgate.test/bed-node=true

say "New image: edge-agent:v2. A native rolling update would stall here; rollgate upgrades the Ready nodes"
run kubectl -n "$NS" set image ds/edge-agent agent=registry.local/edge-agent:v2
# Ended by the demo once the Ready nodes are done: its INFO line about the shutdown
# would land in the middle of the narration.
ROLLGATE_LOG=warn timeout 120 "$BIN" status daemonset/edge-agent -n "$NS" --watch &
watch_pid=$!
# The planner's own line names the NotReady nodes once the Ready ones are done.
timeout 180 bash -c "until '$BIN' status daemonset/edge-agent -n '$NS' 2>/dev/null | grep -q 'NotReady nodes waiting'; do sleep 1; done" ||
  { echo "the Ready nodes were not upgraded within 180 s; see $CLUSTER_DIR/logs/demo-controller.log" >&2; exit 1; }
kill "$watch_pid" 2>/dev/null || true; wait "$watch_pid" 2>/dev/null || true
echo
run "$BIN" status daemonset/edge-agent -n "$NS"
say "Events on the DaemonSet say what happened and what waits"
kubectl -n "$NS" get events --field-selector involvedObject.name=edge-agent \
  -o custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message | { grep -v SuccessfulCreate || true; } |
  cut -c1-220 | promised "the DaemonSet's Events"

say "The network comes back: no user action, the 3 nodes are upgraded as soon as they are Ready"
restore_nodes "${cut[@]}"
timeout 180 "$BIN" status daemonset/edge-agent -n "$NS" --watch
run kubectl -n "$NS" get pods -l app=edge-agent -o custom-columns=POD:.metadata.name,NODE:.spec.nodeName,IMAGE:.spec.containers[0].image,READY:.status.containerStatuses[0].ready |
  promised "edge-agent's pods"

# ---------------------------------------------------------------- OTA
say "2. OTA: nothing upgrades by itself; the node operator decides"
cat <<'EOF' | tee >(cat >&2) | kubectl -n "$NS" apply -f - >/dev/null
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: nginx-daemonset
  annotations:
    apps.openyurt.io/update-strategy: OTA
spec:
  selector: {matchLabels: {app: nginx}}
  updateStrategy: {type: OnDelete}
  template:
    metadata: {labels: {app: nginx}}
    spec:
      nodeSelector: {rollgate.test/bed-node: "true"}
      containers: [{name: nginx, image: "nginx:1.19.1"}]
EOF
until [ "$(kubectl -n "$NS" get ds nginx-daemonset -o jsonpath='{.status.numberReady}')" = "$NODES" ]; do sleep 1; done
node=$(kubectl get nodes -l rollgate.test/bed-node=true -o jsonpath='{.items[0].metadata.name}')
say "The node agent of $node listens on 127.0.0.1:$AGENT_PORT (as on every edge node)"
start_bg agent "$BIN" agent --node-name "$node" --listen "127.0.0.1:$AGENT_PORT" --state-dir "$CLUSTER_DIR/demo-agent-state"
for _ in $(seq 1 50); do curl -sf "127.0.0.1:$AGENT_PORT/pods" >/dev/null && break; sleep 0.2; done

show_pods() { # the agent's answer, one nginx pod a line (no header: every line is a row)
  curl -s "127.0.0.1:$AGENT_PORT/pods" | PREFIX=nginx python3 hack/show-agent-pods.py |
    { echo "pods on $node (GET /pods):"; cat; } | promised "the node agent's nginx pods"
}
run curl -s -o /dev/null -w 'GET /pods -> HTTP %{http_code}\n' "127.0.0.1:$AGENT_PORT/pods"
show_pods

say "A new version is published: nginx:1.19.2. Nothing restarts; pods are only marked"
run kubectl -n "$NS" set image ds/nginx-daemonset nginx=nginx:1.19.2
until curl -s "127.0.0.1:$AGENT_PORT/pods" | grep -q '"PodNeedUpgrade","status":"True"\|"status":"True","type":"PodNeedUpgrade"'; do sleep 0.5; done
show_pods
pod=$(curl -s "127.0.0.1:$AGENT_PORT/pods" | python3 -c 'import json,sys; print([p["metadata"]["name"] for p in json.load(sys.stdin)["items"] if p["metadata"]["name"].startswith("nginx")][0])')

say "Optional: pre-pull the new image on this node"
run curl -s -X POST "127.0.0.1:$AGENT_PORT/openyurt.io/v1/namespaces/$NS/pods/$pod/imagepull"; echo
for _ in $(seq 1 60); do
  show_pods | grep -q "PodImageReady=True" && break
  sleep 1
done
show_pods

say "Trigger the upgrade from the node"
run curl -s -X POST "127.0.0.1:$AGENT_PORT/openyurt.io/v1/namespaces/$NS/pods/$pod/upgrade"; echo
sleep 4
show_pods
say "Bad input gets a clear answer"
run curl -s -X POST "127.0.0.1:$AGENT_PORT/openyurt.io/v1/namespaces/$NS/pods/no-such-pod/upgrade"; echo
run curl -s -X GET "127.0.0.1:$AGENT_PORT/openyurt.io/v1/namespaces/$NS/pods/$pod/upgrade"; echo

# ---------------------------------------------------------------- readiness gates
say "3. Load-balancer readiness gates: a pod is Ready only once the CLB has it registered AND healthy"
echo "(the lb-emulator on $EMU stands in for the cloud: registration 1 s, then the health check takes 3 s)"
say "No readinessGates in the Deployment: the namespace label lets rollgate's webhook add them at pod creation"
run kubectl label namespace "$NS" rollgate.io/readiness-gate-inject=enabled --overwrite
lb_app() { # name, gated (yes|no): no opts the pods out of injection
  local labels="app: $1"
  [ "$2" = no ] && labels="$labels, rollgate.io/readiness-gate-inject: disabled"
  cat <<EOF
apiVersion: v1
kind: Service
metadata: {name: $1}
spec:
  type: LoadBalancer
  selector: {app: $1}
  ports: [{port: 80, targetPort: 80, protocol: TCP}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: $1}
spec:
  replicas: 6
  selector: {matchLabels: {app: $1}}
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 1, maxUnavailable: 1}}
  template:
    metadata: {labels: {$labels}}
    spec:
      nodeSelector: {rollgate.test/bed-node: "true"}
      containers: [{name: nginx, image: "nginx:1.14", ports: [{containerPort: 80}]}]
EOF
}
gate_of() { # pod
  kubectl -n "$NS" get pod "$1" -o jsonpath='{range .status.conditions[?(@.type=="service.readiness.alibabacloud.com/my-svc")]}{.status} {.reason}: {.message}{"\n"}{end}'
}
lb_app my-svc yes | tee >(cat >&2) | kubectl -n "$NS" apply -f - >/dev/null
until [ -n "$(kubectl -n "$NS" get service my-svc -o jsonpath='{.status.loadBalancer.ingress[0].ip}')" ]; do sleep 0.5; done
say "Step 1: EXTERNAL-IP appears"
run kubectl -n "$NS" get service my-svc
sleep 3
say "Step 2: the pods run, but READINESS GATES stay 0/1 until the load balancer has them healthy"
run kubectl -n "$NS" get pod -o wide -l app=my-svc | promised "my-svc's pods"
pod=$(kubectl -n "$NS" get pod -l app=my-svc -o jsonpath='{.items[0].metadata.name}')
injected=$(kubectl -n "$NS" get pod "$pod" -o jsonpath='{.spec.readinessGates[*].conditionType}')
echo "$pod's readinessGates, injected: $injected"
[ "$injected" = service.readiness.alibabacloud.com/my-svc ] ||
  { echo "demo: the webhook did not inject my-svc's gate (got '$injected')" >&2; exit 1; }
gate_of "$pod"
kubectl -n "$NS" rollout status deploy/my-svc --timeout=180s >/dev/null
run kubectl -n "$NS" get pod -o wide -l app=my-svc | promised "my-svc's pods"
gate_of "$pod"
echo "The CLB's server group (the emulator's view): each pod is the ENI holding its IP"
python3 hack/lb-server-group.py "$EMU" "$NS" my-svc my-svc

say "Step 3: kubectl rollout restart, with gates (my-svc) and without (no-gates), side by side"
lb_app no-gates no | kubectl -n "$NS" apply -f - >/dev/null
kubectl -n "$NS" rollout status deploy/no-gates --timeout=180s >/dev/null
sleep 5 # the last backends of no-gates turn healthy
since=$(curl -s "$EMU/_emulator/timeline" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["events"]))')
run kubectl -n "$NS" rollout restart deploy/my-svc deploy/no-gates
run kubectl -n "$NS" rollout status deploy/my-svc --timeout=300s
run kubectl -n "$NS" rollout status deploy/no-gates --timeout=300s
sleep 5
say "What the load balancer saw (the emulator's timeline): healthy backends in rotation, lowest point of each rollout"
python3 hack/lb-capacity.py "$EMU" "$since" "$NS" my-svc:6:5 no-gates:6
echo "With gates the Service kept replicas - maxUnavailable = 5 healthy backends (checked above); without, a pod counts as Ready as soon as it runs, whether or not the load balancer can use it yet."

# ---------------------------------------------------------------- both halves together
say "4. Both halves: an ingress DaemonSet on every node, behind a load balancer and gated on it"
echo "(its gate is written by hand, the form for clusters without the webhook; the webhook adds no second one)"
cat <<'EOF' | tee >(cat >&2) | kubectl -n "$NS" apply -f - >/dev/null
apiVersion: v1
kind: Service
metadata: {name: edge-ingress}
spec:
  type: LoadBalancer
  selector: {app: edge-ingress}
  ports: [{port: 80, targetPort: 80, protocol: TCP}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: edge-ingress
  annotations:
    apps.openyurt.io/update-strategy: AdvancedRollingUpdate
    apps.openyurt.io/max-unavailable: "2"
spec:
  selector: {matchLabels: {app: edge-ingress}}
  updateStrategy: {type: OnDelete}
  template:
    metadata: {labels: {app: edge-ingress}}
    spec:
      nodeSelector: {rollgate.test/bed-node: "true"}
      tolerations: [{operator: Exists}]
      readinessGates: [{conditionType: service.readiness.alibabacloud.com/edge-ingress}]
      containers: [{name: ingress, image: "registry.local/edge-ingress:v1", ports: [{containerPort: 80}]}]
EOF
until [ "$(kubectl -n "$NS" get ds edge-ingress -o jsonpath='{.status.numberReady}')" = "$NODES" ]; do sleep 1; done
echo "edge-ingress:v1 Ready on all $NODES nodes: each pod's gate turned True once its backend was healthy"

mapfile -t cut < <(kubectl get nodes -l rollgate.test/bed-node=true -o name | sed -n 4,6p)
say "The network to 3 more edge nodes drops: no heartbeat, and the load balancer cannot reach them either"
cut_nodes "${cut[@]}"
cut_ips=""
for n in "${cut[@]}"; do
  ip=$(kubectl -n "$NS" get pod -l app=edge-ingress --field-selector "spec.nodeName=${n#node/}" -o jsonpath='{.items[0].status.podIP}')
  cut_ips="$cut_ips $ip"
  curl -sf -XPOST "$EMU/_emulator/health" -H "content-type: application/json" \
    -d "{\"ip\":\"$ip\",\"port\":80,\"healthy\":false}" >/dev/null
done
sleep 1 # the emulator applies forced health on its next tick
ready=$((NODES - 3))
since=$(curl -s "$EMU/_emulator/timeline" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["events"]))')
say "New image: edge-ingress:v2, upgraded on the $ready Ready nodes, 2 at a time"
run kubectl -n "$NS" set image ds/edge-ingress ingress=registry.local/edge-ingress:v2
timeout 240 bash -c "until '$BIN' status daemonset/edge-ingress -n '$NS' 2>/dev/null | grep -q 'NotReady nodes waiting'; do sleep 1; done" ||
  { echo "the Ready nodes were not upgraded within 240 s; see $CLUSTER_DIR/logs/demo-controller.log" >&2; exit 1; }
run "$BIN" status daemonset/edge-ingress -n "$NS"
say "What the load balancer saw: healthy backends in rotation on the $ready reachable nodes"
python3 hack/lb-capacity.py "$EMU" "$since" "$NS" "edge-ingress:$ready:$((ready - 2))"
echo "$ready Ready nodes, max-unavailable 2: the floor is $((ready - 2)) (checked above); a new pod counted as available only once its backend was healthy."

say "The network comes back: the 3 nodes are upgraded, each old backend drained before its pod goes"
restore_nodes "${cut[@]}"
for ip in $cut_ips; do
  curl -s -XPOST "$EMU/_emulator/health" -H "content-type: application/json" \
    -d "{\"ip\":\"$ip\",\"port\":80,\"healthy\":null}" >/dev/null
done
timeout 240 "$BIN" status daemonset/edge-ingress -n "$NS" --watch
run kubectl -n "$NS" get pods -l app=edge-ingress -o custom-columns=POD:.metadata.name,NODE:.spec.nodeName,IMAGE:.spec.containers[0].image,READY:.status.containerStatuses[0].ready |
  promised "edge-ingress's pods"

say "Done. The cluster keeps running: export KUBECONFIG=$KUBECONFIG ; 'make cluster-down' stops everything."
