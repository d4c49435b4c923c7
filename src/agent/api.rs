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
//! (`connected` | `unreachable`). It is gzip-compressed for clients that accept it.
//!
//! The two POSTs first validate the namespace and pod name of the path (`target.rs`,
//! 400), then read the pod fresh from the API server (so an agent never acts on a stale
//! view), run the pure checks of `checks.rs`, then write with a UID precondition.
//! Every refusal is plain text naming the failed check. Statuses: 400 invalid path
//! segment, 503 API server unreachable, 404 pod not found (the reference says 500), 403
//! on another node / terminating / `PodNeedUpgrade` not True / pre-pull unfinished or
//! failed, 400 not a DaemonSet pod, 409 the pod changed between check and
//! write, 502 the API server failed otherwise; unknown paths 404, wrong methods 405.

use std::time::SystemTime;

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use serde_json::json;

use super::checks::{self, Action, Approval};
use super::error_chain::error_chain;
use super::state::NodeState;
use super::target;
use crate::apply::Writer;

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

async fn list_pods(State(app): State<AppState>, request_headers: HeaderMap) -> Response {
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
    let gzip = request_headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(accepts_gzip);
    let (encoding, body) = if gzip {
        (Some("gzip"), snapshot.body.gzip())
    } else {
        (None, snapshot.body.json)
    };
    let mut response = (
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
            // The answer depends on Accept-Encoding: caches must keep both forms apart.
            (header::VARY, HeaderValue::from_static("accept-encoding")),
        ],
        body,
    )
        .into_response();
    if let Some(encoding) = encoding {
        response
            .headers_mut()
            .insert(header::CONTENT_ENCODING, HeaderValue::from_static(encoding));
    }
    response
}

/// Whether an `Accept-Encoding` value accepts gzip: a `gzip` (or `x-gzip`, or `*`)
/// entry whose q-value is not zero. An explicit `gzip;q=0` wins over `*`.
pub fn accepts_gzip(accept_encoding: &str) -> bool {
    let mut star = false;
    for entry in accept_encoding.split(',') {
        let mut parts = entry.split(';');
        let coding = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
        let q_zero = parts.any(|param| {
            let param = param.trim().to_ascii_lowercase();
            param
                .strip_prefix("q=")
                .and_then(|q| q.trim().parse::<f32>().ok())
                .is_some_and(|q| q <= 0.0)
        });
        match coding.as_str() {
            "gzip" | "x-gzip" => return !q_zero,
            "*" => star = !q_zero,
            _ => {}
        }
    }
    star
}

async fn image_pull(State(app): State<AppState>, uri: Uri) -> Response {
    act(&app, Action::ImagePull, &uri).await
}

async fn upgrade(State(app): State<AppState>, uri: Uri) -> Response {
    act(&app, Action::Upgrade, &uri).await
}

/// The `{ns}` and `{podname}` segments of a matched POST path, still percent-encoded.
/// Taken from the URI rather than axum's `Path`, which rejects a segment that is not
/// UTF-8 once decoded with an answer of its own; `target::parse` answers every case.
fn raw_target(uri: &Uri) -> (&str, &str) {
    // "", "openyurt.io", "v1", "namespaces", ns, "pods", name, action
    let mut segments = uri.path().split('/').skip(4);
    let ns = segments.next().unwrap_or_default();
    let name = segments.nth(1).unwrap_or_default();
    (ns, name)
}

