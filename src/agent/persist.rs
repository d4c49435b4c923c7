//! The state file `--state-dir/pods.json`: what a restarted agent serves until it
//! reaches the API server.
//!
//! Edge nodes often run on SD cards, so the agent writes rarely: only when the state
//! changed (the pods, or the connection to the API server), at most once per
//! `--state-write-interval`, and once more at shutdown. Every write is atomic (a unique
//! temporary file in the same directory, fsync, rename, fsync of the directory): a
//! reader, or a power cut, sees the old file or the new one, never a mix. One task owns
//! all writes, including the last one at shutdown, so two writes never race.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::state::{NodeState, SavedState};

/// A burst of changes (a relist, a rollout on the node) is written once.
const DEBOUNCE: Duration = Duration::from_millis(500);
/// Owner read/write only: the pod list can carry environment values and annotations.
const FILE_MODE: u32 = 0o600;
const DIR_MODE: u32 = 0o700;

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

/// Atomic, durable write of `bytes` as the state file, mode 0600.
pub fn save(dir: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)?;
    // Unique name in the same directory (so the rename stays on one filesystem); the
    // file is created 0600 and removed again if anything below fails.
    let mut tmp = tempfile::Builder::new()
        .prefix(".pods.json.")
        .suffix(".tmp")
        .permissions(std::fs::Permissions::from_mode(FILE_MODE))
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(state_file(dir)).map_err(|e| e.error)?;
    // The rename itself is durable only once the directory entry is on disk.
    std::fs::File::open(dir)?.sync_all()
}

/// The one writer of the state file. Dropping it stops the task without a last write;
/// [`StateWriter::finish`] makes the last write and waits for it.
pub struct StateWriter {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl StateWriter {
    /// Starts the writer: after a change it waits [`DEBOUNCE`], and at least `interval`
    /// since its previous write, then writes if the state still differs from the file.
    pub fn spawn(state: NodeState, dir: PathBuf, interval: Duration) -> Self {
        let (stop, stopped) = oneshot::channel();
        // Subscribed here, not in the task, so no change between now and the task's
        // first poll is missed.
        let changes = state.subscribe();
        let task = tokio::spawn(write_loop(state, changes, dir, interval, stopped));
        StateWriter {
            stop: Some(stop),
            task,
        }
    }

    /// Stops the writer after a last write of anything not yet saved, and of the "current
    /// as of" time if the watch is connected (so a restart starts with an honest age).
    pub async fn finish(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Err(e) = (&mut self.task).await {
            tracing::warn!(error = %e, "the state writer failed");
        }
    }
}

impl Drop for StateWriter {
    fn drop(&mut self) {
        if self.stop.is_some() {
            self.task.abort();
        }
    }
}

/// What the writer remembers of the file.
#[derive(Debug, Default)]
struct Written {
    /// The generation in the file (`None`: nothing written by this process).
    generation: Option<u64>,
    at: Option<Instant>,
}

async fn write_loop(
    state: NodeState,
    mut changes: watch::Receiver<u64>,
    dir: PathBuf,
    interval: Duration,
    mut stopped: oneshot::Receiver<()>,
) {
    let mut written = Written::default();
    // Something may need writing without a change notification: the state as it was
    // at the start, or after a failed write (retried after `interval`).
    let mut pending = true;
    loop {
        if !pending {
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { break },
                _ = &mut stopped => break,
            }
        }
        let earliest = written.at.map_or(Instant::now(), |at| at + interval);
        let due = earliest.max(Instant::now() + DEBOUNCE);
        tokio::select! {
            _ = tokio::time::sleep_until(due) => {}
            _ = &mut stopped => break,
        }
        changes.borrow_and_update();
        pending = !write_if_changed(&state, &dir, &mut written, false).await;
    }
    write_if_changed(&state, &dir, &mut written, true).await;
}

