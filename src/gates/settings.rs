//! The Alibaba listener annotations rollgate implements (the `health-check-*` family,
//! the thresholds, `connection-drain` and its timeout, `scheduler`, the CLB listener's
//! `acl-*`), read into the listener settings the cloud client sends; `protocol-port`
//! and `cert-id`, which make a Service port's CLB listener HTTP or HTTPS; `weight` and
//! `vswitch-id`; and the whole annotation family, each marked
//! supported, not yet, or not applicable, so a Service moved over from Alibaba's cloud
//! controller hears about every annotation rollgate does not act on. Pure.
//!
//! Accepted values and ranges are those of the API reference (CLB TCP/UDP listener
//! parameters, NLB `CreateServerGroup`), so a value the cloud would refuse is refused
//! here, with the annotation and its accepted forms named, before any cloud call.
use std::collections::BTreeMap;
use std::time::Duration;

use alibaba_lb::{
    tag_key_ok, tag_value_ok, AclType, ClbInstance, ConnectionDrain, HealthCheck, HealthCheckType,
    ListenerAcl, ListenerProtocol, ListenerSettings, Product, TAGS_PER_RESOURCE,
};

use super::model::ServicePort;

use crate::names::{CLUSTER_ID_TAG, LOAD_BALANCER_ANNOTATION_PREFIXES, SERVICE_UID_TAG};

/// Where rollgate stands on one annotation of the family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Support {
    Supported,
    /// Not implemented yet: a Service that sets it gets a Warning Event.
    NotYet,
    /// Means nothing for rollgate (which registers pods, not nodes): a Warning Event
    /// says so too, so nobody waits for it.
    NotApplicable,
}

/// Every annotation of Alibaba's cloud controller under the family's prefixes (the
/// suffix after `...-loadbalancer-`), and rollgate's support of it. docs/configuration.md's
/// annotation table lists each (a test checks).
pub const FAMILY: &[(&str, Support)] = {
    use Support::*;
    &[
        ("id", Supported),
        ("address-type", Supported),
        ("zone-maps", Supported),
        ("health-check-switch", Supported),
        ("health-check-flag", Supported),
        ("health-check-type", Supported),
        ("health-check-uri", Supported),
        ("health-check-domain", Supported),
        ("health-check-httpcode", Supported),
        ("health-check-method", Supported),
        ("health-check-connect-port", Supported),
        ("healthy-threshold", Supported),
        ("unhealthy-threshold", Supported),
        ("health-check-interval", Supported),
        ("health-check-connect-timeout", Supported),
        ("connection-drain", Supported),
        ("connection-drain-timeout", Supported),
        // HTTP/HTTPS listeners (CLB, with `protocol-port`).
        ("health-check-timeout", Supported),
        ("protocol-port", Supported),
        ("cert-id", Supported),
        ("cacert-id", NotYet),
        ("cacert", NotYet),
        ("additional-cert-ids", NotYet),
        ("tls-cipher-policy", NotYet),
        ("http2-enabled", NotYet),
        ("forward-port", NotYet),
        ("idle-timeout", NotYet),
        ("request-timeout", NotYet),
        ("sticky-session", NotYet),
        ("sticky-session-type", NotYet),
        ("cookie", NotYet),
        ("cookie-timeout", NotYet),
        ("xforwardedfor-proto", NotYet),
        ("xforwardedfor-slbport", NotYet),
        ("xforwardedfor-clientsrcport", NotYet),
        ("domain-extensions", NotYet),
        ("alpn", NotYet),
        ("alpn-policy", NotYet),
        // Listeners and server groups.
        ("scheduler", Supported),
        ("weight", Supported),
        ("default-weight", NotYet),
        ("ignore-weight-update", NotApplicable),
        ("persistence-timeout", NotYet),
        ("established-timeout", NotYet),
        ("proxy-protocol", NotYet),
        ("ppv2-pvl-ep-id-enabled", NotYet),
        ("ppv2-pvl-eps-id-enabled", NotYet),
        ("ppv2-pvl-vpc-id-enabled", NotYet),
        ("acl-status", Supported),
        ("acl-id", Supported),
        ("acl-type", Supported),
        ("vgroup-port", NotYet),
        ("force-override-listeners", NotYet),
        ("listener-port-range", NotYet),
        ("cps", NotYet),
        ("preserve-client-ip", NotYet),
        ("server-group-type", NotYet),
        ("backend-ip-version", NotYet),
        // The load balancer itself.
        ("name", NotYet),
        ("spec", Supported),
        ("instance-charge-type", Supported),
        ("charge-type", NotYet),
        ("bandwidth", NotYet),
        ("vswitch-id", Supported),
        ("network-type", NotYet),
        ("master-zoneid", NotYet),
        ("slave-zoneid", NotYet),
        ("ip-version", NotYet),
        ("ipv6-address-type", NotYet),
        ("external-ip-type", NotYet),
        ("hostname", NotYet),
        ("ip", NotYet),
        ("resource-group-id", NotYet),
        ("additional-resource-tags", Supported),
        ("delete-protection", NotYet),
        ("modification-protection", NotYet),
        ("preserve-lb-on-delete", Supported),
        ("security-group-ids", NotYet),
        ("bandwidth-package-id", NotYet),
        ("cross-zone-enabled", NotYet),
        // Node backends: rollgate registers pods (ENI/IP), never nodes.
        ("backend-label", NotApplicable),
        ("remove-unscheduled-backend", NotApplicable),
    ]
};

