//! Pull-ahead for AdvancedRollingUpdate (`rollgate.io/pull-ahead: "true"`): the new
//! images are pulled on a node before its old pod is deleted, so the node's downtime is
//! the pod's stop and start, not the download. Pure: the rolling plan, the pods and what
//! the controller counted go in; the deletions allowed now and the pull requests to
//! write come out. `controller` applies it.
//!
//! How a pull is asked for: the same way the node agent asks in OTA. The old pod gets
//! `PodImageReady=False, PullImageRequested` naming the current revision, and the OTA
//! image-pull controller (`image_pull`) answers it with its pull Job and writes
//! `PullImageSuccess` or `PullImageFail` back. One Job, one deadline
//! (`rollgate.io/image-pull-deadline`), one set of credentials for both models, and one
//! way to write and read the request (`crate::pod_image_ready`, with its time rule).
//!
//! Rules:
//! - The *window* is the nodes the budget reaches soon: the plan's deletions, then the
//!   old pods it left for later (`RollingPlan::upcoming`), in the plan's order, cut to
//!   `budget + lookahead` nodes. Pulls are requested only there, never beyond.
//! - At most `parallelism` pulls are in flight for one DaemonSet (a request not yet
//!   answered counts, wherever its pod is).
//! - A deletion the budget allows goes ahead only once its pod's pull for the current
//!   revision succeeded, or failed `max_tries` times (then the node is upgraded without
//!   it, and a Warning says so: a node whose pulls keep failing, e.g. a registry that
//!   only the DaemonSet's own pods can reach, must not stop the rollout for good; the
//!   new pod then pulls as it would have without pull-ahead).
//! - A failed pull is asked for again while tries are left (the failure itself is
//!   reported by the image-pull controller, a Warning `PullImageFail` on the pod).
//! - Paused: no new request (and no deletion, as without pull-ahead).
//!
//! `PullAheadView` is the same facts for people (`rollgate status`): where pulls are in
//! flight or failed, which deletions wait, and (from the `PullAheadGaveUp` Warnings,
//! whose note `GaveUp` writes and reads) which nodes went ahead without their images.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::PodCondition;
use k8s_openapi::jiff::Timestamp;

use super::rolling_plan::{PlannedDeletion, RollingPlan};
use crate::names::{POD_IMAGE_READY_CONDITION, PULL_AHEAD_ANNOTATION};
use crate::object::PodFacts;
pub use crate::pod_image_ready::{pull_state, PullState};
use crate::pod_image_ready::{request, stamp_of};

/// The controller's flags for pull-ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PullAheadLimits {
    /// Most pulls in flight per DaemonSet (`--pull-ahead-parallelism`).
    pub parallelism: usize,
    /// Nodes past the budget's reach that may be pulled on already
    /// (`--pull-ahead-lookahead`): their pulls run while the current wave's pods start.
    /// `None`: one more wave, the budget.
    pub lookahead: Option<usize>,
    /// Pulls of one pod that may fail before its node is upgraded without one
    /// (`--pull-ahead-tries`).
    pub max_tries: u32,
}

impl PullAheadLimits {
    /// Enough to keep a 10% wave of a few hundred nodes pulling without a burst of Jobs
    /// that an edge uplink or a registry would feel.
    pub const DEFAULT_PARALLELISM: usize = 20;
    /// Three: one retry covers a Job whose pod was evicted or a registry hiccup, a third
    /// a slow link's timeout; a node that fails more has a cause a retry does not fix.
    pub const DEFAULT_MAX_TRIES: u32 = 3;
}

impl Default for PullAheadLimits {
    fn default() -> Self {
        Self {
            parallelism: Self::DEFAULT_PARALLELISM,
            lookahead: None,
            max_tries: Self::DEFAULT_MAX_TRIES,
        }
    }
}

/// `rollgate.io/pull-ahead` cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid value {value:?} for annotation {PULL_AHEAD_ANNOTATION}: expected true or false \
     (no pod is deleted until it is fixed)"
)]
pub struct InvalidPullAhead {
    pub value: String,
}

