//! OTA: `PodNeedUpgrade` written on every pod whose condition is missing or stale, and
//! removed from the pods of a DaemonSet that stopped being OTA.
use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;

use super::context::Context;
use super::observe::owned;
use crate::apply::ConditionPatch;
use crate::apply::Error;
use crate::daemonset::decide::RESYNC;
use crate::daemonset::ota_plan::{plan_leftover_condition_removals, plan_need_upgrade_conditions};
use crate::names::POD_NEED_UPGRADE_CONDITION;
use crate::object::CachedPod;

/// OTA: write `PodNeedUpgrade` on every pod whose condition is missing or stale.
pub(super) async fn mark_need_upgrade(ds: &DaemonSet, ctx: &Context) -> Result<Action, Error> {
    let (pods, current) = owned(ds, ctx);
    let updates = plan_need_upgrade_conditions(ds, current.as_ref(), &pods, Timestamp::now());
    let need = updates
        .iter()
        .filter(|u| u.condition.status == "True")
        .count();
    // Strategic merge on the conditions list (merge key `type`): touches only our
    // condition, so concurrent kubelet writes are not overwritten. Each from its cached
    // pod: a resync that reads a pod before our last write reached the cache does not
    // send that write again.
    let cached = by_name(&pods);
    let writes = updates.into_iter().map(|u| {
        let seen = cached.get(u.name.as_str()).copied();
        planned_from(
            ConditionPatch::set(u.namespace, u.name, None, &u.condition),
            seen,
        )
    });
    let landed = ctx.writer.write_conditions(writes.collect()).await?;
    if !landed.is_empty() {
        tracing::info!(
            written = landed.len(),
            need_upgrade = need,
            "PodNeedUpgrade conditions written"
        );
    }
    Ok(Action::requeue(RESYNC))
}

/// The DaemonSet's cached pods by name (they share its namespace).
pub(super) fn by_name(pods: &[Arc<CachedPod>]) -> HashMap<&str, &CachedPod> {
    pods.iter()
        .filter_map(|p| Some((p.metadata.name.as_deref()?, &**p)))
        .collect()
}

/// `write` as planned from its cached pod, when there is one.
pub(super) fn planned_from(write: ConditionPatch, pod: Option<&CachedPod>) -> ConditionPatch {
    match pod {
        Some(pod) => write.planned_from(&pod.metadata),
        None => write,
    }
}

/// A DaemonSet that stopped being OTA must not leave `PodNeedUpgrade` behind.
pub(super) async fn remove_leftover_conditions(
    ds: &DaemonSet,
    ctx: &Context,
    pods: &[Arc<CachedPod>],
) -> Result<Action, Error> {
    let cached = by_name(pods);
    let writes = plan_leftover_condition_removals(ds, pods)
        .into_iter()
        .map(|leftover| {
            let seen = cached.get(leftover.name.as_str()).copied();
            let write = ConditionPatch::remove(
                leftover.namespace,
                leftover.name,
                POD_NEED_UPGRADE_CONDITION,
            );
            planned_from(write, seen)
        });
    for removed in ctx.writer.write_conditions(writes.collect()).await? {
        tracing::info!(pod = %removed.name, "removed a PodNeedUpgrade condition left from OTA");
    }
    Ok(Action::requeue(RESYNC))
}
