//! The one way a controller runs here: wait for the shared caches, reconcile only while
//! this replica leads (and everything when it becomes the leader), with a bounded
//! concurrency, count runs, failures (by kind) and duration of every reconcile under
//! one set of metric names labelled by controller ([`RunMetrics`]), log failures, retry
//! them after a pause, and stop gracefully (in-flight reconciles finish) when shutdown
//! is requested.
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryFuture, TryFutureExt};
use kube::runtime::controller::{Action, Config as ControllerConfig};
use kube::runtime::Controller;
use kube::{Resource, ResourceExt};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::runtime::Shutdown;

/// A failed reconcile is retried after this long.
const RETRY_AFTER_ERROR: Duration = Duration::from_secs(5);

/// Reconcile errors name their kind, the label of the errors counter.
pub trait ReconcileError: std::error::Error + Send + Sync + 'static {
    fn metric_label(&self) -> &'static str;
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub kind: String,
}

/// `<controller>_reconcile_errors_total{kind}`.
pub type ErrorCounter = Family<ErrorLabels, Counter>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RunLabels {
    pub controller: String,
    /// `success` or `error`.
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RunErrorLabels {
    pub controller: String,
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: String,
}

fn duration_histogram() -> Histogram {
    // 1 ms .. ~16 s, as `rollgate_daemonset_reconcile_duration_seconds`.
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

/// Every controller's reconciles, under the same names, labelled by controller:
/// `rollgate_reconciles_total{controller,result}`,
/// `rollgate_reconcile_errors_total{controller,kind}` and
/// `rollgate_reconcile_duration_seconds{controller}`.
#[derive(Clone)]
pub struct RunMetrics {
    pub runs: Family<RunLabels, Counter>,
    pub errors: Family<RunErrorLabels, Counter>,
    pub duration: Family<ControllerLabels, Histogram, fn() -> Histogram>,
}

impl RunMetrics {
    /// The process's families (registered by the first controller that asks).
    pub fn of(metrics: &Metrics) -> Self {
        metrics.shared(|registry| {
            let m = RunMetrics {
                runs: Family::default(),
                errors: Family::default(),
                duration: Family::new_with_constructor(duration_histogram),
            };
            let mut r = registry.prefixed("rollgate");
            r.register(
                "reconciles",
                "Reconciles that ran, by controller and result",
                m.runs.clone(),
            );
            r.register(
                "reconcile_errors",
                "Failed reconciles, by controller and kind",
                m.errors.clone(),
            );
            r.register(
                "reconcile_duration_seconds",
                "Time one reconcile takes, by controller",
                m.duration.clone(),
            );
            m
        })
    }

    fn finished(&self, controller: &str, ok: bool) {
        self.runs
            .get_or_create(&RunLabels {
                controller: controller.into(),
                result: if ok { "success" } else { "error" }.into(),
            })
            .inc();
    }
}

/// Records a reconcile's duration when dropped, so a reconcile cut short (the lease
/// lost mid-flight) is timed too.
struct Timer {
    started: Instant,
    histograms: Vec<Histogram>,
}

impl Drop for Timer {
    fn drop(&mut self) {
        let seconds = self.started.elapsed().as_secs_f64();
        for histogram in &self.histograms {
            histogram.observe(seconds);
        }
    }
}

/// How one controller is run.
pub struct Run {
    pub name: &'static str,
    pub concurrency: u16,
    /// Reconciles wait until this flips to true (every shared cache listed once):
    /// planning on half-filled caches could count missing pods as unavailable.
    pub synced: watch::Receiver<bool>,
    /// The controller's own errors counter (`rollgate_<controller>_reconcile_errors`): an
    /// alias of the shared family, incremented beside it here, kept for the alerts users
    /// wrote before the shared one (docs/configuration.md says so).
    pub errors: ErrorCounter,
    /// The metrics every controller shares ([`RunMetrics::of`]).
    pub metrics: RunMetrics,
    /// The controller's own duration histogram, kept for the names users already read
    /// (`rollgate_daemonset_reconcile_duration_seconds`); observed with the shared one.
    pub own_duration: Option<Histogram>,
    /// Only the leader reconciles; a standby returns at once and writes nothing.
    pub leadership: Leadership,
    pub shutdown: Shutdown,
}

impl Run {
    /// Runs `controller` until shutdown, then lets in-flight reconciles finish.
    pub async fn drive<K, Ctx, F, Fut>(
        self,
        controller: Controller<K>,
        mut reconcile: F,
        ctx: Arc<Ctx>,
    ) where
        K: Clone + Resource + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Debug + Unpin + Hash + Eq + Clone,
        Ctx: Send + Sync + 'static,
        F: FnMut(Arc<K>, Arc<Ctx>) -> Fut,
        Fut: TryFuture<Ok = Action> + Send + 'static,
        Fut::Error: ReconcileError,
    {
        let Run {
            name,
            concurrency,
            synced,
            errors,
            metrics,
            own_duration,
            leadership,
            shutdown,
        } = self;
        let gained = leadership.gained();
        let run_metrics = metrics.clone();
        let shared_duration = metrics
            .duration
            .get_or_create(&ControllerLabels {
                controller: name.into(),
            })
            .clone();
        let durations: Vec<Histogram> = std::iter::once(shared_duration)
            .chain(own_duration)
            .collect();
        let gated = move |obj: Arc<K>, ctx: Arc<Ctx>| {
            let mut synced = synced.clone();
            let leadership = leadership.clone();
            let metrics = run_metrics.clone();
            let histograms = durations.clone();
            let work = reconcile(obj, ctx).into_future();
            async move {
                let _ = synced.wait_for(|s| *s).await;
                if !leadership.is_leader() {
                    // Becoming the leader reconciles everything again (below).
                    return Ok(Action::await_change());
                }
                let _timer = Timer {
                    started: Instant::now(),
                    histograms,
                };
                let result = work.await;
                metrics.finished(name, result.is_ok());
                result
            }
        };
        let error_policy = move |obj: Arc<K>, error: &Fut::Error, _ctx: Arc<Ctx>| {
            errors
                .get_or_create(&ErrorLabels {
                    kind: error.metric_label().into(),
                })
                .inc();
            metrics
                .errors
                .get_or_create(&RunErrorLabels {
                    controller: name.into(),
                    kind: error.metric_label().into(),
                })
                .inc();
            tracing::warn!(controller = name, object = %obj.name_any(), namespace = ?obj.namespace(), %error, "reconcile failed, retrying");
            Action::requeue(RETRY_AFTER_ERROR)
        };
        controller
            .with_config(ControllerConfig::default().concurrency(concurrency))
            .reconcile_all_on(gained)
            .graceful_shutdown_on(shutdown.requested())
            .run(gated, error_policy, ctx)
            .for_each(|result| async move {
                if let Err(error) = result {
                    tracing::debug!(controller = name, %error, "reconcile trigger failed");
                }
            })
            .await;
        tracing::info!(controller = name, "controller stopped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_controller_counts_under_the_same_names_registered_once() {
        let metrics = Metrics::default();
        let (first, second) = (RunMetrics::of(&metrics), RunMetrics::of(&metrics));
        first.finished("daemonset-upgrade", true);
        second.finished("readiness-gates", false);
        let own = Histogram::new(exponential_buckets(0.001, 2.0, 15));
        drop(Timer {
            started: Instant::now(),
            histograms: vec![
                second
                    .duration
                    .get_or_create(&ControllerLabels {
                        controller: "image-pull".into(),
                    })
                    .clone(),
                own.clone(),
            ],
        });
        let text = metrics.render();
        for line in [
            "rollgate_reconciles_total{controller=\"daemonset-upgrade\",result=\"success\"} 1",
            "rollgate_reconciles_total{controller=\"readiness-gates\",result=\"error\"} 1",
            "rollgate_reconcile_duration_seconds_count{controller=\"image-pull\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        assert_eq!(
            text.matches("# TYPE rollgate_reconciles counter").count(),
            1,
            "registered once:\n{text}"
        );
        let mut own_text = String::new();
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("own", "", own);
        prometheus_client::encoding::text::encode(&mut own_text, &registry).unwrap();
        assert!(own_text.contains("own_count 1"), "{own_text}");
    }
}