/// Writes the state unless the file already holds this generation (at shutdown, also
/// when connected: the saved "current as of" would otherwise be the last write's time).
/// Returns false if a write failed.
async fn write_if_changed(
    state: &NodeState,
    dir: &Path,
    written: &mut Written,
    at_shutdown: bool,
) -> bool {
    let Some(candidate) = state.to_save() else {
        return true;
    };
    let unchanged = written.generation == Some(candidate.generation);
    if unchanged && !(at_shutdown && candidate.connected) {
        return true;
    }
    let target = dir.to_path_buf();
    let bytes = candidate.bytes;
    match tokio::task::spawn_blocking(move || save(&target, &bytes)).await {
        Ok(Ok(())) => {
            tracing::debug!(generation = candidate.generation, "pod state saved");
            written.generation = Some(candidate.generation);
            written.at = Some(Instant::now());
            true
        }
        Ok(Err(e)) => {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot save the pod state");
            written.at = Some(Instant::now());
            false
        }
        Err(e) => {
            tracing::warn!(error = %e, "saving the pod state panicked");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::state::Source;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::time::SystemTime;

    fn pod(ns: &str, name: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn served(state: &NodeState) -> serde_json::Value {
        serde_json::from_slice(&state.snapshot().unwrap().body.json).unwrap()
    }

    fn files_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_saved_state_round_trips_and_is_served_as_disk() {
        let dir = tempfile::tempdir().unwrap();
        let live = NodeState::new("edge-a");
        live.replace_all(vec![pod("a", "x")]);
        live.set_disconnected("gone".into());
        let cut_at = live.snapshot().unwrap().current_as_of;
        save(dir.path(), &live.to_save().unwrap().bytes).unwrap();

        let restarted = NodeState::new("edge-a");
        assert!(restarted.load_from_disk(load(dir.path()).unwrap()));
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
        restarted.replace_all(vec![]);
        assert_eq!(restarted.snapshot().unwrap().source, Source::Live);
        assert!(served(&restarted)["items"].as_array().unwrap().is_empty());

        let other_node = NodeState::new("edge-b");
        assert!(!other_node.load_from_disk(load(dir.path()).unwrap()));
        assert!(other_node.snapshot().is_none());
    }

    #[test]
    fn a_corrupt_state_file_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(state_file(dir.path()), b"{not json").unwrap();
        assert!(load(dir.path()).is_none());
    }

    #[test]
    fn the_state_file_is_private_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let state_dir = dir.path().join("new/state");
        // An older file readable by everyone is replaced by a private one.
        std::fs::create_dir_all(&state_dir).unwrap();
        std::fs::write(state_file(&state_dir), b"old").unwrap();
        std::fs::set_permissions(
            state_file(&state_dir),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        save(&state_dir, b"{\"new\":true}").unwrap();
        let meta = std::fs::metadata(state_file(&state_dir)).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600);
        assert_eq!(
            std::fs::read(state_file(&state_dir)).unwrap(),
            b"{\"new\":true}"
        );
        assert_eq!(files_in(&state_dir), ["pods.json"]);

        // A directory the agent creates is private too.
        let fresh = dir.path().join("fresh");
        save(&fresh, b"{}").unwrap();
        assert_eq!(std::fs::metadata(&fresh).unwrap().mode() & 0o777, 0o700);
    }

    #[test]
    fn a_failed_write_leaves_what_was_there_and_no_temporary_file() {
        // The rename must fail: a non-empty directory sits where the file should be
        // (a read-only directory would not do: the tests may run as root).
        let dir = tempfile::tempdir().unwrap();
        let occupied = state_file(dir.path()).join("occupied");
        std::fs::create_dir_all(&occupied).unwrap();
        assert!(save(dir.path(), b"{\"new\":true}").is_err());
        assert_eq!(
            files_in(dir.path()),
            ["pods.json"],
            "no temporary file left"
        );
        assert!(occupied.is_dir(), "what was there is untouched");
    }

    /// A reader running alongside many writes of two different sizes only ever sees
    /// one complete version or the other.
    #[test]
    fn a_reader_never_sees_a_partial_file() {
        let dir = tempfile::tempdir().unwrap();
        let small = serde_json::to_vec(&serde_json::json!({"v": "small"})).unwrap();
        let large = serde_json::to_vec(&serde_json::json!({"v": "x".repeat(256 * 1024)})).unwrap();
        save(dir.path(), &small).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let (path, stop) = (state_file(dir.path()), stop.clone());
            let (small, large) = (small.clone(), large.clone());
            std::thread::spawn(move || {
                let mut reads = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let seen = std::fs::read(&path).unwrap();
                    assert!(
                        seen == small || seen == large,
                        "partial: {} bytes",
                        seen.len()
                    );
                    reads += 1;
                }
                reads
            })
        };
        for i in 0..100 {
            save(dir.path(), if i % 2 == 0 { &large } else { &small }).unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
        assert_eq!(files_in(dir.path()), ["pods.json"]);
    }

    fn inode(dir: &Path) -> Option<u64> {
        std::fs::metadata(state_file(dir)).ok().map(|m| m.ino())
    }

    /// Lets `virtual_time` pass for the writer. The write itself runs on a real blocking
    /// thread, which paused time does not wait for: give it real time too.
    async fn settle(virtual_time: Duration) {
        let step = Duration::from_millis(100);
        let mut passed = Duration::ZERO;
        while passed < virtual_time {
            tokio::time::sleep(step).await;
            std::thread::sleep(Duration::from_millis(5));
            tokio::task::yield_now().await;
            passed += step;
        }
    }

    /// Lets `virtual_time` pass, then waits (real time only, bounded) until the file
    /// has been replaced.
    async fn next_write(dir: &Path, before: Option<u64>, virtual_time: Duration) -> u64 {
        settle(virtual_time).await;
        for _ in 0..2_000 {
            if let Some(now) = inode(dir).filter(|now| Some(*now) != before) {
                return now;
            }
            std::thread::sleep(Duration::from_millis(5));
            tokio::task::yield_now().await;
        }
        panic!("no write after {virtual_time:?}");
    }

    /// Past the debounce.
    const SOON: Duration = Duration::from_millis(600);

    fn writer(state: &NodeState, dir: &Path) -> StateWriter {
        StateWriter::spawn(state.clone(), dir.to_path_buf(), Duration::from_secs(10))
    }

    /// Every write renames a new file into place, so the inode tells writes apart.
    #[tokio::test(start_paused = true)]
    async fn the_writer_writes_changes_only_and_at_most_once_per_interval() {
        let dir = tempfile::tempdir().unwrap();
        let state = NodeState::new("edge-a");
        let writer = writer(&state, dir.path());

        // The first list is written right away (after the debounce).
        state.replace_all(vec![pod("a", "x")]);
        let first = next_write(dir.path(), None, SOON).await;

        // The same pods again (a relist): nothing is written, even much later.
        state.replace_all(vec![pod("a", "x")]);
        settle(Duration::from_secs(30)).await;
        assert_eq!(
            inode(dir.path()),
            Some(first),
            "unchanged state not rewritten"
        );

        // A change is written; the next one waits for the interval.
        state.apply(pod("a", "y"));
        let second = next_write(dir.path(), Some(first), SOON).await;
        state.apply(pod("a", "z"));
        settle(Duration::from_secs(9)).await;
        assert_eq!(inode(dir.path()), Some(second), "rate limited");
        let third = next_write(dir.path(), Some(second), Duration::from_millis(1_500)).await;
        assert_eq!(load(dir.path()).unwrap().pod_list.items.len(), 3);

        // Cut off, then stopped before the interval is over: the last write records the
        // cut, with the time of the cut.
        state.set_disconnected("gone".into());
        let cut_at = state.snapshot().unwrap().current_as_of;
        writer.finish().await;
        assert_ne!(inode(dir.path()), Some(third), "final write at shutdown");
        let saved = load(dir.path()).unwrap();
        let saved_at = SystemTime::from(saved.current_as_of);
        let drift = cut_at
            .duration_since(saved_at)
            .unwrap_or_else(|e| e.duration());
        assert!(drift < Duration::from_millis(1), "{drift:?}");
        assert_eq!(files_in(dir.path()), ["pods.json"]);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_writes_only_what_the_file_lacks() {
        // Cut off and already saved: nothing to write at shutdown.
        let dir = tempfile::tempdir().unwrap();
        let state = NodeState::new("edge-a");
        let w = writer(&state, dir.path());
        state.replace_all(vec![pod("a", "x")]);
        state.set_disconnected("gone".into());
        let saved = next_write(dir.path(), None, SOON).await;
        settle(Duration::from_secs(15)).await;
        assert_eq!(inode(dir.path()), Some(saved));
        state.set_disconnected("still gone".into());
        w.finish().await;
        assert_eq!(inode(dir.path()), Some(saved), "nothing new to save");

        // Connected: the saved "current as of" is refreshed at shutdown, even though the
        // pods did not change, so a restart does not overstate the age.
        let dir = tempfile::tempdir().unwrap();
        let state = NodeState::new("edge-a");
        let w = writer(&state, dir.path());
        state.replace_all(vec![pod("a", "x")]);
        let saved = next_write(dir.path(), None, SOON).await;
        let before = load(dir.path()).unwrap().current_as_of;
        std::thread::sleep(Duration::from_millis(20));
        w.finish().await;
        assert_ne!(inode(dir.path()), Some(saved), "refreshed at shutdown");
        assert!(load(dir.path()).unwrap().current_as_of > before);
    }

    /// Nothing listed in this process: the writer never touches a file from before.
    #[tokio::test(start_paused = true)]
    async fn a_state_loaded_from_disk_is_not_written_back() {
        let dir = tempfile::tempdir().unwrap();
        let live = NodeState::new("edge-a");
        live.replace_all(vec![pod("a", "x")]);
        live.set_disconnected("gone".into());
        save(dir.path(), &live.to_save().unwrap().bytes).unwrap();
        let saved = inode(dir.path());

        let restarted = NodeState::new("edge-a");
        assert!(restarted.load_from_disk(load(dir.path()).unwrap()));
        let w = writer(&restarted, dir.path());
        restarted.set_disconnected("still gone".into());
        settle(Duration::from_secs(15)).await;
        w.finish().await;
        assert_eq!(inode(dir.path()), saved);
    }
}
