//! Node agent support (tests/agent_ota.rs): agent processes, a plain HTTP client for the
//! node API, a TCP proxy that can cut an agent off the API server, and credentials of the
//! agent's ServiceAccount bound to a pod on a node.
use super::*;

/// A free TCP port on loopback (bound and released; good enough for a test).
pub fn free_local_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An answer of the node API.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.body))
    }
}

/// One HTTP/1.1 request (`Connection: close`), the way `curl` talks to the node API.
pub async fn http_request(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
) -> std::io::Result<HttpResponse> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: rollgate-e2e\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut raw))
        .await
        .map_err(|_| std::io::Error::other("no answer within 30 s"))??;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no header end"))?;
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line in {head:?}")))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    if chunked {
        body = dechunk(&body);
    }
    Ok(HttpResponse {
        status,
        headers,
        body: String::from_utf8_lossy(&body).to_string(),
    })
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = data.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(
            String::from_utf8_lossy(&data[..end])
                .split(';')
                .next()
                .unwrap()
                .trim(),
            16,
        )
        .unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = end + 2;
        out.extend_from_slice(&data[start..(start + size).min(data.len())]);
        data = &data[(start + size + 2).min(data.len())..];
    }
    out
}

/// A `rollgate agent` process for one simulated node, logging to
/// `target/e2e-logs/<tag>.log`. Killed on drop.
pub struct AgentProcess {
    child: std::process::Child,
    pub addr: std::net::SocketAddr,
    pub log: PathBuf,
}

impl AgentProcess {
    /// Starts an agent for `node` on a free loopback port and waits until it answers
    /// HTTP (any status: before its first list it answers 503).
    pub async fn start(
        node: &str,
        kubeconfig: &std::path::Path,
        state_dir: &std::path::Path,
        tag: &str,
    ) -> Self {
        let addr: std::net::SocketAddr =
            format!("127.0.0.1:{}", free_local_port()).parse().unwrap();
        let dir = repo_root().join("target/e2e-logs");
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join(format!("{tag}.log"));
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_rollgate"))
            .args(["agent", "--node-name", node, "--listen", &addr.to_string()])
            .arg("--state-dir")
            .arg(state_dir)
            .env("KUBECONFIG", kubeconfig)
            .env("ROLLGATE_LOG", "info,rollgate=debug")
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("starting rollgate agent");
        note(format!(
            "started rollgate agent for {node} pid {} on {addr} ({})",
            child.id(),
            log.display()
        ));
        let agent = AgentProcess { child, addr, log };
        wait_for(
            "the agent to answer HTTP",
            Duration::from_secs(30),
            || async { agent.get("/pods").await.map(drop) },
        )
        .await;
        agent
    }

    pub async fn get(&self, path: &str) -> Result<HttpResponse, String> {
        http_request(self.addr, "GET", path)
            .await
            .map_err(|e| e.to_string())
    }

    /// A request that must be answered (the agent is up); panics otherwise.
    pub async fn call(&self, method: &str, path: &str) -> HttpResponse {
        http_request(self.addr, method, path)
            .await
            .unwrap_or_else(|e| panic!("{method} {path} on {}: {e}", self.addr))
    }

    pub async fn post_openyurt(&self, ns: &str, pod: &str, action: &str) -> HttpResponse {
        self.call(
            "POST",
            &format!("/openyurt.io/v1/namespaces/{ns}/pods/{pod}/{action}"),
        )
        .await
    }

    /// Simulates a crash: SIGKILL.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TCP proxy in front of the API server: stopping it cuts every client that uses it
/// (open connections are closed, new ones refused), like a network cut of an edge node.
pub struct TcpProxy {
    pub addr: std::net::SocketAddr,
    target: std::net::SocketAddr,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl TcpProxy {
    pub async fn start(target: std::net::SocketAddr) -> Self {
        let mut proxy = TcpProxy {
            addr: format!("127.0.0.1:{}", free_local_port()).parse().unwrap(),
            target,
            task: None,
        };
        proxy.resume().await;
        proxy
    }

    /// (Re)opens the proxy on the same address.
    pub async fn resume(&mut self) {
        let listener = tokio::net::TcpListener::bind(self.addr)
            .await
            .unwrap_or_else(|e| panic!("binding the proxy on {}: {e}", self.addr));
        let target = self.target;
        self.task = Some(tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                connections.spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
            // Aborting this task drops the JoinSet, which aborts every connection.
        }));
    }

