//! Which upgrade model a DaemonSet asks for, read from its annotations.
//!
//! Decisions the spec left open, made here:
//! - `max-unavailable` above `100%` is bad input (it is almost certainly a typo and the
//!   user should hear about it), not "all at once".
//! - An integer larger than the number of nodes is valid and means "all at once": the
//!   budget is clamped to the node count.
//! - Integers of any size are accepted (they saturate), because they only ever clamp.
//! - Surrounding whitespace is ignored; signs, decimals and units other than `%` are not.

use k8s_openapi::api::apps::v1::DaemonSet;

use super::controls::{
    NodeSelector, Partition, NODE_SELECTOR_ACCEPTED_FORMS, PARTITION_ACCEPTED_FORMS,
};
use super::failure::annotations::{
    FailurePolicy, FailureThreshold, OnFailure, FAILURE_THRESHOLD_ACCEPTED_FORMS,
    ON_FAILURE_ACCEPTED_FORMS, PROGRESS_DEADLINE_ACCEPTED_FORMS,
};
use super::int_or_percent::{int_or_percent_enum, IntOrPercent, NotIntOrPercent};
use super::waves::{Waves, DEFAULT_WAVE_BAKE, WAVES_ACCEPTED_FORMS, WAVE_BAKE_ACCEPTED_FORMS};
use crate::duration_flag::parse_interval;
use crate::names::{
    FAILURE_THRESHOLD_ANNOTATION, INVALID_FAILURE_THRESHOLD_EVENT, INVALID_MAX_UNAVAILABLE_EVENT,
    INVALID_NODE_SELECTOR_EVENT, INVALID_ON_FAILURE_EVENT, INVALID_PARTITION_EVENT,
    INVALID_PAUSED_EVENT, INVALID_PROGRESS_DEADLINE_EVENT, MAX_UNAVAILABLE_ANNOTATION,
    NODE_SELECTOR_ANNOTATION, ON_FAILURE_ANNOTATION, PARTITION_ANNOTATION, PAUSED_ANNOTATION,
    PROGRESS_DEADLINE_ANNOTATION, UNKNOWN_UPDATE_STRATEGY_EVENT, UPDATE_STRATEGY_ANNOTATION,
    UPDATE_STRATEGY_NOT_ON_DELETE_EVENT,
};
use crate::names::{
    INVALID_WAVES_EVENT, INVALID_WAVE_BAKE_EVENT, WAVES_ANNOTATION, WAVE_BAKE_ANNOTATION,
};
/// The only `spec.updateStrategy.type` we act on: the native controller then only
/// recreates pods we delete, so the two controllers never fight.
pub const ON_DELETE: &str = "OnDelete";

/// Human description of what `max-unavailable` accepts, reused in every error message.
pub const MAX_UNAVAILABLE_ACCEPTED_FORMS: &str = "a non-negative integer (e.g. 2) or a whole \
     percentage from 0% to 100% (e.g. 30%); 0 and 0% mean the default 10%";

/// The upgrade model a DaemonSet selected, with its parsed parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Policy {
    /// Delete old pods on Ready nodes, bounded by `max_unavailable`; none while
    /// `paused` (`rollgate.io/paused`); none on the nodes `partition`
    /// (`rollgate.io/partition`) keeps or `node_selector` (`rollgate.io/node-selector`)
    /// does not match; what a failing revision gets (`failure`:
    /// `rollgate.io/failure-threshold`, `rollgate.io/on-failure`,
    /// `rollgate.io/progress-deadline`); and the waves it rolls out in (`waves`:
    /// `rollgate.io/waves`, `rollgate.io/wave-bake`).
    AdvancedRollingUpdate {
        max_unavailable: MaxUnavailable,
        paused: bool,
        partition: Option<Partition>,
        node_selector: Option<NodeSelector>,
        failure: FailurePolicy,
        waves: Option<Waves>,
    },
    /// Only mark pods with `PodNeedUpgrade`; the node operator triggers the upgrade.
    Ota,
}

