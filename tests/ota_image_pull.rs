//! The OTA image pre-pull Job against the local control plane: a `PullImageRequested`
//! request on one pod makes `rollgate controller` pull the DaemonSet's current images on
//! that pod's node with a Job, then report `PodImageReady`; a pull that fails is reported
//! as `PullImageFail` with a Warning Event, and asking again after a failure starts a
//! new pull Job that reports again.
//!
//! The test stands in for the node agent's `imagepull` (it writes the request condition
//! itself). kwok runs the Job's pod: it succeeds ~0.5 s after starting, and fails with
//! `ErrImagePull` when an image name contains `unpullable` (hack/kwok-stages.yaml).
//! A second test pulls on a node with a NoExecute taint that only the live pod tolerates,
//! with a deadline set by the DaemonSet's annotation.
//! Needs `make cluster-up`; `cargo test --test ota_image_pull -- --ignored --nocapture` narrates.
mod support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;
use support::conditions::{condition_of, set_condition};
use support::daemonset::revision_hash;
use support::*;

const NEED_UPGRADE: &str = "PodNeedUpgrade";
const IMAGE_READY: &str = "PodImageReady";
const POD_UID_LABEL: &str = "rollgate.io/image-pull-pod-uid";
const REVISION_LABEL: &str = "rollgate.io/image-pull-revision";
/// The registry mirror an air-gapped site would configure for the no-op helper.
const MIRRORED_HELPER: &str = "registry.local/mirror/busybox:1.36.1-musl";
/// The pods' ServiceAccount; its pull secret reaches the pods through admission only.
const SERVICE_ACCOUNT: &str = "edge-agent";
const ACCOUNT_PULL_SECRET: &str = "edge-agent-registry";

fn daemonset(name: &str, nodes: &TestNodes) -> DaemonSet {
    serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": {"apps.openyurt.io/update-strategy": "OTA"}},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": {"type": "OnDelete"},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": nodes.selector(),
                    // No imagePullSecrets in the template: the ServiceAccount's are added
                    // to each pod by admission, so only the pod knows them.
                    "serviceAccountName": SERVICE_ACCOUNT,
                    "tolerations": [{"key": "edge", "operator": "Exists", "effect": "NoSchedule"}],
                    "initContainers": [{"name": "setup", "image": "registry.local/setup:v1"}],
                    "containers": [{"name": "agent", "image": "registry.local/agent:v1"}]
                }
            }
        }
    }))
    .unwrap()
}

fn node_of(p: &Pod) -> String {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default()
}

/// Sets both images of the template (init container and container).
async fn set_images(dss: &Api<DaemonSet>, name: &str, setup: &str, agent: &str) {
    let patch = json!({"spec": {"template": {"spec": {
        "initContainers": [{"name": "setup", "image": setup}],
        "containers": [{"name": "agent", "image": agent}]
    }}}});
    dss.patch(name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap();
}

/// Waits until every pod of the DaemonSet says `PodNeedUpgrade=True` for a revision other
/// than its own; returns that revision's hash.
async fn wait_new_revision(pods: &Api<Pod>, app: &str, not: &[&str]) -> String {
    wait_for(
        "PodNeedUpgrade=True naming a new revision on every pod",
        Duration::from_secs(60),
        || async {
            let list = pods
                .list(&ListParams::default().labels(&format!("app={app}")))
                .await
                .map_err(|e| e.to_string())?
                .items;
            let hashes: Vec<String> = list
                .iter()
                .filter_map(|p| match condition_of(p, NEED_UPGRADE) {
                    Some((s, _, m)) if s == "True" => {
                        m.strip_prefix("controllerrevision: ").map(str::to_string)
                    }
                    _ => None,
                })
                .collect();
            match hashes.first() {
                Some(h)
                    if hashes.len() == list.len()
                        && hashes.iter().all(|x| x == h)
                        && !not.contains(&h.as_str()) =>
                {
                    Ok(h.clone())
                }
                _ => Err(format!("{hashes:?} on {}", describe_pods(&list))),
            }
        },
    )
    .await
}

/// The pods' ServiceAccount (with `pull_secret`, if any) and the DaemonSet `edge-agent`
/// on `nodes` in `namespace`: waits until each node runs one pod of it, every one marked
/// up to date (`PodNeedUpgrade` False); returns them.
async fn start_edge_agent(
    client: &kube::Client,
    namespace: &str,
    nodes: &TestNodes,
    pull_secret: Option<&str>,
) -> Vec<Pod> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let mut account = json!({"metadata": {"name": SERVICE_ACCOUNT}});
    if let Some(secret) = pull_secret {
        account["imagePullSecrets"] = json!([{ "name": secret }]);
    }
    let account: ServiceAccount = serde_json::from_value(account).unwrap();
    accounts
        .create(&PostParams::default(), &account)
        .await
        .unwrap();
    let dss: Api<DaemonSet> = Api::namespaced(client.clone(), namespace);
    dss.create(&PostParams::default(), &daemonset("edge-agent", nodes))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    wait_for(
        "one pod per node, marked up to date",
        Duration::from_secs(90),
        || async {
            let list = pods
                .list(&ListParams::default().labels("app=edge-agent"))
                .await
                .map_err(|e| e.to_string())?
                .items;
            let marked = list
                .iter()
                .filter(|p| condition_of(p, NEED_UPGRADE).is_some_and(|(s, _, _)| s == "False"))
                .count();
            if list.len() == nodes.names.len() && marked == list.len() {
                Ok(list)
            } else {
                Err(describe_pods(&list))
            }
        },
    )
    .await
}

