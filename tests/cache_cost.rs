//! What one pod and one node cost in the shared cache, counted allocation by allocation
//! (issues 10 and 46). No cluster needed: the objects are shaped like the ones kwok and
//! kube-controller-manager make for a DaemonSet on a Ready node, and like a mesh-injected
//! Deployment's pod. A regression here (a field kept that no controller reads, an inline
//! struct grown, a shared value no longer shared) shows at once, without the noise of a
//! resident-memory measurement.
#[path = "support/heap.rs"]
mod heap;

use std::mem::size_of;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::reflector::ObjectRef;
use rollgate::object::{CachedNode, CachedPod};

/// Bytes a cached Running DaemonSet pod may cost, weighed as one of a fleet
/// (`fleet_cost`): the object, its heap, its store key and slot, and its share of what
/// pods share. Issue 46: at most 1.5 KiB, so 200,000 pods (10,000 nodes x 20
/// DaemonSets) fit in 320 MB. Measured 2026-12-06: 1,509 B (1,374 B while Pending;
/// 2,495 B for a pod alone, which pays for everything it would share; the API object is
/// 18,016 B); 2,098 B before pods shared (2,040 B alone). Most of it is the pod's own
/// `ObjectMeta` (360 B inline) and labels' B-tree node (544 B for any label count up
/// to 11), and the store key's copies of name, namespace, UID and resourceVersion.
const POD_CEILING: usize = 1_536;
/// The same for a Running Deployment pod of three containers and an init container
/// (`realistic_pod`): measured 2026-12-06: 1,496 B (47,277 B as the API object); 2,692 B
/// before pods shared.
const REALISTIC_POD_CEILING: usize = 1_536;
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

