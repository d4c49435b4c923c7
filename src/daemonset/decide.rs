//! What the controller does now with one AdvancedRollingUpdate DaemonSet, given what it
//! observed of it: one pure decision, which `controller` only executes.
//!
//! The decision, in the order it is taken (docs/configuration.md has each control):
//!
//! | the world | the decision |
//! |---|---|
//! | another updater deleted its pods lately | step back: no deletion, look again when it is quiet |
//! | `rollgate.io/pull-ahead` cannot be read | refuse: a Warning, nothing deleted until it is fixed |
//! | no current revision yet | wait on the native controller (progress said, nothing deleted) |
//! | the current revision is one rollgate rolled back from (`rollgate.io/rolled-back-from`) | held: no deletion for it, no new pull, a Warning |
//! | the current revision failed on as many Ready nodes as `rollgate.io/failure-threshold` (or failed before and still does) | halted: no deletion for it, no new pull, a Warning (`failure`); with `rollgate.io/on-failure: rollback`, the template goes back to the previous revision |
//! | `rollgate.io/paused: true` | the plan is made, its deletions held, no new pull asked for |
//! | fewer pods of the current revision available than the failure threshold (below the budget) | the budget is the threshold until they are (the revision proves itself), unless `rollgate.io/on-failure: continue` |
//! | pull-ahead on | a deletion waits for its pod's pull (or its tries running out); pulls asked for in the window |
//! | pull-ahead on, no revision hash yet | nothing deleted, nothing pulled |
//! | otherwise | the plan's deletions, once the target is confirmed |
//!
//! Reading the API server is not part of the decision: the cached target revision is
//! confirmed after it (`controller`'s `confirm_target`), and only when the decision
//! deletes, since only a deletion needs it and the read is a call per generation.
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use super::failure::{assess, hold_on_failure, FailurePolicy, FailureReport, Halt, RevisionRef};
use super::other_updater::Sighting;
use super::pull_ahead::{
    plan_pull_ahead, InvalidPullAhead, PullAheadLimits, PullAheadPlan, PullTries,
};
use super::rolling_plan::{plan_rolling_update_memo, Blocker, PlanMemo, RollingInput, RollingPlan};
use crate::object::{CachedNode, CachedPod};

/// Every DaemonSet is planned again this long after its last plan at the latest: a
/// trigger lost anyway (a watch gap, a node change the mapping missed) delays a
/// rollout by this much, never stalls it (`a_missed_node_trigger_is_caught_by_the_resync`).
pub const RESYNC: Duration = Duration::from_secs(300);
/// A cached target revision behind the API server's is looked at again this soon: the
/// watch normally delivers the missing revision within milliseconds.
pub const TARGET_RECHECK: Duration = Duration::from_secs(1);
/// Deletions in flight that the cache does not show yet are looked at again this soon.
pub const PENDING_RECHECK: Duration = Duration::from_secs(10);
/// A recheck the plan asks for (minReadySeconds elapsing, a stale status wait ending)
/// fires no watch event: it is looked at this much after it is due.
pub const RECHECK_SLACK: Duration = Duration::from_millis(100);

/// What the controller observed of one AdvancedRollingUpdate DaemonSet.
pub struct World<'a> {
    /// Another updater's last sighting while it counts, and how long it still counts.
    pub other_updater: Option<(Sighting, Duration)>,
    /// `rollgate.io/pull-ahead`, as read.
    pub pull_ahead: Result<bool, InvalidPullAhead>,
    /// `rollgate.io/paused`.
    pub paused: bool,
    /// What the plan reads besides the memo's pods and nodes: the DaemonSet, its current
    /// revision, the budget, partition and node selector, the deletions in flight and
    /// the nodes rollgate emptied (the expectations), the limits and the clock.
    /// `list_upcoming` is set here, from `pull_ahead`.
    pub plan: RollingInput<'a>,
    /// The DaemonSet's pods and every node, as observed.
    pub memo: &'a PlanMemo<CachedPod, CachedNode>,
    /// The pulls' state, when pull-ahead is on and the current revision has a hash.
    pub pulls: Option<PullsObserved<'a>>,
    pub pull_ahead_limits: PullAheadLimits,
    /// `rollgate.io/failure-threshold`, `rollgate.io/on-failure`,
    /// `rollgate.io/progress-deadline`.
    pub failure: FailurePolicy,
    /// The controller halted this DaemonSet's current revision earlier: the halt holds
    /// while any of its pods is failed (a failed node gone NotReady frees nothing).
    pub halted_earlier: bool,
    /// The DaemonSet's ControllerRevisions, newest first (`owned_revisions`): where
    /// `rollgate.io/on-failure: rollback` goes back to.
    pub revisions: Vec<RevisionRef>,
}

/// What pull-ahead reads: the pods, and what the controller counted of their pulls.
pub struct PullsObserved<'a> {
    pub pods: &'a [Arc<CachedPod>],
    /// The current revision's hash, which a request names.
    pub hash: &'a str,
    /// Failed pulls counted per pod.
    pub tries: &'a PullTries,
    /// Pods asked to pull whose request the cache does not show yet.
    pub unseen: &'a BTreeSet<String>,
}

