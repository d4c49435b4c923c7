//! The readiness-gate controller's model: what `plan` reads (a Service's facts, its
//! pods' gates and ports, the cloud's server groups) and what it decides (backend
//! changes, condition writes), and the gate condition's name. `plan`, `reasons`,
//! `service`, `pods` and `cloud` all speak these types; none of them is needed here.
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use alibaba_lb::{Backend, BackendKey, BackendType, HealthState};
use k8s_openapi::jiff::Timestamp;

use crate::names::{GateReason, GATE_PREFIX};

/// Weight of a backend in rotation unless the Service's `weight` annotation says
/// otherwise (both APIs take 0..=100).
pub const IN_ROTATION_WEIGHT: u32 = 100;

/// The gate condition type for a Service.
pub fn gate_condition_type(service: &str) -> String {
    format!("{GATE_PREFIX}{service}")
}

/// The Service named by a gate condition type, if it is one of ours.
pub fn service_of_gate(condition_type: &str) -> Option<&str> {
    condition_type
        .strip_prefix(GATE_PREFIX)
        .filter(|name| !name.is_empty())
}

/// Hex digits of the owner hash in markers: 64 bits, so two Services (of any clusters)
/// sharing one load balancer's group never collide by chance.
const OWNER_HASH_LEN: usize = 16;

/// Who a marker names: a Service (namespace and name) of one cluster, hashed. The names
/// are hashed rather than written out because CLB takes 80 characters of description
/// and a namespace and a Service name may have 63 each, a cluster id (a UID) 36.
pub fn owner_hash(service: &str, namespace: &str, cluster_id: &str) -> String {
    // `/` cannot occur in a namespace or Service name, so the parts never run together.
    let digest =
        alibaba_lb::sign::sha256_hex(format!("{namespace}/{service}/{cluster_id}").as_bytes());
    digest[..OWNER_HASH_LEN].to_string()
}

/// The ownership marker rollgate writes into each backend's description, and the name
/// of the server group it creates: `k8s/<port>/<owner hash>`, at most 26 characters
/// whatever the names (CLB's rule is 1 to 80).
pub fn owner_description(port: u16, service: &str, namespace: &str, cluster_id: &str) -> String {
    format!("k8s/{port}/{}", owner_hash(service, namespace, cluster_id))
}

/// The marker earlier versions wrote (the Alibaba cloud controller's shape, names
/// written out): backends and groups carrying it under this cluster's former id are
/// adopted once, on upgrade, and never written again.
pub fn legacy_owner_description(
    port: u16,
    service: &str,
    namespace: &str,
    cluster_id: &str,
) -> String {
    format!("k8s/{port}/{service}/{namespace}/{cluster_id}")
}

/// The cluster ids rollgate recognises its own markers under: the one it writes, and
/// the former one whose markers (legacy shape) it adopts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner<'a> {
    pub service: &'a str,
    pub namespace: &'a str,
    pub cluster_id: &'a str,
    /// The id earlier versions ran under (the explicit `--cluster-id`, else
    /// `kubernetes`); `None`: nothing is adopted.
    pub legacy_cluster_id: Option<&'a str>,
}

impl Owner<'_> {
    /// The marker written now, for one Service port.
    pub fn marker(&self, port: u16) -> String {
        owner_description(port, self.service, self.namespace, self.cluster_id)
    }

    /// The legacy marker of one Service port, when there is a former id.
    pub fn legacy_marker(&self, port: u16) -> Option<String> {
        self.legacy_cluster_id
            .map(|c| legacy_owner_description(port, self.service, self.namespace, c))
    }

    /// Whether `description` is this Service's marker for `port`, now or legacy.
    pub fn marks(&self, port: u16, description: &str) -> bool {
        description == self.marker(port) || self.legacy_marker(port).as_deref() == Some(description)
    }

    /// The Service port a description marks as this Service's (either shape; a port
    /// the Service no longer has included), or `None` when it is not.
    pub fn owned_port(&self, description: &str) -> Option<u16> {
        let rest = description.strip_prefix("k8s/")?;
        let (port, _) = rest.split_once('/')?;
        let port: u16 = port.parse().ok()?;
        self.marks(port, description).then_some(port)
    }
}

