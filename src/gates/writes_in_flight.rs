//! The gate condition writes reconciles left in flight (`conditions::send_conditions`):
//! which pods' gates have a write on its way, what a write still waiting for its slot
//! will send (the latest plan's: a later plan replaces it), whether a later plan wanted
//! to write a gate whose write was already being sent, and the slots all such writes
//! share.
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use tokio::sync::{Notify, Semaphore, SemaphorePermit};

use super::model::{ConditionWrite, GatePod};
use crate::apply::CALLS_IN_FLIGHT;
use crate::object::CachedPod;

/// A write as a plan decided it: the pod as the plan read it, the condition, and when
/// the cloud reading behind it was taken (the flip latency counts from it).
#[derive(Clone, Debug)]
pub struct PlannedWrite {
    pub pod: Arc<CachedPod>,
    pub view: GatePod,
    pub write: ConditionWrite,
    pub observed_at: Timestamp,
}

/// One gate's write in flight.
#[derive(Debug)]
struct InFlight {
    /// What it will send, until it takes its slot (`None` from then on).
    queued: Option<PlannedWrite>,
    /// A later plan's write came while this one was being sent (too late to replace).
    superseded: bool,
}

/// Gate condition writes sent and not answered yet, by pod UID and Service name (with
/// whether a later plan's write to the same gate was left out meanwhile), and the
/// slots they take turns in: `CALLS_IN_FLIGHT` at once in all, however many reconciles
/// left writes in flight, so that overlapping batches do not crowd the API server that
/// every flip waits on.
#[derive(Debug)]
pub struct WritesInFlight {
    claimed: Mutex<HashMap<(String, String), InFlight>>,
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
    /// Then this later write replaces the one in flight if that one still waits for
    /// its slot (a gate whose "not registered" reason waits behind 500 others is sent
    /// True at once, not False and then True), or else marks it superseded
    /// ([`Claim::release`] says so when it is answered).
    pub(super) fn claim(
        self: &Arc<Self>,
        uid: &str,
        service: &str,
        planned: PlannedWrite,
    ) -> Option<Claim> {
        let key = (uid.to_string(), service.to_string());
        match self.claimed.lock().unwrap().entry(key.clone()) {
            Entry::Occupied(mut in_flight) => {
                let in_flight = in_flight.get_mut();
                match &mut in_flight.queued {
                    Some(queued) => *queued = planned,
                    None => in_flight.superseded = true,
                }
                None
            }
            Entry::Vacant(free) => {
                free.insert(InFlight {
                    queued: Some(planned),
                    superseded: false,
                });
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

/// One write in flight; released when answered ([`Claim::release`]) or dropped,
/// however its task ends.
pub(super) struct Claim {
    in_flight: Arc<WritesInFlight>,
    key: (String, String),
    released: bool,
}

impl Claim {
    /// What to send, once the write has its slot: the latest plan's write for this
    /// gate. From then on a later plan's write no longer replaces it.
    pub(super) fn take(&self) -> Option<PlannedWrite> {
        let mut claimed = self.in_flight.claimed.lock().unwrap();
        claimed.get_mut(&self.key)?.queued.take()
    }

    /// Ends the claim once the write is answered: true when a later plan wanted to
    /// write this gate while it was being sent, and was left out. Nothing else would
    /// plan it again soon: the pod event of the write in flight is rollgate's own
    /// echo, which triggers no reconcile, and the plan that left it out counted the
    /// gate as written. The caller brings the Service's next look forward.
    pub(super) fn release(mut self) -> bool {
        self.end()
    }

    fn end(&mut self) -> bool {
        if std::mem::replace(&mut self.released, true) {
            return false;
        }
        let mut claimed = self.in_flight.claimed.lock().unwrap();
        let superseded = claimed.remove(&self.key).is_some_and(|w| w.superseded);
        if claimed.is_empty() {
            self.in_flight.emptied.notify_waiters();
        }
        superseded
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
        let (a, b) = (
            writes.claim("uid-a", "web", planned(false)),
            writes.claim("uid-b", "web", planned(false)),
        );
        assert!(
            writes.claim("uid-a", "web", planned(false)).is_none(),
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

        let stuck = writes.claim("uid-c", "web", planned(false));
        let start = tokio::time::Instant::now();
        writes.drained(Duration::from_secs(5)).await;
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(5),
            "not past the limit"
        );
        drop(stuck);
    }

    fn planned(status: bool) -> PlannedWrite {
        let pod = CachedPod::default();
        PlannedWrite {
            view: crate::gates::pods::gate_pod(&pod, "web", true),
            pod: Arc::new(pod),
            write: ConditionWrite {
                pod: "web-1".into(),
                uid: "uid-a".into(),
                status,
                reason: crate::names::GateReason::BackendNotRegistered,
                message: String::new(),
            },
            observed_at: Timestamp::UNIX_EPOCH,
        }
    }

    #[test]
    fn a_later_write_replaces_one_waiting_for_its_slot_and_supersedes_one_being_sent() {
        let writes = Arc::new(WritesInFlight::default());
        let first = writes.claim("uid-a", "web", planned(false)).unwrap();
        let alone = writes.claim("uid-b", "web", planned(false)).unwrap();
        let other_service = writes.claim("uid-a", "api", planned(false)).unwrap();
        assert!(writes.claim("uid-a", "web", planned(true)).is_none());
        let sent = first.take().expect("the write to send");
        assert!(
            sent.write.status,
            "the later plan's write replaced the queued one"
        );
        assert!(first.take().is_none(), "taken once");
        assert!(writes.claim("uid-a", "web", planned(false)).is_none());
        assert!(
            first.release(),
            "a later write came while it was being sent"
        );
        assert!(alone.take().is_some());
        assert!(!alone.release(), "nothing wanted uid-b's gate meanwhile");
        assert!(
            !other_service.release(),
            "another Service's gate is another write"
        );
        let next = writes
            .claim("uid-a", "web", planned(false))
            .expect("free once released");
        assert!(!next.release(), "the mark went with the write it was on");
        assert!(writes.is_empty());
    }
}
