//! What a rollout's timeline says: reaction gaps and where the critical path's time went.
//! Pure functions of the budget watcher's events, the same for every controller.
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::watcher::Kind;

/// Per node, how long it went without a serving pod in the rollout: its old pod marked
/// for deletion (Ready but terminating serves nothing) -> its new pod Ready. Sorted;
/// nodes that did not get both are left out.
pub fn node_downtimes(events: &[(Duration, Kind, String)]) -> Vec<Duration> {
    let mut deleting: BTreeMap<&str, Duration> = BTreeMap::new();
    let mut downtimes = Vec::new();
    let mut done: BTreeSet<&str> = BTreeSet::new();
    for (at, kind, node) in events {
        match kind {
            Kind::OldDeleting => {
                deleting.entry(node.as_str()).or_insert(*at);
            }
            Kind::NewReady => {
                if let Some(from) = deleting.get(node.as_str()) {
                    if done.insert(node.as_str()) {
                        downtimes.push(at.saturating_sub(*from));
                    }
                }
            }
            _ => {}
        }
    }
    downtimes.sort();
    downtimes
}

/// The batch gaps: for every deletion after the first wave (the deletions before any new
/// pod was Ready), the time since the most recent "new pod became Ready" before it. The
/// budget frees a slot per Ready pod, so this is how fast a controller uses a free slot.
pub fn batch_gaps(events: &[(Duration, Kind, String)]) -> Vec<Duration> {
    let mut gaps = Vec::new();
    let mut last_ready: Option<Duration> = None;
    for (at, kind, _) in events {
        match kind {
            Kind::NewReady => last_ready = Some(*at),
            Kind::OldDeleting => {
                if let Some(r) = last_ready {
                    gaps.push(*at - r);
                }
            }
            _ => {}
        }
    }
    gaps.sort();
    gaps
}

/// Where the critical path's time went (sums over its pod cycles).
#[derive(Debug, Default, Clone, Copy)]
pub struct CriticalPath {
    pub cycles: usize,
    /// Controller reaction: image change or a new pod Ready -> the next deletion.
    pub controller: Duration,
    /// Old pod deleting -> gone (the simulated stop delay).
    pub stop: Duration,
    /// Old pod gone -> new pod bound (the DaemonSet controller and the scheduler).
    pub recreate: Duration,
    /// New pod bound -> Ready (the simulated start delay).
    pub start: Duration,
}

impl CriticalPath {
    pub fn total(&self) -> Duration {
        self.controller + self.stop + self.recreate + self.start
    }

    /// The controller's share of the critical path, 0..1.
    pub fn controller_share(&self) -> Option<f64> {
        let total = self.total().as_secs_f64();
        (total > 0.0).then(|| self.controller.as_secs_f64() / total)
    }
}

/// The chain that ends at the last Ready: from the last node to become Ready, back through
/// the node whose Ready most recently preceded its deletion (what freed its slot), to a
/// first-wave deletion.
pub fn critical_path(events: &[(Duration, Kind, String)]) -> CriticalPath {
    let mut per_node: BTreeMap<&str, BTreeMap<&'static str, Duration>> = BTreeMap::new();
    for (at, kind, node) in events {
        let stage = match kind {
            Kind::OldDeleting => "deleting",
            Kind::OldGone => "gone",
            Kind::NewCreated => "created",
            Kind::NewBound => "bound",
            Kind::NewReady => "ready",
            // Not on a path that ends at the last Ready.
            Kind::NewFailed => continue,
        };
        if !node.is_empty() {
            per_node
                .entry(node.as_str())
                .or_default()
                .entry(stage)
                .or_insert(*at);
        }
    }
    let at = |node: &str, stage: &str| per_node.get(node).and_then(|s| s.get(stage)).copied();
    let mut path = CriticalPath::default();
    let Some((mut node, _)) = per_node
        .iter()
        .filter_map(|(n, s)| Some((*n, *s.get("ready")?)))
        .max_by_key(|(_, ready)| *ready)
    else {
        return path;
    };
    let mut seen = BTreeSet::new();
    while seen.insert(node) {
        let (Some(deleting), Some(ready)) = (at(node, "deleting"), at(node, "ready")) else {
            break;
        };
        path.cycles += 1;
        let gone = at(node, "gone").unwrap_or(deleting).clamp(deleting, ready);
        let bound = at(node, "bound").unwrap_or(gone).clamp(gone, ready);
        path.stop += gone - deleting;
        path.recreate += bound - gone;
        path.start += ready - bound;
        let before = per_node
            .iter()
            .filter_map(|(n, s)| Some((*n, *s.get("ready")?)))
            .filter(|(_, r)| *r <= deleting)
            .max_by_key(|(_, r)| *r);
        match before {
            Some((prev, prev_ready)) => {
                path.controller += deleting - prev_ready;
                node = prev;
            }
            None => {
                path.controller += deleting; // from the image change
                break;
            }
        }
    }
    path
}
