//! The Helm chart (`charts/rollgate`): it lints clean; with the default values it renders
//! deploy/'s objects (kustomize) field for field, labels aside, and with the agent off
//! deploy/without-agent's; its values reach the objects they name; and installed with
//! helm on the local control plane its RBAC runs a real AdvancedRollingUpdate rollout
//! and a readiness-gated rollout (against the lb-emulator), `helm upgrade` applies
//! changed values and `helm uninstall` leaves nothing behind.
//!
//! helm comes from `hack/build-helm.sh` (pinned in hack/versions.env, cached outside the
//! clone): `ROLLGATE_HELM`, else `helm` on PATH, else that cache. Without it every test
//! here says SKIPPED and passes; `make test` builds it first, so there it is never
//! missing. The install test cannot pull images: the chart's pods are held off every
//! node by a node selector, and the test runs this build's rollgate binary with a token
//! of the chart's ServiceAccount instead. Needs `make cluster-up`.
mod support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::{json, Value};
use support::daemonset::*;
use support::*;

/// The release name and namespace that give deploy/'s object names.
const DEPLOY_RELEASE: &str = "rollgate";
const DEPLOY_NAMESPACE: &str = "rollgate-system";
/// The label by which every object of a release is found (selectors include it too).
const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
/// A node label no node has: the installed chart's pods are never scheduled (the bed
/// cannot pull the image, and they would land on other tests' simulated nodes).
const NO_NODE_SELECTOR: &str = "rollgate.test/helm-no-such-node";

const STRATEGY: &str = "apps.openyurt.io/update-strategy";
const MAX_UNAVAILABLE: &str = "apps.openyurt.io/max-unavailable";
const V1: &str = "registry.local/edge-agent:v1";
const V2: &str = "registry.local/edge-agent:v2";
/// The cluster's VPC in the emulator: the pods' ENIs are there.
const VPC_ID: &str = "vpc-e2e-helm";
const GATE: &str = "service.readiness.alibabacloud.com/web";

fn chart_dir() -> PathBuf {
    repo_root().join("charts/rollgate")
}

/// The helm binary: `ROLLGATE_HELM`, `helm` on PATH, or hack/build-helm.sh's cache.
fn helm_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("ROLLGATE_HELM").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    if let Some(on_path) = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("helm"))
            .find(|candidate| candidate.is_file())
    }) {
        return Some(on_path);
    }
    let versions = std::fs::read_to_string(repo_root().join("hack/versions.env")).ok()?;
    let version = versions
        .lines()
        .find_map(|l| l.strip_prefix("HELM_VERSION="))?
        .trim()
        .to_string();
    let cache = std::env::var_os("ROLLGATE_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/rollgate")))?;
    Some(cache.join(format!("helm-{version}/bin/helm"))).filter(|p| p.is_file())
}

/// The helm binary, or `None` after saying why the test is skipped.
fn helm_or_skip(test: &str) -> Option<PathBuf> {
    let found = helm_binary();
    if found.is_none() {
        eprintln!(
            "SKIPPED {test}: helm is not installed. Build it with `bash hack/build-helm.sh` \
             (make test does) or set ROLLGATE_HELM."
        );
    }
    found
}

/// Runs helm against the test cluster, with its config, cache and data in
/// target/e2e-state (never the user's). Ok(stdout) or Err(stderr).
fn run_helm(helm: &PathBuf, args: &[&str]) -> Result<String, String> {
    let home = repo_root().join("target/e2e-state/helm-home");
    std::fs::create_dir_all(&home).unwrap();
    let out = std::process::Command::new(helm)
        .env("KUBECONFIG", kubeconfig_path())
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"))
        .args(args)
        .output()
        .expect("running helm");
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).expect("helm prints UTF-8"))
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn helm(helm: &PathBuf, args: &[&str]) -> String {
    run_helm(helm, args).unwrap_or_else(|e| panic!("helm {}: {e}", args.join(" ")))
}

/// `--set a=b` pairs for helm, from `["a=b", ...]`.
fn set_args<'a>(sets: &[&'a str]) -> Vec<&'a str> {
    sets.iter().flat_map(|s| ["--set", *s]).collect()
}

/// The objects `helm template` renders, as JSON, or helm's error.
fn try_template(
    helm_bin: &PathBuf,
    release: &str,
    namespace: &str,
    sets: &[&str],
) -> Result<Vec<Value>, String> {
    let chart = chart_dir();
    let mut args = vec![
        "template",
        release,
        chart.to_str().unwrap(),
        "--namespace",
        namespace,
    ];
    args.extend(set_args(sets));
    let out = run_helm(helm_bin, &args)?;
    let documents: Vec<Value> =
        serde_saphyr::from_multiple(&out).map_err(|e| format!("helm's YAML: {e}\n{out}"))?;
    Ok(documents.into_iter().filter(|d| !d.is_null()).collect())
}

fn template(helm_bin: &PathBuf, release: &str, namespace: &str, sets: &[&str]) -> Vec<Value> {
    try_template(helm_bin, release, namespace, sets)
        .unwrap_or_else(|e| panic!("helm template {sets:?}: {e}"))
}

fn key(o: &Value) -> String {
    format!(
        "{}/{}/{}",
        kind_of(o),
        o["metadata"]["namespace"].as_str().unwrap_or_default(),
        o["metadata"]["name"].as_str().unwrap_or_default()
    )
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| kind_of(o) == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| {
            panic!(
                "no {kind} {name} in {:?}",
                objects.iter().map(key).collect::<Vec<_>>()
            )
        })
}

