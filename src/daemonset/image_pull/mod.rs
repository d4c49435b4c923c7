//! OTA image pre-pull: when the node agent asks for it (`PodImageReady=False`, reason
//! `PullImageRequested`), pull the DaemonSet's current images on the pod's node with a
//! Job, then report the outcome in `PodImageReady` (`PullImageSuccess` /
//! `PullImageFail`). Asking again after an answer starts a new pull.
//!
//! - [`plan`]: pure: which pods need a Job, which Jobs are stale, which condition to write;
//! - [`job`]: the Job builder (how it pulls any image without a shell, which credentials,
//!   pull policy and tolerations);
//! - [`deadline`]: how long a pull may take (flag, per-DaemonSet annotation);
//! - [`controller`]: reconcile on the shared stores, apply.

pub mod controller;
pub mod deadline;
pub mod job;
pub mod plan;

pub use controller::start;
pub use job::{PullJobSettings, DEFAULT_DEADLINE, DEFAULT_HELPER_IMAGE};
