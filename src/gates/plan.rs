//! The pure heart of the readiness-gate controller: from one Service, the pods it
//! selects or that carry its gate, and what the load balancer reports, to the backend
//! changes (add, drain to weight 0, remove) and the gate conditions to write.
//!
//! No client, no clock of its own: `now` is an input, so every case in the spec is a
//! table test, and the safety invariants are property tests (`proptests`).
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use alibaba_lb::{Backend, BackendKey, BackendType, HealthState};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::reasons::{self, Reason};

/// Condition type prefix; the Service name follows (`.../my-svc`).
pub const GATE_PREFIX: &str = "service.readiness.alibabacloud.com/";
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
    pub load_balancer_id: String,
    pub server_group_id: String,
    /// Every backend of the group, rollgate's and anyone else's.
    pub backends: Vec<Backend>,
    /// Health by backend; a registered backend missing here has no verdict yet.
    pub health: HashMap<BackendKey, HealthState>,
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
}

pub struct PlanInput<'a> {
    pub service: &'a ServiceFacts,
    pub cluster_id: &'a str,
    pub backend_type: BackendType,
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
    pub reason: Reason,
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

/// When a terminating pod's backend is removed: after the drain time, but never after
/// the pod itself is gone.
pub fn removal_time(deletion: &Deletion, drain: Duration) -> Timestamp {
    let drained = deletion
        .requested_at
        .checked_add(SignedDuration::try_from(drain).unwrap_or(SignedDuration::MAX))
        .unwrap_or(Timestamp::MAX);
    drained.min(deletion.deadline)
}

/// The whole decision for one Service.
pub fn plan(input: &PlanInput<'_>) -> GatePlan {
    let mut out = GatePlan::default();
    let groups = match input.cloud {
        CloudState::Ready(groups) => groups,
        CloudState::NotReady { load_balancer_id } => {
            let message = reasons::load_balancer_not_ready(load_balancer_id.as_deref());
            out.conditions = hold_gates(input, Reason::LoadBalancerNotReady, &message);
            out.pending_gates = pending_after(input, &out.conditions);
            return out;
        }
        CloudState::Failed(failure) => {
            let message = reasons::cloud_api_error(failure);
            out.conditions = hold_gates(input, Reason::CloudApiError, &message);
            out.pending_gates = pending_after(input, &out.conditions);
            return out;
        }
    };
    let ports: BTreeMap<u16, &ServicePort> =
        input.service.ports.iter().map(|p| (p.port, p)).collect();
    for group in groups {
        let Some(port) = ports.get(&group.service_port) else {
            continue;
        };
        let (changes, deadline) = plan_group(input, port, group);
        if let Some(at) = deadline {
            out.next_deadline = Some(out.next_deadline.map_or(at, |d| d.min(at)));
        }
        if !changes.is_empty() {
            out.changes.push(changes);
        }
    }
    out.conditions = plan_conditions(input, groups);
    out.pending_gates = pending_after(input, &out.conditions);
    out
}

