//! The AdvancedRollingUpdate planner: a pure function from observed state to the pods
//! to delete next. The native DaemonSet controller (OnDelete) recreates what we delete.
//!
//! Rules (see the spec, `upgrade-models.md`):
//! - Percentage base: nodes that have a pod of this DaemonSet (terminating pods
//!   included), NotReady nodes included, plus Ready nodes that are vacated (below),
//!   minus Ready nodes left out for placement (below).
//!   Pods bound to a Node object that does not exist are not counted: there is no node
//!   to keep available, and a smaller base only makes the budget more conservative.
//! - Only Ready nodes are classified; NotReady and missing nodes are listed as skipped,
//!   never counted as unavailable and never touched.
//! - Terminating pods, and pods whose deletion we already issued (`expected_deletions`),
//!   are not live: they are ignored when classifying and never deleted again.
//! - Per Ready node: no live pod, an old and a new pod, or duplicates -> unavailable;
//!   only a new pod -> unavailable unless available; only an old available pod ->
//!   candidate; only an old pod that is not available -> replaced first (below).
//! - A Ready node that shows no pod at all is *vacated* (unavailable, in the base) when
//!   rollgate itself deleted its pod and no available replacement has been seen yet
//!   (`vacated_by_us`), or when the DaemonSet should run there (node selector, required
//!   affinity, tolerations: `placement`). The second rule covers restarts, when the
//!   first is empty. Neither reads `status.desiredNumberScheduled`: with tolerations
//!   that match every taint, NotReady nodes stay in it, and counting them as vacated
//!   stalls the rollout.
//! - The budget rule: rollgate never leaves more than `budget` Ready nodes without a
//!   serving pod. A node is *ours* from our deletion of its pod (available or not)
//!   until any pod serves there again, or until it goes NotReady (then the network
//!   answers for it); while ours and Ready it counts as unavailable whatever it shows.
//!   So, with `allowed = budget - unavailable`:
//!   - an old pod that is not available on a node that is ours (a replacement of an
//!     earlier template still starting when the next one came, a -> b -> c) is replaced
//!     at once: its node is counted already, and replacing it adds none;
//!   - an old pod that is not available on a node not ours yet is replaced first, as it
//!     serves nothing, but spends one of `allowed`: from this plan on its node counts;
//!   - then candidates, with what is left of `allowed`.
//! - When unavailable nodes alone use or exceed the budget, only the first kind is
//!   replaced: nothing that adds an unavailable node.
//! - Deletions are listed old pods not available first, then candidates, each in
//!   ascending node name order, so that repeated plans agree and operators can predict
//!   the next victims.
//! - A node back from a cut: the node-lifecycle controller marked its pods Ready=False,
//!   and the kubelet takes seconds to report them again, so an old pod there may serve
//!   while it reads not Ready. It needs no wait for that report: replacing an old pod
//!   that reads not Ready spends budget (its node counts from this plan on) unless its
//!   node is ours already, so whether it served or not, the budget holds on what the
//!   node really shows. With budget free, a returning node's old pod goes in the first
//!   plan after its return; many returning at once go within the budget.
//! - A revision proves itself first (`RollingInput::proving`, the failure threshold):
//!   until that many pods of the current revision are available on Ready nodes, the
//!   budget is at most that many, so a revision that fails everywhere fails on no more
//!   nodes than may fail before the halt. The plan says so (`Progress::proving`).
//! - On top of the budget, at most `max_deletions_per_plan` deletions, the first ones
//!   in the order above; the rest is left to the next plan.
//! - Placement: a Ready node whose only live pod is out of date, but where the DaemonSet
//!   no longer places a pod (a new NoSchedule taint it does not tolerate, a narrowed
//!   node selector or affinity: `placement`), is left alone. The native controller
//!   keeps such a pod running but would not recreate it, so replacing it would only
//!   remove it. The node is out of the rollout (neither in the base nor counted) and is
//!   named in `Progress::unplaced_nodes`.
//! - Partition and node selector (`controls`, `rollgate.io/partition` and
//!   `rollgate.io/node-selector`): old pods on the nodes they hold back are neither
//!   replaced nor candidates; everything else, the base and the budget included, counts
//!   as without them. A partition keeps the old nodes whose names sort first (see
//!   `controls` for the exact rule and the percentage rounding). When only held-back
//!   nodes are left old, the plan says `HeldBack`, not complete and not a wait.
//! - Available = Ready condition True for at least `spec.minReadySeconds`, measured from
//!   the condition's `lastTransitionTime` (missing time with a non-zero minimum: not
//!   available, as in Kubernetes).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
#[cfg(test)]
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;

