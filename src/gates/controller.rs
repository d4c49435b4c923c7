//! Wiring of the readiness-gate controller, one reconcile per Service:
//! observe (the Service, the shared pod store, the cloud's groups and health) ->
//! `plan::plan` (pure) -> apply (backend changes, then gate conditions on pods/status).
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use crate::object::{CachedPod, PodFacts};
use alibaba_lb::{
    Error as CloudError, ListenerProtocol, ListenerSpec, LoadBalancer, LoadBalancerSpec, Product,
};
use futures::Future;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{watcher, Controller};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;

use super::cloud::{self, Cloud};
use super::eni::{self, Placer};
use super::metrics::GateMetrics;
use super::model::{
    gate_condition_type, owner_description, CloudState, ConditionWrite, GatePlan, GatePod,
    GroupState, PlanInput, ServiceFacts,
};
use super::plan::{plan, plan_without_service};
use super::pods::{containers_ready_since, gate_pod, gated_services, has_gate, selected_by};
use super::poller::Poller;
use super::reasons;
use super::service::{
    self, address_type, attached_id, created_id, product_for, zone_maps, ClassSelection,
};
use crate::apply::{issue_together, Call, ConditionPatch, Events, Outcome, Part, Writer};
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::names::{
    GateReason, CREATED_ID_ANNOTATION, GATES_CONTROLLER_NAME, INVALID_ANNOTATION_EVENT,
    LOAD_BALANCER_FINALIZER, NLB_CLASS, ROLLGATE_NLB_CLASS, SERVICE_NOT_FOUND_EVENT,
    SERVICE_NOT_LOAD_BALANCER_EVENT,
};
use crate::runtime::Shutdown;
use crate::watch::runner::{ReconcileError, Run, RunMetrics};
use crate::watch::{applied, Watches};

/// The `action` of this controller's Events.
const EVENT_ACTION: &str = "ReadinessGate";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cloud: {0}")]
    Cloud(#[from] CloudError),
    /// A failed write to the API server (see `crate::apply`).
    #[error(transparent)]
    Write(#[from] crate::apply::Error),
}

impl ReconcileError for Error {
    fn metric_label(&self) -> &'static str {
        match self {
            Error::Cloud(e) => e.metric_label(),
            // One kind for every API write, as counted before the apply layer.
            Error::Write(_) => "kube_write",
        }
    }
}

/// Settings from the command line.
#[derive(Clone, Debug)]
pub struct GateSettings {
    pub cluster_id: String,
    pub classes: ClassSelection,
    pub drain: Duration,
    pub vpc_id: Option<String>,
    /// The ECS/VPC lookups of CLB ENI backends (`None` in unit tests: nothing is found).
    pub network: Option<Arc<alibaba_lb::VpcNetwork>>,
    pub concurrency: u16,
    pub poll_fast: Duration,
    pub poll_slow: Duration,
    /// Only Services in this namespace (`--watch-namespace`); all when `None`.
    pub namespace: Option<String>,
}

pub struct Context {
    writer: Writer,
    pods: Store<CachedPod>,
    services: Store<Service>,
    cloud: Cloud,
    /// Pod IP -> ENI/ECI of CLB backends (`eni`).
    placer: Placer,
    poller: Poller,
    events: Events,
    metrics: GateMetrics,
    settings: GateSettings,
    /// Pods whose gate named a Service that was not in the store: checked by `orphans`.
    orphans: mpsc::UnboundedSender<ObjectRef<CachedPod>>,
}