fn plan_group(
    input: &PlanInput<'_>,
    port: &ServicePort,
    group: &GroupState,
) -> (GroupChanges, Option<Timestamp>) {
    let owner = owner_description(
        port.port,
        &input.service.name,
        &input.service.namespace,
        input.cluster_id,
    );
    let mut changes = GroupChanges {
        service_port: port.port,
        server_group_id: group.server_group_id.clone(),
        ..Default::default()
    };
    let present: HashMap<&BackendKey, &Backend> =
        group.backends.iter().map(|b| (&b.key, b)).collect();
    let owned = |key: &BackendKey| present.get(key).is_some_and(|b| b.description == owner);
    let backend = |ip: &str, target: u16, weight: u32| Backend {
        key: backend_key(input.backend_type, ip, target),
        kind: input.backend_type,
        weight,
        description: owner.clone(),
    };

    // Keys of live, eligible pods: registered, and never removed.
    let mut wanted: BTreeSet<BackendKey> = BTreeSet::new();
    for pod in input.pods.iter().filter(|p| p.eligible()) {
        let (Some(ip), Some(target)) = (pod.ip.as_deref(), pod.resolve(port)) else {
            continue;
        };
        let b = backend(ip, target, IN_ROTATION_WEIGHT);
        match present.get(&b.key) {
            None => changes.add.push(b.clone()),
            Some(existing) if owned(&b.key) && existing.weight == 0 => {
                changes.restore.push(b.clone())
            }
            Some(_) => {}
        }
        wanted.insert(b.key);
    }

    // Terminating pods: weight 0 at once, removal when the drain time is over.
    let mut draining: BTreeSet<BackendKey> = BTreeSet::new();
    let mut deadline: Option<Timestamp> = None;
    for pod in input.pods.iter().filter(|p| p.selected) {
        let (Some(deletion), Some(ip)) = (pod.deletion.as_ref(), pod.ip.as_deref()) else {
            continue;
        };
        let Some(target) = pod.resolve(port) else {
            continue;
        };
        let b = backend(ip, target, 0);
        if wanted.contains(&b.key) || !owned(&b.key) {
            continue;
        }
        let remove_at = removal_time(deletion, input.drain);
        if input.now >= remove_at {
            continue; // falls through to removal below
        }
        draining.insert(b.key.clone());
        deadline = Some(deadline.map_or(remove_at, |d| d.min(remove_at)));
        if present
            .get(&b.key)
            .is_some_and(|existing| existing.weight != 0)
        {
            changes.drain.push(b);
        }
    }

    // Every other backend rollgate owns belongs to no live eligible pod: remove it.
    changes.remove = group
        .backends
        .iter()
        .filter(|b| b.description == owner)
        .filter(|b| !wanted.contains(&b.key) && !draining.contains(&b.key))
        .map(|b| b.key.clone())
        .collect();
    (changes, deadline)
}

/// IP mode: the server id of an IP backend is the IP itself.
pub fn backend_key(_kind: BackendType, ip: &str, port: u16) -> BackendKey {
    BackendKey {
        server_id: ip.to_string(),
        ip: ip.to_string(),
        port,
    }
}

/// How one backend stands in one group, from worst to best.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum PortVerdict {
    TargetPortMissing(String),
    NotRegistered,
    Unhealthy(String),
    Pending,
    NotChecked,
    Healthy,
}

fn plan_conditions(input: &PlanInput<'_>, groups: &[GroupState]) -> Vec<ConditionWrite> {
    let mut writes = vec![];
    let by_port: HashMap<u16, &GroupState> = groups.iter().map(|g| (g.service_port, g)).collect();
    for pod in input
        .pods
        .iter()
        .filter(|p| p.gated && p.deletion.is_none())
    {
        let (status, reason, message) = if !pod.selected {
            (
                false,
                Reason::PodNotSelected,
                reasons::pod_not_selected(input.service),
            )
        } else if !pod.containers_ready || pod.ip.is_none() {
            (
                false,
                Reason::ContainersNotReady,
                reasons::containers_not_ready(),
            )
        } else {
            let verdicts: Vec<(&ServicePort, Option<&GroupState>, PortVerdict)> = input
                .service
                .ports
                .iter()
                .map(|port| {
                    let group = by_port.get(&port.port).copied();
                    (port, group, port_verdict(input, pod, port, group))
                })
                .collect();
            let worst = verdicts
                .iter()
                .map(|(_, _, v)| v.clone())
                .min()
                .unwrap_or(PortVerdict::NotRegistered);
            let details = reasons::port_details(
                verdicts
                    .iter()
                    .map(|(port, group, v)| (*port, *group, verdict_text(v))),
            );
            match worst {
                PortVerdict::Healthy => (true, Reason::LoadBalancerHealthy, details),
                PortVerdict::NotChecked => (true, Reason::RegisteredHealthCheckDisabled, details),
                bad => {
                    let reason = match bad {
                        PortVerdict::TargetPortMissing(_) => Reason::TargetPortNotFound,
                        PortVerdict::NotRegistered => Reason::BackendNotRegistered,
                        PortVerdict::Unhealthy(_) => Reason::BackendUnhealthy,
                        _ => Reason::HealthCheckPending,
                    };
                    let was_true = pod.gate.as_ref().is_some_and(|g| g.status);
                    if was_true && !input.service.flip_back {
                        // The peers' default: Ready stays, the reason tells what changed.
                        (
                            true,
                            Reason::BackendLostAfterReady,
                            reasons::lost_after_ready(reason, &details),
                        )
                    } else {
                        (false, reason, details)
                    }
                }
            }
        };
        push_if_changed(&mut writes, pod, status, reason, message);
    }
    writes
}

