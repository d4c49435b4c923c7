//! Wiring of the DaemonSet upgrade controller: observe (the shared stores) ->
//! plan (pure, `rolling_plan` / `ota_plan`) -> apply (deletions, condition writes, Events).
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{Future, StreamExt};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::Controller;
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;

use super::describe::{describe, shorten};
use super::event_dedup::{EventDedup, Topic};
use super::expectations::Expectations;
use super::metrics::{DaemonSetMetrics, DeletionLabels};
use super::ota_plan::{plan_need_upgrade_conditions, plan_stale_condition_removals};
use super::policy::{policy_for, MaxUnavailable, Policy, PolicyDecision};
use super::revision::{generation_observed, CurrentRevision};
use super::rolling_plan::{plan_rolling_update, Blocker, RollingInput, RollingLimits, RollingPlan};
use super::triggers::{daemonset_unchanged, pod_unchanged};
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::names::{
    CURRENT_REVISION_UNKNOWN_EVENT, DAEMONSET_CONTROLLER_NAME, POD_NEED_UPGRADE_CONDITION,
    ROLLOUT_COMPLETE_EVENT, UPDATE_STRATEGY_NOT_ON_DELETE_EVENT, UPGRADING_PODS_EVENT,
    WAITING_FOR_NOT_READY_NODES_EVENT, WAITING_FOR_STALE_STATUS_EVENT,
};
use crate::object::{is_controlled_by, CachedPod};
use crate::runtime::Shutdown;
use crate::watch::runner::{ReconcileError, Run};
use crate::watch::{applied, applied_unless, touched_unless, Stores, Watches};
/// API calls of one plan in flight at once (deletions, condition writes): the last pod
/// of a wave must not wait for every call before it. Marking 200 pods for OTA one call
/// at a time took 2.44 s.
const CALLS_IN_FLIGHT: usize = 16;
/// Forgotten DaemonSets are swept from memory this often (a relist can miss deletions).
const SWEEP_EVERY: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("deleting pod {namespace}/{name}: {source}")]
    DeletePod {
        namespace: String,
        name: String,
        source: kube::Error,
    },
    #[error("writing condition on pod {namespace}/{name}: {source}")]
    WriteCondition {
        namespace: String,
        name: String,
        source: kube::Error,
    },
}

impl ReconcileError for Error {
    fn metric_label(&self) -> &'static str {
        match self {
            Error::DeletePod { .. } => "delete_pod",
            Error::WriteCondition { .. } => "write_condition",
        }
    }
}

pub struct Context {
    client: Client,
    stores: Stores,
    recorder: Recorder,
    metrics: DaemonSetMetrics,
    expectations: Mutex<Expectations>,
    said: EventDedup,
    limits: RollingLimits,
}

impl Context {
    async fn publish(
        &self,
        ds: &DaemonSet,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &ds.object_ref(&())).await {
            tracing::warn!(error = %e, reason, "could not publish Event");
        }
    }

    /// Drops everything kept about a DaemonSet that is gone.
    fn forget(&self, uid: &str, namespace: &str, name: &str) {
        self.expectations.lock().unwrap().forget_daemonset(uid);
        self.said.forget_daemonset(uid);
        self.metrics.forget(namespace, name);
    }
}

