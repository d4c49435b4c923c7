//! The async shell around a [`Schedule`]: shared by the controller's reconciles, it
//! ticks, reads the clients' call counts, and turns granted looks into a stream of
//! reconcile triggers.
use std::sync::{Arc, Mutex};
use std::time::Duration;

use alibaba_lb::Product;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::budget::CloudPace;
use super::look::Outcome;
use super::schedule::{product_index, Grant, QueueState, ReadRule, Schedule};
use crate::runtime::Shutdown;
use crate::watch::runner::Ahead;

/// How often the scheduler looks for due Services: a twentieth of a second, small
/// beside the fast interval, and a scan of even 10,000 entries is cheap at that rate.
const TICK: Duration = Duration::from_millis(50);
/// How often queued reconciles of Services gone from the store are dropped.
const PRUNE_QUEUED: Duration = Duration::from_secs(1);

/// What a product's client has done so far (both only grow).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallCounts {
    /// Calls made, each retry included.
    pub calls: u64,
    /// Throttling answers received.
    pub throttled: u64,
}

/// The async shell around a [`Schedule`], shared by the controller's reconciles.
#[derive(Clone)]
pub struct Poller {
    schedule: Arc<Mutex<Schedule>>,
    /// Notified after each batch of grants: a reconcile waiting in the runner's queue
    /// for a Service just granted a look moves to the lane ahead of it.
    looks_granted: Arc<Notify>,
}

impl Poller {
    /// `slots`: how many reconciles run at once (`--gate-concurrency`).
    pub fn new(fast: Duration, slow: Duration, pace: CloudPace, slots: usize) -> Self {
        Poller {
            schedule: Arc::new(Mutex::new(Schedule::new(
                fast,
                slow,
                pace,
                slots,
                Instant::now(),
            ))),
            looks_granted: Arc::default(),
        }
    }

    /// The runner's lane ahead of its queue: a reconcile of a Service granted a look
    /// (and not reported back) goes ahead, on `permits` of its own.
    pub fn ahead(&self, permits: usize) -> Ahead {
        let poller = self.clone();
        Ahead {
            permits,
            goes_ahead: Arc::new(move |namespace, name| {
                let service = ObjectRef::new(name).within(namespace.unwrap_or_default());
                poller.granted(&service)
            }),
            changed: self.looks_granted.clone(),
        }
    }

    /// See [`Schedule::reconcile_queued`].
    pub fn reconcile_queued(&self, service: ObjectRef<Service>) {
        self.schedule.lock().unwrap().reconcile_queued(service);
    }

    /// See [`Schedule::reconcile_started`].
    pub fn reconcile_started(&self, service: &ObjectRef<Service>) {
        self.schedule.lock().unwrap().reconcile_started(service);
    }

    /// See [`Schedule::polled`].
    pub fn polled(
        &self,
        service: ObjectRef<Service>,
        product: Product,
        listeners: usize,
        outcome: Outcome,
        looked: Instant,
        started: Instant,
    ) {
        self.schedule
            .lock()
            .unwrap()
            .polled(service, product, listeners, outcome, looked, started);
    }

    /// See [`Schedule::read_rule`].
    pub fn read_rule(&self, service: &ObjectRef<Service>) -> ReadRule {
        self.schedule.lock().unwrap().read_rule(service)
    }

    /// See [`Schedule::look_now`].
    pub fn look_now(&self, service: &ObjectRef<Service>) {
        self.schedule
            .lock()
            .unwrap()
            .look_now(service, Instant::now());
    }

    /// See [`Schedule::throttled_look`].
    pub fn throttled_look(&self, service: &ObjectRef<Service>, product: Product) {
        self.schedule
            .lock()
            .unwrap()
            .throttled_look(service, product, Instant::now());
    }

    /// See [`Schedule::granted`].
    pub fn granted(&self, service: &ObjectRef<Service>) -> bool {
        self.schedule.lock().unwrap().granted(service)
    }

    /// See [`Schedule::look_again_soon`].
    pub fn look_again_soon(&self, service: &ObjectRef<Service>) {
        self.schedule
            .lock()
            .unwrap()
            .look_again_soon(service, Instant::now());
    }

    pub fn forget(&self, service: &ObjectRef<Service>) {
        self.schedule.lock().unwrap().forget(service);
    }

    /// Granted looks, as a stream of reconcile triggers, until shutdown. Each tick it
    /// reads the clients' counts (`counts`, per product: calls made, throttling
    /// answers) and hands the queue's state and the grants to `ticked` (the metrics).
    /// Once a second it drops the queued reconciles of Services `exists` no longer
    /// finds (`Schedule::drop_queued_unless`).
    pub fn triggers(
        &self,
        shutdown: Shutdown,
        counts: impl Fn(Product) -> CallCounts + Send + Sync + 'static,
        exists: impl Fn(&ObjectRef<Service>) -> bool + Send + Sync + 'static,
        ticked: impl Fn(&QueueState, &[Grant]) + Send + Sync + 'static,
    ) -> impl Stream<Item = ObjectRef<Service>> + Send + 'static {
        let schedule = self.schedule.clone();
        let looks_granted = self.looks_granted.clone();
        let ticks = tokio_stream_interval(TICK);
        let stop = Box::pin(shutdown.requested());
        let seen = [counts(Product::Clb), counts(Product::Nlb)];
        let counts = Arc::new(counts);
        let exists = Arc::new(exists);
        let ticked = Arc::new(ticked);
        let pruned = Instant::now();
        futures::stream::unfold(
            (ticks, stop, seen, pruned),
            move |(mut ticks, mut stop, mut seen, mut pruned)| {
                let schedule = schedule.clone();
                let counts = counts.clone();
                let exists = exists.clone();
                let ticked = ticked.clone();
                let looks_granted = looks_granted.clone();
                async move {
                    loop {
                        tokio::select! {
                            _ = ticks.tick() => {}
                            _ = &mut stop => return None,
                        }
                        let now = Instant::now();
                        let mut schedule = schedule.lock().unwrap();
                        if now >= pruned + PRUNE_QUEUED {
                            schedule.drop_queued_unless(|service| exists(service));
                            pruned = now;
                        }
                        for product in [Product::Clb, Product::Nlb] {
                            let count = counts(product);
                            let i = product_index(product);
                            if count.throttled > seen[i].throttled {
                                schedule.throttled(product, now);
                            }
                            let made = count.calls.saturating_sub(seen[i].calls);
                            schedule.calls_made(product, made as f64, now);
                            seen[i] = count;
                        }
                        let grants = schedule.grant(now);
                        let queue = schedule.queue(now);
                        drop(schedule);
                        ticked(&queue, &grants);
                        if !grants.is_empty() {
                            looks_granted.notify_waiters();
                            let due = grants.into_iter().map(|g| g.service);
                            let state = (ticks, stop, seen, pruned);
                            return Some((futures::stream::iter(due), state));
                        }
                    }
                }
            },
        )
        .flatten()
    }
}

fn tokio_stream_interval(period: Duration) -> tokio::time::Interval {
    let mut interval = tokio::time::interval(period);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    interval
}
