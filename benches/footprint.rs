//! The controller's footprint at scale (issue 10), on the local control plane.
//!
//! Simulated nodes (kwok) and DaemonSets that tolerate every taint, so the real
//! kube-controller-manager makes one pod per DaemonSet per node. At each size the release
//! `rollgate controller` (the binary cargo built for this bench) starts, lists everything,
//! turns `/readyz` 200 and runs a settle time; its `/proc` figures are sampled every
//! 200 ms from start. Sizes, in one run, growing the same bed:
//!
//!   empty     no nodes, no DaemonSets: what the process costs by itself
//!   nodes     the small node count, no DaemonSets: what nodes cost
//!   small     small node count x DaemonSets
//!   big       node count x DaemonSets (the target size: 1,000 x 10 = 10,000 pods)
//!   big, streaming lists  the same with `ROLLGATE_STREAMING_LISTS=1` (WatchList)
//!
//! Bytes per pod = (RSS big - RSS small) / (pods big - pods small).
//!
//! Environment: `ROLLGATE_BENCH_FOOTPRINT_NODES` (1000), `..._SMALL_NODES` (500),
//! `..._DAEMONSETS` (10), `..._SETTLE_S` (20), `..._PARALLEL` (32 creations in flight),
//! `..._STREAMING` (1: also measure streaming lists; 0: skip), `..._WAIT_READY` (1: measure
//! once every pod is Ready; 0: once every pod exists), `ROLLGATE_TEST_KUBECONFIG`.
//!
//! A MISS is a result, not an error: the process fails only when the measurement itself
//! could not be made. Results also go to `target/bench/results.json` (`footprint.*`).
#[path = "../tests/support/mod.rs"]
mod support;

#[path = "../tests/support/footprint.rs"]
mod footprint;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use footprint::{bytes_per_pod, measure_controller, mib, Bed, Footprint};
use serde_json::json;
use support::*;

/// Target of issue 10: peak resident memory at 1,000 nodes / 10,000 pods.
const PEAK_TARGET_KIB: u64 = 64 * 1024;
const READY_TIMEOUT: Duration = Duration::from_secs(300);

struct Params {
    nodes: usize,
    small_nodes: usize,
    daemonsets: usize,
    settle: Duration,
    parallel: usize,
    streaming: bool,
    /// Measure only once every pod is Ready (Running), not just created.
    wait_ready: bool,
}

impl Params {
    fn from_env() -> Result<Self, String> {
        let p = Params {
            nodes: env_or("ROLLGATE_BENCH_FOOTPRINT_NODES", 1000usize)?,
            small_nodes: env_or("ROLLGATE_BENCH_FOOTPRINT_SMALL_NODES", 500usize)?,
            daemonsets: env_or("ROLLGATE_BENCH_FOOTPRINT_DAEMONSETS", 10usize)?,
            settle: Duration::from_secs(env_or("ROLLGATE_BENCH_FOOTPRINT_SETTLE_S", 20u64)?),
            parallel: env_or("ROLLGATE_BENCH_FOOTPRINT_PARALLEL", 32usize)?.clamp(1, 256),
            streaming: env_or("ROLLGATE_BENCH_FOOTPRINT_STREAMING", 1u8)? != 0,
            wait_ready: env_or("ROLLGATE_BENCH_FOOTPRINT_WAIT_READY", 1u8)? != 0,
        };
        if p.small_nodes == 0 || p.small_nodes >= p.nodes || p.daemonsets == 0 {
            return Err(format!(
                "need 0 < ROLLGATE_BENCH_FOOTPRINT_SMALL_NODES ({}) < ROLLGATE_BENCH_FOOTPRINT_NODES ({}) \
                 and ROLLGATE_BENCH_FOOTPRINT_DAEMONSETS ({}) > 0",
                p.small_nodes, p.nodes, p.daemonsets
            ));
        }
        Ok(p)
    }
}

fn main() -> ExitCode {
    bench_main("footprint", Params::from_env(), run)
}

async fn run(params: Params) -> Result<String, String> {
    let client = client().await;
    let mut bed = Bed::new(&client, "footprint").await;
    let measured = measure(&mut bed, &params).await;
    note("cleaning up the bed");
    bed.cleanup().await;
    measured
}

/// One measured size.
struct Row {
    name: String,
    nodes: usize,
    pods: usize,
    /// Seconds to grow the bed to this size (pods created and Ready).
    setup_s: f64,
    fp: Footprint,
}

