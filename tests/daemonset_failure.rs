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
//!
//! `rollgate.io/on-failure: rollback`: the template goes back to the previous revision,
//! every node is back on it with the budget held all along (counted by an independent
//! watcher), the failed revision is recorded in `rollgate.io/rolled-back-from`, and the
//! failed template applied again (as a GitOps tool would) deletes nothing.
//!
//! A revision proves itself on as many nodes as the threshold before the whole budget
//! goes to it: with budget 4 and threshold 2, a crash-looping revision reaches 2 nodes.
//!
//! The bed's other failures: an image that never pulls halts as a crash loop does, and a
//! pod that never turns Ready halts once `rollgate.io/progress-deadline` has passed.
//! Needs `make cluster-up`; `cargo test --test daemonset_failure -- --ignored --nocapture` narrates.
mod support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::api::{Api, ListParams};
use kube::ResourceExt;
use serde_json::json;
use support::daemonset::{
    image_of, node_of, revision_hash, rollgate_status, wait_ready_on, waits_in, EdgeBed, Others,
};
use support::unavailable::Watcher;
use support::*;

const NODES: usize = 5;

/// Pod DELETE calls by rollgate's identity in `namespace` so far.
fn rollgate_deletions(namespace: &str) -> usize {
    pod_deletes(namespace, Some(CONTROLLER_USER)).len()
}

/// Waits up to 30 s for a Warning `reason` about the DaemonSet "edge": its message.
async fn warning(bed: &EdgeBed, reason: &str) -> String {
    wait_for(
        &format!("a Warning {reason}"),
        Duration::from_secs(30),
        || async {
            let events = events_for(&bed.client, &bed.ns.name, "edge").await;
            events
                .iter()
                .find(|(t, r, _)| t == "Warning" && r == reason)
                .map(|(_, _, m)| m.clone())
                .ok_or_else(|| format!("{events:?}"))
        },
    )
    .await
}

/// rollgate's pod deletions in the bed's namespace stay at `count` for `period`.
async fn deletions_stay(bed: &EdgeBed, count: usize, what: &str, period: Duration) {
    holds_for(what, period, || async {
        match rollgate_deletions(&bed.ns.name) {
            same if same == count => Ok(()),
            other => Err(format!("{other} deletion(s); {count} before")),
        }
    })
    .await;
}

