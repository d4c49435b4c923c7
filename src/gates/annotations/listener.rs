//! The listener settings a Service's annotations ask for: the health check, its
//! thresholds, the connection drain, the scheduler and the CLB listener's access
//! control, each checked against the API's accepted values; and how long a drained
//! backend stays, which the drain sets.
use std::collections::BTreeMap;
use std::time::Duration;

use alibaba_lb::limits::{
    CONNECTION_DRAIN_TIMEOUT_SECONDS, HEALTHY_THRESHOLD, HEALTH_CHECK_CONNECT_PORT,
    HEALTH_CHECK_CONNECT_TIMEOUT_SECONDS, HEALTH_CHECK_INTERVAL_SECONDS,
    HEALTH_CHECK_TIMEOUT_SECONDS, UNHEALTHY_THRESHOLD,
};
use alibaba_lb::{
    AclType, ConnectionDrain, HealthCheck, HealthCheckType, ListenerAcl, ListenerSettings,
};

use super::read::{full_name, get, invalid};

/// Reads the annotations that fill the listener settings; every bad value is said
/// (one sentence each, joined), and then nothing is sent.
pub fn listener_settings(
    annotations: &BTreeMap<String, String>,
) -> Result<ListenerSettings, String> {
    let mut problems: Vec<String> = vec![];
    let mut number = |suffix: &str, range: std::ops::RangeInclusive<u32>| -> Option<u32> {
        let raw = get(annotations, suffix)?;
        match raw.parse::<u32>() {
            Ok(n) if range.contains(&n) => Some(n),
            _ => {
                let accepted = format!("an integer from {} to {}", range.start(), range.end());
                problems.push(invalid(suffix, raw, &accepted));
                None
            }
        }
    };
    let connect_port =
        number("health-check-connect-port", HEALTH_CHECK_CONNECT_PORT).map(|p| p as u16);
    let healthy_threshold = number("healthy-threshold", HEALTHY_THRESHOLD);
    let unhealthy_threshold = number("unhealthy-threshold", UNHEALTHY_THRESHOLD);
    let interval_seconds = number("health-check-interval", HEALTH_CHECK_INTERVAL_SECONDS);
    let connect_timeout_seconds = number(
        "health-check-connect-timeout",
        HEALTH_CHECK_CONNECT_TIMEOUT_SECONDS,
    );
    // HTTP and HTTPS listeners' answer timeout (TCP/UDP listeners have none).
    let timeout_seconds = number("health-check-timeout", HEALTH_CHECK_TIMEOUT_SECONDS);
    let drain_timeout = number("connection-drain-timeout", CONNECTION_DRAIN_TIMEOUT_SECONDS);

    let mut switch = |suffix: &str| -> Option<bool> {
        let raw = get(annotations, suffix)?;
        match raw.to_ascii_lowercase().as_str() {
            "on" => Some(true),
            "off" => Some(false),
            _ => {
                problems.push(invalid(suffix, raw, "on, off"));
                None
            }
        }
    };
    // CLB names the switch of TCP/UDP listeners `health-check-switch`, NLB
    // `health-check-flag`; either works on both, the first wins.
    let enabled = switch("health-check-switch").or(switch("health-check-flag"));
    let drain = switch("connection-drain");
    let acl_status = switch("acl-status");

    let kind = get(annotations, "health-check-type").and_then(|raw| {
        match raw.to_ascii_lowercase().as_str() {
            "tcp" => Some(HealthCheckType::Tcp),
            "http" => Some(HealthCheckType::Http),
            _ => {
                problems.push(invalid("health-check-type", raw, "tcp, http"));
                None
            }
        }
    });
    let uri = get(annotations, "health-check-uri").and_then(|raw| {
        let ok =
            raw.starts_with('/') && raw.len() <= 80 && raw.chars().all(|c| c.is_ascii_graphic());
        if ok {
            Some(raw.to_string())
        } else {
            problems.push(invalid(
                "health-check-uri",
                raw,
                "a path of 1 to 80 characters starting with /",
            ));
            None
        }
    });
    let domain = get(annotations, "health-check-domain").and_then(|raw| {
        let ok = raw == "$_ip"
            || (raw.len() <= 80
                && raw
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-'));
        if ok {
            Some(raw.to_string())
        } else {
            problems.push(invalid(
                "health-check-domain",
                raw,
                "$_ip, or 1 to 80 letters, digits, '.' and '-'",
            ));
            None
        }
    });
    const CODES: [&str; 4] = ["http_2xx", "http_3xx", "http_4xx", "http_5xx"];
    let http_codes = match get(annotations, "health-check-httpcode") {
        None => vec![],
        Some(raw) => {
            let codes: Vec<String> = raw
                .split(',')
                .map(|c| c.trim().to_ascii_lowercase())
                .collect();
            if codes.iter().all(|c| CODES.contains(&c.as_str())) {
                codes
            } else {
                problems.push(invalid(
                    "health-check-httpcode",
                    raw,
                    "a comma-separated list of http_2xx, http_3xx, http_4xx, http_5xx",
                ));
                vec![]
            }
        }
    };
    let method = get(annotations, "health-check-method").and_then(|raw| {
        match raw.to_ascii_uppercase().as_str() {
            m @ ("GET" | "HEAD") => Some(m.to_string()),
            _ => {
                problems.push(invalid("health-check-method", raw, "get, head"));
                None
            }
        }
    });

    let scheduler = get(annotations, "scheduler").and_then(|raw| {
        let lower = raw.to_ascii_lowercase();
        if ["wrr", "wlc", "rr", "sch", "tch", "qch"].contains(&lower.as_str()) {
            Some(lower)
        } else {
            problems.push(invalid(
                "scheduler",
                raw,
                "wrr, rr, sch, tch (CLB and NLB), qch (CLB UDP, NLB), wlc (NLB)",
            ));
            None
        }
    });

    // Both APIs want a timeout with the drain on, and none without it.
    let drain = match (drain, drain_timeout) {
        (None, None) => None,
        (Some(true), Some(t)) => Some(ConnectionDrain {
            enabled: true,
            timeout_seconds: Some(t),
        }),
        (Some(false), None) => Some(ConnectionDrain {
            enabled: false,
            timeout_seconds: None,
        }),
        (Some(true), None) => {
            if get(annotations, "connection-drain-timeout").is_none() {
                problems.push(format!(
                    "annotation {}: \"on\" needs {} (an integer from {} to {})",
                    full_name("connection-drain"),
                    full_name("connection-drain-timeout"),
                    CONNECTION_DRAIN_TIMEOUT_SECONDS.start(),
                    CONNECTION_DRAIN_TIMEOUT_SECONDS.end()
                ));
            }
            None
        }
        (_, Some(_)) => {
            problems.push(format!(
                "annotation {} is only accepted with {}: \"on\"",
                full_name("connection-drain-timeout"),
                full_name("connection-drain")
            ));
            None
        }
    };

    let acl = listener_acl(annotations, acl_status, &mut problems);

    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    Ok(ListenerSettings {
        health_check: HealthCheck {
            enabled,
            kind,
            uri,
            domain,
            http_codes,
            method,
            connect_port,
            healthy_threshold,
            unhealthy_threshold,
            interval_seconds,
            connect_timeout_seconds,
            timeout_seconds,
        },
        drain,
        scheduler,
        // Set per HTTPS listener from `listener_protocols` (`lb_spec`).
        server_certificate_id: None,
        acl,
    })
}

/// `acl-status`, `acl-id`, `acl-type` (CLB listener access control). The API wants
/// the list and its type with the switch on (`AclId`, `AclType`: "required when
/// AclStatus is on"), so `on` without them is refused here; with `off` they are
/// accepted and not sent (turning the control off keeps the list named); without
/// the switch they would do nothing, so they are refused too.
fn listener_acl(
    annotations: &BTreeMap<String, String>,
    status: Option<bool>,
    problems: &mut Vec<String>,
) -> Option<ListenerAcl> {
    let id = get(annotations, "acl-id").and_then(|raw| {
        // CLB ids: `acl-` and letters and digits (`acl-bp1l0kk4gxce43kzet04s`).
        let ok = raw.len() <= 64
            && raw.strip_prefix("acl-").is_some_and(|rest| {
                !rest.is_empty() && rest.chars().all(|c| c.is_ascii_alphanumeric())
            });
        if ok {
            Some(raw.to_string())
        } else {
            problems.push(invalid(
                "acl-id",
                raw,
                "the id of a CLB access control list (acl- and letters and digits)",
            ));
            None
        }
    });
    let kind =
        get(annotations, "acl-type").and_then(|raw| match raw.to_ascii_lowercase().as_str() {
            "white" => Some(AclType::White),
            "black" => Some(AclType::Black),
            _ => {
                problems.push(invalid("acl-type", raw, "white, black"));
                None
            }
        });
    let given = |suffix: &str| get(annotations, suffix).is_some();
    match status {
        Some(true) => {
            let missing: Vec<String> = ["acl-id", "acl-type"]
                .into_iter()
                .filter(|s| !given(s))
                .map(full_name)
                .collect();
            if !missing.is_empty() {
                problems.push(format!(
                    "annotation {}: \"on\" needs {} (acl-id: the access control list's id, acl-type: white or black)",
                    full_name("acl-status"),
                    missing.join(" and ")
                ));
                return None;
            }
            Some(ListenerAcl {
                enabled: true,
                id: Some(id?),
                kind: Some(kind?),
            })
        }
        Some(false) => Some(ListenerAcl {
            enabled: false,
            id: None,
            kind: None,
        }),
        None => {
            for suffix in ["acl-id", "acl-type"].into_iter().filter(|s| given(s)) {
                problems.push(format!(
                    "annotation {} is only accepted with {}: \"on\" or \"off\"",
                    full_name(suffix),
                    full_name("acl-status")
                ));
            }
            None
        }
    }
}

/// How long a terminating pod's backend stays at weight 0 before it is removed: the
/// load balancer's connection drain when the Service turns it on (removing the backend
/// earlier would cut the connections the drain keeps), else `default`
/// (`--gate-drain-time`). The pod's grace period still ends it earlier
/// (`plan::removal_time`).
pub fn drain_time(settings: &ListenerSettings, default: Duration) -> Duration {
    match settings.drain {
        Some(ConnectionDrain {
            enabled: true,
            timeout_seconds: Some(seconds),
        }) => Duration::from_secs(seconds.into()),
        _ => default,
    }
}
