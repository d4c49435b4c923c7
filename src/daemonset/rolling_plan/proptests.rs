//! Property tests: for any generated cluster state, the plan respects the budget and
//! only ever deletes live, out-of-date pods of this DaemonSet on Ready nodes.
//!
//! Both shapes users deploy are generated: DaemonSets that tolerate every taint (edge
//! agents, CNI) and ones that tolerate none. NotReady nodes carry the unreachable taints
//! the node-lifecycle controller sets; some Ready nodes carry a `dedicated` taint.
//!
//! Three revisions are in play (a template changed twice), nodes may be back from a
//! cut with pod status written before their return, and some nodes are remembered as
//! ones rollgate replaced a pod on.
//!
//! States are generated as a small model, turned into Kubernetes objects with the test
//! builders, and the expected counts are recomputed from the model (an oracle that does
//! not share code with the planner).

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;
use crate::names::CONTROLLER_REVISION_HASH_LABEL;
use crate::object::{is_controlled_by, PodFacts};
use crate::testkit::{at, node, revision, tainted, DaemonSetBuilder, PodBuilder};
use k8s_openapi::api::core::v1::{PodCondition, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

const NOW: i64 = 1_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NodeState {
    Ready,
    NotReady,
    Missing,
}

#[derive(Debug, Clone)]
struct ModelPod {
    updated: bool,
    /// Out of date by two templates (`older`) rather than one (`old`).
    two_behind: bool,
    ready: bool,
    /// Not Ready since before its node came back (marked by the node-lifecycle
    /// controller during a cut); otherwise a not-Ready pod has no transition time.
    marked_while_cut: bool,
    ready_long_ago: bool,
    terminating: bool,
    deletion_expected: bool,
    owned_by_other_daemonset: bool,
    pending_by_affinity: bool,
}

#[derive(Debug, Clone)]
struct ModelNode {
    state: NodeState,
    /// A `dedicated=edge:NoSchedule` taint (only a tolerate-everything DaemonSet runs here).
    dedicated: bool,
    /// Ready again for 10 s after a cut: its pods may still read the status the
    /// node-lifecycle controller wrote during it (`ModelPod::marked_while_cut`).
    back_recently: bool,
    /// In `vacated_by_us`: rollgate deleted a pod here and saw no available one since.
    replaced_by_us: bool,
    pods: Vec<ModelPod>,
}

#[derive(Debug, Clone)]
struct Model {
    nodes: Vec<ModelNode>,
    max_unavailable: MaxUnavailable,
    min_ready_seconds: i32,
    rotate_pods_by: usize,
    tolerate_everything: bool,
    max_deletions_per_plan: usize,
}

fn model_pod() -> impl Strategy<Value = ModelPod> {
    (
        (any::<bool>(), any::<bool>()),
        (prop::bool::weighted(0.8), any::<bool>()),
        any::<bool>(),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.2),
    )
        .prop_map(
            |(
                (updated, two_behind),
                (ready, marked_while_cut),
                ready_long_ago,
                terminating,
                deletion_expected,
                owned_by_other_daemonset,
                pending_by_affinity,
            )| ModelPod {
                updated,
                two_behind,
                ready,
                marked_while_cut,
                ready_long_ago,
                terminating,
                deletion_expected,
                owned_by_other_daemonset,
                pending_by_affinity,
            },
        )
}

fn model_node() -> impl Strategy<Value = ModelNode> {
    let state = prop_oneof![
        3 => Just(NodeState::Ready),
        1 => Just(NodeState::NotReady),
        1 => Just(NodeState::Missing),
    ];
    let pods = prop_oneof![
        1 => Just(0usize),
        6 => Just(1usize),
        2 => 2usize..=3,
    ]
    .prop_flat_map(|count| prop::collection::vec(model_pod(), count));
    (
        state,
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.2),
        pods,
    )
        .prop_map(
            |(state, dedicated, back_recently, replaced_by_us, pods)| ModelNode {
                state,
                dedicated,
                back_recently,
                replaced_by_us,
                pods,
            },
        )
}

fn model() -> impl Strategy<Value = Model> {
    let max_unavailable = prop_oneof![
        (1u32..=12).prop_map(MaxUnavailable::Count),
        (1u8..=100).prop_map(MaxUnavailable::Percent),
    ];
    (
        prop::collection::vec(model_node(), 0..10),
        max_unavailable,
        prop_oneof![Just(0), Just(30)],
        0usize..16,
        any::<bool>(),
        prop_oneof![
            Just(RollingLimits::DEFAULT_MAX_DELETIONS_PER_PLAN),
            1usize..=3
        ],
    )
        .prop_map(
            |(
                nodes,
                max_unavailable,
                min_ready_seconds,
                rotate_pods_by,
                tolerate_everything,
                max_deletions_per_plan,
            )| {
                Model {
                    nodes,
                    max_unavailable,
                    min_ready_seconds,
                    rotate_pods_by,
                    tolerate_everything,
                    max_deletions_per_plan,
                }
            },
        )
}

