//! The one error type of this crate. Every variant that comes from a cloud call names
//! the action, and the RequestId whenever the cloud returned one, so an operator can
//! hand it to Alibaba Cloud support. No variant ever carries a credential.

use std::time::Duration;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Shown where the cloud did not answer (connection refused, timeout) and so no
/// RequestId exists.
pub const NO_REQUEST_ID: &str = "none";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The cloud answered with an error document (`Code`, `Message`, `RequestId`).
    #[error("{action} failed: {code} (HTTP {status}): {message} [RequestId {request_id}]")]
    Api {
        action: String,
        status: u16,
        code: String,
        message: String,
        request_id: String,
    },

    /// No usable HTTP answer: connect error, timeout, broken body.
    #[error(
        "{action} failed before the cloud answered: {detail} [RequestId {}]",
        NO_REQUEST_ID
    )]
    Transport { action: String, detail: String },

    /// The cloud answered 2xx but the body was not what the API documents.
    #[error("{action} returned an unreadable response: {detail} [RequestId {request_id}]")]
    Decode {
        action: String,
        request_id: String,
        detail: String,
    },

    /// An NLB asynchronous job ended in a state other than `Succeeded`.
    #[error("{action} job {job_id} ended with status {status} [RequestId {request_id}]")]
    JobFailed {
        action: String,
        job_id: String,
        status: String,
        request_id: String,
    },

    /// An NLB asynchronous job was still running when our patience ran out. This is
    /// an error, never a success: the change may or may not land later.
    #[error("{action} job {job_id} unfinished after {waited:?} [RequestId {request_id}]")]
    JobTimedOut {
        action: String,
        job_id: String,
        waited: Duration,
        request_id: String,
    },

    /// A named resource (load balancer, server group) does not exist.
    #[error("{action}: {what} not found [RequestId {request_id}]")]
    NotFound {
        action: String,
        what: String,
        request_id: String,
    },

    /// A resource carries the cluster tag of another cluster: it is that cluster's, and
    /// is neither adopted nor changed nor deleted.
    #[error("{action}: {what} is tagged for cluster {cluster}, not this one: left alone [RequestId {request_id}]")]
    OtherCluster {
        action: String,
        what: String,
        cluster: String,
        request_id: String,
    },

    /// No credentials could be obtained, or refreshing them failed.
    #[error("credentials unavailable: {0}")]
    Credentials(String),

    /// The client was configured in a way that cannot work.
    #[error("invalid configuration: {0}")]
    Config(String),
}

/// Error codes the cloud uses for rate limiting; all are safe to retry after a pause.
pub const THROTTLING_CODES: &[&str] = &[
    "Throttling",
    "Throttling.User",
    "Throttling.Api",
    "ServiceUnavailable",
];

/// Codes for "busy, try again": another change on the same resource is still in
/// progress (NLB `IncorrectStatus.serverGroup`, `IncorrectStatus.loadBalancer` while
/// the instance is being created or changed, `Conflict.Lock`; CLB
/// `BackendServer.configuring`) or the service is busy (`SystemBusy`, both error
/// tables). The same request succeeds once the other change is done.
pub const BUSY_CODES: &[&str] = &[
    "IncorrectStatus.serverGroup",
    "IncorrectStatus.loadBalancer",
    "Conflict.Lock",
    "BackendServer.configuring",
    "SystemBusy",
    "OperationBusy",
];

/// An API error code saying the resource asked about does not exist. Credential codes
/// (`InvalidAccessKeyId.NotFound`, ...) say the caller is unknown, never that the
/// resource is gone: taking them for "gone" would delete a finalizer with the load
/// balancer still there.
pub fn code_says_not_found(code: &str) -> bool {
    // An action the endpoint does not know (`InvalidAction.NotFound`) is not a missing
    // resource either.
    const CALLER_UNKNOWN: &[&str] = &[
        "InvalidAccessKeyId",
        "InvalidSecurityToken",
        "InvalidRamRole",
        "InvalidAction",
    ];
    if CALLER_UNKNOWN.iter().any(|prefix| code.starts_with(prefix)) {
        return false;
    }
    code.contains("NotFound") || code.contains("NotExist")
}

