//! `rollgate gates svc/NAME | pod/NAME` (also `kubectl rollgate gates`): every gated pod
//! of a Service with its gate's status, reason and message (which carries the backend's
//! health per port, as rollgate last read it), and the Service's load balancer, its
//! listeners and server groups as the cluster records them.
//!
//! It reads only what the cluster holds (the pods' gate conditions, the Service and its
//! Events), never the controller's memory: what it shows is what the controller last
//! published, so it works with the controller down, and shows that too (stale reasons).
use anyhow::{bail, Context as _};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::events::v1::Event;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use serde::Serialize;

use super::output::print;
use super::GatesCommandArgs;
use crate::gates::model::{gate_condition_type, service_of_gate};
use crate::gates::published_groups::{decode, PublishedGroup};
use crate::names::{
    CREATED_ID_ANNOTATION, LOAD_BALANCER_ANNOTATION_PREFIXES, SERVER_GROUPS_ANNOTATION,
};
use crate::runtime::{self, Shutdown};

/// What `gates` was asked about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GatesTarget {
    Service(String),
    Pod(String),
}

/// Parses `svc/NAME` (also `service/`, `services/`) or `pod/NAME` (also `pods/`, `po/`).
pub fn parse_target(target: &str) -> anyhow::Result<GatesTarget> {
    match target.split_once('/') {
        Some(("svc" | "service" | "services", name)) if !name.is_empty() => {
            Ok(GatesTarget::Service(name.into()))
        }
        Some(("pod" | "pods" | "po", name)) if !name.is_empty() => {
            Ok(GatesTarget::Pod(name.into()))
        }
        _ => bail!("cannot show gates of {target:?}: expected svc/NAME or pod/NAME"),
    }
}

/// One readiness gate of one pod, as its condition reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GateRow {
    pub pod: String,
    pub node: String,
    pub service: String,
    /// `True`, `False`, or `Missing` while no condition is written yet.
    pub status: String,
    pub reason: String,
    pub message: String,
    pub since: String,
}

/// The Service's load balancer as recorded on the Service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LoadBalancerView {
    /// `attached` (the user's annotation), `created` (rollgate's), or `none` yet.
    pub source: String,
    pub id: String,
    pub addresses: Vec<String>,
    /// Each listener and its server group, as rollgate published them on the Service
    /// (`rollgate.io/server-groups`); empty until it has.
    pub server_groups: Vec<ServerGroupRow>,
}

/// One listener and its server group. The annotation's entry in this output's own
/// spelling (snake_case, like every other field here).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerGroupRow {
    pub port: u16,
    pub protocol: String,
    pub load_balancer_id: String,
    /// NLB only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listener_id: Option<String>,
    pub server_group_id: String,
}

impl From<PublishedGroup> for ServerGroupRow {
    fn from(g: PublishedGroup) -> Self {
        ServerGroupRow {
            port: g.port,
            protocol: g.protocol,
            load_balancer_id: g.load_balancer_id,
            listener_id: g.listener_id,
            server_group_id: g.server_group_id,
        }
    }
}

/// A Warning Event of the Service (bad annotations, cloud errors, cleanup waits).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventRow {
    pub reason: String,
    pub count: i32,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GatesView {
    pub namespace: String,
    /// Absent when asked about a pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_balancer: Option<LoadBalancerView>,
    pub gates: Vec<GateRow>,
    pub warnings: Vec<EventRow>,
}

/// The rows of `pod`'s readiness gates on load balancers (all of them, or only the one
/// of `service`).
pub fn gate_rows(pod: &Pod, service: Option<&str>) -> Vec<GateRow> {
    let gates = pod
        .spec
        .iter()
        .flat_map(|s| s.readiness_gates.iter().flatten())
        .filter_map(|g| service_of_gate(&g.condition_type).map(|svc| (svc, &g.condition_type)))
        .filter(|(svc, _)| service.is_none_or(|wanted| wanted == *svc));
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    gates
        .map(|(svc, type_)| {
            let condition = conditions.into_iter().flatten().find(|c| &c.type_ == type_);
            GateRow {
                pod: pod.name_any(),
                node: pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_default(),
                service: svc.to_string(),
                status: condition.map_or("Missing".into(), |c| c.status.clone()),
                reason: condition.and_then(|c| c.reason.clone()).unwrap_or_default(),
                message: condition
                    .and_then(|c| c.message.clone())
                    .unwrap_or_default(),
                since: condition
                    .and_then(|c| c.last_transition_time.as_ref())
                    .map(|t| t.0.to_string())
                    .unwrap_or_default(),
            }
        })
        .collect()
}