/// The annotation's full name under the current prefix (what messages name).
pub fn full_name(suffix: &str) -> String {
    format!("{}{suffix}", LOAD_BALANCER_ANNOTATION_PREFIXES[0])
}

/// Why an annotation does not apply, where the reason is not the usual one (rollgate
/// registers pods, not nodes).
const NOT_APPLICABLE_WHY: &[(&str, &str)] = &[(
    "ignore-weight-update",
    "rollgate sets backend weights itself (0 to drain a terminating pod, the Service's weight when it serves), so skipping weight updates would keep drained pods out of rotation or terminating ones in",
)];

/// Supported annotations that one product has no use for, with the reason (the
/// product's API has no such setting), so a Service of that product hears it.
const NOT_FOR_PRODUCT: &[(&str, Product, &str)] = &[
    ("acl-status", Product::Nlb, NLB_HAS_NO_ACL),
    ("acl-id", Product::Nlb, NLB_HAS_NO_ACL),
    ("acl-type", Product::Nlb, NLB_HAS_NO_ACL),
    (
        "vswitch-id",
        Product::Nlb,
        "an NLB takes one vswitch per zone, from zone-maps",
    ),
    ("spec", Product::Nlb, NLB_HAS_NO_SPEC),
    ("instance-charge-type", Product::Nlb, NLB_HAS_NO_SPEC),
];

const NLB_HAS_NO_SPEC: &str =
    "an NLB has no instance spec or charge type to choose (it is billed by use)";

const NLB_HAS_NO_ACL: &str = "NLB listeners take no access control list (the NLB API has none; NLB admits clients through security groups instead)";

/// Annotations of the family on the Service that rollgate does not act on, by full
/// name as written, each with the sentence its Warning Event says. Annotations of
/// the family that rollgate does not know at all are reported too, and supported
/// ones the Service's `product` has no use for.
pub fn not_acted_on(
    annotations: &BTreeMap<String, String>,
    product: Option<Product>,
) -> Vec<(String, String)> {
    annotations
        .keys()
        .filter_map(|key| {
            let suffix = LOAD_BALANCER_ANNOTATION_PREFIXES
                .iter()
                .find_map(|prefix| key.strip_prefix(prefix))?;
            let support = FAMILY.iter().find(|(s, _)| *s == suffix).map(|(_, s)| *s);
            let not_for_product = NOT_FOR_PRODUCT
                .iter()
                .find(|(s, p, _)| *s == suffix && Some(*p) == product);
            let note = match support {
                Some(Support::Supported) => {
                    let (_, product, why) = not_for_product?;
                    let product = match product {
                        Product::Clb => "CLB",
                        Product::Nlb => "NLB",
                    };
                    format!("annotation {key} does not apply to {product}: {why}; it has no effect")
                }
                Some(Support::NotYet) => format!(
                    "annotation {key} is not supported by rollgate yet: it has no effect on the load balancer"
                ),
                Some(Support::NotApplicable) => {
                    let why = NOT_APPLICABLE_WHY
                        .iter()
                        .find(|(s, _)| *s == suffix)
                        .map_or("rollgate registers pods as backends, never nodes", |(_, w)| *w);
                    format!("annotation {key} does not apply: {why}; it has no effect")
                }
                None => format!(
                    "annotation {key} is not one rollgate knows: it has no effect on the load balancer"
                ),
            };
            Some((key.clone(), note))
        })
        .chain(spec_not_applied(annotations, product))
        .collect()
}

