//! A release that crash-loops (issue 45), beside Kubernetes' own RollingUpdate and
//! yurt-manager in one run: what each does to the fleet when the new revision cannot
//! start anywhere.
//!
//! On `nodes` simulated nodes (200; quick 20), budget `max_unavailable` (10%), every
//! DaemonSet tolerating every taint, the template goes from the old image to one whose
//! tag the bed's kwok stages crash-loop (`BAD_IMAGE`: the container waits in
//! `CrashLoopBackOff` with its restart count climbing, as a kubelet writes it). Each
//! scenario is watched for the same `window` (60 s; quick 20 s) by the one budget watcher
//! the other scenarios use, which knows no controller:
//! - native RollingUpdate, `maxUnavailable` = the budget;
//! - yurt-manager's AdvancedRollingUpdate (when its binary is there; not in the quick
//!   run);
//! - rollgate, `rollgate.io/on-failure` unset (`halt`, threshold 3);
//! - rollgate with `rollgate.io/on-failure: rollback`;
//! - rollgate with a canary wave of `canary` nodes (10; quick 3):
//!   `rollgate.io/waves: rollgate.test/bench-wave=canary; *`.
//!
//! Per scenario: Ready nodes without a working pod over time (the plot), the peak and
//! the node-seconds over the window (the blast radius), the pods of the bad revision
//! that failed, first failure -> the controller's `RolloutHalted` (or `RolloutRolledBack`)
//! Event, when every node served again (rollback), the nodes whose old pod was deleted,
//! and of them those outside the canary wave.
//!
//! And the price of proving a revision first (`rollgate.io/failure-threshold` below the
//! budget: the threshold's nodes go first, then the whole budget): a good release
//! rolled out by rollgate with the defaults, and with `rollgate.io/on-failure: continue`
//! (nothing proven first), on the same nodes, makespans side by side.
//!
//! Environment: `ROLLGATE_BENCH_BAD_RELEASE` (1; 0 skips), `ROLLGATE_BENCH_BAD_NODES`,
//! `ROLLGATE_BENCH_BAD_WINDOW_S`, `ROLLGATE_BENCH_BAD_CANARY`.
use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{json, Map, Value};

use crate::controllers::{ControllerUnderTest, Which};
use crate::scenario::{
    Prepared, Rollout, Setup, Shape, Strategy, TemplateChange, NEW_IMAGE, ON_FAILURE,
};
use crate::support::{env_or, note, TestNodes};
use crate::watcher::Kind;
use crate::{round, secs};

/// A tag the bed's kwok stages crash-loop (hack/kwok-stages.yaml, "crashloop").
pub const BAD_IMAGE: &str = "registry.local/edge-agent:v2-crashloop";
const WAVE_LABEL: &str = "rollgate.test/bench-wave";
const WAVES: &str = "rollgate.io/waves";
/// Events rollgate says when it stops a revision.
const HALTED: &str = "RolloutHalted";
const ROLLED_BACK: &str = "RolloutRolledBack";

pub struct BadParams {
    pub run: bool,
    pub nodes: usize,
    pub max_unavailable: String,
    pub window: Duration,
    pub canary: usize,
}

impl BadParams {
    pub fn from_env(quick: bool) -> Result<Self, String> {
        Ok(BadParams {
            run: env_or("ROLLGATE_BENCH_BAD_RELEASE", 1u8)? == 1,
            nodes: env_or(
                "ROLLGATE_BENCH_BAD_NODES",
                if quick { 20usize } else { 200 },
            )?,
            max_unavailable: env_or("ROLLGATE_BENCH_MAX_UNAVAILABLE", "10%".to_string())?,
            window: Duration::from_secs(env_or(
                "ROLLGATE_BENCH_BAD_WINDOW_S",
                if quick { 20u64 } else { 60 },
            )?),
            canary: env_or("ROLLGATE_BENCH_BAD_CANARY", if quick { 3usize } else { 10 })?,
        })
    }
}

/// The scenarios, in run order: (key in results.json, label, controller).
const SCENARIOS: [(&str, &str, Option<Which>); 5] = [
    ("native", "native RollingUpdate", None),
    ("openyurt", "yurt-manager", Some(Which::OpenYurt)),
    (
        "rollgate_halt",
        "rollgate, on-failure halt",
        Some(Which::Rollgate),
    ),
    (
        "rollgate_rollback",
        "rollgate, on-failure rollback",
        Some(Which::Rollgate),
    ),
    (
        "rollgate_canary",
        "rollgate, canary wave, halt",
        Some(Which::Rollgate),
    ),
];

