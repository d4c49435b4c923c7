//! Which nodes should run a DaemonSet's pod: the pod template's node selector, required
//! node affinity and tolerations, matched against a Node's labels, name and taints.
//!
//! The planner needs this for two cases. A Ready node that shows no pod of the
//! DaemonSet: if the DaemonSet should run there, the node is vacated (its old pod gone,
//! the replacement not created yet) and counts against the budget. Getting this wrong in
//! the "should not run" direction only matters after a restart, because rollgate also
//! remembers the nodes it vacated itself. And a Ready node with an old pod where the
//! DaemonSet no longer places one: the pod is kept (the native controller would not
//! recreate it).
//!
//! Mirrors the native DaemonSet controller's rules: NoSchedule and NoExecute taints must
//! be tolerated (PreferNoSchedule never blocks), and the tolerations that controller adds
//! to every DaemonSet pod are added here too.

use std::sync::LazyLock;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    NodeSelectorRequirement, NodeSelectorTerm, PodSpec, Taint, Toleration,
};

use crate::object::NodeFacts;

/// Tolerations the native DaemonSet controller adds to every pod it creates, as
/// (key, effect). `network-unavailable` is added for hostNetwork pods only.
const DAEMONSET_DEFAULT_TOLERATIONS: [(&str, &str); 6] = [
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
];
const HOST_NETWORK_TOLERATION: (&str, &str) =
    ("node.kubernetes.io/network-unavailable", "NoSchedule");

/// The tolerations the native DaemonSet controller adds to every pod it creates.
pub fn daemonset_default_tolerations(host_network: bool) -> Vec<Toleration> {
    DAEMONSET_DEFAULT_TOLERATIONS
        .iter()
        .chain(host_network.then_some(&HOST_NETWORK_TOLERATION))
        .map(|(key, effect)| Toleration {
            key: Some(key.to_string()),
            operator: Some("Exists".into()),
            effect: Some(effect.to_string()),
            ..Default::default()
        })
        .collect()
}

/// Whether the DaemonSet's pod template places a pod on `node`.
pub fn should_run_on(daemonset: &DaemonSet, node: &impl NodeFacts) -> bool {
    // A template without a spec places like an empty one (real templates always have one).
    // Made once: a `PodSpec` is 1.5 kB to build and drop, and a plan asks this of every
    // node with an old pod.
    static EMPTY: LazyLock<PodSpec> = LazyLock::new(PodSpec::default);
    let spec = daemonset.spec.template.spec.as_ref().unwrap_or(&EMPTY);
    let node_name = node.name();
    if let Some(pinned) = spec.node_name.as_deref().filter(|n| !n.is_empty()) {
        if pinned != node_name {
            return false;
        }
    }
    matches_node_selector(spec, node)
        && matches_required_affinity(spec, node)
        && tolerates_taints(spec, node)
}

fn node_label<'a>(node: &'a impl NodeFacts, key: &str) -> Option<&'a str> {
    node.label(key)
}

fn matches_node_selector(spec: &PodSpec, node: &impl NodeFacts) -> bool {
    spec.node_selector
        .iter()
        .flatten()
        .all(|(key, value)| node_label(node, key) == Some(value.as_str()))
}

/// Required node affinity: at least one term matches (an empty list matches nothing,
/// as in the scheduler; an absent selector matches everything).
fn matches_required_affinity(spec: &PodSpec, node: &impl NodeFacts) -> bool {
    let Some(selector) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
    else {
        return true;
    };
    selector
        .node_selector_terms
        .iter()
        .any(|term| term_matches(term, node))
}

fn term_matches(term: &NodeSelectorTerm, node: &impl NodeFacts) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    // A term with no requirement at all matches no node (scheduler semantics).
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    expressions
        .iter()
        .all(|r| requirement_matches(r, node_label(node, &r.key)))
        // `metadata.name` is the only field a node selector may name.
        && fields.iter().all(|r| {
            r.key == "metadata.name" && requirement_matches(r, node.metadata().name.as_deref())
        })
}

fn requirement_matches(requirement: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = requirement.values.as_deref().unwrap_or_default();
    let number = |s: &str| s.parse::<i64>().ok();
    match requirement.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| values.iter().all(|x| x != v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(have), Some(bound)) = (
                value.and_then(number),
                values.first().and_then(|b| number(b)),
            ) else {
                return false;
            };
            if requirement.operator == "Gt" {
                have > bound
            } else {
                have < bound
            }
        }
        // An operator the API server would have rejected: match nothing.
        _ => false,
    }
}

fn tolerates_taints(spec: &PodSpec, node: &impl NodeFacts) -> bool {
    let tolerations = spec.tolerations.as_deref().unwrap_or_default();
    let host_network = spec.host_network == Some(true);
    node.taints()
        .iter()
        .filter(|taint| taint.effect == "NoSchedule" || taint.effect == "NoExecute")
        .all(|taint| {
            tolerations.iter().any(|t| tolerates(t, taint))
                || DAEMONSET_DEFAULT_TOLERATIONS
                    .iter()
                    .chain(host_network.then_some(&HOST_NETWORK_TOLERATION))
                    .any(|(key, effect)| taint.key == *key && taint.effect == *effect)
        })
}

