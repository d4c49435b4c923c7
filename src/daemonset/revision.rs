//! Which pods of a DaemonSet are up to date, and where they live.
//!
//! We never recompute the template hash: it depends on the Go library version and on
//! `status.collisionCount`, so we read the hash the native controller wrote on its
//! newest ControllerRevision instead.

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::object::label;
use crate::watch::PodFacts;

/// Label on ControllerRevisions and pods naming the template revision's hash.
pub const CONTROLLER_REVISION_HASH_LABEL: &str = "controller-revision-hash";
/// Label on pods of older DaemonSets naming the template generation they were built from.
pub const POD_TEMPLATE_GENERATION_LABEL: &str = "pod-template-generation";
/// DaemonSet annotation holding the current template generation.
pub const TEMPLATE_GENERATION_ANNOTATION: &str = "deprecated.daemonset.template.generation";

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

/// Whether `pod`'s controller ownerRef is the DaemonSet with UID `daemonset_uid`.
pub fn is_controlled_by(pod: &impl PodFacts, daemonset_uid: &str) -> bool {
    controller_uid(pod.metadata()) == Some(daemonset_uid)
}

/// The node a DaemonSet pod runs on or is meant for: `spec.nodeName`, else the single
/// value of the required node-affinity `matchFields` term on `metadata.name` (pending
/// pods created by the DaemonSet controller are not bound yet).
pub fn pod_node_name(pod: &impl PodFacts) -> Option<&str> {
    pod.node_or_affinity_node()
}

/// Whether the pod has a deletion timestamp (it is going away and no longer counts).
pub fn is_terminating(pod: &impl PodFacts) -> bool {
    pod.is_terminating()
}

pub(crate) fn controller_uid(metadata: &ObjectMeta) -> Option<&str> {
    metadata
        .owner_references
        .iter()
        .flatten()
        .find(|owner| owner.controller == Some(true))
        .map(|owner| owner.uid.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemonset::testkit::{revision, DaemonSetBuilder, PodBuilder};

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
    fn controller_owner_decides_membership() {
        let ds = DaemonSetBuilder::new("agent").build();
        let ds_uid = ds.metadata.uid.as_deref().unwrap();
        let mine = PodBuilder::new("p", &ds).build();
        let theirs = PodBuilder::new("q", &ds)
            .owned_by_uid("someone-else")
            .build();
        let mut non_controller = PodBuilder::new("r", &ds).build();
        non_controller.metadata.owner_references.as_mut().unwrap()[0].controller = None;
        assert!(is_controlled_by(&mine, ds_uid));
        assert!(!is_controlled_by(&theirs, ds_uid));
        assert!(!is_controlled_by(&non_controller, ds_uid));
    }

    #[test]
    fn node_from_node_name_or_pending_affinity() {
        let ds = DaemonSetBuilder::new("agent").build();
        let bound = PodBuilder::new("p", &ds).on_node("edge-1").build();
        let pending = PodBuilder::new("q", &ds).pending_for_node("edge-2").build();
        let nowhere = PodBuilder::new("r", &ds).build();
        assert_eq!(pod_node_name(&bound), Some("edge-1"));
        assert_eq!(pod_node_name(&pending), Some("edge-2"));
        assert_eq!(pod_node_name(&nowhere), None);
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
}
