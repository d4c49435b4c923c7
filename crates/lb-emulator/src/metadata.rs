//! ECS instance metadata v2: a session token, then the RAM role's name and its
//! temporary credentials.
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::{Json, Router};
use rand::RngExt as _;
use serde_json::json;

use crate::state::{AppState, Shared};

/// The RAM role name the metadata endpoint reports.
pub const METADATA_ROLE: &str = "rollgate-emulated-role";

/// The metadata routes, merged into the server's router.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/latest/api/token", put(metadata_token))
        .route(
            "/latest/meta-data/ram/security-credentials/",
            get(metadata_role),
        )
        .route(
            "/latest/meta-data/ram/security-credentials/{role}",
            get(metadata_credentials),
        )
}

async fn metadata_token(State(shared): State<AppState>, headers: HeaderMap) -> Response {
    if headers
        .get("x-aliyun-ecs-metadata-token-ttl-seconds")
        .is_none()
    {
        return (
            StatusCode::BAD_REQUEST,
            "missing X-aliyun-ecs-metadata-token-ttl-seconds",
        )
            .into_response();
    }
    let token = hex::encode(rand::rng().random::<[u8; 16]>());
    shared
        .metadata_tokens
        .lock()
        .expect("lock")
        .push(token.clone());
    token.into_response()
}

fn metadata_authorized(shared: &Shared, headers: &HeaderMap) -> bool {
    let sent = headers
        .get("x-aliyun-ecs-metadata-token")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    shared
        .metadata_tokens
        .lock()
        .expect("lock")
        .iter()
        .any(|t| t == sent)
}

async fn metadata_role(State(shared): State<AppState>, headers: HeaderMap) -> Response {
    if !metadata_authorized(&shared, &headers) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    METADATA_ROLE.into_response()
}

async fn metadata_credentials(
    State(shared): State<AppState>,
    Path(role): Path<String>,
    headers: HeaderMap,
) -> Response {
    if !metadata_authorized(&shared, &headers) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    if role != METADATA_ROLE {
        return StatusCode::NOT_FOUND.into_response();
    }
    let mut credentials = shared
        .world
        .lock()
        .expect("world lock")
        .issue_temporary_key();
    credentials["Code"] = json!("Success");
    credentials["LastUpdated"] = json!(jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string());
    Json(credentials).into_response()
}
