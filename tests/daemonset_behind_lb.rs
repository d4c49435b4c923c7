//! Both halves together: an ingress-style edge DaemonSet (it tolerates every taint) behind
//! a LoadBalancer Service, its pods gated on that Service, upgraded by
//! AdvancedRollingUpdate while some nodes are cut off.
//!
//! The claim users rely on: the load balancer's healthy backends never fall below
//! (Ready nodes - max-unavailable) during the rollout, because a new pod counts as
//! available only once its gate is True (its backend registered and healthy), and each
//! old pod's backend leaves rotation (weight 0) before it is removed. Both are read from
//! the emulator's state and timeline, not from the controller. A second DaemonSet
//! without the gate, behind its own Service and rolled at the same time, is the
//! control: its floor must drop, or the check could not fail.
//!
//! A cut-off node is cut off from the load balancer too: its backend is forced unhealthy
//! in the emulator while its heartbeat is off, as a real health check would find it.
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use lb_emulator::EmulatorConfig;
use serde_json::{json, Value};
use support::daemonset::{edge_daemonset, image_of, node_of, wait_ready_on, Others};
use support::*;

const STRATEGY: &str = "apps.openyurt.io/update-strategy";
const MAX_UNAVAILABLE: &str = "apps.openyurt.io/max-unavailable";
const GATE_PREFIX: &str = "service.readiness.alibabacloud.com/";
const VPC_ID: &str = "vpc-ds-behind-lb";
/// The container port behind the Services' `targetPort: http`.
const BACKEND_PORT: u16 = 8080;
const NODES: usize = 5;
const CUT: usize = 2;
const BUDGET: usize = 1;

/// The image of `app` at `version`: each DaemonSet its own, so a wait reads only its pods.
fn image(app: &str, version: &str) -> String {
    format!("registry.local/{app}:{version}")
}

/// One backend of a server group as the replay sees it.
#[derive(Debug, Clone, Copy, Default)]
struct Backend {
    healthy: bool,
    /// Weight 0 or removed: out of rotation.
    out: bool,
}

/// The backends of `group` in the emulator's state now, by `ip:port`.
fn backends_now(state: &Value, group: &str) -> BTreeMap<String, Backend> {
    let mut out = BTreeMap::new();
    for (groups, _) in [
        (&state["clb"]["vserver_groups"], "clb"),
        (&state["nlb"]["server_groups"], "nlb"),
    ] {
        for g in groups.as_array().into_iter().flatten() {
            if g["id"] != group {
                continue;
            }
            for b in g["backends"].as_array().into_iter().flatten() {
                out.insert(
                    format!("{}:{}", b["ip"].as_str().unwrap_or_default(), b["port"]),
                    Backend {
                        healthy: b["health"].as_str() == Some("Healthy"),
                        out: b["weight"].as_u64() == Some(0),
                    },
                );
            }
        }
    }
    out
}

/// Replays `events` of `group` over its backends at the start and returns the lowest
/// number of healthy backends in rotation, with a trace for the failure message.
fn lowest_in_rotation(
    mut backends: BTreeMap<String, Backend>,
    events: &[Value],
    group: &str,
) -> (usize, Vec<String>) {
    let count = |b: &BTreeMap<String, Backend>| b.values().filter(|b| b.healthy && !b.out).count();
    let mut lowest = count(&backends);
    let mut trace = vec![format!("start: {lowest} healthy in rotation")];
    for e in events.iter().filter(|e| e["server_group_id"] == group) {
        let key = format!("{}:{}", e["ip"].as_str().unwrap_or_default(), e["port"]);
        let b = backends.entry(key.clone()).or_default();
        match e["event"].as_str().unwrap_or_default() {
            // A pod IP can come back for a new pod: a new backend starts unhealthy.
            "added" => *b = Backend::default(),
            "healthy" => b.healthy = true,
            "unhealthy" => b.healthy = false,
            "removed" => {
                *b = Backend {
                    healthy: false,
                    out: true,
                }
            }
            // detail: "<old> -> <new>"
            "weight-changed" => b.out = e["detail"].as_str().unwrap_or_default().ends_with("-> 0"),
            _ => {}
        }
        let now = count(&backends);
        lowest = lowest.min(now);
        trace.push(format!(
            "{} {} {key} {} -> {now}",
            e["at"].as_str().unwrap_or_default(),
            e["event"].as_str().unwrap_or_default(),
            e["detail"].as_str().unwrap_or_default()
        ));
    }
    (lowest, trace)
}

