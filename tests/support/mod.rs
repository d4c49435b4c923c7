//! Test support for e2e tests against the local control plane (`make cluster-up`).
//!
//! Every test makes its own simulated nodes and namespace, so tests run in parallel
//! without seeing each other's pods.
#![allow(dead_code)] // each test binary uses a different part of this module

mod agent;
mod audit;
pub mod daemonset;
mod emulator_process;
pub mod fleet;
pub mod gated;
pub mod ghost_ready;
mod install;
pub mod measure;
pub mod private_kwok;
pub mod second_cluster;
mod tripwire;
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

// The sections of this toolkit that only some test files use, each a file of its own;
// their items keep their `support::` paths (unused in the test binaries that need none).
#[allow(unused_imports)]
pub use {agent::*, audit::*, emulator_process::*, install::*, tripwire::*};

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

pub mod conditions;