use super::controls::{HeldBack, NodeSelector, Partition};
use super::int_or_percent::IntOrPercent;
use super::policy::MaxUnavailable;
use super::revision::CurrentRevision;
use super::waves::{WaveProgress, WaveState, Waves};
use crate::object::{CachedNode, CachedPod, NodeFacts, PodFacts};

mod arranged;
mod memo;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod state_machine;
mod wave_gate;

use arranged::{
    availability, Arranged, Availability, LivePods, Liveness, NodeKey, NodeLook, PodLook, ReadyLook,
};
pub use memo::{PlanMemo, Refresh};

/// Everything the planner looks at, borrowed from the caches. Pods and nodes are the
/// cached forms in the controller; tests also plan on full API objects.
#[derive(Debug)]
pub struct RollingInput<'a, P = CachedPod, N = CachedNode> {
    pub daemonset: &'a DaemonSet,
    /// The DaemonSet's current revision (`CurrentRevision::of`); `None` blocks the plan.
    pub current: Option<&'a CurrentRevision>,
    /// Pods in the DaemonSet's namespace (pods it does not control are filtered out).
    pub pods: &'a [Arc<P>],
    /// All Nodes of the cluster.
    pub nodes: &'a [Arc<N>],
    pub max_unavailable: MaxUnavailable,
    pub now: Timestamp,
    /// UIDs of pods whose deletion was issued but not yet observed: treated as gone
    /// (their node is unavailable) and never deleted again.
    pub expected_deletions: &'a BTreeSet<String>,
    /// Nodes whose pod rollgate deleted, with that pod's UID, until an available
    /// replacement is seen there (see `VacatedNodes`).
    pub vacated_by_us: &'a BTreeMap<String, String>,
    pub limits: RollingLimits,
    /// `rollgate.io/partition`: this many nodes stay on the old revision.
    pub partition: Option<Partition>,
    /// `rollgate.io/node-selector`: only the nodes that match are upgraded.
    pub node_selector: Option<&'a NodeSelector>,
    /// `rollgate.io/waves`: the nodes of the waves after the current one wait.
    pub waves: Option<&'a Waves>,
    /// The failure threshold while a failure stops the rollout (`rollgate.io/on-failure`
    /// not `continue`): until this many pods of the current revision are available on
    /// Ready nodes, the budget is at most this many (a percentage is of the base,
    /// rounded up). `None`: the budget alone.
    pub proving: Option<IntOrPercent>,
    /// Whether to list `RollingPlan::upcoming`. Only pull-ahead reads it, and it costs
    /// one `PlannedDeletion` (four strings) per old pod the plan leaves for later, which
    /// was a third of a plan's CPU at 10,000 nodes (issue 25). Off, `upcoming` is empty
    /// and nothing else in the plan changes.
    pub list_upcoming: bool,
}

/// Limits on a plan besides the budget, set by the controller's flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RollingLimits {
    /// Most deletions one plan issues, whatever the budget allows.
    pub max_deletions_per_plan: usize,
}

impl RollingLimits {
    /// OpenYurt's burst, so users who migrate see no slower rollout than they had.
    pub const DEFAULT_MAX_DELETIONS_PER_PLAN: usize = 250;
}

impl Default for RollingLimits {
    fn default() -> Self {
        RollingLimits {
            max_deletions_per_plan: Self::DEFAULT_MAX_DELETIONS_PER_PLAN,
        }
    }
}

// By hand: derived impls would ask `P` and `N` to be `Copy`, though only references are.
impl<P, N> Clone for RollingInput<'_, P, N> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<P, N> Copy for RollingInput<'_, P, N> {}

