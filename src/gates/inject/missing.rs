//! The pods that should carry injected gates and do not: in an opted-in namespace,
//! selected by a Service rollgate manages, without its gate. A pod created while no
//! replica answered is one (the API server let it through: `failurePolicy: Ignore`), as
//! is one created before its Service or before its namespace's label. Counted from the
//! shared stores (the same decision as an admission's), so an alert finds them.
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::Store;

use super::plan::{decide, Decision, Scope};
use crate::object::{CachedPod, PodFacts};
use crate::watch::{for_each_in, NamespaceLabels};

/// How many live pods the webhook would give a gate they lack.
pub fn count_missing(
    pods: &Store<CachedPod>,
    namespaces: &Store<NamespaceLabels>,
    services: &Store<Service>,
    scope: &Scope,
) -> usize {
    // Each namespace's labels and Services once, not once per pod.
    let mut labels: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for_each_in(namespaces, |namespace| {
        if let (Some(name), Some(l)) = (&namespace.metadata.name, &namespace.metadata.labels) {
            labels.insert(name.clone(), l.clone());
        }
    });
    let mut by_namespace: BTreeMap<String, Vec<Service>> = BTreeMap::new();
    for_each_in(services, |service| {
        if let Some(namespace) = &service.metadata.namespace {
            by_namespace
                .entry(namespace.clone())
                .or_default()
                .push(service.clone());
        }
    });
    let mut missing = 0;
    for_each_in(pods, |pod| {
        let namespace = pod.pod_namespace();
        let Some(services) = by_namespace.get(namespace) else {
            return;
        };
        if pod.is_terminating() {
            return;
        }
        let decision = decide(pod, namespace, labels.get(namespace), services, scope);
        if matches!(decision, Decision::Inject { .. }) {
            missing += 1;
        }
    });
    missing
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Pod, PodReadinessGate, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use kube::core::PartialObjectMeta;

    use super::*;
    use crate::gates::service::ClassSelection;
    use crate::names::{GATE_INJECT_ENABLED, GATE_INJECT_LABEL, GATE_PREFIX};
    use crate::testkit::{at, service, store_of};

    fn namespace(name: &str, enabled: bool) -> NamespaceLabels {
        let mut n: NamespaceLabels = PartialObjectMeta::default();
        n.metadata.name = Some(name.into());
        if enabled {
            n.metadata.labels = Some(BTreeMap::from([(
                GATE_INJECT_LABEL.into(),
                GATE_INJECT_ENABLED.into(),
            )]));
        }
        n
    }

    fn pod(namespace: &str, name: &str, gates: &[&str]) -> CachedPod {
        CachedPod::from(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(namespace.into()),
                uid: Some(format!("uid-{namespace}-{name}")),
                labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                ..Default::default()
            },
            spec: Some(PodSpec {
                readiness_gates: Some(
                    gates
                        .iter()
                        .map(|g| PodReadinessGate {
                            condition_type: format!("{GATE_PREFIX}{g}"),
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            status: None,
        })
    }

    #[test]
    fn only_live_pods_of_opted_in_namespaces_lacking_a_managed_services_gate_count() {
        let mut web = service("shop", "web", "LoadBalancer", &[]);
        web.spec.as_mut().unwrap().selector = Some(BTreeMap::from([("app".into(), "web".into())]));
        let mut elsewhere = web.clone();
        elsewhere.metadata.namespace = Some("plain".into());
        let mut leaving = pod("shop", "leaving", &[]);
        leaving.metadata.deletion_timestamp = Some(Time(at(1)));
        let pods = store_of([
            pod("shop", "created-while-down", &[]),
            pod("shop", "injected", &["web"]),
            leaving,
            pod("plain", "not-opted-in", &[]),
        ]);
        let count = count_missing(
            &pods,
            &store_of([namespace("shop", true), namespace("plain", false)]),
            &store_of([web, elsewhere]),
            &Scope {
                own_namespace: "rollgate-system".into(),
                classes: ClassSelection::Standard,
            },
        );
        assert_eq!(count, 1);
    }
}
