//! The messages that go with a gate condition's reasons (the reasons themselves are
//! public names: `crate::names::GateReason`, listed in the README's troubleshooting
//! table).
use super::model::{CloudFailure, GroupState, ServiceFacts, ServicePort};
use crate::names::{GateReason, FLIP_BACK_ANNOTATION};

pub fn service_not_found(namespace: &str, service: &str) -> String {
    format!(
        "Service {namespace}/{service} does not exist; create it (type: LoadBalancer) or fix the readiness gate's conditionType"
    )
}

pub fn service_not_load_balancer(namespace: &str, service: &str, type_: &str) -> String {
    format!(
        "Service {namespace}/{service} is of type {type_}, not LoadBalancer: no load balancer will register this pod"
    )
}

/// A True gate kept while its Service is gone or no longer a load balancer.
pub fn kept_without_load_balancer(why: &str) -> String {
    format!(
        "{why}. The gate stays True: turning it False would make this pod not Ready and drop it from the endpoints of every Service"
    )
}

pub fn pod_not_selected(service: &ServiceFacts) -> String {
    format!(
        "the pod's labels do not match the selector of Service {}/{}, so it is not a backend",
        service.namespace, service.name
    )
}

pub fn containers_not_ready() -> String {
    "waiting for the pod's containers to be ready before registering it".into()
}

pub fn load_balancer_not_ready(load_balancer_id: Option<&str>) -> String {
    match load_balancer_id {
        Some(id) => format!("waiting for load balancer {id} to be ready"),
        None => "waiting for the load balancer to be created".into(),
    }
}

pub fn cloud_api_error(failure: &CloudFailure) -> String {
    format!(
        "cloud API call {} failed with {} (RequestId {}); retrying",
        failure.action, failure.code, failure.request_id
    )
}

pub fn lost_after_ready(now: GateReason, details: &str) -> String {
    format!(
        "{}: the gate stays True (annotation {} flips it back): {details}",
        now.as_str(),
        FLIP_BACK_ANNOTATION
    )
}

/// `port 80 (lb-1, group rsp-1): registered and healthy; port 443 ...`.
pub fn port_details<'a>(
    ports: impl Iterator<Item = (&'a ServicePort, Option<&'a GroupState>, String)>,
) -> String {
    ports
        .map(|(port, group, text)| match group {
            Some(g) => format!(
                "port {} (load balancer {}, server group {}): {text}",
                port.port, g.load_balancer_id, g.server_group_id
            ),
            None => format!("port {} (no server group yet): {text}", port.port),
        })
        .collect::<Vec<_>>()
        .join("; ")
}