/// Moves the DaemonSet `edge-agent` (at revision `v1`) to v2 of both its images; the
/// new revision's hash once its pods show it.
async fn to_v2(dss: &Api<DaemonSet>, pods: &Api<Pod>, v1: &str) -> String {
    set_images(
        dss,
        "edge-agent",
        "registry.local/setup:v2",
        "registry.local/agent:v2",
    )
    .await;
    wait_new_revision(pods, "edge-agent", &[v1]).await
}

/// What the node agent's `imagepull` writes.
async fn request_image_pull(pods: &Api<Pod>, pod: &str, hash: &str) {
    let message = format!("controllerrevision: {hash}");
    set_condition(
        pods,
        pod,
        IMAGE_READY,
        "False",
        "PullImageRequested",
        &message,
    )
    .await;
}

/// A pull Job of `pod` other than `not` (by UID) that is not being deleted.
async fn new_job_of(jobs: &Api<Job>, pod: &Pod, not: &[&str]) -> Job {
    wait_for(
        &format!("a new pull Job (not {not:?})"),
        Duration::from_secs(30),
        || async {
            let all = jobs_of(jobs, pod).await;
            all.iter()
                .find(|j| {
                    j.metadata.deletion_timestamp.is_none()
                        && !not.contains(&j.metadata.uid.as_deref().unwrap_or_default())
                })
                .cloned()
                .ok_or_else(|| {
                    format!(
                        "{:?}",
                        all.iter()
                            .map(|j| j.metadata.name.clone())
                            .collect::<Vec<_>>()
                    )
                })
        },
    )
    .await
}

async fn jobs_of(jobs: &Api<Job>, pod: &Pod) -> Vec<Job> {
    let uid = pod.metadata.uid.clone().unwrap();
    jobs.list(&ListParams::default().labels(&format!("{POD_UID_LABEL}={uid}")))
        .await
        .unwrap()
        .items
}

