//! Waits on the native DaemonSet controller (how long, and a stall said once), and the
//! quorum read that confirms a cached target revision before rollgate deletes against it.
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use kube::api::ListParams;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};

use super::context::Context;
use crate::apply::Error;
use crate::apply::{event, Call, Topic};
use crate::daemonset::native_wait::{NativeWait, Verdict};
use crate::daemonset::revision::{check_target, CurrentRevision, TargetCheck, VerifiedTarget};
use crate::names::NATIVE_CONTROLLER_STALLED_EVENT;

/// The DaemonSet waits on the native controller: counts how long, and past
/// `stall_after` says so once (Warning Event, deduplicated on its text) and in the
/// `native_controller_stalled` gauge. `recheck` is the caller's own next look.
pub(super) async fn wait_on_native(
    ds: &DaemonSet,
    ctx: &Context,
    wait: NativeWait,
    recheck: Option<Duration>,
) -> Action {
    let uid = ds.uid().unwrap_or_default();
    let verdict = ctx
        .waits
        .lock()
        .unwrap()
        .waiting(&uid, Instant::now(), ctx.stall_after);
    let (namespace, name) = (ds.namespace().unwrap_or_default(), ds.name_any());
    ctx.metrics
        .set_stalled(&namespace, &name, verdict == Verdict::Stalled);
    let until_stall = match verdict {
        Verdict::Within { recheck_after } => {
            tracing::debug!(?wait, "waiting for the native DaemonSet controller");
            // Nothing may fire a watch event when the threshold passes: look then.
            Some(recheck_after + Duration::from_millis(100))
        }
        Verdict::Stalled => {
            let note = wait.describe(ctx.stall_after);
            let warning = event(
                EventType::Warning,
                NATIVE_CONTROLLER_STALLED_EVENT,
                "Rollout",
                note.clone(),
            );
            let reference = ds.object_ref(&());
            let said =
                ctx.events
                    .publish_once(&ctx.said, &uid, Topic::Warning, &reference, warning);
            if said.await {
                tracing::warn!(%note, "rollout stalled on the native DaemonSet controller");
            }
            None
        }
    };
    match (recheck, until_stall) {
        (Some(a), Some(b)) => Action::requeue(a.min(b)),
        (Some(after), None) | (None, Some(after)) => Action::requeue(after),
        (None, None) => Action::await_change(),
    }
}

/// The DaemonSet does not wait on the native controller (any more).
pub(super) fn native_wait_over(ds: &DaemonSet, ctx: &Context) {
    let uid = ds.uid().unwrap_or_default();
    ctx.waits.lock().unwrap().done(&uid);
    // A later Warning (a new stall, or bad input) is said again.
    ctx.said.forget(&uid, Topic::Warning);
    ctx.metrics
        .set_stalled(&ds.namespace().unwrap_or_default(), &ds.name_any(), false);
}

/// Whether the cached target revision can be acted on: proved once per DaemonSet
/// generation and cached hash by a quorum read of its ControllerRevisions (see
/// `revision::check_target` for why that proves it).
pub(super) async fn confirm_target(
    ds: &DaemonSet,
    ctx: &Context,
    current: Option<&CurrentRevision>,
) -> Result<TargetCheck, Error> {
    let uid = ds.uid().unwrap_or_default();
    let key = VerifiedTarget::of(ds, current);
    if ctx.verified.lock().unwrap().get(&uid) == Some(&key) {
        return Ok(TargetCheck::Consistent);
    }
    let ns = ds.namespace().unwrap_or_default();
    let api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), &ns);
    // The native controller copies the template's labels onto its revisions: the
    // selector's matchLabels narrow the list, the owner reference decides.
    let selector = ds
        .spec
        .selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    // No resourceVersion: a quorum read, newer than every write before it.
    let fresh = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|source| Error {
            call: Call::ListRevisions,
            namespace: ns.clone(),
            name: ds.name_any(),
            source,
        })?;
    let check = check_target(current, CurrentRevision::of(ds, &fresh.items).as_ref());
    if check == TargetCheck::Consistent {
        ctx.verified.lock().unwrap().insert(uid, key);
    }
    Ok(check)
}
