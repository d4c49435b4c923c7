//! Wiring: per pod, observe (the shared stores, `crate::watch`) -> [`plan_image_pull`]
//! -> `apply` (Job create/delete, one condition write, Events, metrics). Creating a Job
//! reads the live pod once (its tolerations, which the shared cache does not keep).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{Future, StreamExt};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::Controller;
use kube::{Api, Client, Resource, ResourceExt};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::job::{with_pod_tolerations, PullJobSettings};
use super::plan::{
    classify_name_holder, has_pending_request, plan_image_pull, ImagePullPlan, JobRef, NameHolder,
    Step,
};
use crate::apply::{Call, ConditionPatch, Events, Writer, CALLS_IN_FLIGHT};
use crate::daemonset::triggers::daemonset_unchanged;
use crate::leader::Leadership;
use crate::names::{
    IMAGE_PULL_CONTROLLER_NAME, INVALID_PULL_DEADLINE_EVENT, PULL_IMAGE_FAIL_REASON,
    PULL_IMAGE_JOB_NAME_CONFLICT_EVENT, PULL_IMAGE_STARTED_EVENT, PULL_IMAGE_SUCCESS_REASON,
    PULL_JOB_POD_UID_LABEL, PULL_JOB_REVISION_LABEL,
};
use crate::object::{is_controlled_by, label, CachedPod, PodFacts};
use crate::runtime::Shutdown;
use crate::watch::runner::{ErrorCounter, Run, RunMetrics};
use crate::watch::{applied, applied_unless, Stores, Watches};
/// How long to wait before trying again after a name conflict: a person has to act.
const NAME_CONFLICT_BACKOFF: Duration = Duration::from_secs(300);
/// The `action` of this controller's Events.
const EVENT_ACTION: &str = "PullImage";

// ---------------------------------------------------------------------------------------
// Observe: the caches and what triggers a reconcile
// ---------------------------------------------------------------------------------------

/// Pods of `ds_uid` with a request waiting, as reconcile requests.
fn pending_pods_of(pods: &Store<CachedPod>, ds_uid: &str) -> Vec<ObjectRef<CachedPod>> {
    pods.state()
        .into_iter()
        .filter(|p| is_controlled_by(&**p, ds_uid) && has_pending_request(&**p))
        .map(|p| ObjectRef::from_obj(&*p))
        .collect()
}

/// What one reconcile reads from the caches for `pod`.
struct Observed {
    daemonset: Option<Arc<DaemonSet>>,
    revisions: Vec<ControllerRevision>,
    jobs: Vec<Job>,
}

fn observe(pod: &CachedPod, stores: &Stores) -> Observed {
    let ns = pod.namespace().unwrap_or_default();
    // Not `ResourceExt::owner_references`: a cached pod keeps its owners apart.
    let daemonset = PodFacts::owner_references(pod)
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == "DaemonSet")
        .and_then(|o| stores.daemonsets.get(&ObjectRef::new(&o.name).within(&ns)));
    let revisions = stores
        .revisions
        .state_filter(|r| r.namespace().as_deref() == Some(ns.as_str()))
        .iter()
        .map(|r| (**r).clone())
        .collect();
    let uid = pod.uid().unwrap_or_default();
    let jobs = stores
        .jobs
        .state_filter(|j| {
            j.namespace().as_deref() == Some(ns.as_str())
                && label(&j.metadata, PULL_JOB_POD_UID_LABEL) == Some(uid.as_str())
        })
        .iter()
        .map(|j| (**j).clone())
        .collect();
    Observed {
        daemonset,
        revisions,
        jobs,
    }
}

// ---------------------------------------------------------------------------------------
// Errors and metrics
// ---------------------------------------------------------------------------------------

/// A failed Job create, read or delete, or condition write (see `crate::apply`).
pub use crate::apply::Error;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: String,
}

#[derive(Clone)]
struct ImagePullMetrics {
    /// Only creates the API server answered with 2xx: a 409 created nothing.
    jobs_created: Counter,
    /// Only outcomes that were written: a write refused with 404/409 reported nothing.
    results: Family<ResultLabels, Counter>,
    name_conflicts: Counter,
    reconcile_errors: ErrorCounter,
}

