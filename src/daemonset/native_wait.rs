//! How long each DaemonSet has waited on the native DaemonSet controller, and when that
//! wait counts as a stall worth a Warning and a metric.
//!
//! rollgate cannot act before kube-controller-manager has observed the latest spec and
//! written its ControllerRevision (see `revision`). That normally takes milliseconds; a
//! wait that lasts means the native controller is down, failing over, or stuck, and the
//! rollout is stopped for a reason rollgate cannot fix: people must hear of it.
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// What rollgate waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NativeWait {
    /// `status.observedGeneration` is behind `metadata.generation`.
    GenerationNotObserved {
        generation: i64,
        observed: Option<i64>,
    },
    /// No ControllerRevision (and no template generation) to judge pods by.
    RevisionMissing,
    /// The cached newest ControllerRevision is not the API server's (a rollback whose
    /// renumbered revision the watch has not delivered yet).
    RevisionBehind,
}

impl NativeWait {
    /// Stable text (no durations): the Warning is deduplicated on it.
    pub fn describe(&self, stall_after: Duration) -> String {
        let after = format!("{} s", stall_after.as_secs());
        match self {
            NativeWait::GenerationNotObserved {
                generation,
                observed,
            } => format!(
                "the native DaemonSet controller has not observed generation {generation} for more than {after} (observedGeneration {}); rollgate deletes no pod until it has: check kube-controller-manager",
                observed.map_or("unset".to_string(), |o| o.to_string())
            ),
            NativeWait::RevisionMissing => format!(
                "the native DaemonSet controller has written no ControllerRevision for this DaemonSet for more than {after}; rollgate deletes no pod until it has: check kube-controller-manager"
            ),
            NativeWait::RevisionBehind => format!(
                "the newest ControllerRevision in rollgate's cache has differed from the API server's for more than {after}; rollgate deletes no pod until they agree: check the controllerrevisions watch"
            ),
        }
    }
}

/// What the controller does about a wait now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Still within the threshold: look again after this long, since nothing may fire a
    /// watch event when it passes.
    Within { recheck_after: Duration },
    /// Past the threshold: a stall.
    Stalled,
}

/// When each waiting DaemonSet (by UID) started waiting.
#[derive(Debug, Default)]
pub struct NativeWaits(HashMap<String, Instant>);

impl NativeWaits {
    /// Records that the DaemonSet waits at `now` (the first call starts the clock) and
    /// says whether the wait has become a stall.
    pub fn waiting(&mut self, uid: &str, now: Instant, stall_after: Duration) -> Verdict {
        let since = *self.0.entry(uid.to_string()).or_insert(now);
        let waited = now.saturating_duration_since(since);
        if waited >= stall_after {
            Verdict::Stalled
        } else {
            Verdict::Within {
                recheck_after: stall_after - waited,
            }
        }
    }

    /// The DaemonSet no longer waits; true if it did.
    pub fn done(&mut self, uid: &str) -> bool {
        self.0.remove(uid).is_some()
    }

    pub fn retain(&mut self, live: impl Fn(&str) -> bool) {
        self.0.retain(|uid, _| live(uid));
    }

    /// How many DaemonSets wait now, whatever for how long.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_becomes_a_stall_at_the_threshold_and_restarts_after_it_ends() {
        let stall_after = Duration::from_secs(120);
        let t0 = Instant::now();
        let mut waits = NativeWaits::default();
        let cases = [
            (
                0,
                Verdict::Within {
                    recheck_after: stall_after,
                },
            ),
            (
                119,
                Verdict::Within {
                    recheck_after: Duration::from_secs(1),
                },
            ),
            (120, Verdict::Stalled),
            (500, Verdict::Stalled),
        ];
        for (at, expected) in cases {
            let now = t0 + Duration::from_secs(at);
            assert_eq!(waits.waiting("ds", now, stall_after), expected, "at {at} s");
        }
        // Another DaemonSet's clock is its own.
        assert_eq!(
            waits.waiting("other", t0 + Duration::from_secs(500), stall_after),
            Verdict::Within {
                recheck_after: stall_after
            }
        );
        assert_eq!(waits.len(), 2);
        assert!(waits.done("ds"));
        assert!(!waits.done("ds"));
        // A new wait starts from zero, not from the first one.
        assert_eq!(
            waits.waiting("ds", t0 + Duration::from_secs(600), stall_after),
            Verdict::Within {
                recheck_after: stall_after
            }
        );
        waits.retain(|uid| uid == "ds");
        assert_eq!(waits.len(), 1);
    }

    #[test]
    fn the_warning_text_is_stable_and_says_what_is_waited_for() {
        let after = Duration::from_secs(120);
        let lagging = NativeWait::GenerationNotObserved {
            generation: 5,
            observed: Some(4),
        };
        assert_eq!(lagging.describe(after), lagging.describe(after));
        assert!(lagging.describe(after).contains("generation 5"));
        assert!(lagging.describe(after).contains("observedGeneration 4"));
        assert!(lagging.describe(after).contains("120 s"));
        assert!(NativeWait::RevisionMissing
            .describe(after)
            .contains("no ControllerRevision"));
        assert!(NativeWait::RevisionBehind
            .describe(after)
            .contains("API server's"));
    }
}
