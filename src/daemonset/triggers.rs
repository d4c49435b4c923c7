//! Which writes re-plan a DaemonSet. The API server writes a DaemonSet pod five or six
//! times in a rollout (created, bound, started, Ready, marked for deletion) and the
//! DaemonSet's status after each of those. A replan per write was most of the upgrade
//! controller's CPU (the OpenYurt side-by-side measured it). Only a write that changes
//! what the planners read can change a plan: [`PlannedPod`] and [`daemonset_unchanged`]
//! say what that is, and a property test proves that pods equal under [`PlannedPod`]
//! give equal plans.
//!
//! A node change re-plans only the DaemonSets it can matter to ([`daemonsets_for_node`]):
//! at 10,000 nodes x 20 DaemonSets, re-planning every DaemonSet on every flap was the
//! controller's cost of a flapping edge fleet (issue 25).
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::ObjectRef;

use super::failure::{FAILED_WAITING_REASONS, RESTARTS_FAILED};
use super::placement::should_run_on;
use super::policy::{policy_for, Policy, PolicyDecision};
use super::revision::{generation_observed, CurrentRevision};
use super::rolling_plan::is_available;
use crate::names::{
    CONTROLLER_REVISION_HASH_LABEL, POD_IMAGE_READY_CONDITION, POD_NEED_UPGRADE_CONDITION,
    POD_TEMPLATE_GENERATION_LABEL,
};
use crate::object::{ConditionView, NodeFacts, PodFacts};
use crate::watch::PodsByOwner;

/// Everything the upgrade planners (`rolling_plan`, `ota_plan`, `expectations`) read of
/// a pod. A planner that starts reading another pod field must add it here; the
/// property test in `rolling_plan/proptests.rs` fails otherwise for the fields it varies.
#[derive(Debug, PartialEq)]
pub struct PlannedPod<'a> {
    namespace: &'a str,
    name: &'a str,
    uid: &'a str,
    controller: Option<&'a str>,
    /// `spec.nodeName`, or the affinity node while pending: binding changes nothing.
    node: Option<&'a str>,
    terminating: bool,
    revision_hash: Option<&'a str>,
    template_generation: Option<&'a str>,
    /// `Some(since)` while the Ready condition is True. Not-yet-Ready pods look alike
    /// whatever their other conditions say.
    ready_since: Option<Option<&'a Time>>,
    need_upgrade: Option<ConditionView<'a>>,
    /// Pull-ahead waits for the pull's answer in `PodImageReady` (`pull_ahead`).
    image_ready: Option<ConditionView<'a>>,
    /// The kubelet says a container cannot start (`failure`): the waiting reason, and
    /// whether restarts passed the threshold. Not the restart count itself: a crash loop
    /// would replan at every restart for nothing.
    cannot_start: (Option<&'a str>, bool),
}

impl<'a> PlannedPod<'a> {
    pub fn of(pod: &'a impl PodFacts) -> Self {
        PlannedPod {
            namespace: pod.pod_namespace(),
            name: pod.pod_name(),
            uid: pod.pod_uid(),
            controller: pod.controller_uid(),
            node: pod.node_or_affinity_node(),
            terminating: pod.is_terminating(),
            revision_hash: pod.label(CONTROLLER_REVISION_HASH_LABEL),
            template_generation: pod.label(POD_TEMPLATE_GENERATION_LABEL),
            ready_since: pod
                .condition("Ready")
                .filter(|ready| ready.status == "True")
                .map(|ready| ready.last_transition_time),
            need_upgrade: pod.condition(POD_NEED_UPGRADE_CONDITION),
            image_ready: pod.condition(POD_IMAGE_READY_CONDITION),
            cannot_start: cannot_start(pod),
        }
    }
}

/// What `failure::kubelet_failure` reads of a pod, borrowed.
fn cannot_start(pod: &impl PodFacts) -> (Option<&str>, bool) {
    let mut waiting = None;
    let mut restarts = false;
    for container in pod.container_states() {
        waiting = waiting.or(container
            .waiting_reason
            .filter(|r| FAILED_WAITING_REASONS.contains(r)));
        restarts |= !container.ready && container.restart_count >= RESTARTS_FAILED;
    }
    (waiting, restarts)
}

