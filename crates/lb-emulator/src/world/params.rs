//! Reading request parameters the way the cloud does: required values, ports,
//! `Prefix.N.Field` lists, `MaxResults`/`NextToken` pages, and numbers that arrive as
//! JSON numbers or strings; and the shapes the API reference gives for names,
//! descriptions, IPs and CIDR blocks. Each failure is the cloud's own error.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{ApiError, Params};

pub(super) fn get<'a>(p: &'a Params, name: &str) -> Result<&'a str, ApiError> {
    p.get(name)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| ApiError::missing(name))
}

pub(super) fn parse_port(p: &Params, name: &str) -> Result<u16, ApiError> {
    get(p, name)?
        .parse()
        .map_err(|e| ApiError::invalid(name, e))
}

/// `Prefix.N.Field` lists, grouped by N in order.
pub(super) fn flat_list(p: &Params, prefix: &str) -> Vec<BTreeMap<String, String>> {
    let mut items: BTreeMap<u32, BTreeMap<String, String>> = BTreeMap::new();
    for (key, value) in p {
        let Some(rest) = key.strip_prefix(prefix).and_then(|r| r.strip_prefix('.')) else {
            continue;
        };
        let (index, field) = rest.split_once('.').unwrap_or((rest, ""));
        if let Ok(index) = index.parse::<u32>() {
            items
                .entry(index)
                .or_default()
                .insert(field.to_string(), value.clone());
        }
    }
    items.into_values().collect()
}

pub(super) fn paginate<T: Clone>(
    items: &[T],
    p: &Params,
    default_size: usize,
) -> Result<(Vec<T>, String, usize), ApiError> {
    let size = match p.get("MaxResults").filter(|v| !v.is_empty()) {
        Some(v) => v
            .parse::<usize>()
            .map_err(|e| ApiError::invalid("MaxResults", e))?,
        None => default_size,
    };
    if !(1..=100).contains(&size) {
        return Err(ApiError::invalid("MaxResults", "must be between 1 and 100"));
    }
    let start = match p.get("NextToken").filter(|v| !v.is_empty()) {
        Some(token) => token
            .strip_prefix("page-")
            .and_then(|n| n.parse::<usize>().ok())
            .ok_or_else(|| ApiError::invalid("NextToken", "unknown token"))?,
        None => 0,
    };
    let end = (start + size).min(items.len());
    let page = items.get(start..end).unwrap_or_default().to_vec();
    let next = if end < items.len() {
        format!("page-{end}")
    } else {
        String::new()
    };
    Ok((page, next, size))
}

/// CLB names and backend descriptions: 1 to 80 characters of letters, digits, `-`,
/// `/`, `.` and `_` (AddVServerGroupBackendServers, CreateVServerGroup).
pub(super) fn clb_text_ok(text: &str) -> bool {
    (1..=80).contains(&text.chars().count())
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '/' | '.' | '_'))
}

/// CLB instance names: 1 to 80 characters, starting with a letter, then letters,
/// digits, `.`, `_` and `-` (CreateLoadBalancer, LoadBalancerName).
pub(super) fn clb_instance_name_ok(name: &str) -> bool {
    (1..=80).contains(&name.chars().count())
        && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// NLB server descriptions: 2 to 256 characters of letters, digits, `,`, `.`, `;`,
/// `/`, `@`, `_` and `-` (AddServersToServerGroup, Servers.N.Description).
pub(super) fn nlb_description_ok(text: &str) -> bool {
    (2..=256).contains(&text.chars().count())
        && text.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, ',' | '.' | ';' | '/' | '@' | '_' | '-')
        })
}

/// NLB server group names: 2 to 128 characters, starting with a letter, then
/// letters, digits, `.`, `_` and `-` (CreateServerGroup, ServerGroupName).
pub(super) fn nlb_group_name_ok(name: &str) -> bool {
    (2..=128).contains(&name.chars().count())
        && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

pub(super) fn ipv4(text: &str) -> Option<std::net::Ipv4Addr> {
    text.parse().ok()
}

/// A number the SDKs send as a JSON number or as a numeric string.
pub(super) fn json_u32(v: &Value) -> Option<u32> {
    v.as_u64()
        .map(|n| n as u32)
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}

/// Parameters as a request carries them, for tests.
#[cfg(test)]
pub(super) fn request_params(pairs: &[(&str, &str)]) -> Params {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_lists_group_by_index_in_numeric_order() {
        let p = request_params(&[
            ("Servers.10.ServerId", "j"),
            ("Servers.2.ServerId", "b"),
            ("Servers.2.Port", "80"),
            ("ServerGroupNames.1", "web"),
        ]);
        let servers = flat_list(&p, "Servers");
        assert_eq!(servers.len(), 2);
        assert_eq!(servers[0]["ServerId"], "b");
        assert_eq!(servers[0]["Port"], "80");
        assert_eq!(servers[1]["ServerId"], "j");
        assert_eq!(flat_list(&p, "ServerGroupNames")[0][""], "web");
    }

    #[test]
    fn text_shapes_follow_the_reference() {
        assert!(clb_text_ok("k8s/80/web/default/c1"));
        assert!(clb_text_ok(&"a".repeat(80)));
        assert!(!clb_text_ok(&"a".repeat(81)));
        assert!(!clb_text_ok(""));
        for bad in ["has space", "star*", "集群", "a:b", "a@b"] {
            assert!(!clb_text_ok(bad), "{bad}");
        }
        assert!(clb_instance_name_ok("k8s-web.default_1"));
        assert!(!clb_instance_name_ok("1abc"));
        assert!(!clb_instance_name_ok("a/b"));
        assert!(nlb_description_ok("k8s/80/web/default/c1,@;"));
        assert!(!nlb_description_ok("k"));
        assert!(!nlb_description_ok("has space"));
        assert!(nlb_group_name_ok("k8s-80-web"));
        assert!(!nlb_group_name_ok("k"));
        assert!(!nlb_group_name_ok("-k8s"));
    }

    #[test]
    fn pagination_hands_out_tokens_until_the_end() {
        let items: Vec<u32> = (0..5).collect();
        let (page, next, _) =
            paginate(&items, &request_params(&[("MaxResults", "2")]), 20).unwrap();
        assert_eq!((page, next.as_str()), (vec![0, 1], "page-2"));
        let (page, next, _) = paginate(
            &items,
            &request_params(&[("MaxResults", "2"), ("NextToken", "page-4")]),
            20,
        )
        .unwrap();
        assert_eq!((page, next.as_str()), (vec![4], ""));
        assert!(paginate(&items, &request_params(&[("MaxResults", "101")]), 20).is_err());
        assert!(paginate(&items, &request_params(&[("NextToken", "bogus")]), 20).is_err());
    }
}
