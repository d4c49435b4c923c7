//! Wiring of the DaemonSet upgrade controller: observe (the shared stores) ->
//! plan (pure, `rolling_plan` / `ota_plan`) -> apply (deletions, condition writes, Events).
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{Future, StreamExt};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::Controller;
use kube::{Api, Client, Resource, ResourceExt};

use super::controls::{NodeSelector, Partition};
use super::decide::{
    decide, Decision, PullsObserved, Rollout, Step, World, RESYNC, TARGET_RECHECK,
};
use super::describe::{describe, shorten};
use super::expectations::Expectations;
use super::metrics::{DaemonSetMetrics, DeletionLabels};
use super::native_wait::{NativeWait, NativeWaits, Verdict};
use super::ota_plan::{plan_need_upgrade_conditions, plan_stale_condition_removals};
use super::other_updater::{self, OtherUpdaters};
use super::policy::{policy_for, MaxUnavailable, Policy, PolicyDecision};
use super::pull_ahead::{pull_ahead_of, PullAheadLimits, PullAheadPlan, PullTries, UnseenRequests};
use super::revision::{
    check_target, generation_observed, CurrentRevision, TargetCheck, VerifiedTarget,
};
use super::rolling_plan::{Blocker, PlanMemo, RollingInput, RollingLimits, RollingPlan};
use super::triggers::{
    daemonset_unchanged, daemonsets_for_node, pod_replans_owner, pod_unchanged, NodeTriggerView,
};
use crate::apply::{
    event, issue_together, Call, ConditionPatch, EventDedup, Events, Outcome, Topic, Writer,
};
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::names::{
    ANOTHER_UPDATER_ACTIVE_EVENT, CURRENT_REVISION_UNKNOWN_EVENT, DAEMONSET_CONTROLLER_NAME,
    INVALID_PULL_AHEAD_EVENT, NATIVE_CONTROLLER_STALLED_EVENT, OLD_PODS_ON_UNPLACED_NODES_EVENT,
    POD_NEED_UPGRADE_CONDITION, PULLING_AHEAD_EVENT, PULL_AHEAD_GAVE_UP_EVENT,
    ROLLOUT_COMPLETE_EVENT, ROLLOUT_HELD_BACK_EVENT, ROLLOUT_PAUSED_EVENT,
    UPDATE_STRATEGY_NOT_ON_DELETE_EVENT, UPGRADING_PODS_EVENT, WAITING_FOR_NOT_READY_NODES_EVENT,
    WAITING_FOR_STALE_STATUS_EVENT,
};
use crate::object::{is_controlled_by, CachedNode, CachedPod, NodeFacts, PodFacts};
use crate::runtime::Shutdown;
use crate::watch::runner::{Run, RunMetrics};
#[cfg(test)]
use crate::watch::PodsByOwner;
use crate::watch::{applied, applied_unless, for_each_in, touched_unless, Change, Stores, Watches};
/// Forgotten DaemonSets are swept from memory this often (a relist can miss deletions).
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// A failed deletion or condition write (see `crate::apply`).
pub use crate::apply::Error;

pub struct Context {
    client: Client,
    writer: Writer,
    stores: Stores,
    events: Events,
    metrics: DaemonSetMetrics,
    expectations: Mutex<Expectations>,
    said: EventDedup,
    limits: RollingLimits,
    other_updaters: Arc<OtherUpdaters>,
    /// Targets proved consistent with their DaemonSet (see `revision::check_target`),
    /// by DaemonSet UID: the fresh read is skipped while the key stays the same.
    verified: Mutex<HashMap<String, VerifiedTarget>>,
    /// DaemonSets waiting on the native controller, since when.
    waits: Mutex<NativeWaits>,
    /// A wait on the native controller longer than this is a stall (Warning, metric).
    stall_after: Duration,
    pull_ahead: PullAheadLimits,
    /// Failed pull-ahead pulls per pod, by DaemonSet UID (see `pull_ahead::PullTries`).
    pull_tries: Mutex<HashMap<String, PullTries>>,
    /// Pull requests written but not yet in the cache, by DaemonSet UID.
    pull_unseen: Mutex<HashMap<String, UnseenRequests>>,
    /// What the plans of a rolling DaemonSet read of its pods and nodes, kept between
    /// its plans by object version (`rolling_plan::PlanMemo`), by DaemonSet UID. Only
    /// while it rolls out: dropped once its plan is complete or held back, or it is no
    /// longer AdvancedRollingUpdate, so a settled fleet keeps none.
    plan_memos: Mutex<HashMap<String, Memo>>,
}

/// A rolling DaemonSet's plan memo in the controller.
pub type Memo = PlanMemo<CachedPod, CachedNode>;

