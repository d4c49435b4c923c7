//! The controller-manager mode: the HTTP endpoints and every controller, side by side.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::cli::ControllerArgs;
use crate::leader::{Election, Leadership};
use crate::metrics::Metrics;
use crate::runtime::{self, Shutdown};
use crate::watch::{NamespaceWatch, ServiceWatch, Watches};

#[derive(Clone)]
struct Health {
    metrics: Metrics,
    /// True once every controller's watches delivered their first state, false again as
    /// soon as shutdown starts.
    ready: Arc<AtomicBool>,
}

pub async fn run(mut args: ControllerArgs, shutdown: Shutdown) -> anyhow::Result<()> {
    let client = runtime::connect(&format!("controller; {}", args.leader.identity())).await?;
    tracing::info!(namespace = ?args.watch_namespace, "controller-manager connected to the API server, starting controllers");
    let metrics = Metrics::default();
    let ready = Arc::new(AtomicBool::new(false));
    let health = Health {
        metrics: metrics.clone(),
        ready: ready.clone(),
    };

    let listener = tokio::net::TcpListener::bind(args.metrics_addr).await?;
    tracing::info!(addr = %listener.local_addr()?, "serving /metrics, /livez, /healthz and /readyz");
    let app = Router::new()
        .route("/metrics", get(serve_metrics))
        .route("/livez", get(|| async { "ok" }))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(serve_ready))
        .with_state(health);
    let http = axum::serve(listener, app).with_graceful_shutdown(shutdown.clone().requested());

    let mut election = match args.leader.leader_elect {
        true => Some(Election::start(client.clone(), &args.leader, &metrics).await?),
        false => None,
    };
    let leadership = election
        .as_ref()
        .map_or_else(Leadership::always, |e| e.leadership.clone());

    // The readiness gates are on with a cloud region; only they need the Services.
    let mut gates = crate::gates::from_args(&args.gates)?;
    if let Some((_, settings)) = gates.as_mut() {
        let (id, legacy) =
            crate::gates::cluster_id::resolve(&client, args.gates.cluster_id.as_deref()).await?;
        tracing::info!(cluster_id = %id, adopts = %legacy, "readiness gates: this cluster's id");
        settings.cluster_id = id;
        settings.legacy_cluster_id = Some(legacy);
    }
    let service_watch = match gates {
        Some(_) => ServiceWatch::On,
        None => ServiceWatch::Off,
    };
    // The injection webhook reads the namespaces' labels and the gates' Services; it
    // needs the gates (a gate nobody turns True would hold its pod unready forever).
    if args.webhook.webhook_listen.is_some() && gates.is_none() {
        tracing::warn!("{}", crate::gates::inject::WEBHOOK_WITHOUT_GATES);
        args.webhook.webhook_listen = None;
    }
    let namespace_watch = match args.webhook.webhook_listen {
        Some(_) => NamespaceWatch::On,
        None => NamespaceWatch::Off,
    };
    if let Some(wait) = args.stale_status_wait {
        tracing::warn!(
            ?wait,
            "--stale-status-wait has no effect any more: a returning node's pod is replaced \
             within the budget without waiting for the kubelet's report; remove the flag"
        );
    }
    // One set of watches for every controller; each subscribes before they start.
    let watches = Watches::new(
        client.clone(),
        args.watch_namespace.clone(),
        service_watch,
        namespace_watch,
    );
    // Every replica answers admissions, leader or not.
    let webhook = crate::gates::inject::start(
        &args.webhook,
        &args.leader.lease_namespace,
        args.gates.load_balancer_classes,
        &watches,
        client.clone(),
        &metrics,
        shutdown.clone(),
    );
    let webhook_listening = webhook.as_ref().map(|w| w.listening.clone());
    let webhook: std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>> + Send>> =
        match webhook {
            Some(webhook) => webhook.serving,
            None => Box::pin(std::future::ready(Ok(()))),
        };
    let daemonsets = crate::daemonset::controller::start(
        &watches,
        client.clone(),
        &metrics,
        crate::daemonset::controller::Settings {
            concurrency: args.daemonset_concurrency,
            limits: crate::daemonset::rolling_plan::RollingLimits {
                max_deletions_per_plan: args.max_deletions_per_plan as usize,
            },
            other_updater_quiet: args.other_updater_quiet,
            stall_after: args.native_controller_stall_after,
            pull_ahead: args.pull_ahead_limits(),
        },
        leadership.clone(),
        shutdown.clone(),
    );
    let gates: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> = match gates {
        // Its Services are the shared watches', in `--watch-namespace` like the rest.
        Some((clouds, settings)) => Box::pin(crate::gates::controller::start(
            &watches,
            client.clone(),
            &metrics,
            clouds,
            settings,
            leadership.clone(),
            shutdown.clone(),
        )),
        None => {
            tracing::info!("readiness gates off: no --cloud-region");
            Box::pin(std::future::ready(()))
        }
    };
    let image_pull = crate::daemonset::image_pull::start(
        &watches,
        client,
        &metrics,
        crate::daemonset::image_pull::PullJobSettings {
            helper_image: args.prepull_helper_image.clone(),
            deadline: args.prepull_deadline,
        },
        leadership,
        shutdown.clone(),
    );
    {
        // /readyz: true once every shared cache holds its first full list (the
        // Services' too when the gates run; a standby is ready: it can take over) and
        // the injection webhook, when on, listens; false again as soon as shutdown starts.
        let (mut synced, ready, stop) = (watches.synced(), ready.clone(), shutdown.clone());
        tokio::spawn(async move {
            let listening = async {
                match webhook_listening {
                    Some(mut listening) => listening.wait_for(|l| *l).await.is_ok(),
                    None => true,
                }
            };
            let synced = async { synced.wait_for(|s| *s).await.is_ok() };
            let synced = tokio::select! {
                (synced, listening) = futures::future::join(synced, listening) => synced && listening,
                _ = stop.clone().requested() => false,
            };
            if synced {
                ready.store(true, Ordering::SeqCst);
                stop.requested().await;
            }
            ready.store(false, Ordering::SeqCst);
        });
    }
    let work = async {
        let controllers = async {
            tokio::join!(watches.run(shutdown.clone()), daemonsets, image_pull, gates);
            Ok(())
        };
        // A webhook that cannot serve (its port taken) ends the process, as the HTTP
        // endpoints do: a replica that looks ready but answers nothing helps nobody.
        let http = async { http.await.map_err(anyhow::Error::from) };
        tokio::try_join!(http, controllers, webhook).map(|_| ())
    };
    let mut work = std::pin::pin!(work);
    let finished = match election.as_mut() {
        // Losing the lease drops every controller mid-flight: no write races the new leader.
        Some(election) => tokio::select! {
            finished = &mut work => finished,
            lost = election.failed() => return Err(lost),
        },
        None => work.await,
    };
    ready.store(false, Ordering::SeqCst);
    if let Some(election) = election {
        election.release().await?;
    }
    finished?;
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
