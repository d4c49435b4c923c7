//! Pod conditions as the e2e tests read and write them: one condition's (status,
//! reason, message), and a condition written the way a controller or the node agent
//! writes it (status subresource, strategic merge on `type`, stamped now).
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::json;

/// The condition `type_` of `p`: (status, reason, message).
pub fn condition_of(p: &Pod, type_: &str) -> Option<(String, String, String)> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| {
            (
                c.status.clone(),
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

/// Writes condition `type_` on pod `pod` (status subresource, strategic merge on the
/// `type` key), its transition now.
pub async fn set_condition(
    pods: &Api<Pod>,
    pod: &str,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
) {
    let patch = json!({"status": {"conditions": [{
        "type": type_, "status": status, "reason": reason, "message": message,
        "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
    }]}});
    pods.patch_status(pod, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap_or_else(|e| panic!("setting {type_} on {pod}: {e}"));
}
