//! The injection decision, pure: which readiness gates a pod being created gets, as the
//! JSON patch (RFC 6902) of the admission answer.
//!
//! A pod gets `service.readiness.alibabacloud.com/<svc>` for every Service rollgate
//! manages (its load-balancer classes: `service::product_for`, the gates controller's
//! own predicate) in the pod's namespace whose selector matches the pod's labels, when
//! its namespace opted in and the pod did not opt out.
use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Service;
use serde_json::{json, Value};

use crate::gates::service::{product_for, selector, selects, ClassSelection};
use crate::names::{
    GATE_INJECT_DISABLED, GATE_INJECT_ENABLED, GATE_INJECT_LABEL, GATE_PREFIX,
    KUBE_SYSTEM_NAMESPACE,
};
use crate::object::PodFacts;

/// What does not change between admissions: rollgate's own namespace and the Services
/// it manages.
#[derive(Clone, Debug)]
pub struct Scope {
    /// rollgate's own namespace: its pods must start whatever the webhook does.
    pub own_namespace: String,
    pub classes: ClassSelection,
}

/// Why a pod is left as it is, without looking at the Services.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// rollgate's own namespace or kube-system.
    ProtectedNamespace,
    /// The namespace is not labelled `rollgate.io/readiness-gate-inject: enabled`.
    NamespaceNotEnabled,
    /// The pod is labelled `rollgate.io/readiness-gate-inject: disabled`.
    PodOptedOut,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    Skipped(Skip),
    /// No managed Service selects the pod, or it carries every gate already.
    NothingToAdd,
    /// The gates to add (sorted), and the patch that adds them.
    Inject {
        gates: Vec<String>,
        patch: Value,
    },
}

impl Decision {
    /// The `result` label of `rollgate_gate_injections_total`.
    pub fn result_label(&self) -> &'static str {
        match self {
            Decision::Skipped(Skip::ProtectedNamespace) => "protected_namespace",
            Decision::Skipped(Skip::NamespaceNotEnabled) => "namespace_not_enabled",
            Decision::Skipped(Skip::PodOptedOut) => "pod_opted_out",
            Decision::NothingToAdd => "nothing_to_add",
            Decision::Inject { .. } => "injected",
        }
    }
}

/// The gates `pod`, created in `namespace` (the admission request's: a pod of a
/// Deployment has none of its own yet), gets. `namespace_labels` is `None` for a
/// namespace not known (yet); `services` may hold other namespaces' Services.
pub fn decide<'s>(
    pod: &impl PodFacts,
    namespace: &str,
    namespace_labels: Option<&BTreeMap<String, String>>,
    services: impl IntoIterator<Item = &'s Service>,
    scope: &Scope,
) -> Decision {
    if namespace == scope.own_namespace || namespace == KUBE_SYSTEM_NAMESPACE {
        return Decision::Skipped(Skip::ProtectedNamespace);
    }
    let enabled = namespace_labels
        .and_then(|labels| labels.get(GATE_INJECT_LABEL))
        .is_some_and(|v| v == GATE_INJECT_ENABLED);
    if !enabled {
        return Decision::Skipped(Skip::NamespaceNotEnabled);
    }
    if pod.label(GATE_INJECT_LABEL) == Some(GATE_INJECT_DISABLED) {
        return Decision::Skipped(Skip::PodOptedOut);
    }
    let empty = BTreeMap::new();
    let labels = pod.metadata().labels.as_ref().unwrap_or(&empty);
    let present: BTreeSet<&str> = pod.readiness_gates().collect();
    let gates: BTreeSet<String> = services
        .into_iter()
        .filter(|s| s.metadata.namespace.as_deref() == Some(namespace))
        // A Service on its way out would leave a gate nobody turns True.
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .filter(|s| product_for(s, scope.classes).is_some())
        .filter(|s| selects(selector(s), labels))
        .filter_map(|s| s.metadata.name.as_deref())
        .map(|name| format!("{GATE_PREFIX}{name}"))
        .filter(|gate| !present.contains(gate.as_str()))
        .collect();
    if gates.is_empty() {
        return Decision::NothingToAdd;
    }
    let gates: Vec<String> = gates.into_iter().collect();
    let patch = patch_adding(!present.is_empty(), &gates);
    Decision::Inject { gates, patch }
}

