//! `kubectl rollgate status` and `kubectl rollgate gates` through kubectl itself: the
//! rollgate binary installed as `kubectl-rollgate` on PATH (a link, as the README says),
//! against the local control plane. The plugin reads only what the cluster holds: in the
//! first two tests the gate conditions and the Warning Event are written by the test, as
//! the controller would write them, and no controller runs; the last runs the controller
//! on the emulator and compares the server groups the plugin shows with the cloud's.
//! Needs `make cluster-up`; `cargo test --test kubectl_plugin -- --ignored --nocapture` narrates.
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
use support::gated::{fast_emulator, GatedBed};
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
#[ignore = "needs a cluster: make test"]
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
#[ignore = "needs a cluster: make test"]
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
        json!({"source": "attached", "id": "lb-plugin-test", "addresses": [],
               "server_groups": []})
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

/// The controller on the emulator: `kubectl rollgate gates` shows the NLB's listeners and
/// server groups the cloud has (read back through the cloud API), each pod's health as
/// its gate says it; a steady Service gets no further write from rollgate (counted in
/// the API server's audit log); and the groups leave the Service when rollgate lets go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn kubectl_rollgate_gates_shows_the_server_groups_the_cloud_has() {
    let bed = GatedBed::new("plugsg", 1, &fast_emulator(), &[]).await;
    let n = bed.ns.name.clone();
    let dir = plugin_dir();
    let ports = json!([
        {"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"},
        {"name": "alt", "port": 8443, "targetPort": "http", "protocol": "TCP"},
    ]);
    bed.create_nlb_service("web", ports).await;
    bed.create_deployment("web", 2).await;
    bed.wait_gates("web", 2, "True", Duration::from_secs(90))
        .await;

    // What the cloud has, through its own API (DescribeListeners and the groups).
    let service = bed.services().get("web").await.unwrap();
    let lb_id = service
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("rollgate.io/created-load-balancer-id"))
        .cloned()
        .expect("the created load balancer's id");
    let wiring = bed
        .emu
        .cloud_client(alibaba_lb::Product::Nlb)
        .wiring(&lb_id)
        .await
        .unwrap()
        .expect("the load balancer exists");
    let mut cloud: Vec<Value> = wiring
        .listeners
        .iter()
        .map(|l| {
            json!({"port": l.port, "protocol": l.protocol.as_api_str(), "load_balancer_id": lb_id,
                   "listener_id": l.listener_id, "server_group_id": l.server_group_id})
        })
        .collect();
    cloud.sort_by_key(|l| l["port"].as_u64());
    assert_eq!(cloud.len(), 2, "{cloud:?}");
    assert!(
        cloud
            .iter()
            .all(|l| l["server_group_id"].as_str().is_some_and(|g| !g.is_empty())),
        "{cloud:?}"
    );

    let json_out = wait_for(
        "the plugin shows the groups",
        Duration::from_secs(30),
        || async {
            let out = stdout_of(
                &kubectl_with_plugin(
                    &dir,
                    &["rollgate", "gates", "svc/web", "-n", &n, "-o", "json"],
                ),
                "kubectl rollgate gates -o json",
            );
            let view: Value = serde_json::from_str(&out).map_err(|e| e.to_string())?;
            if view["load_balancer"]["server_groups"]
                .as_array()
                .map(Vec::len)
                == Some(2)
            {
                Ok(out)
            } else {
                Err(out)
            }
        },
    )
    .await;
    note(format!(
        "kubectl rollgate gates svc/web -o json:\n{json_out}"
    ));
    let view: Value = serde_json::from_str(&json_out).unwrap();
    assert_eq!(view["load_balancer"]["id"], lb_id.as_str());
    assert_eq!(view["load_balancer"]["source"], "created");
    assert_eq!(
        view["load_balancer"]["server_groups"],
        Value::Array(cloud.clone()),
        "the plugin's groups against the cloud's"
    );
    // Each pod's health per port, as rollgate last read it, with the same group ids.
    let gates = view["gates"].as_array().unwrap();
    assert_eq!(gates.len(), 2, "{view}");
    for gate in gates {
        assert_eq!(gate["status"], "True", "{gate}");
        let message = gate["message"].as_str().unwrap();
        for group in &cloud {
            let said = format!(
                "port {} (load balancer {lb_id}, server group {}): registered and healthy",
                group["port"],
                group["server_group_id"].as_str().unwrap()
            );
            assert!(message.contains(&said), "{message} lacks {said}");
        }
    }
    let table = stdout_of(
        &kubectl_with_plugin(&dir, &["rollgate", "gates", "svc/web", "-n", &n]),
        "kubectl rollgate gates",
    );
    note(format!("kubectl rollgate gates svc/web:\n{table}"));
    for (i, group) in cloud.iter().enumerate() {
        let line = format!(
            "  listener TCP:{} {} of {lb_id} -> server group {}",
            group["port"],
            group["listener_id"].as_str().unwrap(),
            group["server_group_id"].as_str().unwrap()
        );
        assert_eq!(table.lines().nth(1 + i), Some(line.as_str()), "{table}");
    }

    // Steady: polls go on (the cloud is read), the Service is not written again.
    let since = k8s_openapi::jiff::Timestamp::now();
    let requests = || async {
        let url = format!("{}/_emulator/state", bed.emu.base_url());
        let http = alibaba_lb::http::build_http_client(Duration::from_secs(10)).unwrap();
        let body = http.get(&url).send().await.unwrap().text().await.unwrap();
        let state: Value = serde_json::from_str(&body).unwrap();
        state["stats"]["requests"].as_u64().unwrap()
    };
    let before = requests().await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let polled = requests().await - before;
    let writes: Vec<String> = audit_records()
        .into_iter()
        .filter(|r| {
            r.resource == "services"
                && r.namespace.as_deref() == Some(n.as_str())
                && r.name.as_deref() == Some("web")
                && r.user == CONTROLLER_USER
                && !matches!(r.verb.as_str(), "get" | "list" | "watch")
                && r.received.is_some_and(|t| t > since)
        })
        .map(|r| format!("{} {:?} {:?}", r.verb, r.subresource, r.code))
        .collect();
    note(format!(
        "steady for 10 s: {polled} cloud calls, {} Service writes",
        writes.len()
    ));
    assert!(
        polled >= 4,
        "the controller did not poll: {polled} cloud calls"
    );
    assert!(
        writes.is_empty(),
        "a steady Service was written: {writes:?}"
    );

    // Let go of (no longer a LoadBalancer): the groups leave the Service with the
    // finalizer, and the plugin shows none.
    let patch = json!({"spec": {"type": "ClusterIP"}});
    bed.services()
        .patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_for(
        "the groups and the finalizer gone",
        Duration::from_secs(30),
        || async {
            let svc = bed.services().get("web").await.map_err(|e| e.to_string())?;
            let annotations = svc.metadata.annotations.clone().unwrap_or_default();
            let finalizers = svc.metadata.finalizers.clone().unwrap_or_default();
            if annotations.contains_key("rollgate.io/server-groups") || !finalizers.is_empty() {
                Err(format!("{annotations:?} {finalizers:?}"))
            } else {
                Ok(())
            }
        },
    )
    .await;
    let out = stdout_of(
        &kubectl_with_plugin(
            &dir,
            &["rollgate", "gates", "svc/web", "-n", &n, "-o", "json"],
        ),
        "kubectl rollgate gates -o json, let go of",
    );
    let view: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(view["load_balancer"]["server_groups"], json!([]), "{out}");
    bed.cleanup().await;
}
