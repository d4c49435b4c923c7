//! OTA image pre-pull: when the node agent asks for it (`PodImageReady=False`, reason
//! `PullImageRequested`), pull the DaemonSet's current images on the pod's node with a
//! Job, then report the outcome in `PodImageReady`.
//!
//! observe (pod, its DaemonSet and ControllerRevisions, its pull Jobs) -> plan
//! (`plan_image_pull`, pure) -> apply (Job create/delete, one condition write, an Event).
//!
//! ## How the Job pulls without trusting the image's contents
//!
//! The kubelet pulls an image before it starts the container, so what the Job's
//! containers run does not matter as long as it exits 0 in *every* image. `true` or
//! `sh -c true` do not exist in distroless or scratch images (a pull that worked would be
//! reported as failed), and the image's own entrypoint may be a daemon that never exits.
//! So the Job brings its own no-op: an init container from a statically linked BusyBox
//! image copies its binary into an `emptyDir` as `true`, and every pulled image runs
//! that file (BusyBox picks the applet from `argv[0]`; a static binary needs no libc or
//! loader from the image). The pulled images are the Job's regular containers, one per
//! template container *and* init container, with `imagePullPolicy: Always`, so the Job
//! succeeds exactly when every image was pulled and could be started.
//! (OpenKruise's ImagePullJob avoids running anything by pulling through the CRI from a
//! node daemon; we have no privileged node daemon, so a Job it is.)
//!
//! Price: the helper image must be pullable on the node (mirror it for air-gapped
//! registries); if it is not, the pre-pull reports failure, which is safe.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, Pod, PodCondition, PodSecurityContext, PodSpec,
    PodTemplateSpec, ResourceRequirements, SeccompProfile, SecurityContext, Toleration, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Config as ControllerConfig};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, Controller, WatchStreamExt};
use kube::{Api, Client, Resource, ResourceExt};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use serde_json::json;

use super::ota_plan::need_upgrade_message;
use super::revision::{
    is_controlled_by, is_terminating, pod_node_name, CurrentRevision,
    CONTROLLER_REVISION_HASH_LABEL,
};
pub use crate::agent::checks::{POD_IMAGE_READY_CONDITION, PULL_IMAGE_REQUESTED_REASON};
use crate::runtime::Shutdown;
use crate::sync_gate::SyncGate;

/// Reason of `PodImageReady=True` once the current revision's images are on the node.
pub const PULL_IMAGE_SUCCESS_REASON: &str = "PullImageSuccess";
/// Reason of `PodImageReady=False` when the pull Job failed.
pub const PULL_IMAGE_FAIL_REASON: &str = "PullImageFail";
/// Reporting controller name in Events and the field manager of condition writes.
pub const CONTROLLER_NAME: &str = "rollgate-image-pull";

/// Every pull Job carries these labels, so the controller watches only its own Jobs.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY_VALUE: &str = "rollgate";
/// UID of the pod the Job pulls for (pod names can exceed a label value's 63 chars).
pub const POD_UID_LABEL: &str = "rollgate.io/image-pull-pod-uid";
/// `controller-revision-hash` of the revision whose images the Job pulls.
pub const REVISION_LABEL: &str = "rollgate.io/image-pull-revision";
/// The request a Job answers: the `lastTransitionTime` of the `PullImageRequested`
/// condition it was created for. A finished Job answers only that request, so asking
/// again after a failure pulls again (clock-independent: the agent's clock may differ
/// from the API server's).
pub const REQUEST_ANNOTATION: &str = "rollgate.io/image-pull-request";
pub const POD_NAME_ANNOTATION: &str = "rollgate.io/image-pull-pod";
pub const NODE_ANNOTATION: &str = "rollgate.io/image-pull-node";

/// Statically linked BusyBox (the musl variant is built with `CONFIG_STATIC=y`): the
/// source of the no-op every pulled image runs.
pub const NOOP_IMAGE: &str = "docker.io/library/busybox:1.36.1-musl";
/// Where the no-op lives inside every pulled container: an unusual path, so the
/// `emptyDir` mounted there does not hide anything the image could need.
pub const NOOP_DIR: &str = "/.rollgate-image-pull";
const NOOP_VOLUME: &str = "rollgate-noop";
const NOOP_INSTALLER: &str = "rollgate-install-noop";

/// A pull that has not finished after this long fails (a missing image makes the kubelet
/// back off and retry forever; the deadline turns that into an answer).
pub const JOB_DEADLINE_SECONDS: i64 = 600;
/// One retry with a fresh pod (e.g. the first was evicted); pull errors are retried by
/// the kubelet inside the pod.
pub const JOB_BACKOFF_LIMIT: i32 = 1;
/// Finished Jobs linger this long for `kubectl describe`, then the TTL controller
/// removes them (the pod's ownerReference removes them with the pod before that).
pub const JOB_TTL_SECONDS: i32 = 300;
/// Longest Job name: the Job controller copies it into the `job-name` label of its pods.
const MAX_JOB_NAME: usize = 63;

