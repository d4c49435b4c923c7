//! The calls of one plan, in flight together, up to a bound.
use futures::{Future, StreamExt};

use super::outcome::Outcome;

/// API calls of one plan in flight at once (deletions, condition writes, and the
/// image-pull controller's reconciles, one write each): the last pod of a wave must not
/// wait for every call before it. Marking 200 pods for OTA one call at a time took
/// 2.44 s. One bound for every controller.
pub const CALLS_IN_FLIGHT: usize = 16;

/// Runs the calls of one plan, `CALLS_IN_FLIGHT` at a time, and returns every outcome.
pub async fn issue_together<F: Future>(calls: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    futures::stream::iter(calls)
        .buffer_unordered(CALLS_IN_FLIGHT)
        .collect()
        .await
}

/// Issues every write, `CALLS_IN_FLIGHT` at a time, and returns those that landed
/// (not skipped as gone or changed); a failure is returned once every write has been
/// tried, so one bad pod does not hold back the others.
pub async fn issue_writes<T, E, W, Fut>(
    writes: impl IntoIterator<Item = T>,
    write: W,
) -> Result<Vec<T>, E>
where
    W: FnMut(T) -> Fut,
    Fut: Future<Output = (T, Result<Outcome, E>)>,
{
    let results = issue_together(writes.into_iter().map(write)).await;
    let mut landed = Vec::new();
    let mut failure = None;
    for (write, result) in results {
        match result {
            Ok(outcome) if outcome.landed() => landed.push(write),
            Ok(_) => {}
            Err(e) => {
                failure.get_or_insert(e);
            }
        }
    }
    failure.map_or(Ok(landed), Err)
}
