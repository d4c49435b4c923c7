//! The readiness-gate injection webhook end to end: the real kube-apiserver calls
//! `rollgate controller --webhook-listen 127.0.0.1:<port>` over loopback, through a
//! MutatingWebhookConfiguration whose CA bundle the controller writes itself (from the
//! Secret it made), with the RBAC of `deploy/`.
//!
//! The configuration is `rollgate-readiness-gate-injector` (the one name the RBAC lets
//! the controller patch), so the tests of this file take turns on it and delete it at
//! the end. Its namespaceSelector also names the test's own namespace: other tests'
//! namespaces are never sent to it, even while no controller answers.
mod support;

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use lb_emulator::EmulatorConfig;
use serde_json::{json, Value};
use support::gated::*;
use support::*;

const CONFIGURATION: &str = "rollgate-readiness-gate-injector";
const CERT_SECRET: &str = "rollgate-webhook-cert";
const INJECT_LABEL: &str = "rollgate.io/readiness-gate-inject";
/// The label that sends only this test's namespace to the webhook.
const TEST_LABEL: &str = "rollgate.test/inject";

/// One test at a time owns the configuration.
static CONFIGURATION_OWNER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A free loopback port for the webhook (bound and released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The configuration as deploy/ has it (failurePolicy Ignore, pods CREATE only, the
/// namespace opt-in, the pod opt-out), calling 127.0.0.1:`port` instead of a Service,
/// with no CA bundle (the controller writes it), and sent only namespaces labelled
/// `TEST_LABEL=token`.
async fn create_configuration(client: &Client, port: u16, token: &str) {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    delete_configuration(client).await;
    let config: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": CONFIGURATION},
        "webhooks": [{
            "name": "readiness-gates.rollgate.io",
            "clientConfig": {"url": format!("https://127.0.0.1:{port}/mutate-pods")},
            "failurePolicy": "Ignore",
            "timeoutSeconds": 3,
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"], "scope": "Namespaced"}],
            "namespaceSelector": {"matchLabels": {INJECT_LABEL: "enabled", TEST_LABEL: token}},
            "objectSelector": {"matchExpressions": [{"key": INJECT_LABEL, "operator": "NotIn", "values": ["disabled"]}]},
        }],
    }))
    .unwrap();
    api.create(&PostParams::default(), &config).await.unwrap();
}

async fn delete_configuration(client: &Client) {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let _ = api.delete(CONFIGURATION, &DeleteParams::default()).await;
    wait_for(
        "the old configuration gone",
        Duration::from_secs(30),
        || async {
            match api.get_opt(CONFIGURATION).await {
                Ok(None) => Ok(()),
                other => Err(format!("{:?}", other.map(|c| c.is_some()))),
            }
        },
    )
    .await;
}

async fn label_namespace(client: &Client, namespace: &str, labels: Value) {
    let api: Api<Namespace> = Api::all(client.clone());
    api.patch(
        namespace,
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"labels": labels}})),
    )
    .await
    .unwrap();
}

/// The CA rollgate keeps in its Secret.
async fn secret_ca(client: &Client) -> Vec<u8> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "rollgate-system");
    wait_for("the webhook's Secret", Duration::from_secs(60), || async {
        let secret = secrets
            .get_opt(CERT_SECRET)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("no Secret yet")?;
        secret
            .data
            .and_then(|d| d.get("ca.crt").cloned())
            .map(|b| b.0)
            .ok_or_else(|| "no ca.crt".to_string())
    })
    .await
}

/// Waits until the controller wrote its CA into the configuration.
async fn wait_ca_bundle(client: &Client) {
    let ca = secret_ca(client).await;
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    wait_for(
        "the controller's CA bundle in the configuration",
        Duration::from_secs(60),
        || async {
            let config = api.get(CONFIGURATION).await.map_err(|e| e.to_string())?;
            let bundle = config.webhooks.unwrap_or_default()[0]
                .client_config
                .ca_bundle
                .clone();
            match bundle {
                Some(b) if b.0 == ca => Ok(()),
                other => Err(format!("caBundle {:?} bytes", other.map(|b| b.0.len()))),
            }
        },
    )
    .await;
}