// ---------------------------------------------------------------------------------------
// Plan (pure)
// ---------------------------------------------------------------------------------------

/// What to do for one pod.
#[derive(Debug, Clone, PartialEq)]
pub struct ImagePullPlan {
    /// Pull Jobs of this pod that answer nothing any more (older revision, or finished
    /// for an earlier request): delete them.
    pub delete_jobs: Vec<String>,
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
pub fn plan_image_pull(
    pod: &Pod,
    daemonset: Option<&DaemonSet>,
    revisions: &[ControllerRevision],
    jobs: &[Job],
    now: Timestamp,
) -> ImagePullPlan {
    let Some(request) = pending_request(pod) else {
        return ImagePullPlan::only(Step::Nothing);
    };
    if is_terminating(pod) || !has_daemonset_owner(pod) {
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
    let Some(node) = pod_node_name(pod) else {
        return ImagePullPlan::only(Step::MarkFailed {
            job: None,
            condition: fail_condition(
                &hash,
                "the pod is not bound to a node, so there is nowhere to pull to",
                now,
            ),
        });
    };

    let wanted_name = job_name(pod, &hash);
    let mut delete_jobs = Vec::new();
    let mut current = None;
    let mut name_taken = false;
    for job in jobs {
        let name = job.name_any();
        if job.metadata.deletion_timestamp.is_some() {
            name_taken |= name == wanted_name;
            continue;
        }
        let same_revision = label_of(&job.metadata, REVISION_LABEL) == Some(hash.as_str());
        let answers_request =
            annotation_of(&job.metadata, REQUEST_ANNOTATION) == Some(request.requested_at.as_str());
        // A Job still pulling the current revision serves a repeated request too.
        if same_revision && (answers_request || outcome(job).is_none()) && current.is_none() {
            current = Some(job);
        } else {
            name_taken |= name == wanted_name;
            delete_jobs.push(name);
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
                condition: PodCondition {
                    type_: POD_IMAGE_READY_CONDITION.into(),
                    status: "True".into(),
                    reason: Some(PULL_IMAGE_SUCCESS_REASON.into()),
                    message: Some(need_upgrade_message(&hash)),
                    last_transition_time: Some(Time(now)),
                    ..Default::default()
                },
            },
            Some(Outcome::Failed(why)) => Step::MarkFailed {
                job: Some(job.name_any()),
                condition: fail_condition(
                    &hash,
                    &format!(
                        "image pull Job {} on node {node} failed: {why}",
                        job.name_any()
                    ),
                    now,
                ),
            },
        },
        // Same name still going away: create once it is gone.
        None if name_taken => wait(&format!("Job {wanted_name} is being replaced")),
        None => Step::CreateJob {
            job: Box::new(build_job(pod, ds, &hash, node, &request.requested_at)),
        },
    };
    ImagePullPlan { delete_jobs, step }
}

fn wait(why: &str) -> Step {
    Step::Wait { why: why.into() }
}

fn fail_condition(hash: &str, why: &str, now: Timestamp) -> PodCondition {
    PodCondition {
        type_: POD_IMAGE_READY_CONDITION.into(),
        status: "False".into(),
        reason: Some(PULL_IMAGE_FAIL_REASON.into()),
        // Starts like every PodImageReady message, so readers can still find the revision.
        message: Some(format!("{}; {why}", need_upgrade_message(hash))),
        last_transition_time: Some(Time(now)),
        ..Default::default()
    }
}

/// An agent's pre-pull request waiting for an answer.
struct Request {
    /// The hash named in the message (`controllerrevision: <hash>`), if readable.
    hash: Option<String>,
    /// The condition's `lastTransitionTime` as written, "" when absent.
    requested_at: String,
}

fn pending_request(pod: &Pod) -> Option<Request> {
    let condition = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == POD_IMAGE_READY_CONDITION)?;
    if condition.status != "False"
        || condition.reason.as_deref() != Some(PULL_IMAGE_REQUESTED_REASON)
    {
        return None;
    }
    let hash = condition
        .message
        .as_deref()
        .and_then(|m| m.strip_prefix(&need_upgrade_message("")))
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(str::to_string);
    Some(Request {
        hash,
        requested_at: request_stamp(condition),
    })
}

fn request_stamp(condition: &PodCondition) -> String {
    condition
        .last_transition_time
        .as_ref()
        .map(|t| t.0.to_string())
        .unwrap_or_default()
}

fn has_daemonset_owner(pod: &Pod) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
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

fn label_of<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

fn annotation_of<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

// ---------------------------------------------------------------------------------------
// The Job (pure)
// ---------------------------------------------------------------------------------------

