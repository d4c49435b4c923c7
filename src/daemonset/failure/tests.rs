//! The failure rule and the threshold, as tables and a property test.
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, PodCondition};
use proptest::prelude::*;

use super::*;
use crate::names::{POD_IMAGE_READY_CONDITION, PULL_IMAGE_REQUESTED_REASON};
use crate::object::{CachedNode, CachedPod};
use crate::testkit::{at, node, revision, DaemonSetBuilder, PodBuilder};

const NOW: i64 = 1_000_000;

fn daemonset() -> DaemonSet {
    DaemonSetBuilder::new("agent")
        .strategy("AdvancedRollingUpdate")
        .on_delete()
        .build()
}

fn current(ds: &DaemonSet) -> CurrentRevision {
    CurrentRevision::of(ds, &[revision(ds, "old", 1), revision(ds, "new", 2)]).unwrap()
}

/// A new-revision pod on `node`, created 10 minutes ago.
fn new_pod(ds: &DaemonSet, node: &str) -> PodBuilder {
    PodBuilder::new(&format!("p-{node}"), ds)
        .hash("new")
        .on_node(node)
        .created_at(at(NOW - 600))
}

fn policy(deadline: Option<u64>) -> FailurePolicy {
    FailurePolicy {
        progress_deadline: deadline.map(Duration::from_secs),
        ..FailurePolicy::default()
    }
}

/// The failed pods' reasons, on full pods and on their cached form (they must agree).
fn failed_of(pods: Vec<Pod>, nodes: Vec<Node>, deadline: Option<u64>) -> Vec<(String, String)> {
    let ds = daemonset();
    let current = current(&ds);
    let policy = policy(deadline);
    let full = assess(&pods, &nodes, &ds, Some(&current), &policy, at(NOW));
    let cached_pods: Vec<Arc<CachedPod>> = pods
        .into_iter()
        .map(|p| Arc::new(CachedPod::from(p)))
        .collect();
    let cached_nodes: Vec<Arc<CachedNode>> = nodes
        .into_iter()
        .map(|n| Arc::new(CachedNode::from(n)))
        .collect();
    let cached = assess(
        &cached_pods,
        &cached_nodes,
        &ds,
        Some(&current),
        &policy,
        at(NOW),
    );
    assert_eq!(full, cached, "cached pods judged otherwise");
    full.failed
        .into_iter()
        .map(|f| (f.node, f.reason.to_string()))
        .collect()
}

#[test]
fn the_kubelet_says_when_a_pod_cannot_start() {
    let ds = daemonset();
    let waiting = |reason: &str| {
        new_pod(&ds, "n1")
            .not_ready()
            .container("main", false, Some(reason), 0)
            .build()
    };
    #[rustfmt::skip]
    let rows: Vec<(&str, Pod, Option<&str>)> = vec![
        ("CrashLoopBackOff", waiting("CrashLoopBackOff"), Some("CrashLoopBackOff")),
        ("ErrImagePull", waiting("ErrImagePull"), Some("ErrImagePull")),
        ("ImagePullBackOff", waiting("ImagePullBackOff"), Some("ImagePullBackOff")),
        ("CreateContainerConfigError", waiting("CreateContainerConfigError"), Some("CreateContainerConfigError")),
        ("InvalidImageName", waiting("InvalidImageName"), Some("InvalidImageName")),
        ("ContainerCreating is starting, not failing", waiting("ContainerCreating"), None),
        ("PodInitializing is starting, not failing", waiting("PodInitializing"), None),
        ("between back-offs: running, not ready, 3 restarts",
            new_pod(&ds, "n1").not_ready().container("main", false, None, 3).build(),
            Some("not ready after 3 restarts")),
        ("2 restarts, not ready: below the threshold",
            new_pod(&ds, "n1").not_ready().container("main", false, None, 2).build(), None),
        ("5 restarts, but ready again: serving",
            new_pod(&ds, "n1").ready_since(at(NOW - 10)).container("main", true, None, 5).build(), None),
        ("one container of two crash-loops",
            new_pod(&ds, "n1").not_ready().container("main", true, None, 0).container("side", false, Some("CrashLoopBackOff"), 1).build(),
            Some("CrashLoopBackOff")),
        ("no container status yet", new_pod(&ds, "n1").build(), None),
    ];
    for (says, pod, expected) in rows {
        let failed = failed_of(vec![pod], vec![node("n1", true)], None);
        let reason = failed.first().map(|(_, r)| r.as_str());
        assert_eq!(reason, expected, "{says}");
    }
}

