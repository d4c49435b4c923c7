//! Reading request parameters the way the cloud does: required values, ports,
//! `Prefix.N.Field` lists, `Tag.N` lists (and tag filters), `MaxResults`/`NextToken`
//! pages, and numbers that arrive as JSON numbers or strings; and the shapes the API
//! reference gives for names, descriptions, IPs and CIDR blocks. Each failure is the
//! cloud's own error.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{ApiError, Params, Tags};

pub(super) fn get<'a>(p: &'a Params, name: &str) -> Result<&'a str, ApiError> {
    p.get(name)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| ApiError::missing(name))
}

/// CLB's reading of an enumerated value: `name` (`default` when absent or empty),
/// refused as `InvalidParameter.<name>` unless it is one of `allowed`.
pub(super) fn one_of(
    p: &Params,
    name: &str,
    default: &str,
    allowed: &[&str],
) -> Result<String, ApiError> {
    let value = p
        .get(name)
        .filter(|v| !v.is_empty())
        .cloned()
        .unwrap_or_else(|| default.into());
    if allowed.contains(&value.as_str()) {
        Ok(value)
    } else {
        let allowed = allowed.join(", ");
        Err(ApiError::invalid(
            name,
            format!("{value:?} is not one of {allowed}"),
        ))
    }
}

/// CLB's `on`/`off` switch `name`, if given.
pub(super) fn on_off(p: &Params, name: &str) -> Result<Option<bool>, ApiError> {
    match p.get(name).map(String::as_str) {
        None | Some("") => Ok(None),
        Some(value) => one_of(p, name, "", &["on", "off"]).map(|_| Some(value == "on")),
    }
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

/// How many tags one call may carry: 20 on create (CLB `CreateLoadBalancer`, NLB
/// `CreateLoadBalancer` and `CreateServerGroup`: "Valid values of N: 1 to 20"), 10 as
/// a `ListServerGroups` filter ("You can specify up to 10 tag keys").
pub(super) const TAGS_PER_CREATE: usize = 20;
pub(super) const TAGS_PER_FILTER: usize = 10;

/// The `Tag.N` list of `p`, checked as the SDK models of those calls state it: at most
/// `limit`; a key of 1 to 64 characters (an empty key is refused), a value of at most
/// 128; neither starting with `aliyun` or `acs:` nor containing `http://` or
/// `https://`. `refuse` spells the product's error (`InvalidParameter.<Name>` for CLB,
/// `IllegalParam` for NLB; no reference documents a code for these rules).
pub(super) fn tags(
    p: &Params,
    limit: usize,
    refuse: impl Fn(&str, String) -> ApiError,
) -> Result<Tags, ApiError> {
    let items = flat_list(p, "Tag");
    if items.len() > limit {
        return Err(refuse(
            "Tag",
            format!("{} tags given, at most {limit} per call", items.len()),
        ));
    }
    let reserved = |text: &str| {
        let lower = text.to_ascii_lowercase();
        lower.starts_with("aliyun")
            || lower.starts_with("acs:")
            || lower.contains("http://")
            || lower.contains("https://")
    };
    let mut out = Tags::new();
    for (index, item) in items.iter().enumerate() {
        let n = index + 1;
        let key = item.get("Key").map(String::as_str).unwrap_or_default();
        let value = item.get("Value").map(String::as_str).unwrap_or_default();
        if key.is_empty() || key.chars().count() > 64 || reserved(key) {
            return Err(refuse(
                &format!("Tag.{n}.Key"),
                format!("{key:?}: 1 to 64 characters, not starting with aliyun or acs:, without http:// or https://"),
            ));
        }
        if value.chars().count() > 128 || reserved(value) {
            return Err(refuse(
                &format!("Tag.{n}.Value"),
                format!("{value:?}: at most 128 characters, not starting with aliyun or acs:, without http:// or https://"),
            ));
        }
        out.push((key.to_string(), value.to_string()));
    }
    Ok(out)
}

/// Whether `held` carries every tag of `filter` (a filter tag without a value asks
/// for the key alone).
pub(super) fn has_tags(held: &Tags, filter: &Tags) -> bool {
    filter.iter().all(|(key, value)| {
        held.iter()
            .any(|(k, v)| k == key && (value.is_empty() || v == value))
    })
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
    fn tags_follow_the_sdk_rules_and_filters_need_every_tag() {
        let refuse = |name: &str, why: String| ApiError::invalid(name, why);
        let ok = request_params(&[
            ("Tag.1.Key", "rollgate.io/cluster"),
            ("Tag.1.Value", "c1"),
            ("Tag.2.Key", "team"),
        ]);
        let held = tags(&ok, TAGS_PER_CREATE, refuse).unwrap();
        assert_eq!(
            held,
            vec![
                ("rollgate.io/cluster".into(), "c1".into()),
                ("team".into(), String::new())
            ]
        );
        for (key, value, field) in [
            ("", "v", "Tag.1.Key"),
            ("aliyun-x", "v", "Tag.1.Key"),
            ("acs:x", "v", "Tag.1.Key"),
            ("a http://x", "v", "Tag.1.Key"),
            (&"k".repeat(65), "v", "Tag.1.Key"),
            ("k", "acs:v", "Tag.1.Value"),
            ("k", &"v".repeat(129), "Tag.1.Value"),
        ] {
            let p = request_params(&[("Tag.1.Key", key), ("Tag.1.Value", value)]);
            let err = tags(&p, TAGS_PER_CREATE, refuse).unwrap_err();
            assert_eq!(
                err.code,
                format!("InvalidParameter.{field}"),
                "{key:?}={value:?}"
            );
        }
        let k64 = "k".repeat(64);
        let v128 = "v".repeat(128);
        let edge = request_params(&[("Tag.1.Key", &k64), ("Tag.1.Value", &v128)]);
        assert!(tags(&edge, TAGS_PER_CREATE, refuse).is_ok());
        let many: Vec<(String, String)> = (1..=11)
            .map(|n| (format!("Tag.{n}.Key"), format!("k{n}")))
            .collect();
        let many: Params = many.into_iter().collect();
        assert!(tags(&many, TAGS_PER_FILTER, refuse).is_err());
        assert!(tags(&many, TAGS_PER_CREATE, refuse).is_ok());
        let filter = vec![("rollgate.io/cluster".to_string(), "c1".to_string())];
        assert!(has_tags(&held, &filter));
        assert!(!has_tags(
            &held,
            &vec![("rollgate.io/cluster".into(), "c2".into())]
        ));
        assert!(has_tags(&held, &vec![("team".into(), String::new())]));
        assert!(has_tags(&held, &Tags::new()));
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
