//! The pod as the shared cache keeps it: [`CachedPod`], and [`PodFacts`], what every
//! planner reads of a pod (node, owner, terminating, conditions, ports), for both the
//! cached and the full API object.
//!
//! Why a type of its own: `k8s_openapi`'s `Pod` is 2.4 kB before a single field is set
//! (its `PodSpec` alone is 1.5 kB, each `Container` 2.3 kB), so pruning fields to `None`
//! leaves most of the memory in place. At 10,000 pods that was 9 kB per pod. A
//! `CachedPod` holds only what a controller reads, and what pods have in common (node
//! names, containers, owners, container statuses, condition strings) once per process
//! ([`Shared`]): a pointer each.
//!
//! What a pod costs in the store, its key and slot included (`tests/cache_cost.rs`, a
//! pod among 1,000; 2026-12-06): 1,509 B a Running DaemonSet pod, 1,496 B a Running
//! Deployment pod of three containers and an init container (2,098 B and 2,692 B
//! before). Most of what is left is the pod's own: `ObjectMeta` (360 B inline, kept so
//! the store takes it as a `kube::Resource` and planners read `metadata()`), the
//! labels' B-tree node (544 B for up to 11 labels, a map because the gates read it as
//! one), the store key's copies of name, namespace, UID and resourceVersion, and two
//! conditions with their transition times.
//!
//! The store holds *every* pod (a readiness-gate controller needs Deployment pods too),
//! so each controller picks its own pods, e.g. by controller owner reference.
use std::borrow::Cow;
use std::hash::{Hash, Hasher};

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::NamespaceResourceScope;
use serde::{Deserialize, Serialize};

use super::meta::{controller_of, label};
use super::shared::{intern, Atom, Shared};
use crate::names::{
    GATE_PREFIX, POD_IMAGE_READY_CONDITION, POD_NEED_UPGRADE_CONDITION, PULL_IMAGE_FAIL_REASON,
    PULL_IMAGE_REQUESTED_REASON, PULL_IMAGE_SUCCESS_REASON,
};

/// A string that is usually one of a few well-known values (protocols, waiting reasons,
/// a node's Ready status): those cost no allocation. A cached pod's condition strings
/// and phase are [`Atom`]s instead: one copy per process of any value.
pub type Text = Cow<'static, str>;

/// Values common enough in pod status to be worth spelling once per process.
const KNOWN: &[&str] = &[
    "True",
    "False",
    "Unknown",
    "Ready",
    "ContainersReady",
    "Initialized",
    "PodScheduled",
    "PodReadyToStartContainers",
    "DisruptionTarget",
    POD_NEED_UPGRADE_CONDITION,
    POD_IMAGE_READY_CONDITION,
    PULL_IMAGE_REQUESTED_REASON,
    PULL_IMAGE_SUCCESS_REASON,
    PULL_IMAGE_FAIL_REASON,
    "Pending",
    "Running",
    "Succeeded",
    "Failed",
    "TCP",
    "UDP",
    "SCTP",
    "ContainersNotReady",
    "ReadinessGatesNotReady",
    "PodCompleted",
    // Container waiting reasons: the failure rule of a rollout reads them.
    "ContainerCreating",
    "PodInitializing",
    "CrashLoopBackOff",
    "ErrImagePull",
    "ImagePullBackOff",
    "CreateContainerConfigError",
    "InvalidImageName",
];

/// `value` as a [`Text`]: borrowed when it is a known value, else owned.
pub fn text(value: String) -> Text {
    match KNOWN.iter().find(|known| **known == value) {
        Some(known) => Cow::Borrowed(known),
        None => Cow::Owned(value),
    }
}

/// One pod condition, borrowed from either pod type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConditionView<'a> {
    pub type_: &'a str,
    pub status: &'a str,
    pub reason: Option<&'a str>,
    pub message: Option<&'a str>,
    pub last_transition_time: Option<&'a Time>,
}

/// One container port, borrowed from either pod type (named `targetPort` resolution).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortView<'a> {
    pub container: &'a str,
    pub name: Option<&'a str>,
    pub container_port: i32,
    /// `TCP` when the pod does not say.
    pub protocol: &'a str,
}

/// One container's status as the kubelet reports it, borrowed from either pod type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContainerStateView<'a> {
    pub name: &'a str,
    pub ready: bool,
    /// `state.waiting.reason`, while the container waits.
    pub waiting_reason: Option<&'a str>,
    pub restart_count: i32,
}

