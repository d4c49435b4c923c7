//! Wiring of the DaemonSet upgrade controller: observe (shared reflector stores) ->
//! plan (pure, `rolling_plan` / `ota_plan`) -> apply (deletions, condition writes, Events).
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::{Action, Config as ControllerConfig};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, Controller, WatchStreamExt};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;

use super::metrics::{DaemonSetLabels, DaemonSetMetrics, DeletionLabels, ErrorLabels};
use super::ota_plan::{
    plan_need_upgrade_conditions, plan_stale_condition_removals, POD_NEED_UPGRADE_CONDITION,
};
use super::policy::{policy_for, Policy, PolicyDecision};
use super::revision::{is_controlled_by, CONTROLLER_REVISION_HASH_LABEL};
use super::rolling_plan::{is_node_ready, plan_rolling_update, Blocker, RollingInput, RollingPlan};
use crate::metrics::Metrics;
use crate::runtime::Shutdown;
use crate::sync_gate::SyncGate;

/// Field manager / reporting controller name, as users see it in Events and managedFields.
pub const CONTROLLER_NAME: &str = "rollgate-daemonset-upgrade";
/// A deletion we issued but have not seen land is forgotten after this long, so a lost
/// watch event cannot block a rollout forever.
const EXPECTATION_TIMEOUT: Duration = Duration::from_secs(120);
/// Deletions of one plan issued at the same time.
const DELETE_CONCURRENCY: usize = 16;
/// Most pod names listed in one aggregated Event.
const EVENT_NAMES_SHOWN: usize = 8;

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

impl Error {
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::DeletePod { .. } => "delete_pod",
            Error::WriteCondition { .. } => "write_condition",
        }
    }
}

/// Pod UIDs we deleted, per DaemonSet UID, until the store shows them terminating or gone.
#[derive(Default)]
struct Expectations(HashMap<String, HashMap<String, Instant>>);

impl Expectations {
    /// Drops expectations the store has caught up with (or that timed out) and returns
    /// the ones still pending for `ds_uid`.
    fn pending(&mut self, ds_uid: &str, pods: &[Arc<Pod>]) -> BTreeSet<String> {
        let Some(expected) = self.0.get_mut(ds_uid) else {
            return BTreeSet::new();
        };
        expected.retain(|uid, since| {
            let seen_live = pods.iter().any(|p| {
                p.metadata.uid.as_deref() == Some(uid) && p.metadata.deletion_timestamp.is_none()
            });
            seen_live && since.elapsed() < EXPECTATION_TIMEOUT
        });
        expected.keys().cloned().collect()
    }

    fn expect(&mut self, ds_uid: &str, pod_uid: &str) {
        self.0
            .entry(ds_uid.to_string())
            .or_default()
            .insert(pod_uid.to_string(), Instant::now());
    }

    fn forget(&mut self, ds_uid: &str, pod_uid: &str) {
        if let Some(e) = self.0.get_mut(ds_uid) {
            e.remove(pod_uid);
        }
    }
}

pub struct Context {
    client: Client,
    pods: Store<Pod>,
    revisions: Store<ControllerRevision>,
    nodes: Store<Node>,
    recorder: Recorder,
    metrics: DaemonSetMetrics,
    expectations: Mutex<Expectations>,
    /// Last Warning / progress message per DaemonSet UID, so each is said once, not on
    /// every resync.
    last_said: Mutex<HashMap<(String, &'static str), String>>,
    /// Flips to true once every cache holds its first full list (see `SyncGate`).
    synced: tokio::sync::watch::Receiver<bool>,
}

impl Context {
    fn has_said(&self, ds_uid: &str, slot: &'static str) -> bool {
        self.last_said
            .lock()
            .unwrap()
            .contains_key(&(ds_uid.to_string(), slot))
    }

    /// True when `message` differs from the last one said under `slot` for this DaemonSet.
    fn first_time(&self, ds_uid: &str, slot: &'static str, message: &str) -> bool {
        let mut said = self.last_said.lock().unwrap();
        let key = (ds_uid.to_string(), slot);
        if said.get(&key).map(String::as_str) == Some(message) {
            return false;
        }
        said.insert(key, message.to_string());
        true
    }

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
}

/// Drops fields nothing here reads, to keep the caches small at thousands of pods.
fn prune<K: Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
}

/// Node Ready status as a predicate hash: only Ready transitions wake DaemonSets up.
fn node_ready_hash(node: &Node) -> Option<u64> {
    Some(if is_node_ready(node) { 1 } else { 0 })
}

