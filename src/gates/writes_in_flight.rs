//! The gate condition writes reconciles left in flight (`conditions::send_conditions`):
//! which pods' gates have a write on its way, and the slots all such writes share.
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};

use crate::apply::CALLS_IN_FLIGHT;

/// Gate condition writes sent and not answered yet, by pod UID and Service name, and
/// the slots they take turns in: `CALLS_IN_FLIGHT` at once in all, however many
/// reconciles left writes in flight, so that overlapping batches do not crowd the API
/// server that every flip waits on.
#[derive(Debug)]
pub struct WritesInFlight {
    claimed: Mutex<HashSet<(String, String)>>,
    slots: Semaphore,
}

impl Default for WritesInFlight {
    fn default() -> Self {
        WritesInFlight {
            claimed: Mutex::default(),
            slots: Semaphore::new(CALLS_IN_FLIGHT),
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
        while !self.is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
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
        self.in_flight.claimed.lock().unwrap().remove(&self.key);
    }
}
