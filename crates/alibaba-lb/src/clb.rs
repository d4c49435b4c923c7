//! CLB (Classic Load Balancer, SLB API 2014-05-15, RPC style). Backends live in
//! VServer groups; `BackendServers` is a JSON string parameter; calls are synchronous.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::backends::LoadBalancerBackends;
use crate::config::{ClientConfig, Product, DEFAULT_CLB_CHARGE_TYPE};
use crate::credentials::CredentialProvider;
use crate::error::{Error, Result};
use crate::model::*;
use crate::settings::{clb_differences, ListenerSettings};
use crate::transport::{lenient, params, ApiClient, Params};

/// Documented limit of backends per Add/Remove/Set call.
pub const CLB_BATCH_LIMIT: usize = 20;

#[derive(Debug)]
pub struct ClbClient {
    api: ApiClient,
    region: String,
    /// `LoadBalancerSpec` for instances we create.
    spec: Option<String>,
    /// Whether each listener runs health checks, as last read, and when: asked only
    /// while a backend is `unavailable`, which lasts until the first check completes.
    listener_checks: Mutex<HashMap<ListenerKey, (bool, Instant)>>,
    /// The vServer group each listener forwards to, as last read, and when.
    listener_groups: Mutex<HashMap<ListenerKey, (ListenerTarget, Instant)>>,
}

/// A CLB listener: load balancer id, port and protocol.
type ListenerKey = (String, u16, ListenerProtocol);

