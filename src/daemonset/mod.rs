//! The DaemonSet upgrade controller: OpenYurt's AdvancedRollingUpdate and OTA models on
//! OnDelete DaemonSets, and the OTA image pre-pull.
//!
//! observe (shared stores) -> pure plans (`policy`, `rolling_plan`, `ota_plan`,
//! `image_pull::plan`) -> apply (`controller`, `image_pull::controller`).
//!
//! - [`controller`]: the wiring: reconcile one DaemonSet, apply its plan, report;
//! - [`decide`]: AdvancedRollingUpdate: what the controller does now, given what it
//!   observed (pure; the controller executes it);
//! - [`failure`]: AdvancedRollingUpdate: which pods of the current revision failed, and
//!   whether that halts the rollout (pure);
//! - [`policy`]: which model a DaemonSet asks for, from its annotations;
//! - [`controls`]: `rollgate.io/partition` and `rollgate.io/node-selector`: which nodes
//!   an AdvancedRollingUpdate holds on the old revision;
//! - [`int_or_percent`]: a count of nodes or a whole percentage, as `max-unavailable`
//!   and `partition` read it;
//! - [`revision`]: the current template revision, and which pods are up to date;
//! - [`rolling_plan`]: AdvancedRollingUpdate: which old pods to delete now;
//! - [`ota_plan`]: OTA: which pods' `PodNeedUpgrade` condition to write or remove;
//! - [`placement`]: which nodes a DaemonSet's pods belong on (taints, selectors);
//! - [`native_wait`]: how long each DaemonSet waits on the native controller, and when
//!   that is a stall;
//! - [`expectations`]: deletions sent but not yet seen in the cache;
//! - [`triggers`]: which object changes can change a plan;
//! - [`describe`]: how a rollout's progress reads to people (Events, `rollgate status`);
//! - [`metrics`]: the controller's Prometheus metrics;
//! - [`other_updater`]: another updater (yurt-manager's) on the same DaemonSet: step back;
//! - [`image_pull`]: the OTA image pre-pull with Jobs;
//! - [`pull_ahead`]: AdvancedRollingUpdate with the new images pulled (by `image_pull`)
//!   before each old pod is deleted.
pub mod controller;
pub mod controls;
pub mod decide;
pub mod describe;
pub mod expectations;
pub mod failure;
pub mod image_pull;
pub mod int_or_percent;
pub mod metrics;
pub mod native_wait;
pub mod ota_plan;
pub mod other_updater;
pub mod placement;
pub mod policy;
pub mod pull_ahead;
pub mod revision;
pub mod rolling_plan;
pub mod triggers;
pub mod waves;

#[cfg(test)]
mod same_plan_on_cached_objects;
