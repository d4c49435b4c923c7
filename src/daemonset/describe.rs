//! How a rollout reads to people: one line on where it stands and what it waits on,
//! said in the controller's Events and printed by `rollgate status`, and the line on
//! pull-ahead that `rollgate status` adds.
use super::pull_ahead::PullAheadView;
use super::rolling_plan::{Blocker, Progress, Proving};
use super::waves::{WaveProgress, WaveState};

/// Most names listed in one line (an aggregated Event, a status line).
const EVENT_NAMES_SHOWN: usize = 8;

/// The first names of a list, and how many more there are.
pub fn shorten(names: &[String]) -> String {
    let mut s = names
        .iter()
        .take(EVENT_NAMES_SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > EVENT_NAMES_SHOWN {
        s.push_str(&format!(" (+{} more)", names.len() - EVENT_NAMES_SHOWN));
    }
    s
}

/// One line on where a rollout stands, naming what it waits on.
pub fn describe(progress: &Progress) -> String {
    describe_with(progress, None)
}

/// The waves of a rollout, one clause each: `1 (pool=canary): done, 3 node(s); 2 (*):
/// current, baking 40s left, 2 of 2 Ready node(s) proven; ...`.
pub fn describe_waves(waves: &WaveProgress) -> String {
    let clauses: Vec<String> = waves
        .waves
        .iter()
        .enumerate()
        .map(|(at, (selector, look, state))| {
            let nodes = look.nodes;
            let proven = format!(
                "{} of {} Ready node(s) proven",
                look.proven,
                look.proven + look.pending
            );
            let how = match (at.cmp(&waves.current), state) {
                (std::cmp::Ordering::Less, _) => format!("done, {nodes} node(s)"),
                (std::cmp::Ordering::Greater, _) => format!("waiting, {nodes} node(s)"),
                (_, WaveState::Baking(left)) => {
                    format!("current, baking {}s left, {proven}", left.as_secs())
                }
                (_, WaveState::NoReadyNode) => {
                    format!("current, {nodes} node(s), none Ready with the new revision")
                }
                (_, _) => format!("current, rolling, {proven}"),
            };
            format!("{} ({selector}): {how}", at + 1)
        })
        .collect();
    format!("waves: {}", clauses.join("; "))
}

/// The budget capped while the revision proves itself (`Progress::proving`).
fn proving_clause(p: &Progress) -> String {
    let Some(Proving { available, needed }) = p.proving else {
        return String::new();
    };
    format!(
        "; proving the revision: {available} of its pods available, and until {needed} are, no more than {needed} node(s) are replaced at once (rollgate.io/failure-threshold; then the budget of {})",
        p.budget
    )
}

/// [`describe`], with pull-ahead's view when the DaemonSet asks for it: deletions that
/// wait for their pull are a wait, not "progressing".
pub fn describe_with(progress: &Progress, pulls: Option<&PullAheadView>) -> String {
    let p = progress;
    let mut line = format!("Ready nodes done {}/{}", p.ready_updated, p.ready_nodes);
    let held_for_pull = pulls.map(|v| v.held.as_slice()).unwrap_or_default();
    match &p.blocked {
        None | Some(Blocker::BudgetExhausted { .. }) if !held_for_pull.is_empty() => {
            line.push_str(&format!(
                "; waiting for pull-ahead: the budget of {} lets {} old pod(s) go, each deleted once the new images are on its node: {}",
                p.budget,
                held_for_pull.len(),
                shorten(held_for_pull)
            ))
        }
        Some(Blocker::BudgetExhausted { .. }) if p.proving.is_some() => {
            line.push_str(&proving_clause(p))
        }
        None => line.push_str("; progressing"),
        Some(Blocker::Complete) => line.push_str("; rollout complete"),
        Some(Blocker::Paused { held }) => line.push_str(&format!(
            "; paused (rollgate.io/paused=true): {held} deletion(s) held, nothing is deleted until it is removed or false"
        )),
        Some(Blocker::Halted {
            revision,
            failed,
            reached,
            reasons,
        }) => line.push_str(&format!(
            "; halted: {failed} of {reached} failed ({reasons}); no more pods are deleted for revision {revision} until a new template, or rollgate.io/on-failure=continue"
        )),
        Some(Blocker::Wave {
            wave,
            of,
            selector,
            state,
        }) => line.push_str(&match state {
            WaveState::Baking(left) => format!(
                "; wave {wave} of {of} ({selector}) is baking: the next wave starts in {}s if no pod fails",
                left.as_secs()
            ),
            WaveState::NoReadyNode => format!(
                "; waiting: wave {wave} of {of} ({selector}) has no Ready node running the new revision to prove it on; the next wave waits for one"
            ),
            WaveState::Rolling | WaveState::Done => format!(
                "; waiting: wave {wave} of {of} ({selector}) before the next wave"
            ),
        }),
        Some(Blocker::RolledBackBefore { revision }) => line.push_str(&format!(
            "; held: revision {revision} was rolled back from (rollgate.io/rolled-back-from), so no pod is deleted for it; take it out of that annotation to roll it out again"
        )),
        Some(Blocker::HeldBack) => line.push_str(
            "; held back: every node the partition and node selector let through is upgraded",
        ),
        Some(Blocker::CurrentRevisionUnknown) => line.push_str(
            "; waiting: no ControllerRevision or template generation identifies the current revision yet",
        ),
        // The budget is spent by this step's own replacements: nothing is down yet.
        Some(Blocker::BudgetExhausted { unavailable }) if unavailable.is_empty() => {
            line.push_str(&format!(
                "; replacing pods within the budget of {}, the other candidates wait their turn",
                p.budget
            ))
        }
        Some(Blocker::BudgetExhausted { unavailable }) => line.push_str(&format!(
            "; waiting: the budget of {} is used by unavailable node(s): {}",
            p.budget,
            shorten(unavailable)
        )),
        Some(Blocker::WaitingForAvailability { nodes }) => line.push_str(&format!(
            "; waiting for new pods to become available on: {}",
            shorten(nodes)
        )),
        Some(Blocker::WaitingForSkippedNodes { nodes }) => line.push_str(&format!(
            "; NotReady nodes waiting (upgraded when Ready again): {}",
            shorten(nodes)
        )),
    }
    // Said whatever else blocks: these old pods stay by the operator's choice.
    if let Some(partition) = p.partition {
        line.push_str(&format!(
            "; partition {partition}: {} node(s) kept on the old revision",
            p.kept_by_partition.len()
        ));
        if !p.kept_by_partition.is_empty() {
            line.push_str(&format!(": {}", shorten(&p.kept_by_partition)));
        }
    }
    if !p.held_by_selector.is_empty() {
        line.push_str(&format!(
            "; {} node(s) held back by the node selector (rollgate.io/node-selector), upgraded when it matches them: {}",
            p.held_by_selector.len(),
            shorten(&p.held_by_selector)
        ));
    }
    if !p.unplaced_nodes.is_empty() {
        line.push_str(&format!(
            "; old pods kept where the DaemonSet no longer places a pod (taint, node selector or affinity; nothing would recreate them): {}",
            shorten(&p.unplaced_nodes)
        ));
    }
    if p.deferred_by_cap > 0 {
        line.push_str(&format!(
            "; {} deletion(s) left to the next plan by --max-deletions-per-plan",
            p.deferred_by_cap
        ));
    }
    line
}

/// The line on pull-ahead for a DaemonSet that asks for it: where pulls are in flight,
/// where the last one failed, and which nodes went ahead without their images.
pub fn describe_pull_ahead(view: &PullAheadView) -> String {
    let mut parts = Vec::new();
    if !view.pulling.is_empty() {
        parts.push(format!(
            "pulling the new images on {} node(s): {}",
            view.pulling.len(),
            shorten(&view.pulling)
        ));
    }
    if !view.failed.is_empty() {
        parts.push(format!(
            "last pull failed, asked again while tries are left (--pull-ahead-tries) on: {}",
            shorten(&view.failed)
        ));
    }
    if !view.gave_up.is_empty() {
        let nodes: Vec<String> = view
            .gave_up
            .iter()
            .map(|g| format!("{} ({} failed pull(s))", g.node, g.failures))
            .collect();
        parts.push(format!(
            "upgraded without the new images after their pulls kept failing: {}",
            shorten(&nodes)
        ));
    }
    if parts.is_empty() {
        parts.push("no pull in flight".into());
    }
    format!("pull-ahead: {}", parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemonset::pull_ahead::GaveUp;

    #[test]
    fn a_budget_spent_by_this_steps_replacements_names_no_empty_list() {
        let mut progress = Progress {
            budget: 1,
            blocked: Some(Blocker::BudgetExhausted {
                unavailable: Vec::new(),
            }),
            ..Default::default()
        };
        let line = describe(&progress);
        assert!(
            line.contains("replacing pods within the budget of 1"),
            "{line}"
        );
        assert!(!line.contains("node(s): "), "{line}");
        progress.blocked = Some(Blocker::BudgetExhausted {
            unavailable: vec!["edge-1".into()],
        });
        assert!(describe(&progress).ends_with("used by unavailable node(s): edge-1"));
    }

    #[test]
    fn a_paused_rollout_says_so_and_how_many_deletions_it_holds() {
        let progress = Progress {
            blocked: Some(Blocker::Paused { held: 2 }),
            ..Default::default()
        };
        let line = describe(&progress);
        assert!(
            line.contains("paused (rollgate.io/paused=true): 2 deletion(s) held"),
            "{line}"
        );
    }

    #[test]
    fn partition_and_selector_are_said_whatever_else_blocks() {
        for blocked in [
            Some(Blocker::HeldBack),
            None,
            Some(Blocker::Paused { held: 1 }),
        ] {
            let p = Progress {
                partition: Some(2),
                kept_by_partition: vec!["n1".into(), "n2".into()],
                held_by_selector: vec!["n5".into()],
                blocked: blocked.clone(),
                ..Default::default()
            };
            let line = describe(&p);
            assert!(
                line.contains("partition 2: 2 node(s) kept on the old revision: n1, n2"),
                "{line}"
            );
            assert!(
                line.contains("1 node(s) held back by the node selector") && line.contains(": n5"),
                "{line}"
            );
        }
        let held = describe(&Progress {
            blocked: Some(Blocker::HeldBack),
            ..Default::default()
        });
        assert!(held.contains("held back: every node"), "{held}");
        assert!(
            !held.contains("kept on the old revision"),
            "no partition set: {held}"
        );
    }

    #[test]
    fn nodes_kept_for_placement_are_named_whatever_else_blocks() {
        for blocked in [Some(Blocker::Complete), None] {
            let p = Progress {
                unplaced_nodes: vec!["edge-7".into()],
                blocked: blocked.clone(),
                ..Default::default()
            };
            let line = describe(&p);
            assert!(
                line.contains("no longer places a pod") && line.contains("edge-7"),
                "{blocked:?}: {line}"
            );
        }
        let none = describe(&Progress {
            blocked: Some(Blocker::Complete),
            ..Default::default()
        });
        assert!(!none.contains("no longer places"), "{none}");
    }

    #[test]
    fn deletions_held_for_their_pull_are_a_wait_not_progress() {
        let view = PullAheadView {
            held: vec!["edge-2".into()],
            ..Default::default()
        };
        for blocked in [
            None,
            Some(Blocker::BudgetExhausted {
                unavailable: Vec::new(),
            }),
        ] {
            let p = Progress {
                budget: 1,
                blocked: blocked.clone(),
                ..Default::default()
            };
            let line = describe_with(&p, Some(&view));
            assert!(
                line.contains("waiting for pull-ahead") && line.ends_with("on its node: edge-2"),
                "{blocked:?}: {line}"
            );
            assert!(!line.contains("progressing"), "{line}");
            // Nothing held: as without pull-ahead.
            assert_eq!(
                describe_with(&p, Some(&PullAheadView::default())),
                describe(&p)
            );
        }
        // Paused: the pause is what holds the deletions.
        let paused = Progress {
            blocked: Some(Blocker::Paused { held: 1 }),
            ..Default::default()
        };
        assert!(describe_with(&paused, Some(&view)).contains("paused"));
    }

    #[test]
    fn the_pull_ahead_line_names_pulling_failed_and_given_up_nodes() {
        assert_eq!(
            describe_pull_ahead(&PullAheadView::default()),
            "pull-ahead: no pull in flight"
        );
        let line = describe_pull_ahead(&PullAheadView {
            pulling: vec!["edge-1".into(), "edge-2".into()],
            held: vec!["edge-1".into()],
            failed: vec!["edge-3".into()],
            gave_up: vec![GaveUp {
                node: "edge-4".into(),
                pod: "agent-x".into(),
                failures: 2,
                revision: "new".into(),
            }],
        });
        assert_eq!(
            line,
            "pull-ahead: pulling the new images on 2 node(s): edge-1, edge-2; \
             last pull failed, asked again while tries are left (--pull-ahead-tries) on: edge-3; \
             upgraded without the new images after their pulls kept failing: edge-4 (2 failed pull(s))"
        );
    }
}