/// A bare pod `name` (`app: app`, plus `labels`) on the bed's nodes, as created.
fn bare_pod<F>(bed: &GateWorld<F>, name: &str, app: &str, labels: Value) -> Pod {
    let mut all = json!({"app": app});
    all.as_object_mut()
        .unwrap()
        .extend(labels.as_object().cloned().unwrap_or_default());
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": all},
        "spec": {
            "nodeSelector": bed.nodes.selector(),
            "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                            "ports": [{"name": "http", "containerPort": 8080}]}],
        },
    }))
    .unwrap()
}

fn gates_of(pod: &Pod) -> Vec<String> {
    let mut gates: Vec<String> = pod
        .spec
        .as_ref()
        .and_then(|s| s.readiness_gates.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|g| g.condition_type)
        .collect();
    gates.sort();
    gates
}

fn gate(service: &str) -> String {
    format!("{GATE_PREFIX}{service}")
}

/// A pod of `app` created in dry run: sent to the mutating webhooks like a real one, as
/// they answered, and never stored.
async fn dry_run_pod<F>(bed: &GateWorld<F>, app: &str) -> Result<Pod, kube::Error> {
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    bed.pods()
        .create(&dry_run, &bare_pod(bed, "probe", app, json!({})))
        .await
}

/// Waits until the API server calls the webhook with the controller's CA: a dry-run
/// pod of `app` (sent to mutating webhooks like a real one) comes back with `want`.
async fn wait_webhook_answers<F>(bed: &GateWorld<F>, app: &str, want: &[String]) {
    wait_for(
        "the API server's calls to the webhook",
        Duration::from_secs(60),
        || async {
            let pod = dry_run_pod(bed, app).await.map_err(|e| e.to_string())?;
            let gates = gates_of(&pod);
            if gates == want {
                Ok(())
            } else {
                Err(format!("dry-run pod gates {gates:?}"))
            }
        },
    )
    .await;
}

async fn delete_cert_secret(client: &Client) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "rollgate-system");
    let _ = secrets.delete(CERT_SECRET, &DeleteParams::default()).await;
}

/// The serving certificate in rollgate's Secret, if any.
async fn serving_cert(client: &Client) -> Option<Vec<u8>> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "rollgate-system");
    secrets
        .get_opt(CERT_SECRET)
        .await
        .ok()
        .flatten()?
        .data?
        .get("tls.crt")
        .map(|b| b.0.clone())
}

/// A bed whose controller serves the webhook, a configuration sending it this bed's
/// namespace, the namespace opted in, and the CA bundle in place.
async fn webhook_bed(prefix: &str, nodes: usize, emulator: EmulatorConfig) -> (Bed, String) {
    webhook_bed_with(prefix, nodes, emulator, &[]).await
}

/// [`webhook_bed`] with more controller settings.
async fn webhook_bed_with(
    prefix: &str,
    nodes: usize,
    emulator: EmulatorConfig,
    env: &[(&str, &str)],
) -> (Bed, String) {
    let client = client().await;
    // The Secret is shared by every run: each test starts from none, so the controller
    // makes it (and a test's short validity holds).
    delete_cert_secret(&client).await;
    let port = free_port();
    let token = unique_name("inject");
    create_configuration(&client, port, &token).await;
    let listen = format!("127.0.0.1:{port}");
    let mut env = env.to_vec();
    env.push(("ROLLGATE_WEBHOOK_LISTEN", listen.as_str()));
    let bed = Bed::new(prefix, nodes, emulator, &env).await;
    label_namespace(
        &client,
        &bed.ns.name,
        json!({INJECT_LABEL: "enabled", TEST_LABEL: token}),
    )
    .await;
    wait_ca_bundle(&client).await;
    (bed, token)
}

