//! Where AccessKeys come from, in the order users expect:
//! 1. env `ALIBABA_CLOUD_ACCESS_KEY_ID` / `ALIBABA_CLOUD_ACCESS_KEY_SECRET`
//!    (+ optional `ALIBABA_CLOUD_SECURITY_TOKEN`);
//! 2. RRSA: `ALIBABA_CLOUD_ROLE_ARN`, `ALIBABA_CLOUD_OIDC_PROVIDER_ARN`,
//!    `ALIBABA_CLOUD_OIDC_TOKEN_FILE` exchanged at STS `AssumeRoleWithOIDC`;
//! 3. the ECS RAM role from instance metadata (token-protected, v2).
//!
//! Temporary credentials are cached and refreshed a margin before they expire, so a
//! reconcile never signs with a token that dies mid-flight.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;
use serde::Deserialize;
use tokio::sync::Mutex;

use crate::encode::{encode_pairs, FORM_CONTENT_TYPE};
use crate::error::{Error, Result};
use crate::http::{build_http_client, decode_error, new_nonce, send, utc_timestamp};
use crate::secret::Secret;

pub const ENV_ACCESS_KEY_ID: &str = "ALIBABA_CLOUD_ACCESS_KEY_ID";
pub const ENV_ACCESS_KEY_SECRET: &str = "ALIBABA_CLOUD_ACCESS_KEY_SECRET";
pub const ENV_SECURITY_TOKEN: &str = "ALIBABA_CLOUD_SECURITY_TOKEN";
pub const ENV_ROLE_ARN: &str = "ALIBABA_CLOUD_ROLE_ARN";
pub const ENV_OIDC_PROVIDER_ARN: &str = "ALIBABA_CLOUD_OIDC_PROVIDER_ARN";
pub const ENV_OIDC_TOKEN_FILE: &str = "ALIBABA_CLOUD_OIDC_TOKEN_FILE";
pub const ENV_ROLE_SESSION_NAME: &str = "ALIBABA_CLOUD_ROLE_SESSION_NAME";
pub const ENV_ECS_ROLE_NAME: &str = "ALIBABA_CLOUD_ECS_METADATA";
pub const ENV_ECS_METADATA_DISABLED: &str = "ALIBABA_CLOUD_ECS_METADATA_DISABLED";

/// The ECS instance metadata service; overridable for tests.
pub const DEFAULT_METADATA_ENDPOINT: &str = "http://100.100.100.200";
pub const STS_VERSION: &str = "2015-04-01";

/// One set of credentials as used for signing.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key_id: String,
    pub access_key_secret: Secret,
    pub security_token: Option<Secret>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("access_key_secret", &self.access_key_secret)
            .field("has_security_token", &self.security_token.is_some())
            .finish()
    }
}

#[async_trait]
pub trait CredentialProvider: Send + Sync + fmt::Debug {
    /// Current credentials, refreshed if they are about to expire.
    async fn credentials(&self) -> Result<Credentials>;
}

/// Fixed credentials (from env or configuration).
#[derive(Debug, Clone)]
pub struct StaticCredentials(pub Credentials);

#[async_trait]
impl CredentialProvider for StaticCredentials {
    async fn credentials(&self) -> Result<Credentials> {
        Ok(self.0.clone())
    }
}

/// Where the exchanges for temporary credentials go.
#[derive(Clone, Debug)]
pub struct CredentialEndpoints {
    /// Full base URL of STS, e.g. `https://sts-vpc.cn-hangzhou.aliyuncs.com`.
    pub sts_endpoint: String,
    /// Base URL of instance metadata.
    pub metadata_endpoint: String,
    /// Refresh temporary credentials this long before they expire.
    pub refresh_margin: Duration,
    pub timeout: Duration,
}

impl CredentialEndpoints {
    /// The regional STS endpoint over https (or the VPC one when `vpc`).
    pub fn for_region(region: &str, vpc: bool) -> Self {
        let host = if vpc {
            format!("sts-vpc.{region}.aliyuncs.com")
        } else {
            format!("sts.{region}.aliyuncs.com")
        };
        Self {
            sts_endpoint: format!("https://{host}"),
            metadata_endpoint: DEFAULT_METADATA_ENDPOINT.to_string(),
            refresh_margin: Duration::from_secs(300),
            timeout: Duration::from_secs(10),
        }
    }
}

