//! The install (`kubectl apply -k deploy/`) against the local control plane: it is
//! accepted by the API server, its RBAC is exactly the committed snapshot, and the
//! agent's node-scope policy still holds when installed through an overlay into another
//! namespace with another name prefix.
//!
//! The workloads (the Deployment and the DaemonSet) and the injection webhook's
//! configuration are server-side dry-run only (`DRY_RUN_ONLY_KINDS` says why). Needs
//! `make cluster-up`; run by `make test` (or `cargo test --test deploy -- --ignored --nocapture`).
mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{DeleteParams, PostParams};
use kube::Api;
use serde_json::{json, Value};
use support::*;

/// Kinds only ever dry-run (server side); everything else in the install is applied for
/// real. The workloads would start pods on other tests' nodes. The webhook configuration
/// would send every pod created in a namespace labelled for injection (other tests make
/// them) to its Service, which the bed's API server dials at the Service's ClusterIP:
/// off loopback (`webhooks_stay_on_loopback` in hack/test.sh checks the bed for it).
const DRY_RUN_ONLY_KINDS: &[&str] = &["Deployment", "DaemonSet", "MutatingWebhookConfiguration"];

const UPDATE_SNAPSHOT_ENV: &str = "ROLLGATE_UPDATE_RBAC_SNAPSHOT";

/// Writes `objects` as one List file in `dir` and applies it (or dry-runs it).
fn apply_objects(dir: &Path, file: &str, objects: &[Value], extra: &[&str]) -> String {
    let path = dir.join(file);
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    std::fs::write(&path, serde_json::to_vec_pretty(&list).unwrap()).unwrap();
    let mut args = vec!["apply", "-f", path.to_str().unwrap()];
    args.extend_from_slice(extra);
    kubectl(&args)
}

/// Applies the namespace and everything but the `DRY_RUN_ONLY_KINDS` of a kustomization;
/// returns the objects applied.
fn install_for_real(dir: &Path, work: &Path, tag: &str) -> Vec<Value> {
    let objects: Vec<Value> = kustomize_build(dir)
        .into_iter()
        .filter(|o| !DRY_RUN_ONLY_KINDS.contains(&kind_of(o)))
        .collect();
    let namespaces: Vec<Value> = objects
        .iter()
        .filter(|o| kind_of(o) == "Namespace")
        .cloned()
        .collect();
    apply_objects(work, &format!("{tag}-namespaces.json"), &namespaces, &[]);
    apply_objects(work, &format!("{tag}-install.json"), &objects, &[]);
    objects
}

/// The base install (deploy/ but the `DRY_RUN_ONLY_KINDS`), applied once per test binary: two
/// concurrent client-side applies of the same new object race to create it.
fn install_base() -> Vec<Value> {
    static BASE: std::sync::OnceLock<Vec<Value>> = std::sync::OnceLock::new();
    BASE.get_or_init(|| {
        install_for_real(
            &repo_root().join("deploy"),
            &temp_dir("deploy-base"),
            "base",
        )
    })
    .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn the_install_is_accepted_by_the_api_server() {
    let deploy = repo_root().join("deploy");
    let objects = kustomize_build(&deploy);
    let kinds: Vec<&str> = objects.iter().map(kind_of).collect();
    for expected in [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "MutatingWebhookConfiguration",
        "Deployment",
        "PodDisruptionBudget",
        "Service",
        "DaemonSet",
    ] {
        assert!(kinds.contains(&expected), "no {expected} in {kinds:?}");
    }

    // A server-side dry run needs the namespace to exist (nothing is persisted), so
    // the real install of everything but the workloads comes first.
    install_base();
    let dry_run = kubectl(&["apply", "-k", deploy.to_str().unwrap(), "--dry-run=server"]);
    note(format!(
        "kubectl apply -k deploy/ --dry-run=server:\n{dry_run}"
    ));
    for line in dry_run.lines() {
        assert!(
            line.ends_with("(server dry run)"),
            "unexpected line in the server dry run: {line}"
        );
    }

    let applied = install_base();
    assert!(applied.len() >= 10, "{} objects applied", applied.len());
    let client = client().await;
    let policy: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    policy
        .get("rollgate-agent-node-scope")
        .await
        .expect("the node-scope policy is installed");
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "rollgate-system");
    for name in ["rollgate-agent", "rollgate-controller"] {
        accounts
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("ServiceAccount {name}: {e}"));
    }
}

