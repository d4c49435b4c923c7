//! The node agent's OTA API against the local control plane: the product document's
//! walk-through with its exact strings, every refusal, answering while cut off from the
//! API server (and across a restart), and node scoping enforced by the API server.
//!
//! Each agent is a `rollgate agent` process for one simulated node, on its own port.
//! Needs `make cluster-up`; run by `make test` (or
//! `cargo test --test agent_ota -- --ignored --nocapture` to read the narrative).
mod support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::{json, Value};
use support::conditions::{condition_of, set_condition};
use support::daemonset::revision_hash;
use support::*;

const NEED_UPGRADE: &str = "PodNeedUpgrade";
const IMAGE_READY: &str = "PodImageReady";

fn daemonset(name: &str, nodes: &TestNodes, image: &str, ota: bool) -> DaemonSet {
    let annotations = if ota {
        json!({"apps.openyurt.io/update-strategy": "OTA"})
    } else {
        json!({})
    };
    serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": {"type": "OnDelete"},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": nodes.selector(),
                    "containers": [{"name": "nginx", "image": image}]
                }
            }
        }
    }))
    .unwrap()
}

/// A pod bound to `node` directly (no scheduler, no owner unless `extra_meta` adds one).
fn bare_pod(name: &str, node: &str, extra_meta: Value) -> Pod {
    let mut meta = json!({"name": name});
    if let (Some(meta), Some(extra)) = (meta.as_object_mut(), extra_meta.as_object()) {
        meta.extend(extra.clone());
    }
    serde_json::from_value(json!({
        "metadata": meta,
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "registry.local/app:v1"}]}
    }))
    .unwrap()
}

fn node_of(p: &Pod) -> &str {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or_default()
}

/// Waits until every node has one Ready, live pod of `app`; returns them.
async fn one_ready_pod_per_node(pods: &Api<Pod>, app: &str, nodes: &TestNodes) -> Vec<Pod> {
    wait_for(
        &format!("one Ready {app} pod per node"),
        Duration::from_secs(90),
        || async {
            let live: Vec<Pod> = pods
                .list(&ListParams::default().labels(&format!("app={app}")))
                .await
                .map_err(|e| e.to_string())?
                .items
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            let ready_on_every_node = nodes.names.iter().all(|n| {
                live.iter()
                    .filter(|p| node_of(p) == n && pod_is_ready(p))
                    .count()
                    == 1
            });
            if ready_on_every_node && live.len() == nodes.names.len() {
                Ok(live)
            } else {
                Err(describe_pods(&live))
            }
        },
    )
    .await
}

async fn wait_pod_ready(pods: &Api<Pod>, name: &str) -> Pod {
    wait_for(
        &format!("pod {name} Ready"),
        Duration::from_secs(60),
        || async {
            let p = pods.get(name).await.map_err(|e| e.to_string())?;
            if pod_is_ready(&p) {
                Ok(p)
            } else {
                Err(describe_pods(std::slice::from_ref(&p)))
            }
        },
    )
    .await
}

/// A pod in an agent's `GET /pods` answer.
fn served_pod<'a>(list: &'a Value, ns: &str, name: &str) -> Option<&'a Value> {
    list["items"]
        .as_array()?
        .iter()
        .find(|p| p["metadata"]["namespace"] == ns && p["metadata"]["name"] == name)
}

/// `(status, message)` of a condition of a served pod.
fn served_condition(pod: &Value, type_: &str) -> Option<(String, String)> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_string(),
                c["message"].as_str().unwrap_or_default().to_string(),
            )
        })
}

