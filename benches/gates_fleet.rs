//! The readiness-gate controller at fleet size (issue 25, item 5): 1,000 LoadBalancer
//! Services (70 % CLB, 30 % NLB), each in front of a Deployment of 10 gated pods, on the
//! local control plane and the CLB/NLB emulator with its API rate limits on
//! (`--api-rate-limits`: the published per-action quotas, `Throttling.User` past them).
//! Today's code and the new code run in turn in the same run, each on a fresh namespace
//! and a fresh emulator, so every figure is a ratio measured under the same load.
//!
//! Per controller binary:
//! 1. the Services and Deployments are created in parallel batches and every pod's
//!    containers are ready (its gate alone holds it) before the controller starts: on
//!    2 cores the simulated kubelets need minutes for 10,000 pods, and starting the
//!    controller first would measure their pace. The controller then makes every load
//!    balancer and turns every gate True ("settle", reported, not a goal);
//! 2. idle: nothing changes for `IDLE_S`; the calls a settled fleet costs;
//! 3. scenario A: a rollout of one Deployment while the others are idle (`A` of them in
//!    turn, CLB and NLB alternately): flip latency p50 and p99, from the backend's
//!    `healthy` event in the emulator's timeline to its pod's gate seen True by a watch
//!    (goals 1 s and 2 s);
//! 4. scenario B: `B` Deployments rolled out at once: flip p99, and from the emulator's
//!    call log the longest time a Service waited for a look (the longest gap between two
//!    health reads of its load balancer), for Services with a pending gate (from the pod's
//!    containers ready to its gate True) and for settled ones (a lower bound: the
//!    window's edges count as reads);
//! 5. over the whole run, per product: the longest wait for a look of a settled Service
//!    (from its gates all True to its rollout or the end of the run), beside the bound
//!    docs/readiness-gates.md states for the controller's defaults; the settle alone
//!    is longer than that bound at 1,000 Services, so a wait past it can show;
//! 6. throughout: calls per second by action against their limits (and the busiest
//!    second), throttled calls, every gate condition change (a `Throttling` in a gate's
//!    reason or message means a throttling error reached a pod), the controller's CPU per
//!    phase and its peak RSS (VmHWM).
//!
//! Today's code may never settle a fleet: it gets `TODAY_SETTLE_TIMEOUT_S`, and the
//! load balancers it made by then (sampled every 30 s) stand beside what the new code
//! made by the same time. Each fleet size in `SERVICES` runs in turn (default 100 and
//! 1,000), so one rollout's flip latency is plotted against the number of Services.
//!
//! Binaries: `ROLLGATE_BENCH_NEW_BIN` (default this build's `rollgate`) and
//! `ROLLGATE_BENCH_BASELINE_BIN` (today's code; hack/bench.sh builds it from
//! `ROLLGATE_BENCH_BASELINE_REV`, default the merge base with main; unset: the new
//! binary runs alone). `..._NEW_REV` and `..._BASELINE_REV` only label the report.
//!
//! Environment (`ROLLGATE_BENCH_GATES_FLEET_*`): `SERVICES` (`100,1000`), `NLB_PERCENT` (30),
//! `PODS` per Service (10), `NODES` (100), `BATCH` parallel creations (25), `A` (2),
//! `B` (100), `IDLE_S` (30), `MAX_SURGE` ("25%"), `REGISTRATION_MS` (500), `HEALTH_MS`
//! (2000), `SETTLE_TIMEOUT_S` (3600), `TODAY_SETTLE_TIMEOUT_S` (600), `RATE_LIMITS` (extra emulator limits,
//! comma-separated `product:Action=N/SECONDS`), `LOG` (the controllers' `ROLLGATE_LOG`, `info`;
//! `info,rollgate::gates=debug` traces each look granted and each reconcile). `..._QUICK=1`: the reduced run of
//! `make test` (20 Services x 2 pods, 6 nodes, A 1, B 6, idle 5 s, the new binary only)
//! that fails when a throttling error reaches a gate, a gate is not True at the end, a
//! rollout does not finish, or something stalls: a flip, or a pending Service's wait for
//! a look, longer than `QUICK_STALL` (30 s, fifteen times the p99 goal). Its latencies
//! are otherwise printed, never compared with the goals (timing under CI load is not a
//! test). Results: `target/bench/results.json`, keys `gates.fleet.*` (the largest size)
//! and `gates.fleet.by_services.<n>.*` (every size); B is capped at the Services A
//! leaves.
#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use lb_emulator::EmulatorConfig;
use serde_json::{json, Value};
use support::fleet::*;
use support::measure::{cpu_seconds, memory_kib, peak_rss_kib, percentile, stat_state};
use support::*;

const GATE_PREFIX: &str = "service.readiness.alibabacloud.com/";
const NLB_CLASS: &str = "alibabacloud.com/nlb";
const ZONE_MAPS: (&str, &str) = (
    "service.beta.kubernetes.io/alibaba-cloud-loadbalancer-zone-maps",
    "cn-hangzhou-k:vsw-k,cn-hangzhou-j:vsw-j",
);
const CREATED_ID_ANNOTATION: &str = "rollgate.io/created-load-balancer-id";
/// A rollout's number: the template annotation that makes it, and a label of its
/// Deployments.
const ROLLOUT_ANNOTATION: &str = "rollgate.bench/rollout";
/// The emulator's default VPC (10.0.0.0/8): the pods' ENIs go there.
const VPC: &str = "vpc-emulator";
/// The health reads, one per load balancer (CLB) or listener (NLB): "a look".
const HEALTH_READS: [&str; 2] = ["DescribeHealthStatus", "GetListenerHealthStatus"];
/// In the quick run, a flip or a pending Service's wait for a look longer than this is
/// a stall, not a slow bed: the goals are 1 s and 2 s, and 30 s is 15 times the latter.
const QUICK_STALL: f64 = 30.0;

#[derive(Clone)]
struct Params {
    quick: bool,
    /// This run's fleet: one of `sizes`.
    services: usize,
    /// The fleet sizes run in turn, smallest first (the plot of flip latency against
    /// the number of Services); the figures without a size in their key are the last's.
    sizes: Vec<usize>,
    nlb_percent: usize,
    pods: usize,
    nodes: usize,
    batch: usize,
    a: usize,
    b: usize,
    idle: Duration,
    max_surge: String,
    registration: Duration,
    health: Duration,
    settle_timeout: Duration,
    /// Today's code's settle timeout: it may never settle a fleet, and what it made by
    /// then is compared with what the new code made by the same time.
    today_settle_timeout: Duration,
    rate_limits: Vec<String>,
    /// The controllers' log filter (`ROLLGATE_LOG`).
    log: String,
    /// (label, binary) in the order they run: today's code first.
    binaries: Vec<(String, PathBuf)>,
}

