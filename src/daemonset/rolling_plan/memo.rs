//! The memo that keeps a rolling DaemonSet's pod and node looks per object version, in
//! the order a plan walks them, while the DaemonSet rolls out (`PlanMemo`).
//!
//! Why: a plan runs on every relevant pod write and node Ready transition, over every
//! pod and node of the DaemonSet (10,000 of each at fleet size, issue 25), and most of
//! its time went to reading them: each pod and node is its own allocation, and reading
//! a few of its fields costs a handful of cache misses. Between two plans nearly every
//! object is the same version: the store replaces an object's `Arc` when it changes and
//! never changes one in place. So the memo keys its looks by the object's address, and
//! holds that `Arc` so that no other object can take the address while the look is
//! kept. What a look reads of the DaemonSet (its UID, current revision, template) is the
//! memo's key: when it changes, the memo starts over. A plan from the memo decides
//! exactly as one from fresh looks (property test `a_memo_plans_as_fresh_looks_do`).
//!
//! Memory: the controller keeps a memo only while its DaemonSet rolls out (dropped when
//! the plan is complete): about 310 bytes per pod of that DaemonSet, the looks of its
//! nodes included (`benches/daemonset_fleet.rs`).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use slab::Slab;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::PodSpec;

use crate::daemonset::revision::CurrentRevision;
use crate::names::POD_NEED_UPGRADE_CONDITION;
use crate::object::{NodeFacts, PodFacts};

use super::arranged::{
    Arranged, Group, Liveness, NodeKey, NodeLook, Placed, PodLook, PodsByNode, ReadyLook,
};

/// Hashes an address: multiplied and folded, so the alignment's zero low bits and the
/// heap's shared high bits both spread.
#[derive(Default)]
struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn write_usize(&mut self, n: usize) {
        let mixed = (n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = mixed ^ (mixed >> 29);
    }
}

type ByAddress<V> = HashMap<usize, V, BuildHasherDefault<AddressHasher>>;

fn address<T>(object: &Arc<T>) -> usize {
    Arc::as_ptr(object) as usize
}

/// A pod's look, owned: the node name is copied, so the look outlives any borrow.
struct KeptPod<P> {
    /// Held, so the address is not reused while the look is kept.
    pod: Arc<P>,
    /// In the DaemonSet's namespace (an owner reference names an object of the pod's
    /// own namespace; kept as the controller's pod lookup has it).
    in_namespace: bool,
    node: Option<Box<str>>,
    node_prefix: u128,
    controlled: bool,
    terminating: bool,
    updated: bool,
    ready: Option<ReadyLook>,
    uid_hash: Option<u64>,
    need_upgrade: bool,
}

impl<P: PodFacts> KeptPod<P> {
    fn of(pod: &Arc<P>, basis: &Basis) -> Self {
        let look = PodLook::of(&**pod, &basis.ds_uid, basis.current.as_ref());
        KeptPod {
            pod: pod.clone(),
            in_namespace: pod.metadata().namespace == basis.namespace,
            node: look.node.map(|key| key.name.into()),
            node_prefix: look.node.map_or(0, |key| key.prefix),
            controlled: look.controlled,
            terminating: look.terminating,
            updated: look.updated,
            ready: look.ready,
            uid_hash: look.uid_hash,
            need_upgrade: pod.condition(POD_NEED_UPGRADE_CONDITION).is_some(),
        }
    }

    /// Counted by a plan: controlled by the DaemonSet, in its namespace, on a node.
    fn planned(&self) -> bool {
        self.in_namespace && self.controlled && self.node.is_some()
    }

    fn key(&self) -> Option<NodeKey<'_>> {
        self.node.as_deref().map(|name| NodeKey {
            prefix: self.node_prefix,
            name,
        })
    }

    /// The plan's order of pods: by node, then by pod name.
    fn order(&self, other: &Self) -> std::cmp::Ordering {
        self.key()
            .cmp(&other.key())
            .then_with(|| self.pod.pod_name().cmp(other.pod.pod_name()))
    }

    fn look(&self) -> PodLook<'_> {
        PodLook {
            controlled: self.controlled,
            node: self.key(),
            terminating: self.terminating,
            updated: self.updated,
            ready: self.ready,
            uid_hash: self.uid_hash,
        }
    }
}

