//! The injection webhook's metrics: every admission it answered, by result, and the
//! pods that lack a gate it would have given them. Pods created while no replica
//! answered are not in the first (the API server let them through without gates:
//! `failurePolicy: Ignore`) but are in the second.
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::metrics::Metrics;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// `injected`, `nothing_to_add`, `namespace_not_enabled`, `pod_opted_out`,
    /// `protected_namespace`, `not_a_pod_creation` or `malformed`.
    pub result: String,
}

/// Every result label, described from the start so a dashboard finds each at 0.
pub const RESULTS: &[&str] = &[
    "injected",
    "nothing_to_add",
    "namespace_not_enabled",
    "pod_opted_out",
    "protected_namespace",
    "not_a_pod_creation",
    "malformed",
];

#[derive(Clone)]
pub struct InjectionMetrics {
    pub admissions: Family<ResultLabels, Counter>,
    /// Live pods lacking a gate the webhook would give them (`missing`).
    pub missing_pods: Gauge,
}

impl InjectionMetrics {
    pub fn register(metrics: &Metrics) -> Self {
        let m = InjectionMetrics {
            admissions: Family::default(),
            missing_pods: Gauge::default(),
        };
        for result in RESULTS {
            let _ = m.admissions.get_or_create(&ResultLabels {
                result: (*result).into(),
            });
        }
        metrics.with_registry(|r| {
            let mut r = r.prefixed("rollgate_gate");
            r.register(
                "injections",
                "Pod admissions the readiness-gate injection webhook answered, by result",
                m.admissions.clone(),
            );
            r.register(
                "injection_missing_pods",
                "Live pods in opted-in namespaces that a managed Service selects but that lack its gate (created while no replica answered, or before the Service or the label)",
                m.missing_pods.clone(),
            );
        });
        m
    }

    pub fn count(&self, result: &str) {
        self.admissions
            .get_or_create(&ResultLabels {
                result: result.into(),
            })
            .inc();
    }
}
