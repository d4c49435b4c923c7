//! All configuration is one clap tree: global logging flags plus one subcommand per mode.
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "rollgate",
    version,
    about = "Safe DaemonSet upgrades on edge nodes and load-balancer readiness gates"
)]
pub struct Cli {
    #[command(flatten)]
    pub logging: LoggingArgs,
    #[command(subcommand)]
    pub command: Command,
}

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

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the controllers (DaemonSet upgrades, readiness gates).
    Controller(ControllerArgs),
    /// Run the node-local agent API (one per node).
    Agent(AgentArgs),
    /// Show an upgrade's progress (`kubectl rollout status` refuses OnDelete DaemonSets).
    Status(StatusArgs),
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// What to show: `daemonset/NAME` (also `ds/NAME`).
    pub target: String,
    /// Namespace; defaults to the kubeconfig context's namespace.
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// Keep watching with a progress bar until the rollout completes.
    #[arg(short, long)]
    pub watch: bool,
}

#[derive(Debug, Args)]
pub struct ControllerArgs {
    /// Address of the HTTP server for /metrics, /livez, /healthz and /readyz.
    #[arg(long, env = "ROLLGATE_METRICS_ADDR", default_value = "127.0.0.1:8080")]
    pub metrics_addr: SocketAddr,
    /// Only manage DaemonSets in this namespace (default: all namespaces). Nodes are
    /// always watched cluster-wide.
    #[arg(long, env = "ROLLGATE_WATCH_NAMESPACE")]
    pub watch_namespace: Option<String>,
    /// How many DaemonSets are reconciled at the same time.
    #[arg(long, env = "ROLLGATE_DAEMONSET_CONCURRENCY", default_value_t = 4)]
    pub daemonset_concurrency: u16,
    #[command(flatten)]
    pub leader: LeaderArgs,
}

/// Leader election: every replica watches, only the Lease holder writes.
#[derive(Debug, Clone, Args)]
pub struct LeaderArgs {
    /// Elect a leader on a Lease before writing. Turn off only for a single replica.
    #[arg(long, env = "ROLLGATE_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Name of the coordination.k8s.io/v1 Lease.
    #[arg(
        long,
        env = "ROLLGATE_LEASE_NAME",
        default_value = "rollgate-controller"
    )]
    pub lease_name: String,
    /// Namespace of the Lease: the controller's own (downward API).
    #[arg(long, env = "POD_NAMESPACE", default_value = "rollgate-system")]
    pub lease_namespace: String,
    /// Seconds a leader holds the Lease without renewing it (client-go: 15).
    #[arg(long, env = "ROLLGATE_LEASE_DURATION", default_value_t = 15)]
    pub lease_duration: u64,
    /// Seconds between renewals (client-go's renew deadline: 10). Must be below the
    /// duration; the rest is the margin before the Lease would expire.
    #[arg(long, env = "ROLLGATE_LEASE_RENEW_EVERY", default_value_t = 10)]
    pub renew_every: u64,
    /// This replica's identity in the Lease: the pod name (downward API).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
}

impl LeaderArgs {
    /// The pod name, else the host name and process id (runs outside a pod).
    pub fn identity(&self) -> String {
        self.identity.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_else(|_| "rollgate".into());
            format!("{host}-{}", std::process::id())
        })
    }
}

#[derive(Debug, Args)]
pub struct AgentArgs {
    /// The node this agent serves; only pods bound to it are visible.
    #[arg(long, env = "NODE_NAME")]
    pub node_name: String,
    /// Address of the node-local API. Loopback only by design.
    #[arg(long, env = "ROLLGATE_AGENT_LISTEN", default_value = "127.0.0.1:10267")]
    pub listen: SocketAddr,
    /// Where the agent keeps its last known pod state, to answer while cut off.
    #[arg(
        long,
        env = "ROLLGATE_AGENT_STATE_DIR",
        default_value = "/var/lib/rollgate-agent"
    )]
    pub state_dir: PathBuf,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn agent_defaults_to_the_openyurt_port_on_loopback() {
        let cli = Cli::parse_from(["rollgate", "agent", "--node-name", "edge-1"]);
        match cli.command {
            Command::Agent(a) => assert_eq!(a.listen.to_string(), "127.0.0.1:10267"),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn json_log_format_is_accepted_after_the_subcommand() {
        let cli = Cli::parse_from(["rollgate", "controller", "--log-format", "json"]);
        assert_eq!(cli.logging.log_format, LogFormat::Json);
    }
}