/// The deletions to issue now, and where the rollout stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollingPlan {
    /// Pods to delete, each with a UID precondition. Old pods that are not available
    /// (`OldPodNotAvailable`) come first, then candidates, each in ascending node name
    /// order.
    pub deletions: Vec<PlannedDeletion>,
    /// Entries of `vacated_by_us` that are settled: an available pod (of any revision)
    /// runs there now, the Node is gone or NotReady, or the DaemonSet no longer places
    /// a pod there.
    pub settled: Vec<String>,
    pub progress: Progress,
    /// Out-of-date pods on Ready nodes that this plan leaves for later (the budget or
    /// the cap), in the order later plans take them: what pull-ahead pulls for next.
    /// Empty unless `RollingInput::list_upcoming`.
    pub upcoming: Vec<PlannedDeletion>,
}

impl RollingPlan {
    /// True when every pod of the DaemonSet is up to date, and available on Ready nodes.
    pub fn is_complete(&self) -> bool {
        self.progress.blocked == Some(Blocker::Complete)
    }

    /// The same plan with its deletions held (a paused rollout). Nothing else changes:
    /// the budget counts as before, and a complete rollout stays complete.
    pub fn paused(mut self) -> Self {
        if self.is_complete() {
            return self;
        }
        let held = std::mem::take(&mut self.deletions).len();
        self.progress.blocked = Some(Blocker::Paused { held });
        self
    }
}

/// One pod to delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedDeletion {
    pub namespace: String,
    pub name: String,
    /// Use as the delete precondition, so a recreated pod of the same name survives.
    pub uid: String,
    pub node: String,
    pub reason: DeletionReason,
}

/// Why a pod is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DeletionReason {
    /// An out-of-date pod that is not available serves nothing: replaced before any
    /// available one, its node counted unavailable from then on.
    OldPodNotAvailable,
    /// An out-of-date available pod, replaced within the max-unavailable budget.
    RollingUpdate,
}

impl DeletionReason {
    /// Wording for Events and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            DeletionReason::OldPodNotAvailable => "old pod not available",
            DeletionReason::RollingUpdate => "rolling update within max-unavailable",
        }
    }
}

impl std::fmt::Display for DeletionReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where the rollout stands, for Events, metrics and the CLI. The counts add up:
/// `updated <= total_nodes`, `ready_updated <= ready_nodes`, and a complete rollout has
/// `updated == total_nodes`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    /// The percentage base: nodes that have a pod of this DaemonSet, NotReady included,
    /// missing Node objects excluded, plus vacated Ready nodes.
    pub total_nodes: usize,
    /// Nodes of the base that are done: on a Ready node, one live up-to-date pod that
    /// is available; on a NotReady node, no live out-of-date pod.
    pub updated: usize,
    /// Ready nodes of the base.
    pub ready_nodes: usize,
    /// Ready nodes of the base that are done.
    pub ready_updated: usize,
    /// Ready nodes counted against the budget before this plan's deletions: no live pod,
    /// old and new pods, duplicate pods, an up-to-date pod not yet available, or a node
    /// rollgate replaced a pod on whose pod is not available (of whatever revision).
    pub unavailable: usize,
    /// Ready nodes whose only live pod is out of date and available.
    pub candidates: usize,
    /// Ready nodes with no pod in view that should have one: being replaced. Counted in
    /// `total_nodes` and `unavailable`.
    pub vacated_nodes: Vec<String>,
    /// `max-unavailable` resolved against `total_nodes`.
    pub budget: usize,
    /// Deletions the budget allowed that `max_deletions_per_plan` left to the next plan.
    pub deferred_by_cap: usize,
    /// Ready nodes whose only live pod is out of date where the DaemonSet no longer
    /// places a pod (taint, selector, affinity): kept, not replaced (nothing would
    /// recreate it), and left out of the rollout's counts.
    pub unplaced_nodes: Vec<String>,
    /// NotReady nodes holding a pod of this DaemonSet, by name: not touched.
    pub not_ready_nodes_skipped: Vec<String>,
    /// Node names that pods point to but no Node object exists for: not touched.
    pub missing_nodes_skipped: Vec<String>,
    /// `rollgate.io/partition` resolved against `total_nodes`, when set.
    pub partition: Option<usize>,
    /// Nodes still on an old revision that the partition keeps there, by name.
    pub kept_by_partition: Vec<String>,
    /// Nodes still on an old revision that `rollgate.io/node-selector` does not match,
    /// by name: held back, not stalled.
    pub held_by_selector: Vec<String>,
    /// The waves (`rollgate.io/waves`), when set: each one's state, the current one,
    /// and the old nodes of the later ones, held back.
    pub waves: Option<WaveProgress>,
    /// Set while the current revision proves itself (`RollingInput::proving`): the
    /// budget is capped until this many of its pods are available.
    pub proving: Option<Proving>,
    /// Why no more than `deletions` can happen now; `None` while progressing freely.
    pub blocked: Option<Blocker>,
    /// When the earliest up-to-date pod reaches `minReadySeconds` and frees budget, or a
    /// wave's bake ends: no watch event fires at that moment, so the controller should
    /// requeue after it.
    pub recheck_after: Option<Duration>,
}

