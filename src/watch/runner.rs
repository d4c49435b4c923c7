//! The one way a controller runs here: wait for the shared caches, reconcile only while
//! this replica leads (and everything when it becomes the leader), with a bounded
//! concurrency served first come, first served, count runs, failures (by kind) and
//! duration of every reconcile under one set of metric names labelled by controller
//! ([`RunMetrics`]), log failures, retry them after a pause, and stop gracefully
//! (in-flight reconciles finish) when shutdown is requested.
//!
//! **Why the concurrency is bounded here and not in kube-runtime.** kube-runtime's
//! runner, once its slots are full, moves every due reconcile into a hash set and
//! starts the first one the set's iteration finds. The order is the hash order, so
//! while the queue never empties (pods changing on many Services at once) an object
//! whose hash lies late waits until it does: with 100 Services settling, looks the
//! gates' scheduler granted waited up to 130 s for their reconcile to start, and one
//! object in a queue kept full is never served (the test below). Here kube-runtime
//! starts every due reconcile at once (it still never runs two of one object) and
//! each waits for one of `concurrency` permits of a fair semaphore, so they run in
//! the order they came.
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryFuture, TryFutureExt};
use kube::runtime::controller::{Action, Config as ControllerConfig};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::Controller;
use kube::{Resource, ResourceExt};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use serde::de::DeserializeOwned;
use tokio::sync::{watch, Notify, Semaphore, SemaphorePermit};

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
struct Timer<'a> {
    started: Instant,
    histograms: &'a [Histogram],
}

impl Drop for Timer<'_> {
    fn drop(&mut self) {
        let seconds = self.started.elapsed().as_secs_f64();
        for histogram in self.histograms {
            histogram.observe(seconds);
        }
    }
}

/// What every reconcile of one controller passes before it runs: the caches synced, a
/// permit (first come, first served), the lease; then the timer and the run's counts.
struct Admission<K, F>
where
    K: Resource + 'static,
    K::DynamicType: Hash + Eq,
{
    name: &'static str,
    synced: watch::Receiver<bool>,
    leadership: Leadership,
    permits: Semaphore,
    /// The lane ahead of the queue, and its own permits.
    ahead: Option<(Ahead, Semaphore)>,
    store: Store<K>,
    shutdown: Shutdown,
    metrics: RunMetrics,
    durations: Vec<Histogram>,
    reconcile: F,
}

impl<K, F> Admission<K, F>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Hash + Eq + Clone + Default,
{
    async fn reconcile<Ctx, Fut>(
        self: Arc<Self>,
        obj: Arc<K>,
        ctx: Arc<Ctx>,
    ) -> Result<Action, Fut::Error>
    where
        F: Fn(Arc<K>, Arc<Ctx>) -> Fut,
        Fut: TryFuture<Ok = Action>,
    {
        let _ = self.synced.clone().wait_for(|s| *s).await;
        let Some(_permit) = self.admit(&obj).await else {
            // Those still waiting are dropped on shutdown; those at work finish.
            return Ok(Action::await_change());
        };
        if !self.leadership.is_leader() {
            // Becoming the leader reconciles everything again (`reconcile_all_on`).
            return Ok(Action::await_change());
        }
        // The object as it is now, not as it was when it joined the queue; one gone
        // meanwhile is not reconciled (kube-runtime skips one gone before it starts).
        let Some(obj) = self.store.get(&ObjectRef::from_obj(&*obj)) else {
            return Ok(Action::await_change());
        };
        let _timer = Timer {
            started: Instant::now(),
            histograms: &self.durations,
        };
        // Boxed once admitted: a reconcile still waiting (there can be one per object)
        // holds a pointer, not the whole of the reconcile's state.
        let result = Box::pin((self.reconcile)(obj, ctx).into_future()).await;
        self.metrics.finished(self.name, result.is_ok());
        result
    }

    /// A permit: from the queue, first come, first served, or, while the object goes
    /// ahead ([`Ahead`]), from the lane's own permits. `None` on shutdown.
    async fn admit(&self, obj: &K) -> Option<SemaphorePermit<'_>> {
        let shutdown = self.shutdown.clone().requested();
        tokio::pin!(shutdown);
        // One place in the queue, kept while the object also watches the lane.
        let queue = self.permits.acquire();
        tokio::pin!(queue);
        let Some((ahead, lane)) = &self.ahead else {
            return tokio::select! {
                permit = &mut queue => permit.ok(),
                () = &mut shutdown => None,
            };
        };
        let (namespace, name) = (obj.meta().namespace.as_deref(), obj.meta().name.as_deref());
        loop {
            // Listening before asking, so a change between the two is not missed.
            let changed = ahead.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let goes_ahead = (ahead.goes_ahead)(namespace, name.unwrap_or_default());
            tokio::select! {
                permit = &mut queue => return permit.ok(),
                permit = lane.acquire(), if goes_ahead => return permit.ok(),
                () = &mut changed, if !goes_ahead => continue,
                () = &mut shutdown => return None,
            }
        }
    }
}

