//! Table tests: each case of the spec, as the plan decides it.
use super::*;

pub(super) const NOW: i64 = 1_000_000;
pub(super) const CLUSTER: &str = "c1";
/// The id markers were written under before the upgrade.
pub(super) const LEGACY: &str = "kubernetes";

pub(super) fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(seconds).unwrap()
}

pub(super) fn svc(flip_back: bool) -> ServiceFacts {
    ServiceFacts {
        namespace: "ns".into(),
        name: "web".into(),
        ports: vec![ServicePort {
            port: 80,
            protocol: "TCP".into(),
            target: TargetPort::Name("http".into()),
        }],
        flip_back,
        weight: IN_ROTATION_WEIGHT,
        gate_timeout: None,
    }
}

pub(super) fn pod(name: &str, ip: &str) -> GatePod {
    GatePod {
        name: name.into(),
        uid: format!("uid-{name}"),
        ip: Some(ip.into()),
        selected: true,
        gated: true,
        containers_ready: true,
        containers_ready_since: Some(at(NOW - 30)),
        deletion: None,
        ports: vec![PodPort {
            name: Some("http".into()),
            container_port: 8080,
            protocol: "TCP".into(),
        }],
        gate: None,
    }
}

/// [`pod`] whose gate is already True (`LoadBalancerHealthy`).
fn pod_with_a_true_gate(name: &str, ip: &str) -> GatePod {
    let mut p = pod(name, ip);
    p.gate = Some(GateCondition {
        status: true,
        reason: "LoadBalancerHealthy".into(),
        message: String::new(),
    });
    p
}

pub(super) fn owned(ip: &str, weight: u32) -> Backend {
    Backend {
        key: backend_key(BackendType::Ip, ip, 8080),
        kind: BackendType::Ip,
        weight,
        description: owner_description(80, "web", "ns", CLUSTER),
    }
}

pub(super) fn foreign(ip: &str) -> Backend {
    Backend {
        description: "added by hand".into(),
        ..owned(ip, 100)
    }
}

pub(super) fn group(backends: Vec<Backend>, health: &[(&str, HealthState)]) -> GroupState {
    GroupState {
        service_port: 80,
        protocol: "TCP".into(),
        load_balancer_id: "lb-1".into(),
        server_group_id: "rsp-1".into(),
        listener: "TCP:80".into(),
        listener_target: Some("rsp-1".into()),
        backends,
        health: health
            .iter()
            .map(|(ip, h)| (backend_key(BackendType::Ip, ip, 8080), h.clone()))
            .collect(),
    }
}

fn run(service: &ServiceFacts, pods: &[GatePod], cloud: &CloudState) -> GatePlan {
    plan(&PlanInput {
        service,
        cluster_id: CLUSTER,
        legacy_cluster_id: Some(LEGACY),
        backend_type: BackendType::Ip,
        placements: &HashMap::new(),
        pods,
        cloud,
        drain: Duration::from_secs(10),
        now: at(NOW),
    })
}

/// The message names each of `parts`.
fn assert_mentions(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(message.contains(part), "{part}: {message}");
    }
}

fn only_write(plan: &GatePlan) -> &ConditionWrite {
    assert_eq!(plan.conditions.len(), 1, "{:#?}", plan.conditions);
    &plan.conditions[0]
}

#[test]
fn a_new_pod_is_registered_and_waits_with_a_reason_that_names_the_group() {
    let cloud = CloudState::Ready(vec![group(vec![], &[])]);
    let plan = run(&svc(false), &[pod("a", "10.0.0.1")], &cloud);
    assert_eq!(plan.changes.len(), 1);
    assert_eq!(plan.changes[0].add, vec![owned("10.0.0.1", 100)]);
    let w = only_write(&plan);
    assert!(!w.status);
    assert_eq!(w.reason, GateReason::BackendNotRegistered);
    assert!(
        w.message.contains("lb-1") && w.message.contains("rsp-1"),
        "{}",
        w.message
    );
    assert_eq!(plan.pending_gates, 1);
}

#[test]
fn each_health_state_has_its_own_reason_and_only_healthy_flips_true() {
    let cases = [
        (HealthState::Pending, false, GateReason::HealthCheckPending),
        (
            HealthState::Unhealthy {
                reason: "CONNECT_TIMEOUT".into(),
            },
            false,
            GateReason::BackendUnhealthy,
        ),
        (HealthState::Unused, false, GateReason::BackendUnhealthy),
        (
            HealthState::NotChecked,
            true,
            GateReason::RegisteredHealthCheckDisabled,
        ),
        (HealthState::Healthy, true, GateReason::LoadBalancerHealthy),
    ];
    for (health, status, reason) in cases {
        let cloud = CloudState::Ready(vec![group(
            vec![owned("10.0.0.1", 100)],
            &[("10.0.0.1", health.clone())],
        )]);
        let plan = run(&svc(false), &[pod("a", "10.0.0.1")], &cloud);
        assert!(plan.changes.is_empty(), "{health:?}: {:?}", plan.changes);
        let w = only_write(&plan);
        assert_eq!((w.status, w.reason), (status, reason), "{health:?}");
        if let HealthState::Unhealthy { reason } = &health {
            assert!(w.message.contains(reason), "{}", w.message);
        }
    }
    // Registered but absent from the health report: pending, not healthy.
    let cloud = CloudState::Ready(vec![group(vec![owned("10.0.0.1", 100)], &[])]);
    let plan = run(&svc(false), &[pod("a", "10.0.0.1")], &cloud);
    assert_eq!(only_write(&plan).reason, GateReason::HealthCheckPending);
}

