//! The pure planning of a pre-pull: from one pod, its DaemonSet, the namespace's
//! ControllerRevisions and the pod's pull Jobs to the next step. No client, no clock
//! (the caller passes `now`), so every case is a table test.

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ObjectReference, PodCondition};
use k8s_openapi::jiff::Timestamp;
use kube::{Resource, ResourceExt};

use super::deadline::{deadline_of, InvalidPullDeadline};
use super::job::{build_job, job_name, PullJobSettings};
use crate::daemonset::revision::CurrentRevision;
use crate::names::{
    CONTROLLER_REVISION_HASH_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE, POD_IMAGE_READY_CONDITION,
    PULL_JOB_POD_UID_LABEL, PULL_JOB_REQUEST_ANNOTATION, PULL_JOB_REVISION_LABEL,
};
use crate::object::{annotation, is_controlled_by, label, PodFacts};
use crate::pod_image_ready;
use crate::revision_message::revision_in_message;

/// A Job to delete: the UID goes into the delete's precondition, so a newer Job that
/// took the same name in the meantime is never the one deleted.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct JobRef {
    pub name: String,
    pub uid: Option<String>,
}

impl JobRef {
    pub fn of(job: &Job) -> Self {
        Self {
            name: job.name_any(),
            uid: job.uid(),
        }
    }
}

/// What to do for one pod.
#[derive(Debug, Clone, PartialEq)]
pub struct ImagePullPlan {
    /// Pull Jobs of this pod that answer nothing any more (older revision, or finished
    /// for an earlier request): delete them.
    pub delete_jobs: Vec<JobRef>,
    pub step: Step,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// No pending request (or not a DaemonSet pod, or going away).
    Nothing,
    /// Cannot decide yet; look again soon.
    Wait { why: String },
    /// Start pulling.
    CreateJob { job: Box<Job> },
    /// The Job is pulling.
    WaitForJob { name: String },
    /// The Job succeeded: `PodImageReady=True`.
    MarkSucceeded {
        job: String,
        condition: PodCondition,
    },
    /// The pull failed (or cannot even start): `PodImageReady=False, PullImageFail`.
    MarkFailed {
        job: Option<String>,
        condition: PodCondition,
    },
    /// The DaemonSet's pull-deadline annotation cannot be read: no Job, the request is
    /// answered `PullImageFail` (saying why), and the DaemonSet gets a Warning naming the
    /// accepted forms. Asking again after the fix pulls.
    InvalidDeadline {
        error: InvalidPullDeadline,
        daemonset: ObjectReference,
        condition: PodCondition,
    },
}

impl ImagePullPlan {
    fn only(step: Step) -> Self {
        Self {
            delete_jobs: Vec::new(),
            step,
        }
    }
}

