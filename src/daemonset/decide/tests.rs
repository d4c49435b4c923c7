//! The decision as a table, one row per behaviour of docs/configuration.md's DaemonSet
//! annotations: the world is said in annotations and nodes, as an operator sees it.
use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::PodCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;
use crate::daemonset::failure::rollback::owned_revisions;
use crate::daemonset::policy::{policy_for, Policy, PolicyDecision};
use crate::daemonset::pull_ahead::pull_ahead_of;
use crate::daemonset::revision::CurrentRevision;
use crate::daemonset::rolling_plan::{Blocker, RollingLimits};
use crate::names::{POD_IMAGE_READY_CONDITION, PULL_IMAGE_SUCCESS_REASON};
use crate::revision_message::need_upgrade_message;
use crate::testkit::{at, node, revision, DaemonSetBuilder, PodBuilder};

const NOW: i64 = 1_000_000;

/// The world of one row: Ready nodes `n1..` with an available pod each, old first.
#[derive(Clone, Copy)]
struct Given {
    old: usize,
    new: usize,
    annotations: &'static [(&'static str, &'static str)],
    /// Nodes whose old pod's pull of the new revision succeeded.
    pulled: &'static [&'static str],
    /// Nodes whose old pod's deletion is in flight (not in the cache yet).
    deleting: &'static [&'static str],
    another_updater: bool,
    /// The native controller has written no ControllerRevision yet.
    no_revision: bool,
    /// Nodes whose new pod crash-loops (`CrashLoopBackOff`, not Ready).
    crashing: &'static [&'static str],
    /// Nodes that are NotReady.
    not_ready: &'static [&'static str],
    /// The controller halted this revision before.
    halted_earlier: bool,
    /// The template was put back to the old revision: it is numbered newest again, and
    /// the pods of "new" are the out-of-date ones.
    rolled_back: bool,
    /// Nodes labelled `pool=canary` (for `rollgate.io/waves`).
    canary: &'static [&'static str],
}

const GIVEN: Given = Given {
    old: 0,
    new: 0,
    annotations: &[],
    pulled: &[],
    deleting: &[],
    another_updater: false,
    no_revision: false,
    crashing: &[],
    not_ready: &[],
    halted_earlier: false,
    rolled_back: false,
    canary: &[],
};

/// What the row expects.
#[derive(Debug, PartialEq)]
struct Then {
    step: &'static str,
    delete: Vec<String>,
    pull: Vec<String>,
    held_for_pull: Vec<String>,
    requeue: Option<Duration>,
    keep_memo: bool,
}

fn then(
    step: &'static str,
    delete: &[&str],
    pull: &[&str],
    held_for_pull: &[&str],
    requeue: Option<Duration>,
    keep_memo: bool,
) -> Then {
    let owned = |names: &[&str]| names.iter().map(|n| n.to_string()).collect();
    Then {
        step,
        delete: owned(delete),
        pull: owned(pull),
        held_for_pull: owned(held_for_pull),
        requeue,
        keep_memo,
    }
}

fn daemonset(annotations: &[(&str, &str)]) -> DaemonSet {
    let mut ds = DaemonSetBuilder::new("agent")
        .strategy("AdvancedRollingUpdate")
        .on_delete();
    for (key, value) in annotations {
        ds = match *key {
            "max-unavailable" => ds.max_unavailable(value),
            "paused" => ds.paused(value),
            "partition" => ds.partition(value),
            "node-selector" => ds.node_selector(value),
            "pull-ahead" => ds.pull_ahead(value),
            "failure-threshold" => ds.failure_threshold(value),
            "on-failure" => ds.on_failure(value),
            "rolled-back-from" => ds.rolled_back_from(value),
            "waves" => ds.waves(value),
            "wave-bake" => ds.wave_bake(value),
            other => panic!("no such annotation in this table: {other}"),
        };
    }
    ds.build()
}

fn pulled(hash: &str) -> PodCondition {
    PodCondition {
        type_: POD_IMAGE_READY_CONDITION.into(),
        status: "True".into(),
        reason: Some(PULL_IMAGE_SUCCESS_REASON.into()),
        message: Some(need_upgrade_message(hash)),
        last_transition_time: Some(Time(at(NOW - 60))),
        ..Default::default()
    }
}

/// Observes the row's world as the controller does, and decides.
fn decide_on(given: Given) -> Then {
    let decision = decide_given(given);
    then_of(decision)
}

