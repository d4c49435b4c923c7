//! An in-memory emulator of the Alibaba Cloud CLB (SLB 2014-05-15) and NLB
//! (2022-04-30) APIs, the ECS (2014-05-26) and VPC (2016-04-28) lookups the
//! controller needs for ENI backends, plus the two credential sources the client
//! uses (STS `AssumeRoleWithOIDC` and ECS instance metadata v2), all on one loopback
//! port.
//!
//! Control endpoints under `/_emulator/` (JSON) read the state and the backend
//! timeline, mark backends unhealthy, set fault and job-outcome rates, and fill the
//! emulated VPC: its CIDR blocks (`vpcs`), the ENIs holding pod IPs (`enis`) and the
//! elastic container instances (`ecis`), and the server certificates HTTPS listeners
//! name (`server-certificates`). An IP no ENI holds is simply not registered.
//! `calls` reports calls and throttled calls per action; `rate-limits` turns the
//! per-action API rate limits (`quota`) on or off and sets explicit limits;
//! `call-log` lists every call with the load balancer it named (`call_log`).
//!
//! `testing` is the setup every test against the emulator shares (its key, a client
//! configuration, the control calls).
//!
//! server.rs binds and routes; dispatch.rs serves every cloud API call (signature,
//! rate limits, injected faults, then the emulated world); sts.rs and metadata.rs the
//! two credential sources; control.rs the `/_emulator/` endpoints; health_probes.rs
//! the tick that probes backends; versions.rs the API versions and their hosts;
//! state.rs what every handler shares.
pub mod account_quotas;
mod auth;
pub mod call_log;
pub mod config;
mod control;
mod dispatch;
mod health_probes;
mod metadata;
pub mod quota;
mod server;
mod state;
mod sts;
pub mod testing;
mod versions;
mod world;

use std::collections::BTreeMap;

use serde_json::Value;

pub use account_quotas::AccountQuotas;
pub use config::{EmulatorConfig, HealthMode};
pub use health_probes::probe_address;
pub use metadata::METADATA_ROLE;
pub use server::{run, serve, RunningEmulator};
pub use versions::{CLB_VERSION, ECS_VERSION, NLB_VERSION, STS_VERSION, VPC_VERSION};
pub use world::ecs::{EciRegistration, EniRegistration};
pub use world::{JobOutcome, Vpc, DEFAULT_VPC_CIDR, DEFAULT_VPC_ID};

/// Builds the configuration's access-key list from `ID:SECRET` strings.
pub fn parse_access_keys(items: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    items
        .iter()
        .map(|item| {
            item.split_once(':')
                .map(|(id, secret)| (id.to_string(), secret.to_string()))
                .filter(|(id, secret)| !id.is_empty() && !secret.is_empty())
                .ok_or_else(|| anyhow::anyhow!("access key must look like ID:SECRET"))
        })
        .collect()
}

/// Counts of what the emulator saw, for tests.
pub fn summarize(state: &Value) -> BTreeMap<String, u64> {
    state["stats"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_u64().map(|n| (k.clone(), n)))
                .collect()
        })
        .unwrap_or_default()
}