/// Whether an object (namespace, name) goes ahead now.
pub type GoesAhead = Arc<dyn Fn(Option<&str>, &str) -> bool + Send + Sync>;

/// Objects the controller lets past the queue while a predicate holds: the gates'
/// looks the scheduler granted, which it already spaced within the cloud's budget and
/// a cap of their own. With the fair queue alone, granted looks waited their turn
/// behind every event reconcile: at 100 Services, 34 went unlooked-at through a 30 s
/// idle window and a settled NLB Service waited 53.9 s (bound 46 s); with the lane,
/// none did and 37.1 s (docs/performance.md).
pub struct Ahead {
    /// The lane's own permits (beside the queue's `concurrency`).
    pub permits: usize,
    /// Whether the object (namespace, name) goes ahead now.
    pub goes_ahead: GoesAhead,
    /// Notified whenever `goes_ahead` may have turned true for an object that waits.
    pub changed: Arc<Notify>,
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
    /// A lane ahead of the queue, if the controller has one.
    pub ahead: Option<Ahead>,
}

impl Run {
    /// Runs `controller` until shutdown, then lets in-flight reconciles finish.
    pub async fn drive<K, Ctx, F, Fut>(self, controller: Controller<K>, reconcile: F, ctx: Arc<Ctx>)
    where
        K: Clone + Resource + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Debug + Unpin + Hash + Eq + Clone + Default,
        Ctx: Send + Sync + 'static,
        F: Fn(Arc<K>, Arc<Ctx>) -> Fut + Send + Sync + 'static,
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
            ahead,
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
        // Fair admission (see the module's comment): kube-runtime starts every due
        // reconcile at once, and these permits let `concurrency` of them work.
        let admission = Arc::new(Admission {
            name,
            synced,
            leadership,
            permits: Semaphore::new(match concurrency {
                0 => Semaphore::MAX_PERMITS, // 0: unbounded, as kube-runtime reads it
                n => usize::from(n),
            }),
            ahead: ahead.map(|ahead| {
                let lane = Semaphore::new(ahead.permits.max(1));
                (ahead, lane)
            }),
            store: controller.store(),
            shutdown: shutdown.clone(),
            metrics: run_metrics,
            durations,
            reconcile,
        });
        let gated = move |obj: Arc<K>, ctx: Arc<Ctx>| admission.clone().reconcile(obj, ctx);
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
            // Unbounded here: the permits above bound the work (see the module's comment).
            .with_config(ControllerConfig::default().concurrency(0))
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
    use std::collections::{HashMap, HashSet};
    use std::sync::Mutex;

    #[derive(Debug, thiserror::Error)]
    #[error("never made")]
    struct NeverFails;