/// n0, n3, n6.. are in pool a, n1, n4.. in pool b, the rest have no pool label.
fn pool_of(index: usize) -> Option<&'static str> {
    [Some("a"), Some("b"), None][index % 3]
}

/// Whether a node of this pool (or none) matches, written out by hand.
type PoolTest = fn(Option<&str>) -> bool;

/// Node selectors the controls property draws from, with the same test written out.
const SELECTORS: &[(&str, PoolTest)] = &[
    ("pool=a", |pool| pool == Some("a")),
    ("pool in (a,b)", |pool| pool.is_some()),
    ("!pool", |pool| pool.is_none()),
    ("pool!=b", |pool| pool != Some("b")),
];

fn node_name(index: usize) -> String {
    format!("n{index}")
}

fn pod_uid(node_index: usize, pod_index: usize) -> String {
    format!("uid-n{node_index}-p{pod_index}")
}

fn taint(key: &str, effect: &str) -> Taint {
    Taint {
        key: key.into(),
        value: Some("edge".into()),
        effect: effect.into(),
        ..Default::default()
    }
}

fn to_input(model: &Model) -> OwnedInput {
    let mut builder = DaemonSetBuilder::new("agent")
        .on_delete()
        .min_ready_seconds(model.min_ready_seconds);
    if model.tolerate_everything {
        builder = builder.tolerate_everything();
    }
    let ds = builder.build();
    let revisions = vec![
        revision(&ds, "older", 1),
        revision(&ds, "old", 2),
        revision(&ds, "new", 3),
    ];
    let mut pods = Vec::new();
    let mut nodes = Vec::new();
    let mut expected_deletions = BTreeSet::new();
    let mut vacated_by_us = BTreeMap::new();
    for (node_index, model_node) in model.nodes.iter().enumerate() {
        let name = node_name(node_index);
        if model_node.replaced_by_us {
            vacated_by_us.insert(name.clone(), format!("uid-deleted-{name}"));
        }
        let mut made = match model_node.state {
            NodeState::Ready if model_node.back_recently => Some(back_since(&name, NOW - 10)),
            NodeState::Ready => Some(node(&name, true)),
            NodeState::NotReady => Some(tainted(
                tainted(
                    node(&name, false),
                    taint("node.kubernetes.io/unreachable", "NoSchedule"),
                ),
                taint("node.kubernetes.io/unreachable", "NoExecute"),
            )),
            NodeState::Missing => None,
        };
        if model_node.dedicated {
            made = made.map(|n| tainted(n, taint("dedicated", "NoSchedule")));
        }
        // Pools for the node selector property; nothing else reads node labels here.
        if let Some(pool) = pool_of(node_index) {
            made = made.map(|mut n| {
                n.metadata.labels = Some([("pool".to_string(), pool.to_string())].into());
                n
            });
        }
        nodes.extend(made.map(Arc::new));
        for (pod_index, p) in model_node.pods.iter().enumerate() {
            let hash = match (p.updated, p.two_behind) {
                (true, _) => "new",
                (false, false) => "old",
                (false, true) => "older",
            };
            let mut builder =
                PodBuilder::new(&format!("n{node_index}-p{pod_index}"), &ds).hash(hash);
            builder = if p.pending_by_affinity {
                builder.pending_for_node(&name)
            } else {
                builder.on_node(&name)
            };
            builder = if p.ready {
                builder.ready_since(at(if p.ready_long_ago {
                    NOW - 3600
                } else {
                    NOW - 5
                }))
            } else if p.marked_while_cut {
                builder.with_condition(PodCondition {
                    type_: "Ready".into(),
                    status: "False".into(),
                    last_transition_time: Some(Time(at(NOW - 100))),
                    ..Default::default()
                })
            } else {
                builder.not_ready()
            };
            if p.terminating {
                builder = builder.terminating(at(NOW - 1));
            }
            if p.owned_by_other_daemonset {
                builder = builder.owned_by_uid("uid-ds-other");
            }
            if p.deletion_expected {
                expected_deletions.insert(pod_uid(node_index, pod_index));
            }
            pods.push(Arc::new(builder.build()));
        }
    }
    if !pods.is_empty() {
        let by = model.rotate_pods_by % pods.len();
        pods.rotate_left(by);
    }
    OwnedInput {
        current: CurrentRevision::of(&ds, &revisions),
        now: at(NOW),
        ds,
        pods,
        nodes,
        max_unavailable: model.max_unavailable,
        expected_deletions,
        vacated_by_us,
        limits: RollingLimits {
            max_deletions_per_plan: model.max_deletions_per_plan,
        },
        partition: None,
        node_selector: None,
        waves: None,
        proving: None,
    }
}

/// A Ready node whose Ready condition turned True at `since`.
fn back_since(name: &str, since: i64) -> Node {
    let mut back = node(name, true);
    if let Some(ready) = back
        .status
        .as_mut()
        .and_then(|s| s.conditions.as_mut())
        .and_then(|cs| cs.first_mut())
    {
        ready.last_transition_time = Some(Time(at(since)));
    }
    back
}

