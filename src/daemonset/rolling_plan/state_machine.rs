//! A property test over many steps: a simulated cluster (the truth) changes in random
//! order while the planner sees caches that lag behind it, as a real controller does.
//!
//! - Nodes flap Ready and NotReady. A NotReady node's pods turn unready, as the node
//!   lifecycle controller makes them.
//! - The native DaemonSet controller creates the missing pod of a node, at the current
//!   revision, when the DaemonSet should run there (a DaemonSet that tolerates nothing
//!   gets no new pod on a NotReady node, which is tainted unreachable).
//! - Pods start (turn Ready on a Ready node) and terminating pods go away, in any order.
//! - The controller reconciles on a pod cache and a node cache that each lag behind the
//!   truth by a random number of steps, never going backwards; it uses the same
//!   `Expectations` and planner as the real controller, and its deletions mark pods
//!   terminating in the truth (UID precondition: a pod already gone is a 404).
//!
//! Checked on the truth after every step:
//! - no more than `budget` Ready nodes are without an available pod because of our
//!   deletions. A node that has been NotReady since our deletion (or flapped while the
//!   planner's node cache could not show it yet) is the network's doing, not ours, and
//!   the spec skips NotReady nodes (never counted, never touched);
//!   Deleting an old pod the planner saw unavailable costs no budget (the spec's rule):
//!   that node was not serving before;
//! - no deletion on a node the planner saw NotReady, and no pod deleted twice;
//! - once the flapping stops, every node ends with one available up-to-date pod.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use proptest::prelude::*;

use super::*;
use crate::daemonset::expectations::Expectations;
use crate::daemonset::testkit::{at, node, revision, tainted, DaemonSetBuilder, PodBuilder};

const NOW: i64 = 1_000_000;

#[derive(Debug, Clone)]
struct SimPod {
    uid: u32,
    node: usize,
    updated: bool,
    ready: bool,
    terminating: bool,
}

/// The truth at one moment.
#[derive(Debug, Clone)]
struct World {
    node_ready: Vec<bool>,
    pods: Vec<SimPod>,
    next_uid: u32,
}

#[derive(Debug, Clone)]
enum Step {
    Flap(usize),
    NativeCreates(usize),
    Start(usize),
    Finish(usize),
    /// Reconcile after the pod and node caches caught up by these many steps.
    Reconcile {
        pods_catch_up: usize,
        nodes_catch_up: usize,
    },
}

fn step(nodes: usize) -> impl Strategy<Value = Step> {
    prop_oneof![
        1 => (0..nodes).prop_map(Step::Flap),
        3 => (0..nodes).prop_map(Step::NativeCreates),
        3 => (0..nodes * 2).prop_map(Step::Start),
        3 => (0..nodes * 2).prop_map(Step::Finish),
        4 => (0usize..4, 0usize..4).prop_map(|(p, n)| Step::Reconcile {
            pods_catch_up: p,
            nodes_catch_up: n,
        }),
    ]
}

#[derive(Debug, Clone)]
struct Scenario {
    nodes: usize,
    tolerate_everything: bool,
    max_unavailable: MaxUnavailable,
    steps: Vec<Step>,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (2usize..9, any::<bool>())
        .prop_flat_map(|(nodes, tolerate_everything)| {
            let max_unavailable = prop_oneof![
                (1u32..=3).prop_map(MaxUnavailable::Count),
                (10u8..=60).prop_map(MaxUnavailable::Percent),
            ];
            (
                Just(nodes),
                Just(tolerate_everything),
                max_unavailable,
                prop::collection::vec(step(nodes), 1..120),
            )
        })
        .prop_map(
            |(nodes, tolerate_everything, max_unavailable, steps)| Scenario {
                nodes,
                tolerate_everything,
                max_unavailable,
                steps,
            },
        )
}

fn node_name(i: usize) -> String {
    format!("n{i}")
}

struct Sim {
    ds: DaemonSet,
    current: CurrentRevision,
    tolerate_everything: bool,
    max_unavailable: MaxUnavailable,
    /// Every state of the truth so far; the caches show one of them.
    history: Vec<World>,
    pods_seen: usize,
    nodes_seen: usize,
    expectations: Expectations,
    /// Nodes our deletion left without an available pod, while Ready since then.
    disrupted_by_us: BTreeSet<usize>,
    deleted_uids: BTreeSet<u32>,
}

