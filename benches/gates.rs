//! The readiness-gate controller at 500 gated pods pending at once (issue 9), on the
//! local control plane, against the CLB emulator (the `lb-emulator` binary, simulated
//! health: registered `REGISTRATION_MS` after the add, healthy `HEALTH_MS` after that).
//!
//! "Pending at once": the Service and the gated Deployment are created first and every
//! pod's containers are ready (its gate alone holds it) before the controller starts,
//! as after a controller upgrade or when a Service is added in front of a running
//! Deployment. Scheduling and the simulated kubelets spread pod starts over a minute or
//! more on 2 cores, so starting the controller first would measure their pace instead.
//!
//! Printed beside each target:
//! - from healthy in the load balancer (the emulator's `healthy` event) to the gate seen
//!   True by a watch: p50 <= 1 s, p99 <= 2 s;
//! - mutating cloud calls <= ceil(pods / 20) + 5 for the one server group;
//! - health polls per second (`DescribeHealthStatus`): they scale with load balancers
//!   (one here), not with pods;
//! - the controller's peak RSS (VmHWM) during the run.
//!
//! Environment: `ROLLGATE_BENCH_GATES_PODS` (500), `..._NODES` (10),
//! `..._REGISTRATION_MS` (500), `..._HEALTH_MS` (2000), `ROLLGATE_TEST_KUBECONFIG`.
//! Results also go to `target/bench/results.json` (`gates.*`).
#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::{BTreeMap, HashMap};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::PostParams;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, ResourceExt};
use lb_emulator::EmulatorConfig;
use serde_json::{json, Value};
use support::measure::{cpu_seconds, peak_rss_kib, percentile};
use support::*;

const GATE: &str = "service.readiness.alibabacloud.com/bench-svc";
const CLB_BATCH: usize = 20;

struct Params {
    pods: usize,
    nodes: usize,
    registration: Duration,
    health: Duration,
}

impl Params {
    fn from_env() -> Result<Self, String> {
        Ok(Params {
            pods: env_or("ROLLGATE_BENCH_GATES_PODS", 500usize)?,
            nodes: env_or("ROLLGATE_BENCH_GATES_NODES", 10usize)?.max(1),
            registration: Duration::from_millis(env_or(
                "ROLLGATE_BENCH_GATES_REGISTRATION_MS",
                500u64,
            )?),
            health: Duration::from_millis(env_or("ROLLGATE_BENCH_GATES_HEALTH_MS", 2000u64)?),
        })
    }
}

fn main() -> ExitCode {
    bench_main("gates", Params::from_env(), run)
}

