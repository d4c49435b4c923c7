//! The OTA planner: which pods need their `PodNeedUpgrade` condition written or removed.
//!
//! Pure: it returns only the pods whose condition must change, so the controller writes
//! nothing on a no-op resync. Every pod of the DaemonSet is covered, whatever its node's
//! state (the node API on a NotReady node still serves its last known pods).

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::PodCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::revision::CurrentRevision;
use crate::names::POD_NEED_UPGRADE_CONDITION;
use crate::object::{is_controlled_by, ConditionView, PodFacts};
use crate::revision_message::need_upgrade_message;

/// A `PodNeedUpgrade` condition to write on one pod (status subresource).
#[derive(Debug, Clone, PartialEq)]
pub struct ConditionUpdate {
    pub namespace: String,
    pub name: String,
    /// The full condition to set, replacing any existing `PodNeedUpgrade` condition.
    pub condition: PodCondition,
}

/// A pod carrying a `PodNeedUpgrade` condition that must go.
#[derive(Debug, Clone, PartialEq)]
pub struct LeftoverCondition {
    pub namespace: String,
    pub name: String,
}

/// Plans `PodNeedUpgrade` for every pod the OTA DaemonSet controls: status `"True"` when
/// out of date, else `"False"`; message `controllerrevision: <current hash>`;
/// `lastTransitionTime` kept when the status does not change, else `now`.
///
/// Returns only pods whose condition is missing or differs in status or message, sorted
/// by name. Returns nothing while the current hash is unknown (no ControllerRevision
/// yet), since the message could not name it.
pub fn plan_need_upgrade_conditions(
    daemonset: &DaemonSet,
    current: Option<&CurrentRevision>,
    pods: &[impl PodFacts],
    now: Timestamp,
) -> Vec<ConditionUpdate> {
    let Some(current) = current else {
        return Vec::new();
    };
    let Some(hash) = current.hash.as_deref() else {
        return Vec::new();
    };
    let message = need_upgrade_message(hash);
    let ds_uid = daemonset.metadata.uid.as_deref().unwrap_or_default();

    let mut updates: Vec<ConditionUpdate> = pods
        .iter()
        .filter(|pod| is_controlled_by(pod, ds_uid))
        .filter_map(|pod| {
            let status = if current.is_pod_updated(pod) {
                "False"
            } else {
                "True"
            };
            let existing = need_upgrade_condition(pod);
            let last_transition_time = match existing {
                Some(existing) if existing.status == status => {
                    if existing.message == Some(message.as_str()) {
                        return None;
                    }
                    existing.last_transition_time.cloned()
                }
                _ => Some(Time(now)),
            };
            Some(ConditionUpdate {
                namespace: pod.pod_namespace().to_string(),
                name: pod.pod_name().to_string(),
                condition: PodCondition {
                    type_: POD_NEED_UPGRADE_CONDITION.into(),
                    status: status.into(),
                    message: Some(message.clone()),
                    last_transition_time,
                    ..Default::default()
                },
            })
        })
        .collect();
    updates.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    updates
}

/// For a DaemonSet that is not (or no longer) OTA: the pods it controls that still
/// carry a `PodNeedUpgrade` condition, sorted by name. The caller decides that the
/// DaemonSet is not OTA; this function does not look at its annotations.
pub fn plan_leftover_condition_removals(
    daemonset: &DaemonSet,
    pods: &[impl PodFacts],
) -> Vec<LeftoverCondition> {
    let ds_uid = daemonset.metadata.uid.as_deref().unwrap_or_default();
    let mut leftover: Vec<LeftoverCondition> = pods
        .iter()
        // The condition first: nearly no pod has it, and it is the cheaper look (a
        // rolling DaemonSet checks all its pods on every plan).
        .filter(|pod| need_upgrade_condition(*pod).is_some())
        .filter(|pod| is_controlled_by(*pod, ds_uid))
        .map(|pod| LeftoverCondition {
            namespace: pod.pod_namespace().to_string(),
            name: pod.pod_name().to_string(),
        })
        .collect();
    leftover.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    leftover
}