/// `spec` on a CLB without `instance-charge-type: PayBySpec`: rollgate creates a
/// pay-by-CLCU instance (pay-by-spec is no longer sold; CCM also reads an empty
/// charge type as pay-by-CLCU), and a pay-by-CLCU instance has no spec. Most
/// manifests written for CCM carry `spec` (its default was `slb.s1.small`), so the
/// spec is not refused, and the Service is told once that it is not applied.
fn spec_not_applied(
    annotations: &BTreeMap<String, String>,
    product: Option<Product>,
) -> Option<(String, String)> {
    if product != Some(Product::Clb) {
        return None;
    }
    let charge_type = get(annotations, "instance-charge-type");
    if charge_type.is_some_and(|c| c.eq_ignore_ascii_case("PayBySpec")) {
        return None;
    }
    let key = LOAD_BALANCER_ANNOTATION_PREFIXES
        .iter()
        .map(|prefix| format!("{prefix}spec"))
        .find(|key| annotations.get(key).is_some_and(|v| !v.trim().is_empty()))?;
    let note = format!(
        "annotation {key} is not applied: rollgate creates a pay-by-CLCU instance, which has no spec (pay-by-spec is no longer sold); to ask for pay-by-spec, set {} to PayBySpec",
        full_name("instance-charge-type")
    );
    Some((key, note))
}

/// `additional-resource-tags` (`k1=v1,k2=v2`, Alibaba's documented form): tags put on
/// what rollgate creates, beside its own two (`CLUSTER_ID_TAG`, `SERVICE_UID_TAG`,
/// which the user may not set). Checked as both APIs check tags (`alibaba_lb`'s
/// `tag_key_ok`, `tag_value_ok`, `TAGS_PER_RESOURCE`: the SDK models' rules, beside
/// the spec's tags), each key once.
pub fn additional_resource_tags(
    annotations: &BTreeMap<String, String>,
) -> Result<Vec<(String, String)>, String> {
    const SUFFIX: &str = "additional-resource-tags";
    let Some(raw) = get(annotations, SUFFIX) else {
        return Ok(vec![]);
    };
    let accepted = format!(
        "\"k1=v1,k2=v2\": keys of 1 to 64 characters, values of at most 128, neither starting with aliyun or acs: nor holding http:// or https://, each key once, at most {} tags, not {CLUSTER_ID_TAG} or {SERVICE_UID_TAG} (rollgate's own)",
        TAGS_PER_RESOURCE - 2
    );
    let mut tags: Vec<(String, String)> = vec![];
    for item in raw.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let Some((key, value)) = item.split_once('=') else {
            return Err(invalid(SUFFIX, raw, &accepted));
        };
        let (key, value) = (key.trim(), value.trim());
        let bad_key = !tag_key_ok(key)
            || key == CLUSTER_ID_TAG
            || key == SERVICE_UID_TAG
            || tags.iter().any(|(k, _)| k == key);
        if bad_key || !tag_value_ok(value) {
            return Err(invalid(SUFFIX, raw, &accepted));
        }
        tags.push((key.to_string(), value.to_string()));
    }
    if tags.len() > TAGS_PER_RESOURCE - 2 {
        return Err(invalid(SUFFIX, raw, &accepted));
    }
    Ok(tags)
}

