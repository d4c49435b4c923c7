//! What a rolling plan reads of each pod and node (`PodLook`, `NodeLook`), and the memo
//! that keeps those looks per object version while a DaemonSet rolls out (`PlanMemo`).
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
//! the plan is complete): about 100 bytes per pod and per node of that DaemonSet.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::jiff::Timestamp;

use crate::daemonset::placement::should_run_on;
use crate::daemonset::revision::CurrentRevision;
use crate::names::POD_NEED_UPGRADE_CONDITION;
use crate::object::{is_controlled_by, NodeFacts, PodFacts};

/// A node name with its first 16 bytes read as one big-endian number (zero-padded), so
/// that most comparisons of two names are one integer comparison instead of a string
/// comparison behind two pointers (node names share long prefixes, and a plan sorts
/// and searches 10,000 of them). Orders exactly as the names do: a smaller number means
/// a smaller name, and equal numbers fall back to the names.
#[derive(Debug, Clone, Copy)]
pub(super) struct NodeKey<'a> {
    pub(super) prefix: u128,
    pub(super) name: &'a str,
}

impl<'a> NodeKey<'a> {
    pub(super) fn of(name: &'a str) -> Self {
        let mut bytes = [0u8; 16];
        let len = name.len().min(16);
        bytes[..len].copy_from_slice(&name.as_bytes()[..len]);
        NodeKey {
            prefix: u128::from_be_bytes(bytes),
            name,
        }
    }
}

impl NodeKey<'_> {
    /// The rest of the comparison once the prefixes are equal. Names of at most 16
    /// bytes are then equal up to the shorter one's length, and the longer one's extra
    /// bytes are zero: the shorter sorts first, and equal lengths mean equal names. So
    /// such names are told apart by their lengths, which the key holds, without reading
    /// the names (a node name and its pods' node names live in other allocations).
    fn cmp_rest(&self, other: &Self) -> std::cmp::Ordering {
        if self.name.len() <= 16 && other.name.len() <= 16 {
            self.name.len().cmp(&other.name.len())
        } else {
            self.name.cmp(other.name)
        }
    }
}

impl Ord for NodeKey<'_> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.prefix
            .cmp(&other.prefix)
            .then_with(|| self.cmp_rest(other))
    }
}
impl PartialOrd for NodeKey<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for NodeKey<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}
impl Eq for NodeKey<'_> {}

/// A pod's `Ready` condition: whether it is True, and when it last turned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ReadyLook {
    pub(super) is_true: bool,
    pub(super) since: Option<Timestamp>,
}

impl ReadyLook {
    pub(super) fn of(pod: &impl PodFacts) -> Option<Self> {
        pod.condition("Ready").map(|c| ReadyLook {
            is_true: c.status == "True",
            since: c.last_transition_time.map(|t| t.0),
        })
    }
}

/// What a plan reads of one pod, but for whether its deletion is in flight (that
/// changes from plan to plan: `uid_hash` finds it quickly).
#[derive(Debug, Clone, Copy)]
pub(super) struct PodLook<'a> {
    /// Controlled by the planned DaemonSet.
    pub(super) controlled: bool,
    /// Where it runs or, pending, the node it is meant for.
    pub(super) node: Option<NodeKey<'a>>,
    pub(super) terminating: bool,
    /// Of the current revision (false while that is unknown).
    pub(super) updated: bool,
    pub(super) ready: Option<ReadyLook>,
    /// `uid_hash` of its UID, if it has one.
    pub(super) uid_hash: Option<u64>,
}

impl<'a> PodLook<'a> {
    pub(super) fn of<P: PodFacts>(
        pod: &'a P,
        ds_uid: &str,
        current: Option<&CurrentRevision>,
    ) -> Self {
        PodLook {
            controlled: is_controlled_by(pod, ds_uid),
            node: pod.node_or_affinity_node().map(NodeKey::of),
            terminating: pod.is_terminating(),
            updated: current.is_some_and(|c| c.is_pod_updated(pod)),
            ready: ReadyLook::of(pod),
            uid_hash: pod.metadata().uid.as_deref().map(uid_hash),
        }
    }
}

