//! Observe, pod side: which Services a pod concerns (its gates, the selectors that
//! match it), the pods a Service's reconcile looks at, and the plan's view of a pod. Reads pods through `PodFacts`, so the
//! shared store's slim `CachedPod` and a full API `Pod` give the same answers.
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::runtime::reflector::Store;
use kube::ResourceExt;

use super::model::{
    gate_condition_type, service_of_gate, Deletion, GateCondition, GatePod, PodPort,
};
use super::service::{selector, selects, ServiceSnapshot};
use crate::object::{CachedPod, PodFacts};

/// The Services named by the pod's readiness gates.
pub fn gated_services(pod: &impl PodFacts) -> impl Iterator<Item = &str> {
    pod.readiness_gates().filter_map(service_of_gate)
}

/// Whether the pod carries a gate for `service`.
pub fn has_gate(pod: &impl PodFacts, service: &str) -> bool {
    gated_services(pod).any(|s| s == service)
}

fn labels(pod: &impl PodFacts) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    pod.metadata().labels.as_ref().unwrap_or(&EMPTY)
}

/// Whether `service` selects the pod (same namespace, every selector label matches).
pub fn selected_by(pod: &impl PodFacts, service: &Service) -> bool {
    service.namespace().as_deref() == Some(pod.pod_namespace())
        && selects(selector(service), labels(pod))
}

/// The pods a reconcile of `service` looks at: selected by it, or gated on it.
pub fn service_pods(
    pods: &Store<CachedPod>,
    service: &ServiceSnapshot,
) -> Vec<(Arc<CachedPod>, GatePod)> {
    let facts = &service.facts;
    pods.state()
        .into_iter()
        .filter(|p| p.pod_namespace() == facts.namespace)
        .filter_map(|p| {
            let selected = selects(service.selector.as_ref(), labels(&*p));
            (selected || has_gate(&*p, &facts.name)).then(|| {
                let view = gate_pod(&*p, &facts.name, selected);
                (p, view)
            })
        })
        .collect()
}

/// The plan's view of `pod` for `service`.
pub fn gate_pod(pod: &impl PodFacts, service_name: &str, selected: bool) -> GatePod {
    let condition_type = gate_condition_type(service_name);
    GatePod {
        name: pod.pod_name().to_string(),
        uid: pod.pod_uid().to_string(),
        ip: pod.pod_ip().filter(|ip| !ip.is_empty()).map(str::to_string),
        selected,
        gated: has_gate(pod, service_name),
        containers_ready: pod.condition_is_true("ContainersReady"),
        containers_ready_since: containers_ready_since(pod),
        deletion: deletion(pod),
        ports: pod
            .container_ports()
            .filter_map(|p| {
                Some(PodPort {
                    name: p.name.map(str::to_string),
                    container_port: u16::try_from(p.container_port).ok()?,
                    protocol: p.protocol.to_string(),
                })
            })
            .collect(),
        gate: pod.condition(&condition_type).map(|c| GateCondition {
            status: c.status == "True",
            reason: c.reason.unwrap_or_default().to_string(),
            message: c.message.unwrap_or_default().to_string(),
        }),
    }
}

/// `deletionTimestamp` is the moment the pod is killed at the latest; the request came
/// `deletionGracePeriodSeconds` before it.
fn deletion(pod: &impl PodFacts) -> Option<Deletion> {
    let deadline = pod.metadata().deletion_timestamp.as_ref()?.0;
    let grace = pod
        .metadata()
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

/// When the pod's containers turned ready (the flip latency histogram, the gate timeout).
pub fn containers_ready_since(pod: &impl PodFacts) -> Option<Timestamp> {
    pod.condition("ContainersReady")
        .filter(|c| c.status == "True")
        .and_then(|c| c.last_transition_time)
        .map(|t| t.0)
}
