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
//!   decided them. Reads are: a reconcile an event brought that finds no reading young
//!   enough asks for a look due now (`Schedule::look_now`) instead of reading, so the
//!   Services with pod events do not take the budget from those without. Every call a product's client makes counts against its budget: the
//!   scheduler reads the client's call count each tick (`calls_made`), and what a
//!   granted look paid for at its grant is not paid twice; the rest (load balancers
//!   ensured, backend writes and NLB job polls, a Service's first read, retries) is
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
//!   The runner starts queued reconciles first come, first served; a look once
//!   granted skips that queue on a lane of its own (`Poller::ahead`), or the budget
//!   and the slot cap above would bound when it is granted but not when it runs.
//! - **Budget.** One per product (the controller serves one region, so per product and
//!   region): `--cloud-rate-limit` calls/s, capped by the quotas of the actions a look
//!   makes (`alibaba_lb::action_quotas::look_actions`): a look costs 3 calls per
//!   listener, one of each (the group's backends, their health, and which group the
//!   listener forwards to), so NLB, whose `GetListenerHealthStatus` allows 10/s, looks
//!   about 8 times a second at most. The client paces each action under its quota
//!   besides; the cap keeps granted looks from waiting in those buckets. The budget's
//!   two buckets hold together what the client's own bucket holds (two seconds of
//!   the rate, capped by a second of the looks the quotas allow), so a burst of writes
//!   delays the looks no longer than it delays the client.
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
//!
//! `Schedule` (schedule.rs) is the pure decision (which looks go now, given the queue,
//! the budgets and the time), table- and property-tested (tests.rs); budget.rs holds
//! one product's rate and reserve, look.rs what a look is (its class, what the
//! reconcile found, what it costs); `Poller` (driver.rs) is the thin async shell.
mod budget;
mod driver;
mod look;
mod schedule;
#[cfg(test)]
mod tests;

pub use budget::{budgets, CloudPace};
pub use driver::{CallCounts, Poller};
pub use look::{look_cost, Outcome, Priority};
pub use schedule::{Grant, QueueState, ReadRule, Schedule};