/// Kubernetes' toleration rule: an empty key with `Exists` matches every taint; an empty
/// effect matches every effect; `Equal` (the default operator) compares values.
fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect_ok = toleration
        .effect
        .as_deref()
        .is_none_or(|e| e.is_empty() || e == taint.effect);
    let key = toleration.key.as_deref().unwrap_or_default();
    let operator = toleration.operator.as_deref().unwrap_or("Equal");
    if !effect_ok {
        return false;
    }
    if key.is_empty() {
        return operator == "Exists";
    }
    if key != taint.key {
        return false;
    }
    match operator {
        "Exists" => true,
        "Equal" => {
            toleration.value.as_deref().unwrap_or_default()
                == taint.value.as_deref().unwrap_or_default()
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{labelled_node as labelled, node, tainted, DaemonSetBuilder};
    use k8s_openapi::api::core::v1::{Affinity, NodeAffinity, NodeSelector};
    use std::collections::BTreeMap;

    fn unreachable_taint() -> Taint {
        Taint {
            key: "node.kubernetes.io/unreachable".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_plain_daemonset_runs_on_untainted_nodes_only() {
        let ds = DaemonSetBuilder::new("agent").build();
        assert!(should_run_on(&ds, &node("n1", true)));
        assert!(!should_run_on(
            &ds,
            &tainted(node("n1", false), unreachable_taint())
        ));
    }

    #[test]
    fn tolerate_everything_runs_on_tainted_nodes() {
        let ds = DaemonSetBuilder::new("agent").tolerate_everything().build();
        assert!(should_run_on(
            &ds,
            &tainted(node("n1", false), unreachable_taint())
        ));
        let dedicated = Taint {
            key: "dedicated".into(),
            value: Some("gpu".into()),
            effect: "NoExecute".into(),
            ..Default::default()
        };
        assert!(should_run_on(&ds, &tainted(node("n1", true), dedicated)));
    }

    #[test]
    fn prefer_no_schedule_and_default_tolerations_never_block() {
        let ds = DaemonSetBuilder::new("agent").build();
        let soft = Taint {
            key: "spot".into(),
            effect: "PreferNoSchedule".into(),
            ..Default::default()
        };
        assert!(should_run_on(&ds, &tainted(node("n1", true), soft)));
        let pressure = Taint {
            key: "node.kubernetes.io/disk-pressure".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        assert!(should_run_on(&ds, &tainted(node("n1", true), pressure)));
    }

    #[test]
    fn keyed_toleration_compares_values_and_effects() {
        let taint = Taint {
            key: "dedicated".into(),
            value: Some("edge".into()),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        let toleration = |value: &str, effect: Option<&str>| Toleration {
            key: Some("dedicated".into()),
            operator: Some("Equal".into()),
            value: Some(value.into()),
            effect: effect.map(str::to_string),
            ..Default::default()
        };
        assert!(tolerates(&toleration("edge", None), &taint));
        assert!(tolerates(&toleration("edge", Some("NoSchedule")), &taint));
        assert!(!tolerates(&toleration("edge", Some("NoExecute")), &taint));
        assert!(!tolerates(&toleration("cloud", None), &taint));
    }

    #[test]
    fn node_selector_and_required_affinity() {
        let mut ds = DaemonSetBuilder::new("agent").build();
        let spec = ds.spec.template.spec.get_or_insert_with(Default::default);
        spec.node_selector = Some(BTreeMap::from([("pool".into(), "edge".into())]));
        spec.affinity = Some(Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![NodeSelectorRequirement {
                            key: "zone".into(),
                            operator: "NotIn".into(),
                            values: Some(vec!["cloud".into()]),
                        }]),
                        match_fields: None,
                    }],
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert!(should_run_on(&ds, &labelled("a", &[("pool", "edge")])));
        assert!(should_run_on(
            &ds,
            &labelled("b", &[("pool", "edge"), ("zone", "z1")])
        ));
        assert!(!should_run_on(
            &ds,
            &labelled("c", &[("pool", "edge"), ("zone", "cloud")])
        ));
        assert!(!should_run_on(&ds, &labelled("d", &[("pool", "core")])));
    }

    #[test]
    fn numeric_and_field_requirements() {
        let gt = NodeSelectorRequirement {
            key: "cores".into(),
            operator: "Gt".into(),
            values: Some(vec!["4".into()]),
        };
        assert!(requirement_matches(&gt, Some("8")));
        assert!(!requirement_matches(&gt, Some("4")));
        assert!(!requirement_matches(&gt, Some("many")));
        let by_name = NodeSelectorTerm {
            match_expressions: None,
            match_fields: Some(vec![NodeSelectorRequirement {
                key: "metadata.name".into(),
                operator: "In".into(),
                values: Some(vec!["n1".into()]),
            }]),
        };
        assert!(term_matches(&by_name, &node("n1", true)));
        assert!(!term_matches(&by_name, &node("n2", true)));
        assert!(!term_matches(
            &NodeSelectorTerm::default(),
            &node("n1", true)
        ));
    }
}
