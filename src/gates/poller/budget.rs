//! One product's cloud-call budget: its rate, the reserve kept for settled Services,
//! debt for calls made outside a grant, and the slow-down after throttling.
use alibaba_lb::{RateLimit, Tokens};
use tokio::time::Instant;

/// NLB health calls per second we allow ourselves (the API's limit is 10 per region).
const NLB_HEALTH_CALLS_PER_SECOND: f64 = 8.0;
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
    /// Taken in priority order.
    pub(super) main: Tokens,
    /// Kept for settled Services while one waits.
    reserve: Tokens,
    /// The rate's share after the last throttling answer, and when that was.
    throttled: Option<(f64, Instant)>,
}

impl Budget {
    pub(super) fn new(per_second: f64, now: Instant) -> Self {
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
    pub(super) fn take(&mut self, reserve: bool, cost: f64, now: Instant) -> bool {
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
    pub(super) fn charge(&mut self, cost: f64, now: Instant) {
        let main = self.limit(1.0 - SETTLED_SHARE, now);
        self.main.charge(main, cost, now);
    }

    pub(super) fn throttle(&mut self, now: Instant) {
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

/// The per-product budgets: CLB takes the client's rate; NLB the same, capped by its
/// health API's limit.
pub fn budgets(cloud_rate_limit: f64) -> (f64, f64) {
    let rate = cloud_rate_limit.max(0.1);
    (rate, rate.min(2.0 * NLB_HEALTH_CALLS_PER_SECOND))
}
