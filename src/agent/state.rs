//! The agent's view of its node: the pods bound to it, kept current by the watch, served
//! by `GET /pods`, and saved to disk so a restarted agent can answer while cut off.
//!
//! `GET /pods` must be cheap (a benchmark hits it), so every change re-serializes the
//! `PodList` once and the handler only clones the shared bytes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use axum::body::Bytes;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

/// Where the served pods came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// This process listed and watched them from the API server.
    Live,
    /// Loaded from `--state-dir`; the API server has not been reached since the start.
    Disk,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Live => "live",
            Source::Disk => "disk",
        }
    }
}

/// What `GET /pods` serves.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The `v1` `PodList` JSON.
    pub body: Bytes,
    pub source: Source,
    /// Whether the watch is connected, i.e. the state is current now.
    pub connected: bool,
    /// The last moment the state was known to be current (`now` while connected).
    pub current_as_of: SystemTime,
    /// Why the API server is not reachable, when it is not.
    pub last_error: Option<String>,
}

impl Snapshot {
    /// How old the state is: zero while the watch is connected, else the time since the
    /// last moment it was known current.
    pub fn age(&self, now: SystemTime) -> Duration {
        if self.connected {
            Duration::ZERO
        } else {
            now.duration_since(self.current_as_of).unwrap_or_default()
        }
    }
}

type Key = (String, String);

struct Inner {
    pods: BTreeMap<Key, Pod>,
    resource_version: Option<String>,
    /// `None` until the first list (or a disk load): `GET /pods` then answers 503.
    body: Option<Bytes>,
    source: Source,
    connected: bool,
    current_as_of: SystemTime,
    last_error: Option<String>,
}

/// The shared state; cheap to clone.
#[derive(Clone)]
pub struct NodeState {
    node: Arc<str>,
    inner: Arc<RwLock<Inner>>,
    /// Bumped on every change worth saving; the persister waits on it.
    changes: watch::Sender<u64>,
}

