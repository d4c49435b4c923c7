//! The pull Job: its name, labels and spec (pure; no client).
//!
//! ## How the Job pulls without trusting the image's contents
//!
//! The kubelet pulls an image before it starts the container, so what the Job's
//! containers run does not matter as long as it exits 0 in *every* image. `true` or
//! `sh -c true` do not exist in distroless or scratch images (a pull that worked would be
//! reported as failed), and the image's own entrypoint may be a daemon that never exits.
//! So the Job brings its own no-op: an init container from a statically linked BusyBox
//! image (the *helper image*) copies its binary into an `emptyDir` as `true`, and every
//! pulled image runs that file (BusyBox picks the applet from `argv[0]`; a static binary
//! needs no libc or loader from the image). The pulled images are the Job's regular
//! containers, one per template container *and* init container, with
//! `imagePullPolicy: IfNotPresent`, so the Job succeeds exactly when every image is on
//! the node and could be started. (OpenKruise's ImagePullJob avoids running anything by
//! pulling through the CRI from a node daemon; we have no privileged node daemon, so a
//! Job it is.)
//!
//! ## Why `IfNotPresent`, not `Always`
//!
//! The question a pre-pull answers is "can the new pod start here without a long
//! download?". On an air-gapped edge node the images are side-loaded (`ctr image
//! import`) and no registry can be reached: `Always` makes the kubelet ask the registry
//! first, fails, and reports `PullImageFail` for an image that is right there.
//! `IfNotPresent` counts an image already on the node as pulled, and pulls one that is
//! not. The price: a *moved* mutable tag (`:latest` pushed again) already on the node is
//! not fetched again by the pre-pull; a template that uses such tags with `Always` has its
//! pod pull at start anyway. Version tags or digests, the norm for edge fleets, have no
//! such gap.
//!
//! ## Tolerations
//!
//! The Job's pod is bound with `nodeName`, so no scheduler checks taints, but the kubelet
//! still rejects (and the taint manager evicts) a pod that does not tolerate a NoExecute
//! taint of the node. The Job carries the template's tolerations, the ones the DaemonSet
//! controller adds to every pod, and the live pod's (read with one GET when the Job is
//! made, [`with_pod_tolerations`]): admission webhooks add tolerations to the pod that
//! the template never had, and the pod is the proof that the node accepts them.
//!
//! Price: the helper image must be pullable on the node. Air-gapped edge nodes cannot
//! reach the public default, so it is a flag (`--prepull-helper-image`): mirror it. If it
//! cannot be pulled, the pre-pull reports failure, which is safe.
//!
//! ## Credentials
//!
//! The Job pulls as the pod would: it runs under the pod's ServiceAccount and carries the
//! pod's `imagePullSecrets` merged with the template's. The pod's list is what admission
//! really gave it (the ServiceAccount admission plugin adds the ServiceAccount's pull
//! secrets there, not to the template); pulling with the template's alone made private
//! registries look like a failed pull.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, LocalObjectReference, PodSecurityContext,
    PodSpec, PodTemplateSpec, ResourceRequirements, SeccompProfile, SecurityContext, Toleration,
    Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::daemonset::placement::daemonset_default_tolerations;
use crate::names::{
    MANAGED_BY_LABEL, MANAGED_BY_VALUE, PULL_JOB_NODE_ANNOTATION, PULL_JOB_POD_NAME_ANNOTATION,
    PULL_JOB_POD_UID_LABEL, PULL_JOB_REQUEST_ANNOTATION, PULL_JOB_REVISION_LABEL,
};
use crate::object::PodFacts;

/// Statically linked BusyBox (the musl variant is built with `CONFIG_STATIC=y`): the
/// default source of the no-op every pulled image runs. A mirror must be the same kind
/// of image: `/bin/busybox` static, `/bin/cp` an applet link to it.
pub const DEFAULT_HELPER_IMAGE: &str = "docker.io/library/busybox:1.36.1-musl";
/// Where the no-op lives inside every pulled container: an unusual path, so the
/// `emptyDir` mounted there does not hide anything the image could need.
pub const NOOP_DIR: &str = "/.rollgate-image-pull";
const NOOP_VOLUME: &str = "rollgate-noop";
pub(super) const NOOP_INSTALLER: &str = "rollgate-install-noop";

