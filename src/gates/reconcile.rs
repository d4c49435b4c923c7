//! One reconcile of a Service, as named stages: `route` (serve it, leave it, or let
//! go of it), `prepare` (finalizer, moves between load balancers, the annotations'
//! Warnings, the load balancer spec), `look` (the cloud's state, the pods and where
//! their backends live), `plan::plan` (pure), `apply` (backend changes, then the gate
//! conditions), `report` (the Service's Warnings and gauges), and `after_look` (pure:
//! what the poller and the runner do next). Each stage has one job; the reconcile
//! reads as the list of them.
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use alibaba_lb::{Error as CloudError, LoadBalancer, LoadBalancerSpec, Product, ServerGroupRef};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::ResourceExt;

use super::annotations::drain_time;
use super::attached::apply::follow_attached_move;
use super::cleanup;
use super::cloud;
use super::conditions::{send_conditions, write_conditions};
use super::context::{Context, Error, EVENT_ACTION};
use super::eni;
use super::lb_spec::{adopt_former_groups, lb_spec};
use super::model::{
    owner_description, CloudState, GatePlan, GatePod, GroupState, Placement, PlanInput,
};
use super::orphans;
use super::plan::{plan, plan_invalid_annotation};
use super::pods::service_pods;
use super::poller::{look_cost, Outcome, Priority, ReadRule};
use super::service::ServiceSnapshot;
use super::service_writes::{
    add_finalizer, publish_address, publish_server_groups, record_created,
};
use super::unwanted_wiring;
use crate::names::INVALID_ANNOTATION_EVENT;
use crate::object::CachedPod;

#[tracing::instrument(skip_all, fields(service = %svc.name_any(), namespace = %svc.namespace().unwrap_or_default()))]
pub async fn reconcile(svc: Arc<Service>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.poller.reconcile_started(&ObjectRef::from_obj(&*svc));
    // The one look at the API object; everything below reads the snapshot (the
    // object is dropped, so nothing can go back to it).
    let service = ServiceSnapshot::read(&svc, ctx.settings.classes);
    drop(svc);
    let product = match route(&service) {
        Step::Release => return release(&service, &ctx).await,
        Step::Leave => return leave(&service, &ctx).await,
        Step::Serve(product) => product,
    };
    let Some(spec) = prepare(&service, &ctx, product).await? else {
        return Ok(Action::await_change());
    };
    let Some(look) = look(&service, &ctx, product, &spec).await? else {
        // No reading young enough: the look asked for brings the reconcile that plans.
        return Ok(Action::await_change());
    };
    let input = look.plan_input(&service, &ctx, product, &spec);
    let mut decided = plan(&input);
    let apply_error = apply(&service, &ctx, product, &look, &input, &mut decided).await?;
    report(&service, &ctx, &look, &decided, apply_error.as_ref()).await;
    let next = after_look(&AfterLook {
        pending_gates: decided.pending_gates,
        changed: !decided.changes.is_empty(),
        next_deadline: decided.next_deadline,
        refused: look.refused().is_some(),
        errors: [apply_error.as_ref(), look.read_error.as_ref()],
        now: input.now,
    });
    // The budget counts the calls outside a grant (and every other call) from the
    // client's call count.
    let outside = look.calls_outside_grant + apply_calls(&decided, &look);
    ctx.metrics.calls_for(next.priority, outside as u64);
    let key = service.key();
    match next.poll {
        Poll::Throttled => ctx.poller.throttled_look(&key, product),
        Poll::Polled(outcome) => {
            let listeners = look.lb.as_ref().map_or(1, |lb| lb.listeners.len());
            ctx.poller
                .polled(key, product, listeners, outcome, look.looked, look.started)
        }
    }
    match (next.result, apply_error.or(look.read_error)) {
        (Next::Retry, Some(error)) => Err(error.into()),
        (Next::Requeue(after), _) => Ok(Action::requeue(after)),
        _ => Ok(Action::await_change()),
    }
}

/// Deleted, or no longer rollgate's: the cloud side goes, then the finalizer.
async fn release(service: &ServiceSnapshot, ctx: &Context) -> Result<Action, Error> {
    ctx.annotation_events.forget(&service.uid);
    cleanup::release(service, ctx).await?;
    Ok(Action::await_change())
}

/// Not rollgate's: never touched; a Service that is not a load balancer tells the
/// pods whose gates name it.
async fn leave(service: &ServiceSnapshot, ctx: &Context) -> Result<Action, Error> {
    ctx.poller.forget(&service.key());
    if !service.is_load_balancer() {
        orphans::not_a_load_balancer(service, ctx).await?;
    }
    // A LoadBalancer of another class: another controller's, never touched.
    Ok(Action::await_change())
}

