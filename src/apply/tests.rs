//! The apply layer against a fake API server (`fake_api`): what each write sends (field
//! manager, body, preconditions), what a 404 or 409 becomes, how many calls are in
//! flight, and which Events are said.
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ObjectReference, PodCondition, Service};
use kube::runtime::events::EventType;
use serde_json::{json, Value};

use super::fake_api::{fake_client, fake_client_slow, status};
use super::*;
use crate::names::{FIELD_MANAGER, POD_NEED_UPGRADE_CONDITION};
use crate::watch::runner::ReconcileError;

const PODS: &str = "/api/v1/namespaces/edge/pods";

fn ok() -> (u16, Value) {
    (200, json!({}))
}

fn condition() -> PodCondition {
    PodCondition {
        type_: POD_NEED_UPGRADE_CONDITION.into(),
        status: "True".into(),
        message: Some("controllerrevision: new".into()),
        ..Default::default()
    }
}

fn writes(n: usize) -> Vec<ConditionPatch> {
    (0..n)
        .map(|i| ConditionPatch::set("edge", format!("pod-{i}"), None, &condition()))
        .collect()
}

#[tokio::test]
async fn every_write_carries_the_one_field_manager() {
    let (client, seen) = fake_client(|method, _| match method {
        "POST" => (201, json!({})),
        _ => ok(),
    });
    let writer = Writer::new(client);
    let set = ConditionPatch::set("edge", "pod-a", Some("uid-a"), &condition());
    writer.write_condition(&set).await.unwrap();
    let removal = ConditionPatch::remove("edge", "pod-a", POD_NEED_UPGRADE_CONDITION);
    writer.write_condition(&removal).await.unwrap();
    writer
        .patch_pod_status("edge", "pod-a", &json!({}))
        .await
        .unwrap();
    writer.create("edge", &Job::default()).await.unwrap();
    let finalizers = json!({"metadata": {"finalizers": ["x"]}});
    writer
        .merge_patch::<Service>("edge", "svc", Part::Object, &finalizers)
        .await
        .unwrap();
    let ingress = json!({"status": {"loadBalancer": {}}});
    writer
        .merge_patch::<Service>("edge", "svc", Part::Status, &ingress)
        .await
        .unwrap();

    let calls = seen.calls();
    assert_eq!(calls.len(), 6);
    for call in &calls {
        assert_eq!(call.field_manager(), Some("rollgate"), "{}", call.line());
    }
    assert_eq!(FIELD_MANAGER, "rollgate");
    // Condition writes are strategic merges on pods/status.
    for call in &calls[..3] {
        assert_eq!(call.line(), format!("PATCH {PODS}/pod-a/status"));
        assert_eq!(call.content_type, "application/strategic-merge-patch+json");
    }
    assert_eq!(
        calls[0].body,
        json!({"metadata": {"uid": "uid-a"}, "status": {"conditions": [
            {"type": "PodNeedUpgrade", "status": "True", "message": "controllerrevision: new"}
        ]}})
    );
    assert_eq!(
        calls[1].body,
        json!({"status": {"conditions": [{"type": "PodNeedUpgrade", "$patch": "delete"}]}})
    );
    assert_eq!(calls[3].line(), "POST /apis/batch/v1/namespaces/edge/jobs");
    assert_eq!(
        calls[4].line(),
        "PATCH /api/v1/namespaces/edge/services/svc"
    );
    assert_eq!(calls[4].content_type, "application/merge-patch+json");
    assert_eq!(
        calls[5].line(),
        "PATCH /api/v1/namespaces/edge/services/svc/status"
    );
}