/// RFC 6902 operations adding `gates` to `spec.readinessGates`: the whole list when the
/// pod has no gate (a path into an absent list does not apply; an empty one is
/// replaced, as `add` does to a member that exists), else one append each.
fn patch_adding(has_gates: bool, gates: &[String]) -> Value {
    let entry = |gate: &String| json!({ "conditionType": gate });
    if has_gates {
        Value::Array(
            gates
                .iter()
                .map(|g| json!({"op": "add", "path": "/spec/readinessGates/-", "value": entry(g)}))
                .collect(),
        )
    } else {
        json!([{
            "op": "add",
            "path": "/spec/readinessGates",
            "value": gates.iter().map(entry).collect::<Vec<_>>(),
        }])
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Pod, PodReadinessGate, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    use super::*;
    use crate::names::NLB_CLASS;
    use crate::testkit::{at, service};

    const NS: &str = "shop";

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn enabled() -> BTreeMap<String, String> {
        labels(&[(GATE_INJECT_LABEL, GATE_INJECT_ENABLED)])
    }

    fn pod(pod_labels: &[(&str, &str)], gates: Option<&[&str]>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                generate_name: Some("web-".into()),
                labels: Some(labels(pod_labels)),
                ..Default::default()
            },
            spec: Some(PodSpec {
                readiness_gates: gates.map(|gates| {
                    gates
                        .iter()
                        .map(|g| PodReadinessGate {
                            condition_type: g.to_string(),
                        })
                        .collect()
                }),
                ..Default::default()
            }),
            status: None,
        }
    }

    /// A LoadBalancer Service (no class: CLB under the standard selection) selecting
    /// `app=<app>`.
    fn lb(namespace: &str, name: &str, app: Option<&str>) -> Service {
        let mut s = service(namespace, name, "LoadBalancer", &[]);
        s.spec.as_mut().unwrap().selector = app.map(|a| labels(&[("app", a)]));
        s
    }

    fn scope() -> Scope {
        Scope {
            own_namespace: "rollgate-system".into(),
            classes: ClassSelection::Standard,
        }
    }

    fn gate(svc: &str) -> String {
        format!("{GATE_PREFIX}{svc}")
    }

    fn injected(decision: &Decision) -> Vec<String> {
        match decision {
            Decision::Inject { gates, .. } => gates.clone(),
            _ => Vec::new(),
        }
    }

    #[test]
    fn a_pod_in_an_enabled_namespace_gets_a_gate_per_managed_service_that_selects_it() {
        let services = [
            lb(NS, "web-public", Some("web")),
            lb(NS, "web-internal", Some("web")),
            lb(NS, "api", Some("api")),
        ];
        let decision = decide(
            &pod(&[("app", "web")], None),
            NS,
            Some(&enabled()),
            &services,
            &scope(),
        );
        assert_eq!(
            injected(&decision),
            vec![gate("web-internal"), gate("web-public")]
        );
        assert_eq!(decision.result_label(), "injected");
    }

    #[test]
    fn the_patch_adds_the_list_when_the_pod_has_none_and_appends_when_it_has_one() {
        let services = [lb(NS, "a", Some("web")), lb(NS, "b", Some("web"))];
        let none = decide(
            &pod(&[("app", "web")], None),
            NS,
            Some(&enabled()),
            &services,
            &scope(),
        );
        let Decision::Inject { patch, .. } = none else {
            panic!("{none:?}")
        };
        assert_eq!(
            patch,
            json!([{"op": "add", "path": "/spec/readinessGates", "value": [
                {"conditionType": gate("a")}, {"conditionType": gate("b")}]}])
        );

        // An empty list is replaced by the whole one.
        let empty = decide(
            &pod(&[("app", "web")], Some(&[])),
            NS,
            Some(&enabled()),
            &services,
            &scope(),
        );
        let Decision::Inject { patch, .. } = empty else {
            panic!("{empty:?}")
        };
        assert_eq!(patch[0]["path"], "/spec/readinessGates");

        let other = decide(
            &pod(&[("app", "web")], Some(&["example.com/other"])),
            NS,
            Some(&enabled()),
            &services,
            &scope(),
        );
        let Decision::Inject { patch, .. } = other else {
            panic!("{other:?}")
        };
        assert_eq!(
            patch,
            json!([
                {"op": "add", "path": "/spec/readinessGates/-", "value": {"conditionType": gate("a")}},
                {"op": "add", "path": "/spec/readinessGates/-", "value": {"conditionType": gate("b")}},
            ])
        );
    }

    #[test]
    fn gates_already_present_are_not_added_again() {
        let services = [lb(NS, "a", Some("web")), lb(NS, "b", Some("web"))];
        let a = gate("a");
        let partly = decide(
            &pod(&[("app", "web")], Some(&[a.as_str()])),
            NS,
            Some(&enabled()),
            &services,
            &scope(),
        );
        assert_eq!(injected(&partly), vec![gate("b")]);
        let b = gate("b");
        let all = decide(
            &pod(&[("app", "web")], Some(&[b.as_str(), a.as_str()])),
            NS,
            Some(&enabled()),
            &services,
            &scope(),
        );
        assert_eq!(all, Decision::NothingToAdd);
    }

    #[test]
    fn only_namespaces_labelled_enabled_are_injected_into() {
        let services = [lb(NS, "a", Some("web"))];
        let web = pod(&[("app", "web")], None);
        for (namespace_labels, want) in [
            (None, Decision::Skipped(Skip::NamespaceNotEnabled)),
            (
                Some(labels(&[])),
                Decision::Skipped(Skip::NamespaceNotEnabled),
            ),
            (
                Some(labels(&[(GATE_INJECT_LABEL, "disabled")])),
                Decision::Skipped(Skip::NamespaceNotEnabled),
            ),
            (
                Some(labels(&[(GATE_INJECT_LABEL, "Enabled")])),
                Decision::Skipped(Skip::NamespaceNotEnabled),
            ),
        ] {
            assert_eq!(
                decide(&web, NS, namespace_labels.as_ref(), &services, &scope()),
                want,
                "{namespace_labels:?}"
            );
        }
        assert_eq!(
            injected(&decide(&web, NS, Some(&enabled()), &services, &scope())),
            vec![gate("a")]
        );
    }

    #[test]
    fn a_pod_labelled_disabled_is_left_alone() {
        let services = [lb(NS, "a", Some("web"))];
        let opted_out = pod(&[("app", "web"), (GATE_INJECT_LABEL, "disabled")], None);
        let decision = decide(&opted_out, NS, Some(&enabled()), &services, &scope());
        assert_eq!(decision, Decision::Skipped(Skip::PodOptedOut));
        assert_eq!(decision.result_label(), "pod_opted_out");
        // Any other value of the label on a pod is no opt-out.
        let other = pod(&[("app", "web"), (GATE_INJECT_LABEL, "enabled")], None);
        assert_eq!(
            injected(&decide(&other, NS, Some(&enabled()), &services, &scope())),
            vec![gate("a")]
        );
    }

    #[test]
    fn rollgates_own_namespace_and_kube_system_are_never_injected_into() {
        for namespace in ["rollgate-system", "kube-system"] {
            let services = [lb(namespace, "a", Some("web"))];
            assert_eq!(
                decide(
                    &pod(&[("app", "web")], None),
                    namespace,
                    Some(&enabled()),
                    &services,
                    &scope()
                ),
                Decision::Skipped(Skip::ProtectedNamespace),
                "{namespace}"
            );
        }
    }

    #[test]
    fn a_service_without_a_selector_or_with_an_empty_one_selects_nothing() {
        let mut empty = lb(NS, "empty", None);
        empty.spec.as_mut().unwrap().selector = Some(BTreeMap::new());
        let services = [lb(NS, "absent", None), empty];
        assert_eq!(
            decide(
                &pod(&[("app", "web")], None),
                NS,
                Some(&enabled()),
                &services,
                &scope()
            ),
            Decision::NothingToAdd
        );
    }

    #[test]
    fn only_services_rollgate_manages_in_the_pods_namespace_give_gates() {
        let mut cluster_ip = lb(NS, "cluster-ip", Some("web"));
        cluster_ip.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
        let mut nlb = lb(NS, "nlb", Some("web"));
        nlb.spec.as_mut().unwrap().load_balancer_class = Some(NLB_CLASS.into());
        let mut foreign = lb(NS, "foreign", Some("web"));
        foreign.spec.as_mut().unwrap().load_balancer_class = Some("example.com/lb".into());
        let mut leaving = lb(NS, "leaving", Some("web"));
        leaving.metadata.deletion_timestamp = Some(Time(at(1)));
        let services = [
            cluster_ip,
            nlb,
            foreign,
            leaving,
            lb("elsewhere", "other-namespace", Some("web")),
            lb(NS, "other-app", Some("api")),
        ];
        let web = pod(&[("app", "web"), ("tier", "front")], None);
        assert_eq!(
            injected(&decide(&web, NS, Some(&enabled()), &services, &scope())),
            vec![gate("nlb")]
        );
        // Beside Alibaba's cloud controller rollgate takes only its own classes.
        let own_classes = Scope {
            classes: ClassSelection::Rollgate,
            ..scope()
        };
        assert_eq!(
            decide(&web, NS, Some(&enabled()), &services, &own_classes),
            Decision::NothingToAdd
        );
    }
}