impl ImagePullMetrics {
    fn register(metrics: &crate::metrics::Metrics) -> Self {
        let m = Self {
            jobs_created: Counter::default(),
            results: Family::default(),
            name_conflicts: Counter::default(),
            reconcile_errors: Family::default(),
        };
        metrics.with_registry(|r| {
            let mut r = r.prefixed("rollgate_image_pull");
            r.register(
                "jobs_created",
                "Image pre-pull Jobs created",
                m.jobs_created.clone(),
            );
            r.register(
                "results",
                "Pre-pull outcomes written to PodImageReady",
                m.results.clone(),
            );
            r.register(
                "job_name_conflicts",
                "Pre-pulls held up because another object has the pull Job's name",
                m.name_conflicts.clone(),
            );
            r.register(
                "reconcile_errors",
                "Failed reconciles by kind",
                m.reconcile_errors.clone(),
            );
        });
        m
    }

    fn count_result(&self, result: &str) {
        self.results
            .get_or_create(&ResultLabels {
                result: result.into(),
            })
            .inc();
    }
}

// ---------------------------------------------------------------------------------------
// The controller
// ---------------------------------------------------------------------------------------

struct Context {
    /// Reads the Job holding a name (writes go through `writer`).
    client: Client,
    writer: Writer,
    stores: Stores,
    settings: PullJobSettings,
    events: Events,
    metrics: ImagePullMetrics,
}

/// Subscribes to the shared watches and returns the controller, ready to be driven.
/// What the shared caches must keep for it (see `crate::watch::prune`): of pods, owner
/// references, labels, UID, `spec.nodeName`, `spec.serviceAccountName`,
/// `spec.imagePullSecrets` and `status.conditions`; of Jobs, labels, the request
/// annotation, owner references and `status.conditions`; of DaemonSets, the pod template
/// and generations.
pub fn start(
    watches: &Watches,
    client: Client,
    metrics: &crate::metrics::Metrics,
    settings: PullJobSettings,
    leadership: Leadership,
    shutdown: Shutdown,
) -> impl Future<Output = ()> {
    tracing::info!(helper_image = %settings.helper_image, "image pull controller starting");
    let stores = watches.stores.clone();
    let image_pull_metrics = ImagePullMetrics::register(metrics);
    let ctx = Arc::new(Context {
        client: client.clone(),
        writer: Writer::new(client.clone()),
        stores: stores.clone(),
        settings,
        events: Events::new(client, IMAGE_PULL_CONTROLLER_NAME),
        metrics: image_pull_metrics.clone(),
    });

    let (pods_for_ds, pods_for_rev) = (stores.pods.clone(), stores.pods.clone());
    // The store holds every pod of the cluster; only a waiting request needs a reconcile
    // (Job and revision changes still reach the pod through the mappers below).
    let requests = applied(watches.pod_changes())
        .filter(|pod| futures::future::ready(has_pending_request(&**pod)));
    // A DaemonSet's status writes change nothing here: each would scan every pod.
    let daemonsets = applied_unless(watches.daemonset_changes(), daemonset_unchanged);
    let controller = Controller::for_shared_stream(requests, stores.pods)
        .owns_shared_stream(applied(watches.job_changes()))
        // A new revision while a request waits: replan (the pull may be stale now).
        .watches_shared_stream(daemonsets, move |ds| {
            pending_pods_of(&pods_for_ds, &ds.uid().unwrap_or_default())
        })
        .watches_shared_stream(applied(watches.revision_changes()), move |rev| {
            rev.owner_references()
                .iter()
                .filter(|o| o.controller == Some(true) && o.kind == "DaemonSet")
                .flat_map(|o| pending_pods_of(&pods_for_rev, &o.uid))
                .collect::<Vec<_>>()
        });
    let run = Run {
        name: "image-pull",
        // One write per reconcile, mostly: the bound on calls in flight.
        concurrency: CALLS_IN_FLIGHT as u16,
        synced: watches.synced(),
        errors: image_pull_metrics.reconcile_errors,
        metrics: RunMetrics::of(metrics),
        own_duration: None,
        leadership,
        shutdown,
        ahead: None,
    };
    run.drive(controller, reconcile, ctx)
}