/// The load balancer the Service names: attached by the user's annotation, else the one
/// rollgate created, with the addresses published in its status.
pub fn load_balancer_of(service: &Service) -> LoadBalancerView {
    let annotations = service.metadata.annotations.as_ref();
    let attached = LOAD_BALANCER_ANNOTATION_PREFIXES.iter().find_map(|prefix| {
        annotations?
            .get(&format!("{prefix}id"))
            .filter(|v| !v.is_empty())
    });
    let created = annotations.and_then(|a| a.get(CREATED_ID_ANNOTATION));
    let (source, id) = match (attached, created) {
        (Some(id), _) => ("attached", id.clone()),
        (None, Some(id)) => ("created", id.clone()),
        (None, None) => ("none", String::new()),
    };
    let addresses = service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|i| i.ip.clone().or_else(|| i.hostname.clone()))
        .collect();
    let server_groups = decode(
        annotations
            .and_then(|a| a.get(SERVER_GROUPS_ANNOTATION))
            .map(String::as_str),
    )
    .unwrap_or_default()
    .into_iter()
    .map(ServerGroupRow::from)
    .collect();
    LoadBalancerView {
        source: source.into(),
        id,
        addresses,
        server_groups,
    }
}

/// Warning Events about the Service, the most recent last.
pub fn warnings_of(events: &[Event], service: &str) -> Vec<EventRow> {
    let mut mine: Vec<&Event> = events
        .iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| {
                r.kind.as_deref() == Some("Service") && r.name.as_deref() == Some(service)
            })
        })
        .collect();
    mine.sort_by_key(|e| {
        e.series
            .as_ref()
            .map(|s| s.last_observed_time.0)
            .or(e.event_time.as_ref().map(|t| t.0))
            .or(e.metadata.creation_timestamp.as_ref().map(|t| t.0))
    });
    mine.into_iter()
        .map(|e| EventRow {
            reason: e.reason.clone().unwrap_or_default(),
            count: e.series.as_ref().map_or(1, |s| s.count),
            message: e.note.clone().unwrap_or_default(),
        })
        .collect()
}

/// The table for people: the load balancer, one line per gate, then the warnings.
pub fn render_table(view: &GatesView) -> String {
    let mut out = String::new();
    if let (Some(service), Some(lb)) = (&view.service, &view.load_balancer) {
        let addresses = if lb.addresses.is_empty() {
            "-".to_string()
        } else {
            lb.addresses.join(",")
        };
        let id = if lb.id.is_empty() { "-" } else { &lb.id };
        out.push_str(&format!(
            "service/{service} in {}: load balancer {id} ({}), address {addresses}\n",
            view.namespace, lb.source
        ));
        for group in &lb.server_groups {
            out.push_str(&listener_line(group));
        }
    }
    if view.gates.is_empty() {
        out.push_str("no pod carries a load-balancer readiness gate for it\n");
    } else {
        let header = [
            "POD", "NODE", "SERVICE", "GATE", "REASON", "SINCE", "MESSAGE",
        ];
        let rows: Vec<[String; 7]> = view
            .gates
            .iter()
            .map(|g| {
                [
                    g.pod.clone(),
                    dash(&g.node),
                    g.service.clone(),
                    g.status.clone(),
                    dash(&g.reason),
                    dash(&g.since),
                    dash(&g.message),
                ]
            })
            .collect();
        let mut widths = header.map(str::len);
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.len());
            }
        }
        let line = |cells: Vec<&str>| {
            let mut l = String::new();
            for (i, cell) in cells.iter().enumerate() {
                if i + 1 == cells.len() {
                    l.push_str(cell);
                } else {
                    l.push_str(&format!("{cell:<w$}   ", w = widths[i]));
                }
            }
            l.trim_end().to_string() + "\n"
        };
        out.push_str(&line(header.to_vec()));
        for row in &rows {
            out.push_str(&line(row.iter().map(String::as_str).collect()));
        }
    }
    for w in &view.warnings {
        out.push_str(&format!(
            "Warning {} (x{}): {}\n",
            w.reason, w.count, w.message
        ));
    }
    out
}

/// `  listener TCP:80 of lb-1 -> server group rsp-1`; an NLB listener with its id.
fn listener_line(group: &ServerGroupRow) -> String {
    let id = group
        .listener_id
        .as_ref()
        .map(|id| format!(" {id}"))
        .unwrap_or_default();
    format!(
        "  listener {}:{}{id} of {} -> server group {}\n",
        group.protocol, group.port, group.load_balancer_id, group.server_group_id
    )
}

fn dash(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.into()
    }
}