/// A Deployment with no readinessGates, in an opted-in namespace behind two
/// LoadBalancer Services, gets both gates on every pod; its rollout then keeps the
/// healthy backends at replicas - maxUnavailable or more (the capacity proof of
/// tests/gates_walk_through.rs, here with injected gates). Without the webhook no pod
/// would carry a gate, and the capacity would drop as the proof's control shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn a_deployment_without_gates_gets_both_services_gates_and_keeps_capacity() {
    let _owner = CONFIGURATION_OWNER.lock().await;
    let emulator = EmulatorConfig {
        registration_delay: Duration::from_secs(1),
        health_delay: Duration::from_secs(3),
        ..fast_emulator()
    };
    let (bed, _) = webhook_bed("inject-capacity", 3, emulator).await;
    bed.create_service("web", "web", None, json!({})).await;
    bed.create_service("web-internal", "web", None, json!({}))
        .await;
    bed.wait_external_ip("web").await;
    bed.wait_external_ip("web-internal").await;
    let both = vec![gate("web"), gate("web-internal")];
    wait_webhook_answers(&bed, "web", &both).await;

    // No gate in the template: the webhook adds them.
    bed.create_deployment("web", "web", 6, &[], 1, 1).await;
    wait_rollout(&bed, "web", "web", "web", Duration::from_secs(120)).await;
    let pods = bed.live_pods("web").await;
    assert_eq!(pods.len(), 6, "{}", describe_pods(&pods));
    for pod in &pods {
        assert_eq!(gates_of(pod), both, "{}", pod.name_any());
        for service in ["web", "web-internal"] {
            assert_eq!(
                gate_status(pod, service).map(|(s, _, _)| s).as_deref(),
                Some("True"),
                "{} {service}",
                pod.name_any()
            );
        }
    }
    let injected = bed
        .controller
        .as_ref()
        .unwrap()
        .metric("rollgate_gate_injections_total{result=\"injected\"}")
        .await;
    assert!(injected >= 6.0, "injections counted: {injected}");

    // The capacity proof on the Service `web`, through a restart of the Deployment.
    let (min, trace) = lowest_healthy_through_a_restart(&bed, "web", 6).await;
    for pod in bed.live_pods("web").await {
        assert_eq!(
            gates_of(&pod),
            both,
            "after the restart: {}",
            pod.name_any()
        );
    }
    note(format!(
        "injected gates: lowest healthy backends during the rollout {min} (replicas 6, maxUnavailable 1)"
    ));
    assert!(
        min >= 5,
        "with injected gates capacity dropped to {min}:\n{}",
        trace.join("\n")
    );
    delete_configuration(&bed.client).await;
    bed.cleanup().await;
}