/// Everything before the cloud is looked at: the finalizer, a move between load
/// balancers (done first, alone), the Warnings of annotations rollgate does not act
/// on, and the load balancer spec. `None`: nothing more this time (a move was made, or
/// an annotation is invalid, which the Service and the pods were told).
async fn prepare(
    service: &ServiceSnapshot,
    ctx: &Context,
    product: Product,
) -> Result<Option<LoadBalancerSpec>, Error> {
    if !service.holds_finalizer() {
        add_finalizer(service, ctx).await?;
    }
    // Moved to a load balancer the user names: the one rollgate made goes first (the
    // next reconcile, on the cleared annotation, serves the new one).
    if cleanup::let_go_of_replaced(service, ctx).await? {
        ctx.cloud.forget(&service.uid);
        return Ok(None);
    }
    // Moved off a load balancer the user named: rollgate's backends leave it first.
    if follow_attached_move(service, ctx).await? {
        ctx.cloud.forget(&service.uid);
        return Ok(None);
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
    let vpc_id = settings.vpc_id.as_deref();
    // A timeout that cannot be read is not silently off: the gates say so instead.
    let spec = match &service.gate_timeout {
        Err(problem) => Err(problem.clone()),
        Ok(_) => lb_spec(service, product, &settings.cluster_id, vpc_id),
    };
    match spec {
        Ok(mut spec) => {
            let legacy = settings.legacy_cluster_id.as_deref();
            adopt_former_groups(&mut spec, &service.facts, legacy);
            Ok(Some(spec))
        }
        Err(problem) => {
            say_invalid_annotation(service, ctx, &problem).await?;
            Ok(None)
        }
    }
}

/// An invalid annotation: a Warning on the Service, and the pods say it too (their
/// condition is where users look first). Nothing is asked of the cloud.
async fn say_invalid_annotation(
    service: &ServiceSnapshot,
    ctx: &Context,
    problem: &str,
) -> Result<(), Error> {
    ctx.events
        .publish(
            &service.reference,
            EventType::Warning,
            INVALID_ANNOTATION_EVENT,
            EVENT_ACTION,
            problem.to_string(),
        )
        .await;
    let pods = service_pods(&ctx.pods, service);
    let gate_pods: Vec<GatePod> = pods.iter().map(|(_, p)| p.clone()).collect();
    let decided = GatePlan {
        conditions: plan_invalid_annotation(&gate_pods, problem),
        ..GatePlan::default()
    };
    let now = Timestamp::now();
    write_conditions(ctx, &service.reference, &pods, &decided, now).await
}

/// What one look saw: the cloud side, the pods and where their backends live.
struct Look {
    cloud: CloudState,
    lb: Option<LoadBalancer>,
    /// The error that made `cloud` a failure, if any.
    read_error: Option<CloudError>,
    pods: Vec<(Arc<CachedPod>, GatePod)>,
    gate_pods: Vec<GatePod>,
    placements: HashMap<String, Placement>,
    /// When the cloud state was read (earlier than now for a reused reading).
    observed_at: Timestamp,
    /// When the reconcile started, and when the reading it plans on was made.
    started: tokio::time::Instant,
    looked: tokio::time::Instant,
    calls_outside_grant: usize,
}

impl Look {
    fn plan_input<'a>(
        &'a self,
        service: &'a ServiceSnapshot,
        ctx: &'a Context,
        product: Product,
        spec: &LoadBalancerSpec,
    ) -> PlanInput<'a> {
        let settings = &ctx.settings;
        PlanInput {
            service: &service.facts,
            cluster_id: &settings.cluster_id,
            legacy_cluster_id: settings.legacy_cluster_id.as_deref(),
            backend_type: ctx.cloud.backend_type(product),
            placements: &self.placements,
            pods: &self.gate_pods,
            cloud: &self.cloud,
            // Every listener carries the same settings (from the Service's annotations).
            drain: spec
                .listeners
                .first()
                .map_or(settings.drain, |l| drain_time(&l.settings, settings.drain)),
            now: Timestamp::now(),
        }
    }

    /// The instance and its spec, when the Service's CLB instance takes no pod backends.
    fn refused(&self) -> Option<(&str, &str)> {
        match &self.cloud {
            CloudState::PodBackendsRefused {
                load_balancer_id,
                instance,
            } => Some((load_balancer_id.as_str(), instance.as_str())),
            _ => None,
        }
    }
}

