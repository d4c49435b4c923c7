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

use super::model::*;
use super::reasons;
use crate::names::GateReason;

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
            out.conditions = hold_gates(input, GateReason::LoadBalancerNotReady, &message);
            return finish(input, out);
        }
        CloudState::Failed(failure) => {
            let (reason, message) = match &failure.quota {
                Some(quota) => (
                    GateReason::CloudQuotaExceeded,
                    reasons::cloud_quota_exceeded(failure, quota),
                ),
                None => (GateReason::CloudApiError, reasons::cloud_api_error(failure)),
            };
            out.conditions = hold_gates(input, reason, &message);
            return finish(input, out);
        }
        CloudState::PodBackendsRefused {
            load_balancer_id,
            instance,
        } => {
            let message = reasons::load_balancer_takes_no_pod_backends(load_balancer_id, instance);
            let reason = GateReason::LoadBalancerTakesNoPodBackends;
            out.conditions = hold_gates(input, reason, &message);
            return finish(input, out);
        }
    };
    // Keyed by port and protocol: TCP and UDP on one port are two listeners and groups.
    let ports: BTreeMap<(u16, &str), &ServicePort> = input
        .service
        .ports
        .iter()
        .map(|p| ((p.port, p.protocol.as_str()), p))
        .collect();
    for group in groups {
        let Some(port) = ports.get(&(group.service_port, group.protocol.as_str())) else {
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
    finish(input, out)
}

/// The gates still pending after the plan's writes, and the earliest moment one of
/// them times out (its reconcile comes then, however slow the looks are).
fn finish(input: &PlanInput<'_>, mut out: GatePlan) -> GatePlan {
    (out.pending_gates, out.pending_reasons) = pending_after(input, &out.conditions);
    let timeouts = pending_pods(input, &out.conditions)
        .filter_map(|pod| timeout_at(input, pod))
        .filter(|at| *at > input.now);
    for at in timeouts {
        out.next_deadline = Some(out.next_deadline.map_or(at, |d| d.min(at)));
    }
    out
}

/// When the pod's gate times out: the Service's `gate_timeout` after its containers
/// turned ready (`None`: no timeout, or containers not ready).
fn timeout_at(input: &PlanInput<'_>, pod: &GatePod) -> Option<Timestamp> {
    let timeout = SignedDuration::try_from(input.service.gate_timeout?).ok()?;
    if !pod.containers_ready {
        return None;
    }
    pod.containers_ready_since?.checked_add(timeout).ok()
}

/// A gate that would stay not True turns True once its timeout has passed (the
/// fail-open of `rollgate.io/readiness-gate-timeout`), naming what it waited on.
fn fail_open(
    input: &PlanInput<'_>,
    pod: &GatePod,
    decided: (bool, GateReason, String),
) -> (bool, GateReason, String) {
    let (status, reason, message) = decided;
    match (status, input.service.gate_timeout, timeout_at(input, pod)) {
        (false, Some(timeout), Some(at)) if input.now >= at => (
            true,
            GateReason::GateTimedOut,
            reasons::gate_timed_out(timeout, reason, &message),
        ),
        _ => (status, reason, message),
    }
}

fn plan_group(
    input: &PlanInput<'_>,
    port: &ServicePort,
    group: &GroupState,
) -> (GroupChanges, Option<Timestamp>) {
    let marks = Owner {
        service: &input.service.name,
        namespace: &input.service.namespace,
        cluster_id: input.cluster_id,
        legacy_cluster_id: input.legacy_cluster_id,
    };
    let owner = marks.marker(port.port);
    let is_ours = |b: &Backend| marks.marks(port.port, &b.description);
    let mut changes = GroupChanges {
        service_port: port.port,
        server_group_id: group.server_group_id.clone(),
        ..Default::default()
    };
    let present: HashMap<&BackendKey, &Backend> =
        group.backends.iter().map(|b| (&b.key, b)).collect();
    let owned = |key: &BackendKey| present.get(key).is_some_and(|b| is_ours(b));
    // Rollgate's backend of a pod IP and port, whatever server it was registered as.
    let owned_at = |ip: &str, target: u16| {
        group
            .backends
            .iter()
            .find(|b| is_ours(b) && b.key.ip == ip && b.key.port == target)
    };

    // Keys of live, eligible pods: registered, and never removed.
    let mut wanted: BTreeSet<BackendKey> = BTreeSet::new();
    for pod in input.pods.iter().filter(|p| p.eligible()) {
        let (Some(ip), Some(target)) = (pod.ip.as_deref(), pod.resolve(port)) else {
            continue;
        };
        let Placement::Server { kind, id } = placement(input, ip) else {
            // Not placeable now (no ENI yet, or outside the VPC): nothing is added, and
            // a backend registered earlier stays (a failed lookup removes nothing).
            if let Some(existing) = owned_at(ip, target) {
                wanted.insert(existing.key.clone());
            }
            continue;
        };
        let b = Backend {
            key: BackendKey {
                server_id: id,
                ip: ip.to_string(),
                port: target,
            },
            kind,
            weight: input.service.weight,
            description: owner.clone(),
        };
        match present.get(&b.key) {
            None => changes.add.push(b.clone()),
            // Another weight (drained to 0 earlier, or the Service's `weight` changed),
            // or the legacy marker (adopted: re-marked once).
            Some(existing)
                if owned(&b.key)
                    && (existing.weight != b.weight || existing.description != owner) =>
            {
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
        // Found by IP and port: a terminating pod is not looked up again.
        let Some(existing) = owned_at(ip, target) else {
            continue;
        };
        let b = Backend {
            weight: 0,
            ..existing.clone()
        };
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
        .filter(|b| is_ours(b))
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

/// Where the pod with `ip` is registered: the IP itself for `Ip` groups (NLB), the
/// looked-up server otherwise (CLB: `eni`/`eci`).
pub fn placement(input: &PlanInput<'_>, ip: &str) -> Placement {
    if input.backend_type == BackendType::Ip {
        return Placement::Server {
            kind: BackendType::Ip,
            id: ip.to_string(),
        };
    }
    input
        .placements
        .get(ip)
        .cloned()
        .unwrap_or(Placement::NoEni)
}

/// How one backend stands in one group, from worst to best.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum PortVerdict {
    /// The port's listener forwards to another group (or there is none): `listener`,
    /// and the group it points at.
    ListenerElsewhere(String, Option<String>),
    TargetPortMissing(String),
    OutsideVpc(String),
    NoEni(String),
    NotRegistered,
    Unhealthy(String),
    Pending,
    NotChecked,
    Healthy,
}

fn plan_conditions(input: &PlanInput<'_>, groups: &[GroupState]) -> Vec<ConditionWrite> {
    let mut writes = vec![];
    let by_port: HashMap<(u16, &str), &GroupState> = groups
        .iter()
        .map(|g| ((g.service_port, g.protocol.as_str()), g))
        .collect();
    for pod in input
        .pods
        .iter()
        .filter(|p| p.gated && p.deletion.is_none())
    {
        let (status, reason, message) = if !pod.selected {
            (
                false,
                GateReason::PodNotSelected,
                reasons::pod_not_selected(input.service),
            )
        } else if !pod.containers_ready || pod.ip.is_none() {
            (
                false,
                GateReason::ContainersNotReady,
                reasons::containers_not_ready(),
            )
        } else {
            let verdicts: Vec<(&ServicePort, Option<&GroupState>, PortVerdict)> = input
                .service
                .ports
                .iter()
                .map(|port| {
                    let group = by_port.get(&(port.port, port.protocol.as_str())).copied();
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
                PortVerdict::Healthy => (true, GateReason::LoadBalancerHealthy, details),
                PortVerdict::NotChecked => {
                    (true, GateReason::RegisteredHealthCheckDisabled, details)
                }
                bad => {
                    let reason = match bad {
                        PortVerdict::ListenerElsewhere(..) => GateReason::ListenerNotForwarding,
                        PortVerdict::TargetPortMissing(_) => GateReason::TargetPortNotFound,
                        PortVerdict::OutsideVpc(_) => GateReason::PodIpOutsideVpc,
                        PortVerdict::NoEni(_) => GateReason::EniNotFound,
                        PortVerdict::NotRegistered => GateReason::BackendNotRegistered,
                        PortVerdict::Unhealthy(_) => GateReason::BackendUnhealthy,
                        _ => GateReason::HealthCheckPending,
                    };
                    (false, reason, details)
                }
            }
        };
        let (status, reason, message) = fail_open(input, pod, (status, reason, message));
        // A True gate follows the flip-back setting whatever the cause, the pod's own
        // containers included: left True (the peers' default), a pod whose containers
        // blip is Ready again the moment they are, not a health cycle later. The
        // reason tells what changed.
        let was_true = pod.gate.as_ref().is_some_and(|g| g.status);
        let (status, reason, message) = if !status && was_true && !input.service.flip_back {
            (
                true,
                GateReason::BackendLostAfterReady,
                reasons::lost_after_ready(reason, &message),
            )
        } else {
            (status, reason, message)
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
    // Registered and healthy means nothing if the listener sends the traffic elsewhere.
    if group.listener_target.as_deref() != Some(group.server_group_id.as_str()) {
        return PortVerdict::ListenerElsewhere(
            group.listener.clone(),
            group.listener_target.clone(),
        );
    }
    let key = match placement(input, ip) {
        Placement::Server { id, .. } => BackendKey {
            server_id: id,
            ip: ip.to_string(),
            port: target,
        },
        Placement::OutsideVpc => return PortVerdict::OutsideVpc(ip.to_string()),
        Placement::NoEni => return PortVerdict::NoEni(ip.to_string()),
    };
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
        PortVerdict::ListenerElsewhere(listener, target) => {
            reasons::listener_elsewhere(listener, target.as_deref())
        }
        PortVerdict::OutsideVpc(ip) => reasons::pod_ip_outside_vpc(ip),
        PortVerdict::NoEni(ip) => reasons::eni_not_found(ip),
        PortVerdict::NotRegistered => "not registered yet".into(),
        PortVerdict::Unhealthy(code) => format!("unhealthy ({code})"),
        PortVerdict::Pending => "registered, health check pending".into(),
        PortVerdict::NotChecked => "registered, health checks off".into(),
        PortVerdict::Healthy => "registered and healthy".into(),
    }
}

/// Cloud not ready or failing: gates not yet True say why; a True gate is never moved
/// on an error or a guess.
fn hold_gates(input: &PlanInput<'_>, reason: GateReason, message: &str) -> Vec<ConditionWrite> {
    let mut writes = vec![];
    for pod in input
        .pods
        .iter()
        .filter(|p| p.gated && p.deletion.is_none())
    {
        if pod.gate.as_ref().is_some_and(|g| g.status) {
            continue;
        }
        let (status, reason, message) = fail_open(input, pod, (false, reason, message.into()));
        push_if_changed(&mut writes, pod, status, reason, message);
    }
    writes
}

/// Gates naming a Service that does not exist or is not a load balancer.
///
/// A True gate stays True, whatever the flip-back setting: the Service was deleted or
/// turned into a ClusterIP one, and the pods behind it still serve. Turning every gate
/// False would take every pod out of whatever replaced the load balancer at once: an
/// outage caused by the gate itself. Its reason and message say the load balancer is
/// gone. A gate that was never True says why it will not turn True.
pub fn plan_without_service(
    pods: &[GatePod],
    reason: GateReason,
    message: &str,
) -> Vec<ConditionWrite> {
    let mut writes = vec![];
    for pod in pods.iter().filter(|p| p.gated && p.deletion.is_none()) {
        if pod.gate.as_ref().is_some_and(|g| g.status) {
            let kept = reasons::kept_without_load_balancer(message);
            push_if_changed(&mut writes, pod, true, reason, kept);
        } else {
            push_if_changed(&mut writes, pod, false, reason, message.to_string());
        }
    }
    writes
}

/// Gates of a Service whose annotations do not make a load balancer spec (a value
/// not valid, or an NLB to create without zone maps): nothing is asked of the cloud,
/// and every gated pod says why, so `kubectl get pod -o yaml` shows it and not only
/// the Service's Event. A True gate stays True: its backends are left as they are,
/// and turning it False would take a serving pod out of every endpoint list over a
/// typo.
pub fn plan_invalid_annotation(pods: &[GatePod], problem: &str) -> Vec<ConditionWrite> {
    let reason = GateReason::InvalidLoadBalancerAnnotation;
    let mut writes = vec![];
    for pod in pods.iter().filter(|p| p.gated && p.deletion.is_none()) {
        if pod.gate.as_ref().is_some_and(|g| g.status) {
            let kept = reasons::kept_with_invalid_annotation(problem);
            push_if_changed(&mut writes, pod, true, reason, kept);
        } else {
            push_if_changed(&mut writes, pod, false, reason, problem.to_string());
        }
    }
    writes
}

fn push_if_changed(
    writes: &mut Vec<ConditionWrite>,
    pod: &GatePod,
    status: bool,
    reason: GateReason,
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

/// Gates of live pods not True after `writes`, and how many of them by reason (the
/// written reason, else the one on the pod; `none` for a gate with no condition yet).
fn pending_after(
    input: &PlanInput<'_>,
    writes: &[ConditionWrite],
) -> (usize, BTreeMap<String, usize>) {
    let mut by_reason: BTreeMap<String, usize> = BTreeMap::new();
    for (_, (_, reason)) in gated_pods_after(input, writes).filter(|(_, (status, _))| !status) {
        *by_reason.entry(reason.to_string()).or_default() += 1;
    }
    (by_reason.values().sum(), by_reason)
}

/// The live gated pods whose gate is not True after `writes`.
fn pending_pods<'a>(
    input: &'a PlanInput<'_>,
    writes: &'a [ConditionWrite],
) -> impl Iterator<Item = &'a GatePod> + 'a {
    gated_pods_after(input, writes)
        .filter(|(_, (status, _))| !status)
        .map(|(pod, _)| pod)
}

/// Each live gated pod with its gate after `writes`: status and reason (the written
/// ones, else those on the pod; `none` for a gate with no condition yet).
fn gated_pods_after<'a>(
    input: &'a PlanInput<'_>,
    writes: &'a [ConditionWrite],
) -> impl Iterator<Item = (&'a GatePod, (bool, &'a str))> + 'a {
    let written: HashMap<&str, (bool, &str)> = writes
        .iter()
        .map(|w| (w.uid.as_str(), (w.status, w.reason.as_str())))
        .collect();
    input
        .pods
        .iter()
        .filter(|p| p.gated && p.deletion.is_none())
        .map(move |pod| {
            let gate = written.get(pod.uid.as_str()).copied().unwrap_or_else(|| {
                pod.gate
                    .as_ref()
                    .map_or((false, "none"), |g| (g.status, g.reason.as_str()))
            });
            (pod, gate)
        })
}

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
