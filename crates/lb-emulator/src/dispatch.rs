//! Every cloud API call: the signature checked, the per-action rate limit and the
//! call log, injected faults, then the emulated world's answer in the API's envelope.
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use rand::RngExt as _;
use serde_json::{json, Value};

use crate::state::AppState;
use crate::sts::assume_role_with_oidc;
use crate::versions::{
    host_id, quota_product, CLB_VERSION, ECS_VERSION, NLB_VERSION, STS_VERSION, VPC_VERSION,
};
use crate::world::{ApiError, Params};
use crate::{auth, call_log};

fn request_id() -> String {
    let b: [u8; 16] = rand::rng().random();
    let h = hex::encode_upper(b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

fn error_response(error: &ApiError, host: &str) -> Response {
    let body = json!({
        "RequestId": request_id(),
        "HostId": host,
        "Code": error.code,
        "Message": error.message,
        "Recommend": format!("https://api.aliyun.com/troubleshoot?q={}", error.code),
    });
    let status = StatusCode::from_u16(error.status).unwrap_or(StatusCode::BAD_REQUEST);
    (status, Json(body)).into_response()
}

fn decode_pairs(raw: &[u8]) -> Vec<(String, String)> {
    form_urlencoded::parse(raw)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// Every cloud API call (and STS) arrives here: `POST /` (or GET) with parameters in
/// the query, a form body, or both.
pub(crate) async fn api(
    State(shared): State<AppState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let query = decode_pairs(uri.query().unwrap_or_default().as_bytes());
    let is_form = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    let mut params: Params = query.iter().cloned().collect();
    if is_form {
        params.extend(decode_pairs(&body));
    }
    let region = shared.config.region.clone();
    let mut world = shared.world.lock().expect("world lock");
    world.stats.requests += 1;
    let verified = match auth::verify(
        &mut world,
        &method,
        uri.path(),
        &query,
        &params,
        &headers,
        &body,
    ) {
        Ok(v) => v,
        Err(error) => {
            world.stats.rejected_signatures += 1;
            let action = headers
                .get("x-acs-action")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
                .or_else(|| params.get("Action").cloned())
                .unwrap_or_default();
            tracing::warn!(action, code = %error.code, message = %error.message, "rejected request");
            let version = params.get("Version").cloned().unwrap_or_default();
            return error_response(&error, &host_id(&version, &region));
        }
    };
    let host = host_id(&verified.version, &region);
    *world
        .stats
        .per_action
        .entry(verified.action.clone())
        .or_default() += 1;
    if let Some(product) = quota_product(&verified.version) {
        // The quota is per account, region and API: the request's RegionId (the
        // emulator's own region when it has none) and the AccessKeyId.
        let call_region = params.get("RegionId").cloned().unwrap_or(region.clone());
        let account = verified.access_key_id.clone().unwrap_or_default();
        let admitted = shared
            .rate_limiter
            .lock()
            .expect("rate limiter lock")
            .admit(
                std::time::Instant::now(),
                product,
                &verified.action,
                &call_region,
                &account,
            );
        let at = jiff::Timestamp::now().as_millisecond() as f64 / 1000.0;
        shared
            .call_log
            .lock()
            .expect("call log lock")
            .push(call_log::CallRecord::new(
                at,
                product,
                &verified.action,
                |name| params.get(name).cloned(),
                !admitted,
            ));
        if !admitted {
            let error = ApiError::new(
                400,
                "Throttling.User",
                "Request was denied due to user flow control.",
            );
            tracing::debug!(action = %verified.action, region = %call_region, "over the API rate limit");
            return error_response(&error, &host);
        }
    }
    if verified.version != STS_VERSION {
        let mut rng = rand::rng();
        if rng.random::<f64>() < world.faults.throttle_rate {
            world.stats.injected_throttles += 1;
            let error = if world.faults.throttle_code == "ServiceUnavailable" {
                ApiError::new(
                    503,
                    "ServiceUnavailable",
                    "The request has failed due to a temporary failure of the server.",
                )
            } else {
                ApiError::new(
                    400,
                    &world.faults.throttle_code.clone(),
                    "Request was denied due to user flow control.",
                )
            };
            tracing::debug!(action = %verified.action, code = %error.code, "injected throttling");
            return error_response(&error, &host);
        }
        let named_failure = world
            .faults
            .fail_next
            .get_mut(&verified.action)
            .filter(|left| **left > 0)
            .map(|left| *left -= 1)
            .is_some();
        if named_failure || rng.random::<f64>() < world.faults.server_error_rate {
            world.stats.injected_server_errors += 1;
            let error = ApiError::new(
                500,
                "InternalError",
                "The request processing has failed due to some unknown error.",
            );
            return error_response(&error, &host);
        }
    }
    let result = match verified.version.as_str() {
        CLB_VERSION => world.clb(&verified.action, &params),
        NLB_VERSION => world.nlb(&verified.action, &params),
        ECS_VERSION => world.ecs(&verified.action, &params),
        VPC_VERSION => world.vpc(&verified.action, &params),
        STS_VERSION if verified.action == "AssumeRoleWithOIDC" => {
            assume_role_with_oidc(&mut world, &params)
        }
        other => Err(ApiError::new(
            400,
            "InvalidVersion",
            format!("Specified parameter Version {other:?} is not valid."),
        )),
    };
    match result {
        Ok(mut body) => {
            let rid = request_id();
            tracing::debug!(action = %verified.action, request_id = %rid, access_key_id = ?verified.access_key_id, "served");
            if let Value::Object(map) = &mut body {
                map.insert("RequestId".into(), Value::String(rid));
            }
            Json(body).into_response()
        }
        Err(error) => {
            tracing::info!(action = %verified.action, code = %error.code, message = %error.message, "API error");
            error_response(&error, &host)
        }
    }
}