#[tracing::instrument(skip_all, fields(pod = %pod.name_any(), namespace = %pod.namespace().unwrap_or_default()))]
async fn reconcile(pod: Arc<CachedPod>, ctx: Arc<Context>) -> Result<Action, Error> {
    // Cheap exit for the many DaemonSet pods nobody asked to pre-pull.
    if !has_pending_request(&pod) {
        return Ok(Action::await_change());
    }
    let started = Instant::now();
    let observed = observe(&pod, &ctx.stores);
    let plan = plan_image_pull(
        &pod,
        observed.daemonset.as_deref(),
        &observed.revisions,
        &observed.jobs,
        Timestamp::now(),
        &ctx.settings,
    );
    let action = apply(&pod, plan, &ctx).await;
    tracing::debug!(elapsed = ?started.elapsed(), "image pull reconciled");
    action
}

// ---------------------------------------------------------------------------------------
// Apply
// ---------------------------------------------------------------------------------------

async fn apply(pod: &CachedPod, plan: ImagePullPlan, ctx: &Context) -> Result<Action, Error> {
    let ns = pod.namespace().unwrap_or_default();
    for job in &plan.delete_jobs {
        delete_job(ctx, &ns, job, "it answers an earlier request or revision").await?;
    }
    match plan.step {
        Step::Nothing => Ok(Action::await_change()),
        Step::Wait { why } => {
            tracing::debug!(%why, "image pull waits");
            Ok(Action::requeue(Duration::from_secs(2)))
        }
        Step::WaitForJob { .. } => Ok(Action::requeue(Duration::from_secs(60))),
        Step::CreateJob { job } => create_job(pod, &ns, &job, ctx).await,
        Step::MarkSucceeded { job, condition } => {
            if !write_condition(pod, &condition, ctx).await? {
                return Ok(Action::await_change());
            }
            ctx.metrics.count_result("success");
            let note = format!(
                "images of {} pulled on the node by Job {job}",
                condition.message.as_deref().unwrap_or_default()
            );
            tracing::info!(%job, "image pre-pull succeeded");
            publish(ctx, pod, EventType::Normal, PULL_IMAGE_SUCCESS_REASON, note).await;
            Ok(Action::await_change())
        }
        Step::MarkFailed { job, condition } => {
            if !write_condition(pod, &condition, ctx).await? {
                return Ok(Action::await_change());
            }
            ctx.metrics.count_result("failure");
            let note = condition.message.clone().unwrap_or_default();
            tracing::warn!(job = ?job, %note, "image pre-pull failed");
            publish(ctx, pod, EventType::Warning, PULL_IMAGE_FAIL_REASON, note).await;
            Ok(Action::await_change())
        }
        Step::InvalidDeadline {
            error,
            daemonset,
            condition,
        } => {
            // On the DaemonSet, where the annotation is to be fixed (de-duplicated by
            // the recorder however many pods ask).
            ctx.events
                .publish(
                    &daemonset,
                    EventType::Warning,
                    INVALID_PULL_DEADLINE_EVENT,
                    EVENT_ACTION,
                    error.to_string(),
                )
                .await;
            if !write_condition(pod, &condition, ctx).await? {
                return Ok(Action::await_change());
            }
            ctx.metrics.count_result("failure");
            tracing::warn!(%error, "image pre-pull refused");
            let note = condition.message.clone().unwrap_or_default();
            publish(ctx, pod, EventType::Warning, PULL_IMAGE_FAIL_REASON, note).await;
            Ok(Action::await_change())
        }
    }
}

