//! The control endpoints under `/_emulator/` (JSON): read the state, the timeline,
//! the calls and the call log; set faults, rate limits, job outcomes, timing and
//! health; fill the emulated VPC, ENIs, ECIs, quotas and server certificates.
use std::collections::BTreeMap;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::quota;
use crate::state::AppState;
use crate::world::ecs::{EciRegistration, EniRegistration};
use crate::world::{JobOutcome, Vpc};

/// The control endpoints' routes, merged into the server's router.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/_emulator/state", get(control_state))
        .route("/_emulator/timeline", get(control_timeline))
        .route("/_emulator/faults", post(control_faults))
        .route("/_emulator/calls", get(control_calls))
        .route("/_emulator/call-log", get(control_call_log))
        .route("/_emulator/rate-limits", post(control_rate_limits))
        .route("/_emulator/jobs", post(control_jobs))
        .route("/_emulator/timing", post(control_timing))
        .route("/_emulator/health", post(control_health))
        .route("/_emulator/vpcs", post(control_vpcs))
        .route("/_emulator/enis", post(control_enis))
        .route("/_emulator/ecis", post(control_ecis))
        .route("/_emulator/quotas", post(control_quotas))
        .route(
            "/_emulator/server-certificates",
            post(control_server_certificates),
        )
}

async fn control_state(State(shared): State<AppState>) -> Json<Value> {
    Json(shared.world.lock().expect("world lock").snapshot())
}

async fn control_timeline(State(shared): State<AppState>) -> Json<Value> {
    Json(json!({"events": shared.world.lock().expect("world lock").timeline}))
}

async fn control_calls(State(shared): State<AppState>) -> Json<Value> {
    let limiter = shared.rate_limiter.lock().expect("rate limiter lock");
    Json(limiter.snapshot(std::time::Instant::now()))
}

#[derive(Deserialize)]
struct CallLogQuery {
    #[serde(default)]
    since: usize,
}

/// `GET /_emulator/call-log?since=N`: the call records from index N on, one page.
async fn control_call_log(
    State(shared): State<AppState>,
    Query(query): Query<CallLogQuery>,
) -> Json<Value> {
    Json(
        shared
            .call_log
            .lock()
            .expect("call log lock")
            .page(query.since),
    )
}

#[derive(Deserialize)]
struct RateLimitsUpdate {
    enabled: Option<bool>,
    /// `{"slb:DescribeHealthStatus": "10/1"}`; `null` removes an explicit limit.
    #[serde(default)]
    limits: BTreeMap<String, Option<String>>,
}

/// `POST /_emulator/rate-limits`: turns enforcement on or off and sets or removes
/// explicit limits; answers like `GET /_emulator/calls`.
async fn control_rate_limits(
    State(shared): State<AppState>,
    Json(update): Json<RateLimitsUpdate>,
) -> Response {
    let mut parsed = vec![];
    for (key, limit) in &update.limits {
        // `null` (remove) still has its key checked, with a placeholder limit.
        let text = limit.as_deref().unwrap_or("1/1");
        match quota::parse_override(&format!("{key}={text}")) {
            Ok((k, l)) => parsed.push((k, limit.as_ref().map(|_| l))),
            Err(message) => return (StatusCode::BAD_REQUEST, message).into_response(),
        }
    }
    let mut limiter = shared.rate_limiter.lock().expect("rate limiter lock");
    if let Some(enabled) = update.enabled {
        limiter.enabled = enabled;
    }
    for (key, limit) in parsed {
        limiter.set_override(key, limit);
    }
    tracing::info!(enabled = limiter.enabled, "API rate limits updated");
    Json(limiter.snapshot(std::time::Instant::now())).into_response()
}

#[derive(Deserialize)]
struct FaultsUpdate {
    throttle_rate: Option<f64>,
    throttle_code: Option<String>,
    server_error_rate: Option<f64>,
    /// `{"StartLoadBalancerListener": 10}`: the next 10 calls of it fail (HTTP 500).
    fail_next: Option<std::collections::BTreeMap<String, u32>>,
}

fn rate(value: f64, name: &str) -> Result<f64, String> {
    if (0.0..=1.0).contains(&value) {
        Ok(value)
    } else {
        Err(format!("{name} must be within 0..=1"))
    }
}

async fn control_faults(
    State(shared): State<AppState>,
    Json(update): Json<FaultsUpdate>,
) -> Response {
    let mut world = shared.world.lock().expect("world lock");
    let mut faults = world.faults.clone();
    if let Some(r) = update.throttle_rate {
        match rate(r, "throttle_rate") {
            Ok(r) => faults.throttle_rate = r,
            Err(message) => return (StatusCode::BAD_REQUEST, message).into_response(),
        }
    }
    if let Some(r) = update.server_error_rate {
        match rate(r, "server_error_rate") {
            Ok(r) => faults.server_error_rate = r,
            Err(message) => return (StatusCode::BAD_REQUEST, message).into_response(),
        }
    }
    if let Some(code) = update.throttle_code {
        if ![
            "Throttling",
            "Throttling.User",
            "Throttling.Api",
            "ServiceUnavailable",
        ]
        .contains(&code.as_str())
        {
            return (StatusCode::BAD_REQUEST, "throttle_code must be Throttling, Throttling.User, Throttling.Api or ServiceUnavailable").into_response();
        }
        faults.throttle_code = code;
    }
    if let Some(fail_next) = update.fail_next {
        faults.fail_next.extend(fail_next);
    }
    tracing::info!(?faults, "fault injection updated");
    world.faults = faults.clone();
    Json(json!(faults)).into_response()
}

