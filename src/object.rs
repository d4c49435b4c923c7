//! Reading Kubernetes objects: labels, annotations and pod conditions, one way everywhere.
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

pub fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// The pod's conditions (empty when it has no status yet).
pub fn pod_conditions(pod: &Pod) -> &[PodCondition] {
    pod.status
        .as_ref()
        .and_then(|status| status.conditions.as_deref())
        .unwrap_or_default()
}

/// The pod's condition of this type, if any.
pub fn pod_condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a PodCondition> {
    pod_conditions(pod).iter().find(|c| c.type_ == type_)
}

/// Whether the pod's condition of this type has status `True`.
pub fn pod_condition_is_true(pod: &Pod, type_: &str) -> bool {
    pod_condition(pod, type_).is_some_and(|c| c.status == "True")
}