/// Outcome of reading a DaemonSet's upgrade annotations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyDecision {
    /// No strategy annotation: not an upgrade-managed DaemonSet; stay silent.
    Unmanaged,
    /// Annotated, but `spec.updateStrategy.type` is not `OnDelete`: do nothing at all.
    /// `reason` is worded for a Warning Event.
    NotOurs { reason: String },
    /// Annotated with a value we cannot act on: do nothing until it is fixed, and warn
    /// with the error's Display.
    Invalid(PolicyError),
    /// Act with this policy.
    Managed(Policy),
}

impl PolicyDecision {
    /// Short CamelCase reason for a Warning Event, or `None` when no warning is due.
    pub fn warning_reason(&self) -> Option<&'static str> {
        match self {
            PolicyDecision::NotOurs { .. } => Some(UPDATE_STRATEGY_NOT_ON_DELETE_EVENT),
            PolicyDecision::Invalid(error) => Some(error.event_reason()),
            PolicyDecision::Unmanaged | PolicyDecision::Managed(_) => None,
        }
    }
}

/// Annotation values we cannot act on. Display names the value and the accepted forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error(
        "unknown value {value:?} for annotation {UPDATE_STRATEGY_ANNOTATION}: expected \
         AdvancedRollingUpdate or OTA (case-insensitive)"
    )]
    UnknownStrategy { value: String },
    #[error(
        "invalid value {value:?} for annotation {MAX_UNAVAILABLE_ANNOTATION}: expected \
         {MAX_UNAVAILABLE_ACCEPTED_FORMS}"
    )]
    InvalidMaxUnavailable { value: String },
    #[error(
        "invalid value {value:?} for annotation {PAUSED_ANNOTATION}: expected true or false \
         (no pod is deleted until it is fixed)"
    )]
    InvalidPaused { value: String },
    #[error(
        "invalid value {value:?} for annotation {PARTITION_ANNOTATION}: expected \
         {PARTITION_ACCEPTED_FORMS} (no pod is deleted until it is fixed)"
    )]
    InvalidPartition { value: String },
    #[error(
        "invalid value {value:?} for annotation {NODE_SELECTOR_ANNOTATION}: {why}; expected \
         {NODE_SELECTOR_ACCEPTED_FORMS} (no pod is deleted until it is fixed)"
    )]
    InvalidNodeSelector { value: String, why: String },
    #[error(
        "invalid value {value:?} for annotation {FAILURE_THRESHOLD_ANNOTATION}: expected \
         {FAILURE_THRESHOLD_ACCEPTED_FORMS} (no pod is deleted until it is fixed)"
    )]
    InvalidFailureThreshold { value: String },
    #[error(
        "invalid value {value:?} for annotation {ON_FAILURE_ANNOTATION}: expected \
         {ON_FAILURE_ACCEPTED_FORMS} (no pod is deleted until it is fixed)"
    )]
    InvalidOnFailure { value: String },
    #[error(
        "invalid value {value:?} for annotation {PROGRESS_DEADLINE_ANNOTATION}: {why}; expected \
         {PROGRESS_DEADLINE_ACCEPTED_FORMS} (no pod is deleted until it is fixed)"
    )]
    InvalidProgressDeadline { value: String, why: String },
    #[error(
        "invalid value {value:?} for annotation {WAVES_ANNOTATION}: {why}; expected \
         {WAVES_ACCEPTED_FORMS} (no pod is deleted until it is fixed)"
    )]
    InvalidWaves { value: String, why: String },
    #[error(
        "invalid value {value:?} for annotation {WAVE_BAKE_ANNOTATION}: {why}; expected \
         {WAVE_BAKE_ACCEPTED_FORMS} (no pod is deleted until it is fixed)"
    )]
    InvalidWaveBake { value: String, why: String },
}