/// The layout for nodes that run yurthub (`deploy/without-agent`): the full install
/// without anything of the agent's, every other object the same byte for byte, and
/// accepted by the API server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn the_layout_for_yurthub_nodes_is_the_install_without_the_agent() {
    let deploy = repo_root().join("deploy");
    let layout = deploy.join("without-agent");
    let key = |o: &Value| {
        format!(
            "{}/{}/{}",
            kind_of(o),
            o["metadata"]["namespace"].as_str().unwrap_or_default(),
            o["metadata"]["name"].as_str().unwrap_or_default()
        )
    };
    let agent: Vec<String> = kustomize_build(&deploy.join("agent"))
        .iter()
        .filter(|o| kind_of(o) != "Namespace")
        .map(key)
        .collect();
    assert!(
        agent.iter().any(|k| k.starts_with("DaemonSet/")),
        "{agent:?}"
    );
    let full = kustomize_build(&deploy);
    let without: Vec<Value> = kustomize_build(&layout);
    let expected: Vec<&Value> = full.iter().filter(|o| !agent.contains(&key(o))).collect();
    let mut got: Vec<String> = without.iter().map(key).collect();
    let mut want: Vec<String> = expected.iter().map(|o| key(o)).collect();
    got.sort();
    want.sort();
    assert_eq!(
        got, want,
        "the layout is the install minus the agent's objects"
    );
    for object in &without {
        let same = expected.iter().find(|o| key(o) == key(object)).unwrap();
        assert_eq!(
            object,
            *same,
            "{} differs from the full install",
            key(object)
        );
    }
    assert!(
        !got.iter().any(|k| k.starts_with("DaemonSet/")
            || k.starts_with("ValidatingAdmissionPolicy")
            || k.contains("rollgate-agent")),
        "nothing of the agent's: {got:?}"
    );

    install_base();
    let dry_run = kubectl(&["apply", "-k", layout.to_str().unwrap(), "--dry-run=server"]);
    note(format!(
        "kubectl apply -k deploy/without-agent --dry-run=server:\n{dry_run}"
    ));
    assert_eq!(dry_run.lines().count(), without.len(), "{dry_run}");
    for line in dry_run.lines() {
        assert!(line.ends_with("(server dry run)"), "{line}");
    }
}