/// The served pods of namespace `ns`, as `name -> pod`.
fn served_in(list: &Value, ns: &str) -> Vec<Value> {
    list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter(|p| p["metadata"]["namespace"] == ns)
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// `GET /pods` from the agent; Ok only for a 200 PodList.
async fn pods_of(agent: &AgentProcess) -> Result<(HttpResponse, Value), String> {
    let response = agent.get("/pods").await?;
    if response.status != 200 {
        return Err(format!("{} {}", response.status, response.body));
    }
    let list = response.json();
    Ok((response, list))
}

fn assert_refused(response: &HttpResponse, status: u16, contains: &[&str]) {
    assert_eq!(
        response.status, status,
        "expected {status}, got {}: {}",
        response.status, response.body
    );
    for text in contains {
        assert!(
            response.body.contains(text),
            "the refusal should say {text:?}: {:?}",
            response.body
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn the_ota_walkthrough_of_the_product_document() {
    let client = client().await;
    install_agent_rbac_and_policy().await;
    let nodes = TestNodes::create(&client, "ota-walk", 2).await;
    let (node_a, node_b) = (nodes.names[0].clone(), nodes.names[1].clone());
    let ns = TestNamespace::new(&client, "ota-walk").await;
    let controller = ControllerProcess::start(&ns.name, "ota-walk");
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    daemonsets
        .create(
            &PostParams::default(),
            &daemonset("nginx-daemonset", &nodes, "nginx:1.19.4", true),
        )
        .await
        .unwrap();
    let first = one_ready_pod_per_node(&pods, "nginx-daemonset", &nodes).await;
    let pod_on = |node: &str| first.iter().find(|p| node_of(p) == node).cloned().unwrap();
    let (old_a, old_b) = (pod_on(&node_a), pod_on(&node_b));
    let (pod_a, pod_b) = (
        old_a.metadata.name.clone().unwrap(),
        old_b.metadata.name.clone().unwrap(),
    );
    let v1_hash = revision_hash(&old_a);
    note(format!(
        "nginx-daemonset (OTA, OnDelete) runs: {}",
        describe_pods(&first)
    ));

    // Node A's agent authenticates as the agent ServiceAccount with a token bound to a
    // pod on node A, exactly as in deploy/agent: this proves the least-privilege RBAC
    // and the node-scope policy let the real flow through.
    let stand_in = stand_in_agent_pod(&client, &node_a).await;
    let token = agent_token(&client, Some(&stand_in)).await;
    let dir = temp_dir("ota-walk");
    let kubeconfig_a = derived_kubeconfig(&dir, "agent-a.kubeconfig", None, Some(&token));
    let agent_a = AgentProcess::start(
        &node_a,
        &kubeconfig_a,
        &dir.join("state-a"),
        &format!("{}-agent-a", ns.name),
    )
    .await;
    let agent_b = AgentProcess::start(
        &node_b,
        &kubeconfig_path(),
        &dir.join("state-b"),
        &format!("{}-agent-b", ns.name),
    )
    .await;

    // 1. `curl http://127.0.0.1:10267/pods`: while the template is unchanged the
    // controller marks the pod up to date.
    let list = wait_for(
        "agent A to serve its pod with PodNeedUpgrade=False",
        Duration::from_secs(60),
        || async {
            let (_, list) = pods_of(&agent_a).await?;
            let served = served_pod(&list, &ns.name, &pod_a).ok_or("pod not served yet")?;
            match served_condition(served, NEED_UPGRADE) {
                Some((status, _)) if status == "False" => Ok(list),
                other => Err(format!("PodNeedUpgrade {other:?}")),
            }
        },
    )
    .await;
    assert_eq!(list["apiVersion"], "v1");
    assert_eq!(list["kind"], "PodList");
    let served = served_pod(&list, &ns.name, &pod_a).unwrap();
    assert_eq!(
        served_condition(served, NEED_UPGRADE).unwrap().1,
        format!("controllerrevision: {v1_hash}")
    );
    assert!(
        served_pod(&list, &ns.name, &pod_b).is_none(),
        "agent A must not serve node B's pod"
    );
    for item in list["items"].as_array().unwrap() {
        assert_eq!(
            item["spec"]["nodeName"],
            node_a.as_str(),
            "only node A's pods"
        );
        assert!(
            item["metadata"].get("managedFields").is_none(),
            "managedFields pruned"
        );
    }
    let refused = agent_a.post_openyurt(&ns.name, &pod_a, "upgrade").await;
    assert_refused(&refused, 403, &["PodNeedUpgrade is False"]);
    note(format!(
        "{pod_a}: up to date, upgrade refused: {}",
        refused.body
    ));

    // The image changes; OnDelete keeps the old pods, OTA marks them out of date.
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.19.5"}]}}}});
    daemonsets
        .patch(
            "nginx-daemonset",
            &PatchParams::default(),
            &Patch::Strategic(&patch),
        )
        .await
        .unwrap();
    let mut v2_hash = String::new();
    for (agent, pod) in [(&agent_a, &pod_a), (&agent_b, &pod_b)] {
        v2_hash = wait_for(
            &format!("{pod} served with PodNeedUpgrade=True"),
            Duration::from_secs(60),
            || async {
                let (_, list) = pods_of(agent).await?;
                let served = served_pod(&list, &ns.name, pod).ok_or("pod not served")?;
                match served_condition(served, NEED_UPGRADE) {
                    Some((status, message)) if status == "True" => Ok(message
                        .strip_prefix("controllerrevision: ")
                        .unwrap_or_default()
                        .to_string()),
                    other => Err(format!("PodNeedUpgrade {other:?}")),
                }
            },
        )
        .await;
    }
    assert!(
        !v2_hash.is_empty() && v2_hash != v1_hash,
        "a new revision: {v2_hash}"
    );
    note(format!(
        "GET /pods: PodNeedUpgrade=True, controllerrevision: {v2_hash}"
    ));

    // 2. (optional) `curl -X POST .../imagepull`: the exact output of the document.
    let pulled = agent_a.post_openyurt(&ns.name, &pod_a, "imagepull").await;
    assert_eq!(pulled.status, 200, "{}", pulled.body);
    assert_eq!(
        pulled.body,
        format!("Image pre-pull requested for pod {}/{pod_a}", ns.name)
    );
    let p = pods.get(&pod_a).await.unwrap();
    assert_eq!(
        condition_of(&p, IMAGE_READY),
        Some((
            "False".to_string(),
            "PullImageRequested".to_string(),
            format!("controllerrevision: {v2_hash}")
        ))
    );
    note(format!("imagepull -> {:?}", pulled.body));

    // The pull has not finished: the upgrade waits for it.
    let refused = agent_a.post_openyurt(&ns.name, &pod_a, "upgrade").await;
    assert_refused(&refused, 403, &["pre-pull", "PodImageReady is False"]);
    assert!(
        pods.get(&pod_a).await.is_ok(),
        "a refused upgrade deletes nothing"
    );

    // Simulates the controller's pull Job succeeding. The Job itself (PodImageReady
    // written by the controller) is tested with the controller, not here.
    set_condition(
        &pods,
        &pod_a,
        IMAGE_READY,
        "True",
        "PullImageSuccess",
        &format!("controllerrevision: {v2_hash}"),
    )
    .await;

    // 3. `curl -X POST .../upgrade`: the exact output of the document.
    let upgraded = agent_a.post_openyurt(&ns.name, &pod_a, "upgrade").await;
    assert_eq!(upgraded.status, 200, "{}", upgraded.body);
    assert_eq!(
        upgraded.body,
        format!("Start updating pod {}/{pod_a}", ns.name)
    );
    note(format!("upgrade -> {:?}", upgraded.body));

    // The native DaemonSet controller recreates the pod at the new revision, the OTA
    // controller marks it up to date, and agent A serves that.
    let new_a = wait_for(
        "agent A to serve the replacement at the new revision, up to date",
        Duration::from_secs(90),
        || async {
            let (_, list) = pods_of(&agent_a).await?;
            let mine = served_in(&list, &ns.name);
            if served_pod(&list, &ns.name, &pod_a).is_some() {
                return Err(format!("{pod_a} still served"));
            }
            mine.iter()
                .find(|p| {
                    p["metadata"]["labels"]["controller-revision-hash"] == v2_hash.as_str()
                        && served_condition(p, NEED_UPGRADE).is_some_and(|(s, _)| s == "False")
                })
                .and_then(|p| p["metadata"]["name"].as_str().map(str::to_string))
                .ok_or_else(|| format!("{} pods served, none new and up to date", mine.len()))
        },
    )
    .await;
    let new_a_pod = wait_pod_ready(&pods, &new_a).await;
    assert_eq!(node_of(&new_a_pod), node_a);
    assert_eq!(revision_hash(&new_a_pod), v2_hash);
    note(format!(
        "{new_a} runs {v2_hash} on {node_a}, PodNeedUpgrade=False"
    ));

    // Node B: pre-pull is optional, the upgrade goes straight through.
    let upgraded = agent_b.post_openyurt(&ns.name, &pod_b, "upgrade").await;
    assert_eq!(upgraded.status, 200, "{}", upgraded.body);
    assert_eq!(
        upgraded.body,
        format!("Start updating pod {}/{pod_b}", ns.name)
    );
    // And node B's agent does not act on node A's pod: the spec's 403, naming the check.
    let refused = agent_b.post_openyurt(&ns.name, &new_a, "upgrade").await;
    assert_refused(&refused, 403, &["check: pod on this node"]);
    let after = one_ready_pod_per_node(&pods, "nginx-daemonset", &nodes).await;
    assert!(
        after.iter().all(|p| revision_hash(p) == v2_hash),
        "both nodes upgraded: {}",
        describe_pods(&after)
    );
    note(format!(
        "both nodes at {v2_hash}: {}",
        describe_pods(&after)
    ));

    controller.stop();
    let _ = Api::<Pod>::namespaced(client.clone(), AGENT_NAMESPACE)
        .delete(
            stand_in.metadata.name.as_deref().unwrap(),
            &DeleteParams::default(),
        )
        .await;
    ns.cleanup().await;
    nodes.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn every_refusal_names_the_failed_check() {
    let client = client().await;
    let nodes = TestNodes::create(&client, "ota-refuse", 2).await;
    let (node_a, node_b) = (nodes.names[0].clone(), nodes.names[1].clone());
    let ns = TestNamespace::new(&client, "ota-refuse").await;
    let n = ns.name.clone();
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), &n);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &n);
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &n);
    // No controller runs here: the test writes the conditions itself, to reach every
    // check deterministically.
    daemonsets
        .create(
            &PostParams::default(),
            &daemonset("app", &nodes, "registry.local/app:v1", false),
        )
        .await
        .unwrap();
    let owner: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "not-a-daemonset"}})).unwrap();
    let owner = config_maps
        .create(&PostParams::default(), &owner)
        .await
        .unwrap();
    for pod in [
        bare_pod(
            "held",
            &node_a,
            json!({"finalizers": ["rollgate.test/hold"]}),
        ),
        bare_pod("orphan", &node_a, json!({})),
        bare_pod(
            "configmap-owned",
            &node_a,
            json!({"ownerReferences": [{
                "apiVersion": "v1", "kind": "ConfigMap", "name": "not-a-daemonset",
                "uid": owner.metadata.uid, "controller": true
            }]}),
        ),
    ] {
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    let ds_pods = one_ready_pod_per_node(&pods, "app", &nodes).await;
    let ds_a = ds_pods.iter().find(|p| node_of(p) == node_a).unwrap();
    let ds_b = ds_pods.iter().find(|p| node_of(p) == node_b).unwrap();
    let (ds_a, ds_b) = (
        ds_a.metadata.name.clone().unwrap(),
        ds_b.metadata.name.clone().unwrap(),
    );
    for name in ["held", "orphan", "configmap-owned"] {
        wait_pod_ready(&pods, name).await;
    }
    let dir = temp_dir("ota-refuse");
    let agent = AgentProcess::start(
        &node_a,
        &kubeconfig_path(),
        &dir.join("state"),
        &format!("{n}-agent-a"),
    )
    .await;

    // Not found: 404 (the reference says 500; 404 is what a script can act on).
    for action in ["upgrade", "imagepull"] {
        let r = agent.post_openyurt(&n, "no-such-pod", action).await;
        assert_refused(&r, 404, &["not found", &format!("{n}/no-such-pod")]);
    }

    // Malformed names in the path: 400 naming the rule, before any API call (a name
    // like `..` must never address another resource).
    for (path, says) in [
        (
            "/openyurt.io/v1/namespaces/%2e%2e/pods/x/upgrade",
            "invalid namespace in the path: \"..\"",
        ),
        (
            "/openyurt.io/v1/namespaces/../pods/x/upgrade",
            "invalid namespace in the path",
        ),
        (
            &format!("/openyurt.io/v1/namespaces/{n}/pods/..%2F..%2Fnodes%2Fx/imagepull"),
            "invalid pod name in the path",
        ),
        (
            &format!("/openyurt.io/v1/namespaces/{n}/pods/x%00/upgrade"),
            "control character",
        ),
    ] {
        let r = agent.call("POST", path).await;
        assert_refused(&r, 400, &[says, "the accepted form is POST"]);
        note(format!("POST {path} -> {} {}", r.status, r.body));
    }

    // Terminating: 403.
    pods.delete("held", &DeleteParams::default()).await.unwrap();
    let r = agent.post_openyurt(&n, "held", "upgrade").await;
    assert_refused(&r, 403, &["is terminating", "check: pod not terminating"]);
    note(format!("terminating -> {} {}", r.status, r.body));

    // Missing: 404. On another node: the spec's 403, naming the check and nothing else
    // about the pod.
    for action in ["upgrade", "imagepull"] {
        let missing = agent.post_openyurt(&n, "no-such-pod", action).await;
        assert_refused(&missing, 404, &["not found", "check: pod exists"]);
        let r = agent.post_openyurt(&n, &ds_b, action).await;
        assert_refused(&r, 403, &["is not on node", "check: pod on this node"]);
    }
    note(format!("missing -> 404; other node -> 403: {node_b}"));

    // PodNeedUpgrade missing, then False: 403.
    let r = agent.post_openyurt(&n, &ds_a, "upgrade").await;
    assert_refused(&r, 403, &["PodNeedUpgrade is missing"]);
    set_condition(
        &pods,
        &ds_a,
        NEED_UPGRADE,
        "False",
        "",
        "controllerrevision: new",
    )
    .await;
    let r = agent.post_openyurt(&n, &ds_a, "imagepull").await;
    assert_refused(&r, 403, &["PodNeedUpgrade is False"]);
    note(format!("not out of date -> {} {}", r.status, r.body));

    // Out of date: pre-pull requested but not finished, failed, or for an older
    // revision: 403 on upgrade, saying what would be accepted.
    set_condition(
        &pods,
        &ds_a,
        NEED_UPGRADE,
        "True",
        "",
        "controllerrevision: new",
    )
    .await;
    let r = agent.post_openyurt(&n, &ds_a, "imagepull").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body,
        format!("Image pre-pull requested for pod {n}/{ds_a}")
    );
    let r = agent.post_openyurt(&n, &ds_a, "upgrade").await;
    assert_refused(
        &r,
        403,
        &[
            "PodImageReady is False (PullImageRequested",
            "accepted once PodImageReady is True with message \"controllerrevision: new\"",
        ],
    );
    set_condition(
        &pods,
        &ds_a,
        IMAGE_READY,
        "False",
        "PullImageFail",
        "controllerrevision: new",
    )
    .await;
    let r = agent.post_openyurt(&n, &ds_a, "upgrade").await;
    assert_refused(
        &r,
        403,
        &[
            "failed: PodImageReady is False (PullImageFail",
            &format!(
                "retry the pull with POST /openyurt.io/v1/namespaces/{n}/pods/{ds_a}/imagepull"
            ),
        ],
    );
    note(format!("pre-pull failed -> {} {}", r.status, r.body));
    // The retry: imagepull again is a fresh request (a later lastTransitionTime, which
    // the image-pull controller keys its Jobs on).
    let transition = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == IMAGE_READY))
            .and_then(|c| c.last_transition_time.clone())
            .map(|t| t.0)
    };
    let failed_at = transition(&pods.get(&ds_a).await.unwrap()).unwrap();
    let r = agent.post_openyurt(&n, &ds_a, "imagepull").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let retried = pods.get(&ds_a).await.unwrap();
    assert_eq!(
        condition_of(&retried, IMAGE_READY),
        Some((
            "False".to_string(),
            "PullImageRequested".to_string(),
            "controllerrevision: new".to_string()
        ))
    );
    assert!(transition(&retried).unwrap() > failed_at);
    set_condition(
        &pods,
        &ds_a,
        IMAGE_READY,
        "True",
        "PullImageSuccess",
        "controllerrevision: old",
    )
    .await;
    let r = agent.post_openyurt(&n, &ds_a, "upgrade").await;
    assert_refused(
        &r,
        403,
        &["succeeded for revision old, but the current revision is new"],
    );
    note(format!(
        "pre-pull for an older revision -> {} {}",
        r.status, r.body
    ));

    // Not a DaemonSet pod: 400.
    for name in ["orphan", "configmap-owned"] {
        set_condition(
            &pods,
            name,
            NEED_UPGRADE,
            "True",
            "",
            "controllerrevision: new",
        )
        .await;
    }
    let r = agent.post_openyurt(&n, "orphan", "upgrade").await;
    assert_refused(&r, 400, &["has no owner", "check: owned by a DaemonSet"]);
    let r = agent
        .post_openyurt(&n, "configmap-owned", "imagepull")
        .await;
    assert_refused(
        &r,
        400,
        &["owned by ConfigMap not-a-daemonset, not by a DaemonSet"],
    );
    note(format!("not a DaemonSet pod -> {} {}", r.status, r.body));

    // Unknown paths and wrong methods.
    let r = agent.call("GET", "/api/v1/pods").await;
    assert_refused(&r, 404, &["no such endpoint", "GET /pods"]);
    let r = agent.call("POST", "/pods").await;
    assert_refused(&r, 405, &["use GET"]);
    assert_eq!(r.header("allow"), Some("GET"));
    let r = agent
        .call(
            "GET",
            &format!("/openyurt.io/v1/namespaces/{n}/pods/{ds_a}/upgrade"),
        )
        .await;
    assert_refused(&r, 405, &["use POST"]);
    assert!(pods.get(&ds_a).await.is_ok(), "no refusal deleted anything");

    // Positive control: once the pull succeeded for the current revision, the same pod
    // is upgraded (deleted; the DaemonSet controller recreates it).
    let uid = pods.get(&ds_a).await.unwrap().metadata.uid;
    set_condition(
        &pods,
        &ds_a,
        IMAGE_READY,
        "True",
        "PullImageSuccess",
        "controllerrevision: new",
    )
    .await;
    let r = agent.post_openyurt(&n, &ds_a, "upgrade").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body, format!("Start updating pod {n}/{ds_a}"));
    wait_for(
        "the upgraded pod to be gone",
        Duration::from_secs(30),
        || async {
            match pods.get_opt(&ds_a).await.map_err(|e| e.to_string())? {
                Some(p) if p.metadata.uid == uid => Err("still there".into()),
                _ => Ok(()),
            }
        },
    )
    .await;

    let release = json!({"metadata": {"finalizers": null}});
    let _ = pods
        .patch("held", &PatchParams::default(), &Patch::Merge(&release))
        .await;
    ns.cleanup().await;
    nodes.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn a_cut_off_agent_keeps_answering_from_memory_and_from_disk_after_a_restart() {
    let client = client().await;
    let nodes = TestNodes::create(&client, "ota-cut", 1).await;
    let node = nodes.names[0].clone();
    let ns = TestNamespace::new(&client, "ota-cut").await;
    let n = ns.name.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &n);
    pods.create(
        &PostParams::default(),
        &bare_pod("edge-app", &node, json!({})),
    )
    .await
    .unwrap();

    // The agent reaches the API server only through this proxy: stopping it is the cut.
    let mut proxy = TcpProxy::start(api_server_addr()).await;
    let dir = temp_dir("ota-cut");
    let kubeconfig = derived_kubeconfig(&dir, "via-proxy.kubeconfig", Some(proxy.addr), None);
    let state_dir = dir.join("state");
    let agent = AgentProcess::start(&node, &kubeconfig, &state_dir, &format!("{n}-agent")).await;

    let (live, _) = wait_for(
        "the agent to serve edge-app live",
        Duration::from_secs(30),
        || async {
            let (response, list) = pods_of(&agent).await?;
            served_pod(&list, &n, "edge-app").ok_or("edge-app not served yet")?;
            Ok((response, list))
        },
    )
    .await;
    assert_eq!(live.header("x-rollgate-state-source"), Some("live"));
    assert_eq!(live.header("x-rollgate-state-age-seconds"), Some("0"));
    assert_eq!(live.header("x-rollgate-api-server"), Some("connected"));
    // The state reaches the disk (debounced) without any shutdown.
    let state_file = state_dir.join("pods.json");
    wait_for("the state to be saved", Duration::from_secs(10), || async {
        let saved = std::fs::read_to_string(&state_file).map_err(|e| e.to_string())?;
        saved
            .contains("edge-app")
            .then_some(())
            .ok_or_else(|| "edge-app not saved yet".to_string())
    })
    .await;
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&state_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the state file is private");
    }

    proxy.stop().await;
    note("proxy stopped: the agent is cut off from the API server");
    let cut = wait_for(
        "the agent to notice the cut",
        Duration::from_secs(20),
        || async {
            let (response, list) = pods_of(&agent).await?;
            if response.header("x-rollgate-api-server") == Some("unreachable") {
                Ok((response, list))
            } else {
                Err(format!("headers {:?}", response.headers))
            }
        },
    )
    .await;
    assert!(
        served_pod(&cut.1, &n, "edge-app").is_some(),
        "still serves the last known pods"
    );
    // While cut off, a pod appears on the node; the agent cannot know.
    pods.create(
        &PostParams::default(),
        &bare_pod("born-while-cut-off", &node, json!({})),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (aged, list) = pods_of(&agent).await.unwrap();
    let age: u64 = aged
        .header("x-rollgate-state-age-seconds")
        .unwrap()
        .parse()
        .unwrap();
    assert!(age >= 2, "the age grows while cut off: {age}");
    assert_eq!(aged.header("x-rollgate-state-source"), Some("live"));
    assert!(served_pod(&list, &n, "born-while-cut-off").is_none());
    note(format!("GET /pods while cut off: 200, age {age}s"));

    // Writes need the API server: 503 with the reason.
    for action in ["upgrade", "imagepull"] {
        let r = agent.post_openyurt(&n, "edge-app", action).await;
        assert_refused(
            &r,
            503,
            &["API server cannot be reached", "node may be cut off"],
        );
        note(format!("{action} while cut off -> {} {}", r.status, r.body));
    }

    // A crash and a restart while still cut off: the agent answers from disk.
    agent.kill();
    let restarted = AgentProcess::start(
        &node,
        &kubeconfig,
        &state_dir,
        &format!("{n}-agent-restarted"),
    )
    .await;
    let (from_disk, list) = pods_of(&restarted).await.expect("answers from disk");
    assert_eq!(from_disk.header("x-rollgate-state-source"), Some("disk"));
    assert_eq!(
        from_disk.header("x-rollgate-api-server"),
        Some("unreachable")
    );
    let age: u64 = from_disk
        .header("x-rollgate-state-age-seconds")
        .unwrap()
        .parse()
        .unwrap();
    assert!(age >= 2, "the saved age survives the restart: {age}");
    assert!(served_pod(&list, &n, "edge-app").is_some());
    note(format!(
        "restarted while cut off: 200 from disk, age {age}s"
    ));

    // No saved state and no API server: 503 with a reason, not an empty list.
    let empty = AgentProcess::start(
        &node,
        &kubeconfig,
        &dir.join("empty-state"),
        &format!("{n}-agent-empty"),
    )
    .await;
    let r = wait_for("a reasoned 503", Duration::from_secs(10), || async {
        let r = empty.get("/pods").await?;
        // At first the agent is "still connecting"; after its first failed list the
        // 503 names the failure.
        (r.status == 503 && !r.body.contains("still connecting"))
            .then_some(r.clone())
            .ok_or(format!("{} {}", r.status, r.body))
    })
    .await;
    assert_refused(&r, 503, &["no pod state yet", "empty-state"]);
    empty.kill();

    // The connection comes back: the restarted agent goes live and catches up.
    proxy.resume().await;
    note("proxy resumed");
    // Up to the watcher's longest backoff (30 s, jittered) plus a list.
    let (back, _) = wait_for(
        "the agent to be live again",
        Duration::from_secs(75),
        || async {
            let (response, list) = pods_of(&restarted).await?;
            let caught_up = served_pod(&list, &n, "born-while-cut-off").is_some();
            if response.header("x-rollgate-state-source") == Some("live") && caught_up {
                Ok((response, list))
            } else {
                Err(format!(
                    "headers {:?}, caught up {caught_up}",
                    response.headers
                ))
            }
        },
    )
    .await;
    assert_eq!(back.header("x-rollgate-state-age-seconds"), Some("0"));
    assert_eq!(back.header("x-rollgate-api-server"), Some("connected"));

    restarted.kill();
    proxy.stop().await;
    ns.cleanup().await;
    nodes.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn the_api_server_confines_the_agent_identity_to_its_own_node() {
    let client = client().await;
    install_agent_rbac_and_policy().await;
    let nodes = TestNodes::create(&client, "ota-scope", 2).await;
    let (node_a, node_b) = (nodes.names[0].clone(), nodes.names[1].clone());
    let ns = TestNamespace::new(&client, "ota-scope").await;
    let n = ns.name.clone();
    let admin_pods: Api<Pod> = Api::namespaced(client.clone(), &n);
    for (name, node) in [("victim-a", &node_a), ("victim-b", &node_b)] {
        admin_pods
            .create(&PostParams::default(), &bare_pod(name, node, json!({})))
            .await
            .unwrap();
    }

    // The credentials of node A's agent: its ServiceAccount's token bound to a pod on A.
    let stand_in = stand_in_agent_pod(&client, &node_a).await;
    let dir = temp_dir("ota-scope");
    let bound = derived_kubeconfig(
        &dir,
        "bound.kubeconfig",
        None,
        Some(&agent_token(&client, Some(&stand_in)).await),
    );
    let agent_pods: Api<Pod> = Api::namespaced(client_from(&bound).await, &n);
    let patch = json!({"status": {"conditions": [{"type": "PodImageReady", "status": "False"}]}});

    // The policy may take a moment to load after a fresh install: wait until a dry-run
    // delete of node B's pod is denied by it.
    let dry_run = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    let denied = wait_for(
        "the policy to deny node B's pod",
        Duration::from_secs(30),
        || async {
            match agent_pods.delete("victim-b", &dry_run).await {
                Err(kube::Error::Api(s))
                    if s.code == 403 && s.message.contains("rollgate-agent-node-scope") =>
                {
                    Ok(s)
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    note(format!(
        "dry-run delete of node B's pod: 403 {}",
        denied.message
    ));

    // Node B's pod: delete and status patch both Forbidden, with the policy's message.
    match agent_pods
        .delete("victim-b", &DeleteParams::default())
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403, "{s:?}");
            assert!(
                s.message.contains(&format!(
                    "the rollgate agent of node {node_a} may only delete or update pods bound to its own node; pod {n}/victim-b is on node {node_b}"
                )),
                "{}",
                s.message
            );
        }
        other => panic!("deleting node B's pod with node A's credentials: {other:?}"),
    }
    match agent_pods
        .patch_status(
            "victim-b",
            &PatchParams::default(),
            &Patch::Strategic(&patch),
        )
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 403, "{s:?}"),
        other => panic!("patching node B's pod status with node A's credentials: {other:?}"),
    }
    assert!(admin_pods
        .get("victim-b")
        .await
        .unwrap()
        .metadata
        .deletion_timestamp
        .is_none());

    // A token of the same ServiceAccount that names no node is refused everywhere.
    let unbound = derived_kubeconfig(
        &dir,
        "unbound.kubeconfig",
        None,
        Some(&agent_token(&client, None).await),
    );
    let unbound_pods: Api<Pod> = Api::namespaced(client_from(&unbound).await, &n);
    match unbound_pods
        .delete("victim-a", &DeleteParams::default())
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403, "{s:?}");
            assert!(
                s.message.contains("<token not bound to a node>"),
                "{}",
                s.message
            );
        }
        other => panic!("deleting with an unbound token: {other:?}"),
    }

    // Node A's own pod: allowed (so the policy is not simply denying everything).
    agent_pods
        .patch_status(
            "victim-a",
            &PatchParams::default(),
            &Patch::Strategic(&patch),
        )
        .await
        .expect("node A's agent may write node A's pod status");
    agent_pods
        .delete("victim-a", &DeleteParams::default())
        .await
        .expect("node A's agent may delete node A's pod");
    note("node A's credentials: node B's pod Forbidden, node A's pod allowed");

    let _ = Api::<Pod>::namespaced(client.clone(), AGENT_NAMESPACE)
        .delete(
            stand_in.metadata.name.as_deref().unwrap(),
            &DeleteParams::default(),
        )
        .await;
    ns.cleanup().await;
    nodes.cleanup().await;
}

