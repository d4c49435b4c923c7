//! A rollout in waves, on the local control plane: `rollgate.io/waves` puts two of five
//! nodes (label `rollgate.test/pool=canary`) in a canary wave and the rest after it.
//!
//! - The second wave does not start before the first has baked: once both canary pods
//!   run the new revision, rollgate deletes nothing more (counted in the API server's
//!   audit log, by rollgate's identity) until `rollgate.io/wave-bake` has passed since the
//!   last of them turned Ready; `rollgate status` says the wave bakes; then the rest
//!   rolls out with one `WaveStarted` Event.
//! - A failure in the canary wave leaves the other waves untouched: a crash-looping
//!   revision fails on the two canary nodes (below the failure threshold, so no halt
//!   helps), and no node outside the canary is touched.
//!
//! Both toleration shapes. Needs `make cluster-up`; `cargo test --test daemonset_waves --
//! --ignored --nocapture` narrates.
mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ListParams, Patch, PatchParams};
use kube::Api;
use serde_json::json;
use support::daemonset::{
    image_of, node_of, rollgate_status, wait_ready_on, waits_in, EdgeBed, Others,
};
use support::*;

const NODES: usize = 5;
const CANARY: usize = 2;
const POOL: &str = "rollgate.test/pool";

/// Pod DELETE calls by rollgate's identity in `namespace` so far.
fn rollgate_deletions(namespace: &str) -> usize {
    pod_deletes(namespace, Some(CONTROLLER_USER)).len()
}

/// Five nodes, the first two labelled canary, and the DaemonSet of edge:v1 on them with
/// `annotations` and the waves `canary; *`.
async fn bed(
    tag: &str,
    shape: Shape,
    mut annotations: serde_json::Value,
) -> (EdgeBed, Vec<String>) {
    let client = client().await;
    let nodes = TestNodes::create(&client, tag, NODES).await;
    let canary: Vec<String> = nodes.names[..CANARY].to_vec();
    let api: Api<Node> = Api::all(client.clone());
    for name in &canary {
        let patch = json!({"metadata": {"labels": {POOL: "canary"}}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }
    annotations["apps.openyurt.io/update-strategy"] = json!("AdvancedRollingUpdate");
    annotations["rollgate.io/waves"] = json!(format!("{POOL}=canary; *"));
    let bed = EdgeBed::start(
        client,
        nodes,
        tag,
        "waves",
        &[],
        annotations,
        shape,
        Duration::from_secs(90),
    )
    .await;
    (bed, canary)
}

async fn pods(bed: &EdgeBed) -> Vec<Pod> {
    bed.pods.list(&ListParams::default()).await.unwrap().items
}

/// When the Ready condition of the live pod of `image` on `node` last turned.
fn ready_since(pods: &[Pod], node: &str, image: &str) -> k8s_openapi::jiff::Timestamp {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| node_of(p).as_deref() == Some(node) && image_of(p) == image)
        .flat_map(|p| p.status.iter().flat_map(|s| s.conditions.iter().flatten()))
        .find(|c| c.type_ == "Ready" && c.status == "True")
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0)
        .unwrap_or_else(|| panic!("no Ready {image} pod on {node}"))
}

