//! Leader election on a `coordination.k8s.io/v1` Lease (kube-lease-manager), and its
//! flags ([`LeaderArgs`]).
//!
//! Every replica watches and keeps its caches warm; only the leader writes. The runner
//! asks `Leadership::is_leader` before each reconcile and reconciles everything when
//! leadership is gained. Losing the lease ends the process at once (the manager returns
//! an error and drops every in-flight call), so no half-finished batch of deletions goes
//! on under a new leader; Kubernetes restarts it as a standby. On shutdown the lease is
//! released, so the standby takes over without waiting for it to expire.
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use futures::Stream;
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use kube_lease_manager::LeaseManagerBuilder;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::watch;

use crate::metrics::Metrics;

/// How often a standby looks whether the leader released the Lease.
const STANDBY_LOOK_EVERY: Duration = Duration::from_secs(1);
/// A standby that cannot read or take the Lease this many times in a row gives up.
const STANDBY_MAX_FAILURES: u32 = 30;

/// Leader election: every replica watches, only the Lease holder writes.
#[derive(Debug, Clone, Args)]
pub struct LeaderArgs {
    /// Elect a leader on a Lease before writing. Turn off only for a single replica.
    #[arg(long, env = "ROLLGATE_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Name of the coordination.k8s.io/v1 Lease.
    #[arg(
        long,
        env = "ROLLGATE_LEASE_NAME",
        default_value = "rollgate-controller"
    )]
    pub lease_name: String,
    /// Namespace of the Lease: the controller's own (downward API).
    #[arg(long, env = "POD_NAMESPACE", default_value = "rollgate-system")]
    pub lease_namespace: String,
    /// Seconds a leader holds the Lease without renewing it (client-go: 15).
    #[arg(long, env = "ROLLGATE_LEASE_DURATION", default_value_t = 15)]
    pub lease_duration: u64,
    /// Seconds between renewals (client-go's renew deadline: 10). Must be below the
    /// duration; the rest is the margin before the Lease would expire.
    #[arg(long, env = "ROLLGATE_LEASE_RENEW_EVERY", default_value_t = 10)]
    pub renew_every: u64,
    /// This replica's identity in the Lease: the pod name (downward API).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
}

impl LeaderArgs {
    /// The pod name, else the host name and process id (runs outside a pod).
    pub fn identity(&self) -> String {
        self.identity.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_else(|_| "rollgate".into());
            format!("{host}-{}", std::process::id())
        })
    }
}

/// Whether this process may write now.
#[derive(Clone)]
pub struct Leadership(watch::Receiver<bool>);

impl Leadership {
    /// A process that always leads (`--leader-elect=false`: one replica, or tests).
    pub fn always() -> Self {
        // The sender goes at once: the value stays readable, and `gained` emits once.
        let (_, rx) = watch::channel(true);
        Leadership(rx)
    }

    pub fn is_leader(&self) -> bool {
        *self.0.borrow()
    }

    /// Emits each time this process becomes the leader (and once at start if it is).
    pub fn gained(&self) -> impl Stream<Item = ()> + Send + 'static {
        futures::stream::unfold((self.0.clone(), false), |(mut rx, mut was)| async move {
            loop {
                let now = *rx.borrow_and_update();
                if now && !was {
                    return Some(((), (rx, true)));
                }
                was = now;
                rx.changed().await.ok()?;
            }
        })
    }
}

/// The running election: its handle, and the task that must be awaited to release.
pub struct Election {
    pub leadership: Leadership,
    /// Resolves with an error when the lease is lost or the lease task dies; resolves
    /// `Ok` after `release` on shutdown.
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    stop: tokio::sync::oneshot::Sender<()>,
}

