//! A tripwire between the controller and the API server, to crash the controller right
//! after it issued deletions and before anyone (itself, the test) saw them land.
use super::*;

/// A plain-HTTP proxy on loopback that forwards every request to the API server as the
/// controller's ServiceAccount, except pod DELETEs: those are held, and the first one
/// trips the wire. The test then kills the controller and `release`s the held DELETEs,
/// which reach the API server like requests that were on the wire when the process
/// died; their answers never go back.
pub struct DeleteTripwire {
    /// A kubeconfig for the controller that goes through the proxy.
    pub kubeconfig: PathBuf,
    held: tokio::sync::watch::Receiver<Vec<String>>,
    forwarded: tokio::sync::watch::Receiver<Vec<String>>,
    release: Arc<tokio::sync::watch::Sender<bool>>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Clone)]
struct TripwireState {
    upstream: Client,
    held: Arc<tokio::sync::watch::Sender<Vec<String>>>,
    forwarded: Arc<tokio::sync::watch::Sender<Vec<String>>>,
    release: tokio::sync::watch::Receiver<bool>,
}

impl DeleteTripwire {
    pub async fn start(tag: &str) -> Self {
        let upstream = client_from(&controller_kubeconfig()).await;
        let (held_tx, held) = tokio::sync::watch::channel(Vec::new());
        let (forwarded_tx, forwarded) = tokio::sync::watch::channel(Vec::new());
        let (release, release_rx) = tokio::sync::watch::channel(false);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the tripwire proxy");
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new()
            .fallback(tripwire_forward)
            .with_state(TripwireState {
                upstream,
                held: Arc::new(held_tx),
                forwarded: Arc::new(forwarded_tx),
                release: release_rx,
            });
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        // The controller speaks plain HTTP to the proxy, with its own token.
        let source = Kubeconfig::read_from(controller_kubeconfig()).unwrap();
        let mut value = serde_json::to_value(&source).unwrap();
        for cluster in value["clusters"].as_array_mut().unwrap() {
            cluster["cluster"] = json!({ "server": format!("http://{addr}") });
        }
        let dir = repo_root().join("target/e2e-state");
        std::fs::create_dir_all(&dir).unwrap();
        let kubeconfig = dir.join(format!("{}.kubeconfig", unique_name(tag)));
        std::fs::write(&kubeconfig, serde_json::to_vec_pretty(&value).unwrap()).unwrap();
        note(format!("tripwire proxy on http://{addr}"));
        DeleteTripwire {
            kubeconfig,
            held,
            forwarded,
            release: Arc::new(release),
            task,
        }
    }

    /// Waits for the first pod DELETE to reach the proxy; returns the pods whose DELETE
    /// is held so far. None of them has reached the API server.
    pub async fn wait_tripped(&mut self, timeout: Duration) -> Vec<String> {
        tokio::time::timeout(timeout, self.held.wait_for(|v| !v.is_empty()))
            .await
            .unwrap_or_else(|_| panic!("no pod DELETE reached the proxy within {timeout:?}"))
            .expect("the tripwire proxy stopped")
            .clone()
    }

    /// Lets every held (and later) pod DELETE through to the API server and waits until
    /// all of them got there; returns their pods. Their callers get no answer.
    pub async fn release(&self) -> Vec<String> {
        self.release.send_replace(true);
        wait_for(
            "the held DELETEs to reach the API server",
            Duration::from_secs(30),
            || async {
                let (held, forwarded) =
                    (self.held.borrow().clone(), self.forwarded.borrow().clone());
                if held.len() == forwarded.len() {
                    Ok(forwarded)
                } else {
                    Err(format!("held {held:?}, forwarded {forwarded:?}"))
                }
            },
        )
        .await
    }
}

impl Drop for DeleteTripwire {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `/api/v1/namespaces/<ns>/pods/<name>` -> `<name>` (no subresource).
pub fn pod_name_in_path(path: &str) -> Option<String> {
    let rest = path.strip_prefix("/api/v1/namespaces/")?;
    let mut parts = rest.split('/');
    let (_ns, kind, name) = (parts.next()?, parts.next()?, parts.next()?);
    (kind == "pods" && parts.next().is_none() && !name.is_empty()).then(|| name.to_string())
}

async fn tripwire_forward(
    axum::extract::State(mut state): axum::extract::State<TripwireState>,
    request: axum::extract::Request,
) -> axum::response::Response {
    use axum::http::{Method, StatusCode};
    use axum::response::IntoResponse;
    const HOP_BY_HOP: [&str; 5] = [
        "host",
        "authorization",
        "connection",
        "content-length",
        "transfer-encoding",
    ];
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, 64 << 20).await {
        Ok(b) => b,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let pod_delete = if parts.method == Method::DELETE {
        pod_name_in_path(parts.uri.path())
    } else {
        None
    };
    let target = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let mut upstream = axum::http::Request::builder()
        .method(parts.method.clone())
        .uri(target);
    for (name, value) in &parts.headers {
        if !HOP_BY_HOP.contains(&name.as_str()) {
            upstream = upstream.header(name, value);
        }
    }
    let upstream = upstream
        .body(kube::client::Body::from(body.to_vec()))
        .unwrap();
    if let Some(name) = pod_delete {
        state.held.send_modify(|names| names.push(name.clone()));
        // A task of its own: the caller's death (its connection closing) drops this
        // handler, but a request on the wire still reaches the server.
        tokio::spawn(async move {
            let _ = state.release.wait_for(|released| *released).await;
            let _ = state.upstream.send(upstream).await;
            state.forwarded.send_modify(|names| names.push(name));
        });
        // Its caller never hears back.
        return std::future::pending().await;
    }
    let response = match state.upstream.send(upstream).await {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    };
    let (mut parts, body) = response.into_parts();
    for name in HOP_BY_HOP {
        parts.headers.remove(name);
    }
    axum::response::Response::from_parts(parts, axum::body::Body::new(body))
}
