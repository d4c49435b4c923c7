//! Listener settings users ask for through Service annotations (health check,
//! connection drain, CLB access control), product-neutral, and how each product spells them: the CLB
//! TCP/UDP listener parameters, and the NLB server group parameters (NLB keeps the
//! health check and the drain on the server group, not on the listener). Pure: the
//! clients send what this renders, and compare it with what the Describe calls return.
//! It names no other module of the crate (the listener spec in `model` carries it), so
//! a listener's protocol comes in as `tcp: bool` (or `https: bool` for the HTTP and
//! HTTPS listeners of `clb_http_params`).

use serde_json::Value;

/// What the user set; `None` (or empty) fields keep the API's default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListenerSettings {
    pub health_check: HealthCheck,
    pub drain: Option<ConnectionDrain>,
    /// The scheduling algorithm, lower case (`wrr`, `wlc`, `rr`, `sch`, `tch`, `qch`;
    /// which ones a listener takes depends on the product and protocol).
    pub scheduler: Option<String>,
    /// HTTPS listeners only (`ServerCertificateId`): the certificate the listener
    /// serves. CLB refuses an HTTPS listener without one.
    pub server_certificate_id: Option<String>,
    /// CLB listeners only (`AclStatus`, `AclId`, `AclType`): NLB listeners take no
    /// access control list (NLB limits clients with security groups instead).
    pub acl: Option<ListenerAcl>,
}

/// A CLB listener's access control: which clients the listener admits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerAcl {
    pub enabled: bool,
    /// The access control list (`acl-...`); the API requires it, and the type, when
    /// `enabled`. Not sent when off.
    pub id: Option<String>,
    pub kind: Option<AclType>,
}

/// Whether the list's addresses are the only ones admitted (`white`) or the ones
/// refused (`black`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AclType {
    White,
    Black,
}

impl AclType {
    pub fn as_api_str(self) -> &'static str {
        match self {
            AclType::White => "white",
            AclType::Black => "black",
        }
    }
}

/// Connection drain: a backend set to weight 0 (or removed) keeps its open
/// connections this long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionDrain {
    pub enabled: bool,
    /// Seconds, 10 to 900 on both products; only sent when `enabled`.
    pub timeout_seconds: Option<u32>,
}

/// How a TCP listener's backends are checked (UDP listeners keep the product's UDP
/// check; neither API takes an HTTP check for them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HealthCheckType {
    Tcp,
    Http,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HealthCheck {
    /// The switch; `Some(false)` turns checks off (then nothing else is sent).
    pub enabled: Option<bool>,
    pub kind: Option<HealthCheckType>,
    /// HTTP checks only: path, host name, healthy status classes (`http_2xx`...),
    /// and the method (`GET`/`HEAD`, NLB only: a CLB TCP listener takes none).
    pub uri: Option<String>,
    pub domain: Option<String>,
    pub http_codes: Vec<String>,
    pub method: Option<String>,
    pub connect_port: Option<u16>,
    pub healthy_threshold: Option<u32>,
    pub unhealthy_threshold: Option<u32>,
    pub interval_seconds: Option<u32>,
    pub connect_timeout_seconds: Option<u32>,
    /// HTTP and HTTPS listeners only (`HealthCheckTimeout`, 1 to 300 s): how long a
    /// check waits for the answer. TCP and UDP listeners take `connect_timeout_seconds`.
    pub timeout_seconds: Option<u32>,
}

type Pairs = Vec<(String, String)>;

fn push(out: &mut Pairs, key: &str, value: impl ToString) {
    out.push((key.to_string(), value.to_string()));
}

impl ListenerSettings {
    /// Nothing set: the listener keeps whatever the API defaults to, and an existing
    /// one is not read back.
    pub fn is_default(&self) -> bool {
        self == &ListenerSettings::default()
    }

    /// Whether the HTTP-only fields apply (a TCP listener with an HTTP check).
    fn http(&self, tcp: bool) -> bool {
        tcp && self.health_check.kind == Some(HealthCheckType::Http)
    }

