//! Load-balancer readiness gates end to end, against the bed of `tests/support/gated.rs`
//! (see tests/gates_walk_through.rs for what it runs and what the tests judge).
//!
//! This file: a removed pod's backend drained before it is deregistered, by the
//! controller's drain time or the load balancer's connection drain.
mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::{DeleteParams, Patch, PatchParams};
use kube::ResourceExt;
use serde_json::{json, Value};
use support::gated::*;
use support::*;

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

/// When a timeline event happened.
fn event_at(event: &Value) -> k8s_openapi::jiff::Timestamp {
    event["at"].as_str().unwrap().parse().unwrap()
}
