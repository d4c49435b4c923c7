//! Which pods of a DaemonSet are up to date: the current template revision.
//!
//! We never recompute the template hash: it depends on the Go library version and on
//! `status.collisionCount`, so we read the hash the native controller wrote on its
//! newest ControllerRevision instead.

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};

use crate::names::{
    CONTROLLER_REVISION_HASH_LABEL, POD_TEMPLATE_GENERATION_LABEL, TEMPLATE_GENERATION_ANNOTATION,
};
use crate::object::{controller_uid, label, PodFacts};

/// The DaemonSet's current template revision, as far as it can be known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentRevision {
    /// `controller-revision-hash` of the newest owned ControllerRevision.
    pub hash: Option<String>,
    /// The DaemonSet's `deprecated.daemonset.template.generation` annotation.
    pub template_generation: Option<String>,
}

impl CurrentRevision {
    /// Reads the current revision; `None` when neither the hash nor the generation is
    /// known (e.g. the native controller has not written a ControllerRevision yet), in
    /// which case no pod can be judged and planners must wait.
    pub fn of<'a>(
        daemonset: &DaemonSet,
        revisions: impl IntoIterator<Item = &'a ControllerRevision>,
    ) -> Option<Self> {
        let hash = newest_owned_revision(daemonset, revisions)
            .and_then(|revision| label(&revision.metadata, CONTROLLER_REVISION_HASH_LABEL))
            .filter(|hash| !hash.is_empty())
            .map(str::to_string);
        let template_generation = daemonset
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(TEMPLATE_GENERATION_ANNOTATION))
            .filter(|generation| !generation.is_empty())
            .cloned();
        if hash.is_none() && template_generation.is_none() {
            return None;
        }
        Some(Self {
            hash,
            template_generation,
        })
    }

    /// What names the revision: its hash, or (fallback) the template generation; `of`
    /// makes a revision only when one of them is known.
    pub fn id(&self) -> &str {
        self.hash
            .as_deref()
            .or(self.template_generation.as_deref())
            .unwrap_or_default()
    }

    /// A pod is up to date when its hash label matches the current hash, or (fallback)
    /// its `pod-template-generation` label matches the DaemonSet's template generation.
    pub fn is_pod_updated(&self, pod: &impl PodFacts) -> bool {
        let matches = |expected: &Option<String>, key: &str| {
            expected
                .as_deref()
                .is_some_and(|expected| pod.label(key) == Some(expected))
        };
        matches(&self.hash, CONTROLLER_REVISION_HASH_LABEL)
            || matches(&self.template_generation, POD_TEMPLATE_GENERATION_LABEL)
    }
}

/// The DaemonSet's newest ControllerRevision: highest `.revision` among those whose
/// controller ownerRef is the DaemonSet's UID. A template reverted to an earlier
/// revision gets a new, higher number, so the highest number always wins. Ties (not
/// expected from the API server) go to the greater name, for determinism.
pub fn newest_owned_revision<'a>(
    daemonset: &DaemonSet,
    revisions: impl IntoIterator<Item = &'a ControllerRevision>,
) -> Option<&'a ControllerRevision> {
    let ds_uid = daemonset.metadata.uid.as_deref()?;
    revisions
        .into_iter()
        .filter(|revision| controller_uid(&revision.metadata) == Some(ds_uid))
        .max_by(|a, b| (a.revision, &a.metadata.name).cmp(&(b.revision, &b.metadata.name)))
}

/// Whether the native DaemonSet controller has processed the latest spec
/// (`status.observedGeneration` caught up with `metadata.generation`). Until then its
/// newest ControllerRevision may not be the target: in a rollback a -> b -> a, the
/// cache can still name b.
pub fn generation_observed(daemonset: &DaemonSet) -> bool {
    let Some(generation) = daemonset.metadata.generation else {
        return true;
    };
    daemonset
        .status
        .as_ref()
        .and_then(|status| status.observed_generation)
        .is_some_and(|observed| observed >= generation)
}

/// Whether the target revision read from the cache can be acted on, given what a fresh
/// (quorum) read of the revisions says.
///
/// Why this proves consistency: kube-controller-manager's `syncDaemonSet` writes the
/// revision of the template it read (creating it, or renumbering an earlier one to the
/// highest number in a rollback) before the status write that raises
/// `observedGeneration`. A DaemonSet read with `observedGeneration >= generation` has
/// therefore had its revision written before it was read, and a quorum read of the
/// revisions made after it sees that write. If the cached newest revision names the
/// same hash as the fresh newest, the cache is not behind the DaemonSet; if not, it is
/// (or the template moved on since the read): act on neither until they agree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetCheck {
    Consistent,
    /// The cache's newest revision is not the API server's.
    Behind {
        cached: Option<String>,
        fresh: Option<String>,
    },
}

pub fn check_target(
    cached: Option<&CurrentRevision>,
    fresh: Option<&CurrentRevision>,
) -> TargetCheck {
    let hash = |current: Option<&CurrentRevision>| current.and_then(|c| c.hash.clone());
    let (cached, fresh) = (hash(cached), hash(fresh));
    if cached == fresh {
        TargetCheck::Consistent
    } else {
        TargetCheck::Behind { cached, fresh }
    }
}

/// A target proved consistent once (see `check_target`) stays so while the DaemonSet's
/// generation and the cached newest hash stay the same: the native controller only makes
/// or renumbers revisions for a template change, which raises the generation. This key
/// lets the controller skip the fresh read until one of them moves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedTarget {
    pub generation: Option<i64>,
    pub hash: Option<String>,
}

