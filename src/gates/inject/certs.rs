//! The webhook's certificates: a CA of its own and a serving certificate it signs
//! (rcgen), and when the serving one is due for renewal. No I/O but the key generation.
//!
//! The CA lives ten times as long as the serving certificate, which is renewed at two
//! thirds of its life under the same CA: the API server's CA bundle does not change when
//! a serving certificate does, so a replica still serving the previous certificate for
//! a few seconds is still trusted.
//!
//! The CA is replaced at two thirds of its own life in two steps, so no replica ever
//! serves a certificate the API server does not trust: first a new CA joins the bundle
//! beside the previous one while the serving certificate stays (it is the previous
//! CA's); the next serving renewal, months later, is the new CA's.
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use time::OffsetDateTime;

/// How much longer than a serving certificate the CA lives.
const CA_LIFETIMES: u32 = 10;
/// The CA's common name (its subject, and the issuer of every serving certificate).
const CA_COMMON_NAME: &str = "rollgate readiness-gate injection webhook CA";
/// Clocks of the API server and of rollgate may differ a little: certificates start
/// this long before they are made (a tenth of a short test validity at most, so that
/// renewal still comes at two thirds of the time ahead).
const CLOCK_SKEW: time::Duration = time::Duration::minutes(5);

fn backdate(validity: Duration) -> time::Duration {
    CLOCK_SKEW.min(to_time(validity) / 10)
}

/// A CA and the serving certificate it signed, PEM-encoded, with the serving
/// certificate's validity and names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertBundle {
    pub ca_cert_pem: String,
    pub ca_key_pem: String,
    pub ca_not_before: OffsetDateTime,
    pub ca_not_after: OffsetDateTime,
    /// The CA this one replaced, still trusted: the serving certificate may be its.
    pub previous_ca_pem: Option<String>,
    pub cert_pem: String,
    pub key_pem: String,
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
    /// The serving certificate's subject alternative names, as asked for.
    pub sans: Vec<String>,
}

impl CertBundle {
    /// At two thirds of the serving certificate's life (or past its end): a new one is
    /// made well before any client could see it expire.
    pub fn renewal_due(&self, now: OffsetDateTime) -> bool {
        let life = self.not_after - self.not_before;
        now >= self.not_before + life * 2 / 3
    }

    /// When `renewal_due` turns true.
    pub fn renewal_at(&self) -> OffsetDateTime {
        self.not_before + (self.not_after - self.not_before) * 2 / 3
    }

    /// At two thirds of the CA's life: a new CA is due.
    pub fn ca_renewal_due(&self, now: OffsetDateTime) -> bool {
        let life = self.ca_not_after - self.ca_not_before;
        now >= self.ca_not_before + life * 2 / 3
    }

    /// What the API server must trust: the CA, and the one it replaced.
    pub fn ca_bundle_pem(&self) -> String {
        match &self.previous_ca_pem {
            Some(previous) => format!("{}{previous}", self.ca_cert_pem),
            None => self.ca_cert_pem.clone(),
        }
    }
}

/// The names the serving certificate must carry: the webhook Service's DNS names in
/// `namespace` and 127.0.0.1 (the API server of the local test bed calls it there).
pub fn serving_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        service.to_string(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
        "127.0.0.1".to_string(),
    ]
}

/// A new CA and a serving certificate for `sans`, valid `validity` from `now`.
pub fn new_ca_and_serving(
    sans: &[String],
    validity: Duration,
    now: OffsetDateTime,
) -> Result<CertBundle, rcgen::Error> {
    let ca = new_ca(validity, now)?;
    let ca_key = KeyPair::from_pem(&ca.ca_key_pem)?;
    serving(ca, &ca_key, sans, validity, now)
}

/// A new CA beside `existing`'s, which stays in the bundle as the previous one; the
/// serving certificate stays too (it is the previous CA's, and still trusted).
pub fn new_ca_beside(
    existing: &CertBundle,
    validity: Duration,
    now: OffsetDateTime,
) -> Result<CertBundle, rcgen::Error> {
    let ca = new_ca(validity, now)?;
    Ok(CertBundle {
        previous_ca_pem: Some(existing.ca_cert_pem.clone()),
        cert_pem: existing.cert_pem.clone(),
        key_pem: existing.key_pem.clone(),
        not_before: existing.not_before,
        not_after: existing.not_after,
        sans: existing.sans.clone(),
        ..ca
    })
}

