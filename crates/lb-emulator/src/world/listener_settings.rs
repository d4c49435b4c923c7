//! Health-check and connection-drain settings as the APIs take them: CLB TCP/UDP
//! listener parameters (`CreateLoadBalancer{TCP,UDP}Listener`,
//! `SetLoadBalancer{TCP,UDP}ListenerAttribute`), CLB HTTP/HTTPS listener parameters
//! (`CreateLoadBalancer{HTTP,HTTPS}Listener`, `Set…Attribute`) and NLB server group parameters
//! (`CreateServerGroup`, `UpdateServerGroupAttribute`, `HealthCheckConfig.*`), and the
//! CLB listeners' access control switch and type (the list itself is `acl`'s). Each
//! value is checked against the API reference's accepted values and ranges, stored
//! as the Describe / List calls return it, so a client's settings can be read back.

use serde_json::{json, Value};

use super::{ApiError, Params, Settings};

/// What one parameter accepts.
#[derive(Clone, Copy)]
enum Accepts {
    /// An integer in the range (inclusive).
    Int(i64, i64),
    /// One of these, exactly as spelled (CLB lower case, NLB upper case).
    OneOf(&'static [&'static str]),
    /// A path: 1 to 80 characters starting with `/`.
    Uri,
    /// `$_ip`, or 1 to 80 letters, digits, `.` and `-`.
    Domain,
    /// CLB: comma-separated HTTP status classes.
    HttpCodes,
}

const CODES: [&str; 4] = ["http_2xx", "http_3xx", "http_4xx", "http_5xx"];

const CLB_COMMON: &[(&str, Accepts)] = &[
    // -520: the backend's port (the API's spelling of "unset").
    ("HealthCheckConnectPort", Accepts::Int(-520, 65535)),
    ("HealthyThreshold", Accepts::Int(2, 10)),
    ("UnhealthyThreshold", Accepts::Int(2, 10)),
    ("HealthCheckInterval", Accepts::Int(1, 50)),
    ("HealthCheckConnectTimeout", Accepts::Int(1, 300)),
    ("ConnectionDrain", Accepts::OneOf(&["on", "off"])),
    ("ConnectionDrainTimeout", Accepts::Int(10, 900)),
];

/// Access control, on every CLB listener kind (`AclId` is checked by `acl`, since it
/// must name a list the account holds).
const CLB_ACL: &[(&str, Accepts)] = &[
    ("AclStatus", Accepts::OneOf(&["on", "off"])),
    ("AclType", Accepts::OneOf(&["white", "black"])),
];

/// Only TCP listeners take the check type and the HTTP check's fields.
const CLB_TCP_ONLY: &[(&str, Accepts)] = &[
    ("HealthCheckType", Accepts::OneOf(&["tcp", "http"])),
    ("HealthCheckURI", Accepts::Uri),
    ("HealthCheckDomain", Accepts::Domain),
    ("HealthCheckHttpCode", Accepts::HttpCodes),
];

/// NLB `HealthCheckConfig.<name>`, read back under `HealthCheck.<name>`.
const NLB_HEALTH: &[(&str, Accepts)] = &[
    ("HealthCheckType", Accepts::OneOf(&["TCP", "HTTP", "UDP"])),
    ("HealthCheckUrl", Accepts::Uri),
    ("HealthCheckDomain", Accepts::Domain),
    ("HttpCheckMethod", Accepts::OneOf(&["GET", "HEAD"])),
    ("HealthCheckConnectPort", Accepts::Int(0, 65535)),
    ("HealthyThreshold", Accepts::Int(2, 10)),
    ("UnhealthyThreshold", Accepts::Int(2, 10)),
    ("HealthCheckInterval", Accepts::Int(1, 50)),
    ("HealthCheckConnectTimeout", Accepts::Int(1, 300)),
];

/// How a product refuses a parameter's value: CLB `InvalidParameter.<Name>`, NLB
/// `IllegalParam`.
type Refuse = fn(&str, String) -> ApiError;

fn clb_refuse(name: &str, why: String) -> ApiError {
    ApiError::invalid(name, why)
}

fn nlb_refuse(name: &str, why: String) -> ApiError {
    ApiError::nlb_illegal(name, why)
}

