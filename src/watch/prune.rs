//! What the caches keep of each object: only the fields some planner reads.
//!
//! Pods and Nodes are many and are kept in slim types of their own (`crate::object::pod`,
//! `crate::object::node`). The kinds here are few or small, so they stay API objects
//! with the fields nobody reads dropped. The DaemonSet planners' tests
//! (`daemonset::same_plan_on_cached_objects`) prove each planner decides the same on
//! the cached objects as on the full ones; the gates' (`gates::service`) that a
//! reconcile reads the same of a pruned Service as of the full one.
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::PartialObjectMeta;

/// Metadata every reader may use; annotations and managedFields are dropped.
fn slim_meta(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    meta.annotations = None;
    meta.generate_name = None;
    meta.creation_timestamp = None;
    meta.finalizers = None;
}

/// DaemonSets are few: the template is kept (placement and pull Jobs read it), only
/// managedFields go. Annotations carry the public interface and stay.
pub fn daemonset(ds: &mut DaemonSet) {
    ds.metadata.managed_fields = None;
}

/// ControllerRevisions: the hash label and revision number are read, the template copy
/// inside (`data`) never is.
pub fn revision(revision: &mut ControllerRevision) {
    slim_meta(&mut revision.metadata);
    revision.data = Default::default();
}

/// Pull Jobs: their identity, owner, labels and status; the pod template is ours and
/// never read back.
pub fn job(job: &mut Job) {
    job.metadata.managed_fields = None;
    if let Some(spec) = job.spec.as_mut() {
        spec.template = Default::default();
    }
}

/// `kubectl apply`'s copy of the whole object: nobody reads it back.
const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Services (for the readiness gates): annotations carry the public interface, the
/// finalizers and `status.loadBalancer` are read and written, so only managedFields and
/// `kubectl apply`'s copy of the object go.
pub fn service(service: &mut Service) {
    service.metadata.managed_fields = None;
    if let Some(annotations) = service.metadata.annotations.as_mut() {
        annotations.remove(LAST_APPLIED_ANNOTATION);
    }
}

/// Namespaces (for the gate injection webhook): only the labels are read.
pub fn namespace(namespace: &mut PartialObjectMeta<Namespace>) {
    let labels = namespace.metadata.labels.take();
    namespace.metadata = ObjectMeta {
        name: namespace.metadata.name.take(),
        resource_version: namespace.metadata.resource_version.take(),
        labels,
        ..Default::default()
    };
}
