//! Load-balancer readiness gates end to end: a real kube-apiserver, kube-controller-manager
//! (Deployments, ReplicaSets), kube-scheduler and simulated nodes, `rollgate controller`
//! with the RBAC of `deploy/`, and the CLB/NLB emulator (the `lb-emulator` process,
//! simulated health mode: a backend turns healthy a fixed time after it is registered).
//! The bed and its probes live in `tests/support/gated.rs` (`Bed`); this file holds
//! the tests.
//!
//! What the tests judge comes from the emulator's own state and timeline, not from the
//! controller's view. Nothing connects to pod IPs: the emulator only simulates health.
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use lb_emulator::EmulatorConfig;
use serde_json::{json, Value};
use support::gated::*;
use support::*;

/// The seed's walk-through on CLB: EXTERNAL-IP appears; pods go 0/1 -> 1/1 only after
/// the emulator reports them healthy; `rollout restart` completes; no orphan backend;
/// deleting the Service deletes the load balancer rollgate created and the finalizer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn clb_walk_through() {
    walk_through("clb", None, json!({})).await;
}

/// The same on NLB (`loadBalancerClass: alibabacloud.com/nlb`, zone-maps annotation).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn nlb_walk_through() {
    walk_through(
        "nlb",
        Some("alibabacloud.com/nlb"),
        json!({"service.beta.kubernetes.io/alibaba-cloud-loadbalancer-zone-maps": "cn-hangzhou-k:vsw-k,cn-hangzhou-j:vsw-j"}),
    )
    .await;
}

async fn walk_through(prefix: &str, class: Option<&str>, annotations: Value) {
    let bed = Bed::new(&format!("gates-{prefix}"), 2, fast_emulator(), &[]).await;
    bed.create_service("my-svc", "nginx", class, annotations)
        .await;
    let address = bed.wait_external_ip("my-svc").await;
    note(format!("EXTERNAL-IP {address}"));
    let svc = bed.services().get("my-svc").await.unwrap();
    assert!(svc
        .finalizers()
        .iter()
        .any(|f| f == "rollgate.io/load-balancer"));
    let created = svc
        .annotations()
        .get("rollgate.io/created-load-balancer-id")
        .cloned();
    assert!(
        created.is_some(),
        "the created load balancer is recorded: {:?}",
        svc.annotations()
    );

    bed.create_deployment("my-nginx", "nginx", 2, &["my-svc"], 1, 0)
        .await;
    let seen_pending =
        wait_rollout(&bed, "my-nginx", "nginx", "my-svc", Duration::from_secs(90)).await;
    assert_eq!(
        seen_pending.len(),
        2,
        "both pods were seen at 0/1 first: {seen_pending:?}"
    );
    for pod in bed.app_pods("nginx").await {
        let (status, reason, message) = gate_status(&pod, "my-svc").unwrap();
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("True", "LoadBalancerHealthy"),
            "{message}"
        );
        assert!(message.contains(created.as_deref().unwrap()), "{message}");
        // `kubectl get pod -o yaml --show-managed-fields`: rollgate's one field manager
        // owns the gate condition it wrote.
        assert_condition_managed_by_rollgate(&pod, &format!("{GATE_PREFIX}my-svc"));
    }
    if class.is_none() {
        assert_registered_as_their_enis(&bed, "nginx").await;
    }
    note("2/2 pods 1/1; rollout restart");
    restart(&bed, "my-nginx").await;
    let seen = wait_rollout(
        &bed,
        "my-nginx",
        "nginx",
        "my-svc",
        Duration::from_secs(120),
    )
    .await;
    assert_eq!(seen.len(), 2, "both new pods waited at 0/1 too: {seen:?}");
    wait_no_orphans(&bed, "nginx", "my-svc").await;
    if class.is_none() {
        assert_registered_as_their_enis(&bed, "nginx").await;
    }
    let metrics = bed.metrics().await;
    for series in [
        "rollgate_gate_flip_latency_seconds_count{namespace=",
        "rollgate_gate_cloud_api_calls_total{action=\"AddBackends\",result=\"success\"}",
        "rollgate_gate_backends{namespace=",
        "rollgate_gate_pending{namespace=",
    ] {
        assert!(
            metrics.contains(series),
            "/metrics lacks {series}:\n{metrics}"
        );
    }

    note("deleting the Service");
    bed.delete_service("my-svc").await;
    // The pods still serve (other Services, the ClusterIP that replaced the load
    // balancer): their True gates stay True and say the Service is gone. Turning them
    // False would take every pod out of every endpoint list at once.
    let pods = wait_gate(
        &bed,
        "nginx",
        "my-svc",
        "gates still True, saying ServiceNotFound",
        |s, r| s == "True" && r == "ServiceNotFound",
    )
    .await;
    assert!(
        pods.iter().all(pod_is_ready),
        "every pod stays Ready after its load balancer's Service is deleted"
    );
    let state = bed.emulator("state").await;
    let key = if class.is_some() { "nlb" } else { "clb" };
    let remaining: Vec<&str> = state[key]["load_balancers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|lb| lb["id"].as_str())
        .collect();
    assert!(
        !remaining.contains(&created.as_deref().unwrap()),
        "the created load balancer was deleted: {remaining:?}"
    );
    bed.cleanup().await;
}

/// CLB: every pod of `app` is in the group as an `eni` backend whose id is the ENI that
/// holds the pod's IP in the emulator's inventory (none as `ip`, which CLB lacks).
async fn assert_registered_as_their_enis(bed: &Bed, app: &str) {
    let state = bed.emulator("state").await;
    let eni_of = |ip: &str| -> Option<String> {
        state["ecs"]["network_interfaces"]
            .as_array()?
            .iter()
            .find(|e| {
                e["private_ips"]
                    .as_array()
                    .is_some_and(|ips| ips.iter().any(|i| i == ip))
            })
            .and_then(|e| e["network_interface_id"].as_str())
            .map(str::to_string)
    };
    let backends: Vec<EmuBackend> = bed
        .backends()
        .await
        .into_iter()
        .filter(|b| b.product == "clb")
        .collect();
    for pod in bed.app_pods(app).await {
        let ip = pod_ip(&pod).unwrap();
        let eni = eni_of(&ip).unwrap_or_else(|| panic!("no ENI holds {ip}"));
        assert!(
            backends
                .iter()
                .any(|b| b.ip == ip && b.kind == "eni" && b.server_id == eni),
            "pod {} ({ip}) is not registered as {eni}: {backends:?}",
            pod.name_any()
        );
    }
    assert!(
        backends.iter().all(|b| b.kind == "eni"),
        "only ENI backends: {backends:?}"
    );
}

/// A pod that runs as an elastic container instance (the system's
/// `k8s.aliyun.com/eci-instance-id` annotation) is registered on CLB as that instance
/// (`eci`), with its IP, and its gate turns True on the instance being healthy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn an_eci_pod_is_registered_as_its_instance() {
    let bed = Bed::new("gates-eci", 1, fast_emulator(), &[]).await;
    bed.create_service("web", "web", None, json!({})).await;
    bed.wait_external_ip("web").await;
    let eci_id = "eci-e2e0web0001";
    bed.create_annotated_deployment(
        "web",
        "web",
        1,
        &["web"],
        (1, 0),
        json!({ECI_INSTANCE_ID_ANNOTATION: eci_id}),
    )
    .await;
    let ip = wait_for("the pod's IP", Duration::from_secs(60), || async {
        let pods = bed.app_pods("web").await;
        pods.first()
            .and_then(pod_ip)
            .ok_or_else(|| "no IP yet".to_string())
    })
    .await;
    // What the virtual node's instance is in the cloud: running, with the pod's IP.
    bed.emulator_post(
        "ecis",
        json!({"ip": ip, "container_group_id": eci_id, "vpc_id": VPC_ID}),
    )
    .await;
    wait_gate(&bed, "web", "web", "the ECI pod's gate True", |s, _| {
        s == "True"
    })
    .await;
    let backends = bed.backends().await;
    let ours: Vec<&EmuBackend> = backends.iter().filter(|b| b.ip == ip).collect();
    assert_eq!(ours.len(), 1, "{backends:?}");
    assert_eq!(
        (ours[0].kind.as_str(), ours[0].server_id.as_str()),
        ("eci", eci_id),
        "{backends:?}"
    );
    assert!(ours[0].healthy, "{backends:?}");
    bed.cleanup().await;
}

/// Pods whose IPs are outside the VPC's CIDR blocks (an overlay network) are never
/// registered: their gates say why, with a reason of their own, and the Service gets
/// one Warning Event naming them, not one per reconcile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn pods_outside_the_vpc_are_not_registered_and_the_service_says_so_once() {
    let bed = Bed::new(
        "gates-outside",
        1,
        fast_emulator(),
        &[("ROLLGATE_CLOUD_VPC_ID", "vpc-narrow")],
    )
    .await;
    // The cluster's VPC is 192.168.0.0/16; the bed's pods get 10.x IPs.
    bed.emulator_post(
        "vpcs",
        json!({"vpc_id": "vpc-narrow", "cidr_block": "192.168.0.0/16"}),
    )
    .await;
    let pods = bed
        .create_held_app("web", None, json!({}), 2, "PodIpOutsideVpc")
        .await;
    // The Service itself is served: only the pods are refused.
    bed.wait_external_ip("web").await;
    for (pod, message) in &pods {
        let ip = pod_ip(pod).unwrap();
        assert!(message.contains(&ip), "{message}");
        assert!(message.contains("outside the VPC"), "{message}");
    }
    // Several reconciles later: still nothing registered, and one Event.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let backends = bed.backends().await;
    assert!(backends.is_empty(), "{backends:?}");
    let records = event_records(&bed.client, &bed.ns.name, "web").await;
    let warnings: Vec<_> = records
        .iter()
        .filter(|r| r.reason == "PodIpOutsideVpc")
        .collect();
    assert_eq!(warnings.len(), 1, "{records:?}");
    assert_eq!(warnings[0].occurrences, 1, "{records:?}");
    for (pod, _) in &pods {
        assert!(
            warnings[0].note.contains(&pod.name_any()),
            "{}",
            warnings[0].note
        );
    }
    bed.cleanup().await;
}