/// `imagepull-<pod>-<hash>`, deterministic so a restart finds the Job it created. When
/// the pod name must be cut to fit 63 characters, a piece of the pod UID keeps two long
/// names with the same prefix apart.
pub fn job_name(pod: &Pod, hash: &str) -> String {
    let pod_name = pod.name_any();
    let hash: String = hash.chars().take(20).collect();
    let full = format!("imagepull-{pod_name}-{hash}");
    if full.len() <= MAX_JOB_NAME {
        return full;
    }
    let uid: String = pod
        .metadata
        .uid
        .as_deref()
        .unwrap_or_default()
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(8)
        .collect();
    let room = MAX_JOB_NAME - "imagepull-".len() - hash.len() - uid.len() - 2;
    let prefix = pod_name[..room.min(pod_name.len())].trim_end_matches(['-', '.']);
    format!("imagepull-{prefix}-{uid}-{hash}")
}

/// The Job pulling the DaemonSet's current images on `node` for `pod`.
pub fn build_job(
    pod: &Pod,
    daemonset: &DaemonSet,
    hash: &str,
    node: &str,
    requested_at: &str,
) -> Job {
    let template = daemonset.spec.template.spec.clone().unwrap_or_default();
    let labels = BTreeMap::from([
        (MANAGED_BY_LABEL.to_string(), MANAGED_BY_VALUE.to_string()),
        (POD_UID_LABEL.to_string(), pod.uid().unwrap_or_default()),
        (REVISION_LABEL.to_string(), hash.to_string()),
    ]);
    let annotations = BTreeMap::from([
        (POD_NAME_ANNOTATION.to_string(), pod.name_any()),
        (NODE_ANNOTATION.to_string(), node.to_string()),
        (REQUEST_ANNOTATION.to_string(), requested_at.to_string()),
    ]);

    // Init containers too: their images are needed before the new pod can start.
    let pulled: Vec<Container> = template
        .init_containers
        .iter()
        .flatten()
        .chain(template.containers.iter())
        .map(|c| Container {
            name: c.name.clone(),
            image: c.image.clone(),
            image_pull_policy: Some("Always".into()),
            command: Some(vec![format!("{NOOP_DIR}/true")]),
            // An explicit command with no args ignores the image's ENTRYPOINT and CMD.
            args: None,
            volume_mounts: Some(vec![VolumeMount {
                name: NOOP_VOLUME.into(),
                mount_path: NOOP_DIR.into(),
                read_only: Some(true),
                ..Default::default()
            }]),
            ..minimal_container()
        })
        .collect();
    let installer = Container {
        name: unused_name(NOOP_INSTALLER, &pulled),
        image: Some(NOOP_IMAGE.into()),
        image_pull_policy: Some("IfNotPresent".into()),
        // No shell: BusyBox's own `cp` applet, by absolute path.
        command: Some(vec![
            "/bin/cp".into(),
            "/bin/busybox".into(),
            format!("{NOOP_DIR}/true"),
        ]),
        volume_mounts: Some(vec![VolumeMount {
            name: NOOP_VOLUME.into(),
            mount_path: NOOP_DIR.into(),
            ..Default::default()
        }]),
        ..minimal_container()
    };

    Job {
        metadata: ObjectMeta {
            name: Some(job_name(pod, hash)),
            namespace: pod.namespace(),
            labels: Some(labels.clone()),
            annotations: Some(annotations),
            // Owned by the pod: a pod that goes away takes its pull with it. `controller`
            // so the watch maps Job events to the pod; no blockOwnerDeletion, which
            // would need update rights on pods/finalizers and must not hold up a pod.
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: pod.name_any(),
                uid: pod.uid().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(false),
            }]),
            ..Default::default()
        },
        spec: Some(JobSpec {
            active_deadline_seconds: Some(JOB_DEADLINE_SECONDS),
            backoff_limit: Some(JOB_BACKOFF_LIMIT),
            ttl_seconds_after_finished: Some(JOB_TTL_SECONDS),
            completions: Some(1),
            parallelism: Some(1),
            template: PodTemplateSpec {
                // Our labels only: the DaemonSet's would make Services and the DaemonSet's
                // selector match the pull pod.
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    // Bypasses the scheduler: the pull must land on this node, whatever
                    // its taints or free resources.
                    node_name: Some(node.to_string()),
                    restart_policy: Some("Never".into()),
                    image_pull_secrets: template.image_pull_secrets.clone(),
                    tolerations: tolerations(pod, &template),
                    // Nodes running host-network DaemonSets may have no pod network.
                    host_network: template.host_network,
                    automount_service_account_token: Some(false),
                    enable_service_links: Some(false),
                    termination_grace_period_seconds: Some(1),
                    // Admitted under the `restricted` Pod Security Standard; nothing here
                    // needs privileges. An explicit UID also works for images whose USER
                    // is root or a name.
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(65534),
                        run_as_group: Some(65534),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".into(),
                            localhost_profile: None,
                        }),
                        ..Default::default()
                    }),
                    init_containers: Some(vec![installer]),
                    containers: pulled,
                    volumes: Some(vec![Volume {
                        name: NOOP_VOLUME.into(),
                        empty_dir: Some(EmptyDirVolumeSource {
                            size_limit: Some(Quantity("16Mi".into())),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    }
}

/// Small requests and limits (a namespace quota may demand limits; the kubelet admits
/// the pod against the node's free resources even though the scheduler is bypassed),
/// and the `restricted` container settings.
fn minimal_container() -> Container {
    let amount = |cpu: &str, memory: &str| {
        BTreeMap::from([
            ("cpu".to_string(), Quantity(cpu.into())),
            ("memory".to_string(), Quantity(memory.into())),
        ])
    };
    Container {
        resources: Some(ResourceRequirements {
            requests: Some(amount("1m", "4Mi")),
            limits: Some(amount("100m", "32Mi")),
            ..Default::default()
        }),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                add: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The template's tolerations plus the pod's (the DaemonSet controller adds NoExecute
/// tolerations for not-ready/unreachable nodes that the template does not list), without
/// duplicates.
fn tolerations(pod: &Pod, template: &PodSpec) -> Option<Vec<Toleration>> {
    let mut all: Vec<Toleration> = Vec::new();
    let from_pod = pod.spec.as_ref().and_then(|s| s.tolerations.as_ref());
    for t in template
        .tolerations
        .iter()
        .flatten()
        .chain(from_pod.into_iter().flatten())
    {
        if !all.contains(t) {
            all.push(t.clone());
        }
    }
    (!all.is_empty()).then_some(all)
}

fn unused_name(base: &str, containers: &[Container]) -> String {
    let mut name = base.to_string();
    let mut n = 1;
    while containers.iter().any(|c| c.name == name) {
        name = format!("{base}-{n}");
        n += 1;
    }
    name
}

// ---------------------------------------------------------------------------------------
// Wiring (observe -> plan -> apply)
// ---------------------------------------------------------------------------------------

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("creating image pull Job {namespace}/{name}: {source}")]
    CreateJob {
        namespace: String,
        name: String,
        source: kube::Error,
    },
    #[error("deleting image pull Job {namespace}/{name}: {source}")]
    DeleteJob {
        namespace: String,
        name: String,
        source: kube::Error,
    },
    #[error("writing PodImageReady on pod {namespace}/{name}: {source}")]
    WriteCondition {
        namespace: String,
        name: String,
        source: kube::Error,
    },
}

impl Error {
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::CreateJob { .. } => "create_job",
            Error::DeleteJob { .. } => "delete_job",
            Error::WriteCondition { .. } => "write_condition",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    kind: String,
}

#[derive(Clone)]
struct ImagePullMetrics {
    jobs_created: Counter,
    results: Family<ResultLabels, Counter>,
    reconcile_errors: Family<ErrorLabels, Counter>,
}

impl ImagePullMetrics {
    fn register(metrics: &crate::metrics::Metrics) -> Self {
        let m = Self {
            jobs_created: Counter::default(),
            results: Family::default(),
            reconcile_errors: Family::default(),
        };
        metrics.with_registry(|r| {
            let r = r.sub_registry_with_prefix("rollgate_image_pull");
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
                "reconcile_errors",
                "Failed reconciles by kind",
                m.reconcile_errors.clone(),
            );
        });
        m
    }
}

struct Context {
    client: Client,
    daemonsets: Store<DaemonSet>,
    revisions: Store<ControllerRevision>,
    jobs: Store<Job>,
    recorder: Recorder,
    metrics: ImagePullMetrics,
    /// True once every cache holds its first list (see `SyncGate`).
    synced: tokio::sync::watch::Receiver<bool>,
}

fn prune<K: Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
}

fn scoped<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Pods of `ds_uid` with a request waiting, as reconcile requests.
fn pending_pods_of(pods: &Store<Pod>, ds_uid: &str) -> Vec<ObjectRef<Pod>> {
    pods.state()
        .into_iter()
        .filter(|p| is_controlled_by(p, ds_uid) && pending_request(p).is_some())
        .map(|p| ObjectRef::from_obj(&*p))
        .collect()
}

pub async fn run(
    client: Client,
    metrics: crate::metrics::Metrics,
    namespace: Option<String>,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let namespace = namespace.as_deref();
    let wcfg = watcher::Config::default().page_size(500);
    let (gate, synced) = SyncGate::new(
        "image-pull",
        &["pods", "jobs", "daemonsets", "controllerrevisions"],
    );
    let (pod_reader, pod_writer) = reflector::store::<Pod>();
    let (ds_reader, ds_writer) = reflector::store::<DaemonSet>();
    let (rev_reader, rev_writer) = reflector::store::<ControllerRevision>();
    let (job_reader, job_writer) = reflector::store::<Job>();

    // DaemonSet pods always carry controller-revision-hash: the API server filters the rest.
    let pods = watcher(
        scoped::<Pod>(&client, namespace),
        wcfg.clone().labels(CONTROLLER_REVISION_HASH_LABEL),
    )
    .default_backoff()
    .modify(prune)
    .reflect(pod_writer)
    .inspect(gate.observe("pods"))
    .touched_objects();
    let jobs = watcher(
        scoped::<Job>(&client, namespace),
        wcfg.clone().labels(&format!(
            "{MANAGED_BY_LABEL}={MANAGED_BY_VALUE},{REVISION_LABEL}"
        )),
    )
    .default_backoff()
    .modify(prune)
    .reflect(job_writer)
    .inspect(gate.observe("jobs"))
    .touched_objects();
    let daemonsets = watcher(scoped::<DaemonSet>(&client, namespace), wcfg.clone())
        .default_backoff()
        .modify(prune)
        .reflect(ds_writer)
        .inspect(gate.observe("daemonsets"))
        .touched_objects();
    let revisions = watcher(scoped::<ControllerRevision>(&client, namespace), wcfg)
        .default_backoff()
        .modify(|r: &mut ControllerRevision| {
            prune(r);
            // The template copy inside a revision is large and never read here.
            r.data = Default::default();
        })
        .reflect(rev_writer)
        .inspect(gate.observe("controllerrevisions"))
        .touched_objects();

    let reporter = Reporter {
        controller: CONTROLLER_NAME.into(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let ctx = Arc::new(Context {
        client: client.clone(),
        daemonsets: ds_reader,
        revisions: rev_reader.clone(),
        jobs: job_reader,
        recorder: Recorder::new(client.clone(), reporter),
        metrics: ImagePullMetrics::register(&metrics),
        synced,
    });

    let (pods_for_ds, pods_for_rev) = (pod_reader.clone(), pod_reader.clone());
    Controller::for_stream(pods, pod_reader)
        .with_config(ControllerConfig::default().concurrency(4))
        .owns_stream(jobs)
        // A new revision while a request waits: replan (the pull may be stale now).
        .watches_stream(daemonsets, move |ds| {
            pending_pods_of(&pods_for_ds, &ds.uid().unwrap_or_default())
        })
        .watches_stream(revisions, move |rev| {
            rev.owner_references()
                .iter()
                .filter(|o| o.controller == Some(true) && o.kind == "DaemonSet")
                .flat_map(|o| pending_pods_of(&pods_for_rev, &o.uid))
                .collect::<Vec<_>>()
        })
        .graceful_shutdown_on(shutdown.requested())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "image pull reconcile trigger failed");
            }
        })
        .await;
    tracing::info!("image pull controller stopped");
    Ok(())
}