/// Builds the provider the environment asks for, in the documented order.
/// `env` is injected so tests need not touch the process environment.
pub fn default_chain(
    env: &HashMap<String, String>,
    endpoints: CredentialEndpoints,
) -> Result<Arc<dyn CredentialProvider>> {
    let get = |k: &str| env.get(k).filter(|v| !v.is_empty()).cloned();
    if let (Some(id), Some(secret)) = (get(ENV_ACCESS_KEY_ID), get(ENV_ACCESS_KEY_SECRET)) {
        return Ok(Arc::new(StaticCredentials(Credentials {
            access_key_id: id,
            access_key_secret: Secret::new(secret),
            security_token: get(ENV_SECURITY_TOKEN).map(Secret::new),
        })));
    }
    if let (Some(role_arn), Some(provider_arn), Some(token_file)) = (
        get(ENV_ROLE_ARN),
        get(ENV_OIDC_PROVIDER_ARN),
        get(ENV_OIDC_TOKEN_FILE),
    ) {
        return Ok(Arc::new(RrsaProvider::new(
            role_arn,
            provider_arn,
            token_file.into(),
            get(ENV_ROLE_SESSION_NAME).unwrap_or_else(|| "rollgate".to_string()),
            endpoints,
        )?));
    }
    if get(ENV_ECS_METADATA_DISABLED).is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Err(Error::Credentials(format!(
            "none configured: set {ENV_ACCESS_KEY_ID}/{ENV_ACCESS_KEY_SECRET}, or RRSA \
             ({ENV_ROLE_ARN}, {ENV_OIDC_PROVIDER_ARN}, {ENV_OIDC_TOKEN_FILE}), or allow the ECS RAM role"
        )));
    }
    Ok(Arc::new(EcsRamRoleProvider::new(
        get(ENV_ECS_ROLE_NAME),
        endpoints,
    )?))
}

/// Reads the process environment for [`default_chain`].
pub fn process_env() -> HashMap<String, String> {
    std::env::vars()
        .filter(|(k, _)| k.starts_with("ALIBABA_CLOUD_"))
        .collect()
}

struct Cached {
    credentials: Credentials,
    expires_at: Timestamp,
}

/// Holds temporary credentials and decides when to fetch new ones.
struct RefreshCache {
    current: Mutex<Option<Cached>>,
    margin: Duration,
}

impl RefreshCache {
    fn new(margin: Duration) -> Self {
        Self {
            current: Mutex::new(None),
            margin,
        }
    }

    async fn get_or_refresh<F, Fut>(&self, fetch: F) -> Result<Credentials>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Cached>>,
    {
        let mut current = self.current.lock().await;
        let fresh_enough = current.as_ref().is_some_and(|c| {
            let margin = jiff::SignedDuration::try_from(self.margin).unwrap_or_default();
            Timestamp::now()
                .saturating_add(margin)
                .is_ok_and(|t| t < c.expires_at)
        });
        if !fresh_enough {
            let fetched = fetch().await?;
            tracing::info!(access_key_id = %fetched.credentials.access_key_id, expires_at = %fetched.expires_at, "refreshed temporary credentials");
            *current = Some(fetched);
        }
        Ok(current.as_ref().expect("set above").credentials.clone())
    }
}

/// The STS / metadata answer for temporary credentials.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct TemporaryCredentials {
    access_key_id: String,
    access_key_secret: String,
    security_token: String,
    expiration: String,
}

impl TemporaryCredentials {
    fn into_cached(self, source: &str) -> Result<Cached> {
        let expires_at: Timestamp = self.expiration.parse().map_err(|e| {
            Error::Credentials(format!(
                "{source}: bad Expiration {:?}: {e}",
                self.expiration
            ))
        })?;
        Ok(Cached {
            credentials: Credentials {
                access_key_id: self.access_key_id,
                access_key_secret: Secret::new(self.access_key_secret),
                security_token: Some(Secret::new(self.security_token)),
            },
            expires_at,
        })
    }
}

/// RRSA: exchange the projected service-account token for STS credentials.
pub struct RrsaProvider {
    role_arn: String,
    oidc_provider_arn: String,
    token_file: std::path::PathBuf,
    session_name: String,
    endpoints: CredentialEndpoints,
    http: reqwest::Client,
    cache: RefreshCache,
}

impl fmt::Debug for RrsaProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RrsaProvider")
            .field("role_arn", &self.role_arn)
            .field("oidc_provider_arn", &self.oidc_provider_arn)
            .field("token_file", &self.token_file)
            .field("sts_endpoint", &self.endpoints.sts_endpoint)
            .finish_non_exhaustive()
    }
}

