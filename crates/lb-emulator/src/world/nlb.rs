//! The NLB API (2022-04-30): load balancers that provision, server groups, listeners
//! and health per listener. Changes to groups, listeners and servers are asynchronous
//! jobs (see `simulation`) that the client polls with GetJobStatus; lists page.
//! Requests are checked as the API reference and SDK model describe them: server
//! types that fit the group type, ENIs and ECIs that exist, run and sit in the
//! group's VPC, IPs that are IPs, at most 200 servers per call, no server twice,
//! documented description and name shapes, listeners only in front of server groups
//! whose protocol can carry theirs, and one server change at a time per group.

use std::time::Duration;

use serde_json::{json, Value};

use crate::account_quotas::{NLB_GROUP_SERVERS, NLB_INSTANCES};
use tokio::time::Instant;

use super::listener_settings;
use super::params::{
    flat_list, get, has_tags, ipv4, nlb_description_ok, nlb_group_name_ok, paginate, tags,
    TAGS_PER_CREATE, TAGS_PER_FILTER,
};
use super::{
    ApiError, ApiResult, BackendRec, Health, JobEffect, Nlb, NlbListener, Params, ServerGroup,
    World,
};

/// Servers per Add/Remove/Update call ("up to 200 backend servers in each call").
pub const NLB_SERVERS_PER_CALL: usize = 200;

/// A required parameter, missing as NLB reports it (`MissingParam.<Name>`).
fn nlb_get<'a>(p: &'a Params, name: &str) -> Result<&'a str, ApiError> {
    optional(p, name).ok_or_else(|| ApiError::nlb_missing(name))
}

fn optional<'a>(p: &'a Params, name: &str) -> Option<&'a str> {
    p.get(name).map(String::as_str).filter(|v| !v.is_empty())
}

/// Per-call lists of ids or names (`Prefix.N`): at most 20 (SDK models of
/// ListListeners and ListServerGroups).
fn id_list(p: &Params, prefix: &str) -> Result<Vec<String>, ApiError> {
    let items: Vec<String> = flat_list(p, prefix)
        .into_iter()
        .filter_map(|m| m.get("").cloned())
        .collect();
    if items.len() > 20 {
        return Err(ApiError::nlb_illegal(
            prefix,
            format!("{} given, at most 20 per call", items.len()),
        ));
    }
    Ok(items)
}

/// A page as NLB lists hand them out, its refusals in NLB's words (`IllegalParam`).
fn nlb_page<T: Clone>(items: &[T], p: &Params) -> Result<(Vec<T>, String, usize), ApiError> {
    paginate(items, p, 20).map_err(|e| {
        let name = e
            .code
            .strip_prefix("InvalidParameter.")
            .unwrap_or("MaxResults");
        ApiError::nlb_illegal(name, e.message)
    })
}

/// `HealthCheckConfig.HealthCheckEnabled`, if given. The official SDKs send booleans
/// as `true` or, from Python, `True`.
fn health_check_enabled(p: &Params) -> Result<Option<bool>, ApiError> {
    match p
        .get("HealthCheckConfig.HealthCheckEnabled")
        .map(|v| v.to_ascii_lowercase())
        .as_deref()
    {
        None | Some("") => Ok(None),
        Some("true") => Ok(Some(true)),
        Some("false") => Ok(Some(false)),
        Some(other) => Err(ApiError::invalid(
            "HealthCheckConfig.HealthCheckEnabled",
            format!("{other:?} is not one of true, false"),
        )),
    }
}

