//! What every handler shares: the emulated world, the configuration, the metadata
//! tokens handed out, the rate limiter and the call log.
use std::sync::{Arc, Mutex};

use crate::config::EmulatorConfig;
use crate::world::World;
use crate::{call_log, quota};

pub(crate) struct Shared {
    pub(crate) world: Mutex<World>,
    pub(crate) config: EmulatorConfig,
    /// Tokens handed out by `PUT /latest/api/token`.
    pub(crate) metadata_tokens: Mutex<Vec<String>>,
    pub(crate) rate_limiter: Mutex<quota::RateLimiter>,
    pub(crate) call_log: Mutex<call_log::CallLog>,
}

pub(crate) type AppState = Arc<Shared>;