/// A CA alone: the serving fields are empty until `serving` fills them.
fn new_ca(validity: Duration, now: OffsetDateTime) -> Result<CertBundle, rcgen::Error> {
    let ca_key = KeyPair::generate()?;
    let params = ca_params(now, validity)?;
    let ca_cert = params.self_signed(&ca_key)?;
    Ok(CertBundle {
        ca_cert_pem: ca_cert.pem(),
        ca_key_pem: ca_key.serialize_pem(),
        ca_not_before: params.not_before,
        ca_not_after: params.not_after,
        previous_ca_pem: None,
        cert_pem: String::new(),
        key_pem: String::new(),
        not_before: now,
        not_after: now,
        sans: Vec::new(),
    })
}

/// A new serving certificate under `existing`'s CA (renewal: the CA bundle stays).
pub fn renew_serving(
    existing: &CertBundle,
    sans: &[String],
    validity: Duration,
    now: OffsetDateTime,
) -> Result<CertBundle, rcgen::Error> {
    let ca_key = KeyPair::from_pem(&existing.ca_key_pem)?;
    serving(existing.clone(), &ca_key, sans, validity, now)
}

/// The CA's parameters. Rebuilt the same from its key to sign later certificates: an
/// issuer is its subject name and its key (the key identifier is the key's hash).
fn ca_params(now: OffsetDateTime, validity: Duration) -> Result<CertificateParams, rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name = distinguished_name(CA_COMMON_NAME);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.not_before = now - backdate(validity);
    params.not_after = now + to_time(validity) * CA_LIFETIMES;
    Ok(params)
}

/// `ca` with a new serving certificate for `sans` that its key signed.
fn serving(
    ca: CertBundle,
    ca_key: &KeyPair,
    sans: &[String],
    validity: Duration,
    now: OffsetDateTime,
) -> Result<CertBundle, rcgen::Error> {
    // Only its name, key usages and key identifier method matter to an issuer.
    let issuer = Issuer::new(ca_params(now, validity)?, ca_key);
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(sans.to_vec())?;
    params.distinguished_name = distinguished_name(sans.first().map_or("rollgate", |s| s));
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    params.not_before = now - backdate(validity);
    params.not_after = now + to_time(validity);
    let cert = params.signed_by(&key, &issuer)?;
    Ok(CertBundle {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        not_before: params.not_before,
        not_after: params.not_after,
        sans: sans.to_vec(),
        ..ca
    })
}

fn distinguished_name(common_name: &str) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, common_name);
    name
}

