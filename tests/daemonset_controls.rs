//! Controls an operator steers an AdvancedRollingUpdate with, on the local control plane:
//! `rollgate.io/paused` stops every deletion mid-rollout (counted in the API server's
//! audit log by user, not inferred from timing) and the rollout resumes when it is
//! removed; `rollgate.io/partition` keeps exactly the documented nodes (the old ones
//! whose names sort first) on the old revision, and lowering it goes on; and
//! `rollgate.io/node-selector` upgrades one node pool, then a widened selector the next,
//! then every node once it is removed. Pods kept old are checked in the audit log (no
//! DELETE by rollgate, by name) and by UID. Both toleration shapes.
//! Needs `make cluster-up`; `cargo test --test daemonset_controls -- --ignored --nocapture` narrates.
mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams};
use kube::Api;
use serde_json::json;
use support::daemonset::{image_of, node_of, rollgate_status, wait_ready_on, EdgeBed, Others};
use support::*;

const NODES: usize = 4;

/// Pod DELETE calls by rollgate's identity in `namespace` so far.
fn rollgate_deletions(namespace: &str) -> usize {
    audit_records()
        .iter()
        .filter(|r| {
            r.verb == "delete"
                && r.resource == "pods"
                && r.subresource.is_none()
                && r.user == CONTROLLER_USER
                && r.namespace.as_deref() == Some(namespace)
        })
        .count()
}

async fn pause_mid_rollout(shape: Shape) {
    let tag = format!("pause-{}", shape.tag());
    let annotations = json!({
        "apps.openyurt.io/update-strategy": "AdvancedRollingUpdate",
        "apps.openyurt.io/max-unavailable": "1",
    });
    let bed = Bed::new(&tag, NODES, shape, annotations).await;
    let (n, pods, nodes) = (bed.ns.name.clone(), bed.pods.clone(), &bed.nodes);
    let client = bed.client.clone();
    let set = |patch: serde_json::Value| bed.patch(patch);
    set(json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "edge:v2"}]}}}})).await;
    // Mid-rollout: the first node is being replaced, then the pause.
    wait_for("the first v2 pod", Duration::from_secs(60), || async {
        let list = pods
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items;
        if list.iter().any(|p| image_of(p) == "edge:v2") {
            Ok(())
        } else {
            Err(describe_pods(&list))
        }
    })
    .await;
    set(json!({"metadata": {"annotations": {"rollgate.io/paused": "true"}}})).await;
    // A deletion already under way may still land: settle, then count.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = rollgate_deletions(&n);
    holds_for(
        "no deletion by rollgate while paused",
        Duration::from_secs(12),
        || async {
            let now = rollgate_deletions(&n);
            if now == before {
                Ok(())
            } else {
                Err(format!("{} deletion(s) while paused", now - before))
            }
        },
    )
    .await;
    let list = pods.list(&ListParams::default()).await.unwrap().items;
    let old_left = list.iter().filter(|p| image_of(p) == "edge:v1").count();
    note(format!(
        "{}: paused after {before} deletion(s); {old_left} v1 pod(s) held for 12 s",
        shape.tag()
    ));
    assert!(
        old_left >= 1,
        "premise: paused before the end: {}",
        describe_pods(&list)
    );
    let status = std::process::Command::new(controller_binary())
        .args(["status", "ds/edge", "-n", &n])
        .env("KUBECONFIG", kubeconfig_path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("paused (rollgate.io/paused=true)"), "{text}");
    let events = events_for(&client, &n, "edge").await;
    assert!(
        events
            .iter()
            .any(|(t, r, _)| t == "Normal" && r == "RolloutPaused"),
        "{events:?}"
    );

    // A bad value: nothing is deleted, and a Warning names the accepted forms.
    set(json!({"metadata": {"annotations": {"rollgate.io/paused": "yes"}}})).await;
    let warning = wait_for(
        "a Warning InvalidPaused",
        Duration::from_secs(30),
        || async {
            events_for(&client, &n, "edge")
                .await
                .into_iter()
                .find(|(t, r, _)| t == "Warning" && r == "InvalidPaused")
                .ok_or_else(|| "none yet".to_string())
        },
    )
    .await;
    assert!(warning.2.contains("expected true or false"), "{warning:?}");
    assert_eq!(
        rollgate_deletions(&n),
        before,
        "a bad value deletes nothing"
    );

    // Resumed: the rollout finishes.
    set(json!({"metadata": {"annotations": {"rollgate.io/paused": null}}})).await;
    wait_ready_on(
        &pods,
        &nodes.names,
        "edge:v2",
        Others::None,
        Duration::from_secs(120),
    )
    .await;
    assert!(rollgate_deletions(&n) > before, "resumed by rollgate");
    bed.cleanup().await;
}