#[test]
fn every_port_must_be_healthy_before_the_gate_turns_true() {
    let mut service = svc(false);
    service.ports.push(ServicePort {
        port: 443,
        protocol: "TCP".into(),
        target: TargetPort::Number(8443),
    });
    let mut second = group(vec![], &[]);
    second.service_port = 443;
    second.server_group_id = "rsp-2".into();
    second.listener_target = Some("rsp-2".into());
    let first = group(
        vec![owned("10.0.0.1", 100)],
        &[("10.0.0.1", HealthState::Healthy)],
    );
    let cloud = CloudState::Ready(vec![first, second]);
    let plan = run(&service, &[pod("a", "10.0.0.1")], &cloud);
    let w = only_write(&plan);
    assert!(!w.status);
    assert_eq!(w.reason, GateReason::BackendNotRegistered);
    assert!(w.message.contains("rsp-2"), "{}", w.message);
    let add = &plan
        .changes
        .iter()
        .find(|c| c.service_port == 443)
        .unwrap()
        .add;
    assert_eq!(add[0].key.port, 8443);
    assert_eq!(
        add[0].description,
        owner_description(443, "web", "ns", CLUSTER)
    );
}

#[test]
fn an_unchanged_condition_is_not_written_again() {
    let cloud = CloudState::Ready(vec![group(
        vec![owned("10.0.0.1", 100)],
        &[("10.0.0.1", HealthState::Healthy)],
    )]);
    let first = run(&svc(false), &[pod("a", "10.0.0.1")], &cloud);
    let w = only_write(&first);
    let mut p = pod("a", "10.0.0.1");
    p.gate = Some(GateCondition {
        status: w.status,
        reason: w.reason.as_str().into(),
        message: w.message.clone(),
    });
    let again = run(&svc(false), &[p], &cloud);
    assert!(again.conditions.is_empty());
    assert_eq!(again.pending_gates, 0);
}

#[test]
fn after_ready_a_lost_backend_keeps_the_gate_by_default_and_flips_it_with_the_opt_in() {
    let cloud = CloudState::Ready(vec![group(
        vec![owned("10.0.0.1", 100)],
        &[(
            "10.0.0.1",
            HealthState::Unhealthy {
                reason: "CONNECT_FAIL".into(),
            },
        )],
    )]);
    let p = pod_with_a_true_gate("a", "10.0.0.1");
    let plan = run(&svc(false), std::slice::from_ref(&p), &cloud);
    let w = only_write(&plan);
    assert!(w.status);
    assert_eq!(w.reason, GateReason::BackendLostAfterReady);
    assert!(w.message.contains("CONNECT_FAIL"), "{}", w.message);

    let plan = run(&svc(true), &[p], &cloud);
    let w = only_write(&plan);
    assert!(!w.status);
    assert_eq!(w.reason, GateReason::BackendUnhealthy);
}

/// A used-up account quota is its own reason, naming the quota as the cloud did and
/// how to raise it; a True gate stays True and nothing is sent.
#[test]
fn a_used_up_quota_holds_waiting_gates_with_its_own_reason() {
    let failure = CloudState::Failed(CloudFailure {
        action: "CreateLoadBalancer".into(),
        code: "QuotaExceeded".into(),
        request_id: "RID-8".into(),
        quota: Some("The quota slb_quota_instances_num (30) is used up.".into()),
    });
    let ready = pod_with_a_true_gate("ready", "10.0.0.1");
    let waiting = pod("waiting", "10.0.0.2");
    let plan = run(&svc(true), &[ready, waiting], &failure);
    assert!(plan.changes.is_empty());
    let w = only_write(&plan);
    assert_eq!(w.pod, "waiting");
    assert_eq!(w.reason, GateReason::CloudQuotaExceeded);
    assert_mentions(
        &w.message,
        &[
            "CreateLoadBalancer",
            "slb_quota_instances_num (30)",
            "Quota Center",
            "RID-8",
        ],
    );
}

#[test]
fn cloud_errors_and_a_load_balancer_not_ready_never_move_a_true_gate() {
    let failure = CloudState::Failed(CloudFailure {
        action: "DescribeHealthStatus".into(),
        code: "Throttling.User".into(),
        request_id: "RID-7".into(),
        quota: None,
    });
    let ready = pod_with_a_true_gate("ready", "10.0.0.1");
    let waiting = pod("waiting", "10.0.0.2");
    let plan = run(&svc(true), &[ready.clone(), waiting.clone()], &failure);
    assert!(plan.changes.is_empty());
    let w = only_write(&plan);
    assert_eq!(w.pod, "waiting");
    assert_eq!(w.reason, GateReason::CloudApiError);
    assert_mentions(
        &w.message,
        &["DescribeHealthStatus", "Throttling.User", "RID-7"],
    );
    let not_ready = CloudState::NotReady {
        load_balancer_id: Some("nlb-9".into()),
    };
    let plan = run(&svc(true), &[ready, waiting], &not_ready);
    let w = only_write(&plan);
    assert_eq!(w.reason, GateReason::LoadBalancerNotReady);
    assert!(w.message.contains("nlb-9"));
}

