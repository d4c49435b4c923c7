//! Two updaters on one AdvancedRollingUpdate DaemonSet: rollgate beside OpenYurt's
//! yurt-manager v1.7.0 with its `daemonpodupdater` on, the mistake the README warns
//! against. rollgate must step back: once it has seen the other updater (its Warning
//! `AnotherUpdaterActive`), no pod deletion by rollgate's identity follows, counted in the
//! API server's audit log by user. yurt-manager's own deletions are its own.
//!
//! yurt-manager acts on every annotated DaemonSet in the cluster, so this binary holds
//! its only test (tests of other binaries run before or after it, not beside it).
//! Needs `make cluster-up` and the yurt-manager baseline (`YURT_MANAGER`).
mod support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;
use support::daemonset::revision_hash;
use support::yurt_manager::{yurt_manager_binary, YurtManager, YURT_MANAGER_DELETER};
use support::*;

const NODES: usize = 6;

async fn pods_of(pods: &Api<Pod>) -> Vec<Pod> {
    pods.list(&ListParams::default().labels("app=edge"))
        .await
        .unwrap()
        .items
}

#[tokio::test]
#[ignore = "needs a cluster: make test"]
async fn beside_yurt_managers_updater_rollgate_stops_deleting_and_says_so() {
    let Some(binary) = yurt_manager_binary() else {
        note("SKIPPED: no yurt-manager binary (set YURT_MANAGER)");
        return;
    };
    let client = client().await;
    let nodes = TestNodes::create(&client, "twoupd", NODES).await;
    let ns = TestNamespace::new(&client, "twoupd").await;
    let n = ns.name.clone();
    let dss: Api<DaemonSet> = Api::namespaced(client.clone(), &n);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &n);
    let ds: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "edge", "annotations": {
            "apps.openyurt.io/update-strategy": "AdvancedRollingUpdate",
            "apps.openyurt.io/max-unavailable": "1"}},
        "spec": {
            "selector": {"matchLabels": {"app": "edge"}},
            "updateStrategy": {"type": "OnDelete"},
            "template": {
                "metadata": {"labels": {"app": "edge"}},
                "spec": {
                    "nodeSelector": nodes.selector(),
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "edge", "image": "registry.local/edge:v1"}]
                }
            }
        }
    }))
    .unwrap();
    dss.create(&PostParams::default(), &ds).await.unwrap();
    let v1 = wait_for("every pod Ready at v1", Duration::from_secs(90), || async {
        let list = pods_of(&pods).await;
        if list.len() == NODES && list.iter().all(pod_is_ready) {
            Ok(revision_hash(&list[0]))
        } else {
            Err(describe_pods(&list))
        }
    })
    .await;

    let yurt = YurtManager::start(&binary, &n).await;
    let rollgate = ControllerProcess::start(&n, "two-updaters");
    // Both are up before the template changes: both see the rollout from its start.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let patch = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "edge", "image": "registry.local/edge:v2"}]}}}});
    dss.patch("edge", &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap();
    note("template v1 -> v2 with both updaters running");

    // yurt-manager wakes only on a DaemonSet update or a pod deletion (OpenYurt v1.7.0's
    // daemonpodupdater watches nothing else and never requeues). When the DaemonSet's status
    // write reaches its cache before the last new pod's Ready does, it still counts that pod
    // unavailable, deletes nothing, and nothing wakes it again: its rollout stalls with one
    // old pod (seen in CI). A metadata annotation is a DaemonSet update that changes no
    // template, so it wakes yurt-manager and changes nothing rollgate plans; rollgate, held
    // back, must still delete nothing. Every nudge is noted.
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    let (mut last_state, mut unchanged_since, mut nudges) =
        (String::new(), std::time::Instant::now(), 0u32);
    loop {
        let list = pods_of(&pods).await;
        let done = list.len() == NODES
            && list.iter().all(|p| {
                revision_hash(p) != v1 && pod_is_ready(p) && p.metadata.deletion_timestamp.is_none()
            });
        if done {
            break;
        }
        let state = describe_pods(&list);
        if state != last_state {
            (last_state, unchanged_since) = (state, std::time::Instant::now());
        } else if unchanged_since.elapsed() > Duration::from_secs(20) {
            nudges += 1;
            note(format!(
                "no change for 20 s; nudge {nudges}: a DaemonSet update to wake yurt-manager"
            ));
            let nudge = json!({"metadata": {"annotations": {
                "test.rollgate.dev/nudge": nudges.to_string()}}});
            dss.patch("edge", &PatchParams::default(), &Patch::Merge(&nudge))
                .await
                .unwrap();
            unchanged_since = std::time::Instant::now();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after 180 s (nudges {nudges}) waiting for every node at the new \
             revision, Ready; last observed state: {last_state}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // What each updater deleted, by identity, from the API server's audit log.
    let deletions: Vec<AuditRecord> = audit_records()
        .into_iter()
        .filter(|r| {
            r.verb == "delete"
                && r.resource == "pods"
                && r.subresource.is_none()
                && r.namespace.as_deref() == Some(n.as_str())
        })
        .collect();
    let by =
        |user: &str| -> Vec<&AuditRecord> { deletions.iter().filter(|r| r.user == user).collect() };
    let yurts = by(YURT_MANAGER_DELETER);
    let ours = by(CONTROLLER_USER);
    note(format!(
        "pod deletions: yurt-manager {}, rollgate {}",
        yurts.len(),
        ours.len()
    ));
    assert!(
        !yurts.is_empty(),
        "premise: yurt-manager's updater deleted pods (log {})",
        yurt.log.display()
    );

    // rollgate said it saw the other updater.
    let warning = wait_for(
        "a Warning AnotherUpdaterActive on the DaemonSet",
        Duration::from_secs(30),
        || async {
            let events = events_for(&client, &n, "edge").await;
            events
                .into_iter()
                .find(|(t, r, _)| t == "Warning" && r == "AnotherUpdaterActive")
                .ok_or_else(|| "none yet".to_string())
        },
    )
    .await;
    assert!(
        warning.2.contains("daemon-pod-updater-controller")
            && warning.2.contains("-daemonpodupdater"),
        "{warning:?}"
    );
    // When rollgate first held back: the first reconcile that logged the sighting.
    let log = std::fs::read_to_string(&rollgate.log).unwrap();
    let held_back_at: k8s_openapi::jiff::Timestamp = log
        .lines()
        .find(|l| l.contains("another updater acts on this DaemonSet"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|t| t.parse().ok())
        .expect("rollgate logs when it holds back");
    let first_yurt = yurts.iter().filter_map(|r| r.received).min().unwrap();
    let after_hold: Vec<_> = ours
        .iter()
        .filter(|r| r.received.is_some_and(|t| t > held_back_at))
        .map(|r| r.name.clone())
        .collect();
    let after_first_yurt = ours
        .iter()
        .filter(|r| r.received.is_some_and(|t| t > first_yurt))
        .count();
    note(format!(
        "yurt-manager's first deletion {first_yurt}; rollgate held back from {held_back_at}; \
         rollgate deletions after yurt-manager's first: {after_first_yurt}, after holding back: {}",
        after_hold.len()
    ));
    assert!(
        after_hold.is_empty(),
        "rollgate deleted after it saw the other updater: {after_hold:?}"
    );
    // Within one reconcile of the first deletion it did not make: at most one plan's
    // worth (the budget, 1) was already under way.
    assert!(
        after_first_yurt <= 1,
        "{after_first_yurt} rollgate deletions after yurt-manager's first"
    );

    // rollgate status says why, read from the cluster.
    let status = std::process::Command::new(controller_binary())
        .args(["status", "ds/edge", "-n", &n])
        .env("KUBECONFIG", kubeconfig_path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("held back: another updater"), "{text}");

    drop(rollgate);
    drop(yurt);
    ns.cleanup().await;
    nodes.cleanup().await;
}
