//! Pull-ahead (issue 26): the same AdvancedRollingUpdate with and without
//! `rollgate.io/pull-ahead: "true"`, in one run, on simulated nodes where a missing image
//! takes `pull` to arrive (the bed's image pull model: a kwok of the bench's own with the
//! stage file's pull gate on, and hack/bed-image-puller.py). Each scenario gets nodes of
//! its own, so neither finds the other's images there.
//!
//! Per node, downtime is what the budget watcher sees: its old pod marked for deletion
//! (it stops serving) -> its new pod Ready. Without pull-ahead the pull is inside it; with
//! it, only the pod's stop and start should be. The ideal is measured too, in the same
//! run: the same rollout whose new revision changes only a template annotation, so no
//! node pulls anything. Its downtime is the pod's stop and start plus what the control
//! plane adds (the old pod's removal seen, the new pod created, scheduled and started),
//! which no updater can take out.
//!
//! Environment: `ROLLGATE_BENCH_PULL` (1; 0 skips), `ROLLGATE_BENCH_PULL_NODES` (200;
//! quick 20), `ROLLGATE_BENCH_PULL_DELAY_S` (20; quick 5),
//! `ROLLGATE_BENCH_PULL_MAX_UNAVAILABLE` (10%; quick 25%, so the quick run's waves stay
//! few).
use std::time::Duration;

use kube::Client;
use serde_json::{json, Value};

use crate::analysis::node_downtimes;
use crate::controllers::{ControllerUnderTest, Which};
use crate::scenario::{Rollout, Setup, Shape, Strategy, TemplateChange};
use crate::secs;
use crate::support::measure::percentile;
use crate::support::private_kwok::{Addresses, BedImagePuller, PrivateKwok};
use crate::support::{env_or, note, TestNodes};

const HEARTBEAT: &str = "rollgate.test/bench-pull-heartbeat";
/// The start delay of pods without their own (the pull Jobs' pods).
const JOB_START_MS: u64 = 1000;

pub struct PullParams {
    pub run: bool,
    pub nodes: usize,
    pub pull: Duration,
    pub max_unavailable: String,
}

impl PullParams {
    pub fn from_env(quick: bool) -> Result<Self, String> {
        Ok(PullParams {
            run: env_or("ROLLGATE_BENCH_PULL", 1u8)? == 1,
            nodes: env_or(
                "ROLLGATE_BENCH_PULL_NODES",
                if quick { 20usize } else { 200 },
            )?,
            pull: Duration::from_secs(env_or(
                "ROLLGATE_BENCH_PULL_DELAY_S",
                if quick { 5u64 } else { 20 },
            )?),
            max_unavailable: env_or(
                "ROLLGATE_BENCH_PULL_MAX_UNAVAILABLE",
                if quick { "25%" } else { "10%" }.to_string(),
            )?,
        })
    }
}

/// One scenario's figures.
pub struct PullRun {
    pub rollout: Rollout,
    /// Per node that was upgraded, sorted.
    pub downtimes: Vec<Duration>,
}

pub struct PullResults {
    pub nodes: usize,
    pub budget: usize,
    pub pull: Duration,
    pub pod_delay: Duration,
    pub stop_delay: Duration,
    pub without: PullRun,
    pub with: PullRun,
    /// No pull at all (`TemplateChange::AnnotationOnly`).
    pub ideal: PullRun,
}

