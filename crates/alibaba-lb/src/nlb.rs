//! NLB (Network Load Balancer, API 2022-04-30). Mutating calls are asynchronous:
//! they return a JobId that we poll with GetJobStatus until it succeeds; a failed or
//! timed-out job is an error, never a success. Lists page with NextToken.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use tokio::time::Instant;

use crate::backends::LoadBalancerBackends;
use crate::clb::client_token;
use crate::config::{ClientConfig, JobPolicy, Product};
use crate::credentials::CredentialProvider;
use crate::error::{Error, Result};
use crate::model::*;
use crate::settings::nlb_differences;
use crate::transport::{lenient, params, ApiClient, Params};

/// Documented limit of servers per Add/Remove/Update call.
pub const NLB_BATCH_LIMIT: usize = 40;
/// Largest page ListServerGroupServers returns.
pub const NLB_PAGE_SIZE: usize = 100;

#[derive(Debug)]
pub struct NlbClient {
    api: ApiClient,
    region: String,
    jobs: JobPolicy,
    /// Listener id -> the server group it forwards to, as last read, and when.
    listener_groups: Mutex<HashMap<String, (String, Instant)>>,
    /// Server group id -> how long its health check takes to call a new server
    /// healthy (interval x healthy threshold), for the groups this client ensured.
    check_spans: Mutex<HashMap<String, Duration>>,
    /// (server group id, server) -> for a server this client added: when the add was
    /// done, and whether a health report has named it since (the evidence a silent
    /// server is healthy). Servers it did not add (there before a restart, or added by
    /// hand) have none: for them silence means healthy, as it always did.
    evidence: Mutex<HashMap<(String, BackendKey), Evidence>>,
}

/// What the health reports have shown of one server (see [`silent_server`]).
#[derive(Clone, Copy, Debug)]
struct Evidence {
    added_at: Instant,
    named: bool,
}

/// Whether an NLB in `status` is on its way to `Active` by itself (being created or
/// changed), so waiting helps. `Inactive` (stopped by its owner) and the others do
/// not change by waiting: the load balancer is used as it is, and no reconcile waits
/// the job timeout for it.
fn settling(status: &str) -> bool {
    matches!(status, "Provisioning" | "Configuring")
}

/// The NLB health check's defaults (SDK model of `CreateServerGroup`: interval 5 s,
/// healthy threshold 2), for a group whose settings this client did not set.
const DEFAULT_CHECK_INTERVAL_SECS: u32 = 5;
const DEFAULT_HEALTHY_THRESHOLD: u32 = 2;

/// How long the group's health check takes to call a new server healthy.
fn check_span(settings: &crate::settings::ListenerSettings) -> Duration {
    let check = &settings.health_check;
    let interval = check
        .interval_seconds
        .unwrap_or(DEFAULT_CHECK_INTERVAL_SECS);
    let threshold = check.healthy_threshold.unwrap_or(DEFAULT_HEALTHY_THRESHOLD);
    Duration::from_secs(u64::from(interval) * u64::from(threshold))
}

/// The health of an `Available` server that `GetListenerHealthStatus` does not name.
/// The report lists abnormal servers only, so silence means healthy, but only once
/// the server was looked at: whether a server added a moment ago is in the report at
/// once (as `Initial`) is not documented. Silence is evidence once a report has named
/// the server (it was `Initial` or unhealthy, and no longer is), or once the group's
/// check has had time to pass it (`span`: interval x healthy threshold).
fn silent_server(evidence: Evidence, span: Duration, now: Instant) -> HealthState {
    if evidence.named || now.duration_since(evidence.added_at) >= span {
        HealthState::Healthy
    } else {
        HealthState::Pending
    }
}