/// Whether the DaemonSet asks for pull-ahead: `true` or `false` (surrounding whitespace
/// ignored), absent is `false`.
pub fn pull_ahead_of(daemonset: &DaemonSet) -> Result<bool, InvalidPullAhead> {
    let value = daemonset
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PULL_AHEAD_ANNOTATION));
    match value.map(|v| v.trim()) {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(_) => Err(InvalidPullAhead {
            value: value.cloned().unwrap_or_default(),
        }),
    }
}

/// Failed pulls counted per pod, for the current revision. The controller keeps one per
/// DaemonSet in memory: a restart forgets the counts, so a node gets at most
/// `max_tries` more pulls, still a bound.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PullTries {
    /// Pod UID -> (revision, failures seen, `lastTransitionTime` of the last one).
    by_pod: BTreeMap<String, (String, u32, String)>,
}

impl PullTries {
    /// Counts every failure answer not counted yet (a new `lastTransitionTime`), and
    /// forgets pods that are gone.
    pub fn observe<P: PodFacts>(&mut self, pods: &[Arc<P>], hash: &str) {
        let live: BTreeSet<&str> = pods.iter().map(|p| p.pod_uid()).collect();
        self.by_pod.retain(|uid, _| live.contains(uid.as_str()));
        for pod in pods {
            if pull_state(&**pod, hash) != PullState::Failed {
                continue;
            }
            let stamp = stamp_of(&**pod).unwrap_or_default();
            let entry = self
                .by_pod
                .entry(pod.pod_uid().to_string())
                .or_insert_with(|| (hash.to_string(), 0, String::new()));
            if entry.0 != hash {
                *entry = (hash.to_string(), 0, String::new());
            }
            if entry.2 != stamp || entry.1 == 0 {
                entry.1 += 1;
                entry.2 = stamp;
            }
        }
    }

    /// Failed pulls of the pod's current revision seen so far.
    pub fn failures(&self, pod_uid: &str, hash: &str) -> u32 {
        match self.by_pod.get(pod_uid) {
            Some((h, n, _)) if h == hash => *n,
            _ => 0,
        }
    }
}

/// Requests written whose pod the cache does not show changed yet. Without it, a plan
/// made between the write and its watch event would ask again, with a new stamp, and the
/// image-pull controller would replace the first Job with a second. An entry lasts until
/// the pod's `PodImageReady` changes from what it was when asked, or `UNSEEN_FOR`.
#[derive(Debug, Default)]
pub struct UnseenRequests {
    /// Pod UID -> (`lastTransitionTime` of its `PodImageReady` before the request, when).
    by_pod: BTreeMap<String, (Option<String>, std::time::Instant)>,
}

impl UnseenRequests {
    /// Longer than any watch lag; short enough that a lost write is asked again soon.
    pub const UNSEEN_FOR: std::time::Duration = std::time::Duration::from_secs(30);

    pub fn record(&mut self, pod_uid: &str, stamp_before: Option<String>, now: std::time::Instant) {
        self.by_pod.insert(pod_uid.to_string(), (stamp_before, now));
    }

    /// Drops the requests the cache shows (or that are too old), and returns the UIDs of
    /// the pods still waiting to show theirs.
    pub fn still_unseen<P: PodFacts>(
        &mut self,
        pods: &[Arc<P>],
        now: std::time::Instant,
    ) -> BTreeSet<String> {
        let stamps: BTreeMap<&str, Option<String>> =
            pods.iter().map(|p| (p.pod_uid(), stamp_of(&**p))).collect();
        self.by_pod.retain(|uid, (before, at)| {
            now.duration_since(*at) < Self::UNSEEN_FOR
                && stamps.get(uid.as_str()).is_some_and(|s| s == before)
        });
        self.by_pod.keys().cloned().collect()
    }
}

/// A `PodImageReady` request to write on an old pod.
#[derive(Debug, Clone, PartialEq)]
pub struct PullRequest {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub node: String,
    pub condition: PodCondition,
    /// The pod's `PodImageReady` stamp when asked (see `UnseenRequests`).
    pub stamp_before: Option<String>,
}

/// A deletion that goes ahead without a pull: its pulls of `revision` failed `failures`
/// times.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GaveUp {
    pub node: String,
    pub pod: String,
    pub failures: u32,
    pub revision: String,
}