async fn wait_image_ready(pods: &Api<Pod>, pod: &str, status: &str, reason: &str) -> String {
    wait_for(
        &format!("{IMAGE_READY}={status} ({reason}) on {pod}"),
        Duration::from_secs(120),
        || async {
            let p = pods.get(pod).await.map_err(|e| e.to_string())?;
            match condition_of(&p, IMAGE_READY) {
                Some((s, r, m)) if s == status && r == reason => Ok(m),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await
}

#[tokio::test]
#[ignore = "needs a cluster: make test"]
async fn pre_pull_job_reports_success_and_failure() {
    let client = client().await;
    let nodes = TestNodes::create(&client, "imgpull", 2).await;
    let ns = TestNamespace::new(&client, "imgpull").await;
    let n = ns.name.clone();
    let controller = ControllerProcess::start_with_env(
        &n,
        "image-pull",
        &[("ROLLGATE_PREPULL_HELPER_IMAGE", MIRRORED_HELPER)],
    );
    let dss: Api<DaemonSet> = Api::namespaced(client.clone(), &n);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &n);
    let jobs: Api<Job> = Api::namespaced(client.clone(), &n);

    let v1 =
        revision_hash(&start_edge_agent(&client, &n, &nodes, Some(ACCOUNT_PULL_SECRET)).await[0]);
    note(format!("DaemonSet running at revision {v1} on 2 nodes"));

    // A new revision; nothing is pulled until someone asks.
    let v2 = to_v2(&dss, &pods, &v1).await;
    let list = pods
        .list(&ListParams::default().labels("app=edge-agent"))
        .await
        .unwrap()
        .items;
    let (pod_a, pod_b) = (list[0].clone(), list[1].clone());
    let name_a = pod_a.metadata.name.clone().unwrap();
    let node_a = node_of(&pod_a);
    let pod_secrets: Vec<String> = pod_a
        .spec
        .iter()
        .flat_map(|s| s.image_pull_secrets.iter().flatten())
        .map(|s| s.name.clone())
        .collect();
    assert_eq!(
        pod_secrets,
        [ACCOUNT_PULL_SECRET],
        "premise: admission gave the pod its ServiceAccount's pull secret"
    );
    assert!(
        jobs_of(&jobs, &pod_a).await.is_empty(),
        "no request, no Job"
    );

    // The operator on node A asks for a pre-pull of v2.
    request_image_pull(&pods, &name_a, &v2).await;
    note(format!("requested pre-pull of {v2} on {name_a} ({node_a})"));

    let job = new_job_of(&jobs, &pod_a, &[]).await;
    note(format!(
        "Job {} created",
        job.metadata.name.clone().unwrap()
    ));
    let labels = job.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get(REVISION_LABEL), Some(&v2));
    let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), Some(&owner.uid)),
        ("Pod", pod_a.metadata.uid.as_ref())
    );
    let spec = job.spec.as_ref().unwrap();
    assert!(spec.active_deadline_seconds.is_some_and(|d| d > 0));
    assert!(spec.ttl_seconds_after_finished.is_some_and(|t| t > 0));
    assert!(spec.backoff_limit.is_some_and(|b| b <= 2));
    let pod_spec = spec.template.spec.as_ref().unwrap();
    assert_eq!(pod_spec.node_name.as_deref(), Some(node_a.as_str()));
    assert_eq!(pod_spec.restart_policy.as_deref(), Some("Never"));
    assert_eq!(pod_spec.automount_service_account_token, Some(false));
    // Pulls as the pod would: its ServiceAccount and the pull secret admission gave it.
    assert_eq!(
        pod_spec.service_account_name.as_deref(),
        Some(SERVICE_ACCOUNT)
    );
    let secrets: Vec<&str> = pod_spec
        .image_pull_secrets
        .iter()
        .flatten()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(secrets, [ACCOUNT_PULL_SECRET]);
    // The helper comes from the configured mirror (ROLLGATE_PREPULL_HELPER_IMAGE).
    let helpers: Vec<&str> = pod_spec
        .init_containers
        .iter()
        .flatten()
        .filter_map(|c| c.image.as_deref())
        .collect();
    assert_eq!(helpers, [MIRRORED_HELPER]);
    assert!(pod_spec
        .tolerations
        .iter()
        .flatten()
        .any(|t| t.key.as_deref() == Some("edge")));
    let mut images: Vec<(String, String)> = pod_spec
        .containers
        .iter()
        .map(|c| {
            (
                c.image.clone().unwrap_or_default(),
                c.image_pull_policy.clone().unwrap_or_default(),
            )
        })
        .collect();
    images.sort();
    assert_eq!(
        images,
        [
            (
                "registry.local/agent:v2".to_string(),
                "IfNotPresent".to_string()
            ),
            (
                "registry.local/setup:v2".to_string(),
                "IfNotPresent".to_string()
            ),
        ],
        "the new container and init container images; one already on the node (side-loaded \
         on an air-gapped node) counts as pulled"
    );
    for c in &pod_spec.containers {
        let command = c.command.clone().unwrap_or_default();
        assert!(
            !command.is_empty()
                && !command
                    .iter()
                    .any(|a| a == "true" || a == "sh" || a.ends_with("/sh")),
            "no shell or `true` from the pulled image: {command:?}"
        );
    }

    let message = wait_image_ready(&pods, &name_a, "True", "PullImageSuccess").await;
    assert_eq!(message, format!("controllerrevision: {v2}"));
    note(format!("{IMAGE_READY}=True on {name_a}: {message}"));
    // The Event follows the condition write (Events are sent apart from it).
    wait_for(
        "Normal PullImageStarted and PullImageSuccess Events on the pod",
        Duration::from_secs(30),
        || async {
            let events = events_for(&client, &n, &name_a).await;
            let missing: Vec<&str> = ["PullImageStarted", "PullImageSuccess"]
                .into_iter()
                .filter(|reason| !events.iter().any(|(t, r, _)| t == "Normal" && r == reason))
                .collect();
            if missing.is_empty() {
                Ok(())
            } else {
                Err(format!("missing {missing:?} in {events:?}"))
            }
        },
    )
    .await;
    // Nobody asked on node B: nothing happens there.
    holds_for(
        "no Job and no PodImageReady on pod B",
        Duration::from_secs(2),
        || async {
            let p = pods
                .get(pod_b.metadata.name.as_deref().unwrap())
                .await
                .map_err(|e| e.to_string())?;
            if !jobs_of(&jobs, &pod_b).await.is_empty() || condition_of(&p, IMAGE_READY).is_some() {
                return Err(format!("{:?}", condition_of(&p, IMAGE_READY)));
            }
            Ok(())
        },
    )
    .await;

    // v3 cannot be pulled. Asking again on pod A replaces its v2 Job and reports why.
    set_images(
        &dss,
        "edge-agent",
        "registry.local/setup:v2",
        "registry.local/unpullable:v3",
    )
    .await;
    let v3 = wait_new_revision(&pods, "edge-agent", &[&v1, &v2]).await;
    request_image_pull(&pods, &name_a, &v3).await;
    note(format!(
        "requested pre-pull of {v3} (unpullable) on {name_a}"
    ));
    let message = wait_image_ready(&pods, &name_a, "False", "PullImageFail").await;
    note(format!("{IMAGE_READY}=False on {name_a}: {message}"));
    assert!(
        message.starts_with(&format!("controllerrevision: {v3}")),
        "names the revision: {message}"
    );
    assert!(message.contains("failed"), "says why: {message}");
    let remaining = jobs_of(&jobs, &pod_a).await;
    let revisions: Vec<_> = remaining
        .iter()
        .filter(|j| j.metadata.deletion_timestamp.is_none())
        .filter_map(|j| j.metadata.labels.as_ref()?.get(REVISION_LABEL).cloned())
        .collect();
    assert_eq!(
        revisions,
        std::slice::from_ref(&v3),
        "the v2 Job was replaced"
    );
    let events = wait_for(
        "a Warning PullImageFail Event",
        Duration::from_secs(15),
        || async {
            let events = events_for(&client, &n, &name_a).await;
            events
                .iter()
                .find(|(t, r, _)| t == "Warning" && r == "PullImageFail")
                .cloned()
                .ok_or_else(|| format!("{events:?}"))
        },
    )
    .await;
    assert!(events.2.contains(&v3), "{events:?}");

    // A failure is not a dead end: the operator asks again (the agent writes
    // PullImageRequested once more), and a new Job pulls again and reports again.
    let failed_job = remaining
        .iter()
        .find(|j| j.metadata.deletion_timestamp.is_none())
        .cloned()
        .expect("the failed v3 Job");
    let failed_job_name = failed_job.metadata.name.clone().unwrap();
    let failed_uid = failed_job.metadata.uid.clone().unwrap();
    assert!(
        message.contains(&failed_job_name),
        "the failure names its Job: {message}"
    );
    request_image_pull(&pods, &name_a, &v3).await;
    note(format!(
        "asked again for {v3} on {name_a} after the failure"
    ));
    let retry = new_job_of(&jobs, &pod_a, &[&failed_uid]).await;
    let retry_name = retry.metadata.name.clone().unwrap();
    note(format!("new pull Job {retry_name} created"));
    assert_ne!(retry_name, failed_job_name, "a new Job per request");
    assert_eq!(
        retry
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(REVISION_LABEL)),
        Some(&v3)
    );
    let message = wait_for(
        "PullImageFail naming the new Job",
        Duration::from_secs(120),
        || async {
            let p = pods.get(&name_a).await.map_err(|e| e.to_string())?;
            match condition_of(&p, IMAGE_READY) {
                Some((s, r, m))
                    if s == "False" && r == "PullImageFail" && m.contains(&retry_name) =>
                {
                    Ok(m)
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    note(format!("{IMAGE_READY}=False again on {name_a}: {message}"));
    wait_for(
        "the failed Job of the earlier request deleted",
        Duration::from_secs(30),
        || async {
            let left: Vec<_> = jobs_of(&jobs, &pod_a)
                .await
                .into_iter()
                .filter(|j| j.metadata.uid.as_deref() == Some(failed_uid.as_str()))
                .filter(|j| j.metadata.deletion_timestamp.is_none())
                .map(|j| j.metadata.name)
                .collect();
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("{left:?}"))
            }
        },
    )
    .await;

    drop(controller);
    ns.cleanup().await;
    nodes.cleanup().await;
}

const DEADLINE_ANNOTATION: &str = "rollgate.io/image-pull-deadline";
const MAINTENANCE_TAINT: &str = "rollgate.test/maintenance";
/// Who deletes pods for kube-controller-manager's DaemonSet controller.
const DAEMONSET_CONTROLLER_USER: &str = "system:serviceaccount:kube-system:daemon-set-controller";

/// Holds off the native DaemonSet controller's pod deletions in `ns` (see the test below
/// for why); removed by `drop_hold`.
async fn hold_daemonset_controller_deletions(client: &kube::Client, ns: &str) -> String {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    let name = format!("hold-ds-deletions-{ns}");
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"rollgate.test/e2e": "true"}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                   "operations": ["DELETE"], "resources": ["pods"]}]
            },
            "validations": [{
                "expression": format!("request.userInfo.username != '{DAEMONSET_CONTROLLER_USER}'"),
                "message": "held off by the e2e test: the window of a not-yet-synced DaemonSet controller"
            }]
        }
    }))
    .unwrap();
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"rollgate.test/e2e": "true"}},
        "spec": {"policyName": name, "validationActions": ["Deny"]}
    }))
    .unwrap();
    Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .create(&PostParams::default(), &policy)
        .await
        .unwrap();
    Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    name
}

