//! The node-local REST API, compatible with OpenYurt's edge hub:
//!
//! | request | success |
//! |---|---|
//! | `GET /pods` | 200, a `v1` `PodList` of this node's pods from the agent's own state |
//! | `POST /openyurt.io/v1/namespaces/{ns}/pods/{podname}/imagepull` | 200 `Image pre-pull requested for pod {ns}/{podname}` |
//! | `POST /openyurt.io/v1/namespaces/{ns}/pods/{podname}/upgrade` | 200 `Start updating pod {ns}/{podname}` |
//!
//! `GET /pods` never calls the API server; it says how current its answer is with
//! `X-Rollgate-State-Age-Seconds` (0 while the watch is connected),
//! `X-Rollgate-State-Source` (`live` | `disk`) and `X-Rollgate-Api-Server`
//! (`connected` | `unreachable`).
//!
//! The two POSTs read the pod fresh from the API server (so an agent never acts on a
//! stale view), run the pure checks of `checks.rs`, then write with a UID precondition.
//! Every refusal is plain text naming the failed check. Statuses: 503 API server
//! unreachable, 404 pod not found (the reference says 500), 403 terminating / other node
//! / `PodNeedUpgrade` not True / pre-pull unfinished, 400 not a DaemonSet pod, 409 the
//! pod changed between check and write, 502 the API server failed otherwise; unknown
//! paths 404, wrong methods 405.

use std::time::SystemTime;

use axum::extract::{Path, State};
use axum::http::{header, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::Api;
use serde_json::json;

use super::checks::{
    self, Action, Approval, POD_IMAGE_READY_CONDITION, PULL_IMAGE_REQUESTED_REASON,
};
use super::error_chain;
use super::state::NodeState;
use crate::daemonset::ota_plan::need_upgrade_message;

pub const STATE_AGE_HEADER: &str = "x-rollgate-state-age-seconds";
pub const STATE_SOURCE_HEADER: &str = "x-rollgate-state-source";
pub const API_SERVER_HEADER: &str = "x-rollgate-api-server";

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    pub state: NodeState,
    /// A client with short timeouts, used for the fresh read and the write of a POST.
    pub client: kube::Client,
    /// Named in the 503 of `GET /pods`, so the operator knows where state would be.
    pub state_dir: String,
}

pub fn router(app: AppState) -> Router {
    Router::new()
        .route("/pods", get(list_pods))
        .route(
            "/openyurt.io/v1/namespaces/{ns}/pods/{name}/imagepull",
            post(image_pull),
        )
        .route(
            "/openyurt.io/v1/namespaces/{ns}/pods/{name}/upgrade",
            post(upgrade),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(app)
}

async fn list_pods(State(app): State<AppState>) -> Response {
    let Some(snapshot) = app.state.snapshot() else {
        let why = app
            .state
            .last_error()
            .unwrap_or_else(|| "still connecting".to_string());
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, HeaderValue::from_static("2"))],
            format!(
                "no pod state yet: this agent has not listed the pods of node {} from the API \
                 server since it started ({why}), and has no saved state in {}; retry shortly",
                app.state.node(),
                app.state_dir
            ),
        )
            .into_response();
    };
    let age = snapshot.age(SystemTime::now()).as_secs();
    let reachability = if snapshot.connected {
        "connected"
    } else {
        "unreachable"
    };
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (
                HeaderName::from_static(STATE_AGE_HEADER),
                HeaderValue::from(age),
            ),
            (
                HeaderName::from_static(STATE_SOURCE_HEADER),
                HeaderValue::from_static(snapshot.source.as_str()),
            ),
            (
                HeaderName::from_static(API_SERVER_HEADER),
                HeaderValue::from_static(reachability),
            ),
        ],
        snapshot.body,
    )
        .into_response()
}

async fn image_pull(
    State(app): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    act(&app, Action::ImagePull, &ns, &name).await
}

async fn upgrade(
    State(app): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    act(&app, Action::Upgrade, &ns, &name).await
}

