//! Pull-ahead (`rollgate.io/pull-ahead: "true"`, issue 26) on the local control plane with
//! the bed's image pull model (a kwok of the test's own with the pull gate on, and
//! hack/bed-image-puller.py): every old pod rollgate deletes had, before its deletion,
//! its node's pull of the new images answered `PullImageSuccess` by a pull Job. Read
//! from the API server's audit log (rollgate's status writes with their bodies, and its
//! pod deletions, in the order the API server received them) and from the pods' Events
//! (which name the Job), not from timing. Both toleration shapes.
//! Needs `make cluster-up`; `cargo test --test daemonset_pull_ahead -- --nocapture` narrates.
mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;
use support::daemonset::{edge_daemonset, wait_ready_on, Others};
use support::private_kwok::{Addresses, BedImagePuller, PrivateKwok};
use support::*;

const NODES: usize = 4;
/// The bed's pull time for an image a node does not have.
const PULL: &str = "6s";

/// When rollgate wrote `PodImageReady=True, PullImageSuccess` for revision `hash` on each
/// pod of `namespace` (the first such write), by pod name.
fn pull_successes(namespace: &str, hash: &str) -> BTreeMap<String, Timestamp> {
    let mut seen = BTreeMap::new();
    for r in audit_records() {
        if r.verb != "patch"
            || r.resource != "pods"
            || r.subresource.as_deref() != Some("status")
            || r.user != CONTROLLER_USER
            || r.namespace.as_deref() != Some(namespace)
            || r.code != Some(200)
        {
            continue;
        }
        let Some(body) = &r.request_object else {
            continue;
        };
        let success = body["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| {
                c["type"] == "PodImageReady"
                    && c["status"] == "True"
                    && c["reason"] == "PullImageSuccess"
                    && c["message"] == format!("controllerrevision: {hash}")
            });
        if let (true, Some(name), Some(at)) = (success, r.name.clone(), r.received) {
            seen.entry(name).or_insert(at);
        }
    }
    seen
}

/// rollgate's pod deletions in `namespace`, by pod name, when the API server got them.
fn deletions(namespace: &str) -> BTreeMap<String, Timestamp> {
    pod_deletes(namespace, Some(CONTROLLER_USER))
        .into_iter()
        .filter_map(|r| Some((r.name?, r.received?)))
        .collect()
}