/// The decision on the row's world.
fn decide_given(given: Given) -> Decision {
    let ds = daemonset(given.annotations);
    let PolicyDecision::Managed(Policy::AdvancedRollingUpdate {
        max_unavailable,
        paused,
        partition,
        node_selector,
        failure,
        waves,
    }) = policy_for(&ds)
    else {
        panic!("the row's annotations must make a valid AdvancedRollingUpdate");
    };
    let revisions = if given.no_revision {
        Vec::new()
    } else if given.rolled_back {
        vec![revision(&ds, "new", 2), revision(&ds, "old", 3)]
    } else {
        vec![revision(&ds, "old", 1), revision(&ds, "new", 2)]
    };
    let current = CurrentRevision::of(&ds, &revisions);
    let mut pods = Vec::new();
    let mut nodes = Vec::new();
    for i in 1..=given.old + given.new {
        let name = format!("n{i}");
        let hash = if i <= given.old { "old" } else { "new" };
        let mut pod = PodBuilder::new(&format!("p{i}"), &ds)
            .hash(hash)
            .on_node(&name);
        pod = if given.crashing.contains(&name.as_str()) {
            pod.not_ready()
                .container("main", false, Some("CrashLoopBackOff"), 2)
        } else {
            pod.ready_since(at(NOW - 3600))
        };
        if given.pulled.contains(&name.as_str()) {
            pod = pod.with_condition(pulled("new"));
        }
        pods.push(Arc::new(CachedPod::from(pod.build())));
        let ready = !given.not_ready.contains(&name.as_str());
        let mut node = node(&name, ready);
        if given.canary.contains(&name.as_str()) {
            node.metadata.labels = Some(BTreeMap::from([("pool".into(), "canary".into())]));
        }
        nodes.push(Arc::new(CachedNode::from(node)));
    }
    let expected_deletions: BTreeSet<String> = given
        .deleting
        .iter()
        .map(|node| format!("uid-p{}", &node[1..]))
        .collect();
    let vacated = BTreeMap::new();
    let mut memo = PlanMemo::default();
    memo.refresh(&ds, current.as_ref(), &pods, &nodes);
    let mut tries = PullTries::default();
    tries.observe(&pods, "new");
    let unseen = BTreeSet::new();
    let pull_ahead = pull_ahead_of(&ds);
    let hash = current.as_ref().and_then(|c| c.hash.as_deref());
    let world = World {
        other_updater: given.another_updater.then(|| {
            let sighting = Sighting {
                namespace: "edge".into(),
                daemonset: "agent".into(),
                component: "yurt-manager".into(),
                what: "Deleted pod: p1".into(),
                at: at(NOW - 270),
            };
            (sighting, Duration::from_secs(30))
        }),
        pulls: match (&pull_ahead, hash) {
            (Ok(true), Some(hash)) => Some(PullsObserved {
                pods: &pods,
                hash,
                tries: &tries,
                unseen: &unseen,
            }),
            _ => None,
        },
        pull_ahead,
        paused,
        plan: RollingInput {
            daemonset: &ds,
            current: current.as_ref(),
            pods: &[],
            nodes: &[],
            max_unavailable,
            now: at(NOW),
            expected_deletions: &expected_deletions,
            vacated_by_us: &vacated,
            limits: RollingLimits::default(),
            partition,
            node_selector: node_selector.as_ref(),
            waves: waves.as_ref(),
            proving: None,
            list_upcoming: false,
        },
        memo: &memo,
        pull_ahead_limits: PullAheadLimits::default(),
        failure,
        halted_earlier: given.halted_earlier,
        revisions: owned_revisions(&ds, &revisions),
    };
    decide(&world)
}

