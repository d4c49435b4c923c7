//! The independent budget watcher: one per scenario, the same code whichever controller
//! (kube-controller-manager's own DaemonSet controller, rollgate or yurt-manager) does
//! the rollout. It knows neither: it watches the bench's nodes and the pods of one
//! namespace, and knows only the image the rollout goes to and the budget in nodes.
//!
//! From those it keeps, at every change it sees:
//! - per Ready node, whether the DaemonSet is available there: a pod that serves by the
//!   e2e suites' rule (`support::unavailable::pod_serves`: Running, not terminating,
//!   `ContainersReady` True; not `Ready`, which the node-lifecycle controller leaves
//!   False on a returning node's running pods until its kubelet reports again); a Ready
//!   node without one is unavailable, whoever caused it;
//! - how many nodes run an available pod of the new image ("updated");
//! - the peak of unavailable Ready nodes, and each episode above the budget;
//! - timestamped per-node transitions, for the reaction gaps and the critical path;
//! - nodes' Ready transitions (the comeback of cut-off nodes);
//! - how many pods carry `PodNeedUpgrade=True` (OTA);
//! - when a new pod first reads failed: a container waiting with a reason by which the
//!   kubelet says it cannot start (a release that crash-loops, `bad_release`).
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};

use crate::support::unavailable::pod_serves;
use crate::support::{node_ready_status, pod_condition, OWNER_LABEL};

/// One timestamped transition of a node's pods, as the watcher saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An old pod got its deletionTimestamp.
    OldDeleting,
    /// An old pod disappeared from the API.
    OldGone,
    /// A new-image pod appeared (the DaemonSet controller created it).
    NewCreated,
    /// A new-image pod was first seen bound to its node.
    NewBound,
    /// A new-image pod became available (`pod_serves`).
    NewReady,
    /// A new-image pod first read failed (`kubelet_says_failed`).
    NewFailed,
}

/// Counts at one moment, relative to the watcher's clock origin (`mark`).
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub at: Duration,
    /// Nodes with an available pod of the new image.
    pub updated: usize,
    /// Ready nodes without an available pod.
    pub unavailable: usize,
}

#[derive(Debug, Clone)]
struct PodView {
    node: String,
    new: bool,
    /// Available: `pod_serves` (so never while terminating).
    serving: bool,
    terminating: bool,
    need_upgrade: Option<String>,
    failed: bool,
}

#[derive(Default)]
struct State {
    origin: Option<Instant>,
    nodes: BTreeMap<String, bool>,
    pods: BTreeMap<String, PodView>,
    nodes_listed: bool,
    pods_listed: bool,
    events: Vec<(Instant, Kind, String)>,
    /// Bound new pods' creation time, kept until they are bound.
    created_at: BTreeMap<String, Instant>,
    node_ready_changes: Vec<(Instant, String, bool)>,
    samples: Vec<(Instant, usize, usize)>,
    peak_unavailable: usize,
    violations: usize,
    in_violation: bool,
    watch_errors: usize,
}

pub struct BudgetWatcher {
    state: Arc<Mutex<State>>,
    budget: usize,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for BudgetWatcher {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn image_of(p: &Pod) -> &str {
    p.spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.as_deref())
        .unwrap_or_default()
}

/// Of the revision the rollout goes to: the new image, or the pod-template annotation
/// of a rollout that changes nothing else (`TemplateChange::AnnotationOnly`).
fn is_new(p: &Pod, new_image: &str) -> bool {
    image_of(p) == new_image
        || p.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(crate::scenario::NEW_REVISION_ANNOTATION.0))
            .is_some_and(|v| v == crate::scenario::NEW_REVISION_ANNOTATION.1)
}

/// Waiting reasons with which the kubelet says a container cannot start.
const CANNOT_START: [&str; 5] = [
    "CrashLoopBackOff",
    "ErrImagePull",
    "ImagePullBackOff",
    "CreateContainerConfigError",
    "InvalidImageName",
];

/// A container of the pod waits with a reason in [`CANNOT_START`].
fn kubelet_says_failed(p: &Pod) -> bool {
    p.status
        .iter()
        .flat_map(|s| s.container_statuses.iter().flatten())
        .filter_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.as_deref())
        .any(|reason| CANNOT_START.contains(&reason))
}

fn node_of(p: &Pod) -> String {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default()
}