/// The events of each IP of `group`, in order.
fn events_by_ip(events: &[Value], group: &str) -> BTreeMap<String, Vec<String>> {
    let mut by_ip: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in events.iter().filter(|e| e["server_group_id"] == group) {
        let event = e["event"].as_str().unwrap_or_default();
        let label = match event {
            "weight-changed" => format!("weight {}", e["detail"].as_str().unwrap_or_default()),
            _ => event.to_string(),
        };
        by_ip
            .entry(e["ip"].as_str().unwrap_or_default().to_string())
            .or_default()
            .push(label);
    }
    by_ip
}

struct World {
    client: kube::Client,
    ns: TestNamespace,
    nodes: TestNodes,
    emu: EmulatorProcess,
    http: reqwest::Client,
}

impl World {
    fn url(&self, path: &str) -> String {
        format!("{}/_emulator/{path}", self.emu.base_url())
    }

    async fn get(&self, path: &str) -> Value {
        let r = self.http.get(self.url(path)).send().await.unwrap();
        serde_json::from_slice(&r.bytes().await.unwrap()).unwrap()
    }

    async fn post(&self, path: &str, body: Value) -> reqwest::StatusCode {
        let r = self
            .http
            .post(self.url(path))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        r.status()
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns.name)
    }

    /// A LoadBalancer Service `name` in front of the pods labelled `app: name`.
    async fn create_service(&self, name: &str) {
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "type": "LoadBalancer",
                "selector": {"app": name},
                "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
            },
        }))
        .unwrap();
        Api::<Service>::namespaced(self.client.clone(), &self.ns.name)
            .create(&PostParams::default(), &svc)
            .await
            .unwrap_or_else(|e| panic!("creating Service {name}: {e}"));
    }

    /// The edge DaemonSet `name` on every node: AdvancedRollingUpdate with a budget of
    /// one, a named container port, and (if `gated`) the gate of its Service.
    async fn create_daemonset(&self, name: &str, gated: bool) {
        let annotations = json!({
            STRATEGY: "AdvancedRollingUpdate",
            MAX_UNAVAILABLE: BUDGET.to_string(),
        });
        let mut ds = serde_json::to_value(edge_daemonset(
            name,
            &self.nodes,
            annotations,
            "OnDelete",
            Shape::ToleratesAll,
            &image(name, "v1"),
        ))
        .unwrap();
        let spec = &mut ds["spec"]["template"]["spec"];
        spec["containers"][0]["ports"] = json!([{"name": "http", "containerPort": BACKEND_PORT}]);
        spec["terminationGracePeriodSeconds"] = json!(30);
        if gated {
            spec["readinessGates"] = json!([{"conditionType": format!("{GATE_PREFIX}{name}")}]);
        }
        let ds: DaemonSet = serde_json::from_value(ds).unwrap();
        Api::<DaemonSet>::namespaced(self.client.clone(), &self.ns.name)
            .create(&PostParams::default(), &ds)
            .await
            .unwrap_or_else(|e| panic!("creating DaemonSet {name}: {e}"));
    }

    async fn set_image(&self, name: &str, image: &str) {
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": image}]}}}});
        Api::<DaemonSet>::namespaced(self.client.clone(), &self.ns.name)
            .patch(name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
            .unwrap();
    }

    async fn app_pods(&self, app: &str) -> Vec<Pod> {
        self.pods()
            .list(&ListParams::default().labels(&format!("app={app}")))
            .await
            .unwrap()
            .items
    }

    /// The group serving `app`'s pods: the group where `expected` of their IPs are
    /// healthy backends in rotation.
    async fn wait_group_serving(&self, app: &str, expected: usize) -> String {
        wait_for(
            &format!("{expected} healthy backends of {app}"),
            Duration::from_secs(90),
            || async {
                let ips: BTreeSet<String> = self
                    .app_pods(app)
                    .await
                    .iter()
                    .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
                    .collect();
                let state = self.get("state").await;
                let mut groups: BTreeMap<String, usize> = BTreeMap::new();
                for g in state["clb"]["vserver_groups"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    for b in g["backends"].as_array().into_iter().flatten() {
                        let ip = b["ip"].as_str().unwrap_or_default();
                        if ips.contains(ip)
                            && b["health"].as_str() == Some("Healthy")
                            && b["weight"].as_u64() != Some(0)
                        {
                            *groups
                                .entry(g["id"].as_str().unwrap().to_string())
                                .or_default() += 1;
                        }
                    }
                }
                match groups.into_iter().find(|(_, n)| *n == expected) {
                    Some((group, _)) => Ok(group),
                    _ => Err(format!("{} pod IPs; emulator state {state}", ips.len())),
                }
            },
        )
        .await
    }
}

