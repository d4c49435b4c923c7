//! Wiring rollgate no longer wants: after a Service's ports, protocols or load balancer
//! change, the listeners and server groups rollgate made for the old ones. Pure
//! (`unwanted_wiring`, table-tested) and applied by `remove_unwanted_wiring` (listener first, then
//! its group, so no listener is ever left forwarding to nothing).
//!
//! What is rollgate's is told by the group's name alone (`k8s/<port>/<owner hash>
//! [/udp]`, or the legacy `k8s/<port>/<svc>/<ns>/<former cluster id>` of earlier
//! versions; NLB's `.` form too), read within one load balancer rollgate
//! serves, never searched for across the region: a listener is rollgate's when it
//! forwards to one of these groups. Everything else (the user's listeners and groups on
//! an attached load balancer, another Service's, another cluster's) is never touched.
use std::collections::BTreeSet;

use alibaba_lb::{
    Error as CloudError, ListenerProtocol, ListenerWiring, LoadBalancerSpec, Product, Wiring,
};

use super::context::Context;
use super::model::Owner;

/// Whether `group_name` is a name rollgate gives this Service's groups (any port):
/// the marker (`k8s/<port>/<hash>[/udp]`), or the legacy one earlier versions used
/// under `legacy_cluster_id`, NLB's `.` form of either too.
pub fn owned_group_name(
    group_name: &str,
    service: &str,
    namespace: &str,
    cluster_id: &str,
    legacy_cluster_id: Option<&str>,
) -> bool {
    let Some(rest) = group_name
        .strip_prefix("k8s/")
        .or_else(|| group_name.strip_prefix("k8s."))
    else {
        return false;
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let Ok(port) = digits.parse::<u16>() else {
        return false;
    };
    let owner = Owner {
        service,
        namespace,
        cluster_id,
        legacy_cluster_id,
    };
    [Some(owner.marker(port)), owner.legacy_marker(port)]
        .into_iter()
        .flatten()
        .flat_map(|marker| [format!("{marker}/udp"), marker])
        .any(|name| group_name == name || group_name == alibaba_lb::nlb::server_group_name(&name))
}

/// What to delete, in order: listeners, then groups.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnwantedWiring {
    pub listeners: Vec<ListenerWiring>,
    pub groups: Vec<String>,
}

impl UnwantedWiring {
    pub fn is_empty(&self) -> bool {
        self.listeners.is_empty() && self.groups.is_empty()
    }
}

/// The listeners and groups of `wiring` that are rollgate's (`owned` by name) and not
/// in `wanted` (the spec's listeners and group names). A wanted listener is never
/// deleted, nor a group a listener rollgate keeps (or does not own) forwards to.
pub fn unwanted_wiring(
    wiring: &Wiring,
    wanted: &[(u16, ListenerProtocol, String)],
    owned: impl Fn(&str) -> bool,
) -> UnwantedWiring {
    let name_of = |id: &str| {
        wiring
            .groups
            .iter()
            .find(|g| g.id == id)
            .map(|g| g.name.as_str())
    };
    let wanted_names: BTreeSet<String> = wanted
        .iter()
        .flat_map(|(_, _, name)| [name.clone(), alibaba_lb::nlb::server_group_name(name)])
        .collect();
    let is_wanted_listener = |l: &ListenerWiring| {
        wanted
            .iter()
            .any(|(port, protocol, _)| *port == l.port && *protocol == l.protocol)
    };
    let ours = |id: &str| name_of(id).is_some_and(&owned);
    let listeners: Vec<ListenerWiring> = wiring
        .listeners
        .iter()
        .filter(|l| !is_wanted_listener(l) && ours(&l.server_group_id))
        .cloned()
        .collect();
    let still_used = |id: &str| {
        wiring
            .listeners
            .iter()
            .any(|l| l.server_group_id == id && !listeners.contains(l))
    };
    let groups = wiring
        .groups
        .iter()
        .filter(|g| owned(&g.name) && !wanted_names.contains(&g.name) && !still_used(&g.id))
        .map(|g| g.id.clone())
        .collect();
    UnwantedWiring { listeners, groups }
}

/// Reads the load balancer's wiring and deletes what `unwanted_wiring` says is no longer wanted.
/// Returns what was deleted.
pub async fn remove_unwanted_wiring(
    ctx: &Context,
    product: Product,
    load_balancer_id: &str,
    spec: &LoadBalancerSpec,
    service: &str,
    namespace: &str,
) -> Result<UnwantedWiring, CloudError> {
    let wanted: Vec<_> = spec
        .listeners
        .iter()
        .map(|l| (l.port, l.protocol, l.server_group_name.clone()))
        .collect();
    remove_unwanted(ctx, product, load_balancer_id, &wanted, service, namespace).await
}

/// [`remove_unwanted_wiring`] for the wanted listeners given as (port, protocol, group name):
/// none wanted takes every listener and group of this Service's off the load balancer
/// (a Service moved off it).
pub async fn remove_unwanted(
    ctx: &Context,
    product: Product,
    load_balancer_id: &str,
    wanted: &[(u16, ListenerProtocol, String)],
    service: &str,
    namespace: &str,
) -> Result<UnwantedWiring, CloudError> {
    let client = ctx.cloud.client(product);
    let Some(wiring) = client.wiring(load_balancer_id).await? else {
        return Ok(UnwantedWiring::default());
    };
    let settings = &ctx.settings;
    let unwanted = unwanted_wiring(&wiring, wanted, |name| {
        owned_group_name(
            name,
            service,
            namespace,
            &settings.cluster_id,
            settings.legacy_cluster_id.as_deref(),
        )
    });
    for listener in &unwanted.listeners {
        client.delete_listener(load_balancer_id, listener).await?;
        tracing::info!(
            load_balancer = load_balancer_id,
            port = listener.port,
            protocol = listener.protocol.as_api_str(),
            "deleted a listener rollgate no longer wants"
        );
    }
    for group in &unwanted.groups {
        client.delete_server_group(group).await?;
        tracing::info!(
            load_balancer = load_balancer_id,
            group,
            "deleted a server group rollgate no longer wants"
        );
    }
    Ok(unwanted)
}

