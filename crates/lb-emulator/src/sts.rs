//! STS `AssumeRoleWithOIDC`: the credential source of a pod with an OIDC token.
use serde_json::{json, Value};

use crate::world::{ApiError, Params, World};

pub(crate) fn assume_role_with_oidc(world: &mut World, p: &Params) -> Result<Value, ApiError> {
    for name in ["RoleArn", "OIDCProviderArn", "OIDCToken"] {
        if p.get(name).is_none_or(|v| v.is_empty()) {
            return Err(ApiError::new(
                400,
                "MissingParameter",
                format!("{name} is mandatory for this action."),
            ));
        }
    }
    let credentials = world.issue_temporary_key();
    let session = p.get("RoleSessionName").cloned().unwrap_or_default();
    Ok(json!({
        "Credentials": credentials,
        "AssumedRoleUser": {"Arn": format!("{}/{session}", p["RoleArn"]), "AssumedRoleId": "300000000000000000:emulator"},
        "OIDCTokenInfo": {"Subject": "system:serviceaccount:emulated", "Issuer": "https://oidc.emulator.invalid"},
    }))
}
