//! `rollgate.io/on-failure: rollback`, executed: the DaemonSet's template goes back to
//! the revision the decision chose (`failure::rollback`), as `kubectl rollout undo
//! daemonset` does it, and the failed revision is recorded in
//! `rollgate.io/rolled-back-from` in the same write.
//!
//! One strategic merge patch of the DaemonSet: the target ControllerRevision's `data`
//! (the template, with `$patch: replace`), the record, and the DaemonSet's
//! resourceVersion as a precondition. A template changed since the cache saw it (a
//! person's fix, a GitOps sync) answers 409 and wins: the next reconcile decides on it.
//! Nothing is deleted in this reconcile; once the native controller has numbered the
//! target newest, the plan replaces the failed revision's pods like any old pods: those
//! not available first, within the budget.
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use kube::api::{Api, Patch};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use serde_json::{json, Value};

use super::context::Context;
use crate::apply::{event, patch_params, Call, Error};
use crate::daemonset::decide::TARGET_RECHECK;
use crate::daemonset::failure::{Halt, RevisionRef, RolledBackFrom};
use crate::names::{ROLLED_BACK_EVENT, ROLLED_BACK_FROM_ANNOTATION};

/// Puts `ds`'s template back to `target` and records `halt.revision` as rolled back from.
pub(super) async fn roll_back(
    ds: &DaemonSet,
    ctx: &Context,
    halt: &Halt,
    target: &RevisionRef,
) -> Result<Action, Error> {
    let (ns, name) = (ds.namespace().unwrap_or_default(), ds.name_any());
    let revisions: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), &ns);
    // The watch keeps no template (`prune::revision`): the one rolled back to is read.
    let revision = match revisions.get_opt(&target.name).await {
        Ok(Some(revision)) => revision,
        Ok(None) => {
            tracing::info!(revision = %target.name, "the revision to roll back to is gone; deciding again");
            return Ok(Action::requeue(TARGET_RECHECK));
        }
        Err(source) => return Err(Error::new(Call::ReadRevision, &ns, &target.name, source)),
    };
    let Some(patch) = rollback_patch(ds, &revision.data.0, halt) else {
        tracing::warn!(revision = %target.name, "the revision to roll back to holds no template; halted instead");
        return Ok(Action::await_change());
    };
    let daemonsets: Api<DaemonSet> = Api::namespaced(ctx.client.clone(), &ns);
    match daemonsets
        .patch(&name, &patch_params(), &Patch::Strategic(&patch))
        .await
    {
        Ok(_) => {}
        // Changed since the cache saw it: decided again on what it is now.
        Err(kube::Error::Api(status)) if status.code == 409 => {
            tracing::info!("the DaemonSet changed before the rollback was written; deciding again");
            return Ok(Action::requeue(TARGET_RECHECK));
        }
        Err(source) => return Err(Error::new(Call::PatchDaemonSet, &ns, &name, source)),
    }
    ctx.metrics.count_rollback(&ns, &name);
    let message = format!(
        "revision {} failed on {} of {} Ready node(s) ({}): the template is back to revision {} ({}), and the failed pods are replaced first, within the budget. {} is recorded in {ROLLED_BACK_FROM_ANNOTATION} and is not rolled out again until it is taken out of it",
        halt.revision,
        halt.failed.len(),
        halt.reached,
        halt.reasons,
        target.hash,
        target.name,
        halt.revision,
    );
    tracing::warn!(from = %halt.revision, to = %target.hash, %message, "rolled back");
    let warning = event(EventType::Warning, ROLLED_BACK_EVENT, "Rollback", message);
    ctx.events.publish_detached(ds.object_ref(&()), warning);
    Ok(Action::requeue(TARGET_RECHECK))
}

/// The patch: the revision's `data` (`{"spec": {"template": {"$patch": "replace", ...}}}`),
/// with the record and the resourceVersion precondition. `None` when `data` holds no
/// template.
fn rollback_patch(ds: &DaemonSet, data: &Value, halt: &Halt) -> Option<Value> {
    data.pointer("/spec/template")?.as_object()?;
    let mut patch = data.clone();
    let record = RolledBackFrom::of(ds).with(&halt.revision);
    patch.as_object_mut()?.insert(
        "metadata".into(),
        json!({
            "resourceVersion": ds.resource_version(),
            "annotations": { ROLLED_BACK_FROM_ANNOTATION: record },
        }),
    );
    Some(patch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::DaemonSetBuilder;

    fn halt() -> Halt {
        Halt {
            revision: "bad".into(),
            failed: Vec::new(),
            reached: 2,
            threshold: 2,
            reasons: "CrashLoopBackOff: 2".into(),
            rollback: None,
        }
    }

    #[test]
    fn the_patch_is_the_revisions_template_with_the_record_and_a_precondition() {
        let mut ds = DaemonSetBuilder::new("agent")
            .rolled_back_from("older")
            .build();
        ds.metadata.resource_version = Some("42".into());
        let data = json!({"spec": {"template": {"$patch": "replace", "spec": {"containers": [{"name": "c", "image": "good"}]}}}});
        let patch = rollback_patch(&ds, &data, &halt()).unwrap();
        assert_eq!(
            patch["spec"], data["spec"],
            "the template as the revision stores it"
        );
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        assert_eq!(
            patch["metadata"]["annotations"][ROLLED_BACK_FROM_ANNOTATION],
            "older,bad"
        );
        assert_eq!(
            rollback_patch(&ds, &json!({"spec": {}}), &halt()),
            None,
            "no template, no patch"
        );
    }
}
