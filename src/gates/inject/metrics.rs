//! The injection webhook's metric: every admission it answered, by result. Pods created
//! while no replica answered are not in it (the API server let them through without
//! gates: `failurePolicy: Ignore`); the API server's own
//! `apiserver_admission_webhook_fail_open_count` counts those calls.
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

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
}

impl InjectionMetrics {
    pub fn register(metrics: &Metrics) -> Self {
        let m = InjectionMetrics {
            admissions: Family::default(),
        };
        for result in RESULTS {
            let _ = m.admissions.get_or_create(&ResultLabels {
                result: (*result).into(),
            });
        }
        metrics.with_registry(|r| {
            r.prefixed("rollgate_gate").register(
                "injections",
                "Pod admissions the readiness-gate injection webhook answered, by result",
                m.admissions.clone(),
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
