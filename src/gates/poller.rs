//! When to look at a load balancer's health again, and which look goes first: the one
//! scheduler of the gates' cloud reads. Polling is per Service (its load balancer and
//! listeners), never per pod. Each look the scheduler grants becomes a reconcile
//! trigger on a stream the controller consumes; nothing sleeps in a reconcile.
//!
//! - **Pace.** A Service with a gate pending (or whose backends rollgate just changed)
//!   is due `fast` after its last look; any other one `slow` after it. A Service with
//!   no gated pod is thus read on the slow interval only: not never, because backends
//!   can be changed behind rollgate's back and the slow look is what repairs them.
//! - **Priority.** Due Services are granted in the order (a) pending gates, (b) drains
//!   and other backend changes being confirmed, (c) settled; within a class, the one
//!   due longest first. Writes are never queued: they are made by the reconcile that
//!   decided them. Every call a product's client makes counts against its budget: the
//!   scheduler reads the client's call count each tick (`calls_made`), and what a
//!   granted look paid for at its grant is not paid twice; the rest (load balancers
//!   ensured, backend writes and NLB job polls, a read a pod event needed, retries) is
//!   charged as debt to the main share, so pending and draining looks yield to them
//!   and the client's own rate limiter never queues more than the budget; the
//!   settled reserve is never charged for them.
//! - **Reconciles first.** A reconcile an event asked for (a Service to serve for the
//!   first time, a pod that changed) makes the writes the gates wait on, and it needs
//!   a reconcile slot as much as the cloud budget. While one is queued and has not
//!   started, settled looks take only their reserved quarter of the budget, and the
//!   looks granted and not yet reported back hold at most half the slots
//!   (`--gate-concurrency`). Without this, at 1,000 Services the settled looks of the
//!   load balancers made first took every slot and all of the budget, and the
//!   Services still without one waited for minutes.
//! - **Budget.** One per product (the controller serves one region, so per product and
//!   region): `--cloud-rate-limit` calls/s, at most 16/s for NLB, whose
//!   `GetListenerHealthStatus` allows 10/s (a look is one listing and one health call
//!   per listener, so 8 health calls/s). A look costs 3 calls per listener: the
//!   group's backends, their health, and which group the listener forwards to.
//! - **No starvation.** A quarter of each budget is reserved for settled Services
//!   whenever one is waiting; pending ones take it only when none is. Writes never
//!   draw on it, and a settled look it pays for is not held back by the slot cap of
//!   *Reconciles first* (its rate bounds those looks to about one at a time). Settled
//!   Services are served oldest-due first, so each is looked at within
//!   `slow + settled looks' calls / (budget / 4)` of its last look (at the defaults,
//!   `10 s + 3 × listeners × settled Services / 2.5 s`); the gauge
//!   `rollgate_gate_scheduler_oldest_wait_seconds` shows how close that is.
//! - **Throttling.** Every throttling answer (the client retries it) halves the
//!   product's rate, down to an eighth, and empties its buckets; the rate then climbs
//!   back to full over 10 s. Nothing is reordered: the waiting Services keep their due
//!   times, and a look whose reconcile failed on throttling keeps its place.
//!
//! `Schedule` is the pure decision (which looks go now, given the queue, the budgets
//! and the time), table- and property-tested; `Poller` is the thin async shell.
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use alibaba_lb::{Product, RateLimit, Tokens};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::ObjectRef;
use tokio::time::Instant;

use crate::runtime::Shutdown;

/// How often the scheduler looks for due Services: a twentieth of a second, small
/// beside the fast interval, and a scan of even 10,000 entries is cheap at that rate.
const TICK: Duration = Duration::from_millis(50);
/// How often queued reconciles of Services gone from the store are dropped.
const PRUNE_QUEUED: Duration = Duration::from_secs(1);
/// NLB health calls per second we allow ourselves (the API's limit is 10 per region).
const NLB_HEALTH_CALLS_PER_SECOND: f64 = 8.0;
/// The share of a budget kept for settled Services while one is waiting.
const SETTLED_SHARE: f64 = 0.25;
/// The lowest a throttled product's rate goes, as a share of its budget.
const SLOWEST: f64 = 0.125;
/// How fast a throttled product's rate climbs back (share of its budget per second).
const RECOVERY_PER_SECOND: f64 = 0.1;

/// Which class of work a Service's next look belongs to (the order they are served).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    /// A gate is pending (or the last cloud call failed): its flip waits on this look.
    Pending,
    /// Backends being drained or changed: the look confirms the change.
    Draining,
    /// Nothing pending: the look only checks that nothing moved.
    Settled,
}

impl Priority {
    pub const ALL: [Priority; 3] = [Priority::Pending, Priority::Draining, Priority::Settled];

    /// The metrics label.
    pub fn label(self) -> &'static str {
        match self {
            Priority::Pending => "pending",
            Priority::Draining => "draining",
            Priority::Settled => "settled",
        }
    }
}

/// What a reconcile found, as far as the next look is concerned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Gates of live pods not True after the plan.
    pub pending_gates: usize,
    /// Backend changes were sent (or tried).
    pub changed: bool,
    /// A drain deadline is still ahead.
    pub draining: bool,
    /// A cloud call failed.
    pub failed: bool,
    /// The load balancer refuses pod backends: waiting on the user, not on the cloud.
    pub refused: bool,
}

