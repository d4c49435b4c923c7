//! The node agent's `GET /pods` under load (issue 4), on the local control plane.
//!
//! One simulated node with 110 pods (the kubelet's default maximum), a `rollgate agent`
//! for it (the binary cargo built for this bench, logging at `info` as in production),
//! then keep-alive HTTP/1.1 load from this process, on one thread of its own: first one
//! connection (latency with no queueing), then `ROLLGATE_BENCH_CONNECTIONS` (8)
//! concurrent ones (throughput, and latency as the clients see it, queueing included). Each run is bounded by a duration
//! and a request count. The agent's memory comes from `/proc/<pid>/status`.
//!
//! Environment: `ROLLGATE_BENCH_PODS` (110), `ROLLGATE_BENCH_CONNECTIONS` (8),
//! `ROLLGATE_BENCH_SECONDS` (10), `ROLLGATE_TEST_KUBECONFIG` (the cluster).
//!
//! A MISS is a result, not an error: the process fails only when the measurement itself
//! could not be made (or a request failed).
#[path = "../tests/support/mod.rs"]
mod support;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::json;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Targets of issue 4.
const P99_TARGET: Duration = Duration::from_millis(2);
const RSS_TARGET_KIB: u64 = 20 * 1024;
/// Bounds of one load run besides its duration.
const MAX_REQUESTS_PER_RUN: usize = 2_000_000;
const WARMUP: Duration = Duration::from_secs(1);

struct Params {
    pods: usize,
    connections: usize,
    duration: Duration,
}

impl Params {
    fn from_env() -> Result<Self, String> {
        Ok(Params {
            pods: support::env_or("ROLLGATE_BENCH_PODS", 110usize)?,
            connections: support::env_or("ROLLGATE_BENCH_CONNECTIONS", 8usize)?.clamp(1, 256),
            duration: Duration::from_secs(
                support::env_or("ROLLGATE_BENCH_SECONDS", 10u64)?.clamp(1, 300),
            ),
        })
    }
}

fn main() -> ExitCode {
    bench_main("agent_get_pods", Params::from_env(), run)
}

async fn run(params: Params) -> Result<String, String> {
    let client = client().await;
    let nodes = TestNodes::create(&client, "agentbench", 1).await;
    let ns = TestNamespace::new(&client, "agentbench").await;
    let node = nodes.names[0].clone();
    let measured = tokio::spawn(measure(client.clone(), ns.name.clone(), node, params)).await;
    ns.cleanup().await;
    nodes.cleanup().await;
    match measured {
        Ok(result) => result,
        Err(e) => Err(format!("the measurement failed: {e}")),
    }
}

/// The agent process, killed on drop.
struct Agent {
    child: std::process::Child,
    addr: SocketAddr,
    log: std::path::PathBuf,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Agent {
    fn start(node: &str) -> Result<Self, String> {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_local_port())
            .parse()
            .map_err(|e| format!("{e}"))?;
        let state_dir = temp_dir("agentbench-state");
        let dir = repo_root().join("target/e2e-logs");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let log = dir.join(format!("{}.log", unique_name("agentbench")));
        let out = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_rollgate"))
            .args(["agent", "--node-name", node, "--listen", &addr.to_string()])
            .arg("--state-dir")
            .arg(&state_dir)
            .env("KUBECONFIG", kubeconfig_path())
            .env("ROLLGATE_LOG", "info")
            .stdout(out.try_clone().map_err(|e| e.to_string())?)
            .stderr(out)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", env!("CARGO_BIN_EXE_rollgate")))?;
        note(format!(
            "started rollgate agent pid {} on {addr} ({})",
            child.id(),
            log.display()
        ));
        Ok(Agent { child, addr, log })
    }

    /// (VmRSS, VmHWM) in KiB.
    fn memory_kib(&self) -> Result<(u64, u64), String> {
        let pid = self.child.id();
        let status = support::measure::read_status(pid)?;
        let field = |name: &str| {
            support::measure::status_kib(&status, name)
                .ok_or_else(|| format!("no {name} in /proc/{pid}/status"))
        };
        Ok((field("VmRSS:")?, field("VmHWM:")?))
    }
}

