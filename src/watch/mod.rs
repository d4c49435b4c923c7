//! One set of watches for every controller in the process.
//!
//! Each kind is listed and watched once, pruned (`prune`), and kept in one shared
//! reflector store. Controllers read the stores and subscribe to change streams
//! ([`fanout`]); none keeps a cache of its own. At 10,000 pods this is
//! the difference between one copy of every pod and one per controller.
//!
//! Order of use: `Watches::new`, then every controller subscribes, then `run` drives the
//! watches until shutdown. A subscription must be consumed: the shared stream waits for
//! its slowest subscriber.
//!
//! Services are watched only when a controller needs them (the readiness gates, see
//! [`ServiceWatch`]); then they are pruned, shared and waited for like every other kind.
//! Namespaces likewise, and only their labels (the gate injection webhook's opt-in,
//! [`NamespaceWatch`]).
pub mod fanout;
pub mod pod_index;
pub mod prune;
pub mod runner;

use std::sync::Arc;

use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};

pub use fanout::Change;
use fanout::Fanout;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, store::Writer, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
pub use pod_index::PodsByOwner;
use tokio::sync::watch;

use crate::names::{MANAGED_BY_LABEL, MANAGED_BY_VALUE, PULL_JOB_REVISION_LABEL};
use crate::object::{CachedNode, CachedPod};
use crate::runtime::Shutdown;
use crate::sync_gate::SyncGate;

/// What a change subscription yields: each change, with the object before and after.
pub type Changes<K> = async_broadcast::Receiver<Change<K>>;

/// Objects a subscriber may lag behind before the watch waits for it.
const SUBSCRIBER_BUFFER: usize = 1024;
/// List pages stay small: the first sync never holds more than a page of raw objects.
const PAGE_SIZE: u32 = 250;

/// Visits every object of a store by reference, under its read lock, without cloning
/// any `Arc` (cloning 10,000 nodes' `Arc`s writes to 10,000 objects' counts: issue 25).
/// kube's `Store` lends its objects only to a `find` predicate; this one finds nothing.
/// `visit` must not read the same store (its lock is held).
pub fn for_each_in<K>(store: &Store<K>, visit: impl FnMut(&K))
where
    K: kube::runtime::reflector::Lookup + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    let visit = std::cell::RefCell::new(visit);
    let _ = store.find(|object| {
        (visit.borrow_mut())(object);
        false
    });
}

/// The shared stores, readable by every controller.
#[derive(Clone)]
pub struct Stores {
    pub daemonsets: Store<DaemonSet>,
    /// Every pod in the watched namespaces, slim (`CachedPod`). Controllers pick theirs,
    /// e.g. by controller owner reference or by a Service's selector.
    pub pods: Store<CachedPod>,
    /// The same pods by controller owner UID and node, in step with `pods` (a reconcile
    /// reads its DaemonSet's pods here, not by scanning every pod).
    pub pods_by_owner: PodsByOwner,
    pub revisions: Store<ControllerRevision>,
    pub nodes: Store<CachedNode>,
    /// rollgate's own pre-pull Jobs.
    pub jobs: Store<Job>,
}

/// Whether the Services are watched: only the readiness gates read them, so a process
/// without the gates neither lists them nor waits for them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServiceWatch {
    Off,
    On,
}

/// Whether the namespaces' labels are watched: only the gate injection webhook reads
/// them (a namespace's opt-in), so a process without it needs no namespace permission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NamespaceWatch {
    Off,
    On,
}

/// A namespace as the cache keeps it: its metadata, of which only the labels are kept.
pub type NamespaceLabels = PartialObjectMeta<Namespace>;

pub struct Watches {
    client: Client,
    namespace: Option<String>,
    pub stores: Stores,
    /// Every Service in the watched namespaces ([`Watches::services`]); not in
    /// [`Stores`], which the DaemonSet controllers' test contexts build whole.
    service_store: Store<Service>,
    /// Every namespace's labels ([`Watches::namespaces`]), when watched.
    namespace_store: Store<NamespaceLabels>,
    daemonsets: Writer<DaemonSet>,
    pods: Writer<CachedPod>,
    revisions: Writer<ControllerRevision>,
    nodes: Writer<CachedNode>,
    jobs: Writer<Job>,
    services: Writer<Service>,
    namespaces: Writer<NamespaceLabels>,
    service_watch: ServiceWatch,
    namespace_watch: NamespaceWatch,
    daemonset_fanout: Fanout<DaemonSet>,
    pod_fanout: Fanout<CachedPod>,
    revision_fanout: Fanout<ControllerRevision>,
    node_fanout: Fanout<CachedNode>,
    job_fanout: Fanout<Job>,
    service_fanout: Fanout<Service>,
    gate: Arc<SyncGate>,
    synced: watch::Receiver<bool>,
}

