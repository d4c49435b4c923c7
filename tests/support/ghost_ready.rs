//! The ghost-Ready guard: a cut-off node must not show `Ready=True` again before its
//! heartbeat is restored.
//!
//! A node whose heartbeat (Lease renewal) stops is legitimately still Ready for the
//! node-lifecycle controller's grace period. Once that controller has marked it not
//! Ready (Unknown), only the node's own heartbeat may bring it back. A `Ready=True` in
//! between is a *ghost*: the simulator restating stale status (kwok v0.8.0 can leave a
//! delayed node-status job queued for a node it no longer manages). To any controller a
//! ghost looks like a node that came back, so every NotReady figure and test would be
//! distorted by it. The guard records every Ready transition it sees and every ghost.
//!
//! `Tracker` is the pure rule (unit-tested below); `Guard` feeds it from a node watch.
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};

use super::node_ready_status;

/// A node seen `Ready=True` after it was marked not Ready and before its heartbeat was
/// restored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ghost {
    pub node: String,
    /// Since the guard started.
    pub at: Duration,
    /// Wall-clock time, RFC 3339.
    pub wall: String,
}

impl std::fmt::Display for Ghost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} Ready=True at {:.1} s ({}) while cut off, after it was marked not Ready",
            self.node,
            self.at.as_secs_f64(),
            self.wall
        )
    }
}

/// One change of a node's Ready condition status, as seen by the guard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyTransition {
    pub node: String,
    pub at: Duration,
    /// "True", "False", "Unknown", or "-" when the node has no Ready condition.
    pub from: String,
    pub to: String,
    pub heartbeat_on: bool,
}

#[derive(Debug, Default, Clone)]
struct NodeLife {
    ready: Option<String>,
    /// Marked not Ready while its heartbeat is off: from here on, Ready=True is a ghost.
    marked_while_cut: bool,
}

/// The rule, on plain observations of one node at a time.
#[derive(Debug, Default)]
pub struct Tracker {
    nodes: BTreeMap<String, NodeLife>,
    pub transitions: Vec<ReadyTransition>,
    pub ghosts: Vec<Ghost>,
}

impl Tracker {
    /// One observed state of `node`: whether its heartbeat label is on, and its Ready
    /// condition's status. Returns the ghost, when this observation is one.
    pub fn observe(
        &mut self,
        node: &str,
        heartbeat_on: bool,
        ready: Option<&str>,
        at: Duration,
        wall: impl FnOnce() -> String,
    ) -> Option<Ghost> {
        let life = self.nodes.entry(node.to_string()).or_default();
        if life.ready.as_deref() != ready {
            self.transitions.push(ReadyTransition {
                node: node.to_string(),
                at,
                from: life.ready.clone().unwrap_or_else(|| "-".into()),
                to: ready.unwrap_or("-").to_string(),
                heartbeat_on,
            });
            life.ready = ready.map(str::to_string);
        }
        if heartbeat_on {
            life.marked_while_cut = false;
            return None;
        }
        if ready != Some("True") {
            life.marked_while_cut = true;
            return None;
        }
        if !life.marked_while_cut {
            // Freshly cut: still inside the grace period.
            return None;
        }
        let ghost = Ghost {
            node: node.to_string(),
            at,
            wall: wall(),
        };
        self.ghosts.push(ghost.clone());
        Some(ghost)
    }

    pub fn forget(&mut self, node: &str) {
        self.nodes.remove(node);
    }
}