/// The first differing lines of two snapshots, as a short unified-style listing.
fn line_diff(committed: &str, actual: &str) -> String {
    let old: Vec<&str> = committed.lines().collect();
    let new: Vec<&str> = actual.lines().collect();
    let mut out = String::new();
    for line in &old {
        if !new.contains(line) {
            out.push_str(&format!("- {line}\n"));
        }
    }
    for line in &new {
        if !old.contains(line) {
            out.push_str(&format!("+ {line}\n"));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn the_rbac_matches_the_committed_snapshot_and_has_no_wildcard() {
    let deploy = repo_root().join("deploy");
    install_base();
    // No rule of ours grants a wildcard, in any field.
    for object in kustomize_build(&deploy)
        .iter()
        .filter(|o| matches!(kind_of(o), "ClusterRole" | "Role"))
    {
        for rule in object["rules"].as_array().into_iter().flatten() {
            let fields = [
                "apiGroups",
                "resources",
                "verbs",
                "resourceNames",
                "nonResourceURLs",
            ];
            for field in fields {
                for value in rule[field].as_array().into_iter().flatten() {
                    assert!(
                        !value.as_str().unwrap_or_default().contains('*'),
                        "{} {} grants a wildcard in {field}: {rule}",
                        kind_of(object),
                        object["metadata"]["name"]
                    );
                }
            }
        }
    }
    let snapshots = deploy.join("rbac-snapshot");
    let update = std::env::var(UPDATE_SNAPSHOT_ENV).is_ok_and(|v| v == "1");
    let mut mismatches = Vec::new();
    for account in ["rollgate-controller", "rollgate-agent"] {
        // RBAC is eventually consistent with the apply: wait for the marker rules.
        let actual = wait_for(
            &format!("the RBAC of {account} to be in effect"),
            Duration::from_secs(30),
            || async {
                let list = can_i_list("rollgate-system", account);
                let expected_rule = match account {
                    "rollgate-controller" => "leases.coordination.k8s.io",
                    _ => "nodescopedpodwrites.rollgate.io",
                };
                if list.contains(expected_rule) {
                    Ok(list)
                } else {
                    Err(format!("no {expected_rule} yet:\n{list}"))
                }
            },
        )
        .await;
        // Non-resource URL lines ("[/api/*] [] [get]") are the cluster's discovery
        // roles, granted to every authenticated user; the resource lines are ours.
        for line in actual.lines().filter(|l| !l.starts_with("[/")) {
            assert!(
                !line.split(' ').any(|column| column.contains('*')),
                "{account} holds a wildcard: {line}"
            );
        }
        let path = snapshots.join(format!("{account}.txt"));
        if update {
            std::fs::create_dir_all(&snapshots).unwrap();
            std::fs::write(&path, &actual).unwrap();
            note(format!("wrote {}", path.display()));
            continue;
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        if committed != actual {
            mismatches.push(format!(
                "{} differs from `kubectl auth can-i --list -n rollgate-system \
                 --as=system:serviceaccount:rollgate-system:{account}`:\n{}",
                path.display(),
                line_diff(&committed, &actual)
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{}\nIf the change is intended, regenerate with \
         {UPDATE_SNAPSHOT_ENV}=1 cargo test -p rollgate --test deploy rbac -- --ignored",
        mismatches.join("\n")
    );
}

fn pod_on(name: &str, node: &str, service_account: Option<&str>) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"rollgate.test/e2e": "true"}},
        "spec": {
            "nodeName": node,
            "serviceAccountName": service_account.unwrap_or("default"),
            "automountServiceAccountToken": false,
            "containers": [{"name": "c", "image": "registry.local/rollgate:test"}]
        }
    }))
    .unwrap()
}

/// `from` relative to `base` (both absolute, `base` a folder): kustomize accepts only
/// relative resource paths.
fn relative_path(from: &Path, base: &Path) -> PathBuf {
    let from: Vec<_> = from.components().collect();
    let base: Vec<_> = base.components().collect();
    let common = from.iter().zip(&base).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..base.len() {
        out.push("..");
    }
    for part in &from[common..] {
        out.push(part);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn an_overlay_into_another_namespace_keeps_the_agent_confined_to_its_node() {
    // Unique per run, so a rerun never meets the previous run's terminating namespace.
    let overlay_namespace = unique_name("edge-ops");
    let prefix = format!("{overlay_namespace}-");
    let client = client().await;
    let work = temp_dir("deploy-overlay");
    let deploy = repo_root().join("deploy");
    // A user's overlay: another namespace, and a name prefix so its cluster-scoped
    // objects (ClusterRoles, the policy) live beside the base install's.
    std::fs::write(
        work.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
             namespace: {overlay_namespace}\nnamePrefix: {prefix}\nresources:\n  - {}\n",
            relative_path(&deploy, &work).display()
        ),
    )
    .unwrap();
    let base_objects = install_base();
    let overlay_objects = install_for_real(&work, &work, "overlay");
    let agent_account = format!("{prefix}rollgate-agent");
    assert!(
        overlay_objects
            .iter()
            .any(|o| kind_of(o) == "ServiceAccount"
                && o["metadata"]["name"] == agent_account.as_str()
                && o["metadata"]["namespace"] == overlay_namespace.as_str()),
        "the overlay renames the agent's ServiceAccount"
    );
    assert!(base_objects.len() == overlay_objects.len());

    // Both installs' policies are in the cluster and both match every holder of an
    // agent role, so a denial alone cannot tell which one denied. They are the same
    // policy, though: the overlay's, alone, decides exactly like the base's.
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let base_policy = policies.get("rollgate-agent-node-scope").await.unwrap();
    let overlay_policy_name = format!("{prefix}rollgate-agent-node-scope");
    let overlay_policy = policies.get(&overlay_policy_name).await.unwrap();
    assert_eq!(
        serde_json::to_value(&overlay_policy.spec).unwrap(),
        serde_json::to_value(&base_policy.spec).unwrap(),
        "the overlay's policy must match exactly like the base's"
    );
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let overlay_binding = bindings.get(&overlay_policy_name).await.unwrap();
    let binding_spec = overlay_binding.spec;
    assert_eq!(
        binding_spec.policy_name, overlay_policy_name,
        "the overlay's binding must bind the overlay's policy"
    );
    assert_eq!(binding_spec.validation_actions, vec!["Deny".to_string()]);

    let nodes = TestNodes::create(&client, "overlay-scope", 2).await;
    let (node_a, node_b) = (nodes.names[0].clone(), nodes.names[1].clone());
    let ns = TestNamespace::new(&client, "overlay-scope").await;
    let admin_pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    for (name, node) in [("victim-a", &node_a), ("victim-b", &node_b)] {
        admin_pods
            .create(&PostParams::default(), &pod_on(name, node, None))
            .await
            .unwrap();
    }
    // Node A's agent of the overlay install: the renamed ServiceAccount in edge-ops,
    // with a token bound to a pod on node A.
    let stand_in = Api::<Pod>::namespaced(client.clone(), &overlay_namespace)
        .create(
            &PostParams::default(),
            &pod_on(&unique_name("agent-standin"), &node_a, Some(&agent_account)),
        )
        .await
        .unwrap();
    let token = bound_token(&client, &overlay_namespace, &agent_account, &stand_in).await;
    let kubeconfig = derived_kubeconfig(&work, "edge-agent-a.kubeconfig", None, Some(&token));
    let agent_pods: Api<Pod> = Api::namespaced(client_from(&kubeconfig).await, &ns.name);

    let dry_run = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    let denied = wait_for(
        "the overlay install to deny node B's pod to node A's agent",
        Duration::from_secs(30),
        || async {
            match agent_pods.delete("victim-b", &dry_run).await {
                Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains("node-scope") => {
                    Ok(s)
                }
                Ok(_) => Err("allowed: the policy fails open for this install".to_string()),
                Err(other) => Err(format!("{other}")),
            }
        },
    )
    .await;
    note(format!(
        "{overlay_namespace}/{agent_account} on node A, dry-run delete of node B's pod: 403 {}",
        denied.message
    ));
    match agent_pods
        .delete("victim-b", &DeleteParams::default())
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403, "{s:?}");
            assert!(
                s.message.contains(&format!(
                    "the rollgate agent of node {node_a} may only delete or update pods bound to its own node; pod {}/victim-b is on node {node_b}",
                    ns.name
                )),
                "{}",
                s.message
            );
        }
        other => panic!("deleting node B's pod with the overlay agent of node A: {other:?}"),
    }
    assert!(admin_pods
        .get("victim-b")
        .await
        .unwrap()
        .metadata
        .deletion_timestamp
        .is_none());
    // Node A's pod: allowed, so the overlay's RBAC works and the policy is not simply
    // denying everything.
    agent_pods
        .delete("victim-a", &DeleteParams::default())
        .await
        .expect("the overlay agent of node A may delete node A's pod");
    note("overlay install: node B's pod Forbidden, node A's pod allowed");

    // The overlay's cluster-scoped objects go; the base install stays for other tests.
    let cluster_scoped: Vec<Value> = overlay_objects
        .iter()
        .filter(|o| kind_of(o) != "Namespace")
        .cloned()
        .collect();
    let cleanup_file = work.join("overlay-cleanup.json");
    std::fs::write(
        &cleanup_file,
        serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "List", "items": cluster_scoped}))
            .unwrap(),
    )
    .unwrap();
    kubectl(&[
        "delete",
        "-f",
        cleanup_file.to_str().unwrap(),
        "--ignore-not-found",
        "--wait=false",
    ]);
    kubectl(&[
        "delete",
        "namespace",
        &overlay_namespace,
        "--ignore-not-found",
        "--wait=false",
    ]);
    ns.cleanup().await;
    nodes.cleanup().await;
}
