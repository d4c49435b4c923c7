//! `kubectl rollgate status` and `kubectl rollgate gates` through kubectl itself: the
//! rollgate binary installed as `kubectl-rollgate` on PATH (a link, as the README says),
//! against the local control plane. The plugin reads only what the cluster holds, so the
//! gate conditions and the Warning Event here are written by the test, as the controller
//! would write them; no controller runs.
//! Needs `make cluster-up`; `cargo test --test kubectl_plugin -- --nocapture` narrates.
mod support;

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::{json, Value};
use support::*;

const GATE: &str = "service.readiness.alibabacloud.com/web";

/// A folder holding `kubectl-rollgate`, a link to the binary under test.
fn plugin_dir() -> PathBuf {
    let dir = temp_dir("kubectl-plugin");
    let link = dir.join("kubectl-rollgate");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(controller_binary(), &link).unwrap();
    dir
}

/// `kubectl ARGS` with the plugin folder first on PATH.
fn kubectl_with_plugin(dir: &std::path::Path, args: &[&str]) -> Output {
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    std::process::Command::new("kubectl")
        .env("KUBECONFIG", kubeconfig_path())
        .env("PATH", path)
        .args(args)
        .output()
        .expect("running kubectl")
}

fn stdout_of(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[tokio::test]
async fn kubectl_rollgate_status_reads_a_rollout() {
    let client = client().await;
    let nodes = TestNodes::create(&client, "plugst", 2).await;
    let ns = TestNamespace::new(&client, "plugst").await;
    let n = ns.name.clone();
    let dir = plugin_dir();
    let dss: Api<DaemonSet> = Api::namespaced(client.clone(), &n);
    let ds: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "edge", "annotations": {
            "apps.openyurt.io/update-strategy": "AdvancedRollingUpdate",
            "apps.openyurt.io/max-unavailable": "1"}},
        "spec": {
            "selector": {"matchLabels": {"app": "edge"}},
            "updateStrategy": {"type": "OnDelete"},
            "template": {
                "metadata": {"labels": {"app": "edge"}},
                "spec": {
                    "nodeSelector": nodes.selector(),
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "edge", "image": "registry.local/edge:v1"}]
                }
            }
        }
    }))
    .unwrap();
    dss.create(&PostParams::default(), &ds).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &n);
    wait_for("two Ready pods", Duration::from_secs(60), || async {
        let list = pods
            .list(&ListParams::default().labels("app=edge"))
            .await
            .map_err(|e| e.to_string())?
            .items;
        if list.len() == 2 && list.iter().all(pod_is_ready) {
            Ok(())
        } else {
            Err(describe_pods(&list))
        }
    })
    .await;

    let json_out = stdout_of(
        &kubectl_with_plugin(
            &dir,
            &["rollgate", "status", "ds/edge", "-n", &n, "-o", "json"],
        ),
        "kubectl rollgate status -o json",
    );
    note(format!(
        "kubectl rollgate status ds/edge -o json:\n{json_out}"
    ));
    let summary: Value = serde_json::from_str(&json_out).unwrap();
    assert_eq!(
        (&summary["updated"], &summary["total"], &summary["complete"]),
        (&json!(2), &json!(2), &json!(true)),
        "{summary}"
    );
    let table = stdout_of(
        &kubectl_with_plugin(&dir, &["rollgate", "status", "ds/edge", "-n", &n]),
        "kubectl rollgate status",
    );
    assert!(
        table.starts_with("daemonset/edge (AdvancedRollingUpdate, max-unavailable 1"),
        "{table}"
    );

    // A new template: both nodes out of date until a controller acts (none runs here).
    let patch = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "edge", "image": "registry.local/edge:v2"}]}}}});
    dss.patch("edge", &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap();
    let yaml = wait_for(
        "status sees the new revision",
        Duration::from_secs(30),
        || async {
            let out = stdout_of(
                &kubectl_with_plugin(
                    &dir,
                    &["rollgate", "status", "ds/edge", "-n", &n, "-o", "yaml"],
                ),
                "kubectl rollgate status -o yaml",
            );
            let doc: Value = serde_saphyr::from_str(&out).map_err(|e| e.to_string())?;
            if doc["updated"] == json!(0) && doc["complete"] == json!(false) {
                Ok(out)
            } else {
                Err(out)
            }
        },
    )
    .await;
    note(format!("after a template change, -o yaml:\n{yaml}"));

    // Bad input names the accepted forms, under kubectl's name for the plugin.
    let wrong = kubectl_with_plugin(&dir, &["rollgate", "status", "deployment/edge", "-n", &n]);
    assert!(!wrong.status.success());
    let stderr = String::from_utf8_lossy(&wrong.stderr);
    assert!(stderr.contains("daemonset/NAME or ds/NAME"), "{stderr}");
    let help = stdout_of(&kubectl_with_plugin(&dir, &["rollgate", "--help"]), "help");
    assert!(help.contains("kubectl rollgate"), "{help}");

    ns.cleanup().await;
    nodes.cleanup().await;
}

