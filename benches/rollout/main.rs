//! DaemonSet rollouts at fleet size, each beside a real baseline measured in the same run
//! (issues 12 and 13), on the local control plane's simulated nodes.
//!
//! At every size (`ROLLGATE_BENCH_SIZES`, default "200 1000"), on the same nodes, with the
//! same budget and pod start/stop delays:
//! - (a) Kubernetes' own RollingUpdate, `maxUnavailable` = the budget, all nodes Ready;
//! - (b) rollgate AdvancedRollingUpdate, all nodes Ready, with the defaults (a new
//!   revision proves itself on the failure threshold's nodes first, issue 45), and again
//!   with `rollgate.io/on-failure: continue` (no proof, the configuration (a) has);
//! - (c) rollgate with 10% of the nodes NotReady (heartbeat loss), tolerate-all DaemonSet;
//! - (d) the native rolling update with the same NotReady nodes, watched as long as (c)
//!   took: how far it got.
//!
//! At the first size, when yurt-manager is there (`YURT_MANAGER`, default the shared
//! OpenYurt v1.7.0 baseline), the same under it (`vs_openyurt.*`): AdvancedRollingUpdate
//! all Ready; 10% NotReady with a tolerate-all and a tolerate-none DaemonSet (rollgate
//! too); the cut-off nodes coming back (half under each controller, with the bed's
//! re-report delay `POD_REREPORT_DELAY_MS`); OTA marking and what is left when a DaemonSet
//! stops being OTA; each controller's memory and CPU. One controller process runs at a
//! time. One budget watcher (watcher.rs), which knows neither controller, watches every
//! scenario.
//!
//! Environment: `ROLLGATE_BENCH_SIZES` (`none`: only the pull-ahead scenarios),
//! `ROLLGATE_BENCH_MAX_UNAVAILABLE` (10%),
//! `ROLLGATE_BENCH_POD_DELAY_MS` (3000), `ROLLGATE_BENCH_STOP_DELAY_MS` (500: the
//! cluster's POD_STOP_DELAY_MS, for the ideal), `ROLLGATE_BENCH_NOT_READY_PERCENT` (10), `ROLLGATE_BENCH_REPEATS` (3: (a) and (b) alternate, medians reported),
//! `YURT_MANAGER`, `BENCH_QUICK=1` (50 nodes, pod delay 1 s, (a) (b) (c) and yurt-manager's
//! (a) and (b): the harness check `make test` runs), `ROLLGATE_TEST_KUBECONFIG`.
//!
//! After every size, the pull-ahead scenarios (`pull_ahead.rs`, issue 26): the same
//! AdvancedRollingUpdate with and without `rollgate.io/pull-ahead`, on nodes where a
//! missing image takes 20 s to pull (quick: 20 nodes, 5 s); per-node downtime and
//! makespan (`pull_ahead.*`). `ROLLGATE_BENCH_PULL=0` skips them.
//!
//! Then a release that crash-loops (`bad_release.rs`, issue 45): native RollingUpdate,
//! yurt-manager (not in the quick run) and rollgate (halt, rollback, a canary wave) on
//! 200 nodes (quick: 20), each watched as long (`rollout.bad_release.*`, the plot
//! `bad-release.png` from `bad-release.json`). `ROLLGATE_BENCH_BAD_RELEASE=0` skips it.
//!
//! Results: `results.json` (`rollout.*`, `vs_openyurt.*`) and `timelines.json` (for the
//! plots) in `target/bench` (`ROLLGATE_BENCH_OUT`). A MISS is a result; the process fails
//! only when a measurement could not be made.
#[path = "../../tests/support/mod.rs"]
mod support;

mod analysis;
mod bad_release;
mod controllers;
mod pull_ahead;
mod scenario;
mod watcher;

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use kube::Client;
use serde_json::{json, Value};
use support::{bench_main, env_or, note, TestNodes};

use controllers::{ControllerUnderTest, Usage, Which};
use scenario::{Prepared, Rollout, Setup, Shape, Strategy, NEW_IMAGE, ON_FAILURE};

struct Params {
    sizes: Vec<usize>,
    max_unavailable: String,
    pod_delay: Duration,
    stop_delay: Duration,
    not_ready_percent: usize,
    /// All-Ready (a)/(b) pairs per size; the median of each is reported.
    repeats: usize,
    quick: bool,
    yurt: Result<std::path::PathBuf, String>,
    /// The pull-ahead scenarios (`pull_ahead`), after every size.
    pull: pull_ahead::PullParams,
    /// The crash-looping release (`bad_release`), last.
    bad: bad_release::BadParams,
}

