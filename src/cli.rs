//! All configuration is one clap tree: global logging flags plus one subcommand per mode.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

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

// Parsed once at start; boxing the controller's flags would buy nothing.
#[allow(clippy::large_enum_variant)]
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
    /// Image of the pre-pull Job's no-op helper: a static BusyBox with `/bin/busybox`
    /// and `/bin/cp`. Air-gapped edge nodes cannot reach the public default: mirror it
    /// and name the mirror here.
    #[arg(
        long,
        env = "ROLLGATE_PREPULL_HELPER_IMAGE",
        default_value = crate::daemonset::image_pull::DEFAULT_HELPER_IMAGE,
        value_parser = parse_image_reference,
    )]
    pub prepull_helper_image: String,
    /// AdvancedRollingUpdate: how long after a node turns Ready again a pod status
    /// written while it was cut off (Ready=False from the node-lifecycle controller) is
    /// taken as unknown: such a pod is neither replaced nor counted until the kubelet
    /// reports on it again or this has passed. The kubelet syncs pod status every
    /// 10 s; 30 s leaves it three tries.
    #[arg(long, env = "ROLLGATE_STALE_STATUS_WAIT", default_value = "30s", value_parser = parse_interval)]
    pub stale_status_wait: Duration,
    /// AdvancedRollingUpdate: most pods one plan deletes, on top of max-unavailable.
    /// It bounds the burst of deletions, re-creations and image pulls when a large
    /// budget opens at once; the next plan follows at the next pod event. 250 is
    /// OpenYurt's cap, so migrating users lose no speed.
    #[arg(long, env = "ROLLGATE_MAX_DELETIONS_PER_PLAN", default_value_t = 250, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_deletions_per_plan: u32,
    #[command(flatten)]
    pub leader: LeaderArgs,
    #[command(flatten)]
    pub gates: GateArgs,
}

