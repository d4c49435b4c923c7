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

    let controllers = crate::daemonset::controller::run(
        client.clone(),
        metrics.clone(),
        args.watch_namespace.as_deref(),
        args.daemonset_concurrency,
        ready.clone(),
        shutdown.clone(),
    );
    let image_pull = crate::daemonset::image_pull::run(
        client,
        metrics,
        args.watch_namespace.clone(),
        crate::daemonset::image_pull::PullJobSettings {
            helper_image: args.prepull_helper_image.clone(),
        },
        shutdown.clone(),
    );
    let (http_result, controller_result, image_pull_result) =
        tokio::join!(http, controllers, image_pull);
    ready.store(false, Ordering::SeqCst);
    http_result?;
    controller_result?;
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