/// The cloud's state for the Service (read now, or the last reading while the poller
/// allows it: a look the scheduler granted always reads the cloud, any other
/// reconcile, a pod event or a drain deadline, re-plans on the last reading until the
/// Service's next look is due, and without one asks for that look: `Cloud::reading`,
/// `Poller::read_rule`), then the pods and where their CLB backends live (`eni`; a
/// failed lookup holds the gates). `None`: a look was asked for, and its reconcile
/// plans.
async fn look(
    service: &ServiceSnapshot,
    ctx: &Context,
    product: Product,
    spec: &LoadBalancerSpec,
) -> Result<Option<Look>, Error> {
    let key = service.key();
    let started = tokio::time::Instant::now();
    let rule = ctx.poller.read_rule(&key);
    let mut look = Look {
        cloud: CloudState::NotReady {
            load_balancer_id: None,
        },
        lb: None,
        read_error: None,
        pods: vec![],
        gate_pods: vec![],
        placements: HashMap::new(),
        observed_at: Timestamp::now(),
        started,
        looked: started,
        calls_outside_grant: 0,
    };
    match observe_cloud(service, ctx, product, spec, rule).await {
        Ok(None) => return Ok(None),
        Ok(Some((state, lb, read))) => {
            match read {
                Read::Reused(at) => {
                    // The plan sees the cloud as it was then (the flip histogram too).
                    look.looked = at;
                    let observed_at = look.observed_at;
                    look.observed_at = observed_at.checked_sub(at.elapsed()).unwrap_or(observed_at);
                }
                Read::Fresh if rule != ReadRule::Read => {
                    look.calls_outside_grant += look_cost(lb.listeners.len()) as usize
                }
                Read::Fresh | Read::None => {}
            }
            look.cloud = state;
            look.lb = Some(lb);
        }
        Err(Error::Cloud(error)) => {
            look.cloud = CloudState::Failed(cloud::failure(&error));
            look.read_error = Some(error);
        }
        // The created load balancer's id could not be recorded: nothing else is done
        // until it is (the retry finds the same load balancer by its ClientToken).
        Err(write) => return Err(write),
    }
    ctx.cloud
        .warn_other_cluster(
            &ctx.events,
            EVENT_ACTION,
            &service.uid,
            &service.reference,
            look.read_error.as_ref(),
        )
        .await;
    look.pods = service_pods(&ctx.pods, service);
    look.gate_pods = look.pods.iter().map(|(_, p)| p.clone()).collect();
    if matches!(look.cloud, CloudState::Ready(_)) {
        match ctx.placer.place(product, &look.pods).await {
            Ok(placements) => look.placements = placements,
            Err(error) => {
                look.cloud = CloudState::Failed(cloud::failure(&error));
                look.read_error = Some(error);
            }
        }
    }
    Ok(Some(look))
}

/// Sends the plan's backend changes, then the gate conditions, without waiting for
/// those (`send_conditions`). A failed change (a failed NLB job too) holds every gate
/// that is not True yet with the error (`decided` is re-planned on it), and is returned
/// so the reconcile is retried.
async fn apply(
    service: &ServiceSnapshot,
    ctx: &Arc<Context>,
    product: Product,
    look: &Look,
    input: &PlanInput<'_>,
    decided: &mut GatePlan,
) -> Result<Option<CloudError>, Error> {
    let apply_error = match &look.lb {
        Some(lb) if !decided.changes.is_empty() => {
            // Whatever comes of it, the reading no longer shows the backends.
            ctx.cloud.void_reading(&service.uid);
            apply_changes(ctx, product, lb, decided).await
        }
        _ => None,
    };
    if let Some(error) = &apply_error {
        let failed = CloudState::Failed(cloud::failure(error));
        decided.conditions = plan(&PlanInput {
            cloud: &failed,
            ..*input
        })
        .conditions;
    }
    send_conditions(
        ctx,
        &service.reference,
        &look.pods,
        decided,
        look.observed_at,
    );
    Ok(apply_error)
}