impl Sim {
    fn new(s: &Scenario) -> Self {
        let mut builder = DaemonSetBuilder::new("agent")
            .strategy("AdvancedRollingUpdate")
            .on_delete();
        if s.tolerate_everything {
            builder = builder.tolerate_everything();
        }
        let ds = builder.build();
        let revisions = [revision(&ds, "old", 1), revision(&ds, "new", 2)];
        let current = CurrentRevision::of(&ds, &revisions).expect("revision known");
        let pods = (0..s.nodes)
            .map(|i| SimPod {
                uid: i as u32,
                node: i,
                updated: false,
                ready: true,
                terminating: false,
            })
            .collect();
        let world = World {
            node_ready: vec![true; s.nodes],
            pods,
            next_uid: s.nodes as u32,
        };
        Sim {
            ds,
            current,
            tolerate_everything: s.tolerate_everything,
            max_unavailable: s.max_unavailable,
            history: vec![world],
            pods_seen: 0,
            nodes_seen: 0,
            expectations: Expectations::default(),
            disrupted_by_us: BTreeSet::new(),
            deleted_uids: BTreeSet::new(),
        }
    }

    fn truth(&self) -> &World {
        self.history.last().expect("history is never empty")
    }

    /// Applies a change to the truth as a new moment in history.
    fn change(&mut self, f: impl FnOnce(&mut World, &mut BTreeSet<usize>)) {
        let mut next = self.truth().clone();
        f(&mut next, &mut self.disrupted_by_us);
        self.history.push(next);
    }

    fn apply(&mut self, step: &Step) -> Result<(), TestCaseError> {
        let tolerate_everything = self.tolerate_everything;
        match *step {
            Step::Flap(i) => self.change(|w, disrupted| {
                w.node_ready[i] = !w.node_ready[i];
                if !w.node_ready[i] {
                    disrupted.remove(&i);
                    for pod in w.pods.iter_mut().filter(|p| p.node == i) {
                        pod.ready = false;
                    }
                }
            }),
            Step::NativeCreates(i) => self.change(|w, _| {
                let has_pod = w.pods.iter().any(|p| p.node == i && !p.terminating);
                if !has_pod && (w.node_ready[i] || tolerate_everything) {
                    w.pods.push(SimPod {
                        uid: w.next_uid,
                        node: i,
                        updated: true,
                        ready: false,
                        terminating: false,
                    });
                    w.next_uid += 1;
                }
            }),
            Step::Start(k) => self.change(|w, disrupted| {
                if w.pods.is_empty() {
                    return;
                }
                let k = k % w.pods.len();
                let pod = &mut w.pods[k];
                if w.node_ready[pod.node] && !pod.terminating {
                    pod.ready = true;
                    if pod.updated {
                        disrupted.remove(&pod.node);
                    }
                }
            }),
            Step::Finish(k) => self.change(|w, _| {
                let terminating: Vec<usize> = (0..w.pods.len())
                    .filter(|&j| w.pods[j].terminating)
                    .collect();
                if !terminating.is_empty() {
                    w.pods.remove(terminating[k % terminating.len()]);
                }
            }),
            Step::Reconcile {
                pods_catch_up,
                nodes_catch_up,
            } => self.reconcile(pods_catch_up, nodes_catch_up)?,
        }
        Ok(())
    }

    fn view_pods(&self) -> Vec<Arc<Pod>> {
        self.history[self.pods_seen]
            .pods
            .iter()
            .map(|p| {
                let name = format!("p{}", p.uid);
                let mut b = PodBuilder::new(&name, &self.ds)
                    .hash(if p.updated { "new" } else { "old" })
                    .on_node(&node_name(p.node));
                b = if p.ready {
                    b.ready_since(at(NOW - 60))
                } else {
                    b.not_ready()
                };
                if p.terminating {
                    b = b.terminating(at(NOW - 1));
                }
                Arc::new(b.build())
            })
            .collect()
    }

    fn view_nodes(&self) -> Vec<Arc<Node>> {
        let unreachable = |effect: &str| Taint {
            key: "node.kubernetes.io/unreachable".into(),
            effect: effect.into(),
            ..Default::default()
        };
        self.history[self.nodes_seen]
            .node_ready
            .iter()
            .enumerate()
            .map(|(i, &ready)| {
                let n = node(&node_name(i), ready);
                Arc::new(if ready {
                    n
                } else {
                    tainted(
                        tainted(n, unreachable("NoSchedule")),
                        unreachable("NoExecute"),
                    )
                })
            })
            .collect()
    }

