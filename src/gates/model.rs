//! The readiness-gate controller's model: what `plan` reads (a Service's facts, its
//! pods' gates and ports, the cloud's server groups) and what it decides (backend
//! changes, condition writes), and the gate condition's name. `plan`, `reasons`,
//! `service`, `pods` and `cloud` all speak these types; none of them is needed here.
use std::collections::HashMap;
use std::time::Duration;

use alibaba_lb::{Backend, BackendKey, BackendType, HealthState};
use k8s_openapi::jiff::Timestamp;

use crate::names::{GateReason, GATE_PREFIX};

/// Weight of a backend in rotation (both APIs take 0..=100).
pub const IN_ROTATION_WEIGHT: u32 = 100;

/// The gate condition type for a Service.
pub fn gate_condition_type(service: &str) -> String {
    format!("{GATE_PREFIX}{service}")
}

/// The Service named by a gate condition type, if it is one of ours.
pub fn service_of_gate(condition_type: &str) -> Option<&str> {
    condition_type
        .strip_prefix(GATE_PREFIX)
        .filter(|name| !name.is_empty())
}

/// The ownership marker rollgate writes into each backend's description (the same
/// shape the Alibaba cloud controller uses), and the name of the server group it creates.
pub fn owner_description(port: u16, service: &str, namespace: &str, cluster_id: &str) -> String {
    format!("k8s/{port}/{service}/{namespace}/{cluster_id}")
}

/// The name of the server group rollgate makes for one Service port: the ownership
/// marker itself, as before, so groups made by earlier versions are found again. A UDP
/// port whose number a TCP port of the Service also has gets `/udp` after it, since a
/// group serves one protocol (NLB) and each listener needs its own.
pub fn server_group_name(
    port: &ServicePort,
    all: &[ServicePort],
    service: &str,
    namespace: &str,
    cluster_id: &str,
) -> String {
    let owner = owner_description(port.port, service, namespace, cluster_id);
    let shared = all
        .iter()
        .any(|p| p.port == port.port && p.protocol != port.protocol);
    if shared && port.protocol == "UDP" {
        format!("{owner}/udp")
    } else {
        owner
    }
}

/// The Service port a backend's description marks it as rollgate's for this Service
/// (any port: a port the Service no longer has included), or `None` when it is not.
pub fn owned_port(
    description: &str,
    service: &str,
    namespace: &str,
    cluster_id: &str,
) -> Option<u16> {
    let rest = description.strip_prefix("k8s/")?;
    let (port, tail) = rest.split_once('/')?;
    let port: u16 = port.parse().ok()?;
    (tail == format!("{service}/{namespace}/{cluster_id}")).then_some(port)
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetPort {
    Number(u16),
    Name(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServicePort {
    pub port: u16,
    pub protocol: String,
    pub target: TargetPort,
}

/// What the plan needs of a Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceFacts {
    pub namespace: String,
    pub name: String,
    pub ports: Vec<ServicePort>,
    /// Opt-in: a gate already True goes back to False when its backend is lost.
    pub flip_back: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodPort {
    pub name: Option<String>,
    pub container_port: u16,
    pub protocol: String,
}

/// The condition as it is on the pod now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GateCondition {
    pub status: bool,
    pub reason: String,
    pub message: String,
}

/// Pod deletion: when it was asked for and when the pod is killed at the latest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deletion {
    pub requested_at: Timestamp,
    pub deadline: Timestamp,
}

/// What the plan needs of a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatePod {
    pub name: String,
    pub uid: String,
    pub ip: Option<String>,
    /// The Service's selector matches the pod's labels.
    pub selected: bool,
    /// The pod has a readiness gate naming this Service.
    pub gated: bool,
    /// `ContainersReady` is True: the pod is ready but for its gates.
    pub containers_ready: bool,
    pub deletion: Option<Deletion>,
    pub ports: Vec<PodPort>,
    /// This Service's gate condition, if present.
    pub gate: Option<GateCondition>,
}

impl GatePod {
    /// Registered in the load balancer: selected, not terminating, containers ready.
    pub fn eligible(&self) -> bool {
        self.selected && self.deletion.is_none() && self.containers_ready && self.ip.is_some()
    }

