//! Metrics of the DaemonSet upgrade controller.
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};

use crate::metrics::Metrics;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DaemonSetLabels {
    pub namespace: String,
    pub daemonset: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeletionLabels {
    pub namespace: String,
    pub daemonset: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub kind: String,
}

#[derive(Clone)]
pub struct DaemonSetMetrics {
    pub pods_updated: Family<DaemonSetLabels, Gauge>,
    pub pods_pending: Family<DaemonSetLabels, Gauge>,
    pub nodes_skipped_not_ready: Family<DaemonSetLabels, Gauge>,
    pub pods_deleted: Family<DeletionLabels, Counter>,
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    pub reconcile_duration: Histogram,
}

impl DaemonSetMetrics {
    pub fn register(metrics: &Metrics) -> Self {
        let m = DaemonSetMetrics {
            pods_updated: Family::default(),
            pods_pending: Family::default(),
            nodes_skipped_not_ready: Family::default(),
            pods_deleted: Family::default(),
            reconcile_errors: Family::default(),
            // 1 ms .. ~16 s
            reconcile_duration: Histogram::new(exponential_buckets(0.001, 2.0, 15)),
        };
        metrics.with_registry(|r| {
            let r = r.sub_registry_with_prefix("rollgate_daemonset");
            r.register(
                "pods_updated",
                "Nodes whose pod runs the current revision",
                m.pods_updated.clone(),
            );
            r.register(
                "pods_pending",
                "Pods still on an old revision (Ready and NotReady nodes)",
                m.pods_pending.clone(),
            );
            r.register(
                "nodes_skipped_not_ready",
                "NotReady or missing nodes whose pods wait for the node to come back",
                m.nodes_skipped_not_ready.clone(),
            );
            r.register(
                "pods_deleted",
                "Pods deleted for an upgrade",
                m.pods_deleted.clone(),
            );
            r.register(
                "reconcile_errors",
                "Failed reconciles by kind",
                m.reconcile_errors.clone(),
            );
            r.register(
                "reconcile_duration_seconds",
                "Time one DaemonSet reconcile takes",
                m.reconcile_duration.clone(),
            );
        });
        m
    }
}
