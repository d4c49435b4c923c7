//! Test support for e2e tests against the local control plane (`make cluster-up`).
//!
//! Every test makes its own simulated nodes and namespace, so tests run in parallel
//! without seeing each other's pods.
#![allow(dead_code)] // each test binary uses a different part of this module

pub mod daemonset;
pub mod fleet;
pub mod gated;
pub mod ghost_ready;
pub mod measure;
pub mod private_kwok;
pub mod second_cluster;
pub mod unavailable;
pub mod yurt_manager;
pub mod yurthub;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use serde_json::json;

/// The shell of every bench binary: parameters from the environment, a two-thread
/// runtime, the report on stdout, an error on stderr with a failing exit code.
pub fn bench_main<P, Fut>(
    name: &str,
    params: Result<P, String>,
    run: impl FnOnce(P) -> Fut,
) -> std::process::ExitCode
where
    Fut: Future<Output = Result<String, String>>,
{
    let params = match params {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{name}: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(run(params)) {
        Ok(report) => {
            println!("{report}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{name}: ERROR: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The two shapes of edge DaemonSets users deploy. Their pods stay on a NotReady node
/// either way (the DaemonSet controller adds NoExecute tolerations), but only a
/// DaemonSet that tolerates every taint keeps NotReady nodes (tainted `unreachable`,
/// NoSchedule) in `status.desiredNumberScheduled`.
#[derive(Clone, Copy, Debug)]
pub enum Shape {
    /// `tolerations: [{operator: Exists}]`, the usual shape of node agents.
    ToleratesAll,
    /// No tolerations of its own.
    ToleratesNone,
}

impl Shape {
    pub fn tolerations(self) -> serde_json::Value {
        match self {
            Shape::ToleratesAll => json!([{"operator": "Exists"}]),
            Shape::ToleratesNone => json!([]),
        }
    }

    /// Short tag for names (namespaces, nodes, logs).
    pub fn tag(self) -> &'static str {
        match self {
            Shape::ToleratesAll => "all",
            Shape::ToleratesNone => "none",
        }
    }
}

/// A simulated node named `name`, heartbeating, labelled as owned by `owner` (its
/// test's workloads select on that label).
pub fn kwok_node(name: &str, owner: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": {
                "type": "kwok",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                HEARTBEAT_LABEL: "on",
                OWNER_LABEL: owner,
            }
        }
    }))
    .expect("a valid Node")
}

/// Label that kwok's node selector watches: the simulated kubelet heartbeats while "on".
pub const HEARTBEAT_LABEL: &str = "rollgate.test/heartbeat";
/// Label naming the test that owns a node, so a DaemonSet can select only its own nodes.
pub const OWNER_LABEL: &str = "rollgate.test/owner";

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The admin kubeconfig written by `make cluster-up` (`ROLLGATE_TEST_KUBECONFIG` in
/// `make test`), whether or not a cluster is there: `helm template` is given it too.
/// What talks to the cluster asks `cluster_kubeconfig` instead.
pub fn kubeconfig_path() -> PathBuf {
    std::env::var_os("ROLLGATE_TEST_KUBECONFIG")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/cluster/kubeconfig"))
}

/// The test kubeconfig, once its API server answers; without one the process ends with
/// one line saying how to start it. The tests that need a cluster are `#[ignore]`d, so
/// only a run that asked for them gets here (`--ignored`, `make test`), and it should
/// read one line rather than a panic with a connection error from every test.
pub fn cluster_kubeconfig() -> PathBuf {
    static ANSWERED: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    ANSWERED
        .get_or_init(|| {
            let path = kubeconfig_path();
            if let Err(why) = api_server_answers(&path) {
                use std::io::Write as _;
                // Straight to stderr: the test harness captures `eprintln!`, and
                // would drop it when the process exits.
                let _ = writeln!(
                    std::io::stderr(),
                    "no test cluster: {why}. Start one with `make cluster-up` \
                     (or run everything with `make test`)."
                );
                std::process::exit(2);
            }
            path
        })
        .clone()
}

/// Whether the API server named by the kubeconfig at `path` (its current context's
/// cluster) accepts a TCP connection; otherwise why not.
fn api_server_answers(path: &std::path::Path) -> Result<(), String> {
    use std::net::ToSocketAddrs as _;
    let kubeconfig = Kubeconfig::read_from(path)
        .map_err(|e| format!("cannot read the kubeconfig {}: {e}", path.display()))?;
    let server = kubeconfig_server(&kubeconfig)
        .ok_or_else(|| format!("the kubeconfig {} names no API server", path.display()))?;
    let host_port = server
        .split_once("://")
        .map_or(server.as_str(), |(_, rest)| rest)
        .split('/')
        .next()
        .unwrap_or_default();
    let addresses: Vec<std::net::SocketAddr> = host_port
        .to_socket_addrs()
        .map_err(|e| format!("the API server address {server}: {e}"))?
        .collect();
    let timeout = Duration::from_secs(2);
    if addresses
        .iter()
        .any(|address| std::net::TcpStream::connect_timeout(address, timeout).is_ok())
    {
        Ok(())
    } else {
        Err(format!(
            "nothing answers at {server} (from {})",
            path.display()
        ))
    }
}

/// The server of the kubeconfig's current context, else of its first cluster.
fn kubeconfig_server(kubeconfig: &Kubeconfig) -> Option<String> {
    let current_cluster = kubeconfig.current_context.as_ref().and_then(|current| {
        let context = kubeconfig.contexts.iter().find(|c| &c.name == current)?;
        Some(context.context.as_ref()?.cluster.clone())
    });
    let cluster = match current_cluster {
        Some(name) => kubeconfig.clusters.iter().find(|c| c.name == name),
        None => kubeconfig.clusters.first(),
    }?;
    cluster.cluster.as_ref()?.server.clone()
}

/// A client for the running local control plane (see `cluster_kubeconfig` when there is none).
pub async fn client() -> Client {
    client_from(&cluster_kubeconfig()).await
}

pub async fn client_from(path: &std::path::Path) -> Client {
    let kubeconfig = Kubeconfig::read_from(path).unwrap_or_else(|e| {
        panic!(
            "cannot read kubeconfig {}: {e}. Start the local control plane first: `make cluster-up`",
            path.display()
        )
    });
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig is not usable");
    Client::try_from(config).expect("building client")
}

/// A name unique to this test run: `<prefix>-<pid>-<counter>`.
pub fn unique_name(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
        % 100_000;
    format!("{prefix}-{}-{nanos}-{n}", std::process::id() % 100_000)
}

/// Logs a line of the test's narrative with the time since the process started, so the
/// e2e log reads as a timeline (run with `--nocapture` to see it).
pub fn note(msg: impl AsRef<str>) {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let start = START.get_or_init(Instant::now);
    eprintln!("[{:>7.2}s] {}", start.elapsed().as_secs_f64(), msg.as_ref());
}

/// Polls `probe` until it returns `Ok(value)`, or fails after `timeout` with `what` and the
/// last state the probe described in its `Err`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let last = match probe().await {
            Ok(v) => return v,
            Err(state) => state,
        };
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}; last observed state: {last}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Asserts that `probe` keeps holding for `duration` (it returns `Err(state)` when it doesn't).
pub async fn holds_for<F, Fut>(what: &str, duration: Duration, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let end = Instant::now() + duration;
    while Instant::now() < end {
        if let Err(state) = probe().await {
            panic!("expected {what} to hold for {duration:?}, but it broke: {state}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A namespace of the test's own, deleted by `cleanup`.
pub struct TestNamespace {
    pub name: String,
    client: Client,
}

impl TestNamespace {
    pub async fn new(client: &Client, prefix: &str) -> Self {
        let name = unique_name(&format!("t-{prefix}"));
        let api: Api<Namespace> = Api::all(client.clone());
        let ns: Namespace = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"rollgate.test/e2e": "true"}}
        }))
        .unwrap();
        api.create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
        // The ServiceAccount controller must have created `default` before pods can be made.
        let sa: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(client.clone(), &name);
        wait_for(
            "the default ServiceAccount",
            Duration::from_secs(30),
            || async {
                match sa.get_opt("default").await {
                    Ok(Some(_)) => Ok(()),
                    Ok(None) => Err("not created yet".into()),
                    Err(e) => Err(e.to_string()),
                }
            },
        )
        .await;
        TestNamespace {
            name,
            client: client.clone(),
        }
    }

    pub async fn cleanup(self) {
        let api: Api<Namespace> = Api::all(self.client);
        let _ = api.delete(&self.name, &DeleteParams::background()).await;
    }
}

