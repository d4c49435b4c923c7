//! Proof that the local control plane behaves like a cluster: these are not rollgate's
//! features, they are the behaviours rollgate's features rely on.
//!
//! Needs `make cluster-up`; run by `make test`.
mod support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use support::*;

const GATE: &str = "rollgate.test/lb-registered";

fn daemonset(name: &str, nodes: &TestNodes, image: &str) -> DaemonSet {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": {"type": "OnDelete"},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": nodes.selector(),
                    "containers": [{"name": "main", "image": image}]
                }
            }
        }
    }))
    .unwrap()
}

fn gated_deployment(name: &str, nodes: &TestNodes, replicas: i32, image: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": nodes.selector(),
                    "readinessGates": [{"conditionType": GATE}],
                    "containers": [{"name": "main", "image": image}]
                }
            }
        }
    }))
    .unwrap()
}

async fn live_pods(api: &Api<Pod>, app: &str) -> Result<Vec<Pod>, String> {
    let pods = api
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .map_err(|e| e.to_string())?;
    Ok(pods
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect())
}

async fn set_gate(client: &Client, ns: &str, pod: &str, status: &str) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let now = k8s_openapi::jiff::Timestamp::now();
    let patch = json!({"status": {"conditions": [{
        "type": GATE, "status": status, "lastTransitionTime": now.to_string(),
        "reason": "TestSetsGate"
    }]}});
    api.patch_status(pod, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap_or_else(|e| panic!("patching gate on {pod}: {e}"));
}