impl NodeState {
    pub fn new(node: &str) -> Self {
        let (changes, _) = watch::channel(0);
        NodeState {
            node: node.into(),
            inner: Arc::new(RwLock::new(Inner {
                pods: BTreeMap::new(),
                resource_version: None,
                body: None,
                source: Source::Live,
                connected: false,
                current_as_of: SystemTime::UNIX_EPOCH,
                last_error: None,
            })),
            changes,
        }
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    /// What `GET /pods` serves, or `None` while there is nothing to serve.
    pub fn snapshot(&self) -> Option<Snapshot> {
        let inner = self.inner.read().expect("state lock poisoned");
        let body = inner.body.clone()?;
        Some(Snapshot {
            body,
            source: inner.source,
            connected: inner.connected,
            current_as_of: if inner.connected {
                SystemTime::now()
            } else {
                inner.current_as_of
            },
            last_error: inner.last_error.clone(),
        })
    }

    /// The last reason the API server could not be reached, if it cannot be now.
    pub fn last_error(&self) -> Option<String> {
        let inner = self.inner.read().expect("state lock poisoned");
        (!inner.connected)
            .then(|| inner.last_error.clone())
            .flatten()
    }

    /// A fresh list from the API server replaces everything (including a disk state).
    pub fn replace_all(&self, pods: Vec<Pod>, resource_version: Option<String>) {
        self.update(|inner| {
            inner.pods = pods.into_iter().map(|p| (key(&p), prune(p))).collect();
            inner.resource_version = resource_version;
            inner.source = Source::Live;
            inner.connected = true;
            inner.last_error = None;
        });
    }

    pub fn apply(&self, pod: Pod) {
        self.update(|inner| {
            inner.resource_version = pod.metadata.resource_version.clone();
            inner.pods.insert(key(&pod), prune(pod));
        });
    }

    pub fn delete(&self, pod: &Pod) {
        self.update(|inner| {
            inner.resource_version = pod.metadata.resource_version.clone();
            inner.pods.remove(&key(pod));
        });
    }

    /// The watch is open again: the state is current.
    pub fn set_connected(&self) {
        let mut inner = self.inner.write().expect("state lock poisoned");
        if !inner.connected && inner.source == Source::Live && inner.body.is_some() {
            inner.connected = true;
            inner.last_error = None;
            drop(inner);
            self.changes.send_modify(|v| *v += 1);
        }
    }

    /// The API server cannot be reached: keep serving, but say since when.
    pub fn set_disconnected(&self, reason: String) {
        let mut inner = self.inner.write().expect("state lock poisoned");
        let was_connected = inner.connected;
        if was_connected {
            inner.connected = false;
            inner.current_as_of = SystemTime::now();
        }
        inner.last_error = Some(reason);
        drop(inner);
        // Save once at the moment of the cut, so a restart knows the true age.
        if was_connected {
            self.changes.send_modify(|v| *v += 1);
        }
    }

    /// Seeds the state from disk, unless the API server has already answered.
    pub fn load_from_disk(&self, saved: SavedState) -> bool {
        if saved.node_name != *self.node {
            tracing::warn!(saved_for = %saved.node_name, node = %self.node,
                "ignoring saved state of another node");
            return false;
        }
        let mut inner = self.inner.write().expect("state lock poisoned");
        if inner.body.is_some() {
            return false;
        }
        inner.pods = saved
            .pod_list
            .items
            .into_iter()
            .map(|p| (key(&p), prune(p)))
            .collect();
        inner.resource_version = saved.pod_list.metadata.resource_version;
        inner.source = Source::Disk;
        inner.connected = false;
        inner.current_as_of = SystemTime::from(saved.current_as_of);
        inner.body = Some(serialize(&inner.pods, &inner.resource_version));
        true
    }

    /// The state to write to disk, or `None` when there is nothing new to save (never
    /// synced, or only what was loaded from disk).
    pub fn to_save(&self) -> Option<Vec<u8>> {
        let inner = self.inner.read().expect("state lock poisoned");
        if inner.source == Source::Disk {
            return None;
        }
        let body = inner.body.as_ref()?;
        let as_of = if inner.connected {
            SystemTime::now()
        } else {
            inner.current_as_of
        };
        let as_of = Timestamp::try_from(as_of).unwrap_or(Timestamp::UNIX_EPOCH);
        // Built around the already serialized PodList instead of serializing it again.
        let mut out = Vec::with_capacity(body.len() + 128);
        out.extend_from_slice(b"{\"nodeName\":");
        out.extend_from_slice(&serde_json::to_vec(&*self.node).unwrap_or_default());
        out.extend_from_slice(b",\"currentAsOf\":");
        out.extend_from_slice(&serde_json::to_vec(&as_of.to_string()).unwrap_or_default());
        out.extend_from_slice(b",\"podList\":");
        out.extend_from_slice(body);
        out.push(b'}');
        Some(out)
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn update(&self, change: impl FnOnce(&mut Inner)) {
        let mut inner = self.inner.write().expect("state lock poisoned");
        change(&mut inner);
        inner.body = Some(serialize(&inner.pods, &inner.resource_version));
        drop(inner);
        self.changes.send_modify(|v| *v += 1);
    }
}

/// The file format of `--state-dir/pods.json`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SavedState {
    pub node_name: String,
    /// The last moment the saved pods were known to be current.
    pub current_as_of: Timestamp,
    pub pod_list: k8s_openapi::List<Pod>,
}

pub fn state_file(dir: &Path) -> PathBuf {
    dir.join("pods.json")
}

/// Reads the saved state; a missing or unreadable file is "no state" (logged).
pub fn load(dir: &Path) -> Option<SavedState> {
    let path = state_file(dir);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read the saved state");
            return None;
        }
    };
    match serde_json::from_slice(&bytes) {
        Ok(saved) => Some(saved),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "ignoring a corrupt saved state");
            None
        }
    }
}

/// Atomic write: a reader (or a crash) sees the old file or the new one, never half.
pub fn save(dir: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(".pods.json.tmp");
    {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
    }
    std::fs::rename(&tmp, state_file(dir))
}

/// Saves after every burst of changes (debounced), and refreshes the saved timestamp
/// while connected so a restart computes an honest age. Runs until dropped.
pub async fn persist(state: NodeState, dir: PathBuf, debounce: Duration, refresh: Duration) {
    let mut changes = state.subscribe();
    loop {
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
                tokio::time::sleep(debounce).await;
                changes.borrow_and_update();
            }
            _ = tokio::time::sleep(refresh) => {
                if !state.snapshot().is_some_and(|s| s.connected) {
                    continue;
                }
            }
        }
        let Some(bytes) = state.to_save() else {
            continue;
        };
        let dir = dir.clone();
        match tokio::task::spawn_blocking(move || save(&dir, &bytes)).await {
            Ok(Ok(())) => tracing::debug!("pod state saved"),
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot save the pod state"),
            Err(e) => tracing::warn!(error = %e, "saving the pod state panicked"),
        }
    }
}

