//! Change streams of the shared stores: every subscriber gets each change with the
//! object itself, as it was before and as the store holds it now.
//!
//! Why not kube-runtime's own subscriptions (`store_shared` + `ReflectHandle`): a handle
//! receives only an object *reference* and looks the object up in the store when its
//! subscriber polls. If the object was deleted in between (a pod an upgrade just deleted,
//! a DaemonSet a user removed), the handle answers `Pending` without arranging a wake-up
//! (kube-runtime 5.0, `ReflectHandle::poll_next`). Its subscriber never hears from it
//! again, the channel fills up, and the watch, which waits for its slowest subscriber,
//! stops updating the store for every controller. The benchmark against OpenYurt found
//! it as rollouts that stalled and OTA pods never marked; the test below reproduces it.
//!
//! A [`Fanout`] applies each event to the store itself and sends the `Arc`s the store
//! held before and holds after, so nothing is looked up later and nothing can vanish.
//! Having both lets a controller ignore writes that change nothing it reads
//! ([`Change::differs`]): the API server writes a DaemonSet pod five or six times in a
//! rollout and its DaemonSet's status as often, and a replan per write was most of the
//! upgrade controller's CPU. Back-pressure is the same as kube's: a subscriber may lag
//! `capacity` changes before the watch waits.
use std::sync::Arc;

use async_broadcast::{InactiveReceiver, Receiver, Sender};
use futures::{Stream, StreamExt};
use kube::runtime::reflector::{store::Writer, Lookup, Store};
use kube::runtime::watcher;

/// One change of a shared store.
#[derive(Debug)]
pub enum Change<K> {
    /// Created or updated. `before` is `None` for an object new to the store, and for
    /// every object a (re)list resends: a relist may hide any change.
    Applied {
        before: Option<Arc<K>>,
        after: Arc<K>,
    },
    /// Deleted, as the watch last saw it.
    Deleted(Arc<K>),
}

// Not derived: `K` itself need not be `Clone` for its `Arc`s to be.
impl<K> Clone for Change<K> {
    fn clone(&self) -> Self {
        match self {
            Change::Applied { before, after } => Change::Applied {
                before: before.clone(),
                after: after.clone(),
            },
            Change::Deleted(gone) => Change::Deleted(gone.clone()),
        }
    }
}

impl<K> Change<K> {
    /// The object as the store now holds it; `None` for a deletion.
    pub fn applied(self) -> Option<Arc<K>> {
        match self {
            Change::Applied { after, .. } => Some(after),
            Change::Deleted(_) => None,
        }
    }

    /// The deleted object; `None` for a creation or an update.
    pub fn deleted(self) -> Option<Arc<K>> {
        match self {
            Change::Applied { .. } => None,
            Change::Deleted(gone) => Some(gone),
        }
    }

    /// Whether a reader that sees objects through `same` must look again: always for a
    /// new, resent or deleted object, else when `same(before, after)` is false.
    pub fn differs(&self, same: impl Fn(&K, &K) -> bool) -> bool {
        match self {
            Change::Applied {
                before: Some(before),
                after,
            } => !same(before, after),
            _ => true,
        }
    }

    /// The object a trigger names: the new state, or the deleted one.
    pub fn object(self) -> Arc<K> {
        match self {
            Change::Applied { after, .. } => after,
            Change::Deleted(gone) => gone,
        }
    }
}

pub struct Fanout<K> {
    tx: Sender<Change<K>>,
    /// Keeps the channel open while nobody subscribed yet.
    _open: InactiveReceiver<Change<K>>,
}

