//! Logging setup and its flags ([`LoggingArgs`]): plain text for people, JSON for log
//! pipelines. Logs go to stderr so that command output (`rollgate status`) stays clean
//! on stdout.
use std::io::IsTerminal;

use clap::{Args, ValueEnum};
use tracing_subscriber::{fmt, prelude::*, EnvFilter};

#[derive(Debug, Args)]
pub struct LoggingArgs {
    /// Log format: `plain` for people, `json` for log pipelines.
    #[arg(long, global = true, env = "ROLLGATE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Plain)]
    pub log_format: LogFormat,
    /// Log filter in `tracing` EnvFilter syntax, e.g. `info,rollgate=debug`.
    #[arg(long, global = true, env = "ROLLGATE_LOG", default_value = "info")]
    pub log_level: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Plain,
    Json,
}

pub fn init(args: &LoggingArgs) -> anyhow::Result<()> {
    let filter = EnvFilter::try_new(&args.log_level)
        .map_err(|e| anyhow::anyhow!("bad --log-level {:?}: {e}", args.log_level))?;
    let registry = tracing_subscriber::registry().with(filter);
    let plain = fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match args.log_format {
        LogFormat::Plain => registry.with(plain).try_init()?,
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .with_writer(std::io::stderr)
                    .json()
                    .flatten_event(true),
            )
            .try_init()?,
    }
    Ok(())
}
