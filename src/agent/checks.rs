//! Whether the node API may act on a pod: a pure function from the pod (as the API
//! server returned it) to either the go-ahead or the exact HTTP refusal.
//!
//! The order of the checks:
//! 1. the path names a valid namespace and pod name (`target.rs`, before any I/O);
//! 2. the API server can be reached (needs I/O, so `api.rs` decides it: 503);
//! 3. the pod exists (404; the reference answers 500) and is *on this node* (403, as the
//!    spec and the reference say). A pod of another node gets one answer whatever its
//!    state, checked before anything else about it, so an agent tells nothing about the
//!    rest of the cluster beyond "not here";
//! 4. not terminating, `PodNeedUpgrade` True, image pre-pull finished (upgrade only): 403;
//! 5. owned by a DaemonSet: 400.
//!
//! Apart from the 404 for a missing pod and the node check coming before "terminating",
//! this is the reference implementation's order, so users migrating from it see the same
//! status for the same pod.

use axum::http::StatusCode;
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::jiff::Timestamp;

use crate::names::{POD_IMAGE_READY_CONDITION, POD_NEED_UPGRADE_CONDITION, PULL_IMAGE_FAIL_REASON};
use crate::object::pod_condition as condition;
use crate::object::PodFacts;
use crate::pod_image_ready;
use crate::revision_message::{need_upgrade_message, revision_in_message};

/// What the operator asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    ImagePull,
    Upgrade,
}

impl Action {
    fn verb(self) -> &'static str {
        match self {
            Action::ImagePull => "pre-pulled",
            Action::Upgrade => "upgraded",
        }
    }

    /// The last path segment of the action's endpoint.
    pub fn path_segment(self) -> &'static str {
        match self {
            Action::ImagePull => "imagepull",
            Action::Upgrade => "upgrade",
        }
    }
}

/// The endpoint of `action` on one pod, as an operator would type it.
pub fn action_path(action: Action, namespace: &str, name: &str) -> String {
    format!(
        "/openyurt.io/v1/namespaces/{namespace}/pods/{name}/{}",
        action.path_segment()
    )
}

/// The go-ahead: what the write needs to know about the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    /// For the UID precondition: the pod we checked is the pod we change.
    pub uid: String,
    /// The DaemonSet's current revision hash, from the `PodNeedUpgrade` message.
    pub current_hash: String,
    /// `lastTransitionTime` of the pod's `PodImageReady` condition, if it has one: a new
    /// pre-pull request must carry a later time (see [`pull_request_condition`]).
    pub image_ready_since: Option<Timestamp>,
}

/// A refusal: the status code and a plain-text body naming the failed check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: StatusCode,
    pub message: String,
}

impl Refusal {
    pub(crate) fn new(status: StatusCode, message: String) -> Self {
        Refusal { status, message }
    }
}

/// The success bodies: public interface (scripts grep for them), exact strings.
pub fn success_message(action: Action, namespace: &str, name: &str) -> String {
    match action {
        Action::ImagePull => format!("Image pre-pull requested for pod {namespace}/{name}"),
        Action::Upgrade => format!("Start updating pod {namespace}/{name}"),
    }
}

/// The answer for a pod that does not exist.
pub fn not_found(namespace: &str, name: &str, this_node: &str) -> Refusal {
    Refusal::new(
        StatusCode::NOT_FOUND,
        format!(
            "pod {namespace}/{name} not found (check: pod exists); GET /pods lists the pods \
             of node {this_node}"
        ),
    )
}

/// The answer for a pod bound to another node, or to none: the same whatever the pod's
/// state, so it reveals nothing about the pod but that it is not here.
pub fn not_on_this_node(namespace: &str, name: &str, this_node: &str) -> Refusal {
    Refusal::new(
        StatusCode::FORBIDDEN,
        format!(
            "refused: pod {namespace}/{name} is not on node {this_node} (check: pod on this \
             node); ask the agent of its node; GET /pods lists the pods of node {this_node}"
        ),
    )
}

