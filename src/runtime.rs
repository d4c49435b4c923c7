//! Process plumbing shared by every mode: the async runtime, the cluster client and
//! graceful shutdown.
use anyhow::Context;
use tokio::sync::watch;

/// How many threads a mode's async runtime runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workers {
    /// The controller-manager. Its work is a stream of watch events, each decoded,
    /// stored and handed to the controllers, and on a thread pool every hand-over woke a
    /// parked thread: a quarter of its CPU went to parking and waking threads. On one
    /// thread the same 200-node rollout took a third less CPU, at the same speed (the
    /// OpenYurt side-by-side, issue 13).
    One,
    /// The node agent: it answers concurrent HTTP clients, and one thread measured
    /// worse there.
    PerCore,
}

/// The async runtime a mode runs on (`cli::Command::workers` says which).
pub fn build(workers: Workers) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = match workers {
        Workers::One => tokio::runtime::Builder::new_current_thread(),
        Workers::PerCore => tokio::runtime::Builder::new_multi_thread(),
    };
    builder.enable_all().build()
}

/// Connects from KUBECONFIG (or ~/.kube/config) when present, else in-cluster config,
/// and checks the connection once so a wrong config fails at start, not at first use.
/// `who` names this process in the User-Agent (`rollgate/<version> (<who>)`), so the API
/// server's audit log tells replicas apart.
pub async fn connect(who: &str) -> anyhow::Result<kube::Client> {
    let mut config = kube::Config::infer()
        .await
        .context("no usable cluster config: set KUBECONFIG or run in a pod")?;
    if let Ok(agent) = axum::http::HeaderValue::from_str(&user_agent(who)) {
        config.headers.push((axum::http::header::USER_AGENT, agent));
    }
    let url = config.cluster_url.clone();
    let client = kube::Client::try_from(config).context("building the cluster client")?;
    let version = client
        .apiserver_version()
        .await
        .with_context(|| format!("cannot reach the API server at {url}"))?;
    tracing::debug!(api_server = %url, version = %version.git_version, "connected to the cluster");
    Ok(client)
}

/// `rollgate/<version> (<who>)`.
pub fn user_agent(who: &str) -> String {
    format!("rollgate/{} ({who})", env!("CARGO_PKG_VERSION"))
}

/// A shutdown signal that every task can wait on: flips once on SIGTERM or Ctrl-C.
#[derive(Clone)]
pub struct Shutdown(watch::Receiver<bool>);

impl Shutdown {
    /// Installs the signal handlers and returns the shared signal.
    pub fn install() -> Self {
        let (tx, rx) = watch::channel(false);
        tokio::spawn(async move {
            wait_for_signal().await;
            tracing::info!("shutdown requested, stopping gracefully");
            let _ = tx.send(true);
        });
        Shutdown(rx)
    }

    /// A signal driven by the caller (tests, embedding).
    pub fn from_receiver(receiver: watch::Receiver<bool>) -> Self {
        Shutdown(receiver)
    }

    /// Resolves once shutdown has been requested.
    pub async fn requested(mut self) {
        // An error means the sender is gone, which also means we are shutting down.
        let _ = self.0.wait_for(|stop| *stop).await;
    }
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).expect("installing the SIGTERM handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}
