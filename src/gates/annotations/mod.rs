//! The Alibaba listener annotations rollgate implements (the `health-check-*` family,
//! the thresholds, `connection-drain` and its timeout, `scheduler`, the CLB listener's
//! `acl-*`), read into the listener settings the cloud client sends; `protocol-port`
//! and `cert-id`, which make a Service port's CLB listener HTTP or HTTPS; `weight` and
//! `vswitch-id`; and the whole annotation family, each marked
//! supported, not yet, or not applicable, so a Service moved over from Alibaba's cloud
//! controller hears about every annotation rollgate does not act on. Pure.
//!
//! Accepted values and ranges are those of the API reference (CLB TCP/UDP listener
//! parameters, NLB `CreateServerGroup`), so a value the cloud would refuse is refused
//! here, with the annotation and its accepted forms named, before any cloud call.
//!
//! support.rs holds the family's table and what a Service hears about annotations
//! rollgate does not act on; values.rs the annotations that are one value each
//! (tags, weight, vswitch, CLB instance); listener.rs the listener settings (health
//! check, drain, scheduler, ACL) and the drain time they imply; protocols.rs
//! `protocol-port` and `cert-id`; read.rs how one annotation is read and refused.
mod listener;
mod protocols;
mod read;
mod support;
#[cfg(test)]
mod tests;
mod values;

pub use listener::{drain_time, listener_settings};
pub use protocols::{listener_protocols, ListenerProtocols};
pub use read::full_name;
pub use support::{not_acted_on, Support, FAMILY};
pub use values::{additional_resource_tags, backend_weight, clb_instance, vswitch_id};
