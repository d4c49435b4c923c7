//! A property test over many steps: a simulated cluster (the truth) changes in random
//! order while the planner sees caches that lag behind it, as a real controller does.
//!
//! - The template changes during the rollout: up to four revisions (a -> b -> c -> d),
//!   so pods of an earlier replacement can still be starting when the next one lands.
//! - Nodes flap Ready and NotReady. A pod keeps serving on a cut-off node, but the node
//!   lifecycle controller marks it Ready=False. When the node is back, that status stays
//!   until its kubelet reports again (a step of its own, some steps later); a report
//!   rewrites what the pod really shows, and turns the status only when it changed, as
//!   the API server keeps `lastTransitionTime` for an unchanged status.
//! - The native DaemonSet controller creates the missing pod of a node, at the current
//!   revision, when the DaemonSet should run there (a DaemonSet that tolerates nothing
//!   gets no new pod on a NotReady node, which is tainted unreachable).
//! - Pods start (turn Ready on a Ready node whose kubelet reports) and terminating pods
//!   go away, in any order; time passes.
//! - The controller reconciles on a pod cache and a node cache that each lag behind the
//!   truth by a random number of steps, never going backwards; it uses the same
//!   `Expectations` and planner as the real controller, and its deletions mark pods
//!   terminating in the truth (UID precondition: a pod already gone is a 404).
//!
//! Checked on the truth after every step, the budget rule: no more than `budget` Ready
//! nodes are without a serving pod because of our deletions. A node is ours from any
//! deletion of ours there (an available pod, or one not available: replacing it is
//! ours too) until a pod created since serves there. A node that has been NotReady since
//! our deletion (or flapped while the planner's node cache could not show it yet) is the
//! network's doing, not ours: the spec skips NotReady nodes (never counted, never
//! touched). Also: no deletion on a node the planner saw NotReady, no pod deleted
//! twice, and once the flapping stops, every node ends with one available pod of the
//! last revision.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::{Node, Pod, PodCondition, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use proptest::prelude::*;

use super::*;
use crate::daemonset::expectations::Expectations;
use crate::testkit::{at, node, revision, tainted, DaemonSetBuilder, PodBuilder};

/// The clock at the start; pods were Ready a minute before, nodes an hour before.
const START: i64 = 1_000_000;
/// The templates pushed in order; the first is what every pod runs at the start.
const TEMPLATES: [&str; 4] = ["a", "b", "c", "d"];

#[derive(Debug, Clone)]
struct SimPod {
    uid: u32,
    node: usize,
    /// Index in `TEMPLATES`.
    template: usize,
    /// Its containers run and are ready on the node, whatever the API shows.
    serving: bool,
    /// The Ready condition as the API shows it, and when it last turned (none until
    /// the kubelet first writes it).
    shown_ready: bool,
    shown_since: Option<i64>,
    terminating: bool,
}

impl SimPod {
    /// Writes the Ready condition as the API server does: a new time only on change.
    fn show_ready(&mut self, ready: bool, now: i64) {
        if self.shown_ready != ready || self.shown_since.is_none() {
            self.shown_since = Some(now);
        }
        self.shown_ready = ready;
    }
}

#[derive(Debug, Clone)]
struct SimNode {
    ready: bool,
    /// When the Ready condition last turned.
    ready_since: i64,
    /// Its kubelet has reported its pods since the node last turned Ready.
    reported: bool,
}

/// The truth at one moment.
#[derive(Debug, Clone)]
struct World {
    nodes: Vec<SimNode>,
    pods: Vec<SimPod>,
    next_uid: u32,
    /// Index in `TEMPLATES` of the current revision.
    template: usize,
    clock: i64,
}

