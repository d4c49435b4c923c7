//! The Service side of the public interface: which Services rollgate owns (class and
//! the coexistence setting), the annotations it reads, and the facts the plan needs.
//! A reconcile reads its Service once, here, into a [`ServiceSnapshot`]; nothing after
//! that looks at the API object again.
use std::collections::BTreeMap;
use std::time::Duration;

use alibaba_lb::{AddressType, ListenerSettings, Product, ZoneVSwitch};
use k8s_openapi::api::core::v1::{ObjectReference, Service};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use super::annotations;
use super::model::{ServiceFacts, ServicePort, TargetPort, IN_ROTATION_WEIGHT};
use crate::duration_flag::parse_interval;
use crate::names::{
    CREATED_ID_ANNOTATION, FLIP_BACK_ANNOTATION, GATE_TIMEOUT_ANNOTATION,
    LOAD_BALANCER_ANNOTATION_PREFIXES, LOAD_BALANCER_FINALIZER, NLB_CLASS,
    PRESERVE_LB_ON_DELETE_ANNOTATION, ROLLGATE_CLB_CLASS, ROLLGATE_NLB_CLASS,
    SERVED_ATTACHED_ID_ANNOTATION, SERVER_GROUPS_ANNOTATION,
};

/// Everything a reconcile needs of its Service, read once at its top.
#[derive(Clone, Debug, PartialEq)]
pub struct ServiceSnapshot {
    /// The plan's view: namespace, name, ports, the flip-back opt-in.
    pub facts: ServiceFacts,
    /// What Events about the Service name.
    pub reference: ObjectReference,
    pub uid: String,
    pub resource_version: Option<String>,
    /// `spec.type`, `ClusterIP` when unset.
    pub type_: String,
    /// The product under the class selection in force; `None`: not rollgate's.
    pub product: Option<Product>,
    /// The product a load balancer made for this Service has, whatever the class
    /// selection is now (what cleanup deletes with).
    pub made_with: Product,
    pub deleting: bool,
    pub finalizers: Vec<String>,
    /// The load balancer the user named (`...-loadbalancer-id`).
    pub attached_id: Option<String>,
    /// The load balancer rollgate created earlier (its own annotation).
    pub created_id: Option<String>,
    /// The attached load balancer rollgate last registered backends in (its own
    /// annotation): differs from `attached_id` after the user names another.
    pub served_attached_id: Option<String>,
    /// The server groups rollgate last published on the Service (its own
    /// annotation, as written), so that an unchanged value is not written again.
    pub published_groups: Option<String>,
    /// `preserve-lb-on-delete`: a created load balancer outlives the Service.
    pub preserve_on_delete: bool,
    /// `zone-maps`, or why it is not valid.
    pub zones: Result<Vec<ZoneVSwitch>, String>,
    /// `address-type`, or why it is not valid.
    pub address_type: Result<AddressType, String>,
    /// The listener annotations (health check, drain), or why they are not valid.
    pub listener_settings: Result<ListenerSettings, String>,
    /// Annotations of the family rollgate does not act on, each with its Warning.
    pub not_acted_on: Vec<(String, String)>,
    /// `rollgate.io/readiness-gate-timeout`, or why it is not valid.
    pub gate_timeout: Result<Option<Duration>, String>,
    /// `spec.selector`; `None` (absent or empty) selects no pod.
    pub selector: Option<BTreeMap<String, String>>,
    /// The first `status.loadBalancer.ingress` entry (IP, else hostname), as published.
    pub published_address: Option<String>,
    /// `protocol-port` and `cert-id` (HTTP/HTTPS listeners), or why they are not valid.
    pub listener_protocols: Result<annotations::ListenerProtocols, String>,
    /// `additional-resource-tags`, or why they are not valid.
    pub additional_tags: Result<Vec<(String, String)>, String>,
    /// `weight` (also in `facts`, where a bad value reads as the default), or why it
    /// is not valid.
    pub weight: Result<Option<u32>, String>,
    /// `vswitch-id` (intranet CLB), or why it is not valid.
    pub vswitch_id: Result<Option<String>, String>,
    /// `spec` and `instance-charge-type` (a CLB to create), or why they are not valid.
    pub clb_instance: Result<alibaba_lb::ClbInstance, String>,
}

