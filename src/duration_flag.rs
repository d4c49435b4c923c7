//! The syntax of every duration flag (`--state-write-interval`, `--gate-drain-time`,
//! `--health-poll-*`): `<n>`, `<n>s`, `<n>m` or `<n>ms`. On the floor, so each mode's
//! flags (the agent's, the gates') can use it.
use std::time::Duration;

/// A duration as `<n>`, `<n>s`, `<n>m` or `<n>ms`, `n` a whole number.
pub fn parse_interval(value: &str) -> Result<Duration, String> {
    let value = value.trim();
    let (number, unit) = match value.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => value.split_at(at),
        None => (value, "s"),
    };
    let accepted = "accepted forms: 10, 10s, 2m, 500ms";
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{value:?} is not a duration; {accepted}"))?;
    match unit {
        "s" => Ok(Duration::from_secs(n)),
        "m" => n
            .checked_mul(60)
            .map(Duration::from_secs)
            .ok_or_else(|| format!("{value:?} is too long; {accepted}")),
        "ms" => Ok(Duration::from_millis(n)),
        other => Err(format!("unknown unit {other:?} in {value:?}; {accepted}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_write_interval_accepts_seconds_minutes_and_milliseconds() {
        let parse = |v: &str| parse_interval(v);
        assert_eq!(parse("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        for bad in ["", "s", "-1", "1.5s", "10h", "ten"] {
            let error = parse(bad).unwrap_err();
            assert!(
                error.contains("accepted forms: 10, 10s, 2m, 500ms"),
                "{bad}: {error}"
            );
        }
    }
}
