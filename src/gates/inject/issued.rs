//! The webhook's certificate when cert-manager issues it (`--webhook-cert-source
//! cert-manager`): a cert-manager Certificate writes the Secret (`tls.crt`, `tls.key`,
//! `ca.crt`) and renews it, and cert-manager's CA injector writes the configuration's CA
//! bundle (the annotation `cert-manager.io/inject-ca-from`). rollgate writes neither: it
//! serves the Secret's key pair, and a renewed pair from the next handshake on.
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use super::cert_secret::{one_secret_changes, secret_text, CERT_KEY, KEY_KEY};
use super::server::ServingCert;
use crate::runtime::Shutdown;

/// How often an absent or not yet issued Secret is read again.
const RETRY: Duration = Duration::from_secs(5);

/// A serving certificate (its chain) and its private key, PEM-encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IssuedPair {
    pub cert_pem: String,
    pub key_pem: String,
}

/// The key pair in `secret`, or `None` while cert-manager has not issued it (the Secret
/// exists with empty data while a request is pending).
pub fn read_issued(secret: &Secret) -> Option<IssuedPair> {
    Some(IssuedPair {
        cert_pem: secret_text(secret, CERT_KEY)?,
        key_pem: secret_text(secret, KEY_KEY)?,
    })
}

/// Follows the Secret a cert-manager Certificate writes.
pub struct IssuedCert {
    pub secrets: Api<Secret>,
    pub secret: String,
    pub cert: Arc<ServingCert>,
}

impl IssuedCert {
    /// Waits until the Secret holds a usable pair and serves it; `None` when shutdown
    /// came first.
    pub async fn serve_first(&self, shutdown: &Shutdown) -> Option<IssuedPair> {
        let mut said = false;
        loop {
            let found = tokio::select! {
                got = self.secrets.get_opt(&self.secret) => got,
                _ = shutdown.clone().requested() => return None,
            };
            let why = match found {
                Ok(Some(secret)) => match read_issued(&secret).map(|pair| self.serve(pair)) {
                    Some(Ok(pair)) => return Some(pair),
                    Some(Err(error)) => format!("its certificate is unusable: {error:#}"),
                    None => "it holds no tls.crt and tls.key yet".to_string(),
                },
                Ok(None) => "it does not exist yet".to_string(),
                Err(error) => format!("reading it failed: {error}"),
            };
            // Said once at info (an install waits here until cert-manager issues), then
            // at debug.
            if said {
                tracing::debug!(secret = %self.secret, %why, "webhook certificate: waiting for cert-manager");
            } else {
                tracing::info!(secret = %self.secret, %why, "webhook certificate: waiting for cert-manager to issue the Secret (a Certificate with this secretName)");
                said = true;
            }
            tokio::select! {
                _ = tokio::time::sleep(RETRY) => {}
                _ = shutdown.clone().requested() => return None,
            }
        }
    }

    /// Until shutdown: each pair cert-manager writes into the Secret is served from the
    /// next handshake on. A deleted Secret leaves the last pair served.
    pub async fn keep(&self, mut current: IssuedPair, shutdown: Shutdown) {
        let changes = one_secret_changes(self.secrets.clone(), &self.secret);
        let mut changes = std::pin::pin!(changes);
        let stop = shutdown.requested();
        let mut stop = std::pin::pin!(stop);
        loop {
            let secret = tokio::select! {
                _ = &mut stop => return,
                change = changes.next() => match change {
                    Some(Ok(secret)) => secret,
                    Some(Err(error)) => {
                        tracing::warn!(%error, "webhook certificate: Secret watch error, retrying with backoff");
                        continue;
                    }
                    None => return,
                },
            };
            let Some(pair) = read_issued(&secret).filter(|p| *p != current) else {
                continue;
            };
            match self.serve(pair) {
                Ok(pair) => {
                    tracing::info!(secret = %self.secret, "webhook certificate: serving the certificate cert-manager renewed");
                    current = pair;
                }
                Err(error) => {
                    tracing::warn!(secret = %self.secret, error = %format!("{error:#}"), "webhook certificate: the Secret's new certificate is unusable; still serving the previous one")
                }
            }
        }
    }

    fn serve(&self, pair: IssuedPair) -> anyhow::Result<IssuedPair> {
        self.cert.set_pem(&pair.cert_pem, &pair.key_pem)?;
        Ok(pair)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;

    use super::*;
    use crate::gates::inject::certs::new_ca_and_serving;

    fn tls_secret(data: &[(&str, &str)]) -> Secret {
        Secret {
            type_: Some("kubernetes.io/tls".into()),
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn an_issued_secret_gives_its_pair_and_a_pending_one_none() {
        let issued = tls_secret(&[("tls.crt", "CERT"), ("tls.key", "KEY"), ("ca.crt", "CA")]);
        assert_eq!(
            read_issued(&issued),
            Some(IssuedPair {
                cert_pem: "CERT".into(),
                key_pem: "KEY".into()
            })
        );
        // cert-manager creates the Secret with empty values before the first issuance.
        assert_eq!(
            read_issued(&tls_secret(&[("tls.crt", ""), ("tls.key", "")])),
            None
        );
        assert_eq!(read_issued(&tls_secret(&[("tls.crt", "CERT")])), None);
        assert_eq!(read_issued(&Secret::default()), None);
    }

    #[test]
    fn a_pair_of_the_issued_form_is_served_and_a_broken_one_refused() {
        let bundle = new_ca_and_serving(
            &["rollgate-webhook.rollgate-system.svc".to_string()],
            Duration::from_secs(3600),
            time::OffsetDateTime::now_utc(),
        )
        .unwrap();
        let secret = tls_secret(&[
            ("tls.crt", &bundle.cert_pem),
            ("tls.key", &bundle.key_pem),
            ("ca.crt", &bundle.ca_cert_pem),
        ]);
        let cert = ServingCert::default();
        let pair = read_issued(&secret).unwrap();
        cert.set_pem(&pair.cert_pem, &pair.key_pem).unwrap();
        assert!(cert.set_pem(&pair.cert_pem, "not a key").is_err());
        let other = new_ca_and_serving(
            &["rollgate-webhook.rollgate-system.svc".to_string()],
            Duration::from_secs(3600),
            time::OffsetDateTime::now_utc(),
        )
        .unwrap();
        let mismatch = cert.set_pem(&pair.cert_pem, &other.key_pem).unwrap_err();
        assert!(
            mismatch.to_string().contains("not the certificate's"),
            "{mismatch:#}"
        );
        assert!(cert.set_pem("not a certificate", &pair.key_pem).is_err());
    }
}
