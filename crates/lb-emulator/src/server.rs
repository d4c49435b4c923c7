//! The server: binds, routes the cloud API, the metadata and the control endpoints,
//! runs the health tick beside it, and stops on request.
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::config::EmulatorConfig;
use crate::dispatch::api;
use crate::health_probes::tick_forever;
use crate::state::Shared;
use crate::world::World;
use crate::{call_log, control, metadata, quota};

/// A running emulator; dropping it shuts the server down.
pub struct RunningEmulator {
    pub addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<anyhow::Result<()>>>,
}

impl RunningEmulator {
    /// `127.0.0.1:PORT`, to use as an endpoint override.
    pub fn endpoint(&self) -> String {
        self.addr.to_string()
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting requests and waits for the server to finish.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        match self.task.take() {
            Some(task) => task.await?,
            None => Ok(()),
        }
    }
}

impl Drop for RunningEmulator {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Binds `config.listen` and serves in the background.
pub async fn serve(config: EmulatorConfig) -> anyhow::Result<RunningEmulator> {
    let listener = TcpListener::bind(config.listen).await?;
    let addr = listener.local_addr()?;
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(run(listener, config, async move {
        let _ = rx.await;
    }));
    Ok(RunningEmulator {
        addr,
        shutdown: Some(tx),
        task: Some(task),
    })
}

/// Serves on `listener` until `shutdown` completes.
pub async fn run(
    listener: TcpListener,
    config: EmulatorConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let shared = Arc::new(Shared {
        world: Mutex::new(World::new(&config)),
        rate_limiter: Mutex::new(quota::RateLimiter::new(
            config.api_rate_limits,
            config.api_rate_limit_overrides.clone(),
        )),
        call_log: Mutex::new(call_log::CallLog::default()),
        config,
        metadata_tokens: Mutex::new(vec![]),
    });
    let ticker = tokio::spawn(tick_forever(shared.clone()));
    let app = Router::new()
        .merge(control::routes())
        .merge(metadata::routes())
        .fallback(api)
        .with_state(shared);
    let result = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await;
    ticker.abort();
    tracing::info!("emulator stopped");
    Ok(result?)
}
