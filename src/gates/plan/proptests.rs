//! Property tests of the safety invariants, over generated pods, backends and health:
//! - a gate flips to True only when the pod is registered and healthy (or unchecked)
//!   in every server group of the Service;
//! - no backend rollgate does not own is ever drained, restored or removed;
//! - no backend of a live, eligible pod is ever removed or drained.
use proptest::prelude::*;

use super::tests::{at, owned, pod, CLUSTER, LEGACY, NOW};
use super::*;

#[derive(Debug, Clone)]
struct ModelPod {
    selected: bool,
    gated: bool,
    containers_ready: bool,
    /// Seconds since deletion was requested, if terminating.
    deleting_for: Option<i64>,
    gate_true: bool,
    /// Per port: registered, and how healthy.
    backends: [Option<(bool, u8)>; 2],
}

#[derive(Debug, Clone)]
struct Model {
    pods: Vec<ModelPod>,
    /// Backends of pods that no longer exist, per port.
    stale: Vec<(u8, bool)>,
    /// Hand-added backends, sometimes on the IP of a pod.
    foreign: Vec<u8>,
    flip_back: bool,
    second_group_missing: bool,
}

fn model_pod() -> impl Strategy<Value = ModelPod> {
    (
        prop::bool::weighted(0.85),
        prop::bool::weighted(0.8),
        prop::bool::weighted(0.8),
        prop::option::weighted(0.25, 0i64..40),
        any::<bool>(),
        [
            prop::option::weighted(0.7, (any::<bool>(), 0u8..5)),
            prop::option::weighted(0.7, (any::<bool>(), 0u8..5)),
        ],
    )
        .prop_map(
            |(selected, gated, containers_ready, deleting_for, gate_true, backends)| ModelPod {
                selected,
                gated,
                containers_ready,
                deleting_for,
                gate_true,
                backends,
            },
        )
}

fn model() -> impl Strategy<Value = Model> {
    (
        prop::collection::vec(model_pod(), 0..12),
        prop::collection::vec((0u8..2, any::<bool>()), 0..4),
        prop::collection::vec(0u8..20, 0..3),
        any::<bool>(),
        prop::bool::weighted(0.1),
    )
        .prop_map(
            |(pods, stale, foreign, flip_back, second_group_missing)| Model {
                pods,
                stale,
                foreign,
                flip_back,
                second_group_missing,
            },
        )
}

fn health(code: u8) -> HealthState {
    match code {
        0 => HealthState::Healthy,
        1 => HealthState::Pending,
        2 => HealthState::Unhealthy {
            reason: "CONNECT_TIMEOUT".into(),
        },
        3 => HealthState::Unused,
        _ => HealthState::NotChecked,
    }
}

fn ip(i: usize) -> String {
    format!("10.1.0.{i}")
}

fn key_for(ip: &str, port_index: usize) -> BackendKey {
    backend_key(BackendType::Ip, ip, 8080 + port_index as u16)
}

