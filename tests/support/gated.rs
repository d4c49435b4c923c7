//! The readiness-gate e2e bed: one test's world for a gated Service on the emulator (a
//! namespace, simulated nodes, the `lb-emulator` process with the cluster's VPC, an ENI
//! for every pod IP as Terway gives one, a `rollgate controller` pointed at the
//! emulator, Deployments whose pods carry the Service's readiness gate), and the probes
//! the gate tests judge by: gate conditions, the emulator's backends, rollouts checked
//! for early flips, orphan backends.
//!
//! One bed, two sets of helper signatures: `tests/gates_*.rs` use it as [`Bed`] (a
//! Service selects an app of its own; a Deployment names its gates and its surge), the
//! other e2e tests that need a real gate run (`kubectl_plugin`, `monitoring`) and the
//! benches as [`GatedBed`] (a Service and a Deployment of one name, gated on each other).
use std::collections::{BTreeMap, BTreeSet};
use std::marker::PhantomData;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use lb_emulator::EmulatorConfig;
use serde_json::{json, Value};

use super::{
    describe_pods, give_pod_ips_enis, pod_condition, wait_for, ControllerProcess, EmulatorProcess,
    TestNamespace, TestNodes,
};

pub const GATE_PREFIX: &str = "service.readiness.alibabacloud.com/";
/// The cluster id the bed's controller runs with (`ROLLGATE_CLUSTER_ID`).
pub const CLUSTER_ID: &str = "e2e";
/// The cluster's VPC in the emulator: the pods' ENIs are there.
pub const VPC_ID: &str = "vpc-e2e";
/// The zone maps an NLB Service needs (two zones).
pub const NLB_ZONE_MAPS: (&str, &str) = (
    "service.beta.kubernetes.io/alibaba-cloud-loadbalancer-zone-maps",
    "cn-hangzhou-k:vsw-k,cn-hangzhou-j:vsw-j",
);

/// Registration and health in well under two seconds, so a rollout takes seconds.
pub fn fast_emulator() -> EmulatorConfig {
    EmulatorConfig {
        registration_delay: Duration::from_millis(300),
        health_delay: Duration::from_millis(1500),
        job_delay: Duration::from_millis(100),
        tick: Duration::from_millis(20),
        ..EmulatorConfig::default()
    }
}

/// The marker rollgate writes on a backend of `service` in `namespace` for `port`.
pub fn owner(port: u16, service: &str, namespace: &str) -> String {
    rollgate::gates::model::owner_description(port, service, namespace, CLUSTER_ID)
}

