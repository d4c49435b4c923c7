//! Where each pod's CLB backend lives. CLB has no IP backend type: a pod is registered
//! as the ENI that holds its IP (`eni`, Terway) or as the elastic container instance it
//! runs as (`eci`). This module owns the pod IP -> ENI lookup (ECS
//! `DescribeNetworkInterfaces` by VPC and private IPs, batched by the client), its
//! cache, the VPC CIDR check for IPs no ENI holds, and the Warning Event on a Service
//! whose pods are outside the VPC. NLB `Ip` groups take the IP itself and need none of it.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use alibaba_lb::{BackendType, Error as CloudError, Product, VpcCidrBlocks, VpcNetwork};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::EventType;

use super::metrics::GateMetrics;
use super::model::{GatePod, GroupChanges, Placement};
use super::reasons;
use crate::apply::{event, EventDedup, Events, Topic};
use crate::names::POD_IP_OUTSIDE_VPC_EVENT;
use crate::object::CachedPod;

/// How long a found pod IP -> ENI id stays trusted. Terway keeps a pod's IP on one ENI
/// for the pod's life; the id changes only when an IP is released and handed out again
/// on another ENI. A minute bounds how long a reused IP could be registered as its old
/// ENI (the registration is then refused, which also drops the entry at once), while a
/// Service whose gates poll every second asks ECS about a given IP about once a minute,
/// not once a second. IPs no ENI holds are never cached: they are asked again each time.
pub const ENI_TTL: Duration = Duration::from_secs(60);
/// How long the VPC's CIDR blocks are trusted. Blocks are added to a VPC rarely and by
/// hand; ten minutes keeps `DescribeVpcAttribute` to a few calls an hour.
pub const CIDR_TTL: Duration = Duration::from_secs(600);

/// How long the set of pods outside the VPC must stay the same before the Service's
/// Event names it. Pods of a rollout turn eligible one after another; the recorder
/// merges later Events of the same reason into one series that keeps the first note,
/// so an Event said at the first pod would name only that one.
pub const OUTSIDE_EVENT_SETTLE: Duration = Duration::from_secs(2);

/// Error codes of a CLB registration that names a server that is not (or no longer)
/// what rollgate thinks: the cached ENI of those IPs is dropped.
const UNKNOWN_SERVER_CODES: [&str; 4] = [
    "ResourceNotFound.vServers",
    "InvalidServerId.NotExist",
    "InvalidParameter.ServerIp",
    "InvalidParameter.BackendServers",
];

/// The pod IP -> server lookups of one controller, with their cache.
pub struct Placer {
    network: Option<Arc<VpcNetwork>>,
    vpc_id: Option<String>,
    enis: Mutex<HashMap<String, (String, Instant)>>,
    cidrs: Mutex<Option<(VpcCidrBlocks, Instant)>>,
    said: EventDedup,
    /// Service uid -> the pods outside the VPC as last seen, and since when.
    outside: Mutex<HashMap<String, (Vec<String>, Instant)>>,
    metrics: GateMetrics,
}

/// What the plan needs placed: the IP of each pod that is to be registered, and the
/// elastic container instance it runs as, if it does.
pub fn wanted(pods: &[(Arc<CachedPod>, GatePod)]) -> Vec<(String, Option<String>)> {
    pods.iter()
        .filter(|(_, view)| view.eligible())
        .filter_map(|(pod, view)| {
            let ip = view.ip.clone()?;
            Some((ip, pod.eci_instance_id.as_deref().map(str::to_string)))
        })
        .collect()
}

/// The placement of an IP no ENI holds: outside the VPC's blocks, or not yet on an ENI.
pub fn unheld(ip: &str, blocks: &VpcCidrBlocks) -> Placement {
    if blocks.contains(ip) {
        Placement::NoEni
    } else {
        Placement::OutsideVpc
    }
}

