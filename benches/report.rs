//! The benchmarks' summary: reads `results.json` and `timelines.json` from `target/bench`
//! (`ROLLGATE_BENCH_OUT`), prints a Markdown table of every section, also written to
//! `results.md`, and draws the rollout plots as PNG files beside them.
//!
//! It reads whatever keys the benches wrote: a section whose keys are absent or null
//! says so, with the reason its bench gave (`<section>.reason`) when there is one.
//! Text in the plots needs a TrueType font: `ROLLGATE_BENCH_FONT`, else the first of a few
//! common system fonts (Debian's fonts-dejavu-core); without one, the plots are skipped
//! and the table says why.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use serde_json::Value;

type Results = BTreeMap<String, Value>;

fn out_dir() -> PathBuf {
    std::env::var_os("ROLLGATE_BENCH_OUT")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench"))
}

fn main() -> ExitCode {
    match run() {
        Ok(table) => {
            println!("{table}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("report: ERROR: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<String, String> {
    let dir = out_dir();
    let path = dir.join("results.json");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("reading {}: {e} (run the benches first)", path.display()))?;
    let results: Results = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not a JSON object: {e}", path.display()))?;
    let timelines: Value = read_json(&dir.join("timelines.json")).unwrap_or(Value::Null);
    // The gate bench's flip latencies (seconds), when it ran.
    let gate_latencies: Vec<f64> = read_json(&dir.join("gates-latencies.json")).unwrap_or_default();
    let plots = match find_font() {
        Ok(font) => draw_plots(&dir, &timelines, font).and_then(|mut files| {
            if !gate_latencies.is_empty() {
                let path = dir.join("gates-flip-latency.png");
                plot_gate_latencies(&path, &gate_latencies)
                    .map_err(|e| format!("drawing {}: {e}", path.display()))?;
                files.push(path);
            }
            if let Some(bad) = read_json(&dir.join("bad-release.json")) {
                let path = dir.join("bad-release.png");
                plot_bad_release(&path, &bad)
                    .map_err(|e| format!("drawing {}: {e}", path.display()))?;
                files.push(path);
            }
            if let Some(points) = fleet_flip_points(&results) {
                let path = dir.join("gates-fleet-flip-latency.png");
                plot_fleet_flips(&path, &points)
                    .map_err(|e| format!("drawing {}: {e}", path.display()))?;
                files.push(path);
            }
            Ok(files)
        }),
        Err(why) => Err(why),
    };
    let table = table(&results, &plots);
    let md = dir.join("results.md");
    std::fs::write(&md, &table).map_err(|e| format!("writing {}: {e}", md.display()))?;
    Ok(format!("{table}\n(written to {})", md.display()))
}

// ---------------------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------------------

fn get<'a>(r: &'a Results, key: &str) -> Option<&'a Value> {
    r.get(key).filter(|v| !v.is_null())
}

fn num(r: &Results, key: &str) -> Option<f64> {
    get(r, key).and_then(Value::as_f64)
}

/// A figure with its unit, or why there is none.
fn show(r: &Results, key: &str, unit: &str) -> String {
    match get(r, key) {
        Some(Value::Number(n)) => format!("{n}{unit}"),
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => "null".into(),
    }
}

/// PASS, or MISS with by how much.
fn verdict(value: Option<f64>, target: f64, lower_is_better: bool) -> String {
    match value {
        None => "-".into(),
        Some(v) if (lower_is_better && v <= target) || (!lower_is_better && v >= target) => {
            "PASS".into()
        }
        Some(v) => format!("**MISS** by {:.0}%", ((v / target) - 1.0).abs() * 100.0),
    }
}

fn reason(r: &Results, section: &str) -> String {
    get(r, &format!("{section}.reason"))
        .and_then(Value::as_str)
        .map(|s| format!(": {s}"))
        .unwrap_or_else(|| ": its bench did not run in this results file".into())
}

fn section_absent(r: &Results, section: &str) -> bool {
    !r.iter().any(|(k, v)| {
        k.starts_with(&format!("{section}.")) && !k.ends_with(".reason") && !v.is_null()
    })
}

/// A run in which the test bed showed a cut-off node Ready is void for every NotReady
/// figure: say so above everything, with the nodes and times the bench recorded.
fn ghost_ready_warning(r: &Results) -> String {
    let ghosts: Vec<&str> = r
        .iter()
        .filter(|(k, _)| k.starts_with("rollout.") && k.ends_with(".ghost_ready"))
        .filter_map(|(_, v)| v.as_array())
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if ghosts.is_empty() {
        return String::new();
    }
    format!(
        "**INVALID RUN: the test bed showed cut-off nodes Ready before their heartbeat was restored, so the NotReady figures below are void:** {}\n\n",
        ghosts.join("; ")
    )
}

fn table(r: &Results, plots: &Result<Vec<PathBuf>, String>) -> String {
    let mut t = String::from("# rollgate benchmarks\n\n");
    t.push_str(&machine_line(r));
    t.push_str(&ghost_ready_warning(r));
    rollout_section(&mut t, r, "rollout");
    let mut sizes: Vec<String> = r
        .keys()
        .filter_map(|k| {
            k.strip_prefix("rollout.")?
                .split_once("_nodes.")
                .map(|(n, _)| n.to_string())
        })
        .collect();
    sizes.dedup();
    for n in sizes {
        rollout_section(&mut t, r, &format!("rollout.{n}_nodes"));
    }
    openyurt_section(&mut t, r);
    simple_section(
        &mut t,
        r,
        "pull_ahead",
        "Pull-ahead (images pulled before the wave, bed pull delay)",
        &[
            ("pull_ahead.nodes", "nodes", "", None),
            ("pull_ahead.budget", "budget", "", None),
            (
                "pull_ahead.pull_delay_s",
                "pull of a missing image",
                " s",
                None,
            ),
            (
                "pull_ahead.pod_start_plus_stop_s",
                "pod start + stop",
                " s",
                None,
            ),
            (
                "pull_ahead.without.makespan_s",
                "makespan, without",
                " s",
                None,
            ),
            ("pull_ahead.with.makespan_s", "makespan, with", " s", None),
            (
                "pull_ahead.without.downtime_p50_s",
                "per-node downtime p50, without",
                " s",
                None,
            ),
            (
                "pull_ahead.without.downtime_max_s",
                "per-node downtime max, without",
                " s",
                None,
            ),
            (
                "pull_ahead.with.downtime_p50_s",
                "per-node downtime p50, with",
                " s",
                None,
            ),
            (
                "pull_ahead.with.downtime_p95_s",
                "per-node downtime p95, with",
                " s",
                None,
            ),
            (
                "pull_ahead.with.downtime_max_s",
                "per-node downtime max, with",
                " s",
                None,
            ),
            (
                "pull_ahead.ideal.downtime_p50_s",
                "per-node downtime p50, ideal (nothing to pull)",
                " s",
                None,
            ),
            (
                "pull_ahead.ideal.downtime_max_s",
                "per-node downtime max, ideal (nothing to pull)",
                " s",
                None,
            ),
            (
                "pull_ahead.with.budget_violations",
                "times over budget, with",
                "",
                Some((0.0, true)),
            ),
        ],
    );
    bad_release_section(&mut t, r);
    simple_section(
        &mut t,
        r,
        "gates",
        "Readiness gates",
        &[
            ("gates.pods", "gated pods", "", None),
            ("gates.flip_p50_s", "flip latency p50", " s", None),
            (
                "gates.flip_p99_s",
                "flip latency p99",
                " s",
                Some((2.0, true)),
            ),
            (
                "gates.flip_floor_p50_s",
                "flip latency p50, the cluster's write-rate floor",
                " s",
                None,
            ),
            (
                "gates.flip_floor_p99_s",
                "flip latency p99, the cluster's write-rate floor",
                " s",
                None,
            ),
            (
                "gates.health_polls_per_s",
                "health polls per second",
                "",
                None,
            ),
            ("gates.mutating_calls", "mutating cloud calls", "", None),
            (
                "gates.min_healthy_with_gates",
                "min healthy backends, with gates",
                "",
                None,
            ),
            (
                "gates.min_healthy_without_gates",
                "min healthy backends, without gates",
                "",
                None,
            ),
        ],
    );
    simple_section(
        &mut t,
        r,
        "footprint",
        "Controller footprint",
        &[
            ("footprint.nodes", "nodes", "", None),
            ("footprint.pods", "pods", "", None),
            (
                "footprint.controller_peak_rss_mb",
                "controller peak RSS",
                " MiB",
                Some((64.0, true)),
            ),
            ("footprint.controller_cpu_s", "controller CPU", " s", None),
            ("footprint.bytes_per_pod", "bytes per pod", "", None),
            ("footprint.bytes_per_node", "bytes per node", "", None),
        ],
    );
    simple_section(
        &mut t,
        r,
        "daemonset.fleet",
        "DaemonSets at fleet size, simulated (benches/daemonset_fleet.rs; today's path in the same run)",
        &[
            ("daemonset.fleet.nodes", "nodes", "", None),
            ("daemonset.fleet.daemonsets", "DaemonSets", "", None),
            ("daemonset.fleet.pods", "pods", "", None),
            (
                "daemonset.fleet.cpu_per_flap_ms",
                "CPU per node flap",
                " ms",
                Some((5.0, true)),
            ),
            (
                "daemonset.fleet.cpu_per_flap_ms_today",
                "CPU per node flap, today",
                " ms",
                None,
            ),
            ("daemonset.fleet.replans_per_flap", "re-plans per flap", "", None),
            (
                "daemonset.fleet.replans_per_flap_today",
                "re-plans per flap, today",
                "",
                None,
            ),
            ("daemonset.fleet.cpu_per_event_ms", "CPU per event", " ms", None),
            (
                "daemonset.fleet.cpu_per_event_ms_today",
                "CPU per event, today",
                " ms",
                None,
            ),
            ("daemonset.fleet.plan_p99_ms", "plan CPU p99", " ms", None),
            (
                "daemonset.fleet.plan_p99_ms_today",
                "plan CPU p99, today",
                " ms",
                None,
            ),
            (
                "daemonset.fleet.bytes_per_pod",
                "heap bytes per pod (store + index)",
                "",
                None,
            ),
            (
                "daemonset.fleet.bytes_per_pod_today",
                "heap bytes per pod, today (store)",
                "",
                None,
            ),
        ],
    );
    simple_section(
        &mut t,
        r,
        "gates.fleet",
        "Readiness gates at fleet size (benches/gates_fleet.rs; today's code in the same run)",
        &[
            (
                "gates.fleet.services",
                "LoadBalancer Services (70 % CLB)",
                "",
                None,
            ),
            (
                "gates.fleet.pods_per_service",
                "gated pods per Service",
                "",
                None,
            ),
            (
                "gates.fleet.new.settle_s",
                "settle: controller start -> all gates True",
                " s",
                None,
            ),
            ("gates.fleet.today.settle_s", "settle, today", " s", None),
            ("gates.fleet.today.failed", "today's code", "", None),
            (
                "gates.fleet.compare_at_s",
                "progress compared at",
                " s",
                None,
            ),
            (
                "gates.fleet.new.lbs_made_at_compare",
                "load balancers made by then",
                "",
                None,
            ),
            (
                "gates.fleet.today.lbs_made_at_compare",
                "load balancers made by then, today",
                "",
                None,
            ),
            (
                "gates.fleet.new.a_flip_p50_s",
                "one rollout, the rest idle: flip p50",
                " s",
                Some((1.0, true)),
            ),
            (
                "gates.fleet.new.a_flip_p99_s",
                "one rollout: flip p99",
                " s",
                Some((2.0, true)),
            ),
            (
                "gates.fleet.today.a_flip_p99_s",
                "one rollout: flip p99, today",
                " s",
                None,
            ),
            ("gates.fleet.b_rollouts", "rollouts at once (B)", "", None),
            ("gates.fleet.new.b_flip_p99_s", "B: flip p99", " s", None),
            (
                "gates.fleet.new.b_pending_wait_max_s",
                "B: longest wait for a look, pending",
                " s",
                None,
            ),
            (
                "gates.fleet.new.run_settled_wait_max_clb_s",
                "whole run: longest wait for a look, settled CLB",
                " s",
                None,
            ),
            (
                "gates.fleet.settled_wait_bound_clb_s",
                "its stated bound",
                " s",
                None,
            ),
            (
                "gates.fleet.new.run_settled_wait_max_nlb_s",
                "whole run: longest wait for a look, settled NLB",
                " s",
                None,
            ),
            (
                "gates.fleet.settled_wait_bound_nlb_s",
                "its stated bound",
                " s",
                None,
            ),
            (
                "gates.fleet.new.gate_throttling_errors_scenarios",
                "gate conditions with a throttling error",
                "",
                Some((0.0, true)),
            ),
            (
                "gates.fleet.new.throttled_calls_scenarios",
                "throttled calls (A + B)",
                "",
                None,
            ),
            (
                "gates.fleet.new.controller_cpu_idle_per_s",
                "controller CPU idle",
                " s/s",
                None,
            ),
            (
                "gates.fleet.new.controller_peak_rss_mb",
                "controller peak RSS",
                " MiB",
                None,
            ),
        ],
    );
    simple_section(
        &mut t,
        r,
        "agent",
        "Node agent GET /pods (110 pods)",
        &[
            ("agent.get_pods_p50_ms", "p50, 1 connection", " ms", None),
            ("agent.get_pods_p99_ms", "p99, 1 connection", " ms", None),
            (
                "agent.get_pods_p99_ms_8conn",
                "p99, 8 connections",
                " ms",
                Some((2.0, true)),
            ),
            ("agent.gzip_bytes", "body gzip-compressed", " B", None),
            (
                "agent.peak_rss_mb",
                "agent peak RSS",
                " MiB",
                Some((20.0, true)),
            ),
        ],
    );
    t.push_str("\n## Plots\n\n");
    match plots {
        Ok(files) if files.is_empty() => t.push_str("no timelines in this results folder\n"),
        Ok(files) => {
            for f in files {
                let name = f.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                t.push_str(&format!("- `{}`\n", f.display()));
                let _ = name;
            }
        }
        Err(why) => t.push_str(&format!("plots skipped: {why}\n")),
    }
    t
}

fn machine_line(r: &Results) -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        })
        .map_or("?".into(), |kib| format!("{:.0}", kib / 1024.0 / 1024.0));
    let quick = get(r, "rollout.quick").and_then(Value::as_bool) == Some(true);
    format!(
        "Machine: {cores} cores, {mem_gib} GiB; control plane, simulated nodes, controllers and load clients share it. \
         Load average during the rollouts: {} before, {} after.{}\n",
        show(r, "rollout.load_average_before", ""),
        show(r, "rollout.load_average_after", ""),
        if quick {
            " **Quick run** (reduced sizes and delays; figures check the harness, not the product)."
        } else {
            ""
        }
    )
}