/// What a plan reads of one node.
#[derive(Debug, Clone, Copy)]
pub(super) struct NodeLook<'a> {
    /// `None` for a node without a name (the store has none).
    pub(super) key: Option<NodeKey<'a>>,
    pub(super) ready: bool,
    /// When its Ready condition last turned.
    pub(super) ready_since: Option<Timestamp>,
    /// The DaemonSet places a pod there (`placement::should_run_on`).
    pub(super) placed: bool,
}

impl<'a> NodeLook<'a> {
    pub(super) fn of<N: NodeFacts>(node: &'a N, daemonset: &DaemonSet) -> Self {
        let condition = node.ready_condition();
        NodeLook {
            key: node.metadata().name.as_deref().map(NodeKey::of),
            ready: condition.is_some_and(|(status, _)| status == "True"),
            ready_since: condition.and_then(|(_, since)| since).map(|t| t.0),
            placed: should_run_on(daemonset, node),
        }
    }
}

/// A 64-bit FNV-1a hash of a pod UID: a plan compares it with the few UIDs whose
/// deletion is in flight, and reads the pod's own UID only on a match.
pub(super) fn uid_hash(uid: &str) -> u64 {
    uid.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

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
    seen: u64,
}

impl<P: PodFacts> KeptPod<P> {
    fn of(pod: &Arc<P>, basis: &Basis, seen: u64) -> Self {
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
            seen,
        }
    }

    fn look(&self) -> PodLook<'_> {
        PodLook {
            controlled: self.controlled,
            node: self.node.as_deref().map(|name| NodeKey {
                prefix: self.node_prefix,
                name,
            }),
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
    ready_since: Option<Timestamp>,
    placed: bool,
    seen: u64,
}

impl<N: NodeFacts> KeptNode<N> {
    fn of(node: &Arc<N>, daemonset: &DaemonSet, seen: u64) -> Self {
        let look = NodeLook::of(&**node, daemonset);
        KeptNode {
            node: node.clone(),
            name: look.key.map(|key| key.name.into()),
            prefix: look.key.map_or(0, |key| key.prefix),
            ready: look.ready,
            ready_since: look.ready_since,
            placed: look.placed,
            seen,
        }
    }

    fn look(&self) -> NodeLook<'_> {
        NodeLook {
            key: self.name.as_deref().map(|name| NodeKey {
                prefix: self.prefix,
                name,
            }),
            ready: self.ready,
            ready_since: self.ready_since,
            placed: self.placed,
        }
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

/// One DaemonSet's pods and nodes with their looks, kept between its plans by object
/// version (see the module's opening comment): what its plans read, observed once per
/// plan by `begin` and the `Refresh` it returns (or `refresh`, from slices), and
/// planned by `plan_rolling_update_memo`.
pub struct PlanMemo<P, N> {
    basis: Option<Basis>,
    pods: ByAddress<KeptPod<P>>,
    nodes: ByAddress<KeptNode<N>>,
    /// Which refresh this is: looks not seen by the latest one are dropped by it.
    round: u64,
}

impl<P, N> Default for PlanMemo<P, N> {
    fn default() -> Self {
        PlanMemo {
            basis: None,
            pods: ByAddress::default(),
            nodes: ByAddress::default(),
            round: 0,
        }
    }
}

/// One observation of a DaemonSet's pods and nodes into its memo: every object is
/// handed over once (`pod`, `node`, or `node_kept` for a node version the memo holds);
/// `finish` drops what was not seen.
pub struct Refresh<'m, P, N> {
    memo: &'m mut PlanMemo<P, N>,
    kept_pods: usize,
    kept_nodes: usize,
}