/// A pod of a Deployment behind a Service mesh, as kube-controller-manager, the
/// scheduler and a kubelet leave it: three containers (the app, a log shipper and the
/// mesh's proxy) and an init container, env, ports, probes, resources, volume mounts,
/// five labels, two annotations, managedFields and a full status. `workload` and `node`
/// make each pod of a fleet its own (name, UID, IP, node, times), and give pods of one
/// workload the same template, as a ReplicaSet does.
fn realistic_pod(workload: usize, node: usize) -> Pod {
    let app = format!("checkout-{workload:02}");
    let hash = format!("7d9f8c6b{workload:02}");
    let suffix = format!("{:05x}", workload * 7919 + node * 104_729);
    let uid = format!("0b4c62a7-0f6e-4a5e-9d7c-{:012x}", workload * 100_000 + node);
    let owner_uid = format!("5f0d8c1e-2b7a-4f3e-8a6d-{workload:012x}");
    let image = format!("registry.example.com/shop/{app}:v2.14.{workload}");
    let node_name = format!("worker-{node:04}");
    let pod_ip = format!("10.{}.{}.{}", 64 + node / 250, node % 250, 10 + workload);
    let second = |offset: usize| {
        format!(
            "2026-12-06T{:02}:{:02}:{:02}Z",
            5 + node / 60 % 12,
            node % 60,
            offset
        )
    };
    let container_id =
        |n: usize| format!("containerd://{:064x}", (workload * 1000 + node) * 10 + n);
    let probe = |port: &str, path: &str| {
        serde_json::json!({
            "httpGet": {"path": path, "port": port, "scheme": "HTTP"},
            "initialDelaySeconds": 5, "periodSeconds": 10, "timeoutSeconds": 1,
            "successThreshold": 1, "failureThreshold": 3
        })
    };
    let token_mount = serde_json::json!({"name": format!("kube-api-access-{suffix}"), "readOnly": true,
        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"});
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": format!("{app}-{hash}-{suffix}"), "generateName": format!("{app}-{hash}-"),
            "namespace": "shop", "uid": uid,
            "resourceVersion": format!("{}", 48_000_000 + workload * 1000 + node),
            "creationTimestamp": second(0),
            "labels": {"app.kubernetes.io/name": app, "app.kubernetes.io/part-of": "shop",
                       "pod-template-hash": hash, "security.istio.io/tlsMode": "istio",
                       "version": "v2"},
            "annotations": {"kubectl.kubernetes.io/default-container": "app",
                            "prometheus.io/scrape": "true"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                 "name": format!("{app}-{hash}"), "uid": owner_uid,
                                 "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [
                {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                 "time": second(0), "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app.kubernetes.io/name": {}},
                              "f:ownerReferences": {".": {}}}, "f:spec": {"f:containers": {}}}},
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "subresource": "status",
                 "time": second(9), "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:status": {"f:conditions": {}, "f:containerStatuses": {}, "f:phase": {}, "f:podIP": {}}}}
            ]
        },
        "spec": {
            "nodeName": node_name,
            "initContainers": [{
                "name": "istio-init", "image": "docker.io/istio/proxyv2:1.24.2",
                "args": ["istio-iptables", "-p", "15001", "-z", "15006", "-u", "1337"],
                "resources": {"requests": {"cpu": "10m", "memory": "40Mi"}},
                "securityContext": {"capabilities": {"add": ["NET_ADMIN", "NET_RAW"]}, "runAsUser": 0},
                "volumeMounts": [token_mount]
            }],
            "containers": [
                {"name": "app", "image": image, "imagePullPolicy": "IfNotPresent",
                 "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"},
                           {"name": "grpc", "containerPort": 9090, "protocol": "TCP"},
                           {"name": "metrics", "containerPort": 9100, "protocol": "TCP"}],
                 "env": [{"name": "LOG_LEVEL", "value": "info"},
                         {"name": "DB_HOST", "value": "postgres.shop.svc.cluster.local"},
                         {"name": "CACHE_TTL", "value": "30s"},
                         {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
                         {"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}},
                         {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "checkout-db", "key": "password"}}}],
                 "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
                 "readinessProbe": probe("http", "/ready"), "livenessProbe": probe("http", "/healthz"),
                 "volumeMounts": [{"name": "config", "mountPath": "/etc/checkout"}, token_mount],
                 "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"},
                {"name": "log-shipper", "image": "registry.example.com/infra/fluent-bit:3.2.1",
                 "ports": [{"name": "fb-metrics", "containerPort": 2020, "protocol": "TCP"}],
                 "env": [{"name": "FLUENT_HOST", "value": "logs.infra.svc"}, {"name": "FLUENT_PORT", "value": "24224"}],
                 "resources": {"requests": {"cpu": "20m", "memory": "32Mi"}},
                 "volumeMounts": [{"name": "varlog", "mountPath": "/var/log/app"}, token_mount],
                 "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"},
                {"name": "istio-proxy", "image": "docker.io/istio/proxyv2:1.24.2",
                 "args": ["proxy", "sidecar", "--domain", "$(POD_NAMESPACE).svc.cluster.local"],
                 "ports": [{"name": "http-envoy-prom", "containerPort": 15090, "protocol": "TCP"}],
                 "env": [{"name": "PILOT_CERT_PROVIDER", "value": "istiod"},
                         {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}}],
                 "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "2", "memory": "1Gi"}},
                 "readinessProbe": probe("15021", "/healthz/ready"),
                 "volumeMounts": [{"name": "istio-envoy", "mountPath": "/etc/istio/proxy"}, token_mount],
                 "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}
            ],
            "volumes": [
                {"name": "config", "configMap": {"name": "checkout-config", "defaultMode": 420}},
                {"name": "varlog", "emptyDir": {}},
                {"name": "istio-envoy", "emptyDir": {"medium": "Memory"}},
                {"name": format!("kube-api-access-{suffix}"), "projected": {"sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}]}}
            ],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst", "serviceAccountName": "checkout", "serviceAccount": "checkout",
            "imagePullSecrets": [{"name": "registry-example"}],
            "securityContext": {}, "schedulerName": "default-scheduler", "priority": 0,
            "enableServiceLinks": true, "preemptionPolicy": "PreemptLowerPriority",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            ]
        },
        "status": {
            "phase": "Running", "hostIP": format!("10.0.{}.{}", node / 250, node % 250),
            "podIP": pod_ip, "podIPs": [{"ip": pod_ip}],
            "startTime": second(1), "qosClass": "Burstable",
            "conditions": [
                {"type": "PodReadyToStartContainers", "status": "True", "lastProbeTime": null, "lastTransitionTime": second(2)},
                {"type": "Initialized", "status": "True", "lastProbeTime": null, "lastTransitionTime": second(4)},
                {"type": "Ready", "status": "True", "lastProbeTime": null, "lastTransitionTime": second(9)},
                {"type": "ContainersReady", "status": "True", "lastProbeTime": null, "lastTransitionTime": second(9)},
                {"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": second(0)}
            ],
            "initContainerStatuses": [{
                "name": "istio-init", "ready": true, "restartCount": 0,
                "image": "docker.io/istio/proxyv2:1.24.2", "imageID": "docker.io/istio/proxyv2@sha256:aa11",
                "containerID": container_id(0),
                "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": second(3), "finishedAt": second(4), "containerID": container_id(0)}}
            }],
            "containerStatuses": [
                {"name": "app", "ready": true, "started": true, "restartCount": 0, "image": image,
                 "imageID": format!("registry.example.com/shop/{app}@sha256:{:064x}", workload),
                 "containerID": container_id(1), "state": {"running": {"startedAt": second(5)}}},
                {"name": "istio-proxy", "ready": true, "started": true, "restartCount": 0,
                 "image": "docker.io/istio/proxyv2:1.24.2", "imageID": "docker.io/istio/proxyv2@sha256:aa11",
                 "containerID": container_id(2), "state": {"running": {"startedAt": second(5)}}},
                {"name": "log-shipper", "ready": true, "started": true, "restartCount": 0,
                 "image": "registry.example.com/infra/fluent-bit:3.2.1", "imageID": "registry.example.com/infra/fluent-bit@sha256:bb22",
                 "containerID": container_id(3), "state": {"running": {"startedAt": second(5)}}}
            ]
        }
    }))
    .expect("a valid pod")
}