async fn the_next_wave_waits_for_the_bake(shape: Shape) {
    const BAKE: i64 = 30;
    let tag = format!("waves-bake-{}", shape.tag());
    let annotations = json!({
        "apps.openyurt.io/max-unavailable": "2",
        "rollgate.io/wave-bake": format!("{BAKE}s"),
    });
    let (bed, canary) = bed(&tag, shape, annotations).await;
    let n = bed.ns.name.clone();

    note("a new template: the canary wave goes first");
    bed.set_image("edge:v2").await;
    wait_ready_on(
        &bed.pods,
        &canary,
        "edge:v2",
        Others::Allowed,
        Duration::from_secs(90),
    )
    .await;
    let now = pods(&bed).await;
    let last_ready = canary
        .iter()
        .map(|node| ready_since(&now, node, "edge:v2"))
        .max()
        .unwrap();
    let baked_at = last_ready + k8s_openapi::jiff::SignedDuration::from_secs(BAKE);
    let left = baked_at.duration_since(k8s_openapi::jiff::Timestamp::now());
    note(format!(
        "the canary wave runs edge:v2; the bake ends in {left}"
    ));
    assert!(
        left.as_secs() >= 10,
        "premise: the bake has time left to watch ({left})"
    );
    let status = rollgate_status(&n, &[]);
    assert!(
        status.contains(&format!("wave 1 of 2 ({POOL}=canary) is baking")),
        "rollgate status during the bake: {status}"
    );
    assert!(
        status.contains("waves: 1 (") && status.contains("current, baking"),
        "{status}"
    );
    // Watched until 3 s before the bake ends: rollgate deletes nothing meanwhile.
    let watch = Duration::try_from(left).unwrap() - Duration::from_secs(3);
    holds_for(
        "no deletion outside the canary during the bake",
        watch,
        || async {
            match rollgate_deletions(&n) {
                CANARY => Ok(()),
                other => Err(format!("{other} deletion(s); {CANARY} for the canary")),
            }
        },
    )
    .await;
    let others: Vec<String> = bed.nodes.names[CANARY..].to_vec();
    assert!(
        pods(&bed)
            .await
            .iter()
            .filter(|p| others.contains(&node_of(p).unwrap_or_default()))
            .all(|p| image_of(p) == "edge:v1" && p.metadata.deletion_timestamp.is_none()),
        "the second wave untouched during the bake"
    );

    note("baked: the second wave rolls out");
    wait_ready_on(
        &bed.pods,
        &bed.nodes.names,
        "edge:v2",
        Others::None,
        Duration::from_secs(120),
    )
    .await;
    let started = events_for(&bed.client, &n, "edge")
        .await
        .into_iter()
        .filter(|(_, r, _)| r == "WaveStarted")
        .map(|(_, _, m)| m)
        .collect::<Vec<_>>();
    assert_eq!(started.len(), 1, "{started:?}");
    assert!(started[0].contains("wave 2 of 2 (*) starts"), "{started:?}");
    bed.cleanup().await;
}

async fn a_failing_canary_leaves_the_other_waves_untouched(shape: Shape) {
    let tag = format!("waves-fail-{}", shape.tag());
    // The threshold is above the canary's two nodes: no halt, the wave alone holds.
    let annotations = json!({
        "apps.openyurt.io/max-unavailable": "3",
        "rollgate.io/failure-threshold": "3",
        "rollgate.io/wave-bake": "0",
    });
    let (bed, canary) = bed(&tag, shape, annotations).await;
    let n = bed.ns.name.clone();

    note("a crash-looping template: it fails on the canary nodes");
    bed.set_image("edge:v2-crashloop").await;
    wait_for(
        "both canary pods in CrashLoopBackOff",
        Duration::from_secs(90),
        || async {
            let list = pods(&bed).await;
            let crashing = list
                .iter()
                .filter(|p| image_of(p) == "edge:v2-crashloop")
                .filter(|p| waits_in(p, "CrashLoopBackOff"))
                .count();
            // More than the canary is what the waves prevent: the count below says so.
            if crashing >= CANARY {
                Ok(())
            } else {
                Err(describe_pods(&list))
            }
        },
    )
    .await;
    holds_for(
        "no node outside the canary touched",
        Duration::from_secs(15),
        || async {
            match rollgate_deletions(&n) {
                CANARY => Ok(()),
                other => Err(format!("{other} deletion(s); {CANARY} for the canary")),
            }
        },
    )
    .await;
    let list = pods(&bed).await;
    for node in &bed.nodes.names[CANARY..] {
        assert!(
            list.iter()
                .any(|p| node_of(p).as_deref() == Some(node.as_str()) && image_of(p) == "edge:v1"),
            "{node} still runs edge:v1: {}",
            describe_pods(&list)
        );
    }
    let status = rollgate_status(&n, &[]);
    assert!(
        status.contains("waves: 1 (") && status.contains("current, rolling, 0 of 2"),
        "rollgate status: {status}"
    );
    assert!(
        !canary.is_empty() && !status.contains("halted"),
        "below the threshold, not halted: {status}"
    );
    bed.cleanup().await;
}

#[tokio::test]
#[ignore = "needs a cluster: make test"]
async fn the_next_wave_waits_for_the_bake_tolerating_all_taints() {
    the_next_wave_waits_for_the_bake(Shape::ToleratesAll).await;
}

#[tokio::test]
#[ignore = "needs a cluster: make test"]
async fn the_next_wave_waits_for_the_bake_tolerating_none() {
    the_next_wave_waits_for_the_bake(Shape::ToleratesNone).await;
}

#[tokio::test]
#[ignore = "needs a cluster: make test"]
async fn a_failing_canary_leaves_the_other_waves_untouched_tolerating_all_taints() {
    a_failing_canary_leaves_the_other_waves_untouched(Shape::ToleratesAll).await;
}

#[tokio::test]
#[ignore = "needs a cluster: make test"]
async fn a_failing_canary_leaves_the_other_waves_untouched_tolerating_none() {
    a_failing_canary_leaves_the_other_waves_untouched(Shape::ToleratesNone).await;
}
