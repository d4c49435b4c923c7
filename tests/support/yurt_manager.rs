//! OpenYurt's yurt-manager v1.7.0 (the shared baseline) running only its DaemonSet pod
//! updater: with the least-privilege RBAC of `benches/rollout/yurt-manager-rbac.yaml`,
//! its own ServiceAccount token, and loopback ports of its own. The e2e test runs it as
//! a second updater beside rollgate (`YurtManager`), the rollout bench as the baseline
//! (`benches/rollout/controllers.rs`); both start it with `yurt_manager_kubeconfig` and
//! `yurt_manager_command`. It acts on every annotated DaemonSet in the cluster, so a test
//! binary that starts it must not share the cluster's annotated DaemonSets with other
//! tests running at the same time.
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::*;

/// The pod deleter's identity in the audit log (yurt-manager acts per controller through
/// a token of that controller's ServiceAccount).
pub const YURT_MANAGER_DELETER: &str =
    "system:serviceaccount:kube-system:yurt-manager-daemon-pod-updater-controller";

/// `YURT_MANAGER`, else `shared/baselines/openyurt-v1.7.0/yurt-manager` in a folder above
/// the repository, else in the development machine's shared folder.
pub fn yurt_manager_binary() -> Option<PathBuf> {
    baseline_binary("YURT_MANAGER", "yurt-manager")
}

/// The line of yurt-manager's log that says its workers run.
pub const YURT_MANAGER_READY_LINE: &str = "Starting workers";

/// yurt-manager's kubeconfig, written to `dir/file`: a token of its own ServiceAccount,
/// with the least-privilege RBAC of `benches/rollout/yurt-manager-rbac.yaml` (applied here).
pub fn yurt_manager_kubeconfig(dir: &Path, file: &str) -> Result<PathBuf, String> {
    let rbac = repo_root().join("benches/rollout/yurt-manager-rbac.yaml");
    try_kubectl(&["apply", "-f", rbac.to_str().unwrap_or_default()])?;
    let token = try_kubectl(&[
        "-n",
        "kube-system",
        "create",
        "token",
        "yurt-manager",
        "--duration",
        "4h",
    ])?;
    Ok(derived_kubeconfig(dir, file, None, Some(token.trim())))
}

/// yurt-manager with only its DaemonSet pod updater, no webhooks and no leader election,
/// serving metrics on `metrics` and its other ports on free loopback ones, started in
/// `work_dir` (it writes nothing there, but stays out of the repository's root).
pub fn yurt_manager_command(
    binary: &Path,
    kubeconfig: &Path,
    metrics: SocketAddr,
    work_dir: &Path,
) -> Command {
    let mut command = Command::new(binary);
    command
        .arg("--kubeconfig")
        .arg(kubeconfig)
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
        .current_dir(work_dir);
    command
}

pub struct YurtManager {
    child: std::process::Child,
    pub log: PathBuf,
}

impl YurtManager {
    /// Starts it and waits until its workers run.
    pub async fn start(binary: &Path, tag: &str) -> Self {
        let kubeconfig = yurt_manager_kubeconfig(
            &repo_root().join("target/e2e-state"),
            &format!("yurt-manager-{tag}.kubeconfig"),
        )
        .unwrap_or_else(|e| panic!("yurt-manager's kubeconfig: {e}"));
        let dir = repo_root().join("target/e2e-logs");
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join(format!("{tag}-yurt-manager.log"));
        let out = std::fs::File::create(&log).unwrap();
        let metrics = SocketAddr::from(([127, 0, 0, 1], free_local_port()));
        let child = yurt_manager_command(binary, &kubeconfig, metrics, &dir)
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("starting yurt-manager");
        note(format!(
            "started yurt-manager pid {} ({})",
            child.id(),
            log.display()
        ));
        let manager = YurtManager { child, log };
        wait_for(
            "yurt-manager's workers",
            Duration::from_secs(60),
            || async {
                let text = std::fs::read_to_string(&manager.log).unwrap_or_default();
                if text.contains(YURT_MANAGER_READY_LINE) {
                    Ok(())
                } else {
                    Err(text.lines().last().unwrap_or_default().to_string())
                }
            },
        )
        .await;
        manager
    }
}

impl Drop for YurtManager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