/// Removes the release's instance label from a selector map, checking it was the
/// release's.
fn strip_instance(selector: &mut Value, release: &str, what: &str) {
    if let Some(map) = selector.as_object_mut() {
        let removed = map.remove(INSTANCE_LABEL);
        assert_eq!(
            removed,
            Some(json!(release)),
            "{what} selects on {INSTANCE_LABEL}={release}"
        );
    }
}

/// A rendered object with what the chart adds on purpose taken out: helm's labels
/// (checked to include deploy/'s) and the instance label in selectors. What is left
/// must equal deploy/'s object field for field.
fn without_chart_additions(object: &Value, deployed: &Value, release: &str) -> Value {
    let mut o = object.clone();
    let what = key(object);
    // Every label deploy/ sets is there with the same value; the chart's own come on top.
    for (path, label_pointer) in [
        ("metadata.labels", "/metadata/labels"),
        (
            "spec.template.metadata.labels",
            "/spec/template/metadata/labels",
        ),
    ] {
        if let Some(labels) = o.pointer_mut(label_pointer) {
            for (k, v) in deployed
                .pointer(label_pointer)
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                assert_eq!(labels.get(k), Some(v), "{what} {path}[{k}]");
            }
            assert_eq!(labels[INSTANCE_LABEL], json!(release), "{what} {path}");
            let parent = label_pointer.rsplit_once('/').unwrap().0;
            let map = o.pointer_mut(parent).unwrap().as_object_mut().unwrap();
            map.remove("labels");
            if let Some(d) = deployed.pointer(label_pointer) {
                map.insert("labels".into(), d.clone());
            }
        }
    }
    for selector in [
        "/spec/selector/matchLabels",
        "/spec/template/spec/affinity/podAntiAffinity/preferredDuringSchedulingIgnoredDuringExecution/0/podAffinityTerm/labelSelector/matchLabels",
    ] {
        if let Some(s) = o.pointer_mut(selector) {
            strip_instance(s, release, &format!("{what} {selector}"));
        }
    }
    if kind_of(object) == "Service" {
        strip_instance(&mut o["spec"]["selector"], release, &what);
    }
    o
}

/// Compares the chart rendered with `sets` against the kustomization in `layout`: the
/// same objects (the Namespace aside: helm installs into the release's), each equal
/// field for field once the chart's labels are set aside.
fn assert_renders_like(helm_bin: &PathBuf, layout: &str, sets: &[&str]) -> Vec<Value> {
    let rendered = template(helm_bin, DEPLOY_RELEASE, DEPLOY_NAMESPACE, sets);
    let deployed: Vec<Value> = kustomize_build(&repo_root().join(layout))
        .into_iter()
        .filter(|o| kind_of(o) != "Namespace")
        .collect();
    let mut got: Vec<String> = rendered.iter().map(key).collect();
    let mut want: Vec<String> = deployed.iter().map(key).collect();
    got.sort();
    want.sort();
    assert_eq!(
        got, want,
        "helm template {sets:?} renders {layout}'s objects"
    );
    for object in &rendered {
        let same = deployed.iter().find(|d| key(d) == key(object)).unwrap();
        let normalized = without_chart_additions(object, same, DEPLOY_RELEASE);
        assert_eq!(
            &normalized,
            same,
            "{} of the chart ({sets:?}) differs from {layout}'s",
            key(object)
        );
    }
    rendered
}

/// The sets of values the chart is linted and rendered with: each turns on a part of
/// the templates the defaults leave out.
const NOTABLE_VALUES: &[&[&str]] = &[
    &[],
    &["agent.enabled=false"],
    &[
        "cloud.region=cn-hangzhou",
        "cloud.vpcId=vpc-test",
        "cloud.credentials.source=secret",
    ],
    &[
        "cloud.region=cn-hangzhou",
        "cloud.vpcId=vpc-test",
        "cloud.loadBalancerClasses=rollgate",
        "cloud.credentials.source=rrsa",
        "cloud.credentials.rrsa.roleArn=acs:ram::1:role/rollgate",
        "cloud.credentials.rrsa.oidcProviderArn=acs:ram::1:oidc-provider/ack",
    ],
    &[
        "controller.replicas=1",
        "controller.leaderElection.enabled=false",
    ],
    &["webhook.certManager.enabled=true"],
];

#[test]
fn the_chart_lints_clean_with_every_notable_set_of_values() {
    let Some(helm_bin) = helm_or_skip("the_chart_lints_clean_with_every_notable_set_of_values")
    else {
        return;
    };
    let chart = chart_dir();
    for sets in NOTABLE_VALUES {
        let mut args = vec!["lint", "--strict", chart.to_str().unwrap()];
        args.extend(set_args(sets));
        let out = helm(&helm_bin, &args);
        assert!(
            out.contains("0 chart(s) failed"),
            "helm lint {sets:?}:\n{out}"
        );
        note(format!("helm lint --strict {sets:?}: ok"));
    }
}

