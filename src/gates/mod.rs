//! The load-balancer readiness-gate controller: a pod's
//! `service.readiness.alibabacloud.com/<svc>` condition turns True only once the
//! Service's CLB/NLB has it registered and healthy on every port.
//!
//! observe (Service, shared pod store, cloud groups and health) -> `plan` (pure) ->
//! apply (backend changes, condition writes on pods/status, Events).
//!
//! This module owns the controller's flags ([`GateControllerArgs`]) and makes the cloud clients
//! and settings from them ([`from_args`]).
pub mod annotation_events;
pub mod annotations;
pub mod attached;
pub mod cleanup;
pub mod cloud;
pub mod cluster_id;
pub mod conditions;
pub mod context;
pub mod controller;
pub mod eni;
pub mod inject;
pub mod lb_spec;
pub mod metrics;
pub mod model;
pub mod orphans;
pub mod plan;
pub mod pods;
pub mod poller;
pub mod published_groups;
pub mod reasons;
pub mod reconcile;
pub mod service;
pub mod service_writes;
pub mod triggers;
pub mod unwanted_wiring;
pub mod writes_in_flight;

use std::sync::Arc;
use std::time::Duration;

use alibaba_lb::credentials::{default_chain, process_env, CredentialEndpoints};
use alibaba_lb::{ClientConfig, LoadBalancerBackends, Network, Product, RateLimit, VpcNetwork};
use clap::{Args, ValueEnum};

use crate::duration_flag::parse_interval;
use controller::GateSettings;
use poller::CloudPace;
use service::ClassSelection;