#[cfg(test)]
mod tests {
    use alibaba_lb::ServerGroupName;

    use super::*;
    use ListenerProtocol::*;

    fn listener(port: u16, protocol: ListenerProtocol, group: &str) -> ListenerWiring {
        ListenerWiring {
            port,
            protocol,
            listener_id: None,
            server_group_id: group.into(),
        }
    }

    fn group(id: &str, name: &str) -> ServerGroupName {
        ServerGroupName {
            id: id.into(),
            name: name.into(),
        }
    }

    fn owned(name: &str) -> bool {
        owned_group_name(name, "web", "shop", "c1", Some("kubernetes"))
    }

    /// The name rollgate gives this Service's group on `port` now.
    fn m(port: u16) -> String {
        crate::gates::model::owner_description(port, "web", "shop", "c1")
    }

    #[test]
    fn the_group_names_of_this_service_are_owned_and_no_other() {
        let hash = |svc: &str, ns: &str, cluster: &str| {
            crate::gates::model::owner_description(80, svc, ns, cluster)
        };
        let nlb = alibaba_lb::nlb::server_group_name;
        let cases = [
            (m(80), true),
            (format!("{}/udp", m(8080)), true),
            (nlb(&m(80)), true),
            (nlb(&format!("{}/udp", m(53))), true),
            // Earlier versions' names under the former id: adopted.
            ("k8s/80/web/shop/kubernetes".into(), true),
            ("k8s.53.web.shop.kubernetes.udp".into(), true),
            // Under the current id in the legacy shape: never written, not ours.
            ("k8s/80/web/shop/c1".into(), false),
            (hash("web", "shop", "c2"), false),
            (hash("web2", "shop", "c1"), false),
            (hash("web", "shop2", "c1"), false),
            ("k8s/80/web/shop/c2".into(), false),
            ("k8s/80/web2/shop/kubernetes".into(), false),
            (format!("{}/tcp", m(80)), false),
            ("k8s/x/web/shop/kubernetes".into(), false),
            ("my-group".into(), false),
        ];
        for (name, want) in cases {
            assert_eq!(owned(&name), want, "{name}");
        }
    }

    #[test]
    fn only_rollgates_unwanted_listeners_and_groups_go_listeners_first() {
        let wiring = Wiring {
            listeners: vec![
                listener(80, Tcp, "g-old"),
                listener(8080, Tcp, "g-new"),
                listener(443, Tcp, "g-user"),
                listener(53, Udp, "g-udp"),
            ],
            groups: vec![
                group("g-old", &m(80)),
                group("g-new", &m(8080)),
                group("g-user", "my-group"),
                group("g-udp", &m(53)),
                group("g-orphan", &m(9000)),
                group("g-other-cluster", "k8s/80/web/shop/c2"),
                group("g-legacy", "k8s/8081/web/shop/kubernetes"),
            ],
        };
        let wanted = vec![(8080, Tcp, m(8080))];
        let unwanted = unwanted_wiring(&wiring, &wanted, owned);
        assert_eq!(
            unwanted,
            UnwantedWiring {
                listeners: vec![listener(80, Tcp, "g-old"), listener(53, Udp, "g-udp")],
                groups: vec![
                    "g-old".into(),
                    "g-udp".into(),
                    "g-orphan".into(),
                    "g-legacy".into()
                ],
            }
        );
    }

    #[test]
    fn a_protocol_change_keeps_the_port_but_not_the_old_protocol() {
        let wiring = Wiring {
            listeners: vec![listener(53, Tcp, "g-tcp"), listener(53, Udp, "g-udp")],
            groups: vec![
                group("g-tcp", &m(53)),
                group("g-udp", &format!("{}/udp", m(53))),
            ],
        };
        // The TCP port went away; UDP alone keeps the plain name.
        let wanted = vec![(53, Udp, m(53))];
        let unwanted = unwanted_wiring(&wiring, &wanted, owned);
        assert_eq!(unwanted.listeners, vec![listener(53, Tcp, "g-tcp")]);
        // g-udp is still used by the wanted UDP listener; g-tcp's name is wanted again.
        assert!(unwanted.groups.is_empty(), "{unwanted:?}");
    }

    #[test]
    fn a_listener_rollgate_keeps_or_does_not_own_keeps_its_group() {
        let wiring = Wiring {
            listeners: vec![listener(443, Tcp, "g-old")],
            groups: vec![group("g-old", &m(80))],
        };
        // A user's listener on 443 was pointed at rollgate's old group: 443 is not
        // wanted, but the listener forwards to an owned group, so it is rollgate's...
        // unless it is wanted: then neither goes.
        let wanted = vec![(443, Tcp, m(443))];
        let unwanted = unwanted_wiring(&wiring, &wanted, owned);
        assert!(unwanted.is_empty(), "{unwanted:?}");
    }
}
