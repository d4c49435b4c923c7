//! Warnings about a DaemonSet rollgate does not act on (bad annotations, another
//! updater), each said once while it holds.
use k8s_openapi::api::apps::v1::DaemonSet;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use super::context::Context;
use crate::apply::{event, Topic};

pub(super) async fn warn_once(ds: &DaemonSet, ctx: &Context, reason: &str, message: &str) {
    let uid = ds.uid().unwrap_or_default();
    let warning = event(EventType::Warning, reason, "Validate", message.to_string());
    let reference = ds.object_ref(&());
    let said = ctx
        .events
        .publish_once(&ctx.said, &uid, Topic::Warning, &reference, warning);
    if said.await {
        tracing::warn!(reason, message, "DaemonSet not acted upon");
    }
}
