//! Per-action API rate limits ("flow control"): the quota of every action the
//! alibaba-lb client calls, the token buckets that enforce them per (region, product,
//! action, AccessKey), and the per-action call and throttle counts that
//! `GET /_emulator/calls` reports.
//!
//! Alibaba Cloud states each quota as N calls per window (shown as "N/W(s)"),
//! counted per account, region and API. The emulator keys a bucket on the
//! AccessKeyId (its stand-in for the account) so that two keys are independent, as
//! two accounts are. Every action has a limit: the published one where the
//! references give it, else an assumption taken from the nearest published figure
//! of the same product and kind (a read or a write), marked [`Basis::Assumed`] with
//! its reason, so a reader can tell the two apart and a run against a real account
//! can settle the assumed ones.
//!
//! The real API is closer to a token bucket than to fixed windows (a fixed window lets
//! all N calls through at once each time it opens): a bucket holds N tokens (the
//! burst) and refills at N/W per second (the steady rate).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// A quota: at most `calls` calls in each window of `window`, as a bucket of `calls`
/// tokens refilled at `calls / window`.
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

    /// Tokens added per second.
    pub fn per_second(&self) -> f64 {
        self.calls as f64 / self.window.as_secs_f64()
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

/// Where a limit comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Basis {
    /// Read in a published quota table or API reference page (the URL).
    Published(&'static str),
    /// Not published in the references searched: the stated assumption.
    Assumed(&'static str),
}

/// One row of the quota table: the product (`slb`, `nlb`, `ecs`, `vpc`), the action,
/// its limit, and where the limit comes from.
pub struct QuotaRow {
    pub product: &'static str,
    pub action: &'static str,
    pub limit: Limit,
    pub basis: Basis,
}

/// The published quota tables (Quota Center's defaults), per product.
const CLB_QUOTA_TABLE: &str =
    "https://www.alibabacloud.com/help/en/slb/classic-load-balancer/developer-reference/api-slb-2014-05-15-quota";
const NLB_QUOTA_TABLE: &str =
    "https://www.alibabacloud.com/help/en/slb/network-load-balancer/developer-reference/api-nlb-2022-04-30-quota";
const CLB_CREATE_VSERVER_GROUP: &str =
    "https://api.aliyun.com/document/Slb/2014-05-15/CreateVServerGroup";

/// The assumptions, one per kind, each from the nearest published figure.
const CLB_WRITE: &str = "assumed: 90/60 s, the figure T-CLB publishes for the CLB writes it lists";
const CLB_READ: &str =
    "assumed: 20/1 s, the figure T-NLB publishes for most reads (T-CLB lists no read)";
const NLB_WRITE: &str = "assumed: 200/60 s, the figure T-NLB publishes for most writes";
const NLB_READ: &str = "assumed: 20/1 s, the figure T-NLB publishes for most reads";
const OTHER_READ: &str =
    "assumed: 20/1 s, the load balancers' read figure (no ECS or VPC figure found)";

const fn row(
    product: &'static str,
    action: &'static str,
    calls: u32,
    secs: u64,
    basis: Basis,
) -> QuotaRow {
    QuotaRow {
        product,
        action,
        limit: Limit::per_secs(calls, secs),
        basis,
    }
}

const fn clb_write(action: &'static str) -> QuotaRow {
    row("slb", action, 90, 60, Basis::Assumed(CLB_WRITE))
}

const fn clb_read(action: &'static str) -> QuotaRow {
    row("slb", action, 20, 1, Basis::Assumed(CLB_READ))
}

const fn nlb_write(action: &'static str) -> QuotaRow {
    row("nlb", action, 200, 60, Basis::Assumed(NLB_WRITE))
}

const fn nlb_read(action: &'static str) -> QuotaRow {
    row("nlb", action, 20, 1, Basis::Assumed(NLB_READ))
}

const fn published(
    product: &'static str,
    action: &'static str,
    calls: u32,
    secs: u64,
    source: &'static str,
) -> QuotaRow {
    row(product, action, calls, secs, Basis::Published(source))
}

/// Every action the emulator answers (those the alibaba-lb client calls, and the
/// access-control lists tests make), with its quota.
pub const QUOTAS: &[QuotaRow] = &[
    // CLB (SLB 2014-05-15)
    clb_write("CreateLoadBalancer"),
    clb_write("DeleteLoadBalancer"),
    clb_read("DescribeLoadBalancerAttribute"),
    clb_write("CreateLoadBalancerTCPListener"),
    clb_write("CreateLoadBalancerUDPListener"),
    clb_write("CreateLoadBalancerHTTPListener"),
    clb_write("CreateLoadBalancerHTTPSListener"),
    clb_write("SetLoadBalancerTCPListenerAttribute"),
    clb_write("SetLoadBalancerUDPListenerAttribute"),
    clb_write("SetLoadBalancerHTTPListenerAttribute"),
    clb_write("SetLoadBalancerHTTPSListenerAttribute"),
    clb_read("DescribeLoadBalancerTCPListenerAttribute"),
    clb_read("DescribeLoadBalancerUDPListenerAttribute"),
    clb_read("DescribeLoadBalancerHTTPListenerAttribute"),
    clb_read("DescribeLoadBalancerHTTPSListenerAttribute"),
    published("slb", "StartLoadBalancerListener", 90, 60, CLB_QUOTA_TABLE),
    clb_write("DeleteLoadBalancerListener"),
    published(
        "slb",
        "CreateVServerGroup",
        90,
        60,
        CLB_CREATE_VSERVER_GROUP,
    ),
    clb_write("DeleteVServerGroup"),
    clb_read("DescribeVServerGroups"),
    clb_read("DescribeVServerGroupAttribute"),
    clb_write("AddVServerGroupBackendServers"),
    published(
        "slb",
        "RemoveVServerGroupBackendServers",
        90,
        60,
        CLB_QUOTA_TABLE,
    ),
    clb_write("SetVServerGroupAttribute"),
    clb_read("DescribeHealthStatus"),
    clb_write("CreateAccessControlList"),
    clb_read("DescribeAccessControlListAttribute"),
    // NLB (2022-04-30)
    nlb_write("CreateLoadBalancer"),
    nlb_write("DeleteLoadBalancer"),
    nlb_read("GetLoadBalancerAttribute"),
    published("nlb", "GetJobStatus", 20, 1, NLB_QUOTA_TABLE),
    nlb_read("ListListeners"),
    published("nlb", "CreateListener", 200, 60, NLB_QUOTA_TABLE),
    published("nlb", "DeleteListener", 200, 60, NLB_QUOTA_TABLE),
    published("nlb", "GetListenerHealthStatus", 10, 1, NLB_QUOTA_TABLE),
    published("nlb", "ListServerGroups", 20, 1, NLB_QUOTA_TABLE),
    nlb_write("CreateServerGroup"),
    published("nlb", "DeleteServerGroup", 200, 60, NLB_QUOTA_TABLE),
    published(
        "nlb",
        "UpdateServerGroupAttribute",
        200,
        60,
        NLB_QUOTA_TABLE,
    ),
    published("nlb", "ListServerGroupServers", 20, 1, NLB_QUOTA_TABLE),
    // "200/60 s, not adjustable" (the NLB quota page).
    published("nlb", "AddServersToServerGroup", 200, 60, NLB_QUOTA_TABLE),
    published(
        "nlb",
        "RemoveServersFromServerGroup",
        200,
        60,
        NLB_QUOTA_TABLE,
    ),
    nlb_write("UpdateServerGroupServersAttribute"),
    // ECS (2014-05-26) and VPC (2016-04-28)
    row(
        "ecs",
        "DescribeNetworkInterfaces",
        20,
        1,
        Basis::Assumed(OTHER_READ),
    ),
    row(
        "vpc",
        "DescribeVpcAttribute",
        20,
        1,
        Basis::Assumed(OTHER_READ),
    ),
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

/// A token bucket's level and when it was last refilled.
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// The limits in force and the buckets that enforce them.
pub struct RateLimiter {
    pub enabled: bool,
    /// Explicit limits by (product, action); they win over the table.
    overrides: BTreeMap<(String, String), Limit>,
    /// Keyed by (region, product, action, AccessKeyId).
    buckets: HashMap<(String, String, String, String), Bucket>,
    counts: BTreeMap<(String, String), Counts>,
    started: Instant,
}

impl RateLimiter {
    pub fn new(enabled: bool, overrides: BTreeMap<(String, String), Limit>) -> Self {
        Self {
            enabled,
            overrides,
            buckets: HashMap::new(),
            counts: BTreeMap::new(),
            started: Instant::now(),
        }
    }

    pub fn set_override(&mut self, key: (String, String), limit: Option<Limit>) {
        match limit {
            Some(limit) => self.overrides.insert(key, limit),
            None => self.overrides.remove(&key),
        };
        // A changed limit starts from a full bucket of its own burst.
        self.buckets.clear();
    }

    /// The limit in force for an action: an explicit one, else the table's.
    pub fn limit(&self, product: &str, action: &str) -> Option<Limit> {
        self.overrides
            .get(&(product.to_string(), action.to_string()))
            .copied()
            .or_else(|| {
                QUOTAS
                    .iter()
                    .find(|r| r.product == product && r.action == action)
                    .map(|r| r.limit)
            })
    }

    /// Counts the call and says whether it is inside its quota. A bucket starts full
    /// (`calls` tokens, the burst) and refills at `calls / window`; a call takes a
    /// token. A refused call takes none, so however hard a client retries, at most
    /// the burst plus the refill passes.
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
        let burst = limit.calls as f64;
        let bucket = self
            .buckets
            .entry((
                region.to_string(),
                product.to_string(),
                action.to_string(),
                account.to_string(),
            ))
            .or_insert(Bucket {
                tokens: burst,
                at: now,
            });
        if now > bucket.at {
            let added = now.duration_since(bucket.at).as_secs_f64() * limit.per_second();
            bucket.tokens = (bucket.tokens + added).min(burst);
            bucket.at = now;
        }
        let admitted = bucket.tokens >= 1.0;
        if admitted {
            bucket.tokens -= 1.0;
        } else {
            self.counts.entry(key).or_default().throttled += 1;
        }
        admitted
    }

    /// Whether the limit in force is the table's assumption (not published, not set).
    fn assumed(&self, product: &str, action: &str) -> bool {
        !self
            .overrides
            .contains_key(&(product.to_string(), action.to_string()))
            && QUOTAS.iter().any(|r| {
                r.product == product && r.action == action && matches!(r.basis, Basis::Assumed(_))
            })
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
                    "assumed": self.assumed(product, action),
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
    fn a_burst_of_n_passes_then_the_steady_rate() {
        let mut rl = limiter("3/2");
        let t0 = Instant::now();
        let admit = |rl: &mut RateLimiter, t| rl.admit(t, "slb", "DescribeHealthStatus", "r", "k");
        assert!((0..3).all(|_| admit(&mut rl, t0)));
        // 3 per 2 s refills one token every 667 ms: not yet at 600 ms, then one.
        assert!(!admit(&mut rl, t0 + Duration::from_millis(600)));
        assert!(admit(&mut rl, t0 + Duration::from_millis(700)));
        assert!(!admit(&mut rl, t0 + Duration::from_millis(700)));
        // A long pause refills up to the burst, never past it.
        let later = t0 + Duration::from_secs(60);
        assert!((0..3).all(|_| admit(&mut rl, later)));
        assert!(!admit(&mut rl, later));
        let snap = rl.snapshot(t0);
        assert_eq!(snap["actions"][0]["calls"], 10);
        assert_eq!(snap["actions"][0]["throttled"], 3);
        assert_eq!(snap["actions"][0]["limit"], "3/2(s)");
        assert_eq!(snap["actions"][0]["assumed"], false, "an explicit limit");
    }

    #[test]
    fn retries_do_not_drain_the_bucket() {
        let mut rl = limiter("1/1");
        let t0 = Instant::now();
        assert!(rl.admit(t0, "slb", "DescribeHealthStatus", "r", "k"));
        let refused = (1..=9)
            .filter(|i| {
                !rl.admit(
                    t0 + Duration::from_millis(i * 100),
                    "slb",
                    "DescribeHealthStatus",
                    "r",
                    "k",
                )
            })
            .count();
        assert_eq!(refused, 9);
        assert!(rl.admit(
            t0 + Duration::from_millis(1001),
            "slb",
            "DescribeHealthStatus",
            "r",
            "k"
        ));
    }

    #[test]
    fn region_account_and_action_are_independent() {
        let mut rl = limiter("1/60");
        let t = Instant::now();
        assert!(rl.admit(t, "slb", "DescribeHealthStatus", "r1", "k1"));
        assert!(!rl.admit(t, "slb", "DescribeHealthStatus", "r1", "k1"));
        assert!(rl.admit(t, "slb", "DescribeHealthStatus", "r2", "k1"));
        assert!(rl.admit(t, "slb", "DescribeHealthStatus", "r1", "k2"));
        // Another action has its own bucket (the table's 20/1 s for this read).
        assert!((0..20).all(|_| rl.admit(t, "slb", "DescribeVServerGroups", "r1", "k1")));
        assert!(!rl.admit(t, "slb", "DescribeVServerGroups", "r1", "k1"));
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
    fn the_table_covers_each_action_once_and_every_limit_says_where_it_comes_from() {
        let mut seen = std::collections::BTreeSet::new();
        for r in QUOTAS {
            assert!(seen.insert((r.product, r.action)), "{} twice", r.action);
            match r.basis {
                Basis::Published(url) => assert!(url.starts_with("https://"), "{}", r.action),
                Basis::Assumed(why) => assert!(why.starts_with("assumed: "), "{}", r.action),
            }
            assert!(
                r.limit.calls > 0 && !r.limit.window.is_zero(),
                "{}",
                r.action
            );
        }
        let rl = RateLimiter::new(true, BTreeMap::new());
        assert_eq!(rl.snapshot(Instant::now())["actions"], json!([]));
        assert!(rl.assumed("slb", "DescribeHealthStatus"));
        assert!(!rl.assumed("nlb", "GetListenerHealthStatus"));
    }

    #[test]
    fn parses_the_reference_notation() {
        assert_eq!(Limit::parse("90/60(s)"), Ok(Limit::per_secs(90, 60)));
        assert_eq!(Limit::parse("10/1"), Ok(Limit::per_secs(10, 1)));
        assert!(Limit::parse("0/1").is_err());
        assert!(parse_override("elb:X=1/1").is_err());
    }
}