/// The DaemonSet pod of `running_daemonset_pod`, made the pod of DaemonSet `workload`
/// on node `node` (name, UID, node, IP, times and image its own).
fn daemonset_pod(workload: usize, node: usize) -> Pod {
    let mut pod = running_daemonset_pod();
    let name = format!("edge-agent-{workload:02}");
    let node_name = format!("edge-node-{node:04}");
    let meta = &mut pod.metadata;
    meta.name = Some(format!("{name}-{:05x}", workload * 7919 + node * 104_729));
    meta.generate_name = Some(format!("{name}-"));
    meta.uid = Some(format!(
        "0b4c62a7-0f6e-4a5e-9d7c-{:012x}",
        workload * 100_000 + node
    ));
    meta.resource_version = Some(format!("{}", 1_800_000 + workload * 1000 + node));
    let labels = meta.labels.as_mut().expect("labels");
    labels.insert("app".into(), name.clone());
    labels.insert(
        "controller-revision-hash".into(),
        format!("7d9f8c6{workload:02}"),
    );
    let owner = &mut meta.owner_references.as_mut().expect("owner")[0];
    owner.name = name.clone();
    owner.uid = format!("5f0d8c1e-2b7a-4f3e-8a6d-{workload:012x}");
    let image = format!("registry.example.com/edge/{name}:v1.8.2");
    let spec = pod.spec.as_mut().expect("spec");
    spec.node_name = Some(node_name.clone());
    let affinity = serde_json::json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                 "values": [node_name]}]}]}}});
    spec.affinity = serde_json::from_value(affinity).ok();
    spec.containers[0].image = Some(image.clone());
    let status = pod.status.as_mut().expect("status");
    status.pod_ip = Some(format!(
        "10.{}.{}.{}",
        64 + node / 250,
        node % 250,
        10 + workload
    ));
    for (n, condition) in status.conditions.iter_mut().flatten().enumerate() {
        condition.last_transition_time = serde_json::from_value(serde_json::json!(format!(
            "2026-12-06T{:02}:{:02}:{:02}Z",
            5 + node / 60 % 12,
            node % 60,
            n
        )))
        .ok();
    }
    let container = &mut status.container_statuses.as_mut().expect("statuses")[0];
    container.image = image;
    container.container_id = Some(format!("containerd://{:064x}", workload * 1000 + node));
    pod
}

