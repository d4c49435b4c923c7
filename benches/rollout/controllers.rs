//! The controllers under test, one process at a time: rollgate (release build) and, when
//! its binary is there, OpenYurt's yurt-manager with only its DaemonSet pod updater. Each
//! runs with least-privilege credentials of its own and watches the whole cluster, so
//! their memory is compared on the same objects.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{
    controller_kubeconfig, derived_kubeconfig, free_local_port, http_request, note, repo_root,
};

/// Where the OpenYurt baseline is looked for when `YURT_MANAGER` is not set.
pub const DEFAULT_YURT_MANAGER: &str = "../shared/baselines/openyurt-v1.7.0/yurt-manager";

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

/// The yurt-manager binary: `YURT_MANAGER`, else the shared baseline if it exists; or why
/// there is none.
pub fn yurt_manager_binary() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("YURT_MANAGER").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!("YURT_MANAGER={} is not a file", path.display()))
        };
    }
    let default = repo_root().join(DEFAULT_YURT_MANAGER);
    if default.is_file() {
        Ok(default.canonicalize().unwrap_or(default))
    } else {
        Err(format!(
            "no yurt-manager binary: set YURT_MANAGER to OpenYurt's yurt-manager (v1.7.0 was measured); {} does not exist",
            default.display()
        ))
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

fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

fn kubectl(args: &[&str]) -> Result<String, String> {
    let out = Command::new("kubectl")
        .env("KUBECONFIG", crate::support::kubeconfig_path())
        .args(args)
        .output()
        .map_err(|e| format!("running kubectl: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).to_string())
}

/// yurt-manager's kubeconfig: a token of its own ServiceAccount, with the least-privilege
/// RBAC in `yurt-manager-rbac.yaml` beside this file (applied here).
fn yurt_kubeconfig() -> Result<PathBuf, String> {
    let rbac = repo_root().join("benches/rollout/yurt-manager-rbac.yaml");
    kubectl(&["apply", "-f", rbac.to_str().unwrap_or_default()])?;
    let token = kubectl(&[
        "-n",
        "kube-system",
        "create",
        "token",
        "yurt-manager",
        "--duration",
        "4h",
    ])?;
    Ok(derived_kubeconfig(
        &repo_root().join("target/bench/state"),
        "yurt-manager.kubeconfig",
        None,
        Some(token.trim()),
    ))
}

impl ControllerUnderTest {
    /// Starts the controller and waits until it reports its caches synced.
    pub async fn start(which: Which, tag: &str) -> Result<Self, String> {
        Self::start_with(which, tag, &[]).await
    }

    /// The same, rollgate with `extra` flags (e.g. `--stale-status-wait=0s`).
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
                let kubeconfig = yurt_kubeconfig()?;
                let mut c = Command::new(binary);
                c.arg("--kubeconfig")
                    .arg(&kubeconfig)
                    .args([
                        "--controllers=daemonpodupdater",
                        "--disable-independent-webhooks=*",
                        "--leader-elect=false",
                    ])
                    .arg(format!("--metrics-addr={metrics}"))
                    .arg(format!(
                        "--health-probe-addr=127.0.0.1:{}",
                        free_local_port()
                    ))
                    .arg(format!("--webhook-port={}", free_local_port()))
                    // Its working directory gets nothing, but keep it out of the repo root.
                    .current_dir(&dir);
                (c, "Starting workers")
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
    let proc_dir = Path::new("/proc").join(pid.to_string());
    let status = std::fs::read_to_string(proc_dir.join("status")).unwrap_or_default();
    let hwm_kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    let stat = std::fs::read_to_string(proc_dir.join("stat")).unwrap_or_default();
    // Fields after the command name (which may contain spaces) in parentheses.
    let cpu_ticks: f64 = stat
        .rsplit_once(')')
        .map(|(_, rest)| {
            let fields: Vec<&str> = rest.split_whitespace().collect();
            // utime and stime are fields 14 and 15 of the line, 12 and 13 after ')'.
            let get = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
            get(11).unwrap_or(0.0) + get(12).unwrap_or(0.0)
        })
        .unwrap_or(0.0);
    Usage {
        peak_rss_mb: hwm_kib / 1024.0,
        cpu_s: cpu_ticks / clock_ticks(),
    }
}
