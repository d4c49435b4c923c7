//! The call log: one record per cloud API call that passed the signature check
//! (admitted or throttled), with the load balancer, listener and server group it named,
//! read page by page through `GET /_emulator/call-log?since=N`.
//!
//! `GET /_emulator/calls` counts calls per action for the whole run; a fleet bench also
//! needs them per load balancer and in time (how long a Service waited between two
//! health reads, calls in the busiest second), which counts cannot give.

use serde::Serialize;
use serde_json::{json, Value};

/// Records kept at most (about 200 bytes each): a bench at 100 calls/s fills this in
/// over five hours. Later calls are counted in `dropped`, so a reader sees the log is
/// incomplete instead of reading a silently short one.
pub const CAPACITY: usize = 2_000_000;
/// Records one `GET /_emulator/call-log` answers at most.
pub const PAGE: usize = 50_000;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CallRecord {
    /// Unix time in seconds (milliseconds precision), the clock of the timeline.
    pub at: f64,
    pub product: &'static str,
    pub action: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_balancer_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listener_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_group_id: Option<String>,
    /// Refused by the API rate limits (`Throttling.User`).
    pub throttled: bool,
}

impl CallRecord {
    /// A record of `action` of `product` at `at`, with the ids its parameters name
    /// (CLB: `LoadBalancerId`, `VServerGroupId`; NLB: `LoadBalancerId`, `ListenerId`,
    /// `ServerGroupId`); empty values are left out.
    pub fn new(
        at: f64,
        product: &'static str,
        action: &str,
        param: impl Fn(&str) -> Option<String>,
        throttled: bool,
    ) -> Self {
        let id = |names: &[&str]| {
            names
                .iter()
                .find_map(|n| param(n).filter(|v| !v.is_empty()))
        };
        CallRecord {
            at,
            product,
            action: action.to_string(),
            load_balancer_id: id(&["LoadBalancerId"]),
            listener_id: id(&["ListenerId"]),
            server_group_id: id(&["VServerGroupId", "ServerGroupId"]),
            throttled,
        }
    }
}

pub struct CallLog {
    records: Vec<CallRecord>,
    capacity: usize,
    dropped: u64,
}

impl Default for CallLog {
    fn default() -> Self {
        Self::with_capacity(CAPACITY)
    }
}

impl CallLog {
    pub fn with_capacity(capacity: usize) -> Self {
        CallLog {
            records: Vec::new(),
            capacity,
            dropped: 0,
        }
    }

    pub fn push(&mut self, record: CallRecord) {
        if self.records.len() < self.capacity {
            self.records.push(record);
        } else {
            self.dropped += 1;
        }
    }

    /// The records from index `since` on, at most `PAGE` of them; `next` is the index
    /// to ask for next (the total when the page reached the end).
    pub fn page(&self, since: usize) -> Value {
        let start = since.min(self.records.len());
        let end = (start + PAGE).min(self.records.len());
        json!({
            "calls": &self.records[start..end],
            "next": end,
            "total": self.records.len(),
            "dropped": self.dropped,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(at: f64, lb: &str) -> CallRecord {
        CallRecord::new(
            at,
            "slb",
            "DescribeHealthStatus",
            |name| (name == "LoadBalancerId").then(|| lb.to_string()),
            false,
        )
    }

    #[test]
    fn a_record_names_the_ids_of_its_parameters_and_skips_empty_ones() {
        let r = CallRecord::new(
            1.5,
            "nlb",
            "GetListenerHealthStatus",
            |name| match name {
                "ListenerId" => Some("lsn-1".into()),
                "ServerGroupId" => Some("sgp-1".into()),
                "LoadBalancerId" => Some(String::new()),
                _ => None,
            },
            true,
        );
        assert_eq!(r.listener_id.as_deref(), Some("lsn-1"));
        assert_eq!(r.server_group_id.as_deref(), Some("sgp-1"));
        assert_eq!(r.load_balancer_id, None);
        let v = serde_json::to_value(&r).unwrap();
        assert!(v.get("load_balancer_id").is_none());
        assert_eq!(v["throttled"], true);
    }

    #[test]
    fn pages_follow_on_from_next_and_stop_at_the_end() {
        let mut log = CallLog::default();
        for i in 0..3 {
            log.push(record(i as f64, &format!("lb-{i}")));
        }
        let first = log.page(0);
        assert_eq!(first["calls"].as_array().unwrap().len(), 3);
        assert_eq!(first["next"], 3);
        assert_eq!(first["calls"][2]["load_balancer_id"], "lb-2");
        let rest = log.page(2);
        assert_eq!(rest["calls"].as_array().unwrap().len(), 1);
        assert_eq!(rest["calls"][0]["at"], 2.0);
        let past = log.page(10);
        assert_eq!(past["calls"].as_array().unwrap().len(), 0);
        assert_eq!(past["next"], 3);
    }

    #[test]
    fn a_full_log_counts_what_it_drops() {
        let mut log = CallLog::with_capacity(2);
        for i in 0..3 {
            log.push(record(i as f64, "lb"));
        }
        let page = log.page(1);
        assert_eq!(page["total"], 2);
        assert_eq!(page["dropped"], 1);
        assert_eq!(page["calls"][0]["at"], 1.0);
    }
}