/// A node's look, owned.
struct KeptNode<N> {
    node: Arc<N>,
    name: Option<Box<str>>,
    prefix: u128,
    ready: bool,
    placed: bool,
}

impl<N: NodeFacts> KeptNode<N> {
    fn of(node: &Arc<N>, daemonset: &DaemonSet) -> Self {
        let look = NodeLook::of(&**node, daemonset);
        KeptNode {
            node: node.clone(),
            name: look.key.map(|key| key.name.into()),
            prefix: look.key.map_or(0, |key| key.prefix),
            ready: look.ready,
            placed: look.placed,
        }
    }

    fn look(&self) -> NodeLook<'_> {
        NodeLook {
            key: self.key(),
            ready: self.ready,
            placed: self.placed,
        }
    }
}

impl<N> KeptNode<N> {
    fn key(&self) -> Option<NodeKey<'_>> {
        self.name.as_deref().map(|name| NodeKey {
            prefix: self.prefix,
            name,
        })
    }
}

/// What every kept look read of the DaemonSet: when it differs, the looks are dropped.
#[derive(Debug, Clone, PartialEq)]
struct Basis {
    ds_uid: String,
    namespace: Option<String>,
    current: Option<CurrentRevision>,
    /// Placement reads the pod template's spec (selector, affinity, tolerations, host
    /// network); compared whole, it costs one comparison per plan.
    template: Option<PodSpec>,
    /// The DaemonSet as the looks were made, for placement (`NodeLook::of`).
    daemonset: DaemonSet,
}

impl Basis {
    fn of(daemonset: &DaemonSet, current: Option<&CurrentRevision>) -> Self {
        Basis {
            ds_uid: daemonset.metadata.uid.clone().unwrap_or_default(),
            namespace: daemonset.metadata.namespace.clone(),
            current: current.cloned(),
            template: daemonset.spec.template.spec.clone(),
            daemonset: daemonset.clone(),
        }
    }

    fn matches(&self, daemonset: &DaemonSet, current: Option<&CurrentRevision>) -> bool {
        self.ds_uid.as_str() == daemonset.metadata.uid.as_deref().unwrap_or_default()
            && self.namespace == daemonset.metadata.namespace
            && self.current.as_ref() == current
            && self.template == daemonset.spec.template.spec
    }
}

/// What the memo needs of a kept look: its object's address, whether a plan walks it,
/// and in which order.
trait Kept {
    fn address(&self) -> usize;
    fn walked(&self) -> bool;
    fn walk_order(&self, other: &Self) -> std::cmp::Ordering;
}

impl<P: PodFacts> Kept for KeptPod<P> {
    fn address(&self) -> usize {
        address(&self.pod)
    }
    fn walked(&self) -> bool {
        self.planned()
    }
    fn walk_order(&self, other: &Self) -> std::cmp::Ordering {
        self.order(other)
    }
}

