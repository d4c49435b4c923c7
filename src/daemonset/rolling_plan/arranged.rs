//! What a rolling plan reads of each pod and node (`PodLook`, `NodeLook`), and how it
//! walks them (`Arranged`: the pods grouped by node, `PodsByNode`, and the nodes without
//! any, in name order). Made from fresh looks here, or read off the memo that keeps
//! them between plans (`memo`).
use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::daemonset::placement::should_run_on;
use crate::daemonset::revision::CurrentRevision;
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
    #[inline]
    fn cmp_rest(&self, other: &Self) -> std::cmp::Ordering {
        if self.name.len() <= 16 && other.name.len() <= 16 {
            self.name.len().cmp(&other.name.len())
        } else {
            self.name.cmp(other.name)
        }
    }
}

// Inlined: a plan compares keys once per pod, from generic code instantiated in
// other crates (the controller's binary, the benches), which cannot inline them else.
impl Ord for NodeKey<'_> {
    #[inline]
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.prefix
            .cmp(&other.prefix)
            .then_with(|| self.cmp_rest(other))
    }
}
impl PartialOrd for NodeKey<'_> {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for NodeKey<'_> {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        self.prefix == other.prefix && self.cmp_rest(other).is_eq()
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
    /// The DaemonSet places a pod there (`placement::should_run_on`).
    pub(super) placed: bool,
}

impl<'a> NodeLook<'a> {
    pub(super) fn of<N: NodeFacts>(node: &'a N, daemonset: &DaemonSet) -> Self {
        let condition = node.ready_condition();
        NodeLook {
            key: node.metadata().name.as_deref().map(NodeKey::of),
            ready: condition.is_some_and(|(status, _)| status == "True"),
            placed: should_run_on(daemonset, node),
        }
    }
}

/// What a plan reads of a pod besides its node, read once per plan.
#[derive(Debug, Clone, Copy)]
pub(super) struct Look {
    /// Not terminating, and no deletion of it in flight.
    pub(super) live: bool,
    /// Of the current revision (false while it is unknown).
    pub(super) updated: bool,
    pub(super) ready: Option<ReadyLook>,
}

/// One pod of the DaemonSet with its node.
pub(super) struct Placed<'a, P> {
    pub(super) node: NodeKey<'a>,
    pub(super) pod: &'a P,
    pub(super) look: Look,
}

/// The pods of one node, with the Node object and its look (`None`: missing) and its
/// Ready status.
pub(super) struct Group<'a, N> {
    pub(super) key: NodeKey<'a>,
    pub(super) pods: std::ops::Range<usize>,
    pub(super) node: Option<(&'a N, NodeLook<'a>)>,
    pub(super) ready: Option<bool>,
}

/// Pods the DaemonSet controls, grouped by node in ascending name order, each node's
/// by pod name, so plans do not depend on the input order (pods with no known node are
/// left out: there is nothing to count them against). One sorted list and its runs,
/// not a map of lists: a plan runs on every relevant pod write, over every pod.
pub(super) struct PodsByNode<'a, P, N> {
    pub(super) placed: Vec<Placed<'a, P>>,
    pub(super) groups: Vec<Group<'a, N>>,
}

impl<'a, P: PodFacts, N> PodsByNode<'a, P, N> {
    /// From every pod with its look; `look` adds what depends on the plan.
    pub(super) fn of(
        pods: impl Iterator<Item = (&'a P, PodLook<'a>)>,
        look: impl Fn(&P, &PodLook<'a>) -> Look,
    ) -> Self {
        let mut placed: Vec<Placed<'a, P>> = pods
            .filter(|(_, pod_look)| pod_look.controlled)
            .filter_map(|(pod, pod_look)| {
                Some(Placed {
                    node: pod_look.node?,
                    pod,
                    look: look(pod, &pod_look),
                })
            })
            .collect();
        placed.sort_unstable_by(|a, b| {
            a.node
                .cmp(&b.node)
                .then_with(|| a.pod.pod_name().cmp(b.pod.pod_name()))
        });
        let mut groups = Vec::new();
        let mut start = 0;
        for end in 1..=placed.len() {
            if end == placed.len() || placed[end].node != placed[start].node {
                groups.push(Group {
                    key: placed[start].node,
                    pods: start..end,
                    node: None,
                    ready: None,
                });
                start = end;
            }
        }
        PodsByNode { placed, groups }
    }

    /// The index of the node's group, if it has pods.
    pub(super) fn find(&self, key: &NodeKey) -> Option<usize> {
        self.groups.binary_search_by(|g| g.key.cmp(key)).ok()
    }

    pub(super) fn pods(&self, group: &Group<N>) -> &[Placed<'a, P>] {
        &self.placed[group.pods.clone()]
    }

    /// A live out-of-date pod is on the node.
    pub(super) fn has_old_pod(&self, group: &Group<N>) -> bool {
        self.pods(group)
            .iter()
            .any(|p| p.look.live && !p.look.updated)
    }

    /// The nodes of the base still on an old revision, in name order: a live
    /// out-of-date pod on a Ready or NotReady node, not left out for placement
    /// (`unplaced`, in name order; see `controls`).
    pub(super) fn old_nodes(&self, unplaced: &[String]) -> Vec<(&'a str, &'a N)> {
        self.groups
            .iter()
            .filter(|group| {
                self.has_old_pod(group)
                    && unplaced
                        .binary_search_by(|n| n.as_str().cmp(group.key.name))
                        .is_err()
            })
            .filter_map(|group| Some((group.key.name, group.node?.0)))
            .collect()
    }
}

/// Which pods are live in this plan: not terminating, and no deletion of them in
/// flight. Deletions in flight are kept by UID hash, so a pod's own UID is read only on
/// a match.
pub(super) struct Liveness<'i> {
    pub(super) hashes: Vec<u64>,
    pub(super) uids: &'i BTreeSet<String>,
}