/// Plans the pre-pull for `pod`.
///
/// - `daemonset`: the pod's controlling DaemonSet from the cache, if known;
/// - `revisions`: ControllerRevisions of the pod's namespace;
/// - `jobs`: the pull Jobs labelled with this pod's UID;
/// - `now`: `lastTransitionTime` of a condition written now.
///
/// The images pulled are the DaemonSet's current template; the hash reported is the
/// newest ControllerRevision's. Both are read only once the native controller has seen
/// the current spec (`status.observedGeneration`), so they belong together.
///
/// Every request gets its own Job (see [`job_name`]): a failed or finished Job answers
/// only the request it was created for, so asking again after a failure starts a new
/// pull at once while the old Job is deleted beside it.
pub fn plan_image_pull(
    pod: &impl PodFacts,
    daemonset: Option<&DaemonSet>,
    revisions: &[ControllerRevision],
    jobs: &[Job],
    now: Timestamp,
    settings: &PullJobSettings,
) -> ImagePullPlan {
    let Some(request) = pending_request(pod) else {
        return ImagePullPlan::only(Step::Nothing);
    };
    if pod.is_terminating() || !has_daemonset_owner(pod) {
        return ImagePullPlan::only(Step::Nothing);
    }
    let Some(ds) = daemonset.filter(|ds| {
        ds.metadata
            .uid
            .as_deref()
            .is_some_and(|uid| is_controlled_by(pod, uid))
    }) else {
        return ImagePullPlan::only(wait("the pod's DaemonSet is not in the cache yet"));
    };
    let generation = ds.metadata.generation.unwrap_or_default();
    let observed = ds
        .status
        .as_ref()
        .and_then(|s| s.observed_generation)
        .unwrap_or_default();
    if observed < generation {
        return ImagePullPlan::only(wait(
            "the DaemonSet controller has not processed the current spec yet",
        ));
    }
    let Some(hash) = CurrentRevision::of(ds, revisions).and_then(|current| current.hash) else {
        return ImagePullPlan::only(wait("no ControllerRevision names the current revision yet"));
    };
    // The agent names the hash it saw; one we have never heard of means our caches lag.
    if let Some(requested) = request.hash.as_deref() {
        let known = requested == hash
            || revisions.iter().any(|r| {
                r.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(CONTROLLER_REVISION_HASH_LABEL))
                    .is_some_and(|h| h == requested)
            });
        if !known {
            return ImagePullPlan::only(wait(&format!(
                "revision {requested} named in the request is not known yet"
            )));
        }
    }
    let Some(node) = pod.node_or_affinity_node() else {
        return ImagePullPlan::only(Step::MarkFailed {
            job: None,
            condition: pod_image_ready::failed(
                &hash,
                "the pod is not bound to a node, so there is nowhere to pull to",
                now,
            ),
        });
    };

    let wanted_name = job_name(pod, &hash, &request.requested_at);
    let mut delete_jobs = Vec::new();
    let mut current = None;
    let mut wanted_name_going_away = false;
    for job in jobs {
        if job.metadata.deletion_timestamp.is_some() {
            wanted_name_going_away |= job.name_any() == wanted_name;
            continue;
        }
        let same_revision = label(&job.metadata, PULL_JOB_REVISION_LABEL) == Some(hash.as_str());
        let answers_request = annotation(&job.metadata, PULL_JOB_REQUEST_ANNOTATION)
            == Some(request.requested_at.as_str());
        // A Job still pulling the current revision serves a repeated request too.
        if same_revision && (answers_request || outcome(job).is_none()) && current.is_none() {
            current = Some(job);
        } else {
            delete_jobs.push(JobRef::of(job));
        }
    }
    delete_jobs.sort();

    let step = match current {
        Some(job) => match outcome(job) {
            None => Step::WaitForJob {
                name: job.name_any(),
            },
            Some(Outcome::Succeeded) => Step::MarkSucceeded {
                job: job.name_any(),
                condition: pod_image_ready::succeeded(&hash, now),
            },
            Some(Outcome::Failed(why)) => Step::MarkFailed {
                job: Some(job.name_any()),
                condition: pod_image_ready::failed(
                    &hash,
                    &format!(
                        "image pull Job {} on node {node} failed: {why}",
                        job.name_any()
                    ),
                    now,
                ),
            },
        },
        // Only if someone deleted this very request's Job: its name frees up shortly.
        None if wanted_name_going_away => {
            wait(&format!("Job {wanted_name} is still being deleted"))
        }
        // A name per request: the new Job does not wait for the old ones to go. The
        // deadline is read only here: a Job already made keeps the one it was made with.
        None => match deadline_of(ds, settings.deadline) {
            Ok(deadline) => Step::CreateJob {
                job: Box::new(build_job(
                    pod,
                    ds,
                    &hash,
                    node,
                    &request.requested_at,
                    settings,
                    deadline,
                )),
            },
            Err(error) => Step::InvalidDeadline {
                condition: pod_image_ready::failed(&hash, &error.to_string(), now),
                daemonset: ds.object_ref(&()),
                error,
            },
        },
    };
    ImagePullPlan { delete_jobs, step }
}

/// Who holds the name a new pull Job needs, once the create answered 409 (AlreadyExists).
#[derive(Debug, Clone, PartialEq)]
pub enum NameHolder {
    /// This pod's own Job that the cache has not delivered yet: look again shortly.
    ThisPod,
    /// A pull Job of ours whose pod is gone (e.g. a pod recreated under the same name):
    /// delete it (UID precondition), then create ours.
    StalePull(JobRef),
    /// Anything else: a Job rollgate did not make, or the pull Job of a pod that still
    /// exists. Never deleted: back off and say so in a Warning Event.
    Conflict { why: String },
}