impl Election {
    /// Starts campaigning for the lease named in `args`.
    pub async fn start(
        client: Client,
        args: &LeaderArgs,
        metrics: &Metrics,
    ) -> anyhow::Result<Self> {
        let identity = args.identity();
        let grace = args.lease_duration.saturating_sub(args.renew_every).max(1);
        let build = {
            let (client, name, namespace, identity) = (
                client.clone(),
                args.lease_name.clone(),
                args.lease_namespace.clone(),
                identity.clone(),
            );
            let duration = args.lease_duration;
            move || {
                LeaseManagerBuilder::new(client.clone(), &name)
                    .with_namespace(&namespace)
                    .with_identity(&identity)
                    .with_duration(duration)
                    .with_grace(grace)
                    .build()
            }
        };
        let mut manager = build().await.with_context(|| {
                format!(
                    "cannot use Lease {}/{} for leader election (does the namespace exist, and may this ServiceAccount get/create/patch leases there?)",
                    args.lease_namespace, args.lease_name
                )
            })?;
        let (leader, transitions) = register(metrics);
        let leases: Api<Lease> = Api::namespaced(client, &args.lease_namespace);
        let lease_name = args.lease_name.clone();
        let (tx, rx) = watch::channel(false);
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        tracing::info!(lease = %args.lease_name, namespace = %args.lease_namespace, %identity, "campaigning for leadership");
        let task = tokio::spawn(async move {
            let mut was_leader = false;
            let mut failures = 0u32;
            let mut look = tokio::time::interval(STANDBY_LOOK_EVERY);
            loop {
                // A standby's `changed()` sleeps until the holder's lease would expire.
                // A holder that released it (SIGTERM) is seen by looking at the Lease
                // now and then; dropping `changed()` and calling it again takes over
                // at once instead of up to a lease duration later.
                let outcome = {
                    let changed = manager.changed();
                    tokio::pin!(changed);
                    loop {
                        tokio::select! {
                            outcome = &mut changed => break Some(outcome),
                            _ = look.tick(), if !was_leader => {
                                if lease_is_free(&leases, &lease_name).await {
                                    break None;
                                }
                            }
                            _ = &mut stopped => {
                                match tokio::time::timeout(Duration::from_secs(5), manager.release()).await {
                                    Ok(Ok(())) => tracing::info!("lease released"),
                                    other => tracing::warn!(result = ?other, "could not release the lease cleanly"),
                                }
                                leader.set(0);
                                return Ok(());
                            }
                        }
                    }
                };
                match outcome {
                    // The manager caches the holder until the lease would expire: a
                    // fresh one reads the released Lease and takes it.
                    None => match build().await {
                        Ok(fresh) => manager = fresh,
                        Err(error) => {
                            tracing::warn!(%error, "could not re-read the released lease")
                        }
                    },
                    Some(Ok(now_leader)) => {
                        failures = 0;
                        if now_leader == was_leader {
                            continue;
                        }
                        leader.set(i64::from(now_leader));
                        transitions.inc();
                        if !now_leader {
                            let _ = tx.send(false);
                            anyhow::bail!("lost the lease: stopping at once so that no write races the new leader");
                        }
                        tracing::info!(%identity, "became the leader: reconciling everything");
                        was_leader = true;
                        let _ = tx.send(true);
                    }
                    Some(Err(error)) if was_leader => {
                        let _ = tx.send(false);
                        anyhow::bail!("lease renewal failed, stepping down: {error}");
                    }
                    Some(Err(error)) => {
                        // A standby retries: the API server may be briefly away.
                        failures += 1;
                        tracing::warn!(%error, failures, "lease check failed, retrying");
                        if failures >= STANDBY_MAX_FAILURES {
                            anyhow::bail!("the lease cannot be read or taken: {error}");
                        }
                        tokio::time::sleep(Duration::from_secs(2)).await;
                    }
                }
            }
        });
        Ok(Election {
            leadership: Leadership(rx),
            task,
            stop,
        })
    }

    /// Resolves when the election fails (lease lost, task died): the process must stop.
    pub async fn failed(&mut self) -> anyhow::Error {
        match (&mut self.task).await {
            Ok(Err(e)) => e,
            Ok(Ok(())) => anyhow::anyhow!("the election ended"),
            Err(e) => anyhow::anyhow!("the election task panicked: {e}"),
        }
    }

    /// Releases the lease (on shutdown, after the controllers stopped).
    pub async fn release(self) -> anyhow::Result<()> {
        let _ = self.stop.send(());
        self.task.await.context("the election task panicked")?
    }
}

/// Whether the Lease has no holder now (released, or never taken).
async fn lease_is_free(leases: &Api<Lease>, name: &str) -> bool {
    match leases.get_opt(name).await {
        Ok(Some(lease)) => lease
            .spec
            .and_then(|s| s.holder_identity)
            .is_none_or(|h| h.is_empty()),
        Ok(None) => true,
        Err(_) => false,
    }
}

fn register(metrics: &Metrics) -> (Gauge, Counter) {
    let leader = Gauge::default();
    let transitions = Counter::default();
    metrics.with_registry(|r| {
        r.register(
            "rollgate_leader",
            "1 while this process holds the leader lease",
            leader.clone(),
        );
        r.register(
            "rollgate_leader_transitions",
            "Times this process gained or lost leadership",
            transitions.clone(),
        );
    });
    (leader, transitions)
}
