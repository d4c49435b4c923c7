//! Another updater on the same DaemonSets: OpenYurt's yurt-manager `daemonpodupdater`
//! reads the same annotations, and two updaters' budgets add up. rollgate steps back
//! from a DaemonSet the other one acts on, says so, and resumes once it has been quiet.
//!
//! The signal, chosen so it cannot misfire: yurt-manager v1.7.0 deletes every pod it
//! replaces through `RealPodControl.DeletePod`
//! (`pkg/yurtmanager/controller/daemonsetupgradestrategy/daemonpodupdater/kubernetes/controller_utils.go`),
//! which records a core/v1 Event on the DaemonSet: reason `SuccessfulDelete` (or
//! `FailedDelete`), message `Deleted pod: <name>`, source component
//! `daemon-pod-updater-controller` (its recorder's name, `names.DaemonPodUpdaterController`,
//! with controller-runtime v0.19's core/v1 recorder). No other component writes that
//! source: kube-controller-manager's DaemonSet controller writes `daemonset-controller`,
//! and rollgate writes its own Events through events.k8s.io. One field-selected watch of
//! those Events costs nothing when yurt-manager is not there.
//!
//! What it does not see: yurt-manager marking `PodNeedUpgrade` for an OTA DaemonSet (no
//! Event). Two OTA markers write the same condition and value, and neither deletes.
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::Event as CoreEvent;
use k8s_openapi::jiff::Timestamp;

/// Event source components of other DaemonSet updaters.
pub const OTHER_UPDATER_COMPONENTS: &[&str] = &["daemon-pod-updater-controller"];
/// `--other-updater-quiet`'s default, in seconds (also what `rollgate status` assumes).
pub const OTHER_UPDATER_DEFAULT_QUIET_SECS: u64 = 300;
/// Reasons of their deletions (`SuccessfulDelete`, `FailedDelete`: both are attempts).
const DELETION_REASONS: &[&str] = &["SuccessfulDelete", "FailedDelete"];

/// The field selector of the Events watch (one component; see the module comment).
pub fn field_selector() -> String {
    format!("source={}", OTHER_UPDATER_COMPONENTS[0])
}

/// One sighting of another updater acting on a DaemonSet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sighting {
    pub namespace: String,
    pub daemonset: String,
    pub component: String,
    /// The Event's own words (`Deleted pod: edge-x1`).
    pub what: String,
    pub at: Timestamp,
}

impl Sighting {
    /// Says who acted, what it did, and what to do.
    pub fn explain(&self, quiet: Duration) -> String {
        format!(
            "another updater acts on this DaemonSet: {} ({}: {}, at {}). Two updaters' \
             budgets add up, so rollgate deletes nothing here until it has been quiet for \
             {}s. Turn it off: yurt-manager --controllers=*,-daemonpodupdater,-imagepreheat",
            self.component,
            "yurt-manager's DaemonSet pod updater",
            self.what,
            self.at,
            quiet.as_secs()
        )
    }
}

/// Reads one Event: a sighting if another updater deleted (or tried to delete) a pod of
/// a DaemonSet.
pub fn sighting_of(event: &CoreEvent) -> Option<Sighting> {
    let component = event
        .source
        .as_ref()
        .and_then(|s| s.component.clone())
        .or_else(|| event.reporting_component.clone())?;
    if !OTHER_UPDATER_COMPONENTS.contains(&component.as_str()) {
        return None;
    }
    if !DELETION_REASONS.contains(&event.reason.as_deref()?) {
        return None;
    }
    let object = &event.involved_object;
    if object.kind.as_deref() != Some("DaemonSet") {
        return None;
    }
    let at = event
        .series
        .as_ref()
        .and_then(|s| s.last_observed_time.as_ref().map(|t| t.0))
        .or(event.last_timestamp.as_ref().map(|t| t.0))
        .or(event.event_time.as_ref().map(|t| t.0))
        .or(event.first_timestamp.as_ref().map(|t| t.0))
        .or(event.metadata.creation_timestamp.as_ref().map(|t| t.0))?;
    Some(Sighting {
        namespace: object
            .namespace
            .clone()
            .or_else(|| event.metadata.namespace.clone())?,
        daemonset: object.name.clone()?,
        component,
        what: event.message.clone().unwrap_or_default(),
        at,
    })
}

/// The latest sighting per DaemonSet.
pub struct OtherUpdaters {
    quiet: Duration,
    latest: Mutex<HashMap<(String, String), Sighting>>,
}

impl OtherUpdaters {
    /// `quiet`: how long after its last sighting another updater counts as gone.
    pub fn new(quiet: Duration) -> Self {
        Self {
            quiet,
            latest: Mutex::default(),
        }
    }

    pub fn quiet(&self) -> Duration {
        self.quiet
    }