#[test]
fn a_clb_instance_that_takes_no_pod_backends_holds_every_gate_with_its_own_reason() {
    let refused = CloudState::PodBackendsRefused {
        load_balancer_id: "lb-shared".into(),
        instance: "no LoadBalancerSpec, InstanceChargeType PayBySpec".into(),
    };
    let ready = pod_with_a_true_gate("ready", "10.0.0.1");
    let waiting = [pod("a", "10.0.0.2"), pod("b", "10.0.0.3")];
    let mut pods = vec![ready];
    pods.extend(waiting.iter().cloned());
    let plan = run(&svc(false), &pods, &refused);
    // Nothing is sent to a load balancer that refuses every pod backend.
    assert!(plan.changes.is_empty());
    // Every gate not True says why, naming the instance and its spec; a True one stays.
    let written: Vec<&str> = plan.conditions.iter().map(|w| w.pod.as_str()).collect();
    assert_eq!(written, ["a", "b"]);
    for w in &plan.conditions {
        assert!(!w.status);
        assert_eq!(w.reason, GateReason::LoadBalancerTakesNoPodBackends);
        assert_mentions(
            &w.message,
            &[
                "lb-shared",
                "no LoadBalancerSpec",
                "PayBySpec",
                "slb.s1.small",
            ],
        );
    }
    assert_eq!(plan.pending_gates, 2);
    // The same pods with a usable instance are registered: the reason is the instance.
    let ready_cloud = CloudState::Ready(vec![group(vec![], &[])]);
    let plan = run(&svc(false), &waiting, &ready_cloud);
    assert_eq!(plan.changes[0].add.len(), 2);
}

#[test]
fn a_terminating_pod_drains_at_once_and_is_removed_after_the_drain_time() {
    let cloud = |weight| CloudState::Ready(vec![group(vec![owned("10.0.0.1", weight)], &[])]);
    let mut p = pod("old", "10.0.0.1");
    p.deletion = Some(Deletion {
        requested_at: at(NOW - 3),
        deadline: at(NOW + 27),
    });
    let plan = run(&svc(false), std::slice::from_ref(&p), &cloud(100));
    assert_eq!(plan.changes[0].drain, vec![owned("10.0.0.1", 0)]);
    assert!(plan.changes[0].remove.is_empty());
    assert_eq!(plan.next_deadline, Some(at(NOW + 7)));
    assert!(
        plan.conditions.is_empty(),
        "a terminating pod's gate is left alone"
    );

    // Already at weight 0: nothing to do until the deadline.
    let plan = run(&svc(false), std::slice::from_ref(&p), &cloud(0));
    assert!(plan.changes.is_empty());
    assert_eq!(plan.next_deadline, Some(at(NOW + 7)));

    // Drain time over.
    p.deletion = Some(Deletion {
        requested_at: at(NOW - 10),
        deadline: at(NOW + 20),
    });
    let plan = run(&svc(false), std::slice::from_ref(&p), &cloud(0));
    assert_eq!(plan.changes[0].remove, vec![owned("10.0.0.1", 0).key]);
}

/// With the load balancer's connection drain on for 60 s (the plan's drain time), a
/// terminating pod's backend stays at weight 0 past the 10 s default, up to the drain's
/// end or the pod's grace, whichever is first.
#[test]
fn a_long_connection_drain_keeps_the_backend_at_weight_zero_until_it_or_the_grace_ends() {
    let drain = Duration::from_secs(60);
    let cases = [
        // (grace in seconds, seconds since deletion, still draining)
        (120, 30, true),
        (120, 59, true),
        (120, 60, false),
        (45, 30, true),
        (45, 45, false),
    ];
    for (grace, elapsed, draining) in cases {
        let mut p = pod("a", "10.0.0.1");
        p.deletion = Some(Deletion {
            requested_at: at(NOW - elapsed),
            deadline: at(NOW - elapsed + grace),
        });
        let cloud = CloudState::Ready(vec![group(vec![owned("10.0.0.1", 0)], &[])]);
        let plan = plan(&PlanInput {
            service: &svc(false),
            cluster_id: CLUSTER,
            legacy_cluster_id: Some(LEGACY),
            backend_type: BackendType::Ip,
            placements: &HashMap::new(),
            pods: &[p],
            cloud: &cloud,
            drain,
            now: at(NOW),
        });
        let removed = plan.changes.iter().any(|c| !c.remove.is_empty());
        assert_eq!(
            !removed, draining,
            "grace {grace}s, {elapsed}s after deletion: {plan:?}"
        );
    }
}

#[test]
fn the_drain_never_outlives_the_pod_and_a_gone_pod_is_removed_at_once() {
    let deletion = Deletion {
        requested_at: at(NOW),
        deadline: at(NOW + 2),
    };
    assert_eq!(
        removal_time(&deletion, Duration::from_secs(10)),
        at(NOW + 2)
    );
    assert_eq!(removal_time(&deletion, Duration::from_secs(1)), at(NOW + 1));
    let cloud = CloudState::Ready(vec![group(vec![owned("10.0.0.9", 100)], &[])]);
    let plan = run(&svc(false), &[], &cloud);
    assert_eq!(plan.changes[0].remove, vec![owned("10.0.0.9", 0).key]);
}

