//! The ECS and VPC side of the emulated account: which ENI holds which private IP
//! (ECS `DescribeNetworkInterfaces`, 2014-05-26), which CIDR blocks a VPC has (VPC
//! `DescribeVpcAttribute`, 2016-04-28), and the inventory tests fill through the
//! control endpoints (VPCs, ENIs, elastic container instances). CLB and NLB read the
//! same inventory to refuse ENI/ECI backends that do not exist or are not running.

use serde_json::{json, Value};

use super::params::{flat_list, get, ipv4};
use super::{ApiError, ApiResult, Eci, Eni, Params, Vpc, World, DEFAULT_VPC_ID};

/// `PrivateIpAddress.N` and `NetworkInterfaceId.N`: N from 1 to 100 (SDK model).
const MAX_FILTER_VALUES: usize = 100;
/// `MaxResults` of DescribeNetworkInterfaces: 10 to 500; smaller values become 10,
/// larger ones 500, and 10 when absent (SDK model).
const MIN_PAGE: usize = 10;
const MAX_PAGE: usize = 500;
/// ENI states ECS knows (the `Status` filter's valid values).
const ENI_STATES: [&str; 5] = ["Available", "Attaching", "InUse", "Detaching", "Deleting"];

/// What a test registers through `POST /_emulator/enis`.
#[derive(Debug, serde::Deserialize)]
pub struct EniRegistration {
    pub network_interface_id: Option<String>,
    pub vpc_id: Option<String>,
    pub private_ips: Vec<String>,
    pub status: Option<String>,
    pub instance_id: Option<String>,
    pub name: Option<String>,
}

/// What a test registers through `POST /_emulator/ecis`.
#[derive(Debug, serde::Deserialize)]
pub struct EciRegistration {
    pub container_group_id: Option<String>,
    pub vpc_id: Option<String>,
    pub ip: String,
    pub status: Option<String>,
}

impl World {
    pub fn ecs(&mut self, action: &str, p: &Params) -> ApiResult {
        match action {
            "DescribeNetworkInterfaces" => self.describe_network_interfaces(p),
            other => Err(unknown_action(other)),
        }
    }

    pub fn vpc(&mut self, action: &str, p: &Params) -> ApiResult {
        match action {
            "DescribeVpcAttribute" => {
                get(p, "RegionId")?;
                let id = get(p, "VpcId")?;
                let vpc = self.vpcs.get(id).ok_or_else(|| {
                    ApiError::new(
                        404,
                        "InvalidVpcId.NotFound",
                        format!("Specified VPC {id} does not exist."),
                    )
                })?;
                Ok(json!({
                    "VpcId": vpc.vpc_id,
                    "VpcName": vpc.vpc_id,
                    "RegionId": self.region,
                    "Status": "Available",
                    "CidrBlock": vpc.cidr_block,
                    "SecondaryCidrBlocks": {"SecondaryCidrBlock": vpc.secondary_cidr_blocks},
                    "UserCidrs": {"UserCidr": vpc.user_cidrs},
                    "IsDefault": false,
                }))
            }
            other => Err(unknown_action(other)),
        }
    }

    /// Adds or replaces a VPC (control endpoint).
    pub fn register_vpc(&mut self, vpc: Vpc) -> Result<Vpc, String> {
        for cidr in std::iter::once(&vpc.cidr_block)
            .chain(&vpc.secondary_cidr_blocks)
            .chain(&vpc.user_cidrs)
        {
            if !cidr.split_once('/').is_some_and(|(ip, bits)| {
                ipv4(ip).is_some() && bits.parse::<u8>().is_ok_and(|b| b <= 32)
            }) {
                return Err(format!("{cidr:?} is not an IPv4 CIDR block"));
            }
        }
        if !vpc.vpc_id.starts_with("vpc-") {
            return Err("vpc_id must start with vpc-".into());
        }
        self.vpcs.insert(vpc.vpc_id.clone(), vpc.clone());
        Ok(vpc)
    }

    /// Adds an ENI holding `private_ips` (control endpoint); returns it.
    pub fn register_eni(&mut self, r: EniRegistration) -> Result<Eni, String> {
        let id = match r.network_interface_id {
            Some(id) if id.starts_with("eni-") => id,
            Some(id) => return Err(format!("{id:?}: ENI ids start with eni-")),
            None => self.new_id("eni"),
        };
        if r.private_ips.is_empty() || r.private_ips.iter().any(|ip| ipv4(ip).is_none()) {
            return Err("private_ips must be one or more IPv4 addresses".into());
        }
        let status = r.status.unwrap_or_else(|| "InUse".into());
        if !ENI_STATES.contains(&status.as_str()) {
            return Err(format!("status must be one of {ENI_STATES:?}"));
        }
        let eni = Eni {
            network_interface_id: id.clone(),
            vpc_id: r.vpc_id.unwrap_or_else(|| DEFAULT_VPC_ID.into()),
            status,
            private_ips: r.private_ips,
            instance_id: r.instance_id.unwrap_or_else(|| "i-emulator".into()),
            name: r.name.unwrap_or_default(),
        };
        self.enis.insert(id, eni.clone());
        Ok(eni)
    }