/// The load-balancer readiness gates (Alibaba Cloud CLB/NLB).
#[derive(Debug, Clone, Args)]
pub struct GateControllerArgs {
    /// Region of the load balancers, e.g. `cn-hangzhou`. The readiness-gate controller
    /// runs only when it is set (so no cloud call is ever made without it).
    #[arg(long, env = "ALIBABA_CLOUD_REGION_ID")]
    pub cloud_region: Option<String>,
    /// `vpc` endpoints (`slb-vpc.<region>.aliyuncs.com`, no internet egress needed) or `public`.
    #[arg(long, env = "ROLLGATE_CLOUD_NETWORK", value_enum, default_value_t = CloudNetwork::Vpc)]
    pub cloud_network: CloudNetwork,
    /// `host[:port]` replacing the regional CLB endpoint (the emulator in tests).
    #[arg(long, env = "ALIBABA_CLOUD_SLB_ENDPOINT")]
    pub clb_endpoint: Option<String>,
    /// `host[:port]` replacing the regional NLB endpoint.
    #[arg(long, env = "ALIBABA_CLOUD_NLB_ENDPOINT")]
    pub nlb_endpoint: Option<String>,
    /// `host[:port]` replacing the regional ECS endpoint (pod IP -> ENI lookups).
    #[arg(long, env = "ALIBABA_CLOUD_ECS_ENDPOINT")]
    pub ecs_endpoint: Option<String>,
    /// `host[:port]` replacing the regional VPC endpoint (the VPC's CIDR blocks).
    #[arg(long, env = "ALIBABA_CLOUD_VPC_ENDPOINT")]
    pub vpc_endpoint: Option<String>,
    /// `https`, or `http` for a local emulator only.
    #[arg(long, env = "ROLLGATE_CLOUD_SCHEME", default_value = "https")]
    pub cloud_scheme: alibaba_lb::Scheme,
    /// Cloud calls per second per product (client-side token bucket, bursts of twice
    /// that). The gates' scheduler grants health looks within it, pending gates first
    /// (and within the quotas of a look's actions: `--cloud-action-quotas`).
    #[arg(long, env = "ROLLGATE_CLOUD_RATE_LIMIT", default_value_t = 10.0)]
    pub cloud_rate_limit: f64,
    /// Keep each cloud API action under its own quota (per account and region,
    /// published or, where none is published, assumed: docs/readiness-gates.md), at
    /// 90% of it, on top of `--cloud-rate-limit`. Turn off only when the account's
    /// quotas were raised in Quota Center.
    #[arg(long, env = "ROLLGATE_CLOUD_ACTION_QUOTAS", default_value_t = true, action = clap::ArgAction::Set)]
    pub cloud_action_quotas: bool,
    /// The cluster's VPC (`vpc-…`): required with the gates on. CLB backends are the
    /// ENIs holding pod IPs in this VPC; created load balancers go into it.
    #[arg(long, env = "ROLLGATE_CLOUD_VPC_ID")]
    pub cloud_vpc_id: Option<String>,
    /// This cluster's id, hashed into each backend's marker (`k8s/<port>/<hash>`):
    /// rollgate only ever changes backends that carry it. Default: the `kube-system`
    /// namespace's UID (unique per cluster). Markers earlier versions wrote under this
    /// id (or under `kubernetes`, the former default) are adopted once.
    #[arg(long, env = "ROLLGATE_CLUSTER_ID")]
    pub cluster_id: Option<String>,
    /// Which LoadBalancer Services rollgate manages: `standard` (no class = CLB,
    /// `alibabacloud.com/nlb` = NLB, and rollgate's own classes) or `rollgate` (only
    /// `rollgate.io/clb` and `rollgate.io/nlb`, beside Alibaba's cloud controller).
    #[arg(long, env = "ROLLGATE_LOAD_BALANCER_CLASSES", value_enum, default_value_t = ClassSelection::Standard)]
    pub load_balancer_classes: ClassSelection,
    /// How long a terminating pod's backend stays at weight 0 before it is removed
    /// (never longer than the pod's own grace period).
    #[arg(long, env = "ROLLGATE_GATE_DRAIN_TIME", default_value = "10s", value_parser = parse_interval)]
    pub gate_drain_time: Duration,
    /// Health poll interval of a Service while one of its gates is pending (or its
    /// backends were just changed). Looks are granted within `--cloud-rate-limit`, so
    /// with many Services pending the interval stretches to what the budget allows.
    #[arg(long, env = "ROLLGATE_HEALTH_POLL_FAST", default_value = "500ms", value_parser = parse_interval)]
    pub health_poll_fast: Duration,
    /// Health poll interval of a Service whose gates are all True.
    #[arg(long, env = "ROLLGATE_HEALTH_POLL_SLOW", default_value = "10s", value_parser = parse_interval)]
    pub health_poll_slow: Duration,
    /// How many Services are reconciled at the same time.
    #[arg(long, env = "ROLLGATE_GATE_CONCURRENCY", default_value_t = 8)]
    pub gate_concurrency: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CloudNetwork {
    Vpc,
    Public,
}

/// Start-up error when the gates are on without a VPC id.
pub const MISSING_VPC_ID: &str = "--cloud-vpc-id (ROLLGATE_CLOUD_VPC_ID) is required when the readiness gates are on (--cloud-region is set): CLB backends are the ENIs holding the pod IPs in the cluster's VPC. Find the id (vpc-...) in the ACK console under the cluster's Basic Information (Cluster Resources: VPC), or in the VPC console";

/// The CLB and NLB clients.
pub type CloudClients = (Arc<dyn LoadBalancerBackends>, Arc<dyn LoadBalancerBackends>);

/// The clients and settings from the flags; `None` when no region is set (the
/// controller is off and makes no cloud call).
pub fn from_args(
    args: &GateControllerArgs,
) -> anyhow::Result<Option<(CloudClients, GateSettings)>> {
    let Some(region) = args.cloud_region.clone().filter(|r| !r.is_empty()) else {
        return Ok(None);
    };
    if args.cloud_rate_limit.is_nan() || args.cloud_rate_limit <= 0.0 {
        anyhow::bail!(
            "--cloud-rate-limit must be above 0, got {}",
            args.cloud_rate_limit
        );
    }
    let Some(vpc_id) = args.cloud_vpc_id.clone().filter(|v| !v.is_empty()) else {
        anyhow::bail!("{}", MISSING_VPC_ID);
    };
    let mut config = ClientConfig::new(region.clone());
    config.network = match args.cloud_network {
        CloudNetwork::Vpc => Network::Vpc,
        CloudNetwork::Public => Network::Public,
    };
    config.scheme = args.cloud_scheme;
    config.clb_endpoint = args.clb_endpoint.clone();
    config.nlb_endpoint = args.nlb_endpoint.clone();
    config.ecs_endpoint = args.ecs_endpoint.clone();
    config.vpc_endpoint = args.vpc_endpoint.clone();
    config.rate_limit = RateLimit {
        per_second: args.cloud_rate_limit,
        burst: (args.cloud_rate_limit * 2.0).ceil() as u32,
    };
    config.action_quotas = args.cloud_action_quotas;
    let endpoints = CredentialEndpoints::for_region(&region, config.network == Network::Vpc);
    let credentials = default_chain(&process_env(), endpoints)?;
    let clb = alibaba_lb::new_client(Product::Clb, &config, credentials.clone())?;
    let network = Arc::new(VpcNetwork::new(&config, credentials.clone())?);
    let nlb = alibaba_lb::new_client(Product::Nlb, &config, credentials)?;
    let settings = GateSettings {
        // Filled in by `cluster_id::resolve` once there is a client.
        cluster_id: String::new(),
        legacy_cluster_id: None,
        classes: args.load_balancer_classes,
        drain: args.gate_drain_time,
        vpc_id: Some(vpc_id),
        network: Some(network),
        concurrency: args.gate_concurrency.max(1),
        poll_fast: args
            .health_poll_fast
            .max(std::time::Duration::from_millis(100)),
        poll_slow: args.health_poll_slow.max(args.health_poll_fast),
        cloud_pace: CloudPace {
            per_second: args.cloud_rate_limit,
            action_quotas: args.cloud_action_quotas,
        },
    };
    Ok(Some(((clb, nlb), settings)))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        gates: GateControllerArgs,
    }

    #[test]
    fn gates_on_without_a_vpc_id_fail_at_start_naming_the_flag_and_where_to_find_it() {
        let flags = Flags::try_parse_from(["rollgate", "--cloud-region", "cn-hangzhou"]).unwrap();
        let Err(error) = from_args(&flags.gates) else {
            panic!("started without --cloud-vpc-id");
        };
        let text = error.to_string();
        assert!(text.contains("--cloud-vpc-id"), "{text}");
        assert!(text.contains("ROLLGATE_CLOUD_VPC_ID"), "{text}");
        assert!(text.contains("ACK console"), "{text}");
        // Gates off: no VPC id needed.
        let off = Flags::try_parse_from(["rollgate"]).unwrap();
        if off.gates.cloud_region.is_none() {
            assert!(from_args(&off.gates).unwrap().is_none());
        }
    }
}
