//! AdvancedRollingUpdate: observe the world, take the one decision (`decide`), and
//! execute it: pull requests, then the deletions against a confirmed target.
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::context::Context;
use super::native_waits::{confirm_target, native_wait_over, wait_on_native};
use super::observe::{observe, revisions};
use super::ota::remove_leftover_conditions;
use super::progress::record_progress;
use super::pull_requests::request_pulls;
use super::rollback::roll_back;
use super::warnings::warn_once;
use crate::apply::Error;
use crate::apply::{event, issue_together, Outcome, Part, Topic};
use crate::daemonset::controls::{NodeSelector, Partition};
use crate::daemonset::decide::{
    decide, Decision, PullsObserved, Rollout, Step, World, TARGET_RECHECK,
};
use crate::daemonset::describe::shorten;
use crate::daemonset::failure::{halt_recorded, FailurePolicy, Halt};
use crate::daemonset::metrics::DeletionLabels;
use crate::daemonset::native_wait::NativeWait;
use crate::daemonset::other_updater::Sighting;
use crate::daemonset::policy::MaxUnavailable;
use crate::daemonset::pull_ahead::{pull_ahead_of, PullTries};
use crate::daemonset::revision::{CurrentRevision, TargetCheck};
use crate::daemonset::rolling_plan::{Blocker, RollingInput};
use crate::daemonset::waves::Waves;
use crate::names::{
    ANOTHER_UPDATER_ACTIVE_EVENT, HALTED_REVISION_ANNOTATION, INVALID_PULL_AHEAD_EVENT,
    REVISION_ROLLED_BACK_BEFORE_EVENT, ROLLED_BACK_FROM_ANNOTATION, ROLLOUT_HALTED_EVENT,
    UPGRADING_PODS_EVENT,
};
use crate::object::{annotation, CachedPod};

/// The operator's controls on an AdvancedRollingUpdate, as its annotations read now
/// (`rollgate.io/pull-ahead` is read with the rest of the world, since it can be wrong).
#[derive(Debug, Clone, Copy)]
pub(super) struct Controls<'a> {
    pub(super) max_unavailable: MaxUnavailable,
    /// `rollgate.io/paused`: the plan is made, its deletions held.
    pub(super) paused: bool,
    pub(super) partition: Option<Partition>,
    pub(super) node_selector: Option<&'a NodeSelector>,
    /// What a failing revision gets (`failure`).
    pub(super) failure: FailurePolicy,
    /// `rollgate.io/waves`.
    pub(super) waves: Option<&'a Waves>,
}