/// What one scenario did, as the budget watcher and the Events saw it.
pub struct BadRun {
    pub key: &'static str,
    pub label: &'static str,
    pub rollout: Rollout,
    /// Nodes whose pod of the bad revision failed (`CrashLoopBackOff` and the like).
    pub failed_nodes: usize,
    pub first_failure: Option<Duration>,
    /// rollgate's `RolloutHalted` or `RolloutRolledBack`, whichever came first.
    pub stopped: Option<Duration>,
    pub rolled_back: Option<Duration>,
    /// After the first node went without a working pod: when every Ready node served
    /// again (and stayed so to the end of the window).
    pub serving_again: Option<Duration>,
    /// Ready nodes without a working pod, integrated over the window.
    pub node_seconds: f64,
    pub unavailable_at_end: usize,
    /// Nodes whose old pod was deleted.
    pub touched: usize,
    /// Of them, outside the canary wave (the canary scenario only).
    pub touched_outside_canary: Option<usize>,
}

pub struct BadResults {
    pub nodes: usize,
    pub budget: usize,
    pub window: Duration,
    pub canary: usize,
    pub runs: Vec<BadRun>,
    /// Why a scenario was not run.
    pub skipped: Vec<String>,
    /// A good release's makespan with the defaults (proven first) and with
    /// `on-failure: continue` (the whole budget at once).
    pub good_proving: Option<Duration>,
    pub good_continue: Option<Duration>,
}

pub async fn measure(
    client: &Client,
    p: &BadParams,
    budget: usize,
    pod_delay: Duration,
    yurt: Result<(), String>,
) -> Result<BadResults, String> {
    note(format!(
        "== a crash-looping release on {} nodes, budget {budget}, watched {:?} each ==",
        p.nodes, p.window
    ));
    let nodes = TestNodes::create(client, "bench-bad", p.nodes).await;
    let outcome = measure_on(client, p, budget, pod_delay, yurt, &nodes).await;
    nodes.cleanup().await;
    outcome
}

