//! Wiring of the readiness-gate controller, one reconcile per Service:
//! observe (the Service, read once into a [`ServiceSnapshot`]; the shared pod store; the
//! cloud's groups and health) -> `plan::plan` (pure) -> apply (backend changes, then
//! gate conditions on pods/status).
//!
//! The parts live beside it: which Services a pod event concerns (`triggers`), gates
//! naming a Service that is missing or not a load balancer (`orphans`), letting go of
//! a Service (`cleanup`), the load balancer spec (`lb_spec`), and the writes to pods
//! (`conditions`) and to the Service (`service_writes`).
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use alibaba_lb::{Error as CloudError, LoadBalancer, LoadBalancerSpec, Product, ServerGroupRef};
use futures::{Future, StreamExt};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::Controller;
use kube::{Client, ResourceExt};
use tokio::sync::mpsc;

use super::attached_move::follow_attached_move;
use super::cleanup;
use super::cloud::{self, Cloud};
use super::conditions::write_conditions;
use super::context::{Context, EVENT_ACTION};
use super::eni::{self, Placer};
use super::lb_spec::{adopt_former_groups, lb_spec};
use super::metrics::GateMetrics;
use super::model::{owner_description, CloudState, GatePlan, GatePod, GroupState, PlanInput};
use super::orphans;
use super::plan::{plan, plan_invalid_annotation};
use super::pods::service_pods;
use super::poller::{look_cost, CallCounts, Outcome, Poller};
use super::service::ServiceSnapshot;
use super::service_writes::{
    add_finalizer, publish_address, publish_server_groups, record_created,
};
use super::settings::drain_time;
use super::stale;
use super::triggers;
use crate::apply::{Events, Writer};
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::names::{GATES_CONTROLLER_NAME, INVALID_ANNOTATION_EVENT};
use crate::object::CachedPod;
use crate::runtime::Shutdown;
use crate::watch::runner::{Run, RunMetrics};
use crate::watch::{applied, applied_unless, Watches};

pub use super::context::{Error, GateSettings};

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
        settings.cloud_rate_limit,
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
    });

    // Pod events map to the Services they concern (`triggers`). Gates naming a
    // Service that is not there go to the orphan worker, which says so on the pod.
    // Every reconcile an event asks for is told to the poller, which holds settled
    // looks back until it has started (`poller`, "Reconciles first").
    let services_for_pods = services.clone();
    let services_for_deletions = services.clone();
    let services_for_poller = services.clone();
    let writer = ctx.writer.clone();
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
        // Only updates that change what the plan reads (`triggers::same_to_the_plan`):
        // rollgate's own condition messages, status heartbeats and the like cost nothing.
        .watches_shared_stream(
            applied_unless(watches.pod_changes(), triggers::same_to_the_plan),
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
            poller.triggers(
                shutdown.clone(),
                move |product| {
                    let client = ctx.cloud.client(product);
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
    };
    let orphans = orphans::run(
        ctx.clone(),
        orphan_rx,
        watches.synced(),
        leadership,
        shutdown,
    );
    async move {
        tokio::join!(run.drive(controller, reconcile, ctx), orphans);
    }
}

/// What a reconcile does with its Service.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// Deleted, or held by rollgate's finalizer but no longer of its classes: let go.
    Release,
    /// Not rollgate's (another class, or not a LoadBalancer): never touched.
    Leave,
    /// Rollgate's: ensure its load balancer and serve its gates.
    Serve(Product),
}

fn step(service: &ServiceSnapshot) -> Step {
    if service.deleting || (service.product.is_none() && service.holds_finalizer()) {
        return Step::Release;
    }
    match service.product {
        Some(product) => Step::Serve(product),
        None => Step::Leave,
    }
}

