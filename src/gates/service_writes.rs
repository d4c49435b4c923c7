//! Apply, Service side: rollgate's writes to the Service itself: its finalizer, the
//! annotations that remember a load balancer rollgate created and the attached one it
//! serves, the server groups it publishes for users (`rollgate.io/server-groups`), and
//! the address in `status.loadBalancer.ingress`. All under the one field manager
//! (`crate::apply`).
use k8s_openapi::api::core::v1::Service;
use serde_json::json;

use super::context::{Context, Error};
use super::published_groups::{encode, needs_write, published_groups};
use super::service::ServiceSnapshot;
use crate::apply::{Call, Part};
use crate::names::{
    CREATED_ID_ANNOTATION, LOAD_BALANCER_FINALIZER, SERVED_ATTACHED_ID_ANNOTATION,
    SERVER_GROUPS_ANNOTATION,
};

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

/// Removes rollgate's finalizer (and only it), once the cloud side is cleaned up, and
/// in the same write the server groups it published: rollgate serves none of them any
/// more (a Service that left rollgate's classes stays, and must not show them).
pub async fn remove_finalizer(service: &ServiceSnapshot, ctx: &Context) -> Result<(), Error> {
    let finalizers: Vec<&String> = service
        .finalizers
        .iter()
        .filter(|f| *f != LOAD_BALANCER_FINALIZER)
        .collect();
    let mut metadata =
        json!({"finalizers": finalizers, "resourceVersion": service.resource_version});
    if service.published_groups.is_some() {
        metadata["annotations"] = json!({SERVER_GROUPS_ANNOTATION: null});
    }
    patch_metadata(service, ctx, json!({ "metadata": metadata }), "finalizer").await
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

/// Publishes the load balancer's listeners and server groups on the Service, only when
/// they differ from what it shows (`published_groups::needs_write`): a steady Service
/// is not written poll after poll. A failure is logged, not the reconcile's error: the
/// next reconcile sees the old value and writes again.
pub async fn publish_server_groups(
    service: &ServiceSnapshot,
    ctx: &Context,
    listeners: &[alibaba_lb::ServerGroupRef],
) {
    let groups = published_groups(listeners);
    if !needs_write(service.published_groups.as_deref(), &groups) {
        return;
    }
    let patch = json!({"metadata": {"annotations": {SERVER_GROUPS_ANNOTATION: encode(&groups)}}});
    if let Err(error) = patch_metadata(service, ctx, patch, "server groups").await {
        tracing::warn!(%error, "could not publish the server groups");
    }
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

#[cfg(test)]
mod tests {
    //! The Service writes against the fake API server (`crate::apply::fake_api`).
    use alibaba_lb::{ListenerProtocol, ServerGroupRef};

    use super::*;
    use crate::apply::fake_api::fake_client;
    use crate::gates::context::test_context;
    use crate::gates::service::ClassSelection;

    fn snapshot(annotations: &[(&str, &str)]) -> ServiceSnapshot {
        let mut svc = crate::testkit::service("shop", "web", "LoadBalancer", annotations);
        svc.metadata.uid = Some("uid-web".into());
        svc.metadata.resource_version = Some("7".into());
        svc.metadata.finalizers = Some(vec![LOAD_BALANCER_FINALIZER.into()]);
        ServiceSnapshot::read(&svc, ClassSelection::Standard)
    }

    fn listeners(group: &str) -> Vec<ServerGroupRef> {
        vec![ServerGroupRef {
            load_balancer_id: "lb-1".into(),
            server_group_id: group.into(),
            listener_port: 80,
            listener_protocol: ListenerProtocol::Tcp,
            listener_id: None,
        }]
    }

    #[tokio::test]
    async fn server_groups_are_written_once_as_rollgate_and_not_again_while_steady() {
        let (client, seen) = fake_client(|_, _| (200, serde_json::json!({})));
        let ctx = test_context(client, &[], &[]);

        publish_server_groups(&snapshot(&[]), &ctx, &listeners("rsp-80")).await;
        let patches = seen.calls_to("PATCH /api/v1/namespaces/shop/services/web");
        assert_eq!(patches.len(), 1, "{patches:?}");
        assert_eq!(patches[0].field_manager(), Some("rollgate"));
        let written = patches[0].body["metadata"]["annotations"][SERVER_GROUPS_ANNOTATION]
            .as_str()
            .expect("the annotation's value")
            .to_string();
        let json: serde_json::Value = serde_json::from_str(&written).unwrap();
        assert_eq!(
            json,
            serde_json::json!([{"port": 80, "protocol": "TCP", "loadBalancerId": "lb-1",
                "serverGroupId": "rsp-80"}])
        );

        // The Service as the next polls see it: nothing more is written.
        let steady = snapshot(&[(SERVER_GROUPS_ANNOTATION, &written)]);
        for _ in 0..3 {
            publish_server_groups(&steady, &ctx, &listeners("rsp-80")).await;
        }
        assert_eq!(seen.calls_to("PATCH").len(), 1, "{:?}", seen.calls());

        // The group changed (recreated behind rollgate's back): written again.
        publish_server_groups(&steady, &ctx, &listeners("rsp-new")).await;
        assert_eq!(seen.calls_to("PATCH").len(), 2);
    }

    #[tokio::test]
    async fn letting_go_removes_the_finalizer_and_the_published_groups_in_one_write() {
        let (client, seen) = fake_client(|_, _| (200, serde_json::json!({})));
        let ctx = test_context(client, &[], &[]);
        let published = snapshot(&[(SERVER_GROUPS_ANNOTATION, "[]")]);
        remove_finalizer(&published, &ctx).await.unwrap();
        remove_finalizer(&snapshot(&[]), &ctx).await.unwrap();
        let patches = seen.calls_to("PATCH");
        assert_eq!(patches.len(), 2);
        let metadata = &patches[0].body["metadata"];
        assert_eq!(metadata["finalizers"], serde_json::json!([]));
        assert_eq!(metadata["resourceVersion"], "7");
        assert!(
            metadata["annotations"]
                .as_object()
                .is_some_and(|a| a[SERVER_GROUPS_ANNOTATION].is_null()),
            "{metadata}"
        );
        // None published: the annotations are left alone.
        assert!(
            patches[1].body["metadata"].get("annotations").is_none(),
            "{}",
            patches[1].body
        );
    }
}
