//! The values the APIs accept for what users set through Service annotations, as the
//! API reference and the SDK models state them (CLB TCP/UDP listener parameters, CLB
//! `CreateLoadBalancer`, NLB `CreateServerGroup`): the controller refuses a value
//! outside them before any call. The emulator keeps its own copy on purpose: it checks
//! requests against its own reading of the API, not the client's.
use std::ops::RangeInclusive;

/// `LoadBalancerSpec` values of CLB `CreateLoadBalancer` (the SDK model).
pub const CLB_SPECS: [&str; 6] = [
    "slb.s1.small",
    "slb.s2.small",
    "slb.s2.medium",
    "slb.s3.small",
    "slb.s3.medium",
    "slb.s3.large",
];

/// `HealthCheckConnectPort`: the port the health check probes.
pub const HEALTH_CHECK_CONNECT_PORT: RangeInclusive<u32> = 1..=65535;
/// `HealthyThreshold`: successes in a row that make a backend healthy.
pub const HEALTHY_THRESHOLD: RangeInclusive<u32> = 2..=10;
/// `UnhealthyThreshold`: failures in a row that make a backend unhealthy.
pub const UNHEALTHY_THRESHOLD: RangeInclusive<u32> = 2..=10;
/// `HealthCheckInterval`, seconds between two probes.
pub const HEALTH_CHECK_INTERVAL_SECONDS: RangeInclusive<u32> = 1..=50;
/// `HealthCheckConnectTimeout`, seconds.
pub const HEALTH_CHECK_CONNECT_TIMEOUT_SECONDS: RangeInclusive<u32> = 1..=300;
/// `HealthCheckTimeout`: HTTP and HTTPS listeners' answer timeout, seconds.
pub const HEALTH_CHECK_TIMEOUT_SECONDS: RangeInclusive<u32> = 1..=300;
/// `ConnectionDrainTimeout`, seconds.
pub const CONNECTION_DRAIN_TIMEOUT_SECONDS: RangeInclusive<u32> = 10..=900;
