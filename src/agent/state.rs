//! The agent's view of its node: the pods bound to it, kept current by the watch, served
//! by `GET /pods`, and saved to disk (`persist.rs`) so a restarted agent can answer
//! while cut off.
//!
//! `GET /pods` must be cheap (a benchmark hits it), so every change re-serializes the
//! `PodList` once and the handler only clones the shared bytes; the gzip form is
//! compressed at most once per change, on the first request that asks for it.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, SystemTime};

use axum::body::Bytes;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

/// The file format of `--state-dir/pods.json`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SavedState {
    pub node_name: String,
    /// The last moment the saved pods were known to be current.
    pub current_as_of: Timestamp,
    pub pod_list: k8s_openapi::List<Pod>,
}

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

/// The serialized `PodList` and, once asked for, its gzip form.
#[derive(Debug, Clone)]
pub struct ServedList {
    /// The `v1` `PodList` JSON.
    pub json: Bytes,
    gzip: Arc<OnceLock<Bytes>>,
}

impl ServedList {
    fn new(json: Bytes) -> Self {
        ServedList {
            json,
            gzip: Arc::default(),
        }
    }

    /// The JSON gzip-compressed; computed once per change and shared by every request.
    pub fn gzip(&self) -> Bytes {
        self.gzip.get_or_init(|| gzip(&self.json)).clone()
    }
}

fn gzip(json: &[u8]) -> Bytes {
    use flate2::write::GzEncoder;
    use flate2::Compression;
    let mut encoder = GzEncoder::new(Vec::with_capacity(json.len() / 4), Compression::fast());
    // Writing to a Vec cannot fail.
    encoder
        .write_all(json)
        .expect("gzip into memory never fails");
    Bytes::from(encoder.finish().expect("gzip into memory never fails"))
}

/// What `GET /pods` serves.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub body: ServedList,
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

/// The state as it would be written to disk now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaveCandidate {
    /// Which version of the state this is (see [`NodeState::generation`]).
    pub generation: u64,
    /// The file content ([`SavedState`] as JSON).
    pub bytes: Vec<u8>,
    /// Whether the watch was connected: the saved "current as of" is then `now`, so
    /// the file ages even when nothing else changed.
    pub connected: bool,
}

type Key = (String, String);

struct Inner {
    pods: BTreeMap<Key, Pod>,
    /// `None` until the first list (or a disk load): `GET /pods` then answers 503.
    body: Option<ServedList>,
    source: Source,
    connected: bool,
    current_as_of: SystemTime,
    last_error: Option<String>,
    /// Bumped on every change of what is saved (the pods, the source, the connection),
    /// and only then: the writer compares it to skip writes of an unchanged state.
    generation: u64,
}

/// The shared state; cheap to clone.
#[derive(Clone)]
pub struct NodeState {
    node: Arc<str>,
    inner: Arc<RwLock<Inner>>,
    /// Carries the generation; the writer waits on it.
    changes: watch::Sender<u64>,
}