pub async fn run(args: GatesCommandArgs, _shutdown: Shutdown) -> anyhow::Result<()> {
    let target = parse_target(&args.target)?;
    let client = runtime::connect("gates").await?;
    let namespace = args
        .namespace
        .unwrap_or_else(|| client.default_namespace().to_string());
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let view = match target {
        GatesTarget::Pod(name) => {
            let pod = pods
                .get_opt(&name)
                .await?
                .with_context(|| format!("pod/{name} not found in namespace {namespace}"))?;
            GatesView {
                namespace,
                service: None,
                load_balancer: None,
                gates: gate_rows(&pod, None),
                warnings: Vec::new(),
            }
        }
        GatesTarget::Service(name) => {
            let services: Api<Service> = Api::namespaced(client.clone(), &namespace);
            let service = services
                .get_opt(&name)
                .await?
                .with_context(|| format!("service/{name} not found in namespace {namespace}"))?;
            let gate = gate_condition_type(&name);
            let mut gates: Vec<GateRow> = pods
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                .filter(|p| {
                    p.spec.as_ref().is_some_and(|s| {
                        s.readiness_gates
                            .iter()
                            .flatten()
                            .any(|g| g.condition_type == gate)
                    })
                })
                .flat_map(|p| gate_rows(p, Some(&name)))
                .collect();
            gates.sort_by(|a, b| a.pod.cmp(&b.pod));
            let events: Api<Event> = Api::namespaced(client.clone(), &namespace);
            let events = events
                .list(&ListParams::default().fields(&format!("regarding.name={name}")))
                .await?
                .items;
            GatesView {
                namespace,
                load_balancer: Some(load_balancer_of(&service)),
                service: Some(name.clone()),
                gates,
                warnings: warnings_of(&events, &name),
            }
        }
    };
    print(args.output, &view, render_table)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{PodCondition, PodReadinessGate, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    use super::*;
    use crate::testkit::at;

    fn pod(name: &str, gates: &[&str], conditions: &[(&str, &str, &str)]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some("edge-1".into()),
                readiness_gates: Some(
                    gates
                        .iter()
                        .map(|g| PodReadinessGate {
                            condition_type: g.to_string(),
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            status: Some(PodStatus {
                conditions: Some(
                    conditions
                        .iter()
                        .map(|(t, s, r)| PodCondition {
                            type_: t.to_string(),
                            status: s.to_string(),
                            reason: Some(r.to_string()),
                            message: Some(format!("{r} says why")),
                            last_transition_time: Some(Time(at(1_000))),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn targets_name_the_accepted_forms_when_wrong() {
        assert_eq!(
            parse_target("svc/web").unwrap(),
            GatesTarget::Service("web".into())
        );
        assert_eq!(
            parse_target("pod/web-1").unwrap(),
            GatesTarget::Pod("web-1".into())
        );
        for bad in ["deployment/web", "svc/", "web"] {
            let err = parse_target(bad).unwrap_err().to_string();
            assert!(err.contains("svc/NAME or pod/NAME"), "{err}");
        }
    }

    #[test]
    fn a_pods_gates_read_as_written_and_a_missing_condition_says_so() {
        let web = "service.readiness.alibabacloud.com/web";
        let api = "service.readiness.alibabacloud.com/api";
        let p = pod(
            "web-1",
            &[web, api, "example.com/other"],
            &[(web, "False", "BackendUnhealthy")],
        );
        let rows = gate_rows(&p, None);
        assert_eq!(rows.len(), 2, "only load-balancer gates: {rows:?}");
        assert_eq!(
            (
                rows[0].service.as_str(),
                rows[0].status.as_str(),
                rows[0].reason.as_str()
            ),
            ("web", "False", "BackendUnhealthy")
        );
        assert_eq!(rows[0].message, "BackendUnhealthy says why");
        assert_eq!(rows[0].since, at(1_000).to_string());
        assert_eq!(
            (rows[1].service.as_str(), rows[1].status.as_str()),
            ("api", "Missing")
        );
        assert_eq!(gate_rows(&p, Some("api")).len(), 1);
    }

    #[test]
    fn the_load_balancer_is_the_attached_one_else_the_created_one() {
        let mut service = Service::default();
        assert_eq!(load_balancer_of(&service).source, "none");
        service.metadata.annotations =
            Some([(CREATED_ID_ANNOTATION.to_string(), "lb-created".to_string())].into());
        let view = load_balancer_of(&service);
        assert_eq!(
            (view.source.as_str(), view.id.as_str()),
            ("created", "lb-created")
        );
        service.metadata.annotations.as_mut().unwrap().insert(
            format!("{}id", LOAD_BALANCER_ANNOTATION_PREFIXES[0]),
            "lb-mine".into(),
        );
        let view = load_balancer_of(&service);
        assert_eq!(
            (view.source.as_str(), view.id.as_str()),
            ("attached", "lb-mine")
        );
    }

    const PUBLISHED: &str = r#"[{"port":53,"protocol":"UDP","loadBalancerId":"nlb-1","listenerId":"lsn-53","serverGroupId":"sgp-53"},{"port":80,"protocol":"TCP","loadBalancerId":"nlb-1","listenerId":"lsn-80","serverGroupId":"sgp-80"}]"#;

    /// A Service's view as `gates svc/web` builds it: its load balancer with the groups
    /// rollgate published, one healthy gate, one warning.
    fn web_view() -> GatesView {
        let web = "service.readiness.alibabacloud.com/web";
        let mut service = Service::default();
        service.metadata.annotations = Some(
            [
                (CREATED_ID_ANNOTATION.to_string(), "nlb-1".to_string()),
                (SERVER_GROUPS_ANNOTATION.to_string(), PUBLISHED.to_string()),
            ]
            .into(),
        );
        let mut load_balancer = load_balancer_of(&service);
        load_balancer.addresses = vec!["nlb-1.example".into()];
        GatesView {
            namespace: "shop".into(),
            service: Some("web".into()),
            load_balancer: Some(load_balancer),
            gates: gate_rows(
                &pod("web-1", &[web], &[(web, "True", "LoadBalancerHealthy")]),
                None,
            ),
            warnings: vec![EventRow {
                reason: "InvalidLoadBalancerAnnotation".into(),
                count: 3,
                message: "bad zone maps".into(),
            }],
        }
    }

    #[test]
    fn the_published_server_groups_are_read_and_an_unreadable_value_shows_none() {
        let view = web_view().load_balancer.unwrap();
        let groups: Vec<(u16, &str, Option<&str>, &str)> = view
            .server_groups
            .iter()
            .map(|g| {
                (
                    g.port,
                    g.protocol.as_str(),
                    g.listener_id.as_deref(),
                    g.server_group_id.as_str(),
                )
            })
            .collect();
        assert_eq!(
            groups,
            [
                (53, "UDP", Some("lsn-53"), "sgp-53"),
                (80, "TCP", Some("lsn-80"), "sgp-80")
            ]
        );
        let mut service = Service::default();
        service.metadata.annotations =
            Some([(SERVER_GROUPS_ANNOTATION.to_string(), "sgp-80".to_string())].into());
        assert!(load_balancer_of(&service).server_groups.is_empty());
    }

    #[test]
    fn the_table_has_the_listeners_a_line_per_gate_and_the_warnings() {
        let table = render_table(&web_view());
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 6, "{table}");
        assert_eq!(
            lines[0],
            "service/web in shop: load balancer nlb-1 (created), address nlb-1.example"
        );
        assert_eq!(
            lines[1],
            "  listener UDP:53 lsn-53 of nlb-1 -> server group sgp-53"
        );
        assert_eq!(
            lines[2],
            "  listener TCP:80 lsn-80 of nlb-1 -> server group sgp-80"
        );
        assert!(lines[3].starts_with("POD"), "{table}");
        assert!(
            lines[4].starts_with("web-1")
                && lines[4].contains("LoadBalancerHealthy")
                && lines[4].ends_with("LoadBalancerHealthy says why"),
            "{table}"
        );
        assert_eq!(
            lines[5],
            "Warning InvalidLoadBalancerAnnotation (x3): bad zone maps"
        );
    }

    #[test]
    fn json_and_yaml_carry_the_server_groups_and_the_gates_message() {
        use crate::cli::output::{render, OutputFormat};
        let view = web_view();
        let json: serde_json::Value =
            serde_json::from_str(&render(OutputFormat::Json, &view, render_table).unwrap())
                .unwrap();
        assert_eq!(
            json["load_balancer"]["server_groups"][1],
            serde_json::json!({"port": 80, "protocol": "TCP", "load_balancer_id": "nlb-1",
                "listener_id": "lsn-80", "server_group_id": "sgp-80"})
        );
        assert_eq!(json["load_balancer"]["id"], "nlb-1");
        assert_eq!(json["gates"][0]["message"], "LoadBalancerHealthy says why");
        let yaml = render(OutputFormat::Yaml, &view, render_table).unwrap();
        let back: serde_json::Value = serde_saphyr::from_str(&yaml).unwrap();
        assert_eq!(back, json, "{yaml}");
    }
}