fn check(name: &str, raw: &str, accepts: Accepts, refuse: Refuse) -> Result<Value, ApiError> {
    let bad = |accepted: String| refuse(name, format!("{raw:?}: {accepted}"));
    match accepts {
        Accepts::Int(lo, hi) => match raw.parse::<i64>() {
            Ok(n) if (lo..=hi).contains(&n) && (lo != -520 || n == -520 || n >= 1) => Ok(json!(n)),
            _ if lo == -520 => Err(bad("valid values: -520 or 1 to 65535".into())),
            _ => Err(bad(format!("valid values: {lo} to {hi}"))),
        },
        Accepts::OneOf(values) => {
            if values.contains(&raw) {
                Ok(json!(raw))
            } else {
                Err(bad(format!("valid values: {}", values.join(", "))))
            }
        }
        Accepts::Uri => {
            let ok = raw.starts_with('/')
                && raw.len() <= 80
                && raw.chars().all(|c| c.is_ascii_graphic());
            if ok {
                Ok(json!(raw))
            } else {
                Err(bad("1 to 80 characters, starting with /".into()))
            }
        }
        Accepts::Domain => {
            let ok = raw == "$_ip"
                || (!raw.is_empty()
                    && raw.len() <= 80
                    && raw
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-'));
            if ok {
                Ok(json!(raw))
            } else {
                Err(bad("$_ip, or 1 to 80 letters, digits, '.' and '-'".into()))
            }
        }
        Accepts::HttpCodes => {
            if raw.split(',').all(|c| CODES.contains(&c)) {
                Ok(json!(raw))
            } else {
                Err(bad(format!("comma-separated {}", CODES.join(", "))))
            }
        }
    }
}

fn read(
    p: &Params,
    prefix: &str,
    table: &[(&str, Accepts)],
    refuse: Refuse,
    out: &mut Settings,
) -> Result<(), ApiError> {
    for (name, accepts) in table {
        let param = format!("{prefix}{name}");
        if let Some(raw) = p.get(&param).filter(|v| !v.is_empty()) {
            out.insert((*name).to_string(), check(&param, raw, *accepts, refuse)?);
        }
    }
    Ok(())
}

/// The CLB listener settings in `p` (create or set), checked.
pub fn clb(p: &Params, tcp: bool) -> Result<Settings, ApiError> {
    let mut out = Settings::new();
    read(p, "", CLB_COMMON, clb_refuse, &mut out)?;
    read(p, "", CLB_ACL, clb_refuse, &mut out)?;
    // Schedulers: TCP wrr, rr, sch, tch; UDP also qch.
    let scheduler = if tcp {
        [("Scheduler", Accepts::OneOf(&["wrr", "rr", "sch", "tch"]))]
    } else {
        [(
            "Scheduler",
            Accepts::OneOf(&["wrr", "rr", "sch", "tch", "qch"]),
        )]
    };
    read(p, "", &scheduler, clb_refuse, &mut out)?;
    if tcp {
        read(p, "", CLB_TCP_ONLY, clb_refuse, &mut out)?;
    } else if let Some((name, _)) = CLB_TCP_ONLY
        .iter()
        .find(|(name, _)| p.get(*name).is_some_and(|v| !v.is_empty()))
    {
        return Err(ApiError::invalid(name, "not a parameter of a UDP listener"));
    }
    Ok(out)
}

/// HTTP and HTTPS listeners: the check is always HTTP (no type), its timeout is
/// `HealthCheckTimeout`, the method `head`/`get`, schedulers `wrr`/`rr`, and
/// `StickySession` `on`/`off` (R-HTTPListener). `HealthCheck` (the switch) and
/// `ServerCertificateId` are read by the caller.
const CLB_HTTP: &[(&str, Accepts)] = &[
    ("HealthCheckURI", Accepts::Uri),
    ("HealthCheckDomain", Accepts::Domain),
    ("HealthCheckHttpCode", Accepts::HttpCodes),
    ("HealthCheckMethod", Accepts::OneOf(&["head", "get"])),
    ("HealthCheckConnectPort", Accepts::Int(-520, 65535)),
    ("HealthyThreshold", Accepts::Int(2, 10)),
    ("UnhealthyThreshold", Accepts::Int(2, 10)),
    ("HealthCheckInterval", Accepts::Int(1, 50)),
    ("HealthCheckTimeout", Accepts::Int(1, 300)),
    ("Scheduler", Accepts::OneOf(&["wrr", "rr"])),
    ("StickySession", Accepts::OneOf(&["on", "off"])),
];

/// Parameters of TCP/UDP listeners only: an HTTP listener has none of them.
const CLB_LAYER4_ONLY: [&str; 5] = [
    "HealthCheckType",
    "HealthCheckConnectTimeout",
    "HealthCheckSwitch",
    "ConnectionDrain",
    "ConnectionDrainTimeout",
];

/// The CLB HTTP/HTTPS listener settings in `p` (create or set), checked.
pub fn clb_http(p: &Params) -> Result<Settings, ApiError> {
    if let Some(name) = CLB_LAYER4_ONLY
        .iter()
        .find(|name| p.get(**name).is_some_and(|v| !v.is_empty()))
    {
        return Err(ApiError::invalid(
            name,
            "not a parameter of an HTTP or HTTPS listener",
        ));
    }
    let mut out = Settings::new();
    read(p, "", CLB_HTTP, clb_refuse, &mut out)?;
    read(p, "", CLB_ACL, clb_refuse, &mut out)?;
    Ok(out)
}

/// What a CLB `Describe{HTTP,HTTPS}ListenerAttribute` adds for these settings: the
/// stored values over the API's defaults.
pub fn clb_http_described(settings: &Settings) -> Value {
    let mut out = json!({
        "StickySession": "off", "Scheduler": "wrr", "HealthCheckTimeout": 5,
        "HealthCheckInterval": 2, "HealthyThreshold": 3, "UnhealthyThreshold": 3,
        "HealthCheckURI": "/", "HealthCheckMethod": "head", "AclStatus": "off",
    });
    for (k, v) in settings {
        out[k] = v.clone();
    }
    out
}

/// A listener's settings after `update`, checked as a whole: drain on needs its
/// timeout.
pub fn clb_merged(current: &Settings, update: Settings) -> Result<Settings, ApiError> {
    let mut merged = current.clone();
    merged.extend(update);
    if merged.get("ConnectionDrain") == Some(&json!("on"))
        && !merged.contains_key("ConnectionDrainTimeout")
    {
        return Err(ApiError::new(
            400,
            "MissingParameter",
            "ConnectionDrainTimeout is mandatory when ConnectionDrain is on.",
        ));
    }
    Ok(merged)
}

/// What a CLB `Describe…ListenerAttribute` adds for these settings: the stored values,
/// and the drain as off when never set.
pub fn clb_described(settings: &Settings) -> Value {
    let mut out = json!({"ConnectionDrain": "off", "Scheduler": "wrr", "AclStatus": "off"});
    for (k, v) in settings {
        out[k] = v.clone();
    }
    out
}

/// The NLB server group settings in `p`: `HealthCheckConfig.*` (the HTTP codes as
/// `HealthCheckConfig.HealthCheckHttpCode.N`), and the drain.
pub fn nlb(p: &Params) -> Result<(Settings, Settings), ApiError> {
    let mut health = Settings::new();
    read(p, "HealthCheckConfig.", NLB_HEALTH, nlb_refuse, &mut health)?;
    let mut codes = vec![];
    for n in 1.. {
        let param = format!("HealthCheckConfig.HealthCheckHttpCode.{n}");
        let Some(raw) = p.get(&param) else { break };
        if !CODES.contains(&raw.as_str()) {
            return Err(nlb_refuse(
                &param,
                format!("{raw:?}: valid values: {}", CODES.join(", ")),
            ));
        }
        codes.push(json!(raw));
    }
    if !codes.is_empty() {
        health.insert("HealthCheckHttpCode".into(), Value::Array(codes));
    }
    let mut group = Settings::new();
    if let Some(raw) = p.get("ConnectionDrainEnabled").filter(|v| !v.is_empty()) {
        let enabled = match raw.to_ascii_lowercase().as_str() {
            "true" => true,
            "false" => false,
            _ => {
                return Err(nlb_refuse(
                    "ConnectionDrainEnabled",
                    format!("{raw:?} is not one of true, false"),
                ))
            }
        };
        group.insert("ConnectionDrainEnabled".into(), json!(enabled));
    }
    let group_fields = [
        ("ConnectionDrainTimeout", Accepts::Int(10, 900)),
        (
            "Scheduler",
            Accepts::OneOf(&["Wrr", "Wlc", "rr", "sch", "tch", "qch"]),
        ),
    ];
    read(p, "", &group_fields, nlb_refuse, &mut group)?;
    Ok((health, group))
}

/// A server group's `HealthCheck` object in `ListServerGroups`: the API's defaults
/// under what was set.
pub fn nlb_health_listed(enabled: bool, health: &Settings) -> Value {
    let mut out = json!({
        "HealthCheckEnabled": enabled, "HealthCheckType": "TCP", "HealthCheckConnectPort": 0,
        "HealthyThreshold": 2, "UnhealthyThreshold": 2, "HealthCheckInterval": 10,
        "HealthCheckConnectTimeout": 5,
    });
    for (k, v) in health {
        out[k] = v.clone();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> Params {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn clb_values_are_checked_against_the_reference_ranges() {
        let ok = clb(
            &params(&[
                ("HealthCheckType", "http"),
                ("HealthCheckURI", "/healthz"),
                ("HealthCheckHttpCode", "http_2xx,http_3xx"),
                ("HealthCheckConnectPort", "-520"),
                ("HealthCheckInterval", "50"),
                ("ConnectionDrain", "on"),
                ("ConnectionDrainTimeout", "900"),
            ]),
            true,
        )
        .unwrap();
        assert_eq!(ok["HealthCheckURI"], json!("/healthz"));
        assert_eq!(ok["HealthCheckConnectPort"], json!(-520));
        for (name, value) in [
            ("HealthCheckInterval", "51"),
            ("HealthyThreshold", "1"),
            ("HealthCheckConnectTimeout", "0"),
            ("HealthCheckConnectPort", "0"),
            ("HealthCheckConnectPort", "-1"),
            ("ConnectionDrainTimeout", "9"),
            ("ConnectionDrain", "true"),
            ("HealthCheckType", "HTTP"),
            ("Scheduler", "wlc"),
            ("HealthCheckURI", "healthz"),
            ("HealthCheckDomain", "a_b"),
            ("HealthCheckHttpCode", "http_2xx,200"),
        ] {
            let err = clb(&params(&[(name, value)]), true).unwrap_err();
            assert!(
                err.message.contains(name),
                "{name}={value}: {}",
                err.message
            );
        }
        // A UDP listener takes no HTTP check.
        assert!(clb(&params(&[("HealthCheckURI", "/")]), false).is_err());
    }

    #[test]
    fn clb_http_values_are_checked_and_layer4_parameters_refused() {
        let ok = clb_http(&params(&[
            ("HealthCheckURI", "/ready"),
            ("HealthCheckTimeout", "300"),
            ("HealthCheckMethod", "get"),
            ("StickySession", "off"),
        ]))
        .unwrap();
        assert_eq!(clb_http_described(&ok)["HealthCheckTimeout"], json!(300));
        assert_eq!(clb_http_described(&ok)["HealthCheckURI"], json!("/ready"));
        for (name, value) in [
            ("HealthCheckTimeout", "0"),
            ("HealthCheckTimeout", "301"),
            ("HealthCheckMethod", "GET"),
            ("Scheduler", "sch"),
            ("StickySession", "yes"),
            ("HealthCheckConnectTimeout", "5"),
            ("ConnectionDrain", "on"),
        ] {
            let err = clb_http(&params(&[(name, value)])).unwrap_err();
            assert!(
                err.message.contains(name),
                "{name}={value}: {}",
                err.message
            );
        }
    }

    #[test]
    fn a_drain_turned_on_needs_its_timeout_across_calls() {
        let on = clb(&params(&[("ConnectionDrain", "on")]), true).unwrap();
        assert!(clb_merged(&Settings::new(), on.clone()).is_err());
        let timeout = clb(&params(&[("ConnectionDrainTimeout", "30")]), true).unwrap();
        let had = clb_merged(&Settings::new(), timeout).unwrap();
        assert!(clb_merged(&had, on).is_ok());
    }

    #[test]
    fn nlb_settings_read_back_under_health_check() {
        let (health, group) = nlb(&params(&[
            ("HealthCheckConfig.HealthCheckType", "HTTP"),
            ("HealthCheckConfig.HealthCheckUrl", "/ready"),
            ("HealthCheckConfig.HealthCheckHttpCode.1", "http_2xx"),
            ("HealthCheckConfig.HealthCheckHttpCode.2", "http_3xx"),
            ("HealthCheckConfig.HttpCheckMethod", "HEAD"),
            ("ConnectionDrainEnabled", "true"),
            ("ConnectionDrainTimeout", "60"),
        ]))
        .unwrap();
        let listed = nlb_health_listed(true, &health);
        assert_eq!(listed["HealthCheckUrl"], json!("/ready"));
        assert_eq!(
            listed["HealthCheckHttpCode"],
            json!(["http_2xx", "http_3xx"])
        );
        assert_eq!(listed["HealthyThreshold"], json!(2), "the default stays");
        assert_eq!(group["ConnectionDrainEnabled"], json!(true));
        for (name, value) in [
            ("HealthCheckConfig.HealthCheckInterval", "51"),
            ("HealthCheckConfig.HttpCheckMethod", "get"),
            ("HealthCheckConfig.HealthCheckHttpCode.1", "2xx"),
            ("ConnectionDrainTimeout", "901"),
            ("ConnectionDrainEnabled", "on"),
            ("Scheduler", "wrr"),
        ] {
            let err = nlb(&params(&[(name, value)])).unwrap_err();
            assert!(
                err.message.contains(name),
                "{name}={value}: {}",
                err.message
            );
        }
    }
}