/// Background propagation (the Job's pod goes too, without waiting for it) and a UID
/// precondition (a newer Job that took the name is never hit). Gone or replaced already
/// is fine: the next look at the caches decides again.
async fn delete_job(ctx: &Context, ns: &str, job: &JobRef, why: &str) -> Result<(), Error> {
    let outcome = ctx
        .writer
        .delete_job(ns, &job.name, job.uid.as_deref())
        .await?;
    if outcome.landed() {
        tracing::info!(job = %job.name, why, "deleted image pull Job");
    }
    Ok(())
}

/// Creates the pull Job. Only a create the API server accepted (2xx) is counted and
/// announced; a 409 created nothing, so it is looked into instead (see
/// [`classify_name_holder`]).
async fn create_job(pod: &CachedPod, ns: &str, job: &Job, ctx: &Context) -> Result<Action, Error> {
    let name = job.name_any();
    // One GET of the live pod for its tolerations (see `job::with_pod_tolerations`).
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let pod_name = pod.name_any();
    let live = match pods.get_opt(&pod_name).await {
        Ok(live) => live,
        Err(source) => return Err(Error::new(Call::ReadPod, ns, &pod_name, source)),
    };
    let Some(live) = live.filter(|l| l.metadata.uid == pod.uid()) else {
        // Gone or replaced since the cache saw it: the pod's own events decide again.
        tracing::debug!(pod = %pod_name, "pod gone or replaced before its pull Job was made");
        return Ok(Action::await_change());
    };
    let pod_tolerations = live.spec.and_then(|s| s.tolerations).unwrap_or_default();
    let job = &with_pod_tolerations(job.clone(), &pod_tolerations);
    match ctx.writer.create(ns, job).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {
            return resolve_name_conflict(pod, ns, &name, ctx).await;
        }
        Err(source) => return Err(Error::new(Call::CreateJob, ns, &name, source)),
    }
    ctx.metrics.jobs_created.inc();
    let spec = job.spec.as_ref().and_then(|s| s.template.spec.as_ref());
    let images: Vec<String> = spec
        .map(|s| {
            s.containers
                .iter()
                .filter_map(|c| c.image.clone())
                .collect()
        })
        .unwrap_or_default();
    let node = spec.and_then(|s| s.node_name.clone()).unwrap_or_default();
    let revision = label(&job.metadata, PULL_JOB_REVISION_LABEL).unwrap_or_default();
    tracing::info!(job = %name, %node, revision, ?images, "image pull Job created");
    publish(
        ctx,
        pod,
        EventType::Normal,
        PULL_IMAGE_STARTED_EVENT,
        format!(
            "pulling {} image(s) of revision {revision} on node {node} with Job {name}: {}",
            images.len(),
            images.join(", ")
        ),
    )
    .await;
    Ok(Action::requeue(Duration::from_secs(60)))
}

/// The create answered 409: find out who holds the name, and act on that once.
async fn resolve_name_conflict(
    pod: &CachedPod,
    ns: &str,
    name: &str,
    ctx: &Context,
) -> Result<Action, Error> {
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), ns);
    let holder = match jobs.get_opt(name).await {
        Ok(Some(holder)) => holder,
        // Gone between the create and the read: try again right away.
        Ok(None) => return Ok(Action::requeue(Duration::from_secs(1))),
        Err(source) => return Err(Error::new(Call::ReadJob, ns, name, source)),
    };
    let pods = &ctx.stores.pods;
    let pod_is_cached = |uid: &str| pods.state().iter().any(|p| p.uid().as_deref() == Some(uid));
    match classify_name_holder(&holder, pod, pod_is_cached) {
        NameHolder::ThisPod => {
            tracing::debug!(job = %name, "pull Job exists, the cache has not delivered it yet");
            Ok(Action::requeue(Duration::from_secs(1)))
        }
        NameHolder::StalePull(stale) => {
            delete_job(
                ctx,
                ns,
                &stale,
                "its pod is gone and this pod needs the name",
            )
            .await?;
            Ok(Action::requeue(Duration::from_secs(1)))
        }
        NameHolder::Conflict { why } => {
            ctx.metrics.name_conflicts.inc();
            tracing::warn!(job = %name, %why, "image pull Job name taken");
            publish(
                ctx,
                pod,
                EventType::Warning,
                PULL_IMAGE_JOB_NAME_CONFLICT_EVENT,
                why,
            )
            .await;
            Ok(Action::requeue(NAME_CONFLICT_BACKOFF))
        }
    }
}

