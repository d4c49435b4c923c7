//! The webhook's certificates in the cluster: one Secret in rollgate's namespace that
//! every replica gets, or creates when absent, and the CA bundle of the
//! MutatingWebhookConfiguration that every replica keeps equal to the Secret's CA.
//!
//! Replicas never write two different CAs: a Secret is created only if absent (the
//! loser of a race gets 409 AlreadyExists and reads the winner's), and replaced only
//! with the resourceVersion it was read at (the loser gets 409 Conflict and reads again).
use std::collections::BTreeMap;
use std::time::Duration;

use futures::Stream;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Api;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::certs::{new_ca_and_serving, new_ca_beside, renew_serving, CertBundle};
use crate::names::FIELD_MANAGER;

const CA_CERT_KEY: &str = "ca.crt";
/// The CA the current one replaced, still in the bundle.
const PREVIOUS_CA_CERT_KEY: &str = "ca-previous.crt";
const CA_KEY_KEY: &str = "ca.key";
/// The keys of a `kubernetes.io/tls` Secret, which cert-manager writes too.
pub const CERT_KEY: &str = "tls.crt";
pub const KEY_KEY: &str = "tls.key";
/// The serving certificate's validity and names, so a replica knows when to renew it
/// and whether it still covers the names asked for without parsing X.509.
const NOT_BEFORE_ANNOTATION: &str = "rollgate.io/webhook-cert-not-before";
const NOT_AFTER_ANNOTATION: &str = "rollgate.io/webhook-cert-not-after";
const SANS_ANNOTATION: &str = "rollgate.io/webhook-cert-names";
const CA_NOT_BEFORE_ANNOTATION: &str = "rollgate.io/webhook-ca-not-before";
const CA_NOT_AFTER_ANNOTATION: &str = "rollgate.io/webhook-ca-not-after";

/// Rounds of read-then-write before giving up (each lost race costs one).
const TRIES: usize = 5;

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("Secret {name}: {source}")]
    Api {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("making the webhook certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("Secret {0}: another replica kept writing it; giving up for now")]
    Contended(String),
}

/// What the Secret must hold: names and validity.
#[derive(Clone, Debug)]
pub struct Wanted {
    pub secret: String,
    pub sans: Vec<String>,
    pub validity: Duration,
}

/// The text under `key` in `secret`, or `None` when it is absent, blank or not UTF-8
/// (a Secret cert-manager has not issued yet exists with empty values).
pub fn secret_text(secret: &Secret, key: &str) -> Option<String> {
    secret
        .data
        .as_ref()?
        .get(key)
        .and_then(|b| String::from_utf8(b.0.clone()).ok())
        .filter(|s| !s.trim().is_empty())
}

/// Every version of the Secret `name` from now on: a watch on that one object, retried
/// with backoff.
pub fn one_secret_changes(
    secrets: Api<Secret>,
    name: &str,
) -> impl Stream<Item = Result<Secret, watcher::Error>> + Send {
    watcher(
        secrets,
        watcher::Config::default().fields(&format!("metadata.name={name}")),
    )
    .default_backoff()
    .applied_objects()
}

/// The bundle in `secret`, or `None` when it is absent, incomplete or unreadable.
pub fn read_bundle(secret: &Secret) -> Option<CertBundle> {
    let text = |key: &str| secret_text(secret, key);
    let annotations = secret.metadata.annotations.as_ref()?;
    let time = |key: &str| {
        annotations
            .get(key)
            .and_then(|t| OffsetDateTime::parse(t, &Rfc3339).ok())
    };
    Some(CertBundle {
        ca_cert_pem: text(CA_CERT_KEY)?,
        ca_key_pem: text(CA_KEY_KEY)?,
        ca_not_before: time(CA_NOT_BEFORE_ANNOTATION)?,
        ca_not_after: time(CA_NOT_AFTER_ANNOTATION)?,
        previous_ca_pem: text(PREVIOUS_CA_CERT_KEY),
        cert_pem: text(CERT_KEY)?,
        key_pem: text(KEY_KEY)?,
        not_before: time(NOT_BEFORE_ANNOTATION)?,
        not_after: time(NOT_AFTER_ANNOTATION)?,
        sans: annotations
            .get(SANS_ANNOTATION)?
            .split(',')
            .map(str::to_string)
            .collect(),
    })
}

/// The Secret holding `bundle`, named `name` (no resourceVersion: the caller sets it).
fn secret_of(name: &str, bundle: &CertBundle) -> Secret {
    let bytes = |s: &str| ByteString(s.as_bytes().to_vec());
    let stamp = |t: OffsetDateTime| t.format(&Rfc3339).expect("a valid date formats");
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            annotations: Some(BTreeMap::from([
                (NOT_BEFORE_ANNOTATION.to_string(), stamp(bundle.not_before)),
                (NOT_AFTER_ANNOTATION.to_string(), stamp(bundle.not_after)),
                (SANS_ANNOTATION.to_string(), bundle.sans.join(",")),
                (
                    CA_NOT_BEFORE_ANNOTATION.to_string(),
                    stamp(bundle.ca_not_before),
                ),
                (
                    CA_NOT_AFTER_ANNOTATION.to_string(),
                    stamp(bundle.ca_not_after),
                ),
            ])),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: Some(
            [
                (CA_CERT_KEY, Some(&bundle.ca_cert_pem)),
                (CA_KEY_KEY, Some(&bundle.ca_key_pem)),
                (PREVIOUS_CA_CERT_KEY, bundle.previous_ca_pem.as_ref()),
                (CERT_KEY, Some(&bundle.cert_pem)),
                (KEY_KEY, Some(&bundle.key_pem)),
            ]
            .into_iter()
            .filter_map(|(key, value)| Some((key.to_string(), bytes(value?))))
            .collect(),
        ),
        ..Default::default()
    }
}

