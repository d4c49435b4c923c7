//! Letting go of a Service (deleted, or no longer one of rollgate's classes): the
//! cloud-side cleanup its finalizer waits for (delete the load balancer rollgate
//! created, or take rollgate's backends out of an attached one), then the finalizer,
//! then everything rollgate remembered of it.
//!
//! Why not kube-runtime's `finalizer` helper: it runs its cleanup only on deletion, but
//! rollgate also lets go of a Service that leaves its classes (its type or class
//! changed) and is not deleted, so half of the lifecycle would stay hand-written here
//! with a second way of removing the finalizer; and the helper patches with
//! `PatchParams::default()` through an `Api` of its own, so its finalizer writes would
//! carry no field manager and bypass the apply layer (`crate::apply`), where every
//! rollgate write names the one manager and a Service gone meanwhile (404) is not an
//! error.
use kube::runtime::reflector::ObjectRef;

use super::context::{Context, Error};
use super::lb_spec::lb_spec;
use super::model::{owner_description, GroupChanges};
use super::orphans::gated_pods;
use super::service::ServiceSnapshot;
use super::service_writes::remove_finalizer;

/// Lets go of the Service: cleans up and removes the finalizer when rollgate holds
/// one, forgets the Service, and hands its gated pods to the orphan worker.
pub async fn release(service: &ServiceSnapshot, ctx: &Context) -> Result<(), Error> {
    if service.holds_finalizer() {
        clean_up_cloud(service, ctx).await?;
        remove_finalizer(service, ctx).await?;
    }
    forget(service, ctx);
    let facts = &service.facts;
    for pod in gated_pods(&ctx.pods, &facts.namespace, &facts.name) {
        let _ = ctx.orphans.send(ObjectRef::from_obj(&*pod));
    }
    Ok(())
}

/// Deletes the load balancer rollgate created, or removes rollgate's own backends
/// (those whose description names this Service) from an attached one, which stays.
async fn clean_up_cloud(service: &ServiceSnapshot, ctx: &Context) -> Result<(), Error> {
    let product = service.made_with;
    let cluster_id = &ctx.settings.cluster_id;
    match (&service.attached_id, &service.created_id) {
        (None, Some(created)) => {
            ctx.cloud.delete(product, created).await?;
            tracing::info!(
                load_balancer = created,
                "deleted the load balancer rollgate created"
            );
        }
        (Some(attached), _) => {
            let vpc_id = ctx.settings.vpc_id.as_deref();
            if let Ok(spec) = lb_spec(service, product, cluster_id, vpc_id) {
                let lb = ctx.cloud.ensure(&service.uid, product, &spec).await?;
                let facts = &service.facts;
                for group in &lb.listeners {
                    let owner = owner_description(
                        group.listener_port,
                        &facts.name,
                        &facts.namespace,
                        cluster_id,
                    );
                    let state = ctx.cloud.read_group(product, group).await?;
                    let ours: Vec<_> = state
                        .backends
                        .iter()
                        .filter(|b| b.description == owner)
                        .map(|b| b.key.clone())
                        .collect();
                    let changes = GroupChanges {
                        remove: ours,
                        ..Default::default()
                    };
                    ctx.cloud.apply(product, group, &changes).await?;
                }
                tracing::info!(load_balancer = ?Some(attached), "removed rollgate's backends from the attached load balancer");
            }
        }
        (None, None) => {}
    }
    Ok(())
}

/// Drops what rollgate remembers of the Service: its load balancer, its polls, its
/// metrics.
pub fn forget(service: &ServiceSnapshot, ctx: &Context) {
    ctx.cloud.forget(&service.uid);
    ctx.placer.forget(&service.uid);
    ctx.poller.forget(&service.key());
    ctx.metrics
        .forget(&service.facts.namespace, &service.facts.name);
}