/// Terway's shared-ENI mode, as a stand-in: one `InUse` ENI per node holding the IPs
/// of that node's pods as secondary IPs, each IP added (the ENI registered again with
/// its whole list) once the pod has it, before rollgate can register the pod. Polls
/// until aborted.
pub fn give_pod_ips_shared_enis(
    client: Client,
    namespace: &str,
    emulator: &EmulatorProcess,
    vpc_id: &str,
) -> tokio::task::JoinHandle<()> {
    let pods: Api<Pod> = Api::namespaced(client, namespace);
    let url = format!("{}/_emulator/enis", emulator.base_url());
    let vpc_id = vpc_id.to_string();
    tokio::spawn(async move {
        let http = http();
        // node -> the IPs its ENI holds
        let mut held: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        loop {
            if let Ok(list) = pods.list(&ListParams::default()).await {
                for pod in list.items {
                    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
                    let (Some(node), Some(ip)) = (node, pod_ip(&pod)) else {
                        continue;
                    };
                    let ips = held.entry(node.clone()).or_default();
                    if !ips.insert(ip.clone()) {
                        continue;
                    }
                    let body = json!({
                        "network_interface_id": format!("eni-shared-{node}"),
                        "private_ips": ips,
                        "vpc_id": vpc_id,
                    });
                    let sent = http
                        .post(&url)
                        .header("content-type", "application/json")
                        .body(body.to_string())
                        .send()
                        .await;
                    if !sent.is_ok_and(|r| r.status().is_success()) {
                        // Given again on the next pass.
                        ips.remove(&ip);
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

/// The helper signatures of `tests/gates_*.rs` (see [`Bed`]).
pub enum GatesTests {}
/// The short helper signatures of the other tests (see [`GatedBed`]).
pub enum OneName {}

/// One test's world: namespace, nodes, emulator and controller. `F` only picks which
/// `new`, `create_service` and `create_deployment` it offers; everything else is shared.
pub struct GateWorld<F> {
    pub client: Client,
    pub ns: TestNamespace,
    pub nodes: TestNodes,
    pub emu: EmulatorProcess,
    pub controller: Option<ControllerProcess>,
    extra_env: Vec<(String, String)>,
    /// Gives the pods' IPs ENIs in the emulator, as Terway would.
    enis: tokio::task::JoinHandle<()>,
    helpers: PhantomData<F>,
}

/// The bed of `tests/gates_*.rs`.
pub type Bed = GateWorld<GatesTests>;
/// The bed of the other gated e2e tests and the benches.
pub type GatedBed = GateWorld<OneName>;

impl<F> GateWorld<F> {
    /// The world, with the controller started under `tag` (`ROLLGATE_*` settings for
    /// short polls and drains, then `env`).
    async fn start(
        prefix: &str,
        nodes: usize,
        emulator: &EmulatorConfig,
        env: &[(&str, &str)],
        tag: &str,
    ) -> Self {
        let client = super::client().await;
        let ns = TestNamespace::new(&client, prefix).await;
        let nodes = TestNodes::create(&client, prefix, nodes).await;
        let emu = EmulatorProcess::start(emulator);
        let vpc = json!({"vpc_id": VPC_ID, "cidr_block": "10.0.0.0/8"});
        emulator_post(&emu, "vpcs", &vpc).await;
        let enis = give_pod_ips_enis(client.clone(), &ns.name, &emu, VPC_ID);
        let mut bed = GateWorld {
            client,
            ns,
            nodes,
            emu,
            controller: None,
            extra_env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            enis,
            helpers: PhantomData,
        };
        bed.start_controller(tag);
        bed
    }

    pub fn start_controller(&mut self, tag: &str) {
        let env = self.controller_env();
        let env_refs: Vec<(&str, &str)> =
            env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        self.controller = Some(ControllerProcess::start_with_env(
            &self.ns.name,
            tag,
            &env_refs,
        ));
    }

    /// The environment of this bed's controller: the emulator for every product, the
    /// VPC, the cluster id and short drain and poll times, then the test's own.
    pub fn controller_env(&self) -> Vec<(String, String)> {
        let mut env = self.emu.controller_env();
        for (k, v) in [
            ("ROLLGATE_CLOUD_RATE_LIMIT", "200"),
            ("ROLLGATE_CLOUD_VPC_ID", VPC_ID),
            ("ROLLGATE_CLUSTER_ID", CLUSTER_ID),
            ("ROLLGATE_GATE_DRAIN_TIME", "3s"),
            ("ROLLGATE_HEALTH_POLL_SLOW", "3s"),
        ] {
            env.push((k.into(), v.into()));
        }
        env.extend(self.extra_env.iter().cloned());
        env
    }

    /// Deletes a Service and waits until it is gone, i.e. rollgate released its finalizer.
    pub async fn delete_service(&self, name: &str) {
        self.services()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
        wait_for(
            "the Service to be gone",
            Duration::from_secs(30),
            || async {
                match self.services().get_opt(name).await {
                    Ok(None) => Ok(()),
                    Ok(Some(s)) => Err(format!("finalizers {:?}", s.finalizers())),
                    Err(e) => Err(e.to_string()),
                }
            },
        )
        .await;
    }

    /// Merges `annotations` into Service `name`'s (a null value removes one), as
    /// `kubectl annotate` does.
    pub async fn annotate_service(&self, name: &str, annotations: Value) {
        let patch = json!({"metadata": {"annotations": annotations}});
        self.services()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("annotating Service {name}: {e}"));
    }

    /// The load balancer rollgate created for Service `name`, as it recorded it.
    pub async fn created_load_balancer_id(&self, name: &str) -> Option<String> {
        let svc = self.services().get(name).await.unwrap();
        svc.annotations()
            .get("rollgate.io/created-load-balancer-id")
            .cloned()
    }

    /// `kubectl scale deployment name --replicas`.
    pub async fn scale(&self, deployment: &str, replicas: i32) {
        let patch = json!({"spec": {"replicas": replicas}});
        self.deployments()
            .patch(deployment, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    pub fn services(&self) -> Api<Service> {
        Api::namespaced(self.client.clone(), &self.ns.name)
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns.name)
    }

    pub fn deployments(&self) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), &self.ns.name)
    }

    /// A LoadBalancer Service `name` selecting `app: app`, of `class`, with
    /// `annotations` and `ports` (Service port objects).
    pub async fn create_service_with_ports(
        &self,
        name: &str,
        app: &str,
        class: Option<&str>,
        annotations: Value,
        ports: Value,
    ) {
        let mut spec = json!({"type": "LoadBalancer", "selector": {"app": app}, "ports": ports});
        if let Some(class) = class {
            spec["loadBalancerClass"] = json!(class);
        }
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": annotations},
            "spec": spec,
        }))
        .unwrap();
        self.services()
            .create(&PostParams::default(), &svc)
            .await
            .unwrap_or_else(|e| panic!("creating Service {name}: {e}"));
    }

    /// A Deployment as users write it: the gates of the Services `gates`,
    /// maxSurge/maxUnavailable, a named container port, `pod_annotations` on the
    /// template.
    pub async fn create_annotated_deployment(
        &self,
        name: &str,
        app: &str,
        replicas: i32,
        gates: &[&str],
        surge_unavailable: (i32, i32),
        pod_annotations: Value,
    ) {
        let gates: Vec<String> = gates.iter().map(|s| format!("{GATE_PREFIX}{s}")).collect();
        let container = json!({
            "name": "nginx",
            "image": "registry.local/nginx:1.14",
            "ports": [{"name": "http", "containerPort": 8080}],
        });
        let mut deployment = gated_deployment(
            name,
            app,
            &self.nodes,
            replicas,
            &gates,
            surge_unavailable,
            container,
        );
        let pod = &mut deployment["spec"]["template"];
        pod["metadata"]["annotations"] = pod_annotations;
        pod["spec"]["terminationGracePeriodSeconds"] = json!(30);
        let deployment: Deployment = serde_json::from_value(deployment).unwrap();
        self.deployments()
            .create(&PostParams::default(), &deployment)
            .await
            .unwrap_or_else(|e| panic!("creating Deployment {name}: {e}"));
    }

    pub async fn wait_external_ip(&self, name: &str) -> String {
        wait_for(
            &format!("EXTERNAL-IP of Service {name}"),
            Duration::from_secs(60),
            || async {
                let svc = self.services().get(name).await.map_err(|e| e.to_string())?;
                svc.status
                    .and_then(|s| s.load_balancer)
                    .and_then(|lb| lb.ingress)
                    .and_then(|i| i.into_iter().next())
                    .and_then(|i| i.ip.or(i.hostname))
                    .ok_or_else(|| "no ingress yet".to_string())
            },
        )
        .await
    }

    /// The pods of `app: app`.
    pub async fn app_pods(&self, app: &str) -> Vec<Pod> {
        self.pods()
            .list(&ListParams::default().labels(&format!("app={app}")))
            .await
            .unwrap()
            .items
    }

    /// The pods of `app: app` that are not being deleted.
    pub async fn live_pods(&self, app: &str) -> Vec<Pod> {
        let mut pods = self.app_pods(app).await;
        pods.retain(|p| p.metadata.deletion_timestamp.is_none());
        pods
    }

    /// Waits until `count` pods of `name` are there, none deleting, each with its gate
    /// status `want` (`True`, `False`); returns them.
    pub async fn wait_gates(
        &self,
        name: &str,
        count: usize,
        want: &str,
        timeout: Duration,
    ) -> Vec<Pod> {
        let gate = format!("{GATE_PREFIX}{name}");
        wait_for(
            &format!("{count} pods of {name} with gate {want}"),
            timeout,
            || async {
                let pods = self.live_pods(name).await;
                let ok = pods.len() == count
                    && pods
                        .iter()
                        .all(|p| pod_condition(p, &gate).as_deref() == Some(want));
                if ok {
                    Ok(pods)
                } else {
                    Err(describe_pods(&pods))
                }
            },
        )
        .await
    }

    pub async fn metrics(&self) -> String {
        self.controller.as_ref().unwrap().metrics().await
    }

    /// GETs an emulator control endpoint (`state`, `timeline`...) as JSON.
    pub async fn emulator(&self, path: &str) -> Value {
        let url = format!("{}/_emulator/{path}", self.emu.base_url());
        let body = http().get(&url).send().await.unwrap().text().await.unwrap();
        serde_json::from_str(&body).unwrap()
    }

    /// POSTs `body` to an emulator control endpoint (`faults`, `health`...).
    pub async fn emulator_post(&self, path: &str, body: Value) -> Value {
        emulator_post(&self.emu, path, &body).await
    }

    /// Every backend in every group, as (group id, ip, port, weight, description, health).
    pub async fn backends(&self) -> Vec<EmuBackend> {
        let state = self.emulator("state").await;
        let mut out = vec![];
        for (groups, product) in [
            (&state["clb"]["vserver_groups"], "clb"),
            (&state["nlb"]["server_groups"], "nlb"),
        ] {
            for g in groups.as_array().into_iter().flatten() {
                for b in g["backends"].as_array().into_iter().flatten() {
                    out.push(EmuBackend {
                        product,
                        server_id: b["server_id"].as_str().unwrap_or_default().into(),
                        kind: b["type"].as_str().unwrap_or_default().into(),
                        group: g["id"].as_str().unwrap_or_default().into(),
                        ip: b["ip"].as_str().unwrap_or_default().into(),
                        port: b["port"].as_u64().unwrap_or_default() as u16,
                        weight: b["weight"].as_u64().unwrap_or_default(),
                        description: b["description"].as_str().unwrap_or_default().into(),
                        registered: b["registered"].as_bool().unwrap_or_default(),
                        healthy: b["health"].as_str() == Some("Healthy"),
                    });
                }
            }
        }
        out
    }

    pub async fn cleanup(mut self) {
        if let Some(c) = self.controller.take() {
            c.crash();
        }
        self.enis.abort();
        let _ = self
            .deployments()
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await;
        self.ns.cleanup().await;
        self.nodes.cleanup().await;
        self.emu.stop();
    }
}

impl Bed {
    pub async fn new(
        prefix: &str,
        nodes: usize,
        emulator: EmulatorConfig,
        env: &[(&str, &str)],
    ) -> Self {
        Self::start(prefix, nodes, &emulator, env, "controller").await
    }

    /// Like [`Bed::new`], with Terway's shared-ENI mode: the pods of a node are
    /// secondary IPs of one ENI of that node (not an ENI each).
    pub async fn new_on_shared_enis(
        prefix: &str,
        nodes: usize,
        emulator: EmulatorConfig,
        env: &[(&str, &str)],
    ) -> Self {
        let mut bed = Self::start(prefix, nodes, &emulator, env, "controller").await;
        // No pod exists yet: the per-pod stand-in has given no ENI.
        bed.enis.abort();
        bed.enis = give_pod_ips_shared_enis(bed.client.clone(), &bed.ns.name, &bed.emu, VPC_ID);
        bed
    }

    /// A LoadBalancer Service `name` selecting `app: app`, of `class`, with
    /// `annotations`, on port 80 (target port `http`).
    pub async fn create_service(
        &self,
        name: &str,
        app: &str,
        class: Option<&str>,
        annotations: Value,
    ) {
        let ports = json!([{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}]);
        self.create_service_with_ports(name, app, class, annotations, ports)
            .await
    }

    /// [`GateWorld::create_annotated_deployment`] without pod annotations.
    pub async fn create_deployment(
        &self,
        name: &str,
        app: &str,
        replicas: i32,
        gates: &[&str],
        max_surge: i32,
        max_unavailable: i32,
    ) {
        self.create_annotated_deployment(
            name,
            app,
            replicas,
            gates,
            (max_surge, max_unavailable),
            json!({}),
        )
        .await
    }

    /// Service `name` (of `class`, with `annotations`) and a Deployment `name` of
    /// `replicas` gated on it (maxSurge 1, maxUnavailable 0), rolled out: waits until
    /// it is, checking that no gate flipped early; returns the pods seen pending.
    pub async fn create_ready_app(
        &self,
        name: &str,
        class: Option<&str>,
        annotations: Value,
        replicas: i32,
    ) -> BTreeSet<String> {
        self.create_service(name, name, class, annotations).await;
        self.create_deployment(name, name, replicas, &[name], 1, 0)
            .await;
        wait_rollout(self, name, name, name, Duration::from_secs(90)).await
    }

    /// A CLB Service `web` with `clb` annotations and an NLB Service `api` with `nlb`
    /// annotations (and the zone maps it needs) over the same app, a Deployment `web`
    /// of 2 gated on both; waits until it rolled out.
    pub async fn create_clb_and_nlb_app(&self, clb: Value, mut nlb: Value) {
        let (zone_key, zone_maps) = NLB_ZONE_MAPS;
        nlb[zone_key] = json!(zone_maps);
        self.create_service("web", "web", None, clb).await;
        self.create_service("api", "web", Some("alibabacloud.com/nlb"), nlb)
            .await;
        self.create_deployment("web", "web", 2, &["web", "api"], 1, 0)
            .await;
        wait_rollout(self, "web", "web", "web", Duration::from_secs(90)).await;
    }

    /// Service `name` (of `class`, with `annotations`) and a Deployment `name` of
    /// `replicas` gated on it, whose gates rollgate must hold: waits until each of the
    /// `replicas` pods has its gate False with `reason`; returns the pods with their
    /// gate messages.
    pub async fn create_held_app(
        &self,
        name: &str,
        class: Option<&str>,
        annotations: Value,
        replicas: usize,
        reason: &str,
    ) -> Vec<(Pod, String)> {
        self.create_service(name, name, class, annotations).await;
        let count = i32::try_from(replicas).unwrap();
        self.create_deployment(name, name, count, &[name], 1, 0)
            .await;
        wait_for(
            &format!("{replicas} gates of {name} False, saying {reason}"),
            Duration::from_secs(60),
            || async {
                let pods = self.live_pods(name).await;
                let held: Vec<(Pod, String)> = pods
                    .iter()
                    .filter_map(|p| match gate_status(p, name) {
                        Some((s, r, m)) if s == "False" && r == reason => Some((p.clone(), m)),
                        _ => None,
                    })
                    .collect();
                if pods.len() == replicas && held.len() == replicas {
                    Ok(held)
                } else {
                    Err(describe_gates(&pods, name))
                }
            },
        )
        .await
    }
}

impl GatedBed {
    /// The world, with the controller started (`ROLLGATE_*` settings for short polls
    /// and drains, plus `env`).
    pub async fn new(
        prefix: &str,
        nodes: usize,
        emulator: &EmulatorConfig,
        env: &[(&str, &str)],
    ) -> Self {
        Self::start(prefix, nodes, emulator, env, "gated").await
    }

    /// A LoadBalancer Service `name` selecting `app: name`, of `class`, with
    /// `annotations` and `ports` (Service port objects; target port `http`).
    pub async fn create_service(
        &self,
        name: &str,
        class: Option<&str>,
        annotations: Value,
        ports: Value,
    ) {
        self.create_service_with_ports(name, name, class, annotations, ports)
            .await
    }

    /// [`GatedBed::create_service`] of an NLB (class `alibabacloud.com/nlb`, with the
    /// zone maps it needs).
    pub async fn create_nlb_service(&self, name: &str, ports: Value) {
        let (zone_key, zone_maps) = NLB_ZONE_MAPS;
        let annotations = json!({ zone_key: zone_maps });
        self.create_service(name, Some("alibabacloud.com/nlb"), annotations, ports)
            .await
    }

    /// A Deployment `name` (`app: name`) of `replicas` whose pods carry the gate of
    /// Service `name` and a container port named `http` (8080); maxSurge 1,
    /// maxUnavailable 0.
    pub async fn create_deployment(&self, name: &str, replicas: i32) {
        self.create_annotated_deployment(name, name, replicas, &[name], (1, 0), json!({}))
            .await
    }
}

/// A Deployment `name` on `nodes` whose pods (`app: app`) carry the readiness gates
/// `conditions` (condition types), `replicas` of them rolled `(maxSurge,
/// maxUnavailable)` at a time, with one `container`. JSON, for a caller to add to.
pub fn gated_deployment(
    name: &str,
    app: &str,
    nodes: &TestNodes,
    replicas: i32,
    conditions: &[String],
    (max_surge, max_unavailable): (i32, i32),
    container: Value,
) -> Value {
    let gates: Vec<Value> = conditions
        .iter()
        .map(|c| json!({"conditionType": c}))
        .collect();
    json!({
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": app}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": max_surge, "maxUnavailable": max_unavailable}},
            "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {
                    "nodeSelector": nodes.selector(),
                    "readinessGates": gates,
                    "containers": [container],
                },
            },
        },
    })
}

