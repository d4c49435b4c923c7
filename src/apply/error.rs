//! The one error of a failed write: which call, on which object, and the API's answer.
//! The DaemonSet and image-pull controllers reconcile with it as it is; the gates
//! controller wraps it beside its cloud errors.
use crate::watch::runner::ReconcileError;

/// The API calls the controllers make, named for logs and for the `kind` label of the
/// reconcile error counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    DeletePod,
    ReadPod,
    ListRevisions,
    WriteCondition,
    CreateJob,
    ReadJob,
    DeleteJob,
    PatchService,
    ReadRevision,
    PatchDaemonSet,
}

impl Call {
    /// The `kind` label of the errors counters (kept as the controllers counted before).
    pub fn metric_label(self) -> &'static str {
        match self {
            Call::DeletePod => "delete_pod",
            Call::ReadPod => "read_pod",
            Call::ListRevisions => "list_revisions",
            Call::WriteCondition => "write_condition",
            Call::CreateJob => "create_job",
            Call::ReadJob => "read_job",
            Call::DeleteJob => "delete_job",
            Call::PatchService => "patch_service",
            Call::ReadRevision => "read_revision",
            Call::PatchDaemonSet => "patch_daemonset",
        }
    }

    fn doing(self) -> &'static str {
        match self {
            Call::DeletePod => "deleting pod",
            Call::ReadPod => "reading pod",
            Call::ListRevisions => "listing the ControllerRevisions of DaemonSet",
            Call::WriteCondition => "writing a condition on pod",
            Call::CreateJob => "creating Job",
            Call::ReadJob => "reading Job",
            Call::DeleteJob => "deleting Job",
            Call::PatchService => "patching Service",
            Call::ReadRevision => "reading ControllerRevision",
            Call::PatchDaemonSet => "patching DaemonSet",
        }
    }
}

impl std::fmt::Display for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.doing())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{call} {namespace}/{name}: {source}")]
pub struct Error {
    pub call: Call,
    pub namespace: String,
    pub name: String,
    #[source]
    pub source: kube::Error,
}

impl Error {
    pub fn new(call: Call, namespace: &str, name: &str, source: kube::Error) -> Self {
        Error {
            call,
            namespace: namespace.into(),
            name: name.into(),
            source,
        }
    }
}

impl ReconcileError for Error {
    fn metric_label(&self) -> &'static str {
        self.call.metric_label()
    }
}
