//! Sends one signed API call, with rate limiting and retries, and turns the answer
//! into a typed body or an [`Error`] naming the action and RequestId.

use std::sync::Arc;
use std::time::Duration;

use rand::RngExt as _;
use serde::de::DeserializeOwned;

use crate::config::{ClientConfig, Product};
use crate::credentials::CredentialProvider;
use crate::error::{Error, Result};
use crate::retry::{RetryPolicy, TokenBucket};
use crate::sign::{sign, SignatureVersion, UnsignedRequest};

pub type Params = Vec<(String, String)>;

pub fn utc_timestamp() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// 128 random bits, hex: unique per request so the cloud can reject replays.
pub fn new_nonce() -> String {
    let bytes: [u8; 16] = rand::rng().random();
    hex::encode(bytes)
}

pub fn build_http_client(timeout: Duration) -> Result<reqwest::Client> {
    // reqwest is built without a crypto provider (its default is aws-lc-rs); use
    // ring like kube. Another component may have installed one already: fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(5)))
        .build()
        .map_err(|e| Error::Config(format!("building HTTP client: {e}")))
}

/// Never includes the URL: with RPC signing it carries the security token.
pub fn transport_error(action: &str, error: reqwest::Error) -> Error {
    Error::Transport {
        action: action.to_string(),
        detail: error.without_url().to_string(),
    }
}

fn request_id_of(value: &serde_json::Value) -> String {
    value
        .get("RequestId")
        .or_else(|| value.get("requestId"))
        .and_then(|v| v.as_str())
        .unwrap_or(crate::error::NO_REQUEST_ID)
        .to_string()
}

pub fn api_error(action: &str, status: u16, body: &[u8]) -> Error {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(value) => Error::Api {
            action: action.to_string(),
            status,
            code: value
                .get("Code")
                .and_then(|v| v.as_str())
                .unwrap_or("Unknown")
                .to_string(),
            message: value
                .get("Message")
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_string(),
            request_id: request_id_of(&value),
        },
        Err(_) => Error::Api {
            action: action.to_string(),
            status,
            code: format!("HTTP{status}"),
            message: String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
            request_id: crate::error::NO_REQUEST_ID.to_string(),
        },
    }
}

pub fn decode_error(action: &str, body: &[u8], error: serde_json::Error) -> Error {
    let request_id = serde_json::from_slice::<serde_json::Value>(body)
        .map(|v| request_id_of(&v))
        .unwrap_or_else(|_| crate::error::NO_REQUEST_ID.to_string());
    Error::Decode {
        action: action.to_string(),
        request_id,
        detail: error.to_string(),
    }
}

/// A decoded answer and the RequestId that produced it.
#[derive(Debug)]
pub struct Answer<T> {
    pub body: T,
    pub request_id: String,
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
}

impl ApiClient {
    pub fn new(
        config: &ClientConfig,
        product: Product,
        credentials: Arc<dyn CredentialProvider>,
    ) -> Result<Self> {
        let host = config.endpoint_host(product)?;
        Ok(Self {
            http: build_http_client(config.request_timeout)?,
            base_url: format!("{}://{host}/", config.scheme.as_str()),
            host,
            version: product.api_version(),
            signature: config.signature,
            credentials,
            retry: config.retry.clone(),
            limiter: Arc::new(TokenBucket::new(config.rate_limit)),
        })
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
            match self.call_once(action, query, form).await {
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
        let response = request
            .send()
            .await
            .map_err(|e| transport_error(action, e))?;
        let status = response.status().as_u16();
        let body = response
            .bytes()
            .await
            .map_err(|e| transport_error(action, e))?;
        if status >= 400 {
            return Err(api_error(action, status, &body));
        }
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
    fn api_error_reads_the_cloud_error_document() {
        let body = br#"{"RequestId":"R-1","HostId":"slb.x","Code":"Throttling.User","Message":"Request was denied due to user flow control.","Recommend":"https://x"}"#;
        let err = api_error("DescribeHealthStatus", 400, body);
        match &err {
            Error::Api {
                code,
                request_id,
                status,
                ..
            } => {
                assert_eq!(code, "Throttling.User");
                assert_eq!(request_id, "R-1");
                assert_eq!(*status, 400);
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(err.is_retryable());
    }

    #[test]
    fn api_error_survives_a_non_json_body() {
        let err = api_error("DescribeHealthStatus", 502, b"<html>bad gateway</html>");
        assert!(err.to_string().contains("HTTP502"));
        assert!(err.is_retryable());
    }

    #[test]
    fn timestamp_and_nonce_have_the_expected_shape() {
        let ts = utc_timestamp();
        assert_eq!(ts.len(), 20, "{ts}");
        assert!(ts.ends_with('Z') && ts.as_bytes()[10] == b'T');
        let (a, b) = (new_nonce(), new_nonce());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }

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