/// Validate, read fresh, check, write: the whole of a POST.
async fn act(app: &AppState, action: Action, uri: &Uri) -> Response {
    let (raw_ns, raw_name) = raw_target(uri);
    let target = match target::parse(action, raw_ns, raw_name) {
        Ok(target) => target,
        Err(refusal) => {
            tracing::info!(path = %uri.path(), ?action, "refused: invalid path");
            return (refusal.status, refusal.message).into_response();
        }
    };
    let (ns, name) = (target.namespace.as_str(), target.name.as_str());
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
    let writer = Writer::new(app.client.clone());
    let written = match action {
        Action::ImagePull => request_image_pull(&writer, ns, name, &approval).await,
        Action::Upgrade => delete_pod(&writer, ns, name, &approval).await,
    };
    match written {
        Ok(()) => {
            tracing::info!(%ns, pod = %name, ?action, revision = %approval.current_hash, "accepted");
            // yurthub sends these plain-text bodies with JSON's content type
            // (`WriteJSONResponse`); scripts written for it may check the header.
            (
                StatusCode::OK,
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )],
                checks::success_message(action, ns, name),
            )
                .into_response()
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

/// `PodImageReady=False, PullImageRequested, controllerrevision: <hash>`, a new request
/// each time (also after a failed pull): the controller's pull Job takes it from there.
/// Strategic merge on conditions (merge key `type`) leaves the kubelet's conditions
/// alone; `metadata.uid` makes the write fail if the pod was replaced. Written under
/// rollgate's one field manager, as the controllers write; the API's answer is kept
/// as it is, since each error has its own HTTP answer here.
async fn request_image_pull(
    writer: &Writer,
    ns: &str,
    name: &str,
    approval: &Approval,
) -> Result<(), kube::Error> {
    let patch = json!({
        "metadata": {"uid": approval.uid},
        "status": {"conditions": [checks::pull_request_condition(approval, Timestamp::now())]}
    });
    writer.patch_pod_status(ns, name, &patch).await
}

/// Deletes exactly the pod that was checked; the native DaemonSet controller creates its
/// replacement at the current revision. Does not wait for the pod to go.
async fn delete_pod(
    writer: &Writer,
    ns: &str,
    name: &str,
    approval: &Approval,
) -> Result<(), kube::Error> {
    writer
        .delete_exact::<Pod>(ns, name, Some(&approval.uid), None)
        .await
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
        // The API server answered something that is not a Kubernetes response.
        kube::Error::SerdeError(_) | kube::Error::FromUtf8(_) => (
            StatusCode::BAD_GATEWAY,
            format!(
                "the API server's answer while {doing} for pod {id} could not be read: {}",
                error_chain(&error)
            ),
        ),
        // The request could not even be built: our bug, not the network's (the path
        // was validated, so this should not happen).
        kube::Error::BuildRequest(_) | kube::Error::HttpError(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!(
                "internal error while {doing} for pod {id}: {}",
                error_chain(&error)
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

    /// The agent's two writes go as rollgate's one field manager writes: the pull
    /// request under `fieldManager=rollgate` with the pod's UID, the upgrade as a
    /// deletion of exactly the pod checked.
    #[tokio::test]
    async fn the_agent_writes_as_rollgate_and_names_exactly_the_pod_checked() {
        use crate::apply::fake_api::fake_client;
        let (client, seen) = fake_client(|_, _| (200, json!({})));
        let writer = Writer::new(client);
        let approval = Approval {
            uid: "uid-1".into(),
            current_hash: "new".into(),
            image_ready_since: None,
        };
        request_image_pull(&writer, "edge", "agent-x", &approval)
            .await
            .unwrap();
        delete_pod(&writer, "edge", "agent-x", &approval)
            .await
            .unwrap();
        let calls = seen.calls();
        assert_eq!(
            calls[0].line(),
            "PATCH /api/v1/namespaces/edge/pods/agent-x/status"
        );
        assert_eq!(calls[0].field_manager(), Some("rollgate"));
        assert_eq!(calls[0].body["metadata"]["uid"], "uid-1");
        assert_eq!(
            calls[0].body["status"]["conditions"][0]["reason"],
            "PullImageRequested"
        );
        assert_eq!(
            calls[1].line(),
            "DELETE /api/v1/namespaces/edge/pods/agent-x"
        );
        assert_eq!(calls[1].body["preconditions"]["uid"], "uid-1");
    }

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
        state.replace_all(vec![]);
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

    #[tokio::test]
    async fn pods_is_gzipped_for_clients_that_accept_it() {
        use std::io::Read;
        let state = NodeState::new("edge-a");
        state.replace_all(vec![]);
        let request = |encoding: Option<&str>| {
            let mut builder = Request::builder().method("GET").uri("/pods");
            if let Some(encoding) = encoding {
                builder = builder.header("accept-encoding", encoding);
            }
            builder.body(Body::empty()).unwrap()
        };
        let plain = app(state.clone()).oneshot(request(None)).await.unwrap();
        assert_eq!(plain.headers().get("content-encoding"), None);
        assert_eq!(plain.headers()["vary"], "accept-encoding");
        let plain = to_bytes(plain.into_body(), usize::MAX).await.unwrap();

        let zipped = app(state.clone())
            .oneshot(request(Some("br, gzip;q=0.8")))
            .await
            .unwrap();
        assert_eq!(zipped.status(), StatusCode::OK);
        assert_eq!(zipped.headers()["content-encoding"], "gzip");
        assert_eq!(zipped.headers()[STATE_SOURCE_HEADER], "live");
        let zipped = to_bytes(zipped.into_body(), usize::MAX).await.unwrap();
        let mut unzipped = Vec::new();
        flate2::read::GzDecoder::new(&zipped[..])
            .read_to_end(&mut unzipped)
            .unwrap();
        assert_eq!(unzipped, plain);

        let refused = app(state).oneshot(request(Some("gzip;q=0"))).await.unwrap();
        assert_eq!(refused.headers().get("content-encoding"), None);
    }

    #[test]
    fn accept_encoding_is_read_with_its_q_values() {
        for (header, gzip) in [
            ("gzip", true),
            ("GZIP", true),
            ("deflate, gzip", true),
            ("gzip;q=0.5", true),
            ("x-gzip", true),
            ("*", true),
            ("br;q=1, *;q=0.1", true),
            ("", false),
            ("identity", false),
            ("br, deflate", false),
            ("gzip;q=0", false),
            ("gzip; q=0.0", false),
            ("*, gzip;q=0", false),
            ("*;q=0", false),
            ("gzipx", false),
        ] {
            assert_eq!(accepts_gzip(header), gzip, "{header:?}");
        }
    }

    /// With an API server that refuses connections, a POST that reached it would be
    /// 503: these 400s prove the malformed names never left the agent.
    #[tokio::test]
    async fn malformed_names_are_400_and_never_reach_the_api_server() {
        let base = "/openyurt.io/v1/namespaces";
        let cases = [
            (format!("{base}/../pods/p/upgrade"), "invalid namespace"),
            (format!("{base}/%2e%2e/pods/p/upgrade"), "invalid namespace"),
            (
                format!("{base}/default/pods/%2E%2E/upgrade"),
                "invalid pod name",
            ),
            (
                format!("{base}/default/pods/../imagepull"),
                "invalid pod name",
            ),
            (
                format!("{base}/default/pods/.%2Fx/imagepull"),
                "invalid pod name",
            ),
            (
                format!("{base}/kube%2Fsystem/pods/p/upgrade"),
                "invalid namespace",
            ),
            (
                format!("{base}/default/pods/p%00/upgrade"),
                "control character",
            ),
            (
                format!("{base}/default/pods/p%0d%0a/upgrade"),
                "control character",
            ),
            (format!("{base}/default/pods/%ff/upgrade"), "not UTF-8"),
            (format!("{base}/Default/pods/p/upgrade"), "uppercase"),
            (
                format!("{base}/default/pods/{}/upgrade", "a".repeat(254)),
                "more than 253",
            ),
        ];
        for (path, says) in cases {
            let (status, _, body) = call(app(NodeState::new("edge-a")), "POST", &path).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
            assert!(body.contains(says), "{path}: {body}");
            assert!(body.contains("the accepted form is POST"), "{path}: {body}");
        }
    }

    mod fuzz {
        use super::*;
        use crate::agent::target::{namespace_problem, pod_name_problem};
        use proptest::prelude::*;
        use std::sync::{Arc, Mutex};

        /// A pod as the fake API server returns it: on `node`, out of date, pull not
        /// requested, owned by a DaemonSet.
        fn pod_json(ns: &str, name: &str, node: &str) -> serde_json::Value {
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {
                    "namespace": ns, "name": name, "uid": "uid-1", "resourceVersion": "1",
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                        "name": "ds", "uid": "ds-uid", "controller": true}]
                },
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
                "status": {"conditions": [{"type": "PodNeedUpgrade", "status": "True",
                    "message": "controllerrevision: new"}]}
            })
        }

        fn status_json(code: u16, reason: &str, message: &str) -> serde_json::Value {
            json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
                "code": code, "reason": reason, "message": message})
        }

        /// A fake API server for pods: names starting with `on-` are pods of edge-a,
        /// `off-` of edge-b, everything else is missing. A request naming an invalid
        /// namespace or pod is recorded as a violation and answered 500.
        fn fake_api_server() -> (kube::Client, Arc<Mutex<Vec<String>>>) {
            let violations = Arc::new(Mutex::new(Vec::new()));
            let seen = violations.clone();
            let service = tower::service_fn(move |request: Request<kube::client::Body>| {
                let seen = seen.clone();
                async move {
                    let path = request.uri().path().to_string();
                    let parts: Vec<&str> = path.split('/').collect();
                    let (status, body) = match parts.as_slice() {
                        ["", "api", "v1", "namespaces", ns, "pods", name, rest @ ..]
                            if namespace_problem(ns).is_none()
                                && pod_name_problem(name).is_none()
                                && (rest.is_empty() || rest == ["status"]) =>
                        {
                            let node = if name.starts_with("on-") {
                                Some("edge-a")
                            } else if name.starts_with("off-") {
                                Some("edge-b")
                            } else {
                                None
                            };
                            match node {
                                Some(node) => (200, pod_json(ns, name, node)),
                                None => (
                                    404,
                                    status_json(
                                        404,
                                        "NotFound",
                                        &format!("pods \"{name}\" not found"),
                                    ),
                                ),
                            }
                        }
                        _ => {
                            seen.lock().unwrap().push(format!(
                                "{} {}",
                                request.method(),
                                request.uri()
                            ));
                            (500, status_json(500, "InternalError", "invalid request"))
                        }
                    };
                    let response = axum::http::Response::builder()
                        .status(status)
                        .header("content-type", "application/json")
                        .body(kube::client::Body::from(serde_json::to_vec(&body).unwrap()))
                        .unwrap();
                    Ok::<_, std::convert::Infallible>(response)
                }
            });
            (kube::Client::new(service, "default"), violations)
        }

        /// Raw text of a path segment: plausible names, any character percent-encoded,
        /// dot segments and encodings of `..` and `/`, malformed escapes, lengths around
        /// the limits.
        fn segment() -> impl Strategy<Value = String> {
            let encoded_char = any::<char>().prop_map(|c| {
                let mut utf8 = [0u8; 4];
                c.encode_utf8(&mut utf8)
                    .bytes()
                    .map(|b| format!("%{b:02X}"))
                    .collect::<String>()
            });
            let piece = prop_oneof![
                4 => "[a-z0-9.-]{1,8}",
                2 => encoded_char,
                2 => prop::sample::select(vec![
                    ".", "..", "%2e", "%2E%2e", "%2F", "%2f", "%00", "%0a", "%7F", "%ff", "%C3",
                    "%", "%zz", "%2", "on-", "off-", "A", "_", "~", ":", "@", "!", "$", "&", "'",
                    "(", "*", "+", ",", ";", "=", "?", "/",
                ])
                .prop_map(str::to_string),
                1 => "[a-z]{60,70}",
                1 => "[a-z.]{250,256}",
            ];
            prop::collection::vec(piece, 0..5).prop_map(|pieces| pieces.concat())
        }

        fn request_line() -> impl Strategy<Value = (String, String)> {
            let method = prop::sample::select(vec![
                "GET", "POST", "POST", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS",
            ]);
            let action = prop_oneof![
                3 => prop::sample::select(vec!["imagepull", "upgrade"]).prop_map(str::to_string),
                1 => segment(),
            ];
            let path = prop_oneof![
                6 => (segment(), segment(), action).prop_map(|(ns, name, action)| {
                    format!("/openyurt.io/v1/namespaces/{ns}/pods/{name}/{action}")
                }),
                1 => segment().prop_map(|s| format!("/pods{s}")),
                1 => prop::collection::vec(segment(), 0..6).prop_map(|s| format!("/{}", s.join("/"))),
            ];
            (method.prop_map(str::to_string), path)
        }

        /// While the API server is up, nothing a client sends makes the agent answer
        /// 5xx, and no invalid name reaches the API server.
        #[test]
        fn no_request_gets_a_5xx_while_the_api_server_is_up() {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let _inside = runtime.enter();
            let (client, violations) = fake_api_server();
            let state = NodeState::new("edge-a");
            state.replace_all(vec![]);
            let router = router(AppState {
                state,
                client,
                state_dir: "/var/lib/rollgate-agent".into(),
            });
            let config = ProptestConfig {
                cases: 2_000,
                failure_persistence: None,
                ..ProptestConfig::default()
            };
            proptest!(config, |((method, path) in request_line())| {
                let Ok(uri) = path.parse::<Uri>() else {
                    // Not a request line hyper would hand to the router at all.
                    return Ok(());
                };
                let request = Request::builder()
                    .method(method.as_str())
                    .uri(uri)
                    .body(Body::empty())
                    .unwrap();
                let (status, body) = runtime.block_on(async {
                    let response = router.clone().oneshot(request).await.unwrap();
                    let status = response.status();
                    let body = to_bytes(response.into_body(), usize::MAX).await.unwrap();
                    (status, String::from_utf8_lossy(&body).into_owned())
                });
                prop_assert!(!status.is_server_error(), "{method} {path} -> {status} {body}");
                if status == StatusCode::BAD_REQUEST {
                    prop_assert!(
                        body.starts_with("invalid namespace in the path")
                            || body.starts_with("invalid pod name in the path"),
                        "{method} {path} -> {body}"
                    );
                }
                let violations = violations.lock().unwrap();
                prop_assert!(violations.is_empty(), "reached the API server: {violations:?}");
            });
        }

        /// The fake answers as designed: the fuzz test above can reach every outcome.
        #[tokio::test]
        async fn the_fake_api_server_reaches_every_outcome() {
            let (client, violations) = fake_api_server();
            let state = NodeState::new("edge-a");
            let app = router(AppState {
                state,
                client,
                state_dir: String::new(),
            });
            let base = "/openyurt.io/v1/namespaces/default/pods";
            let (status, headers, body) =
                call(app.clone(), "POST", &format!("{base}/on-1/imagepull")).await;
            assert_eq!(
                (status, body.as_str()),
                (
                    StatusCode::OK,
                    "Image pre-pull requested for pod default/on-1"
                )
            );
            // yurthub's content type for the same body.
            assert_eq!(header(&headers, "content-type"), Some("application/json"));
            let (status, headers, body) =
                call(app.clone(), "POST", &format!("{base}/on-1/upgrade")).await;
            assert_eq!(
                (status, body.as_str()),
                (StatusCode::OK, "Start updating pod default/on-1")
            );
            assert_eq!(header(&headers, "content-type"), Some("application/json"));
            let (missing_status, _, missing) =
                call(app.clone(), "POST", &format!("{base}/gone/upgrade")).await;
            assert_eq!(missing_status, StatusCode::NOT_FOUND);
            assert!(missing.contains("(check: pod exists)"), "{missing}");
            // Another node's pod: the spec's 403, naming the check.
            let (status, _, other) =
                call(app.clone(), "POST", &format!("{base}/off-1/upgrade")).await;
            assert_eq!(status, StatusCode::FORBIDDEN);
            assert!(other.contains("(check: pod on this node)"), "{other}");
            let (status, _, _) = call(app, "POST", &format!("{base}/%2e%2e/upgrade")).await;
            assert_eq!(status, StatusCode::BAD_REQUEST);
            assert!(violations.lock().unwrap().is_empty());
        }
    }
}
