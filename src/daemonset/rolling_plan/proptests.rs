//! Property tests: for any generated cluster state, the plan respects the budget and
//! only ever deletes live, out-of-date pods of this DaemonSet on Ready nodes.
//!
//! Both shapes users deploy are generated: DaemonSets that tolerate every taint (edge
//! agents, CNI) and ones that tolerate none. NotReady nodes carry the unreachable taints
//! the node-lifecycle controller sets; some Ready nodes carry a `dedicated` taint.
//!
//! States are generated as a small model, turned into Kubernetes objects with the test
//! builders, and the expected counts are recomputed from the model (an oracle that does
//! not share code with the planner).

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;
use crate::daemonset::testkit::{at, node, revision, tainted, DaemonSetBuilder, PodBuilder};
use k8s_openapi::api::core::v1::Taint;

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
    ready: bool,
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
    pods: Vec<ModelPod>,
}

#[derive(Debug, Clone)]
struct Model {
    nodes: Vec<ModelNode>,
    max_unavailable: MaxUnavailable,
    min_ready_seconds: i32,
    rotate_pods_by: usize,
    tolerate_everything: bool,
}

fn model_pod() -> impl Strategy<Value = ModelPod> {
    (
        any::<bool>(),
        prop::bool::weighted(0.8),
        any::<bool>(),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.2),
    )
        .prop_map(
            |(
                updated,
                ready,
                ready_long_ago,
                terminating,
                deletion_expected,
                owned_by_other_daemonset,
                pending_by_affinity,
            )| ModelPod {
                updated,
                ready,
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
    (state, prop::bool::weighted(0.2), pods).prop_map(|(state, dedicated, pods)| ModelNode {
        state,
        dedicated,
        pods,
    })
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
    )
        .prop_map(
            |(nodes, max_unavailable, min_ready_seconds, rotate_pods_by, tolerate_everything)| {
                Model {
                    nodes,
                    max_unavailable,
                    min_ready_seconds,
                    rotate_pods_by,
                    tolerate_everything,
                }
            },
        )
}

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
    let revisions = vec![revision(&ds, "old", 1), revision(&ds, "new", 2)];
    let mut pods = Vec::new();
    let mut nodes = Vec::new();
    let mut expected_deletions = BTreeSet::new();
    for (node_index, model_node) in model.nodes.iter().enumerate() {
        let name = node_name(node_index);
        let mut made = match model_node.state {
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
        nodes.extend(made.map(Arc::new));
        for (pod_index, p) in model_node.pods.iter().enumerate() {
            let mut builder = PodBuilder::new(&format!("n{node_index}-p{pod_index}"), &ds)
                .hash(if p.updated { "new" } else { "old" });
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
        vacated_by_us: BTreeMap::new(),
    }
}

/// What the spec says about a model, computed directly from it.
struct Oracle {
    budget: usize,
    unavailable: usize,
    /// Old available pods alone on a Ready node, in node order.
    candidates: Vec<String>,
    old_not_available: BTreeSet<String>,
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
    let mut old_not_available = BTreeSet::new();
    let mut deletable = BTreeSet::new();
    let mut on_skipped_nodes = BTreeSet::new();
    for (node_index, model_node) in model.nodes.iter().enumerate() {
        let ours: Vec<(usize, &ModelPod)> = model_node
            .pods
            .iter()
            .enumerate()
            .filter(|(_, p)| !p.owned_by_other_daemonset)
            .collect();
        if ours.is_empty() {
            // No pod in view on a Ready node the DaemonSet targets: vacated.
            let targeted = model.tolerate_everything || !model_node.dedicated;
            if model_node.state == NodeState::Ready && targeted {
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
                if available(p) {
                    candidates.push(uid);
                } else {
                    old_not_available.insert(uid);
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
        budget,
        unavailable,
        candidates,
        old_not_available,
        deletable,
        on_skipped_nodes,
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

        let by_reason = |reason| -> Vec<String> {
            plan.deletions
                .iter()
                .filter(|d| d.reason == reason)
                .map(|d| d.uid.clone())
                .collect()
        };
        let free = by_reason(DeletionReason::OldPodNotAvailable);
        prop_assert_eq!(free.into_iter().collect::<BTreeSet<_>>(), expected.old_not_available);

        // Available old pods: never beyond what the budget leaves, and as many as it
        // allows (the plan must make progress), first in node name order.
        let rolling = by_reason(DeletionReason::RollingUpdate);
        let allowed = expected.budget.saturating_sub(expected.unavailable);
        prop_assert!(rolling.len() <= allowed);
        if !rolling.is_empty() {
            prop_assert!(expected.unavailable + rolling.len() <= expected.budget);
        }
        let take = allowed.min(expected.candidates.len());
        prop_assert_eq!(&rolling[..], &expected.candidates[..take]);
    }
}

#[test]
fn oracle_agrees_on_a_hand_made_state() {
    // Guards the oracle itself: n0 Ready with an old available pod, n1 NotReady.
    let old_available = ModelPod {
        updated: false,
        ready: true,
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
                pods: vec![old_available.clone()],
            },
            ModelNode {
                state: NodeState::NotReady,
                dedicated: false,
                pods: vec![old_available],
            },
        ],
        max_unavailable: MaxUnavailable::Percent(50),
        min_ready_seconds: 0,
        rotate_pods_by: 0,
        tolerate_everything: true,
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
