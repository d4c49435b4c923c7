//! The apply layer: how every controller (and the node agent) writes to the API server.
//!
//! One way to write, shared by the DaemonSet upgrade controller, its image-pull
//! sub-controller and the readiness-gate controller, and by the agent's status write:
//! - [`Writer`]: every write under one field manager ([`FIELD_MANAGER`]): condition
//!   patches on `pods/status`, exact deletions (UID precondition), creates and merge
//!   patches;
//! - condition patches and deletions that find the object gone (404) or changed (409)
//!   are skipped in one place ([`Outcome`]): the object's next event re-plans;
//! - a write planned from the shared cache that repeats rollgate's own last write,
//!   which the cache does not show yet, is not sent again ([`RecentWrites`]);
//! - [`issue_together`] / [`issue_writes`]: the calls of one plan, at most
//!   [`CALLS_IN_FLIGHT`] at once, every one tried, a failure returned after all were;
//! - [`Events`]: the Event recorder of one controller, with de-duplication
//!   ([`EventDedup`]);
//! - [`Error`]: the one error a failed call becomes (what call, on which object).
//!
//! On the second floor, beside `watch`: it imports the floor (`names`, `object`), kube
//! and `watch::runner`'s error trait, never a capability.
//!
//! [`FIELD_MANAGER`]: crate::names::FIELD_MANAGER
mod error;
mod event_dedup;
mod events;
mod in_flight;
mod outcome;
mod recent_writes;
mod writer;

#[cfg(test)]
pub(crate) mod fake_api;
#[cfg(test)]
mod tests;

pub use error::{Call, Error};
pub use event_dedup::{EventDedup, Topic};
pub use events::{event, Events};
pub use in_flight::{issue_together, issue_writes, CALLS_IN_FLIGHT};
pub use outcome::Outcome;
pub use recent_writes::RecentWrites;
pub use writer::{patch_params, post_params, ConditionPatch, Namespaced, Part, Seen, Writer};
