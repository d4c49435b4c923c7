//! Controls an operator steers an AdvancedRollingUpdate with, on the local control plane:
//! `rollgate.io/paused` stops every deletion mid-rollout (counted in the API server's
//! audit log by user, not inferred from timing) and the rollout resumes when it is
//! removed. Both toleration shapes.
//! Needs `make cluster-up`; `cargo test --test daemonset_controls -- --nocapture` narrates.
mod support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;
use support::daemonset::{edge_daemonset, image_of, wait_ready_on, Others};
use support::*;

const NODES: usize = 4;

/// Pod DELETE calls by rollgate's identity in `namespace` so far.
fn rollgate_deletions(namespace: &str) -> usize {
    audit_records()
        .iter()
        .filter(|r| {
            r.verb == "delete"
                && r.resource == "pods"
                && r.subresource.is_none()
                && r.user == CONTROLLER_USER
                && r.namespace.as_deref() == Some(namespace)
        })
        .count()
}

async fn pause_mid_rollout(shape: Shape) {
    let client = client().await;
    let tag = format!("pause-{}", shape.tag());
    let nodes = TestNodes::create(&client, &tag, NODES).await;
    let ns = TestNamespace::new(&client, &tag).await;
    let n = ns.name.clone();
    let controller = ControllerProcess::start(&n, "controls");
    let dss: Api<DaemonSet> = Api::namespaced(client.clone(), &n);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &n);
    let annotations = json!({
        "apps.openyurt.io/update-strategy": "AdvancedRollingUpdate",
        "apps.openyurt.io/max-unavailable": "1",
    });
    dss.create(
        &PostParams::default(),
        &edge_daemonset("edge", &nodes, annotations, "OnDelete", shape, "edge:v1"),
    )
    .await
    .unwrap();
    wait_ready_on(
        &pods,
        &nodes.names,
        "edge:v1",
        Others::None,
        Duration::from_secs(90),
    )
    .await;

    let set = |patch: serde_json::Value| {
        let dss = dss.clone();
        async move {
            dss.patch("edge", &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
        }
    };
    set(json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "edge:v2"}]}}}})).await;
    // Mid-rollout: the first node is being replaced, then the pause.
    wait_for("the first v2 pod", Duration::from_secs(60), || async {
        let list = pods
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items;
        if list.iter().any(|p| image_of(p) == "edge:v2") {
            Ok(())
        } else {
            Err(describe_pods(&list))
        }
    })
    .await;
    set(json!({"metadata": {"annotations": {"rollgate.io/paused": "true"}}})).await;
    // A deletion already under way may still land: settle, then count.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = rollgate_deletions(&n);
    holds_for(
        "no deletion by rollgate while paused",
        Duration::from_secs(12),
        || async {
            let now = rollgate_deletions(&n);
            if now == before {
                Ok(())
            } else {
                Err(format!("{} deletion(s) while paused", now - before))
            }
        },
    )
    .await;
    let list = pods.list(&ListParams::default()).await.unwrap().items;
    let old_left = list.iter().filter(|p| image_of(p) == "edge:v1").count();
    note(format!(
        "{}: paused after {before} deletion(s); {old_left} v1 pod(s) held for 12 s",
        shape.tag()
    ));
    assert!(
        old_left >= 1,
        "premise: paused before the end: {}",
        describe_pods(&list)
    );
    let status = std::process::Command::new(controller_binary())
        .args(["status", "ds/edge", "-n", &n])
        .env("KUBECONFIG", kubeconfig_path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("paused (rollgate.io/paused=true)"), "{text}");
    let events = events_for(&client, &n, "edge").await;
    assert!(
        events
            .iter()
            .any(|(t, r, _)| t == "Normal" && r == "RolloutPaused"),
        "{events:?}"
    );

    // A bad value: nothing is deleted, and a Warning names the accepted forms.
    set(json!({"metadata": {"annotations": {"rollgate.io/paused": "yes"}}})).await;
    let warning = wait_for(
        "a Warning InvalidPaused",
        Duration::from_secs(30),
        || async {
            events_for(&client, &n, "edge")
                .await
                .into_iter()
                .find(|(t, r, _)| t == "Warning" && r == "InvalidPaused")
                .ok_or_else(|| "none yet".to_string())
        },
    )
    .await;
    assert!(warning.2.contains("expected true or false"), "{warning:?}");
    assert_eq!(
        rollgate_deletions(&n),
        before,
        "a bad value deletes nothing"
    );

    // Resumed: the rollout finishes.
    set(json!({"metadata": {"annotations": {"rollgate.io/paused": null}}})).await;
    wait_ready_on(
        &pods,
        &nodes.names,
        "edge:v2",
        Others::None,
        Duration::from_secs(120),
    )
    .await;
    assert!(rollgate_deletions(&n) > before, "resumed by rollgate");

    drop(controller);
    ns.cleanup().await;
    nodes.cleanup().await;
}

#[tokio::test]
async fn a_paused_rollout_deletes_nothing_and_resumes_tolerating_all_taints() {
    pause_mid_rollout(Shape::ToleratesAll).await;
}

#[tokio::test]
async fn a_paused_rollout_deletes_nothing_and_resumes_tolerating_none() {
    pause_mid_rollout(Shape::ToleratesNone).await;
}
