//! Every write under rollgate's one field manager, the one rule for a write that
//! finds its object gone or changed, and no repeat of a write the cache does not show
//! yet (`super::recent_writes`).
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions, PropagationPolicy};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use super::error::{Call, Error};
use super::in_flight::issue_writes;
use super::outcome::Outcome;
use super::recent_writes::RecentWrites;
use crate::names::FIELD_MANAGER;

/// A namespaced kind rollgate writes (pods, Jobs, Services).
pub trait Namespaced:
    Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType: Default>
    + Clone
    + DeserializeOwned
    + Debug
{
}

impl<K> Namespaced for K where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType: Default>
        + Clone
        + DeserializeOwned
        + Debug
{
}

/// Patch parameters of every rollgate patch: its field manager, nothing else.
pub fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    }
}

/// Create parameters of every rollgate create.
pub fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    }
}

/// One strategic-merge patch of one pod's conditions (merge key `type`): only the
/// conditions named are touched, so the kubelet's concurrent writes are not overwritten.
#[derive(Debug, Clone, PartialEq)]
pub struct ConditionPatch {
    pub namespace: String,
    pub name: String,
    pub patch: Value,
    /// The pod as the plan read it (see [`ConditionPatch::planned_from`]).
    pub seen: Option<Seen>,
}

/// An object as a plan read it from the shared cache: which one, at which version.
/// With it, the writer skips a repeat of its own last write that the cache does not
/// show yet ([`Outcome::Repeat`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub uid: String,
    pub resource_version: Option<String>,
}

impl Seen {
    /// `None` without a UID: nothing to remember the write by.
    pub fn of(meta: &ObjectMeta) -> Option<Seen> {
        Some(Seen {
            uid: meta.uid.clone()?,
            resource_version: meta.resource_version.clone(),
        })
    }
}

impl ConditionPatch {
    /// Sets `condition`. With the pod's `uid`, a replaced pod of the same name refuses
    /// the write (409) instead of taking a condition meant for its predecessor.
    pub fn set(
        namespace: impl Into<String>,
        name: impl Into<String>,
        uid: Option<&str>,
        condition: &impl Serialize,
    ) -> Self {
        let mut patch = json!({"status": {"conditions": [condition]}});
        if let Some(uid) = uid {
            patch["metadata"] = json!({"uid": uid});
        }
        ConditionPatch {
            namespace: namespace.into(),
            name: name.into(),
            patch,
            seen: None,
        }
    }

    /// Removes the condition of type `condition_type`.
    pub fn remove(
        namespace: impl Into<String>,
        name: impl Into<String>,
        condition_type: &str,
    ) -> Self {
        ConditionPatch {
            namespace: namespace.into(),
            name: name.into(),
            patch: json!({"status": {"conditions": [{"type": condition_type, "$patch": "delete"}]}}),
            seen: None,
        }
    }

    /// Planned from `pod` as the shared cache holds it: the write is not sent again
    /// while it repeats rollgate's last write of this condition on this pod and the
    /// cache has not caught up with that write (a reconcile right after a write reads
    /// the pod from before it).
    pub fn planned_from(mut self, pod: &ObjectMeta) -> Self {
        self.seen = Seen::of(pod);
        self
    }

    /// The condition type written and what is compared with the last write: the
    /// condition without its timestamps (a repeat planned a second later carries a
    /// later `lastTransitionTime`, and is the same write all the same).
    fn remembered(&self) -> Option<(String, Value)> {
        let mut condition = self.patch["status"]["conditions"].get(0)?.clone();
        let type_ = condition["type"].as_str()?.to_string();
        if let Some(fields) = condition.as_object_mut() {
            fields.remove("lastTransitionTime");
            fields.remove("lastProbeTime");
        }
        Some((type_, condition))
    }
}

/// Writes to the API server as rollgate: every patch and create carries
/// [`FIELD_MANAGER`], every deletion names exactly the object it means (UID).
/// Clones share one memory of recent writes.
#[derive(Clone)]
pub struct Writer {
    client: Client,
    recent: Arc<Mutex<RecentWrites>>,
}

impl Writer {
    pub fn new(client: Client) -> Self {
        Writer {
            client,
            recent: Arc::default(),
        }
    }