impl Watches {
    pub fn new(
        client: Client,
        namespace: Option<String>,
        service_watch: ServiceWatch,
        namespace_watch: NamespaceWatch,
    ) -> Self {
        let (ds_store, daemonsets) = reflector::store();
        let (pod_store, pods) = reflector::store();
        let (rev_store, revisions) = reflector::store();
        let (node_store, nodes) = reflector::store();
        let (job_store, jobs) = reflector::store();
        let (service_store, services) = reflector::store();
        let (namespace_store, namespaces) = reflector::store();
        let (gate, synced) = SyncGate::new(
            "shared watches",
            &synced_streams(service_watch, namespace_watch),
        );
        Watches {
            client,
            namespace,
            stores: Stores {
                daemonsets: ds_store,
                pods: pod_store,
                pods_by_owner: PodsByOwner::default(),
                revisions: rev_store,
                nodes: node_store,
                jobs: job_store,
            },
            service_store,
            namespace_store,
            daemonsets,
            pods,
            revisions,
            nodes,
            jobs,
            services,
            namespaces,
            service_watch,
            namespace_watch,
            daemonset_fanout: Fanout::new(SUBSCRIBER_BUFFER),
            pod_fanout: Fanout::new(SUBSCRIBER_BUFFER),
            revision_fanout: Fanout::new(SUBSCRIBER_BUFFER),
            node_fanout: Fanout::new(SUBSCRIBER_BUFFER),
            job_fanout: Fanout::new(SUBSCRIBER_BUFFER),
            service_fanout: Fanout::new(SUBSCRIBER_BUFFER),
            gate,
            synced,
        }
    }

    /// Flips to true once every watch delivered its first full list (the Services' too,
    /// when watched): what `/readyz` and every controller wait for.
    pub fn synced(&self) -> watch::Receiver<bool> {
        self.synced.clone()
    }

    pub fn daemonset_changes(&self) -> Changes<DaemonSet> {
        self.daemonset_fanout.subscribe()
    }

    /// The shared store of every pod (see [`Stores::pods`]).
    pub fn pods(&self) -> Store<CachedPod> {
        self.stores.pods.clone()
    }

    /// Every pod change, for `Controller::for_shared_stream` / `owns_shared_stream` /
    /// `watches_shared_stream`. Call before `run`, and keep consuming it.
    pub fn pod_changes(&self) -> Changes<CachedPod> {
        self.pod_fanout.subscribe()
    }

    pub fn revision_changes(&self) -> Changes<ControllerRevision> {
        self.revision_fanout.subscribe()
    }

    pub fn job_changes(&self) -> Changes<Job> {
        self.job_fanout.subscribe()
    }

    /// The shared store of every Service in the watched namespaces; empty when
    /// Services are not watched ([`ServiceWatch::Off`]).
    pub fn services(&self) -> Store<Service> {
        self.service_store.clone()
    }

    /// Every namespace's labels, cluster-wide; empty when namespaces are not watched
    /// ([`NamespaceWatch::Off`]).
    pub fn namespaces(&self) -> Store<NamespaceLabels> {
        self.namespace_store.clone()
    }

    /// Every Service change. Call before `run`, and keep consuming it; Services must
    /// be watched ([`ServiceWatch::On`]), or nothing ever comes.
    pub fn service_changes(&self) -> Changes<Service> {
        debug_assert_eq!(
            self.service_watch,
            ServiceWatch::On,
            "Services are not watched: Watches::new(.., ServiceWatch::On)"
        );
        self.service_fanout.subscribe()
    }