#[test]
fn only_new_pods_on_ready_nodes_not_pulling_ahead_can_fail() {
    let ds = daemonset();
    let crash = |pod: PodBuilder| {
        pod.not_ready()
            .container("main", false, Some("CrashLoopBackOff"), 4)
    };
    let pulling = PodCondition {
        type_: POD_IMAGE_READY_CONDITION.into(),
        status: "False".into(),
        reason: Some(PULL_IMAGE_REQUESTED_REASON.into()),
        ..Default::default()
    };
    let pods = vec![
        crash(new_pod(&ds, "ready")).build(),
        crash(new_pod(&ds, "not-ready")).build(),
        crash(new_pod(&ds, "missing")).build(),
        crash(PodBuilder::new("old", &ds).hash("old").on_node("old-node")).build(),
        crash(new_pod(&ds, "gone")).terminating(at(NOW - 1)).build(),
        crash(new_pod(&ds, "other").owned_by_uid("someone-else")).build(),
        crash(new_pod(&ds, "pulling"))
            .with_condition(pulling)
            .build(),
    ];
    let nodes = vec![
        node("ready", true),
        node("not-ready", false),
        node("old-node", true),
        node("gone", true),
        node("other", true),
        node("pulling", true),
    ];
    let failed = failed_of(pods, nodes, None);
    assert_eq!(
        failed,
        vec![("ready".to_string(), "CrashLoopBackOff".to_string())]
    );
}

#[test]
fn the_progress_deadline_counts_from_creation_and_only_when_set() {
    let ds = daemonset();
    // Created 600 s ago, never Ready.
    let stuck = || vec![new_pod(&ds, "n1").not_ready().build()];
    let nodes = || vec![node("n1", true)];
    assert_eq!(
        failed_of(stuck(), nodes(), None),
        vec![],
        "no deadline: no failure"
    );
    assert_eq!(
        failed_of(stuck(), nodes(), Some(900)),
        vec![],
        "within the deadline"
    );
    assert_eq!(
        failed_of(stuck(), nodes(), Some(300)),
        vec![(
            "n1".to_string(),
            "not available 300s after its creation (rollgate.io/progress-deadline)".to_string()
        )]
    );
    let available = vec![new_pod(&ds, "n1").ready_since(at(NOW - 500)).build()];
    assert_eq!(failed_of(available, nodes(), Some(300)), vec![]);
    // The look again is due when the earliest deadline passes.
    let report = assess(
        &stuck(),
        &nodes(),
        &ds,
        Some(&current(&ds)),
        &policy(Some(900)),
        at(NOW),
    );
    assert_eq!(report.next_deadline, Some(Duration::from_secs(300)));
}

#[test]
fn annotation_values_parse_or_are_refused() {
    use FailureThreshold::{Count, Percent};
    assert_eq!(FailureThreshold::parse("3"), Ok(Count(3)));
    assert_eq!(FailureThreshold::parse(" 25% "), Ok(Percent(25)));
    for bad in ["0", "0%", "-1", "abc", "101%", "1.5", ""] {
        assert_eq!(
            FailureThreshold::parse(bad),
            Err(NotAFailureThreshold),
            "{bad:?}"
        );
    }
    assert_eq!(OnFailure::parse("halt"), Some(OnFailure::Halt));
    assert_eq!(OnFailure::parse(" rollback"), Some(OnFailure::Rollback));
    assert_eq!(OnFailure::parse("continue"), Some(OnFailure::Continue));
    for bad in ["Halt", "stop", "", "ignore"] {
        assert_eq!(OnFailure::parse(bad), None, "{bad:?}");
    }
}

#[test]
fn the_threshold_resolves_against_the_pods_reached_and_the_budget() {
    use FailureThreshold::{Count, Percent};
    #[rustfmt::skip]
    let rows = [
        // (threshold, reached, budget, halts at)
        (Count(3), 10, 5, 3),
        (Count(3), 10, 2, 2),   // capped by the budget: more could never fail
        (Count(3), 10, 0, 1),   // at least one
        (Percent(10), 25, 5, 3), // rounds up
        (Percent(10), 0, 5, 1),
        (Percent(100), 4, 10, 4),
    ];
    for (threshold, reached, budget, expected) in rows {
        assert_eq!(
            threshold.resolve(reached, budget),
            expected,
            "{threshold} of {reached}, budget {budget}"
        );
    }
}

#[test]
fn the_warning_names_the_revision_the_pods_their_nodes_and_reasons() {
    let report = FailureReport {
        revision: "6d4b9".into(),
        reached: 4,
        failed: vec![
            FailedPod {
                pod: "edge-a".into(),
                node: "n1".into(),
                reason: FailureReason::Waiting("CrashLoopBackOff".into()),
            },
            FailedPod {
                pod: "edge-b".into(),
                node: "n2".into(),
                reason: FailureReason::Waiting("ImagePullBackOff".into()),
            },
        ],
        unavailable: 2,
        next_deadline: None,
    };
    let policy = FailurePolicy {
        threshold: FailureThreshold::Count(2),
        on_failure: OnFailure::Rollback,
        progress_deadline: None,
    };
    let halt = halt_verdict(&report, &policy, 5, false).expect("2 of 2 halts");
    let earlier = RevisionRef {
        name: "edge-5c8f7".into(),
        hash: "5c8f7".into(),
        number: 1,
    };
    let halt = halt.with_rollback(&policy, &[earlier], &RolledBackFrom::default());
    let message = halt.message();
    for part in [
        "revision 6d4b9",
        "2 of 4",
        "edge-a on n1 (CrashLoopBackOff)",
        "edge-b on n2 (ImagePullBackOff)",
        "rolling back to revision 5c8f7 (edge-5c8f7)",
    ] {
        assert!(message.contains(part), "{part:?} in {message}");
    }
    let nowhere = halt_verdict(&report, &policy, 5, false)
        .unwrap()
        .with_rollback(&policy, &[], &RolledBackFrom::default());
    assert_eq!(nowhere.rollback, Some(RollbackCourse::NoTarget));
    assert!(
        nowhere.message().contains("found no earlier revision"),
        "{}",
        nowhere.message()
    );
    assert_eq!(halt.reasons, "CrashLoopBackOff: 1, ImagePullBackOff: 1");
    let below = FailurePolicy {
        threshold: FailureThreshold::Count(3),
        ..policy
    };
    assert_eq!(halt_verdict(&report, &below, 5, false), None);
    assert!(
        halt_verdict(&report, &below, 5, true).is_some(),
        "a halt holds"
    );
    let go_on = FailurePolicy {
        on_failure: OnFailure::Continue,
        ..policy
    };
    assert_eq!(halt_verdict(&report, &go_on, 5, true), None);
}

