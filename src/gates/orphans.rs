//! Gates that name a Service rollgate will never serve: one that does not exist (the
//! orphan worker) or one that is not `type: LoadBalancer`. The gate says why on the pod,
//! with one Warning Event when it starts saying so.
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use tokio::sync::{mpsc, watch};

use super::conditions::write_condition;
use super::context::{Context, Error, EVENT_ACTION};
use super::model::GatePod;
use super::plan::plan_without_service;
use super::pods::{gate_pod, gated_services, has_gate};
use super::reasons;
use super::service::ServiceSnapshot;
use crate::leader::Leadership;
use crate::names::{GateReason, SERVICE_NOT_FOUND_EVENT, SERVICE_NOT_LOAD_BALANCER_EVENT};
use crate::object::CachedPod;
use crate::runtime::Shutdown;

/// The pods of `namespace` gated on `service`.
pub fn gated_pods(pods: &Store<CachedPod>, namespace: &str, service: &str) -> Vec<Arc<CachedPod>> {
    pods.state()
        .into_iter()
        .filter(|p| p.namespace().as_deref() == Some(namespace) && has_gate(p, service))
        .collect()
}

/// Gates naming a Service that is not `type: LoadBalancer`.
pub async fn not_a_load_balancer(service: &ServiceSnapshot, ctx: &Context) -> Result<(), Error> {
    let (ns, name) = (&service.facts.namespace, &service.facts.name);
    let message = reasons::service_not_load_balancer(ns, name, &service.type_);
    hold_orphans(
        ctx,
        ns,
        name,
        GateReason::ServiceNotLoadBalancer,
        SERVICE_NOT_LOAD_BALANCER_EVENT,
        &message,
    )
    .await
}

/// Writes the reason on every gated pod whose condition does not say it yet, with one
/// Warning Event per pod (only when the condition changes, so not once per reconcile).
async fn hold_orphans(
    ctx: &Context,
    namespace: &str,
    service: &str,
    reason: GateReason,
    event_reason: &str,
    message: &str,
) -> Result<(), Error> {
    let pods = gated_pods(&ctx.pods, namespace, service);
    let views: Vec<GatePod> = pods.iter().map(|p| gate_pod(p, service, false)).collect();
    for write in plan_without_service(&views, reason, message) {
        let Some(pod) = pods
            .iter()
            .find(|p| p.uid().as_deref() == Some(write.uid.as_str()))
        else {
            continue;
        };
        let flipped = views
            .iter()
            .find(|v| v.uid == write.uid)
            .and_then(|v| v.gate.as_ref())
            .map(|g| g.status)
            != Some(write.status);
        let outcome = write_condition(ctx, namespace, service, &write, flipped).await?;
        if !outcome.landed() {
            continue; // a pod gone or replaced is told nothing
        }
        let reference = pod.object_ref(&());
        ctx.events
            .publish(
                &reference,
                EventType::Warning,
                event_reason,
                EVENT_ACTION,
                message.to_string(),
            )
            .await;
    }
    Ok(())
}