async fn measure(
    client: Client,
    ns: String,
    node: String,
    params: Params,
) -> Result<String, String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for i in 0..params.pods {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("p{i:03}"), "labels": {"app": "agentbench"}},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "main", "image": "registry.local/edge-agent:v1"}]
            }
        }))
        .map_err(|e| e.to_string())?;
        pods.create(&PostParams::default(), &pod)
            .await
            .map_err(|e| format!("creating pod {i}: {e}"))?;
    }
    let want = params.pods;
    wait_for(
        &format!("{want} Running pods on {node}"),
        Duration::from_secs(120),
        || async {
            let list = pods
                .list(&Default::default())
                .await
                .map_err(|e| e.to_string())?;
            let running = list
                .items
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .count();
            if running >= want {
                Ok(())
            } else {
                Err(format!("{running} Running"))
            }
        },
    )
    .await;
    note(format!("{want} pods Running on {node}"));

    let agent = Agent::start(&node)?;
    let addr = agent.addr;
    let body_bytes = wait_for(
        &format!("GET /pods to list {want} pods"),
        Duration::from_secs(60),
        || async {
            let r = http_request(addr, "GET", "/pods")
                .await
                .map_err(|e| e.to_string())?;
            if r.status != 200 {
                return Err(format!("status {}", r.status));
            }
            let items = r.json()["items"].as_array().map_or(0, |a| a.len());
            if items == want {
                Ok(r.body.len())
            } else {
                Err(format!("{items} items"))
            }
        },
    )
    .await;
    let (idle_rss, idle_hwm) = agent.memory_kib()?;
    note(format!(
        "GET /pods lists {want} pods ({body_bytes} bytes); agent RSS {idle_rss} KiB"
    ));

    load(addr, params.connections, WARMUP).await?;
    let single = load(addr, 1, params.duration).await?;
    note(format!("1 connection: {} requests", single.latencies.len()));
    let multi = load(addr, params.connections, params.duration).await?;
    note(format!(
        "{} connections: {} requests",
        params.connections,
        multi.latencies.len()
    ));
    let (rss, hwm) = agent.memory_kib()?;
    let gzip_bytes = gzip_size(addr).await?;

    let sorted = |run: &Run| {
        let mut l = run.latencies.clone();
        l.sort_unstable();
        l
    };
    let (l1, l8) = (sorted(&single), sorted(&multi));
    let ms = |v: u64| json!((v as f64 / 10.0).round() / 100.0);
    support::merge_bench_results(&[
        ("agent.pods", json!(want)),
        ("agent.body_bytes", json!(body_bytes)),
        ("agent.gzip_bytes", json!(gzip_bytes)),
        ("agent.get_pods_p50_ms", ms(pct(&l1, 50.0))),
        ("agent.get_pods_p99_ms", ms(pct(&l1, 99.0))),
        ("agent.get_pods_p50_ms_8conn", ms(pct(&l8, 50.0))),
        ("agent.get_pods_p99_ms_8conn", ms(pct(&l8, 99.0))),
        ("agent.connections", json!(params.connections)),
        (
            "agent.peak_rss_mb",
            json!((hwm.max(idle_hwm) as f64 / 102.4).round() / 10.0),
        ),
    ])?;

    let mut out = String::new();
    out.push_str("== agent_get_pods: rollgate agent GET /pods ==\n");
    out.push_str(&format!(
        "{want} pods on one simulated node, response body {body_bytes} bytes; HTTP/1.1 keep-alive from one thread of this process\n\
         (client and agent share the machine's cores); warm-up {WARMUP:?}, each run {:?} or {MAX_REQUESTS_PER_RUN} requests\n\n",
        params.duration
    ));
    out.push_str(&format!(
        "{:<26} {:>9} {:>9} {:>9} {:>9} {:>9} {:>12} {:>10} {:>6}\n",
        "run", "p50", "p90", "p99", "p99.9", "max", "req/s", "target", "result"
    ));
    for (name, run) in [
        ("1 connection".to_string(), &single),
        (format!("{} connections", params.connections), &multi),
    ] {
        let mut l = run.latencies.clone();
        l.sort_unstable();
        let p99 = pct(&l, 99.0);
        out.push_str(&format!(
            "{:<26} {:>9} {:>9} {:>9} {:>9} {:>9} {:>12.0} {:>10} {:>6}\n",
            name,
            us(pct(&l, 50.0)),
            us(pct(&l, 90.0)),
            us(p99),
            us(pct(&l, 99.9)),
            us(l.last().copied().unwrap_or_default()),
            l.len() as f64 / run.elapsed.as_secs_f64(),
            format!("p99 < {}", us(P99_TARGET.as_micros() as u64)),
            if p99 < P99_TARGET.as_micros() as u64 {
                "PASS"
            } else {
                "MISS"
            },
        ));
    }
    out.push('\n');
    out.push_str(&format!(
        "{:<26} {:>10} {:>10} {:>6}\n",
        "agent memory", "value", "target", "result"
    ));
    for (name, kib) in [
        ("VmRSS idle (before load)", idle_rss),
        ("VmRSS after load", rss),
        ("VmHWM peak", hwm.max(idle_hwm)),
    ] {
        out.push_str(&format!(
            "{:<26} {:>10} {:>10} {:>6}\n",
            name,
            format!("{:.1} MiB", kib as f64 / 1024.0),
            "< 20 MiB",
            if kib < RSS_TARGET_KIB { "PASS" } else { "MISS" },
        ));
    }
    out.push_str(&format!("agent log: {}\n", agent.log.display()));
    Ok(out)
}

