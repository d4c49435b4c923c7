//! What every HTTP exchange with Alibaba Cloud shares, whether a signed API call
//! (`transport`) or a credential exchange (`credentials`): the HTTP client, the
//! request timestamp and nonce, and turning a failed answer into an [`Error`] that
//! names the action and RequestId. A leaf: it knows nothing of signing or endpoints.

use std::time::Duration;

use rand::RngExt as _;

use crate::error::{Error, Result, NO_REQUEST_ID};

/// The request time every signed call and STS exchange carries: UTC, to the second.
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

pub(crate) fn request_id_of(value: &serde_json::Value) -> String {
    value
        .get("RequestId")
        .or_else(|| value.get("requestId"))
        .and_then(|v| v.as_str())
        .unwrap_or(NO_REQUEST_ID)
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
            request_id: NO_REQUEST_ID.to_string(),
        },
    }
}

/// Sends `request` and reads the whole answer's body. An answer of 400 or above is
/// the cloud's error document, returned as [`Error::Api`]; no answer at all is
/// [`Error::Transport`].
pub async fn send(
    action: &str,
    request: reqwest::RequestBuilder,
) -> Result<impl std::ops::Deref<Target = [u8]>> {
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
    Ok(body)
}

pub fn decode_error(action: &str, body: &[u8], error: serde_json::Error) -> Error {
    let request_id = serde_json::from_slice::<serde_json::Value>(body)
        .map(|v| request_id_of(&v))
        .unwrap_or_else(|_| NO_REQUEST_ID.to_string());
    Error::Decode {
        action: action.to_string(),
        request_id,
        detail: error.to_string(),
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
}