/// What the Service is told, once per cause (an instance that takes no pod backends,
/// pod IPs outside the VPC, a used-up quota), and the gauges of its groups.
async fn report(
    service: &ServiceSnapshot,
    ctx: &Context,
    look: &Look,
    decided: &GatePlan,
    apply_error: Option<&CloudError>,
) {
    let (uid, reference) = (&service.uid, &service.reference);
    ctx.cloud
        .warn_no_pod_backends(&ctx.events, EVENT_ACTION, uid, reference, look.refused())
        .await;
    if matches!(look.cloud, CloudState::Ready(_)) {
        let outside = eni::outside_vpc(&look.pods, &look.placements);
        ctx.placer
            .warn_outside_vpc(&ctx.events, EVENT_ACTION, uid, reference, &outside)
            .await;
    }
    let failed = apply_error.or(look.read_error.as_ref());
    ctx.cloud
        .warn_quota(&ctx.events, EVENT_ACTION, uid, reference, failed)
        .await;
    if let CloudState::Ready(groups) = &look.cloud {
        let facts = &service.facts;
        let (ns, name, cluster) = (&facts.namespace, &facts.name, &ctx.settings.cluster_id);
        ctx.metrics.set_state(
            ns,
            name,
            |port| owner_description(port, name, ns, cluster),
            groups,
            decided,
        );
    }
}

/// Calls the plan's backend changes took outside a grant (none when there was no load
/// balancer to change, or nothing to change).
fn apply_calls(decided: &GatePlan, look: &Look) -> usize {
    if look.lb.is_some() && !decided.changes.is_empty() {
        write_calls(decided)
    } else {
        0
    }
}

/// What a look ended with, as the next step reads it.
#[derive(Debug)]
struct AfterLook<'a> {
    pending_gates: usize,
    changed: bool,
    next_deadline: Option<Timestamp>,
    /// The CLB instance takes no pod backends (waits on the user's fix).
    refused: bool,
    /// The apply's error and the look's.
    errors: [Option<&'a CloudError>; 2],
    now: Timestamp,
}

/// How the poller hears of the look.
#[derive(Debug, PartialEq)]
enum Poll {
    /// Throttled: the same look again, first of its class, once the product's pace
    /// allows.
    Throttled,
    Polled(Outcome),
}

/// What the runner does next.
#[derive(Debug, PartialEq)]
enum Next {
    /// An error: the runner retries with its backoff.
    Retry,
    /// A drain deadline to act on.
    Requeue(Duration),
    /// The poller brings the next look at the cloud.
    AwaitChange,
}

#[derive(Debug, PartialEq)]
struct NextSteps {
    poll: Poll,
    result: Next,
    /// The class of the next look (which share of the budget pays its calls).
    priority: Priority,
}