/// A gate naming a Service that does not exist: the reason says so, and the pod gets
/// exactly one Warning Event (not one per reconcile: `series` stays unset or at 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn a_gate_naming_a_missing_service_says_so_once() {
    let bed = Bed::new("gates-missing", 1, fast_emulator(), &[]).await;
    bed.create_deployment("orphan", "orphan", 1, &["no-such-svc"], 1, 0)
        .await;
    let pod = wait_for(
        "the ServiceNotFound reason",
        Duration::from_secs(60),
        || async {
            let pods = bed.app_pods("orphan").await;
            let pod = pods.into_iter().next().ok_or("no pod yet")?;
            match gate_status(&pod, "no-such-svc") {
                Some((s, r, m)) if s == "False" && r == "ServiceNotFound" => {
                    assert!(m.contains("no-such-svc"), "{m}");
                    Ok(pod)
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    // Let several reconciles and pod updates pass.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let records = event_records(&bed.client, &bed.ns.name, &pod.name_any()).await;
    let warnings: Vec<_> = records
        .iter()
        .filter(|r| r.reason == "ServiceNotFound")
        .collect();
    assert_eq!(warnings.len(), 1, "{records:?}");
    assert_eq!(warnings[0].occurrences, 1, "{records:?}");
    bed.cleanup().await;
}

/// With `--load-balancer-classes rollgate`, a Service of no class (Alibaba's cloud
/// controller's) is never touched: no finalizer, no annotation, no status, no cloud call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn a_service_outside_the_class_selection_is_never_touched() {
    let bed = Bed::new(
        "gates-classes",
        1,
        fast_emulator(),
        &[("ROLLGATE_LOAD_BALANCER_CLASSES", "rollgate")],
    )
    .await;
    bed.create_service("theirs", "theirs", None, json!({}))
        .await;
    bed.create_service("ours", "ours", Some("rollgate.io/clb"), json!({}))
        .await;
    bed.wait_external_ip("ours").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let theirs = bed.services().get("theirs").await.unwrap();
    assert!(theirs.finalizers().is_empty(), "{:?}", theirs.finalizers());
    assert!(!theirs
        .annotations()
        .keys()
        .any(|k| k.starts_with("rollgate.io/")));
    assert!(theirs
        .status
        .and_then(|s| s.load_balancer)
        .and_then(|lb| lb.ingress)
        .is_none_or(|i| i.is_empty()));
    let state = bed.emulator("state").await;
    assert_eq!(
        state["clb"]["load_balancers"].as_array().unwrap().len(),
        1,
        "only ours got a load balancer"
    );
    bed.cleanup().await;
}

/// Scale-down: weight 0 first, removal after the drain time; the timeline shows the order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn a_removed_pod_is_drained_before_it_is_deregistered() {
    let bed = Bed::new("gates-drain", 2, fast_emulator(), &[]).await;
    bed.create_service("web", "web", None, json!({})).await;
    bed.wait_external_ip("web").await;
    bed.create_deployment("web", "web", 3, &["web"], 1, 0).await;
    wait_rollout(&bed, "web", "web", "web", Duration::from_secs(90)).await;
    bed.scale("web", 1).await;
    wait_for("two pods gone", Duration::from_secs(60), || async {
        let n = bed.app_pods("web").await.len();
        if n == 1 {
            Ok(())
        } else {
            Err(format!("{n} pods"))
        }
    })
    .await;
    wait_no_orphans(&bed, "web", "web").await;
    let timeline = bed.emulator("timeline").await;
    let mut by_ip: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in timeline["events"].as_array().unwrap() {
        let detail = e["detail"].as_str().unwrap_or_default();
        let event = e["event"].as_str().unwrap_or_default();
        let label = if event == "weight-changed" {
            format!("weight-changed {detail}")
        } else {
            event.to_string()
        };
        by_ip
            .entry(e["ip"].as_str().unwrap().to_string())
            .or_default()
            .push(label);
    }
    let removed: Vec<_> = by_ip
        .iter()
        .filter(|(_, evs)| evs.iter().any(|e| e == "removed"))
        .collect();
    assert_eq!(removed.len(), 2, "{by_ip:#?}");
    for (ip, events) in removed {
        let drained = events
            .iter()
            .position(|e| e.starts_with("weight-changed"))
            .unwrap_or_else(|| panic!("{ip} was never drained: {events:?}"));
        let gone = events.iter().position(|e| e == "removed").unwrap();
        assert!(drained < gone, "{ip}: {events:?}");
    }
    bed.cleanup().await;
}

/// The capacity proof: a rollout of 6 replicas (maxUnavailable 1, maxSurge 1) with a
/// registration delay of 1 s and a health delay of 3 s. From the emulator's timeline,
/// healthy registered backends never drop below replicas - maxUnavailable with gates;
/// without gates (the control) they do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn gates_keep_capacity_during_a_rollout_and_their_absence_does_not() {
    let emulator = EmulatorConfig {
        registration_delay: Duration::from_secs(1),
        health_delay: Duration::from_secs(3),
        ..fast_emulator()
    };
    let bed = Bed::new("gates-capacity", 3, emulator, &[]).await;
    let mut results = vec![];
    for (app, gated) in [("gated", true), ("plain", false)] {
        bed.create_service(app, app, None, json!({})).await;
        bed.wait_external_ip(app).await;
        let gates: &[&str] = if gated { &[app] } else { &[] };
        bed.create_deployment(app, app, 6, gates, 1, 1).await;
        wait_rollout(&bed, app, app, app, Duration::from_secs(120)).await;
        wait_for(
            "all 6 backends healthy",
            Duration::from_secs(30),
            || async {
                let owner = owner(80, app, &bed.ns.name);
                let healthy = bed
                    .backends()
                    .await
                    .into_iter()
                    .filter(|b| b.description == owner && b.healthy && b.weight > 0)
                    .count();
                if healthy == 6 {
                    Ok(())
                } else {
                    Err(format!("{healthy} healthy"))
                }
            },
        )
        .await;
        let group = bed
            .backends()
            .await
            .into_iter()
            .find(|b| b.description == owner(80, app, &bed.ns.name))
            .unwrap()
            .group;
        let start = bed.emulator("timeline").await["events"]
            .as_array()
            .unwrap()
            .len();
        restart(&bed, app).await;
        wait_rollout(&bed, app, app, app, Duration::from_secs(180)).await;
        wait_no_orphans(&bed, app, app).await;
        let timeline = bed.emulator("timeline").await;
        let events = &timeline["events"].as_array().unwrap()[start..];
        let (min, trace) = min_healthy(events, &group, 6);
        note(format!("{app}: lowest healthy registered backends during the rollout: {min} (replicas 6, maxUnavailable 1)"));
        results.push((gated, min, trace));
    }
    println!(
        "capacity proof: with gates min healthy = {}, without gates = {} (target >= 5)",
        results[0].1, results[1].1
    );
    // `make bench` runs this scenario too and keeps its figures (the gates.* keys).
    if std::env::var_os("ROLLGATE_BENCH_RECORD").is_some() {
        merge_bench_results(&[
            ("gates.min_healthy_with_gates", json!(results[0].1)),
            ("gates.min_healthy_without_gates", json!(results[1].1)),
        ])
        .expect("recording the capacity proof in the bench results");
    }
    assert!(
        results[0].1 >= 5,
        "with gates capacity dropped to {}:\n{}",
        results[0].1,
        results[0].2.join("\n")
    );
    assert!(
        results[1].1 < 5,
        "without gates capacity should drop (control): {}",
        results[1].1
    );
    bed.cleanup().await;
}

/// A Service changed from LoadBalancer to ClusterIP (the cluster now reaches the pods
/// another way): the pods stay Ready, their gates True with a reason that says the
/// Service is no longer a load balancer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn a_service_turned_cluster_ip_keeps_its_pods_ready() {
    let bed = Bed::new("gates-to-clusterip", 1, fast_emulator(), &[]).await;
    bed.create_service("web", "web", None, json!({})).await;
    bed.create_deployment("web", "web", 2, &["web"], 1, 1).await;
    wait_rollout(&bed, "web", "web", "web", Duration::from_secs(90)).await;
    bed.services()
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"type": "ClusterIP"}})),
        )
        .await
        .unwrap();
    let pods = wait_gate(
        &bed,
        "web",
        "web",
        "gates still True, saying ServiceNotLoadBalancer",
        |s, r| s == "True" && r == "ServiceNotLoadBalancer",
    )
    .await;
    assert_eq!(pods.len(), 2);
    assert!(
        pods.iter().all(pod_is_ready),
        "no pod leaves Ready when its Service stops being a load balancer"
    );
    bed.cleanup().await;
}

/// An NLB Service without zone maps (nothing can be created): every gated pod's
/// condition says so, naming the annotation and its accepted form, not only the
/// Service's Event (the troubleshooting step reads the pod). Once the annotation is
/// fixed the gates turn True.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn an_invalid_annotation_shows_on_every_gated_pod() {
    const ZONES: &str = "service.beta.kubernetes.io/alibaba-cloud-loadbalancer-zone-maps";
    let bed = Bed::new("gates-invalid", 1, fast_emulator(), &[]).await;
    let nlb = Some("alibabacloud.com/nlb");
    let pods = bed
        .create_held_app("web", nlb, json!({}), 2, "InvalidLoadBalancerAnnotation")
        .await;
    for (_, message) in &pods {
        assert!(
            message.contains(ZONES) && message.contains("<zone-id>:<vswitch-id>"),
            "{message}"
        );
    }
    let state = bed.emulator("state").await;
    assert!(
        state["nlb"]["load_balancers"]
            .as_array()
            .is_none_or(|l| l.is_empty()),
        "nothing was asked of the cloud: {state}"
    );
    let (_, zone_maps) = NLB_ZONE_MAPS;
    bed.annotate_service("web", json!({ ZONES: zone_maps }))
        .await;
    wait_rollout(&bed, "web", "web", "web", Duration::from_secs(90)).await;
    bed.cleanup().await;
}

/// The health-check and scheduler annotations reach the CLB listener and the NLB server
/// group (read back from the emulator), the gates still turn True through the HTTP check, a
/// changed annotation is set again on the listener, and an annotation rollgate does
/// not act on gets one Warning Event naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn health_check_annotations_reach_the_load_balancer_and_follow_changes() {
    let bed = Bed::new("gates-healthcheck", 1, fast_emulator(), &[]).await;
    let check = |uri: &'static str| {
        vec![
            ("health-check-type", "http"),
            ("health-check-uri", uri),
            ("health-check-httpcode", "http_2xx,http_3xx"),
            ("health-check-connect-port", "8080"),
            ("healthy-threshold", "3"),
            ("unhealthy-threshold", "4"),
            ("health-check-interval", "5"),
            ("health-check-connect-timeout", "4"),
            ("health-check-switch", "on"),
            ("scheduler", "rr"),
        ]
    };
    let mut web = check("/healthz");
    web.push(("persistence-timeout", "60"));
    bed.create_clb_and_nlb_app(lb_annotations(&web), lb_annotations(&check("/healthz")))
        .await;

    let state = bed.emulator("state").await;
    let listener = &state["clb"]["load_balancers"][0]["listeners"][0]["settings"];
    assert_eq!(listener["HealthCheckType"], "http", "{state}");
    assert_eq!(listener["HealthCheckURI"], "/healthz");
    assert_eq!(listener["HealthCheckHttpCode"], "http_2xx,http_3xx");
    assert_eq!(listener["HealthCheckConnectPort"], 8080);
    assert_eq!(listener["HealthyThreshold"], 3);
    assert_eq!(listener["UnhealthyThreshold"], 4);
    assert_eq!(listener["HealthCheckInterval"], 5);
    assert_eq!(listener["HealthCheckConnectTimeout"], 4);
    assert_eq!(listener["Scheduler"], "rr");
    let group = &state["nlb"]["server_groups"][0];
    assert_eq!(group["health_check"], true, "{state}");
    let health = &group["health_settings"];
    assert_eq!(health["HealthCheckType"], "HTTP");
    assert_eq!(health["HealthCheckUrl"], "/healthz");
    assert_eq!(
        health["HealthCheckHttpCode"],
        json!(["http_2xx", "http_3xx"])
    );
    assert_eq!(health["HealthCheckInterval"], 5);
    assert_eq!(group["settings"]["Scheduler"], "rr");

    // A changed annotation reaches the listener that already exists.
    bed.annotate_service("web", lb_annotations(&[("health-check-uri", "/ready")]))
        .await;
    wait_for_value(
        "the new URI on the listener",
        Duration::from_secs(30),
        json!("/ready"),
        || async {
            let state = bed.emulator("state").await;
            state["clb"]["load_balancers"][0]["listeners"][0]["settings"]["HealthCheckURI"].clone()
        },
    )
    .await;

    // Several reconciles later, one Warning about the session persistence, none about
    // the rest.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let records = event_records(&bed.client, &bed.ns.name, "web").await;
    let unsupported: Vec<_> = records
        .iter()
        .filter(|r| r.reason == "UnsupportedLoadBalancerAnnotation")
        .collect();
    assert_eq!(unsupported.len(), 1, "{records:?}");
    assert_eq!(unsupported[0].occurrences, 1, "{records:?}");
    assert!(
        unsupported[0]
            .note
            .contains("alibaba-cloud-loadbalancer-persistence-timeout"),
        "{records:?}"
    );
    bed.cleanup().await;
}

