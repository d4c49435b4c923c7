//! Metrics of the readiness-gate controller (`rollgate_gate_*`), the cloud-call
//! scheduler's queue among them.
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use alibaba_lb::ActionCount;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};

use super::model::{GatePlan, GroupState};
use super::poller::{Grant, Priority, QueueState};
use crate::metrics::Metrics;
use crate::names::GateReason;
use crate::watch::runner::ErrorCounter;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServiceLabels {
    pub namespace: String,
    pub service: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub namespace: String,
    pub service: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FlipLabels {
    pub namespace: String,
    pub service: String,
    /// `containers_ready` or `load_balancer_healthy`: where the latency is counted from.
    pub since: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BackendLabels {
    pub namespace: String,
    pub service: String,
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PriorityLabels {
    /// `pending`, `draining` or `settled` (`poller::Priority`).
    pub priority: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub action: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiActionLabels {
    /// `clb`, `nlb`, `ecs` or `vpc`.
    pub api: String,
    /// The API action, e.g. `DescribeHealthStatus`.
    pub action: String,
}

const BACKEND_STATES: &[&str] = &["healthy", "pending", "unhealthy", "draining", "unchecked"];

fn flip_histogram() -> Histogram {
    // 50 ms .. ~100 s
    Histogram::new(exponential_buckets(0.05, 2.0, 12))
}

#[derive(Clone)]
pub struct GateMetrics {
    pub flip_latency: Family<FlipLabels, Histogram, fn() -> Histogram>,
    pub cloud_calls: Family<CallLabels, Counter>,
    pub backends: Family<BackendLabels, Gauge>,
    pub gates_pending: Family<ServiceLabels, Gauge>,
    /// `gates_pending` by the reason on each gate (a dashboard's "pending by reason").
    pub pending_by_reason: Family<ReasonLabels, Gauge>,
    pub reconcile_errors: ErrorCounter,
    /// Gate condition writes that failed after their reconcile had ended (they are sent
    /// without waiting: `conditions::send_conditions`); each brings a look forward.
    pub condition_write_errors: Counter,
    /// Gates that timed out (`rollgate.io/readiness-gate-timeout`) and turned True
    /// without a healthy backend: each is a pod in rotation the load balancer may not
    /// serve, so an alert fires on any.
    pub gate_timeouts: Family<ServiceLabels, Counter>,
    /// Looks due and not granted yet, by priority (the cloud-call scheduler's queue).
    pub scheduler_waiting: Family<PriorityLabels, Gauge>,
    /// How long the Service waiting longest for a look has been due.
    pub scheduler_oldest_wait: Gauge<f64, AtomicU64>,
    /// Reconciles events asked for that have not started (settled looks wait on them).
    pub scheduler_queued_reconciles: Gauge,
    /// Cloud calls by the priority of the Service they were for: granted looks, and
    /// the writes and reads reconciles made outside a grant.
    pub scheduler_calls: Family<PriorityLabels, Counter>,
    /// API requests per action, each retry included (the clients' own counts).
    pub api_requests: Family<ApiActionLabels, Counter>,
    /// Throttling answers per action, retried ones included.
    pub api_throttled: Family<ApiActionLabels, Counter>,
    /// The clients' counts as last read, so each read adds only what is new.
    api_seen: Arc<Mutex<HashMap<ApiActionLabels, ActionCount>>>,
}

impl GateMetrics {
    pub fn register(metrics: &Metrics) -> Self {
        let m = GateMetrics {
            flip_latency: Family::new_with_constructor(flip_histogram),
            cloud_calls: Family::default(),
            backends: Family::default(),
            gates_pending: Family::default(),
            pending_by_reason: Family::default(),
            reconcile_errors: Family::default(),
            condition_write_errors: Counter::default(),
            gate_timeouts: Family::default(),
            scheduler_waiting: Family::default(),
            scheduler_oldest_wait: Gauge::default(),
            scheduler_queued_reconciles: Gauge::default(),
            scheduler_calls: Family::default(),
            api_requests: Family::default(),
            api_throttled: Family::default(),
            api_seen: Arc::default(),
        };
        metrics.with_registry(|r| {
            let mut r = r.prefixed("rollgate_gate");
            r.register(
                "flip_latency_seconds",
                "Time to gate True, from the containers ready or from the load balancer first seen healthy",
                m.flip_latency.clone(),
            );
            r.register(
                "cloud_api_calls",
                "Cloud load-balancer calls by action and result",
                m.cloud_calls.clone(),
            );
            r.register(
                "backends",
                "Backends rollgate owns, by state",
                m.backends.clone(),
            );
            r.register(
                "pending",
                "Gates of live pods that are not True",
                m.gates_pending.clone(),
            );
            r.register(
                "pending_by_reason",
                "Gates of live pods that are not True, by the reason on the gate",
                m.pending_by_reason.clone(),
            );
            r.register(
                "reconcile_errors",
                "Failed reconciles by kind",
                m.reconcile_errors.clone(),
            );
            r.register(
                "condition_write_errors",
                "Gate condition writes that failed (sent without waiting for them; the Service is looked at again soon to write them again)",
                m.condition_write_errors.clone(),
            );
            r.register(
                "timeouts",
                "Gates that timed out (rollgate.io/readiness-gate-timeout) and turned True without a healthy backend",
                m.gate_timeouts.clone(),
            );
            r.register(
                "scheduler_waiting",
                "Services due for a cloud look and not granted one yet, by priority",
                m.scheduler_waiting.clone(),
            );
            r.register(
                "scheduler_oldest_wait_seconds",
                "How long the Service waiting longest for a cloud look has been due",
                m.scheduler_oldest_wait.clone(),
            );
            r.register(
                "scheduler_queued_reconciles",
                "Reconciles events asked for that have not started; while any is queued, settled looks keep to their reserved quarter of the budget",
                m.scheduler_queued_reconciles.clone(),
            );
            r.register(
                "cloud_api_requests",
                "Cloud API requests by API (clb, nlb, ecs, vpc) and action, each retry included",
                m.api_requests.clone(),
            );
            r.register(
                "cloud_api_throttled",
                "Throttling answers by API and action, retried ones included: which action's quota is being hit",
                m.api_throttled.clone(),
            );
            r.register(
                "scheduler_calls",
                "Cloud calls by the priority of the Service they served",
                m.scheduler_calls.clone(),
            );
        });
        m
    }

    /// A client's per-action counts (`api`: `clb`, `nlb`, `ecs`, `vpc`), as read now:
    /// the counters grow by what is new since the last read.
    pub fn api_actions(&self, api: &str, counts: &[ActionCount]) {
        let mut seen = self.api_seen.lock().expect("api counts lock");
        for count in counts {
            let labels = ApiActionLabels {
                api: api.into(),
                action: count.action.clone(),
            };
            let before = seen
                .insert(labels.clone(), count.clone())
                .unwrap_or_default();
            let new_calls = count.calls.saturating_sub(before.calls);
            let new_throttled = count.throttled.saturating_sub(before.throttled);
            if new_calls > 0 {
                self.api_requests.get_or_create(&labels).inc_by(new_calls);
            }
            if new_throttled > 0 {
                self.api_throttled
                    .get_or_create(&labels)
                    .inc_by(new_throttled);
            }
        }
    }

    pub fn cloud_call(&self, action: &str, result: &str) {
        self.cloud_calls
            .get_or_create(&CallLabels {
                action: action.into(),
                result: result.into(),
            })
            .inc();
    }

    /// The scheduler's queue after a tick, and the looks it granted.
    pub fn scheduler_state(&self, queue: &QueueState, grants: &[Grant]) {
        for (priority, waiting) in Priority::ALL.iter().zip(queue.waiting) {
            self.scheduler_waiting
                .get_or_create(&PriorityLabels {
                    priority: priority.label().into(),
                })
                .set(waiting as i64);
        }
        self.scheduler_oldest_wait
            .set(queue.oldest_wait.as_secs_f64());
        self.scheduler_queued_reconciles
            .set(queue.queued_reconciles as i64);
        for grant in grants {
            self.calls_for(grant.priority, grant.calls as u64);
        }
    }

    /// Counts `calls` made for a Service of this priority.
    pub fn calls_for(&self, priority: Priority, calls: u64) {
        if calls > 0 {
            self.scheduler_calls
                .get_or_create(&PriorityLabels {
                    priority: priority.label().into(),
                })
                .inc_by(calls);
        }
    }

    pub fn flip(&self, namespace: &str, service: &str, since: &str, seconds: f64) {
        self.flip_latency
            .get_or_create(&FlipLabels {
                namespace: namespace.into(),
                service: service.into(),
                since: since.into(),
            })
            .observe(seconds.max(0.0));
    }

    /// A gate of the Service timed out and turned True.
    pub fn timed_out(&self, namespace: &str, service: &str) {
        self.gate_timeouts
            .get_or_create(&ServiceLabels {
                namespace: namespace.into(),
                service: service.into(),
            })
            .inc();
    }

    /// Publishes the Service's backends by state and its pending gates.
    pub fn set_state(
        &self,
        namespace: &str,
        service: &str,
        owner_of: impl Fn(u16) -> String,
        groups: &[GroupState],
        plan: &GatePlan,
    ) {
        use alibaba_lb::HealthState::*;
        let mut counts = [0i64; 5];
        for group in groups {
            let owner = owner_of(group.service_port);
            for b in group.backends.iter().filter(|b| b.description == owner) {
                let i = if b.weight == 0 {
                    3
                } else {
                    match group.health.get(&b.key) {
                        Some(Healthy) => 0,
                        Some(Pending) | None => 1,
                        Some(Unhealthy { .. }) | Some(Unused) => 2,
                        Some(NotChecked) => 4,
                    }
                };
                counts[i] += 1;
            }
        }
        for (state, count) in BACKEND_STATES.iter().zip(counts) {
            self.backends
                .get_or_create(&BackendLabels {
                    namespace: namespace.into(),
                    service: service.into(),
                    state: (*state).into(),
                })
                .set(count);
        }
        self.gates_pending
            .get_or_create(&ServiceLabels {
                namespace: namespace.into(),
                service: service.into(),
            })
            .set(plan.pending_gates as i64);
        self.set_pending_reasons(namespace, service, &plan.pending_reasons);
    }

    /// One series per reason that has pending gates; a reason none has any more goes.
    fn set_pending_reasons(
        &self,
        namespace: &str,
        service: &str,
        reasons: &std::collections::BTreeMap<String, usize>,
    ) {
        let labels = |reason: &str| ReasonLabels {
            namespace: namespace.into(),
            service: service.into(),
            reason: reason.into(),
        };
        let known = GateReason::ALL.iter().map(|r| r.as_str()).chain(["none"]);
        for reason in known.chain(reasons.keys().map(String::as_str)) {
            match reasons.get(reason) {
                Some(&count) => {
                    self.pending_by_reason
                        .get_or_create(&labels(reason))
                        .set(count as i64);
                }
                None => {
                    self.pending_by_reason.remove(&labels(reason));
                }
            }
        }
    }

    /// Drops the series of a Service rollgate no longer manages.
    pub fn forget(&self, namespace: &str, service: &str) {
        for state in BACKEND_STATES {
            self.backends.remove(&BackendLabels {
                namespace: namespace.into(),
                service: service.into(),
                state: (*state).into(),
            });
        }
        self.gates_pending.remove(&ServiceLabels {
            namespace: namespace.into(),
            service: service.into(),
        });
        self.set_pending_reasons(namespace, service, &Default::default());
        for since in ["containers_ready", "load_balancer_healthy"] {
            self.flip_latency.remove(&FlipLabels {
                namespace: namespace.into(),
                service: service.into(),
                since: since.into(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_gates_by_reason_follow_the_plan_and_leave_with_the_service() {
        let metrics = Metrics::default();
        let m = GateMetrics::register(&metrics);
        let by = |pairs: &[(&str, usize)]| GatePlan {
            pending_gates: pairs.iter().map(|(_, n)| n).sum(),
            pending_reasons: pairs.iter().map(|(r, n)| (r.to_string(), *n)).collect(),
            ..Default::default()
        };
        let series = |reason: &str| {
            format!("rollgate_gate_pending_by_reason{{namespace=\"shop\",service=\"web\",reason=\"{reason}\"}}")
        };
        m.set_state(
            "shop",
            "web",
            |_| String::new(),
            &[],
            &by(&[("BackendUnhealthy", 2), ("none", 1)]),
        );
        let text = metrics.render();
        assert!(
            text.contains(&format!("{} 2", series("BackendUnhealthy"))),
            "{text}"
        );
        assert!(text.contains(&format!("{} 1", series("none"))), "{text}");

        m.set_state(
            "shop",
            "web",
            |_| String::new(),
            &[],
            &by(&[("LoadBalancerNotReady", 3)]),
        );
        let text = metrics.render();
        assert!(
            text.contains(&format!("{} 3", series("LoadBalancerNotReady"))),
            "{text}"
        );
        assert!(
            !text.contains(&series("BackendUnhealthy")),
            "a reason gone stays: {text}"
        );
        assert!(!text.contains(&series("none")), "{text}");

        m.forget("shop", "web");
        assert!(!metrics.render().contains("pending_by_reason{"));
    }

    #[test]
    fn throttling_is_counted_by_action_once_per_answer() {
        let metrics = Metrics::default();
        let m = GateMetrics::register(&metrics);
        let count = |action: &str, calls, throttled| ActionCount {
            action: action.into(),
            calls,
            throttled,
        };
        m.api_actions("nlb", &[count("GetListenerHealthStatus", 10, 2)]);
        // Read again with more: only what is new is added.
        m.api_actions(
            "nlb",
            &[
                count("GetListenerHealthStatus", 15, 3),
                count("ListListeners", 4, 0),
            ],
        );
        let text = metrics.render();
        for line in [
            "rollgate_gate_cloud_api_throttled_total{api=\"nlb\",action=\"GetListenerHealthStatus\"} 3",
            "rollgate_gate_cloud_api_requests_total{api=\"nlb\",action=\"GetListenerHealthStatus\"} 15",
            "rollgate_gate_cloud_api_requests_total{api=\"nlb\",action=\"ListListeners\"} 4",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        assert!(
            !text.contains("cloud_api_throttled_total{api=\"nlb\",action=\"ListListeners\"}"),
            "{text}"
        );
    }
}
