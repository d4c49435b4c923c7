//! Every reason a gate condition can carry, and the messages that go with them. The
//! README's troubleshooting table lists the same names (a test keeps them in step).
use super::plan::{CloudFailure, GroupState, ServiceFacts, ServicePort};

macro_rules! reasons {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        /// The CamelCase `reason` of a gate condition.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Reason { $($(#[$doc])* $name),* }

        impl Reason {
            pub const ALL: &'static [Reason] = &[$(Reason::$name),*];
            pub fn as_str(self) -> &'static str {
                match self { $(Reason::$name => stringify!($name)),* }
            }
        }
    };
}

reasons! {
    /// True: registered and healthy in every server group of the Service.
    LoadBalancerHealthy,
    /// True: registered everywhere, but a listener has health checks off.
    RegisteredHealthCheckDisabled,
    /// Still True (default) although a backend was lost or turned unhealthy after Ready.
    BackendLostAfterReady,
    /// Waiting for the backend to appear in a server group.
    BackendNotRegistered,
    /// Registered; the load balancer has no health verdict yet.
    HealthCheckPending,
    /// Registered; the load balancer reports it unhealthy (reason code in the message).
    BackendUnhealthy,
    /// The pod's containers are not ready (or it has no IP): it is not registered.
    ContainersNotReady,
    /// A named targetPort of the Service is not a port of the pod.
    TargetPortNotFound,
    /// The gate names a Service whose selector does not match the pod.
    PodNotSelected,
    /// The gate names a Service that does not exist in the pod's namespace.
    ServiceNotFound,
    /// The gate names a Service that is not `type: LoadBalancer`.
    ServiceNotLoadBalancer,
    /// The load balancer is being created, or has no address yet.
    LoadBalancerNotReady,
    /// A cloud call failed (action, error code and request id in the message).
    CloudApiError,
}

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

pub fn lost_after_ready(now: Reason, details: &str) -> String {
    format!(
        "{}: the gate stays True (annotation {} flips it back): {details}",
        now.as_str(),
        super::service::FLIP_BACK_ANNOTATION
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_camel_case_and_listed_in_the_readme() {
        let readme = include_str!("../../README.md");
        for reason in Reason::ALL {
            let s = reason.as_str();
            assert!(s.chars().next().unwrap().is_ascii_uppercase(), "{s}");
            assert!(s.chars().all(|c| c.is_ascii_alphanumeric()), "{s}");
            assert!(
                readme.contains(&format!("`{s}`")),
                "README lacks reason {s}"
            );
        }
    }
}
