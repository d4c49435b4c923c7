//! Which Services a pod event concerns (the controller's trigger mapping): those its
//! gates name and those whose selectors match it. Reads the shared Service store; sends
//! nothing and writes nothing, so each mapping is a plain function of the pod and the
//! store.
//!
//! Also which pod updates concern the gates at all ([`no_news_to_the_plan`]): an update
//! that changes nothing the plan reads (a status heartbeat, an annotation, the message
//! or transition time of rollgate's own gate condition) triggers nothing, and neither
//! does the echo of rollgate's own gate write. The watch's
//! change carries the pod before and after, so no per-pod memory is kept here (nothing
//! to leak when a pod goes).
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::ResourceExt;

use super::model::service_of_gate;
use super::pods::{gated_services, has_gate, selected_by};
use crate::object::{CachedPod, PodFacts, PortView};

/// Everything of a pod that the gates read: which Services it concerns (labels for the
/// selectors, readiness gates), what the plan decides from (IP, node, ECI instance,
/// container ports, ContainersReady, deletion, each gate's status) and what the flip
/// histogram reads (when ContainersReady turned). Borrowed, so comparing two costs no
/// allocation beyond the label maps' iteration.
#[derive(Debug, PartialEq)]
struct PlanView<'a> {
    namespace: &'a str,
    uid: &'a str,
    labels: Option<&'a BTreeMap<String, String>>,
    readiness_gates: Vec<&'a str>,
    ip: Option<&'a str>,
    node: Option<&'a str>,
    eci_instance: Option<&'a str>,
    ports: Vec<PortView<'a>>,
    containers_ready: Option<(&'a str, Option<&'a Time>)>,
    deletion: (Option<&'a Time>, Option<i64>),
    /// Gate condition type and status only: rollgate's own writes that change only a
    /// gate's reason, message or transition time are no news to the plan (it wrote
    /// them); a status change (ours when a gate flips, or anyone's) re-plans, at no
    /// cloud cost when the last reading is fresh (`Cloud::reading`).
    gates: Vec<(&'a str, &'a str)>,
}

fn plan_view(pod: &CachedPod) -> PlanView<'_> {
    let meta = pod.metadata();
    PlanView {
        namespace: pod.pod_namespace(),
        uid: pod.pod_uid(),
        labels: meta.labels.as_ref(),
        readiness_gates: pod.readiness_gates().collect(),
        ip: pod.pod_ip(),
        node: pod.node_name(),
        eci_instance: pod.eci_instance_id.as_deref(),
        ports: pod.container_ports().collect(),
        containers_ready: pod
            .condition("ContainersReady")
            .map(|c| (c.status, c.last_transition_time)),
        deletion: (
            meta.deletion_timestamp.as_ref(),
            meta.deletion_grace_period_seconds,
        ),
        gates: pod
            .conditions()
            .filter(|c| service_of_gate(c.type_).is_some())
            .map(|c| (c.type_, c.status))
            .collect(),
    }
}

