//! The annotations' table tests: every accepted form, every refusal naming the
//! accepted ones, and the family's table against docs/configuration.md.
use std::collections::BTreeMap;
use std::time::Duration;

use alibaba_lb::{
    AclType, ClbInstance, ConnectionDrain, HealthCheck, HealthCheckType, ListenerAcl,
    ListenerProtocol, ListenerSettings, Product,
};

use super::*;
use crate::gates::model::ServicePort;

fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (full_name(k), v.to_string()))
        .collect()
}

#[test]
fn additional_resource_tags_take_the_documented_form_and_the_api_limits() {
    let tags = |v: &str| additional_resource_tags(&annotations(&[("additional-resource-tags", v)]));
    let t = |k: &str, v: &str| (k.to_string(), v.to_string());
    assert_eq!(additional_resource_tags(&BTreeMap::new()), Ok(vec![]));
    assert_eq!(
        tags("team=web, env=prod"),
        Ok(vec![t("team", "web"), t("env", "prod")])
    );
    assert_eq!(tags("empty="), Ok(vec![t("empty", "")]));
    let k64 = format!("{}=v", "k".repeat(64));
    assert!(tags(&k64).is_ok());
    let eighteen: Vec<String> = (1..=18).map(|n| format!("k{n}=v")).collect();
    assert!(tags(&eighteen.join(",")).is_ok());
    let nineteen: Vec<String> = (1..=19).map(|n| format!("k{n}=v")).collect();
    for bad in [
        "team",
        "=v",
        "aliyun-x=v",
        "acs:x=v",
        "k=acs:v",
        "k=see http://x",
        "a=1,a=2",
        "rollgate.io/cluster-id=other",
        "rollgate.io/service-uid=u",
        &format!("{}=v", "k".repeat(65)),
        &format!("k={}", "v".repeat(129)),
        &nineteen.join(","),
    ] {
        let said = tags(bad).expect_err(bad);
        assert!(
            said.contains("additional-resource-tags") && said.contains("k1=v1,k2=v2"),
            "{said}"
        );
    }
}

#[test]
fn the_weight_is_1_to_100_and_unset_without_the_annotation() {
    let read = |v: &str| backend_weight(&annotations(&[("weight", v)]));
    assert_eq!(backend_weight(&BTreeMap::new()), Ok(None));
    assert_eq!(read("1"), Ok(Some(1)));
    assert_eq!(read(" 100 "), Ok(Some(100)));
    for bad in ["0", "101", "-1", "50%", "x"] {
        let said = read(bad).unwrap_err();
        assert!(
            said.contains("alibaba-cloud-loadbalancer-weight")
                && said.contains("an integer from 1 to 100"),
            "{bad}: {said}"
        );
    }
    let not_applicable = not_acted_on(
        &annotations(&[("ignore-weight-update", "on")]),
        Some(Product::Clb),
    );
    assert!(
        not_applicable[0]
            .1
            .contains("rollgate sets backend weights itself"),
        "{not_applicable:?}"
    );
}

#[test]
fn the_vswitch_is_a_vswitch_id_and_means_nothing_to_an_nlb() {
    let read = |v: &str| vswitch_id(&annotations(&[("vswitch-id", v)]));
    assert_eq!(vswitch_id(&BTreeMap::new()), Ok(None));
    assert_eq!(
        read("vsw-2zew0gr3xhfl2"),
        Ok(Some("vsw-2zew0gr3xhfl2".into()))
    );
    for bad in ["vsw-", "sw-1", "vsw-a_b", "vsw-1,vsw-2"] {
        let said = read(bad).unwrap_err();
        assert!(
            said.contains("vswitch-id") && said.contains("vsw- and"),
            "{said}"
        );
    }
    let nlb = not_acted_on(&annotations(&[("vswitch-id", "vsw-1")]), Some(Product::Nlb));
    assert!(nlb[0].1.contains("zone-maps"), "{nlb:?}");
    assert!(not_acted_on(&annotations(&[("vswitch-id", "vsw-1")]), Some(Product::Clb)).is_empty());
}