    impl ReconcileError for NeverFails {
        fn metric_label(&self) -> &'static str {
            "never"
        }
    }

    /// A reconcile waiting for its permit (kube-runtime starts one per object due, so
    /// at leader election one per pod for the image-pull controller) holds a pointer
    /// to the reconcile's state, not the state: here 16 KiB of it.
    #[test]
    fn a_waiting_reconcile_is_small_whatever_the_reconcile_holds() {
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::runtime::reflector;

        let big = |_: Arc<ConfigMap>, _: Arc<()>| async {
            let held = [1u8; 16 * 1024];
            tokio::task::yield_now().await;
            Ok::<_, NeverFails>(Action::requeue(Duration::from_secs(u64::from(held[0]))))
        };
        let (_tx, synced) = watch::channel(true);
        let (_stop, stopped) = watch::channel(false);
        let admission = Arc::new(Admission {
            name: "size",
            synced,
            leadership: Leadership::always(),
            permits: Semaphore::new(1),
            ahead: None,
            store: reflector::store::<ConfigMap>().0,
            shutdown: Shutdown::from_receiver(stopped),
            metrics: RunMetrics::of(&Metrics::default()),
            durations: vec![],
            reconcile: big,
        });
        let waiting = admission.reconcile(Arc::new(ConfigMap::default()), Arc::new(()));
        let size = std::mem::size_of_val(&waiting);
        assert!(size < 1024, "a waiting reconcile takes {size} bytes");
    }

    const OBJECTS: usize = 20;
    const RUNS: usize = 10 * OBJECTS;

    /// What the busy queue's reconciles share.
    struct Served {
        /// The reconciles in the order they ran; shutdown once there are `RUNS`.
        order: Mutex<Vec<String>>,
        stop: watch::Sender<bool>,
        /// The run after which the object that made it goes ahead, until it runs again.
        mark_at: Option<usize>,
        ahead: Arc<Mutex<HashSet<String>>>,
        changed: Arc<Notify>,
    }

    /// `OBJECTS` objects, one slot, and every reconcile asks for another at once (as
    /// pods changing on many Services do): a queue that never empties. With `mark_at`,
    /// a lane ahead of it with one permit. The order the reconciles ran in.
    async fn busy_queue(mark_at: Option<usize>) -> Vec<String> {
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::api::ObjectMeta;
        use kube::runtime::{reflector, watcher};

        let objects: Vec<ConfigMap> = (0..OBJECTS)
            .map(|i| ConfigMap {
                metadata: ObjectMeta {
                    name: Some(format!("cm-{i:02}")),
                    namespace: Some("default".into()),
                    ..ObjectMeta::default()
                },
                ..ConfigMap::default()
            })
            .collect();
        let (reader, mut writer) = reflector::store::<ConfigMap>();
        writer.apply_watcher_event(&watcher::Event::Init);
        for object in &objects {
            writer.apply_watcher_event(&watcher::Event::InitApply(object.clone()));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        // The watch stream stays open (kube-runtime stops when it ends).
        let listed =
            futures::stream::iter(objects.into_iter().map(Ok)).chain(futures::stream::pending());
        let controller = Controller::for_stream(listed, reader);
        let (_synced_tx, synced) = watch::channel(true);
        let (stop, stopped) = watch::channel(false);
        let ahead_set = Arc::new(Mutex::new(HashSet::<String>::new()));
        let changed = Arc::new(Notify::new());
        let ahead = mark_at.map(|_| {
            let set = ahead_set.clone();
            Ahead {
                permits: 1,
                goes_ahead: Arc::new(move |_, name| set.lock().unwrap().contains(name)),
                changed: changed.clone(),
            }
        });
        let run = Run {
            name: "fairness",
            concurrency: 1,
            synced,
            errors: ErrorCounter::default(),
            metrics: RunMetrics::of(&Metrics::default()),
            own_duration: None,
            leadership: Leadership::always(),
            shutdown: Shutdown::from_receiver(stopped),
            ahead,
        };
        let ctx = Arc::new(Served {
            order: Mutex::default(),
            stop,
            mark_at,
            ahead: ahead_set,
            changed,
        });
        let reconcile = |object: Arc<ConfigMap>, served: Arc<Served>| async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            let name = object.name_any();
            let runs = {
                let mut order = served.order.lock().unwrap();
                order.push(name.clone());
                order.len()
            };
            let mut ahead = served.ahead.lock().unwrap();
            if served.mark_at == Some(runs) {
                ahead.insert(name);
                served.changed.notify_waiters();
            } else {
                ahead.remove(&name);
            }
            if runs >= RUNS {
                let _ = served.stop.send(true);
            }
            Ok::<_, NeverFails>(Action::requeue(Duration::ZERO))
        };
        tokio::time::timeout(
            Duration::from_secs(60),
            run.drive(controller, reconcile, ctx.clone()),
        )
        .await
        .expect("the controller stops on shutdown");
        let mut order = ctx.order.lock().unwrap().clone();
        order.truncate(RUNS);
        order
    }

    /// kube-runtime's own bound served the first two objects in hash order forever.
    #[tokio::test]
    async fn a_queue_that_never_empties_serves_every_object_in_turn() {
        let order = busy_queue(None).await;
        let mut last_run: HashMap<&str, usize> = HashMap::new();
        for (i, name) in order.iter().enumerate() {
            if let Some(before) = last_run.insert(name, i) {
                assert!(
                    // One turn, and a little slack for when a requeue lands.
                    i - before <= OBJECTS + 2,
                    "{name} ran at {before} and next at {i}: more than one turn of {OBJECTS}"
                );
            }
        }
        assert_eq!(last_run.len(), OBJECTS, "every object ran: {order:?}");
    }

    /// An object that goes ahead (a look the gates' scheduler granted) runs next, not a
    /// turn of the queue later.
    #[tokio::test]
    async fn an_object_let_ahead_passes_the_queue() {
        const MARK_AT: usize = 50;
        let order = busy_queue(Some(MARK_AT)).await;
        let marked = &order[MARK_AT - 1];
        let next = order[MARK_AT..]
            .iter()
            .position(|name| name == marked)
            .expect("the marked object ran again");
        assert!(
            next <= 1,
            "{marked} went ahead after run {MARK_AT} and ran {next} runs later: {order:?}"
        );
    }

    #[test]
    fn every_controller_counts_under_the_same_names_registered_once() {
        let metrics = Metrics::default();
        let (first, second) = (RunMetrics::of(&metrics), RunMetrics::of(&metrics));
        first.finished("daemonset-upgrade", true);
        second.finished("readiness-gates", false);
        let own = Histogram::new(exponential_buckets(0.001, 2.0, 15));
        drop(Timer {
            started: Instant::now(),
            histograms: &[
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
