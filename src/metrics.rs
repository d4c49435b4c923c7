//! Prometheus metrics, one registry per process, served on /metrics.
//!
//! Every family is described on /metrics from the start, samples or not: a labelled
//! family with no child yet prints nothing in prometheus_client, so a dashboard or an
//! alert naming it could not be checked against the running process, and a user could
//! not find it before it first counts something.
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::text::encode;
use prometheus_client::registry::{Metric, Registry};

/// The process-wide registry. Controllers register their own families at start.
#[derive(Clone, Default)]
pub struct Metrics {
    registry: Arc<Mutex<Described>>,
    /// Families every controller shares (one value per type), registered once.
    shared: Arc<Mutex<HashMap<TypeId, Box<dyn Any + Send>>>>,
}

/// The registry and what was registered in it, by full name.
#[derive(Default)]
struct Described {
    registry: Registry,
    families: Vec<Family>,
}

/// One registered family: enough to describe it while it has no sample.
struct Family {
    name: String,
    help: String,
    kind: String,
}

/// What controllers register their families through: the registry under a name prefix.
pub struct Registrar<'a> {
    described: &'a mut Described,
    prefix: String,
}

impl Registrar<'_> {
    /// The same registry, with `prefix_` before every name registered through it.
    pub fn prefixed(&mut self, prefix: &str) -> Registrar<'_> {
        Registrar {
            prefix: self.full_name(prefix),
            described: &mut *self.described,
        }
    }

    pub fn register(&mut self, name: &str, help: &str, metric: impl Metric) {
        let name = self.full_name(name);
        self.described.families.push(Family {
            name: name.clone(),
            help: help.to_string(),
            kind: metric.metric_type().as_str().to_string(),
        });
        self.described.registry.register(name, help, metric);
    }

    fn full_name(&self, name: &str) -> String {
        if self.prefix.is_empty() {
            name.to_string()
        } else {
            format!("{}_{name}", self.prefix)
        }
    }
}

impl Metrics {
    pub fn with_registry<R>(&self, f: impl FnOnce(&mut Registrar) -> R) -> R {
        let mut described = self.registry.lock().expect("metrics registry poisoned");
        f(&mut Registrar {
            described: &mut described,
            prefix: String::new(),
        })
    }

    /// The families of type `T` that several controllers share: registered by the first
    /// caller, cloned for the others (a name registered twice would be served twice).
    pub fn shared<T: Clone + Send + 'static>(
        &self,
        register: impl FnOnce(&mut Registrar) -> T,
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

    /// The OpenMetrics text exposition of everything registered; a family with no
    /// sample yet is described by its HELP and TYPE lines alone (OpenMetrics allows a
    /// family without metrics).
    pub fn render(&self) -> String {
        let mut out = String::new();
        let described = self.registry.lock().expect("metrics registry poisoned");
        encode(&mut out, &described.registry).expect("writing to a String cannot fail");
        let eof = out.rfind("# EOF").unwrap_or(out.len());
        let mut silent = String::new();
        for family in &described.families {
            if !out.contains(&format!("# TYPE {} ", family.name)) {
                let period = if family.help.ends_with('.') { "" } else { "." };
                let _ = writeln!(silent, "# HELP {} {}{period}", family.name, family.help);
                let _ = writeln!(silent, "# TYPE {} {}", family.name, family.kind);
            }
        }
        out.insert_str(eof, &silent);
        out
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::metrics::gauge::Gauge;

    use super::*;

    #[test]
    fn families_without_samples_are_described_before_the_end_marker() {
        let metrics = Metrics::default();
        let errors: Family<Vec<(String, String)>, Counter> = Family::default();
        let leader = Gauge::<i64>::default();
        metrics.with_registry(|r| {
            r.register("rollgate_leader", "Leader", leader.clone());
            let mut r = r.prefixed("rollgate_x");
            r.register("errors", "Errors by kind", errors.clone());
        });
        let text = metrics.render();
        assert!(
            text.contains("# TYPE rollgate_leader gauge\nrollgate_leader 0\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "# HELP rollgate_x_errors Errors by kind.\n# TYPE rollgate_x_errors counter\n# EOF"
            ),
            "{text}"
        );
        assert_eq!(text.matches("# TYPE ").count(), 2, "{text}");

        // Once it counts, it is described once, by the encoder, with its sample.
        errors
            .get_or_create(&vec![("kind".into(), "api".into())])
            .inc();
        let text = metrics.render();
        assert_eq!(
            text.matches("# TYPE rollgate_x_errors counter").count(),
            1,
            "{text}"
        );
        assert!(
            text.contains("rollgate_x_errors_total{kind=\"api\"} 1"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