impl Params {
    fn from_env() -> Result<Self, String> {
        let quick = std::env::var("ROLLGATE_BENCH_GATES_FLEET_QUICK").is_ok_and(|v| v == "1");
        let knob = |name: &str, full: usize, reduced: usize| {
            env_or(
                &format!("ROLLGATE_BENCH_GATES_FLEET_{name}"),
                if quick { reduced } else { full },
            )
        };
        let text_or = |name: &str, default: &str| {
            std::env::var(name)
                .ok()
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| default.to_string())
        };
        let new_bin = std::env::var_os("ROLLGATE_BENCH_NEW_BIN")
            .filter(|b| !b.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(controller_binary);
        let mut binaries = vec![];
        if !quick {
            if let Some(bin) =
                std::env::var_os("ROLLGATE_BENCH_BASELINE_BIN").filter(|b| !b.is_empty())
            {
                binaries.push((
                    format!(
                        "today ({})",
                        text_or("ROLLGATE_BENCH_BASELINE_REV", "baseline")
                    ),
                    PathBuf::from(bin),
                ));
            }
        }
        binaries.push((
            format!("new ({})", text_or("ROLLGATE_BENCH_NEW_REV", "this build")),
            new_bin,
        ));
        for (label, bin) in &binaries {
            if !bin.is_file() {
                return Err(format!("{label}: {} is not a file", bin.display()));
            }
        }
        let p = Params {
            quick,
            // The quick run is sized for `make test`'s 3 minutes on 2 loaded cores: 20
            // Services (14 CLB, 6 NLB) of 2 pods, so a rollout is two surges; it still
            // runs with the emulator's rate limits on and fails on a stall
            // (`QUICK_STALL`) or a throttling error at a gate.
            services: 0,
            sizes: sizes(quick)?,
            nlb_percent: knob("NLB_PERCENT", 30, 30)?.min(100),
            pods: knob("PODS", 10, 2)?.max(1),
            nodes: knob("NODES", 100, 6)?.max(1),
            batch: knob("BATCH", 25, 25)?.max(1),
            a: knob("A", 2, 1)?,
            b: knob("B", 100, 6)?,
            idle: Duration::from_secs(knob("IDLE_S", 30, 5)? as u64),
            max_surge: std::env::var("ROLLGATE_BENCH_GATES_FLEET_MAX_SURGE")
                .unwrap_or_else(|_| "25%".into()),
            registration: Duration::from_millis(knob("REGISTRATION_MS", 500, 500)? as u64),
            health: Duration::from_millis(knob("HEALTH_MS", 2000, 2000)? as u64),
            settle_timeout: Duration::from_secs(knob("SETTLE_TIMEOUT_S", 3600, 300)? as u64),
            today_settle_timeout: Duration::from_secs(
                knob("TODAY_SETTLE_TIMEOUT_S", 600, 300)? as u64
            ),
            rate_limits: std::env::var("ROLLGATE_BENCH_GATES_FLEET_RATE_LIMITS")
                .unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
            log: text_or("ROLLGATE_BENCH_GATES_FLEET_LOG", "info"),
            binaries,
        };
        if p.a >= p.sizes[0] {
            return Err(format!(
                "A ({}) rollouts need more Services than {}",
                p.a, p.sizes[0]
            ));
        }
        Ok(p)
    }

    /// The parameters of one fleet size: B is capped at the Services A leaves.
    fn at_size(&self, services: usize) -> Self {
        Self {
            services,
            b: self.b.min(services - self.a),
            ..self.clone()
        }
    }

    fn is_nlb(&self, i: usize) -> bool {
        // Spread evenly: Service i is NLB when the running share falls behind.
        (i + 1) * self.nlb_percent / 100 > i * self.nlb_percent / 100
    }
}

/// `SERVICES`: one fleet size or several, comma-separated (default 100 and 1,000; the
/// quick run 20).
fn sizes(quick: bool) -> Result<Vec<usize>, String> {
    let name = "ROLLGATE_BENCH_GATES_FLEET_SERVICES";
    let text = std::env::var(name).unwrap_or_else(|_| if quick { "20" } else { "100,1000" }.into());
    let mut sizes = text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<usize>().ok().filter(|&n| n > 0).ok_or_else(|| {
                format!("{name}={text}: expected positive numbers, comma-separated, e.g. 100,1000")
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    sizes.sort_unstable();
    sizes.dedup();
    if sizes.is_empty() {
        return Err(format!(
            "{name} is empty: give a number of Services, e.g. 1000"
        ));
    }
    Ok(sizes)
}

/// The fleet size of the figures under `gates.fleet.*` in the results file (0: none).
fn largest_recorded_fleet() -> usize {
    std::fs::read_to_string(bench_results_path())
        .ok()
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .and_then(|all| all["gates.fleet.services"].as_u64())
        .unwrap_or(0) as usize
}

/// Today's code runs under a label of its own (see `Params::from_env`).
fn is_today(label: &str) -> bool {
    label.starts_with("today")
}

fn main() -> ExitCode {
    bench_main("gates_fleet", Params::from_env(), run)
}

fn now_epoch() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn seconds_since_epoch(rfc3339: &str) -> Option<f64> {
    let t: k8s_openapi::jiff::Timestamp = rfc3339.parse().ok()?;
    Some(t.as_millisecond() as f64 / 1000.0)
}

/// Whether the process has exited (a zombie until it is reaped: the bench holds it).
/// A controller whose Lease renewal fails exits by design; on an overloaded bed (etcd
/// timing out) that happens, and the bench must say so instead of waiting.
fn exited(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat_state(&stat))
        .is_none_or(|state| state == 'Z' || state == 'X')
}

// ------------------------------------------------------------------ what the watch saw

#[derive(Clone, Debug)]
struct GateChange {
    at: f64,
    pod: String,
    status: String,
    reason: String,
    message: String,
}

#[derive(Default)]
struct Seen {
    pods: HashMap<String, PodSeen>,
    changes: Vec<GateChange>,
}

fn condition<'a>(
    pod: &'a Pod,
    type_: &str,
) -> Option<&'a k8s_openapi::api::core::v1::PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

impl Seen {
    fn apply(&mut self, pod: &Pod, at: f64, new_ips: &tokio::sync::mpsc::UnboundedSender<String>) {
        let app = pod.labels().get("app").cloned().unwrap_or_default();
        let name = pod.name_any();
        let entry = self.pods.entry(name.clone()).or_insert_with(|| PodSeen {
            app: app.clone(),
            first_seen: at,
            ..Default::default()
        });
        // The IP as it is now: kwok may report a pod's IP more than once, and the ENI
        // must hold the one the controller registers.
        if let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.clone()) {
            if entry.ip.as_ref() != Some(&ip) {
                let _ = new_ips.send(ip.clone());
                entry.ip = Some(ip);
            }
        }
        if entry.containers_ready.is_none()
            && condition(pod, "ContainersReady").is_some_and(|c| c.status == "True")
        {
            entry.containers_ready = Some(at);
        }
        if let Some(c) = condition(pod, &format!("{GATE_PREFIX}{app}")) {
            let now = (
                c.status.clone(),
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            );
            if entry.gate.as_ref() != Some(&now) {
                if now.0 == "True" && entry.gate_true.is_none() {
                    entry.gate_true = Some(at);
                }
                self.changes.push(GateChange {
                    at,
                    pod: name,
                    status: now.0.clone(),
                    reason: now.1.clone(),
                    message: now.2.clone(),
                });
                entry.gate = Some(now);
            }
        }
    }
}

