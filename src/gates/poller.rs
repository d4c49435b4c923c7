//! When to look at a load balancer's health again. Polling is per Service (so per
//! load balancer and its listeners), never per pod: about every second while a gate of
//! the Service is pending, every `slow` otherwise. Each due Service becomes a reconcile
//! trigger on a stream the controller consumes; nothing sleeps in a reconcile.
//!
//! NLB's `GetListenerHealthStatus` allows 10 calls/s per region, so the fast interval
//! of NLB Services stretches with their number to stay under 8 calls/s in all.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use alibaba_lb::Product;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::ObjectRef;
use tokio::time::Instant;

use crate::runtime::Shutdown;

/// How often the scheduler looks for due Services.
const TICK: Duration = Duration::from_millis(100);
/// NLB health calls per second we allow ourselves (the API's limit is 10).
const NLB_HEALTH_CALLS_PER_SECOND: f64 = 8.0;

#[derive(Clone, Debug)]
struct Entry {
    product: Product,
    /// NLB listeners polled per round (one health call each).
    listeners: usize,
    pending: bool,
    next: Instant,
}

#[derive(Clone)]
pub struct Poller {
    fast: Duration,
    slow: Duration,
    entries: Arc<Mutex<HashMap<ObjectRef<Service>, Entry>>>,
}

impl Poller {
    pub fn new(fast: Duration, slow: Duration) -> Self {
        Poller {
            fast,
            slow,
            entries: Arc::default(),
        }
    }

    /// Records the outcome of a reconcile that looked at the cloud at `observed`: the
    /// next poll is due one interval after that look, not after the reconcile's writes,
    /// so 500 condition writes do not stretch the interval between two looks.
    pub fn polled(
        &self,
        service: ObjectRef<Service>,
        product: Product,
        listeners: usize,
        pending: bool,
        observed: Instant,
    ) {
        let mut entries = self.entries.lock().unwrap();
        let mut entry = Entry {
            product,
            listeners,
            pending,
            next: observed,
        };
        entries.insert(service.clone(), entry.clone());
        entry.next += interval(&entries, &entry, self.fast, self.slow);
        entries.insert(service, entry);
    }

    pub fn forget(&self, service: &ObjectRef<Service>) {
        self.entries.lock().unwrap().remove(service);
    }

    /// Services due for a poll, as a stream of reconcile triggers, until shutdown.
    pub fn triggers(
        &self,
        shutdown: Shutdown,
    ) -> impl Stream<Item = ObjectRef<Service>> + Send + 'static {
        let entries = self.entries.clone();
        let (fast, slow) = (self.fast, self.slow);
        let ticks = tokio_stream_interval(TICK);
        let stop = Box::pin(shutdown.requested());
        futures::stream::unfold((ticks, stop), move |(mut ticks, mut stop)| {
            let entries = entries.clone();
            async move {
                loop {
                    tokio::select! {
                        _ = ticks.tick() => {}
                        _ = &mut stop => return None,
                    }
                    let now = Instant::now();
                    let mut entries = entries.lock().unwrap();
                    let due: Vec<ObjectRef<Service>> = entries
                        .iter()
                        .filter(|(_, e)| e.next <= now)
                        .map(|(k, _)| k.clone())
                        .collect();
                    for key in &due {
                        // Not due again until the reconcile reports back (or a slow
                        // interval passes, should that reconcile never come).
                        if let Some(e) = entries.get_mut(key) {
                            e.next = now + slow.max(fast);
                        }
                    }
                    drop(entries);
                    if !due.is_empty() {
                        return Some((futures::stream::iter(due), (ticks, stop)));
                    }
                }
            }
        })
        .flatten()
    }
}

fn tokio_stream_interval(period: Duration) -> tokio::time::Interval {
    let mut interval = tokio::time::interval(period);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    interval
}

/// The wait before the next poll of `entry`.
fn interval(
    entries: &HashMap<ObjectRef<Service>, Entry>,
    entry: &Entry,
    fast: Duration,
    slow: Duration,
) -> Duration {
    if !entry.pending {
        return slow;
    }
    if entry.product != Product::Nlb {
        return fast;
    }
    nlb_fast_interval(
        entries
            .values()
            .filter(|e| e.pending && e.product == Product::Nlb)
            .map(|e| e.listeners.max(1))
            .sum(),
        fast,
    )
    .min(slow.max(fast))
}

/// With `listeners` NLB listeners polled fast, each round takes that many health
/// calls; spread them so the total stays under the API's limit.
pub fn nlb_fast_interval(listeners: usize, fast: Duration) -> Duration {
    let needed = Duration::from_secs_f64(listeners as f64 / NLB_HEALTH_CALLS_PER_SECOND);
    fast.max(needed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nlb_polling_stays_under_the_health_api_limit_at_fifty_services() {
        let fast = Duration::from_secs(1);
        assert_eq!(nlb_fast_interval(1, fast), fast);
        assert_eq!(nlb_fast_interval(8, fast), fast);
        let at_50 = nlb_fast_interval(50, fast);
        let calls_per_second = 50.0 / at_50.as_secs_f64();
        assert!(calls_per_second <= 10.0, "{calls_per_second}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_pending_service_is_polled_fast_and_a_settled_one_slowly() {
        use futures::StreamExt;
        let poller = Poller::new(Duration::from_secs(1), Duration::from_secs(10));
        let (_tx, rx) = tokio::sync::watch::channel(false);
        let shutdown = crate::runtime::Shutdown::from_receiver(rx);
        let pending = ObjectRef::<Service>::new("a").within("ns");
        let settled = ObjectRef::<Service>::new("b").within("ns");
        poller.polled(pending.clone(), Product::Clb, 1, true, Instant::now());
        poller.polled(settled.clone(), Product::Clb, 1, false, Instant::now());
        let mut triggers = Box::pin(poller.triggers(shutdown));
        let start = Instant::now();
        let first = triggers.next().await.unwrap();
        assert_eq!(first, pending);
        assert!(start.elapsed() >= Duration::from_secs(1));
        poller.polled(pending.clone(), Product::Clb, 1, false, Instant::now());
        let second = triggers.next().await.unwrap();
        assert_eq!(second, settled);
        assert!(start.elapsed() >= Duration::from_secs(10));
    }
}
