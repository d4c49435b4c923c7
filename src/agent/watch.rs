//! List and watch the pods bound to this node (field selector `spec.nodeName`).
//!
//! A hand-written list/watch loop instead of `kube_runtime::watcher`: the agent must know
//! exactly when it is connected (a watch request was answered) and when it is not (a
//! request failed, or the stream went silent), because `GET /pods` reports how old its
//! state is. The runtime watcher hides both.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::Api;

use super::error_chain;
use super::state::NodeState;

/// Server-side watch timeout: the watch is renewed this often, which also bounds how long
/// a silently dropped connection (no RST) goes unnoticed.
const WATCH_TIMEOUT_SECS: u32 = 60;
/// No byte for this long on an open watch means the connection is dead.
const IDLE_TIMEOUT: Duration = Duration::from_secs(WATCH_TIMEOUT_SECS as u64 + 15);
const BACKOFF_MIN: Duration = Duration::from_millis(500);
/// Short cap: a node that comes back should serve current state within seconds.
const BACKOFF_MAX: Duration = Duration::from_secs(4);

/// Runs forever (the caller aborts it on shutdown).
pub async fn run(api: Api<Pod>, state: NodeState) {
    let selector = format!("spec.nodeName={}", state.node());
    let mut backoff = Backoff::default();
    'relist: loop {
        let list = match api.list(&ListParams::default().fields(&selector)).await {
            Ok(list) => list,
            Err(e) => {
                lost(&state, format!("listing pods: {}", error_chain(&e)));
                backoff.wait().await;
                continue;
            }
        };
        backoff.reset();
        let mut version = list.metadata.resource_version.clone().unwrap_or_default();
        tracing::info!(pods = list.items.len(), resource_version = %version, "pods of this node listed");
        state.replace_all(list.items, list.metadata.resource_version);

        loop {
            let params = WatchParams::default()
                .fields(&selector)
                .timeout(WATCH_TIMEOUT_SECS);
            let stream = match api.watch(&params, &version).await {
                Ok(stream) => stream,
                Err(kube::Error::Api(status)) if status.code == 410 => continue 'relist,
                Err(e) => {
                    lost(&state, format!("watching pods: {}", error_chain(&e)));
                    backoff.wait().await;
                    continue;
                }
            };
            backoff.reset();
            state.set_connected();
            let mut stream = std::pin::pin!(stream);
            loop {
                let event = match tokio::time::timeout(IDLE_TIMEOUT, stream.next()).await {
                    Err(_) => {
                        lost(
                            &state,
                            format!("no data on the pod watch for {IDLE_TIMEOUT:?}"),
                        );
                        break;
                    }
                    // The server ended the watch (its timeout): renew it.
                    Ok(None) => break,
                    Ok(Some(Err(e))) => {
                        lost(
                            &state,
                            format!("pod watch interrupted: {}", error_chain(&e)),
                        );
                        break;
                    }
                    Ok(Some(Ok(event))) => event,
                };
                match event {
                    WatchEvent::Added(pod) | WatchEvent::Modified(pod) => {
                        version = pod.metadata.resource_version.clone().unwrap_or(version);
                        state.apply(pod);
                    }
                    WatchEvent::Deleted(pod) => {
                        version = pod.metadata.resource_version.clone().unwrap_or(version);
                        state.delete(&pod);
                    }
                    WatchEvent::Bookmark(bookmark) => {
                        version = bookmark.metadata.resource_version;
                    }
                    WatchEvent::Error(status) if status.code == 410 => continue 'relist,
                    WatchEvent::Error(status) => {
                        tracing::warn!(code = status.code, message = %status.message, "pod watch error");
                        backoff.wait().await;
                        continue 'relist;
                    }
                }
            }
        }
    }
}

fn lost(state: &NodeState, reason: String) {
    if state.last_error().is_none() {
        tracing::warn!(%reason, "lost the API server; serving the last known pods");
    } else {
        tracing::debug!(%reason, "API server still unreachable");
    }
    state.set_disconnected(reason);
}

/// Exponential backoff between failed list/watch attempts.
struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { next: BACKOFF_MIN }
    }
}

impl Backoff {
    async fn wait(&mut self) {
        tokio::time::sleep(self.next).await;
        self.next = (self.next * 2).min(BACKOFF_MAX);
    }

    fn reset(&mut self) {
        self.next = BACKOFF_MIN;
    }
}