async fn drop_hold(client: &kube::Client, name: &str) {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    let dp = kube::api::DeleteParams::default();
    let _ = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .delete(name, &dp)
        .await;
    let _ = Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .delete(name, &dp)
        .await;
}

/// A server-side dry-run DELETE of `pod` as the DaemonSet controller: refused once the
/// hold is in force.
fn daemonset_controller_may_delete(ns: &str, pod: &str) -> bool {
    std::process::Command::new("kubectl")
        .env("KUBECONFIG", kubeconfig_path())
        .args(["-n", ns, "delete", "pod", pod, "--dry-run=server"])
        .args(["--as", DAEMONSET_CONTROLLER_USER])
        .output()
        .expect("running kubectl")
        .status
        .success()
}

async fn set_deadline_annotation(dss: &Api<DaemonSet>, name: &str, value: &str) {
    let patch = json!({"metadata": {"annotations": {DEADLINE_ANNOTATION: value}}});
    dss.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    // The controller reads the annotation from its DaemonSet cache when the request
    // arrives: give the watch a moment to deliver the change first.
    tokio::time::sleep(Duration::from_secs(2)).await;
}

/// Issue 23, item 6. Tolerations a webhook injects into a pod, or an operator adds to
/// it in place, are on the live pod only, never in the template. The pull Job must
/// carry them: its pod is bound to the node by name, and a NoExecute taint it does not
/// tolerate gets it rejected by the kubelet, or evicted by the taint-eviction controller
/// (which is what the bed has). Here the node gets such a taint after the pod was given
/// its toleration in place; the pull must run there and succeed.
///
/// kube-controller-manager's DaemonSet controller checks a node's NoExecute taints
/// against the *template's* tolerations, and deletes a daemon pod whose template does
/// not tolerate one, so the window in which such a pod meets such a taint closes within
/// a second on its own. The test holds that controller's pod deletions off in its
/// namespace (a ValidatingAdmissionPolicy on its user) to keep the window open; nothing
/// of rollgate's is held.
///
/// The deadline comes from the DaemonSet's annotation: a value that does not parse
/// answers the request `PullImageFail` with a Warning Event on the DaemonSet naming the
/// accepted forms, and once fixed the Job carries it as `activeDeadlineSeconds`.
#[tokio::test]
#[ignore = "needs a cluster: make test"]
async fn pre_pull_on_a_node_tainted_for_the_live_pod_only_with_the_annotations_deadline() {
    let client = client().await;
    let nodes = TestNodes::create(&client, "imgtaint", 1).await;
    let node = nodes.names[0].clone();
    let ns = TestNamespace::new(&client, "imgtaint").await;
    let n = ns.name.clone();
    let dss: Api<DaemonSet> = Api::namespaced(client.clone(), &n);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &n);
    let jobs: Api<Job> = Api::namespaced(client.clone(), &n);
    let nodes_api: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let controller = ControllerProcess::start(&n, "image-pull-taint");

    // The template tolerates NoSchedule `edge` only: nothing about the maintenance taint.
    let pod = start_edge_agent(&client, &n, &nodes, None).await.remove(0);
    let pod_name = pod.metadata.name.clone().unwrap();
    let v1 = revision_hash(&pod);

    // The pod is given a toleration in place (a pod's tolerations may be added to).
    let maintenance =
        json!({"key": MAINTENANCE_TAINT, "operator": "Exists", "effect": "NoExecute"});
    let add = json!([{"op": "add", "path": "/spec/tolerations/-", "value": maintenance}]);
    pods.patch(
        &pod_name,
        &PatchParams::default(),
        &Patch::<()>::Json(serde_json::from_value(add).unwrap()),
    )
    .await
    .unwrap_or_else(|e| panic!("adding a toleration to {pod_name} in place: {e}"));
    note(format!(
        "{pod_name} tolerates {MAINTENANCE_TAINT}:NoExecute; its template does not"
    ));

    let hold = hold_daemonset_controller_deletions(&client, &n).await;
    wait_for(
        "the hold on the DaemonSet controller's deletions to be in force",
        Duration::from_secs(30),
        || async {
            if daemonset_controller_may_delete(&n, &pod_name) {
                Err("a dry-run delete as the DaemonSet controller still passes".to_string())
            } else {
                Ok(())
            }
        },
    )
    .await;
    let taint = json!({"spec": {"taints": [{"key": MAINTENANCE_TAINT, "value": "on", "effect": "NoExecute"}]}});
    nodes_api
        .patch(&node, &PatchParams::default(), &Patch::Merge(&taint))
        .await
        .unwrap();
    note(format!("{node} tainted {MAINTENANCE_TAINT}=on:NoExecute"));
    // Premise: the pod stays (it tolerates the taint); a pod that does not is evicted.
    holds_for(
        "the pod to stay on the tainted node",
        Duration::from_secs(3),
        || async {
            let p = pods.get(&pod_name).await.map_err(|e| e.to_string())?;
            match p.metadata.deletion_timestamp {
                None => Ok(()),
                Some(_) => Err("deleted".into()),
            }
        },
    )
    .await;

    set_images(
        &dss,
        "edge-agent",
        "registry.local/setup:v2",
        "registry.local/agent:v2",
    )
    .await;
    let v2 = wait_new_revision(&pods, "edge-agent", &[&v1]).await;

    // A deadline that does not parse: no Job, an answer, a Warning on the DaemonSet.
    set_deadline_annotation(&dss, "edge-agent", "45 minutes").await;
    request_image_pull(&pods, &pod_name, &v2).await;
    let message = wait_image_ready(&pods, &pod_name, "False", "PullImageFail").await;
    note(format!("bad deadline: {IMAGE_READY}=False: {message}"));
    assert!(
        message.contains(DEADLINE_ANNOTATION) && message.contains("\"45 minutes\""),
        "names the annotation and the value: {message}"
    );
    let warning = wait_for(
        "a Warning InvalidImagePullDeadline on the DaemonSet",
        Duration::from_secs(15),
        || async {
            let events = events_for(&client, &n, "edge-agent").await;
            events
                .iter()
                .find(|(t, r, _)| t == "Warning" && r == "InvalidImagePullDeadline")
                .cloned()
                .ok_or_else(|| format!("{events:?}"))
        },
    )
    .await;
    assert!(
        warning.2.contains("600, 600s, 90m, 2h"),
        "names the accepted forms: {warning:?}"
    );
    assert!(
        jobs_of(&jobs, &pod).await.is_empty(),
        "no Job for a bad deadline"
    );

    // Fixed: asking again pulls, with that deadline, on the tainted node.
    set_deadline_annotation(&dss, "edge-agent", "45m").await;
    request_image_pull(&pods, &pod_name, &v2).await;
    let job = new_job_of(&jobs, &pod, &[]).await;
    let spec = job.spec.as_ref().unwrap();
    assert_eq!(
        spec.active_deadline_seconds,
        Some(45 * 60),
        "the annotation's deadline"
    );
    let pod_spec = spec.template.spec.as_ref().unwrap();
    assert_eq!(pod_spec.node_name.as_deref(), Some(node.as_str()));
    let tolerated: Vec<String> = pod_spec
        .tolerations
        .iter()
        .flatten()
        .map(|t| format!("{:?}:{:?}", t.key, t.effect))
        .collect();
    assert!(
        pod_spec.tolerations.iter().flatten().any(|t| {
            t.key.as_deref() == Some(MAINTENANCE_TAINT) && t.effect.as_deref() == Some("NoExecute")
        }),
        "the live pod's toleration reached the Job: {tolerated:?}"
    );
    assert!(
        pod_spec
            .tolerations
            .iter()
            .flatten()
            .any(|t| t.key.as_deref() == Some("edge")),
        "and the template's: {tolerated:?}"
    );
    let message = wait_image_ready(&pods, &pod_name, "True", "PullImageSuccess").await;
    assert_eq!(message, format!("controllerrevision: {v2}"));
    note(format!(
        "pulled on the tainted node: {IMAGE_READY}=True ({message})"
    ));
    // Its pod ran to the end on the tainted node: the taint-eviction controller left it.
    let job_pods: Api<Pod> = Api::namespaced(client.clone(), &n);
    let job_name = job.metadata.name.clone().unwrap();
    let ran: Vec<Pod> = job_pods
        .list(&ListParams::default().labels(&format!("job-name={job_name}")))
        .await
        .unwrap()
        .items;
    assert!(
        !ran.is_empty()
            && ran.iter().all(|p| {
                p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded")
            }),
        "the Job's pods: {}",
        describe_pods(&ran)
    );

    drop_hold(&client, &hold).await;
    drop(controller);
    ns.cleanup().await;
    nodes.cleanup().await;
}