#[tokio::test]
async fn a_pod_gone_or_changed_is_skipped_and_said_so() {
    let (client, seen) = fake_client(|_, path| match path {
        p if p.ends_with("/gone/status") => status(404, "NotFound"),
        p if p.ends_with("/replaced/status") => status(409, "Conflict"),
        p if p.ends_with("/broken/status") => status(500, "InternalError"),
        _ => ok(),
    });
    let writer = Writer::new(client);
    let write = |name: &str| ConditionPatch::set("edge", name, Some("uid"), &condition());
    assert_eq!(
        writer.write_condition(&write("fine")).await.unwrap(),
        Outcome::Written
    );
    assert_eq!(
        writer.write_condition(&write("gone")).await.unwrap(),
        Outcome::Gone
    );
    assert_eq!(
        writer.write_condition(&write("replaced")).await.unwrap(),
        Outcome::Changed
    );
    let error = writer.write_condition(&write("broken")).await.unwrap_err();
    assert_eq!(error.call, Call::WriteCondition);
    assert_eq!(
        (error.namespace.as_str(), error.name.as_str()),
        ("edge", "broken")
    );
    assert_eq!(error.metric_label(), "write_condition");
    assert!(
        error
            .to_string()
            .starts_with("writing a condition on pod edge/broken: "),
        "{error}"
    );
    assert_eq!(
        seen.calls().len(),
        4,
        "each write tried once, never retried here"
    );

    // Of a plan's writes, only those that landed are returned.
    let plan = ["fine", "gone", "replaced"].map(write).to_vec();
    let landed = writer.write_conditions(plan).await.unwrap();
    let names: Vec<&str> = landed.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(names, ["fine"]);
}

#[tokio::test]
async fn deletions_name_exactly_their_object() {
    let (client, seen) = fake_client(|_, path| match path {
        p if p.ends_with("/gone") => status(404, "NotFound"),
        p if p.ends_with("/replaced") => status(409, "Conflict"),
        p if p.ends_with("/broken") => status(500, "InternalError"),
        _ => (
            200,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
        ),
    });
    let writer = Writer::new(client);
    assert_eq!(
        writer.delete_pod("edge", "pod-a", "uid-a").await.unwrap(),
        Outcome::Written
    );
    assert_eq!(
        writer
            .delete_job("edge", "job-a", Some("uid-j"))
            .await
            .unwrap(),
        Outcome::Written
    );
    assert_eq!(
        writer.delete_pod("edge", "gone", "uid-g").await.unwrap(),
        Outcome::Gone
    );
    assert_eq!(
        writer
            .delete_job("edge", "replaced", Some("uid-r"))
            .await
            .unwrap(),
        Outcome::Changed
    );
    let error = writer
        .delete_pod("edge", "broken", "uid-b")
        .await
        .unwrap_err();
    assert_eq!(error.metric_label(), "delete_pod");
    let error = writer.delete_job("edge", "broken", None).await.unwrap_err();
    assert_eq!(error.metric_label(), "delete_job");

    let deletes = seen.calls_to("DELETE");
    assert_eq!(deletes.len(), 6);
    assert_eq!(deletes[0].line(), format!("DELETE {PODS}/pod-a"));
    assert_eq!(deletes[0].body["preconditions"], json!({"uid": "uid-a"}));
    assert!(deletes[0].body.get("propagationPolicy").is_none());
    assert_eq!(
        deletes[1].line(),
        "DELETE /apis/batch/v1/namespaces/edge/jobs/job-a"
    );
    assert_eq!(deletes[1].body["preconditions"], json!({"uid": "uid-j"}));
    assert_eq!(deletes[1].body["propagationPolicy"], "Background");
    assert_eq!(deletes[2].body["preconditions"], json!({"uid": "uid-g"}));
    // A Job whose UID is not known is deleted by name (the controller only does so for
    // Jobs it labelled itself).
    assert!(deletes[5].body.get("preconditions").is_none());
}

#[tokio::test]
async fn status_writes_of_one_plan_are_in_flight_together() {
    let (client, seen) = fake_client_slow(Duration::from_millis(20), |_, path| {
        match path {
            // Deleted meanwhile (404): skipped, not a failure.
            p if p.ends_with("/pod-5/status") => status(404, "NotFound"),
            _ => ok(),
        }
    });
    let writer = Writer::new(client);
    let all = writes(100);
    let landed = writer
        .write_conditions(all[4..].to_vec())
        .await
        .expect("no write fails");
    assert_eq!(landed.len(), 95, "all but the one gone meanwhile");
    assert_eq!(seen.calls().len(), 96);
    // One at a time, marking 200 pods for OTA took 200 round trips; never more than
    // the bound at once either.
    assert_eq!(seen.most_in_flight(), CALLS_IN_FLIGHT);
}

