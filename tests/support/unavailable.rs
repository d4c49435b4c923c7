//! An independent count of unavailable nodes: how many Ready nodes have no serving pod
//! of a DaemonSet, whatever the reason (a pod deleted, one still starting, one crashed,
//! none at all), and the highest count seen. It knows nothing of revisions, budgets or
//! of what the controller did: it is the user's view of the invariant.
//!
//! "Serving" is the kubelet's own word on the containers: a live (not terminating) pod
//! whose `ContainersReady` is True. `Ready` is not used, because the node-lifecycle
//! controller rewrites `Ready` to False on every pod of a cut-off node while the
//! containers keep running; after the node's return that stale False says nothing about
//! service until the kubelet reports again (it leaves `ContainersReady` alone).
//!
//! `pod_serves` is that rule, the one definition of "available" that the e2e suites and
//! the rollout bench's budget watcher (`benches/rollout/watcher.rs`) share. `Counter`
//! counts with it (unit-tested below); `Watcher` feeds it from a node watch (the nodes
//! of one owner label) and a pod watch (one namespace).
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use futures::{stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};

use super::{node_ready_status, pod_condition};

/// The rule, on the latest state of every node and pod.
#[derive(Debug, Default)]
pub struct Counter {
    ready_nodes: BTreeSet<String>,
    /// By pod UID: (node, serving).
    pods: BTreeMap<String, (String, bool)>,
    pub peak: usize,
    /// The unavailable nodes when the peak was first reached.
    pub at_peak: Vec<String>,
    pub observations: usize,
    /// Counting starts once both initial lists are in: before, a node listed before
    /// its pods would look bare.
    armed: bool,
}

impl Counter {
    pub fn node(&mut self, name: &str, ready: bool) {
        if ready {
            self.ready_nodes.insert(name.to_string());
        } else {
            self.ready_nodes.remove(name);
        }
        self.update();
    }

    pub fn node_gone(&mut self, name: &str) {
        self.ready_nodes.remove(name);
        self.update();
    }

    /// The pod's latest state: `None` once it is gone.
    pub fn pod(&mut self, uid: &str, state: Option<(String, bool)>) {
        match state {
            Some(state) => self.pods.insert(uid.to_string(), state),
            None => self.pods.remove(uid),
        };
        self.update();
    }

    /// Ready nodes with no serving pod.
    pub fn unavailable(&self) -> Vec<String> {
        let serving: BTreeSet<&str> = self
            .pods
            .values()
            .filter(|(_, serving)| *serving)
            .map(|(node, _)| node.as_str())
            .collect();
        self.ready_nodes
            .iter()
            .filter(|n| !serving.contains(n.as_str()))
            .cloned()
            .collect()
    }

    /// Both initial lists are in: count from here on.
    pub fn arm(&mut self) {
        self.armed = true;
        self.update();
    }

    fn update(&mut self) {
        if !self.armed {
            return;
        }
        self.observations += 1;
        let now = self.unavailable();
        if now.len() > self.peak {
            self.peak = now.len();
            self.at_peak = now;
        }
    }
}

/// Whether `pod` serves (is available) on its node: live (Running, not terminating) with
/// `ContainersReady` True, whatever `Ready` says (see the module docs).
pub fn pod_serves(pod: &Pod) -> bool {
    let live = pod.metadata.deletion_timestamp.is_none()
        && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    live && pod_condition(pod, "ContainersReady").as_deref() == Some("True")
}

/// Whether `pod` serves on its node (`pod_serves`), and that node.
pub fn serving_state(pod: &Pod) -> Option<(String, bool)> {
    let node = pod.spec.as_ref()?.node_name.clone()?;
    Some((node, pod_serves(pod)))
}

/// Feeds a `Counter` from the watches; the count starts with the first events.
pub struct Watcher {
    counter: Arc<Mutex<Counter>>,
    task: tokio::task::JoinHandle<()>,
}

enum Seen {
    Node(Box<watcher::Event<Node>>),
    Pod(Box<watcher::Event<Pod>>),
}