/// `protocol-port: https:80` with `cert-id` and the HTTP listener's
/// `health-check-timeout`: the CLB listener on 80 is HTTPS, serves the certificate,
/// checks `/healthz` with GET and the 8 s timeout (read back from the emulator), and
/// the gates turn True through its health report. Then `https` without `cert-id` on
/// another Service: its pods' gates say why (naming `cert-id`), and no listener is
/// asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn protocol_port_makes_an_https_listener_with_its_certificate_and_timeout() {
    let bed = Bed::new("gates-https", 1, fast_emulator(), &[]).await;
    bed.emulator_post("server-certificates", json!({"id": "cert-e2e"}))
        .await;
    let https = lb_annotations(&[
        ("protocol-port", "https:80"),
        ("cert-id", "cert-e2e"),
        ("health-check-uri", "/healthz"),
        ("health-check-method", "get"),
        ("health-check-timeout", "8"),
    ]);
    bed.create_ready_app("web", None, https, 2).await;

    let state = bed.emulator("state").await;
    let listeners = &state["clb"]["load_balancers"][0]["listeners"];
    assert_eq!(listeners.as_array().map(Vec::len), Some(1), "{state}");
    let listener = &listeners[0];
    assert_eq!(listener["protocol"], "https", "{state}");
    assert_eq!(listener["port"], 80);
    assert_eq!(listener["health_check"], true);
    let settings = &listener["settings"];
    assert_eq!(settings["ServerCertificateId"], "cert-e2e", "{state}");
    assert_eq!(settings["HealthCheckURI"], "/healthz");
    assert_eq!(settings["HealthCheckMethod"], "get");
    assert_eq!(settings["HealthCheckTimeout"], 8);
    // The backends the gates waited on are behind that HTTPS listener.
    let group = listener["vserver_group_id"].as_str().unwrap();
    let behind = bed
        .backends()
        .await
        .into_iter()
        .filter(|b| b.group == group && b.healthy)
        .count();
    assert_eq!(behind, 2, "{state}");

    // HTTPS without a certificate: refused before any cloud call, on every gate.
    let https = lb_annotations(&[("protocol-port", "https:80")]);
    let message = refused_annotation(&bed, https).await;
    assert!(
        message.contains("service.beta.kubernetes.io/alibaba-cloud-loadbalancer-cert-id"),
        "{message}"
    );
    let state = bed.emulator("state").await;
    assert_eq!(
        state["clb"]["load_balancers"].as_array().map(Vec::len),
        Some(1),
        "no load balancer for the refused Service: {state}"
    );
    bed.cleanup().await;
}

/// `connection-drain: on` with a 12 s timeout: the listener carries the drain (read
/// back from the emulator), and a removed pod's backend stays at weight 0 for the
/// drain's 12 s, not the controller's 3 s default (`ROLLGATE_GATE_DRAIN_TIME`), and
/// well within the pod's 30 s grace; the timeline shows both moments.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn connection_drain_reaches_the_listener_and_holds_the_backend_at_weight_zero() {
    let bed = Bed::new("gates-conndrain", 1, fast_emulator(), &[]).await;
    let drain = lb_annotations(&[
        ("connection-drain", "on"),
        ("connection-drain-timeout", "12"),
    ]);
    bed.create_ready_app("web", None, drain, 2).await;
    let state = bed.emulator("state").await;
    let listener = &state["clb"]["load_balancers"][0]["listeners"][0]["settings"];
    assert_eq!(listener["ConnectionDrain"], "on", "{state}");
    assert_eq!(listener["ConnectionDrainTimeout"], 12);

    // A pod whose containers take 25 s of its 30 s grace to stop, so it stays
    // Terminating meanwhile (the simulated kubelet's stop delay, per pod).
    let pod = bed.app_pods("web").await.remove(0);
    let (name, ip) = (pod.name_any(), pod_ip(&pod).unwrap());
    slow_to_stop(&bed, &name).await;
    bed.pods()
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        "the backend drained and removed",
        Duration::from_secs(60),
        || async {
            let timeline = bed.emulator("timeline").await;
            let removed = timeline["events"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["event"] == "removed" && e["ip"] == ip.as_str());
            if removed {
                Ok(())
            } else {
                Err("not removed yet".to_string())
            }
        },
    )
    .await;
    let timeline = bed.emulator("timeline").await;
    let events = timeline["events"].as_array().unwrap();
    let removed = events
        .iter()
        .find(|e| e["event"] == "removed" && e["ip"] == ip.as_str())
        .unwrap();
    let ip = ip.as_str();
    let drained = events
        .iter()
        .find(|e| e["ip"] == ip && e["event"] == "weight-changed")
        .unwrap_or_else(|| panic!("{ip} was never drained: {events:?}"));
    let held = event_at(removed)
        .duration_since(event_at(drained))
        .as_secs_f64();
    // The drain counts from the deletion's request time, which the pod carries to the
    // second (its deletionTimestamp less its grace), and the weight change lands a
    // reconcile after the deletion: so up to a second and a reconcile under 12 s
    // (10.998 s seen under load). Without the drain it would be about 0.
    assert!(
        (10.0..25.0).contains(&held),
        "{ip} stayed at weight 0 for {held:.1} s; the drain is 12 s: {events:?}"
    );
    bed.cleanup().await;
}

/// NLB: `connection-drain: on` with a 20 s timeout reaches the server group
/// (`ConnectionDrainEnabled`, `ConnectionDrainTimeout`, read back from the emulator),
/// and a removed pod's backend stays at weight 0 until the drain ends or the pod's
/// grace ends, whichever is first: a pod deleted with its 30 s grace is held the
/// drain's 20 s; one deleted with an 8 s grace only 8 s (its deletion deadline).
/// Both pods' containers take 25 s to stop, so neither is gone earlier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn nlb_connection_drain_holds_the_backend_until_the_drain_or_the_grace_ends() {
    let bed = Bed::new("gates-nlbdrain", 1, fast_emulator(), &[]).await;
    let drain = lb_annotations(&[
        ("zone-maps", "cn-hangzhou-k:vsw-k,cn-hangzhou-j:vsw-j"),
        ("connection-drain", "on"),
        ("connection-drain-timeout", "20"),
    ]);
    bed.create_ready_app("web", Some("alibabacloud.com/nlb"), drain, 2)
        .await;
    let state = bed.emulator("state").await;
    let group = &state["nlb"]["server_groups"][0]["settings"];
    assert_eq!(group["ConnectionDrainEnabled"], true, "{state}");
    assert_eq!(group["ConnectionDrainTimeout"], 20, "{state}");

    let pods = bed.app_pods("web").await;
    let mut deleted = vec![];
    for (pod, grace) in pods.iter().zip([30u32, 8]) {
        let name = pod.name_any();
        slow_to_stop(&bed, &name).await;
        let params = DeleteParams {
            grace_period_seconds: Some(grace),
            ..Default::default()
        };
        bed.pods().delete(&name, &params).await.unwrap();
        deleted.push((pod_ip(pod).unwrap(), grace));
    }
    wait_for(
        "both backends drained and removed",
        Duration::from_secs(60),
        || async {
            let timeline = bed.emulator("timeline").await;
            let events = timeline["events"].as_array().unwrap();
            let removed = deleted
                .iter()
                .filter(|(ip, _)| {
                    events
                        .iter()
                        .any(|e| e["event"] == "removed" && e["ip"] == ip.as_str())
                })
                .count();
            if removed == deleted.len() {
                Ok(())
            } else {
                Err(format!("{removed} of {} removed", deleted.len()))
            }
        },
    )
    .await;
    let timeline = bed.emulator("timeline").await;
    let events = timeline["events"].as_array().unwrap();
    for (ip, grace) in &deleted {
        let ip = ip.as_str();
        let of_ip: Vec<&Value> = events.iter().filter(|e| e["ip"] == ip).collect();
        let drained = of_ip
            .iter()
            .position(|e| e["event"] == "weight-changed")
            .unwrap_or_else(|| panic!("{ip} was never drained: {of_ip:?}"));
        let removed = of_ip.iter().position(|e| e["event"] == "removed").unwrap();
        assert!(drained < removed, "{ip}: drained after removal: {of_ip:?}");
        let held = event_at(of_ip[removed])
            .duration_since(event_at(of_ip[drained]))
            .as_secs_f64();
        // The drain (20 s) or the grace, whichever is first; the weight change comes
        // a reconcile after the deletion, so a little less is fine.
        let want = if *grace == 8 { 5.0..11.0 } else { 18.0..25.0 };
        assert!(
            want.contains(&held),
            "{ip} (grace {grace} s) stayed at weight 0 for {held:.1} s, want {want:?}: {of_ip:?}"
        );
    }
    bed.cleanup().await;
}

/// Makes pod `name`'s containers take 25 s to stop (of a 30 s grace), so it stays
/// Terminating meanwhile (the simulated kubelet's stop delay, per pod).
async fn slow_to_stop(bed: &Bed, name: &str) {
    let slow =
        json!({"metadata": {"annotations": {"pod-delete.stage.kwok.x-k8s.io/delay": "25s"}}});
    bed.pods()
        .patch(name, &PatchParams::default(), &Patch::Merge(&slow))
        .await
        .unwrap();
}

/// A CLB Service `bad` with `annotations` rollgate refuses before any cloud call, and
/// a Deployment of one pod gated on it: waits for the gate False, saying
/// InvalidLoadBalancerAnnotation; returns its message.
async fn refused_annotation(bed: &Bed, annotations: Value) -> String {
    let reason = "InvalidLoadBalancerAnnotation";
    let mut pods = bed
        .create_held_app("bad", None, annotations, 1, reason)
        .await;
    pods.remove(0).1
}

/// When a timeline event happened.
fn event_at(event: &Value) -> k8s_openapi::jiff::Timestamp {
    event["at"].as_str().unwrap().parse().unwrap()
}

/// A pod behind two LoadBalancer Services has two gates, each flipped on its own: the
/// second Service does not exist at first, so its gate waits while the first is True.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn two_services_two_gates_flip_separately() {
    let bed = Bed::new("gates-two", 1, fast_emulator(), &[]).await;
    bed.create_service("front", "both", None, json!({})).await;
    bed.create_deployment("both", "both", 2, &["front", "back"], 1, 0)
        .await;
    wait_gate(&bed, "both", "front", "front gates True", |s, _| {
        s == "True"
    })
    .await;
    let pods = wait_gate(
        &bed,
        "both",
        "back",
        "back gates ServiceNotFound",
        |s, r| s == "False" && r == "ServiceNotFound",
    )
    .await;
    assert!(
        pods.iter().all(|p| !pod_is_ready(p)),
        "not Ready with one gate False"
    );
    bed.create_service("back", "both", None, json!({})).await;
    wait_gate(&bed, "both", "back", "back gates True", |s, _| s == "True").await;
    wait_rollout(&bed, "both", "both", "back", Duration::from_secs(60)).await;
    bed.cleanup().await;
}

/// A backend marked unhealthy through the emulator's control API: by default the gate
/// stays True and its reason says so; with the opt-in annotation it goes False, and back
/// to True when the backend recovers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn an_unhealthy_backend_changes_the_reason_and_the_opt_in_flips_back() {
    let bed = Bed::new("gates-flip", 1, fast_emulator(), &[]).await;
    bed.create_service("web", "web", None, json!({})).await;
    bed.create_deployment("web", "web", 1, &["web"], 1, 0).await;
    let pods = wait_gate(&bed, "web", "web", "gate True", |s, _| s == "True").await;
    let ip = pod_ip(&pods[0]).unwrap();
    let forced = bed
        .emulator_post("health", json!({"ip": ip, "port": 8080, "healthy": false}))
        .await;
    assert_eq!(forced["matched"], 1, "{forced}");
    let pods = wait_gate(
        &bed,
        "web",
        "web",
        "reason BackendLostAfterReady",
        |s, r| s == "True" && r == "BackendLostAfterReady",
    )
    .await;
    let (_, _, message) = gate_status(&pods[0], "web").unwrap();
    assert!(message.contains("BackendUnhealthy"), "{message}");

    bed.annotate_service(
        "web",
        json!({"rollgate.io/readiness-gate-flip-back": "true"}),
    )
    .await;
    let pods = wait_gate(&bed, "web", "web", "gate False (opt-in)", |s, r| {
        s == "False" && r == "BackendUnhealthy"
    })
    .await;
    wait_for("pod NotReady", Duration::from_secs(30), || async {
        let p = bed
            .pods()
            .get(&pods[0].name_any())
            .await
            .map_err(|e| e.to_string())?;
        if pod_is_ready(&p) {
            Err("still Ready".into())
        } else {
            Ok(())
        }
    })
    .await;
    bed.emulator_post("health", json!({"ip": ip, "port": 8080, "healthy": null}))
        .await;
    wait_gate(&bed, "web", "web", "gate True again", |s, r| {
        s == "True" && r == "LoadBalancerHealthy"
    })
    .await;
    bed.cleanup().await;
}