/// Read fresh, check, write: the whole of a POST.
async fn act(app: &AppState, action: Action, ns: &str, name: &str) -> Response {
    let pods: Api<Pod> = Api::namespaced(app.client.clone(), ns);
    let pod = match pods.get_opt(name).await {
        Ok(pod) => pod,
        Err(e) => return api_failure(ns, name, "reading the pod", e),
    };
    let approval = match checks::check(action, ns, name, pod.as_ref(), app.state.node()) {
        Ok(approval) => approval,
        Err(refusal) => {
            tracing::info!(%ns, pod = %name, ?action, status = %refusal.status, "refused");
            return (refusal.status, refusal.message).into_response();
        }
    };
    let written = match action {
        Action::ImagePull => request_image_pull(&pods, name, &approval).await,
        Action::Upgrade => delete_pod(&pods, name, &approval).await,
    };
    match written {
        Ok(()) => {
            tracing::info!(%ns, pod = %name, ?action, revision = %approval.current_hash, "accepted");
            (StatusCode::OK, checks::success_message(action, ns, name)).into_response()
        }
        Err(e) => api_failure(
            ns,
            name,
            match action {
                Action::ImagePull => "writing the PodImageReady condition",
                Action::Upgrade => "deleting the pod",
            },
            e,
        ),
    }
}

/// `PodImageReady=False, controllerrevision: <hash>`: the controller's pull Job takes it
/// from there. Strategic merge on conditions (merge key `type`) leaves the kubelet's
/// conditions alone; `metadata.uid` makes the write fail if the pod was replaced.
async fn request_image_pull(
    pods: &Api<Pod>,
    name: &str,
    approval: &Approval,
) -> Result<(), kube::Error> {
    let patch = json!({
        "metadata": {"uid": approval.uid},
        "status": {"conditions": [{
            "type": POD_IMAGE_READY_CONDITION,
            "status": "False",
            "reason": PULL_IMAGE_REQUESTED_REASON,
            "message": need_upgrade_message(&approval.current_hash),
            "lastTransitionTime": Timestamp::now().to_string(),
        }]}
    });
    pods.patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .map(drop)
}

/// Deletes exactly the pod that was checked; the native DaemonSet controller creates its
/// replacement at the current revision. Does not wait for the pod to go.
async fn delete_pod(pods: &Api<Pod>, name: &str, approval: &Approval) -> Result<(), kube::Error> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(approval.uid.clone()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    pods.delete(name, &params).await.map(drop)
}

/// Maps a failed API call to the answer an operator can act on.
fn api_failure(ns: &str, name: &str, doing: &str, error: kube::Error) -> Response {
    let id = format!("{ns}/{name}");
    let (status, message) = match &error {
        kube::Error::Api(s) if s.code == 404 => (
            StatusCode::NOT_FOUND,
            format!("pod {id} not found (check: pod exists): it is gone"),
        ),
        kube::Error::Api(s) if s.code == 409 || s.code == 422 => (
            StatusCode::CONFLICT,
            format!(
                "pod {id} changed while {doing} (it was replaced or updated: {}); \
                 GET /pods and retry",
                s.message
            ),
        ),
        kube::Error::Api(s) if s.code == 403 => (
            StatusCode::FORBIDDEN,
            format!(
                "refused by the API server while {doing} for pod {id}: {}",
                s.message
            ),
        ),
        kube::Error::Api(s) => (
            StatusCode::BAD_GATEWAY,
            format!(
                "the API server failed while {doing} for pod {id}: {} {}: {}",
                s.code, s.reason, s.message
            ),
        ),
        // Connection refused, timeouts, TLS and transport errors: the node is cut off.
        other => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the API server cannot be reached ({}) while {doing} for pod {id}: the node \
                 may be cut off; GET /pods still answers from the last known state; retry when \
                 the connection is back",
                error_chain(other)
            ),
        ),
    };
    tracing::warn!(pod = %id, %status, error = %error, "{doing} failed");
    let mut response = (status, message).into_response();
    if status == StatusCode::SERVICE_UNAVAILABLE {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    }
    response
}

const ROUTES: &str = "GET /pods, POST /openyurt.io/v1/namespaces/{ns}/pods/{podname}/imagepull, \
     POST /openyurt.io/v1/namespaces/{ns}/pods/{podname}/upgrade";

async fn not_found(method: Method, uri: Uri) -> Response {
    (
        StatusCode::NOT_FOUND,
        format!(
            "no such endpoint: {method} {}; this agent serves {ROUTES}",
            uri.path()
        ),
    )
        .into_response()
}