    fn api<K: Namespaced>(&self, namespace: &str) -> Api<K> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// A strategic-merge patch of a pod's status, the API's answer as it is (for a
    /// caller that answers each error itself: the agent).
    pub async fn patch_pod_status(
        &self,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> kube::Result<()> {
        self.patch_status_of_pod(namespace, name, patch)
            .await
            .map(drop)
    }

    async fn patch_status_of_pod(
        &self,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> kube::Result<Pod> {
        let pods: Api<Pod> = self.api(namespace);
        pods.patch_status(name, &patch_params(), &Patch::Strategic(patch))
            .await
    }

    /// One condition patch. A pod gone (404) or replaced or changed (409) meanwhile is
    /// skipped, and said so in the outcome: its next event re-plans. Planned from a
    /// cached pod ([`ConditionPatch::planned_from`]), a repeat of the last write that
    /// the cache does not show yet is not sent ([`Outcome::Repeat`]).
    pub async fn write_condition(&self, write: &ConditionPatch) -> Result<Outcome, Error> {
        let remembered = write.seen.as_ref().zip(write.remembered());
        if let Some((seen, (key, value))) = &remembered {
            if self.is_repeat(seen, key, value) {
                tracing::debug!(pod = %write.name, namespace = %write.namespace, condition = %key, "the cache does not show our identical last write yet: not sent again");
                return Ok(Outcome::Repeat);
            }
        }
        let result = self
            .patch_status_of_pod(&write.namespace, &write.name, &write.patch)
            .await;
        let version = result
            .as_ref()
            .ok()
            .and_then(|pod| pod.metadata.resource_version.clone());
        let outcome = Outcome::of(result)
            .map_err(|e| Error::new(Call::WriteCondition, &write.namespace, &write.name, e))?;
        if let Some((seen, (key, value))) = remembered {
            self.remember(seen, &key, value, outcome, version);
        }
        if !outcome.landed() {
            tracing::debug!(pod = %write.name, namespace = %write.namespace, ?outcome, "pod gone or replaced, condition not written");
        }
        Ok(outcome)
    }

    /// Whether writing `value` to `key` of the object as `seen` repeats rollgate's last
    /// write there, which the cache does not show yet (see `super::recent_writes`).
    pub fn is_repeat(&self, seen: &Seen, key: &str, value: &Value) -> bool {
        self.recent.lock().unwrap().is_repeat(
            &seen.uid,
            key,
            value,
            seen.resource_version.as_deref(),
            Instant::now(),
        )
    }

    /// The status (`True`) of rollgate's last condition write of type `key` to the
    /// object with this UID, while remembered (`super::recent_writes`).
    pub fn last_written_status(&self, uid: &str, key: &str) -> Option<bool> {
        let recent = self.recent.lock().unwrap();
        let value = recent.last_value(uid, key)?;
        Some(value["status"].as_str()? == "True")
    }

    /// Drops what is remembered of the object with this UID (it is gone).
    pub fn forget_object(&self, uid: &str) {
        self.recent.lock().unwrap().forget_object(uid);
    }

    /// What became of a write of `value` to `key` of the object `seen`: one that
    /// landed is remembered with the object's new `version`; a gone object is
    /// forgotten, and so is a write refused.
    pub fn remember(
        &self,
        seen: &Seen,
        key: &str,
        value: Value,
        outcome: Outcome,
        version: Option<String>,
    ) {
        let mut recent = self.recent.lock().unwrap();
        match outcome {
            Outcome::Written => recent.wrote(&seen.uid, key, value, version, Instant::now()),
            Outcome::Gone => recent.forget_object(&seen.uid),
            Outcome::Changed => recent.forget(&seen.uid, key),
            Outcome::Repeat => {}
        }
    }

    /// The condition patches of one plan, in flight together (see [`issue_writes`]);
    /// returns those that landed.
    pub async fn write_conditions(
        &self,
        writes: Vec<ConditionPatch>,
    ) -> Result<Vec<ConditionPatch>, Error> {
        issue_writes(writes, |w| async move {
            let outcome = self.write_condition(&w).await;
            (w, outcome)
        })
        .await
    }

    /// Deletes exactly the object with this `uid` (a precondition: a newer object that
    /// took the name is never hit), the API's answer as it is.
    pub async fn delete_exact<K>(
        &self,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
        propagation: Option<PropagationPolicy>,
    ) -> kube::Result<()>
    where
        K: Namespaced,
    {
        let api: Api<K> = self.api(namespace);
        let params = DeleteParams {
            preconditions: uid.map(|uid| Preconditions {
                uid: Some(uid.into()),
                resource_version: None,
            }),
            propagation_policy: propagation,
            ..DeleteParams::default()
        };
        api.delete(name, &params).await.map(drop)
    }

    /// Deletes exactly the pod with `uid`; gone (404) or replaced (409) already is
    /// skipped: its node is being replaced all the same.
    pub async fn delete_pod(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<Outcome, Error> {
        let result = self
            .delete_exact::<Pod>(namespace, name, Some(uid), None)
            .await;
        Outcome::of(result).map_err(|e| Error::new(Call::DeletePod, namespace, name, e))
    }

    /// Deletes a Job (and, in the background, its pods) by UID when known; gone or
    /// replaced already is skipped.
    pub async fn delete_job(
        &self,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
    ) -> Result<Outcome, Error> {
        let result = self
            .delete_exact::<Job>(namespace, name, uid, Some(PropagationPolicy::Background))
            .await;
        Outcome::of(result).map_err(|e| Error::new(Call::DeleteJob, namespace, name, e))
    }

    /// Creates `object` in `namespace`, the API's answer as it is (a 409 means
    /// different things to different callers).
    pub async fn create<K>(&self, namespace: &str, object: &K) -> kube::Result<K>
    where
        K: Namespaced + Serialize,
    {
        let api: Api<K> = self.api(namespace);
        api.create(&post_params(), object).await
    }

    /// A JSON merge patch of an object or of its status, the API's answer as it is.
    pub async fn merge_patch<K: Namespaced>(
        &self,
        namespace: &str,
        name: &str,
        part: Part,
        patch: &Value,
    ) -> kube::Result<K> {
        let api: Api<K> = self.api(namespace);
        let patch = Patch::Merge(patch);
        match part {
            Part::Object => api.patch(name, &patch_params(), &patch).await,
            Part::Status => api.patch_status(name, &patch_params(), &patch).await,
        }
    }
}

/// What a patch writes: the object (metadata, spec) or its `status` subresource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Object,
    Status,
}
