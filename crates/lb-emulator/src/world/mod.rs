//! The emulated cloud: in-memory CLB and NLB resources, backends whose registration
//! and health progress with time, asynchronous NLB jobs, and a timeline of backend
//! events for tests and demos to assert on.
//!
//! This file owns the shared state: the resource records, [`World`] that holds them,
//! and what every part writes or the control endpoints read (ids, the timeline,
//! temporary keys, health overrides, the snapshot). The API handlers are in `clb` and
//! `nlb`, the ECS and VPC lookups (ENIs, elastic container instances, CIDR blocks) in
//! `ecs`, the passing of time and the NLB jobs in `simulation`, and reading and
//! checking request parameters in `params`; each adds its own `impl World` and uses
//! the state here. The checks follow the API reference and the official SDK models
//! (crates/lb-emulator/README.md has the table of rules and where each comes from).

mod acl;
mod clb;
pub mod ecs;
pub mod listener_settings;
mod nlb;
mod params;
mod simulation;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Duration;

use rand::RngExt as _;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::config::{EmulatorConfig, HealthMode};

pub type Params = BTreeMap<String, String>;

/// Tags (`Tag.N.Key`, `Tag.N.Value`) as a resource stores them, in request order.
pub type Tags = Vec<(String, String)>;

/// Health-check and drain settings as stored, by the name the read calls return them
/// under (checked by `listener_settings`).
pub type Settings = BTreeMap<String, Value>;

/// An API error as the cloud reports it.
#[derive(Debug)]
pub struct ApiError {
    pub status: u16,
    pub code: String,
    pub message: String,
}

impl ApiError {
    pub fn new(status: u16, code: &str, message: impl Into<String>) -> Self {
        Self {
            status,
            code: code.into(),
            message: message.into(),
        }
    }
    fn missing(name: &str) -> Self {
        Self::new(400, "MissingParameter", format!("The input parameter \"{name}\" that is mandatory for processing this request is not supplied."))
    }
    fn invalid(name: &str, why: impl std::fmt::Display) -> Self {
        Self::new(
            400,
            &format!("InvalidParameter.{name}"),
            format!("The parameter {name} is invalid: {why}"),
        )
    }
    /// NLB's own spelling for a missing parameter (`MissingParam.%s`, HTTP 400).
    fn nlb_missing(name: &str) -> Self {
        Self::new(
            400,
            &format!("MissingParam.{name}"),
            format!("The parameter of {name} is missing."),
        )
    }
    /// NLB's generic refusal of a parameter value (`IllegalParam`, HTTP 400).
    fn nlb_illegal(name: &str, why: impl std::fmt::Display) -> Self {
        Self::new(
            400,
            "IllegalParam",
            format!("The param of {name} is illegal: {why}"),
        )
    }
}

pub type ApiResult = Result<Value, ApiError>;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Health {
    Pending,
    Healthy,
    Unhealthy,
}

#[derive(Clone, Debug, Serialize)]
pub struct BackendRec {
    pub server_id: String,
    pub ip: String,
    pub port: u16,
    pub weight: u32,
    #[serde(rename = "type")]
    pub kind: String,
    pub description: String,
    pub registered: bool,
    pub health: Health,
    /// Set from the control endpoint; overrides simulated or probed health.
    pub forced_health: Option<bool>,
    #[serde(skip)]
    pub added_at: Instant,
    #[serde(skip)]
    pub registered_at: Option<Instant>,
    #[serde(skip)]
    pub last_probe: Option<Instant>,
    #[serde(skip)]
    pub probe_ok: bool,
}

