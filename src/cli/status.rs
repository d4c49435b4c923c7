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
use super::StatusArgs;
use crate::daemonset::describe::describe;
use crate::daemonset::other_updater::{self, OtherUpdaters, OTHER_UPDATER_DEFAULT_QUIET_SECS};
use crate::daemonset::policy::{policy_for, Policy, PolicyDecision};
use crate::daemonset::revision::{generation_observed, CurrentRevision};
use crate::daemonset::rolling_plan::{plan_rolling_update, Blocker, RollingInput};
use crate::names::{POD_NEED_UPGRADE_CONDITION, UPDATE_STRATEGY_ANNOTATION};
use crate::object::is_controlled_by;
use crate::runtime::{self, Shutdown};

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
}

pub fn summarize(
    ds: &DaemonSet,
    revisions: &[ControllerRevision],
    pods: &[Arc<Pod>],
    nodes: &[Arc<Node>],
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
        },
        PolicyDecision::NotOurs { reason } => Summary { lines: vec![reason], updated: 0, total: 0, complete: true, held_back: false },
        PolicyDecision::Invalid(e) => Summary { lines: vec![format!("blocked: {e}")], updated: 0, total: 0, complete: false, held_back: false },
        PolicyDecision::Managed(_) if !generation_observed(ds) => Summary {
            lines: vec![format!("daemonset/{name}: waiting for the DaemonSet controller to observe the latest spec")],
            updated: 0,
            total: 0,
            complete: false,
            held_back: false,
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
            Summary { lines, updated, total: mine.len(), complete: updated == mine.len(), held_back: false }
        }
        PolicyDecision::Managed(Policy::AdvancedRollingUpdate {
            max_unavailable,
            paused,
            partition,
            node_selector,
        }) => {
            let plan = plan_rolling_update(&RollingInput {
                daemonset: ds,
                current: current.as_ref(),
                pods,
                nodes,
                max_unavailable,
                now: Timestamp::now(),
                expected_deletions: &Default::default(),
                vacated_by_us: &Default::default(),
                limits: Default::default(),
                partition,
                node_selector: node_selector.as_ref(),
            });
            let plan = if paused { plan.paused() } else { plan };
            let p = &plan.progress;
            let mut lines = vec![format!(
                "daemonset/{name} (AdvancedRollingUpdate, max-unavailable {max_unavailable} = {} node(s)): {}/{} nodes updated, {} unavailable, {} candidate(s) left",
                p.budget, p.updated, p.total_nodes, p.unavailable, p.candidates
            )];
            if !p.missing_nodes_skipped.is_empty() {
                lines.push(format!("pods on missing Node objects (skipped): {}", p.missing_nodes_skipped.join(", ")));
            }
            lines.push(describe(p));
            let held_back = p.blocked == Some(Blocker::HeldBack);
            Summary { lines, updated: p.updated, total: p.total_nodes, complete: plan.is_complete(), held_back }
        }
    }
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

pub async fn run(args: StatusArgs, shutdown: Shutdown) -> anyhow::Result<()> {
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
        let pods: Vec<Arc<Pod>> = pod_api
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .map(Arc::new)
            .collect();
        let nodes: Vec<Arc<Node>> = node_api
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .map(Arc::new)
            .collect();
        let mut summary = summarize(&ds, &revisions, &pods, &nodes);
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
}
