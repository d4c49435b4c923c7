//! The command line: one clap tree, global logging flags plus one subcommand per mode
//! (`controller`, `agent`, `status`, `gates`). Each part owns its flags
//! (`telemetry::LoggingArgs`, `leader::LeaderArgs`, `gates::GateControllerArgs`, `agent::AgentArgs`);
//! this module puts them together. [`status`] and [`gates`] are the commands for people
//! (also `kubectl rollgate ...`, see `kubectl_plugin_name`), [`output`] their `-o`.
pub mod gates;
pub mod output;
pub mod status;

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use self::output::OutputFormat;
use crate::agent::AgentArgs;
use crate::duration_flag::parse_interval;
use crate::gates::inject::InjectArgs;
use crate::gates::GateControllerArgs;
use crate::leader::LeaderArgs;
use crate::runtime::Workers;
use crate::telemetry::LoggingArgs;

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

/// kubectl runs `kubectl-rollgate ARGS` for `kubectl rollgate ARGS`; installed under
/// that name (a link to this binary), rollgate is its own kubectl plugin.
pub const KUBECTL_PLUGIN_NAME: &str = "kubectl-rollgate";

/// The name help and errors should use for the program invoked as `argv0`.
pub fn display_name(argv0: &std::ffi::OsStr) -> Option<&'static str> {
    let file = std::path::Path::new(argv0).file_name()?;
    (file == KUBECTL_PLUGIN_NAME).then_some("kubectl rollgate")
}

/// Parses the command line; as a kubectl plugin, help and errors say `kubectl rollgate`.
pub fn parse() -> Cli {
    let argv0 = std::env::args_os().next().unwrap_or_default();
    match display_name(&argv0) {
        Some(name) => {
            let matches = Cli::command().bin_name(name).name(name).get_matches();
            Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
        }
        None => Cli::parse(),
    }
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
    Status(StatusCommandArgs),
    /// Show the load-balancer readiness gates of a Service's pods, or of one pod.
    Gates(GatesCommandArgs),
}

impl Command {
    /// The runtime a mode runs on: the controller-manager on one thread, the agent and
    /// `status` with a worker per core (see [`Workers`] for the measurements).
    pub fn workers(&self) -> Workers {
        match self {
            Command::Controller(_) => Workers::One,
            Command::Agent(_) | Command::Status(_) | Command::Gates(_) => Workers::PerCore,
        }
    }
}

/// `rollgate status`'s arguments (a read-only command, not the controller's flags).
#[derive(Debug, Args)]
pub struct StatusCommandArgs {
    /// What to show: `daemonset/NAME` (also `ds/NAME`).
    pub target: String,
    /// Namespace; defaults to the kubeconfig context's namespace.
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// Keep watching with a progress bar until the rollout completes.
    #[arg(short, long)]
    pub watch: bool,
    /// `table` for people, `json` or `yaml` for scripts (with --watch: the final state).
    #[arg(short, long, value_enum, default_value_t)]
    pub output: OutputFormat,
}

