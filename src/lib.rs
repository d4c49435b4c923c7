//! rollgate: safe DaemonSet upgrades on edge nodes and load-balancer readiness gates.
//!
//! One folder per capability:
//! - [`daemonset`]: the DaemonSet upgrade controller (AdvancedRollingUpdate, OTA, and
//!   the OTA image pre-pull in `daemonset::image_pull`);
//! - [`gates`]: the load-balancer readiness-gate controller (Alibaba Cloud CLB/NLB);
//! - [`agent`]: the node agent, OpenYurt's OTA REST API on each node.
//!
//! and shared modules:
//! - [`names`]: every public name (conditions, reasons, labels, annotations, controller
//!   names, Event reasons), spelled once;
//! - [`object`]: Kubernetes objects as rollgate reads them, and the slim pods and nodes
//!   of the shared cache (`PodFacts`, `NodeFacts`);
//! - [`revision_message`]: the `controllerrevision: <hash>` message of the OTA
//!   conditions, written by the controller and read by the agent;
//! - [`pod_image_ready`]: the `PodImageReady` request and its answers, and the one
//!   time rule of a request (the agent, pull-ahead and the image-pull controller);
//! - [`duration_flag`]: the syntax of duration flags;
//! - [`metrics`], [`telemetry`], [`runtime`], [`sync_gate`], [`leader`]: process
//!   plumbing (the metrics registry, logging, the async runtime and shutdown, "every
//!   watch has listed once", leader election);
//! - [`watch`]: one set of watches and caches for every controller, and the runner of
//!   reconcilers (runs, failures and duration of every controller);
//! - [`apply`]: how every controller and the agent write: one field manager, condition
//!   patches that skip a pod gone or changed, exact deletions, a bound on calls in
//!   flight, Events said once, one write error;
//! - [`manager`]: the controller-manager, which runs the controllers together;
//! - [`cli`]: the command line, and the `rollgate status` command.
//!
//! Layers, each importing only from its own and the ones below it (`hack/import-graph.py
//! src` checks that the module graph has no cycle, the `layers` test that every
//! `crate::` path goes down):
//! 1. the floor: `names`, `object`, `revision_message`, `pod_image_ready`,
//!    `duration_flag`, `metrics`, `telemetry`, `runtime`, `sync_gate`, `leader` (and
//!    the tests' `testkit`);
//! 2. `watch` and `apply`;
//! 3. the capabilities: `daemonset`, `gates`, `agent`, which never import each other;
//! 4. `manager` and `cli`, then `main.rs`.
pub mod agent;
pub mod apply;
pub mod cli;
pub mod daemonset;
pub mod duration_flag;
pub mod gates;
#[cfg(test)]
mod layers;
pub mod leader;
pub mod manager;
pub mod metrics;
pub mod names;
pub mod object;
pub mod pod_image_ready;
pub mod revision_message;
pub mod runtime;
pub mod sync_gate;
pub mod telemetry;
#[cfg(test)]
pub(crate) mod testkit;
pub mod watch;
