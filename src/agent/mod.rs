//! The node-local agent: the OpenYurt-compatible OTA REST API on 127.0.0.1:10267.
//!
//! - `watch`: lists and watches the pods bound to this node into `state`;
//! - `state`: the pods, pre-serialized for `GET /pods`, saved to `--state-dir`;
//! - `checks`: the pure decision whether a POST may act on a pod;
//! - `api`: the HTTP routes.
//!
//! The agent starts serving before it reaches the API server: a node that boots while
//! cut off still answers `GET /pods` from its saved state.
pub mod api;
pub mod checks;
pub mod state;
pub mod watch;

use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;

use crate::cli::AgentArgs;
use crate::runtime::Shutdown;

/// How long a burst of pod changes may go unsaved.
const SAVE_DEBOUNCE: Duration = Duration::from_millis(500);
/// While connected, the saved timestamp is refreshed this often.
const SAVE_REFRESH: Duration = Duration::from_secs(30);

pub async fn run(args: AgentArgs, shutdown: Shutdown) -> anyhow::Result<()> {
    // No connection check here (unlike the controller): the API server may be out of
    // reach for hours, and serving the saved state is the point.
    let config = kube::Config::infer()
        .await
        .context("no usable cluster config: set KUBECONFIG or run in a pod")?;
    let watch_client = kube::Client::try_from(watch_config(config.clone()))
        .context("building the watch client")?;
    let write_client =
        kube::Client::try_from(write_config(config)).context("building the write client")?;

    let state = state::NodeState::new(&args.node_name);
    if let Some(saved) = state::load(&args.state_dir) {
        let as_of = saved.current_as_of;
        let pods = saved.pod_list.items.len();
        if state.load_from_disk(saved) {
            tracing::info!(pods, %as_of, dir = %args.state_dir.display(),
                "serving the saved pod state until the API server answers");
        }
    }

    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding the node API to {}", args.listen))?;
    let bound = listener.local_addr()?;
    tracing::info!(node = %args.node_name, listen = %bound, "node API listening");

    let watcher = tokio::spawn(watch::run(Api::<Pod>::all(watch_client), state.clone()));
    let persister = tokio::spawn(state::persist(
        state.clone(),
        args.state_dir.clone(),
        SAVE_DEBOUNCE,
        SAVE_REFRESH,
    ));
    let app = api::router(api::AppState {
        state: state.clone(),
        client: write_client,
        state_dir: args.state_dir.display().to_string(),
    });
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.requested())
        .await;
    watcher.abort();
    persister.abort();
    // A last save so a restart starts from the newest state with an honest age.
    if let Some(bytes) = state.to_save() {
        if let Err(e) = state::save(&args.state_dir, &bytes) {
            tracing::warn!(error = %e, "cannot save the pod state at shutdown");
        }
    }
    served.context("serving the node API")
}

/// The watch: no overall read timeout (a watch is long-lived; `watch.rs` has an idle
/// guard), but a bounded connect so a cut is noticed quickly.
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

/// An error with its causes ("client error (Connect): tcp connect error: Connection
/// refused ..."): the top-level kube error alone does not say why.
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