#[test]
fn spec_and_charge_type_are_the_apis_values_and_clcu_takes_no_spec() {
    let read = |pairs: &[(&str, &str)]| clb_instance(&annotations(pairs));
    assert_eq!(read(&[]), Ok(ClbInstance::default()));
    assert_eq!(
        read(&[
            ("spec", "slb.s2.small"),
            ("instance-charge-type", "paybyspec")
        ]),
        Ok(ClbInstance {
            spec: "slb.s2.small".into(),
            charge_type: "PayBySpec".into()
        })
    );
    assert_eq!(
        read(&[("instance-charge-type", "PayByCLCU")]),
        Ok(ClbInstance {
            spec: String::new(),
            charge_type: "PayByCLCU".into()
        })
    );
    #[rustfmt::skip]
    let refused: &[(&[(&str, &str)], &str)] = &[
        (&[("spec", "slb.s9.huge")], "spec: \"slb.s9.huge\" is not valid; accepted: slb.s1.small, slb.s2.small"),
        (&[("instance-charge-type", "monthly")], "accepted: PayBySpec, PayByCLCU"),
    ];
    for (pairs, want) in refused {
        let said = read(pairs).unwrap_err();
        assert!(said.contains(want), "{pairs:?}: {said}");
    }
    let nlb = not_acted_on(
        &annotations(&[("spec", "slb.s1.small")]),
        Some(Product::Nlb),
    );
    assert!(nlb[0].1.contains("billed by use"), "{nlb:?}");
}

/// A CCM-era manifest's `spec` (alone, or with PayByCLCU) is taken, not refused,
/// and the Service is told it is not applied; with PayBySpec it is applied.
#[test]
fn a_spec_without_pay_by_spec_is_accepted_and_said_not_applied() {
    let clcu = ClbInstance {
        spec: "slb.s1.small".into(),
        charge_type: "PayByCLCU".into(),
    };
    let both = annotations(&[
        ("spec", "slb.s1.small"),
        ("instance-charge-type", "PayByCLCU"),
    ]);
    assert_eq!(clb_instance(&both), Ok(clcu));
    for pairs in [
        &[("spec", "slb.s1.small")][..],
        &[
            ("spec", "slb.s1.small"),
            ("instance-charge-type", "PayByCLCU"),
        ][..],
    ] {
        let said = not_acted_on(&annotations(pairs), Some(Product::Clb));
        assert_eq!(said.len(), 1, "{pairs:?}: {said:?}");
        assert!(
            said[0].0.ends_with("/alibaba-cloud-loadbalancer-spec"),
            "{said:?}"
        );
        assert!(said[0].1.contains("is not applied"), "{said:?}");
        assert!(said[0].1.contains("PayBySpec"), "{said:?}");
    }
    let by_spec = annotations(&[
        ("spec", "slb.s1.small"),
        ("instance-charge-type", "PayBySpec"),
    ]);
    assert!(not_acted_on(&by_spec, Some(Product::Clb)).is_empty());
}

#[test]
fn no_annotation_is_the_default() {
    assert_eq!(
        listener_settings(&BTreeMap::new()),
        Ok(ListenerSettings::default())
    );
}

#[test]
fn every_health_check_annotation_is_read() {
    let s = listener_settings(&annotations(&[
        ("health-check-type", "HTTP"),
        ("health-check-uri", "/healthz"),
        ("health-check-domain", "shop.example"),
        ("health-check-httpcode", "http_2xx, http_3xx"),
        ("health-check-method", "head"),
        ("health-check-connect-port", "8081"),
        ("healthy-threshold", "3"),
        ("unhealthy-threshold", "4"),
        ("health-check-interval", "5"),
        ("health-check-connect-timeout", "2"),
        ("health-check-timeout", "6"),
        ("health-check-switch", "on"),
        ("connection-drain", "on"),
        ("connection-drain-timeout", "60"),
        ("scheduler", "WRR"),
    ]))
    .unwrap();
    assert_eq!(
        s,
        ListenerSettings {
            health_check: HealthCheck {
                enabled: Some(true),
                kind: Some(HealthCheckType::Http),
                uri: Some("/healthz".into()),
                domain: Some("shop.example".into()),
                http_codes: vec!["http_2xx".into(), "http_3xx".into()],
                method: Some("HEAD".into()),
                connect_port: Some(8081),
                healthy_threshold: Some(3),
                unhealthy_threshold: Some(4),
                interval_seconds: Some(5),
                connect_timeout_seconds: Some(2),
                timeout_seconds: Some(6),
            },
            drain: Some(ConnectionDrain {
                enabled: true,
                timeout_seconds: Some(60),
            }),
            scheduler: Some("wrr".into()),
            server_certificate_id: None,
            acl: None,
        }
    );
}

