//! Load-balancer readiness gates end to end, against the bed of `tests/support/gated.rs`
//! (see tests/gates_walk_through.rs for what it runs and what the tests judge).
//!
//! This file: the listener and load-balancer annotations (health check, protocols and
//! certificates, ACL, weight, vswitch, spec) reaching the cloud and following changes,
//! refused ones said on every gated pod, and the opt-in fail-open timeout.
mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use serde_json::{json, Value};
use support::gated::*;
use support::*;

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

/// `instance-charge-type: PayByCLCU` on one CLB Service and `spec: slb.s2.small` with
/// `instance-charge-type: PayBySpec` on another, both with gated pods: each created CLB
/// is what was asked (read back with `DescribeLoadBalancerAttribute`: CLCU without a
/// spec, s2.small by spec) and the gates turn True on both (both take pod backends). A
/// spec with CLCU is accepted (a CLCU instance has no spec: the Service is told once
/// that the spec is not applied, `tests/gates_real_account.rs`), not refused.
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
        lb_annotations(&[
            ("spec", "slb.s2.small"),
            ("instance-charge-type", "PayBySpec"),
        ]),
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

    assert_eq!(load_balancer_ids(&bed, "clb").await.len(), 2);
    bed.cleanup().await;
}

/// `rollgate.io/readiness-gate-timeout`: a backend the emulator holds unhealthy keeps
/// its gate False until the timeout has passed since the pod's containers turned ready
/// (never before: the condition's own transition time is compared), then the gate turns
/// True with reason `GateTimedOut` naming what it waited on, the pod and the Service
/// each get one Warning, and the metric counts one timeout. Healthy at last, the reason
/// says so. Without the annotation (today's code) the gate would wait forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn a_gate_held_unhealthy_times_out_after_the_timeout_and_never_before() {
    const TIMEOUT_S: i64 = 20;
    let gate = format!("{GATE_PREFIX}web");
    // Health checks that never pass by themselves: the test decides.
    let emulator = lb_emulator::EmulatorConfig {
        health_delay: Duration::from_secs(3600),
        ..fast_emulator()
    };
    let bed = Bed::new("gates-timeout", 1, emulator, &[]).await;
    let timeout = json!({"rollgate.io/readiness-gate-timeout": format!("{TIMEOUT_S}s")});
    bed.create_service("web", "web", None, timeout).await;
    bed.create_deployment("web", "web", 1, &["web"], 1, 0).await;
    let pods = wait_gate(&bed, "web", "web", "the backend registered", |s, r| {
        s == "False" && r == "HealthCheckPending"
    })
    .await;
    let ip = pod_ip(&pods[0]).expect("the pod has an IP");
    let held = bed
        .emulator_post("health", json!({"ip": ip, "port": 8080, "healthy": false}))
        .await;
    assert_eq!(held["matched"], 1, "{held}");

    let transition = |pod: &Pod, type_: &str| -> Option<(String, i64)> {
        let c = pod
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == type_)?;
        Some((
            c.status.clone(),
            c.last_transition_time.as_ref()?.0.as_second(),
        ))
    };
    // Watched until it turns True: never True while the timeout runs.
    let (flipped, ready_at) = wait_for(
        "the gate to time out",
        Duration::from_secs(TIMEOUT_S as u64 + 45),
        || async {
            let pods = bed.live_pods("web").await;
            let pod = pods.first().ok_or("no pod")?;
            let (_, ready_at) = transition(pod, "ContainersReady").ok_or("no ContainersReady")?;
            match transition(pod, &gate) {
                Some((status, at)) if status == "True" => Ok((at, ready_at)),
                other => Err(format!("gate {other:?}: {}", describe_gates(&pods, "web"))),
            }
        },
    )
    .await;
    assert!(
        flipped - ready_at >= TIMEOUT_S,
        "the gate turned True {} s after the containers turned ready, before its {TIMEOUT_S} s timeout",
        flipped - ready_at
    );
    let pods = bed.live_pods("web").await;
    let (status, reason, message) = gate_status(&pods[0], "web").unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("True", "GateTimedOut"));
    for part in [
        "rollgate.io/readiness-gate-timeout",
        "20s",
        "BackendUnhealthy",
    ] {
        assert!(message.contains(part), "{part}: {message}");
    }

    // Looks go on (and the gate stays True without a rewrite): one Warning each.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let pod_name = pods[0].name_any();
    for regarding in [pod_name.as_str(), "web"] {
        let records = event_records(&bed.client, &bed.ns.name, regarding).await;
        let warnings: Vec<_> = records
            .iter()
            .filter(|r| r.reason == "GateTimedOut")
            .collect();
        assert_eq!(warnings.len(), 1, "{regarding}: {records:?}");
        assert_eq!(warnings[0].occurrences, 1, "{regarding}: {records:?}");
        assert_eq!(warnings[0].type_, "Warning");
        assert!(
            warnings[0].note.contains("BackendUnhealthy"),
            "{:?}",
            warnings[0]
        );
    }
    let metrics = bed.metrics().await;
    let counted = metrics
        .lines()
        .find(|l| l.starts_with("rollgate_gate_timeouts_total{") && l.contains("service=\"web\""))
        .unwrap_or_else(|| panic!("no timeout counted:\n{metrics}"));
    assert!(counted.ends_with(" 1"), "{counted}");

    // Healthy at last: the gate says so.
    bed.emulator_post("health", json!({"ip": ip, "port": 8080, "healthy": true}))
        .await;
    wait_gate(&bed, "web", "web", "the gate healthy", |s, r| {
        s == "True" && r == "LoadBalancerHealthy"
    })
    .await;
    bed.cleanup().await;
}
