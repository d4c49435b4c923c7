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
        let chain = CertificateDer::pem_slice_iter(bundle.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| anyhow::anyhow!("the serving certificate's PEM: {e}"))?;
        let key = PrivateKeyDer::from_pem_slice(bundle.key_pem.as_bytes())
            .map_err(|e| anyhow::anyhow!("the serving key's PEM: {e}"))?;
        let key = rustls::crypto::ring::sign::any_supported_type(&key)?;
        *self.0.write().expect("serving certificate lock poisoned") =
            Some(Arc::new(CertifiedKey::new(chain, key)));
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