/// `rollgate gates`'s arguments (a read-only command; the readiness-gate controller's
/// flags are `gates::GateControllerArgs`, in `ControllerArgs`).
#[derive(Debug, Args)]
pub struct GatesCommandArgs {
    /// What to show: `svc/NAME` (every gated pod of the Service) or `pod/NAME`.
    pub target: String,
    /// Namespace; defaults to the kubeconfig context's namespace.
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// `table` for people, `json` or `yaml` for scripts.
    #[arg(short, long, value_enum, default_value_t)]
    pub output: OutputFormat,
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
    /// How long a pre-pull Job may take before it fails (`PullImageFail`): `600`,
    /// `600s`, `90m`, `2h`. A DaemonSet's annotation `rollgate.io/image-pull-deadline`
    /// overrides it: size it for the image over the slowest link.
    #[arg(
        long,
        env = "ROLLGATE_PREPULL_DEADLINE",
        default_value = "600s",
        value_parser = crate::daemonset::image_pull::deadline::parse_deadline,
    )]
    pub prepull_deadline: Duration,
    /// Retired: a returning node's pod no longer waits for the kubelet's report (its
    /// replacement spends budget instead). Still accepted, so that manifests that set
    /// it keep starting; the controller logs a warning that it has no effect.
    #[arg(long, env = "ROLLGATE_STALE_STATUS_WAIT", hide = true, value_parser = parse_interval)]
    pub stale_status_wait: Option<Duration>,
    /// AdvancedRollingUpdate: most pods one plan deletes, on top of max-unavailable.
    /// It bounds the burst of deletions, re-creations and image pulls when a large
    /// budget opens at once; the next plan follows at the next pod event. 250 is
    /// OpenYurt's cap, so migrating users lose no speed.
    #[arg(long, env = "ROLLGATE_MAX_DELETIONS_PER_PLAN", default_value_t = 250, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_deletions_per_plan: u32,
    /// AdvancedRollingUpdate: after another updater (yurt-manager's daemonpodupdater) was
    /// last seen deleting a DaemonSet's pods, how long rollgate keeps its hands off that
    /// DaemonSet. yurt-manager re-plans on every pod event, so a running one is seen
    /// again within seconds; 5 minutes outlasts its requeues without stalling a
    /// rollout long after it was turned off.
    #[arg(long, env = "ROLLGATE_OTHER_UPDATER_QUIET", default_value = "5m", value_parser = parse_interval)]
    pub other_updater_quiet: Duration,
    /// AdvancedRollingUpdate: a rollout waiting on the native DaemonSet controller
    /// (latest generation not observed, no ControllerRevision yet) longer than this gets
    /// a Warning Event (NativeControllerStalled) and the
    /// rollgate_daemonset_native_controller_stalled gauge. kube-controller-manager
    /// answers in milliseconds, and a leader fail-over takes its 15 s lease plus a
    /// resync; 2 minutes is past both, well before a person would suspect rollgate.
    #[arg(long, env = "ROLLGATE_NATIVE_CONTROLLER_STALL_AFTER", default_value = "2m", value_parser = parse_interval)]
    pub native_controller_stall_after: Duration,
    /// AdvancedRollingUpdate with `rollgate.io/pull-ahead: "true"`: most image pulls
    /// (pull Jobs) in flight per DaemonSet. Each pull downloads the new images on one
    /// node; the bound keeps a wave from saturating a registry or a shared uplink.
    #[arg(long, env = "ROLLGATE_PULL_AHEAD_PARALLELISM", default_value_t = crate::daemonset::pull_ahead::PullAheadLimits::DEFAULT_PARALLELISM as u32, value_parser = clap::value_parser!(u32).range(1..))]
    pub pull_ahead_parallelism: u32,
    /// Pull-ahead: how many nodes past the ones the budget allows now may pull already,
    /// so the next wave's images arrive while this wave's pods start. Default: the
    /// budget (one more wave).
    #[arg(long, env = "ROLLGATE_PULL_AHEAD_LOOKAHEAD")]
    pub pull_ahead_lookahead: Option<u32>,
    /// Pull-ahead: failed (or timed-out) pulls of a node before its old pod is replaced
    /// without the image (Warning PullAheadGaveUp). A retry covers an evicted Job or a
    /// registry hiccup; a node that fails more has a cause a retry does not fix, and must
    /// not hold the rollout forever.
    #[arg(long, env = "ROLLGATE_PULL_AHEAD_TRIES", default_value_t = crate::daemonset::pull_ahead::PullAheadLimits::DEFAULT_MAX_TRIES, value_parser = clap::value_parser!(u32).range(1..))]
    pub pull_ahead_tries: u32,
    #[command(flatten)]
    pub leader: LeaderArgs,
    #[command(flatten)]
    pub gates: GateControllerArgs,
    #[command(flatten)]
    pub webhook: InjectArgs,
}