impl ServiceSnapshot {
    pub fn read(service: &Service, selection: ClassSelection) -> Self {
        let spec = service.spec.as_ref();
        let service_facts = facts(service);
        ServiceSnapshot {
            listener_protocols: annotations::listener_protocols(
                service.annotations(),
                &service_facts.ports,
            ),
            facts: service_facts,
            reference: service.object_ref(&()),
            uid: service.uid().unwrap_or_default(),
            resource_version: service.resource_version(),
            type_: spec
                .and_then(|s| s.type_.clone())
                .unwrap_or_else(|| "ClusterIP".into()),
            product: product_for(service, selection),
            made_with: made_with(service),
            deleting: service.metadata.deletion_timestamp.is_some(),
            finalizers: service.finalizers().to_vec(),
            attached_id: attached_id(service).map(str::to_string),
            created_id: created_id(service).map(str::to_string),
            served_attached_id: own_annotation(service, SERVED_ATTACHED_ID_ANNOTATION)
                .map(str::to_string),
            published_groups: own_annotation(service, SERVER_GROUPS_ANNOTATION).map(str::to_string),
            preserve_on_delete: preserve_on_delete(service),
            zones: zone_maps(service),
            address_type: address_type(service),
            listener_settings: annotations::listener_settings(service.annotations()),
            additional_tags: annotations::additional_resource_tags(service.annotations()),
            weight: annotations::backend_weight(service.annotations()),
            vswitch_id: annotations::vswitch_id(service.annotations()),
            clb_instance: annotations::clb_instance(service.annotations()),
            not_acted_on: annotations::not_acted_on(
                service.annotations(),
                product_for(service, selection),
            ),
            gate_timeout: gate_timeout(service),
            selector: selector(service).cloned(),
            published_address: service
                .status
                .as_ref()
                .and_then(|s| s.load_balancer.as_ref())
                .and_then(|lb| lb.ingress.as_ref())
                .and_then(|i| i.first())
                .and_then(|i| i.ip.clone().or_else(|| i.hostname.clone())),
        }
    }

    /// The Service's key in the store and in the poller.
    pub fn key(&self) -> ObjectRef<Service> {
        ObjectRef::new(&self.facts.name).within(&self.facts.namespace)
    }

    /// `type: LoadBalancer`, of any class.
    pub fn is_load_balancer(&self) -> bool {
        self.type_ == "LoadBalancer"
    }

    pub fn holds_finalizer(&self) -> bool {
        self.finalizers.iter().any(|f| f == LOAD_BALANCER_FINALIZER)
    }

    /// The load balancer to use: the one the user named, else the one rollgate made.
    pub fn existing_id(&self) -> Option<&str> {
        self.attached_id.as_deref().or(self.created_id.as_deref())
    }
}

/// Which Services rollgate takes (`--load-balancer-classes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ClassSelection {
    /// As Alibaba's cloud controller: no class is CLB, `alibabacloud.com/nlb` is NLB
    /// (plus rollgate's own classes). For clusters where rollgate is the only one.
    Standard,
    /// Only `rollgate.io/clb` and `rollgate.io/nlb`: for clusters where Alibaba's cloud
    /// controller also runs, so two controllers never fight over one Service.
    Rollgate,
}

/// The load balancer product for a Service, or `None` when it is not ours to manage.
pub fn product_for(service: &Service, selection: ClassSelection) -> Option<Product> {
    let spec = service.spec.as_ref()?;
    if spec.type_.as_deref() != Some("LoadBalancer") {
        return None;
    }
    match (spec.load_balancer_class.as_deref(), selection) {
        (Some(ROLLGATE_CLB_CLASS), _) => Some(Product::Clb),
        (Some(ROLLGATE_NLB_CLASS), _) => Some(Product::Nlb),
        (None, ClassSelection::Standard) => Some(Product::Clb),
        (Some(NLB_CLASS), ClassSelection::Standard) => Some(Product::Nlb),
        _ => None,
    }
}

/// The product of a load balancer made for `service` under any class selection: NLB
/// for the NLB classes, else CLB (also for a Service that is no longer a LoadBalancer).
fn made_with(service: &Service) -> Product {
    let class = service
        .spec
        .as_ref()
        .and_then(|s| s.load_balancer_class.as_deref());
    match class {
        Some(NLB_CLASS) | Some(ROLLGATE_NLB_CLASS) => Product::Nlb,
        _ => Product::Clb,
    }
}