/// Attach to an existing load balancer (annotation). A backend the user adds by hand to
/// rollgate's server group survives the rollouts and the Service's deletion, and the
/// attached load balancer is never deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn an_attached_load_balancer_and_a_user_backend_survive() {
    use alibaba_lb::*;
    let bed = Bed::new("gates-attach", 2, fast_emulator(), &[]).await;
    let clb = bed.emu.cloud_client(Product::Clb);
    let lb = clb
        .ensure_load_balancer(&users_load_balancer("made-by-hand", None))
        .await
        .unwrap();
    bed.create_service(
        "web",
        "web",
        None,
        json!({"service.beta.kubernetes.io/alibaba-cloud-loadbalancer-id": lb.id}),
    )
    .await;
    bed.wait_external_ip("web").await;
    let svc = bed.services().get("web").await.unwrap();
    assert!(
        !svc.annotations()
            .contains_key("rollgate.io/created-load-balancer-id"),
        "an attached load balancer is not recorded as created"
    );
    let owner = owner(80, "web", &bed.ns.name);
    let state = bed.emulator("state").await;
    let group_id = state["clb"]["vserver_groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == owner.as_str())
        .and_then(|g| g["id"].as_str())
        .expect("rollgate's server group on the attached load balancer")
        .to_string();
    let group = ServerGroupRef {
        load_balancer_id: lb.id.clone(),
        server_group_id: group_id,
        listener_port: 80,
        listener_protocol: ListenerProtocol::Tcp,
        listener_id: None,
    };
    // The user's own backend: an ENI of the VPC (CLB has no IP backends).
    let eni = bed
        .emulator_post(
            "enis",
            json!({"private_ips": ["10.200.0.50"], "vpc_id": VPC_ID}),
        )
        .await;
    let eni_id = eni["network_interface_id"].as_str().unwrap().to_string();
    let hand = Backend {
        key: BackendKey {
            server_id: eni_id,
            ip: "10.200.0.50".into(),
            port: 8080,
        },
        kind: BackendType::Eni,
        weight: 100,
        description: "added-by-hand".into(),
    };
    clb.add_backends(&group, std::slice::from_ref(&hand))
        .await
        .unwrap();

    bed.create_deployment("web", "web", 2, &["web"], 1, 0).await;
    wait_rollout(&bed, "web", "web", "web", Duration::from_secs(90)).await;
    restart(&bed, "web").await;
    wait_rollout(&bed, "web", "web", "web", Duration::from_secs(90)).await;
    wait_no_orphans(&bed, "web", "web").await;
    let has_hand = |backends: &[EmuBackend]| {
        backends
            .iter()
            .any(|b| b.ip == "10.200.0.50" && b.weight == 100)
    };
    assert!(has_hand(&bed.backends().await));

    bed.delete_service("web").await;
    let backends = bed.backends().await;
    assert!(
        has_hand(&backends),
        "the user's backend survives: {backends:?}"
    );
    assert!(
        !backends.iter().any(|b| b.description == owner),
        "rollgate's backends are gone: {backends:?}"
    );
    let state = bed.emulator("state").await;
    let ids: Vec<&str> = state["clb"]["load_balancers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["id"].as_str())
        .collect();
    assert!(
        ids.contains(&lb.id.as_str()),
        "the attached load balancer stays: {ids:?}"
    );
    bed.cleanup().await;
}

/// A Service attached to a shared-resource CLB instance: every gate says why with a
/// reason of its own (not a cloud error), nothing is sent to the instance, and the
/// Service gets one Warning naming it and its spec.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn an_attached_shared_clb_instance_says_so_on_every_gate_and_once_on_the_service() {
    use alibaba_lb::*;
    let bed = Bed::new("gates-shared", 1, fast_emulator(), &[]).await;
    // Made by hand, pay-by-spec without a LoadBalancerSpec (as older accounts have them):
    // a shared-resource instance, which CLB never lets take ENI or ECI backends.
    let mut config = bed.emu.cloud_config();
    config.clb_spec = None;
    let clb = new_client(Product::Clb, &config, lb_emulator::testing::credentials()).unwrap();
    let lb = clb
        .ensure_load_balancer(&LoadBalancerSpec {
            clb_instance: ClbInstance {
                spec: String::new(),
                charge_type: "PayBySpec".into(),
            },
            ..users_load_balancer("shared-by-hand", Some(VPC_ID))
        })
        .await
        .unwrap();
    let attached = json!({"service.beta.kubernetes.io/alibaba-cloud-loadbalancer-id": lb.id});
    let pods = bed
        .create_held_app("web", None, attached, 2, "LoadBalancerTakesNoPodBackends")
        .await;
    for (_, message) in &pods {
        for part in [lb.id.as_str(), "no LoadBalancerSpec", "slb.s1.small"] {
            assert!(message.contains(part), "{message}");
        }
    }
    // Several polls later: nothing was registered (nor tried: no refused adds), and
    // the Service has one Warning naming the instance, its spec and the fix.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let backends = bed.backends().await;
    assert!(backends.is_empty(), "{backends:?}");
    let stats = bed.emulator("state").await;
    let adds = stats["stats"]["per_action"]["AddVServerGroupBackendServers"]
        .as_u64()
        .unwrap_or(0);
    assert_eq!(adds, 0, "rollgate tried to add pods to a shared instance");
    let records = event_records(&bed.client, &bed.ns.name, "web").await;
    let warnings: Vec<_> = records
        .iter()
        .filter(|r| r.reason == "LoadBalancerTakesNoPodBackends")
        .collect();
    assert_eq!(warnings.len(), 1, "{records:?}");
    assert_eq!(warnings[0].occurrences, 1, "{records:?}");
    for part in [lb.id.as_str(), "no LoadBalancerSpec", "slb.s1.small"] {
        assert!(warnings[0].note.contains(part), "{}", warnings[0].note);
    }
    bed.cleanup().await;
}

/// One cluster, one owner (issue 24). A CLB that another cluster's rollgate made
/// (tagged `rollgate.io/cluster-id=other-cluster`), named by a Service of this one:
/// left alone (no group, listener or backend made in it; the gates say `CloudApiError`
/// naming the other cluster; one Warning `LoadBalancerOfAnotherCluster` on the
/// Service). And what rollgate creates carries this cluster's id, the Service's UID and
/// the Service's `additional-resource-tags`, read back from the emulator; a malformed
/// tag list is refused on the gates naming the form.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn a_load_balancer_of_another_cluster_is_left_alone_and_what_rollgate_makes_is_tagged() {
    let bed = Bed::new("gates-owner", 1, fast_emulator(), &[]).await;
    let theirs = other_clusters_clb(&bed).await;
    let attached = json!({"service.beta.kubernetes.io/alibaba-cloud-loadbalancer-id": theirs.id});
    let pods = bed
        .create_held_app("theirs", None, attached, 1, "CloudApiError")
        .await;
    let message = &pods[0].1;
    assert!(message.contains("OfCluster(other-cluster)"), "{message}");

    let tags = lb_annotations(&[("additional-resource-tags", "team=web,env=e2e")]);
    bed.create_ready_app("web", None, tags, 1).await;
    let uid = bed.services().get("web").await.unwrap().uid().unwrap();
    let state = bed.emulator("state").await;
    let lbs = state["clb"]["load_balancers"].as_array().unwrap();
    let ours = lbs
        .iter()
        .find(|lb| lb["id"] != theirs.id.as_str())
        .unwrap();
    assert_eq!(
        ours["tags"],
        json!([
            ["rollgate.io/cluster-id", CLUSTER_ID],
            ["rollgate.io/service-uid", uid],
            ["team", "web"],
            ["env", "e2e"]
        ]),
        "{state}"
    );
    // Meanwhile nothing of this cluster's went into the other cluster's instance.
    let theirs_state = lbs
        .iter()
        .find(|lb| lb["id"] == theirs.id.as_str())
        .unwrap();
    assert_eq!(theirs_state["listeners"], json!([]), "{state}");
    let groups_in_theirs = state["clb"]["vserver_groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["load_balancer_id"] == theirs.id.as_str())
        .count();
    assert_eq!(groups_in_theirs, 0, "{state}");
    let records = event_records(&bed.client, &bed.ns.name, "theirs").await;
    let warnings: Vec<_> = records
        .iter()
        .filter(|r| r.reason == "LoadBalancerOfAnotherCluster")
        .collect();
    assert_eq!(warnings.len(), 1, "{records:?}");
    assert!(
        warnings[0].note.contains(&theirs.id) && warnings[0].note.contains("other-cluster"),
        "{}",
        warnings[0].note
    );

    // A malformed list: refused before any cloud call, on the gate, naming the form.
    let tags = lb_annotations(&[("additional-resource-tags", "acs:team=web")]);
    let message = refused_annotation(&bed, tags).await;
    assert!(message.contains("k1=v1,k2=v2"), "{message}");
    bed.cleanup().await;
}

/// A CLB that another cluster's rollgate made: tagged
/// `rollgate.io/cluster-id=other-cluster`.
async fn other_clusters_clb(bed: &Bed) -> alibaba_lb::LoadBalancer {
    let tags = alibaba_lb::ResourceTags {
        cluster: Some(("rollgate.io/cluster-id".into(), "other-cluster".into())),
        others: vec![],
    };
    bed.emu
        .cloud_client(alibaba_lb::Product::Clb)
        .ensure_load_balancer(&alibaba_lb::LoadBalancerSpec {
            tags,
            ..users_load_balancer("other-clusters", Some(VPC_ID))
        })
        .await
        .unwrap()
}

/// The controller SIGKILLed mid-rollout: after a restart it converges, and no backend
/// is left for a pod that no longer exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn a_controller_killed_mid_rollout_converges_without_orphans() {
    let mut bed = Bed::new("gates-kill", 2, fast_emulator(), &[]).await;
    bed.create_service("web", "web", None, json!({})).await;
    bed.create_deployment("web", "web", 4, &["web"], 1, 1).await;
    wait_rollout(&bed, "web", "web", "web", Duration::from_secs(90)).await;
    restart(&bed, "web").await;
    wait_for(
        "an old pod terminating",
        Duration::from_secs(30),
        || async {
            let pods = bed.app_pods("web").await;
            if pods.iter().any(|p| p.metadata.deletion_timestamp.is_some()) {
                Ok(())
            } else {
                Err("none yet".to_string())
            }
        },
    )
    .await;
    bed.controller.take().unwrap().crash();
    note("controller SIGKILLed mid-rollout");
    tokio::time::sleep(Duration::from_secs(3)).await;
    bed.start_controller("restarted");
    wait_rollout(&bed, "web", "web", "web", Duration::from_secs(120)).await;
    wait_no_orphans(&bed, "web", "web").await;
    bed.cleanup().await;
}

/// 30% of cloud calls throttled during a rollout: no gate flips early (checked at every
/// poll of the rollout) and the rollout converges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn a_rollout_converges_under_30_percent_throttling() {
    let bed = Bed::new("gates-throttle", 2, fast_emulator(), &[]).await;
    bed.create_service("web", "web", None, json!({})).await;
    bed.wait_external_ip("web").await;
    bed.emulator_post("faults", json!({"throttle_rate": 0.3}))
        .await;
    bed.create_deployment("web", "web", 3, &["web"], 1, 0).await;
    wait_rollout(&bed, "web", "web", "web", Duration::from_secs(120)).await;
    restart(&bed, "web").await;
    wait_rollout(&bed, "web", "web", "web", Duration::from_secs(120)).await;
    wait_no_orphans(&bed, "web", "web").await;
    let stats = bed.emulator("state").await["stats"].clone();
    assert!(stats["injected_throttles"].as_u64().unwrap() > 0, "{stats}");
    note(format!("throttled calls: {}", stats["injected_throttles"]));
    bed.cleanup().await;
}