impl Outcome {
    /// The class of the next look, and whether it comes at the fast pace.
    pub fn next_look(self) -> (Priority, bool) {
        if self.refused {
            return (Priority::Settled, false);
        }
        if self.pending_gates > 0 || self.failed {
            return (Priority::Pending, true);
        }
        if self.changed {
            return (Priority::Draining, true);
        }
        if self.draining {
            return (Priority::Draining, false);
        }
        (Priority::Settled, false)
    }
}

/// Cloud calls one look at a Service costs: per listener, a listing of the group, a
/// health report, and the listener's target group (`Cloud::read_group`).
pub fn look_cost(listeners: usize) -> f64 {
    3.0 * listeners.max(1) as f64
}

#[derive(Clone, Debug)]
struct Entry {
    product: Product,
    listeners: usize,
    priority: Priority,
    /// Fast or slow, as the last reconcile decided.
    interval: Duration,
    /// When the next look is due (kept while it waits: the queue's order).
    due: Instant,
    /// When the look was granted, until the reconcile reports back.
    granted: Option<Instant>,
}

impl Entry {
    /// Waiting for a grant at `now`: due, and not granted (or granted so long ago,
    /// `slow`, that the reconcile must have been lost).
    fn waiting(&self, now: Instant, slow: Duration) -> bool {
        self.due <= now && !self.in_flight(now, slow)
    }

    /// Granted a look whose reconcile has not reported back (and is not lost).
    fn in_flight(&self, now: Instant, slow: Duration) -> bool {
        self.granted.is_some_and(|at| now < at + slow)
    }
}

/// One product's budget and its state.
#[derive(Clone, Debug)]
struct Budget {
    /// Calls per second when not throttled.
    per_second: f64,
    /// Taken in priority order.
    main: Tokens,
    /// Kept for settled Services while one waits.
    reserve: Tokens,
    /// The rate's share after the last throttling answer, and when that was.
    throttled: Option<(f64, Instant)>,
}

impl Budget {
    fn new(per_second: f64, now: Instant) -> Self {
        let full = |share: f64| {
            let burst = (per_second * share).ceil().max(2.0);
            Tokens {
                level: burst,
                at: now,
            }
        };
        Budget {
            per_second,
            main: full(1.0 - SETTLED_SHARE),
            reserve: full(SETTLED_SHARE),
            throttled: None,
        }
    }

    /// The share of the rate allowed at `now` (1 unless throttled lately).
    fn pace(&self, now: Instant) -> f64 {
        match self.throttled {
            None => 1.0,
            Some((share, at)) => {
                (share + now.duration_since(at).as_secs_f64() * RECOVERY_PER_SECOND).min(1.0)
            }
        }
    }

    /// One bucket's limit at `now`: its share of the rate, a second's worth of burst.
    fn limit(&self, share: f64, now: Instant) -> RateLimit {
        let per_second = self.per_second * share * self.pace(now);
        RateLimit {
            per_second,
            burst: (self.per_second * share).ceil().max(2.0) as u32,
        }
    }

    /// Takes `cost` from a bucket if it holds it (or, for a look dearer than the
    /// whole burst, if the bucket is full: the rest becomes debt).
    fn take(&mut self, reserve: bool, cost: f64, now: Instant) -> bool {
        let share = if reserve {
            SETTLED_SHARE
        } else {
            1.0 - SETTLED_SHARE
        };
        let limit = self.limit(share, now);
        let bucket = if reserve {
            &mut self.reserve
        } else {
            &mut self.main
        };
        bucket.refill(limit, now);
        if bucket.level >= cost.min(limit.burst as f64) {
            bucket.charge(limit, cost, now);
            return true;
        }
        false
    }

    /// Calls made outside a grant (writes, load balancers being made), paid by the
    /// main bucket alone: the reserve is the settled looks', and writes paid from it
    /// too would stretch their wait past the stated bound (at 100 Services, 135 s
    /// against 94 s while the load balancers were being made). The client's own rate
    /// limiter still holds all the product's calls to `--cloud-rate-limit`.
    fn charge(&mut self, cost: f64, now: Instant) {
        let main = self.limit(1.0 - SETTLED_SHARE, now);
        self.main.charge(main, cost, now);
    }

    fn throttle(&mut self, now: Instant) {
        let share = (self.pace(now) / 2.0).max(SLOWEST);
        // Refill at the old pace up to now, then stop: nothing more goes at once.
        let (main, reserve) = (
            self.limit(1.0 - SETTLED_SHARE, now),
            self.limit(SETTLED_SHARE, now),
        );
        self.main.refill(main, now);
        self.reserve.refill(reserve, now);
        self.main.level = self.main.level.min(0.0);
        self.reserve.level = self.reserve.level.min(0.0);
        self.throttled = Some((share, now));
    }
}

/// A look granted now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub service: ObjectRef<Service>,
    pub priority: Priority,
    /// Calls the look costs (see [`look_cost`]).
    pub calls: u32,
}

/// What the queue looks like (for the metrics).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueState {
    /// Services due and not granted yet, by priority (in [`Priority::ALL`] order).
    pub waiting: [usize; 3],
    /// Reconciles events asked for that have not started.
    pub queued_reconciles: usize,
    /// How long the Service waiting longest has been due.
    pub oldest_wait: Duration,
}