/// The orphan worker: checks pods whose gates named a Service missing from the store,
/// once the shared watches have listed (the Service watch among them) and only while
/// leading.
///
/// It waits on `synced` (the shared watches' sync gate), never on the Service store's
/// own `wait_until_ready`: the controller's applier waits on that store too, and two
/// waiters on it can leave one asleep for good (see `crate::sync_gate`). `synced` is a
/// watch channel every receiver sees flip.
pub async fn run(
    ctx: Arc<Context>,
    mut rx: mpsc::UnboundedReceiver<ObjectRef<CachedPod>>,
    mut synced: watch::Receiver<bool>,
    leadership: Leadership,
    shutdown: Shutdown,
) {
    let work = async {
        if synced.wait_for(|s| *s).await.is_err() {
            return; // the watches are gone: shutting down
        }
        while let Some(first) = rx.recv().await {
            // Take what queued up meanwhile, once each. A standby keeps its batch
            // (a set, so bounded by the pods) until it leads: pods seen before the
            // lease was won are not forgotten.
            let mut batch: HashSet<ObjectRef<CachedPod>> = HashSet::from([first]);
            loop {
                while let Ok(more) = rx.try_recv() {
                    batch.insert(more);
                }
                if leadership.is_leader() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            for (ns, name) in missing_services(&ctx, batch) {
                let message = reasons::service_not_found(&ns, &name);
                if let Err(error) = hold_orphans(
                    &ctx,
                    &ns,
                    &name,
                    GateReason::ServiceNotFound,
                    SERVICE_NOT_FOUND_EVENT,
                    &message,
                )
                .await
                {
                    tracing::warn!(%error, service = %name, namespace = %ns, "could not report a missing Service");
                }
            }
        }
    };
    tokio::select! {
        _ = work => {}
        _ = shutdown.requested() => {}
    }
}

/// The Services (namespace, name) that gates of the batch's pods name and the store
/// does not hold.
/// The Services the batch's pods are gated on that are gone: not in the store, or
/// being deleted. A deleted Service can stay in the store after rollgate let go of it
/// (`cleanup::release` hands its pods here once, before the watch delivers the delete,
/// or while another controller's finalizer holds it), and no later pod event may come
/// to ask again (pod updates that change nothing the gates read trigger nothing).
fn missing_services(
    ctx: &Context,
    batch: HashSet<ObjectRef<CachedPod>>,
) -> HashSet<(String, String)> {
    let mut missing = HashSet::new();
    for pod_ref in batch {
        let Some(pod) = ctx.pods.get(&pod_ref) else {
            continue;
        };
        let ns = pod.namespace().unwrap_or_default();
        for name in gated_services(&pod) {
            let key = ObjectRef::<Service>::new(name).within(&ns);
            let gone = ctx
                .services
                .get(&key)
                .is_none_or(|svc| svc.metadata.deletion_timestamp.is_some());
            if gone {
                missing.insert((ns.clone(), name.to_string()));
            }
        }
    }
    missing
}

#[cfg(test)]
mod tests {
    //! The orphans' condition writes and Events against the fake API server
    //! (`crate::apply::fake_api`).
    use k8s_openapi::api::core::v1::{Pod, PodReadinessGate};

    use super::*;
    use crate::apply::fake_api::{fake_client, status};
    use crate::gates::context::test_context;
    use crate::gates::model::gate_condition_type;
    use crate::gates::service::ClassSelection;
    use crate::testkit::{DaemonSetBuilder, PodBuilder};

    fn gated_pod(name: &str, service: &str) -> Pod {
        let ds = DaemonSetBuilder::new("web").build();
        let mut pod = PodBuilder::new(name, &ds).on_node("n1").build();
        pod.spec.as_mut().unwrap().readiness_gates = Some(vec![PodReadinessGate {
            condition_type: gate_condition_type(service),
        }]);
        pod
    }

    #[tokio::test]
    async fn a_gate_on_a_cluster_ip_service_says_so_as_rollgate_and_a_pod_gone_gets_no_event() {
        let pods = [gated_pod("web-1", "web"), gated_pod("web-gone", "web")];
        let (client, seen) = fake_client(|method, path| match (method, path) {
            (_, p) if p.ends_with("/web-gone/status") => status(404, "NotFound"),
            ("POST", _) => (201, serde_json::json!({})),
            _ => (200, serde_json::json!({})),
        });
        let ctx = test_context(client, &pods, &[]);
        let mut svc = crate::testkit::service("edge", "web", "ClusterIP", &[]);
        svc.metadata.uid = Some("uid-svc".into());
        let snapshot = ServiceSnapshot::read(&svc, ClassSelection::Standard);
        not_a_load_balancer(&snapshot, &ctx).await.unwrap();

        let mut patches = seen.calls_to("PATCH");
        patches.sort_by_key(|c| c.path.clone());
        assert_eq!(patches.len(), 2, "both pods are written to");
        for patch in &patches {
            assert_eq!(patch.field_manager(), Some("rollgate"), "{}", patch.line());
            let condition = &patch.body["status"]["conditions"][0];
            assert_eq!(condition["type"], "service.readiness.alibabacloud.com/web");
            assert_eq!(condition["status"], "False");
            assert_eq!(condition["reason"], "ServiceNotLoadBalancer");
        }
        assert_eq!(patches[0].body["metadata"]["uid"], "uid-web-1");
        // The pod gone meanwhile is skipped: told nothing, so no Warning about it.
        let events: Vec<_> = seen
            .calls()
            .into_iter()
            .filter(|c| c.path.contains("/events"))
            .collect();
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].body["reason"], "ServiceNotLoadBalancer");
        assert_eq!(events[0].body["regarding"]["name"], "web-1");
        assert_eq!(
            events[0].body["reportingController"],
            "rollgate-readiness-gates"
        );
        assert_eq!(events[0].body["action"], "ReadinessGate");
    }

    /// A deleted Service still in the store (rollgate's finalizer gone, another's still
    /// on it) is gone for the gates: the pods `release` hands over once are told so.
    #[tokio::test]
    async fn a_service_being_deleted_counts_as_missing() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let pods = [gated_pod("web-1", "web")];
        let (client, seen) = fake_client(|method, _| match method {
            "POST" => (201, serde_json::json!({})),
            _ => (200, serde_json::json!({})),
        });
        let namespace = pods[0].metadata.namespace.clone().unwrap_or_default();
        let mut deleting = crate::testkit::service(&namespace, "web", "LoadBalancer", &[]);
        deleting.metadata.uid = Some("uid-svc".into());
        deleting.metadata.deletion_timestamp = Some(Time(crate::testkit::at(100)));
        deleting.metadata.finalizers = Some(vec!["example.com/another-controller".into()]);
        let ctx = Arc::new(test_context(client, &pods, &[deleting]));
        let pod_ref = ObjectRef::from_obj(&CachedPod::from(pods[0].clone()));
        let (tx, rx) = mpsc::unbounded_channel();
        let (_synced_tx, synced) = watch::channel(true);
        let (_stop, stop_rx) = watch::channel(false);
        let worker = tokio::spawn(run(
            ctx,
            rx,
            synced,
            Leadership::always(),
            Shutdown::from_receiver(stop_rx),
        ));
        tx.send(pod_ref).unwrap();
        let said = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                if let Some(patch) = seen.calls_to("PATCH").first() {
                    return patch.body["status"]["conditions"][0]["reason"].clone();
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the pods of a Service being deleted are told it is gone");
        assert_eq!(said, "ServiceNotFound");
        worker.abort();
    }

    /// The worker starts on the shared watches' sync signal alone. Its Service store
    /// here is never marked ready (its writer lives but completes no list; in the
    /// controller, the store's one wake-up may go to the applier instead): a worker
    /// waiting on the store itself would never report the missing Service.
    #[tokio::test]
    async fn the_orphan_worker_reports_a_missing_service_once_the_watches_synced() {
        let pods = [gated_pod("web-1", "missing")];
        let (client, seen) = fake_client(|method, _| match method {
            "POST" => (201, serde_json::json!({})),
            _ => (200, serde_json::json!({})),
        });
        let mut ctx = test_context(client, &pods, &[]);
        // A Service store whose writer lives on but never sees a full list.
        let (never_listed, _writer) = kube::runtime::reflector::store::<Service>();
        ctx.services = never_listed;
        let ctx = Arc::new(ctx);
        let pod_ref = ObjectRef::from_obj(&CachedPod::from(pods[0].clone()));
        let (tx, rx) = mpsc::unbounded_channel();
        let (synced_tx, synced) = watch::channel(false);
        let (_stop, stop_rx) = watch::channel(false);
        let worker = tokio::spawn(run(
            ctx,
            rx,
            synced,
            Leadership::always(),
            Shutdown::from_receiver(stop_rx),
        ));
        tx.send(pod_ref).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            seen.calls_to("PATCH").is_empty(),
            "nothing is said before the watches synced"
        );

        synced_tx.send(true).unwrap();
        let said = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                if let Some(patch) = seen.calls_to("PATCH").first() {
                    return patch.body["status"]["conditions"][0]["reason"].clone();
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the worker reports the missing Service once synced");
        assert_eq!(said, "ServiceNotFound");
        worker.abort();
    }
}
