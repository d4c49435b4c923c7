//! An in-memory emulator of the Alibaba Cloud CLB (SLB 2014-05-15) and NLB
//! (2022-04-30) APIs, the ECS (2014-05-26) and VPC (2016-04-28) lookups the
//! controller needs for ENI backends, plus the two credential sources the client
//! uses (STS `AssumeRoleWithOIDC` and ECS instance metadata v2), all on one loopback
//! port.
//!
//! Control endpoints under `/_emulator/` (JSON) read the state and the backend
//! timeline, mark backends unhealthy, set fault and job-outcome rates, and fill the
//! emulated VPC: its CIDR blocks (`vpcs`), the ENIs holding pod IPs (`enis`) and the
//! elastic container instances (`ecis`), and the server certificates HTTPS listeners
//! name (`server-certificates`). An IP no ENI holds is simply not registered.
//! `calls` reports calls and throttled calls per action; `rate-limits` turns the
//! per-action API rate limits (`quota`) on or off and sets explicit limits;
//! `call-log` lists every call with the load balancer it named (`call_log`).
//!
//! `testing` is the setup every test against the emulator shares (its key, a client
//! configuration, the control calls).

pub mod account_quotas;
mod auth;
pub mod call_log;
pub mod config;
pub mod quota;
pub mod testing;
mod world;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use rand::RngExt as _;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use account_quotas::AccountQuotas;
pub use config::{EmulatorConfig, HealthMode};
pub use world::ecs::{EciRegistration, EniRegistration};
use world::{ApiError, Params, World};
pub use world::{JobOutcome, Vpc, DEFAULT_VPC_CIDR, DEFAULT_VPC_ID};

pub const CLB_VERSION: &str = "2014-05-15";
pub const NLB_VERSION: &str = "2022-04-30";
pub const STS_VERSION: &str = "2015-04-01";
pub const ECS_VERSION: &str = "2014-05-26";
pub const VPC_VERSION: &str = "2016-04-28";
/// The RAM role name the metadata endpoint reports.
pub const METADATA_ROLE: &str = "rollgate-emulated-role";

struct Shared {
    world: Mutex<World>,
    config: EmulatorConfig,
    /// Tokens handed out by `PUT /latest/api/token`.
    metadata_tokens: Mutex<Vec<String>>,
    rate_limiter: Mutex<quota::RateLimiter>,
    call_log: Mutex<call_log::CallLog>,
}

type AppState = Arc<Shared>;

/// A running emulator; dropping it shuts the server down.
pub struct RunningEmulator {
    pub addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<anyhow::Result<()>>>,
}

impl RunningEmulator {
    /// `127.0.0.1:PORT`, to use as an endpoint override.
    pub fn endpoint(&self) -> String {
        self.addr.to_string()
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting requests and waits for the server to finish.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        match self.task.take() {
            Some(task) => task.await?,
            None => Ok(()),
        }
    }
}