#[test]
fn the_legacy_prefix_and_the_nlb_switch_name_are_read_too() {
    let legacy: BTreeMap<String, String> = [(
        "service.beta.kubernetes.io/alicloud-loadbalancer-health-check-flag".to_string(),
        "off".to_string(),
    )]
    .into();
    let s = listener_settings(&legacy).unwrap();
    assert_eq!(s.health_check.enabled, Some(false));
}

/// Each bad value is refused naming the annotation and the accepted forms; the
/// bounds themselves are accepted.
#[test]
fn values_outside_the_api_ranges_are_refused_naming_the_accepted_forms() {
    #[rustfmt::skip]
    let cases: &[(&str, &str, Option<&str>)] = &[
        ("healthy-threshold", "1", Some("an integer from 2 to 10")),
        ("healthy-threshold", "2", None),
        ("healthy-threshold", "10", None),
        ("unhealthy-threshold", "11", Some("an integer from 2 to 10")),
        ("health-check-interval", "0", Some("an integer from 1 to 50")),
        ("health-check-interval", "50", None),
        ("health-check-interval", "51", Some("an integer from 1 to 50")),
        ("health-check-connect-timeout", "300", None),
        ("health-check-connect-timeout", "301", Some("an integer from 1 to 300")),
        ("health-check-connect-timeout", "5s", Some("an integer from 1 to 300")),
        ("health-check-timeout", "0", Some("an integer from 1 to 300")),
        ("health-check-timeout", "300", None),
        ("health-check-timeout", "301", Some("an integer from 1 to 300")),
        ("health-check-connect-port", "0", Some("an integer from 1 to 65535")),
        ("health-check-connect-port", "65536", Some("an integer from 1 to 65535")),
        ("health-check-type", "udp", Some("tcp, http")),
        ("health-check-uri", "healthz", Some("starting with /")),
        ("health-check-uri", "/a b", Some("starting with /")),
        ("health-check-domain", "a_b", Some("$_ip, or 1 to 80")),
        ("health-check-domain", "$_ip", None),
        ("health-check-httpcode", "http_2xx,200", Some("http_2xx, http_3xx")),
        ("health-check-method", "post", Some("get, head")),
        ("health-check-switch", "yes", Some("on, off")),
        ("connection-drain", "true", Some("on, off")),
        ("scheduler", "lc", Some("wrr, rr, sch, tch")),
        ("scheduler", "tch", None),
    ];
    for (suffix, value, want) in cases {
        let got = listener_settings(&annotations(&[(suffix, value)]));
        match (got, want) {
            (Ok(_), None) => {}
            (Err(problem), Some(want)) => {
                assert!(
                    problem.contains(&full_name(suffix)) && problem.contains(want),
                    "{suffix}={value}: {problem}"
                );
            }
            (got, want) => panic!("{suffix}={value}: got {got:?}, want {want:?}"),
        }
    }
}

fn ports() -> Vec<ServicePort> {
    [(443, "TCP"), (80, "TCP"), (53, "UDP")]
        .iter()
        .map(|(port, protocol)| ServicePort {
            port: *port,
            protocol: protocol.to_string(),
            target: crate::gates::model::TargetPort::Number(8080),
        })
        .collect()
}

