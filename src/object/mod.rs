//! Kubernetes objects as rollgate reads them, one way everywhere: labels, annotations
//! and owners of any object ([`meta`]), and the slim pods and nodes the shared cache
//! keeps ([`pod`], [`node`]) with the facts every planner reads of them ([`PodFacts`],
//! [`NodeFacts`]), with what pods have in common kept once per process ([`shared`]).
//!
//! On the floor of the crate: it imports only [`crate::names`], so the shared watches
//! and every capability read objects the same way.
pub mod meta;
pub mod node;
pub mod pod;
pub mod shared;

pub use meta::{annotation, controller_of, controller_uid, label};
pub use node::{CachedNode, NodeFacts};
pub use pod::{
    is_controlled_by, pod_condition, CachedPod, ConditionView, ContainerStateView, PodFacts,
    PortView,
};