/// How long a listener's health-check setting is trusted before it is read again: a
/// user who switches checks off sees gates turn True (NotChecked) within this time.
const LISTENER_SETTING_TTL: Duration = Duration::from_secs(30);

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct BackendServerJson {
    server_id: String,
    #[serde(deserialize_with = "lenient::u16")]
    port: u16,
    #[serde(deserialize_with = "lenient::u32")]
    weight: u32,
    #[serde(rename = "Type")]
    kind: String,
    server_ip: String,
    description: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct BackendServerList {
    backend_server: Vec<BackendServerJson>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct VServerGroupAttribute {
    backend_servers: BackendServerList,
}

#[derive(Deserialize, Default, Debug, PartialEq)]
#[serde(rename_all = "PascalCase", default)]
struct HealthEntry {
    /// The ECS instance or the ENI: several pods share one ENI in Terway's
    /// shared-ENI mode, so this alone never names a pod.
    server_id: String,
    /// "The IP address of the ECS instance".
    server_ip: String,
    /// "The IP address of the ENI" (`eni` backends).
    eni_host: String,
    #[serde(deserialize_with = "lenient::u16")]
    port: u16,
    server_health_status: String,
}

impl HealthEntry {
    /// Whether this entry names `ip`, in either of the fields the reference gives an
    /// IP in (which one the cloud fills for a secondary IP of an ENI is not
    /// documented, so both are read).
    fn names_ip(&self, ip: &str) -> bool {
        !ip.is_empty() && (self.server_ip == ip || self.eni_host == ip)
    }
}

/// The health entry of `member`, a backend of a group whose backends are `members`.
///
/// An entry naming the member's port, server (ENI or instance) and IP is the
/// member's. Without one, an entry of the same server and port is taken only when no
/// other member shares that server and port: with two pods on one ENI (Terway's
/// shared-ENI mode) a match by ENI alone would give a pod its neighbour's health, and
/// its gate would flip on a backend that is down.
fn health_of<'a>(
    entries: &'a [HealthEntry],
    member: &BackendKey,
    members: &[Backend],
) -> Option<&'a HealthEntry> {
    let same_server = |e: &&HealthEntry| e.port == member.port && e.server_id == member.server_id;
    if let Some(entry) = entries
        .iter()
        .filter(same_server)
        .find(|e| e.names_ip(&member.ip))
    {
        return Some(entry);
    }
    let shared = members
        .iter()
        .filter(|m| m.key.server_id == member.server_id && m.key.port == member.port)
        .count()
        > 1;
    if shared {
        return None;
    }
    entries.iter().find(same_server)
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct HealthList {
    backend_server: Vec<HealthEntry>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct HealthStatus {
    backend_servers: HealthList,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct ListenerPortAndProtocol {
    #[serde(deserialize_with = "lenient::u16")]
    listener_port: u16,
    listener_protocol: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct ListenerList {
    listener_port_and_protocol: Vec<ListenerPortAndProtocol>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct TagJson {
    tag_key: String,
    tag_value: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct TagList {
    tag: Vec<TagJson>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct LoadBalancerAttribute {
    load_balancer_id: String,
    address: String,
    listener_ports_and_protocol: ListenerList,
    load_balancer_spec: String,
    instance_charge_type: String,
    tags: TagList,
    #[serde(skip)]
    request_id: String,
}

impl LoadBalancerAttribute {
    fn tags(&self) -> Vec<Tag> {
        self.tags
            .tag
            .iter()
            .map(|t| (t.tag_key.clone(), t.tag_value.clone()))
            .collect()
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct CreatedLoadBalancer {
    load_balancer_id: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct VServerGroupSummary {
    v_server_group_id: String,
    v_server_group_name: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct VServerGroupList {
    v_server_group: Vec<VServerGroupSummary>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct VServerGroups {
    v_server_groups: VServerGroupList,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct CreatedVServerGroup {
    v_server_group_id: String,
}

#[derive(Deserialize)]
struct Empty {}

/// What the listener attribute says of a listener: where it forwards, and whether it
/// runs (a stopped listener reports every backend `unavailable`).
#[derive(Clone, Debug)]
struct ListenerTarget {
    server_group_id: String,
    status: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct ListenerAttribute {
    /// `on` or `off`.
    health_check: String,
    /// `running`, `stopped`, `starting` or `configuring`.
    status: String,
    /// The vServer group the listener forwards to (empty: the default server group).
    #[serde(rename = "VServerGroupId")]
    v_server_group_id: String,
}

/// One element of the `BackendServers` JSON parameter.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct BackendServerParam<'a> {
    server_id: &'a str,
    port: String,
    #[serde(rename = "Type")]
    kind: &'a str,
    server_ip: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    weight: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
}

impl<'a> BackendServerParam<'a> {
    fn full(b: &'a Backend) -> Self {
        Self {
            server_id: &b.key.server_id,
            port: b.key.port.to_string(),
            kind: b.kind.as_clb_str(),
            server_ip: &b.key.ip,
            weight: Some(b.weight.to_string()),
            description: Some(&b.description),
        }
    }

    fn key_only(b: &'a Backend) -> Self {
        Self {
            weight: None,
            description: None,
            ..Self::full(b)
        }
    }
}

/// The `BackendServers` parameter value for one batch.
fn backend_servers_json(items: &[BackendServerParam<'_>]) -> String {
    serde_json::to_string(items).expect("plain strings always serialize")
}

/// The `InstanceChargeType` and `LoadBalancerSpec` of an instance rollgate creates.
/// Pay-by-spec is no longer sold (2025-06-01 international, 2026-01-01 China), and it
/// is the API's default when no charge type is sent: so one is always sent, and it is
/// `PayBySpec` only when the Service asks for it. Only then does a spec apply (the
/// Service's, else the configured one); a pay-by-CLCU instance has none.
fn instance_to_create<'a>(
    wanted: &'a ClbInstance,
    configured_spec: Option<&'a str>,
) -> (&'a str, Option<&'a str>) {
    if wanted.charge_type != "PayBySpec" {
        return (DEFAULT_CLB_CHARGE_TYPE, None);
    }
    let spec = Some(wanted.spec.as_str())
        .filter(|s| !s.is_empty())
        .or(configured_spec);
    ("PayBySpec", spec)
}

/// `Describe…ListenerAttribute` of a listener of `protocol`.
fn describe_listener_action(protocol: ListenerProtocol) -> &'static str {
    match protocol {
        ListenerProtocol::Tcp => "DescribeLoadBalancerTCPListenerAttribute",
        ListenerProtocol::Udp => "DescribeLoadBalancerUDPListenerAttribute",
        ListenerProtocol::Http => "DescribeLoadBalancerHTTPListenerAttribute",
        ListenerProtocol::Https => "DescribeLoadBalancerHTTPSListenerAttribute",
    }
}

/// `Create…Listener` and `Set…ListenerAttribute` of a listener of `protocol`.
fn write_listener_actions(protocol: ListenerProtocol) -> (&'static str, &'static str) {
    match protocol {
        ListenerProtocol::Tcp => (
            "CreateLoadBalancerTCPListener",
            "SetLoadBalancerTCPListenerAttribute",
        ),
        ListenerProtocol::Udp => (
            "CreateLoadBalancerUDPListener",
            "SetLoadBalancerUDPListenerAttribute",
        ),
        ListenerProtocol::Http => (
            "CreateLoadBalancerHTTPListener",
            "SetLoadBalancerHTTPListenerAttribute",
        ),
        ListenerProtocol::Https => (
            "CreateLoadBalancerHTTPSListener",
            "SetLoadBalancerHTTPSListenerAttribute",
        ),
    }
}

/// The listener parameters of `settings` for a listener of `protocol`.
fn listener_params(settings: &ListenerSettings, protocol: ListenerProtocol) -> Params {
    match protocol {
        ListenerProtocol::Tcp => settings.clb_params(true),
        ListenerProtocol::Udp => settings.clb_params(false),
        ListenerProtocol::Http => settings.clb_http_params(false),
        ListenerProtocol::Https => settings.clb_http_params(true),
    }
}

fn is_not_found(error: &Error) -> bool {
    matches!(error, Error::Api { code, .. } if crate::error::code_says_not_found(code))
}

/// A deterministic idempotency token, so a retried create does not create twice.
pub(crate) fn client_token(parts: &[&str]) -> String {
    crate::sign::sha256_hex(parts.join("/").as_bytes())[..32].to_string()
}

impl ClbClient {
    pub fn new(config: &ClientConfig, credentials: Arc<dyn CredentialProvider>) -> Result<Self> {
        Ok(Self {
            api: ApiClient::new(config, Product::Clb, credentials)?,
            region: config.region.clone(),
            spec: config.clb_spec.clone().filter(|s| !s.is_empty()),
            listener_checks: Mutex::default(),
            listener_groups: Mutex::default(),
        })
    }

    fn with_region(&self, mut query: Params) -> Params {
        query.push(("RegionId".to_string(), self.region.clone()));
        query
    }

    async fn call<T: serde::de::DeserializeOwned>(
        &self,
        action: &str,
        query: Params,
    ) -> Result<(T, String)> {
        // The official SDK sends every CLB parameter in the query string.
        let answer = self.api.call(action, &self.with_region(query), &[]).await?;
        Ok((answer.body, answer.request_id))
    }

    /// Whether the listener in front of `group` runs health checks (`HealthCheck`
    /// of its attribute; on unless the user switched it off).
    async fn listener_checks_health(&self, group: &ServerGroupRef) -> Result<bool> {
        let key = (
            group.load_balancer_id.clone(),
            group.listener_port,
            group.listener_protocol,
        );
        if let Some((checks, at)) = self.listener_checks.lock().unwrap().get(&key) {
            if at.elapsed() < LISTENER_SETTING_TTL {
                return Ok(*checks);
            }
        }
        let action = describe_listener_action(group.listener_protocol);
        let (attribute, _) = self
            .call::<ListenerAttribute>(
                action,
                params([
                    ("LoadBalancerId", group.load_balancer_id.clone()),
                    ("ListenerPort", group.listener_port.to_string()),
                ]),
            )
            .await?;
        let checks = attribute.health_check != "off";
        self.listener_checks
            .lock()
            .unwrap()
            .insert(key, (checks, Instant::now()));
        Ok(checks)
    }

    /// The group the listener in front of `group` forwards to, and its status, as
    /// last read (trusted for [`LISTENER_SETTING_TTL`]); `None`: no such listener.
    async fn listener_target(&self, group: &ServerGroupRef) -> Result<Option<ListenerTarget>> {
        let key = (
            group.load_balancer_id.clone(),
            group.listener_port,
            group.listener_protocol,
        );
        if let Some((target, at)) = self.listener_groups.lock().unwrap().get(&key) {
            if at.elapsed() < LISTENER_SETTING_TTL {
                return Ok(Some(target.clone()));
            }
        }
        let Some(attribute) = self.listener_attribute(group).await? else {
            return Ok(None);
        };
        let target = ListenerTarget {
            server_group_id: attribute.v_server_group_id,
            status: attribute.status,
        };
        self.listener_groups
            .lock()
            .unwrap()
            .insert(key, (target.clone(), Instant::now()));
        Ok(Some(target))
    }

    /// `Describe…ListenerAttribute` of the listener in front of `group`; a listener
    /// that does not exist is `None`.
    async fn listener_attribute(
        &self,
        group: &ServerGroupRef,
    ) -> Result<Option<ListenerAttribute>> {
        let action = describe_listener_action(group.listener_protocol);
        match self
            .call::<ListenerAttribute>(
                action,
                params([
                    ("LoadBalancerId", group.load_balancer_id.clone()),
                    ("ListenerPort", group.listener_port.to_string()),
                ]),
            )
            .await
        {
            Ok((attribute, _)) => Ok(Some(attribute)),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn describe_load_balancer(&self, id: &str) -> Result<LoadBalancerAttribute> {
        const ACTION: &str = "DescribeLoadBalancerAttribute";
        match self
            .call::<LoadBalancerAttribute>(ACTION, params([("LoadBalancerId", id.to_string())]))
            .await
        {
            Ok((mut attribute, request_id)) => {
                attribute.request_id = request_id;
                Ok(attribute)
            }
            Err(Error::Api {
                code, request_id, ..
            }) if crate::error::code_says_not_found(&code) => Err(Error::NotFound {
                action: ACTION.into(),
                what: format!("load balancer {id}"),
                request_id,
            }),
            Err(e) => Err(e),
        }
    }

    async fn describe_vserver_group(&self, group: &ServerGroupRef) -> Result<Vec<Backend>> {
        let (attribute, _) = self
            .call::<VServerGroupAttribute>(
                "DescribeVServerGroupAttribute",
                params([("VServerGroupId", group.server_group_id.clone())]),
            )
            .await?;
        Ok(attribute
            .backend_servers
            .backend_server
            .into_iter()
            .map(|b| Backend {
                key: BackendKey {
                    // ECS backends may omit ServerIp; the instance id identifies them.
                    ip: b.server_ip,
                    server_id: b.server_id,
                    port: b.port,
                },
                kind: BackendType::parse(&b.kind).unwrap_or(BackendType::Ecs),
                weight: b.weight,
                description: b.description,
            })
            .collect())
    }

    async fn ensure_listener(
        &self,
        lb_id: &str,
        existing_listeners: &HashSet<(u16, String)>,
        groups: &mut Vec<VServerGroupSummary>,
        listener: &ListenerSpec,
    ) -> Result<ServerGroupRef> {
        // The current name first; else the former name (an upgrade), within this
        // load balancer only (its own vServer groups).
        let named = |name: &str| groups.iter().find(|g| g.v_server_group_name == name);
        let found = named(&listener.server_group_name)
            .or_else(|| listener.former_group_name.as_deref().and_then(named));
        let group_id = match found {
            Some(group) => group.v_server_group_id.clone(),
            None => {
                let (created, _) = self
                    .call::<CreatedVServerGroup>(
                        "CreateVServerGroup",
                        params([
                            ("LoadBalancerId", lb_id.to_string()),
                            ("VServerGroupName", listener.server_group_name.clone()),
                        ]),
                    )
                    .await?;
                groups.push(VServerGroupSummary {
                    v_server_group_id: created.v_server_group_id.clone(),
                    v_server_group_name: listener.server_group_name.clone(),
                });
                created.v_server_group_id
            }
        };
        let protocol = listener.protocol.as_api_str();
        if !existing_listeners.contains(&(listener.port, protocol.to_ascii_lowercase())) {
            let (create_action, _) = write_listener_actions(listener.protocol);
            let mut query = params([
                ("LoadBalancerId", lb_id.to_string()),
                ("ListenerPort", listener.port.to_string()),
                // -1: no per-listener bandwidth cap (pay-by-traffic instances).
                ("Bandwidth", "-1".to_string()),
                ("VServerGroupId", group_id.clone()),
            ]);
            query.extend(listener_params(&listener.settings, listener.protocol));
            self.call::<Empty>(create_action, query).await?;
            self.call::<Empty>(
                "StartLoadBalancerListener",
                params([
                    ("LoadBalancerId", lb_id.to_string()),
                    ("ListenerPort", listener.port.to_string()),
                    ("ListenerProtocol", protocol.to_ascii_lowercase()),
                ]),
            )
            .await?;
        } else if !listener.settings.is_default() || listener.protocol.is_layer7() {
            self.sync_listener_settings(lb_id, listener).await?;
        }
        Ok(ServerGroupRef {
            load_balancer_id: lb_id.to_string(),
            server_group_id: group_id,
            listener_port: listener.port,
            listener_protocol: listener.protocol,
            listener_id: None,
        })
    }

    /// Sets an existing listener's health check and drain again where they differ
    /// from the Service's annotations (read back with `Describe…ListenerAttribute`):
    /// a changed annotation reaches the listener, an unchanged one costs one read.
    async fn sync_listener_settings(&self, lb_id: &str, listener: &ListenerSpec) -> Result<()> {
        let wanted = listener_params(&listener.settings, listener.protocol);
        if wanted.is_empty() {
            return Ok(());
        }
        let describe = describe_listener_action(listener.protocol);
        let (_, set) = write_listener_actions(listener.protocol);
        let at = params([
            ("LoadBalancerId", lb_id.to_string()),
            ("ListenerPort", listener.port.to_string()),
        ]);
        let (described, _) = self.call::<serde_json::Value>(describe, at.clone()).await?;
        let differ = clb_differences(&wanted, &described);
        if differ.is_empty() {
            return Ok(());
        }
        tracing::info!(
            load_balancer_id = lb_id,
            port = listener.port,
            ?differ,
            "setting listener attributes"
        );
        let mut query = at;
        query.extend(wanted);
        self.call::<Empty>(set, query).await?;
        // The switch may have moved: the health reading must not trust the old one.
        self.listener_checks.lock().unwrap().remove(&(
            lb_id.to_string(),
            listener.port,
            listener.protocol,
        ));
        Ok(())
    }

    /// Sends `items` in batches of [`CLB_BATCH_LIMIT`] to `action`.
    async fn batched(
        &self,
        action: &str,
        group: &ServerGroupRef,
        items: Vec<BackendServerParam<'_>>,
    ) -> Result<()> {
        for batch in batches(&items, CLB_BATCH_LIMIT) {
            self.call::<Empty>(
                action,
                params([
                    ("VServerGroupId", group.server_group_id.clone()),
                    ("BackendServers", backend_servers_json(batch)),
                ]),
            )
            .await?;
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl LoadBalancerBackends for ClbClient {
    fn throttled_answers(&self) -> u64 {
        self.api.throttled_answers()
    }

    fn calls_made(&self) -> u64 {
        self.api.calls_made()
    }

    fn action_counts(&self) -> Vec<crate::transport::ActionCount> {
        self.api.action_counts()
    }

    fn product(&self) -> Product {
        Product::Clb
    }

    async fn ensure_load_balancer(&self, spec: &LoadBalancerSpec) -> Result<LoadBalancer> {
        let (id, created) = match &spec.existing_id {
            Some(id) => (id.clone(), false),
            None => {
                let mut query = params([
                    ("LoadBalancerName", spec.name.clone()),
                    ("AddressType", spec.address_type.as_clb_str().to_string()),
                    (
                        "ClientToken",
                        client_token(&["clb", &self.region, &spec.name]),
                    ),
                ]);
                let wanted = &spec.clb_instance;
                let (charge_type, clb_spec) = instance_to_create(wanted, self.spec.as_deref());
                query.push(("InstanceChargeType".into(), charge_type.to_string()));
                if let Some(clb_spec) = clb_spec {
                    query.push(("LoadBalancerSpec".into(), clb_spec.to_string()));
                }
                // CLB takes tags on the instance only at creation (`Tag.N`); its
                // listeners and vServer groups live inside it.
                query.extend(tag_params(&spec.tags.all()));
                if spec.address_type == AddressType::Intranet {
                    if let Some(vpc) = &spec.vpc_id {
                        query.push(("VpcId".into(), vpc.clone()));
                    }
                    if let Some(zone) = spec.zones.first() {
                        query.push(("VSwitchId".into(), zone.vswitch_id.clone()));
                    }
                }
                let (created, request_id) = self
                    .call::<CreatedLoadBalancer>("CreateLoadBalancer", query)
                    .await?;
                tracing::info!(load_balancer_id = %created.load_balancer_id, request_id, "created CLB");
                (created.load_balancer_id, true)
            }
        };
        let attribute = self.describe_load_balancer(&id).await?;
        // An instance another cluster's rollgate made (or tagged) is never wired into.
        if let Some(cluster) = spec.tags.other_cluster(&attribute.tags()) {
            return Err(Error::OtherCluster {
                action: "DescribeLoadBalancerAttribute".into(),
                what: format!("load balancer {id}"),
                cluster,
                request_id: attribute.request_id.clone(),
            });
        }
        let existing_listeners: HashSet<(u16, String)> = attribute
            .listener_ports_and_protocol
            .listener_port_and_protocol
            .iter()
            .map(|l| (l.listener_port, l.listener_protocol.to_ascii_lowercase()))
            .collect();
        let (groups, _) = self
            .call::<VServerGroups>(
                "DescribeVServerGroups",
                params([("LoadBalancerId", id.clone())]),
            )
            .await?;
        let mut groups = groups.v_server_groups.v_server_group;
        let mut listeners = Vec::with_capacity(spec.listeners.len());
        for listener in &spec.listeners {
            listeners.push(
                self.ensure_listener(&id, &existing_listeners, &mut groups, listener)
                    .await?,
            );
        }
        Ok(LoadBalancer {
            id: if attribute.load_balancer_id.is_empty() {
                id
            } else {
                attribute.load_balancer_id
            },
            address: Some(attribute.address).filter(|a| !a.is_empty()),
            created,
            listeners,
            clb_instance: Some(ClbInstance {
                spec: attribute.load_balancer_spec,
                charge_type: attribute.instance_charge_type,
            }),
        })
    }

    async fn delete_load_balancer(&self, load_balancer_id: &str) -> Result<()> {
        match self
            .call::<Empty>(
                "DeleteLoadBalancer",
                params([("LoadBalancerId", load_balancer_id.to_string())]),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn load_balancer_tags(&self, load_balancer_id: &str) -> Result<Option<Vec<Tag>>> {
        match self.describe_load_balancer(load_balancer_id).await {
            Ok(attribute) => Ok(Some(attribute.tags())),
            Err(Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn list_backends(&self, group: &ServerGroupRef) -> Result<Vec<Backend>> {
        self.describe_vserver_group(group).await
    }

    async fn wiring(&self, load_balancer_id: &str) -> Result<Option<Wiring>> {
        let attribute = match self.describe_load_balancer(load_balancer_id).await {
            Ok(attribute) => attribute,
            Err(Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut listeners = vec![];
        for l in &attribute
            .listener_ports_and_protocol
            .listener_port_and_protocol
        {
            // HTTP/HTTPS listeners too (`protocol-port`): whether one is rollgate's is
            // told by the group it forwards to, as for the others.
            let Some(protocol) = ListenerProtocol::parse(&l.listener_protocol) else {
                continue;
            };
            let group = ServerGroupRef {
                load_balancer_id: load_balancer_id.to_string(),
                server_group_id: String::new(),
                listener_port: l.listener_port,
                listener_protocol: protocol,
                listener_id: None,
            };
            let Some(listener) = self.listener_attribute(&group).await? else {
                continue;
            };
            listeners.push(ListenerWiring {
                port: l.listener_port,
                protocol,
                listener_id: None,
                server_group_id: listener.v_server_group_id,
            });
        }
        let (groups, _) = self
            .call::<VServerGroups>(
                "DescribeVServerGroups",
                params([("LoadBalancerId", load_balancer_id.to_string())]),
            )
            .await?;
        let groups = groups
            .v_server_groups
            .v_server_group
            .into_iter()
            .map(|g| ServerGroupName {
                id: g.v_server_group_id,
                name: g.v_server_group_name,
            })
            .collect();
        Ok(Some(Wiring { listeners, groups }))
    }

    async fn delete_listener(
        &self,
        load_balancer_id: &str,
        listener: &ListenerWiring,
    ) -> Result<()> {
        let result = self
            .call::<Empty>(
                "DeleteLoadBalancerListener",
                params([
                    ("LoadBalancerId", load_balancer_id.to_string()),
                    ("ListenerPort", listener.port.to_string()),
                    (
                        "ListenerProtocol",
                        listener.protocol.as_api_str().to_ascii_lowercase(),
                    ),
                ]),
            )
            .await;
        self.listener_groups.lock().unwrap().remove(&(
            load_balancer_id.to_string(),
            listener.port,
            listener.protocol,
        ));
        match result {
            Err(e) if !is_not_found(&e) => Err(e),
            _ => Ok(()),
        }
    }

    async fn delete_server_group(&self, server_group_id: &str) -> Result<()> {
        match self
            .call::<Empty>(
                "DeleteVServerGroup",
                params([("VServerGroupId", server_group_id.to_string())]),
            )
            .await
        {
            Err(e) if !is_not_found(&e) => Err(e),
            _ => Ok(()),
        }
    }

    async fn server_groups(&self, load_balancer_id: &str) -> Result<Option<Vec<ServerGroupRef>>> {
        let attribute = match self.describe_load_balancer(load_balancer_id).await {
            Ok(attribute) => attribute,
            Err(Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let (groups, _) = match self
            .call::<VServerGroups>(
                "DescribeVServerGroups",
                params([("LoadBalancerId", load_balancer_id.to_string())]),
            )
            .await
        {
            Ok(groups) => groups,
            Err(e) if is_not_found(&e) => return Ok(None),
            Err(e) => return Err(e),
        };
        // The listener port is not part of a vServer group; the one of the first
        // listener is enough, since removals address the group by its id.
        let first = attribute
            .listener_ports_and_protocol
            .listener_port_and_protocol
            .first();
        let port = first.map_or(0, |l| l.listener_port);
        let protocol = first
            .and_then(|l| ListenerProtocol::parse(&l.listener_protocol))
            .unwrap_or(ListenerProtocol::Tcp);
        Ok(Some(
            groups
                .v_server_groups
                .v_server_group
                .into_iter()
                .map(|g| ServerGroupRef {
                    load_balancer_id: load_balancer_id.to_string(),
                    server_group_id: g.v_server_group_id,
                    listener_port: port,
                    listener_protocol: protocol,
                    listener_id: None,
                })
                .collect(),
        ))
    }

    async fn listener_server_group(&self, group: &ServerGroupRef) -> Result<Option<String>> {
        Ok(self
            .listener_target(group)
            .await?
            .map(|t| t.server_group_id))
    }

    async fn listener_stopped(&self, group: &ServerGroupRef) -> Result<bool> {
        Ok(self
            .listener_target(group)
            .await?
            .is_some_and(|t| t.status == "stopped"))
    }

    async fn start_listener(&self, group: &ServerGroupRef) -> Result<()> {
        let protocol = group.listener_protocol.as_api_str().to_ascii_lowercase();
        self.call::<Empty>(
            "StartLoadBalancerListener",
            params([
                ("LoadBalancerId", group.load_balancer_id.clone()),
                ("ListenerPort", group.listener_port.to_string()),
                ("ListenerProtocol", protocol),
            ]),
        )
        .await?;
        // Read the status again next time, not the stopped one remembered.
        self.listener_groups.lock().unwrap().remove(&(
            group.load_balancer_id.clone(),
            group.listener_port,
            group.listener_protocol,
        ));
        Ok(())
    }

    async fn add_backends(&self, group: &ServerGroupRef, backends: &[Backend]) -> Result<()> {
        let present: HashSet<BackendKey> = self
            .describe_vserver_group(group)
            .await?
            .into_iter()
            .map(|b| b.key)
            .collect();
        let missing: Vec<BackendServerParam<'_>> = backends
            .iter()
            .filter(|b| !present.contains(&b.key))
            .map(BackendServerParam::full)
            .collect();
        self.batched("AddVServerGroupBackendServers", group, missing)
            .await
    }

    async fn remove_backends(&self, group: &ServerGroupRef, backends: &[BackendKey]) -> Result<()> {
        // The API wants each backend's Type, so take it from the group itself; keys
        // that are already gone need no call.
        let wanted: HashSet<&BackendKey> = backends.iter().collect();
        let present = self.describe_vserver_group(group).await?;
        let to_remove: Vec<BackendServerParam<'_>> = present
            .iter()
            .filter(|b| wanted.contains(&b.key))
            .map(BackendServerParam::key_only)
            .collect();
        self.batched("RemoveVServerGroupBackendServers", group, to_remove)
            .await
    }

    async fn set_weights(&self, group: &ServerGroupRef, backends: &[Backend]) -> Result<()> {
        let items = backends.iter().map(BackendServerParam::full).collect();
        self.batched("SetVServerGroupAttribute", group, items).await
    }

    async fn read_group(&self, group: &ServerGroupRef) -> Result<GroupReading> {
        let members = self.describe_vserver_group(group).await?;
        let (health, _) = self
            .call::<HealthStatus>(
                "DescribeHealthStatus",
                params([
                    ("LoadBalancerId", group.load_balancer_id.clone()),
                    ("ListenerPort", group.listener_port.to_string()),
                    (
                        "ListenerProtocol",
                        group.listener_protocol.as_api_str().to_ascii_lowercase(),
                    ),
                ]),
            )
            .await?;
        // `unavailable` means either "no verdict yet" or "checks are off"; only the
        // listener's settings tell which, so ask once when the answer matters.
        let any_unavailable = health
            .backend_servers
            .backend_server
            .iter()
            .any(|h| h.server_health_status == "unavailable");
        let checks_off = any_unavailable && !self.listener_checks_health(group).await?;
        let entries = &health.backend_servers.backend_server;
        let health = members
            .iter()
            .map(|member| {
                let reported = health_of(entries, &member.key, &members);
                let state = match reported.map(|h| h.server_health_status.as_str()) {
                    // Not in the report yet: registered but not checked so far.
                    None => HealthState::Pending,
                    Some("normal") => HealthState::Healthy,
                    Some("unavailable") if checks_off => HealthState::NotChecked,
                    Some("unavailable") => HealthState::Pending,
                    Some(other) => HealthState::Unhealthy {
                        reason: other.to_string(),
                    },
                };
                BackendHealth {
                    key: member.key.clone(),
                    state,
                }
            })
            .collect();
        Ok(GroupReading {
            backends: members,
            health,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend(i: u16) -> Backend {
        Backend {
            key: BackendKey {
                server_id: format!("eni-{i}"),
                ip: format!("10.0.0.{i}"),
                port: 8080,
            },
            kind: BackendType::Eni,
            weight: 100,
            description: "k8s/80/web/default/c1".into(),
        }
    }

    #[test]
    fn backend_servers_parameter_is_the_documented_json() {
        let b = backend(1);
        let json = backend_servers_json(&[BackendServerParam::full(&b)]);
        assert_eq!(
            json,
            r#"[{"ServerId":"eni-1","Port":"8080","Type":"eni","ServerIp":"10.0.0.1","Weight":"100","Description":"k8s/80/web/default/c1"}]"#
        );
        let json = backend_servers_json(&[BackendServerParam::key_only(&b)]);
        assert_eq!(
            json,
            r#"[{"ServerId":"eni-1","Port":"8080","Type":"eni","ServerIp":"10.0.0.1"}]"#
        );
    }

    #[test]
    fn group_attribute_parses_the_sdk_shape() {
        let body = r#"{"RequestId":"R","VServerGroupId":"rsp-1","BackendServers":{"BackendServer":[
            {"ServerId":"eni-1","Port":8080,"Weight":100,"Type":"eni","ServerIp":"10.0.0.1","Description":"d"}]}}"#;
        let parsed: VServerGroupAttribute = serde_json::from_str(body).unwrap();
        let b = &parsed.backend_servers.backend_server[0];
        assert_eq!(
            (b.server_id.as_str(), b.port, b.weight, b.kind.as_str()),
            ("eni-1", 8080, 100, "eni")
        );
    }

    #[test]
    fn load_balancer_attribute_reads_the_sdk_tag_shape() {
        let body = r#"{"LoadBalancerId":"lb-1","Tags":{"Tag":[{"TagKey":"rollgate.io/cluster-id","TagValue":"c1"}]}}"#;
        let parsed: LoadBalancerAttribute = serde_json::from_str(body).unwrap();
        assert_eq!(
            parsed.tags(),
            vec![("rollgate.io/cluster-id".to_string(), "c1".to_string())]
        );
        let untagged: LoadBalancerAttribute =
            serde_json::from_str(r#"{"LoadBalancerId":"lb-1"}"#).unwrap();
        assert!(untagged.tags().is_empty());
    }

    fn health(server_id: &str, server_ip: &str, eni_host: &str, status: &str) -> HealthEntry {
        HealthEntry {
            server_id: server_id.into(),
            server_ip: server_ip.into(),
            eni_host: eni_host.into(),
            port: 8080,
            server_health_status: status.into(),
        }
    }

    fn on_eni(eni: &str, ip: &str) -> Backend {
        let mut b = backend(1);
        b.key.server_id = eni.into();
        b.key.ip = ip.into();
        b
    }

    /// Terway's shared-ENI mode: two pods' IPs on one ENI, the same target port. Each
    /// pod gets its own entry's health, whichever IP field the cloud fills, and never
    /// its neighbour's.
    #[test]
    fn pods_sharing_an_eni_each_get_their_own_health() {
        let members = [on_eni("eni-1", "10.0.0.1"), on_eni("eni-1", "10.0.0.2")];
        for (first, second) in [
            (
                health("eni-1", "10.0.0.1", "10.0.0.1", "abnormal"),
                health("eni-1", "10.0.0.2", "10.0.0.2", "normal"),
            ),
            (
                health("eni-1", "", "10.0.0.1", "abnormal"),
                health("eni-1", "", "10.0.0.2", "normal"),
            ),
            (
                health("eni-1", "10.0.0.1", "", "abnormal"),
                health("eni-1", "10.0.0.2", "", "normal"),
            ),
        ] {
            let entries = [first, second];
            let status = |m: &Backend| {
                health_of(&entries, &m.key, &members).map(|e| e.server_health_status.as_str())
            };
            assert_eq!(status(&members[0]), Some("abnormal"));
            assert_eq!(status(&members[1]), Some("normal"));
        }
        // An entry that names neither pod's IP is neither pod's.
        let entries = [health("eni-1", "192.168.0.9", "", "normal")];
        assert_eq!(health_of(&entries, &members[1].key, &members), None);
        // Not reported yet: the neighbour's entry is not taken instead.
        let entries = [health("eni-1", "10.0.0.1", "10.0.0.1", "normal")];
        assert_eq!(health_of(&entries, &members[1].key, &members), None);
    }

    /// A backend alone on its server and port keeps the match by server and port,
    /// whatever IP the entry carries (an ECS instance's own address, say).
    #[test]
    fn a_backend_alone_on_its_server_is_matched_by_server_and_port() {
        let members = [on_eni("eni-1", "10.0.0.1"), on_eni("eni-2", "10.0.0.2")];
        let entries = [
            health("eni-2", "192.168.0.2", "", "abnormal"),
            health("eni-1", "192.168.0.1", "", "normal"),
        ];
        let status = |m: &Backend| {
            health_of(&entries, &m.key, &members).map(|e| e.server_health_status.as_str())
        };
        assert_eq!(status(&members[0]), Some("normal"));
        assert_eq!(status(&members[1]), Some("abnormal"));
    }

    #[test]
    fn health_report_parses_every_documented_field() {
        let body = r#"{"RequestId":"R","BackendServers":{"BackendServer":[
            {"ServerId":"eni-1","ServerIp":"10.0.0.2","EniHost":"10.0.0.2","Type":"eni","Port":8080,
             "ListenerPort":80,"Protocol":"tcp","ServerHealthStatus":"normal"}]}}"#;
        let parsed: HealthStatus = serde_json::from_str(body).unwrap();
        let entry = &parsed.backend_servers.backend_server[0];
        assert_eq!(
            (
                entry.server_id.as_str(),
                entry.eni_host.as_str(),
                entry.port
            ),
            ("eni-1", "10.0.0.2", 8080)
        );
    }

    /// No create sends pay-by-spec unless the Service asked for it; a spec goes only
    /// with pay-by-spec.
    #[test]
    fn instances_are_pay_by_clcu_unless_pay_by_spec_is_asked_for() {
        let instance = |spec: &str, charge_type: &str| ClbInstance {
            spec: spec.into(),
            charge_type: charge_type.into(),
        };
        #[rustfmt::skip]
        type Case<'a> = (&'a str, &'a str, Option<&'a str>, (&'a str, Option<&'a str>));
        let cases: &[Case] = &[
            ("", "", None, ("PayByCLCU", None)),
            ("slb.s1.small", "", None, ("PayByCLCU", None)),
            ("", "", Some("slb.s2.small"), ("PayByCLCU", None)),
            (
                "slb.s1.small",
                "PayByCLCU",
                Some("slb.s2.small"),
                ("PayByCLCU", None),
            ),
            (
                "slb.s1.small",
                "PayBySpec",
                Some("slb.s2.small"),
                ("PayBySpec", Some("slb.s1.small")),
            ),
            (
                "",
                "PayBySpec",
                Some("slb.s2.small"),
                ("PayBySpec", Some("slb.s2.small")),
            ),
            ("", "PayBySpec", None, ("PayBySpec", None)),
        ];
        for (spec, charge_type, configured, want) in cases {
            let wanted = instance(spec, charge_type);
            assert_eq!(
                instance_to_create(&wanted, *configured),
                *want,
                "{spec:?} {charge_type:?} {configured:?}"
            );
        }
    }

    #[test]
    fn client_token_is_stable_and_distinct() {
        assert_eq!(client_token(&["a", "b"]), client_token(&["a", "b"]));
        assert_ne!(client_token(&["a", "b"]), client_token(&["a", "c"]));
        assert_eq!(client_token(&["a"]).len(), 32);
    }
}