/// Simulated nodes that belong to one test (label `rollgate.test/owner=<owner>`).
/// A ghost-Ready guard watches them for their whole life: `cleanup` fails the test when
/// one of them showed Ready while cut off (see `ghost_ready`).
pub struct TestNodes {
    pub owner: String,
    pub names: Vec<String>,
    client: Client,
    guard: ghost_ready::Guard,
    /// The label whose `on` makes a kwok heartbeat these nodes.
    heartbeat: String,
}

impl TestNodes {
    /// Creates `count` nodes with a heartbeat and waits until they are all Ready.
    pub async fn create(client: &Client, prefix: &str, count: usize) -> Self {
        Self::create_on(client, prefix, count, HEARTBEAT_LABEL).await
    }

    /// Like `create`, for the kwok that manages nodes with `heartbeat=on` (a test's own
    /// `private_kwok`).
    pub async fn create_on(client: &Client, prefix: &str, count: usize, heartbeat: &str) -> Self {
        let owner = unique_name(prefix);
        let guard =
            ghost_ready::Guard::start(client, &format!("{OWNER_LABEL}={owner}"), heartbeat).await;
        let api: Api<Node> = Api::all(client.clone());
        let mut names = Vec::with_capacity(count);
        for i in 0..count {
            let name = format!("{owner}-n{i}");
            let mut node = kwok_node(&name, &owner);
            if heartbeat != HEARTBEAT_LABEL {
                let labels = node.metadata.labels.get_or_insert_with(Default::default);
                labels.remove(HEARTBEAT_LABEL);
                labels.insert(heartbeat.into(), "on".into());
            }
            api.create(&PostParams::default(), &node)
                .await
                .unwrap_or_else(|e| panic!("creating node {name}: {e}"));
            names.push(name);
        }
        let nodes = TestNodes {
            owner,
            names,
            client: client.clone(),
            guard,
            heartbeat: heartbeat.to_string(),
        };
        for name in &nodes.names {
            nodes.wait_ready(name, true, Duration::from_secs(60)).await;
        }
        nodes
    }

    /// The label selector matching exactly these nodes.
    pub fn selector(&self) -> BTreeMap<String, String> {
        BTreeMap::from([(OWNER_LABEL.to_string(), self.owner.clone())])
    }

