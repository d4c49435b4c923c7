//! A revision that fails stops by itself: which pods of the current revision have
//! failed, and whether that many failures halt the rollout. Pure: the pods, the nodes
//! and the clock in, a report and a verdict out (`decide` takes them into its one
//! decision; `rollgate status` reads the same).
//!
//! The rule, per live pod of the current revision on a Ready node:
//! - failed when the kubelet says it cannot start: a container waiting with reason
//!   `CrashLoopBackOff`, `ErrImagePull`, `ImagePullBackOff`, `CreateContainerConfigError`
//!   or `InvalidImageName`, or a container that is not ready and has restarted
//!   [`RESTARTS_FAILED`] times or more (a crash loop between its back-offs reads
//!   `Running` for a moment);
//! - failed when it is not available `rollgate.io/progress-deadline` after its creation
//!   (no deadline unless the annotation sets one: a slow image pull on an edge link is
//!   not a bad release, and only the operator knows how slow is too slow).
//!
//! Never a failure:
//! - a pod on a NotReady or missing node: the edge cut off is the model working, and
//!   its status is what the node said last, not news about the revision;
//! - a pod whose image is being pulled ahead (`PodImageReady` False, requested): it has
//!   not been given its chance yet;
//! - a pod of an old revision, or terminating.
//!
//! The threshold (`rollgate.io/failure-threshold`, default [`DEFAULT_FAILURE_THRESHOLD`])
//! is a count, or a percentage of the pods the revision reached (its live pods on Ready
//! nodes), rounded up. A threshold above the budget is the budget: a failed pod's node is
//! unavailable, so no more failures than the budget can ever show up, and a threshold
//! above it would never halt.
//!
//! With `rollgate.io/on-failure: rollback` the halt also puts the template back to the
//! previous revision (`rollback`); a revision rolled back from is held, not rolled out
//! again (`hold_on_failure`).
//!
//! The halt holds for the revision once reached: the controller remembers it
//! (`halted_earlier`), so a failed node that goes NotReady (and stops counting) does not
//! free a deletion while any pod of the revision is unavailable. It ends with a new
//! template (another revision), when every pod of the revision on a Ready node is
//! available (the cause was fixed outside the template, e.g. a missing ConfigMap
//! created; a crash loop between two restarts is not that), or with
//! `rollgate.io/on-failure: continue`.
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::jiff::Timestamp;

use super::revision::CurrentRevision;
use super::rolling_plan::{is_available, Blocker, RollingPlan};
use crate::names::{
    HALTED_REVISION_ANNOTATION, POD_IMAGE_READY_CONDITION, PULL_IMAGE_REQUESTED_REASON,
};
use crate::object::{annotation, is_controlled_by, NodeFacts, PodFacts};

/// Container waiting reasons with which the kubelet says a container cannot start.
pub const FAILED_WAITING_REASONS: &[&str] = &[
    "CrashLoopBackOff",
    "ErrImagePull",
    "ImagePullBackOff",
    "CreateContainerConfigError",
    "InvalidImageName",
];

/// A container that is not ready and has restarted this many times has failed.
pub const RESTARTS_FAILED: i32 = 3;

/// Why a pod has failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailureReason {
    /// A container waits with one of [`FAILED_WAITING_REASONS`].
    Waiting(String),
    /// A container not ready has restarted this many times.
    Restarts(i32),
    /// Not available this long after its creation.
    ProgressDeadline(Duration),
}

impl FailureReason {
    /// The reason without the pod's own numbers, to group pods by.
    pub fn kind(&self) -> String {
        match self {
            FailureReason::Waiting(reason) => reason.clone(),
            FailureReason::Restarts(_) => format!("restarted {RESTARTS_FAILED}+ times"),
            FailureReason::ProgressDeadline(_) => "not available by the progress deadline".into(),
        }
    }
}

impl std::fmt::Display for FailureReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FailureReason::Waiting(reason) => f.write_str(reason),
            FailureReason::Restarts(count) => write!(f, "not ready after {count} restarts"),
            FailureReason::ProgressDeadline(deadline) => write!(
                f,
                "not available {}s after its creation (rollgate.io/progress-deadline)",
                deadline.as_secs()
            ),
        }
    }
}

/// A failed pod of the current revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedPod {
    pub pod: String,
    pub node: String,
    pub reason: FailureReason,
}

/// What was found of the current revision's pods on Ready nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FailureReport {
    /// The current revision as the pods name it (its hash, else the template generation).
    pub revision: String,
    /// Live pods of the revision on Ready nodes: the base of a percentage threshold.
    pub reached: usize,
    /// The failed ones, in node name order.
    pub failed: Vec<FailedPod>,
    /// Of `reached`, the ones not available (failed or not): a halt holds while any is,
    /// since a crash loop reads `Running` for a moment after each restart.
    pub unavailable: usize,
    /// When the earliest pod not yet available reaches its progress deadline: no watch
    /// event fires then, so the controller looks again after it.
    pub next_deadline: Option<Duration>,
}