#[tokio::test]
#[ignore = "needs a cluster: make test"]
async fn a_paused_rollout_deletes_nothing_and_resumes_tolerating_all_taints() {
    pause_mid_rollout(Shape::ToleratesAll).await;
}

#[tokio::test]
#[ignore = "needs a cluster: make test"]
async fn a_paused_rollout_deletes_nothing_and_resumes_tolerating_none() {
    pause_mid_rollout(Shape::ToleratesNone).await;
}

/// The live pods by node: (pod name, uid, image).
async fn pods_by_node(
    pods: &Api<Pod>,
) -> std::collections::BTreeMap<String, (String, String, String)> {
    pods.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| {
            let node = node_of(&p)?;
            Some((
                node,
                (
                    p.metadata.name.clone().unwrap_or_default(),
                    p.metadata.uid.clone().unwrap_or_default(),
                    image_of(&p).to_string(),
                ),
            ))
        })
        .collect()
}

/// Pod DELETE calls by rollgate on the pod named `pod` in `namespace`.
fn rollgate_deletions_of(namespace: &str, pod: &str) -> usize {
    pod_deletes(namespace, Some(CONTROLLER_USER))
        .iter()
        .filter(|r| r.name.as_deref() == Some(pod))
        .count()
}

/// A DaemonSet "edge" of edge:v1 on `count` fresh nodes, Ready, with a controller.
type Bed = EdgeBed;

/// What these tests do on the shared bed besides rolling out.
impl EdgeBed {
    async fn new(tag: &str, count: usize, shape: Shape, annotations: serde_json::Value) -> Bed {
        let client = client().await;
        let nodes = TestNodes::create(&client, tag, count).await;
        let timeout = Duration::from_secs(90);
        EdgeBed::start(
            client,
            nodes,
            tag,
            "controls",
            &[],
            annotations,
            shape,
            timeout,
        )
        .await
    }

    async fn annotate(&self, key: &str, value: Option<&str>) {
        self.patch(json!({"metadata": {"annotations": {key: value}}}))
            .await;
    }

    /// Waits for `image` Ready on `upgraded`, then checks for `hold` that the pods of
    /// `kept` stay the very v1 pods they were (same UID), with no DELETE by rollgate.
    async fn upgraded_and_kept(&self, upgraded: &[String], kept: &[String], hold: Duration) {
        wait_ready_on(
            &self.pods,
            upgraded,
            "edge:v2",
            Others::Allowed,
            Duration::from_secs(120),
        )
        .await;
        let before = pods_by_node(&self.pods).await;
        let kept_pods: Vec<(String, (String, String, String))> = kept
            .iter()
            .map(|n| {
                (
                    n.clone(),
                    before
                        .get(n)
                        .cloned()
                        .unwrap_or_else(|| panic!("no pod on {n}")),
                )
            })
            .collect();
        for (node, (_, _, image)) in &kept_pods {
            assert_eq!(image, "edge:v1", "{node} kept on the old revision");
        }
        let n = &self.ns.name;
        holds_for("the kept nodes keep their v1 pods", hold, || async {
            let now = pods_by_node(&self.pods).await;
            for (node, (name, uid, _)) in &kept_pods {
                match now.get(node) {
                    Some((_, u, image)) if u == uid && image == "edge:v1" => {}
                    other => return Err(format!("{node}: {name} replaced: {other:?}")),
                }
                let deletions = rollgate_deletions_of(n, name);
                if deletions > 0 {
                    return Err(format!(
                        "rollgate deleted {name} on {node} {deletions} time(s)"
                    ));
                }
            }
            Ok(())
        })
        .await;
    }