#[tracing::instrument(skip_all, fields(service = %svc.name_any(), namespace = %svc.namespace().unwrap_or_default()))]
async fn reconcile(svc: Arc<Service>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.poller.reconcile_started(&ObjectRef::from_obj(&*svc));
    // The one look at the API object; everything below reads the snapshot (the
    // object is dropped, so nothing can go back to it).
    let service = ServiceSnapshot::read(&svc, ctx.settings.classes);
    drop(svc);
    let product = match step(&service) {
        Step::Release => {
            ctx.annotation_events.forget(&service.uid);
            cleanup::release(&service, &ctx).await?;
            return Ok(Action::await_change());
        }
        Step::Leave => {
            ctx.poller.forget(&service.key());
            if !service.is_load_balancer() {
                orphans::not_a_load_balancer(&service, &ctx).await?;
            }
            // A LoadBalancer of another class: another controller's, never touched.
            return Ok(Action::await_change());
        }
        Step::Serve(product) => product,
    };
    if !service.holds_finalizer() {
        add_finalizer(&service, &ctx).await?;
    }
    // Moved to a load balancer the user names: the one rollgate made goes first (the
    // next reconcile, on the cleared annotation, serves the new one).
    if cleanup::let_go_of_replaced(&service, &ctx).await? {
        ctx.cloud.forget(&service.uid);
        return Ok(Action::await_change());
    }
    // Moved off a load balancer the user named: rollgate's backends leave it first.
    if follow_attached_move(&service, &ctx).await? {
        ctx.cloud.forget(&service.uid);
        return Ok(Action::await_change());
    }
    ctx.annotation_events
        .warn(
            &ctx.events,
            EVENT_ACTION,
            &service.uid,
            &service.reference,
            &service.not_acted_on,
        )
        .await;
    let settings = &ctx.settings;
    let spec = match lb_spec(
        &service,
        product,
        &settings.cluster_id,
        settings.vpc_id.as_deref(),
    ) {
        Ok(mut spec) => {
            adopt_former_groups(
                &mut spec,
                &service.facts,
                settings.legacy_cluster_id.as_deref(),
            );
            spec
        }
        Err(problem) => {
            ctx.events
                .publish(
                    &service.reference,
                    EventType::Warning,
                    INVALID_ANNOTATION_EVENT,
                    EVENT_ACTION,
                    problem.clone(),
                )
                .await;
            // The pods say it too: their condition is where users look first.
            let pods = service_pods(&ctx.pods, &service);
            let gate_pods: Vec<GatePod> = pods.iter().map(|(_, p)| p.clone()).collect();
            let decided = GatePlan {
                conditions: plan_invalid_annotation(&gate_pods, &problem),
                ..GatePlan::default()
            };
            let facts = &service.facts;
            let now = Timestamp::now();
            write_conditions(&ctx, &facts.namespace, &facts.name, &pods, &decided, now).await?;
            return Ok(Action::await_change());
        }
    };
    let key = service.key();
    // A look the scheduler granted reads the cloud; any other reconcile (a pod event,
    // a drain deadline) re-plans on the last reading until the Service's next look is
    // due (`Cloud::reading`, `Poller::reuse_bound`).
    let started = tokio::time::Instant::now();
    let granted = ctx.poller.granted(&key);
    let mut looked = started;
    let reuse = if granted {
        None
    } else {
        ctx.poller.reuse_bound(&key)
    };
    let observed = observe_cloud(&service, &ctx, product, &spec, reuse).await;
    let mut observed_at = Timestamp::now();
    let mut calls_outside_grant = 0;
    let (mut cloud_state, lb, mut read_error) = match observed {
        Ok((state, lb, read)) => {
            match read {
                Read::Reused(at) => {
                    // The plan sees the cloud as it was then (the flip histogram too).
                    looked = at;
                    observed_at = observed_at.checked_sub(at.elapsed()).unwrap_or(observed_at);
                }
                Read::Fresh if !granted => {
                    calls_outside_grant += look_cost(lb.listeners.len()) as usize
                }
                Read::Fresh | Read::None => {}
            }
            (state, Some(lb), None)
        }
        Err(Error::Cloud(error)) => (
            CloudState::Failed(cloud::failure(&error)),
            None,
            Some(error),
        ),
        // The created load balancer's id could not be recorded: nothing else is done
        // until it is (the retry finds the same load balancer by its ClientToken).
        Err(write) => return Err(write),
    };
    ctx.cloud
        .warn_other_cluster(
            &ctx.events,
            EVENT_ACTION,
            &service.uid,
            &service.reference,
            read_error.as_ref(),
        )
        .await;
    let facts = &service.facts;
    let pods = service_pods(&ctx.pods, &service);
    let gate_pods: Vec<GatePod> = pods.iter().map(|(_, p)| p.clone()).collect();
    // Where each pod's CLB backend lives (`eni`); a failed lookup holds the gates.
    let placements = match &cloud_state {
        CloudState::Ready(_) => match ctx.placer.place(product, &pods).await {
            Ok(placements) => placements,
            Err(error) => {
                cloud_state = CloudState::Failed(cloud::failure(&error));
                read_error = Some(error);
                HashMap::new()
            }
        },
        _ => HashMap::new(),
    };
    let now = Timestamp::now();
    let input = PlanInput {
        service: facts,
        cluster_id: &settings.cluster_id,
        legacy_cluster_id: settings.legacy_cluster_id.as_deref(),
        backend_type: ctx.cloud.backend_type(product),
        placements: &placements,
        pods: &gate_pods,
        cloud: &cloud_state,
        // Every listener carries the same settings (from the Service's annotations).
        drain: spec
            .listeners
            .first()
            .map_or(settings.drain, |l| drain_time(&l.settings, settings.drain)),
        now,
    };
    let mut decided = plan(&input);

    // Apply the backend changes; a failure (a failed NLB job too) holds every gate
    // that is not True yet with the error, and the reconcile is retried.
    let apply_error = match &lb {
        Some(lb) if !decided.changes.is_empty() => {
            // Whatever comes of it, the reading no longer shows the backends.
            ctx.cloud.void_reading(&service.uid);
            calls_outside_grant += write_calls(&decided);
            apply_changes(&ctx, product, lb, &decided).await
        }
        _ => None,
    };
    if let Some(error) = &apply_error {
        let failed = CloudState::Failed(cloud::failure(error));
        decided.conditions = plan(&PlanInput {
            cloud: &failed,
            ..input
        })
        .conditions;
    }
    write_conditions(
        &ctx,
        &facts.namespace,
        &facts.name,
        &pods,
        &decided,
        observed_at,
    )
    .await?;
    let refused = match &cloud_state {
        CloudState::PodBackendsRefused {
            load_balancer_id,
            instance,
        } => Some((load_balancer_id.as_str(), instance.as_str())),
        _ => None,
    };
    ctx.cloud
        .warn_no_pod_backends(
            &ctx.events,
            EVENT_ACTION,
            &service.uid,
            &service.reference,
            refused,
        )
        .await;
    if matches!(cloud_state, CloudState::Ready(_)) {
        let outside = eni::outside_vpc(&pods, &placements);
        ctx.placer
            .warn_outside_vpc(
                &ctx.events,
                EVENT_ACTION,
                &service.uid,
                &service.reference,
                &outside,
            )
            .await;
    }

    if let CloudState::Ready(groups) = &cloud_state {
        let (ns, name, cluster) = (&facts.namespace, &facts.name, &settings.cluster_id);
        ctx.metrics.set_state(
            ns,
            name,
            |port| owner_description(port, name, ns, cluster),
            groups,
            &decided,
        );
    }
    let failed = apply_error.as_ref().or(read_error.as_ref());
    ctx.cloud
        .warn_quota(
            &ctx.events,
            EVENT_ACTION,
            &service.uid,
            &service.reference,
            failed,
        )
        .await;
    // A used-up quota waits on the user (Quota Center), like a refused instance: the
    // slow poll looks again, and no error backoff retries it faster.
    let quota_exceeded = failed.is_some_and(CloudError::is_quota_exceeded);
    let listeners = lb.as_ref().map_or(1, |lb| lb.listeners.len());
    let outcome = Outcome {
        pending_gates: decided.pending_gates,
        changed: !decided.changes.is_empty(),
        draining: decided.next_deadline.is_some(),
        failed: apply_error.is_some() || read_error.is_some(),
        // Waiting on a user's fix (the instance's spec, a quota) is not worth a fast
        // poll.
        refused: refused.is_some() || quota_exceeded,
    };
    // The budget counts these (and every other call) from the client's call count.
    ctx.metrics
        .calls_for(outcome.next_look().0, calls_outside_grant as u64);
    let throttled = [apply_error.as_ref(), read_error.as_ref()]
        .into_iter()
        .flatten()
        .any(CloudError::is_throttling);
    if throttled {
        // The same look again, first of its class, once the product's pace allows.
        ctx.poller.throttled_look(&key, product);
    } else {
        ctx.poller
            .polled(key, product, listeners, outcome, looked, started);
    }
    if let Some(error) = apply_error.or(read_error).filter(|_| !quota_exceeded) {
        return Err(error.into());
    }
    Ok(match decided.next_deadline {
        Some(at) => Action::requeue(until(now, at)),
        // The poller brings the next look at the cloud.
        None => Action::await_change(),
    })
}