fn rollout_section(t: &mut String, r: &Results, p: &str) {
    let k = |name: &str| format!("{p}.{name}");
    let Some(nodes) = num(r, &k("nodes")) else {
        if p == "rollout" {
            t.push_str(&format!(
                "\n## DaemonSet rollout\n\nnot measured{}\n",
                reason(r, "rollout")
            ));
        }
        return;
    };
    t.push_str(&format!(
        "\n## DaemonSet rollout, {nodes} nodes, budget {} (10%), pod start {} ms, stop {} ms\n\n",
        show(r, &k("budget"), ""),
        show(r, &k("pod_start_delay_ms"), ""),
        show(r, &k("pod_stop_delay_ms"), ""),
    ));
    t.push_str("| scenario / figure | measured | baseline or ideal | ratio | target | result |\n|---|---|---|---|---|---|\n");
    let vs_native = num(r, &k("vs_native_ratio"));
    t.push_str(&format!(
        "| (b) rollgate AdvancedRollingUpdate vs (a) native RollingUpdate, all Ready | {} | {} | {} | ≤ 1.0 | {} |\n",
        show(r, &k("makespan_s"), " s"),
        show(r, &k("native_makespan_s"), " s"),
        show(r, &k("vs_native_ratio"), ""),
        verdict(vs_native, 1.0, true),
    ));
    if let Some(ratio) = num(r, &k("continue_vs_native_ratio")) {
        t.push_str(&format!(
            "| (b) with `rollgate.io/on-failure: continue` (no proving wave, as native) vs (a); batch gap p50 | {}; {} | {} | {} | ≤ 1.0 | {} |\n",
            show(r, &k("continue_makespan_s"), " s"),
            show(r, &k("continue_batch_gap_p50_ms"), " ms"),
            show(r, &k("native_makespan_s"), " s"),
            show(r, &k("continue_vs_native_ratio"), ""),
            verdict(Some(ratio), 1.0, true),
        ));
    }
    let runs = |key: &str| match get(r, &k(key)).and_then(Value::as_array) {
        Some(runs) if runs.len() > 1 => Some(
            runs.iter()
                .map(|v| v.as_f64().map_or("-".into(), |s| format!("{s:.2}")))
                .collect::<Vec<_>>()
                .join(", "),
        ),
        _ => None,
    };
    if let (Some(b_runs), Some(a_runs)) = (runs("makespans_s"), runs("native_makespans_s")) {
        t.push_str(&format!(
            "| (a) and (b) alternated, the medians above: every run (s) | {b_runs} | {a_runs} | | | |\n",
        ));
    }
    if let Some(c_runs) = runs("continue_makespans_s") {
        t.push_str(&format!(
            "| (b) with on-failure continue, every run (s) | {c_runs} | | | | |\n",
        ));
    }
    let vs_ideal = num(r, &k("makespan_ratio"));
    t.push_str(&format!(
        "| (b) vs ideal batches × (start + stop) | {} | {} | {} | ≤ 1.10 | {} |\n",
        show(r, &k("makespan_s"), " s"),
        show(r, &k("ideal_s"), " s"),
        show(r, &k("makespan_ratio"), ""),
        verdict(vs_ideal, 1.10, true),
    ));
    t.push_str(&format!(
        "| (a) native vs ideal | {} | {} | {} | (reference) | |\n",
        show(r, &k("native_makespan_s"), " s"),
        show(r, &k("ideal_s"), " s"),
        show(r, &k("native_makespan_ratio"), ""),
    ));
    t.push_str(&format!(
        "| batch gap (new pod available → next deletion) p50 / p99 | {} / {} | native {} / {} | | | |\n",
        show(r, &k("batch_gap_p50_ms"), " ms"),
        show(r, &k("batch_gap_p99_ms"), " ms"),
        show(r, &k("native_batch_gap_p50_ms"), " ms"),
        show(r, &k("native_batch_gap_p99_ms"), " ms"),
    ));
    t.push_str(&format!(
        "| controller's share of the critical path | {} ({}) | native {} | | | |\n",
        num(r, &k("controller_share")).map_or("null".into(), |v| format!("{:.1}%", v * 100.0)),
        show(r, &k("controller_critical_s"), " s"),
        num(r, &k("native_controller_share"))
            .map_or("null".into(), |v| format!("{:.1}%", v * 100.0)),
    ));
    t.push_str(&format!(
        "| peak unavailable Ready nodes (b), (c); budget violations | {}, {}; {} | budget {} | | 0 violations | {} |\n",
        show(r, &k("peak_unavailable"), ""),
        show(r, &k("notready_peak_unavailable"), ""),
        show(r, &k("budget_violations"), ""),
        show(r, &k("budget"), ""),
        match num(r, &k("budget_violations")) {
            Some(0.0) => "PASS".to_string(),
            Some(_) => "**MISS**".to_string(),
            None => "-".to_string(),
        }
    ));
    t.push_str(&format!(
        "| (c) rollgate, {} nodes NotReady, tolerate-all: makespan on the Ready nodes | {} | | | completes | {} |\n",
        show(r, &k("notready_nodes"), ""),
        show(r, &k("notready_makespan_s"), " s"),
        if num(r, &k("notready_makespan_s")).is_some() { "PASS" } else { "**MISS** (did not complete)" },
    ));
    let quick = get(r, "rollout.quick").and_then(Value::as_bool) == Some(true);
    let native_not_ready = match get(r, &k("native_notready_updated")) {
        None if quick => "not run (the quick run skips it)".to_string(),
        None => "not measured".to_string(),
        Some(_) => format!(
            "{} of {} Ready nodes updated in {}",
            show(r, &k("native_notready_updated"), ""),
            show(r, &k("native_notready_ready_nodes"), ""),
            show(r, &k("native_notready_watched_s"), " s"),
        ),
    };
    t.push_str(&format!(
        "| (d) native with the same NotReady nodes, after as long as (c) took | {native_not_ready} | | | | |\n",
    ));
}