/// An annotation under either prefix (`alibaba-cloud-` wins).
pub fn lb_annotation<'a>(service: &'a Service, suffix: &str) -> Option<&'a str> {
    let annotations = service.metadata.annotations.as_ref()?;
    LOAD_BALANCER_ANNOTATION_PREFIXES
        .iter()
        .find_map(|prefix| annotations.get(&format!("{prefix}{suffix}")))
        .map(|v| v.trim())
        .filter(|v| !v.is_empty())
}

/// The load balancer the user named, if any.
pub fn attached_id(service: &Service) -> Option<&str> {
    lb_annotation(service, "id")
}

/// The load balancer rollgate created for this Service earlier.
pub fn created_id(service: &Service) -> Option<&str> {
    own_annotation(service, CREATED_ID_ANNOTATION)
}

/// One of rollgate's own annotations, when set and not empty.
fn own_annotation<'a>(service: &'a Service, name: &str) -> Option<&'a str> {
    service
        .annotations()
        .get(name)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

/// `rollgate.io/readiness-gate-timeout`: how long a gate may wait after its pod's
/// containers turned ready before it turns True anyway. `None`: not set (the default:
/// a gate that times out is the outage the gate exists to prevent, so it is opt-in).
pub fn gate_timeout(service: &Service) -> Result<Option<Duration>, String> {
    let Some(raw) = own_annotation(service, GATE_TIMEOUT_ANNOTATION) else {
        return Ok(None);
    };
    let invalid = |why: &str| {
        format!(
            "annotation {GATE_TIMEOUT_ANNOTATION}: {why}; accepted: a duration of at least 1s, as 600, 600s, 10m or 90000ms"
        )
    };
    match parse_interval(raw) {
        Ok(d) if d >= Duration::from_secs(1) => Ok(Some(d)),
        Ok(_) => Err(invalid(&format!("{raw:?} is shorter than a second"))),
        Err(e) => Err(invalid(&e)),
    }
}

pub fn flip_back(service: &Service) -> bool {
    service
        .annotations()
        .get(FLIP_BACK_ANNOTATION)
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// `preserve-lb-on-delete`: any non-empty value, as Alibaba's controller reads it
/// (so a Service moved over keeps its meaning, `"false"` included).
pub fn preserve_on_delete(service: &Service) -> bool {
    let suffix = PRESERVE_LB_ON_DELETE_ANNOTATION
        .strip_prefix(LOAD_BALANCER_ANNOTATION_PREFIXES[0])
        .unwrap_or(PRESERVE_LB_ON_DELETE_ANNOTATION);
    lb_annotation(service, suffix).is_some()
}

/// `internet` (default) or `intranet`.
pub fn address_type(service: &Service) -> Result<AddressType, String> {
    match lb_annotation(service, "address-type").map(str::to_ascii_lowercase) {
        None => Ok(AddressType::Internet),
        Some(v) if v == "internet" => Ok(AddressType::Internet),
        Some(v) if v == "intranet" => Ok(AddressType::Intranet),
        Some(v) => Err(format!(
            "annotation {}address-type: {v:?} is not valid; accepted: internet, intranet",
            LOAD_BALANCER_ANNOTATION_PREFIXES[0]
        )),
    }
}

/// `zone-maps: "cn-hangzhou-k:vsw-1,cn-hangzhou-j:vsw-2"` (NLB needs two zones).
pub fn zone_maps(service: &Service) -> Result<Vec<ZoneVSwitch>, String> {
    let Some(raw) = lb_annotation(service, "zone-maps") else {
        return Ok(vec![]);
    };
    raw.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|pair| match pair.split_once(':') {
            Some((zone, vsw)) if !zone.trim().is_empty() && !vsw.trim().is_empty() => {
                Ok(ZoneVSwitch {
                    zone_id: zone.trim().into(),
                    vswitch_id: vsw.trim().into(),
                })
            }
            _ => Err(format!(
                "annotation {}zone-maps: entry {pair:?} is not valid; accepted: <zone-id>:<vswitch-id>[,<zone-id>:<vswitch-id>...]",
                LOAD_BALANCER_ANNOTATION_PREFIXES[0]
            )),
        })
        .collect()
}