impl Context {
    /// Drops everything kept about a DaemonSet that is gone.
    fn forget(&self, uid: &str, namespace: &str, name: &str) {
        self.expectations.lock().unwrap().forget_daemonset(uid);
        self.said.forget_object(uid);
        self.verified.lock().unwrap().remove(uid);
        self.waits.lock().unwrap().done(uid);
        self.metrics.forget(namespace, name);
        self.other_updaters.forget(namespace, name);
        self.pull_tries.lock().unwrap().remove(uid);
        self.pull_unseen.lock().unwrap().remove(uid);
        self.plan_memos.lock().unwrap().remove(uid);
    }
}

/// The controller's flags.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// DaemonSets reconciled at the same time.
    pub concurrency: u16,
    pub limits: RollingLimits,
    /// How long rollgate keeps off a DaemonSet after another updater's last sighting.
    pub other_updater_quiet: Duration,
    /// A wait on the native controller longer than this is a stall.
    pub stall_after: Duration,
    /// Pull-ahead's bounds (`--pull-ahead-*`).
    pub pull_ahead: PullAheadLimits,
}

/// Subscribes to the shared watches and returns the controller, ready to be driven.
pub fn start(
    watches: &Watches,
    client: Client,
    metrics: &Metrics,
    settings: Settings,
    leadership: Leadership,
    shutdown: Shutdown,
) -> impl Future<Output = ()> {
    let Settings {
        concurrency,
        limits,
        other_updater_quiet,
        stall_after,
        pull_ahead,
    } = settings;
    let stores = watches.stores.clone();
    let daemonset_metrics = DaemonSetMetrics::register(metrics);
    let other_updaters = Arc::new(OtherUpdaters::new(other_updater_quiet));
    let ctx = Arc::new(Context {
        client: client.clone(),
        writer: Writer::new(client.clone()),
        stores: stores.clone(),
        events: Events::new(client, DAEMONSET_CONTROLLER_NAME),
        metrics: daemonset_metrics.clone(),
        expectations: Mutex::default(),
        said: EventDedup::default(),
        limits,
        other_updaters: other_updaters.clone(),
        verified: Mutex::default(),
        waits: Mutex::default(),
        stall_after,
        pull_ahead,
        pull_tries: Mutex::default(),
        pull_unseen: Mutex::default(),
        plan_memos: Mutex::default(),
    });
    // Another updater's deletion re-plans its DaemonSet at once (rollgate steps back).
    let sightings = watches
        .events_matching(&other_updater::field_selector())
        .filter_map(move |event| {
            let sighting = other_updater::sighting_of(&event);
            let seen = sighting.map(|s| {
                let key = ObjectRef::new(&s.daemonset).within(&s.namespace);
                other_updaters.record(s);
                key
            });
            std::future::ready(seen)
        });

    // A node change re-plans only the rolling DaemonSets it can matter to (see
    // `triggers::daemonsets_for_node`): its Ready status, or its labels and taints.
    let node_triggers = {
        let ctx = ctx.clone();
        watches.node_changes().flat_map(move |change| {
            let (before, after) = match change {
                Change::Applied { before, after } => (before, Some(after)),
                Change::Deleted(gone) => (Some(gone), None),
            };
            let stores = &ctx.stores;
            let vacated =
                |ds: &str, node: &str| ctx.expectations.lock().unwrap().has_vacated(ds, node);
            let expected =
                |ds: &str, pod: &str| ctx.expectations.lock().unwrap().deletion_expected(ds, pod);
            let current = |ds: &DaemonSet| current_revision(stores, ds);
            let view = NodeTriggerView {
                pods: &stores.pods_by_owner,
                current: &current,
                vacated_by_us: &vacated,
                deletion_expected: &expected,
                now: Timestamp::now(),
            };
            let due = daemonsets_for_node(
                before.as_deref(),
                after.as_deref(),
                &stores.daemonsets.state(),
                &view,
            );
            futures::stream::iter(due)
        })
    };
    // Only writes that change what the planners read re-plan (see `triggers`); a pod's
    // deletion does, since it frees its node.
    let daemonsets = applied_unless(watches.daemonset_changes(), daemonset_unchanged);
    // And only pods of DaemonSets whose reconcile acts on them (`pod_replans_owner`):
    // unmanaged DaemonSets' pod traffic costs nothing.
    let pods = {
        let daemonsets = stores.daemonsets.clone();
        touched_unless(watches.pod_changes(), pod_unchanged).filter(move |pod| {
            let namespace = pod.pod_namespace();
            let owner = |name: &str| daemonsets.get(&ObjectRef::new(name).within(namespace));
            std::future::ready(pod_replans_owner(&**pod, &owner))
        })
    };
    let controller = Controller::for_shared_stream(daemonsets, stores.daemonsets.clone())
        .owns_shared_stream(pods)
        .owns_shared_stream(applied(watches.revision_changes()))
        .reconcile_on(node_triggers)
        .reconcile_on(sightings);
    let run = Run {
        name: "daemonset-upgrade",
        concurrency,
        synced: watches.synced(),
        errors: daemonset_metrics.reconcile_errors.clone(),
        metrics: RunMetrics::of(metrics),
        own_duration: Some(daemonset_metrics.reconcile_duration.clone()),
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
                    ctx.verified.lock().unwrap().retain(|uid, _| live.contains(uid));
                    ctx.waits.lock().unwrap().retain(|uid| live.contains(uid));
                    ctx.pull_tries.lock().unwrap().retain(|uid, _| live.contains(uid));
                    ctx.pull_unseen.lock().unwrap().retain(|uid, _| live.contains(uid));
                    ctx.plan_memos.lock().unwrap().retain(|uid, _| live.contains(uid));
                }
                _ = &mut stop => return,
            }
        }
    }
}