/// Watches the namespace's pods into `seen`, and gives every new pod IP an ENI in the
/// emulator (as Terway does) from a task of its own, so the POSTs never delay when a
/// gate is seen True. Returns both tasks, to abort.
fn watch_pods(
    client: &Client,
    namespace: &str,
    emu: &EmulatorProcess,
    seen: Arc<Mutex<Seen>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let watch = tokio::spawn(async move {
        let stream = watcher(api, watcher::Config::default());
        let mut stream = std::pin::pin!(stream);
        loop {
            match stream.try_next().await {
                Ok(Some(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod))) => {
                    seen.lock().unwrap().apply(&pod, now_epoch(), &tx);
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => {
                    note(format!("pod watch: {e}; watching again"));
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    });
    let url = format!("{}/_emulator/enis", emu.base_url());
    let enis = tokio::spawn(async move {
        let http = alibaba_lb::http::build_http_client(Duration::from_secs(10)).unwrap();
        let mut given: HashSet<String> = HashSet::new();
        while let Some(ip) = rx.recv().await {
            // A reused IP keeps its ENI, as Terway keeps a secondary IP on its ENI.
            if !given.insert(ip.clone()) {
                continue;
            }
            let body = json!({"private_ips": [ip], "vpc_id": VPC});
            for _ in 0..5 {
                let sent = http
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body.to_string())
                    .send()
                    .await;
                if sent.is_ok_and(|r| r.status().is_success()) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    });
    vec![watch, enis]
}

// ------------------------------------------------------------------ the emulator's logs

async fn emulator_get(emu: &EmulatorProcess, path: &str) -> Result<Value, String> {
    let http = alibaba_lb::http::build_http_client(Duration::from_secs(60)).unwrap();
    let text = http
        .get(format!("{}/_emulator/{path}", emu.base_url()))
        .send()
        .await
        .map_err(|e| format!("emulator {path}: {e}"))?
        .text()
        .await
        .map_err(|e| format!("emulator {path}: {e}"))?;
    serde_json::from_str(&text).map_err(|e| format!("emulator {path}: {e}"))
}

async fn call_log(emu: &EmulatorProcess) -> Result<Vec<Call>, String> {
    let mut calls = vec![];
    let mut since = 0u64;
    loop {
        let page = emulator_get(emu, &format!("call-log?since={since}")).await?;
        for c in page["calls"].as_array().into_iter().flatten() {
            let text = |k: &str| c[k].as_str().map(str::to_string);
            calls.push(Call {
                at: c["at"].as_f64().unwrap_or(0.0),
                product: text("product").unwrap_or_default(),
                action: text("action").unwrap_or_default(),
                load_balancer: text("load_balancer_id"),
                listener: text("listener_id"),
                throttled: c["throttled"].as_bool().unwrap_or(false),
            });
        }
        let next = page["next"].as_u64().unwrap_or(since);
        if page["dropped"].as_u64().unwrap_or(0) > 0 {
            note("the emulator's call log is full: later calls are missing");
        }
        if next >= page["total"].as_u64().unwrap_or(0) || next == since {
            return Ok(calls);
        }
        since = next;
    }
}

/// Every `healthy` event of the timeline, by IP, in time order.
async fn healthy_events(emu: &EmulatorProcess) -> Result<HashMap<String, Vec<f64>>, String> {
    let timeline = emulator_get(emu, "timeline").await?;
    let mut out: HashMap<String, Vec<f64>> = HashMap::new();
    for e in timeline["events"].as_array().into_iter().flatten() {
        if e["event"] == "healthy" {
            if let (Some(ip), Some(at)) = (
                e["ip"].as_str(),
                e["at"].as_str().and_then(seconds_since_epoch),
            ) {
                out.entry(ip.to_string()).or_default().push(at);
            }
        }
    }
    for v in out.values_mut() {
        v.sort_by(|a, b| a.total_cmp(b));
    }
    Ok(out)
}

// ------------------------------------------------------------------ the fleet

#[derive(Default)]
struct Figures {
    label: String,
    settle_s: f64,
    containers_ready_s: f64,
    a_p50: f64,
    a_p99: f64,
    a_max: f64,
    a_samples: usize,
    a_s: f64,
    b_p50: f64,
    b_p99: f64,
    b_max: f64,
    b_samples: usize,
    b_s: f64,
    unmatched: usize,
    /// Flips timed from the pod's first sighting: its IP's old backend stayed healthy.
    healthy_before_the_pod: usize,
    pending_wait_max: f64,
    settled_wait_max_b: f64,
    settled_wait_max_idle: f64,
    settled_without_look_idle: usize,
    cpu_settle: f64,
    cpu_idle: f64,
    cpu_a: f64,
    cpu_b: f64,
    peak_rss_mib: f64,
    rss_idle_mib: f64,
    idle_s: f64,
    /// action -> (limit, idle calls/s, B calls/s, B busiest second, throttled in A+B)
    calls: BTreeMap<String, (String, f64, f64, u64, u64)>,
    throttled_settle: u64,
    throttled_scenarios: u64,
    gate_throttling_settle: Vec<String>,
    gate_throttling_scenarios: Vec<String>,
    gates_not_true_at_end: usize,
    /// Rollouts that did not finish in time (the figures cover what flipped).
    incomplete: Vec<String>,
    /// While settling, every `PROGRESS_EVERY`: (seconds since the controller started,
    /// load balancers made (a Service with an address), gates True).
    progress: Vec<(f64, usize, usize)>,
    /// The longest wait for a look of a settled Service over the whole run, CLB and
    /// NLB: from its gates all True (after the first settle) to its rollout or the end.
    settled_wait_run: [f64; 2],
    /// The longest of those settled windows: a wait longer than it cannot be seen.
    settled_window_max: f64,
}

/// How often the settle loop records its progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(30);

async fn batched<F, Fut>(what: &str, count: usize, batch: usize, make: F) -> Result<(), String>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let errors: Vec<String> = futures::stream::iter((0..count).map(make))
        .buffer_unordered(batch)
        .filter_map(|r| async move { r.err() })
        .collect()
        .await;
    match errors.first() {
        None => Ok(()),
        Some(e) => Err(format!("{what}: {} failed, the first: {e}", errors.len())),
    }
}

fn service_name(i: usize) -> String {
    format!("s{i:04}")
}

/// Rolls out the Deployments `names`: a new template annotation each.
async fn roll_out(
    deployments: &Api<Deployment>,
    names: &[String],
    batch: usize,
    n: u32,
) -> Result<(), String> {
    // The label lets the wait list only these Deployments (a list of all 1,000 every
    // second would load the API server the bench measures through).
    let patch = json!({
        "metadata": {"labels": {ROLLOUT_ANNOTATION: n.to_string()}},
        "spec": {"template": {"metadata": {"annotations": {ROLLOUT_ANNOTATION: n.to_string()}}}},
    });
    batched("rollout patches", names.len(), batch, |i| {
        let (api, name, patch) = (deployments.clone(), names[i].clone(), patch.clone());
        async move {
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ())
                .map_err(|e| format!("{name}: {e}"))
        }
    })
    .await
}

fn rolled_out(d: &Deployment, replicas: i32) -> bool {
    let Some(s) = &d.status else { return false };
    s.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0)
        && s.updated_replicas == Some(replicas)
        && s.replicas == Some(replicas)
        && s.available_replicas == Some(replicas)
}

/// Waits until the `count` Deployments of rollout `n` (its label) are rolled out.
async fn wait_rolled_out(
    deployments: &Api<Deployment>,
    n: u32,
    count: usize,
    replicas: i32,
    timeout: Duration,
) -> Result<(), String> {
    let selector = format!("{ROLLOUT_ANNOTATION}={n}");
    let deadline = Instant::now() + timeout;
    loop {
        let list = deployments
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| e.to_string())?;
        let done = list
            .items
            .iter()
            .filter(|d| rolled_out(d, replicas))
            .count();
        if done == count {
            return Ok(());
        }
        if Instant::now() > deadline {
            let stuck: Vec<String> = list
                .items
                .iter()
                .filter(|d| !rolled_out(d, replicas))
                .map(|d| {
                    let s = d.status.clone().unwrap_or_default();
                    format!(
                        "{} (replicas {:?}, updated {:?}, available {:?})",
                        d.name_any(),
                        s.replicas,
                        s.updated_replicas,
                        s.available_replicas
                    )
                })
                .collect();
            return Err(format!(
                "{done} of {count} rollouts done after {} s; not done: {}",
                timeout.as_secs(),
                stuck.join(", ")
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn run_fleet(
    p: &Params,
    client: &Client,
    nodes: &TestNodes,
    label: &str,
    binary: &Path,
    last: bool,
) -> (Figures, Result<(), String>) {
    let mut f = Figures {
        label: label.to_string(),
        ..Default::default()
    };
    let ns = TestNamespace::new(client, "bench-fleet").await;
    let mut config = EmulatorConfig {
        registration_delay: p.registration,
        health_delay: p.health,
        tick: Duration::from_millis(20),
        api_rate_limits: true,
        // A large account's quotas (the published defaults allow 30 CLBs and 60 NLBs
        // per region, far below the fleet's 1,000 Services): no instance or
        // attachment quota binds here, only the API rate limits do.
        account_quotas: lb_emulator::AccountQuotas::all(100_000),
        ..EmulatorConfig::default()
    };
    for limit in &p.rate_limits {
        let (key, value) = match lb_emulator::quota::parse_override(limit) {
            Ok(parsed) => parsed,
            Err(e) => return (f, Err(e)),
        };
        config.api_rate_limit_overrides.insert(key, value);
    }
    let emu = EmulatorProcess::start(&config);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let tasks = watch_pods(client, &ns.name, &emu, seen.clone());
    let services: Api<Service> = Api::namespaced(client.clone(), &ns.name);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let result = fleet_phases(
        p,
        client,
        nodes,
        binary,
        &ns,
        &emu,
        &seen,
        &services,
        &deployments,
        &mut f,
    )
    .await;
    for t in &tasks {
        t.abort();
    }
    // The Services keep rollgate's finalizer once its controller is gone: take it off
    // so the namespace can go, then wait for the pods to go before the next run.
    let _ = batched("finalizers", p.services, p.batch, |i| {
        let api = services.clone();
        async move {
            let patch = json!({"metadata": {"finalizers": null}});
            let _ = api
                .patch(
                    &service_name(i),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await;
            Ok(())
        }
    })
    .await;
    let _ = deployments
        .delete_collection(&DeleteParams::background(), &ListParams::default())
        .await;
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let ns_name = ns.name.clone();
    ns.cleanup().await;
    // The next binary's run waits for these pods to go; after the last, nothing does
    // (the namespace goes on its own).
    let deadline = Instant::now() + Duration::from_secs(if last { 0 } else { 600 });
    while Instant::now() < deadline {
        match pods_api.list(&ListParams::default().limit(1)).await {
            Ok(l) if l.items.is_empty() => break,
            Err(_) => break,
            Ok(_) => tokio::time::sleep(Duration::from_secs(2)).await,
        }
    }
    note(format!("{label}: namespace {ns_name} deleted"));
    emu.stop();
    (f, result)
}

#[allow(clippy::too_many_arguments)]
async fn fleet_phases(
    p: &Params,
    client: &Client,
    nodes: &TestNodes,
    binary: &Path,
    ns: &TestNamespace,
    emu: &EmulatorProcess,
    seen: &Arc<Mutex<Seen>>,
    services: &Api<Service>,
    deployments: &Api<Deployment>,
    f: &mut Figures,
) -> Result<(), String> {
    let total_pods = p.services * p.pods;
    let created = Instant::now();
    batched("Services", p.services, p.batch, |i| {
        let api = services.clone();
        let name = service_name(i);
        let mut spec = json!({"type": "LoadBalancer", "selector": {"app": name},
            "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}]});
        let mut annotations = json!({});
        if p.is_nlb(i) {
            spec["loadBalancerClass"] = json!(NLB_CLASS);
            annotations[ZONE_MAPS.0] = json!(ZONE_MAPS.1);
        }
        async move {
            let svc: Service = serde_json::from_value(
                json!({"metadata": {"name": name, "annotations": annotations}, "spec": spec}),
            )
            .unwrap();
            api.create(&PostParams::default(), &svc)
                .await
                .map(|_| ())
                .map_err(|e| format!("{name}: {e}"))
        }
    })
    .await?;
    batched("Deployments", p.services, p.batch, |i| {
        let api = deployments.clone();
        let name = service_name(i);
        let deployment = json!({
            "metadata": {"name": name},
            "spec": {
                "replicas": p.pods,
                "selector": {"matchLabels": {"app": name}},
                "strategy": {"type": "RollingUpdate",
                             "rollingUpdate": {"maxSurge": p.max_surge, "maxUnavailable": 0}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "nodeSelector": nodes.selector(),
                        "readinessGates": [{"conditionType": format!("{GATE_PREFIX}{name}")}],
                        "terminationGracePeriodSeconds": 1,
                        "containers": [{"name": "app", "image": "registry.local/app:1",
                                        "ports": [{"containerPort": 8080}]}],
                    },
                },
            },
        });
        async move {
            let d: Deployment = serde_json::from_value(deployment).unwrap();
            api.create(&PostParams::default(), &d)
                .await
                .map(|_| ())
                .map_err(|e| format!("{name}: {e}"))
        }
    })
    .await?;
    let deadline = Instant::now() + p.settle_timeout;
    loop {
        let ready = {
            let s = seen.lock().unwrap();
            s.pods
                .values()
                .filter(|x| x.containers_ready.is_some())
                .count()
        };
        if ready >= total_pods {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{ready} of {total_pods} pods have their containers ready"
            ));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    f.containers_ready_s = created.elapsed().as_secs_f64();
    note(format!(
        "{}: {total_pods} pods' containers ready {:.0} s after the first create; starting the controller",
        f.label, f.containers_ready_s
    ));

    let mut env = emu.controller_env();
    for (k, v) in [
        ("ROLLGATE_CLOUD_VPC_ID", VPC),
        ("ROLLGATE_CLUSTER_ID", "bench"),
        ("ROLLGATE_LOG", p.log.as_str()),
    ] {
        env.push((k.into(), v.into()));
    }
    let refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let controller =
        ControllerProcess::start_binary(binary, &ns.name, "fleet", &controller_kubeconfig(), &refs);
    let pid = controller.pid();
    let cpu = || cpu_seconds(pid).unwrap_or(f64::NAN);
    let started = Instant::now();
    let started_epoch = now_epoch();
    let settle_timeout = if is_today(&f.label) {
        p.today_settle_timeout
    } else {
        p.settle_timeout
    };
    let mut next_progress = Instant::now();
    loop {
        let (true_gates, pods_known) = {
            let s = seen.lock().unwrap();
            let t = s
                .pods
                .values()
                .filter(|x| x.gate.as_ref().is_some_and(|g| g.0 == "True"))
                .count();
            (t, s.pods.len())
        };
        let sample = Instant::now() >= next_progress;
        if sample || (true_gates >= total_pods && pods_known >= total_pods) {
            let list = services
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let with_address = list
                .items
                .iter()
                .filter(|s| {
                    s.status
                        .as_ref()
                        .and_then(|s| s.load_balancer.as_ref())
                        .and_then(|l| l.ingress.as_ref())
                        .is_some_and(|i| !i.is_empty())
                })
                .count();
            if sample || with_address >= p.services {
                f.progress
                    .push((started.elapsed().as_secs_f64(), with_address, true_gates));
                next_progress += PROGRESS_EVERY;
            }
            if with_address >= p.services && true_gates >= total_pods && pods_known >= total_pods {
                break;
            }
        }
        if exited(pid) {
            return Err(format!(
                "{}: the controller exited while settling (a failed Lease renewal on an overloaded bed exits by design); log {}",
                f.label,
                controller.log.display()
            ));
        }
        if started.elapsed() > settle_timeout {
            let made = f.progress.last().map_or(0, |x| x.1);
            return Err(format!(
                "{}: did not settle: {made} of {} load balancers made and {true_gates} of {total_pods} gates True {} s after the controller started (log {})",
                f.label,
                p.services,
                settle_timeout.as_secs(),
                controller.log.display()
            ));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    f.settle_s = started.elapsed().as_secs_f64();
    f.cpu_settle = cpu();
    note(format!("{}: settled in {:.0} s", f.label, f.settle_s));

    // Idle: a settled fleet.
    let idle_start = now_epoch();
    let cpu0 = cpu();
    tokio::time::sleep(p.idle).await;
    let idle_end = now_epoch();
    f.idle_s = idle_end - idle_start;
    f.cpu_idle = cpu() - cpu0;
    f.rss_idle_mib = memory_kib(pid, "VmRSS:").unwrap_or(0) as f64 / 1024.0;

    // A: one Deployment at a time while the others are idle, CLB and NLB in turn.
    let clb: Vec<usize> = (0..p.services).filter(|&i| !p.is_nlb(i)).collect();
    let nlb: Vec<usize> = (0..p.services).filter(|&i| p.is_nlb(i)).collect();
    let mut order = vec![];
    for k in 0..p.services {
        if let Some(&i) = clb.get(k) {
            order.push(i);
        }
        if let Some(&i) = nlb.get(k) {
            order.push(i);
        }
    }
    let a_names: Vec<String> = order[..p.a].iter().map(|&i| service_name(i)).collect();
    // B: the next `b` in the same interleaving, spread over the fleet.
    let rest: Vec<usize> = order[p.a..].to_vec();
    let step = (rest.len() / p.b.max(1)).max(1);
    let b_names: Vec<String> = rest
        .iter()
        .step_by(step)
        .take(p.b)
        .map(|&i| service_name(i))
        .collect();
    let rollout_timeout = Duration::from_secs(120 + 2 * p.pods as u64 * 10);

    let a_start = now_epoch();
    let cpu0 = cpu();
    for (n, name) in a_names.iter().enumerate() {
        roll_out(deployments, std::slice::from_ref(name), 1, n as u32 + 1).await?;
        if let Err(e) =
            wait_rolled_out(deployments, n as u32 + 1, 1, p.pods as i32, rollout_timeout).await
        {
            // Reported with the figures of what did flip, not thrown away.
            f.incomplete.push(format!("scenario A, {name}: {e}"));
        }
    }
    f.a_s = now_epoch() - a_start;
    f.cpu_a = cpu() - cpu0;

    let b_start = now_epoch();
    let cpu0 = cpu();
    roll_out(deployments, &b_names, p.batch, 1000).await?;
    if let Err(e) = wait_rolled_out(
        deployments,
        1000,
        b_names.len(),
        p.pods as i32,
        rollout_timeout * 3,
    )
    .await
    {
        f.incomplete.push(format!("scenario B: {e}"));
    }
    let b_end = now_epoch();
    f.b_s = b_end - b_start;
    f.cpu_b = cpu() - cpu0;
    // A last look for late gate writes.
    tokio::time::sleep(Duration::from_secs(2)).await;
    if exited(pid) {
        f.incomplete.push(format!(
            "the controller exited during the scenarios; log {}",
            controller.log.display()
        ));
    }
    f.peak_rss_mib = peak_rss_kib(pid).unwrap_or(0) as f64 / 1024.0;

    // What the cloud and the watch saw.
    let healthy = healthy_events(emu).await?;
    let calls = call_log(emu).await?;
    let limits = emulator_get(emu, "calls").await?;
    let state = emulator_get(emu, "state").await?;
    // A copy, so no lock is held across the awaits below (the watch task takes it).
    let seen = {
        let s = seen.lock().unwrap();
        Seen {
            pods: s.pods.clone(),
            changes: s.changes.clone(),
        }
    };

    let a_apps: HashSet<String> = a_names.iter().cloned().collect();
    let a_flips = flip_latencies(&seen.pods, &a_apps, a_start, &healthy);
    let a_lat = a_flips.latencies;
    // No flip seen: no figure (NaN, `null` in results.json).
    let flip_percentile = |latencies: &[f64], p| percentile(latencies, p).unwrap_or(f64::NAN);
    f.a_p50 = flip_percentile(&a_lat, 50.0);
    f.a_p99 = flip_percentile(&a_lat, 99.0);
    f.a_max = a_lat.last().copied().unwrap_or(f64::NAN);
    f.a_samples = a_lat.len();
    let b_apps: HashSet<String> = b_names.iter().cloned().collect();
    let b_flips = flip_latencies(&seen.pods, &b_apps, b_start, &healthy);
    let b_lat = b_flips.latencies;
    f.b_p50 = flip_percentile(&b_lat, 50.0);
    f.b_p99 = flip_percentile(&b_lat, 99.0);
    f.b_max = b_lat.last().copied().unwrap_or(f64::NAN);
    f.b_samples = b_lat.len();
    f.unmatched = a_flips.unmatched + b_flips.unmatched;
    f.healthy_before_the_pod = a_flips.healthy_before_the_pod + b_flips.healthy_before_the_pod;

    // Looks per Service: its load balancer's health reads (an NLB's by listener).
    let listener_lb: HashMap<String, String> = state["nlb"]["listeners"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| {
            Some((
                l["id"].as_str()?.to_string(),
                l["load_balancer_id"].as_str()?.to_string(),
            ))
        })
        .collect();
    let service_lb: HashMap<String, String> = services
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?
        .items
        .iter()
        .filter_map(|s| {
            Some((
                s.name_any(),
                s.annotations().get(CREATED_ID_ANNOTATION)?.clone(),
            ))
        })
        .collect();
    let mut looks: HashMap<String, Vec<f64>> = HashMap::new();
    for c in calls
        .iter()
        .filter(|c| !c.throttled && HEALTH_READS.contains(&c.action.as_str()))
    {
        let lb = c.load_balancer.clone().or_else(|| {
            c.listener
                .as_ref()
                .and_then(|l| listener_lb.get(l).cloned())
        });
        if let Some(lb) = lb {
            looks.entry(lb).or_default().push(c.at);
        }
    }
    for v in looks.values_mut() {
        v.sort_by(|a, b| a.total_cmp(b));
    }
    let no_looks = vec![];
    let looks_of = |svc: &str| {
        service_lb
            .get(svc)
            .and_then(|lb| looks.get(lb))
            .unwrap_or(&no_looks)
    };
    let mut pending: HashMap<&str, Vec<(f64, f64)>> = HashMap::new();
    for pod in seen.pods.values() {
        if b_apps.contains(&pod.app) && pod.first_seen >= b_start {
            let from = pod.containers_ready.unwrap_or(pod.first_seen);
            pending
                .entry(pod.app.as_str())
                .or_default()
                .push((from, pod.gate_true.unwrap_or(b_end)));
        }
    }
    f.pending_wait_max = pending
        .iter()
        .map(|(svc, intervals)| longest_pending_wait(looks_of(svc), intervals))
        .fold(0.0, f64::max);
    let all_names: Vec<String> = (0..p.services).map(service_name).collect();
    f.settled_wait_max_b = all_names
        .iter()
        .filter(|n| !b_apps.contains(*n))
        .map(|n| longest_gap(looks_of(n), b_start, b_end))
        .fold(0.0, f64::max);
    f.settled_wait_max_idle = all_names
        .iter()
        .map(|n| longest_gap(looks_of(n), idle_start, idle_end))
        .fold(0.0, f64::max);
    f.settled_without_look_idle = all_names
        .iter()
        .filter(|n| {
            !looks_of(n)
                .iter()
                .any(|&t| t >= idle_start && t <= idle_end)
        })
        .count();
    // Over the whole run: a Service is settled from its first gates all True until its
    // rollout (A or B) or the end. The settle alone is longer than the stated bound at
    // 1,000 Services, so these windows can show a wait past it; their edges count as
    // looks (a gate turns True right after a look saw it healthy).
    let initial_pods_true = |app: &str| {
        let mut latest: Option<f64> = None;
        for pod in seen
            .pods
            .values()
            .filter(|x| x.app == app && x.first_seen < a_start)
        {
            latest = Some(latest.unwrap_or(0.0).max(pod.gate_true?));
        }
        latest
    };
    // Per product, the Service that waited longest: (name, gap start, gap end).
    let mut longest: [Option<(String, f64, f64)>; 2] = [None, None];
    for i in 0..p.services {
        let name = service_name(i);
        let Some(from) = initial_pods_true(&name) else {
            continue;
        };
        let until = if a_apps.contains(&name) {
            a_start
        } else if b_apps.contains(&name) {
            b_start
        } else {
            b_end
        };
        if until > from {
            let product = usize::from(p.is_nlb(i));
            let (gap_from, gap_to) = longest_gap_at(looks_of(&name), from, until);
            if gap_to - gap_from > f.settled_wait_run[product] {
                f.settled_wait_run[product] = gap_to - gap_from;
                longest[product] = Some((name.clone(), gap_from, gap_to));
            }
            f.settled_window_max = f.settled_window_max.max(until - from);
        }
    }
    // What the cloud saw of the Service that waited longest, around its wait: the
    // calls that name its load balancer or a listener of it (those that name only a
    // group, backend writes among them, are not matched).
    for (name, gap_from, gap_to) in longest.iter().flatten() {
        let wait = gap_to - gap_from;
        let lb = service_lb.get(name).cloned().unwrap_or_default();
        let on_lb: Vec<String> = calls
            .iter()
            .filter(|c| c.at >= gap_from - 30.0 && c.at <= gap_to + 2.0)
            .filter(|c| {
                c.load_balancer.as_deref() == Some(lb.as_str())
                    || c.listener.as_ref().and_then(|l| listener_lb.get(l)) == Some(&lb)
            })
            .map(|c| {
                let throttled = if c.throttled { " (throttled)" } else { "" };
                format!("{:.1} {}{throttled}", c.at - started_epoch, c.action)
            })
            .collect();
        let at = |t: f64| t - started_epoch;
        note(format!(
            "{}: the longest settled wait, {name} ({lb}): {wait:.1} s, from {:.1} to {:.1} s after the controller started (settled at {:.1}, A from {:.1}, B {:.1} to {:.1}); its calls from 30 s before: {}",
            f.label,
            at(*gap_from),
            at(*gap_to),
            f.settle_s,
            at(a_start),
            at(b_start),
            at(b_end),
            on_lb.join(", ")
        ));
    }

    // What B's slowest flip went through: its IP's healthy events, its gate's changes,
    // and the looks at its load balancer from its containers ready to its gate True.
    let since_start = |t: f64| format!("{:.1}", t - started_epoch);
    let slowest = b_flips.slowest.as_ref().and_then(|name| {
        let pod = seen.pods.get(name)?;
        let healthy_at = healthy.get(pod.ip.as_ref()?)?;
        Some((f.b_max, name, pod, healthy_at))
    });
    if let Some((flip, name, pod, healthy_at)) = slowest {
        let from = pod.containers_ready.unwrap_or(pod.first_seen);
        let until = pod.gate_true.unwrap_or(b_end);
        let gate: Vec<String> = seen
            .changes
            .iter()
            .filter(|c| &c.pod == name)
            .map(|c| {
                format!(
                    "{} {} {} ({})",
                    since_start(c.at),
                    c.status,
                    c.reason,
                    c.message
                )
            })
            .collect();
        let looks: Vec<String> = looks_of(&pod.app)
            .iter()
            .filter(|&&t| t >= from && t <= until)
            .map(|&t| since_start(t))
            .collect();
        note(format!(
            "{}: B's slowest flip, {name} ({}, {}): {flip:.1} s; first seen {}, containers ready {}, gate True {}; healthy events of its IP: {}; its gate: {}; looks at its load balancer meanwhile: {}",
            f.label,
            pod.app,
            pod.ip.as_deref().unwrap_or("-"),
            since_start(pod.first_seen),
            pod.containers_ready.map_or("-".into(), since_start),
            since_start(until),
            healthy_at.iter().map(|&t| since_start(t)).collect::<Vec<_>>().join(", "),
            gate.join("; "),
            looks.join(", ")
        ));
    }

    // Calls by action against the limits.
    let limit_of: HashMap<String, String> = limits["actions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| {
            Some((
                format!("{}:{}", a["product"].as_str()?, a["action"].as_str()?),
                a["limit"].as_str().unwrap_or("none").to_string(),
            ))
        })
        .collect();
    let idle = calls_by_action(&calls, idle_start, idle_end);
    let during_b = calls_by_action(&calls, b_start, b_end);
    let scenarios = calls_by_action(&calls, a_start, b_end);
    let keys: BTreeSet<&String> = idle
        .keys()
        .chain(during_b.keys())
        .chain(scenarios.keys())
        .collect();
    for key in keys {
        let get = |m: &BTreeMap<String, (u64, u64, u64)>| m.get(key).copied().unwrap_or_default();
        f.calls.insert(
            key.clone(),
            (
                limit_of.get(key).cloned().unwrap_or_else(|| "none".into()),
                get(&idle).0 as f64 / f.idle_s.max(0.001),
                get(&during_b).0 as f64 / f.b_s.max(0.001),
                get(&during_b).2,
                get(&scenarios).1,
            ),
        );
    }
    f.throttled_settle = calls
        .iter()
        .filter(|c| c.throttled && c.at < a_start)
        .count() as u64;
    f.throttled_scenarios = calls
        .iter()
        .filter(|c| c.throttled && c.at >= a_start)
        .count() as u64;

    // Did a throttling error reach a gate?
    for c in &seen.changes {
        if c.reason.contains("Throttling") || c.message.contains("Throttling") {
            let line = format!("{} {} {}: {}", c.pod, c.status, c.reason, c.message);
            if c.at < a_start {
                f.gate_throttling_settle.push(line);
            } else {
                f.gate_throttling_scenarios.push(line);
            }
        }
    }
    let live: HashSet<String> = Api::<Pod>::namespaced(client.clone(), &ns.name)
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| p.name_any())
        .collect();
    f.gates_not_true_at_end = seen
        .pods
        .iter()
        .filter(|(name, pod)| {
            live.contains(*name) && pod.gate.as_ref().is_none_or(|g| g.0 != "True")
        })
        .count();
    controller.crash();
    Ok(())
}

// ------------------------------------------------------------------ the report

fn report(p: &Params, runs: &[Figures]) -> String {
    let nlb = (0..p.services).filter(|&i| p.is_nlb(i)).count();
    let mut out = format!(
        "gates_fleet: {} LoadBalancer Services ({} CLB, {nlb} NLB) x {} gated pods on {} simulated nodes, emulator rate limits on{}, registration {} ms, health {} ms; A: {} rollout(s) in turn, B: {} at once (maxSurge {}, maxUnavailable 0)\n",
        p.services,
        p.services - nlb,
        p.pods,
        p.nodes,
        if p.rate_limits.is_empty() { String::new() } else { format!(" plus {}", p.rate_limits.join(", ")) },
        p.registration.as_millis(),
        p.health.as_millis(),
        p.a,
        p.b,
        p.max_surge,
    );
    let goal = |v: f64, limit: f64| {
        if p.quick {
            "(printed)"
        } else if v <= limit {
            "pass"
        } else {
            "MISS"
        }
    };
    out.push_str("| metric | ");
    out.push_str(
        &runs
            .iter()
            .map(|r| r.label.as_str())
            .collect::<Vec<_>>()
            .join(" | "),
    );
    if runs.len() == 2 {
        out.push_str(" | new / today");
    }
    out.push_str(" | goal |\n|---|");
    out.push_str(&"---|".repeat(runs.len() + if runs.len() == 2 { 2 } else { 1 }));
    out.push('\n');
    let mut row = |name: &str, value: &dyn Fn(&Figures) -> f64, unit: &str, goal_text: String| {
        out.push_str(&format!("| {name} |"));
        for r in runs {
            out.push_str(&format!(" {:.3}{unit} |", value(r)));
        }
        if runs.len() == 2 {
            out.push_str(&format!(" {:.2} |", value(&runs[1]) / value(&runs[0])));
        }
        out.push_str(&format!(" {goal_text} |\n"));
    };
    let last = runs.last().unwrap();
    row(
        "A: healthy in LB -> gate True, p50",
        &|r| r.a_p50,
        " s",
        format!("<= 1 s: {}", goal(last.a_p50, 1.0)),
    );
    row(
        "A: healthy in LB -> gate True, p99",
        &|r| r.a_p99,
        " s",
        format!("<= 2 s: {}", goal(last.a_p99, 2.0)),
    );
    row("A: max", &|r| r.a_max, " s", "(reference)".into());
    row(
        "A: the rollouts took",
        &|r| r.a_s,
        " s",
        "(reported)".into(),
    );
    row(
        "B: healthy in LB -> gate True, p50",
        &|r| r.b_p50,
        " s",
        "(reference)".into(),
    );
    row(
        "B: healthy in LB -> gate True, p99",
        &|r| r.b_p99,
        " s",
        format!("<= 2 s: {}", goal(last.b_p99, 2.0)),
    );
    row(
        "B: the rollouts took",
        &|r| r.b_s,
        " s",
        "(reported)".into(),
    );
    row(
        "B: longest wait for a look, a Service with a pending gate",
        &|r| r.pending_wait_max,
        " s",
        "(reported)".into(),
    );
    row(
        "B: longest wait for a look, a settled Service (lower bound)",
        &|r| r.settled_wait_max_b,
        " s",
        "(reported)".into(),
    );
    row(
        "idle: longest wait for a look, a settled Service (lower bound)",
        &|r| r.settled_wait_max_idle,
        " s",
        "(reported)".into(),
    );
    let nlb_count = (0..p.services).filter(|&i| p.is_nlb(i)).count();
    for (product, index, settled) in [("CLB", 0, p.services - nlb_count), ("NLB", 1, nlb_count)] {
        let bound = settled_look_bound_s(settled);
        row(
            &format!("whole run: longest wait for a look, a settled {product} Service"),
            &|r| r.settled_wait_run[index],
            " s",
            format!(
                "<= {bound:.0} s (the stated bound at {settled}): {}",
                goal(last.settled_wait_run[index], bound)
            ),
        );
    }
    row(
        "whole run: the longest settled window watched",
        &|r| r.settled_window_max,
        " s",
        "(a longer wait could not show)".into(),
    );
    row(
        "idle: Services with no look in the window",
        &|r| r.settled_without_look_idle as f64,
        "",
        "(reported)".into(),
    );
    row(
        "throttled calls, settle / scenarios",
        &|r| r.throttled_scenarios as f64,
        "",
        "(scenarios; settle in the notes)".into(),
    );
    row(
        "gate conditions with a throttling error, scenarios",
        &|r| r.gate_throttling_scenarios.len() as f64,
        "",
        "0".into(),
    );
    row(
        "controller CPU, settle",
        &|r| r.cpu_settle,
        " s",
        "(reported)".into(),
    );
    row(
        "controller CPU per second idle",
        &|r| r.cpu_idle / r.idle_s.max(0.001),
        " s/s",
        "(reported)".into(),
    );
    row("controller CPU, A", &|r| r.cpu_a, " s", "(reported)".into());
    row("controller CPU, B", &|r| r.cpu_b, " s", "(reported)".into());
    row(
        "controller peak RSS (VmHWM)",
        &|r| r.peak_rss_mib,
        " MiB",
        "(reported)".into(),
    );
    row(
        "controller RSS idle",
        &|r| r.rss_idle_mib,
        " MiB",
        "(reported)".into(),
    );
    row(
        "settle: controller start -> all gates True",
        &|r| r.settle_s,
        " s",
        "(the bed's cost)".into(),
    );
    for r in runs {
        out.push_str(&format!(
            "\n{}: samples A {} B {} ({} flips without a healthy event to match, {} timed from the pod's first sighting: its IP's old backend had stayed healthy); containers ready {:.0} s after the first create; throttled calls while settling {}; gate messages with a throttling error while settling {}, in the scenarios {}; gates not True at the end {}\n",
            r.label, r.a_samples, r.b_samples, r.unmatched, r.healthy_before_the_pod, r.containers_ready_s, r.throttled_settle,
            r.gate_throttling_settle.len(), r.gate_throttling_scenarios.len(), r.gates_not_true_at_end
        ));
        for line in &r.incomplete {
            out.push_str(&format!("  INCOMPLETE: {line}\n"));
        }
        for line in r.gate_throttling_scenarios.iter().take(3) {
            out.push_str(&format!("  throttling at a gate: {line}\n"));
        }
        out.push_str("| action | limit | idle calls/s | B calls/s | B busiest second | throttled in A+B |\n|---|---|---|---|---|---|\n");
        for (action, (limit, idle, b, busiest, throttled)) in &r.calls {
            out.push_str(&format!(
                "| {action} | {limit} | {idle:.2} | {b:.2} | {busiest} | {throttled} |\n"
            ));
        }
    }
    out
}

/// The figures of one fleet size, keyed below `gates.fleet.` (the caller adds the
/// prefix: with and without the size).
fn results(p: &Params, runs: &[Figures]) -> Vec<(String, Value)> {
    let mut entries: Vec<(String, Value)> = vec![
        ("services".into(), json!(p.services)),
        ("pods_per_service".into(), json!(p.pods)),
        ("b_rollouts".into(), json!(p.b)),
    ];
    let nlb = (0..p.services).filter(|&i| p.is_nlb(i)).count();
    entries.push((
        "settled_wait_bound_clb_s".into(),
        json!(settled_look_bound_s(p.services - nlb)),
    ));
    entries.push((
        "settled_wait_bound_nlb_s".into(),
        json!(settled_look_bound_s(nlb)),
    ));
    for r in runs {
        let key = if is_today(&r.label) { "today" } else { "new" };
        let mut put = |name: &str, v: Value| entries.push((format!("{key}.{name}"), v));
        put("label", json!(r.label));
        put("a_flip_p50_s", json!(r.a_p50));
        put("a_flip_p99_s", json!(r.a_p99));
        put("b_flip_p50_s", json!(r.b_p50));
        put("b_flip_p99_s", json!(r.b_p99));
        put("b_rollouts_s", json!(r.b_s));
        put("b_pending_wait_max_s", json!(r.pending_wait_max));
        put("b_settled_wait_max_s", json!(r.settled_wait_max_b));
        put("idle_settled_wait_max_s", json!(r.settled_wait_max_idle));
        put("run_settled_wait_max_clb_s", json!(r.settled_wait_run[0]));
        put("run_settled_wait_max_nlb_s", json!(r.settled_wait_run[1]));
        put("run_settled_window_max_s", json!(r.settled_window_max));
        put(
            "settle_progress",
            json!(r
                .progress
                .iter()
                .map(|x| json!([x.0, x.1, x.2]))
                .collect::<Vec<_>>()),
        );
        put("throttled_calls_scenarios", json!(r.throttled_scenarios));
        put(
            "gate_throttling_errors_scenarios",
            json!(r.gate_throttling_scenarios.len()),
        );
        put("controller_cpu_settle_s", json!(r.cpu_settle));
        put(
            "controller_cpu_idle_per_s",
            json!(r.cpu_idle / r.idle_s.max(0.001)),
        );
        put("controller_cpu_b_s", json!(r.cpu_b));
        put("controller_peak_rss_mb", json!(r.peak_rss_mib));
        put("settle_s", json!(r.settle_s));
        put(
            "calls_per_s_b",
            json!(r
                .calls
                .iter()
                .map(|(a, c)| (a.clone(), json!(c.2)))
                .collect::<serde_json::Map<_, _>>()),
        );
    }
    entries
}

/// What the quick run counts as a stall: the longest flip of A or B, or the longest
/// wait of a pending Service for a look, over `QUICK_STALL`.
fn quick_stalls(f: &Figures) -> Vec<String> {
    [
        ("longest flip in A", f.a_max),
        ("longest flip in B", f.b_max),
        (
            "longest wait for a look of a Service with a pending gate",
            f.pending_wait_max,
        ),
    ]
    .into_iter()
    .filter(|(_, seconds)| *seconds > QUICK_STALL)
    .map(|(what, seconds)| format!("{what} {seconds:.1} s"))
    .collect()
}

async fn run(p: Params) -> Result<String, String> {
    let client = client().await;
    let nodes_started = Instant::now();
    let nodes = TestNodes::create(&client, "bench-fleet", p.nodes).await;
    note(format!(
        "{} nodes Ready in {:.0} s",
        p.nodes,
        nodes_started.elapsed().as_secs_f64()
    ));
    let mut text = String::new();
    let mut runs = vec![];
    let mut failure = None;
    'sizes: for (k, &size) in p.sizes.iter().enumerate() {
        let ps = p.at_size(size);
        runs = vec![];
        // Today's code may not settle a fleet at all (at 100 Services it stopped making
        // load balancers: docs/performance.md). That is a result, not the end of the
        // run: what it made by its timeout is reported and the new code still runs.
        let mut today_unsettled = None;
        for (i, (label, binary)) in p.binaries.iter().enumerate() {
            note(format!(
                "gates_fleet: {size} Services, {label}: {}",
                binary.display()
            ));
            let last = k + 1 == p.sizes.len() && i + 1 == p.binaries.len();
            let (f, result) = run_fleet(&ps, &client, &nodes, label, binary, last).await;
            match result {
                Ok(()) => runs.push(f),
                Err(e) if is_today(label) => {
                    note(format!("gates_fleet: {label} failed, the next runs: {e}"));
                    today_unsettled = Some((f, e));
                }
                Err(e) => {
                    failure = Some(e);
                    break 'sizes;
                }
            }
        }
        let mut section = report(&ps, &runs);
        let mut entries = results(&ps, &runs);
        if let Some((today, e)) = &today_unsettled {
            section = format!("{section}\nFAILED, so not in the table: {e}\n");
            entries.push(("today.failed".into(), json!(e)));
            entries.push((
                "today.settle_progress".into(),
                json!(today
                    .progress
                    .iter()
                    .map(|x| json!([x.0, x.1, x.2]))
                    .collect::<Vec<_>>()),
            ));
        }
        // What today's code made by its timeout beside what the new code made by then.
        let today = runs
            .iter()
            .find(|r| is_today(&r.label))
            .or(today_unsettled.as_ref().map(|(f, _)| f));
        if let (Some(today), Some(new)) = (today, runs.iter().find(|r| !is_today(&r.label))) {
            if let Some(&(at, lbs, gates)) = today.progress.last() {
                let (new_at, new_lbs, new_gates) = progress_at(&new.progress, at);
                section.push_str(&format!(
                    "\nsettle progress, {at:.0} s after the controller started: {} made {lbs} load balancers, {gates} gates True; {} by {new_at:.0} s: {new_lbs} and {new_gates}\n",
                    today.label, new.label
                ));
                entries.push(("compare_at_s".into(), json!(at)));
                entries.push(("today.lbs_made_at_compare".into(), json!(lbs)));
                entries.push(("today.gates_true_at_compare".into(), json!(gates)));
                entries.push(("new.lbs_made_at_compare".into(), json!(new_lbs)));
                entries.push(("new.gates_true_at_compare".into(), json!(new_gates)));
            }
        }
        text.push_str(&section);
        text.push('\n');
        // Every size under its own keys (the plot); the largest fleet measured in the
        // results file also without (the table), so a later run of a smaller size adds
        // a point to the plot without replacing the table's figures.
        let mut merged: Vec<(String, Value)> = entries
            .iter()
            .map(|(k, v)| (format!("gates.fleet.by_services.{size}.{k}"), v.clone()))
            .collect();
        if size >= largest_recorded_fleet() {
            merged.extend(
                entries
                    .iter()
                    .map(|(k, v)| (format!("gates.fleet.{k}"), v.clone())),
            );
        }
        let refs: Vec<(&str, Value)> = merged
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        if let Err(e) = merge_bench_results(&refs) {
            note(format!("results.json: {e}"));
        }
    }
    nodes.cleanup().await;
    if let Some(e) = failure {
        return Err(format!("{text}{e}"));
    }
    if p.quick {
        let last = runs.last().unwrap();
        if !last.gate_throttling_scenarios.is_empty() {
            return Err(format!(
                "{text}\na throttling error reached {} gate condition(s) during the scenarios",
                last.gate_throttling_scenarios.len()
            ));
        }
        if !last.incomplete.is_empty()
            || last.gates_not_true_at_end > 0
            || last.a_samples == 0
            || last.b_samples == 0
        {
            return Err(format!(
                "{text}\n{} gate(s) not True at the end; flips measured: A {}, B {}; unfinished rollouts: {:?}",
                last.gates_not_true_at_end, last.a_samples, last.b_samples, last.incomplete
            ));
        }
        let stalls = quick_stalls(last);
        if !stalls.is_empty() {
            return Err(format!(
                "{text}\nstalled (over {QUICK_STALL} s): {}",
                stalls.join("; ")
            ));
        }
    }
    Ok(text)
}
