//! A Service moved off a load balancer the user named (`...-loadbalancer-id` changed to
//! another, or removed): rollgate's listeners, groups and backends leave the one it
//! served, and everything else there (the user's listeners, groups and backends) stays. Which one it served is
//! recorded on the Service (`rollgate.io/attached-load-balancer-id`) before any backend
//! is registered in it, so a move is seen even across a restart.
use super::plan::{attached_move, AttachedMove};
use crate::gates::cleanup::remove_own_backends;
use crate::gates::context::{Context, Error};
use crate::gates::service::ServiceSnapshot;
use crate::gates::service_writes::record_served_attached;
use crate::gates::unwanted_wiring::remove_unwanted;

/// Acts on [`attached_move`] (`plan`). Returns whether the Service moved off a load balancer
/// (the record patch brings the next reconcile, which serves the new one).
pub async fn follow_attached_move(service: &ServiceSnapshot, ctx: &Context) -> Result<bool, Error> {
    match attached_move(
        service.served_attached_id.as_deref(),
        service.attached_id.as_deref(),
        service.created_id.as_deref(),
    ) {
        AttachedMove::Stay => Ok(false),
        AttachedMove::Record(now) => {
            record_served_attached(service, ctx, Some(&now)).await?;
            Ok(false)
        }
        AttachedMove::LeaveFormer {
            former,
            remove_backends,
            now,
        } => {
            if remove_backends {
                // The listeners rollgate made there and their groups go (an NLB group
                // belongs to the region: left behind, the next load balancer's listener
                // would find it by name and share it with the former one), then any
                // backend of rollgate's left in a group it keeps (a user's listener
                // forwards to it).
                let facts = &service.facts;
                let product = service.made_with;
                let wiring =
                    remove_unwanted(ctx, product, &former, &[], &facts.name, &facts.namespace)
                        .await?;
                let removed = remove_own_backends(service, ctx, product, &former).await?;
                tracing::info!(
                    load_balancer = former,
                    now = now.as_deref().unwrap_or("-"),
                    listeners = wiring.listeners.len(),
                    groups = wiring.groups.len(),
                    removed,
                    "took rollgate's listeners, groups and backends off the load balancer the Service no longer names"
                );
            }
            record_served_attached(service, ctx, now.as_deref()).await?;
            Ok(true)
        }
    }
}