#[tracing::instrument(skip_all, fields(daemonset = %ds.name_any(), namespace = %ds.namespace().unwrap_or_default()))]
async fn reconcile(ds: Arc<DaemonSet>, ctx: Arc<Context>) -> Result<Action, Error> {
    let policy = policy_for(&ds);
    if !matches!(
        policy,
        PolicyDecision::Managed(Policy::AdvancedRollingUpdate { .. })
    ) {
        // Only rolling plans read the memo; it would keep old pod versions alive.
        ctx.plan_memos
            .lock()
            .unwrap()
            .remove(&ds.uid().unwrap_or_default());
    }
    match policy {
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
        // pods already on a). Its status update wakes us; a stall is said.
        PolicyDecision::Managed(_) if !generation_observed(&ds) => {
            let wait = NativeWait::GenerationNotObserved {
                generation: ds.metadata.generation.unwrap_or_default(),
                observed: ds.status.as_ref().and_then(|s| s.observed_generation),
            };
            Ok(wait_on_native(&ds, &ctx, wait, None).await)
        }
        PolicyDecision::Managed(Policy::AdvancedRollingUpdate {
            max_unavailable,
            paused,
            partition,
            node_selector,
        }) => {
            let controls = Controls {
                max_unavailable,
                paused,
                partition,
                node_selector: node_selector.as_ref(),
            };
            rolling_update(&ds, &ctx, controls).await
        }
        PolicyDecision::Managed(Policy::Ota) => {
            native_wait_over(&ds, &ctx);
            mark_need_upgrade(&ds, &ctx).await
        }
    }
}

/// Another updater's last sighting on `ds`, while it counts (see `other_updater`).
fn other_updater_active(
    ds: &DaemonSet,
    ctx: &Context,
) -> Option<(other_updater::Sighting, Duration)> {
    let now = Timestamp::now();
    let active =
        ctx.other_updaters
            .active(&ds.namespace().unwrap_or_default(), &ds.name_any(), now);
    ctx.metrics
        .daemonsets_with_other_updater
        .set(ctx.other_updaters.count_active(now) as i64);
    active
}

async fn warn_once(ds: &DaemonSet, ctx: &Context, reason: &str, message: &str) {
    let uid = ds.uid().unwrap_or_default();
    let warning = event(EventType::Warning, reason, "Validate", message.to_string());
    let reference = ds.object_ref(&());
    let said = ctx
        .events
        .publish_once(&ctx.said, &uid, Topic::Warning, &reference, warning);
    if said.await {
        tracing::warn!(reason, message, "DaemonSet not acted upon");
    }
}