/// An opted-out pod and a namespace without the label get no gate, though a managed
/// Service selects them; a pod created while no replica answers is created, without
/// gates (failurePolicy Ignore), and once a replica is back it counts the pods lacking
/// their gate. The first pod shows the webhook did answer (it fails on code without
/// the webhook).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn opted_out_pods_other_namespaces_and_a_dead_webhook_get_no_gates() {
    let _owner = CONFIGURATION_OWNER.lock().await;
    let (mut bed, token) = webhook_bed("inject-rules", 1, fast_emulator()).await;
    bed.create_service("web", "web", None, json!({})).await;
    wait_webhook_answers(&bed, "web", &[gate("web")]).await;

    let created = bed
        .pods()
        .create(
            &PostParams::default(),
            &bare_pod(&bed, "injected", "web", json!({})),
        )
        .await
        .unwrap();
    assert_eq!(gates_of(&created), vec![gate("web")]);

    let opted_out = bed
        .pods()
        .create(
            &PostParams::default(),
            &bare_pod(&bed, "opted-out", "web", json!({INJECT_LABEL: "disabled"})),
        )
        .await
        .unwrap();
    assert_eq!(gates_of(&opted_out), Vec::<String>::new());
    let other_app = bed
        .pods()
        .create(
            &PostParams::default(),
            &bare_pod(&bed, "other-app", "api", json!({})),
        )
        .await
        .unwrap();
    assert_eq!(gates_of(&other_app), Vec::<String>::new());

    // The namespace's opt-in taken back (the test's own label kept): no gate.
    label_namespace(&bed.client, &bed.ns.name, json!({INJECT_LABEL: null})).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let unlabelled = bed
        .pods()
        .create(
            &PostParams::default(),
            &bare_pod(&bed, "unlabelled", "web", json!({})),
        )
        .await
        .unwrap();
    assert_eq!(gates_of(&unlabelled), Vec::<String>::new());
    let metrics = bed.metrics().await;
    assert!(
        metrics.contains("rollgate_gate_injections_total{result=\"injected\"}"),
        "{metrics}"
    );

    // No replica answers: the pod is still created, promptly, and without gates.
    label_namespace(
        &bed.client,
        &bed.ns.name,
        json!({INJECT_LABEL: "enabled", TEST_LABEL: token}),
    )
    .await;
    bed.controller.take().unwrap().stop();
    let started = std::time::Instant::now();
    let orphan = bed
        .pods()
        .create(
            &PostParams::default(),
            &bare_pod(&bed, "while-down", "web", json!({})),
        )
        .await
        .expect("a pod is created while the webhook is down");
    let took = started.elapsed();
    assert_eq!(gates_of(&orphan), Vec::<String>::new());
    assert!(took < Duration::from_secs(5), "creation took {took:?}");

    // Back up: new pods get their gate again, and the pods that lack it are counted:
    // the one created while down, and the one created while the label was off.
    bed.start_controller("controller-again");
    wait_webhook_answers(&bed, "web", &[gate("web")]).await;
    let controller = bed.controller.as_ref().unwrap();
    wait_for(
        "the pods lacking their gate counted",
        Duration::from_secs(60),
        || async {
            match controller
                .metric("rollgate_gate_injection_missing_pods")
                .await
            {
                2.0 => Ok(()),
                other => Err(format!("rollgate_gate_injection_missing_pods {other}")),
            }
        },
    )
    .await;
    delete_configuration(&bed.client).await;
    bed.cleanup().await;
}

