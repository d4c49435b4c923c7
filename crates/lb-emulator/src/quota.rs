//! Per-action API rate limits ("flow control"): the published quota of every action
//! the alibaba-lb client calls, the fixed windows that enforce them per (region,
//! product, action, AccessKey), and the per-action call and throttle counts that
//! `GET /_emulator/calls` reports.
//!
//! Alibaba Cloud states each quota as N calls per window (shown as "N/W(s)"),
//! counted per account, region and API. The emulator keys a window on the
//! AccessKeyId (its stand-in for the account) so that two keys are independent, as
//! two accounts are. Only published values are enforced: an action whose quota could
//! not be found has `published: None` and is unlimited unless a test or bench sets an
//! explicit limit for it (`--api-rate-limit`), so no number here is invented.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// A quota: at most `calls` calls in each window of `window`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    pub calls: u32,
    pub window: Duration,
}

impl Limit {
    pub const fn per_secs(calls: u32, secs: u64) -> Self {
        Self {
            calls,
            window: Duration::from_secs(secs),
        }
    }

    /// `N/W`, `N/W(s)` or `N/Ws`, the notation the API reference uses.
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = || format!("{text:?} is not N/SECONDS (e.g. 90/60)");
        let (n, w) = text.trim().split_once('/').ok_or_else(bad)?;
        let w = w.trim().trim_end_matches("(s)").trim_end_matches('s');
        let calls: u32 = n.trim().parse().map_err(|_| bad())?;
        let secs: u64 = w.trim().parse().map_err(|_| bad())?;
        if calls == 0 || secs == 0 {
            return Err(bad());
        }
        Ok(Self::per_secs(calls, secs))
    }
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}(s)", self.calls, self.window.as_secs())
    }
}

/// One row of the quota table: the product (`slb`, `nlb`, `ecs`, `vpc`), the action,
/// its published quota if one was found, and where it was read.
pub struct QuotaRow {
    pub product: &'static str,
    pub action: &'static str,
    pub published: Option<Limit>,
    pub source: &'static str,
}

const NOT_FOUND: &str = "not published in the references searched";

const fn row(product: &'static str, action: &'static str) -> QuotaRow {
    QuotaRow {
        product,
        action,
        published: None,
        source: NOT_FOUND,
    }
}

/// The published quota tables (Quota Center's defaults), per product.
const CLB_QUOTA_TABLE: &str =
    "https://www.alibabacloud.com/help/en/slb/classic-load-balancer/developer-reference/api-slb-2014-05-15-quota";
const NLB_QUOTA_TABLE: &str =
    "https://www.alibabacloud.com/help/en/slb/network-load-balancer/developer-reference/api-nlb-2022-04-30-quota";

const fn published(
    product: &'static str,
    action: &'static str,
    calls: u32,
    secs: u64,
    source: &'static str,
) -> QuotaRow {
    QuotaRow {
        product,
        action,
        published: Some(Limit::per_secs(calls, secs)),
        source,
    }
}