/// The load-balancer readiness gates (Alibaba Cloud CLB/NLB).
#[derive(Debug, Clone, Args)]
pub struct GateArgs {
    /// Region of the load balancers, e.g. `cn-hangzhou`. The readiness-gate controller
    /// runs only when it is set (so no cloud call is ever made without it).
    #[arg(long, env = "ALIBABA_CLOUD_REGION_ID")]
    pub cloud_region: Option<String>,
    /// `vpc` endpoints (`slb-vpc.<region>.aliyuncs.com`, no internet egress needed) or `public`.
    #[arg(long, env = "ROLLGATE_CLOUD_NETWORK", value_enum, default_value_t = CloudNetwork::Vpc)]
    pub cloud_network: CloudNetwork,
    /// `host[:port]` replacing the regional CLB endpoint (the emulator in tests).
    #[arg(long, env = "ALIBABA_CLOUD_SLB_ENDPOINT")]
    pub clb_endpoint: Option<String>,
    /// `host[:port]` replacing the regional NLB endpoint.
    #[arg(long, env = "ALIBABA_CLOUD_NLB_ENDPOINT")]
    pub nlb_endpoint: Option<String>,
    /// `https`, or `http` for a local emulator only.
    #[arg(long, env = "ROLLGATE_CLOUD_SCHEME", default_value = "https")]
    pub cloud_scheme: alibaba_lb::Scheme,
    /// Cloud calls per second per product (client-side token bucket, bursts of twice that).
    #[arg(long, env = "ROLLGATE_CLOUD_RATE_LIMIT", default_value_t = 10.0)]
    pub cloud_rate_limit: f64,
    /// VPC of created load balancers (NLB needs it; CLB intranet too).
    #[arg(long, env = "ROLLGATE_CLOUD_VPC_ID")]
    pub cloud_vpc_id: Option<String>,
    /// This cluster's id in backend descriptions (`k8s/<port>/<svc>/<ns>/<cluster-id>`):
    /// rollgate only ever changes backends that carry it.
    #[arg(long, env = "ROLLGATE_CLUSTER_ID", default_value = "kubernetes")]
    pub cluster_id: String,
    /// Which LoadBalancer Services rollgate manages: `standard` (no class = CLB,
    /// `alibabacloud.com/nlb` = NLB, and rollgate's own classes) or `rollgate` (only
    /// `rollgate.io/clb` and `rollgate.io/nlb`, beside Alibaba's cloud controller).
    #[arg(long, env = "ROLLGATE_LOAD_BALANCER_CLASSES", value_enum, default_value_t = crate::gates::service::ClassSelection::Standard)]
    pub load_balancer_classes: crate::gates::service::ClassSelection,
    /// How long a terminating pod's backend stays at weight 0 before it is removed
    /// (never longer than the pod's own grace period).
    #[arg(long, env = "ROLLGATE_GATE_DRAIN_TIME", default_value = "10s", value_parser = parse_interval)]
    pub gate_drain_time: Duration,
    /// Health poll interval of a Service while one of its gates is pending.
    #[arg(long, env = "ROLLGATE_HEALTH_POLL_FAST", default_value = "1s", value_parser = parse_interval)]
    pub health_poll_fast: Duration,
    /// Health poll interval of a Service whose gates are all True.
    #[arg(long, env = "ROLLGATE_HEALTH_POLL_SLOW", default_value = "10s", value_parser = parse_interval)]
    pub health_poll_slow: Duration,
    /// How many Services are reconciled at the same time.
    #[arg(long, env = "ROLLGATE_GATE_CONCURRENCY", default_value_t = 8)]
    pub gate_concurrency: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CloudNetwork {
    Vpc,
    Public,
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

/// A container image reference as the kubelet takes it: not empty, no whitespace.
/// (The registry has the final word on the rest.)
fn parse_image_reference(value: &str) -> Result<String, String> {
    let accepted = "expected an image reference such as \
         registry.example:5000/library/busybox:1.36.1-musl or name@sha256:<digest>";
    if value.trim().is_empty() {
        return Err(format!("the image reference is empty; {accepted}"));
    }
    if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "{value:?} contains whitespace or control characters; {accepted}"
        ));
    }
    Ok(value.to_string())
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
    /// The shortest time between two writes of the state file (edge nodes often run on
    /// SD cards): seconds (`10`, `10s`), minutes (`2m`) or milliseconds (`500ms`). The
    /// file is written only when the state changed, and once more at shutdown.
    #[arg(
        long,
        env = "ROLLGATE_AGENT_STATE_WRITE_INTERVAL",
        default_value = "10s",
        value_parser = parse_interval
    )]
    pub state_write_interval: Duration,
}

