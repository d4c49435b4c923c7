//! Load-balancer readiness gates end to end, against the bed of `tests/support/gated.rs`
//! (see tests/gates_walk_through.rs for what it runs and what the tests judge).
//!
//! This file: what belongs to whom: attached load balancers and the user's backends,
//! load balancers of another cluster, and backends an earlier version wrote.
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{json, Value};
use support::gated::*;
use support::*;

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