/// Subscribes to the shared watches and returns the controller, ready to be driven.
pub fn start(
    watches: &Watches,
    client: Client,
    metrics: &Metrics,
    concurrency: u16,
    limits: RollingLimits,
    leadership: Leadership,
    shutdown: Shutdown,
) -> impl Future<Output = ()> {
    let stores = watches.stores.clone();
    let reporter = Reporter {
        controller: DAEMONSET_CONTROLLER_NAME.into(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let daemonset_metrics = DaemonSetMetrics::register(metrics);
    let ctx = Arc::new(Context {
        client: client.clone(),
        stores: stores.clone(),
        recorder: Recorder::new(client, reporter),
        metrics: daemonset_metrics.clone(),
        expectations: Mutex::default(),
        said: EventDedup::default(),
        limits,
    });

    let ds_for_nodes = stores.daemonsets.clone();
    // Only writes that change what the planners read re-plan (see `triggers`); a pod's
    // deletion does, since it frees its node.
    let daemonsets = applied_unless(watches.daemonset_changes(), daemonset_unchanged);
    let pods = touched_unless(watches.pod_changes(), pod_unchanged);
    let controller = Controller::for_shared_stream(daemonsets, stores.daemonsets.clone())
        .owns_shared_stream(pods)
        .owns_shared_stream(applied(watches.revision_changes()))
        // A node coming back (or leaving) re-plans every upgrade-managed DaemonSet at once.
        .watches_shared_stream(watches.node_ready_transitions(), move |_node| {
            ds_for_nodes
                .state()
                .into_iter()
                .filter(|ds| !matches!(policy_for(ds), PolicyDecision::Unmanaged))
                .map(|ds| ObjectRef::from_obj(&*ds))
                .collect::<Vec<_>>()
        });
    let run = Run {
        name: "daemonset-upgrade",
        concurrency,
        synced: watches.synced(),
        errors: daemonset_metrics.reconcile_errors.clone(),
        leadership,
        shutdown: shutdown.clone(),
    };
    let forgetting = forget_deleted(watches, ctx.clone(), shutdown);
    async move {
        tokio::join!(run.drive(controller, reconcile, ctx), forgetting);
    }
}

/// Forgets DaemonSets on deletion, and sweeps now and then for those a relist dropped.
fn forget_deleted(
    watches: &Watches,
    ctx: Arc<Context>,
    shutdown: Shutdown,
) -> impl Future<Output = ()> {
    let deletions = watches.daemonset_deletions();
    async move {
        let mut deletions = std::pin::pin!(deletions);
        let mut sweep = tokio::time::interval(SWEEP_EVERY);
        let mut stop = std::pin::pin!(shutdown.requested());
        loop {
            tokio::select! {
                gone = deletions.next() => match gone {
                    Some(ds) => ctx.forget(
                        &ds.uid().unwrap_or_default(),
                        &ds.namespace().unwrap_or_default(),
                        &ds.name_any(),
                    ),
                    None => return,
                },
                _ = sweep.tick() => {
                    let live: std::collections::HashSet<String> = ctx
                        .stores
                        .daemonsets
                        .state()
                        .iter()
                        .filter_map(|ds| ds.uid())
                        .collect();
                    ctx.said.retain(|uid| live.contains(uid));
                    ctx.expectations.lock().unwrap().retain(|uid| live.contains(uid));
                }
                _ = &mut stop => return,
            }
        }
    }
}

#[tracing::instrument(skip_all, fields(daemonset = %ds.name_any(), namespace = %ds.namespace().unwrap_or_default()))]
async fn reconcile(ds: Arc<DaemonSet>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let result = match policy_for(&ds) {
        PolicyDecision::Unmanaged => remove_stale_conditions(&ds, &ctx, &owned(&ds, &ctx).0).await,
        PolicyDecision::NotOurs { reason } => {
            warn_once(&ds, &ctx, UPDATE_STRATEGY_NOT_ON_DELETE_EVENT, &reason).await;
            remove_stale_conditions(&ds, &ctx, &owned(&ds, &ctx).0).await
        }
        PolicyDecision::Invalid(error) => {
            warn_once(
                &ds,
                &ctx,
                error.event_reason(),
                &format!("{error}; no pod is touched until it is fixed"),
            )
            .await;
            Ok(Action::await_change())
        }
        // The native controller has not processed the latest spec: its newest revision
        // may not be the target yet (a rollback a -> b -> a would then delete or mark
        // pods already on a). Its status update wakes us.
        PolicyDecision::Managed(_) if !generation_observed(&ds) => {
            tracing::debug!(
                "waiting for the DaemonSet controller to observe the latest generation"
            );
            Ok(Action::await_change())
        }
        PolicyDecision::Managed(Policy::AdvancedRollingUpdate { max_unavailable }) => {
            ctx.said
                .forget(&ds.uid().unwrap_or_default(), Topic::Warning);
            // One look at the store serves both steps.
            let (pods, current) = owned(&ds, &ctx);
            let action =
                rolling_update(&ds, &ctx, max_unavailable, &pods, current.as_ref()).await?;
            remove_stale_conditions(&ds, &ctx, &pods).await?;
            Ok(action)
        }
        PolicyDecision::Managed(Policy::Ota) => {
            ctx.said
                .forget(&ds.uid().unwrap_or_default(), Topic::Warning);
            mark_need_upgrade(&ds, &ctx).await
        }
    };
    ctx.metrics
        .reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    result
}

async fn warn_once(ds: &DaemonSet, ctx: &Context, reason: &str, message: &str) {
    let uid = ds.uid().unwrap_or_default();
    if ctx.said.first_time(&uid, Topic::Warning, message) {
        tracing::warn!(reason, message, "DaemonSet not acted upon");
        ctx.publish(
            ds,
            EventType::Warning,
            reason,
            "Validate",
            message.to_string(),
        )
        .await;
    }
}

/// This DaemonSet's pods and current revision, borrowed from the shared stores.
/// The pod store holds every pod: the controller owner reference picks this DaemonSet's.
fn owned(ds: &DaemonSet, ctx: &Context) -> (Vec<Arc<CachedPod>>, Option<CurrentRevision>) {
    let uid = ds.uid().unwrap_or_default();
    let ns = ds.namespace();
    let pods = ctx
        .stores
        .pods
        .state_filter(|p| p.metadata.namespace == ns && is_controlled_by(p, &uid));
    let revisions: Vec<Arc<ControllerRevision>> = ctx
        .stores
        .revisions
        .state_filter(|r| r.metadata.namespace == ns);
    let current = CurrentRevision::of(ds, revisions.iter().map(|r| &**r));
    (pods, current)
}

async fn rolling_update(
    ds: &DaemonSet,
    ctx: &Context,
    max_unavailable: MaxUnavailable,
    pods: &[Arc<CachedPod>],
    current: Option<&CurrentRevision>,
) -> Result<Action, Error> {
    let uid = ds.uid().unwrap_or_default();
    let nodes = ctx.stores.nodes.state();
    let pending = ctx
        .expectations
        .lock()
        .unwrap()
        .pending(&uid, pods, Instant::now());
    let plan = plan_rolling_update(&RollingInput {
        daemonset: ds,
        current,
        pods,
        nodes: &nodes,
        max_unavailable,
        now: Timestamp::now(),
        expected_deletions: &pending.deletions,
        vacated_by_us: &pending.vacated,
        limits: ctx.limits,
    });
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

    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ds.namespace().unwrap_or_default());
    // The deletions of one plan are independent: issued together.
    let calls = plan.deletions.iter().cloned().map(|step| {
        let api = api.clone();
        async move {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some(step.uid.clone()),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            let result = api.delete(&step.name, &params).await.map(|_| ());
            (step, result)
        }
    });
    let results = issue_together(calls).await;
    let mut deleted = Vec::new();
    let mut failure = None;
    for (step, result) in results {
        match result {
            Ok(_) => {
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
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {
                ctx.expectations
                    .lock()
                    .unwrap()
                    .deletion_moot(&uid, &step.uid);
            }
            Err(source) => {
                ctx.expectations
                    .lock()
                    .unwrap()
                    .deletion_failed(&uid, &step.node, &step.uid);
                failure.get_or_insert(Error::DeletePod {
                    namespace: step.namespace.clone(),
                    name: step.name.clone(),
                    source,
                });
            }
        }
    }
    deleted.sort_by(|a, b| a.node.cmp(&b.node));
    if !deleted.is_empty() {
        // A rollout is under way: its completion is worth an Event.
        ctx.said.first_time(&uid, Topic::Progress, "rolling");
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
        ctx.publish(
            ds,
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
    Ok(match plan.progress.recheck_after {
        // minReadySeconds elapsing, or a stale status wait ending, fires no watch event:
        // come back when it does.
        Some(after) => Action::requeue(after + Duration::from_millis(100)),
        None if !pending.deletions.is_empty() => Action::requeue(Duration::from_secs(10)),
        None => Action::requeue(Duration::from_secs(300)),
    })
}

/// Updates metrics and, when the rollout's state changes, says so in one Event.
fn record_progress(ds: &DaemonSet, ctx: &Context, plan: &RollingPlan) {
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
            format!("all {} node(s) run the current revision", p.total_nodes),
        )),
        Some(Blocker::WaitingForSkippedNodes { .. }) => {
            Some((WAITING_FOR_NOT_READY_NODES_EVENT, describe(p)))
        }
        Some(Blocker::CurrentRevisionUnknown) => {
            Some((CURRENT_REVISION_UNKNOWN_EVENT, describe(p)))
        }
        Some(Blocker::WaitingForStaleStatus { .. }) => {
            Some((WAITING_FOR_STALE_STATUS_EVENT, describe(p)))
        }
        _ => None,
    };
    if let Some((reason, note)) = said {
        if ctx.said.first_time(&uid, Topic::Progress, &note) {
            tracing::info!(reason, %note, "rollout progress");
            let (recorder, reference) = (ctx.recorder.clone(), ds.object_ref(&()));
            let event = Event {
                type_: EventType::Normal,
                reason: reason.into(),
                note: Some(note),
                action: "Rollout".into(),
                secondary: None,
            };
            // Fire and forget: progress Events must not slow the next deletion.
            tokio::spawn(async move {
                let _ = recorder.publish(&event, &reference).await;
            });
        }
    }
}

/// OTA: write `PodNeedUpgrade` on every pod whose condition is missing or stale.
async fn mark_need_upgrade(ds: &DaemonSet, ctx: &Context) -> Result<Action, Error> {
    let (pods, current) = owned(ds, ctx);
    let updates = plan_need_upgrade_conditions(ds, current.as_ref(), &pods, Timestamp::now());
    let need = updates
        .iter()
        .filter(|u| u.condition.status == "True")
        .count();
    // Strategic merge on the conditions list (merge key `type`): touches only our
    // condition, so concurrent kubelet writes are not overwritten.
    let writes = updates.into_iter().map(|u| StatusWrite {
        patch: json!({"status": {"conditions": [u.condition]}}),
        namespace: u.namespace,
        name: u.name,
    });
    let landed = write_statuses(ctx, writes.collect()).await?;
    if !landed.is_empty() {
        tracing::info!(
            written = landed.len(),
            need_upgrade = need,
            "PodNeedUpgrade conditions written"
        );
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}

/// A DaemonSet that stopped being OTA must not leave `PodNeedUpgrade` behind.
async fn remove_stale_conditions(
    ds: &DaemonSet,
    ctx: &Context,
    pods: &[Arc<CachedPod>],
) -> Result<Action, Error> {
    let writes = plan_stale_condition_removals(ds, pods)
        .into_iter()
        .map(|stale| StatusWrite {
            patch: json!({"status": {"conditions": [{"type": POD_NEED_UPGRADE_CONDITION, "$patch": "delete"}]}}),
            namespace: stale.namespace,
            name: stale.name,
        });
    for removed in write_statuses(ctx, writes.collect()).await? {
        tracing::info!(pod = %removed.name, "removed stale PodNeedUpgrade condition");
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}

/// One strategic-merge patch of one pod's status.
#[derive(Debug, Clone, PartialEq)]
struct StatusWrite {
    namespace: String,
    name: String,
    patch: serde_json::Value,
}

/// A plan's status writes, against the API server.
async fn write_statuses(
    ctx: &Context,
    writes: Vec<StatusWrite>,
) -> Result<Vec<StatusWrite>, Error> {
    issue_writes(writes, |w| async move {
        let landed = write_status(ctx, &w.namespace, &w.name, &w.patch).await;
        (w, landed)
    })
    .await
}

/// Issues every write, `CALLS_IN_FLIGHT` at a time, and returns those that
/// landed; a failure is returned once every write has been tried, so one bad pod does
/// not hold back the others.
async fn issue_writes<W, Fut>(writes: Vec<StatusWrite>, write: W) -> Result<Vec<StatusWrite>, Error>
where
    W: Fn(StatusWrite) -> Fut,
    Fut: Future<Output = (StatusWrite, Result<bool, Error>)>,
{
    let results = issue_together(writes.into_iter().map(write)).await;
    let mut landed = Vec::new();
    let mut failure = None;
    for (write, result) in results {
        match result {
            Ok(true) => landed.push(write),
            Ok(false) => {}
            Err(e) => {
                failure.get_or_insert(e);
            }
        }
    }
    failure.map_or(Ok(landed), Err)
}

/// Runs the calls of one plan, `CALLS_IN_FLIGHT` at a time, and returns every outcome.
async fn issue_together<F: Future>(calls: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    futures::stream::iter(calls)
        .buffer_unordered(CALLS_IN_FLIGHT)
        .collect()
        .await
}

/// A strategic-merge patch of a pod's status. A pod gone or changed meanwhile (404,
/// 409) is skipped: its next event replans. Returns whether the write landed.
async fn write_status(
    ctx: &Context,
    namespace: &str,
    name: &str,
    patch: &serde_json::Value,
) -> Result<bool, Error> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    match api
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(false),
        Err(source) => Err(Error::WriteCondition {
            namespace: namespace.to_string(),
            name: name.to_string(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn writes(n: usize) -> Vec<StatusWrite> {
        (0..n)
            .map(|i| StatusWrite {
                namespace: "edge".into(),
                name: format!("pod-{i}"),
                patch: json!({}),
            })
            .collect()
    }

    fn refused(w: &StatusWrite) -> Error {
        Error::WriteCondition {
            namespace: w.namespace.clone(),
            name: w.name.clone(),
            source: kube::Error::Api(
                kube::core::Status::failure("etcd leader changed", "InternalError")
                    .with_code(500)
                    .boxed(),
            ),
        }
    }

    /// Counts the calls in flight, like an API server would see them.
    #[derive(Default)]
    struct FakeServer {
        in_flight: AtomicUsize,
        most_in_flight: AtomicUsize,
        calls: AtomicUsize,
    }

    impl FakeServer {
        async fn write(&self, w: StatusWrite) -> (StatusWrite, Result<bool, Error>) {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_in_flight.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(2)).await;
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            let result = match w.name.as_str() {
                "pod-3" => Err(refused(&w)),
                // Deleted meanwhile (404): skipped, not a failure.
                "pod-5" => Ok(false),
                _ => Ok(true),
            };
            (w, result)
        }
    }

    #[tokio::test]
    async fn status_writes_of_one_plan_are_in_flight_together() {
        let server = FakeServer::default();
        let all = writes(100);
        let result = issue_writes(all[4..].to_vec(), |w| server.write(w)).await;
        let landed = result.expect("no write fails");
        assert_eq!(landed.len(), 95, "all but the one gone meanwhile");
        // One at a time, marking 200 pods for OTA took 200 round trips.
        assert_eq!(
            server.most_in_flight.load(Ordering::SeqCst),
            CALLS_IN_FLIGHT
        );
    }

    #[tokio::test]
    async fn one_failed_write_holds_back_no_other() {
        let server = FakeServer::default();
        let result = issue_writes(writes(40), |w| server.write(w)).await;
        match result {
            Err(Error::WriteCondition { name, .. }) => assert_eq!(name, "pod-3"),
            other => panic!("the failure must be returned, got {other:?}"),
        }
        assert_eq!(server.calls.load(Ordering::SeqCst), 40, "every write tried");
    }
}
