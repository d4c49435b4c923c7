//! `protocol-port` and `cert-id`: which Service ports get an HTTP or HTTPS CLB
//! listener, and the certificate HTTPS listeners serve.
use std::collections::BTreeMap;

use alibaba_lb::ListenerProtocol;

use super::read::{full_name, get, invalid};
use crate::gates::model::ServicePort;

/// `protocol-port` and `cert-id`: the listener protocol of each Service port the
/// annotation names (the others keep their own, TCP or UDP), and the server
/// certificate HTTPS listeners serve.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListenerProtocols {
    pub by_port: BTreeMap<u16, ListenerProtocol>,
    pub certificate_id: Option<String>,
}

impl ListenerProtocols {
    /// The listener protocol of `port`: the annotation's, else the port's own.
    pub fn of(&self, port: &ServicePort) -> ListenerProtocol {
        self.by_port
            .get(&port.port)
            .copied()
            .unwrap_or(if port.protocol == "UDP" {
                ListenerProtocol::Udp
            } else {
                ListenerProtocol::Tcp
            })
    }

    /// Whether any port gets an HTTP or HTTPS listener (CLB only).
    pub fn any_layer7(&self) -> bool {
        self.by_port.values().any(|p| p.is_layer7())
    }
}

/// Reads `protocol-port` (`"https:443,http:80"`, Alibaba's form) against the
/// Service's `ports`, and `cert-id`. Refused, with the accepted forms: a malformed
/// entry, a port the Service does not have, a protocol the port's own protocol cannot
/// carry (HTTP and HTTPS need a TCP port), and HTTPS without `cert-id` (CLB refuses an
/// HTTPS listener without a certificate).
pub fn listener_protocols(
    annotations: &BTreeMap<String, String>,
    ports: &[ServicePort],
) -> Result<ListenerProtocols, String> {
    const FORMS: &str =
        "comma-separated <protocol>:<port> of the Service's ports, protocol one of http, https, tcp, udp (e.g. \"https:443,http:80\")";
    let mut problems = vec![];
    let certificate_id = get(annotations, "cert-id").and_then(|raw| {
        let ok = raw.len() <= 200
            && raw
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if ok {
            Some(raw.to_string())
        } else {
            problems.push(invalid(
                "cert-id",
                raw,
                "a server certificate id (letters, digits, '-', '_', '.')",
            ));
            None
        }
    });
    let mut by_port = BTreeMap::new();
    if let Some(raw) = get(annotations, "protocol-port") {
        for entry in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let parsed = entry.split_once(':').and_then(|(protocol, port)| {
                let protocol = ListenerProtocol::parse(protocol.trim())?;
                Some((protocol, port.trim().parse::<u16>().ok()?))
            });
            let Some((protocol, number)) = parsed else {
                problems.push(invalid("protocol-port", entry, FORMS));
                continue;
            };
            let Some(port) = ports.iter().find(|p| p.port == number) else {
                problems.push(format!(
                    "annotation {}: {entry:?} names port {number}, which the Service does not have; accepted: {FORMS}",
                    full_name("protocol-port")
                ));
                continue;
            };
            let udp_port = port.protocol == "UDP";
            if udp_port != (protocol == ListenerProtocol::Udp) {
                problems.push(format!(
                    "annotation {}: {entry:?}: port {number} is {}; accepted: {} on it",
                    full_name("protocol-port"),
                    if udp_port { "UDP" } else { "TCP" },
                    if udp_port {
                        "udp"
                    } else {
                        "http, https or tcp"
                    },
                ));
                continue;
            }
            if protocol == ListenerProtocol::Https && certificate_id.is_none() {
                problems.push(format!(
                    "annotation {}: {entry:?} needs {} (the id of the server certificate the HTTPS listener serves)",
                    full_name("protocol-port"),
                    full_name("cert-id")
                ));
                continue;
            }
            by_port.insert(number, protocol);
        }
    }
    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    Ok(ListenerProtocols {
        by_port,
        certificate_id,
    })
}