async fn measure(bed: &mut Bed, params: &Params) -> Result<String, String> {
    let mut rows: Vec<Row> = Vec::new();
    let settle = params.settle;
    let run_at = |bed: &Bed, name: &str, setup_s: f64, streaming: bool| {
        let (ns, nodes, pods) = (bed.namespace().to_string(), bed.nodes, bed.pods());
        let name = name.to_string();
        async move {
            note(format!("measuring '{name}': {nodes} nodes, {pods} pods"));
            let tag = name.replace([' ', ','], "-");
            let fp = measure_controller(&ns, &tag, streaming, settle, READY_TIMEOUT).await?;
            note(format!(
                "'{name}': peak {:.1} MiB, steady {:.1} MiB, CPU {:.2} s",
                mib(fp.peak_rss_kib),
                mib(fp.steady_rss_kib),
                fp.cpu_s
            ));
            Ok::<_, String>(Row {
                name,
                nodes,
                pods,
                setup_s,
                fp,
            })
        }
    };

    rows.push(run_at(bed, "empty", 0.0, false).await?);

    let t = Instant::now();
    bed.grow_nodes(params.small_nodes, params.parallel).await?;
    let nodes_s = t.elapsed().as_secs_f64();
    note(format!("{} nodes created in {nodes_s:.1} s", bed.nodes));
    rows.push(run_at(bed, "nodes", nodes_s, false).await?);

    let t = Instant::now();
    bed.grow_daemonsets(params.daemonsets, params.parallel)
        .await?;
    bed.wait_pods(false, Duration::from_secs(900)).await?;
    let created_s = t.elapsed().as_secs_f64();
    bed.wait_pods(params.wait_ready, Duration::from_secs(900))
        .await?;
    let small_s = t.elapsed().as_secs_f64();
    note(format!(
        "{} pods created in {created_s:.1} s, Ready in {small_s:.1} s",
        bed.pods()
    ));
    rows.push(run_at(bed, "small", small_s, false).await?);

    let t = Instant::now();
    bed.grow_nodes(params.nodes, params.parallel).await?;
    bed.wait_pods(false, Duration::from_secs(900)).await?;
    let created_s = t.elapsed().as_secs_f64();
    bed.wait_pods(params.wait_ready, Duration::from_secs(900))
        .await?;
    let big_s = t.elapsed().as_secs_f64();
    note(format!(
        "grew to {} nodes: {} pods created in {created_s:.1} s, Ready in {big_s:.1} s",
        bed.nodes,
        bed.pods()
    ));
    rows.push(run_at(bed, "big", big_s, false).await?);
    if params.streaming {
        rows.push(run_at(bed, "big, streaming lists", 0.0, true).await?);
    }

    let sizes = pod_json_sizes(bed).await?;

    let small = &rows[2];
    let big = &rows[3];
    let nodes_row = &rows[1];
    let empty = &rows[0];
    let per_pod_steady = bytes_per_pod(
        small.fp.steady_rss_kib,
        small.pods,
        big.fp.steady_rss_kib,
        big.pods,
    );
    let per_pod_peak = bytes_per_pod(
        small.fp.peak_rss_kib,
        small.pods,
        big.fp.peak_rss_kib,
        big.pods,
    );
    let per_node = (nodes_row.fp.steady_rss_kib as f64 - empty.fp.steady_rss_kib as f64) * 1024.0
        / nodes_row.nodes as f64;

    let mut out = String::new();
    out.push_str("== footprint: rollgate controller memory and CPU at scale ==\n");
    out.push_str(&format!(
        "release binary, --watch-namespace of the bed (nodes are cluster-wide); /proc sampled every {:?}; \
         settle {settle:?} after /readyz 200;\nsteady = mean VmRSS over the last quarter of the settle; \
         peak = VmHWM; CPU = utime+stime from start to the end of the settle\n\n",
        footprint::SAMPLE_EVERY
    ));
    out.push_str(&format!(
        "{:<22} {:>6} {:>7} {:>9} {:>8} {:>9} {:>9} {:>8} {:>8} {:>8}\n",
        "size",
        "nodes",
        "pods",
        "setup s",
        "ready s",
        "peak MiB",
        "steady",
        "anon",
        "file",
        "CPU s"
    ));
    for r in &rows {
        out.push_str(&format!(
            "{:<22} {:>6} {:>7} {:>9.1} {:>8.1} {:>9.1} {:>9.1} {:>8.1} {:>8.1} {:>8.2}\n",
            r.name,
            r.nodes,
            r.pods,
            r.setup_s,
            r.fp.ready_after.as_secs_f64(),
            mib(r.fp.peak_rss_kib),
            mib(r.fp.steady_rss_kib),
            mib(r.fp.anon_kib),
            mib(r.fp.file_kib),
            r.fp.cpu_s,
        ));
    }
    out.push('\n');
    out.push_str(&format!(
        "bytes per pod  {per_pod_steady:.0} (steady RSS), {per_pod_peak:.0} (peak)   \
         => {:.1} MiB per 1,000 pods (steady)\n",
        per_pod_steady * 1000.0 / 1_048_576.0
    ));
    out.push_str(&format!(
        "bytes per node {per_node:.0} (steady RSS, {} nodes vs none, no pods)\n\n",
        nodes_row.nodes
    ));
    // The target is stated at 1,000 nodes / 10,000 pods; at another size, scale by bytes per pod.
    let at_target = if big.pods == 10_000 {
        big.fp.peak_rss_kib as f64
    } else {
        big.fp.peak_rss_kib as f64 + (10_000.0 - big.pods as f64) * per_pod_peak / 1024.0
    };
    out.push_str(&format!(
        "{:<44} {:>10} {:>10} {:>6}\n",
        "figure", "measured", "target", "result"
    ));
    let verdict = |kib: f64| {
        if kib <= PEAK_TARGET_KIB as f64 {
            "PASS"
        } else {
            "MISS"
        }
    };
    out.push_str(&format!(
        "{:<44} {:>10} {:>10} {:>6}\n",
        if big.pods == 10_000 {
            "peak RSS at 10,000 pods".to_string()
        } else {
            format!("peak RSS at 10,000 pods (from {} pods)", big.pods)
        },
        format!("{:.1} MiB", at_target / 1024.0),
        "<= 64 MiB",
        verdict(at_target)
    ));
    if let Some(s) = rows.get(4) {
        out.push_str(&format!(
            "{:<44} {:>10} {:>10} {:>6}\n",
            format!("peak RSS at {} pods, streaming lists", s.pods),
            format!("{:.1} MiB", mib(s.fp.peak_rss_kib)),
            "<= 64 MiB",
            verdict(s.fp.peak_rss_kib as f64)
        ));
    }
    out.push_str(&format!(
        "one pod as JSON, mean of {} (a proxy for what a store keeps; in memory a \
         Rust object takes more):\n  from the API {:.0} B; without managedFields {:.0} B; \
         as the shared store keeps it (CachedPod) {:.0} B\n\
         inline size before any heap allocation: Pod {} B, CachedPod {} B\n",
        sizes.sampled,
        sizes.full,
        sizes.without_managed_fields,
        sizes.pruned,
        std::mem::size_of::<k8s_openapi::api::core::v1::Pod>(),
        std::mem::size_of::<rollgate::watch::CachedPod>(),
    ));
    out.push_str("controller logs:\n");
    for r in &rows {
        out.push_str(&format!("  {}: {}\n", r.name, r.fp.log.display()));
    }

    let mut entries = vec![
        ("footprint.nodes", json!(big.nodes)),
        ("footprint.pods", json!(big.pods)),
        (
            "footprint.controller_peak_rss_mb",
            json!(round1(mib(big.fp.peak_rss_kib))),
        ),
        (
            "footprint.controller_steady_rss_mb",
            json!(round1(mib(big.fp.steady_rss_kib))),
        ),
        ("footprint.controller_cpu_s", json!(round1(big.fp.cpu_s))),
        ("footprint.bytes_per_pod", json!(per_pod_steady.round())),
        ("footprint.peak_bytes_per_pod", json!(per_pod_peak.round())),
        ("footprint.bytes_per_node", json!(per_node.round())),
        (
            "footprint.controller_empty_rss_mb",
            json!(round1(mib(empty.fp.steady_rss_kib))),
        ),
        (
            "footprint.setup_s",
            json!(round1(rows.iter().map(|r| r.setup_s).sum::<f64>())),
        ),
    ];
    if let Some(s) = rows.get(4) {
        entries.push((
            "footprint.streaming_lists_peak_rss_mb",
            json!(round1(mib(s.fp.peak_rss_kib))),
        ));
        entries.push((
            "footprint.streaming_lists_steady_rss_mb",
            json!(round1(mib(s.fp.steady_rss_kib))),
        ));
    }
    let path = merge_bench_results(&entries)?;
    out.push_str(&format!("results merged into {}\n", path.display()));
    Ok(out)
}