fn key(pod: &Pod) -> Key {
    (
        pod.metadata.namespace.clone().unwrap_or_default(),
        pod.metadata.name.clone().unwrap_or_default(),
    )
}

/// managedFields are large and useless to a node operator.
fn prune(mut pod: Pod) -> Pod {
    pod.metadata.managed_fields = None;
    pod
}

fn serialize(pods: &BTreeMap<Key, Pod>, resource_version: &Option<String>) -> Bytes {
    let list = k8s_openapi::List {
        items: pods.values().cloned().collect(),
        metadata: ListMeta {
            resource_version: resource_version.clone(),
            ..Default::default()
        },
    };
    Bytes::from(serde_json::to_vec(&list).expect("a PodList always serializes"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};

    fn pod(ns: &str, name: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                resource_version: Some("7".into()),
                managed_fields: Some(vec![ManagedFieldsEntry::default()]),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn served(state: &NodeState) -> serde_json::Value {
        serde_json::from_slice(&state.snapshot().unwrap().body).unwrap()
    }

    #[test]
    fn nothing_is_served_before_the_first_list() {
        let state = NodeState::new("edge-a");
        assert!(state.snapshot().is_none());
        assert!(state.to_save().is_none());
    }

    #[test]
    fn serves_a_v1_pod_list_sorted_without_managed_fields() {
        let state = NodeState::new("edge-a");
        state.replace_all(vec![pod("b", "x"), pod("a", "y")], Some("5".into()));
        state.apply(pod("a", "z"));
        let list = served(&state);
        assert_eq!(list["apiVersion"], "v1");
        assert_eq!(list["kind"], "PodList");
        let names: Vec<&str> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["y", "z", "x"], "sorted by namespace, then name");
        assert!(list["items"][0]["metadata"].get("managedFields").is_none());

        state.delete(&pod("a", "y"));
        assert_eq!(served(&state)["items"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn age_is_zero_while_connected_and_grows_once_cut_off() {
        let state = NodeState::new("edge-a");
        state.replace_all(vec![pod("a", "x")], None);
        let snapshot = state.snapshot().unwrap();
        assert!(snapshot.connected);
        assert_eq!(
            snapshot.age(SystemTime::now() + Duration::from_secs(60)),
            Duration::ZERO
        );

        state.set_disconnected("connection refused".into());
        let snapshot = state.snapshot().unwrap();
        assert!(!snapshot.connected);
        let later = snapshot.current_as_of + Duration::from_secs(42);
        assert_eq!(snapshot.age(later), Duration::from_secs(42));
        assert_eq!(state.last_error().as_deref(), Some("connection refused"));

        state.set_connected();
        assert!(state.snapshot().unwrap().connected);
        assert_eq!(state.last_error(), None);
    }

    #[test]
    fn a_saved_state_round_trips_and_is_served_as_disk() {
        let dir = std::env::temp_dir().join(format!("rollgate-agent-state-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let live = NodeState::new("edge-a");
        live.replace_all(vec![pod("a", "x")], Some("9".into()));
        live.set_disconnected("gone".into());
        let cut_at = live.snapshot().unwrap().current_as_of;
        save(&dir, &live.to_save().unwrap()).unwrap();

        let restarted = NodeState::new("edge-a");
        assert!(restarted.load_from_disk(load(&dir).unwrap()));
        let snapshot = restarted.snapshot().unwrap();
        assert_eq!(snapshot.source, Source::Disk);
        assert!(!snapshot.connected);
        // The saved timestamp has second precision or better: the age survives restarts.
        let drift = cut_at
            .duration_since(snapshot.current_as_of)
            .unwrap_or_else(|e| e.duration());
        assert!(drift < Duration::from_secs(1), "drift {drift:?}");
        assert_eq!(served(&restarted)["items"][0]["metadata"]["name"], "x");
        assert!(
            restarted.to_save().is_none(),
            "a disk state is not saved back"
        );

        // A later list replaces the disk state.
        restarted.replace_all(vec![], None);
        assert_eq!(restarted.snapshot().unwrap().source, Source::Live);
        assert!(served(&restarted)["items"].as_array().unwrap().is_empty());

        let other_node = NodeState::new("edge-b");
        assert!(!other_node.load_from_disk(load(&dir).unwrap()));
        assert!(other_node.snapshot().is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_corrupt_state_file_is_ignored() {
        let dir =
            std::env::temp_dir().join(format!("rollgate-agent-corrupt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(state_file(&dir), b"{not json").unwrap();
        assert!(load(&dir).is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