impl PolicyError {
    /// Short CamelCase reason for a Warning Event.
    pub fn event_reason(&self) -> &'static str {
        match self {
            PolicyError::UnknownStrategy { .. } => UNKNOWN_UPDATE_STRATEGY_EVENT,
            PolicyError::InvalidMaxUnavailable { .. } => INVALID_MAX_UNAVAILABLE_EVENT,
            PolicyError::InvalidPaused { .. } => INVALID_PAUSED_EVENT,
            PolicyError::InvalidPartition { .. } => INVALID_PARTITION_EVENT,
            PolicyError::InvalidNodeSelector { .. } => INVALID_NODE_SELECTOR_EVENT,
            PolicyError::InvalidFailureThreshold { .. } => INVALID_FAILURE_THRESHOLD_EVENT,
            PolicyError::InvalidOnFailure { .. } => INVALID_ON_FAILURE_EVENT,
            PolicyError::InvalidProgressDeadline { .. } => INVALID_PROGRESS_DEADLINE_EVENT,
            PolicyError::InvalidWaves { .. } => INVALID_WAVES_EVENT,
            PolicyError::InvalidWaveBake { .. } => INVALID_WAVE_BAKE_EVENT,
        }
    }
}

/// How many nodes may be unavailable at once during AdvancedRollingUpdate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxUnavailable {
    /// An absolute number of nodes, at least 1.
    Count(u32),
    /// A percentage of the percentage base, from 1 to 100, rounded up.
    Percent(u8),
}

impl MaxUnavailable {
    /// Used when the annotation is absent, `0` or `0%`.
    pub const DEFAULT: MaxUnavailable = MaxUnavailable::Percent(10);

    /// Parses the annotation value; `None` (annotation absent) gives the default.
    pub fn parse(raw: Option<&str>) -> Result<MaxUnavailable, PolicyError> {
        let Some(raw) = raw else {
            return Ok(Self::DEFAULT);
        };
        let parsed = IntOrPercent::parse(raw).map_err(|NotIntOrPercent| {
            PolicyError::InvalidMaxUnavailable {
                value: raw.to_string(),
            }
        })?;
        Ok(parsed.map_or(Self::DEFAULT, MaxUnavailable::from))
    }

    /// The number of nodes that may be unavailable, given the percentage base (nodes that
    /// have a pod of the DaemonSet). Percentages round up; counts clamp to the base.
    pub fn budget(self, base_nodes: usize) -> usize {
        match self {
            MaxUnavailable::Count(count) => (count as usize).min(base_nodes),
            MaxUnavailable::Percent(percent) => (base_nodes * percent as usize).div_ceil(100),
        }
    }
}

int_or_percent_enum!(MaxUnavailable);

/// Parses the strategy annotation value, case-insensitively.
pub fn parse_strategy(value: &str) -> Result<StrategyKind, PolicyError> {
    let trimmed = value.trim();
    if trimmed.eq_ignore_ascii_case("AdvancedRollingUpdate") {
        Ok(StrategyKind::AdvancedRollingUpdate)
    } else if trimmed.eq_ignore_ascii_case("OTA") {
        Ok(StrategyKind::Ota)
    } else {
        Err(PolicyError::UnknownStrategy {
            value: value.to_string(),
        })
    }
}

/// The strategy named by the annotation, before its parameters are parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StrategyKind {
    AdvancedRollingUpdate,
    Ota,
}