/// The DaemonSets that own a pod (any `apps/v1` owner reference of that kind), as
/// kube-runtime's `owns` would find them in `metadata.ownerReferences`: read through
/// [`PodFacts::owner_references`], since a cached pod keeps its owners apart.
pub fn daemonset_owners(pod: &impl PodFacts) -> Vec<ObjectRef<DaemonSet>> {
    pod.owner_references()
        .iter()
        .filter(|owner| owner.kind == "DaemonSet" && owner.api_version == "apps/v1")
        .map(|owner| ObjectRef::new(&owner.name).within(pod.pod_namespace()))
        .collect()
}

/// A pod write the upgrade planners cannot see. A not-Ready status plans the same
/// whenever it turned (a returning node's pod is replaced within the budget whether
/// its status is the kubelet's or the node-lifecycle controller's), so the kubelet's
/// first not-Ready status of every new pod, and its report after a comeback, replan
/// nothing.
pub fn pod_unchanged(before: &impl PodFacts, after: &impl PodFacts) -> bool {
    PlannedPod::of(before) == PlannedPod::of(after)
}

/// Whether a pod write the planners can see (see [`pod_unchanged`]) reconciles the
/// DaemonSet owning the pod; `owner` finds a DaemonSet of the pod's namespace by name
/// in the store.
///
/// Only DaemonSets rollgate manages (AdvancedRollingUpdate, OTA) plan on their pods.
/// An unmanaged DaemonSet's reconcile (and a NotOurs one's: OTA annotation, wrong
/// strategy) does one thing with its pods: it removes a `PodNeedUpgrade` condition left
/// from when it was OTA. So its pods' writes reconcile it only when the pod carries that
/// condition (a write of ours that landed after the annotation went); the rest of an
/// unmanaged fleet's pod traffic costs a lookup and a parse of the annotations. An
/// invalid DaemonSet acts on no pod until it is fixed, which is a DaemonSet write.
/// A pod whose owner is not in the store reconciles nothing either way.
pub fn pod_replans_owner(
    pod: &impl PodFacts,
    owner: &dyn Fn(&str) -> Option<Arc<DaemonSet>>,
) -> bool {
    pod.owner_references()
        .iter()
        .filter(|r| r.kind == "DaemonSet" && r.api_version == "apps/v1")
        .filter_map(|r| owner(&r.name))
        .any(|ds| match policy_for(&ds) {
            PolicyDecision::Managed(_) => true,
            PolicyDecision::Unmanaged | PolicyDecision::NotOurs { .. } => {
                pod.condition(POD_NEED_UPGRADE_CONDITION).is_some()
            }
            PolicyDecision::Invalid(_) => false,
        })
}

/// A DaemonSet write the upgrade controller cannot see: only its status moved, and not
/// `observedGeneration` (the controller waits for it after a template change).
pub fn daemonset_unchanged(before: &DaemonSet, after: &DaemonSet) -> bool {
    meta_unchanged(&before.metadata, &after.metadata)
        && before.spec == after.spec
        && observed_generation(before) == observed_generation(after)
}

fn observed_generation(ds: &DaemonSet) -> Option<i64> {
    ds.status.as_ref()?.observed_generation
}

/// Every metadata field but `resourceVersion` and `managedFields`.
fn meta_unchanged(a: &ObjectMeta, b: &ObjectMeta) -> bool {
    a.name == b.name
        && a.namespace == b.namespace
        && a.uid == b.uid
        && a.generation == b.generation
        && a.annotations == b.annotations
        && a.labels == b.labels
        && a.owner_references == b.owner_references
        && a.finalizers == b.finalizers
        && a.deletion_timestamp == b.deletion_timestamp
        && a.deletion_grace_period_seconds == b.deletion_grace_period_seconds
        && a.creation_timestamp == b.creation_timestamp
        && a.generate_name == b.generate_name
}

/// What a node trigger reads besides the node and the DaemonSets: the pod index,
/// rollgate's own in-flight work (`expectations`), and the DaemonSets' current
/// revisions, for the fast path of [`daemonsets_for_node`].
pub struct NodeTriggerView<'a> {
    pub pods: &'a PodsByOwner,
    /// The DaemonSet's current revision (`controller::current_revision`); read only for
    /// DaemonSets with a pod on the node, after every other test.
    pub current: &'a dyn Fn(&DaemonSet) -> Option<CurrentRevision>,
    /// Rollgate deleted the pod of this DaemonSet (UID) on this node and has not seen
    /// the node settled since (`Expectations::has_vacated`).
    pub vacated_by_us: &'a dyn Fn(&str, &str) -> bool,
    /// Rollgate issued the deletion of this pod (DaemonSet UID, pod UID) and has not
    /// seen it land (`Expectations::deletion_expected`).
    pub deletion_expected: &'a dyn Fn(&str, &str) -> bool,
    pub now: Timestamp,
}