/// A failed NLB job: the gate stays False with a reason naming the failed job, then
/// the change is retried and the gate converges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn a_failed_nlb_job_holds_the_gate_with_a_reason_then_converges() {
    let bed = Bed::new("gates-job", 1, fast_emulator(), &[]).await;
    bed.create_service(
        "web",
        "web",
        Some("alibabacloud.com/nlb"),
        json!({"service.beta.kubernetes.io/alibaba-cloud-loadbalancer-zone-maps": "cn-hangzhou-k:vsw-k,cn-hangzhou-j:vsw-j"}),
    )
    .await;
    bed.wait_external_ip("web").await;
    bed.emulator_post("jobs", json!({"force": ["Failed"]}))
        .await;
    bed.create_deployment("web", "web", 1, &["web"], 1, 0).await;
    let pods = wait_gate(&bed, "web", "web", "reason CloudApiError", |s, r| {
        s == "False" && r == "CloudApiError"
    })
    .await;
    let (_, _, message) = gate_status(&pods[0], "web").unwrap();
    assert!(message.contains("AddServersToServerGroup"), "{message}");
    wait_rollout(&bed, "web", "web", "web", Duration::from_secs(60)).await;
    bed.cleanup().await;
}

/// An attached NLB whose listener on the Service port already forwards to another
/// server group: rollgate registers the pod in its own group, where it turns healthy,
/// but no gate turns True (the pod would get no traffic), and the reason names the
/// listener and the group it points at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn an_nlb_listener_forwarding_elsewhere_holds_the_gate_and_says_where() {
    use alibaba_lb::*;
    let bed = Bed::new("gates-listener", 1, fast_emulator(), &[]).await;
    let nlb = bed.emu.cloud_client(Product::Nlb);
    // Made by hand: a TCP listener on 80 that forwards to the user's own group.
    let lb = nlb
        .ensure_load_balancer(&lb_emulator::testing::spec(
            "made-by-hand",
            VPC_ID,
            "users-own-group",
        ))
        .await
        .unwrap();
    let listener_id = lb.listeners[0].listener_id.clone().unwrap();
    let users_group = lb.listeners[0].server_group_id.clone();
    let attached = json!({"service.beta.kubernetes.io/alibaba-cloud-loadbalancer-id": lb.id});
    let nlb = Some("alibabacloud.com/nlb");
    let pods = bed
        .create_held_app("web", nlb, attached, 1, "ListenerNotForwarding")
        .await;
    let ip = pod_ip(&pods[0].0).unwrap();
    // The pod is registered and healthy in rollgate's group: only the listener check
    // holds the gate.
    wait_for(
        "rollgate's backend healthy",
        Duration::from_secs(30),
        || async {
            let backends = bed.backends().await;
            backends
                .iter()
                .find(|b| b.ip == ip && b.group != users_group && b.healthy)
                .map(|_| ())
                .ok_or(format!("{backends:?}"))
        },
    )
    .await;
    holds_for("the gate False", Duration::from_secs(4), || async {
        let pods = bed.app_pods("web").await;
        match gate_status(&pods[0], "web") {
            Some((s, r, m)) if s == "False" && r == "ListenerNotForwarding" => {
                if m.contains(&listener_id) && m.contains(&users_group) {
                    Ok(())
                } else {
                    Err(format!("the message names neither: {m}"))
                }
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    bed.cleanup().await;
}

// ---------------------------------------------------------------------------------------
// A Service's whole life: deletion (issue 24, item 2)
// ---------------------------------------------------------------------------------------

/// The ids of the emulator's load balancers of `product` (`clb` or `nlb`).
async fn load_balancer_ids(bed: &Bed, product: &str) -> Vec<String> {
    let state = bed.emulator("state").await;
    state[product]["load_balancers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["id"].as_str().map(str::to_string))
        .collect()
}

/// The user deletes the load balancer the Service is attached to, then the Service:
/// NotFound is done, so the finalizer goes and so does the Service (before, cleanup
/// asked the cloud to ensure the load balancer and wedged on NotFound forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn a_service_whose_load_balancer_the_user_deleted_goes_away() {
    use alibaba_lb::*;
    let bed = Bed::new("gates-lb-gone", 1, fast_emulator(), &[]).await;
    let clb = bed.emu.cloud_client(Product::Clb);
    let lb = clb
        .ensure_load_balancer(&users_load_balancer("made-by-hand", None))
        .await
        .unwrap();
    bed.create_ready_app("web", None, lb_annotations(&[("id", &lb.id)]), 1)
        .await;
    clb.delete_load_balancer(&lb.id).await.unwrap();
    assert!(load_balancer_ids(&bed, "clb").await.is_empty());
    bed.delete_service("web").await;
    bed.cleanup().await;
}

/// `preserve-lb-on-delete`: the load balancer rollgate created stays when the Service
/// is deleted, and only rollgate's backends leave it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn preserve_on_delete_keeps_the_created_load_balancer_without_our_backends() {
    let bed = Bed::new("gates-preserve", 1, fast_emulator(), &[]).await;
    let preserve = lb_annotations(&[("preserve-lb-on-delete", "true")]);
    bed.create_ready_app("web", None, preserve, 2).await;
    let created = bed
        .created_load_balancer_id("web")
        .await
        .expect("the created load balancer is recorded");
    let owner = owner(80, "web", &bed.ns.name);
    let ours = |b: &[EmuBackend]| b.iter().filter(|b| b.description == owner).count();
    assert_eq!(ours(&bed.backends().await), 2);
    bed.delete_service("web").await;
    assert_eq!(
        load_balancer_ids(&bed, "clb").await,
        vec![created],
        "the created load balancer is preserved"
    );
    let backends = bed.backends().await;
    assert_eq!(ours(&backends), 0, "rollgate's backends left: {backends:?}");
    bed.cleanup().await;
}

/// While the cloud refuses every call, the deleted Service keeps its finalizer and says
/// why in one Warning Event (not one per retry); once the cloud answers, it goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn a_blocked_cleanup_keeps_the_finalizer_and_says_why_once() {
    let bed = Bed::new("gates-blocked", 1, fast_emulator(), &[]).await;
    bed.create_service("web", "web", None, json!({})).await;
    bed.wait_external_ip("web").await;
    bed.emulator_post("faults", json!({"server_error_rate": 1.0}))
        .await;
    bed.services()
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    let warning = wait_for(
        "the LoadBalancerCleanupBlocked Event",
        Duration::from_secs(60),
        || async {
            let records = event_records(&bed.client, &bed.ns.name, "web").await;
            records
                .into_iter()
                .find(|r| r.reason == "LoadBalancerCleanupBlocked")
                .ok_or_else(|| "no Event yet".to_string())
        },
    )
    .await;
    assert!(
        warning.note.contains("rollgate.io/load-balancer"),
        "{}",
        warning.note
    );
    // Several retries later: the Service is still there, and the Event said once.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let svc = bed.services().get("web").await.unwrap();
    assert!(svc
        .finalizers()
        .iter()
        .any(|f| f == "rollgate.io/load-balancer"));
    let records = event_records(&bed.client, &bed.ns.name, "web").await;
    let warnings: Vec<_> = records
        .iter()
        .filter(|r| r.reason == "LoadBalancerCleanupBlocked")
        .collect();
    assert_eq!(warnings.len(), 1, "{records:?}");
    assert_eq!(warnings[0].occurrences, 1, "{records:?}");
    bed.emulator_post("faults", json!({"server_error_rate": 0.0}))
        .await;
    wait_for(
        "the Service to be gone",
        Duration::from_secs(60),
        || async {
            match bed.services().get_opt("web").await {
                Ok(None) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert!(load_balancer_ids(&bed, "clb").await.is_empty());
    bed.cleanup().await;
}

/// The created load balancer's id is never lost: the controller is killed and the
/// annotation that records the id is gone (as if its write had failed right after the
/// create call). After a restart rollgate asks again with the same `ClientToken`, gets
/// the same load balancer, records it, and the emulator holds exactly one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn a_created_load_balancer_is_found_again_when_its_id_was_not_recorded() {
    let mut bed = Bed::new("gates-lost-id", 1, fast_emulator(), &[]).await;
    bed.create_service("web", "web", None, json!({})).await;
    bed.wait_external_ip("web").await;
    let first = bed.created_load_balancer_id("web").await.expect("recorded");
    bed.controller.take().unwrap().crash();
    bed.annotate_service("web", json!({"rollgate.io/created-load-balancer-id": null}))
        .await;
    bed.start_controller("restarted");
    let again = wait_for("the id recorded again", Duration::from_secs(60), || async {
        let recorded = bed.created_load_balancer_id("web").await;
        recorded.ok_or_else(|| "not recorded yet".to_string())
    })
    .await;
    assert_eq!(again, first, "the same load balancer");
    assert_eq!(load_balancer_ids(&bed, "clb").await, vec![first]);
    bed.cleanup().await;
}

// ---------------------------------------------------------------------------------------
// Listeners and groups per (port, protocol) (issue 24, item 2)
// ---------------------------------------------------------------------------------------

/// TCP and UDP on one port of an NLB (HTTP/3 on 443, DNS on 53): an NLB server group
/// has a protocol, so each listener gets its own group, each group gets the pods, and
/// the gates turn True (before, both listeners were given one TCP group and the UDP
/// listener could not be made).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn tcp_and_udp_on_one_port_of_an_nlb() {
    let bed = Bed::new("gates-tcp-udp", 1, fast_emulator(), &[]).await;
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "dns", "annotations": {
            "service.beta.kubernetes.io/alibaba-cloud-loadbalancer-zone-maps": "cn-hangzhou-k:vsw-k,cn-hangzhou-j:vsw-j"}},
        "spec": {
            "type": "LoadBalancer",
            "loadBalancerClass": "alibabacloud.com/nlb",
            "selector": {"app": "dns"},
            "ports": [
                {"name": "dns-tcp", "port": 53, "targetPort": 8080, "protocol": "TCP"},
                {"name": "dns-udp", "port": 53, "targetPort": 8080, "protocol": "UDP"},
            ],
        },
    }))
    .unwrap();
    bed.services()
        .create(&PostParams::default(), &svc)
        .await
        .unwrap();
    bed.create_deployment("dns", "dns", 2, &["dns"], 1, 0).await;
    wait_rollout(&bed, "dns", "dns", "dns", Duration::from_secs(90)).await;
    let state = bed.emulator("state").await;
    let listeners: BTreeSet<(u64, String, String)> = state["nlb"]["listeners"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|l| {
            (
                l["port"].as_u64().unwrap_or_default(),
                l["protocol"].as_str().unwrap_or_default().to_string(),
                l["server_group_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    assert_eq!(listeners.len(), 2, "{listeners:?}");
    let groups: BTreeSet<&String> = listeners.iter().map(|(_, _, g)| g).collect();
    assert_eq!(groups.len(), 2, "a group per protocol: {listeners:?}");
    let backends = bed.backends().await;
    for group in groups {
        let healthy = backends
            .iter()
            .filter(|b| &b.group == group && b.healthy)
            .count();
        assert_eq!(healthy, 2, "both pods in group {group}: {backends:?}");
    }
    bed.cleanup().await;
}

/// The Service's port changes from 80 to 8080: a listener and group for 8080 are made
/// and filled, rollgate's listener and group of port 80 are deleted, and a listener
/// and group the user added on the same load balancer are untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn a_port_change_replaces_rollgates_listener_and_group_and_nothing_else() {
    use alibaba_lb::*;
    let bed = Bed::new("gates-port-change", 1, fast_emulator(), &[]).await;
    bed.create_ready_app("web", None, json!({}), 2).await;
    let lb_id = bed.created_load_balancer_id("web").await.unwrap();
    // The user's own listener and group on rollgate's load balancer.
    bed.emu
        .cloud_client(Product::Clb)
        .ensure_load_balancer(&LoadBalancerSpec {
            existing_id: Some(lb_id.clone()),
            listeners: vec![users_listener(9000, "users-group")],
            ..users_load_balancer("unused", None)
        })
        .await
        .unwrap();
    bed.services()
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"ports": [
                {"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}]}})),
        )
        .await
        .unwrap();
    let old = owner(80, "web", &bed.ns.name);
    let new = owner(8080, "web", &bed.ns.name);
    let wiring = || async {
        let state = bed.emulator("state").await;
        let lb = state["clb"]["load_balancers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["id"] == lb_id.as_str())
            .cloned()
            .unwrap();
        let listeners: BTreeSet<u64> = lb["listeners"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|l| l["port"].as_u64())
            .collect();
        let groups: BTreeSet<String> = state["clb"]["vserver_groups"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|g| g["name"].as_str().map(str::to_string))
            .collect();
        (listeners, groups)
    };
    let backends = wait_for(
        "both pods healthy in the 8080 group, port 80 gone",
        Duration::from_secs(60),
        || async {
            let (listeners, groups) = wiring().await;
            let backends = bed.backends().await;
            let healthy = backends
                .iter()
                .filter(|b| b.description == new && b.healthy)
                .count();
            if listeners == BTreeSet::from([8080, 9000]) && !groups.contains(&old) && healthy == 2 {
                Ok(backends)
            } else {
                Err(format!(
                    "listeners {listeners:?}, groups {groups:?}, healthy {healthy}"
                ))
            }
        },
    )
    .await;
    let (_, groups) = wiring().await;
    assert_eq!(
        groups,
        BTreeSet::from([new.clone(), "users-group".to_string()]),
        "the user's group stays"
    );
    assert!(
        !backends.iter().any(|b| b.description == old),
        "{backends:?}"
    );
    let pods = bed.app_pods("web").await;
    assert!(
        pods.iter().all(pod_is_ready),
        "{}",
        describe_gates(&pods, "web")
    );
    bed.cleanup().await;
}

/// The Service is moved to a load balancer the user names: the one rollgate created
/// is deleted and forgotten, and the pods are registered in the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn a_service_moved_to_a_named_load_balancer_lets_go_of_the_created_one() {
    use alibaba_lb::*;
    let bed = Bed::new("gates-move", 1, fast_emulator(), &[]).await;
    bed.create_ready_app("web", None, json!({}), 2).await;
    let created = bed.created_load_balancer_id("web").await.unwrap();
    let named = bed
        .emu
        .cloud_client(Product::Clb)
        .ensure_load_balancer(&users_load_balancer("made-by-hand", None))
        .await
        .unwrap();
    bed.annotate_service("web", lb_annotations(&[("id", &named.id)]))
        .await;
    let owner = owner(80, "web", &bed.ns.name);
    wait_for(
        "the created load balancer gone, both pods healthy in the named one",
        Duration::from_secs(60),
        || async {
            let ids = load_balancer_ids(&bed, "clb").await;
            let svc = bed.services().get("web").await.map_err(|e| e.to_string())?;
            let recorded = svc
                .annotations()
                .get("rollgate.io/created-load-balancer-id")
                .cloned();
            let healthy = bed
                .backends()
                .await
                .iter()
                .filter(|b| b.description == owner && b.healthy)
                .count();
            if ids == vec![named.id.clone()] && recorded.is_none() && healthy == 2 {
                Ok(())
            } else {
                Err(format!(
                    "load balancers {ids:?} (created {created}), recorded {recorded:?}, healthy {healthy}"
                ))
            }
        },
    )
    .await;
    bed.delete_service("web").await;
    assert_eq!(
        load_balancer_ids(&bed, "clb").await,
        vec![named.id.clone()],
        "the named load balancer stays"
    );
    bed.cleanup().await;
}

// ---------------------------------------------------------------------------------------
// One cluster, one owner (issue 24, item 3)
// ---------------------------------------------------------------------------------------

/// The `kube-system` namespace's UID: the cluster id rollgate uses without `--cluster-id`.
async fn kube_system_uid(bed: &Bed) -> String {
    use k8s_openapi::api::core::v1::Namespace;
    Api::<Namespace>::all(bed.client.clone())
        .get("kube-system")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap()
}

/// An upgrade from a version that wrote the legacy marker (`k8s/<port>/<svc>/<ns>/
/// kubernetes`, the former default id) into a group of the legacy name. The controller
/// runs without `--cluster-id`, so it writes markers under the kube-system UID. The
/// backends of live pods are adopted in place (re-marked, never removed and added
/// again), a legacy backend of no pod is removed, the listener keeps its group (no
/// second group beside it), and after the Service is deleted the adopted backends go
/// like any other. A user's backend and another cluster's legacy backend in the same
/// group are never touched. Fails if legacy backends are orphaned (the stale one
/// stays, or the pods' backends are left behind on deletion), if a new group is made
/// (the listener would forward to the old one: gates stuck on ListenerNotForwarding),
/// or if adoption reaches beyond the former id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn backends_an_earlier_version_wrote_are_adopted_on_upgrade_then_removed_normally() {
    use alibaba_lb::*;
    // An empty ROLLGATE_CLUSTER_ID (set later than the bed's own) is no flag: the default.
    let bed = Bed::new(
        "gates-adopt",
        1,
        fast_emulator(),
        &[("ROLLGATE_CLUSTER_ID", "")],
    )
    .await;
    let ns = bed.ns.name.clone();
    let uid = kube_system_uid(&bed).await;
    bed.create_deployment("web", "web", 2, &["web"], 1, 1).await;
    // Pods an earlier version served: containers ready. A pod still starting is not
    // eligible, so its backend would be taken out (and put back once it is ready):
    // seeding before that made the test fail on the bed's pace, not on adoption.
    let ips: BTreeSet<String> = wait_for(
        "2 pods ready but for their gates",
        Duration::from_secs(60),
        || async {
            let ips: BTreeSet<String> = bed
                .app_pods("web")
                .await
                .iter()
                .filter(|p| {
                    p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| {
                            cs.iter()
                                .any(|c| c.type_ == "ContainersReady" && c.status == "True")
                        })
                })
                .filter_map(pod_ip)
                .collect();
            if ips.len() == 2 {
                Ok(ips)
            } else {
                Err(format!("{ips:?}"))
            }
        },
    )
    .await;
    // What the earlier version left: its group on the NLB's listener, its backends.
    let legacy = format!("k8s/80/web/{ns}/kubernetes");
    let nlb = bed.emu.cloud_client(Product::Nlb);
    let lb = nlb
        .ensure_load_balancer(&lb_emulator::testing::spec(
            "made-by-an-earlier-version",
            VPC_ID,
            &legacy,
        ))
        .await
        .unwrap();
    let group = lb.listeners[0].clone();
    let backend = |ip: &str, description: &str| Backend {
        key: BackendKey {
            server_id: ip.into(),
            ip: ip.into(),
            port: 8080,
        },
        kind: BackendType::Ip,
        weight: 100,
        description: description.into(),
    };
    let other_cluster = format!("k8s/80/web/{ns}/another-cluster");
    let mut seeded: Vec<Backend> = ips.iter().map(|ip| backend(ip, &legacy)).collect();
    seeded.push(backend("10.255.0.9", &legacy));
    seeded.push(backend("10.255.0.8", "added-by-hand"));
    seeded.push(backend("10.255.0.7", &other_cluster));
    nlb.add_backends(&group, &seeded).await.unwrap();
    let before = bed.emulator("timeline").await["events"]
        .as_array()
        .unwrap()
        .len();

    bed.create_service(
        "web",
        "web",
        Some("alibabacloud.com/nlb"),
        json!({"service.beta.kubernetes.io/alibaba-cloud-loadbalancer-id": lb.id}),
    )
    .await;
    let marker = rollgate::gates::model::owner_description(80, "web", &ns, &uid);
    wait_gate(&bed, "web", "web", "both gates True", |s, _| s == "True").await;
    let in_group = |backends: Vec<EmuBackend>| -> BTreeMap<String, String> {
        backends
            .into_iter()
            .filter(|b| b.group == group.server_group_id)
            .map(|b| (b.ip, b.description))
            .collect()
    };
    let mut want: BTreeMap<String, String> =
        ips.iter().map(|ip| (ip.clone(), marker.clone())).collect();
    want.insert("10.255.0.8".into(), "added-by-hand".into());
    want.insert("10.255.0.7".into(), other_cluster.clone());
    wait_for_value(
        "the pods' backends re-marked, the stale one gone",
        Duration::from_secs(30),
        want.clone(),
        || async { in_group(bed.backends().await) },
    )
    .await;
    // Adopted in place: the pods' backends were never removed (nor added again), and
    // rollgate made no group of its own beside the one the listener forwards to.
    let timeline = bed.emulator("timeline").await;
    let churn: Vec<&Value> = timeline["events"].as_array().unwrap()[before..]
        .iter()
        .filter(|e| ips.contains(e["ip"].as_str().unwrap_or_default()))
        .filter(|e| e["event"] == "removed" || e["event"] == "added")
        .collect();
    assert!(churn.is_empty(), "the pods' backends churned: {churn:?}");
    let state = bed.emulator("state").await;
    let groups: Vec<&str> = state["nlb"]["server_groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|g| g["name"].as_str())
        .collect();
    assert_eq!(
        groups,
        vec![server_group_name_nlb(&legacy)],
        "one group, the adopted one"
    );

    // Deleted: the adopted backends leave like any other; the rest stay.
    bed.delete_service("web").await;
    let mut rest = want.clone();
    rest.retain(|ip, _| !ips.contains(ip));
    wait_for_value(
        "only the user's and the other cluster's backends left",
        Duration::from_secs(30),
        rest,
        || async { in_group(bed.backends().await) },
    )
    .await;
    bed.cleanup().await;
}

fn server_group_name_nlb(name: &str) -> String {
    alibaba_lb::nlb::server_group_name(name)
}

/// A load balancer of the user's, made by hand on the emulator: an NLB with the user's
/// own listener on 9000 forwarding to the user's own group.
async fn users_nlb(bed: &Bed, name: &str) -> alibaba_lb::LoadBalancer {
    use alibaba_lb::*;
    bed.emu
        .cloud_client(Product::Nlb)
        .ensure_load_balancer(&LoadBalancerSpec {
            zones: lb_emulator::testing::two_zones(),
            listeners: vec![users_listener(9000, &format!("{name}-group"))],
            ..users_load_balancer(name, Some(VPC_ID))
        })
        .await
        .unwrap()
}

/// The user points the Service from one load balancer of theirs (A) to another (B):
/// rollgate's backends (and the listener and group it made) leave A, and everything
/// else on A stays (A itself, the user's listener, group and backend). B's backends
/// are counted in groups B's listeners did not have before, so a group shared by A and
/// B (an NLB group found by name across the region) fails it too. Fails
/// if the old backends are orphaned on A (before, only a load balancer rollgate created
/// was let go of; an attached one kept rollgate's backends, forwarding to pod IPs that
/// Terway hands to other pods), or if the move touches what rollgate does not own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn moving_from_one_attached_load_balancer_to_another_takes_our_backends_off_the_first() {
    use alibaba_lb::*;
    let bed = Bed::new("gates-move", 1, fast_emulator(), &[]).await;
    let a = users_nlb(&bed, "users-a").await;
    let b = users_nlb(&bed, "users-b").await;
    let id_annotation = "service.beta.kubernetes.io/alibaba-cloud-loadbalancer-id";
    bed.create_service(
        "web",
        "web",
        Some("alibabacloud.com/nlb"),
        json!({ id_annotation: a.id }),
    )
    .await;
    bed.create_deployment("web", "web", 2, &["web"], 1, 1).await;
    wait_rollout(&bed, "web", "web", "web", Duration::from_secs(90)).await;
    let owner = owner(80, "web", &bed.ns.name);
    let ours_in = |backends: &[EmuBackend], groups: &BTreeSet<String>| {
        backends
            .iter()
            .filter(|x| x.description == owner && groups.contains(&x.group))
            .count()
    };
    let groups_a = listener_groups(&bed, &a.id).await;
    assert_eq!(groups_a.len(), 2, "the user's group and rollgate's on A");
    let backends = bed.backends().await;
    assert_eq!(ours_in(&backends, &groups_a), 2, "{backends:?}");
    let b_before = listener_groups(&bed, &b.id).await;
    // The user's own backend in the user's own group on A.
    let users_group_a = a.listeners[0].clone();
    let nlb = bed.emu.cloud_client(Product::Nlb);
    nlb.add_backends(
        &users_group_a,
        &[Backend {
            key: BackendKey {
                server_id: "10.255.0.8".into(),
                ip: "10.255.0.8".into(),
                port: 8080,
            },
            kind: BackendType::Ip,
            weight: 100,
            description: "added-by-hand".into(),
        }],
    )
    .await
    .unwrap();

    bed.annotate_service("web", json!({ id_annotation: b.id }))
        .await;
    wait_for(
        "rollgate's backends on B only",
        Duration::from_secs(60),
        || async {
            let backends = bed.backends().await;
            let groups_b: BTreeSet<String> = listener_groups(&bed, &b.id)
                .await
                .difference(&b_before)
                .cloned()
                .collect();
            let (on_a, on_b) = (ours_in(&backends, &groups_a), ours_in(&backends, &groups_b));
            if on_a == 0 && on_b == 2 {
                Ok(())
            } else {
                Err(format!("ours on A {on_a}, on B {on_b}"))
            }
        },
    )
    .await;
    wait_gate(&bed, "web", "web", "gates True on B", |s, _| s == "True").await;
    // Everything on A that is not rollgate's is still there: A, the user's listener,
    // group and backend. rollgate's listener and group on A are gone (an NLB group is
    // the region's: left there, B's listener would have shared it by name).
    assert!(load_balancer_ids(&bed, "nlb").await.contains(&a.id));
    assert_eq!(
        listener_groups(&bed, &a.id).await,
        BTreeSet::from([users_group_a.server_group_id.clone()]),
        "A's own listener only"
    );
    let users_backends = || async {
        bed.backends()
            .await
            .into_iter()
            .filter(|x| x.group == users_group_a.server_group_id)
            .map(|x| x.description)
            .collect::<Vec<String>>()
    };
    assert_eq!(users_backends().await, vec!["added-by-hand".to_string()]);
    // Deleting the Service now takes nothing from A.
    bed.delete_service("web").await;
    assert_eq!(users_backends().await, vec!["added-by-hand".to_string()]);
    bed.cleanup().await;
}

/// The groups an NLB's listeners forward to.
async fn listener_groups(bed: &Bed, lb_id: &str) -> BTreeSet<String> {
    let state = bed.emulator("state").await;
    state["nlb"]["listeners"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|l| l["load_balancer_id"] == lb_id)
        .filter_map(|l| l["server_group_id"].as_str().map(str::to_string))
        .collect()
}

/// Two clusters, one cloud account: the bed's cluster and a second one (another
/// kube-apiserver on the bed's etcd, `support::second_cluster`), each with its own
/// controller and cluster id, each with an NLB Service of the same namespace and name
/// and two gated pods. An NLB server group belongs to the region, so this is where
/// names alone would collide. Each cluster's group holds exactly its own pods, the two
/// load balancers and groups are distinct, and deleting the second cluster's Service
/// takes its load balancer away without one event on the first cluster's group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn two_clusters_with_the_same_service_in_one_account_never_touch_each_other() {
    use support::second_cluster::SecondCluster;
    let nlb = Some("alibabacloud.com/nlb");
    let zone_maps = json!({"service.beta.kubernetes.io/alibaba-cloud-loadbalancer-zone-maps": "cn-hangzhou-k:vsw-k,cn-hangzhou-j:vsw-j"});
    let bed = Bed::new("gates-two-clusters", 1, fast_emulator(), &[]).await;
    bed.create_service("web", "web", nlb, zone_maps.clone())
        .await;
    bed.create_deployment("web", "web", 2, &["web"], 1, 0).await;
    let first_pods = wait_gate(
        &bed,
        "web",
        "web",
        "the first cluster's gates True",
        |s, _| s == "True",
    )
    .await;
    let first_ips: BTreeSet<String> = first_pods.iter().filter_map(pod_ip).collect();

    // The second cluster: the same namespace name, Service and gate; pods bound to a
    // node of its own, their status written here (it runs no kubelet).
    let second = SecondCluster::start().await;
    let ns = bed.ns.name.clone();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(second.client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
        )
        .await
        .unwrap();
    // No controller-manager makes the namespace's default ServiceAccount there.
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(second.client.clone(), &ns);
    accounts
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "default"}})).unwrap(),
        )
        .await
        .unwrap();
    let services: Api<Service> = Api::namespaced(second.client.clone(), &ns);
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "web", "annotations": zone_maps},
        "spec": {
            "type": "LoadBalancer",
            "loadBalancerClass": "alibabacloud.com/nlb",
            "selector": {"app": "web"},
            "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
        },
    }))
    .unwrap();
    services
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(second.client.clone(), &ns);
    let second_ips: BTreeSet<String> = ["10.250.0.11", "10.250.0.12"].map(String::from).into();
    for (i, ip) in second_ips.iter().enumerate() {
        let name = format!("web-second-{i}");
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": "web"}},
            "spec": {
                "nodeName": "second-cluster-node",
                "readinessGates": [{"conditionType": format!("{GATE_PREFIX}web")}],
                "containers": [{"name": "nginx", "image": "registry.local/nginx:1.14",
                                "ports": [{"name": "http", "containerPort": 8080}]}],
            },
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
        let now = "2026-01-01T00:00:00Z";
        let status = json!({"status": {
            "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
                {"type": "Ready", "status": "False", "lastTransitionTime": now},
            ],
            "containerStatuses": [{"name": "nginx", "ready": true, "restartCount": 0,
                                   "image": "registry.local/nginx:1.14", "imageID": "",
                                   "state": {"running": {"startedAt": now}}}],
        }});
        pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
    }
    let enis = give_pod_ips_enis(second.client.clone(), &ns, &bed.emu, VPC_ID);
    let mut env = bed.controller_env();
    env.push(("ROLLGATE_CLUSTER_ID".into(), "e2e-second".into()));
    env.push(("ROLLGATE_LEADER_ELECT".into(), "false".into()));
    let env_refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let second_controller =
        ControllerProcess::start_with(&ns, "second-cluster", &second.kubeconfig, &env_refs);
    wait_for(
        "the second cluster's gates True",
        Duration::from_secs(90),
        || async {
            let list = pods
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let states: Vec<_> = list.items.iter().map(|p| gate_status(p, "web")).collect();
            if states.len() == 2
                && states
                    .iter()
                    .all(|s| s.as_ref().is_some_and(|(s, _, _)| s == "True"))
            {
                Ok(())
            } else {
                Err(format!("{states:?}"))
            }
        },
    )
    .await;

    // Each group holds exactly its cluster's pods; nothing is shared.
    let groups_of = |backends: &[EmuBackend]| {
        let mut by_group: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for b in backends.iter().filter(|b| b.product == "nlb") {
            by_group
                .entry(b.group.clone())
                .or_default()
                .insert(b.ip.clone());
        }
        by_group
    };
    let by_group = groups_of(&bed.backends().await);
    let first_group = by_group
        .iter()
        .find(|(_, ips)| **ips == first_ips)
        .map(|(g, _)| g.clone())
        .unwrap_or_else(|| panic!("no group holds exactly {first_ips:?}: {by_group:?}"));
    let second_group = by_group
        .iter()
        .find(|(_, ips)| **ips == second_ips)
        .map(|(g, _)| g.clone())
        .unwrap_or_else(|| panic!("no group holds exactly {second_ips:?}: {by_group:?}"));
    assert_ne!(first_group, second_group);
    let load_balancers = load_balancer_ids(&bed, "nlb").await;
    assert_eq!(load_balancers.len(), 2, "{load_balancers:?}");

    // The second cluster's Service goes: its load balancer goes with it, and the first
    // cluster's group sees nothing at all.
    let start = bed.emulator("timeline").await["events"]
        .as_array()
        .unwrap()
        .len();
    services
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        "the second cluster's Service gone",
        Duration::from_secs(60),
        || async {
            match services.get_opt("web").await {
                Ok(None) => Ok(()),
                other => Err(format!(
                    "{:?}",
                    other.map(|s| s.map(|s| s.finalizers().to_vec()))
                )),
            }
        },
    )
    .await;
    let timeline = bed.emulator("timeline").await;
    let touched: Vec<&Value> = timeline["events"].as_array().unwrap()[start..]
        .iter()
        .filter(|e| e["server_group_id"] == first_group.as_str())
        .collect();
    assert!(
        touched.is_empty(),
        "the first cluster's group was touched: {touched:?}"
    );
    assert_eq!(
        groups_of(&bed.backends().await).get(&first_group),
        Some(&first_ips)
    );
    let left = load_balancer_ids(&bed, "nlb").await;
    assert_eq!(
        left.len(),
        1,
        "the second cluster's load balancer should be gone: {left:?}"
    );
    wait_gate(
        &bed,
        "web",
        "web",
        "the first cluster's gates still True",
        |s, _| s == "True",
    )
    .await;

    second_controller.stop();
    enis.abort();
    drop(second);
    bed.cleanup().await;
}

