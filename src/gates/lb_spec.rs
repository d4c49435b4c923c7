//! What rollgate asks the cloud for, for one Service (pure): its load balancer (the one
//! named or created earlier, else a new one with a stable name), the address type and
//! zones, and a listener and server group per Service port with the health check and
//! drain its annotations ask for (`settings`), HTTP or HTTPS where `protocol-port`
//! says so (CLB only), and the tags what it creates carries (the cluster, the Service,
//! `additional-resource-tags`).
use alibaba_lb::{AddressType, ListenerSpec, LoadBalancerSpec, Product, ResourceTags, ZoneVSwitch};

use super::model::{legacy_server_group_name, server_group_name, ServiceFacts};
use super::service::ServiceSnapshot;
use crate::names::{CLUSTER_ID_TAG, LOAD_BALANCER_ANNOTATION_PREFIXES, SERVICE_UID_TAG};

/// Created load balancers' names are cut to this many bytes (both APIs' limit).
const NAME_LIMIT: usize = 80;

/// The load balancer spec of `service` for `product`, or why its annotations do not
/// make one (said in a Warning Event, nothing is asked of the cloud).
pub fn lb_spec(
    service: &ServiceSnapshot,
    product: Product,
    cluster_id: &str,
    vpc_id: Option<&str>,
) -> Result<LoadBalancerSpec, String> {
    let zones = service.zones.clone()?;
    if product == Product::Nlb && service.existing_id().is_none() && zones.len() < 2 {
        return Err(format!(
            "annotation {}zone-maps: an NLB needs at least two zones to be created; accepted: \"<zone-id>:<vswitch-id>,<zone-id>:<vswitch-id>\" (or name an existing NLB with the load-balancer-id annotation)",
            LOAD_BALANCER_ANNOTATION_PREFIXES[0]
        ));
    }
    let address_type = service.address_type.clone()?;
    let mut zones = zones;
    if product == Product::Clb {
        // `vswitch-id`: where an intranet CLB takes its address (the client sends the
        // first zone's vswitch); NLB has zone-maps instead (said in `not_acted_on`).
        match (service.vswitch_id.clone()?, address_type) {
            (Some(_), AddressType::Internet) => {
                return Err(format!(
                    "annotation {}vswitch-id: only for an intranet CLB; accepted: with {}address-type: intranet",
                    LOAD_BALANCER_ANNOTATION_PREFIXES[0], LOAD_BALANCER_ANNOTATION_PREFIXES[0]
                ))
            }
            (Some(vswitch_id), AddressType::Intranet) => zones.insert(
                0,
                ZoneVSwitch {
                    zone_id: String::new(),
                    vswitch_id,
                },
            ),
            (None, AddressType::Intranet) if zones.is_empty() && service.existing_id().is_none() => {
                return Err(format!(
                    "annotation {}address-type: intranet: a CLB in the VPC takes its address from a vswitch; accepted: with {}vswitch-id: <vswitch id>",
                    LOAD_BALANCER_ANNOTATION_PREFIXES[0], LOAD_BALANCER_ANNOTATION_PREFIXES[0]
                ))
            }
            _ => {}
        }
    }
    // Read only when a CLB is created; an NLB has none (said in `not_acted_on`).
    let clb_instance = match product {
        Product::Clb => service.clb_instance.clone()?,
        Product::Nlb => Default::default(),
    };
    let mut settings = service.listener_settings.clone()?;
    if product == Product::Nlb {
        // NLB has no listener access control (the Service was told, `not_acted_on`).
        settings.acl = None;
    }
    let protocols = service.listener_protocols.clone()?;
    if product == Product::Nlb && protocols.any_layer7() {
        return Err(format!(
            "annotation {}protocol-port: an NLB has no HTTP or HTTPS listeners; accepted on an NLB: tcp and udp (tcpssl is not supported by rollgate yet)",
            LOAD_BALANCER_ANNOTATION_PREFIXES[0]
        ));
    }
    let additional = service.additional_tags.clone()?;
    // Not part of the spec (the plan gives each backend its weight), but a bad value
    // is said here with the other annotations, before any cloud call.
    service.weight.clone()?;
    let facts = &service.facts;
    let uid = &service.uid;
    // What rollgate creates says whose it is: the cluster (what it may adopt and
    // delete, and how NLB groups are found) and the Service; then the user's tags.
    let tags = ResourceTags {
        cluster: Some((CLUSTER_ID_TAG.to_string(), cluster_id.to_string())),
        others: std::iter::once((SERVICE_UID_TAG.to_string(), uid.clone()))
            .chain(additional)
            .collect(),
    };
    // The name is the create call's idempotency token too (`ClientToken`): a restart
    // between creating the load balancer and recording its id asks again with the same
    // token and gets the same load balancer. So the uid part is never cut off: a long
    // namespace or name is cut instead, and another Service of the same name (deleted
    // and made again) never gets the first one's token.
    let uid_part = &uid[..uid.len().min(8)];
    let mut name = format!("k8s-{cluster_id}-{}-{}", facts.namespace, facts.name);
    name.truncate(NAME_LIMIT - 1 - uid_part.len());
    name.push('-');
    name.push_str(uid_part);
    Ok(LoadBalancerSpec {
        clb_instance,
        name,
        existing_id: service.existing_id().map(str::to_string),
        address_type,
        vpc_id: vpc_id.map(str::to_string),
        zones,
        listeners: facts
            .ports
            .iter()
            .map(|p| {
                let protocol = protocols.of(p);
                let mut settings = settings.clone();
                if protocol == alibaba_lb::ListenerProtocol::Https {
                    settings.server_certificate_id = protocols.certificate_id.clone();
                }
                ListenerSpec {
                    port: p.port,
                    protocol,
                    server_group_name: server_group_name(
                        p,
                        &facts.ports,
                        &facts.name,
                        &facts.namespace,
                        cluster_id,
                    ),
                    // Filled in by `adopt_former_groups` where there is a former id.
                    former_group_name: None,
                    settings,
                }
            })
            .collect(),
        tags,
    })
}