/// The DaemonSets a node change re-plans: `before` is the node as the store held it
/// (`None` when new to the store or resent by a relist), `after` as it holds it now
/// (`None` once deleted).
///
/// Only AdvancedRollingUpdate DaemonSets read nodes (OTA marks pods whatever their
/// node; unmanaged and invalid ones plan nothing), and a plan reads of a node only its
/// Ready status (the time it turned is compared too: a flap shorter than a watch
/// round-trip shows only there), and, while it is Ready, whether the DaemonSet places a pod there (labels,
/// taints) and its labels for `rollgate.io/node-selector`. So a DaemonSet is re-planned
/// when
/// - the node appears, goes, or its Ready status or time changes, and the DaemonSet has
///   a pod there (`pods`: terminating or pending for it included), should have one
///   there before or after, or had its pod there deleted by rollgate (`vacated_by_us`);
/// - the node is Ready before and after, and a label or taint change moves it into or
///   out of the DaemonSet's placement, or (a pod there) into or out of the rollout's
///   `rollgate.io/node-selector`;
/// - except, in both cases, when the node stays (before and after known) and the
///   DaemonSet's pods there are one pod that serves the current revision
///   ([`serves_current`]): the plan then counts the node as done whether it is Ready or
///   not, placed or not, selected or not, so no decision of it can move (the property
///   test `a_node_change_the_fast_path_skips_changes_no_decision` in
///   `rolling_plan/proptests.rs` checks this against full plans). This is the common
///   case of a flapping edge fleet: every DaemonSet on the node is done there, and
///   re-planning each over every node was the cost of a flap (issue 25). Only the
///   `nodes_skipped_not_ready` gauge, which counts such a node while it is NotReady,
///   waits for the DaemonSet's next plan (a pod event or the resync).
///
/// A NotReady node's taints and labels are read by no plan: the node lifecycle
/// controller's taints during a flap re-plan nothing. A trigger lost anyway (a watch
/// gap) is caught by the controller's periodic resync.
pub fn daemonsets_for_node<N: NodeFacts>(
    before: Option<&N>,
    after: Option<&N>,
    daemonsets: &[Arc<DaemonSet>],
    view: &NodeTriggerView,
) -> Vec<ObjectRef<DaemonSet>> {
    let Some(node) = after.or(before).map(|n| n.name()) else {
        return Vec::new();
    };
    let ready_moved = match (before, after) {
        (Some(b), Some(a)) => b.ready_condition() != a.ready_condition(),
        _ => true,
    };
    let both_ready = before.is_some_and(|n| n.is_ready()) && after.is_some_and(|n| n.is_ready());
    if !ready_moved && !both_ready {
        return Vec::new();
    }
    let node_stays = before.is_some() && after.is_some();
    daemonsets
        .iter()
        .filter(|ds| {
            let PolicyDecision::Managed(Policy::AdvancedRollingUpdate {
                node_selector,
                waves,
                ..
            }) = policy_for(ds)
            else {
                return false;
            };
            let uid = ds.metadata.uid.as_deref().unwrap_or_default();
            let placed_before = before.is_some_and(|n| should_run_on(ds, n));
            let placed_after = after.is_some_and(|n| should_run_on(ds, n));
            let there = || view.pods.has_pod_on(uid, node) || (view.vacated_by_us)(uid, node);
            let mut due = if ready_moved {
                placed_before || placed_after || there()
            } else {
                // Relabelled into or out of the selector, or into another wave.
                let selected = |n: Option<&N>| {
                    let by_selector = node_selector
                        .as_ref()
                        .map(|s| n.is_some_and(|n| s.matches(n)));
                    let wave = waves.as_ref().map(|w| n.and_then(|n| w.wave_of(n)));
                    (by_selector, wave)
                };
                placed_before != placed_after || (selected(before) != selected(after) && there())
            };
            // The fast path, last: it reads the pods there and the current revision.
            if due && node_stays && !(view.vacated_by_us)(uid, node) {
                let pods = view.pods.pods_on(uid, node);
                if !pods.is_empty() && generation_observed(ds) {
                    let current = (view.current)(ds);
                    let expected = |pod: &str| (view.deletion_expected)(uid, pod);
                    due = !serves_current(ds, &pods, current.as_ref(), &expected, view.now);
                }
            }
            due
        })
        .map(|ds| ObjectRef::from_obj(&**ds))
        .collect()
}

