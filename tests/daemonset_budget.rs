//! Issue 23: the max-unavailable budget of AdvancedRollingUpdate holds through a template
//! change mid-rollout (a -> b -> c while b's pods are still starting) and through nodes
//! coming back from a cut, counted by an independent watcher (`support::unavailable`)
//! that counts every Ready node without a serving pod, whatever the reason.
//!
//! The bed plays the slow parts as they are: b's pods take long to start (kwok's per-pod
//! start delay), and the kubelet of a returning node re-reports its pods Ready only some
//! seconds after the return (the bed's re-report delay, `pod-rereport` in
//! hack/kwok-stages.yaml), so a controller that replaces pods on stale status overshoots
//! on every run, not only when it wins a race.
//!
//! Both run in the two shapes users deploy (`Shape`). To see them fail on the code before
//! the budget fix, build that commit's binary and point `ROLLGATE_TEST_CONTROLLER_BIN`
//! at it. Needs `make cluster-up`.
mod support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;
use support::daemonset::*;
use support::unavailable::Watcher;
use support::*;

const A: &str = "registry.local/edge-agent:a";
const B: &str = "registry.local/edge-agent:b";
const C: &str = "registry.local/edge-agent:c";
const REREPORT_DELAY: &str = "pod-rereport.stage.kwok.x-k8s.io/delay";
/// How long a returning kubelet takes to re-report its pods: a few seconds, like a real
/// one, and far longer than a controller needs to replan on the node's return.
/// `ROLLGATE_TEST_REREPORT_DELAY` overrides it (e.g. `0s`, the bed's old behaviour).
fn rereport_delay() -> String {
    std::env::var("ROLLGATE_TEST_REREPORT_DELAY").unwrap_or_else(|_| "6s".into())
}

fn daemonset(nodes: &TestNodes, budget: usize, shape: Shape) -> DaemonSet {
    let annotations = json!({
        "apps.openyurt.io/update-strategy": "AdvancedRollingUpdate",
        "apps.openyurt.io/max-unavailable": budget.to_string(),
    });
    let mut ds = edge_daemonset("edge", nodes, annotations, "OnDelete", shape, A);
    ds.spec
        .template
        .metadata
        .as_mut()
        .and_then(|m| m.annotations.as_mut())
        .unwrap()
        .insert(REREPORT_DELAY.into(), rereport_delay());
    ds
}