/// Whether an update of a pod brings the gates' plan nothing new (so it triggers no
/// reconcile): the plan reads the same from both states, or the only news is gate
/// statuses that rollgate itself wrote last (`written(uid, condition type)`: the status of its last write
/// there, if remembered): the echo of its own write, which the plan decided already.
/// Re-planning on each echo cost one reconcile per flip once the writes stopped
/// holding the reconcile (`conditions::send_conditions`): 500 flips, 500 plans over
/// 500 pods, a core's second taken from the API server the flips wait on. A gate
/// removed, or set to what rollgate did not write last, still re-plans.
pub fn no_news_to_the_plan(
    before: &CachedPod,
    after: &CachedPod,
    written: impl Fn(&str, &str) -> Option<bool>,
) -> bool {
    let (mut was, mut is) = (plan_view(before), plan_view(after));
    if was == is {
        return true;
    }
    let (gates_before, gates_after) = (
        std::mem::take(&mut was.gates),
        std::mem::take(&mut is.gates),
    );
    let none_removed = gates_before
        .iter()
        .all(|(type_, _)| gates_after.iter().any(|(t, _)| t == type_));
    was == is
        && none_removed
        && gates_after
            .iter()
            .filter(|gate| !gates_before.contains(gate))
            .all(|(type_, status)| written(is.uid, type_) == Some(*status == "True"))
}

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

    /// A gated, ready, serving pod as the store holds it.
    fn serving() -> CachedPod {
        use crate::object::pod::{CachedCondition, CachedContainer, CachedPort};
        let mut pod = pod(&["web"]);
        pod.pod_ip = Some("10.0.0.7".into());
        pod.containers = [CachedContainer {
            name: "app".into(),
            image: Some("web:1".into()),
            ports: [CachedPort {
                name: Some("http".into()),
                container_port: 8080,
                protocol: Some("TCP".into()),
            }]
            .into(),
        }]
        .into();
        let condition = |type_: String, status: &'static str, message: &str| CachedCondition {
            type_: type_.into(),
            status: status.into(),
            reason: Some("Healthy".into()),
            message: Some(message.into()),
            last_transition_time: Some(Time(crate::testkit::at(100))),
        };
        pod.conditions = [
            condition("ContainersReady".into(), "True", ""),
            condition("Ready".into(), "True", ""),
            condition(gate_condition_type("web"), "True", "healthy on 1/1 ports"),
        ]
        .into();
        pod
    }

    fn gate(pod: &mut CachedPod) -> &mut crate::object::pod::CachedCondition {
        let type_ = gate_condition_type("web");
        pod.conditions
            .iter_mut()
            .find(|c| c.type_ == type_)
            .unwrap()
    }

    #[test]
    fn a_pod_update_triggers_only_when_something_the_plan_reads_changed() {
        type Edit = fn(&mut CachedPod);
        #[rustfmt::skip]
        let cases: [(&str, Edit, bool); 17] = [
            ("nothing", |_| {}, false),
            ("a new resourceVersion", |p| p.metadata.resource_version = Some("9".into()), false),
            ("an unrelated annotation (not even cached)", |p| p.metadata.annotations = Some([("a".to_string(), "b".to_string())].into()), false),
            ("the gate's message", |p| gate(p).message = Some("healthy on 2/2 ports".into()), false),
            ("the gate's transition time", |p| gate(p).last_transition_time = Some(Time(crate::testkit::at(200))), false),
            ("the gate's reason", |p| gate(p).reason = Some("Other".into()), false),
            ("another condition (Ready)", |p| p.conditions[1].status = "False".into(), false),
            ("the gate's status", |p| gate(p).status = "False".into(), true),
            ("the pod IP", |p| p.pod_ip = Some("10.0.0.8".into()), true),
            ("the node", |p| p.node_name = Some("n2".into()), true),
            ("the ECI instance", |p| p.eci_instance_id = Some("eci-1".into()), true),
            ("ContainersReady", |p| p.conditions[0].status = "False".into(), true),
            ("a container port", |p| p.containers[0].ports[0].container_port = 9090, true),
            ("a label (selectors)", |p| p.metadata.labels = Some([("app".to_string(), "db".to_string())].into()), true),
            ("the readiness gates", |p| p.readiness_gates = [].into(), true),
            ("deletion", |p| p.metadata.deletion_timestamp = Some(Time(crate::testkit::at(300))), true),
            ("the grace period", |p| p.metadata.deletion_grace_period_seconds = Some(5), true),
        ];
        for (case, edit, triggers) in cases {
            let before = serving();
            let mut after = serving();
            edit(&mut after);
            let nothing_written = |_: &str, _: &str| None;
            assert_eq!(
                !no_news_to_the_plan(&before, &after, nothing_written),
                triggers,
                "{case}"
            );
        }
    }

    #[test]
    fn the_echo_of_rollgates_own_gate_write_triggers_nothing_else_does() {
        let type_ = gate_condition_type("web");
        let before = serving();
        let mut flipped = serving();
        gate(&mut flipped).status = "False".into();
        let uid = before.pod_uid().to_string();
        let ours = |status: Option<bool>| {
            let (uid, type_) = (uid.clone(), type_.clone());
            move |u: &str, t: &str| (u == uid && t == type_).then_some(status).flatten()
        };
        // serving() has the gate True; flipped, False.
        assert!(
            no_news_to_the_plan(&flipped, &before, ours(Some(true))),
            "our True landing"
        );
        assert!(
            no_news_to_the_plan(&before, &flipped, ours(Some(false))),
            "our False landing"
        );
        assert!(
            !no_news_to_the_plan(&flipped, &before, ours(Some(false))),
            "True, but we wrote False"
        );
        assert!(
            !no_news_to_the_plan(&flipped, &before, ours(None)),
            "nothing of ours remembered"
        );
        // Anything else the plan reads, beside our echo, still re-plans.
        let mut moved = before.clone();
        moved.pod_ip = Some("10.0.0.8".into());
        assert!(!no_news_to_the_plan(&flipped, &moved, ours(Some(true))));
        // A gate removed is no write of ours.
        let mut removed = before.clone();
        removed.conditions = removed
            .conditions
            .iter()
            .filter(|c| c.type_ != type_)
            .cloned()
            .collect();
        assert!(!no_news_to_the_plan(&before, &removed, ours(Some(true))));
        // What the plan does not read at all stays no news, remembered or not.
        assert!(no_news_to_the_plan(&before, &before.clone(), ours(None)));
    }

    #[test]
    fn a_gate_condition_appearing_triggers() {
        let mut before = serving();
        let type_ = gate_condition_type("web");
        before.conditions = before
            .conditions
            .iter()
            .filter(|c| c.type_ != type_)
            .cloned()
            .collect();
        assert!(!no_news_to_the_plan(&before, &serving(), |_, _| None));
    }
}
