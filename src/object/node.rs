//! The node as the shared cache keeps it: [`CachedNode`] (name, labels, taints and the
//! Ready condition), and [`NodeFacts`], what planners read of a node, for both the
//! cached and the full API object. A `k8s_openapi` `Node` is 1.5 kB inline before its
//! images, addresses and conditions; the planners read four fields of it.
use std::borrow::Cow;

use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::ClusterResourceScope;
use serde::{Deserialize, Serialize};

use super::meta::label;
use super::pod::{slim_meta, text, Text};

/// What planners read of a node.
pub trait NodeFacts {
    fn metadata(&self) -> &ObjectMeta;
    fn taints(&self) -> &[Taint];
    /// The `Ready` condition's status and last transition, if the node reports one.
    fn ready_condition(&self) -> Option<(&str, Option<&Time>)>;

    fn name(&self) -> &str {
        self.metadata().name.as_deref().unwrap_or_default()
    }
    fn label(&self, key: &str) -> Option<&str> {
        label(self.metadata(), key)
    }
    /// Ready means the `Ready` condition has status `True`.
    fn is_ready(&self) -> bool {
        self.ready_condition()
            .is_some_and(|(status, _)| status == "True")
    }
}

/// A node as the shared cache keeps it. Build one with `CachedNode::from(node)`.
/// A `kube::Resource` of kind Node; its serde form is its own, not a v1 Node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedNode {
    pub metadata: ObjectMeta,
    pub taints: Box<[Taint]>,
    pub ready: Option<NodeReady>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeReady {
    pub status: Text,
    pub last_transition_time: Option<Time>,
}

impl From<Node> for CachedNode {
    fn from(node: Node) -> Self {
        let ready = node
            .status
            .and_then(|s| s.conditions)
            .and_then(|cs| cs.into_iter().find(|c| c.type_ == "Ready"))
            .map(|c| NodeReady {
                status: text(c.status),
                last_transition_time: c.last_transition_time,
            });
        CachedNode {
            metadata: slim_meta(node.metadata),
            taints: node
                .spec
                .and_then(|s| s.taints)
                .unwrap_or_default()
                .into_boxed_slice(),
            ready,
        }
    }
}

impl kube::Resource for CachedNode {
    type DynamicType = ();
    type Scope = ClusterResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        <Node as k8s_openapi::Resource>::KIND.into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        <Node as k8s_openapi::Resource>::GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        <Node as k8s_openapi::Resource>::VERSION.into()
    }
    fn api_version(_: &()) -> Cow<'_, str> {
        <Node as k8s_openapi::Resource>::API_VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        <Node as k8s_openapi::Resource>::URL_PATH_SEGMENT.into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl NodeFacts for CachedNode {
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn taints(&self) -> &[Taint] {
        &self.taints
    }
    fn ready_condition(&self) -> Option<(&str, Option<&Time>)> {
        self.ready
            .as_ref()
            .map(|r| (&*r.status, r.last_transition_time.as_ref()))
    }
}

impl NodeFacts for Node {
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn taints(&self) -> &[Taint] {
        self.spec
            .as_ref()
            .and_then(|s| s.taints.as_deref())
            .unwrap_or_default()
    }
    fn ready_condition(&self) -> Option<(&str, Option<&Time>)> {
        self.status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| (c.status.as_str(), c.last_transition_time.as_ref()))
    }
}

/// Planners take nodes from the store (`Arc`) or borrowed; both read through.
macro_rules! forward_node_facts {
    ($($wrapper:ty),*) => {$(
        impl<T: NodeFacts> NodeFacts for $wrapper {
            fn metadata(&self) -> &ObjectMeta {
                (**self).metadata()
            }
            fn taints(&self) -> &[Taint] {
                (**self).taints()
            }
            fn ready_condition(&self) -> Option<(&str, Option<&Time>)> {
                (**self).ready_condition()
            }
        }
    )*};
}
forward_node_facts!(std::sync::Arc<T>, &T);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_node_keeps_labels_taints_and_ready_only() {
        let full: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "labels": {"pool": "edge"}, "annotations": {"a": "b"}},
            "spec": {"podCIDR": "10.0.0.0/24", "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {
                "conditions": [
                    {"type": "MemoryPressure", "status": "False"},
                    {"type": "Ready", "status": "True", "message": "kubelet is posting ready status",
                     "lastTransitionTime": "2026-01-01T00:00:00Z"}
                ],
                "images": [{"names": ["nginx"], "sizeBytes": 1}],
                "capacity": {"cpu": "4"}
            }
        }))
        .unwrap();
        let cached = CachedNode::from(full.clone());
        assert_eq!(cached.label("pool"), Some("edge"));
        assert_eq!(cached.name(), "n1");
        assert!(cached.metadata.annotations.is_none());
        assert_eq!(cached.taints(), full.taints());
        assert_eq!(cached.ready_condition(), full.ready_condition());
        assert!(cached.is_ready() && full.is_ready());
        assert!(matches!(
            cached.ready.as_ref().unwrap().status,
            Cow::Borrowed("True")
        ));
        assert!(std::mem::size_of::<CachedNode>() * 2 < std::mem::size_of::<Node>());
    }
}
