//! The DaemonSet planners decide the same on the shared cache's slim objects
//! (`CachedPod`, `CachedNode`, pruned by `crate::watch::prune`) as on full API objects.
use crate::object::{CachedNode, CachedPod};
use k8s_openapi::api::core::v1::{Node, Pod};

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
            "containers": [{"name": "c", "image": "nginx:1", "ports": [{"name": "http", "containerPort": 80}],
                            "env": [{"name": "A", "value": "b"}], "volumeMounts": [{"name": "v", "mountPath": "/v"}]}],
            "volumes": [{"name": "v", "emptyDir": {}}],
            "tolerations": [{"operator": "Exists"}]
        },
        "status": {
            "containerStatuses": [{"name": "c", "ready": true, "restartCount": 0, "image": "nginx:1", "imageID": "x"}]
        }
    }))
    .unwrap()
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
fn every_planner_decides_the_same_on_cached_objects() {
    use super::ota_plan::{plan_leftover_condition_removals, plan_need_upgrade_conditions};
    use super::policy::MaxUnavailable;
    use super::revision::CurrentRevision;
    use super::rolling_plan::RollingPlan;
    use super::rolling_plan::{plan_rolling_update, RollingInput};
    use crate::object::{NodeFacts, PodFacts};
    use crate::testkit::{at, node as ready_node, revision, tainted, DaemonSetBuilder, PodBuilder};
    use k8s_openapi::api::apps::v1::DaemonSet;
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
    let cached_pods: Vec<CachedPod> = full_pods.iter().cloned().map(CachedPod::from).collect();
    let cached_nodes: Vec<CachedNode> = full_nodes.iter().cloned().map(CachedNode::from).collect();

    let current = CurrentRevision::of(&ds, &revisions);
    fn arcs<T: Clone>(v: &[T]) -> Vec<Arc<T>> {
        v.iter().cloned().map(Arc::new).collect()
    }
    fn rolling<P: PodFacts, N: NodeFacts>(
        ds: &DaemonSet,
        current: Option<&CurrentRevision>,
        pods: &[Arc<P>],
        nodes: &[Arc<N>],
    ) -> RollingPlan {
        plan_rolling_update(&RollingInput {
            daemonset: ds,
            current,
            pods,
            nodes,
            max_unavailable: MaxUnavailable::Count(6),
            now: at(1000),
            expected_deletions: &Default::default(),
            vacated_by_us: &Default::default(),
            limits: Default::default(),
            partition: None,
            node_selector: None,
            waves: None,
            proving: None,
            list_upcoming: true,
        })
    }
    let full = rolling(&ds, current.as_ref(), &arcs(&full_pods), &arcs(&full_nodes));
    assert!(!full.deletions.is_empty() && !full.progress.vacated_nodes.is_empty());
    let cached = rolling(
        &ds,
        current.as_ref(),
        &arcs(&cached_pods),
        &arcs(&cached_nodes),
    );
    assert_eq!(full, cached);

    let full = plan_need_upgrade_conditions(&ds, current.as_ref(), &full_pods, at(1000));
    assert!(!full.is_empty());
    let cached = plan_need_upgrade_conditions(&ds, current.as_ref(), &cached_pods, at(1000));
    assert_eq!(full, cached);
    let marked: Vec<Pod> = full_pods
        .iter()
        .cloned()
        .zip(&full)
        .map(|(mut pod, update)| {
            let status = pod.status.get_or_insert_with(Default::default);
            status
                .conditions
                .get_or_insert_with(Vec::new)
                .push(update.condition.clone());
            pod
        })
        .collect();
    let marked_cached: Vec<CachedPod> = marked.iter().cloned().map(CachedPod::from).collect();
    let stale = plan_leftover_condition_removals(&ds, &marked);
    assert!(!stale.is_empty());
    assert_eq!(stale, plan_leftover_condition_removals(&ds, &marked_cached));
}