    /// Records a sighting (an older one never replaces a newer one).
    pub fn record(&self, sighting: Sighting) {
        let key = (sighting.namespace.clone(), sighting.daemonset.clone());
        let mut latest = self.latest.lock().unwrap();
        if latest.get(&key).is_none_or(|known| known.at <= sighting.at) {
            latest.insert(key, sighting);
        }
    }

    /// The other updater's last sighting on this DaemonSet if it is still active at
    /// `now`, with how long until it counts as gone.
    pub fn active(
        &self,
        namespace: &str,
        daemonset: &str,
        now: Timestamp,
    ) -> Option<(Sighting, Duration)> {
        let latest = self.latest.lock().unwrap();
        let sighting = latest.get(&(namespace.to_string(), daemonset.to_string()))?;
        let since = now.duration_since(sighting.at);
        let since = Duration::try_from(since).unwrap_or_default();
        (since < self.quiet).then(|| (sighting.clone(), self.quiet - since))
    }

    /// Forgets a DaemonSet that is gone.
    pub fn forget(&self, namespace: &str, daemonset: &str) {
        self.latest
            .lock()
            .unwrap()
            .remove(&(namespace.to_string(), daemonset.to_string()));
    }

    /// How many DaemonSets another updater acts on now (the metric).
    pub fn count_active(&self, now: Timestamp) -> usize {
        self.latest
            .lock()
            .unwrap()
            .values()
            .filter(|s| {
                Duration::try_from(now.duration_since(s.at)).unwrap_or_default() < self.quiet
            })
            .count()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{EventSource, ObjectReference};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    use super::*;
    use crate::testkit::at;

    fn event(component: &str, reason: &str, kind: &str, when: i64) -> CoreEvent {
        CoreEvent {
            metadata: ObjectMeta {
                namespace: Some("edge".into()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                kind: Some(kind.into()),
                namespace: Some("edge".into()),
                name: Some("agent".into()),
                ..Default::default()
            },
            source: Some(EventSource {
                component: Some(component.into()),
                host: None,
            }),
            reason: Some(reason.into()),
            message: Some("Deleted pod: agent-x1".into()),
            last_timestamp: Some(Time(at(when))),
            ..Default::default()
        }
    }

    #[test]
    fn only_another_updaters_pod_deletions_on_a_daemonset_count() {
        let cases = [
            (
                "daemon-pod-updater-controller",
                "SuccessfulDelete",
                "DaemonSet",
                true,
            ),
            (
                "daemon-pod-updater-controller",
                "FailedDelete",
                "DaemonSet",
                true,
            ),
            // kube-controller-manager's DaemonSet controller deletes pods too.
            (
                "daemonset-controller",
                "SuccessfulDelete",
                "DaemonSet",
                false,
            ),
            (
                "daemon-pod-updater-controller",
                "SuccessfulCreate",
                "DaemonSet",
                false,
            ),
            (
                "daemon-pod-updater-controller",
                "SuccessfulDelete",
                "Deployment",
                false,
            ),
            (
                "rollgate-daemonset-upgrade",
                "UpgradingPods",
                "DaemonSet",
                false,
            ),
        ];
        for (component, reason, kind, counts) in cases {
            let got = sighting_of(&event(component, reason, kind, 100));
            assert_eq!(got.is_some(), counts, "{component} {reason} {kind}");
        }
        let s = sighting_of(&event(
            "daemon-pod-updater-controller",
            "SuccessfulDelete",
            "DaemonSet",
            100,
        ))
        .unwrap();
        assert_eq!(
            (
                s.namespace.as_str(),
                s.daemonset.as_str(),
                s.what.as_str(),
                s.at
            ),
            ("edge", "agent", "Deleted pod: agent-x1", at(100))
        );
        assert!(s
            .explain(Duration::from_secs(300))
            .contains("-daemonpodupdater"));
    }

    #[test]
    fn another_updater_counts_until_it_has_been_quiet() {
        let others = OtherUpdaters::new(Duration::from_secs(300));
        assert!(others.active("edge", "agent", at(100)).is_none());
        let seen = |when| {
            sighting_of(&event(
                "daemon-pod-updater-controller",
                "SuccessfulDelete",
                "DaemonSet",
                when,
            ))
            .unwrap()
        };
        others.record(seen(100));
        let (_, left) = others.active("edge", "agent", at(160)).unwrap();
        assert_eq!(left, Duration::from_secs(240));
        assert_eq!(others.count_active(at(160)), 1);
        // An older Event read late does not shorten the wait.
        others.record(seen(50));
        assert!(others.active("edge", "agent", at(399)).is_some());
        assert!(others.active("edge", "agent", at(400)).is_none());
        assert_eq!(others.count_active(at(400)), 0);
        assert!(others.active("edge", "other", at(160)).is_none());
        others.record(seen(390));
        others.forget("edge", "agent");
        assert!(others.active("edge", "agent", at(391)).is_none());
    }
}
