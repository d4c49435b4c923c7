//! Checks request signatures the way the cloud does, for both schemes, using the
//! canonicalization of `alibaba_lb::sign` (itself checked against the official SDK).

use alibaba_lb::sign;
use axum::http::{HeaderMap, Method};

use crate::world::{ApiError, Params, World};

/// Requests older or newer than this are refused, as replay protection.
const MAX_CLOCK_SKEW_SECS: i64 = 15 * 60;

/// Who signed and what they asked for.
#[derive(Debug)]
pub struct Verified {
    pub access_key_id: Option<String>,
    pub action: String,
    pub version: String,
}

fn header_values(headers: &HeaderMap, name: &str) -> Vec<String> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_string))
        .collect()
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    header_values(headers, name).into_iter().next()
}

fn signature_error(message: impl Into<String>) -> ApiError {
    ApiError::new(400, "SignatureDoesNotMatch", message)
}

fn incomplete(message: impl Into<String>) -> ApiError {
    ApiError::new(400, "IncompleteSignature", message)
}

fn check_timestamp(value: &str) -> Result<(), ApiError> {
    let when: jiff::Timestamp = value.parse().map_err(|_| {
        ApiError::new(
            400,
            "InvalidTimeStamp.Format",
            format!("Specified time stamp {value} is not valid."),
        )
    })?;
    let skew = jiff::Timestamp::now().as_second() - when.as_second();
    if skew.abs() > MAX_CLOCK_SKEW_SECS {
        return Err(ApiError::new(
            400,
            "InvalidTimeStamp.Expired",
            format!("Specified time stamp {value} is expired."),
        ));
    }
    Ok(())
}

fn check_nonce(world: &mut World, nonce: &str) -> Result<(), ApiError> {
    if nonce.is_empty() {
        return Err(incomplete("The signature nonce is missing."));
    }
    if !world.seen_nonces.insert(nonce.to_string()) {
        return Err(ApiError::new(
            400,
            "SignatureNonceUsed",
            format!("Specified signature nonce {nonce} was used already."),
        ));
    }
    Ok(())
}

/// The secret for `id`, and the security token it must come with (temporary keys).
fn secret_for(world: &World, id: &str) -> Result<(String, Option<String>), ApiError> {
    if let Some(secret) = world.static_keys.get(id) {
        return Ok((secret.clone(), None));
    }
    if let Some(key) = world.temporary_keys.get(id) {
        return Ok((key.secret.clone(), Some(key.token.clone())));
    }
    Err(ApiError::new(
        404,
        "InvalidAccessKeyId.NotFound",
        "Specified access key is not found.",
    ))
}

fn check_token(expected: Option<String>, sent: Option<String>) -> Result<(), ApiError> {
    match (expected, sent) {
        (None, _) => Ok(()),
        (Some(expected), Some(sent)) if expected == sent => Ok(()),
        (Some(_), None) => Err(ApiError::new(
            400,
            "MissingSecurityToken",
            "The security token of the temporary key is missing.",
        )),
        (Some(_), Some(_)) => Err(ApiError::new(
            400,
            "InvalidSecurityToken.Mismatch",
            "Specified security token is not valid for the access key.",
        )),
    }
}

