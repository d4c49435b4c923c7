//! This cluster's id in the markers and tags rollgate writes: `--cluster-id` when
//! given, else the `kube-system` namespace's UID, which every cluster has and no two
//! share, so two clusters in one account never take each other's backends without any
//! configuration. Also the former id whose markers are adopted on upgrade.
use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, Client};

/// The namespace whose UID names the cluster (read with one `get`; the RBAC names it).
pub const CLUSTER_NAMESPACE: &str = "kube-system";

/// The id every cluster used before the default became the namespace UID.
pub const FORMER_DEFAULT_CLUSTER_ID: &str = "kubernetes";

/// The id to write under and the former id to adopt markers of (pure): an explicit
/// flag wins and was also what earlier versions wrote (legacy shape); without it the
/// namespace UID is used and the former default's markers are adopted.
pub fn choose(explicit: Option<&str>, namespace_uid: Option<&str>) -> Option<(String, String)> {
    match explicit.map(str::trim).filter(|id| !id.is_empty()) {
        Some(id) => Some((id.to_string(), id.to_string())),
        None => namespace_uid
            .filter(|uid| !uid.is_empty())
            .map(|uid| (uid.to_string(), FORMER_DEFAULT_CLUSTER_ID.to_string())),
    }
}

/// Resolves the ids at start-up: without `--cluster-id`, reads the `kube-system`
/// namespace (a failure stops the start: a made-up id would orphan every backend).
pub async fn resolve(client: &Client, explicit: Option<&str>) -> anyhow::Result<(String, String)> {
    if let Some(ids) = choose(explicit, None) {
        return Ok(ids);
    }
    let namespace = Api::<Namespace>::all(client.clone())
        .get(CLUSTER_NAMESPACE)
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "reading namespace {CLUSTER_NAMESPACE} for the default cluster id failed (give --cluster-id, or grant get on it): {e}"
            )
        })?;
    let uid = namespace.metadata.uid;
    choose(None, uid.as_deref()).ok_or_else(|| {
        anyhow::anyhow!("namespace {CLUSTER_NAMESPACE} has no uid: give --cluster-id")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the case is about, the flag, the namespace UID, the ids chosen.
    type Case<'a> = (
        &'a str,
        Option<&'a str>,
        Option<&'a str>,
        Option<(&'a str, &'a str)>,
    );

    #[test]
    fn the_flag_wins_else_the_namespace_uid_and_the_former_default_is_adopted() {
        let uid = "5f0c1d2e-0000-4000-8000-000000000001";
        #[rustfmt::skip]
        let cases: &[Case] = &[
            ("explicit flag, its own markers adopted", Some("prod-1"), Some(uid), Some(("prod-1", "prod-1"))),
            ("explicit flag, nothing read", Some("prod-1"), None, Some(("prod-1", "prod-1"))),
            ("no flag: the uid, the former default adopted", None, Some(uid), Some((uid, FORMER_DEFAULT_CLUSTER_ID))),
            ("an empty flag counts as none", Some("  "), Some(uid), Some((uid, FORMER_DEFAULT_CLUSTER_ID))),
            ("nothing to go by", None, None, None),
            ("an empty uid is none", None, Some(""), None),
        ];
        for (case, explicit, namespace_uid, want) in cases {
            let got = choose(*explicit, *namespace_uid);
            let want = want.map(|(a, b)| (a.to_string(), b.to_string()));
            assert_eq!(got, want, "{case}");
        }
    }
}