/// The plan's view of a Service. Ports other than TCP and UDP cannot be served by
/// a CLB/NLB listener and are left out.
pub fn facts(service: &Service) -> ServiceFacts {
    let ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .map(|ports| {
            ports
                .iter()
                .filter_map(|p| {
                    let protocol = p.protocol.clone().unwrap_or_else(|| "TCP".into());
                    if protocol != "TCP" && protocol != "UDP" {
                        return None;
                    }
                    let port = u16::try_from(p.port).ok()?;
                    let target = match &p.target_port {
                        None => TargetPort::Number(port),
                        Some(IntOrString::Int(n)) => TargetPort::Number(u16::try_from(*n).ok()?),
                        Some(IntOrString::String(s)) => match s.parse::<u16>() {
                            Ok(n) => TargetPort::Number(n),
                            Err(_) => TargetPort::Name(s.clone()),
                        },
                    };
                    Some(ServicePort {
                        port,
                        protocol,
                        target,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    ServiceFacts {
        namespace: service.namespace().unwrap_or_default(),
        name: service.name_any(),
        ports,
        flip_back: flip_back(service),
        // A bad value stops the Service before the plan (`prepare`); never used then.
        gate_timeout: gate_timeout(service).ok().flatten(),
        // A bad value stops the Service at `lb_spec` (the gates say why); never 0.
        weight: annotations::backend_weight(service.annotations())
            .ok()
            .flatten()
            .unwrap_or(IN_ROTATION_WEIGHT),
    }
}

/// The Service's selector; `None` (no selector) selects no pod.
pub fn selector(service: &Service) -> Option<&BTreeMap<String, String>> {
    service
        .spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .filter(|s| !s.is_empty())
}

pub fn selects(
    selector: Option<&BTreeMap<String, String>>,
    labels: &BTreeMap<String, String>,
) -> bool {
    selector.is_some_and(|sel| sel.iter().all(|(k, v)| labels.get(k) == Some(v)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::{LEGACY_LOAD_BALANCER_ID_ANNOTATION, LOAD_BALANCER_ID_ANNOTATION};
    use k8s_openapi::api::core::v1::ServicePort as K8sPort;

    fn service(type_: &str, class: Option<&str>, annotations: &[(&str, &str)]) -> Service {
        let mut svc = crate::testkit::service("default", "my-svc", type_, annotations);
        let spec = svc.spec.as_mut().unwrap();
        spec.load_balancer_class = class.map(Into::into);
        spec.ports = Some(vec![
            K8sPort {
                port: 80,
                target_port: Some(IntOrString::String("http".into())),
                ..Default::default()
            },
            K8sPort {
                port: 53,
                protocol: Some("UDP".into()),
                target_port: Some(IntOrString::Int(5353)),
                ..Default::default()
            },
            K8sPort {
                port: 9,
                protocol: Some("SCTP".into()),
                ..Default::default()
            },
        ]);
        svc
    }

    #[test]
    fn classes_decide_the_product_and_the_coexistence_setting_narrows_them() {
        use ClassSelection::*;
        let cases = [
            ("LoadBalancer", None, Standard, Some(Product::Clb)),
            (
                "LoadBalancer",
                Some(NLB_CLASS),
                Standard,
                Some(Product::Nlb),
            ),
            (
                "LoadBalancer",
                Some(ROLLGATE_CLB_CLASS),
                Standard,
                Some(Product::Clb),
            ),
            (
                "LoadBalancer",
                Some(ROLLGATE_NLB_CLASS),
                Standard,
                Some(Product::Nlb),
            ),
            ("LoadBalancer", Some("example.com/other"), Standard, None),
            ("LoadBalancer", None, Rollgate, None),
            ("LoadBalancer", Some(NLB_CLASS), Rollgate, None),
            (
                "LoadBalancer",
                Some(ROLLGATE_CLB_CLASS),
                Rollgate,
                Some(Product::Clb),
            ),
            (
                "LoadBalancer",
                Some(ROLLGATE_NLB_CLASS),
                Rollgate,
                Some(Product::Nlb),
            ),
            ("ClusterIP", None, Standard, None),
            ("NodePort", Some(ROLLGATE_CLB_CLASS), Rollgate, None),
        ];
        for (type_, class, selection, want) in cases {
            let svc = service(type_, class, &[]);
            assert_eq!(
                product_for(&svc, selection),
                want,
                "{type_} {class:?} {selection:?}"
            );
        }
    }

    #[test]
    fn the_load_balancer_id_is_read_under_both_prefixes() {
        let svc = service(
            "LoadBalancer",
            None,
            &[(LOAD_BALANCER_ID_ANNOTATION, "lb-1")],
        );
        assert_eq!(attached_id(&svc), Some("lb-1"));
        let svc = service(
            "LoadBalancer",
            None,
            &[(LEGACY_LOAD_BALANCER_ID_ANNOTATION, " lb-2 ")],
        );
        assert_eq!(attached_id(&svc), Some("lb-2"));
        let svc = service("LoadBalancer", None, &[(LOAD_BALANCER_ID_ANNOTATION, "")]);
        assert_eq!(attached_id(&svc), None);
    }

    #[test]
    fn preserve_on_delete_is_any_value_under_either_prefix() {
        let legacy = PRESERVE_LB_ON_DELETE_ANNOTATION.replace("alibaba-cloud-", "alicloud-");
        let cases = [
            (vec![], false),
            (vec![(PRESERVE_LB_ON_DELETE_ANNOTATION, "true")], true),
            (vec![(PRESERVE_LB_ON_DELETE_ANNOTATION, "on")], true),
            (vec![(PRESERVE_LB_ON_DELETE_ANNOTATION, " ")], false),
            (vec![(legacy.as_str(), "true")], true),
        ];
        for (annotations, want) in cases {
            let svc = service("LoadBalancer", None, &annotations);
            assert_eq!(preserve_on_delete(&svc), want, "{annotations:?}");
        }
    }

    #[test]
    fn ports_keep_names_numbers_and_protocols_and_drop_sctp() {
        let f = facts(&service("LoadBalancer", None, &[]));
        assert_eq!(
            f.ports,
            vec![
                ServicePort {
                    port: 80,
                    protocol: "TCP".into(),
                    target: TargetPort::Name("http".into())
                },
                ServicePort {
                    port: 53,
                    protocol: "UDP".into(),
                    target: TargetPort::Number(5353)
                },
            ]
        );
        assert!(!f.flip_back);
        let f = facts(&service(
            "LoadBalancer",
            None,
            &[(FLIP_BACK_ANNOTATION, "True")],
        ));
        assert!(f.flip_back);
    }

    #[test]
    fn the_gate_timeout_is_a_duration_of_a_second_or_more_and_off_by_default() {
        let with = |value: &str| {
            gate_timeout(&service(
                "LoadBalancer",
                None,
                &[(GATE_TIMEOUT_ANNOTATION, value)],
            ))
        };
        assert_eq!(gate_timeout(&service("LoadBalancer", None, &[])), Ok(None));
        assert_eq!(
            facts(&service("LoadBalancer", None, &[])).gate_timeout,
            None
        );
        assert_eq!(with("10m"), Ok(Some(Duration::from_secs(600))));
        assert_eq!(with("90s"), Ok(Some(Duration::from_secs(90))));
        assert_eq!(with("1500ms"), Ok(Some(Duration::from_millis(1500))));
        for bad in ["0", "500ms", "10 minutes", "1h", "-5m"] {
            let error = with(bad).unwrap_err();
            assert!(error.contains(GATE_TIMEOUT_ANNOTATION), "{bad}: {error}");
            assert!(
                error.contains("accepted: a duration of at least 1s"),
                "{bad}: {error}"
            );
        }
        let timed = facts(&service(
            "LoadBalancer",
            None,
            &[(GATE_TIMEOUT_ANNOTATION, "2m")],
        ));
        assert_eq!(timed.gate_timeout, Some(Duration::from_secs(120)));
    }

    #[test]
    fn zone_maps_and_address_type_name_the_accepted_forms() {
        let svc = service(
            "LoadBalancer",
            Some(NLB_CLASS),
            &[(
                "service.beta.kubernetes.io/alibaba-cloud-loadbalancer-zone-maps",
                "cn-hangzhou-k:vsw-1, cn-hangzhou-j:vsw-2",
            )],
        );
        assert_eq!(zone_maps(&svc).unwrap().len(), 2);
        let svc = service(
            "LoadBalancer",
            None,
            &[(
                "service.beta.kubernetes.io/alibaba-cloud-loadbalancer-zone-maps",
                "cn-hangzhou-k",
            )],
        );
        assert!(zone_maps(&svc)
            .unwrap_err()
            .contains("<zone-id>:<vswitch-id>"));
        let svc = service(
            "LoadBalancer",
            None,
            &[(
                "service.beta.kubernetes.io/alicloud-loadbalancer-address-type",
                "public",
            )],
        );
        assert!(address_type(&svc)
            .unwrap_err()
            .contains("internet, intranet"));
    }

    /// The shared watch prunes Services (`crate::watch::prune::service`): a reconcile
    /// must read the same snapshot from the pruned object as from the full one.
    #[test]
    fn a_pruned_service_reads_the_same_as_the_full_one() {
        use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, ServiceStatus};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
        let mut full = service(
            "LoadBalancer",
            Some(NLB_CLASS),
            &[
                (LOAD_BALANCER_ID_ANNOTATION, "lb-1"),
                (CREATED_ID_ANNOTATION, "lb-0"),
                (FLIP_BACK_ANNOTATION, "true"),
                (
                    "service.beta.kubernetes.io/alibaba-cloud-loadbalancer-zone-maps",
                    "z1:vsw-1,z2:vsw-2",
                ),
                (
                    "kubectl.kubernetes.io/last-applied-configuration",
                    "{\"kind\":\"Service\"}",
                ),
            ],
        );
        full.metadata.uid = Some("uid-1".into());
        full.metadata.resource_version = Some("7".into());
        full.metadata.finalizers = Some(vec![LOAD_BALANCER_FINALIZER.into()]);
        full.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("kubectl".into()),
            ..Default::default()
        }]);
        full.spec.as_mut().unwrap().selector =
            Some([("app".to_string(), "web".to_string())].into());
        full.status = Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(vec![LoadBalancerIngress {
                    hostname: Some("nlb.example".into()),
                    ..Default::default()
                }]),
            }),
            ..Default::default()
        });
        let mut pruned = full.clone();
        crate::watch::prune::service(&mut pruned);
        assert_ne!(pruned, full, "something was pruned");
        for selection in [ClassSelection::Standard, ClassSelection::Rollgate] {
            assert_eq!(
                ServiceSnapshot::read(&pruned, selection),
                ServiceSnapshot::read(&full, selection),
                "{selection:?}"
            );
        }
        let read = ServiceSnapshot::read(&pruned, ClassSelection::Standard);
        assert_eq!(read.attached_id.as_deref(), Some("lb-1"));
        assert_eq!(read.created_id.as_deref(), Some("lb-0"));
        assert_eq!(read.published_address.as_deref(), Some("nlb.example"));
        assert!(read.holds_finalizer() && read.facts.flip_back);
        assert_eq!(read.zones.as_ref().map(Vec::len), Ok(2));
    }

    #[test]
    fn a_load_balancer_is_made_with_nlb_only_for_the_nlb_classes_whatever_the_selection() {
        for (type_, class, want) in [
            ("LoadBalancer", None, Product::Clb),
            ("LoadBalancer", Some(NLB_CLASS), Product::Nlb),
            ("LoadBalancer", Some(ROLLGATE_NLB_CLASS), Product::Nlb),
            ("LoadBalancer", Some(ROLLGATE_CLB_CLASS), Product::Clb),
            ("LoadBalancer", Some("example.com/other"), Product::Clb),
            // Left the LoadBalancer type: cleanup still knows what it made.
            ("ClusterIP", Some(NLB_CLASS), Product::Nlb),
            ("ClusterIP", None, Product::Clb),
        ] {
            let svc = service(type_, class, &[]);
            for selection in [ClassSelection::Standard, ClassSelection::Rollgate] {
                assert_eq!(
                    ServiceSnapshot::read(&svc, selection).made_with,
                    want,
                    "{type_} {class:?} {selection:?}"
                );
            }
        }
    }

    #[test]
    fn a_selector_must_match_every_label_and_an_empty_one_selects_nothing() {
        let labels: BTreeMap<String, String> = [
            ("app".to_string(), "nginx".to_string()),
            ("tier".into(), "web".into()),
        ]
        .into();
        let sel: BTreeMap<String, String> = [("app".to_string(), "nginx".to_string())].into();
        assert!(selects(Some(&sel), &labels));
        let other: BTreeMap<String, String> = [("app".to_string(), "x".to_string())].into();
        assert!(!selects(Some(&other), &labels));
        assert!(!selects(None, &labels));
    }
}