fn error_policy(pod: Arc<Pod>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics
        .reconcile_errors
        .get_or_create(&ErrorLabels {
            kind: error.metric_label().into(),
        })
        .inc();
    tracing::warn!(pod = %pod.name_any(), namespace = ?pod.namespace(), %error, "image pull reconcile failed, retrying");
    Action::requeue(Duration::from_secs(5))
}

#[tracing::instrument(skip_all, fields(pod = %pod.name_any(), namespace = %pod.namespace().unwrap_or_default()))]
async fn reconcile(pod: Arc<Pod>, ctx: Arc<Context>) -> Result<Action, Error> {
    // Cheap exit for the many DaemonSet pods nobody asked to pre-pull.
    if pending_request(&pod).is_none() {
        return Ok(Action::await_change());
    }
    let _ = ctx.synced.clone().wait_for(|synced| *synced).await;
    let started = Instant::now();
    let ns = pod.namespace().unwrap_or_default();
    let daemonset = pod
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == "DaemonSet")
        .and_then(|o| ctx.daemonsets.get(&ObjectRef::new(&o.name).within(&ns)));
    let revisions: Vec<ControllerRevision> = ctx
        .revisions
        .state_filter(|r| r.namespace().as_deref() == Some(ns.as_str()))
        .iter()
        .map(|r| (**r).clone())
        .collect();
    let uid = pod.uid().unwrap_or_default();
    let jobs: Vec<Job> = ctx
        .jobs
        .state_filter(|j| {
            j.namespace().as_deref() == Some(ns.as_str())
                && label_of(&j.metadata, POD_UID_LABEL) == Some(uid.as_str())
        })
        .iter()
        .map(|j| (**j).clone())
        .collect();
    let plan = plan_image_pull(
        &pod,
        daemonset.as_deref(),
        &revisions,
        &jobs,
        Timestamp::now(),
    );
    let action = apply(&pod, plan, &ctx).await;
    tracing::debug!(elapsed = ?started.elapsed(), "image pull reconciled");
    action
}

