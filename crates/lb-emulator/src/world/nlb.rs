//! The NLB API (2022-04-30): load balancers that provision, server groups, listeners
//! and health per listener. Changes to groups, listeners and servers are asynchronous
//! jobs (see `simulation`) that the client polls with GetJobStatus; lists page.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;

use super::params::{flat_list, get, paginate, parse_port};
use super::{
    ApiError, ApiResult, BackendRec, Health, JobEffect, Nlb, NlbListener, Params, ServerGroup,
    World,
};

impl World {
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
}
