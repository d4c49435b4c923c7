//! The rate limit of each API action, as this client keeps to it. Alibaba Cloud
//! limits every action on its own, per account and region ("flow control"); a client
//! that only paces a product as a whole either stays far below the quotas of most
//! actions or runs into the one of a busy action. The client holds a token bucket per
//! action, at [`CLIENT_SHARE`] of the quota, so it is never the cause of its own
//! throttling; a second client of the same account still can be, and its throttling
//! is counted per action ([`crate::transport::ActionCount`]).
//!
//! The quotas are the published ones where the API references give them, else the
//! published figure of the same product for the same kind of call (a read or a write),
//! as the emulator's fidelity table states (crates/lb-emulator/README.md, row 55). The
//! emulator keeps its own table on purpose: a test checks that no limit here exceeds
//! its. An account whose quotas were raised in Quota Center can turn this off
//! (`ClientConfig::action_quotas`) and keep only the product's rate limit.

use std::time::Duration;

use crate::config::{Product, Service};
use crate::retry::RateLimit;

/// The share of an action's quota the client allows itself: the rest is headroom for
/// calls made elsewhere with the same account (the console, another tool).
pub const CLIENT_SHARE: f64 = 0.9;

/// An action's quota: `calls` per `window`, per account and region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ActionQuota {
    pub calls: u32,
    pub window: Duration,
}

impl ActionQuota {
    const fn per_secs(calls: u32, secs: u64) -> Self {
        ActionQuota {
            calls,
            window: Duration::from_secs(secs),
        }
    }

    /// Calls per second the quota allows, over a long run.
    pub fn per_second(&self) -> f64 {
        self.calls as f64 / self.window.as_secs_f64()
    }

    /// The client's own limit: [`CLIENT_SHARE`] of the steady rate and of the burst.
    pub fn client_limit(&self) -> RateLimit {
        RateLimit {
            per_second: self.per_second() * CLIENT_SHARE,
            burst: ((self.calls as f64 * CLIENT_SHARE).floor() as u32).max(1),
        }
    }
}

/// Reads name the state of something; everything else changes it.
fn is_read(action: &str) -> bool {
    ["Describe", "Get", "List"]
        .iter()
        .any(|verb| action.starts_with(verb))
}

/// The quota of `action` of `service`.
pub fn quota_of(service: Service, action: &str) -> ActionQuota {
    match (service, action) {
        // Published: 10 calls per second (the NLB quota page).
        (Service::Nlb, "GetListenerHealthStatus") => ActionQuota::per_secs(10, 1),
        // Published for NLB's reads (20/s) and writes (200/60 s), CLB's listed writes
        // (90/60 s); the same figures stand in for the unlisted ones of each kind,
        // and the load balancers' read figure for ECS and VPC.
        (Service::Clb, a) if !is_read(a) => ActionQuota::per_secs(90, 60),
        (Service::Nlb, a) if !is_read(a) => ActionQuota::per_secs(200, 60),
        _ => ActionQuota::per_secs(20, 1),
    }
}

/// The actions one look at a listener's group makes, one call each: its backends,
/// their health, and which group the listener forwards to (`read_group` and
/// `listener_server_group`; CLB's listener read is per protocol, TCP's named here, all
/// four with the same quota).
pub fn look_actions(product: Product) -> [&'static str; 3] {
    match product {
        Product::Clb => [
            "DescribeVServerGroupAttribute",
            "DescribeHealthStatus",
            "DescribeLoadBalancerTCPListenerAttribute",
        ],
        Product::Nlb => [
            "ListServerGroupServers",
            "GetListenerHealthStatus",
            "ListListeners",
        ],
    }
}

/// Looks per second (at one listener each) the quotas of a look's actions allow over a
/// long run: the tightest of them, at the client's share.
pub fn looks_per_second(product: Product) -> f64 {
    look_actions(product)
        .iter()
        .map(|action| quota_of(product.into(), action).client_limit().per_second)
        .fold(f64::INFINITY, f64::min)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_of_each_product_get_their_figure() {
        let q = |service, action| quota_of(service, action);
        assert_eq!(
            q(Service::Clb, "DescribeHealthStatus"),
            ActionQuota::per_secs(20, 1)
        );
        assert_eq!(
            q(Service::Clb, "AddVServerGroupBackendServers"),
            ActionQuota::per_secs(90, 60)
        );
        assert_eq!(
            q(Service::Nlb, "GetListenerHealthStatus"),
            ActionQuota::per_secs(10, 1)
        );
        assert_eq!(
            q(Service::Nlb, "ListServerGroupServers"),
            ActionQuota::per_secs(20, 1)
        );
        assert_eq!(
            q(Service::Nlb, "AddServersToServerGroup"),
            ActionQuota::per_secs(200, 60)
        );
        assert_eq!(
            q(Service::Ecs, "DescribeNetworkInterfaces"),
            ActionQuota::per_secs(20, 1)
        );
    }

    #[test]
    fn a_look_is_paced_by_its_tightest_action() {
        // NLB: the health report's 10/s; CLB: its reads' 20/s.
        assert!((looks_per_second(Product::Nlb) - 9.0).abs() < 1e-9);
        assert!((looks_per_second(Product::Clb) - 18.0).abs() < 1e-9);
    }

    #[test]
    fn the_client_keeps_below_every_quota() {
        let limit = quota_of(Service::Nlb, "GetListenerHealthStatus").client_limit();
        assert_eq!(limit.burst, 9);
        assert!((limit.per_second - 9.0).abs() < 1e-9);
        let write = quota_of(Service::Clb, "CreateVServerGroup").client_limit();
        assert_eq!(write.burst, 81);
        assert!((write.per_second - 1.35).abs() < 1e-9);
    }
}