async fn measure_on(
    client: &Client,
    p: &BadParams,
    budget: usize,
    pod_delay: Duration,
    yurt: Result<(), String>,
    nodes: &TestNodes,
) -> Result<BadResults, String> {
    let selector = nodes.selector();
    // The canary wave: nodes spread over the name order, so it is not simply the nodes
    // a rollout without waves would take first.
    let step = (p.nodes / p.canary.max(1)).max(1);
    let canary: BTreeSet<String> = (0..p.canary.min(p.nodes))
        .map(|i| nodes.names[(i * step + step / 2).min(p.nodes - 1)].clone())
        .collect();
    let api: Api<Node> = Api::all(client.clone());
    for name in &canary {
        let patch = json!({"metadata": {"labels": {WAVE_LABEL: "canary"}}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| format!("labelling {name} canary: {e}"))?;
    }
    let setup = Setup {
        client,
        owner: &nodes.owner,
        selector: &selector,
        nodes: p.nodes,
        max_unavailable: &p.max_unavailable,
        budget,
        pod_delay,
    };
    let mut results = BadResults {
        nodes: p.nodes,
        budget,
        window: p.window,
        canary: canary.len(),
        runs: Vec::new(),
        skipped: Vec::new(),
        good_proving: None,
        good_continue: None,
    };
    for (key, label, which) in SCENARIOS {
        if let (Some(Which::OpenYurt), Err(why)) = (which, &yurt) {
            results.skipped.push(format!("{label}: {why}"));
            continue;
        }
        let strategy = match which {
            None => Strategy::Native,
            Some(_) => Strategy::Advanced,
        };
        let mut annotations = Map::new();
        match key {
            "rollgate_rollback" => {
                annotations.insert(ON_FAILURE.into(), json!("rollback"));
            }
            "rollgate_canary" => {
                annotations.insert(WAVES.into(), json!(format!("{WAVE_LABEL}=canary; *")));
            }
            _ => {}
        }
        let shape = Shape {
            strategy,
            tolerate_all: true,
        };
        let prepared = setup
            .prepare_to(&format!("bad/{key}"), shape, annotations, BAD_IMAGE)
            .await?;
        // One controller at a time, running only while its own scenario does.
        let controller = match which {
            Some(which) => Some(ControllerUnderTest::start(which, &format!("bad-{key}")).await?),
            None => None,
        };
        let run = run_one(&prepared, key, label, p.window, &canary).await;
        drop(controller);
        prepared.cleanup().await;
        results.runs.push(run?);
    }
    // The price of proving first, on a good release.
    let rollgate = ControllerUnderTest::start(Which::Rollgate, "bad-price").await?;
    let timeout = (pod_delay * 20 * p.nodes.div_ceil(budget) as u32).max(Duration::from_secs(120));
    for continue_ in [false, true] {
        let mut annotations = Map::new();
        if continue_ {
            annotations.insert(ON_FAILURE.into(), json!("continue"));
        }
        let shape = Shape {
            strategy: Strategy::Advanced,
            tolerate_all: true,
        };
        let key = if continue_ {
            "bad/good-continue"
        } else {
            "bad/good-proving"
        };
        let prepared = setup.prepare_to(key, shape, annotations, NEW_IMAGE).await?;
        let rolled = prepared.roll(timeout, None).await;
        prepared.cleanup().await;
        let makespan = rolled?.makespan;
        if continue_ {
            results.good_continue = makespan;
        } else {
            results.good_proving = makespan;
        }
    }
    drop(rollgate);
    Ok(results)
}

async fn run_one(
    prepared: &Prepared,
    key: &'static str,
    label: &'static str,
    window: Duration,
    canary: &BTreeSet<String>,
) -> Result<BadRun, String> {
    let started = SystemTime::now();
    let rollout = prepared
        .roll_with(TemplateChange::ImageTo(BAD_IMAGE), window, Some(window))
        .await?;
    let events = &rollout.events;
    let first_failure = events
        .iter()
        .find(|(_, kind, _)| *kind == Kind::NewFailed)
        .map(|(at, ..)| *at);
    let failed_nodes = events
        .iter()
        .filter(|(_, kind, _)| *kind == Kind::NewFailed)
        .map(|(_, _, node)| node)
        .collect::<BTreeSet<_>>()
        .len();
    let touched: BTreeSet<&String> = events
        .iter()
        .filter(|(_, kind, _)| *kind == Kind::OldDeleting)
        .map(|(_, _, node)| node)
        .collect();
    let said = said_at(prepared, started).await?;
    let at = |reason: &str| said.iter().find(|(r, _)| r == reason).map(|(_, at)| *at);
    let rolled_back = at(ROLLED_BACK);
    let stopped = [at(HALTED), rolled_back].into_iter().flatten().min();
    let samples = &rollout.samples;
    let first_down = samples.iter().find(|s| s.unavailable > 0).map(|s| s.at);
    let serving_again = first_down.and_then(|down| {
        let last = samples.last()?;
        (last.unavailable == 0)
            .then(|| {
                samples
                    .iter()
                    .rev()
                    .take_while(|s| s.unavailable == 0)
                    .last()
                    .map(|s| s.at)
            })
            .flatten()
            .filter(|at| *at > down)
    });
    let node_seconds = samples
        .windows(2)
        .map(|w| w[0].unavailable as f64 * (w[1].at - w[0].at).as_secs_f64())
        .sum::<f64>()
        + samples.last().map_or(0.0, |s| {
            s.unavailable as f64 * rollout.watched.saturating_sub(s.at).as_secs_f64()
        });
    let unavailable_at_end = samples.last().map_or(0, |s| s.unavailable);
    let touched_outside_canary = (key == "rollgate_canary").then(|| {
        touched
            .iter()
            .filter(|n| !canary.contains(n.as_str()))
            .count()
    });
    note(format!(
        "{label}: peak {} without a working pod, {failed_nodes} failed, {} at the end; stopped {:?}",
        rollout.peak_unavailable, unavailable_at_end, stopped
    ));
    Ok(BadRun {
        key,
        label,
        failed_nodes,
        first_failure,
        stopped,
        rolled_back,
        serving_again,
        node_seconds,
        unavailable_at_end,
        touched: touched.len(),
        touched_outside_canary,
        rollout,
    })
}

/// The Events of the DaemonSet's namespace with the reasons rollgate stops a revision
/// with, each with when it was first said relative to `started` (the events API's
/// `eventTime`, microseconds, from this machine's clock).
async fn said_at(
    prepared: &Prepared,
    started: SystemTime,
) -> Result<Vec<(String, Duration)>, String> {
    let api: Api<Event> = Api::namespaced(prepared.client(), &prepared.ns.name);
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("{}: listing Events: {e}", prepared.key))?;
    let started_us = started
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_micros() as i64;
    let mut said: Vec<(String, Duration)> = list
        .items
        .into_iter()
        .filter_map(|e| {
            let reason = e.reason.filter(|r| r == HALTED || r == ROLLED_BACK)?;
            let at_us = e.event_time?.0.as_microsecond();
            let after = u64::try_from(at_us - started_us).unwrap_or(0);
            Some((reason, Duration::from_micros(after)))
        })
        .collect();
    said.sort_by_key(|(_, at)| *at);
    Ok(said)
}