/// A duration as `<n>`, `<n>s`, `<n>m` or `<n>ms`, `n` a whole number.
fn parse_interval(value: &str) -> Result<Duration, String> {
    let value = value.trim();
    let (number, unit) = match value.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => value.split_at(at),
        None => (value, "s"),
    };
    let accepted = "accepted forms: 10, 10s, 2m, 500ms";
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{value:?} is not a duration; {accepted}"))?;
    match unit {
        "s" => Ok(Duration::from_secs(n)),
        "m" => n
            .checked_mul(60)
            .map(Duration::from_secs)
            .ok_or_else(|| format!("{value:?} is too long; {accepted}")),
        "ms" => Ok(Duration::from_millis(n)),
        other => Err(format!("unknown unit {other:?} in {value:?}; {accepted}")),
    }
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
    fn the_prepull_helper_image_defaults_to_busybox_and_can_be_a_mirror() {
        let parse = |args: &[&str]| match Cli::try_parse_from(args).map(|c| c.command) {
            Ok(Command::Controller(c)) => Ok(c.prepull_helper_image),
            Ok(other) => panic!("parsed as {other:?}"),
            Err(e) => Err(e.to_string()),
        };
        assert_eq!(
            parse(&["rollgate", "controller"]).unwrap(),
            crate::daemonset::image_pull::DEFAULT_HELPER_IMAGE
        );
        assert_eq!(
            parse(&[
                "rollgate",
                "controller",
                "--prepull-helper-image",
                "mirror.edge.local/library/busybox:1.36.1-musl"
            ])
            .unwrap(),
            "mirror.edge.local/library/busybox:1.36.1-musl"
        );
        for bad in ["", "  ", "busybox latest"] {
            let error =
                parse(&["rollgate", "controller", "--prepull-helper-image", bad]).expect_err(bad);
            assert!(error.contains("expected an image reference"), "{error}");
        }
    }

    #[test]
    fn the_rolling_limits_default_to_the_planners_defaults_and_refuse_a_zero_cap() {
        use crate::daemonset::rolling_plan::RollingLimits;
        let parse = |args: &[&str]| match Cli::try_parse_from(args).map(|c| c.command) {
            Ok(Command::Controller(c)) => Ok(RollingLimits {
                stale_status_wait: c.stale_status_wait,
                max_deletions_per_plan: c.max_deletions_per_plan as usize,
            }),
            Ok(other) => panic!("parsed as {other:?}"),
            Err(e) => Err(e.to_string()),
        };
        assert_eq!(
            parse(&["rollgate", "controller"]).unwrap(),
            RollingLimits::default()
        );
        assert_eq!(
            parse(&[
                "rollgate",
                "controller",
                "--stale-status-wait",
                "1m",
                "--max-deletions-per-plan",
                "20"
            ])
            .unwrap(),
            RollingLimits {
                stale_status_wait: Duration::from_secs(60),
                max_deletions_per_plan: 20
            }
        );
        assert!(parse(&["rollgate", "controller", "--max-deletions-per-plan", "0"]).is_err());
    }

    #[test]
    fn the_state_write_interval_accepts_seconds_minutes_and_milliseconds() {
        let parse = |v: &str| parse_interval(v);
        assert_eq!(parse("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        for bad in ["", "s", "-1", "1.5s", "10h", "ten"] {
            let error = parse(bad).unwrap_err();
            assert!(
                error.contains("accepted forms: 10, 10s, 2m, 500ms"),
                "{bad}: {error}"
            );
        }
        let cli = Cli::parse_from(["rollgate", "agent", "--node-name", "edge-1"]);
        match cli.command {
            Command::Agent(a) => assert_eq!(a.state_write_interval, Duration::from_secs(10)),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn json_log_format_is_accepted_after_the_subcommand() {
        let cli = Cli::parse_from(["rollgate", "controller", "--log-format", "json"]);
        assert_eq!(cli.logging.log_format, LogFormat::Json);
    }

    #[test]
    fn the_readme_documents_every_flag() {
        use clap::CommandFactory;
        let readme = include_str!("../README.md");
        let flags = &readme[readme.find("### Flags").expect("a Flags section")..];
        let flags = &flags[..flags[3..].find("\n### ").map_or(flags.len(), |i| i + 3)];
        let mut missing = Vec::new();
        let root = Cli::command();
        let commands = std::iter::once(&root).chain(root.get_subcommands());
        for command in commands {
            for arg in command.get_arguments() {
                let Some(long) = arg.get_long() else { continue };
                if matches!(long, "help" | "version") {
                    continue;
                }
                if !flags.contains(&format!("`--{long}`")) {
                    missing.push(format!("{} --{long}", command.get_name()));
                }
                if let Some(env) = arg.get_env() {
                    let env = env.to_string_lossy();
                    if !flags.contains(&format!("`{env}`")) {
                        missing.push(format!("{} --{long} env {env}", command.get_name()));
                    }
                }
            }
        }
        assert!(
            missing.is_empty(),
            "README.md's Flags table lacks: {missing:?}"
        );
    }
}
