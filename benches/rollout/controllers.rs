//! The controllers under test, one process at a time: rollgate (release build) and, when
//! its binary is there, OpenYurt's yurt-manager with only its DaemonSet pod updater. Each
//! runs with least-privilege credentials of its own and watches the whole cluster, so
//! their memory is compared on the same objects.
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::measure::{cpu_seconds, peak_rss_kib};
use crate::support::yurt_manager::{
    yurt_manager_command, yurt_manager_kubeconfig, YURT_MANAGER_READY_LINE,
};
use crate::support::{controller_kubeconfig, free_local_port, http_request, note, repo_root};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    Rollgate,
    OpenYurt,
}

impl Which {
    pub fn name(self) -> &'static str {
        match self {
            Which::Rollgate => "rollgate",
            Which::OpenYurt => "openyurt",
        }
    }
}

/// The yurt-manager binary (`YURT_MANAGER`, else the shared baseline, as the e2e test
/// finds it); or why there is none.
pub fn yurt_manager_binary() -> Result<PathBuf, String> {
    match crate::support::yurt_manager::yurt_manager_binary() {
        Some(path) if path.is_file() => Ok(path.canonicalize().unwrap_or(path)),
        Some(path) => Err(format!("YURT_MANAGER={} is not a file", path.display())),
        None => Err(
            "no yurt-manager binary: set YURT_MANAGER to OpenYurt's yurt-manager (v1.7.0 was \
             measured); there is no shared/baselines/openyurt-v1.7.0/yurt-manager above the \
             repository"
                .into(),
        ),
    }
}

/// What a controller process used, read from /proc.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    /// Peak resident set (VmHWM), MiB.
    pub peak_rss_mb: f64,
    /// User + system CPU seconds since the process started.
    pub cpu_s: f64,
}

pub struct ControllerUnderTest {
    pub which: Which,
    child: Child,
    pub log: PathBuf,
    metrics: std::net::SocketAddr,
}

impl ControllerUnderTest {
    /// Starts the controller and waits until it reports its caches synced.
    pub async fn start(which: Which, tag: &str) -> Result<Self, String> {
        Self::start_with(which, tag, &[]).await
    }

    /// The same, rollgate with `extra` flags (e.g. `--max-deletions-per-plan=20`).
    pub async fn start_with(which: Which, tag: &str, extra: &[&str]) -> Result<Self, String> {
        let dir = repo_root().join("target/bench/logs");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let log = dir.join(format!("{tag}-{}.log", which.name()));
        let out = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let metrics = std::net::SocketAddr::from(([127, 0, 0, 1], free_local_port()));
        let (mut command, ready_line) = match which {
            Which::Rollgate => {
                let mut c = Command::new(env!("CARGO_BIN_EXE_rollgate"));
                c.args(["controller", "--leader-elect=false"])
                    .arg(format!("--metrics-addr={metrics}"))
                    .args(extra)
                    .env("KUBECONFIG", controller_kubeconfig())
                    .env("ROLLGATE_LOG", "info");
                (c, "caches synced")
            }
            Which::OpenYurt => {
                let binary = yurt_manager_binary()?;
                let kubeconfig = yurt_manager_kubeconfig(
                    &repo_root().join("target/bench/state"),
                    "yurt-manager.kubeconfig",
                )?;
                let c = yurt_manager_command(&binary, &kubeconfig, metrics, &dir);
                (c, YURT_MANAGER_READY_LINE)
            }
        };
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", which.name()))?;
        note(format!(
            "started {} pid {} ({})",
            which.name(),
            child.id(),
            log.display()
        ));
        let mut controller = ControllerUnderTest {
            which,
            child,
            log,
            metrics,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let text = std::fs::read_to_string(&controller.log).unwrap_or_default();
            if text.contains(ready_line) {
                return Ok(controller);
            }
            if let Ok(Some(status)) = controller.child.try_wait() {
                return Err(format!(
                    "{} exited ({status}) before it was ready; log {}",
                    which.name(),
                    controller.log.display()
                ));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{} not ready within 60 s (no {ready_line:?} in {})",
                    which.name(),
                    controller.log.display()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Peak RSS and CPU so far.
    pub fn usage(&self) -> Usage {
        usage_of(self.child.id())
    }

    /// Reconciles of the DaemonSet upgrade controller so far, from its own counter:
    /// `rollgate_reconciles_total` (daemonset-upgrade) or controller-runtime's
    /// `controller_runtime_reconcile_total` (yurt-manager runs its pod updater alone).
    /// A count, unlike CPU seconds, does not move with the machine's load. `None` when
    /// the metrics cannot be read.
    pub async fn reconciles(&self) -> Option<f64> {
        let text = http_request(self.metrics, "GET", "/metrics")
            .await
            .ok()?
            .body;
        let series = match self.which {
            Which::Rollgate => "rollgate_reconciles_total{controller=\"daemonset-upgrade\"",
            Which::OpenYurt => "controller_runtime_reconcile_total{",
        };
        let samples: Vec<f64> = text
            .lines()
            .filter(|line| line.starts_with(series))
            .filter_map(|line| line.rsplit_once(' ')?.1.parse().ok())
            .collect();
        (!samples.is_empty()).then(|| samples.iter().sum())
    }

    /// Stops it (SIGKILL: nothing to hand over in a benchmark) and returns its usage.
    pub fn stop(mut self) -> Usage {
        let usage = self.usage();
        note(format!(
            "stopped {}: peak RSS {:.1} MiB, {:.2} CPU s",
            self.which.name(),
            usage.peak_rss_mb,
            usage.cpu_s
        ));
        let _ = self.child.kill();
        let _ = self.child.wait();
        usage
    }
}

impl Drop for ControllerUnderTest {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn usage_of(pid: u32) -> Usage {
    Usage {
        peak_rss_mb: peak_rss_kib(pid).map_or(0.0, |kib| kib as f64 / 1024.0),
        cpu_s: cpu_seconds(pid).unwrap_or(0.0),
    }
}
