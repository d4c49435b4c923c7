//! Metrics of the DaemonSet upgrade controller.
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};

use super::rolling_plan::{Blocker, Progress};
use crate::metrics::Metrics;
use crate::watch::runner::ErrorCounter;

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

#[derive(Clone)]
pub struct DaemonSetMetrics {
    pub pods_updated: Family<DaemonSetLabels, Gauge>,
    pub pods_pending: Family<DaemonSetLabels, Gauge>,
    pub nodes_skipped_not_ready: Family<DaemonSetLabels, Gauge>,
    pub deletions_deferred_by_cap: Family<DaemonSetLabels, Gauge>,
    pub native_controller_stalled: Family<DaemonSetLabels, Gauge>,
    /// 1 while an operator holds the rollout (`rollgate.io/paused`): alerts on a rollout
    /// that makes no progress leave a deliberate hold alone.
    pub rollout_paused: Family<DaemonSetLabels, Gauge>,
    /// 1 while the current revision is halted for its failures (`failure`).
    pub rollout_halted: Family<DaemonSetLabels, Gauge>,
    /// Failed pods of the current revision on Ready nodes (`failure`).
    pub pods_failed: Family<DaemonSetLabels, Gauge>,
    /// The wave a rollout is in (`rollgate.io/waves`), 1-based; 0 without waves.
    pub wave: Family<DaemonSetLabels, Gauge>,
    /// Templates put back to an earlier revision (`rollgate.io/on-failure: rollback`).
    pub rollbacks: Family<DaemonSetLabels, Counter>,
    /// The budget and what uses it, so a dashboard can show the budget in use.
    pub nodes_unavailable: Family<DaemonSetLabels, Gauge>,
    /// Nodes kept on the old revision on purpose (partition, node selector): pending,
    /// but not a stall.
    pub nodes_held_back: Family<DaemonSetLabels, Gauge>,
    pub max_unavailable: Family<DaemonSetLabels, Gauge>,
    pub pods_deleted: Family<DeletionLabels, Counter>,
    pub reconcile_errors: ErrorCounter,
    pub reconcile_duration: Histogram,
    pub daemonsets_with_other_updater: Gauge,
}

