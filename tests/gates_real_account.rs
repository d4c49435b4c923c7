//! Readiness gates against what a real account does and the plain bed did not model
//! (issue 43): pods sharing one ENI (Terway's shared-ENI mode), a CLB listener whose
//! start after creation failed, a `spec` annotation without a charge type (pay-by-spec
//! is no longer sold), and account quotas that are used up. Same bed as
//! `tests/gates.rs` (`tests/support/gated.rs`): a real control plane, `rollgate
//! controller`, the `lb-emulator` process. Nothing connects to pod IPs.
mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use serde_json::json;
use support::gated::*;
use support::*;

/// Two ports (two listeners and groups) over one target port, as real Services have.
fn two_ports() -> serde_json::Value {
    json!([
        {"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"},
        {"name": "alt", "port": 81, "targetPort": "http", "protocol": "TCP"},
    ])
}

/// Terway's shared-ENI mode: both pods' IPs are secondary IPs of the node's one ENI,
/// behind two listeners, with the same target port. The second pod's backend is forced
/// down before its first health check: its gate must never turn True on its
/// neighbour's `normal` (before issue 43 both pods matched the first health entry of
/// the ENI, and the second pod's gate turned True), while the first pod stays True.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn pods_sharing_an_eni_each_wait_for_their_own_health() {
    let bed = Bed::new_on_shared_enis("gates-eni", 1, fast_emulator(), &[]).await;
    bed.create_service_with_ports("web", "web", None, json!({}), two_ports())
        .await;
    bed.create_deployment("web", "web", 1, &["web"], 1, 0).await;
    let first = wait_gate(&bed, "web", "web", "first gate True", |s, _| s == "True").await;
    let first = first[0].name_any();
    bed.scale("web", 2).await;
    // The new pod, once it has its IP (and with it a place on the shared ENI).
    let second: Pod = wait_for("the second pod's IP", Duration::from_secs(60), || async {
        let pods = bed.live_pods("web").await;
        pods.into_iter()
            .find(|p| p.name_any() != first && pod_ip(p).is_some())
            .ok_or_else(|| "no second pod with an IP yet".to_string())
    })
    .await;
    let ip = pod_ip(&second).unwrap();
    // Forced down as soon as its backends exist, well before the first verdict
    // (registration 300 ms, health 1.5 s after it).
    wait_for(
        "the second pod's backends",
        Duration::from_secs(30),
        || async {
            let forced = bed
                .emulator_post("health", json!({"ip": ip, "port": 8080, "healthy": false}))
                .await;
            match forced["matched"].as_u64() {
                Some(2) => Ok(()),
                other => Err(format!("matched {other:?} of 2 backends")),
            }
        },
    )
    .await;
    let backends = bed.backends().await;
    let enis: std::collections::BTreeSet<&str> =
        backends.iter().map(|b| b.server_id.as_str()).collect();
    assert_eq!(enis.len(), 1, "both pods on one ENI: {backends:?}");
    assert_eq!(backends.len(), 4, "two pods in two groups: {backends:?}");
    // Well past the first checks: the second pod is held, the first stays True.
    for _ in 0..40 {
        let pods = bed.live_pods("web").await;
        for pod in &pods {
            let (status, reason, _) = gate_status(pod, "web").unwrap_or_default();
            if pod.name_any() == first {
                assert_eq!(status, "True", "{}", describe_gates(&pods, "web"));
            } else {
                assert_ne!(
                    status,
                    "True",
                    "the pod that is down turned Ready ({reason}): {}",
                    describe_gates(&pods, "web")
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Back up: its own `normal` lets it through.
    bed.emulator_post("health", json!({"ip": ip, "port": 8080, "healthy": null}))
        .await;
    bed.wait_gates("web", 2, "True", Duration::from_secs(60))
        .await;
    bed.cleanup().await;
}

/// `StartLoadBalancerListener` after the listener's creation fails until the client's
/// retries run out (HTTP 500 eight times). The next looks find the listener stopped
/// (every backend `unavailable`) and start it; the gates turn True and the Service
/// gets one `ListenerStopped` Warning. Before issue 43 the listener stayed stopped and
/// every gate waited forever on `HealthCheckPending`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn a_listener_whose_start_failed_is_started_by_a_later_look() {
    let bed = Bed::new("gates-stopped", 1, fast_emulator(), &[]).await;
    bed.emulator_post(
        "faults",
        json!({"fail_next": {"StartLoadBalancerListener": 8}}),
    )
    .await;
    bed.create_service("web", "web", None, json!({})).await;
    bed.create_deployment("web", "web", 2, &["web"], 1, 0).await;
    bed.wait_gates("web", 2, "True", Duration::from_secs(120))
        .await;
    let state = bed.emulator("state").await;
    let starts = state["stats"]["per_action"]["StartLoadBalancerListener"]
        .as_u64()
        .unwrap_or(0);
    assert!(
        starts > 8,
        "started once the failures ran out: {starts} calls"
    );
    let records = event_records(&bed.client, &bed.ns.name, "web").await;
    let stopped: Vec<_> = records
        .iter()
        .filter(|r| r.reason == "ListenerStopped")
        .collect();
    assert_eq!(stopped.len(), 1, "{records:?}");
    assert_eq!(stopped[0].occurrences, 1, "{records:?}");
    assert!(stopped[0].note.contains("TCP:80"), "{}", stopped[0].note);
    bed.cleanup().await;
}

/// A `spec` annotation alone (CCM's `slb.s1.small`, in most CCM-era manifests): the CLB
/// is created pay-by-CLCU without a spec, the gates turn True, and the Service is told
/// once that the spec is not applied. Before issue 43 the create asked for a pay-by-spec
/// instance, which is no longer sold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn a_spec_alone_makes_a_pay_by_clcu_clb_and_the_service_is_told_once() {
    let bed = Bed::new("gates-spec", 1, fast_emulator(), &[]).await;
    let spec = lb_annotations(&[("spec", "slb.s1.small")]);
    bed.create_ready_app("web", None, spec, 2).await;
    let id = bed.created_load_balancer_id("web").await.unwrap();
    let state = bed.emulator("state").await;
    let clb = state["clb"]["load_balancers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|lb| lb["id"] == id.as_str())
        .unwrap_or_else(|| panic!("{id} not in {}", state["clb"]));
    assert_eq!(clb["charge_type"], "PayByCLCU", "{clb}");
    assert_eq!(clb["spec"], "", "{clb}");
    // A few polls later, still one Warning.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let records = event_records(&bed.client, &bed.ns.name, "web").await;
    let said: Vec<_> = records
        .iter()
        .filter(|r| r.note.contains("is not applied"))
        .collect();
    assert_eq!(said.len(), 1, "{records:?}");
    assert_eq!(said[0].occurrences, 1, "{records:?}");
    assert!(said[0].note.contains("PayBySpec"), "{}", said[0].note);
    bed.cleanup().await;
}

/// The account may have one CLB (`slb_quota_instances_num=1`): the second Service's
/// gates wait with `CloudQuotaExceeded` naming the quota and how to raise it, the
/// Service has one Warning, nothing is deleted, and the create is asked again only on
/// the slow poll (3 s here). Raising the quota lets it through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn a_used_up_quota_holds_the_gates_with_its_own_reason_and_one_warning() {
    let mut emulator = fast_emulator();
    emulator
        .account_quotas
        .set("slb_quota_instances_num", 1)
        .unwrap();
    let bed = Bed::new("gates-quota", 1, emulator, &[]).await;
    bed.create_ready_app("first", None, json!({}), 1).await;
    let held = bed
        .create_held_app("second", None, json!({}), 2, "CloudQuotaExceeded")
        .await;
    for (_, message) in &held {
        for part in [
            "CreateLoadBalancer",
            "slb_quota_instances_num",
            "Quota Center",
        ] {
            assert!(message.contains(part), "{message}");
        }
    }
    let creates = |state: &serde_json::Value| {
        state["stats"]["per_action"]["CreateLoadBalancer"]
            .as_u64()
            .unwrap_or(0)
    };
    let before = creates(&bed.emulator("state").await);
    tokio::time::sleep(Duration::from_secs(9)).await;
    let state = bed.emulator("state").await;
    let asked = creates(&state) - before;
    // 9 s at a 3 s slow poll: about 3 asks, never a tight loop of retries.
    assert!(asked <= 6, "{asked} creates in 9 s");
    let deletes = state["stats"]["per_action"]["DeleteLoadBalancer"]
        .as_u64()
        .unwrap_or(0);
    assert_eq!(deletes, 0, "nothing is deleted while the quota holds");
    let records = event_records(&bed.client, &bed.ns.name, "second").await;
    let warnings: Vec<_> = records
        .iter()
        .filter(|r| r.reason == "CloudQuotaExceeded")
        .collect();
    assert_eq!(warnings.len(), 1, "{records:?}");
    assert_eq!(warnings[0].occurrences, 1, "{records:?}");
    assert!(
        warnings[0].note.contains("slb_quota_instances_num"),
        "{}",
        warnings[0].note
    );
    bed.emulator_post("quotas", json!({"slb_quota_instances_num": 30}))
        .await;
    bed.wait_gates("second", 2, "True", Duration::from_secs(60))
        .await;
    bed.cleanup().await;
}

/// Every API action has a quota on a real account (issue 43, Deliver 5), and the
/// emulator enforces each one here (`--api-rate-limits`, a token bucket per action).
/// Four CLB Services keep a gate pending for 12 s (the first health verdict comes
/// late) while rollgate looks at each every 100 ms: 40 looks a second asked for, twice
/// what `DescribeHealthStatus` allows. With its per-action pacing rollgate is never
/// throttled by any action, it still looks as fast as the quota lets it, and its
/// metrics count requests per action with no throttling. (With
/// `--cloud-action-quotas=false`, as before issue 43, the same bed is throttled:
/// `DescribeVServerGroupAttribute` 6 of 197 in one run.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn many_pending_gates_keep_every_action_inside_its_quota() {
    let emulator = lb_emulator::EmulatorConfig {
        api_rate_limits: true,
        health_delay: Duration::from_secs(12),
        ..fast_emulator()
    };
    let bed = Bed::new(
        "gates-paced",
        1,
        emulator,
        &[("ROLLGATE_HEALTH_POLL_FAST", "100ms")],
    )
    .await;
    let apps = ["a", "b", "c", "d"];
    for app in apps {
        bed.create_service(app, app, None, json!({})).await;
        bed.create_deployment(app, app, 1, &[app], 1, 0).await;
    }
    // Every app's pod is registered and waits on its first health verdict.
    wait_for("four backends", Duration::from_secs(60), || async {
        let backends = bed.backends().await;
        (backends.len() == apps.len())
            .then_some(())
            .ok_or_else(|| format!("{} backends", backends.len()))
    })
    .await;
    let health_reads = |calls: &serde_json::Value| {
        calls["actions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["action"] == "DescribeHealthStatus")
            .map_or(0, |a| a["calls"].as_u64().unwrap())
    };
    let before = health_reads(&bed.emulator("calls").await);
    let window = Duration::from_secs(6);
    tokio::time::sleep(window).await;
    let calls = bed.emulator("calls").await;
    let pods = bed.live_pods("a").await;
    assert!(
        pods.iter()
            .all(|p| gate_status(p, "a").is_some_and(|(s, _, _)| s == "False")),
        "still pending through the window: {}",
        describe_gates(&pods, "a")
    );
    let throttled: Vec<String> = calls["actions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["throttled"].as_u64().unwrap() > 0)
        .map(|a| {
            format!(
                "{} {} of {} ({})",
                a["action"], a["throttled"], a["calls"], a["limit"]
            )
        })
        .collect();
    assert!(throttled.is_empty(), "throttled: {throttled:?}");
    // Paced by the quota, not starved: the reads went at well over half of 20/s.
    let per_second = (health_reads(&calls) - before) as f64 / window.as_secs_f64();
    assert!(
        (10.0..=20.0).contains(&per_second),
        "{per_second:.1} DescribeHealthStatus calls/s"
    );
    let metrics = bed.metrics().await;
    assert!(
        metrics.contains(
            "rollgate_gate_cloud_api_requests_total{api=\"clb\",action=\"DescribeHealthStatus\"}"
        ),
        "{metrics}"
    );
    assert!(
        !metrics.contains("rollgate_gate_cloud_api_throttled_total{"),
        "{metrics}"
    );
    for app in apps {
        bed.wait_gates(app, 1, "True", Duration::from_secs(60))
            .await;
    }
    bed.cleanup().await;
}
