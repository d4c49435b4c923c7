//! Keeps `NodeState` current: `kube::runtime::watcher` on the pods bound to this node
//! (field selector `spec.nodeName`).
//!
//! - Lists are served from the API server's watch cache (`any_semantic`): after an API
//!   outage thousands of agents re-list at once, and quorum reads would all reach etcd.
//! - Failures back off with the watcher's jittered default backoff, so those agents
//!   also spread their retries.
//!
//! `GET /pods` says whether its answer is current, so the agent must know when it is
//! connected. The watcher reports failures (a list or watch that failed: disconnected)
//! and complete lists, but re-opens a watch silently; `WatchAnswered`, a layer on the
//! watch client, reports every watch request the API server answered (connected again).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::http;
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Api;

use super::error_chain::error_chain;
use super::state::NodeState;

/// Server-side watch timeout: the watch is renewed this often; the watcher also treats a
/// watch silent for this long (plus a margin) as dead.
const WATCH_TIMEOUT_SECS: u32 = 60;

/// The watcher's configuration: this node's pods, lists from the watch cache.
pub fn config(node: &str) -> watcher::Config {
    watcher::Config::default()
        .fields(&format!("spec.nodeName={node}"))
        .any_semantic()
        .timeout(WATCH_TIMEOUT_SECS)
}

/// Runs until the stream ends (never, in practice; the caller aborts it on shutdown).
pub async fn run(api: Api<Pod>, state: NodeState) {
    let events = watcher::watcher(api, config(state.node())).default_backoff();
    let mut events = std::pin::pin!(events);
    let mut listing: Vec<Pod> = Vec::new();
    loop {
        match events.try_next().await {
            Ok(Some(event)) => apply(&state, &mut listing, event),
            Ok(None) => return,
            Err(error) => failed(&state, &error),
        }
    }
}

/// One watcher event into the state. A list is buffered until complete, then replaces
/// everything at once (a partial list must never be served).
pub fn apply(state: &NodeState, listing: &mut Vec<Pod>, event: Event<Pod>) {
    match event {
        Event::Init => listing.clear(),
        Event::InitApply(pod) => listing.push(pod),
        Event::InitDone => {
            let pods = std::mem::take(listing);
            tracing::info!(pods = pods.len(), "pods of this node listed");
            state.replace_all(pods);
        }
        Event::Apply(pod) => state.apply(pod),
        Event::Delete(pod) => state.delete(&pod),
    }
}

/// Whether a watcher error means the API server is out of reach (as the old list/watch
/// loop decided: a list, or the start of a watch, or an open watch failed). An error
/// the API server sent inside a watch (410 Gone: the watcher re-lists) proves it
/// reachable.
pub fn means_unreachable(error: &watcher::Error) -> bool {
    !matches!(
        error,
        watcher::Error::WatchError(_) | watcher::Error::NoResourceVersion
    )
}

fn failed(state: &NodeState, error: &watcher::Error) {
    if !means_unreachable(error) {
        tracing::debug!(error = %error, "pod watch restarted");
        return;
    }
    let reason = error_chain(error);
    if state.last_error().is_none() {
        tracing::warn!(%reason, "lost the API server; serving the last known pods");
    } else {
        tracing::debug!(%reason, "API server still unreachable");
    }
    state.set_disconnected(reason);
}

/// A client layer that marks the state connected whenever the API server answers a
/// watch request (`watch=true`) with success: the watch is open, so the state is
/// current again. Answers to lists are not enough: the list's events decide.
#[derive(Clone)]
pub struct WatchAnswered {
    state: NodeState,
}

impl WatchAnswered {
    pub fn new(state: NodeState) -> Self {
        WatchAnswered { state }
    }
}

impl<S> tower::Layer<S> for WatchAnswered {
    type Service = WatchAnsweredService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        WatchAnsweredService {
            inner,
            state: self.state.clone(),
        }
    }
}

pub struct WatchAnsweredService<S> {
    inner: S,
    state: NodeState,
}

/// Whether a request URI is a watch.
pub fn is_watch(uri: &http::Uri) -> bool {
    uri.query()
        .is_some_and(|q| q.split('&').any(|pair| pair == "watch=true"))
}

