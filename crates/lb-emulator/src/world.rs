//! The emulated cloud: in-memory CLB and NLB resources, backends whose registration
//! and health progress with time, asynchronous NLB jobs, and a timeline of backend
//! events for tests and demos to assert on.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use rand::RngExt as _;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::config::{EmulatorConfig, HealthMode};

pub type Params = BTreeMap<String, String>;

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
}

#[derive(Clone, Debug, Serialize)]
pub struct Clb {
    pub id: String,
    pub name: String,
    pub address: String,
    pub address_type: String,
    pub listeners: Vec<ClbListener>,
    #[serde(skip)]
    pub client_token: String,
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
    DeleteLoadBalancer(String),
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
    pub jobs: BTreeMap<String, Job>,
    pub timeline: Vec<Event>,
    pub stats: Stats,
    next_id: u64,
}

fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

fn get<'a>(p: &'a Params, name: &str) -> Result<&'a str, ApiError> {
    p.get(name)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| ApiError::missing(name))
}

fn parse_port(p: &Params, name: &str) -> Result<u16, ApiError> {
    get(p, name)?
        .parse()
        .map_err(|e| ApiError::invalid(name, e))
}

/// `Prefix.N.Field` lists, grouped by N in order.
fn flat_list(p: &Params, prefix: &str) -> Vec<BTreeMap<String, String>> {
    let mut items: BTreeMap<u32, BTreeMap<String, String>> = BTreeMap::new();
    for (key, value) in p {
        let Some(rest) = key.strip_prefix(prefix).and_then(|r| r.strip_prefix('.')) else {
            continue;
        };
        let (index, field) = rest.split_once('.').unwrap_or((rest, ""));
        if let Ok(index) = index.parse::<u32>() {
            items
                .entry(index)
                .or_default()
                .insert(field.to_string(), value.clone());
        }
    }
    items.into_values().collect()
}

fn paginate<T: Clone>(
    items: &[T],
    p: &Params,
    default_size: usize,
) -> Result<(Vec<T>, String, usize), ApiError> {
    let size = match p.get("MaxResults").filter(|v| !v.is_empty()) {
        Some(v) => v
            .parse::<usize>()
            .map_err(|e| ApiError::invalid("MaxResults", e))?,
        None => default_size,
    };
    if !(1..=100).contains(&size) {
        return Err(ApiError::invalid("MaxResults", "must be between 1 and 100"));
    }
    let start = match p.get("NextToken").filter(|v| !v.is_empty()) {
        Some(token) => token
            .strip_prefix("page-")
            .and_then(|n| n.parse::<usize>().ok())
            .ok_or_else(|| ApiError::invalid("NextToken", "unknown token"))?,
        None => 0,
    };
    let end = (start + size).min(items.len());
    let page = items.get(start..end).unwrap_or_default().to_vec();
    let next = if end < items.len() {
        format!("page-{end}")
    } else {
        String::new()
    };
    Ok((page, next, size))
}

fn json_u32(v: &Value) -> Option<u32> {
    v.as_u64()
        .map(|n| n as u32)
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}