#[test]
fn protocol_port_makes_http_and_https_listeners_and_https_needs_a_certificate() {
    use ListenerProtocol::*;
    let read = |pairs: &[(&str, &str)]| listener_protocols(&annotations(pairs), &ports());
    let got = read(&[
        ("protocol-port", "HTTPS:443, http:80"),
        ("cert-id", "1234_cert-a.b"),
    ])
    .unwrap();
    assert_eq!(got.by_port, BTreeMap::from([(443, Https), (80, Http)]));
    assert_eq!(got.certificate_id.as_deref(), Some("1234_cert-a.b"));
    assert!(got.any_layer7());
    let p = ports();
    assert_eq!((got.of(&p[0]), got.of(&p[2])), (Https, Udp));
    // No annotation: each port keeps its own protocol.
    let none = read(&[]).unwrap();
    assert_eq!((none.of(&p[1]), none.of(&p[2])), (Tcp, Udp));
    assert!(!none.any_layer7());

    #[rustfmt::skip]
    let refused: &[(&[(&str, &str)], &str)] = &[
        (&[("protocol-port", "https:443")], "needs service.beta.kubernetes.io/alibaba-cloud-loadbalancer-cert-id"),
        (&[("protocol-port", "http:8080")], "names port 8080, which the Service does not have"),
        (&[("protocol-port", "http:53")], "port 53 is UDP; accepted: udp on it"),
        (&[("protocol-port", "udp:80")], "port 80 is TCP; accepted: http, https or tcp on it"),
        (&[("protocol-port", "ftp:80")], "protocol one of http, https, tcp, udp"),
        (&[("protocol-port", "http")], "<protocol>:<port>"),
        (&[("protocol-port", "http:80"), ("cert-id", "a b")], "cert-id: \"a b\" is not valid"),
    ];
    for (pairs, want) in refused {
        let problem = read(pairs).unwrap_err();
        assert!(problem.contains(want), "{pairs:?}: {problem}");
    }
}

#[test]
fn the_drain_needs_its_timeout_and_the_timeout_needs_the_drain() {
    let on = listener_settings(&annotations(&[("connection-drain", "on")])).unwrap_err();
    assert!(on.contains("connection-drain-timeout"), "{on}");
    let alone = listener_settings(&annotations(&[("connection-drain-timeout", "30")])).unwrap_err();
    assert!(alone.contains("only accepted with"), "{alone}");
    let out_of_range = listener_settings(&annotations(&[
        ("connection-drain", "on"),
        ("connection-drain-timeout", "5"),
    ]))
    .unwrap_err();
    assert!(out_of_range.contains("from 10 to 900"), "{out_of_range}");
    assert!(!out_of_range.contains("needs"), "said once: {out_of_range}");
    let off = listener_settings(&annotations(&[("connection-drain", "off")])).unwrap();
    assert_eq!(
        off.drain,
        Some(ConnectionDrain {
            enabled: false,
            timeout_seconds: None
        })
    );
}

#[test]
fn the_drain_time_is_the_load_balancer_drain_when_it_is_on() {
    let flag = Duration::from_secs(10);
    let read = |pairs: &[(&str, &str)]| listener_settings(&annotations(pairs)).unwrap();
    let cases = [
        (read(&[]), flag),
        (read(&[("connection-drain", "off")]), flag),
        (
            read(&[
                ("connection-drain", "on"),
                ("connection-drain-timeout", "60"),
            ]),
            Duration::from_secs(60),
        ),
        // Shorter than the flag too: the load balancer cuts the connections then.
        (
            read(&[
                ("connection-drain", "on"),
                ("connection-drain-timeout", "10"),
            ]),
            Duration::from_secs(10),
        ),
    ];
    for (settings, want) in cases {
        assert_eq!(drain_time(&settings, flag), want, "{settings:?}");
    }
    assert_eq!(
        drain_time(
            &read(&[
                ("connection-drain", "on"),
                ("connection-drain-timeout", "10")
            ]),
            Duration::from_secs(3)
        ),
        Duration::from_secs(10)
    );
}

#[test]
fn every_bad_value_is_said_at_once() {
    let problem = listener_settings(&annotations(&[
        ("healthy-threshold", "0"),
        ("health-check-type", "icmp"),
    ]))
    .unwrap_err();
    assert!(problem.contains("healthy-threshold") && problem.contains("health-check-type"));
}

