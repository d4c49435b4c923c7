//! Apply, Service side: rollgate's writes to the Service itself: its finalizer, the
//! annotations that remember a load balancer rollgate created and the attached one it
//! serves, and the address in
//! `status.loadBalancer.ingress`. All under the one field manager (`crate::apply`).
use k8s_openapi::api::core::v1::Service;
use serde_json::json;

use super::context::{Context, Error};
use super::service::ServiceSnapshot;
use crate::apply::{Call, Part};
use crate::names::{CREATED_ID_ANNOTATION, LOAD_BALANCER_FINALIZER, SERVED_ATTACHED_ID_ANNOTATION};

/// Adds rollgate's finalizer, before any cloud resource is made for the Service.
pub async fn add_finalizer(service: &ServiceSnapshot, ctx: &Context) -> Result<(), Error> {
    let mut finalizers = service.finalizers.clone();
    finalizers.push(LOAD_BALANCER_FINALIZER.into());
    patch_metadata(
        service,
        ctx,
        json!({"metadata": {"finalizers": finalizers, "resourceVersion": service.resource_version}}),
        "finalizer",
    )
    .await
}

/// Removes rollgate's finalizer (and only it), once the cloud side is cleaned up.
pub async fn remove_finalizer(service: &ServiceSnapshot, ctx: &Context) -> Result<(), Error> {
    let finalizers: Vec<&String> = service
        .finalizers
        .iter()
        .filter(|f| *f != LOAD_BALANCER_FINALIZER)
        .collect();
    patch_metadata(
        service,
        ctx,
        json!({"metadata": {"finalizers": finalizers, "resourceVersion": service.resource_version}}),
        "finalizer",
    )
    .await
}

/// A merge patch of the Service's metadata. Gone (404) is fine; a conflict (409, the
/// `resourceVersion` in the patch is stale) is an error: the finalizer must be in place
/// before any cloud resource is made, so the reconcile is retried.
async fn patch_metadata(
    service: &ServiceSnapshot,
    ctx: &Context,
    patch: serde_json::Value,
    what: &'static str,
) -> Result<(), Error> {
    let (ns, name) = (&service.facts.namespace, &service.facts.name);
    match ctx
        .writer
        .merge_patch::<Service>(ns, name, Part::Object, &patch)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(source) => {
            tracing::debug!(what, service = %name, "Service patch failed");
            Err(crate::apply::Error::new(Call::PatchService, ns, name, source).into())
        }
    }
}

/// Remembers a load balancer rollgate created, so only that one is ever deleted. A
/// failure is the reconcile's error: nothing more is done for the Service until the id
/// is recorded, and the retry's create call (same `ClientToken`) returns the same load
/// balancer, so none is made twice or lost.
pub async fn record_created(
    service: &ServiceSnapshot,
    ctx: &Context,
    id: &str,
) -> Result<(), Error> {
    let patch = json!({"metadata": {"annotations": {CREATED_ID_ANNOTATION: id}}});
    patch_metadata(service, ctx, patch, "created load balancer id").await
}

/// Clears the created load balancer's id, once that load balancer is let go of.
pub async fn forget_created(service: &ServiceSnapshot, ctx: &Context) -> Result<(), Error> {
    let patch = json!({"metadata": {"annotations": {CREATED_ID_ANNOTATION: null}}});
    patch_metadata(service, ctx, patch, "created load balancer id").await
}

/// Records (or clears) the attached load balancer rollgate registers backends in.
pub async fn record_served_attached(
    service: &ServiceSnapshot,
    ctx: &Context,
    id: Option<&str>,
) -> Result<(), Error> {
    let patch = json!({"metadata": {"annotations": {SERVED_ATTACHED_ID_ANNOTATION: id}}});
    patch_metadata(service, ctx, patch, "attached load balancer id").await
}

/// `status.loadBalancer.ingress`: an IP for CLB, a DNS name for NLB. Written only when
/// it differs from what the Service shows.
pub async fn publish_address(service: &ServiceSnapshot, ctx: &Context, address: &str) {
    if service.published_address.as_deref() == Some(address) {
        return;
    }
    let is_ip = address.parse::<std::net::IpAddr>().is_ok();
    let ingress = if is_ip {
        json!([{"ip": address}])
    } else {
        json!([{"hostname": address}])
    };
    let patch = json!({"status": {"loadBalancer": {"ingress": ingress}}});
    if let Err(error) = ctx
        .writer
        .merge_patch::<Service>(
            &service.facts.namespace,
            &service.facts.name,
            Part::Status,
            &patch,
        )
        .await
    {
        tracing::warn!(%error, "could not publish the load balancer address");
    }
}