fn openyurt_section(t: &mut String, r: &Results) {
    let v = "vs_openyurt";
    t.push_str("\n## Side by side with OpenYurt yurt-manager (daemonpodupdater)\n\n");
    if let Some(why) = get(r, &format!("{v}.reason")).and_then(Value::as_str) {
        t.push_str(&format!("not measured: {why}\n"));
        return;
    }
    if section_absent(r, v) {
        t.push_str(&format!("not measured{}\n", reason(r, v)));
        return;
    }
    t.push_str(&format!(
        "{} nodes, budget {}; yurt-manager `{}` (OpenYurt v1.7.0 unless `YURT_MANAGER` says otherwise), least-privilege RBAC; one controller running at a time, one independent budget watcher.\n\n",
        show(r, &format!("{v}.nodes"), ""),
        show(r, &format!("{v}.budget"), ""),
        show(r, &format!("{v}.yurt_manager"), ""),
    ));
    t.push_str("| figure | rollgate | yurt-manager | better |\n|---|---|---|---|\n");
    // A null makespan next to a measured rollout means it did not finish; any other
    // null means not measured.
    let finished = |key: &str| {
        let rollout = key.strip_suffix(".makespan_s")?;
        get(r, &format!("{rollout}.updated")).map(|_| get(r, key).is_some())
    };
    let row = |t: &mut String, label: &str, rk: &str, ok: &str, unit: &str, lower: bool| {
        let (a, b) = (num(r, rk), num(r, ok));
        let better = match (a, b, finished(rk), finished(ok)) {
            (Some(a), Some(b), ..) if (a - b).abs() < 1e-9 => "same".to_string(),
            (Some(a), Some(b), ..) => {
                if (a < b) == lower {
                    "rollgate".into()
                } else {
                    "**yurt-manager**".into()
                }
            }
            (Some(_), None, _, Some(false)) => "rollgate (yurt-manager did not finish)".into(),
            (None, Some(_), Some(false), _) => "**yurt-manager** (rollgate did not finish)".into(),
            _ => "-".into(),
        };
        t.push_str(&format!(
            "| {label} | {} | {} | {better} |\n",
            show(r, rk, unit),
            show(r, ok, unit)
        ));
    };
    row(
        t,
        "(a) AdvancedRollingUpdate, all Ready: makespan",
        &format!("{v}.aru_makespan_s.rollgate"),
        &format!("{v}.aru_makespan_s.openyurt"),
        " s",
        true,
    );
    // One figure of one NotReady shape, for both controllers.
    let shape_row = |t: &mut String, shape: &str, label: &str, field: &str, unit: &str| {
        let k = |who: &str| format!("{v}.notready_{shape}.{who}.{field}");
        row(t, label, &k("rollgate"), &k("openyurt"), unit, true);
    };
    let shapes = [
        ("tolerate_all", "tolerate-all"),
        ("tolerate_none", "tolerate-none"),
    ];
    for (shape, label) in shapes {
        shape_row(
            t,
            shape,
            &format!("(b) 10% NotReady, {label}: makespan on the Ready nodes"),
            "makespan_s",
            " s",
        );
        let budget = show(r, &format!("{v}.budget"), "");
        shape_row(
            t,
            shape,
            &format!("(b) {label}: peak unavailable Ready nodes (budget {budget})"),
            "peak_unavailable",
            "",
        );
        let violations = format!("(b) {label}: budget violations");
        shape_row(t, shape, &violations, "budget_violations", "");
    }
    row(
        t,
        "(c) cut-off node back: node Ready → pod upgraded, p50",
        &format!("{v}.comeback_p50_s.rollgate"),
        &format!("{v}.comeback_p50_s.openyurt"),
        " s",
        true,
    );
    row(
        t,
        "(c) the same, max",
        &format!("{v}.comeback_max_s.rollgate"),
        &format!("{v}.comeback_max_s.openyurt"),
        " s",
        true,
    );
    row(
        t,
        "(d) OTA: new revision → PodNeedUpgrade=True on every pod",
        &format!("{v}.ota_all_marked_s.rollgate"),
        &format!("{v}.ota_all_marked_s.openyurt"),
        " s",
        true,
    );
    row(
        t,
        "(d) pods still carrying PodNeedUpgrade 10 s after the DaemonSet stops being OTA",
        &format!("{v}.ota_left_behind.rollgate"),
        &format!("{v}.ota_left_behind.openyurt"),
        "",
        true,
    );
    row(
        t,
        "(e) peak RSS of the controller process",
        &format!("{v}.peak_rss_mb.rollgate"),
        &format!("{v}.peak_rss_mb.openyurt"),
        " MiB",
        true,
    );
    row(
        t,
        "(e) CPU seconds during (a)",
        &format!("{v}.cpu_s_aru.rollgate"),
        &format!("{v}.cpu_s_aru.openyurt"),
        " s",
        true,
    );
    for (shape, label) in shapes {
        let cpu = format!("(e) CPU seconds during (b) {label}");
        shape_row(t, shape, &cpu, "cpu_s", " s");
        // A controller that stalls spends less: per pod it upgraded is the fair figure.
        let per_pod = "(e) the same, CPU per pod upgraded";
        shape_row(t, shape, per_pod, "cpu_ms_per_pod_upgraded", " ms");
    }
    if let Some(p) = get(r, &format!("{v}.partial")).and_then(Value::as_str) {
        t.push_str(&format!("\nPartial: {p}.\n"));
    }
}