/// Reads the DaemonSet's annotations and update strategy into a decision.
///
/// Order: no annotation -> `Unmanaged`; unknown strategy -> `Invalid`; not `OnDelete`
/// -> `NotOurs`; then `max-unavailable` (AdvancedRollingUpdate only; OTA ignores it).
pub fn policy_for(daemonset: &DaemonSet) -> PolicyDecision {
    let annotations = daemonset.metadata.annotations.as_ref();
    let annotation = |key: &str| annotations.and_then(|a| a.get(key)).map(String::as_str);

    let Some(strategy_value) = annotation(UPDATE_STRATEGY_ANNOTATION) else {
        return PolicyDecision::Unmanaged;
    };
    let kind = match parse_strategy(strategy_value) {
        Ok(kind) => kind,
        Err(error) => return PolicyDecision::Invalid(error),
    };

    let update_type = daemonset
        .spec
        .update_strategy
        .as_ref()
        .and_then(|strategy| strategy.type_.as_deref())
        // The API server defaults an absent type to RollingUpdate.
        .unwrap_or("RollingUpdate");
    if update_type != ON_DELETE {
        return PolicyDecision::NotOurs {
            reason: format!(
                "annotation {UPDATE_STRATEGY_ANNOTATION}={strategy_value} is ignored: \
                 spec.updateStrategy.type is {update_type}, it must be {ON_DELETE} so that \
                 only the upgrade controller decides which pods to replace"
            ),
        };
    }

    match kind {
        StrategyKind::Ota => PolicyDecision::Managed(Policy::Ota),
        StrategyKind::AdvancedRollingUpdate => {
            let paused = match annotation(PAUSED_ANNOTATION).map(str::trim) {
                None | Some("false") => false,
                Some("true") => true,
                Some(other) => {
                    return PolicyDecision::Invalid(PolicyError::InvalidPaused {
                        value: other.to_string(),
                    })
                }
            };
            let partition = match annotation(PARTITION_ANNOTATION).map(Partition::parse) {
                None => None,
                Some(Ok(partition)) => partition,
                Some(Err(_)) => {
                    return PolicyDecision::Invalid(PolicyError::InvalidPartition {
                        value: annotation(PARTITION_ANNOTATION).unwrap_or_default().into(),
                    })
                }
            };
            let node_selector = match annotation(NODE_SELECTOR_ANNOTATION) {
                None => None,
                Some(raw) => match NodeSelector::parse(raw) {
                    Ok(selector) => Some(selector),
                    Err(why) => {
                        return PolicyDecision::Invalid(PolicyError::InvalidNodeSelector {
                            value: raw.to_string(),
                            why,
                        })
                    }
                },
            };
            let failure = match failure_policy(&annotation) {
                Ok(failure) => failure,
                Err(error) => return PolicyDecision::Invalid(error),
            };
            let waves = match waves_of(&annotation) {
                Ok(waves) => waves,
                Err(error) => return PolicyDecision::Invalid(error),
            };
            match MaxUnavailable::parse(annotation(MAX_UNAVAILABLE_ANNOTATION)) {
                Ok(max_unavailable) => PolicyDecision::Managed(Policy::AdvancedRollingUpdate {
                    max_unavailable,
                    paused,
                    partition,
                    node_selector,
                    failure,
                    waves,
                }),
                Err(error) => PolicyDecision::Invalid(error),
            }
        }
    }
}

/// `rollgate.io/failure-threshold`, `rollgate.io/on-failure` and
/// `rollgate.io/progress-deadline`, each absent for its default (see `failure`).
fn failure_policy<'a>(
    annotation: &impl Fn(&str) -> Option<&'a str>,
) -> Result<FailurePolicy, PolicyError> {
    let mut policy = FailurePolicy::default();
    if let Some(raw) = annotation(FAILURE_THRESHOLD_ANNOTATION) {
        policy.threshold =
            FailureThreshold::parse(raw).map_err(|_| PolicyError::InvalidFailureThreshold {
                value: raw.to_string(),
            })?;
    }
    if let Some(raw) = annotation(ON_FAILURE_ANNOTATION) {
        policy.on_failure = OnFailure::parse(raw).ok_or_else(|| PolicyError::InvalidOnFailure {
            value: raw.to_string(),
        })?;
    }
    if let Some(raw) = annotation(PROGRESS_DEADLINE_ANNOTATION) {
        let deadline = parse_interval(raw).map_err(|why| PolicyError::InvalidProgressDeadline {
            value: raw.to_string(),
            why,
        })?;
        policy.progress_deadline = (!deadline.is_zero()).then_some(deadline);
    }
    Ok(policy)
}