    async fn wait_event(
        &self,
        kind: &str,
        reason: &str,
        contains: &str,
    ) -> (String, String, String) {
        wait_for(
            &format!("a {kind} {reason} saying {contains:?}"),
            Duration::from_secs(30),
            || async {
                let events = events_for(&self.client, &self.ns.name, "edge").await;
                events
                    .iter()
                    .find(|(t, r, m)| t == kind && r == reason && m.contains(contains))
                    .cloned()
                    .ok_or_else(|| format!("{events:?}"))
            },
        )
        .await
    }
}

/// Partition 2 of 5 nodes: the two whose names sort first stay on v1, the other three
/// are upgraded one at a time; a bad value warns and deletes nothing; partition 1 then
/// upgrades the second node only; removing it finishes the rollout.
async fn partition_keeps_the_first_names(shape: Shape) {
    let tag = format!("part-{}", shape.tag());
    let bed = Bed::new(
        &tag,
        5,
        shape,
        json!({
            "apps.openyurt.io/update-strategy": "AdvancedRollingUpdate",
            "apps.openyurt.io/max-unavailable": "1",
            "rollgate.io/partition": "2",
        }),
    )
    .await;
    let n = bed.ns.name.clone();
    let names = bed.nodes.names.clone();
    bed.set_image("edge:v2").await;
    // Documented: the old nodes whose names sort first are kept.
    let mut sorted = names.clone();
    sorted.sort();
    bed.upgraded_and_kept(&sorted[2..], &sorted[..2], Duration::from_secs(10))
        .await;
    let deleted = rollgate_deletions(&n);
    assert_eq!(deleted, 3, "one deletion per upgraded node");
    let text = rollgate_status(&n, &[]);
    assert!(
        text.contains("partition 2: 2 node(s) kept on the old revision")
            && text.contains(&sorted[0])
            && text.contains(&sorted[1]),
        "{text}"
    );
    bed.wait_event("Normal", "RolloutHeldBack", "partition 2")
        .await;
    note(format!(
        "{}: partition 2 kept {} and {}",
        shape.tag(),
        sorted[0],
        sorted[1]
    ));

    // A bad value: a Warning naming the forms, and nothing deleted.
    bed.annotate("rollgate.io/partition", Some("two")).await;
    let warning = bed
        .wait_event("Warning", "InvalidPartition", "\"two\"")
        .await;
    assert!(warning.2.contains("percentage"), "{warning:?}");
    assert_eq!(
        rollgate_deletions(&n),
        deleted,
        "a bad value deletes nothing"
    );

    // Lowered to 1: the second name goes, the first stays.
    bed.annotate("rollgate.io/partition", Some("1")).await;
    bed.upgraded_and_kept(&sorted[1..], &sorted[..1], Duration::from_secs(6))
        .await;
    assert_eq!(rollgate_deletions(&n), deleted + 1);

    // Removed: the rollout finishes.
    bed.annotate("rollgate.io/partition", None).await;
    wait_ready_on(
        &bed.pods,
        &names,
        "edge:v2",
        Others::None,
        Duration::from_secs(120),
    )
    .await;
    assert_eq!(rollgate_deletions(&n), deleted + 2);
    bed.cleanup().await;
}

#[tokio::test]
#[ignore = "needs a cluster: make test"]
async fn a_partition_keeps_the_first_names_old_and_lowering_it_goes_on_tolerating_all_taints() {
    partition_keeps_the_first_names(Shape::ToleratesAll).await;
}