    /// Stops or resumes the simulated kubelet's heartbeat (Lease renewal) of one node.
    /// Stopping it makes kube-controller-manager mark the node NotReady after its grace
    /// period, the way a network cut does.
    pub async fn set_heartbeat(&self, node: &str, on: bool) {
        let api: Api<Node> = Api::all(self.client.clone());
        let value = if on { "on" } else { "off" };
        let patch = json!({"metadata": {"labels": {self.heartbeat.as_str(): value}}});
        api.patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("setting heartbeat {value} on {node}: {e}"));
    }

    pub async fn wait_ready(&self, node: &str, ready: bool, timeout: Duration) {
        let api: Api<Node> = Api::all(self.client.clone());
        let want = if ready { "Ready" } else { "NotReady" };
        wait_for(&format!("node {node} to be {want}"), timeout, || async {
            let n = api.get(node).await.map_err(|e| e.to_string())?;
            let status = node_ready_status(&n);
            if (status.as_deref() == Some("True")) == ready {
                Ok(())
            } else {
                Err(format!("Ready condition status {status:?}"))
            }
        })
        .await
    }

    /// The nodes that showed Ready while cut off so far; they are then reported, and
    /// `cleanup` no longer fails on them (benches mark their run invalid instead).
    pub fn take_ghost_ready(&self) -> Vec<ghost_ready::Ghost> {
        self.guard.take_ghosts()
    }

    /// Every change of these nodes' Ready condition since they were created.
    pub fn ready_transitions(&self) -> Vec<ghost_ready::ReadyTransition> {
        self.guard.transitions()
    }

    /// Deletes the nodes, then fails if any of them showed Ready while cut off: the
    /// test bed misbehaved and the test's NotReady steps proved nothing.
    pub async fn cleanup(self) {
        let ghosts = self.guard.ghosts();
        let api: Api<Node> = Api::all(self.client.clone());
        for name in &self.names {
            let _ = api.delete(name, &DeleteParams::default()).await;
        }
        assert!(
            ghosts.is_empty(),
            "the test bed showed cut-off nodes Ready before their heartbeat was restored: {}",
            ghosts
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
}

/// The status of a node's Ready condition ("True", "False", "Unknown"), if it has one.
pub fn node_ready_status(node: &Node) -> Option<String> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
}

/// The status of a pod condition by type, if present.
pub fn pod_condition(pod: &k8s_openapi::api::core::v1::Pod, type_: &str) -> Option<String> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
}

/// rollgate's one field manager (`names::FIELD_MANAGER`).
pub const FIELD_MANAGER: &str = "rollgate";

/// The managers whose `metadata.managedFields` entry owns the pod condition of type
/// `type_` (`f:status` / `f:conditions` / `k:{"type":"<type_>"}`), as `kubectl get pod -o
/// yaml --show-managed-fields` shows them.
pub fn condition_managers(pod: &k8s_openapi::api::core::v1::Pod, type_: &str) -> Vec<String> {
    let key = format!("k:{}", json!({ "type": type_ }));
    pod.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|entry| {
            entry
                .fields_v1
                .as_ref()
                .is_some_and(|fields| fields.0["f:status"]["f:conditions"].get(&key).is_some())
        })
        .filter_map(|entry| entry.manager.clone())
        .collect()
}

/// Fails unless rollgate's field manager owns the pod condition of type `type_`.
pub fn assert_condition_managed_by_rollgate(pod: &k8s_openapi::api::core::v1::Pod, type_: &str) {
    let managers = condition_managers(pod, type_);
    assert!(
        managers.iter().any(|m| m == FIELD_MANAGER),
        "condition {type_} of pod {}: managers {managers:?}, want {FIELD_MANAGER:?}; managedFields: {}",
        pod.metadata.name.as_deref().unwrap_or_default(),
        serde_json::to_string(&pod.metadata.managed_fields).unwrap_or_default()
    );
}

pub fn pod_is_ready(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    pod_condition(pod, "Ready").as_deref() == Some("True")
}

/// A compact one-line description of pods, for failure messages and the narrative.
pub fn describe_pods(pods: &[k8s_openapi::api::core::v1::Pod]) -> String {
    let mut out: Vec<String> = pods
        .iter()
        .map(|p| {
            let name = p.metadata.name.clone().unwrap_or_default();
            let node = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            let phase = p
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default();
            let ready = pod_condition(p, "Ready").unwrap_or_else(|| "-".into());
            let rev = p
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("controller-revision-hash").cloned())
                .unwrap_or_default();
            let term = if p.metadata.deletion_timestamp.is_some() {
                " terminating"
            } else {
                ""
            };
            format!("{name}@{node} {phase} ready={ready} rev={rev}{term}")
        })
        .collect();
    out.sort();
    format!("[{}]", out.join("; "))
}

pub fn debug_list<T: Debug>(items: &[T]) -> String {
    format!("{items:?}")
}

/// A binary of the shared baselines (`shared/baselines/openyurt-v1.7.0/<name>`): `env`
/// if set, else in a folder above the repository, else in the development machine's
/// shared folder. `None` when none is there (the tests that need it say SKIPPED).
pub fn baseline_binary(env: &str, name: &str) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(env).filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let relative = format!("shared/baselines/openyurt-v1.7.0/{name}");
    repo_root()
        .ancestors()
        .map(|dir| dir.join(&relative))
        .chain([PathBuf::from("/work").join(&relative)])
        .find(|candidate| candidate.is_file())
}

/// A `rollgate controller` process scoped to one namespace, logging to
/// `target/e2e-logs/<name>.log`.
pub struct ControllerProcess {
    child: std::process::Child,
    pub log: PathBuf,
}

impl ControllerProcess {
    pub fn start(namespace: &str, tag: &str) -> Self {
        Self::start_with(namespace, tag, &controller_kubeconfig(), &[])
    }