/// The API server of the local control plane, from its pid file (`hack/cluster-up.sh`).
fn api_server_pid() -> Option<u32> {
    let dir = std::env::var("CLUSTER_DIR").ok()?;
    std::fs::read_to_string(format!("{dir}/pids/kube-apiserver.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn seconds_since_epoch(rfc3339: &str) -> Option<f64> {
    let t: k8s_openapi::jiff::Timestamp = rfc3339.parse().ok()?;
    Some(t.as_millisecond() as f64 / 1000.0)
}

fn now_epoch() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

async fn run(p: Params) -> Result<String, String> {
    let client = client().await;
    let ns = TestNamespace::new(&client, "bench-gates").await;
    let nodes = TestNodes::create(&client, "bench-gates", p.nodes).await;
    let emu = EmulatorProcess::start(&EmulatorConfig {
        registration_delay: p.registration,
        health_delay: p.health,
        tick: Duration::from_millis(20),
        // A large account's quotas: 500 pods on one Service pass the published 400
        // servers per NLB server group (raise `nlb_quota_servergroup_noeci_servers_num`
        // in Quota Center for such a Service).
        account_quotas: lb_emulator::AccountQuotas::all(100_000),
        ..EmulatorConfig::default()
    });
    let endpoint = emu.endpoint();
    // The pods' IPs get ENIs in the emulator's default VPC, as Terway would.
    let enis = give_pod_ips_enis(client.clone(), &ns.name, &emu, "vpc-emulator");
    let http = alibaba_lb::http::build_http_client(Duration::from_secs(10)).unwrap();
    let emulator = |path: &'static str| {
        let http = http.clone();
        let url = format!("{}/_emulator/{path}", emu.base_url());
        async move {
            let text = http
                .get(&url)
                .send()
                .await
                .map_err(|e| e.to_string())?
                .text()
                .await
                .map_err(|e| e.to_string())?;
            serde_json::from_str::<Value>(&text).map_err(|e| e.to_string())
        }
    };

    let services: Api<Service> = Api::namespaced(client.clone(), &ns.name);
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "bench-svc"},
        "spec": {"type": "LoadBalancer", "selector": {"app": "bench"},
                 "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}]},
    }))
    .unwrap();
    services
        .create(&PostParams::default(), &svc)
        .await
        .map_err(|e| e.to_string())?;

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "bench"},
        "spec": {
            "replicas": p.pods,
            "selector": {"matchLabels": {"app": "bench"}},
            "template": {
                "metadata": {"labels": {"app": "bench"}},
                "spec": {
                    "nodeSelector": nodes.selector(),
                    "readinessGates": [{"conditionType": GATE}],
                    "containers": [{"name": "app", "image": "registry.local/app:1", "ports": [{"containerPort": 8080}]}],
                },
            },
        },
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .map_err(|e| e.to_string())?;
    let pods_ready_started = Instant::now();
    wait_for(
        "every gated pod's containers ready",
        Duration::from_secs(600),
        || async {
            let list = Api::<Pod>::namespaced(client.clone(), &ns.name)
                .list(&Default::default())
                .await
                .map_err(|e| e.to_string())?;
            let ready = list
                .items
                .iter()
                .filter(|pod| {
                    pod.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| {
                            cs.iter()
                                .any(|c| c.type_ == "ContainersReady" && c.status == "True")
                        })
                })
                .count();
            (ready == p.pods)
                .then_some(())
                .ok_or_else(|| format!("{ready} of {} pods have their containers ready", p.pods))
        },
    )
    .await;
    let pods_ready_s = pods_ready_started.elapsed().as_secs_f64();

    // A watch records when each gate is first seen True (wall clock, as the emulator's).
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, String, f64)>();
    let watch = tokio::spawn({
        let pods_api = pods_api.clone();
        async move {
            let stream = watcher(pods_api, watcher::Config::default()).applied_objects();
            let mut stream = std::pin::pin!(stream);
            while let Some(Ok(pod)) = stream.next().await {
                let is_true = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == GATE && c.status == "True"));
                if is_true {
                    let ip = pod
                        .status
                        .as_ref()
                        .and_then(|s| s.pod_ip.clone())
                        .unwrap_or_default();
                    let _ = tx.send((pod.name_any(), ip, now_epoch()));
                }
            }
        }
    });

    let before = emulator("state").await?;
    let api_server = api_server_pid();
    let api_server_cpu_before = api_server.and_then(|pid| cpu_seconds(pid).ok());
    let started = Instant::now();
    let controller = ControllerProcess::start_with_env(
        &ns.name,
        "bench-gates",
        &[
            ("ALIBABA_CLOUD_REGION_ID", "cn-hangzhou"),
            ("ALIBABA_CLOUD_SLB_ENDPOINT", &endpoint),
            ("ALIBABA_CLOUD_NLB_ENDPOINT", &endpoint),
            ("ALIBABA_CLOUD_ECS_ENDPOINT", &endpoint),
            ("ALIBABA_CLOUD_VPC_ENDPOINT", &endpoint),
            ("ROLLGATE_CLOUD_VPC_ID", "vpc-emulator"),
            ("ROLLGATE_CLOUD_SCHEME", "http"),
            ("ALIBABA_CLOUD_ACCESS_KEY_ID", "emulator-access-key-id"),
            (
                "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
                "emulator-access-key-secret",
            ),
            ("ALIBABA_CLOUD_ECS_METADATA_DISABLED", "true"),
            ("ROLLGATE_CLUSTER_ID", "bench"),
            ("ROLLGATE_LOG", "info"),
        ],
    );
    wait_for("EXTERNAL-IP", Duration::from_secs(60), || async {
        let s = services.get("bench-svc").await.map_err(|e| e.to_string())?;
        s.status
            .and_then(|s| s.load_balancer)
            .and_then(|l| l.ingress)
            .filter(|i| !i.is_empty())
            .map(|_| ())
            .ok_or_else(|| "no ingress".to_string())
    })
    .await;

    let mut flipped: HashMap<String, (String, f64)> = HashMap::new();
    let mut peak_kib = 0u64;
    let deadline = Instant::now() + Duration::from_secs(600);
    while flipped.len() < p.pods {
        if Instant::now() > deadline {
            return Err(format!(
                "only {} of {} gates True after 10 min",
                flipped.len(),
                p.pods
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        while let Ok((name, ip, at)) = rx.try_recv() {
            flipped.entry(name).or_insert((ip, at));
        }
        peak_kib = peak_kib.max(peak_rss_kib(controller.pid()).unwrap_or(0));
    }
    let elapsed = started.elapsed();
    let controller_cpu = cpu_seconds(controller.pid()).ok();
    let api_server_cpu = api_server
        .and_then(|pid| cpu_seconds(pid).ok())
        .zip(api_server_cpu_before)
        .map(|(after, before)| after - before);
    watch.abort();
    peak_kib = peak_kib.max(peak_rss_kib(controller.pid()).unwrap_or(0));

    let timeline = emulator("timeline").await?;
    let mut healthy_at: BTreeMap<String, f64> = BTreeMap::new();
    for e in timeline["events"].as_array().into_iter().flatten() {
        if e["event"] == "healthy" {
            if let (Some(ip), Some(at)) = (
                e["ip"].as_str(),
                e["at"].as_str().and_then(seconds_since_epoch),
            ) {
                healthy_at.entry(ip.to_string()).or_insert(at);
            }
        }
    }
    let mut latencies: Vec<f64> = flipped
        .values()
        .filter_map(|(ip, at)| healthy_at.get(ip).map(|h| (at - h).max(0.0)))
        .collect();
    latencies.sort_by(|a, b| a.partial_cmp(b).unwrap());
    // No flip seen: no figure (NaN, `null` in results.json).
    let flip_percentile = |p| percentile(&latencies, p).unwrap_or(f64::NAN);
    let (p50, p99) = (flip_percentile(50.0), flip_percentile(99.0));
    // How fast the cluster took the gate writes: the first to the last gate seen True.
    // Every write is a pod status patch that the API server, kwok (Ready follows the
    // gates) and the endpoint controllers all act on; on 2 cores this rate, not the
    // controller, bounds how soon the last of 500 simultaneous flips can land.
    let true_times: Vec<f64> = flipped.values().map(|(_, at)| *at).collect();
    let first_true = true_times.iter().copied().fold(f64::INFINITY, f64::min);
    let last_true = true_times.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let healthy_times: Vec<f64> = healthy_at.values().copied().collect();
    let first_healthy = healthy_times.iter().copied().fold(f64::INFINITY, f64::min);
    let last_healthy = healthy_times
        .iter()
        .copied()
        .fold(f64::NEG_INFINITY, f64::max);
    let writes_per_s = true_times.len() as f64 / (last_true - first_true).max(0.001);
    let floor = write_rate_floor(&healthy_times, writes_per_s);
    let (floor_p50, floor_p99) = (
        percentile(&floor, 50.0).unwrap_or(f64::NAN),
        percentile(&floor, 99.0).unwrap_or(f64::NAN),
    );

    let after = emulator("state").await?;
    let count =
        |state: &Value, action: &str| state["stats"]["per_action"][action].as_u64().unwrap_or(0);
    let mutating: u64 = [
        "AddVServerGroupBackendServers",
        "RemoveVServerGroupBackendServers",
        "SetVServerGroupAttribute",
    ]
    .iter()
    .map(|a| count(&after, a) - count(&before, a))
    .sum();
    let mutating_target = p.pods.div_ceil(CLB_BATCH) as u64 + 5;
    let polls = count(&after, "DescribeHealthStatus") - count(&before, "DescribeHealthStatus");
    let polls_per_s = polls as f64 / elapsed.as_secs_f64();
    let pass = |ok: bool| if ok { "pass" } else { "MISS" };

    let mut out = String::new();
    out.push_str(&format!(
        "gates: {} gated pods pending at once (containers ready {pods_ready_s:.1} s after the Deployment was created, then the controller started), 1 CLB, registration {} ms, health {} ms; all gates True {:.1} s after the controller started ({} latencies matched)\n",
        p.pods, p.registration.as_millis(), p.health.as_millis(), elapsed.as_secs_f64(), latencies.len()
    ));
    out.push_str("| metric | measured | target | result |\n|---|---|---|---|\n");
    out.push_str(&format!(
        "| healthy in LB -> gate True, p50 | {p50:.3} s | <= 1 s | {} |\n",
        pass(p50 <= 1.0)
    ));
    out.push_str(&format!(
        "| healthy in LB -> gate True, p99 | {p99:.3} s | <= 2 s | {} |\n",
        pass(p99 <= 2.0)
    ));
    out.push_str(&format!(
        "| the floor at the cluster's write rate, p50 / p99 | {floor_p50:.3} / {floor_p99:.3} s | (reference: {writes_per_s:.0} writes/s, in healthy order, no poll wait) | |\n"
    ));
    out.push_str(&format!(
        "| healthy in LB -> gate True, max | {:.3} s | (reference) | |\n",
        latencies.last().copied().unwrap_or(f64::NAN)
    ));
    out.push_str(&format!(
        "| mutating cloud calls (add/remove/set weight), one group | {mutating} | <= ceil({}/{CLB_BATCH}) + 5 = {mutating_target} | {} |\n",
        p.pods,
        pass(mutating <= mutating_target)
    ));
    out.push_str(&format!(
        "| health polls (DescribeHealthStatus) | {polls} in {:.1} s = {polls_per_s:.2}/s | ~1/s per load balancer while pending, independent of pods | {} |\n",
        elapsed.as_secs_f64(),
        pass(polls_per_s <= 2.0)
    ));
    out.push_str(&format!(
        "| controller peak RSS (VmHWM) | {:.1} MiB | (reported) | |\n",
        peak_kib as f64 / 1024.0
    ));
    out.push_str(&format!(
        "| backends turned healthy over | {:.2} s (first to last `healthy` event) | (reported) | |\n",
        last_healthy - first_healthy
    ));
    out.push_str(&format!(
        "| first healthy -> first gate True | {:.2} s (the health poll's wait and one read) | (reported) | |\n",
        first_true - first_healthy
    ));
    out.push_str(&format!(
        "| gates turned True over | {:.2} s = {writes_per_s:.0} gate writes/s | (reported) | |\n",
        last_true - first_true
    ));
    let cpu = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.2} s"));
    out.push_str(&format!(
        "| CPU from controller start to all True: rollgate / kube-apiserver | {} / {} | (reported) | |\n",
        cpu(controller_cpu),
        cpu(api_server_cpu)
    ));
    // Every latency, for the report's histogram.
    let latencies_path = bench_results_path().with_file_name("gates-latencies.json");
    if let Err(error) = std::fs::write(&latencies_path, json!(latencies).to_string()) {
        note(format!(
            "could not write {}: {error}",
            latencies_path.display()
        ));
    }
    let _ = merge_bench_results(&[
        ("gates.pods", json!(p.pods)),
        ("gates.flip_p50_s", json!(p50)),
        ("gates.flip_p99_s", json!(p99)),
        ("gates.mutating_calls", json!(mutating)),
        ("gates.mutating_calls_target", json!(mutating_target)),
        ("gates.health_polls_per_s", json!(polls_per_s)),
        (
            "gates.controller_peak_rss_mb",
            json!(peak_kib as f64 / 1024.0),
        ),
        ("gates.all_true_s", json!(elapsed.as_secs_f64())),
        ("gates.pods_containers_ready_s", json!(pods_ready_s)),
        ("gates.gate_writes_per_s", json!(writes_per_s)),
        ("gates.flip_floor_p50_s", json!(floor_p50)),
        ("gates.flip_floor_p99_s", json!(floor_p99)),
        (
            "gates.healthy_spread_s",
            json!(last_healthy - first_healthy),
        ),
        ("gates.first_flip_s", json!(first_true - first_healthy)),
        ("gates.controller_cpu_s", json!(controller_cpu)),
        ("gates.api_server_cpu_s", json!(api_server_cpu)),
    ]);
    controller.crash();
    let _ = deployments.delete("bench", &Default::default()).await;
    ns.cleanup().await;
    nodes.cleanup().await;
    enis.abort();
    emu.stop();
    Ok(out)
}

/// The flip latencies no controller could beat on a cluster that takes `rate` gate
/// writes a second: each write sent the moment its backend turns healthy (no poll
/// wait), one after the other in that order, each taking `1 / rate`. Sorted.
fn write_rate_floor(healthy: &[f64], rate: f64) -> Vec<f64> {
    let mut healthy = healthy.to_vec();
    healthy.sort_by(|a, b| a.total_cmp(b));
    let each = 1.0 / rate.max(f64::MIN_POSITIVE);
    let mut done = f64::NEG_INFINITY;
    let mut floor: Vec<f64> = healthy
        .iter()
        .map(|&at| {
            done = done.max(at) + each;
            done - at
        })
        .collect();
    floor.sort_by(|a, b| a.total_cmp(b));
    floor
}