impl GaveUp {
    /// The note of the Warning `PullAheadGaveUp`. The Event is the only record of a node
    /// upgraded without its images once its old pod is gone, so `rollgate status` reads
    /// it back with [`GaveUp::from_note`]: the two are kept together here.
    pub fn note(&self) -> String {
        format!(
            "node {}: {} pull(s) of the new images (revision {}) failed; pod {} is replaced without them (the new pod pulls as it starts)",
            self.node, self.failures, self.revision, self.pod
        )
    }

    /// Reads a note written by [`GaveUp::note`]; `None` for any other text.
    pub fn from_note(note: &str) -> Option<GaveUp> {
        let (node, rest) = note.strip_prefix("node ")?.split_once(": ")?;
        let (failures, rest) = rest.split_once(" pull(s) of the new images (revision ")?;
        let (revision, rest) = rest.split_once(") failed; pod ")?;
        let (pod, _) = rest.split_once(" is replaced without them")?;
        Some(GaveUp {
            node: node.to_string(),
            pod: pod.to_string(),
            failures: failures.parse().ok()?,
            revision: revision.to_string(),
        })
    }
}

/// What pull-ahead lets happen now.
#[derive(Debug, Clone, PartialEq)]
pub struct PullAheadPlan {
    /// The plan's deletions whose pull succeeded or gave up, in the plan's order.
    pub deletions: Vec<PlannedDeletion>,
    /// Nodes the budget allows now whose deletion waits for its pull.
    pub held: Vec<String>,
    /// Pulls to ask for now.
    pub requests: Vec<PullRequest>,
    /// Deletions that go ahead without their image.
    pub gave_up: Vec<GaveUp>,
    /// Pulls in flight before this plan's requests.
    pub in_flight: usize,
}

/// Applies pull-ahead to `plan` (made for the DaemonSet's pods `pods`, current revision
/// `hash`; already held if `paused`). `unseen`: pods asked to pull whose request the
/// cache does not show yet; they count as in flight.
#[allow(clippy::too_many_arguments)]
pub fn plan_pull_ahead<P: PodFacts>(
    plan: &RollingPlan,
    pods: &[Arc<P>],
    hash: &str,
    tries: &PullTries,
    unseen: &BTreeSet<String>,
    paused: bool,
    limits: PullAheadLimits,
    now: Timestamp,
) -> PullAheadPlan {
    let by_uid: BTreeMap<&str, &P> = pods.iter().map(|p| (p.pod_uid(), &**p)).collect();
    let state_of = |uid: &str| match by_uid.get(uid) {
        _ if unseen.contains(uid) => PullState::InFlight,
        Some(pod) => pull_state(*pod, hash),
        None => PullState::NotRequested,
    };
    let in_flight = pods
        .iter()
        .filter(|p| !p.is_terminating() && state_of(p.pod_uid()) == PullState::InFlight)
        .count();
    let mut slots = limits.parallelism.saturating_sub(in_flight);
    let budget = plan.progress.budget;
    let window = budget + limits.lookahead.unwrap_or(budget);

    let mut result = PullAheadPlan {
        deletions: Vec::new(),
        held: Vec::new(),
        requests: Vec::new(),
        gave_up: Vec::new(),
        in_flight,
    };
    let now_deleted: BTreeSet<&str> = plan.deletions.iter().map(|d| d.uid.as_str()).collect();
    for (i, step) in plan.deletions.iter().chain(&plan.upcoming).enumerate() {
        let allowed_now = now_deleted.contains(step.uid.as_str());
        let failures = tries.failures(&step.uid, hash);
        let state = state_of(&step.uid);
        let ready = match state {
            PullState::Succeeded => true,
            PullState::Failed => failures >= limits.max_tries.max(1),
            PullState::NotRequested | PullState::InFlight => false,
        };
        if allowed_now {
            if ready {
                if state == PullState::Failed {
                    result.gave_up.push(GaveUp {
                        node: step.node.clone(),
                        pod: step.name.clone(),
                        failures,
                        revision: hash.to_string(),
                    });
                }
                result.deletions.push(step.clone());
                continue;
            }
            result.held.push(step.node.clone());
        }
        let wants_pull =
            matches!(state, PullState::NotRequested) || (state == PullState::Failed && !ready);
        if paused || !wants_pull || i >= window || slots == 0 {
            continue;
        }
        slots -= 1;
        result.requests.push(PullRequest {
            namespace: step.namespace.clone(),
            name: step.name.clone(),
            uid: step.uid.clone(),
            node: step.node.clone(),
            condition: request(hash, now, previous_time(by_uid.get(step.uid.as_str()))),
            stamp_before: by_uid.get(step.uid.as_str()).and_then(|p| stamp_of(*p)),
        });
    }
    result
}

