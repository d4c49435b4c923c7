//! The one way a controller runs here: wait for the shared caches, reconcile only while
//! this replica leads (and everything when it becomes the leader), with a bounded
//! concurrency, count and log failures by kind, retry them after a pause, and
//! stop gracefully (in-flight reconciles finish) when shutdown is requested.
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryFuture, TryFutureExt};
use kube::runtime::controller::{Action, Config as ControllerConfig};
use kube::runtime::Controller;
use kube::{Resource, ResourceExt};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use crate::leader::Leadership;
use crate::runtime::Shutdown;

/// A failed reconcile is retried after this long.
const RETRY_AFTER_ERROR: Duration = Duration::from_secs(5);

/// Reconcile errors name their kind, the label of the errors counter.
pub trait ReconcileError: std::error::Error + Send + Sync + 'static {
    fn metric_label(&self) -> &'static str;
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub kind: String,
}

/// `<controller>_reconcile_errors_total{kind}`.
pub type ErrorCounter = Family<ErrorLabels, Counter>;

/// How one controller is run.
pub struct Run {
    pub name: &'static str,
    pub concurrency: u16,
    /// Reconciles wait until this flips to true (every shared cache listed once):
    /// planning on half-filled caches could count missing pods as unavailable.
    pub synced: watch::Receiver<bool>,
    pub errors: ErrorCounter,
    /// Only the leader reconciles; a standby returns at once and writes nothing.
    pub leadership: Leadership,
    pub shutdown: Shutdown,
}

impl Run {
    /// Runs `controller` until shutdown, then lets in-flight reconciles finish.
    pub async fn drive<K, Ctx, F, Fut>(
        self,
        controller: Controller<K>,
        mut reconcile: F,
        ctx: Arc<Ctx>,
    ) where
        K: Clone + Resource + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Debug + Unpin + Hash + Eq + Clone,
        Ctx: Send + Sync + 'static,
        F: FnMut(Arc<K>, Arc<Ctx>) -> Fut,
        Fut: TryFuture<Ok = Action> + Send + 'static,
        Fut::Error: ReconcileError,
    {
        let Run {
            name,
            concurrency,
            synced,
            errors,
            leadership,
            shutdown,
        } = self;
        let gained = leadership.gained();
        let gated = move |obj: Arc<K>, ctx: Arc<Ctx>| {
            let mut synced = synced.clone();
            let leadership = leadership.clone();
            let work = reconcile(obj, ctx).into_future();
            async move {
                let _ = synced.wait_for(|s| *s).await;
                if !leadership.is_leader() {
                    // Becoming the leader reconciles everything again (below).
                    return Ok(Action::await_change());
                }
                work.await
            }
        };
        let error_policy = move |obj: Arc<K>, error: &Fut::Error, _ctx: Arc<Ctx>| {
            errors
                .get_or_create(&ErrorLabels {
                    kind: error.metric_label().into(),
                })
                .inc();
            tracing::warn!(controller = name, object = %obj.name_any(), namespace = ?obj.namespace(), %error, "reconcile failed, retrying");
            Action::requeue(RETRY_AFTER_ERROR)
        };
        controller
            .with_config(ControllerConfig::default().concurrency(concurrency))
            .reconcile_all_on(gained)
            .graceful_shutdown_on(shutdown.requested())
            .run(gated, error_policy, ctx)
            .for_each(|result| async move {
                if let Err(error) = result {
                    tracing::debug!(controller = name, %error, "reconcile trigger failed");
                }
            })
            .await;
        tracing::info!(controller = name, "controller stopped");
    }
}
