//! Apply, pod side: the gate condition writes of a plan (in flight together), the flip
//! latencies of the gates that turn True, and the one write every other path uses.
use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use super::context::{Context, Error};
use super::model::{gate_condition_type, ConditionWrite, GatePlan, GatePod};
use super::pods::containers_ready_since;
use crate::apply::{issue_together, ConditionPatch, Outcome};
use crate::object::CachedPod;

/// The plan's condition writes, in flight together (500 pods turning True in one
/// reconcile must not wait for each other), each followed by its flip latencies.
pub async fn write_conditions(
    ctx: &Context,
    namespace: &str,
    service: &str,
    pods: &[(Arc<CachedPod>, GatePod)],
    decided: &GatePlan,
    observed_at: Timestamp,
) -> Result<(), Error> {
    let by_uid: HashMap<&str, &(Arc<CachedPod>, GatePod)> =
        pods.iter().map(|p| (p.1.uid.as_str(), p)).collect();
    // Gates turning True first: they are what a rollout waits for.
    let mut writes: Vec<&ConditionWrite> = decided.conditions.iter().collect();
    writes.sort_by_key(|w| !w.status);
    // Built in a loop, not a closure over references: the future stays `Send` for any
    // lifetime the runner needs.
    let mut calls = Vec::with_capacity(writes.len());
    for write in writes {
        if let Some((pod, view)) = by_uid.get(write.uid.as_str()).copied() {
            calls.push(write_one(
                ctx,
                namespace,
                service,
                pod,
                view,
                write,
                observed_at,
            ));
        }
    }
    // Every write is tried; the first failure is returned after all were.
    let outcomes: Result<Vec<Outcome>, Error> = issue_together(calls).await.into_iter().collect();
    outcomes.map(drop)
}

/// One condition write, and the flip latencies when it turns the gate True.
async fn write_one(
    ctx: &Context,
    ns: &str,
    name: &str,
    pod: &CachedPod,
    view: &GatePod,
    write: &ConditionWrite,
    observed_at: Timestamp,
) -> Result<Outcome, Error> {
    let flipped = view.gate.as_ref().map(|g| g.status) != Some(write.status);
    let outcome = write_condition(ctx, ns, name, pod, write, flipped).await?;
    if outcome.landed() && flipped && write.status {
        let done = Timestamp::now();
        if let Some(since) = containers_ready_since(pod) {
            let seconds = done.duration_since(since).as_secs_f64();
            ctx.metrics.flip(ns, name, "containers_ready", seconds);
        }
        let seconds = done.duration_since(observed_at).as_secs_f64();
        ctx.metrics.flip(ns, name, "load_balancer_healthy", seconds);
        tracing::info!(pod = %write.pod, reason = write.reason.as_str(), "gate True");
    }
    Ok(outcome)
}

/// Strategic merge on the conditions list (merge key `type`): only our condition is
/// touched. `lastTransitionTime` moves only when the status does. A pod gone or
/// replaced meanwhile is skipped (its next event replans), and so is a repeat of our
/// last write that the cached `pod` the plan read does not show yet.
pub async fn write_condition(
    ctx: &Context,
    namespace: &str,
    service: &str,
    pod: &CachedPod,
    write: &ConditionWrite,
    flipped: bool,
) -> Result<Outcome, Error> {
    let mut condition = json!({
        "type": gate_condition_type(service),
        "status": if write.status { "True" } else { "False" },
        "reason": write.reason.as_str(),
        "message": write.message,
    });
    if flipped {
        condition["lastTransitionTime"] =
            json!(Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
    }
    let patch = ConditionPatch::set(namespace, &write.pod, Some(&write.uid), &condition)
        .planned_from(&pod.metadata);
    Ok(ctx.writer.write_condition(&patch).await?)
}