#[test]
fn values_that_cannot_work_fail_the_render_with_the_reason() {
    let Some(helm_bin) = helm_or_skip("values_that_cannot_work_fail_the_render_with_the_reason")
    else {
        return;
    };
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "controller.replicas=2",
                "controller.leaderElection.enabled=false",
            ],
            "needs controller.leaderElection.enabled",
        ),
        (&["cloud.region=cn-hangzhou"], "cloud.vpcId is required"),
        (
            &["cloud.credentials.source=rrsa"],
            "needs cloud.credentials.rrsa.roleArn",
        ),
        // values.schema.json: a value outside its set, and a misspelt key, which helm
        // would otherwise ignore without a word.
        (
            &["cloud.credentials.source=keys"],
            "value must be one of 'none', 'secret', 'rrsa'",
        ),
        (
            &["contoller.replicas=3"],
            "additional properties 'contoller' not allowed",
        ),
    ];
    for (sets, reason) in cases {
        match try_template(&helm_bin, DEPLOY_RELEASE, DEPLOY_NAMESPACE, sets) {
            Ok(objects) => panic!("{sets:?} rendered {} objects", objects.len()),
            Err(e) => assert!(e.contains(reason), "{sets:?}: {e}"),
        }
    }
}

/// Default values: deploy/'s install (kustomize), object for object: the RBAC (rules,
/// bindings, subjects), the admission policy and its binding, the Deployment's and the
/// DaemonSet's pod specs (probes, security context, args), the PDB and the Service.
#[test]
#[ignore = "needs a cluster: make test"]
fn default_values_render_deploys_objects() {
    let Some(helm_bin) = helm_or_skip("default_values_render_deploys_objects") else {
        return;
    };
    let rendered = assert_renders_like(&helm_bin, "deploy", &[]);
    note(format!(
        "helm template: {} objects equal to deploy/'s",
        rendered.len()
    ));
}

/// `webhook.certManager.enabled`: deploy/with-cert-manager (deploy/ with the
/// cert-manager component), object for object: the CA, Issuers and Certificate, the
/// configuration's cainjector annotation, the controller's flag and the read-only Role.
#[test]
#[ignore = "needs a cluster: make test"]
fn with_cert_manager_it_renders_the_cert_manager_component() {
    let Some(helm_bin) = helm_or_skip("with_cert_manager_it_renders_the_cert_manager_component")
    else {
        return;
    };
    let rendered = assert_renders_like(
        &helm_bin,
        "deploy/with-cert-manager",
        &["webhook.certManager.enabled=true"],
    );
    let certificates = rendered
        .iter()
        .filter(|o| kind_of(o) == "Certificate")
        .count();
    assert_eq!(certificates, 2, "the CA and the serving certificate");
}

#[test]
#[ignore = "needs a cluster: make test"]
fn without_the_agent_it_renders_the_layout_for_yurthub_nodes() {
    let Some(helm_bin) = helm_or_skip("without_the_agent_it_renders_the_layout_for_yurthub_nodes")
    else {
        return;
    };
    let rendered = assert_renders_like(&helm_bin, "deploy/without-agent", &["agent.enabled=false"]);
    assert!(
        !rendered
            .iter()
            .any(|o| key(o).contains("rollgate-agent") || kind_of(o) == "DaemonSet"),
        "{:?}",
        rendered.iter().map(key).collect::<Vec<_>>()
    );
}

fn controller_container(objects: &[Value], name: &str) -> Value {
    find(objects, "Deployment", name)["spec"]["template"]["spec"]["containers"][0].clone()
}

