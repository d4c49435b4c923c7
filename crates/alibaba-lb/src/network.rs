//! The VPC side of ENI backends: which ENI holds each pod IP (ECS
//! `DescribeNetworkInterfaces` 2014-05-26, by VPC and private IPs, at most 100 IPs a
//! call, paged with NextToken) and which CIDR blocks the VPC has (VPC
//! `DescribeVpcAttribute` 2016-04-28), so pod IPs outside the VPC (overlay networks)
//! are never offered to a load balancer. Signing, retries and the client-side rate
//! limit are the load-balancer clients' own (`transport`).

use std::collections::{BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::sync::Arc;

use serde::Deserialize;

use crate::config::{ClientConfig, Service};
use crate::credentials::CredentialProvider;
use crate::error::{Error, Result};
use crate::model::batches;
use crate::transport::{params, ApiClient};

/// `PrivateIpAddress.N` takes N from 1 to 100 (ECS SDK model).
pub const ENI_IPS_PER_CALL: usize = 100;
/// `MaxResults` of DescribeNetworkInterfaces (10 to 500).
pub const ENI_PAGE_SIZE: usize = 100;

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct PrivateIp {
    private_ip_address: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct PrivateIpSets {
    private_ip_set: Vec<PrivateIp>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct NetworkInterface {
    network_interface_id: String,
    private_ip_address: String,
    private_ip_sets: PrivateIpSets,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct NetworkInterfaceSets {
    network_interface_set: Vec<NetworkInterface>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct NetworkInterfacePage {
    network_interface_sets: NetworkInterfaceSets,
    next_token: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct SecondaryCidrBlocks {
    secondary_cidr_block: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct UserCidrs {
    user_cidr: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct VpcAttribute {
    cidr_block: String,
    secondary_cidr_blocks: SecondaryCidrBlocks,
    user_cidrs: UserCidrs,
}

/// A VPC's IPv4 CIDR blocks as `DescribeVpcAttribute` reports them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VpcCidrBlocks {
    pub cidr_block: String,
    pub secondary_cidr_blocks: Vec<String>,
    /// Reserved for the VPC's users; vSwitches (and so ENIs) live in the primary and
    /// secondary blocks, so these do not count as "in the VPC".
    pub user_cidrs: Vec<String>,
}

impl VpcCidrBlocks {
    /// Whether `ip` is inside the primary or a secondary block: a pod IP outside
    /// them is not a VPC address (an overlay IP), and no ENI can hold it.
    pub fn contains(&self, ip: &str) -> bool {
        let Ok(ip) = ip.parse::<Ipv4Addr>() else {
            return false;
        };
        std::iter::once(&self.cidr_block)
            .chain(&self.secondary_cidr_blocks)
            .any(|block| cidr_contains(block, ip))
    }
}

fn cidr_contains(block: &str, ip: Ipv4Addr) -> bool {
    let Some((net, bits)) = block.split_once('/') else {
        return false;
    };
    let (Ok(net), Ok(bits)) = (net.parse::<Ipv4Addr>(), bits.parse::<u32>()) else {
        return false;
    };
    if bits > 32 {
        return false;
    }
    let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
    u32::from(net) & mask == u32::from(ip) & mask
}

/// ECS and VPC lookups for one region.
#[derive(Debug)]
pub struct VpcNetwork {
    ecs: ApiClient,
    vpc: ApiClient,
    region: String,
}

impl VpcNetwork {
    pub fn new(config: &ClientConfig, credentials: Arc<dyn CredentialProvider>) -> Result<Self> {
        Ok(Self {
            ecs: ApiClient::new(config, Service::Ecs, credentials.clone())?,
            vpc: ApiClient::new(config, Service::Vpc, credentials)?,
            region: config.region.clone(),
        })
    }

    /// The ENI id holding each of `ips` in `vpc_id`, for the ENIs attached to an
    /// instance (`InUse`, the only ones a load balancer takes). IPs no such ENI holds
    /// are absent from the answer. Asks 100 IPs a call and reads every page.
    /// Calls and throttling answers per action so far, of ECS and of VPC.
    pub fn action_counts(&self) -> [(Service, Vec<crate::transport::ActionCount>); 2] {
        [
            (Service::Ecs, self.ecs.action_counts()),
            (Service::Vpc, self.vpc.action_counts()),
        ]
    }

    pub async fn eni_ids(&self, vpc_id: &str, ips: &[String]) -> Result<HashMap<String, String>> {
        let wanted: Vec<&String> = ips.iter().collect::<BTreeSet<_>>().into_iter().collect();
        let mut found = HashMap::new();
        for batch in batches(&wanted, ENI_IPS_PER_CALL) {
            let mut base = params([
                ("RegionId", self.region.clone()),
                ("VpcId", vpc_id.to_string()),
                ("Status", "InUse".to_string()),
                ("MaxResults", ENI_PAGE_SIZE.to_string()),
            ]);
            for (i, ip) in batch.iter().enumerate() {
                base.push((format!("PrivateIpAddress.{}", i + 1), ip.to_string()));
            }
            let mut next_token = String::new();
            loop {
                let mut query = base.clone();
                if !next_token.is_empty() {
                    query.push(("NextToken".into(), next_token.clone()));
                }
                let page: NetworkInterfacePage = self
                    .ecs
                    .call("DescribeNetworkInterfaces", &query, &[])
                    .await?
                    .body;
                for eni in page.network_interface_sets.network_interface_set {
                    let held = eni
                        .private_ip_sets
                        .private_ip_set
                        .into_iter()
                        .map(|p| p.private_ip_address)
                        .chain(std::iter::once(eni.private_ip_address));
                    for ip in held.filter(|ip| batch.contains(&ip)) {
                        found.insert(ip, eni.network_interface_id.clone());
                    }
                }
                if page.next_token.is_empty() || page.next_token == next_token {
                    break;
                }
                next_token = page.next_token;
            }
        }
        Ok(found)
    }

    /// The VPC's CIDR blocks. An unknown VPC is [`Error::NotFound`].
    pub async fn cidr_blocks(&self, vpc_id: &str) -> Result<VpcCidrBlocks> {
        const ACTION: &str = "DescribeVpcAttribute";
        let query = params([
            ("RegionId", self.region.clone()),
            ("VpcId", vpc_id.to_string()),
        ]);
        match self.vpc.call::<VpcAttribute>(ACTION, &query, &[]).await {
            Ok(answer) => Ok(VpcCidrBlocks {
                cidr_block: answer.body.cidr_block,
                secondary_cidr_blocks: answer.body.secondary_cidr_blocks.secondary_cidr_block,
                user_cidrs: answer.body.user_cidrs.user_cidr,
            }),
            Err(Error::Api {
                code, request_id, ..
            }) if crate::error::code_says_not_found(&code) => Err(Error::NotFound {
                action: ACTION.into(),
                what: format!("VPC {vpc_id}"),
                request_id,
            }),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vpc_blocks_contain_primary_and_secondary_addresses_only() {
        let blocks = VpcCidrBlocks {
            cidr_block: "192.168.0.0/16".into(),
            secondary_cidr_blocks: vec!["172.16.0.0/12".into()],
            user_cidrs: vec!["10.0.0.0/8".into()],
        };
        assert!(blocks.contains("192.168.3.4"));
        assert!(blocks.contains("172.31.255.255"));
        assert!(!blocks.contains("172.32.0.0"));
        assert!(!blocks.contains("10.1.2.3"), "user CIDRs hold no vSwitch");
        assert!(!blocks.contains("not-an-ip"));
        let everything = VpcCidrBlocks {
            cidr_block: "0.0.0.0/0".into(),
            ..VpcCidrBlocks::default()
        };
        assert!(everything.contains("8.8.8.8"));
        assert!(!VpcCidrBlocks::default().contains("10.0.0.1"));
    }

    #[test]
    fn network_interface_page_parses_the_sdk_shape() {
        let body = r#"{"RequestId":"R","NextToken":"t2","TotalCount":1,"NetworkInterfaceSets":{"NetworkInterfaceSet":[
            {"NetworkInterfaceId":"eni-1","PrivateIpAddress":"10.0.0.1","Status":"InUse",
             "PrivateIpSets":{"PrivateIpSet":[{"PrivateIpAddress":"10.0.0.1","Primary":true},{"PrivateIpAddress":"10.0.0.9","Primary":false}]}}]}}"#;
        let page: NetworkInterfacePage = serde_json::from_str(body).unwrap();
        assert_eq!(page.next_token, "t2");
        let eni = &page.network_interface_sets.network_interface_set[0];
        assert_eq!(eni.network_interface_id, "eni-1");
        assert_eq!(
            eni.private_ip_sets.private_ip_set[1].private_ip_address,
            "10.0.0.9"
        );
    }
}
