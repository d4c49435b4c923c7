//! What every part of the readiness-gate controller shares: its settings (from the
//! command line), the reconcile's error, and the context a reconcile runs with (stores,
//! cloud, poller, writer, Events, metrics).
use std::sync::Arc;
use std::time::Duration;

use alibaba_lb::Error as CloudError;
use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::mpsc;

use super::annotation_events::AnnotationEvents;
use super::cloud::Cloud;
use super::eni::Placer;
use super::metrics::GateMetrics;
use super::poller::{CloudPace, Poller};
use super::service::ClassSelection;
use super::writes_in_flight::WritesInFlight;
use crate::apply::{EventDedup, Events, Writer};
use crate::object::CachedPod;
use crate::watch::runner::ReconcileError;

/// The `action` of this controller's Events.
pub const EVENT_ACTION: &str = "ReadinessGate";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cloud: {0}")]
    Cloud(#[from] CloudError),
    /// A failed write to the API server (see `crate::apply`).
    #[error(transparent)]
    Write(#[from] crate::apply::Error),
}

impl ReconcileError for Error {
    fn metric_label(&self) -> &'static str {
        match self {
            Error::Cloud(e) => e.metric_label(),
            // One kind for every API write, as counted before the apply layer.
            Error::Write(_) => "kube_write",
        }
    }
}

/// Settings from the command line.
#[derive(Clone, Debug)]
pub struct GateSettings {
    /// The id in every marker and tag rollgate writes: `--cluster-id`, else the
    /// `kube-system` namespace's UID (`cluster_id::resolve`).
    pub cluster_id: String,
    /// The id earlier versions wrote markers under (the explicit `--cluster-id`, else
    /// `kubernetes`, the former default): those backends and groups are adopted.
    pub legacy_cluster_id: Option<String>,
    pub classes: ClassSelection,
    pub drain: Duration,
    pub vpc_id: Option<String>,
    /// The ECS/VPC lookups of CLB ENI backends (`None` in unit tests: nothing is found).
    pub network: Option<Arc<alibaba_lb::VpcNetwork>>,
    pub concurrency: u16,
    pub poll_fast: Duration,
    pub poll_slow: Duration,
    /// `--cloud-rate-limit` (the client's calls per second per product) and
    /// `--cloud-action-quotas`, which the scheduler of looks (`poller`) keeps to.
    pub cloud_pace: CloudPace,
}

pub struct Context {
    pub writer: Writer,
    /// The shared pod store (`crate::watch`).
    pub pods: Store<CachedPod>,
    /// The shared Service store (`crate::watch`).
    pub services: Store<Service>,
    pub cloud: Cloud,
    /// Pod IP -> ENI/ECI of CLB backends (`eni`).
    pub placer: Placer,
    pub poller: Poller,
    pub events: Events,
    /// What was said about cleanups that could not proceed (once per cause).
    pub cleanup_said: EventDedup,
    pub metrics: GateMetrics,
    pub settings: GateSettings,
    /// Pods whose gate named a Service that was not in the store: checked by
    /// `super::orphans`.
    pub orphans: mpsc::UnboundedSender<ObjectRef<CachedPod>>,
    /// The Warnings about annotations rollgate does not act on, said once each.
    pub annotation_events: AnnotationEvents,
    /// The gate condition writes reconciles left in flight (`conditions::send_conditions`).
    pub writes_in_flight: Arc<WritesInFlight>,
}

/// A context for tests: the writer and Events on `client` (a fake API server), `pods`
/// and `services` as the shared stores, and cloud clients that are never called.
#[cfg(test)]
pub fn test_context(
    client: kube::Client,
    pods: &[k8s_openapi::api::core::v1::Pod],
    services: &[Service],
) -> Context {
    use crate::metrics::Metrics;
    use crate::names::GATES_CONTROLLER_NAME;
    use crate::testkit::store_of;

    let metrics = GateMetrics::register(&Metrics::default());
    let settings = GateSettings {
        cluster_id: "test".into(),
        legacy_cluster_id: None,
        classes: ClassSelection::Standard,
        drain: Duration::from_secs(10),
        vpc_id: None,
        network: None,
        concurrency: 1,
        poll_fast: Duration::from_secs(1),
        poll_slow: Duration::from_secs(10),
        cloud_pace: CloudPace::within_quotas(10.0),
    };
    Context {
        writer: Writer::new(client.clone()),
        pods: store_of(pods.iter().cloned().map(CachedPod::from)),
        services: store_of(services.iter().cloned()),
        // Never called here.
        cloud: super::cloud::test_cloud(metrics.clone()),
        placer: Placer::new(None, None, metrics.clone()),
        poller: Poller::new(
            settings.poll_fast,
            settings.poll_slow,
            settings.cloud_pace,
            settings.concurrency.into(),
        ),
        events: Events::new(client, GATES_CONTROLLER_NAME),
        cleanup_said: EventDedup::default(),
        metrics,
        settings,
        orphans: mpsc::unbounded_channel().0,
        annotation_events: AnnotationEvents::default(),
        writes_in_flight: Default::default(),
    }
}