async fn pull_ahead_rollout(shape: Shape, addresses: Addresses) {
    let heartbeat = format!("rollgate.test/pull-ahead-{}-heartbeat", shape.tag());
    let _kwok = PrivateKwok::start(
        &[
            ("__POD_START_DELAY_MS__", 1000),
            ("__POD_STOP_DELAY_MS__", 500),
            ("__POD_REREPORT_DELAY_MS__", 0),
        ],
        &heartbeat,
        addresses,
        true,
        &format!("pull-ahead-{}-kwok.log", shape.tag()),
    );
    let _puller = BedImagePuller::start(
        PULL,
        1000,
        &heartbeat,
        &format!("pull-ahead-{}-puller.log", shape.tag()),
    );
    let client = client().await;
    let tag = format!("pull-{}", shape.tag());
    let nodes = TestNodes::create_on(&client, &tag, NODES, &heartbeat).await;
    let ns = TestNamespace::new(&client, &tag).await;
    let n = ns.name.clone();
    // Two pulls at a time, and none past the budget's reach: the window is tested in
    // the planner, this shows the bound holds on a live cluster too.
    let controller = ControllerProcess::start_with_env(
        &n,
        "pull-ahead",
        &[
            ("ROLLGATE_PULL_AHEAD_PARALLELISM", "2"),
            ("ROLLGATE_PULL_AHEAD_LOOKAHEAD", "1"),
        ],
    );
    let dss: Api<DaemonSet> = Api::namespaced(client.clone(), &n);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &n);
    let annotations = json!({
        "apps.openyurt.io/update-strategy": "AdvancedRollingUpdate",
        "apps.openyurt.io/max-unavailable": "1",
        "rollgate.io/pull-ahead": "true",
    });
    dss.create(
        &PostParams::default(),
        &edge_daemonset("edge", &nodes, annotations, "OnDelete", shape, "edge:v1"),
    )
    .await
    .unwrap();
    wait_ready_on(
        &pods,
        &nodes.names,
        "edge:v1",
        Others::None,
        Duration::from_secs(120),
    )
    .await;
    let old: BTreeMap<String, String> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|p| {
            (
                p.metadata.name.clone().unwrap(),
                p.spec.as_ref().unwrap().node_name.clone().unwrap(),
            )
        })
        .collect();

    dss.patch(
        "edge",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "edge:v2"}]}}}})),
    )
    .await
    .unwrap();
    wait_ready_on(
        &pods,
        &nodes.names,
        "edge:v2",
        Others::None,
        Duration::from_secs(180),
    )
    .await;
    let hash = pods.list(&ListParams::default()).await.unwrap().items[0]
        .metadata
        .labels
        .as_ref()
        .unwrap()["controller-revision-hash"]
        .clone();

    // Every old pod was deleted by rollgate, after its pull succeeded.
    let pulled = pull_successes(&n, &hash);
    let deleted = deletions(&n);
    for (pod, node) in &old {
        let deleted_at = deleted.get(pod).unwrap_or_else(|| {
            panic!("old pod {pod} on {node} not deleted by rollgate: {deleted:?}")
        });
        let pulled_at = pulled.get(pod).unwrap_or_else(|| {
            panic!("old pod {pod} on {node} deleted with no PullImageSuccess written: {pulled:?}")
        });
        note(format!(
            "{}: {pod} on {node}: pull succeeded {pulled_at}, deleted {deleted_at}",
            shape.tag()
        ));
        assert!(
            pulled_at < deleted_at,
            "{pod} on {node} deleted at {deleted_at} before its pull succeeded at {pulled_at}"
        );
        // The image-pull controller's Event names the Job that pulled.
        let events = events_for(&client, &n, pod).await;
        assert!(
            events.iter().any(|(t, r, note)| t == "Normal"
                && r == "PullImageSuccess"
                && note.contains("by Job imagepull-")),
            "no PullImageSuccess Event naming a Job on {pod}: {events:?}"
        );
    }
    // The bed saw each node get the new image (the pull Job's, or later the pod's).
    let node_api: Api<Node> = Api::all(client.clone());
    for name in &nodes.names {
        let node = node_api.get(name).await.unwrap();
        let images: Vec<String> = node
            .status
            .and_then(|s| s.images)
            .unwrap_or_default()
            .into_iter()
            .flat_map(|i| i.names.unwrap_or_default())
            .collect();
        assert!(images.iter().any(|i| i == "edge:v2"), "{name}: {images:?}");
    }
    let ds_events = events_for(&client, &n, "edge").await;
    assert!(
        ds_events
            .iter()
            .any(|(t, r, _)| t == "Normal" && r == "PullingImagesAhead"),
        "{ds_events:?}"
    );

    // A bad value: a Warning naming the accepted forms.
    dss.patch(
        "edge",
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"annotations": {"rollgate.io/pull-ahead": "yes"}}})),
    )
    .await
    .unwrap();
    let warning = wait_for(
        "a Warning InvalidPullAhead",
        Duration::from_secs(30),
        || async {
            events_for(&client, &n, "edge")
                .await
                .into_iter()
                .find(|(t, r, _)| t == "Warning" && r == "InvalidPullAhead")
                .ok_or_else(|| "none yet".to_string())
        },
    )
    .await;
    assert!(warning.2.contains("expected true or false"), "{warning:?}");

    drop(controller);
    ns.cleanup().await;
    nodes.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_ahead_pulls_each_node_before_its_old_pod_is_deleted_tolerating_all_taints() {
    pull_ahead_rollout(
        Shape::ToleratesAll,
        Addresses {
            cidr: "10.57.0.0/16",
            node_ip: "10.56.0.1",
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_ahead_pulls_each_node_before_its_old_pod_is_deleted_tolerating_none() {
    pull_ahead_rollout(
        Shape::ToleratesNone,
        Addresses {
            cidr: "10.55.0.0/16",
            node_ip: "10.54.0.1",
        },
    )
    .await;
}