fn rev(p: &Pod) -> String {
    p.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("controller-revision-hash").cloned())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ondelete_daemonset_gets_one_ready_pod_per_node_and_a_deleted_pod_comes_back_at_the_new_revision(
) {
    let client = client().await;
    let nodes = TestNodes::create(&client, "bed-ds", 3).await;
    let ns = TestNamespace::new(&client, "bed-ds").await;
    let ds_api: Api<DaemonSet> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    ds_api
        .create(
            &PostParams::default(),
            &daemonset("agent", &nodes, "registry.local/agent:v1"),
        )
        .await
        .unwrap();

    let first = wait_for(
        "one Ready pod per node",
        Duration::from_secs(60),
        || async {
            let live = live_pods(&pods, "agent").await?;
            let mut on: Vec<String> = live
                .iter()
                .filter(|p| pod_is_ready(p))
                .filter_map(|p| p.spec.as_ref()?.node_name.clone())
                .collect();
            on.sort();
            let mut want = nodes.names.clone();
            want.sort();
            if on == want && live.len() == want.len() {
                Ok(live)
            } else {
                Err(describe_pods(&live))
            }
        },
    )
    .await;
    note(format!(
        "DaemonSet pods Ready on every node: {}",
        describe_pods(&first)
    ));
    let old_rev = rev(&first[0]);
    assert!(!old_rev.is_empty(), "pods carry controller-revision-hash");

    // OnDelete: a template change alone replaces nothing.
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "registry.local/agent:v2"}]}}}});
    ds_api
        .patch("agent", &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap();
    holds_for(
        "OnDelete pods to stay at the old revision",
        Duration::from_secs(3),
        || async {
            let live = live_pods(&pods, "agent").await?;
            if live.iter().all(|p| rev(p) == old_rev) {
                Ok(())
            } else {
                Err(describe_pods(&live))
            }
        },
    )
    .await;

    let victim = first[0].clone();
    let victim_node = victim.spec.as_ref().unwrap().node_name.clone().unwrap();
    pods.delete(
        victim.metadata.name.as_ref().unwrap(),
        &DeleteParams::default(),
    )
    .await
    .unwrap();
    let replacement = wait_for(
        "a new-revision pod on the victim's node",
        Duration::from_secs(60),
        || async {
            let live = live_pods(&pods, "agent").await?;
            live.iter()
                .find(|p| {
                    p.spec.as_ref().and_then(|s| s.node_name.as_deref())
                        == Some(victim_node.as_str())
                        && p.metadata.uid != victim.metadata.uid
                        && pod_is_ready(p)
                })
                .cloned()
                .ok_or_else(|| describe_pods(&live))
        },
    )
    .await;
    note(format!(
        "replacement {} has revision {} (old {old_rev})",
        replacement.metadata.name.as_deref().unwrap(),
        rev(&replacement)
    ));
    assert_ne!(
        rev(&replacement),
        old_rev,
        "the recreated pod carries the new controller-revision-hash"
    );
    let others = live_pods(&pods, "agent").await.unwrap();
    assert_eq!(
        others.iter().filter(|p| rev(p) == old_rev).count(),
        2,
        "untouched pods keep the old revision"
    );

    ns.cleanup().await;
    nodes.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_heartbeat_stops_goes_not_ready_and_comes_back() {
    let client = client().await;
    let nodes = TestNodes::create(&client, "bed-hb", 1).await;
    let node = nodes.names[0].clone();
    let started = std::time::Instant::now();
    nodes.set_heartbeat(&node, false).await;
    note(format!("heartbeat of {node} stopped"));
    // Grace period 15 s plus lease and monitor periods; 45 s leaves room on a busy machine.
    nodes
        .wait_ready(&node, false, Duration::from_secs(45))
        .await;
    note(format!(
        "{node} NotReady after {:.1}s",
        started.elapsed().as_secs_f64()
    ));
    let resumed = std::time::Instant::now();
    nodes.set_heartbeat(&node, true).await;
    nodes.wait_ready(&node, true, Duration::from_secs(45)).await;
    note(format!(
        "{node} Ready again {:.1}s after the heartbeat resumed",
        resumed.elapsed().as_secs_f64()
    ));
    nodes.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_with_a_readiness_gate_stays_not_ready_until_the_gate_is_true() {
    let client = client().await;
    let nodes = TestNodes::create(&client, "bed-gate", 1).await;
    let ns = TestNamespace::new(&client, "bed-gate").await;
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    deploys
        .create(
            &PostParams::default(),
            &gated_deployment("web", &nodes, 1, "registry.local/web:v1"),
        )
        .await
        .unwrap();

    let pod = wait_for(
        "the pod's containers to be ready",
        Duration::from_secs(60),
        || async {
            let live = live_pods(&pods, "web").await?;
            live.iter()
                .find(|p| pod_condition(p, "ContainersReady").as_deref() == Some("True"))
                .cloned()
                .ok_or_else(|| describe_pods(&live))
        },
    )
    .await;
    let name = pod.metadata.name.clone().unwrap();
    note(format!(
        "{name}: containers ready, gate {GATE} absent -> READINESS GATES 0/1"
    ));

    holds_for(
        "the pod to stay not Ready while its gate is missing",
        Duration::from_secs(4),
        || async {
            let p = pods.get(&name).await.map_err(|e| e.to_string())?;
            if pod_is_ready(&p) {
                Err("pod became Ready without its gate".into())
            } else {
                Ok(())
            }
        },
    )
    .await;
    set_gate(&client, &ns.name, &name, "False").await;
    note(format!("{name}: gate set False"));
    holds_for(
        "the pod to stay not Ready while its gate is False",
        Duration::from_secs(4),
        || async {
            let p = pods.get(&name).await.map_err(|e| e.to_string())?;
            note(format!(
                "{name}: Ready={:?} gate={:?}",
                pod_condition(&p, "Ready"),
                pod_condition(&p, GATE)
            ));
            if pod_is_ready(&p) {
                Err("pod became Ready with its gate False".into())
            } else {
                Ok(())
            }
        },
    )
    .await;

    set_gate(&client, &ns.name, &name, "True").await;
    note(format!("{name}: gate set True"));
    wait_for(
        "the pod to become Ready once its gate is True",
        Duration::from_secs(30),
        || async {
            let p = pods.get(&name).await.map_err(|e| e.to_string())?;
            if pod_is_ready(&p) {
                Ok(())
            } else {
                Err(format!("Ready={:?}", pod_condition(&p, "Ready")))
            }
        },
    )
    .await;
    note(format!("{name}: Ready (READINESS GATES 1/1)"));

    // And back: a gate going False makes the pod NotReady again, as a kubelet would.
    set_gate(&client, &ns.name, &name, "False").await;
    wait_for(
        "the pod to leave Ready when its gate turns False",
        Duration::from_secs(30),
        || async {
            let p = pods.get(&name).await.map_err(|e| e.to_string())?;
            if pod_is_ready(&p) {
                Err("still Ready".into())
            } else {
                Ok(())
            }
        },
    )
    .await;
    note(format!("{name}: gate False again -> not Ready"));

    ns.cleanup().await;
    nodes.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_does_not_progress_while_the_new_pods_gates_are_false() {
    let client = client().await;
    let nodes = TestNodes::create(&client, "bed-roll", 2).await;
    let ns = TestNamespace::new(&client, "bed-roll").await;
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    deploys
        .create(
            &PostParams::default(),
            &gated_deployment("api", &nodes, 2, "registry.local/api:v1"),
        )
        .await
        .unwrap();

    // Open the gates of the first generation so the Deployment becomes available.
    let first = wait_for(
        "two pods with containers ready",
        Duration::from_secs(60),
        || async {
            let live = live_pods(&pods, "api").await?;
            let ready: Vec<Pod> = live
                .iter()
                .filter(|p| pod_condition(p, "ContainersReady").as_deref() == Some("True"))
                .cloned()
                .collect();
            if ready.len() == 2 {
                Ok(ready)
            } else {
                Err(describe_pods(&live))
            }
        },
    )
    .await;
    for p in &first {
        set_gate(&client, &ns.name, p.metadata.name.as_ref().unwrap(), "True").await;
    }
    let old: Vec<String> = first
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();

    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "registry.local/api:v2"}]}}}});
    deploys
        .patch("api", &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap();
    note("template changed to api:v2; the new pod's gate stays False");

    let surge = wait_for(
        "the surge pod of the new ReplicaSet",
        Duration::from_secs(60),
        || async {
            let live = live_pods(&pods, "api").await?;
            live.iter()
                .find(|p| {
                    !old.contains(p.metadata.name.as_ref().unwrap())
                        && pod_condition(p, "ContainersReady").as_deref() == Some("True")
                })
                .cloned()
                .ok_or_else(|| describe_pods(&live))
        },
    )
    .await;
    let surge_name = surge.metadata.name.clone().unwrap();
    set_gate(&client, &ns.name, &surge_name, "False").await;

    holds_for(
        "the rollout to hold: both old pods live, no second new pod",
        Duration::from_secs(6),
        || async {
            let live = live_pods(&pods, "api").await?;
            let old_live = live
                .iter()
                .filter(|p| old.contains(p.metadata.name.as_ref().unwrap()))
                .count();
            if old_live == 2 && live.len() == 3 {
                Ok(())
            } else {
                Err(describe_pods(&live))
            }
        },
    )
    .await;
    note("rollout held for 6 s while the gate was False (2 old pods + 1 gated new pod)");

    // Open every new pod's gate as it appears; the rollout then completes.
    wait_for(
        "the rollout to finish once gates open",
        Duration::from_secs(90),
        || async {
            let live = live_pods(&pods, "api").await?;
            for p in live
                .iter()
                .filter(|p| !old.contains(p.metadata.name.as_ref().unwrap()))
            {
                if pod_condition(p, GATE).as_deref() != Some("True")
                    && pod_condition(p, "ContainersReady").as_deref() == Some("True")
                {
                    set_gate(&client, &ns.name, p.metadata.name.as_ref().unwrap(), "True").await;
                }
            }
            let d = deploys.get("api").await.map_err(|e| e.to_string())?;
            let st = d.status.clone().unwrap_or_default();
            let done = st.updated_replicas == Some(2)
                && st.available_replicas == Some(2)
                && st.replicas == Some(2);
            if done
                && live
                    .iter()
                    .all(|p| !old.contains(p.metadata.name.as_ref().unwrap()))
            {
                Ok(())
            } else {
                Err(format!("status {st:?}; pods {}", describe_pods(&live)))
            }
        },
    )
    .await;
    note("rollout completed after the gates opened");

    ns.cleanup().await;
    nodes.cleanup().await;
}