/// AdvancedRollingUpdate: observe, decide (`decide`), execute.
pub(super) async fn rolling_update(
    ds: &DaemonSet,
    ctx: &Context,
    controls: Controls<'_>,
) -> Result<Action, Error> {
    let uid = ds.uid().unwrap_or_default();
    let other_updater = other_updater_active(ds, ctx);
    let pull_ahead = pull_ahead_of(ds);
    // One look at the stores serves the plan and pull-ahead. The memo is taken out of
    // the map meanwhile, so plans of other DaemonSets do not wait (a DaemonSet is never
    // reconciled twice at once); it is put back if the decision keeps it.
    let (current, revisions) = revisions(&ctx.stores, ds);
    let mut memo = ctx
        .plan_memos
        .lock()
        .unwrap()
        .remove(&uid)
        .unwrap_or_default();
    observe(&ctx.stores, ds, current.as_ref(), &mut memo);
    let pending = ctx
        .expectations
        .lock()
        .unwrap()
        .pending(&uid, memo.pods(), Instant::now());
    // Only pull-ahead reads the pods themselves, and what was counted of their pulls.
    let hash = current.as_ref().and_then(|c| c.hash.as_deref());
    let pull_ahead_on = pull_ahead == Ok(true);
    let pods: Vec<Arc<CachedPod>> = if pull_ahead_on {
        memo.pods().cloned().collect()
    } else {
        Vec::new()
    };
    let counted = hash
        .filter(|_| pull_ahead_on)
        .map(|hash| observe_pulls(ctx, &uid, &pods, hash));
    // The leftover-condition check needs the pods with the condition alone (what the
    // memo's looks read).
    let flagged = memo.with_need_upgrade();
    // Remembered, and recorded on the DaemonSet: a restarted controller keeps the halt.
    let halted_earlier = current
        .as_ref()
        .is_some_and(|c| ctx.halted.lock().unwrap().get(&uid).map(String::as_str) == Some(c.id()))
        || halt_recorded(ds, current.as_ref());
    let world = World {
        other_updater,
        pulls: match (&counted, hash) {
            (Some((tries, unseen)), Some(hash)) => Some(PullsObserved {
                pods: &pods,
                hash,
                tries,
                unseen,
            }),
            _ => None,
        },
        pull_ahead,
        paused: controls.paused,
        plan: RollingInput {
            daemonset: ds,
            current: current.as_ref(),
            // The memo's pods and nodes are planned (`plan_rolling_update_memo`).
            pods: &[],
            nodes: &[],
            max_unavailable: controls.max_unavailable,
            now: Timestamp::now(),
            expected_deletions: &pending.deletions,
            vacated_by_us: &pending.vacated,
            limits: ctx.limits,
            partition: controls.partition,
            node_selector: controls.node_selector,
            waves: controls.waves,
            // `decide` sets it from the failure policy.
            proving: None,
            list_upcoming: false,
        },
        memo: &memo,
        pull_ahead_limits: ctx.pull_ahead,
        failure: controls.failure,
        halted_earlier,
        revisions,
    };
    let Decision { step, keep_memo } = decide(&world);
    if keep_memo {
        ctx.plan_memos.lock().unwrap().insert(uid, memo);
    }
    let action = match step {
        Step::StepBack { sighting, requeue } => {
            let message = sighting.explain(ctx.other_updaters.quiet());
            warn_once(ds, ctx, ANOTHER_UPDATER_ACTIVE_EVENT, &message).await;
            tracing::info!(what = %sighting.what, at = %sighting.at, "another updater acts on this DaemonSet; no deletion");
            return Ok(Action::requeue(requeue));
        }
        Step::RefusePullAhead(error) => {
            warn_once(ds, ctx, INVALID_PULL_AHEAD_EVENT, &error.to_string()).await;
            return Ok(Action::await_change());
        }
        Step::WaitForRevision { plan } => {
            record_progress(ds, ctx, &plan);
            wait_on_native(ds, ctx, NativeWait::RevisionMissing, None).await
        }
        Step::Roll(rollout) => {
            record_failures(ds, ctx, &rollout);
            let halt = rollout.halt.as_deref();
            let rollback = halt.and_then(|h| Some((h, h.rollback_target()?)));
            // A rollback changes the revision at once (and its write is preconditioned on
            // the DaemonSet as read): nothing to record.
            if rollback.is_none() {
                record_halt(ds, ctx, halt).await;
            }
            match rollback {
                Some((halt, target)) => {
                    record_progress(ds, ctx, &rollout.plan);
                    roll_back(ds, ctx, halt, target).await?
                }
                None => execute_rollout(ds, ctx, rollout, current.as_ref()).await?,
            }
        }
    };
    remove_leftover_conditions(ds, ctx, &flagged).await?;
    Ok(action)
}