async fn method_not_allowed(method: Method, uri: Uri) -> Response {
    let allowed = if uri.path() == "/pods" { "GET" } else { "POST" };
    (
        StatusCode::METHOD_NOT_ALLOWED,
        [(header::ALLOW, HeaderValue::from_static(allowed))],
        format!(
            "method {method} not allowed on {}: use {allowed}",
            uri.path()
        ),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::{to_bytes, Body};
    use axum::http::Request;
    use tower::ServiceExt;

    /// A client whose API server refuses connections (port 1 on loopback): every POST
    /// must end in 503 before any check.
    fn unreachable_client() -> kube::Client {
        let mut config = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
        config.connect_timeout = Some(std::time::Duration::from_secs(2));
        config.default_retry = false;
        kube::Client::try_from(config).unwrap()
    }

    fn app(state: NodeState) -> Router {
        router(AppState {
            state,
            client: unreachable_client(),
            state_dir: "/var/lib/rollgate-agent".into(),
        })
    }

    async fn call(
        router: Router,
        method: &str,
        path: &str,
    ) -> (StatusCode, Vec<(String, String)>, String) {
        let response = router
            .oneshot(
                Request::builder()
                    .method(method)
                    .uri(path)
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        let status = response.status();
        let headers = response
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or_default().to_string()))
            .collect();
        let body = to_bytes(response.into_body(), usize::MAX).await.unwrap();
        (status, headers, String::from_utf8(body.to_vec()).unwrap())
    }

    fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    #[tokio::test]
    async fn pods_is_503_with_a_reason_until_there_is_state() {
        let state = NodeState::new("edge-a");
        state.set_disconnected("connection refused".into());
        let (status, _, body) = call(app(state), "GET", "/pods").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("no pod state yet"), "{body}");
        assert!(body.contains("connection refused"), "{body}");
        assert!(body.contains("/var/lib/rollgate-agent"), "{body}");
    }

    #[tokio::test]
    async fn pods_serves_the_state_with_its_age_and_source() {
        let state = NodeState::new("edge-a");
        state.replace_all(vec![], Some("3".into()));
        let (status, headers, body) = call(app(state.clone()), "GET", "/pods").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(header(&headers, "content-type"), Some("application/json"));
        assert_eq!(header(&headers, STATE_AGE_HEADER), Some("0"));
        assert_eq!(header(&headers, STATE_SOURCE_HEADER), Some("live"));
        assert_eq!(header(&headers, API_SERVER_HEADER), Some("connected"));
        let list: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(list["kind"], "PodList");

        state.set_disconnected("gone".into());
        let (status, headers, _) = call(app(state), "GET", "/pods").await;
        assert_eq!(status, StatusCode::OK, "still answers while cut off");
        assert_eq!(header(&headers, API_SERVER_HEADER), Some("unreachable"));
    }

    #[tokio::test]
    async fn posts_answer_503_when_the_api_server_cannot_be_reached() {
        for action in ["imagepull", "upgrade"] {
            let path = format!("/openyurt.io/v1/namespaces/default/pods/p/{action}");
            let (status, headers, body) = call(app(NodeState::new("edge-a")), "POST", &path).await;
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{action}: {body}");
            assert!(body.contains("API server cannot be reached"), "{body}");
            // The cause is spelled out, not just "client error (Connect)".
            assert!(body.contains("Connection refused"), "{body}");
            assert_eq!(header(&headers, "retry-after"), Some("5"));
        }
    }

    #[tokio::test]
    async fn unknown_paths_are_404_and_wrong_methods_405_with_plain_text() {
        let (status, _, body) = call(app(NodeState::new("n")), "GET", "/nope").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(body.contains("GET /pods"), "{body}");

        let (status, headers, body) = call(app(NodeState::new("n")), "POST", "/pods").await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(header(&headers, "allow"), Some("GET"));
        assert!(body.contains("use GET"), "{body}");

        let (status, headers, _) = call(
            app(NodeState::new("n")),
            "GET",
            "/openyurt.io/v1/namespaces/default/pods/p/upgrade",
        )
        .await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(header(&headers, "allow"), Some("POST"));
    }
}
