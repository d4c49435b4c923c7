//! The `rollgate` binary: parse the command line, start the runtime and logging, and
//! hand over to the mode (`controller`, `agent`, `status`, `gates`). The modes live in the library.
use rollgate::cli::{self, Command};
use rollgate::{agent, manager, runtime, telemetry};

fn main() -> anyhow::Result<()> {
    let cli = cli::parse();
    runtime::build(cli.command.workers())?.block_on(async {
        telemetry::init(&cli.logging)?;
        let shutdown = runtime::Shutdown::install();
        match cli.command {
            Command::Controller(args) => manager::run(args, shutdown).await,
            Command::Agent(args) => agent::run(args, shutdown).await,
            Command::Status(args) => cli::status::run(args, shutdown).await,
            Command::Gates(args) => cli::gates::run(args, shutdown).await,
        }
    })
}