impl<N> Kept for KeptNode<N> {
    fn address(&self) -> usize {
        address(&self.node)
    }
    fn walked(&self) -> bool {
        self.name.is_some()
    }
    fn walk_order(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

/// Looks in stable slots, found by their object's address, with the slots a plan walks
/// listed in walk order.
///
/// Memory order: a plan walks 10,000 pods and 10,000 nodes, and a look in a slot far
/// from the last one read is a cache miss (about 100 ns; the first observation adds
/// looks in the stores' hash order). So the looks are moved into slots in walk order
/// when they are first observed, and again whenever a sixteenth of the order has been
/// put in since (`lay_out`), and which refresh saw each slot is kept beside the looks:
/// seeing an object that did not change reads no look.
struct Looks<T> {
    slab: Slab<T>,
    slots: ByAddress<usize>,
    /// By slot: the refresh that last saw it.
    seen: Vec<u64>,
    /// The walked slots, in walk order.
    order: Vec<usize>,
    /// Slots added by the refresh under way: put in order by `finish`.
    added: Vec<usize>,
    /// Slots put in order since the last `lay_out`.
    out_of_place: usize,
}

impl<T> Default for Looks<T> {
    fn default() -> Self {
        Looks {
            slab: Slab::new(),
            slots: ByAddress::default(),
            seen: Vec::new(),
            order: Vec::new(),
            added: Vec::new(),
            out_of_place: 0,
        }
    }
}

impl<T: Kept> Looks<T> {
    /// Marks the object at `address` seen in `round`: `None` when no look of it is
    /// kept, else whether this round had seen it already.
    fn see(&mut self, address: usize, round: u64) -> Option<bool> {
        let &slot = self.slots.get(&address)?;
        Some(std::mem::replace(&mut self.seen[slot], round) == round)
    }

    /// A look of an object not kept yet, seen in `round`.
    fn add(&mut self, look: T, round: u64) {
        let address = look.address();
        let slot = self.slab.insert(look);
        if self.seen.len() <= slot {
            self.seen.resize(slot + 1, 0);
        }
        self.seen[slot] = round;
        self.slots.insert(address, slot);
        self.added.push(slot);
    }

    /// Ends a refresh that saw `seen_count` distinct objects: drops the looks it did
    /// not see (there are some when it saw fewer than are kept), puts the added ones
    /// in order, and lays the slots out again when enough are out of place.
    fn finish(&mut self, seen_count: usize, round: u64) {
        if seen_count < self.slab.len() {
            let (seen, slots) = (&self.seen, &mut self.slots);
            self.order.retain(|&slot| seen[slot] == round);
            self.slab.retain(|slot, look| {
                let kept = seen[slot] == round;
                if !kept {
                    slots.remove(&look.address());
                }
                kept
            });
        }
        let before = self.order.len();
        let slab = &self.slab;
        put_in_order(
            &mut self.order,
            &mut self.added,
            |slot| slab[slot].walked(),
            |a, b| slab[a].walk_order(&slab[b]),
        );
        self.out_of_place += self.order.len() - before;
        if self.out_of_place * 16 > self.order.len() {
            self.lay_out(round);
        }
    }

    /// Moves the looks into new slots, the walked ones first in walk order, so that a
    /// walk reads memory in order. Every look kept was seen in `round` (`finish`).
    fn lay_out(&mut self, round: u64) {
        let mut old = std::mem::take(&mut self.slab);
        let mut slab = Slab::with_capacity(old.len());
        for slot in &mut self.order {
            *slot = slab.insert(old.remove(*slot));
        }
        for look in old.drain() {
            slab.insert(look);
        }
        self.slots.clear();
        for (slot, look) in &slab {
            self.slots.insert(look.address(), slot);
        }
        self.seen = vec![round; slab.len()];
        self.slab = slab;
        self.out_of_place = 0;
    }

    /// The walked looks, in walk order.
    fn walk(&self) -> impl Iterator<Item = &T> {
        self.order.iter().map(|&slot| &self.slab[slot])
    }

    fn all(&self) -> impl Iterator<Item = &T> {
        self.slab.iter().map(|(_, look)| look)
    }
}

/// One DaemonSet's pods and nodes with their looks, kept between its plans by object
/// version (see the module's opening comment), in the order a plan walks them: what
/// its plans read, observed once per plan by `begin` and the `Refresh` it returns (or
/// `refresh`, from slices), and planned by `plan_rolling_update_memo`.
///
/// Order: the pods a plan counts (`KeptPod::planned`) are kept sorted by node, then by
/// pod name, and the named nodes by name (`Looks`). A new version of an object takes
/// a slot of its own and is put in place by binary search (a node flap writes four
/// node versions; the rollout a few pod versions per node), so a plan reads both
/// orders in one merge (`arranged`) instead of sorting 10,000 pods and searching for
/// each of 10,000 nodes (issue 25). A first observation sorts once.
pub struct PlanMemo<P, N> {
    basis: Option<Basis>,
    pods: Looks<KeptPod<P>>,
    nodes: Looks<KeptNode<N>>,
    /// Which refresh this is: looks not seen by the latest one are dropped by it.
    round: u64,
}

impl<P, N> Default for PlanMemo<P, N> {
    fn default() -> Self {
        PlanMemo {
            basis: None,
            pods: Looks::default(),
            nodes: Looks::default(),
            round: 0,
        }
    }
}

/// One observation of a DaemonSet's pods and nodes into its memo: every object is
/// handed over once (`pod`, `node`, or `saw_node` for a node borrowed from the store);
/// `finish` drops what was not seen and puts what is new in order.
pub struct Refresh<'m, P, N> {
    memo: &'m mut PlanMemo<P, N>,
    kept_pods: usize,
    kept_nodes: usize,
}

impl<P: PodFacts, N: NodeFacts> Refresh<'_, P, N> {
    /// A pod of the DaemonSet, as the owner index holds it (cloned only when new).
    pub fn pod(&mut self, pod: &Arc<P>) {
        let memo = &mut *self.memo;
        match memo.pods.see(address(pod), memo.round) {
            // The same pod twice counts once.
            Some(again) => self.kept_pods += usize::from(!again),
            None => {
                let basis = memo.basis.as_ref().expect("set by begin");
                memo.pods.add(KeptPod::of(pod, basis), memo.round);
                self.kept_pods += 1;
            }
        }
    }

