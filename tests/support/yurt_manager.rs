//! OpenYurt's yurt-manager v1.7.0 (the shared baseline) running only its DaemonSet pod
//! updater, as a second updater beside rollgate: with the least-privilege RBAC of
//! `benches/rollout/yurt-manager-rbac.yaml`, its own ServiceAccount token, and loopback
//! ports of its own. It acts on every annotated DaemonSet in the cluster, so a test
//! binary that starts it must not share the cluster's annotated DaemonSets with other
//! tests running at the same time.
use std::path::PathBuf;
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

pub struct YurtManager {
    child: std::process::Child,
    pub log: PathBuf,
}

impl YurtManager {
    /// Starts it and waits until its workers run.
    pub async fn start(binary: &std::path::Path, tag: &str) -> Self {
        let rbac = repo_root().join("benches/rollout/yurt-manager-rbac.yaml");
        kubectl(&["apply", "-f", rbac.to_str().unwrap()]);
        let token = kubectl(&[
            "-n",
            "kube-system",
            "create",
            "token",
            "yurt-manager",
            "--duration",
            "1h",
        ]);
        let kubeconfig = derived_kubeconfig(
            &repo_root().join("target/e2e-state"),
            &format!("yurt-manager-{tag}.kubeconfig"),
            None,
            Some(token.trim()),
        );
        let dir = repo_root().join("target/e2e-logs");
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join(format!("{tag}-yurt-manager.log"));
        let out = std::fs::File::create(&log).unwrap();
        let port = || free_local_port().to_string();
        let child = std::process::Command::new(binary)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args([
                "--controllers=daemonpodupdater",
                "--disable-independent-webhooks=*",
                "--leader-elect=false",
            ])
            .arg(format!("--metrics-addr=127.0.0.1:{}", port()))
            .arg(format!("--health-probe-addr=127.0.0.1:{}", port()))
            .arg(format!("--webhook-port={}", port()))
            .current_dir(&dir)
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
                if text.contains("Starting workers") {
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