/// Strategic merge on the conditions list (merge key `type`) touches only
/// `PodImageReady`; the pod's UID makes the write fail on a replaced pod of the same name.
/// Returns whether the condition was written: a pod that is gone (404) or was replaced
/// (409) was told nothing, so nothing is counted or announced; nor is a repeat of our
/// last write that the cached pod does not show yet (a reconcile on the Job's change
/// can run before the pod's own update arrives).
async fn write_condition(
    pod: &CachedPod,
    condition: &PodCondition,
    ctx: &Context,
) -> Result<bool, Error> {
    let ns = pod.namespace().unwrap_or_default();
    let uid = pod.uid();
    let write = ConditionPatch::set(ns, pod.name_any(), uid.as_deref(), condition)
        .planned_from(&pod.metadata);
    Ok(ctx.writer.write_condition(&write).await?.landed())
}

async fn publish(ctx: &Context, pod: &CachedPod, type_: EventType, reason: &str, note: String) {
    let reference = pod.object_ref(&());
    ctx.events
        .publish(&reference, type_, reason, EVENT_ACTION, note)
        .await;
}

#[cfg(test)]
mod tests {
    //! `apply` against a fake API server: what is counted and announced depends on what
    //! the API server answered, not on what was attempted.
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use serde_json::json;

    use super::*;
    use crate::apply::fake_api::{fake_client, status};
    use crate::daemonset::image_pull::job::build_job;
    use crate::daemonset::image_pull::job::tests::daemonset;
    use crate::testkit::{store_of, PodBuilder};

    fn context(client: Client, cached_pods: &[Pod]) -> Context {
        let pods = store_of(cached_pods.iter().cloned().map(CachedPod::from));
        let stores = Stores {
            pods_by_owner: crate::watch::PodsByOwner::of(&pods.state()),
            pods,
            daemonsets: store_of([]),
            revisions: store_of([]),
            nodes: store_of([]),
            jobs: store_of([]),
        };
        Context {
            client: client.clone(),
            writer: Writer::new(client.clone()),
            stores,
            settings: PullJobSettings::default(),
            events: Events::new(client, IMAGE_PULL_CONTROLLER_NAME),
            metrics: ImagePullMetrics::register(&crate::metrics::Metrics::default()),
        }
    }

    fn pod() -> Pod {
        PodBuilder::new("agent-x1", &daemonset())
            .on_node("edge-1")
            .build()
    }

    fn pull_job(pod: &Pod) -> Job {
        let mut job = build_job(
            pod,
            &daemonset(),
            "new",
            "edge-1",
            "2024-01-01T00:00:00Z",
            &PullJobSettings::default(),
            PullJobSettings::default().deadline,
        );
        job.metadata.uid = Some("uid-job".into());
        job
    }

    fn create_plan(job: &Job) -> ImagePullPlan {
        ImagePullPlan {
            delete_jobs: vec![],
            step: Step::CreateJob {
                job: Box::new(job.clone()),
            },
        }
    }

    const JOBS: &str = "/apis/batch/v1/namespaces/edge/jobs";
    const POD: &str = "/api/v1/namespaces/edge/pods/agent-x1";

    /// The API server's copy of `pod`, as a GET answers it.
    fn live(pod: &Pod) -> serde_json::Value {
        let mut value = serde_json::to_value(pod).unwrap();
        value["apiVersion"] = json!("v1");
        value["kind"] = json!("Pod");
        value
    }