pub fn entries(r: &BadResults) -> Vec<(String, Value)> {
    let prefix = "rollout.bad_release";
    let mut e = vec![
        (format!("{prefix}.nodes"), json!(r.nodes)),
        (format!("{prefix}.budget"), json!(r.budget)),
        (format!("{prefix}.window_s"), secs(Some(r.window))),
        (format!("{prefix}.canary_nodes"), json!(r.canary)),
        (format!("{prefix}.skipped"), json!(r.skipped)),
        (
            format!("{prefix}.good_release.makespan_s"),
            secs(r.good_proving),
        ),
        (
            format!("{prefix}.good_release.on_failure_continue_makespan_s"),
            secs(r.good_continue),
        ),
    ];
    for run in &r.runs {
        let k = |name: &str| format!("{prefix}.{}.{name}", run.key);
        let first = run.first_failure;
        let after_first =
            |at: Option<Duration>| secs(at.zip(first).map(|(at, first)| at.saturating_sub(first)));
        e.extend([
            (k("peak_unavailable"), json!(run.rollout.peak_unavailable)),
            (k("budget_violations"), json!(run.rollout.violations)),
            (k("node_seconds_without_pod"), round(run.node_seconds, 1)),
            (k("unavailable_at_end"), json!(run.unavailable_at_end)),
            (k("failed_nodes"), json!(run.failed_nodes)),
            (k("nodes_touched"), json!(run.touched)),
            (k("first_failure_s"), secs(first)),
            (k("first_failure_to_stop_s"), after_first(run.stopped)),
            (
                k("first_failure_to_rollback_s"),
                after_first(run.rolled_back),
            ),
            (k("every_node_serving_again_s"), secs(run.serving_again)),
        ]);
        if let Some(outside) = run.touched_outside_canary {
            e.push((k("nodes_touched_outside_canary"), json!(outside)));
        }
    }
    e
}

/// The plot's data: each scenario's unavailable Ready nodes over time.
pub fn timelines(r: &BadResults) -> Value {
    let rollouts: Map<String, Value> = r
        .runs
        .iter()
        .map(|run| {
            let samples: Vec<Value> = run
                .rollout
                .samples
                .iter()
                .map(|s| json!([round(s.at.as_secs_f64(), 3), s.updated, s.unavailable]))
                .collect();
            (
                run.key.to_string(),
                json!({
                    "label": run.label,
                    "watched_s": secs(Some(run.rollout.watched)),
                    "samples": samples,
                }),
            )
        })
        .collect();
    json!({"nodes": r.nodes, "budget": r.budget, "rollouts": rollouts})
}

pub fn report(r: &BadResults) -> String {
    let s = |d: Option<Duration>| d.map_or("-".into(), |d| format!("{:.1} s", d.as_secs_f64()));
    let mut t = format!(
        "\na crash-looping release: {} nodes, budget {}, each watched {:.0} s; canary wave {} nodes\n",
        r.nodes,
        r.budget,
        r.window.as_secs_f64(),
        r.canary
    );
    t.push_str(
        "| | peak without a working pod | node-seconds | at the end | failed | touched | first failure -> stop | serving again |\n|---|---|---|---|---|---|---|---|\n",
    );
    for run in &r.runs {
        let touched = match run.touched_outside_canary {
            Some(outside) => format!("{} ({outside} outside the canary)", run.touched),
            None => run.touched.to_string(),
        };
        let stop = run
            .stopped
            .zip(run.first_failure)
            .map(|(at, first)| at.saturating_sub(first));
        t.push_str(&format!(
            "| {} | {} | {:.0} | {} | {} | {touched} | {} | {} |\n",
            run.label,
            run.rollout.peak_unavailable,
            run.node_seconds,
            run.unavailable_at_end,
            run.failed_nodes,
            s(stop),
            s(run.serving_again),
        ));
    }
    t.push_str(&format!(
        "a good release: makespan {} with the defaults (proven on the threshold's nodes first), {} with on-failure continue\n",
        s(r.good_proving),
        s(r.good_continue)
    ));
    for why in &r.skipped {
        t.push_str(&format!("skipped: {why}\n"));
    }
    t
}
