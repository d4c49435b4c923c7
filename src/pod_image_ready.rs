//! The `PodImageReady` protocol: a pull of a DaemonSet's new images asked for on one
//! of its pods, and the answer. Asked by the node agent (`imagepull`, OTA) and by
//! pull-ahead (AdvancedRollingUpdate), answered by the image-pull controller
//! (`daemonset::image_pull`), read back by all of them: written and read here, below
//! the three, so they cannot drift apart.
//!
//! On the wire (yurthub and OpenYurt's tools read the same condition):
//! - a request: `False`, reason `PullImageRequested`, message `controllerrevision: <hash>`
//!   (yurthub asks with no reason at all: that is a request too);
//! - the answers: `True`, reason `PullImageSuccess`, the same message; or `False`,
//!   reason `PullImageFail`, message `controllerrevision: <hash>; <why>`.
//!
//! **The time rule.** A request's `lastTransitionTime` is what tells it from the one
//! before: the image-pull controller answers a request once, and names its Job after
//! it. The API server keeps whole seconds, and writers' clocks differ (the agent runs
//! on the node). So every request carries [`request_time`]: `now` in whole seconds, or
//! one second after the pod's current `PodImageReady` time when that is not earlier,
//! whichever is later. A request is then always later than what it replaces, even a
//! failure answered within the same second or written by a clock ahead of the writer's.
//! An answer carries `now`: it replaces a request, which it never needs to tell apart.
use k8s_openapi::api::core::v1::PodCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::names::{
    POD_IMAGE_READY_CONDITION, PULL_IMAGE_FAIL_REASON, PULL_IMAGE_REQUESTED_REASON,
    PULL_IMAGE_SUCCESS_REASON,
};
use crate::object::{ConditionView, PodFacts};
use crate::revision_message::{need_upgrade_message, revision_in_message};

/// The time of a request written at `now` on a pod whose `PodImageReady` carries
/// `previous` (see the module's time rule).
pub fn request_time(now: Timestamp, previous: Option<Timestamp>) -> Timestamp {
    let now = Timestamp::from_second(now.as_second()).unwrap_or(now);
    match previous {
        Some(previous) if previous.as_second() >= now.as_second() => {
            Timestamp::from_second(previous.as_second() + 1).unwrap_or(now)
        }
        _ => now,
    }
}

/// A request to pull revision `hash`'s images, written at `now` on a pod whose
/// `PodImageReady` carries `previous`.
pub fn request(hash: &str, now: Timestamp, previous: Option<Timestamp>) -> PodCondition {
    condition(
        "False",
        PULL_IMAGE_REQUESTED_REASON,
        need_upgrade_message(hash),
        request_time(now, previous),
    )
}

/// The answer: revision `hash`'s images are on the node.
pub fn succeeded(hash: &str, now: Timestamp) -> PodCondition {
    condition(
        "True",
        PULL_IMAGE_SUCCESS_REASON,
        need_upgrade_message(hash),
        now,
    )
}

/// The answer: the pull of revision `hash` failed (or cannot start), and why. The
/// message starts like every `PodImageReady` message, so readers still find the
/// revision.
pub fn failed(hash: &str, why: &str, now: Timestamp) -> PodCondition {
    let message = format!("{}; {why}", need_upgrade_message(hash));
    condition("False", PULL_IMAGE_FAIL_REASON, message, now)
}

fn condition(status: &str, reason: &str, message: String, at: Timestamp) -> PodCondition {
    PodCondition {
        type_: POD_IMAGE_READY_CONDITION.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_transition_time: Some(Time(at)),
        ..Default::default()
    }
}

/// Whether a `PodImageReady` condition asks for a pull, waiting for its answer: `False`
/// with reason `PullImageRequested`, or with no reason (yurthub's request). Both
/// answers carry a reason, so a reasonless `False` can only be a request.
pub fn is_request(condition: &ConditionView) -> bool {
    condition.status == "False"
        && matches!(
            condition.reason,
            None | Some("") | Some(PULL_IMAGE_REQUESTED_REASON)
        )
}