    #[tokio::test]
    async fn a_created_job_is_counted_and_announced() {
        let pod = pod();
        let job = pull_job(&pod);
        let reply = serde_json::to_value(&job).unwrap();
        let live = live(&pod);
        let (client, calls) = fake_client(move |method, path| match (method, path) {
            ("GET", POD) => (200, live.clone()),
            ("POST", JOBS) => (201, reply.clone()),
            _ => (201, json!({})),
        });
        let ctx = context(client, &[]);
        let action = apply(&CachedPod::from(pod.clone()), create_plan(&job), &ctx)
            .await
            .unwrap();
        assert_eq!(action, Action::requeue(Duration::from_secs(60)));
        assert_eq!(ctx.metrics.jobs_created.get(), 1);
        assert_eq!(calls.events(), ["Normal PullImageStarted"]);
    }

    /// The Job tolerates what the live pod tolerates: one GET of the pod right before the
    /// create, whose tolerations (a webhook's, or added in place) reach the Job's body.
    /// A pod gone or replaced meanwhile gets no Job.
    #[tokio::test]
    async fn the_job_is_made_with_the_live_pods_tolerations_read_once() {
        let cached = pod();
        let job = pull_job(&cached);
        let injected = json!({"key": "edge.example/maintenance", "operator": "Exists",
                              "effect": "NoExecute"});
        let mut with_injected = live(&cached);
        with_injected["spec"]["tolerations"] = json!([injected.clone()]);
        let mut replaced = live(&cached);
        replaced["metadata"]["uid"] = json!("uid-agent-x1-recreated");
        let cases = [
            ("the live pod tolerates more", (200, with_injected), 1),
            ("the pod is gone", status(404, "NotFound"), 0),
            (
                "the pod was replaced under the same name",
                (200, replaced),
                0,
            ),
        ];
        for (what, answer, want_creates) in cases {
            let reply = serde_json::to_value(&job).unwrap();
            let (client, calls) = fake_client(move |method, path| match (method, path) {
                ("GET", POD) => answer.clone(),
                ("POST", JOBS) => (201, reply.clone()),
                _ => (201, json!({})),
            });
            let ctx = context(client, &[]);
            apply(&CachedPod::from(cached.clone()), create_plan(&job), &ctx)
                .await
                .unwrap();
            assert_eq!(calls.calls_to("GET").len(), 1, "{what}: one read");
            let creates = calls.calls_to(&format!("POST {JOBS}"));
            assert_eq!(creates.len(), want_creates, "{what}");
            assert_eq!(
                ctx.metrics.jobs_created.get(),
                want_creates as u64,
                "{what}"
            );
            if let Some(create) = creates.first() {
                let tolerations = create.body["spec"]["template"]["spec"]["tolerations"]
                    .as_array()
                    .unwrap()
                    .clone();
                assert!(tolerations.contains(&injected), "{what}: {tolerations:?}");
                // The template's own are still there, first.
                assert_eq!(tolerations[0]["key"], "edge", "{what}: {tolerations:?}");
            }
        }
    }

    #[tokio::test]
    async fn a_bad_deadline_annotation_warns_on_the_daemonset_and_answers_the_pod() {
        let pod = pod();
        let ds = daemonset();
        let error = crate::daemonset::image_pull::deadline::InvalidPullDeadline {
            value: "90 minutes".into(),
        };
        let condition = PodCondition {
            type_: "PodImageReady".into(),
            status: "False".into(),
            reason: Some(PULL_IMAGE_FAIL_REASON.into()),
            message: Some(format!("controllerrevision: new; {error}")),
            ..Default::default()
        };
        let plan = ImagePullPlan {
            delete_jobs: vec![],
            step: Step::InvalidDeadline {
                error,
                daemonset: ds.object_ref(&()),
                condition,
            },
        };
        let (client, calls) = fake_client(|_, _| (200, json!({})));
        let ctx = context(client, &[]);
        apply(&CachedPod::from(pod), plan, &ctx).await.unwrap();
        assert_eq!(
            calls.events(),
            ["Warning InvalidImagePullDeadline", "Warning PullImageFail"]
        );
        let warning = &calls
            .calls_to("POST")
            .into_iter()
            .find(|c| c.path.contains("/events"))
            .unwrap();
        assert_eq!(warning.body["regarding"]["kind"], "DaemonSet");
        let note = warning.body["note"].as_str().unwrap();
        assert!(
            note.contains("600, 600s, 90m, 2h") && note.contains("90 minutes"),
            "{note}"
        );
        assert!(calls.calls_to("POST /apis/batch").is_empty(), "no Job");
        assert_eq!(calls.calls_to("PATCH").len(), 1, "the request is answered");
    }