impl State {
    /// Recomputes the counts after a change and records a sample when they moved.
    fn recount(&mut self, now: Instant, budget: usize) {
        let mut available: BTreeSet<&str> = BTreeSet::new();
        let mut updated: BTreeSet<&str> = BTreeSet::new();
        for p in self.pods.values() {
            if p.serving && !p.node.is_empty() {
                available.insert(&p.node);
                if p.new {
                    updated.insert(&p.node);
                }
            }
        }
        let unavailable = self
            .nodes
            .iter()
            .filter(|(name, ready)| **ready && !available.contains(name.as_str()))
            .count();
        let updated = updated.len();
        let changed = self
            .samples
            .last()
            .is_none_or(|(_, u, n)| (*u, *n) != (updated, unavailable));
        if changed {
            self.samples.push((now, updated, unavailable));
        }
        // Peaks and violations count only after the clock started (the rollout).
        if self.origin.is_some_and(|o| now >= o) {
            self.peak_unavailable = self.peak_unavailable.max(unavailable);
            let over = unavailable > budget;
            if over && !self.in_violation {
                self.violations += 1;
            }
            self.in_violation = over;
        }
    }
}

impl BudgetWatcher {
    /// Starts watching the nodes owned by `owner` and the pods of `namespace`; returns
    /// once both initial lists are in.
    pub async fn start(
        client: &Client,
        owner: &str,
        namespace: &str,
        new_image: &str,
        budget: usize,
    ) -> Result<Self, String> {
        let state = Arc::new(Mutex::new(State::default()));
        let nodes: Api<Node> = Api::all(client.clone());
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let node_config = watcher::Config::default().labels(&format!("{OWNER_LABEL}={owner}"));
        let s = state.clone();
        let node_task = tokio::spawn(async move {
            // Backoff on errors: without it, a watch error (the client closing at shutdown)
            // turns this loop into one that never yields.
            let mut stream = watcher(nodes, node_config).default_backoff().boxed();
            while let Some(event) = stream.next().await {
                let now = Instant::now();
                let mut st = s.lock().unwrap();
                match event {
                    Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) => {
                        let name = n.metadata.name.clone().unwrap_or_default();
                        let ready = node_ready_status(&n).as_deref() == Some("True");
                        let before = st.nodes.insert(name.clone(), ready);
                        if before.is_some_and(|b| b != ready) {
                            st.node_ready_changes.push((now, name, ready));
                        }
                        st.recount(now, budget);
                    }
                    Ok(watcher::Event::Delete(n)) => {
                        st.nodes.remove(&n.metadata.name.unwrap_or_default());
                        st.recount(now, budget);
                    }
                    Ok(watcher::Event::InitDone) => st.nodes_listed = true,
                    Ok(watcher::Event::Init) => {}
                    Err(_) => st.watch_errors += 1,
                }
            }
        });
        let s = state.clone();
        let target = new_image.to_string();
        let pod_task = tokio::spawn(async move {
            let mut stream = watcher(pods, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(event) = stream.next().await {
                let now = Instant::now();
                let mut st = s.lock().unwrap();
                match event {
                    Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => {
                        let uid = pod.metadata.uid.clone().unwrap_or_default();
                        let view = PodView {
                            node: node_of(&pod),
                            new: is_new(&pod, &target),
                            serving: pod_serves(&pod),
                            terminating: pod.metadata.deletion_timestamp.is_some(),
                            need_upgrade: pod_condition(&pod, "PodNeedUpgrade"),
                            failed: kubelet_says_failed(&pod),
                        };
                        let before = st.pods.get(&uid).cloned();
                        if view.new && before.is_none() {
                            st.created_at.insert(uid.clone(), now);
                        }
                        let was_bound = before.as_ref().is_some_and(|b| !b.node.is_empty());
                        if view.new && !view.node.is_empty() && !was_bound {
                            let created = st.created_at.remove(&uid).unwrap_or(now);
                            st.events
                                .push((created, Kind::NewCreated, view.node.clone()));
                            st.events.push((now, Kind::NewBound, view.node.clone()));
                        }
                        if view.terminating
                            && !view.new
                            && before.as_ref().is_some_and(|b| !b.terminating)
                        {
                            st.events.push((now, Kind::OldDeleting, view.node.clone()));
                        }
                        if view.new && view.serving && !before.as_ref().is_some_and(|b| b.serving) {
                            st.events.push((now, Kind::NewReady, view.node.clone()));
                        }
                        if view.new && view.failed && !before.as_ref().is_some_and(|b| b.failed) {
                            st.events.push((now, Kind::NewFailed, view.node.clone()));
                        }
                        st.pods.insert(uid, view);
                        st.recount(now, budget);
                    }
                    Ok(watcher::Event::Delete(pod)) => {
                        let uid = pod.metadata.uid.clone().unwrap_or_default();
                        if !is_new(&pod, &target) {
                            st.events.push((now, Kind::OldGone, node_of(&pod)));
                        }
                        st.pods.remove(&uid);
                        st.recount(now, budget);
                    }
                    Ok(watcher::Event::InitDone) => st.pods_listed = true,
                    Ok(watcher::Event::Init) => {}
                    Err(_) => st.watch_errors += 1,
                }
            }
        });
        let w = BudgetWatcher {
            state,
            budget,
            tasks: vec![node_task, pod_task],
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            {
                let st = w.state.lock().unwrap();
                if st.nodes_listed && st.pods_listed {
                    break;
                }
            }
            if Instant::now() > deadline {
                return Err("the budget watcher's initial lists did not arrive in 60 s".into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(w)
    }

    /// Starts the clock: the rollout begins now. Peaks and violations count from here.
    pub fn mark(&self) -> Instant {
        let now = Instant::now();
        let mut st = self.state.lock().unwrap();
        st.origin = Some(now);
        st.peak_unavailable = 0;
        st.violations = 0;
        st.in_violation = false;
        st.recount(now, self.budget);
        now
    }

    /// (Ready nodes, of them with an available new pod).
    pub fn ready_progress(&self) -> (usize, usize) {
        let st = self.state.lock().unwrap();
        let updated: BTreeSet<&str> = st
            .pods
            .values()
            .filter(|p| p.new && p.serving)
            .map(|p| p.node.as_str())
            .collect();
        let ready: Vec<&String> = st
            .nodes
            .iter()
            .filter(|(_, r)| **r)
            .map(|(n, _)| n)
            .collect();
        let done = ready
            .iter()
            .filter(|n| updated.contains(n.as_str()))
            .count();
        (ready.len(), done)
    }

    /// Pods in the namespace, terminating ones included.
    pub fn pod_count(&self) -> usize {
        self.state.lock().unwrap().pods.len()
    }

    /// Pods not terminating, and how many of them are available.
    pub fn pods_available(&self) -> (usize, usize) {
        let st = self.state.lock().unwrap();
        let live: Vec<&PodView> = st.pods.values().filter(|p| !p.terminating).collect();
        (live.len(), live.iter().filter(|p| p.serving).count())
    }

    /// Pods (not terminating) with `PodNeedUpgrade`: (total, of them True, carrying the
    /// condition at all).
    pub fn need_upgrade(&self) -> (usize, usize, usize) {
        let st = self.state.lock().unwrap();
        let live: Vec<&PodView> = st.pods.values().filter(|p| !p.terminating).collect();
        let marked = live
            .iter()
            .filter(|p| p.need_upgrade.as_deref() == Some("True"))
            .count();
        let carrying = live.iter().filter(|p| p.need_upgrade.is_some()).count();
        (live.len(), marked, carrying)
    }

    /// Whether every node in `names` is NotReady (`ready == false`) or Ready.
    pub fn nodes_are(&self, names: &[String], ready: bool) -> usize {
        let st = self.state.lock().unwrap();
        names
            .iter()
            .filter(|n| st.nodes.get(*n).copied() == Some(ready))
            .count()
    }

    /// Whether the node runs an available pod of the new image.
    pub fn node_updated(&self, node: &str) -> bool {
        let st = self.state.lock().unwrap();
        st.pods
            .values()
            .any(|p| p.node == node && p.new && p.serving)
    }

    pub fn peak_unavailable(&self) -> usize {
        self.state.lock().unwrap().peak_unavailable
    }

    pub fn violations(&self) -> usize {
        self.state.lock().unwrap().violations
    }

    pub fn watch_errors(&self) -> usize {
        self.state.lock().unwrap().watch_errors
    }

    /// Every pod transition since `from`, relative to it, in time order.
    pub fn events_since(&self, from: Instant) -> Vec<(Duration, Kind, String)> {
        let st = self.state.lock().unwrap();
        let mut out: Vec<_> = st
            .events
            .iter()
            .filter(|(at, ..)| *at >= from)
            .map(|(at, k, n)| (*at - from, *k, n.clone()))
            .collect();
        out.sort_by_key(|(at, ..)| *at);
        out
    }

    /// The counts since `from`, relative to it (the last sample before it first).
    pub fn samples_since(&self, from: Instant) -> Vec<Sample> {
        let st = self.state.lock().unwrap();
        let before = st.samples.iter().rev().find(|(at, ..)| *at < from);
        before
            .map(|(_, u, n)| (from, *u, *n))
            .into_iter()
            .chain(st.samples.iter().filter(|(at, ..)| *at >= from).copied())
            .map(|(at, updated, unavailable)| Sample {
                at: at - from,
                updated,
                unavailable,
            })
            .collect()
    }

    /// When each node turned Ready (`true`) or not, since `from`.
    pub fn node_ready_changes_since(&self, from: Instant) -> Vec<(Instant, String, bool)> {
        let st = self.state.lock().unwrap();
        st.node_ready_changes
            .iter()
            .filter(|(at, ..)| *at >= from)
            .cloned()
            .collect()
    }

    /// When the node's new pod first became available after `from`.
    pub fn new_ready_at(&self, node: &str, from: Instant) -> Option<Instant> {
        let st = self.state.lock().unwrap();
        st.events
            .iter()
            .find(|(at, k, n)| *at >= from && *k == Kind::NewReady && n == node)
            .map(|(at, ..)| *at)
    }
}