/// How long a listener's server group is trusted before it is read again: a listener
/// pointed elsewhere holds the gates within this time.
const LISTENER_GROUP_TTL: Duration = Duration::from_secs(30);

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct ServerJson {
    server_id: String,
    server_ip: String,
    #[serde(deserialize_with = "lenient::u16")]
    port: u16,
    #[serde(deserialize_with = "lenient::u32")]
    weight: u32,
    server_type: String,
    description: String,
    status: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct ServerPage {
    servers: Vec<ServerJson>,
    next_token: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct JobAnswer {
    job_id: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct JobStatus {
    status: String,
}

/// A tag as NLB answers it (`Tags: [{"Key", "Value"}]`).
#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct TagJson {
    key: String,
    value: String,
}

fn held_tags(tags: &[TagJson]) -> Vec<Tag> {
    tags.iter()
        .map(|t| (t.key.clone(), t.value.clone()))
        .collect()
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct LoadBalancerAttribute {
    load_balancer_id: String,
    load_balancer_status: String,
    #[serde(rename = "DNSName")]
    dns_name: String,
    tags: Vec<TagJson>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct CreatedLoadBalancer {
    // Spelled with a lower-case "b" by the API.
    #[serde(rename = "LoadbalancerId")]
    load_balancer_id: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct ServerGroupSummary {
    server_group_id: String,
    server_group_name: String,
    tags: Vec<TagJson>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct ServerGroupPage {
    server_groups: Vec<ServerGroupSummary>,
    next_token: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct CreatedServerGroup {
    server_group_id: String,
    job_id: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct ListenerSummary {
    listener_id: String,
    #[serde(deserialize_with = "lenient::u16")]
    listener_port: u16,
    listener_protocol: String,
    server_group_id: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct ListenerPage {
    listeners: Vec<ListenerSummary>,
    next_token: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct CreatedListener {
    listener_id: String,
    job_id: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct NonNormalReason {
    reason_code: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct NonNormalServer {
    server_id: String,
    server_ip: String,
    #[serde(deserialize_with = "lenient::u16")]
    port: u16,
    status: String,
    reason: NonNormalReason,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct ServerGroupHealth {
    server_group_id: String,
    // Spelled "Heath" by the API.
    heath_check_enabled: Option<bool>,
    non_normal_servers: Vec<NonNormalServer>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct ListenerHealth {
    server_group_infos: Vec<ServerGroupHealth>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct ListenerHealthPage {
    listener_health_status: Vec<ListenerHealth>,
    next_token: String,
}

/// Flattens servers as `Servers.<n>.<Field>` (1-based), the RPC list encoding.
fn flatten_servers(backends: &[&Backend], with_attributes: bool) -> Params {
    let mut out = Params::new();
    for (index, backend) in backends.iter().enumerate() {
        let n = index + 1;
        let mut push =
            |field: &str, value: String| out.push((format!("Servers.{n}.{field}"), value));
        push("ServerId", backend.key.server_id.clone());
        push("ServerType", backend.kind.as_nlb_str().to_string());
        push("ServerIp", backend.key.ip.clone());
        push("Port", backend.key.port.to_string());
        if with_attributes {
            push("Weight", backend.weight.to_string());
            if !backend.description.is_empty() {
                push("Description", backend.description.clone());
            }
        }
    }
    out
}

fn is_not_found(error: &Error) -> bool {
    matches!(error, Error::Api { code, .. } if crate::error::code_says_not_found(code))
}

/// The NLB form of a server group name: 2 to 128 characters, starting with a letter,
/// of letters, digits, `.`, `_` and `-` (SDK model of `CreateServerGroup`). The
/// caller's name (`k8s/<port>/<svc>/<ns>/<cluster>`, the CLB shape) has `/`, which NLB
/// refuses: every other character becomes `.`, and the result is cut at 128.
pub fn server_group_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '.'
            }
        })
        .collect();
    if !out.starts_with(|c: char| c.is_ascii_alphabetic()) {
        out.insert_str(0, "k8s.");
    }
    out.truncate(128);
    out
}

impl NlbClient {
    pub fn new(config: &ClientConfig, credentials: Arc<dyn CredentialProvider>) -> Result<Self> {
        Ok(Self {
            api: ApiClient::new(config, Product::Nlb, credentials)?,
            region: config.region.clone(),
            jobs: config.jobs.clone(),
            listener_groups: Mutex::default(),
            check_spans: Mutex::default(),
            evidence: Mutex::default(),
        })
    }

    fn region_param(&self) -> (String, String) {
        ("RegionId".to_string(), self.region.clone())
    }

    /// Reads go in the query, as the official SDK sends most of them.
    async fn read<T: serde::de::DeserializeOwned>(
        &self,
        action: &str,
        mut query: Params,
    ) -> Result<T> {
        query.push(self.region_param());
        Ok(self.api.call(action, &query, &[]).await?.body)
    }

    /// Mutations go in a form body (as the SDK sends them) with an idempotency token
    /// that stays the same across retries of this call.
    async fn mutate<T: serde::de::DeserializeOwned>(
        &self,
        action: &str,
        mut form: Params,
    ) -> Result<(T, String)> {
        form.push(self.region_param());
        if !form.iter().any(|(k, _)| k == "ClientToken") {
            form.push(("ClientToken".into(), crate::http::new_nonce()));
        }
        let answer = self.api.call(action, &[], &form).await?;
        Ok((answer.body, answer.request_id))
    }

    /// Polls GetJobStatus until the job leaves `Processing`. Only `Succeeded` is
    /// success; `Failed` (or anything unknown) and running out of time are errors.
    async fn wait_for_job(&self, action: &str, job_id: &str, request_id: &str) -> Result<()> {
        if job_id.is_empty() {
            return Err(Error::Decode {
                action: action.into(),
                request_id: request_id.into(),
                detail: "no JobId in the answer to an asynchronous call".into(),
            });
        }
        let started = Instant::now();
        loop {
            let status: JobStatus = self
                .read("GetJobStatus", params([("JobId", job_id.to_string())]))
                .await?;
            match status.status.as_str() {
                "Succeeded" => {
                    tracing::debug!(action, job_id, request_id, "job succeeded");
                    return Ok(());
                }
                "Processing" | "" => {}
                other => {
                    return Err(Error::JobFailed {
                        action: action.into(),
                        job_id: job_id.into(),
                        status: other.into(),
                        request_id: request_id.into(),
                    })
                }
            }
            if started.elapsed() >= self.jobs.timeout {
                return Err(Error::JobTimedOut {
                    action: action.into(),
                    job_id: job_id.into(),
                    waited: started.elapsed(),
                    request_id: request_id.into(),
                });
            }
            tokio::time::sleep(self.jobs.poll_interval).await;
        }
    }

    async fn mutate_and_wait(&self, action: &str, form: Params) -> Result<()> {
        let (answer, request_id) = self.mutate::<JobAnswer>(action, form).await?;
        self.wait_for_job(action, &answer.job_id, &request_id).await
    }

    async fn load_balancer_attribute(&self, id: &str) -> Result<LoadBalancerAttribute> {
        const ACTION: &str = "GetLoadBalancerAttribute";
        match self
            .read(ACTION, params([("LoadBalancerId", id.to_string())]))
            .await
        {
            Err(Error::Api {
                code, request_id, ..
            }) if crate::error::code_says_not_found(&code) => Err(Error::NotFound {
                action: ACTION.into(),
                what: format!("load balancer {id}"),
                request_id,
            }),
            other => other,
        }
    }

    /// A new load balancer is `Provisioning` for a while; listeners can be added
    /// only once it is `Active`.
    async fn wait_until_active(&self, id: &str) -> Result<LoadBalancerAttribute> {
        let started = Instant::now();
        loop {
            let attribute = self.load_balancer_attribute(id).await?;
            if !settling(&attribute.load_balancer_status) {
                return Ok(attribute);
            }
            if started.elapsed() >= self.jobs.timeout {
                return Err(Error::JobTimedOut {
                    action: "CreateLoadBalancer".into(),
                    job_id: id.into(),
                    waited: started.elapsed(),
                    request_id: crate::error::NO_REQUEST_ID.into(),
                });
            }
            tokio::time::sleep(self.jobs.poll_interval).await;
        }
    }

    /// Every page of a NextToken-paged list.
    async fn paged<P, I>(
        &self,
        action: &str,
        base: Params,
        page_size: usize,
        split: impl Fn(P) -> (Vec<I>, String),
    ) -> Result<Vec<I>>
    where
        P: serde::de::DeserializeOwned,
    {
        let mut items = Vec::new();
        let mut next_token = String::new();
        loop {
            let mut query = base.clone();
            query.push(("MaxResults".into(), page_size.to_string()));
            if !next_token.is_empty() {
                query.push(("NextToken".into(), next_token.clone()));
            }
            let (page_items, token) = split(self.read::<P>(action, query).await?);
            items.extend(page_items);
            if token.is_empty() || token == next_token {
                return Ok(items);
            }
            next_token = token;
        }
    }

    async fn servers(&self, group: &ServerGroupRef) -> Result<Vec<(Backend, String)>> {
        let servers = self
            .paged(
                "ListServerGroupServers",
                params([("ServerGroupId", group.server_group_id.clone())]),
                NLB_PAGE_SIZE,
                |p: ServerPage| (p.servers, p.next_token),
            )
            .await?;
        Ok(servers
            .into_iter()
            .map(|s| {
                let backend = Backend {
                    key: BackendKey {
                        server_id: s.server_id,
                        ip: s.server_ip,
                        port: s.port,
                    },
                    kind: BackendType::parse(&s.server_type).unwrap_or(BackendType::Ip),
                    weight: s.weight,
                    description: s.description,
                };
                (backend, s.status)
            })
            .collect())
    }

    /// The group of `listener` found by the cluster's tag and its name (never by the
    /// name alone: another cluster's group may carry it), else created with the tags.
    /// Without a cluster tag nothing is searched for across the region.
    async fn ensure_server_group(
        &self,
        spec: &LoadBalancerSpec,
        listener: &ListenerSpec,
    ) -> Result<String> {
        let name = server_group_name(&listener.server_group_name);
        if let Some(cluster) = &spec.tags.cluster {
            let mut query = params([("ServerGroupNames.1", name.clone())]);
            query.extend(tag_params(std::slice::from_ref(cluster)));
            let existing = self
                .paged(
                    "ListServerGroups",
                    query,
                    NLB_PAGE_SIZE,
                    |p: ServerGroupPage| (p.server_groups, p.next_token),
                )
                .await?;
            if let Some(group) = existing.iter().find(|g| g.server_group_name == name) {
                if !listener.settings.is_default() {
                    self.sync_group_settings(&group.server_group_id, listener)
                        .await?;
                }
                return Ok(group.server_group_id.clone());
            }
        }
        let mut form = params([
            ("ServerGroupName", name.clone()),
            // Pod IPs are registered directly (Terway ENI mode).
            ("ServerGroupType", "Ip".to_string()),
            ("Protocol", listener.protocol.as_api_str().to_string()),
            ("AddressIPVersion", "ipv4".to_string()),
            // No `ClientToken` derived from the name: a token already used is answered
            // with its first request's group, a deleted one if the group was deleted
            // and is made again (fidelity row 45). `mutate` gives each create a token
            // of its own, kept through its retries; a group made by an earlier
            // reconcile is found by its tags and name above, not by the token.
        ]);
        // The health check (on unless switched off) and the drain.
        form.extend(
            listener
                .settings
                .nlb_params(listener.protocol == ListenerProtocol::Tcp),
        );
        if let Some(vpc) = &spec.vpc_id {
            form.push(("VpcId".into(), vpc.clone()));
        }
        form.extend(tag_params(&spec.tags.all()));
        let (created, request_id) = self
            .mutate::<CreatedServerGroup>("CreateServerGroup", form)
            .await?;
        self.wait_for_job("CreateServerGroup", &created.job_id, &request_id)
            .await?;
        Ok(created.server_group_id)
    }
}

impl NlbClient {
    /// The group an existing listener of this port forwards to, when it carries this
    /// listener's group name or the one earlier versions gave it (`former_group_name`):
    /// kept as it is, so a group made before groups were tagged (or under the former
    /// cluster id) is adopted on upgrade. Looked up by the listener's own group id
    /// within this load balancer, never by name across the region. A group tagged for
    /// another cluster is refused, never adopted.
    async fn listener_group(
        &self,
        spec: &LoadBalancerSpec,
        existing: Option<&ListenerSummary>,
        listener: &ListenerSpec,
    ) -> Result<Option<String>> {
        let Some(existing) = existing.filter(|e| !e.server_group_id.is_empty()) else {
            return Ok(None);
        };
        const ACTION: &str = "ListServerGroups";
        let groups = self
            .paged(
                ACTION,
                params([("ServerGroupIds.1", existing.server_group_id.clone())]),
                NLB_PAGE_SIZE,
                |p: ServerGroupPage| (p.server_groups, p.next_token),
            )
            .await?;
        let Some(group) = groups
            .iter()
            .find(|g| g.server_group_id == existing.server_group_id)
        else {
            return Ok(None);
        };
        let current = server_group_name(&listener.server_group_name);
        let former = listener.former_group_name.as_deref().map(server_group_name);
        let name = group.server_group_name.as_str();
        if name != current && former.as_deref() != Some(name) {
            return Ok(None);
        }
        if let Some(cluster) = spec.tags.other_cluster(&held_tags(&group.tags)) {
            return Err(Error::OtherCluster {
                action: ACTION.into(),
                what: format!("server group {}", group.server_group_id),
                cluster,
                request_id: crate::error::NO_REQUEST_ID.into(),
            });
        }
        Ok(Some(group.server_group_id.clone()))
    }

    /// Sets an existing server group's health check and drain again where they
    /// differ from the Service's annotations (read back with `ListServerGroups`).
    async fn sync_group_settings(&self, group_id: &str, listener: &ListenerSpec) -> Result<()> {
        let wanted = listener
            .settings
            .nlb_params(listener.protocol == ListenerProtocol::Tcp);
        let listed: serde_json::Value = self
            .read(
                "ListServerGroups",
                params([("ServerGroupIds.1", group_id.to_string())]),
            )
            .await?;
        let group = &listed["ServerGroups"][0];
        let differ = nlb_differences(&wanted, group);
        if differ.is_empty() {
            return Ok(());
        }
        tracing::info!(
            server_group_id = group_id,
            ?differ,
            "setting server group attributes"
        );
        let mut form = params([("ServerGroupId", group_id.to_string())]);
        form.extend(wanted);
        self.mutate_and_wait("UpdateServerGroupAttribute", form)
            .await
    }
}

#[async_trait::async_trait]
impl LoadBalancerBackends for NlbClient {
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
        Product::Nlb
    }

    async fn ensure_load_balancer(&self, spec: &LoadBalancerSpec) -> Result<LoadBalancer> {
        let (id, created) = match &spec.existing_id {
            Some(id) => (id.clone(), false),
            None => {
                let mut form = params([
                    ("LoadBalancerName", spec.name.clone()),
                    ("LoadBalancerType", "Network".to_string()),
                    ("AddressType", spec.address_type.as_nlb_str().to_string()),
                    ("AddressIpVersion", "ipv4".to_string()),
                    (
                        "ClientToken",
                        client_token(&["nlb", &self.region, &spec.name]),
                    ),
                ]);
                if let Some(vpc) = &spec.vpc_id {
                    form.push(("VpcId".into(), vpc.clone()));
                }
                form.extend(tag_params(&spec.tags.all()));
                for (i, zone) in spec.zones.iter().enumerate() {
                    form.push((
                        format!("ZoneMappings.{}.ZoneId", i + 1),
                        zone.zone_id.clone(),
                    ));
                    form.push((
                        format!("ZoneMappings.{}.VSwitchId", i + 1),
                        zone.vswitch_id.clone(),
                    ));
                }
                let (created, request_id) = self
                    .mutate::<CreatedLoadBalancer>("CreateLoadBalancer", form)
                    .await?;
                tracing::info!(load_balancer_id = %created.load_balancer_id, request_id, "created NLB");
                (created.load_balancer_id, true)
            }
        };
        let attribute = self.wait_until_active(&id).await?;
        // A load balancer another cluster's rollgate made (or tagged) is never wired into.
        if let Some(cluster) = spec.tags.other_cluster(&held_tags(&attribute.tags)) {
            return Err(Error::OtherCluster {
                action: "GetLoadBalancerAttribute".into(),
                what: format!("load balancer {id}"),
                cluster,
                request_id: crate::error::NO_REQUEST_ID.into(),
            });
        }
        let mut listeners = self
            .paged(
                "ListListeners",
                params([("LoadBalancerIds.1", id.clone())]),
                NLB_PAGE_SIZE,
                |p: ListenerPage| (p.listeners, p.next_token),
            )
            .await?;
        let mut groups = Vec::with_capacity(spec.listeners.len());
        for listener in &spec.listeners {
            let protocol = listener.protocol.as_api_str();
            let existing = listeners.iter().find(|l| {
                l.listener_port == listener.port
                    && l.listener_protocol.eq_ignore_ascii_case(protocol)
            });
            let group_id = match self.listener_group(spec, existing, listener).await? {
                Some(adopted) => {
                    if !listener.settings.is_default() {
                        self.sync_group_settings(&adopted, listener).await?;
                    }
                    adopted
                }
                None => self.ensure_server_group(spec, listener).await?,
            };
            self.check_spans
                .lock()
                .unwrap()
                .insert(group_id.clone(), check_span(&listener.settings));
            let listener_id = match existing {
                Some(existing) => existing.listener_id.clone(),
                None => {
                    let (created, request_id) = self
                        .mutate::<CreatedListener>(
                            "CreateListener",
                            params([
                                ("LoadBalancerId", id.clone()),
                                ("ListenerProtocol", protocol.to_string()),
                                ("ListenerPort", listener.port.to_string()),
                                ("ServerGroupId", group_id.clone()),
                                // A token of this request's own (`mutate`), as for
                                // the group: a listener made earlier is found by
                                // its port above.
                            ]),
                        )
                        .await?;
                    self.wait_for_job("CreateListener", &created.job_id, &request_id)
                        .await?;
                    listeners.push(ListenerSummary {
                        listener_id: created.listener_id.clone(),
                        listener_port: listener.port,
                        listener_protocol: protocol.to_string(),
                        server_group_id: group_id.clone(),
                    });
                    created.listener_id
                }
            };
            groups.push(ServerGroupRef {
                load_balancer_id: id.clone(),
                server_group_id: group_id,
                listener_port: listener.port,
                listener_protocol: listener.protocol,
                listener_id: Some(listener_id),
            });
        }
        Ok(LoadBalancer {
            id: if attribute.load_balancer_id.is_empty() {
                id
            } else {
                attribute.load_balancer_id
            },
            address: Some(attribute.dns_name).filter(|a| !a.is_empty()),
            created,
            listeners: groups,
            clb_instance: None,
        })
    }

    async fn delete_load_balancer(&self, load_balancer_id: &str) -> Result<()> {
        match self
            .mutate_and_wait(
                "DeleteLoadBalancer",
                params([("LoadBalancerId", load_balancer_id.to_string())]),
            )
            .await
        {
            Err(e) if is_not_found(&e) => Ok(()),
            other => other,
        }
    }

    async fn load_balancer_tags(&self, load_balancer_id: &str) -> Result<Option<Vec<Tag>>> {
        match self.load_balancer_attribute(load_balancer_id).await {
            Ok(attribute) => Ok(Some(held_tags(&attribute.tags))),
            Err(Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn server_groups(&self, load_balancer_id: &str) -> Result<Option<Vec<ServerGroupRef>>> {
        match self.load_balancer_attribute(load_balancer_id).await {
            Ok(_) => {}
            Err(Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        }
        let listeners = match self
            .paged(
                "ListListeners",
                params([("LoadBalancerIds.1", load_balancer_id.to_string())]),
                NLB_PAGE_SIZE,
                |p: ListenerPage| (p.listeners, p.next_token),
            )
            .await
        {
            Ok(listeners) => listeners,
            Err(e) if is_not_found(&e) => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut seen = HashSet::new();
        Ok(Some(
            listeners
                .into_iter()
                .filter(|l| !l.server_group_id.is_empty())
                .filter(|l| seen.insert(l.server_group_id.clone()))
                .map(|l| ServerGroupRef {
                    load_balancer_id: load_balancer_id.to_string(),
                    server_group_id: l.server_group_id,
                    listener_port: l.listener_port,
                    listener_protocol: if l.listener_protocol.eq_ignore_ascii_case("UDP") {
                        ListenerProtocol::Udp
                    } else {
                        ListenerProtocol::Tcp
                    },
                    listener_id: Some(l.listener_id),
                })
                .collect(),
        ))
    }

    async fn wiring(&self, load_balancer_id: &str) -> Result<Option<Wiring>> {
        let Some(refs) = self.server_groups(load_balancer_id).await? else {
            return Ok(None);
        };
        let listeners: Vec<ListenerWiring> = refs
            .iter()
            .map(|r| ListenerWiring {
                port: r.listener_port,
                protocol: r.listener_protocol,
                listener_id: r.listener_id.clone(),
                server_group_id: r.server_group_id.clone(),
            })
            .collect();
        let mut base = Params::new();
        for (i, r) in refs.iter().enumerate() {
            base.push((
                format!("ServerGroupIds.{}", i + 1),
                r.server_group_id.clone(),
            ));
        }
        let groups = if refs.is_empty() {
            vec![]
        } else {
            self.paged(
                "ListServerGroups",
                base,
                NLB_PAGE_SIZE,
                |p: ServerGroupPage| (p.server_groups, p.next_token),
            )
            .await?
        };
        Ok(Some(Wiring {
            listeners,
            groups: groups
                .into_iter()
                .map(|g| ServerGroupName {
                    id: g.server_group_id,
                    name: g.server_group_name,
                })
                .collect(),
        }))
    }

    async fn delete_listener(
        &self,
        _load_balancer_id: &str,
        listener: &ListenerWiring,
    ) -> Result<()> {
        let Some(id) = &listener.listener_id else {
            return Ok(());
        };
        self.listener_groups.lock().unwrap().remove(id);
        match self
            .mutate_and_wait("DeleteListener", params([("ListenerId", id.clone())]))
            .await
        {
            Err(e) if !is_not_found(&e) => Err(e),
            _ => Ok(()),
        }
    }

    async fn delete_server_group(&self, server_group_id: &str) -> Result<()> {
        match self
            .mutate_and_wait(
                "DeleteServerGroup",
                params([("ServerGroupId", server_group_id.to_string())]),
            )
            .await
        {
            Err(e) if !is_not_found(&e) => Err(e),
            _ => Ok(()),
        }
    }

    async fn listener_server_group(&self, group: &ServerGroupRef) -> Result<Option<String>> {
        if let Some(id) = &group.listener_id {
            if let Some((target, at)) = self.listener_groups.lock().unwrap().get(id) {
                if at.elapsed() < LISTENER_GROUP_TTL {
                    return Ok(Some(target.clone()));
                }
            }
        }
        let listeners = self
            .paged(
                "ListListeners",
                params([("LoadBalancerIds.1", group.load_balancer_id.clone())]),
                NLB_PAGE_SIZE,
                |p: ListenerPage| (p.listeners, p.next_token),
            )
            .await?;
        let protocol = group.listener_protocol.as_api_str();
        let Some(listener) = listeners.iter().find(|l| match &group.listener_id {
            Some(id) => &l.listener_id == id,
            None => {
                l.listener_port == group.listener_port
                    && l.listener_protocol.eq_ignore_ascii_case(protocol)
            }
        }) else {
            return Ok(None);
        };
        self.listener_groups.lock().unwrap().insert(
            listener.listener_id.clone(),
            (listener.server_group_id.clone(), Instant::now()),
        );
        Ok(Some(listener.server_group_id.clone()))
    }

    async fn list_backends(&self, group: &ServerGroupRef) -> Result<Vec<Backend>> {
        Ok(self
            .servers(group)
            .await?
            .into_iter()
            .map(|(b, _)| b)
            .collect())
    }

    async fn add_backends(&self, group: &ServerGroupRef, backends: &[Backend]) -> Result<()> {
        let present: HashSet<BackendKey> = self
            .servers(group)
            .await?
            .into_iter()
            .map(|(b, _)| b.key)
            .collect();
        let missing: Vec<&Backend> = backends
            .iter()
            .filter(|b| !present.contains(&b.key))
            .collect();
        for batch in batches(&missing, NLB_BATCH_LIMIT) {
            let mut form = flatten_servers(batch, true);
            form.push(("ServerGroupId".into(), group.server_group_id.clone()));
            // One group accepts one change at a time, so each job must finish first.
            self.mutate_and_wait("AddServersToServerGroup", form)
                .await?;
            // Added by this client: silence about them means nothing until a report
            // has named them or the check has had time (`silent_server`).
            let now = Instant::now();
            let mut evidence = self.evidence.lock().unwrap();
            for b in batch {
                let key = (group.server_group_id.clone(), b.key.clone());
                evidence.insert(
                    key,
                    Evidence {
                        added_at: now,
                        named: false,
                    },
                );
            }
        }
        Ok(())
    }

    async fn remove_backends(&self, group: &ServerGroupRef, backends: &[BackendKey]) -> Result<()> {
        let wanted: HashSet<&BackendKey> = backends.iter().collect();
        let present = self.servers(group).await?;
        let to_remove: Vec<&Backend> = present
            .iter()
            .map(|(b, _)| b)
            .filter(|b| wanted.contains(&b.key))
            .collect();
        for batch in batches(&to_remove, NLB_BATCH_LIMIT) {
            let mut form = flatten_servers(batch, false);
            form.push(("ServerGroupId".into(), group.server_group_id.clone()));
            self.mutate_and_wait("RemoveServersFromServerGroup", form)
                .await?;
        }
        Ok(())
    }

    async fn set_weights(&self, group: &ServerGroupRef, backends: &[Backend]) -> Result<()> {
        let all: Vec<&Backend> = backends.iter().collect();
        for batch in batches(&all, NLB_BATCH_LIMIT) {
            let mut form = flatten_servers(batch, true);
            form.push(("ServerGroupId".into(), group.server_group_id.clone()));
            self.mutate_and_wait("UpdateServerGroupServersAttribute", form)
                .await?;
        }
        Ok(())
    }

    async fn read_group(&self, group: &ServerGroupRef) -> Result<GroupReading> {
        let listener_id = group.listener_id.clone().ok_or_else(|| {
            Error::Config(format!(
                "NLB health needs the listener id of server group {}",
                group.server_group_id
            ))
        })?;
        let servers = self.servers(group).await?;
        let reports = self
            .paged(
                "GetListenerHealthStatus",
                params([("ListenerId", listener_id)]),
                NLB_PAGE_SIZE,
                |p: ListenerHealthPage| (p.listener_health_status, p.next_token),
            )
            .await?;
        let infos: Vec<&ServerGroupHealth> = reports
            .iter()
            .flat_map(|l| l.server_group_infos.iter())
            .filter(|g| g.server_group_id == group.server_group_id)
            .collect();
        let checks_disabled =
            !infos.is_empty() && infos.iter().all(|g| g.heath_check_enabled == Some(false));
        let now = Instant::now();
        let span = self
            .check_spans
            .lock()
            .unwrap()
            .get(&group.server_group_id)
            .copied()
            .unwrap_or(Duration::from_secs(u64::from(
                DEFAULT_CHECK_INTERVAL_SECS * DEFAULT_HEALTHY_THRESHOLD,
            )));
        let mut evidence = self.evidence.lock().unwrap();
        // Servers gone from the group are forgotten.
        evidence.retain(|(group_id, key), _| {
            group_id != &group.server_group_id || servers.iter().any(|(b, _)| &b.key == key)
        });
        let health = servers
            .iter()
            .map(|(backend, status)| {
                let abnormal = infos
                    .iter()
                    .flat_map(|g| g.non_normal_servers.iter())
                    .find(|s| {
                        s.port == backend.key.port
                            && (s.server_id == backend.key.server_id
                                || s.server_ip == backend.key.ip)
                    });
                let state = match abnormal {
                    Some(s) => match s.status.as_str() {
                        "Initial" => HealthState::Pending,
                        "Unused" => HealthState::Unused,
                        "Unavailable" => HealthState::NotChecked,
                        _ => HealthState::Unhealthy {
                            reason: if s.reason.reason_code.is_empty() {
                                s.status.clone()
                            } else {
                                s.reason.reason_code.clone()
                            },
                        },
                    },
                    None if checks_disabled => HealthState::NotChecked,
                    // Still being added (or removed): not in service yet.
                    None if status != "Available" => HealthState::Pending,
                    None => {
                        let key = (group.server_group_id.clone(), backend.key.clone());
                        evidence
                            .get(&key)
                            .map_or(HealthState::Healthy, |seen| silent_server(*seen, span, now))
                    }
                };
                if abnormal.is_some() {
                    let key = (group.server_group_id.clone(), backend.key.clone());
                    if let Some(seen) = evidence.get_mut(&key) {
                        seen.named = true;
                    }
                }
                BackendHealth {
                    key: backend.key.clone(),
                    state,
                }
            })
            .collect();
        Ok(GroupReading {
            backends: servers.into_iter().map(|(backend, _)| backend).collect(),
            health,
        })
    }
}

#[cfg(test)]
mod tests {
    /// A silent server this client added is healthy only on evidence: a report named
    /// it before, or the check has had interval x healthy threshold since the add.
    #[test]
    fn only_a_load_balancer_being_made_or_changed_is_waited_for() {
        use super::settling;
        assert!(settling("Provisioning"));
        assert!(settling("Configuring"));
        for status in ["Active", "Inactive", "Deleting"] {
            assert!(!settling(status), "{status}");
        }
    }

    #[test]
    fn a_silent_new_server_is_healthy_only_on_evidence() {
        use super::*;
        let added_at = Instant::now();
        let span = Duration::from_secs(10);
        let at = |secs| added_at + Duration::from_secs(secs);
        let unnamed = Evidence {
            added_at,
            named: false,
        };
        let named = Evidence {
            added_at,
            named: true,
        };
        assert_eq!(silent_server(unnamed, span, at(0)), HealthState::Pending);
        assert_eq!(silent_server(unnamed, span, at(9)), HealthState::Pending);
        assert_eq!(silent_server(unnamed, span, at(10)), HealthState::Healthy);
        assert_eq!(silent_server(named, span, at(0)), HealthState::Healthy);
        let mut settings = crate::settings::ListenerSettings::default();
        assert_eq!(check_span(&settings), Duration::from_secs(10));
        settings.health_check.interval_seconds = Some(3);
        settings.health_check.healthy_threshold = Some(4);
        assert_eq!(check_span(&settings), Duration::from_secs(12));
    }

    #[test]
    fn server_group_names_have_the_nlb_shape() {
        assert_eq!(
            super::server_group_name("k8s/80/web/default/c1"),
            "k8s.80.web.default.c1"
        );
        assert_eq!(super::server_group_name("80/web"), "k8s.80.web");
        let long = super::server_group_name(&format!("k8s/{}", "a".repeat(200)));
        assert_eq!(long.len(), 128);
    }

    use super::*;

    #[test]
    fn servers_are_flattened_one_based() {
        let b = |i: u16| Backend {
            key: BackendKey {
                server_id: format!("10.0.0.{i}"),
                ip: format!("10.0.0.{i}"),
                port: 80,
            },
            kind: BackendType::Ip,
            weight: 50,
            description: "d".into(),
        };
        let (b1, b2) = (b(1), b(2));
        let flat = flatten_servers(&[&b1, &b2], true);
        let get = |k: &str| {
            flat.iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("Servers.1.ServerId"), Some("10.0.0.1"));
        assert_eq!(get("Servers.2.ServerIp"), Some("10.0.0.2"));
        assert_eq!(get("Servers.2.ServerType"), Some("Ip"));
        assert_eq!(get("Servers.1.Weight"), Some("50"));
        assert_eq!(get("Servers.3.ServerId"), None);
        let keys_only = flatten_servers(&[&b1], false);
        assert!(keys_only.iter().all(|(k, _)| !k.ends_with("Weight")));
    }

    #[test]
    fn health_report_parses_the_documented_shape() {
        let body = r#"{"RequestId":"R","ListenerHealthStatus":[{"ListenerId":"lsn-1","ListenerPort":80,
            "ServerGroupInfos":[{"HeathCheckEnabled":true,"ServerGroupId":"sgp-1","NonNormalServers":[
            {"Status":"Unhealthy","Port":80,"Reason":{"ReasonCode":"CONNECT_TIMEOUT"},"ServerId":"i-1","ServerIp":"10.0.0.1"}]}]}],
            "NextToken":"","MaxResults":20}"#;
        let page: ListenerHealthPage = serde_json::from_str(body).unwrap();
        let server = &page.listener_health_status[0].server_group_infos[0].non_normal_servers[0];
        assert_eq!(server.reason.reason_code, "CONNECT_TIMEOUT");
        assert_eq!(server.port, 80);
    }

    #[test]
    fn created_load_balancer_reads_the_lower_case_b_field() {
        let created: CreatedLoadBalancer =
            serde_json::from_str(r#"{"LoadbalancerId":"nlb-1","OrderId":1,"RequestId":"R"}"#)
                .unwrap();
        assert_eq!(created.load_balancer_id, "nlb-1");
    }
}
