//! The load-balancer readiness-gate controller: a pod's
//! `service.readiness.alibabacloud.com/<svc>` condition turns True only once the
//! Service's CLB/NLB has it registered and healthy on every port.
//!
//! observe (Service, shared pod store, cloud groups and health) -> `plan` (pure) ->
//! apply (backend changes, condition writes on pods/status, Events).
pub mod plan;
pub mod reasons;
pub mod service;
