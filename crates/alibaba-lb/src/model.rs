//! Plain data exchanged with the controller, the same for CLB and NLB.

use std::fmt;

use crate::settings::ListenerSettings;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ListenerProtocol {
    Tcp,
    Udp,
    /// CLB layer-7 listeners (`protocol-port`): HTTP, and HTTPS with a server
    /// certificate. NLB has neither.
    Http,
    Https,
}

impl ListenerProtocol {
    /// Spelling used by both APIs (`tcp`/`udp` are accepted case-insensitively by CLB).
    pub fn as_api_str(self) -> &'static str {
        match self {
            ListenerProtocol::Tcp => "TCP",
            ListenerProtocol::Udp => "UDP",
            ListenerProtocol::Http => "HTTP",
            ListenerProtocol::Https => "HTTPS",
        }
    }

    /// The protocol a listener list names (`tcp`, `HTTPS`...), any case.
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "tcp" => Some(ListenerProtocol::Tcp),
            "udp" => Some(ListenerProtocol::Udp),
            "http" => Some(ListenerProtocol::Http),
            "https" => Some(ListenerProtocol::Https),
            _ => None,
        }
    }

    /// HTTP or HTTPS: the listener checks health over HTTP and takes no drain.
    pub fn is_layer7(self) -> bool {
        matches!(self, ListenerProtocol::Http | ListenerProtocol::Https)
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AddressType {
    #[default]
    Internet,
    Intranet,
}

impl AddressType {
    pub fn as_clb_str(self) -> &'static str {
        match self {
            AddressType::Internet => "internet",
            AddressType::Intranet => "intranet",
        }
    }
    pub fn as_nlb_str(self) -> &'static str {
        match self {
            AddressType::Internet => "Internet",
            AddressType::Intranet => "Intranet",
        }
    }
}

/// One listener port and the server group behind it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerSpec {
    pub port: u16,
    pub protocol: ListenerProtocol,
    /// Name of the server group to find or create, unique per Service port.
    pub server_group_name: String,
    /// The name earlier versions gave this group: a group of that name is used (never
    /// renamed) when none of `server_group_name` exists, but only within this load
    /// balancer: one of its vServer groups (CLB), or the group its listener on this
    /// port already forwards to (NLB, whose groups belong to the region).
    pub former_group_name: Option<String>,
    /// Health check and drain from the Service's annotations: sent when the listener
    /// (CLB) or server group (NLB) is created, and set again when they differ.
    pub settings: ListenerSettings,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneVSwitch {
    pub zone_id: String,
    pub vswitch_id: String,
}

/// A resource tag: key and value.
pub type Tag = (String, String);

/// The tags rollgate puts on what it creates, wherever the API takes tags: CLB and NLB
/// load balancers (`CreateLoadBalancer`) and NLB server groups (`CreateServerGroup`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceTags {
    /// The tag naming the owning cluster. A resource that carries this key with
    /// another value is another cluster's: never adopted, changed or deleted. NLB
    /// server groups are looked up by it (with their name), never by name alone.
    /// `None`: no ownership tags (then no region-wide lookup at all).
    pub cluster: Option<Tag>,
    /// Sent as well: the Service's uid, the user's `additional-resource-tags`.
    pub others: Vec<Tag>,
}

impl ResourceTags {
    /// Every tag, the cluster's first.
    pub fn all(&self) -> Vec<Tag> {
        self.cluster.iter().chain(&self.others).cloned().collect()
    }

    /// The other cluster `held` (a resource's tags) names, if it names one.
    pub fn other_cluster(&self, held: &[Tag]) -> Option<String> {
        let (key, value) = self.cluster.as_ref()?;
        held.iter()
            .find(|(k, v)| k == key && v != value)
            .map(|(_, v)| v.clone())
    }
}

/// Tags on one resource in one create call (both products' `CreateLoadBalancer`, NLB
/// `CreateServerGroup`: "Valid values of N: 1 to 20").
pub const TAGS_PER_RESOURCE: usize = 20;

/// Whether both APIs take `key` as a tag key (the SDK models of the create calls): 1
/// to 64 characters, not starting with `aliyun` or `acs:`, without `http://` or
/// `https://`.
pub fn tag_key_ok(key: &str) -> bool {
    !key.is_empty() && key.chars().count() <= 64 && !reserved_tag_text(key)
}

/// Whether both APIs take `value` as a tag value: at most 128 characters (empty is
/// fine), under the same reserved words as keys.
pub fn tag_value_ok(value: &str) -> bool {
    value.chars().count() <= 128 && !reserved_tag_text(value)
}

fn reserved_tag_text(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    lower.starts_with("aliyun")
        || lower.starts_with("acs:")
        || lower.contains("http://")
        || lower.contains("https://")
}