pub async fn run(
    client: Client,
    metrics: Metrics,
    namespace: Option<&str>,
    concurrency: u16,
    ready: Arc<AtomicBool>,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let wcfg = watcher::Config::default().page_size(500);
    fn scoped<K>(client: &Client, namespace: Option<&str>) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        match namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        }
    }
    let (gate, synced) = SyncGate::new(
        "daemonset-upgrade",
        &["daemonsets", "pods", "controllerrevisions", "nodes"],
    );
    let (ds_reader, ds_writer) = reflector::store::<DaemonSet>();
    let (pod_reader, pod_writer) = reflector::store::<Pod>();
    let (rev_reader, rev_writer) = reflector::store::<ControllerRevision>();
    let (node_reader, node_writer) = reflector::store::<Node>();

    let daemonsets = watcher(scoped::<DaemonSet>(&client, namespace), wcfg.clone())
        .default_backoff()
        .modify(prune)
        .reflect(ds_writer)
        .inspect(gate.observe("daemonsets"))
        .applied_objects();
    // DaemonSet pods always carry controller-revision-hash: the API server filters the rest.
    let pods = watcher(
        scoped::<Pod>(&client, namespace),
        wcfg.clone().labels(CONTROLLER_REVISION_HASH_LABEL),
    )
    .default_backoff()
    .modify(prune)
    .reflect(pod_writer)
    .inspect(gate.observe("pods"))
    .touched_objects();
    let revisions = watcher(
        scoped::<ControllerRevision>(&client, namespace),
        wcfg.clone(),
    )
    .default_backoff()
    .modify(|r: &mut ControllerRevision| {
        prune(r);
        // The template copy inside a revision is large and never read here.
        r.data = Default::default();
    })
    .reflect(rev_writer)
    .inspect(gate.observe("controllerrevisions"))
    .touched_objects();
    let nodes = watcher(Api::<Node>::all(client.clone()), wcfg)
        .default_backoff()
        .modify(|n: &mut Node| {
            prune(n);
            if let Some(status) = n.status.as_mut() {
                status.images = None;
            }
        })
        .reflect(node_writer)
        .inspect(gate.observe("nodes"))
        .touched_objects()
        .predicate_filter(node_ready_hash, Default::default());

    let reporter = Reporter {
        controller: CONTROLLER_NAME.into(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let ctx = Arc::new(Context {
        client: client.clone(),
        pods: pod_reader.clone(),
        revisions: rev_reader.clone(),
        nodes: node_reader.clone(),
        recorder: Recorder::new(client.clone(), reporter),
        metrics: DaemonSetMetrics::register(&metrics),
        expectations: Mutex::default(),
        last_said: Mutex::default(),
        synced,
    });

    // /readyz turns true once every cache holds its first full list.
    {
        let mut synced = ctx.synced.clone();
        tokio::spawn(async move {
            if synced.wait_for(|s| *s).await.is_ok() {
                ready.store(true, Ordering::SeqCst);
            }
        });
    }

    let ds_for_nodes = ds_reader.clone();
    Controller::for_stream(daemonsets, ds_reader)
        .with_config(ControllerConfig::default().concurrency(concurrency))
        .owns_stream(pods)
        .owns_stream(revisions)
        // A node coming back (or leaving) re-plans every upgrade-managed DaemonSet at once.
        .watches_stream(nodes, move |_node| {
            ds_for_nodes
                .state()
                .into_iter()
                .filter(|ds| !matches!(policy_for(ds), PolicyDecision::Unmanaged))
                .map(|ds| ObjectRef::from_obj(&*ds))
                .collect::<Vec<_>>()
        })
        .graceful_shutdown_on(shutdown.requested())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "reconcile trigger failed");
            }
        })
        .await;
    tracing::info!("DaemonSet controller stopped");
    Ok(())
}

fn error_policy(ds: Arc<DaemonSet>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics
        .reconcile_errors
        .get_or_create(&ErrorLabels {
            kind: error.metric_label().into(),
        })
        .inc();
    tracing::warn!(daemonset = %ds.name_any(), namespace = ?ds.namespace(), %error, "reconcile failed, retrying");
    Action::requeue(Duration::from_secs(5))
}

