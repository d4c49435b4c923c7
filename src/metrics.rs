//! Prometheus metrics, one registry per process, served on /metrics.
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;

/// The process-wide registry. Controllers register their own families at start.
#[derive(Clone, Default)]
pub struct Metrics {
    registry: Arc<Mutex<Registry>>,
    /// Families every controller shares (one value per type), registered once.
    shared: Arc<Mutex<HashMap<TypeId, Box<dyn Any + Send>>>>,
}

impl Metrics {
    pub fn with_registry<R>(&self, f: impl FnOnce(&mut Registry) -> R) -> R {
        f(&mut self.registry.lock().expect("metrics registry poisoned"))
    }

    /// The families of type `T` that several controllers share: registered by the first
    /// caller, cloned for the others (a name registered twice would be served twice).
    pub fn shared<T: Clone + Send + 'static>(
        &self,
        register: impl FnOnce(&mut Registry) -> T,
    ) -> T {
        let mut shared = self.shared.lock().expect("metrics registry poisoned");
        if let Some(families) = shared.get(&TypeId::of::<T>()) {
            return families
                .downcast_ref::<T>()
                .expect("keyed by its own type")
                .clone();
        }
        let families = self.with_registry(register);
        shared.insert(TypeId::of::<T>(), Box::new(families.clone()));
        families
    }

    /// The OpenMetrics text exposition of everything registered.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().expect("metrics registry poisoned");
        encode(&mut out, &registry).expect("writing to a String cannot fail");
        out
    }
}