async fn apply(pod: &Pod, plan: ImagePullPlan, ctx: &Context) -> Result<Action, Error> {
    let ns = pod.namespace().unwrap_or_default();
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    for name in &plan.delete_jobs {
        match jobs.delete(name, &DeleteParams::background()).await {
            Ok(_) => tracing::info!(job = %name, "deleted stale image pull Job"),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => {
                return Err(Error::DeleteJob {
                    namespace: ns,
                    name: name.clone(),
                    source,
                })
            }
        }
    }
    match plan.step {
        Step::Nothing => Ok(Action::await_change()),
        Step::Wait { why } => {
            tracing::debug!(%why, "image pull waits");
            Ok(Action::requeue(Duration::from_secs(2)))
        }
        Step::WaitForJob { .. } => Ok(Action::requeue(Duration::from_secs(60))),
        Step::CreateJob { job } => {
            let name = job.name_any();
            match jobs.create(&PostParams::default(), &job).await {
                Ok(_) => {}
                // Our cache has not seen it yet, or the old one is still going away.
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    return Ok(Action::requeue(Duration::from_secs(1)))
                }
                Err(source) => {
                    return Err(Error::CreateJob {
                        namespace: ns,
                        name,
                        source,
                    })
                }
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
            let revision = label_of(&job.metadata, REVISION_LABEL).unwrap_or_default();
            tracing::info!(job = %name, %node, revision, ?images, "image pull Job created");
            publish(
                ctx,
                pod,
                EventType::Normal,
                "PullImageStarted",
                format!(
                    "pulling {} image(s) of revision {revision} on node {node} with Job {name}: {}",
                    images.len(),
                    images.join(", ")
                ),
            )
            .await;
            Ok(Action::requeue(Duration::from_secs(60)))
        }
        Step::MarkSucceeded { job, condition } => {
            write_condition(pod, &condition, ctx).await?;
            ctx.metrics
                .results
                .get_or_create(&ResultLabels {
                    result: "success".into(),
                })
                .inc();
            let note = format!(
                "images of {} pulled on the node by Job {job}",
                condition.message.as_deref().unwrap_or_default()
            );
            tracing::info!(%job, "image pre-pull succeeded");
            publish(ctx, pod, EventType::Normal, PULL_IMAGE_SUCCESS_REASON, note).await;
            Ok(Action::await_change())
        }
        Step::MarkFailed { job, condition } => {
            write_condition(pod, &condition, ctx).await?;
            ctx.metrics
                .results
                .get_or_create(&ResultLabels {
                    result: "failure".into(),
                })
                .inc();
            let note = condition.message.clone().unwrap_or_default();
            tracing::warn!(job = ?job, %note, "image pre-pull failed");
            publish(ctx, pod, EventType::Warning, PULL_IMAGE_FAIL_REASON, note).await;
            Ok(Action::await_change())
        }
    }
}