impl Error {
    /// Whether the same request may succeed if sent again later: throttling, busy
    /// resources, 5xx and transport failures. Signature, permission and parameter
    /// errors are final.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Api { status, code, .. } => {
                *status >= 500
                    || THROTTLING_CODES.contains(&code.as_str())
                    || BUSY_CODES.contains(&code.as_str())
            }
            Error::Transport { .. } => true,
            _ => false,
        }
    }

    /// The thing asked about does not exist (a load balancer, listener or server
    /// group deleted meanwhile): `NotFound`, or an API code saying so.
    pub fn is_not_found(&self) -> bool {
        match self {
            Error::NotFound { .. } => true,
            Error::Api { code, .. } => code_says_not_found(code),
            _ => false,
        }
    }

    /// An account quota (instances, servers per load balancer or group) is used up.
    /// The codes are not published (the references link to the error center only),
    /// so any code that names a quota counts; the message says which quota.
    pub fn is_quota_exceeded(&self) -> bool {
        matches!(self, Error::Api { code, .. } if code.to_ascii_lowercase().contains("quota"))
    }

    pub fn is_throttling(&self) -> bool {
        matches!(self, Error::Api { code, .. } if code.starts_with("Throttling"))
    }

    /// The cloud's RequestId, when there was one.
    pub fn request_id(&self) -> Option<&str> {
        match self {
            Error::Api { request_id, .. }
            | Error::Decode { request_id, .. }
            | Error::JobFailed { request_id, .. }
            | Error::JobTimedOut { request_id, .. }
            | Error::NotFound { request_id, .. }
            | Error::OtherCluster { request_id, .. } => Some(request_id),
            _ => None,
        }
    }

    /// The API action the error came from, when it came from one.
    pub fn action(&self) -> Option<&str> {
        match self {
            Error::Api { action, .. }
            | Error::Transport { action, .. }
            | Error::Decode { action, .. }
            | Error::JobFailed { action, .. }
            | Error::JobTimedOut { action, .. }
            | Error::NotFound { action, .. }
            | Error::OtherCluster { action, .. } => Some(action),
            _ => None,
        }
    }

    /// A short, bounded label for metrics (`cloud_api_errors_total{kind=...}`).
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Api { .. } if self.is_throttling() => "throttled",
            Error::Api { status, .. } if *status >= 500 => "server_error",
            Error::Api { .. } => "api_error",
            Error::Transport { .. } => "transport",
            Error::Decode { .. } => "decode",
            Error::JobFailed { .. } => "job_failed",
            Error::JobTimedOut { .. } => "job_timeout",
            Error::NotFound { .. } => "not_found",
            Error::OtherCluster { .. } => "other_cluster",
            Error::Credentials(_) => "credentials",
            Error::Config(_) => "config",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: u16, code: &str) -> Error {
        Error::Api {
            action: "AddVServerGroupBackendServers".into(),
            status,
            code: code.into(),
            message: "m".into(),
            request_id: "RID-1".into(),
        }
    }

    #[test]
    fn throttling_and_server_errors_are_retryable_others_are_not() {
        assert!(api(400, "Throttling.User").is_retryable());
        assert!(api(400, "Throttling.Api").is_retryable());
        assert!(api(400, "Throttling").is_retryable());
        assert!(api(503, "ServiceUnavailable").is_retryable());
        assert!(api(500, "InternalError").is_retryable());
        assert!(!api(400, "SignatureDoesNotMatch").is_retryable());
        assert!(api(400, "IncorrectStatus.serverGroup").is_retryable());
        assert!(api(400, "IncorrectStatus.loadBalancer").is_retryable());
        assert!(api(400, "BackendServer.configuring").is_retryable());
        assert!(!api(400, "BackendServer.InvalidType").is_retryable());
        assert!(!api(400, "Mismatch.ServerType").is_retryable());
        assert!(!api(404, "InvalidAccessKeyId.NotFound").is_retryable());
    }

    #[test]
    fn only_a_missing_resource_is_not_found_never_an_unknown_caller() {
        assert!(api(404, "InvalidLoadBalancerId.NotFound").is_not_found());
        assert!(api(400, "ResourceNotFound.loadBalancer").is_not_found());
        assert!(api(400, "VServerGroupId.NotExist").is_not_found());
        assert!(!api(404, "InvalidAccessKeyId.NotFound").is_not_found());
        assert!(!api(400, "InvalidSecurityToken.Expired").is_not_found());
        assert!(!api(403, "Forbidden.RAM").is_not_found());
        assert!(!api(404, "InvalidAction.NotFound").is_not_found());
        assert!(!api(503, "ServiceUnavailable").is_not_found());
        assert!(Error::NotFound {
            action: "DescribeLoadBalancerAttribute".into(),
            what: "load balancer lb-1".into(),
            request_id: "R".into()
        }
        .is_not_found());
    }

    #[test]
    fn api_error_text_names_action_code_and_request_id() {
        let text = api(400, "Throttling.User").to_string();
        assert!(text.contains("AddVServerGroupBackendServers"), "{text}");
        assert!(text.contains("Throttling.User"), "{text}");
        assert!(text.contains("RID-1"), "{text}");
    }

    #[test]
    fn job_errors_name_the_job_and_request() {
        let err = Error::JobTimedOut {
            action: "AddServersToServerGroup".into(),
            job_id: "job-7".into(),
            waited: Duration::from_secs(3),
            request_id: "RID-9".into(),
        };
        let text = err.to_string();
        assert!(text.contains("AddServersToServerGroup") && text.contains("job-7"));
        assert_eq!(err.request_id(), Some("RID-9"));
        assert!(!err.is_retryable());
        assert_eq!(err.metric_label(), "job_timeout");
    }
}