/// What yurthub v1.7.0's `imagepull` writes (OpenYurt `pkg/yurthub/otaupdate/ota.go`,
/// `PullPodImage`, lines 242-296), reproduced write for write because yurthub itself
/// cannot join this bed (see the README's OpenYurt section): it reads the pod, upserts
/// `PodImageReady` with status False, no reason, and the message
/// `controllerrevision: <hash named by PodNeedUpgrade>` the way
/// `podutil.UpdatePodCondition` does (a status unchanged keeps its lastTransitionTime),
/// then sends the whole conditions list as a JSON merge patch of `pods/status` with the
/// field manager `yurthub-ota`.
async fn yurthub_image_pull(pods: &Api<Pod>, pod: &str) {
    let live = pods.get(pod).await.unwrap();
    let mut conditions = live.status.and_then(|s| s.conditions).unwrap_or_default();
    let next_hash = conditions
        .iter()
        .find(|c| c.type_ == NEED_UPGRADE)
        .and_then(|c| c.message.clone())
        .map(|m| m.trim_start_matches("controllerrevision: ").to_string())
        .unwrap_or_default();
    let mut request = k8s_openapi::api::core::v1::PodCondition {
        type_: IMAGE_READY.into(),
        status: "False".into(),
        message: Some(format!("controllerrevision: {next_hash}")),
        last_transition_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        )),
        ..Default::default()
    };
    match conditions.iter_mut().find(|c| c.type_ == IMAGE_READY) {
        Some(old) => {
            if old.status == request.status {
                request.last_transition_time = old.last_transition_time.clone();
            }
            *old = request;
        }
        None => conditions.push(request),
    }
    let patch = json!({"status": {"conditions": conditions}});
    let params = PatchParams {
        field_manager: Some("yurthub-ota".into()),
        ..Default::default()
    };
    pods.patch_status(pod, &params, &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("yurthub's imagepull on {pod}: {e}"));
}

