//! AdvancedRollingUpdate end to end: a real kube-apiserver, kube-controller-manager
//! (whose DaemonSet controller recreates what rollgate deletes), kube-scheduler, and
//! simulated nodes whose heartbeats stop and resume.
//!
//! A watcher records every pod transition and checks the budget invariant at each one.
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use serde_json::json;
use support::*;

const STRATEGY: &str = "apps.openyurt.io/update-strategy";
const MAX_UNAVAILABLE: &str = "apps.openyurt.io/max-unavailable";

fn edge_daemonset(
    name: &str,
    nodes: &TestNodes,
    annotations: serde_json::Value,
    update: &str,
) -> DaemonSet {
    serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": {"type": update},
            "template": {
                "metadata": {
                    "labels": {"app": name},
                    // Simulated image pull + start time of every pod.
                    "annotations": {"pod-ready.stage.kwok.x-k8s.io/delay": "3s"}
                },
                "spec": {
                    "nodeSelector": nodes.selector(),
                    "containers": [{"name": "main", "image": "registry.local/edge-agent:v1"}]
                }
            }
        }
    }))
    .unwrap()
}

async fn set_image(api: &Api<DaemonSet>, name: &str, image: &str) {
    let patch =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": image}]}}}});
    api.patch(name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap();
}

fn image_of(p: &Pod) -> String {
    p.spec
        .as_ref()
        .map(|s| s.containers[0].image.clone().unwrap_or_default())
        .unwrap_or_default()
}

fn node_of(p: &Pod) -> Option<String> {
    p.spec.as_ref().and_then(|s| s.node_name.clone())
}

/// What the pod watcher saw.
#[derive(Default)]
struct Observed {
    pods: BTreeMap<String, Pod>,
    /// Nodes whose available old pod was deleted and which have no available new pod
    /// yet: the unavailability our deletions caused.
    caused_unavailable: BTreeSet<String>,
    max_caused_unavailable: usize,
    /// Nodes on which a pod got a deletionTimestamp while the node was in `frozen`.
    touched_frozen: Vec<String>,
    /// Nodes whose pods must not be touched right now (NotReady).
    frozen: BTreeSet<String>,
    deletions: usize,
    transitions: usize,
}

/// Watches the namespace's pods and keeps `Observed` up to date, checking as it goes.
fn watch_pods(client: &Client, ns: &str, new_image: Arc<Mutex<String>>) -> Arc<Mutex<Observed>> {
    let observed = Arc::new(Mutex::new(Observed::default()));
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let state = observed.clone();
    tokio::spawn(async move {
        let mut stream = watcher(api, watcher::Config::default()).boxed();
        while let Some(event) = stream.next().await {
            let Ok(event) = event else { continue };
            let mut o = state.lock().unwrap();
            let new_image = new_image.lock().unwrap().clone();
            match event {
                watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
                    let uid = pod.metadata.uid.clone().unwrap();
                    let before = o.pods.get(&uid).cloned();
                    let newly_deleted = pod.metadata.deletion_timestamp.is_some()
                        && before
                            .as_ref()
                            .is_some_and(|b| b.metadata.deletion_timestamp.is_none());
                    if newly_deleted {
                        o.deletions += 1;
                        let node = node_of(&pod).unwrap_or_default();
                        if o.frozen.contains(&node) {
                            o.touched_frozen.push(node.clone());
                        }
                        // Only deleting an available old pod costs budget.
                        let was_available = before.as_ref().is_some_and(pod_is_ready);
                        if was_available && image_of(&pod) != new_image {
                            o.caused_unavailable.insert(node);
                        }
                    }
                    if image_of(&pod) == new_image && pod_is_ready(&pod) {
                        if let Some(node) = node_of(&pod) {
                            o.caused_unavailable.remove(&node);
                        }
                    }
                    o.pods.insert(uid, pod);
                    o.transitions += 1;
                    o.max_caused_unavailable =
                        o.max_caused_unavailable.max(o.caused_unavailable.len());
                }
                watcher::Event::Delete(pod) => {
                    o.pods
                        .remove(pod.metadata.uid.as_deref().unwrap_or_default());
                    o.transitions += 1;
                }
                watcher::Event::Init | watcher::Event::InitDone => {}
            }
        }
    });
    observed
}

