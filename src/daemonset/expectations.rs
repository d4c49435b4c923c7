//! What rollgate did to each DaemonSet that the caches may not show yet.
//!
//! Two records per DaemonSet, both plain data handed to the planner:
//! - the pods whose deletion was issued, until the cache shows them terminating or gone
//!   (so a burst of events never deletes the same pod twice, or spends budget twice);
//! - the nodes whose pod rollgate deleted, until the planner sees an available
//!   replacement there (so a node between its old pod's removal and its new pod's
//!   creation keeps counting against the budget, without reading the DaemonSet status).
//!
//! Both are in memory. After a restart the planner rebuilds the second from placement
//! (a Ready node that should run the pod but shows none), and the first is not needed:
//! the API server shows a deleted pod as terminating before the delete call returns.
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::object::PodFacts;

/// A deletion we issued but have not seen land is forgotten after this long, so a lost
/// watch event cannot block a rollout forever.
pub const DELETION_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, Default)]
struct DaemonSetRecord {
    /// Pod UID -> when its deletion was issued.
    deletions: HashMap<String, Instant>,
    /// Node name -> UID of the pod rollgate deleted there.
    vacated: BTreeMap<String, String>,
}

/// The planner's view of one DaemonSet's in-flight work.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Pending {
    pub deletions: BTreeSet<String>,
    pub vacated: BTreeMap<String, String>,
}

/// Per DaemonSet UID.
#[derive(Debug, Default)]
pub struct Expectations(HashMap<String, DaemonSetRecord>);

impl Expectations {
    /// Drops the deletions the cache has caught up with (the pod shows terminating or
    /// is gone) or that timed out, and returns what is still pending for `ds_uid`.
    pub fn pending<'p, P: PodFacts + 'p>(
        &mut self,
        ds_uid: &str,
        pods: impl IntoIterator<Item = &'p Arc<P>>,
        now: Instant,
    ) -> Pending {
        let Some(record) = self.0.get_mut(ds_uid) else {
            return Pending::default();
        };
        // One pass over the pods, one lookup each: a rollout has up to a plan's cap of
        // deletions in flight and a DaemonSet 10,000 pods (issue 25), too many to
        // compare every pod with every deletion on each plan.
        let mut seen_live: HashSet<&str> = HashSet::new();
        if !record.deletions.is_empty() {
            for pod in pods.into_iter().filter(|p| !p.is_terminating()) {
                let uid = pod.pod_uid();
                if record.deletions.contains_key(uid) {
                    seen_live.insert(uid);
                }
            }
        }
        record.deletions.retain(|uid, since| {
            seen_live.contains(uid.as_str()) && now.duration_since(*since) < DELETION_TIMEOUT
        });
        Pending {
            deletions: record.deletions.keys().cloned().collect(),
            vacated: record.vacated.clone(),
        }
    }

    /// Records a deletion before it is issued: a replan while the call is in flight
    /// must already see the pod as gone and its node as vacated.
    pub fn expect_deletion(&mut self, ds_uid: &str, node: &str, pod_uid: &str, now: Instant) {
        let record = self.0.entry(ds_uid.to_string()).or_default();
        record.deletions.insert(pod_uid.to_string(), now);
        record.vacated.insert(node.to_string(), pod_uid.to_string());
    }

    /// The pod is gone already (404) or was replaced under the same name (409): its
    /// deletion will never be observed, but the node is still being replaced.
    pub fn deletion_moot(&mut self, ds_uid: &str, pod_uid: &str) {
        if let Some(record) = self.0.get_mut(ds_uid) {
            record.deletions.remove(pod_uid);
        }
    }

    /// The call failed: nothing was deleted, so neither record holds.
    pub fn deletion_failed(&mut self, ds_uid: &str, node: &str, pod_uid: &str) {
        if let Some(record) = self.0.get_mut(ds_uid) {
            record.deletions.remove(pod_uid);
            if record.vacated.get(node).map(String::as_str) == Some(pod_uid) {
                record.vacated.remove(node);
            }
        }
    }

