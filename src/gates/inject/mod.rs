//! The readiness-gate injection webhook: at pod creation, in namespaces labelled
//! `rollgate.io/readiness-gate-inject: enabled`, a pod gets
//! `service.readiness.alibabacloud.com/<svc>` for each Service rollgate manages that
//! selects it, so Deployments need no hand-written gates.
//!
//! `plan` (pure) decides; the server comes next.
pub mod plan;
