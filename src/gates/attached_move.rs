//! A Service moved off a load balancer the user named (`...-loadbalancer-id` changed to
//! another, or removed): rollgate's listeners, groups and backends leave the one it
//! served, and everything else there (the user's listeners, groups and backends) stays. Which one it served is
//! recorded on the Service (`rollgate.io/attached-load-balancer-id`) before any backend
//! is registered in it, so a move is seen even across a restart.
use super::cleanup::{cleanup_steps, remove_own_backends, CleanupStep};
use super::context::{Context, Error};
use super::service::ServiceSnapshot;
use super::service_writes::record_served_attached;
use super::stale::remove_unwanted;

/// What to do about the attached load balancer on record (pure).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttachedMove {
    /// The record is right: nothing to do.
    Stay,
    /// Nothing recorded yet (a new Service, or one served by an earlier version):
    /// record the attached one before registering anything in it.
    Record(String),
    /// The user named another load balancer, or none: take rollgate's backends out of
    /// the former one (unless it is the one rollgate created, whose own cleanup runs),
    /// then record the current one (`None`: clear the record).
    LeaveFormer {
        former: String,
        remove_backends: bool,
        now: Option<String>,
    },
}

/// Compares the record with the annotation. `created` is the load balancer rollgate
/// made, let go of by its own rules (`cleanup::let_go_of_replaced`).
pub fn attached_move(
    served: Option<&str>,
    attached: Option<&str>,
    created: Option<&str>,
) -> AttachedMove {
    match (served, attached) {
        (None, None) => AttachedMove::Stay,
        (None, Some(now)) => AttachedMove::Record(now.to_string()),
        (Some(former), now) if Some(former) == now => AttachedMove::Stay,
        (Some(former), now) => AttachedMove::LeaveFormer {
            former: former.to_string(),
            remove_backends: Some(former) != created,
            now: now.map(str::to_string),
        },
    }
}

/// The steps of letting go of a Service (`cleanup::cleanup_steps`), with the attached
/// load balancer it served before, when the user named another and the Service went
/// before that move was acted on.
pub fn release_steps(service: &ServiceSnapshot) -> Vec<CleanupStep> {
    let attached = service.attached_id.as_deref();
    let created = service.created_id.as_deref();
    let mut steps = Vec::new();
    if let AttachedMove::LeaveFormer {
        former,
        remove_backends: true,
        ..
    } = attached_move(service.served_attached_id.as_deref(), attached, created)
    {
        steps.push(CleanupStep::RemoveBackends(former));
    }
    steps.extend(cleanup_steps(attached, created, service.preserve_on_delete));
    steps
}

/// Acts on [`attached_move`]. Returns whether the Service moved off a load balancer
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What the case is about, the served, attached and created ids, the move.
    type Case<'a> = (
        &'a str,
        Option<&'a str>,
        Option<&'a str>,
        Option<&'a str>,
        AttachedMove,
    );

    #[test]
    fn a_move_off_the_served_load_balancer_takes_our_backends_out_of_it_once() {
        let leave = |former: &str, remove: bool, now: Option<&str>| AttachedMove::LeaveFormer {
            former: former.into(),
            remove_backends: remove,
            now: now.map(str::to_string),
        };
        #[rustfmt::skip]
        let cases: &[Case] = &[
            ("nothing named, nothing served", None, None, None, AttachedMove::Stay),
            ("a created one only", None, None, Some("lb-made"), AttachedMove::Stay),
            ("first served: recorded before anything is registered", None, Some("lb-a"), None, AttachedMove::Record("lb-a".into())),
            ("served and still named", Some("lb-a"), Some("lb-a"), None, AttachedMove::Stay),
            ("attached to attached", Some("lb-a"), Some("lb-b"), None, leave("lb-a", true, Some("lb-b"))),
            ("attached to none (rollgate will create one)", Some("lb-a"), None, None, leave("lb-a", true, None)),
            ("the former one is rollgate's own: its cleanup rules apply", Some("lb-made"), Some("lb-b"), Some("lb-made"), leave("lb-made", false, Some("lb-b"))),
        ];
        for (case, served, attached, created, want) in cases {
            assert_eq!(&attached_move(*served, *attached, *created), want, "{case}");
        }
    }
}