    /// A node borrowed from the store: if the memo holds this version, it counts as
    /// seen and the answer is true; otherwise hand it over with `node`.
    pub fn saw_node(&mut self, node: &N) -> bool {
        let memo = &mut *self.memo;
        match memo.nodes.see(node as *const N as usize, memo.round) {
            Some(again) => {
                self.kept_nodes += usize::from(!again);
                true
            }
            None => false,
        }
    }

    /// A node of the cluster (cloned only when new).
    pub fn node(&mut self, node: &Arc<N>) {
        if self.saw_node(node) {
            return;
        }
        let memo = &mut *self.memo;
        let basis = memo.basis.as_ref().expect("set by begin");
        memo.nodes
            .add(KeptNode::of(node, &basis.daemonset), memo.round);
        self.kept_nodes += 1;
    }

    /// Drops the looks of objects not handed over (gone, or older versions), and puts
    /// the new ones in order.
    pub fn finish(self) {
        let round = self.memo.round;
        self.memo.pods.finish(self.kept_pods, round);
        self.memo.nodes.finish(self.kept_nodes, round);
    }
}

impl<P: PodFacts, N: NodeFacts> PlanMemo<P, N> {
    /// Starts an observation for this DaemonSet and revision; looks made for another
    /// are dropped first.
    pub fn begin(
        &mut self,
        daemonset: &DaemonSet,
        current: Option<&CurrentRevision>,
    ) -> Refresh<'_, P, N> {
        if !self.serves(daemonset, current) {
            *self = PlanMemo {
                basis: Some(Basis::of(daemonset, current)),
                round: self.round,
                ..PlanMemo::default()
            };
        }
        self.round += 1;
        self.pods.added.clear();
        self.nodes.added.clear();
        Refresh {
            memo: self,
            kept_pods: 0,
            kept_nodes: 0,
        }
    }

    /// The observation from slices: `pods` (the DaemonSet's, or more: only those it
    /// controls in its namespace are planned) and every node, each once.
    pub fn refresh(
        &mut self,
        daemonset: &DaemonSet,
        current: Option<&CurrentRevision>,
        pods: &[Arc<P>],
        nodes: &[Arc<N>],
    ) {
        let mut refresh = self.begin(daemonset, current);
        for pod in pods {
            refresh.pod(pod);
        }
        for node in nodes {
            refresh.node(node);
        }
        refresh.finish();
    }

    /// Whether the memo's looks were made for this DaemonSet and revision.
    pub fn serves(&self, daemonset: &DaemonSet, current: Option<&CurrentRevision>) -> bool {
        self.basis
            .as_ref()
            .is_some_and(|basis| basis.matches(daemonset, current))
    }

    /// The planned pods grouped by node and the nodes without any, from the two orders
    /// in one merge: a node's pods are those with its key, pods whose node has no
    /// object form groups without one, and of nodes with the same name (the store has
    /// none) the last in order is taken.
    pub(super) fn arranged(&self, liveness: &Liveness) -> Arranged<'_, P, N> {
        let mut placed = Vec::with_capacity(self.pods.order.len());
        let mut groups = Vec::with_capacity(self.nodes.order.len());
        let mut lonely = Vec::new();
        let mut pods = self.pods.walk().peekable();
        let mut nodes = self.nodes.walk().peekable();
        while let Some(node) = nodes.next() {
            let key = node.key().expect("walked nodes have a name");
            if nodes.peek().is_some_and(|after| after.key() == Some(key)) {
                continue;
            }
            // Pods whose node sorts before this one have no Node object.
            while let Some(missing) = pods.peek().and_then(|pod| pod.key()).filter(|k| *k < key) {
                groups.push(group(&mut pods, missing, None, &mut placed, liveness));
            }
            if pods.peek().is_some_and(|pod| pod.key() == Some(key)) {
                let node = Some((&*node.node, node.look()));
                groups.push(group(&mut pods, key, node, &mut placed, liveness));
            } else {
                lonely.push((key, node.look(), &*node.node));
            }
        }
        while let Some(missing) = pods.peek().and_then(|pod| pod.key()) {
            groups.push(group(&mut pods, missing, None, &mut placed, liveness));
        }
        Arranged {
            by_node: PodsByNode { placed, groups },
            lonely,
        }
    }

    /// The pods observed in the DaemonSet's namespace, in no particular order.
    pub fn pods(&self) -> impl Iterator<Item = &Arc<P>> {
        self.pods
            .all()
            .filter(|kept| kept.in_namespace)
            .map(|kept| &kept.pod)
    }

    /// The nodes observed.
    pub fn nodes(&self) -> impl Iterator<Item = &Arc<N>> {
        self.nodes.all().map(|kept| &kept.node)
    }

    /// Of the pods observed in the DaemonSet's namespace, those with a `PodNeedUpgrade`
    /// condition (what `ota_plan::plan_leftover_condition_removals` looks for; given these
    /// alone, it finds the same).
    pub fn with_need_upgrade(&self) -> Vec<Arc<P>> {
        self.pods
            .all()
            .filter(|kept| kept.in_namespace && kept.need_upgrade)
            .map(|kept| kept.pod.clone())
            .collect()
    }
}

