//! Knowing when a controller's watches have all delivered their first full list.
//!
//! Not `Store::wait_until_ready`: it sits on a oneshot channel that keeps only the last
//! poller's waker, so with a kube-runtime Controller also waiting on the same store one
//! of the two waiters could sleep forever (seen as a controller that never reconciled).
//! Watching for each stream's first `InitDone` has no such race.
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use kube::runtime::watcher;
use tokio::sync::watch;

pub struct SyncGate {
    controller: &'static str,
    remaining: Mutex<BTreeSet<&'static str>>,
    tx: watch::Sender<bool>,
}

impl SyncGate {
    /// A gate waiting for the named streams; the receiver flips to true once all synced.
    pub fn new(
        controller: &'static str,
        streams: &[&'static str],
    ) -> (Arc<Self>, watch::Receiver<bool>) {
        let (tx, rx) = watch::channel(false);
        let remaining = Mutex::new(streams.iter().copied().collect());
        (
            Arc::new(SyncGate {
                controller,
                remaining,
                tx,
            }),
            rx,
        )
    }

    /// For `.inspect(...)` on a reflected watch stream: its first `InitDone` marks it synced.
    pub fn observe<K>(
        self: &Arc<Self>,
        stream: &'static str,
    ) -> impl Fn(&Result<watcher::Event<K>, watcher::Error>) {
        let gate = self.clone();
        move |event| {
            if let Ok(watcher::Event::InitDone) = event {
                let mut remaining = gate.remaining.lock().unwrap();
                if remaining.remove(stream) && remaining.is_empty() {
                    tracing::info!(controller = gate.controller, "caches synced");
                    let _ = gate.tx.send(true);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    #[test]
    fn opens_only_when_every_stream_has_listed_once() {
        let (gate, rx) = SyncGate::new("test", &["pods", "nodes"]);
        let pods = gate.observe::<Pod>("pods");
        let nodes = gate.observe::<Pod>("nodes");
        pods(&Ok(watcher::Event::Init));
        pods(&Ok(watcher::Event::InitDone));
        assert!(!*rx.borrow(), "one stream of two is not enough");
        pods(&Ok(watcher::Event::InitDone));
        assert!(
            !*rx.borrow(),
            "a relist of the same stream does not count twice"
        );
        nodes(&Ok(watcher::Event::InitDone));
        assert!(*rx.borrow());
    }
}