impl<S, ReqBody, ResBody> tower::Service<http::Request<ReqBody>> for WatchAnsweredService<S>
where
    S: tower::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        let watch = is_watch(request.uri());
        let state = self.state.clone();
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            if watch && response.status().is_success() {
                state.set_connected();
            }
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube::core::Status;

    fn pod(name: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some("a".into()),
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn names(state: &NodeState) -> Vec<String> {
        let list: serde_json::Value =
            serde_json::from_slice(&state.snapshot().unwrap().body.json).unwrap();
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn lists_from_the_watch_cache_and_only_this_nodes_pods() {
        let config = config("edge-a");
        assert_eq!(
            config.field_selector.as_deref(),
            Some("spec.nodeName=edge-a")
        );
        // Any = resourceVersion "0": served by the watch cache, not a quorum read of etcd.
        assert_eq!(config.list_semantic, watcher::ListSemantic::Any);
        assert_eq!(config.timeout, Some(WATCH_TIMEOUT_SECS));
    }

    #[test]
    fn a_list_is_served_only_once_complete() {
        let state = NodeState::new("edge-a");
        let mut listing = Vec::new();
        apply(&state, &mut listing, Event::Init);
        apply(&state, &mut listing, Event::InitApply(pod("x")));
        assert!(state.snapshot().is_none(), "half a list is not served");
        apply(&state, &mut listing, Event::InitApply(pod("y")));
        apply(&state, &mut listing, Event::InitDone);
        assert_eq!(names(&state), ["x", "y"]);
        assert!(state.snapshot().unwrap().connected);

        apply(&state, &mut listing, Event::Apply(pod("z")));
        apply(&state, &mut listing, Event::Delete(pod("x")));
        assert_eq!(names(&state), ["y", "z"]);

        // A relist replaces everything: pods deleted meanwhile disappear; the old state
        // is served until the new list is complete.
        apply(&state, &mut listing, Event::Init);
        apply(&state, &mut listing, Event::InitApply(pod("z")));
        assert_eq!(names(&state), ["y", "z"]);
        apply(&state, &mut listing, Event::InitDone);
        assert_eq!(names(&state), ["z"]);
    }

    #[test]
    fn failures_to_reach_the_api_server_disconnect_and_a_410_does_not() {
        let gone = Status::failure("too old resource version", "Expired").with_code(410);
        assert!(!means_unreachable(&watcher::Error::WatchError(Box::new(
            gone
        ))));
        assert!(!means_unreachable(&watcher::Error::NoResourceVersion));
        let refused = kube::Error::Service("connection refused".into());
        assert!(means_unreachable(&watcher::Error::InitialListFailed(
            refused
        )));

        let state = NodeState::new("edge-a");
        state.replace_all(vec![pod("x")]);
        let gone = Status::failure("too old resource version", "Expired").with_code(410);
        failed(&state, &watcher::Error::WatchError(Box::new(gone)));
        assert!(state.snapshot().unwrap().connected);
        failed(
            &state,
            &watcher::Error::WatchStartFailed(kube::Error::Service("connection refused".into())),
        );
        let snapshot = state.snapshot().unwrap();
        assert!(!snapshot.connected);
        assert!(
            snapshot.last_error.unwrap().contains("connection refused"),
            "the reason is kept for the 503s"
        );
    }

    #[test]
    fn only_watch_requests_count() {
        assert!(is_watch(
            &"/api/v1/pods?fieldSelector=spec.nodeName%3Dn&watch=true&timeoutSeconds=60"
                .parse()
                .unwrap()
        ));
        assert!(!is_watch(
            &"/api/v1/pods?fieldSelector=spec.nodeName%3Dn&resourceVersion=0"
                .parse()
                .unwrap()
        ));
        assert!(!is_watch(&"/api/v1/pods?watch=truer".parse().unwrap()));
    }

    /// The layer on a fake API server: a successful watch answer reconnects the state,
    /// a list answer or a failed watch does not.
    #[tokio::test]
    async fn an_answered_watch_marks_the_state_connected() {
        use tower::{Layer, Service, ServiceExt};
        let state = NodeState::new("edge-a");
        state.replace_all(vec![pod("x")]);
        let fake = tower::service_fn(|request: http::Request<()>| async move {
            let status = if request.uri().path().contains("forbidden") {
                403
            } else {
                200
            };
            Ok::<_, std::convert::Infallible>(
                http::Response::builder().status(status).body(()).unwrap(),
            )
        });
        let mut service = WatchAnswered::new(state.clone()).layer(fake);
        let mut send = async |uri: &str| {
            let request = http::Request::get(uri).body(()).unwrap();
            service.ready().await.unwrap().call(request).await.unwrap();
        };
        state.set_disconnected("cut".into());
        send("/api/v1/pods?resourceVersion=0").await;
        assert!(!state.snapshot().unwrap().connected, "a list answer");
        send("/api/v1/forbidden?watch=true").await;
        assert!(!state.snapshot().unwrap().connected, "a refused watch");
        send("/api/v1/pods?watch=true&resourceVersion=5").await;
        assert!(state.snapshot().unwrap().connected, "an open watch");
    }
}