fn args_of(container: &Value) -> Vec<String> {
    container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

fn env_names(container: &Value) -> Vec<String> {
    container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

/// `flag value` appears in `args` as two adjacent items.
fn has_flag(args: &[String], flag: &str, value: &str) -> bool {
    args.windows(2).any(|w| w[0] == flag && w[1] == value)
}

#[test]
fn every_value_reaches_the_object_it_names() {
    let Some(helm_bin) = helm_or_skip("every_value_reaches_the_object_it_names") else {
        return;
    };
    let r = |sets: &[&str]| template(&helm_bin, "edge", "ops", sets);

    // Image, for both workloads.
    let o = r(&[
        "image.repository=mirror.local/rollgate",
        "image.tag=v9",
        "image.pullPolicy=IfNotPresent",
        "imagePullSecrets[0]=pull",
    ]);
    let controller = controller_container(&o, "edge-controller");
    let agent = &find(&o, "DaemonSet", "edge-agent")["spec"]["template"]["spec"];
    for (what, c, pod) in [
        (
            "controller",
            &controller,
            &find(&o, "Deployment", "edge-controller")["spec"]["template"]["spec"],
        ),
        ("agent", &agent["containers"][0], agent),
    ] {
        assert_eq!(c["image"], "mirror.local/rollgate:v9", "{what}");
        assert_eq!(c["imagePullPolicy"], "IfNotPresent", "{what}");
        assert_eq!(pod["imagePullSecrets"], json!([{"name": "pull"}]), "{what}");
    }
    // Names follow the release; every object carries the instance label; namespaced
    // objects are in the release's namespace.
    for object in &o {
        let name = object["metadata"]["name"].as_str().unwrap();
        assert!(name.starts_with("edge-"), "{}", key(object));
        assert_eq!(object["metadata"]["labels"][INSTANCE_LABEL], "edge");
        if let Some(ns) = object["metadata"]["namespace"].as_str() {
            assert_eq!(ns, "ops", "{}", key(object));
        }
    }
    let binding = find(&o, "ClusterRoleBinding", "edge-controller");
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "edge-controller", "namespace": "ops"}])
    );

    // Replicas and leader election.
    let o = r(&[
        "controller.replicas=1",
        "controller.leaderElection.enabled=false",
    ]);
    assert_eq!(
        find(&o, "Deployment", "edge-controller")["spec"]["replicas"],
        1
    );
    assert!(args_of(&controller_container(&o, "edge-controller"))
        .contains(&"--leader-elect=false".to_string()));
    assert!(
        !o.iter().any(|x| kind_of(x) == "PodDisruptionBudget"),
        "one replica: a PDB would block every drain"
    );
    let o = r(&["controller.replicas=3"]);
    assert_eq!(
        find(&o, "Deployment", "edge-controller")["spec"]["replicas"],
        3
    );
    assert!(!args_of(&controller_container(&o, "edge-controller"))
        .iter()
        .any(|a| a.starts_with("--leader-elect")));

    // Watched namespace, the readiness gates' cloud settings, and extra flags.
    let o = r(&[
        "controller.watchNamespace=edge-apps",
        "cloud.region=cn-shenzhen",
        "cloud.vpcId=vpc-123",
        "cloud.network=public",
        "cloud.loadBalancerClasses=rollgate",
        "cloud.clusterId=c-1",
        "controller.extraArgs={--daemonset-concurrency,8}",
        "controller.prepullHelperImage=mirror.local/busybox:1",
    ]);
    let args = args_of(&controller_container(&o, "edge-controller"));
    for (flag, value) in [
        ("--watch-namespace", "edge-apps"),
        ("--cloud-region", "cn-shenzhen"),
        ("--cloud-vpc-id", "vpc-123"),
        ("--cloud-network", "public"),
        ("--load-balancer-classes", "rollgate"),
        ("--cluster-id", "c-1"),
        ("--daemonset-concurrency", "8"),
        ("--prepull-helper-image", "mirror.local/busybox:1"),
    ] {
        assert!(has_flag(&args, flag, value), "{flag} {value} in {args:?}");
    }
    // Without a region nothing of the cloud's is passed (the gates stay off).
    let args = args_of(&controller_container(&r(&[]), "edge-controller"));
    assert!(!args.iter().any(|a| a.starts_with("--cloud")), "{args:?}");

    // Credentials from a Secret.
    let o = r(&[
        "cloud.region=cn-shenzhen",
        "cloud.vpcId=vpc-123",
        "cloud.credentials.source=secret",
        "cloud.credentials.secret.name=my-keys",
    ]);
    let c = controller_container(&o, "edge-controller");
    assert_eq!(
        env_names(&c),
        [
            "POD_NAME",
            "POD_NAMESPACE",
            "ALIBABA_CLOUD_ACCESS_KEY_ID",
            "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
            "ALIBABA_CLOUD_SECURITY_TOKEN",
            "ALIBABA_CLOUD_ECS_METADATA_DISABLED"
        ]
    );
    assert_eq!(
        c["env"][2]["valueFrom"]["secretKeyRef"],
        json!({"name": "my-keys", "key": "access-key-id"})
    );
    assert_eq!(c["env"][4]["valueFrom"]["secretKeyRef"]["optional"], true);

    // Credentials through RRSA: the variables, the projected token and its mount.
    let o = r(&[
        "cloud.region=cn-shenzhen",
        "cloud.vpcId=vpc-123",
        "cloud.credentials.source=rrsa",
        "cloud.credentials.rrsa.roleArn=acs:ram::1:role/r",
        "cloud.credentials.rrsa.oidcProviderArn=acs:ram::1:oidc-provider/p",
        "controller.serviceAccount.annotations.pod-identity\\.alibabacloud\\.com/role-name=r",
    ]);
    let pod = &find(&o, "Deployment", "edge-controller")["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let env: Vec<(String, Value)> = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap().to_string(), e["value"].clone()))
        .collect();
    for (name, value) in [
        ("ALIBABA_CLOUD_ROLE_ARN", "acs:ram::1:role/r"),
        (
            "ALIBABA_CLOUD_OIDC_PROVIDER_ARN",
            "acs:ram::1:oidc-provider/p",
        ),
        (
            "ALIBABA_CLOUD_OIDC_TOKEN_FILE",
            "/var/run/secrets/ack.alibabacloud.com/rrsa-tokens/token",
        ),
        ("ALIBABA_CLOUD_ECS_METADATA_DISABLED", "true"),
    ] {
        assert!(
            env.contains(&(name.to_string(), json!(value))),
            "{name} in {env:?}"
        );
    }
    assert_eq!(
        c["volumeMounts"][0]["mountPath"],
        "/var/run/secrets/ack.alibabacloud.com/rrsa-tokens"
    );
    assert_eq!(
        pod["volumes"][0]["projected"]["sources"][0]["serviceAccountToken"]["audience"],
        "sts.aliyuncs.com"
    );
    assert_eq!(
        find(&o, "ServiceAccount", "edge-controller")["metadata"]["annotations"]
            ["pod-identity.alibabacloud.com/role-name"],
        "r"
    );

    // Resources, node selector and tolerations: the controller's and the agent's apart.
    let o = r(&[
        "controller.resources.limits.memory=1Gi",
        "controller.nodeSelector.role=control",
        "controller.tolerations[0].key=control",
        "controller.tolerations[0].operator=Exists",
        "agent.resources.limits.memory=64Mi",
        "agent.nodeSelector.role=edge",
        "agent.tolerations[0].key=edge",
        "agent.tolerations[0].operator=Exists",
        "agent.maxUnavailable=2",
    ]);
    let controller_pod = &find(&o, "Deployment", "edge-controller")["spec"]["template"]["spec"];
    let agent_set = find(&o, "DaemonSet", "edge-agent");
    let agent_pod = &agent_set["spec"]["template"]["spec"];
    assert_eq!(
        controller_pod["containers"][0]["resources"]["limits"]["memory"],
        "1Gi"
    );
    assert_eq!(controller_pod["nodeSelector"], json!({"role": "control"}));
    assert_eq!(
        controller_pod["tolerations"],
        json!([{"key": "control", "operator": "Exists"}])
    );
    assert_eq!(
        agent_pod["containers"][0]["resources"]["limits"]["memory"],
        "64Mi"
    );
    assert_eq!(agent_pod["nodeSelector"], json!({"role": "edge"}));
    assert_eq!(
        agent_pod["tolerations"],
        json!([{"key": "edge", "operator": "Exists"}])
    );
    assert_eq!(agent_set["metadata"]["annotations"][MAX_UNAVAILABLE], "2");

    // The injection webhook: its port reaches the flag, the container and nothing else
    // changes; its names are the release's, in the flags and in the RBAC alike; off,
    // neither its objects nor its flag are rendered.
    let o = r(&["webhook.port=9555"]);
    let c = controller_container(&o, "edge-controller");
    let args = args_of(&c);
    for (flag, value) in [
        ("--webhook-listen", "0.0.0.0:9555"),
        ("--webhook-service", "edge-webhook"),
        ("--webhook-configuration", "edge-readiness-gate-injector"),
        ("--webhook-cert-secret", "edge-webhook-cert"),
    ] {
        assert!(has_flag(&args, flag, value), "{flag} {value} in {args:?}");
    }
    assert!(c["ports"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["name"] == "webhook" && p["containerPort"] == 9555));
    let config = find(
        &o,
        "MutatingWebhookConfiguration",
        "edge-readiness-gate-injector",
    );
    assert_eq!(
        config["webhooks"][0]["clientConfig"]["service"],
        json!({"name": "edge-webhook", "namespace": "ops", "path": "/mutate-pods", "port": 443})
    );
    find(&o, "Service", "edge-webhook");
    let rules =
        serde_json::to_string(&find(&o, "ClusterRole", "edge-controller")["rules"]).unwrap();
    assert!(
        rules.contains("\"edge-readiness-gate-injector\""),
        "{rules}"
    );
    let role = serde_json::to_string(&find(&o, "Role", "edge-controller-leader-election")["rules"])
        .unwrap();
    assert!(role.contains("\"edge-webhook-cert\""), "{role}");
    assert!(!o.iter().any(|o| kind_of(o) == "Certificate"));
    assert!(config["metadata"]["annotations"].is_null(), "{config}");
    assert!(
        !args.iter().any(|a| a == "--webhook-cert-source"),
        "{args:?}"
    );

    // cert-manager makes the certificate: the release's Certificate, Secret and
    // annotation agree with the controller's flag, and the Role only reads the Secret.
    let o = r(&["webhook.certManager.enabled=true"]);
    let args = args_of(&controller_container(&o, "edge-controller"));
    assert!(
        has_flag(&args, "--webhook-cert-source", "cert-manager")
            && has_flag(&args, "--webhook-cert-secret", "edge-webhook-cert"),
        "{args:?}"
    );
    let config = find(
        &o,
        "MutatingWebhookConfiguration",
        "edge-readiness-gate-injector",
    );
    assert_eq!(
        config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        "ops/edge-webhook-cert"
    );
    let serving = find(&o, "Certificate", "edge-webhook-cert");
    assert_eq!(serving["spec"]["secretName"], "edge-webhook-cert");
    assert!(serving["spec"]["dnsNames"]
        .as_array()
        .unwrap()
        .contains(&json!("edge-webhook.ops.svc")));
    let ca_issuer = &serving["spec"]["issuerRef"]["name"];
    assert_eq!(
        find(&o, "Issuer", ca_issuer.as_str().unwrap())["spec"]["ca"]["secretName"],
        find(&o, "Certificate", "edge-webhook-ca")["spec"]["secretName"]
    );
    let role = &find(&o, "Role", "edge-controller-leader-election")["rules"];
    let secret_verbs: Vec<&Value> = role
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["resources"] == json!(["secrets"]))
        .collect();
    assert_eq!(
        secret_verbs,
        vec![
            &json!({"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["edge-webhook-cert"], "verbs": ["get", "list", "watch"]})
        ]
    );

    let off = r(&["webhook.enabled=false"]);
    assert!(!off
        .iter()
        .any(|o| kind_of(o) == "MutatingWebhookConfiguration" || kind_of(o) == "Certificate"));
    let args = args_of(&controller_container(&off, "edge-controller"));
    assert!(!args.iter().any(|a| a.starts_with("--webhook")), "{args:?}");
}

/// Kinds the chart creates, and those its workloads make (ReplicaSets, pods,
/// ControllerRevisions and EndpointSlices carry the release's labels too), plus helm's
/// release record. Every one must be gone after `helm uninstall`.
const RELEASE_KINDS: &[&str] = &[
    "serviceaccounts",
    "clusterroles.rbac.authorization.k8s.io",
    "clusterrolebindings.rbac.authorization.k8s.io",
    "roles.rbac.authorization.k8s.io",
    "rolebindings.rbac.authorization.k8s.io",
    "validatingadmissionpolicies.admissionregistration.k8s.io",
    "validatingadmissionpolicybindings.admissionregistration.k8s.io",
    "mutatingwebhookconfigurations.admissionregistration.k8s.io",
    "deployments.apps",
    "replicasets.apps",
    "daemonsets.apps",
    "controllerrevisions.apps",
    "pods",
    "poddisruptionbudgets.policy",
    "services",
    "endpointslices.discovery.k8s.io",
];

/// The chart's kinds as `kubectl get` names them (ServiceAccount -> serviceaccounts).
fn resource_of(kind: &str) -> &'static str {
    let lower = kind.to_lowercase();
    let plural = match lower.strip_suffix('y') {
        Some(stem) => format!("{stem}ies"),
        None => format!("{lower}s"),
    };
    RELEASE_KINDS
        .iter()
        .find(|r| r.split('.').next().unwrap() == plural)
        .copied()
        .unwrap_or_else(|| {
            panic!("the chart makes a {kind}: add it to RELEASE_KINDS so uninstall checks it")
        })
}