/// Whether `pods`, the DaemonSet's pods on one node, are exactly one pod that serves the
/// current revision as the rolling plan counts it: in the DaemonSet's namespace, live
/// (not terminating, no deletion of it in flight), up to date, and available at `now`
/// (so at any later time). The plan counts such a node as done whatever the node
/// shows: Ready, it is updated; NotReady, it holds no old pod; and it is never a
/// candidate, unavailable, unplaced, held back or vacated. `current` is `None`
/// while the revision is unknown (then nothing is up to date).
pub fn serves_current<P: PodFacts>(
    ds: &DaemonSet,
    pods: &[Arc<P>],
    current: Option<&CurrentRevision>,
    deletion_expected: &dyn Fn(&str) -> bool,
    now: Timestamp,
) -> bool {
    let (Some(current), [pod]) = (current, pods) else {
        return false;
    };
    let min_ready = ds.spec.min_ready_seconds.unwrap_or(0);
    pod.metadata().namespace == ds.metadata.namespace
        && !pod.is_terminating()
        && !deletion_expected(pod.pod_uid())
        && current.is_pod_updated(&**pod)
        && is_available(&**pod, min_ready, now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::CachedPod;
    use crate::testkit::{at, node, tainted, DaemonSetBuilder, PodBuilder};
    use k8s_openapi::api::apps::v1::DaemonSetStatus;
    use k8s_openapi::api::core::v1::{Node, Pod, PodCondition, Taint};

    fn status(ds: &mut DaemonSet, ready: i32, observed: i64) {
        ds.status = Some(DaemonSetStatus {
            number_ready: ready,
            observed_generation: Some(observed),
            ..Default::default()
        });
    }

    fn labelled(name: &str, ready: bool, labels: &[(&str, &str)]) -> Node {
        let mut n = node(name, ready);
        n.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        n
    }

    fn rolling(name: &str) -> DaemonSetBuilder {
        DaemonSetBuilder::new(name)
            .strategy("AdvancedRollingUpdate")
            .on_delete()
    }

    /// Placed only on nodes labelled `zone=<zone>`.
    fn zoned(name: &str, zone: &str) -> DaemonSet {
        let mut ds = rolling(name).build();
        ds.spec.template.spec.get_or_insert_default().node_selector =
            Some([("zone".to_string(), zone.to_string())].into());
        ds
    }

    /// A node change -> the DaemonSets it re-plans, over one fleet: `rolling`,
    /// `selective` (`rollgate.io/node-selector: pool=edge`), `ota` and `plain`
    /// (unmanaged) each have a pod on n1; `pinned` is placed on `zone=a` nodes and has
    /// no pod yet; `emptied` (placed on `zone=b`) had its pod on n3 deleted by rollgate.
    #[test]
    fn a_node_change_replans_only_the_daemonsets_it_can_matter_to() {
        let fleet = [
            rolling("rolling").build(),
            rolling("selective").node_selector("pool=edge").build(),
            DaemonSetBuilder::new("ota")
                .strategy("OTA")
                .on_delete()
                .build(),
            DaemonSetBuilder::new("plain").on_delete().build(),
            zoned("pinned", "a"),
            zoned("emptied", "b"),
        ]
        .map(Arc::new);
        let pods: Vec<Arc<CachedPod>> = ["rolling", "selective", "ota", "plain"]
            .iter()
            .zip(&fleet)
            .map(|(name, ds)| {
                Arc::new(CachedPod::from(
                    PodBuilder::new(&format!("{name}-n1"), ds)
                        .on_node("n1")
                        .build(),
                ))
            })
            .collect();
        let index = PodsByOwner::of(&pods);
        let vacated = |ds: &str, node: &str| ds == "uid-ds-emptied" && node == "n3";
        let unreachable = Taint {
            key: "node.kubernetes.io/unreachable".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        let mut renamed = labelled("n1", true, &[]);
        renamed.metadata.resource_version = Some("9".into());
        renamed.metadata.annotations = Some([("note".to_string(), "x".to_string())].into());

        let n1 = labelled("n1", true, &[]);
        // (case, node before, node after, DaemonSets re-planned)
        type Case<'a> = (&'a str, Option<Node>, Option<Node>, &'a [&'a str]);
        let cases: Vec<Case> = vec![
            (
                "n1 goes NotReady",
                Some(n1.clone()),
                Some(labelled("n1", false, &[])),
                &["rolling", "selective"],
            ),
            (
                "n1 comes back",
                Some(labelled("n1", false, &[])),
                Some(n1.clone()),
                &["rolling", "selective"],
            ),
            (
                "a write no plan reads",
                Some(n1.clone()),
                Some(renamed),
                &[],
            ),
            (
                "a NotReady node's taint (the lifecycle controller's)",
                Some(labelled("n1", false, &[])),
                Some(tainted(labelled("n1", false, &[]), unreachable.clone())),
                &[],
            ),
            (
                "a Ready node tainted out of plain placement",
                Some(n1.clone()),
                Some(tainted(n1.clone(), unreachable)),
                &["rolling", "selective"],
            ),
            (
                "relabelled into a placement",
                Some(n1.clone()),
                Some(labelled("n1", true, &[("zone", "a")])),
                &["pinned"],
            ),
            (
                "relabelled to match rollgate.io/node-selector",
                Some(n1.clone()),
                Some(labelled("n1", true, &[("pool", "edge")])),
                &["selective"],
            ),
            (
                "relabelled, no selector or placement moved",
                Some(n1.clone()),
                Some(labelled("n1", true, &[("team", "x")])),
                &[],
            ),
            (
                "n1 deleted",
                Some(n1.clone()),
                None,
                &["rolling", "selective"],
            ),
            (
                "n1 listed again",
                None,
                Some(n1.clone()),
                &["rolling", "selective"],
            ),
            (
                "a node with no pod, where two would run, flaps",
                Some(labelled("n2", true, &[])),
                Some(labelled("n2", false, &[])),
                &["rolling", "selective"],
            ),
            (
                "a node rollgate emptied, no longer placed, flaps",
                Some(labelled("n3", true, &[])),
                Some(labelled("n3", false, &[])),
                &["rolling", "selective", "emptied"],
            ),
        ];
        // No revision known: the fast path never applies here (see the next test).
        let view = NodeTriggerView {
            pods: &index,
            current: &|_: &DaemonSet| None,
            vacated_by_us: &vacated,
            deletion_expected: &|_: &str, _: &str| false,
            now: at(0),
        };
        for (case, before, after, expected) in cases {
            let due = daemonsets_for_node(before.as_ref(), after.as_ref(), &fleet, &view);
            let mut names: Vec<&str> = due.iter().map(|r| r.name.as_str()).collect();
            names.sort();
            let mut expected = expected.to_vec();
            expected.sort();
            assert_eq!(names, expected, "{case}");
        }
    }

    /// A node relabelled into another wave of `rollgate.io/waves` re-plans its
    /// DaemonSet; a label no wave reads does not.
    #[test]
    fn a_node_relabelled_into_another_wave_replans_its_daemonset() {
        let ds = rolling("waved").waves("pool=canary; *").build();
        let fleet = [Arc::new(ds.clone())];
        let pods = vec![Arc::new(CachedPod::from(
            PodBuilder::new("waved-n1", &ds).on_node("n1").build(),
        ))];
        let index = PodsByOwner::of(&pods);
        let view = NodeTriggerView {
            pods: &index,
            current: &|_: &DaemonSet| None,
            vacated_by_us: &|_: &str, _: &str| false,
            deletion_expected: &|_: &str, _: &str| false,
            now: at(0),
        };
        let n1 = labelled("n1", true, &[]);
        let due = |after: Node| daemonsets_for_node(Some(&n1), Some(&after), &fleet, &view).len();
        assert_eq!(due(labelled("n1", true, &[("pool", "canary")])), 1);
        assert_eq!(due(labelled("n1", true, &[("team", "x")])), 0);
    }

    /// The fast path: a node whose only pod of the DaemonSet serves the current
    /// revision is done in every plan, Ready or not. Each row changes one thing from
    /// that and must re-plan again.
    #[test]
    fn a_node_whose_pod_serves_the_current_revision_replans_nothing() {
        let ds = rolling("agent").min_ready_seconds(30).build();
        let fleet = [Arc::new(ds.clone())];
        let current = CurrentRevision {
            hash: Some("new".into()),
            template_generation: None,
        };
        let pod = |hash: &str| {
            PodBuilder::new("agent-n1", &ds)
                .hash(hash)
                .on_node("n1")
                .ready_since(at(0))
        };
        let n1 = labelled("n1", true, &[]);
        let n1_down = labelled("n1", false, &[]);
        // (case, the pods on n1, revision known, deletion in flight, vacated,
        //  observed generation, seconds since the pod turned Ready, node deleted,
        //  re-planned)
        type Row<'a> = (&'a str, Vec<Pod>, bool, bool, bool, bool, i64, bool, bool);
        let rows: Vec<Row> = vec![
            (
                "serves the current revision",
                vec![pod("new").build()],
                true,
                false,
                false,
                true,
                60,
                false,
                false,
            ),
            (
                "out of date",
                vec![pod("old").build()],
                true,
                false,
                false,
                true,
                60,
                false,
                true,
            ),
            (
                "revision unknown",
                vec![pod("new").build()],
                false,
                false,
                false,
                true,
                60,
                false,
                true,
            ),
            (
                "not Ready",
                vec![PodBuilder::new("agent-n1", &ds)
                    .hash("new")
                    .on_node("n1")
                    .not_ready()
                    .build()],
                true,
                false,
                false,
                true,
                60,
                false,
                true,
            ),
            (
                "within minReadySeconds",
                vec![pod("new").build()],
                true,
                false,
                false,
                true,
                10,
                false,
                true,
            ),
            (
                "terminating",
                vec![pod("new").terminating(at(1)).build()],
                true,
                false,
                false,
                true,
                60,
                false,
                true,
            ),
            (
                "its deletion in flight",
                vec![pod("new").build()],
                true,
                true,
                false,
                true,
                60,
                false,
                true,
            ),
            (
                "rollgate vacated the node",
                vec![pod("new").build()],
                true,
                false,
                true,
                true,
                60,
                false,
                true,
            ),
            (
                "the native controller behind",
                vec![pod("new").build()],
                true,
                false,
                false,
                false,
                60,
                false,
                true,
            ),
            (
                "the node deleted",
                vec![pod("new").build()],
                true,
                false,
                false,
                true,
                60,
                true,
                true,
            ),
            (
                "two pods there",
                vec![
                    pod("new").build(),
                    PodBuilder::new("agent-n1-b", &ds)
                        .hash("new")
                        .on_node("n1")
                        .ready_since(at(0))
                        .build(),
                ],
                true,
                false,
                false,
                true,
                60,
                false,
                true,
            ),
        ];
        for (case, pods, known, in_flight, vacated, observed, since, deleted, replans) in rows {
            let fleet = if observed {
                fleet.clone()
            } else {
                [Arc::new(
                    rolling("agent")
                        .min_ready_seconds(30)
                        .generations(2, 1)
                        .build(),
                )]
            };
            let pods: Vec<Arc<CachedPod>> = pods
                .into_iter()
                .map(|p| Arc::new(CachedPod::from(p)))
                .collect();
            let index = PodsByOwner::of(&pods);
            let revision = |_: &DaemonSet| known.then(|| current.clone());
            let view = NodeTriggerView {
                pods: &index,
                current: &revision,
                vacated_by_us: &|_: &str, _: &str| vacated,
                deletion_expected: &|_: &str, _: &str| in_flight,
                now: at(since),
            };
            let flaps = [(Some(&n1), Some(&n1_down)), (Some(&n1_down), Some(&n1))];
            for (before, after) in flaps {
                let after = if deleted { None } else { after };
                let due = daemonsets_for_node(before, after, &fleet, &view);
                assert_eq!(!due.is_empty(), replans, "{case}");
            }
        }
    }

    /// Item 6 of issue 25: an unmanaged DaemonSet's pod traffic reconciles nothing,
    /// except the one write its reconcile acts on (a left-over `PodNeedUpgrade`).
    #[test]
    fn only_managed_daemonsets_and_left_over_conditions_replan_on_pod_writes() {
        let fleet = [
            rolling("rolling").build(),
            DaemonSetBuilder::new("ota")
                .strategy("OTA")
                .on_delete()
                .build(),
            DaemonSetBuilder::new("plain").on_delete().build(),
            // OTA asked, but the native controller rolls it: not ours.
            DaemonSetBuilder::new("native")
                .strategy("OTA")
                .update_strategy_type("RollingUpdate")
                .build(),
            DaemonSetBuilder::new("typo")
                .strategy("AdvancedRolling")
                .on_delete()
                .build(),
        ];
        let owner = |name: &str| {
            fleet
                .iter()
                .find(|ds| ds.metadata.name.as_deref() == Some(name))
                .cloned()
                .map(Arc::new)
        };
        let marked = PodCondition {
            type_: POD_NEED_UPGRADE_CONDITION.into(),
            status: "True".into(),
            ..Default::default()
        };
        // (owner, the pod carries PodNeedUpgrade, reconciles)
        let rows = [
            ("rolling", false, true),
            ("ota", false, true),
            ("plain", false, false),
            ("plain", true, true),
            ("native", false, false),
            ("native", true, true),
            ("typo", false, false),
            ("typo", true, false),
        ];
        for (name, with_condition, replans) in rows {
            let ds = owner(name).unwrap();
            let mut pod = PodBuilder::new(&format!("{name}-a"), &ds).on_node("n1");
            if with_condition {
                pod = pod.with_condition(marked.clone());
            }
            let pod = CachedPod::from(pod.build());
            assert_eq!(
                pod_replans_owner(&pod, &owner),
                replans,
                "{name}, PodNeedUpgrade: {with_condition}"
            );
        }
        // Its owner not (yet) in the store: nothing to reconcile.
        let ds = rolling("gone").build();
        let orphan = CachedPod::from(PodBuilder::new("gone-a", &ds).build());
        assert!(!pod_replans_owner(&orphan, &owner));
    }

    #[test]
    fn daemonset_status_counts_are_not_seen_but_observed_generation_is() {
        let mut before = DaemonSetBuilder::new("edge").build();
        status(&mut before, 3, 1);
        let mut after = before.clone();
        after.metadata.resource_version = Some("99".into());
        status(&mut after, 4, 1);
        assert!(daemonset_unchanged(&before, &after), "only counts moved");

        let mut observed = after.clone();
        status(&mut observed, 4, 2);
        assert!(
            !daemonset_unchanged(&after, &observed),
            "observedGeneration"
        );

        let mut annotated = after.clone();
        annotated
            .metadata
            .annotations
            .get_or_insert_default()
            .insert("apps.openyurt.io/max-unavailable".into(), "5".into());
        assert!(!daemonset_unchanged(&after, &annotated), "annotations");

        let mut template = after.clone();
        template.spec.min_ready_seconds = Some(5);
        assert!(!daemonset_unchanged(&after, &template), "spec");
    }

    /// The writes a rollout makes to one pod, as the API server sends them: which of
    /// them re-plan.
    /// The kubelet saying a container cannot start re-plans (a halt may be due); a crash
    /// loop's next restart does not, nor a container only starting.
    #[test]
    fn a_container_that_cannot_start_replans_and_its_restarts_do_not() {
        let ds = DaemonSetBuilder::new("edge").build();
        let pod = || {
            PodBuilder::new("edge-a", &ds)
                .hash("new")
                .on_node("n1")
                .not_ready()
        };
        let creating = pod()
            .container("main", false, Some("ContainerCreating"), 0)
            .build();
        let crashing = |restarts| {
            pod()
                .container("main", false, Some("CrashLoopBackOff"), restarts)
                .build()
        };
        let running_between = |restarts| pod().container("main", false, None, restarts).build();
        assert!(
            !pod_unchanged(&creating, &crashing(1)),
            "CrashLoopBackOff replans"
        );
        assert!(
            pod_unchanged(&crashing(4), &crashing(5)),
            "a restart more does not"
        );
        assert!(
            !pod_unchanged(&running_between(2), &running_between(3)),
            "restarts reaching the threshold replan"
        );
        assert!(
            pod_unchanged(&running_between(0), &running_between(1)),
            "below the threshold, a restart is nothing to plan on"
        );
        assert!(
            pod_unchanged(&creating, &pod().container("main", false, None, 0).build()),
            "a container starting is nothing to plan on"
        );
    }

    #[test]
    fn of_a_pods_writes_only_creation_readiness_and_deletion_replan() {
        let ds = DaemonSetBuilder::new("edge").build();
        let pod = || {
            PodBuilder::new("edge-a", &ds)
                .hash("new")
                .pending_for_node("n1")
        };
        let created = pod().build();
        let bound = pod().on_node("n1").build();
        let containers = |status: &str| PodCondition {
            type_: "ContainersReady".into(),
            status: status.into(),
            ..Default::default()
        };
        // As a kubelet first writes it: Ready=False, with the time it turned so.
        let mut started = pod()
            .on_node("n1")
            .with_condition(PodCondition {
                type_: "Ready".into(),
                status: "False".into(),
                reason: Some("ContainersNotReady".into()),
                last_transition_time: Some(Time(at(50))),
                ..Default::default()
            })
            .with_condition(containers("False"))
            .build();
        let status = started.status.get_or_insert_default();
        status.pod_ip = Some("10.64.0.9".into());
        status.phase = Some("Running".into());
        let mut ready = pod()
            .on_node("n1")
            .ready_since(at(100))
            .with_condition(containers("True"))
            .build();
        ready.status.get_or_insert_default().pod_ip = Some("10.64.0.9".into());
        let marked = Pod {
            metadata: ObjectMeta {
                deletion_timestamp: Some(Time(at(200))),
                ..ready.metadata.clone()
            },
            ..ready.clone()
        };
        let need_upgrade = pod()
            .on_node("n1")
            .ready_since(at(100))
            .with_condition(PodCondition {
                type_: POD_NEED_UPGRADE_CONDITION.into(),
                status: "True".into(),
                ..Default::default()
            })
            .build();

        let steps = [
            ("bound to its node", &created, &bound, false),
            ("started, not Ready", &bound, &started, false),
            ("Ready", &started, &ready, true),
            ("marked for deletion", &ready, &marked, true),
            ("PodNeedUpgrade written", &ready, &need_upgrade, true),
        ];
        for (step, before, after, replans) in steps {
            let before = CachedPod::from(before.clone());
            let after = CachedPod::from(after.clone());
            assert_eq!(!pod_unchanged(&before, &after), replans, "{step}");
        }
    }

    /// The pod events reach their DaemonSet from a cached pod too, whose metadata has no
    /// owner references (kube-runtime's `owns` would find none: issue 46's first try).
    #[test]
    fn a_cached_pod_maps_to_the_daemonset_that_owns_it() {
        let ds = DaemonSetBuilder::new("edge").build();
        let full = PodBuilder::new("edge-a", &ds).on_node("n1").build();
        let cached = CachedPod::from(full.clone());
        let want = vec![ObjectRef::<DaemonSet>::new("edge").within(full.pod_namespace())];
        assert_eq!(daemonset_owners(&full), want);
        assert_eq!(daemonset_owners(&cached), want);
        let mut orphan = full;
        orphan.metadata.owner_references = None;
        assert!(daemonset_owners(&CachedPod::from(orphan)).is_empty());
    }

    /// After a cut: the node-lifecycle controller's Ready=False and the kubelet's own
    /// report once the node is back differ only in when the status turned, which no
    /// plan reads: a returning node's pod is replaced within the budget either way.
    #[test]
    fn a_not_ready_status_rewritten_after_a_comeback_replans_nothing() {
        let ds = DaemonSetBuilder::new("edge").build();
        let not_ready_since = |since: i64, reason: &str| {
            CachedPod::from(
                PodBuilder::new("edge-a", &ds)
                    .hash("old")
                    .on_node("n1")
                    .with_condition(PodCondition {
                        type_: "Ready".into(),
                        status: "False".into(),
                        reason: Some(reason.into()),
                        last_transition_time: Some(Time(at(since))),
                        ..Default::default()
                    })
                    .build(),
            )
        };
        let marked_during_cut = not_ready_since(100, "NodeNotReady");
        let reported_after = not_ready_since(300, "ContainersNotReady");
        let reworded = not_ready_since(100, "ContainersNotReady");
        assert!(pod_unchanged(&marked_during_cut, &reported_after));
        assert!(pod_unchanged(&marked_during_cut, &reworded));
        // Turning Ready does replan: it frees the node.
        let ready = CachedPod::from(
            PodBuilder::new("edge-a", &ds)
                .hash("old")
                .on_node("n1")
                .ready_since(at(300))
                .build(),
        );
        assert!(!pod_unchanged(&marked_during_cut, &ready));
    }
}