/// A load balancer as a user makes it by hand: `name`, Internet, in `vpc_id`, no tags,
/// zones or listeners (`lb_emulator::testing::spec` is one with a listener and zones).
pub fn users_load_balancer(name: &str, vpc_id: Option<&str>) -> alibaba_lb::LoadBalancerSpec {
    alibaba_lb::LoadBalancerSpec {
        clb_instance: Default::default(),
        tags: Default::default(),
        name: name.into(),
        existing_id: None,
        address_type: alibaba_lb::AddressType::Internet,
        vpc_id: vpc_id.map(str::to_string),
        zones: vec![],
        listeners: vec![],
    }
}

/// A TCP listener a user adds by hand on `port`, forwarding to the group named `group`.
pub fn users_listener(port: u16, group: &str) -> alibaba_lb::ListenerSpec {
    alibaba_lb::ListenerSpec {
        port,
        protocol: alibaba_lb::ListenerProtocol::Tcp,
        server_group_name: group.into(),
        former_group_name: None,
        settings: Default::default(),
    }
}

/// The cloud client's own HTTP builder (it installs the TLS crypto provider).
pub fn http() -> reqwest::Client {
    alibaba_lb::http::build_http_client(Duration::from_secs(10)).unwrap()
}

/// POSTs `body` to `/_emulator/<path>`; the answer as JSON (or text).
pub async fn emulator_post(emu: &EmulatorProcess, path: &str, body: &Value) -> Value {
    let answer = http()
        .post(format!("{}/_emulator/{path}", emu.base_url()))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap_or_else(|e| panic!("emulator {path}: {e}"));
    let text = answer.text().await.unwrap();
    serde_json::from_str(&text).unwrap_or(Value::String(text))
}