/// Names of the eligible pods whose IPs are outside the VPC, sorted.
pub fn outside_vpc(
    pods: &[(Arc<CachedPod>, GatePod)],
    placements: &HashMap<String, Placement>,
) -> Vec<String> {
    let mut names: Vec<String> = pods
        .iter()
        .map(|(_, view)| view)
        .filter(|view| view.eligible())
        .filter(|view| {
            view.ip
                .as_ref()
                .is_some_and(|ip| placements.get(ip) == Some(&Placement::OutsideVpc))
        })
        .map(|view| view.name.clone())
        .collect();
    names.sort();
    names
}

impl Placer {
    pub fn new(
        network: Option<Arc<VpcNetwork>>,
        vpc_id: Option<String>,
        metrics: GateMetrics,
    ) -> Self {
        Placer {
            network,
            vpc_id,
            enis: Mutex::default(),
            cidrs: Mutex::default(),
            said: EventDedup::default(),
            outside: Mutex::default(),
            metrics,
        }
    }

    fn count<T>(&self, action: &str, result: &Result<T, CloudError>) {
        let label = match result {
            Ok(_) => "success",
            Err(e) => e.metric_label(),
        };
        self.metrics.cloud_call(action, label);
    }

    /// Where each wanted pod's backend lives (CLB only; NLB gets an empty map). ECI
    /// pods are their instance; the others are looked up, cached ENIs first.
    pub async fn place(
        &self,
        product: Product,
        pods: &[(Arc<CachedPod>, GatePod)],
    ) -> Result<HashMap<String, Placement>, CloudError> {
        let mut out = HashMap::new();
        if product != Product::Clb {
            return Ok(out);
        }
        let mut ask: Vec<String> = vec![];
        {
            let cache = self.enis.lock().unwrap();
            for (ip, eci) in wanted(pods) {
                // An ECI pod is registered as its instance (`eci`), the type CLB
                // documents for elastic container instances, with the id the system
                // publishes on the pod. Alibaba's cloud controller instead looks up the
                // ENI of the instance's IP; the instance id needs no call and names
                // what the pod runs as, so rollgate uses it when the pod carries it.
                if let Some(id) = eci {
                    let kind = BackendType::Eci;
                    out.insert(ip, Placement::Server { kind, id });
                    continue;
                }
                match cache.get(&ip) {
                    Some((id, at)) if at.elapsed() < ENI_TTL => {
                        let (kind, id) = (BackendType::Eni, id.clone());
                        out.insert(ip, Placement::Server { kind, id });
                    }
                    _ => ask.push(ip),
                }
            }
        }
        if ask.is_empty() {
            return Ok(out);
        }
        let (Some(network), Some(vpc_id)) = (&self.network, &self.vpc_id) else {
            // No ECS client (unit tests) or no VPC: nothing can be found.
            out.extend(ask.into_iter().map(|ip| (ip, Placement::NoEni)));
            return Ok(out);
        };
        let found = network.eni_ids(vpc_id, &ask).await;
        self.count("DescribeNetworkInterfaces", &found);
        let found = found?;
        let mut unheld_ips = vec![];
        {
            let mut cache = self.enis.lock().unwrap();
            let now = Instant::now();
            for ip in ask {
                match found.get(&ip) {
                    Some(id) => {
                        cache.insert(ip.clone(), (id.clone(), now));
                        let (kind, id) = (BackendType::Eni, id.clone());
                        out.insert(ip, Placement::Server { kind, id });
                    }
                    None => {
                        cache.remove(&ip);
                        unheld_ips.push(ip);
                    }
                }
            }
            // Entries of pods long gone would otherwise stay for the process's life.
            cache.retain(|_, (_, at)| at.elapsed() < ENI_TTL);
        }
        if !unheld_ips.is_empty() {
            let blocks = self.cidr_blocks(network, vpc_id).await?;
            for ip in unheld_ips {
                let placement = unheld(&ip, &blocks);
                out.insert(ip, placement);
            }
        }
        Ok(out)
    }