#[derive(Deserialize)]
struct JobsUpdate {
    fail_rate: Option<f64>,
    timeout_rate: Option<f64>,
    delay_ms: Option<u64>,
    /// Appended to the queue of forced outcomes.
    force: Option<Vec<JobOutcome>>,
}

async fn control_jobs(State(shared): State<AppState>, Json(update): Json<JobsUpdate>) -> Response {
    let mut world = shared.world.lock().expect("world lock");
    let mut settings = world.jobs_settings.clone();
    for (value, slot, name) in [
        (update.fail_rate, &mut settings.fail_rate, "fail_rate"),
        (
            update.timeout_rate,
            &mut settings.timeout_rate,
            "timeout_rate",
        ),
    ] {
        if let Some(v) = value {
            match rate(v, name) {
                Ok(v) => *slot = v,
                Err(message) => return (StatusCode::BAD_REQUEST, message).into_response(),
            }
        }
    }
    if let Some(delay) = update.delay_ms {
        settings.delay_ms = delay;
    }
    settings.forced.extend(update.force.unwrap_or_default());
    world.jobs_settings = settings.clone();
    Json(json!(settings)).into_response()
}

#[derive(Deserialize)]
struct TimingUpdate {
    registration_delay_ms: Option<u64>,
    health_delay_ms: Option<u64>,
    nlb_report_delay_ms: Option<u64>,
}

async fn control_timing(
    State(shared): State<AppState>,
    Json(update): Json<TimingUpdate>,
) -> Json<Value> {
    let mut world = shared.world.lock().expect("world lock");
    if let Some(v) = update.registration_delay_ms {
        world.timing.registration_delay_ms = v;
    }
    if let Some(v) = update.health_delay_ms {
        world.timing.health_delay_ms = v;
    }
    if let Some(v) = update.nlb_report_delay_ms {
        world.timing.nlb_report_delay_ms = v;
    }
    Json(json!(world.timing))
}

#[derive(Deserialize)]
struct HealthUpdate {
    ip: String,
    port: u16,
    /// `true`/`false` forces; `null` returns to simulated or probed health.
    healthy: Option<bool>,
}

async fn control_health(
    State(shared): State<AppState>,
    Json(update): Json<HealthUpdate>,
) -> Response {
    let matched = shared.world.lock().expect("world lock").force_health(
        &update.ip,
        update.port,
        update.healthy,
    );
    if matched == 0 {
        return (StatusCode::NOT_FOUND, Json(json!({"matched": 0}))).into_response();
    }
    Json(json!({"matched": matched})).into_response()
}

/// `POST /_emulator/vpcs`: adds or replaces a VPC and its CIDR blocks.
async fn control_vpcs(State(shared): State<AppState>, Json(vpc): Json<Vpc>) -> Response {
    match shared.world.lock().expect("world lock").register_vpc(vpc) {
        Ok(vpc) => Json(json!(vpc)).into_response(),
        Err(message) => (StatusCode::BAD_REQUEST, message).into_response(),
    }
}

/// `POST /_emulator/enis`: an ENI holding the given private IPs (the pods' IPs).
async fn control_enis(
    State(shared): State<AppState>,
    Json(registration): Json<EniRegistration>,
) -> Response {
    match shared
        .world
        .lock()
        .expect("world lock")
        .register_eni(registration)
    {
        Ok(eni) => Json(json!(eni)).into_response(),
        Err(message) => (StatusCode::BAD_REQUEST, message).into_response(),
    }
}

/// `POST /_emulator/quotas` `{"slb_quota_instances_num": 1000, ...}`: sets the
/// account's quotas (the rest keep their values); answers every quota in force.
async fn control_quotas(
    State(shared): State<AppState>,
    Json(values): Json<std::collections::BTreeMap<String, u32>>,
) -> Response {
    let mut world = shared.world.lock().expect("world lock");
    for (name, value) in values {
        if let Err(message) = world.quotas.set(&name, value) {
            return (StatusCode::BAD_REQUEST, message).into_response();
        }
    }
    Json(json!(world.quotas)).into_response()
}

/// `POST /_emulator/server-certificates` `{"id": "..."}`: a server certificate the
/// account holds, which HTTPS listeners may then name.
async fn control_server_certificates(
    State(shared): State<AppState>,
    Json(certificate): Json<ServerCertificate>,
) -> Response {
    if certificate.id.is_empty() {
        return (StatusCode::BAD_REQUEST, "id is empty").into_response();
    }
    let mut world = shared.world.lock().expect("world lock");
    world.server_certificates.insert(certificate.id.clone());
    Json(json!({"id": certificate.id})).into_response()
}

#[derive(serde::Deserialize)]
struct ServerCertificate {
    id: String,
}

/// `POST /_emulator/ecis`: an elastic container instance (a virtual-node pod).
async fn control_ecis(
    State(shared): State<AppState>,
    Json(registration): Json<EciRegistration>,
) -> Response {
    match shared
        .world
        .lock()
        .expect("world lock")
        .register_eci(registration)
    {
        Ok(eci) => Json(json!(eci)).into_response(),
        Err(message) => (StatusCode::BAD_REQUEST, message).into_response(),
    }
}
