//! What the API server saw: its audit log (written by hack/cluster-up.sh) and how many
//! times each Event was reported. Counting calls, not effects: a second DELETE of a pod
//! that is already terminating changes nothing a watcher can see.
use super::*;

/// The user the e2e controller runs as (the ServiceAccount token of `controller_kubeconfig`).
pub const CONTROLLER_USER: &str = "system:serviceaccount:rollgate-system:rollgate-controller";

/// One completed request (stage `ResponseComplete`) from the API server's audit log.
#[derive(Debug, Clone)]
pub struct AuditRecord {
    pub verb: String,
    pub resource: String,
    pub subresource: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub user: String,
    /// The client's User-Agent (rollgate's names its mode and identity, so replicas
    /// sharing one ServiceAccount can be told apart).
    pub user_agent: String,
    /// HTTP status code of the answer.
    pub code: Option<u16>,
    /// When the API server received the request.
    pub received: Option<k8s_openapi::jiff::Timestamp>,
    /// The request body, for the policy rules that log at `Request` level.
    pub request_object: Option<serde_json::Value>,
}

impl AuditRecord {
    /// One line of the JSON audit log; `None` for stages other than `ResponseComplete`.
    pub fn from_json(v: &serde_json::Value) -> Option<Self> {
        if v["stage"] != "ResponseComplete" {
            return None;
        }
        let text = |v: &serde_json::Value| v.as_str().map(str::to_string);
        let object = &v["objectRef"];
        Some(AuditRecord {
            verb: text(&v["verb"])?,
            resource: text(&object["resource"]).unwrap_or_default(),
            subresource: text(&object["subresource"]),
            namespace: text(&object["namespace"]),
            name: text(&object["name"]),
            user: text(&v["user"]["username"]).unwrap_or_default(),
            user_agent: text(&v["userAgent"]).unwrap_or_default(),
            code: v["responseStatus"]["code"]
                .as_u64()
                .and_then(|c| u16::try_from(c).ok()),
            received: v["requestReceivedTimestamp"]
                .as_str()
                .and_then(|t| t.parse().ok()),
            request_object: v.get("requestObject").cloned(),
        })
    }
}

/// The test cluster's audit log: `logs/audit.log` in the cluster folder, which holds the
/// test kubeconfig (`ROLLGATE_TEST_KUBECONFIG`).
pub fn audit_log_path() -> PathBuf {
    let kubeconfig = kubeconfig_path();
    let dir = kubeconfig
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    dir.join("logs/audit.log")
}

/// Every completed request in the audit log, rotated files first, oldest first.
pub fn audit_records() -> Vec<AuditRecord> {
    let current = audit_log_path();
    assert!(
        current.exists(),
        "no audit log at {}: the test cluster's kube-apiserver runs without auditing \
         (started before hack/cluster-up.sh enabled it?); restart it with \
         hack/cluster-down.sh then hack/cluster-up.sh",
        current.display()
    );
    let dir = current.parent().unwrap();
    // Rotated files are `audit-<timestamp>.log`: their names sort in time order.
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("audit-") && n.ends_with(".log"))
        })
        .collect();
    files.sort();
    files.push(current);
    let mut records = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        // A line being written right now may be cut short: skip what does not parse.
        records.extend(
            text.lines()
                .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
                .filter_map(|v| AuditRecord::from_json(&v)),
        );
    }
    records
}

/// The audit log from a point on, read as it grows: for a test that must act on a
/// request the moment the API server completed it. A watch can deliver the change it
/// made long after (a loaded machine has been seen to lag a minute), while the audit
/// log is written before the answer (`--audit-log-mode blocking`). Each read parses
/// only what was appended since the last one.
pub struct AuditTail {
    offset: u64,
}

impl AuditTail {
    /// From the current end of the log.
    pub fn from_now() -> Self {
        let offset = std::fs::metadata(audit_log_path()).map_or(0, |m| m.len());
        AuditTail { offset }
    }

    /// The requests completed since the last read. After a rotation (the file shrank)
    /// it reads the new file from its start: what went into the rotated file
    /// meanwhile is skipped.
    pub fn read(&mut self) -> Vec<AuditRecord> {
        use std::io::{Read as _, Seek as _};
        let Ok(mut file) = std::fs::File::open(audit_log_path()) else {
            return Vec::new();
        };
        let len = file.metadata().map_or(0, |m| m.len());
        if len < self.offset {
            self.offset = 0;
        }
        let mut bytes = Vec::new();
        if file.seek(std::io::SeekFrom::Start(self.offset)).is_err()
            || file.read_to_end(&mut bytes).is_err()
        {
            return Vec::new();
        }
        // A line being written right now is left for the next read.
        let complete = bytes
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |at| at + 1);
        self.offset += complete as u64;
        String::from_utf8_lossy(&bytes[..complete])
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter_map(|v| AuditRecord::from_json(&v))
            .collect()
    }
}

/// The DELETE calls on pods of `namespace` the API server answered (any status code),
/// only those of `user` when given.
pub fn pod_deletes(namespace: &str, user: Option<&str>) -> Vec<AuditRecord> {
    audit_records()
        .into_iter()
        .filter(|r| {
            r.verb == "delete"
                && r.resource == "pods"
                && r.subresource.is_none()
                && r.namespace.as_deref() == Some(namespace)
                && user.is_none_or(|u| r.user == u)
        })
        .collect()
}

/// How many DELETE calls each pod of `namespace` got from `user`, by pod name.
pub fn pod_delete_counts(namespace: &str, user: &str) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for record in pod_deletes(namespace, Some(user)) {
        *counts.entry(record.name.unwrap_or_default()).or_insert(0) += 1;
    }
    counts
}

/// The pods of `namespace` that got more than one DELETE call from `user`, with the
/// calls' status codes, for a failure message.
pub fn pods_deleted_more_than_once(namespace: &str, user: &str) -> BTreeMap<String, Vec<u16>> {
    let mut calls: BTreeMap<String, Vec<u16>> = BTreeMap::new();
    for record in pod_deletes(namespace, Some(user)) {
        calls
            .entry(record.name.unwrap_or_default())
            .or_default()
            .push(record.code.unwrap_or(0));
    }
    calls.retain(|_, codes| codes.len() > 1);
    calls
}

/// One Event object about an object, with how many times it was reported.
#[derive(Debug, Clone)]
pub struct EventRecord {
    pub type_: String,
    pub reason: String,
    pub note: String,
    pub reporting_controller: String,
    /// Occurrences: a recorder merges repeats of an Event into one object and counts
    /// them in `series.count` (events.k8s.io/v1) or `count` (core/v1, `deprecatedCount`
    /// here), so counting objects misses repeats.
    pub occurrences: u32,
}

/// The Events recorded for one object, each with its number of occurrences.
pub async fn event_records(client: &Client, namespace: &str, name: &str) -> Vec<EventRecord> {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), namespace);
    let list = api.list(&kube::api::ListParams::default()).await.unwrap();
    list.items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| {
            let occurrences = match &e.series {
                // A series exists only once an Event repeated.
                Some(series) => u32::try_from(series.count).unwrap_or(0).max(2),
                None => u32::try_from(e.deprecated_count.unwrap_or(1))
                    .unwrap_or(0)
                    .max(1),
            };
            EventRecord {
                type_: e.type_.unwrap_or_default(),
                reason: e.reason.unwrap_or_default(),
                note: e.note.unwrap_or_default(),
                reporting_controller: e.reporting_controller.unwrap_or_default(),
                occurrences,
            }
        })
        .collect()
}
