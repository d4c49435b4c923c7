//! Account quotas ("general quotas" in Quota Center): how many instances an account may
//! have in a region and how many servers may be put where. The defaults are the
//! published ones (CLB and NLB quota pages); a test or bench that needs a larger
//! account sets its own (`POST /_emulator/quotas`, `--quota NAME=N`), as a user raises
//! theirs in Quota Center.
//!
//! The answer to a call over a quota is not published (the API references link to the
//! error center only): the emulator answers 400 `QuotaExceeded` with the quota's name
//! and value in the message, marked unverified in the fidelity table. rollgate reads
//! any error code that names a quota as one, so the exact code does not matter to it.

use std::collections::BTreeMap;

/// CLB instances per account and region (adjustable; default 30).
pub const CLB_INSTANCES: &str = "slb_quota_instances_num";
/// CLB instances one backend server (an ECS instance or ENI) may be attached to
/// (default 50; the CLB quota page's "times an ECS instance can be added to CLB
/// instances"; the name is the emulator's).
pub const CLB_INSTANCES_PER_SERVER: &str = "slb_quota_backendserver_attached_num";
/// NLB instances per account and region (adjustable; default 60).
pub const NLB_INSTANCES: &str = "nlb_quota_loadbalancers_num";
/// ECS instances, ENIs or IPs per NLB server group (adjustable; default 400).
pub const NLB_GROUP_SERVERS: &str = "nlb_quota_servergroup_noeci_servers_num";

/// The published defaults.
pub const DEFAULTS: [(&str, u32); 4] = [
    (CLB_INSTANCES, 30),
    (CLB_INSTANCES_PER_SERVER, 50),
    (NLB_INSTANCES, 60),
    (NLB_GROUP_SERVERS, 400),
];

/// The quotas in force, by name.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct AccountQuotas(BTreeMap<String, u32>);

impl Default for AccountQuotas {
    fn default() -> Self {
        Self(
            DEFAULTS
                .iter()
                .map(|(name, value)| (name.to_string(), *value))
                .collect(),
        )
    }
}

impl AccountQuotas {
    /// Sets `name` to `value`; only the quotas the emulator enforces have a name.
    pub fn set(&mut self, name: &str, value: u32) -> Result<(), String> {
        if !DEFAULTS.iter().any(|(known, _)| *known == name) {
            let known: Vec<&str> = DEFAULTS.iter().map(|(n, _)| *n).collect();
            return Err(format!(
                "{name:?} is not a quota the emulator enforces: {known:?}"
            ));
        }
        self.0.insert(name.to_string(), value);
        Ok(())
    }

    /// `NAME=N`, the form of `--quota`.
    pub fn set_from(&mut self, text: &str) -> Result<(), String> {
        let (name, value) = text
            .split_once('=')
            .ok_or_else(|| format!("{text:?} is not NAME=N"))?;
        let value = value
            .trim()
            .parse()
            .map_err(|_| format!("{text:?}: N is not a whole number"))?;
        self.set(name.trim(), value)
    }

    /// Every quota in force, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u32)> {
        self.0.iter().map(|(name, value)| (name.as_str(), *value))
    }

    /// Every quota set to `value` (a bench's "large account": no quota binds).
    pub fn all(value: u32) -> Self {
        Self(
            DEFAULTS
                .iter()
                .map(|(name, _)| (name.to_string(), value))
                .collect(),
        )
    }

    pub fn get(&self, name: &str) -> u32 {
        self.0[name]
    }

    /// Refuses when `in_use + adding` would pass the quota `name`: the refusal's
    /// message (the world answers it as 400 `QuotaExceeded`).
    pub fn check(
        &self,
        name: &str,
        in_use: usize,
        adding: usize,
        what: &str,
    ) -> Result<(), String> {
        let quota = self.get(name) as usize;
        if in_use + adding <= quota {
            return Ok(());
        }
        Err(format!(
            "The quota {name} ({quota}) is used up: {what} has {in_use}, and this request adds {adding}. Raise it in Quota Center."
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_published_values_and_only_known_quotas_can_be_set() {
        let mut quotas = AccountQuotas::default();
        assert_eq!(quotas.get(CLB_INSTANCES), 30);
        assert_eq!(quotas.get(NLB_INSTANCES), 60);
        assert_eq!(quotas.get(NLB_GROUP_SERVERS), 400);
        assert_eq!(quotas.get(CLB_INSTANCES_PER_SERVER), 50);
        quotas.set_from("slb_quota_instances_num=1000").unwrap();
        assert_eq!(quotas.get(CLB_INSTANCES), 1000);
        assert!(quotas.set_from("slb_quota_nothing=1").is_err());
        assert!(quotas.set_from("slb_quota_instances_num").is_err());
        assert!(quotas.check(CLB_INSTANCES, 999, 1, "the region").is_ok());
        let refused = quotas
            .check(CLB_INSTANCES, 1000, 1, "the region")
            .unwrap_err();
        assert!(
            refused.contains("slb_quota_instances_num (1000)"),
            "{refused}"
        );
    }
}