    /// Parameters of `CreateLoadBalancer{TCP,UDP}Listener` and
    /// `SetLoadBalancer{TCP,UDP}ListenerAttribute` (the same names in both).
    pub fn clb_params(&self, tcp: bool) -> Pairs {
        let mut out = Pairs::new();
        let hc = &self.health_check;
        if let Some(enabled) = hc.enabled {
            push(
                &mut out,
                "HealthCheckSwitch",
                if enabled { "on" } else { "off" },
            );
        }
        if hc.enabled != Some(false) {
            if tcp {
                if let Some(kind) = hc.kind {
                    let kind = match kind {
                        HealthCheckType::Tcp => "tcp",
                        HealthCheckType::Http => "http",
                    };
                    push(&mut out, "HealthCheckType", kind);
                }
            }
            if self.http(tcp) {
                if let Some(uri) = &hc.uri {
                    push(&mut out, "HealthCheckURI", uri);
                }
                if let Some(domain) = &hc.domain {
                    push(&mut out, "HealthCheckDomain", domain);
                }
                if !hc.http_codes.is_empty() {
                    push(&mut out, "HealthCheckHttpCode", hc.http_codes.join(","));
                }
            }
            self.common_numbers(&mut out, "");
        }
        if let Some(scheduler) = &self.scheduler {
            push(&mut out, "Scheduler", scheduler);
        }
        if let Some(drain) = self.drain {
            push(
                &mut out,
                "ConnectionDrain",
                if drain.enabled { "on" } else { "off" },
            );
            if let (true, Some(t)) = (drain.enabled, drain.timeout_seconds) {
                push(&mut out, "ConnectionDrainTimeout", t);
            }
        }
        self.acl_params(&mut out);
        out
    }

    /// `AclStatus`, and with it on the list and its type (all CLB listener kinds
    /// take the three under these names). Off sends the switch only.
    fn acl_params(&self, out: &mut Pairs) {
        let Some(acl) = &self.acl else { return };
        push(out, "AclStatus", if acl.enabled { "on" } else { "off" });
        if acl.enabled {
            if let Some(id) = &acl.id {
                push(out, "AclId", id);
            }
            if let Some(kind) = acl.kind {
                push(out, "AclType", kind.as_api_str());
            }
        }
    }

    /// Parameters of `CreateLoadBalancer{HTTP,HTTPS}Listener` and
    /// `SetLoadBalancer{HTTP,HTTPS}ListenerAttribute`: the check is always HTTP and
    /// switched by `HealthCheck` (required on create: on unless the user said off,
    /// since the gate waits on it), sessions are not sticky (`StickySession`, required),
    /// the timeout is `HealthCheckTimeout`, and there is no drain (neither API takes
    /// one). HTTPS adds the certificate.
    pub fn clb_http_params(&self, https: bool) -> Pairs {
        let mut out = Pairs::new();
        let hc = &self.health_check;
        let enabled = hc.enabled.unwrap_or(true);
        push(&mut out, "HealthCheck", if enabled { "on" } else { "off" });
        push(&mut out, "StickySession", "off");
        if enabled {
            if let Some(uri) = &hc.uri {
                push(&mut out, "HealthCheckURI", uri);
            }
            if let Some(domain) = &hc.domain {
                push(&mut out, "HealthCheckDomain", domain);
            }
            if !hc.http_codes.is_empty() {
                push(&mut out, "HealthCheckHttpCode", hc.http_codes.join(","));
            }
            if let Some(method) = &hc.method {
                // CLB spells the method in lower case (`head`, `get`).
                push(&mut out, "HealthCheckMethod", method.to_ascii_lowercase());
            }
            let numbers = [
                ("HealthCheckConnectPort", hc.connect_port.map(u32::from)),
                ("HealthyThreshold", hc.healthy_threshold),
                ("UnhealthyThreshold", hc.unhealthy_threshold),
                ("HealthCheckInterval", hc.interval_seconds),
                ("HealthCheckTimeout", hc.timeout_seconds),
            ];
            for (name, value) in numbers {
                if let Some(v) = value {
                    push(&mut out, name, v);
                }
            }
        }
        if let Some(scheduler) = &self.scheduler {
            push(&mut out, "Scheduler", scheduler);
        }
        if https {
            if let Some(cert) = &self.server_certificate_id {
                push(&mut out, "ServerCertificateId", cert);
            }
        }
        self.acl_params(&mut out);
        out
    }

