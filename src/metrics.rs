//! Prometheus metrics, one registry per process, served on /metrics.
use std::sync::Arc;

use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;

/// The process-wide registry. Controllers register their own families at start.
#[derive(Clone, Default)]
pub struct Metrics {
    registry: Arc<std::sync::Mutex<Registry>>,
}

impl Metrics {
    pub fn with_registry<R>(&self, f: impl FnOnce(&mut Registry) -> R) -> R {
        f(&mut self.registry.lock().expect("metrics registry poisoned"))
    }

    /// The OpenMetrics text exposition of everything registered.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().expect("metrics registry poisoned");
        encode(&mut out, &registry).expect("writing to a String cannot fail");
        out
    }
}