/// Between two restarts a crash-looping container reads `Running` with fewer restarts
/// than the rule counts: no pod reads failed for a moment. A halt reached before holds
/// through that moment, and ends only once every pod of the revision is available.
#[test]
fn a_halt_holds_until_every_pod_of_the_revision_is_available() {
    let policy = FailurePolicy {
        threshold: FailureThreshold::Count(2),
        on_failure: OnFailure::Halt,
        progress_deadline: None,
    };
    let between_restarts = FailureReport {
        revision: "6d4b9".into(),
        reached: 2,
        failed: vec![],
        unavailable: 2,
        next_deadline: None,
    };
    assert!(halt_verdict(&between_restarts, &policy, 5, true).is_some());
    assert_eq!(
        halt_verdict(&between_restarts, &policy, 5, false),
        None,
        "never halted: nothing failed, nothing to hold"
    );
    let fixed = FailureReport {
        unavailable: 0,
        ..between_restarts
    };
    assert_eq!(halt_verdict(&fixed, &policy, 5, true), None);
}

/// One pod of the property test: its node, whether the node is Ready, its revision, and
/// what the kubelet says.
#[derive(Debug, Clone)]
struct Drawn {
    node_ready: bool,
    new: bool,
    waiting: Option<&'static str>,
    restarts: i32,
    ready: bool,
}

fn drawn() -> impl Strategy<Value = Drawn> {
    (
        any::<bool>(),
        any::<bool>(),
        prop::option::of(prop::sample::select(vec![
            "CrashLoopBackOff",
            "ImagePullBackOff",
            "ContainerCreating",
            "CreateContainerConfigError",
        ])),
        0..6i32,
        any::<bool>(),
    )
        .prop_map(|(node_ready, new, waiting, restarts, ready)| Drawn {
            node_ready,
            new,
            waiting,
            restarts,
            ready: ready && waiting.is_none(),
        })
}

proptest! {
    /// Whatever the pods say: a pod on a NotReady node or of an old revision never
    /// counts; a failed pod is exactly one the kubelet rule names; and the halt comes
    /// exactly at the threshold, which never exceeds the budget.
    #[test]
    fn not_ready_nodes_never_count_and_the_halt_comes_at_the_threshold(
        pods in prop::collection::vec(drawn(), 0..24),
        threshold in 1..6u32,
        budget in 0..8usize,
    ) {
        let ds = daemonset();
        let current = current(&ds);
        let mut full = Vec::new();
        let mut nodes = Vec::new();
        for (i, d) in pods.iter().enumerate() {
            let name = format!("n{i:02}");
            let mut pod = PodBuilder::new(&format!("p{i}"), &ds)
                .hash(if d.new { "new" } else { "old" })
                .on_node(&name)
                .container("main", d.ready, d.waiting, d.restarts);
            pod = if d.ready { pod.ready_since(at(NOW - 60)) } else { pod.not_ready() };
            full.push(pod.build());
            nodes.push(node(&name, d.node_ready));
        }
        let policy = FailurePolicy { threshold: FailureThreshold::Count(threshold), ..FailurePolicy::default() };
        let report = assess(&full, &nodes, &ds, Some(&current), &policy, at(NOW));
        let expected: Vec<String> = pods
            .iter()
            .enumerate()
            .filter(|(_, d)| d.node_ready && d.new)
            .filter(|(_, d)| {
                matches!(d.waiting, Some(w) if w != "ContainerCreating")
                    || (!d.ready && d.restarts >= RESTARTS_FAILED)
            })
            .map(|(i, _)| format!("n{i:02}"))
            .collect();
        let got: Vec<String> = report.failed.iter().map(|f| f.node.clone()).collect();
        prop_assert_eq!(&got, &expected);
        prop_assert_eq!(report.reached, pods.iter().filter(|d| d.node_ready && d.new).count());
        let halts = halt_verdict(&report, &policy, budget, false).is_some();
        let at_most = (threshold as usize).min(budget.max(1));
        prop_assert_eq!(halts, !expected.is_empty() && expected.len() >= at_most);
    }
}