/// What controllers read of a pod. Implemented for the cached [`CachedPod`] and for the
/// API's `Pod`, so planners run on either and tests can prove they decide the same.
pub trait PodFacts {
    /// The pod's metadata. A [`CachedPod`]'s has no owner references (they are shared,
    /// see [`PodFacts::owner_references`]) and only some of the rest.
    fn metadata(&self) -> &ObjectMeta;
    /// `metadata.ownerReferences`.
    fn owner_references(&self) -> &[OwnerReference];
    /// `spec.nodeName`, when set and not empty.
    fn node_name(&self) -> Option<&str>;
    /// The node a pending DaemonSet pod is meant for: the single value of its required
    /// node-affinity `matchFields` term on `metadata.name` (none when there are several
    /// differing ones, which the DaemonSet controller never writes).
    fn affinity_node(&self) -> Option<&str>;
    fn service_account_name(&self) -> Option<&str>;
    /// `spec.imagePullSecrets` names, in order.
    fn image_pull_secrets(&self) -> impl Iterator<Item = &str>;
    /// `spec.readinessGates` condition types.
    fn readiness_gates(&self) -> impl Iterator<Item = &str>;
    /// Every container's ports (not init containers': Services cannot target those).
    fn container_ports(&self) -> impl Iterator<Item = PortView<'_>>;
    /// Container name and image, in spec order.
    fn container_images(&self) -> impl Iterator<Item = (&str, Option<&str>)>;
    /// Container name and `ready`, from `status.containerStatuses`.
    fn container_readiness(&self) -> impl Iterator<Item = (&str, bool)>;
    /// Every container's status (`status.containerStatuses`, not init containers').
    fn container_states(&self) -> impl Iterator<Item = ContainerStateView<'_>>;
    fn conditions(&self) -> impl Iterator<Item = ConditionView<'_>>;
    fn pod_ip(&self) -> Option<&str>;
    fn phase(&self) -> Option<&str>;

    fn pod_name(&self) -> &str {
        self.metadata().name.as_deref().unwrap_or_default()
    }
    fn pod_namespace(&self) -> &str {
        self.metadata().namespace.as_deref().unwrap_or_default()
    }
    fn pod_uid(&self) -> &str {
        self.metadata().uid.as_deref().unwrap_or_default()
    }
    fn label(&self, key: &str) -> Option<&str> {
        label(self.metadata(), key)
    }
    /// The UID of the pod's controller (its owner reference with `controller: true`).
    fn controller_uid(&self) -> Option<&str> {
        controller_of(self.owner_references())
    }
    /// The pod's condition of this type, if any.
    fn condition(&self, type_: &str) -> Option<ConditionView<'_>> {
        self.conditions().find(|c| c.type_ == type_)
    }
    /// Whether the pod's condition of this type has status `True`.
    fn condition_is_true(&self, type_: &str) -> bool {
        self.condition(type_).is_some_and(|c| c.status == "True")
    }
    /// The node the pod runs on or, while pending, the node it is meant for.
    fn node_or_affinity_node(&self) -> Option<&str> {
        self.node_name().or_else(|| self.affinity_node())
    }
    /// It has a deletion timestamp: going away, whatever its conditions say.
    fn is_terminating(&self) -> bool {
        self.metadata().deletion_timestamp.is_some()
    }
}

/// Planners take pods from the store (`Arc`) or borrowed; both read through.
macro_rules! forward_pod_facts {
    ($($wrapper:ty),*) => {$(
impl<T: PodFacts> PodFacts for $wrapper {
    fn metadata(&self) -> &ObjectMeta {
        (**self).metadata()
    }
    fn owner_references(&self) -> &[OwnerReference] {
        (**self).owner_references()
    }
    fn node_name(&self) -> Option<&str> {
        (**self).node_name()
    }
    fn affinity_node(&self) -> Option<&str> {
        (**self).affinity_node()
    }
    fn service_account_name(&self) -> Option<&str> {
        (**self).service_account_name()
    }
    fn image_pull_secrets(&self) -> impl Iterator<Item = &str> {
        (**self).image_pull_secrets()
    }
    fn readiness_gates(&self) -> impl Iterator<Item = &str> {
        (**self).readiness_gates()
    }
    fn container_ports(&self) -> impl Iterator<Item = PortView<'_>> {
        (**self).container_ports()
    }
    fn container_images(&self) -> impl Iterator<Item = (&str, Option<&str>)> {
        (**self).container_images()
    }
    fn container_readiness(&self) -> impl Iterator<Item = (&str, bool)> {
        (**self).container_readiness()
    }
    fn container_states(&self) -> impl Iterator<Item = ContainerStateView<'_>> {
        (**self).container_states()
    }
    fn conditions(&self) -> impl Iterator<Item = ConditionView<'_>> {
        (**self).conditions()
    }
    fn pod_ip(&self) -> Option<&str> {
        (**self).pod_ip()
    }
    fn phase(&self) -> Option<&str> {
        (**self).phase()
    }
}
    )*};
}
forward_pod_facts!(std::sync::Arc<T>, &T);

