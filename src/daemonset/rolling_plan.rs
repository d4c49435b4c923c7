//! The AdvancedRollingUpdate planner: a pure function from observed state to the pods
//! to delete next. The native DaemonSet controller (OnDelete) recreates what we delete.
//!
//! Rules (see the spec, `upgrade-models.md`):
//! - Percentage base: nodes that have a pod of this DaemonSet (terminating pods
//!   included), NotReady nodes included. Pods bound to a Node object that does not exist
//!   are not counted in the base: there is no node to keep available, and a smaller base
//!   only makes the budget more conservative.
//! - Only Ready nodes are classified; NotReady and missing nodes are listed as skipped,
//!   never counted as unavailable and never touched.
//! - Terminating pods, and pods whose deletion we already issued (`expected_deletions`),
//!   are not live: they are ignored when classifying and never deleted again.
//! - Per Ready node: no live pod, an old and a new pod, or duplicates -> unavailable;
//!   only a new pod -> unavailable unless available; only an old pod that is not
//!   available -> delete it without using budget; only an old available pod -> candidate.
//! - At most `budget - unavailable` candidates are deleted, in ascending node name order
//!   so that repeated plans agree and operators can predict the next victims.
//! - Available = Ready condition True for at least `spec.minReadySeconds`, measured from
//!   the condition's `lastTransitionTime` (missing time with a non-zero minimum: not
//!   available, as in Kubernetes).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::policy::MaxUnavailable;
use super::revision::{is_controlled_by, is_terminating, pod_node_name, CurrentRevision};

#[cfg(test)]
mod proptests;

/// Everything the planner looks at, already fetched.
#[derive(Debug, Clone)]
pub struct RollingInput {
    pub daemonset: DaemonSet,
    /// ControllerRevisions in the DaemonSet's namespace (others' are filtered out).
    pub revisions: Vec<ControllerRevision>,
    /// Pods in the DaemonSet's namespace (pods it does not control are filtered out).
    pub pods: Vec<Pod>,
    /// All Nodes of the cluster.
    pub nodes: Vec<Node>,
    pub max_unavailable: MaxUnavailable,
    pub now: Timestamp,
    /// UIDs of pods whose deletion was issued but not yet observed: treated as gone
    /// (their node is unavailable) and never deleted again.
    pub expected_deletions: BTreeSet<String>,
}

/// The deletions to issue now, and where the rollout stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollingPlan {
    /// Pods to delete, each with a UID precondition. Budget-free deletions
    /// (`OldPodNotAvailable`) come first, then candidates in ascending node name order.
    pub deletions: Vec<PlannedDeletion>,
    pub progress: Progress,
}

impl RollingPlan {
    /// True when every pod of the DaemonSet is up to date, and available on Ready nodes.
    pub fn is_complete(&self) -> bool {
        self.progress.blocked == Some(Blocker::Complete)
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
    /// An out-of-date pod that is not available serves nothing: replaced without budget.
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

/// Where the rollout stands, for Events, metrics and the CLI.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    /// The percentage base: nodes that have a pod of this DaemonSet, NotReady included,
    /// missing Node objects excluded.
    pub total_nodes: usize,
    /// Ready nodes whose only live pod is up to date (available or not yet).
    pub updated: usize,
    /// Ready nodes counted against the budget before this plan's deletions: no live pod,
    /// old and new pods, duplicate pods, or an up-to-date pod not yet available.
    pub unavailable: usize,
    /// Ready nodes whose only live pod is out of date and available.
    pub candidates: usize,
    /// Nodes the DaemonSet should run on (`status.desiredNumberScheduled`) that have no
    /// pod in view: being replaced. Counted in `total_nodes` and `unavailable`.
    pub vacated_nodes: usize,
    /// `max-unavailable` resolved against `total_nodes`.
    pub budget: usize,
    /// NotReady nodes holding a pod of this DaemonSet, by name: not touched.
    pub not_ready_nodes_skipped: Vec<String>,
    /// Node names that pods point to but no Node object exists for: not touched.
    pub missing_nodes_skipped: Vec<String>,
    /// Why no more than `deletions` can happen now; `None` while progressing freely.
    pub blocked: Option<Blocker>,
    /// When the earliest up-to-date pod reaches `minReadySeconds` and frees budget: no
    /// watch event fires at that moment, so the controller should requeue after it.
    pub recheck_after: Option<Duration>,
}

/// Why a plan stops where it does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocker {
    /// Neither a ControllerRevision hash nor a template generation is known yet.
    CurrentRevisionUnknown,
    /// Out-of-date available pods remain, but the unavailable nodes use the whole budget.
    BudgetExhausted,
    /// No out-of-date available pod is left on Ready nodes; these Ready nodes are still
    /// unavailable (pod being recreated, starting, or within `minReadySeconds`).
    WaitingForAvailability { nodes: Vec<String> },
    /// Ready nodes are done; out-of-date pods remain on these NotReady or missing nodes
    /// and are upgraded when the nodes are Ready again.
    WaitingForSkippedNodes { nodes: Vec<String> },
    /// Every pod is up to date; on Ready nodes, available.
    Complete,
}

