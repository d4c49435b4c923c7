//! The pure figures of the readiness-gate fleet bench (benches/gates_fleet.rs), here so
//! that they are unit tested (a bench with `harness = false` runs no tests): flip
//! latencies matched by IP against the emulator's `healthy` events, the longest wait
//! for a look from the emulator's call log, and calls by action in a window.
use std::collections::{BTreeMap, HashMap, HashSet};

/// One pod as the bench's watch saw it (times are Unix seconds when seen).
#[derive(Clone, Debug, Default)]
pub struct PodSeen {
    pub app: String,
    pub ip: Option<String>,
    pub first_seen: f64,
    pub containers_ready: Option<f64>,
    pub gate_true: Option<f64>,
    /// The last (status, reason, message) of the gate, to record changes only.
    pub gate: Option<(String, String, String)>,
}

#[derive(Clone, Debug)]
pub struct Call {
    pub at: f64,
    pub product: String,
    pub action: String,
    pub load_balancer: Option<String>,
    pub listener: Option<String>,
    pub throttled: bool,
}

/// Flips of the pods of `apps` first seen at or after `since`.
#[derive(Debug, Default, PartialEq)]
pub struct Flips {
    /// Latencies, sorted: from the last `healthy` event of the pod's IP before its gate
    /// was seen True (IPs are reused across rollouts, so the last one before), or from
    /// the pod's first sighting if that event came before the pod existed, to that
    /// sighting.
    pub latencies: Vec<f64>,
    /// Flipped pods with no healthy event to match.
    pub unmatched: usize,
    /// Flipped pods whose IP was last healthy before they existed: the emulator kept
    /// the old pod's backend of that IP healthy in the group (it probes nothing), so
    /// the new pod had no healthy event of its own; timed from its first sighting.
    pub healthy_before_the_pod: usize,
    /// The slowest flip's pod.
    pub slowest: Option<String>,
}

pub fn flip_latencies(
    pods: &HashMap<String, PodSeen>,
    apps: &HashSet<String>,
    since: f64,
    healthy: &HashMap<String, Vec<f64>>,
) -> Flips {
    let mut flips = Flips::default();
    let mut slowest = f64::NEG_INFINITY;
    for (name, pod) in pods {
        if !apps.contains(&pod.app) || pod.first_seen < since {
            continue;
        }
        let (Some(ip), Some(at)) = (&pod.ip, pod.gate_true) else {
            continue;
        };
        let last = healthy
            .get(ip)
            .and_then(|ts| ts.iter().rev().find(|&&h| h <= at).copied());
        let Some(healthy_at) = last else {
            flips.unmatched += 1;
            continue;
        };
        if healthy_at < pod.first_seen {
            flips.healthy_before_the_pod += 1;
        }
        let latency = at - healthy_at.max(pod.first_seen);
        if latency > slowest {
            slowest = latency;
            flips.slowest = Some(name.clone());
        }
        flips.latencies.push(latency);
    }
    flips.latencies.sort_by(|a, b| a.total_cmp(b));
    flips
}

