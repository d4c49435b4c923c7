//! A revision that fails stops by itself, on the local control plane: a template whose
//! container crash-loops (the bed's `crashloop` image, hack/kwok-stages.yaml: waiting in
//! CrashLoopBackOff, restartCount climbing) halts the AdvancedRollingUpdate once as many
//! of its pods failed as `rollgate.io/failure-threshold` says, with one `RolloutHalted`
//! Warning (its occurrences read from the Event's series, not from timing) that names the
//! revision, the pods, their nodes and the kubelet's reason; `rollgate status` says
//! "halted", and the `rollgate_daemonset_rollout_halted` gauge is 1.
//!
//! A bad threshold first: a Warning naming the accepted forms, and no deletion until it
//! is fixed. Then what today's budget alone would not hold: a failed node goes NotReady, which
//! frees a node of the budget, and rollgate still deletes nothing (counted in the API
//! server's audit log, by rollgate's identity). `rollgate.io/on-failure: continue` goes
//! on without a new template (one more deletion), and a new template is a new revision
//! that rolls out onto every Ready node. Both toleration shapes.
//! Needs `make cluster-up`; `cargo test --test daemonset_failure -- --ignored --nocapture` narrates.
mod support;

use std::time::Duration;

use kube::api::ListParams;
use kube::ResourceExt;
use serde_json::json;
use support::daemonset::{image_of, node_of, rollgate_status, wait_ready_on, EdgeBed, Others};
use support::*;

const NODES: usize = 5;

/// Pod DELETE calls by rollgate's identity in `namespace` so far.
fn rollgate_deletions(namespace: &str) -> usize {
    pod_deletes(namespace, Some(CONTROLLER_USER)).len()
}

/// How often `reason` was reported about the DaemonSet "edge", by its Events' counts.
async fn occurrences(bed: &EdgeBed, reason: &str) -> u32 {
    event_records(&bed.client, &bed.ns.name, "edge")
        .await
        .iter()
        .filter(|e| e.reason == reason)
        .map(|e| e.occurrences)
        .sum()
}