/// Plans the next AdvancedRollingUpdate step. Pure: same input, same plan.
pub fn plan_rolling_update(input: &RollingInput) -> RollingPlan {
    let ds_uid = input.daemonset.metadata.uid.as_deref().unwrap_or_default();
    let pods_by_node = pods_by_node(&input.pods, ds_uid);
    let node_ready: BTreeMap<&str, bool> = input
        .nodes
        .iter()
        .filter_map(|node| Some((node.metadata.name.as_deref()?, is_node_ready(node))))
        .collect();

    let mut progress = Progress::default();
    let mut ready_nodes = Vec::new();
    for (&node, pods) in &pods_by_node {
        match node_ready.get(node) {
            None => progress.missing_nodes_skipped.push(node.to_string()),
            Some(false) => {
                progress.total_nodes += 1;
                progress.not_ready_nodes_skipped.push(node.to_string());
            }
            Some(true) => {
                progress.total_nodes += 1;
                ready_nodes.push((node, pods));
            }
        }
    }
    progress.budget = input.max_unavailable.budget(progress.total_nodes);

    let Some(current) = CurrentRevision::of(&input.daemonset, &input.revisions) else {
        progress.blocked = Some(Blocker::CurrentRevisionUnknown);
        return RollingPlan {
            deletions: Vec::new(),
            progress,
        };
    };

    let min_ready = input.daemonset.spec.min_ready_seconds.unwrap_or(0);
    let is_live = |pod: &Pod| {
        !is_terminating(pod)
            && !pod
                .metadata
                .uid
                .as_ref()
                .is_some_and(|uid| input.expected_deletions.contains(uid))
    };

    let mut deletions = Vec::new();
    let mut candidates = Vec::new();
    let mut unavailable_nodes = Vec::new();
    for (node, pods) in ready_nodes {
        let (new, old): (Vec<&Pod>, Vec<&Pod>) = pods
            .iter()
            .copied()
            .filter(|pod| is_live(pod))
            .partition(|pod| current.is_pod_updated(pod));
        match (new.as_slice(), old.as_slice()) {
            ([new_pod], []) => {
                progress.updated += 1;
                match availability(new_pod, min_ready, input.now) {
                    Availability::Available => {}
                    Availability::AvailableIn(wait) => {
                        let earliest = progress.recheck_after.map_or(wait, |w| w.min(wait));
                        progress.recheck_after = Some(earliest);
                        unavailable_nodes.push(node.to_string());
                    }
                    Availability::NotAvailable => unavailable_nodes.push(node.to_string()),
                }
            }
            ([], [old_pod]) => match availability(old_pod, min_ready, input.now) {
                Availability::Available => candidates.push((node, *old_pod)),
                _ => deletions.push(planned_deletion(
                    old_pod,
                    node,
                    DeletionReason::OldPodNotAvailable,
                )),
            },
            // No live pod, old and new together, or duplicates: the native controller is
            // still creating or cleaning up here.
            _ => unavailable_nodes.push(node.to_string()),
        }
    }
    // A node whose old pod is gone and whose replacement is not created (or not seen)
    // yet has no pod at all, so the walk above cannot see it. The native controller's
    // desiredNumberScheduled still counts it: the shortfall is unavailable too. Without
    // this, a reconcile that runs between a pod's removal and its replacement's
    // creation spends the same budget twice.
    let desired = input.daemonset.status.as_ref().map_or(0, |status| {
        usize::try_from(status.desired_number_scheduled).unwrap_or(0)
    });
    // desiredNumberScheduled leaves out nodes tainted unreachable/not-ready (NoSchedule),
    // so compare it with the Ready nodes that show a pod. A NotReady node not tainted yet
    // makes this over-count for a moment, which only slows the rollout.
    let ready_nodes_with_pods = pods_by_node
        .keys()
        .filter(|node| node_ready.get(*node) == Some(&true))
        .count();
    progress.vacated_nodes = desired.saturating_sub(ready_nodes_with_pods);
    if progress.vacated_nodes > 0 {
        progress.total_nodes += progress.vacated_nodes;
        progress.budget = input.max_unavailable.budget(progress.total_nodes);
    }
    progress.unavailable = unavailable_nodes.len() + progress.vacated_nodes;
    progress.candidates = candidates.len();

    let allowed = progress.budget.saturating_sub(progress.unavailable);
    let chosen = allowed.min(candidates.len());
    deletions.extend(
        candidates[..chosen]
            .iter()
            .map(|(node, pod)| planned_deletion(pod, node, DeletionReason::RollingUpdate)),
    );

    progress.blocked = if chosen < candidates.len() {
        Some(Blocker::BudgetExhausted)
    } else if !deletions.is_empty() {
        None
    } else if !unavailable_nodes.is_empty() || progress.vacated_nodes > 0 {
        Some(Blocker::WaitingForAvailability {
            nodes: unavailable_nodes,
        })
    } else {
        let skipped_with_old_pods: Vec<String> = pods_by_node
            .iter()
            .filter(|(node, _)| node_ready.get(*node) != Some(&true))
            .filter(|(_, pods)| {
                pods.iter()
                    .any(|pod| is_live(pod) && !current.is_pod_updated(pod))
            })
            .map(|(node, _)| node.to_string())
            .collect();
        if skipped_with_old_pods.is_empty() {
            Some(Blocker::Complete)
        } else {
            Some(Blocker::WaitingForSkippedNodes {
                nodes: skipped_with_old_pods,
            })
        }
    };

    RollingPlan {
        deletions,
        progress,
    }
}

