//! Client configuration: region, endpoints, signer, retry and rate limits.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::retry::{RateLimit, RetryPolicy};
use crate::sign::SignatureVersion;

pub const CLB_API_VERSION: &str = "2014-05-15";
pub const NLB_API_VERSION: &str = "2022-04-30";
pub const ECS_API_VERSION: &str = "2014-05-26";
pub const VPC_API_VERSION: &str = "2016-04-28";
/// The billing method of a CLB created with neither a Service's spec nor a configured
/// one. Pay-by-specification instances are no longer sold (from 2025-06-01 on the
/// international site, 2026-01-01 on the China site), so pay-by-CLCU is what any
/// account can still create; it has no spec and takes ENI and ECI backends.
pub const DEFAULT_CLB_CHARGE_TYPE: &str = "PayByCLCU";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Product {
    Clb,
    Nlb,
}

impl Product {
    pub fn api_version(self) -> &'static str {
        Service::from(self).api_version()
    }
}

/// Every Alibaba Cloud API this crate calls: the two load-balancer products, and ECS
/// and VPC, which map pod IPs to ENIs and tell the VPC's CIDR blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    Clb,
    Nlb,
    Ecs,
    Vpc,
}

impl From<Product> for Service {
    fn from(product: Product) -> Self {
        match product {
            Product::Clb => Service::Clb,
            Product::Nlb => Service::Nlb,
        }
    }
}

impl Service {
    /// `<prefix>.<region>.aliyuncs.com`, and `<prefix>-vpc.<region>...` inside a VPC.
    fn endpoint_prefix(self) -> &'static str {
        match self {
            Service::Clb => "slb",
            Service::Nlb => "nlb",
            Service::Ecs => "ecs",
            Service::Vpc => "vpc",
        }
    }

    /// `clb`, `nlb`, `ecs` or `vpc`: how metrics and logs name it.
    pub fn label(self) -> &'static str {
        match self {
            Service::Clb => "clb",
            Service::Nlb => "nlb",
            Service::Ecs => "ecs",
            Service::Vpc => "vpc",
        }
    }

    pub fn api_version(self) -> &'static str {
        match self {
            Service::Clb => CLB_API_VERSION,
            Service::Nlb => NLB_API_VERSION,
            Service::Ecs => ECS_API_VERSION,
            Service::Vpc => VPC_API_VERSION,
        }
    }
}

/// Public endpoints work from anywhere; VPC endpoints only from inside the VPC, but
/// need no internet egress (what a cluster node usually has).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Network {
    #[default]
    Public,
    Vpc,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scheme {
    #[default]
    Https,
    /// Only for the emulator and other local tests.
    Http,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Https => "https",
            Scheme::Http => "http",
        }
    }
}

impl std::str::FromStr for Scheme {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "https" => Ok(Scheme::Https),
            "http" => Ok(Scheme::Http),
            other => Err(format!("unknown scheme {other:?} (want http or https)")),
        }
    }
}

/// How long to wait for NLB asynchronous jobs.
#[derive(Clone, Debug)]
pub struct JobPolicy {
    pub poll_interval: Duration,
    /// A job still running after this is reported as [`Error::JobTimedOut`].
    pub timeout: Duration,
}

impl Default for JobPolicy {
    fn default() -> Self {
        Self {
            poll_interval: Duration::from_secs(1),
            timeout: Duration::from_secs(120),
        }
    }
}

#[derive(Clone, Debug)]
pub struct ClientConfig {
    pub region: String,
    pub network: Network,
    pub scheme: Scheme,
    /// `host[:port]` replacing the regional CLB endpoint (env
    /// `ALIBABA_CLOUD_SLB_ENDPOINT` in the controller).
    pub clb_endpoint: Option<String>,
    /// `host[:port]` replacing the regional NLB endpoint (`ALIBABA_CLOUD_NLB_ENDPOINT`).
    pub nlb_endpoint: Option<String>,
    /// `host[:port]` replacing the regional ECS endpoint.
    pub ecs_endpoint: Option<String>,
    /// `host[:port]` replacing the regional VPC endpoint.
    pub vpc_endpoint: Option<String>,
    /// `LoadBalancerSpec` of pay-by-spec CLB instances we create when the Service
    /// asks for `PayBySpec` and names no spec. Every other instance is pay-by-CLCU
    /// ([`DEFAULT_CLB_CHARGE_TYPE`]), which has no spec and takes ENI backends.
    pub clb_spec: Option<String>,
    pub signature: SignatureVersion,
    pub retry: RetryPolicy,
    pub rate_limit: RateLimit,
    /// Keep each action under its own quota as well (`action_quotas`): on unless the
    /// account's quotas were raised.
    pub action_quotas: bool,
    pub jobs: JobPolicy,
    pub request_timeout: Duration,
}

impl ClientConfig {
    pub fn new(region: impl Into<String>) -> Self {
        Self {
            region: region.into(),
            network: Network::default(),
            scheme: Scheme::default(),
            clb_endpoint: None,
            nlb_endpoint: None,
            ecs_endpoint: None,
            vpc_endpoint: None,
            clb_spec: None,
            signature: SignatureVersion::default(),
            retry: RetryPolicy::default(),
            rate_limit: RateLimit::default(),
            action_quotas: true,
            jobs: JobPolicy::default(),
            request_timeout: Duration::from_secs(15),
        }
    }

