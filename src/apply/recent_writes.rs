//! The writes rollgate made that the shared cache has not shown yet: a reconcile that
//! runs on the cache right after a write (another trigger, a requeue) plans the same
//! write again, and would send it (and its Event) a second time.
//!
//! Per object UID and key (a condition type, the finalizer), the last value written and
//! the resourceVersion the API server answered with. An identical write is skipped
//! while the cached object is older than that answer; everything else is written: a
//! different value, a cache that caught up or moved past (someone changed the object
//! after us: our write may be undone), a version that cannot be compared. The decision
//! is [`verdict`] (pure); [`RecentWrites`] keeps the entries, each dropped on catch-up,
//! on a different write, when its object is gone, and after [`REMEMBERED_FOR`] whatever
//! happens, so memory stays bounded by the writes of the last minute.
//!
//! resourceVersions are compared as numbers: Kubernetes 1.35 made that the documented
//! contract (KEP-5504, "comparable resource versions": a positive integer without
//! leading zeros, of any length). Anything else is never compared, so never skipped.
use std::cmp::Ordering;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long a write is remembered at most. The shared watch normally shows our write
/// within milliseconds; a cache this far behind is re-planned and written again, which
/// is only a repeat, never a loss.
pub const REMEMBERED_FOR: Duration = Duration::from_secs(60);

/// What rollgate last wrote to one part of one object.
#[derive(Clone, Debug, PartialEq)]
pub struct Written {
    pub value: Value,
    /// The object's resourceVersion after the write (the API server's answer).
    pub version: String,
    pub at: Instant,
}

/// What to do with a planned write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The same value as our last write, which the cache does not show yet: skip it.
    Repeat,
    /// Write. `forget`: what was remembered is done with (caught up, changed by someone
    /// else, replaced by another value, or too old).
    Write { forget: bool },
}

/// The decision (pure): `last` is what we wrote, `value` what the plan wants written,
/// `cached` the resourceVersion of the object the plan read.
pub fn verdict(
    last: Option<&Written>,
    value: &Value,
    cached: Option<&str>,
    now: Instant,
) -> Verdict {
    let Some(last) = last else {
        return Verdict::Write { forget: false };
    };
    let repeat = now.saturating_duration_since(last.at) < REMEMBERED_FOR
        && &last.value == value
        && cached.and_then(|c| compare_versions(c, &last.version)) == Some(Ordering::Less);
    if repeat {
        Verdict::Repeat
    } else {
        Verdict::Write { forget: true }
    }
}

/// Orders two resourceVersions of one resource (KEP-5504): positive integers without
/// leading zeros, of any length; `None` when either is not one.
pub fn compare_versions(a: &str, b: &str) -> Option<Ordering> {
    let valid =
        |v: &str| !v.is_empty() && !v.starts_with('0') && v.bytes().all(|b| b.is_ascii_digit());
    if !valid(a) || !valid(b) {
        return None;
    }
    Some(a.len().cmp(&b.len()).then_with(|| a.cmp(b)))
}

/// The entries, by object UID, then key.
#[derive(Debug, Default)]
pub struct RecentWrites {
    written: HashMap<String, HashMap<String, Written>>,
    /// The number of objects at which expired entries are swept next (amortised: a
    /// sweep costs the whole map, so it runs each time the map doubles).
    sweep_at: usize,
}

/// Objects below which no sweep runs.
const SWEEP_FLOOR: usize = 1024;

impl RecentWrites {
    /// Whether the write of `value` to `key` of the object `uid` (read at `cached`) is a
    /// repeat to skip; drops the entry when it is done with.
    pub fn is_repeat(
        &mut self,
        uid: &str,
        key: &str,
        value: &Value,
        cached: Option<&str>,
        now: Instant,
    ) -> bool {
        let last = self.written.get(uid).and_then(|keys| keys.get(key));
        match verdict(last, value, cached, now) {
            Verdict::Repeat => true,
            Verdict::Write { forget } => {
                if forget {
                    self.forget(uid, key);
                }
                false
            }
        }
    }

    /// The write landed and the object is now at `version` (unknown: nothing to
    /// compare the cache with, so nothing is remembered).
    pub fn wrote(
        &mut self,
        uid: &str,
        key: &str,
        value: Value,
        version: Option<String>,
        now: Instant,
    ) {
        let Some(version) = version else {
            self.forget(uid, key);
            return;
        };
        let written = Written {
            value,
            version,
            at: now,
        };
        self.written
            .entry(uid.to_string())
            .or_default()
            .insert(key.to_string(), written);
        if self.written.len() >= self.sweep_at.max(SWEEP_FLOOR) {
            self.written.retain(|_, keys| {
                keys.retain(|_, w| now.saturating_duration_since(w.at) < REMEMBERED_FOR);
                !keys.is_empty()
            });
            self.sweep_at = 2 * self.written.len();
        }
    }

    /// The value last written to `key` of the object `uid`, while remembered.
    pub fn last_value(&self, uid: &str, key: &str) -> Option<&Value> {
        Some(&self.written.get(uid)?.get(key)?.value)
    }

