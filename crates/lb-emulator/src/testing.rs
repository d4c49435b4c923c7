//! What every test that talks to the emulator needs, spelled once: the access key it
//! accepts by default, a client configuration pointed at it, the control endpoints, and
//! a load balancer spec with the two zones NLB requires. This crate's fidelity tests,
//! alibaba-lb's tests against the emulator and rollgate's e2e bed all use it, so a
//! change of the emulator's defaults is made here and nowhere else.
use std::sync::Arc;
use std::time::Duration;

use alibaba_lb::{
    new_client, AddressType, ClientConfig, CredentialProvider, Credentials, JobPolicy,
    ListenerProtocol, ListenerSpec, LoadBalancerBackends, LoadBalancerSpec, Product, RateLimit,
    RetryPolicy, Secret, StaticCredentials, ZoneVSwitch,
};
use serde_json::Value;

/// The access key the emulator accepts unless told otherwise (`EmulatorConfig`).
pub const KEY_ID: &str = "emulator-access-key-id";
pub const KEY_SECRET: &str = "emulator-access-key-secret";
/// The region the emulator answers for by default.
pub const REGION: &str = "cn-hangzhou";

pub fn credentials() -> Arc<dyn CredentialProvider> {
    credentials_with_secret(KEY_SECRET)
}

/// The default key id with `secret` (a wrong one tests signature refusals).
pub fn credentials_with_secret(secret: &str) -> Arc<dyn CredentialProvider> {
    Arc::new(StaticCredentials(Credentials {
        access_key_id: KEY_ID.into(),
        access_key_secret: Secret::new(secret),
        security_token: None,
    }))
}

/// A client configuration for the emulator at `endpoint` (`127.0.0.1:PORT`): every
/// service pointed at it, fast job polling, rate limits tests never reach (no per-action
/// quotas), and
/// `attempts` tries per call (1 when a refusal must come back as it is).
pub fn client_config(endpoint: &str, attempts: u32) -> ClientConfig {
    let mut config = ClientConfig::for_local_endpoint(REGION, endpoint);
    config.retry = RetryPolicy {
        max_attempts: attempts,
        base_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(80),
    };
    config.rate_limit = RateLimit {
        per_second: 2000.0,
        burst: 200,
    };
    // The emulator's limits are off unless a test turns them on: so are the client's.
    config.action_quotas = false;
    config.jobs = JobPolicy {
        poll_interval: Duration::from_millis(15),
        timeout: Duration::from_secs(5),
    };
    config
}

/// A client of `product` with [`client_config`] and the default key.
pub fn client(endpoint: &str, product: Product, attempts: u32) -> Arc<dyn LoadBalancerBackends> {
    new_client(product, &client_config(endpoint, attempts), credentials())
        .expect("a client for the emulator")
}

/// A control endpoint under `/_emulator/`: POST `body` as JSON, or GET without one.
/// Panics unless it answers 2xx.
pub async fn control(base_url: &str, path: &str, body: Option<Value>) -> Value {
    // The crate's own builder installs the TLS crypto provider; a bare reqwest client
    // panics when it is the first one built in the process.
    let http = alibaba_lb::http::build_http_client(Duration::from_secs(10)).expect("http");
    let url = format!("{base_url}/_emulator/{path}");
    let request = match body {
        Some(body) => http
            .post(url)
            .header("content-type", "application/json")
            .body(body.to_string()),
        None => http.get(url),
    };
    let response = request.send().await.expect("the emulator answers");
    assert!(
        response.status().is_success(),
        "control {path}: {}",
        response.status()
    );
    serde_json::from_slice(&response.bytes().await.expect("a body")).expect("JSON")
}

/// Two zones with a vSwitch each: NLB wants at least two.
pub fn two_zones() -> Vec<ZoneVSwitch> {
    ["h", "i"]
        .iter()
        .map(|z| ZoneVSwitch {
            zone_id: format!("{REGION}-{z}"),
            vswitch_id: format!("vsw-{z}"),
        })
        .collect()
}

/// A new Internet load balancer `name` in `vpc_id`, one TCP listener on port 80 that
/// forwards to a group named `group`.
pub fn spec(name: &str, vpc_id: &str, group: &str) -> LoadBalancerSpec {
    LoadBalancerSpec {
        clb_instance: Default::default(),
        tags: Default::default(),
        name: name.into(),
        existing_id: None,
        address_type: AddressType::Internet,
        vpc_id: Some(vpc_id.into()),
        zones: two_zones(),
        listeners: vec![ListenerSpec {
            port: 80,
            protocol: ListenerProtocol::Tcp,
            server_group_name: group.into(),
            former_group_name: None,
            settings: Default::default(),
        }],
    }
}
