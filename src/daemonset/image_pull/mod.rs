//! OTA image pre-pull: when the node agent asks for it (`PodImageReady=False`, reason
//! `PullImageRequested`), pull the DaemonSet's current images on the pod's node with a
//! Job, then report the outcome in `PodImageReady` (`PullImageSuccess` /
//! `PullImageFail`). Asking again after an answer starts a new pull.
//!
//! - [`plan`]: pure: which pods need a Job, which Jobs are stale, which condition to write;
//! - [`job`]: the Job builder (how it pulls any image without a shell, which credentials);
//! - [`controller`]: reconcile on the shared stores, apply.

pub mod controller;
pub mod job;
pub mod plan;

pub use controller::start;
pub use job::{PullJobSettings, DEFAULT_HELPER_IMAGE};