/// Decides what to do about `holder`, the Job that already has the name `pod`'s pull
/// Job needs. `pod_is_cached(uid)` says whether the pod cache holds a pod of that UID.
///
/// Deleting is safe only for our own pull Jobs whose pod is provably gone: either the
/// owner has this pod's *name* but another UID (names are unique in a namespace, so that
/// pod no longer exists), or its UID is not in the pod cache (a pull Job is only created
/// for a pod the cache already held, so a missing UID means the pod was deleted).
/// Everything else is somebody's object: we report it instead of retrying every second.
pub fn classify_name_holder(
    holder: &Job,
    pod: &impl PodFacts,
    pod_is_cached: impl Fn(&str) -> bool,
) -> NameHolder {
    let ours = label(&holder.metadata, MANAGED_BY_LABEL) == Some(MANAGED_BY_VALUE)
        && label(&holder.metadata, PULL_JOB_POD_UID_LABEL).is_some()
        && label(&holder.metadata, PULL_JOB_REVISION_LABEL).is_some();
    let owner = holder
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == "Pod");
    let pod_uid = pod.pod_uid();
    let name = holder.name_any();
    match owner {
        Some(o) if o.uid == pod_uid && ours => NameHolder::ThisPod,
        Some(o) if o.uid == pod_uid => NameHolder::Conflict {
            why: format!(
                "Job {name} is owned by this pod but lacks rollgate's labels \
                 ({MANAGED_BY_LABEL}={MANAGED_BY_VALUE}, {PULL_JOB_POD_UID_LABEL}, {PULL_JOB_REVISION_LABEL}); \
                 delete it to let the pre-pull start"
            ),
        },
        Some(o) if ours && (o.name == pod.pod_name() || !pod_is_cached(&o.uid)) => {
            NameHolder::StalePull(JobRef::of(holder))
        }
        Some(o) => NameHolder::Conflict {
            why: format!(
                "Job {name} already exists and belongs to pod {} (uid {}), not to this pod \
                 (uid {pod_uid}); delete it to let the pre-pull start",
                o.name, o.uid
            ),
        },
        None => NameHolder::Conflict {
            why: format!(
                "Job {name} already exists and is not a rollgate pull Job (no Pod owner); \
                 delete or rename it to let the pre-pull start"
            ),
        },
    }
}

fn wait(why: &str) -> Step {
    Step::Wait { why: why.into() }
}

/// An agent's pre-pull request waiting for an answer.
struct Request {
    /// The hash named in the message (`controllerrevision: <hash>`), if readable.
    hash: Option<String>,
    /// The condition's `lastTransitionTime` as written, "" when absent.
    requested_at: String,
}

fn pending_request(pod: &impl PodFacts) -> Option<Request> {
    let condition = pod.condition(POD_IMAGE_READY_CONDITION)?;
    // Two node APIs ask: rollgate's agent and yurthub (OpenYurt v1.7.0,
    // `pkg/yurthub/otaupdate/ota.go`, `PullPodImage`, lines 259-290), see
    // `pod_image_ready::is_request`.
    if !pod_image_ready::is_request(&condition) {
        return None;
    }
    let hash = condition
        .message
        .and_then(revision_in_message)
        .map(str::to_string);
    Some(Request {
        hash,
        requested_at: pod_image_ready::stamp(&condition).unwrap_or_default(),
    })
}

/// Whether an agent's pre-pull request on `pod` waits for an answer.
pub fn has_pending_request(pod: &impl PodFacts) -> bool {
    pending_request(pod).is_some()
}

fn has_daemonset_owner(pod: &impl PodFacts) -> bool {
    pod.owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.kind == "DaemonSet")
}

#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Succeeded,
    Failed(String),
}

