//! Observe and apply, cloud side: one client per product, the load balancer of each
//! Service (remembered between reconciles), server groups read into the plan's view,
//! and the plan's backend changes sent in batches. Every call is counted by action and
//! result. Also the Service's Warning when its CLB instance takes no pod backends.
//!
//! The last reading of each Service's groups is kept ([`Reading`]) so that a reconcile
//! a pod event brings re-plans on it instead of calling the cloud again. It is the
//! reading the poller's last look made, so acting on it is what the controller does
//! between two looks anyway; rollgate's own backend changes void it (`void_reading`),
//! so no plan is made on a reading that predates them; and a reading is never used
//! past the moment the Service's next look is due (`Poller::read_rule`: the fast
//! interval while a gate is pending), nor by the reconcile of a granted look. Without
//! a reading that young, the reconcile asks for a look instead of reading.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use alibaba_lb::{
    BackendType, Error as CloudError, ListenerProtocol, LoadBalancer, LoadBalancerBackends,
    LoadBalancerSpec, Product, ServerGroupRef, Tag,
};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::EventType;
use tokio::time::Instant;

use super::metrics::GateMetrics;
use super::model::{CloudFailure, GroupChanges, GroupState};
use super::reasons;
use crate::apply::{event, EventDedup, Events, Topic};
use crate::names::{
    CLOUD_QUOTA_EXCEEDED_EVENT, CLUSTER_ID_TAG, LISTENER_STOPPED_EVENT,
    LOAD_BALANCER_TAKES_NO_POD_BACKENDS_EVENT, OTHER_CLUSTERS_RESOURCE_EVENT,
};

/// A Service's groups as one look read them.
#[derive(Clone, Debug)]
pub struct Reading {
    pub at: Instant,
    pub groups: Vec<GroupState>,
}

/// The clients, and what each Service's load balancer looked like when last ensured.
pub struct Cloud {
    clb: Arc<dyn LoadBalancerBackends>,
    nlb: Arc<dyn LoadBalancerBackends>,
    /// Service uid -> (the spec it was ensured for, the answer).
    ensured: Mutex<HashMap<String, (LoadBalancerSpec, LoadBalancer)>>,
    /// Service uid -> its groups as last read.
    readings: Mutex<HashMap<String, Reading>>,
    metrics: GateMetrics,
    /// Warnings said about each Service's load balancer (one per instance state).
    said: EventDedup,
    /// Warnings that a resource is another cluster's (one per resource and cluster).
    said_other_cluster: EventDedup,
    /// Warnings that an account quota refuses the Service's load balancer or backends.
    said_quota: EventDedup,
    /// Warnings that a listener was found stopped and started.
    said_listener_stopped: EventDedup,
}

impl Cloud {
    pub fn new(
        clb: Arc<dyn LoadBalancerBackends>,
        nlb: Arc<dyn LoadBalancerBackends>,
        metrics: GateMetrics,
    ) -> Self {
        Cloud {
            clb,
            nlb,
            ensured: Mutex::default(),
            readings: Mutex::default(),
            metrics,
            said: EventDedup::default(),
            said_other_cluster: EventDedup::default(),
            said_quota: EventDedup::default(),
            said_listener_stopped: EventDedup::default(),
        }
    }

    pub fn client(&self, product: Product) -> &dyn LoadBalancerBackends {
        match product {
            Product::Clb => self.clb.as_ref(),
            Product::Nlb => self.nlb.as_ref(),
        }
    }

    /// NLB `Ip` groups take the pod IP as the server id; CLB has no IP type, so its
    /// backends are servers (`eni`, or `eci` for ECI pods) found by `eni::Placer`.
    pub fn backend_type(&self, product: Product) -> BackendType {
        match product {
            Product::Clb => BackendType::Eni,
            Product::Nlb => BackendType::Ip,
        }
    }

    fn count<T>(&self, action: &str, result: &Result<T, CloudError>) {
        let label = match result {
            Ok(_) => "success",
            Err(e) => e.metric_label(),
        };
        self.metrics.cloud_call(action, label);
    }