#[test]
fn backends_rollgate_does_not_own_are_never_touched() {
    let mut other_service = owned("10.0.0.8", 100);
    other_service.description = owner_description(80, "other", "ns", CLUSTER);
    let mut other_cluster = owned("10.0.0.7", 100);
    other_cluster.description = owner_description(80, "web", "ns", "c2");
    let cloud = CloudState::Ready(vec![group(
        vec![foreign("10.0.0.6"), other_service, other_cluster],
        &[],
    )]);
    let mut leaving = pod("leaving", "10.0.0.6");
    leaving.deletion = Some(Deletion {
        requested_at: at(NOW - 100),
        deadline: at(NOW - 50),
    });
    let plan = run(&svc(false), &[leaving], &cloud);
    assert!(plan.changes.is_empty(), "{:?}", plan.changes);
}

#[test]
fn pods_not_ready_or_not_selected_are_not_registered_and_say_why() {
    let cloud = CloudState::Ready(vec![group(vec![owned("10.0.0.2", 100)], &[])]);
    let mut unready = pod("unready", "10.0.0.2");
    unready.containers_ready = false;
    let mut unselected = pod("unselected", "10.0.0.3");
    unselected.selected = false;
    let mut named = pod("noport", "10.0.0.4");
    named.ports.clear();
    let plan = run(&svc(false), &[unready, unselected, named], &cloud);
    assert_eq!(plan.changes[0].remove, vec![owned("10.0.0.2", 0).key]);
    assert!(plan.changes[0].add.is_empty());
    let reasons: BTreeMap<&str, GateReason> = plan
        .conditions
        .iter()
        .map(|w| (w.pod.as_str(), w.reason))
        .collect();
    assert_eq!(reasons["unready"], GateReason::ContainersNotReady);
    assert_eq!(reasons["unselected"], GateReason::PodNotSelected);
    assert_eq!(reasons["noport"], GateReason::TargetPortNotFound);
}

/// The Service's `weight`: new backends carry it, one at another weight (drained
/// earlier, or the annotation changed) is set to it, a terminating pod's still goes
/// to 0, and a backend already at it is left alone.
#[test]
fn backends_carry_the_services_weight_and_follow_its_changes() {
    let mut facts = svc(false);
    facts.weight = 40;
    let cloud = CloudState::Ready(vec![group(
        vec![
            owned("10.0.0.1", 0),
            owned("10.0.0.2", 100),
            owned("10.0.0.3", 40),
            owned("10.0.0.4", 40),
        ],
        &[],
    )]);
    let mut leaving = pod("d", "10.0.0.4");
    leaving.deletion = Some(Deletion {
        requested_at: at(NOW - 1),
        deadline: at(NOW + 29),
    });
    let pods = [
        pod("a", "10.0.0.1"),
        pod("b", "10.0.0.2"),
        pod("c", "10.0.0.3"),
        pod("e", "10.0.0.5"),
        leaving,
    ];
    let plan = run(&facts, &pods, &cloud);
    let c = &plan.changes[0];
    assert_eq!(c.add, vec![owned("10.0.0.5", 40)]);
    assert_eq!(
        c.restore,
        vec![owned("10.0.0.1", 40), owned("10.0.0.2", 40)],
        "drained and old-weight backends go to the Service's weight; 10.0.0.3 is left"
    );
    assert_eq!(c.drain, vec![owned("10.0.0.4", 0)]);
    assert!(c.remove.is_empty());
}

#[test]
fn a_live_pod_found_at_weight_zero_goes_back_into_rotation() {
    let cloud = CloudState::Ready(vec![group(vec![owned("10.0.0.1", 0)], &[])]);
    let plan = run(&svc(false), &[pod("a", "10.0.0.1")], &cloud);
    assert_eq!(plan.changes[0].restore, vec![owned("10.0.0.1", 100)]);
    assert!(plan.changes[0].remove.is_empty());
}

#[test]
fn gates_of_a_missing_service_say_so_once() {
    let p = pod("a", "10.0.0.1");
    let writes = plan_without_service(
        std::slice::from_ref(&p),
        GateReason::ServiceNotFound,
        "Service ns/web does not exist",
    );
    assert_eq!(writes.len(), 1);
    let mut p = p;
    p.gate = Some(GateCondition {
        status: false,
        reason: "ServiceNotFound".into(),
        message: "Service ns/web does not exist".into(),
    });
    assert!(plan_without_service(
        &[p],
        GateReason::ServiceNotFound,
        "Service ns/web does not exist"
    )
    .is_empty());
}

/// The Service deleted or turned into a ClusterIP one: its pods still serve, so a True
/// gate stays True (no outage caused by the gate), and a gate never True says why.
#[test]
fn a_true_gate_outlives_its_load_balancer_and_a_pending_one_says_why() {
    let gone = "Service ns/web does not exist";
    let ready = pod_with_a_true_gate("ready", "10.0.0.1");
    let waiting = pod("waiting", "10.0.0.2");
    for reason in [
        GateReason::ServiceNotFound,
        GateReason::ServiceNotLoadBalancer,
    ] {
        let writes = plan_without_service(&[ready.clone(), waiting.clone()], reason, gone);
        let of = |name: &str| writes.iter().find(|w| w.pod == name).unwrap();
        assert!(of("ready").status, "{reason:?}: a True gate stays True");
        assert_eq!(of("ready").reason, reason);
        assert!(
            of("ready").message.contains("stays True"),
            "{}",
            of("ready").message
        );
        assert!(!of("waiting").status);
        assert_eq!(of("waiting").message, gone);
    }
}