/// What a row reads of a decision.
fn then_of(decision: Decision) -> Then {
    let nodes_of = |deletions: &[crate::daemonset::rolling_plan::PlannedDeletion]| {
        deletions.iter().map(|d| d.node.clone()).collect()
    };
    let (step, delete, pull, held_for_pull, requeue) = match decision.step {
        Step::StepBack { requeue, .. } => ("step back", vec![], vec![], vec![], Some(requeue)),
        Step::RefusePullAhead(_) => ("refuse", vec![], vec![], vec![], None),
        Step::WaitForRevision { .. } => ("wait for revision", vec![], vec![], vec![], None),
        Step::Roll(rollout)
            if matches!(
                rollout.plan.progress.blocked,
                Some(Blocker::RolledBackBefore { .. })
            ) =>
        {
            assert!(rollout.halt.is_none() && rollout.plan.deletions.is_empty());
            let pulls = rollout.pulls.map(|p| p.requests.len()).unwrap_or(0);
            assert_eq!(pulls, 0, "a held revision asks for no pull");
            ("held", vec![], vec![], vec![], Some(rollout.requeue))
        }
        Step::Roll(rollout) if rollout.halt.is_some() => {
            assert!(
                matches!(rollout.plan.progress.blocked, Some(Blocker::Halted { .. })),
                "a halt says so in the plan: {:?}",
                rollout.plan.progress.blocked
            );
            let pulls = rollout.pulls.map(|p| p.requests.len()).unwrap_or(0);
            assert_eq!(pulls, 0, "a halt asks for no pull");
            let rolls_back = rollout.halt.as_ref().unwrap().rollback_target().is_some();
            (
                if rolls_back { "roll back" } else { "halt" },
                nodes_of(&rollout.plan.deletions),
                vec![],
                vec![],
                Some(rollout.requeue),
            )
        }
        Step::Roll(rollout) => {
            let pulls = rollout.pulls.unwrap_or(PullAheadPlan {
                deletions: Vec::new(),
                held: Vec::new(),
                requests: Vec::new(),
                gave_up: Vec::new(),
                in_flight: 0,
            });
            (
                "roll",
                nodes_of(&rollout.plan.deletions),
                pulls.requests.iter().map(|r| r.node.clone()).collect(),
                pulls.held,
                Some(rollout.requeue),
            )
        }
    };
    Then {
        step,
        delete,
        pull,
        held_for_pull,
        requeue,
        keep_memo: decision.keep_memo,
    }
}