/// The DaemonSet waits on the native controller: counts how long, and past
/// `stall_after` says so once (Warning Event, deduplicated on its text) and in the
/// `native_controller_stalled` gauge. `recheck` is the caller's own next look.
async fn wait_on_native(
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
fn native_wait_over(ds: &DaemonSet, ctx: &Context) {
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
async fn confirm_target(
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

/// This DaemonSet's pods and current revision, borrowed from the shared stores.
fn owned(ds: &DaemonSet, ctx: &Context) -> (Vec<Arc<CachedPod>>, Option<CurrentRevision>) {
    let pods = owned_pods(&ctx.stores, ds, PodLookup::Index);
    (pods, current_revision(&ctx.stores, ds))
}

/// How a reconcile finds its DaemonSet's pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodLookup {
    /// The owner index (`watch::PodsByOwner`): what the controller does.
    Index,
    /// Every pod of the store, filtered by controller owner: the code before issue 25,
    /// kept so the fleet bench (`benches/daemonset_fleet.rs`) measures both paths on the
    /// same stores in one run.
    FullScan,
}

/// The pods whose controller owner is `ds`, in its namespace.
pub fn owned_pods(stores: &Stores, ds: &DaemonSet, lookup: PodLookup) -> Vec<Arc<CachedPod>> {
    let uid = ds.uid().unwrap_or_default();
    let ns = ds.namespace();
    match lookup {
        PodLookup::Index => {
            let mut pods = stores.pods_by_owner.pods_of(&uid);
            // An owner reference names an object of the pod's own namespace; kept as
            // the scan had it, so both paths give the same pods.
            pods.retain(|p| p.metadata.namespace == ns);
            pods
        }
        PodLookup::FullScan => stores
            .pods
            .state_filter(|p| p.metadata.namespace == ns && is_controlled_by(p, &uid)),
    }
}

/// Observes the DaemonSet's pods (the owner index) and every node into its plan memo,
/// cloning only the object versions the memo does not hold yet: cloning all of them
/// writes to 20,000 objects' counts per plan at fleet size (issue 25).
pub fn observe(
    stores: &Stores,
    ds: &DaemonSet,
    current: Option<&CurrentRevision>,
    memo: &mut Memo,
) {
    let uid = ds.uid().unwrap_or_default();
    let mut refresh = memo.begin(ds, current);
    stores
        .pods_by_owner
        .for_each_of(&uid, |pod| refresh.pod(pod));
    // Node versions the memo holds are recognized in the store by address; the others
    // are fetched by name after (the store's lock is held while visiting).
    let mut new = Vec::new();
    for_each_in(&stores.nodes, |node| {
        if !refresh.saw_node(node) {
            new.push(NodeFacts::name(node).to_string());
        }
    });
    for name in new {
        if let Some(node) = stores.nodes.get(&ObjectRef::new(&name)) {
            refresh.node(&node);
        }
    }
    refresh.finish();
}

/// The DaemonSet's current revision, from the revisions store.
pub fn current_revision(stores: &Stores, ds: &DaemonSet) -> Option<CurrentRevision> {
    let ns = ds.namespace();
    let revisions: Vec<Arc<ControllerRevision>> = stores
        .revisions
        .state_filter(|r| r.metadata.namespace == ns);
    CurrentRevision::of(ds, revisions.iter().map(|r| &**r))
}

/// The operator's controls on an AdvancedRollingUpdate, as its annotations read now
/// (`rollgate.io/pull-ahead` is read with the rest of the world, since it can be wrong).
#[derive(Debug, Clone, Copy)]
struct Controls<'a> {
    max_unavailable: MaxUnavailable,
    /// `rollgate.io/paused`: the plan is made, its deletions held.
    paused: bool,
    partition: Option<Partition>,
    node_selector: Option<&'a NodeSelector>,
}

/// AdvancedRollingUpdate: observe, decide (`decide`), execute.
async fn rolling_update(
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
    let current = current_revision(&ctx.stores, ds);
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
    // The stale-condition check needs the pods with the condition alone (what the
    // memo's looks read).
    let flagged = memo.with_need_upgrade();
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
            list_upcoming: false,
        },
        memo: &memo,
        pull_ahead_limits: ctx.pull_ahead,
    };
    let Decision { step, keep_memo } = decide(&world);
    drop(world);
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
        Step::Roll(rollout) => execute_rollout(ds, ctx, rollout, current.as_ref()).await?,
    };
    remove_stale_conditions(ds, ctx, &flagged).await?;
    Ok(action)
}

