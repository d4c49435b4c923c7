//! The DaemonSet upgrade controller: AdvancedRollingUpdate and OTA.
// controller wiring lives in controller.rs (lead)
pub mod controller;
pub mod expectations;
pub mod image_pull;
pub mod metrics;
pub mod ota_plan;
pub mod placement;
pub mod policy;
pub mod revision;
pub mod rolling_plan;
pub mod said_once;
pub mod status;
#[cfg(test)]
pub(crate) mod testkit;
pub mod triggers;