fn to_time(duration: Duration) -> time::Duration {
    time::Duration::try_from(duration).unwrap_or(time::Duration::MAX)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    fn now() -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
    }

    /// Whether a TLS client trusting only `ca_pem` accepts `bundle`'s serving
    /// certificate for `name` at `at`.
    fn verifies(ca_pem: &str, bundle: &CertBundle, name: &str, at: OffsetDateTime) -> bool {
        let mut roots = rustls::RootCertStore::empty();
        for ca in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(ca.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap();
        let leaf = CertificateDer::from_pem_slice(bundle.cert_pem.as_bytes()).unwrap();
        let at = UnixTime::since_unix_epoch(Duration::from_secs(at.unix_timestamp() as u64));
        verifier
            .verify_server_cert(
                &leaf,
                &[],
                &ServerName::try_from(name.to_string()).unwrap(),
                &[],
                at,
            )
            .is_ok()
    }

    #[test]
    fn the_serving_certificate_is_trusted_by_its_ca_for_the_service_names_and_loopback() {
        let sans = serving_names("rollgate-webhook", "rollgate-system");
        let bundle = new_ca_and_serving(&sans, DAY, now()).unwrap();
        for name in [
            "rollgate-webhook.rollgate-system.svc",
            "rollgate-webhook.rollgate-system.svc.cluster.local",
            "127.0.0.1",
        ] {
            assert!(
                verifies(&bundle.ca_cert_pem, &bundle, name, now()),
                "{name}"
            );
        }
        assert!(!verifies(
            &bundle.ca_cert_pem,
            &bundle,
            "other.rollgate-system.svc",
            now()
        ));
        // Another CA does not vouch for it.
        let other = new_ca_and_serving(&sans, DAY, now()).unwrap();
        assert!(!verifies(&other.ca_cert_pem, &bundle, "127.0.0.1", now()));
        // Nor is it good past its validity.
        assert!(!verifies(
            &bundle.ca_cert_pem,
            &bundle,
            "127.0.0.1",
            now() + time::Duration::days(2)
        ));
    }

    #[test]
    fn a_renewed_serving_certificate_is_trusted_by_the_same_ca_bundle() {
        let sans = serving_names("rollgate-webhook", "rollgate-system");
        let first = new_ca_and_serving(&sans, DAY, now()).unwrap();
        let later = now() + time::Duration::hours(20);
        let renewed = renew_serving(&first, &sans, DAY, later).unwrap();
        assert_eq!(renewed.ca_cert_pem, first.ca_cert_pem);
        assert_ne!(renewed.cert_pem, first.cert_pem);
        assert_ne!(renewed.key_pem, first.key_pem);
        let after_first_expired = now() + time::Duration::hours(30);
        assert!(verifies(
            &first.ca_cert_pem,
            &renewed,
            "127.0.0.1",
            after_first_expired
        ));
        assert!(!verifies(
            &first.ca_cert_pem,
            &first,
            "127.0.0.1",
            after_first_expired
        ));
    }

    #[test]
    fn renewal_is_due_at_two_thirds_of_the_serving_certificates_life() {
        let bundle = new_ca_and_serving(&["127.0.0.1".into()], DAY * 3, now()).unwrap();
        // not_before is 5 minutes before `now` (clock skew).
        let two_thirds = bundle.renewal_at();
        assert!(!bundle.renewal_due(now()));
        assert!(!bundle.renewal_due(two_thirds - time::Duration::seconds(1)));
        assert!(bundle.renewal_due(two_thirds));
        assert!(bundle.renewal_due(bundle.not_after + time::Duration::days(1)));
        assert!(two_thirds > now() + time::Duration::hours(47));
        assert!(two_thirds < now() + time::Duration::hours(48));
    }

    #[test]
    fn a_new_ca_joins_the_bundle_first_and_signs_from_the_next_serving_renewal_on() {
        let sans = serving_names("rollgate-webhook", "rollgate-system");
        let first = new_ca_and_serving(&sans, DAY, now()).unwrap();
        assert!(!first.ca_renewal_due(now() + time::Duration::days(6)));
        let ca_due = now() + time::Duration::days(7);
        assert!(first.ca_renewal_due(ca_due));

        let rotated = new_ca_beside(&first, DAY, ca_due).unwrap();
        assert_ne!(rotated.ca_cert_pem, first.ca_cert_pem);
        assert_eq!(
            rotated.previous_ca_pem.as_deref(),
            Some(first.ca_cert_pem.as_str())
        );
        // Still serving the previous CA's certificate, trusted through the bundle.
        assert_eq!(rotated.cert_pem, first.cert_pem);
        assert!(verifies(
            &rotated.ca_bundle_pem(),
            &first,
            "127.0.0.1",
            now()
        ));
        assert!(!rotated.ca_renewal_due(ca_due));

        let renewed = renew_serving(&rotated, &sans, DAY, ca_due).unwrap();
        assert!(verifies(
            &rotated.ca_bundle_pem(),
            &renewed,
            "127.0.0.1",
            ca_due
        ));
        assert!(verifies(
            &rotated.ca_cert_pem,
            &renewed,
            "127.0.0.1",
            ca_due
        ));
        assert!(!verifies(&first.ca_cert_pem, &renewed, "127.0.0.1", ca_due));
    }

    #[test]
    fn a_short_lived_certificate_is_not_due_the_moment_it_is_made() {
        let bundle =
            new_ca_and_serving(&["127.0.0.1".into()], Duration::from_secs(30), now()).unwrap();
        assert!(!bundle.renewal_due(now()));
        assert!(!bundle.renewal_due(now() + time::Duration::seconds(15)));
        assert!(bundle.renewal_due(now() + time::Duration::seconds(20)));
    }
}