#[test]
fn the_decision_reads_like_the_docs() {
    let s = Duration::from_secs;
    #[rustfmt::skip]
    let rows: Vec<(&str, Given, Then)> = vec![
        ("three old nodes, max-unavailable 1: the first is deleted",
            Given { old: 3, annotations: &[("max-unavailable", "1")], ..GIVEN },
            then("roll", &["n1"], &[], &[], Some(RESYNC), true)),
        ("max-unavailable 2: two at once",
            Given { old: 3, annotations: &[("max-unavailable", "2")], ..GIVEN },
            then("roll", &["n1", "n2"], &[], &[], Some(RESYNC), true)),
        ("a deletion in flight uses the budget, and is looked at again soon",
            Given { old: 3, annotations: &[("max-unavailable", "1")], deleting: &["n1"], ..GIVEN },
            then("roll", &[], &[], &[], Some(PENDING_RECHECK), true)),
        ("paused: the plan is made, its deletions held",
            Given { old: 3, annotations: &[("max-unavailable", "1"), ("paused", "true")], ..GIVEN },
            then("roll", &[], &[], &[], Some(RESYNC), true)),
        ("partition 1: the first name stays old",
            Given { old: 2, annotations: &[("max-unavailable", "2"), ("partition", "1")], ..GIVEN },
            then("roll", &["n2"], &[], &[], Some(RESYNC), true)),
        ("partition 1, the rest done: held back, the memo dropped",
            Given { old: 1, new: 1, annotations: &[("partition", "1")], ..GIVEN },
            then("roll", &[], &[], &[], Some(RESYNC), false)),
        ("every node on the new revision: complete, the memo dropped",
            Given { new: 3, ..GIVEN },
            then("roll", &[], &[], &[], Some(RESYNC), false)),
        ("pull-ahead, nothing pulled yet: the wave waits, it and the next wave pull",
            Given { old: 3, annotations: &[("max-unavailable", "1"), ("pull-ahead", "true")], ..GIVEN },
            then("roll", &[], &["n1", "n2"], &["n1"], Some(RESYNC), true)),
        ("pull-ahead, n1 pulled: n1 is deleted, n2 pulls",
            Given { old: 3, annotations: &[("max-unavailable", "1"), ("pull-ahead", "true")], pulled: &["n1"], ..GIVEN },
            then("roll", &["n1"], &["n2"], &[], Some(RESYNC), true)),
        ("pull-ahead and paused: no deletion and no new pull",
            Given { old: 3, annotations: &[("max-unavailable", "1"), ("pull-ahead", "true"), ("paused", "true")], pulled: &["n1"], ..GIVEN },
            then("roll", &[], &[], &[], Some(RESYNC), true)),
        ("pull-ahead false: as without it",
            Given { old: 3, annotations: &[("max-unavailable", "1"), ("pull-ahead", "false")], ..GIVEN },
            then("roll", &["n1"], &[], &[], Some(RESYNC), true)),
        ("pull-ahead maybe: refused, nothing deleted",
            Given { old: 3, annotations: &[("pull-ahead", "maybe")], ..GIVEN },
            then("refuse", &[], &[], &[], None, true)),
        ("another updater deleted a pod lately: step back until it is quiet",
            Given { old: 3, another_updater: true, ..GIVEN },
            then("step back", &[], &[], &[], Some(s(31)), true)),
        ("no ControllerRevision yet: wait on the native controller",
            Given { old: 3, no_revision: true, ..GIVEN },
            then("wait for revision", &[], &[], &[], None, true)),
        // Failures: the new pods are n4.. (after the old ones).
        ("one new pod crash-loops, threshold 2: below it, the rollout goes on within the budget",
            Given { old: 3, new: 1, crashing: &["n4"], annotations: &[("max-unavailable", "2"), ("failure-threshold", "2")], ..GIVEN },
            then("roll", &["n1"], &[], &[], Some(RESYNC), true)),
        ("two crash-loop, threshold 2: halted, nothing deleted",
            Given { old: 3, new: 2, crashing: &["n4", "n5"], annotations: &[("max-unavailable", "3"), ("failure-threshold", "2")], ..GIVEN },
            then("halt", &[], &[], &[], Some(RESYNC), true)),
        ("the default threshold 3 is capped by the budget 1: one crash-loop halts",
            Given { old: 3, new: 1, crashing: &["n4"], annotations: &[("max-unavailable", "1")], ..GIVEN },
            then("halt", &[], &[], &[], Some(RESYNC), true)),
        ("a percentage: 50% of the 2 pods the revision reached is 1",
            Given { old: 3, new: 2, crashing: &["n5"], annotations: &[("max-unavailable", "3"), ("failure-threshold", "50%")], ..GIVEN },
            then("halt", &[], &[], &[], Some(RESYNC), true)),
        ("a crash-looping pod on a NotReady node is no failure: the rollout goes on, the revision still proving itself (threshold 2, one node unavailable)",
            Given { old: 3, new: 2, crashing: &["n4", "n5"], not_ready: &["n5"], annotations: &[("max-unavailable", "3"), ("failure-threshold", "2")], ..GIVEN },
            then("roll", &["n1"], &[], &[], Some(RESYNC), true)),
        ("a new revision proves itself: threshold 2, budget 4, two nodes first",
            Given { old: 6, annotations: &[("max-unavailable", "4"), ("failure-threshold", "2")], ..GIVEN },
            then("roll", &["n1", "n2"], &[], &[], Some(RESYNC), true)),
        ("proven on two nodes: the whole budget",
            Given { old: 6, new: 2, annotations: &[("max-unavailable", "4"), ("failure-threshold", "2")], ..GIVEN },
            then("roll", &["n1", "n2", "n3", "n4"], &[], &[], Some(RESYNC), true)),
        ("a percentage threshold proves itself on that share of the base: 25% of 8 is 2",
            Given { old: 8, annotations: &[("max-unavailable", "4"), ("failure-threshold", "25%")], ..GIVEN },
            then("roll", &["n1", "n2"], &[], &[], Some(RESYNC), true)),
        ("on-failure continue: nothing to prove, the whole budget",
            Given { old: 6, annotations: &[("max-unavailable", "4"), ("failure-threshold", "2"), ("on-failure", "continue")], ..GIVEN },
            then("roll", &["n1", "n2", "n3", "n4"], &[], &[], Some(RESYNC), true)),
        ("halted earlier, a failed node gone NotReady: the halt holds while a failure is left",
            Given { old: 3, new: 2, crashing: &["n4", "n5"], not_ready: &["n5"], halted_earlier: true, annotations: &[("max-unavailable", "3"), ("failure-threshold", "2")], ..GIVEN },
            then("halt", &[], &[], &[], Some(RESYNC), true)),
        ("halted earlier, no failure left (fixed outside the template): the rollout goes on",
            Given { old: 3, new: 2, halted_earlier: true, annotations: &[("max-unavailable", "1"), ("failure-threshold", "2")], ..GIVEN },
            then("roll", &["n1"], &[], &[], Some(RESYNC), true)),
        ("on-failure continue: failures are reported, the rollout goes on",
            Given { old: 3, new: 2, crashing: &["n4", "n5"], annotations: &[("max-unavailable", "3"), ("failure-threshold", "2"), ("on-failure", "continue")], ..GIVEN },
            then("roll", &["n1"], &[], &[], Some(RESYNC), true)),
        ("on-failure rollback: halted, and the template goes back to the old revision",
            Given { old: 3, new: 2, crashing: &["n4", "n5"], annotations: &[("max-unavailable", "3"), ("failure-threshold", "2"), ("on-failure", "rollback")], ..GIVEN },
            then("roll back", &[], &[], &[], Some(RESYNC), true)),
        ("on-failure rollback, the old revision rolled back from before: nowhere to go, halted",
            Given { old: 3, new: 2, crashing: &["n4", "n5"], annotations: &[("max-unavailable", "3"), ("failure-threshold", "2"), ("on-failure", "rollback"), ("rolled-back-from", "old")], ..GIVEN },
            then("halt", &[], &[], &[], Some(RESYNC), true)),
        ("after the rollback: the failed pods are replaced first, within the budget",
            Given { old: 3, new: 2, crashing: &["n4", "n5"], rolled_back: true, annotations: &[("max-unavailable", "2"), ("on-failure", "rollback"), ("rolled-back-from", "new")], ..GIVEN },
            then("roll", &["n4", "n5"], &[], &[], Some(RESYNC), true)),
        ("the template back on a revision rolled back from: held, nothing deleted, even with continue",
            Given { old: 3, annotations: &[("max-unavailable", "2"), ("on-failure", "continue"), ("rolled-back-from", "new")], ..GIVEN },
            then("held", &[], &[], &[], Some(RESYNC), true)),
        ("held, with pull-ahead: nothing pulled either",
            Given { old: 3, annotations: &[("max-unavailable", "2"), ("pull-ahead", "true"), ("rolled-back-from", "x,new")], ..GIVEN },
            then("held", &[], &[], &[], Some(RESYNC), true)),
        // Waves: `pool=canary` first, then the rest; the new pods have been Ready an hour.
        ("waves: only the canary wave's node goes first, whatever the budget",
            Given { old: 4, canary: &["n3"], annotations: &[("max-unavailable", "2"), ("waves", "pool=canary; *")], ..GIVEN },
            then("roll", &["n3"], &[], &[], Some(RESYNC), true)),
        ("the canary on the new revision, baking: the rest waits, looked at again when the bake ends",
            Given { old: 3, new: 1, canary: &["n4"], annotations: &[("max-unavailable", "2"), ("waves", "pool=canary; *"), ("wave-bake", "7200s")], ..GIVEN },
            then("roll", &[], &[], &[], Some(s(3600) + RECHECK_SLACK), true)),
        ("the canary baked: the next wave goes within the budget",
            Given { old: 3, new: 1, canary: &["n4"], annotations: &[("max-unavailable", "2"), ("waves", "pool=canary; *"), ("wave-bake", "30m")], ..GIVEN },
            then("roll", &["n1", "n2"], &[], &[], Some(RESYNC), true)),
        ("the canary crash-loops below the threshold: the next wave waits",
            Given { old: 3, new: 1, canary: &["n4"], crashing: &["n4"], annotations: &[("max-unavailable", "2"), ("failure-threshold", "2"), ("waves", "pool=canary; *")], ..GIVEN },
            then("roll", &[], &[], &[], Some(RESYNC), true)),
        ("the canary wave's only node is NotReady: nothing proves the revision, the next wave waits",
            Given { old: 3, new: 1, canary: &["n4"], not_ready: &["n4"], annotations: &[("max-unavailable", "2"), ("waves", "pool=canary; *")], ..GIVEN },
            then("roll", &[], &[], &[], Some(RESYNC), true)),
        ("a node in no wave stays old",
            Given { old: 3, canary: &["n2"], annotations: &[("max-unavailable", "3"), ("waves", "pool=canary")], ..GIVEN },
            then("roll", &["n2"], &[], &[], Some(RESYNC), true)),
        ("waves with a partition: the partition keeps the first names, the canary goes first",
            Given { old: 4, canary: &["n1", "n4"], annotations: &[("max-unavailable", "4"), ("partition", "1"), ("waves", "pool=canary; *")], ..GIVEN },
            then("roll", &["n4"], &[], &[], Some(RESYNC), true)),
        ("waves with pull-ahead: only the current wave pulls",
            Given { old: 3, canary: &["n3"], annotations: &[("max-unavailable", "1"), ("pull-ahead", "true"), ("waves", "pool=canary; *")], ..GIVEN },
            then("roll", &[], &["n3"], &["n3"], Some(RESYNC), true)),
        ("waves and paused: nothing deleted, the wave as it was",
            Given { old: 3, canary: &["n3"], annotations: &[("max-unavailable", "1"), ("paused", "true"), ("waves", "pool=canary; *")], ..GIVEN },
            then("roll", &[], &[], &[], Some(RESYNC), true)),
        ("halted and pull-ahead: no deletion and no pull",
            Given { old: 3, new: 2, crashing: &["n4", "n5"], annotations: &[("max-unavailable", "3"), ("failure-threshold", "2"), ("pull-ahead", "true")], pulled: &["n1"], ..GIVEN },
            then("halt", &[], &[], &[], Some(RESYNC), true)),
    ];
    for (says, given, expected) in rows {
        assert_eq!(decide_on(given), expected, "{says}");
    }
}