/// (key, label, unit, target and whether lower is better).
type Row<'a> = (&'a str, &'a str, &'a str, Option<(f64, bool)>);

/// A section of figures another bench owns: each shown, or null with the reason.
/// A crash-looping release: one row per controller, the figures as columns.
fn bad_release_section(t: &mut String, r: &Results) {
    let p = "rollout.bad_release";
    t.push_str("\n## A release that crash-loops\n\n");
    if section_absent(r, p) {
        t.push_str(&format!("null: not measured{}\n", reason(r, p)));
        return;
    }
    t.push_str(&format!(
        "{} nodes, budget {}, each watched {} s, canary wave {} nodes\n\n",
        show(r, &format!("{p}.nodes"), ""),
        show(r, &format!("{p}.budget"), ""),
        show(r, &format!("{p}.window_s"), ""),
        show(r, &format!("{p}.canary_nodes"), ""),
    ));
    let columns = [
        ("peak_unavailable", "peak without a working pod", ""),
        ("node_seconds_without_pod", "node-seconds", ""),
        ("unavailable_at_end", "at the end", ""),
        ("failed_nodes", "failed", ""),
        ("nodes_touched", "touched", ""),
        ("nodes_touched_outside_canary", "outside the canary", ""),
        ("first_failure_to_stop_s", "first failure -> stop", " s"),
        ("every_node_serving_again_s", "all serving again", " s"),
    ];
    t.push('|');
    for (_, label, _) in &columns {
        t.push_str(&format!(" | {label}"));
    }
    t.push_str(" |\n|---");
    t.push_str(&"|---".repeat(columns.len()));
    t.push_str("|\n");
    for (who, label) in [
        ("native", "native RollingUpdate"),
        ("openyurt", "yurt-manager"),
        ("rollgate_halt", "rollgate, halt"),
        ("rollgate_rollback", "rollgate, rollback"),
        ("rollgate_canary", "rollgate, canary wave"),
    ] {
        if get(r, &format!("{p}.{who}.peak_unavailable")).is_none() {
            continue;
        }
        t.push_str(&format!("| {label}"));
        for (key, _, unit) in &columns {
            let key = format!("{p}.{who}.{key}");
            let shown = match get(r, &key) {
                Some(Value::Null) | None => "-".to_string(),
                Some(_) => show(r, &key, unit),
            };
            t.push_str(&format!(" | {shown}"));
        }
        t.push_str(" |\n");
    }
    t.push_str(&format!(
        "\nA good release, the price of proving first: makespan {} with the defaults, {} with `rollgate.io/on-failure: continue`\n",
        show(r, &format!("{p}.good_release.makespan_s"), " s"),
        show(r, &format!("{p}.good_release.on_failure_continue_makespan_s"), " s"),
    ));
}