    /// Forgets vacated nodes the planner found settled.
    pub fn settle(&mut self, ds_uid: &str, nodes: &[String]) {
        if let Some(record) = self.0.get_mut(ds_uid) {
            for node in nodes {
                record.vacated.remove(node);
            }
        }
    }

    /// The DaemonSet is gone: nothing of it is kept.
    pub fn forget_daemonset(&mut self, ds_uid: &str) {
        self.0.remove(ds_uid);
    }

    /// Keeps only the DaemonSets `live` says still exist.
    pub fn retain(&mut self, live: impl Fn(&str) -> bool) {
        self.0.retain(|uid, _| live(uid));
    }

    /// Whether rollgate deleted the pod of this DaemonSet on `node` and has not seen the
    /// node settled since (a node event must re-plan it: see `triggers`).
    pub fn has_vacated(&self, ds_uid: &str, node: &str) -> bool {
        self.0
            .get(ds_uid)
            .is_some_and(|record| record.vacated.contains_key(node))
    }

    /// Whether rollgate issued the deletion of this pod of the DaemonSet and has not
    /// dropped the record yet (timed-out records count until the next plan drops them:
    /// a node trigger must then re-plan, see `triggers`).
    pub fn deletion_expected(&self, ds_uid: &str, pod_uid: &str) -> bool {
        self.0
            .get(ds_uid)
            .is_some_and(|record| record.deletions.contains_key(pod_uid))
    }

    /// How many DaemonSets have a record (for tests and metrics).
    pub fn tracked(&self) -> usize {
        self.0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{at, DaemonSetBuilder, PodBuilder};
    use k8s_openapi::api::core::v1::Pod;

    fn pods() -> (Arc<Pod>, Arc<Pod>) {
        let ds = DaemonSetBuilder::new("agent").build();
        let live = PodBuilder::new("live", &ds).on_node("n1").build();
        let going = PodBuilder::new("going", &ds)
            .on_node("n2")
            .terminating(at(1))
            .build();
        (Arc::new(live), Arc::new(going))
    }

    #[test]
    fn a_deletion_is_pending_until_the_cache_shows_the_pod_terminating_or_gone() {
        let (live, going) = pods();
        let t0 = Instant::now();
        let mut e = Expectations::default();
        e.expect_deletion("ds", "n1", "uid-live", t0);
        e.expect_deletion("ds", "n2", "uid-going", t0);
        e.expect_deletion("ds", "n3", "uid-gone", t0);
        let pending = e.pending("ds", &[live.clone(), going], t0);
        assert_eq!(pending.deletions, BTreeSet::from(["uid-live".to_string()]));
        // The vacated nodes stay until the planner settles them.
        assert_eq!(pending.vacated.len(), 3);
        let later = e.pending("ds", &[live], t0 + DELETION_TIMEOUT);
        assert!(later.deletions.is_empty(), "timed out");
        assert_eq!(later.vacated.len(), 3);
    }

    #[test]
    fn settling_failing_and_forgetting() {
        let t0 = Instant::now();
        let mut e = Expectations::default();
        e.expect_deletion("ds", "n1", "uid-a", t0);
        e.expect_deletion("ds", "n2", "uid-b", t0);
        e.expect_deletion("ds", "n3", "uid-c", t0);
        e.deletion_failed("ds", "n2", "uid-b");
        e.deletion_moot("ds", "uid-c");
        let (live, _) = pods();
        let all_live = |uid: &str| {
            let mut p = (*live).clone();
            p.metadata.uid = Some(uid.into());
            Arc::new(p)
        };
        let pending = e.pending("ds", &[all_live("uid-a"), all_live("uid-c")], t0);
        assert_eq!(pending.deletions, BTreeSet::from(["uid-a".to_string()]));
        assert_eq!(
            pending.vacated.keys().collect::<Vec<_>>(),
            ["n1", "n3"],
            "a failed call vacates nothing; a moot one still does"
        );
        e.settle("ds", &["n1".into()]);
        assert_eq!(e.pending::<Pod>("ds", &[], t0).vacated.len(), 1);
        e.forget_daemonset("ds");
        assert_eq!(e.tracked(), 0);
        assert_eq!(e.pending::<Pod>("ds", &[], t0), Pending::default());
    }
}