/// The default of `--prepull-deadline`: a pull that has not finished after this long
/// fails (a missing image makes the kubelet back off and retry forever; the deadline
/// turns that into an answer). Enough for a few hundred MB on a fast link; slow links
/// and big images set their own (see `deadline`).
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(600);
/// One retry with a fresh pod (e.g. the first was evicted); pull errors are retried by
/// the kubelet inside the pod.
pub const JOB_BACKOFF_LIMIT: i32 = 1;
/// Finished Jobs linger this long for `kubectl describe`, then the TTL controller
/// removes them (the pod's ownerReference removes them with the pod before that).
pub const JOB_TTL_SECONDS: i32 = 300;
/// Longest Job name: the Job controller copies it into the `job-name` label of its pods.
const MAX_JOB_NAME: usize = 63;
/// The revision part of a Job name is cut to this many characters (hashes are ~10).
const MAX_REVISION_IN_NAME: usize = 20;

/// What the operator configures about pull Jobs (`rollgate controller` flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullJobSettings {
    /// Image of the no-op installer: a static BusyBox (see the module docs).
    pub helper_image: String,
    /// The Job's `activeDeadlineSeconds` unless the DaemonSet's annotation says otherwise.
    pub deadline: Duration,
}

impl Default for PullJobSettings {
    fn default() -> Self {
        Self {
            helper_image: DEFAULT_HELPER_IMAGE.into(),
            deadline: DEFAULT_DEADLINE,
        }
    }
}

/// `imagepull-<pod>-<revision>-<request>`: one name per pre-pull *request*, where
/// `<request>` is a digest of the pod UID, the revision and the request's
/// `lastTransitionTime`.
///
/// Why one name per request rather than one per pod and revision, replaced in place:
/// asking again after a failure must start a new pull, and a fixed name would make the
/// new Job wait until the old one (and its pod) has really gone, with a delete, a
/// precondition and a "still being deleted" state in between. With a name per request
/// the new Job is created at once, the old one is deleted beside it, and the old one
/// stays an honest record of the request it answered. The name is still deterministic,
/// so a controller that restarts, or whose cache lags, finds or re-creates the same Job
/// instead of a second one (the create answers 409). The pod UID in the digest keeps a
/// recreated pod of the same name, and two long pod names cut to the same prefix, apart.
pub fn job_name(pod: &impl PodFacts, revision: &str, requested_at: &str) -> String {
    let revision: String = revision.chars().take(MAX_REVISION_IN_NAME).collect();
    let digest = request_digest(pod.pod_uid(), &revision, requested_at);
    let room = MAX_JOB_NAME - "imagepull-".len() - revision.len() - digest.len() - 2;
    let pod_name: String = pod.pod_name().chars().take(room).collect();
    let pod_name = pod_name.trim_end_matches(['-', '.']);
    format!("imagepull-{pod_name}-{revision}-{digest}")
}