    async fn cidr_blocks(
        &self,
        network: &VpcNetwork,
        vpc_id: &str,
    ) -> Result<VpcCidrBlocks, CloudError> {
        if let Some((blocks, at)) = self.cidrs.lock().unwrap().as_ref() {
            if at.elapsed() < CIDR_TTL {
                return Ok(blocks.clone());
            }
        }
        let blocks = network.cidr_blocks(vpc_id).await;
        self.count("DescribeVpcAttribute", &blocks);
        let blocks = blocks?;
        *self.cidrs.lock().unwrap() = Some((blocks.clone(), Instant::now()));
        Ok(blocks)
    }

    /// A registration failed: if the cloud said a server is unknown or not what was
    /// sent, the cached ENIs of the IPs in that call are dropped, so the next reconcile
    /// looks them up again.
    pub fn registration_failed(&self, error: &CloudError, changes: &GroupChanges) {
        let CloudError::Api { code, .. } = error else {
            return;
        };
        if !UNKNOWN_SERVER_CODES.contains(&code.as_str()) {
            return;
        }
        let mut cache = self.enis.lock().unwrap();
        for backend in changes.add.iter().chain(&changes.restore) {
            cache.remove(&backend.key.ip);
        }
    }

    /// One Warning Event on the Service naming its pods outside the VPC (again only
    /// when the list changes); none, and the slate wiped, when there are none.
    pub async fn warn_outside_vpc(
        &self,
        events: &Events,
        action: &str,
        uid: &str,
        reference: &ObjectReference,
        pods: &[String],
    ) {
        if pods.is_empty() {
            self.said.forget(uid, Topic::Warning);
            self.outside.lock().unwrap().remove(uid);
            return;
        }
        {
            let mut outside = self.outside.lock().unwrap();
            let since = match outside.get(uid) {
                Some((seen, since)) if seen.as_slice() == pods => *since,
                _ => {
                    outside.insert(uid.to_string(), (pods.to_vec(), Instant::now()));
                    return;
                }
            };
            if since.elapsed() < OUTSIDE_EVENT_SETTLE {
                return; // the next poll (about a second away) looks again
            }
        }
        let note = reasons::pods_outside_vpc(pods);
        let warning = event(EventType::Warning, POD_IP_OUTSIDE_VPC_EVENT, action, note);
        events
            .publish_once(&self.said, uid, Topic::Warning, reference, warning)
            .await;
    }