#[test]
fn annotations_not_acted_on_are_named_and_supported_ones_are_not() {
    let mut a = annotations(&[
        ("health-check-uri", "/"),
        ("acl-status", "on"),
        ("persistence-timeout", "60"),
        ("backend-label", "x=y"),
        ("no-such-thing", "1"),
    ]);
    a.insert(
        "service.beta.kubernetes.io/alicloud-loadbalancer-cps".into(),
        "100".into(),
    );
    a.insert("example.com/other".into(), "x".into());
    let said = not_acted_on(&a, Some(Product::Clb));
    let names: Vec<&str> = said.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "service.beta.kubernetes.io/alibaba-cloud-loadbalancer-backend-label",
            "service.beta.kubernetes.io/alibaba-cloud-loadbalancer-no-such-thing",
            "service.beta.kubernetes.io/alibaba-cloud-loadbalancer-persistence-timeout",
            "service.beta.kubernetes.io/alicloud-loadbalancer-cps",
        ]
    );
    let note = |name: &str| &said.iter().find(|(k, _)| k.ends_with(name)).unwrap().1;
    assert!(note("persistence-timeout").contains("not supported by rollgate yet"));
    assert!(note("backend-label").contains("does not apply"));
    assert!(note("no-such-thing").contains("not one rollgate knows"));
    // The ACL is CLB's: on an NLB Service it is named, with the reason.
    let nlb = not_acted_on(&a, Some(Product::Nlb));
    let acl = &nlb
        .iter()
        .find(|(k, _)| k.ends_with("acl-status"))
        .expect("acl-status named on NLB")
        .1;
    assert!(
        acl.contains("does not apply to NLB") && acl.contains("security groups"),
        "{acl}"
    );
    assert_eq!(nlb.len(), said.len() + 1);
}

/// `acl-status: on` takes the list and its type; `off` sends the switch alone;
/// each bad or missing piece is said naming the annotation and the accepted forms.
#[test]
fn acl_annotations_need_the_list_and_its_type_with_the_switch_on() {
    let read = |pairs: &[(&str, &str)]| listener_settings(&annotations(pairs));
    let on = read(&[
        ("acl-status", "on"),
        ("acl-id", "acl-bp1l0kk4gxce43kzet04s"),
        ("acl-type", "Black"),
    ])
    .unwrap();
    assert_eq!(
        on.acl,
        Some(ListenerAcl {
            enabled: true,
            id: Some("acl-bp1l0kk4gxce43kzet04s".into()),
            kind: Some(AclType::Black),
        })
    );
    let off = read(&[("acl-status", "off"), ("acl-id", "acl-1")]).unwrap();
    assert_eq!(
        off.acl,
        Some(ListenerAcl {
            enabled: false,
            id: None,
            kind: None
        })
    );
    assert_eq!(read(&[]).unwrap().acl, None);
    #[rustfmt::skip]
    let refused: &[(&[(&str, &str)], &str)] = &[
        (&[("acl-status", "on")], "needs service.beta.kubernetes.io/alibaba-cloud-loadbalancer-acl-id and service.beta.kubernetes.io/alibaba-cloud-loadbalancer-acl-type"),
        (&[("acl-status", "on"), ("acl-id", "acl-1")], "needs service.beta.kubernetes.io/alibaba-cloud-loadbalancer-acl-type ("),
        (&[("acl-status", "yes")], "acl-status: \"yes\" is not valid; accepted: on, off"),
        (&[("acl-status", "on"), ("acl-id", "acl-1"), ("acl-type", "grey")], "acl-type: \"grey\" is not valid; accepted: white, black"),
        (&[("acl-status", "on"), ("acl-id", "my list"), ("acl-type", "white")], "acl-id: \"my list\" is not valid; accepted: the id of a CLB access control list"),
        (&[("acl-id", "acl-1")], "acl-id is only accepted with service.beta.kubernetes.io/alibaba-cloud-loadbalancer-acl-status"),
    ];
    for (pairs, want) in refused {
        let problem = read(pairs).unwrap_err();
        assert!(problem.contains(want), "{pairs:?}: {problem}");
    }
}

#[test]
fn the_family_lists_each_annotation_once_and_the_reference_table_has_each() {
    let readme = include_str!("../../../docs/configuration.md");
    let mut seen = std::collections::BTreeSet::new();
    for (suffix, support) in FAMILY {
        assert!(seen.insert(*suffix), "{suffix} twice");
        let word = match support {
            Support::Supported => "supported",
            Support::NotYet => "not yet",
            Support::NotApplicable => "not applicable",
        };
        let row = format!("| `{suffix}` | {word} |");
        assert!(
            readme.contains(&row),
            "docs/configuration.md lacks the row {row}"
        );
    }
}
