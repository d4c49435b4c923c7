//! CLB access control lists (SLB 2014-05-15, "访问控制" / access control): the lists
//! an account holds (`CreateAccessControlList`, `DescribeAccessControlListAttribute`)
//! and how a listener names one (`AclStatus`, `AclId`, `AclType` on every
//! `CreateLoadBalancer*Listener` and `SetLoadBalancer*ListenerAttribute`). A listener
//! may only name a list that exists, and with the switch on it needs the list and its
//! type. NLB has no such lists (it admits clients through security groups), so
//! nothing here is NLB's.

use serde_json::{json, Value};

use super::params::get;
use super::{AccessControlList, ApiError, ApiResult, Params, Settings, World};

/// Lists per region and account ("每个地域单账号可创建的访问控制策略组个数: 50").
pub const ACLS_PER_REGION: usize = 50;

fn acl_not_exist(id: &str) -> ApiError {
    ApiError::new(
        400,
        "AclNotExist",
        format!("The specified AclId {id} does not exist."),
    )
}

impl World {
    /// `CreateAccessControlList`: `AclName` required and unique in the region,
    /// `AddressIPVersion` `ipv4` (default) or `ipv6`, at most 50 lists.
    pub(super) fn clb_create_acl(&mut self, p: &Params) -> ApiResult {
        let name = get(p, "AclName")?.to_string();
        let version = p
            .get("AddressIPVersion")
            .filter(|v| !v.is_empty())
            .map(String::as_str)
            .unwrap_or("ipv4");
        if !matches!(version, "ipv4" | "ipv6") {
            return Err(ApiError::invalid(
                "AddressIPVersion",
                "valid values: ipv4, ipv6",
            ));
        }
        if self.acls.values().any(|a| a.name == name) {
            return Err(ApiError::new(
                400,
                "AclExistInRegion",
                format!("The AclName {name} already exists in the region."),
            ));
        }
        if self.acls.len() >= ACLS_PER_REGION {
            return Err(ApiError::new(
                400,
                "QuotaExceeded.AclsPerRegion",
                format!("At most {ACLS_PER_REGION} access control lists per region."),
            ));
        }
        let id = self.new_id("acl");
        self.acls.insert(
            id.clone(),
            AccessControlList {
                id: id.clone(),
                name,
                address_ip_version: version.to_string(),
            },
        );
        Ok(json!({ "AclId": id }))
    }

    /// `DescribeAccessControlListAttribute`: the list, and the listeners that name it
    /// (`RelatedListeners`, with the type each uses it as).
    pub(super) fn clb_describe_acl(&self, p: &Params) -> ApiResult {
        get(p, "RegionId")?;
        let id = get(p, "AclId")?;
        let acl = self.acls.get(id).ok_or_else(|| acl_not_exist(id))?;
        let related: Vec<Value> = self
            .clbs
            .values()
            .flat_map(|lb| lb.listeners.iter().map(move |l| (lb, l)))
            .filter(|(_, l)| l.settings.get("AclId") == Some(&json!(id)))
            .map(|(lb, l)| {
                json!({
                    "LoadBalancerId": lb.id,
                    "ListenerPort": l.port,
                    "Protocol": l.protocol,
                    "AclType": l.settings.get("AclType").cloned().unwrap_or(Value::Null),
                })
            })
            .collect();
        Ok(json!({
            "AclId": acl.id,
            "AclName": acl.name,
            "AddressIPVersion": acl.address_ip_version,
            "AclEntrys": {"AclEntry": []},
            "RelatedListeners": {"RelatedListener": related},
        }))
    }

    /// A listener's `AclId` in `p`, if given: a list the account holds.
    pub(super) fn listener_acl_id(&self, p: &Params) -> Result<Option<String>, ApiError> {
        let Some(id) = p.get("AclId").filter(|v| !v.is_empty()) else {
            return Ok(None);
        };
        if !self.acls.contains_key(id) {
            return Err(acl_not_exist(id));
        }
        Ok(Some(id.clone()))
    }
}

/// A listener's settings after create or set, checked as a whole: with `AclStatus`
/// on, `AclId` and `AclType` are required ("required when AclStatus is on").
pub fn check_acl(settings: &Settings) -> Result<(), ApiError> {
    if settings.get("AclStatus") == Some(&json!("on")) {
        for name in ["AclId", "AclType"] {
            if !settings.contains_key(name) {
                return Err(ApiError::new(
                    400,
                    "MissingParameter",
                    format!("{name} is mandatory when AclStatus is on."),
                ));
            }
        }
    }
    Ok(())
}