impl VerifiedTarget {
    pub fn of(daemonset: &DaemonSet, current: Option<&CurrentRevision>) -> Self {
        Self {
            generation: daemonset.metadata.generation,
            hash: current.and_then(|c| c.hash.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{revision, DaemonSetBuilder, PodBuilder};

    #[test]
    fn newest_owned_revision_wins_even_when_reverted() {
        let ds = DaemonSetBuilder::new("agent").build();
        // v1 (hash a) -> v2 (hash b) -> reverted: the API server renumbers a's object to 3.
        let revisions = [revision(&ds, "b", 2), revision(&ds, "a", 3)];
        let current = CurrentRevision::of(&ds, &revisions).unwrap();
        assert_eq!(current.hash.as_deref(), Some("a"));

        let old = PodBuilder::new("p1", &ds).hash("b").build();
        let new = PodBuilder::new("p2", &ds).hash("a").build();
        assert!(!current.is_pod_updated(&old));
        assert!(current.is_pod_updated(&new));
    }

    #[test]
    fn duplicate_hash_on_an_older_revision_does_not_hide_the_newest() {
        let ds = DaemonSetBuilder::new("agent").build();
        let revisions = [
            revision(&ds, "a", 1),
            revision(&ds, "b", 4),
            revision(&ds, "a", 2),
        ];
        assert_eq!(
            CurrentRevision::of(&ds, &revisions)
                .unwrap()
                .hash
                .as_deref(),
            Some("b")
        );
    }

    #[test]
    fn revisions_of_other_daemonsets_are_ignored() {
        let ds = DaemonSetBuilder::new("agent").build();
        let other = DaemonSetBuilder::new("other").build();
        let revisions = [revision(&ds, "mine", 1), revision(&other, "theirs", 9)];
        assert_eq!(
            CurrentRevision::of(&ds, &revisions)
                .unwrap()
                .hash
                .as_deref(),
            Some("mine")
        );
    }

    #[test]
    fn template_generation_is_a_fallback() {
        let ds = DaemonSetBuilder::new("agent")
            .template_generation(3)
            .build();
        let current = CurrentRevision::of(&ds, &[revision(&ds, "h3", 3)]).unwrap();
        let by_generation = PodBuilder::new("p", &ds).hash("h2").generation(3).build();
        let old_generation = PodBuilder::new("q", &ds).hash("h2").generation(2).build();
        let unlabelled = PodBuilder::new("r", &ds).build();
        assert!(current.is_pod_updated(&by_generation));
        assert!(!current.is_pod_updated(&old_generation));
        assert!(!current.is_pod_updated(&unlabelled));

        let generation_only = CurrentRevision::of(&ds, &[]).unwrap();
        assert_eq!(generation_only.hash, None);
        assert!(generation_only.is_pod_updated(&by_generation));
    }

    #[test]
    fn unknown_revision_without_revisions_or_generation() {
        let ds = DaemonSetBuilder::new("agent").build();
        assert_eq!(CurrentRevision::of(&ds, &[]), None);
    }

    #[test]
    fn generation_observed_only_once_status_caught_up() {
        let built = |generation, observed| {
            DaemonSetBuilder::new("agent")
                .generations(generation, observed)
                .build()
        };
        assert!(generation_observed(&built(3, 3)));
        assert!(generation_observed(&built(3, 4)));
        assert!(!generation_observed(&built(4, 3)));
        let mut no_status = built(2, 2);
        no_status.status = None;
        assert!(!generation_observed(&no_status));
        assert!(generation_observed(&DaemonSetBuilder::new("agent").build()));
    }

    #[test]
    fn the_target_is_consistent_only_when_the_fresh_read_names_the_cached_hash() {
        let ds = DaemonSetBuilder::new("agent")
            .template_generation(3)
            .build();
        let of = |revisions: &[ControllerRevision]| CurrentRevision::of(&ds, revisions);
        // a -> b -> a: the API server renumbered a's revision to 3; the cache still
        // has it at 1, so its newest is b.
        let cached_behind = of(&[revision(&ds, "a", 1), revision(&ds, "b", 2)]);
        let fresh = of(&[revision(&ds, "b", 2), revision(&ds, "a", 3)]);
        let cases = [
            ("cache caught up", fresh.clone(), fresh.clone(), true),
            (
                "rollback not yet seen",
                cached_behind.clone(),
                fresh.clone(),
                false,
            ),
            // The template moved on after the read: the cache is older than the truth.
            (
                "template moved on",
                fresh.clone(),
                of(&[revision(&ds, "c", 4)]),
                false,
            ),
            // Only the template generation known on both sides: nothing to disagree on.
            ("no revision anywhere", of(&[]), of(&[]), true),
            ("revision only on the server", of(&[]), fresh.clone(), false),
        ];
        for (name, cached, fresh, consistent) in cases {
            let check = check_target(cached.as_ref(), fresh.as_ref());
            assert_eq!(
                check == TargetCheck::Consistent,
                consistent,
                "{name}: {check:?}"
            );
        }
        assert_eq!(
            check_target(cached_behind.as_ref(), fresh.as_ref()),
            TargetCheck::Behind {
                cached: Some("b".into()),
                fresh: Some("a".into())
            }
        );
    }

    #[test]
    fn a_verified_target_is_keyed_by_generation_and_cached_hash() {
        let at = |generation| {
            DaemonSetBuilder::new("agent")
                .generations(generation, generation)
                .build()
        };
        let current = |hash: &str| CurrentRevision {
            hash: Some(hash.into()),
            template_generation: None,
        };
        let verified = VerifiedTarget::of(&at(3), Some(&current("a")));
        assert_eq!(verified, VerifiedTarget::of(&at(3), Some(&current("a"))));
        assert_ne!(verified, VerifiedTarget::of(&at(4), Some(&current("a"))));
        assert_ne!(verified, VerifiedTarget::of(&at(3), Some(&current("b"))));
    }
}
