//! `lb-emulator`: serves the emulated CLB/NLB APIs on loopback until SIGTERM/Ctrl-C.
//! The first line on stdout is the bound address (`127.0.0.1:PORT`), so a test can
//! start it with `--listen 127.0.0.1:0` and read where it went.

use std::io::Write as _;
use std::time::Duration;

use clap::Parser;
use lb_emulator::{EmulatorConfig, HealthMode};

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Alibaba Cloud CLB/NLB API emulator for tests and demos"
)]
struct Args {
    /// Address to listen on; loopback only. Port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0", env = "LB_EMULATOR_LISTEN")]
    listen: std::net::SocketAddr,
    /// Also write the bound address to this file (for scripts).
    #[arg(long)]
    address_file: Option<std::path::PathBuf>,
    #[arg(long, default_value = "cn-hangzhou")]
    region: String,
    /// Accepted AccessKey as ID:SECRET (repeatable).
    #[arg(
        long = "access-key",
        default_value = "emulator-access-key-id:emulator-access-key-secret"
    )]
    access_keys: Vec<String>,
    /// Time from add to "registered".
    #[arg(long, default_value = "200", value_name = "MS")]
    registration_delay_ms: u64,
    /// Time from registered to healthy (simulated mode).
    #[arg(long, default_value = "500", value_name = "MS")]
    health_delay_ms: u64,
    #[arg(long, value_enum, default_value = "simulated")]
    health_mode: HealthMode,
    /// How often TCP health probes run (tcp mode).
    #[arg(long, default_value = "500", value_name = "MS")]
    probe_interval_ms: u64,
    /// How long NLB jobs stay Processing.
    #[arg(long, default_value = "200", value_name = "MS")]
    job_delay_ms: u64,
    #[arg(long, default_value = "0")]
    job_fail_rate: f64,
    #[arg(long, default_value = "0")]
    job_timeout_rate: f64,
    /// Share of API calls answered with throttling.
    #[arg(long, default_value = "0")]
    throttle_rate: f64,
    /// Throttling.User (HTTP 400) or ServiceUnavailable (HTTP 503).
    #[arg(long, default_value = "Throttling.User")]
    throttle_code: String,
    /// Share of API calls answered with HTTP 500.
    #[arg(long, default_value = "0")]
    server_error_rate: f64,
    /// Lifetime of STS / metadata credentials.
    #[arg(long, default_value = "3600", value_name = "SECONDS")]
    sts_duration_secs: u64,
    /// How often registration, health and jobs advance (the timeline's resolution).
    #[arg(long, default_value = "25", value_name = "MS")]
    tick_ms: u64,
    /// Enforce the per-action API rate limits: the published quotas (README's
    /// rate-limit table) and any `--api-rate-limit`. Off by default.
    #[arg(long)]
    api_rate_limits: bool,
    /// An explicit limit PRODUCT:Action=N/SECONDS, e.g. slb:DescribeHealthStatus=10/1
    /// (repeatable); applies when --api-rate-limits is on.
    #[arg(long = "api-rate-limit", value_name = "PRODUCT:ACTION=N/SECONDS")]
    api_rate_limit: Vec<String>,
    /// An account quota NAME=N, e.g. slb_quota_instances_num=1000 (repeatable); the
    /// others keep their published defaults (README: account quotas).
    #[arg(long = "quota", value_name = "NAME=N")]
    quota: Vec<String>,
    /// Log as JSON lines instead of text.
    #[arg(long)]
    log_json: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    // Logs go to stderr: stdout's first line is reserved for the address.
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if args.log_json {
        subscriber.json().init();
    } else {
        subscriber.init();
    }
    if !args.listen.ip().is_loopback() {
        anyhow::bail!("--listen must be a loopback address, got {}", args.listen);
    }
    for (name, value) in [
        ("--job-fail-rate", args.job_fail_rate),
        ("--job-timeout-rate", args.job_timeout_rate),
        ("--throttle-rate", args.throttle_rate),
        ("--server-error-rate", args.server_error_rate),
    ] {
        if !(0.0..=1.0).contains(&value) {
            anyhow::bail!("{name} must be within 0..=1");
        }
    }
    let mut account_quotas = lb_emulator::AccountQuotas::default();
    for quota in &args.quota {
        account_quotas.set_from(quota).map_err(anyhow::Error::msg)?;
    }
    let config = EmulatorConfig {
        listen: args.listen,
        region: args.region,
        access_keys: lb_emulator::parse_access_keys(&args.access_keys)?,
        registration_delay: Duration::from_millis(args.registration_delay_ms),
        health_delay: Duration::from_millis(args.health_delay_ms),
        health_mode: args.health_mode,
        probe_interval: Duration::from_millis(args.probe_interval_ms),
        job_delay: Duration::from_millis(args.job_delay_ms),
        job_fail_rate: args.job_fail_rate,
        job_timeout_rate: args.job_timeout_rate,
        throttle_rate: args.throttle_rate,
        throttle_code: args.throttle_code,
        server_error_rate: args.server_error_rate,
        sts_duration: Duration::from_secs(args.sts_duration_secs),
        tick: Duration::from_millis(args.tick_ms.max(1)),
        api_rate_limits: args.api_rate_limits,
        api_rate_limit_overrides: args
            .api_rate_limit
            .iter()
            .map(|s| lb_emulator::quota::parse_override(s))
            .collect::<Result<_, _>>()
            .map_err(anyhow::Error::msg)?,
        account_quotas,
    };
    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    let addr = listener.local_addr()?;
    {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{addr}")?;
        stdout.flush()?;
    }
    if let Some(path) = &args.address_file {
        std::fs::write(path, format!("{addr}\n"))?;
    }
    tracing::info!(%addr, "lb-emulator listening");
    lb_emulator::run(listener, config, shutdown_signal()).await
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => tracing::info!("Ctrl-C: shutting down"),
        _ = terminate => tracing::info!("SIGTERM: shutting down"),
    }
}
