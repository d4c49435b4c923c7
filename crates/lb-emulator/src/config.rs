//! Emulator settings, shared by the binary's flags and tests that embed it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub enum HealthMode {
    /// Backends turn healthy `health_delay` after registration.
    Simulated,
    /// Backends are healthy while a TCP connect to ip:port succeeds.
    Tcp,
}

#[derive(Clone, Debug)]
pub struct EmulatorConfig {
    pub listen: SocketAddr,
    pub region: String,
    /// (AccessKeyId, AccessKeySecret) pairs accepted for signing.
    pub access_keys: Vec<(String, String)>,
    pub registration_delay: Duration,
    pub health_delay: Duration,
    pub health_mode: HealthMode,
    pub probe_interval: Duration,
    pub job_delay: Duration,
    pub job_fail_rate: f64,
    pub job_timeout_rate: f64,
    pub throttle_rate: f64,
    pub throttle_code: String,
    pub server_error_rate: f64,
    /// Lifetime of credentials handed out by STS and instance metadata.
    pub sts_duration: Duration,
    pub tick: Duration,
    /// Enforce the per-action API rate limits (`quota::QUOTAS` plus
    /// `api_rate_limit_overrides`). Off by default: the older suites burst far past
    /// the real quotas on purpose (their clients run at 200 calls/s), and a test or
    /// bench that measures "inside the rate limits" turns it on.
    pub api_rate_limits: bool,
    /// Explicit limits, by (product, action), e.g. (`slb`, `DescribeHealthStatus`):
    /// for actions with no published quota, or to tighten one in a test.
    pub api_rate_limit_overrides: BTreeMap<(String, String), crate::quota::Limit>,
    /// The account's instance and attachment quotas (the published defaults unless a
    /// test or bench sets a larger account's).
    pub account_quotas: crate::account_quotas::AccountQuotas,
}

impl Default for EmulatorConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            region: "cn-hangzhou".into(),
            access_keys: vec![(
                "emulator-access-key-id".into(),
                "emulator-access-key-secret".into(),
            )],
            registration_delay: Duration::from_millis(200),
            health_delay: Duration::from_millis(500),
            health_mode: HealthMode::Simulated,
            probe_interval: Duration::from_millis(500),
            job_delay: Duration::from_millis(200),
            job_fail_rate: 0.0,
            job_timeout_rate: 0.0,
            throttle_rate: 0.0,
            throttle_code: "Throttling.User".into(),
            server_error_rate: 0.0,
            sts_duration: Duration::from_secs(3600),
            tick: Duration::from_millis(25),
            api_rate_limits: false,
            api_rate_limit_overrides: BTreeMap::new(),
            account_quotas: Default::default(),
        }
    }
}