/// `weight`: the weight each of the Service's backends in rotation carries (both
/// APIs take 0 to 100 per backend: `AddVServerGroupBackendServers`,
/// `AddServersToServerGroup`). 0 is refused: every pod would be out of rotation and
/// its gate would wait for a health verdict that never comes. `None`: not set.
pub fn backend_weight(annotations: &BTreeMap<String, String>) -> Result<Option<u32>, String> {
    let Some(raw) = get(annotations, "weight") else {
        return Ok(None);
    };
    match raw.parse::<u32>() {
        Ok(n) if (1..=100).contains(&n) => Ok(Some(n)),
        _ => Err(invalid(
            "weight",
            raw,
            "an integer from 1 to 100, the weight of each pod's backend (0 would take every pod out of rotation)",
        )),
    }
}

/// `vswitch-id`: the vswitch an intranet CLB takes its address from (`VSwitchId` of
/// `CreateLoadBalancer`), `vsw-` and letters and digits. `None`: not set.
pub fn vswitch_id(annotations: &BTreeMap<String, String>) -> Result<Option<String>, String> {
    let Some(raw) = get(annotations, "vswitch-id") else {
        return Ok(None);
    };
    let ok = raw.len() <= 64
        && raw.strip_prefix("vsw-").is_some_and(|rest| {
            !rest.is_empty() && rest.chars().all(|c| c.is_ascii_alphanumeric())
        });
    if ok {
        Ok(Some(raw.to_string()))
    } else {
        Err(invalid(
            "vswitch-id",
            raw,
            "the id of a vswitch of the cluster's VPC (vsw- and letters and digits)",
        ))
    }
}

/// `LoadBalancerSpec` values of CLB `CreateLoadBalancer` (the SDK model).
const CLB_SPECS: [&str; 6] = [
    "slb.s1.small",
    "slb.s2.small",
    "slb.s2.medium",
    "slb.s3.small",
    "slb.s3.medium",
    "slb.s3.large",
];

/// `spec` and `instance-charge-type`: what a CLB rollgate creates is asked to be. The
/// spec is applied only with `PayBySpec`; otherwise the instance is pay-by-CLCU, which
/// has no spec, and [`not_acted_on`] tells the Service so once.
pub fn clb_instance(annotations: &BTreeMap<String, String>) -> Result<ClbInstance, String> {
    let mut problems = vec![];
    let spec = get(annotations, "spec").and_then(|raw| {
        if CLB_SPECS.contains(&raw) {
            Some(raw.to_string())
        } else {
            problems.push(invalid("spec", raw, &CLB_SPECS.join(", ")));
            None
        }
    });
    let charge_type = get(annotations, "instance-charge-type").and_then(|raw| {
        match raw.to_ascii_lowercase().as_str() {
            "paybyspec" => Some("PayBySpec".to_string()),
            "paybyclcu" => Some("PayByCLCU".to_string()),
            _ => {
                problems.push(invalid("instance-charge-type", raw, "PayBySpec, PayByCLCU"));
                None
            }
        }
    });
    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    Ok(ClbInstance {
        spec: spec.unwrap_or_default(),
        charge_type: charge_type.unwrap_or_default(),
    })
}

/// One annotation, read under either prefix (the current one wins), trimmed.
fn get<'a>(annotations: &'a BTreeMap<String, String>, suffix: &str) -> Option<&'a str> {
    LOAD_BALANCER_ANNOTATION_PREFIXES
        .iter()
        .find_map(|prefix| annotations.get(&format!("{prefix}{suffix}")))
        .map(|v| v.trim())
        .filter(|v| !v.is_empty())
}

fn invalid(suffix: &str, value: &str, accepted: &str) -> String {
    format!(
        "annotation {}: {value:?} is not valid; accepted: {accepted}",
        full_name(suffix)
    )
}