/// A revision proving itself: `available` of its pods are available on Ready nodes, and
/// until `needed` are, no more than `needed` nodes are being replaced at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proving {
    pub available: usize,
    pub needed: usize,
}

impl Proving {
    /// The cap in effect, if any: `proving` resolved against the base (percentages round
    /// up, at least 1), when it is below the budget and not yet reached.
    fn of(
        proving: Option<IntOrPercent>,
        total_nodes: usize,
        budget: usize,
        available: usize,
    ) -> Option<Proving> {
        let needed = match proving? {
            IntOrPercent::Count(count) => count as usize,
            IntOrPercent::Percent(percent) => (total_nodes * percent as usize).div_ceil(100),
        }
        .max(1);
        (needed < budget && available < needed).then_some(Proving { available, needed })
    }
}

/// Why a plan stops where it does. Every wait names the nodes it waits on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocker {
    /// Neither a ControllerRevision hash nor a template generation is known yet.
    CurrentRevisionUnknown,
    /// Out-of-date pods remain whose replacement would make one more node unavailable,
    /// but these unavailable Ready nodes use the whole budget.
    BudgetExhausted { unavailable: Vec<String> },
    /// No out-of-date available pod is left on Ready nodes; these Ready nodes are still
    /// unavailable (pod being recreated, starting, or within `minReadySeconds`).
    WaitingForAvailability { nodes: Vec<String> },
    /// Ready nodes are done; out-of-date pods remain on these NotReady or missing nodes
    /// and are upgraded when the nodes are Ready again.
    WaitingForSkippedNodes { nodes: Vec<String> },
    /// Every pod is up to date; on Ready nodes, available.
    Complete,
    /// `rollgate.io/paused` is true: this many deletions the plan would make are held.
    Paused { held: usize },
    /// The current revision failed on `failed` of the `reached` Ready nodes it runs on,
    /// at least the failure threshold (`failure`): no more deletions for it.
    Halted {
        revision: String,
        failed: usize,
        reached: usize,
        /// The failed pods' reasons, grouped (`FailureReport::reasons`).
        reasons: String,
    },
    /// The current revision is one rollgate rolled back from (`rollgate.io/rolled-back-from`):
    /// no deletion for it until the operator takes it out of the record.
    RolledBackBefore { revision: String },
    /// Every node the current wave lets through is done; the later waves' old nodes wait
    /// for it (`rollgate.io/waves`): it bakes, or has no Ready node to prove it on.
    Wave {
        /// 1-based.
        wave: usize,
        of: usize,
        selector: String,
        state: WaveState,
    },
    /// Every node the partition and the node selector let through is done; old pods
    /// remain only on the nodes they hold back (`Progress::kept_by_partition`,
    /// `Progress::held_by_selector`). Not complete, and not waiting on anything.
    HeldBack,
}

/// Plans the next AdvancedRollingUpdate step. Pure: same input, same plan.
///
/// Cost: a plan runs on every relevant pod write and node Ready transition, over every
/// pod and node of the DaemonSet (10,000 of each on a large edge fleet, issue 25). So
/// each pod is read once (its node, whether live, whether up to date), pods and nodes
/// meet through one sort and a binary search per node, compared by number where node
/// names allow (`NodeKey`), and the per-pod strings of `upcoming` are made only when
/// asked for (`RollingInput::list_upcoming`). What it reads of each pod and node is
/// read once (`PodLook`, `NodeLook`); `plan_rolling_update_memo` reads it from looks
/// kept between plans instead.
pub fn plan_rolling_update<P: PodFacts, N: NodeFacts>(input: &RollingInput<P, N>) -> RollingPlan {
    let ds_uid = input.daemonset.metadata.uid.as_deref().unwrap_or_default();
    let pods = input
        .pods
        .iter()
        .map(|pod| (&**pod, PodLook::of(&**pod, ds_uid, input.current)));
    let nodes = input
        .nodes
        .iter()
        .map(|node| (&**node, NodeLook::of(&**node, input.daemonset)));
    let liveness = Liveness::of(input.expected_deletions);
    plan(input, Arranged::of(pods, nodes, &liveness))
}