    /// Deleted DaemonSets, so controllers can drop what they remember of them. A relist
    /// that misses a deletion sends nothing: pair with a periodic sweep.
    pub fn daemonset_deletions(&self) -> impl Stream<Item = Arc<DaemonSet>> + Send + 'static {
        deleted(self.daemonset_fanout.subscribe())
    }

    /// Pods as they were when deleted. The gates must deregister a pod the moment it is
    /// gone. A relist that misses a deletion sends nothing (the gates' periodic poll
    /// covers it).
    pub fn pod_deletions(&self) -> impl Stream<Item = Arc<CachedPod>> + Send + 'static {
        deleted(self.pod_fanout.subscribe())
    }

    /// Every node change, with the node before and after (see [`Change`]).
    pub fn node_changes(&self) -> Changes<CachedNode> {
        self.node_fanout.subscribe()
    }

    /// core/v1 Events matching `field_selector`, in the watched namespaces: a small
    /// watch of its own for one reader (another updater's Events, see
    /// `daemonset::other_updater`). Not cached and not part of `synced`: nothing waits
    /// for it. Errors are retried with the default backoff and logged.
    pub fn events_matching(
        &self,
        field_selector: &str,
    ) -> impl Stream<Item = k8s_openapi::api::core::v1::Event> + Send + 'static {
        let api =
            scoped::<k8s_openapi::api::core::v1::Event>(&self.client, self.namespace.as_deref());
        watcher(api, watcher::Config::default().fields(field_selector))
            .default_backoff()
            .applied_objects()
            .filter_map(|event| async move {
                event
                    .inspect_err(
                        |error| tracing::warn!(%error, "Events watch error, retrying with backoff"),
                    )
                    .ok()
            })
    }

    /// Drives every watch until shutdown. The stores fill, subscribers get changes.
    pub async fn run(self, shutdown: Shutdown) {
        let cfg = list_config(std::env::var(STREAMING_LISTS_ENV).ok().as_deref());
        let ns = self.namespace.as_deref();
        let gate = &self.gate;
        let daemonsets = watcher(scoped::<DaemonSet>(&self.client, ns), cfg.clone())
            .default_backoff()
            .modify(prune::daemonset);
        let daemonsets = self
            .daemonset_fanout
            .reflect(self.daemonsets, daemonsets)
            .inspect(gate.observe("daemonsets"));
        // Every pod: the readiness gates need Deployment pods as well as DaemonSet ones.
        // Each is made a `CachedPod` as it arrives, so no full Pod outlives its page.
        let pods = watcher(scoped::<Pod>(&self.client, ns), cfg.clone())
            .default_backoff()
            .map_ok(|event| convert(event, CachedPod::from));
        let pods = self
            .pod_fanout
            .reflect_indexed(self.pods, pods, self.stores.pods_by_owner.clone())
            .inspect(gate.observe("pods"));
        let revisions = watcher(scoped::<ControllerRevision>(&self.client, ns), cfg.clone())
            .default_backoff()
            .modify(prune::revision);
        let revisions = self
            .revision_fanout
            .reflect(self.revisions, revisions)
            .inspect(gate.observe("controllerrevisions"));
        let nodes = watcher(Api::<Node>::all(self.client.clone()), cfg.clone())
            .default_backoff()
            .map_ok(|event| convert(event, CachedNode::from));
        let nodes = self
            .node_fanout
            .reflect(self.nodes, nodes)
            .inspect(gate.observe("nodes"));
        let jobs = watcher(
            scoped::<Job>(&self.client, ns),
            // Only rollgate's own pre-pull Jobs.
            cfg.clone().labels(&format!(
                "{MANAGED_BY_LABEL}={MANAGED_BY_VALUE},{PULL_JOB_REVISION_LABEL}"
            )),
        )
        .default_backoff()
        .modify(prune::job);
        let jobs = self
            .job_fanout
            .reflect(self.jobs, jobs)
            .inspect(gate.observe("jobs"));

        let mut streams = vec![
            drain(daemonsets),
            drain(pods),
            drain(revisions),
            drain(nodes),
            drain(jobs),
        ];
        if self.namespace_watch == NamespaceWatch::On {
            // Metadata only, and of that only the labels are kept; nobody subscribes.
            let namespaces = watcher(
                Api::<NamespaceLabels>::all(self.client.clone()),
                cfg.clone(),
            )
            .default_backoff()
            .modify(prune::namespace);
            let namespaces = reflector::reflector(self.namespaces, namespaces)
                .inspect(gate.observe("namespaces"));
            streams.push(drain(namespaces));
        }
        if self.service_watch == ServiceWatch::On {
            let services = watcher(scoped::<Service>(&self.client, ns), cfg)
                .default_backoff()
                .modify(prune::service);
            let services = self
                .service_fanout
                .reflect(self.services, services)
                .inspect(gate.observe("services"));
            streams.push(drain(services));
        }
        let all = futures::stream::select_all(streams);
        tokio::select! {
            _ = all.for_each(|()| futures::future::ready(())) => {}
            _ = shutdown.requested() => {}
        }
        tracing::info!("shared watches stopped");
    }
}

