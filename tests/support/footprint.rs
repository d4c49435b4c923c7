//! The controller's memory and CPU on a populated cluster (issue 10), shared by the
//! footprint bench (`benches/footprint.rs`) and its quick guard (`tests/footprint.rs`).
//!
//! A `Bed` is one namespace of DaemonSets and a set of simulated nodes that only those
//! DaemonSets select, so it runs beside other tests. `measure_controller` starts a
//! `rollgate controller` for the bed's namespace and samples its `/proc` figures from
//! start until it has been ready for a settle time.
#![allow(dead_code)] // the bench and the test use different parts

use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use crate::support::measure::{cpu_seconds, read_status, status_kib};
use crate::support::{
    free_local_port, http_request, kubeconfig_path, kwok_node, note, repo_root, unique_name,
    TestNamespace, OWNER_LABEL,
};

/// How often the controller's `/proc` figures are read.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(200);

/// Simulated nodes and DaemonSets of one measurement, in a namespace of their own.
pub struct Bed {
    client: Client,
    namespace: TestNamespace,
    /// Every bed node carries `OWNER_LABEL=<owner>`; the DaemonSets select on it.
    owner: String,
    pub nodes: usize,
    pub daemonsets: usize,
}

impl Bed {
    pub async fn new(client: &Client, prefix: &str) -> Self {
        let namespace = TestNamespace::new(client, prefix).await;
        Bed {
            client: client.clone(),
            namespace,
            owner: unique_name(prefix),
            nodes: 0,
            daemonsets: 0,
        }
    }

    pub fn namespace(&self) -> &str {
        &self.namespace.name
    }

    /// DaemonSet pods the bed should have.
    pub fn pods(&self) -> usize {
        self.nodes * self.daemonsets
    }

    /// Adds simulated nodes (kwok heartbeats them) until there are `count`, `parallel`
    /// creations in flight at once.
    pub async fn grow_nodes(&mut self, count: usize, parallel: usize) -> Result<(), String> {
        let api: Api<Node> = Api::all(self.client.clone());
        let owner = self.owner.clone();
        futures::stream::iter(self.nodes..count)
            .map(|i| {
                let (api, owner) = (api.clone(), owner.clone());
                async move {
                    let name = format!("{owner}-n{i}");
                    let node = kwok_node(&name, &owner);
                    api.create(&PostParams::default(), &node)
                        .await
                        .map(|_| ())
                        .map_err(|e| format!("creating node {name}: {e}"))
                }
            })
            .buffer_unordered(parallel.max(1))
            .try_collect::<Vec<()>>()
            .await?;
        self.nodes = self.nodes.max(count);
        Ok(())
    }

    /// Adds DaemonSets until there are `count`: AdvancedRollingUpdate, OnDelete, tolerating
    /// every taint, on the bed's nodes only. kube-controller-manager makes their pods.
    pub async fn grow_daemonsets(&mut self, count: usize, parallel: usize) -> Result<(), String> {
        let api: Api<DaemonSet> = Api::namespaced(self.client.clone(), self.namespace());
        let owner = self.owner.clone();
        futures::stream::iter(self.daemonsets..count)
            .map(|i| {
                let (api, owner) = (api.clone(), owner.clone());
                async move {
                    let name = format!("fp-{i}");
                    let ds: DaemonSet = serde_json::from_value(json!({
                        "metadata": {"name": name, "annotations": {
                            "apps.openyurt.io/update-strategy": "AdvancedRollingUpdate",
                        }},
                        "spec": {
                            "selector": {"matchLabels": {"app": name}},
                            "updateStrategy": {"type": "OnDelete"},
                            "template": {
                                "metadata": {
                                    "labels": {"app": name},
                                    // Ready soon after start: setup time is not what we measure.
                                    "annotations": {"pod-ready.stage.kwok.x-k8s.io/delay": "100ms"}
                                },
                                "spec": {
                                    "nodeSelector": {OWNER_LABEL: owner},
                                    "tolerations": [{"operator": "Exists"}],
                                    "containers": [{"name": "main", "image": "registry.local/edge-agent:v1"}]
                                }
                            }
                        }
                    }))
                    .map_err(|e| e.to_string())?;
                    api.create(&PostParams::default(), &ds)
                        .await
                        .map(|_| ())
                        .map_err(|e| format!("creating DaemonSet {name}: {e}"))
                }
            })
            .buffer_unordered(parallel.max(1))
            .try_collect::<Vec<()>>()
            .await?;
        self.daemonsets = self.daemonsets.max(count);
        Ok(())
    }