/// One backend of a group in the emulator's state.
#[derive(Debug, Clone)]
pub struct EmuBackend {
    pub product: &'static str,
    pub server_id: String,
    pub kind: String,
    pub group: String,
    pub ip: String,
    pub port: u16,
    pub weight: u64,
    pub description: String,
    pub registered: bool,
    pub healthy: bool,
}

/// The gate of `service` on `pod`: (status, reason, message).
pub fn gate_status(pod: &Pod, service: &str) -> Option<(String, String, String)> {
    super::conditions::condition_of(pod, &format!("{GATE_PREFIX}{service}"))
}

pub fn pod_ip(pod: &Pod) -> Option<String> {
    pod.status.as_ref()?.pod_ip.clone()
}

/// No gate of `service` is True unless the emulator shows the pod's backend registered
/// and healthy. The emulator is read after the pods, and health only improves in these
/// scenarios, so a True gate whose backend is not healthy yet is a real early flip.
async fn check_no_early_flip<F>(
    bed: &GateWorld<F>,
    app: &str,
    service: &str,
    seen_pending: &mut BTreeSet<String>,
) {
    let pods = bed.app_pods(app).await;
    let backends = bed.backends().await;
    for pod in &pods {
        let Some((status, reason, _)) = gate_status(pod, service) else {
            continue;
        };
        if status != "True" {
            seen_pending.insert(pod.name_any());
            continue;
        }
        if reason == "BackendLostAfterReady" || pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let ip = pod_ip(pod).unwrap();
        let ok = backends
            .iter()
            .any(|b| b.ip == ip && b.port == 8080 && b.registered && b.healthy);
        // A pod deleted between the two reads may have lost its backend in between
        // (taken out at once when no drain holds it): that is no early flip.
        if !ok
            && !bed
                .live_pods(app)
                .await
                .iter()
                .any(|p| p.uid() == pod.uid())
        {
            continue;
        }
        assert!(
            ok,
            "gate of {} is True ({reason}) but the emulator has no healthy backend {ip}:8080: {backends:?}",
            pod.name_any()
        );
    }
}