    /// Cuts: closes the listener and every open connection.
    pub async fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The API server's address from the test kubeconfig (`https://127.0.0.1:<port>`).
pub fn api_server_addr() -> std::net::SocketAddr {
    let kubeconfig = Kubeconfig::read_from(cluster_kubeconfig()).unwrap();
    let server = kubeconfig.clusters[0]
        .cluster
        .as_ref()
        .and_then(|c| c.server.clone())
        .unwrap();
    let host_port = server
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_string();
    host_port
        .parse()
        .unwrap_or_else(|e| panic!("API server address {host_port}: {e}"))
}

/// A copy of the test kubeconfig in `dir`, optionally pointing at another address
/// (a proxy) and/or authenticating with a bearer token instead of the admin certificate.
pub fn derived_kubeconfig(
    dir: &std::path::Path,
    file: &str,
    server: Option<std::net::SocketAddr>,
    token: Option<&str>,
) -> PathBuf {
    let kubeconfig = Kubeconfig::read_from(cluster_kubeconfig()).unwrap();
    let mut value = serde_json::to_value(&kubeconfig).unwrap();
    if let Some(addr) = server {
        for cluster in value["clusters"].as_array_mut().unwrap() {
            cluster["cluster"]["server"] = json!(format!("https://{addr}"));
        }
    }
    if let Some(token) = token {
        for user in value["users"].as_array_mut().unwrap() {
            user["user"] = json!({ "token": token });
        }
    }
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(file);
    // JSON is YAML: every kubeconfig reader accepts it.
    std::fs::write(&path, serde_json::to_vec_pretty(&value).unwrap()).unwrap();
    path
}

/// A fresh temporary folder under `target/e2e-state`.
pub fn temp_dir(prefix: &str) -> PathBuf {
    let dir = repo_root()
        .join("target/e2e-state")
        .join(unique_name(prefix));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub const AGENT_NAMESPACE: &str = "rollgate-system";
pub const AGENT_SERVICE_ACCOUNT: &str = "rollgate-agent";

/// Applies the agent's ServiceAccount, RBAC and node-scope policy from `deploy/agent`
/// (once per test binary; `kubectl apply` is idempotent across binaries).
pub async fn install_agent_rbac_and_policy() {
    static INSTALLED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    INSTALLED
        .get_or_init(|| async {
            let dir = repo_root().join("deploy/agent");
            let status = tokio::task::spawn_blocking(move || {
                std::process::Command::new("kubectl")
                    .env("KUBECONFIG", kubeconfig_path())
                    .arg("apply")
                    .arg("-f")
                    .arg(dir.join("rbac.yaml"))
                    .arg("-f")
                    .arg(dir.join("node-scope-policy.yaml"))
                    .stdout(std::process::Stdio::null())
                    .status()
            })
            .await
            .unwrap()
            .expect("running kubectl");
            assert!(status.success(), "kubectl apply of deploy/agent failed");
        })
        .await;
}

/// A stand-in for the agent's own pod: a pod of the agent's ServiceAccount bound to
/// `node`, so a TokenRequest bound to it yields the token a real agent pod would have.
pub async fn stand_in_agent_pod(client: &Client, node: &str) -> k8s_openapi::api::core::v1::Pod {
    use k8s_openapi::api::core::v1::Pod;
    let api: Api<Pod> = Api::namespaced(client.clone(), AGENT_NAMESPACE);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": unique_name("agent-standin"), "labels": {"rollgate.test/e2e": "true"}},
        "spec": {
            "nodeName": node,
            "serviceAccountName": AGENT_SERVICE_ACCOUNT,
            "automountServiceAccountToken": false,
            "containers": [{"name": "agent", "image": "registry.local/rollgate:test"}]
        }
    }))
    .unwrap();
    api.create(&PostParams::default(), &pod)
        .await
        .unwrap_or_else(|e| panic!("creating the stand-in agent pod: {e}"))
}

/// A token of the agent ServiceAccount bound to `pod` (TokenRequest with boundObjectRef
/// kind Pod): the API server adds the pod's node as the user's
/// `authentication.kubernetes.io/node-name` extra. `pod: None` asks for an unbound token.
pub async fn agent_token(client: &Client, pod: Option<&k8s_openapi::api::core::v1::Pod>) -> String {
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::core::v1::ServiceAccount;
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), AGENT_NAMESPACE);
    let bound = pod.map(|p| {
        json!({
            "kind": "Pod", "apiVersion": "v1",
            "name": p.metadata.name, "uid": p.metadata.uid
        })
    });
    let request = json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"audiences": [], "expirationSeconds": 3600, "boundObjectRef": bound}
    });
    let response: TokenRequest = api
        .create_subresource(
            "token",
            AGENT_SERVICE_ACCOUNT,
            &PostParams::default(),
            &request,
        )
        .await
        .unwrap_or_else(|e| panic!("TokenRequest for the agent ServiceAccount: {e}"));
    response
        .status
        .and_then(|s| s.token)
        .expect("the TokenRequest returned a token")
}

/// A setting from the environment, or `default` when unset; a value that does not parse
/// is an error naming the variable and the value.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> Result<T, String> {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .map_err(|_| format!("{name}={v:?} is not valid")),
        Err(_) => Ok(default),
    }
}

/// The benches' machine-readable results: `target/bench/results.json` (the folder is
/// `ROLLGATE_BENCH_OUT` when set, e.g. for the quick run of `make test`), one flat object
/// keyed `<bench>.<figure>`.
pub fn bench_results_path() -> PathBuf {
    std::env::var_os("ROLLGATE_BENCH_OUT")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/bench"))
        .join("results.json")
}

/// Merges `entries` into the results file (creating it), keeping other benches' keys.
pub fn merge_bench_results(entries: &[(&str, serde_json::Value)]) -> Result<PathBuf, String> {
    let path = bench_results_path();
    let mut all = match std::fs::read_to_string(&path) {
        Ok(text) => match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(serde_json::Value::Object(map)) => map,
            Ok(_) | Err(_) => {
                return Err(format!(
                    "{} is not a JSON object; move it away or fix it",
                    path.display()
                ))
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => serde_json::Map::new(),
        Err(e) => return Err(format!("reading {}: {e}", path.display())),
    };
    for (key, value) in entries {
        all.insert((*key).to_string(), value.clone());
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    let text =
        serde_json::to_string_pretty(&serde_json::Value::Object(all)).map_err(|e| e.to_string())?;
    std::fs::write(&path, text + "\n").map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(path)
}