/// yurthub's `upgrade` check of the pre-pull (`checkPodImageReady`, ota.go line 192):
/// no `PodImageReady`, or True with the hash `PodNeedUpgrade` names.
fn yurthub_upgrade_accepts(pod: &Pod) -> Result<(), String> {
    let next_hash = condition_of(pod, NEED_UPGRADE)
        .map(|(_, _, m)| m.trim_start_matches("controllerrevision: ").to_string())
        .unwrap_or_default();
    match condition_of(pod, IMAGE_READY) {
        None => Ok(()),
        Some((s, _, m))
            if s == "True" && m.trim_start_matches("controllerrevision: ") == next_hash =>
        {
            Ok(())
        }
        other => Err(format!(
            "image is not ready: {other:?}, next hash {next_hash}"
        )),
    }
}

/// One node, an OTA DaemonSet moved from v1 to v2, and `rollgate controller`: the
/// pod waits at v1 with `PodNeedUpgrade=True` naming v2.
struct OneNodeAtV2 {
    client: kube::Client,
    nodes: TestNodes,
    ns: TestNamespace,
    controller: ControllerProcess,
    pods: Api<Pod>,
    jobs: Api<Job>,
    pod: Pod,
    v2: String,
}

impl OneNodeAtV2 {
    async fn new(prefix: &str) -> Self {
        let client = client().await;
        let nodes = TestNodes::create(&client, prefix, 1).await;
        let ns = TestNamespace::new(&client, prefix).await;
        let controller = ControllerProcess::start_with_env(
            &ns.name,
            "image-pull",
            &[("ROLLGATE_PREPULL_HELPER_IMAGE", MIRRORED_HELPER)],
        );
        let dss: Api<DaemonSet> = Api::namespaced(client.clone(), &ns.name);
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
        let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
        let v1 = revision_hash(&start_edge_agent(&client, &ns.name, &nodes, None).await[0]);
        let v2 = to_v2(&dss, &pods, &v1).await;
        let pod = pods
            .list(&ListParams::default().labels("app=edge-agent"))
            .await
            .unwrap()
            .items
            .remove(0);
        OneNodeAtV2 {
            client,
            nodes,
            ns,
            controller,
            pods,
            jobs,
            pod,
            v2,
        }
    }

