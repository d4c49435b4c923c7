//! Reading request parameters the way the cloud does: required values, ports,
//! `Prefix.N.Field` lists, `MaxResults`/`NextToken` pages, and numbers that arrive as
//! JSON numbers or strings. Each failure is the cloud's own error.

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
