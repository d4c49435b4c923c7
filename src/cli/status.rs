//! `rollgate status daemonset/NAME`: the planner's view of a rollout, for people.
//!
//! It runs the same pure planner as the controller on freshly listed objects, so what it
//! prints is exactly what the controller would decide now.
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use indicatif::{ProgressBar, ProgressStyle};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Event as CoreEvent, Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::{Api, ResourceExt};

use super::output::print;
use super::StatusCommandArgs;
use crate::daemonset::describe::{describe_pull_ahead, describe_waves, describe_with, shorten};
use crate::daemonset::failure::rollback::owned_revisions;
use crate::daemonset::failure::{assess, halt_recorded, hold_on_failure};
use crate::daemonset::other_updater::{self, OtherUpdaters, OTHER_UPDATER_DEFAULT_QUIET_SECS};
use crate::daemonset::policy::{policy_for, Policy, PolicyDecision};
use crate::daemonset::pull_ahead::{pull_ahead_of, GaveUp, PullAheadView};
use crate::daemonset::revision::{generation_observed, CurrentRevision};
use crate::daemonset::rolling_plan::{plan_rolling_update, Blocker, RollingInput};
use crate::names::{
    POD_NEED_UPGRADE_CONDITION, PULL_AHEAD_GAVE_UP_EVENT, UPDATE_STRATEGY_ANNOTATION,
};
use crate::object::is_controlled_by;
use crate::runtime::{self, Shutdown};

/// Every object `api` lists, shared as the planner takes them.
async fn list_shared<K>(api: &Api<K>) -> kube::Result<Vec<Arc<K>>>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let list = api.list(&ListParams::default()).await?;
    Ok(list.items.into_iter().map(Arc::new).collect())
}

/// Parses `daemonset/NAME` or `ds/NAME`.
pub fn parse_target(target: &str) -> anyhow::Result<&str> {
    match target.split_once('/') {
        Some(("daemonset" | "daemonsets" | "ds", name)) if !name.is_empty() => Ok(name),
        _ => bail!("cannot show status of {target:?}: expected daemonset/NAME or ds/NAME"),
    }
}

/// One rendering of a rollout's state.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    pub lines: Vec<String>,
    pub updated: usize,
    pub total: usize,
    pub complete: bool,
    /// Not complete, but nothing more happens until the operator changes
    /// `rollgate.io/partition` or `rollgate.io/node-selector`: `--watch` stops here too.
    pub held_back: bool,
    /// Pull-ahead, when the DaemonSet asks for it (`rollgate.io/pull-ahead: "true"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pull_ahead: Option<PullAheadView>,
}

