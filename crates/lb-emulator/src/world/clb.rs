//! The CLB API (SLB 2014-05-15): load balancers, VServer groups, TCP/UDP/HTTP/HTTPS
//! listeners (HTTPS naming a server certificate the account holds),
//! backends given as a JSON `BackendServers` string, and health as CLB reports it.
//! Every call takes effect at once. Requests are checked as the API reference and
//! the SDK model describe them: backend types `ecs`/`eni`/`eci` only (no `ip`), ENI
//! and ECI backends only on high-performance instances, with their `ServerIp`, and
//! only if they exist and run; at most 20 backends per call; descriptions and names
//! of the documented shape.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::params::{
    clb_instance_name_ok, clb_text_ok, get, ipv4, json_u32, on_off, one_of, parse_port, tags,
    TAGS_PER_CREATE,
};
use super::{acl, listener_settings};
use super::{
    ApiError, ApiResult, BackendRec, Clb, ClbListener, Health, Params, VServerGroup, World,
};
use crate::account_quotas::{CLB_INSTANCES, CLB_INSTANCES_PER_SERVER};

/// Backends per Add/Remove/Set call ("at most 20 backend servers in each call").
pub const CLB_BACKENDS_PER_CALL: usize = 20;
/// `LoadBalancerSpec` values of CreateLoadBalancer (SDK model).
const CLB_SPECS: [&str; 6] = [
    "slb.s1.small",
    "slb.s2.small",
    "slb.s2.medium",
    "slb.s3.small",
    "slb.s3.medium",
    "slb.s3.large",
];

/// What a `BackendServers` call is for: adding checks that the server exists and
/// runs; removing and updating only name servers already in the group.
#[derive(Clone, Copy, PartialEq, Eq)]
enum BackendUse {
    Add,
    Remove,
    Update,
}

fn invalid_type(kind: &str) -> ApiError {
    ApiError::new(
        400,
        "BackendServer.InvalidType",
        format!("The specified Type {kind:?} is invalid (valid: ecs, eni, eci)."),
    )
}

fn server_not_exist(id: &str) -> ApiError {
    ApiError::new(
        400,
        "InvalidServerId.NotExist",
        format!("The specified ServerId {id} is not exist."),
    )
}

/// A port with listeners of several protocols, named without `ListenerProtocol`
/// (StartLoadBalancerListener's error table: 400, "More than 1 listener is found").
fn too_many_listeners() -> ApiError {
    ApiError::new(
        400,
        "TooManyListeners",
        "More than 1 listener is found, please be more specified.",
    )
}

/// `ListenerPort`: required, 1 to 65535 (every listener action's SDK model).
fn listener_port(p: &Params) -> Result<u16, ApiError> {
    let port = parse_port(p, "ListenerPort")?;
    if port == 0 {
        return Err(ApiError::invalid(
            "ListenerPort",
            "valid values: 1 to 65535",
        ));
    }
    Ok(port)
}