/// What to do with the Secret as found (pure).
#[derive(Debug)]
enum Step {
    Use(CertBundle),
    Create(CertBundle),
    /// Replace the Secret read at this resourceVersion.
    Replace(CertBundle, Option<String>),
}

fn plan(
    found: Option<&Secret>,
    wanted: &Wanted,
    now: OffsetDateTime,
) -> Result<Step, rcgen::Error> {
    let Some(secret) = found else {
        return Ok(Step::Create(new_ca_and_serving(
            &wanted.sans,
            wanted.validity,
            now,
        )?));
    };
    let version = secret.metadata.resource_version.clone();
    match read_bundle(secret) {
        // A new CA joins the bundle first; the serving certificate stays a while.
        Some(bundle) if bundle.ca_renewal_due(now) => Ok(Step::Replace(
            new_ca_beside(&bundle, wanted.validity, now)?,
            version,
        )),
        Some(bundle) if bundle.sans == wanted.sans && !bundle.renewal_due(now) => {
            Ok(Step::Use(bundle))
        }
        // Renewed (or new names) under the same CA: the CA bundle stays valid.
        Some(bundle) => Ok(Step::Replace(
            renew_serving(&bundle, &wanted.sans, wanted.validity, now)?,
            version,
        )),
        None => Ok(Step::Replace(
            new_ca_and_serving(&wanted.sans, wanted.validity, now)?,
            version,
        )),
    }
}

/// The certificates in force: the Secret's, renewed or made first when needed.
pub async fn get_or_create(
    secrets: &Api<Secret>,
    wanted: &Wanted,
) -> Result<CertBundle, CertError> {
    let api_error = |source| CertError::Api {
        name: wanted.secret.clone(),
        source,
    };
    for _ in 0..TRIES {
        let found = secrets.get_opt(&wanted.secret).await.map_err(api_error)?;
        let written = match plan(found.as_ref(), wanted, OffsetDateTime::now_utc())? {
            Step::Use(bundle) => return Ok(bundle),
            Step::Create(bundle) => {
                tracing::info!(secret = %wanted.secret, "webhook certificate: creating its CA and serving certificate");
                secrets
                    .create(&PostParams::default(), &secret_of(&wanted.secret, &bundle))
                    .await
                    .map(|_| bundle)
            }
            Step::Replace(bundle, version) => {
                tracing::info!(secret = %wanted.secret, not_after = %bundle.not_after, "webhook certificate: renewing the serving certificate");
                let mut secret = secret_of(&wanted.secret, &bundle);
                secret.metadata.resource_version = version;
                secrets
                    .replace(&wanted.secret, &PostParams::default(), &secret)
                    .await
                    .map(|_| bundle)
            }
        };
        match written {
            Ok(bundle) => return Ok(bundle),
            // Another replica wrote first: read what it wrote.
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(error) => return Err(api_error(error)),
        }
    }
    Err(CertError::Contended(wanted.secret.clone()))
}

