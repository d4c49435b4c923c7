//! One DaemonSet per scenario, in a namespace of its own, on the bench's nodes, with its
//! own budget watcher; and the three things done to it: a rollout (image change), the
//! comeback of cut-off nodes, and OTA marking.
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::DaemonSet;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use crate::support::{note, TestNamespace};
use crate::watcher::{BudgetWatcher, Kind, Sample};

pub const STRATEGY: &str = "apps.openyurt.io/update-strategy";
pub const MAX_UNAVAILABLE: &str = "apps.openyurt.io/max-unavailable";
pub const PULL_AHEAD: &str = "rollgate.io/pull-ahead";
/// `continue`: no proving wave (issue 45).
pub const ON_FAILURE: &str = "rollgate.io/on-failure";
pub const OLD_IMAGE: &str = "registry.local/edge-agent:v1";
pub const NEW_IMAGE: &str = "registry.local/edge-agent:v2";

/// The pod-template annotation `TemplateChange::AnnotationOnly` sets: the watcher
/// counts pods carrying it as of the new revision.
pub const NEW_REVISION_ANNOTATION: (&str, &str) = ("rollgate.test/bench-revision", "2");

/// What a rollout changes in the pod template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TemplateChange {
    /// The image: `OLD_IMAGE` -> `NEW_IMAGE` (a pull, where the bed models pulls).
    Image,
    /// A pod-template annotation only: a new revision whose image every node already
    /// has, so no pull at all (the pull-ahead bench's ideal).
    AnnotationOnly,
    /// The image, to one of the scenario's choosing (`Setup::prepare_to`'s target).
    ImageTo(&'static str),
}

/// How the DaemonSet is updated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Kubernetes' own RollingUpdate, `maxUnavailable` = the budget.
    Native,
    /// `OnDelete` + `apps.openyurt.io/update-strategy: AdvancedRollingUpdate`.
    Advanced,
    /// `Advanced` + `rollgate.io/pull-ahead: "true"` (issue 26).
    AdvancedPullAhead,
    /// `OnDelete` + `apps.openyurt.io/update-strategy: OTA`.
    Ota,
}

#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub strategy: Strategy,
    /// `tolerations: [{operator: Exists}]`, as edge DaemonSets usually have; otherwise
    /// only the tolerations the DaemonSet controller adds.
    pub tolerate_all: bool,
}

/// A DaemonSet running the old image on every bench node, watched.
pub struct Prepared {
    pub key: String,
    pub ns: TestNamespace,
    pub watcher: BudgetWatcher,
    client: Client,
}

impl Prepared {
    pub fn client(&self) -> Client {
        self.client.clone()
    }
}

pub struct Setup<'a> {
    pub client: &'a Client,
    pub owner: &'a str,
    pub selector: &'a BTreeMap<String, String>,
    pub nodes: usize,
    pub max_unavailable: &'a str,
    pub budget: usize,
    pub pod_delay: Duration,
}