impl<K> Fanout<K>
where
    K: Lookup + Clone + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    pub fn new(capacity: usize) -> Self {
        let (mut tx, rx) = async_broadcast::broadcast(capacity);
        // Without subscribers a change goes nowhere instead of waiting for one.
        tx.set_await_active(false);
        tx.set_overflow(false);
        Fanout {
            tx,
            _open: rx.deactivate(),
        }
    }

    /// A stream of every change from now on. It must be consumed: the watch waits for
    /// its slowest subscriber.
    pub fn subscribe(&self) -> Receiver<Change<K>> {
        self.tx.new_receiver()
    }

    /// Applies `events` to `writer`'s store (what `reflect` does) and passes them
    /// through, telling subscribers of each applied or deleted object, and of every
    /// object once a (re)list is complete.
    pub fn reflect<S>(
        &self,
        writer: Writer<K>,
        events: S,
    ) -> impl Stream<Item = S::Item> + Send + 'static
    where
        S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    {
        self.reflect_indexed(writer, events, ())
    }

    /// [`Fanout::reflect`], keeping `index` in step with the store: each change reaches
    /// the index right after the store and before any subscriber, so a reconcile it
    /// triggers reads both in the same state.
    pub fn reflect_indexed<S>(
        &self,
        mut writer: Writer<K>,
        events: S,
        index: impl StoreIndex<K>,
    ) -> impl Stream<Item = S::Item> + Send + 'static
    where
        S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    {
        let tx = self.tx.clone();
        let store: Store<K> = writer.as_reader();
        events.then(move |event| {
            let changes: Vec<Change<K>> = match &event {
                Ok(ev) => {
                    let key = match ev {
                        watcher::Event::Apply(obj) | watcher::Event::Delete(obj) => {
                            Some(obj.to_object_ref(Default::default()))
                        }
                        _ => None,
                    };
                    let before = key.as_ref().and_then(|key| store.get(key));
                    writer.apply_watcher_event(ev);
                    match ev {
                        watcher::Event::Apply(_) => key
                            .and_then(|key| store.get(&key))
                            .map(|after| {
                                index.applied(before.as_ref(), &after);
                                Change::Applied { before, after }
                            })
                            .into_iter()
                            .collect(),
                        watcher::Event::Delete(obj) => {
                            index.deleted(before.as_deref().unwrap_or(obj));
                            vec![Change::Deleted(Arc::new(obj.clone()))]
                        }
                        watcher::Event::InitDone => {
                            let all = store.state();
                            index.relisted(&all);
                            all.into_iter()
                                .map(|after| Change::Applied {
                                    before: None,
                                    after,
                                })
                                .collect()
                        }
                        watcher::Event::Init | watcher::Event::InitApply(_) => vec![],
                    }
                }
                Err(_) => vec![],
            };
            let tx = tx.clone();
            async move {
                for change in changes {
                    // Err only when nobody subscribed: nothing to tell.
                    let _ = tx.broadcast_direct(change).await;
                }
                event
            }
        })
    }
}

/// Something kept in step with a shared store, change by change (the pods' owner index,
/// `pod_index`). Called from the watch's own task, in the store's order.
pub trait StoreIndex<K>: Send + 'static {
    /// Created or updated; `before` is the store's previous version, if any.
    fn applied(&self, before: Option<&Arc<K>>, after: &Arc<K>);
    /// Deleted: the store's last version, else the watch's.
    fn deleted(&self, last: &K);
    /// A (re)list replaced the whole store with `all`.
    fn relisted(&self, all: &[Arc<K>]);
}

/// No index.
impl<K> StoreIndex<K> for () {
    fn applied(&self, _: Option<&Arc<K>>, _: &Arc<K>) {}
    fn deleted(&self, _: &K) {}
    fn relisted(&self, _: &[Arc<K>]) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::reflector;
    use kube::runtime::WatchStreamExt;
    use std::time::Duration;