/// Where pull-ahead stands on a rollout, for people (`rollgate status`, its `-o json`).
/// Nodes by name, sorted, except `held` (the plan's order).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct PullAheadView {
    /// Nodes whose pull of the current revision is asked for and not answered yet.
    pub pulling: Vec<String>,
    /// Nodes the budget lets go now whose old pod waits for its pull.
    pub held: Vec<String>,
    /// Nodes whose last pull of the current revision failed: asked again while tries are
    /// left (`--pull-ahead-tries`), then upgraded without it.
    pub failed: Vec<String>,
    /// Nodes upgraded to the current revision without their images, after their pulls
    /// kept failing (one per node, its most failures).
    pub gave_up: Vec<GaveUp>,
}

impl PullAheadView {
    /// The view of a rollout planned as `plan` (before pull-ahead held anything) for the
    /// pods of the DaemonSet with UID `owner`, current revision `hash`. `gave_up`: what
    /// the Warnings `PullAheadGaveUp` say (of any revision; only `hash`'s count).
    pub fn of<P: PodFacts>(
        plan: &RollingPlan,
        pods: &[Arc<P>],
        owner: &str,
        hash: &str,
        gave_up: &[GaveUp],
    ) -> PullAheadView {
        let mine: Vec<&P> = pods
            .iter()
            .map(|p| &**p)
            .filter(|p| !p.is_terminating() && crate::object::is_controlled_by(*p, owner))
            .collect();
        let nodes_in = |state: PullState| -> Vec<String> {
            let nodes: BTreeSet<String> = mine
                .iter()
                .filter(|p| pull_state(**p, hash) == state)
                .filter_map(|p| p.node_name().map(str::to_string))
                .collect();
            nodes.into_iter().collect()
        };
        let by_uid: BTreeMap<&str, &P> = mine.iter().map(|p| (p.pod_uid(), *p)).collect();
        let held = plan
            .deletions
            .iter()
            .filter(|d| {
                by_uid
                    .get(d.uid.as_str())
                    .is_none_or(|p| pull_state(*p, hash) != PullState::Succeeded)
            })
            .map(|d| d.node.clone())
            .collect();
        let mut most: BTreeMap<&str, &GaveUp> = BTreeMap::new();
        for g in gave_up.iter().filter(|g| g.revision == hash) {
            let kept = most.entry(g.node.as_str()).or_insert(g);
            if g.failures > kept.failures {
                *kept = g;
            }
        }
        PullAheadView {
            pulling: nodes_in(PullState::InFlight),
            held,
            failed: nodes_in(PullState::Failed),
            gave_up: most.into_values().cloned().collect(),
        }
    }
}