#[derive(Debug, Clone)]
enum Step {
    Flap(usize),
    NativeCreates(usize),
    Start(usize),
    Finish(usize),
    /// A node's kubelet reports on its pods again after the node came back.
    Report(usize),
    /// The template changes: the next revision becomes current.
    Push,
    /// Seconds pass.
    Tick(i64),
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
        2 => (0..nodes).prop_map(Step::Report),
        1 => Just(Step::Push),
        2 => (1i64..=3).prop_map(Step::Tick),
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
    max_deletions_per_plan: usize,
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
                prop_oneof![
                    Just(RollingLimits::DEFAULT_MAX_DELETIONS_PER_PLAN),
                    1usize..=2
                ],
                prop::collection::vec(step(nodes), 1..160),
            )
        })
        .prop_map(
            |(nodes, tolerate_everything, max_unavailable, max_deletions_per_plan, steps)| {
                Scenario {
                    nodes,
                    tolerate_everything,
                    max_unavailable,
                    max_deletions_per_plan,
                    steps,
                }
            },
        )
}

fn node_name(i: usize) -> String {
    format!("n{i}")
}

struct Sim {
    ds: DaemonSet,
    /// The current revision as the planner reads it, per index in `TEMPLATES`.
    currents: Vec<CurrentRevision>,
    tolerate_everything: bool,
    max_unavailable: MaxUnavailable,
    limits: RollingLimits,
    /// Every state of the truth so far; the caches show one of them.
    history: Vec<World>,
    pods_seen: usize,
    nodes_seen: usize,
    expectations: Expectations,
    /// Nodes our deletion left without a serving pod, while Ready since then: node ->
    /// the first uid a replacement can have.
    disrupted_by_us: BTreeMap<usize, u32>,
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
        let revisions: Vec<_> = TEMPLATES
            .iter()
            .zip(1..)
            .map(|(hash, number)| revision(&ds, hash, number))
            .collect();
        let currents = (1..=TEMPLATES.len())
            .map(|known| CurrentRevision::of(&ds, &revisions[..known]).expect("revision known"))
            .collect();
        let pods = (0..s.nodes)
            .map(|i| SimPod {
                uid: i as u32,
                node: i,
                template: 0,
                serving: true,
                shown_ready: true,
                shown_since: Some(START - 60),
                terminating: false,
            })
            .collect();
        let nodes = (0..s.nodes)
            .map(|_| SimNode {
                ready: true,
                ready_since: START - 3600,
                reported: true,
            })
            .collect();
        let world = World {
            nodes,
            pods,
            next_uid: s.nodes as u32,
            template: 0,
            clock: START,
        };
        Sim {
            ds,
            currents,
            tolerate_everything: s.tolerate_everything,
            max_unavailable: s.max_unavailable,
            limits: RollingLimits {
                max_deletions_per_plan: s.max_deletions_per_plan,
            },
            history: vec![world],
            pods_seen: 0,
            nodes_seen: 0,
            expectations: Expectations::default(),
            disrupted_by_us: BTreeMap::new(),
            deleted_uids: BTreeSet::new(),
        }
    }

    fn truth(&self) -> &World {
        self.history.last().expect("history is never empty")
    }

    /// Applies a change to the truth as a new moment in history.
    fn change(&mut self, f: impl FnOnce(&mut World, &mut BTreeMap<usize, u32>)) {
        let mut next = self.truth().clone();
        f(&mut next, &mut self.disrupted_by_us);
        self.history.push(next);
    }

    fn apply(&mut self, step: &Step) -> Result<(), TestCaseError> {
        let tolerate_everything = self.tolerate_everything;
        match *step {
            Step::Flap(i) => self.change(|w, disrupted| {
                let now = w.clock;
                let node = &mut w.nodes[i];
                node.ready = !node.ready;
                node.ready_since = now;
                node.reported = false;
                if !node.ready {
                    disrupted.remove(&i);
                    // The node lifecycle controller: every pod of the node not Ready,
                    // though it may serve on.
                    for pod in w.pods.iter_mut().filter(|p| p.node == i) {
                        pod.show_ready(false, now);
                    }
                }
            }),
            Step::NativeCreates(i) => self.change(|w, _| {
                let has_pod = w.pods.iter().any(|p| p.node == i && !p.terminating);
                let node = &w.nodes[i];
                if !has_pod && (node.ready || tolerate_everything) {
                    // The kubelet writes the first status of a pod it can see.
                    let reporting = node.ready && node.reported;
                    w.pods.push(SimPod {
                        uid: w.next_uid,
                        node: i,
                        template: w.template,
                        serving: false,
                        shown_ready: false,
                        shown_since: reporting.then_some(w.clock),
                        terminating: false,
                    });
                    w.next_uid += 1;
                }
            }),
            Step::Start(k) => self.change(|w, disrupted| {
                if w.pods.is_empty() {
                    return;
                }
                let now = w.clock;
                let k = k % w.pods.len();
                let pod = &mut w.pods[k];
                let node = &w.nodes[pod.node];
                if node.ready && node.reported && !pod.terminating {
                    pod.serving = true;
                    pod.show_ready(true, now);
                    if disrupted
                        .get(&pod.node)
                        .is_some_and(|&first_replacement| pod.uid >= first_replacement)
                    {
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
            Step::Report(i) => self.change(|w, _| {
                let now = w.clock;
                let node = &mut w.nodes[i];
                if node.ready && !node.reported {
                    node.reported = true;
                    for pod in w.pods.iter_mut().filter(|p| p.node == i) {
                        let serving = pod.serving;
                        pod.show_ready(serving, now);
                    }
                }
            }),
            Step::Push => self.change(|w, _| {
                w.template = (w.template + 1).min(TEMPLATES.len() - 1);
            }),
            Step::Tick(seconds) => self.change(|w, _| w.clock += seconds),
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
                    .hash(TEMPLATES[p.template])
                    .on_node(&node_name(p.node))
                    .with_condition(PodCondition {
                        type_: "Ready".into(),
                        status: if p.shown_ready { "True" } else { "False" }.into(),
                        last_transition_time: p.shown_since.map(|t| Time(at(t))),
                        ..Default::default()
                    });
                if p.terminating {
                    b = b.terminating(at(START - 1));
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
            .nodes
            .iter()
            .enumerate()
            .map(|(i, sim_node)| {
                let mut n = node(&node_name(i), sim_node.ready);
                if let Some(ready) = n
                    .status
                    .as_mut()
                    .and_then(|s| s.conditions.as_mut())
                    .and_then(|cs| cs.first_mut())
                {
                    ready.last_transition_time = Some(Time(at(sim_node.ready_since)));
                }
                Arc::new(if sim_node.ready {
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
        // The revision comes from its own watch; it is taken as current here, so that
        // only the budget rule is under test (the rollback race is another check).
        let current = &self.currents[self.truth().template];
        let plan = plan_rolling_update(&RollingInput {
            daemonset: &self.ds,
            current: Some(current),
            pods: &pods,
            nodes: &nodes,
            max_unavailable: self.max_unavailable,
            now: at(self.truth().clock),
            expected_deletions: &pending.deletions,
            vacated_by_us: &pending.vacated,
            limits: self.limits,
            partition: None,
            node_selector: None,
            waves: None,
            proving: None,
            list_upcoming: true,
        });
        prop_assert!(plan.deletions.len() <= self.limits.max_deletions_per_plan);
        self.expectations.settle("ds", &plan.settled);
        let seen_ready: Vec<bool> = self.history[self.nodes_seen]
            .nodes
            .iter()
            .map(|n| n.ready)
            .collect();
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
                .all(|w| w.nodes[node].ready);
            self.change(|w, disrupted| {
                let now = w.clock;
                let first_replacement = w.next_uid;
                let pod = w.pods.iter_mut().find(|p| p.uid == uid).expect("present");
                pod.terminating = true;
                pod.serving = false;
                pod.show_ready(false, now);
                // Whatever it showed: replacing a pod that is not available is ours too.
                // A node already ours stays ours once.
                if steady {
                    disrupted.entry(node).or_insert(first_replacement);
                }
            });
        }
        Ok(())
    }

    fn check_budget(&self) -> Result<(), TestCaseError> {
        let truth = self.truth();
        let nodes = truth.nodes.len();
        let unavailable_by_us = self
            .disrupted_by_us
            .keys()
            .filter(|&&i| truth.nodes[i].ready)
            .count();
        let budget = self.max_unavailable.budget(nodes);
        prop_assert!(
            unavailable_by_us <= budget,
            "{unavailable_by_us} Ready nodes without a serving pod because of our deletions, budget {budget}: {:?}",
            self.disrupted_by_us
        );
        Ok(())
    }

    /// Everything Ready and reported, caches caught up, the world given time: the
    /// rollout finishes.
    fn converge(&mut self) -> Result<(), TestCaseError> {
        let n = self.truth().nodes.len();
        for i in 0..n {
            if !self.truth().nodes[i].ready {
                self.apply(&Step::Flap(i))?;
            }
        }
        for _round in 0..(4 * n + 8) {
            for i in 0..n {
                self.apply(&Step::Report(i))?;
            }
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
            self.apply(&Step::Tick(1))?;
            self.apply(&Step::Reconcile {
                pods_catch_up: usize::MAX / 2,
                nodes_catch_up: usize::MAX / 2,
            })?;
            self.check_budget()?;
            let truth = self.truth();
            let done = (0..n).all(|i| {
                let pods: Vec<&SimPod> = truth.pods.iter().filter(|p| p.node == i).collect();
                matches!(pods.as_slice(), [p] if p.template == truth.template && p.serving && !p.terminating)
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

fn scripted(nodes: usize, max_unavailable: MaxUnavailable) -> Sim {
    Sim::new(&Scenario {
        nodes,
        tolerate_everything: true,
        max_unavailable,
        max_deletions_per_plan: RollingLimits::DEFAULT_MAX_DELETIONS_PER_PLAN,
        steps: vec![],
    })
}

const CAUGHT_UP: Step = Step::Reconcile {
    pods_catch_up: usize::MAX / 2,
    nodes_catch_up: usize::MAX / 2,
};

#[test]
fn the_simulation_can_see_a_budget_violation() {
    // Guards the checker: two deletions on Ready nodes with a budget of one must fail.
    let mut sim = scripted(3, MaxUnavailable::Count(1));
    sim.change(|w, disrupted| {
        for i in 0..2 {
            w.pods[i].terminating = true;
            disrupted.insert(i, w.next_uid);
        }
    });
    assert!(sim.check_budget().is_err());
}

/// Runs steps, checking the budget after each; the first violation is returned.
fn run(sim: &mut Sim, steps: &[Step]) -> Result<(), TestCaseError> {
    for step in steps {
        sim.apply(step)?;
        sim.check_budget()?;
    }
    Ok(())
}

#[test]
fn a_template_pushed_while_replacements_start_keeps_the_budget() {
    // 10 nodes, budget 2: a -> b deletes two a-pods; their b-pods are created but have
    // not started when c is pushed.
    let mut sim = scripted(10, MaxUnavailable::Count(2));
    let mut steps = vec![Step::Push, CAUGHT_UP];
    steps.extend((0..10).map(|_| Step::Finish(0)));
    steps.extend((0..10).map(Step::NativeCreates));
    steps.extend([Step::Push, CAUGHT_UP, CAUGHT_UP]);
    run(&mut sim, &steps).expect("the budget holds");
    sim.converge().expect("the rollout finishes");
}

#[test]
fn nodes_back_from_a_cut_keep_the_budget_while_their_kubelets_report() {
    // 12 nodes cut off with old pods that serve on, back at once, budget 3 (issue #23):
    // replans before any kubelet reported, then some time later, then the reports.
    let mut sim = scripted(12, MaxUnavailable::Count(3));
    let mut steps: Vec<Step> = (0..12).map(Step::Flap).collect();
    steps.push(Step::Push);
    steps.extend((0..12).map(Step::Flap));
    steps.extend([CAUGHT_UP, Step::Tick(2), CAUGHT_UP]);
    steps.extend([Step::Tick(6), CAUGHT_UP, CAUGHT_UP]);
    steps.extend((0..6).map(Step::Report));
    steps.extend([CAUGHT_UP, CAUGHT_UP]);
    run(&mut sim, &steps).expect("the budget holds");
    sim.converge().expect("the rollout finishes");
}