fn simple_section(t: &mut String, r: &Results, section: &str, title: &str, rows: &[Row]) {
    t.push_str(&format!("\n## {title}\n\n"));
    if section_absent(r, section) {
        t.push_str(&format!("null: not measured{}\n", reason(r, section)));
        return;
    }
    t.push_str("| figure | measured | target | result |\n|---|---|---|---|\n");
    for (key, label, unit, target) in rows {
        let (target_text, result) = match target {
            Some((v, lower)) => (
                format!("{} {v}{unit}", if *lower { "≤" } else { "≥" }),
                verdict(num(r, key), *v, *lower),
            ),
            None => (String::new(), String::new()),
        };
        t.push_str(&format!(
            "| {label} | {} | {target_text} | {result} |\n",
            show(r, key, unit)
        ));
    }
}

// ---------------------------------------------------------------------------------------
// The plots
// ---------------------------------------------------------------------------------------

fn find_font() -> Result<&'static [u8], String> {
    let mut candidates: Vec<PathBuf> = std::env::var_os("ROLLGATE_BENCH_FONT")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    candidates.extend(
        [
            "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
            "/usr/share/fonts/TTF/DejaVuSans.ttf",
            "/usr/share/fonts/dejavu/DejaVuSans.ttf",
            "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
        ]
        .map(PathBuf::from),
    );
    for path in &candidates {
        if let Ok(bytes) = std::fs::read(path) {
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                .map_err(|_| format!("{} is not a usable TrueType font", path.display()))?;
            return Ok(bytes);
        }
    }
    Err(
        "no TrueType font found (set ROLLGATE_BENCH_FONT, or install Debian's fonts-dejavu-core)"
            .into(),
    )
}