    /// The Service's load balancer, with a listener and server group per port.
    /// Cloud calls only when the spec changed since the last success.
    pub async fn ensure(
        &self,
        uid: &str,
        product: Product,
        spec: &LoadBalancerSpec,
    ) -> Result<LoadBalancer, CloudError> {
        if let Some((known, lb)) = self.ensured.lock().unwrap().get(uid) {
            // An instance that takes no pod backends is looked at again each time: its
            // spec can be changed in place, and the gates should follow at once.
            let usable = lb
                .clb_instance
                .as_ref()
                .is_none_or(|i| i.takes_pod_backends());
            if known == spec && usable {
                return Ok(lb.clone());
            }
        }
        let result = self.client(product).ensure_load_balancer(spec).await;
        self.count("EnsureLoadBalancer", &result);
        let lb = result?;
        self.ensured
            .lock()
            .unwrap()
            .insert(uid.to_string(), (spec.clone(), lb.clone()));
        Ok(lb)
    }

    /// Whether the Service's load balancer was ensured for exactly this spec (so no
    /// cloud call is made for it).
    pub fn knows(&self, uid: &str, spec: &LoadBalancerSpec) -> bool {
        self.ensured
            .lock()
            .unwrap()
            .get(uid)
            .is_some_and(|(known, _)| known == spec)
    }

    /// Drops what was remembered of a Service (deleted, or its groups must be re-found).
    pub fn forget(&self, uid: &str) {
        self.ensured.lock().unwrap().remove(uid);
        self.void_reading(uid);
    }

    /// The Service's last reading, if it is of exactly these groups (in order), not
    /// older than `max_age`, and not voided since.
    pub fn reading(
        &self,
        uid: &str,
        groups: &[ServerGroupRef],
        max_age: Duration,
        now: Instant,
    ) -> Option<Reading> {
        let readings = self.readings.lock().unwrap();
        let reading = readings.get(uid)?;
        let same_groups = reading.groups.len() == groups.len()
            && reading
                .groups
                .iter()
                .zip(groups)
                .all(|(read, group)| read.server_group_id == group.server_group_id);
        (same_groups && now.saturating_duration_since(reading.at) <= max_age)
            .then(|| reading.clone())
    }

    /// Keeps a reading of all the Service's groups, made at `at`.
    pub fn remember_reading(&self, uid: &str, groups: &[GroupState], at: Instant) {
        self.readings.lock().unwrap().insert(
            uid.to_string(),
            Reading {
                at,
                groups: groups.to_vec(),
            },
        );
    }

    /// The Service's backends were (or may have been) changed: its reading is stale.
    pub fn void_reading(&self, uid: &str) {
        self.readings.lock().unwrap().remove(uid);
    }

    /// One Warning on the Service while its CLB instance takes no pod backends
    /// (`instance`: its spec, `None` once it takes them, which clears the slate).
    pub async fn warn_no_pod_backends(
        &self,
        events: &Events,
        action: &str,
        uid: &str,
        reference: &ObjectReference,
        refused: Option<(&str, &str)>,
    ) {
        let Some((load_balancer_id, instance)) = refused else {
            self.said.forget(uid, Topic::Warning);
            return;
        };
        let note = reasons::service_load_balancer_takes_no_pod_backends(load_balancer_id, instance);
        let warning = event(
            EventType::Warning,
            LOAD_BALANCER_TAKES_NO_POD_BACKENDS_EVENT,
            action,
            note,
        );
        events
            .publish_once(&self.said, uid, Topic::Warning, reference, warning)
            .await;
    }

