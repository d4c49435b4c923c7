//! The install as kubectl and helm render it (tests/deploy.rs, tests/helm.rs): the objects,
//! the effective RBAC of a ServiceAccount, and tokens bound to a pod.
use super::*;

/// The objects `kubectl apply -k dir` would send, as built (`kubectl kustomize`: no
/// lookup of their kinds in the cluster, so the cert-manager layout's Certificates build
/// where cert-manager is not installed).
pub fn kustomize_build(dir: &std::path::Path) -> Vec<serde_json::Value> {
    let out = kubectl(&["kustomize", dir.to_str().unwrap()]);
    let documents: Vec<serde_json::Value> = serde_saphyr::from_multiple(&out)
        .unwrap_or_else(|e| panic!("kubectl kustomize {}: {e}\n{out}", dir.display()));
    documents.into_iter().filter(|d| !d.is_null()).collect()
}

pub fn kind_of(object: &serde_json::Value) -> &str {
    object["kind"].as_str().unwrap_or_default()
}

/// `kubectl auth can-i --list` of a ServiceAccount, one normalized rule a line, sorted:
/// columns joined by a single space, so whitespace changes of kubectl do not matter.
pub fn can_i_list(namespace: &str, service_account: &str) -> String {
    let out = kubectl(&[
        "auth",
        "can-i",
        "--list",
        "-n",
        namespace,
        &format!("--as=system:serviceaccount:{namespace}:{service_account}"),
    ]);
    let mut lines: Vec<String> = out
        .lines()
        .skip(1) // the header
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|l| !l.is_empty())
        .collect();
    lines.sort();
    lines.join("\n") + "\n"
}

/// A token of `namespace/service_account` bound to `pod` (see support::agent_token).
pub async fn bound_token(
    client: &Client,
    namespace: &str,
    service_account: &str,
    pod: &k8s_openapi::api::core::v1::Pod,
) -> String {
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::core::v1::ServiceAccount;
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let request = json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"audiences": [], "expirationSeconds": 3600, "boundObjectRef": {
            "kind": "Pod", "apiVersion": "v1",
            "name": pod.metadata.name, "uid": pod.metadata.uid
        }}
    });
    let response: TokenRequest = api
        .create_subresource("token", service_account, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("TokenRequest for {namespace}/{service_account}: {e}"));
    response.status.and_then(|s| s.token).expect("a token")
}
