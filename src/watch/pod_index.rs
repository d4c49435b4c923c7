//! The shared pod store's pods by their controller owner's UID, and within an owner by
//! node: [`PodsByOwner`], kept in step with the store by the pod watch itself
//! ([`fanout::Fanout::reflect_indexed`](super::fanout::Fanout::reflect_indexed)).
//!
//! Why: the store holds every pod of the cluster (the readiness gates need Deployment
//! pods too). At 10,000 nodes x 20 DaemonSets a reconcile that filters the whole store
//! visits 200,000 pods to find its 10,000, and a node flap re-planned every DaemonSet
//! (issue 25). Here a reconcile reads its own pods, and "does this DaemonSet have a pod
//! on that node" is two hash lookups.
//!
//! Memory: the index holds `Arc`s of the store's own pods, never a copy, and no key
//! string of its own: a node's entry is keyed by one of its pods (hashed and compared
//! by that pod's node name), so a pod costs the index about one pointer and its slot.
//! Each entry is re-keyed on every change, so no older version of a pod outlives it.
use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, RwLock};

use crate::object::{CachedPod, PodFacts};

/// Pods by controller owner UID, then by node; cheap to clone (one shared index).
#[derive(Clone, Default)]
pub struct PodsByOwner(Arc<RwLock<Owners>>);

#[derive(Default)]
struct Owners(HashMap<Box<str>, ByNode>);

/// One owner's pods by node (`""` for a pod with no node yet).
type ByNode = HashMap<NodeKey, Slot>;

/// The node name of the pod it holds: what an owner's pods are grouped by.
struct NodeKey(Arc<CachedPod>);

impl NodeKey {
    fn node(&self) -> &str {
        node_of(&self.0)
    }
}

impl Hash for NodeKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // As `str` hashes, so lookups by `&str` find it (`Borrow`).
        self.node().hash(state)
    }
}
impl PartialEq for NodeKey {
    fn eq(&self, other: &Self) -> bool {
        self.node() == other.node()
    }
}
impl Eq for NodeKey {}
impl Borrow<str> for NodeKey {
    fn borrow(&self) -> &str {
        self.node()
    }
}

/// The pods of one owner on one node: nearly always one, two while a pod is replaced.
enum Slot {
    One(Arc<CachedPod>),
    Many(Vec<Arc<CachedPod>>),
}

impl Slot {
    fn pods(&self) -> &[Arc<CachedPod>] {
        match self {
            Slot::One(pod) => std::slice::from_ref(pod),
            Slot::Many(pods) => pods,
        }
    }

    fn into_vec(self) -> Vec<Arc<CachedPod>> {
        match self {
            Slot::One(pod) => vec![pod],
            Slot::Many(pods) => pods,
        }
    }

    fn from_vec(mut pods: Vec<Arc<CachedPod>>) -> Option<Self> {
        match pods.len() {
            0 => None,
            1 => pods.pop().map(Slot::One),
            _ => Some(Slot::Many(pods)),
        }
    }
}

/// The node a pod is grouped under: where it runs or, pending, where it is meant to.
fn node_of(pod: &CachedPod) -> &str {
    pod.node_or_affinity_node().unwrap_or_default()
}

fn same_pod(a: &CachedPod, b: &CachedPod) -> bool {
    a.pod_namespace() == b.pod_namespace() && a.pod_name() == b.pod_name()
}

impl Owners {
    fn insert(&mut self, pod: &Arc<CachedPod>) {
        let Some(owner) = pod.controller_uid() else {
            return;
        };
        let by_node = match self.0.get_mut(owner) {
            Some(by_node) => by_node,
            None => self.0.entry(owner.into()).or_default(),
        };
        let mut pods = by_node
            .remove_entry(node_of(pod))
            .map(|(_, slot)| slot.into_vec())
            .unwrap_or_default();
        pods.retain(|p| !same_pod(p, pod));
        pods.push(pod.clone());
        if let Some(slot) = Slot::from_vec(pods) {
            by_node.insert(NodeKey(pod.clone()), slot);
        }
    }

    fn remove(&mut self, pod: &CachedPod) {
        let Some(owner) = pod.controller_uid() else {
            return;
        };
        let Some(by_node) = self.0.get_mut(owner) else {
            return;
        };
        if let Some((_, slot)) = by_node.remove_entry(node_of(pod)) {
            let mut pods = slot.into_vec();
            pods.retain(|p| !same_pod(p, pod));
            // Re-keyed by a pod still there, so the removed one is not kept alive.
            if let Some(key) = pods.first().cloned() {
                by_node.insert(NodeKey(key), Slot::from_vec(pods).expect("not empty"));
            }
        }
        if by_node.is_empty() {
            self.0.remove(owner);
        }
    }
}