/// Serving certificates valid 30 s, renewed at two thirds of that under the same CA:
/// for a minute (two lifetimes) every pod creation the API server sends is still
/// answered, over TLS it verifies with the one CA bundle, so each replacement
/// certificate was picked up without a restart; the Secret shows the renewals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn admissions_keep_working_through_certificate_renewals() {
    let _owner = CONFIGURATION_OWNER.lock().await;
    let client = client().await;
    let (bed, _) = webhook_bed_with(
        "inject-renewal",
        1,
        fast_emulator(),
        &[("ROLLGATE_WEBHOOK_CERT_VALIDITY", "30s")],
    )
    .await;
    bed.create_service("web", "web", None, json!({})).await;
    wait_webhook_answers(&bed, "web", &[gate("web")]).await;
    let first_ca = secret_ca(&client).await;

    let mut certificates = vec![serving_cert(&client).await.expect("a serving certificate")];
    let started = std::time::Instant::now();
    let mut admissions = 0;
    while started.elapsed() < Duration::from_secs(60) {
        let pod = dry_run_pod(&bed, "web").await.unwrap();
        assert_eq!(
            gates_of(&pod),
            vec![gate("web")],
            "an admission {:?} into the run went unanswered ({} renewals seen)",
            started.elapsed(),
            certificates.len() - 1
        );
        admissions += 1;
        if let Some(cert) = serving_cert(&client).await {
            if certificates.last() != Some(&cert) {
                certificates.push(cert);
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    note(format!(
        "{admissions} admissions answered through {} renewals",
        certificates.len() - 1
    ));
    assert!(
        certificates.len() >= 3,
        "expected at least two renewals in a minute of 30 s certificates, saw {}",
        certificates.len() - 1
    );
    assert_eq!(secret_ca(&client).await, first_ca, "renewals keep the CA");

    delete_configuration(&bed.client).await;
    bed.cleanup().await;
    // The next controller makes a certificate of its own validity.
    delete_cert_secret(&client).await;
}

/// The ServiceAccount the cert-manager test's controller runs as.
const CERT_MANAGER_ACCOUNT: &str = "rollgate-controller-cert-manager";

/// A kubeconfig with the RBAC of `deploy/with-cert-manager`: deploy/'s ClusterRole and
/// the component's Role (the webhook's Secret read-only), bound to an account of its
/// own, so the other tests' controllers keep deploy/'s Role.
fn cert_manager_kubeconfig() -> std::path::PathBuf {
    // Applies deploy/'s RBAC (the ClusterRole, the namespace) first.
    controller_kubeconfig();
    let layout = kustomize_build(&repo_root().join("deploy/with-cert-manager"));
    let controllers = |kind: &str, name: &str| {
        layout
            .iter()
            .find(|o| kind_of(o) == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("the layout's {kind} {name}"))
            .clone()
    };
    let mut role = controllers("Role", "rollgate-controller-leader-election");
    role["metadata"]["name"] = json!(CERT_MANAGER_ACCOUNT);
    let cluster_role =
        controllers("ClusterRole", "rollgate-controller")["metadata"]["name"].clone();
    let subject = json!([{"kind": "ServiceAccount", "name": CERT_MANAGER_ACCOUNT, "namespace": "rollgate-system"}]);
    let objects = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": CERT_MANAGER_ACCOUNT, "namespace": "rollgate-system"}},
        role,
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": CERT_MANAGER_ACCOUNT, "namespace": "rollgate-system"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": CERT_MANAGER_ACCOUNT},
         "subjects": subject},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": CERT_MANAGER_ACCOUNT},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
         "subjects": subject},
    ]});
    let dir = temp_dir("cert-manager-rbac");
    let file = dir.join("rbac.json");
    std::fs::write(&file, serde_json::to_vec(&objects).unwrap()).unwrap();
    kubectl(&["apply", "-f", file.to_str().unwrap()]);
    let token = kubectl(&[
        "-n",
        "rollgate-system",
        "create",
        "token",
        CERT_MANAGER_ACCOUNT,
        "--duration",
        "1h",
    ]);
    derived_kubeconfig(&dir, "controller.kubeconfig", None, Some(token.trim()))
}

/// What a cert-manager Certificate writes: a `kubernetes.io/tls` Secret with the serving
/// certificate (for 127.0.0.1, where the test configuration calls), its key and the CA.
fn issued_secret(bundle: &rollgate::gates::inject::certs::CertBundle) -> Secret {
    let bytes = |s: &str| k8s_openapi::ByteString(s.as_bytes().to_vec());
    serde_json::from_value(json!({
        "metadata": {"name": CERT_SECRET},
        "type": "kubernetes.io/tls",
    }))
    .map(|mut secret: Secret| {
        secret.data = Some(
            [
                ("tls.crt", &bundle.cert_pem),
                ("tls.key", &bundle.key_pem),
                ("ca.crt", &bundle.ca_cert_pem),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), bytes(v)))
            .collect(),
        );
        secret
    })
    .unwrap()
}

fn new_issued_certificate() -> rollgate::gates::inject::certs::CertBundle {
    rollgate::gates::inject::certs::new_ca_and_serving(
        &["127.0.0.1".to_string()],
        Duration::from_secs(3600),
        time::OffsetDateTime::now_utc(),
    )
    .unwrap()
}

