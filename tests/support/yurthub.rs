//! The real yurthub v1.7.0 (OpenYurt's node hub, built from the v1.7.0 tag; see the
//! shared baselines' README) serving one bed node's OTA API on a loopback port, so
//! interoperability is tested against the program itself rather than a reading of it.
//!
//! How it joins the bed (each step is what a real node does, on loopback):
//! - token bootstrap with a flattened copy of the test kubeconfig (`--bootstrap-file`);
//!   yurthub then asks for its client and serving certificates with CSRs, which this
//!   harness approves (only those naming `system:node:<node>`) and kube-controller-manager
//!   signs with the bed's CA;
//! - `--enable-dummy-if=false`: no network interface is created on this machine;
//! - every port of its own, bound to 127.0.0.1.
//!
//! In this bed no kubelet talks through yurthub, so its `GET /pods` (served from the
//! kubelet traffic it cached) has nothing to answer; `imagepull` and `upgrade` read and
//! write through the API server directly, as they do on a node.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::*;

/// Where the binary is looked for: `YURTHUB`, else `shared/baselines/openyurt-v1.7.0/`
/// in a folder above the repository, else the development machine's shared folder.
pub fn yurthub_binary() -> Option<PathBuf> {
    baseline_binary("YURTHUB", "yurthub")
}

pub struct Yurthub {
    child: std::process::Child,
    /// Its serve port: health, metrics and the OTA API.
    pub serve: SocketAddr,
    pub log: PathBuf,
}

impl Yurthub {
    /// Starts yurthub for `node` and waits until it is healthy (certificates issued).
    pub async fn start(binary: &std::path::Path, node: &str) -> Self {
        let dir = temp_dir(&format!("yurthub-{node}"));
        let bootstrap = dir.join("bootstrap.conf");
        std::fs::write(
            &bootstrap,
            kubectl(&["config", "view", "--raw", "--flatten"]),
        )
        .unwrap();
        let server = kubectl(&[
            "config",
            "view",
            "--minify",
            "-o",
            "jsonpath={.clusters[0].cluster.server}",
        ]);
        let serve = SocketAddr::from(([127, 0, 0, 1], free_local_port()));
        let port = |p: u16| p.to_string();
        let log = repo_root()
            .join("target/e2e-logs")
            .join(format!("yurthub-{node}.log"));
        std::fs::create_dir_all(log.parent().unwrap()).unwrap();
        let out = std::fs::File::create(&log).unwrap();
        let child = std::process::Command::new(binary)
            .args([
                "--server-addr",
                &server,
                "--node-name",
                node,
                "--nodepool-name",
                "rollgate-test",
                "--enable-dummy-if=false",
                "--root-dir",
                dir.to_str().unwrap(),
                "--bind-address",
                "127.0.0.1",
                "--serve-port",
                &port(serve.port()),
                "--proxy-port",
                &port(free_local_port()),
                "--proxy-secure-port",
                &port(free_local_port()),
                "--multiplexer-port",
                &port(free_local_port()),
                "--bootstrap-file",
                bootstrap.to_str().unwrap(),
            ])
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("starting yurthub");
        note(format!(
            "started yurthub pid {} for {node} on {serve} ({})",
            child.id(),
            log.display()
        ));
        let hub = Yurthub { child, serve, log };
        wait_for(
            "yurthub healthy (its CSRs approved and signed)",
            Duration::from_secs(90),
            || async {
                approve_node_csrs(node);
                match http_request(serve, "GET", "/v1/healthz").await {
                    Ok(answer) if answer.status == 200 && answer.body == "OK" => Ok(()),
                    Ok(answer) => Err(format!("{} {}", answer.status, answer.body)),
                    Err(e) => Err(e.to_string()),
                }
            },
        )
        .await;
        hub
    }
}

impl Drop for Yurthub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Approves the pending CSRs whose subject is `system:node:<node>` (read with openssl
/// from the request itself: the client one is requested under the bootstrap identity).
fn approve_node_csrs(node: &str) {
    let list: serde_json::Value =
        serde_json::from_str(&kubectl(&["get", "csr", "-o", "json"])).unwrap();
    let want = format!("CN = system:node:{node}");
    for csr in list["items"].as_array().into_iter().flatten() {
        let pending = csr["status"]["conditions"]
            .as_array()
            .is_none_or(|c| c.is_empty());
        let name = csr["metadata"]["name"].as_str().unwrap_or_default();
        let request = csr["spec"]["request"].as_str().unwrap_or_default();
        if !pending || name.is_empty() || !csr_subject(request).contains(&want) {
            continue;
        }
        kubectl(&["certificate", "approve", name]);
    }
}

/// The subject line of a base64 PEM certificate request, by openssl.
fn csr_subject(request_base64: &str) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new("bash")
        .args(["-c", "base64 -d | openssl req -noout -subject"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("running base64 and openssl");
    let _ = child
        .stdin
        .take()
        .unwrap()
        .write_all(request_base64.as_bytes());
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}
