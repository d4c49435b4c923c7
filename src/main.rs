use clap::Parser;
use rollgate::cli::{Cli, Command};
use rollgate::{agent, daemonset, manager, runtime, telemetry};

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // The node agent is a guest on small edge nodes: one thread serves its API and its
    // watch, and leaves the other cores to the workloads (and, on 2 cores, keeps its
    // answers from queueing behind its own threads). The controller gets a worker per core.
    let mut builder = match cli.command {
        Command::Agent(_) => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    builder.enable_all().build()?.block_on(async {
        telemetry::init(&cli.logging)?;
        let shutdown = runtime::Shutdown::install();
        match cli.command {
            Command::Controller(args) => manager::run(args, shutdown).await,
            Command::Agent(args) => agent::run(args, shutdown).await,
            Command::Status(args) => daemonset::status::run(args, shutdown).await,
        }
    })
}