/// Waits up to `timeout` until rollgate's pod deletions in the bed's namespace are
/// `count`.
async fn deletions_reach(bed: &EdgeBed, count: usize, what: &str, timeout: Duration) {
    wait_for(what, timeout, || async {
        match rollgate_deletions(&bed.ns.name) {
            same if same == count => Ok(()),
            other => Err(format!("{other} deletion(s)")),
        }
    })
    .await;
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

/// An independent watcher of the bed's nodes: Ready nodes without a serving pod.
async fn watch(bed: &EdgeBed) -> Watcher {
    let watcher = Watcher::start(
        &bed.client,
        &format!("{OWNER_LABEL}={}", bed.nodes.owner),
        &bed.ns.name,
    );
    watcher.wait_armed().await;
    watcher
}

/// `NODES` nodes and rollgate (its log tagged `log_tag`), and the DaemonSet "edge" of
/// edge:v1 Ready on them: AdvancedRollingUpdate, max-unavailable 2, failure threshold 2,
/// and the annotations of `more`.
async fn bed(tag: &str, log_tag: &str, shape: Shape, more: serde_json::Value) -> EdgeBed {
    let client = client().await;
    let nodes = TestNodes::create(&client, tag, NODES).await;
    let mut annotations = json!({
        "apps.openyurt.io/update-strategy": "AdvancedRollingUpdate",
        "apps.openyurt.io/max-unavailable": "2",
        "rollgate.io/failure-threshold": "2",
    });
    for (key, value) in more.as_object().into_iter().flatten() {
        annotations[key] = value.clone();
    }
    EdgeBed::start(
        client,
        nodes,
        tag,
        log_tag,
        &[],
        annotations,
        shape,
        Duration::from_secs(90),
    )
    .await
}

async fn a_crash_looping_revision_halts(shape: Shape) {
    let tag = format!("halt-{}", shape.tag());
    let mut bed = bed(&tag, "failure", shape, json!({})).await;
    let n = bed.ns.name.clone();

    note("a template whose container crash-loops, under a threshold that is no threshold");
    bed.patch(json!({"metadata": {"annotations": {"rollgate.io/failure-threshold": "0"}}}))
        .await;
    bed.set_image("edge:v2-crashloop").await;
    let refused = warning(&bed, "InvalidFailureThreshold").await;
    assert!(
        refused.contains("\"0\"")
            && refused.contains("a positive integer (e.g. 3) or a whole percentage"),
        "the Warning names the value and the accepted forms: {refused}"
    );
    deletions_stay(
        &bed,
        0,
        "no deletion while the threshold is bad",
        Duration::from_secs(6),
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
                .filter(|p| waits_in(p, "CrashLoopBackOff"))
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
    deletions_stay(
        &bed,
        2,
        "no deletion by rollgate while halted",
        Duration::from_secs(12),
    )
    .await;

    note("rollgate restarts while halted: the halt is read back from the DaemonSet");
    let recorded = bed
        .dss
        .get("edge")
        .await
        .unwrap()
        .annotations()
        .get("rollgate.io/halted-revision")
        .cloned();
    let v2_revision = hash_of_revision_with(&bed, "edge:v2-crashloop").await;
    assert_eq!(recorded, Some(v2_revision), "the halt is recorded");
    let stopped = std::mem::replace(
        &mut bed.controller,
        ControllerProcess::start(&n, "failure-restarted"),
    )
    .stop();
    assert!(
        stopped.success(),
        "the first controller exits cleanly: {stopped:?}"
    );
    deletions_stay(
        &bed,
        2,
        "no deletion by the restarted rollgate",
        Duration::from_secs(12),
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

    let halted = warning(&bed, "RolloutHalted").await;
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
    deletions_reach(
        &bed,
        3,
        "one more deletion within the budget",
        Duration::from_secs(30),
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

/// Budget 4 of 5 nodes, threshold 2: the crash-looping revision reaches two nodes, is
/// halted there, and the other three never lose their pod. Before a revision had to
/// prove itself, the whole budget went at once: four nodes dark.
async fn a_failing_revision_reaches_no_more_nodes_than_the_threshold(shape: Shape) {
    const THRESHOLD: usize = 2;
    let tag = format!("prove-{}", shape.tag());
    let bed = bed(
        &tag,
        "prove",
        shape,
        json!({"apps.openyurt.io/max-unavailable": "4"}),
    )
    .await;
    let watcher = watch(&bed).await;

    note("a template whose container crash-loops, budget 4, threshold 2");
    bed.set_image("edge:v2-crashloop").await;
    let halted = warning(&bed, "RolloutHalted").await;
    deletions_stay(
        &bed,
        THRESHOLD,
        "no deletion after the two that proved the revision bad",
        Duration::from_secs(10),
    )
    .await;
    let on_bad: Vec<String> = bed
        .pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && image_of(p) == "edge:v2-crashloop")
        .filter_map(node_of)
        .collect();
    assert_eq!(
        on_bad.len(),
        THRESHOLD,
        "the failing revision reached {THRESHOLD} nodes, not the budget's 4: {on_bad:?}; {halted}"
    );
    let (peak, at_peak) = watcher.peak();
    assert!(
        peak <= THRESHOLD,
        "at most {THRESHOLD} Ready nodes without a serving pod: {peak} ({at_peak:?})"
    );
    bed.cleanup().await;
}

#[tokio::test]
#[ignore = "needs a cluster: make test"]
async fn a_failing_revision_reaches_no_more_nodes_than_the_threshold_tolerating_all_taints() {
    a_failing_revision_reaches_no_more_nodes_than_the_threshold(Shape::ToleratesAll).await;
}

#[tokio::test]
#[ignore = "needs a cluster: make test"]
async fn a_failing_revision_reaches_no_more_nodes_than_the_threshold_tolerating_none() {
    a_failing_revision_reaches_no_more_nodes_than_the_threshold(Shape::ToleratesNone).await;
}

/// The hash of the DaemonSet's revision whose template runs `image`.
async fn hash_of_revision_with(bed: &EdgeBed, image: &str) -> String {
    let revisions: Api<ControllerRevision> = Api::namespaced(bed.client.clone(), &bed.ns.name);
    revisions
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .find(|r| r.data.0.to_string().contains(&format!("\"{image}\"")))
        .and_then(|r| r.labels().get("controller-revision-hash").cloned())
        .unwrap_or_else(|| panic!("no ControllerRevision runs {image}"))
}

/// The DaemonSet's `rollgate.io/rolled-back-from`, if any.
async fn rolled_back_from(bed: &EdgeBed) -> Option<String> {
    bed.dss
        .get("edge")
        .await
        .unwrap()
        .annotations()
        .get("rollgate.io/rolled-back-from")
        .cloned()
}

async fn a_crash_looping_revision_rolls_back(shape: Shape) {
    /// The bed's max-unavailable.
    const BUDGET: usize = 2;
    let tag = format!("rollback-{}", shape.tag());
    let bed = bed(
        &tag,
        "rollback",
        shape,
        json!({"rollgate.io/on-failure": "rollback"}),
    )
    .await;
    let n = bed.ns.name.clone();
    let watcher = watch(&bed).await;
    let v1_hash = revision_hash(&bed.pods.list(&ListParams::default()).await.unwrap().items[0]);

    note("a template whose container crash-loops: it fails on two nodes, and is rolled back");
    bed.set_image("edge:v2-crashloop").await;
    let recorded = wait_for(
        "the template back on edge:v1 and the failed revision recorded",
        Duration::from_secs(120),
        || async {
            let ds = bed.dss.get("edge").await.map_err(|e| e.to_string())?;
            let image = ds
                .spec
                .template
                .spec
                .as_ref()
                .and_then(|s| s.containers.first()?.image.clone())
                .unwrap_or_default();
            match ds.annotations().get("rollgate.io/rolled-back-from") {
                Some(record) if image == "edge:v1" => Ok(record.clone()),
                record => Err(format!("template {image}, record {record:?}")),
            }
        },
    )
    .await;
    let v2_hash = hash_of_revision_with(&bed, "edge:v2-crashloop").await;
    assert_eq!(recorded, v2_hash, "the record names the failed revision");
    wait_ready_on(
        &bed.pods,
        &bed.nodes.names,
        "edge:v1",
        Others::None,
        Duration::from_secs(120),
    )
    .await;
    let hashes: Vec<String> = bed
        .pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(revision_hash)
        .collect();
    assert!(
        hashes.iter().all(|h| *h == v1_hash),
        "every node back on the first revision {v1_hash}: {hashes:?}"
    );
    let (peak, at_peak) = watcher.peak();
    assert!(
        peak <= BUDGET,
        "at most {BUDGET} Ready nodes without a serving pod, the rollback included: {peak} ({at_peak:?})"
    );
    assert_eq!(
        rollgate_deletions(&n),
        2 * 2,
        "two v1 pods deleted for v2, then the two failed v2 pods for v1"
    );
    let rolled_back = warning(&bed, "RolloutRolledBack").await;
    note(format!("RolloutRolledBack: {rolled_back}"));
    assert!(
        rolled_back.contains(&format!("revision {v2_hash} failed on 2 of 2"))
            && rolled_back.contains(&format!("back to revision {v1_hash}"))
            && rolled_back.contains("CrashLoopBackOff"),
        "{rolled_back}"
    );
    assert_eq!(
        occurrences(&bed, "RolloutRolledBack").await,
        1,
        "one rollback"
    );
    let halted = warning(&bed, "RolloutHalted").await;
    assert!(
        halted.contains(&format!("rolling back to revision {v1_hash}")),
        "the halt says where it goes: {halted}"
    );
    let counter =
        format!("rollgate_daemonset_rollbacks_total{{namespace=\"{n}\",daemonset=\"edge\"}}");
    assert_eq!(bed.controller.metric(&counter).await, 1.0, "{counter}");

    note("the failed template applied again, as a GitOps tool would: held, nothing deleted");
    bed.set_image("edge:v2-crashloop").await;
    let held = warning(&bed, "RevisionRolledBackBefore").await;
    assert!(
        held.contains(&v2_hash) && held.contains("rollgate.io/rolled-back-from"),
        "{held}"
    );
    deletions_stay(
        &bed,
        4,
        "no deletion for a revision rolled back from",
        Duration::from_secs(10),
    )
    .await;
    let status = rollgate_status(&n, &[]);
    assert!(
        status.contains(&format!("held: revision {v2_hash} was rolled back from")),
        "rollgate status: {status}"
    );
    assert_eq!(rolled_back_from(&bed).await, Some(v2_hash.clone()));

    note("a fixed template: a new revision, rolled out on every node");
    bed.set_image("edge:v3").await;
    wait_ready_on(
        &bed.pods,
        &bed.nodes.names,
        "edge:v3",
        Others::None,
        Duration::from_secs(120),
    )
    .await;
    let (peak, at_peak) = watcher.peak();
    assert!(peak <= BUDGET, "{peak} ({at_peak:?})");
    bed.cleanup().await;
}

#[tokio::test]
#[ignore = "needs a cluster: make test"]
async fn a_crash_looping_revision_rolls_back_within_the_budget_tolerating_all_taints() {
    a_crash_looping_revision_rolls_back(Shape::ToleratesAll).await;
}

#[tokio::test]
#[ignore = "needs a cluster: make test"]
async fn a_crash_looping_revision_rolls_back_within_the_budget_tolerating_none() {
    a_crash_looping_revision_rolls_back(Shape::ToleratesNone).await;
}

/// The bed's other two ways to fail: an image that never pulls (`ImagePullBackOff`) halts
/// like a crash loop; a pod that runs but never turns Ready is no failure until
/// `rollgate.io/progress-deadline` has passed since its creation, then halts.
async fn a_pull_that_fails_and_a_pod_never_ready_halt(shape: Shape) {
    let tag = format!("nopull-{}", shape.tag());
    let bed = bed(&tag, "nopull", shape, json!({})).await;
    let n = bed.ns.name.clone();

    note("an image that never pulls: halted after two");
    bed.set_image("edge:v2-pullbackoff").await;
    let halted = warning(&bed, "RolloutHalted").await;
    assert!(
        halted.contains("2 of 2") && halted.contains("ImagePullBackOff"),
        "{halted}"
    );
    deletions_stay(&bed, 2, "no deletion while halted", Duration::from_secs(8)).await;

    note("a pod that never turns Ready, with a progress deadline of 20s");
    bed.patch(json!({"metadata": {"annotations": {"rollgate.io/progress-deadline": "20s"}}}))
        .await;
    bed.set_image("edge:v3-neverready").await;
    // The two nodes without a working pod are replaced at once (they serve nothing);
    // their new pods run, not Ready, and are no failure until the deadline.
    deletions_reach(
        &bed,
        4,
        "the failed pods replaced by never-ready ones",
        Duration::from_secs(60),
    )
    .await;
    let status = rollgate_status(&n, &[]);
    assert!(!status.contains("halted"), "before the deadline: {status}");
    let deadline = wait_for(
        "the progress deadline to halt the revision",
        Duration::from_secs(60),
        || async {
            let status = rollgate_status(&n, &[]);
            if status.contains("halted: 2 of 2 failed (not available by the progress deadline: 2)")
            {
                Ok(status)
            } else {
                Err(status)
            }
        },
    )
    .await;
    note(format!("rollgate status: {deadline}"));
    deletions_stay(&bed, 4, "no deletion while halted", Duration::from_secs(8)).await;
    bed.cleanup().await;
}

#[tokio::test]
#[ignore = "needs a cluster: make test"]
async fn a_pull_that_fails_and_a_pod_never_ready_halt_tolerating_all_taints() {
    a_pull_that_fails_and_a_pod_never_ready_halt(Shape::ToleratesAll).await;
}

#[tokio::test]
#[ignore = "needs a cluster: make test"]
async fn a_pull_that_fails_and_a_pod_never_ready_halt_tolerating_none() {
    a_pull_that_fails_and_a_pod_never_ready_halt(Shape::ToleratesNone).await;
}
