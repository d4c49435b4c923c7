//! Sends one signed API call, with rate limiting and retries, and turns the answer
//! into a typed body or an [`Error`] naming the action and RequestId.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::de::DeserializeOwned;

use crate::action_quotas::quota_of;
use crate::config::{ClientConfig, Service};
use crate::credentials::CredentialProvider;
use crate::error::Result;
use crate::http::{build_http_client, decode_error, new_nonce, request_id_of, send, utc_timestamp};
use crate::retry::{RetryPolicy, TokenBucket};
use crate::sign::{sign, SignatureVersion, UnsignedRequest};

pub type Params = Vec<(String, String)>;

/// A decoded answer and the RequestId that produced it.
#[derive(Debug)]
pub struct Answer<T> {
    pub body: T,
    pub request_id: String,
}

/// One action's calls and throttling answers so far, each retry included.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ActionCount {
    pub action: String,
    pub calls: u64,
    pub throttled: u64,
}

/// One action's bucket (none when action quotas are off) and counts.
#[derive(Debug)]
struct ActionState {
    bucket: Option<Arc<TokenBucket>>,
    calls: u64,
    throttled: u64,
}

#[derive(Debug)]
pub struct ApiClient {
    http: reqwest::Client,
    base_url: String,
    host: String,
    version: &'static str,
    signature: SignatureVersion,
    credentials: Arc<dyn CredentialProvider>,
    retry: RetryPolicy,
    limiter: Arc<TokenBucket>,
    /// Throttling answers received, retried ones included: a caller's scheduler reads
    /// it to slow down before the retries run out.
    throttled: AtomicU64,
    /// Calls sent (or waiting on the rate limiter to be sent), each retry included: a
    /// caller's scheduler counts them against its budget, whatever made them.
    calls: AtomicU64,
    service: Service,
    /// Whether each action keeps to its own quota (`ClientConfig::action_quotas`).
    action_quotas: bool,
    actions: Mutex<BTreeMap<String, ActionState>>,
}

impl ApiClient {
    pub fn new(
        config: &ClientConfig,
        service: impl Into<Service>,
        credentials: Arc<dyn CredentialProvider>,
    ) -> Result<Self> {
        let service = service.into();
        let host = config.endpoint_host(service)?;
        Ok(Self {
            http: build_http_client(config.request_timeout)?,
            base_url: format!("{}://{host}/", config.scheme.as_str()),
            host,
            version: service.api_version(),
            signature: config.signature,
            credentials,
            retry: config.retry.clone(),
            limiter: Arc::new(TokenBucket::new(config.rate_limit)),
            throttled: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            service,
            action_quotas: config.action_quotas,
            actions: Mutex::default(),
        })
    }

    /// Calls and throttling answers per action so far, in action order.
    pub fn action_counts(&self) -> Vec<ActionCount> {
        let actions = self.actions.lock().expect("action counts lock");
        actions
            .iter()
            .map(|(action, state)| ActionCount {
                action: action.clone(),
                calls: state.calls,
                throttled: state.throttled,
            })
            .collect()
    }

    /// Counts one call of `action` (and a throttling answer to it, when `throttled`);
    /// the first call makes the action's bucket. Returns the bucket to wait on.
    fn count(&self, action: &str, throttled: bool) -> Option<Arc<TokenBucket>> {
        let mut actions = self.actions.lock().expect("action counts lock");
        let state = actions
            .entry(action.to_string())
            .or_insert_with(|| ActionState {
                bucket: self.action_quotas.then(|| {
                    Arc::new(TokenBucket::new(
                        quota_of(self.service, action).client_limit(),
                    ))
                }),
                calls: 0,
                throttled: 0,
            });
        if throttled {
            state.throttled += 1;
        } else {
            state.calls += 1;
        }
        state.bucket.clone()
    }

    /// Throttling answers received so far (each retry's included).
    pub fn throttled_answers(&self) -> u64 {
        self.throttled.load(Ordering::Relaxed)
    }