impl RrsaProvider {
    pub fn new(
        role_arn: String,
        oidc_provider_arn: String,
        token_file: std::path::PathBuf,
        session_name: String,
        endpoints: CredentialEndpoints,
    ) -> Result<Self> {
        Ok(Self {
            http: build_http_client(endpoints.timeout)?,
            cache: RefreshCache::new(endpoints.refresh_margin),
            role_arn,
            oidc_provider_arn,
            token_file,
            session_name,
            endpoints,
        })
    }

    async fn assume_role(&self) -> Result<Cached> {
        const ACTION: &str = "AssumeRoleWithOIDC";
        // Kubelet rotates the projected token, so read it on every exchange.
        let token = tokio::fs::read_to_string(&self.token_file)
            .await
            .map_err(|e| {
                Error::Credentials(format!(
                    "reading OIDC token file {}: {e}",
                    self.token_file.display()
                ))
            })?;
        let token = Secret::new(token.trim());
        let timestamp = utc_timestamp();
        let nonce = new_nonce();
        let form = [
            ("Action", ACTION),
            ("Format", "JSON"),
            ("Version", STS_VERSION),
            ("Timestamp", timestamp.as_str()),
            ("SignatureNonce", nonce.as_str()),
            ("RoleArn", self.role_arn.as_str()),
            ("OIDCProviderArn", self.oidc_provider_arn.as_str()),
            ("OIDCToken", token.expose()),
            ("RoleSessionName", self.session_name.as_str()),
            ("DurationSeconds", "3600"),
        ];
        let url = format!("{}/", self.endpoints.sts_endpoint.trim_end_matches('/'));
        let request = self
            .http
            .post(url)
            .header("content-type", FORM_CONTENT_TYPE)
            .body(encode_pairs(form));
        let body = send(ACTION, request).await?;
        #[derive(Deserialize)]
        #[serde(rename_all = "PascalCase")]
        struct AssumeRoleResponse {
            credentials: TemporaryCredentials,
        }
        let parsed: AssumeRoleResponse =
            serde_json::from_slice(&body).map_err(|e| decode_error(ACTION, &body, e))?;
        parsed.credentials.into_cached("STS AssumeRoleWithOIDC")
    }
}

#[async_trait]
impl CredentialProvider for RrsaProvider {
    async fn credentials(&self) -> Result<Credentials> {
        self.cache.get_or_refresh(|| self.assume_role()).await
    }
}

/// The RAM role attached to the ECS instance, through metadata v2 (a PUT for a
/// session token first, then GETs carrying it).
pub struct EcsRamRoleProvider {
    role_name: Option<String>,
    endpoints: CredentialEndpoints,
    http: reqwest::Client,
    cache: RefreshCache,
}

impl fmt::Debug for EcsRamRoleProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EcsRamRoleProvider")
            .field("role_name", &self.role_name)
            .field("metadata_endpoint", &self.endpoints.metadata_endpoint)
            .finish_non_exhaustive()
    }
}

const METADATA_TOKEN_HEADER: &str = "X-aliyun-ecs-metadata-token";
const METADATA_TOKEN_TTL_HEADER: &str = "X-aliyun-ecs-metadata-token-ttl-seconds";
const METADATA_ROLE_PATH: &str = "/latest/meta-data/ram/security-credentials/";

impl EcsRamRoleProvider {
    pub fn new(role_name: Option<String>, endpoints: CredentialEndpoints) -> Result<Self> {
        Ok(Self {
            http: build_http_client(endpoints.timeout)?,
            cache: RefreshCache::new(endpoints.refresh_margin),
            role_name,
            endpoints,
        })
    }

    async fn metadata_get(&self, path: &str, token: &Secret) -> Result<String> {
        let url = format!(
            "{}{path}",
            self.endpoints.metadata_endpoint.trim_end_matches('/')
        );
        let response = self
            .http
            .get(url)
            .header(METADATA_TOKEN_HEADER, token.expose())
            .send()
            .await
            .map_err(|e| {
                Error::Credentials(format!("instance metadata {path}: {}", e.without_url()))
            })?;
        let status = response.status();
        let text = response.text().await.map_err(|e| {
            Error::Credentials(format!("instance metadata {path}: {}", e.without_url()))
        })?;
        if !status.is_success() {
            return Err(Error::Credentials(format!(
                "instance metadata {path}: HTTP {status}"
            )));
        }
        Ok(text)
    }