/// Every action the alibaba-lb client calls (crates/alibaba-lb/src), with its quota.
pub const QUOTAS: &[QuotaRow] = &[
    // CLB (SLB 2014-05-15)
    row("slb", "CreateLoadBalancer"),
    row("slb", "DeleteLoadBalancer"),
    row("slb", "DescribeLoadBalancerAttribute"),
    row("slb", "CreateLoadBalancerTCPListener"),
    row("slb", "CreateLoadBalancerUDPListener"),
    row("slb", "CreateLoadBalancerHTTPListener"),
    row("slb", "CreateLoadBalancerHTTPSListener"),
    row("slb", "SetLoadBalancerTCPListenerAttribute"),
    row("slb", "SetLoadBalancerUDPListenerAttribute"),
    row("slb", "SetLoadBalancerHTTPListenerAttribute"),
    row("slb", "SetLoadBalancerHTTPSListenerAttribute"),
    row("slb", "DescribeLoadBalancerTCPListenerAttribute"),
    row("slb", "DescribeLoadBalancerUDPListenerAttribute"),
    row("slb", "DescribeLoadBalancerHTTPListenerAttribute"),
    row("slb", "DescribeLoadBalancerHTTPSListenerAttribute"),
    published("slb", "StartLoadBalancerListener", 90, 60, CLB_QUOTA_TABLE),
    row("slb", "DeleteLoadBalancerListener"),
    QuotaRow {
        product: "slb",
        action: "CreateVServerGroup",
        published: Some(Limit::per_secs(90, 60)),
        source: "https://api.aliyun.com/document/Slb/2014-05-15/CreateVServerGroup",
    },
    row("slb", "DeleteVServerGroup"),
    row("slb", "DescribeVServerGroups"),
    row("slb", "DescribeVServerGroupAttribute"),
    row("slb", "AddVServerGroupBackendServers"),
    published(
        "slb",
        "RemoveVServerGroupBackendServers",
        90,
        60,
        CLB_QUOTA_TABLE,
    ),
    row("slb", "SetVServerGroupAttribute"),
    row("slb", "DescribeHealthStatus"),
    // NLB (2022-04-30)
    row("nlb", "CreateLoadBalancer"),
    row("nlb", "DeleteLoadBalancer"),
    row("nlb", "GetLoadBalancerAttribute"),
    published("nlb", "GetJobStatus", 20, 1, NLB_QUOTA_TABLE),
    row("nlb", "ListListeners"),
    published("nlb", "CreateListener", 200, 60, NLB_QUOTA_TABLE),
    published("nlb", "DeleteListener", 200, 60, NLB_QUOTA_TABLE),
    QuotaRow {
        product: "nlb",
        action: "GetListenerHealthStatus",
        published: Some(Limit::per_secs(10, 1)),
        source: NLB_QUOTA_TABLE,
    },
    published("nlb", "ListServerGroups", 20, 1, NLB_QUOTA_TABLE),
    row("nlb", "CreateServerGroup"),
    published("nlb", "DeleteServerGroup", 200, 60, NLB_QUOTA_TABLE),
    published(
        "nlb",
        "UpdateServerGroupAttribute",
        200,
        60,
        NLB_QUOTA_TABLE,
    ),
    published("nlb", "ListServerGroupServers", 20, 1, NLB_QUOTA_TABLE),
    row("nlb", "AddServersToServerGroup"),
    published(
        "nlb",
        "RemoveServersFromServerGroup",
        200,
        60,
        NLB_QUOTA_TABLE,
    ),
    row("nlb", "UpdateServerGroupServersAttribute"),
    // ECS (2014-05-26) and VPC (2016-04-28)
    row("ecs", "DescribeNetworkInterfaces"),
    row("vpc", "DescribeVpcAttribute"),
];

/// `product:Action=N/W`, one explicit limit (for an action with no published quota,
/// or to tighten one in a test).
pub fn parse_override(text: &str) -> Result<((String, String), Limit), String> {
    let bad =
        || format!("{text:?} is not PRODUCT:Action=N/SECONDS (e.g. slb:DescribeHealthStatus=10/1)");
    let (key, limit) = text.split_once('=').ok_or_else(bad)?;
    let (product, action) = key.split_once(':').ok_or_else(bad)?;
    if !["slb", "nlb", "ecs", "vpc"].contains(&product) || action.is_empty() {
        return Err(bad());
    }
    Ok(((product.into(), action.into()), Limit::parse(limit)?))
}

#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    calls: u64,
    throttled: u64,
}

struct Window {
    started: Instant,
    admitted: u32,
}

/// The limits in force and the windows that enforce them.
pub struct RateLimiter {
    pub enabled: bool,
    /// Explicit limits by (product, action); they win over the published table.
    overrides: BTreeMap<(String, String), Limit>,
    /// Keyed by (region, product, action, AccessKeyId).
    windows: HashMap<(String, String, String, String), Window>,
    counts: BTreeMap<(String, String), Counts>,
    started: Instant,
}

impl RateLimiter {
    pub fn new(enabled: bool, overrides: BTreeMap<(String, String), Limit>) -> Self {
        Self {
            enabled,
            overrides,
            windows: HashMap::new(),
            counts: BTreeMap::new(),
            started: Instant::now(),
        }
    }

    pub fn set_override(&mut self, key: (String, String), limit: Option<Limit>) {
        match limit {
            Some(limit) => self.overrides.insert(key, limit),
            None => self.overrides.remove(&key),
        };
    }

    /// The limit in force for an action: an explicit one, else the published one.
    pub fn limit(&self, product: &str, action: &str) -> Option<Limit> {
        self.overrides
            .get(&(product.to_string(), action.to_string()))
            .copied()
            .or_else(|| {
                QUOTAS
                    .iter()
                    .find(|r| r.product == product && r.action == action)
                    .and_then(|r| r.published)
            })
    }