impl FailureReport {
    /// The failed pods' reasons, grouped: `CrashLoopBackOff: 2, ImagePullBackOff: 1`.
    pub fn reasons(&self) -> String {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for failed in &self.failed {
            *counts.entry(failed.reason.kind()).or_default() += 1;
        }
        counts
            .iter()
            .map(|(kind, count)| format!("{kind}: {count}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The kubelet's verdict on one pod, whatever its node and revision: why it cannot
/// start, if it says so.
pub fn kubelet_failure(pod: &impl PodFacts) -> Option<FailureReason> {
    let mut restarts = None;
    for container in pod.container_states() {
        if let Some(reason) = container
            .waiting_reason
            .filter(|r| FAILED_WAITING_REASONS.contains(r))
        {
            return Some(FailureReason::Waiting(reason.to_string()));
        }
        if !container.ready && container.restart_count >= RESTARTS_FAILED {
            restarts = restarts.max(Some(container.restart_count));
        }
    }
    restarts.map(FailureReason::Restarts)
}

/// Whether the pod's images are being pulled ahead: a request not answered yet.
fn pulling_ahead(pod: &impl PodFacts) -> bool {
    pod.condition(POD_IMAGE_READY_CONDITION)
        .is_some_and(|c| c.status == "False" && c.reason == Some(PULL_IMAGE_REQUESTED_REASON))
}

/// Finds the failed pods of the current revision on Ready nodes (see the rule at the top
/// of this file).
pub fn assess<'a, P: PodFacts + 'a, N: NodeFacts + 'a>(
    pods: impl IntoIterator<Item = &'a P>,
    nodes: impl IntoIterator<Item = &'a N>,
    daemonset: &DaemonSet,
    current: Option<&CurrentRevision>,
    policy: &FailurePolicy,
    now: Timestamp,
) -> FailureReport {
    let Some(current) = current else {
        return FailureReport::default();
    };
    let revision = current.id().to_string();
    let ds_uid = daemonset.metadata.uid.as_deref().unwrap_or_default();
    let ours: Vec<(&P, &str)> = pods
        .into_iter()
        .filter(|pod| is_controlled_by(*pod, ds_uid) && !pod.is_terminating())
        .filter(|pod| current.is_pod_updated(*pod))
        .filter_map(|pod| Some((pod, pod.node_or_affinity_node()?)))
        .collect();
    let mut report = FailureReport {
        revision,
        ..FailureReport::default()
    };
    if ours.is_empty() {
        return report;
    }
    // Only now the nodes: a DaemonSet with no pod of its current revision yet (most of
    // a fleet's plans) costs no walk over them.
    let ready: HashSet<&str> = nodes
        .into_iter()
        .filter(|node| node.is_ready())
        .map(|node| node.name())
        .collect();
    let min_ready_seconds = daemonset.spec.min_ready_seconds;
    for (pod, node) in ours {
        if !ready.contains(node) {
            continue;
        }
        report.reached += 1;
        if !is_available(pod, min_ready_seconds.unwrap_or(0), now) {
            report.unavailable += 1;
        }
        if pulling_ahead(pod) {
            continue;
        }
        let reason = kubelet_failure(pod).or_else(|| {
            let deadline = policy.progress_deadline?;
            if is_available(pod, min_ready_seconds.unwrap_or(0), now) {
                return None;
            }
            let created = pod.metadata().creation_timestamp.as_ref()?.0;
            let age = Duration::try_from(now.duration_since(created)).unwrap_or_default();
            match deadline.checked_sub(age) {
                Some(left) if !left.is_zero() => {
                    report.next_deadline = Some(report.next_deadline.map_or(left, |d| d.min(left)));
                    None
                }
                _ => Some(FailureReason::ProgressDeadline(deadline)),
            }
        });
        if let Some(reason) = reason {
            report.failed.push(FailedPod {
                pod: pod.pod_name().to_string(),
                node: node.to_string(),
                reason,
            });
        }
    }
    report
        .failed
        .sort_by(|a, b| (&a.node, &a.pod).cmp(&(&b.node, &b.pod)));
    report
}

/// What `rollgate.io/on-failure: rollback` does with a halt (`rollback`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RollbackCourse {
    /// The template goes back to this revision.
    To(RevisionRef),
    /// No revision to go back to (the DaemonSet's first failed, or every earlier one was
    /// rolled back from): it halts.
    NoTarget,
}

/// A halted rollout: no more deletions for this revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Halt {
    pub revision: String,
    pub failed: Vec<FailedPod>,
    pub reached: usize,
    /// The threshold resolved against `reached` and the budget.
    pub threshold: usize,
    pub reasons: String,
    /// Set when `rollgate.io/on-failure: rollback` was asked for (`with_rollback`).
    pub rollback: Option<RollbackCourse>,
}

impl Halt {
    /// `plan` with its deletions dropped: the budget counts as before, and the plan says
    /// why it stops (`Blocker::Halted`).
    pub fn hold(&self, mut plan: RollingPlan) -> RollingPlan {
        plan.deletions.clear();
        plan.progress.blocked = Some(Blocker::Halted {
            revision: self.revision.clone(),
            failed: self.failed.len(),
            reached: self.reached,
            reasons: self.reasons.clone(),
        });
        plan
    }