/// The longest gap between two looks inside the pending intervals (merged; each from a
/// new pod's containers ready to its gate True, or `end`): from an interval's start to
/// its first look, between looks, and from the last look to the interval's end.
pub fn longest_pending_wait(looks: &[f64], pending: &[(f64, f64)]) -> f64 {
    let mut intervals = pending.to_vec();
    intervals.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut merged: Vec<(f64, f64)> = vec![];
    for (s, e) in intervals {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    let mut longest: f64 = 0.0;
    for (s, e) in merged {
        let mut previous = s;
        for &t in looks.iter().filter(|&&t| t > s && t <= e) {
            longest = longest.max(t - previous);
            previous = t;
        }
        longest = longest.max(e - previous);
    }
    longest
}

/// The longest gap between two looks in [start, end], the window's edges counting as
/// looks (so a lower bound of the real wait); the whole window when there is none.
pub fn longest_gap(looks: &[f64], start: f64, end: f64) -> f64 {
    let (from, to) = longest_gap_at(looks, start, end);
    to - from
}

/// Where [`longest_gap`] is: its first and last moment.
pub fn longest_gap_at(looks: &[f64], start: f64, end: f64) -> (f64, f64) {
    let mut previous = start;
    let mut longest = (start, start);
    for &t in looks
        .iter()
        .filter(|&&t| t >= start && t <= end)
        .chain([&end])
    {
        if t - previous > longest.1 - longest.0 {
            longest = (previous, t);
        }
        previous = t;
    }
    longest
}

/// Per action in [start, end]: (admitted + throttled calls, throttled, busiest second).
pub fn calls_by_action(calls: &[Call], start: f64, end: f64) -> BTreeMap<String, (u64, u64, u64)> {
    let mut out: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
    let mut per_second: HashMap<(String, i64), u64> = HashMap::new();
    for c in calls.iter().filter(|c| c.at >= start && c.at <= end) {
        let key = format!("{}:{}", c.product, c.action);
        let e = out.entry(key.clone()).or_default();
        e.0 += 1;
        e.1 += c.throttled as u64;
        *per_second.entry((key, c.at.floor() as i64)).or_default() += 1;
    }
    for ((key, _), n) in per_second {
        if let Some(e) = out.get_mut(&key) {
            e.2 = e.2.max(n);
        }
    }
    out
}

/// The stated bound on a settled Service's wait for a look (docs/readiness-gates.md,
/// *No starvation*) at the controller's defaults: the slow interval (10 s), plus one
/// look (3 calls, one listener) for every settled Service of the product, paid from
/// the quarter of the budget (10 calls/s) kept for settled Services.
pub fn settled_look_bound_s(settled_services: usize) -> f64 {
    const SLOW_S: f64 = 10.0;
    const CALLS_PER_LOOK: f64 = 3.0;
    const RESERVED_CALLS_PER_S: f64 = 10.0 / 4.0;
    SLOW_S + CALLS_PER_LOOK * settled_services as f64 / RESERVED_CALLS_PER_S
}

/// The progress sample (seconds, load balancers, gates True) nearest to `at`, or zeros.
pub fn progress_at(progress: &[(f64, usize, usize)], at: f64) -> (f64, usize, usize) {
    progress
        .iter()
        .copied()
        .min_by(|a, b| (a.0 - at).abs().total_cmp(&(b.0 - at).abs()))
        .unwrap_or((0.0, 0, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_settled_bound_is_the_documented_one() {
        // docs/readiness-gates.md: about 130 s at 100 Services, 1,210 s at 1,000.
        assert_eq!(settled_look_bound_s(100), 130.0);
        assert_eq!(settled_look_bound_s(1000), 1210.0);
    }

    #[test]
    fn progress_is_compared_at_the_nearest_sample() {
        let progress = [(0.0, 0, 0), (30.5, 4, 40), (61.0, 9, 95)];
        assert_eq!(progress_at(&progress, 60.0), (61.0, 9, 95));
        assert_eq!(progress_at(&progress, 20.0), (30.5, 4, 40));
        assert_eq!(progress_at(&[], 20.0), (0.0, 0, 0));
    }

    #[test]
    fn pending_waits_count_from_the_interval_start_and_to_its_end() {
        // Looks at 1, 2, 6; pending 0.5..7: waits 0.5, 1, 4, 1.
        assert_eq!(longest_pending_wait(&[1.0, 2.0, 6.0], &[(0.5, 7.0)]), 4.0);
        // Overlapping intervals merge; looks outside them do not count.
        assert_eq!(
            longest_pending_wait(&[1.0, 20.0], &[(0.0, 2.0), (1.5, 3.0)]),
            2.0
        );
        assert_eq!(longest_gap(&[], 10.0, 40.0), 30.0);
        assert_eq!(longest_gap(&[12.0, 15.0], 10.0, 40.0), 25.0);
        assert_eq!(
            longest_gap_at(&[12.0, 30.0, 35.0], 10.0, 40.0),
            (12.0, 30.0)
        );
    }

    fn pod(app: &str, ip: &str, first_seen: f64, gate_true: Option<f64>) -> PodSeen {
        PodSeen {
            app: app.into(),
            ip: Some(ip.into()),
            first_seen,
            gate_true,
            ..Default::default()
        }
    }

    #[test]
    fn a_flip_matches_the_last_healthy_event_of_its_ip_before_it() {
        let pods = HashMap::from([
            // A new pod on a reused IP: healthy at 3 (the old pod) and at 13 (its own).
            ("new".to_string(), pod("a", "10.0.0.1", 10.0, Some(13.5))),
            // Seen before the rollout started: not one of its flips.
            ("old".to_string(), pod("a", "10.0.0.2", 1.0, Some(4.0))),
            // Another Deployment's pod.
            ("other".to_string(), pod("b", "10.0.0.3", 10.0, Some(12.0))),
            // No healthy event at all.
            ("lost".to_string(), pod("a", "10.0.0.4", 10.0, Some(12.0))),
            // Not flipped yet.
            ("pending".to_string(), pod("a", "10.0.0.5", 10.0, None)),
            // Its IP's old backend stayed healthy: timed from its first sighting.
            ("kept".to_string(), pod("a", "10.0.0.6", 10.0, Some(12.0))),
        ]);
        let healthy = HashMap::from([
            ("10.0.0.1".to_string(), vec![3.0, 13.0]),
            ("10.0.0.2".to_string(), vec![2.0]),
            ("10.0.0.3".to_string(), vec![11.0]),
            ("10.0.0.5".to_string(), vec![11.0]),
            ("10.0.0.6".to_string(), vec![4.0]),
        ]);
        let apps = HashSet::from(["a".to_string()]);
        let flips = flip_latencies(&pods, &apps, 5.0, &healthy);
        assert_eq!(
            flips,
            Flips {
                latencies: vec![0.5, 2.0],
                unmatched: 1,
                healthy_before_the_pod: 1,
                slowest: Some("kept".into()),
            }
        );
    }

    #[test]
    fn calls_are_counted_by_action_with_the_busiest_second_inside_the_window() {
        let call = |at: f64, action: &str, throttled: bool| Call {
            at,
            product: "nlb".into(),
            action: action.into(),
            load_balancer: None,
            listener: None,
            throttled,
        };
        let calls = [
            call(0.5, "GetListenerHealthStatus", false),
            call(10.1, "GetListenerHealthStatus", false),
            call(10.2, "GetListenerHealthStatus", true),
            call(10.9, "GetListenerHealthStatus", false),
            call(11.0, "GetListenerHealthStatus", false),
            call(11.5, "ListServerGroups", false),
            call(30.0, "ListServerGroups", false),
        ];
        let by = calls_by_action(&calls, 10.0, 20.0);
        assert_eq!(by["nlb:GetListenerHealthStatus"], (4, 1, 3));
        assert_eq!(by["nlb:ListServerGroups"], (1, 0, 1));
        assert_eq!(by.len(), 2);
    }
}
