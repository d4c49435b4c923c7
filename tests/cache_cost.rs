//! What one pod and one node cost in the shared cache, counted allocation by allocation
//! (issue 10). No cluster needed: the objects are shaped like the ones kwok and
//! kube-controller-manager make for a DaemonSet on a Ready node. A regression here (a
//! field kept that no controller reads, an inline struct grown) shows at once, without
//! the noise of a resident-memory measurement.
#[path = "support/heap.rs"]
mod heap;

use std::mem::size_of;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::reflector::ObjectRef;
use rollgate::object::{CachedNode, CachedPod};

/// Bytes a cached Running DaemonSet pod may cost: the object, its heap, its store key
/// and slot. Measured 2026-11-30: 2,336 B (1,848 B while Pending; the API object is
/// 18,016 B). Most of it is `ObjectMeta` (360 B inline, kept so the store takes it as a
/// `kube::Resource`) and the labels' B-tree node (544 B for any label count up to 11).
const POD_CEILING: usize = 3_000;
/// The same for a cached Ready node: measured 1,567 B (5,313 B as the API object), most
/// of it the nine labels a node carries.
const NODE_CEILING: usize = 2_000;

fn running_daemonset_pod() -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": "edge-agent-7x2kq", "generateName": "edge-agent-",
            "namespace": "edge-system", "uid": "0b4c62a7-0f6e-4a5e-9d7c-3c1f6f2a9b11",
            "resourceVersion": "1843975", "creationTimestamp": "2026-11-30T05:00:00Z",
            "labels": {"app": "edge-agent", "controller-revision-hash": "7d9f8c6b5",
                       "pod-template-generation": "3"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-29T12:00:00Z"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "edge-agent",
                                 "uid": "5f0d8c1e-2b7a-4f3e-8a6d-9e2c4b1a7f30",
                                 "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [
                {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                 "time": "2026-11-30T05:00:00Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}}},
                {"manager": "kwok", "operation": "Update", "apiVersion": "v1", "subresource": "status",
                 "time": "2026-11-30T05:00:03Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:status": {"f:conditions": {}, "f:phase": {}, "f:podIP": {}}}}
            ]
        },
        "spec": {
            "nodeName": "edge-node-0042",
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                         "values": ["edge-node-0042"]}]}]}}},
            "containers": [{
                "name": "agent", "image": "registry.example.com/edge/agent:v1.8.2",
                "ports": [{"name": "metrics", "containerPort": 9100, "protocol": "TCP"}],
                "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
                "volumeMounts": [{"name": "kube-api-access-abcde", "readOnly": true,
                                  "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]
            }],
            "volumes": [{"name": "kube-api-access-abcde", "projected": {"sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}]}}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst", "serviceAccountName": "default", "serviceAccount": "default",
            "securityContext": {}, "schedulerName": "default-scheduler", "priority": 0,
            "enableServiceLinks": true, "preemptionPolicy": "PreemptLowerPriority",
            "tolerations": [
                {"operator": "Exists"},
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
                {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
            ]
        },
        "status": {
            "phase": "Running", "hostIP": "10.0.0.42", "hostIPs": [{"ip": "10.0.0.42"}],
            "podIP": "10.244.42.7", "podIPs": [{"ip": "10.244.42.7"}],
            "startTime": "2026-11-30T05:00:01Z", "qosClass": "Burstable",
            "conditions": [
                {"type": "PodReadyToStartContainers", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-30T05:00:02Z"},
                {"type": "Initialized", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-30T05:00:01Z"},
                {"type": "Ready", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-30T05:00:03Z"},
                {"type": "ContainersReady", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-30T05:00:03Z"},
                {"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-30T05:00:00Z"}
            ],
            "containerStatuses": [{
                "name": "agent", "ready": true, "started": true, "restartCount": 0,
                "image": "registry.example.com/edge/agent:v1.8.2",
                "imageID": "registry.example.com/edge/agent@sha256:4f1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c",
                "containerID": "containerd://8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b",
                "state": {"running": {"startedAt": "2026-11-30T05:00:02Z"}}
            }]
        }
    }))
    .expect("a valid pod")
}

fn ready_node() -> Node {
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": "edge-node-0042", "uid": "9a8b7c6d-5e4f-3a2b-1c0d-9e8f7a6b5c4d",
            "resourceVersion": "1843001", "creationTimestamp": "2026-11-30T04:00:00Z",
            "labels": {"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                       "kubernetes.io/arch": "amd64", "kubernetes.io/hostname": "edge-node-0042",
                       "kubernetes.io/os": "linux", "kubernetes.io/role": "agent",
                       "node-role.kubernetes.io/agent": "", "type": "kwok",
                       "topology.kubernetes.io/zone": "edge-a"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"}
        },
        "spec": {"podCIDR": "10.244.42.0/24", "podCIDRs": ["10.244.42.0/24"],
                 "taints": [{"key": "edge.example.com/dedicated", "value": "agent", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"},
            "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory", "message": "kubelet has sufficient memory available", "lastHeartbeatTime": "2026-11-30T05:00:00Z", "lastTransitionTime": "2026-11-30T04:00:00Z"},
                {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure", "message": "kubelet has no disk pressure", "lastHeartbeatTime": "2026-11-30T05:00:00Z", "lastTransitionTime": "2026-11-30T04:00:00Z"},
                {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID", "message": "kubelet has sufficient PID available", "lastHeartbeatTime": "2026-11-30T05:00:00Z", "lastTransitionTime": "2026-11-30T04:00:00Z"},
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status", "lastHeartbeatTime": "2026-11-30T05:00:00Z", "lastTransitionTime": "2026-11-30T04:00:05Z"}
            ],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.42"}, {"type": "Hostname", "address": "edge-node-0042"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"architecture": "amd64", "bootID": "", "containerRuntimeVersion": "kwok",
                         "kernelVersion": "", "kubeProxyVersion": "fake", "kubeletVersion": "fake",
                         "machineID": "", "operatingSystem": "linux", "osImage": "", "systemUUID": ""}
        }
    }))
    .expect("a valid node")
}

/// Bytes one cached object costs in its store: the object inline and on the heap, its
/// `ObjectRef` key inline and on the heap, the `Arc` header, and the map's slot.
fn store_cost<K, F>(full: &F, convert: impl Fn(F) -> K) -> (usize, usize)
where
    K: kube::Resource<DynamicType = ()>,
    F: Clone,
{
    let (full_copy, full_heap) = heap::kept_by(|| full.clone());
    drop(full_copy);
    let (cached, cached_heap) = heap::kept_by(|| convert(full.clone()));
    let (key, key_heap) = heap::kept_by(|| ObjectRef::from_obj(&cached));
    drop(key);
    let arc_header = 2 * size_of::<usize>();
    let slot = size_of::<ObjectRef<K>>() + size_of::<std::sync::Arc<K>>() + 1;
    let total = size_of::<K>() + cached_heap + key_heap + arc_header + slot;
    (full_heap + size_of::<F>(), total)
}

#[test]
fn a_cached_running_pod_costs_a_fraction_of_the_api_object() {
    let running = running_daemonset_pod();
    let (full, cached) = store_cost(&running, CachedPod::from);
    // The same pod while Pending (one condition, no IP, no container status): what a bed
    // measured before its pods ran undercounts per pod.
    let mut pending = running.clone();
    pending.status = serde_json::from_value(serde_json::json!({
        "phase": "Pending", "qosClass": "Burstable",
        "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-30T05:00:00Z"}]
    }))
    .ok();
    let (_, cached_pending) = store_cost(&pending, CachedPod::from);
    println!(
        "a Running DaemonSet pod: {full} B as a k8s_openapi Pod, {cached} B cached with its \
         store entry ({cached_pending} B while Pending); inline: CachedPod {} B, one cached \
         condition {} B",
        size_of::<CachedPod>(),
        size_of::<rollgate::object::pod::CachedCondition>(),
    );
    assert!(
        cached <= POD_CEILING,
        "a cached Running pod costs {cached} B, over the ceiling of {POD_CEILING} B: \
         something keeps more of each pod than before"
    );
    assert!(cached * 4 < full, "{cached} B cached vs {full} B full");
}

#[test]
fn a_cached_ready_node_costs_a_fraction_of_the_api_object() {
    let (full, cached) = store_cost(&ready_node(), CachedNode::from);
    println!(
        "a Ready node: {full} B as a k8s_openapi Node, {cached} B cached with its store entry"
    );
    assert!(
        cached <= NODE_CEILING,
        "a cached Ready node costs {cached} B, over the ceiling of {NODE_CEILING} B"
    );
    assert!(cached * 3 < full, "{cached} B cached vs {full} B full");
}