impl DaemonSetMetrics {
    pub fn register(metrics: &Metrics) -> Self {
        let m = DaemonSetMetrics {
            pods_updated: Family::default(),
            pods_pending: Family::default(),
            nodes_skipped_not_ready: Family::default(),
            deletions_deferred_by_cap: Family::default(),
            native_controller_stalled: Family::default(),
            rollout_paused: Family::default(),
            rollout_halted: Family::default(),
            pods_failed: Family::default(),
            rollbacks: Family::default(),
            wave: Family::default(),
            nodes_unavailable: Family::default(),
            nodes_held_back: Family::default(),
            max_unavailable: Family::default(),
            pods_deleted: Family::default(),
            reconcile_errors: Family::default(),
            // 1 ms .. ~16 s
            reconcile_duration: Histogram::new(exponential_buckets(0.001, 2.0, 15)),
            daemonsets_with_other_updater: Gauge::default(),
        };
        metrics.with_registry(|r| {
            let mut r = r.prefixed("rollgate_daemonset");
            r.register(
                "other_updater_active",
                "DaemonSets another updater (yurt-manager's daemonpodupdater) acts on; rollgate deletes nothing there",
                m.daemonsets_with_other_updater.clone(),
            );
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
                "deletions_deferred_by_cap",
                "Deletions the budget allowed that the last plan left to the next one (--max-deletions-per-plan)",
                m.deletions_deferred_by_cap.clone(),
            );
            r.register(
                "native_controller_stalled",
                "1 while the rollout has waited on the native DaemonSet controller longer than --native-controller-stall-after",
                m.native_controller_stalled.clone(),
            );
            r.register(
                "rollout_paused",
                "1 while rollgate.io/paused holds the rollout's deletions, else 0",
                m.rollout_paused.clone(),
            );
            r.register(
                "rollout_halted",
                "1 while the current revision is halted: as many of its pods failed on Ready nodes as rollgate.io/failure-threshold allows, and no more pods are deleted for it; else 0",
                m.rollout_halted.clone(),
            );
            r.register(
                "pods_failed",
                "Pods of the current revision on Ready nodes that failed (a container the kubelet cannot start, restarts, or the progress deadline)",
                m.pods_failed.clone(),
            );
            r.register(
                "wave",
                "The wave the rollout is in (rollgate.io/waves), 1-based, the last once every wave is done; 0 without waves",
                m.wave.clone(),
            );
            r.register(
                "rollbacks",
                "Times rollgate put the template back to an earlier revision after the current one failed (rollgate.io/on-failure=rollback)",
                m.rollbacks.clone(),
            );
            r.register(
                "nodes_unavailable",
                "Ready nodes of the rollout counted against the max-unavailable budget",
                m.nodes_unavailable.clone(),
            );
            r.register(
                "nodes_held_back",
                "Nodes kept on the old revision by rollgate.io/partition or held back by rollgate.io/node-selector",
                m.nodes_held_back.clone(),
            );
            r.register(
                "max_unavailable",
                "The max-unavailable budget, resolved against the rollout's node count",
                m.max_unavailable.clone(),
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

    /// Publishes where a rollout stands. `pods_updated + pods_pending` is the node count
    /// of the rollout, and `pods_pending` reaches 0 exactly when it is complete.
    pub fn set_progress(&self, namespace: &str, name: &str, progress: &Progress) {
        let labels = DaemonSetLabels {
            namespace: namespace.into(),
            daemonset: name.into(),
        };
        self.pods_updated
            .get_or_create(&labels)
            .set(progress.updated as i64);
        self.pods_pending
            .get_or_create(&labels)
            .set(progress.total_nodes.saturating_sub(progress.updated) as i64);
        self.nodes_skipped_not_ready.get_or_create(&labels).set(
            (progress.not_ready_nodes_skipped.len() + progress.missing_nodes_skipped.len()) as i64,
        );
        self.deletions_deferred_by_cap
            .get_or_create(&labels)
            .set(progress.deferred_by_cap as i64);
        self.nodes_unavailable
            .get_or_create(&labels)
            .set(progress.unavailable as i64);
        self.max_unavailable
            .get_or_create(&labels)
            .set(progress.budget as i64);
        self.nodes_held_back
            .get_or_create(&labels)
            .set((progress.kept_by_partition.len() + progress.held_by_selector.len()) as i64);
        self.wave.get_or_create(&labels).set(
            progress
                .waves
                .as_ref()
                .map_or(0, |w| (w.current + 1).min(w.waves.len()) as i64),
        );
        self.rollout_paused
            .get_or_create(&labels)
            .set(i64::from(matches!(
                progress.blocked,
                Some(Blocker::Paused { .. })
            )));
    }

    /// Counts a rollback of the DaemonSet's template.
    pub fn count_rollback(&self, namespace: &str, name: &str) {
        let labels = DaemonSetLabels {
            namespace: namespace.into(),
            daemonset: name.into(),
        };
        self.rollbacks.get_or_create(&labels).inc();
    }

    /// Publishes the current revision's failed pods and whether they halt it.
    pub fn set_failures(&self, namespace: &str, name: &str, failed: usize, halted: bool) {
        let labels = DaemonSetLabels {
            namespace: namespace.into(),
            daemonset: name.into(),
        };
        self.pods_failed.get_or_create(&labels).set(failed as i64);
        self.rollout_halted
            .get_or_create(&labels)
            .set(i64::from(halted));
    }

    /// Publishes whether the DaemonSet's wait on the native controller is a stall.
    pub fn set_stalled(&self, namespace: &str, name: &str, stalled: bool) {
        let labels = DaemonSetLabels {
            namespace: namespace.into(),
            daemonset: name.into(),
        };
        self.native_controller_stalled
            .get_or_create(&labels)
            .set(i64::from(stalled));
    }

    /// Drops the series of a deleted DaemonSet.
    pub fn forget(&self, namespace: &str, name: &str) {
        let labels = DaemonSetLabels {
            namespace: namespace.into(),
            daemonset: name.into(),
        };
        self.pods_updated.remove(&labels);
        self.pods_pending.remove(&labels);
        self.nodes_skipped_not_ready.remove(&labels);
        self.deletions_deferred_by_cap.remove(&labels);
        self.native_controller_stalled.remove(&labels);
        self.rollout_paused.remove(&labels);
        self.rollout_halted.remove(&labels);
        self.pods_failed.remove(&labels);
        self.wave.remove(&labels);
        self.rollbacks.remove(&labels);
        self.nodes_unavailable.remove(&labels);
        self.max_unavailable.remove(&labels);
        self.nodes_held_back.remove(&labels);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_publishes_the_deletions_the_cap_held_back_and_the_holds() {
        let metrics = Metrics::default();
        let m = DaemonSetMetrics::register(&metrics);
        let progress = Progress {
            total_nodes: 10,
            updated: 4,
            deferred_by_cap: 3,
            blocked: Some(Blocker::Paused { held: 1 }),
            unavailable: 2,
            budget: 5,
            kept_by_partition: vec!["n3".into()],
            held_by_selector: vec!["n4".into(), "n5".into()],
            ..Default::default()
        };
        m.set_progress("edge", "agent", &progress);
        m.set_stalled("edge", "agent", true);
        let text = metrics.render();
        for line in [
            "rollgate_daemonset_deletions_deferred_by_cap{namespace=\"edge\",daemonset=\"agent\"} 3",
            "rollgate_daemonset_native_controller_stalled{namespace=\"edge\",daemonset=\"agent\"} 1",
            "rollgate_daemonset_pods_pending{namespace=\"edge\",daemonset=\"agent\"} 6",
            "rollgate_daemonset_rollout_paused{namespace=\"edge\",daemonset=\"agent\"} 1",
            "rollgate_daemonset_nodes_unavailable{namespace=\"edge\",daemonset=\"agent\"} 2",
            "rollgate_daemonset_max_unavailable{namespace=\"edge\",daemonset=\"agent\"} 5",
            "rollgate_daemonset_nodes_held_back{namespace=\"edge\",daemonset=\"agent\"} 3",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        m.forget("edge", "agent");
        assert!(!metrics.render().contains("daemonset=\"agent\""));
    }
}