impl<'i> Liveness<'i> {
    pub(super) fn of(expected_deletions: &'i BTreeSet<String>) -> Self {
        let mut hashes: Vec<u64> = expected_deletions.iter().map(|uid| uid_hash(uid)).collect();
        hashes.sort_unstable();
        Liveness {
            hashes,
            uids: expected_deletions,
        }
    }

    /// What the plan reads of a pod besides its node.
    pub(super) fn look<P: PodFacts>(&self, pod: &P, look: &PodLook) -> Look {
        let in_flight = || {
            look.uid_hash
                .is_some_and(|hash| self.hashes.binary_search(&hash).is_ok())
                && pod
                    .metadata()
                    .uid
                    .as_ref()
                    .is_some_and(|uid| self.uids.contains(uid))
        };
        Look {
            live: !look.terminating && !in_flight(),
            updated: look.updated,
            ready: look.ready,
        }
    }
}

/// The pods the DaemonSet controls, grouped by node, and the nodes without any, each in
/// name order: what a plan walks. Made by sorting fresh looks (`Arranged::of`) or read
/// off a memo that keeps its looks in this order (`PlanMemo::arranged`).
pub(super) struct Arranged<'a, P, N> {
    pub(super) by_node: PodsByNode<'a, P, N>,
    /// Nodes without a pod of this DaemonSet, in name order, one per name.
    pub(super) lonely: Vec<(NodeKey<'a>, NodeLook<'a>, &'a N)>,
}

impl<'a, P: PodFacts, N> Arranged<'a, P, N> {
    /// From every pod and node with its look, in any order: one sort of the pods and a
    /// binary search per node.
    pub(super) fn of(
        pods: impl Iterator<Item = (&'a P, PodLook<'a>)>,
        nodes: impl Iterator<Item = (&'a N, NodeLook<'a>)>,
        liveness: &Liveness,
    ) -> Self {
        let mut by_node = PodsByNode::of(pods, |pod, look| liveness.look(pod, look));
        // As in a map by name, the last of a repeated name wins (the store has none).
        let mut lonely: Vec<(NodeKey<'_>, NodeLook<'_>, &N)> = Vec::new();
        for (node, look) in nodes {
            let Some(key) = look.key else {
                continue;
            };
            match by_node.find(&key) {
                Some(group) => by_node.groups[group].node = Some((node, look)),
                None => lonely.push((key, look, node)),
            }
        }
        lonely.sort_by(|a, b| a.0.cmp(&b.0));
        lonely.reverse();
        lonely.dedup_by(|a, b| a.0 == b.0);
        lonely.reverse();
        Arranged { by_node, lonely }
    }
}

/// A Ready node's live pods, as far as the classification tells them apart.
pub(super) enum LivePods<'p, 'a, P> {
    OnlyNew(&'p Placed<'a, P>),
    OnlyOld(&'p Placed<'a, P>),
    /// None, old and new together, or duplicates.
    Other,
}

impl<'p, 'a, P> LivePods<'p, 'a, P> {
    pub(super) fn of(pods: &'p [Placed<'a, P>]) -> Self {
        let (mut new, mut old) = ((0, None), (0, None));
        for placed in pods.iter().filter(|p| p.look.live) {
            let side = if placed.look.updated {
                &mut new
            } else {
                &mut old
            };
            side.0 += 1;
            side.1 = Some(placed);
        }
        match (new, old) {
            ((1, Some(pod)), (0, _)) => LivePods::OnlyNew(pod),
            ((0, _), (1, Some(pod))) => LivePods::OnlyOld(pod),
            _ => LivePods::Other,
        }
    }
}

/// Whether a pod is available: Ready for `minReadySeconds` at a time.
pub(super) enum Availability {
    Available,
    /// Ready, but `minReadySeconds` not reached yet: available after this long.
    AvailableIn(Duration),
    NotAvailable,
}

/// From the pod's Ready condition (`ReadyLook::of`).
pub(super) fn availability(
    ready: Option<ReadyLook>,
    min_ready_seconds: i32,
    now: Timestamp,
) -> Availability {
    let Some(ready) = ready.filter(|r| r.is_true) else {
        return Availability::NotAvailable;
    };
    if min_ready_seconds <= 0 {
        return Availability::Available;
    }
    let Some(since) = ready.since else {
        return Availability::NotAvailable;
    };
    let remaining = SignedDuration::from_secs(min_ready_seconds.into()) - now.duration_since(since);
    match Duration::try_from(remaining) {
        Ok(wait) if !wait.is_zero() => Availability::AvailableIn(wait),
        // Zero or negative: the minimum has been reached.
        _ => Availability::Available,
    }
}

/// A 64-bit FNV-1a hash of a pod UID: a plan compares it with the few UIDs whose
/// deletion is in flight, and reads the pod's own UID only on a match.
pub(super) fn uid_hash(uid: &str) -> u64 {
    uid.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}