async fn a_crash_looping_revision_halts(shape: Shape) {
    let tag = format!("halt-{}", shape.tag());
    let client = client().await;
    let nodes = TestNodes::create(&client, &tag, NODES).await;
    let annotations = json!({
        "apps.openyurt.io/update-strategy": "AdvancedRollingUpdate",
        "apps.openyurt.io/max-unavailable": "2",
        "rollgate.io/failure-threshold": "2",
    });
    let bed = EdgeBed::start(
        client,
        nodes,
        &tag,
        "failure",
        &[],
        annotations,
        shape,
        Duration::from_secs(90),
    )
    .await;
    let n = bed.ns.name.clone();

    note("a template whose container crash-loops, under a threshold that is no threshold");
    bed.patch(json!({"metadata": {"annotations": {"rollgate.io/failure-threshold": "0"}}}))
        .await;
    bed.set_image("edge:v2-crashloop").await;
    let refused = wait_for(
        "a Warning InvalidFailureThreshold",
        Duration::from_secs(30),
        || async {
            let events = events_for(&bed.client, &n, "edge").await;
            events
                .iter()
                .find(|(t, r, _)| t == "Warning" && r == "InvalidFailureThreshold")
                .map(|(_, _, m)| m.clone())
                .ok_or_else(|| format!("{events:?}"))
        },
    )
    .await;
    assert!(
        refused.contains("\"0\"")
            && refused.contains("a positive integer (e.g. 3) or a whole percentage"),
        "the Warning names the value and the accepted forms: {refused}"
    );
    holds_for(
        "no deletion while the threshold is bad",
        Duration::from_secs(6),
        || async {
            match rollgate_deletions(&n) {
                0 => Ok(()),
                some => Err(format!("{some} deletion(s)")),
            }
        },
    )
    .await;
    note("the threshold fixed: the rollout starts");
    bed.patch(json!({"metadata": {"annotations": {"rollgate.io/failure-threshold": "2"}}}))
        .await;
    let failed: Vec<(String, String)> = wait_for(
        "two new pods in CrashLoopBackOff",
        Duration::from_secs(60),
        || async {
            let list = bed
                .pods
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items;
            let crashing: Vec<(String, String)> = list
                .iter()
                .filter(|p| {
                    image_of(p) == "edge:v2-crashloop" && p.metadata.deletion_timestamp.is_none()
                })
                .filter(|p| {
                    p.status
                        .iter()
                        .flat_map(|s| s.container_statuses.iter().flatten())
                        .any(|c| {
                            c.state
                                .as_ref()
                                .and_then(|s| s.waiting.as_ref())
                                .and_then(|w| w.reason.as_deref())
                                == Some("CrashLoopBackOff")
                        })
                })
                .map(|p| {
                    (
                        p.metadata.name.clone().unwrap_or_default(),
                        node_of(p).unwrap_or_default(),
                    )
                })
                .collect();
            if crashing.len() == 2 {
                Ok(crashing)
            } else {
                Err(describe_pods(&list))
            }
        },
    )
    .await;
    assert_eq!(rollgate_deletions(&n), 2, "the budget's two deletions");
    // Read now, checked below (after what today's code gets wrong first).
    let status_at_halt = rollgate_status(&n, &[]);

    note("a failed node goes NotReady: the budget has room again, the halt holds");
    let (_, cut) = failed[0].clone();
    bed.nodes.set_heartbeat(&cut, false).await;
    bed.nodes
        .wait_ready(&cut, false, Duration::from_secs(60))
        .await;
    holds_for(
        "no deletion by rollgate while halted",
        Duration::from_secs(12),
        || async {
            match rollgate_deletions(&n) {
                2 => Ok(()),
                more => Err(format!("{more} deletion(s); 2 before the halt")),
            }
        },
    )
    .await;
    let v1_left = bed
        .pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|p| image_of(p) == "edge:v1" && p.metadata.deletion_timestamp.is_none())
        .count();
    assert_eq!(v1_left, NODES - 2, "the v1 pods stay");

    let events = events_for(&bed.client, &n, "edge").await;
    let halted = events
        .iter()
        .find(|(t, r, _)| t == "Warning" && r == "RolloutHalted")
        .map(|(_, _, m)| m.clone())
        .unwrap_or_else(|| panic!("no Warning RolloutHalted: {events:?}"));
    note(format!("RolloutHalted: {halted}"));
    for (pod, node) in &failed {
        assert!(
            halted.contains(&format!("{pod} on {node} (CrashLoopBackOff)")),
            "the Warning names {pod} on {node} and the kubelet's reason: {halted}"
        );
    }
    assert!(halted.contains("2 of 2"), "{halted}");
    assert_eq!(
        occurrences(&bed, "RolloutHalted").await,
        1,
        "the halt is said once"
    );
    assert!(
        status_at_halt.contains("halted: 2 of 2 failed (CrashLoopBackOff: 2)"),
        "rollgate status at the halt: {status_at_halt}"
    );
    // One failed pod left on a Ready node: below the threshold, halted all the same.
    let status = rollgate_status(&n, &[]);
    assert!(
        status.contains("failed pods of revision") && status.contains("(CrashLoopBackOff)"),
        "rollgate status: {status}"
    );
    let gauge =
        format!("rollgate_daemonset_rollout_halted{{namespace=\"{n}\",daemonset=\"edge\"}}");
    assert_eq!(bed.controller.metric(&gauge).await, 1.0, "{gauge}");

    note("on-failure continue: the rollout goes on without a new template");
    bed.patch(json!({"metadata": {"annotations": {"rollgate.io/on-failure": "continue"}}}))
        .await;
    wait_for(
        "one more deletion within the budget",
        Duration::from_secs(30),
        || async {
            match rollgate_deletions(&n) {
                3 => Ok(()),
                other => Err(format!("{other} deletion(s)")),
            }
        },
    )
    .await;

    note("a fixed template: a new revision rolls out on every Ready node");
    bed.patch(json!({"metadata": {"annotations": {"rollgate.io/on-failure": null}}}))
        .await;
    bed.set_image("edge:v3").await;
    let ready: Vec<String> = bed
        .nodes
        .names
        .iter()
        .filter(|name| **name != cut)
        .cloned()
        .collect();
    wait_ready_on(
        &bed.pods,
        &ready,
        "edge:v3",
        Others::Allowed,
        Duration::from_secs(120),
    )
    .await;
    // The failing revision may have been said halted again between the end of
    // `continue` and the new template (the halt resumed, as it should); the healthy
    // revision never is.
    let v3_revision = bed
        .pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .find(|p| image_of(p) == "edge:v3")
        .and_then(|p| p.labels().get("controller-revision-hash").cloned())
        .expect("a v3 pod with its revision hash");
    let events = events_for(&bed.client, &n, "edge").await;
    let halts: Vec<&String> = events
        .iter()
        .filter(|(t, r, _)| t == "Warning" && r == "RolloutHalted")
        .map(|(_, _, m)| m)
        .collect();
    assert!(
        halts.iter().all(|m| !m.contains(&v3_revision)),
        "a healthy revision is not halted: {halts:?}"
    );
    assert!(occurrences(&bed, "RolloutHalted").await <= 2, "{halts:?}");
    bed.cleanup().await;
}

#[tokio::test]
#[ignore = "needs a cluster: make test"]
async fn a_crash_looping_revision_halts_and_deletes_nothing_more_tolerating_all_taints() {
    a_crash_looping_revision_halts(Shape::ToleratesAll).await;
}

#[tokio::test]
#[ignore = "needs a cluster: make test"]
async fn a_crash_looping_revision_halts_and_deletes_nothing_more_tolerating_none() {
    a_crash_looping_revision_halts(Shape::ToleratesNone).await;
}
