//! Apply, pod side: the gate condition writes of a plan (in flight together), the flip
//! latencies of the gates that turn True, and the one write every other path uses.
use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ObjectReference, Service};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::Resource;
use serde_json::json;

use super::context::{Context, Error, EVENT_ACTION};
use super::model::{gate_condition_type, ConditionWrite, GatePlan, GatePod};
use super::pods::containers_ready_since;
use super::writes_in_flight::PlannedWrite;
use crate::apply::{event, issue_together, ConditionPatch, Outcome};
use crate::names::{GateReason, GATE_TIMED_OUT_EVENT};
use crate::object::CachedPod;

/// The plan's condition writes, sent without waiting for them (issue 46). kube-runtime
/// runs one reconcile of a Service at a time, so a reconcile that waited for 500 flips
/// (3 s at this machine's API server rate) held the Service's next look back as long,
/// and health was read at 0.4/s instead of the fast poll's 2/s: each backend turning
/// healthy waited for the writes of the ones before it. A pod whose earlier write
/// still waits for its slot has it replaced by this plan's (`WritesInFlight::claim`);
/// one whose earlier write is being sent is left out, and once that write is answered
/// the Service's next look is brought forward (`Poller::look_again_soon`) so that a
/// plan writes it: its echo triggers nothing, and this plan counted the gate as
/// written, so without that the gate waited for the slow look (8 s in the 500-pod
/// bench, issue 46). A failed write is logged and counted, and brings the next look
/// forward too, which writes it again.
pub fn send_conditions(
    ctx: &Arc<Context>,
    service: &ObjectReference,
    pods: &[(Arc<CachedPod>, GatePod)],
    decided: &GatePlan,
    observed_at: Timestamp,
) {
    let key = ObjectRef::<Service>::new(service.name.as_deref().unwrap_or_default())
        .within(service.namespace.as_deref().unwrap_or_default());
    let mut claims = Vec::new();
    for (pod, view, write) in in_order(pods, decided) {
        let planned = PlannedWrite {
            pod: pod.clone(),
            view: view.clone(),
            write: write.clone(),
            observed_at,
        };
        if let Some(claim) = ctx.writes_in_flight.claim(&write.uid, &key.name, planned) {
            claims.push(claim);
        }
    }
    if claims.is_empty() {
        return;
    }
    let ctx = ctx.clone();
    let service = service.clone();
    tokio::spawn(async move {
        // Built in a loop, not a closure over references: the future stays `Send`.
        let mut calls = Vec::with_capacity(claims.len());
        for claim in claims {
            let (ctx, service, key) = (&ctx, &service, &key);
            calls.push(async move {
                let written = {
                    let _slot = ctx.writes_in_flight.slot().await;
                    // The latest plan's write for this gate, which may have replaced
                    // the one this plan queued.
                    match claim.take() {
                        Some(p) => {
                            write_one(ctx, service, &p.pod, &p.view, &p.write, p.observed_at)
                                .await
                        }
                        None => Ok(Outcome::Repeat),
                    }
                };
                // Released before the look is asked for, so that its plan writes it.
                if claim.release() {
                    tracing::debug!(service = %key.name, "a later plan's gate write came while this one was being sent; looking again soon to write it");
                    ctx.poller.look_again_soon(key);
                }
                written
            });
        }
        let failed: Vec<Error> = issue_together(calls)
            .await
            .into_iter()
            .filter_map(Result::err)
            .collect();
        if let Some(first) = failed.first() {
            tracing::warn!(service = %key.name, namespace = ?key.namespace, failed = failed.len(), error = %first, "gate condition writes failed; looking again soon to write them again");
            ctx.metrics
                .condition_write_errors
                .inc_by(failed.len() as u64);
            ctx.poller.look_again_soon(&key);
        }
    });
}

/// The plan's condition writes, in flight together (500 pods turning True in one
/// reconcile must not wait for each other), each followed by its flip latencies.
pub async fn write_conditions(
    ctx: &Context,
    service: &ObjectReference,
    pods: &[(Arc<CachedPod>, GatePod)],
    decided: &GatePlan,
    observed_at: Timestamp,
) -> Result<(), Error> {
    // Built in a loop, not a closure over references: the future stays `Send` for any
    // lifetime the runner needs.
    let mut calls = Vec::new();
    for (pod, view, write) in in_order(pods, decided) {
        calls.push(write_one(ctx, service, pod, view, write, observed_at));
    }
    // Every write is tried; the first failure is returned after all were.
    let outcomes: Result<Vec<Outcome>, Error> = issue_together(calls).await.into_iter().collect();
    outcomes.map(drop)
}

/// The plan's condition writes with the pods they are for (a pod no longer listed is
/// skipped), gates turning True first: they are what a rollout waits for.
fn in_order<'a>(
    pods: &'a [(Arc<CachedPod>, GatePod)],
    decided: &'a GatePlan,
) -> Vec<(&'a Arc<CachedPod>, &'a GatePod, &'a ConditionWrite)> {
    let by_uid: HashMap<&str, &(Arc<CachedPod>, GatePod)> =
        pods.iter().map(|p| (p.1.uid.as_str(), p)).collect();
    let mut writes: Vec<&ConditionWrite> = decided.conditions.iter().collect();
    writes.sort_by_key(|w| !w.status);
    writes
        .into_iter()
        .filter_map(|write| {
            let (pod, view) = by_uid.get(write.uid.as_str())?;
            Some((pod, view, write))
        })
        .collect()
}

/// One condition write to the gate of `service`, and the flip latencies when it turns
/// the gate True.
async fn write_one(
    ctx: &Context,
    service: &ObjectReference,
    pod: &CachedPod,
    view: &GatePod,
    write: &ConditionWrite,
    observed_at: Timestamp,
) -> Result<Outcome, Error> {
    let ns = service.namespace.as_deref().unwrap_or_default();
    let name = service.name.as_deref().unwrap_or_default();
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
        if write.reason == GateReason::GateTimedOut {
            warn_timed_out(ctx, service, pod, write);
        }
    }
    Ok(outcome)
}

/// A gate timed out: one Warning on the pod and one on its Service (each names the
/// reason the gate last waited on), and the count an alert fires on. Once per flip:
/// the gate stays True while the backend stays unhealthy.
fn warn_timed_out(
    ctx: &Context,
    service: &ObjectReference,
    pod: &CachedPod,
    write: &ConditionWrite,
) {
    let ns = service.namespace.as_deref().unwrap_or_default();
    let name = service.name.as_deref().unwrap_or_default();
    ctx.metrics.timed_out(ns, name);
    tracing::warn!(pod = %write.pod, service = name, message = %write.message, "gate timed out");
    let warning =
        |note: String| event(EventType::Warning, GATE_TIMED_OUT_EVENT, EVENT_ACTION, note);
    let on_pod = format!("the gate of Service {name}: {}", write.message);
    let on_service = format!("the gate of pod {}: {}", write.pod, write.message);
    ctx.events
        .publish_detached(pod.object_ref(&()), warning(on_pod));
    ctx.events
        .publish_detached(service.clone(), warning(on_service));
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