impl World {
    pub fn nlb(&mut self, action: &str, p: &Params) -> ApiResult {
        match action {
            "CreateLoadBalancer" => self.nlb_create(p),
            "GetLoadBalancerAttribute" => self.nlb_attribute(p),
            "DeleteLoadBalancer" => {
                let id = self.nlb_lb(p)?.id.clone();
                // A second delete of the same instance finds nothing to delete.
                let job = self.start_job("DeleteLoadBalancer", JobEffect::DeleteLoadBalancer(id));
                Ok(json!({"JobId": job}))
            }
            "ListServerGroups" => self.nlb_list_groups(p),
            "DeleteListener" => {
                let id = get(p, "ListenerId")?.to_string();
                if !self.listeners.contains_key(&id) {
                    return Err(ApiError::new(
                        404,
                        "ResourceNotFound.listener",
                        format!("The specified resource of listener {id} is not found."),
                    ));
                }
                let job = self.start_job("DeleteListener", JobEffect::DeleteListener(id));
                Ok(json!({"JobId": job}))
            }
            "DeleteServerGroup" => {
                let id = self.server_group(p)?.id.clone();
                if self.listeners.values().any(|l| l.server_group_id == id) {
                    return Err(ApiError::new(
                        400,
                        "ResourceInUse.serverGroup",
                        format!("The server group {id} is used by a listener."),
                    ));
                }
                let job = self.start_job("DeleteServerGroup", JobEffect::DeleteServerGroup(id));
                Ok(json!({"JobId": job}))
            }
            "CreateServerGroup" => self.idempotent("CreateServerGroup", p, Self::nlb_create_group),
            "UpdateServerGroupAttribute" => {
                let id = self.server_group(p)?.id.clone();
                let health_check = health_check_enabled(p)?;
                let (health_settings, settings) = listener_settings::nlb(p)?;
                let job = self.start_job(
                    "UpdateServerGroupAttribute",
                    JobEffect::UpdateServerGroup {
                        id: id.clone(),
                        health_check,
                        health_settings,
                        settings,
                    },
                );
                Ok(json!({"JobId": job, "ServerGroupId": id}))
            }
            "ListListeners" => self.nlb_list_listeners(p),
            "CreateListener" => self.idempotent("CreateListener", p, Self::nlb_create_listener),
            "ListServerGroupServers" => self.nlb_list_servers(p),
            "AddServersToServerGroup" => {
                let (group_id, servers) = self.nlb_servers_param(p, true)?;
                let group = &self.server_groups[&group_id];
                let new = servers
                    .iter()
                    .filter(|s| !group.backends.iter().any(|b| b.key() == s.key()))
                    .count();
                let what = format!("server group {group_id}");
                self.check_quota(NLB_GROUP_SERVERS, group.backends.len(), new, &what)?;
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
                let id = nlb_get(p, "JobId")?;
                let job = self.jobs.get(id).ok_or_else(|| {
                    ApiError::new(
                        404,
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

    /// The NLB instance named by `LoadBalancerId`; an unknown one is 404
    /// `ResourceNotFound.loadBalancer` (the NLB reference's tables for this instance).
    fn nlb_lb(&self, p: &Params) -> Result<&Nlb, ApiError> {
        let id = nlb_get(p, "LoadBalancerId")?;
        self.nlbs.get(id).ok_or_else(|| {
            ApiError::new(
                404,
                "ResourceNotFound.loadBalancer",
                format!("The specified resource of loadbalancer {id} is not found."),
            )
        })
    }

    fn server_group(&self, p: &Params) -> Result<&ServerGroup, ApiError> {
        let id = nlb_get(p, "ServerGroupId")?;
        self.server_groups.get(id).ok_or_else(|| {
            ApiError::new(
                404,
                "ResourceNotFound.serverGroup",
                format!("The specified resource of serverGroup {id} is not found."),
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
        // LoadBalancerType, if given, is `network` (the SDK says "set the value to
        // network"; the console and rollgate spell it `Network`).
        if let Some(kind) = optional(p, "LoadBalancerType") {
            if !kind.eq_ignore_ascii_case("network") {
                return Err(ApiError::nlb_illegal(
                    "LoadBalancerType",
                    format!("{kind:?} is not network"),
                ));
            }
        }
        let address_type = nlb_get(p, "AddressType")?;
        if !matches!(address_type, "Internet" | "Intranet") {
            return Err(ApiError::nlb_illegal(
                "AddressType",
                format!("{address_type:?} is not one of Internet, Intranet"),
            ));
        }
        if let Some(version) = optional(p, "AddressIpVersion") {
            if !matches!(version, "ipv4" | "DualStack") {
                return Err(ApiError::nlb_illegal(
                    "AddressIpVersion",
                    format!("{version:?} is not one of ipv4, DualStack"),
                ));
            }
        }
        if let Some(name) = optional(p, "LoadBalancerName").filter(|n| !nlb_group_name_ok(n)) {
            return Err(ApiError::nlb_illegal(
                "LoadBalancerName",
                format!("{name:?}: 2 to 128 characters, starting with a letter, of letters, digits, '.', '_' and '-'"),
            ));
        }
        let vpc_id = nlb_get(p, "VpcId")?.to_string();
        self.check_quota(NLB_INSTANCES, self.nlbs.len(), 1, "the region")?;
        let zones: Vec<(String, String)> = flat_list(p, "ZoneMappings")
            .into_iter()
            .map(|z| {
                (
                    z.get("ZoneId").cloned().unwrap_or_default(),
                    z.get("VSwitchId").cloned().unwrap_or_default(),
                )
            })
            .collect();
        if zones.is_empty() {
            return Err(ApiError::nlb_missing("ZoneMappings"));
        }
        if let Some((zone, _)) = zones.iter().find(|(z, v)| z.is_empty() || v.is_empty()) {
            let missing = if zone.is_empty() {
                "ZoneId"
            } else {
                "VSwitchId"
            };
            return Err(ApiError::nlb_missing(&format!("ZoneMappings.{missing}")));
        }
        // "Up to 10 zones; if the region has two or more zones, at least two" (every
        // emulated region has several).
        if !(2..=10).contains(&zones.len()) {
            return Err(ApiError::nlb_illegal(
                "ZoneMappings",
                format!("{} zones: 2 to 10", zones.len()),
            ));
        }
        let tags = tags(p, TAGS_PER_CREATE, |name, why| {
            ApiError::nlb_illegal(name, why)
        })?;
        let id = self.new_id("nlb");
        let nlb = Nlb {
            name: p
                .get("LoadBalancerName")
                .cloned()
                .unwrap_or_else(|| id.clone()),
            dns_name: format!("{id}.{}.nlb.emulator.invalid", self.region),
            status: "Provisioning".into(),
            address_type: address_type.to_string(),
            vpc_id,
            zones,
            tags,
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
            "Tags": lb.tags.iter().map(|(k, v)| json!({"Key": k, "Value": v})).collect::<Vec<_>>(),
        }))
    }

    fn nlb_list_groups(&self, p: &Params) -> ApiResult {
        // SDK model of ListServerGroups: at most 20 ids and 20 names per call, the
        // type Instance or Ip, 1 to 100 per page.
        let ids = id_list(p, "ServerGroupIds")?;
        let names = id_list(p, "ServerGroupNames")?;
        let group_type = optional(p, "ServerGroupType");
        if let Some(t) = group_type.filter(|t| !matches!(*t, "Instance" | "Ip")) {
            return Err(ApiError::nlb_illegal(
                "ServerGroupType",
                format!("{t:?} is not one of Instance, Ip"),
            ));
        }
        let vpc = optional(p, "VpcId");
        // "You can specify up to 10 tag keys" (SDK model); a group must carry them all.
        let filter = tags(p, TAGS_PER_FILTER, |name, why| {
            ApiError::nlb_illegal(name, why)
        })?;
        let groups: Vec<&ServerGroup> = self
            .server_groups
            .values()
            .filter(|g| ids.is_empty() || ids.contains(&g.id))
            .filter(|g| names.is_empty() || names.contains(&g.name))
            .filter(|g| group_type.is_none_or(|t| t == g.group_type))
            .filter(|g| vpc.is_none_or(|v| v == g.vpc_id))
            .filter(|g| has_tags(&g.tags, &filter))
            .collect();
        let (page, next, size) = nlb_page(&groups, p)?;
        let items: Vec<Value> = page
            .iter()
            .map(|g| {
                let related: Vec<&str> = self.listeners.values().filter(|l| l.server_group_id == g.id).map(|l| l.load_balancer_id.as_str()).collect();
                json!({
                    "ServerGroupId": g.id, "ServerGroupName": g.name, "ServerGroupType": g.group_type,
                    "ServerGroupStatus": if self.group_busy(&g.id, Instant::now()) { "Configuring" } else { "Available" }, "Protocol": g.protocol, "VpcId": g.vpc_id,
                    "RegionId": self.region, "ServerCount": g.backends.len(), "AddressIPVersion": "ipv4",
                    "Scheduler": g.settings.get("Scheduler").cloned().unwrap_or(json!("Wrr")), "RelatedLoadBalancerIds": related,
                    "Tags": g.tags.iter().map(|(k, v)| json!({"Key": k, "Value": v})).collect::<Vec<_>>(),
                    "HealthCheck": listener_settings::nlb_health_listed(g.health_check, &g.health_settings),
                    "ConnectionDrainEnabled": g.settings.get("ConnectionDrainEnabled").cloned().unwrap_or(json!(false)),
                    "ConnectionDrainTimeout": g.settings.get("ConnectionDrainTimeout").cloned().unwrap_or(json!(0)),
                })
            })
            .collect();
        Ok(
            json!({"ServerGroups": items, "TotalCount": groups.len(), "MaxResults": size, "NextToken": next}),
        )
    }

    /// A create that takes a `ClientToken`: a token already used for `action` is
    /// answered with its first request's answer, whatever happened since (the SDK:
    /// the token ensures the idempotence of the request, and must be unique among
    /// different requests), so a group or listener deleted and made again with the same
    /// token gets the deleted one's id back (fidelity row 45).
    fn idempotent(
        &mut self,
        action: &str,
        p: &Params,
        create: fn(&mut Self, &Params) -> ApiResult,
    ) -> ApiResult {
        let token = p.get("ClientToken").filter(|t| !t.is_empty());
        let key = token.map(|t| (action.to_string(), t.clone()));
        if let Some(first) = key.as_ref().and_then(|k| self.client_tokens.get(k)) {
            return Ok(first.clone());
        }
        let answer = create(self, p)?;
        if let Some(key) = key {
            self.client_tokens.insert(key, answer.clone());
        }
        Ok(answer)
    }

    fn nlb_create_group(&mut self, p: &Params) -> ApiResult {
        let name = nlb_get(p, "ServerGroupName")?.to_string();
        if !nlb_group_name_ok(&name) {
            return Err(ApiError::nlb_illegal(
                "ServerGroupName",
                format!("{name:?}: 2 to 128 characters, starting with a letter, of letters, digits, '.', '_' and '-'"),
            ));
        }
        let group_type = optional(p, "ServerGroupType")
            .unwrap_or("Instance")
            .to_string();
        if !matches!(group_type.as_str(), "Instance" | "Ip") {
            return Err(ApiError::nlb_illegal(
                "ServerGroupType",
                format!("{group_type:?} is not one of Instance, Ip"),
            ));
        }
        let protocol = optional(p, "Protocol").unwrap_or("TCP").to_string();
        if !matches!(protocol.as_str(), "TCP" | "UDP" | "TCP_UDP") {
            return Err(ApiError::nlb_illegal(
                "Protocol",
                format!("{protocol:?} is not one of TCP, UDP, TCP_UDP"),
            ));
        }
        let vpc_id = nlb_get(p, "VpcId")?.to_string();
        let (health_settings, settings) = listener_settings::nlb(p)?;
        let tags = tags(p, TAGS_PER_CREATE, |name, why| {
            ApiError::nlb_illegal(name, why)
        })?;
        let id = self.new_id("sgp");
        let group = ServerGroup {
            id: id.clone(),
            name,
            group_type,
            protocol,
            vpc_id,
            backends: vec![],
            health_check: health_check_enabled(p)?.unwrap_or(true),
            health_settings,
            settings,
            tags,
        };
        let job = self.start_job("CreateServerGroup", JobEffect::CreateServerGroup(group));
        Ok(json!({"ServerGroupId": id, "JobId": job}))
    }

    fn nlb_list_listeners(&self, p: &Params) -> ApiResult {
        // SDK model of ListListeners: at most 20 listener ids and 20 instance ids per
        // call, the protocol TCP, UDP or TCPSSL, 1 to 100 per page.
        let lbs = id_list(p, "LoadBalancerIds")?;
        let ids = id_list(p, "ListenerIds")?;
        let protocol = optional(p, "ListenerProtocol");
        if let Some(proto) = protocol.filter(|v| !matches!(*v, "TCP" | "UDP" | "TCPSSL")) {
            return Err(ApiError::nlb_illegal(
                "ListenerProtocol",
                format!("{proto:?} is not one of TCP, UDP, TCPSSL"),
            ));
        }
        let listeners: Vec<&NlbListener> = self
            .listeners
            .values()
            .filter(|l| lbs.is_empty() || lbs.contains(&l.load_balancer_id))
            .filter(|l| ids.is_empty() || ids.contains(&l.id))
            .filter(|l| protocol.is_none_or(|proto| proto == l.protocol))
            .collect();
        let (page, next, size) = nlb_page(&listeners, p)?;
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
        let port: u16 = nlb_get(p, "ListenerPort")?
            .parse()
            .map_err(|e| ApiError::nlb_illegal("ListenerPort", e))?;
        if port == 0 {
            // Port 0 listens on a range, which then needs StartPort and EndPort.
            nlb_get(p, "StartPort")?;
            nlb_get(p, "EndPort")?;
        }
        let protocol = nlb_get(p, "ListenerProtocol")?.to_string();
        if !matches!(protocol.as_str(), "TCP" | "UDP" | "TCPSSL") {
            return Err(ApiError::nlb_illegal(
                "ListenerProtocol",
                format!("{protocol:?} is not one of TCP, UDP, TCPSSL"),
            ));
        }
        let group = self.server_group(p)?;
        // TCP listeners take TCP or TCP_UDP groups, UDP ones UDP or TCP_UDP groups,
        // TCPSSL ones TCP groups (SDK model of CreateListener, ServerGroupId).
        let fits = match protocol.as_str() {
            "TCP" => matches!(group.protocol.as_str(), "TCP" | "TCP_UDP"),
            "UDP" => matches!(group.protocol.as_str(), "UDP" | "TCP_UDP"),
            _ => group.protocol == "TCP",
        };
        if !fits {
            return Err(ApiError::nlb_illegal(
                "ServerGroupId",
                format!(
                    "a {protocol} listener cannot forward to {} whose protocol is {}",
                    group.id, group.protocol
                ),
            ));
        }
        let group_id = group.id.clone();
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
        if self.group_busy(&group.id, Instant::now()) {
            return Err(ApiError::new(
                400,
                "IncorrectStatus.serverGroup",
                format!(
                    "The status of servergroup [{}] is incorrect: a change is in progress.",
                    group.id
                ),
            ));
        }
        let items = flat_list(p, "Servers");
        if items.is_empty() {
            return Err(ApiError::nlb_missing("Servers"));
        }
        if items.len() > NLB_SERVERS_PER_CALL {
            return Err(ApiError::nlb_illegal(
                "Servers",
                format!(
                    "at most {NLB_SERVERS_PER_CALL} servers per call, got {}",
                    items.len()
                ),
            ));
        }
        let mut servers: Vec<BackendRec> = Vec::with_capacity(items.len());
        for m in &items {
            let s = |k: &str| m.get(k).cloned().unwrap_or_default();
            let server_id = s("ServerId");
            if server_id.is_empty() {
                return Err(ApiError::nlb_missing("ServerId"));
            }
            let kind = s("ServerType");
            if kind.is_empty() {
                return Err(ApiError::nlb_missing("ServerType"));
            }
            if !matches!(kind.as_str(), "Ecs" | "Eni" | "Eci" | "Ip") {
                return Err(ApiError::nlb_illegal(
                    "ServerType",
                    format!("{kind:?} is not one of Ecs, Eni, Eci, Ip"),
                ));
            }
            if (group.group_type == "Ip") != (kind == "Ip") {
                return Err(ApiError::new(
                    400,
                    "Mismatch.ServerType",
                    format!(
                        "The ServerType is mismatched for {} ({}) and {server_id} ({kind}).",
                        group.id, group.group_type
                    ),
                ));
            }
            let port = match m.get("Port").filter(|v| !v.is_empty()) {
                None => 0,
                Some(v) => v
                    .parse::<u16>()
                    .map_err(|e| ApiError::nlb_illegal("Servers.Port", e))?,
            };
            let weight = match m.get("Weight").filter(|v| with_attributes && !v.is_empty()) {
                None => 100,
                Some(v) => v.parse::<u32>().ok().filter(|w| *w <= 100).ok_or_else(|| {
                    ApiError::nlb_illegal("Servers.Weight", "valid values: 0 to 100")
                })?,
            };
            let description = if with_attributes {
                s("Description")
            } else {
                String::new()
            };
            if !description.is_empty() && !nlb_description_ok(&description) {
                return Err(ApiError::new(
                    400,
                    "IllegalParam.description",
                    format!("The parameter description of server is illegal: {description:?} (2 to 256 characters of letters, digits, ',', '.', ';', '/', '@', '_' and '-')."),
                ));
            }
            let ip = match kind.as_str() {
                "Ip" => {
                    let given = s("ServerIp");
                    if ipv4(&server_id).is_none() || !(given.is_empty() || given == server_id) {
                        return Err(ApiError::new(
                            400,
                            "IllegalParam.IP",
                            format!("The param of IP is illegal: ServerId {server_id:?}, ServerIp {given:?}."),
                        ));
                    }
                    server_id.clone()
                }
                _ => self.nlb_instance_server(
                    group,
                    &kind,
                    &server_id,
                    &s("ServerIp"),
                    with_attributes,
                )?,
            };
            let rec = self.new_backend(server_id, ip, port, weight, kind, description);
            if servers.iter().any(|b| b.key() == rec.key()) {
                return Err(ApiError::new(
                    400,
                    "DuplicatedParam.Server",
                    format!(
                        "The param of Server is duplicated: {}:{}.",
                        rec.server_id, rec.port
                    ),
                ));
            }
            servers.push(rec);
        }
        Ok((group.id.clone(), servers))
    }

    /// An Ecs/Eni/Eci server of an Instance group: when it is being added (or
    /// updated), the ENI or ECI must exist, run and be in the group's VPC; its IP is
    /// `ServerIp` or the one the inventory knows. ECS instances are not modelled.
    fn nlb_instance_server(
        &self,
        group: &ServerGroup,
        kind: &str,
        server_id: &str,
        given_ip: &str,
        check: bool,
    ) -> Result<String, ApiError> {
        let not_found = |what: &str| {
            ApiError::new(
                404,
                &format!("ResourceNotFound.{what}"),
                format!("The specified resource of {what} {server_id} is not found."),
            )
        };
        let vpc_mismatch = |vpc: &str| {
            ApiError::new(
                400,
                "Mismatch.VpcId",
                format!(
                    "The VpcId is mismatched for {} and {server_id} ({vpc}).",
                    group.id
                ),
            )
        };
        match kind {
            "Eni" => {
                let Some(eni) = self.enis.get(server_id) else {
                    return if check {
                        Err(not_found("Eni"))
                    } else {
                        Ok(given_ip.to_string())
                    };
                };
                if check {
                    if eni.status != "InUse" {
                        return Err(ApiError::new(
                            400,
                            "IncorrectStatus.Eni",
                            format!("Eni status is invalid: {server_id} is {}.", eni.status),
                        ));
                    }
                    if eni.vpc_id != group.vpc_id {
                        return Err(vpc_mismatch(&eni.vpc_id));
                    }
                    if !given_ip.is_empty() && !eni.private_ips.iter().any(|p| p == given_ip) {
                        return Err(ApiError::new(
                            400,
                            "IllegalParam.IP",
                            format!(
                                "The param of IP is illegal: {given_ip} is not on {server_id}."
                            ),
                        ));
                    }
                }
                Ok(if given_ip.is_empty() {
                    eni.private_ips[0].clone()
                } else {
                    given_ip.to_string()
                })
            }
            "Eci" => {
                let Some(eci) = self.ecis.get(server_id) else {
                    return if check {
                        Err(not_found("Eci"))
                    } else {
                        Ok(given_ip.to_string())
                    };
                };
                if check && eci.vpc_id != group.vpc_id {
                    return Err(vpc_mismatch(&eci.vpc_id));
                }
                Ok(eci.ip.clone())
            }
            _ => {
                if check && !server_id.starts_with("i-") {
                    return Err(not_found("Ecs"));
                }
                Ok(given_ip.to_string())
            }
        }
    }

    fn nlb_health(&self, p: &Params) -> ApiResult {
        let id = nlb_get(p, "ListenerId")?;
        if let Some(size) = optional(p, "MaxResults") {
            if !size.parse::<usize>().is_ok_and(|n| (1..=100).contains(&n)) {
                return Err(ApiError::nlb_illegal(
                    "MaxResults",
                    "valid values: 1 to 100",
                ));
            }
        }
        let listener = self.listeners.get(id).ok_or_else(|| {
            ApiError::new(
                404,
                "ResourceNotFound.listener",
                format!("The specified resource {id} is not found."),
            )
        })?;
        let now = Instant::now();
        let report_delay = Duration::from_millis(self.timing.nlb_report_delay_ms);
        let infos: Vec<Value> = self
            .server_groups
            .get(&listener.server_group_id)
            .map(|group| {
                let abnormal: Vec<Value> = group
                    .backends
                    .iter()
                    .filter_map(|b| {
                        let unreported = b.registered_at.is_none_or(|at| now < at + report_delay);
                        let (status, reason) = if !b.registered || unreported {
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
}
