//! The DaemonSet e2e tests' common ground (`daemonset_rolling`, `daemonset_budget`,
//! `daemonset_controls`, `daemonset_pull_ahead`): the edge DaemonSet they roll out, its
//! creation up to Ready pods, what they read off a pod, and the wait for a revision's pods
//! to be Ready on a set of nodes.
use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;

use super::{
    controller_binary, describe_pods, kubeconfig_path, pod_is_ready, wait_for, ControllerProcess,
    Shape, TestNamespace, TestNodes,
};

/// kwok's per-pod start delay (the simulated image pull and start).
pub const START_DELAY: &str = "pod-ready.stage.kwok.x-k8s.io/delay";

/// A DaemonSet `name` of `image` on `nodes`, selected by `app: name`, with the
/// DaemonSet `annotations` (the model and its budget), `updateStrategy.type` `update`,
/// and pods that take 3 s to start.
pub fn edge_daemonset(
    name: &str,
    nodes: &TestNodes,
    annotations: serde_json::Value,
    update: &str,
    shape: Shape,
    image: &str,
) -> DaemonSet {
    serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": {"type": update},
            "template": {
                "metadata": {
                    "labels": {"app": name},
                    "annotations": {START_DELAY: "3s"}
                },
                "spec": {
                    "nodeSelector": nodes.selector(),
                    "tolerations": shape.tolerations(),
                    "containers": [{"name": "main", "image": image}]
                }
            }
        }
    }))
    .unwrap()
}

/// Creates the DaemonSet `edge` of `edge:v1` on `nodes` (`edge_daemonset`, `OnDelete`, so
/// only the updater under test replaces pods) and waits until every node runs one Ready
/// `edge:v1` pod and nothing else: the start of a rollout test.
pub async fn create_edge_v1_and_wait(
    dss: &Api<DaemonSet>,
    pods: &Api<Pod>,
    nodes: &TestNodes,
    annotations: serde_json::Value,
    shape: Shape,
    timeout: Duration,
) {
    let ds = edge_daemonset("edge", nodes, annotations, "OnDelete", shape, "edge:v1");
    dss.create(&PostParams::default(), &ds).await.unwrap();
    wait_ready_on(pods, &nodes.names, "edge:v1", Others::None, timeout).await;
}

/// A namespace with rollgate running in it and the DaemonSet "edge" of edge:v1 Ready on
/// every node of `nodes` (`create_edge_v1_and_wait`): the start of a rollout test.
pub struct EdgeBed {
    pub client: kube::Client,
    pub nodes: TestNodes,
    pub ns: TestNamespace,
    pub controller: ControllerProcess,
    pub dss: Api<DaemonSet>,
    pub pods: Api<Pod>,
}

impl EdgeBed {
    /// A namespace `tag-…`, rollgate (its log tagged `log_tag`) with `env`, and the
    /// DaemonSet with `annotations` in `shape`, Ready within `timeout`.
    #[allow(clippy::too_many_arguments)]
    pub async fn start(
        client: kube::Client,
        nodes: TestNodes,
        tag: &str,
        log_tag: &str,
        env: &[(&str, &str)],
        annotations: serde_json::Value,
        shape: Shape,
        timeout: Duration,
    ) -> EdgeBed {
        let ns = TestNamespace::new(&client, tag).await;
        let controller = ControllerProcess::start_with_env(&ns.name, log_tag, env);
        let dss: Api<DaemonSet> = Api::namespaced(client.clone(), &ns.name);
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
        create_edge_v1_and_wait(&dss, &pods, &nodes, annotations, shape, timeout).await;
        EdgeBed {
            client,
            nodes,
            ns,
            controller,
            dss,
            pods,
        }
    }

    pub async fn patch(&self, patch: serde_json::Value) {
        self.dss
            .patch("edge", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    pub async fn set_image(&self, image: &str) {
        self.patch(json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": image}]}}}}))
            .await;
    }

    /// Stops rollgate, then deletes the namespace and the nodes.
    pub async fn cleanup(self) {
        drop(self.controller);
        self.ns.cleanup().await;
        self.nodes.cleanup().await;
    }
}

/// `rollgate status ds/edge -n NAMESPACE` with `more` arguments (e.g. `-o json`), the
/// binary under test as a user runs it: its output.
pub fn rollgate_status(namespace: &str, more: &[&str]) -> String {
    let out = std::process::Command::new(controller_binary())
        .args(["status", "ds/edge", "-n", namespace])
        .args(more)
        .env("KUBECONFIG", kubeconfig_path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "rollgate status: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The pod's `controller-revision-hash` label (empty when it has none).
pub fn revision_hash(p: &Pod) -> String {
    p.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("controller-revision-hash").cloned())
        .unwrap_or_default()
}

/// Whether a container of the pod waits with `reason` (e.g. `CrashLoopBackOff`).
pub fn waits_in(p: &Pod, reason: &str) -> bool {
    p.status
        .iter()
        .flat_map(|s| s.container_statuses.iter().flatten())
        .any(|c| {
            c.state
                .as_ref()
                .and_then(|s| s.waiting.as_ref())
                .and_then(|w| w.reason.as_deref())
                == Some(reason)
        })
}

/// The image of the pod's first container.
pub fn image_of(p: &Pod) -> &str {
    p.spec
        .as_ref()
        .and_then(|s| s.containers.first()?.image.as_deref())
        .unwrap_or_default()
}

pub fn node_of(p: &Pod) -> Option<String> {
    p.spec.as_ref().and_then(|s| s.node_name.clone())
}

/// What `wait_ready_on` waits for besides Ready pods of the image on the nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Others {
    /// Other pods (other nodes, old or terminating ones) may be there too.
    Allowed,
    /// Nothing else: one pod per node, all of `image`, none terminating.
    None,
}

/// Waits until every node of `nodes` runs a live, Ready pod of `image`.
pub async fn wait_ready_on(
    pods: &Api<Pod>,
    nodes: &[String],
    image: &str,
    others: Others,
    timeout: Duration,
) {
    let want: BTreeSet<&String> = nodes.iter().collect();
    wait_for(
        &format!("{image} Ready on {} nodes", want.len()),
        timeout,
        || async {
            let list = pods
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items;
            let have: Vec<String> = list
                .iter()
                .filter(|p| {
                    p.metadata.deletion_timestamp.is_none()
                        && pod_is_ready(p)
                        && image_of(p) == image
                })
                .filter_map(node_of)
                .collect();
            let have: BTreeSet<&String> = have.iter().collect();
            let done = match others {
                Others::Allowed => want.is_subset(&have),
                Others::None => have == want && list.len() == want.len(),
            };
            if done {
                Ok(())
            } else {
                let missing: Vec<_> = want.difference(&have).collect();
                Err(format!(
                    "missing on {missing:?}; pods {}",
                    describe_pods(&list)
                ))
            }
        },
    )
    .await
}
