//! The pod a POST names in its path, decoded and validated before anything else: a
//! malformed name never reaches the API server (where it could address another resource,
//! or fail as a transport error and read as "API server unreachable").
//!
//! The rules are the API server's own: a namespace is an RFC 1123 label, a pod name a
//! DNS-1123 subdomain. Path segments are percent-decoded first, so `%2e%2e`, `%2F` or
//! `%00` are judged by what they decode to.

use std::borrow::Cow;

use axum::http::StatusCode;
use percent_encoding::percent_decode_str;

use super::checks::{Action, Refusal};

/// Longest namespace (RFC 1123 label).
pub const MAX_NAMESPACE_LEN: usize = 63;
/// Longest pod name (DNS-1123 subdomain).
pub const MAX_POD_NAME_LEN: usize = 253;
/// How much of a rejected value a refusal repeats.
const SHOWN_CHARS: usize = 80;

const NAMESPACE_RULE: &str = "a namespace must be an RFC 1123 label: 1 to 63 lowercase \
     letters, digits or '-', starting and ending with a letter or digit (e.g. kube-system)";
const POD_NAME_RULE: &str = "a pod name must be a DNS-1123 subdomain: 1 to 253 lowercase \
     letters, digits, '-' or '.', each '.'-separated part starting and ending with a letter \
     or digit (e.g. nginx-daemonset-bwzss)";

/// A namespace and pod name that passed validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub namespace: String,
    pub name: String,
}

/// Decodes and validates the `{ns}` and `{podname}` segments of a POST path as they
/// arrived (still percent-encoded). The namespace is judged first.
pub fn parse(action: Action, raw_namespace: &str, raw_name: &str) -> Result<Target, Refusal> {
    let namespace = decode(raw_namespace)
        .and_then(|ns| match namespace_problem(&ns) {
            None => Ok(ns.into_owned()),
            Some(problem) => Err(format!("{} {problem}", shown(&ns))),
        })
        .map_err(|problem| invalid(action, "namespace", &problem, NAMESPACE_RULE))?;
    let name = decode(raw_name)
        .and_then(|name| match pod_name_problem(&name) {
            None => Ok(name.into_owned()),
            Some(problem) => Err(format!("{} {problem}", shown(&name))),
        })
        .map_err(|problem| invalid(action, "pod name", &problem, POD_NAME_RULE))?;
    Ok(Target { namespace, name })
}

fn invalid(action: Action, what: &str, problem: &str, rule: &str) -> Refusal {
    Refusal::new(
        StatusCode::BAD_REQUEST,
        format!(
            "invalid {what} in the path: {problem}; {rule}; the accepted form is POST \
             /openyurt.io/v1/namespaces/{{ns}}/pods/{{podname}}/{}",
            action.path_segment()
        ),
    )
}

fn decode(raw: &str) -> Result<Cow<'_, str>, String> {
    percent_decode_str(raw).decode_utf8().map_err(|_| {
        format!(
            "{} is not UTF-8 once percent-decoded",
            shown(&String::from_utf8_lossy(raw.as_bytes()))
        )
    })
}

/// What is wrong with `ns` as a namespace, if anything.
pub fn namespace_problem(ns: &str) -> Option<String> {
    if ns.len() > MAX_NAMESPACE_LEN {
        return Some(format!(
            "is {} bytes long, more than {MAX_NAMESPACE_LEN}",
            ns.len()
        ));
    }
    label_problem(ns)
}

/// What is wrong with `name` as a pod name, if anything.
pub fn pod_name_problem(name: &str) -> Option<String> {
    if name == "." || name == ".." {
        return Some("is a '.' or '..' path segment, not a name".into());
    }
    if name.len() > MAX_POD_NAME_LEN {
        return Some(format!(
            "is {} bytes long, more than {MAX_POD_NAME_LEN}",
            name.len()
        ));
    }
    if name.is_empty() {
        return Some("is empty".into());
    }
    if let Some(bad) = name.chars().find(|c| !is_label_char(*c) && *c != '.') {
        return Some(format!("contains {}", describe(bad)));
    }
    name.split('.').find_map(|part| {
        label_problem(part).map(|problem| {
            if part.is_empty() {
                "has an empty '.'-separated part".to_string()
            } else {
                format!("has a part {} that {problem}", shown(part))
            }
        })
    })
}

fn is_label_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'
}

fn describe(c: char) -> String {
    match c {
        '/' | '.' => format!("'{c}'"),
        c if c.is_control() => format!("the control character {c:?}"),
        c if c.is_ascii_uppercase() => format!("the uppercase letter {c:?}"),
        c => format!("the character {c:?}"),
    }
}

/// The RFC 1123 label rule without the length limit (which differs by use).
fn label_problem(label: &str) -> Option<String> {
    if label == "." || label == ".." {
        return Some("is a '.' or '..' path segment, not a name".into());
    }
    if label.is_empty() {
        return Some("is empty".into());
    }
    if let Some(bad) = label.chars().find(|c| !is_label_char(*c)) {
        return Some(format!("contains {}", describe(bad)));
    }
    if !label.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Some("does not start with a letter or digit".into());
    }
    if !label.ends_with(|c: char| c.is_ascii_alphanumeric()) {
        return Some("does not end with a letter or digit".into());
    }
    None
}