// ---------------------------------------------------------------------------------------
// The last annotation families of issue 24.

/// A signed raw client of the bed's emulator for `service` (for calls the alibaba-lb
/// client does not make, as a user's console or script would).
fn emulator_api(bed: &Bed, service: alibaba_lb::Service) -> alibaba_lb::transport::ApiClient {
    let credentials = lb_emulator::testing::credentials();
    alibaba_lb::transport::ApiClient::new(&bed.emu.cloud_config(), service, credentials).unwrap()
}

/// One signed call of the bed's emulator (`RegionId` added), its answer.
async fn emulator_call(
    bed: &Bed,
    service: alibaba_lb::Service,
    action: &str,
    pairs: &[(&str, &str)],
) -> Value {
    let mut query: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    query.push(("RegionId".into(), "cn-hangzhou".into()));
    emulator_api(bed, service)
        .call::<Value>(action, &query, &[])
        .await
        .unwrap_or_else(|e| panic!("{action}: {e}"))
        .body
}

/// `DescribeLoadBalancerAttribute` of CLB `id`, as the console reads it.
async fn clb_attribute(bed: &Bed, id: &str) -> Value {
    emulator_call(
        bed,
        alibaba_lb::Service::Clb,
        "DescribeLoadBalancerAttribute",
        &[("LoadBalancerId", id)],
    )
    .await
}