/// Five nodes, two cut off; both DaemonSets go from v1 to v2 with a budget of one. On the
/// three Ready nodes the gated one never has fewer than 3 - 1 healthy backends in
/// rotation; the ungated control does. Then the cut nodes come back and are upgraded,
/// and every old backend was taken out of rotation before it was removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn an_edge_daemonset_behind_a_load_balancer_keeps_its_floor_while_nodes_are_cut_off() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "ds-behind-lb").await;
    let nodes = TestNodes::create(&client, "ds-behind-lb", NODES).await;
    let emu = EmulatorProcess::start(&EmulatorConfig {
        registration_delay: Duration::from_millis(500),
        // Longer than the controller takes to see a new pod Ready: without the gate, the
        // next old pod goes before its replacement's backend is healthy.
        health_delay: Duration::from_secs(3),
        job_delay: Duration::from_millis(100),
        tick: Duration::from_millis(20),
        ..EmulatorConfig::default()
    });
    let world = World {
        client: client.clone(),
        ns,
        nodes,
        emu,
        http: reqwest::Client::new(),
    };
    let vpc = json!({"vpc_id": VPC_ID, "cidr_block": "10.0.0.0/8"});
    assert!(world.post("vpcs", vpc).await.is_success());
    let enis = give_pod_ips_enis(client.clone(), &world.ns.name, &world.emu, VPC_ID);
    let mut env = world.emu.controller_env();
    env.extend(
        [
            ("ROLLGATE_CLOUD_VPC_ID", VPC_ID),
            ("ROLLGATE_CLOUD_RATE_LIMIT", "200"),
            ("ROLLGATE_GATE_DRAIN_TIME", "2s"),
            ("ROLLGATE_HEALTH_POLL_SLOW", "3s"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let controller = ControllerProcess::start_with_env(&world.ns.name, "controller", &env);

    let apps = [("ingress", true), ("plain", false)];
    for (app, gated) in apps {
        world.create_service(app).await;
        world.create_daemonset(app, gated).await;
    }
    let all: Vec<String> = world.nodes.names.clone();
    let mut groups = BTreeMap::new();
    for (app, _) in apps {
        wait_ready_on(
            &world.pods(),
            &all,
            &image(app, "v1"),
            Others::Allowed,
            Duration::from_secs(120),
        )
        .await;
        groups.insert(app, world.wait_group_serving(app, NODES).await);
    }

    // Cut two nodes off: no heartbeat, and the load balancer cannot reach their pods.
    let (cut, ready) = all.split_at(CUT);
    for node in cut {
        world.nodes.set_heartbeat(node, false).await;
    }
    for node in cut {
        world
            .nodes
            .wait_ready(node, false, Duration::from_secs(90))
            .await;
    }
    let pods_before = world
        .pods()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let cut_ips: Vec<String> = pods_before
        .iter()
        .filter(|p| node_of(p).is_some_and(|n| cut.contains(&n)))
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .collect();
    assert_eq!(
        cut_ips.len(),
        CUT * apps.len(),
        "{}",
        describe_pods(&pods_before)
    );
    for ip in &cut_ips {
        let forced = json!({"ip": ip, "port": BACKEND_PORT, "healthy": false});
        assert!(world.post("health", forced).await.is_success(), "{ip}");
    }
    let old_ips: BTreeSet<String> = pods_before
        .iter()
        .filter(|p| p.labels().get("app").is_some_and(|a| a == "ingress"))
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .collect();
    // The starting point of the replay: what is served now, and the timeline so far. The
    // forced health is applied on the emulator's next tick, hence the wait.
    let floor = ready.len() - BUDGET;
    let (start_state, start) = wait_for(
        "the cut nodes' backends unhealthy",
        Duration::from_secs(10),
        || async {
            let state = world.get("state").await;
            let start = world.get("timeline").await["events"]
                .as_array()
                .unwrap()
                .len();
            let serving: Vec<usize> = apps
                .iter()
                .map(|(app, _)| {
                    backends_now(&state, &groups[app])
                        .values()
                        .filter(|b| b.healthy && !b.out)
                        .count()
                })
                .collect();
            if serving.iter().all(|n| *n == ready.len()) {
                Ok((state, start))
            } else {
                Err(format!("serving {serving:?}"))
            }
        },
    )
    .await;

    for (app, _) in apps {
        world.set_image(app, &image(app, "v2")).await;
    }
    for (app, _) in apps {
        wait_ready_on(
            &world.pods(),
            ready,
            &image(app, "v2"),
            Others::Allowed,
            Duration::from_secs(180),
        )
        .await;
        world.wait_group_serving(app, ready.len()).await;
    }
    // The cut nodes were neither counted nor touched: their old pods are still there.
    let cut_pods: Vec<Pod> = world
        .pods()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| node_of(p).is_some_and(|n| cut.contains(&n)))
        .collect();
    assert!(
        cut_pods
            .iter()
            .all(|p| image_of(p).ends_with(":v1") && p.metadata.deletion_timestamp.is_none()),
        "a cut node's pod was touched: {}",
        describe_pods(&cut_pods)
    );
    let timeline = world.get("timeline").await;
    let events = &timeline["events"].as_array().unwrap()[start..];
    let mut lowest = BTreeMap::new();
    for (app, _) in apps {
        let group = &groups[app];
        let (min, trace) = lowest_in_rotation(backends_now(&start_state, group), events, group);
        note(format!(
            "{app}: lowest healthy backends in rotation on the {} Ready nodes: {min} (floor {floor})",
            ready.len()
        ));
        lowest.insert(app, (min, trace));
    }
    let (gated_min, gated_trace) = &lowest["ingress"];
    assert!(
        *gated_min >= floor,
        "the gated DaemonSet's healthy backends fell to {gated_min} (floor {floor}):\n{}",
        gated_trace.join("\n")
    );
    let (plain_min, plain_trace) = &lowest["plain"];
    assert!(
        *plain_min < floor,
        "the control without the gate kept {plain_min} (floor {floor}): the check could not fail\n{}",
        plain_trace.join("\n")
    );

    // The cut nodes come back (heartbeat, reachable again) and are upgraded.
    for node in cut {
        world.nodes.set_heartbeat(node, true).await;
    }
    for ip in &cut_ips {
        let released = json!({"ip": ip, "port": BACKEND_PORT, "healthy": null});
        world.post("health", released).await;
    }
    for (app, _) in apps {
        wait_ready_on(
            &world.pods(),
            &all,
            &image(app, "v2"),
            Others::Allowed,
            Duration::from_secs(180),
        )
        .await;
        world.wait_group_serving(app, NODES).await;
    }
    // Every old pod's backend left rotation before it was removed, and none is left.
    let timeline = world.get("timeline").await;
    let events = timeline["events"].as_array().unwrap();
    let group = &groups["ingress"];
    let by_ip = events_by_ip(events, group);
    assert_eq!(old_ips.len(), NODES, "{}", describe_pods(&pods_before));
    for ip in &old_ips {
        let trail = by_ip.get(ip).cloned().unwrap_or_default();
        let removed = trail.iter().rposition(|e| e == "removed");
        let out = trail.iter().rposition(|e| e.ends_with("-> 0"));
        match (out, removed) {
            (Some(out), Some(removed)) => assert!(out < removed, "{ip}: {trail:?}"),
            _ => panic!("{ip} was never drained and removed: {trail:?}"),
        }
    }
    let pods = world.app_pods("ingress").await;
    for p in &pods {
        let gate = format!("{GATE_PREFIX}ingress");
        assert_eq!(
            pod_condition(p, &gate).as_deref(),
            Some("True"),
            "{}",
            p.name_any()
        );
    }

    controller.stop();
    enis.abort();
    world.nodes.cleanup().await;
    world.ns.cleanup().await;
}