/// Sets the configuration's caBundle, as cert-manager's cainjector does from the
/// Secret's `ca.crt`; returns the configuration's resourceVersion after.
async fn inject_ca(client: &Client, ca_pem: &str) -> String {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let patched = api
        .patch(
            CONFIGURATION,
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(
                    json!([{"op": "add", "path": "/webhooks/0/clientConfig/caBundle",
                    "value": k8s_openapi::ByteString(ca_pem.as_bytes().to_vec())}]),
                )
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    patched.resource_version().unwrap()
}

/// With `--webhook-cert-source cert-manager` (and deploy/with-cert-manager's read-only
/// Role), the controller makes no Secret and writes no CA bundle: it waits for the
/// Secret a Certificate writes, serves it, and serves a renewed one (a new CA's, the
/// bundle replaced as cainjector would) from the next connection on. A controller that
/// made its own certificate would have a Secret before the test writes one; one that
/// kept serving the first certificate would fail every admission once the bundle holds
/// only the new CA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn with_cert_manager_it_serves_the_issued_secret_and_writes_neither_it_nor_the_bundle() {
    let _owner = CONFIGURATION_OWNER.lock().await;
    let client = client().await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "rollgate-system");
    let configs: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    delete_cert_secret(&client).await;
    let port = free_port();
    let token = unique_name("inject");
    create_configuration(&client, port, &token).await;
    let kubeconfig = cert_manager_kubeconfig();
    let listen = format!("127.0.0.1:{port}");
    let bed = Bed::new(
        "inject-cert-manager",
        1,
        fast_emulator(),
        &[
            ("KUBECONFIG", kubeconfig.to_str().unwrap()),
            ("ROLLGATE_WEBHOOK_LISTEN", &listen),
            ("ROLLGATE_WEBHOOK_CERT_SOURCE", "cert-manager"),
        ],
    )
    .await;
    label_namespace(
        &client,
        &bed.ns.name,
        json!({INJECT_LABEL: "enabled", TEST_LABEL: token}),
    )
    .await;
    bed.create_service("web", "web", None, json!({})).await;

    // Before cert-manager issues: the controller waits, and says so; no Secret, and a
    // pod is created without gates (nobody answers, failurePolicy Ignore).
    let log = bed.controller.as_ref().unwrap().log.clone();
    wait_for(
        "the controller waiting for cert-manager",
        Duration::from_secs(60),
        || async {
            let text = std::fs::read_to_string(&log).map_err(|e| e.to_string())?;
            text.contains("waiting for cert-manager to issue the Secret")
                .then_some(())
                .ok_or_else(|| "not yet".to_string())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        secrets.get_opt(CERT_SECRET).await.unwrap().is_none(),
        "the controller made a Secret of its own"
    );
    let unanswered = dry_run_pod(&bed, "web").await.unwrap();
    assert_eq!(gates_of(&unanswered), Vec::<String>::new());

    // cert-manager issues; cainjector fills the bundle.
    let first = new_issued_certificate();
    let created = secrets
        .create(&PostParams::default(), &issued_secret(&first))
        .await
        .unwrap();
    let config_version = inject_ca(&client, &first.ca_cert_pem).await;
    wait_webhook_answers(&bed, "web", &[gate("web")]).await;
    // The keeper's first round is at once: a controller writing the bundle or the
    // Secret would have done so by now.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        configs.get(CONFIGURATION).await.unwrap().resource_version(),
        Some(config_version),
        "the controller wrote the configuration cainjector owns"
    );
    assert_eq!(
        secrets.get(CERT_SECRET).await.unwrap().resource_version(),
        created.resource_version(),
        "the controller wrote the Secret cert-manager owns"
    );

    // A renewal under a new CA: the bundle then trusts only the new CA, so admissions
    // succeed again only once the controller serves the renewed certificate.
    let renewed = new_issued_certificate();
    let mut secret = issued_secret(&renewed);
    secret.metadata.resource_version = created.resource_version();
    secrets
        .replace(CERT_SECRET, &PostParams::default(), &secret)
        .await
        .unwrap();
    inject_ca(&client, &renewed.ca_cert_pem).await;
    wait_webhook_answers(&bed, "web", &[gate("web")]).await;
    let log_text = std::fs::read_to_string(&log).unwrap();
    assert!(
        log_text.contains("serving the certificate cert-manager renewed"),
        "no renewal in the controller's log"
    );

    delete_configuration(&bed.client).await;
    bed.cleanup().await;
    delete_cert_secret(&client).await;
}
