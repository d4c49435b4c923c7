//! The planner's table tests: one behaviour of the module's rules each.
use super::*;
use crate::testkit::{at, node, revision, tainted, DaemonSetBuilder, PodBuilder};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

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
) -> OwnedInput {
    OwnedInput {
        ds: ds.clone(),
        current: CurrentRevision::of(ds, revisions),
        pods: pods.into_iter().map(Arc::new).collect(),
        nodes: nodes.into_iter().map(Arc::new).collect(),
        max_unavailable,
        now: at(NOW),
        expected_deletions: BTreeSet::new(),
        vacated_by_us: BTreeMap::new(),
        limits: RollingLimits::default(),
        partition: None,
        node_selector: None,
        waves: None,
        proving: None,
    }
}

fn plan(case: &OwnedInput) -> RollingPlan {
    plan_rolling_update(&case.input())
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

#[test]
fn a_revision_proves_itself_on_the_threshold_before_the_whole_budget() {
    let (ds, revisions) = upgrading(0);
    let names = ["n1", "n2", "n3", "n4", "n5", "n6"];
    let mut pods: Vec<Pod> = names
        .iter()
        .map(|node| old_available(&ds, &format!("p-{node}"), node))
        .collect();
    let mut case = input(
        &ds,
        &revisions,
        pods.clone(),
        ready_nodes(&names),
        MaxUnavailable::Count(4),
    );
    case.proving = Some(IntOrPercent::Count(2));
    let first = plan(&case);
    let deleted: Vec<&str> = first.deletions.iter().map(|d| d.node.as_str()).collect();
    assert_eq!(deleted, ["n1", "n2"], "two nodes prove the revision first");
    assert_eq!(
        first.progress.proving,
        Some(Proving {
            available: 0,
            needed: 2
        })
    );
    assert_eq!(first.progress.budget, 4, "the budget itself is unchanged");
    assert!(
        crate::daemonset::describe::describe(&first.progress)
            .contains("proving the revision: 0 of its pods available, and until 2 are"),
        "{}",
        crate::daemonset::describe::describe(&first.progress)
    );

    // One new pod available, one starting: one more node may go, still two at most.
    pods[0] = new_available(&ds, "p-n1-new", "n1");
    pods[1] = PodBuilder::new("p-n2-new", &ds)
        .hash("new")
        .on_node("n2")
        .not_ready()
        .build();
    case.pods = pods.iter().cloned().map(Arc::new).collect();
    let one = plan(&case);
    let deleted: Vec<&str> = one.deletions.iter().map(|d| d.node.as_str()).collect();
    assert_eq!(deleted, ["n3"]);

    // Proven on two: the whole budget.
    pods[1] = new_available(&ds, "p-n2-new", "n2");
    case.pods = pods.iter().cloned().map(Arc::new).collect();
    let proven = plan(&case);
    assert_eq!(proven.progress.proving, None);
    assert_eq!(proven.deletions.len(), 4);

    // A threshold at the budget, or no threshold: nothing to prove.
    pods[0] = old_available(&ds, "p-n1", "n1");
    pods[1] = old_available(&ds, "p-n2", "n2");
    case.pods = pods.iter().cloned().map(Arc::new).collect();
    for proving in [Some(IntOrPercent::Count(4)), None] {
        case.proving = proving;
        let whole = plan(&case);
        assert_eq!((whole.deletions.len(), whole.progress.proving), (4, None));
    }
}

#[test]
fn a_paused_plan_holds_its_deletions_and_keeps_its_counts() {
    let (ds, revisions) = upgrading(0);
    let pods = vec![
        old_available(&ds, "a", "n1"),
        old_available(&ds, "b", "n2"),
        new_available(&ds, "c", "n3"),
    ];
    let case = input(
        &ds,
        &revisions,
        pods,
        ready_nodes(&["n1", "n2", "n3"]),
        MaxUnavailable::Count(2),
    );
    let running = plan(&case);
    assert_eq!(
        running.deletions.len(),
        2,
        "premise: two deletions within budget"
    );
    let paused = running.clone().paused();
    assert!(paused.deletions.is_empty());
    assert_eq!(paused.progress.blocked, Some(Blocker::Paused { held: 2 }));
    assert_eq!(
        (
            paused.progress.updated,
            paused.progress.budget,
            paused.progress.candidates
        ),
        (
            running.progress.updated,
            running.progress.budget,
            running.progress.candidates
        )
    );

    // A complete rollout stays complete when paused.
    let done = input(
        &ds,
        &revisions,
        vec![new_available(&ds, "c", "n3")],
        ready_nodes(&["n3"]),
        MaxUnavailable::Count(2),
    );
    assert!(plan(&done).paused().is_complete());
}

/// A node's state in the control tables.
#[derive(Clone, Copy)]
enum Is {
    Old,
    /// Old, and its pod not Ready: replaced first without controls.
    OldNotAvailable,
    New,
    /// NotReady, with an old pod.
    OldNotReady,
}

/// Five nodes n1..n5 in the given states; n1 and n2 are `pool=a`, n3 and n4
/// `pool=b`, n5 has no pool label.
fn five(ds: &DaemonSet, states: [Is; 5]) -> (Vec<Pod>, Vec<Node>) {
    let (mut pods, mut nodes) = (Vec::new(), Vec::new());
    for (i, state) in states.into_iter().enumerate() {
        let name = format!("n{}", i + 1);
        let mut n = node(&name, !matches!(state, Is::OldNotReady));
        if i < 4 {
            let pool = if i < 2 { "a" } else { "b" };
            n.metadata.labels = Some([("pool".to_string(), pool.to_string())].into());
        }
        nodes.push(n);
        let pod = format!("p{}", i + 1);
        pods.push(match state {
            Is::Old | Is::OldNotReady => old_available(ds, &pod, &name),
            Is::New => new_available(ds, &pod, &name),
            Is::OldNotAvailable => PodBuilder::new(&pod, ds)
                .hash("old")
                .on_node(&name)
                .not_ready()
                .build(),
        });
    }
    (pods, nodes)
}

fn strings(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

#[test]
fn a_partition_keeps_the_old_nodes_whose_names_sort_first() {
    use Is::*;
    let (ds, revisions) = upgrading(0);
    // (partition, max-unavailable, states, deleted, kept, blocked)
    type Case = (
        Partition,
        u32,
        [Is; 5],
        &'static [&'static str],
        &'static [&'static str],
        Option<Blocker>,
    );
    let cases: &[Case] = &[
        (
            Partition::Count(2),
            5,
            [Old; 5],
            &["n3", "n4", "n5"],
            &["n1", "n2"],
            None,
        ),
        // The budget counts as before: one at a time.
        (
            Partition::Count(2),
            1,
            [Old; 5],
            &["n3"],
            &["n1", "n2"],
            Some(Blocker::BudgetExhausted {
                unavailable: vec![],
            }),
        ),
        // Reached: only the kept nodes are old.
        (
            Partition::Count(2),
            5,
            [Old, Old, New, New, New],
            &[],
            &["n1", "n2"],
            Some(Blocker::HeldBack),
        ),
        // 50% of 5 rounds up to 3.
        (
            Partition::Percent(50),
            5,
            [Old; 5],
            &["n4", "n5"],
            &["n1", "n2", "n3"],
            None,
        ),
        // A node that is new already (joined, or upgraded before) is not kept.
        (
            Partition::Count(2),
            5,
            [New, Old, Old, Old, Old],
            &["n4", "n5"],
            &["n2", "n3"],
            None,
        ),
        (
            Partition::Count(9),
            5,
            [Old; 5],
            &[],
            &["n1", "n2", "n3", "n4", "n5"],
            Some(Blocker::HeldBack),
        ),
        // A kept pod that serves nothing is kept all the same.
        (
            Partition::Count(1),
            5,
            [OldNotAvailable, Old, Old, New, New],
            &["n2", "n3"],
            &["n1"],
            None,
        ),
        // A NotReady node can be kept; then nothing waits on it.
        (
            Partition::Count(1),
            5,
            [OldNotReady, New, New, New, New],
            &[],
            &["n1"],
            Some(Blocker::HeldBack),
        ),
        // One not kept is waited on as usual.
        (
            Partition::Count(1),
            5,
            [Old, OldNotReady, New, New, New],
            &[],
            &["n1"],
            Some(Blocker::WaitingForSkippedNodes {
                nodes: strings(&["n2"]),
            }),
        ),
    ];
    for (i, (partition, max, states, deleted, kept, blocked)) in cases.iter().enumerate() {
        let (pods, nodes) = five(&ds, *states);
        let mut case = input(&ds, &revisions, pods, nodes, MaxUnavailable::Count(*max));
        let free = plan(&case);
        case.partition = Some(*partition);
        let planned = plan(&case);
        let names: Vec<&str> = planned.deletions.iter().map(|d| d.node.as_str()).collect();
        assert_eq!(&names, deleted, "case {i}: deletions");
        assert_eq!(
            planned.progress.kept_by_partition,
            strings(kept),
            "case {i}: kept"
        );
        assert_eq!(planned.progress.blocked, *blocked, "case {i}: blocked");
        assert_eq!(
            planned.progress.partition,
            Some(partition.kept(5)),
            "case {i}"
        );
        assert_eq!(
            (
                planned.progress.budget,
                planned.progress.unavailable,
                planned.progress.total_nodes
            ),
            (
                free.progress.budget,
                free.progress.unavailable,
                free.progress.total_nodes
            ),
            "case {i}: the budget counts as without a partition"
        );
    }
}