    fn pod_name(&self) -> String {
        self.pod.metadata.name.clone().unwrap()
    }

    /// After a pull request: the Job for v2, then `PodImageReady=True` in the form
    /// yurthub's `upgrade` accepts.
    async fn expect_pulled(&self) {
        let name = self.pod_name();
        let job = new_job_of(&self.jobs, &self.pod, &[]).await;
        assert_eq!(
            job.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(REVISION_LABEL)),
            Some(&self.v2)
        );
        let message = wait_image_ready(&self.pods, &name, "True", "PullImageSuccess").await;
        note(format!("{IMAGE_READY}=True on {name}: {message}"));
        let answered = self.pods.get(&name).await.unwrap();
        yurthub_upgrade_accepts(&answered).expect("yurthub's upgrade accepts rollgate's answer");
    }

    /// The old pod is gone and its replacement runs v2.
    async fn expect_upgraded(&self) {
        let name = self.pod_name();
        wait_for("the new pod at v2", Duration::from_secs(90), || async {
            let list = self
                .pods
                .list(&ListParams::default().labels("app=edge-agent"))
                .await
                .map_err(|e| e.to_string())?
                .items;
            match list.as_slice() {
                [p] if p.metadata.name.as_deref() != Some(name.as_str())
                    && revision_hash(p) == self.v2 =>
                {
                    Ok(())
                }
                _ => Err(describe_pods(&list)),
            }
        })
        .await;
    }

    async fn cleanup(self) {
        drop(self.controller);
        self.ns.cleanup().await;
        self.nodes.cleanup().await;
        drop(self.client);
    }
}

