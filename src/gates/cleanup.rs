//! Letting go of a Service (deleted, or no longer one of rollgate's classes): the
//! cloud-side cleanup its finalizer waits for (delete the load balancer rollgate
//! created, or take rollgate's backends out of an attached or preserved one), then the
//! finalizer, then everything rollgate remembered of it.
//!
//! Deletion never wedges on what is already gone: a load balancer, listener or server
//! group the user deleted first counts as cleaned up. A load balancer is deleted only
//! after its tags are read: one tagged for another cluster is never deleted (one
//! Warning Event says so, and the Service is let go of all the same). What cannot proceed (the cloud
//! unreachable, credentials refused) keeps the finalizer and says why in one Warning
//! Event per cause on the Service, so a Terminating namespace has an explanation.
//!
//! Why not kube-runtime's `finalizer` helper: it runs its cleanup only on deletion, but
//! rollgate also lets go of a Service that leaves its classes (its type or class
//! changed) and is not deleted, so half of the lifecycle would stay hand-written here
//! with a second way of removing the finalizer; and the helper patches with
//! `PatchParams::default()` through an `Api` of its own, so its finalizer writes would
//! carry no field manager and bypass the apply layer (`crate::apply`), where every
//! rollgate write names the one manager and a Service gone meanwhile (404) is not an
//! error.
use alibaba_lb::{Error as CloudError, Product, ResourceTags, Tag};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;

use super::attached::plan::{attached_move, AttachedMove};
use super::cloud;
use super::context::{Context, Error, EVENT_ACTION};
use super::model::{GroupChanges, Owner};
use super::orphans::gated_pods;
use super::reasons;
use super::service::ServiceSnapshot;
use super::service_writes::{finalizer_removed_already, forget_created, remove_finalizer};
use crate::apply::{event, Topic};
use crate::names::{CLEANUP_BLOCKED_EVENT, CLUSTER_ID_TAG, OTHER_CLUSTERS_RESOURCE_EVENT};