/// The pods next in walk order whose node is `key`, appended to `placed`, as one group.
fn group<'m, P: PodFacts + 'm, N>(
    pods: &mut std::iter::Peekable<impl Iterator<Item = &'m KeptPod<P>>>,
    key: NodeKey<'m>,
    node: Option<(&'m N, NodeLook<'m>)>,
    placed: &mut Vec<Placed<'m, P>>,
    liveness: &Liveness,
) -> Group<'m, N> {
    let start = placed.len();
    while let Some(kept) = pods.next_if(|pod| pod.key() == Some(key)) {
        placed.push(Placed {
            node: key,
            pod: &*kept.pod,
            look: liveness.look(&*kept.pod, &kept.look()),
        });
    }
    Group {
        key,
        pods: start..placed.len(),
        node,
        ready: None,
    }
}

/// Adds the `added` slots that `wanted` keeps to `order`, sorted by `cmp`: one by one
/// by binary search when they are few (a few, or a sixteenth of the order), else all
/// at once and one sort.
fn put_in_order(
    order: &mut Vec<usize>,
    added: &mut Vec<usize>,
    wanted: impl Fn(usize) -> bool,
    cmp: impl Fn(usize, usize) -> std::cmp::Ordering,
) {
    added.retain(|&slot| wanted(slot));
    if added.len() > 8 && added.len() * 16 > order.len() {
        order.append(added);
        order.sort_unstable_by(|&a, &b| cmp(a, b));
        return;
    }
    for slot in added.drain(..) {
        let at = order.partition_point(|&other| cmp(other, slot).is_lt());
        order.insert(at, slot);
    }
}

#[cfg(test)]
mod tests {
    use super::put_in_order;
    use proptest::prelude::*;

    proptest! {
        /// Slots put in order one by one or with one sort end in the order of one sort
        /// of all the wanted ones.
        #[test]
        fn put_in_order_orders_as_one_sort(
            existing in prop::collection::vec(0u8..40, 0..120),
            added in prop::collection::vec(0u8..40, 0..30),
            unwanted in any::<u64>(),
        ) {
            let keys: Vec<u8> = existing.iter().chain(&added).copied().collect();
            let mut order: Vec<usize> = (0..existing.len()).collect();
            order.sort_by_key(|&slot| keys[slot]);
            let mut new: Vec<usize> = (existing.len()..keys.len()).collect();
            let wanted = |slot: usize| slot < existing.len() || (unwanted >> (slot % 64)) & 1 == 0;
            put_in_order(&mut order, &mut new, wanted, |a, b| keys[a].cmp(&keys[b]));
            let mut expected: Vec<u8> = (0..keys.len()).filter(|&s| wanted(s)).map(|s| keys[s]).collect();
            expected.sort_unstable();
            prop_assert_eq!(order.iter().map(|&s| keys[s]).collect::<Vec<_>>(), expected);
            prop_assert!(new.is_empty());
        }
    }
}
