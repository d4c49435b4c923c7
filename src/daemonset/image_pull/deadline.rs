//! How long a pull Job may take: the `--prepull-deadline` flag, overridden per DaemonSet
//! by the annotation `rollgate.io/image-pull-deadline` (pure; both parsed here, so they
//! accept the same forms).
//!
//! Why per DaemonSet: the time a pull needs is the image's size over the slowest link it
//! crosses. A 1 GB image over 4 Mbit/s takes over half an hour, ten times a small agent's
//! needs; one cluster-wide value is either too short for the big image (the pull always
//! ends in `PullImageFail`) or so long that a missing image takes an hour to be reported.

use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;

use crate::names::PULL_DEADLINE_ANNOTATION;
use crate::object::annotation;

/// The forms a deadline is written in, for error messages.
pub const ACCEPTED_FORMS: &str =
    "a whole number of seconds, minutes or hours above zero: 600, 600s, 90m, 2h";

/// Parses `600`, `600s`, `90m` or `2h` (whole numbers, above zero). A Job's deadline is
/// a whole number of seconds, so sub-second units are refused rather than rounded.
pub fn parse_deadline(value: &str) -> Result<Duration, String> {
    let raw = value;
    let value = value.trim();
    let (number, unit) = match value.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => value.split_at(at),
        None => (value, "s"),
    };
    let bad = || format!("{raw:?} is not a pull deadline; accepted: {ACCEPTED_FORMS}");
    let n: u64 = number.parse().map_err(|_| bad())?;
    let seconds = match unit {
        "s" => Some(n),
        "m" => n.checked_mul(60),
        "h" => n.checked_mul(3600),
        _ => None,
    }
    // activeDeadlineSeconds is an int64.
    .filter(|s| (1..=i64::MAX as u64).contains(s))
    .ok_or_else(bad)?;
    Ok(Duration::from_secs(seconds))
}

/// The annotation's value could not be read: no pull is started until it is fixed (a
/// deadline the user did not mean would either fail a slow pull or hide a missing image).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid value {value:?} for annotation {PULL_DEADLINE_ANNOTATION}: expected {ACCEPTED_FORMS}"
)]
pub struct InvalidPullDeadline {
    pub value: String,
}

/// The deadline of `daemonset`'s pull Jobs: its annotation, else `default` (the flag).
pub fn deadline_of(
    daemonset: &DaemonSet,
    default: Duration,
) -> Result<Duration, InvalidPullDeadline> {
    match annotation(&daemonset.metadata, PULL_DEADLINE_ANNOTATION) {
        None => Ok(default),
        Some(value) => parse_deadline(value).map_err(|_| InvalidPullDeadline {
            value: value.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn deadlines_are_whole_seconds_minutes_or_hours_above_zero() {
        let secs = |s| Ok(Duration::from_secs(s));
        assert_eq!(parse_deadline("600"), secs(600));
        assert_eq!(parse_deadline("600s"), secs(600));
        assert_eq!(parse_deadline(" 90m "), secs(5400));
        assert_eq!(parse_deadline("2h"), secs(7200));
        for bad in [
            "",
            "0",
            "0s",
            "0h",
            "-5",
            "1.5h",
            "500ms",
            "10d",
            "ten",
            "90 m",
            "1h30m",
            "99999999999999999999h",
        ] {
            let error = parse_deadline(bad).unwrap_err();
            assert!(error.contains(ACCEPTED_FORMS), "{bad}: {error}");
            assert!(error.contains(&format!("{bad:?}")), "{bad}: {error}");
        }
    }

    #[test]
    fn the_annotation_wins_over_the_flag_and_bad_values_name_the_accepted_forms() {
        let with = |value: Option<&str>| {
            let mut ds = DaemonSet::default();
            ds.metadata.annotations = value
                .map(|v| BTreeMap::from([(PULL_DEADLINE_ANNOTATION.to_string(), v.to_string())]));
            ds
        };
        let flag = Duration::from_secs(600);
        assert_eq!(deadline_of(&with(None), flag), Ok(flag));
        assert_eq!(
            deadline_of(&with(Some("45m")), flag),
            Ok(Duration::from_secs(2700))
        );
        let error = deadline_of(&with(Some("45 minutes")), flag).unwrap_err();
        let text = error.to_string();
        assert!(text.contains("\"45 minutes\""), "{text}");
        assert!(text.contains(PULL_DEADLINE_ANNOTATION), "{text}");
        assert!(text.contains(ACCEPTED_FORMS), "{text}");
    }
}