impl NodeState {
    pub fn new(node: &str) -> Self {
        let (changes, _) = watch::channel(0);
        NodeState {
            node: node.into(),
            inner: Arc::new(RwLock::new(Inner {
                pods: BTreeMap::new(),
                body: None,
                source: Source::Live,
                connected: false,
                current_as_of: SystemTime::UNIX_EPOCH,
                last_error: None,
                generation: 0,
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

    /// The version of what would be saved; changes exactly when the saved content would.
    pub fn generation(&self) -> u64 {
        self.inner.read().expect("state lock poisoned").generation
    }

    /// A complete list from the API server replaces everything (including a disk
    /// state), and means the state is current.
    pub fn replace_all(&self, pods: Vec<Pod>) {
        self.update(|inner| {
            inner.pods = pods.into_iter().map(|p| (key(&p), prune(p))).collect();
            let moved = inner.source != Source::Live || !inner.connected;
            inner.source = Source::Live;
            inner.connected = true;
            inner.last_error = None;
            moved
        });
    }

    pub fn apply(&self, pod: Pod) {
        self.update(|inner| {
            inner.pods.insert(key(&pod), prune(pod));
            false
        });
    }

    pub fn delete(&self, pod: &Pod) {
        self.update(|inner| {
            inner.pods.remove(&key(pod));
            false
        });
    }

    /// The API server answered a watch: the state is current again (unless it was never
    /// listed in this process; then only the list makes it current).
    pub fn set_connected(&self) {
        let mut inner = self.inner.write().expect("state lock poisoned");
        if !inner.connected && inner.source == Source::Live && inner.body.is_some() {
            inner.connected = true;
            inner.last_error = None;
            inner.generation += 1;
            let generation = inner.generation;
            drop(inner);
            self.changes.send_replace(generation);
        }
    }

    /// The API server cannot be reached: keep serving, but say since when.
    pub fn set_disconnected(&self, reason: String) {
        let mut inner = self.inner.write().expect("state lock poisoned");
        let was_connected = inner.connected;
        inner.last_error = Some(reason);
        if was_connected {
            inner.connected = false;
            inner.current_as_of = SystemTime::now();
            // Saved once at the moment of the cut, so a restart knows the true age.
            inner.generation += 1;
            let generation = inner.generation;
            drop(inner);
            self.changes.send_replace(generation);
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
        inner.source = Source::Disk;
        inner.connected = false;
        inner.current_as_of = SystemTime::from(saved.current_as_of);
        inner.body = Some(ServedList::new(serialize(&inner.pods)));
        true
    }

    /// The state to write to disk, or `None` when there is nothing of this process to
    /// save (never synced, or only what was loaded from disk).
    pub fn to_save(&self) -> Option<SaveCandidate> {
        let inner = self.inner.read().expect("state lock poisoned");
        if inner.source == Source::Disk {
            return None;
        }
        let body = &inner.body.as_ref()?.json;
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
        Some(SaveCandidate {
            generation: inner.generation,
            bytes: out,
            connected: inner.connected,
        })
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Applies `change` (which says whether it changed more than the pods) and
    /// re-serializes; the generation moves only if the served list or the connection
    /// did, so a relist that finds the same pods writes nothing.
    fn update(&self, change: impl FnOnce(&mut Inner) -> bool) {
        let mut inner = self.inner.write().expect("state lock poisoned");
        let moved = change(&mut inner);
        let json = serialize(&inner.pods);
        let same_pods = inner.body.as_ref().is_some_and(|old| old.json == json);
        if same_pods && !moved {
            return;
        }
        if !same_pods {
            inner.body = Some(ServedList::new(json));
        }
        inner.generation += 1;
        let generation = inner.generation;
        drop(inner);
        self.changes.send_replace(generation);
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

/// The served list carries no `resourceVersion`: it is assembled from a cache, not a
/// point of the API server's history a client could resume a watch from.
fn serialize(pods: &BTreeMap<Key, Pod>) -> Bytes {
    let list = k8s_openapi::List {
        items: pods.values().cloned().collect(),
        metadata: Default::default(),
    };
    Bytes::from(serde_json::to_vec(&list).expect("a PodList always serializes"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};

    pub(crate) fn pod(ns: &str, name: &str) -> Pod {
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
        serde_json::from_slice(&state.snapshot().unwrap().body.json).unwrap()
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
        state.replace_all(vec![pod("b", "x"), pod("a", "y")]);
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
    fn the_gzip_form_decompresses_to_the_json_and_is_shared() {
        use std::io::Read;
        let state = NodeState::new("edge-a");
        state.replace_all((0..50).map(|i| pod("a", &format!("p{i}"))).collect());
        let snapshot = state.snapshot().unwrap();
        let gz = snapshot.body.gzip();
        assert!(gz.len() < snapshot.body.json.len(), "compresses");
        let mut json = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut json)
            .unwrap();
        assert_eq!(json, snapshot.body.json);
        // Compressed once: a second request gets the same buffer.
        let again = state.snapshot().unwrap().body.gzip();
        assert_eq!(again.as_ptr(), gz.as_ptr());
        // A change makes a new one.
        state.delete(&pod("a", "p0"));
        assert_ne!(state.snapshot().unwrap().body.gzip(), gz);
    }

    #[test]
    fn the_generation_moves_only_when_the_saved_content_does() {
        let state = NodeState::new("edge-a");
        state.replace_all(vec![pod("a", "x")]);
        let listed = state.generation();

        // A relist (after an outage, a 410) that finds the same pods: nothing to save.
        state.replace_all(vec![pod("a", "x")]);
        assert_eq!(state.generation(), listed, "same pods relisted");
        state.apply(pod("a", "x"));
        assert_eq!(state.generation(), listed, "same pod re-applied");
        state.delete(&pod("a", "never-there"));
        assert_eq!(state.generation(), listed, "unknown pod deleted");
        state.set_connected();
        assert_eq!(state.generation(), listed, "already connected");

        state.apply(pod("a", "y"));
        let changed = state.generation();
        assert!(changed > listed, "a new pod");
        state.set_disconnected("cut".into());
        let cut = state.generation();
        assert!(cut > changed, "the cut is saved");
        state.set_disconnected("still cut".into());
        assert_eq!(state.generation(), cut, "still cut: nothing new to save");
        state.set_connected();
        assert!(state.generation() > cut, "back");
        assert_eq!(state.to_save().unwrap().generation, state.generation());
    }

    #[test]
    fn age_is_zero_while_connected_and_grows_once_cut_off() {
        let state = NodeState::new("edge-a");
        state.replace_all(vec![pod("a", "x")]);
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
}