impl ControllerArgs {
    /// The pull-ahead flags, as the planner takes them.
    pub fn pull_ahead_limits(&self) -> crate::daemonset::pull_ahead::PullAheadLimits {
        crate::daemonset::pull_ahead::PullAheadLimits {
            parallelism: self.pull_ahead_parallelism as usize,
            lookahead: self.pull_ahead_lookahead.map(|n| n as usize),
            max_tries: self.pull_ahead_tries,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_the_plugin_name_it_is_kubectl_rollgate() {
        use std::ffi::OsStr;
        assert_eq!(
            display_name(OsStr::new("/home/me/.local/bin/kubectl-rollgate")),
            Some("kubectl rollgate")
        );
        assert_eq!(
            display_name(OsStr::new("kubectl-rollgate")),
            Some("kubectl rollgate")
        );
        assert_eq!(display_name(OsStr::new("/usr/bin/rollgate")), None);
        assert_eq!(display_name(OsStr::new("kubectl-rollgate-old")), None);
    }

    #[test]
    fn gates_and_status_take_an_output_format() {
        let cli = Cli::try_parse_from(["rollgate", "gates", "svc/web", "-n", "shop", "-o", "yaml"])
            .unwrap();
        let Command::Gates(args) = cli.command else {
            panic!("gates");
        };
        assert_eq!(
            (args.target.as_str(), args.output),
            ("svc/web", OutputFormat::Yaml)
        );
        let cli = Cli::try_parse_from(["rollgate", "status", "ds/edge", "-o", "json"]).unwrap();
        let Command::Status(args) = cli.command else {
            panic!("status");
        };
        assert_eq!(args.output, OutputFormat::Json);
        let err = Cli::try_parse_from(["rollgate", "gates", "svc/web", "-o", "xml"]).unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("table") && message.contains("yaml"),
            "{message}"
        );
    }

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
    fn the_rolling_limits_default_to_the_planners_defaults_refuse_a_zero_cap_and_still_accept_the_retired_wait(
    ) {
        use crate::daemonset::rolling_plan::RollingLimits;
        let parse = |args: &[&str]| match Cli::try_parse_from(args).map(|c| c.command) {
            Ok(Command::Controller(c)) => Ok((
                RollingLimits {
                    max_deletions_per_plan: c.max_deletions_per_plan as usize,
                },
                c.stale_status_wait,
            )),
            Ok(other) => panic!("parsed as {other:?}"),
            Err(e) => Err(e.to_string()),
        };
        assert_eq!(
            parse(&["rollgate", "controller"]).unwrap(),
            (RollingLimits::default(), None)
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
            (
                RollingLimits {
                    max_deletions_per_plan: 20
                },
                Some(Duration::from_secs(60))
            )
        );
        assert!(parse(&["rollgate", "controller", "--max-deletions-per-plan", "0"]).is_err());
    }

    #[test]
    fn the_pull_ahead_limits_default_to_the_planners_and_refuse_zero() {
        use crate::daemonset::pull_ahead::PullAheadLimits;
        let parse = |args: &[&str]| match Cli::try_parse_from(args).map(|c| c.command) {
            Ok(Command::Controller(c)) => Ok(c.pull_ahead_limits()),
            Ok(other) => panic!("parsed as {other:?}"),
            Err(e) => Err(e.to_string()),
        };
        assert_eq!(
            parse(&["rollgate", "controller"]).unwrap(),
            PullAheadLimits::default()
        );
        assert_eq!(
            parse(&[
                "rollgate",
                "controller",
                "--pull-ahead-parallelism",
                "5",
                "--pull-ahead-lookahead",
                "0",
                "--pull-ahead-tries",
                "1"
            ])
            .unwrap(),
            PullAheadLimits {
                parallelism: 5,
                lookahead: Some(0),
                max_tries: 1
            }
        );
        assert!(parse(&["rollgate", "controller", "--pull-ahead-parallelism", "0"]).is_err());
        assert!(parse(&["rollgate", "controller", "--pull-ahead-tries", "0"]).is_err());
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
    fn the_prepull_deadline_defaults_to_the_builders_and_takes_the_annotations_forms() {
        let parse = |args: &[&str]| match Cli::try_parse_from(args).map(|c| c.command) {
            Ok(Command::Controller(c)) => Ok(c.prepull_deadline),
            Ok(other) => panic!("parsed as {other:?}"),
            Err(e) => Err(e.to_string()),
        };
        assert_eq!(
            parse(&["rollgate", "controller"]).unwrap(),
            crate::daemonset::image_pull::DEFAULT_DEADLINE
        );
        assert_eq!(
            parse(&["rollgate", "controller", "--prepull-deadline", "2h"]).unwrap(),
            Duration::from_secs(7200)
        );
        let error = parse(&["rollgate", "controller", "--prepull-deadline", "0"]).unwrap_err();
        assert!(error.contains("600, 600s, 90m, 2h"), "{error}");
    }

    #[test]
    fn the_state_write_interval_defaults_to_ten_seconds() {
        // The accepted forms are tested with their parser, `duration_flag`.
        let cli = Cli::parse_from(["rollgate", "agent", "--node-name", "edge-1"]);
        match cli.command {
            Command::Agent(a) => {
                assert_eq!(a.state_write_interval, std::time::Duration::from_secs(10))
            }
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn json_log_format_is_accepted_after_the_subcommand() {
        let cli = Cli::parse_from(["rollgate", "controller", "--log-format", "json"]);
        assert_eq!(cli.logging.log_format, crate::telemetry::LogFormat::Json);
    }

    #[test]
    fn the_configuration_reference_documents_every_flag() {
        use clap::CommandFactory;
        let readme = include_str!("../../docs/configuration.md");
        let flags = &readme[readme.find("\n## Flags").expect("a Flags section")..];
        let flags = &flags[..flags[4..].find("\n## ").map_or(flags.len(), |i| i + 4)];
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
            "docs/configuration.md's Flags table lacks: {missing:?}"
        );
    }
}
