//! Pull-ahead (`rollgate.io/pull-ahead: "true"`, issue 26) on the local control plane with
//! the bed's image pull model (a kwok of the test's own with the pull gate on, and
//! hack/bed-image-puller.py): every old pod rollgate deletes had, before its deletion,
//! its node's pull of the new images answered `PullImageSuccess` by a pull Job. Read
//! from the API server's audit log (rollgate's status writes with their bodies, and its
//! pod deletions, in the order the API server received them) and from the pods' Events
//! (which name the Job), not from timing. Both toleration shapes. While a pull is in
//! flight, `rollgate status -o json` names its node, checked against the same audit log.
//!
//! And a pull that keeps failing (the puller's `--job-pull-fails`: pull Jobs never get the
//! new image, the DaemonSet's own pods do): each node is upgraded after exactly
//! `--pull-ahead-tries` failed pulls, said by a Warning `PullAheadGaveUp` naming the node
//! and the tries, and by `rollgate status`.
//! Needs `make cluster-up`; `cargo test --test daemonset_pull_ahead -- --ignored --nocapture` narrates.
mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::Api;
use serde_json::{json, Value};
use support::daemonset::{rollgate_status, wait_ready_on, EdgeBed, Others};
use support::private_kwok::{Addresses, BedImagePuller, PrivateKwok};
use support::*;

const NODES: usize = 4;
/// The bed's pull time for an image a node does not have.
const PULL: &str = "6s";