    #[tokio::test]
    async fn a_409_on_create_is_neither_counted_nor_announced() {
        let pod = pod();
        let ours = pull_job(&pod);
        let gone_pods = {
            let mut job = ours.clone();
            job.metadata.owner_references = Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: "agent-x1".into(),
                uid: "uid-agent-x1-before".into(),
                controller: Some(true),
                block_owner_deletion: Some(false),
            }]);
            job.metadata.uid = Some("uid-stale-job".into());
            job
        };
        let foreign = {
            let mut job = ours.clone();
            job.metadata.labels = None;
            job.metadata.owner_references = None;
            job
        };
        let name = ours.name_any();
        struct Case {
            what: &'static str,
            holder: Job,
            action: Action,
            events: &'static [&'static str],
            conflicts: u64,
            deletes: usize,
        }
        let cases = [
            Case {
                what: "the cache lags behind our own Job: look again in a second",
                holder: ours.clone(),
                action: Action::requeue(Duration::from_secs(1)),
                events: &[],
                conflicts: 0,
                deletes: 0,
            },
            Case {
                what: "a pull Job of the replaced pod: deleted by UID, then look again",
                holder: gone_pods,
                action: Action::requeue(Duration::from_secs(1)),
                events: &[],
                conflicts: 0,
                deletes: 1,
            },
            Case {
                what: "someone else's Job: a Warning, and a long back-off instead of a hot loop",
                holder: foreign,
                action: Action::requeue(NAME_CONFLICT_BACKOFF),
                events: &["Warning PullImageJobNameConflict"],
                conflicts: 1,
                deletes: 0,
            },
        ];
        for case in cases {
            let (what, holder) = (case.what, case.holder);
            let holder = serde_json::to_value(&holder).unwrap();
            let item = format!("{JOBS}/{name}");
            let live_pod = live(&pod);
            let (client, calls) = fake_client(move |method, path| match (method, path) {
                ("GET", POD) => (200, live_pod.clone()),
                ("POST", JOBS) => status(409, "AlreadyExists"),
                ("GET", p) if p == item => (200, holder.clone()),
                ("DELETE", p) if p == item => (200, holder.clone()),
                _ => (201, json!({})),
            });
            let ctx = context(client, std::slice::from_ref(&pod));
            let action = apply(&CachedPod::from(pod.clone()), create_plan(&ours), &ctx)
                .await
                .unwrap();
            assert_eq!(action, case.action, "{what}");
            assert_eq!(ctx.metrics.jobs_created.get(), 0, "{what}");
            assert_eq!(calls.events(), case.events, "{what}");
            assert_eq!(ctx.metrics.name_conflicts.get(), case.conflicts, "{what}");
            let deletes = calls.calls_to("DELETE");
            assert_eq!(deletes.len(), case.deletes, "{what}");
            if let Some(delete) = deletes.first() {
                assert_eq!(
                    delete.body["preconditions"]["uid"], "uid-stale-job",
                    "{what}"
                );
                assert_eq!(delete.body["propagationPolicy"], "Background", "{what}");
            }
        }
    }

    /// The `PodImageReady` condition of an outcome.
    fn image_ready(status: &str, reason: &str, message: &str) -> PodCondition {
        PodCondition {
            type_: "PodImageReady".into(),
            status: status.into(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn an_outcome_is_counted_and_announced_only_once_written() {
        let pod = pod();
        let condition = image_ready("True", PULL_IMAGE_SUCCESS_REASON, "controllerrevision: new");
        let plan = ImagePullPlan {
            delete_jobs: vec![],
            step: Step::MarkSucceeded {
                job: "imagepull-agent-x1-new-1".into(),
                condition,
            },
        };
        for (what, answer, want_count, want_events) in [
            (
                "written",
                (200, json!({})),
                1,
                vec!["Normal PullImageSuccess"],
            ),
            ("pod replaced (409)", status(409, "Conflict"), 0, vec![]),
            ("pod gone (404)", status(404, "NotFound"), 0, vec![]),
        ] {
            let (client, calls) = fake_client(move |method, path| match (method, path) {
                ("PATCH", "/api/v1/namespaces/edge/pods/agent-x1/status") => answer.clone(),
                _ => (201, json!({})),
            });
            let ctx = context(client, &[]);
            apply(&CachedPod::from(pod.clone()), plan.clone(), &ctx)
                .await
                .unwrap();
            let counted = ctx
                .metrics
                .results
                .get_or_create(&ResultLabels {
                    result: "success".into(),
                })
                .get();
            assert_eq!(counted, want_count, "{what}");
            assert_eq!(calls.events(), want_events, "{what}");
        }
    }

    /// The Job's change wakes the pod's reconcile before the pod's own update (our
    /// PullImageFail) reaches the cache: the failure is neither written nor announced
    /// nor counted a second time. Once the pod changed after our write (a new request,
    /// seen in the cache), a failure is written again.
    #[tokio::test]
    async fn a_failure_is_said_once_while_the_cache_lags_behind_it() {
        let mut pod = pod();
        pod.metadata.resource_version = Some("10".into());
        let condition = image_ready(
            "False",
            PULL_IMAGE_FAIL_REASON,
            "controllerrevision: new; the Job timed out",
        );
        let plan = ImagePullPlan {
            delete_jobs: vec![],
            step: Step::MarkFailed {
                job: Some("imagepull-agent-x1-new-1".into()),
                condition,
            },
        };
        let version = std::sync::atomic::AtomicU64::new(10);
        let (client, calls) = fake_client(move |method, path| match (method, path) {
            ("PATCH", "/api/v1/namespaces/edge/pods/agent-x1/status") => {
                let next = version.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                (
                    200,
                    json!({"apiVersion": "v1", "kind": "Pod",
                             "metadata": {"resourceVersion": next.to_string()}}),
                )
            }
            _ => (201, json!({})),
        });
        let ctx = context(client, &[]);
        let failures = || {
            ctx.metrics
                .results
                .get_or_create(&ResultLabels {
                    result: "failure".into(),
                })
                .get()
        };
        let stale = CachedPod::from(pod.clone());
        for _ in 0..3 {
            apply(&stale, plan.clone(), &ctx).await.unwrap();
        }
        assert_eq!(calls.calls_to(&format!("PATCH {POD}/status")).len(), 1);
        assert_eq!(calls.events(), ["Warning PullImageFail"]);
        assert_eq!(failures(), 1);

        pod.metadata.resource_version = Some("12".into());
        apply(&CachedPod::from(pod), plan, &ctx).await.unwrap();
        assert_eq!(calls.calls_to(&format!("PATCH {POD}/status")).len(), 2);
        assert_eq!(
            calls.events(),
            ["Warning PullImageFail", "Warning PullImageFail"]
        );
        assert_eq!(failures(), 2);
    }

    #[tokio::test]
    async fn stale_jobs_are_deleted_in_the_background_by_uid() {
        let pod = pod();
        let (client, calls) = fake_client(|_, _| status(404, "NotFound"));
        let ctx = context(client, &[]);
        let plan = ImagePullPlan {
            delete_jobs: vec![JobRef {
                name: "imagepull-agent-x1-old-1".into(),
                uid: Some("uid-old".into()),
            }],
            step: Step::Nothing,
        };
        // Already gone (404) is fine.
        apply(&CachedPod::from(pod.clone()), plan, &ctx)
            .await
            .unwrap();
        let deletes = calls.calls_to("DELETE");
        assert_eq!(
            deletes[0].line(),
            format!("DELETE {JOBS}/imagepull-agent-x1-old-1")
        );
        assert_eq!(deletes[0].body["preconditions"]["uid"], "uid-old");
        assert_eq!(deletes[0].body["propagationPolicy"], "Background");
    }
}