/// An annotation that is not valid (or an NLB without zone maps) shows on every gated
/// pod, not only in the Service's Event; a True gate stays True, a terminating or
/// ungated pod is not written, and an unchanged condition is not written again.
#[test]
fn an_invalid_annotation_shows_on_every_gated_pod_and_keeps_true_gates() {
    let problem = "annotation service.beta.kubernetes.io/alibaba-cloud-loadbalancer-zone-maps: an NLB needs at least two zones";
    let ready = pod_with_a_true_gate("ready", "10.0.0.1");
    let waiting = pod("waiting", "10.0.0.2");
    let mut no_ip = pod("no-ip", "");
    no_ip.ip = None;
    no_ip.containers_ready = false;
    let mut leaving = pod("leaving", "10.0.0.3");
    leaving.deletion = Some(Deletion {
        requested_at: at(NOW),
        deadline: at(NOW + 30),
    });
    let mut ungated = pod("ungated", "10.0.0.4");
    ungated.gated = false;
    let pods = [ready, waiting, no_ip, leaving, ungated];
    let writes = plan_invalid_annotation(&pods, problem);
    let of = |name: &str| writes.iter().find(|w| w.pod == name);
    assert_eq!(writes.len(), 3, "{writes:#?}");
    for w in &writes {
        assert_eq!(w.reason, GateReason::InvalidLoadBalancerAnnotation);
        assert!(w.message.contains(problem), "{}", w.message);
    }
    assert!(of("ready").unwrap().status, "a True gate stays True");
    assert!(of("ready").unwrap().message.contains("stays True"));
    assert!(!of("waiting").unwrap().status);
    assert!(!of("no-ip").unwrap().status);
    assert!(of("leaving").is_none() && of("ungated").is_none());
    // Written once: the same condition is not written again.
    let mut written = pods[1].clone();
    written.gate = Some(GateCondition {
        status: false,
        reason: "InvalidLoadBalancerAnnotation".into(),
        message: problem.into(),
    });
    assert!(plan_invalid_annotation(&[written], problem).is_empty());
}

/// Every cause follows the flip-back setting, the pod's own containers included: with
/// the default a True gate stays True while the containers blip, so the pod is Ready
/// again as soon as they are.
#[test]
fn a_true_gate_follows_flip_back_when_the_containers_blip() {
    let cloud = CloudState::Ready(vec![group(
        vec![owned("10.0.0.1", 100)],
        &[("10.0.0.1", HealthState::Healthy)],
    )]);
    let mut p = pod_with_a_true_gate("a", "10.0.0.1");
    p.containers_ready = false;
    let plan = run(&svc(false), std::slice::from_ref(&p), &cloud);
    let w = only_write(&plan);
    assert!(w.status, "kept True by default");
    assert_eq!(w.reason, GateReason::BackendLostAfterReady);
    assert!(w.message.contains("ContainersNotReady"), "{}", w.message);

    let plan = run(&svc(true), &[p], &cloud);
    let w = only_write(&plan);
    assert!(!w.status, "flipped with the opt-in");
    assert_eq!(w.reason, GateReason::ContainersNotReady);
}

#[test]
fn gate_names_map_to_services() {
    assert_eq!(
        gate_condition_type("my-svc"),
        "service.readiness.alibabacloud.com/my-svc"
    );
    assert_eq!(
        service_of_gate("service.readiness.alibabacloud.com/my-svc"),
        Some("my-svc")
    );
    assert_eq!(service_of_gate("service.readiness.alibabacloud.com/"), None);
    assert_eq!(service_of_gate("example.com/x"), None);
}

// CLB: pods are registered as the server their IP lives on (ENI or ECI), never as `ip`.

fn run_clb(
    pods: &[GatePod],
    cloud: &CloudState,
    placements: &HashMap<String, Placement>,
) -> GatePlan {
    plan(&PlanInput {
        service: &svc(false),
        cluster_id: CLUSTER,
        legacy_cluster_id: Some(LEGACY),
        backend_type: BackendType::Eni,
        placements,
        pods,
        cloud,
        drain: Duration::from_secs(10),
        now: at(NOW),
    })
}

fn on_eni(ip: &str, eni: &str, weight: u32) -> Backend {
    Backend {
        key: BackendKey {
            server_id: eni.into(),
            ip: ip.into(),
            port: 8080,
        },
        kind: BackendType::Eni,
        weight,
        description: owner_description(80, "web", "ns", CLUSTER),
    }
}

fn placed(entries: &[(&str, Placement)]) -> HashMap<String, Placement> {
    entries
        .iter()
        .map(|(ip, p)| (ip.to_string(), p.clone()))
        .collect()
}

fn eni(id: &str) -> Placement {
    Placement::Server {
        kind: BackendType::Eni,
        id: id.into(),
    }
}

