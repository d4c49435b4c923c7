//! What the caches keep of each object: only the fields some planner reads.
//!
//! At 10,000 pods the caches are most of the controller's memory, and a kwok or kubelet
//! pod is mostly fields no planner reads (volumes, container specs and statuses,
//! tolerations, managedFields). Each function keeps a whitelist, so a field added to the
//! API later is dropped by default. `tests` prove each planner decides the same on the
//! pruned object as on the full one.
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerPort, Node, NodeAffinity, NodeSpec, NodeStatus, Pod,
    PodCondition, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Metadata every reader may use; annotations and managedFields are dropped.
fn slim_meta(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    meta.annotations = None;
    meta.generate_name = None;
    meta.creation_timestamp = None;
    meta.finalizers = None;
}

/// Pods: owner, labels, node, deletion, placement of pending DaemonSet pods, the pull
/// Job's identity and secrets, readiness gates, conditions, pod IP and container ports
/// (named target ports). Container images are kept for Events and the agent's checks.
pub fn pod(pod: &mut Pod) {
    slim_meta(&mut pod.metadata);
    if let Some(spec) = pod.spec.take() {
        pod.spec = Some(PodSpec {
            node_name: spec.node_name,
            service_account_name: spec.service_account_name,
            image_pull_secrets: spec.image_pull_secrets,
            readiness_gates: spec.readiness_gates,
            // Only the matchFields term the DaemonSet controller writes on pending pods.
            affinity: spec.affinity.and_then(|a| {
                a.node_affinity.map(|na| Affinity {
                    node_affinity: Some(NodeAffinity {
                        required_during_scheduling_ignored_during_execution: na
                            .required_during_scheduling_ignored_during_execution,
                        preferred_during_scheduling_ignored_during_execution: None,
                    }),
                    ..Default::default()
                })
            }),
            containers: spec
                .containers
                .into_iter()
                .map(|c| Container {
                    name: c.name,
                    image: c.image,
                    ports: c.ports.map(|ports| {
                        ports
                            .into_iter()
                            .map(|p| ContainerPort {
                                name: p.name,
                                container_port: p.container_port,
                                protocol: p.protocol,
                                ..Default::default()
                            })
                            .collect()
                    }),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        });
    }
    if let Some(status) = pod.status.take() {
        pod.status = Some(PodStatus {
            phase: status.phase,
            pod_ip: status.pod_ip,
            conditions: status.conditions.map(|conditions| {
                conditions
                    .into_iter()
                    .map(|c| PodCondition {
                        last_probe_time: None,
                        ..c
                    })
                    .collect()
            }),
            ..Default::default()
        });
    }
}

/// Nodes: name, labels, taints and the Ready condition (placement and readiness).
pub fn node(node: &mut Node) {
    slim_meta(&mut node.metadata);
    let taints = node.spec.take().and_then(|s| s.taints);
    node.spec = taints.map(|taints| NodeSpec {
        taints: Some(taints),
        ..Default::default()
    });
    let ready = node
        .status
        .take()
        .and_then(|s| s.conditions)
        .and_then(|cs| cs.into_iter().find(|c| c.type_ == "Ready"));
    node.status = Some(NodeStatus {
        conditions: ready.map(|c| {
            vec![k8s_openapi::api::core::v1::NodeCondition {
                message: None,
                last_heartbeat_time: None,
                ..c
            }]
        }),
        ..Default::default()
    });
}

/// DaemonSets are few: the template is kept (placement and pull Jobs read it), only
/// managedFields go. Annotations carry the public interface and stay.
pub fn daemonset(ds: &mut DaemonSet) {
    ds.metadata.managed_fields = None;
}

/// ControllerRevisions: the hash label and revision number are read, the template copy
/// inside (`data`) never is.
pub fn revision(revision: &mut ControllerRevision) {
    slim_meta(&mut revision.metadata);
    revision.data = Default::default();
}

/// Pull Jobs: their identity, owner, labels and status; the pod template is ours and
/// never read back.
pub fn job(job: &mut Job) {
    job.metadata.managed_fields = None;
    if let Some(spec) = job.spec.as_mut() {
        spec.template = Default::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kubelet_pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "agent-x", "namespace": "edge", "uid": "u1", "resourceVersion": "7",
                "labels": {"controller-revision-hash": "abc"},
                "annotations": {"big": "x".repeat(2000)},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "ds", "controller": true}],
                "managedFields": [{"manager": "kubelet", "operation": "Update"}]
            },
            "spec": {
                "nodeName": "n1",
                "serviceAccountName": "agent",
                "imagePullSecrets": [{"name": "regcred"}],
                "containers": [{"name": "c", "image": "nginx:1", "ports": [{"name": "http", "containerPort": 80}],
                                "env": [{"name": "A", "value": "b"}], "volumeMounts": [{"name": "v", "mountPath": "/v"}]}],
                "volumes": [{"name": "v", "emptyDir": {}}],
                "tolerations": [{"operator": "Exists"}],
                "readinessGates": [{"conditionType": "service.readiness.alibabacloud.com/web"}]
            },
            "status": {
                "phase": "Running", "podIP": "10.0.0.1",
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                "containerStatuses": [{"name": "c", "ready": true, "restartCount": 0, "image": "nginx:1", "imageID": "x"}]
            }
        }))
        .unwrap()
    }

    #[test]
    fn a_pruned_pod_keeps_what_the_planners_read_and_is_much_smaller() {
        let full = kubelet_pod();
        let mut slim = full.clone();
        pod(&mut slim);
        let size = |p: &Pod| serde_json::to_vec(p).unwrap().len();
        assert!(
            size(&slim) * 3 < size(&full),
            "{} vs {}",
            size(&slim),
            size(&full)
        );
        assert_eq!(slim.metadata.labels, full.metadata.labels);
        assert_eq!(
            slim.metadata.owner_references,
            full.metadata.owner_references
        );
        let (s, f) = (slim.spec.as_ref().unwrap(), full.spec.as_ref().unwrap());
        assert_eq!(s.node_name, f.node_name);
        assert_eq!(s.service_account_name, f.service_account_name);
        assert_eq!(s.image_pull_secrets, f.image_pull_secrets);
        assert_eq!(s.readiness_gates, f.readiness_gates);
        assert_eq!(s.containers[0].image, f.containers[0].image);
        assert_eq!(s.containers[0].ports, f.containers[0].ports);
        assert!(s.volumes.is_none() && s.tolerations.is_none());
        let (s, f) = (slim.status.as_ref().unwrap(), full.status.as_ref().unwrap());
        assert_eq!(s.conditions, f.conditions);
        assert_eq!(s.pod_ip, f.pod_ip);
        assert!(s.container_statuses.is_none());
    }

    #[test]
    fn a_pruned_node_keeps_labels_taints_and_ready_only() {
        let mut n: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "labels": {"pool": "edge"}, "annotations": {"a": "b"}},
            "spec": {"podCIDR": "10.0.0.0/24", "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {
                "conditions": [
                    {"type": "MemoryPressure", "status": "False"},
                    {"type": "Ready", "status": "True", "message": "kubelet is posting ready status"}
                ],
                "images": [{"names": ["nginx"], "sizeBytes": 1}],
                "capacity": {"cpu": "4"}
            }
        }))
        .unwrap();
        node(&mut n);
        assert_eq!(n.metadata.labels.as_ref().unwrap()["pool"], "edge");
        assert!(n.metadata.annotations.is_none());
        let spec = n.spec.as_ref().unwrap();
        assert_eq!(spec.taints.as_ref().unwrap().len(), 1);
        assert!(spec.pod_cidr.is_none());
        let status = n.status.as_ref().unwrap();
        let conditions = status.conditions.as_ref().unwrap();
        assert_eq!(conditions.len(), 1);
        assert_eq!(
            (conditions[0].type_.as_str(), conditions[0].status.as_str()),
            ("Ready", "True")
        );
        assert!(status.images.is_none() && status.capacity.is_none());
    }

    /// Adds what a kubelet-run pod carries and no planner reads.
    fn inflate_pod(mut p: Pod) -> Pod {
        let mut extra = kubelet_pod();
        extra.metadata = p.metadata.clone();
        extra.metadata.annotations = Some([("big".to_string(), "x".repeat(500))].into());
        let spec = p.spec.get_or_insert_with(Default::default);
        let extra_spec = extra.spec.take().unwrap();
        spec.volumes = extra_spec.volumes;
        spec.tolerations = extra_spec.tolerations;
        spec.containers = extra_spec.containers;
        let status = p.status.get_or_insert_with(Default::default);
        status.container_statuses = extra.status.take().unwrap().container_statuses;
        p
    }

    fn inflate_node(mut n: Node) -> Node {
        let status = n.status.get_or_insert_with(Default::default);
        status.images = Some(vec![Default::default(); 20]);
        status.conditions.get_or_insert_with(Vec::new).push(
            k8s_openapi::api::core::v1::NodeCondition {
                type_: "MemoryPressure".into(),
                status: "False".into(),
                ..Default::default()
            },
        );
        n.metadata.annotations = Some([("a".to_string(), "b".to_string())].into());
        n
    }

    #[test]
    fn every_planner_decides_the_same_on_pruned_objects() {
        use crate::daemonset::ota_plan::plan_need_upgrade_conditions;
        use crate::daemonset::policy::MaxUnavailable;
        use crate::daemonset::revision::CurrentRevision;
        use crate::daemonset::rolling_plan::{plan_rolling_update, RollingInput};
        use crate::daemonset::testkit::{
            at, node as ready_node, revision, tainted, DaemonSetBuilder, PodBuilder,
        };
        use std::sync::Arc;

        let ds = DaemonSetBuilder::new("agent").on_delete().build();
        let revisions = [revision(&ds, "old", 1), revision(&ds, "new", 2)];
        let full_pods: Vec<Pod> = vec![
            PodBuilder::new("a", &ds)
                .hash("old")
                .on_node("n1")
                .ready_since(at(10))
                .build(),
            PodBuilder::new("b", &ds)
                .hash("new")
                .on_node("n2")
                .not_ready()
                .build(),
            PodBuilder::new("c", &ds)
                .hash("new")
                .pending_for_node("n3")
                .build(),
            PodBuilder::new("d", &ds)
                .hash("old")
                .on_node("n4")
                .ready_since(at(10))
                .terminating(at(20))
                .build(),
            PodBuilder::new("e", &ds)
                .hash("old")
                .on_node("cut")
                .ready_since(at(10))
                .build(),
            PodBuilder::new("f", &ds)
                .hash("old")
                .on_node("n6")
                .ready_since(at(10))
                .build(),
        ]
        .into_iter()
        .map(inflate_pod)
        .collect();
        let taint = k8s_openapi::api::core::v1::Taint {
            key: "node.kubernetes.io/unreachable".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        let full_nodes: Vec<Node> = ["n1", "n2", "n3", "n4", "n5", "n6"]
            .iter()
            .map(|n| ready_node(n, true))
            .chain([tainted(ready_node("cut", false), taint)])
            .map(inflate_node)
            .collect();
        let pruned_pods: Vec<Pod> = full_pods
            .iter()
            .cloned()
            .map(|mut p| {
                pod(&mut p);
                p
            })
            .collect();
        let pruned_nodes: Vec<Node> = full_nodes
            .iter()
            .cloned()
            .map(|mut n| {
                super::node(&mut n);
                n
            })
            .collect();
        assert_ne!(full_pods, pruned_pods, "pruning removed something");

        let current = CurrentRevision::of(&ds, &revisions);
        let arcs = |v: &[Pod]| v.iter().cloned().map(Arc::new).collect::<Vec<_>>();
        let node_arcs = |v: &[Node]| v.iter().cloned().map(Arc::new).collect::<Vec<_>>();
        let rolling = |pods: &[Pod], nodes: &[Node]| {
            plan_rolling_update(&RollingInput {
                daemonset: &ds,
                current: current.as_ref(),
                pods: &arcs(pods),
                nodes: &node_arcs(nodes),
                max_unavailable: MaxUnavailable::Count(6),
                now: at(1000),
                expected_deletions: &Default::default(),
                vacated_by_us: &Default::default(),
            })
        };
        let full = rolling(&full_pods, &full_nodes);
        assert!(!full.deletions.is_empty() && !full.progress.vacated_nodes.is_empty());
        assert_eq!(full, rolling(&pruned_pods, &pruned_nodes));
        let ota =
            |pods: &[Pod]| plan_need_upgrade_conditions(&ds, current.as_ref(), pods, at(1000));
        assert!(!ota(&full_pods).is_empty());
        assert_eq!(ota(&full_pods), ota(&pruned_pods));
    }
}