/// Strategic merge on the conditions list (merge key `type`) touches only
/// `PodImageReady`; the pod's UID makes the write fail on a replaced pod of the same name.
async fn write_condition(pod: &Pod, condition: &PodCondition, ctx: &Context) -> Result<(), Error> {
    let ns = pod.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let patch = json!({
        "metadata": {"uid": pod.uid()},
        "status": {"conditions": [condition]},
    });
    let params = PatchParams {
        field_manager: Some(CONTROLLER_NAME.into()),
        ..PatchParams::default()
    };
    match api
        .patch_status(&pod.name_any(), &params, &Patch::Strategic(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(source) => Err(Error::WriteCondition {
            namespace: ns,
            name: pod.name_any(),
            source,
        }),
    }
}

async fn publish(ctx: &Context, pod: &Pod, type_: EventType, reason: &str, note: String) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: "PullImage".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &pod.object_ref(&())).await {
        tracing::warn!(error = %e, reason, "could not publish Event");
    }
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemonset::testkit::{at, revision, DaemonSetBuilder, PodBuilder};
    use k8s_openapi::api::apps::v1::DaemonSetStatus;
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
    use k8s_openapi::api::core::v1::LocalObjectReference;

    const NOW: i64 = 1_000;
    const REQUESTED: i64 = 900;

    fn container(name: &str, image: &str) -> Container {
        Container {
            name: name.into(),
            image: Some(image.into()),
            command: Some(vec!["/agent".into(), "--serve".into()]),
            args: Some(vec!["--port=1".into()]),
            ..Default::default()
        }
    }

    /// An OTA DaemonSet at revision `new` (after `old`), template with an init container,
    /// a pull secret and a toleration.
    fn daemonset() -> DaemonSet {
        let mut ds = DaemonSetBuilder::new("agent")
            .strategy("OTA")
            .on_delete()
            .build();
        ds.metadata.generation = Some(2);
        ds.status = Some(DaemonSetStatus {
            observed_generation: Some(2),
            ..Default::default()
        });
        ds.spec.template.spec = Some(PodSpec {
            init_containers: Some(vec![container("setup", "registry.local/setup:v2")]),
            containers: vec![
                container("agent", "registry.local/agent:v2"),
                container("sidecar", "gcr.io/distroless/static:nonroot"),
            ],
            image_pull_secrets: Some(vec![LocalObjectReference {
                name: "regcred".into(),
            }]),
            tolerations: Some(vec![Toleration {
                key: Some("edge".into()),
                operator: Some("Exists".into()),
                effect: Some("NoSchedule".into()),
                ..Default::default()
            }]),
            ..Default::default()
        });
        ds
    }

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

    fn requested(ds: &DaemonSet, hash: &str) -> Pod {
        PodBuilder::new("agent-x1", ds)
            .hash("old")
            .on_node("edge-1")
            .with_condition(image_ready(
                "False",
                PULL_IMAGE_REQUESTED_REASON,
                &format!("controllerrevision: {hash}"),
                REQUESTED,
            ))
            .build()
    }

    fn job_for(pod: &Pod, ds: &DaemonSet, hash: &str, requested_at: i64) -> Job {
        build_job(pod, ds, hash, "edge-1", &at(requested_at).to_string())
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

    fn plan(pod: &Pod, ds: Option<&DaemonSet>, jobs: &[Job]) -> ImagePullPlan {
        let revs = ds.map(revisions).unwrap_or_default();
        plan_image_pull(pod, ds, &revs, jobs, at(NOW))
    }

    fn step_kind(step: &Step) -> String {
        match step {
            Step::Nothing => "nothing".into(),
            Step::Wait { .. } => "wait".into(),
            Step::CreateJob { job } => format!("create {}", job.name_any()),
            Step::WaitForJob { name } => format!("wait-for {name}"),
            Step::MarkSucceeded { job, .. } => format!("succeeded {job}"),
            Step::MarkFailed { job, .. } => format!("failed {}", job.as_deref().unwrap_or("-")),
        }
    }

    #[test]
    fn the_state_machine() {
        let ds = daemonset();
        let pod = requested(&ds, "new");
        let name = "imagepull-agent-x1-new";
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
        let not_ds_pod = {
            let mut p = requested(&ds, "new");
            p.metadata.owner_references = None;
            p
        };

        let (create, wait_for, succeeded, failed_step) = (
            format!("create {name}"),
            format!("wait-for {name}"),
            format!("succeeded {name}"),
            format!("failed {name}"),
        );
        let (create, wait_for, succeeded, failed_step) = (
            create.as_str(),
            wait_for.as_str(),
            succeeded.as_str(),
            failed_step.as_str(),
        );
        let request_old = requested(&ds, "old");
        #[allow(clippy::type_complexity)]
        let cases: Vec<(&str, &Pod, Option<&DaemonSet>, Vec<Job>, &str, Vec<&str>)> = vec![
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
                "not a DaemonSet pod: nothing",
                &not_ds_pod,
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
                create,
                vec![],
            ),
            (
                "Job running: wait for it",
                &pod,
                Some(&ds),
                vec![running.clone()],
                wait_for,
                vec![],
            ),
            (
                "Job succeeded: mark success",
                &pod,
                Some(&ds),
                vec![done.clone()],
                succeeded,
                vec![],
            ),
            (
                "Job failed: mark failure",
                &pod,
                Some(&ds),
                vec![failed.clone()],
                failed_step,
                vec![],
            ),
            (
                "Job of an older revision: replace it",
                &pod,
                Some(&ds),
                vec![older_revision.clone()],
                create,
                vec!["imagepull-agent-x1-old"],
            ),
            (
                "finished for an earlier request: delete, then create once gone",
                &pod,
                Some(&ds),
                vec![earlier_failure],
                "wait",
                vec![name],
            ),
            (
                "still pulling for an earlier request: it serves this one too",
                &pod,
                Some(&ds),
                vec![earlier_running],
                wait_for,
                vec![],
            ),
            (
                "Job of the same name being deleted: wait",
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
                create,
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
    fn the_job_pulls_every_image_on_the_node_without_a_shell() {
        let ds = daemonset();
        let mut pod = requested(&ds, "new");
        pod.metadata.namespace = Some("edge".into());
        pod.spec.as_mut().unwrap().tolerations = Some(vec![Toleration {
            key: Some("node.kubernetes.io/unreachable".into()),
            operator: Some("Exists".into()),
            effect: Some("NoExecute".into()),
            ..Default::default()
        }]);
        let job = build_job(&pod, &ds, "new", "edge-1", "2024-01-01T00:00:00Z");

        assert_eq!(job.name_any(), "imagepull-agent-x1-new");
        assert_eq!(job.namespace().as_deref(), Some("edge"));
        let labels = job.labels();
        assert_eq!(labels[REVISION_LABEL], "new");
        assert_eq!(labels[POD_UID_LABEL], "uid-agent-x1");
        assert!(!labels.contains_key(CONTROLLER_REVISION_HASH_LABEL));
        assert_eq!(
            job.annotations()[REQUEST_ANNOTATION],
            "2024-01-01T00:00:00Z"
        );
        let owner = &job.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("Pod", "agent-x1", "uid-agent-x1")
        );
        assert_eq!(owner.controller, Some(true));
        assert_eq!(owner.block_owner_deletion, Some(false));

        let spec = job.spec.as_ref().unwrap();
        assert_eq!(spec.active_deadline_seconds, Some(JOB_DEADLINE_SECONDS));
        assert_eq!(spec.backoff_limit, Some(1));
        assert_eq!(spec.ttl_seconds_after_finished, Some(JOB_TTL_SECONDS));
        let pod_spec = spec.template.spec.as_ref().unwrap();
        assert_eq!(pod_spec.node_name.as_deref(), Some("edge-1"));
        assert_eq!(pod_spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(pod_spec.automount_service_account_token, Some(false));
        assert_eq!(
            pod_spec.image_pull_secrets.as_ref().unwrap()[0].name,
            "regcred"
        );
        let tolerations: Vec<_> = pod_spec
            .tolerations
            .iter()
            .flatten()
            .filter_map(|t| t.key.as_deref())
            .collect();
        assert_eq!(tolerations, ["edge", "node.kubernetes.io/unreachable"]);
        assert_eq!(
            spec.template
                .metadata
                .as_ref()
                .unwrap()
                .labels
                .as_ref()
                .unwrap()[REVISION_LABEL],
            "new"
        );

        // One pulled container per template init container and container.
        let pulled: Vec<_> = pod_spec
            .containers
            .iter()
            .map(|c| (c.name.as_str(), c.image.as_deref().unwrap()))
            .collect();
        assert_eq!(
            pulled,
            [
                ("setup", "registry.local/setup:v2"),
                ("agent", "registry.local/agent:v2"),
                ("sidecar", "gcr.io/distroless/static:nonroot"),
            ]
        );
        for c in &pod_spec.containers {
            assert_eq!(c.image_pull_policy.as_deref(), Some("Always"), "{}", c.name);
            // The Job's own no-op, never the image's entrypoint or a shell.
            assert_eq!(
                c.command.as_deref(),
                Some(&[format!("{NOOP_DIR}/true")][..]),
                "{}",
                c.name
            );
            assert_eq!(c.args, None, "{}", c.name);
            assert_eq!(c.volume_mounts.as_ref().unwrap()[0].mount_path, NOOP_DIR);
        }
        let installers = pod_spec.init_containers.as_ref().unwrap();
        assert_eq!(installers.len(), 1);
        assert_eq!(installers[0].image.as_deref(), Some(NOOP_IMAGE));
        let command = installers[0].command.as_ref().unwrap();
        assert!(
            !command
                .iter()
                .any(|a| a == "sh" || a.ends_with("/sh") || a == "-c"),
            "{command:?}"
        );
        assert_eq!(command[0], "/bin/cp");
        assert_eq!(command[2], format!("{NOOP_DIR}/true"));
    }

    #[test]
    fn job_names_fit_a_label_and_stay_apart() {
        let ds = daemonset();
        let long = "a".repeat(80);
        let mut one = PodBuilder::new(&format!("{long}-x1"), &ds).build();
        one.metadata.uid = Some("1111aaaa-0000".into());
        let mut two = PodBuilder::new(&format!("{long}-x2"), &ds).build();
        two.metadata.uid = Some("2222bbbb-0000".into());
        let (a, b) = (job_name(&one, "5d7f9c8b6"), job_name(&two, "5d7f9c8b6"));
        assert!(a.len() <= 63 && b.len() <= 63, "{a} {b}");
        assert_ne!(a, b);
        assert!(a.ends_with("-1111aaaa-5d7f9c8b6"), "{a}");
        assert_eq!(job_name(&one, "5d7f9c8b6"), a, "deterministic");
    }

    #[test]
    fn container_names_never_clash_with_the_installer() {
        let ds = {
            let mut ds = daemonset();
            let spec = ds.spec.template.spec.as_mut().unwrap();
            spec.containers.push(container(NOOP_INSTALLER, "x"));
            ds
        };
        let pod = requested(&ds, "new");
        let job = build_job(&pod, &ds, "new", "edge-1", "");
        let spec = job.spec.unwrap().template.spec.unwrap();
        let installer = &spec.init_containers.unwrap()[0].name;
        assert!(spec.containers.iter().all(|c| &c.name != installer));
    }
}