/// `gave_up`: what the DaemonSet's `PullAheadGaveUp` Warnings say (see `gave_up_of`).
pub fn summarize(
    ds: &DaemonSet,
    revisions: &[ControllerRevision],
    pods: &[Arc<Pod>],
    nodes: &[Arc<Node>],
    gave_up: &[GaveUp],
) -> Summary {
    let name = ds.name_any();
    let current = CurrentRevision::of(ds, revisions);
    match policy_for(ds) {
        PolicyDecision::Unmanaged => Summary {
            lines: vec![format!("daemonset/{name} has no {UPDATE_STRATEGY_ANNOTATION} annotation: not managed by rollgate")],
            updated: 0,
            total: 0,
            complete: true,
            held_back: false,
            pull_ahead: None,
        },
        PolicyDecision::NotOurs { reason } => Summary { lines: vec![reason], updated: 0, total: 0, complete: true, held_back: false, pull_ahead: None },
        PolicyDecision::Invalid(e) => Summary { lines: vec![format!("blocked: {e}")], updated: 0, total: 0, complete: false, held_back: false, pull_ahead: None },
        PolicyDecision::Managed(_) if !generation_observed(ds) => Summary {
            lines: vec![format!("daemonset/{name}: waiting for the DaemonSet controller to observe the latest spec")],
            updated: 0,
            total: 0,
            complete: false,
            held_back: false,
            pull_ahead: None,
        },
        PolicyDecision::Managed(Policy::Ota) => {
            let uid = ds.uid().unwrap_or_default();
            let mine: Vec<&Pod> = pods.iter().map(|p| &**p).filter(|p| is_controlled_by(p, &uid)).collect();
            let updated = mine.iter().filter(|p| current.as_ref().is_some_and(|c| c.is_pod_updated(p))).count();
            let need: Vec<String> = mine
                .iter()
                .filter(|p| {
                    p.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|cs| {
                        cs.iter().any(|c| c.type_ == POD_NEED_UPGRADE_CONDITION && c.status == "True")
                    })
                })
                .map(|p| p.name_any())
                .collect();
            let mut lines = vec![format!("daemonset/{name} (OTA): {updated}/{} pods at the current revision", mine.len())];
            if !need.is_empty() {
                lines.push(format!("waiting for the node operator to upgrade: {}", need.join(", ")));
            }
            Summary { lines, updated, total: mine.len(), complete: updated == mine.len(), held_back: false, pull_ahead: None }
        }
        PolicyDecision::Managed(Policy::AdvancedRollingUpdate {
            max_unavailable,
            paused,
            partition,
            node_selector,
            failure,
            waves,
        }) => {
            let now = Timestamp::now();
            let plan = plan_rolling_update(&RollingInput {
                daemonset: ds,
                current: current.as_ref(),
                pods,
                nodes,
                max_unavailable,
                now,
                expected_deletions: &Default::default(),
                vacated_by_us: &Default::default(),
                limits: Default::default(),
                partition,
                node_selector: node_selector.as_ref(),
                waves: waves.as_ref(),
                proving: failure.proving(),
                // The pull-ahead view below reads it.
                list_upcoming: matches!(pull_ahead_of(ds), Ok(true)),
            });
            // The failure rule as the controller applies it, with the halt it recorded on
            // the DaemonSet (`rollgate.io/halted-revision`): it holds while any pod of the
            // revision is failed, below the threshold too.
            let failures = assess(pods, nodes, ds, current.as_ref(), &failure, now);
            let revisions = owned_revisions(ds, revisions);
            let halted_earlier = halt_recorded(ds, current.as_ref());
            let (plan, halt) = hold_on_failure(plan, &failures, &failure, ds, current.as_ref(), &revisions, halted_earlier);
            let plan = match (&halt, &plan.progress.blocked) {
                (None, Some(Blocker::RolledBackBefore { .. })) => plan,
                (None, _) if paused => plan.paused(),
                _ => plan,
            };
            let p = &plan.progress;
            let mut lines = vec![format!(
                "daemonset/{name} (AdvancedRollingUpdate, max-unavailable {max_unavailable} = {} node(s)): {}/{} nodes updated, {} unavailable, {} candidate(s) left",
                p.budget, p.updated, p.total_nodes, p.unavailable, p.candidates
            )];
            if !p.missing_nodes_skipped.is_empty() {
                lines.push(format!("pods on missing Node objects (skipped): {}", p.missing_nodes_skipped.join(", ")));
            }
            // Pull-ahead as the controller applies it: made on the plan as held by a pause.
            let hash = current.as_ref().and_then(|c| c.hash.as_deref());
            let (pull_ahead, invalid) = match (pull_ahead_of(ds), hash) {
                (Ok(true), Some(hash)) => {
                    (Some(PullAheadView::of(&plan, pods, &ds.uid().unwrap_or_default(), hash, gave_up)), None)
                }
                (Ok(_), _) => (None, None),
                (Err(e), _) => (None, Some(e)),
            };
            lines.push(describe_with(p, pull_ahead.as_ref()));
            if let Some(waves) = &p.waves {
                lines.push(describe_waves(waves));
            }
            if !failures.failed.is_empty() {
                let failed: Vec<String> = failures.failed.iter().map(|f| format!("{} on {} ({})", f.pod, f.node, f.reason)).collect();
                lines.push(format!("failed pods of revision {} ({} of {} on Ready nodes): {}", failures.revision, failed.len(), failures.reached, shorten(&failed)));
            }
            if let Some(view) = &pull_ahead {
                lines.push(describe_pull_ahead(view));
            }
            // The controller deletes nothing until the value is fixed.
            if let Some(e) = &invalid {
                lines.push(format!("blocked: {e}"));
            }
            // A halt, like a hold, waits on the operator: `--watch` stops there too.
            let held_back = matches!(p.blocked, Some(Blocker::HeldBack | Blocker::Halted { .. } | Blocker::RolledBackBefore { .. })) && invalid.is_none();
            let complete = plan.is_complete();
            Summary { lines, updated: p.updated, total: p.total_nodes, complete, held_back, pull_ahead }
        }
    }
}

