//! The one rule for a write that finds its object gone (404) or changed (409): skipped,
//! and said so, never an error: the object's next event re-plans. A repeat of
//! rollgate's own last write, planned from a cache that does not show it yet, is not
//! sent at all (`recent_writes`).

/// What became of a write that did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Written,
    /// 404: the object is gone. Skipped: nothing is left to write to.
    Gone,
    /// 409: the object was replaced by one of the same name (the UID in the patch or
    /// the precondition no longer matches) or changed. Skipped: its event re-plans.
    Changed,
    /// Not sent: the same as rollgate's last write to that part of the object, which
    /// the shared cache the plan read does not show yet (`super::recent_writes`). The
    /// cache's next event re-plans; nothing is to be counted or announced again.
    Repeat,
}

impl Outcome {
    /// Whether the API server took the write.
    pub fn landed(self) -> bool {
        self == Outcome::Written
    }

    /// The one place that decides: a 404 or 409 answer skips the write, any other
    /// error is an error.
    pub fn of<T>(result: kube::Result<T>) -> kube::Result<Outcome> {
        match result {
            Ok(_) => Ok(Outcome::Written),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(Outcome::Gone),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Outcome::Changed),
            Err(e) => Err(e),
        }
    }
}