/// What the spec says about a model, computed directly from it.
struct Oracle {
    /// The percentage base.
    base: usize,
    budget: usize,
    unavailable: usize,
    /// Old available pods alone on a Ready node, in node order.
    candidates: Vec<String>,
    /// Old pods alone on a Ready node, not available, on a node not counted yet
    /// (replacing one spends budget), in node order.
    old_not_available: Vec<String>,
    /// The same on nodes rollgate replaced a pod on: counted already, replaced freely.
    replaced_not_available: Vec<String>,
    /// Pods that may be deleted at all: live, ours, old, on a Ready node.
    deletable: BTreeSet<String>,
    on_skipped_nodes: BTreeSet<String>,
}

// The rounding is written out so the oracle does not reuse the planner's formula.
#[allow(clippy::manual_div_ceil)]
fn oracle(model: &Model) -> Oracle {
    let mut base = 0usize;
    let mut unavailable = 0;
    let mut candidates = Vec::new();
    let mut old_not_available = Vec::new();
    let mut replaced_not_available = Vec::new();
    let mut deletable = BTreeSet::new();
    let mut on_skipped_nodes = BTreeSet::new();
    for (node_index, model_node) in model.nodes.iter().enumerate() {
        let ours: Vec<(usize, &ModelPod)> = model_node
            .pods
            .iter()
            .enumerate()
            .filter(|(_, p)| !p.owned_by_other_daemonset)
            .collect();
        // Whether the DaemonSet places a pod on this node.
        let targeted = model.tolerate_everything || !model_node.dedicated;
        if ours.is_empty() {
            // No pod in view on a Ready node the DaemonSet targets: vacated.
            if model_node.state == NodeState::Ready && (targeted || model_node.replaced_by_us) {
                base += 1;
                unavailable += 1;
            }
            continue;
        }
        // The base counts NotReady nodes, not nodes without a Node object.
        if model_node.state != NodeState::Missing {
            base += 1;
        }
        if model_node.state != NodeState::Ready {
            for pod_index in 0..model_node.pods.len() {
                on_skipped_nodes.insert(pod_uid(node_index, pod_index));
            }
            continue;
        }
        let live: Vec<(usize, &ModelPod)> = ours
            .into_iter()
            .filter(|(_, p)| !p.terminating && !p.deletion_expected)
            .collect();
        let available =
            |p: &ModelPod| p.ready && (model.min_ready_seconds == 0 || p.ready_long_ago);
        // Placement: a lone old pod where the DaemonSet no longer places one is kept, and
        // its node is out of the rollout.
        if let [(_, p)] = live.as_slice() {
            if !p.updated && !targeted {
                base -= 1;
                continue;
            }
        }
        for (pod_index, p) in &live {
            if !p.updated {
                deletable.insert(pod_uid(node_index, *pod_index));
            }
        }
        match live.as_slice() {
            [(_, p)] if p.updated => {
                if !available(p) {
                    unavailable += 1;
                }
            }
            [(pod_index, p)] => {
                let uid = pod_uid(node_index, *pod_index);
                let ours = model_node.replaced_by_us;
                // Marked not Ready during a cut or not: the same (`marked_while_cut`).
                if available(p) {
                    candidates.push(uid);
                } else if ours {
                    unavailable += 1;
                    replaced_not_available.push(uid);
                } else {
                    old_not_available.push(uid);
                }
            }
            _ => unavailable += 1,
        }
    }
    let budget = match model.max_unavailable {
        MaxUnavailable::Count(count) => (count as usize).min(base),
        MaxUnavailable::Percent(percent) => (base * percent as usize + 99) / 100,
    };
    Oracle {
        base,
        budget,
        unavailable,
        candidates,
        old_not_available,
        replaced_not_available,
        deletable,
        on_skipped_nodes,
    }
}