impl Watcher {
    /// Counts the nodes labelled `node_selector` and the pods of `namespace`, from the
    /// moment both are listed; `wait_armed` waits for that.
    pub fn start(client: &Client, node_selector: &str, namespace: &str) -> Self {
        let nodes: Api<Node> = Api::all(client.clone());
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let node_events = watcher(nodes, watcher::Config::default().labels(node_selector))
            .default_backoff()
            .filter_map(|e| futures::future::ready(e.ok().map(|e| Seen::Node(Box::new(e)))));
        let pod_events = watcher(pods, watcher::Config::default())
            .default_backoff()
            .filter_map(|e| futures::future::ready(e.ok().map(|e| Seen::Pod(Box::new(e)))));
        let counter = Arc::new(Mutex::new(Counter::default()));
        let state = counter.clone();
        let task = tokio::spawn(async move {
            let mut events = stream::select(node_events, pod_events).boxed();
            let (mut nodes_listed, mut pods_listed) = (false, false);
            while let Some(seen) = events.next().await {
                let mut c = state.lock().unwrap();
                match seen {
                    Seen::Node(e) if matches!(*e, watcher::Event::InitDone) => {
                        nodes_listed = true;
                        if pods_listed {
                            c.arm();
                        }
                    }
                    Seen::Pod(e) if matches!(*e, watcher::Event::InitDone) => {
                        pods_listed = true;
                        if nodes_listed {
                            c.arm();
                        }
                    }
                    Seen::Node(e) => match *e {
                        watcher::Event::Apply(n) | watcher::Event::InitApply(n) => {
                            let name = n.metadata.name.clone().unwrap_or_default();
                            c.node(&name, node_ready_status(&n).as_deref() == Some("True"));
                        }
                        watcher::Event::Delete(n) => {
                            c.node_gone(n.metadata.name.as_deref().unwrap_or_default());
                        }
                        watcher::Event::Init | watcher::Event::InitDone => {}
                    },
                    Seen::Pod(e) => match *e {
                        watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                            let uid = p.metadata.uid.clone().unwrap_or_default();
                            c.pod(&uid, serving_state(&p));
                        }
                        watcher::Event::Delete(p) => {
                            c.pod(p.metadata.uid.as_deref().unwrap_or_default(), None);
                        }
                        watcher::Event::Init | watcher::Event::InitDone => {}
                    },
                }
            }
        });
        Watcher { counter, task }
    }

    /// The highest count so far, and the nodes it was made of.
    pub fn peak(&self) -> (usize, Vec<String>) {
        let c = self.counter.lock().unwrap();
        (c.peak, c.at_peak.clone())
    }

    /// Waits until both initial lists are in and the count has started.
    pub async fn wait_armed(&self) {
        super::wait_for(
            "the unavailable-node watcher's first lists",
            std::time::Duration::from_secs(30),
            || async {
                match self.counter.lock().unwrap().armed {
                    true => Ok(()),
                    false => Err("not listed yet".to_string()),
                }
            },
        )
        .await
    }

    pub fn unavailable_now(&self) -> Vec<String> {
        self.counter.lock().unwrap().unavailable()
    }

    pub fn observations(&self) -> usize {
        self.counter.lock().unwrap().observations
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    // Paths in full: bench targets compile this module without its #[test] functions.
    #[test]
    fn counts_ready_nodes_without_a_serving_pod_whatever_the_reason() {
        let mut c = super::Counter::default();
        for n in ["a", "b", "c", "d"] {
            c.node(n, true);
        }
        assert_eq!(c.peak, 0, "nothing counted before both lists are in");
        c.arm();
        assert_eq!(c.unavailable(), ["a", "b", "c", "d"], "no pods yet");
        for (uid, n) in [("1", "a"), ("2", "b"), ("3", "c"), ("4", "d")] {
            c.pod(uid, Some((n.into(), true)));
        }
        assert!(c.unavailable().is_empty());
        c.pod("1", Some(("a".into(), false))); // terminating or crashed
        c.pod("2", None); // gone
        c.pod("5", Some(("b".into(), false))); // its replacement, starting
        assert_eq!(c.unavailable(), ["a", "b"]);
        // A NotReady node counts for nothing, whatever its pod does.
        c.node("c", false);
        c.pod("3", Some(("c".into(), false)));
        assert_eq!(c.unavailable(), ["a", "b"]);
        // An old pod serving beside a new one starting: the node serves.
        c.pod("6", Some(("d".into(), false)));
        assert_eq!(c.unavailable(), ["a", "b"]);
        c.pod("5", Some(("b".into(), true)));
        assert_eq!(c.unavailable(), ["a"]);
        assert_eq!(c.peak, 4);
    }

    #[test]
    fn a_stale_ready_false_on_running_containers_is_serving() {
        let pod: super::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "uid": "1"},
            "spec": {"nodeName": "a", "containers": []},
            "status": {"phase": "Running", "conditions": [
                {"type": "ContainersReady", "status": "True"},
                {"type": "Ready", "status": "False"}
            ]}
        }))
        .unwrap();
        assert_eq!(super::serving_state(&pod), Some(("a".into(), true)));
        let mut starting = pod.clone();
        starting
            .status
            .as_mut()
            .unwrap()
            .conditions
            .as_mut()
            .unwrap()[0]
            .status = "False".into();
        assert_eq!(super::serving_state(&starting), Some(("a".into(), false)));
        let mut deleting = pod;
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ));
        assert_eq!(super::serving_state(&deleting), Some(("a".into(), false)));
    }
}