#[test]
fn a_node_selector_upgrades_only_the_nodes_it_matches_and_holds_the_rest() {
    use Is::*;
    let (ds, revisions) = upgrading(0);
    // (selector, states, deleted, held, blocked)
    type Case = (
        &'static str,
        [Is; 5],
        &'static [&'static str],
        &'static [&'static str],
        Option<Blocker>,
    );
    let cases: &[Case] = &[
        ("pool=a", [Old; 5], &["n1", "n2"], &["n3", "n4", "n5"], None),
        (
            "pool=a",
            [New, New, Old, Old, Old],
            &[],
            &["n3", "n4", "n5"],
            Some(Blocker::HeldBack),
        ),
        // Widened: the next pool goes.
        (
            "pool in (a,b)",
            [New, New, Old, Old, Old],
            &["n3", "n4"],
            &["n5"],
            None,
        ),
        (
            "pool",
            [New, New, New, New, Old],
            &[],
            &["n5"],
            Some(Blocker::HeldBack),
        ),
        ("!pool", [New, New, New, New, Old], &["n5"], &[], None),
        // An unmatched NotReady node is held back, not waited on.
        (
            "pool=a",
            [New, New, OldNotReady, New, New],
            &[],
            &["n3"],
            Some(Blocker::HeldBack),
        ),
        // Nothing old is left: complete, whatever the selector.
        ("pool=a", [New; 5], &[], &[], Some(Blocker::Complete)),
    ];
    for (i, (selector, states, deleted, held, blocked)) in cases.iter().enumerate() {
        let (pods, nodes) = five(&ds, *states);
        let mut case = input(&ds, &revisions, pods, nodes, MaxUnavailable::Count(5));
        let free = plan(&case);
        case.node_selector = Some(NodeSelector::parse(selector).unwrap());
        let planned = plan(&case);
        let names: Vec<&str> = planned.deletions.iter().map(|d| d.node.as_str()).collect();
        assert_eq!(&names, deleted, "case {i}: deletions");
        assert_eq!(
            planned.progress.held_by_selector,
            strings(held),
            "case {i}: held"
        );
        assert_eq!(planned.progress.blocked, *blocked, "case {i}: blocked");
        assert!(planned.progress.kept_by_partition.is_empty());
        assert_eq!(planned.progress.partition, None);
        assert_eq!(
            (planned.progress.budget, planned.progress.unavailable),
            (free.progress.budget, free.progress.unavailable),
            "case {i}: the budget counts as without a selector"
        );
    }

    // With a partition: the held-back nodes count toward it first.
    let (pods, nodes) = five(&ds, [Old; 5]);
    let mut case = input(&ds, &revisions, pods, nodes, MaxUnavailable::Count(5));
    case.node_selector = Some(NodeSelector::parse("pool in (a,b)").unwrap());
    case.partition = Some(Partition::Count(2));
    let planned = plan(&case);
    let names: Vec<&str> = planned.deletions.iter().map(|d| d.node.as_str()).collect();
    assert_eq!(names, ["n2", "n3", "n4"]);
    assert_eq!(planned.progress.kept_by_partition, strings(&["n1"]));
    assert_eq!(planned.progress.held_by_selector, strings(&["n5"]));
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
    let plan = plan(&input(
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
    assert_eq!(
        plan.progress.blocked,
        Some(Blocker::BudgetExhausted {
            unavailable: vec![]
        })
    );
}

/// Item 4 of issue 23: an old pod on a node where the DaemonSet no longer places a
/// pod is kept (the native controller would not recreate it), reported, and left
/// out of the rollout's counts; everything else upgrades as usual.
#[test]
fn old_pods_where_the_daemonset_no_longer_places_one_are_kept_and_reported() {
    let (ds, revisions) = upgrading(0);
    let untolerated = Taint {
        key: "dedicated".into(),
        value: Some("db".into()),
        effect: "NoSchedule".into(),
        ..Default::default()
    };
    let soft = Taint {
        effect: "PreferNoSchedule".into(),
        ..untolerated.clone()
    };
    let mut selective = ds.clone();
    selective
        .spec
        .template
        .spec
        .get_or_insert_with(Default::default)
        .node_selector = Some(BTreeMap::from([("pool".to_string(), "edge".to_string())]));
    let edge = |name: &str| {
        let mut n = node(name, true);
        n.metadata.labels = Some(BTreeMap::from([("pool".into(), "edge".into())]));
        n
    };
    struct Case {
        what: &'static str,
        ds: DaemonSet,
        nodes: Vec<Node>,
        pods: Vec<Pod>,
        budget: u32,
        deleted: Vec<&'static str>,
        unplaced: Vec<&'static str>,
        total: usize,
        blocked: Option<Blocker>,
    }
    let cases = [
        Case {
            what: "a NoSchedule taint the template does not tolerate: kept, the rest upgrades",
            ds: ds.clone(),
            nodes: vec![
                tainted(node("n1", true), untolerated.clone()),
                node("n2", true),
                node("n3", true),
            ],
            pods: vec![
                old_available(&ds, "old-n1", "n1"),
                old_available(&ds, "old-n2", "n2"),
                old_available(&ds, "old-n3", "n3"),
            ],
            budget: 5,
            deleted: vec!["old-n2", "old-n3"],
            unplaced: vec!["n1"],
            total: 2,
            blocked: None,
        },
        Case {
            what: "a PreferNoSchedule taint never blocks placement: upgraded",
            ds: ds.clone(),
            nodes: vec![tainted(node("n1", true), soft)],
            pods: vec![old_available(&ds, "old-n1", "n1")],
            budget: 1,
            deleted: vec!["old-n1"],
            unplaced: vec![],
            total: 1,
            blocked: None,
        },
        Case {
            what: "a node selector narrowed away from a node: kept, even when not available",
            ds: selective.clone(),
            nodes: vec![node("core-1", true), edge("edge-1")],
            pods: vec![
                PodBuilder::new("old-core-1", &selective)
                    .hash("old")
                    .on_node("core-1")
                    .not_ready()
                    .build(),
                old_available(&selective, "old-edge-1", "edge-1"),
            ],
            budget: 1,
            deleted: vec!["old-edge-1"],
            unplaced: vec!["core-1"],
            total: 1,
            blocked: None,
        },
        Case {
            what: "only unplaced old pods left: the rollout is complete and says why",
            ds: ds.clone(),
            nodes: vec![
                tainted(node("n1", true), untolerated.clone()),
                node("n2", true),
            ],
            pods: vec![
                old_available(&ds, "old-n1", "n1"),
                new_available(&ds, "new-n2", "n2"),
            ],
            budget: 1,
            deleted: vec![],
            unplaced: vec!["n1"],
            total: 1,
            blocked: Some(Blocker::Complete),
        },
        Case {
            what: "a new pod on such a node is simply done",
            ds: ds.clone(),
            nodes: vec![tainted(node("n1", true), untolerated.clone())],
            pods: vec![new_available(&ds, "new-n1", "n1")],
            budget: 1,
            deleted: vec![],
            unplaced: vec![],
            total: 1,
            blocked: Some(Blocker::Complete),
        },
    ];
    for case in cases {
        let what = case.what;
        let plan = plan(&input(
            &case.ds,
            &revisions,
            case.pods,
            case.nodes,
            MaxUnavailable::Count(case.budget),
        ));
        let deleted: Vec<&str> = plan.deletions.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(deleted, case.deleted, "{what}");
        assert_eq!(plan.progress.unplaced_nodes, case.unplaced, "{what}");
        assert_eq!(plan.progress.total_nodes, case.total, "{what}");
        assert!(
            plan.progress.updated <= plan.progress.total_nodes
                && plan.progress.ready_updated <= plan.progress.ready_nodes,
            "{what}: the counts add up: {:?}",
            plan.progress
        );
        assert_eq!(plan.progress.blocked, case.blocked, "{what}");
    }
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
    let plan = plan(&input(
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
    assert_eq!(plan.progress.updated, 0, "updated means available");
}

#[test]
fn a_node_between_pod_removal_and_replacement_still_uses_the_budget() {
    // n1's old pod is gone and its replacement not created yet: no pod in view, but
    // the DaemonSet places a pod on n1. No DaemonSet status is read for this.
    let (ds, revisions) = upgrading(0);
    let pods = vec![
        old_available(&ds, "old-n2", "n2"),
        old_available(&ds, "old-n3", "n3"),
    ];
    let plan = plan(&input(
        &ds,
        &revisions,
        pods,
        ready_nodes(&["n1", "n2", "n3"]),
        MaxUnavailable::Count(1),
    ));
    assert!(plan.deletions.is_empty(), "{:?}", plan.deletions);
    assert_eq!(plan.progress.vacated_nodes, ["n1"]);
    assert_eq!(plan.progress.unavailable, 1);
    assert_eq!(plan.progress.total_nodes, 3);
    assert_eq!(
        plan.progress.blocked,
        Some(Blocker::BudgetExhausted {
            unavailable: vec!["n1".into()]
        })
    );
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
    let plan = plan(&input(
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
    let plan = plan(&input(
        &ds,
        &revisions,
        pods,
        ready_nodes(&["n1", "n2", "n3"]),
        MaxUnavailable::Count(1),
    ));
    assert!(plan.deletions.is_empty(), "{:?}", plan.deletions);
    assert_eq!(plan.progress.unavailable, 1);
    assert_eq!(plan.progress.updated, 1);
    assert_eq!(
        plan.progress.blocked,
        Some(Blocker::BudgetExhausted {
            unavailable: vec!["n1".into()]
        })
    );
}

#[test]
fn an_unavailable_old_pod_is_replaced_first_and_spends_budget() {
    // It serves nothing, so it goes before any available pod; but its node is
    // without a serving pod from our deletion on, until the replacement is
    // available, so the deletion spends budget like any other.
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
    let plan_with = |max_unavailable| {
        plan(&input(
            &ds,
            &revisions,
            pods.clone(),
            ready_nodes(&["n1", "n2", "n3"]),
            max_unavailable,
        ))
    };
    let one = plan_with(MaxUnavailable::Count(1));
    assert_eq!(
        deleted_names(&one),
        [("crashing-n1", DeletionReason::OldPodNotAvailable)]
    );
    assert_eq!(one.progress.unavailable, 0);
    assert_eq!(one.progress.candidates, 2);
    assert_eq!(
        one.progress.blocked,
        Some(Blocker::BudgetExhausted {
            unavailable: vec![]
        })
    );
    let two = plan_with(MaxUnavailable::Count(2));
    assert_eq!(
        deleted_names(&two),
        [
            ("crashing-n1", DeletionReason::OldPodNotAvailable),
            ("old-n2", DeletionReason::RollingUpdate)
        ]
    );
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
    let plan = plan(&input(
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
        plan(&input(
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
    assert_eq!(
        waiting.progress.blocked,
        Some(Blocker::BudgetExhausted {
            unavailable: vec!["n1".into()]
        })
    );

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
    let plan = plan(&input(
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
    let plan = plan(&input(
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
    let plan = plan(&input(
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
    let plan = plan(&input(
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
    planned.expected_deletions = BTreeSet::from(["uid-old-n1".into(), "uid-crashing-n3".into()]);
    let plan = plan(&planned);
    assert!(plan.deletions.is_empty(), "{:?}", plan.deletions);
    assert_eq!(plan.progress.unavailable, 2);
    assert_eq!(
        plan.progress.blocked,
        Some(Blocker::BudgetExhausted {
            unavailable: vec!["n1".into(), "n3".into()]
        })
    );
}

#[test]
fn count_larger_than_node_count_deletes_all_candidates() {
    let (ds, revisions) = upgrading(0);
    let pods = vec![
        old_available(&ds, "old-n1", "n1"),
        old_available(&ds, "old-n2", "n2"),
    ];
    let plan = plan(&input(
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
    // n1 carries a taint this DaemonSet does not tolerate: it should not run there.
    let dedicated = Taint {
        key: "dedicated".into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    };
    let plan = plan(&input(
        &ds,
        &revisions,
        vec![foreign],
        vec![tainted(node("n1", true), dedicated)],
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
    let forward = plan(&input(
        &ds,
        &revisions,
        pods.clone(),
        nodes.clone(),
        MaxUnavailable::Count(3),
    ));
    pods.reverse();
    nodes.rotate_left(3);
    let shuffled = plan(&input(
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

    let done = plan(&input(
        &ds,
        &revisions,
        vec![new_available(&ds, "new-n1", "n1")],
        ready_nodes(&["n1"]),
        MaxUnavailable::Count(1),
    ));
    assert!(done.is_complete());
    assert_eq!(done.progress.updated, 1);

    let waiting_for_cut_node = plan(&input(
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

    let waiting_for_pod = plan(&input(
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

    let no_revision = plan(&input(
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
    let cut = plan(&input(
        &ds,
        &revisions,
        pods.clone(),
        vec![node("n1", true), node("n2", false)],
        MaxUnavailable::Count(1),
    ));
    assert!(cut.deletions.is_empty());
    let back = plan(&input(
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

/// A node cut off from the control plane, as the node-lifecycle controller leaves it:
/// Ready Unknown and tainted unreachable.
fn cut_off(name: &str) -> Node {
    let unreachable = |effect: &str| Taint {
        key: "node.kubernetes.io/unreachable".into(),
        effect: effect.into(),
        ..Default::default()
    };
    tainted(
        tainted(node(name, false), unreachable("NoSchedule")),
        unreachable("NoExecute"),
    )
}

/// `ready` Ready nodes and `cut` cut-off nodes, each with an old available pod.
fn fleet(ds: &DaemonSet, ready: usize, cut: usize) -> (Vec<Pod>, Vec<Node>) {
    let mut pods = Vec::new();
    let mut nodes = Vec::new();
    for i in 0..ready + cut {
        let name = format!("n{i:02}");
        pods.push(old_available(ds, &format!("old-{name}"), &name));
        nodes.push(if i < ready {
            node(&name, true)
        } else {
            cut_off(&name)
        });
    }
    (pods, nodes)
}

fn both_toleration_shapes() -> [(&'static str, DaemonSet); 2] {
    let build = |b: DaemonSetBuilder| b.strategy("AdvancedRollingUpdate").on_delete().build();
    [
        ("tolerates nothing", build(DaemonSetBuilder::new("agent"))),
        (
            "tolerates every taint",
            build(DaemonSetBuilder::new("agent").tolerate_everything()),
        ),
    ]
}

#[test]
fn cut_off_nodes_do_not_stall_the_default_budget() {
    // The stall case: 20 nodes, 5 NotReady, default 10%. NotReady nodes are in the
    // base (20 -> budget 2) and never count as unavailable, whatever the tolerations.
    for (shape, ds) in both_toleration_shapes() {
        let revisions = vec![revision(&ds, "old", 1), revision(&ds, "new", 2)];
        let (pods, nodes) = fleet(&ds, 15, 5);
        let plan = plan(&input(
            &ds,
            &revisions,
            pods,
            nodes,
            MaxUnavailable::DEFAULT,
        ));
        assert_eq!(plan.progress.total_nodes, 20, "{shape}");
        assert_eq!(plan.progress.budget, 2, "{shape}");
        assert_eq!(plan.progress.unavailable, 0, "{shape}");
        assert!(plan.progress.vacated_nodes.is_empty(), "{shape}");
        assert_eq!(
            deleted_names(&plan),
            [
                ("old-n00", DeletionReason::RollingUpdate),
                ("old-n01", DeletionReason::RollingUpdate)
            ],
            "{shape}"
        );
    }
}

#[test]
fn one_cut_off_node_does_not_stall_a_budget_of_one() {
    for (shape, ds) in both_toleration_shapes() {
        let revisions = vec![revision(&ds, "old", 1), revision(&ds, "new", 2)];
        let (pods, nodes) = fleet(&ds, 3, 1);
        let plan = plan(&input(
            &ds,
            &revisions,
            pods,
            nodes,
            MaxUnavailable::Count(1),
        ));
        assert_eq!(
            deleted_names(&plan),
            [("old-n00", DeletionReason::RollingUpdate)],
            "{shape}"
        );
        assert_eq!(plan.progress.not_ready_nodes_skipped, ["n03"], "{shape}");
    }
}

#[test]
fn a_cut_off_node_whose_pod_is_gone_is_neither_vacated_nor_counted() {
    // Tolerating everything, the native controller keeps a cut-off node scheduled
    // even after its pod disappeared; it is NotReady, so it does not block.
    for (shape, ds) in both_toleration_shapes() {
        let revisions = vec![revision(&ds, "old", 1), revision(&ds, "new", 2)];
        let (mut pods, nodes) = fleet(&ds, 2, 1);
        pods.retain(|p| p.metadata.name.as_deref() != Some("old-n02"));
        let plan = plan(&input(
            &ds,
            &revisions,
            pods,
            nodes,
            MaxUnavailable::Count(1),
        ));
        assert!(plan.progress.vacated_nodes.is_empty(), "{shape}");
        assert_eq!(plan.progress.total_nodes, 2, "{shape}");
        assert_eq!(deleted_names(&plan).len(), 1, "{shape}");
    }
}

#[test]
fn a_node_rollgate_emptied_counts_until_its_replacement_is_available() {
    let (ds, revisions) = upgrading(0);
    let node_with = |pods: Vec<Pod>| {
        let mut all = pods;
        all.push(old_available(&ds, "old-n2", "n2"));
        let mut case = input(
            &ds,
            &revisions,
            all,
            ready_nodes(&["n1", "n2"]),
            MaxUnavailable::Count(1),
        );
        case.vacated_by_us = BTreeMap::from([("n1".into(), "uid-old-n1".into())]);
        plan(&case)
    };
    // Old pod gone, nothing yet: vacated, the budget is in use.
    let empty = node_with(vec![]);
    assert_eq!(empty.progress.vacated_nodes, ["n1"]);
    assert!(empty.deletions.is_empty());
    assert!(empty.settled.is_empty());
    // Replacement starting: unavailable as a node with a pod, still remembered.
    let starting = node_with(vec![PodBuilder::new("new-n1", &ds)
        .hash("new")
        .on_node("n1")
        .not_ready()
        .build()]);
    assert!(starting.deletions.is_empty());
    assert!(starting.settled.is_empty());
    // Replacement available: settled, and the budget moves on.
    let done = node_with(vec![new_available(&ds, "new-n1", "n1")]);
    assert_eq!(done.settled, ["n1"]);
    assert_eq!(
        deleted_names(&done),
        [("old-n2", DeletionReason::RollingUpdate)]
    );
}

#[test]
fn a_remembered_node_that_left_the_daemonset_is_settled() {
    // After our deletion the node got a taint the DaemonSet does not tolerate. If
    // it is Ready and empty, it left the DaemonSet: settled, not counted.
    let (ds, revisions) = upgrading(0);
    let dedicated = Taint {
        key: "dedicated".into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    };
    let mut case = input(
        &ds,
        &revisions,
        vec![old_available(&ds, "old-n2", "n2")],
        vec![tainted(node("n1", true), dedicated), node("n2", true)],
        MaxUnavailable::Count(1),
    );
    case.vacated_by_us = BTreeMap::from([
        ("n1".into(), "uid-old-n1".into()),
        ("gone".into(), "uid-old-gone".into()),
    ]);
    let plan = plan(&case);
    assert_eq!(plan.settled, ["gone", "n1"]);
    assert_eq!(plan.progress.vacated_nodes, ["n1"]);
    assert!(
        plan.deletions.is_empty(),
        "counted until the record is pruned"
    );
}

#[test]
fn after_a_restart_placement_finds_the_vacated_nodes() {
    // No memory of our deletions: n1 and n3 are Ready, should run the pod and show
    // none. Both count against the budget; a node the DaemonSet does not target
    // does not.
    for (shape, ds) in both_toleration_shapes() {
        let revisions = vec![revision(&ds, "old", 1), revision(&ds, "new", 2)];
        let pods = vec![
            old_available(&ds, "old-n2", "n2"),
            old_available(&ds, "old-n4", "n4"),
        ];
        let nodes = ready_nodes(&["n1", "n2", "n3", "n4"]);
        let plan = plan(&input(
            &ds,
            &revisions,
            pods,
            nodes,
            MaxUnavailable::Count(2),
        ));
        assert_eq!(plan.progress.vacated_nodes, ["n1", "n3"], "{shape}");
        assert_eq!(plan.progress.total_nodes, 4, "{shape}");
        assert!(plan.deletions.is_empty(), "{shape}");
        assert_eq!(
            plan.progress.blocked,
            Some(Blocker::BudgetExhausted {
                unavailable: vec!["n1".into(), "n3".into()]
            }),
            "{shape}"
        );
    }
}

#[test]
fn progress_adds_up_to_complete_with_not_ready_nodes() {
    let (ds, revisions) = upgrading(0);
    let pods = vec![
        new_available(&ds, "new-n1", "n1"),
        // A cut-off node that got its new pod before the cut: done.
        new_available(&ds, "new-cut1", "cut1"),
        old_available(&ds, "old-cut2", "cut2"),
    ];
    let nodes = vec![node("n1", true), cut_off("cut1"), cut_off("cut2")];
    let waiting = plan(&input(
        &ds,
        &revisions,
        pods.clone(),
        nodes,
        MaxUnavailable::Count(1),
    ));
    let p = &waiting.progress;
    assert_eq!((p.ready_updated, p.ready_nodes), (1, 1));
    assert_eq!((p.updated, p.total_nodes), (2, 3));
    assert_eq!(
        p.blocked,
        Some(Blocker::WaitingForSkippedNodes {
            nodes: vec!["cut2".into()]
        })
    );
    let mut pods = pods;
    pods[2] = new_available(&ds, "new-cut2", "cut2");
    let nodes = vec![node("n1", true), cut_off("cut1"), cut_off("cut2")];
    let done = plan(&input(
        &ds,
        &revisions,
        pods,
        nodes,
        MaxUnavailable::Count(1),
    ));
    assert!(done.is_complete());
    assert_eq!((done.progress.updated, done.progress.total_nodes), (3, 3));
}

/// A DaemonSet whose template went a -> b -> c: revisions 1, 2 and 3.
fn three_revisions() -> (DaemonSet, Vec<ControllerRevision>) {
    let ds = DaemonSetBuilder::new("agent")
        .strategy("AdvancedRollingUpdate")
        .on_delete()
        .build();
    let revisions = vec![
        revision(&ds, "a", 1),
        revision(&ds, "b", 2),
        revision(&ds, "c", 3),
    ];
    (ds, revisions)
}

fn pod_at(ds: &DaemonSet, hash: &str, node: &str, available: bool) -> Pod {
    let builder = PodBuilder::new(&format!("{hash}-{node}"), ds)
        .hash(hash)
        .on_node(node);
    if available {
        builder.ready_since(at(NOW - 3600)).build()
    } else {
        builder.not_ready().build()
    }
}

/// The case: 100 nodes at 10%. Ten b-pods are still pulling (rollgate
/// deleted the a-pods there) when c is pushed.
fn pushed_while_pulling(ds: &DaemonSet) -> (Vec<Pod>, Vec<Node>) {
    let names: Vec<String> = (0..100).map(|i| format!("n{i:03}")).collect();
    let pods = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            if i < 10 {
                pod_at(ds, "b", name, false)
            } else {
                pod_at(ds, "a", name, true)
            }
        })
        .collect();
    let nodes = names.iter().map(|name| node(name, true)).collect();
    (pods, nodes)
}

#[test]
fn a_template_change_mid_rollout_keeps_the_budget() {
    let (ds, revisions) = three_revisions();
    let (pods, nodes) = pushed_while_pulling(&ds);
    let mut case = input(&ds, &revisions, pods, nodes, MaxUnavailable::Percent(10));
    case.vacated_by_us = (0..10)
        .map(|i| (format!("n{i:03}"), format!("uid-a-n{i:03}")))
        .collect();
    let plan = plan(&case);
    assert_eq!(plan.progress.budget, 10);
    // The b-pods' nodes were counted as our replacements in progress; under c they
    // still are, and replacing them again costs nothing more.
    assert_eq!(plan.progress.unavailable, 10);
    let deleted = deleted_names(&plan);
    assert_eq!(deleted.len(), 10, "{deleted:?}");
    assert!(deleted
        .iter()
        .all(|(name, reason)| name.starts_with("b-")
            && *reason == DeletionReason::OldPodNotAvailable));
    assert!(matches!(
        plan.progress.blocked,
        Some(Blocker::BudgetExhausted { .. })
    ));
}

#[test]
fn a_template_change_mid_rollout_keeps_the_budget_after_a_restart() {
    // No memory of our deletions: the b-pods are unavailable old pods on nodes not
    // counted yet, so each replacement spends budget, before any a-pod.
    let (ds, revisions) = three_revisions();
    let (pods, nodes) = pushed_while_pulling(&ds);
    let plan = plan(&input(
        &ds,
        &revisions,
        pods,
        nodes,
        MaxUnavailable::Percent(10),
    ));
    assert_eq!(plan.progress.unavailable, 0);
    let deleted = deleted_names(&plan);
    assert_eq!(deleted.len(), 10, "{deleted:?}");
    assert!(deleted.iter().all(|(name, _)| name.starts_with("b-")));
}

#[test]
fn when_unavailable_nodes_alone_exceed_the_budget_only_counted_nodes_are_replaced() {
    // Budget 2. n1..n3: c-pods starting (3 unavailable, over the budget). n4: our
    // b replacement, not available, c pushed since: counted, so replacing it again
    // adds nothing. n5: an a-pod crashing on its own: replacing it would make one
    // more node ours, so it waits. n6: an available a-pod waits as well.
    let (ds, revisions) = three_revisions();
    let pods = vec![
        pod_at(&ds, "c", "n1", false),
        pod_at(&ds, "c", "n2", false),
        pod_at(&ds, "c", "n3", false),
        pod_at(&ds, "b", "n4", false),
        pod_at(&ds, "a", "n5", false),
        pod_at(&ds, "a", "n6", true),
    ];
    let mut case = input(
        &ds,
        &revisions,
        pods,
        ready_nodes(&["n1", "n2", "n3", "n4", "n5", "n6"]),
        MaxUnavailable::Count(2),
    );
    case.vacated_by_us = BTreeMap::from([("n4".into(), "uid-a-n4".into())]);
    let plan = plan(&case);
    assert_eq!(
        deleted_names(&plan),
        [("b-n4", DeletionReason::OldPodNotAvailable)]
    );
    assert_eq!(plan.progress.unavailable, 4);
    assert_eq!(
        plan.progress.blocked,
        Some(Blocker::BudgetExhausted {
            unavailable: vec!["n1".into(), "n2".into(), "n3".into(), "n4".into()]
        })
    );
}

#[test]
fn a_replaced_node_is_settled_once_any_available_pod_serves_there_or_it_goes_not_ready() {
    // n1: our b replacement became available, c pushed since: it serves, so it is
    // no longer ours. n2: cut off since our deletion: the network's now.
    let (ds, revisions) = three_revisions();
    let mut case = input(
        &ds,
        &revisions,
        vec![pod_at(&ds, "b", "n1", true), pod_at(&ds, "b", "n2", false)],
        vec![node("n1", true), node("n2", false)],
        MaxUnavailable::Count(1),
    );
    case.vacated_by_us = BTreeMap::from([
        ("n1".into(), "uid-a-n1".into()),
        ("n2".into(), "uid-a-n2".into()),
    ]);
    let plan = plan(&case);
    assert_eq!(plan.settled, ["n1", "n2"]);
    assert_eq!(plan.progress.unavailable, 0);
    assert_eq!(
        deleted_names(&plan),
        [("b-n1", DeletionReason::RollingUpdate)]
    );
}

/// A node Ready again since `seconds_ago`, after a cut.
fn back_since(name: &str, seconds_ago: i64) -> Node {
    let mut back = node(name, true);
    let conditions = back
        .status
        .as_mut()
        .and_then(|s| s.conditions.as_mut())
        .expect("a Ready condition");
    conditions[0].last_transition_time = Some(Time(at(NOW - seconds_ago)));
    back
}

/// An old pod whose Ready condition turned False `seconds_ago`.
fn marked_not_ready(ds: &DaemonSet, name: &str, node: &str, seconds_ago: i64) -> Pod {
    PodBuilder::new(name, ds)
        .hash("old")
        .on_node(node)
        .with_condition(k8s_openapi::api::core::v1::PodCondition {
            type_: "Ready".into(),
            status: "False".into(),
            reason: Some("NodeNotReady".into()),
            last_transition_time: Some(Time(at(NOW - seconds_ago))),
            ..Default::default()
        })
        .build()
}

/// Twelve nodes back from a cut `back_for` seconds ago, their old pods marked not
/// Ready 100 s ago by the node-lifecycle controller; eight more never cut off.
fn comeback(ds: &DaemonSet, back_for: i64) -> OwnedInput {
    let revisions = vec![revision(ds, "old", 1), revision(ds, "new", 2)];
    let mut pods = Vec::new();
    let mut nodes = Vec::new();
    for i in 1..=12 {
        let name = format!("back-{i:02}");
        pods.push(marked_not_ready(ds, &format!("old-{name}"), &name, 100));
        nodes.push(back_since(&name, back_for));
    }
    for i in 1..=8 {
        let name = format!("home-{i:02}");
        pods.push(old_available(ds, &format!("old-{name}"), &name));
        nodes.push(node(&name, true));
    }
    input(ds, &revisions, pods, nodes, MaxUnavailable::Count(3))
}

/// Issue 46: no wait for the kubelet's report. The returning pods may serve, but their
/// replacement spends budget like any other, so twelve back at once go three at a time.
#[test]
fn pods_marked_not_ready_while_their_node_was_cut_off_are_replaced_at_once_within_the_budget() {
    let (ds, _) = upgrading(0);
    for back_for in [1, 10, 40] {
        let plan = plan(&comeback(&ds, back_for));
        assert_eq!(
            deleted_names(&plan),
            [
                ("old-back-01", DeletionReason::OldPodNotAvailable),
                ("old-back-02", DeletionReason::OldPodNotAvailable),
                ("old-back-03", DeletionReason::OldPodNotAvailable)
            ],
            "back for {back_for} s"
        );
        assert_eq!(plan.progress.unavailable, 0);
        assert_eq!(
            plan.progress.blocked,
            Some(Blocker::BudgetExhausted {
                unavailable: Vec::new()
            })
        );
        // Nothing to wake up for: the next pod event replans.
        assert_eq!(plan.progress.recheck_after, None);
    }
}

#[test]
fn a_kubelet_report_after_the_comeback_makes_its_pod_a_candidate_like_any_other() {
    let (ds, _) = upgrading(0);
    let mut case = comeback(&ds, 10);
    // back-01's kubelet reported its pod Ready; back-02's reported it not Ready.
    case.pods[0] = Arc::new(old_available(&ds, "old-back-01", "back-01"));
    case.pods[1] = Arc::new(marked_not_ready(&ds, "old-back-02", "back-02", 5));
    case.max_unavailable = MaxUnavailable::Count(12);
    let plan = plan(&case);
    let deleted = deleted_names(&plan);
    // The eleven not Ready first, whoever wrote their status, then candidates by name.
    assert_eq!(deleted.len(), 12);
    assert!(deleted[..11]
        .iter()
        .all(|(name, reason)| name.starts_with("old-back-")
            && *reason == DeletionReason::OldPodNotAvailable));
    assert_eq!(deleted[11], ("old-back-01", DeletionReason::RollingUpdate));
}

/// A lone node back from a cut, with budget free: its pod goes in the first plan after
/// its return, one pod stop and start from the upgrade.
#[test]
fn a_lone_returning_node_is_upgraded_in_the_first_plan_after_its_return() {
    let (ds, revisions) = upgrading(0);
    let plan = plan(&input(
        &ds,
        &revisions,
        vec![
            new_available(&ds, "new-n1", "n1"),
            marked_not_ready(&ds, "old-n2", "n2", 100),
        ],
        vec![node("n1", true), back_since("n2", 0)],
        MaxUnavailable::Count(1),
    ));
    assert_eq!(
        deleted_names(&plan),
        [("old-n2", DeletionReason::OldPodNotAvailable)]
    );
    assert_eq!(plan.progress.blocked, None);
}

#[test]
fn deletions_per_plan_are_capped_on_top_of_the_budget() {
    let (ds, revisions) = upgrading(0);
    let names: Vec<String> = (0..10).map(|i| format!("n{i}")).collect();
    let pods = names
        .iter()
        .map(|n| old_available(&ds, &format!("old-{n}"), n))
        .collect();
    let nodes = names.iter().map(|n| node(n, true)).collect();
    let mut case = input(&ds, &revisions, pods, nodes, MaxUnavailable::Count(10));
    case.limits.max_deletions_per_plan = 4;
    let plan = plan(&case);
    assert_eq!(
        deleted_names(&plan),
        [
            ("old-n0", DeletionReason::RollingUpdate),
            ("old-n1", DeletionReason::RollingUpdate),
            ("old-n2", DeletionReason::RollingUpdate),
            ("old-n3", DeletionReason::RollingUpdate)
        ]
    );
    assert_eq!(plan.progress.deferred_by_cap, 6);
    assert_eq!(plan.progress.blocked, None);
    // What the cap left is next, in the same order (pull-ahead reads it).
    let upcoming: Vec<&str> = plan.upcoming.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(
        upcoming,
        ["old-n4", "old-n5", "old-n6", "old-n7", "old-n8", "old-n9"]
    );
}

#[test]
fn upcoming_lists_what_the_budget_leaves_in_the_order_later_plans_take_it() {
    let (ds, revisions) = upgrading(0);
    let mut pods: Vec<Pod> = ["n0", "n1", "n2", "n3"]
        .iter()
        .map(|n| old_available(&ds, &format!("old-{n}"), n))
        .collect();
    // Not available: replaced before any available one, in this plan and later.
    pods.push(
        PodBuilder::new("old-n4", &ds)
            .hash("old")
            .on_node("n4")
            .not_ready()
            .build(),
    );
    pods.push(new_available(&ds, "new-n5", "n5"));
    let nodes = (0..6).map(|i| node(&format!("n{i}"), true)).collect();
    let plan = plan(&input(
        &ds,
        &revisions,
        pods,
        nodes,
        MaxUnavailable::Count(2),
    ));
    assert_eq!(
        deleted_names(&plan),
        [
            ("old-n4", DeletionReason::OldPodNotAvailable),
            ("old-n0", DeletionReason::RollingUpdate)
        ]
    );
    let upcoming: Vec<(&str, &str)> = plan
        .upcoming
        .iter()
        .map(|d| (d.name.as_str(), d.node.as_str()))
        .collect();
    assert_eq!(
        upcoming,
        [("old-n1", "n1"), ("old-n2", "n2"), ("old-n3", "n3")]
    );
}
