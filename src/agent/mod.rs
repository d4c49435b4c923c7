//! The node-local agent: the OpenYurt-compatible OTA REST API on 127.0.0.1:10267.
//!
//! - `watch`: lists and watches the pods bound to this node into `state`;
//! - `state`: the pods, pre-serialized for `GET /pods`;
//! - `persist`: the state file in `--state-dir` (atomic, rate-limited writes);
//! - `target`: the namespace and pod name of a POST path, validated before any I/O;
//! - `checks`: the pure decision whether a POST may act on a pod;
//! - `api`: the HTTP routes;
//! - `bind`: the port, and who holds it when it is taken (yurthub, on OpenYurt nodes);
//! - `error_chain`: an error and its causes in one line, for bodies and logs;
//! - [`AgentArgs`]: the flags of `rollgate agent`.
//!
//! The agent starts serving before it reaches the API server: a node that boots while
//! cut off still answers `GET /pods` from its saved state.
pub mod api;
pub mod bind;
pub mod checks;
mod error_chain;
pub mod persist;
pub mod state;
pub mod target;
pub mod watch;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;

use crate::duration_flag::parse_interval;
use crate::runtime::Shutdown;

// The flags of `rollgate agent` (a plain comment: a doc comment would become its --help text).
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// The node this agent serves; only pods bound to it are visible.
    #[arg(long, env = "NODE_NAME")]
    pub node_name: String,
    /// Address of the node-local API. Loopback only by design.
    #[arg(long, env = "ROLLGATE_AGENT_LISTEN", default_value = "127.0.0.1:10267")]
    pub listen: SocketAddr,
    /// Where the agent keeps its last known pod state, to answer while cut off.
    #[arg(
        long,
        env = "ROLLGATE_AGENT_STATE_DIR",
        default_value = "/var/lib/rollgate-agent"
    )]
    pub state_dir: PathBuf,
    /// The shortest time between two writes of the state file (edge nodes often run on
    /// SD cards): seconds (`10`, `10s`), minutes (`2m`) or milliseconds (`500ms`). The
    /// file is written only when the state changed, and once more at shutdown.
    #[arg(
        long,
        env = "ROLLGATE_AGENT_STATE_WRITE_INTERVAL",
        default_value = "10s",
        value_parser = parse_interval
    )]
    pub state_write_interval: Duration,
}

pub async fn run(args: AgentArgs, shutdown: Shutdown) -> anyhow::Result<()> {
    // No connection check here (unlike the controller): the API server may be out of
    // reach for hours, and serving the saved state is the point.
    let config = kube::Config::infer()
        .await
        .context("no usable cluster config: set KUBECONFIG or run in a pod")?;

    let state = state::NodeState::new(&args.node_name);
    if let Some(saved) = persist::load(&args.state_dir) {
        let as_of = saved.current_as_of;
        let pods = saved.pod_list.items.len();
        if state.load_from_disk(saved) {
            tracing::info!(pods, %as_of, dir = %args.state_dir.display(),
                "serving the saved pod state until the API server answers");
        }
    }

    let watch_client = kube::client::ClientBuilder::try_from(watch_config(config.clone()))
        .context("building the watch client")?
        .with_layer(&watch::WatchAnswered::new(state.clone()))
        .build();
    let write_client =
        kube::Client::try_from(write_config(config)).context("building the write client")?;

    let listener = bind::bind(args.listen).await?;
    let bound = listener.local_addr()?;
    tracing::info!(node = %args.node_name, listen = %bound, "node API listening");

    let writer = persist::StateWriter::spawn(
        state.clone(),
        args.state_dir.clone(),
        args.state_write_interval,
    );
    let watcher = tokio::spawn(watch::run(Api::<Pod>::all(watch_client), state.clone()));
    let app = api::router(api::AppState {
        state: state.clone(),
        client: write_client,
        state_dir: args.state_dir.display().to_string(),
    });
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.requested())
        .await;
    watcher.abort();
    // The last write, by the one writer, so a restart starts from the newest state with
    // an honest age.
    writer.finish().await;
    served.context("serving the node API")
}

/// The watch: a bounded connect so a cut is noticed quickly, and a read timeout above
/// the watch's own renewal (`watch.rs`) so a quiet watch is not cut, but a connection
/// that went silent (no RST) is.
fn watch_config(mut config: kube::Config) -> kube::Config {
    config.connect_timeout = Some(Duration::from_secs(5));
    config.read_timeout = Some(Duration::from_secs(120));
    config.reset_reader_on_write = true;
    config
}

/// Reads and writes of a POST: short timeouts and no retries, so a cut-off node answers
/// 503 within seconds instead of hanging the operator's curl.
fn write_config(mut config: kube::Config) -> kube::Config {
    config.connect_timeout = Some(Duration::from_secs(2));
    config.read_timeout = Some(Duration::from_secs(5));
    config.write_timeout = Some(Duration::from_secs(5));
    config.reset_reader_on_write = true;
    config.default_retry = false;
    config
}
