//! What a reconcile reads of the shared stores: a DaemonSet's pods, its current
//! revision, and its plan memo's pods and nodes (the fleet bench reads them too).
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use kube::runtime::reflector::ObjectRef;
use kube::ResourceExt;

use super::context::{Context, Memo};
use crate::daemonset::failure::rollback::owned_revisions;
use crate::daemonset::failure::RevisionRef;
use crate::daemonset::revision::CurrentRevision;
use crate::object::{is_controlled_by, CachedPod, NodeFacts};
use crate::watch::{for_each_in, Stores};

/// This DaemonSet's pods and current revision, borrowed from the shared stores.
pub(super) fn owned(
    ds: &DaemonSet,
    ctx: &Context,
) -> (Vec<Arc<CachedPod>>, Option<CurrentRevision>) {
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
    let revisions = revisions_of_namespace(stores, ds);
    CurrentRevision::of(ds, revisions.iter().map(|r| &**r))
}

/// The DaemonSet's current revision and its ControllerRevisions, newest first (what a
/// rollback goes back to).
pub fn revisions(stores: &Stores, ds: &DaemonSet) -> (Option<CurrentRevision>, Vec<RevisionRef>) {
    let revisions = revisions_of_namespace(stores, ds);
    let current = CurrentRevision::of(ds, revisions.iter().map(|r| &**r));
    (current, owned_revisions(ds, revisions.iter().map(|r| &**r)))
}

fn revisions_of_namespace(stores: &Stores, ds: &DaemonSet) -> Vec<Arc<ControllerRevision>> {
    let ns = ds.namespace();
    stores
        .revisions
        .state_filter(|r| r.metadata.namespace == ns)
}