/// Counts the pulls' answers into the controller's memory (`PullTries`,
/// `UnseenRequests`), and returns what pull-ahead reads of them.
fn observe_pulls(
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
async fn execute_rollout(
    ds: &DaemonSet,
    ctx: &Context,
    rollout: Rollout,
    current: Option<&CurrentRevision>,
) -> Result<Action, Error> {
    let Rollout {
        plan,
        pulls,
        requeue,
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

/// Writes pull-ahead's requests (the image-pull controller answers them with its Job) and
/// says what it started and where it gave up.
async fn request_pulls(ds: &DaemonSet, ctx: &Context, pulls: &PullAheadPlan) -> Result<(), Error> {
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
        Some(Blocker::WaitingForStaleStatus { .. }) => {
            Some((WAITING_FOR_STALE_STATUS_EVENT, describe(p)))
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
    if let Some((reason, note)) = said {
        if ctx.said.first_time(&uid, Topic::Progress, &note) {
            tracing::info!(reason, %note, "rollout progress");
            // Fire and forget: progress Events must not slow the next deletion.
            let progress = event(EventType::Normal, reason, "Rollout", note);
            ctx.events.publish_detached(ds.object_ref(&()), progress);
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
    // condition, so concurrent kubelet writes are not overwritten. Each from its cached
    // pod: a resync that reads a pod before our last write reached the cache does not
    // send that write again.
    let cached = by_name(&pods);
    let writes = updates.into_iter().map(|u| {
        let seen = cached.get(u.name.as_str()).copied();
        planned_from(
            ConditionPatch::set(u.namespace, u.name, None, &u.condition),
            seen,
        )
    });
    let landed = ctx.writer.write_conditions(writes.collect()).await?;
    if !landed.is_empty() {
        tracing::info!(
            written = landed.len(),
            need_upgrade = need,
            "PodNeedUpgrade conditions written"
        );
    }
    Ok(Action::requeue(RESYNC))
}

/// The DaemonSet's cached pods by name (they share its namespace).
fn by_name(pods: &[Arc<CachedPod>]) -> HashMap<&str, &CachedPod> {
    pods.iter()
        .filter_map(|p| Some((p.metadata.name.as_deref()?, &**p)))
        .collect()
}

/// `write` as planned from its cached pod, when there is one.
fn planned_from(write: ConditionPatch, pod: Option<&CachedPod>) -> ConditionPatch {
    match pod {
        Some(pod) => write.planned_from(&pod.metadata),
        None => write,
    }
}

/// A DaemonSet that stopped being OTA must not leave `PodNeedUpgrade` behind.
async fn remove_stale_conditions(
    ds: &DaemonSet,
    ctx: &Context,
    pods: &[Arc<CachedPod>],
) -> Result<Action, Error> {
    let cached = by_name(pods);
    let writes = plan_stale_condition_removals(ds, pods)
        .into_iter()
        .map(|stale| {
            let seen = cached.get(stale.name.as_str()).copied();
            let write =
                ConditionPatch::remove(stale.namespace, stale.name, POD_NEED_UPGRADE_CONDITION);
            planned_from(write, seen)
        });
    for removed in ctx.writer.write_conditions(writes.collect()).await? {
        tracing::info!(pod = %removed.name, "removed stale PodNeedUpgrade condition");
    }
    Ok(Action::requeue(RESYNC))
}

#[cfg(test)]
mod tests {
    //! The controller's writes against the fake API server (`crate::apply::fake_api`):
    //! what it sends, under which field manager, and what a pod gone meanwhile becomes.
    use k8s_openapi::api::core::v1::{Pod, PodCondition};
    use serde_json::{json, Value};

    use super::*;
    use crate::apply::fake_api::{fake_client, status};
    use crate::daemonset::rolling_plan::plan_rolling_update_memo;
    use crate::testkit::{revision, store_of, DaemonSetBuilder, PodBuilder};

    fn context(client: Client, pods: &[Pod], revisions: &[ControllerRevision]) -> Context {
        let pod_store = store_of(pods.iter().cloned().map(CachedPod::from));
        Context {
            client: client.clone(),
            writer: Writer::new(client.clone()),
            stores: Stores {
                pods_by_owner: PodsByOwner::of(&pod_store.state()),
                pods: pod_store,
                daemonsets: store_of([]),
                revisions: store_of(revisions.iter().cloned()),
                nodes: store_of([]),
                jobs: store_of([]),
            },
            events: Events::new(client, DAEMONSET_CONTROLLER_NAME),
            metrics: DaemonSetMetrics::register(&Metrics::default()),
            expectations: Mutex::default(),
            said: EventDedup::default(),
            limits: RollingLimits::default(),
            other_updaters: Arc::new(OtherUpdaters::new(Duration::from_secs(300))),
            verified: Mutex::default(),
            waits: Mutex::default(),
            stall_after: Duration::from_secs(120),
            pull_ahead: PullAheadLimits::default(),
            pull_tries: Mutex::default(),
            pull_unseen: Mutex::default(),
            plan_memos: Mutex::default(),
        }
    }

    /// `observe` holds what the stores hold (the DaemonSet's pods by the owner index,
    /// every node), node versions replaced or deleted in between included, and the plan
    /// from it is the plan from a fresh read of the stores.
    #[tokio::test]
    async fn observe_holds_what_the_stores_hold_and_plans_as_a_fresh_read() {
        use kube::runtime::{reflector, watcher};
        let ds = DaemonSetBuilder::new("agent")
            .strategy("AdvancedRollingUpdate")
            .on_delete()
            .build();
        let other = DaemonSetBuilder::new("other").build();
        let old = |name: &str, node: &str| {
            PodBuilder::new(name, &ds)
                .hash("old")
                .on_node(node)
                .ready_since(crate::testkit::at(1))
                .build()
        };
        let pods = [
            old("a", "n1"),
            old("b", "n2"),
            PodBuilder::new("c", &other)
                .hash("old")
                .on_node("n1")
                .build(),
        ];
        let revisions = [revision(&ds, "old", 1), revision(&ds, "new", 2)];
        let mut ctx = context(fake_client(|_, _| (404, json!({}))).0, &pods, &revisions);
        let (nodes, mut writer) = reflector::store::<CachedNode>();
        let node = |name: &str, ready: bool| CachedNode::from(crate::testkit::node(name, ready));
        for name in ["n1", "n2", "n3"] {
            writer.apply_watcher_event(&watcher::Event::Apply(node(name, true)));
        }
        ctx.stores.nodes = nodes.clone();
        let current = current_revision(&ctx.stores, &ds);
        let mut memo = Memo::default();
        let check = |memo: &Memo| {
            let mut held: Vec<&str> = memo.pods().map(|p| p.pod_name()).collect();
            held.sort();
            assert_eq!(held, ["a", "b"]);
            let store = nodes.state();
            assert_eq!(memo.nodes().count(), store.len());
            assert!(store
                .iter()
                .all(|n| memo.nodes().any(|kept| Arc::ptr_eq(kept, n))));
            let pending = Default::default();
            let vacated = Default::default();
            let fresh_pods = owned_pods(&ctx.stores, &ds, PodLookup::Index);
            let input = RollingInput {
                daemonset: &ds,
                current: current.as_ref(),
                pods: &fresh_pods,
                nodes: &store,
                max_unavailable: MaxUnavailable::Count(1),
                now: Timestamp::now(),
                expected_deletions: &pending,
                vacated_by_us: &vacated,
                limits: RollingLimits::default(),
                partition: None,
                node_selector: None,
                list_upcoming: true,
            };
            assert_eq!(
                plan_rolling_update_memo(&input, memo),
                crate::daemonset::rolling_plan::plan_rolling_update(&input)
            );
        };
        observe(&ctx.stores, &ds, current.as_ref(), &mut memo);
        check(&memo);
        // n2 flaps (a new version), n3 goes, n4 comes.
        writer.apply_watcher_event(&watcher::Event::Apply(node("n2", false)));
        writer.apply_watcher_event(&watcher::Event::Delete(node("n3", true)));
        writer.apply_watcher_event(&watcher::Event::Apply(node("n4", true)));
        observe(&ctx.stores, &ds, current.as_ref(), &mut memo);
        check(&memo);
    }

    fn ota() -> DaemonSet {
        DaemonSetBuilder::new("agent")
            .strategy("OTA")
            .on_delete()
            .build()
    }

    #[tokio::test]
    async fn ota_marks_out_of_date_pods_as_rollgate_and_skips_a_pod_gone_meanwhile() {
        let ds = ota();
        let revisions = [revision(&ds, "h1", 1), revision(&ds, "h2", 2)];
        let pods = [
            PodBuilder::new("old", &ds).hash("h1").on_node("n1").build(),
            PodBuilder::new("gone", &ds)
                .hash("h1")
                .on_node("n2")
                .build(),
            PodBuilder::new("new", &ds).hash("h2").on_node("n3").build(),
        ];
        let (client, seen) = fake_client(|_, path| match path {
            p if p.ends_with("/gone/status") => status(404, "NotFound"),
            _ => (200, json!({})),
        });
        let ctx = context(client, &pods, &revisions);
        let action = mark_need_upgrade(&ds, &ctx).await.unwrap();
        assert_eq!(action, Action::requeue(RESYNC));

        let mut patches = seen.calls_to("PATCH");
        patches.sort_by_key(|c| c.path.clone());
        let written: Vec<(String, Value)> = patches
            .iter()
            .map(|c| {
                assert_eq!(c.field_manager(), Some("rollgate"), "{}", c.line());
                let condition = &c.body["status"]["conditions"][0];
                (c.path.clone(), condition["status"].clone())
            })
            .collect();
        assert_eq!(
            written,
            [
                (
                    "/api/v1/namespaces/edge/pods/gone/status".into(),
                    json!("True")
                ),
                (
                    "/api/v1/namespaces/edge/pods/new/status".into(),
                    json!("False")
                ),
                (
                    "/api/v1/namespaces/edge/pods/old/status".into(),
                    json!("True")
                ),
            ]
        );
        // Only our condition, as a strategic merge on the list (no pod UID: the message
        // names the revision, and a replaced pod is planned again).
        let body = &patches[2].body;
        assert!(body.get("metadata").is_none(), "{body}");
        assert_eq!(body["status"]["conditions"][0]["type"], "PodNeedUpgrade");
        assert_eq!(
            body["status"]["conditions"][0]["message"],
            "controllerrevision: h2"
        );
    }

    #[tokio::test]
    async fn a_daemonset_no_longer_ota_loses_its_conditions() {
        let ds = DaemonSetBuilder::new("agent").on_delete().build();
        let marked = PodCondition {
            type_: POD_NEED_UPGRADE_CONDITION.into(),
            status: "True".into(),
            ..Default::default()
        };
        let pods = [
            PodBuilder::new("marked", &ds)
                .with_condition(marked)
                .build(),
            PodBuilder::new("clean", &ds).build(),
        ];
        let (client, seen) = fake_client(|_, _| (200, json!({})));
        let ctx = context(client, &pods, &[]);
        let cached: Vec<Arc<CachedPod>> = ctx.stores.pods.state();
        remove_stale_conditions(&ds, &ctx, &cached).await.unwrap();
        let patches = seen.calls_to("PATCH");
        assert_eq!(patches.len(), 1);
        assert_eq!(
            patches[0].line(),
            "PATCH /api/v1/namespaces/edge/pods/marked/status"
        );
        assert_eq!(
            patches[0].body,
            json!({"status": {"conditions": [{"type": "PodNeedUpgrade", "$patch": "delete"}]}})
        );
    }

    /// a -> b -> a: the DaemonSet reads a again (generation 3 observed), but the
    /// revisions cache still has a at number 1 and b at 2; the API server has a at 3.
    /// Two Ready nodes run a-pods, which the stale cache calls old.
    fn rollback_bed(
        answer_list: serde_json::Value,
    ) -> (Context, DaemonSet, Arc<crate::apply::fake_api::Seen>) {
        let ds = DaemonSetBuilder::new("agent")
            .strategy("AdvancedRollingUpdate")
            .on_delete()
            .generations(3, 3)
            .build();
        let cached = [revision(&ds, "a", 1), revision(&ds, "b", 2)];
        let pods = [
            PodBuilder::new("p1", &ds)
                .hash("a")
                .on_node("n1")
                .ready_since(crate::testkit::at(0))
                .build(),
            PodBuilder::new("p2", &ds)
                .hash("a")
                .on_node("n2")
                .ready_since(crate::testkit::at(0))
                .build(),
        ];
        let (client, seen) = fake_client(move |method, path| match (method, path) {
            ("GET", p) if p.ends_with("/controllerrevisions") => (200, answer_list.clone()),
            _ => (200, json!({})),
        });
        let mut ctx = context(client, &pods, &cached);
        ctx.stores.nodes = store_of(
            ["n1", "n2"].map(|n| crate::object::CachedNode::from(crate::testkit::node(n, true))),
        );
        (ctx, ds, seen)
    }

    fn revision_list(revisions: &[ControllerRevision]) -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "ControllerRevisionList",
            "metadata": {"resourceVersion": "7"},
            "items": revisions,
        })
    }

    async fn roll(ctx: &Context, ds: &DaemonSet) -> Action {
        let controls = Controls {
            max_unavailable: MaxUnavailable::Count(2),
            paused: false,
            partition: None,
            node_selector: None,
        };
        rolling_update(ds, ctx, controls).await.unwrap()
    }

    #[tokio::test]
    async fn a_rollback_not_yet_in_the_revisions_cache_deletes_nothing_and_looks_again_soon() {
        let ds = DaemonSetBuilder::new("agent").generations(3, 3).build();
        let fresh = [revision(&ds, "b", 2), revision(&ds, "a", 3)];
        let (ctx, ds, seen) = rollback_bed(revision_list(&fresh));
        let action = roll(&ctx, &ds).await;
        assert!(seen.calls_to("DELETE").is_empty(), "{:?}", seen.calls());
        assert_eq!(action, Action::requeue(TARGET_RECHECK));
        // One quorum list of this DaemonSet's revisions (no resourceVersion).
        let lists = seen.calls_to("GET /apis/apps/v1/namespaces/edge/controllerrevisions");
        assert_eq!(lists.len(), 1, "{:?}", seen.calls());
        assert!(
            !lists[0].query.contains("resourceVersion"),
            "{}",
            lists[0].query
        );
        // Not verified, so not remembered: the next look reads the server again.
        roll(&ctx, &ds).await;
        assert_eq!(seen.calls_to("GET").len(), 2);
        assert!(seen.calls_to("DELETE").is_empty());
    }

    #[tokio::test]
    async fn a_target_the_server_agrees_with_is_acted_on_and_read_once_per_generation() {
        let ds = DaemonSetBuilder::new("agent").generations(3, 3).build();
        // The server agrees with the cache: b (2) is the newest, so the a-pods are old.
        let fresh = [revision(&ds, "a", 1), revision(&ds, "b", 2)];
        let (ctx, ds, seen) = rollback_bed(revision_list(&fresh));
        roll(&ctx, &ds).await;
        let mut deleted: Vec<String> = seen
            .calls_to("DELETE")
            .iter()
            .map(|c| c.path.clone())
            .collect();
        deleted.sort();
        assert_eq!(
            deleted,
            [
                "/api/v1/namespaces/edge/pods/p1",
                "/api/v1/namespaces/edge/pods/p2"
            ]
        );
        assert_eq!(seen.calls_to("GET").len(), 1);
        // Same generation, same cached hash: proved already, no second read.
        ctx.expectations
            .lock()
            .unwrap()
            .forget_daemonset(&ds.uid().unwrap());
        roll(&ctx, &ds).await;
        assert_eq!(seen.calls_to("GET").len(), 1, "{:?}", seen.calls());
    }

    /// Both nodes are cut off, then come back, and the node triggers of their return
    /// are lost: the plan that waited on them asked for a resync, and the resync's plan
    /// (the same reconcile) replaces their pods.
    #[tokio::test]
    async fn a_missed_node_trigger_is_caught_by_the_resync() {
        let ds = DaemonSetBuilder::new("agent").generations(3, 3).build();
        let fresh = [revision(&ds, "a", 1), revision(&ds, "b", 2)];
        let (mut ctx, ds, seen) = rollback_bed(revision_list(&fresh));
        let nodes = |ready| {
            store_of(
                ["n1", "n2"]
                    .map(|n| crate::object::CachedNode::from(crate::testkit::node(n, ready))),
            )
        };
        ctx.stores.nodes = nodes(false);
        let action = roll(&ctx, &ds).await;
        assert!(seen.calls_to("DELETE").is_empty(), "{:?}", seen.calls());
        assert_eq!(action, Action::requeue(RESYNC), "a wait must come back");
        assert!(RESYNC <= Duration::from_secs(300));

        // Back, with no trigger: what the requeue runs deletes the old pods.
        ctx.stores.nodes = nodes(true);
        roll(&ctx, &ds).await;
        assert_eq!(seen.calls_to("DELETE").len(), 2, "{:?}", seen.calls());
    }

    #[tokio::test]
    async fn a_wait_on_the_native_controller_past_the_threshold_says_so_once() {
        let ds = DaemonSetBuilder::new("agent")
            .strategy("AdvancedRollingUpdate")
            .on_delete()
            .generations(4, 3)
            .build();
        let (client, seen) = fake_client(|_, _| (200, json!({})));
        let mut ctx = context(client, &[], &[revision(&ds, "a", 1)]);
        ctx.stall_after = Duration::from_millis(50);
        let ctx = Arc::new(ctx);
        let stalled = |ctx: &Context| {
            ctx.metrics
                .native_controller_stalled
                .get_or_create(&super::super::metrics::DaemonSetLabels {
                    namespace: "edge".into(),
                    daemonset: "agent".into(),
                })
                .get()
        };
        // Within the threshold: no Event, and a look when it passes.
        let action = reconcile(Arc::new(ds.clone()), ctx.clone()).await.unwrap();
        assert!(seen.events().is_empty());
        assert_eq!(stalled(&ctx), 0);
        assert!(action != Action::await_change(), "{action:?}");
        tokio::time::sleep(Duration::from_millis(60)).await;
        for _ in 0..3 {
            reconcile(Arc::new(ds.clone()), ctx.clone()).await.unwrap();
        }
        assert_eq!(seen.events(), ["Warning NativeControllerStalled"]);
        assert_eq!(stalled(&ctx), 1);
        let note = &seen.calls_to("POST")[0].body["note"];
        assert!(note.as_str().unwrap().contains("generation 4"), "{note}");

        // The controller catches up: the gauge drops; a later stall is said again.
        let caught_up = DaemonSetBuilder::new("agent")
            .strategy("AdvancedRollingUpdate")
            .on_delete()
            .generations(4, 4)
            .build();
        reconcile(Arc::new(caught_up), ctx.clone()).await.unwrap();
        assert_eq!(stalled(&ctx), 0);
        reconcile(Arc::new(ds.clone()), ctx.clone()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(60)).await;
        reconcile(Arc::new(ds.clone()), ctx.clone()).await.unwrap();
        assert_eq!(seen.events().len(), 2, "{:?}", seen.events());
    }
}