/// The time of the pod's `PodImageReady`, which a new request must come after.
fn previous_time<P: PodFacts>(pod: Option<&&P>) -> Option<Timestamp> {
    pod?.condition(POD_IMAGE_READY_CONDITION)?
        .last_transition_time
        .map(|t| t.0)
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use k8s_openapi::api::core::v1::{Node, Pod};
    use proptest::prelude::*;

    use super::*;
    use crate::daemonset::policy::MaxUnavailable;
    use crate::daemonset::revision::CurrentRevision;
    use crate::daemonset::rolling_plan::{plan_rolling_update, RollingInput, RollingLimits};
    use crate::names::PULL_IMAGE_SUCCESS_REASON;
    use crate::names::{PULL_IMAGE_FAIL_REASON, PULL_IMAGE_REQUESTED_REASON};
    use crate::revision_message::need_upgrade_message;
    use crate::testkit::{at, node, revision, DaemonSetBuilder, PodBuilder};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    const NOW: i64 = 1_000_000;

    /// What one node's old pod says about its pull of revision "new".
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Pull {
        None,
        /// A request for an older revision: not one for "new".
        OtherRevision,
        InFlight,
        Succeeded,
        /// Failed, this many failures counted.
        Failed(u32),
    }

    fn condition(status: &str, reason: &str, hash: &str, stamp: i64) -> PodCondition {
        PodCondition {
            type_: POD_IMAGE_READY_CONDITION.into(),
            status: status.into(),
            reason: Some(reason.into()),
            message: Some(need_upgrade_message(hash)),
            last_transition_time: Some(Time(at(stamp))),
            ..Default::default()
        }
    }

    struct Case {
        pods: Vec<Arc<Pod>>,
        plan: RollingPlan,
        tries: PullTries,
    }

    /// `pulls.len()` Ready nodes `n00..`, each with an available old pod whose pull
    /// stands as given, budget `budget` nodes.
    fn case(pulls: &[Pull], budget: u32) -> Case {
        let ds = DaemonSetBuilder::new("agent")
            .strategy("AdvancedRollingUpdate")
            .on_delete()
            .build();
        let revisions = vec![revision(&ds, "old", 1), revision(&ds, "new", 2)];
        let mut pods = Vec::new();
        let mut nodes: Vec<Arc<Node>> = Vec::new();
        for (i, pull) in pulls.iter().enumerate() {
            let name = format!("n{i:02}");
            nodes.push(Arc::new(node(&name, true)));
            let mut pod = PodBuilder::new(&format!("p{i:02}"), &ds)
                .hash("old")
                .on_node(&name)
                .ready_since(at(NOW - 3600));
            pod = match pull {
                Pull::None => pod,
                Pull::OtherRevision => {
                    pod.with_condition(condition("True", PULL_IMAGE_SUCCESS_REASON, "older", 1))
                }
                Pull::InFlight => {
                    pod.with_condition(condition("False", PULL_IMAGE_REQUESTED_REASON, "new", 1))
                }
                Pull::Succeeded => {
                    pod.with_condition(condition("True", PULL_IMAGE_SUCCESS_REASON, "new", 1))
                }
                Pull::Failed(_) => {
                    pod.with_condition(condition("False", PULL_IMAGE_FAIL_REASON, "new", 1))
                }
            };
            pods.push(Arc::new(pod.build()));
        }
        let current = CurrentRevision::of(&ds, &revisions);
        let plan = plan_rolling_update(&RollingInput {
            daemonset: &ds,
            current: current.as_ref(),
            pods: &pods,
            nodes: &nodes,
            max_unavailable: MaxUnavailable::Count(budget),
            now: at(NOW),
            expected_deletions: &BTreeSet::new(),
            vacated_by_us: &BTreeMap::new(),
            limits: RollingLimits::default(),
            partition: None,
            node_selector: None,
            waves: None,
            proving: None,
            list_upcoming: true,
        });
        // The failures as the controller would have counted them, one answer at a time.
        let mut tries = PullTries::default();
        for (i, pull) in pulls.iter().enumerate() {
            if let Pull::Failed(n) = pull {
                tries
                    .by_pod
                    .insert(format!("uid-p{i:02}"), ("new".into(), *n, "1".into()));
            }
        }
        Case { pods, plan, tries }
    }

    fn limits(parallelism: usize, lookahead: Option<usize>, max_tries: u32) -> PullAheadLimits {
        PullAheadLimits {
            parallelism,
            lookahead,
            max_tries,
        }
    }

    fn run(case: &Case, paused: bool, limits: PullAheadLimits) -> PullAheadPlan {
        let plan = if paused {
            case.plan.clone().paused()
        } else {
            case.plan.clone()
        };
        plan_pull_ahead(
            &plan,
            &case.pods,
            "new",
            &case.tries,
            &BTreeSet::new(),
            paused,
            limits,
            at(NOW),
        )
    }

    fn nodes_of(requests: &[PullRequest]) -> Vec<&str> {
        requests.iter().map(|r| r.node.as_str()).collect()
    }

    fn deleted(plan: &PullAheadPlan) -> Vec<&str> {
        plan.deletions.iter().map(|d| d.node.as_str()).collect()
    }

    #[test]
    fn nothing_pulled_yet_holds_the_wave_and_pulls_it_and_the_next() {
        let c = case(&[Pull::None; 6], 2);
        let p = run(&c, false, limits(10, None, 3));
        assert!(p.deletions.is_empty());
        assert_eq!(p.held, ["n00", "n01"]);
        // The budget (2) and one more wave (lookahead = budget).
        assert_eq!(nodes_of(&p.requests), ["n00", "n01", "n02", "n03"]);
        let r = &p.requests[0];
        assert_eq!(r.condition.type_, POD_IMAGE_READY_CONDITION);
        assert_eq!(r.condition.status, "False");
        assert_eq!(
            r.condition.reason.as_deref(),
            Some(PULL_IMAGE_REQUESTED_REASON)
        );
        assert_eq!(
            r.condition.message.as_deref(),
            Some("controllerrevision: new")
        );
        assert_eq!((r.name.as_str(), r.uid.as_str()), ("p00", "uid-p00"));
    }

    #[test]
    fn a_node_is_deleted_once_its_pull_succeeded_and_the_rest_of_the_wave_waits() {
        let c = case(
            &[Pull::Succeeded, Pull::InFlight, Pull::InFlight, Pull::None],
            2,
        );
        let p = run(&c, false, limits(10, Some(0), 3));
        assert_eq!(deleted(&p), ["n00"]);
        assert_eq!(p.held, ["n01"]);
        assert_eq!(p.in_flight, 2);
        // Lookahead 0: nothing past the budget's reach (n00, n01) is pulled.
        assert!(p.requests.is_empty());
    }

    #[test]
    fn parallelism_counts_pulls_in_flight_anywhere() {
        let c = case(
            &[
                Pull::None,
                Pull::None,
                Pull::None,
                Pull::InFlight,
                Pull::InFlight,
            ],
            3,
        );
        let p = run(&c, false, limits(3, None, 3));
        assert_eq!(p.in_flight, 2);
        assert_eq!(nodes_of(&p.requests), ["n00"]);
    }

    #[test]
    fn a_failed_pull_is_asked_again_until_the_tries_run_out_then_the_node_goes_without() {
        let c = case(&[Pull::Failed(1), Pull::Failed(3)], 2);
        let p = run(&c, false, limits(10, None, 3));
        assert_eq!(deleted(&p), ["n01"]);
        assert_eq!(
            p.gave_up,
            [GaveUp {
                node: "n01".into(),
                pod: "p01".into(),
                failures: 3,
                revision: "new".into(),
            }]
        );
        assert_eq!(p.held, ["n00"]);
        assert_eq!(nodes_of(&p.requests), ["n00"]);
    }

    #[test]
    fn a_pull_of_another_revision_does_not_count() {
        let c = case(&[Pull::OtherRevision], 1);
        let p = run(&c, false, limits(10, None, 3));
        assert!(p.deletions.is_empty());
        assert_eq!(nodes_of(&p.requests), ["n00"]);
    }

    #[test]
    fn a_request_the_cache_does_not_show_yet_is_not_asked_again() {
        let c = case(&[Pull::None, Pull::Failed(1), Pull::None], 3);
        let unseen = BTreeSet::from(["uid-p00".to_string(), "uid-p01".to_string()]);
        let p = plan_pull_ahead(
            &c.plan,
            &c.pods,
            "new",
            &c.tries,
            &unseen,
            false,
            limits(10, None, 3),
            at(NOW),
        );
        assert_eq!(p.in_flight, 2);
        assert_eq!(nodes_of(&p.requests), ["n02"]);
        assert_eq!(p.held, ["n00", "n01", "n02"]);
    }

    #[test]
    fn unseen_requests_last_until_the_pod_shows_a_change() {
        let ds = DaemonSetBuilder::new("agent").build();
        let pod = |c: Option<PodCondition>| {
            let b = PodBuilder::new("p", &ds);
            vec![Arc::new(match c {
                Some(c) => b.with_condition(c).build(),
                None => b.build(),
            })]
        };
        let t0 = std::time::Instant::now();
        let mut unseen = UnseenRequests::default();
        unseen.record("uid-p", None, t0);
        assert_eq!(unseen.still_unseen(&pod(None), t0).len(), 1);
        // The request shows: done.
        let asked = condition("False", PULL_IMAGE_REQUESTED_REASON, "new", 5);
        assert!(unseen
            .still_unseen(&pod(Some(asked.clone())), t0)
            .is_empty());
        // A retry after a failure: the old failure is what the cache shows until then.
        let failed = condition("False", PULL_IMAGE_FAIL_REASON, "new", 7);
        let stamp = stamp_of(&*pod(Some(failed.clone()))[0]);
        unseen.record("uid-p", stamp, t0);
        assert_eq!(unseen.still_unseen(&pod(Some(failed.clone())), t0).len(), 1);
        // Too long: asked again.
        let later = t0 + UnseenRequests::UNSEEN_FOR;
        assert!(unseen.still_unseen(&pod(Some(failed)), later).is_empty());
    }

    #[test]
    fn paused_neither_pulls_nor_deletes() {
        let c = case(&[Pull::Succeeded, Pull::None, Pull::None], 2);
        let p = run(&c, true, limits(10, None, 3));
        assert!(p.deletions.is_empty());
        assert!(p.requests.is_empty());
    }

    #[test]
    fn the_annotation_reads_true_or_false_and_names_the_accepted_forms_otherwise() {
        let ds = |value: Option<&str>| {
            let mut ds = DaemonSetBuilder::new("agent").build();
            if let Some(v) = value {
                ds.metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .insert(PULL_AHEAD_ANNOTATION.into(), v.into());
            }
            ds
        };
        assert_eq!(pull_ahead_of(&ds(None)), Ok(false));
        assert_eq!(pull_ahead_of(&ds(Some("false"))), Ok(false));
        assert_eq!(pull_ahead_of(&ds(Some(" true "))), Ok(true));
        for bad in ["yes", "True", "1", ""] {
            let error = pull_ahead_of(&ds(Some(bad))).unwrap_err();
            let text = error.to_string();
            assert!(text.contains(PULL_AHEAD_ANNOTATION) && text.contains("true or false"));
        }
    }

    #[test]
    fn failures_are_counted_once_per_answer_and_reset_by_a_new_revision() {
        let ds = DaemonSetBuilder::new("agent").build();
        let failed = |stamp: i64, hash: &str| {
            vec![Arc::new(
                PodBuilder::new("p", &ds)
                    .with_condition(condition("False", PULL_IMAGE_FAIL_REASON, hash, stamp))
                    .build(),
            )]
        };
        let mut tries = PullTries::default();
        tries.observe(&failed(1, "new"), "new");
        tries.observe(&failed(1, "new"), "new");
        assert_eq!(tries.failures("uid-p", "new"), 1);
        tries.observe(&failed(2, "new"), "new");
        assert_eq!(tries.failures("uid-p", "new"), 2);
        tries.observe(&failed(3, "newer"), "newer");
        assert_eq!(tries.failures("uid-p", "newer"), 1);
        assert_eq!(tries.failures("uid-p", "new"), 0);
        tries.observe::<Pod>(&[], "newer");
        assert_eq!(tries.failures("uid-p", "newer"), 0);
    }

    #[test]
    fn the_gave_up_note_reads_back_and_other_text_does_not() {
        let g = GaveUp {
            node: "edge-1".into(),
            pod: "agent-x1".into(),
            failures: 3,
            revision: "6d5f7c9b8".into(),
        };
        assert_eq!(GaveUp::from_note(&g.note()), Some(g.clone()));
        for other in [
            "",
            "node edge-1: many pull(s) of the new images (revision a) failed; pod p is replaced without them",
            "deleted 1 pod(s) for the upgrade",
        ] {
            assert_eq!(GaveUp::from_note(other), None, "{other}");
        }
    }

    #[test]
    fn the_view_names_pulling_failed_held_and_given_up_nodes() {
        let c = case(
            &[
                Pull::InFlight,
                Pull::Succeeded,
                Pull::Failed(1),
                Pull::None,
                Pull::InFlight,
            ],
            3,
        );
        let gave_up = |node: &str, failures, revision: &str| GaveUp {
            node: node.into(),
            pod: "gone".into(),
            failures,
            revision: revision.into(),
        };
        let events = [
            gave_up("n09", 2, "new"),
            gave_up("n09", 3, "new"),
            gave_up("n08", 3, "older"),
        ];
        let view = PullAheadView::of(&c.plan, &c.pods, "uid-ds-agent", "new", &events);
        assert_eq!(view.pulling, ["n00", "n04"]);
        assert_eq!(view.failed, ["n02"]);
        // The budget (3) lets n00..n02 go; n01 pulled, the others wait for theirs.
        assert_eq!(view.held, ["n00", "n02"]);
        assert_eq!(view.gave_up, [gave_up("n09", 3, "new")]);
        // Another DaemonSet's pods say nothing about this one.
        let none = PullAheadView::of(&c.plan, &c.pods, "uid-other", "new", &[]);
        assert!(none.pulling.is_empty() && none.failed.is_empty());
    }

    fn pull_strategy() -> impl Strategy<Value = Pull> {
        prop_oneof![
            Just(Pull::None),
            Just(Pull::OtherRevision),
            Just(Pull::InFlight),
            Just(Pull::Succeeded),
            (0u32..5).prop_map(Pull::Failed),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Pulls never reach past budget + lookahead nodes of the plan's order, never
        /// exceed the parallelism, and never happen while paused; a deletion happens only
        /// after its pull succeeded or gave up, and every deletion the budget allowed is
        /// either made or held for its pull.
        #[test]
        fn pulls_stay_in_the_window_and_deletions_wait_for_their_pull(
            pulls in prop::collection::vec(pull_strategy(), 1..30),
            budget in 1u32..8,
            parallelism in 1usize..12,
            lookahead in prop::option::of(0usize..8),
            max_tries in 1u32..4,
            paused in any::<bool>(),
        ) {
            let c = case(&pulls, budget);
            let p = run(&c, paused, limits(parallelism, lookahead, max_tries));
            let base = if paused { c.plan.clone().paused() } else { c.plan.clone() };
            let order: Vec<&str> = base
                .deletions
                .iter()
                .chain(&base.upcoming)
                .map(|d| d.node.as_str())
                .collect();
            let window = (budget as usize).min(pulls.len()) + lookahead.unwrap_or(budget as usize);
            let allowed: BTreeSet<&str> = order.iter().take(window).copied().collect();
            let in_flight = pulls.iter().filter(|p| **p == Pull::InFlight).count();
            prop_assert!(nodes_of(&p.requests).iter().all(|n| allowed.contains(n)));
            prop_assert!(p.requests.len() <= parallelism.saturating_sub(in_flight));
            if paused {
                prop_assert!(p.requests.is_empty());
                prop_assert!(p.deletions.is_empty());
            }
            for d in &p.deletions {
                let i: usize = d.node[1..].parse().unwrap();
                let ok = match pulls[i] {
                    Pull::Succeeded => true,
                    Pull::Failed(n) => n >= max_tries,
                    _ => false,
                };
                prop_assert!(ok, "{} deleted with pull {:?}", d.node, pulls[i]);
            }
            let mut made_or_held: Vec<&str> = deleted(&p);
            made_or_held.extend(p.held.iter().map(String::as_str));
            made_or_held.sort_unstable();
            let mut planned: Vec<&str> = base.deletions.iter().map(|d| d.node.as_str()).collect();
            planned.sort_unstable();
            prop_assert_eq!(made_or_held, planned);
            // A request is only for a pod that wants one: never a second pull in flight.
            for r in &p.requests {
                let i: usize = r.node[1..].parse().unwrap();
                prop_assert!(matches!(pulls[i], Pull::None | Pull::OtherRevision | Pull::Failed(_)));
            }
        }
    }
}
