//! An annotation value that is a count of nodes or a whole percentage of them
//! (`rollgate.io/partition`, `apps.openyurt.io/max-unavailable`): read one way for both.
//! What a value means (its default, its rounding) is each annotation's own (`policy`,
//! `controls`).

/// A count, or a percentage from 1 to 100. Zero is no value of its own: `parse` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntOrPercent {
    Count(u32),
    /// 1 to 100.
    Percent(u8),
}

/// A value that is neither a non-negative integer nor a whole percentage from 0% to 100%.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotIntOrPercent;

impl IntOrPercent {
    /// Parses `3` or `10%` (surrounding whitespace ignored). `Ok(None)` for `0` and `0%`
    /// (any number of zeros), which each annotation reads its own way. A count too large
    /// for `u32` saturates: it only ever clamps to the node count.
    pub fn parse(raw: &str) -> Result<Option<IntOrPercent>, NotIntOrPercent> {
        let trimmed = raw.trim();
        let (digits, is_percent) = match trimmed.strip_suffix('%') {
            Some(number) => (number, true),
            None => (trimmed, false),
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(NotIntOrPercent);
        }
        // Digits only, so the sole possible parse failure is overflow: saturate.
        let value = digits.parse::<u64>().unwrap_or(u64::MAX);
        match (is_percent, value) {
            (_, 0) => Ok(None),
            (true, 1..=100) => Ok(Some(IntOrPercent::Percent(value as u8))),
            (true, _) => Err(NotIntOrPercent),
            (false, _) => Ok(Some(IntOrPercent::Count(
                u32::try_from(value).unwrap_or(u32::MAX),
            ))),
        }
    }
}

impl std::fmt::Display for IntOrPercent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IntOrPercent::Count(count) => write!(f, "{count}"),
            IntOrPercent::Percent(percent) => write!(f, "{percent}%"),
        }
    }
}

/// For an annotation's own enum with the variants `Count(u32)` and `Percent(u8)`:
/// `Display` and the conversions from and to [`IntOrPercent`], so that every such value
/// reads and prints one way while its meaning (default, rounding) stays its own.
macro_rules! int_or_percent_enum {
    ($name:ident) => {
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                $crate::daemonset::int_or_percent::IntOrPercent::from(*self).fmt(f)
            }
        }

        impl From<$crate::daemonset::int_or_percent::IntOrPercent> for $name {
            fn from(value: $crate::daemonset::int_or_percent::IntOrPercent) -> Self {
                use $crate::daemonset::int_or_percent::IntOrPercent;
                match value {
                    IntOrPercent::Count(count) => $name::Count(count),
                    IntOrPercent::Percent(percent) => $name::Percent(percent),
                }
            }
        }

        impl From<$name> for $crate::daemonset::int_or_percent::IntOrPercent {
            fn from(value: $name) -> Self {
                use $crate::daemonset::int_or_percent::IntOrPercent;
                match value {
                    $name::Count(count) => IntOrPercent::Count(count),
                    $name::Percent(percent) => IntOrPercent::Percent(percent),
                }
            }
        }
    };
}
pub(crate) use int_or_percent_enum;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_whole_percentages_and_nothing_else() {
        use IntOrPercent::{Count, Percent};
        let cases: &[(&str, Result<Option<IntOrPercent>, NotIntOrPercent>)] = &[
            ("3", Ok(Some(Count(3)))),
            (" 3 ", Ok(Some(Count(3)))),
            ("0", Ok(None)),
            ("00", Ok(None)),
            ("0%", Ok(None)),
            ("1%", Ok(Some(Percent(1)))),
            ("100%", Ok(Some(Percent(100)))),
            ("99999999999", Ok(Some(Count(u32::MAX)))),
            ("101%", Err(NotIntOrPercent)),
            ("-1", Err(NotIntOrPercent)),
            ("1.5", Err(NotIntOrPercent)),
            ("10 %", Err(NotIntOrPercent)),
            ("%", Err(NotIntOrPercent)),
            ("", Err(NotIntOrPercent)),
            ("ten", Err(NotIntOrPercent)),
        ];
        for (raw, expected) in cases {
            assert_eq!(IntOrPercent::parse(raw), *expected, "{raw:?}");
        }
        assert_eq!(Count(7).to_string(), "7");
        assert_eq!(Percent(30).to_string(), "30%");
    }
}