    fn reconcile(
        &mut self,
        pods_catch_up: usize,
        nodes_catch_up: usize,
    ) -> Result<(), TestCaseError> {
        let latest = self.history.len() - 1;
        self.pods_seen = (self.pods_seen + pods_catch_up).min(latest);
        self.nodes_seen = (self.nodes_seen + nodes_catch_up).min(latest);
        let pods = self.view_pods();
        let nodes = self.view_nodes();
        let now = Instant::now();
        let pending = self.expectations.pending("ds", &pods, now);
        let plan = plan_rolling_update(&RollingInput {
            daemonset: &self.ds,
            current: Some(&self.current),
            pods: &pods,
            nodes: &nodes,
            max_unavailable: self.max_unavailable,
            now: at(NOW),
            expected_deletions: &pending.deletions,
            vacated_by_us: &pending.vacated,
            limits: RollingLimits::default(),
        });
        self.expectations.settle("ds", &plan.settled);
        let seen_ready = self.history[self.nodes_seen].node_ready.clone();
        for deletion in &plan.deletions {
            let uid: u32 = deletion
                .uid
                .trim_start_matches("uid-p")
                .parse()
                .expect("sim uid");
            let node: usize = deletion
                .node
                .trim_start_matches('n')
                .parse()
                .expect("sim node");
            prop_assert!(
                seen_ready[node],
                "deleted on a node seen NotReady: {deletion:?}"
            );
            prop_assert!(
                self.deleted_uids.insert(uid),
                "pod deleted twice: {deletion:?}"
            );
            self.expectations
                .expect_deletion("ds", &deletion.node, &deletion.uid, now);
            let present = self
                .truth()
                .pods
                .iter()
                .any(|p| p.uid == uid && !p.terminating);
            if !present {
                // 404, or a pod already terminating: nothing happens in the truth.
                self.expectations.deletion_moot("ds", &deletion.uid);
                continue;
            }
            // Ours to answer for: the node was Ready at every moment from what the node
            // cache showed to now. A flap the cache has not delivered yet is invisible to
            // any controller; the node's state is then the network's doing.
            let steady = self.history[self.nodes_seen..]
                .iter()
                .all(|w| w.node_ready[node]);
            // A pod the planner saw unavailable is replaced without budget (the spec's
            // rule, and Kubernetes' own): its node was not serving before the deletion.
            let spends_budget = deletion.reason == DeletionReason::RollingUpdate;
            self.change(|w, disrupted| {
                let pod = w.pods.iter_mut().find(|p| p.uid == uid).expect("present");
                pod.terminating = true;
                pod.ready = false;
                if steady && spends_budget {
                    disrupted.insert(node);
                }
            });
        }
        Ok(())
    }

    fn check_budget(&self) -> Result<(), TestCaseError> {
        let truth = self.truth();
        let nodes = truth.node_ready.len();
        let unavailable_by_us = self
            .disrupted_by_us
            .iter()
            .filter(|&&i| truth.node_ready[i])
            .count();
        let budget = self.max_unavailable.budget(nodes);
        prop_assert!(
            unavailable_by_us <= budget,
            "{unavailable_by_us} Ready nodes unavailable because of our deletions, budget {budget}: {:?}",
            self.disrupted_by_us
        );
        Ok(())
    }

    /// Everything Ready, caches caught up, the world given time: the rollout finishes.
    fn converge(&mut self) -> Result<(), TestCaseError> {
        let n = self.truth().node_ready.len();
        for i in 0..n {
            if !self.truth().node_ready[i] {
                self.apply(&Step::Flap(i))?;
            }
        }
        for _round in 0..(4 * n + 8) {
            let len = self.truth().pods.len() + 1;
            for k in 0..len {
                self.apply(&Step::Finish(k))?;
            }
            for i in 0..n {
                self.apply(&Step::NativeCreates(i))?;
            }
            for k in 0..self.truth().pods.len() {
                self.apply(&Step::Start(k))?;
            }
            self.apply(&Step::Reconcile {
                pods_catch_up: usize::MAX / 2,
                nodes_catch_up: usize::MAX / 2,
            })?;
            self.check_budget()?;
            let truth = self.truth();
            let done = (0..n).all(|i| {
                let pods: Vec<&SimPod> = truth.pods.iter().filter(|p| p.node == i).collect();
                matches!(pods.as_slice(), [p] if p.updated && p.ready && !p.terminating)
            });
            if done {
                return Ok(());
            }
        }
        prop_assert!(false, "did not converge: {:?}", self.truth());
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn budget_holds_on_the_truth_with_lagging_caches_and_the_rollout_finishes(s in scenario()) {
        let mut sim = Sim::new(&s);
        for step in &s.steps {
            sim.apply(step)?;
            sim.check_budget()?;
        }
        sim.converge()?;
    }
}

#[test]
fn the_simulation_can_see_a_budget_violation() {
    // Guards the checker: two deletions on Ready nodes with a budget of one must fail.
    let s = Scenario {
        nodes: 3,
        tolerate_everything: true,
        max_unavailable: MaxUnavailable::Count(1),
        steps: vec![],
    };
    let mut sim = Sim::new(&s);
    sim.change(|w, disrupted| {
        for i in 0..2 {
            w.pods[i].terminating = true;
            disrupted.insert(i);
        }
    });
    assert!(sim.check_budget().is_err());
}