/// The name of the server group rollgate makes for one Service port: the ownership
/// marker itself. A UDP port whose number a TCP port of the Service also has gets
/// `/udp` after it, since a group serves one protocol (NLB) and each listener needs
/// its own.
pub fn server_group_name(
    port: &ServicePort,
    all: &[ServicePort],
    service: &str,
    namespace: &str,
    cluster_id: &str,
) -> String {
    with_protocol_suffix(
        port,
        all,
        owner_description(port.port, service, namespace, cluster_id),
    )
}

/// The name earlier versions gave that group (legacy marker, former cluster id): a
/// group of this name that the port's listener already forwards to is adopted.
pub fn legacy_server_group_name(
    port: &ServicePort,
    all: &[ServicePort],
    service: &str,
    namespace: &str,
    legacy_cluster_id: &str,
) -> String {
    with_protocol_suffix(
        port,
        all,
        legacy_owner_description(port.port, service, namespace, legacy_cluster_id),
    )
}

fn with_protocol_suffix(port: &ServicePort, all: &[ServicePort], owner: String) -> String {
    let shared = all
        .iter()
        .any(|p| p.port == port.port && p.protocol != port.protocol);
    if shared && port.protocol == "UDP" {
        format!("{owner}/udp")
    } else {
        owner
    }
}

/// The Service port a backend's description marks it as rollgate's for this Service
/// under `cluster_id` (current shape only; see [`Owner::owned_port`] for adoption).
pub fn owned_port(
    description: &str,
    service: &str,
    namespace: &str,
    cluster_id: &str,
) -> Option<u16> {
    Owner {
        service,
        namespace,
        cluster_id,
        legacy_cluster_id: None,
    }
    .owned_port(description)
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetPort {
    Number(u16),
    Name(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServicePort {
    pub port: u16,
    pub protocol: String,
    pub target: TargetPort,
}

/// What the plan needs of a Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceFacts {
    pub namespace: String,
    pub name: String,
    pub ports: Vec<ServicePort>,
    /// Opt-in: a gate already True goes back to False when its backend is lost.
    pub flip_back: bool,
    /// The weight each backend in rotation carries (`weight`, else
    /// `IN_ROTATION_WEIGHT`); a drained one has 0 whatever this says.
    pub weight: u32,
    /// Opt-in fail-open: a gate still not True this long after its pod's containers
    /// turned ready turns True (`GateTimedOut`).
    pub gate_timeout: Option<Duration>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodPort {
    pub name: Option<String>,
    pub container_port: u16,
    pub protocol: String,
}

/// The condition as it is on the pod now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GateCondition {
    pub status: bool,
    pub reason: String,
    pub message: String,
}

/// Pod deletion: when it was asked for and when the pod is killed at the latest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deletion {
    pub requested_at: Timestamp,
    pub deadline: Timestamp,
}

/// What the plan needs of a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatePod {
    pub name: String,
    pub uid: String,
    pub ip: Option<String>,
    /// The Service's selector matches the pod's labels.
    pub selected: bool,
    /// The pod has a readiness gate naming this Service.
    pub gated: bool,
    /// `ContainersReady` is True: the pod is ready but for its gates.
    pub containers_ready: bool,
    /// When `ContainersReady` last turned True (the gate timeout counts from it).
    pub containers_ready_since: Option<Timestamp>,
    pub deletion: Option<Deletion>,
    pub ports: Vec<PodPort>,
    /// This Service's gate condition, if present.
    pub gate: Option<GateCondition>,
}

impl GatePod {
    /// Registered in the load balancer: selected, not terminating, containers ready.
    pub fn eligible(&self) -> bool {
        self.selected && self.deletion.is_none() && self.containers_ready && self.ip.is_some()
    }

