//! The dashboard and the alerts in `deploy/monitoring/`, checked against the controller
//! itself on the local control plane:
//! - every metric a dashboard query or an alert names is one that a running controller
//!   (both controllers on, the readiness-gate one pointed at the emulator) exports;
//! - `promtool test rules` passes on series recorded from a real rollout: healthy, then
//!   paused with a new template, then resumed onto an image that never pulls (a real
//!   stall with every node Ready), then the controller stopped. No alert fires while the
//!   rollout is healthy or paused; `RollgateRolloutStalled` fires for the stall and
//!   `RollgateNoLeader` once the controller is gone;
//! - `promtool test rules` on series recorded from a real gated run on the emulator
//!   (NLB): a healthy gated rollout, then a rollout whose new backend never turns
//!   healthy, then backend registrations that fail (failed NLB jobs). No alert fires
//!   while the rollout is healthy; `RollgateGatesPending` fires for the held gate and
//!   `RollgateCloudErrors` for the failing `AddBackends` calls;
//! - and on scenarios for what a short real run cannot reach (sustained throttling:
//!   the client retries a throttled call up to 8 times over 10-20 s, so at this time
//!   dilation its failures are too sparse for the 5-minute rate; two standby replicas),
//!   each beside a look-alike that must not fire.
//!
//! Time is dilated in the recorded run: each 1 s scrape becomes one sample a minute
//! apart, so the alerts' 15-minute windows span about 20 s of the run. A healthy rollout
//! then looks 60 times slower than it was, which only makes a false "no progress" alert
//! more likely; a stall (an image that never pulls) lasts forever either way.
//!
//! promtool is built once per version from its Go module (`hack/build-promtool.sh`, cached
//! outside the clone; `make test` starts that build early). Needs `make cluster-up`.
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams};
use kube::Api;
use lb_emulator::EmulatorConfig;
use serde_json::{json, Value};
use support::daemonset::{create_edge_v1_and_wait, image_of, wait_ready_on, Others};
use support::gated::{fast_emulator, GatedBed};
use support::*;

const RULES: &str = "deploy/monitoring/prometheus-rule.yaml";
const DASHBOARD: &str = "deploy/monitoring/grafana-dashboard.json";

/// The rule groups of the PrometheusRule (its `.spec`, a Prometheus rule file as is).
fn rule_groups() -> Value {
    let text = std::fs::read_to_string(repo_root().join(RULES)).unwrap();
    let rule: Value = serde_saphyr::from_str(&text).unwrap();
    rule["spec"]["groups"].clone()
}

fn alert_rules() -> Vec<Value> {
    rule_groups()
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().clone())
        .filter(|r| r.get("alert").is_some())
        .collect()
}

fn alert_rule(name: &str) -> Value {
    alert_rules()
        .into_iter()
        .find(|r| r["alert"] == name)
        .unwrap_or_else(|| panic!("no alert {name} in {RULES}"))
}

