//! One product's cloud-call budget: its rate, the reserve kept for settled Services,
//! debt for calls made outside a grant, and the slow-down after throttling.
use alibaba_lb::action_quotas::looks_per_second;
use alibaba_lb::{Product, RateLimit, Tokens};
use tokio::time::Instant;

use super::look::look_cost;

/// The share of the looks its actions' quotas allow (at the client's own share of
/// them) that the scheduler grants: a little under, so a granted look never waits in
/// the client's bucket of one of its actions.
const LOOK_SHARE: f64 = 0.9;
/// The share of a budget kept for settled Services while one is waiting.
pub(super) const SETTLED_SHARE: f64 = 0.25;
/// The lowest a throttled product's rate goes, as a share of its budget.
const SLOWEST: f64 = 0.125;
/// How fast a throttled product's rate climbs back (share of its budget per second).
const RECOVERY_PER_SECOND: f64 = 0.1;

/// One product's budget and its state.
#[derive(Clone, Debug)]
pub(super) struct Budget {
    /// Calls per second when not throttled.
    per_second: f64,
    /// What each bucket holds at most: `[main, reserve]`.
    bursts: [u32; 2],
    /// Taken in priority order.
    pub(super) main: Tokens,
    /// Kept for settled Services while one waits.
    reserve: Tokens,
    /// The rate's share after the last throttling answer, and when that was.
    throttled: Option<(f64, Instant)>,
}

impl Budget {
    /// `burst`: what both buckets hold together (see [`bursts`]). The reserve holds a
    /// second of its share, the main bucket the rest, and at least a second of its own.
    pub(super) fn new(per_second: f64, burst: f64, now: Instant) -> Self {
        let second_of = |share: f64| (per_second * share).ceil().max(2.0);
        let reserve = second_of(SETTLED_SHARE);
        let main = (burst.ceil() - reserve).max(second_of(1.0 - SETTLED_SHARE));
        let full = |level: f64| Tokens { level, at: now };
        Budget {
            per_second,
            bursts: [main as u32, reserve as u32],
            main: full(main),
            reserve: full(reserve),
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

    /// One bucket's limit at `now`: its share of the rate, and its burst.
    fn limit(&self, reserve: bool, now: Instant) -> RateLimit {
        let (share, burst) = match reserve {
            true => (SETTLED_SHARE, self.bursts[1]),
            false => (1.0 - SETTLED_SHARE, self.bursts[0]),
        };
        RateLimit {
            per_second: self.per_second * share * self.pace(now),
            burst,
        }
    }

    /// Takes `cost` from a bucket if it holds it (or, for a look dearer than the
    /// whole burst, if the bucket is full: the rest becomes debt).
    pub(super) fn take(&mut self, reserve: bool, cost: f64, now: Instant) -> bool {
        let limit = self.limit(reserve, now);
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
    pub(super) fn charge(&mut self, cost: f64, now: Instant) {
        let main = self.limit(false, now);
        self.main.charge(main, cost, now);
    }

    pub(super) fn throttle(&mut self, now: Instant) {
        let share = (self.pace(now) / 2.0).max(SLOWEST);
        // Refill at the old pace up to now, then stop: nothing more goes at once.
        let (main, reserve) = (self.limit(false, now), self.limit(true, now));
        self.main.refill(main, now);
        self.reserve.refill(reserve, now);
        self.main.level = self.main.level.min(0.0);
        self.reserve.level = self.reserve.level.min(0.0);
        self.throttled = Some((share, now));
    }
}

/// What bounds the cloud calls of one product in the region the controller serves:
/// `--cloud-rate-limit`, and whether each action keeps to its own quota as well
/// (`--cloud-action-quotas`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CloudPace {
    pub per_second: f64,
    pub action_quotas: bool,
}

impl CloudPace {
    /// `per_second` per product, each action inside its quota (the default).
    pub fn within_quotas(per_second: f64) -> Self {
        CloudPace {
            per_second,
            action_quotas: true,
        }
    }
}

/// The per-product budgets: the client's rate, capped (when actions keep to their
/// quotas) by the looks the quotas of a look's actions allow: NLB's health report
/// (10/s) holds its looks to about 8 a second, CLB's reads (20/s) to about 16.
pub fn budgets(pace: CloudPace) -> (f64, f64) {
    let rate = pace.per_second.max(0.1);
    (
        rate.min(look_cap(pace, Product::Clb)),
        rate.min(look_cap(pace, Product::Nlb)),
    )
}

/// What each product's buckets hold together: what the client's own bucket holds
/// (two seconds of `--cloud-rate-limit`), capped by a second of the looks the
/// actions' quotas allow (their buckets in the client hold a second each). Less
/// would make the scheduler slower than the client after a burst of writes: 25
/// backend adds left its buckets (11 calls at 10/s) in debt for 1 s longer than the
/// client's (20 calls), and a pending Service's looks came every 1.2 s meanwhile.
pub(super) fn bursts(pace: CloudPace) -> (f64, f64) {
    let client = (pace.per_second.max(0.1) * 2.0).ceil();
    (
        client.min(look_cap(pace, Product::Clb)),
        client.min(look_cap(pace, Product::Nlb)),
    )
}

/// Calls per second the quotas of a look's actions allow (none without quotas).
fn look_cap(pace: CloudPace, product: Product) -> f64 {
    match pace.action_quotas {
        true => look_cost(1) * looks_per_second(product) * LOOK_SHARE,
        false => f64::INFINITY,
    }
}
