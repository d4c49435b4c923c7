use clap::Parser;
use rollgate::cli::{Cli, Command};
use rollgate::{agent, daemonset, manager, runtime, telemetry};

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    runtime::for_command(&cli.command)?.block_on(async {
        telemetry::init(&cli.logging)?;
        let shutdown = runtime::Shutdown::install();
        match cli.command {
            Command::Controller(args) => manager::run(args, shutdown).await,
            Command::Agent(args) => agent::run(args, shutdown).await,
            Command::Status(args) => daemonset::status::run(args, shutdown).await,
        }
    })
}