/// The layout where yurthub serves the node API and rollgate's controller pulls, with
/// yurthub's write reproduced: imagepull → rollgate's pull Job → `PodImageReady=True` in
/// the form yurthub's `upgrade` accepts → the upgrade (yurthub deletes the pod).
#[tokio::test]
#[ignore = "needs a cluster: make test"]
async fn a_yurthub_shaped_pull_request_is_pulled_and_its_upgrade_goes_through() {
    let bed = OneNodeAtV2::new("yhshape").await;
    let name = bed.pod_name();
    yurthub_image_pull(&bed.pods, &name).await;
    let written = bed.pods.get(&name).await.unwrap();
    assert_eq!(
        condition_of(&written, IMAGE_READY),
        Some((
            "False".into(),
            String::new(),
            format!("controllerrevision: {}", bed.v2)
        )),
        "premise: yurthub's request shape, no reason"
    );
    assert!(
        yurthub_upgrade_accepts(&written).is_err(),
        "yurthub refuses before the pull"
    );
    note(format!("yurthub-shaped imagepull of {} on {name}", bed.v2));
    bed.expect_pulled().await;
    bed.pods.delete(&name, &Default::default()).await.unwrap();
    bed.expect_upgraded().await;
    bed.cleanup().await;
}

/// The same with yurthub v1.7.0 itself serving the node's API: `imagepull` and
/// `upgrade` are yurthub's own HTTP answers and writes. And rollgate's agent, started on
/// the same node by mistake, exits naming yurthub and the layout to use.
#[tokio::test]
#[ignore = "needs a cluster: make test"]
async fn yurthub_itself_pulls_through_rollgate_and_upgrades_and_the_agent_makes_way() {
    let Some(binary) = support::yurthub::yurthub_binary() else {
        note(
            "SKIPPED: no yurthub binary (set YURTHUB); the yurthub-shaped test covers the request",
        );
        return;
    };
    let bed = OneNodeAtV2::new("yhreal").await;
    let name = bed.pod_name();
    let node = bed.nodes.names[0].clone();
    let hub = support::yurthub::Yurthub::start(&binary, &node).await;
    let ns = bed.ns.name.clone();

    // Before the pull, yurthub's upgrade refuses (its own image check).
    let pull_path = format!("/openyurt.io/v1/namespaces/{ns}/pods/{name}/imagepull");
    let upgrade_path = format!("/openyurt.io/v1/namespaces/{ns}/pods/{name}/upgrade");
    let answer = http_request(hub.serve, "POST", &pull_path).await.unwrap();
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (
            200,
            format!("Image pre-pull requested for pod {ns}/{name}").as_str()
        ),
        "yurthub's imagepull (log {})",
        hub.log.display()
    );
    let written = bed.pods.get(&name).await.unwrap();
    assert!(
        condition_managers(&written, IMAGE_READY).contains(&"yurthub-ota".to_string()),
        "premise: yurthub wrote the request"
    );
    bed.expect_pulled().await;

    let answer = http_request(hub.serve, "POST", &upgrade_path)
        .await
        .unwrap();
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (200, format!("Start updating pod {ns}/{name}").as_str()),
        "yurthub's upgrade accepts rollgate's answer"
    );
    bed.expect_upgraded().await;

    // rollgate's agent on yurthub's address: a clear exit, not a crash loop.
    let out = std::process::Command::new(controller_binary())
        .args([
            "agent",
            "--node-name",
            &node,
            "--listen",
            &hub.serve.to_string(),
        ])
        .env("KUBECONFIG", kubeconfig_path())
        .env("ROLLGATE_AGENT_STATE_DIR", temp_dir("agent-beside-yurthub"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the agent must not run beside yurthub"
    );
    assert!(
        stderr.contains("taken by yurthub") && stderr.contains("deploy/without-agent"),
        "the agent names yurthub and the layout: {stderr}"
    );
    note(format!(
        "rollgate agent on {}: {}",
        hub.serve,
        stderr.trim()
    ));
    drop(hub);
    bed.cleanup().await;
}