/// Lets go of the Service: cleans up and removes the finalizer when rollgate holds
/// one, forgets the Service, and hands its gated pods to the orphan worker.
pub async fn release(service: &ServiceSnapshot, ctx: &Context) -> Result<(), Error> {
    if service.holds_finalizer() {
        if finalizer_removed_already(service, ctx) {
            // Let go of already; `forget` below would drop the Warning's de-duplication
            // and say it again.
            tracing::debug!(service = %service.facts.name, "let go of already: the cache does not show it yet");
            return Ok(());
        }
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

/// One thing to do to a load balancer when letting go of a Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CleanupStep {
    /// Delete it (rollgate created it).
    Delete(String),
    /// Take rollgate's backends of this Service out of every server group it has; the
    /// load balancer stays (the user's, or preserved).
    RemoveBackends(String),
}

impl CleanupStep {
    pub fn load_balancer(&self) -> &str {
        match self {
            CleanupStep::Delete(id) | CleanupStep::RemoveBackends(id) => id,
        }
    }
}

/// What letting go of a Service does (pure): the attached load balancer keeps
/// everything but rollgate's backends; one rollgate created is deleted, unless
/// `preserve-lb-on-delete` keeps it (then only rollgate's backends leave it).
pub fn cleanup_steps(
    attached: Option<&str>,
    created: Option<&str>,
    preserve: bool,
) -> Vec<CleanupStep> {
    let mut steps = Vec::new();
    if let Some(attached) = attached {
        steps.push(CleanupStep::RemoveBackends(attached.to_string()));
    }
    if let Some(created) = created.filter(|c| Some(*c) != attached) {
        steps.push(match preserve {
            true => CleanupStep::RemoveBackends(created.to_string()),
            false => CleanupStep::Delete(created.to_string()),
        });
    }
    steps
}

/// The Service now names a load balancer (`...-loadbalancer-id`) other than the one
/// rollgate created for it earlier: that one is let go of (deleted, or only rollgate's
/// backends leave it when preserved), then its annotation is cleared. Returns whether
/// there was one.
pub async fn let_go_of_replaced(service: &ServiceSnapshot, ctx: &Context) -> Result<bool, Error> {
    let (Some(attached), Some(created)) = (&service.attached_id, &service.created_id) else {
        return Ok(false);
    };
    if attached == created {
        return Ok(false);
    }
    let step = match service.preserve_on_delete {
        true => CleanupStep::RemoveBackends(created.clone()),
        false => CleanupStep::Delete(created.clone()),
    };
    run_step(service, ctx, &step).await?;
    forget_created(service, ctx).await?;
    tracing::info!(
        load_balancer = created,
        now = attached,
        "let go of the load balancer the Service no longer uses"
    );
    Ok(true)
}

/// The steps of letting go of a Service (`cleanup_steps`), with the attached
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

/// Runs the cleanup steps. A failure keeps the finalizer (the reconcile is retried)
/// and is said once per cause in a Warning Event on the Service.
async fn clean_up_cloud(service: &ServiceSnapshot, ctx: &Context) -> Result<(), Error> {
    // With the attached load balancer served before a move not yet acted on.
    let steps = release_steps(service);
    for step in &steps {
        if let Err(error) = run_step(service, ctx, step).await {
            let failure = cloud::failure(&error);
            let note = reasons::cleanup_blocked(step.load_balancer(), &failure);
            let warning = event(
                EventType::Warning,
                CLEANUP_BLOCKED_EVENT,
                EVENT_ACTION,
                note,
            );
            ctx.events
                .publish_once(
                    &ctx.cleanup_said,
                    &service.uid,
                    Topic::Warning,
                    &service.reference,
                    warning,
                )
                .await;
            return Err(error.into());
        }
    }
    ctx.cleanup_said.forget_object(&service.uid);
    Ok(())
}

async fn run_step(
    service: &ServiceSnapshot,
    ctx: &Context,
    step: &CleanupStep,
) -> Result<(), CloudError> {
    let product = service.made_with;
    match step {
        CleanupStep::Delete(id) => {
            // Its tags first: the id recorded on the Service may name another
            // cluster's load balancer (a manifest copied with rollgate's annotations).
            let Some(held) = ctx.cloud.load_balancer_tags(product, id).await? else {
                return Ok(()); // already gone
            };
            if let Some(cluster) = another_clusters(&held, &ctx.settings.cluster_id) {
                warn_not_deleted(service, ctx, id, &cluster).await;
                return Ok(());
            }
            // Both clients treat a load balancer already gone as deleted.
            ctx.cloud.delete(product, id).await?;
            tracing::info!(
                load_balancer = id,
                "deleted the load balancer rollgate created"
            );
        }
        CleanupStep::RemoveBackends(id) => {
            let removed = remove_own_backends(service, ctx, product, id).await?;
            tracing::info!(
                load_balancer = id,
                removed,
                "took rollgate's backends out of a load balancer that stays"
            );
        }
    }
    Ok(())
}

/// The other cluster `held` (a load balancer's tags) names with rollgate's cluster
/// tag, if it names one other than `cluster_id`: that load balancer is not ours to
/// delete. Untagged (made before tags, or by hand) is not another cluster's.
pub fn another_clusters(held: &[Tag], cluster_id: &str) -> Option<String> {
    ResourceTags {
        cluster: Some((CLUSTER_ID_TAG.to_string(), cluster_id.to_string())),
        others: vec![],
    }
    .other_cluster(held)
}

/// The de-duplication key of the Warning about a load balancer of another cluster
/// that letting go of the Service did not delete.
fn not_deleted_key(uid: &str) -> String {
    format!("{uid}/not-deleted")
}

/// One Warning on the Service: the load balancer recorded as rollgate's is tagged for
/// another cluster, so it was not deleted.
async fn warn_not_deleted(service: &ServiceSnapshot, ctx: &Context, id: &str, cluster: &str) {
    tracing::warn!(
        load_balancer = id,
        cluster,
        "not deleting a load balancer tagged for another cluster"
    );
    let note = format!(
        "load balancer {id} is tagged {CLUSTER_ID_TAG}={cluster}: it belongs to another cluster, so rollgate did not delete it (only letting go of this Service); delete it from that cluster or by hand if it is no longer used"
    );
    // Its own action: the recorder merges Events of one reason and action into one
    // (keeping the first note), and the Service may have had this reason already.
    let warning = event(
        EventType::Warning,
        OTHER_CLUSTERS_RESOURCE_EVENT,
        "DeleteLoadBalancer",
        note,
    );
    ctx.events
        .publish_once(
            &ctx.cleanup_said,
            &not_deleted_key(&service.uid),
            Topic::Warning,
            &service.reference,
            warning,
        )
        .await;
}

/// Takes this Service's backends (by their ownership marker, any port) out of every
/// server group of the load balancer; what is already gone counts as done. Returns how
/// many were removed.
pub async fn remove_own_backends(
    service: &ServiceSnapshot,
    ctx: &Context,
    product: Product,
    load_balancer_id: &str,
) -> Result<usize, CloudError> {
    let Some(groups) = ctx.cloud.server_groups(product, load_balancer_id).await? else {
        return Ok(0);
    };
    let facts = &service.facts;
    // The legacy marker too: a Service let go of before it was ever reconciled after
    // an upgrade still has the backends earlier versions wrote.
    let owner = Owner {
        service: &facts.name,
        namespace: &facts.namespace,
        cluster_id: &ctx.settings.cluster_id,
        legacy_cluster_id: ctx.settings.legacy_cluster_id.as_deref(),
    };
    let mut removed = 0;
    for group in &groups {
        let backends = match ctx.cloud.list_backends(product, group).await {
            Ok(backends) => backends,
            Err(e) if e.is_not_found() => continue,
            Err(e) => return Err(e),
        };
        let ours: Vec<_> = backends
            .iter()
            .filter(|b| owner.owned_port(&b.description).is_some())
            .map(|b| b.key.clone())
            .collect();
        if ours.is_empty() {
            continue;
        }
        let count = ours.len();
        let changes = GroupChanges {
            remove: ours,
            ..Default::default()
        };
        match ctx.cloud.apply(product, group, &changes).await {
            Ok(()) => removed += count,
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}

/// Drops what rollgate remembers of the Service: its load balancer, its polls, its
/// metrics.
pub fn forget(service: &ServiceSnapshot, ctx: &Context) {
    ctx.cloud.forget(&service.uid);
    ctx.cleanup_said
        .forget_object(&not_deleted_key(&service.uid));
    ctx.placer.forget(&service.uid);
    ctx.poller.forget(&service.key());
    ctx.metrics
        .forget(&service.facts.namespace, &service.facts.name);
}

#[cfg(test)]
mod tests {
    use super::*;
    use CleanupStep::*;

    /// What the case is about, the attached and created ids, preserve, the steps.
    type Case<'a> = (
        &'a str,
        Option<&'a str>,
        Option<&'a str>,
        bool,
        Vec<CleanupStep>,
    );

    #[test]
    fn attached_keeps_all_but_our_backends_created_is_deleted_unless_preserved() {
        let s = |id: &str| id.to_string();
        #[rustfmt::skip]
        let cases: &[Case] = &[
            ("nothing made, nothing named", None, None, false, vec![]),
            ("created: deleted", None, Some("lb-made"), false, vec![Delete(s("lb-made"))]),
            ("created, preserved: only our backends leave", None, Some("lb-made"), true, vec![RemoveBackends(s("lb-made"))]),
            ("attached: only our backends leave", Some("lb-user"), None, false, vec![RemoveBackends(s("lb-user"))]),
            ("attached, preserve changes nothing", Some("lb-user"), None, true, vec![RemoveBackends(s("lb-user"))]),
            ("attached after one was created: both let go of", Some("lb-user"), Some("lb-made"), false,
             vec![RemoveBackends(s("lb-user")), Delete(s("lb-made"))]),
            ("attached after one was created, preserved", Some("lb-user"), Some("lb-made"), true,
             vec![RemoveBackends(s("lb-user")), RemoveBackends(s("lb-made"))]),
            ("the created one named as attached is never deleted", Some("lb-made"), Some("lb-made"), false,
             vec![RemoveBackends(s("lb-made"))]),
        ];
        for (case, attached, created, preserve, want) in cases {
            assert_eq!(
                &cleanup_steps(*attached, *created, *preserve),
                want,
                "{case}"
            );
        }
    }

    /// Only a load balancer whose cluster tag names another cluster is spared;
    /// untagged ones, and ours, are deleted.
    #[test]
    fn a_load_balancer_tagged_for_another_cluster_is_never_deleted() {
        let t = |k: &str, v: &str| (k.to_string(), v.to_string());
        #[rustfmt::skip]
        let cases: &[(&str, Vec<Tag>, Option<&str>)] = &[
            ("untagged", vec![], None),
            ("ours", vec![t(CLUSTER_ID_TAG, "c1"), t("team", "web")], None),
            ("another cluster's", vec![t("team", "web"), t(CLUSTER_ID_TAG, "c2")], Some("c2")),
            ("another key of the same value", vec![t("cluster", "c2")], None),
        ];
        for (case, held, want) in cases {
            assert_eq!(another_clusters(held, "c1").as_deref(), *want, "{case}");
        }
    }

    /// A reconcile right after the Service was let go of reads it from a cache that
    /// does not show the finalizer's removal yet (still held, still deleting): it must
    /// not let go of it a second time (cloud calls, and the Warnings `forget` no longer
    /// de-duplicates). A Service the cache shows changed after that write is let go of.
    #[tokio::test]
    async fn a_service_let_go_of_is_not_let_go_of_again_from_a_stale_cache() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        use serde_json::json;

        use crate::apply::fake_api::fake_client;
        use crate::gates::context::test_context;
        use crate::gates::service::ClassSelection;
        use crate::names::LOAD_BALANCER_FINALIZER;

        let (client, seen) = fake_client(|_, _| {
            (
                200,
                json!({"apiVersion": "v1", "kind": "Service",
                         "metadata": {"resourceVersion": "8"}}),
            )
        });
        let ctx = test_context(client, &[], &[]);
        let at = |version: &str| {
            let mut svc = crate::testkit::service("shop", "web", "LoadBalancer", &[]);
            svc.metadata.uid = Some("uid-web".into());
            svc.metadata.resource_version = Some(version.into());
            svc.metadata.finalizers = Some(vec![LOAD_BALANCER_FINALIZER.into()]);
            svc.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
            ServiceSnapshot::read(&svc, ClassSelection::Standard)
        };
        for _ in 0..3 {
            release(&at("7"), &ctx).await.unwrap();
        }
        assert_eq!(seen.calls_to("PATCH").len(), 1, "{:?}", seen.calls());
        release(&at("9"), &ctx).await.unwrap();
        assert_eq!(seen.calls_to("PATCH").len(), 2);
    }
}
