//! The messages that go with a gate condition's reasons (the reasons themselves are
//! public names: `crate::names::GateReason`, listed in docs/configuration.md).
use std::time::Duration;

use super::model::{CloudFailure, GroupState, ServiceFacts, ServicePort};
use crate::names::{
    GateReason, FLIP_BACK_ANNOTATION, GATE_TIMEOUT_ANNOTATION, LOAD_BALANCER_FINALIZER,
};

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

/// A True gate kept while an annotation of its Service is not valid.
pub fn kept_with_invalid_annotation(problem: &str) -> String {
    format!(
        "{problem}. The gate stays True and the backends stay as they are until the annotation is fixed"
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

/// The gate's message when an account quota is used up (`quota`: the cloud's words).
pub fn cloud_quota_exceeded(failure: &CloudFailure, quota: &str) -> String {
    format!(
        "cloud API call {} hit an account quota ({}, RequestId {}): {quota} Raise the quota in Quota Center (CLB: slb_quota_instances_num; NLB: nlb_quota_loadbalancers_num, nlb_quota_servergroup_noeci_servers_num) or free what uses it; retried on the slow poll",
        failure.action, failure.code, failure.request_id
    )
}

/// A gate that timed out: how long it waited, and on what.
pub fn gate_timed_out(timeout: Duration, waited_on: GateReason, details: &str) -> String {
    format!(
        "no healthy backend {} after the containers turned ready ({GATE_TIMEOUT_ANNOTATION}): the gate is True without it; it last waited on {}: {details}",
        duration_text(timeout),
        waited_on.as_str(),
    )
}

/// `600s`, `1500ms`: as the annotation's own forms.
fn duration_text(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
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

/// A pod IP no ENI holds and outside every CIDR block of the VPC.
pub fn pod_ip_outside_vpc(ip: &str) -> String {
    format!(
        "pod IP {ip} is outside the VPC's CIDR blocks (an overlay IP, not a VPC address), so no ENI holds it and the load balancer cannot reach it: not registered. Run the pods on the Terway network (ENI mode) or check --cloud-vpc-id"
    )
}

/// A pod IP inside the VPC that no attached ENI holds (yet).
pub fn eni_not_found(ip: &str) -> String {
    format!(
        "no ENI in use in the VPC holds pod IP {ip} yet (DescribeNetworkInterfaces); not registered, looking again"
    )
}

/// The Warning Event on a Service whose pods are outside the VPC.
pub fn pods_outside_vpc(pods: &[String]) -> String {
    format!(
        "not registering pods [{}]: their IPs are outside the VPC's CIDR blocks (overlay network), so the load balancer cannot reach them; run them on the Terway network (ENI mode) or check --cloud-vpc-id",
        pods.join(", ")
    )
}

/// The port's listener forwards to another server group than rollgate's (or the port
/// has no listener): the pod would get no traffic, so no gate turns True.
pub fn listener_elsewhere(listener: &str, target: Option<&str>) -> String {
    match target {
        Some(other) if !other.is_empty() => format!(
            "listener {listener} forwards to server group {other}, not to this one: the pod would get no traffic from it. Point the listener at this server group (or use another port)"
        ),
        _ => format!(
            "listener {listener} forwards to no vServer group (the default server group) or does not exist: the pod would get no traffic from it"
        ),
    }
}

/// What to do about a CLB instance that takes no ENI/ECI backends.
const NO_POD_BACKENDS_FIX: &str = "give it a LoadBalancerSpec (e.g. slb.s1.small: ModifyLoadBalancerInstanceSpec, or the console's \"change specification\"), switch it to pay-by-CLCU, or attach another instance";

/// The gate of a pod behind a CLB instance that refuses ENI/ECI backends.
pub fn load_balancer_takes_no_pod_backends(load_balancer_id: &str, instance: &str) -> String {
    format!(
        "load balancer {load_balancer_id} is a shared-resource CLB instance ({instance}): CLB takes ENI and ECI backends only on performance-guaranteed instances, so this pod cannot be registered; {NO_POD_BACKENDS_FIX}"
    )
}

/// The Warning Event on the Service.
pub fn service_load_balancer_takes_no_pod_backends(
    load_balancer_id: &str,
    instance: &str,
) -> String {
    format!(
        "CLB instance {load_balancer_id} ({instance}) is shared-resource and takes no ENI/ECI backends, so no pod of this Service can be registered and no readiness gate turns True; {NO_POD_BACKENDS_FIX}"
    )
}

/// The Warning Event of a Service whose cleanup cannot proceed: the finalizer stays.
/// No RequestId, so that the same cause is said once, not once per retry.
pub fn cleanup_blocked(load_balancer_id: &str, failure: &CloudFailure) -> String {
    let hint = match failure.code.as_str() {
        "Unreachable" => "the cloud API cannot be reached (network, endpoint or region)",
        "NoCredentials" => "no usable cloud credentials",
        "InvalidConfiguration" => "the cloud client is not configured (region, endpoint)",
        code if code.contains("AccessKey")
            || code.contains("Forbidden")
            || code.contains("Signature")
            || code.contains("NoPermission") =>
        {
            "the cloud refused rollgate's credentials or permissions"
        }
        _ => "the cloud refused the call",
    };
    format!(
        "cannot clean up load balancer {load_balancer_id} yet: {} failed with {} ({hint}). The finalizer {} stays and the cleanup is retried; fix the cause, or remove the finalizer by hand after cleaning up in the console",
        failure.action, failure.code, LOAD_BALANCER_FINALIZER
    )
}
