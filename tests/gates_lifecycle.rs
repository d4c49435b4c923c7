//! Load-balancer readiness gates end to end, against the bed of `tests/support/gated.rs`
//! (see tests/gates_walk_through.rs for what it runs and what the tests judge).
//!
//! This file: a Service's whole life: its deletion (and what it leaves), and its
//! listeners and groups per (port, protocol) as ports and named load balancers change.
mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use serde_json::json;
use support::gated::*;
use support::*;

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
