//! Wiring of the readiness-gate controller: the shared Service and pod watches, the
//! poller's looks as reconcile triggers, the orphan worker, and one reconcile per
//! Service (`reconcile`, as named stages: observe -> `plan::plan` (pure) -> apply).
//!
//! The parts live beside it: which Services a pod event concerns (`triggers`), gates
//! naming a Service that is missing or not a load balancer (`orphans`), letting go of
//! a Service (`cleanup`), the load balancer spec (`lb_spec`), and the writes to pods
//! (`conditions`) and to the Service (`service_writes`).
use std::sync::Arc;

use alibaba_lb::{Product, Service};
use futures::{Future, StreamExt};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::Controller;
use kube::Client;
use tokio::sync::mpsc;

use super::cloud::Cloud;
use super::context::Context;
use super::eni::Placer;
use super::metrics::GateMetrics;
use super::orphans;
use super::poller::{CallCounts, Poller};
use super::reconcile;
use super::triggers;
use crate::apply::{Events, Writer};
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::names::GATES_CONTROLLER_NAME;
use crate::object::CachedPod;
use crate::runtime::Shutdown;
use crate::watch::runner::{Run, RunMetrics};
use crate::watch::{applied, applied_unless, Watches};

pub use super::context::{Error, GateSettings};

/// How long shutdown waits for gate writes still in flight: 500 of them take about 3 s
/// on a small API server.
const WRITES_DRAIN_ON_SHUTDOWN: std::time::Duration = std::time::Duration::from_secs(5);

/// Subscribes to the shared Service and pod stores and returns the controller, ready
/// to be driven. The watches must include the Services (`ServiceWatch::On`).
pub fn start(
    watches: &Watches,
    client: Client,
    metrics: &Metrics,
    cloud_clients: (
        Arc<dyn alibaba_lb::LoadBalancerBackends>,
        Arc<dyn alibaba_lb::LoadBalancerBackends>,
    ),
    settings: GateSettings,
    leadership: Leadership,
    shutdown: Shutdown,
) -> impl Future<Output = ()> {
    let gate_metrics = GateMetrics::register(metrics);
    let services = watches.services();
    let poller = Poller::new(
        settings.poll_fast,
        settings.poll_slow,
        settings.cloud_pace,
        settings.concurrency.into(),
    );
    let (orphan_tx, orphan_rx) = mpsc::unbounded_channel();
    let ctx = Arc::new(Context {
        writer: Writer::new(client.clone()),
        pods: watches.pods(),
        services: services.clone(),
        cloud: Cloud::new(cloud_clients.0, cloud_clients.1, gate_metrics.clone()),
        placer: Placer::new(
            settings.network.clone(),
            settings.vpc_id.clone(),
            gate_metrics.clone(),
        ),
        poller: poller.clone(),
        events: Events::new(client, GATES_CONTROLLER_NAME),
        cleanup_said: Default::default(),
        metrics: gate_metrics.clone(),
        settings: settings.clone(),
        orphans: orphan_tx.clone(),
        annotation_events: Default::default(),
        writes_in_flight: Default::default(),
    });

    // Pod events map to the Services they concern (`triggers`). Gates naming a
    // Service that is not there go to the orphan worker, which says so on the pod.
    // Every reconcile an event asks for is told to the poller, which holds settled
    // looks back until it has started (`poller`, "Reconciles first").
    let services_for_pods = services.clone();
    let services_for_deletions = services.clone();
    let services_for_poller = services.clone();
    let writer = ctx.writer.clone();
    let echo_writer = ctx.writer.clone();
    let (queued_by_service, queued_by_deletion, queued_by_change) =
        (poller.clone(), poller.clone(), poller.clone());
    let service_changes = applied(watches.service_changes()).inspect(move |service| {
        queued_by_service.reconcile_queued(ObjectRef::from_obj(&**service));
    });
    let controller = Controller::for_shared_stream(service_changes, services)
        .watches_shared_stream(watches.pod_deletions(), move |pod: Arc<CachedPod>| {
            // A pod gone: none of our writes to it is left to wait for.
            if let Some(uid) = pod.metadata.uid.as_deref() {
                writer.forget_object(uid);
            }
            let refs = triggers::for_deleted_pod(&pod, &services_for_deletions);
            refs.iter()
                .for_each(|r| queued_by_deletion.reconcile_queued(r.clone()));
            refs
        })
        // Only updates that change what the plan reads (`triggers::no_news_to_the_plan`):
        // rollgate's own condition writes, status heartbeats and the like cost nothing.
        .watches_shared_stream(
            applied_unless(watches.pod_changes(), move |before, after| {
                triggers::no_news_to_the_plan(before, after, |uid, type_| {
                    echo_writer.last_written_status(uid, type_)
                })
            }),
            move |pod: Arc<CachedPod>| {
                let (refs, names_a_missing_service) =
                    triggers::for_changed_pod(&pod, &services_for_pods);
                if names_a_missing_service {
                    let _ = orphan_tx.send(ObjectRef::from_obj(&*pod));
                }
                refs.iter()
                    .for_each(|r| queued_by_change.reconcile_queued(r.clone()));
                refs
            },
        )
        .reconcile_on({
            let (ctx, metrics) = (ctx.clone(), gate_metrics.clone());
            let metrics_by_action = gate_metrics.clone();
            poller.triggers(
                shutdown.clone(),
                move |product| {
                    let client = ctx.cloud.client(product);
                    metrics_by_action
                        .api_actions(Service::from(product).label(), &client.action_counts());
                    if let (Product::Clb, Some(network)) = (product, &ctx.settings.network) {
                        for (service, counts) in network.action_counts() {
                            metrics_by_action.api_actions(service.label(), &counts);
                        }
                    }
                    CallCounts {
                        calls: client.calls_made(),
                        throttled: client.throttled_answers(),
                    }
                },
                move |service| services_for_poller.get(service).is_some(),
                move |queue, grants| metrics.scheduler_state(queue, grants),
            )
        });
    let run = Run {
        name: "readiness-gates",
        concurrency: settings.concurrency,
        synced: watches.synced(),
        errors: gate_metrics.reconcile_errors.clone(),
        metrics: RunMetrics::of(metrics),
        own_duration: None,
        leadership: leadership.clone(),
        shutdown: shutdown.clone(),
        // Granted looks skip the queue of event reconciles: the scheduler spaced them
        // within the budget already, and half the slots bound those in flight.
        ahead: Some(poller.ahead((usize::from(settings.concurrency) / 2).max(1))),
    };
    let orphans = orphans::run(
        ctx.clone(),
        orphan_rx,
        watches.synced(),
        leadership,
        shutdown,
    );
    let writes_in_flight = ctx.writes_in_flight.clone();
    async move {
        tokio::join!(run.drive(controller, reconcile::reconcile, ctx), orphans);
        // The reconciles are done; the gate writes they left in flight get a moment.
        writes_in_flight.drained(WRITES_DRAIN_ON_SHUTDOWN).await;
    }
}