/// Pods the DaemonSet controls, grouped by node in ascending name order (pods with no
/// known node are left out: there is nothing to count them against).
fn pods_by_node<'a>(pods: &'a [Pod], ds_uid: &str) -> BTreeMap<&'a str, Vec<&'a Pod>> {
    let mut by_node: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
    for pod in pods.iter().filter(|pod| is_controlled_by(pod, ds_uid)) {
        if let Some(node) = pod_node_name(pod) {
            by_node.entry(node).or_default().push(pod);
        }
    }
    // Within a node, order by name so plans do not depend on the input order.
    for pods in by_node.values_mut() {
        pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    }
    by_node
}

/// Ready means the Node's `Ready` condition has status `True`.
pub fn is_node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

enum Availability {
    Available,
    /// Ready, but `minReadySeconds` not reached yet: available after this long.
    AvailableIn(Duration),
    NotAvailable,
}

fn availability(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> Availability {
    let Some(ready) = pod
        .status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .and_then(|conditions| conditions.iter().find(|c| c.type_ == "Ready"))
        .filter(|c| c.status == "True")
    else {
        return Availability::NotAvailable;
    };
    if min_ready_seconds <= 0 {
        return Availability::Available;
    }
    let Some(since) = ready.last_transition_time.as_ref() else {
        return Availability::NotAvailable;
    };
    let remaining =
        SignedDuration::from_secs(min_ready_seconds.into()) - now.duration_since(since.0);
    match Duration::try_from(remaining) {
        Ok(wait) if !wait.is_zero() => Availability::AvailableIn(wait),
        // Zero or negative: the minimum has been reached.
        _ => Availability::Available,
    }
}

fn planned_deletion(pod: &Pod, node: &str, reason: DeletionReason) -> PlannedDeletion {
    PlannedDeletion {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        node: node.to_string(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemonset::testkit::{at, node, revision, DaemonSetBuilder, PodBuilder};

    const NOW: i64 = 1_000_000;

    /// A DaemonSet upgrading from hash "old" (revision 1) to "new" (revision 2).
    fn upgrading(min_ready_seconds: i32) -> (DaemonSet, Vec<ControllerRevision>) {
        let ds = DaemonSetBuilder::new("agent")
            .strategy("AdvancedRollingUpdate")
            .on_delete()
            .min_ready_seconds(min_ready_seconds)
            .build();
        let revisions = vec![revision(&ds, "old", 1), revision(&ds, "new", 2)];
        (ds, revisions)
    }

    fn input(
        ds: &DaemonSet,
        revisions: &[ControllerRevision],
        pods: Vec<Pod>,
        nodes: Vec<Node>,
        max_unavailable: MaxUnavailable,
    ) -> RollingInput {
        RollingInput {
            daemonset: ds.clone(),
            revisions: revisions.to_vec(),
            pods,
            nodes,
            max_unavailable,
            now: at(NOW),
            expected_deletions: BTreeSet::new(),
        }
    }

    fn old_available(ds: &DaemonSet, name: &str, node: &str) -> Pod {
        PodBuilder::new(name, ds)
            .hash("old")
            .on_node(node)
            .ready_since(at(NOW - 3600))
            .build()
    }

    fn new_available(ds: &DaemonSet, name: &str, node: &str) -> Pod {
        PodBuilder::new(name, ds)
            .hash("new")
            .on_node(node)
            .ready_since(at(NOW - 3600))
            .build()
    }

    fn ready_nodes(names: &[&str]) -> Vec<Node> {
        names.iter().map(|name| node(name, true)).collect()
    }

    fn deleted_names(plan: &RollingPlan) -> Vec<(&str, DeletionReason)> {
        plan.deletions
            .iter()
            .map(|d| (d.name.as_str(), d.reason))
            .collect()
    }

    #[test]
    fn deletes_candidates_within_budget_in_node_name_order() {
        let (ds, revisions) = upgrading(0);
        // Given in reverse so that the order cannot come from the input.
        let names = ["n5", "n4", "n3", "n2", "n1"];
        let pods = names
            .iter()
            .map(|n| old_available(&ds, &format!("pod-{n}"), n))
            .collect();
        let plan = plan_rolling_update(&input(
            &ds,
            &revisions,
            pods,
            ready_nodes(&names),
            MaxUnavailable::Count(2),
        ));
        assert_eq!(
            deleted_names(&plan),
            [
                ("pod-n1", DeletionReason::RollingUpdate),
                ("pod-n2", DeletionReason::RollingUpdate)
            ]
        );
        let first = &plan.deletions[0];
        assert_eq!(
            (
                first.namespace.as_str(),
                first.uid.as_str(),
                first.node.as_str()
            ),
            ("edge", "uid-pod-n1", "n1")
        );
        assert_eq!(plan.progress.total_nodes, 5);
        assert_eq!(plan.progress.candidates, 5);
        assert_eq!(plan.progress.budget, 2);
        assert_eq!(plan.progress.blocked, Some(Blocker::BudgetExhausted));
    }

    #[test]
    fn unavailable_nodes_use_the_budget() {
        let (ds, revisions) = upgrading(0);
        let pods = vec![
            // n1: recreated pod still starting.
            PodBuilder::new("new-n1", &ds)
                .hash("new")
                .on_node("n1")
                .not_ready()
                .build(),
            old_available(&ds, "old-n2", "n2"),
            old_available(&ds, "old-n3", "n3"),
        ];
        let plan = plan_rolling_update(&input(
            &ds,
            &revisions,
            pods,
            ready_nodes(&["n1", "n2", "n3"]),
            MaxUnavailable::Count(2),
        ));
        assert_eq!(
            deleted_names(&plan),
            [("old-n2", DeletionReason::RollingUpdate)]
        );
        assert_eq!(plan.progress.unavailable, 1);
        assert_eq!(plan.progress.updated, 1);
    }

    #[test]
    fn a_node_between_pod_removal_and_replacement_still_uses_the_budget() {
        // n1's old pod is gone and its replacement not created yet: no pod in view, but
        // the DaemonSet wants 3 nodes scheduled.
        let (mut ds, revisions) = upgrading(0);
        ds.status = Some(k8s_openapi::api::apps::v1::DaemonSetStatus {
            desired_number_scheduled: 3,
            ..Default::default()
        });
        let pods = vec![
            old_available(&ds, "old-n2", "n2"),
            old_available(&ds, "old-n3", "n3"),
        ];
        let plan = plan_rolling_update(&input(
            &ds,
            &revisions,
            pods,
            ready_nodes(&["n1", "n2", "n3"]),
            MaxUnavailable::Count(1),
        ));
        assert!(plan.deletions.is_empty(), "{:?}", plan.deletions);
        assert_eq!(plan.progress.vacated_nodes, 1);
        assert_eq!(plan.progress.unavailable, 1);
        assert_eq!(plan.progress.total_nodes, 3);
        assert_eq!(plan.progress.blocked, Some(Blocker::BudgetExhausted));
    }

    #[test]
    fn two_pods_on_one_node_count_as_unavailable_and_are_left_alone() {
        let (ds, revisions) = upgrading(0);
        let pods = vec![
            old_available(&ds, "old-n1", "n1"),
            new_available(&ds, "new-n1", "n1"),
            old_available(&ds, "old-a-n2", "n2"),
            old_available(&ds, "old-b-n2", "n2"),
            old_available(&ds, "old-n3", "n3"),
            old_available(&ds, "old-n4", "n4"),
        ];
        let plan = plan_rolling_update(&input(
            &ds,
            &revisions,
            pods,
            ready_nodes(&["n1", "n2", "n3", "n4"]),
            MaxUnavailable::Count(3),
        ));
        assert_eq!(plan.progress.unavailable, 2);
        assert_eq!(
            deleted_names(&plan),
            [("old-n3", DeletionReason::RollingUpdate)]
        );
    }

    #[test]
    fn terminating_old_pod_is_ignored_and_its_node_is_unavailable() {
        let (ds, revisions) = upgrading(0);
        let pods = vec![
            PodBuilder::new("old-n1", &ds)
                .hash("old")
                .on_node("n1")
                .ready_since(at(NOW - 3600))
                .terminating(at(NOW - 1))
                .build(),
            old_available(&ds, "old-n2", "n2"),
            // n3: the terminating old pod is ignored, the new one is what counts.
            PodBuilder::new("old-n3", &ds)
                .hash("old")
                .on_node("n3")
                .terminating(at(NOW - 1))
                .build(),
            new_available(&ds, "new-n3", "n3"),
        ];
        let plan = plan_rolling_update(&input(
            &ds,
            &revisions,
            pods,
            ready_nodes(&["n1", "n2", "n3"]),
            MaxUnavailable::Count(1),
        ));
        assert!(plan.deletions.is_empty(), "{:?}", plan.deletions);
        assert_eq!(plan.progress.unavailable, 1);
        assert_eq!(plan.progress.updated, 1);
        assert_eq!(plan.progress.blocked, Some(Blocker::BudgetExhausted));
    }

    #[test]
    fn unavailable_old_pod_is_deleted_without_using_budget() {
        let (ds, revisions) = upgrading(0);
        let pods = vec![
            PodBuilder::new("crashing-n1", &ds)
                .hash("old")
                .on_node("n1")
                .not_ready()
                .build(),
            old_available(&ds, "old-n2", "n2"),
            old_available(&ds, "old-n3", "n3"),
        ];
        let plan = plan_rolling_update(&input(
            &ds,
            &revisions,
            pods,
            ready_nodes(&["n1", "n2", "n3"]),
            MaxUnavailable::Count(1),
        ));
        assert_eq!(
            deleted_names(&plan),
            [
                ("crashing-n1", DeletionReason::OldPodNotAvailable),
                ("old-n2", DeletionReason::RollingUpdate)
            ]
        );
        assert_eq!(plan.progress.unavailable, 0);
        assert_eq!(plan.progress.candidates, 2);
    }

    #[test]
    fn pending_pod_located_by_node_affinity() {
        let (ds, revisions) = upgrading(0);
        let pods = vec![
            PodBuilder::new("pending-n1", &ds)
                .hash("new")
                .pending_for_node("n1")
                .build(),
            old_available(&ds, "old-n2", "n2"),
        ];
        let plan = plan_rolling_update(&input(
            &ds,
            &revisions,
            pods,
            ready_nodes(&["n1", "n2"]),
            MaxUnavailable::Count(1),
        ));
        // The pending new pod is on n1, so n1 is unavailable and uses the only budget.
        assert_eq!(plan.progress.total_nodes, 2);
        assert_eq!(plan.progress.unavailable, 1);
        assert!(plan.deletions.is_empty());
    }

    #[test]
    fn min_ready_seconds_keeps_a_new_pod_unavailable() {
        let (ds, revisions) = upgrading(30);
        let young_new = |ready_for: i64| {
            PodBuilder::new("new-n1", &ds)
                .hash("new")
                .on_node("n1")
                .ready_since(at(NOW - ready_for))
                .build()
        };
        let plan_with = |new_pod: Pod| {
            plan_rolling_update(&input(
                &ds,
                &revisions,
                vec![new_pod, old_available(&ds, "old-n2", "n2")],
                ready_nodes(&["n1", "n2"]),
                MaxUnavailable::Count(1),
            ))
        };

        let waiting = plan_with(young_new(10));
        assert!(waiting.deletions.is_empty());
        assert_eq!(waiting.progress.unavailable, 1);
        assert_eq!(
            waiting.progress.recheck_after,
            Some(Duration::from_secs(20))
        );
        assert_eq!(waiting.progress.blocked, Some(Blocker::BudgetExhausted));

        let exactly = plan_with(young_new(30));
        assert_eq!(
            deleted_names(&exactly),
            [("old-n2", DeletionReason::RollingUpdate)]
        );
        assert_eq!(exactly.progress.recheck_after, None);
    }

    #[test]
    fn min_ready_seconds_applies_to_old_pods_too() {
        let (ds, revisions) = upgrading(30);
        let pods = vec![PodBuilder::new("old-n1", &ds)
            .hash("old")
            .on_node("n1")
            .ready_since(at(NOW - 5))
            .build()];
        let plan = plan_rolling_update(&input(
            &ds,
            &revisions,
            pods,
            ready_nodes(&["n1"]),
            MaxUnavailable::Count(1),
        ));
        assert_eq!(
            deleted_names(&plan),
            [("old-n1", DeletionReason::OldPodNotAvailable)]
        );
    }

    #[test]
    fn template_reverted_to_an_earlier_revision() {
        let ds = DaemonSetBuilder::new("agent").on_delete().build();
        // a (1) -> b (2) -> back to a: the API server renumbers a's revision to 3.
        let revisions = vec![revision(&ds, "b", 2), revision(&ds, "a", 3)];
        let pods = vec![
            PodBuilder::new("b-n1", &ds)
                .hash("b")
                .on_node("n1")
                .ready_since(at(0))
                .build(),
            PodBuilder::new("a-n2", &ds)
                .hash("a")
                .on_node("n2")
                .ready_since(at(0))
                .build(),
        ];
        let plan = plan_rolling_update(&input(
            &ds,
            &revisions,
            pods,
            ready_nodes(&["n1", "n2"]),
            MaxUnavailable::Count(1),
        ));
        assert_eq!(
            deleted_names(&plan),
            [("b-n1", DeletionReason::RollingUpdate)]
        );
        assert_eq!(plan.progress.updated, 1);
    }

    #[test]
    fn missing_and_not_ready_nodes_are_skipped() {
        let (ds, revisions) = upgrading(0);
        let pods = vec![
            old_available(&ds, "old-gone", "gone"),
            old_available(&ds, "old-cut", "cut"),
            PodBuilder::new("crashing-cut2", &ds)
                .hash("old")
                .on_node("cut2")
                .not_ready()
                .build(),
            old_available(&ds, "old-n1", "n1"),
        ];
        let nodes = vec![node("cut", false), node("cut2", false), node("n1", true)];
        let plan = plan_rolling_update(&input(
            &ds,
            &revisions,
            pods,
            nodes,
            MaxUnavailable::Percent(100),
        ));
        assert_eq!(
            deleted_names(&plan),
            [("old-n1", DeletionReason::RollingUpdate)]
        );
        assert_eq!(plan.progress.not_ready_nodes_skipped, ["cut", "cut2"]);
        assert_eq!(plan.progress.missing_nodes_skipped, ["gone"]);
        // NotReady nodes are in the percentage base, missing ones are not.
        assert_eq!(plan.progress.total_nodes, 3);
        assert_eq!(plan.progress.budget, 3);
        assert_eq!(plan.progress.unavailable, 0);
    }

    #[test]
    fn percentage_base_includes_not_ready_nodes_and_rounds_up() {
        let (ds, revisions) = upgrading(0);
        // 11 nodes with a pod, 10 of them NotReady: 10% of 11 rounds up to 2.
        let mut nodes = vec![node("a-ready", true), node("b-ready", true)];
        let mut pods = vec![
            old_available(&ds, "old-a", "a-ready"),
            old_available(&ds, "old-b", "b-ready"),
        ];
        for i in 0..9 {
            let name = format!("z-cut-{i}");
            nodes.push(node(&name, false));
            pods.push(old_available(&ds, &format!("old-{name}"), &name));
        }
        let plan = plan_rolling_update(&input(
            &ds,
            &revisions,
            pods,
            nodes,
            MaxUnavailable::DEFAULT,
        ));
        assert_eq!(plan.progress.total_nodes, 11);
        assert_eq!(plan.progress.budget, 2);
        assert_eq!(plan.deletions.len(), 2);
    }

    #[test]
    fn expected_deletions_are_not_repeated_and_count_as_unavailable() {
        let (ds, revisions) = upgrading(0);
        let pods = vec![
            old_available(&ds, "old-n1", "n1"),
            old_available(&ds, "old-n2", "n2"),
            PodBuilder::new("crashing-n3", &ds)
                .hash("old")
                .on_node("n3")
                .not_ready()
                .build(),
        ];
        let mut planned = input(
            &ds,
            &revisions,
            pods,
            ready_nodes(&["n1", "n2", "n3"]),
            MaxUnavailable::Count(1),
        );
        planned.expected_deletions =
            BTreeSet::from(["uid-old-n1".into(), "uid-crashing-n3".into()]);
        let plan = plan_rolling_update(&planned);
        assert!(plan.deletions.is_empty(), "{:?}", plan.deletions);
        assert_eq!(plan.progress.unavailable, 2);
        assert_eq!(plan.progress.blocked, Some(Blocker::BudgetExhausted));
    }

    #[test]
    fn count_larger_than_node_count_deletes_all_candidates() {
        let (ds, revisions) = upgrading(0);
        let pods = vec![
            old_available(&ds, "old-n1", "n1"),
            old_available(&ds, "old-n2", "n2"),
        ];
        let plan = plan_rolling_update(&input(
            &ds,
            &revisions,
            pods,
            ready_nodes(&["n1", "n2"]),
            MaxUnavailable::Count(100),
        ));
        assert_eq!(plan.progress.budget, 2);
        assert_eq!(plan.deletions.len(), 2);
        assert_eq!(plan.progress.blocked, None);
    }

    #[test]
    fn pods_of_other_daemonsets_are_ignored() {
        let (ds, revisions) = upgrading(0);
        let foreign = PodBuilder::new("foreign", &ds)
            .owned_by_uid("another-ds")
            .hash("old")
            .on_node("n1")
            .ready_since(at(0))
            .build();
        let plan = plan_rolling_update(&input(
            &ds,
            &revisions,
            vec![foreign],
            ready_nodes(&["n1"]),
            MaxUnavailable::Count(1),
        ));
        assert!(plan.deletions.is_empty());
        assert_eq!(plan.progress.total_nodes, 0);
        assert!(plan.is_complete());
    }

    #[test]
    fn plan_is_independent_of_input_order() {
        let (ds, revisions) = upgrading(0);
        let mut pods: Vec<Pod> = (0..8)
            .map(|i| old_available(&ds, &format!("p{i}"), &format!("n{i}")))
            .collect();
        let mut nodes: Vec<Node> = (0..8).map(|i| node(&format!("n{i}"), true)).collect();
        let forward = plan_rolling_update(&input(
            &ds,
            &revisions,
            pods.clone(),
            nodes.clone(),
            MaxUnavailable::Count(3),
        ));
        pods.reverse();
        nodes.rotate_left(3);
        let shuffled = plan_rolling_update(&input(
            &ds,
            &revisions,
            pods,
            nodes,
            MaxUnavailable::Count(3),
        ));
        assert_eq!(forward, shuffled);
    }

    #[test]
    fn rollout_states_reported() {
        let (ds, revisions) = upgrading(0);

        let done = plan_rolling_update(&input(
            &ds,
            &revisions,
            vec![new_available(&ds, "new-n1", "n1")],
            ready_nodes(&["n1"]),
            MaxUnavailable::Count(1),
        ));
        assert!(done.is_complete());
        assert_eq!(done.progress.updated, 1);

        let waiting_for_cut_node = plan_rolling_update(&input(
            &ds,
            &revisions,
            vec![
                new_available(&ds, "new-n1", "n1"),
                old_available(&ds, "old-cut", "cut"),
            ],
            vec![node("n1", true), node("cut", false)],
            MaxUnavailable::Count(1),
        ));
        assert!(!waiting_for_cut_node.is_complete());
        assert_eq!(
            waiting_for_cut_node.progress.blocked,
            Some(Blocker::WaitingForSkippedNodes {
                nodes: vec!["cut".into()]
            })
        );

        let waiting_for_pod = plan_rolling_update(&input(
            &ds,
            &revisions,
            vec![PodBuilder::new("new-n1", &ds)
                .hash("new")
                .on_node("n1")
                .not_ready()
                .build()],
            ready_nodes(&["n1"]),
            MaxUnavailable::Count(1),
        ));
        assert_eq!(
            waiting_for_pod.progress.blocked,
            Some(Blocker::WaitingForAvailability {
                nodes: vec!["n1".into()]
            })
        );

        let no_revision = plan_rolling_update(&input(
            &ds,
            &[],
            vec![old_available(&ds, "old-n1", "n1")],
            ready_nodes(&["n1"]),
            MaxUnavailable::Count(1),
        ));
        assert!(no_revision.deletions.is_empty());
        assert_eq!(
            no_revision.progress.blocked,
            Some(Blocker::CurrentRevisionUnknown)
        );
    }

    #[test]
    fn node_that_comes_back_ready_is_upgraded_at_once() {
        let (ds, revisions) = upgrading(0);
        let pods = vec![
            new_available(&ds, "new-n1", "n1"),
            old_available(&ds, "old-n2", "n2"),
        ];
        let cut = plan_rolling_update(&input(
            &ds,
            &revisions,
            pods.clone(),
            vec![node("n1", true), node("n2", false)],
            MaxUnavailable::Count(1),
        ));
        assert!(cut.deletions.is_empty());
        let back = plan_rolling_update(&input(
            &ds,
            &revisions,
            pods,
            ready_nodes(&["n1", "n2"]),
            MaxUnavailable::Count(1),
        ));
        assert_eq!(
            deleted_names(&back),
            [("old-n2", DeletionReason::RollingUpdate)]
        );
    }
}