    /// Waits until every DaemonSet has a pod on every bed node (`ready`: and all of them
    /// Ready), as the DaemonSets' status counts them.
    pub async fn wait_pods(&self, ready: bool, timeout: Duration) -> Result<(), String> {
        let api: Api<DaemonSet> = Api::namespaced(self.client.clone(), self.namespace());
        let want = self.nodes as i32;
        let deadline = Instant::now() + timeout;
        let mut last_note = Instant::now();
        loop {
            let list = api
                .list(&ListParams::default())
                .await
                .map_err(|e| format!("listing DaemonSets: {e}"))?;
            let (mut created, mut ready_pods) = (0i64, 0i64);
            let mut done = list.items.len() == self.daemonsets;
            for ds in &list.items {
                let s = ds.status.clone().unwrap_or_default();
                created += i64::from(s.current_number_scheduled);
                ready_pods += i64::from(s.number_ready);
                done &= s.desired_number_scheduled == want
                    && s.current_number_scheduled == want
                    && (!ready || s.number_ready == want);
            }
            let state = format!(
                "{created} pods created, {ready_pods} Ready, of {}",
                self.pods()
            );
            if done {
                note(state);
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!("timed out after {timeout:?}: {state}"));
            }
            if last_note.elapsed() >= Duration::from_secs(15) {
                note(state);
                last_note = Instant::now();
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// Deletes the namespace (and with it the DaemonSets and pods) and the nodes.
    pub async fn cleanup(self) {
        let api: Api<Node> = Api::all(self.client.clone());
        let owner = self.owner.clone();
        self.namespace.cleanup().await;
        futures::stream::iter(0..self.nodes)
            .for_each_concurrent(16, |i| {
                let api = api.clone();
                let name = format!("{owner}-n{i}");
                async move {
                    let _ = api.delete(&name, &DeleteParams::default()).await;
                }
            })
            .await;
    }
}

/// What one controller run used. Memory in KiB.
#[derive(Debug, Clone)]
pub struct Footprint {
    /// From process start to `/readyz` answering 200 (every shared watch listed).
    pub ready_after: Duration,
    /// VmHWM at the end: the highest resident set of the whole run.
    pub peak_rss_kib: u64,
    /// Mean VmRSS over the last quarter of the settle time.
    pub steady_rss_kib: u64,
    /// RssAnon (heap, stacks) and RssFile (the mapped binary) at the end.
    pub anon_kib: u64,
    pub file_kib: u64,
    /// utime + stime from start to the end of the settle time.
    pub cpu_s: f64,
    pub samples: usize,
    pub log: PathBuf,
}

/// The controller binary cargo built with this bench or test, killed on drop.
struct Controller {
    child: std::process::Child,
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `rollgate controller` for `namespace` with the admin kubeconfig, waits for
/// `/readyz`, lets it run `settle` longer, and samples its memory and CPU every
/// `SAMPLE_EVERY` from start. `streaming_lists` sets `ROLLGATE_STREAMING_LISTS`.
pub async fn measure_controller(
    namespace: &str,
    tag: &str,
    streaming_lists: bool,
    settle: Duration,
    ready_timeout: Duration,
) -> Result<Footprint, String> {
    let streaming = if streaming_lists { "1" } else { "0" };
    measure_controller_with(
        namespace,
        tag,
        &[("ROLLGATE_STREAMING_LISTS", streaming)],
        settle,
        ready_timeout,
    )
    .await
}

/// [`measure_controller`] with extra environment for the controller (e.g. allocator
/// settings such as `MALLOC_ARENA_MAX`).
pub async fn measure_controller_with(
    namespace: &str,
    tag: &str,
    env: &[(&str, &str)],
    settle: Duration,
    ready_timeout: Duration,
) -> Result<Footprint, String> {
    let dir = repo_root().join("target/e2e-logs");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let log = dir.join(format!("{namespace}-{tag}.log"));
    let out = std::fs::File::create(&log).map_err(|e| e.to_string())?;
    let metrics: std::net::SocketAddr = ([127, 0, 0, 1], free_local_port()).into();
    let binary = env!("CARGO_BIN_EXE_rollgate");
    let child = std::process::Command::new(binary)
        .args(["controller", "--watch-namespace", namespace])
        .args(["--metrics-addr", &metrics.to_string()])
        // One replica, active at once: no Lease to wait for (every replica watches anyway).
        .arg("--leader-elect=false")
        .env("KUBECONFIG", kubeconfig_path())
        .env("ROLLGATE_LOG", "info")
        .envs(env.iter().copied())
        .stdout(out.try_clone().map_err(|e| e.to_string())?)
        .stderr(out)
        .spawn()
        .map_err(|e| format!("starting {binary}: {e}"))?;
    let mut controller = Controller { child };
    let pid = controller.child.id();
    let started = Instant::now();
    let mut ready_after = None;
    let mut rss_samples: Vec<(Duration, u64)> = Vec::new();
    let mut next_probe = started;
    loop {
        if let Some(status) = controller.child.try_wait().map_err(|e| e.to_string())? {
            return Err(format!(
                "the controller exited ({status}) before the measurement ended; log: {}",
                log.display()
            ));
        }
        let mem = ProcStatus::read(pid)?;
        rss_samples.push((started.elapsed(), mem.rss_kib));
        if ready_after.is_none() && Instant::now() >= next_probe {
            // Probes are rarer than samples: each is a connection the controller serves.
            next_probe = Instant::now() + Duration::from_millis(500);
            if let Ok(r) = http_request(metrics, "GET", "/readyz").await {
                if r.status == 200 {
                    let at = started.elapsed();
                    note(format!(
                        "controller pid {pid} ready after {:.1} s, RSS {:.1} MiB",
                        at.as_secs_f64(),
                        mib(mem.rss_kib)
                    ));
                    ready_after = Some(at);
                }
            }
        }
        match ready_after {
            Some(at) if started.elapsed() >= at + settle => break,
            None if started.elapsed() >= ready_timeout => {
                return Err(format!(
                    "the controller was not ready within {ready_timeout:?}; log: {}",
                    log.display()
                ))
            }
            _ => {}
        }
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
    let end = ProcStatus::read(pid)?;
    let cpu_s = cpu_seconds(pid)?;
    drop(controller);
    let ready_after = ready_after.unwrap_or_default();
    let tail_from = ready_after + settle.mul_f64(0.75);
    let tail: Vec<u64> = rss_samples
        .iter()
        .filter(|(t, _)| *t >= tail_from)
        .map(|(_, kib)| *kib)
        .collect();
    let steady_rss_kib = if tail.is_empty() {
        end.rss_kib
    } else {
        tail.iter().sum::<u64>() / tail.len() as u64
    };
    Ok(Footprint {
        ready_after,
        peak_rss_kib: end.hwm_kib,
        steady_rss_kib,
        anon_kib: end.anon_kib,
        file_kib: end.file_kib,
        cpu_s,
        samples: rss_samples.len(),
        log,
    })
}

/// The memory lines of `/proc/<pid>/status`, in KiB.
struct ProcStatus {
    rss_kib: u64,
    hwm_kib: u64,
    anon_kib: u64,
    file_kib: u64,
}

impl ProcStatus {
    fn read(pid: u32) -> Result<Self, String> {
        let status = read_status(pid)?;
        let field = |name: &str| {
            status_kib(&status, name).ok_or_else(|| format!("no {name} in /proc/{pid}/status"))
        };
        Ok(ProcStatus {
            rss_kib: field("VmRSS:")?,
            hwm_kib: field("VmHWM:")?,
            anon_kib: field("RssAnon:")?,
            file_kib: field("RssFile:")?,
        })
    }
}

/// Bytes each extra pod adds, from two measurements (KiB) at two pod counts.
pub fn bytes_per_pod(kib_small: u64, pods_small: usize, kib_big: u64, pods_big: usize) -> f64 {
    if pods_big <= pods_small {
        return f64::NAN;
    }
    (kib_big as f64 - kib_small as f64) * 1024.0 / (pods_big - pods_small) as f64
}

pub fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}
