//! Builders for the Kubernetes objects the planners read: DaemonSets, their pods,
//! ControllerRevisions, nodes and Services (tests only). On the floor, so tests of every layer use it.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    ControllerRevision, DaemonSet, DaemonSetSpec, DaemonSetStatus, DaemonSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeCondition, NodeSelector, NodeSelectorRequirement,
    NodeSelectorTerm, NodeStatus, Pod, PodCondition, PodSpec, PodStatus, Service, ServiceSpec,
    Taint, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;

use crate::names::{
    CONTROLLER_REVISION_HASH_LABEL, MAX_UNAVAILABLE_ANNOTATION, NODE_SELECTOR_ANNOTATION,
    PARTITION_ANNOTATION, PAUSED_ANNOTATION, POD_TEMPLATE_GENERATION_LABEL,
    TEMPLATE_GENERATION_ANNOTATION, UPDATE_STRATEGY_ANNOTATION,
};

pub const NAMESPACE: &str = "edge";

/// A reflector store holding `objects`, for tests of code that reads the shared stores.
pub fn store_of<K>(objects: impl IntoIterator<Item = K>) -> kube::runtime::reflector::Store<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    use kube::runtime::{reflector, watcher};
    let (store, mut writer) = reflector::store();
    for object in objects {
        writer.apply_watcher_event(&watcher::Event::Apply(object));
    }
    store
}

/// A timestamp `seconds` after the epoch, to keep test clocks readable.
pub fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(seconds).expect("valid test timestamp")
}

fn controller_ref(kind: &str, name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".into(),
        kind: kind.into(),
        name: name.into(),
        uid: uid.into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

pub struct DaemonSetBuilder {
    daemonset: DaemonSet,
}

impl DaemonSetBuilder {
    pub fn new(name: &str) -> Self {
        let daemonset = DaemonSet {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(NAMESPACE.into()),
                uid: Some(format!("uid-ds-{name}")),
                ..Default::default()
            },
            spec: DaemonSetSpec::default(),
            status: None,
        };
        Self { daemonset }
    }

    fn annotate(mut self, key: &str, value: &str) -> Self {
        self.daemonset
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        self
    }

    fn spec(&mut self) -> &mut DaemonSetSpec {
        &mut self.daemonset.spec
    }

    pub fn strategy(self, value: &str) -> Self {
        self.annotate(UPDATE_STRATEGY_ANNOTATION, value)
    }

    pub fn max_unavailable(self, value: &str) -> Self {
        self.annotate(MAX_UNAVAILABLE_ANNOTATION, value)
    }

    pub fn paused(self, value: &str) -> Self {
        self.annotate(PAUSED_ANNOTATION, value)
    }

    pub fn partition(self, value: &str) -> Self {
        self.annotate(PARTITION_ANNOTATION, value)
    }

    pub fn node_selector(self, value: &str) -> Self {
        self.annotate(NODE_SELECTOR_ANNOTATION, value)
    }

    pub fn pull_ahead(self, value: &str) -> Self {
        self.annotate(crate::names::PULL_AHEAD_ANNOTATION, value)
    }

    pub fn failure_threshold(self, value: &str) -> Self {
        self.annotate(crate::names::FAILURE_THRESHOLD_ANNOTATION, value)
    }

    pub fn on_failure(self, value: &str) -> Self {
        self.annotate(crate::names::ON_FAILURE_ANNOTATION, value)
    }

    pub fn waves(self, value: &str) -> Self {
        self.annotate(crate::names::WAVES_ANNOTATION, value)
    }

    pub fn wave_bake(self, value: &str) -> Self {
        self.annotate(crate::names::WAVE_BAKE_ANNOTATION, value)
    }

    pub fn rolled_back_from(self, value: &str) -> Self {
        self.annotate(crate::names::ROLLED_BACK_FROM_ANNOTATION, value)
    }

    pub fn progress_deadline(self, value: &str) -> Self {
        self.annotate(crate::names::PROGRESS_DEADLINE_ANNOTATION, value)
    }

    pub fn template_generation(self, generation: i64) -> Self {
        self.annotate(TEMPLATE_GENERATION_ANNOTATION, &generation.to_string())
    }

    pub fn update_strategy_type(mut self, type_: &str) -> Self {
        self.spec().update_strategy = Some(DaemonSetUpdateStrategy {
            type_: Some(type_.into()),
            rolling_update: None,
        });
        self
    }

    pub fn on_delete(self) -> Self {
        self.update_strategy_type("OnDelete")
    }

    pub fn min_ready_seconds(mut self, seconds: i32) -> Self {
        self.spec().min_ready_seconds = Some(seconds);
        self
    }

    /// `tolerations: [{operator: Exists}]`, as edge DaemonSets (CNI, proxies, agents) carry.
    pub fn tolerate_everything(mut self) -> Self {
        self.spec()
            .template
            .spec
            .get_or_insert_with(Default::default)
            .tolerations = Some(vec![Toleration {
            operator: Some("Exists".into()),
            ..Default::default()
        }]);
        self
    }

    /// Sets `metadata.generation`, and `status.observedGeneration` to `observed`.
    pub fn generations(mut self, generation: i64, observed: i64) -> Self {
        self.daemonset.metadata.generation = Some(generation);
        self.daemonset.status = Some(DaemonSetStatus {
            observed_generation: Some(observed),
            ..Default::default()
        });
        self
    }

    pub fn build(self) -> DaemonSet {
        self.daemonset
    }
}