/// Pure: the poller's and the runner's next step after a look. A used-up quota waits
/// on the user (Quota Center), like an instance that takes no pod backends: the slow
/// poll looks again, and no error backoff retries it faster. A throttled look is
/// looked at again first of its class. Any other error is retried by the runner.
fn after_look(look: &AfterLook<'_>) -> NextSteps {
    let errors = || look.errors.iter().flatten();
    let quota_exceeded = errors().any(|e| e.is_quota_exceeded());
    let outcome = Outcome {
        pending_gates: look.pending_gates,
        changed: look.changed,
        draining: look.next_deadline.is_some(),
        failed: errors().next().is_some(),
        refused: look.refused || quota_exceeded,
    };
    let priority = outcome.next_look().0;
    let poll = if errors().any(|e| e.is_throttling()) {
        Poll::Throttled
    } else {
        Poll::Polled(outcome)
    };
    let result = if errors().next().is_some() && !quota_exceeded {
        Next::Retry
    } else {
        match look.next_deadline {
            Some(at) => Next::Requeue(until(look.now, at)),
            None => Next::AwaitChange,
        }
    };
    NextSteps {
        poll,
        result,
        priority,
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

/// Pure: whether the Service is rollgate's to serve, to leave alone, or to let go of.
fn route(service: &ServiceSnapshot) -> Step {
    if service.deleting || (service.product.is_none() && service.holds_finalizer()) {
        return Step::Release;
    }
    match service.product {
        Some(product) => Step::Serve(product),
        None => Step::Leave,
    }
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
/// address published, and its groups read, or the last reading reused when `rule`
/// allows one that old and the load balancer was not just (re)ensured. `None`: no
/// reading could be reused and `rule` says to ask for a look instead of reading
/// (asked).
async fn observe_cloud(
    service: &ServiceSnapshot,
    ctx: &Context,
    product: Product,
    spec: &LoadBalancerSpec,
    rule: ReadRule,
) -> Result<Option<(CloudState, LoadBalancer, Read)>, Error> {
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
        if let Err(error) = unwanted_wiring::remove_unwanted_wiring(
            ctx,
            product,
            &lb.id,
            spec,
            &facts.name,
            &facts.namespace,
        )
        .await
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
        return Ok(Some((
            CloudState::NotReady {
                load_balancer_id: Some(lb.id.clone()),
            },
            lb,
            Read::None,
        )));
    };
    publish_address(service, ctx, &address).await;
    // A CLB instance that refuses ENI/ECI backends: nothing to read or register.
    if let Some(instance) = lb.clb_instance.as_ref().filter(|i| !i.takes_pod_backends()) {
        return Ok(Some((
            CloudState::PodBackendsRefused {
                load_balancer_id: lb.id.clone(),
                instance: instance.describe(),
            },
            lb,
            Read::None,
        )));
    }
    let now = tokio::time::Instant::now();
    let reuse = match rule {
        _ if fresh => None,
        ReadRule::Read => None,
        ReadRule::ReuseOrRead(max_age) | ReadRule::ReuseOrAsk(max_age) => Some(max_age),
    };
    if let Some(max_age) = reuse {
        if let Some(reading) = ctx.cloud.reading(uid, &lb.listeners, max_age, now) {
            return Ok(Some((
                CloudState::Ready(reading.groups),
                lb,
                Read::Reused(reading.at),
            )));
        }
        if matches!(rule, ReadRule::ReuseOrAsk(_)) {
            ctx.poller.look_now(&service.key());
            return Ok(None);
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
    Ok(Some((CloudState::Ready(groups), lb, Read::Fresh)))
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
            assert_eq!(route(&snapshot), want, "{case}");
        }
    }

    fn api_error(code: &str) -> CloudError {
        CloudError::Api {
            action: "CreateLoadBalancer".into(),
            status: 400,
            code: code.into(),
            message: format!("{code} message"),
            request_id: "R".into(),
        }
    }

    /// What happens after a look, as docs/readiness-gates.md tells it: pending gates
    /// and fresh changes look again fast; a drain deadline requeues; throttling looks
    /// again first of its class; a used-up quota or an instance that takes no pod
    /// backends waits on the slow poll without the error backoff; other errors are
    /// retried by the runner.
    #[test]
    fn after_a_look_the_poller_and_the_runner_do_what_the_docs_say() {
        let deadline = Timestamp::UNIX_EPOCH + k8s_openapi::jiff::SignedDuration::from_secs(5);
        let (throttled, quota, other) = (
            api_error("Throttling.User"),
            api_error("QuotaExceeded"),
            api_error("InvalidParameter"),
        );
        fn look(
            (pending_gates, changed): (usize, bool),
            next_deadline: Option<Timestamp>,
            refused: bool,
            error: Option<&CloudError>,
        ) -> AfterLook<'_> {
            AfterLook {
                pending_gates,
                changed,
                next_deadline,
                refused,
                errors: [None, error],
                now: Timestamp::UNIX_EPOCH,
            }
        }
        // (case, the look, poll fast?, the class of the next look, throttled?, next)
        #[rustfmt::skip]
        let cases: Vec<(&str, AfterLook, bool, Priority, bool, Next)> = vec![
            ("all settled", look((0, false), None, false, None), false, Priority::Settled, false, Next::AwaitChange),
            ("gates pending", look((3, false), None, false, None), true, Priority::Pending, false, Next::AwaitChange),
            ("backends just changed", look((0, true), None, false, None), true, Priority::Draining, false, Next::AwaitChange),
            ("a drain running", look((0, false), Some(deadline), false, None), false, Priority::Draining, false, Next::Requeue(Duration::from_millis(5050))),
            ("throttled", look((3, false), None, false, Some(&throttled)), true, Priority::Pending, true, Next::Retry),
            ("an instance without pod backends", look((3, false), None, true, None), false, Priority::Settled, false, Next::AwaitChange),
            ("a used-up quota", look((3, false), None, false, Some(&quota)), false, Priority::Settled, false, Next::AwaitChange),
            ("another error", look((0, false), None, false, Some(&other)), true, Priority::Pending, false, Next::Retry),
        ];
        for (case, look, fast, priority, throttled, next) in cases {
            let steps = after_look(&look);
            assert_eq!(steps.priority, priority, "{case}");
            assert_eq!(steps.result, next, "{case}");
            match steps.poll {
                Poll::Throttled => assert!(throttled, "{case}: throttled"),
                Poll::Polled(outcome) => {
                    assert!(!throttled, "{case}: polled");
                    assert_eq!(outcome.next_look().1, fast, "{case}: fast");
                }
            }
        }
    }
}