/// The scheduler's state and its pure decisions: every method takes `now`.
#[derive(Clone, Debug)]
pub struct Schedule {
    fast: Duration,
    slow: Duration,
    clb: Budget,
    nlb: Budget,
    entries: HashMap<ObjectRef<Service>, Entry>,
    /// Per product: calls granted looks paid for and the client has not been seen to
    /// make yet (at most what the looks still granted cost).
    prepaid: [f64; 2],
    /// Reconciles events asked for that have not started (see "Reconciles first").
    queued: HashSet<ObjectRef<Service>>,
    /// The reconcile slots (`--gate-concurrency`).
    slots: usize,
}

/// The per-product budgets: CLB takes the client's rate; NLB the same, capped by its
/// health API's limit.
pub fn budgets(cloud_rate_limit: f64) -> (f64, f64) {
    let rate = cloud_rate_limit.max(0.1);
    (rate, rate.min(2.0 * NLB_HEALTH_CALLS_PER_SECOND))
}

impl Schedule {
    pub fn new(
        fast: Duration,
        slow: Duration,
        cloud_rate_limit: f64,
        slots: usize,
        now: Instant,
    ) -> Self {
        let (clb, nlb) = budgets(cloud_rate_limit);
        Schedule {
            fast,
            slow: slow.max(fast),
            clb: Budget::new(clb, now),
            nlb: Budget::new(nlb, now),
            entries: HashMap::new(),
            prepaid: [0.0; 2],
            queued: HashSet::new(),
            slots: slots.max(1),
        }
    }

    /// An event asked for a reconcile of the Service (not a look: those are granted).
    pub fn reconcile_queued(&mut self, service: ObjectRef<Service>) {
        self.queued.insert(service);
    }

    /// A reconcile of the Service started: whatever asked for it is served.
    pub fn reconcile_started(&mut self, service: &ObjectRef<Service>) {
        self.queued.remove(service);
    }

    /// Drops the queued reconciles of Services that are gone (`exists` is false): the
    /// controller never runs those, and they must not hold the looks back.
    pub fn drop_queued_unless(&mut self, exists: impl Fn(&ObjectRef<Service>) -> bool) {
        self.queued.retain(|service| exists(service));
    }

    fn budget(&mut self, product: Product) -> &mut Budget {
        match product {
            Product::Clb => &mut self.clb,
            Product::Nlb => &mut self.nlb,
        }
    }

    /// Records a reconcile's outcome: the Service's next look is due one interval
    /// after the reading the plan used (`looked`), not after the reconcile's writes,
    /// so 500 condition writes do not stretch the interval between two looks. A look
    /// granted after the reconcile `started` stays granted: its reconcile is still to
    /// come, and must read the cloud.
    pub fn polled(
        &mut self,
        service: ObjectRef<Service>,
        product: Product,
        listeners: usize,
        outcome: Outcome,
        looked: Instant,
        started: Instant,
    ) {
        let (priority, fast) = outcome.next_look();
        let interval = if fast { self.fast } else { self.slow };
        let granted = self
            .entries
            .get(&service)
            .and_then(|e| e.granted)
            .filter(|at| *at > started);
        self.entries.insert(
            service,
            Entry {
                product,
                listeners,
                priority,
                interval,
                due: looked + interval,
                granted,
            },
        );
    }

    /// How old a reading a reconcile of the Service may reuse: none while a look is
    /// granted (that reconcile reads the cloud), else the Service's interval, so a
    /// reading is never used past the moment its next look is due.
    pub fn reuse_bound(&self, service: &ObjectRef<Service>) -> Option<Duration> {
        match self.entries.get(service) {
            Some(entry) if entry.granted.is_some() => None,
            Some(entry) => Some(entry.interval),
            None => Some(self.fast),
        }
    }

    /// A reconcile that failed on throttling: the product slows down, and the Service
    /// keeps its place in the queue (its due time), first of its class to go again.
    pub fn throttled_look(&mut self, service: &ObjectRef<Service>, product: Product, now: Instant) {
        if let Some(entry) = self.entries.get_mut(service) {
            entry.granted = None;
        }
        self.throttled(product, now);
    }

    /// The product answered with throttling: slow down.
    pub fn throttled(&mut self, product: Product, now: Instant) {
        self.budget(product).throttle(now);
    }

    /// Calls made outside a granted look (writes, a read a pod event needed).
    pub fn charge(&mut self, product: Product, calls: f64, now: Instant) {
        self.budget(product).charge(calls, now);
    }

    /// The product's client made `made` calls since the last report (every call, each
    /// retry, whatever made it). Those the grants paid for in advance are not paid
    /// again; the rest is charged. Then the advance is cut to what the looks still
    /// granted cost: a look that reported back made its calls before it did, so they
    /// are in this report or an earlier one.
    pub fn calls_made(&mut self, product: Product, made: f64, now: Instant) {
        let p = product_index(product);
        let covered = made.min(self.prepaid[p]);
        self.prepaid[p] -= covered;
        if made > covered {
            self.charge(product, made - covered, now);
        }
        let outstanding: f64 = self
            .entries
            .values()
            .filter(|e| e.product == product && e.granted.is_some())
            .map(|e| look_cost(e.listeners))
            .sum();
        self.prepaid[p] = self.prepaid[p].min(outstanding);
    }

    pub fn forget(&mut self, service: &ObjectRef<Service>) {
        self.entries.remove(service);
        self.queued.remove(service);
    }

    /// Whether the scheduler granted the Service a look that has not been reported
    /// back: the reconcile must read the cloud, not reuse the last reading.
    pub fn granted(&self, service: &ObjectRef<Service>) -> bool {
        self.entries
            .get(service)
            .is_some_and(|e| e.granted.is_some())
    }