/// `acl-status: on` with `acl-id` and `acl-type` on a CLB Service: the listener admits
/// through the list (read back with `DescribeLoadBalancerTCPListenerAttribute` and the
/// list's `RelatedListeners`), the gates turn True, and a changed `acl-type` reaches
/// the listener. The same annotations on an NLB Service do nothing but say why (one
/// Warning naming security groups), and its gates turn True too. `on` without the
/// list: every gated pod's condition names `acl-id`, and nothing is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn acl_annotations_reach_the_clb_listener_and_follow_changes() {
    use alibaba_lb::Service as Api;
    let bed = Bed::new("gates-acl", 1, fast_emulator(), &[]).await;
    let acl = emulator_call(
        &bed,
        Api::Clb,
        "CreateAccessControlList",
        &[("AclName", "office")],
    )
    .await;
    let acl = acl["AclId"].as_str().unwrap().to_string();
    let with_acl = |kind: &'static str| {
        vec![
            ("acl-status", "on".to_string()),
            ("acl-id", acl.clone()),
            ("acl-type", kind.to_string()),
        ]
    };
    fn annotations(pairs: Vec<(&'static str, String)>) -> Value {
        let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        lb_annotations(&pairs)
    }
    let white = annotations(with_acl("white"));
    bed.create_clb_and_nlb_app(white.clone(), white).await;

    let lb = load_balancer_ids(&bed, "clb").await;
    assert_eq!(lb.len(), 1, "{lb:?}");
    let describe = || {
        let (bed, lb) = (&bed, lb[0].clone());
        async move {
            emulator_call(
                bed,
                Api::Clb,
                "DescribeLoadBalancerTCPListenerAttribute",
                &[("LoadBalancerId", &lb), ("ListenerPort", "80")],
            )
            .await
        }
    };
    let listener = describe().await;
    assert_eq!(
        (
            &listener["AclStatus"],
            &listener["AclId"],
            &listener["AclType"]
        ),
        (&json!("on"), &json!(acl), &json!("white")),
        "{listener}"
    );
    let related = emulator_call(
        &bed,
        Api::Clb,
        "DescribeAccessControlListAttribute",
        &[("AclId", &acl)],
    )
    .await;
    let related = &related["RelatedListeners"]["RelatedListener"];
    assert_eq!(related.as_array().map(Vec::len), Some(1), "{related}");
    assert_eq!(related[0]["LoadBalancerId"], json!(lb[0]), "{related}");

    // A changed type reaches the listener that already exists.
    bed.annotate_service("web", lb_annotations(&[("acl-type", "black")]))
        .await;
    wait_for_value(
        "the black list on the listener",
        Duration::from_secs(30),
        json!("black"),
        || async { describe().await["AclType"].clone() },
    )
    .await;

    // The NLB Service: told that its ACL does nothing, naming the alternative (one
    // Warning per annotation; the recorder merges Events of one reason into one
    // object with a count, keeping the first note).
    let records = event_records(&bed.client, &bed.ns.name, "api").await;
    let said: Vec<_> = records
        .iter()
        .filter(|r| r.reason == "UnsupportedLoadBalancerAnnotation")
        .collect();
    assert_eq!(said.len(), 1, "{records:?}");
    assert!(
        said[0].note.contains("alibaba-cloud-loadbalancer-acl-")
            && said[0].note.contains("does not apply to NLB")
            && said[0].note.contains("security groups"),
        "{records:?}"
    );
    assert_eq!(said[0].occurrences, 3, "one per annotation: {records:?}");
    let web_records = event_records(&bed.client, &bed.ns.name, "web").await;
    assert!(
        !web_records
            .iter()
            .any(|r| r.reason == "UnsupportedLoadBalancerAnnotation"),
        "the CLB Service's ACL is acted on: {web_records:?}"
    );

    // `on` without the list: said on every gate, nothing made.
    let without_list = lb_annotations(&[("acl-status", "on"), ("acl-type", "white")]);
    let message = refused_annotation(&bed, without_list).await;
    assert!(
        message.contains("service.beta.kubernetes.io/alibaba-cloud-loadbalancer-acl-id"),
        "{message}"
    );
    assert_eq!(load_balancer_ids(&bed, "clb").await.len(), 1);
    bed.cleanup().await;
}