    /// The Service is gone: its Event slate goes too.
    pub fn forget(&self, uid: &str) {
        self.said.forget_object(uid);
        self.outside.lock().unwrap().remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gates::model::{GatePod, PodPort};
    use alibaba_lb::{Backend, BackendKey};

    fn view(name: &str, ip: &str, ready: bool) -> GatePod {
        GatePod {
            name: name.into(),
            uid: format!("uid-{name}"),
            ip: Some(ip.into()),
            selected: true,
            gated: true,
            containers_ready: ready,
            containers_ready_since: None,
            deletion: None,
            ports: vec![PodPort {
                name: None,
                container_port: 8080,
                protocol: "TCP".into(),
            }],
            gate: None,
        }
    }

    fn cached(eci: Option<&str>) -> Arc<CachedPod> {
        Arc::new(CachedPod {
            eci_instance_id: eci.map(Box::from),
            ..Default::default()
        })
    }

    fn blocks() -> VpcCidrBlocks {
        VpcCidrBlocks {
            cidr_block: "10.0.0.0/16".into(),
            secondary_cidr_blocks: vec!["172.20.0.0/16".into()],
            user_cidrs: vec!["192.168.0.0/16".into()],
        }
    }

    #[test]
    fn an_ip_no_eni_holds_is_outside_only_beyond_the_primary_and_secondary_blocks() {
        assert_eq!(unheld("10.0.3.4", &blocks()), Placement::NoEni);
        assert_eq!(unheld("172.20.9.9", &blocks()), Placement::NoEni);
        // User CIDRs are not where vSwitches (and so ENIs) live.
        assert_eq!(unheld("192.168.1.1", &blocks()), Placement::OutsideVpc);
        assert_eq!(unheld("10.1.0.1", &blocks()), Placement::OutsideVpc);
    }

    #[test]
    fn only_eligible_pods_are_placed_and_eci_pods_carry_their_instance() {
        let pods = vec![
            (cached(None), view("a", "10.0.0.1", true)),
            (cached(Some("eci-b")), view("b", "10.0.0.2", true)),
            (cached(None), view("c", "10.0.0.3", false)),
        ];
        assert_eq!(
            wanted(&pods),
            vec![
                ("10.0.0.1".to_string(), None),
                ("10.0.0.2".to_string(), Some("eci-b".to_string())),
            ]
        );
    }

    #[test]
    fn the_outside_pods_are_named_sorted() {
        let pods = vec![
            (cached(None), view("z", "1.1.1.1", true)),
            (cached(None), view("a", "1.1.1.2", true)),
            (cached(None), view("m", "10.0.0.1", true)),
        ];
        let placements = HashMap::from([
            ("1.1.1.1".to_string(), Placement::OutsideVpc),
            ("1.1.1.2".to_string(), Placement::OutsideVpc),
            ("10.0.0.1".to_string(), Placement::NoEni),
        ]);
        assert_eq!(outside_vpc(&pods, &placements), vec!["a", "z"]);
    }

    #[tokio::test]
    async fn eci_pods_need_no_lookup_and_nlb_needs_none_at_all() {
        let placer = Placer::new(
            None,
            None,
            GateMetrics::register(&crate::metrics::Metrics::default()),
        );
        let pods = vec![
            (cached(Some("eci-b")), view("b", "10.0.0.2", true)),
            (cached(None), view("a", "10.0.0.1", true)),
        ];
        let nlb = placer.place(Product::Nlb, &pods).await.unwrap();
        assert!(nlb.is_empty());
        let clb = placer.place(Product::Clb, &pods).await.unwrap();
        assert_eq!(
            clb["10.0.0.2"],
            Placement::Server {
                kind: BackendType::Eci,
                id: "eci-b".into()
            }
        );
        // No ECS client: the ENI pod cannot be found.
        assert_eq!(clb["10.0.0.1"], Placement::NoEni);
    }

    #[test]
    fn an_unknown_server_drops_the_cached_enis_of_that_call_only() {
        let placer = Placer::new(
            None,
            None,
            GateMetrics::register(&crate::metrics::Metrics::default()),
        );
        {
            let mut cache = placer.enis.lock().unwrap();
            cache.insert("10.0.0.1".into(), ("eni-a".into(), Instant::now()));
            cache.insert("10.0.0.2".into(), ("eni-b".into(), Instant::now()));
        }
        let changes = GroupChanges {
            add: vec![Backend {
                key: BackendKey {
                    server_id: "eni-a".into(),
                    ip: "10.0.0.1".into(),
                    port: 8080,
                },
                kind: BackendType::Eni,
                weight: 100,
                description: "d".into(),
            }],
            ..Default::default()
        };
        let refused = |code: &str| CloudError::Api {
            action: "AddVServerGroupBackendServers".into(),
            status: 400,
            code: code.into(),
            message: String::new(),
            request_id: "r".into(),
        };
        placer.registration_failed(&refused("Throttling"), &changes);
        assert_eq!(placer.enis.lock().unwrap().len(), 2, "not a server error");
        let unknown = refused("ResourceNotFound.vServers");
        placer.registration_failed(&unknown, &changes);
        let cache = placer.enis.lock().unwrap();
        assert!(!cache.contains_key("10.0.0.1"));
        assert!(cache.contains_key("10.0.0.2"));
    }
}
