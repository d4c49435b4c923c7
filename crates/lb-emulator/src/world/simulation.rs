//! The passing of time in the emulated cloud: backends register and turn healthy
//! or unhealthy (simulated, forced, or from TCP probes), NLBs finish provisioning,
//! and asynchronous NLB jobs finish and take effect, or fail, or never finish.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use rand::RngExt as _;
use tokio::time::Instant;

use super::{BackendRec, Health, Job, JobEffect, JobOutcome, World};
use crate::config::HealthMode;

impl World {
    /// Advances registration, health, NLB provisioning and jobs to `now`.
    /// `probes` are fresh TCP results keyed by (ip, port).
    pub fn tick(&mut self, now: Instant, probes: &HashMap<(String, u16), bool>) {
        let registration_delay = Duration::from_millis(self.timing.registration_delay_ms);
        let health_delay = Duration::from_millis(self.timing.health_delay_ms);
        let mode = self.health_mode;
        let mut events: Vec<(&'static str, String, BackendRec, &'static str, String)> = vec![];
        let mut advance = |product: &'static str, group_id: &str, b: &mut BackendRec| {
            if !b.registered && now >= b.added_at + registration_delay {
                b.registered = true;
                b.registered_at = Some(now);
                events.push((
                    product,
                    group_id.to_string(),
                    b.clone(),
                    "registered",
                    String::new(),
                ));
            }
            if let Some(ok) = probes.get(&(b.ip.clone(), b.port)) {
                b.probe_ok = *ok;
                b.last_probe = Some(now);
            }
            if !b.registered {
                return;
            }
            let verdict = match (b.forced_health, mode) {
                (Some(forced), _) => Some(forced),
                (None, HealthMode::Simulated) => {
                    (now >= b.registered_at.unwrap_or(now) + health_delay).then_some(true)
                }
                (None, HealthMode::Tcp) => b.last_probe.map(|_| b.probe_ok),
            };
            let next = match verdict {
                Some(true) => Health::Healthy,
                Some(false) => Health::Unhealthy,
                None => b.health,
            };
            if next != b.health {
                b.health = next;
                let name = if next == Health::Healthy {
                    "healthy"
                } else {
                    "unhealthy"
                };
                events.push((
                    product,
                    group_id.to_string(),
                    b.clone(),
                    name,
                    String::new(),
                ));
            }
        };
        for group in self.vgroups.values_mut() {
            for b in group.backends.iter_mut() {
                advance("clb", &group.id, b);
            }
        }
        for group in self.server_groups.values_mut() {
            for b in group.backends.iter_mut() {
                advance("nlb", &group.id, b);
            }
        }
        for (product, group, b, event, detail) in events {
            self.event(product, &group, &b, event, detail);
        }
        for nlb in self.nlbs.values_mut() {
            if nlb.status == "Provisioning" && now >= nlb.active_at {
                nlb.status = "Active".into();
            }
        }
        let due: Vec<String> = self
            .jobs
            .values()
            .filter(|j| {
                j.status == "Processing" && j.outcome != JobOutcome::Timeout && now >= j.finish_at
            })
            .map(|j| j.id.clone())
            .collect();
        for id in due {
            let job = self.jobs.get_mut(&id).expect("listed above");
            let effect = job.effect.take();
            job.status = match job.outcome {
                JobOutcome::Succeeded => "Succeeded".into(),
                _ => "Failed".into(),
            };
            tracing::info!(job_id = %id, action = %job.action, status = %job.status, "job finished");
            if job.outcome == JobOutcome::Succeeded {
                if let Some(effect) = effect {
                    self.apply(effect);
                }
            }
        }
    }

    /// (ip, port) of registered backends due for a TCP probe.
    pub fn probe_targets(&self, now: Instant, interval: Duration) -> Vec<(String, u16)> {
        if self.health_mode != HealthMode::Tcp {
            return vec![];
        }
        let mut targets: HashSet<(String, u16)> = HashSet::new();
        let groups = self.vgroups.values().flat_map(|g| g.backends.iter());
        for b in groups.chain(self.server_groups.values().flat_map(|g| g.backends.iter())) {
            if b.registered && b.last_probe.is_none_or(|t| now >= t + interval) {
                targets.insert((b.ip.clone(), b.port));
            }
        }
        targets.into_iter().collect()
    }

    fn apply(&mut self, effect: JobEffect) {
        match effect {
            JobEffect::AddServers(group_id, servers) => {
                let now = Instant::now();
                let mut added = vec![];
                if let Some(group) = self.server_groups.get_mut(&group_id) {
                    for mut s in servers {
                        if group.backends.iter().any(|b| b.key() == s.key()) {
                            continue;
                        }
                        s.added_at = now;
                        added.push(s.clone());
                        group.backends.push(s);
                    }
                }
                for s in added {
                    self.event("nlb", &group_id, &s, "added", String::new());
                }
            }
            JobEffect::RemoveServers(group_id, keys) => {
                let mut removed = vec![];
                if let Some(group) = self.server_groups.get_mut(&group_id) {
                    group.backends.retain(|b| {
                        let gone = keys.contains(&b.key());
                        if gone {
                            removed.push(b.clone());
                        }
                        !gone
                    });
                }
                for b in removed {
                    self.event("nlb", &group_id, &b, "removed", String::new());
                }
            }
            JobEffect::UpdateServers(group_id, updates) => {
                let mut changed = vec![];
                if let Some(group) = self.server_groups.get_mut(&group_id) {
                    for u in updates {
                        if let Some(b) = group.backends.iter_mut().find(|b| b.key() == u.key()) {
                            if b.weight != u.weight {
                                changed.push((b.clone(), format!("{} -> {}", b.weight, u.weight)));
                                b.weight = u.weight;
                            }
                            if !u.description.is_empty() {
                                b.description = u.description.clone();
                            }
                        }
                    }
                }
                for (b, detail) in changed {
                    self.event("nlb", &group_id, &b, "weight-changed", detail);
                }
            }
            JobEffect::CreateServerGroup(group) => {
                self.server_groups.insert(group.id.clone(), group);
            }
            JobEffect::UpdateServerGroup {
                id,
                health_check,
                health_settings,
                settings,
            } => {
                if let Some(group) = self.server_groups.get_mut(&id) {
                    if let Some(on) = health_check {
                        group.health_check = on;
                    }
                    group.health_settings.extend(health_settings);
                    group.settings.extend(settings);
                }
            }
            JobEffect::CreateListener(listener) => {
                self.listeners.insert(listener.id.clone(), listener);
            }
            JobEffect::DeleteLoadBalancer(id) => {
                self.nlbs.remove(&id);
                self.listeners.retain(|_, l| l.load_balancer_id != id);
            }
            JobEffect::DeleteListener(id) => {
                self.listeners.remove(&id);
            }
            JobEffect::DeleteServerGroup(id) => {
                if let Some(group) = self.server_groups.remove(&id) {
                    for b in &group.backends {
                        self.event("nlb", &id, b, "removed", "server group deleted".into());
                    }
                }
            }
        }
    }

    /// Whether a server change on `group_id` is still running: the group is then
    /// `Configuring` and takes no other change (`IncorrectStatus.serverGroup`). A job
    /// the client sees stuck (`Timeout`) holds the group only until it would have
    /// finished, as the real one does finish eventually.
    pub(super) fn group_busy(&self, group_id: &str, now: Instant) -> bool {
        self.jobs.values().any(|j| {
            j.status == "Processing"
                && now < j.finish_at
                && matches!(
                    &j.effect,
                    Some(JobEffect::AddServers(g, _))
                        | Some(JobEffect::RemoveServers(g, _))
                        | Some(JobEffect::UpdateServers(g, _)) if g == group_id
                )
        })
    }

    pub(super) fn start_job(&mut self, action: &str, effect: JobEffect) -> String {
        let id = self.new_id("job");
        let settings = &mut self.jobs_settings;
        let outcome = if !settings.forced.is_empty() {
            settings.forced.remove(0)
        } else {
            let roll: f64 = rand::rng().random();
            if roll < settings.fail_rate {
                JobOutcome::Failed
            } else if roll < settings.fail_rate + settings.timeout_rate {
                JobOutcome::Timeout
            } else {
                JobOutcome::Succeeded
            }
        };
        let finish_at = Instant::now() + Duration::from_millis(settings.delay_ms);
        tracing::info!(job_id = %id, action, ?outcome, "job started");
        self.jobs.insert(
            id.clone(),
            Job {
                id: id.clone(),
                action: action.to_string(),
                status: "Processing".into(),
                outcome,
                finish_at,
                effect: Some(effect),
            },
        );
        id
    }
}