/// The Job's result, from its conditions (`SuccessCriteriaMet` / `FailureTarget` come
/// before the terminal `Complete` / `Failed` on recent API servers: either answers).
fn outcome(job: &Job) -> Option<Outcome> {
    let conditions = job.status.as_ref()?.conditions.as_ref()?;
    let holds = |types: &[&str]| {
        conditions
            .iter()
            .find(|c| types.contains(&c.type_.as_str()) && c.status == "True")
    };
    if holds(&["Complete", "SuccessCriteriaMet"]).is_some() {
        return Some(Outcome::Succeeded);
    }
    holds(&["Failed", "FailureTarget"]).map(|c| {
        let reason = c.reason.as_deref().unwrap_or("Failed");
        Outcome::Failed(match c.message.as_deref().filter(|m| !m.is_empty()) {
            Some(message) => format!("{reason}: {message}"),
            None => reason.to_string(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemonset::image_pull::job::tests::daemonset;
    use crate::names::{
        POD_NEED_UPGRADE_CONDITION, PULL_IMAGE_FAIL_REASON, PULL_IMAGE_REQUESTED_REASON,
        PULL_IMAGE_SUCCESS_REASON,
    };
    use crate::testkit::{at, revision, PodBuilder};
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    const NOW: i64 = 1_000;
    const REQUESTED: i64 = 900;

    fn revisions(ds: &DaemonSet) -> Vec<ControllerRevision> {
        vec![revision(ds, "old", 1), revision(ds, "new", 2)]
    }

    fn image_ready(status: &str, reason: &str, message: &str, since: i64) -> PodCondition {
        PodCondition {
            type_: POD_IMAGE_READY_CONDITION.into(),
            status: status.into(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            last_transition_time: Some(Time(at(since))),
            ..Default::default()
        }
    }

    fn requested_at(ds: &DaemonSet, hash: &str, since: i64) -> Pod {
        PodBuilder::new("agent-x1", ds)
            .hash("old")
            .on_node("edge-1")
            .with_condition(image_ready(
                "False",
                PULL_IMAGE_REQUESTED_REASON,
                &format!("controllerrevision: {hash}"),
                since,
            ))
            .build()
    }

    fn requested(ds: &DaemonSet, hash: &str) -> Pod {
        requested_at(ds, hash, REQUESTED)
    }

    /// The Job the planner makes for `pod`'s request of `requested_at`, with a UID.
    fn job_for(pod: &Pod, ds: &DaemonSet, hash: &str, requested_at: i64) -> Job {
        let mut job = build_job(
            pod,
            ds,
            hash,
            "edge-1",
            &at(requested_at).to_string(),
            &PullJobSettings::default(),
            PullJobSettings::default().deadline,
        );
        job.metadata.uid = Some(format!("uid-job-{hash}-{requested_at}"));
        job
    }

    fn name_for(pod: &Pod, hash: &str, requested_at: i64) -> String {
        job_name(pod, hash, &at(requested_at).to_string())
    }

    fn finished(mut job: Job, type_: &str, reason: &str, message: &str) -> Job {
        job.status = Some(JobStatus {
            conditions: Some(vec![JobCondition {
                type_: type_.into(),
                status: "True".into(),
                reason: Some(reason.into()),
                message: Some(message.into()),
                ..Default::default()
            }]),
            ..Default::default()
        });
        job
    }

    /// Plans on the full pod and on its cached form: every case also proves the shared
    /// cache keeps what this planner reads.
    fn plan(pod: &Pod, ds: Option<&DaemonSet>, jobs: &[Job]) -> ImagePullPlan {
        let revs = ds.map(revisions).unwrap_or_default();
        let settings = PullJobSettings::default();
        let full = plan_image_pull(pod, ds, &revs, jobs, at(NOW), &settings);
        let cached = crate::object::CachedPod::from(pod.clone());
        let from_cache = plan_image_pull(&cached, ds, &revs, jobs, at(NOW), &settings);
        assert_eq!(full, from_cache, "the cached pod plans differently");
        full
    }

    fn step_kind(step: &Step) -> String {
        match step {
            Step::Nothing => "nothing".into(),
            Step::Wait { .. } => "wait".into(),
            Step::CreateJob { job } => format!("create {}", job.name_any()),
            Step::WaitForJob { name } => format!("wait-for {name}"),
            Step::MarkSucceeded { job, .. } => format!("succeeded {job}"),
            Step::MarkFailed { job, .. } => format!("failed {}", job.as_deref().unwrap_or("-")),
            Step::InvalidDeadline { error, .. } => format!("invalid deadline {:?}", error.value),
        }
    }

    #[test]
    fn the_state_machine() {
        let ds = daemonset();
        let pod = requested(&ds, "new");
        let name = name_for(&pod, "new", REQUESTED);
        let running = job_for(&pod, &ds, "new", REQUESTED);
        let done = finished(running.clone(), "Complete", "CompletionsReached", "");
        let failed = finished(
            running.clone(),
            "Failed",
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        );
        let older_revision = job_for(&pod, &ds, "old", REQUESTED);
        let earlier_failure = finished(
            job_for(&pod, &ds, "new", 100),
            "Failed",
            "DeadlineExceeded",
            "",
        );
        let earlier_success = finished(job_for(&pod, &ds, "new", 100), "Complete", "", "");
        let earlier_running = job_for(&pod, &ds, "new", 100);
        let no_request = PodBuilder::new("agent-x1", &ds)
            .hash("old")
            .on_node("edge-1")
            .build();
        let answered = PodBuilder::new("agent-x1", &ds)
            .on_node("edge-1")
            .with_condition(image_ready(
                "True",
                PULL_IMAGE_SUCCESS_REASON,
                "controllerrevision: new",
                REQUESTED,
            ))
            .build();
        let answered_failure = PodBuilder::new("agent-x1", &ds)
            .on_node("edge-1")
            .with_condition(image_ready(
                "False",
                PULL_IMAGE_FAIL_REASON,
                "controllerrevision: new; image pull Job x failed",
                REQUESTED,
            ))
            .build();
        let unbound = {
            let mut p = requested(&ds, "new");
            p.spec.as_mut().unwrap().node_name = None;
            p
        };
        let mut lagging = ds.clone();
        lagging.metadata.generation = Some(3);
        let unknown_hash = requested(&ds, "brand-new");
        let mut deleting = running.clone();
        deleting.metadata.deletion_timestamp = Some(Time(at(950)));
        let mut earlier_deleting = earlier_failure.clone();
        earlier_deleting.metadata.deletion_timestamp = Some(Time(at(950)));
        let not_ds_pod = {
            let mut p = requested(&ds, "new");
            p.metadata.owner_references = None;
            p
        };
        let terminating = PodBuilder::new("agent-x1", &ds)
            .on_node("edge-1")
            .with_condition(image_ready(
                "False",
                PULL_IMAGE_REQUESTED_REASON,
                "controllerrevision: new",
                REQUESTED,
            ))
            .terminating(at(990))
            .build();

        let create = format!("create {name}");
        let wait_for = format!("wait-for {name}");
        let succeeded = format!("succeeded {name}");
        let failed_step = format!("failed {name}");
        let request_old = requested(&ds, "old");
        let earlier = JobRef {
            name: name_for(&pod, "new", 100),
            uid: Some("uid-job-new-100".into()),
        };
        let older = JobRef {
            name: name_for(&pod, "old", REQUESTED),
            uid: Some(format!("uid-job-old-{REQUESTED}")),
        };
        let create_for_old_request = format!("create {}", name_for(&request_old, "new", REQUESTED));
        let wait_for_earlier = format!("wait-for {}", earlier.name);
        #[allow(clippy::type_complexity)]
        let cases: Vec<(&str, &Pod, Option<&DaemonSet>, Vec<Job>, &str, Vec<JobRef>)> = vec![
            (
                "no request: nothing",
                &no_request,
                Some(&ds),
                vec![],
                "nothing",
                vec![],
            ),
            (
                "answered request: nothing, the finished Job is left to its TTL",
                &answered,
                Some(&ds),
                vec![done.clone()],
                "nothing",
                vec![],
            ),
            (
                "answered with a failure: nothing until the agent asks again",
                &answered_failure,
                Some(&ds),
                vec![failed.clone()],
                "nothing",
                vec![],
            ),
            (
                "not a DaemonSet pod: nothing",
                &not_ds_pod,
                Some(&ds),
                vec![],
                "nothing",
                vec![],
            ),
            (
                "pod going away: nothing",
                &terminating,
                Some(&ds),
                vec![],
                "nothing",
                vec![],
            ),
            (
                "request, no Job: create",
                &pod,
                Some(&ds),
                vec![],
                &create,
                vec![],
            ),
            (
                "Job running: wait for it",
                &pod,
                Some(&ds),
                vec![running.clone()],
                &wait_for,
                vec![],
            ),
            (
                "Job succeeded: mark success",
                &pod,
                Some(&ds),
                vec![done.clone()],
                &succeeded,
                vec![],
            ),
            (
                "Job failed: mark failure",
                &pod,
                Some(&ds),
                vec![failed.clone()],
                &failed_step,
                vec![],
            ),
            (
                "Job of an older revision: replace it",
                &pod,
                Some(&ds),
                vec![older_revision.clone()],
                &create,
                vec![older.clone()],
            ),
            (
                "asked again after a failure: a new Job at once, the failed one deleted",
                &pod,
                Some(&ds),
                vec![earlier_failure.clone()],
                &create,
                vec![earlier.clone()],
            ),
            (
                "asked again after a success: pull again, the old Job deleted",
                &pod,
                Some(&ds),
                vec![earlier_success],
                &create,
                vec![earlier.clone()],
            ),
            (
                "the failed Job is already going away: it does not block the new one",
                &pod,
                Some(&ds),
                vec![earlier_deleting],
                &create,
                vec![],
            ),
            (
                "the new request's Job runs beside the failed one being deleted",
                &pod,
                Some(&ds),
                vec![earlier_failure.clone(), running.clone()],
                &wait_for,
                vec![earlier.clone()],
            ),
            (
                "the new request's Job failed too: report it",
                &pod,
                Some(&ds),
                vec![earlier_failure.clone(), failed.clone()],
                &failed_step,
                vec![earlier.clone()],
            ),
            (
                "still pulling for an earlier request: it serves this one too",
                &pod,
                Some(&ds),
                vec![earlier_running.clone()],
                &wait_for_earlier,
                vec![],
            ),
            (
                "this request's own Job being deleted: wait for its name",
                &pod,
                Some(&ds),
                vec![deleting],
                "wait",
                vec![],
            ),
            (
                "DaemonSet not cached: wait",
                &pod,
                None,
                vec![],
                "wait",
                vec![],
            ),
            (
                "spec not yet seen by the DaemonSet controller: wait",
                &pod,
                Some(&lagging),
                vec![],
                "wait",
                vec![],
            ),
            (
                "request names an unknown revision: wait for the caches",
                &unknown_hash,
                Some(&ds),
                vec![],
                "wait",
                vec![],
            ),
            (
                "request for an older known revision: pull the current one",
                &request_old,
                Some(&ds),
                vec![],
                &create_for_old_request,
                vec![],
            ),
            (
                "pod without a node: fail",
                &unbound,
                Some(&ds),
                vec![],
                "failed -",
                vec![],
            ),
        ];
        for (what, pod, ds, jobs, want_step, want_deleted) in cases {
            let got = plan(pod, ds, &jobs);
            assert_eq!(step_kind(&got.step), want_step, "{what}");
            assert_eq!(got.delete_jobs, want_deleted, "{what}");
        }
    }

    /// The whole retry loop, step by step: request -> Job fails -> PullImageFail ->
    /// the agent asks again (PullImageRequested, a new lastTransitionTime) -> a new Job.
    #[test]
    fn a_failed_pre_pull_is_not_a_dead_end() {
        let ds = daemonset();
        let first = requested_at(&ds, "new", REQUESTED);
        let Step::CreateJob { job } = plan(&first, Some(&ds), &[]).step else {
            panic!("the first request creates a Job");
        };
        let mut first_job = *job;
        first_job.metadata.uid = Some("uid-first".into());
        let first_job = finished(first_job, "Failed", "DeadlineExceeded", "");
        let Step::MarkFailed { condition, .. } =
            plan(&first, Some(&ds), std::slice::from_ref(&first_job)).step
        else {
            panic!("a failed Job is reported");
        };
        assert_eq!(condition.reason.as_deref(), Some(PULL_IMAGE_FAIL_REASON));

        // The agent asks again; whether it writes its own time or keeps the one of our
        // failure (status False either way), the request is a new one.
        let failure_time = condition.last_transition_time.clone().unwrap().0;
        for again_at in [at(NOW + 30), failure_time] {
            let again = requested_at(&ds, "new", again_at.as_second());
            let plan = plan(&again, Some(&ds), std::slice::from_ref(&first_job));
            let Step::CreateJob { job: second } = &plan.step else {
                panic!("asking again creates a new Job, got {:?}", plan.step);
            };
            assert_ne!(second.name_any(), first_job.name_any());
            assert_eq!(
                plan.delete_jobs,
                [JobRef {
                    name: first_job.name_any(),
                    uid: Some("uid-first".into())
                }]
            );
        }
    }

    /// yurthub's `checkPodImageReady` (OpenYurt v1.7.0, `pkg/yurthub/otaupdate/ota.go`,
    /// line 192): no `PodImageReady` passes; otherwise it must be True and its message,
    /// without the `controllerrevision: ` prefix, must be the hash named by
    /// `PodNeedUpgrade`'s message.
    fn yurthub_upgrade_accepts(pod: &Pod) -> bool {
        let conditions = pod.status.as_ref().and_then(|s| s.conditions.clone());
        let find = |type_: &str| {
            conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == type_)
                .cloned()
        };
        let next_hash = find(POD_NEED_UPGRADE_CONDITION)
            .and_then(|c| c.message)
            .map(|m| m.trim_start_matches("controllerrevision: ").to_string())
            .unwrap_or_default();
        match find(POD_IMAGE_READY_CONDITION) {
            None => true,
            Some(c) => {
                c.status == "True"
                    && c.message
                        .as_deref()
                        .map(|m| m.trim_start_matches("controllerrevision: "))
                        == Some(next_hash.as_str())
            }
        }
    }

    /// yurthub's `imagepull` (the layout where yurthub serves the node API) writes
    /// `PodImageReady=False` with no reason; that is a request, and the answer is one
    /// yurthub's `upgrade` accepts.
    #[test]
    fn a_yurthub_pull_request_is_pulled_and_its_upgrade_accepts_the_answer() {
        let ds = daemonset();
        let need_upgrade = PodCondition {
            type_: POD_NEED_UPGRADE_CONDITION.into(),
            status: "True".into(),
            message: Some("controllerrevision: new".into()),
            ..Default::default()
        };
        // Exactly the condition of ota.go lines 259-263: type, status, message; the
        // lastTransitionTime comes from podutil.UpdatePodCondition.
        let yurthub_request = PodCondition {
            type_: POD_IMAGE_READY_CONDITION.into(),
            status: "False".into(),
            message: Some("controllerrevision: new".into()),
            last_transition_time: Some(Time(at(REQUESTED))),
            ..Default::default()
        };
        let builder = || {
            PodBuilder::new("agent-x1", &ds)
                .hash("old")
                .on_node("edge-1")
                .with_condition(need_upgrade.clone())
        };
        let requested = builder().with_condition(yurthub_request.clone()).build();
        assert!(
            !yurthub_upgrade_accepts(&requested),
            "yurthub refuses before the pull"
        );
        let Step::CreateJob { job } = plan(&requested, Some(&ds), &[]).step else {
            panic!("yurthub's request starts a pull Job");
        };
        let mut job = *job;
        job.metadata.uid = Some("uid-yurthub".into());
        let done = finished(job, "Complete", "", "");
        let Step::MarkSucceeded { condition, .. } =
            plan(&requested, Some(&ds), std::slice::from_ref(&done)).step
        else {
            panic!("a finished pull is reported");
        };
        let answered = builder().with_condition(condition).build();
        assert!(
            yurthub_upgrade_accepts(&answered),
            "yurthub's upgrade must accept rollgate's answer"
        );
        assert_eq!(
            step_kind(&plan(&answered, Some(&ds), &[done]).step),
            "nothing"
        );

        // An empty reason reads the same as none (a client that serialises "").
        let mut empty_reason = yurthub_request;
        empty_reason.reason = Some(String::new());
        let requested = builder().with_condition(empty_reason).build();
        assert!(matches!(
            plan(&requested, Some(&ds), &[]).step,
            Step::CreateJob { .. }
        ));
    }

    #[test]
    fn outcome_conditions_name_the_revision_and_the_reason() {
        let ds = daemonset();
        let pod = requested(&ds, "new");
        let done = finished(job_for(&pod, &ds, "new", REQUESTED), "Complete", "", "");
        let Step::MarkSucceeded { condition, .. } = plan(&pod, Some(&ds), &[done]).step else {
            panic!("expected success");
        };
        assert_eq!(condition.status, "True");
        assert_eq!(condition.reason.as_deref(), Some("PullImageSuccess"));
        assert_eq!(
            condition.message.as_deref(),
            Some("controllerrevision: new")
        );
        assert_eq!(condition.last_transition_time, Some(Time(at(NOW))));

        let failed = finished(
            job_for(&pod, &ds, "new", REQUESTED),
            "FailureTarget",
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        );
        let Step::MarkFailed { condition, .. } = plan(&pod, Some(&ds), &[failed]).step else {
            panic!("expected failure");
        };
        assert_eq!(condition.status, "False");
        assert_eq!(condition.reason.as_deref(), Some("PullImageFail"));
        let message = condition.message.unwrap();
        assert!(
            message.starts_with("controllerrevision: new; "),
            "{message}"
        );
        assert!(message.contains("edge-1"), "{message}");
        assert!(
            message.contains("BackoffLimitExceeded: Job has reached the specified backoff limit"),
            "{message}"
        );
    }

    #[test]
    fn the_helper_image_setting_reaches_the_job() {
        let ds = daemonset();
        let pod = requested(&ds, "new");
        let settings = PullJobSettings {
            helper_image: "mirror.local/busybox:1.36.1-musl".into(),
            ..Default::default()
        };
        let revs = revisions(&ds);
        let step = plan_image_pull(&pod, Some(&ds), &revs, &[], at(NOW), &settings).step;
        let Step::CreateJob { job } = step else {
            panic!("expected a Job");
        };
        let spec = job.spec.unwrap().template.spec.unwrap();
        assert_eq!(
            spec.init_containers.unwrap()[0].image.as_deref(),
            Some("mirror.local/busybox:1.36.1-musl")
        );
    }

    #[test]
    fn the_deadline_comes_from_the_daemonsets_annotation_else_the_flag() {
        use crate::names::PULL_DEADLINE_ANNOTATION;
        use std::time::Duration;
        let annotated = |value: &str| {
            let mut ds = daemonset();
            ds.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(PULL_DEADLINE_ANNOTATION.into(), value.into());
            ds
        };
        let step_for = |ds: &DaemonSet, settings: &PullJobSettings| {
            let pod = requested(ds, "new");
            let revs = revisions(ds);
            plan_image_pull(&pod, Some(ds), &revs, &[], at(NOW), settings).step
        };
        let deadline_of_job =
            |ds: &DaemonSet, settings: &PullJobSettings| match step_for(ds, settings) {
                Step::CreateJob { job } => Some(job.spec.unwrap().active_deadline_seconds),
                _ => None,
            };
        let flag = PullJobSettings {
            deadline: Duration::from_secs(1200),
            ..Default::default()
        };
        assert_eq!(deadline_of_job(&daemonset(), &flag), Some(Some(1200)));
        assert_eq!(
            deadline_of_job(&daemonset(), &PullJobSettings::default()),
            Some(Some(600))
        );
        assert_eq!(deadline_of_job(&annotated("90m"), &flag), Some(Some(5400)));

        // Bad input: no Job, the request is answered, the DaemonSet is named.
        let bad = annotated("90 minutes");
        let Step::InvalidDeadline {
            error,
            daemonset,
            condition,
        } = step_for(&bad, &flag)
        else {
            panic!("expected an invalid deadline");
        };
        assert_eq!(error.value, "90 minutes");
        assert_eq!(daemonset.name.as_deref(), Some("agent"));
        assert_eq!(daemonset.kind.as_deref(), Some("DaemonSet"));
        assert_eq!(condition.status, "False");
        assert_eq!(condition.reason.as_deref(), Some(PULL_IMAGE_FAIL_REASON));
        let message = condition.message.unwrap();
        assert!(
            message.starts_with("controllerrevision: new; "),
            "{message}"
        );
        assert!(
            message.contains(PULL_DEADLINE_ANNOTATION) && message.contains("600, 600s, 90m, 2h"),
            "{message}"
        );

        // A Job already pulling keeps going whatever the annotation says now.
        let pod = requested(&bad, "new");
        let running = job_for(&pod, &bad, "new", REQUESTED);
        let revs = revisions(&bad);
        let step = plan_image_pull(&pod, Some(&bad), &revs, &[running], at(NOW), &flag).step;
        assert!(matches!(step, Step::WaitForJob { .. }), "{step:?}");
    }

    #[test]
    fn who_holds_the_job_name() {
        let ds = daemonset();
        let pod = requested(&ds, "new");
        let ours = job_for(&pod, &ds, "new", REQUESTED);
        let of_pod = |name: &str, uid: &str| {
            let mut job = ours.clone();
            job.metadata
                .labels
                .as_mut()
                .unwrap()
                .insert(PULL_JOB_POD_UID_LABEL.into(), uid.into());
            job.metadata.owner_references = Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: name.into(),
                uid: uid.into(),
                controller: Some(true),
                block_owner_deletion: Some(false),
            }]);
            job
        };
        let recreated_pods_job = of_pod("agent-x1", "uid-agent-x1-before");
        let deleted_pods_job = of_pod("agent-x9", "uid-agent-x9");
        let live_pods_job = of_pod("agent-x2", "uid-agent-x2");
        let foreign = {
            let mut job = ours.clone();
            job.metadata.labels = None;
            job.metadata.owner_references = None;
            job
        };
        let unlabelled_but_ours = {
            let mut job = ours.clone();
            job.metadata.labels = None;
            job
        };
        let foreign_owned_by_gone_pod = {
            let mut job = deleted_pods_job.clone();
            job.metadata.labels = None;
            job
        };
        let cached = |uid: &str| ["uid-agent-x1", "uid-agent-x2"].contains(&uid);

        let kind = |holder: &NameHolder| match holder {
            NameHolder::ThisPod => "this pod".to_string(),
            NameHolder::StalePull(job) => format!("delete {}", job.uid.as_deref().unwrap()),
            NameHolder::Conflict { .. } => "conflict".to_string(),
        };
        let cases: [(&str, &Job, &str); 7] = [
            ("our own Job, not cached yet: look again", &ours, "this pod"),
            (
                "a pull Job of the pod this one replaced (same name): delete it",
                &recreated_pods_job,
                &format!("delete {}", ours.uid().unwrap()),
            ),
            (
                "a pull Job of a pod no longer cached: delete it",
                &deleted_pods_job,
                &format!("delete {}", ours.uid().unwrap()),
            ),
            (
                "a pull Job of a pod that still exists: never deleted",
                &live_pods_job,
                "conflict",
            ),
            ("not a rollgate Job: never deleted", &foreign, "conflict"),
            (
                "owned by this pod without our labels: never deleted (and never seen by our watch)",
                &unlabelled_but_ours,
                "conflict",
            ),
            (
                "someone else's Job owned by a gone pod: not ours to delete",
                &foreign_owned_by_gone_pod,
                "conflict",
            ),
        ];
        for (what, holder, want) in cases {
            assert_eq!(
                kind(&classify_name_holder(holder, &pod, cached)),
                want,
                "{what}"
            );
        }

        let NameHolder::Conflict { why } = classify_name_holder(&live_pods_job, &pod, cached)
        else {
            panic!("expected a conflict");
        };
        assert!(why.contains(&live_pods_job.name_any()), "{why}");
        assert!(
            why.contains("agent-x2") && why.contains("uid-agent-x2"),
            "{why}"
        );
        assert!(why.contains("uid-agent-x1"), "{why}");
    }
}