    /// The Warning's message: the revision, the failed pods, their nodes and reasons.
    pub fn message(&self) -> String {
        let pods: Vec<String> = self
            .failed
            .iter()
            .map(|f| format!("{} on {} ({})", f.pod, f.node, f.reason))
            .collect();
        let mut message = format!(
            "revision {} halted: {} of {} pod(s) on Ready nodes failed (threshold {}); no more pods are deleted for it: {}. A new template goes on, or rollgate.io/on-failure=continue",
            self.revision,
            self.failed.len(),
            self.reached,
            self.threshold,
            super::describe::shorten(&pods)
        );
        match &self.rollback {
            None => {}
            Some(RollbackCourse::To(target)) => message.push_str(&format!(
                "; rollgate.io/on-failure=rollback: rolling back to revision {} ({})",
                target.hash, target.name
            )),
            Some(RollbackCourse::NoTarget) => message.push_str(
                "; rollgate.io/on-failure=rollback found no earlier revision to go back to (this is the first, or every earlier one was rolled back from), so the rollout halts",
            ),
        }
        message
    }

    /// The halt with its rollback, when `policy` asks for one: to the newest of
    /// `revisions` (newest first) that is neither this revision nor in `record`.
    pub fn with_rollback(
        mut self,
        policy: &FailurePolicy,
        revisions: &[RevisionRef],
        record: &RolledBackFrom,
    ) -> Halt {
        if policy.on_failure == OnFailure::Rollback {
            self.rollback = Some(
                rollback_target(revisions, &self.revision, record)
                    .map_or(RollbackCourse::NoTarget, |t| RollbackCourse::To(t.clone())),
            );
        }
        self
    }

    /// The revision to roll back to, when the halt rolls back.
    pub fn rollback_target(&self) -> Option<&RevisionRef> {
        match &self.rollback {
            Some(RollbackCourse::To(target)) => Some(target),
            _ => None,
        }
    }
}

/// The failure rule on a plan, as the controller and `rollgate status` both apply it: a
/// revision rolled back from before is held (`Blocker::RolledBackBefore`); else the
/// report's halt, if any, holds the plan (with its rollback when asked for). Returns the
/// plan as held and the halt.
pub fn hold_on_failure(
    plan: RollingPlan,
    report: &FailureReport,
    policy: &FailurePolicy,
    daemonset: &DaemonSet,
    current: Option<&CurrentRevision>,
    revisions: &[RevisionRef],
    halted_earlier: bool,
) -> (RollingPlan, Option<Halt>) {
    // A revision rolled back from before is not rolled out again, whatever the failure
    // annotations say.
    let record = RolledBackFrom::of(daemonset);
    if let Some(hash) = current
        .and_then(|c| c.hash.as_deref())
        .filter(|hash| record.contains(hash))
    {
        let mut plan = plan;
        plan.deletions.clear();
        plan.progress.blocked = Some(Blocker::RolledBackBefore {
            revision: hash.to_string(),
        });
        return (plan, None);
    }
    match halt_verdict(report, policy, plan.progress.budget, halted_earlier) {
        Some(halt) => {
            let halt = halt.with_rollback(policy, revisions, &record);
            (halt.hold(plan), Some(halt))
        }
        None => (plan, None),
    }
}

/// Whether the controller recorded a halt of the current revision on the DaemonSet
/// (`rollgate.io/halted-revision`): what a restarted controller, and `rollgate status`,
/// read as "halted earlier".
pub fn halt_recorded(daemonset: &DaemonSet, current: Option<&CurrentRevision>) -> bool {
    current.is_some_and(|current| {
        annotation(&daemonset.metadata, HALTED_REVISION_ANNOTATION) == Some(current.id())
    })
}

/// Whether the report halts the rollout. `budget`: max-unavailable resolved (caps the
/// threshold); `halted_earlier`: the controller halted this revision before, under this
/// policy. The halt then holds until every pod of the revision on a Ready node is
/// available: a crash-looping container reads `Running` for a moment after each restart,
/// and a moment in which no pod reads failed is not a fix.
pub fn halt_verdict(
    report: &FailureReport,
    policy: &FailurePolicy,
    budget: usize,
    halted_earlier: bool,
) -> Option<Halt> {
    if policy.on_failure == OnFailure::Continue {
        return None;
    }
    let threshold = policy.threshold.resolve(report.reached, budget);
    let reached_threshold = !report.failed.is_empty() && report.failed.len() >= threshold;
    let still_halted = halted_earlier && report.unavailable > 0;
    (reached_threshold || still_halted).then(|| Halt {
        revision: report.revision.clone(),
        failed: report.failed.clone(),
        reached: report.reached,
        threshold,
        reasons: report.reasons(),
        rollback: None,
    })
}

pub mod annotations;
pub mod rollback;
pub use annotations::*;
pub use rollback::{rollback_target, RevisionRef, RolledBackFrom};

#[cfg(test)]
mod tests;