    /// Like `start`, with extra environment variables (every controller flag has one).
    pub fn start_with_env(namespace: &str, tag: &str, env: &[(&str, &str)]) -> Self {
        Self::start_with(namespace, tag, &controller_kubeconfig(), env)
    }

    /// Like `start`, with another kubeconfig (e.g. one that goes through a test proxy).
    pub fn start_with_kubeconfig(namespace: &str, tag: &str, kubeconfig: &std::path::Path) -> Self {
        Self::start_with(namespace, tag, kubeconfig, &[])
    }

    /// Like `start`, with another kubeconfig and extra environment variables (e.g. the
    /// token of an installed chart's ServiceAccount and its namespace for the Lease).
    pub fn start_with(
        namespace: &str,
        tag: &str,
        kubeconfig: &std::path::Path,
        env: &[(&str, &str)],
    ) -> Self {
        Self::start_binary(&controller_binary(), namespace, tag, kubeconfig, env)
    }

    /// Like `start_with`, running `binary` (a bench runs today's build and the new one
    /// in turn).
    pub fn start_binary(
        binary: &std::path::Path,
        namespace: &str,
        tag: &str,
        kubeconfig: &std::path::Path,
        env: &[(&str, &str)],
    ) -> Self {
        let dir = repo_root().join("target/e2e-logs");
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join(format!("{namespace}-{tag}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let child = std::process::Command::new(binary)
            .args([
                "controller",
                "--watch-namespace",
                namespace,
                "--metrics-addr",
                "127.0.0.1:0",
                // A Lease per test: tests run side by side, each with its own controller.
                "--lease-name",
                &format!("rollgate-e2e-{namespace}"),
            ])
            .env("KUBECONFIG", kubeconfig)
            .env("ROLLGATE_LOG", "info,rollgate=debug")
            .envs(env.iter().copied())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("starting rollgate controller");
        note(format!(
            "started rollgate controller pid {} ({})",
            child.id(),
            log.display()
        ));
        ControllerProcess { child, log }
    }

    /// The process id (to read its `/proc` figures).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The controller's /metrics text (its port is in its log, once it serves them).
    pub async fn metrics(&self) -> String {
        let addr = self.metrics_addr().await;
        http_request(addr, "GET", "/metrics").await.unwrap().body
    }

    /// Where the controller serves /metrics (read from its log, once it serves them).
    pub async fn metrics_addr(&self) -> std::net::SocketAddr {
        wait_for(
            "the metrics address in the controller's log",
            Duration::from_secs(30),
            || async {
                let text = std::fs::read_to_string(&self.log).map_err(|e| e.to_string())?;
                text.lines()
                    .find_map(|l| l.split("serving /metrics").nth(1)?.split("addr=").nth(1))
                    .and_then(|a| {
                        a.split_whitespace()
                            .next()?
                            .parse::<std::net::SocketAddr>()
                            .ok()
                    })
                    .ok_or_else(|| "not served yet".to_string())
            },
        )
        .await
    }

    /// One sample of the controller's metrics, by its full name with labels as printed
    /// (e.g. `rollgate_daemonset_reconcile_duration_seconds_count`); 0 when absent.
    pub async fn metric(&self, name: &str) -> f64 {
        self.metrics()
            .await
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
            .unwrap_or(0.0)
    }

    /// Simulates a crash: SIGKILL, no chance to clean up.
    pub fn crash(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Graceful stop with SIGTERM; returns the exit status.
    pub fn stop(mut self) -> std::process::ExitStatus {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!(
                    "controller did not stop within 15 s of SIGTERM; log: {}",
                    self.log.display()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `rollgate` binary `ControllerProcess` runs: this build's, or
/// `ROLLGATE_TEST_CONTROLLER_BIN` (e.g. a build of an older commit, to show that a test
/// fails on the code before a fix).
pub fn controller_binary() -> PathBuf {
    std::env::var_os("ROLLGATE_TEST_CONTROLLER_BIN")
        .filter(|b| !b.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_rollgate")))
}

/// Runs kubectl against the test cluster; a failure panics with its stderr.
pub fn kubectl(args: &[&str]) -> String {
    try_kubectl(args).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs kubectl against the test cluster: its output, or what went wrong (for benches,
/// which report an error rather than panic).
pub fn try_kubectl(args: &[&str]) -> Result<String, String> {
    let out = std::process::Command::new("kubectl")
        .env("KUBECONFIG", cluster_kubeconfig())
        .args(args)
        .output()
        .map_err(|e| format!("running kubectl: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    String::from_utf8(out.stdout).map_err(|e| format!("kubectl {}: {e}", args.join(" ")))
}

/// A kubeconfig with the token of the `rollgate-controller` ServiceAccount and exactly the
/// RBAC of `deploy/controller/rbac.yaml`: every e2e test that runs the controller proves
/// those permissions are enough. Made once per test binary, with kubectl.
pub fn controller_kubeconfig() -> PathBuf {
    static PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let deploy = repo_root().join("deploy");
        // The agent's file creates the rollgate-system namespace.
        kubectl(&[
            "apply",
            "-f",
            deploy.join("agent/rbac.yaml").to_str().unwrap(),
        ]);
        kubectl(&[
            "apply",
            "-f",
            deploy.join("controller/rbac.yaml").to_str().unwrap(),
        ]);
        let token = kubectl(&[
            "-n",
            "rollgate-system",
            "create",
            "token",
            "rollgate-controller",
            "--duration",
            "4h",
        ]);
        let dir = repo_root().join("target/e2e-state");
        derived_kubeconfig(
            &dir,
            &format!("controller-{}.kubeconfig", std::process::id()),
            None,
            Some(token.trim()),
        )
    })
    .clone()
}

/// The Events recorded for one object, as `(type, reason, message)`.
pub async fn events_for(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Vec<(String, String, String)> {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), namespace);
    let list = api.list(&kube::api::ListParams::default()).await.unwrap();
    list.items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
            )
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Node agent support (tests/agent_ota.rs): agent processes, a plain HTTP client for the
// node API, a TCP proxy that can cut an agent off the API server, and credentials of the
// agent's ServiceAccount bound to a pod on a node.
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// What the API server saw: its audit log (written by hack/cluster-up.sh) and how many
// times each Event was reported. Counting calls, not effects: a second DELETE of a pod
// that is already terminating changes nothing a watcher can see.
// ---------------------------------------------------------------------------------------

/// The user the e2e controller runs as (the ServiceAccount token of `controller_kubeconfig`).
pub const CONTROLLER_USER: &str = "system:serviceaccount:rollgate-system:rollgate-controller";

/// One completed request (stage `ResponseComplete`) from the API server's audit log.
#[derive(Debug, Clone)]
pub struct AuditRecord {
    pub verb: String,
    pub resource: String,
    pub subresource: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub user: String,
    /// The client's User-Agent (rollgate's names its mode and identity, so replicas
    /// sharing one ServiceAccount can be told apart).
    pub user_agent: String,
    /// HTTP status code of the answer.
    pub code: Option<u16>,
    /// When the API server received the request.
    pub received: Option<k8s_openapi::jiff::Timestamp>,
    /// The request body, for the policy rules that log at `Request` level.
    pub request_object: Option<serde_json::Value>,
}

impl AuditRecord {
    /// One line of the JSON audit log; `None` for stages other than `ResponseComplete`.
    pub fn from_json(v: &serde_json::Value) -> Option<Self> {
        if v["stage"] != "ResponseComplete" {
            return None;
        }
        let text = |v: &serde_json::Value| v.as_str().map(str::to_string);
        let object = &v["objectRef"];
        Some(AuditRecord {
            verb: text(&v["verb"])?,
            resource: text(&object["resource"]).unwrap_or_default(),
            subresource: text(&object["subresource"]),
            namespace: text(&object["namespace"]),
            name: text(&object["name"]),
            user: text(&v["user"]["username"]).unwrap_or_default(),
            user_agent: text(&v["userAgent"]).unwrap_or_default(),
            code: v["responseStatus"]["code"]
                .as_u64()
                .and_then(|c| u16::try_from(c).ok()),
            received: v["requestReceivedTimestamp"]
                .as_str()
                .and_then(|t| t.parse().ok()),
            request_object: v.get("requestObject").cloned(),
        })
    }
}

/// The test cluster's audit log: `logs/audit.log` in the cluster folder, which holds the
/// test kubeconfig (`ROLLGATE_TEST_KUBECONFIG`).
pub fn audit_log_path() -> PathBuf {
    let kubeconfig = kubeconfig_path();
    let dir = kubeconfig
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    dir.join("logs/audit.log")
}

/// Every completed request in the audit log, rotated files first, oldest first.
pub fn audit_records() -> Vec<AuditRecord> {
    let current = audit_log_path();
    assert!(
        current.exists(),
        "no audit log at {}: the test cluster's kube-apiserver runs without auditing \
         (started before hack/cluster-up.sh enabled it?); restart it with \
         hack/cluster-down.sh then hack/cluster-up.sh",
        current.display()
    );
    let dir = current.parent().unwrap();
    // Rotated files are `audit-<timestamp>.log`: their names sort in time order.
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("audit-") && n.ends_with(".log"))
        })
        .collect();
    files.sort();
    files.push(current);
    let mut records = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        // A line being written right now may be cut short: skip what does not parse.
        records.extend(
            text.lines()
                .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
                .filter_map(|v| AuditRecord::from_json(&v)),
        );
    }
    records
}

/// The audit log from a point on, read as it grows: for a test that must act on a
/// request the moment the API server completed it. A watch can deliver the change it
/// made long after (a loaded machine has been seen to lag a minute), while the audit
/// log is written before the answer (`--audit-log-mode blocking`). Each read parses
/// only what was appended since the last one.
pub struct AuditTail {
    offset: u64,
}

impl AuditTail {
    /// From the current end of the log.
    pub fn from_now() -> Self {
        let offset = std::fs::metadata(audit_log_path()).map_or(0, |m| m.len());
        AuditTail { offset }
    }

    /// The requests completed since the last read. After a rotation (the file shrank)
    /// it reads the new file from its start: what went into the rotated file
    /// meanwhile is skipped.
    pub fn read(&mut self) -> Vec<AuditRecord> {
        use std::io::{Read as _, Seek as _};
        let Ok(mut file) = std::fs::File::open(audit_log_path()) else {
            return Vec::new();
        };
        let len = file.metadata().map_or(0, |m| m.len());
        if len < self.offset {
            self.offset = 0;
        }
        let mut bytes = Vec::new();
        if file.seek(std::io::SeekFrom::Start(self.offset)).is_err()
            || file.read_to_end(&mut bytes).is_err()
        {
            return Vec::new();
        }
        // A line being written right now is left for the next read.
        let complete = bytes
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |at| at + 1);
        self.offset += complete as u64;
        String::from_utf8_lossy(&bytes[..complete])
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter_map(|v| AuditRecord::from_json(&v))
            .collect()
    }
}

/// The DELETE calls on pods of `namespace` the API server answered (any status code),
/// only those of `user` when given.
pub fn pod_deletes(namespace: &str, user: Option<&str>) -> Vec<AuditRecord> {
    audit_records()
        .into_iter()
        .filter(|r| {
            r.verb == "delete"
                && r.resource == "pods"
                && r.subresource.is_none()
                && r.namespace.as_deref() == Some(namespace)
                && user.is_none_or(|u| r.user == u)
        })
        .collect()
}

/// How many DELETE calls each pod of `namespace` got from `user`, by pod name.
pub fn pod_delete_counts(namespace: &str, user: &str) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for record in pod_deletes(namespace, Some(user)) {
        *counts.entry(record.name.unwrap_or_default()).or_insert(0) += 1;
    }
    counts
}

/// The pods of `namespace` that got more than one DELETE call from `user`, with the
/// calls' status codes, for a failure message.
pub fn pods_deleted_more_than_once(namespace: &str, user: &str) -> BTreeMap<String, Vec<u16>> {
    let mut calls: BTreeMap<String, Vec<u16>> = BTreeMap::new();
    for record in pod_deletes(namespace, Some(user)) {
        calls
            .entry(record.name.unwrap_or_default())
            .or_default()
            .push(record.code.unwrap_or(0));
    }
    calls.retain(|_, codes| codes.len() > 1);
    calls
}

/// One Event object about an object, with how many times it was reported.
#[derive(Debug, Clone)]
pub struct EventRecord {
    pub type_: String,
    pub reason: String,
    pub note: String,
    pub reporting_controller: String,
    /// Occurrences: a recorder merges repeats of an Event into one object and counts
    /// them in `series.count` (events.k8s.io/v1) or `count` (core/v1, `deprecatedCount`
    /// here), so counting objects misses repeats.
    pub occurrences: u32,
}

/// The Events recorded for one object, each with its number of occurrences.
pub async fn event_records(client: &Client, namespace: &str, name: &str) -> Vec<EventRecord> {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), namespace);
    let list = api.list(&kube::api::ListParams::default()).await.unwrap();
    list.items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| {
            let occurrences = match &e.series {
                // A series exists only once an Event repeated.
                Some(series) => u32::try_from(series.count).unwrap_or(0).max(2),
                None => u32::try_from(e.deprecated_count.unwrap_or(1))
                    .unwrap_or(0)
                    .max(1),
            };
            EventRecord {
                type_: e.type_.unwrap_or_default(),
                reason: e.reason.unwrap_or_default(),
                note: e.note.unwrap_or_default(),
                reporting_controller: e.reporting_controller.unwrap_or_default(),
                occurrences,
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// A tripwire between the controller and the API server, to crash the controller right
// after it issued deletions and before anyone (itself, the test) saw them land.
// ---------------------------------------------------------------------------------------

/// A plain-HTTP proxy on loopback that forwards every request to the API server as the
/// controller's ServiceAccount, except pod DELETEs: those are held, and the first one
/// trips the wire. The test then kills the controller and `release`s the held DELETEs,
/// which reach the API server like requests that were on the wire when the process
/// died; their answers never go back.
pub struct DeleteTripwire {
    /// A kubeconfig for the controller that goes through the proxy.
    pub kubeconfig: PathBuf,
    held: tokio::sync::watch::Receiver<Vec<String>>,
    forwarded: tokio::sync::watch::Receiver<Vec<String>>,
    release: Arc<tokio::sync::watch::Sender<bool>>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Clone)]
struct TripwireState {
    upstream: Client,
    held: Arc<tokio::sync::watch::Sender<Vec<String>>>,
    forwarded: Arc<tokio::sync::watch::Sender<Vec<String>>>,
    release: tokio::sync::watch::Receiver<bool>,
}

impl DeleteTripwire {
    pub async fn start(tag: &str) -> Self {
        let upstream = client_from(&controller_kubeconfig()).await;
        let (held_tx, held) = tokio::sync::watch::channel(Vec::new());
        let (forwarded_tx, forwarded) = tokio::sync::watch::channel(Vec::new());
        let (release, release_rx) = tokio::sync::watch::channel(false);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the tripwire proxy");
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new()
            .fallback(tripwire_forward)
            .with_state(TripwireState {
                upstream,
                held: Arc::new(held_tx),
                forwarded: Arc::new(forwarded_tx),
                release: release_rx,
            });
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        // The controller speaks plain HTTP to the proxy, with its own token.
        let source = Kubeconfig::read_from(controller_kubeconfig()).unwrap();
        let mut value = serde_json::to_value(&source).unwrap();
        for cluster in value["clusters"].as_array_mut().unwrap() {
            cluster["cluster"] = json!({ "server": format!("http://{addr}") });
        }
        let dir = repo_root().join("target/e2e-state");
        std::fs::create_dir_all(&dir).unwrap();
        let kubeconfig = dir.join(format!("{}.kubeconfig", unique_name(tag)));
        std::fs::write(&kubeconfig, serde_json::to_vec_pretty(&value).unwrap()).unwrap();
        note(format!("tripwire proxy on http://{addr}"));
        DeleteTripwire {
            kubeconfig,
            held,
            forwarded,
            release: Arc::new(release),
            task,
        }
    }

    /// Waits for the first pod DELETE to reach the proxy; returns the pods whose DELETE
    /// is held so far. None of them has reached the API server.
    pub async fn wait_tripped(&mut self, timeout: Duration) -> Vec<String> {
        tokio::time::timeout(timeout, self.held.wait_for(|v| !v.is_empty()))
            .await
            .unwrap_or_else(|_| panic!("no pod DELETE reached the proxy within {timeout:?}"))
            .expect("the tripwire proxy stopped")
            .clone()
    }

    /// Lets every held (and later) pod DELETE through to the API server and waits until
    /// all of them got there; returns their pods. Their callers get no answer.
    pub async fn release(&self) -> Vec<String> {
        self.release.send_replace(true);
        wait_for(
            "the held DELETEs to reach the API server",
            Duration::from_secs(30),
            || async {
                let (held, forwarded) =
                    (self.held.borrow().clone(), self.forwarded.borrow().clone());
                if held.len() == forwarded.len() {
                    Ok(forwarded)
                } else {
                    Err(format!("held {held:?}, forwarded {forwarded:?}"))
                }
            },
        )
        .await
    }
}

impl Drop for DeleteTripwire {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `/api/v1/namespaces/<ns>/pods/<name>` -> `<name>` (no subresource).
pub fn pod_name_in_path(path: &str) -> Option<String> {
    let rest = path.strip_prefix("/api/v1/namespaces/")?;
    let mut parts = rest.split('/');
    let (_ns, kind, name) = (parts.next()?, parts.next()?, parts.next()?);
    (kind == "pods" && parts.next().is_none() && !name.is_empty()).then(|| name.to_string())
}

async fn tripwire_forward(
    axum::extract::State(mut state): axum::extract::State<TripwireState>,
    request: axum::extract::Request,
) -> axum::response::Response {
    use axum::http::{Method, StatusCode};
    use axum::response::IntoResponse;
    const HOP_BY_HOP: [&str; 5] = [
        "host",
        "authorization",
        "connection",
        "content-length",
        "transfer-encoding",
    ];
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, 64 << 20).await {
        Ok(b) => b,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let pod_delete = if parts.method == Method::DELETE {
        pod_name_in_path(parts.uri.path())
    } else {
        None
    };
    let target = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let mut upstream = axum::http::Request::builder()
        .method(parts.method.clone())
        .uri(target);
    for (name, value) in &parts.headers {
        if !HOP_BY_HOP.contains(&name.as_str()) {
            upstream = upstream.header(name, value);
        }
    }
    let upstream = upstream
        .body(kube::client::Body::from(body.to_vec()))
        .unwrap();
    if let Some(name) = pod_delete {
        state.held.send_modify(|names| names.push(name.clone()));
        // A task of its own: the caller's death (its connection closing) drops this
        // handler, but a request on the wire still reaches the server.
        tokio::spawn(async move {
            let _ = state.release.wait_for(|released| *released).await;
            let _ = state.upstream.send(upstream).await;
            state.forwarded.send_modify(|names| names.push(name));
        });
        // Its caller never hears back.
        return std::future::pending().await;
    }
    let response = match state.upstream.send(upstream).await {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    };
    let (mut parts, body) = response.into_parts();
    for name in HOP_BY_HOP {
        parts.headers.remove(name);
    }
    axum::response::Response::from_parts(parts, axum::body::Body::new(body))
}

// ---------------------------------------------------------------------------------------
// The cloud load balancer: the `lb-emulator` binary, as `make demo` and users run it, in a
// process of its own (cargo builds it beside `rollgate`; `make test` builds it first).

/// A running `lb-emulator` process; killed on drop.
pub struct EmulatorProcess {
    child: std::process::Child,
    pub addr: std::net::SocketAddr,
}

impl EmulatorProcess {
    /// Starts the binary on a free loopback port with `config`'s timings and API rate
    /// limits (the settings the tests vary; faults are set later through
    /// `/_emulator/faults`).
    pub fn start(config: &lb_emulator::EmulatorConfig) -> Self {
        use std::io::BufRead as _;
        let bin = PathBuf::from(env!("CARGO_BIN_EXE_rollgate"))
            .with_file_name(format!("lb-emulator{}", std::env::consts::EXE_SUFFIX));
        assert!(
            bin.exists(),
            "{} is missing: build it first with `cargo build -p lb-emulator` (make test does)",
            bin.display()
        );
        let ms = |d: Duration| d.as_millis().to_string();
        let mut command = std::process::Command::new(&bin);
        command
            .args(["--listen", "127.0.0.1:0"])
            .args(["--registration-delay-ms", &ms(config.registration_delay)])
            .args(["--health-delay-ms", &ms(config.health_delay)])
            .args(["--job-delay-ms", &ms(config.job_delay)])
            .args(["--tick-ms", &ms(config.tick)]);
        // The API rate limits, when a test or bench asks for them (off otherwise).
        if config.api_rate_limits {
            command.arg("--api-rate-limits");
        }
        for ((product, action), limit) in &config.api_rate_limit_overrides {
            command.arg(format!("--api-rate-limit={product}:{action}={limit}"));
        }
        for (name, value) in config.account_quotas.iter() {
            command.arg(format!("--quota={name}={value}"));
        }
        let mut child = command
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let mut first = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut first)
            .expect("reading the emulator's address");
        let addr = first
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("the emulator's first line {first:?}: {e}"));
        note(format!("lb-emulator pid {} on {addr}", child.id()));
        EmulatorProcess { child, addr }
    }

    /// `127.0.0.1:PORT`, the endpoint override for the cloud client.
    pub fn endpoint(&self) -> String {
        self.addr.to_string()
    }

    /// The environment that points a `rollgate controller` at this emulator, for every
    /// product, with the emulator's credentials, and never at the instance metadata
    /// service (not loopback).
    pub fn controller_env(&self) -> Vec<(String, String)> {
        let endpoint = self.endpoint();
        [
            ("ALIBABA_CLOUD_REGION_ID", "cn-hangzhou"),
            ("ALIBABA_CLOUD_SLB_ENDPOINT", &endpoint),
            ("ALIBABA_CLOUD_NLB_ENDPOINT", &endpoint),
            ("ALIBABA_CLOUD_ECS_ENDPOINT", &endpoint),
            ("ALIBABA_CLOUD_VPC_ENDPOINT", &endpoint),
            ("ROLLGATE_CLOUD_SCHEME", "http"),
            ("ALIBABA_CLOUD_ACCESS_KEY_ID", "emulator-access-key-id"),
            (
                "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
                "emulator-access-key-secret",
            ),
            ("ALIBABA_CLOUD_ECS_METADATA_DISABLED", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A client configuration for this emulator (the shared test one), for a test
    /// that needs to change a setting before building its client.
    pub fn cloud_config(&self) -> alibaba_lb::ClientConfig {
        lb_emulator::testing::client_config(&self.endpoint(), 4)
    }

    /// A cloud client of `product` for this emulator, for what a test makes by hand
    /// (a user's load balancer, listener or backend).
    pub fn cloud_client(
        &self,
        product: alibaba_lb::Product,
    ) -> std::sync::Arc<dyn alibaba_lb::LoadBalancerBackends> {
        lb_emulator::testing::client(&self.endpoint(), product, 4)
    }

    pub fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for EmulatorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The annotation the system sets on pods that run as elastic container instances.
pub const ECI_INSTANCE_ID_ANNOTATION: &str = "k8s.aliyun.com/eci-instance-id";

/// Gives every pod IP in `namespace` an ENI in the emulator's `vpc_id`, as Terway does
/// on a real cluster (it attaches the ENI, or a secondary IP of one, before the pod
/// runs): one `InUse` ENI per pod IP, added once the pod has its IP. Pods that run as
/// elastic container instances (the annotation above) get none. Polls until aborted.
pub fn give_pod_ips_enis(
    client: Client,
    namespace: &str,
    emulator: &EmulatorProcess,
    vpc_id: &str,
) -> tokio::task::JoinHandle<()> {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client, namespace);
    let url = format!("{}/_emulator/enis", emulator.base_url());
    let vpc_id = vpc_id.to_string();
    tokio::spawn(async move {
        let http = alibaba_lb::http::build_http_client(Duration::from_secs(10)).unwrap();
        let mut given: std::collections::HashSet<String> = Default::default();
        loop {
            if let Ok(list) = pods.list(&Default::default()).await {
                for pod in list.items {
                    let eci = pod
                        .metadata
                        .annotations
                        .as_ref()
                        .is_some_and(|a| a.contains_key(ECI_INSTANCE_ID_ANNOTATION));
                    let Some(ip) = pod.status.and_then(|s| s.pod_ip) else {
                        continue;
                    };
                    if eci || given.contains(&ip) {
                        continue;
                    }
                    let body = json!({"private_ips": [ip], "vpc_id": vpc_id});
                    let sent = http
                        .post(&url)
                        .header("content-type", "application/json")
                        .body(body.to_string())
                        .send()
                        .await;
                    if sent.is_ok_and(|r| r.status().is_success()) {
                        given.insert(ip);
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

// ---------------------------------------------------------------------------------------
// The install as kubectl and helm render it (tests/deploy.rs, tests/helm.rs): the objects,
// the effective RBAC of a ServiceAccount, and tokens bound to a pod.
// ---------------------------------------------------------------------------------------

/// The objects `kubectl apply -k dir` would send, as JSON (`create --dry-run=client`
/// prints them as built, without merging anything from the cluster).
pub fn kustomize_build(dir: &std::path::Path) -> Vec<serde_json::Value> {
    let out = kubectl(&[
        "create",
        "-k",
        dir.to_str().unwrap(),
        "--dry-run=client",
        "-o",
        "json",
    ]);
    serde_json::Deserializer::from_str(&out)
        .into_iter::<serde_json::Value>()
        .map(|object| object.expect("kubectl printed JSON objects"))
        .collect()
}

pub fn kind_of(object: &serde_json::Value) -> &str {
    object["kind"].as_str().unwrap_or_default()
}

/// `kubectl auth can-i --list` of a ServiceAccount, one normalized rule a line, sorted:
/// columns joined by a single space, so whitespace changes of kubectl do not matter.
pub fn can_i_list(namespace: &str, service_account: &str) -> String {
    let out = kubectl(&[
        "auth",
        "can-i",
        "--list",
        "-n",
        namespace,
        &format!("--as=system:serviceaccount:{namespace}:{service_account}"),
    ]);
    let mut lines: Vec<String> = out
        .lines()
        .skip(1) // the header
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|l| !l.is_empty())
        .collect();
    lines.sort();
    lines.join("\n") + "\n"
}

/// A token of `namespace/service_account` bound to `pod` (see support::agent_token).
pub async fn bound_token(
    client: &Client,
    namespace: &str,
    service_account: &str,
    pod: &k8s_openapi::api::core::v1::Pod,
) -> String {
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::core::v1::ServiceAccount;
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let request = json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"audiences": [], "expirationSeconds": 3600, "boundObjectRef": {
            "kind": "Pod", "apiVersion": "v1",
            "name": pod.metadata.name, "uid": pod.metadata.uid
        }}
    });
    let response: TokenRequest = api
        .create_subresource("token", service_account, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("TokenRequest for {namespace}/{service_account}: {e}"));
    response.status.and_then(|s| s.token).expect("a token")
}
pub mod conditions;