/// `tags` as RPC parameters (`Tag.N.Key`, `Tag.N.Value`, N from 1), as the official
/// SDKs flatten the `Tag` list of both products.
pub fn tag_params(tags: &[Tag]) -> Vec<(String, String)> {
    tags.iter()
        .enumerate()
        .flat_map(|(i, (key, value))| {
            [
                (format!("Tag.{}.Key", i + 1), key.clone()),
                (format!("Tag.{}.Value", i + 1), value.clone()),
            ]
        })
        .collect()
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadBalancerSpec {
    /// Name for a created load balancer.
    pub name: String,
    /// From the `...-loadbalancer-id` annotation: attach instead of create.
    pub existing_id: Option<String>,
    pub address_type: AddressType,
    pub vpc_id: Option<String>,
    /// NLB needs at least two zones; CLB uses the first for intranet addresses.
    pub zones: Vec<ZoneVSwitch>,
    pub listeners: Vec<ListenerSpec>,
    /// Put on what is created; the cluster's also decides what may be adopted. Each
    /// must pass `tag_key_ok` / `tag_value_ok`, at most `TAGS_PER_RESOURCE`.
    pub tags: ResourceTags,
    /// CLB only, read only when the instance is created: the `LoadBalancerSpec` and
    /// `InstanceChargeType` asked for. Any charge type but `PayBySpec` creates a
    /// pay-by-CLCU instance (`DEFAULT_CLB_CHARGE_TYPE`), which has no spec; with
    /// `PayBySpec` an empty spec keeps the client's configured one
    /// (`ClientConfig::clb_spec`).
    pub clb_instance: ClbInstance,
}

/// One listener of a load balancer and the server group it forwards to (empty: none,
/// or CLB's default server group).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerWiring {
    pub port: u16,
    pub protocol: ListenerProtocol,
    /// NLB listener id; `None` for CLB (addressed by port and protocol).
    pub listener_id: Option<String>,
    pub server_group_id: String,
}

/// A server group's id and name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerGroupName {
    pub id: String,
    pub name: String,
}

/// What a load balancer's listeners forward to, and the groups there are: every vServer
/// group of a CLB; for NLB the groups its listeners forward to (NLB groups belong to
/// the region, and are never searched for by name across it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Wiring {
    pub listeners: Vec<ListenerWiring>,
    pub groups: Vec<ServerGroupName>,
}

/// Everything needed to address one server group in later calls.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ServerGroupRef {
    pub load_balancer_id: String,
    pub server_group_id: String,
    pub listener_port: u16,
    pub listener_protocol: ListenerProtocol,
    /// NLB listener id (health is read per listener); `None` for CLB.
    pub listener_id: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadBalancer {
    pub id: String,
    /// IP or DNS name to publish in `status.loadBalancer.ingress`.
    pub address: Option<String>,
    /// We created it in this call (so we own its deletion).
    pub created: bool,
    pub listeners: Vec<ServerGroupRef>,
    /// CLB only: the instance's spec and charge type, which decide whether it takes
    /// pod (ENI/ECI) backends at all. `None` for NLB (every NLB takes IP servers).
    pub clb_instance: Option<ClbInstance>,
}

/// A CLB instance's `LoadBalancerSpec` and `InstanceChargeType`, as
/// `DescribeLoadBalancerAttribute` reports them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClbInstance {
    /// `slb.s1.small` ... `slb.s3.large`; empty for a shared-resource instance.
    pub spec: String,
    /// `PayBySpec` or `PayByCLCU`.
    pub charge_type: String,
}

impl ClbInstance {
    /// CLB accepts ENI and ECI backends only on performance-guaranteed instances: a
    /// pay-by-spec instance with a spec, or a pay-by-CLCU one (which has no spec). A
    /// pay-by-spec instance without a spec is shared-resource and refuses them.
    pub fn takes_pod_backends(&self) -> bool {
        !self.spec.is_empty() || self.charge_type == "PayByCLCU"
    }

    /// `LoadBalancerSpec slb.s1.small, PayBySpec` or `no LoadBalancerSpec (shared-resource), PayBySpec`.
    pub fn describe(&self) -> String {
        let charge = if self.charge_type.is_empty() {
            "PayBySpec"
        } else {
            self.charge_type.as_str()
        };
        if self.spec.is_empty() {
            format!("no LoadBalancerSpec, InstanceChargeType {charge}")
        } else {
            format!(
                "LoadBalancerSpec {}, InstanceChargeType {charge}",
                self.spec
            )
        }
    }
}

/// ENI (pod IP on a Terway ENI), IP, a whole ECS instance, or an elastic container
/// instance. CLB takes `ecs`, `eni` and `eci` only; NLB `Ip` groups take `Ip`, its
/// `Instance` groups the other three.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackendType {
    Eni,
    Ip,
    Ecs,
    Eci,
}