/// Names each listener's group as earlier versions did under `legacy_cluster_id`, so
/// that on upgrade the group a listener already forwards to is found and kept (see
/// `ListenerSpec::former_group_name`) rather than a second one made beside it.
pub fn adopt_former_groups(
    spec: &mut LoadBalancerSpec,
    facts: &ServiceFacts,
    legacy_cluster_id: Option<&str>,
) {
    let Some(legacy) = legacy_cluster_id else {
        return;
    };
    for (listener, port) in spec.listeners.iter_mut().zip(&facts.ports) {
        listener.former_group_name = Some(legacy_server_group_name(
            port,
            &facts.ports,
            &facts.name,
            &facts.namespace,
            legacy,
        ));
    }
}

#[cfg(test)]
mod tests {
    use alibaba_lb::{AddressType, ListenerProtocol, ZoneVSwitch};
    use k8s_openapi::api::core::v1::ServicePort;

    use super::*;
    use crate::gates::model::owner_description;
    use crate::gates::service::ClassSelection;
    use crate::names::{CREATED_ID_ANNOTATION, LOAD_BALANCER_ID_ANNOTATION};

    const ZONES: &str = "service.beta.kubernetes.io/alibaba-cloud-loadbalancer-zone-maps";
    const ADDRESS: &str = "service.beta.kubernetes.io/alicloud-loadbalancer-address-type";
    const VSWITCH: &str = "service.beta.kubernetes.io/alibaba-cloud-loadbalancer-vswitch-id";
    const PROTOCOL_PORT: &str =
        "service.beta.kubernetes.io/alibaba-cloud-loadbalancer-protocol-port";

    fn snapshot(name: &str, uid: &str, annotations: &[(&str, &str)]) -> ServiceSnapshot {
        let mut svc = crate::testkit::service("shop", name, "LoadBalancer", annotations);
        svc.metadata.uid = Some(uid.into());
        svc.spec.as_mut().unwrap().ports = Some(vec![
            ServicePort {
                port: 80,
                ..Default::default()
            },
            ServicePort {
                port: 53,
                protocol: Some("UDP".into()),
                ..Default::default()
            },
        ]);
        ServiceSnapshot::read(&svc, ClassSelection::Standard)
    }