/// Every PromQL expression of the alerts and of the dashboard's panels.
fn expressions() -> Vec<(String, String)> {
    fn walk(v: &Value, out: &mut Vec<(String, String)>) {
        match v {
            Value::Object(map) => {
                if let Some(Value::String(expr)) = map.get("expr") {
                    out.push((format!("{DASHBOARD} query"), expr.clone()));
                }
                map.values().for_each(|v| walk(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out: Vec<(String, String)> = alert_rules()
        .iter()
        .map(|r| {
            (
                format!("alert {}", r["alert"].as_str().unwrap()),
                r["expr"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let dashboard: Value =
        serde_json::from_slice(&std::fs::read(repo_root().join(DASHBOARD)).unwrap()).unwrap();
    walk(&dashboard["panels"], &mut out);
    out
}

/// The `rollgate_*` metric names a PromQL expression reads.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find("rollgate_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// The sample names an OpenMetrics exposition serves, from its `# TYPE` lines (so a
/// family with no sample yet counts): counters as `_total`, histograms as their parts.
fn exported_sample_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let (Some(name), Some(kind)) = (words.next(), words.next()) else {
            continue;
        };
        match kind {
            "counter" => {
                names.insert(format!("{name}_total"));
            }
            "histogram" => {
                for part in ["bucket", "sum", "count"] {
                    names.insert(format!("{name}_{part}"));
                }
            }
            _ => {
                names.insert(name.to_string());
            }
        }
    }
    names
}

/// One scrape: series (`name{labels}` as served, valid PromQL) to value; `None` when
/// the scrape failed (the controller is gone).
type Scrape = Option<BTreeMap<String, f64>>;

fn parse_scrape(text: &str, keep: &BTreeSet<String>) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let name = series.split('{').next()?;
            keep.contains(name)
                .then(|| Some((series.to_string(), value.parse().ok()?)))?
        })
        .collect()
}

/// The series the alert rules read, scraped from one controller every second: each
/// scrape is one sample, a minute apart in promtool's time.
struct Recording {
    samples: Arc<Mutex<Vec<Scrape>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Recording {
    fn start(addr: std::net::SocketAddr) -> Self {
        let keep: BTreeSet<String> = alert_rules()
            .iter()
            .flat_map(|r| metric_names(r["expr"].as_str().unwrap()))
            .collect();
        let samples: Arc<Mutex<Vec<Scrape>>> = Arc::default();
        let into = samples.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let scrape = match tokio::time::timeout(
                    Duration::from_millis(800),
                    http_request(addr, "GET", "/metrics"),
                )
                .await
                {
                    Ok(Ok(r)) if r.status == 200 => Some(parse_scrape(&r.body, &keep)),
                    _ => None,
                };
                into.lock().unwrap().push(scrape);
            }
        });
        Recording { samples, task }
    }

    /// The samples so far.
    fn count(&self) -> usize {
        self.samples.lock().unwrap().len()
    }

    /// Waits until `more` samples were added.
    async fn wait_samples(&self, more: usize) {
        let target = self.count() + more;
        while self.count() < target {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Stops scraping; what was recorded.
    fn stop(self) -> Recorded {
        self.task.abort();
        let samples = self.samples.lock().unwrap().clone();
        let series = samples
            .iter()
            .flatten()
            .flat_map(|s| s.keys().cloned())
            .collect();
        Recorded { samples, series }
    }
}

/// A finished recording: the samples and every series that appears in them.
struct Recorded {
    samples: Vec<Scrape>,
    series: BTreeSet<String>,
}

impl Recorded {
    /// The recording as promtool's input series, in one unit test named `name` with
    /// `checks`.
    fn promtool_test(&self, name: &str, checks: Vec<Value>) -> Value {
        let input: Vec<Value> = self
            .series
            .iter()
            .map(|s| json!({"series": s, "values": series_values(s, &self.samples)}))
            .collect();
        json!([{
            "name": name,
            "interval": "1m",
            "input_series": input,
            "alert_rule_test": checks,
        }])
    }
}

/// promtool's notation for one series over the samples: its value, `stale` where it
/// disappeared (as Prometheus marks a series gone from a scrape or a dead target) and
/// `_` while it stays away.
fn series_values(series: &str, samples: &[Scrape]) -> String {
    let mut out = Vec::with_capacity(samples.len());
    let mut present = false;
    for scrape in samples {
        match scrape.as_ref().and_then(|s| s.get(series)) {
            Some(v) => {
                present = true;
                out.push(if v.fract() == 0.0 {
                    format!("{}", *v as i64)
                } else {
                    format!("{v}")
                });
            }
            None if present => {
                present = false;
                out.push("stale".into());
            }
            None => out.push("_".into()),
        }
    }
    out.join(" ")
}

/// What promtool must see firing: the alert's labels (those of the series plus the
/// rule's) and its annotations rendered for them.
fn firing(alert: &str, series_labels: &[(&str, &str)]) -> Value {
    let rule = alert_rule(alert);
    let mut labels: BTreeMap<String, String> = series_labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    for (k, v) in rule["labels"].as_object().unwrap() {
        labels.insert(k.clone(), v.as_str().unwrap().to_string());
    }
    let annotations: BTreeMap<String, String> = rule["annotations"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            let mut text = v.as_str().unwrap().to_string();
            for (name, value) in series_labels {
                text = text.replace(&format!("{{{{ $labels.{name} }}}}"), value);
            }
            assert!(
                !text.contains("{{"),
                "{alert}: a template this test cannot render: {text}"
            );
            (k.clone(), text)
        })
        .collect();
    json!({"exp_labels": labels, "exp_annotations": annotations})
}

/// One check: at `minute`, `alert` fires exactly for `expected` (empty: not at all).
fn check(minute: usize, alert: &str, expected: Vec<Value>) -> Value {
    json!({"eval_time": format!("{minute}m"), "alertname": alert, "exp_alerts": expected})
}

/// Every alert is silent at `minute`.
fn all_silent(minute: usize) -> Vec<Value> {
    alert_rules()
        .iter()
        .map(|r| check(minute, r["alert"].as_str().unwrap(), vec![]))
        .collect()
}

fn promtool() -> PathBuf {
    let out = std::process::Command::new("bash")
        .arg(repo_root().join("hack/build-promtool.sh"))
        .output()
        .expect("running hack/build-promtool.sh");
    assert!(
        out.status.success(),
        "hack/build-promtool.sh failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim()).join("promtool")
}

/// Writes the rules and `tests` as promtool unit-test files into `dir` and runs
/// `promtool check rules` and `promtool test rules` on them (YAML reads JSON).
fn run_promtool(dir: &Path, tests: &[(&str, Value)]) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("rules.json"),
        serde_json::to_vec_pretty(&json!({"groups": rule_groups()})).unwrap(),
    )
    .unwrap();
    let promtool = promtool();
    let mut args = vec!["test".to_string(), "rules".to_string()];
    for (name, test) in tests {
        let file = dir.join(format!("{name}.test.json"));
        let body = json!({
            "rule_files": ["rules.json"],
            "evaluation_interval": "1m",
            "tests": test,
        });
        std::fs::write(&file, serde_json::to_vec_pretty(&body).unwrap()).unwrap();
        args.push(file.to_str().unwrap().to_string());
    }
    for args in [
        vec![
            "check".to_string(),
            "rules".to_string(),
            dir.join("rules.json").to_str().unwrap().to_string(),
        ],
        args,
    ] {
        let out = std::process::Command::new(&promtool)
            .args(&args)
            .current_dir(dir)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        note(format!("promtool {}:\n{text}", args.join(" ")));
        assert!(out.status.success(), "promtool {} failed:\n{text}", args[0]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn every_metric_the_dashboard_and_the_alerts_name_is_exported() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "monitoring-names").await;
    let emu = EmulatorProcess::start(&EmulatorConfig::default());
    let mut env = emu.controller_env();
    env.push(("ROLLGATE_CLOUD_VPC_ID".into(), "vpc-monitoring".into()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let controller = ControllerProcess::start_with_env(&ns.name, "names", &env);
    let text = wait_for(
        "both controllers' metric families",
        Duration::from_secs(60),
        || async {
            let text = controller.metrics().await;
            for family in ["rollgate_daemonset_pods_pending", "rollgate_gate_pending"] {
                if !text.contains(&format!("# TYPE {family} ")) {
                    return Err(format!("{family} not registered yet"));
                }
            }
            Ok(text)
        },
    )
    .await;
    let exported = exported_sample_names(&text);
    let mut unknown = Vec::new();
    let mut named = 0;
    for (whence, expr) in expressions() {
        for name in metric_names(&expr) {
            named += 1;
            if !exported.contains(&name) {
                unknown.push(format!("{whence}: {name} in `{expr}`"));
            }
        }
    }
    assert!(
        named > 20,
        "only {named} metric names found: is the parse right?"
    );
    assert!(
        unknown.is_empty(),
        "metrics the controller does not export:\n{}\nexported: {exported:?}",
        unknown.join("\n")
    );
    controller.stop();
    ns.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn the_alerts_fire_for_what_they_name_and_not_for_a_healthy_or_paused_rollout() {
    let client = client().await;
    let nodes = TestNodes::create(&client, "monitoring", 3).await;
    let ns = TestNamespace::new(&client, "monitoring").await;
    let n = ns.name.clone();
    let controller = ControllerProcess::start(&n, "monitoring");
    let dss: Api<DaemonSet> = Api::namespaced(client.clone(), &n);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &n);
    let annotations = json!({
        "apps.openyurt.io/update-strategy": "AdvancedRollingUpdate",
        "apps.openyurt.io/max-unavailable": "1",
    });
    create_edge_v1_and_wait(
        &dss,
        &pods,
        &nodes,
        annotations,
        Shape::ToleratesAll,
        Duration::from_secs(90),
    )
    .await;

    let recording = Recording::start(controller.metrics_addr().await);
    let set = |patch: Value| {
        let dss = dss.clone();
        async move {
            dss.patch("edge", &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
        }
    };
    let image = |image: &str| json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": image}]}}}});

    note("phase 1: a healthy rollout to edge:v2");
    recording.wait_samples(3).await;
    set(image("edge:v2")).await;
    wait_ready_on(
        &pods,
        &nodes.names,
        "edge:v2",
        Others::None,
        Duration::from_secs(90),
    )
    .await;
    recording.wait_samples(3).await;
    let healthy_end = recording.count();

    note("phase 2: paused with a new template (an image that never pulls) for 25 samples");
    set(json!({"metadata": {"annotations": {"rollgate.io/paused": "true"}}})).await;
    set(image("edge:unpullable-v3")).await;
    recording.wait_samples(25).await;
    let paused_end = recording.count();
    let v2_left = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|p| image_of(p) == "edge:v2" && pod_is_ready(p))
        .count();
    assert_eq!(v2_left, 3, "the pause let a pod go");

    note("phase 3: resumed: the first new pod never starts, every node Ready");
    set(json!({"metadata": {"annotations": {"rollgate.io/paused": "false"}}})).await;
    recording.wait_samples(26).await;
    let stall_end = recording.count();
    let list = pods.list(&ListParams::default()).await.unwrap().items;
    assert!(
        list.iter()
            .any(|p| image_of(p) == "edge:unpullable-v3" && !pod_is_ready(p)),
        "no new pod is stuck, so this is no stall: {}",
        describe_pods(&list)
    );
    assert!(
        !list
            .iter()
            .any(|p| image_of(p) == "edge:unpullable-v3" && pod_is_ready(p)),
        "an unpullable pod became Ready"
    );

    note("phase 4: the controller stopped");
    controller.stop();
    recording.wait_samples(8).await;
    let recorded = recording.stop();
    let end = recorded.samples.len();
    note(format!(
        "recorded {end} scrapes: healthy ..{healthy_end}, paused ..{paused_end}, stalled ..{stall_end}"
    ));

    assert!(
        recorded
            .series
            .iter()
            .any(|s| s.starts_with("rollgate_daemonset_pods_updated{")),
        "the recording has no DaemonSet series: {:?}",
        recorded.series
    );
    let mut checks: Vec<Value> = (1..paused_end).flat_map(all_silent).collect();
    // Resumed 10 minutes ago: the pause is still inside the 15-minute window.
    checks.push(check(paused_end + 10, "RollgateRolloutStalled", vec![]));
    checks.push(check(
        stall_end - 1,
        "RollgateRolloutStalled",
        vec![firing(
            "RollgateRolloutStalled",
            &[("namespace", &n), ("daemonset", "edge")],
        )],
    ));
    checks.push(check(stall_end - 1, "RollgateNoLeader", vec![]));
    checks.push(check(
        end - 1,
        "RollgateNoLeader",
        vec![firing("RollgateNoLeader", &[])],
    ));
    let recorded = recorded.promtool_test(
        "a real rollout: healthy, paused, stalled, controller stopped",
        checks,
    );

    let dir = repo_root().join("target/monitoring");
    run_promtool(&dir, &[("recorded", recorded), ("scenarios", scenarios())]);
    nodes.cleanup().await;
    ns.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn the_gate_and_cloud_alerts_fire_on_a_recorded_gated_run_and_not_while_it_is_healthy() {
    let bed = GatedBed::new("monitoring-gates", 1, &fast_emulator(), &[]).await;
    let n = bed.ns.name.clone();
    let ports = json!([{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}]);
    bed.create_nlb_service("web", ports).await;
    let controller = bed.controller.as_ref().unwrap();
    let recording = Recording::start(controller.metrics_addr().await);
    let deployments = bed.deployments();
    let set = |patch: Value| {
        let deployments = deployments.clone();
        async move {
            deployments
                .patch("web", &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
        }
    };
    let gate = "service.readiness.alibabacloud.com/web";
    let pending_gates = |pods: &[Pod]| {
        pods.iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| pod_condition(p, gate).as_deref() != Some("True"))
            .count()
    };

    note("phase 1: a healthy gated rollout (two pods registered and healthy)");
    recording.wait_samples(2).await;
    bed.create_deployment("web", 2).await;
    bed.wait_gates("web", 2, "True", Duration::from_secs(90))
        .await;
    recording.wait_samples(3).await;
    let healthy_end = recording.count();

    note("phase 2: a new template whose backend never turns healthy, for 24 samples");
    bed.emulator_post("timing", json!({"health_delay_ms": 3_600_000}))
        .await;
    set(json!({"spec": {"template": {"metadata": {"annotations": {"rollout": "2"}}}}})).await;
    recording.wait_samples(24).await;
    let pending_end = recording.count();
    let pods = bed.app_pods("web").await;
    assert_eq!(
        pending_gates(&pods),
        1,
        "one new pod's gate held: {}",
        describe_pods(&pods)
    );

    note("phase 3: registrations fail (every NLB job fails), one more pod, for 24 samples");
    bed.emulator_post("jobs", json!({"fail_rate": 1.0})).await;
    set(json!({"spec": {"replicas": 3}})).await;
    recording.wait_samples(24).await;
    let errors_end = recording.count();
    let recorded = recording.stop();
    let pods = bed.app_pods("web").await;
    assert_eq!(
        pending_gates(&pods),
        2,
        "the new pod's gate held too: {}",
        describe_pods(&pods)
    );
    note(format!(
        "recorded {errors_end} scrapes: healthy ..{healthy_end}, gates pending ..{pending_end}, cloud errors ..{errors_end}"
    ));
    let failed_adds =
        r#"rollgate_gate_cloud_api_calls_total{action="AddBackends",result="job_failed"}"#;
    assert!(
        recorded.series.contains(failed_adds),
        "the recording has no failed AddBackends: {:?}",
        recorded.series
    );
    let web = [("namespace", n.as_str()), ("service", "web")];
    let mut checks: Vec<Value> = (1..healthy_end).flat_map(all_silent).collect();
    // Held for 10 minutes: not yet.
    checks.push(check(healthy_end + 10, "RollgateGatesPending", vec![]));
    checks.push(check(
        pending_end - 1,
        "RollgateGatesPending",
        vec![firing("RollgateGatesPending", &web)],
    ));
    // A held gate is no cloud error, nor throttling.
    checks.push(check(pending_end - 1, "RollgateCloudErrors", vec![]));
    checks.push(check(pending_end - 1, "RollgateCloudThrottled", vec![]));
    checks.push(check(
        errors_end - 1,
        "RollgateCloudErrors",
        vec![firing("RollgateCloudErrors", &[("action", "AddBackends")])],
    ));
    checks.push(check(errors_end - 1, "RollgateCloudThrottled", vec![]));
    checks.push(check(errors_end - 1, "RollgateNoLeader", vec![]));
    let recorded = recorded.promtool_test(
        "a real gated run: healthy, a gate held, registrations failing",
        checks,
    );
    // A folder of its own: the other recorded test runs beside this one.
    let dir = repo_root().join("target/monitoring-gates");
    run_promtool(&dir, &[("recorded-gates", recorded)]);
    bed.cleanup().await;
}

/// The alerts a short real run cannot reach, each with a look-alike that must not fire.
fn scenarios() -> Value {
    let edge = [("namespace", "edge"), ("daemonset", "agent")];
    let web = [("namespace", "shop"), ("service", "web")];
    let test = |name: &str, series: &[(&str, &str)], checks: Vec<Value>| {
        json!({
            "name": name,
            "interval": "1m",
            "input_series": series
                .iter()
                .map(|(s, v)| json!({"series": s, "values": v}))
                .collect::<Vec<_>>(),
            "alert_rule_test": checks,
        })
    };
    let stalled =
        r#"rollgate_daemonset_native_controller_stalled{namespace="edge",daemonset="agent"}"#;
    let pending = r#"rollgate_gate_pending{namespace="shop",service="web"}"#;
    let calls = |result: &str, action: &str| {
        format!(r#"rollgate_gate_cloud_api_calls_total{{action="{action}",result="{result}"}}"#)
    };
    let throttled = |action: &str| {
        format!(r#"rollgate_gate_cloud_api_throttled_total{{api="clb",action="{action}"}}"#)
    };
    let leader = |pod: &str| format!(r#"rollgate_leader{{pod="{pod}"}}"#);
    let halted = r#"rollgate_daemonset_rollout_halted{namespace="edge",daemonset="agent"}"#;
    let rollbacks = r#"rollgate_daemonset_rollbacks_total{namespace="edge",daemonset="agent"}"#;
    let stuck = |halted_values: &'static str| {
        [
            (
                r#"rollgate_daemonset_pods_pending{namespace="edge",daemonset="agent"}"#,
                "3x30",
            ),
            (
                r#"rollgate_daemonset_nodes_skipped_not_ready{namespace="edge",daemonset="agent"}"#,
                "0x30",
            ),
            (
                r#"rollgate_daemonset_nodes_held_back{namespace="edge",daemonset="agent"}"#,
                "0x30",
            ),
            (
                r#"rollgate_daemonset_pods_updated{namespace="edge",daemonset="agent"}"#,
                "2x30",
            ),
            (
                r#"rollgate_daemonset_rollout_paused{namespace="edge",daemonset="agent"}"#,
                "0x30",
            ),
            (halted, halted_values),
        ]
    };
    json!([
        test(
            "a revision halts on its failures and stays halted",
            &[(halted, "0 0 1x10")],
            vec![
                check(2, "RollgateRolloutHalted", vec![]),
                check(
                    4,
                    "RollgateRolloutHalted",
                    vec![firing("RollgateRolloutHalted", &edge)]
                ),
            ],
        ),
        test(
            "a halted rollout is said halted, not stalled",
            &stuck("1x30"),
            vec![
                check(25, "RollgateRolloutStalled", vec![]),
                check(
                    25,
                    "RollgateRolloutHalted",
                    vec![firing("RollgateRolloutHalted", &edge)]
                ),
            ],
        ),
        test(
            "the same rollout stuck without a halt is stalled",
            &stuck("0x30"),
            vec![
                check(
                    25,
                    "RollgateRolloutStalled",
                    vec![firing("RollgateRolloutStalled", &edge)]
                ),
                check(25, "RollgateRolloutHalted", vec![]),
            ],
        ),
        test(
            "a rollback is said, and stops being said an hour later",
            &[(rollbacks, "0 0 1x80")],
            vec![
                check(1, "RollgateRolledBack", vec![]),
                check(
                    3,
                    "RollgateRolledBack",
                    vec![firing("RollgateRolledBack", &edge)]
                ),
                check(70, "RollgateRolledBack", vec![]),
            ],
        ),
        test(
            "a rollback counter that does not move is no alert",
            &[(rollbacks, "1x80")],
            vec![
                check(3, "RollgateRolledBack", vec![]),
                check(70, "RollgateRolledBack", vec![])
            ],
        ),
        test(
            "a halt a fixed template ends within the minute",
            &[(halted, "0 1 0x10")],
            vec![
                check(2, "RollgateRolloutHalted", vec![]),
                check(5, "RollgateRolloutHalted", vec![])
            ],
        ),
        test(
            "the native controller stalls for good",
            &[(stalled, "0 0 1x12")],
            vec![
                check(5, "RollgateNativeControllerStalled", vec![]),
                check(
                    9,
                    "RollgateNativeControllerStalled",
                    vec![firing("RollgateNativeControllerStalled", &edge)]
                ),
            ],
        ),
        test(
            "the native controller catches up within minutes",
            &[(stalled, "0 1 1 1 0 1 1 0x8")],
            vec![
                check(8, "RollgateNativeControllerStalled", vec![]),
                check(13, "RollgateNativeControllerStalled", vec![])
            ],
        ),
        test(
            "a gate stays pending",
            &[(pending, "2 1x20")],
            vec![
                check(14, "RollgateGatesPending", vec![]),
                check(
                    17,
                    "RollgateGatesPending",
                    vec![firing("RollgateGatesPending", &web)]
                ),
            ],
        ),
        test(
            "a rollout's gates come and go",
            &[(pending, "0 2 1 0 0 3 1 0 2 0 0 1 1 0 3 2 0 0 1 0 0")],
            vec![check(20, "RollgateGatesPending", vec![])],
        ),
        test(
            "a third of the reads fail",
            &[
                (&calls("success", "ReadGroup"), "0+10x30"),
                (&calls("server_error", "ReadGroup"), "0+5x30")
            ],
            vec![
                check(8, "RollgateCloudErrors", vec![]),
                check(
                    20,
                    "RollgateCloudErrors",
                    vec![firing("RollgateCloudErrors", &[("action", "ReadGroup")])]
                ),
            ],
        ),
        test(
            "one read in twenty fails",
            &[
                (&calls("success", "ReadGroup"), "0+19x30"),
                (&calls("server_error", "ReadGroup"), "0+1x30")
            ],
            vec![check(20, "RollgateCloudErrors", vec![])],
        ),
        test(
            "writes throttled for good",
            &[
                (&calls("success", "AddBackends"), "0+3x30"),
                (&throttled("AddVServerGroupBackendServers"), "0+1x30")
            ],
            vec![
                check(8, "RollgateCloudThrottled", vec![]),
                check(
                    20,
                    "RollgateCloudThrottled",
                    vec![firing(
                        "RollgateCloudThrottled",
                        &[("api", "clb"), ("action", "AddVServerGroupBackendServers")]
                    )]
                ),
                // Throttled calls are not errors too.
                check(20, "RollgateCloudErrors", vec![]),
            ],
        ),
        test(
            "one burst of throttling",
            &[
                (&calls("success", "AddBackends"), "0+3x30"),
                (&throttled("AddVServerGroupBackendServers"), "0 0 4 4x28")
            ],
            vec![
                check(10, "RollgateCloudThrottled", vec![]),
                check(20, "RollgateCloudThrottled", vec![])
            ],
        ),
        test(
            "both replicas standby",
            &[(&leader("a"), "1x5 0x20"), (&leader("b"), "0x25")],
            vec![
                check(8, "RollgateNoLeader", vec![]),
                check(
                    12,
                    "RollgateNoLeader",
                    vec![firing("RollgateNoLeader", &[])]
                ),
            ],
        ),
        test(
            "the lease moves to the other replica",
            &[(&leader("a"), "1x5 0x20"), (&leader("b"), "0x6 1x19")],
            vec![
                check(12, "RollgateNoLeader", vec![]),
                check(20, "RollgateNoLeader", vec![])
            ],
        ),
    ])
}