#[tokio::test]
async fn kubectl_rollgate_gates_shows_each_gated_pod_and_the_load_balancer() {
    let client = client().await;
    let nodes = TestNodes::create(&client, "pluggt", 1).await;
    let ns = TestNamespace::new(&client, "pluggt").await;
    let n = ns.name.clone();
    let dir = plugin_dir();
    let services: Api<Service> = Api::namespaced(client.clone(), &n);
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "web", "annotations": {
            "service.beta.kubernetes.io/alibaba-cloud-loadbalancer-id": "lb-plugin-test"}},
        "spec": {"type": "LoadBalancer", "selector": {"app": "web"},
                 "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}]}
    }))
    .unwrap();
    let service = services
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &n);
    for name in ["web-a", "web-b"] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": "web"}},
            "spec": {
                "nodeName": nodes.names[0],
                "tolerations": [{"operator": "Exists"}],
                "readinessGates": [{"conditionType": GATE}],
                "containers": [{"name": "web", "image": "registry.local/web:v1"}]
            }
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    // What the controller would write: web-a's backend is healthy, web-b's is not yet.
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    for (pod, status, reason) in [
        ("web-a", "True", "BackendHealthy"),
        ("web-b", "False", "BackendUnhealthy"),
    ] {
        let patch = json!({"status": {"conditions": [{"type": GATE, "status": status,
            "reason": reason, "message": format!("{reason} on lb-plugin-test"),
            "lastTransitionTime": now}]}});
        pods.patch_status(pod, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
            .unwrap();
    }
    let events: Api<Event> = Api::namespaced(client.clone(), &n);
    let event: Event = serde_json::from_value(json!({
        "metadata": {"name": "web.plugin-test"},
        "eventTime": k8s_openapi::jiff::Timestamp::now().to_string(),
        "reportingController": "rollgate.io/test", "reportingInstance": "test",
        "action": "Reconcile", "type": "Warning", "reason": "InvalidLoadBalancerAnnotation",
        "note": "the zone maps cannot be read",
        "regarding": {"apiVersion": "v1", "kind": "Service", "namespace": n, "name": "web",
                      "uid": service.metadata.uid}
    }))
    .unwrap();
    events.create(&PostParams::default(), &event).await.unwrap();

    let json_out = stdout_of(
        &kubectl_with_plugin(
            &dir,
            &["rollgate", "gates", "svc/web", "-n", &n, "-o", "json"],
        ),
        "kubectl rollgate gates -o json",
    );
    note(format!(
        "kubectl rollgate gates svc/web -o json:\n{json_out}"
    ));
    let view: Value = serde_json::from_str(&json_out).unwrap();
    assert_eq!(
        view["load_balancer"],
        json!({"source": "attached", "id": "lb-plugin-test", "addresses": []})
    );
    let gates: Vec<(String, String, String)> = view["gates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["pod"].as_str().unwrap().to_string(),
                g["status"].as_str().unwrap().to_string(),
                g["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        gates,
        [
            ("web-a".into(), "True".into(), "BackendHealthy".into()),
            ("web-b".into(), "False".into(), "BackendUnhealthy".into())
        ]
    );
    assert_eq!(
        view["warnings"][0]["reason"], "InvalidLoadBalancerAnnotation",
        "{view}"
    );

    let table = stdout_of(
        &kubectl_with_plugin(&dir, &["rollgate", "gates", "svc/web", "-n", &n]),
        "kubectl rollgate gates",
    );
    note(format!("kubectl rollgate gates svc/web:\n{table}"));
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].contains("lb-plugin-test (attached)"), "{table}");
    assert!(
        lines[2].starts_with("web-a") && lines[2].contains("BackendHealthy"),
        "{table}"
    );
    assert!(
        lines[3].starts_with("web-b") && lines[3].contains("BackendUnhealthy"),
        "{table}"
    );
    assert!(
        table.contains("Warning InvalidLoadBalancerAnnotation (x1): the zone maps cannot be read"),
        "{table}"
    );

    let yaml = stdout_of(
        &kubectl_with_plugin(
            &dir,
            &["rollgate", "gates", "pod/web-b", "-n", &n, "-o", "yaml"],
        ),
        "kubectl rollgate gates pod/ -o yaml",
    );
    let doc: Value = serde_saphyr::from_str(&yaml).unwrap();
    assert_eq!(doc["gates"].as_array().map(Vec::len), Some(1), "{yaml}");
    assert_eq!(
        doc["gates"][0]["message"],
        "BackendUnhealthy on lb-plugin-test"
    );

    let missing = kubectl_with_plugin(&dir, &["rollgate", "gates", "svc/nope", "-n", &n]);
    assert!(!missing.status.success());
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(stderr.contains("service/nope not found"), "{stderr}");

    ns.cleanup().await;
    nodes.cleanup().await;
}