#[test]
fn clb_registers_eni_and_eci_servers_with_the_pod_ip() {
    let pods = [pod("a", "10.0.0.1"), pod("b", "10.0.0.2")];
    let placements = placed(&[
        ("10.0.0.1", eni("eni-a")),
        (
            "10.0.0.2",
            Placement::Server {
                kind: BackendType::Eci,
                id: "eci-b".into(),
            },
        ),
    ]);
    let cloud = CloudState::Ready(vec![group(vec![], &[])]);
    let out = run_clb(&pods, &cloud, &placements);
    assert_eq!(out.changes.len(), 1);
    let add = &out.changes[0].add;
    assert_eq!(add.len(), 2, "{add:?}");
    assert_eq!(add[0], on_eni("10.0.0.1", "eni-a", 100));
    assert_eq!(add[1].kind, BackendType::Eci);
    assert_eq!(add[1].key.server_id, "eci-b");
    assert_eq!(add[1].key.ip, "10.0.0.2");
    assert!(add.iter().all(|b| b.kind != BackendType::Ip));
}

#[test]
fn clb_gate_turns_true_on_the_eni_backend_being_healthy() {
    let pods = [pod("a", "10.0.0.1")];
    let placements = placed(&[("10.0.0.1", eni("eni-a"))]);
    let mut g = group(vec![on_eni("10.0.0.1", "eni-a", 100)], &[]);
    g.health
        .insert(on_eni("10.0.0.1", "eni-a", 100).key, HealthState::Healthy);
    let out = run_clb(&pods, &CloudState::Ready(vec![g]), &placements);
    assert!(out.changes.is_empty(), "{:?}", out.changes);
    let w = only_write(&out);
    assert!(w.status);
    assert_eq!(w.reason, GateReason::LoadBalancerHealthy);
}

#[test]
fn clb_pod_outside_the_vpc_is_not_registered_and_says_why() {
    let pods = [pod("a", "172.16.0.1")];
    let placements = placed(&[("172.16.0.1", Placement::OutsideVpc)]);
    let out = run_clb(
        &pods,
        &CloudState::Ready(vec![group(vec![], &[])]),
        &placements,
    );
    assert!(out.changes.is_empty(), "{:?}", out.changes);
    let w = only_write(&out);
    assert!(!w.status);
    assert_eq!(w.reason, GateReason::PodIpOutsideVpc);
    assert!(w.message.contains("172.16.0.1"), "{}", w.message);
    assert!(w.message.contains("CIDR"), "{}", w.message);
}

#[test]
fn clb_pod_without_an_eni_waits_and_a_registered_backend_is_kept() {
    // No ENI found (unknown, or a lookup that lost the IP): nothing is added, and the
    // backend registered earlier is not removed on that account.
    let pods = [pod("a", "10.0.0.1"), pod("b", "10.0.0.2")];
    let placements = HashMap::new();
    let g = group(vec![on_eni("10.0.0.2", "eni-b", 100)], &[]);
    let out = run_clb(&pods, &CloudState::Ready(vec![g]), &placements);
    assert!(out.changes.is_empty(), "{:?}", out.changes);
    assert_eq!(out.conditions.len(), 2);
    for w in &out.conditions {
        assert!(!w.status);
        assert_eq!(w.reason, GateReason::EniNotFound, "{w:?}");
    }
}

#[test]
fn clb_pod_ip_moved_to_another_eni_is_re_registered() {
    let pods = [pod("a", "10.0.0.1")];
    let placements = placed(&[("10.0.0.1", eni("eni-new"))]);
    let g = group(vec![on_eni("10.0.0.1", "eni-old", 100)], &[]);
    let out = run_clb(&pods, &CloudState::Ready(vec![g]), &placements);
    assert_eq!(out.changes.len(), 1);
    assert_eq!(out.changes[0].add, vec![on_eni("10.0.0.1", "eni-new", 100)]);
    assert_eq!(
        out.changes[0].remove,
        vec![on_eni("10.0.0.1", "eni-old", 100).key]
    );
}

#[test]
fn clb_terminating_pod_drains_its_eni_backend_without_a_lookup() {
    let mut p = pod("a", "10.0.0.1");
    p.deletion = Some(Deletion {
        requested_at: at(NOW - 1),
        deadline: at(NOW + 30),
    });
    let g = group(vec![on_eni("10.0.0.1", "eni-a", 100)], &[]);
    let out = run_clb(&[p], &CloudState::Ready(vec![g]), &HashMap::new());
    assert_eq!(out.changes.len(), 1);
    assert_eq!(out.changes[0].drain, vec![on_eni("10.0.0.1", "eni-a", 0)]);
    assert!(out.changes[0].remove.is_empty());
}

#[test]
fn no_gate_turns_true_while_the_listener_forwards_to_another_group() {
    let pods = [pod("a", "10.0.0.1")];
    let mut g = group(
        vec![owned("10.0.0.1", 100)],
        &[("10.0.0.1", HealthState::Healthy)],
    );
    g.listener = "lsn-1".into();
    g.listener_target = Some("sgp-other".into());
    let out = run(&svc(false), &pods, &CloudState::Ready(vec![g.clone()]));
    let w = only_write(&out);
    assert!(!w.status);
    assert_eq!(w.reason, GateReason::ListenerNotForwarding);
    assert!(w.message.contains("lsn-1"), "{}", w.message);
    assert!(w.message.contains("sgp-other"), "{}", w.message);
    // The control: the same group with the listener pointing at it turns True.
    g.listener_target = Some("rsp-1".into());
    let out = run(&svc(false), &pods, &CloudState::Ready(vec![g]));
    assert!(only_write(&out).status);
}