    /// One Warning on the Service while a resource it would use is tagged for another
    /// cluster (`error`: the last cloud error, if any; anything else clears the slate).
    pub async fn warn_other_cluster(
        &self,
        events: &Events,
        action: &str,
        uid: &str,
        reference: &ObjectReference,
        error: Option<&CloudError>,
    ) {
        let note = match error {
            Some(CloudError::OtherCluster { what, cluster, .. }) => Some(format!(
                "{what} is tagged {CLUSTER_ID_TAG}={cluster}: it belongs to another cluster, so rollgate leaves it alone (no listener, group or backend of this cluster's is put in it); give this Service a load balancer of its own"
            )),
            _ => None,
        };
        let said = &self.said_other_cluster;
        warn_while(
            events,
            said,
            OTHER_CLUSTERS_RESOURCE_EVENT,
            action,
            uid,
            reference,
            note,
        )
        .await;
    }

    /// One Warning on the Service while an account quota refuses what it needs
    /// (`error`: the last cloud error, if any; anything else clears the slate).
    pub async fn warn_quota(
        &self,
        events: &Events,
        action: &str,
        uid: &str,
        reference: &ObjectReference,
        error: Option<&CloudError>,
    ) {
        let note = error.and_then(|error| {
            let quota = failure(error).quota?;
            // No RequestId: the note is what makes the Warning once per quota.
            Some(format!(
                "{} was refused: an account quota is used up: {quota} Raise it in Quota Center or free what uses it; rollgate retries on the slow poll and deletes nothing meanwhile",
                error.action().unwrap_or("a cloud call")
            ))
        });
        let said = &self.said_quota;
        warn_while(
            events,
            said,
            CLOUD_QUOTA_EXCEEDED_EVENT,
            action,
            uid,
            reference,
            note,
        )
        .await;
    }

    pub async fn delete(&self, product: Product, load_balancer_id: &str) -> Result<(), CloudError> {
        let result = self
            .client(product)
            .delete_load_balancer(load_balancer_id)
            .await;
        self.count("DeleteLoadBalancer", &result);
        result
    }

    /// The tags of a load balancer; `None`: it is gone.
    pub async fn load_balancer_tags(
        &self,
        product: Product,
        load_balancer_id: &str,
    ) -> Result<Option<Vec<Tag>>, CloudError> {
        let result = self
            .client(product)
            .load_balancer_tags(load_balancer_id)
            .await;
        self.count("LoadBalancerTags", &result);
        result
    }

    /// Every server group of a load balancer, nothing created; `None`: it is gone.
    pub async fn server_groups(
        &self,
        product: Product,
        load_balancer_id: &str,
    ) -> Result<Option<Vec<ServerGroupRef>>, CloudError> {
        let result = self.client(product).server_groups(load_balancer_id).await;
        self.count("ServerGroups", &result);
        result
    }

    /// Every backend of one group, anyone's.
    pub async fn list_backends(
        &self,
        product: Product,
        group: &ServerGroupRef,
    ) -> Result<Vec<alibaba_lb::Backend>, CloudError> {
        let result = self.client(product).list_backends(group).await;
        self.count("ListBackends", &result);
        result
    }

    /// Backends and health of one group: one listing and one health report.
    pub async fn read_group(
        &self,
        product: Product,
        group: &ServerGroupRef,
    ) -> Result<GroupState, CloudError> {
        let reading = self.client(product).read_group(group).await;
        self.count("ReadGroup", &reading);
        let reading = reading?;
        // Hook (listener check): which group the port's listener really forwards to.
        let target = self.client(product).listener_server_group(group).await;
        self.count("DescribeListener", &target);
        let listener = group.listener_id.clone().unwrap_or_else(|| {
            format!(
                "{}:{}",
                group.listener_protocol.as_api_str(),
                group.listener_port
            )
        });
        Ok(GroupState {
            listener,
            listener_target: target?,
            service_port: group.listener_port,
            protocol: service_port_protocol(group.listener_protocol).to_string(),
            load_balancer_id: group.load_balancer_id.clone(),
            server_group_id: group.server_group_id.clone(),
            backends: reading.backends,
            health: reading
                .health
                .into_iter()
                .map(|h| (h.key, h.state))
                .collect(),
        })
    }