/// Remembers a halt (or its end) and says it: one Warning per halted revision, naming the
/// failed pods, their nodes and the kubelet's reasons; one per revision held because it
/// was rolled back from; the failure gauges.
fn record_failures(ds: &DaemonSet, ctx: &Context, rollout: &Rollout) {
    let uid = ds.uid().unwrap_or_default();
    let (namespace, name) = (ds.namespace().unwrap_or_default(), ds.name_any());
    let halt = rollout.halt.as_deref();
    let rolled_back_before = match &rollout.plan.progress.blocked {
        Some(Blocker::RolledBackBefore { revision }) => Some(revision),
        _ => None,
    };
    // Both wait on the operator.
    let holding = halt.is_some() || rolled_back_before.is_some();
    ctx.metrics
        .set_failures(&namespace, &name, rollout.failures.failed.len(), holding);
    let reference = ds.object_ref(&());
    if let Some(revision) = rolled_back_before {
        if ctx
            .said
            .first_time(&uid, Topic::Halt, &format!("rolled back from {revision}"))
        {
            let message = format!(
                "revision {revision} is one rollgate rolled back from ({ROLLED_BACK_FROM_ANNOTATION}): no pod is deleted for it, and the pods stay on the revisions they run. Push a fixed template, or take {revision} out of {ROLLED_BACK_FROM_ANNOTATION} to roll it out again"
            );
            tracing::warn!(%revision, %message, "revision rolled back from earlier; held");
            let warning = event(
                EventType::Warning,
                REVISION_ROLLED_BACK_BEFORE_EVENT,
                "Hold",
                message,
            );
            ctx.events.publish_detached(reference, warning);
        }
        return;
    }
    let Some(halt) = halt else {
        // Over: a later halt of the same revision is said again.
        if ctx.halted.lock().unwrap().remove(&uid).is_some() {
            ctx.said.forget(&uid, Topic::Halt);
            tracing::info!(
                "halt over: no pod of the current revision is failed, or on-failure is continue"
            );
        }
        return;
    };
    ctx.halted
        .lock()
        .unwrap()
        .insert(uid.clone(), halt.revision.clone());
    // Recorded on the DaemonSet already: said by this controller before a restart.
    let recorded = annotation(&ds.metadata, HALTED_REVISION_ANNOTATION);
    if !ctx.said.first_time(&uid, Topic::Halt, &halt.revision)
        || recorded == Some(halt.revision.as_str())
    {
        return;
    }
    let message = halt.message();
    tracing::warn!(revision = %halt.revision, failed = halt.failed.len(), %message, "rollout halted");
    let warning = event(EventType::Warning, ROLLOUT_HALTED_EVENT, "Halt", message);
    ctx.events.publish_detached(reference, warning);
}

/// Records the halted revision on the DaemonSet (`rollgate.io/halted-revision`), or
/// removes the record once no halt holds: what a restarted controller reads as "halted
/// earlier". A failed write is logged; the controller's memory still holds the halt.
async fn record_halt(ds: &DaemonSet, ctx: &Context, halt: Option<&Halt>) {
    let recorded = annotation(&ds.metadata, HALTED_REVISION_ANNOTATION);
    let wanted = halt.map(|h| h.revision.as_str());
    if recorded == wanted {
        return;
    }
    let (ns, name) = (ds.namespace().unwrap_or_default(), ds.name_any());
    let patch = json!({"metadata": {"annotations": {HALTED_REVISION_ANNOTATION: wanted}}});
    if let Err(error) = ctx
        .writer
        .merge_patch::<DaemonSet>(&ns, &name, Part::Object, &patch)
        .await
    {
        tracing::warn!(%error, ?wanted, "could not record the halt on the DaemonSet");
    }
}

/// Counts the pulls' answers into the controller's memory (`PullTries`,
/// `UnseenRequests`), and returns what pull-ahead reads of them.
pub(super) fn observe_pulls(
    ctx: &Context,
    uid: &str,
    pods: &[Arc<CachedPod>],
    hash: &str,
) -> (PullTries, BTreeSet<String>) {
    let tries = {
        let mut all = ctx.pull_tries.lock().unwrap();
        let tries = all.entry(uid.to_string()).or_default();
        tries.observe(pods, hash);
        tries.clone()
    };
    let unseen = ctx
        .pull_unseen
        .lock()
        .unwrap()
        .entry(uid.to_string())
        .or_default()
        .still_unseen(pods, Instant::now());
    (tries, unseen)
}