/// Sets `ca_pem` as the CA bundle of every webhook of the configuration `name`, when it
/// differs. `Ok(false)`: the configuration does not exist (yet).
pub async fn ensure_ca_bundle(
    configs: &Api<MutatingWebhookConfiguration>,
    name: &str,
    ca_pem: &str,
) -> Result<bool, kube::Error> {
    let Some(config) = configs.get_opt(name).await? else {
        return Ok(false);
    };
    let operations = ca_bundle_patch(&config, ca_pem);
    if operations.is_empty() {
        return Ok(true);
    }
    let patch: json_patch::Patch = serde_json::from_value(serde_json::Value::Array(operations))
        .expect("test and add operations parse as a JSON patch");
    configs
        .patch(
            name,
            &PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            },
            &Patch::Json::<()>(patch),
        )
        .await?;
    tracing::info!(configuration = %name, "webhook certificate: CA bundle written");
    Ok(true)
}

/// JSON patch operations setting each webhook's caBundle that differs, each behind a
/// test of the webhook's name at that index (a list changed meanwhile fails the patch
/// rather than setting another webhook's bundle).
fn ca_bundle_patch(config: &MutatingWebhookConfiguration, ca_pem: &str) -> Vec<serde_json::Value> {
    let wanted = ByteString(ca_pem.as_bytes().to_vec());
    config
        .webhooks
        .iter()
        .flatten()
        .enumerate()
        .filter(|(_, webhook)| webhook.client_config.ca_bundle.as_ref() != Some(&wanted))
        .flat_map(|(index, webhook)| {
            [
                serde_json::json!({"op": "test", "path": format!("/webhooks/{index}/name"), "value": webhook.name}),
                serde_json::json!({"op": "add", "path": format!("/webhooks/{index}/clientConfig/caBundle"), "value": wanted}),
            ]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::admissionregistration::v1::{MutatingWebhook, WebhookClientConfig};

    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    fn wanted() -> Wanted {
        Wanted {
            secret: "rollgate-webhook-cert".into(),
            sans: vec![
                "rollgate-webhook.rollgate-system.svc".into(),
                "127.0.0.1".into(),
            ],
            validity: DAY,
        }
    }

    fn now() -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
    }

    fn stored(bundle: &CertBundle) -> Secret {
        let mut secret = secret_of("rollgate-webhook-cert", bundle);
        secret.metadata.resource_version = Some("7".into());
        secret
    }

    #[test]
    fn a_missing_secret_is_created_and_a_stored_one_is_read_back_whole() {
        let Step::Create(bundle) = plan(None, &wanted(), now()).unwrap() else {
            panic!("no Secret: create one")
        };
        assert_eq!(read_bundle(&stored(&bundle)), Some(bundle.clone()));
        let Step::Use(used) = plan(Some(&stored(&bundle)), &wanted(), now()).unwrap() else {
            panic!("a good Secret is used as it is")
        };
        assert_eq!(used, bundle);
    }

    #[test]
    fn a_serving_certificate_due_or_with_other_names_is_renewed_under_the_same_ca() {
        let Step::Create(bundle) = plan(None, &wanted(), now()).unwrap() else {
            panic!()
        };
        let due = now() + time::Duration::hours(17);
        let Step::Replace(renewed, version) = plan(Some(&stored(&bundle)), &wanted(), due).unwrap()
        else {
            panic!("due: renew")
        };
        assert_eq!(
            version.as_deref(),
            Some("7"),
            "replaced at the version read"
        );
        assert_eq!(renewed.ca_cert_pem, bundle.ca_cert_pem);
        assert_ne!(renewed.cert_pem, bundle.cert_pem);

        let mut other_names = wanted();
        other_names.sans.push("rollgate-webhook".into());
        let Step::Replace(renamed, _) = plan(Some(&stored(&bundle)), &other_names, now()).unwrap()
        else {
            panic!("new names: renew")
        };
        assert_eq!(renamed.sans, other_names.sans);
        assert_eq!(renamed.ca_cert_pem, bundle.ca_cert_pem);
    }

    #[test]
    fn a_ca_due_is_replaced_beside_the_previous_one_which_stays_in_the_secret() {
        let Step::Create(bundle) = plan(None, &wanted(), now()).unwrap() else {
            panic!()
        };
        let ca_due = now() + time::Duration::days(7);
        let Step::Replace(rotated, _) = plan(Some(&stored(&bundle)), &wanted(), ca_due).unwrap()
        else {
            panic!("CA due: a new one")
        };
        assert_ne!(rotated.ca_cert_pem, bundle.ca_cert_pem);
        assert_eq!(rotated.cert_pem, bundle.cert_pem);
        let read = read_bundle(&stored(&rotated)).unwrap();
        assert_eq!(read, rotated);
        assert_eq!(
            read.ca_bundle_pem(),
            format!("{}{}", rotated.ca_cert_pem, bundle.ca_cert_pem)
        );
        // Next, the serving certificate (due by then) is renewed under the new CA.
        let Step::Replace(renewed, _) = plan(Some(&stored(&read)), &wanted(), ca_due).unwrap()
        else {
            panic!("serving due: renew")
        };
        assert_eq!(renewed.ca_cert_pem, rotated.ca_cert_pem);
        assert_eq!(renewed.previous_ca_pem, rotated.previous_ca_pem);
        assert_ne!(renewed.cert_pem, bundle.cert_pem);
    }

    #[test]
    fn an_unreadable_secret_is_replaced_with_a_new_ca() {
        let mut broken = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some("rollgate-webhook-cert".into()),
                resource_version: Some("3".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        broken.data = Some(BTreeMap::from([(
            CERT_KEY.to_string(),
            ByteString(b"x".to_vec()),
        )]));
        let Step::Replace(bundle, version) = plan(Some(&broken), &wanted(), now()).unwrap() else {
            panic!("replace")
        };
        assert_eq!(version.as_deref(), Some("3"));
        assert!(bundle.ca_cert_pem.contains("BEGIN CERTIFICATE"));
    }

    #[test]
    fn only_webhooks_whose_ca_bundle_differs_are_patched_each_behind_a_test_of_its_name() {
        let webhook = |name: &str, ca: Option<&str>| MutatingWebhook {
            name: name.into(),
            client_config: WebhookClientConfig {
                ca_bundle: ca.map(|c| ByteString(c.as_bytes().to_vec())),
                ..Default::default()
            },
            ..Default::default()
        };
        let config = MutatingWebhookConfiguration {
            webhooks: Some(vec![
                webhook("a.rollgate.io", Some("CA")),
                webhook("b.rollgate.io", None),
            ]),
            ..Default::default()
        };
        let ops = ca_bundle_patch(&config, "CA");
        assert_eq!(
            ops,
            vec![
                serde_json::json!({"op": "test", "path": "/webhooks/1/name", "value": "b.rollgate.io"}),
                serde_json::json!({"op": "add", "path": "/webhooks/1/clientConfig/caBundle", "value": "Q0E="}),
            ]
        );
        assert!(ca_bundle_patch(&config, "CA").len() == 2);
        let all_set = MutatingWebhookConfiguration {
            webhooks: Some(vec![webhook("a.rollgate.io", Some("CA"))]),
            ..Default::default()
        };
        assert!(ca_bundle_patch(&all_set, "CA").is_empty());
    }
}
