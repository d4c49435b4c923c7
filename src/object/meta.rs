//! Reading any object's metadata: labels, annotations and the controller owner.
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

pub fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// The UID of the object's controller (its owner reference with `controller: true`).
pub fn controller_uid(metadata: &ObjectMeta) -> Option<&str> {
    metadata
        .owner_references
        .iter()
        .flatten()
        .find(|owner| owner.controller == Some(true))
        .map(|owner| owner.uid.as_str())
}