    /// Every service at one local `host:port` over plain HTTP: the emulator, in tests
    /// and the demo. Every field is spelled out (no `..`), so an endpoint added later
    /// must be set here too; a service left on its regional endpoint would send a
    /// test's requests to the real cloud.
    pub fn for_local_endpoint(region: impl Into<String>, endpoint: &str) -> Self {
        let base = Self::new(region);
        Self {
            region: base.region,
            network: base.network,
            scheme: Scheme::Http,
            clb_endpoint: Some(endpoint.to_string()),
            nlb_endpoint: Some(endpoint.to_string()),
            ecs_endpoint: Some(endpoint.to_string()),
            vpc_endpoint: Some(endpoint.to_string()),
            clb_spec: base.clb_spec,
            signature: base.signature,
            retry: base.retry,
            rate_limit: base.rate_limit,
            action_quotas: base.action_quotas,
            jobs: base.jobs,
            request_timeout: base.request_timeout,
        }
    }

    /// `host[:port]` for the product or service: the override if set, else the
    /// regional one.
    pub fn endpoint_host(&self, service: impl Into<Service>) -> Result<String> {
        let service = service.into();
        let overridden = match service {
            Service::Clb => &self.clb_endpoint,
            Service::Nlb => &self.nlb_endpoint,
            Service::Ecs => &self.ecs_endpoint,
            Service::Vpc => &self.vpc_endpoint,
        };
        if let Some(host) = overridden.as_deref().filter(|h| !h.is_empty()) {
            // Accept a pasted URL as well as a bare host.
            let host = host
                .trim_start_matches("https://")
                .trim_start_matches("http://")
                .trim_end_matches('/');
            return Ok(host.to_string());
        }
        if self.region.is_empty()
            || !self
                .region
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            return Err(Error::Config(format!("invalid region {:?}", self.region)));
        }
        let network = match self.network {
            Network::Public => "",
            Network::Vpc => "-vpc",
        };
        Ok(format!(
            "{}{network}.{}.aliyuncs.com",
            service.endpoint_prefix(),
            self.region
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The emulator's config leaves no service on its regional endpoint.
    #[test]
    fn a_local_endpoint_takes_every_service() {
        let config = ClientConfig::for_local_endpoint("cn-hangzhou", "127.0.0.1:9");
        for service in [Service::Clb, Service::Nlb, Service::Ecs, Service::Vpc] {
            let host = config.endpoint_host(service).unwrap();
            assert_eq!(host, "127.0.0.1:9", "{service:?}");
        }
        assert_eq!(config.scheme, Scheme::Http);
    }

    #[test]
    fn regional_public_and_vpc_endpoints() {
        let mut config = ClientConfig::new("cn-hangzhou");
        assert_eq!(
            config.endpoint_host(Product::Clb).unwrap(),
            "slb.cn-hangzhou.aliyuncs.com"
        );
        assert_eq!(
            config.endpoint_host(Product::Nlb).unwrap(),
            "nlb.cn-hangzhou.aliyuncs.com"
        );
        config.network = Network::Vpc;
        assert_eq!(
            config.endpoint_host(Product::Clb).unwrap(),
            "slb-vpc.cn-hangzhou.aliyuncs.com"
        );
        assert_eq!(
            config.endpoint_host(Product::Nlb).unwrap(),
            "nlb-vpc.cn-hangzhou.aliyuncs.com"
        );
        assert_eq!(
            config.endpoint_host(Service::Ecs).unwrap(),
            "ecs-vpc.cn-hangzhou.aliyuncs.com"
        );
        assert_eq!(
            config.endpoint_host(Service::Vpc).unwrap(),
            "vpc-vpc.cn-hangzhou.aliyuncs.com"
        );
        config.network = Network::Public;
        assert_eq!(
            config.endpoint_host(Service::Ecs).unwrap(),
            "ecs.cn-hangzhou.aliyuncs.com"
        );
        assert_eq!(
            config.endpoint_host(Service::Vpc).unwrap(),
            "vpc.cn-hangzhou.aliyuncs.com"
        );
    }

    #[test]
    fn override_wins_and_tolerates_a_scheme_prefix() {
        let mut config = ClientConfig::new("cn-hangzhou");
        config.nlb_endpoint = Some("http://127.0.0.1:8080/".into());
        assert_eq!(
            config.endpoint_host(Product::Nlb).unwrap(),
            "127.0.0.1:8080"
        );
        assert_eq!(
            config.endpoint_host(Product::Clb).unwrap(),
            "slb.cn-hangzhou.aliyuncs.com"
        );
    }

    #[test]
    fn a_region_that_would_forge_a_host_is_rejected() {
        let config = ClientConfig::new("evil.example.com/x");
        assert!(matches!(
            config.endpoint_host(Product::Clb),
            Err(Error::Config(_))
        ));
    }
}