/// A value as a refusal repeats it: quoted, control characters escaped, cut short.
fn shown(value: &str) -> String {
    let mut chars = value.chars();
    let head: String = chars.by_ref().take(SHOWN_CHARS).collect();
    if chars.next().is_some() {
        format!("{head:?} (cut)")
    } else {
        format!("{head:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(ns: &str, name: &str) -> Target {
        parse(Action::Upgrade, ns, name)
            .unwrap_or_else(|r| panic!("{ns}/{name} refused: {}", r.message))
    }

    #[test]
    fn valid_names_pass_and_are_decoded() {
        assert_eq!(
            ok("default", "nginx-daemonset-bwzss"),
            Target {
                namespace: "default".into(),
                name: "nginx-daemonset-bwzss".into()
            }
        );
        // Percent-encoded unreserved characters mean the same name.
        assert_eq!(ok("d%65fault", "a%2Eb").name, "a.b");
        assert_eq!(ok("d%65fault", "a%2Eb").namespace, "default");
        ok("a", "0");
        ok(
            &"a".repeat(63),
            &format!("{}.{}", "b".repeat(63), "c".repeat(189)),
        );
        ok("kube-system", "web-0.web.svc");
    }

    /// (case, raw namespace, raw name, what the refusal says)
    #[test]
    fn invalid_segments_are_400_naming_the_rule_and_the_accepted_form() {
        let long_ns = "a".repeat(64);
        let long_name = "a".repeat(254);
        let cases: Vec<(&str, &str, &str, &str)> = vec![
            (
                "ns '..'",
                "..",
                "p",
                "invalid namespace in the path: \"..\" is a '.' or '..' path segment",
            ),
            ("ns '.'", ".", "p", "'.' or '..' path segment"),
            (
                "ns encoded '..'",
                "%2e%2E",
                "p",
                "\"..\" is a '.' or '..' path segment",
            ),
            ("ns encoded '/'", "a%2Fb", "p", "\"a/b\" contains '/'"),
            ("ns with a dot", "a.b", "p", "contains '.'"),
            ("ns uppercase", "Default", "p", "the uppercase letter 'D'"),
            (
                "ns too long",
                &long_ns,
                "p",
                "is 64 bytes long, more than 63",
            ),
            ("ns empty (encoded nothing)", "", "p", "is empty"),
            (
                "ns leading dash",
                "-a",
                "p",
                "does not start with a letter or digit",
            ),
            (
                "ns trailing dash",
                "a-",
                "p",
                "does not end with a letter or digit",
            ),
            ("ns NUL", "a%00", "p", "the control character '\\0'"),
            (
                "ns not UTF-8",
                "%ff",
                "p",
                "is not UTF-8 once percent-decoded",
            ),
            (
                "name '..'",
                "default",
                "..",
                "invalid pod name in the path: \"..\" is a '.' or '..' path segment",
            ),
            (
                "name encoded '..'",
                "default",
                "%2E%2e",
                "'.' or '..' path segment",
            ),
            (
                "name encoded '/'",
                "default",
                "..%2Fkube-system%2Fx",
                "contains '/'",
            ),
            (
                "name newline",
                "default",
                "p%0A",
                "the control character '\\n'",
            ),
            (
                "name DEL",
                "default",
                "p%7f",
                "the control character '\\u{7f}'",
            ),
            ("name space", "default", "a%20b", "the character ' '"),
            (
                "name unicode",
                "default",
                "%C3%A9t%C3%A9",
                "the character 'é'",
            ),
            (
                "name empty part",
                "default",
                "a..b",
                "has an empty '.'-separated part",
            ),
            (
                "name leading dot",
                "default",
                ".a",
                "has an empty '.'-separated part",
            ),
            (
                "name part ends with dash",
                "default",
                "a-.b",
                "has a part \"a-\" that does not end with a letter or digit",
            ),
            (
                "name too long",
                "default",
                &long_name,
                "is 254 bytes long, more than 253",
            ),
            ("name not UTF-8", "default", "%C3", "not UTF-8"),
            ("name uppercase", "default", "Nginx", "uppercase"),
        ];
        for (case, ns, name, says) in cases {
            let refusal = parse(Action::ImagePull, ns, name).expect_err(case);
            assert_eq!(refusal.status, StatusCode::BAD_REQUEST, "{case}");
            assert!(
                refusal.message.contains(says),
                "{case}: {:?} does not contain {says:?}",
                refusal.message
            );
            let rule = if refusal.message.starts_with("invalid namespace") {
                NAMESPACE_RULE
            } else {
                POD_NAME_RULE
            };
            assert!(
                refusal.message.contains(rule),
                "{case}: {}",
                refusal.message
            );
            assert!(
                refusal.message.contains(
                    "the accepted form is POST /openyurt.io/v1/namespaces/{ns}/pods/{podname}/imagepull"
                ),
                "{case}: {}",
                refusal.message
            );
            // Plain text on one line: nothing the client sent is echoed raw.
            assert!(!refusal.message.chars().any(char::is_control), "{case}");
        }
    }

    #[test]
    fn the_namespace_is_judged_before_the_name() {
        let refusal = parse(Action::Upgrade, "..", "..").unwrap_err();
        assert!(
            refusal.message.starts_with("invalid namespace"),
            "{}",
            refusal.message
        );
    }

    #[test]
    fn long_values_are_cut_in_the_answer() {
        let refusal = parse(Action::Upgrade, "default", &"X".repeat(10_000)).unwrap_err();
        assert!(refusal.message.len() < 1_000, "{}", refusal.message.len());
        assert!(refusal.message.contains("(cut)"));
    }
}
