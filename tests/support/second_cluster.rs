//! Another cluster for tests that need two (two controllers in one cloud account): a
//! second kube-apiserver on the bed's etcd under its own key prefix. To every client it
//! is a cluster of its own (its own namespaces, Services and pods, its own kube-system),
//! at the cost of one process. It runs no controller-manager, scheduler or kubelets: a
//! test creates its pods already bound to a node and writes their status itself.
//!
//! The flags are the bed's own kube-apiserver's (read from its command line), with
//! another port, another etcd prefix and no audit log.
use std::path::PathBuf;
use std::time::Duration;

use kube::Client;

use super::{
    client_from, free_local_port, kubeconfig_path, note, repo_root, unique_name, wait_for,
};

pub struct SecondCluster {
    child: std::process::Child,
    pub kubeconfig: PathBuf,
    pub client: Client,
}

/// Drops `--name value` / `--name=value` of every flag `drop` names from `args`.
fn without_flags(args: &[String], drop: impl Fn(&str) -> bool) -> Vec<String> {
    let mut out = vec![];
    let mut skip_value = false;
    for arg in args {
        if skip_value {
            skip_value = false;
            continue;
        }
        let name = arg.split('=').next().unwrap_or_default();
        if arg.starts_with("--") && drop(name) {
            skip_value = !arg.contains('=');
            continue;
        }
        out.push(arg.clone());
    }
    out
}

impl SecondCluster {
    pub async fn start() -> Self {
        let bed_dir = kubeconfig_path()
            .parent()
            .expect("the kubeconfig's folder")
            .to_path_buf();
        let pid = std::fs::read_to_string(bed_dir.join("pids/kube-apiserver.pid"))
            .expect("the bed's kube-apiserver pid file")
            .trim()
            .to_string();
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).expect("kube-apiserver's binary");
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("its command line");
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .skip(1)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let old_port = args
            .iter()
            .position(|a| a == "--secure-port")
            .map(|i| args[i + 1].clone())
            .expect("--secure-port VALUE on the bed's kube-apiserver");
        let port = free_local_port();
        let mut args = without_flags(&args, |name| {
            name == "--secure-port" || name == "--etcd-prefix" || name.starts_with("--audit-")
        });
        args.extend([
            "--secure-port".into(),
            port.to_string(),
            "--etcd-prefix".into(),
            format!("/{}", unique_name("second-cluster")),
        ]);
        let logs = repo_root().join("target/e2e-logs");
        std::fs::create_dir_all(&logs).unwrap();
        let log = std::fs::File::create(logs.join(format!("second-apiserver-{port}.log"))).unwrap();
        let child = std::process::Command::new(&exe)
            .args(&args)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting the second kube-apiserver");
        note(format!(
            "second kube-apiserver pid {} on 127.0.0.1:{port}",
            child.id()
        ));
        let admin = std::fs::read_to_string(kubeconfig_path()).unwrap();
        let kubeconfig = logs.join(format!("second-cluster-{port}.kubeconfig"));
        std::fs::write(
            &kubeconfig,
            admin.replace(
                &format!("127.0.0.1:{old_port}"),
                &format!("127.0.0.1:{port}"),
            ),
        )
        .unwrap();
        let client = wait_for(
            "the second kube-apiserver to serve",
            Duration::from_secs(60),
            || async {
                let client = client_from(&kubeconfig).await;
                let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
                    kube::Api::all(client.clone());
                match namespaces.get("default").await {
                    Ok(_) => Ok(client),
                    Err(e) => Err(e.to_string()),
                }
            },
        )
        .await;
        SecondCluster {
            child,
            kubeconfig,
            client,
        }
    }
}

impl Drop for SecondCluster {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn flags_are_dropped_with_their_values_in_both_forms() {
        let args: Vec<String> = [
            "--secure-port",
            "36443",
            "--audit-log-path=/x",
            "--etcd-servers",
            "http://127.0.0.1:1",
            "--audit-policy-file",
            "/p",
        ]
        .map(String::from)
        .to_vec();
        let kept =
            super::without_flags(&args, |n| n == "--secure-port" || n.starts_with("--audit-"));
        assert_eq!(kept, ["--etcd-servers", "http://127.0.0.1:1"]);
    }
}