/// Workloads and nodes of the fleet a pod is weighed in: 1,000 pods, each node's name
/// shared by 20 of them, each workload's template by 50. The fleet simulation's
/// 10,000 nodes x 20 DaemonSets shares each template 200 times more.
const WORKLOADS: usize = 20;
const NODES: usize = 50;

/// Bytes one cached pod costs in a store of its fleet: the pod inline and on the heap,
/// its `ObjectRef` key, the `Arc` header and the map's slot, plus its share of what pods
/// have in common (node names, templates, label values) wherever the cache keeps that.
/// Pods are converted one by one, as a watch delivers them; the full pods are gone by
/// the time the heap is read.
fn fleet_cost(pod: impl Fn(usize, usize) -> Pod) -> usize {
    let mut store = Vec::with_capacity(WORKLOADS * NODES);
    let ((), heap) = heap::kept_by(|| {
        for node in 0..NODES {
            for workload in 0..WORKLOADS {
                let cached = std::sync::Arc::new(CachedPod::from(pod(workload, node)));
                store.push((ObjectRef::from_obj(&*cached), cached));
            }
        }
    });
    let slot = size_of::<ObjectRef<CachedPod>>() + size_of::<std::sync::Arc<CachedPod>>() + 1;
    heap.div_ceil(store.len()) + slot
}

/// Both pod shapes in one test: the cache's shared strings are process-wide, so two
/// shapes weighed on two threads at once would blur each other's share.
#[test]
fn a_cached_running_pod_costs_a_fraction_of_the_api_object() {
    let running = running_daemonset_pod();
    let (full, alone) = store_cost(&running, CachedPod::from);
    let daemonset = fleet_cost(daemonset_pod);
    let (realistic_full, _) = store_cost(&realistic_pod(0, 0), CachedPod::from);
    let realistic = fleet_cost(realistic_pod);
    // The same pod while Pending (one condition, no IP, no container status): what a bed
    // measured before its pods ran undercounts per pod.
    let pending_status = serde_json::json!({
        "phase": "Pending", "qosClass": "Burstable",
        "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-30T05:00:00Z"}]
    });
    let pending = fleet_cost(|workload, node| {
        let mut pod = daemonset_pod(workload, node);
        pod.status = serde_json::from_value(pending_status.clone()).ok();
        pod
    });
    println!(
        "a Running DaemonSet pod: {full} B as a k8s_openapi Pod, {daemonset} B cached in a \
         fleet with its store entry ({alone} B alone; {pending} B while Pending)\n\
         a Running Deployment pod, 3 containers + 1 init: {realistic_full} B as a Pod, \
         {realistic} B cached in a fleet with its store entry\n\
         inline: CachedPod {} B, one cached condition {} B",
        size_of::<CachedPod>(),
        size_of::<rollgate::object::pod::CachedCondition>(),
    );
    assert!(
        daemonset <= POD_CEILING,
        "a cached Running DaemonSet pod costs {daemonset} B, over the ceiling of \
         {POD_CEILING} B: something keeps more of each pod than before"
    );
    assert!(
        realistic <= REALISTIC_POD_CEILING,
        "a cached Running Deployment pod costs {realistic} B, over the ceiling of \
         {REALISTIC_POD_CEILING} B: something keeps more of each pod than before"
    );
    assert!(alone * 4 < full, "{alone} B cached vs {full} B full");
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
