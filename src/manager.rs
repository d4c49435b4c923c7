//! The controller-manager mode: the HTTP endpoints and every controller, side by side.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::cli::ControllerArgs;
use crate::metrics::Metrics;
use crate::runtime::{self, Shutdown};
use crate::watch::Watches;

#[derive(Clone)]
struct Health {
    metrics: Metrics,
    /// True once every controller's watches delivered their first state, false again as
    /// soon as shutdown starts.
    ready: Arc<AtomicBool>,
}

pub async fn run(args: ControllerArgs, shutdown: Shutdown) -> anyhow::Result<()> {
    let client = runtime::connect().await?;
    tracing::info!(namespace = ?args.watch_namespace, "controller-manager connected to the API server, starting controllers");
    let metrics = Metrics::default();
    let ready = Arc::new(AtomicBool::new(false));
    let health = Health {
        metrics: metrics.clone(),
        ready: ready.clone(),
    };

    let listener = tokio::net::TcpListener::bind(args.metrics_addr).await?;
    tracing::info!(addr = %listener.local_addr()?, "serving /metrics, /healthz and /readyz");
    let app = Router::new()
        .route("/metrics", get(serve_metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(serve_ready))
        .with_state(health);
    let http = axum::serve(listener, app).with_graceful_shutdown(shutdown.clone().requested());

    // One set of watches for every controller; each subscribes before they start.
    let watches = Watches::new(client.clone(), args.watch_namespace.clone());
    let daemonsets = crate::daemonset::controller::start(
        &watches,
        client.clone(),
        &metrics,
        args.daemonset_concurrency,
        shutdown.clone(),
    );
    {
        // /readyz turns true once every shared cache holds its first full list.
        let (mut synced, ready) = (watches.synced(), ready.clone());
        tokio::spawn(async move {
            if synced.wait_for(|s| *s).await.is_ok() {
                ready.store(true, Ordering::SeqCst);
            }
        });
    }
    let image_pull = crate::daemonset::image_pull::run(
        client,
        metrics,
        args.watch_namespace.clone(),
        shutdown.clone(),
    );
    let (http_result, (), (), image_pull_result) =
        tokio::join!(http, watches.run(shutdown.clone()), daemonsets, image_pull);
    ready.store(false, Ordering::SeqCst);
    http_result?;
    image_pull_result?;
    tracing::info!("controller-manager stopped");
    Ok(())
}

async fn serve_metrics(State(h): State<Health>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        h.metrics.render(),
    )
}

async fn serve_ready(State(h): State<Health>) -> impl IntoResponse {
    if h.ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "watches not synced yet")
    }
}
