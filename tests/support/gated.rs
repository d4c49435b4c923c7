//! A gated Service on the emulator, for the e2e tests outside tests/gates.rs that need a
//! real gate run (`kubectl_plugin`, `monitoring`): a namespace, simulated nodes, the
//! `lb-emulator` process with the cluster's VPC, an ENI for every pod IP (as Terway
//! gives one), a `rollgate controller` pointed at the emulator, and Deployments whose
//! pods carry the Service's readiness gate.
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use lb_emulator::EmulatorConfig;
use serde_json::{json, Value};

use super::{
    describe_pods, give_pod_ips_enis, pod_condition, wait_for, ControllerProcess, EmulatorProcess,
    TestNamespace, TestNodes,
};

pub const GATE_PREFIX: &str = "service.readiness.alibabacloud.com/";
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

pub struct GatedBed {
    pub client: Client,
    pub ns: TestNamespace,
    pub nodes: TestNodes,
    pub emu: EmulatorProcess,
    pub controller: Option<ControllerProcess>,
    enis: tokio::task::JoinHandle<()>,
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
        let client = super::client().await;
        let ns = TestNamespace::new(&client, prefix).await;
        let nodes = TestNodes::create(&client, prefix, nodes).await;
        let emu = EmulatorProcess::start(emulator);
        let bed_vpc = json!({"vpc_id": VPC_ID, "cidr_block": "10.0.0.0/8"});
        emulator_post(&emu, "vpcs", &bed_vpc).await;
        let enis = give_pod_ips_enis(client.clone(), &ns.name, &emu, VPC_ID);
        let mut all = emu.controller_env();
        for (k, v) in [
            ("ROLLGATE_CLOUD_RATE_LIMIT", "200"),
            ("ROLLGATE_CLOUD_VPC_ID", VPC_ID),
            ("ROLLGATE_CLUSTER_ID", "e2e"),
            ("ROLLGATE_GATE_DRAIN_TIME", "3s"),
            ("ROLLGATE_HEALTH_POLL_SLOW", "3s"),
        ]
        .into_iter()
        .chain(env.iter().copied())
        {
            all.push((k.into(), v.into()));
        }
        let refs: Vec<(&str, &str)> = all.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let controller = ControllerProcess::start_with_env(&ns.name, "gated", &refs);
        GatedBed {
            client,
            ns,
            nodes,
            emu,
            controller: Some(controller),
            enis,
        }
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

    /// A LoadBalancer Service `name` selecting `app: name`, of `class`, with
    /// `annotations` and `ports` (Service port objects; target port `http`).
    pub async fn create_service(
        &self,
        name: &str,
        class: Option<&str>,
        annotations: Value,
        ports: Value,
    ) {
        let mut spec = json!({"type": "LoadBalancer", "selector": {"app": name}, "ports": ports});
        if let Some(class) = class {
            spec["loadBalancerClass"] = json!(class);
        }
        let svc: Service = serde_json::from_value(
            json!({"metadata": {"name": name, "annotations": annotations}, "spec": spec}),
        )
        .unwrap();
        self.services()
            .create(&PostParams::default(), &svc)
            .await
            .unwrap_or_else(|e| panic!("creating Service {name}: {e}"));
    }

    /// A Deployment `name` (`app: name`) of `replicas` whose pods carry the gate of
    /// Service `name` and a container port named `http` (8080).
    pub async fn create_deployment(&self, name: &str, replicas: i32) {
        let deployment: Deployment = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "nodeSelector": self.nodes.selector(),
                        "readinessGates": [{"conditionType": format!("{GATE_PREFIX}{name}")}],
                        "terminationGracePeriodSeconds": 5,
                        "containers": [{
                            "name": "web",
                            "image": "registry.local/web:1",
                            "ports": [{"name": "http", "containerPort": 8080}],
                        }],
                    },
                },
            },
        }))
        .unwrap();
        self.deployments()
            .create(&PostParams::default(), &deployment)
            .await
            .unwrap_or_else(|e| panic!("creating Deployment {name}: {e}"));
    }

    /// The pods of `app: name`.
    pub async fn app_pods(&self, name: &str) -> Vec<Pod> {
        self.pods()
            .list(&ListParams::default().labels(&format!("app={name}")))
            .await
            .unwrap()
            .items
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
                let pods: Vec<Pod> = self
                    .app_pods(name)
                    .await
                    .into_iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .collect();
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

    /// POSTs `body` to an emulator control endpoint (`faults`, `health`...).
    pub async fn emulator_post(&self, path: &str, body: Value) -> Value {
        emulator_post(&self.emu, path, &body).await
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

/// POSTs `body` to `/_emulator/<path>`; the answer as JSON (or text).
pub async fn emulator_post(emu: &EmulatorProcess, path: &str, body: &Value) -> Value {
    let http = alibaba_lb::http::build_http_client(Duration::from_secs(10)).unwrap();
    let answer = http
        .post(format!("{}/_emulator/{path}", emu.base_url()))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap_or_else(|e| panic!("emulator {path}: {e}"));
    let text = answer.text().await.unwrap();
    serde_json::from_str(&text).unwrap_or(Value::String(text))
}
