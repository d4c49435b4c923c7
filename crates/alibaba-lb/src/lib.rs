//! Alibaba Cloud load-balancer client for the readiness-gate controller.
//!
//! [`LoadBalancerBackends`] is what the controller uses; [`ClbClient`] (SLB API
//! 2014-05-15) and [`NlbClient`] (NLB API 2022-04-30) implement it. [`VpcNetwork`]
//! (ECS 2014-05-26, VPC 2016-04-28) maps pod IPs to the ENIs that hold them and reads
//! the VPC's CIDR blocks, for ENI backends. Requests are
//! signed with `ACS3-HMAC-SHA256` by default or RPC V1 HMAC-SHA1
//! ([`SignatureVersion`]); throttling and 5xx answers are retried with jittered
//! backoff under a client-side token bucket; NLB asynchronous jobs are awaited and a
//! failed or timed-out job is an error.

pub mod action_quotas;
mod backends;
pub mod clb;
pub mod config;
pub mod credentials;
pub mod encode;
pub mod error;
pub mod http;
pub mod limits;
mod model;
pub mod network;
pub mod nlb;
pub mod retry;
pub mod secret;
pub mod settings;
pub mod sign;
pub mod transport;

pub use backends::LoadBalancerBackends;
pub use clb::ClbClient;
pub use config::{ClientConfig, JobPolicy, Network, Product, Scheme, Service};
pub use credentials::{CredentialProvider, Credentials, StaticCredentials};
pub use error::{Error, Result};
pub use model::*;
pub use network::{VpcCidrBlocks, VpcNetwork};
pub use nlb::NlbClient;
pub use retry::{RateLimit, RetryPolicy, Tokens};
pub use secret::Secret;
pub use settings::{
    AclType, ConnectionDrain, HealthCheck, HealthCheckType, ListenerAcl, ListenerSettings,
};
pub use sign::SignatureVersion;
pub use transport::ActionCount;

use std::sync::Arc;

/// Builds the client for `product`.
pub fn new_client(
    product: Product,
    config: &ClientConfig,
    credentials: Arc<dyn CredentialProvider>,
) -> Result<Arc<dyn LoadBalancerBackends>> {
    Ok(match product {
        Product::Clb => Arc::new(ClbClient::new(config, credentials)?),
        Product::Nlb => Arc::new(NlbClient::new(config, credentials)?),
    })
}
