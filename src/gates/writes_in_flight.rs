//! The gate condition writes reconciles left in flight (`conditions::send_conditions`):
//! which pods' gates have a write on its way, whether a later plan wanted to write one
//! of them meanwhile, and the slots all such writes share.
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore, SemaphorePermit};

use crate::apply::CALLS_IN_FLIGHT;

/// Gate condition writes sent and not answered yet, by pod UID and Service name (with
/// whether a later plan's write to the same gate was left out meanwhile), and the
/// slots they take turns in: `CALLS_IN_FLIGHT` at once in all, however many reconciles
/// left writes in flight, so that overlapping batches do not crowd the API server that
/// every flip waits on.
#[derive(Debug)]
pub struct WritesInFlight {
    claimed: Mutex<HashMap<(String, String), Superseded>>,
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
    /// The write to this pod's gate of `service`, unless one is in flight already:
    /// then this later write is left out, and the one in flight is marked superseded
    /// ([`Claim::release`] says so when it is answered).
    pub(super) fn claim(self: &Arc<Self>, uid: &str, service: &str) -> Option<Claim> {
        let key = (uid.to_string(), service.to_string());
        match self.claimed.lock().unwrap().entry(key.clone()) {
            Entry::Occupied(mut in_flight) => {
                *in_flight.get_mut() = Superseded(true);
                None
            }
            Entry::Vacant(free) => {
                free.insert(Superseded(false));
                Some(Claim {
                    in_flight: self.clone(),
                    key,
                    released: false,
                })
            }
        }
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

/// Whether a later plan's write to a gate was left out while one was in flight.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Superseded(bool);

/// One write in flight; released when answered ([`Claim::release`]) or dropped,
/// however its task ends.
pub(super) struct Claim {
    in_flight: Arc<WritesInFlight>,
    key: (String, String),
    released: bool,
}

impl Claim {
    /// Ends the claim once the write is answered: true when a later plan wanted to
    /// write this gate meanwhile and was left out. Nothing else would plan it again
    /// soon: the pod event of the write in flight is rollgate's own echo, which
    /// triggers no reconcile, and the plan that left it out counted the gate as
    /// written. The caller brings the Service's next look forward.
    pub(super) fn release(mut self) -> bool {
        self.end()
    }

    fn end(&mut self) -> bool {
        if std::mem::replace(&mut self.released, true) {
            return false;
        }
        let mut claimed = self.in_flight.claimed.lock().unwrap();
        let superseded = claimed.remove(&self.key).unwrap_or_default();
        if claimed.is_empty() {
            self.in_flight.emptied.notify_waiters();
        }
        superseded.0
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.end();
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

    #[test]
    fn a_write_left_out_while_one_is_in_flight_marks_it_superseded_until_released() {
        let writes = Arc::new(WritesInFlight::default());
        let first = writes.claim("uid-a", "web").unwrap();
        let alone = writes.claim("uid-b", "web").unwrap();
        let other_service = writes.claim("uid-a", "api").unwrap();
        assert!(writes.claim("uid-a", "web").is_none(), "left out");
        assert!(first.release(), "a later write was left out meanwhile");
        assert!(!alone.release(), "nothing wanted uid-b's gate meanwhile");
        assert!(
            !other_service.release(),
            "another Service's gate is another write"
        );
        let next = writes.claim("uid-a", "web").expect("free once released");
        assert!(!next.release(), "the mark went with the write it was on");
        assert!(writes.is_empty());
    }
}
