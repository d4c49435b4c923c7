//! The one rule for a write that finds its object gone (404) or changed (409): skipped,
//! and said so, never an error: the object's next event re-plans.

/// What became of a write that did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Written,
    /// 404: the object is gone. Skipped: nothing is left to write to.
    Gone,
    /// 409: the object was replaced by one of the same name (the UID in the patch or
    /// the precondition no longer matches) or changed. Skipped: its event re-plans.
    Changed,
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