/// The watches `synced` waits for.
fn synced_streams(
    service_watch: ServiceWatch,
    namespace_watch: NamespaceWatch,
) -> Vec<&'static str> {
    let mut streams = vec!["daemonsets", "pods", "controllerrevisions", "nodes", "jobs"];
    if service_watch == ServiceWatch::On {
        streams.push("services");
    }
    if namespace_watch == NamespaceWatch::On {
        streams.push("namespaces");
    }
    streams
}

/// The objects `pick` takes from each change; the others are dropped.
fn picked<K: Send + Sync + 'static>(
    changes: Changes<K>,
    pick: impl Fn(Change<K>) -> Option<Arc<K>> + Send + 'static,
) -> impl Stream<Item = Arc<K>> + Send + 'static {
    changes.filter_map(move |change| futures::future::ready(pick(change)))
}

/// Created and updated objects, as the store holds them (deletions left out).
pub fn applied<K: Send + Sync + 'static>(
    changes: Changes<K>,
) -> impl Stream<Item = Arc<K>> + Send + 'static {
    picked(changes, Change::applied)
}

/// Deleted objects, as they were last seen.
pub fn deleted<K: Send + Sync + 'static>(
    changes: Changes<K>,
) -> impl Stream<Item = Arc<K>> + Send + 'static {
    picked(changes, Change::deleted)
}

/// Created and updated objects that look different to a reader for which `same` says
/// when two states are alike (deletions left out).
pub fn applied_unless<K: Send + Sync + 'static>(
    changes: Changes<K>,
    same: impl Fn(&K, &K) -> bool + Send + 'static,
) -> impl Stream<Item = Arc<K>> + Send + 'static {
    picked(changes, move |change| {
        change.differs(&same).then(|| change.applied()).flatten()
    })
}

/// Deleted objects, and created or updated ones that look different through `same`:
/// the triggers of a controller that counts objects as well as reading them.
pub fn touched_unless<K: Send + Sync + 'static>(
    changes: Changes<K>,
    same: impl Fn(&K, &K) -> bool + Send + 'static,
) -> impl Stream<Item = Arc<K>> + Send + 'static {
    picked(changes, move |change| {
        change.differs(&same).then(|| change.object())
    })
}

/// `ROLLGATE_STREAMING_LISTS=1` makes the first sync a streaming list (WatchList, API
/// server 1.32+) instead of paged lists; an experiment knob for the footprint bench.
pub const STREAMING_LISTS_ENV: &str = "ROLLGATE_STREAMING_LISTS";

/// Paged lists unless streaming lists are asked for with `1` or `true`.
fn list_config(streaming: Option<&str>) -> watcher::Config {
    match streaming.map(str::trim) {
        Some("1") | Some("true") => watcher::Config::default().streaming_lists(),
        _ => watcher::Config::default().page_size(PAGE_SIZE),
    }
}

