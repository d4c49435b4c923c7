//! A Service on a load balancer the user named (`...-loadbalancer-id`): which one it
//! left when the annotation changed (`plan`, pure), and taking rollgate's listeners,
//! groups and backends out of it (`apply`). `cleanup` reads the plan too, when the
//! Service goes.
pub mod apply;
pub mod plan;