/// Mean serialized size of the bed's pods as the API sends them, without managedFields,
/// and as the shared store keeps them (`CachedPod`).
struct PodSizes {
    sampled: usize,
    full: f64,
    without_managed_fields: f64,
    pruned: f64,
}

async fn pod_json_sizes(bed: &Bed) -> Result<PodSizes, String> {
    use k8s_openapi::api::core::v1::Pod;
    let api: kube::Api<Pod> = kube::Api::namespaced(client().await, bed.namespace());
    let list = api
        .list(&kube::api::ListParams::default().limit(500))
        .await
        .map_err(|e| format!("listing pods: {e}"))?;
    let (mut full, mut slim, mut pruned) = (0usize, 0usize, 0usize);
    let len = |p: &Pod| serde_json::to_vec(p).map(|v| v.len()).unwrap_or(0);
    for pod in &list.items {
        full += len(pod);
        let mut p = pod.clone();
        p.metadata.managed_fields = None;
        slim += len(&p);
        let cached = rollgate::watch::CachedPod::from(p);
        pruned += serde_json::to_vec(&cached).map(|v| v.len()).unwrap_or(0);
    }
    let n = list.items.len().max(1) as f64;
    Ok(PodSizes {
        sampled: list.items.len(),
        full: full as f64 / n,
        without_managed_fields: slim as f64 / n,
        pruned: pruned as f64 / n,
    })
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}