/// The nodes still on an old revision, by index: a live old pod of ours, on a Node that
/// exists, and not a lone old pod where the DaemonSet no longer places one.
fn old_node_indices(model: &Model) -> Vec<usize> {
    let mut old = Vec::new();
    for (index, n) in model.nodes.iter().enumerate() {
        if n.state == NodeState::Missing {
            continue;
        }
        let live: Vec<&ModelPod> = n
            .pods
            .iter()
            .filter(|p| !p.owned_by_other_daemonset && !p.terminating && !p.deletion_expected)
            .collect();
        let targeted = model.tolerate_everything || !n.dedicated;
        if n.state == NodeState::Ready && !targeted && matches!(live.as_slice(), [p] if !p.updated)
        {
            continue;
        }
        if live.iter().any(|p| !p.updated) {
            old.push(index);
        }
    }
    old
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3_000))]

    /// No node inside the partition, and no node the selector does not match, is ever
    /// chosen for deletion; the budget counts as without them; and the kept nodes are the
    /// documented ones (held-back nodes count first, then the first names).
    #[test]
    fn partition_and_selector_never_delete_on_the_nodes_they_hold(
        model in model(),
        partition in prop_oneof![
            Just(None),
            (0u32..=10).prop_map(|c| Some(Partition::Count(c))),
            (1u8..=100).prop_map(|p| Some(Partition::Percent(p))),
        ],
        selector in prop::option::of(0..SELECTORS.len()),
    ) {
        let mut owned = to_input(&model);
        let free = plan_rolling_update(&owned.input());
        owned.partition = partition.filter(|p| *p != Partition::Count(0));
        owned.node_selector =
            selector.map(|i| NodeSelector::parse(SELECTORS[i].0).unwrap());
        let plan = plan_rolling_update(&owned.input());
        let expected = oracle(&model);

        let old = old_node_indices(&model);
        let matches = |i: usize| selector.is_none_or(|s| (SELECTORS[s].1)(pool_of(i)));
        let held: Vec<String> =
            old.iter().filter(|&&i| !matches(i)).map(|&i| node_name(i)).collect();
        let admitted: Vec<String> =
            old.iter().filter(|&&i| matches(i)).map(|&i| node_name(i)).collect();
        let base = expected.base;
        let kept_count = match owned.partition {
            None => 0,
            Some(Partition::Count(c)) => (c as usize).min(base),
            Some(Partition::Percent(p)) => {
                let up = (base * p as usize).div_ceil(100);
                if p < 100 && base > 1 { up.min(base - 1) } else { up }
            }
        };
        let keep = kept_count.saturating_sub(held.len()).min(admitted.len());
        let kept = admitted[..keep].to_vec();

        prop_assert_eq!(&plan.progress.held_by_selector, &held);
        prop_assert_eq!(&plan.progress.kept_by_partition, &kept);
        for deletion in &plan.deletions {
            prop_assert!(
                !kept.contains(&deletion.node) && !held.contains(&deletion.node),
                "deleted on a held-back node {}: kept {:?}, held {:?}",
                deletion.node, kept, held
            );
        }
        prop_assert_eq!(plan.progress.budget, free.progress.budget);
        prop_assert_eq!(plan.progress.unavailable, free.progress.unavailable);
        prop_assert_eq!(plan.progress.total_nodes, free.progress.total_nodes);
        prop_assert!(plan.deletions.len() <= free.deletions.len());
        if !kept.is_empty() || !held.is_empty() {
            prop_assert!(!plan.is_complete());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    #[test]
    fn plan_respects_budget_and_only_deletes_live_old_pods_on_ready_nodes(model in model()) {
        let owned = to_input(&model);
        let input = owned.input();
        let plan = plan_rolling_update(&input);
        let expected = oracle(&model);

        prop_assert!(plan.progress.updated <= plan.progress.total_nodes);
        prop_assert!(plan.progress.ready_updated <= plan.progress.ready_nodes);
        if plan.is_complete() {
            prop_assert_eq!(plan.progress.updated, plan.progress.total_nodes);
        }
        if plan.progress.updated == plan.progress.total_nodes
            && plan.progress.missing_nodes_skipped.is_empty()
        {
            prop_assert!(plan.is_complete(), "{:?}", plan.progress);
        }
        prop_assert_eq!(plan.progress.budget, expected.budget);
        prop_assert_eq!(plan.progress.unavailable, expected.unavailable);

        let mut seen = BTreeSet::new();
        for deletion in &plan.deletions {
            prop_assert!(seen.insert(deletion.uid.clone()), "deleted twice: {}", deletion.uid);
            prop_assert!(
                !input.expected_deletions.contains(&deletion.uid),
                "deleted again while its deletion is in flight: {}", deletion.uid
            );
            prop_assert!(
                !expected.on_skipped_nodes.contains(&deletion.uid),
                "deleted on a NotReady or missing node: {}", deletion.uid
            );
            prop_assert!(
                expected.deletable.contains(&deletion.uid),
                "deleted a pod that is not a live old pod of ours on a Ready node: {}",
                deletion.uid
            );
        }

        // The budget rule: deletions that make one more node unavailable (old pods not
        // available on nodes not counted yet, then candidates) never go beyond what the
        // budget leaves, and go as far as it allows (the plan must make progress).
        // Old pods not available on counted nodes add no node and are all replaced.
        let allowed = expected.budget.saturating_sub(expected.unavailable);
        let spendable: Vec<&String> = expected
            .old_not_available
            .iter()
            .chain(&expected.candidates)
            .collect();
        let spent = &spendable[..allowed.min(spendable.len())];
        let mut not_available: Vec<(&String, DeletionReason)> = expected
            .replaced_not_available
            .iter()
            .chain(spent.iter().copied().filter(|uid| expected.old_not_available.contains(uid)))
            .map(|uid| (uid, DeletionReason::OldPodNotAvailable))
            .collect();
        // Pod uids start with their node's name, and node names sort like nodes.
        not_available.sort();
        let mut want: Vec<(&String, DeletionReason)> = not_available;
        want.extend(
            spent
                .iter()
                .copied()
                .filter(|uid| expected.candidates.contains(uid))
                .map(|uid| (uid, DeletionReason::RollingUpdate)),
        );
        // On top of the budget, the per-plan cap keeps the first ones.
        let deferred = want.len().saturating_sub(model.max_deletions_per_plan);
        want.truncate(model.max_deletions_per_plan);
        let got: Vec<(&String, DeletionReason)> =
            plan.deletions.iter().map(|d| (&d.uid, d.reason)).collect();
        prop_assert_eq!(got, want);
        prop_assert_eq!(plan.progress.deferred_by_cap, deferred);
    }
}

/// Per pod: bind a pending pod, write an IP and phase, write container readiness, and
/// a number that picks the rest.
type Noise = (bool, bool, bool, u8);

/// A pod after writes the kubelet, the scheduler and the API server make that no
/// planner reads (`triggers::PlannedPod` leaves them out).
fn unseen_writes(pod: &Pod, (bind, ip, containers, n): Noise) -> Pod {
    let mut pod = pod.clone();
    pod.metadata.resource_version = Some(n.to_string());
    pod.metadata
        .annotations
        .get_or_insert_default()
        .insert("noise".into(), n.to_string());
    let node = pod.node_or_affinity_node().map(str::to_string);
    let spec = pod.spec.get_or_insert_default();
    if bind && spec.node_name.is_none() {
        spec.node_name = node;
    }
    let status = pod.status.get_or_insert_default();
    if ip {
        status.pod_ip = Some(format!("10.64.0.{n}"));
        status.phase = Some(if n % 2 == 0 { "Running" } else { "Pending" }.into());
    }
    if containers {
        status.container_statuses = Some(vec![k8s_openapi::api::core::v1::ContainerStatus {
            name: "main".into(),
            ready: n % 2 == 0,
            ..Default::default()
        }]);
    }
    let conditions = status.conditions.get_or_insert_default();
    if containers {
        conditions.push(PodCondition {
            type_: "ContainersReady".into(),
            status: if n % 3 == 0 { "True" } else { "False" }.into(),
            ..Default::default()
        });
    }
    let ready = conditions.iter().position(|c| c.type_ == "Ready");
    if ready.is_none() && n % 5 == 0 {
        // A kubelet's first status of a pod it started (`pod_unchanged`).
        conditions.push(PodCondition {
            type_: "Ready".into(),
            status: "False".into(),
            reason: Some("ContainersNotReady".into()),
            last_transition_time: Some(Time(at(NOW))),
            ..Default::default()
        });
    }
    if let Some(ready) = ready {
        if conditions[ready].status == "True" {
            conditions[ready].message = Some(format!("noise {n}"));
        } else {
            // Not Ready looks the same whether False, Unknown or not written yet, and
            // whenever it turned so.
            match n % 3 {
                0 => drop(conditions.remove(ready)),
                1 => conditions[ready].status = "Unknown".into(),
                _ => {
                    conditions[ready].reason = Some("ContainersNotReady".into());
                    conditions[ready].last_transition_time = Some(Time(at(NOW)));
                }
            }
        }
    }
    pod
}

/// A write some planner reads, picked by `kind` (0: none).
fn seen_write(pod: &Pod, kind: u8) -> Pod {
    let mut pod = pod.clone();
    let conditions = pod
        .status
        .get_or_insert_default()
        .conditions
        .get_or_insert_default();
    let ready = conditions.iter().position(|c| c.type_ == "Ready");
    match (kind % 6, ready) {
        (1, _) => pod.metadata.deletion_timestamp = Some(Time(at(NOW - 2))),
        (2, Some(i)) if conditions[i].status == "True" => {
            conditions[i].last_transition_time = Some(Time(at(NOW - 1)));
        }
        (2, _) => conditions.push(PodCondition {
            type_: "Ready".into(),
            status: "True".into(),
            last_transition_time: Some(Time(at(NOW - 3600))),
            ..Default::default()
        }),
        (3, Some(i)) => conditions[i].status = "False".into(),
        (4, _) => {
            let hash = pod.label(CONTROLLER_REVISION_HASH_LABEL) == Some("new");
            pod.metadata.labels.get_or_insert_default().insert(
                CONTROLLER_REVISION_HASH_LABEL.into(),
                if hash { "old" } else { "new" }.into(),
            );
        }
        (5, _) => pod.spec.get_or_insert_default().node_name = Some(node_name(0)),
        _ => {}
    }
    pod
}

fn need_upgrade(pod: &Pod, n: u8) -> Pod {
    let mut pod = pod.clone();
    if n.is_multiple_of(4) {
        pod.status
            .get_or_insert_default()
            .conditions
            .get_or_insert_default()
            .push(PodCondition {
                type_: crate::names::POD_NEED_UPGRADE_CONDITION.into(),
                status: if n.is_multiple_of(8) { "True" } else { "False" }.into(),
                message: Some("hash old".into()),
                ..Default::default()
            });
    }
    pod
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// The upgrade controller skips pod writes that leave `PlannedPod` unchanged
    /// (`triggers`). That is only safe if no planner reads what it leaves out: after
    /// writes planners do not read on every pod, and one they may read on one pod, pods
    /// equal under it must give equal plans, rolling and OTA.
    #[test]
    fn pods_equal_as_planned_give_equal_plans(
        model in model(),
        noise in prop::collection::vec(any::<Noise>(), 1..32),
        (target, kind) in (any::<usize>(), 0u8..6),
    ) {
        use crate::daemonset::ota_plan::{plan_need_upgrade_conditions, plan_leftover_condition_removals};
        use crate::daemonset::triggers::pod_unchanged;
        let noise_of = |i: usize| noise[i % noise.len()];
        let mut seen = to_input(&model);
        seen.pods = seen
            .pods
            .iter()
            .enumerate()
            .map(|(i, pod)| Arc::new(need_upgrade(pod, noise_of(i).3)))
            .collect();
        let mut written = to_input(&model);
        written.pods = seen
            .pods
            .iter()
            .enumerate()
            .map(|(i, pod)| {
                let pod = unseen_writes(pod, noise_of(i));
                // One pod also gets a write that planners may read.
                Arc::new(if i == target % seen.pods.len().max(1) { seen_write(&pod, kind) } else { pod })
            })
            .collect();
        let unchanged = seen
            .pods
            .iter()
            .zip(&written.pods)
            .all(|(before, after)| pod_unchanged(&**before, &**after));
        if !unchanged {
            return Ok(());
        }
        prop_assert_eq!(
            plan_rolling_update(&seen.input()),
            plan_rolling_update(&written.input())
        );
        let now = at(NOW);
        prop_assert_eq!(
            plan_need_upgrade_conditions(&seen.ds, seen.current.as_ref(), &seen.pods, now),
            plan_need_upgrade_conditions(&written.ds, written.current.as_ref(), &written.pods, now)
        );
        prop_assert_eq!(
            plan_leftover_condition_removals(&seen.ds, &seen.pods),
            plan_leftover_condition_removals(&written.ds, &written.pods)
        );
    }

    /// The other half: writes no planner reads are never seen, so they cost no replan.
    #[test]
    fn writes_no_planner_reads_are_not_seen(model in model(), noise in any::<Noise>()) {
        use crate::daemonset::triggers::pod_unchanged;
        for pod in to_input(&model).pods {
            let pod = need_upgrade(&pod, noise.3);
            prop_assert!(pod_unchanged(&pod, &unseen_writes(&pod, noise)));
        }
    }
}

#[test]
fn oracle_agrees_on_a_hand_made_state() {
    // Guards the oracle itself: n0 Ready with an old available pod, n1 NotReady.
    let old_available = ModelPod {
        updated: false,
        two_behind: false,
        ready: true,
        marked_while_cut: false,
        ready_long_ago: true,
        terminating: false,
        deletion_expected: false,
        owned_by_other_daemonset: false,
        pending_by_affinity: false,
    };
    let model = Model {
        nodes: vec![
            ModelNode {
                state: NodeState::Ready,
                dedicated: false,
                back_recently: false,
                replaced_by_us: false,
                pods: vec![old_available.clone()],
            },
            ModelNode {
                state: NodeState::NotReady,
                dedicated: false,
                back_recently: false,
                replaced_by_us: false,
                pods: vec![old_available],
            },
        ],
        max_unavailable: MaxUnavailable::Percent(50),
        min_ready_seconds: 0,
        rotate_pods_by: 0,
        tolerate_everything: true,
        max_deletions_per_plan: RollingLimits::DEFAULT_MAX_DELETIONS_PER_PLAN,
    };
    let expected = oracle(&model);
    assert_eq!(expected.budget, 1);
    assert_eq!(expected.candidates, ["uid-n0-p0"]);
    let plan = plan_rolling_update(&to_input(&model).input());
    let deleted: BTreeMap<_, _> = plan
        .deletions
        .iter()
        .map(|d| (d.uid.as_str(), d.reason))
        .collect();
    assert_eq!(
        deleted,
        BTreeMap::from([("uid-n0-p0", DeletionReason::RollingUpdate)])
    );
}

/// One node's change, as a flap or an operator writes it. Bits: 0 the Ready status
/// flips, 1 when it turned moves, 2 the pool label moves, 3 a `dedicated` NoSchedule
/// taint comes or goes.
fn changed_node(node: &Node, change: u8) -> Node {
    let mut changed = node.clone();
    let ready = changed
        .status
        .as_mut()
        .and_then(|s| s.conditions.as_mut())
        .and_then(|cs| cs.iter_mut().find(|c| c.type_ == "Ready"));
    if let Some(ready) = ready {
        if change & 1 != 0 {
            ready.status = if ready.status == "True" {
                "Unknown"
            } else {
                "True"
            }
            .into();
        }
        if change & 3 != 0 {
            ready.last_transition_time = Some(Time(at(NOW - 2)));
        }
    }
    if change & 4 != 0 {
        let labels = changed.metadata.labels.get_or_insert_default();
        match labels.get("pool").map(String::as_str) {
            Some("a") => labels.insert("pool".into(), "b".into()),
            Some(_) => labels.remove("pool"),
            None => labels.insert("pool".into(), "a".into()),
        };
    }
    if change & 8 != 0 {
        let taints = changed
            .spec
            .get_or_insert_default()
            .taints
            .get_or_insert_default();
        match taints.iter().position(|t| t.key == "dedicated") {
            Some(i) => {
                taints.remove(i);
            }
            None => taints.push(taint("dedicated", "NoSchedule")),
        }
    }
    changed
}

/// A plan without what a node's Ready status moves even when no decision does: the
/// Ready counts and the NotReady nodes skipped (read only by gauges and notes).
fn decisions(mut plan: RollingPlan) -> RollingPlan {
    plan.progress.ready_nodes = 0;
    plan.progress.ready_updated = 0;
    plan.progress.not_ready_nodes_skipped.clear();
    plan
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3_000))]

    /// The node triggers' fast path (`triggers::daemonsets_for_node`) re-plans nothing
    /// when the DaemonSet's only pod on the changed node serves the current revision
    /// (`triggers::serves_current`). That is only safe if a full plan after the change
    /// decides exactly what one before it decided: same deletions, upcoming pods,
    /// settled nodes, blocker, counts and rechecks, partition and node selector
    /// included. Half the cases force such a pod on the node, so the path is taken.
    #[test]
    fn a_node_change_the_fast_path_skips_changes_no_decision(
        model in model(),
        (target, change, force) in (any::<usize>(), 1u8..16, any::<bool>()),
        partition in prop_oneof![
            Just(None),
            (1u32..=10).prop_map(|c| Some(Partition::Count(c))),
            (1u8..=100).prop_map(|p| Some(Partition::Percent(p))),
        ],
        selector in prop::option::of(0..SELECTORS.len()),
    ) {
        use crate::daemonset::triggers::serves_current;
        let mut model = model;
        if model.nodes.is_empty() {
            return Ok(());
        }
        let index = target % model.nodes.len();
        if force {
            let n = &mut model.nodes[index];
            if n.state == NodeState::Missing {
                n.state = NodeState::Ready;
            }
            n.replaced_by_us = false;
            let pending = n.pods.first().is_some_and(|p| p.pending_by_affinity);
            n.pods = vec![ModelPod {
                updated: true,
                two_behind: false,
                ready: true,
                marked_while_cut: false,
                ready_long_ago: true,
                terminating: false,
                deletion_expected: false,
                owned_by_other_daemonset: false,
                pending_by_affinity: pending,
            }];
        }
        let controlled = |owned: &mut OwnedInput| {
            owned.partition = partition;
            owned.node_selector = selector.map(|i| NodeSelector::parse(SELECTORS[i].0).unwrap());
        };
        let mut before = to_input(&model);
        controlled(&mut before);
        let name = node_name(index);
        // A node that comes or goes always re-plans: not the fast path's case.
        let Some(at_node) = before
            .nodes
            .iter()
            .position(|n| n.metadata.name.as_deref() == Some(name.as_str()))
        else {
            return Ok(());
        };
        let mut after = to_input(&model);
        controlled(&mut after);
        after.nodes[at_node] = Arc::new(changed_node(&before.nodes[at_node], change));

        let uid = before.ds.metadata.uid.clone().unwrap_or_default();
        let there: Vec<Arc<Pod>> = before
            .pods
            .iter()
            .filter(|p| is_controlled_by(&***p, &uid) && p.node_or_affinity_node() == Some(name.as_str()))
            .cloned()
            .collect();
        let expected = |pod: &str| before.expected_deletions.contains(pod);
        let skipped = !before.vacated_by_us.contains_key(&name)
            && serves_current(&before.ds, &there, before.current.as_ref(), &expected, before.now);
        if force {
            prop_assert!(skipped, "a serving pod on {} must take the fast path", name);
        }
        if skipped {
            prop_assert_eq!(
                decisions(plan_rolling_update(&before.input())),
                decisions(plan_rolling_update(&after.input()))
            );
        }
    }
}