    async fn fetch(&self) -> Result<Cached> {
        let token_url = format!(
            "{}/latest/api/token",
            self.endpoints.metadata_endpoint.trim_end_matches('/')
        );
        let response = self
            .http
            .put(token_url)
            .header(METADATA_TOKEN_TTL_HEADER, "21600")
            .send()
            .await
            .map_err(|e| {
                Error::Credentials(format!("instance metadata token: {}", e.without_url()))
            })?;
        if !response.status().is_success() {
            return Err(Error::Credentials(format!(
                "instance metadata token: HTTP {}",
                response.status()
            )));
        }
        let token = Secret::new(response.text().await.map_err(|e| {
            Error::Credentials(format!("instance metadata token: {}", e.without_url()))
        })?);
        let role = match &self.role_name {
            Some(role) => role.clone(),
            None => self
                .metadata_get(METADATA_ROLE_PATH, &token)
                .await?
                .lines()
                .next()
                .unwrap_or_default()
                .trim()
                .to_string(),
        };
        if role.is_empty() {
            return Err(Error::Credentials(
                "no RAM role is attached to this instance".into(),
            ));
        }
        let body = self
            .metadata_get(&format!("{METADATA_ROLE_PATH}{role}"), &token)
            .await?;
        #[derive(Deserialize)]
        #[serde(rename_all = "PascalCase")]
        struct MetadataAnswer {
            code: Option<String>,
            #[serde(flatten)]
            credentials: TemporaryCredentials,
        }
        let answer: MetadataAnswer = serde_json::from_str(&body).map_err(|e| {
            Error::Credentials(format!(
                "instance metadata role {role}: unreadable answer: {e}"
            ))
        })?;
        if answer.code.as_deref().is_some_and(|c| c != "Success") {
            return Err(Error::Credentials(format!(
                "instance metadata role {role}: Code {:?}",
                answer.code
            )));
        }
        answer.credentials.into_cached("ECS RAM role")
    }
}

#[async_trait]
impl CredentialProvider for EcsRamRoleProvider {
    async fn credentials(&self) -> Result<Credentials> {
        self.cache.get_or_refresh(|| self.fetch()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn endpoints() -> CredentialEndpoints {
        CredentialEndpoints::for_region("cn-hangzhou", false)
    }

    #[tokio::test]
    async fn env_keys_win_over_rrsa() {
        let provider = default_chain(
            &env(&[
                (ENV_ACCESS_KEY_ID, "AKID"),
                (ENV_ACCESS_KEY_SECRET, "very-secret-value"),
                (ENV_SECURITY_TOKEN, "token-value"),
                (ENV_ROLE_ARN, "acs:ram::1:role/x"),
                (ENV_OIDC_PROVIDER_ARN, "acs:ram::1:oidc-provider/y"),
                (ENV_OIDC_TOKEN_FILE, "/nonexistent"),
            ]),
            endpoints(),
        )
        .unwrap();
        let creds = provider.credentials().await.unwrap();
        assert_eq!(creds.access_key_id, "AKID");
        assert_eq!(creds.security_token.unwrap().expose(), "token-value");
        assert!(!format!("{provider:?}").contains("very-secret-value"));
    }

    #[test]
    fn rrsa_is_chosen_when_all_three_variables_are_set() {
        let provider = default_chain(
            &env(&[
                (ENV_ROLE_ARN, "acs:ram::1:role/x"),
                (ENV_OIDC_PROVIDER_ARN, "acs:ram::1:oidc-provider/y"),
                (ENV_OIDC_TOKEN_FILE, "/var/run/token"),
            ]),
            endpoints(),
        )
        .unwrap();
        assert!(format!("{provider:?}").starts_with("RrsaProvider"));
    }

    #[test]
    fn ecs_role_is_the_fallback_unless_disabled() {
        let provider =
            default_chain(&env(&[(ENV_ACCESS_KEY_ID, "only-half")]), endpoints()).unwrap();
        assert!(format!("{provider:?}").starts_with("EcsRamRoleProvider"));
        let err =
            default_chain(&env(&[(ENV_ECS_METADATA_DISABLED, "true")]), endpoints()).unwrap_err();
        assert!(err.to_string().contains(ENV_ACCESS_KEY_ID));
    }

    #[test]
    fn credentials_debug_hides_secret_and_token() {
        let creds = Credentials {
            access_key_id: "AKID".into(),
            access_key_secret: Secret::new("the-secret-123"),
            security_token: Some(Secret::new("the-token-456")),
        };
        let text = format!("{creds:?}");
        assert!(text.contains("AKID"));
        assert!(!text.contains("the-secret-123") && !text.contains("the-token-456"));
    }
}