impl BackendRec {
    fn key(&self) -> (String, String, u16) {
        (self.server_id.clone(), self.ip.clone(), self.port)
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct ClbListener {
    pub port: u16,
    pub protocol: String,
    pub vserver_group_id: String,
    pub status: String,
    /// `HealthCheckSwitch` at creation (`on` by default). Off: every backend stays
    /// `unavailable`, as the real API reports it.
    pub health_check: bool,
    /// Health-check and drain parameters as set (`listener_settings`), returned by
    /// `Describe…ListenerAttribute`.
    pub settings: Settings,
}

#[derive(Clone, Debug, Serialize)]
pub struct Clb {
    pub id: String,
    pub name: String,
    pub address: String,
    pub address_type: String,
    /// `LoadBalancerSpec` (`slb.s1.small`, ...); empty for a shared-resource instance.
    pub spec: String,
    /// `InstanceChargeType`: `PayBySpec` (default) or `PayByCLCU`.
    pub charge_type: String,
    /// `VpcId` and `VSwitchId` of an intranet instance in a VPC (empty otherwise).
    pub vpc_id: String,
    pub vswitch_id: String,
    pub listeners: Vec<ClbListener>,
    /// `Tag.N` of `CreateLoadBalancer`, returned by `DescribeLoadBalancerAttribute`.
    pub tags: Tags,
    #[serde(skip)]
    pub client_token: String,
}

impl Clb {
    /// Whether ENI and ECI backends are allowed: only on high-performance
    /// (performance-guaranteed) instances. A pay-by-spec instance without a spec is
    /// shared-resource; a pay-by-CLCU one takes no spec (SDK model of CreateLoadBalancer).
    pub fn high_performance(&self) -> bool {
        !self.spec.is_empty() || self.charge_type == "PayByCLCU"
    }
}

/// A CLB access control list (`acl`): its entries are not modelled (the emulator
/// carries no client traffic), only that it exists and which listeners name it.
#[derive(Clone, Debug, Serialize)]
pub struct AccessControlList {
    pub id: String,
    pub name: String,
    /// `ipv4` or `ipv6`.
    pub address_ip_version: String,
}

/// The VPC every emulator starts with, so a test that does not care about CIDRs
/// still has one: the whole 10.0.0.0/8 that simulated pod IPs come from.
pub const DEFAULT_VPC_ID: &str = "vpc-emulator";
pub const DEFAULT_VPC_CIDR: &str = "10.0.0.0/8";

/// A VPC of the emulated account, with the CIDR blocks `DescribeVpcAttribute` reports.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Vpc {
    pub vpc_id: String,
    pub cidr_block: String,
    #[serde(default)]
    pub secondary_cidr_blocks: Vec<String>,
    #[serde(default)]
    pub user_cidrs: Vec<String>,
}

/// An elastic network interface and the private IPs it holds (Terway gives pods IPs
/// on ENIs). `status` as ECS reports it: `InUse` when attached to an instance.
#[derive(Clone, Debug, Serialize)]
pub struct Eni {
    pub network_interface_id: String,
    pub vpc_id: String,
    pub status: String,
    pub private_ips: Vec<String>,
    pub instance_id: String,
    pub name: String,
}

/// An elastic container instance (a pod on a virtual node) and its IP.
#[derive(Clone, Debug, Serialize)]
pub struct Eci {
    pub container_group_id: String,
    pub vpc_id: String,
    pub ip: String,
    /// `Running`, `Pending`, ... (only running servers may be added to a CLB).
    pub status: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct VServerGroup {
    pub id: String,
    pub name: String,
    pub load_balancer_id: String,
    pub backends: Vec<BackendRec>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Nlb {
    pub id: String,
    pub name: String,
    pub status: String,
    pub dns_name: String,
    pub address_type: String,
    pub vpc_id: String,
    pub zones: Vec<(String, String)>,
    /// `Tag.N` of `CreateLoadBalancer`, returned by `GetLoadBalancerAttribute`.
    pub tags: Tags,
    #[serde(skip)]
    pub active_at: Instant,
    #[serde(skip)]
    pub client_token: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct ServerGroup {
    pub id: String,
    pub name: String,
    pub group_type: String,
    pub protocol: String,
    pub vpc_id: String,
    pub backends: Vec<BackendRec>,
    /// `HealthCheckConfig.HealthCheckEnabled` at creation (true by default).
    pub health_check: bool,
    /// The rest of `HealthCheckConfig.*` as set, listed under `HealthCheck`.
    pub health_settings: Settings,
    /// The drain (`ConnectionDrainEnabled`, `ConnectionDrainTimeout`) as set.
    pub settings: Settings,
    /// `Tag.N` of `CreateServerGroup`: listed by `ListServerGroups`, which filters by them.
    pub tags: Tags,
}

#[derive(Clone, Debug, Serialize)]
pub struct NlbListener {
    pub id: String,
    pub load_balancer_id: String,
    pub port: u16,
    pub protocol: String,
    pub server_group_id: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub enum JobOutcome {
    Succeeded,
    Failed,
    /// Never leaves `Processing`: the client must give up and report it.
    Timeout,
}

#[derive(Clone, Debug)]
pub enum JobEffect {
    AddServers(String, Vec<BackendRec>),
    RemoveServers(String, Vec<(String, String, u16)>),
    UpdateServers(String, Vec<BackendRec>),
    CreateServerGroup(ServerGroup),
    CreateListener(NlbListener),
    /// `UpdateServerGroupAttribute`: the group, its health-check switch if given, and
    /// the health-check and drain settings to lay over the current ones.
    UpdateServerGroup {
        id: String,
        health_check: Option<bool>,
        health_settings: Settings,
        settings: Settings,
    },
    DeleteLoadBalancer(String),
    DeleteListener(String),
    DeleteServerGroup(String),
}

#[derive(Clone, Debug, Serialize)]
pub struct Job {
    pub id: String,
    pub action: String,
    pub status: String,
    pub outcome: JobOutcome,
    #[serde(skip)]
    pub finish_at: Instant,
    #[serde(skip)]
    pub effect: Option<JobEffect>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Event {
    /// RFC 3339 with milliseconds.
    pub at: String,
    pub product: &'static str,
    pub server_group_id: String,
    pub server_id: String,
    pub ip: String,
    pub port: u16,
    pub event: &'static str,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Faults {
    pub throttle_rate: f64,
    /// `Throttling.User` (HTTP 400) or `ServiceUnavailable` (HTTP 503).
    pub throttle_code: String,
    pub server_error_rate: f64,
    /// The next N calls of an action (by name) answered HTTP 500 `InternalError`, so
    /// that a client's retries run out on exactly the call a test names.
    #[serde(default)]
    pub fail_next: BTreeMap<String, u32>,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct JobSettings {
    pub fail_rate: f64,
    pub timeout_rate: f64,
    pub delay_ms: u64,
    /// Outcomes for the next jobs, consumed first.
    pub forced: Vec<JobOutcome>,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Timing {
    pub registration_delay_ms: u64,
    pub health_delay_ms: u64,
    /// NLB: how long a registered server stays out of `GetListenerHealthStatus`
    /// before it is first reported (0: at once, as `Initial`). Whether the real API
    /// names a just-added server at once is not documented; a test sets this to make
    /// "silent" mean "not looked at yet".
    #[serde(default)]
    pub nlb_report_delay_ms: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Stats {
    pub requests: u64,
    pub rejected_signatures: u64,
    pub injected_throttles: u64,
    pub injected_server_errors: u64,
    pub sts_credentials_issued: u64,
    pub per_action: BTreeMap<String, u64>,
}

pub struct TemporaryKey {
    pub secret: String,
    pub token: String,
}

pub struct World {
    pub region: String,
    pub health_mode: HealthMode,
    pub timing: Timing,
    pub jobs_settings: JobSettings,
    pub faults: Faults,
    pub static_keys: HashMap<String, String>,
    pub temporary_keys: HashMap<String, TemporaryKey>,
    pub sts_duration: Duration,
    pub seen_nonces: HashSet<String>,
    pub clbs: BTreeMap<String, Clb>,
    pub vgroups: BTreeMap<String, VServerGroup>,
    pub nlbs: BTreeMap<String, Nlb>,
    pub server_groups: BTreeMap<String, ServerGroup>,
    pub listeners: BTreeMap<String, NlbListener>,
    pub vpcs: BTreeMap<String, Vpc>,
    pub enis: BTreeMap<String, Eni>,
    pub ecis: BTreeMap<String, Eci>,
    pub jobs: BTreeMap<String, Job>,
    pub timeline: Vec<Event>,
    pub stats: Stats,
    next_id: u64,
    /// Server certificate ids the account holds (HTTPS listeners name one), filled
    /// by `POST /_emulator/server-certificates`.
    pub server_certificates: BTreeSet<String>,
    /// CLB access control lists (`CreateAccessControlList`), by id.
    pub acls: BTreeMap<String, AccessControlList>,
    /// Instance and attachment quotas of the account (`account_quotas`).
    pub quotas: crate::account_quotas::AccountQuotas,
    /// The first answer to each (action, `ClientToken`) of the creates that remember
    /// their tokens (NLB server groups and listeners).
    pub client_tokens: HashMap<(String, String), Value>,
}

fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

impl World {
    /// Refuses when `in_use + adding` passes the account quota `name` (400
    /// `QuotaExceeded`, the quota named in the message: fidelity rows 61, 62).
    fn check_quota(
        &self,
        name: &str,
        in_use: usize,
        adding: usize,
        what: &str,
    ) -> Result<(), ApiError> {
        self.quotas
            .check(name, in_use, adding, what)
            .map_err(|message| ApiError::new(400, "QuotaExceeded", message))
    }

    pub fn new(config: &EmulatorConfig) -> Self {
        Self {
            region: config.region.clone(),
            health_mode: config.health_mode,
            timing: Timing {
                registration_delay_ms: config.registration_delay.as_millis() as u64,
                health_delay_ms: config.health_delay.as_millis() as u64,
                nlb_report_delay_ms: 0,
            },
            jobs_settings: JobSettings {
                fail_rate: config.job_fail_rate,
                timeout_rate: config.job_timeout_rate,
                delay_ms: config.job_delay.as_millis() as u64,
                forced: vec![],
            },
            faults: Faults {
                throttle_rate: config.throttle_rate,
                throttle_code: config.throttle_code.clone(),
                server_error_rate: config.server_error_rate,
                fail_next: BTreeMap::new(),
            },
            static_keys: config.access_keys.iter().cloned().collect(),
            temporary_keys: HashMap::new(),
            sts_duration: config.sts_duration,
            seen_nonces: HashSet::new(),
            clbs: BTreeMap::new(),
            vgroups: BTreeMap::new(),
            nlbs: BTreeMap::new(),
            server_groups: BTreeMap::new(),
            listeners: BTreeMap::new(),
            vpcs: BTreeMap::from([(
                DEFAULT_VPC_ID.to_string(),
                Vpc {
                    vpc_id: DEFAULT_VPC_ID.into(),
                    cidr_block: DEFAULT_VPC_CIDR.into(),
                    secondary_cidr_blocks: vec![],
                    user_cidrs: vec![],
                },
            )]),
            enis: BTreeMap::new(),
            ecis: BTreeMap::new(),
            jobs: BTreeMap::new(),
            timeline: Vec::new(),
            stats: Stats::default(),
            next_id: 1,
            server_certificates: BTreeSet::new(),
            acls: BTreeMap::new(),
            quotas: config.account_quotas.clone(),
            client_tokens: HashMap::new(),
        }
    }

    pub fn new_id(&mut self, prefix: &str) -> String {
        let id = self.next_id;
        self.next_id += 1;
        format!("{prefix}-emu{id:06}")
    }

    fn event(
        &mut self,
        product: &'static str,
        group: &str,
        b: &BackendRec,
        event: &'static str,
        detail: String,
    ) {
        tracing::info!(product, group, server_id = %b.server_id, ip = %b.ip, port = b.port, event, detail, "backend event");
        self.timeline.push(Event {
            at: now_rfc3339(),
            product,
            server_group_id: group.to_string(),
            server_id: b.server_id.clone(),
            ip: b.ip.clone(),
            port: b.port,
            event,
            detail,
        });
    }

    /// Issues temporary credentials (STS or instance metadata) the emulator will accept.
    pub fn issue_temporary_key(&mut self) -> Value {
        let id = format!("STS.{}", self.new_id("key"));
        let mut rng = rand::rng();
        let secret = hex::encode(rng.random::<[u8; 16]>());
        let token = format!("CAIS{}", hex::encode(rng.random::<[u8; 24]>()));
        let expires = jiff::Timestamp::now()
            .saturating_add(jiff::SignedDuration::try_from(self.sts_duration).unwrap_or_default())
            .unwrap_or(jiff::Timestamp::MAX);
        self.temporary_keys.insert(
            id.clone(),
            TemporaryKey {
                secret: secret.clone(),
                token: token.clone(),
            },
        );
        self.stats.sts_credentials_issued += 1;
        json!({
            "AccessKeyId": id,
            "AccessKeySecret": secret,
            "SecurityToken": token,
            "Expiration": expires.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        })
    }

    fn new_backend(
        &self,
        server_id: String,
        ip: String,
        port: u16,
        weight: u32,
        kind: String,
        description: String,
    ) -> BackendRec {
        BackendRec {
            server_id,
            ip,
            port,
            weight,
            kind,
            description,
            registered: false,
            health: Health::Pending,
            forced_health: None,
            added_at: Instant::now(),
            registered_at: None,
            last_probe: None,
            probe_ok: false,
        }
    }

    /// Sets or clears (`None`) a health override for every backend at ip:port.
    pub fn force_health(&mut self, ip: &str, port: u16, healthy: Option<bool>) -> usize {
        let mut count = 0;
        for b in self
            .vgroups
            .values_mut()
            .flat_map(|g| g.backends.iter_mut())
            .chain(
                self.server_groups
                    .values_mut()
                    .flat_map(|g| g.backends.iter_mut()),
            )
        {
            if b.ip == ip && b.port == port {
                b.forced_health = healthy;
                count += 1;
            }
        }
        count
    }

    pub fn snapshot(&self) -> Value {
        json!({
            "region": self.region,
            "timing": self.timing,
            "faults": self.faults,
            "jobs_settings": self.jobs_settings,
            "clb": {
                "load_balancers": self.clbs.values().collect::<Vec<_>>(),
                "vserver_groups": self.vgroups.values().collect::<Vec<_>>(),
                "server_certificates": self.server_certificates,
                "access_control_lists": self.acls.values().collect::<Vec<_>>(),
            },
            "nlb": {
                "load_balancers": self.nlbs.values().collect::<Vec<_>>(),
                "server_groups": self.server_groups.values().collect::<Vec<_>>(),
                "listeners": self.listeners.values().collect::<Vec<_>>(),
                "jobs": self.jobs.values().collect::<Vec<_>>(),
            },
            "ecs": {
                "vpcs": self.vpcs.values().collect::<Vec<_>>(),
                "network_interfaces": self.enis.values().collect::<Vec<_>>(),
                "container_groups": self.ecis.values().collect::<Vec<_>>(),
            },
            "stats": self.stats,
        })
    }
}
