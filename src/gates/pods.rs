//! Observe, pod side: which Services a pod concerns (its gates, the selectors that
//! match it), and the plan's view of a pod. The only place that reads the cached pod
//! type, so a change of that type touches this file alone.
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

use super::plan::{
    gate_condition_type, service_of_gate, Deletion, GateCondition, GatePod, PodPort,
};
use super::service::{selector, selects};
use crate::object::{pod_condition, pod_condition_is_true};

/// The Services named by the pod's readiness gates.
pub fn gated_services(pod: &Pod) -> impl Iterator<Item = &str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_deref())
        .unwrap_or_default()
        .iter()
        .filter_map(|g| service_of_gate(&g.condition_type))
}

/// Whether the pod carries a gate for `service`.
pub fn has_gate(pod: &Pod, service: &str) -> bool {
    gated_services(pod).any(|s| s == service)
}

fn labels(pod: &Pod) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    pod.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

/// Whether `service` selects the pod (same namespace, every selector label matches).
pub fn selected_by(pod: &Pod, service: &Service) -> bool {
    pod.namespace() == service.namespace() && selects(selector(service), labels(pod))
}

/// The plan's view of `pod` for `service`.
pub fn gate_pod(pod: &Pod, service_name: &str, selected: bool) -> GatePod {
    let status = pod.status.as_ref();
    let condition_type = gate_condition_type(service_name);
    GatePod {
        name: pod.name_any(),
        uid: pod.uid().unwrap_or_default(),
        ip: status
            .and_then(|s| s.pod_ip.clone())
            .filter(|ip| !ip.is_empty()),
        selected,
        gated: has_gate(pod, service_name),
        containers_ready: pod_condition_is_true(pod, "ContainersReady"),
        deletion: deletion(pod),
        ports: pod
            .spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .flat_map(|c| c.ports.iter().flatten())
            .filter_map(|p| {
                Some(PodPort {
                    name: p.name.clone(),
                    container_port: u16::try_from(p.container_port).ok()?,
                    protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                })
            })
            .collect(),
        gate: pod_condition(pod, &condition_type).map(|c| GateCondition {
            status: c.status == "True",
            reason: c.reason.clone().unwrap_or_default(),
            message: c.message.clone().unwrap_or_default(),
        }),
    }
}

/// `deletionTimestamp` is the moment the pod is killed at the latest; the request came
/// `deletionGracePeriodSeconds` before it.
fn deletion(pod: &Pod) -> Option<Deletion> {
    let deadline = pod.metadata.deletion_timestamp.as_ref()?.0;
    let grace = pod
        .metadata
        .deletion_grace_period_seconds
        .unwrap_or(0)
        .max(0);
    Some(Deletion {
        requested_at: deadline
            .checked_sub(SignedDuration::from_secs(grace))
            .unwrap_or(Timestamp::MIN),
        deadline,
    })
}

/// When the pod's containers turned ready (for the flip latency histogram).
pub fn containers_ready_since(pod: &Pod) -> Option<Timestamp> {
    pod_condition(pod, "ContainersReady")
        .filter(|c| c.status == "True")
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0)
}
