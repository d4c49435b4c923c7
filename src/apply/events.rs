//! The Event recorder of one controller: Events about the objects it acts on, under its
//! own reporting controller name; with [`EventDedup`], a Warning or progress Event is
//! said once per change, not on every resync.
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Client;

use super::event_dedup::{EventDedup, Topic};

/// An Event with no related object.
pub fn event(type_: EventType, reason: &str, action: &str, note: String) -> Event {
    Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: action.into(),
        secondary: None,
    }
}

/// One controller's Events: kube's recorder (which also merges repeats into one Event
/// object with a count) under the controller's reporting name.
pub struct Events {
    recorder: Recorder,
}

impl Events {
    /// Events reported by `controller` (one of the controller names of `names`), from
    /// this replica (`POD_NAME`).
    pub fn new(client: Client, controller: &str) -> Self {
        let reporter = Reporter {
            controller: controller.into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Events {
            recorder: Recorder::new(client, reporter),
        }
    }

    /// Publishes an Event about `reference`; a failure is logged, never returned (an
    /// Event is worth no retry of the reconcile).
    pub async fn publish(
        &self,
        reference: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        self.send(reference, event(type_, reason, action, note))
            .await;
    }

    /// Publishes `event` as built (e.g. with a related object); a failure is logged.
    pub async fn publish_event(&self, reference: &ObjectReference, event: Event) {
        self.send(reference, event).await;
    }

    async fn send(&self, reference: &ObjectReference, event: Event) {
        if let Err(e) = self.recorder.publish(&event, reference).await {
            tracing::warn!(error = %e, reason = %event.reason, "could not publish Event");
        }
    }

    /// Publishes `event` about the object with `uid` unless its note is what `said`
    /// holds as said last on `topic` about it. Returns whether it was said.
    pub async fn publish_once(
        &self,
        said: &EventDedup,
        uid: &str,
        topic: Topic,
        reference: &ObjectReference,
        event: Event,
    ) -> bool {
        let note = event.note.as_deref().unwrap_or_default();
        if !said.first_time(uid, topic, note) {
            return false;
        }
        self.send(reference, event).await;
        true
    }

    /// Publishes without waiting: the caller's next write must not wait for an Event.
    pub fn publish_detached(&self, reference: ObjectReference, event: Event) {
        let recorder = self.recorder.clone();
        tokio::spawn(async move {
            if let Err(e) = recorder.publish(&event, &reference).await {
                tracing::debug!(error = %e, reason = %event.reason, "could not publish Event");
            }
        });
    }
}