/// What the controller does now.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub step: Step,
    /// Whether the plan memo is kept for the next plan: while the rollout goes on; a
    /// settled DaemonSet (complete or held back) keeps none.
    pub keep_memo: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Another updater deletes this DaemonSet's pods: a Warning, no deletion, and a look
    /// again when its sighting stops counting.
    StepBack {
        sighting: Sighting,
        requeue: Duration,
    },
    /// A bad pull-ahead value: the operator asked for something, and deleting without it
    /// could be what they meant to avoid. A Warning; nothing until it is fixed.
    RefusePullAhead(InvalidPullAhead),
    /// Nothing to judge pods by yet: the native controller has written no revision.
    /// The progress is said, and the wait counted.
    WaitForRevision {
        plan: RollingPlan,
    },
    Roll(Rollout),
}

/// A rollout step.
#[derive(Debug, Clone, PartialEq)]
pub struct Rollout {
    /// The plan as executed: held if paused, and with pull-ahead's choice of deletions.
    /// Its deletions are issued once the target is confirmed.
    pub plan: RollingPlan,
    /// Pull-ahead's requests, Warnings and held nodes, when it is on and the current
    /// revision has a hash.
    pub pulls: Option<PullAheadPlan>,
    /// When to plan again if nothing else triggers it.
    pub requeue: Duration,
    /// The current revision's failed pods on Ready nodes (boxed, as `halt`: the step
    /// stays the size of its plan).
    pub failures: Box<FailureReport>,
    /// Set when the failures halt the rollout: `plan` then deletes nothing. With a
    /// rollback target (`Halt::rollback_target`), the template goes back to it first.
    pub halt: Option<Box<Halt>>,
}

/// The decision for the world observed.
pub fn decide(world: &World) -> Decision {
    let pull_ahead = *world.pull_ahead.as_ref().unwrap_or(&false);
    // Only pull-ahead reads what the plan leaves for later.
    // The failure threshold caps the budget until the revision has proven itself.
    let input = RollingInput {
        list_upcoming: pull_ahead,
        proving: world.failure.proving(),
        ..world.plan
    };
    let plan = plan_rolling_update_memo(&input, world.memo);
    let keep_memo = !matches!(
        plan.progress.blocked,
        Some(Blocker::Complete | Blocker::HeldBack)
    );
    let step = if let Some((sighting, left)) = &world.other_updater {
        Step::StepBack {
            sighting: sighting.clone(),
            requeue: *left + Duration::from_secs(1),
        }
    } else if let Err(invalid) = &world.pull_ahead {
        Step::RefusePullAhead(invalid.clone())
    } else if plan.progress.blocked == Some(Blocker::CurrentRevisionUnknown) {
        Step::WaitForRevision { plan }
    } else {
        Step::Roll(roll(world, plan, pull_ahead))
    };
    Decision { step, keep_memo }
}

/// Pause, then pull-ahead, on the plan; and when to look again.
fn roll(world: &World, plan: RollingPlan, pull_ahead: bool) -> Rollout {
    // A failing revision: the plan is made (progress and the budget read as usual), and
    // it deletes nothing more for this revision; a new template is a new revision.
    let failures = assess(
        world.memo.pods(),
        world.memo.nodes(),
        world.plan.daemonset,
        world.plan.current,
        &world.failure,
        world.plan.now,
    );
    let (plan, halt) = hold_on_failure(
        plan,
        &failures,
        &world.failure,
        world.plan.daemonset,
        world.plan.current,
        &world.revisions,
        world.halted_earlier,
    );
    let rolled_back_before = matches!(
        plan.progress.blocked,
        Some(Blocker::RolledBackBefore { .. })
    );
    // Paused: the plan is made (progress, status and the budget read as usual), and its
    // deletions are held. Removing the annotation is a DaemonSet change: it re-plans.
    let mut plan = match &halt {
        None if world.paused && !rolled_back_before => plan.paused(),
        _ => plan,
    };
    // Neither a halt, a revision rolled back from, nor a pause asks for new pulls.
    let holding = world.paused || halt.is_some() || rolled_back_before;
    // Pull-ahead: deletions wait for their node's pull; pulls start for the nodes the
    // budget reaches next.
    let pulls = match (pull_ahead, &world.pulls) {
        (false, _) => None,
        (true, pulls) => {
            let pulls = pulls.as_ref().map(|p| {
                plan_pull_ahead(
                    &plan,
                    p.pods,
                    p.hash,
                    p.tries,
                    p.unseen,
                    holding,
                    world.pull_ahead_limits,
                    world.plan.now,
                )
            });
            // No revision hash to name in a request yet: nothing can be pulled, so
            // nothing is deleted (the hash follows within moments).
            plan.deletions = pulls
                .as_ref()
                .map(|p| p.deletions.clone())
                .unwrap_or_default();
            pulls
        }
    };
    let requeue = match plan.progress.recheck_after {
        Some(after) => after + RECHECK_SLACK,
        None if !world.plan.expected_deletions.is_empty() => PENDING_RECHECK,
        None => RESYNC,
    };
    // A progress deadline passing fires no watch event either.
    let requeue = match failures.next_deadline {
        Some(left) => requeue.min(left + RECHECK_SLACK),
        None => requeue,
    };
    Rollout {
        plan,
        pulls,
        requeue,
        failures: Box::new(failures),
        halt: halt.map(Box::new),
    }
}

#[cfg(test)]
mod tests;