#[test]
fn a_port_without_a_listener_holds_the_gate_too() {
    let pods = [pod("a", "10.0.0.1")];
    let mut g = group(
        vec![owned("10.0.0.1", 100)],
        &[("10.0.0.1", HealthState::Healthy)],
    );
    g.listener_target = None;
    let out = run(&svc(false), &pods, &CloudState::Ready(vec![g]));
    let w = only_write(&out);
    assert!(!w.status);
    assert_eq!(w.reason, GateReason::ListenerNotForwarding);
}

/// TCP and UDP on one port: two groups, each gets the pod (before, the port number alone
/// picked one group, so the other protocol's group was never filled and the gate
/// judged the pod by one of them only).
#[test]
fn tcp_and_udp_on_one_port_fill_their_own_groups() {
    let mut service = svc(false);
    service.ports = vec![
        ServicePort {
            port: 53,
            protocol: "TCP".into(),
            target: TargetPort::Number(8053),
        },
        ServicePort {
            port: 53,
            protocol: "UDP".into(),
            target: TargetPort::Name("dns".into()),
        },
    ];
    let tcp = GroupState {
        service_port: 53,
        listener: "TCP:53".into(),
        ..group(vec![], &[])
    };
    let udp = GroupState {
        service_port: 53,
        protocol: "UDP".into(),
        server_group_id: "rsp-udp".into(),
        listener: "UDP:53".into(),
        listener_target: Some("rsp-udp".into()),
        ..group(vec![], &[])
    };
    let mut dns = pod("a", "10.0.0.1");
    dns.ports.push(PodPort {
        name: Some("dns".into()),
        container_port: 5353,
        protocol: "UDP".into(),
    });
    let plan = run(&service, &[dns], &CloudState::Ready(vec![tcp, udp]));
    let added: Vec<(&str, u16)> = plan
        .changes
        .iter()
        .flat_map(|c| {
            c.add
                .iter()
                .map(|b| (c.server_group_id.as_str(), b.key.port))
        })
        .collect();
    assert_eq!(
        added,
        vec![("rsp-1", 8053), ("rsp-udp", 5353)],
        "{:#?}",
        plan.changes
    );
    let w = only_write(&plan);
    assert!(
        w.message.contains("rsp-1") && w.message.contains("rsp-udp"),
        "{}",
        w.message
    );
}

/// A backend an earlier version registered (legacy marker, former cluster id).
fn legacy(ip: &str, weight: u32) -> Backend {
    Backend {
        description: legacy_owner_description(80, "web", "ns", LEGACY),
        ..owned(ip, weight)
    }
}

#[test]
fn a_legacy_backend_of_a_live_pod_is_adopted_once_by_re_marking_it() {
    let cloud = CloudState::Ready(vec![group(vec![legacy("10.0.0.1", 100)], &[])]);
    let plan = run(&svc(false), &[pod("a", "10.0.0.1")], &cloud);
    assert_eq!(plan.changes.len(), 1, "{:?}", plan.changes);
    let c = &plan.changes[0];
    assert!(c.add.is_empty() && c.remove.is_empty(), "{c:?}");
    assert_eq!(
        c.restore,
        vec![owned("10.0.0.1", 100)],
        "re-marked in place"
    );
    // Once re-marked, nothing more is done to it.
    let cloud = CloudState::Ready(vec![group(vec![owned("10.0.0.1", 100)], &[])]);
    let plan = run(&svc(false), &[pod("a", "10.0.0.1")], &cloud);
    assert!(plan.changes.is_empty(), "{:?}", plan.changes);
}

#[test]
fn a_legacy_backend_of_no_live_pod_is_removed_and_a_terminating_one_drains() {
    let cloud = CloudState::Ready(vec![group(
        vec![legacy("10.0.0.9", 100), legacy("10.0.0.2", 100)],
        &[],
    )]);
    let mut leaving = pod("b", "10.0.0.2");
    leaving.deletion = Some(Deletion {
        requested_at: at(NOW),
        deadline: at(NOW + 30),
    });
    let plan = run(&svc(false), &[leaving], &cloud);
    let c = &plan.changes[0];
    assert_eq!(c.remove, vec![legacy("10.0.0.9", 0).key]);
    assert_eq!(c.drain.len(), 1, "{c:?}");
    assert_eq!(
        (c.drain[0].key.ip.as_str(), c.drain[0].weight),
        ("10.0.0.2", 0)
    );
}

#[test]
fn legacy_markers_of_another_id_or_with_adoption_off_are_never_touched() {
    let mut other_cluster = legacy("10.0.0.7", 100);
    other_cluster.description = legacy_owner_description(80, "web", "ns", "c2");
    let mut other_service = legacy("10.0.0.8", 100);
    other_service.description = legacy_owner_description(80, "api", "ns", LEGACY);
    let cloud = CloudState::Ready(vec![group(vec![other_cluster, other_service], &[])]);
    assert!(run(&svc(false), &[], &cloud).changes.is_empty());
    let cloud = CloudState::Ready(vec![group(vec![legacy("10.0.0.9", 100)], &[])]);
    let plan = plan(&PlanInput {
        service: &svc(false),
        cluster_id: CLUSTER,
        legacy_cluster_id: None,
        backend_type: BackendType::Ip,
        placements: &HashMap::new(),
        pods: &[],
        cloud: &cloud,
        drain: Duration::from_secs(10),
        now: at(NOW),
    });
    assert!(plan.changes.is_empty(), "{:?}", plan.changes);
}