/// The same watch event, its object converted (e.g. into the slim cached form).
fn convert<A, B>(event: watcher::Event<A>, into: impl FnOnce(A) -> B) -> watcher::Event<B> {
    match event {
        watcher::Event::Apply(obj) => watcher::Event::Apply(into(obj)),
        watcher::Event::Delete(obj) => watcher::Event::Delete(into(obj)),
        watcher::Event::InitApply(obj) => watcher::Event::InitApply(into(obj)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// A watch stream reduced to "something happened"; errors are retried by the backoff
/// and logged here, so one bad event never ends the watch.
fn drain<K: 'static, S>(stream: S) -> std::pin::Pin<Box<dyn Stream<Item = ()> + Send>>
where
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    Box::pin(stream.map(|event| {
        if let Err(error) = event {
            tracing::warn!(%error, "watch error, retrying with backoff");
        }
    }))
}

/// An Api over one namespace, or all of them.
pub fn scoped<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::apply::fake_api::{fake_client, status, Seen};
    use kube::runtime::watcher::InitialListStrategy;

    /// The collection path of every kind the watches list, Services last.
    const LISTED: [&str; 6] = [
        "/apis/apps/v1/daemonsets",
        "/api/v1/pods",
        "/apis/apps/v1/controllerrevisions",
        "/api/v1/nodes",
        "/apis/batch/v1/jobs",
        "/api/v1/services",
    ];

    /// An API server with nothing in it, whose Service list fails until `services_up`.
    fn empty_cluster(services_up: Arc<AtomicBool>) -> (Client, Arc<Seen>) {
        fake_client(move |method, path| {
            if path == "/api/v1/services" && !services_up.load(Ordering::SeqCst) {
                return status(503, "ServiceUnavailable");
            }
            match method {
                // A list (and a watch, which then fails to decode and is retried later).
                "GET" => (
                    200,
                    serde_json::json!({"apiVersion": "v1", "kind": "List",
                        "metadata": {"resourceVersion": "1"}, "items": []}),
                ),
                _ => status(405, "MethodNotAllowed"),
            }
        })
    }

    fn stop_signal() -> (watch::Sender<bool>, Shutdown) {
        let (tx, rx) = watch::channel(false);
        (tx, Shutdown::from_receiver(rx))
    }

    /// `/readyz` (and every controller) waits on `synced`: with the Services watched,
    /// it must stay false while the Service list has not come, though every other kind
    /// has listed.
    #[tokio::test]
    async fn synced_waits_for_the_service_watch_to_list() {
        let services_up = Arc::new(AtomicBool::new(false));
        let (client, seen) = empty_cluster(services_up.clone());
        let watches = Watches::new(client, None, ServiceWatch::On, NamespaceWatch::Off);
        let mut synced = watches.synced();
        let (stop, shutdown) = stop_signal();
        let run = tokio::spawn(watches.run(shutdown));

        // Every kind asked for at least once (the others answered, Services refused).
        let asked = |path: &str| seen.calls().iter().any(|c| c.path == path);
        tokio::time::timeout(Duration::from_secs(10), async {
            while !LISTED.iter().all(|p| asked(p)) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("every kind is listed");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !*synced.borrow(),
            "synced (so /readyz) before the Service watch listed"
        );

        services_up.store(true, Ordering::SeqCst);
        tokio::time::timeout(Duration::from_secs(20), synced.wait_for(|s| *s))
            .await
            .expect("synced once the Services list")
            .unwrap();
        let _ = stop.send(true);
        run.await.unwrap();
    }

    /// Without the gates no Service is listed, and nothing waits for them.
    #[tokio::test]
    async fn services_are_neither_listed_nor_waited_for_when_not_watched() {
        let (client, seen) = empty_cluster(Arc::new(AtomicBool::new(false)));
        let watches = Watches::new(client, None, ServiceWatch::Off, NamespaceWatch::Off);
        let mut synced = watches.synced();
        let (stop, shutdown) = stop_signal();
        let run = tokio::spawn(watches.run(shutdown));
        tokio::time::timeout(Duration::from_secs(10), synced.wait_for(|s| *s))
            .await
            .expect("synced without Services")
            .unwrap();
        assert!(
            !seen.calls().iter().any(|c| c.path == "/api/v1/services"),
            "Services listed though not watched"
        );
        let _ = stop.send(true);
        run.await.unwrap();
    }

    #[test]
    fn streaming_lists_only_when_asked_for() {
        for (value, streaming) in [
            (None, false),
            (Some("0"), false),
            (Some(""), false),
            (Some("yes"), false),
            (Some("1"), true),
            (Some(" true "), true),
        ] {
            let cfg = list_config(value);
            assert_eq!(
                matches!(
                    cfg.initial_list_strategy,
                    InitialListStrategy::StreamingList
                ),
                streaming,
                "{value:?}"
            );
            if !streaming {
                assert_eq!(cfg.page_size, Some(PAGE_SIZE), "{value:?}");
            }
        }
    }
}
