//! Pull-ahead's requests written on the old pods (the image-pull controller answers them
//! with its Job), and the Events that say what started and where it gave up.
use std::time::Instant;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use super::context::Context;
use crate::apply::Error;
use crate::apply::{event, ConditionPatch};
use crate::daemonset::describe::shorten;
use crate::daemonset::pull_ahead::PullAheadPlan;
use crate::names::{PULLING_AHEAD_EVENT, PULL_AHEAD_GAVE_UP_EVENT};

/// Writes pull-ahead's requests (the image-pull controller answers them with its Job) and
/// says what it started and where it gave up.
pub(super) async fn request_pulls(
    ds: &DaemonSet,
    ctx: &Context,
    pulls: &PullAheadPlan,
) -> Result<(), Error> {
    let reference = ds.object_ref(&());
    for gave_up in &pulls.gave_up {
        tracing::warn!(node = %gave_up.node, failures = gave_up.failures, "pull-ahead gave up");
        // The node as the related object, for tools that follow Events to their nodes;
        // `rollgate status` reads the note back (`GaveUp::from_note`).
        let mut warning = event(
            EventType::Warning,
            PULL_AHEAD_GAVE_UP_EVENT,
            "PullAhead",
            gave_up.note(),
        );
        warning.secondary = Some(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(gave_up.node.clone()),
            ..Default::default()
        });
        ctx.events.publish_event(&reference, warning).await;
    }
    if pulls.requests.is_empty() {
        return Ok(());
    }
    // Each request names the pod's UID: a pod replaced meanwhile is not asked.
    let writes = pulls
        .requests
        .iter()
        .map(|r| {
            ConditionPatch::set(
                r.namespace.clone(),
                r.name.clone(),
                Some(&r.uid),
                &r.condition,
            )
        })
        .collect();
    let landed = ctx.writer.write_conditions(writes).await?;
    if landed.is_empty() {
        return Ok(());
    }
    {
        let mut unseen = ctx.pull_unseen.lock().unwrap();
        let unseen = unseen.entry(ds.uid().unwrap_or_default()).or_default();
        let now = Instant::now();
        for r in &pulls.requests {
            if landed.iter().any(|l| l.name == r.name) {
                unseen.record(&r.uid, r.stamp_before.clone(), now);
            }
        }
    }
    let nodes: Vec<String> = pulls
        .requests
        .iter()
        .filter(|r| landed.iter().any(|l| l.name == r.name))
        .map(|r| r.node.clone())
        .collect();
    let note = format!(
        "pulling the new images on {} node(s) before their old pods are deleted ({} pull(s) in flight before; deletions held for {} node(s)): {}",
        nodes.len(),
        pulls.in_flight,
        pulls.held.len(),
        shorten(&nodes)
    );
    tracing::info!(nodes = nodes.len(), "pull-ahead requested");
    let started = event(EventType::Normal, PULLING_AHEAD_EVENT, "PullAhead", note);
    ctx.events.publish_detached(reference, started);
    Ok(())
}
