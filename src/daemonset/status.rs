//! `rollgate status daemonset/NAME`: the planner's view of a rollout, for people.
//!
//! It runs the same pure planner as the controller on freshly listed objects, so what it
//! prints is exactly what the controller would decide now.
use std::io::Write;
use std::time::Duration;

use anyhow::{bail, Context as _};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::{Api, ResourceExt};

use super::ota_plan::POD_NEED_UPGRADE_CONDITION;
use super::policy::{policy_for, Policy, PolicyDecision};
use super::revision::{is_controlled_by, CurrentRevision};
use super::rolling_plan::{plan_rolling_update, Blocker, RollingInput};
use crate::cli::StatusArgs;
use crate::runtime::{self, Shutdown};

/// Parses `daemonset/NAME` or `ds/NAME`.
pub fn parse_target(target: &str) -> anyhow::Result<&str> {
    match target.split_once('/') {
        Some(("daemonset" | "daemonsets" | "ds", name)) if !name.is_empty() => Ok(name),
        _ => bail!("cannot show status of {target:?}: expected daemonset/NAME or ds/NAME"),
    }
}

/// One rendering of a rollout's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub lines: Vec<String>,
    pub updated: usize,
    pub total: usize,
    pub complete: bool,
}

pub fn summarize(
    ds: &DaemonSet,
    revisions: Vec<ControllerRevision>,
    pods: Vec<Pod>,
    nodes: Vec<Node>,
) -> Summary {
    let name = ds.name_any();
    match policy_for(ds) {
        PolicyDecision::Unmanaged => Summary {
            lines: vec![format!("daemonset/{name} has no apps.openyurt.io/update-strategy annotation: not managed by rollgate")],
            updated: 0,
            total: 0,
            complete: true,
        },
        PolicyDecision::NotOurs { reason } => Summary { lines: vec![reason], updated: 0, total: 0, complete: true },
        PolicyDecision::Invalid(e) => Summary { lines: vec![format!("blocked: {e}")], updated: 0, total: 0, complete: false },
        PolicyDecision::Managed(Policy::Ota) => {
            let uid = ds.uid().unwrap_or_default();
            let current = CurrentRevision::of(ds, &revisions);
            let mine: Vec<&Pod> = pods.iter().filter(|p| is_controlled_by(p, &uid)).collect();
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
            Summary { lines, updated, total: mine.len(), complete: updated == mine.len() }
        }
        PolicyDecision::Managed(Policy::AdvancedRollingUpdate { max_unavailable }) => {
            let plan = plan_rolling_update(&RollingInput {
                daemonset: ds.clone(),
                revisions,
                pods,
                nodes,
                max_unavailable,
                now: Timestamp::now(),
                expected_deletions: Default::default(),
            });
            let p = &plan.progress;
            let mut lines = vec![format!(
                "daemonset/{name} (AdvancedRollingUpdate, max-unavailable {max_unavailable} = {} node(s)): {}/{} nodes updated, {} unavailable, {} waiting",
                p.budget, p.updated, p.total_nodes, p.unavailable, p.candidates
            )];
            if !p.not_ready_nodes_skipped.is_empty() {
                lines.push(format!(
                    "NotReady nodes waiting (upgraded when Ready again): {}",
                    p.not_ready_nodes_skipped.join(", ")
                ));
            }
            if !p.missing_nodes_skipped.is_empty() {
                lines.push(format!("pods on missing Node objects (skipped): {}", p.missing_nodes_skipped.join(", ")));
            }
            lines.push(match &p.blocked {
                None => "progressing".to_string(),
                Some(Blocker::Complete) => "rollout complete".to_string(),
                Some(Blocker::BudgetExhausted) => "waiting: the max-unavailable budget is in use".to_string(),
                Some(Blocker::WaitingForAvailability { nodes }) => {
                    format!("waiting for new pods to become available on: {}", nodes.join(", "))
                }
                Some(Blocker::WaitingForSkippedNodes { nodes }) => {
                    format!("Ready nodes done; waiting for {} node(s) to come back", nodes.len())
                }
                Some(Blocker::CurrentRevisionUnknown) => "waiting: current revision unknown (no ControllerRevision yet)".into(),
            });
            Summary { lines, updated: p.updated, total: p.total_nodes, complete: plan.is_complete() }
        }
    }
}

/// A text progress bar, e.g. `[#######-------------]  7/20`.
pub fn progress_bar(done: usize, total: usize, width: usize) -> String {
    let filled = if total == 0 {
        width
    } else {
        (done * width).div_ceil(total).min(width)
    };
    format!(
        "[{}{}] {done:>3}/{total}",
        "#".repeat(filled),
        "-".repeat(width - filled)
    )
}

pub async fn run(args: StatusArgs, shutdown: Shutdown) -> anyhow::Result<()> {
    let name = parse_target(&args.target)?.to_string();
    let client = runtime::connect().await?;
    let namespace = args
        .namespace
        .unwrap_or_else(|| client.default_namespace().to_string());
    let ds_api: Api<DaemonSet> = Api::namespaced(client.clone(), &namespace);
    let rev_api: Api<ControllerRevision> = Api::namespaced(client.clone(), &namespace);
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let node_api: Api<Node> = Api::all(client.clone());
    let mut stop = std::pin::pin!(shutdown.requested());
    loop {
        let ds = ds_api
            .get_opt(&name)
            .await?
            .with_context(|| format!("daemonset/{name} not found in namespace {namespace}"))?;
        let revisions = rev_api.list(&ListParams::default()).await?.items;
        let pods = pod_api.list(&ListParams::default()).await?.items;
        let nodes = node_api.list(&ListParams::default()).await?.items;
        let summary = summarize(&ds, revisions, pods, nodes);
        if args.watch {
            print!(
                "\x1b[2K\r{}  {}",
                progress_bar(summary.updated, summary.total, 30),
                summary.lines.last().unwrap()
            );
            std::io::stdout().flush()?;
            if summary.complete {
                println!();
                for line in &summary.lines {
                    println!("{line}");
                }
                return Ok(());
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = &mut stop => { println!(); return Ok(()); }
            }
        } else {
            for line in &summary.lines {
                println!("{line}");
            }
            return Ok(());
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

    #[test]
    fn the_progress_bar_fills_proportionally() {
        assert_eq!(progress_bar(0, 10, 10), "[----------]   0/10");
        assert_eq!(progress_bar(5, 10, 10), "[#####-----]   5/10");
        assert_eq!(progress_bar(10, 10, 10), "[##########]  10/10");
        assert_eq!(progress_bar(0, 0, 4), "[####]   0/0");
    }
}