#[tokio::test]
async fn one_failed_write_holds_back_no_other() {
    let (client, seen) = fake_client_slow(Duration::from_millis(2), |_, path| match path {
        p if p.ends_with("/pod-3/status") => status(500, "InternalError"),
        _ => ok(),
    });
    let writer = Writer::new(client);
    match writer.write_conditions(writes(40)).await {
        Err(Error { call, name, .. }) => {
            assert_eq!((call, name.as_str()), (Call::WriteCondition, "pod-3"))
        }
        other => panic!("the failure must be returned, got {other:?}"),
    }
    assert_eq!(seen.calls().len(), 40, "every write tried");
    assert!(seen.most_in_flight() <= CALLS_IN_FLIGHT);
}

#[tokio::test]
async fn deletions_issued_together_stay_within_the_bound() {
    let (client, seen) = fake_client_slow(Duration::from_millis(10), |_, _| {
        (
            200,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
        )
    });
    let writer = Writer::new(client);
    let calls = (0..50).map(|i| {
        let writer = writer.clone();
        async move {
            let name = format!("pod-{i}");
            writer.delete_pod("edge", &name, &format!("uid-{i}")).await
        }
    });
    let results = issue_together(calls).await;
    assert_eq!(results.len(), 50);
    assert!(results.iter().all(|r| matches!(r, Ok(Outcome::Written))));
    assert_eq!(seen.calls_to("DELETE").len(), 50);
    assert_eq!(seen.most_in_flight(), CALLS_IN_FLIGHT);
}

fn reference() -> ObjectReference {
    ObjectReference {
        api_version: Some("apps/v1".into()),
        kind: Some("DaemonSet".into()),
        namespace: Some("edge".into()),
        name: Some("agent".into()),
        uid: Some("uid-ds".into()),
        ..Default::default()
    }
}

#[tokio::test]
async fn an_event_is_said_once_per_change() {
    let (client, seen) = fake_client(|_, _| (201, json!({})));
    let events = Events::new(client, "rollgate-daemonset-upgrade");
    let said = EventDedup::default();
    let warn = |note: &str| {
        event(
            EventType::Warning,
            "InvalidMaxUnavailable",
            "Validate",
            note.into(),
        )
    };
    let once = |note: &'static str| {
        let (events, said, warning) = (&events, &said, warn(note));
        async move {
            events
                .publish_once(said, "uid-ds", Topic::Warning, &reference(), warning)
                .await
        }
    };
    assert!(once("bad value \"x\"").await);
    assert!(!once("bad value \"x\"").await, "a repeat is not sent");
    assert!(once("bad value \"y\"").await, "a change is");
    said.forget("uid-ds", Topic::Warning);
    assert!(
        once("bad value \"y\"").await,
        "and so is the same after it was fixed"
    );
    events
        .publish(
            &reference(),
            EventType::Normal,
            "UpgradingPods",
            "DeletePods",
            "deleted 1 pod(s)".into(),
        )
        .await;

    assert_eq!(
        seen.events(),
        [
            "Warning InvalidMaxUnavailable",
            "Warning InvalidMaxUnavailable",
            "Warning InvalidMaxUnavailable",
            "Normal UpgradingPods",
        ]
    );
    let posted: Vec<_> = seen
        .calls()
        .into_iter()
        .filter(|c| {
            c.path
                .starts_with("/apis/events.k8s.io/v1/namespaces/edge/events")
        })
        .collect();
    assert_eq!(posted.len(), 4, "one call per Event said");
    assert_eq!(posted[0].method, "POST");
    assert_eq!(posted[0].body["note"], "bad value \"x\"");
    // kube's recorder keys an Event by type, reason, action, reporter and object, not
    // by note: within its cache's lifetime a changed note goes as a PATCH raising the
    // first Event's count (the note users see stays the first one).
    assert!(posted[1..3].iter().all(|c| c.method == "PATCH"));
    assert_eq!(posted[3].method, "POST");
    assert_eq!(posted[3].body["note"], "deleted 1 pod(s)");
    for call in &posted {
        assert_eq!(
            call.body["reportingController"],
            "rollgate-daemonset-upgrade"
        );
        assert_eq!(call.body["regarding"]["uid"], "uid-ds");
    }
    assert_eq!(posted[3].body["action"], "DeletePods");
}