mod budget {
    use super::*;
    use proptest::prelude::*;

    /// Leaks a list for the row's `'static` slices (a test's few bytes).
    fn leak(names: Vec<String>) -> &'static [&'static str] {
        let names: Vec<&'static str> = names
            .into_iter()
            .map(|n| &*Box::leak(n.into_boxed_str()))
            .collect();
        Box::leak(names.into_boxed_slice())
    }

    proptest! {
        /// Whatever fails where, before or after a rollback: a halt (and its rollback)
        /// deletes nothing, and no decision leaves more Ready nodes unavailable than the
        /// budget (the deletions of this step plus the nodes already unavailable),
        /// NotReady nodes' failures never halting it alone.
        #[test]
        fn the_budget_holds_and_a_halt_deletes_nothing(
            old in 0..6usize,
            new in 0..6usize,
            crashing_mask in any::<u16>(),
            not_ready_mask in any::<u16>(),
            budget in 1..4u32,
            threshold in 1..4u32,
            halted_earlier in any::<bool>(),
            rolled_back in any::<bool>(),
        ) {
            let total = old + new;
            let name = |i: usize| format!("n{}", i + 1);
            // Only new pods crash; any node may be NotReady.
            let crashing: Vec<String> = (old..total).filter(|i| crashing_mask & (1 << i) != 0).map(name).collect();
            let not_ready: Vec<String> = (0..total).filter(|i| not_ready_mask & (1 << i) != 0).map(name).collect();
            // After a rollback the crashing pods are of the revision rolled back from: out of
            // date, replaced first, and no failure of the current revision.
            let failed_on_ready = if rolled_back {
                0
            } else {
                crashing.iter().filter(|n| !not_ready.contains(n)).count()
            };
            let annotations: &'static [(&'static str, &'static str)] = Box::leak(Box::new([
                ("max-unavailable", &*Box::leak(budget.to_string().into_boxed_str())),
                ("failure-threshold", &*Box::leak(threshold.to_string().into_boxed_str())),
                ("on-failure", "rollback"),
                ("rolled-back-from", if rolled_back { "new" } else { "" }),
            ]));
            let decision = decide_given(Given {
                old,
                new,
                crashing: leak(crashing),
                not_ready: leak(not_ready),
                halted_earlier: halted_earlier && !rolled_back,
                rolled_back,
                annotations,
                ..GIVEN
            });
            let Step::Roll(rollout) = decision.step else {
                return Err(TestCaseError::fail("a plain world rolls"));
            };
            let p = &rollout.plan.progress;
            prop_assert!(rollout.plan.deletions.len() + p.unavailable <= p.budget.max(p.unavailable),
                "{} deletions with {} unavailable, budget {}", rollout.plan.deletions.len(), p.unavailable, p.budget);
            if let Some(halt) = &rollout.halt {
                prop_assert!(rollout.plan.deletions.is_empty(), "a halt deleted");
                prop_assert!(halt.rollback_target().is_some_and(|t| t.hash == "old"), "a halt of new goes back to old");
                prop_assert!(failed_on_ready > 0, "halted with no failure on a Ready node");
            }
            let at = (threshold as usize).min(p.budget.max(1));
            if failed_on_ready >= at {
                prop_assert!(rollout.halt.is_some(), "{failed_on_ready} failures, threshold {at}: not halted");
            }
            if !halted_earlier && failed_on_ready < at {
                prop_assert!(rollout.halt.is_none(), "halted below the threshold");
            }
        }

        /// A revision that crash-loops on every node it reaches, each new pod failing at
        /// once (the worst case: no plan in between sees it starting): the rollout stops
        /// with no more nodes on it than the threshold (at most the budget), whatever
        /// the budget. Before a revision proved itself, the whole budget went at once.
        #[test]
        fn a_revision_failing_everywhere_fails_on_no_more_nodes_than_the_threshold(
            nodes in 1..40usize,
            budget in 1..12u32,
            threshold in 1..12u32,
            rollback in any::<bool>(),
        ) {
            let annotations: &'static [(&'static str, &'static str)] = Box::leak(Box::new([
                ("max-unavailable", &*Box::leak(budget.to_string().into_boxed_str())),
                ("failure-threshold", &*Box::leak(threshold.to_string().into_boxed_str())),
                ("on-failure", if rollback { "rollback" } else { "halt" }),
            ]));
            let (mut old, mut new) = (nodes, 0);
            loop {
                let crashing = leak((old + 1..=nodes).map(|i| format!("n{i}")).collect());
                let decision = decide_given(Given { old, new, crashing, annotations, ..GIVEN });
                let Step::Roll(rollout) = decision.step else {
                    return Err(TestCaseError::fail("a plain world rolls"));
                };
                let deleted = rollout.plan.deletions.len();
                if rollout.halt.is_some() || deleted == 0 {
                    break;
                }
                old -= deleted;
                new += deleted;
            }
            let most = (threshold.min(budget) as usize).min(nodes);
            prop_assert!(new <= most, "{new} nodes on the failing revision, threshold {threshold}, budget {budget}");
        }

        /// Waves: whatever fails or is cut off where, a node outside the canary wave is
        /// deleted only once every Ready canary node runs the new revision, available
        /// (at least one does), and the budget holds.
        #[test]
        fn a_later_wave_waits_for_a_proven_canary(
            old in 0..6usize,
            new in 0..6usize,
            canary_mask in any::<u16>(),
            crashing_mask in any::<u16>(),
            not_ready_mask in any::<u16>(),
            budget in 1..4u32,
            baked in any::<bool>(),
        ) {
            let total = old + new;
            let name = |i: usize| format!("n{}", i + 1);
            let pick = |mask: u16, from: usize| -> Vec<String> {
                (from..total).filter(|i| mask & (1 << i) != 0).map(name).collect()
            };
            let canary = pick(canary_mask, 0);
            let crashing = pick(crashing_mask, old);
            let not_ready = pick(not_ready_mask, 0);
            let annotations: &'static [(&'static str, &'static str)] = Box::leak(Box::new([
                ("max-unavailable", &*Box::leak(budget.to_string().into_boxed_str())),
                ("failure-threshold", "100%"),
                ("waves", "pool=canary; *"),
                // The new pods have been Ready an hour.
                ("wave-bake", if baked { "30m" } else { "7200s" }),
            ]));
            let decision = decide_given(Given {
                old,
                new,
                canary: leak(canary.clone()),
                crashing: leak(crashing.clone()),
                not_ready: leak(not_ready.clone()),
                annotations,
                ..GIVEN
            });
            let Step::Roll(rollout) = decision.step else {
                return Err(TestCaseError::fail("a plain world rolls"));
            };
            let p = &rollout.plan.progress;
            prop_assert!(rollout.plan.deletions.len() + p.unavailable <= p.budget.max(p.unavailable));
            let ready_canary: Vec<usize> = (0..total)
                .filter(|i| canary.contains(&name(*i)) && !not_ready.contains(&name(*i)))
                .collect();
            let proven = !ready_canary.is_empty()
                && ready_canary.iter().all(|i| *i >= old && !crashing.contains(&name(*i)));
            let canary_counted = (0..total).any(|i| canary.contains(&name(i)));
            for deletion in &rollout.plan.deletions {
                if !canary.contains(&deletion.node) {
                    prop_assert!(!canary_counted || (proven && baked),
                        "{} deleted with the canary wave not proven and baked: canary {canary:?}, crashing {crashing:?}, NotReady {not_ready:?}", deletion.node);
                }
            }
        }
    }
}