/// Whether `pod`'s controller ownerRef is the object (e.g. the DaemonSet) with this UID.
pub fn is_controlled_by(pod: &impl PodFacts, owner_uid: &str) -> bool {
    pod.controller_uid() == Some(owner_uid)
}

/// A full pod's condition of this type, if any.
pub fn pod_condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a PodCondition> {
    pod.status
        .as_ref()
        .and_then(|status| status.conditions.as_deref())
        .unwrap_or_default()
        .iter()
        .find(|c| c.type_ == type_)
}

/// A pod as the shared cache keeps it. Build one with `CachedPod::from(pod)`.
///
/// `metadata` keeps name, namespace, UID, resourceVersion, labels (Service selectors,
/// revision hashes), creation and deletion timestamps and the deletion grace period;
/// annotations, finalizers, generateName and managedFields are dropped, and the owner
/// references are kept apart (in `workload`, shared by the pods of one workload): read
/// them with [`PodFacts::owner_references`], never from `metadata`.
/// Conditions are kept only of the types some controller reads (`condition_is_read`):
/// a reader of another type must add it there.
///
/// What pods have in common is [`Shared`]: one copy per process of each node name,
/// container list (names, images, ports), container status list (in a healthy fleet,
/// the same for every pod of a revision), readiness gates, [`FromWorkload`] (owners,
/// service account, pull secrets), phase and condition string. A pod pays a pointer
/// for each.
///
/// It is a `kube::Resource` of kind Pod, so reflector stores and controllers take it as
/// they take a `Pod`. Its serde form is its own (camelCase fields), not a v1 Pod.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedPod {
    pub metadata: ObjectMeta,
    pub workload: Shared<FromWorkload>,
    pub node_name: Option<Atom>,
    /// See [`PodFacts::affinity_node`]; only kept while `node_name` is unset.
    pub affinity_node: Option<Atom>,
    pub readiness_gates: Shared<Box<[Box<str>]>>,
    pub containers: Shared<Box<[CachedContainer]>>,
    pub container_readiness: Shared<Box<[ContainerReadiness]>>,
    /// The pod's own: transition times differ from pod to pod.
    pub conditions: Box<[CachedCondition]>,
    pub pod_ip: Option<Box<str>>,
    pub phase: Option<Atom>,
    /// The elastic container instance the pod runs as (its system-set annotation
    /// `names::ECI_INSTANCE_ID_ANNOTATION`), the one annotation kept: a CLB backend of
    /// such a pod is that instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eci_instance_id: Option<Box<str>>,
}

/// What the pods of one workload carry alike and no editor of a cached pod changes, held
/// behind one pointer for the three.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FromWorkload {
    pub owner_references: Box<[OwnerReference]>,
    pub service_account_name: Option<Box<str>>,
    pub image_pull_secrets: Box<[Box<str>]>,
}

/// `OwnerReference` is plain strings and flags, so its `PartialEq` is an equivalence.
impl Eq for FromWorkload {}

