//! The whole annotation family of Alibaba's cloud controller, each marked supported,
//! not yet, or not applicable, and the sentence a Service hears about each annotation
//! rollgate does not act on (unknown ones, ones its product has no use for, a `spec`
//! a pay-by-CLCU instance does not apply).
use std::collections::BTreeMap;

use alibaba_lb::Product;

use super::read::{full_name, get};
use crate::names::LOAD_BALANCER_ANNOTATION_PREFIXES;

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
