//! The Warning Events about a Service's annotations of the Alibaba family that
//! rollgate does not act on (`annotations::not_acted_on`): one per annotation, said once
//! per Service and not again on every reconcile, so a user moving a Service over from
//! Alibaba's cloud controller learns which of its settings have no effect. (It sits
//! below the context that holds it, so the Event's action comes in as an argument.)
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::EventType;

use crate::apply::{event, EventDedup, Events, Topic};
use crate::names::UNSUPPORTED_ANNOTATION_EVENT;

#[derive(Default)]
pub struct AnnotationEvents {
    said: EventDedup,
}

/// The de-duplication key of one annotation of one Service.
fn key(uid: &str, annotation: &str) -> String {
    format!("{uid}/{annotation}")
}

impl AnnotationEvents {
    /// One Warning per annotation in `not_acted_on` not said before about `uid`.
    pub async fn warn(
        &self,
        events: &Events,
        action: &str,
        uid: &str,
        reference: &ObjectReference,
        not_acted_on: &[(String, String)],
    ) {
        for (annotation, note) in not_acted_on {
            let warning = event(
                EventType::Warning,
                UNSUPPORTED_ANNOTATION_EVENT,
                action,
                note.clone(),
            );
            events
                .publish_once(
                    &self.said,
                    &key(uid, annotation),
                    Topic::Warning,
                    reference,
                    warning,
                )
                .await;
        }
    }

    /// The Service is gone (or no longer rollgate's): forget what was said about it.
    pub fn forget(&self, uid: &str) {
        let prefix = key(uid, "");
        self.said.retain(|k| !k.starts_with(&prefix));
    }
}