/// The `lastTransitionTime` of a `PodImageReady` condition as text: what tells one
/// request or answer from the next.
pub fn stamp(condition: &ConditionView) -> Option<String> {
    condition.last_transition_time.map(|t| t.0.to_string())
}

/// The stamp of the pod's `PodImageReady`, if it has one.
pub fn stamp_of(pod: &impl PodFacts) -> Option<String> {
    stamp(&pod.condition(POD_IMAGE_READY_CONDITION)?)
}

/// Where a pod's pull of one revision stands, from its `PodImageReady`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullState {
    /// No request for this revision (none at all, or one for another revision).
    NotRequested,
    /// Requested, not answered yet.
    InFlight,
    Succeeded,
    Failed,
}

/// The pull state of `pod` for revision `hash`.
pub fn pull_state(pod: &impl PodFacts, hash: &str) -> PullState {
    let Some(condition) = pod.condition(POD_IMAGE_READY_CONDITION) else {
        return PullState::NotRequested;
    };
    if condition.message.and_then(revision_in_message) != Some(hash) {
        return PullState::NotRequested;
    }
    match (condition.status, condition.reason) {
        ("True", _) => PullState::Succeeded,
        ("False", Some(PULL_IMAGE_FAIL_REASON)) => PullState::Failed,
        _ if is_request(&condition) => PullState::InFlight,
        _ => PullState::NotRequested,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SINCE: i64 = 1_700_000_000;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap()
    }

    #[test]
    fn a_request_is_stamped_in_whole_seconds_after_the_time_it_replaces() {
        let now = at(SINCE) + std::time::Duration::from_millis(700);
        // (case, the pod's PodImageReady time, the request's time)
        let cases = [
            ("first request: now, whole seconds", None, at(SINCE)),
            ("previous well before now", Some(at(SINCE - 60)), at(SINCE)),
            (
                "previous in the same second (a fast failure)",
                Some(at(SINCE)),
                at(SINCE + 1),
            ),
            (
                "previous written by a clock ahead of ours",
                Some(at(SINCE + 30)),
                at(SINCE + 31),
            ),
        ];
        for (case, previous, want) in cases {
            assert_eq!(request_time(now, previous), want, "{case}");
            let written = request("new", now, previous);
            assert_eq!(written.last_transition_time, Some(Time(want)), "{case}");
        }
    }

    /// The wire format, as yurthub and the image-pull controller read it.
    #[test]
    fn requests_and_answers_on_the_wire() {
        let now = at(SINCE);
        let wire = |c: PodCondition| serde_json::to_value(c).unwrap();
        assert_eq!(
            wire(request("h2", now, None)),
            serde_json::json!({
                "type": "PodImageReady", "status": "False", "reason": "PullImageRequested",
                "message": "controllerrevision: h2", "lastTransitionTime": "2023-11-14T22:13:20Z",
            })
        );
        assert_eq!(
            wire(succeeded("h2", now)),
            serde_json::json!({
                "type": "PodImageReady", "status": "True", "reason": "PullImageSuccess",
                "message": "controllerrevision: h2", "lastTransitionTime": "2023-11-14T22:13:20Z",
            })
        );
        assert_eq!(
            wire(failed("h2", "deadline exceeded", now)),
            serde_json::json!({
                "type": "PodImageReady", "status": "False", "reason": "PullImageFail",
                "message": "controllerrevision: h2; deadline exceeded",
                "lastTransitionTime": "2023-11-14T22:13:20Z",
            })
        );
    }

    #[test]
    fn a_reasonless_false_is_a_request_and_an_answer_is_not() {
        let view = |status, reason| ConditionView {
            type_: POD_IMAGE_READY_CONDITION,
            status,
            reason,
            message: Some("controllerrevision: h2"),
            last_transition_time: None,
        };
        assert!(is_request(&view("False", None)));
        assert!(is_request(&view("False", Some(""))));
        assert!(is_request(&view(
            "False",
            Some(PULL_IMAGE_REQUESTED_REASON)
        )));
        assert!(!is_request(&view("False", Some(PULL_IMAGE_FAIL_REASON))));
        assert!(!is_request(&view("True", Some(PULL_IMAGE_SUCCESS_REASON))));
    }
}
