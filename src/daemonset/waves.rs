//! `rollgate.io/waves` and `rollgate.io/wave-bake`: a rollout in node-pool waves, each
//! proven before the next starts. This file owns their parsing and the pure rule that
//! says which wave a rollout is in; `rolling_plan` holds back the nodes of the later
//! waves as it holds back the nodes of a node selector (the budget is never bypassed).
//!
//! The waves are an ordered list of node selectors (the `rollgate.io/node-selector`
//! syntax), `;`-separated, the last of which may be `*` (every node left). A node belongs
//! to the first wave that matches it; a node no wave matches is held back for good (as a
//! node the node selector does not match).
//!
//! Wave k+1 starts once wave k is *proven*: every Ready node of wave k runs a pod of the
//! current revision that is available, at least one does, and the last of them has been
//! available for the bake time (`rollgate.io/wave-bake`) by now. A pod that restarts turns
//! not Ready and back, so a crash loop restarts the bake each time; a failure anywhere
//! halts the rollout (`failure`). Counted only are the nodes the partition and the node
//! selector let through, and a wave none of whose nodes they let through (or with no node
//! at all) is proven at once. A wave whose nodes are all NotReady is not: nothing proves
//! the revision there, and the rollout waits for one of them to come back (the edge model
//! upgrades it then). While any Ready node is being replaced (no pod in view), no wave is
//! proven: its pod is on its way.
//!
//! A new template starts again from the first wave: nodes of the later waves that run an
//! older revision wait again.
use std::time::Duration;

use super::controls::NodeSelector;
use crate::object::NodeFacts;

/// What `rollgate.io/waves` accepts, for error messages and docs.
pub const WAVES_ACCEPTED_FORMS: &str = "node selectors separated by ';', one per wave in \
     the order they roll out, each in the rollgate.io/node-selector syntax, and '*' (every \
     node left) only as the last, e.g. 'apps.openyurt.io/nodepool=canary; \
     apps.openyurt.io/nodepool in (hangzhou,beijing); *'";

/// What `rollgate.io/wave-bake` accepts, for error messages and docs.
pub const WAVE_BAKE_ACCEPTED_FORMS: &str =
    "a duration such as 90s, 10m or 600 (seconds); 0 for none";

/// `rollgate.io/wave-bake` when absent: long enough for a crash loop's first back-offs
/// (10 s, 20 s, 40 s, ...) to show, short enough not to stall a rollout of many waves.
pub const DEFAULT_WAVE_BAKE: Duration = Duration::from_secs(300);

/// One wave: the nodes a selector matches, or every node left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wave {
    Selector(NodeSelector),
    Rest,
}

impl Wave {
    fn matches(&self, node: &impl NodeFacts) -> bool {
        match self {
            Wave::Selector(selector) => selector.matches(node),
            Wave::Rest => true,
        }
    }
}

impl std::fmt::Display for Wave {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Wave::Selector(selector) => selector.fmt(f),
            Wave::Rest => f.write_str("*"),
        }
    }
}

/// A DaemonSet's waves and bake time, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waves {
    pub waves: Vec<Wave>,
    pub bake: Duration,
}

impl Waves {
    /// Parses `rollgate.io/waves`, with `bake` from `rollgate.io/wave-bake`. On error,
    /// says what is wrong.
    pub fn parse(raw: &str, bake: Duration) -> Result<Waves, String> {
        let parts: Vec<&str> = raw.split(';').map(str::trim).collect();
        if parts.iter().all(|p| p.is_empty()) {
            return Err("it is empty (remove the annotation to roll out in one wave)".into());
        }
        let mut waves = Vec::new();
        for (at, part) in parts.iter().enumerate() {
            let number = at + 1;
            let wave = match *part {
                "" => return Err(format!("wave {number} is empty")),
                "*" if number < parts.len() => {
                    return Err(format!(
                    "'*' takes every node left, so it can only be the last wave, not wave {number}"
                ))
                }
                "*" => Wave::Rest,
                selector => Wave::Selector(
                    NodeSelector::parse(selector)
                        .map_err(|why| format!("wave {number} ({selector:?}): {why}"))?,
                ),
            };
            waves.push(wave);
        }
        Ok(Waves { waves, bake })
    }