pub fn verify(
    world: &mut World,
    method: &Method,
    path: &str,
    query: &[(String, String)],
    params: &Params,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Verified, ApiError> {
    if let Some(authorization) = header(headers, "authorization") {
        return verify_v3(world, method, path, query, headers, body, &authorization);
    }
    if params.contains_key("Signature") {
        return verify_rpc(world, method, params);
    }
    let action = params.get("Action").cloned().unwrap_or_default();
    if action == "AssumeRoleWithOIDC" {
        // Anonymous by design: the OIDC token is the proof.
        return Ok(Verified {
            access_key_id: None,
            action,
            version: params.get("Version").cloned().unwrap_or_default(),
        });
    }
    Err(incomplete(
        "The request is not signed: no Authorization header and no Signature parameter.",
    ))
}

fn verify_v3(
    world: &mut World,
    method: &Method,
    path: &str,
    query: &[(String, String)],
    headers: &HeaderMap,
    body: &[u8],
    authorization: &str,
) -> Result<Verified, ApiError> {
    let rest = authorization
        .strip_prefix(sign::V3_ALGORITHM)
        .ok_or_else(|| {
            ApiError::new(
                400,
                "InvalidAuthorization",
                "Unsupported signature algorithm in Authorization.",
            )
        })?
        .trim();
    let mut credential = None;
    let mut signed_names = None;
    let mut signature = None;
    for part in rest.split(',') {
        match part.trim().split_once('=') {
            Some(("Credential", v)) => credential = Some(v.to_string()),
            Some(("SignedHeaders", v)) => signed_names = Some(v.to_string()),
            Some(("Signature", v)) => signature = Some(v.to_string()),
            _ => {}
        }
    }
    let (Some(credential), Some(signed_names), Some(signature)) =
        (credential, signed_names, signature)
    else {
        return Err(incomplete(
            "Authorization lacks Credential, SignedHeaders or Signature.",
        ));
    };
    let names: Vec<&str> = signed_names.split(';').collect();
    for required in [
        "host",
        "x-acs-action",
        "x-acs-version",
        "x-acs-date",
        "x-acs-signature-nonce",
        "x-acs-content-sha256",
    ] {
        if !names.contains(&required) {
            return Err(incomplete(format!("Header {required} must be signed.")));
        }
    }
    let mut signed_headers = vec![];
    for name in &names {
        let values = header_values(headers, name);
        if values.is_empty() {
            return Err(incomplete(format!(
                "Signed header {name} is absent from the request."
            )));
        }
        signed_headers.extend(values.into_iter().map(|v| (name.to_string(), v)));
    }
    let content_sha256 = header(headers, "x-acs-content-sha256").unwrap_or_default();
    if content_sha256 != sign::sha256_hex(body) {
        return Err(signature_error(
            "x-acs-content-sha256 does not match the request body.",
        ));
    }
    let (secret, token) = secret_for(world, &credential)?;
    let expected = sign::v3_signature(
        method.as_str(),
        path,
        query,
        &signed_headers,
        &content_sha256,
        &secret,
    );
    if expected != signature {
        return Err(signature_error(
            "The request signature does not conform to Aliyun standards.",
        ));
    }
    check_token(token, header(headers, "x-acs-security-token"))?;
    check_timestamp(&header(headers, "x-acs-date").unwrap_or_default())?;
    check_nonce(
        world,
        &header(headers, "x-acs-signature-nonce").unwrap_or_default(),
    )?;
    Ok(Verified {
        access_key_id: Some(credential),
        action: header(headers, "x-acs-action").unwrap_or_default(),
        version: header(headers, "x-acs-version").unwrap_or_default(),
    })
}

fn verify_rpc(world: &mut World, method: &Method, params: &Params) -> Result<Verified, ApiError> {
    let get = |k: &str| params.get(k).cloned().unwrap_or_default();
    if get("SignatureMethod") != "HMAC-SHA1" || get("SignatureVersion") != "1.0" {
        return Err(ApiError::new(
            400,
            "InvalidSignatureMethod",
            "SignatureMethod must be HMAC-SHA1, SignatureVersion 1.0.",
        ));
    }
    let access_key_id = get("AccessKeyId");
    if access_key_id.is_empty() {
        return Err(incomplete("AccessKeyId is missing."));
    }
    let (secret, token) = secret_for(world, &access_key_id)?;
    let signed: Vec<(String, String)> = params
        .iter()
        .filter(|(k, _)| k.as_str() != "Signature")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let expected = sign::rpc_signature(method.as_str(), &signed, &secret);
    if expected != get("Signature") {
        return Err(signature_error(format!(
            "Specified signature is not matched with our calculation. server string to sign is:{}",
            sign::rpc_string_to_sign(method.as_str(), &signed)
        )));
    }
    check_token(token, params.get("SecurityToken").cloned())?;
    check_timestamp(&get("Timestamp"))?;
    check_nonce(world, &get("SignatureNonce"))?;
    Ok(Verified {
        access_key_id: Some(access_key_id),
        action: get("Action"),
        version: get("Version"),
    })
}
