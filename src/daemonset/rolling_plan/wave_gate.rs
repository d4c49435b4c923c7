//! The plan's look at its waves (`waves`): each node's wave, what each wave's nodes show,
//! and the old nodes the current wave holds back.
use k8s_openapi::jiff::Timestamp;

use super::arranged::{availability, Availability, LivePods, NodeKey, NodeLook, PodsByNode};
use crate::daemonset::controls::HeldBack;
use crate::daemonset::waves::{WaveLook, WaveProgress, Waves};
use crate::object::{NodeFacts, PodFacts};

/// The waves' progress and the old nodes held back by them, by name (in name order).
///
/// - `by_node`, `lonely`: the nodes with pods of the DaemonSet, and those without;
/// - `held`: the nodes the partition and node selector hold (they count in no wave);
/// - `unplaced`: nodes left out for placement (in no wave either);
/// - `vacated`: per lonely node, whether the plan counts it vacated (being replaced).
#[allow(clippy::too_many_arguments)]
pub(super) fn wave_progress<P: PodFacts, N: NodeFacts>(
    waves: &Waves,
    by_node: &PodsByNode<'_, P, N>,
    lonely: &[(NodeKey<'_>, NodeLook<'_>, &N)],
    held: &HeldBack,
    unplaced: &[String],
    vacated: &[bool],
    min_ready: i32,
    now: Timestamp,
) -> WaveProgress {
    let mut looks = vec![WaveLook::default(); waves.waves.len()];
    // Few, if any: a walk is cheaper than a set.
    let counted = |name: &str| !held.holds(name) && !unplaced.iter().any(|n| n == name);
    // Each node's wave, kept for the old nodes below: one selector walk per node.
    let mut group_waves = Vec::with_capacity(by_node.groups.len());
    for group in &by_node.groups {
        let Some((node, node_look)) = group.node else {
            group_waves.push(None);
            continue;
        };
        let wave = waves.wave_of(node);
        group_waves.push(wave);
        let (Some(wave), true) = (wave, counted(group.key.name)) else {
            continue;
        };
        let look = &mut looks[wave];
        look.nodes += 1;
        if !node_look.ready {
            continue;
        }
        match LivePods::of(by_node.pods(group)) {
            LivePods::OnlyNew(new) => match availability(new.look.ready, min_ready, now) {
                Availability::Available => {
                    look.proven += 1;
                    // Available since its Ready turned, plus minReadySeconds; a pod
                    // without the time counts as available long ago.
                    let since = new.look.ready.and_then(|r| r.since).map_or(0, |t| {
                        t.as_second().saturating_add(i64::from(min_ready.max(0)))
                    });
                    look.last_available = look.last_available.max(Some(since));
                }
                _ => look.pending += 1,
            },
            _ => look.pending += 1,
        }
    }
    // Ready nodes being replaced (no pod in view) are pending in their wave.
    for (&(_, look, node), &vacated) in lonely.iter().zip(vacated) {
        if let (true, Some(wave)) = (vacated && look.ready, waves.wave_of(node)) {
            looks[wave].nodes += 1;
            looks[wave].pending += 1;
        }
    }
    let mut progress = WaveProgress::of(waves, looks, now.as_second());
    progress.held = by_node
        .groups
        .iter()
        .zip(&group_waves)
        .filter(|(group, wave)| {
            !progress.lets_through(**wave)
                && group.node.is_some()
                && by_node.has_old_pod(group)
                && counted(group.key.name)
        })
        .map(|(group, _)| group.key.name.to_string())
        .collect();
    progress
}