/// The same plan as `plan_rolling_update`, over the pods and nodes `memo` observed
/// (`PlanMemo::begin` or `PlanMemo::refresh`, for this DaemonSet and revision, just
/// before), read through the looks it keeps between plans, already in the plan's node
/// order: a plan that finds nearly every object unchanged reads none of them and sorts
/// nothing (issue 25: a node flap re-plans the rolling DaemonSet twice, over every pod
/// and node it has). `input.pods` and `input.nodes` are not read. A memo observed for
/// another DaemonSet or revision is planned from its objects, read afresh.
pub fn plan_rolling_update_memo<P: PodFacts, N: NodeFacts>(
    input: &RollingInput<P, N>,
    memo: &PlanMemo<P, N>,
) -> RollingPlan {
    if !memo.serves(input.daemonset, input.current) {
        let pods: Vec<Arc<P>> = memo.pods().cloned().collect();
        let nodes: Vec<Arc<N>> = memo.nodes().cloned().collect();
        return plan_rolling_update(&RollingInput {
            pods: &pods,
            nodes: &nodes,
            ..*input
        });
    }
    let liveness = Liveness::of(input.expected_deletions);
    plan(input, memo.arranged(&liveness))
}

/// The plan from the DaemonSet's pods grouped by node and the nodes without any.
fn plan<P: PodFacts, N: NodeFacts>(
    input: &RollingInput<'_, P, N>,
    arranged: Arranged<'_, P, N>,
) -> RollingPlan {
    let Arranged {
        mut by_node,
        lonely,
    } = arranged;
    // The nodes rollgate vacated (`ours`, below), found from the records, a few
    // hundred at most, rather than by a lookup per node of the fleet.
    let mut ours_group = vec![false; by_node.groups.len()];
    let mut ours_lonely = vec![false; lonely.len()];
    for name in input.vacated_by_us.keys() {
        let key = NodeKey::of(name);
        if let Some(group) = by_node.find(&key) {
            ours_group[group] = true;
        } else if let Ok(at) = lonely.binary_search_by(|(k, _, _)| k.cmp(&key)) {
            ours_lonely[at] = true;
        }
    }

    let mut progress = Progress::default();
    for group in &mut by_node.groups {
        group.ready = group.node.map(|(_, look)| look.ready);
        let node = group.key.name;
        match group.ready {
            None => progress.missing_nodes_skipped.push(node.to_string()),
            Some(false) => {
                progress.total_nodes += 1;
                progress.not_ready_nodes_skipped.push(node.to_string());
            }
            Some(true) => {
                progress.total_nodes += 1;
                progress.ready_nodes += 1;
            }
        }
    }
    // A node we replaced a pod on that went NotReady since is the network's now: what
    // it shows when back is counted as it reads (see `replaced_not_available`).
    let mut settled: Vec<String> = progress
        .not_ready_nodes_skipped
        .iter()
        .filter(|node| input.vacated_by_us.contains_key(node.as_str()))
        .cloned()
        .collect();
    // Ready nodes with no pod in view: vacated if we emptied them, or if the DaemonSet
    // should run there (its pod is gone and the replacement not created or not seen).
    let mut vacated_lonely = vec![false; lonely.len()];
    for ((&(key, look, _), &ours), vacated) in
        lonely.iter().zip(&ours_lonely).zip(&mut vacated_lonely)
    {
        let name = key.name;
        if !look.ready {
            if ours {
                settled.push(name.to_string());
            }
            continue;
        }
        let placed = look.placed;
        if placed || ours {
            progress.vacated_nodes.push(name.to_string());
            *vacated = true;
        }
        if ours && !placed {
            // Relabelled or tainted away while empty: it left the DaemonSet.
            settled.push(name.to_string());
        }
    }
    progress.total_nodes += progress.vacated_nodes.len();
    progress.ready_nodes += progress.vacated_nodes.len();
    progress.budget = input.max_unavailable.budget(progress.total_nodes);
    let node_known = |name: &str| {
        let key = NodeKey::of(name);
        by_node
            .find(&key)
            .is_some_and(|group| by_node.groups[group].node.is_some())
            || lonely.binary_search_by(|(k, _, _)| k.cmp(&key)).is_ok()
    };
    settled.extend(
        input
            .vacated_by_us
            .keys()
            .filter(|node| !node_known(node))
            .cloned(),
    );

    // Without a current revision no pod can be judged (every `Look::updated` is false).
    if input.current.is_none() {
        progress.blocked = Some(Blocker::CurrentRevisionUnknown);
        settled.sort();
        return RollingPlan {
            deletions: Vec::new(),
            settled,
            progress,
            upcoming: Vec::new(),
        };
    }

    let min_ready = input.daemonset.spec.min_ready_seconds.unwrap_or(0);
    let mut recheck_after = |wait: Duration| {
        let earliest = progress.recheck_after.map_or(wait, |w| w.min(wait));
        progress.recheck_after = Some(earliest);
    };
    // Out-of-date pods that are not available, on nodes already counted unavailable
    // because rollgate replaced a pod there (replacing again adds no node), and on
    // nodes not counted yet (replacing spends budget).
    let mut replaced_not_available: Vec<(&str, &P)> = Vec::new();
    let mut old_not_available: Vec<(&str, &P)> = Vec::new();
    let mut candidates: Vec<(&str, &P)> = Vec::new();
    let mut unavailable_nodes = Vec::new();
    let mut unplaced_nodes = Vec::new();
    for (group, &ours) in by_node.groups.iter().zip(&ours_group) {
        let (Some(true), Some((_, node_look))) = (group.ready, group.node) else {
            continue;
        };
        let node = group.key.name;
        // `ours`: until a pod serves there again, counted unavailable whatever it shows.
        let live = LivePods::of(by_node.pods(group));
        if matches!(live, LivePods::OnlyOld(_)) && !node_look.placed {
            // Deleting it would remove the DaemonSet from the node: leave it, and say so.
            unplaced_nodes.push(node.to_string());
            if ours {
                settled.push(node.to_string());
            }
            continue;
        }
        match live {
            LivePods::OnlyNew(new_pod) => {
                match availability(new_pod.look.ready, min_ready, input.now) {
                    Availability::Available => {
                        progress.updated += 1;
                        progress.ready_updated += 1;
                        if ours {
                            settled.push(node.to_string());
                        }
                    }
                    Availability::AvailableIn(wait) => {
                        recheck_after(wait);
                        unavailable_nodes.push(node.to_string());
                    }
                    Availability::NotAvailable => unavailable_nodes.push(node.to_string()),
                }
            }
            LivePods::OnlyOld(old) => match availability(old.look.ready, min_ready, input.now) {
                Availability::Available => {
                    // A replacement of an older template serves: the node is no longer
                    // ours, and its pod is a candidate like any other.
                    if ours {
                        settled.push(node.to_string());
                    }
                    candidates.push((node, old.pod));
                }
                // Not available, whether it serves locally after a cut (its status not
                // reported again yet) or not: replacing it spends budget either way.
                _ if ours => {
                    unavailable_nodes.push(node.to_string());
                    replaced_not_available.push((node, old.pod));
                }
                _ => old_not_available.push((node, old.pod)),
            },
            // No live pod, old and new together, or duplicates: the native controller is
            // still creating or cleaning up here.
            LivePods::Other => unavailable_nodes.push(node.to_string()),
        }
    }
    progress.total_nodes -= unplaced_nodes.len();
    progress.ready_nodes -= unplaced_nodes.len();
    progress.unplaced_nodes = unplaced_nodes;
    let mut skipped_with_old_pods: Vec<String> = by_node
        .groups
        .iter()
        .filter(|group| group.ready != Some(true) && by_node.has_old_pod(group))
        .map(|group| group.key.name.to_string())
        .collect();
    // NotReady nodes are done when no live out-of-date pod is left on them.
    progress.updated += progress.not_ready_nodes_skipped.len()
        - by_node
            .groups
            .iter()
            .filter(|group| group.ready == Some(false) && by_node.has_old_pod(group))
            .count();

    // Partition and node selector: the old pods of the nodes they hold back are taken
    // out of what may be replaced; every count above stays as without them.
    let held = if input.partition.is_none() && input.node_selector.is_none() {
        HeldBack::default()
    } else {
        HeldBack::choose(
            input.partition,
            input.node_selector,
            &by_node.old_nodes(&progress.unplaced_nodes),
            progress.total_nodes,
        )
    };
    if !held.is_empty() {
        skipped_with_old_pods.retain(|node| !held.holds(node));
        replaced_not_available.retain(|(node, _)| !held.holds(node));
        old_not_available.retain(|(node, _)| !held.holds(node));
        candidates.retain(|(node, _)| !held.holds(node));
    }
    // Waves: the old nodes of the waves after the current one (and of no wave) are held
    // back in the same way (`waves`).
    let waves = input.waves.map(|waves| {
        wave_gate::wave_progress(
            waves,
            &by_node,
            &lonely,
            &held,
            &progress.unplaced_nodes,
            &vacated_lonely,
            min_ready,
            input.now,
        )
    });
    if let Some(waves) = waves.as_ref().filter(|w| !w.held.is_empty()) {
        let wave_held: std::collections::HashSet<&str> =
            waves.held.iter().map(String::as_str).collect();
        skipped_with_old_pods.retain(|node| !wave_held.contains(node.as_str()));
        replaced_not_available.retain(|(node, _)| !wave_held.contains(node));
        old_not_available.retain(|(node, _)| !wave_held.contains(node));
        candidates.retain(|(node, _)| !wave_held.contains(node));
    }
    // A bake ending fires no watch event either.
    if let Some(WaveState::Baking(left)) = waves.as_ref().and_then(WaveProgress::current_state) {
        progress.recheck_after = Some(progress.recheck_after.map_or(left, |w| w.min(left)));
    }
    // The current wave holds later ones back (rather than nodes in no wave, held for good).
    let wave_wait = waves.as_ref().and_then(|w| {
        let (selector, _, state) = w.waves.get(w.current).filter(|_| !w.held.is_empty())?;
        Some(Blocker::Wave {
            wave: w.current + 1,
            of: w.waves.len(),
            selector: selector.clone(),
            state: *state,
        })
    });
    let held_by_waves = waves.as_ref().is_some_and(|w| !w.held.is_empty());

    // Nodes left out for placement are not in the base either (a smaller base only
    // makes the budget more conservative).
    progress.budget = input.max_unavailable.budget(progress.total_nodes);
    unavailable_nodes.extend(progress.vacated_nodes.iter().cloned());
    unavailable_nodes.sort();
    progress.unavailable = unavailable_nodes.len();
    progress.candidates = candidates.len();

    // A revision proves itself on as many nodes as may fail before the halt, before the
    // whole budget is spent on it: one pod start more per rollout, and a revision that
    // fails everywhere fails on no more nodes than the threshold.
    progress.proving = Proving::of(
        input.proving,
        progress.total_nodes,
        progress.budget,
        progress.ready_updated,
    );
    let budget = progress.proving.map_or(progress.budget, |p| p.needed);
    // The budget rule: a deletion may add a node to the unavailable ones only while
    // they stay within the budget. Pods serving nothing go first, then available ones.
    let allowed = budget.saturating_sub(progress.unavailable);
    let spendable = old_not_available.len() + candidates.len();
    let chosen = allowed.min(spendable);
    let old_chosen = chosen.min(old_not_available.len());
    let mut steps: Vec<(&str, &P, DeletionReason)> = replaced_not_available
        .iter()
        .chain(&old_not_available[..old_chosen])
        .map(|&(node, pod)| (node, pod, DeletionReason::OldPodNotAvailable))
        .collect();
    steps.sort_by(|a, b| a.0.cmp(b.0));
    steps.extend(
        candidates[..chosen - old_chosen]
            .iter()
            .map(|&(node, pod)| (node, pod, DeletionReason::RollingUpdate)),
    );
    // On top of the budget: the rest waits for the next plan (our deletions' own pod
    // events bring it at once), in the same order.
    let capped = steps.len().min(input.limits.max_deletions_per_plan.max(1));
    progress.deferred_by_cap = steps.len() - capped;
    let planned =
        |&(node, pod, reason): &(&str, &P, DeletionReason)| planned_deletion(pod, node, reason);
    let deletions: Vec<PlannedDeletion> = steps[..capped].iter().map(planned).collect();
    let upcoming = if input.list_upcoming {
        steps[capped..]
            .iter()
            .map(planned)
            .chain(old_not_available[old_chosen..].iter().map(|&(node, pod)| {
                planned_deletion(pod, node, DeletionReason::OldPodNotAvailable)
            }))
            .chain(
                candidates[chosen - old_chosen..]
                    .iter()
                    .map(|&(node, pod)| planned_deletion(pod, node, DeletionReason::RollingUpdate)),
            )
            .collect()
    } else {
        Vec::new()
    };

    progress.blocked = if chosen < spendable {
        Some(Blocker::BudgetExhausted {
            unavailable: unavailable_nodes,
        })
    } else if !deletions.is_empty() {
        None
    } else if !unavailable_nodes.is_empty() {
        Some(Blocker::WaitingForAvailability {
            nodes: unavailable_nodes,
        })
    } else if skipped_with_old_pods.is_empty() && held.is_empty() && !held_by_waves {
        Some(Blocker::Complete)
    } else if skipped_with_old_pods.is_empty() && wave_wait.is_some() {
        wave_wait
    } else if skipped_with_old_pods.is_empty() {
        Some(Blocker::HeldBack)
    } else {
        Some(Blocker::WaitingForSkippedNodes {
            nodes: skipped_with_old_pods,
        })
    };
    settled.sort();
    settled.dedup();
    progress.partition = held.partition;
    progress.kept_by_partition = held.kept_by_partition;
    progress.held_by_selector = held.held_by_selector;
    progress.waves = waves;

    RollingPlan {
        deletions,
        settled,
        progress,
        upcoming,
    }
}