fn need_upgrade_condition(pod: &impl PodFacts) -> Option<ConditionView<'_>> {
    pod.condition(POD_NEED_UPGRADE_CONDITION)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::ControllerRevision;
    use k8s_openapi::api::core::v1::Pod;

    use super::*;
    use crate::testkit::{at, revision, DaemonSetBuilder, PodBuilder};

    fn ota() -> DaemonSet {
        DaemonSetBuilder::new("agent")
            .strategy("OTA")
            .on_delete()
            .build()
    }

    fn need_upgrade(status: &str, hash: &str, since: i64) -> PodCondition {
        PodCondition {
            type_: POD_NEED_UPGRADE_CONDITION.into(),
            status: status.into(),
            message: Some(need_upgrade_message(hash)),
            last_transition_time: Some(Time(at(since))),
            ..Default::default()
        }
    }

    /// The plan at t=500 for `pods` of `ds`, whose revisions are `revisions`.
    fn plan_at_500(
        ds: &DaemonSet,
        revisions: &[ControllerRevision],
        pods: &[Pod],
    ) -> Vec<ConditionUpdate> {
        plan_need_upgrade_conditions(
            ds,
            CurrentRevision::of(ds, revisions).as_ref(),
            pods,
            at(500),
        )
    }

    fn statuses(updates: &[ConditionUpdate]) -> Vec<(&str, &str)> {
        updates
            .iter()
            .map(|u| (u.name.as_str(), u.condition.status.as_str()))
            .collect()
    }

    #[test]
    fn true_for_old_pods_false_for_current_ones_with_the_hash_in_the_message() {
        let ds = ota();
        let revisions = [revision(&ds, "h1", 1), revision(&ds, "h2", 2)];
        let pods = [
            PodBuilder::new("old", &ds).hash("h1").on_node("n1").build(),
            PodBuilder::new("new", &ds).hash("h2").on_node("n2").build(),
            PodBuilder::new("pending-old", &ds)
                .hash("h1")
                .pending_for_node("n3")
                .build(),
        ];
        let updates = plan_at_500(&ds, &revisions, &pods);
        assert_eq!(
            statuses(&updates),
            [("new", "False"), ("old", "True"), ("pending-old", "True")]
        );
        for update in &updates {
            assert_eq!(update.condition.type_, "PodNeedUpgrade");
            assert_eq!(
                update.condition.message.as_deref(),
                Some("controllerrevision: h2")
            );
            assert_eq!(update.condition.last_transition_time, Some(Time(at(500))));
            assert_eq!(update.namespace, "edge");
        }
    }

    #[test]
    fn no_op_when_nothing_changes() {
        let ds = ota();
        let revisions = [revision(&ds, "h1", 1), revision(&ds, "h2", 2)];
        let pods = [
            PodBuilder::new("old", &ds)
                .hash("h1")
                .with_condition(need_upgrade("True", "h2", 100))
                .build(),
            PodBuilder::new("new", &ds)
                .hash("h2")
                .with_condition(need_upgrade("False", "h2", 100))
                .build(),
        ];
        assert!(plan_at_500(&ds, &revisions, &pods).is_empty());
    }

    #[test]
    fn message_rewritten_when_hash_changes_keeping_transition_time() {
        let ds = ota();
        // The template moved on from h2 to h3; the pod was already out of date at h2.
        let revisions = [revision(&ds, "h2", 2), revision(&ds, "h3", 3)];
        let pods = [PodBuilder::new("old", &ds)
            .hash("h1")
            .with_condition(need_upgrade("True", "h2", 100))
            .build()];
        let updates = plan_at_500(&ds, &revisions, &pods);
        assert_eq!(updates.len(), 1);
        assert_eq!(updates[0].condition, need_upgrade("True", "h3", 100));
    }

    #[test]
    fn transition_time_moves_when_status_flips() {
        let ds = ota();
        let revisions = [revision(&ds, "h2", 2)];
        // Recreated by the operator's upgrade: now current, but still marked True.
        let pods = [PodBuilder::new("upgraded", &ds)
            .hash("h2")
            .with_condition(need_upgrade("True", "h2", 100))
            .build()];
        let updates = plan_at_500(&ds, &revisions, &pods);
        assert_eq!(updates.len(), 1);
        assert_eq!(updates[0].condition, need_upgrade("False", "h2", 500));
    }

    #[test]
    fn pods_of_other_owners_and_unknown_revision_are_left_alone() {
        let ds = ota();
        let foreign = [PodBuilder::new("foreign", &ds)
            .owned_by_uid("other")
            .hash("h1")
            .build()];
        assert!(plan_need_upgrade_conditions(
            &ds,
            CurrentRevision::of(&ds, &[revision(&ds, "h2", 2)]).as_ref(),
            &foreign,
            at(1)
        )
        .is_empty());
        let mine = [PodBuilder::new("mine", &ds).hash("h1").build()];
        assert!(plan_need_upgrade_conditions(
            &ds,
            CurrentRevision::of(&ds, &[]).as_ref(),
            &mine,
            at(1)
        )
        .is_empty());
    }

    #[test]
    fn leftover_conditions_are_removed_and_others_kept() {
        let ds = DaemonSetBuilder::new("agent").on_delete().build();
        let pods = [
            PodBuilder::new("marked", &ds)
                .ready_since(at(10))
                .with_condition(need_upgrade("True", "h1", 100))
                .build(),
            PodBuilder::new("clean", &ds).ready_since(at(10)).build(),
            PodBuilder::new("foreign", &ds)
                .owned_by_uid("other")
                .with_condition(need_upgrade("True", "h1", 100))
                .build(),
        ];
        let leftover = plan_leftover_condition_removals(&ds, &pods);
        assert_eq!(leftover.len(), 1);
        assert_eq!(leftover[0].name, "marked");
    }
}
