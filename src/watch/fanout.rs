//! Change streams of the shared stores: every subscriber gets each changed object itself.
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
//! A [`Fanout`] sends the `Arc` the store already holds, taken right after the event
//! was applied, so nothing is looked up later and nothing can vanish. Back-pressure is
//! the same as kube's: a subscriber may lag `capacity` objects before the watch waits.
use std::sync::Arc;

use async_broadcast::{InactiveReceiver, Receiver, Sender};
use futures::{Stream, StreamExt};
use kube::runtime::reflector::{Lookup, Store};
use kube::runtime::watcher;

pub struct Fanout<K> {
    tx: Sender<Arc<K>>,
    /// Keeps the channel open while nobody subscribed yet.
    _open: InactiveReceiver<Arc<K>>,
}

impl<K: Send + Sync + 'static> Fanout<K> {
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

    /// A stream of every object changed from now on. It must be consumed: the watch
    /// waits for its slowest subscriber.
    pub fn subscribe(&self) -> Receiver<Arc<K>> {
        self.tx.new_receiver()
    }

    /// Passes `events` through, telling subscribers of each object `store` now holds
    /// for an applied event, and of every object once a (re)list is complete. `events`
    /// must already be reflected into `store`.
    pub fn after_reflect<S>(
        &self,
        store: Store<K>,
        events: S,
    ) -> impl Stream<Item = S::Item> + Send + 'static
    where
        K: Lookup + Clone,
        K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
        S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    {
        let tx = self.tx.clone();
        events.then(move |event| {
            let changed: Vec<Arc<K>> = match &event {
                Ok(watcher::Event::Apply(obj)) => store
                    .get(&obj.to_object_ref(Default::default()))
                    .into_iter()
                    .collect(),
                Ok(watcher::Event::InitDone) => store.state(),
                _ => vec![],
            };
            let tx = tx.clone();
            async move {
                for obj in changed {
                    // Err only when nobody subscribed: nothing to tell.
                    let _ = tx.broadcast_direct(obj).await;
                }
                event
            }
        })
    }
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
        let (store, writer) = reflector::store::<Pod>();
        let fanout = Fanout::new(16);
        let changes = fanout.subscribe();
        let stream = fanout.after_reflect(store, futures::stream::iter(events()).reflect(writer));
        // The watch runs to the end before the subscriber first looks.
        stream.for_each(|_| async {}).await;
        // The deleted pod's change still arrives (as it was), then the next one.
        let mut changes = changes;
        assert_eq!(
            changes.next().await.unwrap().metadata.name.as_deref(),
            Some("gone")
        );
        assert_eq!(first_seen(changes).await.as_deref(), Some("next"));
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