/// Reads the annotations that fill the listener settings; every bad value is said
/// (one sentence each, joined), and then nothing is sent.
pub fn listener_settings(
    annotations: &BTreeMap<String, String>,
) -> Result<ListenerSettings, String> {
    let mut problems: Vec<String> = vec![];
    let mut number = |suffix: &str, range: std::ops::RangeInclusive<u32>| -> Option<u32> {
        let raw = get(annotations, suffix)?;
        match raw.parse::<u32>() {
            Ok(n) if range.contains(&n) => Some(n),
            _ => {
                let accepted = format!("an integer from {} to {}", range.start(), range.end());
                problems.push(invalid(suffix, raw, &accepted));
                None
            }
        }
    };
    let connect_port = number("health-check-connect-port", 1..=65535).map(|p| p as u16);
    let healthy_threshold = number("healthy-threshold", 2..=10);
    let unhealthy_threshold = number("unhealthy-threshold", 2..=10);
    let interval_seconds = number("health-check-interval", 1..=50);
    let connect_timeout_seconds = number("health-check-connect-timeout", 1..=300);
    // HTTP and HTTPS listeners' answer timeout (TCP/UDP listeners have none).
    let timeout_seconds = number("health-check-timeout", 1..=300);
    let drain_timeout = number("connection-drain-timeout", 10..=900);

    let mut switch = |suffix: &str| -> Option<bool> {
        let raw = get(annotations, suffix)?;
        match raw.to_ascii_lowercase().as_str() {
            "on" => Some(true),
            "off" => Some(false),
            _ => {
                problems.push(invalid(suffix, raw, "on, off"));
                None
            }
        }
    };
    // CLB names the switch of TCP/UDP listeners `health-check-switch`, NLB
    // `health-check-flag`; either works on both, the first wins.
    let enabled = switch("health-check-switch").or(switch("health-check-flag"));
    let drain = switch("connection-drain");
    let acl_status = switch("acl-status");

    let kind = get(annotations, "health-check-type").and_then(|raw| {
        match raw.to_ascii_lowercase().as_str() {
            "tcp" => Some(HealthCheckType::Tcp),
            "http" => Some(HealthCheckType::Http),
            _ => {
                problems.push(invalid("health-check-type", raw, "tcp, http"));
                None
            }
        }
    });
    let uri = get(annotations, "health-check-uri").and_then(|raw| {
        let ok =
            raw.starts_with('/') && raw.len() <= 80 && raw.chars().all(|c| c.is_ascii_graphic());
        if ok {
            Some(raw.to_string())
        } else {
            problems.push(invalid(
                "health-check-uri",
                raw,
                "a path of 1 to 80 characters starting with /",
            ));
            None
        }
    });
    let domain = get(annotations, "health-check-domain").and_then(|raw| {
        let ok = raw == "$_ip"
            || (raw.len() <= 80
                && raw
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-'));
        if ok {
            Some(raw.to_string())
        } else {
            problems.push(invalid(
                "health-check-domain",
                raw,
                "$_ip, or 1 to 80 letters, digits, '.' and '-'",
            ));
            None
        }
    });
    const CODES: [&str; 4] = ["http_2xx", "http_3xx", "http_4xx", "http_5xx"];
    let http_codes = match get(annotations, "health-check-httpcode") {
        None => vec![],
        Some(raw) => {
            let codes: Vec<String> = raw
                .split(',')
                .map(|c| c.trim().to_ascii_lowercase())
                .collect();
            if codes.iter().all(|c| CODES.contains(&c.as_str())) {
                codes
            } else {
                problems.push(invalid(
                    "health-check-httpcode",
                    raw,
                    "a comma-separated list of http_2xx, http_3xx, http_4xx, http_5xx",
                ));
                vec![]
            }
        }
    };
    let method = get(annotations, "health-check-method").and_then(|raw| {
        match raw.to_ascii_uppercase().as_str() {
            m @ ("GET" | "HEAD") => Some(m.to_string()),
            _ => {
                problems.push(invalid("health-check-method", raw, "get, head"));
                None
            }
        }
    });

    let scheduler = get(annotations, "scheduler").and_then(|raw| {
        let lower = raw.to_ascii_lowercase();
        if ["wrr", "wlc", "rr", "sch", "tch", "qch"].contains(&lower.as_str()) {
            Some(lower)
        } else {
            problems.push(invalid(
                "scheduler",
                raw,
                "wrr, rr, sch, tch (CLB and NLB), qch (CLB UDP, NLB), wlc (NLB)",
            ));
            None
        }
    });

    // Both APIs want a timeout with the drain on, and none without it.
    let drain = match (drain, drain_timeout) {
        (None, None) => None,
        (Some(true), Some(t)) => Some(ConnectionDrain {
            enabled: true,
            timeout_seconds: Some(t),
        }),
        (Some(false), None) => Some(ConnectionDrain {
            enabled: false,
            timeout_seconds: None,
        }),
        (Some(true), None) => {
            if get(annotations, "connection-drain-timeout").is_none() {
                problems.push(format!(
                    "annotation {}: \"on\" needs {} (an integer from 10 to 900)",
                    full_name("connection-drain"),
                    full_name("connection-drain-timeout")
                ));
            }
            None
        }
        (_, Some(_)) => {
            problems.push(format!(
                "annotation {} is only accepted with {}: \"on\"",
                full_name("connection-drain-timeout"),
                full_name("connection-drain")
            ));
            None
        }
    };

    let acl = listener_acl(annotations, acl_status, &mut problems);

    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    Ok(ListenerSettings {
        health_check: HealthCheck {
            enabled,
            kind,
            uri,
            domain,
            http_codes,
            method,
            connect_port,
            healthy_threshold,
            unhealthy_threshold,
            interval_seconds,
            connect_timeout_seconds,
            timeout_seconds,
        },
        drain,
        scheduler,
        // Set per HTTPS listener from `listener_protocols` (`lb_spec`).
        server_certificate_id: None,
        acl,
    })
}

/// `acl-status`, `acl-id`, `acl-type` (CLB listener access control). The API wants
/// the list and its type with the switch on (`AclId`, `AclType`: "required when
/// AclStatus is on"), so `on` without them is refused here; with `off` they are
/// accepted and not sent (turning the control off keeps the list named); without
/// the switch they would do nothing, so they are refused too.
fn listener_acl(
    annotations: &BTreeMap<String, String>,
    status: Option<bool>,
    problems: &mut Vec<String>,
) -> Option<ListenerAcl> {
    let id = get(annotations, "acl-id").and_then(|raw| {
        // CLB ids: `acl-` and letters and digits (`acl-bp1l0kk4gxce43kzet04s`).
        let ok = raw.len() <= 64
            && raw.strip_prefix("acl-").is_some_and(|rest| {
                !rest.is_empty() && rest.chars().all(|c| c.is_ascii_alphanumeric())
            });
        if ok {
            Some(raw.to_string())
        } else {
            problems.push(invalid(
                "acl-id",
                raw,
                "the id of a CLB access control list (acl- and letters and digits)",
            ));
            None
        }
    });
    let kind =
        get(annotations, "acl-type").and_then(|raw| match raw.to_ascii_lowercase().as_str() {
            "white" => Some(AclType::White),
            "black" => Some(AclType::Black),
            _ => {
                problems.push(invalid("acl-type", raw, "white, black"));
                None
            }
        });
    let given = |suffix: &str| get(annotations, suffix).is_some();
    match status {
        Some(true) => {
            let missing: Vec<String> = ["acl-id", "acl-type"]
                .into_iter()
                .filter(|s| !given(s))
                .map(full_name)
                .collect();
            if !missing.is_empty() {
                problems.push(format!(
                    "annotation {}: \"on\" needs {} (acl-id: the access control list's id, acl-type: white or black)",
                    full_name("acl-status"),
                    missing.join(" and ")
                ));
                return None;
            }
            Some(ListenerAcl {
                enabled: true,
                id: Some(id?),
                kind: Some(kind?),
            })
        }
        Some(false) => Some(ListenerAcl {
            enabled: false,
            id: None,
            kind: None,
        }),
        None => {
            for suffix in ["acl-id", "acl-type"].into_iter().filter(|s| given(s)) {
                problems.push(format!(
                    "annotation {} is only accepted with {}: \"on\" or \"off\"",
                    full_name(suffix),
                    full_name("acl-status")
                ));
            }
            None
        }
    }
}

/// `protocol-port` and `cert-id`: the listener protocol of each Service port the
/// annotation names (the others keep their own, TCP or UDP), and the server
/// certificate HTTPS listeners serve.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListenerProtocols {
    pub by_port: BTreeMap<u16, ListenerProtocol>,
    pub certificate_id: Option<String>,
}