/// (time s, updated, unavailable) points of one rollout.
fn samples(rollout: &Value) -> Vec<(f64, f64, f64)> {
    rollout["samples"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| Some((s[0].as_f64()?, s[1].as_f64()?, s[2].as_f64()?)))
                .collect()
        })
        .unwrap_or_default()
}

/// A step line: each value holds until the next sample.
fn steps(points: &[(f64, f64)], until: f64) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(points.len() * 2 + 1);
    for (i, &(t, v)) in points.iter().enumerate() {
        if i > 0 {
            out.push((t, points[i - 1].1));
        }
        out.push((t, v));
    }
    if let Some(&(_, v)) = points.last() {
        out.push((until, v));
    }
    out
}

/// A JSON file of the results folder, when it is there and reads as `T`.
fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Option<T> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// A crash-looping release (`rollout.bad_release`): Ready nodes without a working pod
/// under each controller, beside the budget.
fn plot_bad_release(path: &Path, bad: &Value) -> DrawResult {
    let rollouts = &bad["rollouts"];
    let keys: Vec<(&str, &str)> = rollouts
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.as_str(), v["label"].as_str()?)))
        .collect();
    let caption = format!(
        "a release that crash-loops on {} nodes: Ready nodes without a working pod",
        bad["nodes"]
    );
    plot_unavailable(
        path,
        caption,
        rollouts,
        &keys,
        bad["budget"].as_f64().unwrap_or(1.0),
    )
}

fn draw_plots(dir: &Path, timelines: &Value, _font: &'static [u8]) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    let Some(sizes) = timelines.as_object() else {
        return Ok(files);
    };
    for (size, t) in sizes {
        let rollouts = &t["rollouts"];
        let nodes = t["nodes"].as_f64().unwrap_or(0.0);
        let budget = t["budget"].as_f64().unwrap_or(1.0);
        let batch_s = t["batch_s"].as_f64().unwrap_or(1.0);
        let updated: Vec<(&str, &str)> = ["a", "b", "c", "d", "yurt-a"]
            .into_iter()
            .filter_map(|k| Some((k, rollouts[k]["label"].as_str()?)))
            .collect();
        if !updated.is_empty() {
            let path = dir.join(format!("rollout-{size}-nodes.png"));
            plot_updated(&path, size, rollouts, &updated, nodes, budget, batch_s)
                .map_err(|e| format!("drawing {}: {e}", path.display()))?;
            files.push(path);
        }
        let notready: Vec<(&str, &str)> = ["c", "c-none", "yurt-c", "yurt-c-none"]
            .into_iter()
            .filter_map(|k| Some((k, rollouts[k]["label"].as_str()?)))
            .collect();
        if notready.iter().any(|(k, _)| k.starts_with("yurt")) {
            let path = dir.join(format!("vs-openyurt-notready-{size}-nodes.png"));
            let caption =
                format!("10% of {size} nodes NotReady: unavailable Ready nodes during the rollout");
            plot_unavailable(&path, caption, rollouts, &notready, budget)
                .map_err(|e| format!("drawing {}: {e}", path.display()))?;
            files.push(path);
        }
        if t["comeback"].as_object().is_some_and(|c| !c.is_empty()) {
            let path = dir.join(format!("vs-openyurt-comeback-{size}-nodes.png"));
            plot_comeback(&path, size, &t["comeback"], batch_s)
                .map_err(|e| format!("drawing {}: {e}", path.display()))?;
            files.push(path);
        }
    }
    Ok(files)
}