impl PodsByOwner {
    /// An index of `pods` (tests, benches; the watch keeps the shared one).
    pub fn of<'a>(pods: impl IntoIterator<Item = &'a Arc<CachedPod>>) -> Self {
        let index = PodsByOwner::default();
        index.relisted(pods);
        index
    }

    /// The pod `before` (the store's previous version, if any) became `after`.
    pub fn applied(&self, before: Option<&Arc<CachedPod>>, after: &Arc<CachedPod>) {
        let mut owners = self.0.write().unwrap();
        if let Some(before) = before {
            owners.remove(before);
        }
        owners.insert(after);
    }

    /// The pod is gone (`last` as the store last held it, else as the watch sent it).
    pub fn deleted(&self, last: &CachedPod) {
        self.0.write().unwrap().remove(last);
    }

    /// The store was replaced by a (re)list: the index is rebuilt from it.
    pub fn relisted<'a>(&self, pods: impl IntoIterator<Item = &'a Arc<CachedPod>>) {
        let mut owners = Owners::default();
        for pod in pods {
            owners.insert(pod);
        }
        *self.0.write().unwrap() = owners;
    }

    /// The pods whose controller owner has this UID, in no particular order.
    pub fn pods_of(&self, owner_uid: &str) -> Vec<Arc<CachedPod>> {
        let owners = self.0.read().unwrap();
        let Some(by_node) = owners.0.get(owner_uid) else {
            return Vec::new();
        };
        let mut pods = Vec::with_capacity(by_node.len());
        for slot in by_node.values() {
            pods.extend(slot.pods().iter().cloned());
        }
        pods
    }

    /// Calls `visit` with each pod whose controller owner has this UID, in no particular
    /// order, under the index's read lock (keep it short). Nothing is cloned: a plan
    /// that keeps what it read of each pod version (`rolling_plan::PlanMemo`) touches
    /// only the pods that changed, where `pods_of` writes to every pod's count.
    pub fn for_each_of(&self, owner_uid: &str, mut visit: impl FnMut(&Arc<CachedPod>)) {
        let owners = self.0.read().unwrap();
        if let Some(by_node) = owners.0.get(owner_uid) {
            by_node
                .values()
                .flat_map(|slot| slot.pods())
                .for_each(&mut visit);
        }
    }

    /// Whether the owner with this UID has a pod on `node` (bound there, or pending for
    /// it), terminating ones included.
    pub fn has_pod_on(&self, owner_uid: &str, node: &str) -> bool {
        let owners = self.0.read().unwrap();
        owners
            .0
            .get(owner_uid)
            .is_some_and(|by_node| by_node.contains_key(node))
    }

    /// The pods of the owner with this UID on `node` (bound there, or pending for it),
    /// terminating ones included; usually one.
    pub fn pods_on(&self, owner_uid: &str, node: &str) -> Vec<Arc<CachedPod>> {
        let owners = self.0.read().unwrap();
        owners
            .0
            .get(owner_uid)
            .and_then(|by_node| by_node.get(node))
            .map_or_else(Vec::new, |slot| slot.pods().to_vec())
    }

    /// How many pods the index holds (every pod with a controller owner).
    pub fn len(&self) -> usize {
        let owners = self.0.read().unwrap();
        owners
            .0
            .values()
            .flat_map(|by_node| by_node.values())
            .map(|slot| slot.pods().len())
            .sum()
    }

    /// Every `Arc` the index holds, keys included.
    #[cfg(test)]
    fn every_arc(&self) -> Vec<Arc<CachedPod>> {
        let owners = self.0.read().unwrap();
        owners
            .0
            .values()
            .flat_map(|by_node| by_node.iter())
            .flat_map(|(key, slot)| std::iter::once(&key.0).chain(slot.pods()))
            .cloned()
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.0.read().unwrap().0.is_empty()
    }
}

impl super::fanout::StoreIndex<CachedPod> for PodsByOwner {
    fn applied(&self, before: Option<&Arc<CachedPod>>, after: &Arc<CachedPod>) {
        PodsByOwner::applied(self, before, after)
    }
    fn deleted(&self, last: &CachedPod) {
        PodsByOwner::deleted(self, last)
    }
    fn relisted(&self, all: &[Arc<CachedPod>]) {
        PodsByOwner::relisted(self, all)
    }
}

#[cfg(test)]
mod tests {
    //! The index against a full scan of the store, through the watch's own path
    //! (`Fanout::reflect_indexed`), after any sequence of applies, deletes and relists.
    use std::collections::BTreeSet;

    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::reflector::{self, Store};
    use kube::runtime::watcher::Event;
    use proptest::prelude::*;

    use super::*;
    use crate::object::is_controlled_by;
    use crate::testkit::{DaemonSetBuilder, PodBuilder};
    use crate::watch::fanout::Fanout;

    const OWNERS: [&str; 3] = ["a", "b", "c"];
    const NODES: [&str; 3] = ["n1", "n2", "n3"];

    /// One pod version: which name, owner (or none), node (bound, pending for it, or
    /// none) and a version counter, so updates that change nothing else are seen too.
    #[derive(Debug, Clone)]
    struct Version {
        name: usize,
        owner: Option<usize>,
        node: Option<(usize, bool)>,
        version: u32,
    }