/// By hand: `k8s_openapi`'s `OwnerReference` has no `Hash`.
impl Hash for FromWorkload {
    fn hash<H: Hasher>(&self, state: &mut H) {
        for owner in &self.owner_references {
            owner.api_version.hash(state);
            owner.kind.hash(state);
            owner.name.hash(state);
            owner.uid.hash(state);
            owner.controller.hash(state);
            owner.block_owner_deletion.hash(state);
        }
        self.service_account_name.hash(state);
        self.image_pull_secrets.hash(state);
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedContainer {
    pub name: Box<str>,
    pub image: Option<Box<str>>,
    pub ports: Box<[CachedPort]>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedPort {
    pub name: Option<Box<str>>,
    pub container_port: i32,
    pub protocol: Option<Text>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ContainerReadiness {
    pub name: Box<str>,
    pub ready: bool,
    /// `state.waiting.reason` (the failure rule of a rollout reads it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_reason: Option<Text>,
    #[serde(default)]
    pub restart_count: i32,
}

intern!(
    FromWorkload,
    Box<[CachedContainer]>,
    Box<[ContainerReadiness]>
);

/// A pod condition without `lastProbeTime` and `observedGeneration` (nothing reads them).
/// Its strings are [`Atom`]s: a handful of values across the fleet.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedCondition {
    #[serde(rename = "type")]
    pub type_: Atom,
    pub status: Atom,
    pub reason: Option<Atom>,
    pub message: Option<Atom>,
    pub last_transition_time: Option<Time>,
}

/// Whether some controller reads pod conditions of this type: `Ready` of a DaemonSet's
/// pod (the DaemonSet planners and triggers, which read no other pods),
/// `ContainersReady` (the gates, of any pod a Service selects), rollgate's own
/// `PodNeedUpgrade` and `PodImageReady`, and readiness gates (the pod's own, and any of
/// the gates' prefix, which the gates controller also reads on pods that no longer list
/// it). Nothing reads the others a kubelet writes (`PodScheduled`, `Initialized`,
/// `PodReadyToStartContainers`, `DisruptionTarget`...), nor `Ready` of a Deployment's
/// or a Job's pod: 56 bytes each per cached pod (issue 25: the owner index is paid for
/// with them; issue 46: a pod within 1.5 KiB).
fn condition_is_read(type_: &str, readiness_gates: &[Box<str>], of_daemonset: bool) -> bool {
    match type_ {
        "Ready" => of_daemonset,
        "ContainersReady" | POD_NEED_UPGRADE_CONDITION | POD_IMAGE_READY_CONDITION => true,
        _ => type_.starts_with(GATE_PREFIX) || readiness_gates.iter().any(|gate| &**gate == type_),
    }
}

/// Whether a DaemonSet owns the pod: any owner reference of that kind, controller or
/// not, so that `Ready` is kept of every pod a DaemonSet reader could look at.
fn owned_by_a_daemonset(owners: &[OwnerReference]) -> bool {
    owners.iter().any(|owner| owner.kind == "DaemonSet")
}

fn boxed(s: String) -> Box<str> {
    s.into_boxed_str()
}

/// The metadata every cached object keeps (see [`CachedPod`] for a pod's).
pub(crate) fn slim_meta(meta: ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        uid: meta.uid,
        resource_version: meta.resource_version,
        labels: meta.labels,
        owner_references: meta.owner_references,
        creation_timestamp: meta.creation_timestamp,
        deletion_timestamp: meta.deletion_timestamp,
        deletion_grace_period_seconds: meta.deletion_grace_period_seconds,
        ..Default::default()
    }
}

/// A cached pod's metadata: [`slim_meta`] without the owner references, which the pod
/// keeps apart (shared).
fn pod_meta(meta: ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        owner_references: None,
        ..slim_meta(meta)
    }
}

impl From<Pod> for CachedPod {
    fn from(mut pod: Pod) -> Self {
        let affinity_node = match pod.node_name() {
            Some(_) => None,
            None => pod.affinity_node().map(Atom::from),
        };
        let owners = pod.metadata.owner_references.take().unwrap_or_default();
        let of_daemonset = owned_by_a_daemonset(&owners);
        let spec = pod.spec.unwrap_or_default();
        let workload = Shared::new(FromWorkload {
            owner_references: owners.into_boxed_slice(),
            service_account_name: spec.service_account_name.map(boxed),
            image_pull_secrets: spec
                .image_pull_secrets
                .into_iter()
                .flatten()
                .map(|s| boxed(s.name))
                .collect(),
        });
        let status = pod.status.unwrap_or_default();
        let readiness_gates: Shared<Box<[Box<str>]>> = spec
            .readiness_gates
            .into_iter()
            .flatten()
            .map(|g| boxed(g.condition_type))
            .collect();
        let eci_instance_id =
            super::meta::annotation(&pod.metadata, crate::names::ECI_INSTANCE_ID_ANNOTATION)
                .filter(|id| !id.is_empty())
                .map(Box::from);
        CachedPod {
            eci_instance_id,
            metadata: pod_meta(pod.metadata),
            workload,
            node_name: spec.node_name.filter(|n| !n.is_empty()).map(Atom::from),
            affinity_node,
            containers: spec
                .containers
                .into_iter()
                .map(|c| CachedContainer {
                    name: boxed(c.name),
                    image: c.image.map(boxed),
                    ports: c
                        .ports
                        .into_iter()
                        .flatten()
                        .map(|p| CachedPort {
                            name: p.name.map(boxed),
                            container_port: p.container_port,
                            protocol: p.protocol.map(text),
                        })
                        .collect(),
                })
                .collect(),
            container_readiness: status
                .container_statuses
                .into_iter()
                .flatten()
                .map(|s| ContainerReadiness {
                    waiting_reason: s
                        .state
                        .and_then(|state| state.waiting)
                        .and_then(|waiting| waiting.reason)
                        .map(text),
                    restart_count: s.restart_count,
                    name: boxed(s.name),
                    ready: s.ready,
                })
                .collect(),
            conditions: status
                .conditions
                .into_iter()
                .flatten()
                .filter(|c| condition_is_read(&c.type_, &readiness_gates, of_daemonset))
                .map(|c| CachedCondition {
                    type_: c.type_.into(),
                    status: c.status.into(),
                    reason: c.reason.map(Atom::from),
                    message: c.message.map(Atom::from),
                    last_transition_time: c.last_transition_time,
                })
                .collect(),
            pod_ip: status.pod_ip.map(boxed),
            phase: status.phase.map(Atom::from),
            readiness_gates,
        }
    }
}

impl kube::Resource for CachedPod {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        <Pod as k8s_openapi::Resource>::KIND.into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        <Pod as k8s_openapi::Resource>::GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        <Pod as k8s_openapi::Resource>::VERSION.into()
    }
    fn api_version(_: &()) -> Cow<'_, str> {
        <Pod as k8s_openapi::Resource>::API_VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        <Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT.into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl PodFacts for CachedPod {
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn owner_references(&self) -> &[OwnerReference] {
        &self.workload.owner_references
    }
    fn node_name(&self) -> Option<&str> {
        self.node_name.as_ref().map(Atom::as_str)
    }
    fn affinity_node(&self) -> Option<&str> {
        self.affinity_node.as_ref().map(Atom::as_str)
    }
    fn service_account_name(&self) -> Option<&str> {
        self.workload.service_account_name.as_deref()
    }
    fn image_pull_secrets(&self) -> impl Iterator<Item = &str> {
        self.workload.image_pull_secrets.iter().map(|s| &**s)
    }
    fn readiness_gates(&self) -> impl Iterator<Item = &str> {
        self.readiness_gates.iter().map(|s| &**s)
    }
    fn container_ports(&self) -> impl Iterator<Item = PortView<'_>> {
        self.containers.iter().flat_map(|c| {
            c.ports.iter().map(move |p| PortView {
                container: &c.name,
                name: p.name.as_deref(),
                container_port: p.container_port,
                protocol: p.protocol.as_deref().unwrap_or("TCP"),
            })
        })
    }
    fn container_images(&self) -> impl Iterator<Item = (&str, Option<&str>)> {
        self.containers
            .iter()
            .map(|c| (&*c.name, c.image.as_deref()))
    }
    fn container_readiness(&self) -> impl Iterator<Item = (&str, bool)> {
        self.container_readiness.iter().map(|s| (&*s.name, s.ready))
    }
    fn container_states(&self) -> impl Iterator<Item = ContainerStateView<'_>> {
        self.container_readiness.iter().map(|s| ContainerStateView {
            name: &s.name,
            ready: s.ready,
            waiting_reason: s.waiting_reason.as_deref(),
            restart_count: s.restart_count,
        })
    }
    fn conditions(&self) -> impl Iterator<Item = ConditionView<'_>> {
        self.conditions.iter().map(|c| ConditionView {
            type_: c.type_.as_str(),
            status: c.status.as_str(),
            reason: c.reason.as_ref().map(Atom::as_str),
            message: c.message.as_ref().map(Atom::as_str),
            last_transition_time: c.last_transition_time.as_ref(),
        })
    }
    fn pod_ip(&self) -> Option<&str> {
        self.pod_ip.as_deref()
    }
    fn phase(&self) -> Option<&str> {
        self.phase.as_ref().map(Atom::as_str)
    }
}