fn until(now: Timestamp, at: Timestamp) -> Duration {
    let wait = at.duration_since(now);
    Duration::try_from(wait).unwrap_or_default() + Duration::from_millis(50)
}

/// How a reconcile came by its groups' state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Read {
    /// Read from the cloud now.
    Fresh,
    /// The last reading, made at that instant (`Cloud::reading`).
    Reused(tokio::time::Instant),
    /// Nothing to read (no address yet, or the instance takes no pod backends).
    None,
}

/// Calls the plan's backend changes take: one per kind of change per group.
fn write_calls(decided: &GatePlan) -> usize {
    decided
        .changes
        .iter()
        .map(|c| {
            usize::from(!c.add.is_empty())
                + usize::from(!c.drain.is_empty() || !c.restore.is_empty())
                + usize::from(!c.remove.is_empty())
        })
        .sum()
}

/// The load balancer (ensured, and its id recorded when rollgate created it), its
/// address published, and its groups read, or the last reading reused when `reuse`
/// allows one that old and the load balancer was not just (re)ensured.
async fn observe_cloud(
    service: &ServiceSnapshot,
    ctx: &Context,
    product: Product,
    spec: &LoadBalancerSpec,
    reuse: Option<Duration>,
) -> Result<(CloudState, LoadBalancer, Read), Error> {
    let uid = &service.uid;
    let fresh = !ctx.cloud.knows(uid, spec);
    let lb = ctx.cloud.ensure(uid, product, spec).await?;
    if lb.created && service.created_id.as_deref() != Some(lb.id.as_str()) {
        if let Err(error) = record_created(service, ctx, &lb.id).await {
            // Ask the cloud again next time: the create call returns the same one.
            ctx.cloud.forget(uid);
            return Err(error);
        }
    }
    if fresh {
        // The spec changed (or rollgate restarted): listeners and groups it made for
        // ports the Service no longer has go, listener first.
        let facts = &service.facts;
        if let Err(error) =
            stale::remove_stale(ctx, product, &lb.id, spec, &facts.name, &facts.namespace).await
        {
            ctx.cloud.forget(uid);
            return Err(error.into());
        }
    }
    // Before the address: a load balancer still without one has its groups already,
    // and `kubectl rollgate gates` shows them while the gates wait.
    publish_server_groups(service, ctx, &lb.listeners).await;
    let Some(address) = lb.address.clone() else {
        ctx.cloud.forget(uid);
        return Ok((
            CloudState::NotReady {
                load_balancer_id: Some(lb.id.clone()),
            },
            lb,
            Read::None,
        ));
    };
    publish_address(service, ctx, &address).await;
    // A CLB instance that refuses ENI/ECI backends: nothing to read or register.
    if let Some(instance) = lb.clb_instance.as_ref().filter(|i| !i.takes_pod_backends()) {
        return Ok((
            CloudState::PodBackendsRefused {
                load_balancer_id: lb.id.clone(),
                instance: instance.describe(),
            },
            lb,
            Read::None,
        ));
    }
    let now = tokio::time::Instant::now();
    if let Some(max_age) = reuse.filter(|_| !fresh) {
        if let Some(reading) = ctx.cloud.reading(uid, &lb.listeners, max_age, now) {
            return Ok((
                CloudState::Ready(reading.groups),
                lb,
                Read::Reused(reading.at),
            ));
        }
    }
    let mut groups: Vec<GroupState> = Vec::with_capacity(lb.listeners.len());
    for listener in &lb.listeners {
        match observe_group(service, ctx, product, listener).await {
            Ok(group) => groups.push(group),
            Err(error) => {
                // The group may have been deleted behind our back: find it again next time.
                ctx.cloud.forget(uid);
                return Err(error.into());
            }
        }
    }
    ctx.cloud.remember_reading(uid, &groups, now);
    Ok((CloudState::Ready(groups), lb, Read::Fresh))
}

