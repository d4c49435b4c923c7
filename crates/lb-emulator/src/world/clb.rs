//! The CLB API (SLB 2014-05-15): load balancers, VServer groups, TCP/UDP listeners,
//! backends given as a JSON `BackendServers` string, and health as CLB reports it.
//! Every call takes effect at once.

use serde_json::{json, Value};

use super::params::{get, json_u32, parse_port};
use super::{
    ApiError, ApiResult, BackendRec, Clb, ClbListener, Health, Params, VServerGroup, World,
};

impl World {
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
    use std::collections::HashMap;
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;
    use crate::config::EmulatorConfig;
    use crate::world::params::request_params;

    /// One CLB listener on port 80 (checks `switch`), its group, one registered
    /// backend; returns the world, the load balancer id and a time past every delay.
    fn clb_with_backend(switch: &str) -> (World, String, Instant) {
        let mut world = World::new(&EmulatorConfig::default());
        let lb = world
            .clb("CreateLoadBalancer", &request_params(&[]))
            .unwrap();
        let lb = lb["LoadBalancerId"].as_str().unwrap().to_string();
        let group = world
            .clb(
                "CreateVServerGroup",
                &request_params(&[("LoadBalancerId", &lb), ("VServerGroupName", "web")]),
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
            .clb("CreateLoadBalancerTCPListener", &request_params(&listener))
            .unwrap();
        world
            .clb("StartLoadBalancerListener", &request_params(&listener[..2]))
            .unwrap();
        let backend = r#"[{"ServerId":"eni-1","ServerIp":"10.0.0.1","Port":8080,"Type":"eni"}]"#;
        world
            .clb(
                "AddVServerGroupBackendServers",
                &request_params(&[("VServerGroupId", &group), ("BackendServers", backend)]),
            )
            .unwrap();
        (world, lb, Instant::now())
    }

    fn clb_status(world: &mut World, lb: &str) -> String {
        let health = world
            .clb(
                "DescribeHealthStatus",
                &request_params(&[("LoadBalancerId", lb)]),
            )
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
                &request_params(&[("LoadBalancerId", &lb), ("ListenerPort", "80")]),
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
                &request_params(&[("LoadBalancerId", &lb), ("ListenerPort", "80")]),
            )
            .unwrap();
        assert_eq!(attribute["HealthCheck"], "off");
        let bad = [
            ("LoadBalancerId", lb.as_str()),
            ("ListenerPort", "81"),
            ("HealthCheckSwitch", "maybe"),
        ];
        let refused = world
            .clb("CreateLoadBalancerTCPListener", &request_params(&bad))
            .unwrap_err();
        assert!(refused.message.contains("on, off"), "{}", refused.message);
    }
}
