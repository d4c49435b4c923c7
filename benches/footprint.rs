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
//!   big, K=V  the same with the environment variable K=V set for the controller, once per
//!             entry of `ROLLGATE_BENCH_FOOTPRINT_VARIANT_ENV` (space-separated, e.g.
//!             `MALLOC_ARENA_MAX=2`): allocator settings, compared on the same bed
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

use footprint::{bytes_per_pod, measure_controller, measure_controller_with, mib, Bed, Footprint};
use serde_json::json;
use support::*;

#[path = "../tests/support/heap.rs"]
mod heap;

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
    /// Extra rows at the big size, each with one `(variable, value)` set for the controller.
    variant_env: Vec<(String, String)>,
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
            variant_env: std::env::var("ROLLGATE_BENCH_FOOTPRINT_VARIANT_ENV")
                .unwrap_or_default()
                .split_whitespace()
                .map(|kv| match kv.split_once('=') {
                    Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
                    _ => Err(format!(
                        "ROLLGATE_BENCH_FOOTPRINT_VARIANT_ENV: {kv:?} is not VARIABLE=value"
                    )),
                })
                .collect::<Result<_, _>>()?,
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
    let streaming_row = params.streaming.then_some(rows.len());
    if params.streaming {
        rows.push(run_at(bed, "big, streaming lists", 0.0, true).await?);
    }
    let variants_from = rows.len();
    for (key, value) in &params.variant_env {
        let name = format!("big, {key}={value}");
        note(format!("measuring '{name}'"));
        let tag = format!("variant-{key}-{value}");
        let fp = measure_controller_with(
            bed.namespace(),
            &tag,
            &[(key.as_str(), value.as_str())],
            settle,
            READY_TIMEOUT,
        )
        .await?;
        note(format!(
            "'{name}': peak {:.1} MiB, steady {:.1} MiB",
            mib(fp.peak_rss_kib),
            mib(fp.steady_rss_kib)
        ));
        rows.push(Row {
            name,
            nodes: bed.nodes,
            pods: bed.pods(),
            setup_s: 0.0,
            fp,
        });
    }

    let sizes = pod_json_sizes(bed).await?;
    let nodes_in_memory = node_sizes().await?;

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
    for s in streaming_row
        .iter()
        .map(|&i| &rows[i])
        .chain(&rows[variants_from..])
    {
        out.push_str(&format!(
            "{:<44} {:>10} {:>10} {:>6}\n",
            format!(
                "peak RSS at {} pods, {}",
                s.pods,
                s.name.trim_start_matches("big, ")
            ),
            format!("{:.1} MiB", mib(s.fp.peak_rss_kib)),
            "<= 64 MiB",
            verdict(s.fp.peak_rss_kib as f64)
        ));
    }
    out.push_str(&format!(
        "one pod as JSON, mean of {} (what crosses the wire):\n  from the API {:.0} B; \
         without managedFields {:.0} B; as the shared store keeps it (CachedPod) {:.0} B\n",
        sizes.sampled, sizes.full, sizes.without_managed_fields, sizes.pruned,
    ));
    out.push_str(&format!(
        "in memory (what each cache holds; heap counted by this bench's allocator, \
         without malloc's own overhead):\n\
         \x20 per pod:  a full Pod {} B inline + {:.0} B heap; CachedPod {} B inline + {:.0} B heap; \
         store entry (ObjectRef key {} B inline + {:.0} B heap, Arc header 16 B, table slot {} B) \
         = {:.0} B per cached pod\n\
         \x20 per node: a full Node {} B inline + {:.0} B heap; CachedNode {} B inline + {:.0} B heap; \
         = {:.0} B per cached node with its store entry ({} nodes sampled)\n",
        std::mem::size_of::<k8s_openapi::api::core::v1::Pod>(),
        sizes.heap_full,
        std::mem::size_of::<rollgate::object::CachedPod>(),
        sizes.heap_cached,
        std::mem::size_of::<kube::runtime::reflector::ObjectRef<rollgate::object::CachedPod>>(),
        sizes.heap_key,
        store_slot::<rollgate::object::CachedPod>(),
        sizes.cached_total(),
        std::mem::size_of::<k8s_openapi::api::core::v1::Node>(),
        nodes_in_memory.heap_full,
        std::mem::size_of::<rollgate::object::CachedNode>(),
        nodes_in_memory.heap_cached,
        nodes_in_memory.cached_total(),
        nodes_in_memory.sampled,
    ));
    let or_dash = |v: Option<f64>| v.map_or("-".to_string(), |b| format!("{b:.0} B"));
    out.push_str(&format!(
        "  {} of the {} sampled pods were Running: a cached Running pod costs {}, any other {}\n",
        sizes.running,
        sizes.sampled,
        or_dash(sizes.running_cached),
        or_dash(sizes.other_cached),
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
            "footprint.cached_pod_bytes",
            json!(sizes.cached_total().round()),
        ),
        (
            "footprint.cached_node_bytes",
            json!(nodes_in_memory.cached_total().round()),
        ),
        (
            "footprint.controller_empty_rss_mb",
            json!(round1(mib(empty.fp.steady_rss_kib))),
        ),
        (
            "footprint.setup_s",
            json!(round1(rows.iter().map(|r| r.setup_s).sum::<f64>())),
        ),
    ];
    if let Some(s) = streaming_row.map(|i| &rows[i]) {
        entries.push((
            "footprint.streaming_lists_peak_rss_mb",
            json!(round1(mib(s.fp.peak_rss_kib))),
        ));
        entries.push((
            "footprint.streaming_lists_steady_rss_mb",
            json!(round1(mib(s.fp.steady_rss_kib))),
        ));
    }
    let variant_keys: Vec<(String, serde_json::Value)> = rows[variants_from..]
        .iter()
        .map(|r| {
            let variant = r.name.trim_start_matches("big, ");
            (
                format!("footprint.variant.{variant}.peak_rss_mb"),
                json!(round1(mib(r.fp.peak_rss_kib))),
            )
        })
        .collect();
    entries.extend(variant_keys.iter().map(|(k, v)| (k.as_str(), v.clone())));
    let path = merge_bench_results(&entries)?;
    out.push_str(&format!("results merged into {}\n", path.display()));
    Ok(out)
}