/// `GET /pods` with `Accept-Encoding: gzip`: (headers, raw body).
async fn get_pods_gzip(addr: std::net::SocketAddr) -> (Vec<(String, String)>, Vec<u8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET /pods HTTP/1.1\r\nHost: {addr}\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut raw))
        .await
        .expect("an answer within 30 s")
        .unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let headers = head
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (headers, raw[split + 4..].to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn a_brief_cut_heals_without_a_relist_and_pods_come_gzipped() {
    use std::io::Read;
    let client = client().await;
    let nodes = TestNodes::create(&client, "ota-heal", 1).await;
    let node = nodes.names[0].clone();
    let ns = TestNamespace::new(&client, "ota-heal").await;
    let n = ns.name.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &n);
    pods.create(
        &PostParams::default(),
        &bare_pod("edge-app", &node, json!({})),
    )
    .await
    .unwrap();

    let mut proxy = TcpProxy::start(api_server_addr()).await;
    let dir = temp_dir("ota-heal");
    let kubeconfig = derived_kubeconfig(&dir, "via-proxy.kubeconfig", Some(proxy.addr), None);
    let agent = AgentProcess::start(
        &node,
        &kubeconfig,
        &dir.join("state"),
        &format!("{n}-agent"),
    )
    .await;
    let (_, plain) = wait_for("edge-app served", Duration::from_secs(30), || async {
        let (response, list) = pods_of(&agent).await?;
        served_pod(&list, &n, "edge-app").ok_or("not yet")?;
        Ok((response, list))
    })
    .await;

    // The same list, gzip-compressed, for a client that asks for it.
    let (headers, body) = get_pods_gzip(agent.addr).await;
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(header("content-encoding"), Some("gzip"));
    assert_eq!(header("x-rollgate-state-source"), Some("live"));
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(&body[..])
        .read_to_end(&mut json)
        .expect("a gzip body");
    let unzipped: Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(unzipped, plain);
    note(format!(
        "GET /pods gzip: {} bytes for {} of JSON",
        body.len(),
        json.len()
    ));

    // A short cut: the watch fails, then resumes from where it was. The agent must say
    // "connected" again by itself, with no pod changing and no new list.
    proxy.stop().await;
    wait_for(
        "the agent to notice the cut",
        Duration::from_secs(20),
        || async {
            let (response, _) = pods_of(&agent).await?;
            (response.header("x-rollgate-api-server") == Some("unreachable"))
                .then_some(())
                .ok_or_else(|| format!("{:?}", response.headers))
        },
    )
    .await;
    proxy.resume().await;
    let healed = wait_for(
        "the agent to be connected again",
        Duration::from_secs(75),
        || async {
            let (response, _) = pods_of(&agent).await?;
            if response.header("x-rollgate-api-server") == Some("connected") {
                Ok(response)
            } else {
                Err(format!("{:?}", response.headers))
            }
        },
    )
    .await;
    assert_eq!(healed.header("x-rollgate-state-age-seconds"), Some("0"));
    let log = std::fs::read_to_string(&agent.log).unwrap();
    assert_eq!(
        log.matches("pods of this node listed").count(),
        1,
        "healed by re-opening the watch, not by a new list"
    );
    note("brief cut healed without a relist");

    // And the watch really is live: a new pod shows up.
    pods.create(
        &PostParams::default(),
        &bare_pod("after-heal", &node, json!({})),
    )
    .await
    .unwrap();
    wait_for("after-heal served", Duration::from_secs(20), || async {
        let (_, list) = pods_of(&agent).await?;
        served_pod(&list, &n, "after-heal")
            .map(drop)
            .ok_or("not yet".to_string())
    })
    .await;

    agent.kill();
    proxy.stop().await;
    ns.cleanup().await;
    nodes.cleanup().await;
}