    /// Parameters of NLB `CreateServerGroup` and `UpdateServerGroupAttribute`. The
    /// check is always switched explicitly (on unless the user said off), as rollgate
    /// always did: the gate waits on it. `acl` has no NLB spelling and is not sent.
    pub fn nlb_params(&self, tcp: bool) -> Pairs {
        const HC: &str = "HealthCheckConfig.";
        let mut out = Pairs::new();
        let hc = &self.health_check;
        let enabled = hc.enabled.unwrap_or(true);
        push(&mut out, &format!("{HC}HealthCheckEnabled"), enabled);
        if enabled {
            if tcp {
                if let Some(kind) = hc.kind {
                    let kind = match kind {
                        HealthCheckType::Tcp => "TCP",
                        HealthCheckType::Http => "HTTP",
                    };
                    push(&mut out, &format!("{HC}HealthCheckType"), kind);
                }
            }
            if self.http(tcp) {
                if let Some(uri) = &hc.uri {
                    push(&mut out, &format!("{HC}HealthCheckUrl"), uri);
                }
                if let Some(domain) = &hc.domain {
                    push(&mut out, &format!("{HC}HealthCheckDomain"), domain);
                }
                for (i, code) in hc.http_codes.iter().enumerate() {
                    push(
                        &mut out,
                        &format!("{HC}HealthCheckHttpCode.{}", i + 1),
                        code,
                    );
                }
                if let Some(method) = &hc.method {
                    push(&mut out, &format!("{HC}HttpCheckMethod"), method);
                }
            }
            self.common_numbers(&mut out, HC);
        }
        if let Some(scheduler) = &self.scheduler {
            // NLB capitalises the weighted ones (`Wrr`, `Wlc`) only.
            let spelled = match scheduler.as_str() {
                "wrr" => "Wrr",
                "wlc" => "Wlc",
                other => other,
            };
            push(&mut out, "Scheduler", spelled);
        }
        if let Some(drain) = self.drain {
            push(&mut out, "ConnectionDrainEnabled", drain.enabled);
            if let (true, Some(t)) = (drain.enabled, drain.timeout_seconds) {
                push(&mut out, "ConnectionDrainTimeout", t);
            }
        }
        out
    }

    /// The numbers both products name alike (NLB under `HealthCheckConfig.`).
    fn common_numbers(&self, out: &mut Pairs, prefix: &str) {
        let hc = &self.health_check;
        let numbers = [
            ("HealthCheckConnectPort", hc.connect_port.map(u32::from)),
            ("HealthyThreshold", hc.healthy_threshold),
            ("UnhealthyThreshold", hc.unhealthy_threshold),
            ("HealthCheckInterval", hc.interval_seconds),
            ("HealthCheckConnectTimeout", hc.connect_timeout_seconds),
        ];
        for (name, value) in numbers {
            if let Some(v) = value {
                push(out, &format!("{prefix}{name}"), v);
            }
        }
    }
}

/// A JSON scalar as the query string would carry it.
fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Which of `wanted` (CLB listener parameters) the `Describe…ListenerAttribute`
/// answer differs on. The switch reads back as `HealthCheck` (`on`/`off`).
pub fn clb_differences(wanted: &Pairs, described: &Value) -> Vec<String> {
    wanted
        .iter()
        .filter(|(key, value)| {
            let field = if key == "HealthCheckSwitch" {
                "HealthCheck"
            } else {
                key.as_str()
            };
            let now = described.get(field).and_then(scalar);
            !now.is_some_and(|now| now.eq_ignore_ascii_case(value))
        })
        .map(|(key, _)| key.clone())
        .collect()
}