/// A Service whose recorded load balancer (rollgate's own `created-load-balancer-id`
/// annotation, e.g. in a manifest copied from another cluster) is tagged for another
/// cluster: deleting the Service reads the tags first and does not delete that load
/// balancer; one Warning says so, and the finalizer is released so the Service goes.
/// (Before, cleanup deleted whatever id the annotation recorded.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn deleting_a_service_never_deletes_a_load_balancer_of_another_cluster() {
    let bed = Bed::new("gates-del-owner", 1, fast_emulator(), &[]).await;
    let theirs = other_clusters_clb(&bed).await;
    bed.create_service(
        "copied",
        "copied",
        None,
        json!({"rollgate.io/created-load-balancer-id": theirs.id}),
    )
    .await;
    bed.create_deployment("copied", "copied", 1, &["copied"], 1, 0)
        .await;
    wait_gate(
        &bed,
        "copied",
        "copied",
        "the gate False, saying CloudApiError",
        |s, r| s == "False" && r == "CloudApiError",
    )
    .await;
    // Held by rollgate's finalizer: deleting it runs the cleanup.
    let svc = bed.services().get("copied").await.unwrap();
    assert!(
        svc.finalizers()
            .iter()
            .any(|f| f == "rollgate.io/load-balancer"),
        "{:?}",
        svc.finalizers()
    );
    bed.delete_service("copied").await;
    assert!(
        load_balancer_ids(&bed, "clb").await.contains(&theirs.id),
        "the other cluster's load balancer was deleted"
    );
    // A reconcile on a cache that still held the Service (finalizer and all) let go of
    // it a second time and said the Warning again (count 2): give a repeat time to show.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let records = event_records(&bed.client, &bed.ns.name, "copied").await;
    let not_deleted: Vec<_> = records
        .iter()
        .filter(|r| r.reason == "LoadBalancerOfAnotherCluster" && r.note.contains("did not delete"))
        .collect();
    assert_eq!(not_deleted.len(), 1, "{records:?}");
    assert_eq!(not_deleted[0].occurrences, 1, "{records:?}");
    assert!(
        not_deleted[0].note.contains(&theirs.id) && not_deleted[0].note.contains("other-cluster"),
        "{records:?}"
    );
    bed.cleanup().await;
}

/// `weight: 40` on a CLB and an NLB Service with gated pods: every backend carries 40
/// (CLB read back with `DescribeVServerGroupAttribute`, NLB from the emulator's
/// group), the gates turn True, and `weight: 70` reaches the backends that already
/// exist. Scaled down, a pod's backend still drains to 0 (`70 -> 0` on the timeline)
/// before it is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn weight_reaches_every_backend_and_follows_changes() {
    let bed = Bed::new("gates-weight", 1, fast_emulator(), &[]).await;
    let weight = lb_annotations(&[("weight", "40")]);
    bed.create_clb_and_nlb_app(weight.clone(), weight).await;

    // Through the CLB API: the vServer group's backends and their weights.
    let clb_weights = || async {
        let state = bed.emulator("state").await;
        let group = state["clb"]["vserver_groups"][0]["id"]
            .as_str()
            .unwrap()
            .to_string();
        let answer = emulator_call(
            &bed,
            alibaba_lb::Service::Clb,
            "DescribeVServerGroupAttribute",
            &[("VServerGroupId", &group)],
        )
        .await;
        answer["BackendServers"]["BackendServer"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["Weight"].as_u64().unwrap())
            .collect::<Vec<_>>()
    };
    let nlb_weights = || async {
        bed.backends()
            .await
            .into_iter()
            .filter(|b| b.product == "nlb")
            .map(|b| b.weight)
            .collect::<Vec<_>>()
    };
    assert_eq!(clb_weights().await, [40, 40]);
    assert_eq!(nlb_weights().await, [40, 40]);

    // A changed weight reaches the backends that exist.
    for service in ["web", "api"] {
        bed.annotate_service(service, lb_annotations(&[("weight", "70")]))
            .await;
    }
    wait_for_value(
        "weight 70 everywhere (CLB, NLB)",
        Duration::from_secs(30),
        (vec![70, 70], vec![70, 70]),
        || async { (clb_weights().await, nlb_weights().await) },
    )
    .await;

    // Scaled down: the leaving pod's CLB backend goes 70 -> 0, then away.
    bed.scale("web", 1).await;
    wait_for_value(
        "one backend left",
        Duration::from_secs(60),
        vec![70],
        &clb_weights,
    )
    .await;
    let timeline = bed.emulator("timeline").await;
    let events: Vec<(String, String, String)> = timeline["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["product"] == "clb")
        .map(|e| {
            (
                e["ip"].as_str().unwrap_or_default().to_string(),
                e["event"].as_str().unwrap_or_default().to_string(),
                e["detail"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let removed: Vec<&String> = events
        .iter()
        .filter(|(_, event, _)| event == "removed")
        .map(|(ip, _, _)| ip)
        .collect();
    assert_eq!(removed.len(), 1, "{events:?}");
    let of_removed: Vec<_> = events
        .iter()
        .filter(|(ip, _, _)| ip == removed[0])
        .collect();
    let drained = of_removed
        .iter()
        .position(|(_, event, detail)| event == "weight-changed" && detail == "70 -> 0")
        .unwrap_or_else(|| panic!("never drained from 70: {of_removed:?}"));
    let gone = of_removed
        .iter()
        .position(|(_, event, _)| event == "removed")
        .unwrap();
    assert!(drained < gone, "{of_removed:?}");
    bed.cleanup().await;
}

/// `address-type: intranet` with `vswitch-id` on a CLB Service with gated pods: the
/// created CLB is intranet on that vswitch (read back with
/// `DescribeLoadBalancerAttribute`) and the gates turn True. Intranet without a
/// vswitch: every gate says `InvalidLoadBalancerAnnotation` naming `vswitch-id`, and
/// nothing more is created (the API would refuse it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn vswitch_id_places_an_intranet_clb_and_intranet_without_it_is_refused() {
    let bed = Bed::new("gates-vswitch", 1, fast_emulator(), &[]).await;
    let placed = lb_annotations(&[("address-type", "intranet"), ("vswitch-id", "vsw-e2e")]);
    bed.create_ready_app("web", None, placed, 2).await;
    let lb = load_balancer_ids(&bed, "clb").await;
    assert_eq!(lb.len(), 1, "{lb:?}");
    let read = clb_attribute(&bed, &lb[0]).await;
    assert_eq!(
        (&read["AddressType"], &read["VSwitchId"], &read["VpcId"]),
        (&json!("intranet"), &json!("vsw-e2e"), &json!(VPC_ID)),
        "{read}"
    );

    let intranet = lb_annotations(&[("address-type", "intranet")]);
    let message = refused_annotation(&bed, intranet).await;
    assert!(
        message.contains("service.beta.kubernetes.io/alibaba-cloud-loadbalancer-vswitch-id"),
        "{message}"
    );
    assert_eq!(load_balancer_ids(&bed, "clb").await.len(), 1);
    bed.cleanup().await;
}

/// `instance-charge-type: PayByCLCU` on one CLB Service and `spec: slb.s2.small` on
/// another, both with gated pods: each created CLB is what was asked (read back with
/// `DescribeLoadBalancerAttribute`: CLCU without a spec, s2.small by spec) and the
/// gates turn True on both (both take pod backends). A spec with CLCU: every gate says
/// `InvalidLoadBalancerAnnotation` naming `spec`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn spec_and_charge_type_shape_the_created_clb() {
    let bed = Bed::new("gates-clbspec", 1, fast_emulator(), &[]).await;
    bed.create_service(
        "clcu",
        "web",
        None,
        lb_annotations(&[("instance-charge-type", "PayByCLCU")]),
    )
    .await;
    bed.create_service(
        "s2",
        "web",
        None,
        lb_annotations(&[("spec", "slb.s2.small")]),
    )
    .await;
    bed.create_deployment("web", "web", 2, &["clcu", "s2"], 1, 0)
        .await;
    wait_rollout(&bed, "web", "web", "clcu", Duration::from_secs(90)).await;
    wait_rollout(&bed, "web", "web", "s2", Duration::from_secs(90)).await;
    for (service, spec, charge) in [
        ("clcu", "", "PayByCLCU"),
        ("s2", "slb.s2.small", "PayBySpec"),
    ] {
        let id = bed.created_load_balancer_id(service).await.unwrap();
        let read = clb_attribute(&bed, &id).await;
        assert_eq!(
            (&read["LoadBalancerSpec"], &read["InstanceChargeType"]),
            (&json!(spec), &json!(charge)),
            "{service}: {read}"
        );
    }

    let both = lb_annotations(&[
        ("spec", "slb.s1.small"),
        ("instance-charge-type", "PayByCLCU"),
    ]);
    let message = refused_annotation(&bed, both).await;
    assert!(
        message.contains("alibaba-cloud-loadbalancer-spec") && message.contains("PayByCLCU"),
        "{message}"
    );
    assert_eq!(load_balancer_ids(&bed, "clb").await.len(), 2);
    bed.cleanup().await;
}
