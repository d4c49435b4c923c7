//! The node-local agent: the OpenYurt-compatible REST API on 127.0.0.1:10267.
use crate::cli::AgentArgs;
use crate::runtime::{self, Shutdown};

pub async fn run(args: AgentArgs, shutdown: Shutdown) -> anyhow::Result<()> {
    let _client = runtime::connect().await?;
    tracing::warn!(node = %args.node_name, listen = %args.listen,
        "the node API is not implemented yet (issue 4); the agent only holds its connection");
    shutdown.requested().await;
    Ok(())
}