    /// Starts the listener in front of `group` if the last look found it stopped (a
    /// CLB listener whose start after creation failed stays stopped, and its backends
    /// read `unavailable` forever); one Warning on the Service the first time. The look
    /// already read the listener's status, so a running one costs no call. `true`:
    /// it was started, and the reading no longer holds.
    pub async fn start_if_stopped(
        &self,
        product: Product,
        group: &ServerGroupRef,
        (events, action): (&Events, &str),
        uid: &str,
        reference: &ObjectReference,
    ) -> Result<bool, CloudError> {
        let client = self.client(product);
        if !client.listener_stopped(group).await? {
            return Ok(false);
        }
        let result = client.start_listener(group).await;
        self.count("StartListener", &result);
        result?;
        let note = format!(
            "listener {}:{} of {} was stopped, so its backends could not be checked: rollgate started it",
            group.listener_protocol.as_api_str(),
            group.listener_port,
            group.load_balancer_id
        );
        let warning = event(EventType::Warning, LISTENER_STOPPED_EVENT, action, note);
        events
            .publish_once(
                &self.said_listener_stopped,
                uid,
                Topic::Warning,
                reference,
                warning,
            )
            .await;
        Ok(true)
    }

    /// Sends one group's changes: adds, drains and restores first, removals last.
    pub async fn apply(
        &self,
        product: Product,
        group: &ServerGroupRef,
        changes: &GroupChanges,
    ) -> Result<(), CloudError> {
        let client = self.client(product);
        if !changes.add.is_empty() {
            let r = client.add_backends(group, &changes.add).await;
            self.count("AddBackends", &r);
            r?;
        }
        let reweight: Vec<_> = changes
            .drain
            .iter()
            .chain(changes.restore.iter())
            .cloned()
            .collect();
        if !reweight.is_empty() {
            let r = client.set_weights(group, &reweight).await;
            self.count("SetWeights", &r);
            r?;
        }
        if !changes.remove.is_empty() {
            let r = client.remove_backends(group, &changes.remove).await;
            self.count("RemoveBackends", &r);
            r?;
        }
        Ok(())
    }
}

/// One Warning `reason` on the Service while `note` says what is wrong; `None` (all is
/// well again) clears the slate, so the next trouble is said again.
async fn warn_while(
    events: &Events,
    said: &EventDedup,
    reason: &str,
    action: &str,
    uid: &str,
    reference: &ObjectReference,
    note: Option<String>,
) {
    let Some(note) = note else {
        said.forget(uid, Topic::Warning);
        return;
    };
    let warning = event(EventType::Warning, reason, action, note);
    events
        .publish_once(said, uid, Topic::Warning, reference, warning)
        .await;
}

/// A cloud for tests: CLB and NLB clients on a loopback endpoint that nothing answers
/// (the tests that use it never call the cloud, or expect the call to fail).
#[cfg(test)]
pub fn test_cloud(metrics: GateMetrics) -> Cloud {
    use alibaba_lb::credentials::{CredentialProvider, Credentials, StaticCredentials};
    let config = alibaba_lb::ClientConfig::for_local_endpoint("cn-hangzhou", "127.0.0.1:1");
    let credentials: Arc<dyn CredentialProvider> = Arc::new(StaticCredentials(Credentials {
        access_key_id: "id".into(),
        access_key_secret: "secret".into(),
        security_token: None,
    }));
    let clb = alibaba_lb::new_client(Product::Clb, &config, credentials.clone()).unwrap();
    let nlb = alibaba_lb::new_client(Product::Nlb, &config, credentials).unwrap();
    Cloud::new(clb, nlb, metrics)
}

/// The protocol of the Service port a listener serves, which the plan keys groups by
/// (with the port). An HTTP or HTTPS listener (`protocol-port`) serves a TCP port:
/// keyed by the listener's own protocol its group matched no port, so its backends
/// were never registered and the gates waited with no error (issue 24's HTTPS bug).
pub fn service_port_protocol(listener: ListenerProtocol) -> &'static str {
    match listener {
        ListenerProtocol::Udp => "UDP",
        ListenerProtocol::Tcp | ListenerProtocol::Http | ListenerProtocol::Https => "TCP",
    }
}