/// Node names that share prefixes longer and shorter than `NodeKey`'s 16 bytes, and
/// hold NUL and multi-byte characters (padding and byte order are what could go wrong).
fn tricky_name() -> impl Strategy<Value = String> {
    let part = prop::sample::select(vec!["", "a", "b", "\0", "é", "-0", "1", "~"]);
    (
        prop::sample::select(vec!["", "edge-0", "cn-hangzhou.192.168.", "x\0\0"]),
        prop::collection::vec(part, 0..6),
    )
        .prop_map(|(prefix, parts)| format!("{prefix}{}", parts.concat()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// `NodeKey` compares as the names do: every order in a plan (deletions, upcoming,
    /// the node lists, the partition's first nodes) rests on it.
    #[test]
    fn node_keys_order_as_names_do(names in prop::collection::vec(tricky_name(), 0..12)) {
        for a in &names {
            for b in &names {
                prop_assert_eq!(NodeKey::of(a).cmp(&NodeKey::of(b)), a.cmp(b), "{:?} {:?}", a, b);
                prop_assert_eq!(NodeKey::of(a) == NodeKey::of(b), a == b);
            }
        }
    }

    /// A plan made without `upcoming` (no pull-ahead) decides exactly what one with it
    /// decides, the cap and partition included; only the list is left out.
    #[test]
    fn a_plan_without_upcoming_decides_the_same(
        model in model(),
        partition in prop_oneof![
            Just(None),
            (1u32..=10).prop_map(|c| Some(Partition::Count(c))),
            (1u8..=100).prop_map(|p| Some(Partition::Percent(p))),
        ],
        selector in prop::option::of(0..SELECTORS.len()),
    ) {
        let mut owned = to_input(&model);
        owned.partition = partition;
        owned.node_selector = selector.map(|i| NodeSelector::parse(SELECTORS[i].0).unwrap());
        let full = plan_rolling_update(&owned.input());
        let lean = plan_rolling_update(&RollingInput {
            list_upcoming: false,
            ..owned.input()
        });
        prop_assert!(lean.upcoming.is_empty());
        prop_assert_eq!(lean, RollingPlan { upcoming: Vec::new(), ..full });
    }
}

/// `second`'s objects, but where `keep` says so, `first`'s own `Arc` of the object of
/// the same name (an object the store did not change between two plans).
fn sharing<T: kube::Resource>(first: &[Arc<T>], second: &[Arc<T>], keep: &[bool]) -> Vec<Arc<T>> {
    second
        .iter()
        .enumerate()
        .map(|(i, object)| {
            let name = object.meta().name.as_deref();
            first
                .iter()
                .find(|o| o.meta().name.as_deref() == name)
                .filter(|_| keep[i % keep.len()])
                .map_or_else(|| object.clone(), Arc::clone)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// A memo kept across plans decides as looks read afresh do: between plans some
    /// objects keep their `Arc` (unchanged), others are new versions, some go; and the
    /// DaemonSet or its revision may change under the memo (then it starts over).
    #[test]
    fn a_memo_plans_as_fresh_looks_do(
        first in model(),
        second in model(),
        keep in prop::collection::vec(any::<bool>(), 1..16),
        same_daemonset in prop::bool::weighted(0.8),
    ) {
        let a = to_input(&first);
        let mut memo = PlanMemo::default();
        memo.refresh(&a.ds, a.current.as_ref(), &a.pods, &a.nodes);
        prop_assert_eq!(plan_rolling_update_memo(&a.input(), &memo), plan_rolling_update(&a.input()));

        let mut b = to_input(&second);
        if same_daemonset {
            b.ds = a.ds.clone();
            b.current = a.current.clone();
        }
        b.pods = sharing(&a.pods, &b.pods, &keep);
        b.nodes = sharing(&a.nodes, &b.nodes, &keep);
        memo.refresh(&b.ds, b.current.as_ref(), &b.pods, &b.nodes);
        prop_assert_eq!(plan_rolling_update_memo(&b.input(), &memo), plan_rolling_update(&b.input()));

        // Back to the first state: looks the second refresh dropped are made again.
        memo.refresh(&a.ds, a.current.as_ref(), &a.pods, &a.nodes);
        prop_assert_eq!(plan_rolling_update_memo(&a.input(), &memo), plan_rolling_update(&a.input()));
        // The memo's objects are planned, whatever the input lists; a memo observed for
        // another DaemonSet or revision is read afresh.
        let objects_of_a = RollingInput { pods: &a.pods, nodes: &a.nodes, ..b.input() };
        prop_assert_eq!(plan_rolling_update_memo(&b.input(), &memo), plan_rolling_update(&objects_of_a));
    }

    /// Objects that change one at a time, as a watch delivers them (one pod or node
    /// added, replaced by a new version, or gone per refresh), are put in the memo's
    /// order one by one; the plans still agree with looks read afresh.
    #[test]
    fn a_memo_changed_one_object_at_a_time_plans_as_fresh_looks_do(
        first in model(),
        second in model(),
        picks in prop::collection::vec((any::<usize>(), 0u8..3), 1..12),
    ) {
        let mut a = to_input(&first);
        let b = to_input(&second);
        let mut memo = PlanMemo::default();
        memo.refresh(&a.ds, a.current.as_ref(), &a.pods, &a.nodes);
        for (pick, change) in picks {
            let total = b.pods.len() + b.nodes.len();
            if total == 0 {
                break;
            }
            let i = pick % total;
            if i < b.pods.len() {
                one_change(&mut a.pods, &b.pods[i], change);
            } else {
                one_change(&mut a.nodes, &b.nodes[i - b.pods.len()], change);
            }
            memo.refresh(&a.ds, a.current.as_ref(), &a.pods, &a.nodes);
            prop_assert_eq!(plan_rolling_update_memo(&a.input(), &memo), plan_rolling_update(&a.input()));
        }
    }
}

/// One watch event on `objects`: `object` (by name) replaces its namesake or is added
/// (`change` 0 or 1), or its namesake goes (2).
fn one_change<T: kube::Resource + Clone>(objects: &mut Vec<Arc<T>>, object: &Arc<T>, change: u8) {
    let name = object.meta().name.clone();
    let at = objects.iter().position(|o| o.meta().name == name);
    match (change, at) {
        (2, Some(at)) => {
            objects.remove(at);
        }
        (2, None) => {}
        (_, Some(at)) => objects[at] = Arc::new((**object).clone()),
        (_, None) => objects.push(Arc::new((**object).clone())),
    }
}