/// Both scenarios, without pull-ahead first.
pub async fn measure(
    client: &Client,
    p: &PullParams,
    budget: usize,
    pod_delay: Duration,
    stop_delay: Duration,
    timeout: Duration,
) -> Result<PullResults, String> {
    note(format!(
        "== pull-ahead: {} nodes, max-unavailable {} (budget {budget}), pull {:?} ==",
        p.nodes, p.max_unavailable, p.pull
    ));
    let _kwok = PrivateKwok::start(
        &[
            ("__POD_START_DELAY_MS__", JOB_START_MS),
            ("__POD_STOP_DELAY_MS__", stop_delay.as_millis() as u64),
            ("__POD_REREPORT_DELAY_MS__", 0),
        ],
        HEARTBEAT,
        Addresses {
            cidr: "10.51.0.0/16",
            node_ip: "10.50.0.1",
        },
        true,
        "bench-pull-kwok.log",
    );
    let _puller = BedImagePuller::start(
        &format!("{}s", p.pull.as_secs()),
        JOB_START_MS,
        HEARTBEAT,
        "bench-pull-puller.log",
    );
    let mut runs = Vec::new();
    for (key, strategy, change) in [
        ("without", Strategy::Advanced, TemplateChange::Image),
        ("with", Strategy::AdvancedPullAhead, TemplateChange::Image),
        ("ideal", Strategy::Advanced, TemplateChange::AnnotationOnly),
    ] {
        let nodes = TestNodes::create_on(client, &format!("pull-{key}"), p.nodes, HEARTBEAT).await;
        let selector = nodes.selector();
        let setup = Setup {
            client,
            owner: &nodes.owner,
            selector: &selector,
            nodes: p.nodes,
            max_unavailable: &p.max_unavailable,
            budget,
            pod_delay,
        };
        let outcome = async {
            let prepared = setup
                .prepare(
                    &format!("pull-ahead/{key}"),
                    Shape {
                        strategy,
                        tolerate_all: true,
                    },
                )
                .await?;
            let controller =
                ControllerUnderTest::start(Which::Rollgate, &format!("pull-{key}")).await?;
            let rollout = prepared.roll_with(change, timeout, None).await;
            controller.stop();
            prepared.cleanup().await;
            rollout
        }
        .await;
        nodes.cleanup().await;
        let rollout = outcome?;
        let downtimes = node_downtimes(&rollout.events);
        note(format!(
            "pull-ahead/{key}: makespan {:?}, downtime p50 {:?} max {:?} over {} nodes",
            rollout.makespan,
            percentile(&downtimes, 50.0),
            downtimes.last(),
            downtimes.len()
        ));
        runs.push(PullRun { rollout, downtimes });
    }
    let ideal = runs.pop().expect("three runs");
    let with = runs.pop().expect("three runs");
    let without = runs.pop().expect("three runs");
    Ok(PullResults {
        nodes: p.nodes,
        budget,
        pull: p.pull,
        pod_delay,
        stop_delay,
        without,
        with,
        ideal,
    })
}

/// `pull_ahead.*` entries of results.json.
pub fn entries(r: &PullResults) -> Vec<(String, Value)> {
    let mut e = vec![
        ("pull_ahead.nodes".to_string(), json!(r.nodes)),
        ("pull_ahead.budget".to_string(), json!(r.budget)),
        ("pull_ahead.pull_delay_s".to_string(), secs(Some(r.pull))),
        (
            "pull_ahead.pod_start_plus_stop_s".to_string(),
            secs(Some(r.pod_delay + r.stop_delay)),
        ),
    ];
    for (key, run) in [
        ("without", &r.without),
        ("with", &r.with),
        ("ideal", &r.ideal),
    ] {
        let d = &run.downtimes;
        e.push((
            format!("pull_ahead.{key}.makespan_s"),
            secs(run.rollout.makespan),
        ));
        e.push((
            format!("pull_ahead.{key}.downtime_p50_s"),
            secs(percentile(d, 50.0)),
        ));
        e.push((
            format!("pull_ahead.{key}.downtime_p95_s"),
            secs(percentile(d, 95.0)),
        ));
        e.push((
            format!("pull_ahead.{key}.downtime_max_s"),
            secs(d.last().copied()),
        ));
        e.push((format!("pull_ahead.{key}.nodes_measured"), json!(d.len())));
        e.push((
            format!("pull_ahead.{key}.budget_violations"),
            json!(run.rollout.violations),
        ));
    }
    e
}

/// The report's lines.
pub fn report(r: &PullResults) -> String {
    let s = |d: Option<Duration>| d.map_or("-".into(), |d| format!("{:.1} s", d.as_secs_f64()));
    let mut t = format!(
        "\npull-ahead: {} nodes, budget {}, pull {:.0} s, pod start + stop {:.1} s\n",
        r.nodes,
        r.budget,
        r.pull.as_secs_f64(),
        (r.pod_delay + r.stop_delay).as_secs_f64()
    );
    t.push_str(
        "| | makespan | downtime p50 | p95 | max | over budget |\n|---|---|---|---|---|---|\n",
    );
    for (label, run) in [
        ("without pull-ahead", &r.without),
        ("with pull-ahead", &r.with),
        ("ideal: nothing to pull", &r.ideal),
    ] {
        let d = &run.downtimes;
        t.push_str(&format!(
            "| {label} | {} | {} | {} | {} | {} |\n",
            s(run.rollout.makespan),
            s(percentile(d, 50.0)),
            s(percentile(d, 95.0)),
            s(d.last().copied()),
            run.rollout.violations
        ));
    }
    t
}