impl World {
    pub fn clb(&mut self, action: &str, p: &Params) -> ApiResult {
        match action {
            "CreateLoadBalancer" => self.clb_create(p),
            "DescribeLoadBalancerAttribute" => self.clb_describe(p),
            "DeleteLoadBalancer" => self.clb_delete(p),
            "CreateVServerGroup" => self.clb_create_group(p),
            "DescribeVServerGroups" => self.clb_groups(p),
            "DescribeVServerGroupAttribute" => {
                // RegionId is required here (SDK model), unlike most CLB reads.
                get(p, "RegionId")?;
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
            "SetLoadBalancerTCPListenerAttribute" => self.clb_set_listener(p, "tcp"),
            "SetLoadBalancerUDPListenerAttribute" => self.clb_set_listener(p, "udp"),
            "CreateLoadBalancerHTTPListener" => self.clb_create_listener(p, "http"),
            "CreateLoadBalancerHTTPSListener" => self.clb_create_listener(p, "https"),
            "DescribeLoadBalancerHTTPListenerAttribute" => self.clb_listener_attribute(p, "http"),
            "DescribeLoadBalancerHTTPSListenerAttribute" => self.clb_listener_attribute(p, "https"),
            "SetLoadBalancerHTTPListenerAttribute" => self.clb_set_listener(p, "http"),
            "SetLoadBalancerHTTPSListenerAttribute" => self.clb_set_listener(p, "https"),
            "StartLoadBalancerListener" => self.clb_start_listener(p),
            "DeleteLoadBalancerListener" => self.clb_delete_listener(p),
            "DeleteVServerGroup" => self.clb_delete_group(p),
            "AddVServerGroupBackendServers" => self.clb_add(p),
            "RemoveVServerGroupBackendServers" => self.clb_remove(p),
            "SetVServerGroupAttribute" => self.clb_set(p),
            "DescribeHealthStatus" => self.clb_health(p),
            "CreateAccessControlList" => self.clb_create_acl(p),
            "DescribeAccessControlListAttribute" => self.clb_describe_acl(p),
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
                self.check_quota(CLB_INSTANCES, self.clbs.len(), 1, "the region")?;
                let name = p.get("LoadBalancerName").filter(|n| !n.is_empty());
                if let Some(name) = name.filter(|n| !clb_instance_name_ok(n)) {
                    return Err(ApiError::invalid(
                        "LoadBalancerName",
                        format!("{name:?}: 1 to 80 characters, starting with a letter, of letters, digits, '.', '_' and '-'"),
                    ));
                }
                let address_type = one_of(p, "AddressType", "internet", &["internet", "intranet"])?;
                let spec = p.get("LoadBalancerSpec").cloned().unwrap_or_default();
                if !spec.is_empty() && !CLB_SPECS.contains(&spec.as_str()) {
                    return Err(ApiError::invalid(
                        "LoadBalancerSpec",
                        format!("{spec:?} is not one of {CLB_SPECS:?}"),
                    ));
                }
                let charge_type = one_of(
                    p,
                    "InstanceChargeType",
                    "PayBySpec",
                    &["PayBySpec", "PayByCLCU"],
                )?;
                // An intranet instance in a VPC takes its address from a vswitch
                // ("VSwitchId: required to create a CLB in a VPC").
                let vpc_id = p.get("VpcId").cloned().unwrap_or_default();
                let vswitch_id = p.get("VSwitchId").cloned().unwrap_or_default();
                if address_type == "intranet" && !vpc_id.is_empty() && vswitch_id.is_empty() {
                    return Err(ApiError::missing("VSwitchId"));
                }
                let tags = tags(p, TAGS_PER_CREATE, ApiError::invalid)?;
                let id = self.new_id("lb");
                let n = self.clbs.len() + 10;
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
                    spec,
                    charge_type,
                    vpc_id,
                    vswitch_id,
                    listeners: vec![],
                    tags,
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
            "LoadBalancerSpec": lb.spec,
            "InstanceChargeType": lb.charge_type,
            "Address": lb.address,
            "AddressType": lb.address_type,
            "AddressIPVersion": "ipv4",
            "VpcId": lb.vpc_id,
            "VSwitchId": lb.vswitch_id,
            "RegionId": self.region,
            "NetworkType": "vpc",
            "CreateTime": "2024-01-01T00:00Z",
            "ListenerPorts": {"ListenerPort": lb.listeners.iter().map(|l| l.port).collect::<Vec<_>>()},
            "ListenerPortsAndProtocol": {"ListenerPortAndProtocol": lb.listeners.iter().map(|l| json!({
                "ListenerPort": l.port, "ListenerProtocol": l.protocol,
            })).collect::<Vec<_>>()},
            "BackendServers": {"BackendServer": []},
            "Tags": {"Tag": lb.tags.iter().map(|(k, v)| json!({"TagKey": k, "TagValue": v})).collect::<Vec<_>>()},
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
        if let Some(name) = p
            .get("VServerGroupName")
            .filter(|n| !n.is_empty() && !clb_text_ok(n))
        {
            return Err(ApiError::invalid(
                "VServerGroupName",
                format!("{name:?}: 1 to 80 characters of letters, digits, '-', '/', '.' and '_'"),
            ));
        }
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
        // RegionId is required (SDK model of DescribeVServerGroups); the listeners a
        // group serves are reported only when asked for (`IncludeListener`, default false).
        get(p, "RegionId")?;
        let lb = self.clb_lb(p)?;
        let include_listener = p
            .get("IncludeListener")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let groups: Vec<Value> = self
            .vgroups
            .values()
            .filter(|g| g.load_balancer_id == lb.id)
            .map(|g| {
                let listeners: Vec<Value> = lb
                    .listeners
                    .iter()
                    .filter(|l| include_listener && l.vserver_group_id == g.id)
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
        let port = listener_port(p)?;
        let layer7 = matches!(protocol, "http" | "https");
        // HTTP/HTTPS listeners take `Bandwidth` as optional (R-HTTPListener).
        let bandwidth: i64 = match p.get("Bandwidth").filter(|v| !v.is_empty()) {
            None if layer7 => -1,
            _ => get(p, "Bandwidth")?
                .parse()
                .map_err(|e| ApiError::invalid("Bandwidth", e))?,
        };
        if bandwidth != -1 && !(1..=5120).contains(&bandwidth) {
            return Err(ApiError::invalid(
                "Bandwidth",
                "valid values: -1 or 1 to 5120",
            ));
        }
        let group_id = p.get("VServerGroupId").cloned().unwrap_or_default();
        if !group_id.is_empty() {
            match self.vgroups.get(&group_id) {
                None => {
                    return Err(ApiError::new(
                        400,
                        "InvalidParameter.VServerGroupId.NotFound",
                        "The specified VServerGroupId does not exist.",
                    ))
                }
                Some(group) if group.load_balancer_id != lb_id => {
                    return Err(ApiError::invalid(
                        "VServerGroupId",
                        format!("{group_id} belongs to another load balancer"),
                    ))
                }
                Some(_) => {}
            }
        }
        let (health_check, settings) = if layer7 {
            // `HealthCheck` and `StickySession` are required on HTTP/HTTPS listeners.
            let switch =
                on_off(p, "HealthCheck")?.ok_or_else(|| ApiError::missing("HealthCheck"))?;
            get(p, "StickySession")?;
            let mut settings = listener_settings::clb_http(p)?;
            if let Some(cert) = self.server_certificate(p, protocol)? {
                settings.insert("ServerCertificateId".into(), json!(cert));
            } else if protocol == "https" {
                return Err(ApiError::missing("ServerCertificateId"));
            }
            (switch, settings)
        } else {
            let switch = on_off(p, "HealthCheckSwitch")?.unwrap_or(true);
            let settings = listener_settings::clb(p, protocol == "tcp")?;
            (
                switch,
                listener_settings::clb_merged(&Default::default(), settings)?,
            )
        };
        let mut settings = settings;
        if let Some(id) = self.listener_acl_id(p)? {
            settings.insert("AclId".into(), json!(id));
        }
        acl::check_acl(&settings)?;
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
            settings,
        });
        Ok(json!({}))
    }

    /// `SetLoadBalancer{TCP,UDP}ListenerAttribute`: the switch and the health-check
    /// and drain settings, checked as on create, laid over the current ones.
    fn clb_set_listener(&mut self, p: &Params, protocol: &str) -> ApiResult {
        let lb_id = self.clb_lb(p)?.id.clone();
        let port = parse_port(p, "ListenerPort")?;
        let layer7 = matches!(protocol, "http" | "https");
        let (switch, mut update) = if layer7 {
            let mut update = listener_settings::clb_http(p)?;
            if let Some(cert) = self.server_certificate(p, protocol)? {
                update.insert("ServerCertificateId".into(), json!(cert));
            }
            (on_off(p, "HealthCheck")?, update)
        } else {
            (
                on_off(p, "HealthCheckSwitch")?,
                listener_settings::clb(p, protocol == "tcp")?,
            )
        };
        if let Some(id) = self.listener_acl_id(p)? {
            update.insert("AclId".into(), json!(id));
        }
        let lb = self.clbs.get_mut(&lb_id).expect("checked");
        let listener = lb
            .listeners
            .iter_mut()
            .find(|l| l.port == port && l.protocol == protocol)
            .ok_or_else(|| {
                ApiError::new(
                    400,
                    "InvalidParameter.ListenerNotFound",
                    format!("The listener {port}/{protocol} does not exist."),
                )
            })?;
        let merged = if layer7 {
            let mut merged = listener.settings.clone();
            merged.extend(update);
            merged
        } else {
            listener_settings::clb_merged(&listener.settings, update)?
        };
        acl::check_acl(&merged)?;
        listener.settings = merged;
        if let Some(on) = switch {
            listener.health_check = on;
        }
        Ok(json!({}))
    }

    fn clb_listener_attribute(&self, p: &Params, protocol: &str) -> ApiResult {
        let lb = self.clb_lb(p)?;
        let port = listener_port(p)?;
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
        let mut attribute = if matches!(protocol, "http" | "https") {
            listener_settings::clb_http_described(&listener.settings)
        } else {
            listener_settings::clb_described(&listener.settings)
        };
        for (k, v) in [
            ("LoadBalancerId", json!(lb.id)),
            ("ListenerPort", json!(listener.port)),
            ("Status", json!(listener.status)),
            ("VServerGroupId", json!(listener.vserver_group_id)),
            (
                "HealthCheck",
                json!(if listener.health_check { "on" } else { "off" }),
            ),
        ] {
            attribute[k] = v;
        }
        Ok(attribute)
    }

    /// `DeleteLoadBalancerListener`: by port, and by `ListenerProtocol` when the port
    /// has listeners of two protocols.
    fn clb_delete_listener(&mut self, p: &Params) -> ApiResult {
        let lb_id = self.clb_lb(p)?.id.clone();
        let port = parse_port(p, "ListenerPort")?;
        let protocol = p
            .get("ListenerProtocol")
            .filter(|s| !s.is_empty())
            .map(|s| s.to_ascii_lowercase());
        let lb = self.clbs.get_mut(&lb_id).expect("checked");
        let matching = lb
            .listeners
            .iter()
            .filter(|l| l.port == port && protocol.as_ref().is_none_or(|p| *p == l.protocol))
            .count();
        match matching {
            0 => Err(ApiError::new(
                400,
                "InvalidParameter.ListenerNotFound",
                format!("The listener {port} does not exist."),
            )),
            1 => {
                lb.listeners.retain(|l| {
                    !(l.port == port && protocol.as_ref().is_none_or(|p| *p == l.protocol))
                });
                Ok(json!({}))
            }
            _ => Err(ApiError::new(
                400,
                "TooManyListeners",
                format!("port {port} has listeners of two protocols: ListenerProtocol is required"),
            )),
        }
    }

    /// `DeleteVServerGroup`: refused while a listener of its instance forwards to it.
    fn clb_delete_group(&mut self, p: &Params) -> ApiResult {
        let group = self.vgroup(p)?.clone();
        let in_use = self
            .clbs
            .get(&group.load_balancer_id)
            .is_some_and(|lb| lb.listeners.iter().any(|l| l.vserver_group_id == group.id));
        if in_use {
            return Err(ApiError::new(
                400,
                "RspoolVipExist",
                format!("The vserver group {} is used by a listener.", group.id),
            ));
        }
        self.vgroups.remove(&group.id);
        for b in &group.backends {
            self.event(
                "clb",
                &group.id,
                b,
                "removed",
                "server group deleted".into(),
            );
        }
        Ok(json!({}))
    }

    fn clb_start_listener(&mut self, p: &Params) -> ApiResult {
        let lb_id = self.clb_lb(p)?.id.clone();
        let port = listener_port(p)?;
        let protocol = p
            .get("ListenerProtocol")
            .filter(|v| !v.is_empty())
            .map(|s| s.to_ascii_lowercase());
        let lb = self.clbs.get_mut(&lb_id).expect("checked");
        // "Required if the same port is used by listeners of different protocols";
        // the reference's error table: 400 TooManyListeners.
        if protocol.is_none() && lb.listeners.iter().filter(|l| l.port == port).count() > 1 {
            return Err(too_many_listeners());
        }
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

    /// `ServerCertificateId`, if given: HTTPS listeners only, and a certificate the
    /// account holds (R-HTTPListener).
    fn server_certificate(&self, p: &Params, protocol: &str) -> Result<Option<String>, ApiError> {
        let Some(cert) = p.get("ServerCertificateId").filter(|v| !v.is_empty()) else {
            return Ok(None);
        };
        if protocol != "https" {
            return Err(ApiError::invalid(
                "ServerCertificateId",
                "not a parameter of an HTTP listener",
            ));
        }
        if !self.server_certificates.contains(cert) {
            return Err(ApiError::new(
                400,
                "ServerCertificateId.NotFound",
                format!("The specified ServerCertificateId {cert} does not exist."),
            ));
        }
        Ok(Some(cert.clone()))
    }

    /// Reads `BackendServers` for `group_id`'s load balancer, refusing what the real
    /// API refuses (README.md, the fidelity table, has the source of each rule).
    fn parse_backend_servers(
        &self,
        p: &Params,
        group_id: &str,
        usage: BackendUse,
    ) -> Result<Vec<BackendRec>, ApiError> {
        let lb = self
            .vgroups
            .get(group_id)
            .and_then(|g| self.clbs.get(&g.load_balancer_id));
        let raw = get(p, "BackendServers")?;
        let items: Vec<Value> =
            serde_json::from_str(raw).map_err(|e| ApiError::invalid("BackendServers", e))?;
        if items.is_empty() {
            return Err(ApiError::invalid(
                "BackendServers",
                "no backend server given",
            ));
        }
        if items.len() > CLB_BACKENDS_PER_CALL {
            return Err(ApiError::invalid(
                "BackendServers",
                format!(
                    "at most {CLB_BACKENDS_PER_CALL} backend servers per call, got {}",
                    items.len()
                ),
            ));
        }
        let mut out: Vec<BackendRec> = Vec::with_capacity(items.len());
        for item in &items {
            if !item.is_object() {
                return Err(ApiError::invalid(
                    "BackendServers",
                    "each item is an object",
                ));
            }
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
            let kind = match s("Type").as_str() {
                "" => "ecs".to_string(),
                k @ ("ecs" | "eni" | "eci") => k.to_string(),
                other => return Err(invalid_type(other)),
            };
            let port = item
                .get("Port")
                .and_then(json_u32)
                .filter(|p| (1..=65535).contains(p))
                .ok_or_else(|| ApiError::invalid("BackendServers", "Port must be 1 to 65535"))?;
            let weight = match item.get("Weight") {
                None => 100,
                Some(w) => json_u32(w).filter(|w| *w <= 100).ok_or_else(|| {
                    ApiError::invalid("BackendServers", "Weight must be 0 to 100")
                })?,
            };
            let description = s("Description");
            if !description.is_empty() && !clb_text_ok(&description) {
                return Err(ApiError::invalid(
                    "Description",
                    format!("{description:?}: 1 to 80 characters of letters, digits, '-', '/', '.' and '_'"),
                ));
            }
            let id_prefix = match kind.as_str() {
                "eni" => "eni-",
                "eci" => "eci-",
                _ => "i-",
            };
            if !server_id.starts_with(id_prefix) {
                return Err(server_not_exist(&server_id));
            }
            let ip = s("ServerIp");
            if kind != "ecs" {
                if ip.is_empty() {
                    return Err(ApiError::invalid(
                        "ServerIp",
                        format!("required for {kind} backends"),
                    ));
                }
                if ipv4(&ip).is_none() {
                    return Err(ApiError::invalid(
                        "ServerIp",
                        format!("{ip:?} is not an IP"),
                    ));
                }
                if usage != BackendUse::Remove && lb.is_some_and(|lb| !lb.high_performance()) {
                    return Err(ApiError::new(
                        400,
                        "BackendServer.InvalidType",
                        format!(
                            "{kind} backends are allowed only on high-performance instances; {} has no LoadBalancerSpec",
                            lb.map(|lb| lb.id.as_str()).unwrap_or_default()
                        ),
                    ));
                }
            }
            if usage == BackendUse::Add {
                self.check_server_runs(&kind, &server_id, &ip)?;
            }
            let rec = self.new_backend(server_id, ip, port as u16, weight, kind, description);
            if out.iter().any(|b| b.key() == rec.key()) {
                return Err(ApiError::invalid(
                    "BackendServers",
                    format!("{}:{} is given twice", rec.server_id, rec.port),
                ));
            }
            out.push(rec);
        }
        Ok(out)
    }

    /// ENI and ECI backends must exist, run, and carry `ServerIp` (ECS instances are
    /// not modelled: rollgate registers pods, never nodes).
    fn check_server_runs(&self, kind: &str, server_id: &str, ip: &str) -> Result<(), ApiError> {
        match kind {
            "eni" => {
                let eni = self.enis.get(server_id).ok_or_else(|| {
                    ApiError::new(
                        404,
                        "ResourceNotFound.vServers",
                        format!("The specified enis {server_id} does not exist."),
                    )
                })?;
                if eni.status != "InUse" {
                    return Err(ApiError::invalid(
                        "BackendServers",
                        format!(
                            "{server_id} is {}; only running (InUse) servers can be added",
                            eni.status
                        ),
                    ));
                }
                if !eni.private_ips.iter().any(|p| p == ip) {
                    return Err(ApiError::invalid(
                        "ServerIp",
                        format!("{ip} is not a private IP of {server_id}"),
                    ));
                }
            }
            "eci" => {
                let eci = self
                    .ecis
                    .get(server_id)
                    .ok_or_else(|| server_not_exist(server_id))?;
                if eci.status != "Running" {
                    return Err(ApiError::invalid(
                        "BackendServers",
                        format!(
                            "{server_id} is {}; only running servers can be added",
                            eci.status
                        ),
                    ));
                }
                if eci.ip != ip {
                    return Err(ApiError::invalid(
                        "ServerIp",
                        format!("{ip} is not the IP of {server_id}"),
                    ));
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn clb_add(&mut self, p: &Params) -> ApiResult {
        let group_id = self.vgroup(p)?.id.clone();
        let backends = self.parse_backend_servers(p, &group_id, BackendUse::Add)?;
        self.check_servers_per_clb(&group_id, &backends)?;
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

    /// A backend server (an ECS instance or ENI, by `ServerId`) may be in at most
    /// `CLB_INSTANCES_PER_SERVER` CLB instances: one new to this group's instance
    /// counts the instances that already hold it.
    fn check_servers_per_clb(&self, group_id: &str, adding: &[BackendRec]) -> Result<(), ApiError> {
        let lb_id = &self.vgroups[group_id].load_balancer_id;
        let holders = |server_id: &str| -> BTreeSet<&str> {
            self.vgroups
                .values()
                .filter(|g| g.backends.iter().any(|b| b.server_id == server_id))
                .map(|g| g.load_balancer_id.as_str())
                .collect()
        };
        let servers: BTreeSet<&str> = adding.iter().map(|b| b.server_id.as_str()).collect();
        for server_id in servers {
            let holders = holders(server_id);
            if !holders.contains(lb_id.as_str()) {
                let what = format!("server {server_id}");
                self.check_quota(CLB_INSTANCES_PER_SERVER, holders.len(), 1, &what)?;
            }
        }
        Ok(())
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
        // Servers not in the group are ignored, without an error (API reference).
        let wanted = self.parse_backend_servers(p, &group_id, BackendUse::Remove)?;
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
            self.parse_backend_servers(p, &group_id, BackendUse::Update)?
        } else {
            vec![]
        };
        let group = self.vgroups.get_mut(&group_id).expect("checked");
        if let Some(name) = p.get("VServerGroupName").filter(|n| !n.is_empty()) {
            if !clb_text_ok(name) {
                return Err(ApiError::invalid(
                    "VServerGroupName",
                    format!(
                        "{name:?}: 1 to 80 characters of letters, digits, '-', '/', '.' and '_'"
                    ),
                ));
            }
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
        let protocol = p
            .get("ListenerProtocol")
            .filter(|v| !v.is_empty())
            .map(|v| v.to_ascii_lowercase());
        if let Some(protocol) = &protocol {
            if !matches!(protocol.as_str(), "tcp" | "udp" | "http" | "https") {
                return Err(ApiError::invalid(
                    "ListenerProtocol",
                    format!("{protocol:?} is not one of tcp, udp, http, https"),
                ));
            }
        }
        let selected: Vec<&ClbListener> = lb
            .listeners
            .iter()
            .filter(|l| port.is_none_or(|p| p == l.port))
            .filter(|l| protocol.as_ref().is_none_or(|p| *p == l.protocol))
            .collect();
        if port.is_some() && protocol.is_none() && selected.len() > 1 {
            return Err(too_many_listeners());
        }
        let mut out = vec![];
        for listener in selected {
            let Some(group) = self.vgroups.get(&listener.vserver_group_id) else {
                continue;
            };
            for b in group.backends.iter().filter(|b| b.registered) {
                let status = clb_health_status(listener, b.health);
                let mut entry = json!({
                    "ServerId": b.server_id, "ServerIp": b.ip, "Port": b.port,
                    "ListenerPort": listener.port, "Protocol": listener.protocol,
                    "ServerHealthStatus": status, "Type": b.kind,
                });
                // "EniHost: the IP address of the ENI": for an `eni` backend, the IP of
                // the ENI it was registered with, so that pods sharing one ENI (several
                // secondary IPs) each have an entry of their own.
                if b.kind == "eni" {
                    entry["EniHost"] = json!(b.ip);
                }
                out.push(entry);
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
            .clb(
                "CreateLoadBalancer",
                &request_params(&[("LoadBalancerSpec", "slb.s1.small")]),
            )
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
            ("Bandwidth", "-1"),
        ];
        world
            .clb("CreateLoadBalancerTCPListener", &request_params(&listener))
            .unwrap();
        world
            .clb("StartLoadBalancerListener", &request_params(&listener[..2]))
            .unwrap();
        world
            .register_eni(crate::world::ecs::EniRegistration {
                network_interface_id: Some("eni-1".into()),
                vpc_id: None,
                private_ips: vec!["10.0.0.1".into()],
                status: None,
                instance_id: None,
                name: None,
            })
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
            ("Bandwidth", "-1"),
        ];
        let refused = world
            .clb("CreateLoadBalancerTCPListener", &request_params(&bad))
            .unwrap_err();
        assert!(refused.message.contains("on, off"), "{}", refused.message);
    }
}