#[tracing::instrument(skip_all, fields(daemonset = %ds.name_any(), namespace = %ds.namespace().unwrap_or_default()))]
async fn reconcile(ds: Arc<DaemonSet>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    // Planning on half-filled caches could count missing pods as unavailable or miss
    // terminating ones: wait for the first full lists.
    let _ = ctx.synced.clone().wait_for(|synced| *synced).await;
    let result = match policy_for(&ds) {
        PolicyDecision::Unmanaged => remove_stale_conditions(&ds, &ctx).await,
        PolicyDecision::NotOurs { reason } => {
            warn_once(&ds, &ctx, "UpdateStrategyNotOnDelete", &reason).await;
            remove_stale_conditions(&ds, &ctx).await
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
        PolicyDecision::Managed(Policy::AdvancedRollingUpdate { max_unavailable }) => {
            forget_warning(&ds, &ctx);
            let action = rolling_update(&ds, &ctx, max_unavailable).await?;
            remove_stale_conditions(&ds, &ctx).await?;
            Ok(action)
        }
        PolicyDecision::Managed(Policy::Ota) => {
            forget_warning(&ds, &ctx);
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
    if ctx.first_time(&uid, "warning", message) {
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

fn forget_warning(ds: &DaemonSet, ctx: &Context) {
    let uid = ds.uid().unwrap_or_default();
    ctx.last_said.lock().unwrap().remove(&(uid, "warning"));
}

/// This DaemonSet's pods and revisions from the caches.
fn owned(ds: &DaemonSet, ctx: &Context) -> (Vec<Arc<Pod>>, Vec<ControllerRevision>) {
    let uid = ds.uid().unwrap_or_default();
    let ns = ds.namespace();
    let pods = ctx
        .pods
        .state_filter(|p| p.namespace() == ns && is_controlled_by(p, &uid));
    let revisions = ctx
        .revisions
        .state_filter(|r| r.namespace() == ns)
        .into_iter()
        .map(|r| (*r).clone())
        .collect();
    (pods, revisions)
}

async fn rolling_update(
    ds: &DaemonSet,
    ctx: &Context,
    max_unavailable: super::policy::MaxUnavailable,
) -> Result<Action, Error> {
    let uid = ds.uid().unwrap_or_default();
    let (pods, revisions) = owned(ds, ctx);
    let expected = ctx.expectations.lock().unwrap().pending(&uid, &pods);
    let input = RollingInput {
        daemonset: ds.clone(),
        revisions,
        pods: pods.iter().map(|p| (**p).clone()).collect(),
        nodes: ctx.nodes.state().iter().map(|n| (**n).clone()).collect(),
        max_unavailable,
        now: Timestamp::now(),
        expected_deletions: expected.clone(),
    };
    let plan = plan_rolling_update(&input);
    record_progress(ds, ctx, &plan);

    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ds.namespace().unwrap_or_default());
    // Recorded before any call: an event burst replanning while calls are in flight must
    // already see these pods as gone.
    {
        let mut expectations = ctx.expectations.lock().unwrap();
        for step in &plan.deletions {
            expectations.expect(&uid, &step.uid);
        }
    }
    // The deletions of one plan are independent: issue them together so the last pod of
    // a wave does not wait for every call before it.
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
    let results: Vec<_> = futures::stream::iter(calls)
        .buffer_unordered(DELETE_CONCURRENCY)
        .collect()
        .await;
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
            // Gone already, or replaced by a pod of the same name: nothing to do.
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {
                ctx.expectations.lock().unwrap().forget(&uid, &step.uid);
            }
            Err(source) => {
                ctx.expectations.lock().unwrap().forget(&uid, &step.uid);
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
        ctx.last_said
            .lock()
            .unwrap()
            .insert((uid.clone(), "progress"), "rolling".into());
    }
    if !deleted.is_empty() {
        let names: Vec<String> = deleted
            .iter()
            .map(|d| format!("{} on {}", d.name, d.node))
            .collect();
        let note = format!(
            "deleted {} pod(s) for the upgrade (budget {}, unavailable before {}; {}/{} nodes updated): {}",
            deleted.len(),
            plan.progress.budget,
            plan.progress.unavailable,
            plan.progress.updated,
            plan.progress.total_nodes,
            shorten(&names)
        );
        ctx.publish(ds, EventType::Normal, "UpgradingPods", "DeletePods", note)
            .await;
    }
    if let Some(e) = failure {
        return Err(e);
    }
    Ok(match plan.progress.recheck_after {
        // minReadySeconds elapsing fires no watch event: come back when it does.
        Some(after) => Action::requeue(after + Duration::from_millis(100)),
        None if !expected.is_empty() => Action::requeue(Duration::from_secs(10)),
        None => Action::requeue(Duration::from_secs(300)),
    })
}

fn shorten(names: &[String]) -> String {
    let mut s = names
        .iter()
        .take(EVENT_NAMES_SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > EVENT_NAMES_SHOWN {
        s.push_str(&format!(" (+{} more)", names.len() - EVENT_NAMES_SHOWN));
    }
    s
}

/// Updates metrics and, when the rollout's state changes, says so in one Event.
fn record_progress(ds: &DaemonSet, ctx: &Context, plan: &RollingPlan) {
    let p = &plan.progress;
    let labels = DaemonSetLabels {
        namespace: ds.namespace().unwrap_or_default(),
        daemonset: ds.name_any(),
    };
    ctx.metrics
        .pods_updated
        .get_or_create(&labels)
        .set(p.updated as i64);
    ctx.metrics
        .pods_pending
        .get_or_create(&labels)
        .set(p.total_nodes.saturating_sub(p.updated) as i64);
    ctx.metrics
        .nodes_skipped_not_ready
        .get_or_create(&labels)
        .set((p.not_ready_nodes_skipped.len() + p.missing_nodes_skipped.len()) as i64);

    let said = match &p.blocked {
        // Said only after a rollout step (deletions mark the slot), and never for an
        // empty DaemonSet, so creating a DaemonSet does not announce a "rollout".
        Some(Blocker::Complete) if p.total_nodes == 0 || !ctx.has_said(&ds.uid().unwrap_or_default(), "progress") => None,
        Some(Blocker::Complete) => Some((
            "RolloutComplete",
            format!("all {} node(s) run the current revision", p.total_nodes),
        )),
        Some(Blocker::WaitingForSkippedNodes { nodes }) => Some((
            "WaitingForNotReadyNodes",
            format!(
                "Ready nodes are updated ({}/{}); {} NotReady or missing node(s) are upgraded as soon as they are Ready: {}",
                p.updated,
                p.total_nodes,
                nodes.len(),
                shorten(nodes)
            ),
        )),
        Some(Blocker::CurrentRevisionUnknown) => Some((
            "CurrentRevisionUnknown",
            "no ControllerRevision or template generation identifies the current revision yet".to_string(),
        )),
        _ => None,
    };
    if let Some((reason, note)) = said {
        let uid = ds.uid().unwrap_or_default();
        if ctx.first_time(&uid, "progress", &note) {
            tracing::info!(reason, %note, "rollout progress");
            let (ctx_recorder, ds) = (ctx.recorder.clone(), ds.clone());
            let event = Event {
                type_: EventType::Normal,
                reason: reason.into(),
                note: Some(note),
                action: "Rollout".into(),
                secondary: None,
            };
            // Fire and forget: progress Events must not slow the next deletion.
            tokio::spawn(async move {
                let _ = ctx_recorder.publish(&event, &ds.object_ref(&())).await;
            });
        }
    }
}

/// OTA: write `PodNeedUpgrade` on every pod whose condition is missing or stale.
async fn mark_need_upgrade(ds: &DaemonSet, ctx: &Context) -> Result<Action, Error> {
    let (pods, revisions) = owned(ds, ctx);
    let pods: Vec<Pod> = pods.iter().map(|p| (**p).clone()).collect();
    let updates = plan_need_upgrade_conditions(ds, &revisions, &pods, Timestamp::now());
    for update in &updates {
        let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &update.namespace);
        // Strategic merge on the conditions list (merge key `type`): touches only our
        // condition, so concurrent kubelet writes are not overwritten.
        let patch = json!({"status": {"conditions": [update.condition]}});
        match api
            .patch_status(
                &update.name,
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(source) => {
                return Err(Error::WriteCondition {
                    namespace: update.namespace.clone(),
                    name: update.name.clone(),
                    source,
                })
            }
        }
    }
    if !updates.is_empty() {
        let need = updates
            .iter()
            .filter(|u| u.condition.status == "True")
            .count();
        tracing::info!(
            written = updates.len(),
            need_upgrade = need,
            "PodNeedUpgrade conditions written"
        );
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}

/// A DaemonSet that stopped being OTA must not leave `PodNeedUpgrade` behind.
async fn remove_stale_conditions(ds: &DaemonSet, ctx: &Context) -> Result<Action, Error> {
    let (pods, _) = owned(ds, ctx);
    let pods: Vec<Pod> = pods.iter().map(|p| (**p).clone()).collect();
    for stale in plan_stale_condition_removals(ds, &pods) {
        let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &stale.namespace);
        let patch = json!({"status": {"conditions": [{"type": POD_NEED_UPGRADE_CONDITION, "$patch": "delete"}]}});
        match api
            .patch_status(
                &stale.name,
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
        {
            Ok(_) => tracing::info!(pod = %stale.name, "removed stale PodNeedUpgrade condition"),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(source) => {
                return Err(Error::WriteCondition {
                    namespace: stale.namespace.clone(),
                    name: stale.name.clone(),
                    source,
                })
            }
        }
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}