/// Executes a rollout step: pull requests, then, against a confirmed target, the
/// deletions (recorded as expected before any call), progress and Events.
pub(super) async fn execute_rollout(
    ds: &DaemonSet,
    ctx: &Context,
    rollout: Rollout,
    current: Option<&CurrentRevision>,
) -> Result<Action, Error> {
    let Rollout {
        plan,
        pulls,
        requeue,
        ..
    } = rollout;
    let uid = ds.uid().unwrap_or_default();
    if let Some(pulls) = &pulls {
        request_pulls(ds, ctx, pulls).await?;
    }
    // Deletions are only made against a target the DaemonSet read agrees with: in a
    // rollback a -> b -> a the revisions watch may still name b for a moment.
    if !plan.deletions.is_empty() {
        if let TargetCheck::Behind { cached, fresh } = confirm_target(ds, ctx, current).await? {
            tracing::info!(
                ?cached,
                ?fresh,
                "cached ControllerRevision behind the API server's; no deletion until they agree"
            );
            let wait = NativeWait::RevisionBehind;
            return Ok(wait_on_native(ds, ctx, wait, Some(TARGET_RECHECK)).await);
        }
    }
    native_wait_over(ds, ctx);
    // Recorded before any call: an event burst replanning while calls are in flight must
    // already see these pods as gone and their nodes as vacated.
    {
        let mut expectations = ctx.expectations.lock().unwrap();
        expectations.settle(&uid, &plan.settled);
        let now = Instant::now();
        for step in &plan.deletions {
            expectations.expect_deletion(&uid, &step.node, &step.uid, now);
        }
    }
    record_progress(ds, ctx, &plan);

    let ns = ds.namespace().unwrap_or_default();
    // The deletions of one plan are independent: issued together, each by UID.
    let calls = plan.deletions.iter().cloned().map(|step| {
        let ns = ns.as_str();
        async move {
            let result = ctx.writer.delete_pod(ns, &step.name, &step.uid).await;
            (step, result)
        }
    });
    let results = issue_together(calls).await;
    let mut deleted = Vec::new();
    let mut failure = None;
    for (step, result) in results {
        match result {
            Ok(Outcome::Written) => {
                tracing::info!(pod = %step.name, node = %step.node, reason = %step.reason, "deleted pod for upgrade");
                ctx.metrics
                    .pods_deleted
                    .get_or_create(&DeletionLabels {
                        namespace: step.namespace.clone(),
                        daemonset: ds.name_any(),
                        reason: format!("{:?}", step.reason),
                    })
                    .inc();
                deleted.push(step);
            }
            // Gone already, or replaced by a pod of the same name: its node is being
            // replaced all the same.
            Ok(Outcome::Gone | Outcome::Changed) => {
                ctx.expectations
                    .lock()
                    .unwrap()
                    .deletion_moot(&uid, &step.uid);
            }
            // Only condition writes are remembered and skipped, never a deletion.
            Ok(Outcome::Repeat) => {}
            Err(error) => {
                ctx.expectations
                    .lock()
                    .unwrap()
                    .deletion_failed(&uid, &step.node, &step.uid);
                failure.get_or_insert(error);
            }
        }
    }
    deleted.sort_by(|a, b| a.node.cmp(&b.node));
    if !deleted.is_empty() {
        // A rollout is under way: its completion is worth an Event.
        ctx.said.first_time(&uid, Topic::Progress, "rolling");
    }
    // Said once per revision, for its first deletions: kube's recorder would merge every
    // later one into that Event (same reason and action; the note users see stays the
    // first), so each further publish was a write that only raised a count, about one
    // for every two pods of a 1,000-node rollout. The deletions stay in the log and in
    // `rollgate_daemonset_pods_deleted_total`; `rollgate status` shows the progress.
    let revision = current.map(CurrentRevision::id);
    if !deleted.is_empty()
        && revision.is_some_and(|r| ctx.said.first_time(&uid, Topic::Deleting, r))
    {
        let names: Vec<String> = deleted
            .iter()
            .map(|d| format!("{} on {}", d.name, d.node))
            .collect();
        let p = &plan.progress;
        let note = format!(
            "deleted {} pod(s) for the upgrade (budget {}, unavailable before {}; Ready nodes done {}/{}): {}",
            deleted.len(),
            p.budget,
            p.unavailable,
            p.ready_updated,
            p.ready_nodes,
            shorten(&names)
        );
        ctx.events
            .publish(
                &ds.object_ref(&()),
                EventType::Normal,
                UPGRADING_PODS_EVENT,
                "DeletePods",
                note,
            )
            .await;
    }
    if let Some(e) = failure {
        return Err(e);
    }
    Ok(Action::requeue(requeue))
}

/// Another updater's last sighting on `ds`, while it counts (see `other_updater`).
pub(super) fn other_updater_active(ds: &DaemonSet, ctx: &Context) -> Option<(Sighting, Duration)> {
    let now = Timestamp::now();
    let active =
        ctx.other_updaters
            .active(&ds.namespace().unwrap_or_default(), &ds.name_any(), now);
    ctx.metrics
        .daemonsets_with_other_updater
        .set(ctx.other_updaters.count_active(now) as i64);
    active
}
