//! rollgate: safe DaemonSet upgrades on edge nodes and load-balancer readiness gates.
//!
//! The tree follows the architecture: one folder per capability (`daemonset`, `agent`),
//! and a few shared modules (`cli`, `manager`, `metrics`, `runtime`, `telemetry`).
pub mod agent;
pub mod cli;
pub mod daemonset;
pub mod gates;
pub mod leader;
pub mod manager;
pub mod metrics;
pub mod object;
pub mod runtime;
pub mod sync_gate;
pub mod telemetry;
pub mod watch;
