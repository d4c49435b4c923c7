//! The scheduler's pure decision: which looks go now, given the queue of Services,
//! the reconciles waiting, the budgets and the time (every method takes `now`).
use std::collections::{HashMap, HashSet};
use std::time::Duration;

use alibaba_lb::Product;
use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::ObjectRef;
use tokio::time::Instant;

use super::budget::{budgets, bursts, Budget, CloudPace};
use super::look::{look_cost, Outcome, Priority};

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
    /// When a look was last asked for soon ([`Schedule::look_again_soon`]).
    soon: Option<Instant>,
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

/// A look granted now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub service: ObjectRef<Service>,
    pub priority: Priority,
    /// Calls the look costs (see [`look_cost`]).
    pub calls: u32,
}

/// How a reconcile comes by the cloud's state of its Service ([`Schedule::read_rule`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadRule {
    /// A look was granted: read the cloud.
    Read,
    /// Reuse a reading this young, else read the cloud.
    ReuseOrRead(Duration),
    /// Reuse a reading this young, else ask for a look and leave the plan to it.
    ReuseOrAsk(Duration),
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

impl Schedule {
    pub fn new(
        fast: Duration,
        slow: Duration,
        pace: CloudPace,
        slots: usize,
        now: Instant,
    ) -> Self {
        let (clb, nlb) = budgets(pace);
        let (clb_burst, nlb_burst) = bursts(pace);
        Schedule {
            fast,
            slow: slow.max(fast),
            clb: Budget::new(clb, clb_burst, now),
            nlb: Budget::new(nlb, nlb_burst, now),
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

    pub(super) fn budget(&mut self, product: Product) -> &mut Budget {
        match product {
            Product::Clb => &mut self.clb,
            Product::Nlb => &mut self.nlb,
        }
    }

    /// Records a reconcile's outcome: the Service's next look is due one interval
    /// after the reading the plan used (`looked`), not after the reconcile's writes,
    /// so 500 condition writes do not stretch the interval between two looks. A look
    /// granted after the reconcile `started` stays granted: its reconcile is still to
    /// come, and must read the cloud. A look asked for soon after it started stays
    /// soon: the reconcile's plan may have left out the write that asked for it.
    pub fn polled(
        &mut self,
        service: ObjectRef<Service>,
        product: Product,
        listeners: usize,
        outcome: Outcome,
        looked: Instant,
        started: Instant,
    ) {
        let (mut priority, fast) = outcome.next_look();
        let mut interval = if fast { self.fast } else { self.slow };
        let mut due = looked + interval;
        let before = self.entries.get(&service);
        let granted = before.and_then(|e| e.granted).filter(|at| *at > started);
        let soon = before.and_then(|e| e.soon).filter(|at| *at > started);
        if let Some(asked) = soon {
            priority = Priority::Pending;
            interval = self.fast;
            due = due.min(asked + self.fast);
        }
        self.entries.insert(
            service,
            Entry {
                product,
                listeners,
                priority,
                interval,
                due,
                granted,
                soon,
            },
        );
    }

    /// How a reconcile of the Service comes by the cloud's state: a granted look reads
    /// the cloud; any other reconcile reuses a reading no older than the Service's
    /// interval (so never past the moment its next look is due), and, when there is
    /// none, asks for a look in turn ([`Schedule::look_now`]) if the scheduler knows
    /// the Service, or reads the cloud if it does not yet (its first reconcile).
    pub fn read_rule(&self, service: &ObjectRef<Service>) -> ReadRule {
        match self.entries.get(service) {
            Some(entry) if entry.granted.is_some() => ReadRule::Read,
            Some(entry) => ReadRule::ReuseOrAsk(entry.interval),
            None => ReadRule::ReuseOrRead(self.fast),
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

    /// Calls made outside a granted look (writes, a Service's first read).
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

    /// Gate writes a reconcile left in flight failed, or a later plan's write waited
    /// for one of them: the Service's next look comes at the fast interval after `now`
    /// at the latest, first of its class, so its plan writes them (no write is queued
    /// here: the reconcile makes them).
    pub fn look_again_soon(&mut self, service: &ObjectRef<Service>, now: Instant) {
        let due = now + self.fast;
        self.ask(service, due, now);
    }

    /// A reconcile an event brought found no reading young enough to plan on: the
    /// Service's look is due now, as a pending one, and waits its turn with the other
    /// looks. Its reconcile then plans with what the event changed. Without this, such
    /// reconciles read the cloud at once, outside the queue, and at 100 rollouts the
    /// Services with pod events took the budget from those without.
    pub fn look_now(&mut self, service: &ObjectRef<Service>, now: Instant) {
        self.ask(service, now, now);
    }

    /// A look asked for at `now`: pending, due by `due`, and kept so until a
    /// reconcile that started after the ask reports back (see [`Schedule::polled`]).
    fn ask(&mut self, service: &ObjectRef<Service>, due: Instant, now: Instant) {
        let fast = self.fast;
        if let Some(entry) = self.entries.get_mut(service) {
            entry.priority = Priority::Pending;
            entry.interval = fast;
            entry.due = entry.due.min(due);
            entry.soon = Some(now);
        }
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

pub(super) fn product_index(product: Product) -> usize {
    match product {
        Product::Clb => 0,
        Product::Nlb => 1,
    }
}