    /// The container port a Service port sends to, named ports resolved.
    pub fn resolve(&self, port: &ServicePort) -> Option<u16> {
        match &port.target {
            TargetPort::Number(n) => Some(*n),
            TargetPort::Name(name) => self
                .ports
                .iter()
                .find(|p| p.name.as_deref() == Some(name) && p.protocol == port.protocol)
                .map(|p| p.container_port),
        }
    }
}

/// One Service port's server group, as the cloud reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupState {
    pub service_port: u16,
    /// The Service port's protocol (`TCP`, `UDP`): a port may have both, each with its
    /// own listener and group.
    pub protocol: String,
    pub load_balancer_id: String,
    pub server_group_id: String,
    /// Every backend of the group, rollgate's and anyone else's.
    pub backends: Vec<Backend>,
    /// Health by backend; a registered backend missing here has no verdict yet.
    pub health: HashMap<BackendKey, HealthState>,
    /// The listener on this port, as messages name it (NLB id, or `TCP:80`).
    pub listener: String,
    /// The server group that listener forwards to (`None`: no listener on the port).
    /// Gates turn True only when it is this group: otherwise the pod gets no traffic.
    pub listener_target: Option<String>,
}

/// A cloud call that failed, as the condition message shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloudFailure {
    pub action: String,
    pub code: String,
    pub request_id: String,
}

/// What the cloud side looks like for this Service.
#[derive(Clone, Debug, PartialEq)]
pub enum CloudState {
    /// One group per Service port (ports the cloud cannot serve are left out).
    Ready(Vec<GroupState>),
    /// The load balancer is being created or has no address yet.
    NotReady { load_balancer_id: Option<String> },
    /// Reading the groups failed; nothing is changed and no gate moves.
    Failed(CloudFailure),
    /// The CLB instance takes no pod (ENI/ECI) backends: nothing can be registered.
    PodBackendsRefused {
        load_balancer_id: String,
        /// Its spec and charge type, as messages show them.
        instance: String,
    },
}

/// Where a pod's backend lives, by pod IP (`eni::Placer` finds it; CLB only, since
/// NLB `Ip` groups take the IP itself).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Register the pod as this server (`eni-…` or `eci-…`) with its IP.
    Server { kind: BackendType, id: String },
    /// No ENI holds the IP and it is outside the VPC's CIDR blocks (an overlay IP):
    /// never registered.
    OutsideVpc,
    /// Inside the VPC, but no ENI holds the IP (yet): looked up again next time.
    NoEni,
}

pub struct PlanInput<'a> {
    pub service: &'a ServiceFacts,
    pub cluster_id: &'a str,
    pub backend_type: BackendType,
    /// Pod IP -> where its backend lives, for products that register servers rather
    /// than IPs (CLB); an IP missing here has [`Placement::NoEni`].
    pub placements: &'a HashMap<String, Placement>,
    pub pods: &'a [GatePod],
    pub cloud: &'a CloudState,
    /// Time from termination to removal; never past the pod's own deadline.
    pub drain: Duration,
    pub now: Timestamp,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupChanges {
    pub service_port: u16,
    pub server_group_id: String,
    pub add: Vec<Backend>,
    /// Terminating pods: weight 0, still registered (connections drain).
    pub drain: Vec<Backend>,
    /// Back to full weight (an owned backend of a live pod found at weight 0).
    pub restore: Vec<Backend>,
    pub remove: Vec<BackendKey>,
}

impl GroupChanges {
    pub fn is_empty(&self) -> bool {
        self.add.is_empty()
            && self.drain.is_empty()
            && self.restore.is_empty()
            && self.remove.is_empty()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionWrite {
    pub pod: String,
    pub uid: String,
    pub status: bool,
    pub reason: GateReason,
    pub message: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GatePlan {
    pub changes: Vec<GroupChanges>,
    pub conditions: Vec<ConditionWrite>,
    /// The earliest drain deadline still ahead: reconcile again then.
    pub next_deadline: Option<Timestamp>,
    /// Gates of live pods that are not True after this plan (poll fast while > 0).
    pub pending_gates: usize,
}
