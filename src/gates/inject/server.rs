//! The webhook's HTTPS server: `POST /mutate-pods` over rustls (kube's ring provider),
//! with the serving certificate behind a lock that the certificate keeper swaps, so a
//! renewed certificate is served without a restart.
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::certs::CertBundle;
use super::review::Injector;
use crate::runtime::Shutdown;

/// The path the MutatingWebhookConfiguration calls.
pub const MUTATE_PODS_PATH: &str = "/mutate-pods";
/// A client that has not finished its TLS handshake by then is dropped (the API server
/// calls with a timeout of a few seconds anyway).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshaken connections waiting for the HTTP server to take them.
const ACCEPTED_BACKLOG: usize = 64;

/// The serving certificate in force, swapped in place when it is renewed.
#[derive(Debug, Default)]
pub struct ServingCert(RwLock<Option<Arc<CertifiedKey>>>);

impl ServingCert {
    /// Serves `bundle`'s certificate from the next handshake on.
    pub fn set(&self, bundle: &CertBundle) -> anyhow::Result<()> {
        self.set_pem(&bundle.cert_pem, &bundle.key_pem)
    }

    /// Serves the certificate chain `cert_pem` with the key `key_pem` from the next
    /// handshake on; refused (the one in force stays) when either is unreadable, the
    /// chain is empty or the key is not the certificate's.
    pub fn set_pem(&self, cert_pem: &str, key_pem: &str) -> anyhow::Result<()> {
        let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| anyhow::anyhow!("the serving certificate's PEM: {e}"))?;
        anyhow::ensure!(
            !chain.is_empty(),
            "the serving certificate's PEM holds no CERTIFICATE block"
        );
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
            .map_err(|e| anyhow::anyhow!("the serving key's PEM: {e}"))?;
        let key = rustls::crypto::ring::sign::any_supported_type(&key)?;
        let certified = CertifiedKey::new(chain, key);
        match certified.keys_match() {
            // A key type that cannot tell its public key is let through, as rustls does.
            Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
            Err(e) => anyhow::bail!("the serving key is not the certificate's: {e}"),
        }
        *self.0.write().expect("serving certificate lock poisoned") = Some(Arc::new(certified));
        Ok(())
    }
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0
            .read()
            .expect("serving certificate lock poisoned")
            .clone()
    }
}

/// rustls with kube's provider (ring), no client authentication.
pub fn tls_config(cert: Arc<ServingCert>) -> anyhow::Result<rustls::ServerConfig> {
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_cert_resolver(cert);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Serves the webhook on `listener` until shutdown.
pub async fn serve(
    listener: TcpListener,
    tls: rustls::ServerConfig,
    injector: Injector,
    shutdown: Shutdown,
) -> std::io::Result<()> {
    let local = listener.local_addr()?;
    let (tx, rx) = mpsc::channel(ACCEPTED_BACKLOG);
    let acceptor = TlsAcceptor::from(Arc::new(tls));
    // Handshakes run side by side, so one slow client holds up no other.
    let handshakes = tokio::spawn(accept_tls(listener, acceptor, tx));
    let app = Router::new()
        .route(MUTATE_PODS_PATH, post(mutate_pods))
        .with_state(injector);
    let served = axum::serve(TlsListener { rx, local }, app)
        .with_graceful_shutdown(shutdown.requested())
        .await;
    handshakes.abort();
    served
}

async fn mutate_pods(State(injector): State<Injector>, body: Bytes) -> Response {
    match injector.answer(&body) {
        Ok(review) => Json(review).into_response(),
        Err(problem) => {
            tracing::warn!(%problem, "webhook: refused a request body");
            (StatusCode::BAD_REQUEST, problem).into_response()
        }
    }
}

async fn accept_tls(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    accepted: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(connection) => connection,
            Err(error) => {
                tracing::warn!(%error, "webhook: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (acceptor, accepted) = (acceptor.clone(), accepted.clone());
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    let _ = accepted.send((tls, peer)).await;
                }
                Ok(Err(error)) => tracing::debug!(%peer, %error, "webhook: TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "webhook: TLS handshake timed out"),
            }
        });
    }
}

/// The handshaken connections, as axum takes connections.
struct TlsListener {
    rx: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(connection) => connection,
            // The accept loop ended: no connection comes any more.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Service;
    use rustls::pki_types::ServerName;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::TlsConnector;

    use super::*;
    use crate::gates::inject::certs::{new_ca_and_serving, renew_serving};
    use crate::gates::inject::metrics::InjectionMetrics;
    use crate::gates::inject::plan::Scope;
    use crate::gates::service::ClassSelection;
    use crate::metrics::Metrics;
    use crate::testkit::store_of;
    use crate::watch::NamespaceLabels;

    const DAY: Duration = Duration::from_secs(86_400);

    fn injector() -> Injector {
        Injector {
            scope: Arc::new(Scope {
                own_namespace: "rollgate-system".into(),
                classes: ClassSelection::Standard,
            }),
            namespaces: store_of(Vec::<NamespaceLabels>::new()),
            services: store_of(Vec::<Service>::new()),
            metrics: InjectionMetrics::register(&Metrics::default()),
        }
    }

    /// One HTTPS POST of `body` to `addr` trusting only `ca_pem`: the status line and
    /// the certificate the server presented.
    async fn post(addr: SocketAddr, ca_pem: &str, body: &str) -> (String, Vec<u8>) {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
            .unwrap();
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let tcp = TcpStream::connect(addr).await.unwrap();
        let mut tls = TlsConnector::from(Arc::new(config))
            .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
            .await
            .expect("the handshake verifies against the CA");
        let presented = tls.get_ref().1.peer_certificates().unwrap()[0].to_vec();
        let request = format!(
            "POST {MUTATE_PODS_PATH} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        tls.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        let _ = tls.read_to_string(&mut answer).await;
        (answer, presented)
    }

    fn leaf(pem: &str) -> Vec<u8> {
        CertificateDer::from_pem_slice(pem.as_bytes())
            .unwrap()
            .to_vec()
    }

    /// Over TLS: a body that is no AdmissionReview is answered 400 with the problem; a
    /// certificate swapped in place is presented from the next connection on.
    #[tokio::test]
    async fn a_malformed_body_gets_400_and_a_renewed_certificate_is_served_without_a_restart() {
        let now = time::OffsetDateTime::now_utc();
        let sans = vec!["127.0.0.1".to_string()];
        let first = new_ca_and_serving(&sans, DAY, now).unwrap();
        let cert = Arc::new(ServingCert::default());
        cert.set(&first).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let server = tokio::spawn(serve(
            listener,
            tls_config(cert.clone()).unwrap(),
            injector(),
            Shutdown::from_receiver(stopped),
        ));

        let (answer, presented) = post(addr, &first.ca_cert_pem, "{\"kind\": 3}").await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        assert!(
            answer.contains("not an admission.k8s.io/v1 AdmissionReview"),
            "{answer}"
        );
        assert_eq!(presented, leaf(&first.cert_pem));

        let renewed = renew_serving(&first, &sans, DAY, now).unwrap();
        cert.set(&renewed).unwrap();
        let review = serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u-1",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": "shop", "operation": "CREATE",
                "userInfo": {},
                "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": {}}, "spec": {"containers": []}},
            }
        });
        let (answer, presented) = post(addr, &first.ca_cert_pem, &review.to_string()).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains("\"allowed\":true"), "{answer}");
        assert_eq!(presented, leaf(&renewed.cert_pem));

        let _ = stop.send(true);
        server.await.unwrap().unwrap();
    }
}