/// rollgate's `PodImageReady` writes for revision `hash` on the pods of `namespace`, in
/// the order the API server received them: (pod, received, status, reason).
fn image_ready_writes(namespace: &str, hash: &str) -> Vec<(String, Timestamp, String, String)> {
    let mut writes = Vec::new();
    for r in audit_records() {
        if r.verb != "patch"
            || r.resource != "pods"
            || r.subresource.as_deref() != Some("status")
            || r.user != CONTROLLER_USER
            || r.namespace.as_deref() != Some(namespace)
            || r.code != Some(200)
        {
            continue;
        }
        let (Some(body), Some(name), Some(at)) = (&r.request_object, &r.name, r.received) else {
            continue;
        };
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        for c in body["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if c["type"] == "PodImageReady"
                && c["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with(&format!("controllerrevision: {hash}")))
            {
                writes.push((name.clone(), at, text(&c["status"]), text(&c["reason"])));
            }
        }
    }
    writes.sort_by_key(|w| w.1);
    writes
}

/// When rollgate first wrote `PodImageReady` `status`/`reason` for revision `hash` on each
/// pod of `namespace`, by pod name.
fn first_writes(
    namespace: &str,
    hash: &str,
    status: &str,
    reason: &str,
) -> BTreeMap<String, Timestamp> {
    let mut seen = BTreeMap::new();
    for (pod, at, s, r) in image_ready_writes(namespace, hash) {
        if s == status && r == reason {
            seen.entry(pod).or_insert(at);
        }
    }
    seen
}

/// rollgate's pod deletions in `namespace`, by pod name, when the API server got them.
fn deletions(namespace: &str) -> BTreeMap<String, Timestamp> {
    pod_deletes(namespace, Some(CONTROLLER_USER))
        .into_iter()
        .filter_map(|r| Some((r.name?, r.received?)))
        .collect()
}

/// One test's bed: a kwok of its own with the pull gate on and the bed's image puller
/// (pull Jobs failing on `job_pull_fails`), `count` nodes, and the edge DaemonSet with
/// pull-ahead on (and `annotations`) Ready on them, rollgate running with `env`.
struct Bed {
    edge: EdgeBed,
    // Dropped after the test's own cleanup: they stop the simulated kubelet and the pull
    // model.
    _puller: BedImagePuller,
    _kwok: PrivateKwok,
}

impl Bed {
    #[allow(clippy::too_many_arguments)]
    async fn start(
        tag: &str,
        count: usize,
        shape: Shape,
        addresses: Addresses,
        job_pull_fails: &[&str],
        env: &[(&str, &str)],
        annotations: Value,
    ) -> Bed {
        let heartbeat = format!("rollgate.test/{tag}-heartbeat");
        let kwok = PrivateKwok::start(
            &[
                ("__POD_START_DELAY_MS__", 1000),
                ("__POD_STOP_DELAY_MS__", 500),
                ("__POD_REREPORT_DELAY_MS__", 0),
            ],
            &heartbeat,
            addresses,
            true,
            &format!("{tag}-kwok.log"),
        );
        let puller = BedImagePuller::start_with_job_pulls_failing(
            PULL,
            1000,
            &heartbeat,
            &format!("{tag}-puller.log"),
            job_pull_fails,
        );
        let client = client().await;
        let nodes = TestNodes::create_on(&client, tag, count, &heartbeat).await;
        let mut all = json!({
            "apps.openyurt.io/update-strategy": "AdvancedRollingUpdate",
            "apps.openyurt.io/max-unavailable": "1",
            "rollgate.io/pull-ahead": "true",
        });
        all.as_object_mut()
            .unwrap()
            .extend(annotations.as_object().cloned().unwrap_or_default());
        let timeout = Duration::from_secs(120);
        let edge = EdgeBed::start(client, nodes, tag, "pull-ahead", env, all, shape, timeout).await;
        Bed {
            edge,
            _puller: puller,
            _kwok: kwok,
        }
    }

    /// The DaemonSet's pods now: name -> node.
    async fn pods_by_name(&self) -> BTreeMap<String, String> {
        self.edge
            .pods
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .map(|p| {
                (
                    p.metadata.name.clone().unwrap(),
                    p.spec.as_ref().unwrap().node_name.clone().unwrap(),
                )
            })
            .collect()
    }

    /// Waits for edge:v2 Ready on every node and nothing else; the hash of its revision.
    async fn wait_upgraded(&self) -> String {
        let edge = &self.edge;
        let timeout = Duration::from_secs(180);
        wait_ready_on(
            &edge.pods,
            &edge.nodes.names,
            "edge:v2",
            Others::None,
            timeout,
        )
        .await;
        edge.pods.list(&ListParams::default()).await.unwrap().items[0]
            .metadata
            .labels
            .as_ref()
            .unwrap()["controller-revision-hash"]
            .clone()
    }

    async fn cleanup(self) {
        self.edge.cleanup().await;
    }
}

/// `rollgate status -o json` as read while a pull was in flight, and when it was run.
struct StatusSnapshot {
    started: Timestamp,
    finished: Timestamp,
    pulling: Vec<String>,
    held: Vec<String>,
    lines: Vec<String>,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

async fn pull_ahead_rollout(shape: Shape, addresses: Addresses) {
    let tag = format!("pull-{}", shape.tag());
    // Two pulls at a time, and none past the budget's reach: the window is tested in
    // the planner, this shows the bound holds on a live cluster too.
    let bed = Bed::start(
        &tag,
        NODES,
        shape,
        addresses,
        &[],
        &[
            ("ROLLGATE_PULL_AHEAD_PARALLELISM", "2"),
            ("ROLLGATE_PULL_AHEAD_LOOKAHEAD", "1"),
        ],
        json!({}),
    )
    .await;
    let (client, n) = (bed.edge.client.clone(), bed.edge.ns.name.clone());
    let old = bed.pods_by_name().await;

    bed.edge.set_image("edge:v2").await;
    // While deletions wait for their pulls, `rollgate status` says so and names the
    // nodes: checked against the audit log once the revision's hash is known.
    let snapshot = wait_for(
        "rollgate status naming nodes pulling ahead, deletions held for them",
        Duration::from_secs(60),
        || {
            let n = n.clone();
            async move {
                let started = Timestamp::now();
                let text = rollgate_status(&n, &["-o", "json"]);
                let finished = Timestamp::now();
                let doc: Value = serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
                let snapshot = StatusSnapshot {
                    started,
                    finished,
                    pulling: strings(&doc["pull_ahead"]["pulling"]),
                    held: strings(&doc["pull_ahead"]["held"]),
                    lines: strings(&doc["lines"]),
                };
                if snapshot.pulling.is_empty() || snapshot.held.is_empty() {
                    return Err(text);
                }
                Ok(snapshot)
            }
        },
    )
    .await;
    note(format!(
        "{}: status while pulling: {:?}",
        shape.tag(),
        snapshot.lines
    ));
    let hash = bed.wait_upgraded().await;

    // Every old pod was deleted by rollgate, after its pull succeeded.
    let pulled = first_writes(&n, &hash, "True", "PullImageSuccess");
    let requested = first_writes(&n, &hash, "False", "PullImageRequested");
    let deleted = deletions(&n);
    for (pod, node) in &old {
        let deleted_at = deleted.get(pod).unwrap_or_else(|| {
            panic!("old pod {pod} on {node} not deleted by rollgate: {deleted:?}")
        });
        let pulled_at = pulled.get(pod).unwrap_or_else(|| {
            panic!("old pod {pod} on {node} deleted with no PullImageSuccess written: {pulled:?}")
        });
        note(format!(
            "{}: {pod} on {node}: pull succeeded {pulled_at}, deleted {deleted_at}",
            shape.tag()
        ));
        assert!(
            pulled_at < deleted_at,
            "{pod} on {node} deleted at {deleted_at} before its pull succeeded at {pulled_at}"
        );
        // The image-pull controller's Event names the Job that pulled.
        let events = events_for(&client, &n, pod).await;
        assert!(
            events.iter().any(|(t, r, note)| t == "Normal"
                && r == "PullImageSuccess"
                && note.contains("by Job imagepull-")),
            "no PullImageSuccess Event naming a Job on {pod}: {events:?}"
        );
        // What `rollgate status` said: a node named pulling had been asked before the
        // status read the pods and had no answer when it started; a node named held
        // had not lost its old pod yet.
        if snapshot.pulling.contains(node) {
            let asked = requested.get(pod).unwrap_or_else(|| {
                panic!("status named {node} pulling; no request on {pod}: {requested:?}")
            });
            assert!(
                *asked < snapshot.finished && *pulled_at > snapshot.started,
                "status named {node} pulling between {} and {}; asked {asked}, pulled {pulled_at}",
                snapshot.started,
                snapshot.finished
            );
        }
        if snapshot.held.contains(node) {
            assert!(
                *deleted_at > snapshot.started,
                "status named {node} held; its old pod was deleted at {deleted_at}"
            );
        }
    }
    let text = snapshot.lines.join("\n");
    assert!(text.contains("waiting for pull-ahead"), "{text}");
    assert!(!text.contains("; progressing"), "{text}");
    assert!(
        text.contains(&format!(
            "pulling the new images on {} node(s)",
            snapshot.pulling.len()
        )),
        "{text}"
    );
    // The bed saw each node get the new image (the pull Job's, or later the pod's).
    let node_api: Api<Node> = Api::all(client.clone());
    for name in &bed.edge.nodes.names {
        let node = node_api.get(name).await.unwrap();
        let images: Vec<String> = node
            .status
            .and_then(|s| s.images)
            .unwrap_or_default()
            .into_iter()
            .flat_map(|i| i.names.unwrap_or_default())
            .collect();
        assert!(images.iter().any(|i| i == "edge:v2"), "{name}: {images:?}");
    }
    let ds_events = events_for(&client, &n, "edge").await;
    assert!(
        ds_events
            .iter()
            .any(|(t, r, _)| t == "Normal" && r == "PullingImagesAhead"),
        "{ds_events:?}"
    );

    // A bad value: a Warning naming the accepted forms.
    bed.edge
        .patch(json!({"metadata": {"annotations": {"rollgate.io/pull-ahead": "yes"}}}))
        .await;
    let warning = wait_for(
        "a Warning InvalidPullAhead",
        Duration::from_secs(30),
        || async {
            events_for(&client, &n, "edge")
                .await
                .into_iter()
                .find(|(t, r, _)| t == "Warning" && r == "InvalidPullAhead")
                .ok_or_else(|| "none yet".to_string())
        },
    )
    .await;
    assert!(warning.2.contains("expected true or false"), "{warning:?}");
    bed.cleanup().await;
}

/// Pulls that keep failing: with `--pull-ahead-tries 2`, each node's old pod is deleted
/// right after its second failed pull (no success, no third request), a Warning
/// `PullAheadGaveUp` names the node and the tries, and the node then runs the new
/// revision (its pod pulls the image itself).
async fn pull_ahead_gives_up(shape: Shape, addresses: Addresses) {
    const TRIES: usize = 2;
    let tag = format!("pull-fail-{}", shape.tag());
    let bed = Bed::start(
        &tag,
        2,
        shape,
        addresses,
        &["edge:v2"],
        &[("ROLLGATE_PULL_AHEAD_TRIES", "2")],
        // Each failed pull ends at the Job's deadline.
        json!({"rollgate.io/image-pull-deadline": "3s"}),
    )
    .await;
    let (client, n) = (bed.edge.client.clone(), bed.edge.ns.name.clone());
    let old = bed.pods_by_name().await;
    bed.edge.set_image("edge:v2").await;
    let hash = bed.wait_upgraded().await;

    // The audit log's order, per old pod: request, failure, TRIES times, then rollgate's
    // DELETE; never a success or a request more.
    let writes = image_ready_writes(&n, &hash);
    let deleted = deletions(&n);
    for (pod, node) in &old {
        let deleted_at = deleted.get(pod).unwrap_or_else(|| {
            panic!("old pod {pod} on {node} not deleted by rollgate: {deleted:?}")
        });
        let mut seen: Vec<String> = writes
            .iter()
            .filter(|w| &w.0 == pod && w.1 < *deleted_at)
            .map(|w| w.3.clone())
            .collect();
        // Exactly these writes: a reconcile that runs on a pod cache our last write has
        // not reached yet does not send it again (it did: two identical PullImageFail
        // patches 58 ms apart in CI; the apply layer skips such repeats now).
        seen.push("DELETE".into());
        let want: Vec<String> = ["PullImageRequested", "PullImageFail"]
            .repeat(TRIES)
            .into_iter()
            .chain(["DELETE"])
            .map(str::to_string)
            .collect();
        note(format!("{}: {pod} on {node}: {seen:?}", shape.tag()));
        assert_eq!(seen, want, "{pod} on {node}: writes before its deletion");
        let after: Vec<_> = writes
            .iter()
            .filter(|w| &w.0 == pod && w.1 > *deleted_at)
            .collect();
        assert!(
            after.is_empty(),
            "{pod}: writes after its deletion: {after:?}"
        );
    }

    // One Warning per node, naming it (also as the related object) and the tries.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), &n);
    let gave_up: Vec<_> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("PullAheadGaveUp"))
        .collect();
    for node in old.values() {
        let said: Vec<_> = gave_up
            .iter()
            .filter(|e| e.related.as_ref().and_then(|r| r.name.as_deref()) == Some(node.as_str()))
            .collect();
        let occurrences: i32 = said
            .iter()
            .map(|e| e.series.as_ref().map_or(1, |s| s.count))
            .sum();
        assert_eq!(occurrences, 1, "{node}: {said:?}");
        let e = said[0];
        let text = e.note.clone().unwrap_or_default();
        assert_eq!(e.type_.as_deref(), Some("Warning"), "{e:?}");
        assert!(
            text.starts_with(&format!(
                "node {node}: {TRIES} pull(s) of the new images (revision {hash}) failed"
            )),
            "{text}"
        );
    }

    // `rollgate status` names each node upgraded without its images, and its tries.
    let doc: Value = serde_json::from_str(&rollgate_status(&n, &["-o", "json"])).unwrap();
    let mut named: Vec<(String, u64)> = doc["pull_ahead"]["gave_up"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|g| {
            (
                g["node"].as_str().unwrap().to_string(),
                g["failures"].as_u64().unwrap(),
            )
        })
        .collect();
    named.sort();
    let mut want: Vec<(String, u64)> = old.values().map(|n| (n.clone(), TRIES as u64)).collect();
    want.sort();
    assert_eq!(named, want, "{doc}");
    let table = rollgate_status(&n, &[]);
    assert!(
        table.contains("upgraded without the new images after their pulls kept failing"),
        "{table}"
    );
    bed.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn pull_ahead_pulls_each_node_before_its_old_pod_is_deleted_tolerating_all_taints() {
    pull_ahead_rollout(
        Shape::ToleratesAll,
        Addresses {
            cidr: "10.57.0.0/16",
            node_ip: "10.56.0.1",
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn pull_ahead_pulls_each_node_before_its_old_pod_is_deleted_tolerating_none() {
    pull_ahead_rollout(
        Shape::ToleratesNone,
        Addresses {
            cidr: "10.55.0.0/16",
            node_ip: "10.54.0.1",
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn a_pull_that_keeps_failing_is_given_up_after_the_tries_and_the_node_upgraded() {
    pull_ahead_gives_up(
        Shape::ToleratesAll,
        Addresses {
            cidr: "10.53.0.0/16",
            node_ip: "10.52.0.1",
        },
    )
    .await;
}
