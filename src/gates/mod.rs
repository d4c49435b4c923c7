//! The load-balancer readiness-gate controller: a pod's
//! `service.readiness.alibabacloud.com/<svc>` condition turns True only once the
//! Service's CLB/NLB has it registered and healthy on every port.
//!
//! observe (Service, shared pod store, cloud groups and health) -> `plan` (pure) ->
//! apply (backend changes, condition writes on pods/status, Events).
pub mod cloud;
pub mod controller;
pub mod metrics;
pub mod plan;
pub mod pods;
pub mod poller;
pub mod reasons;
pub mod service;

use std::sync::Arc;

use alibaba_lb::credentials::{default_chain, process_env, CredentialEndpoints};
use alibaba_lb::{ClientConfig, LoadBalancerBackends, Network, Product, RateLimit};

use crate::cli::{CloudNetwork, GateArgs};
use controller::GateSettings;

/// The CLB and NLB clients.
pub type CloudClients = (Arc<dyn LoadBalancerBackends>, Arc<dyn LoadBalancerBackends>);

/// The clients and settings from the flags; `None` when no region is set (the
/// controller is off and makes no cloud call).
pub fn from_args(args: &GateArgs) -> anyhow::Result<Option<(CloudClients, GateSettings)>> {
    let Some(region) = args.cloud_region.clone().filter(|r| !r.is_empty()) else {
        return Ok(None);
    };
    if args.cloud_rate_limit.is_nan() || args.cloud_rate_limit <= 0.0 {
        anyhow::bail!(
            "--cloud-rate-limit must be above 0, got {}",
            args.cloud_rate_limit
        );
    }
    let mut config = ClientConfig::new(region.clone());
    config.network = match args.cloud_network {
        CloudNetwork::Vpc => Network::Vpc,
        CloudNetwork::Public => Network::Public,
    };
    config.scheme = args.cloud_scheme;
    config.clb_endpoint = args.clb_endpoint.clone();
    config.nlb_endpoint = args.nlb_endpoint.clone();
    config.rate_limit = RateLimit {
        per_second: args.cloud_rate_limit,
        burst: (args.cloud_rate_limit * 2.0).ceil() as u32,
    };
    let endpoints = CredentialEndpoints::for_region(&region, config.network == Network::Vpc);
    let credentials = default_chain(&process_env(), endpoints)?;
    let clb = alibaba_lb::new_client(Product::Clb, &config, credentials.clone())?;
    let nlb = alibaba_lb::new_client(Product::Nlb, &config, credentials)?;
    let settings = GateSettings {
        cluster_id: args.cluster_id.clone(),
        classes: args.load_balancer_classes,
        drain: args.gate_drain_time,
        vpc_id: args.cloud_vpc_id.clone(),
        concurrency: args.gate_concurrency.max(1),
        poll_fast: args
            .health_poll_fast
            .max(std::time::Duration::from_millis(100)),
        poll_slow: args.health_poll_slow.max(args.health_poll_fast),
        namespace: None,
    };
    Ok(Some(((clb, nlb), settings)))
}