/// A ControllerRevision owned by `daemonset`, carrying `hash` as its hash label.
pub fn revision(daemonset: &DaemonSet, hash: &str, number: i64) -> ControllerRevision {
    let ds_name = daemonset.metadata.name.clone().unwrap_or_default();
    let ds_uid = daemonset.metadata.uid.clone().unwrap_or_default();
    ControllerRevision {
        metadata: ObjectMeta {
            name: Some(format!("{ds_name}-{hash}")),
            namespace: daemonset.metadata.namespace.clone(),
            labels: Some(BTreeMap::from([(
                CONTROLLER_REVISION_HASH_LABEL.to_string(),
                hash.to_string(),
            )])),
            owner_references: Some(vec![controller_ref("DaemonSet", &ds_name, &ds_uid)]),
            ..Default::default()
        },
        revision: Some(number),
        data: Default::default(),
    }
}

pub struct PodBuilder {
    pod: Pod,
}

impl PodBuilder {
    /// A running pod owned by `daemonset`; not Ready until `ready_since` is called.
    pub fn new(name: &str, daemonset: &DaemonSet) -> Self {
        let ds_name = daemonset.metadata.name.clone().unwrap_or_default();
        let ds_uid = daemonset.metadata.uid.clone().unwrap_or_default();
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(NAMESPACE.into()),
                uid: Some(format!("uid-{name}")),
                owner_references: Some(vec![controller_ref("DaemonSet", &ds_name, &ds_uid)]),
                ..Default::default()
            },
            spec: Some(PodSpec::default()),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                ..Default::default()
            }),
        };
        Self { pod }
    }

    fn label(mut self, key: &str, value: &str) -> Self {
        self.pod
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        self
    }

    fn spec(&mut self) -> &mut PodSpec {
        self.pod.spec.get_or_insert_with(Default::default)
    }

    pub fn hash(self, hash: &str) -> Self {
        self.label(CONTROLLER_REVISION_HASH_LABEL, hash)
    }

    pub fn generation(self, generation: i64) -> Self {
        self.label(POD_TEMPLATE_GENERATION_LABEL, &generation.to_string())
    }

    pub fn on_node(mut self, node: &str) -> Self {
        self.spec().node_name = Some(node.into());
        self
    }

    /// Places the pod the way the DaemonSet controller does before scheduling: a
    /// required node-affinity `matchFields` term on `metadata.name`, no `nodeName`.
    pub fn pending_for_node(mut self, node: &str) -> Self {
        self.spec().node_name = None;
        self.spec().affinity = Some(Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: None,
                        match_fields: Some(vec![NodeSelectorRequirement {
                            key: "metadata.name".into(),
                            operator: "In".into(),
                            values: Some(vec![node.into()]),
                        }]),
                    }],
                }),
                preferred_during_scheduling_ignored_during_execution: None,
            }),
            ..Default::default()
        });
        self.pod.status.get_or_insert_with(Default::default).phase = Some("Pending".into());
        self
    }

    pub fn ready_since(mut self, since: Timestamp) -> Self {
        self.set_ready("True", Some(since));
        self
    }

    pub fn not_ready(mut self) -> Self {
        self.set_ready("False", None);
        self
    }

    fn set_ready(&mut self, status: &str, since: Option<Timestamp>) {
        self.condition(PodCondition {
            type_: "Ready".into(),
            status: status.into(),
            last_transition_time: since.map(Time),
            ..Default::default()
        });
    }

    pub fn with_condition(mut self, condition: PodCondition) -> Self {
        self.condition(condition);
        self
    }

    fn condition(&mut self, condition: PodCondition) {
        let conditions = self
            .pod
            .status
            .get_or_insert_with(Default::default)
            .conditions
            .get_or_insert_with(Vec::new);
        conditions.retain(|c| c.type_ != condition.type_);
        conditions.push(condition);
    }

    /// One container status, as the kubelet reports it: `waiting` its waiting reason
    /// (none: running), `restarts` its restart count.
    pub fn container(
        mut self,
        name: &str,
        ready: bool,
        waiting: Option<&str>,
        restarts: i32,
    ) -> Self {
        use k8s_openapi::api::core::v1::{
            ContainerState, ContainerStateRunning, ContainerStateWaiting, ContainerStatus,
        };
        let state = match waiting {
            Some(reason) => ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(reason.into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            None => ContainerState {
                running: Some(ContainerStateRunning::default()),
                ..Default::default()
            },
        };
        let statuses = self
            .pod
            .status
            .get_or_insert_with(Default::default)
            .container_statuses
            .get_or_insert_with(Vec::new);
        statuses.retain(|s| s.name != name);
        statuses.push(ContainerStatus {
            name: name.into(),
            ready,
            restart_count: restarts,
            state: Some(state),
            ..Default::default()
        });
        self
    }

    pub fn created_at(mut self, at: Timestamp) -> Self {
        self.pod.metadata.creation_timestamp = Some(Time(at));
        self
    }

    pub fn terminating(mut self, since: Timestamp) -> Self {
        self.pod.metadata.deletion_timestamp = Some(Time(since));
        self
    }

    pub fn owned_by_uid(mut self, uid: &str) -> Self {
        self.pod.metadata.owner_references = Some(vec![controller_ref("DaemonSet", "other", uid)]);
        self
    }

    pub fn build(self) -> Pod {
        self.pod
    }
}

/// `node` with one more taint.
pub fn tainted(mut node: Node, taint: Taint) -> Node {
    node.spec
        .get_or_insert_with(Default::default)
        .taints
        .get_or_insert_with(Vec::new)
        .push(taint);
    node
}

/// A Node whose Ready condition is True when `ready`, else Unknown (cut off).
pub fn node(name: &str, ready: bool) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: None,
        status: Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "Unknown" }.into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

/// A Ready Node `name` with `labels`.
pub fn labelled_node(name: &str, labels: &[(&str, &str)]) -> Node {
    let mut n = node(name, true);
    n.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    n
}

/// A Service `namespace/name` of `type_` (`LoadBalancer`, `ClusterIP`) with
/// `annotations`, without ports or a class: a test sets what it is about.
pub fn service(namespace: &str, name: &str, type_: &str, annotations: &[(&str, &str)]) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some(type_.into()),
            ..Default::default()
        }),
        status: None,
    }
}
