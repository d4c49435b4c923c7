//! The failure annotations as values: `rollgate.io/failure-threshold`,
//! `rollgate.io/on-failure` and what `rollgate.io/progress-deadline` becomes. A leaf:
//! `policy` parses the annotations into these, and `failure` (above) applies them.
use std::time::Duration;

use crate::daemonset::int_or_percent::{int_or_percent_enum, IntOrPercent, NotIntOrPercent};

/// `rollgate.io/failure-threshold` when absent.
pub const DEFAULT_FAILURE_THRESHOLD: FailureThreshold = FailureThreshold::Count(3);

/// What `rollgate.io/failure-threshold` accepts, for error messages and docs.
pub const FAILURE_THRESHOLD_ACCEPTED_FORMS: &str = "a positive integer (e.g. 3) or a whole \
     percentage from 1% to 100% (e.g. 10%) of the pods the revision reached on Ready nodes";

/// What `rollgate.io/on-failure` accepts, for error messages and docs.
pub const ON_FAILURE_ACCEPTED_FORMS: &str = "halt (the default), rollback (the template \
     goes back to the previous revision) or continue (failures are reported, the rollout goes on)";

/// What `rollgate.io/progress-deadline` accepts, for error messages and docs.
pub const PROGRESS_DEADLINE_ACCEPTED_FORMS: &str =
    "a duration such as 90s, 10m or 600 (seconds); 0 for no deadline";

/// How many failed pods halt the rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureThreshold {
    Count(u32),
    /// 1 to 100.
    Percent(u8),
}

/// A `rollgate.io/failure-threshold` value that is not one of
/// [`FAILURE_THRESHOLD_ACCEPTED_FORMS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotAFailureThreshold;

impl FailureThreshold {
    /// Parses the annotation value. Zero is refused: a threshold of no failure at all
    /// would halt before anything happened, and "never halt" is `on-failure: continue`.
    pub fn parse(raw: &str) -> Result<FailureThreshold, NotAFailureThreshold> {
        match IntOrPercent::parse(raw) {
            Ok(Some(value)) => Ok(value.into()),
            Ok(None) | Err(NotIntOrPercent) => Err(NotAFailureThreshold),
        }
    }

    /// The number of failed pods that halts, given the pods the revision reached and the
    /// budget: percentages round up, at least 1, at most the budget (at least 1).
    pub fn resolve(self, reached: usize, budget: usize) -> usize {
        let wanted = match self {
            FailureThreshold::Count(count) => count as usize,
            FailureThreshold::Percent(percent) => (reached * percent as usize).div_ceil(100),
        };
        wanted.clamp(1, budget.max(1))
    }
}

int_or_percent_enum!(FailureThreshold);

/// What a failing revision gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnFailure {
    /// No more deletions for the revision.
    #[default]
    Halt,
    /// Halts, and puts the template back to the previous revision (`rollback`).
    Rollback,
    /// Failures are reported; the rollout goes on as if there were none.
    Continue,
}

impl OnFailure {
    /// `halt`, `rollback` or `continue` (surrounding whitespace ignored).
    pub fn parse(raw: &str) -> Option<OnFailure> {
        match raw.trim() {
            "halt" => Some(OnFailure::Halt),
            "rollback" => Some(OnFailure::Rollback),
            "continue" => Some(OnFailure::Continue),
            _ => None,
        }
    }
}

/// The failure annotations of a DaemonSet, as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailurePolicy {
    pub threshold: FailureThreshold,
    pub on_failure: OnFailure,
    /// `None`: no deadline.
    pub progress_deadline: Option<Duration>,
}

impl FailurePolicy {
    /// What the planner caps the budget with while the revision proves itself
    /// (`RollingInput::proving`): the threshold, unless failures stop nothing.
    pub fn proving(&self) -> Option<IntOrPercent> {
        (self.on_failure != OnFailure::Continue).then_some(self.threshold.into())
    }
}

impl Default for FailurePolicy {
    fn default() -> Self {
        FailurePolicy {
            threshold: DEFAULT_FAILURE_THRESHOLD,
            on_failure: OnFailure::Halt,
            progress_deadline: None,
        }
    }
}