/// The condition's view of a failed call.
pub fn failure(error: &CloudError) -> CloudFailure {
    let code = match error {
        CloudError::Api { code, .. } => code.clone(),
        CloudError::JobFailed { status, .. } => format!("Job{status}"),
        CloudError::JobTimedOut { .. } => "JobTimedOut".into(),
        CloudError::NotFound { what, .. } => format!("NotFound({what})"),
        CloudError::OtherCluster { cluster, .. } => format!("OfCluster({cluster})"),
        CloudError::Transport { .. } => "Unreachable".into(),
        CloudError::Decode { .. } => "UnreadableResponse".into(),
        CloudError::Credentials(_) => "NoCredentials".into(),
        CloudError::Config(_) => "InvalidConfiguration".into(),
    };
    CloudFailure {
        quota: match error {
            CloudError::Api { message, .. } if error.is_quota_exceeded() => Some(message.clone()),
            _ => None,
        },
        action: error.action().unwrap_or("-").to_string(),
        code,
        request_id: error
            .request_id()
            .unwrap_or(alibaba_lb::error::NO_REQUEST_ID)
            .to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cloud() -> Cloud {
        // Never called: the readings are kept and handed back without a call.
        test_cloud(GateMetrics::register(&crate::metrics::Metrics::default()))
    }

    fn group(id: &str) -> (ServerGroupRef, GroupState) {
        let reference = ServerGroupRef {
            load_balancer_id: "lb-1".into(),
            server_group_id: id.into(),
            listener_port: 80,
            listener_protocol: ListenerProtocol::Tcp,
            listener_id: None,
        };
        let state = GroupState {
            service_port: 80,
            protocol: "TCP".into(),
            load_balancer_id: "lb-1".into(),
            server_group_id: id.into(),
            backends: vec![],
            health: HashMap::new(),
            listener: "TCP:80".into(),
            listener_target: Some(id.into()),
        };
        (reference, state)
    }

    #[test]
    fn a_reading_is_reused_for_the_same_groups_while_young_and_until_voided() {
        let cloud = cloud();
        let (a, a_state) = group("rsp-a");
        let (b, _) = group("rsp-b");
        let (only_a, only_b, both) = ([a.clone()], [b.clone()], [a, b]);
        let at = Instant::now();
        let young = Duration::from_secs(10);
        assert!(
            cloud.reading("uid", &only_a, young, at).is_none(),
            "none kept yet"
        );
        cloud.remember_reading("uid", std::slice::from_ref(&a_state), at);
        let reused = cloud.reading("uid", &only_a, young, at + young).unwrap();
        assert_eq!((reused.at, reused.groups), (at, vec![a_state.clone()]));
        assert!(
            cloud.reading("other", &only_a, young, at).is_none(),
            "another Service's"
        );
        assert!(
            cloud.reading("uid", &only_b, young, at).is_none(),
            "other groups"
        );
        assert!(
            cloud.reading("uid", &both, young, at).is_none(),
            "a group more"
        );
        let too_old = at + young + Duration::from_millis(1);
        assert!(
            cloud.reading("uid", &only_a, young, too_old).is_none(),
            "too old"
        );
        cloud.void_reading("uid");
        assert!(cloud.reading("uid", &only_a, young, at).is_none(), "voided");
        cloud.remember_reading("uid", &[a_state], at);
        cloud.forget("uid");
        assert!(
            cloud.reading("uid", &only_a, young, at).is_none(),
            "forgotten"
        );
    }

    #[test]
    fn every_listener_protocol_maps_to_the_service_port_protocol_it_serves() {
        use ListenerProtocol::*;
        for (listener, port) in [(Tcp, "TCP"), (Udp, "UDP"), (Http, "TCP"), (Https, "TCP")] {
            assert_eq!(service_port_protocol(listener), port, "{listener:?}");
        }
    }
}