/// 8 hex digits of FNV-1a over the parts: stable across builds and platforms (unlike
/// `DefaultHasher`), which a name that must be found again after a restart needs.
fn request_digest(pod_uid: &str, revision: &str, requested_at: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in [pod_uid, revision, requested_at] {
        for byte in part.bytes().chain([0]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("{:08x}", (hash ^ (hash >> 32)) as u32)
}

/// The Job pulling the DaemonSet's current images on `node` for `pod`, given up after
/// `deadline` (whole seconds, at least one).
pub fn build_job(
    pod: &impl PodFacts,
    daemonset: &DaemonSet,
    revision: &str,
    node: &str,
    requested_at: &str,
    settings: &PullJobSettings,
    deadline: Duration,
) -> Job {
    let template = daemonset.spec.template.spec.clone().unwrap_or_default();
    let labels = BTreeMap::from([
        (MANAGED_BY_LABEL.to_string(), MANAGED_BY_VALUE.to_string()),
        (
            PULL_JOB_POD_UID_LABEL.to_string(),
            pod.pod_uid().to_string(),
        ),
        (PULL_JOB_REVISION_LABEL.to_string(), revision.to_string()),
    ]);
    let annotations = BTreeMap::from([
        (
            PULL_JOB_POD_NAME_ANNOTATION.to_string(),
            pod.pod_name().to_string(),
        ),
        (PULL_JOB_NODE_ANNOTATION.to_string(), node.to_string()),
        (
            PULL_JOB_REQUEST_ANNOTATION.to_string(),
            requested_at.to_string(),
        ),
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
            // An image already on the node counts (side-loaded on air-gapped nodes): see
            // the module docs.
            image_pull_policy: Some("IfNotPresent".into()),
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
        image: Some(settings.helper_image.clone()),
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
            name: Some(job_name(pod, revision, requested_at)),
            namespace: pod.metadata().namespace.clone(),
            labels: Some(labels.clone()),
            annotations: Some(annotations),
            // Owned by the pod: a pod that goes away takes its pull with it. `controller`
            // so the watch maps Job events to the pod; no blockOwnerDeletion, which
            // would need update rights on pods/finalizers and must not hold up a pod.
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: pod.pod_name().to_string(),
                uid: pod.pod_uid().to_string(),
                controller: Some(true),
                block_owner_deletion: Some(false),
            }]),
            ..Default::default()
        },
        spec: Some(JobSpec {
            active_deadline_seconds: Some(deadline.as_secs().clamp(1, i64::MAX as u64) as i64),
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
                    // The pod's identity, so registry credentials tied to it apply; the
                    // template's only for a pod that names none.
                    service_account_name: pod
                        .service_account_name()
                        .map(str::to_string)
                        .or_else(|| template.service_account_name.clone()),
                    image_pull_secrets: pull_secrets(pod, &template),
                    tolerations: tolerations(&template),
                    // Nodes running host-network DaemonSets may have no pod network.
                    host_network: template.host_network,
                    // Pulling needs the secrets above, never an API token in the pod.
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

/// The template's pull secrets, then the pod's, each name once.
fn pull_secrets(pod: &impl PodFacts, template: &PodSpec) -> Option<Vec<LocalObjectReference>> {
    let mut all: Vec<LocalObjectReference> = Vec::new();
    for name in template
        .image_pull_secrets
        .iter()
        .flatten()
        .map(|s| s.name.as_str())
        .chain(pod.image_pull_secrets())
    {
        if !name.is_empty() && !all.iter().any(|s| s.name == name) {
            all.push(LocalObjectReference { name: name.into() });
        }
    }
    (!all.is_empty()).then_some(all)
}

/// The template's tolerations plus the ones the DaemonSet controller adds to every pod
/// it creates (NoExecute for not-ready/unreachable nodes, and the pressure taints). The
/// live pod's are added when the Job is made ([`with_pod_tolerations`]): the shared
/// cache does not keep them. No duplicates.
fn tolerations(template: &PodSpec) -> Option<Vec<Toleration>> {
    let defaults = daemonset_default_tolerations(template.host_network == Some(true));
    merged_tolerations(template.tolerations.iter().flatten().chain(defaults.iter()))
}

fn merged_tolerations<'a>(all: impl Iterator<Item = &'a Toleration>) -> Option<Vec<Toleration>> {
    let mut merged: Vec<Toleration> = Vec::new();
    for t in all {
        if !merged.contains(t) {
            merged.push(t.clone());
        }
    }
    (!merged.is_empty()).then_some(merged)
}

/// `job` with the live pod's tolerations added after its own (no duplicates): those an
/// admission webhook injected into the pod, or a user added to it in place, which the
/// template lacks. Without them the kubelet rejects the Job's pod on a node with a
/// NoExecute taint that only the pod tolerates. Tolerations only ever widen where a pod
/// may run, and the pod already runs on this node, so adding them grants the Job nothing
/// the pod did not have.
pub fn with_pod_tolerations(mut job: Job, pod_tolerations: &[Toleration]) -> Job {
    if let Some(spec) = job.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
        let own = spec.tolerations.take().unwrap_or_default();
        spec.tolerations = merged_tolerations(own.iter().chain(pod_tolerations));
    }
    job
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

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::names::CONTROLLER_REVISION_HASH_LABEL;
    use crate::testkit::{DaemonSetBuilder, PodBuilder};
    use k8s_openapi::api::apps::v1::DaemonSetStatus;
    use k8s_openapi::api::core::v1::Pod;
    use kube::ResourceExt;

    pub fn container(name: &str, image: &str) -> Container {
        Container {
            name: name.into(),
            image: Some(image.into()),
            command: Some(vec!["/agent".into(), "--serve".into()]),
            args: Some(vec!["--port=1".into()]),
            ..Default::default()
        }
    }

    fn secrets(names: &[&str]) -> Option<Vec<LocalObjectReference>> {
        (!names.is_empty()).then(|| {
            names
                .iter()
                .map(|n| LocalObjectReference {
                    name: n.to_string(),
                })
                .collect()
        })
    }

    /// An OTA DaemonSet at revision `new` (after `old`), template with an init container,
    /// a pull secret and a toleration.
    pub fn daemonset() -> DaemonSet {
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
            image_pull_secrets: secrets(&["regcred"]),
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

    fn pod_on_edge_1(ds: &DaemonSet) -> Pod {
        PodBuilder::new("agent-x1", ds)
            .hash("old")
            .on_node("edge-1")
            .build()
    }

    fn build(pod: &Pod, ds: &DaemonSet) -> Job {
        build_job(
            pod,
            ds,
            "new",
            "edge-1",
            "2024-01-01T00:00:00Z",
            &PullJobSettings::default(),
            DEFAULT_DEADLINE,
        )
    }

    fn pod_spec(job: &Job) -> &PodSpec {
        job.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
    }

    #[test]
    fn the_job_pulls_every_image_on_the_node_without_a_shell() {
        let ds = daemonset();
        let mut pod = pod_on_edge_1(&ds);
        pod.spec.as_mut().unwrap().tolerations = Some(vec![Toleration {
            key: Some("node.kubernetes.io/unreachable".into()),
            operator: Some("Exists".into()),
            effect: Some("NoExecute".into()),
            ..Default::default()
        }]);
        let job = build(&pod, &ds);

        assert_eq!(
            job.name_any(),
            job_name(&pod, "new", "2024-01-01T00:00:00Z")
        );
        assert!(job.name_any().starts_with("imagepull-agent-x1-new-"));
        assert_eq!(job.namespace().as_deref(), Some("edge"));
        let labels = job.labels();
        assert_eq!(labels[PULL_JOB_REVISION_LABEL], "new");
        assert_eq!(labels[PULL_JOB_POD_UID_LABEL], "uid-agent-x1");
        assert_eq!(labels[MANAGED_BY_LABEL], MANAGED_BY_VALUE);
        assert!(!labels.contains_key(CONTROLLER_REVISION_HASH_LABEL));
        assert_eq!(
            job.annotations()[PULL_JOB_REQUEST_ANNOTATION],
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
        assert_eq!(spec.active_deadline_seconds, Some(600));
        assert_eq!(spec.backoff_limit, Some(1));
        assert_eq!(spec.ttl_seconds_after_finished, Some(JOB_TTL_SECONDS));
        let pod_spec = pod_spec(&job);
        assert_eq!(pod_spec.node_name.as_deref(), Some("edge-1"));
        assert_eq!(pod_spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(pod_spec.automount_service_account_token, Some(false));
        let tolerations: Vec<_> = pod_spec
            .tolerations
            .iter()
            .flatten()
            .filter_map(|t| t.key.as_deref())
            .collect();
        assert_eq!(tolerations[0], "edge", "the template's first");
        assert!(
            tolerations.contains(&"node.kubernetes.io/unreachable")
                && tolerations.contains(&"node.kubernetes.io/not-ready"),
            "and the DaemonSet controller's defaults: {tolerations:?}"
        );
        assert_eq!(
            spec.template
                .metadata
                .as_ref()
                .unwrap()
                .labels
                .as_ref()
                .unwrap()[PULL_JOB_REVISION_LABEL],
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
            // Side-loaded images on air-gapped nodes count as pulled.
            assert_eq!(
                c.image_pull_policy.as_deref(),
                Some("IfNotPresent"),
                "{}",
                c.name
            );
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
        assert_eq!(installers[0].image.as_deref(), Some(DEFAULT_HELPER_IMAGE));
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
    fn the_helper_image_comes_from_the_settings() {
        let ds = daemonset();
        let pod = pod_on_edge_1(&ds);
        let settings = PullJobSettings {
            helper_image: "mirror.edge.local/library/busybox:1.36.1-musl".into(),
            ..Default::default()
        };
        let job = build_job(&pod, &ds, "new", "edge-1", "", &settings, DEFAULT_DEADLINE);
        let installer = &pod_spec(&job).init_containers.as_ref().unwrap()[0];
        assert_eq!(
            installer.image.as_deref(),
            Some("mirror.edge.local/library/busybox:1.36.1-musl")
        );
        // Mirrored images are pulled once and reused, not fetched for every Job.
        assert_eq!(installer.image_pull_policy.as_deref(), Some("IfNotPresent"));
    }

    #[test]
    fn the_job_pulls_with_the_pods_identity_and_secrets() {
        struct Case {
            what: &'static str,
            template_secrets: &'static [&'static str],
            pod_secrets: &'static [&'static str],
            template_account: Option<&'static str>,
            pod_account: Option<&'static str>,
            want_secrets: &'static [&'static str],
            want_account: Option<&'static str>,
        }
        let cases = [
            Case {
                what: "template secrets only",
                template_secrets: &["regcred"],
                pod_secrets: &[],
                template_account: None,
                pod_account: None,
                want_secrets: &["regcred"],
                want_account: None,
            },
            Case {
                what: "secrets the ServiceAccount admission added to the pod count too",
                template_secrets: &[],
                pod_secrets: &["sa-dockercfg"],
                template_account: Some("edge-agent"),
                pod_account: Some("edge-agent"),
                want_secrets: &["sa-dockercfg"],
                want_account: Some("edge-agent"),
            },
            Case {
                what: "both, merged in order without duplicates",
                template_secrets: &["regcred", "mirror"],
                pod_secrets: &["regcred", "sa-dockercfg", "mirror"],
                template_account: None,
                pod_account: Some("default"),
                want_secrets: &["regcred", "mirror", "sa-dockercfg"],
                want_account: Some("default"),
            },
            Case {
                what: "no secrets anywhere: none, not an empty list",
                template_secrets: &[],
                pod_secrets: &[],
                template_account: None,
                pod_account: None,
                want_secrets: &[],
                want_account: None,
            },
            Case {
                what: "empty secret names are dropped",
                template_secrets: &[""],
                pod_secrets: &["regcred"],
                template_account: None,
                pod_account: None,
                want_secrets: &["regcred"],
                want_account: None,
            },
            Case {
                what: "the pod's ServiceAccount wins over a changed template's",
                template_secrets: &[],
                pod_secrets: &[],
                template_account: Some("edge-agent-v2"),
                pod_account: Some("edge-agent"),
                want_secrets: &[],
                want_account: Some("edge-agent"),
            },
            Case {
                what: "a pod naming no ServiceAccount falls back to the template's",
                template_secrets: &[],
                pod_secrets: &[],
                template_account: Some("edge-agent"),
                pod_account: None,
                want_secrets: &[],
                want_account: Some("edge-agent"),
            },
        ];
        for case in cases {
            let mut ds = daemonset();
            let template = ds.spec.template.spec.as_mut().unwrap();
            template.image_pull_secrets = secrets(case.template_secrets);
            template.service_account_name = case.template_account.map(Into::into);
            let mut pod = pod_on_edge_1(&ds);
            let spec = pod.spec.as_mut().unwrap();
            spec.image_pull_secrets = secrets(case.pod_secrets);
            spec.service_account_name = case.pod_account.map(Into::into);

            let job = build(&pod, &ds);
            let got: Vec<&str> = pod_spec(&job)
                .image_pull_secrets
                .iter()
                .flatten()
                .map(|s| s.name.as_str())
                .collect();
            assert_eq!(got, case.want_secrets, "{}", case.what);
            if case.want_secrets.is_empty() {
                assert_eq!(pod_spec(&job).image_pull_secrets, None, "{}", case.what);
            }
            assert_eq!(
                pod_spec(&job).service_account_name.as_deref(),
                case.want_account,
                "{}",
                case.what
            );
            assert_eq!(
                pod_spec(&job).automount_service_account_token,
                Some(false),
                "{}",
                case.what
            );
        }
    }

    #[test]
    fn job_names_fit_a_label_and_differ_per_request() {
        let ds = daemonset();
        let long = "a".repeat(80);
        let mut one = PodBuilder::new(&format!("{long}-x1"), &ds).build();
        one.metadata.uid = Some("1111aaaa-0000".into());
        let mut two = PodBuilder::new(&format!("{long}-x2"), &ds).build();
        two.metadata.uid = Some("2222bbbb-0000".into());
        let at = "2024-01-01T00:00:00Z";
        let (a, b) = (
            job_name(&one, "5d7f9c8b6", at),
            job_name(&two, "5d7f9c8b6", at),
        );
        assert!(a.len() <= 63 && b.len() <= 63, "{a} {b}");
        assert_ne!(a, b, "same cut prefix, different pods");
        assert!(a.starts_with("imagepull-aaaa"), "{a}");
        assert!(a.contains("-5d7f9c8b6-"), "{a}");
        assert_eq!(job_name(&one, "5d7f9c8b6", at), a, "deterministic");

        let short = PodBuilder::new("agent-x1", &ds).build();
        let first = job_name(&short, "new", "2024-01-01T00:00:00Z");
        let again = job_name(&short, "new", "2024-01-01T00:05:00Z");
        assert_ne!(first, again, "a new request gets a new Job");
        let mut recreated = short.clone();
        recreated.metadata.uid = Some("uid-agent-x1-recreated".into());
        assert_ne!(
            first,
            job_name(&recreated, "new", "2024-01-01T00:00:00Z"),
            "a recreated pod of the same name never inherits a name"
        );
        // Pinned: a restarted controller must compute the very same name.
        assert_eq!(first, "imagepull-agent-x1-new-152ddf6f");
        let revision = "r".repeat(40);
        let capped = job_name(&short, &revision, "");
        assert!(capped.len() <= 63, "{capped}");
        assert!(
            capped.contains(&format!("-{}-", "r".repeat(20))),
            "{capped}"
        );
    }

    #[test]
    fn the_deadline_given_is_the_jobs_active_deadline() {
        let ds = daemonset();
        let pod = pod_on_edge_1(&ds);
        for (deadline, want) in [
            (Duration::from_secs(5400), 5400),
            (Duration::from_secs(1), 1),
            // Never 0, which would fail the Job before it starts.
            (Duration::from_millis(200), 1),
        ] {
            let job = build_job(
                &pod,
                &ds,
                "new",
                "edge-1",
                "",
                &PullJobSettings::default(),
                deadline,
            );
            assert_eq!(
                job.spec.unwrap().active_deadline_seconds,
                Some(want),
                "{deadline:?}"
            );
        }
    }

    fn toleration(key: &str, effect: &str) -> Toleration {
        Toleration {
            key: Some(key.into()),
            operator: Some("Exists".into()),
            effect: Some(effect.into()),
            ..Default::default()
        }
    }

    #[test]
    fn the_live_pods_tolerations_are_added_to_the_templates() {
        let ds = daemonset();
        let pod = pod_on_edge_1(&ds);
        let built = build(&pod, &ds);
        let before = pod_spec(&built).tolerations.clone().unwrap();
        let injected = toleration("edge.example/maintenance", "NoExecute");
        // The live pod has the template's and the defaults too, and one a webhook added.
        let mut live = before.clone();
        live.insert(1, injected.clone());
        let job = with_pod_tolerations(built, &live);
        let after = pod_spec(&job).tolerations.clone().unwrap();
        assert_eq!(&after[..before.len()], &before[..], "the Job's own first");
        assert_eq!(
            after[before.len()..],
            [injected],
            "then only what was missing"
        );

        // Without the live pod's, the NoExecute taint only it tolerates is not tolerated.
        let template_only = build(&pod, &ds);
        assert!(!pod_spec(&template_only)
            .tolerations
            .iter()
            .flatten()
            .any(|t| t.key.as_deref() == Some("edge.example/maintenance")));

        // A pod with no tolerations of its own changes nothing.
        let same = with_pod_tolerations(build(&pod, &ds), &[]);
        assert_eq!(pod_spec(&same).tolerations.as_ref(), Some(&before));
    }

    #[test]
    fn container_names_never_clash_with_the_installer() {
        let ds = {
            let mut ds = daemonset();
            let spec = ds.spec.template.spec.as_mut().unwrap();
            spec.containers.push(container(NOOP_INSTALLER, "x"));
            ds
        };
        let pod = pod_on_edge_1(&ds);
        let job = build(&pod, &ds);
        let spec = pod_spec(&job);
        let installer = &spec.init_containers.as_ref().unwrap()[0].name;
        assert!(spec.containers.iter().all(|c| &c.name != installer));
    }
}