/// Runs every check in order. `pod` is `None` when the API server said the pod does not
/// exist: we answer 404 (the reference answers 500, which tells a script "retry" when
/// retrying cannot help).
pub fn check(
    action: Action,
    namespace: &str,
    name: &str,
    pod: Option<&Pod>,
    this_node: &str,
) -> Result<Approval, Refusal> {
    let id = format!("{namespace}/{name}");
    let Some(pod) = pod else {
        return Err(not_found(namespace, name, this_node));
    };
    // The node before anything that could tell about another node's pod (terminating,
    // its conditions, its owner).
    if pod.node_or_affinity_node() != Some(this_node) {
        return Err(not_on_this_node(namespace, name, this_node));
    }

    if pod.is_terminating() {
        return Err(Refusal::new(
            StatusCode::FORBIDDEN,
            format!(
                "refused: pod {id} is terminating (check: pod not terminating); \
                 wait for its replacement and use that pod"
            ),
        ));
    }

    let need_upgrade = condition(pod, POD_NEED_UPGRADE_CONDITION);
    let current_hash = match need_upgrade {
        Some(c) if c.status == "True" => match revision_of(c) {
            Some(hash) => hash.to_string(),
            None => {
                return Err(Refusal::new(
                    StatusCode::FORBIDDEN,
                    format!(
                        "refused: condition {POD_NEED_UPGRADE_CONDITION} of pod {id} does not \
                         name the current revision (message {:?}, expected \
                         \"controllerrevision: <hash>\") (check: {POD_NEED_UPGRADE_CONDITION}=True)",
                        c.message.as_deref().unwrap_or_default()
                    ),
                ))
            }
        },
        other => {
            let seen = other.map_or_else(|| "missing".to_string(), |c| c.status.clone());
            return Err(Refusal::new(
                StatusCode::FORBIDDEN,
                format!(
                    "refused: pod {id} does not need an upgrade: condition \
                     {POD_NEED_UPGRADE_CONDITION} is {seen} (check: {POD_NEED_UPGRADE_CONDITION}=True); \
                     only pods whose {POD_NEED_UPGRADE_CONDITION} condition is True can be {}",
                    action.verb()
                ),
            ));
        }
    };

    if action == Action::Upgrade {
        check_pre_pull(pod, namespace, name, &current_hash)?;
    }

    check_daemonset_owner(pod, &id, action)?;

    Ok(Approval {
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        current_hash,
        image_ready_since: condition(pod, POD_IMAGE_READY_CONDITION)
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0),
    })
}

/// The condition an approved `imagepull` writes: a `PodImageReady` request for the
/// current revision, stamped after the pod's current `PodImageReady` time (the request
/// rule of `crate::pod_image_ready`).
pub fn pull_request_condition(approval: &Approval, now: Timestamp) -> PodCondition {
    pod_image_ready::request(&approval.current_hash, now, approval.image_ready_since)
}

/// Pre-pull is optional: no `PodImageReady` means go. Once requested, the upgrade waits
/// for a successful pull of the current revision, so the pod does not restart into a
/// long image download or a pull that is known to fail. A failed pull is not a dead
/// end: `imagepull` again requests a fresh pull.
fn check_pre_pull(
    pod: &Pod,
    namespace: &str,
    name: &str,
    current_hash: &str,
) -> Result<(), Refusal> {
    let Some(ready) = condition(pod, POD_IMAGE_READY_CONDITION) else {
        return Ok(());
    };
    let id = format!("{namespace}/{name}");
    let wanted = need_upgrade_message(current_hash);
    let retry_path = action_path(Action::ImagePull, namespace, name);
    let accepted = format!(
        "the upgrade is accepted once {POD_IMAGE_READY_CONDITION} is True with message \
         \"{wanted}\"; if the pull failed or is for another revision, request imagepull again \
         (POST {retry_path})"
    );
    let check = "(check: image pre-pull finished for the current revision)";
    if ready.status == "True" {
        if ready.message.as_deref() == Some(wanted.as_str()) {
            return Ok(());
        }
        let pulled = ready
            .message
            .as_deref()
            .and_then(revision_in_message)
            .unwrap_or("an unknown revision");
        return Err(Refusal::new(
            StatusCode::FORBIDDEN,
            format!(
                "refused: the image pre-pull of pod {id} succeeded for revision {pulled}, \
                 but the current revision is {current_hash} {check}; {accepted}"
            ),
        ));
    }
    let reason = ready.reason.as_deref().unwrap_or("no reason");
    let detail = ready.message.as_deref().unwrap_or_default();
    if reason == PULL_IMAGE_FAIL_REASON {
        return Err(Refusal::new(
            StatusCode::FORBIDDEN,
            format!(
                "refused: the image pre-pull of pod {id} failed: {POD_IMAGE_READY_CONDITION} is \
                 {} ({reason}: {detail}) {check}; retry the pull with POST {retry_path}, then \
                 upgrade once {POD_IMAGE_READY_CONDITION} is True with message \"{wanted}\"",
                ready.status
            ),
        ));
    }
    Err(Refusal::new(
        StatusCode::FORBIDDEN,
        format!(
            "refused: the image pre-pull of pod {id} has not succeeded: \
             {POD_IMAGE_READY_CONDITION} is {} ({reason}: {detail}) {check}; {accepted}",
            ready.status
        ),
    ))
}