impl PodFacts for Pod {
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn owner_references(&self) -> &[OwnerReference] {
        self.metadata
            .owner_references
            .as_deref()
            .unwrap_or_default()
    }
    fn node_name(&self) -> Option<&str> {
        self.spec
            .as_ref()?
            .node_name
            .as_deref()
            .filter(|n| !n.is_empty())
    }
    fn affinity_node(&self) -> Option<&str> {
        let terms = &self
            .spec
            .as_ref()?
            .affinity
            .as_ref()?
            .node_affinity
            .as_ref()?
            .required_during_scheduling_ignored_during_execution
            .as_ref()?
            .node_selector_terms;
        let mut targeted = terms
            .iter()
            .flat_map(|term| term.match_fields.iter().flatten())
            .filter(|r| r.key == "metadata.name" && r.operator == "In")
            .filter_map(|r| match r.values.as_deref() {
                Some([single]) => Some(single.as_str()),
                _ => None,
            });
        let node = targeted.next()?;
        targeted.all(|other| other == node).then_some(node)
    }
    fn service_account_name(&self) -> Option<&str> {
        self.spec.as_ref()?.service_account_name.as_deref()
    }
    fn image_pull_secrets(&self) -> impl Iterator<Item = &str> {
        self.spec
            .iter()
            .flat_map(|s| s.image_pull_secrets.iter().flatten())
            .map(|s| s.name.as_str())
    }
    fn readiness_gates(&self) -> impl Iterator<Item = &str> {
        self.spec
            .iter()
            .flat_map(|s| s.readiness_gates.iter().flatten())
            .map(|g| g.condition_type.as_str())
    }
    fn container_ports(&self) -> impl Iterator<Item = PortView<'_>> {
        self.spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .flat_map(|c| {
                c.ports.iter().flatten().map(move |p| PortView {
                    container: &c.name,
                    name: p.name.as_deref(),
                    container_port: p.container_port,
                    protocol: p.protocol.as_deref().unwrap_or("TCP"),
                })
            })
    }
    fn container_images(&self) -> impl Iterator<Item = (&str, Option<&str>)> {
        self.spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .map(|c| (c.name.as_str(), c.image.as_deref()))
    }
    fn container_readiness(&self) -> impl Iterator<Item = (&str, bool)> {
        self.status
            .iter()
            .flat_map(|s| s.container_statuses.iter().flatten())
            .map(|s| (s.name.as_str(), s.ready))
    }
    fn container_states(&self) -> impl Iterator<Item = ContainerStateView<'_>> {
        self.status
            .iter()
            .flat_map(|s| s.container_statuses.iter().flatten())
            .map(|s| ContainerStateView {
                name: &s.name,
                ready: s.ready,
                waiting_reason: s
                    .state
                    .as_ref()
                    .and_then(|state| state.waiting.as_ref())
                    .and_then(|waiting| waiting.reason.as_deref()),
                restart_count: s.restart_count,
            })
    }
    fn conditions(&self) -> impl Iterator<Item = ConditionView<'_>> {
        self.status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .map(|c| ConditionView {
                type_: &c.type_,
                status: &c.status,
                reason: c.reason.as_deref(),
                message: c.message.as_deref(),
                last_transition_time: c.last_transition_time.as_ref(),
            })
    }
    fn pod_ip(&self) -> Option<&str> {
        self.status.as_ref()?.pod_ip.as_deref()
    }
    fn phase(&self) -> Option<&str> {
        self.status.as_ref()?.phase.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn kubelet_pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "web-1", "namespace": "shop", "uid": "u1", "resourceVersion": "7",
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "deletionTimestamp": "2026-01-01T00:10:00Z", "deletionGracePeriodSeconds": 30,
                "labels": {"app": "web", "pod-template-hash": "abc"},
                "annotations": {"big": "x".repeat(2000)},
                "finalizers": ["example.com/keep"],
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc", "uid": "rs", "controller": true}],
                "managedFields": [{"manager": "kubelet", "operation": "Update"}]
            },
            "spec": {
                "nodeName": "n1",
                "serviceAccountName": "web",
                "imagePullSecrets": [{"name": "regcred"}],
                "containers": [
                    {"name": "app", "image": "nginx:1", "ports": [{"name": "http", "containerPort": 80}, {"containerPort": 53, "protocol": "UDP"}],
                     "env": [{"name": "A", "value": "b"}], "volumeMounts": [{"name": "v", "mountPath": "/v"}]},
                    {"name": "sidecar", "image": "envoy:2"}
                ],
                "volumes": [{"name": "v", "emptyDir": {}}],
                "tolerations": [{"operator": "Exists"}],
                "readinessGates": [{"conditionType": "service.readiness.alibabacloud.com/web"}]
            },
            "status": {
                "phase": "Running", "podIP": "10.0.0.1",
                "conditions": [
                    {"type": "Ready", "status": "False", "reason": "ReadinessGatesNotReady", "message": "gate not ready", "lastTransitionTime": "2026-01-01T00:00:00Z", "lastProbeTime": null},
                    {"type": "service.readiness.alibabacloud.com/web", "status": "False", "reason": "BackendNotHealthy"}
                ],
                "containerStatuses": [
                    {"name": "app", "ready": true, "restartCount": 0, "image": "nginx:1", "imageID": "x"},
                    {"name": "sidecar", "ready": false, "restartCount": 3, "image": "envoy:2", "imageID": "y",
                     "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
                     "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}}
                ]
            }
        }))
        .unwrap()
    }

    /// Every fact read through `PodFacts`, as plain data, to compare the two types.
    fn facts(p: &impl PodFacts) -> serde_json::Value {
        let conditions: Vec<_> = p
            .conditions()
            .map(|c| {
                (
                    c.type_,
                    c.status,
                    c.reason,
                    c.message,
                    c.last_transition_time.map(|t| t.0.to_string()),
                )
            })
            .collect();
        let ports: Vec<_> = p
            .container_ports()
            .map(|p| (p.container, p.name, p.container_port, p.protocol))
            .collect();
        serde_json::json!({
            "meta": p.metadata(),
            "owners": p.owner_references(),
            "controller": p.controller_uid(),
            "node": p.node_name(), "affinity_node": p.affinity_node(),
            "account": p.service_account_name(),
            "secrets": p.image_pull_secrets().collect::<Vec<_>>(),
            "gates": p.readiness_gates().collect::<Vec<_>>(),
            "ports": ports,
            "images": p.container_images().collect::<Vec<_>>(),
            "ready": p.container_readiness().collect::<Vec<_>>(),
            "states": p.container_states().map(|c| (c.name, c.ready, c.waiting_reason, c.restart_count)).collect::<Vec<_>>(),
            "conditions": conditions,
            "ip": p.pod_ip(), "phase": p.phase(),
        })
    }

    /// `kubelet_pod` as a DaemonSet's: every condition it carries is one a reader asks for.
    fn daemonset_kubelet_pod() -> Pod {
        let mut pod = kubelet_pod();
        let owner = &mut pod.metadata.owner_references.as_mut().unwrap()[0];
        owner.kind = "DaemonSet".into();
        owner.name = "web".into();
        pod
    }

    #[test]
    fn a_cached_pod_answers_every_fact_as_the_full_pod_does() {
        let full = daemonset_kubelet_pod();
        let cached = CachedPod::from(full.clone());
        let mut expected = facts(&full);
        // The metadata the cache drops on purpose.
        expected["meta"] = serde_json::to_value(pod_meta(full.metadata.clone())).unwrap();
        assert_eq!(facts(&cached), expected);
        assert_eq!(cached.pod_name(), "web-1");
        assert_eq!(cached.label("app"), Some("web"));
        assert!(cached.is_terminating());
        assert_eq!(cached.metadata.deletion_grace_period_seconds, Some(30));
        assert!(cached.metadata.annotations.is_none());
        assert!(cached.metadata.managed_fields.is_none());
        assert!(cached.metadata.finalizers.is_none());
        // Kept apart, shared: read through `PodFacts`, never `metadata`.
        assert!(cached.metadata.owner_references.is_none());
        assert_eq!(cached.controller_uid(), Some("rs"));
        assert!(is_controlled_by(&cached, "rs"));
        assert_eq!(
            cached.container_ports().nth(1).map(|p| p.protocol),
            Some("UDP")
        );
        assert_eq!(
            cached.container_ports().next().map(|p| p.protocol),
            Some("TCP")
        );
    }

    /// The conditions a kubelet writes that nobody reads are not kept; every type a
    /// controller reads is, with the pod's own readiness gates. `Ready` is read only of
    /// a DaemonSet's pods.
    #[test]
    fn only_conditions_some_reader_asks_for_are_kept() {
        let mut full = daemonset_kubelet_pod();
        let spec = full.spec.as_mut().unwrap();
        spec.readiness_gates.get_or_insert_default().push(
            k8s_openapi::api::core::v1::PodReadinessGate {
                condition_type: "example.com/own-gate".into(),
            },
        );
        let conditions = full
            .status
            .as_mut()
            .and_then(|s| s.conditions.as_mut())
            .unwrap();
        for type_ in [
            "PodScheduled",
            "Initialized",
            "PodReadyToStartContainers",
            "ContainersReady",
            POD_NEED_UPGRADE_CONDITION,
            POD_IMAGE_READY_CONDITION,
            "example.com/own-gate",
            "example.com/not-a-gate",
            "service.readiness.alibabacloud.com/gone",
        ] {
            conditions.push(PodCondition {
                type_: type_.into(),
                status: "True".into(),
                ..Default::default()
            });
        }
        let mut of_replica_set = full.clone();
        of_replica_set.metadata.owner_references.as_mut().unwrap()[0].kind = "ReplicaSet".into();
        let kept_types = |pod: Pod| -> Vec<String> {
            let cached = CachedPod::from(pod);
            cached.conditions().map(|c| c.type_.to_string()).collect()
        };
        let read_of_any_pod = [
            "service.readiness.alibabacloud.com/web",
            "ContainersReady",
            POD_NEED_UPGRADE_CONDITION,
            POD_IMAGE_READY_CONDITION,
            "example.com/own-gate",
            "service.readiness.alibabacloud.com/gone",
        ];
        assert_eq!(
            kept_types(full),
            [&["Ready"][..], &read_of_any_pod].concat()
        );
        assert_eq!(kept_types(of_replica_set), read_of_any_pod);
    }

    /// Two pods of one workload on one node share everything but their own name, UID,
    /// IP and condition times.
    #[test]
    fn what_pods_have_in_common_is_kept_once() {
        let first = CachedPod::from(kubelet_pod());
        let mut other = kubelet_pod();
        other.metadata.name = Some("web-2".into());
        other.metadata.uid = Some("u2".into());
        other.status.as_mut().unwrap().pod_ip = Some("10.0.0.2".into());
        let second = CachedPod::from(other);
        assert!(Shared::ptr_eq(&first.workload, &second.workload));
        assert!(Shared::ptr_eq(&first.containers, &second.containers));
        assert!(Shared::ptr_eq(
            &first.container_readiness,
            &second.container_readiness
        ));
        assert!(Shared::ptr_eq(
            &first.readiness_gates,
            &second.readiness_gates
        ));
        let same = |a: &Option<Atom>, b: &Option<Atom>| match (a, b) {
            (Some(a), Some(b)) => Shared::ptr_eq(a, b),
            _ => false,
        };
        assert!(same(&first.node_name, &second.node_name));
        assert!(same(&first.phase, &second.phase));
        let gate = (&first.conditions[0], &second.conditions[0]);
        assert!(Shared::ptr_eq(&gate.0.type_, &gate.1.type_));
        assert!(same(&gate.0.reason, &gate.1.reason));
        assert_eq!(second.pod_name(), "web-2");
        assert_eq!(second.pod_ip(), Some("10.0.0.2"));
    }

    /// A pod edited in place (tests, simulations) gets a copy of its own: the other pods
    /// sharing the value do not change.
    #[test]
    fn editing_a_shared_field_leaves_the_other_pods_alone() {
        let first = CachedPod::from(kubelet_pod());
        let mut second = first.clone();
        second.containers[0].ports[0].container_port = 8080;
        assert_eq!(first.container_ports().next().unwrap().container_port, 80);
        assert_eq!(
            second.container_ports().next().unwrap().container_port,
            8080
        );
    }

    #[test]
    fn a_pending_daemonset_pod_keeps_the_node_it_is_meant_for() {
        use crate::testkit::{DaemonSetBuilder, PodBuilder};
        let ds = DaemonSetBuilder::new("agent").build();
        let pending = PodBuilder::new("q", &ds).pending_for_node("edge-2").build();
        let cached = CachedPod::from(pending);
        assert_eq!(cached.node_or_affinity_node(), Some("edge-2"));
        assert_eq!(cached.node_name(), None);
        let bound = CachedPod::from(PodBuilder::new("p", &ds).on_node("edge-1").build());
        assert_eq!(bound.node_or_affinity_node(), Some("edge-1"));
        assert_eq!(bound.affinity_node, None);
    }

    #[test]
    fn controller_owner_decides_membership() {
        use crate::testkit::{DaemonSetBuilder, PodBuilder};
        let ds = DaemonSetBuilder::new("agent").build();
        let ds_uid = ds.metadata.uid.as_deref().unwrap();
        let mine = PodBuilder::new("p", &ds).build();
        let theirs = PodBuilder::new("q", &ds)
            .owned_by_uid("someone-else")
            .build();
        let mut non_controller = PodBuilder::new("r", &ds).build();
        non_controller.metadata.owner_references.as_mut().unwrap()[0].controller = None;
        assert!(is_controlled_by(&mine, ds_uid));
        assert!(!is_controlled_by(&theirs, ds_uid));
        assert!(!is_controlled_by(&non_controller, ds_uid));
    }

    #[test]
    fn node_from_node_name_or_pending_affinity() {
        use crate::testkit::{DaemonSetBuilder, PodBuilder};
        let ds = DaemonSetBuilder::new("agent").build();
        let bound = PodBuilder::new("p", &ds).on_node("edge-1").build();
        let pending = PodBuilder::new("q", &ds).pending_for_node("edge-2").build();
        let nowhere = PodBuilder::new("r", &ds).build();
        assert_eq!(bound.node_or_affinity_node(), Some("edge-1"));
        assert_eq!(pending.node_or_affinity_node(), Some("edge-2"));
        assert_eq!(nowhere.node_or_affinity_node(), None);
    }

    #[test]
    fn a_cached_pod_is_a_fraction_of_a_pod() {
        let inline = std::mem::size_of::<CachedPod>();
        assert!(
            inline * 3 < std::mem::size_of::<Pod>(),
            "CachedPod is {inline} bytes inline"
        );
    }
}