    /// The looks that go now, in order; each is marked granted.
    pub fn grant(&mut self, now: Instant) -> Vec<Grant> {
        let slow = self.slow;
        let mut waiting: Vec<(ObjectRef<Service>, Entry)> = self
            .entries
            .iter()
            .filter(|(_, e)| e.waiting(now, slow))
            .map(|(k, e)| (k.clone(), e.clone()))
            .collect();
        waiting.sort_by(|(a, ea), (b, eb)| {
            (ea.priority, ea.due, &a.namespace, &a.name).cmp(&(
                eb.priority,
                eb.due,
                &b.namespace,
                &b.name,
            ))
        });
        let settled_waiting = |product: Product| {
            waiting
                .iter()
                .any(|(_, e)| e.product == product && e.priority == Priority::Settled)
        };
        let reserve_free = [
            !settled_waiting(Product::Clb),
            !settled_waiting(Product::Nlb),
        ];
        // Reconciles first: while one is queued, settled looks keep to their reserve
        // and the looks in flight to half the slots.
        let reconciles_queued = !self.queued.is_empty();
        let mut free_slots = if reconciles_queued {
            let in_flight = self
                .entries
                .values()
                .filter(|e| e.in_flight(now, slow))
                .count();
            (self.slots / 2).max(1).saturating_sub(in_flight)
        } else {
            usize::MAX
        };
        // Per product: a look of a higher class could not go (lower ones must not pass
        // it on the main budget), or none can go at all.
        let mut blocked_high = [false; 2];
        let mut blocked = [false; 2];
        let mut grants = vec![];
        for (service, entry) in waiting {
            let p = product_index(entry.product);
            if blocked[p] {
                continue;
            }
            let slot = free_slots > 0;
            let cost = look_cost(entry.listeners);
            let budget = self.budget(entry.product);
            // A settled look paid from the reserve goes even when the looks in flight
            // hold their half of the slots: the reserve's rate bounds how many there
            // are (about one at a time at the defaults), and without it pending looks
            // holding the slots would stretch a settled Service's wait past its bound.
            let taken = match entry.priority {
                Priority::Pending | Priority::Draining => {
                    slot && !blocked_high[p]
                        && (budget.take(false, cost, now)
                            || (reserve_free[p] && budget.take(true, cost, now)))
                }
                Priority::Settled => {
                    budget.take(true, cost, now)
                        || (slot
                            && !reconciles_queued
                            && !blocked_high[p]
                            && budget.take(false, cost, now))
                }
            };
            if !taken {
                match entry.priority {
                    Priority::Settled => blocked[p] = true,
                    _ => blocked_high[p] = true,
                }
                continue;
            }
            if let Some(entry) = self.entries.get_mut(&service) {
                entry.granted = Some(now);
            }
            self.prepaid[p] += cost;
            free_slots = free_slots.saturating_sub(1);
            grants.push(Grant {
                service,
                priority: entry.priority,
                calls: cost as u32,
            });
        }
        grants
    }

    /// The queue as the metrics show it.
    pub fn queue(&self, now: Instant) -> QueueState {
        let mut state = QueueState {
            queued_reconciles: self.queued.len(),
            ..QueueState::default()
        };
        for entry in self.entries.values().filter(|e| e.waiting(now, self.slow)) {
            state.waiting[entry.priority as usize] += 1;
            state.oldest_wait = state.oldest_wait.max(now.duration_since(entry.due));
        }
        state
    }
}

/// What a product's client has done so far (both only grow).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallCounts {
    /// Calls made, each retry included.
    pub calls: u64,
    /// Throttling answers received.
    pub throttled: u64,
}

fn product_index(product: Product) -> usize {
    match product {
        Product::Clb => 0,
        Product::Nlb => 1,
    }
}

/// The async shell around a [`Schedule`], shared by the controller's reconciles.
#[derive(Clone)]
pub struct Poller {
    schedule: Arc<Mutex<Schedule>>,
}