impl World {
    pub fn new(config: &EmulatorConfig) -> Self {
        Self {
            region: config.region.clone(),
            health_mode: config.health_mode,
            timing: Timing {
                registration_delay_ms: config.registration_delay.as_millis() as u64,
                health_delay_ms: config.health_delay.as_millis() as u64,
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
            jobs: BTreeMap::new(),
            timeline: Vec::new(),
            stats: Stats::default(),
            next_id: 1,
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

    // ---------------------------------------------------------------- time

    /// Advances registration, health, NLB provisioning and jobs to `now`.
    /// `probes` are fresh TCP results keyed by (ip, port).
    pub fn tick(&mut self, now: Instant, probes: &HashMap<(String, u16), bool>) {
        let registration_delay = Duration::from_millis(self.timing.registration_delay_ms);
        let health_delay = Duration::from_millis(self.timing.health_delay_ms);
        let mode = self.health_mode;
        let mut events: Vec<(&'static str, String, BackendRec, &'static str, String)> = vec![];
        let mut advance = |product: &'static str, group_id: &str, b: &mut BackendRec| {
            if !b.registered && now >= b.added_at + registration_delay {
                b.registered = true;
                b.registered_at = Some(now);
                events.push((
                    product,
                    group_id.to_string(),
                    b.clone(),
                    "registered",
                    String::new(),
                ));
            }
            if let Some(ok) = probes.get(&(b.ip.clone(), b.port)) {
                b.probe_ok = *ok;
                b.last_probe = Some(now);
            }
            if !b.registered {
                return;
            }
            let verdict = match (b.forced_health, mode) {
                (Some(forced), _) => Some(forced),
                (None, HealthMode::Simulated) => {
                    (now >= b.registered_at.unwrap_or(now) + health_delay).then_some(true)
                }
                (None, HealthMode::Tcp) => b.last_probe.map(|_| b.probe_ok),
            };
            let next = match verdict {
                Some(true) => Health::Healthy,
                Some(false) => Health::Unhealthy,
                None => b.health,
            };
            if next != b.health {
                b.health = next;
                let name = if next == Health::Healthy {
                    "healthy"
                } else {
                    "unhealthy"
                };
                events.push((
                    product,
                    group_id.to_string(),
                    b.clone(),
                    name,
                    String::new(),
                ));
            }
        };
        for group in self.vgroups.values_mut() {
            for b in group.backends.iter_mut() {
                advance("clb", &group.id, b);
            }
        }
        for group in self.server_groups.values_mut() {
            for b in group.backends.iter_mut() {
                advance("nlb", &group.id, b);
            }
        }
        for (product, group, b, event, detail) in events {
            self.event(product, &group, &b, event, detail);
        }
        for nlb in self.nlbs.values_mut() {
            if nlb.status == "Provisioning" && now >= nlb.active_at {
                nlb.status = "Active".into();
            }
        }
        let due: Vec<String> = self
            .jobs
            .values()
            .filter(|j| {
                j.status == "Processing" && j.outcome != JobOutcome::Timeout && now >= j.finish_at
            })
            .map(|j| j.id.clone())
            .collect();
        for id in due {
            let job = self.jobs.get_mut(&id).expect("listed above");
            let effect = job.effect.take();
            job.status = match job.outcome {
                JobOutcome::Succeeded => "Succeeded".into(),
                _ => "Failed".into(),
            };
            tracing::info!(job_id = %id, action = %job.action, status = %job.status, "job finished");
            if job.outcome == JobOutcome::Succeeded {
                if let Some(effect) = effect {
                    self.apply(effect);
                }
            }
        }
    }

    /// (ip, port) of registered backends due for a TCP probe.
    pub fn probe_targets(&self, now: Instant, interval: Duration) -> Vec<(String, u16)> {
        if self.health_mode != HealthMode::Tcp {
            return vec![];
        }
        let mut targets: HashSet<(String, u16)> = HashSet::new();
        let groups = self.vgroups.values().flat_map(|g| g.backends.iter());
        for b in groups.chain(self.server_groups.values().flat_map(|g| g.backends.iter())) {
            if b.registered && b.last_probe.is_none_or(|t| now >= t + interval) {
                targets.insert((b.ip.clone(), b.port));
            }
        }
        targets.into_iter().collect()
    }

    fn apply(&mut self, effect: JobEffect) {
        match effect {
            JobEffect::AddServers(group_id, servers) => {
                let now = Instant::now();
                let mut added = vec![];
                if let Some(group) = self.server_groups.get_mut(&group_id) {
                    for mut s in servers {
                        if group.backends.iter().any(|b| b.key() == s.key()) {
                            continue;
                        }
                        s.added_at = now;
                        added.push(s.clone());
                        group.backends.push(s);
                    }
                }
                for s in added {
                    self.event("nlb", &group_id, &s, "added", String::new());
                }
            }
            JobEffect::RemoveServers(group_id, keys) => {
                let mut removed = vec![];
                if let Some(group) = self.server_groups.get_mut(&group_id) {
                    group.backends.retain(|b| {
                        let gone = keys.contains(&b.key());
                        if gone {
                            removed.push(b.clone());
                        }
                        !gone
                    });
                }
                for b in removed {
                    self.event("nlb", &group_id, &b, "removed", String::new());
                }
            }
            JobEffect::UpdateServers(group_id, updates) => {
                let mut changed = vec![];
                if let Some(group) = self.server_groups.get_mut(&group_id) {
                    for u in updates {
                        if let Some(b) = group.backends.iter_mut().find(|b| b.key() == u.key()) {
                            if b.weight != u.weight {
                                changed.push((b.clone(), format!("{} -> {}", b.weight, u.weight)));
                                b.weight = u.weight;
                            }
                            if !u.description.is_empty() {
                                b.description = u.description.clone();
                            }
                        }
                    }
                }
                for (b, detail) in changed {
                    self.event("nlb", &group_id, &b, "weight-changed", detail);
                }
            }
            JobEffect::CreateServerGroup(group) => {
                self.server_groups.insert(group.id.clone(), group);
            }
            JobEffect::CreateListener(listener) => {
                self.listeners.insert(listener.id.clone(), listener);
            }
            JobEffect::DeleteLoadBalancer(id) => {
                self.nlbs.remove(&id);
                self.listeners.retain(|_, l| l.load_balancer_id != id);
            }
        }
    }

    fn start_job(&mut self, action: &str, effect: JobEffect) -> String {
        let id = self.new_id("job");
        let settings = &mut self.jobs_settings;
        let outcome = if !settings.forced.is_empty() {
            settings.forced.remove(0)
        } else {
            let roll: f64 = rand::rng().random();
            if roll < settings.fail_rate {
                JobOutcome::Failed
            } else if roll < settings.fail_rate + settings.timeout_rate {
                JobOutcome::Timeout
            } else {
                JobOutcome::Succeeded
            }
        };
        let finish_at = Instant::now() + Duration::from_millis(settings.delay_ms);
        tracing::info!(job_id = %id, action, ?outcome, "job started");
        self.jobs.insert(
            id.clone(),
            Job {
                id: id.clone(),
                action: action.to_string(),
                status: "Processing".into(),
                outcome,
                finish_at,
                effect: Some(effect),
            },
        );
        id
    }

    // ---------------------------------------------------------------- CLB

    pub fn clb(&mut self, action: &str, p: &Params) -> ApiResult {
        match action {
            "CreateLoadBalancer" => self.clb_create(p),
            "DescribeLoadBalancerAttribute" => self.clb_describe(p),
            "DeleteLoadBalancer" => self.clb_delete(p),
            "CreateVServerGroup" => self.clb_create_group(p),
            "DescribeVServerGroups" => self.clb_groups(p),
            "DescribeVServerGroupAttribute" => {
                let group = self.vgroup(p)?;
                Ok(json!({
                    "VServerGroupId": group.id,
                    "VServerGroupName": group.name,
                    "LoadBalancerId": group.load_balancer_id,
                    "CreateTime": "2024-01-01T00:00:00Z",
                    "BackendServers": {"BackendServer": group.backends.iter().map(clb_backend_json).collect::<Vec<_>>()},
                }))
            }
            "CreateLoadBalancerTCPListener" => self.clb_create_listener(p, "tcp"),
            "CreateLoadBalancerUDPListener" => self.clb_create_listener(p, "udp"),
            "DescribeLoadBalancerTCPListenerAttribute" => self.clb_listener_attribute(p, "tcp"),
            "DescribeLoadBalancerUDPListenerAttribute" => self.clb_listener_attribute(p, "udp"),
            "StartLoadBalancerListener" => self.clb_start_listener(p),
            "AddVServerGroupBackendServers" => self.clb_add(p),
            "RemoveVServerGroupBackendServers" => self.clb_remove(p),
            "SetVServerGroupAttribute" => self.clb_set(p),
            "DescribeHealthStatus" => self.clb_health(p),
            other => Err(ApiError::new(
                404,
                "InvalidAction.NotFound",
                format!("Specified api {other} is not found, please check your url and method."),
            )),
        }
    }

    fn clb_lb(&self, p: &Params) -> Result<&Clb, ApiError> {
        let id = get(p, "LoadBalancerId")?;
        self.clbs.get(id).ok_or_else(|| {
            ApiError::new(
                400,
                "InvalidLoadBalancerId.NotFound",
                format!("The specified LoadBalancerId {id} does not exist."),
            )
        })
    }

    fn vgroup(&self, p: &Params) -> Result<&VServerGroup, ApiError> {
        let id = get(p, "VServerGroupId")?;
        self.vgroups.get(id).ok_or_else(|| {
            ApiError::new(
                400,
                "InvalidParameter.VServerGroupId.NotFound",
                format!("The specified VServerGroupId {id} does not exist."),
            )
        })
    }

    fn clb_create(&mut self, p: &Params) -> ApiResult {
        let token = p.get("ClientToken").cloned().unwrap_or_default();
        let existing = self
            .clbs
            .values()
            .find(|lb| !token.is_empty() && lb.client_token == token)
            .cloned();
        let lb = match existing {
            Some(lb) => lb,
            None => {
                let id = self.new_id("lb");
                let n = self.clbs.len() + 10;
                let address_type = p
                    .get("AddressType")
                    .cloned()
                    .unwrap_or_else(|| "internet".into());
                let address = if address_type == "intranet" {
                    format!("192.168.0.{n}")
                } else {
                    format!("198.51.100.{n}")
                };
                let lb = Clb {
                    name: p
                        .get("LoadBalancerName")
                        .cloned()
                        .unwrap_or_else(|| id.clone()),
                    id: id.clone(),
                    address,
                    address_type,
                    listeners: vec![],
                    client_token: token,
                };
                self.clbs.insert(id, lb.clone());
                lb
            }
        };
        Ok(json!({
            "LoadBalancerId": lb.id,
            "LoadBalancerName": lb.name,
            "Address": lb.address,
            "AddressIPVersion": "ipv4",
            "NetworkType": if lb.address_type == "intranet" { "vpc" } else { "classic" },
            "VpcId": p.get("VpcId").cloned().unwrap_or_default(),
            "VSwitchId": p.get("VSwitchId").cloned().unwrap_or_default(),
            "OrderId": 0,
            "ResourceGroupId": "rg-emulator",
        }))
    }

    fn clb_describe(&self, p: &Params) -> ApiResult {
        let lb = self.clb_lb(p)?;
        Ok(json!({
            "LoadBalancerId": lb.id,
            "LoadBalancerName": lb.name,
            "LoadBalancerStatus": "active",
            "Address": lb.address,
            "AddressType": lb.address_type,
            "AddressIPVersion": "ipv4",
            "RegionId": self.region,
            "NetworkType": "vpc",
            "CreateTime": "2024-01-01T00:00Z",
            "ListenerPorts": {"ListenerPort": lb.listeners.iter().map(|l| l.port).collect::<Vec<_>>()},
            "ListenerPortsAndProtocol": {"ListenerPortAndProtocol": lb.listeners.iter().map(|l| json!({
                "ListenerPort": l.port, "ListenerProtocol": l.protocol,
            })).collect::<Vec<_>>()},
            "BackendServers": {"BackendServer": []},
        }))
    }

    fn clb_delete(&mut self, p: &Params) -> ApiResult {
        let id = self.clb_lb(p)?.id.clone();
        self.clbs.remove(&id);
        let groups: Vec<String> = self
            .vgroups
            .values()
            .filter(|g| g.load_balancer_id == id)
            .map(|g| g.id.clone())
            .collect();
        for group_id in groups {
            if let Some(group) = self.vgroups.remove(&group_id) {
                for b in &group.backends {
                    self.event(
                        "clb",
                        &group_id,
                        b,
                        "removed",
                        "load balancer deleted".into(),
                    );
                }
            }
        }
        Ok(json!({}))
    }

    fn clb_create_group(&mut self, p: &Params) -> ApiResult {
        let lb_id = self.clb_lb(p)?.id.clone();
        let id = self.new_id("rsp");
        self.vgroups.insert(
            id.clone(),
            VServerGroup {
                id: id.clone(),
                name: p.get("VServerGroupName").cloned().unwrap_or_default(),
                load_balancer_id: lb_id,
                backends: vec![],
            },
        );
        if p.get("BackendServers").is_some_and(|b| !b.is_empty()) {
            let mut add = p.clone();
            add.insert("VServerGroupId".into(), id.clone());
            self.clb_add(&add)?;
        }
        let group = &self.vgroups[&id];
        Ok(json!({
            "VServerGroupId": id,
            "BackendServers": {"BackendServer": group.backends.iter().map(clb_backend_json).collect::<Vec<_>>()},
        }))
    }

    fn clb_groups(&self, p: &Params) -> ApiResult {
        let lb = self.clb_lb(p)?;
        let groups: Vec<Value> = self
            .vgroups
            .values()
            .filter(|g| g.load_balancer_id == lb.id)
            .map(|g| {
                let listeners: Vec<Value> = lb
                    .listeners
                    .iter()
                    .filter(|l| l.vserver_group_id == g.id)
                    .map(|l| json!({"Port": l.port, "Protocol": l.protocol}))
                    .collect();
                json!({
                    "VServerGroupId": g.id,
                    "VServerGroupName": g.name,
                    "ServerCount": g.backends.len(),
                    "CreateTime": "2024-01-01T00:00:00Z",
                    "AssociatedObjects": {"Listeners": {"Listener": listeners}, "Rules": {"Rule": []}},
                })
            })
            .collect();
        Ok(json!({"VServerGroups": {"VServerGroup": groups}}))
    }

    fn clb_create_listener(&mut self, p: &Params, protocol: &str) -> ApiResult {
        let lb_id = self.clb_lb(p)?.id.clone();
        let port = parse_port(p, "ListenerPort")?;
        let group_id = p.get("VServerGroupId").cloned().unwrap_or_default();
        if !group_id.is_empty() && !self.vgroups.contains_key(&group_id) {
            return Err(ApiError::new(
                400,
                "InvalidParameter.VServerGroupId.NotFound",
                "The specified VServerGroupId does not exist.",
            ));
        }
        let health_check = match p.get("HealthCheckSwitch").map(String::as_str) {
            None | Some("") | Some("on") => true,
            Some("off") => false,
            Some(other) => {
                return Err(ApiError::invalid(
                    "HealthCheckSwitch",
                    format!("{other:?} is not one of on, off"),
                ))
            }
        };
        let lb = self.clbs.get_mut(&lb_id).expect("checked");
        if lb
            .listeners
            .iter()
            .any(|l| l.port == port && l.protocol == protocol)
        {
            return Err(ApiError::new(
                400,
                "ListenerAlreadyExists",
                format!("The listener {port}/{protocol} already exists."),
            ));
        }
        lb.listeners.push(ClbListener {
            port,
            protocol: protocol.into(),
            vserver_group_id: group_id,
            status: "stopped".into(),
            health_check,
        });
        Ok(json!({}))
    }

    fn clb_listener_attribute(&self, p: &Params, protocol: &str) -> ApiResult {
        let lb = self.clb_lb(p)?;
        let port = parse_port(p, "ListenerPort")?;
        let listener = lb
            .listeners
            .iter()
            .find(|l| l.port == port && l.protocol == protocol)
            .ok_or_else(|| {
                ApiError::new(
                    400,
                    "InvalidParameter.ListenerNotFound",
                    format!("The listener {port}/{protocol} does not exist."),
                )
            })?;
        Ok(json!({
            "LoadBalancerId": lb.id, "ListenerPort": listener.port,
            "Status": listener.status, "VServerGroupId": listener.vserver_group_id,
            "HealthCheck": if listener.health_check { "on" } else { "off" },
        }))
    }

    fn clb_start_listener(&mut self, p: &Params) -> ApiResult {
        let lb_id = self.clb_lb(p)?.id.clone();
        let port = parse_port(p, "ListenerPort")?;
        let protocol = p.get("ListenerProtocol").map(|s| s.to_ascii_lowercase());
        let lb = self.clbs.get_mut(&lb_id).expect("checked");
        let listener = lb
            .listeners
            .iter_mut()
            .find(|l| l.port == port && protocol.as_ref().is_none_or(|p| *p == l.protocol))
            .ok_or_else(|| {
                ApiError::new(
                    400,
                    "InvalidParameter.ListenerNotFound",
                    format!("The listener {port} does not exist."),
                )
            })?;
        listener.status = "running".into();
        Ok(json!({}))
    }

    fn parse_backend_servers(&self, p: &Params) -> Result<Vec<BackendRec>, ApiError> {
        let raw = get(p, "BackendServers")?;
        let items: Vec<Value> =
            serde_json::from_str(raw).map_err(|e| ApiError::invalid("BackendServers", e))?;
        if items.len() > 20 {
            return Err(ApiError::new(
                400,
                "InvalidParameter.BackendServers",
                format!("At most 20 backend servers per call, got {}.", items.len()),
            ));
        }
        items
            .iter()
            .map(|item| {
                let s = |k: &str| {
                    item.get(k)
                        .map(|v| {
                            v.as_str()
                                .map(str::to_string)
                                .unwrap_or_else(|| v.to_string())
                        })
                        .unwrap_or_default()
                };
                let server_id = s("ServerId");
                if server_id.is_empty() {
                    return Err(ApiError::invalid("BackendServers", "ServerId is required"));
                }
                let port = item
                    .get("Port")
                    .and_then(json_u32)
                    .ok_or_else(|| ApiError::invalid("BackendServers", "Port is required"))?;
                let kind = if s("Type").is_empty() {
                    "ecs".to_string()
                } else {
                    s("Type")
                };
                if kind == "eni" && s("ServerIp").is_empty() {
                    return Err(ApiError::invalid(
                        "BackendServers",
                        "ServerIp is required for eni backends",
                    ));
                }
                Ok(self.new_backend(
                    server_id,
                    s("ServerIp"),
                    u16::try_from(port).map_err(|e| ApiError::invalid("BackendServers", e))?,
                    item.get("Weight").and_then(json_u32).unwrap_or(100),
                    kind,
                    s("Description"),
                ))
            })
            .collect()
    }

    fn clb_add(&mut self, p: &Params) -> ApiResult {
        let group_id = self.vgroup(p)?.id.clone();
        let backends = self.parse_backend_servers(p)?;
        let group = self.vgroups.get_mut(&group_id).expect("checked");
        if let Some(dup) = backends
            .iter()
            .find(|b| group.backends.iter().any(|g| g.key() == b.key()))
        {
            return Err(ApiError::new(
                400,
                "BackendServer.AlreadyExist",
                format!(
                    "The backend server {}:{} already exists.",
                    dup.server_id, dup.port
                ),
            ));
        }
        group.backends.extend(backends.iter().cloned());
        for b in &backends {
            self.event("clb", &group_id, b, "added", String::new());
        }
        self.clb_group_answer(&group_id)
    }

    fn clb_group_answer(&self, group_id: &str) -> ApiResult {
        let group = &self.vgroups[group_id];
        Ok(json!({
            "VServerGroupId": group.id,
            "VServerGroupName": group.name,
            "BackendServers": {"BackendServer": group.backends.iter().map(clb_backend_json).collect::<Vec<_>>()},
        }))
    }

    fn clb_remove(&mut self, p: &Params) -> ApiResult {
        let group_id = self.vgroup(p)?.id.clone();
        let wanted = self.parse_backend_servers(p)?;
        let group = self.vgroups.get_mut(&group_id).expect("checked");
        let mut removed = vec![];
        group.backends.retain(|b| {
            let gone = wanted.iter().any(|w| {
                w.server_id == b.server_id && w.port == b.port && (w.ip.is_empty() || w.ip == b.ip)
            });
            if gone {
                removed.push(b.clone());
            }
            !gone
        });
        for b in &removed {
            self.event("clb", &group_id, b, "removed", String::new());
        }
        self.clb_group_answer(&group_id)
    }

    fn clb_set(&mut self, p: &Params) -> ApiResult {
        let group_id = self.vgroup(p)?.id.clone();
        let updates = if p.get("BackendServers").is_some_and(|v| !v.is_empty()) {
            self.parse_backend_servers(p)?
        } else {
            vec![]
        };
        let group = self.vgroups.get_mut(&group_id).expect("checked");
        if let Some(name) = p.get("VServerGroupName").filter(|n| !n.is_empty()) {
            group.name = name.clone();
        }
        let mut changed = vec![];
        for u in &updates {
            let b = group
                .backends
                .iter_mut()
                .find(|b| {
                    b.server_id == u.server_id
                        && b.port == u.port
                        && (u.ip.is_empty() || u.ip == b.ip)
                })
                .ok_or_else(|| {
                    ApiError::new(
                        400,
                        "BackendServer.NotExist",
                        format!(
                            "The backend server {}:{} is not in the group.",
                            u.server_id, u.port
                        ),
                    )
                })?;
            if b.weight != u.weight {
                changed.push((b.clone(), format!("{} -> {}", b.weight, u.weight)));
                b.weight = u.weight;
            }
            if !u.description.is_empty() {
                b.description = u.description.clone();
            }
        }
        for (b, detail) in changed {
            self.event("clb", &group_id, &b, "weight-changed", detail);
        }
        self.clb_group_answer(&group_id)
    }

    fn clb_health(&self, p: &Params) -> ApiResult {
        let lb = self.clb_lb(p)?;
        let port = p
            .get("ListenerPort")
            .filter(|v| !v.is_empty())
            .map(|v| v.parse::<u16>())
            .transpose()
            .map_err(|e| ApiError::invalid("ListenerPort", e))?;
        let mut out = vec![];
        for listener in lb
            .listeners
            .iter()
            .filter(|l| port.is_none_or(|p| p == l.port))
        {
            let Some(group) = self.vgroups.get(&listener.vserver_group_id) else {
                continue;
            };
            for b in group.backends.iter().filter(|b| b.registered) {
                let status = clb_health_status(listener, b.health);
                out.push(json!({
                    "ServerId": b.server_id, "ServerIp": b.ip, "Port": b.port,
                    "ListenerPort": listener.port, "Protocol": listener.protocol,
                    "ServerHealthStatus": status,
                }));
            }
        }
        Ok(json!({"BackendServers": {"BackendServer": out}}))
    }

    // ---------------------------------------------------------------- NLB

    pub fn nlb(&mut self, action: &str, p: &Params) -> ApiResult {
        match action {
            "CreateLoadBalancer" => self.nlb_create(p),
            "GetLoadBalancerAttribute" => self.nlb_attribute(p),
            "DeleteLoadBalancer" => {
                let id = self.nlb_lb(p)?.id.clone();
                let job = self.start_job("DeleteLoadBalancer", JobEffect::DeleteLoadBalancer(id));
                Ok(json!({"JobId": job}))
            }
            "ListServerGroups" => self.nlb_list_groups(p),
            "CreateServerGroup" => self.nlb_create_group(p),
            "ListListeners" => self.nlb_list_listeners(p),
            "CreateListener" => self.nlb_create_listener(p),
            "ListServerGroupServers" => self.nlb_list_servers(p),
            "AddServersToServerGroup" => {
                let (group_id, servers) = self.nlb_servers_param(p, true)?;
                let job = self.start_job(
                    "AddServersToServerGroup",
                    JobEffect::AddServers(group_id.clone(), servers),
                );
                Ok(json!({"JobId": job, "ServerGroupId": group_id}))
            }
            "RemoveServersFromServerGroup" => {
                let (group_id, servers) = self.nlb_servers_param(p, false)?;
                let keys = servers.iter().map(BackendRec::key).collect();
                let job = self.start_job(
                    "RemoveServersFromServerGroup",
                    JobEffect::RemoveServers(group_id.clone(), keys),
                );
                Ok(json!({"JobId": job, "ServerGroupId": group_id}))
            }
            "UpdateServerGroupServersAttribute" => {
                let (group_id, servers) = self.nlb_servers_param(p, true)?;
                let job = self.start_job(
                    "UpdateServerGroupServersAttribute",
                    JobEffect::UpdateServers(group_id.clone(), servers),
                );
                Ok(json!({"JobId": job, "ServerGroupId": group_id}))
            }
            "GetListenerHealthStatus" => self.nlb_health(p),
            "GetJobStatus" => {
                let id = get(p, "JobId")?;
                let job = self.jobs.get(id).ok_or_else(|| {
                    ApiError::new(
                        400,
                        "ResourceNotFound.job",
                        format!("The specified job {id} does not exist."),
                    )
                })?;
                Ok(json!({"Status": job.status}))
            }
            other => Err(ApiError::new(
                404,
                "InvalidAction.NotFound",
                format!("Specified api {other} is not found, please check your url and method."),
            )),
        }
    }

    fn nlb_lb(&self, p: &Params) -> Result<&Nlb, ApiError> {
        let id = get(p, "LoadBalancerId")?;
        self.nlbs.get(id).ok_or_else(|| {
            ApiError::new(
                400,
                "ResourceNotFound.loadBalancer",
                format!("The specified resource {id} is not found."),
            )
        })
    }

    fn server_group(&self, p: &Params) -> Result<&ServerGroup, ApiError> {
        let id = get(p, "ServerGroupId")?;
        self.server_groups.get(id).ok_or_else(|| {
            ApiError::new(
                400,
                "ResourceNotFound.serverGroup",
                format!("The specified resource {id} is not found."),
            )
        })
    }

    fn nlb_create(&mut self, p: &Params) -> ApiResult {
        let token = p.get("ClientToken").cloned().unwrap_or_default();
        if let Some(lb) = self
            .nlbs
            .values()
            .find(|lb| !token.is_empty() && lb.client_token == token)
        {
            return Ok(json!({"LoadbalancerId": lb.id, "OrderId": 0}));
        }
        get(p, "LoadBalancerType")?;
        get(p, "AddressType")?;
        let zones: Vec<(String, String)> = flat_list(p, "ZoneMappings")
            .into_iter()
            .map(|z| {
                (
                    z.get("ZoneId").cloned().unwrap_or_default(),
                    z.get("VSwitchId").cloned().unwrap_or_default(),
                )
            })
            .collect();
        if zones.len() < 2 || zones.iter().any(|(z, v)| z.is_empty() || v.is_empty()) {
            return Err(ApiError::invalid(
                "ZoneMappings",
                "at least two zones, each with ZoneId and VSwitchId",
            ));
        }
        let id = self.new_id("nlb");
        let nlb = Nlb {
            name: p
                .get("LoadBalancerName")
                .cloned()
                .unwrap_or_else(|| id.clone()),
            dns_name: format!("{id}.{}.nlb.emulator.invalid", self.region),
            status: "Provisioning".into(),
            address_type: p["AddressType"].clone(),
            vpc_id: p.get("VpcId").cloned().unwrap_or_default(),
            zones,
            active_at: Instant::now() + Duration::from_millis(self.jobs_settings.delay_ms),
            client_token: token,
            id: id.clone(),
        };
        self.nlbs.insert(id.clone(), nlb);
        Ok(json!({"LoadbalancerId": id, "OrderId": 0}))
    }

    fn nlb_attribute(&self, p: &Params) -> ApiResult {
        let lb = self.nlb_lb(p)?;
        Ok(json!({
            "LoadBalancerId": lb.id,
            "LoadBalancerName": lb.name,
            "LoadBalancerStatus": lb.status,
            "LoadBalancerBusinessStatus": "Normal",
            "LoadBalancerType": "Network",
            "DNSName": lb.dns_name,
            "AddressType": lb.address_type,
            "AddressIpVersion": "ipv4",
            "VpcId": lb.vpc_id,
            "RegionId": self.region,
            "CreateTime": "2024-01-01T00:00:00Z",
            "CrossZoneEnabled": true,
            "ZoneMappings": lb.zones.iter().map(|(z, v)| json!({"ZoneId": z, "VSwitchId": v, "LoadBalancerAddresses": []})).collect::<Vec<_>>(),
            "OperationLocks": [],
        }))
    }

    fn nlb_list_groups(&self, p: &Params) -> ApiResult {
        let ids: Vec<String> = flat_list(p, "ServerGroupIds")
            .into_iter()
            .filter_map(|m| m.get("").cloned())
            .collect();
        let names: Vec<String> = flat_list(p, "ServerGroupNames")
            .into_iter()
            .filter_map(|m| m.get("").cloned())
            .collect();
        let groups: Vec<&ServerGroup> = self
            .server_groups
            .values()
            .filter(|g| ids.is_empty() || ids.contains(&g.id))
            .filter(|g| names.is_empty() || names.contains(&g.name))
            .collect();
        let (page, next, size) = paginate(&groups, p, 20)?;
        let items: Vec<Value> = page
            .iter()
            .map(|g| {
                let related: Vec<&str> = self.listeners.values().filter(|l| l.server_group_id == g.id).map(|l| l.load_balancer_id.as_str()).collect();
                json!({
                    "ServerGroupId": g.id, "ServerGroupName": g.name, "ServerGroupType": g.group_type,
                    "ServerGroupStatus": "Available", "Protocol": g.protocol, "VpcId": g.vpc_id,
                    "RegionId": self.region, "ServerCount": g.backends.len(), "AddressIPVersion": "ipv4",
                    "Scheduler": "Wrr", "RelatedLoadBalancerIds": related, "Tags": [],
                    "HealthCheck": {"HealthCheckEnabled": g.health_check, "HealthCheckType": "TCP", "HealthyThreshold": 2, "UnhealthyThreshold": 2},
                })
            })
            .collect();
        Ok(
            json!({"ServerGroups": items, "TotalCount": groups.len(), "MaxResults": size, "NextToken": next}),
        )
    }

    fn nlb_create_group(&mut self, p: &Params) -> ApiResult {
        let name = get(p, "ServerGroupName")?.to_string();
        let group_type = p
            .get("ServerGroupType")
            .cloned()
            .unwrap_or_else(|| "Instance".into());
        if !matches!(group_type.as_str(), "Instance" | "Ip") {
            return Err(ApiError::invalid("ServerGroupType", &group_type));
        }
        let id = self.new_id("sgp");
        let group = ServerGroup {
            id: id.clone(),
            name,
            group_type,
            protocol: p.get("Protocol").cloned().unwrap_or_else(|| "TCP".into()),
            vpc_id: p.get("VpcId").cloned().unwrap_or_default(),
            backends: vec![],
            // The official SDKs send booleans as `true` or, from Python, `True`.
            health_check: match p
                .get("HealthCheckConfig.HealthCheckEnabled")
                .map(|v| v.to_ascii_lowercase())
                .as_deref()
            {
                None | Some("") | Some("true") => true,
                Some("false") => false,
                Some(other) => {
                    return Err(ApiError::invalid(
                        "HealthCheckConfig.HealthCheckEnabled",
                        format!("{other:?} is not one of true, false"),
                    ))
                }
            },
        };
        let job = self.start_job("CreateServerGroup", JobEffect::CreateServerGroup(group));
        Ok(json!({"ServerGroupId": id, "JobId": job}))
    }

    fn nlb_list_listeners(&self, p: &Params) -> ApiResult {
        let lbs: Vec<String> = flat_list(p, "LoadBalancerIds")
            .into_iter()
            .filter_map(|m| m.get("").cloned())
            .collect();
        let listeners: Vec<&NlbListener> = self
            .listeners
            .values()
            .filter(|l| lbs.is_empty() || lbs.contains(&l.load_balancer_id))
            .collect();
        let (page, next, size) = paginate(&listeners, p, 20)?;
        let items: Vec<Value> = page
            .iter()
            .map(|l| {
                json!({
                    "ListenerId": l.id, "ListenerPort": l.port, "ListenerProtocol": l.protocol,
                    "LoadBalancerId": l.load_balancer_id, "ServerGroupId": l.server_group_id,
                    "ListenerStatus": "Running", "RegionId": self.region,
                })
            })
            .collect();
        Ok(
            json!({"Listeners": items, "TotalCount": listeners.len(), "MaxResults": size, "NextToken": next}),
        )
    }

    fn nlb_create_listener(&mut self, p: &Params) -> ApiResult {
        let lb = self.nlb_lb(p)?;
        if lb.status != "Active" {
            return Err(ApiError::new(
                400,
                "IncorrectStatus.loadBalancer",
                format!("The load balancer {} is {}.", lb.id, lb.status),
            ));
        }
        let lb_id = lb.id.clone();
        let port = parse_port(p, "ListenerPort")?;
        let protocol = get(p, "ListenerProtocol")?.to_string();
        let group_id = self.server_group(p)?.id.clone();
        if self
            .listeners
            .values()
            .any(|l| l.load_balancer_id == lb_id && l.port == port && l.protocol == protocol)
        {
            return Err(ApiError::new(
                400,
                "Conflict.Port",
                format!("Listener {port}/{protocol} already exists."),
            ));
        }
        let id = self.new_id("lsn");
        let listener = NlbListener {
            id: id.clone(),
            load_balancer_id: lb_id,
            port,
            protocol,
            server_group_id: group_id,
        };
        let job = self.start_job("CreateListener", JobEffect::CreateListener(listener));
        Ok(json!({"ListenerId": id, "JobId": job}))
    }

    fn nlb_list_servers(&self, p: &Params) -> ApiResult {
        let group = self.server_group(p)?;
        let (page, next, size) = paginate(&group.backends, p, 20)?;
        let items: Vec<Value> = page
            .iter()
            .map(|b| json!({
                "ServerGroupId": group.id, "ServerId": b.server_id, "ServerIp": b.ip, "ServerType": b.kind,
                "Port": b.port, "Weight": b.weight, "Description": b.description,
                "Status": if b.registered { "Available" } else { "Adding" }, "ZoneId": "",
            }))
            .collect();
        Ok(
            json!({"Servers": items, "TotalCount": group.backends.len(), "MaxResults": size, "NextToken": next}),
        )
    }

    fn nlb_servers_param(
        &self,
        p: &Params,
        with_attributes: bool,
    ) -> Result<(String, Vec<BackendRec>), ApiError> {
        let group = self.server_group(p)?;
        let items = flat_list(p, "Servers");
        if items.is_empty() {
            return Err(ApiError::missing("Servers"));
        }
        if items.len() > 40 {
            return Err(ApiError::new(
                400,
                "QuotaExceeded.ServersPerCall",
                format!("At most 40 servers per call, got {}.", items.len()),
            ));
        }
        let servers = items
            .iter()
            .map(|m| {
                let s = |k: &str| m.get(k).cloned().unwrap_or_default();
                let server_id = s("ServerId");
                let kind = s("ServerType");
                if server_id.is_empty() || kind.is_empty() {
                    return Err(ApiError::invalid(
                        "Servers",
                        "ServerId and ServerType are required",
                    ));
                }
                if group.group_type == "Ip" && kind != "Ip" {
                    return Err(ApiError::invalid(
                        "Servers",
                        "an Ip server group takes only Ip servers",
                    ));
                }
                let port = s("Port")
                    .parse::<u16>()
                    .map_err(|e| ApiError::invalid("Servers.Port", e))?;
                let weight = if with_attributes && !s("Weight").is_empty() {
                    s("Weight")
                        .parse()
                        .map_err(|e| ApiError::invalid("Servers.Weight", e))?
                } else {
                    100
                };
                let ip = if s("ServerIp").is_empty() && kind == "Ip" {
                    server_id.clone()
                } else {
                    s("ServerIp")
                };
                Ok(self.new_backend(server_id, ip, port, weight, kind, s("Description")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok((group.id.clone(), servers))
    }

    fn nlb_health(&self, p: &Params) -> ApiResult {
        let id = get(p, "ListenerId")?;
        let listener = self.listeners.get(id).ok_or_else(|| {
            ApiError::new(
                400,
                "ResourceNotFound.listener",
                format!("The specified resource {id} is not found."),
            )
        })?;
        let infos: Vec<Value> = self
            .server_groups
            .get(&listener.server_group_id)
            .map(|group| {
                let abnormal: Vec<Value> = group
                    .backends
                    .iter()
                    .filter_map(|b| {
                        let (status, reason) = if !b.registered {
                            return None;
                        } else if b.weight == 0 {
                            ("Unused", "")
                        } else if !group.health_check {
                            ("Unavailable", "")
                        } else {
                            match b.health {
                                Health::Healthy => return None,
                                Health::Pending => ("Initial", ""),
                                Health::Unhealthy => ("Unhealthy", "CONNECT_FAIL"),
                            }
                        };
                        Some(json!({"ServerId": b.server_id, "ServerIp": b.ip, "Port": b.port, "Status": status, "Reason": {"ReasonCode": reason}}))
                    })
                    .collect();
                vec![json!({"ServerGroupId": group.id, "HeathCheckEnabled": group.health_check, "NonNormalServers": abnormal})]
            })
            .unwrap_or_default();
        Ok(json!({
            "ListenerHealthStatus": [{
                "ListenerId": listener.id, "ListenerPort": listener.port, "ListenerProtocol": listener.protocol,
                "ServerGroupInfos": infos,
            }],
            "TotalCount": 1, "MaxResults": 20, "NextToken": "",
        }))
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
            },
            "nlb": {
                "load_balancers": self.nlbs.values().collect::<Vec<_>>(),
                "server_groups": self.server_groups.values().collect::<Vec<_>>(),
                "listeners": self.listeners.values().collect::<Vec<_>>(),
                "jobs": self.jobs.values().collect::<Vec<_>>(),
            },
            "stats": self.stats,
        })
    }
}

/// `ServerHealthStatus` as CLB reports it: `unavailable` until the first check has a
/// verdict, while the listener is not running, or when its checks are off.
fn clb_health_status(listener: &ClbListener, health: Health) -> &'static str {
    match (listener.status.as_str(), listener.health_check, health) {
        ("running", true, Health::Healthy) => "normal",
        ("running", true, Health::Unhealthy) => "abnormal",
        _ => "unavailable",
    }
}

fn clb_backend_json(b: &BackendRec) -> Value {
    json!({
        "ServerId": b.server_id, "ServerIp": b.ip, "Port": b.port, "Weight": b.weight,
        "Type": b.kind, "Description": b.description,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> Params {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn flat_lists_group_by_index_in_numeric_order() {
        let p = params(&[
            ("Servers.10.ServerId", "j"),
            ("Servers.2.ServerId", "b"),
            ("Servers.2.Port", "80"),
            ("ServerGroupNames.1", "web"),
        ]);
        let servers = flat_list(&p, "Servers");
        assert_eq!(servers.len(), 2);
        assert_eq!(servers[0]["ServerId"], "b");
        assert_eq!(servers[0]["Port"], "80");
        assert_eq!(servers[1]["ServerId"], "j");
        assert_eq!(flat_list(&p, "ServerGroupNames")[0][""], "web");
    }

    #[test]
    fn pagination_hands_out_tokens_until_the_end() {
        let items: Vec<u32> = (0..5).collect();
        let (page, next, _) = paginate(&items, &params(&[("MaxResults", "2")]), 20).unwrap();
        assert_eq!((page, next.as_str()), (vec![0, 1], "page-2"));
        let (page, next, _) = paginate(
            &items,
            &params(&[("MaxResults", "2"), ("NextToken", "page-4")]),
            20,
        )
        .unwrap();
        assert_eq!((page, next.as_str()), (vec![4], ""));
        assert!(paginate(&items, &params(&[("MaxResults", "101")]), 20).is_err());
        assert!(paginate(&items, &params(&[("NextToken", "bogus")]), 20).is_err());
    }

    /// One CLB listener on port 80 (checks `switch`), its group, one registered
    /// backend; returns the world, the load balancer id and a time past every delay.
    fn clb_with_backend(switch: &str) -> (World, String, Instant) {
        let mut world = World::new(&EmulatorConfig::default());
        let lb = world.clb("CreateLoadBalancer", &params(&[])).unwrap();
        let lb = lb["LoadBalancerId"].as_str().unwrap().to_string();
        let group = world
            .clb(
                "CreateVServerGroup",
                &params(&[("LoadBalancerId", &lb), ("VServerGroupName", "web")]),
            )
            .unwrap();
        let group = group["VServerGroupId"].as_str().unwrap().to_string();
        let listener = [
            ("LoadBalancerId", lb.as_str()),
            ("ListenerPort", "80"),
            ("VServerGroupId", group.as_str()),
            ("HealthCheckSwitch", switch),
        ];
        world
            .clb("CreateLoadBalancerTCPListener", &params(&listener))
            .unwrap();
        world
            .clb("StartLoadBalancerListener", &params(&listener[..2]))
            .unwrap();
        let backend = r#"[{"ServerId":"eni-1","ServerIp":"10.0.0.1","Port":8080,"Type":"eni"}]"#;
        world
            .clb(
                "AddVServerGroupBackendServers",
                &params(&[("VServerGroupId", &group), ("BackendServers", backend)]),
            )
            .unwrap();
        (world, lb, Instant::now())
    }

    fn clb_status(world: &mut World, lb: &str) -> String {
        let health = world
            .clb("DescribeHealthStatus", &params(&[("LoadBalancerId", lb)]))
            .unwrap();
        health["BackendServers"]["BackendServer"][0]["ServerHealthStatus"]
            .as_str()
            .unwrap_or("absent")
            .to_string()
    }

    #[test]
    fn clb_says_unavailable_until_the_first_check_then_normal_or_abnormal() {
        let (mut world, lb, start) = clb_with_backend("on");
        // Registered, no verdict yet: `unavailable`, never `abnormal`.
        world.tick(start + Duration::from_millis(250), &HashMap::new());
        assert_eq!(clb_status(&mut world, &lb), "unavailable");
        world.tick(start + Duration::from_secs(2), &HashMap::new());
        assert_eq!(clb_status(&mut world, &lb), "normal");
        world.force_health("10.0.0.1", 8080, Some(false));
        world.tick(start + Duration::from_secs(3), &HashMap::new());
        assert_eq!(clb_status(&mut world, &lb), "abnormal");
        let attribute = world
            .clb(
                "DescribeLoadBalancerTCPListenerAttribute",
                &params(&[("LoadBalancerId", &lb), ("ListenerPort", "80")]),
            )
            .unwrap();
        assert_eq!(attribute["HealthCheck"], "on");
    }

    #[test]
    fn clb_with_checks_off_says_unavailable_forever() {
        let (mut world, lb, start) = clb_with_backend("off");
        world.tick(start + Duration::from_secs(60), &HashMap::new());
        assert_eq!(clb_status(&mut world, &lb), "unavailable");
        let attribute = world
            .clb(
                "DescribeLoadBalancerTCPListenerAttribute",
                &params(&[("LoadBalancerId", &lb), ("ListenerPort", "80")]),
            )
            .unwrap();
        assert_eq!(attribute["HealthCheck"], "off");
        let bad = [
            ("LoadBalancerId", lb.as_str()),
            ("ListenerPort", "81"),
            ("HealthCheckSwitch", "maybe"),
        ];
        let refused = world
            .clb("CreateLoadBalancerTCPListener", &params(&bad))
            .unwrap_err();
        assert!(refused.message.contains("on, off"), "{}", refused.message);
    }
}
