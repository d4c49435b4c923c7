//! One reconcile: which model the DaemonSet asks for (`policy`), and the path that
//! serves it; the Warnings said when rollgate does not act.
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use kube::runtime::controller::Action;
use kube::ResourceExt;

use super::context::Context;
use super::native_waits::{native_wait_over, wait_on_native};
use super::observe::owned;
use super::ota::{mark_need_upgrade, remove_leftover_conditions};
use super::rolling::{rolling_update, Controls};
use super::warnings::warn_once;
use crate::apply::Error;
use crate::daemonset::native_wait::NativeWait;
use crate::daemonset::policy::{policy_for, Policy, PolicyDecision};
use crate::daemonset::revision::generation_observed;
use crate::names::UPDATE_STRATEGY_NOT_ON_DELETE_EVENT;

#[tracing::instrument(skip_all, fields(daemonset = %ds.name_any(), namespace = %ds.namespace().unwrap_or_default()))]
pub(super) async fn reconcile(ds: Arc<DaemonSet>, ctx: Arc<Context>) -> Result<Action, Error> {
    let policy = policy_for(&ds);
    if !matches!(
        policy,
        PolicyDecision::Managed(Policy::AdvancedRollingUpdate { .. })
    ) {
        // Only rolling plans read the memo; it would keep old pod versions alive.
        ctx.plan_memos
            .lock()
            .unwrap()
            .remove(&ds.uid().unwrap_or_default());
    }
    match policy {
        PolicyDecision::Unmanaged => {
            remove_leftover_conditions(&ds, &ctx, &owned(&ds, &ctx).0).await
        }
        PolicyDecision::NotOurs { reason } => {
            warn_once(&ds, &ctx, UPDATE_STRATEGY_NOT_ON_DELETE_EVENT, &reason).await;
            remove_leftover_conditions(&ds, &ctx, &owned(&ds, &ctx).0).await
        }
        PolicyDecision::Invalid(error) => {
            warn_once(
                &ds,
                &ctx,
                error.event_reason(),
                &format!("{error}; no pod is touched until it is fixed"),
            )
            .await;
            Ok(Action::await_change())
        }
        // The native controller has not processed the latest spec: its newest revision
        // may not be the target yet (a rollback a -> b -> a would then delete or mark
        // pods already on a). Its status update wakes us; a stall is said.
        PolicyDecision::Managed(_) if !generation_observed(&ds) => {
            let wait = NativeWait::GenerationNotObserved {
                generation: ds.metadata.generation.unwrap_or_default(),
                observed: ds.status.as_ref().and_then(|s| s.observed_generation),
            };
            Ok(wait_on_native(&ds, &ctx, wait, None).await)
        }
        PolicyDecision::Managed(Policy::AdvancedRollingUpdate {
            max_unavailable,
            paused,
            partition,
            node_selector,
            failure,
            waves,
        }) => {
            let controls = Controls {
                max_unavailable,
                paused,
                partition,
                node_selector: node_selector.as_ref(),
                failure,
                waves: waves.as_ref(),
            };
            rolling_update(&ds, &ctx, controls).await
        }
        PolicyDecision::Managed(Policy::Ota) => {
            native_wait_over(&ds, &ctx);
            mark_need_upgrade(&ds, &ctx).await
        }
    }
}