    /// The container port a Service port sends to, named ports resolved.
    pub fn resolve(&self, port: &ServicePort) -> Option<u16> {
        match &port.target {
            TargetPort::Number(n) => Some(*n),
            TargetPort::Name(name) => self
                .ports
                .iter()
                .find(|p| p.name.as_deref() == Some(name) && p.protocol == port.protocol)
                .map(|p| p.container_port),
        }
    }
}

/// One Service port's server group, as the cloud reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupState {
    pub service_port: u16,
    /// The Service port's protocol (`TCP`, `UDP`): a port may have both, each with its
    /// own listener and group.
    pub protocol: String,
    pub load_balancer_id: String,
    pub server_group_id: String,
    /// Every backend of the group, rollgate's and anyone else's.
    pub backends: Vec<Backend>,
    /// Health by backend; a registered backend missing here has no verdict yet.
    pub health: HashMap<BackendKey, HealthState>,
    /// The listener on this port, as messages name it (NLB id, or `TCP:80`).
    pub listener: String,
    /// The server group that listener forwards to (`None`: no listener on the port).
    /// Gates turn True only when it is this group: otherwise the pod gets no traffic.
    pub listener_target: Option<String>,
}

/// A cloud call that failed, as the condition message shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloudFailure {
    pub action: String,
    pub code: String,
    pub request_id: String,
    /// An account quota is used up (the cloud's message, which names it): no retry
    /// helps until the user raises it or frees resources.
    pub quota: Option<String>,
}

/// What the cloud side looks like for this Service.
#[derive(Clone, Debug, PartialEq)]
pub enum CloudState {
    /// One group per Service port (ports the cloud cannot serve are left out).
    Ready(Vec<GroupState>),
    /// The load balancer is being created or has no address yet.
    NotReady { load_balancer_id: Option<String> },
    /// Reading the groups failed; nothing is changed and no gate moves.
    Failed(CloudFailure),
    /// The CLB instance takes no pod (ENI/ECI) backends: nothing can be registered.
    PodBackendsRefused {
        load_balancer_id: String,
        /// Its spec and charge type, as messages show them.
        instance: String,
    },
}

/// Where a pod's backend lives, by pod IP (`eni::Placer` finds it; CLB only, since
/// NLB `Ip` groups take the IP itself).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Register the pod as this server (`eni-…` or `eci-…`) with its IP.
    Server { kind: BackendType, id: String },
    /// No ENI holds the IP and it is outside the VPC's CIDR blocks (an overlay IP):
    /// never registered.
    OutsideVpc,
    /// Inside the VPC, but no ENI holds the IP (yet): looked up again next time.
    NoEni,
}

pub struct PlanInput<'a> {
    pub service: &'a ServiceFacts,
    pub cluster_id: &'a str,
    /// The id earlier versions wrote markers under: backends of the legacy marker in
    /// rollgate's groups are adopted (re-marked, or removed when no live pod has them).
    pub legacy_cluster_id: Option<&'a str>,
    pub backend_type: BackendType,
    /// Pod IP -> where its backend lives, for products that register servers rather
    /// than IPs (CLB); an IP missing here has [`Placement::NoEni`].
    pub placements: &'a HashMap<String, Placement>,
    pub pods: &'a [GatePod],
    pub cloud: &'a CloudState,
    /// Time from termination to removal; never past the pod's own deadline.
    pub drain: Duration,
    pub now: Timestamp,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupChanges {
    pub service_port: u16,
    pub server_group_id: String,
    pub add: Vec<Backend>,
    /// Terminating pods: weight 0, still registered (connections drain).
    pub drain: Vec<Backend>,
    /// Back to full weight (an owned backend of a live pod found at weight 0).
    pub restore: Vec<Backend>,
    pub remove: Vec<BackendKey>,
}