    /// Adds an elastic container instance (control endpoint); returns it.
    pub fn register_eci(&mut self, r: EciRegistration) -> Result<Eci, String> {
        let id = match r.container_group_id {
            Some(id) if id.starts_with("eci-") => id,
            Some(id) => return Err(format!("{id:?}: ECI ids start with eci-")),
            None => self.new_id("eci"),
        };
        if ipv4(&r.ip).is_none() {
            return Err("ip must be an IPv4 address".into());
        }
        let eci = Eci {
            container_group_id: id.clone(),
            vpc_id: r.vpc_id.unwrap_or_else(|| DEFAULT_VPC_ID.into()),
            ip: r.ip,
            status: r.status.unwrap_or_else(|| "Running".into()),
        };
        self.ecis.insert(id, eci.clone());
        Ok(eci)
    }

    fn describe_network_interfaces(&self, p: &Params) -> ApiResult {
        get(p, "RegionId")?;
        let values = |prefix: &str| -> Result<Vec<String>, ApiError> {
            let values: Vec<String> = flat_list(p, prefix)
                .into_iter()
                .filter_map(|m| m.get("").cloned())
                .collect();
            if values.len() > MAX_FILTER_VALUES {
                return Err(ApiError::invalid(
                    prefix,
                    format!("at most {MAX_FILTER_VALUES} values, got {}", values.len()),
                ));
            }
            Ok(values)
        };
        let ips = values("PrivateIpAddress")?;
        let ids = values("NetworkInterfaceId")?;
        let filter = |name: &str| p.get(name).filter(|v| !v.is_empty());
        if let Some(status) = filter("Status") {
            if !ENI_STATES.contains(&status.as_str()) {
                return Err(ApiError::invalid("Status", format!("{status:?}")));
            }
        }
        if let Some(kind) = filter("Type") {
            if !matches!(kind.as_str(), "Primary" | "Secondary") {
                return Err(ApiError::invalid("Type", format!("{kind:?}")));
            }
        }
        let matching: Vec<&Eni> = self
            .enis
            .values()
            .filter(|e| filter("VpcId").is_none_or(|v| *v == e.vpc_id))
            .filter(|e| filter("Status").is_none_or(|s| *s == e.status))
            .filter(|e| filter("InstanceId").is_none_or(|i| *i == e.instance_id))
            .filter(|e| filter("NetworkInterfaceName").is_none_or(|n| *n == e.name))
            .filter(|e| ids.is_empty() || ids.contains(&e.network_interface_id))
            .filter(|e| ips.is_empty() || e.private_ips.iter().any(|ip| ips.contains(ip)))
            .collect();
        let size = match filter("MaxResults") {
            Some(v) => v
                .parse::<usize>()
                .map_err(|e| ApiError::invalid("MaxResults", e))?
                .clamp(MIN_PAGE, MAX_PAGE),
            None => MIN_PAGE,
        };
        let start = match filter("NextToken") {
            Some(token) => token
                .strip_prefix("eni-page-")
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|n| *n <= matching.len())
                .ok_or_else(|| ApiError::invalid("NextToken", "unknown token"))?,
            None => 0,
        };
        let end = (start + size).min(matching.len());
        let next = if end < matching.len() {
            format!("eni-page-{end}")
        } else {
            String::new()
        };
        let items: Vec<Value> = matching[start..end]
            .iter()
            .map(|e| {
                json!({
                    "NetworkInterfaceId": e.network_interface_id,
                    "NetworkInterfaceName": e.name,
                    "Status": e.status,
                    "Type": "Secondary",
                    "VpcId": e.vpc_id,
                    "VSwitchId": "vsw-emulator",
                    "InstanceId": e.instance_id,
                    "PrivateIpAddress": e.private_ips[0],
                    "PrivateIpSets": {"PrivateIpSet": e.private_ips.iter().enumerate().map(|(i, ip)| json!({
                        "PrivateIpAddress": ip, "Primary": i == 0,
                    })).collect::<Vec<_>>()},
                })
            })
            .collect();
        Ok(json!({
            "NetworkInterfaceSets": {"NetworkInterfaceSet": items},
            "NextToken": next,
            "TotalCount": matching.len(),
            "PageSize": size,
        }))
    }
}