impl BackendType {
    pub fn as_clb_str(self) -> &'static str {
        match self {
            BackendType::Eni => "eni",
            BackendType::Ip => "ip",
            BackendType::Ecs => "ecs",
            BackendType::Eci => "eci",
        }
    }
    pub fn as_nlb_str(self) -> &'static str {
        match self {
            BackendType::Eni => "Eni",
            BackendType::Ip => "Ip",
            BackendType::Ecs => "Ecs",
            BackendType::Eci => "Eci",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "eni" => Some(BackendType::Eni),
            "ip" => Some(BackendType::Ip),
            "ecs" => Some(BackendType::Ecs),
            "eci" => Some(BackendType::Eci),
            _ => None,
        }
    }
}

/// Identity of a backend within a server group.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BackendKey {
    /// ENI id, ECS instance id, or the IP itself for IP backends.
    pub server_id: String,
    pub ip: String,
    pub port: u16,
}

impl fmt::Display for BackendKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({}:{})", self.server_id, self.ip, self.port)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backend {
    pub key: BackendKey,
    pub kind: BackendType,
    pub weight: u32,
    /// Ownership marker (rollgate writes `k8s/<port>/<owner hash>`).
    pub description: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HealthState {
    Healthy,
    /// Health checks fail; `reason` as the cloud says it (e.g. `CONNECT_TIMEOUT`).
    Unhealthy {
        reason: String,
    },
    /// Registered, no verdict yet (NLB `Initial`, or still being added).
    Pending,
    /// Weight 0: out of rotation on purpose (NLB `Unused`).
    Unused,
    /// Health checking is off for this listener, so no verdict will come.
    NotChecked,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendHealth {
    pub key: BackendKey,
    pub state: HealthState,
}

/// One look at a server group: its backends (ours or not) and their health, taken from
/// one listing of the group and one health report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupReading {
    pub backends: Vec<Backend>,
    pub health: Vec<BackendHealth>,
}

/// Splits `items` into API calls of at most `size` each.
pub fn batches<T>(items: &[T], size: usize) -> impl Iterator<Item = &[T]> {
    items.chunks(size.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(k: &str, v: &str) -> Tag {
        (k.to_string(), v.to_string())
    }

    #[test]
    fn tags_flatten_one_based_and_name_another_cluster_only_by_its_key() {
        let tags = ResourceTags {
            cluster: Some(tag("rollgate.io/cluster-id", "c1")),
            others: vec![tag("rollgate.io/service-uid", "u1"), tag("team", "")],
        };
        assert_eq!(
            tag_params(&tags.all()),
            vec![
                tag("Tag.1.Key", "rollgate.io/cluster-id"),
                tag("Tag.1.Value", "c1"),
                tag("Tag.2.Key", "rollgate.io/service-uid"),
                tag("Tag.2.Value", "u1"),
                tag("Tag.3.Key", "team"),
                tag("Tag.3.Value", ""),
            ]
        );
        let other = [tag("rollgate.io/cluster-id", "c2"), tag("x", "y")];
        assert_eq!(tags.other_cluster(&other), Some("c2".into()));
        assert_eq!(
            tags.other_cluster(&[tag("rollgate.io/cluster-id", "c1")]),
            None
        );
        // Untagged (made by an earlier version, or by hand): nobody else's.
        assert_eq!(tags.other_cluster(&[tag("team", "c2")]), None);
        assert_eq!(ResourceTags::default().other_cluster(&other), None);
        assert!(ResourceTags::default().all().is_empty());
    }

    #[test]
    fn batches_respect_the_limit_and_keep_every_item() {
        let items: Vec<u32> = (0..45).collect();
        let sizes: Vec<usize> = batches(&items, 20).map(|b| b.len()).collect();
        assert_eq!(sizes, vec![20, 20, 5]);
        let sizes: Vec<usize> = batches(&items, 40).map(|b| b.len()).collect();
        assert_eq!(sizes, vec![40, 5]);
        assert_eq!(batches(&items[..0], 20).count(), 0);
        let flattened: Vec<u32> = batches(&items, 20).flatten().copied().collect();
        assert_eq!(flattened, items);
    }

    #[test]
    fn backend_type_round_trips_through_both_spellings() {
        for t in [
            BackendType::Eni,
            BackendType::Ip,
            BackendType::Ecs,
            BackendType::Eci,
        ] {
            assert_eq!(BackendType::parse(t.as_clb_str()), Some(t));
            assert_eq!(BackendType::parse(t.as_nlb_str()), Some(t));
        }
    }

    /// The SDK models' tag rules, each bound on both sides.
    #[test]
    fn tag_keys_and_values_follow_the_sdk_rules() {
        assert!(tag_key_ok("k") && tag_key_ok(&"k".repeat(64)));
        for bad in ["", "aliyun-x", "ACS:x", "a http://x", "https://x"] {
            assert!(!tag_key_ok(bad), "{bad}");
        }
        assert!(!tag_key_ok(&"k".repeat(65)));
        assert!(tag_value_ok("") && tag_value_ok(&"v".repeat(128)));
        assert!(!tag_value_ok(&"v".repeat(129)));
        assert!(!tag_value_ok("Aliyun") && !tag_value_ok("see http://x"));
    }
}