impl Setup<'_> {
    pub async fn prepare(&self, key: &str, shape: Shape) -> Result<Prepared, String> {
        self.prepare_to(key, shape, serde_json::Map::new(), NEW_IMAGE)
            .await
    }

    /// `prepare`, with more DaemonSet annotations and the image the rollout goes to
    /// (what the watcher counts as new).
    pub async fn prepare_to(
        &self,
        key: &str,
        shape: Shape,
        mut annotations: serde_json::Map<String, serde_json::Value>,
        target_image: &str,
    ) -> Result<Prepared, String> {
        let ns = TestNamespace::new(self.client, "bench").await;
        let update_strategy = match shape.strategy {
            Strategy::Native => json!({
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": self.max_unavailable, "maxSurge": 0}
            }),
            Strategy::Advanced | Strategy::AdvancedPullAhead | Strategy::Ota => {
                json!({"type": "OnDelete"})
            }
        };
        match shape.strategy {
            Strategy::Native => {}
            Strategy::Advanced | Strategy::AdvancedPullAhead => {
                annotations.insert(STRATEGY.into(), json!("AdvancedRollingUpdate"));
                annotations.insert(MAX_UNAVAILABLE.into(), json!(self.max_unavailable));
                if shape.strategy == Strategy::AdvancedPullAhead {
                    annotations.insert(PULL_AHEAD.into(), json!("true"));
                }
            }
            Strategy::Ota => {
                annotations.insert(STRATEGY.into(), json!("OTA"));
            }
        }
        let tolerations = if shape.tolerate_all {
            json!([{"operator": "Exists"}])
        } else {
            json!([])
        };
        let ds: DaemonSet = serde_json::from_value(json!({
            "metadata": {"name": "edge", "annotations": annotations},
            "spec": {
                "selector": {"matchLabels": {"app": "edge"}},
                "updateStrategy": update_strategy,
                "template": {
                    "metadata": {
                        "labels": {"app": "edge"},
                        "annotations": {
                            "pod-ready.stage.kwok.x-k8s.io/delay":
                                format!("{}ms", self.pod_delay.as_millis())
                        }
                    },
                    "spec": {
                        "nodeSelector": self.selector,
                        "tolerations": tolerations,
                        "containers": [{"name": "main", "image": OLD_IMAGE}]
                    }
                }
            }
        }))
        .map_err(|e| e.to_string())?;
        let watcher =
            BudgetWatcher::start(self.client, self.owner, &ns.name, target_image, self.budget)
                .await?;
        Api::<DaemonSet>::namespaced(self.client.clone(), &ns.name)
            .create(&PostParams::default(), &ds)
            .await
            .map_err(|e| format!("creating the DaemonSet of {key}: {e}"))?;
        // Generous: a failure threshold only. The pull-ahead scenarios hold every first
        // pod for the bed's pull, and the bed's puller marks pods one at a time.
        let deadline = Instant::now() + Duration::from_secs(120 + self.nodes as u64 / 2);
        loop {
            let (live, available) = watcher.pods_available();
            if live >= self.nodes && available >= self.nodes {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{key}: only {available} of {} pods available ({live} exist)",
                    self.nodes
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        note(format!(
            "{key}: {} pods of {OLD_IMAGE} available",
            self.nodes
        ));
        Ok(Prepared {
            key: key.to_string(),
            ns,
            watcher,
            client: self.client.clone(),
        })
    }
}

/// What one rollout did, as the budget watcher saw it.
pub struct Rollout {
    pub key: String,
    /// Image change -> every Ready node runs an available new pod; `None` when it did not
    /// get there (stalled, cut short or timed out).
    pub makespan: Option<Duration>,
    /// How long it was watched.
    pub watched: Duration,
    /// Ready nodes and, of them, updated, at the end.
    pub ready_nodes: usize,
    pub updated: usize,
    pub peak_unavailable: usize,
    pub violations: usize,
    pub samples: Vec<Sample>,
    pub events: Vec<(Duration, Kind, String)>,
    pub watch_errors: usize,
}

impl Prepared {
    async fn patch(&self, patch: serde_json::Value) -> Result<(), String> {
        Api::<DaemonSet>::namespaced(self.client.clone(), &self.ns.name)
            .patch("edge", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(drop)
            .map_err(|e| format!("{}: patching the DaemonSet: {e}", self.key))
    }

    /// Changes the image and watches until every Ready node is updated, or `cut_after`
    /// (to see how far a stalled rollout gets), or `timeout`.
    pub async fn roll(
        &self,
        timeout: Duration,
        cut_after: Option<Duration>,
    ) -> Result<Rollout, String> {
        self.roll_with(TemplateChange::Image, timeout, cut_after)
            .await
    }

    /// `roll` with the template change of choice.
    pub async fn roll_with(
        &self,
        change: TemplateChange,
        timeout: Duration,
        cut_after: Option<Duration>,
    ) -> Result<Rollout, String> {
        let patch = match change {
            TemplateChange::Image => {
                json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": NEW_IMAGE}]}}}})
            }
            TemplateChange::AnnotationOnly => {
                let (key, value) = NEW_REVISION_ANNOTATION;
                json!({"spec": {"template": {"metadata": {"annotations": {key: value}}}}})
            }
            TemplateChange::ImageTo(image) => {
                json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": image}]}}}})
            }
        };
        let t0 = self.watcher.mark();
        self.patch(patch).await?;
        note(format!("{}: template changed ({change:?})", self.key));
        let mut last_note = Instant::now();
        let makespan = loop {
            let (ready, updated) = self.watcher.ready_progress();
            if ready > 0 && updated == ready {
                break Some(t0.elapsed());
            }
            let limit = cut_after.unwrap_or(timeout).min(timeout);
            if t0.elapsed() >= limit {
                note(format!(
                    "{}: {updated} of {ready} Ready nodes updated after {:.1} s; stop watching",
                    self.key,
                    t0.elapsed().as_secs_f64()
                ));
                break None;
            }
            if last_note.elapsed() > Duration::from_secs(10) {
                note(format!(
                    "{}: {updated} of {ready} Ready nodes updated",
                    self.key
                ));
                last_note = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let watched = t0.elapsed();
        if let Some(m) = makespan {
            note(format!(
                "{}: complete in {:.2} s",
                self.key,
                m.as_secs_f64()
            ));
        }
        let (ready_nodes, updated) = self.watcher.ready_progress();
        Ok(Rollout {
            key: self.key.clone(),
            makespan,
            watched,
            ready_nodes,
            updated,
            peak_unavailable: self.watcher.peak_unavailable(),
            violations: self.watcher.violations(),
            samples: self.watcher.samples_since(t0),
            events: self.watcher.events_since(t0),
            watch_errors: self.watcher.watch_errors(),
        })
    }

    /// After `restored_at` (heartbeats back on `nodes`): for each node, its Ready
    /// transition -> its new pod Ready. Nodes not upgraded within `timeout` are `None`.
    /// Hands the DaemonSet to the upgrade controllers (AdvancedRollingUpdate) or takes it
    /// away (no strategy annotation: plain OnDelete, which neither controller touches).
    pub async fn set_managed(&self, managed: bool) -> Result<(), String> {
        let strategy = managed.then_some("AdvancedRollingUpdate");
        self.patch(json!({"metadata": {"annotations": {STRATEGY: strategy}}}))
            .await
    }

    pub async fn comeback(
        &self,
        nodes: &[String],
        restored_at: Instant,
        timeout: Duration,
    ) -> Vec<Option<Duration>> {
        let deadline = restored_at + timeout;
        while Instant::now() < deadline && !nodes.iter().all(|n| self.watcher.node_updated(n)) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let changes = self.watcher.node_ready_changes_since(restored_at);
        nodes
            .iter()
            .map(|node| {
                let ready_at = changes
                    .iter()
                    .find(|(_, n, ready)| n == node && *ready)
                    .map(|(at, ..)| *at)?;
                let upgraded = self.watcher.new_ready_at(node, restored_at)?;
                Some(upgraded.saturating_duration_since(ready_at))
            })
            .collect()
    }

    /// OTA: the image changes; the time until every pod carries `PodNeedUpgrade=True`.
    /// Then the DaemonSet stops being OTA (annotation removed): after `linger`, how
    /// many pods still carry the condition. Returns (time, pods, left behind).
    pub async fn ota(
        &self,
        timeout: Duration,
        linger: Duration,
    ) -> Result<(Option<Duration>, usize, usize), String> {
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": NEW_IMAGE}]}}}});
        let t0 = self.watcher.mark();
        self.patch(patch).await?;
        let marked_in = loop {
            let (pods, marked, _) = self.watcher.need_upgrade();
            if pods > 0 && marked == pods {
                break Some(t0.elapsed());
            }
            if t0.elapsed() > timeout {
                note(format!(
                    "{}: {marked} of {pods} pods PodNeedUpgrade=True after {timeout:?}",
                    self.key
                ));
                break None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        if let Some(d) = marked_in {
            note(format!(
                "{}: every pod PodNeedUpgrade=True in {:.2} s",
                self.key,
                d.as_secs_f64()
            ));
        }
        self.patch(json!({"metadata": {"annotations": {STRATEGY: null}}}))
            .await?;
        tokio::time::sleep(linger).await;
        let (pods, _, carrying) = self.watcher.need_upgrade();
        note(format!(
            "{}: {linger:?} after the DaemonSet stopped being OTA, {carrying} of {pods} pods still carry PodNeedUpgrade",
            self.key
        ));
        Ok((marked_in, pods, carrying))
    }

    /// Deletes the namespace and waits (bounded) until its pods are gone, so the next
    /// scenario does not share the machine with a teardown.
    pub async fn cleanup(self) {
        let watcher = self.watcher;
        self.ns.cleanup().await;
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline && watcher.pod_count() > 0 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