    /// What was remembered of `key` of the object no longer holds (not written, or
    /// refused).
    pub fn forget(&mut self, uid: &str, key: &str) {
        if let Some(keys) = self.written.get_mut(uid) {
            keys.remove(key);
            if keys.is_empty() {
                self.written.remove(uid);
            }
        }
    }

    /// The object is gone.
    pub fn forget_object(&mut self, gone: &str) {
        self.written.remove(gone);
    }

    /// Entries (object and key) remembered.
    pub fn len(&self) -> usize {
        self.written.values().map(HashMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.written.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn written(value: Value, version: &str, at: Instant) -> Written {
        Written {
            value,
            version: version.into(),
            at,
        }
    }

    /// What it is about, last written, wanted, cached version, when, the verdict.
    type Case<'a> = (
        &'a str,
        Option<&'a Written>,
        Value,
        Option<&'a str>,
        Instant,
        Verdict,
    );

    #[test]
    fn an_identical_write_is_skipped_only_while_the_cache_is_behind() {
        let t0 = Instant::now();
        let ours = json!({"type": "PodImageReady", "status": "False"});
        let last = written(ours.clone(), "120", t0);
        let soon = t0 + Duration::from_millis(50);
        let write = Verdict::Write { forget: true };
        #[rustfmt::skip]
        let cases: Vec<Case> = vec![
            ("nothing written before", None, ours.clone(), Some("100"), soon, Verdict::Write { forget: false }),
            ("the same, cache before our write", Some(&last), ours.clone(), Some("100"), soon, Verdict::Repeat),
            ("the same, cache one version before", Some(&last), ours.clone(), Some("119"), soon, Verdict::Repeat),
            ("fewer digits is older", Some(&last), ours.clone(), Some("99"), soon, Verdict::Repeat),
            ("the cache shows our write", Some(&last), ours.clone(), Some("120"), soon, write),
            ("someone changed it after us", Some(&last), ours.clone(), Some("121"), soon, write),
            ("more digits is newer", Some(&last), ours.clone(), Some("1000"), soon, write),
            ("another value", Some(&last), json!({"type": "PodImageReady", "status": "True"}), Some("100"), soon, write),
            ("no cached version", Some(&last), ours.clone(), None, soon, write),
            ("a version that is no number", Some(&last), ours.clone(), Some("abc"), soon, write),
            ("a leading zero", Some(&last), ours.clone(), Some("0100"), soon, write),
            ("remembered too long", Some(&last), ours.clone(), Some("100"), t0 + REMEMBERED_FOR, write),
        ];
        for (what, last, value, cached, now, want) in cases {
            assert_eq!(verdict(last, &value, cached, now), want, "{what}");
        }
    }

    #[test]
    fn versions_compare_as_integers_of_any_length() {
        assert_eq!(compare_versions("9", "10"), Some(Ordering::Less));
        assert_eq!(compare_versions("10", "10"), Some(Ordering::Equal));
        assert_eq!(
            compare_versions("123456789012345678901234567890", "99"),
            Some(Ordering::Greater)
        );
        for invalid in ["", "0", "007", "12a", "-1"] {
            assert_eq!(compare_versions(invalid, "5"), None, "{invalid:?}");
            assert_eq!(compare_versions("5", invalid), None, "{invalid:?}");
        }
    }

    #[test]
    fn entries_go_on_catch_up_on_another_write_and_with_their_object() {
        let t0 = Instant::now();
        let mut recent = RecentWrites::default();
        let v = json!({"status": "False"});
        recent.wrote("a", "Gate", v.clone(), Some("20".into()), t0);
        recent.wrote("a", "Other", v.clone(), Some("21".into()), t0);
        recent.wrote("b", "Gate", v.clone(), Some("22".into()), t0);
        assert!(recent.is_repeat("a", "Gate", &v, Some("19"), t0));
        assert!(
            !recent.is_repeat("b", "Gate", &v, Some("22"), t0),
            "caught up"
        );
        assert!(
            !recent.is_repeat("b", "Gate", &v, Some("19"), t0),
            "and forgotten"
        );
        let other = json!({"status": "True"});
        assert!(!recent.is_repeat("a", "Other", &other, Some("19"), t0));
        assert!(
            !recent.is_repeat("a", "Other", &v, Some("19"), t0),
            "replaced"
        );
        recent.wrote("a", "Unknown", v.clone(), None, t0);
        assert_eq!(recent.len(), 1, "only a's Gate is left");
        recent.forget_object("a");
        assert!(recent.is_empty());
        recent.wrote("c", "Gate", v.clone(), Some("30".into()), t0);
        recent.forget("c", "Gate");
        assert!(recent.is_empty());
    }

    #[test]
    fn memory_stays_bounded_by_the_writes_of_the_last_minute() {
        let t0 = Instant::now();
        let mut recent = RecentWrites::default();
        let v = json!({"status": "True"});
        for i in 0..SWEEP_FLOOR - 1 {
            recent.wrote(&format!("old-{i}"), "Gate", v.clone(), Some("5".into()), t0);
        }
        let later = t0 + REMEMBERED_FOR;
        for i in 0..10 {
            recent.wrote(
                &format!("new-{i}"),
                "Gate",
                v.clone(),
                Some("6".into()),
                later,
            );
        }
        assert_eq!(recent.len(), 10, "the expired entries were swept");
    }
}
