//! The server groups rollgate publishes on a Service it serves (annotation
//! `rollgate.io/server-groups`): their JSON form, what a load balancer's listeners make
//! of it, and whether the Service needs a write (pure). The write is in
//! `service_writes`; `kubectl rollgate gates` reads it back from the cluster, since the
//! plugin never asks the controller or the cloud.
use alibaba_lb::ServerGroupRef;
use serde::{Deserialize, Serialize};

/// One listener of the Service's load balancer and the server group it forwards to.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PublishedGroup {
    pub port: u16,
    /// `TCP`, `UDP`, `HTTP` or `HTTPS`: one port may carry two listeners (TCP and UDP).
    pub protocol: String,
    pub load_balancer_id: String,
    /// NLB listeners have ids; CLB listeners are named by port and protocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listener_id: Option<String>,
    pub server_group_id: String,
}

/// What to publish for the load balancer's listeners, in a fixed order (port, then
/// protocol), so the same listeners always give the same value.
pub fn published_groups(listeners: &[ServerGroupRef]) -> Vec<PublishedGroup> {
    let mut groups: Vec<PublishedGroup> = listeners
        .iter()
        .map(|l| PublishedGroup {
            port: l.listener_port,
            protocol: l.listener_protocol.as_api_str().to_string(),
            load_balancer_id: l.load_balancer_id.clone(),
            listener_id: l.listener_id.clone(),
            server_group_id: l.server_group_id.clone(),
        })
        .collect();
    groups.sort();
    groups
}

/// The annotation's value.
pub fn encode(groups: &[PublishedGroup]) -> String {
    serde_json::to_string(groups).expect("plain data serializes")
}

/// The annotation as published; `None` when absent or not readable (edited by hand).
pub fn decode(value: Option<&str>) -> Option<Vec<PublishedGroup>> {
    serde_json::from_str(value?).ok()
}

/// Whether the Service must be written: only when what it shows differs from `wanted`
/// (read as data, so a re-spaced value is no reason), so a steady Service is never
/// written again poll after poll.
pub fn needs_write(current: Option<&str>, wanted: &[PublishedGroup]) -> bool {
    decode(current).as_deref() != Some(wanted)
}

#[cfg(test)]
mod tests {
    use alibaba_lb::ListenerProtocol;

    use super::*;

    fn listener(port: u16, protocol: ListenerProtocol, group: &str) -> ServerGroupRef {
        ServerGroupRef {
            load_balancer_id: "nlb-1".into(),
            server_group_id: group.into(),
            listener_port: port,
            listener_protocol: protocol,
            listener_id: Some(format!("lsn-{port}-{}", protocol.as_api_str())),
        }
    }

    #[test]
    fn listeners_publish_in_a_fixed_order_and_read_back() {
        use ListenerProtocol::*;
        let listeners = [
            listener(443, Tcp, "sgp-443"),
            listener(53, Udp, "sgp-53u"),
            listener(53, Tcp, "sgp-53t"),
        ];
        let groups = published_groups(&listeners);
        let order: Vec<(u16, &str)> = groups
            .iter()
            .map(|g| (g.port, g.protocol.as_str()))
            .collect();
        assert_eq!(order, [(53, "TCP"), (53, "UDP"), (443, "TCP")]);
        let mut reversed = listeners.to_vec();
        reversed.reverse();
        assert_eq!(
            published_groups(&reversed),
            groups,
            "order of the cloud's answer"
        );

        let value = encode(&groups);
        let json: serde_json::Value = serde_json::from_str(&value).unwrap();
        assert_eq!(
            json[0],
            serde_json::json!({"port": 53, "protocol": "TCP", "loadBalancerId": "nlb-1",
                "listenerId": "lsn-53-TCP", "serverGroupId": "sgp-53t"})
        );
        assert_eq!(decode(Some(&value)), Some(groups));
    }

    #[test]
    fn a_clb_listener_has_no_listener_id_in_the_value() {
        let mut clb = listener(80, ListenerProtocol::Tcp, "rsp-80");
        clb.listener_id = None;
        let value = encode(&published_groups(&[clb]));
        assert!(!value.contains("listenerId"), "{value}");
    }

    #[test]
    fn the_service_is_written_only_when_what_it_shows_differs() {
        let groups = published_groups(&[listener(80, ListenerProtocol::Tcp, "sgp-80")]);
        let same = encode(&groups);
        let spaced = serde_json::to_string_pretty(&groups).unwrap();
        let moved = encode(&published_groups(&[listener(
            80,
            ListenerProtocol::Tcp,
            "sgp-new",
        )]));
        #[rustfmt::skip]
        let cases: &[(&str, Option<&str>, bool)] = &[
            ("nothing published yet", None, true),
            ("the same value", Some(&same), false),
            ("the same data, spaced otherwise", Some(&spaced), false),
            ("another group", Some(&moved), true),
            ("edited into something unreadable", Some("lb-1/sgp-80"), true),
            ("no listener then, one now", Some("[]"), true),
        ];
        for (case, current, want) in cases {
            assert_eq!(needs_write(*current, &groups), *want, "{case}");
        }
        assert!(!needs_write(Some("[]"), &[]), "none then, none now");
    }
}
