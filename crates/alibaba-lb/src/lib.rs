//! Alibaba Cloud load-balancer client for the readiness-gate controller.
//!
//! [`LoadBalancerBackends`] is what the controller uses; [`ClbClient`] (SLB API
//! 2014-05-15) and [`NlbClient`] (NLB API 2022-04-30) implement it. Requests are
//! signed with `ACS3-HMAC-SHA256` by default or RPC V1 HMAC-SHA1
//! ([`SignatureVersion`]); throttling and 5xx answers are retried with jittered
//! backoff under a client-side token bucket; NLB asynchronous jobs are awaited and a
//! failed or timed-out job is an error.

pub mod clb;
pub mod config;
pub mod credentials;
pub mod encode;
pub mod error;
mod model;
pub mod nlb;
pub mod retry;
pub mod secret;
pub mod sign;
pub mod transport;

pub use clb::ClbClient;
pub use config::{ClientConfig, JobPolicy, Network, Product, Scheme};
pub use credentials::{CredentialProvider, Credentials, StaticCredentials};
pub use error::{Error, Result};
pub use model::*;
pub use nlb::NlbClient;
pub use retry::{RateLimit, RetryPolicy};
pub use secret::Secret;
pub use sign::SignatureVersion;

use std::sync::Arc;

/// What the readiness-gate controller needs from a cloud load balancer.
#[async_trait::async_trait]
pub trait LoadBalancerBackends: Send + Sync + std::fmt::Debug {
    fn product(&self) -> Product;

    /// Attaches to `spec.existing_id` or creates a load balancer, then makes sure
    /// each listener and its server group exist. Idempotent.
    async fn ensure_load_balancer(&self, spec: &LoadBalancerSpec) -> Result<LoadBalancer>;

    /// Deletes a load balancer we created (with its listeners).
    async fn delete_load_balancer(&self, load_balancer_id: &str) -> Result<()>;

    /// Every backend of the group, ours or not (callers filter by description).
    async fn list_backends(&self, group: &ServerGroupRef) -> Result<Vec<Backend>>;

    /// Registers backends, in batches the API accepts. Backends already present
    /// are skipped.
    async fn add_backends(&self, group: &ServerGroupRef, backends: &[Backend]) -> Result<()>;

    /// Deregisters backends, in batches.
    async fn remove_backends(&self, group: &ServerGroupRef, backends: &[BackendKey]) -> Result<()>;

    /// Sets the weight of registered backends (weight 0 drains).
    async fn set_weights(&self, group: &ServerGroupRef, backends: &[Backend]) -> Result<()>;

    /// Every backend of the group and its health, from one listing of the group and
    /// one health report: what a reconcile reads.
    async fn read_group(&self, group: &ServerGroupRef) -> Result<GroupReading>;

    /// Health of each registered backend as the load balancer sees it.
    async fn backend_health(&self, group: &ServerGroupRef) -> Result<Vec<BackendHealth>> {
        Ok(self.read_group(group).await?.health)
    }
}

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
