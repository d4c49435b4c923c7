//! Wiring of the DaemonSet upgrade controller (observe -> plan -> apply).
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::metrics::Metrics;
use crate::runtime::Shutdown;

pub async fn run(
    _client: kube::Client,
    _metrics: Metrics,
    _concurrency: u16,
    ready: Arc<AtomicBool>,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    ready.store(true, Ordering::SeqCst);
    shutdown.requested().await;
    Ok(())
}