/// What one object of the bed costs, as JSON and in memory (means over a sample).
struct Sizes {
    sampled: usize,
    /// JSON from the API.
    full: f64,
    /// JSON without managedFields.
    without_managed_fields: f64,
    /// JSON of the cached form.
    pruned: f64,
    /// Heap a full API object holds.
    heap_full: f64,
    /// Heap the cached form holds.
    heap_cached: f64,
    /// Heap of its store key (`ObjectRef`: name, namespace, UID, resourceVersion).
    heap_key: f64,
    /// Inline size of the cached form plus its store entry, without the heap.
    inline_total: usize,
    /// Pods only: how many of the sample were Running, and the cached cost of a Running
    /// pod and of any other.
    running: usize,
    running_cached: Option<f64>,
    other_cached: Option<f64>,
}

impl Sizes {
    /// Bytes one cached object costs in its store: the object, its key, the `Arc`
    /// header and the table slot.
    fn cached_total(&self) -> f64 {
        self.inline_total as f64 + self.heap_cached + self.heap_key
    }
}

/// A reflector store is a hash map from `ObjectRef<K>` to `Arc<K>`: one slot holds both,
/// plus a control byte.
fn store_slot<K: kube::Resource>() -> usize {
    std::mem::size_of::<kube::runtime::reflector::ObjectRef<K>>()
        + std::mem::size_of::<std::sync::Arc<K>>()
        + 1
}

/// Weighs one sample of objects as the API sends them and as the cache keeps them.
fn weigh<F, C>(items: &[F], convert: impl Fn(F) -> C) -> Sizes
where
    F: Clone + serde::Serialize,
    C: kube::Resource<DynamicType = ()> + serde::Serialize,
{
    let mut s = Sizes {
        sampled: items.len(),
        full: 0.0,
        without_managed_fields: 0.0,
        pruned: 0.0,
        heap_full: 0.0,
        heap_cached: 0.0,
        heap_key: 0.0,
        inline_total: std::mem::size_of::<C>() + 16 + store_slot::<C>(),
        running: 0,
        running_cached: None,
        other_cached: None,
    };
    for item in items {
        s.full += json_len(item) as f64;
        let (full, heap_full) = heap::kept_by(|| item.clone());
        s.heap_full += heap_full as f64;
        drop(full);
        // Cloned inside: the conversion moves the strings it keeps out of the full object,
        // so only a fresh copy shows what the cached form holds.
        let (cached, heap_cached) = heap::kept_by(|| convert(item.clone()));
        s.heap_cached += heap_cached as f64;
        s.pruned += json_len(&cached) as f64;
        let (key, heap_key) =
            heap::kept_by(|| kube::runtime::reflector::ObjectRef::from_obj(&cached));
        s.heap_key += heap_key as f64;
        drop(key);
    }
    let n = items.len().max(1) as f64;
    for v in [
        &mut s.full,
        &mut s.pruned,
        &mut s.heap_full,
        &mut s.heap_cached,
        &mut s.heap_key,
    ] {
        *v /= n;
    }
    s
}

fn json_len<T: serde::Serialize>(value: &T) -> usize {
    serde_json::to_vec(value).map(|v| v.len()).unwrap_or(0)
}

async fn pod_json_sizes(bed: &Bed) -> Result<Sizes, String> {
    use k8s_openapi::api::core::v1::Pod;
    let api: kube::Api<Pod> = kube::Api::namespaced(client().await, bed.namespace());
    let list = api
        .list(&kube::api::ListParams::default().limit(500))
        .await
        .map_err(|e| format!("listing pods: {e}"))?;
    let mut sizes = weigh(&list.items, rollgate::object::CachedPod::from);
    // A Running pod carries more status (conditions, IP, container readiness) than a
    // Pending one: weigh both, so a bed measured before every pod ran can be read right.
    let running = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    let (run, other): (Vec<Pod>, Vec<Pod>) = list.items.iter().cloned().partition(running);
    sizes.running = run.len();
    sizes.running_cached =
        (!run.is_empty()).then(|| weigh(&run, rollgate::object::CachedPod::from).cached_total());
    sizes.other_cached = (!other.is_empty())
        .then(|| weigh(&other, rollgate::object::CachedPod::from).cached_total());
    let without: usize = list
        .items
        .iter()
        .map(|pod| {
            let mut p = pod.clone();
            p.metadata.managed_fields = None;
            json_len(&p)
        })
        .sum();
    sizes.without_managed_fields = without as f64 / list.items.len().max(1) as f64;
    Ok(sizes)
}

async fn node_sizes() -> Result<Sizes, String> {
    use k8s_openapi::api::core::v1::Node;
    let api: kube::Api<Node> = kube::Api::all(client().await);
    let list = api
        .list(&kube::api::ListParams::default().limit(200))
        .await
        .map_err(|e| format!("listing nodes: {e}"))?;
    Ok(weigh(&list.items, rollgate::object::CachedNode::from))
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}