fn port_verdict(
    input: &PlanInput<'_>,
    pod: &GatePod,
    port: &ServicePort,
    group: Option<&GroupState>,
) -> PortVerdict {
    let (Some(ip), Some(target)) = (pod.ip.as_deref(), pod.resolve(port)) else {
        let name = match &port.target {
            TargetPort::Name(n) => n.clone(),
            TargetPort::Number(n) => n.to_string(),
        };
        return PortVerdict::TargetPortMissing(name);
    };
    let Some(group) = group else {
        return PortVerdict::NotRegistered;
    };
    let key = backend_key(input.backend_type, ip, target);
    if !group.backends.iter().any(|b| b.key == key) {
        return PortVerdict::NotRegistered;
    }
    match group.health.get(&key) {
        Some(HealthState::Healthy) => PortVerdict::Healthy,
        Some(HealthState::NotChecked) => PortVerdict::NotChecked,
        Some(HealthState::Unhealthy { reason }) => PortVerdict::Unhealthy(reason.clone()),
        Some(HealthState::Unused) => PortVerdict::Unhealthy("Unused (weight 0)".into()),
        Some(HealthState::Pending) | None => PortVerdict::Pending,
    }
}

fn verdict_text(v: &PortVerdict) -> String {
    match v {
        PortVerdict::TargetPortMissing(name) => format!("targetPort {name} not found in the pod"),
        PortVerdict::NotRegistered => "not registered yet".into(),
        PortVerdict::Unhealthy(code) => format!("unhealthy ({code})"),
        PortVerdict::Pending => "registered, health check pending".into(),
        PortVerdict::NotChecked => "registered, health checks off".into(),
        PortVerdict::Healthy => "registered and healthy".into(),
    }
}

/// Cloud not ready or failing: gates not yet True say why; a True gate is never moved
/// on an error or a guess.
fn hold_gates(input: &PlanInput<'_>, reason: Reason, message: &str) -> Vec<ConditionWrite> {
    let mut writes = vec![];
    for pod in input
        .pods
        .iter()
        .filter(|p| p.gated && p.deletion.is_none())
    {
        if pod.gate.as_ref().is_some_and(|g| g.status) {
            continue;
        }
        push_if_changed(&mut writes, pod, false, reason, message.to_string());
    }
    writes
}

/// Gates naming a Service that does not exist or is not a load balancer.
pub fn plan_without_service(
    pods: &[GatePod],
    reason: Reason,
    message: &str,
) -> Vec<ConditionWrite> {
    let mut writes = vec![];
    for pod in pods.iter().filter(|p| p.gated && p.deletion.is_none()) {
        push_if_changed(&mut writes, pod, false, reason, message.to_string());
    }
    writes
}

fn push_if_changed(
    writes: &mut Vec<ConditionWrite>,
    pod: &GatePod,
    status: bool,
    reason: Reason,
    message: String,
) {
    let same = pod
        .gate
        .as_ref()
        .is_some_and(|g| g.status == status && g.reason == reason.as_str() && g.message == message);
    if !same {
        writes.push(ConditionWrite {
            pod: pod.name.clone(),
            uid: pod.uid.clone(),
            status,
            reason,
            message,
        });
    }
}

fn pending_after(input: &PlanInput<'_>, writes: &[ConditionWrite]) -> usize {
    let written: HashMap<&str, bool> = writes.iter().map(|w| (w.uid.as_str(), w.status)).collect();
    input
        .pods
        .iter()
        .filter(|p| p.gated && p.deletion.is_none())
        .filter(|p| {
            let status = written
                .get(p.uid.as_str())
                .copied()
                .or_else(|| p.gate.as_ref().map(|g| g.status))
                .unwrap_or(false);
            !status
        })
        .count()
}

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
