//! One annotation of the family read under either prefix, its full name, and the
//! sentence that refuses a value naming the accepted forms.
use std::collections::BTreeMap;

use crate::names::LOAD_BALANCER_ANNOTATION_PREFIXES;

/// The annotation's full name under the current prefix (what messages name).
pub fn full_name(suffix: &str) -> String {
    format!("{}{suffix}", LOAD_BALANCER_ANNOTATION_PREFIXES[0])
}

/// One annotation, read under either prefix (the current one wins), trimmed.
pub(super) fn get<'a>(annotations: &'a BTreeMap<String, String>, suffix: &str) -> Option<&'a str> {
    LOAD_BALANCER_ANNOTATION_PREFIXES
        .iter()
        .find_map(|prefix| annotations.get(&format!("{prefix}{suffix}")))
        .map(|v| v.trim())
        .filter(|v| !v.is_empty())
}

pub(super) fn invalid(suffix: &str, value: &str, accepted: &str) -> String {
    format!(
        "annotation {}: {value:?} is not valid; accepted: {accepted}",
        full_name(suffix)
    )
}