/// Every object of the release left in the cluster, by label, across `RELEASE_KINDS`
/// (cluster-scoped and in every namespace), plus helm's release Secrets.
fn release_leftovers(release: &str, namespace: &str) -> Vec<String> {
    let mut left: Vec<String> = kubectl(&[
        "get",
        &RELEASE_KINDS.join(","),
        "--all-namespaces",
        "-l",
        &format!("{INSTANCE_LABEL}={release}"),
        "-o",
        "name",
    ])
    .lines()
    .map(str::to_string)
    .collect();
    left.extend(
        kubectl(&[
            "get",
            "secrets",
            "-n",
            namespace,
            "-l",
            &format!("owner=helm,name={release}"),
            "-o",
            "name",
        ])
        .lines()
        .map(str::to_string),
    );
    left
}

/// A LoadBalancer Service and a Deployment of two pods gated on it, run by the
/// controller of the installed chart's ServiceAccount: the load balancer is made (the
/// Service's finalizer and EXTERNAL-IP), every pod's gate turns True once its backend is
/// healthy, and deleting the Service releases the finalizer.
async fn gated_rollout(client: &kube::Client, namespace: &str, nodes: &TestNodes) {
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "type": "LoadBalancer",
            "selector": {"app": "web"},
            "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}]
        }
    }))
    .unwrap();
    services
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "nodeSelector": nodes.selector(),
                    "readinessGates": [{"conditionType": GATE}],
                    "containers": [{
                        "name": "web",
                        "image": "registry.local/nginx:1.14",
                        "ports": [{"name": "http", "containerPort": 8080}]
                    }]
                }
            }
        }
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    let gated = wait_for(
        "both gated pods Ready with their gate True",
        Duration::from_secs(120),
        || async {
            let list = pods
                .list(&ListParams::default().labels("app=web"))
                .await
                .map_err(|e| e.to_string())?;
            let ready: Vec<&Pod> = list
                .items
                .iter()
                .filter(|p| pod_condition(p, GATE).as_deref() == Some("True") && pod_is_ready(p))
                .collect();
            if ready.len() == 2 {
                Ok(ready.len())
            } else {
                Err(describe_pods(&list.items))
            }
        },
    )
    .await;
    let web = services.get("web").await.unwrap();
    assert!(
        web.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "rollgate.io/load-balancer"),
        "{:?}",
        web.metadata.finalizers
    );
    let ingress = web
        .status
        .and_then(|s| s.load_balancer)
        .and_then(|lb| lb.ingress)
        .unwrap_or_default();
    assert!(!ingress.is_empty(), "the Service has its EXTERNAL-IP");
    deployments
        .delete("web", &Default::default())
        .await
        .unwrap();
    services.delete("web", &Default::default()).await.unwrap();
    wait_for(
        "the Service gone (its finalizer released)",
        Duration::from_secs(60),
        || async {
            match services.get_opt("web").await {
                Ok(None) => Ok(()),
                Ok(Some(s)) => Err(format!("finalizers {:?}", s.metadata.finalizers)),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await;
    note(format!(
        "gated rollout by the chart's ServiceAccount: {gated} pods 1/1 behind the emulator's load balancer, the Service deleted cleanly"
    ));
}

fn deployment_args(deployment: &Deployment) -> Vec<String> {
    deployment
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.args.clone())
        .unwrap_or_default()
}

/// `helm install` on the local control plane, then a rollout run by rollgate with the
/// installed ServiceAccount's token (bound to the chart's own controller pod, as the
/// kubelet would mount it): the chart's RBAC suffices for a real AdvancedRollingUpdate,
/// its Lease lands in the release's namespace through the chart's Role, and every
/// DELETE of the rollout is the chart's ServiceAccount's. Then `helm upgrade` applies
/// changed values (the agent's objects go with agent.enabled=false and come back), and
/// `helm uninstall` leaves nothing of the release behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: make test"]
async fn helm_install_runs_a_rollout_and_upgrade_and_uninstall_leave_nothing_behind() {
    let Some(helm_bin) =
        helm_or_skip("helm_install_runs_a_rollout_and_upgrade_and_uninstall_leave_nothing_behind")
    else {
        return;
    };
    let client = client().await;
    // The release and its namespace share a unique name: its cluster-scoped objects
    // (ClusterRoles, the admission policy) then sit beside other installs'.
    let release = unique_name("helm");
    let chart = chart_dir();
    let held_off = [
        format!(
            "controller.nodeSelector.{}=true",
            NO_NODE_SELECTOR.replace('.', "\\.")
        ),
        format!(
            "agent.nodeSelector.{}=true",
            NO_NODE_SELECTOR.replace('.', "\\.")
        ),
    ];
    let mut install = vec![
        "install",
        &release,
        chart.to_str().unwrap(),
        "--namespace",
        &release,
        "--create-namespace",
    ];
    for set in &held_off {
        install.extend(["--set", set]);
    }
    note(helm(&helm_bin, &install));
    let manifest = helm(&helm_bin, &["get", "manifest", &release, "-n", &release]);
    let installed: Vec<Value> = serde_saphyr::from_multiple::<Value>(&manifest)
        .unwrap()
        .into_iter()
        .filter(|d| !d.is_null())
        .collect();
    let kinds: BTreeSet<&str> = installed.iter().map(kind_of).collect();
    for kind in &kinds {
        resource_of(kind);
    }
    assert!(
        kinds.contains("ValidatingAdmissionPolicy") && kinds.contains("DaemonSet"),
        "{kinds:?}"
    );

    // The installed RBAC is the committed snapshot of deploy/'s, account for account.
    let controller_account = format!("{release}-controller");
    for (account, snapshot) in [
        (controller_account.clone(), "rollgate-controller.txt"),
        (format!("{release}-agent"), "rollgate-agent.txt"),
    ] {
        let committed =
            std::fs::read_to_string(repo_root().join("deploy/rbac-snapshot").join(snapshot))
                .unwrap();
        wait_for(
            &format!("the RBAC of {release}/{account} to equal {snapshot}"),
            Duration::from_secs(30),
            || async {
                // The webhook's resourceNames are the release's names of deploy/'s.
                let actual = can_i_list(&release, &account)
                    .replace(
                        &format!("{release}-readiness-gate-injector"),
                        "rollgate-readiness-gate-injector",
                    )
                    .replace(&format!("{release}-webhook-cert"), "rollgate-webhook-cert");
                if actual == committed {
                    Ok(())
                } else {
                    Err(format!("differs:\n{actual}"))
                }
            },
        )
        .await;
    }
    note("the installed chart's RBAC equals deploy/rbac-snapshot for both accounts");

    // The chart's controller pod exists but is never scheduled; a token bound to it is
    // the one the kubelet would mount into it.
    let release_pods: Api<Pod> = Api::namespaced(client.clone(), &release);
    let controller_pod = wait_for(
        "the chart's controller pod",
        Duration::from_secs(60),
        || async {
            let list = release_pods
                .list(&ListParams::default().labels(&format!(
                    "app.kubernetes.io/name=rollgate-controller,{INSTANCE_LABEL}={release}"
                )))
                .await
                .map_err(|e| e.to_string())?;
            list.items
                .into_iter()
                .next()
                .ok_or_else(|| "no pod yet".to_string())
        },
    )
    .await;
    assert!(
        controller_pod.spec.as_ref().unwrap().node_name.is_none(),
        "held off every node"
    );
    let token = bound_token(&client, &release, &controller_account, &controller_pod).await;
    let work = temp_dir("helm");
    let kubeconfig = derived_kubeconfig(&work, "chart-controller.kubeconfig", None, Some(&token));

    // A small AdvancedRollingUpdate rollout in a namespace of its own.
    let nodes = TestNodes::create(&client, "helm", 3).await;
    let ns = TestNamespace::new(&client, "helm-rollout").await;
    let ds_api: Api<DaemonSet> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let annotations = json!({STRATEGY: "AdvancedRollingUpdate", MAX_UNAVAILABLE: "1"});
    ds_api
        .create(
            &PostParams::default(),
            &edge_daemonset(
                "edge",
                &nodes,
                annotations,
                "OnDelete",
                Shape::ToleratesAll,
                V1,
            ),
        )
        .await
        .unwrap();
    wait_ready_on(
        &pods,
        &nodes.names,
        V1,
        Others::Allowed,
        Duration::from_secs(90),
    )
    .await;
    // The readiness gates as well, with the lb-emulator on loopback as the cloud.
    let emu = EmulatorProcess::start(&lb_emulator::EmulatorConfig {
        registration_delay: Duration::from_millis(300),
        health_delay: Duration::from_millis(1500),
        job_delay: Duration::from_millis(100),
        tick: Duration::from_millis(20),
        ..lb_emulator::EmulatorConfig::default()
    });
    let vpc = json!({"vpc_id": VPC_ID, "cidr_block": "10.0.0.0/8"});
    alibaba_lb::http::build_http_client(Duration::from_secs(10))
        .unwrap()
        .post(format!("{}/_emulator/vpcs", emu.base_url()))
        .header("content-type", "application/json")
        .body(vpc.to_string())
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .expect("the emulator's VPC");
    let enis = give_pod_ips_enis(client.clone(), &ns.name, &emu, VPC_ID);
    let endpoint = emu.endpoint();
    let controller = ControllerProcess::start_with(
        &ns.name,
        "helm",
        &kubeconfig,
        &[
            // The Lease goes where the chart's Role allows it: the release's namespace.
            ("POD_NAMESPACE", release.as_str()),
            ("ALIBABA_CLOUD_REGION_ID", "cn-hangzhou"),
            ("ALIBABA_CLOUD_SLB_ENDPOINT", &endpoint),
            ("ALIBABA_CLOUD_NLB_ENDPOINT", &endpoint),
            ("ALIBABA_CLOUD_ECS_ENDPOINT", &endpoint),
            ("ALIBABA_CLOUD_VPC_ENDPOINT", &endpoint),
            ("ROLLGATE_CLOUD_SCHEME", "http"),
            ("ALIBABA_CLOUD_ACCESS_KEY_ID", "emulator-access-key-id"),
            (
                "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
                "emulator-access-key-secret",
            ),
            // Never the instance metadata service (not loopback).
            ("ALIBABA_CLOUD_ECS_METADATA_DISABLED", "true"),
            ("ROLLGATE_CLOUD_VPC_ID", VPC_ID),
            ("ROLLGATE_CLUSTER_ID", "e2e-helm"),
        ],
    );
    let patch =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": V2}]}}}});
    ds_api
        .patch("edge", &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap();
    wait_ready_on(
        &pods,
        &nodes.names,
        V2,
        Others::None,
        Duration::from_secs(120),
    )
    .await;
    let user = format!("system:serviceaccount:{release}:{controller_account}");
    let deletes = pod_deletes(&ns.name, Some(&user));
    assert!(
        deletes.len() >= nodes.names.len(),
        "{} DELETEs by {user}; every old pod is the controller's to delete",
        deletes.len()
    );
    let lease: Api<Lease> = Api::namespaced(client.clone(), &release);
    let held = lease
        .get(&format!("rollgate-e2e-{}", ns.name))
        .await
        .expect("the Lease in the release's namespace");
    assert!(held
        .spec
        .and_then(|s| s.holder_identity)
        .is_some_and(|h| !h.is_empty()));
    note(format!(
        "rollout v1 -> v2 on {} nodes by the chart's ServiceAccount: {} pod DELETEs by {user}",
        nodes.names.len(),
        deletes.len()
    ));
    gated_rollout(&client, &ns.name, &nodes).await;
    controller.stop();
    enis.abort();
    emu.stop();
    ns.cleanup().await;
    nodes.cleanup().await;

    // helm upgrade: a changed value reaches the Deployment, and the agent's objects go
    // with agent.enabled=false ...
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &release);
    let upgrade = |extra: &'static [&'static str]| {
        let mut args: Vec<String> = [
            "upgrade",
            release.as_str(),
            chart.to_str().unwrap(),
            "--namespace",
            release.as_str(),
            "--reuse-values",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for set in extra {
            args.extend(["--set".to_string(), set.to_string()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        helm(&helm_bin, &args)
    };
    upgrade(&["controller.watchNamespace=edge-apps", "agent.enabled=false"]);
    let args = deployment_args(&deployments.get(&controller_account).await.unwrap());
    assert!(
        has_flag(&args, "--watch-namespace", "edge-apps"),
        "{args:?}"
    );
    let agent_objects: Vec<&Value> = installed
        .iter()
        .filter(|o| o["metadata"]["labels"]["app.kubernetes.io/name"] == "rollgate-agent")
        .collect();
    assert!(agent_objects.len() >= 6, "{}", agent_objects.len());
    let agent_selector =
        format!("app.kubernetes.io/name=rollgate-agent,{INSTANCE_LABEL}={release}");
    let agent_kinds: Vec<&str> = agent_objects
        .iter()
        .map(|o| resource_of(kind_of(o)))
        .collect();
    let agent_kinds = agent_kinds.join(",");
    let left = kubectl(&[
        "get",
        &agent_kinds,
        "--all-namespaces",
        "-l",
        &agent_selector,
        "-o",
        "name",
    ]);
    assert_eq!(left, "", "agent.enabled=false removes the agent's objects");
    // ... and come back with agent.enabled=true.
    upgrade(&["agent.enabled=true"]);
    let back = kubectl(&[
        "get",
        &agent_kinds,
        "--all-namespaces",
        "-l",
        &agent_selector,
        "-o",
        "name",
    ]);
    assert_eq!(back.lines().count(), agent_objects.len(), "{back}");
    let status: Value = serde_json::from_str(&helm(
        &helm_bin,
        &["status", &release, "-n", &release, "-o", "json"],
    ))
    .unwrap();
    assert_eq!(status["version"], 3, "install + two upgrades");
    note("helm upgrade: --watch-namespace applied; the agent's objects removed and restored");

    // helm uninstall: nothing of the release is left, of any kind it made.
    assert!(!release_leftovers(&release, &release).is_empty());
    helm(
        &helm_bin,
        &[
            "uninstall",
            &release,
            "-n",
            &release,
            "--wait",
            "--timeout",
            "120s",
        ],
    );
    let left = wait_for(
        "nothing of the release left after helm uninstall",
        Duration::from_secs(60),
        || async {
            let left = release_leftovers(&release, &release);
            if left.is_empty() {
                Ok(left)
            } else {
                Err(format!("left: {left:?}"))
            }
        },
    )
    .await;
    assert!(left.is_empty());
    for object in &installed {
        let mut get = vec!["get", resource_of(kind_of(object))];
        let name = object["metadata"]["name"].as_str().unwrap();
        get.push(name);
        if object["metadata"]["namespace"].is_string() {
            get.extend(["-n", &release]);
        }
        get.extend(["--ignore-not-found", "-o", "name"]);
        assert_eq!(kubectl(&get), "", "{} is left after uninstall", key(object));
    }
    note(format!(
        "helm uninstall: none of {} kinds left by label, none of the {} manifest objects by name",
        RELEASE_KINDS.len() + 1,
        installed.len()
    ));
    kubectl(&["delete", "namespace", &release, "--wait=false"]);
}
