//! A fake API server for tests of the apply path (tests only): a tower service behind a
//! real `kube::Client`, answering each call as the test says, recording every call
//! (method, path, query, body) and the most calls it had in flight at once.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{Request, Response};
use kube::client::Body;
use kube::Client;
use serde_json::{json, Value};

/// One call the fake API server got.
#[derive(Clone, Debug)]
pub struct Call {
    pub method: String,
    pub path: String,
    pub query: String,
    pub content_type: String,
    pub body: Value,
}

impl Call {
    /// `METHOD /path`.
    pub fn line(&self) -> String {
        format!("{} {}", self.method, self.path)
    }

    /// The `fieldManager` of the query, if any.
    pub fn field_manager(&self) -> Option<&str> {
        self.query
            .split('&')
            .find_map(|q| q.strip_prefix("fieldManager="))
    }
}

/// What the fake API server saw.
#[derive(Default)]
pub struct Seen {
    calls: Mutex<Vec<Call>>,
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
}

impl Seen {
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// The calls whose `METHOD /path` starts with `prefix`.
    pub fn calls_to(&self, prefix: &str) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.line().starts_with(prefix))
            .collect()
    }

    /// `type reason` of every Event posted, in order.
    pub fn events(&self) -> Vec<String> {
        self.calls()
            .iter()
            .filter(|c| c.path.contains("/events"))
            .map(|c| format!("{} {}", c.body["type"], c.body["reason"]).replace('"', ""))
            .collect()
    }

    pub fn most_in_flight(&self) -> usize {
        self.most_in_flight.load(Ordering::SeqCst)
    }
}

/// A client whose API server answers `answer(method, path)` as `(status, body)`.
pub fn fake_client(
    answer: impl Fn(&str, &str) -> (u16, Value) + Send + Sync + 'static,
) -> (Client, Arc<Seen>) {
    fake_client_slow(Duration::ZERO, answer)
}

/// The same, each answer taking `delay`: calls overlap as they would on a real server.
pub fn fake_client_slow(
    delay: Duration,
    answer: impl Fn(&str, &str) -> (u16, Value) + Send + Sync + 'static,
) -> (Client, Arc<Seen>) {
    let seen: Arc<Seen> = Arc::default();
    let answer = Arc::new(answer);
    let recorded = seen.clone();
    let service = tower::service_fn(move |request: Request<Body>| {
        let (answer, seen) = (answer.clone(), recorded.clone());
        async move {
            let now = seen.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            seen.most_in_flight.fetch_max(now, Ordering::SeqCst);
            let (parts, body) = request.into_parts();
            let bytes = body.collect_bytes().await.unwrap_or_default();
            let call = Call {
                method: parts.method.to_string(),
                path: parts.uri.path().to_string(),
                query: parts.uri.query().unwrap_or_default().to_string(),
                content_type: parts
                    .headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string(),
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            };
            let (status, reply) = answer(&call.method, &call.path);
            seen.calls.lock().unwrap().push(call);
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            seen.in_flight.fetch_sub(1, Ordering::SeqCst);
            Ok::<_, std::convert::Infallible>(
                Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&reply).unwrap()))
                    .unwrap(),
            )
        }
    });
    (Client::new(service, "default"), seen)
}

/// A `Status` answer of the API server.
pub fn status(code: u16, reason: &str) -> (u16, Value) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "message": format!("simulated {reason}"), "reason": reason, "code": code}),
    )
}
