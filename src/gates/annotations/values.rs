//! The annotations that are one value each: `additional-resource-tags`, `weight`,
//! `vswitch-id`, and the CLB instance's `spec` and `instance-charge-type`.
use std::collections::BTreeMap;

use alibaba_lb::limits::CLB_SPECS;
use alibaba_lb::{tag_key_ok, tag_value_ok, ClbInstance, TAGS_PER_RESOURCE};

use super::read::{get, invalid};
use crate::names::{CLUSTER_ID_TAG, SERVICE_UID_TAG};

/// `additional-resource-tags` (`k1=v1,k2=v2`, Alibaba's documented form): tags put on
/// what rollgate creates, beside its own two (`CLUSTER_ID_TAG`, `SERVICE_UID_TAG`,
/// which the user may not set). Checked as both APIs check tags (`alibaba_lb`'s
/// `tag_key_ok`, `tag_value_ok`, `TAGS_PER_RESOURCE`: the SDK models' rules, beside
/// the spec's tags), each key once.
pub fn additional_resource_tags(
    annotations: &BTreeMap<String, String>,
) -> Result<Vec<(String, String)>, String> {
    const SUFFIX: &str = "additional-resource-tags";
    let Some(raw) = get(annotations, SUFFIX) else {
        return Ok(vec![]);
    };
    let accepted = format!(
        "\"k1=v1,k2=v2\": keys of 1 to 64 characters, values of at most 128, neither starting with aliyun or acs: nor holding http:// or https://, each key once, at most {} tags, not {CLUSTER_ID_TAG} or {SERVICE_UID_TAG} (rollgate's own)",
        TAGS_PER_RESOURCE - 2
    );
    let mut tags: Vec<(String, String)> = vec![];
    for item in raw.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let Some((key, value)) = item.split_once('=') else {
            return Err(invalid(SUFFIX, raw, &accepted));
        };
        let (key, value) = (key.trim(), value.trim());
        let bad_key = !tag_key_ok(key)
            || key == CLUSTER_ID_TAG
            || key == SERVICE_UID_TAG
            || tags.iter().any(|(k, _)| k == key);
        if bad_key || !tag_value_ok(value) {
            return Err(invalid(SUFFIX, raw, &accepted));
        }
        tags.push((key.to_string(), value.to_string()));
    }
    if tags.len() > TAGS_PER_RESOURCE - 2 {
        return Err(invalid(SUFFIX, raw, &accepted));
    }
    Ok(tags)
}

/// `weight`: the weight each of the Service's backends in rotation carries (both
/// APIs take 0 to 100 per backend: `AddVServerGroupBackendServers`,
/// `AddServersToServerGroup`). 0 is refused: every pod would be out of rotation and
/// its gate would wait for a health verdict that never comes. `None`: not set.
pub fn backend_weight(annotations: &BTreeMap<String, String>) -> Result<Option<u32>, String> {
    let Some(raw) = get(annotations, "weight") else {
        return Ok(None);
    };
    match raw.parse::<u32>() {
        Ok(n) if (1..=100).contains(&n) => Ok(Some(n)),
        _ => Err(invalid(
            "weight",
            raw,
            "an integer from 1 to 100, the weight of each pod's backend (0 would take every pod out of rotation)",
        )),
    }
}

/// `vswitch-id`: the vswitch an intranet CLB takes its address from (`VSwitchId` of
/// `CreateLoadBalancer`), `vsw-` and letters and digits. `None`: not set.
pub fn vswitch_id(annotations: &BTreeMap<String, String>) -> Result<Option<String>, String> {
    let Some(raw) = get(annotations, "vswitch-id") else {
        return Ok(None);
    };
    let ok = raw.len() <= 64
        && raw.strip_prefix("vsw-").is_some_and(|rest| {
            !rest.is_empty() && rest.chars().all(|c| c.is_ascii_alphanumeric())
        });
    if ok {
        Ok(Some(raw.to_string()))
    } else {
        Err(invalid(
            "vswitch-id",
            raw,
            "the id of a vswitch of the cluster's VPC (vsw- and letters and digits)",
        ))
    }
}

/// `spec` and `instance-charge-type`: what a CLB rollgate creates is asked to be. The
/// spec is applied only with `PayBySpec`; otherwise the instance is pay-by-CLCU, which
/// has no spec, and [`not_acted_on`] tells the Service so once.
pub fn clb_instance(annotations: &BTreeMap<String, String>) -> Result<ClbInstance, String> {
    let mut problems = vec![];
    let spec = get(annotations, "spec").and_then(|raw| {
        if CLB_SPECS.contains(&raw) {
            Some(raw.to_string())
        } else {
            problems.push(invalid("spec", raw, &CLB_SPECS.join(", ")));
            None
        }
    });
    let charge_type = get(annotations, "instance-charge-type").and_then(|raw| {
        match raw.to_ascii_lowercase().as_str() {
            "paybyspec" => Some("PayBySpec".to_string()),
            "paybyclcu" => Some("PayByCLCU".to_string()),
            _ => {
                problems.push(invalid("instance-charge-type", raw, "PayBySpec, PayByCLCU"));
                None
            }
        }
    });
    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    Ok(ClbInstance {
        spec: spec.unwrap_or_default(),
        charge_type: charge_type.unwrap_or_default(),
    })
}