/// One look at a group. The look read its listener's status too: a stopped listener
/// (its health report says `unavailable` for every backend) is started here, and the
/// next look reads the group again.
async fn observe_group(
    service: &ServiceSnapshot,
    ctx: &Context,
    product: Product,
    listener: &ServerGroupRef,
) -> Result<GroupState, CloudError> {
    let group = ctx.cloud.read_group(product, listener).await?;
    ctx.cloud
        .start_if_stopped(
            product,
            listener,
            (&ctx.events, EVENT_ACTION),
            &service.uid,
            &service.reference,
        )
        .await?;
    Ok(group)
}

/// Sends the plan's backend changes, group by group; the first failure stops them.
async fn apply_changes(
    ctx: &Context,
    product: Product,
    lb: &LoadBalancer,
    decided: &GatePlan,
) -> Option<CloudError> {
    for changes in &decided.changes {
        let Some(group) = lb
            .listeners
            .iter()
            .find(|l| l.server_group_id == changes.server_group_id)
        else {
            continue;
        };
        tracing::info!(
            group = %group.server_group_id,
            add = changes.add.len(),
            drain = changes.drain.len(),
            restore = changes.restore.len(),
            remove = changes.remove.len(),
            "changing backends"
        );
        if let Err(error) = ctx.cloud.apply(product, group, changes).await {
            ctx.placer.registration_failed(&error, changes);
            return Some(error);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ServiceSpec;
    use kube::api::ObjectMeta;

    use super::*;
    use crate::gates::service::ClassSelection;
    use crate::names::{LOAD_BALANCER_FINALIZER, ROLLGATE_NLB_CLASS};

    fn service(type_: &str, class: Option<&str>, finalizer: bool, deleting: bool) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("shop".into()),
                finalizers: finalizer.then(|| vec![LOAD_BALANCER_FINALIZER.to_string()]),
                deletion_timestamp: deleting.then(|| {
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now())
                }),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                type_: Some(type_.into()),
                load_balancer_class: class.map(str::to_string),
                ..Default::default()
            }),
            status: None,
        }
    }

    #[test]
    fn a_service_is_served_left_alone_or_let_go_of() {
        use Step::*;
        #[rustfmt::skip]
        let cases = [
            ("a new LoadBalancer of no class", service("LoadBalancer", None, false, false), Serve(Product::Clb)),
            ("one that holds the finalizer", service("LoadBalancer", None, true, false), Serve(Product::Clb)),
            ("rollgate's NLB class", service("LoadBalancer", Some(ROLLGATE_NLB_CLASS), false, false), Serve(Product::Nlb)),
            ("deleted", service("LoadBalancer", None, true, true), Release),
            ("deleted, without the finalizer", service("LoadBalancer", None, false, true), Release),
            ("no longer a LoadBalancer", service("ClusterIP", None, true, false), Release),
            ("moved to another class", service("LoadBalancer", Some("example.com/lb"), true, false), Release),
            ("another class's", service("LoadBalancer", Some("example.com/lb"), false, false), Leave),
            ("a ClusterIP Service", service("ClusterIP", None, false, false), Leave),
        ];
        for (case, svc, want) in cases {
            let snapshot = ServiceSnapshot::read(&svc, ClassSelection::Standard);
            assert_eq!(step(&snapshot), want, "{case}");
        }
    }
}