impl GroupChanges {
    pub fn is_empty(&self) -> bool {
        self.add.is_empty()
            && self.drain.is_empty()
            && self.restore.is_empty()
            && self.remove.is_empty()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionWrite {
    pub pod: String,
    pub uid: String,
    pub status: bool,
    pub reason: GateReason,
    pub message: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GatePlan {
    pub changes: Vec<GroupChanges>,
    pub conditions: Vec<ConditionWrite>,
    /// The earliest drain deadline still ahead: reconcile again then.
    pub next_deadline: Option<Timestamp>,
    /// Gates of live pods that are not True after this plan (poll fast while > 0).
    pub pending_gates: usize,
    /// `pending_gates` by the reason on each gate.
    pub pending_reasons: BTreeMap<String, usize>,
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// A DNS label as Kubernetes allows for namespaces and Service names (1 to 63).
    fn label() -> impl Strategy<Value = String> {
        "[a-z]([-a-z0-9]{0,61}[a-z0-9])?"
    }

    proptest! {
        /// CLB takes 1 to 80 characters of description (and of vServer group name);
        /// the marker fits whatever the names and the cluster id (a UID, or a flag).
        #[test]
        fn the_marker_fits_clbs_80_characters_for_any_names(
            port in 1u16..,
            service in label(),
            namespace in label(),
            cluster in "[-a-z0-9]{1,100}",
        ) {
            let marker = owner_description(port, &service, &namespace, &cluster);
            prop_assert!(marker.len() <= 80, "{} ({} chars)", marker, marker.len());
            let group = format!("{marker}/udp");
            prop_assert!(group.len() <= 80, "{group}");
            // Read back as this Service's, on this port; never another's.
            let owner = Owner { service: &service, namespace: &namespace, cluster_id: &cluster, legacy_cluster_id: None };
            prop_assert_eq!(owner.owned_port(&marker), Some(port));
            let other_cluster = format!("{cluster}x");
            let other = Owner { cluster_id: &other_cluster, ..owner };
            prop_assert_eq!(other.owned_port(&marker), None);
            let other_service = format!("{service}x");
            let other = Owner { service: &other_service, ..owner };
            prop_assert_eq!(other.owned_port(&marker), None);
        }

        /// The parts are hashed apart: moving a `-` between namespace and name (or
        /// name and cluster) gives another owner.
        #[test]
        fn names_that_concatenate_alike_are_different_owners(
            a in "[a-z]{1,10}", b in "[a-z]{1,10}", c in "[a-z]{1,10}",
        ) {
            let one = owner_description(80, &format!("{a}-{b}"), &c, "k");
            let two = owner_description(80, &b, &format!("{c}-{a}"), "k");
            let three = owner_description(80, &a, &format!("{c}-{b}"), "k");
            prop_assert_ne!(&one, &two);
            prop_assert_ne!(&one, &three);
        }
    }

    #[test]
    fn the_legacy_marker_is_adopted_only_under_the_former_id() {
        let owner = Owner {
            service: "web",
            namespace: "shop",
            cluster_id: "5f0c1d2e",
            legacy_cluster_id: Some("kubernetes"),
        };
        #[rustfmt::skip]
        let cases = [
            (owner_description(80, "web", "shop", "5f0c1d2e"), Some(80)),
            ("k8s/80/web/shop/kubernetes".to_string(), Some(80)),
            ("k8s/443/web/shop/kubernetes".to_string(), Some(443)),
            // The legacy shape under the current id was never written: not adopted.
            ("k8s/80/web/shop/5f0c1d2e".to_string(), None),
            ("k8s/80/web/shop/other".to_string(), None),
            ("k8s/80/api/shop/kubernetes".to_string(), None),
            ("k8s/80/web/shop/kubernetes/extra".to_string(), None),
            ("added by hand".to_string(), None),
        ];
        for (description, want) in cases {
            assert_eq!(owner.owned_port(&description), want, "{description}");
        }
        let no_adoption = Owner {
            legacy_cluster_id: None,
            ..owner
        };
        assert_eq!(no_adoption.owned_port("k8s/80/web/shop/kubernetes"), None);
    }
}