/// [`svc`] with `rollgate.io/readiness-gate-timeout` of `seconds`.
fn svc_timing_out(seconds: u64) -> ServiceFacts {
    ServiceFacts {
        gate_timeout: Some(Duration::from_secs(seconds)),
        ..svc(false)
    }
}

fn unhealthy() -> HealthState {
    HealthState::Unhealthy {
        reason: "CONNECT_TIMEOUT".into(),
    }
}

#[test]
fn a_gate_times_out_only_once_its_timeout_has_passed_since_the_containers_turned_ready() {
    // Containers ready 30 s before NOW (see `pod`); the backend unhealthy all along.
    let cloud = CloudState::Ready(vec![group(
        vec![owned("10.0.0.1", 100)],
        &[("10.0.0.1", unhealthy())],
    )]);
    let pods = [pod("a", "10.0.0.1")];

    // No timeout set: it waits, however long.
    let w = only_write(&run(&svc(false), &pods, &cloud)).clone();
    assert!(!w.status);
    assert_eq!(w.reason, GateReason::BackendUnhealthy);

    // 31 s: not yet; the plan asks to be back when it is due.
    let waiting = run(&svc_timing_out(31), &pods, &cloud);
    let w = only_write(&waiting);
    assert!(!w.status);
    assert_eq!(w.reason, GateReason::BackendUnhealthy);
    assert_eq!(waiting.pending_gates, 1);
    assert_eq!(waiting.next_deadline, Some(at(NOW + 1)));

    // 30 s: due now. True, naming what it waited on, and pending no more.
    let timed_out = run(&svc_timing_out(30), &pods, &cloud);
    let w = only_write(&timed_out);
    assert!(w.status);
    assert_eq!(w.reason, GateReason::GateTimedOut);
    assert_mentions(
        &w.message,
        &[
            "30s",
            "rollgate.io/readiness-gate-timeout",
            "BackendUnhealthy",
            "CONNECT_TIMEOUT",
        ],
    );
    assert_eq!(timed_out.pending_gates, 0);
    assert_eq!(timed_out.next_deadline, None);
}

#[test]
fn a_timed_out_gate_stays_true_without_rewrites_and_a_healthy_backend_takes_over() {
    let sick = CloudState::Ready(vec![group(
        vec![owned("10.0.0.1", 100)],
        &[("10.0.0.1", unhealthy())],
    )]);
    let first = run(&svc_timing_out(10), &[pod("a", "10.0.0.1")], &sick);
    let w = only_write(&first).clone();
    let mut timed_out = pod("a", "10.0.0.1");
    timed_out.gate = Some(GateCondition {
        status: true,
        reason: w.reason.as_str().into(),
        message: w.message.clone(),
    });
    // The same look again: nothing to write (so one Warning per flip, not per look).
    let again = run(&svc_timing_out(10), std::slice::from_ref(&timed_out), &sick);
    assert!(again.conditions.is_empty(), "{:#?}", again.conditions);
    // With flip-back on, still True: the timeout holds as long as the containers are ready.
    let flip_back = ServiceFacts {
        flip_back: true,
        ..svc_timing_out(10)
    };
    assert!(run(&flip_back, std::slice::from_ref(&timed_out), &sick)
        .conditions
        .is_empty());
    // Healthy at last: the reason says so.
    let well = CloudState::Ready(vec![group(
        vec![owned("10.0.0.1", 100)],
        &[("10.0.0.1", HealthState::Healthy)],
    )]);
    let w = only_write(&run(&svc_timing_out(10), &[timed_out], &well)).clone();
    assert!(w.status);
    assert_eq!(w.reason, GateReason::LoadBalancerHealthy);
}

#[test]
fn no_timeout_runs_while_the_containers_are_not_ready() {
    let cloud = CloudState::Ready(vec![group(vec![], &[])]);
    let mut starting = pod("a", "10.0.0.1");
    starting.containers_ready = false;
    let plan = run(&svc_timing_out(1), &[starting], &cloud);
    let w = only_write(&plan);
    assert!(!w.status);
    assert_eq!(w.reason, GateReason::ContainersNotReady);
    assert_eq!(plan.next_deadline, None);
}

/// The fail-open exists for a cloud that does not answer: a failed read or a load
/// balancer never ready times out like an unhealthy backend.
#[test]
fn gates_held_by_a_cloud_failure_time_out_too() {
    let failed = CloudState::Failed(CloudFailure {
        action: "DescribeHealthStatus".into(),
        code: "ServiceUnavailable".into(),
        request_id: "req-1".into(),
        quota: None,
    });
    let not_ready = CloudState::NotReady {
        load_balancer_id: None,
    };
    for (cloud, held) in [
        (failed, GateReason::CloudApiError),
        (not_ready, GateReason::LoadBalancerNotReady),
    ] {
        let pods = [pod("a", "10.0.0.1")];
        let waiting = run(&svc_timing_out(60), &pods, &cloud);
        let w = only_write(&waiting);
        assert_eq!((w.status, w.reason), (false, held));
        assert_eq!(waiting.next_deadline, Some(at(NOW + 30)));
        let w = only_write(&run(&svc_timing_out(20), &pods, &cloud)).clone();
        assert_eq!((w.status, w.reason), (true, GateReason::GateTimedOut));
        assert!(w.message.contains(held.as_str()), "{}", w.message);
    }
}
