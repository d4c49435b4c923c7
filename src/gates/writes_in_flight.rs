//! The gate condition writes reconciles left in flight (`conditions::send_conditions`):
//! which pods' gates have a write on its way, and the slots all such writes share.
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore, SemaphorePermit};

use crate::apply::CALLS_IN_FLIGHT;

/// Gate condition writes sent and not answered yet, by pod UID and Service name, and
/// the slots they take turns in: `CALLS_IN_FLIGHT` at once in all, however many
/// reconciles left writes in flight, so that overlapping batches do not crowd the API
/// server that every flip waits on.
#[derive(Debug)]
pub struct WritesInFlight {
    claimed: Mutex<HashSet<(String, String)>>,
    slots: Semaphore,
    /// Told each time the last write in flight is answered (`drained` waits on it).
    emptied: Notify,
}

impl Default for WritesInFlight {
    fn default() -> Self {
        WritesInFlight {
            claimed: Mutex::default(),
            slots: Semaphore::new(CALLS_IN_FLIGHT),
            emptied: Notify::new(),
        }
    }
}

impl WritesInFlight {
    /// The write to this pod's gate of `service`, unless one is in flight already.
    pub(super) fn claim(self: &Arc<Self>, uid: &str, service: &str) -> Option<Claim> {
        let key = (uid.to_string(), service.to_string());
        let claimed = self.claimed.lock().unwrap().insert(key.clone());
        claimed.then(|| Claim {
            in_flight: self.clone(),
            key,
        })
    }

    /// One of the shared slots, held for one write.
    pub(super) async fn slot(&self) -> Option<SemaphorePermit<'_>> {
        // Never closed, so a permit always comes.
        self.slots.acquire().await.ok()
    }

    pub fn is_empty(&self) -> bool {
        self.claimed.lock().unwrap().is_empty()
    }

    /// Waits until every write is answered, or `limit` has passed (on shutdown: a
    /// write cut short is planned again by the next leader).
    pub async fn drained(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            // Registered before the check, so an answer in between is not missed.
            let emptied = self.emptied.notified();
            if self.is_empty() {
                return;
            }
            if tokio::time::timeout_at(deadline, emptied).await.is_err() {
                return;
            }
        }
    }
}

/// One write in flight; released when dropped, however its task ends.
pub(super) struct Claim {
    in_flight: Arc<WritesInFlight>,
    key: (String, String),
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut claimed = self.in_flight.claimed.lock().unwrap();
        claimed.remove(&self.key);
        if claimed.is_empty() {
            self.in_flight.emptied.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn shutdown_waits_for_the_last_write_and_no_longer_than_the_limit() {
        let writes = Arc::new(WritesInFlight::default());
        let (a, b) = (writes.claim("uid-a", "web"), writes.claim("uid-b", "web"));
        assert!(
            writes.claim("uid-a", "web").is_none(),
            "one write per gate at a time"
        );
        let answered = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            drop(a);
            tokio::time::sleep(Duration::from_secs(1)).await;
            drop(b);
        });
        let start = tokio::time::Instant::now();
        writes.drained(Duration::from_secs(5)).await;
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(2),
            "back when the last is answered"
        );
        answered.await.unwrap();

        let stuck = writes.claim("uid-c", "web");
        let start = tokio::time::Instant::now();
        writes.drained(Duration::from_secs(5)).await;
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(5),
            "not past the limit"
        );
        drop(stuck);
    }
}
