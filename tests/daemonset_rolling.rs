//! AdvancedRollingUpdate and OTA end to end: a real kube-apiserver, kube-controller-manager
//! (whose DaemonSet controller recreates what rollgate deletes), kube-scheduler, and
//! simulated nodes whose heartbeats stop and resume.
//!
//! A watcher records every pod transition and checks the budget invariant at each one;
//! the API server's audit log counts the DELETE calls the controller made. Every rollout
//! runs in both shapes users deploy (see `Shape`).
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use serde_json::json;
use support::daemonset::*;
use support::*;

const STRATEGY: &str = "apps.openyurt.io/update-strategy";
const MAX_UNAVAILABLE: &str = "apps.openyurt.io/max-unavailable";
/// `reportingController` of rollgate's Events.
const REPORTER: &str = "rollgate-daemonset-upgrade";
const NEED_UPGRADE: &str = "PodNeedUpgrade";
const HASH_LABEL: &str = "controller-revision-hash";
const V1: &str = "registry.local/edge-agent:v1";
const V2: &str = "registry.local/edge-agent:v2";

/// Creates the DaemonSet `edge` of v1 on `nodes` (`OnDelete`, so only rollgate replaces
/// pods; `annotations`, `shape`) and waits until each node runs a Ready v1 pod.
async fn create_edge_v1(
    ds_api: &Api<DaemonSet>,
    pods: &Api<Pod>,
    nodes: &TestNodes,
    annotations: serde_json::Value,
    shape: Shape,
) {
    let ds = edge_daemonset("edge", nodes, annotations, "OnDelete", shape, V1);
    ds_api.create(&PostParams::default(), &ds).await.unwrap();
    let ready = Duration::from_secs(90);
    wait_ready_on(pods, &nodes.names, V1, Others::Allowed, ready).await;
}

/// Waits (two minutes at most) until each of `nodes` runs a Ready v2 pod.
async fn wait_v2_on(pods: &Api<Pod>, nodes: &[String]) {
    let ready = Duration::from_secs(120);
    wait_ready_on(pods, nodes, V2, Others::Allowed, ready).await;
}

