//! A rollout's progress in the metrics, and in one Event each time its state changes.
use k8s_openapi::api::apps::v1::DaemonSet;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use super::context::Context;
use crate::apply::{event, Topic};
use crate::daemonset::describe::{describe, shorten};
use crate::daemonset::rolling_plan::{Blocker, RollingPlan};
use crate::names::{
    CURRENT_REVISION_UNKNOWN_EVENT, OLD_PODS_ON_UNPLACED_NODES_EVENT, ROLLOUT_COMPLETE_EVENT,
    ROLLOUT_HELD_BACK_EVENT, ROLLOUT_PAUSED_EVENT, WAITING_FOR_NOT_READY_NODES_EVENT,
    WAVE_STARTED_EVENT,
};

/// Updates metrics and, when the rollout's state changes, says so in one Event.
pub(super) fn record_progress(ds: &DaemonSet, ctx: &Context, plan: &RollingPlan) {
    let p = &plan.progress;
    let (namespace, name) = (ds.namespace().unwrap_or_default(), ds.name_any());
    ctx.metrics.set_progress(&namespace, &name, p);

    let uid = ds.uid().unwrap_or_default();
    let said = match &p.blocked {
        // Said only after a rollout step (deletions mark the topic), and never for an
        // empty DaemonSet, so creating a DaemonSet does not announce a "rollout".
        Some(Blocker::Complete)
            if p.total_nodes == 0 || !ctx.said.has_said(&uid, Topic::Progress) =>
        {
            None
        }
        Some(Blocker::Complete) => Some((
            ROLLOUT_COMPLETE_EVENT,
            match p.unplaced_nodes.len() {
                0 => format!("all {} node(s) run the current revision", p.total_nodes),
                kept => format!(
                    "all {} node(s) run the current revision; old pods kept on {kept} node(s) where the DaemonSet no longer places a pod: {}",
                    p.total_nodes,
                    shorten(&p.unplaced_nodes)
                ),
            },
        )),
        Some(Blocker::WaitingForSkippedNodes { .. }) => {
            Some((WAITING_FOR_NOT_READY_NODES_EVENT, describe(p)))
        }
        Some(Blocker::CurrentRevisionUnknown) => {
            Some((CURRENT_REVISION_UNKNOWN_EVENT, describe(p)))
        }
        Some(Blocker::Paused { .. }) => Some((ROLLOUT_PAUSED_EVENT, describe(p))),
        Some(Blocker::HeldBack) => Some((ROLLOUT_HELD_BACK_EVENT, describe(p))),
        _ => None,
    };
    // Said once per set of nodes, beside the progress: these nodes stay old for good.
    if !p.unplaced_nodes.is_empty() {
        let note = format!(
            "old pods kept on {} node(s) where the DaemonSet no longer places a pod (a taint it does not tolerate, or its node selector or affinity): {}; not replaced, since nothing would recreate them",
            p.unplaced_nodes.len(),
            shorten(&p.unplaced_nodes)
        );
        if ctx.said.first_time(&uid, Topic::Placement, &note) {
            tracing::warn!(nodes = ?p.unplaced_nodes, "old pods kept on unplaced nodes");
            let warning = event(
                EventType::Warning,
                OLD_PODS_ON_UNPLACED_NODES_EVENT,
                "Rollout",
                note,
            );
            ctx.events.publish_detached(ds.object_ref(&()), warning);
        }
    }
    // A wave after the first starting: the one before it is proven and baked.
    if let Some(waves) = p.waves.as_ref().filter(|w| w.current > 0) {
        let generation = ds.metadata.generation.unwrap_or_default();
        let key = format!("{generation}:{}", waves.current);
        if ctx.said.first_time(&uid, Topic::Wave, &key) {
            let note = match waves.waves.get(waves.current) {
                Some(_) => format!(
                    "{} starts: the wave before it runs the new revision, available, baked for {}s",
                    waves.describe(),
                    waves.bake.as_secs()
                ),
                None => format!("{}: proven and baked", waves.describe()),
            };
            tracing::info!(%note, "wave");
            let started = event(EventType::Normal, WAVE_STARTED_EVENT, "Rollout", note);
            ctx.events.publish_detached(ds.object_ref(&()), started);
        }
    }
    if let Some((reason, note)) = said {
        if ctx.said.first_time(&uid, Topic::Progress, &note) {
            tracing::info!(reason, %note, "rollout progress");
            // Fire and forget: progress Events must not slow the next deletion.
            let progress = event(EventType::Normal, reason, "Rollout", note);
            ctx.events.publish_detached(ds.object_ref(&()), progress);
        }
    }
}