/// The nodes pull-ahead gave up on, from the DaemonSet's `PullAheadGaveUp` Warnings (while
/// the API server keeps them: an hour by default).
async fn gave_up_of(events: &Api<CoreEvent>, name: &str) -> anyhow::Result<Vec<GaveUp>> {
    let selector = format!(
        "involvedObject.kind=DaemonSet,involvedObject.name={name},reason={PULL_AHEAD_GAVE_UP_EVENT}"
    );
    Ok(events
        .list(&ListParams::default().fields(&selector))
        .await?
        .items
        .iter()
        .filter_map(|e| GaveUp::from_note(e.message.as_deref()?))
        .collect())
}

/// The summary for people: its lines.
fn table(summary: &Summary) -> String {
    summary.lines.iter().map(|l| format!("{l}\n")).collect()
}

/// Another updater's recent deletions on the DaemonSet, read from its Events the way the
/// controller reads them (`daemonset::other_updater`), judged with the controller's
/// default quiet period.
async fn other_updater_line(
    events: &Api<CoreEvent>,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Option<String>> {
    let quiet = Duration::from_secs(OTHER_UPDATER_DEFAULT_QUIET_SECS);
    let others = OtherUpdaters::new(quiet);
    let selector = format!(
        "{},involvedObject.name={name}",
        other_updater::field_selector()
    );
    for event in events
        .list(&ListParams::default().fields(&selector))
        .await?
        .items
    {
        if let Some(sighting) = other_updater::sighting_of(&event) {
            others.record(sighting);
        }
    }
    Ok(others
        .active(namespace, name, Timestamp::now())
        .map(|(sighting, _)| {
            format!(
                "held back: {} (last: {})",
                sighting.explain(quiet),
                sighting.what
            )
        }))
}

pub async fn run(args: StatusCommandArgs, shutdown: Shutdown) -> anyhow::Result<()> {
    let name = parse_target(&args.target)?.to_string();
    let client = runtime::connect("status").await?;
    let namespace = args
        .namespace
        .unwrap_or_else(|| client.default_namespace().to_string());
    let ds_api: Api<DaemonSet> = Api::namespaced(client.clone(), &namespace);
    let rev_api: Api<ControllerRevision> = Api::namespaced(client.clone(), &namespace);
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let node_api: Api<Node> = Api::all(client.clone());
    let event_api: Api<CoreEvent> = Api::namespaced(client.clone(), &namespace);
    let mut stop = std::pin::pin!(shutdown.requested());
    let bar = args.watch.then(|| {
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template("[{bar:30}] {pos:>3}/{len} {wide_msg}")
                .expect("a valid template")
                .progress_chars("#>-"),
        );
        bar
    });
    loop {
        let ds = ds_api
            .get_opt(&name)
            .await?
            .with_context(|| format!("daemonset/{name} not found in namespace {namespace}"))?;
        let revisions = rev_api.list(&ListParams::default()).await?.items;
        let pods: Vec<Arc<Pod>> = list_shared(&pod_api).await?;
        let nodes: Vec<Arc<Node>> = list_shared(&node_api).await?;
        let gave_up = gave_up_of(&event_api, &name).await?;
        let mut summary = summarize(&ds, &revisions, &pods, &nodes, &gave_up);
        if let Some(line) = other_updater_line(&event_api, &namespace, &name).await? {
            summary.lines.push(line);
            summary.complete = false;
            summary.held_back = false;
        }
        let Some(bar) = &bar else {
            return print(args.output, &summary, table);
        };
        bar.set_length(summary.total as u64);
        bar.set_position(summary.updated as u64);
        bar.set_message(summary.lines.last().cloned().unwrap_or_default());
        if summary.complete || summary.held_back {
            bar.finish();
            return print(args.output, &summary, table);
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = &mut stop => { bar.abandon(); return Ok(()); }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_name_the_accepted_forms_when_wrong() {
        assert_eq!(parse_target("daemonset/edge").unwrap(), "edge");
        assert_eq!(parse_target("ds/edge").unwrap(), "edge");
        let err = parse_target("deployment/web").unwrap_err().to_string();
        assert!(err.contains("daemonset/NAME"), "{err}");
        assert!(parse_target("ds/").is_err());
    }

    /// Two Ready nodes on the old revision, budget 1, pull-ahead on: n0's pull is in
    /// flight, n1's failed once; n9 went ahead without its images (a Warning says so).
    #[test]
    fn pulls_holding_deletions_are_said_in_the_table_and_the_document() {
        use crate::names::{
            POD_IMAGE_READY_CONDITION, PULL_IMAGE_FAIL_REASON, PULL_IMAGE_REQUESTED_REASON,
        };
        use crate::revision_message::need_upgrade_message;
        use crate::testkit::{at, node, revision, DaemonSetBuilder, PodBuilder};
        use k8s_openapi::api::core::v1::PodCondition;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

        let summary_of = |pull_ahead: &str| {
            let ds = DaemonSetBuilder::new("edge")
                .strategy("AdvancedRollingUpdate")
                .max_unavailable("1")
                .pull_ahead(pull_ahead)
                .on_delete()
                .build();
            let revisions = vec![revision(&ds, "old", 1), revision(&ds, "new", 2)];
            let pull = |reason: &str| PodCondition {
                type_: POD_IMAGE_READY_CONDITION.into(),
                status: "False".into(),
                reason: Some(reason.into()),
                message: Some(need_upgrade_message("new")),
                last_transition_time: Some(Time(at(10))),
                ..Default::default()
            };
            let pods: Vec<Arc<Pod>> = [
                ("p0", "n0", PULL_IMAGE_REQUESTED_REASON),
                ("p1", "n1", PULL_IMAGE_FAIL_REASON),
            ]
            .into_iter()
            .map(|(pod, on, reason)| {
                Arc::new(
                    PodBuilder::new(pod, &ds)
                        .hash("old")
                        .on_node(on)
                        .ready_since(at(0))
                        .with_condition(pull(reason))
                        .build(),
                )
            })
            .collect();
            let nodes = vec![Arc::new(node("n0", true)), Arc::new(node("n1", true))];
            let gave_up = [GaveUp {
                node: "n9".into(),
                pod: "p9".into(),
                failures: 2,
                revision: "new".into(),
            }];
            summarize(&ds, &revisions, &pods, &nodes, &gave_up)
        };
        let on = summary_of("true");
        let view = on.pull_ahead.as_ref().expect("pull-ahead is on");
        assert_eq!(view.pulling, ["n0"]);
        assert_eq!(view.failed, ["n1"]);
        assert_eq!(view.held.len(), 1, "{view:?}");
        let text = table(&on);
        assert!(text.contains("waiting for pull-ahead"), "{text}");
        assert!(!text.contains("progressing"), "{text}");
        assert!(
            text.contains("pulling the new images on 1 node(s): n0"),
            "{text}"
        );
        assert!(text.contains("n9 (2 failed pull(s))"), "{text}");
        let json = serde_json::to_value(&on).unwrap();
        assert_eq!(json["pull_ahead"]["pulling"], serde_json::json!(["n0"]));
        assert_eq!(json["pull_ahead"]["gave_up"][0]["node"], "n9");
        assert_eq!(json["pull_ahead"]["gave_up"][0]["failures"], 2);

        // Off: no pull-ahead line, no field.
        let off = summary_of("false");
        assert!(off.pull_ahead.is_none());
        assert!(serde_json::to_value(&off)
            .unwrap()
            .get("pull_ahead")
            .is_none());
        assert!(!table(&off).contains("pull-ahead"), "{}", table(&off));
        // A bad value blocks, as in the controller.
        let bad = summary_of("yes");
        assert!(
            table(&bad).contains("blocked: invalid value \"yes\""),
            "{}",
            table(&bad)
        );
        assert!(!bad.held_back);
    }
}
