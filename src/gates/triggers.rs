//! Which Services a pod event concerns (the controller's trigger mapping): those its
//! gates name and those whose selectors match it. Reads the shared Service store; sends
//! nothing and writes nothing, so each mapping is a plain function of the pod and the
//! store.
use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::ResourceExt;

use super::pods::{gated_services, has_gate, selected_by};
use crate::object::{CachedPod, PodFacts};

/// The Services to reconcile for a created or updated pod, and whether one of its
/// gates names a Service the store does not hold (for the orphan worker).
pub fn for_changed_pod(
    pod: &CachedPod,
    services: &Store<Service>,
) -> (Vec<ObjectRef<Service>>, bool) {
    let ns = pod.namespace().unwrap_or_default();
    let mut refs: Vec<ObjectRef<Service>> = vec![];
    let mut names_a_missing_service = false;
    for name in gated_services(pod) {
        let key = ObjectRef::new(name).within(&ns);
        if services.get(&key).is_none() {
            names_a_missing_service = true;
        }
        refs.push(key);
    }
    for svc in services.state() {
        if selected_by(pod, &svc) && !refs.iter().any(|r| r.name == svc.name_any()) {
            refs.push(ObjectRef::from_obj(&*svc));
        }
    }
    (refs, names_a_missing_service)
}

/// The Services to reconcile for a deleted pod: its backend goes at once, not at the
/// next poll.
pub fn for_deleted_pod(pod: &CachedPod, services: &Store<Service>) -> Vec<ObjectRef<Service>> {
    let ns = pod.pod_namespace();
    services
        .state()
        .into_iter()
        .filter(|svc| selected_by(pod, svc) || has_gate(pod, &svc.name_any()))
        .filter(|svc| svc.namespace().as_deref() == Some(ns))
        .map(|svc| ObjectRef::from_obj(&*svc))
        .collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Pod, PodReadinessGate, ServiceSpec};
    use kube::api::ObjectMeta;

    use super::*;
    use crate::gates::model::gate_condition_type;
    use crate::testkit::{store_of, DaemonSetBuilder, PodBuilder};

    fn service(ns: &str, name: &str, selector: &[(&str, &str)]) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                selector: Some(
                    selector
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            }),
            status: None,
        }
    }

    /// A pod in `default` (the builder's namespace) labelled `app=web`, gated on `gates`.
    fn pod(gates: &[&str]) -> CachedPod {
        let ds = DaemonSetBuilder::new("web").build();
        let mut pod: Pod = PodBuilder::new("web-1", &ds).on_node("n1").build();
        pod.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
        pod.spec.as_mut().unwrap().readiness_gates = Some(
            gates
                .iter()
                .map(|s| PodReadinessGate {
                    condition_type: gate_condition_type(s),
                })
                .collect(),
        );
        CachedPod::from(pod)
    }

    fn names(refs: &[ObjectRef<Service>]) -> Vec<String> {
        let mut names: Vec<String> = refs
            .iter()
            .map(|r| format!("{}/{}", r.namespace.clone().unwrap_or_default(), r.name))
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_changed_pod_maps_to_its_gates_and_the_selectors_that_match_it_once_each() {
        let ns = pod(&[]).namespace().unwrap();
        let services = store_of([
            service(&ns, "gated-and-selecting", &[("app", "web")]),
            service(&ns, "selecting", &[("app", "web")]),
            service(&ns, "other", &[("app", "db")]),
            service("elsewhere", "selecting-elsewhere", &[("app", "web")]),
        ]);
        let (refs, missing) = for_changed_pod(&pod(&["gated-and-selecting"]), &services);
        assert_eq!(
            names(&refs),
            [
                format!("{ns}/gated-and-selecting"),
                format!("{ns}/selecting")
            ]
        );
        assert!(!missing);
    }

    #[test]
    fn a_gate_naming_a_service_not_in_the_store_is_reported_and_still_triggers() {
        let ns = pod(&[]).namespace().unwrap();
        let services = store_of([service(&ns, "web", &[("app", "db")])]);
        let (refs, missing) = for_changed_pod(&pod(&["web", "gone"]), &services);
        assert_eq!(names(&refs), [format!("{ns}/gone"), format!("{ns}/web")]);
        assert!(missing);
        let (_, missing) = for_changed_pod(&pod(&["web"]), &services);
        assert!(!missing);
    }

    #[test]
    fn a_deleted_pod_maps_to_the_services_of_its_namespace_that_select_or_gate_it() {
        let ns = pod(&[]).namespace().unwrap();
        let services = store_of([
            service(&ns, "gated", &[("app", "db")]),
            service(&ns, "selecting", &[("app", "web")]),
            service(&ns, "other", &[("app", "db")]),
            service("elsewhere", "gated", &[("app", "web")]),
        ]);
        let refs = for_deleted_pod(&pod(&["gated"]), &services);
        assert_eq!(
            names(&refs),
            [format!("{ns}/gated"), format!("{ns}/selecting")]
        );
    }
}