/// The size of the body when the client asks for gzip (edge links are thin).
async fn gzip_size(addr: SocketAddr) -> Result<usize, String> {
    let mut stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    stream
        .write_all(b"GET /pods HTTP/1.1\r\nHost: agent\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n")
        .await
        .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .await
        .map_err(|e| e.to_string())?;
    let head_end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of headers in the gzip answer")?
        + 4;
    let head = String::from_utf8_lossy(&raw[..head_end]).to_ascii_lowercase();
    if !head.contains("content-encoding: gzip") {
        return Err("the agent did not answer gzip to Accept-Encoding: gzip".into());
    }
    Ok(raw.len() - head_end)
}

struct Run {
    /// Microseconds, one per request.
    latencies: Vec<u64>,
    elapsed: Duration,
}

/// `connections` keep-alive connections, each sending one request at a time, until
/// `duration` has passed or the run's request budget is spent.
/// One load run: `connections` keep-alive connections driven by one thread of their
/// own (like `wrk -t1 -c8`), so the client adds one busy thread to the machine, not one
/// per core: on 2 cores, a client with more runnable threads than the cores left over
/// measures the kernel's time slices, not the agent.
async fn load(addr: SocketAddr, connections: usize, duration: Duration) -> Result<Run, String> {
    tokio::task::spawn_blocking(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?
            .block_on(load_on_this_thread(addr, connections, duration))
    })
    .await
    .map_err(|e| e.to_string())?
}

async fn load_on_this_thread(
    addr: SocketAddr,
    connections: usize,
    duration: Duration,
) -> Result<Run, String> {
    let per_connection = MAX_REQUESTS_PER_RUN / connections;
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..connections {
        tasks.spawn(async move {
            let mut conn = Connection::open(addr).await?;
            let mut latencies = Vec::with_capacity(per_connection.min(1 << 20));
            while latencies.len() < per_connection && Instant::now() < deadline {
                let sent = Instant::now();
                conn.get_pods().await?;
                latencies.push(sent.elapsed().as_micros() as u64);
            }
            Ok::<_, String>(latencies)
        });
    }
    let mut latencies = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        latencies.extend(joined.map_err(|e| e.to_string())??);
    }
    Ok(Run {
        latencies,
        elapsed: start.elapsed(),
    })
}

/// A minimal HTTP/1.1 keep-alive client for one request shape.
struct Connection {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Connection {
    async fn open(addr: SocketAddr) -> Result<Self, String> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connecting to {addr}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        Ok(Connection {
            stream,
            buf: Vec::with_capacity(1 << 20),
        })
    }

    /// Sends `GET /pods` and reads the whole answer; fails on anything but a 200.
    async fn get_pods(&mut self) -> Result<(), String> {
        const REQUEST: &[u8] =
            b"GET /pods HTTP/1.1\r\nHost: agent\r\nUser-Agent: rollgate-bench\r\n\r\n";
        self.stream
            .write_all(REQUEST)
            .await
            .map_err(|e| e.to_string())?;
        self.buf.clear();
        let head_end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            self.fill().await?;
        };
        let head = std::str::from_utf8(&self.buf[..head_end]).map_err(|e| e.to_string())?;
        if !head.starts_with("HTTP/1.1 200") {
            return Err(format!(
                "unexpected answer: {}",
                head.lines().next().unwrap_or_default()
            ));
        }
        let length: usize = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .ok_or("the answer has no Content-Length (chunked answers are not expected)")?;
        while self.buf.len() < head_end + length {
            self.fill().await?;
        }
        if self.buf.len() > head_end + length {
            return Err("more bytes than one answer".into());
        }
        Ok(())
    }

    /// Reads what has arrived straight into the buffer's spare room (its capacity
    /// outlasts `clear`), so the client copies each answer once, as the kernel hands it.
    async fn fill(&mut self) -> Result<(), String> {
        let n = self
            .stream
            .read_buf(&mut self.buf)
            .await
            .map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the agent closed the connection".into());
        }
        Ok(())
    }
}

fn pct(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn us(v: u64) -> String {
    if v >= 1000 {
        format!("{:.2} ms", v as f64 / 1000.0)
    } else {
        format!("{v} us")
    }
}