/// Ready means the Node's `Ready` condition has status `True`.
pub fn is_node_ready(node: &impl NodeFacts) -> bool {
    node.is_ready()
}

/// Whether the pod is available as the plan counts it: Ready for `minReadySeconds` at
/// `now` (and so at any later time, the pod unchanged). The node triggers' fast path
/// reads the same rule (`triggers::daemonsets_for_node`).
pub fn is_available(pod: &impl PodFacts, min_ready_seconds: i32, now: Timestamp) -> bool {
    matches!(
        availability(ReadyLook::of(pod), min_ready_seconds, now),
        Availability::Available
    )
}

fn planned_deletion(pod: &impl PodFacts, node: &str, reason: DeletionReason) -> PlannedDeletion {
    PlannedDeletion {
        namespace: pod.pod_namespace().to_string(),
        name: pod.pod_name().to_string(),
        uid: pod.pod_uid().to_string(),
        node: node.to_string(),
        reason,
    }
}

/// An owned planner input, so tests can build one and tweak fields before planning.
#[cfg(test)]
pub(crate) struct OwnedInput {
    pub ds: DaemonSet,
    pub current: Option<CurrentRevision>,
    pub pods: Vec<Arc<Pod>>,
    pub nodes: Vec<Arc<Node>>,
    pub max_unavailable: MaxUnavailable,
    pub now: Timestamp,
    pub expected_deletions: BTreeSet<String>,
    pub vacated_by_us: BTreeMap<String, String>,
    pub limits: RollingLimits,
    pub partition: Option<Partition>,
    pub node_selector: Option<NodeSelector>,
    pub waves: Option<Waves>,
    pub proving: Option<IntOrPercent>,
}

#[cfg(test)]
impl OwnedInput {
    pub fn input(&self) -> RollingInput<'_, Pod, Node> {
        RollingInput {
            daemonset: &self.ds,
            current: self.current.as_ref(),
            pods: &self.pods,
            nodes: &self.nodes,
            max_unavailable: self.max_unavailable,
            now: self.now,
            expected_deletions: &self.expected_deletions,
            vacated_by_us: &self.vacated_by_us,
            limits: self.limits,
            partition: self.partition,
            node_selector: self.node_selector.as_ref(),
            waves: self.waves.as_ref(),
            proving: self.proving,
            list_upcoming: true,
        }
    }
}

#[cfg(test)]
mod tests;