impl Poller {
    /// `slots`: how many reconciles run at once (`--gate-concurrency`).
    pub fn new(fast: Duration, slow: Duration, cloud_rate_limit: f64, slots: usize) -> Self {
        Poller {
            schedule: Arc::new(Mutex::new(Schedule::new(
                fast,
                slow,
                cloud_rate_limit,
                slots,
                Instant::now(),
            ))),
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

    /// See [`Schedule::reuse_bound`].
    pub fn reuse_bound(&self, service: &ObjectRef<Service>) -> Option<Duration> {
        self.schedule.lock().unwrap().reuse_bound(service)
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn key(name: &str) -> ObjectRef<Service> {
        ObjectRef::new(name).within("ns")
    }

    fn outcome(priority: Priority) -> Outcome {
        match priority {
            Priority::Pending => Outcome {
                pending_gates: 1,
                ..Outcome::default()
            },
            Priority::Draining => Outcome {
                changed: true,
                ..Outcome::default()
            },
            Priority::Settled => Outcome::default(),
        }
    }

    /// A schedule of `rate` calls a second (looks due after 500 ms pending, 10 s
    /// settled) from `start`.
    fn schedule(rate: f64, start: Instant) -> Schedule {
        Schedule::new(500 * MS, Duration::from_secs(10), rate, 8, start)
    }

    /// The reconcile of `name` (a CLB Service with one listener) reported back at `at`,
    /// having found it `priority`.
    fn look(s: &mut Schedule, name: &str, priority: Priority, at: Instant) {
        s.polled(key(name), Product::Clb, 1, outcome(priority), at, at);
    }

    /// A schedule of `rate` with one pending Service, `p`, looked at at `start`.
    fn one_pending(rate: f64, start: Instant) -> Schedule {
        let mut s = schedule(rate, start);
        look(&mut s, "p", Priority::Pending, start);
        s
    }

    #[test]
    fn the_next_look_follows_what_the_reconcile_found() {
        #[rustfmt::skip]
        let cases = [
            ("settled", Outcome::default(), (Priority::Settled, false)),
            ("a gate pending", Outcome { pending_gates: 2, ..Outcome::default() }, (Priority::Pending, true)),
            ("a failed call", Outcome { failed: true, ..Outcome::default() }, (Priority::Pending, true)),
            ("backends changed", Outcome { changed: true, ..Outcome::default() }, (Priority::Draining, true)),
            ("a drain ahead", Outcome { draining: true, ..Outcome::default() }, (Priority::Draining, false)),
            ("refused, gates pending", Outcome { refused: true, pending_gates: 3, ..Outcome::default() }, (Priority::Settled, false)),
        ];
        for (case, outcome, want) in cases {
            assert_eq!(outcome.next_look(), want, "{case}");
        }
    }

    #[test]
    fn a_pending_service_is_due_fast_and_a_settled_one_slow_after_its_last_look() {
        let start = Instant::now();
        let mut s = schedule(10.0, start);
        look(&mut s, "pending", Priority::Pending, start);
        look(&mut s, "settled", Priority::Settled, start);
        assert!(s.grant(start + 499 * MS).is_empty());
        let at_500 = s.grant(start + 500 * MS);
        assert_eq!(at_500.len(), 1);
        assert_eq!(at_500[0].service, key("pending"));
        assert!(s.granted(&key("pending")));
        // Granted once only, until the reconcile reports back.
        assert!(s.grant(start + 600 * MS).is_empty());
        look(&mut s, "pending", Priority::Settled, start + 600 * MS);
        assert!(!s.granted(&key("pending")));
        let at_10s = s.grant(start + Duration::from_secs(10));
        assert_eq!(
            at_10s
                .iter()
                .map(|g| g.service.name.as_str())
                .collect::<Vec<_>>(),
            ["settled"]
        );
    }

    #[test]
    fn a_reading_is_reused_until_its_look_is_due_and_never_while_a_look_is_granted() {
        let start = Instant::now();
        let mut s = schedule(10.0, start);
        assert_eq!(s.reuse_bound(&key("new")), Some(500 * MS));
        look(&mut s, "p", Priority::Pending, start);
        look(&mut s, "s", Priority::Settled, start);
        assert_eq!(s.reuse_bound(&key("p")), Some(500 * MS));
        assert_eq!(s.reuse_bound(&key("s")), Some(Duration::from_secs(10)));
        assert_eq!(s.grant(start + 500 * MS).len(), 1);
        assert_eq!(s.reuse_bound(&key("p")), None);
    }

    #[test]
    fn a_grant_made_while_a_reconcile_ran_outlives_that_reconcile() {
        let start = Instant::now();
        let mut s = one_pending(10.0, start);
        // A pod event's reconcile starts at 400 ms; the look is granted at 500 ms.
        let started = start + 400 * MS;
        assert_eq!(s.grant(start + 500 * MS).len(), 1);
        s.polled(
            key("p"),
            Product::Clb,
            1,
            outcome(Priority::Pending),
            start,
            started,
        );
        assert!(
            s.granted(&key("p")),
            "the granted reconcile is still to come"
        );
        // The granted one reports back: done.
        s.polled(
            key("p"),
            Product::Clb,
            1,
            outcome(Priority::Pending),
            start + 600 * MS,
            start + 550 * MS,
        );
        assert!(!s.granted(&key("p")));
    }

    /// `n` settled CLB Services of one listener, `s0`.., looked at at `at`.
    fn settled(s: &mut Schedule, n: usize, at: Instant) {
        for i in 0..n {
            look(s, &format!("s{i}"), Priority::Settled, at);
        }
    }

    #[test]
    fn while_a_reconcile_is_queued_settled_looks_keep_to_their_reserve() {
        let start = Instant::now();
        let due = start + Duration::from_secs(10);
        // 10 calls/s: a main bucket of 8 calls, a reserve of 3; a look costs 3.
        let mut free = schedule(10.0, start);
        settled(&mut free, 10, start);
        assert_eq!(free.grant(due).len(), 3, "both buckets: 1 + 2 looks");

        let mut held = schedule(10.0, start);
        settled(&mut held, 10, start);
        held.reconcile_queued(key("new"));
        assert_eq!(held.queue(due).queued_reconciles, 1);
        assert_eq!(held.grant(due).len(), 1, "the reserve's one look only");
        // Over the next 10 s the reserve pays for a quarter of the rate: 2.5 calls/s.
        let mut granted = 0;
        for tick in 1..=200 {
            let now = due + tick * 50 * MS;
            for look in held.grant(now) {
                // Reported back at once: the slots never limit these looks.
                held.polled(
                    look.service,
                    Product::Clb,
                    1,
                    outcome(Priority::Settled),
                    now,
                    now,
                );
                granted += 1;
            }
        }
        assert!((7..=9).contains(&granted), "{granted} looks at 2.5 calls/s");
        // Started: the main bucket (full by now) is theirs again.
        held.reconcile_started(&key("new"));
        let later = due + Duration::from_secs(10) + 50 * MS;
        assert!(held.grant(later).len() >= 2);
    }

    #[test]
    fn while_a_reconcile_is_queued_looks_in_flight_hold_half_the_slots() {
        let start = Instant::now();
        // A budget large enough for every look: only the slots limit them.
        let mut s = schedule(1000.0, start);
        for i in 0..20 {
            look(&mut s, &format!("p{i}"), Priority::Pending, start);
        }
        s.reconcile_queued(key("new"));
        let first = s.grant(start + 500 * MS);
        assert_eq!(first.len(), 4, "half of 8 slots");
        assert!(s.grant(start + 550 * MS).is_empty(), "4 still in flight");
        // One reports back: one slot more.
        let back = first[0].service.clone();
        s.polled(
            back,
            Product::Clb,
            1,
            outcome(Priority::Settled),
            start + 600 * MS,
            start + 500 * MS,
        );
        assert_eq!(s.grant(start + 650 * MS).len(), 1);
        // Nothing queued: no cap.
        s.reconcile_started(&key("new"));
        assert_eq!(s.grant(start + 700 * MS).len(), 15);
    }

    #[test]
    fn a_queued_reconcile_of_a_service_gone_holds_nothing_back() {
        let start = Instant::now();
        let mut s = schedule(10.0, start);
        settled(&mut s, 10, start);
        s.reconcile_queued(key("gone"));
        s.reconcile_queued(key("there"));
        s.drop_queued_unless(|service| service.name == "there");
        assert_eq!(s.queue(start).queued_reconciles, 1);
        s.forget(&key("there"));
        assert_eq!(s.queue(start).queued_reconciles, 0);
        assert_eq!(s.grant(start + Duration::from_secs(10)).len(), 3);
    }

    #[test]
    fn a_lost_reconcile_is_granted_again_after_the_slow_interval() {
        let start = Instant::now();
        let mut s = one_pending(10.0, start);
        assert_eq!(s.grant(start + 500 * MS).len(), 1);
        assert!(s.grant(start + Duration::from_secs(10)).is_empty());
        assert_eq!(s.grant(start + 500 * MS + Duration::from_secs(10)).len(), 1);
    }

    #[test]
    fn looks_go_pending_first_then_draining_then_settled_oldest_first_within_a_class() {
        let start = Instant::now();
        // A budget of 4 calls/s: 3 in the main bucket (burst 3), 1 reserved (burst 2).
        let mut s = schedule(4.0, start);
        let later = start + Duration::from_secs(30);
        // Due times: the settled ones longest, so order is by class first.
        look(&mut s, "settled-old", Priority::Settled, start);
        look(
            &mut s,
            "draining",
            Priority::Draining,
            start + Duration::from_secs(5),
        );
        look(
            &mut s,
            "pending-new",
            Priority::Pending,
            start + Duration::from_secs(6),
        );
        look(
            &mut s,
            "pending-old",
            Priority::Pending,
            start + Duration::from_secs(4),
        );
        let grants = s.grant(later);
        let names: Vec<&str> = grants.iter().map(|g| g.service.name.as_str()).collect();
        // 2 calls a look: the main bucket (3) takes one pending look; the second does
        // not fit, so neither does the draining one; the reserve (2) serves the
        // settled one, which waits on its own quarter.
        assert_eq!(names, ["pending-old", "settled-old"]);
        let grants = s.grant(later + Duration::from_secs(1));
        let names: Vec<&str> = grants.iter().map(|g| g.service.name.as_str()).collect();
        assert_eq!(names, ["pending-new"]);
        let grants = s.grant(later + Duration::from_secs(2));
        let names: Vec<&str> = grants.iter().map(|g| g.service.name.as_str()).collect();
        assert_eq!(names, ["draining"]);
    }

    #[test]
    fn with_no_settled_service_waiting_pending_ones_use_the_reserve_too() {
        let start = Instant::now();
        let mut s = schedule(4.0, start);
        for name in ["a", "b", "c"] {
            s.polled(
                key(name),
                Product::Clb,
                1,
                outcome(Priority::Pending),
                start,
                start,
            );
        }
        // Main: 3 tokens (one look), reserve: 2 (one more).
        assert_eq!(s.grant(start + Duration::from_secs(1)).len(), 2);
    }

    #[test]
    fn products_have_budgets_of_their_own() {
        let start = Instant::now();
        let mut s = schedule(4.0, start);
        look(&mut s, "clb-1", Priority::Pending, start);
        look(&mut s, "clb-2", Priority::Pending, start);
        look(&mut s, "clb-3", Priority::Pending, start);
        s.polled(
            key("nlb"),
            Product::Nlb,
            1,
            outcome(Priority::Pending),
            start,
            start,
        );
        let grants = s.grant(start + Duration::from_secs(1));
        assert!(grants.iter().any(|g| g.service == key("nlb")), "{grants:?}");
    }

    #[test]
    fn a_look_dearer_than_the_burst_still_goes_and_its_debt_keeps_the_rate() {
        let start = Instant::now();
        let mut s = schedule(4.0, start);
        s.polled(
            key("wide"),
            Product::Clb,
            10,
            outcome(Priority::Pending),
            start,
            start,
        );
        let mut spent = 0;
        let mut t = start;
        while t < start + Duration::from_secs(60) {
            t += 50 * MS;
            for g in s.grant(t) {
                assert_eq!(g.calls, 30);
                spent += g.calls;
                s.polled(
                    g.service,
                    Product::Clb,
                    10,
                    outcome(Priority::Pending),
                    t,
                    t,
                );
            }
        }
        // 4 calls/s for 60 s, plus both buckets' bursts and one look's debt.
        assert!(spent >= 4 * 30, "{spent}");
        assert!(spent <= 4 * 60 + 3 + 2 + 30, "{spent}");
    }

    #[test]
    fn throttling_slows_the_product_and_keeps_the_order() {
        let start = Instant::now();
        let mut s = schedule(8.0, start);
        look(&mut s, "first", Priority::Pending, start);
        look(&mut s, "second", Priority::Pending, start + MS);
        let now = start + Duration::from_secs(1);
        assert_eq!(s.grant(now).len(), 2);
        // The first one's reconcile is throttled: it keeps its due time.
        s.throttled_look(&key("first"), Product::Clb, now);
        look(&mut s, "second", Priority::Pending, now);
        // Nothing goes at once, then the first goes before the second.
        assert!(s.grant(now + 10 * MS).is_empty());
        let mut order = vec![];
        let mut t = now;
        while order.len() < 2 && t < now + Duration::from_secs(20) {
            t += 50 * MS;
            for g in s.grant(t) {
                order.push((g.service.name.clone(), t));
            }
        }
        assert_eq!(order[0].0, "first", "{order:?}");
        // Half the rate (3 calls/s on main): the first look waits 2 calls' worth,
        // where the full rate would have taken a third of a second.
        assert!(order[0].1 >= now + 500 * MS, "{order:?}");
    }

    /// Calls paid for a look (charged), and calls the client made outside a grant (a
    /// load balancer being made, a write, a job poll, a retry: no grant paid for them,
    /// the client's count says they were made), delay pending looks alike, and leave
    /// the reserve to the settled ones.
    #[test]
    fn calls_outside_a_grant_delay_pending_looks_and_leave_the_reserve_to_settled_ones() {
        // How the 6 calls are spent.
        type Spend = fn(&mut Schedule, Instant);
        let cases: [(&str, Spend); 2] = [
            ("charged", |s, at| s.charge(Product::Clb, 6.0, at)),
            ("made outside a grant", |s, at| {
                s.calls_made(Product::Clb, 6.0, at)
            }),
        ];
        let names = |grants: Vec<Grant>| -> Vec<String> {
            grants.into_iter().map(|g| g.service.name).collect()
        };
        for (what, spend) in cases {
            let start = Instant::now();
            // 4 calls/s: main 3 calls/s (burst 3), reserve 1 call/s (burst 2).
            let mut s = schedule(4.0, start);
            look(&mut s, "s0", Priority::Settled, start);
            look(&mut s, "p", Priority::Pending, start + 9500 * MS);
            let at = start + Duration::from_secs(10);
            // Main 3 - 6 = -3; the reserve keeps its 2.
            spend(&mut s, at - MS);
            assert_eq!(
                names(s.grant(at)),
                ["s0"],
                "{what}: the reserve's settled look"
            );
            // Main -3 + 4.5; the reserve (free now, -1 + 1.5) cannot pay either.
            assert!(s.grant(at + 1500 * MS).is_empty(), "{what}");
            assert_eq!(
                names(s.grant(at + 2050 * MS)),
                ["p"],
                "{what}: main's, after 2 s"
            );
        }
    }

    #[test]
    fn a_granted_looks_own_calls_are_not_paid_twice() {
        // One pending Service at 4 calls/s: a look (3 calls) every 500 ms would take
        // more than the budget, which allows one every 750 ms; paying its calls again
        // would halve that pace.
        let start = Instant::now();
        let looks = |report: bool| {
            let mut s = one_pending(4.0, start);
            let (mut at, mut made, mut t) = (vec![], 0.0, start);
            while t < start + Duration::from_secs(20) {
                t += 50 * MS;
                // The tick reads the client's count first (the look's calls, made
                // before its reconcile reported back), then grants.
                if report {
                    s.calls_made(Product::Clb, made, t);
                    made = 0.0;
                }
                for g in s.grant(t) {
                    at.push(t);
                    made += f64::from(g.calls);
                    s.polled(g.service, Product::Clb, 1, outcome(Priority::Pending), t, t);
                }
            }
            at
        };
        let counted = looks(true);
        assert_eq!(counted, looks(false));
        assert!(counted.len() >= 25, "{} looks in 20 s", counted.len());
    }

    #[test]
    fn an_advance_is_not_kept_past_the_look_it_paid_for() {
        let start = Instant::now();
        let mut s = one_pending(4.0, start);
        let t1 = start + Duration::from_secs(1);
        assert_eq!(s.grant(t1).len(), 1);
        // Its reconcile failed before calling the cloud, and reported back.
        look(&mut s, "p", Priority::Pending, t1);
        s.calls_made(Product::Clb, 0.0, t1);
        // Six calls of something else: none of them is the look's, all are paid by the
        // main bucket (had the advance absorbed the look's three, it would hold -3).
        s.calls_made(Product::Clb, 6.0, t1 + MS);
        let main = s.budget(Product::Clb).main.level;
        assert!((-6.0..-5.9).contains(&main), "main bucket at {main}");
    }

    #[test]
    fn a_settled_look_paid_from_the_reserve_is_not_held_back_by_the_slots() {
        let start = Instant::now();
        // A main budget large enough for every pending look: only the slots hold them.
        let mut s = schedule(1000.0, start);
        settled(&mut s, 1, start);
        for i in 0..20 {
            look(
                &mut s,
                &format!("p{i}"),
                Priority::Pending,
                start + Duration::from_secs(9),
            );
        }
        s.reconcile_queued(key("new"));
        let at = start + Duration::from_secs(10);
        let grants = s.grant(at);
        let settled_granted = grants
            .iter()
            .filter(|g| g.priority == Priority::Settled)
            .count();
        assert_eq!(
            grants.len(),
            5,
            "half of 8 slots for pending looks, and the settled one"
        );
        assert_eq!(settled_granted, 1);
    }

    #[test]
    fn the_queue_shows_waiting_looks_by_class_and_the_oldest_wait() {
        let start = Instant::now();
        let mut s = one_pending(10.0, start);
        look(&mut s, "s", Priority::Settled, start);
        let state = s.queue(start + Duration::from_secs(12));
        assert_eq!(state.waiting, [1, 0, 1]);
        assert_eq!(state.oldest_wait, Duration::from_millis(11_500));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Whatever the mix, over a long run: calls granted stay within the budget
        /// (its bursts plus its rate), every settled Service is looked at within the
        /// stated bound (so none starves), even while writes take up to the whole
        /// budget and a reconcile waits for its slot all along.
        #[test]
        fn the_schedule_keeps_its_budget_and_its_bounds(
            services in proptest::collection::vec((0u8..3, any::<bool>(), 1usize..4), 1..40),
            rate in 2.0f64..20.0,
            writes in 0.0f64..1.0,
            reconcile_waiting in any::<bool>(),
        ) {
            let fast = 500 * MS;
            let slow = Duration::from_secs(10);
            let start = Instant::now();
            let mut s = Schedule::new(fast, slow, rate, 8, start);
            if reconcile_waiting {
                s.reconcile_queued(key("waiting"));
            }
            let (clb_rate, nlb_rate) = budgets(rate);
            let mut last_look: HashMap<String, Instant> = HashMap::new();
            let mut settled_calls = [0.0f64; 2];
            for (i, (class, nlb, listeners)) in services.iter().enumerate() {
                let product = if *nlb { Product::Nlb } else { Product::Clb };
                let priority = Priority::ALL[*class as usize];
                s.polled(key(&format!("s{i}")), product, *listeners, outcome(priority), start, start);
                last_look.insert(format!("s{i}"), start);
                if priority == Priority::Settled {
                    settled_calls[product_index(product)] += look_cost(*listeners);
                }
            }
            let mut spent = [0.0f64; 2];
            let mut made = [0.0f64; 2];
            let step = 50 * MS;
            let run = Duration::from_secs(120);
            let mut t = start;
            let mut worst_gap: HashMap<String, Duration> = HashMap::new();
            while t < start + run {
                t += step;
                // The client's count: the granted looks' calls, and writes and load
                // balancers being made (calls outside any grant).
                for (i, (product, per_second)) in
                    [(Product::Clb, clb_rate), (Product::Nlb, nlb_rate)].into_iter().enumerate()
                {
                    let outside = per_second * writes * step.as_secs_f64();
                    s.calls_made(product, made[i] + outside, t);
                    made[i] = 0.0;
                }
                for g in s.grant(t) {
                    let i: usize = g.service.name[1..].parse().unwrap();
                    let (class, nlb, listeners) = services[i];
                    let product = if nlb { Product::Nlb } else { Product::Clb };
                    spent[product_index(product)] += g.calls as f64;
                    made[product_index(product)] += g.calls as f64;
                    let priority = Priority::ALL[class as usize];
                    let gap = t.duration_since(last_look[&g.service.name]);
                    let worst = worst_gap.entry(g.service.name.clone()).or_default();
                    *worst = (*worst).max(gap);
                    last_look.insert(g.service.name.clone(), t);
                    // Reported back at once, in the same class.
                    s.polled(g.service.clone(), product, listeners, outcome(priority), t, t);
                }
            }
            let secs = run.as_secs_f64();
            for (i, per_second) in [clb_rate, nlb_rate].into_iter().enumerate() {
                // The rate, both buckets' bursts, and one dear look's debt per bucket.
                let bursts = (per_second * 0.75).ceil().max(2.0) + (per_second * 0.25).ceil().max(2.0);
                let allowed = per_second * secs + bursts + 12.0;
                prop_assert!(spent[i] <= allowed, "product {i}: {} > {allowed}", spent[i]);
            }
            // The stated bound: slow + the settled looks' calls over the reserved
            // quarter, plus a debt (a look and a burst) and a second of ticks.
            for (i, (class, nlb, _)) in services.iter().enumerate() {
                if Priority::ALL[*class as usize] != Priority::Settled {
                    continue;
                }
                let p = usize::from(*nlb);
                let per_second = [clb_rate, nlb_rate][p];
                let bound = slow.as_secs_f64() + (settled_calls[p] + 8.0) / (per_second * SETTLED_SHARE) + 1.0;
                if bound < secs / 2.0 {
                    let name = format!("s{i}");
                    prop_assert!(last_look[&name] > start, "{name} never looked at (bound {bound})");
                    prop_assert!(worst_gap[&name].as_secs_f64() <= bound, "{name}: {:?} > {bound}", worst_gap[&name]);
                }
            }
        }
    }
}
