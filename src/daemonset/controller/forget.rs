//! Letting go of DaemonSets that are gone: at their deletion, and by a sweep for those
//! a relist dropped, everything the controller keeps per DaemonSet is dropped.
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::{Future, StreamExt};
use kube::ResourceExt;

use super::context::Context;
use crate::runtime::Shutdown;
use crate::watch::Watches;

/// Forgotten DaemonSets are swept from memory this often (a relist can miss deletions).
const SWEEP_EVERY: Duration = Duration::from_secs(60);

impl Context {
    /// Drops everything kept about a DaemonSet that is gone.
    pub(super) fn forget(&self, uid: &str, namespace: &str, name: &str) {
        self.expectations.lock().unwrap().forget_daemonset(uid);
        self.said.forget_object(uid);
        self.verified.lock().unwrap().remove(uid);
        self.waits.lock().unwrap().done(uid);
        self.metrics.forget(namespace, name);
        self.other_updaters.forget(namespace, name);
        self.pull_tries.lock().unwrap().remove(uid);
        self.pull_unseen.lock().unwrap().remove(uid);
        self.plan_memos.lock().unwrap().remove(uid);
        self.halted.lock().unwrap().remove(uid);
    }
}

/// Forgets DaemonSets on deletion, and sweeps now and then for those a relist dropped.
pub(super) fn forget_deleted(
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
                    let live: HashSet<String> = ctx
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