impl Params {
    fn from_env() -> Result<Self, String> {
        let quick = std::env::var("BENCH_QUICK").is_ok_and(|v| v == "1");
        let sizes_text: String = env_or(
            "ROLLGATE_BENCH_SIZES",
            if quick { "50" } else { "200 1000" }.to_string(),
        )?;
        // `none`: no size runs, only what follows them (the pull-ahead scenarios).
        let none = sizes_text.trim() == "none";
        let sizes = sizes_text
            .split([' ', ','])
            .filter(|s| !s.is_empty() && !none)
            .map(|s| {
                s.parse::<usize>()
                    .ok()
                    .filter(|n| *n >= 10)
                    .ok_or_else(|| format!("ROLLGATE_BENCH_SIZES: {s:?} is not a node count >= 10"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if sizes.is_empty() && !none {
            return Err("ROLLGATE_BENCH_SIZES is empty (`none` runs no size)".into());
        }
        Ok(Params {
            sizes,
            max_unavailable: env_or("ROLLGATE_BENCH_MAX_UNAVAILABLE", "10%".to_string())?,
            pod_delay: Duration::from_millis(env_or(
                "ROLLGATE_BENCH_POD_DELAY_MS",
                if quick { 1000u64 } else { 3000 },
            )?),
            stop_delay: Duration::from_millis(env_or("ROLLGATE_BENCH_STOP_DELAY_MS", 500u64)?),
            not_ready_percent: env_or("ROLLGATE_BENCH_NOT_READY_PERCENT", 10usize)?,
            repeats: env_or("ROLLGATE_BENCH_REPEATS", if quick { 1usize } else { 3 })?.max(1),
            quick,
            yurt: controllers::yurt_manager_binary(),
            pull: pull_ahead::PullParams::from_env(quick)?,
            bad: bad_release::BadParams::from_env(quick)?,
        })
    }

    /// The budget in nodes, the way both controllers and Kubernetes read it
    /// (percentages round up).
    fn budget(&self, nodes: usize) -> Result<usize, String> {
        budget_of(&self.max_unavailable, nodes)
    }
}

/// `max_unavailable` (a count or a percentage) in nodes of `nodes`.
fn budget_of(max_unavailable: &str, nodes: usize) -> Result<usize, String> {
    let budget = match max_unavailable.strip_suffix('%') {
        Some(pct) => {
            let pct: usize = pct
                .parse()
                .map_err(|_| format!("bad percentage {max_unavailable:?}"))?;
            (nodes * pct).div_ceil(100)
        }
        None => max_unavailable
            .parse()
            .map_err(|_| format!("bad count {max_unavailable:?}"))?,
    };
    Ok(budget.clamp(1, nodes.max(1)))
}

fn main() -> ExitCode {
    bench_main("rollout", Params::from_env(), run)
}

/// Everything measured at one size.
#[derive(Default)]
struct SizeResults {
    nodes: usize,
    budget: usize,
    /// The median of the all-Ready runs, and every run's makespan in run order.
    native: Option<Rollout>,
    rollgate: Option<Rollout>,
    native_makespans: Vec<Option<Duration>>,
    rollgate_makespans: Vec<Option<Duration>>,
    /// (b) with `rollgate.io/on-failure: continue`: no proving wave, the configuration
    /// native RollingUpdate has (median, and every run).
    rollgate_continue: Option<Rollout>,
    rollgate_continue_makespans: Vec<Option<Duration>>,
    rollgate_not_ready: Option<Rollout>,
    native_not_ready: Option<Rollout>,
    rollgate_not_ready_none: Option<Rollout>,
    yurt: Option<Rollout>,
    yurt_not_ready: Option<Rollout>,
    yurt_not_ready_none: Option<Rollout>,
    comeback: BTreeMap<&'static str, Vec<Option<Duration>>>,
    /// Times over the budget while each controller's cut-off nodes came back.
    comeback_violations: BTreeMap<&'static str, usize>,
    ota: BTreeMap<&'static str, (Option<Duration>, usize, usize)>,
    usage: BTreeMap<&'static str, ControllerUsage>,
    /// Why a part was not measured.
    skipped: Vec<String>,
    /// Nodes the test bed showed Ready while cut off: any makes this size's NotReady
    /// figures invalid (see `support::ghost_ready`).
    ghost_ready: Vec<support::ghost_ready::Ghost>,
}

/// What one controller process used over its scenarios.
#[derive(Default)]
struct ControllerUsage {
    peak_rss_mb: f64,
    /// CPU seconds during its all-Ready AdvancedRollingUpdate.
    cpu_s_aru: Option<f64>,
    /// Reconciles (plans) during that rollout: what the CPU is spent on, as a count.
    reconciles_aru: Option<f64>,
    /// CPU seconds during each NotReady rollout, tolerate-all then tolerate-none: apart,
    /// because a controller that stalls in one does less work there.
    cpu_s_notready: [Option<f64>; 2],
}

impl ControllerUsage {
    fn peak(&mut self, usage: &Usage) {
        self.peak_rss_mb = self.peak_rss_mb.max(usage.peak_rss_mb);
    }
}

async fn run(params: Params) -> Result<String, String> {
    let client = support::client().await;
    let started = Instant::now();
    let load_before = load_average();
    let out_dir = support::bench_results_path()
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    let mut all = Vec::new();
    let mut load_after = load_before.clone();
    let mut path = support::bench_results_path();
    for (i, &n) in params.sizes.iter().enumerate() {
        let with_yurt = i == 0 && params.yurt.is_ok();
        let results = run_size(&client, &params, n, with_yurt).await?;
        all.push(results);
        // Written after every size: a long run cut short keeps what it measured.
        load_after = load_average();
        write_timelines(&out_dir, &params, &all)?;
        let entries = result_entries(&params, &all, &load_before, &load_after);
        let borrowed: Vec<(&str, Value)> = entries
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        path = support::merge_bench_results(&borrowed)?;
    }
    let mut report = report(&params, &all);
    if params.pull.run {
        let p = &params.pull;
        let budget = budget_of(&p.max_unavailable, p.nodes)?;
        let waves = p.nodes.div_ceil(budget) as u32;
        let timeout = ((params.pod_delay + params.stop_delay + p.pull) * waves * 3)
            .max(Duration::from_secs(120));
        let measured = pull_ahead::measure(
            &client,
            p,
            budget,
            params.pod_delay,
            params.stop_delay,
            timeout,
        )
        .await?;
        let entries = pull_ahead::entries(&measured);
        let borrowed: Vec<(&str, Value)> = entries
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        path = support::merge_bench_results(&borrowed)?;
        report.push_str(&pull_ahead::report(&measured));
    }
    if params.bad.run {
        let b = &params.bad;
        let budget = budget_of(&b.max_unavailable, b.nodes)?;
        let yurt = match &params.yurt {
            _ if params.quick => Err("not in the quick run".to_string()),
            Ok(_) => Ok(()),
            Err(why) => Err(why.clone()),
        };
        let measured = bad_release::measure(&client, b, budget, params.pod_delay, yurt).await?;
        let entries = bad_release::entries(&measured);
        let borrowed: Vec<(&str, Value)> = entries
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        path = support::merge_bench_results(&borrowed)?;
        let timelines = serde_json::to_string_pretty(&bad_release::timelines(&measured))
            .map_err(|e| e.to_string())?;
        std::fs::write(out_dir.join("bad-release.json"), timelines)
            .map_err(|e| format!("writing bad-release.json: {e}"))?;
        report.push_str(&bad_release::report(&measured));
    }
    report.push_str(&format!(
        "\nload average before {load_before}, after {load_after}; {:.0} s in all; results in {}\n",
        started.elapsed().as_secs_f64(),
        path.display()
    ));
    Ok(report)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// The run with the median makespan (one that did not complete counts as the slowest).
fn median_run(mut runs: Vec<Rollout>) -> Rollout {
    runs.sort_by_key(|run| run.makespan.unwrap_or(Duration::MAX));
    let middle = (runs.len() - 1) / 2;
    runs.swap_remove(middle)
}

/// A generous limit for a rollout that should complete: ten times the ideal, at least 2 min.
fn rollout_timeout(params: &Params, nodes: usize, budget: usize) -> Duration {
    let batches = nodes.div_ceil(budget) as u32;
    ((params.pod_delay + params.stop_delay) * batches * 10).max(Duration::from_secs(120))
}

async fn run_size(
    client: &Client,
    params: &Params,
    n: usize,
    with_yurt: bool,
) -> Result<SizeResults, String> {
    let budget = params.budget(n)?;
    note(format!(
        "== {n} nodes, max-unavailable {} (budget {budget}) ==",
        params.max_unavailable
    ));
    note(format!("creating {n} simulated nodes"));
    let nodes = TestNodes::create(client, "bench", n).await;
    let selector = nodes.selector();
    let setup = Setup {
        client,
        owner: &nodes.owner,
        selector: &selector,
        nodes: n,
        max_unavailable: &params.max_unavailable,
        budget,
        pod_delay: params.pod_delay,
    };
    // Spread over the name order (rollgate deletes in ascending node name).
    let cut_count = (n * params.not_ready_percent).div_ceil(100).min(n - 1);
    let step = n / cut_count.max(1);
    let cut: Vec<String> = (0..cut_count)
        .map(|i| nodes.names[i * step + step / 2].clone())
        .collect();
    let timeout = rollout_timeout(params, n, budget);
    let mut r = SizeResults {
        nodes: n,
        budget,
        ..Default::default()
    };
    let outcome = measure_size(params, &setup, &nodes, &cut, timeout, with_yurt, &mut r).await;
    // Heartbeats back on, whatever happened, before the nodes go.
    for node in &cut {
        nodes.set_heartbeat(node, true).await;
    }
    r.ghost_ready = nodes.take_ghost_ready();
    for ghost in &r.ghost_ready {
        note(format!(
            "INVALID RUN: the bed showed a cut-off node Ready: {ghost}"
        ));
    }
    nodes.cleanup().await;
    outcome?;
    Ok(r)
}

async fn measure_size(
    params: &Params,
    setup: &Setup<'_>,
    nodes: &TestNodes,
    cut: &[String],
    timeout: Duration,
    with_yurt: bool,
    r: &mut SizeResults,
) -> Result<(), String> {
    let n = setup.nodes;
    let aru = |tolerate_all| Shape {
        strategy: Strategy::Advanced,
        tolerate_all,
    };
    let native_shape = Shape {
        strategy: Strategy::Native,
        tolerate_all: true,
    };
    let ota_shape = Shape {
        strategy: Strategy::Ota,
        tolerate_all: true,
    };
    let full = !params.quick;
    let vs_openyurt_full = with_yurt && full;

    // ---- all nodes Ready ----
    // (a) and (b) alternate `repeats` times, so a slow minute of the machine does not
    // decide the ratio; each reports its median run.
    let mut natives = Vec::new();
    let mut rollgates = Vec::new();
    let mut continues = Vec::new();
    let mut no_proof = serde_json::Map::new();
    no_proof.insert(ON_FAILURE.into(), json!("continue"));
    let mut aru_cpu = 0.0;
    let mut aru_reconciles = None;
    let mut rollgate = None;
    for round in 1..=params.repeats {
        let tag = if params.repeats > 1 {
            format!(" #{round}")
        } else {
            String::new()
        };
        let a = setup
            .prepare(&format!("{n}/a-native{tag}"), native_shape)
            .await?;
        natives.push(a.roll(timeout, None).await?);
        a.cleanup().await;

        let b = setup
            .prepare(&format!("{n}/b-rollgate{tag}"), aru(true))
            .await?;
        // One controller at a time: rollgate runs only while its own rollouts do.
        let running = ControllerUnderTest::start(Which::Rollgate, &format!("{n}-ready")).await?;
        let cpu0 = running.usage().cpu_s;
        let reconciles0 = running.reconciles().await;
        rollgates.push(b.roll(timeout, None).await?);
        aru_cpu = running.usage().cpu_s - cpu0;
        aru_reconciles = reconciles_since(reconciles0, running.reconciles().await);
        b.cleanup().await;
        // (b) without the proving wave, by the same controller process: what rollgate's
        // own batching costs beside native's, apart from the proof (issue 46).
        let b2 = setup
            .prepare_to(
                &format!("{n}/b-rollgate-continue{tag}"),
                aru(true),
                no_proof.clone(),
                NEW_IMAGE,
            )
            .await?;
        continues.push(b2.roll(timeout, None).await?);
        b2.cleanup().await;
        if round < params.repeats {
            running.stop();
        } else {
            rollgate = Some(running);
        }
    }
    r.native_makespans = natives.iter().map(|run| run.makespan).collect();
    r.rollgate_makespans = rollgates.iter().map(|run| run.makespan).collect();
    r.native = Some(median_run(natives));
    r.rollgate = Some(median_run(rollgates));
    r.rollgate_continue_makespans = continues.iter().map(|run| run.makespan).collect();
    r.rollgate_continue = Some(median_run(continues));
    let rollgate = rollgate.expect("at least one round");
    if vs_openyurt_full {
        let ota = setup
            .prepare(&format!("{n}/ota-rollgate"), ota_shape)
            .await?;
        r.ota
            .insert("rollgate", ota.ota(timeout, Duration::from_secs(10)).await?);
        ota.cleanup().await;
    }
    let usage = r.usage.entry("rollgate").or_default();
    usage.peak(&rollgate.stop());
    usage.cpu_s_aru = Some(aru_cpu);
    usage.reconciles_aru = aru_reconciles;

    if with_yurt {
        let y = setup.prepare(&format!("{n}/a-openyurt"), aru(true)).await?;
        let yurt = ControllerUnderTest::start(Which::OpenYurt, &format!("{n}-ready")).await?;
        let cpu0 = yurt.usage().cpu_s;
        let reconciles0 = yurt.reconciles().await;
        r.yurt = Some(y.roll(timeout, None).await?);
        let aru_cpu = yurt.usage().cpu_s - cpu0;
        let aru_reconciles = reconciles_since(reconciles0, yurt.reconciles().await);
        y.cleanup().await;
        if vs_openyurt_full {
            let ota = setup
                .prepare(&format!("{n}/ota-openyurt"), ota_shape)
                .await?;
            r.ota
                .insert("openyurt", ota.ota(timeout, Duration::from_secs(10)).await?);
            ota.cleanup().await;
        }
        let usage = r.usage.entry("openyurt").or_default();
        usage.peak(&yurt.stop());
        usage.cpu_s_aru = Some(aru_cpu);
        usage.reconciles_aru = aru_reconciles;
    }

    // ---- 10% of the nodes NotReady ----
    // Every DaemonSet runs before the cut, as in the field: the network drops, then a new
    // version is released.
    let c = setup
        .prepare(&format!("{n}/c-rollgate-notready"), aru(true))
        .await?;
    let d = if full {
        Some(
            setup
                .prepare(&format!("{n}/d-native-notready"), native_shape)
                .await?,
        )
    } else {
        None
    };
    let rg_none = if with_yurt {
        Some(
            setup
                .prepare(&format!("{n}/rollgate-notready-tolerate-none"), aru(false))
                .await?,
        )
    } else {
        None
    };
    let (y_all, y_none) = if with_yurt {
        (
            Some(
                setup
                    .prepare(&format!("{n}/openyurt-notready"), aru(true))
                    .await?,
            ),
            Some(
                setup
                    .prepare(&format!("{n}/openyurt-notready-tolerate-none"), aru(false))
                    .await?,
            ),
        )
    } else {
        (None, None)
    };
    note(format!("cutting the heartbeat of {} nodes", cut.len()));
    for node in cut {
        nodes.set_heartbeat(node, false).await;
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while c.watcher.nodes_are(cut, false) < cut.len() {
        if Instant::now() > deadline {
            return Err(format!(
                "only {} of {} cut-off nodes went NotReady within 120 s",
                c.watcher.nodes_are(cut, false),
                cut.len()
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The node-lifecycle controller marks their pods not Ready right after.
    tokio::time::sleep(Duration::from_secs(2)).await;
    note(format!("{} nodes NotReady", cut.len()));

    let rollgate = ControllerUnderTest::start(Which::Rollgate, &format!("{n}-notready")).await?;
    let cpu0 = rollgate.usage().cpu_s;
    let rc = c.roll(timeout, None).await?;
    let c_took = rc.makespan.unwrap_or(rc.watched);
    r.rollgate_not_ready = Some(rc);
    let cpu1 = rollgate.usage().cpu_s;
    if let Some(p) = &rg_none {
        r.rollgate_not_ready_none = Some(p.roll(timeout, None).await?);
    }
    let cpu2 = rollgate.usage().cpu_s;
    let usage = r.usage.entry("rollgate").or_default();
    usage.peak(&rollgate.stop());
    usage.cpu_s_notready = [Some(cpu1 - cpu0), rg_none.as_ref().map(|_| cpu2 - cpu1)];

    if let Some(d) = d {
        r.native_not_ready = Some(d.roll(timeout, Some(c_took)).await?);
        d.cleanup().await;
    }

    if let (Some(ya), Some(yn)) = (&y_all, &y_none) {
        let yurt = ControllerUnderTest::start(Which::OpenYurt, &format!("{n}-notready")).await?;
        let cpu0 = yurt.usage().cpu_s;
        r.yurt_not_ready = Some(ya.roll(timeout, None).await?);
        let cpu1 = yurt.usage().cpu_s;
        r.yurt_not_ready_none = Some(yn.roll(timeout, None).await?);
        let cpu2 = yurt.usage().cpu_s;
        let usage = r.usage.entry("openyurt").or_default();
        usage.peak(&yurt.stop());
        usage.cpu_s_notready = [Some(cpu1 - cpu0), Some(cpu2 - cpu1)];
    }

    // ---- the cut-off nodes come back: half with rollgate running, half with
    // yurt-manager ----
    if vs_openyurt_full {
        let (first, second): (Vec<String>, Vec<String>) = {
            let (a, b): (Vec<_>, Vec<_>) = cut.iter().enumerate().partition(|(i, _)| i % 2 == 0);
            (
                a.into_iter().map(|(_, n)| n.clone()).collect(),
                b.into_iter().map(|(_, n)| n.clone()).collect(),
            )
        };
        let comeback_timeout = Duration::from_secs(90);
        // Each controller comes back to its own DaemonSets alone. The other's are taken
        // away meanwhile: rollgate used to finish yurt-manager's stalled tolerate-none
        // rollout during its own comeback, and that load slowed its pods.
        let yurts: Vec<&Prepared> = [&y_all, &y_none].into_iter().flatten().collect();
        let rollgates: Vec<&Prepared> =
            [Some(&c), rg_none.as_ref()].into_iter().flatten().collect();
        for p in &yurts {
            p.set_managed(false).await?;
        }
        let rollgates_violations =
            |ps: &[&Prepared]| ps.iter().map(|p| p.watcher.violations()).sum::<usize>();
        {
            let rollgate =
                ControllerUnderTest::start(Which::Rollgate, &format!("{n}-comeback-rollgate"))
                    .await?;
            let restored = Instant::now();
            note(format!(
                "heartbeat back on {} nodes (rollgate running)",
                first.len()
            ));
            let before = rollgates_violations(&rollgates);
            for node in &first {
                nodes.set_heartbeat(node, true).await;
            }
            let mut times = c.comeback(&first, restored, comeback_timeout).await;
            if let Some(p) = &rg_none {
                times.extend(p.comeback(&first, restored, comeback_timeout).await);
            }
            r.comeback.insert("rollgate", times);
            r.comeback_violations
                .insert("rollgate", rollgates_violations(&rollgates) - before);
            drop(rollgate);
        }
        for p in &rollgates {
            p.set_managed(false).await?;
        }
        for p in &yurts {
            p.set_managed(true).await?;
        }
        if let (Some(ya), Some(yn)) = (&y_all, &y_none) {
            let yurt =
                ControllerUnderTest::start(Which::OpenYurt, &format!("{n}-comeback")).await?;
            let restored = Instant::now();
            note(format!(
                "heartbeat back on {} nodes (yurt-manager running)",
                second.len()
            ));
            let before = ya.watcher.violations() + yn.watcher.violations();
            for node in &second {
                nodes.set_heartbeat(node, true).await;
            }
            let mut times = ya.comeback(&second, restored, comeback_timeout).await;
            times.extend(yn.comeback(&second, restored, comeback_timeout).await);
            r.comeback.insert("openyurt", times);
            r.comeback_violations.insert(
                "openyurt",
                ya.watcher.violations() + yn.watcher.violations() - before,
            );
            drop(yurt);
        }
    } else if with_yurt {
        r.skipped
            .push("comeback and OTA: not in the quick run".to_string());
    }
    // Pods on cut-off nodes only go away once their node is back.
    for node in cut {
        nodes.set_heartbeat(node, true).await;
    }
    let cleanups = [Some(c), rg_none, y_all, y_none]
        .into_iter()
        .flatten()
        .map(Prepared::cleanup);
    futures::future::join_all(cleanups).await;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Figures
// ---------------------------------------------------------------------------------------

fn secs(d: Option<Duration>) -> Value {
    d.map_or(Value::Null, |d| {
        json!((d.as_secs_f64() * 100.0).round() / 100.0)
    })
}

/// Every run's makespan, in run order, as `secs` writes one.
fn secs_each(runs: &[Option<Duration>]) -> Value {
    json!(runs.iter().map(|m| secs(*m)).collect::<Vec<_>>())
}

fn round(v: f64, digits: i32) -> Value {
    let f = 10f64.powi(digits);
    json!((v * f).round() / f)
}

/// The ideal makespan with the stop delay: batches x (start + stop).
fn ideal(params: &Params, nodes: usize, budget: usize) -> Duration {
    (params.pod_delay + params.stop_delay) * nodes.div_ceil(budget) as u32
}

fn ms_percentile(sorted: &[Duration], p: f64) -> Value {
    support::measure::percentile(sorted, p)
        .map_or(Value::Null, |d| round(d.as_secs_f64() * 1000.0, 1))
}

fn ratio(a: Option<Duration>, b: Option<Duration>) -> Value {
    match (a, b) {
        (Some(a), Some(b)) if !b.is_zero() => round(a.as_secs_f64() / b.as_secs_f64(), 3),
        _ => Value::Null,
    }
}

fn comeback_stats(times: &[Option<Duration>]) -> (Value, Value, usize) {
    let mut done: Vec<Duration> = times.iter().flatten().copied().collect();
    done.sort();
    let missing = times.len() - done.len();
    let p50 = support::measure::percentile(&done, 50.0);
    let max = done.last().copied();
    (secs(p50), secs(max), missing)
}

/// A yurt-manager rollout only counts when the binary was there.
fn measured_only(measured: bool, r: &Option<Rollout>) -> Option<&Rollout> {
    r.as_ref().filter(|_| measured)
}

fn result_entries(
    params: &Params,
    all: &[SizeResults],
    load_before: &str,
    load_after: &str,
) -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = Vec::new();
    let mut put = |k: String, v: Value| out.push((k, v));
    for (i, s) in all.iter().enumerate() {
        let prefix = if i == 0 {
            "rollout".to_string()
        } else {
            format!("rollout.{}_nodes", s.nodes)
        };
        let ideal = ideal(params, s.nodes, s.budget);
        let b = s.rollgate.as_ref();
        let a = s.native.as_ref();
        let b_make = b.and_then(|r| r.makespan);
        let a_make = a.and_then(|r| r.makespan);
        let gaps = b
            .map(|r| analysis::batch_gaps(&r.events))
            .unwrap_or_default();
        let native_gaps = a
            .map(|r| analysis::batch_gaps(&r.events))
            .unwrap_or_default();
        let path = b.map(|r| analysis::critical_path(&r.events));
        let native_path = a.map(|r| analysis::critical_path(&r.events));
        put(format!("{prefix}.nodes"), json!(s.nodes));
        put(format!("{prefix}.budget"), json!(s.budget));
        // Empty in a valid run; otherwise every NotReady figure of this size is void.
        put(
            format!("{prefix}.ghost_ready"),
            json!(s
                .ghost_ready
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()),
        );
        put(format!("{prefix}.makespan_s"), secs(b_make));
        put(format!("{prefix}.native_makespan_s"), secs(a_make));
        put(format!("{prefix}.vs_native_ratio"), ratio(b_make, a_make));
        // Every all-Ready run, in run order: (a) and (b) alternated; the figures above
        // are the medians.
        put(
            format!("{prefix}.native_makespans_s"),
            secs_each(&s.native_makespans),
        );
        put(
            format!("{prefix}.makespans_s"),
            secs_each(&s.rollgate_makespans),
        );
        let c_make = s.rollgate_continue.as_ref().and_then(|r| r.makespan);
        put(format!("{prefix}.continue_makespan_s"), secs(c_make));
        put(
            format!("{prefix}.continue_vs_native_ratio"),
            ratio(c_make, a_make),
        );
        put(
            format!("{prefix}.continue_makespans_s"),
            secs_each(&s.rollgate_continue_makespans),
        );
        let continue_gaps = s
            .rollgate_continue
            .as_ref()
            .map(|r| analysis::batch_gaps(&r.events))
            .unwrap_or_default();
        put(
            format!("{prefix}.continue_batch_gap_p50_ms"),
            ms_percentile(&continue_gaps, 50.0),
        );
        put(format!("{prefix}.ideal_s"), secs(Some(ideal)));
        put(
            format!("{prefix}.makespan_ratio"),
            ratio(b_make, Some(ideal)),
        );
        put(
            format!("{prefix}.native_makespan_ratio"),
            ratio(a_make, Some(ideal)),
        );
        put(
            format!("{prefix}.batch_gap_p50_ms"),
            ms_percentile(&gaps, 50.0),
        );
        put(
            format!("{prefix}.batch_gap_p99_ms"),
            ms_percentile(&gaps, 99.0),
        );
        put(
            format!("{prefix}.native_batch_gap_p50_ms"),
            ms_percentile(&native_gaps, 50.0),
        );
        put(
            format!("{prefix}.native_batch_gap_p99_ms"),
            ms_percentile(&native_gaps, 99.0),
        );
        put(
            format!("{prefix}.controller_share"),
            path.and_then(|p| p.controller_share())
                .map_or(Value::Null, |v| round(v, 3)),
        );
        put(
            format!("{prefix}.controller_critical_s"),
            path.map_or(Value::Null, |p| round(p.controller.as_secs_f64(), 2)),
        );
        put(
            format!("{prefix}.native_controller_share"),
            native_path
                .and_then(|p| p.controller_share())
                .map_or(Value::Null, |v| round(v, 3)),
        );
        put(
            format!("{prefix}.notready_makespan_s"),
            secs(s.rollgate_not_ready.as_ref().and_then(|r| r.makespan)),
        );
        put(
            format!("{prefix}.notready_nodes"),
            json!((s.nodes * params.not_ready_percent).div_ceil(100)),
        );
        match &s.native_not_ready {
            Some(d) => {
                put(
                    format!("{prefix}.native_notready_watched_s"),
                    secs(Some(d.watched)),
                );
                put(
                    format!("{prefix}.native_notready_updated"),
                    json!(d.updated),
                );
                put(
                    format!("{prefix}.native_notready_ready_nodes"),
                    json!(d.ready_nodes),
                );
            }
            None => {
                put(format!("{prefix}.native_notready_watched_s"), Value::Null);
                put(format!("{prefix}.native_notready_updated"), Value::Null);
                put(format!("{prefix}.native_notready_ready_nodes"), Value::Null);
            }
        }
        put(
            format!("{prefix}.peak_unavailable"),
            b.map_or(Value::Null, |r| json!(r.peak_unavailable)),
        );
        put(
            format!("{prefix}.notready_peak_unavailable"),
            s.rollgate_not_ready
                .as_ref()
                .map_or(Value::Null, |r| json!(r.peak_unavailable)),
        );
        put(
            format!("{prefix}.budget_violations"),
            json!([&s.rollgate, &s.rollgate_not_ready]
                .iter()
                .filter_map(|r| r.as_ref())
                .map(|r| r.violations)
                .sum::<usize>()),
        );
        // Every NotReady run of rollgate, both toleration shapes: excursions of any cause
        // (the watcher does not know why a node is unavailable).
        put(
            format!("{prefix}.notready_budget_violations"),
            json!([&s.rollgate_not_ready, &s.rollgate_not_ready_none]
                .iter()
                .filter_map(|r| r.as_ref())
                .map(|r| r.violations)
                .sum::<usize>()),
        );
        put(
            format!("{prefix}.pod_start_delay_ms"),
            json!(params.pod_delay.as_millis() as u64),
        );
        put(
            format!("{prefix}.pod_stop_delay_ms"),
            json!(params.stop_delay.as_millis() as u64),
        );
    }
    put("rollout.quick".into(), json!(params.quick));
    put("rollout.load_average_before".into(), json!(load_before));
    put("rollout.load_average_after".into(), json!(load_after));

    // ---- vs OpenYurt (first size) ----
    let first = &all[0];
    let v = "vs_openyurt";
    match &params.yurt {
        Err(reason) => {
            put(format!("{v}.reason"), json!(reason));
            put(format!("{v}.yurt_manager"), Value::Null);
        }
        Ok(path) => {
            put(format!("{v}.reason"), Value::Null);
            put(
                format!("{v}.yurt_manager"),
                json!(path.display().to_string()),
            );
        }
    }
    let measured = params.yurt.is_ok();
    put(format!("{v}.nodes"), json!(first.nodes));
    put(format!("{v}.budget"), json!(first.budget));
    let rg = first.rollgate.as_ref().and_then(|r| r.makespan);
    let oy = measured_only(measured, &first.yurt).and_then(|r| r.makespan);
    put(format!("{v}.aru_makespan_s.rollgate"), secs(rg));
    put(format!("{v}.aru_makespan_s.openyurt"), secs(oy));
    put(format!("{v}.aru_ratio"), ratio(rg, oy).clone());
    let oy_gaps = measured_only(measured, &first.yurt)
        .map(|r| analysis::batch_gaps(&r.events))
        .unwrap_or_default();
    put(
        format!("{v}.aru_batch_gap_p50_ms.openyurt"),
        ms_percentile(&oy_gaps, 50.0),
    );
    put(
        format!("{v}.aru_batch_gap_p99_ms.openyurt"),
        ms_percentile(&oy_gaps, 99.0),
    );
    for (shape_index, (shape, rg, oy)) in [
        (
            "tolerate_all",
            &first.rollgate_not_ready,
            &first.yurt_not_ready,
        ),
        (
            "tolerate_none",
            &first.rollgate_not_ready_none,
            &first.yurt_not_ready_none,
        ),
    ]
    .into_iter()
    .enumerate()
    {
        for (who, r) in [
            ("rollgate", rg.as_ref()),
            ("openyurt", measured_only(measured, oy)),
        ] {
            let k = format!("{v}.notready_{shape}.{who}");
            let cpu = first
                .usage
                .get(who)
                .and_then(|u| u.cpu_s_notready[shape_index])
                .filter(|_| r.is_some());
            put(
                format!("{k}.cpu_s"),
                cpu.map_or(Value::Null, |c| round(c, 2)),
            );
            // The fair CPU figure when one controller stalls: per pod it did upgrade.
            let per_pod = cpu
                .zip(r.map(|r| r.updated))
                .filter(|(_, updated)| *updated > 0)
                .map(|(c, updated)| c * 1000.0 / updated as f64);
            put(
                format!("{k}.cpu_ms_per_pod_upgraded"),
                per_pod.map_or(Value::Null, |c| round(c, 1)),
            );
            put(format!("{k}.makespan_s"), secs(r.and_then(|r| r.makespan)));
            put(
                format!("{k}.updated"),
                r.map_or(Value::Null, |r| json!(r.updated)),
            );
            put(
                format!("{k}.ready_nodes"),
                r.map_or(Value::Null, |r| json!(r.ready_nodes)),
            );
            put(
                format!("{k}.peak_unavailable"),
                r.map_or(Value::Null, |r| json!(r.peak_unavailable)),
            );
            put(
                format!("{k}.budget_violations"),
                r.map_or(Value::Null, |r| json!(r.violations)),
            );
        }
    }
    for who in ["rollgate", "openyurt"] {
        let times = first.comeback.get(who).filter(|_| measured);
        put(
            format!("{v}.comeback_budget_violations.{who}"),
            first
                .comeback_violations
                .get(who)
                .filter(|_| measured)
                .map_or(Value::Null, |v| json!(v)),
        );
        let (p50, max, missing) =
            times.map_or((Value::Null, Value::Null, 0), |t| comeback_stats(t));
        put(format!("{v}.comeback_p50_s.{who}"), p50);
        put(format!("{v}.comeback_max_s.{who}"), max);
        put(
            format!("{v}.comeback_not_upgraded.{who}"),
            times.map_or(Value::Null, |_| json!(missing)),
        );
        let ota = first.ota.get(who).filter(|_| measured);
        put(
            format!("{v}.ota_all_marked_s.{who}"),
            secs(ota.and_then(|o| o.0)),
        );
        put(
            format!("{v}.ota_left_behind.{who}"),
            ota.map_or(Value::Null, |o| json!(o.2)),
        );
        let usage = first.usage.get(who).filter(|_| measured);
        put(
            format!("{v}.peak_rss_mb.{who}"),
            usage.map_or(Value::Null, |u| round(u.peak_rss_mb, 1)),
        );
        put(
            format!("{v}.cpu_s_aru.{who}"),
            usage
                .and_then(|u| u.cpu_s_aru)
                .map_or(Value::Null, |c| round(c, 2)),
        );
        put(
            format!("{v}.reconciles_aru.{who}"),
            usage
                .and_then(|u| u.reconciles_aru)
                .map_or(Value::Null, |c| json!(c)),
        );
    }
    if let Some(reason) = first.skipped.first() {
        put(format!("{v}.partial"), json!(reason));
    } else {
        put(format!("{v}.partial"), Value::Null);
    }
    out
}

/// The timelines the plots draw: updated and unavailable nodes against time.
fn write_timelines(
    dir: &std::path::Path,
    params: &Params,
    all: &[SizeResults],
) -> Result<(), String> {
    let mut map = serde_json::Map::new();
    for s in all {
        let rollouts = [
            ("a", "native RollingUpdate", &s.native),
            ("b", "rollgate", &s.rollgate),
            ("c", "rollgate, 10% NotReady", &s.rollgate_not_ready),
            ("d", "native, 10% NotReady", &s.native_not_ready),
            (
                "c-none",
                "rollgate, 10% NotReady, tolerate none",
                &s.rollgate_not_ready_none,
            ),
            ("yurt-a", "yurt-manager", &s.yurt),
            ("yurt-c", "yurt-manager, 10% NotReady", &s.yurt_not_ready),
            (
                "yurt-c-none",
                "yurt-manager, 10% NotReady, tolerate none",
                &s.yurt_not_ready_none,
            ),
        ];
        let mut size = serde_json::Map::new();
        for (key, label, r) in rollouts {
            let Some(r) = r else { continue };
            let samples: Vec<Value> = r
                .samples
                .iter()
                .map(|s| json!([round(s.at.as_secs_f64(), 3), s.updated, s.unavailable]))
                .collect();
            size.insert(
                key.into(),
                json!({
                    "label": label,
                    "makespan_s": secs(r.makespan),
                    "watched_s": secs(Some(r.watched)),
                    "ready_nodes": r.ready_nodes,
                    "samples": samples,
                }),
            );
        }
        // (c): per controller, each returning pod's node Ready -> upgraded, null when not.
        let comeback: serde_json::Map<String, Value> = s
            .comeback
            .iter()
            .map(|(who, times)| {
                let times: Vec<Value> = times.iter().map(|t| secs(*t)).collect();
                (who.to_string(), json!(times))
            })
            .collect();
        map.insert(
            s.nodes.to_string(),
            json!({
                "nodes": s.nodes,
                "budget": s.budget,
                "batch_s": round((params.pod_delay + params.stop_delay).as_secs_f64(), 3),
                "rollouts": size,
                "comeback": comeback,
            }),
        );
    }
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let path = dir.join("timelines.json");
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&Value::Object(map)).map_err(|e| e.to_string())?,
    )
    .map_err(|e| format!("writing {}: {e}", path.display()))
}

fn fmt_s(d: Option<Duration>) -> String {
    d.map_or("-".into(), |d| format!("{:.2} s", d.as_secs_f64()))
}

/// The bench's own text report (the Markdown table of every bench comes from `report`).
fn report(params: &Params, all: &[SizeResults]) -> String {
    let mut out = String::from("== rollout: DaemonSet rollouts beside their baselines ==\n");
    out.push_str(&format!(
        "max-unavailable {}, pod start {} ms, stop {} ms, {}% NotReady{}\n",
        params.max_unavailable,
        params.pod_delay.as_millis(),
        params.stop_delay.as_millis(),
        params.not_ready_percent,
        if params.quick { ", QUICK run" } else { "" }
    ));
    for s in all {
        let ideal = ideal(params, s.nodes, s.budget);
        out.push_str(&format!(
            "\n{} nodes, budget {}, ideal {:.2} s ({} batches x (start + stop))\n",
            s.nodes,
            s.budget,
            ideal.as_secs_f64(),
            s.nodes.div_ceil(s.budget)
        ));
        out.push_str(&format!(
            "  {:<46} {:>10} {:>9} {:>8} {:>6} {:>10} {:>9} {:>9}\n",
            "scenario",
            "makespan",
            "updated",
            "x ideal",
            "peak",
            "violations",
            "gap p50",
            "gap p99"
        ));
        for r in [
            &s.native,
            &s.rollgate,
            &s.rollgate_continue,
            &s.yurt,
            &s.rollgate_not_ready,
            &s.native_not_ready,
            &s.rollgate_not_ready_none,
            &s.yurt_not_ready,
            &s.yurt_not_ready_none,
        ]
        .into_iter()
        .flatten()
        {
            let gaps = analysis::batch_gaps(&r.events);
            let fmt_ms = |p| {
                support::measure::percentile(&gaps, p).map_or("-".into(), |d| {
                    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
                })
            };
            out.push_str(&format!(
                "  {:<46} {:>10} {:>9} {:>8} {:>6} {:>10} {:>9} {:>9}\n",
                r.key,
                fmt_s(r.makespan),
                format!("{}/{}", r.updated, r.ready_nodes),
                r.makespan.map_or("-".into(), |m| format!(
                    "{:.3}",
                    m.as_secs_f64() / ideal.as_secs_f64()
                )),
                r.peak_unavailable,
                r.violations,
                fmt_ms(50.0),
                fmt_ms(99.0),
            ));
            if r.watch_errors > 0 {
                out.push_str(&format!("    ({} watch errors)\n", r.watch_errors));
            }
        }
        for (who, r) in [
            ("rollgate", &s.rollgate),
            ("native", &s.native),
            ("openyurt", &s.yurt),
        ] {
            if let Some(r) = r {
                let p = analysis::critical_path(&r.events);
                out.push_str(&format!(
                    "  critical path of {who} ({} cycles): controller {:.2} s ({:.1}%), stop {:.2} s, recreate+schedule {:.2} s, start {:.2} s\n",
                    p.cycles,
                    p.controller.as_secs_f64(),
                    p.controller_share().unwrap_or(0.0) * 100.0,
                    p.stop.as_secs_f64(),
                    p.recreate.as_secs_f64(),
                    p.start.as_secs_f64()
                ));
            }
        }
        for (who, times) in &s.comeback {
            let (p50, max, missing) = comeback_stats(times);
            out.push_str(&format!(
                "  comeback under {who}: node Ready -> pod upgraded p50 {p50} s, max {max} s, {missing} not upgraded\n"
            ));
        }
        for (who, (marked, pods, left)) in &s.ota {
            out.push_str(&format!(
                "  OTA under {who}: all {pods} pods PodNeedUpgrade=True in {}; {left} still carry it 10 s after the DaemonSet stopped being OTA\n",
                fmt_s(*marked)
            ));
        }
        for (who, usage) in &s.usage {
            let cpu = |c: Option<f64>| c.map_or("-".into(), |c| format!("{c:.2}"));
            let [all, none] = usage.cpu_s_notready;
            out.push_str(&format!(
                "  {who}: peak RSS {:.1} MiB, CPU {} s (all-Ready rollout), {} s and {} s (NotReady rollouts: tolerate-all, tolerate-none); {} reconciles in the all-Ready rollout\n",
                usage.peak_rss_mb,
                cpu(usage.cpu_s_aru),
                cpu(all),
                cpu(none),
                usage.reconciles_aru.map_or("-".into(), |c| format!("{c:.0}")),
            ));
        }
        for why in &s.skipped {
            out.push_str(&format!("  skipped: {why}\n"));
        }
        for ghost in &s.ghost_ready {
            out.push_str(&format!(
                "  INVALID: the bed showed a cut-off node Ready, so the NotReady figures above are void: {ghost}\n"
            ));
        }
    }
    if let Err(reason) = &params.yurt {
        out.push_str(&format!("\nvs OpenYurt: not measured: {reason}\n"));
    }
    out
}

/// Reconciles between two readings of a controller's counter, when both were read.
fn reconciles_since(before: Option<f64>, after: Option<f64>) -> Option<f64> {
    Some(after? - before.unwrap_or(0.0))
}