    /// The (0-based) wave the node belongs to: the first that matches it.
    pub fn wave_of(&self, node: &impl NodeFacts) -> Option<usize> {
        self.waves.iter().position(|wave| wave.matches(node))
    }
}

/// What the plan saw of one wave's nodes (those the partition and node selector let
/// through).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WaveLook {
    /// Nodes of the wave, Ready or not.
    pub nodes: usize,
    /// Ready nodes whose pod is of the current revision and available.
    pub proven: usize,
    /// Ready nodes that are not (an old pod, one not available, none, several).
    pub pending: usize,
    /// When the last of the `proven` pods became available (its Ready condition's last
    /// transition plus `minReadySeconds`), as seconds since the epoch.
    pub last_available: Option<i64>,
}

/// Where a wave stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaveState {
    /// Proven and baked: the next wave may go.
    Done,
    /// Every Ready node is proven; the bake has this long left.
    Baking(Duration),
    /// Ready nodes still to upgrade or to become available.
    Rolling,
    /// Nodes, but none Ready and proven: nothing shows the revision works here yet.
    NoReadyNode,
}

impl WaveLook {
    /// The wave's state at `now` (seconds since the epoch), with `bake`.
    pub fn state(&self, bake: Duration, now: i64) -> WaveState {
        if self.nodes == 0 {
            return WaveState::Done;
        }
        if self.pending > 0 {
            return WaveState::Rolling;
        }
        let Some(last) = self.last_available.filter(|_| self.proven > 0) else {
            return WaveState::NoReadyNode;
        };
        let baked_at = last.saturating_add(bake.as_secs() as i64);
        if now >= baked_at {
            WaveState::Done
        } else {
            WaveState::Baking(Duration::from_secs((baked_at - now) as u64))
        }
    }
}

/// The waves as a plan found them: each wave's look and state, and the current one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaveProgress {
    /// Per wave, in order: its selector as written, its look, its state.
    pub waves: Vec<(String, WaveLook, WaveState)>,
    /// The first wave not done (0-based); `waves.len()` when all are.
    pub current: usize,
    /// Old nodes of the waves after the current one, and of no wave, by name: held back.
    pub held: Vec<String>,
    /// `rollgate.io/wave-bake`.
    pub bake: Duration,
}

impl WaveProgress {
    /// From the looks: the current wave is the first that is not done.
    pub fn of(waves: &Waves, looks: Vec<WaveLook>, now: i64) -> WaveProgress {
        let bake = waves.bake;
        let waves: Vec<(String, WaveLook, WaveState)> = waves
            .waves
            .iter()
            .zip(looks)
            .map(|(wave, look)| (wave.to_string(), look, look.state(bake, now)))
            .collect();
        let current = waves
            .iter()
            .position(|(_, _, state)| *state != WaveState::Done)
            .unwrap_or(waves.len());
        WaveProgress {
            waves,
            current,
            held: Vec::new(),
            bake,
        }
    }

    /// Whether a node of `wave` (`None`: of no wave) may be upgraded now.
    pub fn lets_through(&self, wave: Option<usize>) -> bool {
        wave.is_some_and(|wave| wave <= self.current)
    }

    /// The current wave's state, if one is not done.
    pub fn current_state(&self) -> Option<WaveState> {
        self.waves.get(self.current).map(|(_, _, state)| *state)
    }