/// Subscribes to the shared pod store and returns the controller, ready to be driven.
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
    let services_api: Api<Service> = crate::watch::scoped(&client, settings.namespace.as_deref());
    let controller = Controller::new(services_api, watcher::Config::default());
    let services = controller.store();
    let pods = watches.stores.pods.clone();
    let poller = Poller::new(settings.poll_fast, settings.poll_slow);
    let (orphan_tx, orphan_rx) = mpsc::unbounded_channel();
    let ctx = Arc::new(Context {
        writer: Writer::new(client.clone()),
        pods,
        services: services.clone(),
        cloud: Cloud::new(cloud_clients.0, cloud_clients.1, gate_metrics.clone()),
        placer: Placer::new(
            settings.network.clone(),
            settings.vpc_id.clone(),
            gate_metrics.clone(),
        ),
        poller: poller.clone(),
        events: Events::new(client, GATES_CONTROLLER_NAME),
        metrics: gate_metrics.clone(),
        settings: settings.clone(),
        orphans: orphan_tx.clone(),
    });

    // Pod events map to the Services they concern: those their gates name and those
    // whose selectors match them. Gates naming a Service that is not there go to the
    // orphan worker, which says so on the pod.
    let services_for_pods = services.clone();
    let services_for_deletions = services.clone();
    let pod_changes = applied(watches.pod_changes());
    let controller = controller
        // A deleted pod's backend goes at once, not at the next poll.
        .watches_shared_stream(watches.pod_deletions(), move |pod: Arc<CachedPod>| {
            let ns = pod.pod_namespace().to_string();
            services_for_deletions
                .state()
                .into_iter()
                .filter(|svc| selected_by(&pod, svc) || has_gate(&pod, &svc.name_any()))
                .filter(|svc| svc.namespace().as_deref() == Some(ns.as_str()))
                .map(|svc| ObjectRef::from_obj(&*svc))
                .collect::<Vec<_>>()
        })
        .watches_shared_stream(pod_changes, move |pod: Arc<CachedPod>| {
            let ns = pod.namespace().unwrap_or_default();
            let mut refs: Vec<ObjectRef<Service>> = vec![];
            for name in gated_services(&pod) {
                let key = ObjectRef::new(name).within(&ns);
                if services_for_pods.get(&key).is_none() {
                    let _ = orphan_tx.send(ObjectRef::from_obj(&*pod));
                }
                refs.push(key);
            }
            for svc in services_for_pods.state() {
                if selected_by(&pod, &svc) && !refs.iter().any(|r| r.name == svc.name_any()) {
                    refs.push(ObjectRef::from_obj(&*svc));
                }
            }
            refs
        })
        .reconcile_on(poller.triggers(shutdown.clone()));
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
    let orphans = orphans(
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

#[tracing::instrument(skip_all, fields(service = %svc.name_any(), namespace = %svc.namespace().unwrap_or_default()))]
async fn reconcile(svc: Arc<Service>, ctx: Arc<Context>) -> Result<Action, Error> {
    let key = ObjectRef::from_obj(&*svc);
    let product = product_for(&svc, ctx.settings.classes);
    let holds_finalizer = svc
        .finalizers()
        .iter()
        .any(|f| f == LOAD_BALANCER_FINALIZER);
    if svc.metadata.deletion_timestamp.is_some() || (product.is_none() && holds_finalizer) {
        if holds_finalizer {
            clean_up(&svc, &ctx).await?;
        }
        forget(&svc, &ctx);
        let ns = svc.namespace().unwrap_or_default();
        for pod in gated_pods(&ctx, &ns, &svc.name_any()) {
            let _ = ctx.orphans.send(ObjectRef::from_obj(&*pod));
        }
        return Ok(Action::await_change());
    }
    let Some(product) = product else {
        ctx.poller.forget(&key);
        let is_load_balancer = svc
            .spec
            .as_ref()
            .is_some_and(|s| s.type_.as_deref() == Some("LoadBalancer"));
        if !is_load_balancer {
            not_a_load_balancer(&svc, &ctx).await?;
        }
        // A LoadBalancer of another class: another controller's, never touched.
        return Ok(Action::await_change());
    };
    if !holds_finalizer {
        add_finalizer(&svc, &ctx).await?;
    }
    let facts = service::facts(&svc);
    let spec = match lb_spec(&svc, &facts, product, &ctx.settings) {
        Ok(spec) => spec,
        Err(problem) => {
            let reference = svc.object_ref(&());
            ctx.events
                .publish(
                    &reference,
                    EventType::Warning,
                    INVALID_ANNOTATION_EVENT,
                    EVENT_ACTION,
                    problem,
                )
                .await;
            return Ok(Action::await_change());
        }
    };
    let uid = svc.uid().unwrap_or_default();
    let looked = tokio::time::Instant::now();
    let observed = observe_cloud(&svc, &ctx, &uid, product, &spec).await;
    let observed_at = Timestamp::now();
    let (mut cloud_state, lb, mut read_error) = match observed {
        Ok((state, lb)) => (state, Some(lb), None),
        Err(error) => (
            CloudState::Failed(cloud::failure(&error)),
            None,
            Some(error),
        ),
    };
    let pods = service_pods(&ctx, &svc, &facts);
    let gate_pods: Vec<GatePod> = pods.iter().map(|(_, p)| p.clone()).collect();
    // Hook (eni.rs): where each pod's CLB backend lives; a failed lookup holds the gates.
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
        service: &facts,
        cluster_id: &ctx.settings.cluster_id,
        backend_type: ctx.cloud.backend_type(product),
        placements: &placements,
        pods: &gate_pods,
        cloud: &cloud_state,
        drain: ctx.settings.drain,
        now,
    };
    let mut decided = plan(&input);

    // Apply the backend changes; a failure (a failed NLB job too) holds every gate
    // that is not True yet with the error, and the reconcile is retried.
    let mut apply_error = None;
    if let Some(lb) = &lb {
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
                ctx.placer.registration_failed(&error, changes); // hook (eni.rs)
                apply_error = Some(error);
                break;
            }
        }
    }
    if let Some(error) = &apply_error {
        let failed = CloudState::Failed(cloud::failure(error));
        decided.conditions = plan(&PlanInput {
            cloud: &failed,
            ..input
        })
        .conditions;
    }
    write_conditions(&ctx, &svc, &pods, &decided, observed_at).await?;
    if matches!(cloud_state, CloudState::Ready(_)) {
        let outside = eni::outside_vpc(&pods, &placements); // hook (eni.rs)
        ctx.placer
            .warn_outside_vpc(&ctx.events, EVENT_ACTION, &svc, &outside)
            .await;
    }

    if let CloudState::Ready(groups) = &cloud_state {
        let (ns, name, cluster) = (&facts.namespace, &facts.name, &ctx.settings.cluster_id);
        ctx.metrics.set_state(
            ns,
            name,
            |port| owner_description(port, name, ns, cluster),
            groups,
            &decided,
        );
    }
    let listeners = lb.as_ref().map_or(1, |lb| lb.listeners.len());
    let busy = decided.pending_gates > 0 || !decided.changes.is_empty() || apply_error.is_some();
    ctx.poller.polled(key, product, listeners, busy, looked);
    if let Some(error) = apply_error.or(read_error) {
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

/// The load balancer (ensured), its address published, and its groups read.
async fn observe_cloud(
    svc: &Service,
    ctx: &Context,
    uid: &str,
    product: Product,
    spec: &LoadBalancerSpec,
) -> Result<(CloudState, LoadBalancer), CloudError> {
    let lb = ctx.cloud.ensure(uid, product, spec).await?;
    if lb.created && created_id(svc) != Some(lb.id.as_str()) {
        record_created(svc, ctx, &lb.id).await;
    }
    let Some(address) = lb.address.clone() else {
        ctx.cloud.forget(uid);
        return Ok((
            CloudState::NotReady {
                load_balancer_id: Some(lb.id.clone()),
            },
            lb,
        ));
    };
    publish_address(svc, ctx, &address).await;
    let mut groups: Vec<GroupState> = Vec::with_capacity(lb.listeners.len());
    for listener in &lb.listeners {
        match ctx.cloud.read_group(product, listener).await {
            Ok(group) => groups.push(group),
            Err(error) => {
                // The group may have been deleted behind our back: find it again next time.
                ctx.cloud.forget(uid);
                return Err(error);
            }
        }
    }
    Ok((CloudState::Ready(groups), lb))
}

/// What to ask the cloud for: a listener and a server group per Service port.
fn lb_spec(
    svc: &Service,
    facts: &ServiceFacts,
    product: Product,
    settings: &GateSettings,
) -> Result<LoadBalancerSpec, String> {
    let zones = zone_maps(svc)?;
    if product == Product::Nlb
        && attached_id(svc).is_none()
        && created_id(svc).is_none()
        && zones.len() < 2
    {
        return Err(format!(
            "an NLB needs at least two zones: set the annotation {}zone-maps to \"<zone-id>:<vswitch-id>,<zone-id>:<vswitch-id>\"",
            "service.beta.kubernetes.io/alibaba-cloud-loadbalancer-"
        ));
    }
    let uid = svc.uid().unwrap_or_default();
    let mut name = format!(
        "k8s-{}-{}-{}-{}",
        settings.cluster_id,
        facts.namespace,
        facts.name,
        &uid[..uid.len().min(8)]
    );
    name.truncate(80);
    Ok(LoadBalancerSpec {
        name,
        existing_id: attached_id(svc)
            .or_else(|| created_id(svc))
            .map(str::to_string),
        address_type: address_type(svc)?,
        vpc_id: settings.vpc_id.clone(),
        zones,
        listeners: facts
            .ports
            .iter()
            .map(|p| ListenerSpec {
                port: p.port,
                protocol: if p.protocol == "UDP" {
                    ListenerProtocol::Udp
                } else {
                    ListenerProtocol::Tcp
                },
                server_group_name: owner_description(
                    p.port,
                    &facts.name,
                    &facts.namespace,
                    &settings.cluster_id,
                ),
            })
            .collect(),
    })
}

/// The pods the plan looks at: selected by the Service, or gated on it.
fn service_pods(
    ctx: &Context,
    svc: &Service,
    facts: &ServiceFacts,
) -> Vec<(Arc<CachedPod>, GatePod)> {
    ctx.pods
        .state()
        .into_iter()
        .filter(|p| p.namespace().as_deref() == Some(facts.namespace.as_str()))
        .filter_map(|p| {
            let selected = selected_by(&p, svc);
            (selected || has_gate(&p, &facts.name)).then(|| {
                let view = gate_pod(&p, &facts.name, selected);
                (p, view)
            })
        })
        .collect()
}

fn gated_pods(ctx: &Context, namespace: &str, service: &str) -> Vec<Arc<CachedPod>> {
    ctx.pods
        .state()
        .into_iter()
        .filter(|p| p.namespace().as_deref() == Some(namespace) && has_gate(p, service))
        .collect()
}

/// The plan's condition writes, in flight together (500 pods turning True in one
/// reconcile must not wait for each other), each followed by its flip latencies.
async fn write_conditions(
    ctx: &Context,
    svc: &Service,
    pods: &[(Arc<CachedPod>, GatePod)],
    decided: &GatePlan,
    observed_at: Timestamp,
) -> Result<(), Error> {
    let ns = svc.namespace().unwrap_or_default();
    let name = svc.name_any();
    let by_uid: HashMap<&str, &(Arc<CachedPod>, GatePod)> =
        pods.iter().map(|p| (p.1.uid.as_str(), p)).collect();
    // Gates turning True first: they are what a rollout waits for.
    let mut writes: Vec<&ConditionWrite> = decided.conditions.iter().collect();
    writes.sort_by_key(|w| !w.status);
    // Built in a loop, not a closure over references: the future stays `Send` for any
    // lifetime the runner needs.
    let mut calls = Vec::with_capacity(writes.len());
    for write in writes {
        if let Some((pod, view)) = by_uid.get(write.uid.as_str()).copied() {
            calls.push(write_one(ctx, &ns, &name, pod, view, write, observed_at));
        }
    }
    // Every write is tried; the first failure is returned after all were.
    let outcomes: Result<Vec<Outcome>, Error> = issue_together(calls).await.into_iter().collect();
    outcomes.map(drop)
}

/// One condition write, and the flip latencies when it turns the gate True.
async fn write_one(
    ctx: &Context,
    ns: &str,
    name: &str,
    pod: &CachedPod,
    view: &GatePod,
    write: &ConditionWrite,
    observed_at: Timestamp,
) -> Result<Outcome, Error> {
    let flipped = view.gate.as_ref().map(|g| g.status) != Some(write.status);
    let outcome = write_condition(ctx, ns, name, write, flipped).await?;
    if outcome.landed() && flipped && write.status {
        let done = Timestamp::now();
        if let Some(since) = containers_ready_since(pod) {
            let seconds = done.duration_since(since).as_secs_f64();
            ctx.metrics.flip(ns, name, "containers_ready", seconds);
        }
        let seconds = done.duration_since(observed_at).as_secs_f64();
        ctx.metrics.flip(ns, name, "load_balancer_healthy", seconds);
        tracing::info!(pod = %write.pod, reason = write.reason.as_str(), "gate True");
    }
    Ok(outcome)
}

/// Strategic merge on the conditions list (merge key `type`): only our condition is
/// touched. `lastTransitionTime` moves only when the status does. A pod gone or
/// replaced meanwhile is skipped (its next event replans).
async fn write_condition(
    ctx: &Context,
    namespace: &str,
    service: &str,
    write: &ConditionWrite,
    flipped: bool,
) -> Result<Outcome, Error> {
    let mut condition = json!({
        "type": gate_condition_type(service),
        "status": if write.status { "True" } else { "False" },
        "reason": write.reason.as_str(),
        "message": write.message,
    });
    if flipped {
        condition["lastTransitionTime"] =
            json!(Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
    }
    let patch = ConditionPatch::set(namespace, &write.pod, Some(&write.uid), &condition);
    Ok(ctx.writer.write_condition(&patch).await?)
}

/// Gates naming a Service that is not `type: LoadBalancer`.
async fn not_a_load_balancer(svc: &Service, ctx: &Context) -> Result<(), Error> {
    let ns = svc.namespace().unwrap_or_default();
    let name = svc.name_any();
    let type_ = svc
        .spec
        .as_ref()
        .and_then(|s| s.type_.clone())
        .unwrap_or_else(|| "ClusterIP".into());
    let message = reasons::service_not_load_balancer(&ns, &name, &type_);
    hold_orphans(
        ctx,
        &ns,
        &name,
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
    let pods = gated_pods(ctx, namespace, service);
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
            != Some(false);
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

/// Checks pods whose gates named a Service missing from the store, once the stores
/// are synced and only while leading.
async fn orphans(
    ctx: Arc<Context>,
    mut rx: mpsc::UnboundedReceiver<ObjectRef<CachedPod>>,
    mut synced: tokio::sync::watch::Receiver<bool>,
    leadership: Leadership,
    shutdown: Shutdown,
) {
    {
        let work = async {
            let _ = synced.wait_for(|s| *s).await;
            let _ = ctx.services.wait_until_ready().await;
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
                let mut missing: HashSet<(String, String)> = HashSet::new();
                for pod_ref in batch {
                    let Some(pod) = ctx.pods.get(&pod_ref) else {
                        continue;
                    };
                    let ns = pod.namespace().unwrap_or_default();
                    for name in gated_services(&pod) {
                        let key = ObjectRef::<Service>::new(name).within(&ns);
                        if ctx.services.get(&key).is_none() {
                            missing.insert((ns.clone(), name.to_string()));
                        }
                    }
                }
                for (ns, name) in missing {
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
}

async fn add_finalizer(svc: &Service, ctx: &Context) -> Result<(), Error> {
    let mut finalizers = svc.finalizers().to_vec();
    finalizers.push(LOAD_BALANCER_FINALIZER.into());
    patch_metadata(
        svc,
        ctx,
        json!({"metadata": {"finalizers": finalizers, "resourceVersion": svc.resource_version()}}),
        "finalizer",
    )
    .await
}

async fn remove_finalizer(svc: &Service, ctx: &Context) -> Result<(), Error> {
    let finalizers: Vec<&String> = svc
        .finalizers()
        .iter()
        .filter(|f| *f != LOAD_BALANCER_FINALIZER)
        .collect();
    patch_metadata(
        svc,
        ctx,
        json!({"metadata": {"finalizers": finalizers, "resourceVersion": svc.resource_version()}}),
        "finalizer",
    )
    .await
}

/// A merge patch of the Service's metadata. Gone (404) is fine; a conflict (409, the
/// `resourceVersion` in the patch is stale) is an error: the finalizer must be in place
/// before any cloud resource is made, so the reconcile is retried.
async fn patch_metadata(
    svc: &Service,
    ctx: &Context,
    patch: serde_json::Value,
    what: &'static str,
) -> Result<(), Error> {
    let (ns, name) = (svc.namespace().unwrap_or_default(), svc.name_any());
    match ctx
        .writer
        .merge_patch::<Service>(&ns, &name, Part::Object, &patch)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(source) => {
            tracing::debug!(what, service = %name, "Service patch failed");
            Err(crate::apply::Error::new(Call::PatchService, &ns, &name, source).into())
        }
    }
}

/// Remembers a load balancer rollgate created, so only that one is ever deleted.
async fn record_created(svc: &Service, ctx: &Context, id: &str) {
    let patch = json!({"metadata": {"annotations": {CREATED_ID_ANNOTATION: id}}});
    if let Err(error) = patch_metadata(svc, ctx, patch, "created load balancer id").await {
        tracing::warn!(%error, "could not record the created load balancer");
    }
}

/// `status.loadBalancer.ingress`: an IP for CLB, a DNS name for NLB.
async fn publish_address(svc: &Service, ctx: &Context, address: &str) {
    let is_ip = address.parse::<std::net::IpAddr>().is_ok();
    let ingress = if is_ip {
        json!([{"ip": address}])
    } else {
        json!([{"hostname": address}])
    };
    let current = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .and_then(|i| i.first())
        .map(|i| i.ip.clone().or_else(|| i.hostname.clone()));
    if current == Some(Some(address.to_string())) {
        return;
    }
    let ns = svc.namespace().unwrap_or_default();
    let patch = json!({"status": {"loadBalancer": {"ingress": ingress}}});
    if let Err(error) = ctx
        .writer
        .merge_patch::<Service>(&ns, &svc.name_any(), Part::Status, &patch)
        .await
    {
        tracing::warn!(%error, "could not publish the load balancer address");
    }
}

/// The Service is going away (or left rollgate's classes): delete the load balancer
/// rollgate created, or take rollgate's backends out of an attached one; then let go.
async fn clean_up(svc: &Service, ctx: &Context) -> Result<(), Error> {
    let product = product_for(svc, ClassSelection::Standard)
        .or_else(|| product_for(svc, ClassSelection::Rollgate))
        .unwrap_or(
            match svc
                .spec
                .as_ref()
                .and_then(|s| s.load_balancer_class.as_deref())
            {
                Some(NLB_CLASS) | Some(ROLLGATE_NLB_CLASS) => Product::Nlb,
                _ => Product::Clb,
            },
        );
    let uid = svc.uid().unwrap_or_default();
    match (attached_id(svc), created_id(svc)) {
        (None, Some(created)) => {
            ctx.cloud.delete(product, created).await?;
            tracing::info!(
                load_balancer = created,
                "deleted the load balancer rollgate created"
            );
        }
        (Some(_), _) => {
            let facts = service::facts(svc);
            if let Ok(spec) = lb_spec(svc, &facts, product, &ctx.settings) {
                let lb = ctx.cloud.ensure(&uid, product, &spec).await?;
                for group in &lb.listeners {
                    let owner = owner_description(
                        group.listener_port,
                        &facts.name,
                        &facts.namespace,
                        &ctx.settings.cluster_id,
                    );
                    let state = ctx.cloud.read_group(product, group).await?;
                    let ours: Vec<_> = state
                        .backends
                        .iter()
                        .filter(|b| b.description == owner)
                        .map(|b| b.key.clone())
                        .collect();
                    let changes = super::model::GroupChanges {
                        remove: ours,
                        ..Default::default()
                    };
                    ctx.cloud.apply(product, group, &changes).await?;
                }
                tracing::info!(load_balancer = ?attached_id(svc), "removed rollgate's backends from the attached load balancer");
            }
        }
        (None, None) => {}
    }
    remove_finalizer(svc, ctx).await
}

fn forget(svc: &Service, ctx: &Context) {
    ctx.cloud.forget(&svc.uid().unwrap_or_default());
    ctx.placer.forget(&svc.uid().unwrap_or_default()); // hook (eni.rs)
    ctx.poller.forget(&ObjectRef::from_obj(svc));
    ctx.metrics
        .forget(&svc.namespace().unwrap_or_default(), &svc.name_any());
}

#[cfg(test)]
mod tests {
    //! The controller's condition writes and Events against the fake API server
    //! (`crate::apply::fake_api`).
    use alibaba_lb::credentials::{CredentialProvider, Credentials, StaticCredentials};
    use k8s_openapi::api::core::v1::{Pod, PodReadinessGate, ServiceSpec};

    use super::*;
    use crate::apply::fake_api::{fake_client, status};
    use crate::testkit::{store_of, DaemonSetBuilder, PodBuilder};

    fn context(client: Client, pods: &[Pod]) -> Context {
        // Never called here; a loopback endpoint all the same.
        let mut config = alibaba_lb::ClientConfig::new("cn-hangzhou");
        config.clb_endpoint = Some("127.0.0.1:1".into());
        config.nlb_endpoint = Some("127.0.0.1:1".into());
        let credentials: Arc<dyn CredentialProvider> = Arc::new(StaticCredentials(Credentials {
            access_key_id: "id".into(),
            access_key_secret: "secret".into(),
            security_token: None,
        }));
        let clb = alibaba_lb::new_client(Product::Clb, &config, credentials.clone()).unwrap();
        let nlb = alibaba_lb::new_client(Product::Nlb, &config, credentials).unwrap();
        let metrics = GateMetrics::register(&Metrics::default());
        let settings = GateSettings {
            cluster_id: "test".into(),
            classes: ClassSelection::Standard,
            drain: Duration::from_secs(10),
            vpc_id: None,
            network: None,
            concurrency: 1,
            poll_fast: Duration::from_secs(1),
            poll_slow: Duration::from_secs(10),
            namespace: None,
        };
        Context {
            writer: Writer::new(client.clone()),
            pods: store_of(pods.iter().cloned().map(CachedPod::from)),
            services: store_of([]),
            cloud: Cloud::new(clb, nlb, metrics.clone()),
            placer: Placer::new(None, None, metrics.clone()),
            poller: Poller::new(settings.poll_fast, settings.poll_slow),
            events: Events::new(client, GATES_CONTROLLER_NAME),
            metrics,
            settings,
            orphans: mpsc::unbounded_channel().0,
        }
    }

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
        let ctx = context(client, &pods);
        let svc = Service {
            metadata: kube::api::ObjectMeta {
                name: Some("web".into()),
                namespace: Some("edge".into()),
                uid: Some("uid-svc".into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                type_: Some("ClusterIP".into()),
                ..Default::default()
            }),
            status: None,
        };
        not_a_load_balancer(&svc, &ctx).await.unwrap();

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
}