impl ListenerProtocols {
    /// The listener protocol of `port`: the annotation's, else the port's own.
    pub fn of(&self, port: &ServicePort) -> ListenerProtocol {
        self.by_port
            .get(&port.port)
            .copied()
            .unwrap_or(if port.protocol == "UDP" {
                ListenerProtocol::Udp
            } else {
                ListenerProtocol::Tcp
            })
    }

    /// Whether any port gets an HTTP or HTTPS listener (CLB only).
    pub fn any_layer7(&self) -> bool {
        self.by_port.values().any(|p| p.is_layer7())
    }
}

/// Reads `protocol-port` (`"https:443,http:80"`, Alibaba's form) against the
/// Service's `ports`, and `cert-id`. Refused, with the accepted forms: a malformed
/// entry, a port the Service does not have, a protocol the port's own protocol cannot
/// carry (HTTP and HTTPS need a TCP port), and HTTPS without `cert-id` (CLB refuses an
/// HTTPS listener without a certificate).
pub fn listener_protocols(
    annotations: &BTreeMap<String, String>,
    ports: &[ServicePort],
) -> Result<ListenerProtocols, String> {
    const FORMS: &str =
        "comma-separated <protocol>:<port> of the Service's ports, protocol one of http, https, tcp, udp (e.g. \"https:443,http:80\")";
    let mut problems = vec![];
    let certificate_id = get(annotations, "cert-id").and_then(|raw| {
        let ok = raw.len() <= 200
            && raw
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if ok {
            Some(raw.to_string())
        } else {
            problems.push(invalid(
                "cert-id",
                raw,
                "a server certificate id (letters, digits, '-', '_', '.')",
            ));
            None
        }
    });
    let mut by_port = BTreeMap::new();
    if let Some(raw) = get(annotations, "protocol-port") {
        for entry in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let parsed = entry.split_once(':').and_then(|(protocol, port)| {
                let protocol = ListenerProtocol::parse(protocol.trim())?;
                Some((protocol, port.trim().parse::<u16>().ok()?))
            });
            let Some((protocol, number)) = parsed else {
                problems.push(invalid("protocol-port", entry, FORMS));
                continue;
            };
            let Some(port) = ports.iter().find(|p| p.port == number) else {
                problems.push(format!(
                    "annotation {}: {entry:?} names port {number}, which the Service does not have; accepted: {FORMS}",
                    full_name("protocol-port")
                ));
                continue;
            };
            let udp_port = port.protocol == "UDP";
            if udp_port != (protocol == ListenerProtocol::Udp) {
                problems.push(format!(
                    "annotation {}: {entry:?}: port {number} is {}; accepted: {} on it",
                    full_name("protocol-port"),
                    if udp_port { "UDP" } else { "TCP" },
                    if udp_port {
                        "udp"
                    } else {
                        "http, https or tcp"
                    },
                ));
                continue;
            }
            if protocol == ListenerProtocol::Https && certificate_id.is_none() {
                problems.push(format!(
                    "annotation {}: {entry:?} needs {} (the id of the server certificate the HTTPS listener serves)",
                    full_name("protocol-port"),
                    full_name("cert-id")
                ));
                continue;
            }
            by_port.insert(number, protocol);
        }
    }
    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    Ok(ListenerProtocols {
        by_port,
        certificate_id,
    })
}

/// How long a terminating pod's backend stays at weight 0 before it is removed: the
/// load balancer's connection drain when the Service turns it on (removing the backend
/// earlier would cut the connections the drain keeps), else `default`
/// (`--gate-drain-time`). The pod's grace period still ends it earlier
/// (`plan::removal_time`).
pub fn drain_time(settings: &ListenerSettings, default: Duration) -> Duration {
    match settings.drain {
        Some(ConnectionDrain {
            enabled: true,
            timeout_seconds: Some(seconds),
        }) => Duration::from_secs(seconds.into()),
        _ => default,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (full_name(k), v.to_string()))
            .collect()
    }

    #[test]
    fn additional_resource_tags_take_the_documented_form_and_the_api_limits() {
        let tags =
            |v: &str| additional_resource_tags(&annotations(&[("additional-resource-tags", v)]));
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
        assert!(
            not_acted_on(&annotations(&[("vswitch-id", "vsw-1")]), Some(Product::Clb)).is_empty()
        );
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
        let alone =
            listener_settings(&annotations(&[("connection-drain-timeout", "30")])).unwrap_err();
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
        let readme = include_str!("../../docs/configuration.md");
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
}