async fn set_image(api: &Api<DaemonSet>, name: &str, image: &str) {
    let patch =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": image}]}}}});
    api.patch(name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap();
}

/// A metadata-only change: wakes the controller up (a reconcile) without changing
/// the template.
async fn touch(api: &Api<DaemonSet>, name: &str, round: usize) {
    let patch = json!({"metadata": {"labels": {"rollgate.test/touched": round.to_string()}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

fn name_of(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

fn hash_of(p: &Pod) -> String {
    p.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(HASH_LABEL).cloned())
        .unwrap_or_default()
}

/// The pod's `PodNeedUpgrade` condition: (status, lastTransitionTime, message).
fn need_upgrade(p: &Pod) -> Option<(String, Option<Timestamp>, String)> {
    let c = p
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == NEED_UPGRADE)?;
    Some((
        c.status.clone(),
        c.last_transition_time.as_ref().map(|t| t.0),
        c.message.clone().unwrap_or_default(),
    ))
}

async fn list_pods(api: &Api<Pod>) -> Vec<Pod> {
    api.list(&ListParams::default()).await.unwrap().items
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
    /// Every pod state seen, in order.
    history: Vec<Pod>,
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
                    o.history.push(pod.clone());
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

/// Audit-log checks of the controller's DELETE calls in `ns`: no pod got two, and none
/// of `spared` got any. Returns the calls per pod.
fn assert_controller_deletes(ns: &str, spared: &BTreeSet<String>) -> BTreeMap<String, usize> {
    let twice = pods_deleted_more_than_once(ns, CONTROLLER_USER);
    assert!(
        twice.is_empty(),
        "pods got more than one DELETE from the controller (status codes per call): {twice:?}"
    );
    let counts = pod_delete_counts(ns, CONTROLLER_USER);
    let wrongly: Vec<_> = counts.keys().filter(|p| spared.contains(*p)).collect();
    assert!(
        wrongly.is_empty(),
        "the controller deleted pods it had to spare: {wrongly:?}; all its deletes: {counts:?}"
    );
    counts
}

/// A rollout with some nodes cut off (heartbeat stopped, NotReady).
struct NotReadyCase {
    prefix: &'static str,
    nodes: usize,
    cut: usize,
    /// The max-unavailable annotation; `None` leaves the default (10%).
    max_unavailable: Option<&'static str>,
    /// What the annotation means for this DaemonSet, in nodes.
    budget: usize,
    /// Lowest peak of parallel deletions that shows the budget is used, not crept along.
    min_parallel: usize,
    /// Also check Events and `rollgate status`, then bring the nodes back and finish.
    full: bool,
}

/// The Ready nodes get upgraded within the budget while the cut-off nodes keep their old
/// pods; with `full`, the cut-off nodes come back and get upgraded with no user action.
async fn rollout_with_not_ready_nodes(shape: Shape, case: NotReadyCase) {
    let client = client().await;
    let prefix = format!("{}-{}", case.prefix, shape.tag());
    let nodes = TestNodes::create(&client, &prefix, case.nodes).await;
    let ns = TestNamespace::new(&client, &prefix).await;
    let ds_api: Api<DaemonSet> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let mut annotations = json!({STRATEGY: "AdvancedRollingUpdate"});
    if let Some(mu) = case.max_unavailable {
        annotations[MAX_UNAVAILABLE] = json!(mu);
    }
    create_edge_v1(&ds_api, &pods, &nodes, annotations, shape).await;
    note(format!("{shape:?}: {} nodes run edge-agent:v1", case.nodes));

    // Some edge nodes lose their network.
    let cut: Vec<String> = nodes.names[..case.cut].to_vec();
    let ready_nodes: Vec<String> = nodes.names[case.cut..].to_vec();
    for n in &cut {
        nodes.set_heartbeat(n, false).await;
    }
    for n in &cut {
        nodes.wait_ready(n, false, Duration::from_secs(60)).await;
    }
    note(format!("{} nodes NotReady: {cut:?}", cut.len()));
    let old_pods: BTreeMap<String, String> = list_pods(&pods)
        .await
        .iter()
        .map(|p| (name_of(p), node_of(p).unwrap_or_default()))
        .collect();
    let on_cut_nodes: BTreeSet<String> = old_pods
        .iter()
        .filter(|(_, node)| cut.contains(node))
        .map(|(pod, _)| pod.clone())
        .collect();

    let new_image = Arc::new(Mutex::new(V2.to_string()));
    let observed = watch_pods(&client, &ns.name, new_image.clone());
    observed.lock().unwrap().frozen = cut.iter().cloned().collect();
    let controller = ControllerProcess::start(&ns.name, &prefix);
    set_image(&ds_api, "edge", V2).await;
    note(format!(
        "template changed to edge-agent:v2 (max-unavailable {:?}: {} nodes)",
        case.max_unavailable, case.budget
    ));

    wait_v2_on(&pods, &ready_nodes).await;
    {
        let o = observed.lock().unwrap();
        note(format!(
            "{} Ready nodes updated; max unavailable caused by deletions {} (budget {}), {} deletions, {} transitions",
            ready_nodes.len(), o.max_caused_unavailable, case.budget, o.deletions, o.transitions
        ));
        assert!(
            o.max_caused_unavailable <= case.budget,
            "budget exceeded: {} > {}",
            o.max_caused_unavailable,
            case.budget
        );
        assert!(
            o.max_caused_unavailable >= case.min_parallel,
            "the rollout should use its budget in parallel (at least {}), saw {}",
            case.min_parallel,
            o.max_caused_unavailable
        );
        assert!(
            o.touched_frozen.is_empty(),
            "pods on NotReady nodes were deleted: {:?}",
            o.touched_frozen
        );
    }
    assert_controller_deletes(&ns.name, &on_cut_nodes);

    if case.full {
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
                    .filter(|p| p.metadata.deletion_timestamp.is_some() || image_of(p) != V1)
                    .map(name_of)
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
            events.iter().any(
                |(_, reason, msg)| reason == "WaitingForNotReadyNodes" && msg.contains(&cut[0])
            ),
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
        let progress = format!("{}/{} nodes updated", ready_nodes.len(), case.nodes);
        assert!(text.contains(&progress), "status shows {progress}: {text}");
        assert!(
            text.contains("NotReady nodes waiting") && text.contains(&cut[0]),
            "status names the waiting nodes: {text}"
        );

        // The network comes back: no user action, the nodes get upgraded.
        observed.lock().unwrap().frozen.clear();
        for n in &cut {
            nodes.set_heartbeat(n, true).await;
        }
        note(format!("heartbeats resumed on the {} nodes", cut.len()));
        wait_v2_on(&pods, &nodes.names).await;
        {
            let o = observed.lock().unwrap();
            note(format!(
                "all {} nodes updated; max unavailable caused by deletions {} (budget {})",
                case.nodes, o.max_caused_unavailable, case.budget
            ));
            assert!(
                o.max_caused_unavailable <= case.budget,
                "budget exceeded: {} > {}",
                o.max_caused_unavailable,
                case.budget
            );
        }
        // Every old pod was deleted by exactly one call, and nothing else was.
        let counts = assert_controller_deletes(&ns.name, &BTreeSet::new());
        let deleted: BTreeSet<String> = counts.keys().cloned().collect();
        let old: BTreeSet<String> = old_pods.keys().cloned().collect();
        assert_eq!(
            deleted, old,
            "the controller deleted exactly the old pods, once each"
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
#[ignore = "needs a cluster: make test"]
async fn rolling_update_skips_not_ready_nodes_stays_in_budget_and_finishes_when_they_return() {
    rollout_with_not_ready_nodes(Shape::ToleratesNone, budget_case()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn rolling_update_skips_not_ready_nodes_stays_in_budget_and_finishes_when_they_return_tolerating_all_taints(
) {
    rollout_with_not_ready_nodes(Shape::ToleratesAll, budget_case()).await
}

/// 20 nodes, 5 cut off, 30%: 6 nodes of budget, more than the cut-off nodes.
fn budget_case() -> NotReadyCase {
    NotReadyCase {
        prefix: "aru",
        nodes: 20,
        cut: 5,
        max_unavailable: Some("30%"),
        budget: 6,
        min_parallel: 2,
        full: true,
    }
}

/// The default budget (10% of 20 = 2) is smaller than the 5 cut-off nodes: they must
/// not count against it, or the rollout never starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn default_budget_smaller_than_the_not_ready_nodes_still_upgrades_the_ready_ones() {
    rollout_with_not_ready_nodes(
        Shape::ToleratesAll,
        NotReadyCase {
            prefix: "stall10",
            nodes: 20,
            cut: 5,
            max_unavailable: None,
            budget: 2,
            min_parallel: 1,
            full: false,
        },
    )
    .await
}

fn one_cut_off_node_case() -> NotReadyCase {
    NotReadyCase {
        prefix: "stall1",
        nodes: 4,
        cut: 1,
        max_unavailable: Some("1"),
        budget: 1,
        min_parallel: 1,
        full: false,
    }
}

/// `max-unavailable: 1` and one node cut off: the cut-off node must not use up the budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn budget_of_one_with_one_cut_off_node_upgrades_the_others_tolerating_all_taints() {
    rollout_with_not_ready_nodes(Shape::ToleratesAll, one_cut_off_node_case()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn budget_of_one_with_one_cut_off_node_upgrades_the_others() {
    rollout_with_not_ready_nodes(Shape::ToleratesNone, one_cut_off_node_case()).await
}

/// Reconciles so far: the count of the reconcile duration histogram.
const RECONCILES: &str = "rollgate_daemonset_reconcile_duration_seconds_count";

async fn patch_pod_status(pods: &Api<Pod>, name: &str, status: serde_json::Value) {
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Strategic(json!({ "status": status })),
    )
    .await
    .unwrap_or_else(|e| panic!("patching the status of {name}: {e}"));
}

/// The CPU the OpenYurt side-by-side found: rollgate re-planned a DaemonSet on every write
/// to it or its pods. Writes no planner reads (a kubelet's condition of another type,
/// the DaemonSet controller's status counts) must cost no reconcile at all, counted on
/// the controller's metrics; a write the planners read (a `PodNeedUpgrade` left on a
/// pod of a DaemonSet that is not OTA) still does, and is acted on.
async fn writes_no_planner_reads_cost_no_reconcile(shape: Shape) {
    let client = client().await;
    let prefix = format!("quiet-{}", shape.tag());
    let nodes = TestNodes::create(&client, &prefix, 3).await;
    let ns = TestNamespace::new(&client, &prefix).await;
    let ds_api: Api<DaemonSet> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let annotations = json!({STRATEGY: "AdvancedRollingUpdate", MAX_UNAVAILABLE: "1"});
    let ds = edge_daemonset("quiet", &nodes, annotations, "OnDelete", shape, V1);
    ds_api.create(&PostParams::default(), &ds).await.unwrap();
    wait_ready_on(
        &pods,
        &nodes.names,
        V1,
        Others::Allowed,
        Duration::from_secs(60),
    )
    .await;
    let controller = ControllerProcess::start(&ns.name, &prefix);
    wait_for(
        "the controller's first reconciles, then none for 3 s",
        Duration::from_secs(60),
        || async {
            let before = controller.metric(RECONCILES).await;
            tokio::time::sleep(Duration::from_secs(3)).await;
            let after = controller.metric(RECONCILES).await;
            if before > 0.0 && before == after {
                Ok(after)
            } else {
                Err(format!("{before} then {after} reconciles"))
            }
        },
    )
    .await;

    // Node Ready transitions re-plan every managed DaemonSet, and tests running beside
    // this one flap their nodes: those are counted and allowed, the writes are not.
    let flaps = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counting = {
        let (flaps, nodes_api) = (
            flaps.clone(),
            Api::<k8s_openapi::api::core::v1::Node>::all(client.clone()),
        );
        tokio::spawn(async move {
            let mut last: BTreeMap<String, Option<String>> = BTreeMap::new();
            let mut stream = watcher(nodes_api, watcher::Config::default()).boxed();
            while let Some(Ok(event)) = stream.next().await {
                if let watcher::Event::Apply(node) | watcher::Event::InitApply(node) = event {
                    let name = node.metadata.name.clone().unwrap_or_default();
                    let ready = node_ready_status(&node);
                    if let Some(before) = last.insert(name, ready.clone()) {
                        if before != ready {
                            flaps.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                    }
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let settled = controller.metric(RECONCILES).await;
    let names: Vec<String> = list_pods(&pods)
        .await
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    for round in 0..4 {
        for name in &names {
            let status = if round % 2 == 0 { "True" } else { "False" };
            let condition = json!({"type": "example.com/probe", "status": status, "message": format!("round {round}")});
            patch_pod_status(&pods, name, json!({ "conditions": [condition] })).await;
        }
        // A status count off by one, which the DaemonSet controller writes back.
        ds_api
            .patch_status(
                "quiet",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"numberMisscheduled": round + 1}})),
            )
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after_unseen = controller.metric(RECONCILES).await;
    let flapped = flaps.load(std::sync::atomic::Ordering::SeqCst);
    counting.abort();
    assert!(
        after_unseen - settled <= flapped as f64,
        "{} pod status writes and 4 DaemonSet status writes no planner reads were reconciled: {settled} -> {after_unseen} reconciles, {flapped} node Ready transitions elsewhere",
        4 * names.len()
    );

    // A write the planners read: a stale PodNeedUpgrade must go.
    let stale = json!({"type": NEED_UPGRADE, "status": "True", "message": "left behind"});
    patch_pod_status(&pods, &names[0], json!({ "conditions": [stale] })).await;
    wait_for(
        "the stale PodNeedUpgrade removed",
        Duration::from_secs(30),
        || async {
            let pod = pods.get(&names[0]).await.map_err(|e| e.to_string())?;
            match pod_condition(&pod, NEED_UPGRADE) {
                None => Ok(()),
                Some(status) => Err(format!("still {status}")),
            }
        },
    )
    .await;
    let after_seen = controller.metric(RECONCILES).await;
    assert!(
        after_seen > after_unseen,
        "a write the planners read was not reconciled ({after_unseen} -> {after_seen})"
    );
    note(format!(
        "{}: reconciles {settled} after start, {after_unseen} after {} unseen writes, {after_seen} after one seen write",
        shape.tag(),
        4 * names.len() + 4
    ));

    // A deleted DaemonSet is forgotten: its progress series leave /metrics.
    let series = format!(
        "rollgate_daemonset_pods_updated{{namespace=\"{}\",daemonset=\"quiet\"}}",
        ns.name
    );
    assert!(
        controller.metrics().await.contains(&series),
        "no {series} while the DaemonSet exists"
    );
    ds_api.delete("quiet", &Default::default()).await.unwrap();
    wait_for(
        "the deleted DaemonSet's series gone from /metrics",
        Duration::from_secs(30),
        || async {
            if controller.metrics().await.contains(&series) {
                Err(format!("{series} still served"))
            } else {
                Ok(())
            }
        },
    )
    .await;
    drop(controller);
    ns.cleanup().await;
    nodes.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn writes_no_planner_reads_cost_no_reconcile_tolerating_all_taints() {
    writes_no_planner_reads_cost_no_reconcile(Shape::ToleratesAll).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn writes_no_planner_reads_cost_no_reconcile_tolerating_no_taints() {
    writes_no_planner_reads_cost_no_reconcile(Shape::ToleratesNone).await
}

/// The controller is killed (SIGKILL) while its first pod DELETEs are on the wire: they
/// reach the API server after its death and it never hears back. The restarted
/// controller must neither exceed the budget nor delete a pod a second time.
async fn controller_crash_between_delete_and_answer(shape: Shape) {
    let client = client().await;
    let prefix = format!("crash-{}", shape.tag());
    let nodes = TestNodes::create(&client, &prefix, 8).await;
    let ns = TestNamespace::new(&client, &prefix).await;
    let ds_api: Api<DaemonSet> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let annotations = json!({STRATEGY: "advancedrollingupdate", MAX_UNAVAILABLE: "2"});
    create_edge_v1(&ds_api, &pods, &nodes, annotations, shape).await;
    let old_pods: BTreeSet<String> = list_pods(&pods).await.iter().map(name_of).collect();

    let new_image = Arc::new(Mutex::new(V2.to_string()));
    let observed = watch_pods(&client, &ns.name, new_image);
    let mut tripwire = DeleteTripwire::start(&prefix).await;
    let first = ControllerProcess::start_with_kubeconfig(
        &ns.name,
        &format!("{prefix}-1"),
        &tripwire.kubeconfig,
    );
    set_image(&ds_api, "edge", V2).await;
    let held = tripwire.wait_tripped(Duration::from_secs(60)).await;
    first.crash();
    let seen_by_test = observed.lock().unwrap().deletions;
    let landed = tripwire.release().await;
    note(format!(
        "controller killed with SIGKILL while its DELETE of {held:?} was on the wire; \
         then {landed:?} reached the API server, unanswered"
    ));
    assert_eq!(
        seen_by_test, 0,
        "the controller was killed before any of its deletions took effect"
    );
    assert!(
        !landed.is_empty() && landed.iter().all(|p| old_pods.contains(p)),
        "the deletions in flight are of old pods: {landed:?}"
    );
    let second = ControllerProcess::start(&ns.name, &format!("{prefix}-2"));
    wait_v2_on(&pods, &nodes.names).await;
    {
        let o = observed.lock().unwrap();
        note(format!(
            "rollout finished; max unavailable caused {} (budget 2), deletions seen {}",
            o.max_caused_unavailable, o.deletions
        ));
        assert!(
            o.max_caused_unavailable <= 2,
            "budget exceeded after restart: {}",
            o.max_caused_unavailable
        );
    }
    // Counted calls, not effects: a second DELETE of a terminating pod is invisible
    // to a watcher but not to the audit log.
    let counts = assert_controller_deletes(&ns.name, &BTreeSet::new());
    let deleted: BTreeSet<String> = counts.keys().cloned().collect();
    assert_eq!(
        deleted, old_pods,
        "each of the 8 old pods got exactly one DELETE from the controller(s): {counts:?}"
    );
    drop(second);
    drop(tripwire);
    ns.cleanup().await;
    nodes.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn a_controller_crash_mid_rollout_does_not_over_delete() {
    controller_crash_between_delete_and_answer(Shape::ToleratesNone).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn a_controller_crash_mid_rollout_does_not_over_delete_tolerating_all_taints() {
    controller_crash_between_delete_and_answer(Shape::ToleratesAll).await
}

/// Mid-rollout v1 -> v2, the user rolls back to v1: pods already on v1 are the target
/// again and must not be deleted; the rollout finishes on v1 by replacing the v2 pods.
async fn rollback_mid_rollout_spares_pods_of_the_target(shape: Shape) {
    let client = client().await;
    let prefix = format!("rback-{}", shape.tag());
    let nodes = TestNodes::create(&client, &prefix, 6).await;
    let ns = TestNamespace::new(&client, &prefix).await;
    let ds_api: Api<DaemonSet> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let annotations = json!({STRATEGY: "AdvancedRollingUpdate", MAX_UNAVAILABLE: "1"});
    create_edge_v1(&ds_api, &pods, &nodes, annotations, shape).await;

    let target = Arc::new(Mutex::new(V2.to_string()));
    let observed = watch_pods(&client, &ns.name, target.clone());
    let controller = ControllerProcess::start(&ns.name, &prefix);
    set_image(&ds_api, "edge", V2).await;
    // Roll back right after the third deletion: two nodes run v2, one is being replaced,
    // and with a budget of 1 the next deletion is seconds away (a replacement's start).
    wait_for("the third deletion", Duration::from_secs(90), || async {
        let d = observed.lock().unwrap().deletions;
        if d >= 3 {
            Ok(())
        } else {
            Err(format!("{d} deletions"))
        }
    })
    .await;
    *target.lock().unwrap() = V1.to_string();
    // creationTimestamp has whole seconds: no v1 pod was made in the second before this.
    let rollback_at = Timestamp::from_second(Timestamp::now().as_second()).unwrap();
    set_image(&ds_api, "edge", V1).await;
    let at_rollback = list_pods(&pods).await;
    let live = |image: &str| -> BTreeSet<String> {
        at_rollback
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && image_of(p) == image)
            .map(name_of)
            .collect()
    };
    let (spared, to_replace) = (live(V1), live(V2));
    note(format!(
        "rolled back to v1 mid-rollout: {}",
        describe_pods(&at_rollback)
    ));
    assert!(
        !spared.is_empty() && !to_replace.is_empty(),
        "the rollback happens mid-rollout: v1 pods {spared:?}, v2 pods {to_replace:?}"
    );

    wait_ready_on(
        &pods,
        &nodes.names,
        V1,
        Others::Allowed,
        Duration::from_secs(120),
    )
    .await;
    {
        let o = observed.lock().unwrap();
        note(format!(
            "rollout finished on v1; max unavailable caused {} (budget 1)",
            o.max_caused_unavailable
        ));
        assert!(
            o.max_caused_unavailable <= 1,
            "budget exceeded around the rollback: {}",
            o.max_caused_unavailable
        );
    }
    // Pods kcm made on v1 after the rollback (a replacement of the pod being deleted at
    // the time) are of the target too.
    let known: BTreeSet<String> = at_rollback.iter().map(name_of).collect();
    let made_after: BTreeSet<String> = observed
        .lock()
        .unwrap()
        .history
        .iter()
        .filter(|p| image_of(p) == V1 && !known.contains(&name_of(p)))
        .filter(|p| {
            p.metadata
                .creation_timestamp
                .as_ref()
                .is_some_and(|t| t.0 >= rollback_at)
        })
        .map(name_of)
        .collect();
    note(format!(
        "v1 pods at the rollback {spared:?}; made on v1 after it {made_after:?}"
    ));
    let spared: BTreeSet<String> = spared.union(&made_after).cloned().collect();
    let counts = assert_controller_deletes(&ns.name, &spared);
    let missed: Vec<_> = to_replace
        .iter()
        .filter(|p| !counts.contains_key(*p))
        .collect();
    assert!(
        missed.is_empty(),
        "the v2 pods are replaced by the controller's deletions; not deleted: {missed:?}"
    );
    let status = controller.stop();
    assert!(status.success(), "controller exits cleanly: {status:?}");
    ns.cleanup().await;
    nodes.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn a_rollback_mid_rollout_deletes_no_pod_of_the_target_revision() {
    rollback_mid_rollout_spares_pods_of_the_target(Shape::ToleratesNone).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn a_rollback_mid_rollout_deletes_no_pod_of_the_target_revision_tolerating_all_taints() {
    rollback_mid_rollout_spares_pods_of_the_target(Shape::ToleratesAll).await
}

/// Waits until every live pod of the namespace has `PodNeedUpgrade` with the status
/// `want(pod)` and a message naming `hash` (the current revision).
async fn wait_need_upgrade(
    api: &Api<Pod>,
    what: &str,
    count: usize,
    hash: Option<&str>,
    want: impl Fn(&Pod) -> &'static str,
) -> Vec<Pod> {
    wait_for(what, Duration::from_secs(90), || async {
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items;
        let live: Vec<Pod> = list
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        let wrong: Vec<String> = live
            .iter()
            .filter(|p| {
                !need_upgrade(p).is_some_and(|(status, _, message)| {
                    status == want(p)
                        && hash.is_none_or(|h| message == format!("controllerrevision: {h}"))
                })
            })
            .map(|p| format!("{} rev={} {:?}", name_of(p), hash_of(p), need_upgrade(p)))
            .collect();
        if live.len() == count && wrong.is_empty() {
            Ok(live)
        } else {
            Err(format!(
                "{} live pods; not as wanted: {wrong:?}",
                live.len()
            ))
        }
    })
    .await
}

async fn delete_pods(api: &Api<Pod>, names: &BTreeSet<String>) {
    for name in names {
        api.delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("deleting pod {name}: {e}"));
    }
}

/// OTA, v1 -> v2 with two nodes upgraded by their operators, then a rollback to v1: no
/// pod of v1 (the target again) is marked `PodNeedUpgrade=True` after the rollback,
/// the v2 pods are, and once they are replaced every pod is up to date.
async fn ota_rollback_marks_no_pod_of_the_target(shape: Shape) {
    let client = client().await;
    let prefix = format!("otaback-{}", shape.tag());
    let nodes = TestNodes::create(&client, &prefix, 4).await;
    let ns = TestNamespace::new(&client, &prefix).await;
    let ds_api: Api<DaemonSet> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    create_edge_v1(&ds_api, &pods, &nodes, json!({STRATEGY: "OTA"}), shape).await;
    let observed = watch_pods(&client, &ns.name, Arc::new(Mutex::new(V2.to_string())));
    let controller = ControllerProcess::start(&ns.name, &prefix);
    let v1_pods = wait_need_upgrade(&pods, "v1 pods up to date", 4, None, |_| "False").await;
    let hash_v1 = hash_of(&v1_pods[0]);

    set_image(&ds_api, "edge", V2).await;
    let marked = wait_need_upgrade(&pods, "v1 pods marked out of date", 4, None, |_| "True").await;
    // `kubectl get pod -o yaml --show-managed-fields`: rollgate's one field manager owns
    // the condition it wrote (read fresh: the list above is from the same API server).
    for pod in &marked {
        assert_condition_managed_by_rollgate(pod, NEED_UPGRADE);
    }
    // Two nodes' operators upgrade (the agent deletes the pod; kcm recreates it on v2).
    let upgraded: BTreeSet<String> = v1_pods
        .iter()
        .filter(|p| node_of(p).is_some_and(|n| nodes.names[..2].contains(&n)))
        .map(name_of)
        .collect();
    delete_pods(&pods, &upgraded).await;
    wait_ready_on(
        &pods,
        &nodes.names[..2],
        V2,
        Others::Allowed,
        Duration::from_secs(60),
    )
    .await;
    let mid = wait_need_upgrade(&pods, "v2 pods up to date", 4, None, |p| {
        if image_of(p) == V2 {
            "False"
        } else {
            "True"
        }
    })
    .await;
    let hash_v2 = mid.iter().find(|p| image_of(p) == V2).map(hash_of).unwrap();
    note(format!(
        "mid-rollout: {}",
        mid.iter()
            .map(|p| format!("{} rev={} {:?}", name_of(p), hash_of(p), need_upgrade(p)))
            .collect::<Vec<_>>()
            .join("; ")
    ));

    let rollback_at = Timestamp::now();
    set_image(&ds_api, "edge", V1).await;
    note("rolled back to v1");
    let v1_hash = hash_v1.clone();
    wait_need_upgrade(
        &pods,
        "v2 pods marked out of date, v1 pods up to date",
        4,
        Some(&hash_v1),
        move |p| {
            if hash_of(p) == v1_hash {
                "False"
            } else {
                "True"
            }
        },
    )
    .await;
    // The operators of the two v2 nodes go back to v1.
    let v2_pods: BTreeSet<String> = list_pods(&pods)
        .await
        .iter()
        .filter(|p| hash_of(p) == hash_v2)
        .map(name_of)
        .collect();
    delete_pods(&pods, &v2_pods).await;
    wait_ready_on(
        &pods,
        &nodes.names,
        V1,
        Others::Allowed,
        Duration::from_secs(60),
    )
    .await;
    wait_need_upgrade(
        &pods,
        "all pods up to date on v1",
        4,
        Some(&hash_v1),
        |_| "False",
    )
    .await;

    // Seen by the watcher: no v1 pod turned True after the rollback (a pod still True
    // from v2's time keeps its older lastTransitionTime).
    let turned_true: Vec<String> = observed
        .lock()
        .unwrap()
        .history
        .iter()
        .filter(|p| hash_of(p) == hash_v1)
        .filter_map(|p| {
            let (status, since, _) = need_upgrade(p)?;
            let since = since?;
            (status == "True" && since.as_second() >= rollback_at.as_second())
                .then(|| format!("{} True since {since}", name_of(p)))
        })
        .collect();
    assert!(
        turned_true.is_empty(),
        "v1 pods marked PodNeedUpgrade=True after the rollback to v1: {turned_true:?}"
    );
    // Written by the controller, per the audit log: no True on a v1 pod after the rollback.
    let hash_by_pod: BTreeMap<String, String> = observed
        .lock()
        .unwrap()
        .history
        .iter()
        .map(|p| (name_of(p), hash_of(p)))
        .collect();
    let writes: Vec<String> = audit_records()
        .into_iter()
        .filter(|r| {
            r.user == CONTROLLER_USER
                && r.namespace.as_deref() == Some(ns.name.as_str())
                && r.subresource.as_deref() == Some("status")
                && r.received.is_some_and(|t| t > rollback_at)
        })
        .filter_map(|r| {
            let pod = r.name.clone()?;
            let conditions = r.request_object.as_ref()?["status"]["conditions"].as_array()?;
            let marked_true = conditions
                .iter()
                .any(|c| c["type"] == NEED_UPGRADE && c["status"] == "True");
            (marked_true && hash_by_pod.get(&pod) == Some(&hash_v1)).then_some(pod)
        })
        .collect();
    assert!(
        writes.is_empty(),
        "the controller wrote PodNeedUpgrade=True on v1 pods after the rollback: {writes:?}"
    );
    let status = controller.stop();
    assert!(status.success(), "controller exits cleanly: {status:?}");
    ns.cleanup().await;
    nodes.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn an_ota_rollback_marks_no_pod_of_the_target_revision() {
    ota_rollback_marks_no_pod_of_the_target(Shape::ToleratesNone).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn an_ota_rollback_marks_no_pod_of_the_target_revision_tolerating_all_taints() {
    ota_rollback_marks_no_pod_of_the_target(Shape::ToleratesAll).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn bad_annotations_get_a_warning_and_nothing_is_deleted() {
    let client = client().await;
    let nodes = TestNodes::create(&client, "bad", 2).await;
    let ns = TestNamespace::new(&client, "bad").await;
    let ds_api: Api<DaemonSet> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let problems = [
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
    // Every problem in both shapes: `<problem>-<shape>`.
    let mut cases = Vec::new();
    for shape in [Shape::ToleratesNone, Shape::ToleratesAll] {
        for (problem, annotations, update, reason, mention) in &problems {
            let name = format!("{problem}-{}", shape.tag());
            ds_api
                .create(
                    &PostParams::default(),
                    &edge_daemonset(&name, &nodes, annotations.clone(), update, shape, V1),
                )
                .await
                .unwrap();
            cases.push((name, *problem, *reason, *mention));
        }
    }
    let _controller = ControllerProcess::start(&ns.name, "bad");
    for (name, _, reason, mention) in &cases {
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
    for (name, problem, ..) in &cases {
        if *problem != "native" {
            set_image(&ds_api, name, V2).await;
        }
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
                .filter(|p| p.metadata.deletion_timestamp.is_some() || image_of(p) == V2)
                .collect();
            let conditioned: Vec<_> = list
                .iter()
                .filter(|p| pod_condition(p, NEED_UPGRADE).is_some())
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
    let deletes = pod_deletes(&ns.name, Some(CONTROLLER_USER));
    assert!(
        deletes.is_empty(),
        "the controller sent DELETEs for bad input: {deletes:?}"
    );
    // One Warning per problem, not one per resync: wake the controller up a few more
    // times, then count occurrences (a recorder folds repeats into one Event object's
    // series count, so counting objects would miss them).
    for round in 0..3 {
        for (name, ..) in &cases {
            touch(&ds_api, name, round).await;
        }
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (name, _, reason, _) in &cases {
        let events = event_records(&client, &ns.name, name).await;
        let warnings: u32 = events
            .iter()
            .filter(|e| e.type_ == "Warning" && e.reporting_controller == REPORTER)
            .map(|e| e.occurrences)
            .sum();
        assert_eq!(
            warnings, 1,
            "{name}: a single {reason} Warning after several reconciles: {events:?}"
        );
    }
    ns.cleanup().await;
    nodes.cleanup().await;
}

// The helpers the checks above rely on, without a cluster.

#[test]
fn audit_lines_are_read_at_response_complete_only() {
    let line = |stage: &str| {
        json!({
            "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata",
            "stage": stage, "verb": "delete",
            "requestURI": "/api/v1/namespaces/t-x/pods/edge-abc",
            "user": {"username": CONTROLLER_USER, "groups": ["system:serviceaccounts"]},
            "objectRef": {"resource": "pods", "namespace": "t-x", "name": "edge-abc", "apiVersion": "v1"},
            "responseStatus": {"metadata": {}, "code": 409},
            "requestReceivedTimestamp": "2026-11-30T02:50:00.123456Z",
        })
    };
    assert!(AuditRecord::from_json(&line("ResponseStarted")).is_none());
    let r = AuditRecord::from_json(&line("ResponseComplete")).unwrap();
    assert_eq!(
        (
            r.verb.as_str(),
            r.resource.as_str(),
            r.subresource.as_deref()
        ),
        ("delete", "pods", None)
    );
    assert_eq!(
        (r.namespace.as_deref(), r.name.as_deref()),
        (Some("t-x"), Some("edge-abc"))
    );
    assert_eq!((r.user.as_str(), r.code), (CONTROLLER_USER, Some(409)));
    assert_eq!(
        r.received,
        Some("2026-11-30T02:50:00.123456Z".parse().unwrap())
    );
}

#[test]
fn only_plain_pod_paths_trip_the_wire() {
    let cases = [
        ("/api/v1/namespaces/ns/pods/edge-1", Some("edge-1")),
        ("/api/v1/namespaces/ns/pods/edge-1/status", None),
        ("/api/v1/namespaces/ns/pods", None),
        ("/api/v1/namespaces/ns/events/e", None),
        ("/apis/apps/v1/namespaces/ns/daemonsets/edge", None),
    ];
    for (path, want) in cases {
        assert_eq!(pod_name_in_path(path).as_deref(), want, "{path}");
    }
}

/// Who holds the test's Lease now (see `ControllerProcess`: one Lease per namespace).
async fn lease_holder(client: &Client, ns: &str) -> Option<String> {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), "rollgate-system");
    leases
        .get_opt(&format!("rollgate-e2e-{ns}"))
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
        .filter(|h| !h.is_empty())
}

async fn wait_lease_holder(client: &Client, ns: &str, who: &str, timeout: Duration) -> Duration {
    let started = std::time::Instant::now();
    wait_for(&format!("{who} holds the lease"), timeout, || async {
        match lease_holder(client, ns).await {
            Some(holder) if holder == who => Ok(()),
            other => Err(format!("holder {other:?}")),
        }
    })
    .await;
    started.elapsed()
}

/// Writes the audit log shows from one replica (its User-Agent names its identity).
fn writes_by(ns: &str, identity: &str) -> Vec<AuditRecord> {
    audit_records()
        .into_iter()
        .filter(|r| {
            r.user == CONTROLLER_USER
                && r.user_agent.contains(&format!("; {identity})"))
                && r.namespace.as_deref() == Some(ns)
                && matches!(r.verb.as_str(), "create" | "update" | "patch" | "delete")
        })
        .collect()
}

/// Pod DELETEs of one replica (its identity in the User-Agent) among audit `records`.
fn pod_deletes_by<'a>(
    records: &'a [AuditRecord],
    ns: &'a str,
    identity: &'a str,
) -> impl Iterator<Item = &'a AuditRecord> + 'a {
    records.iter().filter(move |r| {
        r.verb == "delete"
            && r.resource == "pods"
            && r.subresource.is_none()
            && r.namespace.as_deref() == Some(ns)
            && r.user == CONTROLLER_USER
            && r.user_agent.contains(&format!("; {identity})"))
    })
}

/// Two replicas: the standby keeps its caches warm and writes nothing; the leader is
/// killed (SIGKILL) mid-rollout; the standby takes over within the lease duration and
/// finishes the rollout inside the budget, each old pod deleted once.
///
/// "Mid-rollout" must hold at any load: the kill follows the leader's first pod DELETE
/// as the audit log shows it (a pod watch has delivered it a minute late, after the
/// rollout had ended), and the new pods take 8 s to start, so the leader cannot get
/// past its first two deletions (budget 2) before it dies.
#[tokio::test]
#[ignore = "needs a cluster: make test"]
async fn a_standby_writes_nothing_and_takes_over_a_killed_leader_mid_rollout() {
    let client = client().await;
    let shape = Shape::ToleratesAll;
    let prefix = "ha-kill";
    let nodes = TestNodes::create(&client, prefix, 8).await;
    let ns = TestNamespace::new(&client, prefix).await;
    let ds_api: Api<DaemonSet> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let annotations = json!({STRATEGY: "AdvancedRollingUpdate", MAX_UNAVAILABLE: "2"});
    create_edge_v1(&ds_api, &pods, &nodes, annotations, shape).await;
    let old_pods: BTreeSet<String> = list_pods(&pods).await.iter().map(name_of).collect();

    let leader = ControllerProcess::start_with_env(&ns.name, "ha-a", &[("POD_NAME", "ha-a")]);
    wait_lease_holder(&client, &ns.name, "ha-a", Duration::from_secs(30)).await;
    let standby = ControllerProcess::start_with_env(&ns.name, "ha-b", &[("POD_NAME", "ha-b")]);
    wait_for(
        "the standby's caches synced",
        Duration::from_secs(30),
        || async {
            let log = std::fs::read_to_string(&standby.log).unwrap_or_default();
            log.contains("caches synced")
                .then_some(())
                .ok_or_else(|| "not yet".to_string())
        },
    )
    .await;

    let observed = watch_pods(&client, &ns.name, Arc::new(Mutex::new(V2.to_string())));
    let mut audit = AuditTail::from_now();
    let mut seen: Vec<AuditRecord> = Vec::new();
    let v2 = json!({"spec": {"template": {
        "metadata": {"annotations": {START_DELAY: "8s"}},
        "spec": {"containers": [{"name": "main", "image": V2}]},
    }}});
    ds_api
        .patch("edge", &PatchParams::default(), &Patch::Strategic(&v2))
        .await
        .unwrap();
    wait_for(
        "the leader's first pod DELETE in the audit log",
        Duration::from_secs(60),
        || {
            seen.extend(audit.read());
            let first = pod_deletes_by(&seen, &ns.name, "ha-a").next().is_some();
            async move { first.then_some(()).ok_or_else(|| "none yet".to_string()) }
        },
    )
    .await;
    let killed_at = Timestamp::now();
    leader.crash();
    assert!(
        writes_by(&ns.name, "ha-b").is_empty(),
        "the standby wrote while the leader led: {:?}",
        writes_by(&ns.name, "ha-b")
    );
    seen.extend(audit.read());
    let by_leader = pod_deletes_by(&seen, &ns.name, "ha-a").count();
    note(format!(
        "leader SIGKILLed after {by_leader} pod DELETEs of {}",
        old_pods.len()
    ));
    assert!(
        by_leader < old_pods.len(),
        "the kill came after the leader had deleted every old pod: not mid-rollout"
    );
    let takeover = wait_lease_holder(&client, &ns.name, "ha-b", Duration::from_secs(40)).await;
    note(format!(
        "leader SIGKILLed mid-rollout; the standby took the lease {:.1} s later (lease duration 15 s)",
        takeover.as_secs_f64()
    ));
    assert!(
        takeover <= Duration::from_secs(15 + 8),
        "takeover within the lease duration plus a few seconds: {takeover:?}"
    );
    wait_v2_on(&pods, &nodes.names).await;
    {
        let o = observed.lock().unwrap();
        note(format!(
            "rollout finished under the new leader; max unavailable caused {} (budget 2)",
            o.max_caused_unavailable
        ));
        assert!(
            o.max_caused_unavailable <= 2,
            "budget exceeded: {}",
            o.max_caused_unavailable
        );
    }
    let counts = assert_controller_deletes(&ns.name, &BTreeSet::new());
    assert_eq!(
        counts.keys().cloned().collect::<BTreeSet<_>>(),
        old_pods,
        "each old pod got exactly one DELETE: {counts:?}"
    );
    let early: Vec<_> = writes_by(&ns.name, "ha-b")
        .into_iter()
        .filter(|r| r.received.is_some_and(|t| t < killed_at))
        .collect();
    assert!(
        early.is_empty(),
        "the standby wrote before the leader died: {early:?}"
    );
    let by_new_leader = pod_deletes_by(&writes_by(&ns.name, "ha-b"), &ns.name, "ha-b").count();
    assert!(
        by_new_leader > 0,
        "the new leader deleted no old pod, so it did not finish the rollout itself"
    );
    drop(standby);
    ns.cleanup().await;
    nodes.cleanup().await;
}

/// SIGTERM: the leader finishes in-flight work, releases the lease and exits 0; the
/// standby takes over in under 3 s instead of waiting for the lease to expire.
#[tokio::test]
#[ignore = "needs a cluster: make test"]
async fn sigterm_releases_the_lease_and_the_standby_takes_over_at_once() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "ha-term").await;
    let leader = ControllerProcess::start_with_env(&ns.name, "ha-a", &[("POD_NAME", "ha-a")]);
    wait_lease_holder(&client, &ns.name, "ha-a", Duration::from_secs(30)).await;
    let standby = ControllerProcess::start_with_env(&ns.name, "ha-b", &[("POD_NAME", "ha-b")]);
    wait_for(
        "the standby's caches synced",
        Duration::from_secs(30),
        || async {
            let log = std::fs::read_to_string(&standby.log).unwrap_or_default();
            log.contains("caches synced")
                .then_some(())
                .ok_or_else(|| "not yet".to_string())
        },
    )
    .await;
    // Let the standby settle into waiting for the holder's lease to expire.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started = std::time::Instant::now();
    let status = leader.stop();
    assert!(
        status.success(),
        "the leader exits 0 on SIGTERM: {status:?}"
    );
    let exited = started.elapsed();
    let takeover = wait_lease_holder(&client, &ns.name, "ha-b", Duration::from_secs(20)).await;
    let total = started.elapsed();
    note(format!(
        "SIGTERM: the leader exited after {:.2} s; the standby held the lease {:.2} s after the signal",
        exited.as_secs_f64(),
        total.as_secs_f64()
    ));
    assert!(
        total < Duration::from_secs(3),
        "standby took over {total:?} after SIGTERM (target < 3 s; waited {takeover:?} after the exit)"
    );
    drop(standby);
    ns.cleanup().await;
}

/// Issue 23, item 4: a node tainted NoSchedule after the DaemonSet's pod started there,
/// with a taint the template does not tolerate. The native controller keeps that pod
/// running but would not recreate it, so the rollout must not delete it: it upgrades
/// the other nodes, keeps the old pod, and says so in a Warning Event and in `rollgate
/// status`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn an_old_pod_where_the_daemonset_no_longer_places_one_is_kept_and_reported() {
    let client = client().await;
    let nodes = TestNodes::create(&client, "placement", 3).await;
    let ns = TestNamespace::new(&client, "placement").await;
    let ds_api: Api<DaemonSet> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let nodes_api: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let annotations = json!({STRATEGY: "AdvancedRollingUpdate", MAX_UNAVAILABLE: "1"});
    create_edge_v1(&ds_api, &pods, &nodes, annotations, Shape::ToleratesNone).await;
    let dedicated = nodes.names[0].clone();
    let taint =
        json!({"spec": {"taints": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]}});
    nodes_api
        .patch(&dedicated, &PatchParams::default(), &Patch::Merge(&taint))
        .await
        .unwrap();
    let kept: Pod = list_pods(&pods)
        .await
        .into_iter()
        .find(|p| node_of(p).as_deref() == Some(dedicated.as_str()))
        .expect("the pod on the node to be tainted");
    note(format!(
        "{dedicated} tainted dedicated=db:NoSchedule; {} runs on",
        name_of(&kept)
    ));

    let controller = ControllerProcess::start(&ns.name, "placement");
    set_image(&ds_api, "edge", V2).await;
    wait_ready_on(
        &pods,
        &nodes.names[1..],
        V2,
        Others::Allowed,
        Duration::from_secs(120),
    )
    .await;
    let warning = wait_for(
        "a Warning OldPodsOnUnplacedNodes naming the node",
        Duration::from_secs(30),
        || async {
            let events = events_for(&client, &ns.name, "edge").await;
            events
                .iter()
                .find(|(t, r, m)| {
                    t == "Warning" && r == "OldPodsOnUnplacedNodes" && m.contains(&dedicated)
                })
                .cloned()
                .ok_or_else(|| format!("{events:?}"))
        },
    )
    .await;
    note(format!("Event: {}", warning.2));
    // The old pod stays: deleting it would have removed the DaemonSet from the node.
    holds_for(
        "the old pod on the tainted node to stay",
        Duration::from_secs(3),
        || async {
            let p = pods.get(&name_of(&kept)).await.map_err(|e| e.to_string())?;
            match (p.metadata.deletion_timestamp.is_some(), image_of(&p) == V1) {
                (false, true) => Ok(()),
                other => Err(format!("(terminating, old image): {other:?}")),
            }
        },
    )
    .await;
    assert!(
        !pod_delete_counts(&ns.name, CONTROLLER_USER).contains_key(&name_of(&kept)),
        "the controller never deleted the kept pod"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rollgate"))
        .args(["status", "daemonset/edge", "-n", &ns.name])
        .env("KUBECONFIG", kubeconfig_path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    note(format!("rollgate status:\n{text}"));
    assert!(
        text.contains("no longer places a pod") && text.contains(&dedicated),
        "status names the kept node: {text}"
    );
    let status = controller.stop();
    assert!(status.success(), "controller exits cleanly: {status:?}");
    ns.cleanup().await;
    nodes.cleanup().await;
}
