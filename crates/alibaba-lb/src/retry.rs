//! Backoff for throttling and 5xx answers, and a client-side token bucket so we do
//! not cause the throttling in the first place.

use std::time::Duration;

use rand::RngExt as _;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// Exponential backoff with "equal jitter": the wait for retry `n` is half of
/// `min(max_delay, base_delay * 2^n)` plus a random part up to the other half, so
/// retries never bunch at zero yet clients spread out.
#[derive(Clone, Debug)]
pub struct RetryPolicy {
    /// Total tries of one request, the first included.
    pub max_attempts: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 8,
            base_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(10),
        }
    }
}

impl RetryPolicy {
    /// The ceiling of the wait before retry number `retry` (1 for the first retry).
    pub fn ceiling(&self, retry: u32) -> Duration {
        let factor = 2u32.saturating_pow(retry.saturating_sub(1).min(20));
        self.base_delay.saturating_mul(factor).min(self.max_delay)
    }

    /// The wait before retry number `retry`, given a uniform random `unit` in [0, 1).
    pub fn delay_with(&self, retry: u32, unit: f64) -> Duration {
        let ceiling = self.ceiling(retry);
        let half = ceiling / 2;
        half + half.mul_f64(unit.clamp(0.0, 1.0))
    }

    pub fn delay(&self, retry: u32) -> Duration {
        self.delay_with(retry, rand::rng().random::<f64>())
    }
}

/// Client-side rate limit: `per_second` sustained, bursts up to `burst`.
#[derive(Clone, Copy, Debug)]
pub struct RateLimit {
    pub per_second: f64,
    pub burst: u32,
}

impl Default for RateLimit {
    fn default() -> Self {
        // Well under the per-API defaults documented for SLB/NLB.
        Self {
            per_second: 10.0,
            burst: 20,
        }
    }
}

/// A token bucket's level at an instant: the pure arithmetic of [`TokenBucket`], kept
/// apart so a scheduler can decide which call goes next without waiting on it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tokens {
    pub level: f64,
    pub at: Instant,
}

impl Tokens {
    /// A full bucket (the burst) at `now`.
    pub fn full(limit: RateLimit, now: Instant) -> Self {
        Tokens {
            level: limit.burst.max(1) as f64,
            at: now,
        }
    }

    /// Refills at the limit's rate up to its burst, as of `now` (an earlier `now`
    /// changes nothing).
    pub fn refill(&mut self, limit: RateLimit, now: Instant) {
        if now > self.at {
            let added = now.duration_since(self.at).as_secs_f64() * limit.per_second.max(0.0);
            self.level = (self.level + added).min(limit.burst.max(1) as f64);
            self.at = now;
        }
    }

    /// Takes `n` tokens if they are there at `now`.
    pub fn try_take(&mut self, limit: RateLimit, n: f64, now: Instant) -> bool {
        self.refill(limit, now);
        if self.level >= n {
            self.level -= n;
            return true;
        }
        false
    }

    /// Takes `n` tokens whatever the level (calls already made, or one dearer than
    /// the burst): the debt delays the next calls until it is paid back.
    pub fn charge(&mut self, limit: RateLimit, n: f64, now: Instant) {
        self.refill(limit, now);
        self.level -= n;
    }

    /// How long until `n` tokens are there (zero when they are).
    pub fn wait_for(&self, limit: RateLimit, n: f64) -> Duration {
        let missing = n - self.level;
        if missing <= 0.0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(missing / limit.per_second.max(0.001))
    }
}

#[derive(Debug)]
pub struct TokenBucket {
    limit: RateLimit,
    state: Mutex<Tokens>,
}

impl TokenBucket {
    pub fn new(limit: RateLimit) -> Self {
        Self {
            state: Mutex::new(Tokens::full(limit, Instant::now())),
            limit,
        }
    }

    /// Waits until a token is free and takes it.
    pub async fn acquire(&self) {
        loop {
            let wait = {
                let mut tokens = self.state.lock().await;
                if tokens.try_take(self.limit, 1.0, Instant::now()) {
                    return;
                }
                tokens.wait_for(self.limit, 1.0)
            };
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceiling_doubles_until_the_cap() {
        let policy = RetryPolicy {
            max_attempts: 10,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(1000),
        };
        assert_eq!(policy.ceiling(1), Duration::from_millis(100));
        assert_eq!(policy.ceiling(2), Duration::from_millis(200));
        assert_eq!(policy.ceiling(4), Duration::from_millis(800));
        assert_eq!(policy.ceiling(5), Duration::from_millis(1000));
        assert_eq!(policy.ceiling(60), Duration::from_millis(1000));
    }

    #[test]
    fn jitter_stays_between_half_and_full_ceiling() {
        let policy = RetryPolicy::default();
        for retry in 1..8 {
            let ceiling = policy.ceiling(retry);
            assert_eq!(policy.delay_with(retry, 0.0), ceiling / 2);
            assert!(policy.delay_with(retry, 0.999) <= ceiling);
            let random = policy.delay(retry);
            assert!(
                random >= ceiling / 2 && random <= ceiling,
                "{random:?} vs {ceiling:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn token_bucket_allows_the_burst_then_paces() {
        let bucket = TokenBucket::new(RateLimit {
            per_second: 10.0,
            burst: 3,
        });
        let start = Instant::now();
        for _ in 0..3 {
            bucket.acquire().await;
        }
        assert!(
            start.elapsed() < Duration::from_millis(5),
            "burst should be immediate"
        );
        for _ in 0..5 {
            bucket.acquire().await;
        }
        // Five more tokens at 10/s take about half a second.
        let elapsed = start.elapsed();
        assert!(elapsed >= Duration::from_millis(490), "{elapsed:?}");
        assert!(elapsed < Duration::from_millis(700), "{elapsed:?}");
    }

    #[test]
    fn tokens_refill_to_the_burst_take_when_there_and_charge_into_debt() {
        let limit = RateLimit {
            per_second: 10.0,
            burst: 4,
        };
        let start = Instant::now();
        let mut tokens = Tokens::full(limit, start);
        assert!(tokens.try_take(limit, 3.0, start));
        assert!(!tokens.try_take(limit, 2.0, start), "1 left");
        let close = |wait: Duration, seconds: f64| (wait.as_secs_f64() - seconds).abs() < 1e-6;
        assert!(close(tokens.wait_for(limit, 2.0), 0.1));
        assert!(tokens.try_take(limit, 2.0, start + Duration::from_millis(100)));
        // A long pause refills to the burst only.
        tokens.refill(limit, start + Duration::from_secs(60));
        assert_eq!(tokens.level, 4.0);
        // Calls made without asking: a debt, paid back before the next call.
        tokens.charge(limit, 20.0, start + Duration::from_secs(60));
        assert_eq!(tokens.level, -16.0);
        assert!(close(tokens.wait_for(limit, 1.0), 1.7));
    }
}