    fn pod(v: &Version) -> Pod {
        let ds = DaemonSetBuilder::new(OWNERS[v.owner.unwrap_or(0)]).build();
        let name = format!("p{}", v.name);
        let mut builder = PodBuilder::new(&name, &ds);
        builder = match v.node {
            Some((n, true)) => builder.on_node(NODES[n]),
            Some((n, false)) => builder.pending_for_node(NODES[n]),
            None => builder,
        };
        let mut pod = builder.build();
        if v.owner.is_none() {
            pod.metadata.owner_references = None;
        }
        pod.metadata.resource_version = Some(v.version.to_string());
        pod
    }

    #[derive(Debug, Clone)]
    enum Step {
        Apply(Version),
        Delete(Version),
        /// A relist that ends with these pods (later versions win).
        Relist(Vec<Version>),
    }

    fn version() -> impl Strategy<Value = Version> {
        (
            0..6usize,
            proptest::option::weighted(0.9, 0..OWNERS.len()),
            proptest::option::weighted(0.9, (0..NODES.len(), any::<bool>())),
            0..1000u32,
        )
            .prop_map(|(name, owner, node, version)| Version {
                name,
                owner,
                node,
                version,
            })
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            6 => version().prop_map(Step::Apply),
            3 => version().prop_map(Step::Delete),
            1 => proptest::collection::vec(version(), 0..6).prop_map(Step::Relist),
        ]
    }

    fn events(steps: &[Step]) -> Vec<Result<Event<CachedPod>, kube::runtime::watcher::Error>> {
        let cached = |v: &Version| CachedPod::from(pod(v));
        let mut events = Vec::new();
        for step in steps {
            match step {
                Step::Apply(v) => events.push(Ok(Event::Apply(cached(v)))),
                Step::Delete(v) => events.push(Ok(Event::Delete(cached(v)))),
                Step::Relist(vs) => {
                    events.push(Ok(Event::Init));
                    events.extend(vs.iter().map(|v| Ok(Event::InitApply(cached(v)))));
                    events.push(Ok(Event::InitDone));
                }
            }
        }
        events
    }

    /// Every (owner, pod, same Arc as the store's) the index and a scan each give.
    fn compare(store: &Store<CachedPod>, index: &PodsByOwner) {
        let all = store.state();
        let key = |p: &Arc<CachedPod>| (p.pod_name().to_string(), Arc::as_ptr(p) as usize);
        for owner in OWNERS {
            let uid = format!("uid-ds-{owner}");
            let scanned: BTreeSet<_> = all
                .iter()
                .filter(|p| is_controlled_by(&***p, &uid))
                .map(key)
                .collect();
            let indexed: BTreeSet<_> = index.pods_of(&uid).iter().map(key).collect();
            assert_eq!(indexed, scanned, "owner {owner}");
            for node in NODES.iter().chain([&""]) {
                let on_node = all
                    .iter()
                    .any(|p| is_controlled_by(&**p, &uid) && node_of(p) == *node);
                assert_eq!(index.has_pod_on(&uid, node), on_node, "{owner} on {node}");
            }
        }
        let owned = all.iter().filter(|p| p.controller_uid().is_some()).count();
        assert_eq!(index.len(), owned);
    }

    fn run(steps: &[Step]) {
        let (store, writer) = reflector::store::<CachedPod>();
        let index = PodsByOwner::default();
        let fanout = Fanout::new(4);
        let reflected =
            fanout.reflect_indexed(writer, futures::stream::iter(events(steps)), index.clone());
        futures::executor::block_on(reflected.for_each(|_| async {}));
        compare(&store, &index);
        // Every Arc the index holds, keys included, is the store's current version:
        // nothing older is kept alive by it.
        let current: BTreeSet<usize> = store
            .state()
            .iter()
            .map(|p| Arc::as_ptr(p) as usize)
            .collect();
        for held in index.every_arc() {
            assert!(
                current.contains(&(Arc::as_ptr(&held) as usize)),
                "{} v{:?}",
                held.pod_name(),
                held.metadata.resource_version
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn the_index_equals_a_full_scan(steps in proptest::collection::vec(step(), 0..40)) {
            run(&steps);
        }
    }

    /// The cases the generator must reach, spelled out: a pod moving owner and node, a
    /// delete of a version the store no longer holds, and a relist dropping a pod.
    #[test]
    fn moves_stale_deletes_and_relists() {
        let v = |name, owner, node: Option<(usize, bool)>, version| Version {
            name,
            owner,
            node,
            version,
        };
        run(&[
            Step::Apply(v(0, Some(0), Some((0, false)), 1)),
            Step::Apply(v(0, Some(0), Some((0, true)), 2)),
            Step::Apply(v(0, Some(1), Some((1, true)), 3)),
            Step::Apply(v(1, Some(1), Some((1, true)), 4)),
            Step::Delete(v(0, Some(2), None, 5)),
            Step::Relist(vec![v(2, Some(2), Some((2, true)), 6)]),
            Step::Apply(v(3, None, Some((2, true)), 7)),
        ]);
    }
}