async fn wait_pods_ready_on(api: &Api<Pod>, nodes: &[String], image: &str, timeout: Duration) {
    let want: BTreeSet<String> = nodes.iter().cloned().collect();
    wait_for(
        &format!("Ready {image} pods on {} nodes", want.len()),
        timeout,
        || async {
            let pods = api
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items;
            let have: BTreeSet<String> = pods
                .iter()
                .filter(|p| {
                    p.metadata.deletion_timestamp.is_none()
                        && pod_is_ready(p)
                        && image_of(p) == image
                })
                .filter_map(node_of)
                .collect();
            if want.is_subset(&have) {
                Ok(())
            } else {
                let missing: Vec<_> = want.difference(&have).collect();
                Err(format!(
                    "missing on {missing:?}; pods {}",
                    describe_pods(&pods)
                ))
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_update_skips_not_ready_nodes_stays_in_budget_and_finishes_when_they_return() {
    let client = client().await;
    let nodes = TestNodes::create(&client, "aru", 20).await;
    let ns = TestNamespace::new(&client, "aru").await;
    let ds_api: Api<DaemonSet> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let annotations = json!({STRATEGY: "AdvancedRollingUpdate", MAX_UNAVAILABLE: "30%"});
    ds_api
        .create(
            &PostParams::default(),
            &edge_daemonset("edge", &nodes, annotations, "OnDelete"),
        )
        .await
        .unwrap();
    wait_pods_ready_on(
        &pods,
        &nodes.names,
        "registry.local/edge-agent:v1",
        Duration::from_secs(90),
    )
    .await;
    note("20 nodes run edge-agent:v1");

    // Five edge nodes lose their network.
    let cut: Vec<String> = nodes.names[..5].to_vec();
    let ready_nodes: Vec<String> = nodes.names[5..].to_vec();
    for n in &cut {
        nodes.set_heartbeat(n, false).await;
    }
    for n in &cut {
        nodes.wait_ready(n, false, Duration::from_secs(60)).await;
    }
    note(format!("5 nodes NotReady: {cut:?}"));

    let new_image = Arc::new(Mutex::new("registry.local/edge-agent:v2".to_string()));
    let observed = watch_pods(&client, &ns.name, new_image.clone());
    observed.lock().unwrap().frozen = cut.iter().cloned().collect();
    let controller = ControllerProcess::start(&ns.name, "aru");
    set_image(&ds_api, "edge", "registry.local/edge-agent:v2").await;
    note("template changed to edge-agent:v2 (budget: 30% of 20 = 6 nodes)");

    wait_pods_ready_on(
        &pods,
        &ready_nodes,
        "registry.local/edge-agent:v2",
        Duration::from_secs(120),
    )
    .await;
    {
        let o = observed.lock().unwrap();
        note(format!(
            "15 Ready nodes updated; max unavailable caused by deletions {} (budget 6), {} deletions, {} transitions",
            o.max_caused_unavailable, o.deletions, o.transitions
        ));
        assert!(
            o.max_caused_unavailable <= 6,
            "budget exceeded: {} > 6",
            o.max_caused_unavailable
        );
        assert!(
            o.max_caused_unavailable >= 2,
            "the rollout should use its budget in parallel, saw {}",
            o.max_caused_unavailable
        );
        assert!(
            o.touched_frozen.is_empty(),
            "pods on NotReady nodes were deleted: {:?}",
            o.touched_frozen
        );
    }
    // The cut-off nodes keep their old pods while they are away.
    holds_for(
        "pods on NotReady nodes to stay untouched",
        Duration::from_secs(3),
        || async {
            let list = pods
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items;
            let bad: Vec<_> = list
                .iter()
                .filter(|p| node_of(p).is_some_and(|n| cut.contains(&n)))
                .filter(|p| {
                    p.metadata.deletion_timestamp.is_some()
                        || image_of(p) != "registry.local/edge-agent:v1"
                })
                .map(|p| p.metadata.name.clone().unwrap_or_default())
                .collect();
            if bad.is_empty() {
                Ok(())
            } else {
                Err(format!("touched: {bad:?}"))
            }
        },
    )
    .await;
    let events = events_for(&client, &ns.name, "edge").await;
    assert!(
        events
            .iter()
            .any(|(_, reason, msg)| reason == "WaitingForNotReadyNodes" && msg.contains(&cut[0])),
        "an Event says which NotReady nodes are waiting: {events:?}"
    );
    // `rollgate status` tells a person the same.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rollgate"))
        .args(["status", "daemonset/edge", "-n", &ns.name])
        .env("KUBECONFIG", kubeconfig_path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    note(format!("rollgate status:\n{text}"));
    assert!(
        out.status.success(),
        "rollgate status failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("15/20 nodes updated"),
        "status shows progress: {text}"
    );
    assert!(
        text.contains("NotReady nodes waiting") && text.contains(&cut[0]),
        "status names the waiting nodes: {text}"
    );

    // The network comes back: no user action, the nodes get upgraded.
    observed.lock().unwrap().frozen.clear();
    for n in &cut {
        nodes.set_heartbeat(n, true).await;
    }
    note("heartbeats resumed on the 5 nodes");
    wait_pods_ready_on(
        &pods,
        &nodes.names,
        "registry.local/edge-agent:v2",
        Duration::from_secs(120),
    )
    .await;
    {
        let o = observed.lock().unwrap();
        note(format!(
            "all 20 nodes updated; max unavailable caused by deletions {} (budget 6)",
            o.max_caused_unavailable
        ));
        assert!(
            o.max_caused_unavailable <= 6,
            "budget exceeded: {} > 6",
            o.max_caused_unavailable
        );
    }

    let status = controller.stop();
    assert!(
        status.success(),
        "controller exits cleanly on SIGTERM: {status:?}"
    );
    ns.cleanup().await;
    nodes.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_crash_mid_rollout_does_not_over_delete() {
    let client = client().await;
    let nodes = TestNodes::create(&client, "crash", 8).await;
    let ns = TestNamespace::new(&client, "crash").await;
    let ds_api: Api<DaemonSet> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let annotations = json!({STRATEGY: "advancedrollingupdate", MAX_UNAVAILABLE: "2"});
    ds_api
        .create(
            &PostParams::default(),
            &edge_daemonset("edge", &nodes, annotations, "OnDelete"),
        )
        .await
        .unwrap();
    wait_pods_ready_on(
        &pods,
        &nodes.names,
        "registry.local/edge-agent:v1",
        Duration::from_secs(90),
    )
    .await;

    let new_image = Arc::new(Mutex::new("registry.local/edge-agent:v2".to_string()));
    let observed = watch_pods(&client, &ns.name, new_image);
    let first = ControllerProcess::start(&ns.name, "crash-1");
    set_image(&ds_api, "edge", "registry.local/edge-agent:v2").await;
    wait_for("the first deletions", Duration::from_secs(60), || async {
        let d = observed.lock().unwrap().deletions;
        if d >= 2 {
            Ok(())
        } else {
            Err(format!("{d} deletions"))
        }
    })
    .await;
    first.crash();
    note("controller killed with SIGKILL mid-rollout; starting a new one");
    let second = ControllerProcess::start(&ns.name, "crash-2");
    wait_pods_ready_on(
        &pods,
        &nodes.names,
        "registry.local/edge-agent:v2",
        Duration::from_secs(120),
    )
    .await;
    {
        let o = observed.lock().unwrap();
        note(format!(
            "rollout finished; max unavailable caused {} (budget 2), deletions {}",
            o.max_caused_unavailable, o.deletions
        ));
        assert!(
            o.max_caused_unavailable <= 2,
            "budget exceeded after restart: {}",
            o.max_caused_unavailable
        );
        assert_eq!(
            o.deletions, 8,
            "each of the 8 old pods deleted exactly once"
        );
    }
    drop(second);
    ns.cleanup().await;
    nodes.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_annotations_get_a_warning_and_nothing_is_deleted() {
    let client = client().await;
    let nodes = TestNodes::create(&client, "bad", 2).await;
    let ns = TestNamespace::new(&client, "bad").await;
    let ds_api: Api<DaemonSet> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let cases = [
        (
            "badmu",
            json!({STRATEGY: "AdvancedRollingUpdate", MAX_UNAVAILABLE: "abc"}),
            "OnDelete",
            "InvalidMaxUnavailable",
            "\"abc\"",
        ),
        (
            "badstrat",
            json!({STRATEGY: "Sideways"}),
            "OnDelete",
            "UnknownUpdateStrategy",
            "\"Sideways\"",
        ),
        (
            "native",
            json!({STRATEGY: "OTA"}),
            "RollingUpdate",
            "UpdateStrategyNotOnDelete",
            "OnDelete",
        ),
    ];
    for (name, annotations, update, _, _) in &cases {
        ds_api
            .create(
                &PostParams::default(),
                &edge_daemonset(name, &nodes, annotations.clone(), update),
            )
            .await
            .unwrap();
    }
    let _controller = ControllerProcess::start(&ns.name, "bad");
    for (name, _, _, reason, mention) in &cases {
        let events = wait_for(
            &format!("a {reason} Warning on {name}"),
            Duration::from_secs(60),
            || async {
                let ev = events_for(&client, &ns.name, name).await;
                if ev.iter().any(|(t, r, _)| t == "Warning" && r == reason) {
                    Ok(ev)
                } else {
                    Err(format!("{ev:?}"))
                }
            },
        )
        .await;
        let (_, _, msg) = events.iter().find(|(_, r, _)| r == reason).unwrap();
        note(format!("{name}: Warning {reason}: {msg}"));
        assert!(msg.contains(mention), "the Event names the value: {msg}");
        if *reason == "InvalidMaxUnavailable" {
            assert!(
                msg.contains("30%") && msg.contains("integer"),
                "the Event gives the accepted forms: {msg}"
            );
        }
    }
    // With bad input, an image change deletes nothing (the native one is left to kube's own
    // RollingUpdate, which rollgate must not disturb with conditions either).
    for (name, ..) in &cases[..2] {
        set_image(&ds_api, name, "registry.local/edge-agent:v2").await;
    }
    holds_for(
        "no deletion and no PodNeedUpgrade condition",
        Duration::from_secs(6),
        || async {
            let list = pods
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items;
            let bad_ones: Vec<_> = list
                .iter()
                .filter(|p| !p.metadata.labels.as_ref().unwrap()["app"].starts_with("native"))
                .filter(|p| p.metadata.deletion_timestamp.is_some() || image_of(p).ends_with(":v2"))
                .collect();
            let conditioned: Vec<_> = list
                .iter()
                .filter(|p| pod_condition(p, "PodNeedUpgrade").is_some())
                .collect();
            if bad_ones.is_empty() && conditioned.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "deleted/replaced {}; with PodNeedUpgrade {}",
                    bad_ones.len(),
                    conditioned.len()
                ))
            }
        },
    )
    .await;
    // One Warning per problem, not one per resync.
    let ev = events_for(&client, &ns.name, "badmu").await;
    let warnings: Vec<_> = ev.iter().filter(|(t, _, _)| t == "Warning").collect();
    assert_eq!(warnings.len(), 1, "a single Warning Event: {ev:?}");
    ns.cleanup().await;
    nodes.cleanup().await;
}