/// A node watch feeding a `Tracker`, stopped when dropped.
pub struct Guard {
    tracker: Arc<Mutex<Tracker>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Guard {
    /// Watches the nodes matching `selector`; a node's heartbeat is on while it carries
    /// `heartbeat_label=on`. Returns once the first list is in.
    pub async fn start(client: &Client, selector: &str, heartbeat_label: &str) -> Self {
        let tracker = Arc::new(Mutex::new(Tracker::default()));
        let api: Api<Node> = Api::all(client.clone());
        let config = watcher::Config::default().labels(selector);
        let (listed_tx, listed_rx) = tokio::sync::oneshot::channel();
        let shared = tracker.clone();
        let label = heartbeat_label.to_string();
        let origin = Instant::now();
        let task = tokio::spawn(async move {
            let mut listed = Some(listed_tx);
            // With backoff: a watch error (and, at runtime shutdown, a closed client)
            // must not become a loop that never yields.
            let mut stream = watcher(api, config).default_backoff().boxed();
            while let Some(event) = stream.next().await {
                let at = origin.elapsed();
                let mut tracker = shared.lock().unwrap();
                match event {
                    Ok(watcher::Event::Apply(node) | watcher::Event::InitApply(node)) => {
                        let name = node.metadata.name.clone().unwrap_or_default();
                        let on = node
                            .metadata
                            .labels
                            .as_ref()
                            .and_then(|l| l.get(&label))
                            .is_some_and(|v| v == "on");
                        let ready = node_ready_status(&node);
                        let wall = || k8s_openapi::jiff::Timestamp::now().to_string();
                        if let Some(ghost) = tracker.observe(&name, on, ready.as_deref(), at, wall)
                        {
                            super::note(format!("GHOST-READY node: {ghost}"));
                        }
                    }
                    Ok(watcher::Event::Delete(node)) => {
                        tracker.forget(node.metadata.name.as_deref().unwrap_or_default())
                    }
                    Ok(watcher::Event::InitDone) => {
                        if let Some(tx) = listed.take() {
                            let _ = tx.send(());
                        }
                    }
                    Ok(watcher::Event::Init) | Err(_) => {}
                }
            }
        });
        let _ = tokio::time::timeout(Duration::from_secs(30), listed_rx).await;
        Guard { tracker, task }
    }

    pub fn ghosts(&self) -> Vec<Ghost> {
        self.tracker.lock().unwrap().ghosts.clone()
    }

    /// The ghosts seen so far, which then count as reported.
    pub fn take_ghosts(&self) -> Vec<Ghost> {
        std::mem::take(&mut self.tracker.lock().unwrap().ghosts)
    }

    pub fn transitions(&self) -> Vec<ReadyTransition> {
        self.tracker.lock().unwrap().transitions.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(steps: &[(bool, Option<&str>)]) -> Vec<usize> {
        let mut tracker = Tracker::default();
        steps
            .iter()
            .enumerate()
            .filter_map(|(i, (on, ready))| {
                tracker
                    .observe("n", *on, *ready, Duration::from_secs(i as u64), || {
                        String::new()
                    })
                    .map(|_| i)
            })
            .collect()
    }

    #[test]
    fn ready_inside_the_grace_period_is_no_ghost() {
        assert!(run(&[
            (true, Some("True")),
            (false, Some("True")),
            (false, Some("True"))
        ])
        .is_empty());
    }

    #[test]
    fn ready_after_being_marked_unknown_while_cut_is_a_ghost() {
        let steps = [
            (true, Some("True")),
            (false, Some("True")),
            (false, Some("Unknown")),
            (false, Some("True")),
            (false, Some("Unknown")),
            (false, Some("True")),
        ];
        assert_eq!(run(&steps), vec![3, 5]);
    }

    #[test]
    fn ready_once_the_heartbeat_is_back_is_no_ghost() {
        let steps = [
            (false, Some("Unknown")),
            (true, Some("Unknown")),
            (true, Some("True")),
            (false, Some("True")),
        ];
        assert!(run(&steps).is_empty());
    }

    #[test]
    fn every_status_change_is_a_transition() {
        let mut tracker = Tracker::default();
        for (i, (on, ready)) in [
            (true, None),
            (true, Some("True")),
            (false, Some("True")),
            (false, Some("Unknown")),
            (true, Some("True")),
        ]
        .into_iter()
        .enumerate()
        {
            tracker.observe("n", on, ready, Duration::from_secs(i as u64), String::new);
        }
        let seen: Vec<(&str, &str)> = tracker
            .transitions
            .iter()
            .map(|t| (t.from.as_str(), t.to.as_str()))
            .collect();
        assert_eq!(
            seen,
            [("-", "True"), ("True", "Unknown"), ("Unknown", "True")]
        );
    }
}