impl<P: PodFacts, N: NodeFacts> Refresh<'_, P, N> {
    /// A pod of the DaemonSet, as the owner index holds it (cloned only when new).
    pub fn pod(&mut self, pod: &Arc<P>) {
        let memo = &mut *self.memo;
        let round = memo.round;
        match memo.pods.get_mut(&address(pod)) {
            Some(kept) => {
                // The same pod twice counts once.
                self.kept_pods += usize::from(kept.seen != round);
                kept.seen = round;
            }
            None => {
                let basis = memo.basis.as_ref().expect("set by begin");
                memo.pods
                    .insert(address(pod), KeptPod::of(pod, basis, round));
                self.kept_pods += 1;
            }
        }
    }

    /// Whether `node` (borrowed from the store) is a version the memo holds; if so it
    /// counts as seen once `node_kept` is called with it.
    pub fn holds_node(&self, node: &N) -> bool {
        self.memo.nodes.contains_key(&(node as *const N as usize))
    }

    /// A node `holds_node` said the memo holds, by its address (the store's borrow
    /// may have ended: the memo's own `Arc` keeps the address its).
    pub fn node_kept(&mut self, node: *const N) {
        let round = self.memo.round;
        if let Some(kept) = self.memo.nodes.get_mut(&(node as usize)) {
            self.kept_nodes += usize::from(kept.seen != round);
            kept.seen = round;
        }
    }

    /// A node of the cluster (cloned only when new).
    pub fn node(&mut self, node: &Arc<N>) {
        if self.holds_node(node) {
            self.node_kept(Arc::as_ptr(node));
            return;
        }
        let memo = &mut *self.memo;
        let basis = memo.basis.as_ref().expect("set by begin");
        let kept = KeptNode::of(node, &basis.daemonset, memo.round);
        memo.nodes.insert(address(node), kept);
        self.kept_nodes += 1;
    }

    /// Drops the looks of objects not handed over (gone, or older versions). The counts
    /// include new looks: fewer than the memo holds means some were not seen.
    pub fn finish(self) {
        let memo = self.memo;
        let round = memo.round;
        if self.kept_pods < memo.pods.len() {
            memo.pods.retain(|_, kept| kept.seen == round);
        }
        if self.kept_nodes < memo.nodes.len() {
            memo.nodes.retain(|_, kept| kept.seen == round);
        }
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
            self.pods.clear();
            self.nodes.clear();
            self.basis = Some(Basis::of(daemonset, current));
        }
        self.round += 1;
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

    /// The pods observed in the DaemonSet's namespace, with their looks.
    pub(super) fn pod_looks(&self) -> impl Iterator<Item = (&P, PodLook<'_>)> {
        self.pods
            .values()
            .filter(|kept| kept.in_namespace)
            .map(|kept| (&*kept.pod, kept.look()))
    }

    pub(super) fn node_looks(&self) -> impl Iterator<Item = (&N, NodeLook<'_>)> {
        self.nodes.values().map(|kept| (&*kept.node, kept.look()))
    }

    /// The pods observed in the DaemonSet's namespace, in no particular order.
    pub fn pods(&self) -> impl Iterator<Item = &Arc<P>> {
        self.pods
            .values()
            .filter(|kept| kept.in_namespace)
            .map(|kept| &kept.pod)
    }

    /// The nodes observed.
    pub fn nodes(&self) -> impl Iterator<Item = &Arc<N>> {
        self.nodes.values().map(|kept| &kept.node)
    }

    /// Of the pods observed in the DaemonSet's namespace, those with a `PodNeedUpgrade`
    /// condition (what `ota_plan::plan_stale_condition_removals` looks for; given these
    /// alone, it finds the same).
    pub fn with_need_upgrade(&self) -> Vec<Arc<P>> {
        self.pods
            .values()
            .filter(|kept| kept.in_namespace && kept.need_upgrade)
            .map(|kept| kept.pod.clone())
            .collect()
    }
}