    /// One line for people: `wave 2 of 3 (pool in (a,b))`, or `all 3 waves`.
    pub fn describe(&self) -> String {
        match self.waves.get(self.current) {
            Some((selector, _, _)) => format!(
                "wave {} of {} ({selector})",
                self.current + 1,
                self.waves.len()
            ),
            None => format!("all {} waves", self.waves.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::labelled_node;

    const BAKE: Duration = Duration::from_secs(60);

    #[test]
    fn waves_parse_in_order_with_the_rest_last_or_name_what_is_wrong() {
        let waves = Waves::parse(
            "apps.openyurt.io/nodepool=canary; apps.openyurt.io/nodepool in (hangzhou,beijing); *",
            BAKE,
        )
        .unwrap();
        assert_eq!(waves.waves.len(), 3);
        assert_eq!(waves.waves[2], Wave::Rest);
        assert_eq!(
            waves.waves[0].to_string(),
            "apps.openyurt.io/nodepool=canary"
        );
        assert_eq!(waves.bake, BAKE);
        for (raw, says) in [
            ("", "it is empty"),
            (" ; ", "it is empty"),
            ("pool=a;;*", "wave 2 is empty"),
            ("*; pool=a", "'*' takes every node left"),
            ("pool=a; pool in (b", "wave 2 (\"pool in (b\")"),
            ("pool=a;", "wave 2 is empty"),
        ] {
            let error = Waves::parse(raw, BAKE).unwrap_err();
            assert!(error.contains(says), "{raw:?}: {error}");
        }
    }

    #[test]
    fn a_node_is_in_the_first_wave_that_matches_it() {
        let waves = Waves::parse("pool=canary; region=east; *", BAKE).unwrap();
        let canary_east = labelled_node("a", &[("pool", "canary"), ("region", "east")]);
        let east = labelled_node("b", &[("region", "east")]);
        let other = labelled_node("c", &[]);
        assert_eq!(waves.wave_of(&canary_east), Some(0));
        assert_eq!(waves.wave_of(&east), Some(1));
        assert_eq!(waves.wave_of(&other), Some(2));
        let no_rest = Waves::parse("pool=canary", BAKE).unwrap();
        assert_eq!(no_rest.wave_of(&other), None, "no wave: held back");
    }

    #[test]
    fn a_wave_is_done_when_every_ready_node_is_proven_and_the_last_has_baked() {
        let look = |nodes, proven, pending, last| WaveLook {
            nodes,
            proven,
            pending,
            last_available: last,
        };
        let now = 1_000;
        assert_eq!(
            look(0, 0, 0, None).state(BAKE, now),
            WaveState::Done,
            "an empty wave"
        );
        assert_eq!(look(3, 1, 2, Some(0)).state(BAKE, now), WaveState::Rolling);
        assert_eq!(
            look(3, 3, 0, Some(now - 20)).state(BAKE, now),
            WaveState::Baking(Duration::from_secs(40))
        );
        assert_eq!(
            look(3, 3, 0, Some(now - 60)).state(BAKE, now),
            WaveState::Done
        );
        assert_eq!(
            look(2, 0, 0, None).state(BAKE, now),
            WaveState::NoReadyNode,
            "only NotReady nodes prove nothing"
        );
        assert_eq!(
            look(3, 1, 0, Some(now)).state(Duration::ZERO, now),
            WaveState::Done,
            "no bake: done once available"
        );
    }

    #[test]
    fn the_current_wave_is_the_first_not_done_and_lets_earlier_ones_through() {
        let waves = Waves::parse("pool=canary; *", BAKE).unwrap();
        let now = 1_000;
        let baked = WaveLook {
            nodes: 1,
            proven: 1,
            pending: 0,
            last_available: Some(now - 600),
        };
        let rolling = WaveLook {
            nodes: 5,
            proven: 0,
            pending: 5,
            last_available: None,
        };
        let progress = WaveProgress::of(&waves, vec![baked, rolling], now);
        assert_eq!(progress.current, 1);
        assert!(progress.lets_through(Some(0)) && progress.lets_through(Some(1)));
        assert!(!progress.lets_through(None));
        assert_eq!(progress.describe(), "wave 2 of 2 (*)");
        let first = WaveProgress::of(&waves, vec![rolling, rolling], now);
        assert_eq!(first.current, 0);
        assert!(!first.lets_through(Some(1)));
        let done = WaveProgress::of(&waves, vec![baked, baked], now);
        assert_eq!(done.current, 2);
        assert_eq!(done.describe(), "all 2 waves");
        assert_eq!(done.current_state(), None);
    }
}