fn build(model: &Model) -> (ServiceFacts, Vec<GatePod>, CloudState) {
    let mut service = super::tests::svc(model.flip_back);
    service.ports.push(ServicePort {
        port: 443,
        protocol: "TCP".into(),
        target: TargetPort::Number(8081),
    });
    let mut groups: Vec<GroupState> = (0..2)
        .map(|i| GroupState {
            service_port: service.ports[i].port,
            protocol: service.ports[i].protocol.clone(),
            load_balancer_id: "lb-1".into(),
            server_group_id: format!("rsp-{i}"),
            listener: format!("TCP:{}", service.ports[i].port),
            listener_target: Some(format!("rsp-{i}")),
            backends: vec![],
            health: HashMap::new(),
        })
        .collect();
    let mut pods = vec![];
    for (i, m) in model.pods.iter().enumerate() {
        let mut p = pod(&format!("p{i}"), &ip(i));
        p.selected = m.selected;
        p.gated = m.gated;
        p.containers_ready = m.containers_ready;
        p.deletion = m.deleting_for.map(|s| Deletion {
            requested_at: at(NOW - s),
            deadline: at(NOW - s + 30),
        });
        p.gate = Some(GateCondition {
            status: m.gate_true,
            reason: String::new(),
            message: String::new(),
        });
        for (g, backend) in m.backends.iter().enumerate() {
            if let Some((weight_zero, code)) = backend {
                let mut b = owned(&ip(i), if *weight_zero { 0 } else { 100 });
                b.key = key_for(&ip(i), g);
                // Some were registered by an earlier version (legacy marker): adopted.
                b.description = match (i + g) % 3 {
                    0 => legacy_owner_description(service.ports[g].port, "web", "ns", LEGACY),
                    _ => owner_description(service.ports[g].port, "web", "ns", CLUSTER),
                };
                groups[g].health.insert(b.key.clone(), health(*code));
                groups[g].backends.push(b);
            }
        }
        pods.push(p);
    }
    for (n, (g, healthy)) in model.stale.iter().enumerate() {
        let g = *g as usize;
        let mut b = owned(&format!("10.9.0.{n}"), 100);
        b.key.port = 8080 + g as u16;
        b.description = match n % 2 {
            0 => owner_description(service.ports[g].port, "web", "ns", CLUSTER),
            _ => legacy_owner_description(service.ports[g].port, "web", "ns", LEGACY),
        };
        if *healthy {
            groups[g].health.insert(b.key.clone(), HealthState::Healthy);
        }
        groups[g].backends.push(b);
    }
    for (n, target) in model.foreign.iter().enumerate() {
        let g = n % 2;
        let key = key_for(&ip(*target as usize), g);
        if groups[g].backends.iter().any(|b| b.key == key) {
            continue;
        }
        groups[g].backends.push(Backend {
            key,
            kind: BackendType::Ip,
            weight: 100,
            description: "k8s/80/web/ns/another-cluster".into(),
        });
    }
    if model.second_group_missing {
        groups.pop();
    }
    (service, pods, CloudState::Ready(groups))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn the_safety_invariants_hold(model in model()) {
        let (service, pods, cloud) = build(&model);
        let CloudState::Ready(groups) = &cloud else { unreachable!() };
        let plan = plan(&PlanInput {
            service: &service,
            cluster_id: CLUSTER,
            legacy_cluster_id: Some(LEGACY),
            backend_type: BackendType::Ip,
            placements: &HashMap::new(),
            pods: &pods,
            cloud: &cloud,
            drain: Duration::from_secs(10),
            now: at(NOW),
        });

        // Never True without registered + healthy on every port.
        for w in plan.conditions.iter().filter(|w| w.status) {
            let p = pods.iter().find(|p| p.uid == w.uid).unwrap();
            let was_true = p.gate.as_ref().is_some_and(|g| g.status);
            if was_true && w.reason == GateReason::BackendLostAfterReady {
                prop_assert!(!service.flip_back);
                continue;
            }
            prop_assert_eq!(groups.len(), service.ports.len(), "True with a group missing: {:?}", w);
            for (g, group) in groups.iter().enumerate() {
                let key = key_for(p.ip.as_deref().unwrap(), g);
                prop_assert!(group.backends.iter().any(|b| b.key == key), "True but not registered: {:?}", w);
                prop_assert!(
                    matches!(group.health.get(&key), Some(HealthState::Healthy | HealthState::NotChecked)),
                    "True but not healthy: {:?} {:?}", w, group.health.get(&key)
                );
            }
        }

        for changes in &plan.changes {
            let group = groups.iter().find(|g| g.server_group_id == changes.server_group_id).unwrap();
            let owner = owner_description(changes.service_port, "web", "ns", CLUSTER);
            let adopted = legacy_owner_description(changes.service_port, "web", "ns", LEGACY);
            let owned_keys: BTreeSet<&BackendKey> = group.backends.iter()
                .filter(|b| b.description == owner || b.description == adopted)
                .map(|b| &b.key).collect();
            // Whatever is written carries the current marker, never the legacy one.
            for b in changes.add.iter().chain(&changes.restore) {
                prop_assert_eq!(&b.description, &owner);
            }
            // Never touch a backend rollgate does not own.
            for key in changes.remove.iter()
                .chain(changes.drain.iter().map(|b| &b.key))
                .chain(changes.restore.iter().map(|b| &b.key))
            {
                prop_assert!(owned_keys.contains(key), "touched a foreign backend {:?}", key);
            }
            // Never deregister (or drain) a live, eligible pod.
            let g = service.ports.iter().position(|p| p.port == changes.service_port).unwrap();
            for p in pods.iter().filter(|p| p.eligible()) {
                let key = key_for(p.ip.as_deref().unwrap(), g);
                prop_assert!(!changes.remove.contains(&key), "removed live pod {}", p.name);
                prop_assert!(!changes.drain.iter().any(|b| b.key == key), "drained live pod {}", p.name);
            }
            // Adds never duplicate a present backend.
            for b in &changes.add {
                prop_assert!(!group.backends.iter().any(|x| x.key == b.key));
            }
        }
        // Terminating pods' gates are left alone.
        for w in &plan.conditions {
            let p = pods.iter().find(|p| p.uid == w.uid).unwrap();
            prop_assert!(p.deletion.is_none() && p.gated);
        }
    }
}