    fn pod(name: &str) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some(name.into());
        pod.metadata.namespace = Some("ns".into());
        pod
    }

    /// Applied, then deleted before the subscriber looked, then another pod applied.
    fn events() -> Vec<Result<watcher::Event<Pod>, watcher::Error>> {
        vec![
            Ok(watcher::Event::Apply(pod("gone"))),
            Ok(watcher::Event::Delete(pod("gone"))),
            Ok(watcher::Event::Apply(pod("next"))),
        ]
    }

    /// The subscriber runs in its own task, so only its own stream can wake it, as in a
    /// Controller (each trigger stream has its own waker there).
    async fn first_seen(
        mut changes: impl Stream<Item = Arc<Pod>> + Unpin + Send + 'static,
    ) -> Option<String> {
        let subscriber = tokio::spawn(async move { changes.next().await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        match tokio::time::timeout(Duration::from_secs(2), subscriber).await {
            Ok(Ok(Some(pod))) => pod.metadata.name.clone(),
            _ => None,
        }
    }

    #[tokio::test]
    async fn a_subscriber_hears_of_later_changes_after_an_object_vanished() {
        let (_store, writer) = reflector::store::<Pod>();
        let fanout = Fanout::new(16);
        let changes = fanout.subscribe();
        let stream = fanout.reflect(writer, futures::stream::iter(events()));
        // The watch runs to the end before the subscriber first looks.
        stream.for_each(|_| async {}).await;
        // The deleted pod's changes still arrive (as it was), then the next one.
        let mut changes = changes;
        let name = |c: Change<Pod>| c.object().metadata.name.clone();
        assert_eq!(name(changes.next().await.unwrap()).as_deref(), Some("gone"));
        assert!(matches!(changes.next().await, Some(Change::Deleted(_))));
        let applied = changes.filter_map(|c| futures::future::ready(c.applied()));
        assert_eq!(first_seen(Box::pin(applied)).await.as_deref(), Some("next"));
    }

    fn labelled(name: &str, version: &str, label: &str) -> Pod {
        let mut pod = pod(name);
        pod.metadata.resource_version = Some(version.into());
        pod.metadata.labels = Some([("l".to_string(), label.to_string())].into());
        pod
    }

    /// Each change carries what the store held before, so a subscriber can skip writes
    /// that change nothing it reads; a relist resends everything as new.
    #[tokio::test]
    async fn changes_carry_the_object_before_and_after() {
        let (store, writer) = reflector::store::<Pod>();
        let fanout = Fanout::new(16);
        let changes = fanout.subscribe();
        let events = vec![
            Ok(watcher::Event::Apply(labelled("p", "1", "a"))),
            Ok(watcher::Event::Apply(labelled("p", "2", "a"))),
            Ok(watcher::Event::Apply(labelled("p", "3", "b"))),
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(labelled("p", "4", "b"))),
            Ok(watcher::Event::InitDone),
            Ok(watcher::Event::Delete(labelled("p", "5", "b"))),
        ];
        fanout
            .reflect(writer, futures::stream::iter(events))
            .for_each(|_| async {})
            .await;
        drop(fanout); // ends the change stream
        assert!(store.state().is_empty(), "the store applied every event");
        let same_label = |a: &Pod, b: &Pod| a.metadata.labels == b.metadata.labels;
        let seen: Vec<(String, bool)> = changes
            .map(|c| {
                let differs = c.differs(same_label);
                let version = match &c {
                    Change::Applied { before, after } => format!(
                        "{}->{}",
                        before.as_ref().map_or("none".into(), |b| b
                            .metadata
                            .resource_version
                            .clone()
                            .unwrap_or_default()),
                        after.metadata.resource_version.clone().unwrap_or_default()
                    ),
                    Change::Deleted(gone) => format!(
                        "deleted {}",
                        gone.metadata.resource_version.clone().unwrap_or_default()
                    ),
                };
                (version, differs)
            })
            .collect()
            .await;
        let expected = [
            ("none->1", true),
            ("1->2", false),
            ("2->3", true),
            ("none->4", true),
            ("deleted 5", true),
        ];
        let expected: Vec<(String, bool)> =
            expected.iter().map(|(v, d)| (v.to_string(), *d)).collect();
        assert_eq!(seen, expected);
    }

    /// The bug this module works around, kept as a canary: when kube-runtime fixes its
    /// handle, this fails, and `store_shared` can be used again.
    #[tokio::test]
    async fn kube_runtime_handles_lose_the_wake_up_when_an_object_vanished() {
        let (store, writer) = reflector::store_shared::<Pod>(16);
        let handle = writer.subscribe().expect("shared");
        drop(store);
        futures::stream::iter(events())
            .reflect_shared(writer)
            .for_each(|_| async {})
            .await;
        assert_eq!(
            first_seen(handle).await,
            None,
            "kube-runtime's ReflectHandle now delivers after a vanished object: drop the Fanout workaround"
        );
    }
}