#[tokio::test]
#[ignore = "needs a cluster: make test"]
async fn a_partition_keeps_the_first_names_old_and_lowering_it_goes_on_tolerating_none() {
    partition_keeps_the_first_names(Shape::ToleratesNone).await;
}

const POOL: &str = "rollgate.test/pool";

/// Pools a (2 nodes) and b (1 node) and one node with no pool: the selector `pool=a`
/// upgrades pool a only, `pool in (a,b)` then pool b, and removing it the last node.
async fn selector_widened_in_two_steps(shape: Shape) {
    let tag = format!("pool-{}", shape.tag());
    let bed = Bed::new(
        &tag,
        4,
        shape,
        json!({
            "apps.openyurt.io/update-strategy": "AdvancedRollingUpdate",
            "apps.openyurt.io/max-unavailable": "1",
        }),
    )
    .await;
    let n = bed.ns.name.clone();
    let names = bed.nodes.names.clone();
    let nodes_api: Api<k8s_openapi::api::core::v1::Node> = Api::all(bed.client.clone());
    let (pool_a, pool_b, no_pool) = (&names[..2], &names[2..3], &names[3..]);
    for (node, pool) in pool_a
        .iter()
        .map(|n| (n, "a"))
        .chain(pool_b.iter().map(|n| (n, "b")))
    {
        nodes_api
            .patch(
                node,
                &PatchParams::default(),
                &Patch::Merge(&json!({"metadata": {"labels": {POOL: pool}}})),
            )
            .await
            .unwrap();
    }
    // A bad selector first: a Warning naming the forms, and nothing deleted.
    bed.annotate("rollgate.io/node-selector", Some(&format!("{POOL}>1")))
        .await;
    bed.set_image("edge:v2").await;
    let warning = bed
        .wait_event("Warning", "InvalidNodeSelector", "kubectl -l")
        .await;
    assert!(warning.2.contains("key in (v1,v2)"), "{warning:?}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(rollgate_deletions(&n), 0, "a bad selector deletes nothing");

    bed.annotate("rollgate.io/node-selector", Some(&format!("{POOL}=a")))
        .await;
    let held: Vec<String> = pool_b.iter().chain(no_pool).cloned().collect();
    bed.upgraded_and_kept(pool_a, &held, Duration::from_secs(8))
        .await;
    let text = rollgate_status(&n, &[]);
    assert!(
        text.contains("2 node(s) held back by the node selector") && !text.contains("waiting"),
        "{text}"
    );
    bed.wait_event(
        "Normal",
        "RolloutHeldBack",
        "held back by the node selector",
    )
    .await;
    assert_eq!(rollgate_deletions(&n), 2);

    bed.annotate(
        "rollgate.io/node-selector",
        Some(&format!("{POOL} in (a,b)")),
    )
    .await;
    let upgraded: Vec<String> = pool_a.iter().chain(pool_b).cloned().collect();
    bed.upgraded_and_kept(&upgraded, no_pool, Duration::from_secs(6))
        .await;
    assert_eq!(rollgate_deletions(&n), 3);
    note(format!(
        "{}: pool a, then pool b, then the rest",
        shape.tag()
    ));

    bed.annotate("rollgate.io/node-selector", None).await;
    wait_ready_on(
        &bed.pods,
        &names,
        "edge:v2",
        Others::None,
        Duration::from_secs(120),
    )
    .await;
    assert_eq!(rollgate_deletions(&n), 4);
    bed.cleanup().await;
}

#[tokio::test]
#[ignore = "needs a cluster: make test"]
async fn a_node_selector_widened_in_two_steps_upgrades_pool_by_pool_tolerating_all_taints() {
    selector_widened_in_two_steps(Shape::ToleratesAll).await;
}

#[tokio::test]
#[ignore = "needs a cluster: make test"]
async fn a_node_selector_widened_in_two_steps_upgrades_pool_by_pool_tolerating_none() {
    selector_widened_in_two_steps(Shape::ToleratesNone).await;
}
