//! A kwok of a test's own (on the bed's stage file rendered with the test's delays,
//! managing only nodes with the test's heartbeat label), and the bed's image pull model
//! (hack/bed-image-puller.py) beside it. Both are stopped, by their pid, when dropped.
//!
//! Why a kwok of its own: the shared bed's stage file is fixed when cluster-up.sh starts
//! it, and a test of a stage (or of the pull model, which gates pod start) must not
//! change what every other test's pods do.
use std::path::PathBuf;
use std::process::{Child, Command};

use super::{kubeconfig_path, note, repo_root};

/// Where the private kwok's simulated nodes and pods take their addresses: away from
/// the shared bed's (cluster-up.sh) and from each other's.
#[derive(Debug, Clone, Copy)]
pub struct Addresses {
    pub cidr: &'static str,
    pub node_ip: &'static str,
}

pub struct PrivateKwok {
    child: Child,
    _dir: tempfile::TempDir,
}

impl PrivateKwok {
    /// The stage file is `hack/kwok-stages.yaml`, or `ROLLGATE_KWOK_STAGES` (to run the
    /// test against another version of it, e.g. an older one from git). `pull_gate` turns
    /// on the image pull model's gate (see the stage file); a [`BedImagePuller`] must
    /// then serve the same nodes, or their pods never start.
    pub fn start(
        delays: &[(&str, u64)],
        heartbeat_label: &str,
        addresses: Addresses,
        pull_gate: bool,
        log_name: &str,
    ) -> Self {
        let source = std::env::var_os("ROLLGATE_KWOK_STAGES")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo_root().join("hack/kwok-stages.yaml"));
        let mut stages = std::fs::read_to_string(&source)
            .unwrap_or_else(|e| panic!("reading {}: {e}", source.display()));
        for (placeholder, ms) in delays {
            stages = stages.replace(placeholder, &ms.to_string());
        }
        if pull_gate {
            assert!(
                stages.contains("#IMAGE_PULL_GATE "),
                "{} has no image pull gate",
                source.display()
            );
            stages = stages.replace("#IMAGE_PULL_GATE ", "");
        }
        let unfilled: Vec<&str> = stages
            .lines()
            .filter(|l| !l.trim_start().starts_with('#') && l.contains("__"))
            .collect();
        assert!(
            unfilled.is_empty(),
            "{} has template values this test does not fill in: {unfilled:?}",
            source.display()
        );
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("kwok-stages.yaml");
        std::fs::write(&config, stages).unwrap();
        let log = e2e_log(log_name);
        let kwok = std::env::var_os("KWOK").unwrap_or_else(|| "kwok".into());
        let child = Command::new(&kwok)
            .arg("--kubeconfig")
            .arg(kubeconfig_path())
            .arg("--config")
            .arg(&config)
            .args([
                "--manage-nodes-with-label-selector",
                &format!("{heartbeat_label}=on"),
                // As cluster-up.sh: renewed every 2.75 s, well inside the 15 s grace.
                "--node-lease-duration-seconds",
                "11",
                "--cidr",
                addresses.cidr,
                "--node-ip",
                addresses.node_ip,
                "-v",
                "WARN",
            ])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("starting {kwok:?} (on PATH with the control plane's binaries): {e}")
            });
        note(format!(
            "private kwok pid {} on {}",
            child.id(),
            source.display()
        ));
        PrivateKwok { child, _dir: dir }
    }
}

impl Drop for PrivateKwok {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// hack/bed-image-puller.py for the nodes with `heartbeat_label=on`: pods there wait
/// `delay` more for every image their node does not have yet.
pub struct BedImagePuller {
    child: Child,
}

impl BedImagePuller {
    pub fn start(delay: &str, start_delay_ms: u64, heartbeat_label: &str, log_name: &str) -> Self {
        Self::start_with_job_pulls_failing(delay, start_delay_ms, heartbeat_label, log_name, &[])
    }

    /// [`BedImagePuller::start`], and pull Jobs' pods never pull `images` (the puller's
    /// `--job-pull-fails`): they stay Pending until the Job's deadline fails it, while
    /// the DaemonSet's own pods pull them as usual.
    pub fn start_with_job_pulls_failing(
        delay: &str,
        start_delay_ms: u64,
        heartbeat_label: &str,
        log_name: &str,
        images: &[&str],
    ) -> Self {
        let log = e2e_log(log_name);
        let child = Command::new("python3")
            .arg(repo_root().join("hack/bed-image-puller.py"))
            .arg("--kubeconfig")
            .arg(kubeconfig_path())
            .args([
                "--delay",
                delay,
                "--start-delay-ms",
                &start_delay_ms.to_string(),
                "--nodes",
                &format!("{heartbeat_label}=on"),
            ])
            .args(images.iter().flat_map(|i| ["--job-pull-fails", i]))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting hack/bed-image-puller.py: {e}"));
        note(format!(
            "bed image puller pid {} (pull {delay}; pull Jobs fail on {images:?})",
            child.id()
        ));
        BedImagePuller { child }
    }
}

impl Drop for BedImagePuller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn e2e_log(name: &str) -> std::fs::File {
    let logs = repo_root().join("target/e2e-logs");
    std::fs::create_dir_all(&logs).unwrap();
    std::fs::File::create(logs.join(name)).unwrap()
}