fn check_daemonset_owner(pod: &Pod, id: &str, action: Action) -> Result<(), Refusal> {
    let owners = pod.metadata.owner_references.as_deref().unwrap_or_default();
    let only = format!(
        "only DaemonSet pods can be {} through this API",
        action.verb()
    );
    let Some(owner) = owners.iter().find(|o| o.controller == Some(true)) else {
        let what = if owners.is_empty() {
            "has no owner"
        } else {
            "has no controlling owner"
        };
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            format!("refused: pod {id} {what} (check: owned by a DaemonSet); {only}"),
        ));
    };
    if owner.kind == "DaemonSet" && owner.api_version.starts_with("apps/") {
        return Ok(());
    }
    Err(Refusal::new(
        StatusCode::BAD_REQUEST,
        format!(
            "refused: pod {id} is owned by {} {}, not by a DaemonSet (check: owned by a \
             DaemonSet); {only}",
            owner.kind, owner.name
        ),
    ))
}

/// The hash named by a `controllerrevision: <hash>` condition message.
fn revision_of(condition: &PodCondition) -> Option<&str> {
    revision_in_message(condition.message.as_deref()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::PULL_IMAGE_REQUESTED_REASON;
    use k8s_openapi::api::core::v1::{PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
    use k8s_openapi::jiff::Timestamp;

    const NODE: &str = "edge-a";

    /// A DaemonSet pod on `edge-a` that needs an upgrade to revision `new`: the happy path.
    fn pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some("default".into()),
                name: Some("nginx-daemonset-bwzss".into()),
                uid: Some("uid-1".into()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: "DaemonSet".into(),
                    name: "nginx-daemonset".into(),
                    uid: "ds-uid".into(),
                    controller: Some(true),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some(NODE.into()),
                ..Default::default()
            }),
            status: Some(PodStatus {
                conditions: Some(vec![cond(POD_NEED_UPGRADE_CONDITION, "True", "new", None)]),
                ..Default::default()
            }),
        }
    }

    /// When the test conditions last changed.
    const SINCE: i64 = 1_780_000_000;

    fn cond(type_: &str, status: &str, hash: &str, reason: Option<&str>) -> PodCondition {
        PodCondition {
            type_: type_.into(),
            status: status.into(),
            message: Some(need_upgrade_message(hash)),
            reason: reason.map(Into::into),
            last_transition_time: Some(Time(Timestamp::from_second(SINCE).unwrap())),
            ..Default::default()
        }
    }

    fn set_condition(mut pod: Pod, c: PodCondition) -> Pod {
        let conditions = pod.status.as_mut().unwrap().conditions.as_mut().unwrap();
        conditions.retain(|old| old.type_ != c.type_);
        conditions.push(c);
        pod
    }

    /// The pod with its `PodImageReady` condition of `status` for revision `hash`, saying
    /// `reason`.
    fn image_ready(status: &str, hash: &str, reason: &str) -> Pod {
        set_condition(
            pod(),
            cond(POD_IMAGE_READY_CONDITION, status, hash, Some(reason)),
        )
    }

    fn without_condition(mut pod: Pod, type_: &str) -> Pod {
        let conditions = pod.status.as_mut().unwrap().conditions.as_mut().unwrap();
        conditions.retain(|old| old.type_ != type_);
        pod
    }

    fn run(action: Action, pod: Option<&Pod>) -> Result<Approval, Refusal> {
        check(action, "default", "nginx-daemonset-bwzss", pod, NODE)
    }

    type Case<'a> = (&'a str, Action, Option<&'a Pod>, Option<u16>, &'a str);

    /// The table: (case, action, pod, expected status or None for approval, text the
    /// refusal must contain).
    #[test]
    fn every_check_in_the_reference_order() {
        let terminating = {
            let mut p = pod();
            p.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
            p
        };
        let elsewhere = {
            let mut p = pod();
            p.spec.as_mut().unwrap().node_name = Some("edge-b".into());
            p
        };
        let unbound = {
            let mut p = pod();
            p.spec.as_mut().unwrap().node_name = None;
            p
        };
        let orphan = {
            let mut p = pod();
            p.metadata.owner_references = None;
            p
        };
        let replica_set_pod = {
            let mut p = pod();
            let owner = &mut p.metadata.owner_references.as_mut().unwrap()[0];
            owner.kind = "ReplicaSet".into();
            owner.name = "web-5d4f".into();
            p
        };
        let non_controller_owner = {
            let mut p = pod();
            p.metadata.owner_references.as_mut().unwrap()[0].controller = None;
            p
        };
        let up_to_date = set_condition(
            pod(),
            cond(POD_NEED_UPGRADE_CONDITION, "False", "new", None),
        );
        let no_need_condition = without_condition(pod(), POD_NEED_UPGRADE_CONDITION);
        let garbled_need = {
            let mut c = cond(POD_NEED_UPGRADE_CONDITION, "True", "x", None);
            c.message = Some("revision?".into());
            set_condition(pod(), c)
        };
        let pull_requested = image_ready("False", "new", PULL_IMAGE_REQUESTED_REASON);
        let pull_failed = image_ready("False", "new", "PullImageFail");
        let pulled_old = image_ready("True", "old", "PullImageSuccess");
        let pulled_current = image_ready("True", "new", "PullImageSuccess");
        // A terminating pod on another node without PodNeedUpgrade and without owner:
        // the node decides first.
        let everything_wrong = {
            let mut p = without_condition(terminating.clone(), POD_NEED_UPGRADE_CONDITION);
            p.spec.as_mut().unwrap().node_name = Some("edge-b".into());
            p.metadata.owner_references = None;
            p
        };
        // The same on this node: terminating comes next.
        let terminating_orphan_up_to_date = {
            let mut p = without_condition(terminating.clone(), POD_NEED_UPGRADE_CONDITION);
            p.metadata.owner_references = None;
            p
        };
        // Pre-pull unfinished and no owner: the pre-pull check (403) comes before 400.
        let pull_pending_orphan = {
            let mut p = pull_requested.clone();
            p.metadata.owner_references = None;
            p
        };

        let happy = pod();
        use Action::*;
        let cases: Vec<Case> = vec![
            ("happy upgrade", Upgrade, Some(&happy), None, ""),
            ("happy imagepull", ImagePull, Some(&happy), None, ""),
            (
                "not found",
                Upgrade,
                None,
                Some(404),
                "not found (check: pod exists)",
            ),
            (
                "not found imagepull",
                ImagePull,
                None,
                Some(404),
                "not found",
            ),
            (
                "terminating",
                Upgrade,
                Some(&terminating),
                Some(403),
                "is terminating",
            ),
            (
                "terminating imagepull",
                ImagePull,
                Some(&terminating),
                Some(403),
                "is terminating",
            ),
            (
                "other node",
                Upgrade,
                Some(&elsewhere),
                Some(403),
                "is not on node edge-a (check: pod on this node)",
            ),
            (
                "unbound",
                ImagePull,
                Some(&unbound),
                Some(403),
                "is not on node edge-a",
            ),
            (
                "up to date",
                Upgrade,
                Some(&up_to_date),
                Some(403),
                "PodNeedUpgrade is False",
            ),
            (
                "up to date imagepull",
                ImagePull,
                Some(&up_to_date),
                Some(403),
                "can be pre-pulled",
            ),
            (
                "no PodNeedUpgrade",
                Upgrade,
                Some(&no_need_condition),
                Some(403),
                "PodNeedUpgrade is missing",
            ),
            (
                "garbled PodNeedUpgrade",
                Upgrade,
                Some(&garbled_need),
                Some(403),
                "does not name the current revision",
            ),
            (
                "pull requested",
                Upgrade,
                Some(&pull_requested),
                Some(403),
                "PodImageReady is False (PullImageRequested",
            ),
            (
                "pull failed",
                Upgrade,
                Some(&pull_failed),
                Some(403),
                "pre-pull of pod default/nginx-daemonset-bwzss failed: PodImageReady is False \
                 (PullImageFail: controllerrevision: new)",
            ),
            (
                "pull failed: names the retry",
                Upgrade,
                Some(&pull_failed),
                Some(403),
                "retry the pull with POST \
                 /openyurt.io/v1/namespaces/default/pods/nginx-daemonset-bwzss/imagepull",
            ),
            (
                "pulled older revision",
                Upgrade,
                Some(&pulled_old),
                Some(403),
                "succeeded for revision old, but the current revision is new",
            ),
            (
                "pulled current revision",
                Upgrade,
                Some(&pulled_current),
                None,
                "",
            ),
            // Requesting a pull again is how a failed or outdated pull is retried.
            (
                "imagepull while a pull is pending",
                ImagePull,
                Some(&pull_requested),
                None,
                "",
            ),
            (
                "imagepull after a failed pull",
                ImagePull,
                Some(&pull_failed),
                None,
                "",
            ),
            (
                "no owner",
                Upgrade,
                Some(&orphan),
                Some(400),
                "has no owner (check: owned by a DaemonSet)",
            ),
            (
                "no owner imagepull",
                ImagePull,
                Some(&orphan),
                Some(400),
                "has no owner",
            ),
            (
                "owned by a ReplicaSet",
                Upgrade,
                Some(&replica_set_pod),
                Some(400),
                "owned by ReplicaSet web-5d4f, not by a DaemonSet",
            ),
            (
                "owner is not the controller",
                Upgrade,
                Some(&non_controller_owner),
                Some(400),
                "has no controlling owner",
            ),
            (
                "order: node first",
                Upgrade,
                Some(&everything_wrong),
                Some(403),
                "is not on node edge-a",
            ),
            (
                "order: terminating second",
                Upgrade,
                Some(&terminating_orphan_up_to_date),
                Some(403),
                "is terminating",
            ),
            (
                "order: pre-pull before owner",
                Upgrade,
                Some(&pull_pending_orphan),
                Some(403),
                "pre-pull",
            ),
        ];
        for (case, action, pod, want_status, want_text) in cases {
            let got = run(action, pod);
            match (want_status, got) {
                (None, Ok(approval)) => {
                    assert_eq!(approval.uid, "uid-1", "{case}");
                    assert_eq!(approval.current_hash, "new", "{case}");
                    let image_ready = pod.and_then(|p| condition(p, POD_IMAGE_READY_CONDITION));
                    assert_eq!(
                        approval.image_ready_since,
                        image_ready
                            .and_then(|c| c.last_transition_time.clone())
                            .map(|t| t.0),
                        "{case}"
                    );
                }
                (Some(status), Err(refusal)) => {
                    assert_eq!(
                        refusal.status.as_u16(),
                        status,
                        "{case}: {}",
                        refusal.message
                    );
                    assert!(
                        refusal.message.contains(want_text),
                        "{case}: {:?} does not contain {want_text:?}",
                        refusal.message
                    );
                    assert!(
                        refusal.message.contains("default/nginx-daemonset-bwzss"),
                        "{case}: the refusal names the pod: {}",
                        refusal.message
                    );
                }
                (want, got) => panic!("{case}: wanted {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn refusals_say_what_would_be_accepted() {
        let pending = image_ready("False", "new", PULL_IMAGE_REQUESTED_REASON);
        let refusal = run(Action::Upgrade, Some(&pending)).unwrap_err();
        assert!(
            refusal.message.contains(
                "accepted once PodImageReady is True with message \"controllerrevision: new\""
            ),
            "{}",
            refusal.message
        );
    }

    /// An agent must not be a way to learn about other nodes' pods: whatever the state
    /// of a pod elsewhere, the answer is the spec's 403, byte for byte the same.
    #[test]
    fn another_nodes_pod_gets_one_answer_whatever_its_state() {
        let elsewhere = |mut p: Pod, node: Option<&str>| {
            p.spec.as_mut().unwrap().node_name = node.map(Into::into);
            p
        };
        let terminating = {
            let mut p = pod();
            p.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
            p
        };
        let orphan = {
            let mut p = pod();
            p.metadata.owner_references = None;
            p
        };
        let variants = [
            pod(),
            terminating,
            orphan,
            without_condition(pod(), POD_NEED_UPGRADE_CONDITION),
            image_ready("False", "new", "PullImageFail"),
        ];
        for action in [Action::ImagePull, Action::Upgrade] {
            let missing = run(action, None).unwrap_err();
            assert_eq!(missing.status, StatusCode::NOT_FOUND);
            let answer = run(action, Some(&elsewhere(pod(), Some("edge-b")))).unwrap_err();
            assert_eq!(answer.status, StatusCode::FORBIDDEN);
            assert!(
                answer.message.contains("(check: pod on this node)"),
                "{}",
                answer.message
            );
            for variant in &variants {
                for node in [Some("edge-b"), None, Some(""), Some("edge-a2")] {
                    let other = elsewhere(variant.clone(), node);
                    assert_eq!(
                        run(action, Some(&other)),
                        Err(answer.clone()),
                        "{action:?} on a pod of node {node:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_pull_request_always_carries_a_time_after_the_previous_one() {
        let at = |s: i64| Timestamp::from_second(s).unwrap();
        let approval = |since: Option<i64>| Approval {
            uid: "uid-1".into(),
            current_hash: "new".into(),
            image_ready_since: since.map(at),
        };
        let now = at(SINCE) + std::time::Duration::from_millis(700);
        // (case, PodImageReady lastTransitionTime, now, written time)
        let cases = [
            ("first request: now, whole seconds", None, now, at(SINCE)),
            ("previous well before now", Some(SINCE - 60), now, at(SINCE)),
            (
                "previous in the same second (a fast failure)",
                Some(SINCE),
                now,
                at(SINCE + 1),
            ),
            (
                "agent clock behind the controller's",
                Some(SINCE + 30),
                now,
                at(SINCE + 31),
            ),
        ];
        for (case, since, now, want) in cases {
            let written = pull_request_condition(&approval(since), now);
            assert_eq!(written.last_transition_time, Some(Time(want)), "{case}");
            assert_eq!(written.type_, POD_IMAGE_READY_CONDITION, "{case}");
            assert_eq!(written.status, "False", "{case}");
            assert_eq!(
                written.reason.as_deref(),
                Some(PULL_IMAGE_REQUESTED_REASON),
                "{case}"
            );
            assert_eq!(
                written.message.as_deref(),
                Some("controllerrevision: new"),
                "{case}"
            );
        }
    }

    /// A failed pull is retried by asking again: the retry is approved and writes a fresh
    /// `PullImageRequested` for the current revision, later than the failure.
    #[test]
    fn imagepull_after_a_failed_pull_requests_a_fresh_pull() {
        let failed = image_ready("False", "new", "PullImageFail");
        let approval = run(Action::ImagePull, Some(&failed)).expect("a retry is allowed");
        let written = pull_request_condition(&approval, Timestamp::from_second(SINCE).unwrap());
        assert_eq!(written.status, "False");
        assert_eq!(written.reason.as_deref(), Some(PULL_IMAGE_REQUESTED_REASON));
        assert_eq!(written.message.as_deref(), Some("controllerrevision: new"));
        let failed_at = condition(&failed, POD_IMAGE_READY_CONDITION)
            .unwrap()
            .last_transition_time
            .clone()
            .unwrap();
        assert!(written.last_transition_time.unwrap().0 > failed_at.0);

        // Meanwhile an upgrade says why not, and how to retry.
        let refusal = run(Action::Upgrade, Some(&failed)).unwrap_err();
        assert_eq!(refusal.status, StatusCode::FORBIDDEN);
        assert!(refusal
            .message
            .contains("pre-pull of pod default/nginx-daemonset-bwzss failed"));
        assert!(refusal.message.contains(
            "POST /openyurt.io/v1/namespaces/default/pods/nginx-daemonset-bwzss/imagepull"
        ));
    }

    #[test]
    fn success_bodies_match_the_product_document() {
        assert_eq!(
            success_message(Action::ImagePull, "default", "nginx-daemonset-bwzss"),
            "Image pre-pull requested for pod default/nginx-daemonset-bwzss"
        );
        assert_eq!(
            success_message(Action::Upgrade, "default", "nginx-daemonset-bwzss"),
            "Start updating pod default/nginx-daemonset-bwzss"
        );
    }
}
