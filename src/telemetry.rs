//! Logging setup: plain text for people, JSON for log pipelines.
use tracing_subscriber::{fmt, prelude::*, EnvFilter};

use crate::cli::{LogFormat, LoggingArgs};

pub fn init(args: &LoggingArgs) -> anyhow::Result<()> {
    let filter = EnvFilter::try_new(&args.log_level)
        .map_err(|e| anyhow::anyhow!("bad --log-level {:?}: {e}", args.log_level))?;
    let registry = tracing_subscriber::registry().with(filter);
    match args.log_format {
        LogFormat::Plain => registry.with(fmt::layer().with_target(true)).try_init()?,
        LogFormat::Json => registry
            .with(fmt::layer().json().flatten_event(true))
            .try_init()?,
    }
    Ok(())
}
