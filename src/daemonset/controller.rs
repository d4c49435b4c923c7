//! Wiring of the DaemonSet upgrade controller: the shared watches and what re-plans a
//! DaemonSet, the state kept per DaemonSet, and the runner. One reconcile is observe
//! (the shared stores) -> decide (pure: `decide`, `rolling_plan`, `ota_plan`) -> apply
//! (deletions, condition writes, Events), in the submodules:
//!
//! - `context`: what the controller keeps between reconciles, per DaemonSet;
//! - `dispatch`: the reconcile, by the model the DaemonSet asks for;
//! - `observe`: what a reconcile reads of the shared stores;
//! - `rolling`: AdvancedRollingUpdate: observe, decide, execute the deletions;
//! - `rollback`: `rollgate.io/on-failure: rollback`: the template put back, the revision recorded;
//! - `pull_requests`: pull-ahead's requests and their Events;
//! - `progress`: a rollout's progress in metrics and Events;
//! - `native_waits`: waits on the native controller, and the target confirmed before deleting;
//! - `ota`: `PodNeedUpgrade` written and removed;
//! - `warnings`: Warnings about a DaemonSet rollgate does not act on, said once;
//! - `forget`: what is dropped when a DaemonSet is gone.
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Future, StreamExt};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::Controller;
use kube::Client;

use super::metrics::DaemonSetMetrics;
use super::other_updater::{self, OtherUpdaters};
use super::pull_ahead::PullAheadLimits;
use super::rolling_plan::RollingLimits;
use super::triggers::{
    daemonset_owners, daemonset_unchanged, daemonsets_for_node, pod_replans_owner, pod_unchanged,
    NodeTriggerView,
};
use crate::apply::{EventDedup, Events, Writer};
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::names::DAEMONSET_CONTROLLER_NAME;
use crate::object::PodFacts;
use crate::runtime::Shutdown;
use crate::watch::runner::{Run, RunMetrics};
use crate::watch::{applied, applied_unless, touched_unless, Change, Watches};

mod context;
mod dispatch;
mod forget;
mod native_waits;
mod observe;
mod ota;
mod progress;
mod pull_requests;
mod rollback;
mod rolling;
#[cfg(test)]
mod tests;
mod warnings;

pub use context::{Context, Memo};
use dispatch::reconcile;
use forget::forget_deleted;
pub use observe::{current_revision, observe, owned_pods, PodLookup};

/// A failed deletion or condition write (see `crate::apply`).
pub use crate::apply::Error;

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
        halted: Mutex::default(),
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
        // Not `owns_shared_stream`: it reads `metadata.ownerReferences`, which a cached
        // pod keeps apart from its metadata (`CachedPod::workload`).
        .watches_shared_stream(pods, |pod| daemonset_owners(&*pod))
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
        ahead: None,
    };
    let forgetting = forget_deleted(watches, ctx.clone(), shutdown);
    async move {
        tokio::join!(run.drive(controller, reconcile, ctx), forgetting);
    }
}