/// A fake API server whose every pod status patch moves the pod to the next
/// resourceVersion (from 11), as a real one does; `None` answers a bare `{}`.
fn versioned_server(code: Option<u16>) -> (kube::Client, std::sync::Arc<super::fake_api::Seen>) {
    let version = std::sync::atomic::AtomicU64::new(10);
    fake_client(move |_, path| match (code, path) {
        (Some(404), p) if p.contains("/gone/") => status(404, "NotFound"),
        (Some(409), p) if p.contains("/replaced/") => status(409, "Conflict"),
        _ => {
            let next = version.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            (
                200,
                json!({"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"resourceVersion": next.to_string()}}),
            )
        }
    })
}

/// A pod as the shared cache holds it: its UID and resourceVersion.
fn cached(uid: &str, version: &str) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        uid: Some(uid.into()),
        resource_version: Some(version.into()),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_repeat_of_our_last_write_is_not_sent_while_the_cache_is_behind() {
    let (client, seen) = versioned_server(None);
    let writer = Writer::new(client);
    let set = |pod: &str, condition: &PodCondition, at: &str| {
        ConditionPatch::set("edge", pod, Some("uid-a"), condition)
            .planned_from(&cached("uid-a", at))
    };
    let write = |w: ConditionPatch| {
        let writer = &writer;
        async move { writer.write_condition(&w).await.unwrap() }
    };
    let need = condition();
    // Written: the pod is at 11 now.
    let first = set("pod-a", &need, "10");
    assert_eq!(write(first.clone()).await, Outcome::Written);
    // A reconcile on the cache of before (10) plans it again: not sent.
    assert_eq!(write(first).await, Outcome::Repeat);
    // Planned a second later, its lastTransitionTime differs: the same write.
    let mut later = need.clone();
    later.last_transition_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::now(),
    ));
    assert_eq!(write(set("pod-a", &later, "10")).await, Outcome::Repeat);
    assert_eq!(seen.calls().len(), 1, "one PATCH so far");
    // Someone changed the pod after our write (the cache shows 12, past our 11): our
    // condition may be gone, so it is written again.
    assert_eq!(write(set("pod-a", &need, "12")).await, Outcome::Written);
    // Another value is never a repeat, however old the cache.
    let mut other = need.clone();
    other.status = "False".into();
    assert_eq!(write(set("pod-a", &other, "10")).await, Outcome::Written);
    // Nor a write planned without its cached pod.
    let bare = ConditionPatch::set("edge", "pod-a", Some("uid-a"), &other);
    assert_eq!(write(bare.clone()).await, Outcome::Written);
    assert_eq!(write(bare).await, Outcome::Written);
    // Removals are remembered the same way.
    let removal = ConditionPatch::remove("edge", "pod-a", POD_NEED_UPGRADE_CONDITION)
        .planned_from(&cached("uid-a", "14"));
    assert_eq!(write(removal.clone()).await, Outcome::Written);
    assert_eq!(write(removal).await, Outcome::Repeat);
    assert_eq!(seen.calls_to("PATCH").len(), 6);
    // Once the cache shows our removal (the pod at 17), nothing is held back.
    let caught_up = ConditionPatch::remove("edge", "pod-a", POD_NEED_UPGRADE_CONDITION)
        .planned_from(&cached("uid-a", "17"));
    assert_eq!(write(caught_up).await, Outcome::Written);
    assert_eq!(seen.calls_to("PATCH").len(), 7);
}

#[tokio::test]
async fn a_write_that_did_not_land_is_not_remembered() {
    for code in [404, 409] {
        let (client, seen) = versioned_server(Some(code));
        let writer = Writer::new(client);
        let pod = if code == 404 { "gone" } else { "replaced" };
        let write = ConditionPatch::set("edge", pod, Some("uid-a"), &condition())
            .planned_from(&cached("uid-a", "10"));
        let skipped = writer.write_condition(&write).await.unwrap();
        assert!(!skipped.landed(), "{code}");
        assert_ne!(
            writer.write_condition(&write).await.unwrap(),
            Outcome::Repeat,
            "{code}"
        );
        assert_eq!(seen.calls().len(), 2, "{code}: tried again");
    }
    // An answer without a resourceVersion leaves nothing to compare the cache with.
    let (client, seen) = fake_client(|_, _| ok());
    let writer = Writer::new(client);
    let write = ConditionPatch::set("edge", "pod-a", Some("uid-a"), &condition())
        .planned_from(&cached("uid-a", "10"));
    for _ in 0..2 {
        assert_eq!(
            writer.write_condition(&write).await.unwrap(),
            Outcome::Written
        );
    }
    assert_eq!(seen.calls().len(), 2);
}