fn unknown_action(action: &str) -> ApiError {
    ApiError::new(
        404,
        "InvalidAction.NotFound",
        format!("Specified api {action} is not found, please check your url and method."),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::EmulatorConfig;
    use crate::world::params::request_params;

    fn world_with_enis(count: usize) -> World {
        let mut world = World::new(&EmulatorConfig::default());
        for i in 0..count {
            world
                .register_eni(EniRegistration {
                    network_interface_id: None,
                    vpc_id: None,
                    private_ips: vec![format!("10.1.{}.{}", i / 250, i % 250 + 1)],
                    status: None,
                    instance_id: None,
                    name: None,
                })
                .unwrap();
        }
        world
    }

    #[test]
    fn private_ip_filter_finds_the_eni_holding_each_ip() {
        let mut world = world_with_enis(3);
        let answer = world
            .ecs(
                "DescribeNetworkInterfaces",
                &request_params(&[
                    ("RegionId", "cn-hangzhou"),
                    ("VpcId", DEFAULT_VPC_ID),
                    ("PrivateIpAddress.1", "10.1.0.2"),
                    ("PrivateIpAddress.2", "10.9.9.9"),
                ]),
            )
            .unwrap();
        let set = answer["NetworkInterfaceSets"]["NetworkInterfaceSet"]
            .as_array()
            .unwrap();
        assert_eq!(set.len(), 1);
        assert_eq!(
            set[0]["PrivateIpSets"]["PrivateIpSet"][0]["PrivateIpAddress"],
            "10.1.0.2"
        );
    }

    #[test]
    fn more_than_100_ips_per_call_are_refused() {
        let mut world = world_with_enis(0);
        let ips: Vec<(String, String)> = (1..=101)
            .map(|i| {
                (
                    format!("PrivateIpAddress.{i}"),
                    format!("10.2.0.{}", i % 250),
                )
            })
            .collect();
        let mut p = request_params(&[("RegionId", "cn-hangzhou")]);
        p.extend(ips);
        let refused = world.ecs("DescribeNetworkInterfaces", &p).unwrap_err();
        assert_eq!(refused.code, "InvalidParameter.PrivateIpAddress");
    }

    #[test]
    fn max_results_is_clamped_to_10_to_500_and_pages_with_next_token() {
        let mut world = world_with_enis(25);
        let page = |world: &mut World, max: &str, token: &str| {
            world
                .ecs(
                    "DescribeNetworkInterfaces",
                    &request_params(&[
                        ("RegionId", "cn-hangzhou"),
                        ("MaxResults", max),
                        ("NextToken", token),
                    ]),
                )
                .unwrap()
        };
        let first = page(&mut world, "3", "");
        assert_eq!(
            first["NetworkInterfaceSets"]["NetworkInterfaceSet"]
                .as_array()
                .unwrap()
                .len(),
            10,
            "3 is raised to 10"
        );
        let token = first["NextToken"].as_str().unwrap().to_string();
        let rest = page(&mut world, "9999", &token);
        assert_eq!(
            rest["NetworkInterfaceSets"]["NetworkInterfaceSet"]
                .as_array()
                .unwrap()
                .len(),
            15
        );
        assert_eq!(rest["NextToken"], "");
    }

    #[test]
    fn vpc_attribute_reports_primary_and_secondary_blocks_and_unknown_vpcs_are_404() {
        let mut world = world_with_enis(0);
        world
            .register_vpc(Vpc {
                vpc_id: "vpc-two".into(),
                cidr_block: "192.168.0.0/16".into(),
                secondary_cidr_blocks: vec!["172.16.0.0/12".into()],
                user_cidrs: vec![],
            })
            .unwrap();
        let answer = world
            .vpc(
                "DescribeVpcAttribute",
                &request_params(&[("RegionId", "cn-hangzhou"), ("VpcId", "vpc-two")]),
            )
            .unwrap();
        assert_eq!(answer["CidrBlock"], "192.168.0.0/16");
        assert_eq!(
            answer["SecondaryCidrBlocks"]["SecondaryCidrBlock"][0],
            "172.16.0.0/12"
        );
        let missing = world
            .vpc(
                "DescribeVpcAttribute",
                &request_params(&[("RegionId", "cn-hangzhou"), ("VpcId", "vpc-none")]),
            )
            .unwrap_err();
        assert_eq!(
            (missing.status, missing.code.as_str()),
            (404, "InvalidVpcId.NotFound")
        );
    }
}