/// `rollgate.io/waves` with `rollgate.io/wave-bake` (default [`DEFAULT_WAVE_BAKE`]); a
/// bake without waves is read all the same, so a bad one is said before it matters.
fn waves_of<'a>(
    annotation: &impl Fn(&str) -> Option<&'a str>,
) -> Result<Option<Waves>, PolicyError> {
    let bake = match annotation(WAVE_BAKE_ANNOTATION) {
        None => DEFAULT_WAVE_BAKE,
        Some(raw) => parse_interval(raw).map_err(|why| PolicyError::InvalidWaveBake {
            value: raw.to_string(),
            why,
        })?,
    };
    annotation(WAVES_ANNOTATION)
        .map(|raw| {
            Waves::parse(raw, bake).map_err(|why| PolicyError::InvalidWaves {
                value: raw.to_string(),
                why,
            })
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::DaemonSetBuilder;

    #[test]
    fn paused_takes_true_or_false_and_anything_else_names_the_forms() {
        let decision = |value: Option<&str>| {
            let mut builder = DaemonSetBuilder::new("edge")
                .on_delete()
                .strategy("AdvancedRollingUpdate");
            if let Some(v) = value {
                builder = builder.paused(v);
            }
            policy_for(&builder.build())
        };
        let paused = |p| {
            PolicyDecision::Managed(Policy::AdvancedRollingUpdate {
                max_unavailable: MaxUnavailable::Percent(10),
                paused: p,
                partition: None,
                node_selector: None,
                failure: FailurePolicy::default(),
                waves: None,
            })
        };
        assert_eq!(decision(None), paused(false));
        assert_eq!(decision(Some("false")), paused(false));
        assert_eq!(decision(Some("true")), paused(true));
        assert_eq!(decision(Some(" true ")), paused(true));
        for bad in ["yes", "True", "1", ""] {
            let d = decision(Some(bad));
            assert_eq!(d.warning_reason(), Some("InvalidPaused"), "{bad:?}");
            let PolicyDecision::Invalid(e) = d else {
                panic!("{bad:?}")
            };
            assert!(e.to_string().contains("expected true or false"), "{e}");
        }
    }

    #[test]
    fn failure_annotations_parse_or_name_the_accepted_forms() {
        use crate::daemonset::failure::annotations::{FailureThreshold, OnFailure};
        use std::time::Duration;
        let decide = |f: fn(DaemonSetBuilder) -> DaemonSetBuilder| {
            policy_for(
                &f(DaemonSetBuilder::new("edge")
                    .on_delete()
                    .strategy("AdvancedRollingUpdate"))
                .build(),
            )
        };
        let failure_of = |d: PolicyDecision| match d {
            PolicyDecision::Managed(Policy::AdvancedRollingUpdate { failure, .. }) => failure,
            other => panic!("{other:?}"),
        };
        assert_eq!(failure_of(decide(|b| b)), FailurePolicy::default());
        let set = failure_of(decide(|b| {
            b.failure_threshold("20%")
                .on_failure("continue")
                .progress_deadline("10m")
        }));
        assert_eq!(set.threshold, FailureThreshold::Percent(20));
        assert_eq!(set.on_failure, OnFailure::Continue);
        assert_eq!(set.progress_deadline, Some(Duration::from_secs(600)));
        let off = failure_of(decide(|b| b.progress_deadline("0")));
        assert_eq!(off.progress_deadline, None, "0 is no deadline");

        type Annotate = fn(DaemonSetBuilder) -> DaemonSetBuilder;
        #[rustfmt::skip]
        let bad: [(Annotate, &str, &str); 4] = [
            (|b| b.failure_threshold("0"), "InvalidFailureThreshold", FAILURE_THRESHOLD_ACCEPTED_FORMS),
            (|b| b.failure_threshold("lots"), "InvalidFailureThreshold", FAILURE_THRESHOLD_ACCEPTED_FORMS),
            (|b| b.on_failure("stop"), "InvalidOnFailure", ON_FAILURE_ACCEPTED_FORMS),
            (|b| b.progress_deadline("1h"), "InvalidProgressDeadline", PROGRESS_DEADLINE_ACCEPTED_FORMS),
        ];
        for (f, reason, forms) in bad {
            let d = decide(f);
            assert_eq!(d.warning_reason(), Some(reason));
            let PolicyDecision::Invalid(e) = d else {
                panic!("{reason}")
            };
            assert!(e.to_string().contains(forms), "{e}");
            assert!(
                e.to_string()
                    .contains("no pod is deleted until it is fixed"),
                "{e}"
            );
        }
    }

    #[test]
    fn partition_and_node_selector_parse_or_name_the_accepted_forms() {
        let ds = |partition: Option<&str>, selector: Option<&str>, strategy: &str| {
            let mut builder = DaemonSetBuilder::new("edge").on_delete().strategy(strategy);
            if let Some(v) = partition {
                builder = builder.partition(v);
            }
            if let Some(v) = selector {
                builder = builder.node_selector(v);
            }
            policy_for(&builder.build())
        };
        let managed = |partition, node_selector: Option<&str>| {
            PolicyDecision::Managed(Policy::AdvancedRollingUpdate {
                max_unavailable: MaxUnavailable::Percent(10),
                paused: false,
                partition,
                node_selector: node_selector.map(|s| NodeSelector::parse(s).unwrap()),
                failure: FailurePolicy::default(),
                waves: None,
            })
        };
        let aru = "AdvancedRollingUpdate";
        assert_eq!(ds(None, None, aru), managed(None, None));
        assert_eq!(
            ds(Some("3"), None, aru),
            managed(Some(Partition::Count(3)), None)
        );
        assert_eq!(
            ds(Some("10%"), Some("pool in (a,b)"), aru),
            managed(Some(Partition::Percent(10)), Some("pool in (a,b)"))
        );
        assert_eq!(ds(Some("0"), None, aru), managed(None, None));

        let bad_partition = ds(Some("ten"), None, aru);
        assert_eq!(bad_partition.warning_reason(), Some("InvalidPartition"));
        let PolicyDecision::Invalid(e) = bad_partition else {
            panic!()
        };
        assert!(e.to_string().contains(PARTITION_ACCEPTED_FORMS), "{e}");

        let bad_selector = ds(None, Some("pool>3"), aru);
        assert_eq!(bad_selector.warning_reason(), Some("InvalidNodeSelector"));
        let PolicyDecision::Invalid(e) = bad_selector else {
            panic!()
        };
        let text = e.to_string();
        assert!(text.contains("unexpected character"), "{text}");
        assert!(text.contains(NODE_SELECTOR_ACCEPTED_FORMS), "{text}");

        // OTA marking is not steered by either, so neither is read (nor warned about).
        assert_eq!(
            ds(Some("ten"), Some("pool>3"), "OTA"),
            PolicyDecision::Managed(Policy::Ota)
        );
    }

    #[test]
    fn waves_and_their_bake_parse_or_name_the_accepted_forms() {
        let ds = |waves: Option<&str>, bake: Option<&str>| {
            let mut builder = DaemonSetBuilder::new("edge")
                .on_delete()
                .strategy("AdvancedRollingUpdate");
            if let Some(v) = waves {
                builder = builder.waves(v);
            }
            if let Some(v) = bake {
                builder = builder.wave_bake(v);
            }
            policy_for(&builder.build())
        };
        let waves_of = |d: PolicyDecision| match d {
            PolicyDecision::Managed(Policy::AdvancedRollingUpdate { waves, .. }) => waves,
            other => panic!("{other:?}"),
        };
        assert_eq!(waves_of(ds(None, None)), None);
        let read = waves_of(ds(Some("pool=canary; *"), None)).unwrap();
        assert_eq!((read.waves.len(), read.bake), (2, DEFAULT_WAVE_BAKE));
        let baked = waves_of(ds(Some("pool=canary; *"), Some("90s"))).unwrap();
        assert_eq!(baked.bake, std::time::Duration::from_secs(90));

        let bad = ds(Some("*; pool=canary"), None);
        assert_eq!(bad.warning_reason(), Some("InvalidWaves"));
        let PolicyDecision::Invalid(e) = bad else {
            panic!()
        };
        let text = e.to_string();
        assert!(
            text.contains("only be the last wave") && text.contains(WAVES_ACCEPTED_FORMS),
            "{text}"
        );

        // A bad bake is said even before waves are set: it is read all the same.
        let bad_bake = ds(None, Some("soon"));
        assert_eq!(bad_bake.warning_reason(), Some("InvalidWaveBake"));
        let PolicyDecision::Invalid(e) = bad_bake else {
            panic!()
        };
        assert!(e.to_string().contains(WAVE_BAKE_ACCEPTED_FORMS), "{e}");
    }

    #[test]
    fn max_unavailable_accepted_forms() {
        let cases: &[(Option<&str>, MaxUnavailable)] = &[
            (None, MaxUnavailable::Percent(10)),
            (Some("0"), MaxUnavailable::Percent(10)),
            (Some("0%"), MaxUnavailable::Percent(10)),
            (Some("00"), MaxUnavailable::Percent(10)),
            (Some("3"), MaxUnavailable::Count(3)),
            (Some(" 3 "), MaxUnavailable::Count(3)),
            (Some("30%"), MaxUnavailable::Percent(30)),
            (Some("100%"), MaxUnavailable::Percent(100)),
            (Some("1%"), MaxUnavailable::Percent(1)),
            (Some("5000"), MaxUnavailable::Count(5000)),
            (
                Some("99999999999999999999999"),
                MaxUnavailable::Count(u32::MAX),
            ),
        ];
        for (raw, expected) in cases {
            assert_eq!(MaxUnavailable::parse(*raw), Ok(*expected), "input {raw:?}");
        }
    }

    #[test]
    fn max_unavailable_bad_input_names_value_and_accepted_forms() {
        for raw in [
            "abc", "10.5%", "-1", "150%", "101%", "", "%", "+3", "3 %", "30%%", "1e3", "ten%",
        ] {
            let error = MaxUnavailable::parse(Some(raw)).expect_err(raw);
            assert_eq!(
                error,
                PolicyError::InvalidMaxUnavailable {
                    value: raw.to_string()
                }
            );
            let message = error.to_string();
            assert!(message.contains(&format!("{raw:?}")), "{message}");
            assert!(message.contains(MAX_UNAVAILABLE_ANNOTATION), "{message}");
            assert!(
                message.contains("integer") && message.contains("30%"),
                "{message}"
            );
        }
    }

    #[test]
    fn percentage_budget_rounds_up() {
        let cases = [
            (MaxUnavailable::Percent(10), 1, 1),
            (MaxUnavailable::Percent(10), 10, 1),
            (MaxUnavailable::Percent(10), 11, 2),
            (MaxUnavailable::Percent(30), 7, 3), // 2.1 -> 3
            (MaxUnavailable::Percent(50), 3, 2), // 1.5 -> 2
            (MaxUnavailable::Percent(100), 7, 7),
            (MaxUnavailable::Percent(10), 0, 0),
        ];
        for (max, base, expected) in cases {
            assert_eq!(max.budget(base), expected, "{max} of {base}");
        }
    }

    #[test]
    fn count_larger_than_node_count_means_all_at_once() {
        assert_eq!(MaxUnavailable::Count(50).budget(4), 4);
        assert_eq!(MaxUnavailable::Count(u32::MAX).budget(4), 4);
        assert_eq!(MaxUnavailable::Count(2).budget(4), 2);
    }

    #[test]
    fn strategy_is_case_insensitive() {
        for (raw, expected) in [
            ("AdvancedRollingUpdate", StrategyKind::AdvancedRollingUpdate),
            ("advancedrollingupdate", StrategyKind::AdvancedRollingUpdate),
            ("ADVANCEDROLLINGUPDATE", StrategyKind::AdvancedRollingUpdate),
            ("OTA", StrategyKind::Ota),
            ("otA", StrategyKind::Ota),
            ("ota", StrategyKind::Ota),
        ] {
            assert_eq!(parse_strategy(raw), Ok(expected), "{raw}");
        }
    }

    #[test]
    fn unknown_strategy_names_value_and_accepted_forms() {
        let error = parse_strategy("RollingUpdate").unwrap_err();
        let message = error.to_string();
        assert!(message.contains("\"RollingUpdate\""), "{message}");
        assert!(
            message.contains("AdvancedRollingUpdate") && message.contains("OTA"),
            "{message}"
        );
        assert_eq!(error.event_reason(), "UnknownUpdateStrategy");
    }

    #[test]
    fn policy_for_daemonset() {
        let on_delete = || DaemonSetBuilder::new("ds").on_delete();

        assert_eq!(policy_for(&on_delete().build()), PolicyDecision::Unmanaged);
        assert_eq!(
            policy_for(&on_delete().strategy("otA").build()),
            PolicyDecision::Managed(Policy::Ota)
        );
        assert_eq!(
            policy_for(
                &on_delete()
                    .strategy("OTA")
                    .max_unavailable("garbage")
                    .build()
            ),
            PolicyDecision::Managed(Policy::Ota),
            "OTA ignores max-unavailable"
        );
        assert_eq!(
            policy_for(&on_delete().strategy("advancedrollingupdate").build()),
            PolicyDecision::Managed(Policy::AdvancedRollingUpdate {
                max_unavailable: MaxUnavailable::Percent(10),
                paused: false,
                partition: None,
                node_selector: None,
                failure: FailurePolicy::default(),
                waves: None,
            })
        );
        assert_eq!(
            policy_for(
                &on_delete()
                    .strategy("AdvancedRollingUpdate")
                    .max_unavailable("30%")
                    .build()
            ),
            PolicyDecision::Managed(Policy::AdvancedRollingUpdate {
                max_unavailable: MaxUnavailable::Percent(30),
                paused: false,
                partition: None,
                node_selector: None,
                failure: FailurePolicy::default(),
                waves: None,
            })
        );

        let invalid = policy_for(
            &on_delete()
                .strategy("AdvancedRollingUpdate")
                .max_unavailable("150%")
                .build(),
        );
        assert_eq!(
            invalid,
            PolicyDecision::Invalid(PolicyError::InvalidMaxUnavailable {
                value: "150%".into()
            })
        );
        assert_eq!(invalid.warning_reason(), Some("InvalidMaxUnavailable"));

        let unknown = policy_for(&on_delete().strategy("Surge").build());
        assert!(matches!(
            unknown,
            PolicyDecision::Invalid(PolicyError::UnknownStrategy { .. })
        ));
    }

    #[test]
    fn not_on_delete_is_not_ours_with_a_reason() {
        let rolling = DaemonSetBuilder::new("ds")
            .strategy("AdvancedRollingUpdate")
            .update_strategy_type("RollingUpdate")
            .build();
        let PolicyDecision::NotOurs { reason } = policy_for(&rolling) else {
            panic!("expected NotOurs");
        };
        assert!(
            reason.contains("RollingUpdate") && reason.contains("OnDelete"),
            "{reason}"
        );

        let defaulted = DaemonSetBuilder::new("ds").strategy("OTA").build();
        let decision = policy_for(&defaulted);
        assert!(matches!(decision, PolicyDecision::NotOurs { .. }));
        assert_eq!(decision.warning_reason(), Some("UpdateStrategyNotOnDelete"));
    }
}
