//! `rollgate.io/on-failure: rollback`: which revision a failed one goes back to, and the
//! record that keeps rollgate from rolling forward to it again. Pure: the DaemonSet and
//! its ControllerRevisions in, a target and the record's next value out; the controller
//! writes them (`controller::rollback`).
//!
//! The rollback is what `kubectl rollout undo daemonset` does: the DaemonSet's template
//! becomes the one stored in an earlier ControllerRevision, and the native controller
//! then numbers that revision newest again. rollgate goes back to the newest revision
//! that is neither the failed one nor one it rolled back from before, and records the
//! failed revision's hash in `rollgate.io/rolled-back-from` on the DaemonSet.
//!
//! A revision in the record is never rolled out by rollgate again: when the template
//! comes back to it (a GitOps tool re-applying what is in Git, a person re-running an old
//! pipeline), the rollout holds with a Warning, and the pods stay where they are. Taking
//! the hash out of the record is how an operator says "try it again".
//!
//! The record is bounded ([`RECORD_KEPT`] hashes, newest last): the native controller
//! prunes old revisions (`revisionHistoryLimit`, 10 by default), and a hash whose
//! revision is gone could only come back as a new revision with the same hash, which a
//! record of the last few still covers.
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};

use crate::names::{CONTROLLER_REVISION_HASH_LABEL, ROLLED_BACK_FROM_ANNOTATION};
use crate::object::{annotation, controller_uid, label};

/// How many rolled-back-from hashes the record keeps.
pub const RECORD_KEPT: usize = 10;

/// One ControllerRevision of the DaemonSet, as the decision reads it (the template it
/// stores is read by the controller only when rolling back to it: the watch drops it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevisionRef {
    /// The ControllerRevision's name, which the controller reads its template by.
    pub name: String,
    /// Its `controller-revision-hash` label: what pods name it by.
    pub hash: String,
    /// Its `.revision`: the higher, the newer.
    pub number: i64,
}

/// The hashes in `rollgate.io/rolled-back-from`, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RolledBackFrom(Vec<String>);

impl RolledBackFrom {
    /// The DaemonSet's record: comma-separated hashes, blanks ignored. There is no bad
    /// value: any word may be a hash, and an unknown one matches no revision.
    pub fn of(daemonset: &DaemonSet) -> RolledBackFrom {
        let raw = annotation(&daemonset.metadata, ROLLED_BACK_FROM_ANNOTATION).unwrap_or("");
        RolledBackFrom(
            raw.split(',')
                .map(str::trim)
                .filter(|hash| !hash.is_empty())
                .map(str::to_string)
                .collect(),
        )
    }

    pub fn contains(&self, hash: &str) -> bool {
        self.0.iter().any(|h| h == hash)
    }

    /// The record with `hash` added (last, once), keeping the newest [`RECORD_KEPT`]:
    /// the annotation's next value.
    pub fn with(&self, hash: &str) -> String {
        let mut hashes: Vec<&str> = self
            .0
            .iter()
            .map(String::as_str)
            .filter(|h| *h != hash)
            .collect();
        hashes.push(hash);
        let skip = hashes.len().saturating_sub(RECORD_KEPT);
        hashes[skip..].join(",")
    }
}

/// The DaemonSet's own ControllerRevisions (controller ownerRef to its UID) that carry a
/// hash, newest first.
pub fn owned_revisions<'a>(
    daemonset: &DaemonSet,
    revisions: impl IntoIterator<Item = &'a ControllerRevision>,
) -> Vec<RevisionRef> {
    let Some(uid) = daemonset.metadata.uid.as_deref() else {
        return Vec::new();
    };
    let mut owned: Vec<RevisionRef> = revisions
        .into_iter()
        .filter(|r| controller_uid(&r.metadata) == Some(uid))
        .filter_map(|r| {
            Some(RevisionRef {
                name: r.metadata.name.clone()?,
                hash: label(&r.metadata, CONTROLLER_REVISION_HASH_LABEL)
                    .filter(|h| !h.is_empty())?
                    .to_string(),
                number: r.revision.unwrap_or(0),
            })
        })
        .collect();
    owned.sort_by(|a, b| (b.number, &b.name).cmp(&(a.number, &a.name)));
    owned
}

/// Where a failed revision goes back to: the newest of `revisions` (newest first) that is
/// neither `failed` nor in the record. `None`: there is none (the DaemonSet's first
/// revision failed, or every earlier one was rolled back from).
pub fn rollback_target<'a>(
    revisions: &'a [RevisionRef],
    failed: &str,
    record: &RolledBackFrom,
) -> Option<&'a RevisionRef> {
    revisions
        .iter()
        .find(|r| r.hash != failed && !record.contains(&r.hash))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{revision, DaemonSetBuilder};

    fn refs(pairs: &[(&str, i64)]) -> Vec<RevisionRef> {
        pairs
            .iter()
            .map(|(hash, number)| RevisionRef {
                name: format!("agent-{hash}"),
                hash: hash.to_string(),
                number: *number,
            })
            .collect()
    }

    #[test]
    fn the_target_is_the_newest_revision_neither_failed_nor_rolled_back_from() {
        let newest_first = refs(&[("c", 3), ("b", 2), ("a", 1)]);
        let none = RolledBackFrom::default();
        assert_eq!(
            rollback_target(&newest_first, "c", &none).unwrap().hash,
            "b"
        );
        let b_failed_before = RolledBackFrom(vec!["b".into()]);
        assert_eq!(
            rollback_target(&newest_first, "c", &b_failed_before)
                .unwrap()
                .hash,
            "a"
        );
        let all = RolledBackFrom(vec!["b".into(), "a".into()]);
        assert_eq!(rollback_target(&newest_first, "c", &all), None);
        assert_eq!(
            rollback_target(&refs(&[("a", 1)]), "a", &none),
            None,
            "a first revision has nothing to go back to"
        );
    }

    #[test]
    fn the_record_reads_blanks_away_adds_once_and_keeps_the_newest() {
        let ds = DaemonSetBuilder::new("agent")
            .rolled_back_from(" b, ,c ")
            .build();
        let record = RolledBackFrom::of(&ds);
        assert_eq!(record, RolledBackFrom(vec!["b".into(), "c".into()]));
        assert!(record.contains("c") && !record.contains("a"));
        assert_eq!(record.with("d"), "b,c,d");
        assert_eq!(
            record.with("b"),
            "c,b",
            "a hash again moves to the end, once"
        );
        let full = RolledBackFrom((0..RECORD_KEPT).map(|i| format!("h{i}")).collect());
        let next = full.with("new");
        assert_eq!(next.split(',').count(), RECORD_KEPT);
        assert!(next.ends_with(",new") && !next.contains("h0,"), "{next}");
        let absent = RolledBackFrom::of(&DaemonSetBuilder::new("agent").build());
        assert_eq!(absent.with("a"), "a");
    }

    #[test]
    fn only_the_daemonsets_own_revisions_with_a_hash_count_newest_first() {
        let ds = DaemonSetBuilder::new("agent").build();
        let other = DaemonSetBuilder::new("other").build();
        let mut hashless = revision(&ds, "x", 9);
        hashless.metadata.labels = None;
        let all = [
            revision(&ds, "a", 1),
            revision(&ds, "c", 3),
            revision(&other, "z", 7),
            hashless,
            revision(&ds, "b", 2),
        ];
        let owned = owned_revisions(&ds, &all);
        let hashes: Vec<&str> = owned.iter().map(|r| r.hash.as_str()).collect();
        assert_eq!(hashes, ["c", "b", "a"]);
        assert_eq!(owned[0].name, "agent-c");
    }
}
