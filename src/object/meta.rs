//! Reading any object's metadata: labels, annotations and the controller owner.
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

pub fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

pub fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// The UID of the object's controller (its owner reference with `controller: true`).
/// Of a pod, ask `PodFacts::controller_uid`: a cached pod keeps its owners apart.
pub fn controller_uid(metadata: &ObjectMeta) -> Option<&str> {
    controller_of(metadata.owner_references.as_deref().unwrap_or_default())
}

/// The UID of the owner reference with `controller: true`.
pub fn controller_of(owners: &[OwnerReference]) -> Option<&str> {
    owners
        .iter()
        .find(|owner| owner.controller == Some(true))
        .map(|owner| owner.uid.as_str())
}