    /// Counts the call and says whether it is inside its quota. A refused call does
    /// not use up the window (only admitted calls count), so exactly `calls` calls
    /// pass in each window however hard a client retries.
    pub fn admit(
        &mut self,
        now: Instant,
        product: &str,
        action: &str,
        region: &str,
        account: &str,
    ) -> bool {
        let key = (product.to_string(), action.to_string());
        self.counts.entry(key.clone()).or_default().calls += 1;
        let limit = match (self.enabled, self.limit(product, action)) {
            (true, Some(limit)) => limit,
            _ => return true,
        };
        let window = self
            .windows
            .entry((
                region.to_string(),
                product.to_string(),
                action.to_string(),
                account.to_string(),
            ))
            .or_insert(Window {
                started: now,
                admitted: 0,
            });
        if now.duration_since(window.started) >= limit.window {
            window.started = now;
            window.admitted = 0;
        }
        let admitted = window.admitted < limit.calls;
        if admitted {
            window.admitted += 1;
        } else {
            self.counts.entry(key).or_default().throttled += 1;
        }
        admitted
    }

    /// `GET /_emulator/calls`: calls and throttled calls per action since start,
    /// with the limit in force, so a bench can report calls per second by action
    /// against the limits.
    pub fn snapshot(&self, now: Instant) -> Value {
        let actions: Vec<Value> = self
            .counts
            .iter()
            .map(|((product, action), c)| {
                json!({
                    "product": product,
                    "action": action,
                    "calls": c.calls,
                    "throttled": c.throttled,
                    "limit": self.limit(product, action).map(|l| l.to_string()),
                })
            })
            .collect();
        json!({
            "enabled": self.enabled,
            "elapsed_secs": now.duration_since(self.started).as_secs_f64(),
            "actions": actions,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(limit: &str) -> RateLimiter {
        let (key, limit) = parse_override(&format!("slb:DescribeHealthStatus={limit}")).unwrap();
        RateLimiter::new(true, BTreeMap::from([(key, limit)]))
    }

    #[test]
    fn exactly_n_calls_pass_in_a_window_and_the_window_resets() {
        let mut rl = limiter("3/2");
        let t0 = Instant::now();
        let admit = |rl: &mut RateLimiter, t| rl.admit(t, "slb", "DescribeHealthStatus", "r", "k");
        assert!((0..3).all(|_| admit(&mut rl, t0)));
        assert!(!admit(&mut rl, t0 + Duration::from_millis(1999)));
        assert!(admit(&mut rl, t0 + Duration::from_secs(2)));
        let snap = rl.snapshot(t0);
        assert_eq!(snap["actions"][0]["calls"], 5);
        assert_eq!(snap["actions"][0]["throttled"], 1);
        assert_eq!(snap["actions"][0]["limit"], "3/2(s)");
    }

    #[test]
    fn region_account_and_action_are_independent() {
        let mut rl = limiter("1/60");
        let t = Instant::now();
        assert!(rl.admit(t, "slb", "DescribeHealthStatus", "r1", "k1"));
        assert!(!rl.admit(t, "slb", "DescribeHealthStatus", "r1", "k1"));
        assert!(rl.admit(t, "slb", "DescribeHealthStatus", "r2", "k1"));
        assert!(rl.admit(t, "slb", "DescribeHealthStatus", "r1", "k2"));
        // An action with no published quota and no override is not limited.
        assert!((0..1000).all(|_| rl.admit(t, "slb", "DescribeVServerGroups", "r1", "k1")));
    }

    #[test]
    fn off_admits_everything_but_still_counts() {
        let mut rl = RateLimiter::new(false, BTreeMap::new());
        let t = Instant::now();
        assert!((0..500).all(|_| rl.admit(t, "slb", "CreateVServerGroup", "r", "k")));
        assert_eq!(rl.snapshot(t)["actions"][0]["calls"], 500);
    }

    #[test]
    fn published_quotas_apply_without_overrides() {
        let mut rl = RateLimiter::new(true, BTreeMap::new());
        let t = Instant::now();
        assert!((0..90).all(|_| rl.admit(t, "slb", "CreateVServerGroup", "r", "k")));
        assert!(!rl.admit(t, "slb", "CreateVServerGroup", "r", "k"));
        assert!((0..10).all(|_| rl.admit(t, "nlb", "GetListenerHealthStatus", "r", "k")));
        assert!(!rl.admit(t, "nlb", "GetListenerHealthStatus", "r", "k"));
    }

    #[test]
    fn the_table_covers_each_action_once_and_every_value_has_a_source() {
        let mut seen = std::collections::BTreeSet::new();
        for r in QUOTAS {
            assert!(seen.insert((r.product, r.action)), "{} twice", r.action);
            assert_eq!(r.published.is_none(), r.source == NOT_FOUND, "{}", r.action);
        }
    }

    #[test]
    fn parses_the_reference_notation() {
        assert_eq!(Limit::parse("90/60(s)"), Ok(Limit::per_secs(90, 60)));
        assert_eq!(Limit::parse("10/1"), Ok(Limit::per_secs(10, 1)));
        assert!(Limit::parse("0/1").is_err());
        assert!(parse_override("elb:X=1/1").is_err());
    }
}