/// Waits until Deployment `name` has rolled out, checking at every poll that no gate
/// of `service` on the pods of `app` flipped early; returns the pods seen pending.
pub async fn wait_rollout<F>(
    bed: &GateWorld<F>,
    name: &str,
    app: &str,
    service: &str,
    timeout: Duration,
) -> BTreeSet<String> {
    let mut seen_pending = BTreeSet::new();
    let deadline = std::time::Instant::now() + timeout;
    loop {
        check_no_early_flip(bed, app, service, &mut seen_pending).await;
        let d = bed.deployments().get(name).await.unwrap();
        let spec_replicas = d.spec.replicas.unwrap_or(1);
        let status = d.status.clone().unwrap_or_default();
        let done = status.observed_generation == d.metadata.generation
            && status.updated_replicas == Some(spec_replicas)
            && status.available_replicas == Some(spec_replicas)
            && status.replicas == Some(spec_replicas);
        if done {
            return seen_pending;
        }
        if std::time::Instant::now() > deadline {
            let pods = bed.app_pods(app).await;
            panic!(
                "rollout of {name} did not complete: {status:?}\npods: {}\nbackends: {:?}",
                describe_gates(&pods, service),
                bed.backends().await
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub fn describe_gates(pods: &[Pod], service: &str) -> String {
    pods.iter()
        .map(|p| {
            format!(
                "{} ip={:?} deleting={} gate={:?}",
                p.name_any(),
                pod_ip(p),
                p.metadata.deletion_timestamp.is_some(),
                gate_status(p, service)
            )
        })
        .collect::<Vec<_>>()
        .join("\n  ")
}

/// The capacity proof through a rollout: once the `replicas` backends of Service `app`
/// (port 80, its Deployment of the same name) are all healthy, `kubectl rollout
/// restart`, wait until it rolled out and no backend is left over, and return the
/// lowest count of healthy backends in rotation during it, with its trace.
pub async fn lowest_healthy_through_a_restart<F>(
    bed: &GateWorld<F>,
    app: &str,
    replicas: usize,
) -> (usize, Vec<String>) {
    let owner = owner(80, app, &bed.ns.name);
    wait_for(
        &format!("all {replicas} backends healthy"),
        Duration::from_secs(30),
        || async {
            let healthy = bed
                .backends()
                .await
                .into_iter()
                .filter(|b| b.description == owner && b.healthy && b.weight > 0)
                .count();
            if healthy == replicas {
                Ok(())
            } else {
                Err(format!("{healthy} healthy"))
            }
        },
    )
    .await;
    let group = bed
        .backends()
        .await
        .into_iter()
        .find(|b| b.description == owner)
        .unwrap()
        .group;
    let start = bed.emulator("timeline").await["events"]
        .as_array()
        .unwrap()
        .len();
    restart(bed, app).await;
    wait_rollout(bed, app, app, app, Duration::from_secs(180)).await;
    wait_no_orphans(bed, app, app).await;
    let timeline = bed.emulator("timeline").await;
    let events = &timeline["events"].as_array().unwrap()[start..];
    min_healthy(events, &group, replicas)
}

/// `kubectl rollout restart` of Deployment `name`.
pub async fn restart<F>(bed: &GateWorld<F>, name: &str) {
    let patch = json!({"spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": format!("{:?}", std::time::SystemTime::now())}}}}});
    bed.deployments()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// Owned backends must be exactly the live pods' IPs once things settle.
pub async fn wait_no_orphans<F>(bed: &GateWorld<F>, app: &str, service: &str) {
    let owner = owner(80, service, &bed.ns.name);
    wait_for(
        "owned backends = live pods",
        Duration::from_secs(30),
        || async {
            let pods = bed.app_pods(app).await;
            let live: BTreeSet<String> = pods
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter_map(pod_ip)
                .collect();
            let owned: BTreeSet<String> = bed
                .backends()
                .await
                .into_iter()
                .filter(|b| b.description == owner)
                .map(|b| b.ip)
                .collect();
            if owned == live {
                Ok(())
            } else {
                Err(format!("owned {owned:?} live {live:?}"))
            }
        },
    )
    .await;
}

/// Waits until the pods of `app` are there, none deleting, and each one's gate of
/// `service` satisfies `want(status, reason)`; returns them.
pub async fn wait_gate<F>(
    bed: &GateWorld<F>,
    app: &str,
    service: &str,
    what: &str,
    want: impl Fn(&str, &str) -> bool,
) -> Vec<Pod> {
    wait_for(what, Duration::from_secs(60), || async {
        let pods = bed.live_pods(app).await;
        if pods.is_empty() {
            return Err("no pods".into());
        }
        let all = pods
            .iter()
            .all(|p| gate_status(p, service).is_some_and(|(s, r, _)| want(&s, &r)));
        if all {
            Ok(pods)
        } else {
            Err(describe_gates(&pods, service))
        }
    })
    .await
}

/// Waits until `read` gives `want`; a timeout shows the last value read.
pub async fn wait_for_value<T, Fut>(what: &str, timeout: Duration, want: T, read: impl Fn() -> Fut)
where
    T: PartialEq + std::fmt::Debug,
    Fut: std::future::Future<Output = T>,
{
    wait_for(what, timeout, || async {
        let got = read().await;
        if got == want {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    })
    .await
}

/// Annotations under the Alibaba prefix, from (suffix, value) pairs.
pub fn lb_annotations(pairs: &[(&str, &str)]) -> Value {
    let map: serde_json::Map<String, Value> = pairs
        .iter()
        .map(|(k, v)| {
            (
                format!("service.beta.kubernetes.io/alibaba-cloud-loadbalancer-{k}"),
                json!(v),
            )
        })
        .collect();
    Value::Object(map)
}

/// Replays the timeline of one group from `start` healthy backends: a backend counts
/// while it is healthy, in rotation (weight > 0) and not removed.
pub fn min_healthy(events: &[Value], group: &str, start: usize) -> (usize, Vec<String>) {
    #[derive(Default, Clone, Copy)]
    struct B {
        healthy: bool,
        drained: bool,
    }
    let mut backends: BTreeMap<String, B> = BTreeMap::new();
    let mut initial_unknown = start;
    let mut min = start;
    let mut trace = vec![];
    for e in events.iter().filter(|e| e["server_group_id"] == group) {
        let key = format!("{}:{}", e["ip"].as_str().unwrap(), e["port"]);
        let known = backends.contains_key(&key);
        let b = backends.entry(key).or_insert_with(|| {
            // A backend first seen in an event other than `added` was there (healthy) before.
            let healthy = e["event"] != "added";
            if healthy && initial_unknown > 0 {
                initial_unknown -= 1;
            }
            B {
                healthy,
                drained: false,
            }
        });
        let _ = known;
        match e["event"].as_str().unwrap() {
            // A pod IP can come back for a new pod: a new backend starts unhealthy.
            "added" => *b = B::default(),
            "healthy" => b.healthy = true,
            "unhealthy" => b.healthy = false,
            "removed" => {
                b.healthy = false;
                b.drained = true;
            }
            // detail: "<old> -> <new>"
            "weight-changed" => {
                b.drained = e["detail"].as_str().unwrap_or_default().ends_with("-> 0")
            }
            _ => {}
        }
        let now = initial_unknown
            + backends
                .values()
                .filter(|b| b.healthy && !b.drained)
                .count();
        min = min.min(now);
        trace.push(format!(
            "{} {} {}:{} {} -> {now}",
            e["at"].as_str().unwrap_or_default(),
            e["event"].as_str().unwrap_or_default(),
            e["ip"].as_str().unwrap_or_default(),
            e["port"],
            e["detail"].as_str().unwrap_or_default()
        ));
    }
    (min, trace)
}

/// The ids of the emulator's load balancers of `product` (`clb` or `nlb`).
pub async fn load_balancer_ids(bed: &Bed, product: &str) -> Vec<String> {
    let state = bed.emulator("state").await;
    state[product]["load_balancers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["id"].as_str().map(str::to_string))
        .collect()
}

/// A CLB Service `bad` with `annotations` rollgate refuses before any cloud call, and
/// a Deployment of one pod gated on it: waits for the gate False, saying
/// InvalidLoadBalancerAnnotation; returns its message.
pub async fn refused_annotation(bed: &Bed, annotations: Value) -> String {
    let reason = "InvalidLoadBalancerAnnotation";
    let mut pods = bed
        .create_held_app("bad", None, annotations, 1, reason)
        .await;
    pods.remove(0).1
}