impl Drop for RunningEmulator {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Binds `config.listen` and serves in the background.
pub async fn serve(config: EmulatorConfig) -> anyhow::Result<RunningEmulator> {
    let listener = TcpListener::bind(config.listen).await?;
    let addr = listener.local_addr()?;
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(run(listener, config, async move {
        let _ = rx.await;
    }));
    Ok(RunningEmulator {
        addr,
        shutdown: Some(tx),
        task: Some(task),
    })
}

/// Serves on `listener` until `shutdown` completes.
pub async fn run(
    listener: TcpListener,
    config: EmulatorConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let shared = Arc::new(Shared {
        world: Mutex::new(World::new(&config)),
        rate_limiter: Mutex::new(quota::RateLimiter::new(
            config.api_rate_limits,
            config.api_rate_limit_overrides.clone(),
        )),
        call_log: Mutex::new(call_log::CallLog::default()),
        config,
        metadata_tokens: Mutex::new(vec![]),
    });
    let ticker = tokio::spawn(tick_forever(shared.clone()));
    let app = Router::new()
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
        .route("/latest/api/token", put(metadata_token))
        .route(
            "/latest/meta-data/ram/security-credentials/",
            get(metadata_role),
        )
        .route(
            "/latest/meta-data/ram/security-credentials/{role}",
            get(metadata_credentials),
        )
        .fallback(api)
        .with_state(shared);
    let result = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await;
    ticker.abort();
    tracing::info!("emulator stopped");
    Ok(result?)
}

async fn tick_forever(shared: AppState) {
    let mut interval = tokio::time::interval(shared.config.tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        interval.tick().await;
        let now = tokio::time::Instant::now();
        let targets = shared
            .world
            .lock()
            .expect("world lock")
            .probe_targets(now, shared.config.probe_interval);
        let mut probes = HashMap::new();
        if !targets.is_empty() {
            let checks = targets.into_iter().map(|(ip, port)| async move {
                let ok = match probe_address(&ip, port) {
                    Some(addr) => tokio::time::timeout(
                        Duration::from_millis(300),
                        tokio::net::TcpStream::connect(addr),
                    )
                    .await
                    .is_ok_and(|r| r.is_ok()),
                    // Never connect off this machine: a non-loopback backend is
                    // reported unhealthy without a packet sent.
                    None => false,
                };
                ((ip, port), ok)
            });
            probes.extend(futures_join_all(checks).await);
        }
        shared.world.lock().expect("world lock").tick(now, &probes);
    }
}

/// Where a tcp-mode health probe may connect: loopback addresses only. Simulated pod
/// IPs (10.x) and anything else that is not this machine get `None`, so the emulator
/// can never send traffic off the host, whatever a test registers.
pub fn probe_address(ip: &str, port: u16) -> Option<SocketAddr> {
    let ip: std::net::IpAddr = ip.parse().ok()?;
    ip.is_loopback().then_some(SocketAddr::new(ip, port))
}

/// Runs futures concurrently (few enough here that spawning is fine).
async fn futures_join_all<F, T>(futures: impl IntoIterator<Item = F>) -> Vec<T>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for handle in handles {
        if let Ok(value) = handle.await {
            out.push(value);
        }
    }
    out
}

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

fn host_id(version: &str, region: &str) -> String {
    match version {
        NLB_VERSION => format!("nlb.{region}.aliyuncs.com"),
        ECS_VERSION => format!("ecs.{region}.aliyuncs.com"),
        VPC_VERSION => format!("vpc.{region}.aliyuncs.com"),
        STS_VERSION => "sts.aliyuncs.com".to_string(),
        _ => format!("slb.{region}.aliyuncs.com"),
    }
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
async fn api(
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

fn assume_role_with_oidc(world: &mut World, p: &Params) -> Result<Value, ApiError> {
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

// ------------------------------------------------------------------ metadata

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

/// The product name of an API version, as the quota table and `--api-rate-limit`
/// spell it; `None` for STS, which is not rate-limited here.
fn quota_product(version: &str) -> Option<&'static str> {
    match version {
        CLB_VERSION => Some("slb"),
        NLB_VERSION => Some("nlb"),
        ECS_VERSION => Some("ecs"),
        VPC_VERSION => Some("vpc"),
        _ => None,
    }
}

// ------------------------------------------------------------------ control

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

/// Builds the configuration's access-key list from `ID:SECRET` strings.
pub fn parse_access_keys(items: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    items
        .iter()
        .map(|item| {
            item.split_once(':')
                .map(|(id, secret)| (id.to_string(), secret.to_string()))
                .filter(|(id, secret)| !id.is_empty() && !secret.is_empty())
                .ok_or_else(|| anyhow::anyhow!("access key must look like ID:SECRET"))
        })
        .collect()
}

/// Counts of what the emulator saw, for tests.
pub fn summarize(state: &Value) -> BTreeMap<String, u64> {
    state["stats"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_u64().map(|n| (k.clone(), n)))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_probes_only_ever_go_to_loopback() {
        assert_eq!(
            probe_address("127.0.0.1", 80),
            Some(SocketAddr::from(([127, 0, 0, 1], 80)))
        );
        assert!(probe_address("::1", 80).is_some());
        for off_host in [
            "10.0.0.7",
            "10.244.1.9",
            "192.168.0.1",
            "198.51.100.10",
            "0.0.0.0",
            "::",
            "localhost",
            "",
            "not-an-ip",
        ] {
            assert_eq!(probe_address(off_host, 80), None, "{off_host}");
        }
    }
}