    /// Calls made so far (each retry included).
    pub fn calls_made(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Calls `action`, retrying throttling, 5xx and transport failures with backoff.
    /// `form` parameters go in the body, `query` ones in the URL.
    pub async fn call<T: DeserializeOwned>(
        &self,
        action: &str,
        query: &[(String, String)],
        form: &[(String, String)],
    ) -> Result<Answer<T>> {
        let mut attempt = 1;
        loop {
            self.calls.fetch_add(1, Ordering::Relaxed);
            if let Some(bucket) = self.count(action, false) {
                bucket.acquire().await;
            }
            let result = self.call_once(action, query, form).await;
            if let Err(error) = &result {
                if error.is_throttling() {
                    self.throttled.fetch_add(1, Ordering::Relaxed);
                    self.count(action, true);
                }
            }
            match result {
                Ok(answer) => return Ok(answer),
                Err(error) if error.is_retryable() && attempt < self.retry.max_attempts => {
                    let delay = self.retry.delay(attempt);
                    tracing::warn!(
                        action,
                        attempt,
                        delay_ms = delay.as_millis() as u64,
                        error = %error,
                        "retrying cloud API call"
                    );
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                Err(error) => return Err(error),
            }
        }
    }

    async fn call_once<T: DeserializeOwned>(
        &self,
        action: &str,
        query: &[(String, String)],
        form: &[(String, String)],
    ) -> Result<Answer<T>> {
        self.limiter.acquire().await;
        let credentials = self.credentials.credentials().await?;
        let signed = sign(
            self.signature,
            UnsignedRequest {
                method: "POST",
                host: &self.host,
                action,
                version: self.version,
                query: query.to_vec(),
                form: form.to_vec(),
                timestamp: utc_timestamp(),
                nonce: new_nonce(),
            },
            &credentials,
        );
        let url = format!("{}?{}", self.base_url, signed.query_string);
        let mut request = self.http.post(url).body(signed.body);
        for (name, value) in &signed.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let body = send(action, request).await?;
        let value: serde_json::Value =
            serde_json::from_slice(&body).map_err(|e| decode_error(action, &body, e))?;
        let request_id = request_id_of(&value);
        tracing::debug!(action, request_id, "cloud API call succeeded");
        let body = serde_json::from_value(value).map_err(|e| decode_error(action, &body, e))?;
        Ok(Answer { body, request_id })
    }
}

/// Helper to build parameter lists tersely.
pub fn params<const N: usize>(pairs: [(&str, String); N]) -> Params {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// Accepts a JSON number or a numeric string; the APIs are not consistent.
pub mod lenient {
    use serde::{Deserialize, Deserializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum NumOrString {
        Num(i64),
        Str(String),
    }

    fn parse<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
        match Option::<NumOrString>::deserialize(d)? {
            None => Ok(None),
            Some(NumOrString::Num(n)) => Ok(Some(n)),
            Some(NumOrString::Str(s)) if s.is_empty() => Ok(None),
            Some(NumOrString::Str(s)) => s.parse().map(Some).map_err(serde::de::Error::custom),
        }
    }

    pub fn u16<'de, D: Deserializer<'de>>(d: D) -> Result<u16, D::Error> {
        let n = parse(d)?.unwrap_or_default();
        u16::try_from(n).map_err(serde::de::Error::custom)
    }

    pub fn u32<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
        let n = parse(d)?.unwrap_or_default();
        u32::try_from(n).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lenient_numbers_accept_strings_and_numbers() {
        #[derive(serde::Deserialize)]
        struct S {
            #[serde(deserialize_with = "lenient::u16")]
            a: u16,
            #[serde(deserialize_with = "lenient::u32")]
            b: u32,
        }
        let s: S = serde_json::from_str(r#"{"a":"80","b":100}"#).unwrap();
        assert_eq!((s.a, s.b), (80, 100));
    }
}