    fn zone(zone_id: &str, vswitch_id: &str) -> ZoneVSwitch {
        ZoneVSwitch {
            zone_id: zone_id.into(),
            vswitch_id: vswitch_id.into(),
        }
    }

    /// What a spec is, in the few fields a case is about.
    #[derive(Debug, PartialEq)]
    struct Shape {
        existing_id: Option<String>,
        address_type: AddressType,
        zones: usize,
    }

    fn shape(spec: &LoadBalancerSpec) -> Shape {
        Shape {
            existing_id: spec.existing_id.clone(),
            address_type: spec.address_type,
            zones: spec.zones.len(),
        }
    }

    fn ok(
        existing_id: Option<&str>,
        address_type: AddressType,
        zones: usize,
    ) -> Result<Shape, &'static str> {
        Ok(Shape {
            existing_id: existing_id.map(str::to_string),
            address_type,
            zones,
        })
    }

    /// What the case is about, the product, the annotations, and the spec's shape or
    /// the words the refusal must contain.
    type Case<'a> = (
        &'a str,
        Product,
        &'a [(&'a str, &'a str)],
        Result<Shape, &'a str>,
    );

    #[test]
    fn what_is_created_is_tagged_with_the_cluster_the_service_and_the_users_tags() {
        let t = |k: &str, v: &str| (k.to_string(), v.to_string());
        const TAGS: &str =
            "service.beta.kubernetes.io/alibaba-cloud-loadbalancer-additional-resource-tags";
        let svc = snapshot("web", "uid-1", &[(TAGS, "team=web,env=prod")]);
        let spec = lb_spec(&svc, Product::Clb, "c1", None).unwrap();
        assert_eq!(spec.tags.cluster, Some(t(CLUSTER_ID_TAG, "c1")));
        assert_eq!(
            spec.tags.others,
            vec![
                t(SERVICE_UID_TAG, "uid-1"),
                t("team", "web"),
                t("env", "prod")
            ]
        );
        let clb = lb_spec(&snapshot("web", "uid-1", &[]), Product::Clb, "c2", None).unwrap();
        assert_eq!(
            clb.tags.all(),
            vec![t(CLUSTER_ID_TAG, "c2"), t(SERVICE_UID_TAG, "uid-1")]
        );
        // A bad tag list asks nothing of the cloud and says the form.
        let bad = snapshot("web", "uid-1", &[(TAGS, "acs:x=1")]);
        let said = lb_spec(&bad, Product::Clb, "c1", None).unwrap_err();
        assert!(said.contains("k1=v1,k2=v2"), "{said}");
    }

    #[test]
    fn the_annotations_decide_which_load_balancer_and_what_is_refused() {
        use AddressType::*;
        let two_zones = "cn-hangzhou-k:vsw-1,cn-hangzhou-j:vsw-2";
        let nlb_needs = "an NLB needs at least two zones";
        #[rustfmt::skip]
        let cases: &[Case] = &[
            ("a CLB of no annotation is created, internet",
             Product::Clb, &[], ok(None, Internet, 0)),
            ("a CLB takes no zone",
             Product::Clb, &[(ZONES, "cn-hangzhou-k:vsw-1")], ok(None, Internet, 1)),
            ("intranet is asked for under the legacy prefix, with its vswitch",
             Product::Clb, &[(ADDRESS, "Intranet"), (VSWITCH, "vsw-1")], ok(None, Intranet, 1)),
            ("a new intranet CLB needs its vswitch",
             Product::Clb, &[(ADDRESS, "Intranet")], Err("address-type: intranet: a CLB in the VPC takes its address from a vswitch; accepted: with service.beta.kubernetes.io/alibaba-cloud-loadbalancer-vswitch-id")),
            ("an attached intranet CLB has one",
             Product::Clb, &[(ADDRESS, "Intranet"), (LOAD_BALANCER_ID_ANNOTATION, "lb-user")], ok(Some("lb-user"), Intranet, 0)),
            ("an internet CLB takes no vswitch",
             Product::Clb, &[(VSWITCH, "vsw-1")], Err("vswitch-id: only for an intranet CLB")),
            ("an NLB ignores the vswitch (zone-maps)",
             Product::Nlb, &[(ZONES, two_zones), (VSWITCH, "vsw-9")], ok(None, Internet, 2)),
            ("a new NLB needs two zones",
             Product::Nlb, &[(ZONES, "cn-hangzhou-k:vsw-1")], Err(nlb_needs)),
            ("a new NLB of no zone at all is refused too",
             Product::Nlb, &[], Err(nlb_needs)),
            ("an NLB of two zones is created",
             Product::Nlb, &[(ZONES, two_zones)], ok(None, Internet, 2)),
            ("an attached NLB needs no zone",
             Product::Nlb, &[(LOAD_BALANCER_ID_ANNOTATION, "nlb-user")], ok(Some("nlb-user"), Internet, 0)),
            ("an NLB rollgate created earlier is found again without zones",
             Product::Nlb, &[(CREATED_ID_ANNOTATION, "nlb-made")], ok(Some("nlb-made"), Internet, 0)),
            ("the named load balancer wins over the one rollgate made",
             Product::Clb, &[(LOAD_BALANCER_ID_ANNOTATION, "lb-user"), (CREATED_ID_ANNOTATION, "lb-made")], ok(Some("lb-user"), Internet, 0)),
            ("a malformed zone map is refused, even on a CLB",
             Product::Clb, &[(ZONES, "cn-hangzhou-k")], Err("zone-maps: entry \"cn-hangzhou-k\" is not valid")),
            ("a malformed zone map is said before the missing zones",
             Product::Nlb, &[(ZONES, "cn-hangzhou-k")], Err("zone-maps: entry")),
            ("a health-check value out of the API's range is refused",
             Product::Clb, &[("service.beta.kubernetes.io/alibaba-cloud-loadbalancer-health-check-interval", "0")], Err("health-check-interval: \"0\" is not valid; accepted: an integer from 1 to 50")),
            ("an HTTPS port without a certificate is refused",
             Product::Clb, &[(PROTOCOL_PORT, "https:80")], Err("protocol-port: \"https:80\" needs service.beta.kubernetes.io/alibaba-cloud-loadbalancer-cert-id")),
            ("an NLB has no HTTP listener",
             Product::Nlb, &[(LOAD_BALANCER_ID_ANNOTATION, "nlb-user"), (PROTOCOL_PORT, "http:80")], Err("an NLB has no HTTP or HTTPS listeners")),
            ("tcp named on an NLB is fine",
             Product::Nlb, &[(LOAD_BALANCER_ID_ANNOTATION, "nlb-user"), (PROTOCOL_PORT, "tcp:80")], ok(Some("nlb-user"), Internet, 0)),
            ("an unknown address type is refused",
             Product::Clb, &[(ADDRESS, "public")], Err("address-type: \"public\" is not valid")),
        ];
        for (case, product, annotations, want) in cases {
            let got = lb_spec(
                &snapshot("web", "0123456789ab", annotations),
                *product,
                "c1",
                None,
            );
            match (got, want) {
                (Ok(spec), Ok(want)) => assert_eq!(&shape(&spec), want, "{case}"),
                (Err(problem), Err(want)) => {
                    assert!(problem.contains(want), "{case}: {problem}")
                }
                (got, want) => panic!("{case}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn a_listener_and_a_group_per_port_named_after_their_owner() {
        let spec = lb_spec(
            &snapshot("web", "0123456789ab", &[(ZONES, "z1:vsw-1,z2:vsw-2")]),
            Product::Nlb,
            "c1",
            Some("vpc-1"),
        )
        .unwrap();
        assert_eq!(spec.name, "k8s-c1-shop-web-01234567");
        assert_eq!(spec.vpc_id.as_deref(), Some("vpc-1"));
        assert_eq!(spec.zones, vec![zone("z1", "vsw-1"), zone("z2", "vsw-2")]);
        assert_eq!(
            spec.listeners,
            vec![
                ListenerSpec {
                    port: 80,
                    protocol: ListenerProtocol::Tcp,
                    server_group_name: owner_description(80, "web", "shop", "c1"),
                    former_group_name: None,
                    settings: Default::default(),
                },
                ListenerSpec {
                    port: 53,
                    protocol: ListenerProtocol::Udp,
                    server_group_name: owner_description(53, "web", "shop", "c1"),
                    former_group_name: None,
                    settings: Default::default(),
                },
            ]
        );
    }

    #[test]
    fn udp_beside_tcp_on_one_port_gets_a_group_of_its_own() {
        let mut snap = snapshot("web", "0123456789ab", &[]);
        snap.facts.ports[1].port = 80;
        let spec = lb_spec(&snap, Product::Clb, "c1", None).unwrap();
        let names: Vec<_> = spec
            .listeners
            .iter()
            .map(|l| (l.port, l.protocol, l.server_group_name.clone()))
            .collect();
        assert_eq!(
            names,
            vec![
                (
                    80,
                    ListenerProtocol::Tcp,
                    owner_description(80, "web", "shop", "c1")
                ),
                (
                    80,
                    ListenerProtocol::Udp,
                    format!("{}/udp", owner_description(80, "web", "shop", "c1"))
                ),
            ]
        );
    }

    #[test]
    fn groups_are_also_named_as_earlier_versions_named_them_under_the_former_id() {
        let mut snap = snapshot("web", "0123456789ab", &[]);
        snap.facts.ports[1].port = 80;
        let mut spec = lb_spec(&snap, Product::Clb, "c1", None).unwrap();
        adopt_former_groups(&mut spec, &snap.facts, None);
        assert!(spec.listeners.iter().all(|l| l.former_group_name.is_none()));
        adopt_former_groups(&mut spec, &snap.facts, Some("kubernetes"));
        let former: Vec<_> = spec
            .listeners
            .iter()
            .map(|l| l.former_group_name.as_deref())
            .collect();
        assert_eq!(
            former,
            vec![
                Some("k8s/80/web/shop/kubernetes"),
                Some("k8s/80/web/shop/kubernetes/udp")
            ]
        );
    }

    #[test]
    fn every_listener_carries_the_health_check_and_drain_of_the_annotations() {
        let p = "service.beta.kubernetes.io/alibaba-cloud-loadbalancer-";
        let uri = format!("{p}health-check-uri");
        let kind = format!("{p}health-check-type");
        let drain = format!("{p}connection-drain");
        let timeout = format!("{p}connection-drain-timeout");
        let spec = lb_spec(
            &snapshot(
                "web",
                "0123456789ab",
                &[
                    (&uri, "/ready"),
                    (&kind, "http"),
                    (&drain, "on"),
                    (&timeout, "45"),
                ],
            ),
            Product::Clb,
            "c1",
            None,
        )
        .unwrap();
        assert_eq!(spec.listeners.len(), 2);
        for listener in &spec.listeners {
            let s = &listener.settings;
            assert_eq!(s.health_check.uri.as_deref(), Some("/ready"));
            assert_eq!(s.drain.and_then(|d| d.timeout_seconds), Some(45));
        }
    }

    /// `spec` and `instance-charge-type` reach the CLB spec; an NLB's stays empty.
    #[test]
    fn spec_and_charge_type_reach_a_clb_spec_only() {
        let p = "service.beta.kubernetes.io/alibaba-cloud-loadbalancer-";
        let (spec, charge) = (format!("{p}spec"), format!("{p}instance-charge-type"));
        let pairs = [
            (spec.as_str(), "slb.s3.small"),
            (charge.as_str(), "paybyspec"),
            (ZONES, "cn-hangzhou-k:vsw-1,cn-hangzhou-j:vsw-2"),
        ];
        let snap = snapshot("web", "0123456789ab", &pairs);
        let clb = lb_spec(&snap, Product::Clb, "c1", None).unwrap();
        assert_eq!(
            clb.clb_instance,
            alibaba_lb::ClbInstance {
                spec: "slb.s3.small".into(),
                charge_type: "PayBySpec".into()
            }
        );
        let nlb = lb_spec(&snap, Product::Nlb, "c1", None).unwrap();
        assert_eq!(nlb.clb_instance, Default::default());
    }

    /// The ACL annotations reach every CLB listener, and no NLB one (NLB has none).
    #[test]
    fn the_acl_reaches_clb_listeners_and_not_nlb_ones() {
        let p = "service.beta.kubernetes.io/alibaba-cloud-loadbalancer-";
        let (status, id, kind) = (
            format!("{p}acl-status"),
            format!("{p}acl-id"),
            format!("{p}acl-type"),
        );
        let pairs = [
            (status.as_str(), "on"),
            (id.as_str(), "acl-1"),
            (kind.as_str(), "white"),
            (LOAD_BALANCER_ID_ANNOTATION, "lb-user"),
        ];
        let snap = snapshot("web", "0123456789ab", &pairs);
        let clb = lb_spec(&snap, Product::Clb, "c1", None).unwrap();
        assert!(clb.listeners.iter().all(|l| l.settings.acl
            == Some(alibaba_lb::ListenerAcl {
                enabled: true,
                id: Some("acl-1".into()),
                kind: Some(alibaba_lb::AclType::White),
            })));
        let nlb = lb_spec(&snap, Product::Nlb, "c1", None).unwrap();
        assert!(nlb.listeners.iter().all(|l| l.settings.acl.is_none()));
    }

    /// `protocol-port` turns port 80 into an HTTPS listener carrying `cert-id` (and
    /// the health-check timeout); the UDP port keeps its own protocol and no
    /// certificate.
    #[test]
    fn protocol_port_and_cert_id_make_an_https_listener_with_its_certificate() {
        let p = "service.beta.kubernetes.io/alibaba-cloud-loadbalancer-";
        let cert = format!("{p}cert-id");
        let timeout = format!("{p}health-check-timeout");
        let spec = lb_spec(
            &snapshot(
                "web",
                "0123456789ab",
                &[
                    (PROTOCOL_PORT, "https:80"),
                    (&cert, "cert-1"),
                    (&timeout, "9"),
                ],
            ),
            Product::Clb,
            "c1",
            None,
        )
        .unwrap();
        let got: Vec<_> = spec
            .listeners
            .iter()
            .map(|l| {
                (
                    l.port,
                    l.protocol,
                    l.settings.server_certificate_id.as_deref(),
                    l.settings.health_check.timeout_seconds,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (80, ListenerProtocol::Https, Some("cert-1"), Some(9)),
                (53, ListenerProtocol::Udp, None, Some(9)),
            ]
        );
    }

    #[test]
    fn names_stay_within_the_limit_and_a_short_uid_is_taken_whole() {
        let long = "a".repeat(100);
        let spec = lb_spec(
            &snapshot(&long, "0123456789ab", &[]),
            Product::Clb,
            "c1",
            None,
        )
        .unwrap();
        assert_eq!(spec.name.len(), NAME_LIMIT);
        assert!(spec.name.starts_with("k8s-c1-shop-aaaa"), "{}", spec.name);
        assert!(
            spec.name.ends_with("-01234567"),
            "the uid part is kept: {}",
            spec.name
        );
        let again = lb_spec(
            &snapshot(&long, "fedcba9876", &[]),
            Product::Clb,
            "c1",
            None,
        )
        .unwrap();
        assert_ne!(
            again.name, spec.name,
            "a Service made again gets another token"
        );
        let spec = lb_spec(&snapshot("web", "u1", &[]), Product::Clb, "c1", None).unwrap();
        assert_eq!(spec.name, "k8s-c1-shop-web-u1");
    }
}