const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

type DrawResult = Result<(), Box<dyn std::error::Error>>;

type Chart<'a, 'b> =
    ChartContext<'a, BitMapBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// The frame every plot shares: a caption, two axes from 0 and their descriptions.
fn chart<'a, 'b>(
    root: &'a DrawingArea<BitMapBackend<'b>, Shift>,
    caption: String,
    x: (f64, &str),
    y: (f64, &str),
) -> Result<Chart<'a, 'b>, Box<dyn std::error::Error>> {
    let mut chart = ChartBuilder::on(root)
        .caption(caption, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(0f64..x.0, 0f64..y.0)?;
    chart
        .configure_mesh()
        .x_desc(x.1)
        .y_desc(y.1)
        .label_style(("sans-serif", 14))
        .draw()?;
    Ok(chart)
}

/// The legend box every plot shares.
fn draw_legend<'a, 'b: 'a>(chart: &mut Chart<'a, 'b>, position: SeriesLabelPosition) -> DrawResult {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()?;
    Ok(())
}

fn plot_updated(
    path: &Path,
    size: &str,
    rollouts: &Value,
    keys: &[(&str, &str)],
    nodes: f64,
    budget: f64,
    batch_s: f64,
) -> DrawResult {
    let until = keys
        .iter()
        .filter_map(|(k, _)| rollouts[*k]["watched_s"].as_f64())
        .fold(batch_s, f64::max)
        * 1.05;
    let root = BitMapBackend::new(path, (1000, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = chart(
        &root,
        format!("DaemonSet rollout, {size} nodes, budget {budget}: nodes updated over time"),
        (until, "seconds since the new revision"),
        (nodes * 1.05, "nodes with an available new pod"),
    )?;
    // The ideal: every batch takes exactly start + stop.
    let batches = (nodes / budget).ceil() as usize;
    let ideal: Vec<(f64, f64)> = (0..=batches)
        .map(|k| (k as f64 * batch_s, (k as f64 * budget).min(nodes)))
        .collect();
    chart
        .draw_series(LineSeries::new(
            steps(&ideal, batches as f64 * batch_s),
            BLACK.stroke_width(1),
        ))?
        .label("ideal: batches × (start + stop)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    for (i, (key, label)) in keys.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let points: Vec<(f64, f64)> = samples(&rollouts[*key])
            .into_iter()
            .map(|(t, u, _)| (t, u))
            .collect();
        let end = rollouts[*key]["watched_s"].as_f64().unwrap_or(until);
        let text = match rollouts[*key]["makespan_s"].as_f64() {
            Some(m) => format!("({key}) {label}: {m:.1} s"),
            None => format!("({key}) {label}: incomplete after {end:.1} s"),
        };
        chart
            .draw_series(LineSeries::new(steps(&points, end), color.stroke_width(2)))?
            .label(text)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    draw_legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    root.present()?;
    Ok(())
}

/// A histogram of healthy-in-LB -> gate True, in 100 ms bins, with the targets marked.
fn plot_gate_latencies(path: &Path, latencies: &[f64]) -> DrawResult {
    const BIN_S: f64 = 0.1;
    let max = latencies.iter().copied().fold(2.0, f64::max);
    let bins = (max / BIN_S).ceil() as usize + 1;
    let mut counts = vec![0u32; bins];
    for &l in latencies {
        counts[((l.max(0.0) / BIN_S) as usize).min(bins - 1)] += 1;
    }
    let top = counts.iter().copied().max().unwrap_or(1).max(1) as f64 * 1.1;
    let root = BitMapBackend::new(path, (1000, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = chart(
        &root,
        format!(
            "Readiness gates: healthy in the load balancer -> gate True, {} pods",
            latencies.len()
        ),
        (bins as f64 * BIN_S, "seconds (100 ms bins)"),
        (top, "pods"),
    )?;
    chart.draw_series(counts.iter().enumerate().map(|(i, &c)| {
        let x = i as f64 * BIN_S;
        Rectangle::new([(x, 0.0), (x + BIN_S, c as f64)], PALETTE[0].filled())
    }))?;
    for (target, label, color) in [
        (1.0, "target p50 <= 1 s", PALETTE[2]),
        (2.0, "target p99 <= 2 s", PALETTE[1]),
    ] {
        chart
            .draw_series(LineSeries::new(
                vec![(target, 0.0), (target, top)],
                color.stroke_width(2),
            ))?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    root.present()?;
    Ok(())
}

/// (Services, one rollout's flip p50, p99) of every fleet size the gates fleet bench
/// ran, the new code's, smallest first; none when fewer than two sizes ran.
fn fleet_flip_points(r: &Results) -> Option<Vec<(f64, f64, f64)>> {
    let mut points: Vec<(f64, f64, f64)> = r
        .keys()
        .filter_map(|k| {
            let size = k
                .strip_prefix("gates.fleet.by_services.")?
                .strip_suffix(".new.a_flip_p50_s")?;
            let at = |name: &str| num(r, &format!("gates.fleet.by_services.{size}.new.{name}"));
            Some((size.parse().ok()?, at("a_flip_p50_s")?, at("a_flip_p99_s")?))
        })
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    (points.len() >= 2).then_some(points)
}

/// One rollout's flip latency against the number of Services, with the goals.
fn plot_fleet_flips(path: &Path, points: &[(f64, f64, f64)]) -> DrawResult {
    let most = points.iter().map(|p| p.0).fold(0.0, f64::max) * 1.05;
    let top = points.iter().map(|p| p.2).fold(2.0, f64::max) * 1.2;
    let root = BitMapBackend::new(path, (1000, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = chart(
        &root,
        "Readiness gates: one rollout among idle Services, healthy in the LB -> gate True".into(),
        (most, "LoadBalancer Services in the fleet"),
        (top, "seconds"),
    )?;
    for (label, color, value) in [("p50", PALETTE[0], 1usize), ("p99", PALETTE[1], 2usize)] {
        let line: Vec<(f64, f64)> = points
            .iter()
            .map(|p| (p.0, if value == 1 { p.1 } else { p.2 }))
            .collect();
        chart.draw_series(
            line.iter()
                .map(|&(x, y)| Circle::new((x, y), 5, color.filled())),
        )?;
        chart
            .draw_series(LineSeries::new(line, color.stroke_width(2)))?
            .label(format!("flip {label}"))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    for (target, label, color) in [
        (1.0, "goal p50 <= 1 s", PALETTE[2]),
        (2.0, "goal p99 <= 2 s", PALETTE[3]),
    ] {
        chart
            .draw_series(LineSeries::new(
                vec![(0.0, target), (most, target)],
                color.stroke_width(1),
            ))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    root.present()?;
    Ok(())
}

fn plot_unavailable(
    path: &Path,
    caption: String,
    rollouts: &Value,
    keys: &[(&str, &str)],
    budget: f64,
) -> DrawResult {
    let until = keys
        .iter()
        .filter_map(|(k, _)| rollouts[*k]["watched_s"].as_f64())
        .fold(1.0, f64::max)
        * 1.05;
    let peak = keys
        .iter()
        .flat_map(|(k, _)| samples(&rollouts[*k]))
        .map(|(_, _, u)| u)
        .fold(budget, f64::max);
    let root = BitMapBackend::new(path, (1000, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = chart(
        &root,
        caption,
        (until, "seconds since the new revision"),
        ((peak * 1.3).ceil(), "Ready nodes without an available pod"),
    )?;
    chart
        .draw_series(LineSeries::new(
            vec![(0.0, budget), (until, budget)],
            BLACK.stroke_width(2),
        ))?
        .label(format!("budget ({budget})"))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.stroke_width(2)));
    for (i, (key, label)) in keys.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let points: Vec<(f64, f64)> = samples(&rollouts[*key])
            .into_iter()
            .map(|(t, _, u)| (t, u))
            .collect();
        let end = rollouts[*key]["watched_s"].as_f64().unwrap_or(until);
        chart
            .draw_series(LineSeries::new(steps(&points, end), color.stroke_width(2)))?
            .label(label.to_string())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    root.present()?;
    Ok(())
}

/// (c) The cut-off nodes come back: per controller, how many of their pods are upgraded
/// how long after their node turned Ready, beside the floor of one pod stop and start.
fn plot_comeback(path: &Path, size: &str, comeback: &Value, batch_s: f64) -> DrawResult {
    let mut series: Vec<(String, Vec<f64>, usize)> = comeback
        .as_object()
        .into_iter()
        .flatten()
        .map(|(who, times)| {
            let all = times.as_array().cloned().unwrap_or_default();
            let mut done: Vec<f64> = all.iter().filter_map(Value::as_f64).collect();
            done.sort_by(f64::total_cmp);
            let missing = all.len() - done.len();
            let name = if who == "openyurt" {
                "yurt-manager"
            } else {
                who
            };
            (name.to_string(), done, missing)
        })
        .collect();
    // rollgate first, in the first colour, as in the other plots.
    series.sort_by_key(|(name, ..)| name != "rollgate");
    let slowest = series
        .iter()
        .flat_map(|(_, done, _)| done.iter().copied())
        .fold(batch_s, f64::max);
    let most = series
        .iter()
        .map(|(_, done, missing)| done.len() + missing)
        .max()
        .unwrap_or(1)
        .max(1);
    let until = slowest * 1.15;
    let root = BitMapBackend::new(path, (1000, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = chart(
        &root,
        format!("Cut-off nodes back, {size} nodes: their pods upgraded after the node's return"),
        (until, "seconds since the node turned Ready"),
        ((most as f64 * 1.25).ceil(), "returning pods upgraded"),
    )?;
    chart
        .draw_series(LineSeries::new(
            vec![(batch_s, 0.0), (batch_s, most as f64 * 1.25)],
            BLACK.stroke_width(1),
        ))?
        .label(format!("floor: one pod stop + start ({batch_s} s)"))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    for (i, (name, done, missing)) in series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let mut points = vec![(0.0, 0.0)];
        points.extend(done.iter().enumerate().map(|(k, &t)| (t, (k + 1) as f64)));
        let max = done.last().copied().unwrap_or(f64::NAN);
        chart
            .draw_series(LineSeries::new(
                steps(&points, until),
                color.stroke_width(2),
            ))?
            .label(format!(
                "{name}: {} upgraded, the last after {max:.2} s; {missing} not upgraded",
                done.len()
            ))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    root.present()?;
    Ok(())
}
