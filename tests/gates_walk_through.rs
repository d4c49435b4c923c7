//! Load-balancer readiness gates end to end: a real kube-apiserver, kube-controller-manager
//! (Deployments, ReplicaSets), kube-scheduler and simulated nodes, `rollgate controller`
//! with the RBAC of `deploy/`, and the CLB/NLB emulator (the `lb-emulator` process,
//! simulated health mode: a backend turns healthy a fixed time after it is registered).
//! The bed and its probes live in `tests/support/gated.rs` (`Bed`).
//!
//! What the tests judge comes from the emulator's own state and timeline, not from the
//! controller's view. Nothing connects to pod IPs: the emulator only simulates health.
//!
//! This file: the walk-throughs on CLB and NLB, the kinds of pods and Services a gate
//! meets, the capacity proof, and convergence through restarts, throttling and failed jobs.
mod support;

use std::time::Duration;

use kube::api::{Patch, PatchParams};
use kube::ResourceExt;
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
    // What the virtual node's instance is in the cloud: running, with the pod's IP. Said
    // again whenever the live pod's IP is another (under load the bed has been seen to
    // give the pod a second IP after the first read), until its gate is True.
    let ip = wait_for(
        "the ECI pod's gate True",
        Duration::from_secs(90),
        || async {
            let pods = bed.live_pods("web").await;
            let pod = pods.first().ok_or("no pod yet")?;
            let ip = pod_ip(pod).ok_or("no IP yet")?;
            bed.emulator_post(
                "ecis",
                json!({"ip": ip, "container_group_id": eci_id, "vpc_id": VPC_ID}),
            )
            .await;
            match gate_status(pod, "web") {
                Some((status, _, _)) if status == "True" => Ok(ip),
                other => Err(format!("{ip}: gate {other:?}")),
            }
        },
    )
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
        let (min, trace) = lowest_healthy_through_a_restart(&bed, app, 6).await;
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