/// Which of `wanted` (NLB server group parameters) one `ListServerGroups` entry
/// differs on: `HealthCheckConfig.X` reads back as `HealthCheck.X`, the HTTP codes as
/// one list.
pub fn nlb_differences(wanted: &Pairs, group: &Value) -> Vec<String> {
    const HC: &str = "HealthCheckConfig.";
    const CODES: &str = "HealthCheckConfig.HealthCheckHttpCode.";
    let mut out = vec![];
    let codes: Vec<&str> = wanted
        .iter()
        .filter(|(k, _)| k.starts_with(CODES))
        .map(|(_, v)| v.as_str())
        .collect();
    if !codes.is_empty() {
        let now: Vec<String> = group["HealthCheck"]["HealthCheckHttpCode"]
            .as_array()
            .map(|a| a.iter().filter_map(scalar).collect())
            .unwrap_or_default();
        if now != codes {
            out.push("HealthCheckConfig.HealthCheckHttpCode".to_string());
        }
    }
    for (key, value) in wanted.iter().filter(|(k, _)| !k.starts_with(CODES)) {
        let now = match key.strip_prefix(HC) {
            Some(field) => group["HealthCheck"].get(field),
            None => group.get(key),
        }
        .and_then(scalar);
        if !now.is_some_and(|now| now.eq_ignore_ascii_case(value)) {
            out.push(key.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn http_check() -> ListenerSettings {
        ListenerSettings {
            health_check: HealthCheck {
                kind: Some(HealthCheckType::Http),
                uri: Some("/healthz".into()),
                domain: Some("shop.example".into()),
                http_codes: vec!["http_2xx".into(), "http_3xx".into()],
                method: Some("HEAD".into()),
                connect_port: Some(8081),
                healthy_threshold: Some(3),
                unhealthy_threshold: Some(4),
                interval_seconds: Some(5),
                connect_timeout_seconds: Some(2),
                enabled: None,
                timeout_seconds: Some(7),
            },
            drain: Some(ConnectionDrain {
                enabled: true,
                timeout_seconds: Some(60),
            }),
            scheduler: Some("wrr".into()),
            server_certificate_id: Some("cert-1".into()),
            acl: None,
        }
    }

    fn keys(pairs: &Pairs) -> Vec<&str> {
        pairs.iter().map(|(k, _)| k.as_str()).collect()
    }

    #[test]
    fn nothing_set_sends_nothing_on_clb_and_only_the_switch_on_nlb() {
        let s = ListenerSettings::default();
        assert!(s.is_default());
        assert!(s.clb_params(true).is_empty());
        assert_eq!(
            s.nlb_params(true),
            vec![(
                "HealthCheckConfig.HealthCheckEnabled".to_string(),
                "true".to_string()
            )]
        );
    }

    #[test]
    fn an_http_check_is_spelled_per_product_and_per_listener_protocol() {
        let s = http_check();
        let tcp = s.clb_params(true);
        assert_eq!(
            keys(&tcp),
            [
                "HealthCheckType",
                "HealthCheckURI",
                "HealthCheckDomain",
                "HealthCheckHttpCode",
                "HealthCheckConnectPort",
                "HealthyThreshold",
                "UnhealthyThreshold",
                "HealthCheckInterval",
                "HealthCheckConnectTimeout",
                "Scheduler",
                "ConnectionDrain",
                "ConnectionDrainTimeout",
            ]
        );
        assert!(tcp.contains(&("HealthCheckType".into(), "http".into())));
        assert!(tcp.contains(&("HealthCheckHttpCode".into(), "http_2xx,http_3xx".into())));
        // A UDP listener takes neither the type nor the HTTP fields.
        let udp = s.clb_params(false);
        assert!(!keys(&udp).iter().any(|k| k.contains("Type")
            || k.contains("URI")
            || k.contains("Domain")
            || k.contains("HttpCode")));
        assert!(keys(&udp).contains(&"HealthCheckConnectTimeout"));
        let nlb = s.nlb_params(true);
        assert!(nlb.contains(&("HealthCheckConfig.HealthCheckType".into(), "HTTP".into())));
        assert!(nlb.contains(&("HealthCheckConfig.HealthCheckUrl".into(), "/healthz".into())));
        assert!(nlb.contains(&("HealthCheckConfig.HttpCheckMethod".into(), "HEAD".into())));
        assert!(nlb.contains(&(
            "HealthCheckConfig.HealthCheckHttpCode.2".into(),
            "http_3xx".into()
        )));
        assert!(nlb.contains(&("ConnectionDrainEnabled".into(), "true".into())));
        assert!(nlb.contains(&("Scheduler".into(), "Wrr".into())));
        assert!(tcp.contains(&("Scheduler".into(), "wrr".into())));
        assert!(nlb.contains(&("ConnectionDrainTimeout".into(), "60".into())));
    }

    /// HTTP and HTTPS listeners: the check is HTTP by nature (no type), its timeout is
    /// `HealthCheckTimeout` (not the TCP connect timeout), the method is lower case,
    /// there is no drain, and only HTTPS carries the certificate. TCP listeners never
    /// get the HTTP listener's timeout.
    #[test]
    fn http_and_https_listeners_take_their_own_parameters() {
        let s = http_check();
        let http = s.clb_http_params(false);
        assert_eq!(
            keys(&http),
            [
                "HealthCheck",
                "StickySession",
                "HealthCheckURI",
                "HealthCheckDomain",
                "HealthCheckHttpCode",
                "HealthCheckMethod",
                "HealthCheckConnectPort",
                "HealthyThreshold",
                "UnhealthyThreshold",
                "HealthCheckInterval",
                "HealthCheckTimeout",
                "Scheduler",
            ]
        );
        assert!(http.contains(&("HealthCheck".into(), "on".into())));
        assert!(http.contains(&("HealthCheckMethod".into(), "head".into())));
        assert!(http.contains(&("HealthCheckTimeout".into(), "7".into())));
        let https = s.clb_http_params(true);
        assert_eq!(
            https.last().unwrap(),
            &("ServerCertificateId".into(), "cert-1".into())
        );
        assert!(!keys(&s.clb_params(true)).contains(&"HealthCheckTimeout"));
        let mut off = s.clone();
        off.health_check.enabled = Some(false);
        assert_eq!(
            keys(&off.clb_http_params(true)),
            [
                "HealthCheck",
                "StickySession",
                "Scheduler",
                "ServerCertificateId"
            ]
        );
    }

    #[test]
    fn checks_switched_off_send_only_the_switch() {
        let mut s = http_check();
        s.health_check.enabled = Some(false);
        s.drain = None;
        s.scheduler = None;
        assert_eq!(
            s.clb_params(true),
            vec![("HealthCheckSwitch".to_string(), "off".to_string())]
        );
        assert_eq!(
            s.nlb_params(true),
            vec![(
                "HealthCheckConfig.HealthCheckEnabled".to_string(),
                "false".to_string()
            )]
        );
    }

    #[test]
    fn differences_are_read_from_the_describe_answers() {
        let s = http_check();
        let wanted = s.clb_params(true);
        let mut described = json!({
            "HealthCheck": "on", "HealthCheckType": "http", "HealthCheckURI": "/healthz",
            "HealthCheckDomain": "shop.example", "HealthCheckHttpCode": "http_2xx,http_3xx",
            "HealthCheckConnectPort": 8081, "HealthyThreshold": 3, "UnhealthyThreshold": 4,
            "HealthCheckInterval": 5, "HealthCheckConnectTimeout": 2,
            "ConnectionDrain": "on", "ConnectionDrainTimeout": 60, "Scheduler": "wrr",
        });
        assert!(clb_differences(&wanted, &described).is_empty());
        described["HealthCheckURI"] = json!("/");
        described
            .as_object_mut()
            .unwrap()
            .remove("ConnectionDrainTimeout");
        assert_eq!(
            clb_differences(&wanted, &described),
            ["HealthCheckURI", "ConnectionDrainTimeout"]
        );

        let wanted = s.nlb_params(true);
        let mut group = json!({
            "ConnectionDrainEnabled": true, "ConnectionDrainTimeout": 60, "Scheduler": "Wrr",
            "HealthCheck": {
                "HealthCheckEnabled": true, "HealthCheckType": "HTTP", "HealthCheckUrl": "/healthz",
                "HealthCheckDomain": "shop.example", "HealthCheckHttpCode": ["http_2xx", "http_3xx"],
                "HttpCheckMethod": "HEAD", "HealthCheckConnectPort": 8081, "HealthyThreshold": 3,
                "UnhealthyThreshold": 4, "HealthCheckInterval": 5, "HealthCheckConnectTimeout": 2,
            },
        });
        assert!(nlb_differences(&wanted, &group).is_empty());
        group["HealthCheck"]["HealthCheckHttpCode"] = json!(["http_2xx"]);
        group["ConnectionDrainEnabled"] = json!(false);
        assert_eq!(
            nlb_differences(&wanted, &group),
            [
                "HealthCheckConfig.HealthCheckHttpCode",
                "ConnectionDrainEnabled"
            ]
        );
    }
    /// The three ACL parameters on every CLB listener kind when on, the switch alone
    /// when off, nothing on NLB; read back from the Describe answer.
    #[test]
    fn access_control_is_clb_only_and_sends_the_list_only_when_on() {
        let mut s = ListenerSettings {
            acl: Some(ListenerAcl {
                enabled: true,
                id: Some("acl-1".into()),
                kind: Some(AclType::White),
            }),
            ..Default::default()
        };
        let acl = |pairs: Pairs| -> Pairs {
            pairs
                .into_iter()
                .filter(|(k, _)| k.starts_with("Acl"))
                .collect()
        };
        let on: Pairs = vec![
            ("AclStatus".into(), "on".into()),
            ("AclId".into(), "acl-1".into()),
            ("AclType".into(), "white".into()),
        ];
        assert_eq!(acl(s.clb_params(true)), on);
        assert_eq!(acl(s.clb_params(false)), on);
        assert_eq!(acl(s.clb_http_params(true)), on);
        assert!(acl(s.nlb_params(true)).is_empty());
        assert!(!s.is_default());
        let described = json!({"AclStatus": "on", "AclId": "acl-1", "AclType": "white"});
        assert!(clb_differences(&s.clb_params(true), &described).is_empty());
        let black = json!({"AclStatus": "on", "AclId": "acl-1", "AclType": "black"});
        assert_eq!(clb_differences(&s.clb_params(true), &black), ["AclType"]);
        s.acl = Some(ListenerAcl {
            enabled: false,
            id: Some("acl-1".into()),
            kind: Some(AclType::Black),
        });
        assert_eq!(
            acl(s.clb_params(true)),
            vec![("AclStatus".to_string(), "off".to_string())]
        );
    }
}