/// A new revision: `image`, starting after `start_delay`.
async fn set_revision(api: &Api<DaemonSet>, image: &str, start_delay: &str) {
    let patch = json!({"spec": {"template": {
        "metadata": {"annotations": {START_DELAY: start_delay}},
        "spec": {"containers": [{"name": "main", "image": image}]}
    }}});
    api.patch("edge", &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap();
}

struct Bed {
    client: kube::Client,
    nodes: TestNodes,
    ns: TestNamespace,
    dss: Api<DaemonSet>,
    pods: Api<Pod>,
}

/// `count` nodes running `a` Ready everywhere, with the budget `budget`.
async fn bed(prefix: &str, count: usize, budget: usize, shape: Shape) -> Bed {
    let client = client().await;
    let prefix = format!("{prefix}-{}", shape.tag());
    let nodes = TestNodes::create(&client, &prefix, count).await;
    let ns = TestNamespace::new(&client, &prefix).await;
    let dss: Api<DaemonSet> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    dss.create(&PostParams::default(), &daemonset(&nodes, budget, shape))
        .await
        .unwrap();
    wait_ready_on(
        &pods,
        &nodes.names,
        A,
        Others::None,
        Duration::from_secs(120),
    )
    .await;
    note(format!("{shape:?}: {count} nodes run {A}, budget {budget}"));
    Bed {
        client,
        nodes,
        ns,
        dss,
        pods,
    }
}

impl Bed {
    async fn watch(&self) -> Watcher {
        let watcher = Watcher::start(
            &self.client,
            &format!("{OWNER_LABEL}={}", self.nodes.owner),
            &self.ns.name,
        );
        watcher.wait_armed().await;
        assert!(
            watcher.unavailable_now().is_empty(),
            "premise: every Ready node serves before the rollout: {:?}",
            watcher.unavailable_now()
        );
        watcher
    }

    async fn cleanup(self, controller: ControllerProcess) {
        let status = controller.stop();
        assert!(status.success(), "controller exits cleanly: {status:?}");
        self.ns.cleanup().await;
        self.nodes.cleanup().await;
    }
}

/// a -> b -> c with b's pods slow to start: c is pushed while the first b pods are still
/// starting. Those b pods are old now and not available; replacing them must not also
/// let a full budget of a pods go: their nodes are down already.
async fn template_changes_mid_rollout(shape: Shape) {
    const NODES: usize = 8;
    const BUDGET: usize = 2;
    let bed = bed("budget-abc", NODES, BUDGET, shape).await;
    let watcher = bed.watch().await;
    let controller = ControllerProcess::start(&bed.ns.name, &format!("abc-{}", shape.tag()));

    // b takes far longer to start than the test needs to push c.
    set_revision(&bed.dss, B, "60s").await;
    note("template changed to b (pods start after 60 s)");
    let starting = wait_for(
        "a budget of b pods created and still starting",
        Duration::from_secs(90),
        || async {
            let list = bed
                .pods
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items;
            let b: Vec<&Pod> = list.iter().filter(|p| image_of(p) == B).collect();
            if b.len() >= BUDGET && b.iter().all(|p| !pod_is_ready(p)) {
                Ok(b.len())
            } else {
                Err(describe_pods(&list))
            }
        },
    )
    .await;
    note(format!("{starting} b pods starting; template changed to c"));
    set_revision(&bed.dss, C, "3s").await;

    wait_ready_on(
        &bed.pods,
        &bed.nodes.names,
        C,
        Others::None,
        Duration::from_secs(240),
    )
    .await;
    let (peak, at_peak) = watcher.peak();
    note(format!(
        "all {NODES} nodes run c; peak unavailable {peak} (budget {BUDGET}) on {at_peak:?}, {} observations",
        watcher.observations()
    ));
    assert!(
        peak <= BUDGET,
        "budget exceeded: {peak} Ready nodes without a serving pod at once (budget {BUDGET}): {at_peak:?}"
    );
    assert!(peak >= 1, "the watcher saw the rollout");
    bed.cleanup(controller).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn a_template_change_while_the_last_ones_pods_start_stays_in_budget() {
    template_changes_mid_rollout(Shape::ToleratesNone).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn a_template_change_while_the_last_ones_pods_start_stays_in_budget_tolerating_all_taints() {
    template_changes_mid_rollout(Shape::ToleratesAll).await
}

/// 12 nodes with old pods are cut off, the template changes, and they all come back at
/// once. Their pods kept serving through the cut; their Ready=False is the
/// node-lifecycle controller's, stale until the kubelet re-reports. They must be
/// replaced within the budget, and all of them in the end.
async fn comeback_of_many_nodes(shape: Shape) {
    const NODES: usize = 12;
    const BUDGET: usize = 3;
    let bed = bed("budget-back", NODES, BUDGET, shape).await;
    for n in &bed.nodes.names {
        bed.nodes.set_heartbeat(n, false).await;
    }
    for n in &bed.nodes.names {
        bed.nodes
            .wait_ready(n, false, Duration::from_secs(90))
            .await;
    }
    note(format!("all {NODES} nodes cut off and NotReady"));
    // Premise: the node-lifecycle controller marked their pods Ready=False.
    wait_for(
        "every pod marked not Ready",
        Duration::from_secs(60),
        || async {
            let list = bed
                .pods
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items;
            if list.len() == NODES && list.iter().all(|p| !pod_is_ready(p)) {
                Ok(())
            } else {
                Err(describe_pods(&list))
            }
        },
    )
    .await;

    let watcher = bed.watch().await;
    let controller = ControllerProcess::start(&bed.ns.name, &format!("back-{}", shape.tag()));
    set_revision(&bed.dss, B, "3s").await;
    note("template changed to b while every node is away");
    // Nothing to do while they are away; then they all return at once.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for n in &bed.nodes.names {
        bed.nodes.set_heartbeat(n, true).await;
    }
    note(format!("heartbeats resumed on all {NODES} nodes"));

    wait_ready_on(
        &bed.pods,
        &bed.nodes.names,
        B,
        Others::None,
        Duration::from_secs(240),
    )
    .await;
    let (peak, at_peak) = watcher.peak();
    note(format!(
        "all {NODES} nodes run b; peak unavailable {peak} (budget {BUDGET}) on {at_peak:?}, {} observations",
        watcher.observations()
    ));
    assert!(
        peak <= BUDGET,
        "budget exceeded: {peak} Ready nodes without a serving pod at once (budget {BUDGET}): {at_peak:?}"
    );
    assert!(peak >= 1, "the watcher saw the rollout");
    bed.cleanup(controller).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn twelve_nodes_coming_back_at_once_are_upgraded_within_the_budget() {
    comeback_of_many_nodes(Shape::ToleratesNone).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn twelve_nodes_coming_back_at_once_are_upgraded_within_the_budget_tolerating_all_taints() {
    comeback_of_many_nodes(Shape::ToleratesAll).await
}
