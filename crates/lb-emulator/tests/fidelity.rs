//! One test per row of the fidelity table (README.md): each sends the request the
//! real API refuses and expects the error code and HTTP status it documents. Where
//! the alibaba-lb client can send the request (it is what rollgate sends), the test
//! goes through the client; otherwise it sends a raw signed request with the same
//! signer (`ApiClient`). Positive controls in the same tests show that the request
//! fixed as the reference says is accepted, so a test cannot pass by refusing all.

use std::sync::Arc;
use std::time::Duration;

use alibaba_lb::transport::ApiClient;
use alibaba_lb::*;
use lb_emulator::testing::{self, credentials};
use lb_emulator::{EmulatorConfig, RunningEmulator};
use serde_json::{json, Value};

/// One attempt: a refusal must come back as it is, not be retried.
fn config(emu: &RunningEmulator) -> ClientConfig {
    testing::client_config(&emu.endpoint(), 1)
}

struct Bed {
    emu: RunningEmulator,
}

impl Bed {
    async fn new() -> Self {
        let emu = lb_emulator::serve(EmulatorConfig {
            job_delay: Duration::from_millis(20),
            tick: Duration::from_millis(5),
            ..EmulatorConfig::default()
        })
        .await
        .unwrap();
        Bed { emu }
    }

    /// A raw signed call: every parameter in the query, as the SDKs send RPC calls.
    async fn call(&self, service: Service, action: &str, pairs: &[(&str, &str)]) -> Result<Value> {
        let api = ApiClient::new(&config(&self.emu), service, credentials()).unwrap();
        let mut query: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        query.push(("RegionId".into(), "cn-hangzhou".into()));
        Ok(api.call::<Value>(action, &query, &[]).await?.body)
    }

    /// A raw signed call without the `RegionId` that `call` adds.
    async fn call_without_region(
        &self,
        service: Service,
        action: &str,
        pairs: &[(&str, &str)],
    ) -> Result<Value> {
        let api = ApiClient::new(&config(&self.emu), service, credentials()).unwrap();
        let query: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Ok(api.call::<Value>(action, &query, &[]).await?.body)
    }

    /// A CLB instance (of `spec`; none: shared-resource) made with a raw call.
    async fn clb_instance(&self, spec: Option<&str>) -> String {
        let pairs: Vec<(&str, &str)> = spec.map(|s| ("LoadBalancerSpec", s)).into_iter().collect();
        let lb = self
            .call(Service::Clb, "CreateLoadBalancer", &pairs)
            .await
            .unwrap();
        lb["LoadBalancerId"].as_str().unwrap().to_string()
    }

    /// A raw `CreateVServerGroup` named `name` in `lb`.
    async fn vserver_group(&self, lb: &str, name: &str) -> Result<Value> {
        self.call(
            Service::Clb,
            "CreateVServerGroup",
            &[("LoadBalancerId", lb), ("VServerGroupName", name)],
        )
        .await
    }

    /// A raw CLB listener create (`action`, one per protocol) on `port` of `lb`, with
    /// `Bandwidth` -1 (no cap) and `extra` parameters.
    async fn clb_listener(
        &self,
        action: &str,
        lb: &str,
        port: &str,
        extra: &[(&str, &str)],
    ) -> Result<Value> {
        let mut pairs = vec![
            ("LoadBalancerId", lb),
            ("ListenerPort", port),
            ("Bandwidth", "-1"),
        ];
        pairs.extend_from_slice(extra);
        self.call(Service::Clb, action, &pairs).await
    }

    /// An `slb.s1.small` instance with a TCP and a UDP listener on port 53: the port
    /// whose calls must name the protocol.
    async fn clb_with_two_protocols_on_53(&self) -> String {
        let lb = self.clb_instance(Some("slb.s1.small")).await;
        for action in [
            "CreateLoadBalancerTCPListener",
            "CreateLoadBalancerUDPListener",
        ] {
            self.clb_listener(action, &lb, "53", &[]).await.unwrap();
        }
        lb
    }

    /// A raw `DescribeLoadBalancer<protocol>ListenerAttribute` of `port` on `lb`.
    async fn clb_listener_attribute(&self, protocol: &str, lb: &str, port: &str) -> Result<Value> {
        let action = format!("DescribeLoadBalancer{protocol}ListenerAttribute");
        self.call(
            Service::Clb,
            &action,
            &[("LoadBalancerId", lb), ("ListenerPort", port)],
        )
        .await
    }

    /// A raw `DescribeLoadBalancerAttribute` of `lb`.
    async fn clb_attribute(&self, lb: &str) -> Result<Value> {
        self.call(
            Service::Clb,
            "DescribeLoadBalancerAttribute",
            &[("LoadBalancerId", lb)],
        )
        .await
    }

    /// A raw `action` (add, remove) on the backend servers of CLB group `group`.
    async fn clb_servers(&self, action: &str, group: &str, servers: &[Value]) -> Result<Value> {
        let servers = serde_json::to_string(servers).unwrap();
        self.call(
            Service::Clb,
            action,
            &[("VServerGroupId", group), ("BackendServers", &servers)],
        )
        .await
    }

    /// Calls of `action` the emulator has answered so far.
    async fn calls(&self, action: &str) -> u64 {
        let state = testing::control(&self.emu.base_url(), "state", None).await;
        state["stats"]["per_action"][action].as_u64().unwrap_or(0)
    }

    async fn control(&self, path: &str, body: Value) -> Value {
        testing::control(&self.emu.base_url(), path, Some(body)).await
    }

    /// An ENI holding `ip` (in `vpc`, `status`); returns its id.
    async fn eni(&self, ip: &str, vpc: &str, status: &str) -> String {
        let eni = self
            .control(
                "enis",
                json!({"private_ips": [ip], "vpc_id": vpc, "status": status}),
            )
            .await;
        eni["network_interface_id"].as_str().unwrap().to_string()
    }

    async fn eci(&self, ip: &str, status: &str) -> String {
        let eci = self
            .control("ecis", json!({"ip": ip, "status": status}))
            .await;
        eci["container_group_id"].as_str().unwrap().to_string()
    }

    fn client(&self, product: Product, clb_spec: Option<&str>) -> Arc<dyn LoadBalancerBackends> {
        let mut config = config(&self.emu);
        config.clb_spec = clb_spec.map(str::to_string);
        new_client(product, &config, credentials()).unwrap()
    }

    /// A pay-by-spec load balancer (CLB: of `clb_spec`; none: without a spec, a
    /// shared-resource instance) with one TCP listener on port 80.
    async fn group(
        &self,
        product: Product,
        clb_spec: Option<&str>,
    ) -> (Arc<dyn LoadBalancerBackends>, ServerGroupRef) {
        let client = self.client(product, clb_spec);
        let mut spec = testing::spec(
            &format!("fidelity-{}", clb_spec.unwrap_or("shared")),
            lb_emulator::DEFAULT_VPC_ID,
            "k8s-80-fidelity",
        );
        // Pay-by-spec, asked for explicitly: the only way the client sends a spec.
        spec.clb_instance.charge_type = "PayBySpec".into();
        let lb = client.ensure_load_balancer(&spec).await.unwrap();
        (client, lb.listeners[0].clone())
    }
}

fn backend(kind: BackendType, server_id: &str, ip: &str, description: &str) -> Backend {
    Backend {
        key: BackendKey {
            server_id: server_id.into(),
            ip: ip.into(),
            port: 8080,
        },
        kind,
        weight: 100,
        description: description.into(),
    }
}

#[track_caller]
fn refused<T: std::fmt::Debug>(result: Result<T>, status: u16, code: &str) {
    match result {
        Err(Error::Api {
            status: s,
            code: c,
            message,
            ..
        }) => assert_eq!(
            (s, c.as_str()),
            (status, code),
            "refused for another reason: {message}"
        ),
        other => panic!("expected {code} (HTTP {status}), got {other:?}"),
    }
}

const ADD_SERVERS: &str = "AddVServerGroupBackendServers";

// ------------------------------------------------------------------ CLB

#[tokio::test]
async fn clb_add_refuses_type_ip() {
    let bed = Bed::new().await;
    let (client, group) = bed.group(Product::Clb, Some("slb.s1.small")).await;
    // What rollgate sends today: the pod IP as ServerId, Type ip.
    let pod = backend(BackendType::Ip, "10.0.1.5", "10.0.1.5", "k8s/80/web/ns/c1");
    refused(
        client.add_backends(&group, &[pod]).await,
        400,
        "BackendServer.InvalidType",
    );
    let eni = bed
        .eni("10.0.1.5", lb_emulator::DEFAULT_VPC_ID, "InUse")
        .await;
    let fixed = backend(BackendType::Eni, &eni, "10.0.1.5", "k8s/80/web/ns/c1");
    client.add_backends(&group, &[fixed]).await.unwrap();
}

#[tokio::test]
async fn clb_add_takes_at_most_20_backends_per_call() {
    let bed = Bed::new().await;
    let (_, group) = bed.group(Product::Clb, Some("slb.s1.small")).await;
    let mut items = vec![];
    for i in 0..21 {
        let ip = format!("10.0.2.{}", i + 1);
        let eni = bed.eni(&ip, lb_emulator::DEFAULT_VPC_ID, "InUse").await;
        items.push(json!({"ServerId": eni, "Type": "eni", "ServerIp": ip, "Port": "80"}));
    }
    let add = |items| bed.clb_servers(ADD_SERVERS, &group.server_group_id, items);
    refused(
        add(&items[..]).await,
        400,
        "InvalidParameter.BackendServers",
    );
    add(&items[..20]).await.unwrap();
}

#[tokio::test]
async fn clb_eni_and_eci_backends_need_server_ip() {
    let bed = Bed::new().await;
    let (_, group) = bed.group(Product::Clb, Some("slb.s1.small")).await;
    let eni = bed
        .eni("10.0.3.1", lb_emulator::DEFAULT_VPC_ID, "InUse")
        .await;
    let without_ip = [json!({"ServerId": eni, "Type": "eni", "Port": 80})];
    refused(
        bed.clb_servers(ADD_SERVERS, &group.server_group_id, &without_ip)
            .await,
        400,
        "InvalidParameter.ServerIp",
    );
}

#[tokio::test]
async fn clb_eni_backends_need_a_high_performance_instance() {
    let bed = Bed::new().await;
    // No LoadBalancerSpec: a shared-resource instance.
    let (client, group) = bed.group(Product::Clb, None).await;
    let eni = bed
        .eni("10.0.4.1", lb_emulator::DEFAULT_VPC_ID, "InUse")
        .await;
    let b = backend(BackendType::Eni, &eni, "10.0.4.1", "");
    refused(
        client.add_backends(&group, std::slice::from_ref(&b)).await,
        400,
        "BackendServer.InvalidType",
    );
    let (client, group) = bed.group(Product::Clb, Some("slb.s2.small")).await;
    client.add_backends(&group, &[b]).await.unwrap();
}

#[tokio::test]
async fn clb_add_refuses_an_eni_that_does_not_exist() {
    let bed = Bed::new().await;
    let (client, group) = bed.group(Product::Clb, Some("slb.s1.small")).await;
    let ghost = backend(BackendType::Eni, "eni-nosuch", "10.0.5.1", "");
    refused(
        client.add_backends(&group, &[ghost]).await,
        404,
        "ResourceNotFound.vServers",
    );
}

#[tokio::test]
async fn clb_server_id_must_match_its_type() {
    let bed = Bed::new().await;
    let (_, group) = bed.group(Product::Clb, Some("slb.s1.small")).await;
    let wrong = [json!({"ServerId": "i-bp1", "Type": "eni", "ServerIp": "10.0.6.1", "Port": 80})];
    refused(
        bed.clb_servers(ADD_SERVERS, &group.server_group_id, &wrong)
            .await,
        400,
        "InvalidServerId.NotExist",
    );
}

#[tokio::test]
async fn clb_eci_backends_must_exist_and_run() {
    let bed = Bed::new().await;
    let (client, group) = bed.group(Product::Clb, Some("slb.s1.small")).await;
    refused(
        client
            .add_backends(
                &group,
                &[backend(BackendType::Eci, "eci-nosuch", "10.0.7.1", "")],
            )
            .await,
        400,
        "InvalidServerId.NotExist",
    );
    let pending = bed.eci("10.0.7.2", "Pending").await;
    refused(
        client
            .add_backends(
                &group,
                &[backend(BackendType::Eci, &pending, "10.0.7.2", "")],
            )
            .await,
        400,
        "InvalidParameter.BackendServers",
    );
    let running = bed.eci("10.0.7.3", "Running").await;
    client
        .add_backends(
            &group,
            &[backend(BackendType::Eci, &running, "10.0.7.3", "")],
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn clb_only_running_enis_can_be_added() {
    let bed = Bed::new().await;
    let (client, group) = bed.group(Product::Clb, Some("slb.s1.small")).await;
    let detached = bed
        .eni("10.0.8.1", lb_emulator::DEFAULT_VPC_ID, "Available")
        .await;
    refused(
        client
            .add_backends(
                &group,
                &[backend(BackendType::Eni, &detached, "10.0.8.1", "")],
            )
            .await,
        400,
        "InvalidParameter.BackendServers",
    );
}

#[tokio::test]
async fn clb_server_ip_must_be_on_the_eni() {
    let bed = Bed::new().await;
    let (client, group) = bed.group(Product::Clb, Some("slb.s1.small")).await;
    let eni = bed
        .eni("10.0.9.1", lb_emulator::DEFAULT_VPC_ID, "InUse")
        .await;
    refused(
        client
            .add_backends(&group, &[backend(BackendType::Eni, &eni, "10.0.9.2", "")])
            .await,
        400,
        "InvalidParameter.ServerIp",
    );
}

#[tokio::test]
async fn clb_description_is_1_to_80_of_letters_digits_dash_slash_dot_underscore() {
    let bed = Bed::new().await;
    let (client, group) = bed.group(Product::Clb, Some("slb.s1.small")).await;
    let eni = bed
        .eni("10.0.10.1", lb_emulator::DEFAULT_VPC_ID, "InUse")
        .await;
    for bad in ["k8s 80 web", "k8s/80/web:ns", &"a".repeat(81)] {
        refused(
            client
                .add_backends(&group, &[backend(BackendType::Eni, &eni, "10.0.10.1", bad)])
                .await,
            400,
            "InvalidParameter.Description",
        );
    }
    let ok = format!("k8s/80/web/default/{}", "c".repeat(60));
    client
        .add_backends(&group, &[backend(BackendType::Eni, &eni, "10.0.10.1", &ok)])
        .await
        .unwrap();
}

#[tokio::test]
async fn clb_weight_is_0_to_100_and_a_backend_is_given_once() {
    let bed = Bed::new().await;
    let (_, group) = bed.group(Product::Clb, Some("slb.s1.small")).await;
    let eni = bed
        .eni("10.0.11.1", lb_emulator::DEFAULT_VPC_ID, "InUse")
        .await;
    let item = |weight: &str| json!({"ServerId": eni, "Type": "eni", "ServerIp": "10.0.11.1", "Port": "80", "Weight": weight});
    let (bed, group) = (&bed, &group.server_group_id);
    let send =
        |servers: Vec<Value>| async move { bed.clb_servers(ADD_SERVERS, group, &servers).await };
    refused(
        send(vec![item("101")]).await,
        400,
        "InvalidParameter.BackendServers",
    );
    refused(
        send(vec![item("100"), item("50")]).await,
        400,
        "InvalidParameter.BackendServers",
    );
    send(vec![item("0")]).await.unwrap();
    // Already in the group.
    refused(
        send(vec![item("0")]).await,
        400,
        "BackendServer.AlreadyExist",
    );
}

#[tokio::test]
async fn clb_remove_ignores_backends_not_in_the_group() {
    let bed = Bed::new().await;
    let (_, group) = bed.group(Product::Clb, Some("slb.s1.small")).await;
    let (bed, group) = (&bed, &group.server_group_id);
    let remove = |servers: Value| async move {
        bed.clb_servers("RemoveVServerGroupBackendServers", group, &[servers])
            .await
    };
    remove(json!({"ServerId": "eni-gone", "Type": "eni", "ServerIp": "10.0.12.1", "Port": 80}))
        .await
        .unwrap();
    // ... but the type rules still hold.
    refused(
        remove(json!({"ServerId": "10.0.12.1", "Type": "ip", "ServerIp": "10.0.12.1", "Port": 80}))
            .await,
        400,
        "BackendServer.InvalidType",
    );
}

#[tokio::test]
async fn clb_set_weights_refuses_type_ip() {
    let bed = Bed::new().await;
    let (client, group) = bed.group(Product::Clb, Some("slb.s1.small")).await;
    let drained = Backend {
        weight: 0,
        ..backend(BackendType::Ip, "10.0.13.1", "10.0.13.1", "")
    };
    refused(
        client.set_weights(&group, &[drained]).await,
        400,
        "BackendServer.InvalidType",
    );
}

#[tokio::test]
async fn clb_group_and_instance_names_have_the_documented_shape() {
    let bed = Bed::new().await;
    let lb = bed.clb_instance(Some("slb.s1.small")).await;
    refused(
        bed.vserver_group(&lb, "k8s 80 web").await,
        400,
        "InvalidParameter.VServerGroupName",
    );
    refused(
        bed.call(
            Service::Clb,
            "CreateLoadBalancer",
            &[("LoadBalancerName", "1-starts-with-a-digit")],
        )
        .await,
        400,
        "InvalidParameter.LoadBalancerName",
    );
    refused(
        bed.call(
            Service::Clb,
            "CreateLoadBalancer",
            &[("LoadBalancerSpec", "slb.s9.huge")],
        )
        .await,
        400,
        "InvalidParameter.LoadBalancerSpec",
    );
}

#[tokio::test]
async fn clb_tcp_listener_needs_bandwidth_and_a_group_of_its_own_instance() {
    let bed = Bed::new().await;
    let lb = bed.clb_instance(Some("slb.s1.small")).await;
    let other = bed.clb_instance(Some("slb.s1.small")).await;
    let group = bed.vserver_group(&other, "g").await.unwrap();
    let group = group["VServerGroupId"].as_str().unwrap();
    let listener = |bandwidth: Option<&'static str>, group: &str| {
        let mut p = vec![
            ("LoadBalancerId".to_string(), lb.clone()),
            ("ListenerPort".to_string(), "80".to_string()),
            ("VServerGroupId".to_string(), group.to_string()),
        ];
        if let Some(b) = bandwidth {
            p.push(("Bandwidth".into(), b.into()));
        }
        p
    };
    let bed_ref = &bed;
    let send = |p: Vec<(String, String)>| async move {
        let pairs: Vec<(&str, &str)> = p.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        bed_ref
            .call(Service::Clb, "CreateLoadBalancerTCPListener", &pairs)
            .await
    };
    refused(send(listener(None, group)).await, 400, "MissingParameter");
    refused(
        send(listener(Some("0"), group)).await,
        400,
        "InvalidParameter.Bandwidth",
    );
    refused(
        send(listener(Some("-1"), group)).await,
        400,
        "InvalidParameter.VServerGroupId",
    );
}

#[tokio::test]
async fn clb_health_of_a_port_with_two_protocols_needs_the_protocol() {
    let bed = Bed::new().await;
    let lb = bed.clb_with_two_protocols_on_53().await;
    let lb = lb.as_str();
    refused(
        bed.call(
            Service::Clb,
            "DescribeHealthStatus",
            &[("LoadBalancerId", lb), ("ListenerPort", "53")],
        )
        .await,
        400,
        "TooManyListeners",
    );
    bed.call(
        Service::Clb,
        "DescribeHealthStatus",
        &[
            ("LoadBalancerId", lb),
            ("ListenerPort", "53"),
            ("ListenerProtocol", "udp"),
        ],
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn clb_delete_of_an_unknown_load_balancer_is_not_found() {
    let bed = Bed::new().await;
    let lb = bed.clb_instance(Some("slb.s1.small")).await;
    let delete = |id: String| {
        let bed = &bed;
        async move {
            bed.call(
                Service::Clb,
                "DeleteLoadBalancer",
                &[("LoadBalancerId", &id)],
            )
            .await
        }
    };
    refused(
        delete("lb-nosuch".into()).await,
        400,
        "InvalidLoadBalancerId.NotFound",
    );
    refused(
        bed.call(Service::Clb, "DeleteLoadBalancer", &[]).await,
        400,
        "MissingParameter",
    );
    delete(lb.clone()).await.unwrap();
    // Gone with its listeners: a second delete finds nothing ...
    refused(
        delete(lb.clone()).await,
        400,
        "InvalidLoadBalancerId.NotFound",
    );
    // ... and the client takes that as done (a retried delete is not a failure).
    let client = bed.client(Product::Clb, None);
    client.delete_load_balancer(&lb).await.unwrap();
}

#[tokio::test]
async fn clb_load_balancer_attribute_needs_a_known_id_and_reports_the_spec() {
    let bed = Bed::new().await;
    let bed = &bed;
    let describe = |id: String| async move { bed.clb_attribute(&id).await };
    refused(
        describe("lb-nosuch".into()).await,
        400,
        "InvalidLoadBalancerId.NotFound",
    );
    refused(
        bed.call(Service::Clb, "DescribeLoadBalancerAttribute", &[])
            .await,
        400,
        "MissingParameter",
    );
    // The spec and charge type tell whether ENI/ECI backends are accepted.
    let shared = describe(bed.clb_instance(None).await).await.unwrap();
    assert_eq!(shared["LoadBalancerSpec"], "");
    assert_eq!(shared["InstanceChargeType"], "PayBySpec");
    let guaranteed = describe(bed.clb_instance(Some("slb.s2.small")).await)
        .await
        .unwrap();
    assert_eq!(guaranteed["LoadBalancerSpec"], "slb.s2.small");
    // The client reads them when it attaches, so rollgate can tell a shared instance.
    for (spec, takes) in [(None, false), (Some("slb.s1.small"), true)] {
        let existing = bed.clb_instance(spec).await;
        let mut attach = bare_spec("attached");
        attach.existing_id = Some(existing);
        let lb = bed
            .client(Product::Clb, None)
            .ensure_load_balancer(&attach)
            .await
            .unwrap();
        let instance = lb.clb_instance.expect("CLB answers carry the instance");
        assert_eq!(
            instance.takes_pod_backends(),
            takes,
            "{}",
            instance.describe()
        );
    }
}

/// `DescribeLoadBalancerTCPListenerAttribute` and its UDP twin: the port is 1 to
/// 65535, and the listener of that port must be of the action's protocol.
#[tokio::test]
async fn clb_listener_attribute_needs_a_port_in_range_and_a_listener_of_its_protocol() {
    let bed = Bed::new().await;
    let lb = bed.clb_instance(Some("slb.s1.small")).await;
    bed.clb_listener("CreateLoadBalancerUDPListener", &lb, "53", &[])
        .await
        .unwrap();
    let attribute = |protocol, port| bed.clb_listener_attribute(protocol, &lb, port);
    for protocol in ["TCP", "UDP"] {
        refused(
            attribute(protocol, "0").await,
            400,
            "InvalidParameter.ListenerPort",
        );
        refused(
            attribute(protocol, "65536").await,
            400,
            "InvalidParameter.ListenerPort",
        );
    }
    refused(
        attribute("TCP", "53").await,
        400,
        "InvalidParameter.ListenerNotFound",
    );
    let udp = attribute("UDP", "53").await.unwrap();
    assert_eq!(udp["ListenerPort"], 53);
}

#[tokio::test]
async fn clb_vserver_groups_need_a_region_and_report_listeners_only_when_asked() {
    let bed = Bed::new().await;
    let (_, group) = bed.group(Product::Clb, Some("slb.s1.small")).await;
    let lb = group.load_balancer_id.as_str();
    refused(
        bed.call_without_region(
            Service::Clb,
            "DescribeVServerGroups",
            &[("LoadBalancerId", lb)],
        )
        .await,
        400,
        "MissingParameter",
    );
    refused(
        bed.call(
            Service::Clb,
            "DescribeVServerGroups",
            &[("LoadBalancerId", "lb-nosuch")],
        )
        .await,
        400,
        "InvalidLoadBalancerId.NotFound",
    );
    let listeners = |answer: &Value| {
        answer["VServerGroups"]["VServerGroup"][0]["AssociatedObjects"]["Listeners"]["Listener"]
            .as_array()
            .map_or(0, Vec::len)
    };
    let plain = bed
        .call(
            Service::Clb,
            "DescribeVServerGroups",
            &[("LoadBalancerId", lb)],
        )
        .await
        .unwrap();
    assert_eq!(listeners(&plain), 0, "IncludeListener defaults to false");
    let with = bed
        .call(
            Service::Clb,
            "DescribeVServerGroups",
            &[("LoadBalancerId", lb), ("IncludeListener", "true")],
        )
        .await
        .unwrap();
    assert_eq!(listeners(&with), 1);
}

#[tokio::test]
async fn clb_vserver_group_attribute_needs_a_region_and_a_known_group() {
    let bed = Bed::new().await;
    let (client, group) = bed.group(Product::Clb, Some("slb.s1.small")).await;
    let g = group.server_group_id.as_str();
    refused(
        bed.call_without_region(
            Service::Clb,
            "DescribeVServerGroupAttribute",
            &[("VServerGroupId", g)],
        )
        .await,
        400,
        "MissingParameter",
    );
    refused(
        bed.call(
            Service::Clb,
            "DescribeVServerGroupAttribute",
            &[("VServerGroupId", "rsp-nosuch")],
        )
        .await,
        400,
        "InvalidParameter.VServerGroupId.NotFound",
    );
    // The client sends the region: its reading of the group goes through.
    assert!(client.list_backends(&group).await.unwrap().is_empty());
}

#[tokio::test]
async fn clb_start_listener_of_a_port_with_two_protocols_needs_the_protocol() {
    let bed = Bed::new().await;
    let lb = bed.clb_with_two_protocols_on_53().await;
    let start = |pairs: Vec<(&'static str, &'static str)>| {
        let (bed, lb) = (&bed, lb.clone());
        async move {
            let mut all = vec![("LoadBalancerId", lb.as_str())];
            all.extend(pairs);
            bed.call(Service::Clb, "StartLoadBalancerListener", &all)
                .await
        }
    };
    refused(
        start(vec![("ListenerPort", "53")]).await,
        400,
        "TooManyListeners",
    );
    refused(
        start(vec![("ListenerPort", "0"), ("ListenerProtocol", "tcp")]).await,
        400,
        "InvalidParameter.ListenerPort",
    );
    start(vec![("ListenerPort", "53"), ("ListenerProtocol", "udp")])
        .await
        .unwrap();
}

// ------------------------------------------------------------------ NLB

/// An Instance-type NLB server group in `vpc` (raw: the client creates Ip groups).
async fn instance_group(bed: &Bed, vpc: &str) -> String {
    let created = bed
        .call(
            Service::Nlb,
            "CreateServerGroup",
            &[
                ("ServerGroupName", "k8s-instances"),
                ("ServerGroupType", "Instance"),
                ("VpcId", vpc),
            ],
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(80)).await;
    created["ServerGroupId"].as_str().unwrap().to_string()
}

async fn add_servers(bed: &Bed, group: &str, servers: &[(&str, &str, &str)]) -> Result<Value> {
    // (ServerId, ServerType, ServerIp)
    let mut owned: Vec<(String, String)> = vec![("ServerGroupId".into(), group.into())];
    for (i, (id, kind, ip)) in servers.iter().enumerate() {
        let n = i + 1;
        owned.push((format!("Servers.{n}.ServerId"), id.to_string()));
        owned.push((format!("Servers.{n}.ServerType"), kind.to_string()));
        if !ip.is_empty() {
            owned.push((format!("Servers.{n}.ServerIp"), ip.to_string()));
        }
        owned.push((format!("Servers.{n}.Port"), "8080".into()));
    }
    let pairs: Vec<(&str, &str)> = owned
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    bed.call(Service::Nlb, "AddServersToServerGroup", &pairs)
        .await
}

#[tokio::test]
async fn nlb_ip_groups_take_only_ip_servers() {
    let bed = Bed::new().await;
    let (client, group) = bed.group(Product::Nlb, None).await;
    let eni = bed
        .eni("10.1.0.1", lb_emulator::DEFAULT_VPC_ID, "InUse")
        .await;
    refused(
        client
            .add_backends(&group, &[backend(BackendType::Eni, &eni, "10.1.0.1", "")])
            .await,
        400,
        "Mismatch.ServerType",
    );
    let instances = instance_group(&bed, lb_emulator::DEFAULT_VPC_ID).await;
    refused(
        add_servers(&bed, &instances, &[("10.1.0.2", "Ip", "")]).await,
        400,
        "Mismatch.ServerType",
    );
    client
        .add_backends(
            &group,
            &[backend(BackendType::Ip, "10.1.0.1", "10.1.0.1", "")],
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn nlb_ip_servers_are_ip_addresses() {
    let bed = Bed::new().await;
    let (_, group) = bed.group(Product::Nlb, None).await;
    refused(
        add_servers(&bed, &group.server_group_id, &[("pod-a", "Ip", "")]).await,
        400,
        "IllegalParam.IP",
    );
    refused(
        add_servers(
            &bed,
            &group.server_group_id,
            &[("10.1.1.1", "Ip", "10.1.1.2")],
        )
        .await,
        400,
        "IllegalParam.IP",
    );
}

#[tokio::test]
async fn nlb_takes_at_most_200_servers_per_call_and_none_twice() {
    let bed = Bed::new().await;
    let (_, group) = bed.group(Product::Nlb, None).await;
    let ips: Vec<String> = (0..201)
        .map(|i| format!("10.1.{}.{}", 2 + i / 250, i % 250 + 1))
        .collect();
    let servers: Vec<(&str, &str, &str)> = ips.iter().map(|ip| (ip.as_str(), "Ip", "")).collect();
    refused(
        add_servers(&bed, &group.server_group_id, &servers).await,
        400,
        "IllegalParam",
    );
    refused(
        add_servers(
            &bed,
            &group.server_group_id,
            &[("10.1.9.1", "Ip", ""), ("10.1.9.1", "Ip", "")],
        )
        .await,
        400,
        "DuplicatedParam.Server",
    );
    add_servers(&bed, &group.server_group_id, &servers[..200])
        .await
        .unwrap();
}

/// The reference allows 200 servers per call; the spec (readiness-gates.md) says 40,
/// and the client keeps to the spec's number.
#[tokio::test]
async fn nlb_client_sends_at_most_40_servers_per_call() {
    let bed = Bed::new().await;
    let (client, group) = bed.group(Product::Nlb, None).await;
    let many: Vec<Backend> = (0..81)
        .map(|i| {
            let ip = format!("10.1.30.{}", i + 1);
            backend(BackendType::Ip, &ip, &ip, "")
        })
        .collect();
    client.add_backends(&group, &many).await.unwrap();
    // 81 servers: 40 + 40 + 1.
    assert_eq!(bed.calls("AddServersToServerGroup").await, 3);
    assert_eq!(client.list_backends(&group).await.unwrap().len(), 81);
}

#[tokio::test]
async fn nlb_description_is_2_to_256_of_the_documented_characters() {
    let bed = Bed::new().await;
    let (client, group) = bed.group(Product::Nlb, None).await;
    for bad in ["k8s 80", "k8s/80/web*", "x"] {
        refused(
            client
                .add_backends(
                    &group,
                    &[backend(BackendType::Ip, "10.1.10.1", "10.1.10.1", bad)],
                )
                .await,
            400,
            "IllegalParam.description",
        );
    }
    client
        .add_backends(
            &group,
            &[backend(
                BackendType::Ip,
                "10.1.10.1",
                "10.1.10.1",
                "k8s/80/web/ns/c1,a@b;c",
            )],
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn nlb_unknown_server_group_is_404() {
    let bed = Bed::new().await;
    refused(
        add_servers(&bed, "sgp-nosuch", &[("10.1.11.1", "Ip", "")]).await,
        404,
        "ResourceNotFound.serverGroup",
    );
}

#[tokio::test]
async fn nlb_eni_servers_must_exist_run_and_share_the_group_vpc() {
    let bed = Bed::new().await;
    bed.control(
        "vpcs",
        json!({"vpc_id": "vpc-other", "cidr_block": "192.168.0.0/16"}),
    )
    .await;
    let group = instance_group(&bed, lb_emulator::DEFAULT_VPC_ID).await;
    refused(
        add_servers(&bed, &group, &[("eni-nosuch", "Eni", "10.1.12.1")]).await,
        404,
        "ResourceNotFound.Eni",
    );
    let detached = bed
        .eni("10.1.12.2", lb_emulator::DEFAULT_VPC_ID, "Available")
        .await;
    refused(
        add_servers(&bed, &group, &[(&detached, "Eni", "10.1.12.2")]).await,
        400,
        "IncorrectStatus.Eni",
    );
    let elsewhere = bed.eni("192.168.1.3", "vpc-other", "InUse").await;
    refused(
        add_servers(&bed, &group, &[(&elsewhere, "Eni", "192.168.1.3")]).await,
        400,
        "Mismatch.VpcId",
    );
    refused(
        add_servers(&bed, &group, &[("eci-nosuch", "Eci", "10.1.12.4")]).await,
        404,
        "ResourceNotFound.Eci",
    );
    let good = bed
        .eni("10.1.12.5", lb_emulator::DEFAULT_VPC_ID, "InUse")
        .await;
    add_servers(&bed, &group, &[(&good, "Eni", "10.1.12.5")])
        .await
        .unwrap();
}

#[tokio::test]
async fn nlb_server_type_is_required_and_weight_is_0_to_100() {
    let bed = Bed::new().await;
    let (_, group) = bed.group(Product::Nlb, None).await;
    let g = group.server_group_id.as_str();
    refused(
        bed.call(
            Service::Nlb,
            "AddServersToServerGroup",
            &[("ServerGroupId", g), ("Servers.1.ServerId", "10.1.13.1")],
        )
        .await,
        400,
        "MissingParam.ServerType",
    );
    refused(
        bed.call(
            Service::Nlb,
            "AddServersToServerGroup",
            &[
                ("ServerGroupId", g),
                ("Servers.1.ServerId", "10.1.13.1"),
                ("Servers.1.ServerType", "Ip"),
                ("Servers.1.Weight", "101"),
            ],
        )
        .await,
        400,
        "IllegalParam",
    );
}

#[tokio::test]
async fn nlb_server_group_needs_a_vpc_and_a_documented_name_type_and_protocol() {
    let bed = Bed::new().await;
    let create = |pairs: &'static [(&'static str, &'static str)]| {
        let bed = &bed;
        async move { bed.call(Service::Nlb, "CreateServerGroup", pairs).await }
    };
    refused(
        create(&[("ServerGroupName", "k8s-80-web")]).await,
        400,
        "MissingParam.VpcId",
    );
    refused(
        create(&[
            ("ServerGroupName", "8-starts-with-digit"),
            ("VpcId", "vpc-emulator"),
        ])
        .await,
        400,
        "IllegalParam",
    );
    refused(
        create(&[
            ("ServerGroupName", "k8s-80-web"),
            ("VpcId", "vpc-emulator"),
            ("ServerGroupType", "Eni"),
        ])
        .await,
        400,
        "IllegalParam",
    );
    refused(
        create(&[
            ("ServerGroupName", "k8s-80-web"),
            ("VpcId", "vpc-emulator"),
            ("Protocol", "HTTP"),
        ])
        .await,
        400,
        "IllegalParam",
    );
    create(&[("ServerGroupName", "k8s-80-web"), ("VpcId", "vpc-emulator")])
        .await
        .unwrap();
}

#[tokio::test]
async fn nlb_listener_protocol_must_fit_the_group_protocol() {
    let bed = Bed::new().await;
    let (_, tcp_group) = bed.group(Product::Nlb, None).await;
    let lb = tcp_group.load_balancer_id.as_str();
    refused(
        bed.call(
            Service::Nlb,
            "CreateListener",
            &[
                ("LoadBalancerId", lb),
                ("ListenerProtocol", "UDP"),
                ("ListenerPort", "53"),
                ("ServerGroupId", &tcp_group.server_group_id),
            ],
        )
        .await,
        400,
        "IllegalParam",
    );
    refused(
        bed.call(
            Service::Nlb,
            "CreateListener",
            &[
                ("LoadBalancerId", lb),
                ("ListenerProtocol", "HTTP"),
                ("ListenerPort", "81"),
                ("ServerGroupId", &tcp_group.server_group_id),
            ],
        )
        .await,
        400,
        "IllegalParam",
    );
    bed.call(
        Service::Nlb,
        "CreateListener",
        &[
            ("LoadBalancerId", lb),
            ("ListenerProtocol", "TCPSSL"),
            ("ListenerPort", "443"),
            ("ServerGroupId", &tcp_group.server_group_id),
        ],
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn nlb_group_takes_one_server_change_at_a_time() {
    let bed = Bed::new().await;
    let (client, group) = bed.group(Product::Nlb, None).await;
    bed.control("jobs", json!({"delay_ms": 1500})).await;
    let g = group.server_group_id.as_str();
    add_servers(&bed, g, &[("10.1.14.1", "Ip", "")])
        .await
        .unwrap();
    refused(
        add_servers(&bed, g, &[("10.1.14.2", "Ip", "")]).await,
        400,
        "IncorrectStatus.serverGroup",
    );
    bed.control("jobs", json!({"delay_ms": 20})).await;
    tokio::time::sleep(Duration::from_millis(1600)).await;
    // The client waits for each job, so its batches never collide.
    let many: Vec<Backend> = (0..90)
        .map(|i| {
            let ip = format!("10.1.15.{}", i + 1);
            backend(BackendType::Ip, &ip, &ip, "")
        })
        .collect();
    client.add_backends(&group, &many).await.unwrap();
    assert_eq!(client.list_backends(&group).await.unwrap().len(), 91);
}

/// A raw NLB `CreateLoadBalancer`: a valid request without the parameters whose
/// names start with one of `drop`, and with `extra` replacing or adding values.
fn nlb_create_pairs<'a>(drop: &[&str], extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let base = [
        ("LoadBalancerName", "k8s-web"),
        ("LoadBalancerType", "Network"),
        ("AddressType", "Internet"),
        ("VpcId", "vpc-emulator"),
        ("ZoneMappings.1.ZoneId", "cn-hangzhou-h"),
        ("ZoneMappings.1.VSwitchId", "vsw-h"),
        ("ZoneMappings.2.ZoneId", "cn-hangzhou-i"),
        ("ZoneMappings.2.VSwitchId", "vsw-i"),
    ];
    let mut pairs: Vec<(&str, &str)> = base
        .into_iter()
        .filter(|(k, _)| !drop.iter().any(|d| k.starts_with(d)))
        .filter(|(k, _)| !extra.iter().any(|(e, _)| e == k))
        .collect();
    pairs.extend_from_slice(extra);
    pairs
}

/// `Prefix.1` .. `Prefix.n`, each with its own value.
fn numbered(prefix: &str, value: &str, n: usize) -> Vec<(String, String)> {
    (1..=n)
        .map(|i| (format!("{prefix}.{i}"), format!("{value}-{i}")))
        .collect()
}

fn as_pairs(owned: &[(String, String)]) -> Vec<(&str, &str)> {
    owned
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

#[tokio::test]
async fn nlb_create_load_balancer_needs_address_type_vpc_and_two_to_ten_zones() {
    let bed = Bed::new().await;
    let create = |pairs: Vec<(&'static str, &'static str)>| {
        let bed = &bed;
        async move { bed.call(Service::Nlb, "CreateLoadBalancer", &pairs).await }
    };
    // (parameters left out, parameters replaced or added, the code expected)
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 8] = [
        (&["AddressType"], &[], "MissingParam.AddressType"),
        (&[], &[("AddressType", "internet")], "IllegalParam"),
        (&["VpcId"], &[], "MissingParam.VpcId"),
        (&["ZoneMappings"], &[], "MissingParam.ZoneMappings"),
        (&["ZoneMappings.2"], &[], "IllegalParam"),
        (
            &["ZoneMappings.2.VSwitchId"],
            &[],
            "MissingParam.ZoneMappings.VSwitchId",
        ),
        (&[], &[("LoadBalancerName", "1-web")], "IllegalParam"),
        (&[], &[("LoadBalancerType", "Application")], "IllegalParam"),
    ];
    for (drop, extra, code) in cases {
        refused(create(nlb_create_pairs(drop, extra)).await, 400, code);
    }
    let eleven: Vec<(String, String)> = (1..=11)
        .flat_map(|i| {
            [
                (format!("ZoneMappings.{i}.ZoneId"), format!("zone-{i}")),
                (format!("ZoneMappings.{i}.VSwitchId"), format!("vsw-{i}")),
            ]
        })
        .collect();
    let mut pairs = nlb_create_pairs(&["ZoneMappings"], &[]);
    pairs.extend(as_pairs(&eleven));
    refused(
        bed.call(Service::Nlb, "CreateLoadBalancer", &pairs).await,
        400,
        "IllegalParam",
    );
    create(nlb_create_pairs(&[], &[])).await.unwrap();
    // What the client sends is accepted (the bed's load balancer goes through it).
    bed.group(Product::Nlb, None).await;
}

#[tokio::test]
async fn nlb_delete_of_an_unknown_load_balancer_is_404() {
    let bed = Bed::new().await;
    refused(
        bed.call(
            Service::Nlb,
            "DeleteLoadBalancer",
            &[("LoadBalancerId", "nlb-nosuch")],
        )
        .await,
        404,
        "ResourceNotFound.loadBalancer",
    );
    refused(
        bed.call(Service::Nlb, "DeleteLoadBalancer", &[]).await,
        400,
        "MissingParam.LoadBalancerId",
    );
    let (client, group) = bed.group(Product::Nlb, None).await;
    client
        .delete_load_balancer(&group.load_balancer_id)
        .await
        .unwrap();
    // Deleted: unknown now, and the client takes a second delete as done.
    refused(
        bed.call(
            Service::Nlb,
            "DeleteLoadBalancer",
            &[("LoadBalancerId", &group.load_balancer_id)],
        )
        .await,
        404,
        "ResourceNotFound.loadBalancer",
    );
    client
        .delete_load_balancer(&group.load_balancer_id)
        .await
        .unwrap();
}

#[tokio::test]
async fn nlb_load_balancer_attribute_of_an_unknown_id_is_404() {
    let bed = Bed::new().await;
    refused(
        bed.call(
            Service::Nlb,
            "GetLoadBalancerAttribute",
            &[("LoadBalancerId", "nlb-nosuch")],
        )
        .await,
        404,
        "ResourceNotFound.loadBalancer",
    );
    refused(
        bed.call(Service::Nlb, "GetLoadBalancerAttribute", &[])
            .await,
        400,
        "MissingParam.LoadBalancerId",
    );
    let (_, group) = bed.group(Product::Nlb, None).await;
    let attribute = bed
        .call(
            Service::Nlb,
            "GetLoadBalancerAttribute",
            &[("LoadBalancerId", &group.load_balancer_id)],
        )
        .await
        .unwrap();
    assert_eq!(attribute["LoadBalancerStatus"], "Active");
}

#[tokio::test]
async fn nlb_job_status_needs_a_known_job_id() {
    let bed = Bed::new().await;
    refused(
        bed.call(Service::Nlb, "GetJobStatus", &[]).await,
        400,
        "MissingParam.JobId",
    );
    refused(
        bed.call(Service::Nlb, "GetJobStatus", &[("JobId", "job-nosuch")])
            .await,
        404,
        "ResourceNotFound.job",
    );
    let (_, group) = bed.group(Product::Nlb, None).await;
    let job = add_servers(&bed, &group.server_group_id, &[("10.1.20.1", "Ip", "")])
        .await
        .unwrap();
    let status = bed
        .call(
            Service::Nlb,
            "GetJobStatus",
            &[("JobId", job["JobId"].as_str().unwrap())],
        )
        .await
        .unwrap();
    assert!(
        matches!(status["Status"].as_str(), Some("Processing" | "Succeeded")),
        "{status}"
    );
}

#[tokio::test]
async fn nlb_listener_health_needs_a_known_listener() {
    let bed = Bed::new().await;
    refused(
        bed.call(Service::Nlb, "GetListenerHealthStatus", &[]).await,
        400,
        "MissingParam.ListenerId",
    );
    refused(
        bed.call(
            Service::Nlb,
            "GetListenerHealthStatus",
            &[("ListenerId", "lsn-nosuch")],
        )
        .await,
        404,
        "ResourceNotFound.listener",
    );
    let (client, group) = bed.group(Product::Nlb, None).await;
    let listener = group.listener_id.clone().expect("NLB listeners have ids");
    refused(
        bed.call(
            Service::Nlb,
            "GetListenerHealthStatus",
            &[("ListenerId", &listener), ("MaxResults", "101")],
        )
        .await,
        400,
        "IllegalParam",
    );
    // The client's health reading of the group goes through.
    client.read_group(&group).await.unwrap();
}

/// The rules NLB's list calls share: `action` refuses 21 of each of `id_lists`
/// (`Prefix.N`, each a distinct `value-N`) and takes 20, and refuses each one of `bad`
/// (a parameter and a value out of its range) given alone.
async fn nlb_list_limits(
    bed: &Bed,
    action: &str,
    id_lists: [&str; 2],
    value: &str,
    bad: [(&str, &str); 2],
) {
    let list = |owned: Vec<(String, String)>| async move {
        bed.call(Service::Nlb, action, &as_pairs(&owned)).await
    };
    for prefix in id_lists {
        refused(list(numbered(prefix, value, 21)).await, 400, "IllegalParam");
        list(numbered(prefix, value, 20)).await.unwrap();
    }
    for (key, value) in bad {
        refused(list(one(key, value)).await, 400, "IllegalParam");
    }
}

/// One owned parameter.
fn one(key: &str, value: &str) -> Vec<(String, String)> {
    vec![(key.to_string(), value.to_string())]
}

#[tokio::test]
async fn nlb_list_listeners_takes_at_most_20_ids_and_a_documented_protocol() {
    let bed = Bed::new().await;
    let bad = [("ListenerProtocol", "HTTP"), ("MaxResults", "101")];
    nlb_list_limits(
        &bed,
        "ListListeners",
        ["LoadBalancerIds", "ListenerIds"],
        "id",
        bad,
    )
    .await;
    let (_, group) = bed.group(Product::Nlb, None).await;
    let found = bed
        .call(
            Service::Nlb,
            "ListListeners",
            &[("LoadBalancerIds.1", &group.load_balancer_id)],
        )
        .await
        .unwrap();
    assert_eq!(found["Listeners"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn nlb_list_server_groups_takes_at_most_20_ids_or_names_and_a_documented_type() {
    let bed = Bed::new().await;
    let bad = [("ServerGroupType", "Eni"), ("MaxResults", "0")];
    let id_lists = ["ServerGroupIds", "ServerGroupNames"];
    nlb_list_limits(&bed, "ListServerGroups", id_lists, "g", bad).await;
    let list = |owned: Vec<(String, String)>| {
        let bed = &bed;
        async move {
            bed.call(Service::Nlb, "ListServerGroups", &as_pairs(&owned))
                .await
        }
    };
    bed.group(Product::Nlb, None).await;
    let ip_groups = list(one("ServerGroupType", "Ip")).await.unwrap();
    assert_eq!(ip_groups["ServerGroups"].as_array().unwrap().len(), 1);
    let instance_groups = list(one("ServerGroupType", "Instance")).await.unwrap();
    assert_eq!(instance_groups["ServerGroups"].as_array().unwrap().len(), 0);
}

// ------------------------------------------------------------------ ECS / VPC

#[tokio::test]
async fn ecs_takes_at_most_100_private_ips_per_call_and_needs_a_region() {
    let bed = Bed::new().await;
    let names: Vec<String> = (1..=101).map(|i| format!("PrivateIpAddress.{i}")).collect();
    let ips: Vec<String> = (1..=101).map(|i| format!("10.2.0.{i}")).collect();
    let pairs: Vec<(&str, &str)> = names
        .iter()
        .zip(&ips)
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    refused(
        bed.call(Service::Ecs, "DescribeNetworkInterfaces", &pairs)
            .await,
        400,
        "InvalidParameter.PrivateIpAddress",
    );
    bed.call(Service::Ecs, "DescribeNetworkInterfaces", &pairs[..100])
        .await
        .unwrap();
    // Without RegionId (the raw call adds one; this one goes through a bare client).
    let api = ApiClient::new(&config(&bed.emu), Service::Ecs, credentials()).unwrap();
    refused(
        api.call::<Value>("DescribeNetworkInterfaces", &[], &[])
            .await
            .map(|a| a.body),
        400,
        "MissingParameter",
    );
}

#[tokio::test]
async fn vpc_attribute_of_an_unknown_vpc_is_404_and_vpc_id_is_required() {
    let bed = Bed::new().await;
    refused(
        bed.call(
            Service::Vpc,
            "DescribeVpcAttribute",
            &[("VpcId", "vpc-nosuch")],
        )
        .await,
        404,
        "InvalidVpcId.NotFound",
    );
    refused(
        bed.call(Service::Vpc, "DescribeVpcAttribute", &[]).await,
        400,
        "MissingParameter",
    );
}

// ------------------------------------------------- listener settings (rows 49-50)

/// An HTTP health check on port 80 and a drain of `drain` seconds.
fn checked(uri: &str, drain: u32) -> ListenerSettings {
    ListenerSettings {
        health_check: HealthCheck {
            kind: Some(HealthCheckType::Http),
            uri: Some(uri.into()),
            http_codes: vec!["http_2xx".into()],
            healthy_threshold: Some(3),
            interval_seconds: Some(5),
            connect_timeout_seconds: Some(4),
            ..Default::default()
        },
        drain: Some(ConnectionDrain {
            enabled: true,
            timeout_seconds: Some(drain),
        }),
        scheduler: Some("rr".into()),
        ..Default::default()
    }
}

/// The Service's load balancer with one TCP listener on port 80 of `settings`,
/// ensured through the client as rollgate does.
async fn ensure_with(
    client: &Arc<dyn LoadBalancerBackends>,
    existing: Option<String>,
    settings: ListenerSettings,
) -> LoadBalancer {
    // Two zones (cn-hangzhou-h and -i), which NLB needs.
    let mut spec = testing::spec(
        "fidelity-settings",
        lb_emulator::DEFAULT_VPC_ID,
        "k8s-80-settings",
    );
    spec.existing_id = existing;
    spec.listeners[0].settings = settings;
    client.ensure_load_balancer(&spec).await.unwrap()
}

/// A new Internet load balancer `name` in the default VPC, without zones or listeners.
fn bare_spec(name: &str) -> LoadBalancerSpec {
    let mut spec = testing::spec(name, lb_emulator::DEFAULT_VPC_ID, "");
    spec.zones.clear();
    spec.listeners.clear();
    spec
}

#[tokio::test]
async fn clb_listener_health_check_and_drain_are_checked_stored_and_set_again() {
    let bed = Bed::new().await;
    let lb = bed.clb_instance(Some("slb.s1.small")).await;
    let (bed, lb) = (&bed, &lb);
    let tcp = |extra: &[(&'static str, &'static str)]| {
        let extra = extra.to_vec();
        async move {
            bed.clb_listener("CreateLoadBalancerTCPListener", lb, "81", &extra)
                .await
        }
    };
    // (the parameter, a value out of range, the code expected)
    for (name, value, code) in [
        (
            "HealthCheckInterval",
            "51",
            "InvalidParameter.HealthCheckInterval",
        ),
        ("HealthyThreshold", "1", "InvalidParameter.HealthyThreshold"),
        (
            "HealthCheckConnectTimeout",
            "301",
            "InvalidParameter.HealthCheckConnectTimeout",
        ),
        (
            "HealthCheckURI",
            "healthz",
            "InvalidParameter.HealthCheckURI",
        ),
        (
            "HealthCheckHttpCode",
            "http_200",
            "InvalidParameter.HealthCheckHttpCode",
        ),
        (
            "ConnectionDrainTimeout",
            "901",
            "InvalidParameter.ConnectionDrainTimeout",
        ),
        // The switch on without its timeout.
        ("ConnectionDrain", "on", "MissingParameter"),
    ] {
        refused(tcp(&[(name, value)]).await, 400, code);
    }
    let udp = bed
        .clb_listener(
            "CreateLoadBalancerUDPListener",
            lb,
            "53",
            &[("HealthCheckURI", "/")],
        )
        .await;
    refused(udp, 400, "InvalidParameter.HealthCheckURI");
    // The positive control: the same values in range are taken.
    tcp(&[
        ("HealthCheckInterval", "50"),
        ("ConnectionDrain", "on"),
        ("ConnectionDrainTimeout", "900"),
    ])
    .await
    .unwrap();

    // Through the client: created with the settings, read back, changed, read back.
    let client = bed.client(Product::Clb, Some("slb.s1.small"));
    let made = ensure_with(&client, None, checked("/healthz", 60)).await;
    let (bed, id) = (&bed, &made.id);
    let describe = || async move { bed.clb_listener_attribute("TCP", id, "80").await.unwrap() };
    let read = describe().await;
    assert_eq!(read["HealthCheckType"], "http");
    assert_eq!(read["HealthCheckURI"], "/healthz");
    assert_eq!(read["HealthCheckHttpCode"], "http_2xx");
    assert_eq!(read["HealthyThreshold"], 3);
    assert_eq!(read["HealthCheckInterval"], 5);
    assert_eq!(read["HealthCheckConnectTimeout"], 4);
    assert_eq!(read["ConnectionDrain"], "on");
    assert_eq!(read["ConnectionDrainTimeout"], 60);
    assert_eq!(read["Scheduler"], "rr");
    ensure_with(&client, Some(made.id.clone()), checked("/ready", 120)).await;
    let read = describe().await;
    assert_eq!(
        read["HealthCheckURI"], "/ready",
        "a changed annotation reaches the listener"
    );
    assert_eq!(read["ConnectionDrainTimeout"], 120);
}

/// Row 51: HTTP and HTTPS listeners. Each refusal (a missing `HealthCheck` or
/// `StickySession`, HTTPS without a certificate or naming one the account does not
/// hold, a timeout out of range, a TCP listener's parameter) beside its positive
/// control; then through the client: an HTTPS listener with its certificate, the
/// HTTP check and its timeout, read back and set again.
#[tokio::test]
async fn clb_http_and_https_listeners_need_their_switch_and_a_held_certificate() {
    let bed = Bed::new().await;
    let lb = bed.clb_instance(Some("slb.s1.small")).await;
    bed.control("server-certificates", json!({"id": "cert-held"}))
        .await;
    let create = |action: &'static str, extra: &[(&'static str, &'static str)]| {
        let mut p = vec![("LoadBalancerId", lb.as_str()), ("ListenerPort", "443")];
        p.extend_from_slice(extra);
        let bed = &bed;
        async move { bed.call(Service::Clb, action, &p).await }
    };
    const HTTP: &str = "CreateLoadBalancerHTTPListener";
    const HTTPS: &str = "CreateLoadBalancerHTTPSListener";
    let base = [("HealthCheck", "on"), ("StickySession", "off")];
    refused(
        create(HTTP, &[("StickySession", "off")]).await,
        400,
        "MissingParameter",
    );
    refused(
        create(HTTP, &[("HealthCheck", "on")]).await,
        400,
        "MissingParameter",
    );
    refused(create(HTTPS, &base).await, 400, "MissingParameter");
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut p = base.to_vec();
        p.extend_from_slice(extra);
        p
    };
    refused(
        create(HTTPS, &with(&[("ServerCertificateId", "cert-unknown")])).await,
        400,
        "ServerCertificateId.NotFound",
    );
    refused(
        create(HTTP, &with(&[("ServerCertificateId", "cert-held")])).await,
        400,
        "InvalidParameter.ServerCertificateId",
    );
    refused(
        create(HTTP, &with(&[("HealthCheckTimeout", "301")])).await,
        400,
        "InvalidParameter.HealthCheckTimeout",
    );
    refused(
        create(HTTP, &with(&[("HealthCheckConnectTimeout", "5")])).await,
        400,
        "InvalidParameter.HealthCheckConnectTimeout",
    );
    // The positive control: the same calls with what they lacked are taken.
    create(
        HTTPS,
        &with(&[
            ("ServerCertificateId", "cert-held"),
            ("HealthCheckTimeout", "300"),
        ]),
    )
    .await
    .unwrap();
    let read = bed
        .clb_listener_attribute("HTTPS", &lb, "443")
        .await
        .unwrap();
    assert_eq!(read["ServerCertificateId"], "cert-held");
    assert_eq!(read["HealthCheckTimeout"], 300);
    assert_eq!(read["HealthCheck"], "on");

    // Through the client: an HTTPS listener on 80 with the HTTP check.
    let client = bed.client(Product::Clb, Some("slb.s1.small"));
    let https = |uri: &str, timeout: u32| {
        let mut settings = checked(uri, 60);
        settings.health_check.timeout_seconds = Some(timeout);
        settings.health_check.method = Some("GET".into());
        settings.server_certificate_id = Some("cert-held".into());
        settings
    };
    let spec = |existing: Option<String>, settings| {
        let mut spec = testing::spec(
            "fidelity-https",
            lb_emulator::DEFAULT_VPC_ID,
            "k8s-80-https",
        );
        spec.zones.clear();
        spec.existing_id = existing;
        spec.listeners[0].protocol = ListenerProtocol::Https;
        spec.listeners[0].settings = settings;
        spec
    };
    let made = client
        .ensure_load_balancer(&spec(None, https("/healthz", 7)))
        .await
        .unwrap();
    let (bed, id) = (&bed, &made.id);
    let describe = || async move { bed.clb_listener_attribute("HTTPS", id, "80").await.unwrap() };
    let read = describe().await;
    assert_eq!(read["ServerCertificateId"], "cert-held", "{read}");
    assert_eq!(read["HealthCheckURI"], "/healthz");
    assert_eq!(read["HealthCheckTimeout"], 7);
    assert_eq!(read["HealthCheckMethod"], "get");
    assert_eq!(read["HealthCheckHttpCode"], "http_2xx");
    assert_eq!(read["Scheduler"], "rr");
    assert_eq!(read["Status"], "running");
    assert_eq!(read["VServerGroupId"], made.listeners[0].server_group_id);
    client
        .ensure_load_balancer(&spec(Some(made.id.clone()), https("/ready", 9)))
        .await
        .unwrap();
    let read = describe().await;
    assert_eq!(read["HealthCheckURI"], "/ready", "set again");
    assert_eq!(read["HealthCheckTimeout"], 9);
    // The wiring reads HTTPS listeners (stale ones can be removed).
    let wiring = client.wiring(&made.id).await.unwrap().unwrap();
    assert_eq!(wiring.listeners[0].protocol, ListenerProtocol::Https);
}

#[tokio::test]
async fn nlb_server_group_health_check_and_drain_are_checked_stored_and_updated() {
    let bed = Bed::new().await;
    let create = |extra: &'static [(&'static str, &'static str)]| {
        let bed = &bed;
        async move {
            let mut p = vec![("ServerGroupName", "k8s-80-web"), ("VpcId", "vpc-emulator")];
            p.extend_from_slice(extra);
            bed.call(Service::Nlb, "CreateServerGroup", &p).await
        }
    };
    for extra in [
        &[("HealthCheckConfig.HealthCheckInterval", "51")][..],
        &[("HealthCheckConfig.HealthyThreshold", "11")],
        &[("HealthCheckConfig.HealthCheckType", "ICMP")],
        &[("HealthCheckConfig.HttpCheckMethod", "POST")],
        &[("HealthCheckConfig.HealthCheckHttpCode.1", "200")],
        &[("ConnectionDrainTimeout", "9")],
        &[("ConnectionDrainEnabled", "on")],
    ] {
        refused(create(extra).await, 400, "IllegalParam");
    }
    create(&[
        ("HealthCheckConfig.HealthCheckInterval", "50"),
        ("ConnectionDrainTimeout", "900"),
    ])
    .await
    .unwrap();

    let client = bed.client(Product::Nlb, None);
    let made = ensure_with(&client, None, checked("/healthz", 60)).await;
    let group_id = made.listeners[0].server_group_id.clone();
    let listed = || {
        let (bed, id) = (&bed, group_id.clone());
        async move {
            let page = bed
                .call(
                    Service::Nlb,
                    "ListServerGroups",
                    &[("ServerGroupIds.1", &id)],
                )
                .await
                .unwrap();
            page["ServerGroups"][0].clone()
        }
    };
    let group = listed().await;
    assert_eq!(group["HealthCheck"]["HealthCheckEnabled"], true);
    assert_eq!(group["HealthCheck"]["HealthCheckType"], "HTTP");
    assert_eq!(group["HealthCheck"]["HealthCheckUrl"], "/healthz");
    assert_eq!(
        group["HealthCheck"]["HealthCheckHttpCode"],
        json!(["http_2xx"])
    );
    assert_eq!(group["HealthCheck"]["HealthCheckConnectTimeout"], 4);
    assert_eq!(group["ConnectionDrainEnabled"], true);
    assert_eq!(group["ConnectionDrainTimeout"], 60);
    assert_eq!(group["Scheduler"], "rr");
    ensure_with(&client, Some(made.id.clone()), checked("/ready", 120)).await;
    let group = listed().await;
    assert_eq!(
        group["HealthCheck"]["HealthCheckUrl"], "/ready",
        "a changed annotation reaches the group"
    );
    assert_eq!(group["ConnectionDrainTimeout"], 120);
}

/// Every test the README's fidelity table names exists, so the table cannot point at
/// a test that was renamed or never written.
#[test]
fn the_fidelity_table_names_only_tests_that_exist() {
    let readme = include_str!("../README.md");
    let here = include_str!("fidelity.rs");
    let ecs_unit = include_str!("../src/world/ecs.rs");
    let rows: Vec<&str> = readme
        .lines()
        .filter(|l| l.starts_with("| ") && l.chars().nth(2).is_some_and(|c| c.is_ascii_digit()))
        .collect();
    assert!(rows.len() >= 45, "table rows: {}", rows.len());
    for row in rows {
        let last = row.trim_end_matches('|').rsplit('|').next().unwrap();
        let name = last.split('`').nth(1).expect("a test name in backticks");
        let name = name.rsplit("::").next().unwrap();
        let defined = format!("fn {name}(");
        assert!(
            here.contains(&defined) || ecs_unit.contains(&defined),
            "the table names {name}, which is not a test"
        );
    }
}

/// Every action the alibaba-lb client calls has a row of its own (its name in the
/// table's Action column), so a new call cannot slip in without its rules.
#[test]
fn the_fidelity_table_covers_every_action_the_client_calls() {
    let readme = include_str!("../README.md");
    let actions_column: String = readme
        .lines()
        .filter(|l| l.starts_with("| ") && l.chars().nth(2).is_some_and(|c| c.is_ascii_digit()))
        .filter_map(|l| l.split('|').nth(2))
        .collect::<Vec<_>>()
        .join("\n");
    let sources = [
        include_str!("../../alibaba-lb/src/clb.rs"),
        include_str!("../../alibaba-lb/src/nlb.rs"),
        include_str!("../../alibaba-lb/src/network.rs"),
    ];
    let called: Vec<&str> = sources.iter().flat_map(|s| called_actions(s)).collect();
    assert!(called.len() >= 20, "found only {called:?}");
    for action in called {
        assert!(
            actions_column.contains(action),
            "the client calls {action}, which has no row in the fidelity table"
        );
    }
}

/// Every action the alibaba-lb client calls has a rate limit in the emulator (row 55:
/// published, or an assumption marked as such), and the client's own limit for it is
/// never above the emulator's: a new call cannot go out unpaced or paced past it.
#[test]
fn every_action_the_client_calls_has_a_rate_limit_the_client_keeps_below() {
    use alibaba_lb::action_quotas::quota_of;
    use lb_emulator::quota::QUOTAS;
    let sources = [
        (
            Service::Clb,
            "slb",
            include_str!("../../alibaba-lb/src/clb.rs"),
        ),
        (
            Service::Nlb,
            "nlb",
            include_str!("../../alibaba-lb/src/nlb.rs"),
        ),
        (
            Service::Ecs,
            "ecs",
            include_str!("../../alibaba-lb/src/network.rs"),
        ),
        (
            Service::Vpc,
            "vpc",
            include_str!("../../alibaba-lb/src/network.rs"),
        ),
    ];
    let mut checked = 0;
    for (service, product, source) in sources {
        for action in called_actions(source) {
            // network.rs holds both ECS's and VPC's calls.
            let Some(row) = QUOTAS
                .iter()
                .find(|r| r.action == action && r.product == product)
            else {
                assert!(
                    product == "ecs" || product == "vpc",
                    "the client calls {product}:{action}, which has no rate limit"
                );
                continue;
            };
            let client = quota_of(service, action);
            assert!(
                client.per_second() <= row.limit.per_second() && client.calls <= row.limit.calls,
                "{product}:{action}: the client's {client:?} is above the emulator's {}",
                row.limit
            );
            checked += 1;
        }
    }
    assert!(checked >= 40, "checked only {checked}");
}

/// Quoted action names in client source: a verb the APIs use, then a capital letter,
/// and not a parameter key (keys open a tuple: `("Key", value)`).
fn called_actions(source: &str) -> Vec<&str> {
    const VERBS: [&str; 10] = [
        "Create", "Delete", "Describe", "Add", "Remove", "Set", "Start", "Get", "List", "Update",
    ];
    let mut out = vec![];
    let mut rest = source;
    while let Some(open) = rest.find('"') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('"') else { break };
        let word = &after[..close];
        let before = rest[..open].trim_end();
        let is_key = before.ends_with('(')
            && !before[..before.len() - 1]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '>');
        let is_action = word.chars().all(|c| c.is_ascii_alphanumeric())
            && VERBS.iter().any(|v| {
                word.strip_prefix(v)
                    .and_then(|r| r.chars().next())
                    .is_some_and(|c| c.is_ascii_uppercase())
            });
        if is_action && !is_key {
            out.push(word);
        }
        rest = &after[close + 1..];
    }
    out
}

/// Row 45: `CreateLoadBalancer` with a `ClientToken` already used returns the load
/// balancer the first call created, on CLB and NLB alike; another token makes another.
#[tokio::test]
async fn create_load_balancer_is_idempotent_by_client_token() {
    let bed = Bed::new().await;
    let clb = |token: &'static str| {
        let bed = &bed;
        async move {
            let lb = bed
                .call(
                    Service::Clb,
                    "CreateLoadBalancer",
                    &[("LoadBalancerName", "web"), ("ClientToken", token)],
                )
                .await
                .unwrap();
            lb["LoadBalancerId"].as_str().unwrap().to_string()
        }
    };
    let first = clb("token-a").await;
    assert_eq!(clb("token-a").await, first);
    assert_ne!(clb("token-b").await, first);
    let nlb = |token: &'static str| {
        let bed = &bed;
        async move {
            let lb = bed
                .call(
                    Service::Nlb,
                    "CreateLoadBalancer",
                    &nlb_create_pairs(&[], &[("LoadBalancerName", "web"), ("ClientToken", token)]),
                )
                .await
                .unwrap();
            lb["LoadbalancerId"].as_str().unwrap().to_string()
        }
    };
    let first = nlb("token-a").await;
    assert_eq!(nlb("token-a").await, first);
    assert_ne!(nlb("token-b").await, first);
    let http = alibaba_lb::http::build_http_client(Duration::from_secs(5)).unwrap();
    let state: Value = serde_json::from_slice(
        &http
            .get(format!("{}/_emulator/state", bed.emu.base_url()))
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(state["clb"]["load_balancers"].as_array().unwrap().len(), 2);
    assert_eq!(state["nlb"]["load_balancers"].as_array().unwrap().len(), 2);
}

/// Row 45: NLB `CreateServerGroup` (and `CreateListener`) answer a `ClientToken`
/// already used with that request's first answer, even once the group is deleted: a
/// client that remakes a group with a token it used before gets the deleted id back.
#[tokio::test]
async fn an_nlb_group_token_answers_its_first_request_even_after_the_delete() {
    let bed = Bed::new().await;
    let create = |token: &'static str| {
        let bed = &bed;
        async move {
            let made = bed
                .call(
                    Service::Nlb,
                    "CreateServerGroup",
                    &[
                        ("ServerGroupName", "web-80"),
                        ("ServerGroupType", "Ip"),
                        ("Protocol", "TCP"),
                        ("VpcId", lb_emulator::DEFAULT_VPC_ID),
                        ("ClientToken", token),
                    ],
                )
                .await
                .unwrap();
            made["ServerGroupId"].as_str().unwrap().to_string()
        }
    };
    let first = create("token-a").await;
    let gone = || async {
        bed.call(
            Service::Nlb,
            "ListServerGroups",
            &[("ServerGroupIds.1", first.as_str())],
        )
        .await
        .unwrap()["ServerGroups"]
            .as_array()
            .unwrap()
            .is_empty()
    };
    // The emulator makes the group when its creation job is done: wait for it, so the
    // delete is of a group that exists (CI deleted it a moment too early once).
    for _ in 0..100 {
        if !gone().await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    bed.call(
        Service::Nlb,
        "DeleteServerGroup",
        &[("ServerGroupId", first.as_str())],
    )
    .await
    .unwrap();
    for _ in 0..100 {
        if gone().await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gone().await, "the group was deleted");
    assert_eq!(create("token-a").await, first, "the deleted group's id");
    let second = create("token-b").await;
    assert_ne!(second, first);
}

/// Row 46: a server group a listener forwards to cannot be deleted (CLB and NLB);
/// once the listener is deleted, it can.
#[tokio::test]
async fn a_server_group_in_use_by_a_listener_is_not_deleted() {
    let bed = Bed::new().await;
    let lb = bed.clb_instance(None).await;
    let group = bed.vserver_group(&lb, "g").await.unwrap();
    let group = group["VServerGroupId"].as_str().unwrap().to_string();
    bed.clb_listener(
        "CreateLoadBalancerTCPListener",
        &lb,
        "80",
        &[("VServerGroupId", &group)],
    )
    .await
    .unwrap();
    refused(
        bed.call(
            Service::Clb,
            "DeleteVServerGroup",
            &[("VServerGroupId", &group)],
        )
        .await,
        400,
        "RspoolVipExist",
    );
    bed.call(
        Service::Clb,
        "DeleteLoadBalancerListener",
        &[
            ("LoadBalancerId", &lb),
            ("ListenerPort", "80"),
            ("ListenerProtocol", "tcp"),
        ],
    )
    .await
    .unwrap();
    bed.call(
        Service::Clb,
        "DeleteVServerGroup",
        &[("VServerGroupId", &group)],
    )
    .await
    .unwrap();

    let nlb = bed.client(Product::Nlb, None);
    let made = nlb
        .ensure_load_balancer(&testing::spec("nlb-row-46", "vpc-1", "grp"))
        .await
        .unwrap();
    let group = &made.listeners[0];
    refused(
        bed.call(
            Service::Nlb,
            "DeleteServerGroup",
            &[("ServerGroupId", &group.server_group_id)],
        )
        .await,
        400,
        "ResourceInUse.serverGroup",
    );
    let wiring = nlb.wiring(&made.id).await.unwrap().unwrap();
    nlb.delete_listener(&made.id, &wiring.listeners[0])
        .await
        .unwrap();
    nlb.delete_server_group(&group.server_group_id)
        .await
        .unwrap();
    assert!(nlb
        .wiring(&made.id)
        .await
        .unwrap()
        .unwrap()
        .listeners
        .is_empty());
}

/// Row 47: `DeleteLoadBalancerListener` deletes the listener on a port; none there is
/// refused, and a port with listeners of two protocols needs `ListenerProtocol`.
#[tokio::test]
async fn clb_delete_listener_needs_a_listener_and_its_protocol_when_two_share_the_port() {
    let bed = Bed::new().await;
    let lb = bed.clb_with_two_protocols_on_53().await;
    let delete = |pairs: Vec<(&'static str, String)>| {
        let bed = &bed;
        async move {
            let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
            bed.call(Service::Clb, "DeleteLoadBalancerListener", &pairs)
                .await
        }
    };
    let on = |port: &str| {
        vec![
            ("LoadBalancerId", lb.clone()),
            ("ListenerPort", port.to_string()),
        ]
    };
    refused(
        delete(on("80")).await,
        400,
        "InvalidParameter.ListenerNotFound",
    );
    refused(delete(on("53")).await, 400, "TooManyListeners");
    refused(
        delete(vec![
            ("LoadBalancerId", "lb-nosuch".to_string()),
            ("ListenerPort", "53".to_string()),
        ])
        .await,
        400,
        "InvalidLoadBalancerId.NotFound",
    );
    let mut udp = on("53");
    udp.push(("ListenerProtocol", "udp".to_string()));
    delete(udp).await.unwrap();
    // One protocol left on the port: no protocol needed.
    delete(on("53")).await.unwrap();
    refused(
        delete(on("53")).await,
        400,
        "InvalidParameter.ListenerNotFound",
    );
}

/// Row 48: `DeleteListener` (NLB) needs a known listener.
#[tokio::test]
async fn nlb_delete_listener_needs_a_known_listener() {
    let bed = Bed::new().await;
    let (_, group) = bed.group(Product::Nlb, None).await;
    refused(
        bed.call(
            Service::Nlb,
            "DeleteListener",
            &[("ListenerId", "lsn-nosuch")],
        )
        .await,
        404,
        "ResourceNotFound.listener",
    );
    let listener = group.listener_id.clone().expect("an NLB group's listener");
    bed.call(Service::Nlb, "DeleteListener", &[("ListenerId", &listener)])
        .await
        .unwrap();
}

// ------------------------------------------------------------------ tags (issue 24)

/// `Tag.1..Tag.n` pairs with keys `k<i>` and values `v<i>`.
fn tag_pairs(n: usize) -> Vec<(String, String)> {
    (1..=n)
        .flat_map(|i| {
            [
                (format!("Tag.{i}.Key"), format!("k{i}")),
                (format!("Tag.{i}.Value"), format!("v{i}")),
            ]
        })
        .collect()
}

/// Row 52: the create calls that take `Tag.N` refuse what the SDK models rule out
/// (more than 20, an empty or long key, a long value, the reserved prefixes, a URL)
/// in each product's words, and store the rest, which the attribute and list calls
/// return in each product's shape.
#[tokio::test]
async fn tags_on_create_follow_the_sdk_limits_and_are_read_back() {
    let bed = Bed::new().await;
    let long_key = "k".repeat(65);
    let long_value = "v".repeat(129);
    let bad: Vec<(&str, &str, &str)> = vec![
        ("", "v", "Key"),
        ("aliyun.x", "v", "Key"),
        ("acs:x", "v", "Key"),
        ("see https://x", "v", "Key"),
        (&long_key, "v", "Key"),
        ("k", "aliyun", "Value"),
        ("k", &long_value, "Value"),
    ];
    let nlb_base = nlb_create_pairs(&[], &[]);
    let group_base = [
        ("ServerGroupName", "k8s-80-tags"),
        ("VpcId", "vpc-emulator"),
    ];
    for (key, value, field) in &bad {
        let tag = [("Tag.1.Key", *key), ("Tag.1.Value", *value)];
        let clb = bed.call(Service::Clb, "CreateLoadBalancer", &tag).await;
        refused(clb, 400, &format!("InvalidParameter.Tag.1.{field}"));
        let mut nlb = nlb_base.clone();
        nlb.extend_from_slice(&tag);
        refused(
            bed.call(Service::Nlb, "CreateLoadBalancer", &nlb).await,
            400,
            "IllegalParam",
        );
        let mut group = group_base.to_vec();
        group.extend_from_slice(&tag);
        refused(
            bed.call(Service::Nlb, "CreateServerGroup", &group).await,
            400,
            "IllegalParam",
        );
    }
    let (twenty, twenty_one) = (tag_pairs(20), tag_pairs(21));
    refused(
        bed.call(Service::Clb, "CreateLoadBalancer", &as_pairs(&twenty_one))
            .await,
        400,
        "InvalidParameter.Tag",
    );
    let mut group = group_base.to_vec();
    group.extend(as_pairs(&twenty_one));
    refused(
        bed.call(Service::Nlb, "CreateServerGroup", &group).await,
        400,
        "IllegalParam",
    );

    // Twenty at the edges of the limits are taken, and read back.
    let k64 = "k".repeat(64);
    let v128 = "v".repeat(128);
    let mut edge = twenty.clone();
    edge[0] = ("Tag.1.Key".into(), k64.clone());
    edge[1] = ("Tag.1.Value".into(), v128.clone());
    let clb = bed
        .call(Service::Clb, "CreateLoadBalancer", &as_pairs(&edge))
        .await
        .unwrap();
    let id = clb["LoadBalancerId"].as_str().unwrap();
    let attribute = bed.clb_attribute(id).await.unwrap();
    let held = attribute["Tags"]["Tag"].as_array().unwrap();
    assert_eq!(held.len(), 20, "{attribute}");
    assert_eq!(
        (held[0]["TagKey"].as_str(), held[0]["TagValue"].as_str()),
        (Some(k64.as_str()), Some(v128.as_str()))
    );
    let two = tag_pairs(2);
    let mut nlb = nlb_base.clone();
    nlb.extend(as_pairs(&two));
    let created = bed
        .call(Service::Nlb, "CreateLoadBalancer", &nlb)
        .await
        .unwrap();
    let id = created["LoadbalancerId"].as_str().unwrap();
    let attribute = bed
        .call(
            Service::Nlb,
            "GetLoadBalancerAttribute",
            &[("LoadBalancerId", id)],
        )
        .await
        .unwrap();
    assert_eq!(
        attribute["Tags"],
        json!([{"Key": "k1", "Value": "v1"}, {"Key": "k2", "Value": "v2"}])
    );
    let mut group = group_base.to_vec();
    group.extend(as_pairs(&twenty));
    let created = bed
        .call(Service::Nlb, "CreateServerGroup", &group)
        .await
        .unwrap();
    let id = created["ServerGroupId"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let listed = bed
        .call(
            Service::Nlb,
            "ListServerGroups",
            &[("ServerGroupIds.1", id.as_str())],
        )
        .await
        .unwrap();
    assert_eq!(
        listed["ServerGroups"][0]["Tags"].as_array().map(Vec::len),
        Some(20),
        "{listed}"
    );
}

/// Row 53: `ListServerGroups` takes at most 10 `Tag.N` and lists only the groups that
/// carry every one (a tag given without a value asks for the key alone): two groups of
/// one name, tagged for two clusters, are told apart.
#[tokio::test]
async fn nlb_list_server_groups_filters_by_every_tag() {
    let bed = Bed::new().await;
    for cluster in ["c1", "c2"] {
        bed.call(
            Service::Nlb,
            "CreateServerGroup",
            &[
                ("ServerGroupName", "k8s.80.same"),
                ("VpcId", "vpc-emulator"),
                ("Tag.1.Key", "rollgate.io/cluster-id"),
                ("Tag.1.Value", cluster),
            ],
        )
        .await
        .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let list = |pairs: Vec<(&'static str, &'static str)>| {
        let bed = &bed;
        async move { bed.call(Service::Nlb, "ListServerGroups", &pairs).await }
    };
    let named = list(vec![("ServerGroupNames.1", "k8s.80.same")])
        .await
        .unwrap();
    assert_eq!(
        named["ServerGroups"].as_array().unwrap().len(),
        2,
        "by name alone: both"
    );
    let c1 = list(vec![
        ("ServerGroupNames.1", "k8s.80.same"),
        ("Tag.1.Key", "rollgate.io/cluster-id"),
        ("Tag.1.Value", "c1"),
    ])
    .await
    .unwrap();
    let groups = c1["ServerGroups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{c1}");
    assert_eq!(
        groups[0]["Tags"],
        json!([{"Key": "rollgate.io/cluster-id", "Value": "c1"}])
    );
    let key_only = list(vec![("Tag.1.Key", "rollgate.io/cluster-id")])
        .await
        .unwrap();
    assert_eq!(key_only["ServerGroups"].as_array().unwrap().len(), 2);
    let both = list(vec![
        ("Tag.1.Key", "rollgate.io/cluster-id"),
        ("Tag.1.Value", "c1"),
        ("Tag.2.Key", "team"),
    ])
    .await
    .unwrap();
    assert_eq!(
        both["ServerGroups"].as_array().unwrap().len(),
        0,
        "every tag must match"
    );
    let eleven = tag_pairs(11);
    refused(
        bed.call(Service::Nlb, "ListServerGroups", &as_pairs(&eleven))
            .await,
        400,
        "IllegalParam",
    );
    let ten = tag_pairs(10);
    bed.call(Service::Nlb, "ListServerGroups", &as_pairs(&ten))
        .await
        .unwrap();
}

/// Row 54 (client): the NLB client finds its server group by the cluster tag and the
/// name, never by the name alone: another cluster's group of the same name is neither
/// used nor changed, and the client creates its own, tagged. A load balancer tagged for
/// another cluster is refused (`Error::OtherCluster`) on both products, before any
/// listener or group is made in it.
#[tokio::test]
async fn clients_never_take_what_another_cluster_tagged() {
    let bed = Bed::new().await;
    let tags = |cluster: &str| ResourceTags {
        cluster: Some(("rollgate.io/cluster-id".into(), cluster.into())),
        others: vec![("rollgate.io/service-uid".into(), format!("uid-{cluster}"))],
    };
    let nlb = bed.client(Product::Nlb, None);
    let mut spec = testing::spec("tags-a", lb_emulator::DEFAULT_VPC_ID, "k8s/80/same");
    spec.tags = tags("c1");
    let a = nlb.ensure_load_balancer(&spec).await.unwrap();
    let mut spec = testing::spec("tags-b", lb_emulator::DEFAULT_VPC_ID, "k8s/80/same");
    spec.tags = tags("c2");
    let b = nlb.ensure_load_balancer(&spec).await.unwrap();
    assert_ne!(
        a.listeners[0].server_group_id, b.listeners[0].server_group_id,
        "one group per cluster"
    );
    let state = testing::control(&bed.emu.base_url(), "state", None).await;
    let groups = state["nlb"]["server_groups"].as_array().unwrap();
    assert_eq!(groups.len(), 2, "{state}");
    for (lb, cluster) in [(&a, "c1"), (&b, "c2")] {
        let group = groups
            .iter()
            .find(|g| g["id"] == lb.listeners[0].server_group_id.as_str())
            .unwrap();
        let held = group["tags"].as_array().unwrap();
        assert!(
            held.contains(&json!(["rollgate.io/cluster-id", cluster])),
            "{group}"
        );
    }
    // Ensured again, each cluster finds its own group again: no third one.
    let again = nlb.ensure_load_balancer(&spec).await.unwrap();
    assert_eq!(
        again.listeners[0].server_group_id,
        b.listeners[0].server_group_id
    );

    // c1's NLB, attached by c2: refused.
    let mut attach = testing::spec("tags-c", lb_emulator::DEFAULT_VPC_ID, "k8s/80/other");
    attach.existing_id = Some(a.id.clone());
    attach.tags = tags("c2");
    let refused_nlb = nlb.ensure_load_balancer(&attach).await.unwrap_err();
    assert!(
        matches!(&refused_nlb, Error::OtherCluster { cluster, .. } if cluster == "c1"),
        "{refused_nlb}"
    );
    // ... and by c1 itself, taken.
    attach.tags = tags("c1");
    nlb.ensure_load_balancer(&attach).await.unwrap();

    let clb = bed.client(Product::Clb, Some("slb.s1.small"));
    let mut spec = testing::spec("tags-clb", lb_emulator::DEFAULT_VPC_ID, "k8s/80/clb");
    spec.tags = tags("c1");
    let made = clb.ensure_load_balancer(&spec).await.unwrap();
    let groups_before = bed.calls("CreateVServerGroup").await;
    let mut attach = testing::spec("tags-clb-2", lb_emulator::DEFAULT_VPC_ID, "k8s/80/clb2");
    attach.existing_id = Some(made.id.clone());
    attach.tags = tags("c2");
    let refused_clb = clb.ensure_load_balancer(&attach).await.unwrap_err();
    assert!(
        matches!(&refused_clb, Error::OtherCluster { cluster, .. } if cluster == "c1"),
        "{refused_clb}"
    );
    assert_eq!(
        bed.calls("CreateVServerGroup").await,
        groups_before,
        "nothing made in it"
    );
}

// ------------------------------------------------------------------ API rate limits
// Row 55 and the rate-limit table (README): N calls per window per (region, product,
// action, AccessKey), the N+1st answered 400 `Throttling.User`.

/// An emulator with the rate limits on and `limits` (`product:Action=N/SECONDS`).
async fn rate_limited(limits: &[&str]) -> Bed {
    let overrides = limits
        .iter()
        .map(|l| lb_emulator::quota::parse_override(l).unwrap())
        .collect();
    let emu = lb_emulator::serve(EmulatorConfig {
        job_delay: Duration::from_millis(20),
        tick: Duration::from_millis(5),
        api_rate_limits: true,
        api_rate_limit_overrides: overrides,
        ..EmulatorConfig::default()
    })
    .await
    .unwrap();
    Bed { emu }
}

#[track_caller]
fn throttled<T: std::fmt::Debug>(result: Result<T>) {
    match result {
        Err(Error::Api {
            status,
            code,
            message,
            ..
        }) => assert_eq!(
            (status, code.as_str(), message.as_str()),
            (
                400,
                "Throttling.User",
                "Request was denied due to user flow control."
            )
        ),
        other => panic!("expected 400 Throttling.User, got {other:?}"),
    }
}

/// One read action of a product: (service, action, parameters).
type Read = (Service, &'static str, Vec<(&'static str, String)>);

/// One read action of each product.
fn reads(lb: &str) -> Vec<Read> {
    vec![
        (
            Service::Clb,
            "DescribeVServerGroups",
            vec![("LoadBalancerId", lb.to_string())],
        ),
        (Service::Nlb, "ListServerGroups", vec![]),
        (Service::Ecs, "DescribeNetworkInterfaces", vec![]),
        (
            Service::Vpc,
            "DescribeVpcAttribute",
            vec![("VpcId", lb_emulator::DEFAULT_VPC_ID.to_string())],
        ),
    ]
}

#[tokio::test]
async fn rate_limits_pass_a_burst_then_a_steady_rate_per_region_and_action() {
    // 3 per 6 s: a token every 2 s, long enough that four calls fit inside one on a
    // loaded machine.
    let bed = rate_limited(&[
        "slb:DescribeVServerGroups=3/6",
        "nlb:ListServerGroups=3/6",
        "ecs:DescribeNetworkInterfaces=3/6",
        "vpc:DescribeVpcAttribute=3/6",
    ])
    .await;
    let lb = bed.clb_instance(Some("slb.s1.small")).await;
    for (service, action, params) in reads(&lb) {
        let pairs: Vec<(&str, &str)> = params.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let burst_started = std::time::Instant::now();
        for i in 0..3 {
            bed.call(service, action, &pairs)
                .await
                .unwrap_or_else(|e| panic!("{action} call {} of 3: {e}", i + 1));
        }
        if burst_started.elapsed() < Duration::from_millis(1500) {
            throttled(bed.call(service, action, &pairs).await);
        } else {
            panic!("{action}: three calls took {:?}", burst_started.elapsed());
        }
        // Another region has a bucket of its own.
        let mut elsewhere = pairs.clone();
        elsewhere.push(("RegionId", "cn-shanghai"));
        let other_region = bed.call_without_region(service, action, &elsewhere).await;
        assert!(
            !matches!(&other_region, Err(Error::Api { code, .. }) if code.starts_with("Throttling")),
            "{action} in another region: {other_region:?}"
        );
        // After the burst, one call per 2 s: the next token is there 2 s after the
        // burst began, and only one (checked on the last product only, to wait once).
        if service == Service::Vpc {
            tokio::time::sleep(Duration::from_millis(2100).saturating_sub(burst_started.elapsed()))
                .await;
            bed.call(service, action, &pairs).await.unwrap();
            throttled(bed.call(service, action, &pairs).await);
        }
    }
    // An action's bucket is its own: the others' do not hold it back.
    bed.clb_attribute(&lb).await.unwrap();
    let calls = testing::control(&bed.emu.base_url(), "calls", None).await;
    let row = |action: &str| {
        calls["actions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["action"] == action)
            .cloned()
            .unwrap()
    };
    let groups = row("DescribeVServerGroups");
    assert_eq!(
        (groups["calls"].as_u64(), groups["throttled"].as_u64()),
        (Some(5), Some(1))
    );
    assert_eq!(groups["limit"], "3/6(s)");
    let vpc = row("DescribeVpcAttribute");
    assert_eq!(
        (vpc["calls"].as_u64(), vpc["throttled"].as_u64()),
        (Some(7), Some(2))
    );
    assert_eq!(row("DescribeLoadBalancerAttribute")["throttled"], 0);
}

#[tokio::test]
async fn the_published_create_vserver_group_quota_is_90_per_60_seconds() {
    let bed = rate_limited(&[]).await;
    let lb = bed.clb_instance(Some("slb.s1.small")).await;
    // A burst of 90, then 1.5 a second: calls in a row pass until the burst and what
    // refilled meanwhile are used up.
    let started = std::time::Instant::now();
    let mut passed = 0;
    let refusal = loop {
        match bed.vserver_group(&lb, &format!("g{passed}")).await {
            Ok(_) => passed += 1,
            Err(e) => break Err::<(), _>(e),
        }
        assert!(passed <= 200, "never throttled");
    };
    let refilled = (started.elapsed().as_secs_f64() * 1.5).ceil() as usize;
    assert!(
        (90..=90 + refilled).contains(&passed),
        "{passed} passed in {:?}",
        started.elapsed()
    );
    throttled(refusal);
}

#[tokio::test]
async fn rate_limits_are_off_unless_turned_on_and_can_be_toggled() {
    let bed = Bed::new().await;
    let lb = bed.clb_instance(Some("slb.s1.small")).await;
    let pairs = [("LoadBalancerId", lb.as_str())];
    // Off (the default): a burst past any quota passes.
    let set = bed
        .control(
            "rate-limits",
            json!({"limits": {"slb:DescribeVServerGroups": "2/60"}}),
        )
        .await;
    assert_eq!(set["enabled"], false);
    for _ in 0..5 {
        bed.call(Service::Clb, "DescribeVServerGroups", &pairs)
            .await
            .unwrap();
    }
    // On: the limit holds from the next call.
    bed.control("rate-limits", json!({"enabled": true})).await;
    for _ in 0..2 {
        bed.call(Service::Clb, "DescribeVServerGroups", &pairs)
            .await
            .unwrap();
    }
    throttled(
        bed.call(Service::Clb, "DescribeVServerGroups", &pairs)
            .await,
    );
}

#[tokio::test]
async fn the_clients_retry_gets_through_a_throttled_window() {
    let bed = rate_limited(&["vpc:DescribeVpcAttribute=1/1"]).await;
    let mut config = config(&bed.emu);
    // Backoff long enough to outlast a one-second window within its attempts.
    config.retry = RetryPolicy {
        max_attempts: 8,
        base_delay: Duration::from_millis(100),
        max_delay: Duration::from_millis(800),
    };
    let api = ApiClient::new(&config, Service::Vpc, credentials()).unwrap();
    let query = vec![
        ("RegionId".to_string(), "cn-hangzhou".to_string()),
        ("VpcId".to_string(), lb_emulator::DEFAULT_VPC_ID.to_string()),
    ];
    for _ in 0..2 {
        api.call::<Value>("DescribeVpcAttribute", &query, &[])
            .await
            .expect("the retry outlasts the window");
    }
    let calls = testing::control(&bed.emu.base_url(), "calls", None).await;
    let row = &calls["actions"][0];
    assert_eq!(row["action"], "DescribeVpcAttribute");
    assert!(row["throttled"].as_u64().unwrap() >= 1, "{calls}");
}

#[tokio::test]
async fn the_nlb_health_quota_is_10_calls_per_second() {
    let bed = rate_limited(&[]).await;
    // The quota is checked before the listener is looked up: an unknown listener
    // answers 404 while inside it, throttling past it.
    let started = std::time::Instant::now();
    let answers = futures_join((0..11).map(|_| {
        bed.call(
            Service::Nlb,
            "GetListenerHealthStatus",
            &[("ListenerId", "lsn-none")],
        )
    }))
    .await;
    let elapsed = started.elapsed();
    let throttled = answers
        .iter()
        .filter(|a| matches!(a, Err(Error::Api { code, .. }) if code == "Throttling.User"))
        .count();
    let not_found = answers
        .iter()
        .filter(|a| matches!(a, Err(Error::Api { status: 404, .. })))
        .count();
    // Eleven calls sent together take less than the 100 ms a token takes to refill,
    // unless the machine stalls.
    if elapsed < Duration::from_millis(90) {
        assert_eq!((not_found, throttled), (10, 1), "{answers:?}");
    } else {
        assert!(not_found <= 11 && throttled <= 1, "{answers:?}");
    }
}

async fn futures_join<F: std::future::Future>(
    futures: impl IntoIterator<Item = F>,
) -> Vec<F::Output> {
    let handles: Vec<_> = futures.into_iter().collect();
    let mut out = Vec::with_capacity(handles.len());
    let mut pinned: Vec<_> = handles.into_iter().map(Box::pin).collect();
    // Poll them together: each is a request in flight at once.
    let outputs = std::future::poll_fn(|cx| {
        let mut done = true;
        for (i, f) in pinned.iter_mut().enumerate() {
            if out.len() <= i {
                out.push(None);
            }
            if out[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => out[i] = Some(v),
                    std::task::Poll::Pending => done = false,
                }
            }
        }
        if done {
            std::task::Poll::Ready(out.drain(..).map(Option::unwrap).collect::<Vec<_>>())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    outputs
}

// ------------------------------------------------- access control lists (row 56)

/// Row 56: CLB access control. A list needs its name (once per region) and a known
/// IP version; a listener names only a list the account holds, with the switch on
/// only together with the list and its type, each refusal beside its positive
/// control. Then through the client: a TCP listener created with a white list, read
/// back (`Describe…ListenerAttribute`, and the list's `RelatedListeners`), then set
/// to black.
#[tokio::test]
async fn clb_listener_access_control_names_a_held_list_with_its_type() {
    let bed = Bed::new().await;
    let create_acl = |pairs: &'static [(&'static str, &'static str)]| {
        let bed = &bed;
        async move {
            bed.call(Service::Clb, "CreateAccessControlList", pairs)
                .await
        }
    };
    refused(create_acl(&[]).await, 400, "MissingParameter");
    refused(
        create_acl(&[("AclName", "office"), ("AddressIPVersion", "ipv5")]).await,
        400,
        "InvalidParameter.AddressIPVersion",
    );
    let acl = create_acl(&[("AclName", "office")]).await.unwrap();
    let acl = acl["AclId"].as_str().unwrap().to_string();
    refused(
        create_acl(&[("AclName", "office")]).await,
        400,
        "AclExistInRegion",
    );

    let lb = bed.clb_instance(Some("slb.s1.small")).await;
    let tcp = |port: &'static str, extra: Vec<(&'static str, String)>| {
        let (bed, lb) = (&bed, &lb);
        async move {
            let pairs: Vec<(&str, &str)> = extra.iter().map(|(k, v)| (*k, v.as_str())).collect();
            bed.clb_listener("CreateLoadBalancerTCPListener", lb, port, &pairs)
                .await
        }
    };
    let on = |id: &str, kind: &str| {
        vec![
            ("AclStatus", "on".to_string()),
            ("AclId", id.to_string()),
            ("AclType", kind.to_string()),
        ]
    };
    refused(
        tcp("81", on("acl-unknown", "white")).await,
        400,
        "AclNotExist",
    );
    refused(
        tcp(
            "81",
            vec![("AclStatus", "on".into()), ("AclId", acl.clone())],
        )
        .await,
        400,
        "MissingParameter",
    );
    refused(
        tcp("81", on(&acl, "grey")).await,
        400,
        "InvalidParameter.AclType",
    );
    refused(
        tcp("81", vec![("AclStatus", "yes".into())]).await,
        400,
        "InvalidParameter.AclStatus",
    );
    // The positive controls: the held list with a type; the switch off alone.
    tcp("81", on(&acl, "white")).await.unwrap();
    tcp("82", vec![("AclStatus", "off".into())]).await.unwrap();

    // Through the client: created with the list, read back, changed, read back.
    let client = bed.client(Product::Clb, Some("slb.s1.small"));
    let with = |kind: AclType| ListenerSettings {
        acl: Some(ListenerAcl {
            enabled: true,
            id: Some(acl.clone()),
            kind: Some(kind),
        }),
        ..Default::default()
    };
    let made = ensure_with(&client, None, with(AclType::White)).await;
    let (bed, id) = (&bed, &made.id);
    let describe = || async move { bed.clb_listener_attribute("TCP", id, "80").await.unwrap() };
    let read = describe().await;
    assert_eq!(
        (&read["AclStatus"], &read["AclId"], &read["AclType"]),
        (&json!("on"), &json!(acl), &json!("white")),
        "{read}"
    );
    ensure_with(&client, Some(made.id.clone()), with(AclType::Black)).await;
    assert_eq!(
        describe().await["AclType"],
        "black",
        "a changed type reaches the listener"
    );
    let related = bed
        .call(
            Service::Clb,
            "DescribeAccessControlListAttribute",
            &[("AclId", &acl)],
        )
        .await
        .unwrap();
    let related = related["RelatedListeners"]["RelatedListener"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["LoadBalancerId"].as_str().unwrap().to_string(),
                l["ListenerPort"].as_u64().unwrap(),
                l["AclType"].as_str().unwrap().to_string(),
            )
        })
        .collect::<Vec<_>>();
    assert!(
        related.contains(&(made.id.clone(), 80, "black".into()))
            && related.contains(&(lb.clone(), 81, "white".into())),
        "{related:?}"
    );
    refused(
        bed.call(
            Service::Clb,
            "DescribeAccessControlListAttribute",
            &[("AclId", "acl-unknown")],
        )
        .await,
        400,
        "AclNotExist",
    );
}

// ------------------------------------------------- intranet CLB and its vswitch (row 57)

/// Row 57: an intranet CLB in a VPC needs its vswitch; with it, the instance is made
/// and `DescribeLoadBalancerAttribute` reports both. Then through the client, as
/// rollgate asks for `vswitch-id` (the first zone's vswitch of the spec).
#[tokio::test]
async fn clb_intranet_in_a_vpc_needs_its_vswitch() {
    let bed = Bed::new().await;
    let create = |extra: &'static [(&'static str, &'static str)]| {
        let bed = &bed;
        async move {
            let mut p = vec![
                ("AddressType", "intranet"),
                ("VpcId", lb_emulator::DEFAULT_VPC_ID),
            ];
            p.extend_from_slice(extra);
            bed.call(Service::Clb, "CreateLoadBalancer", &p).await
        }
    };
    refused(create(&[]).await, 400, "MissingParameter");
    let made = create(&[("VSwitchId", "vsw-a")]).await.unwrap();
    let id = made["LoadBalancerId"].as_str().unwrap();
    let read = bed.clb_attribute(id).await.unwrap();
    assert_eq!(
        (&read["AddressType"], &read["VSwitchId"]),
        (&json!("intranet"), &json!("vsw-a")),
        "{read}"
    );

    let client = bed.client(Product::Clb, Some("slb.s1.small"));
    let mut intranet = bare_spec("fidelity-intranet");
    intranet.address_type = AddressType::Intranet;
    intranet.zones = vec![ZoneVSwitch {
        zone_id: String::new(),
        vswitch_id: "vsw-b".into(),
    }];
    let lb = client.ensure_load_balancer(&intranet).await.unwrap();
    let read = bed.clb_attribute(&lb.id).await.unwrap();
    assert_eq!(read["VSwitchId"], "vsw-b", "{read}");
}

// ------------------------------------------------- CLB charge type (row 58)

/// Row 58: `InstanceChargeType` is `PayBySpec` or `PayByCLCU` (reported back with the
/// spec). Through the client, as rollgate asks for `instance-charge-type: PayByCLCU`:
/// no spec is sent (not even the configured default), so the instance takes pod
/// backends as a CLCU one; `spec` alone replaces the configured default.
#[tokio::test]
async fn clb_charge_type_is_by_spec_or_clcu_and_clcu_gets_no_spec() {
    let bed = Bed::new().await;
    refused(
        bed.call(
            Service::Clb,
            "CreateLoadBalancer",
            &[("InstanceChargeType", "Monthly")],
        )
        .await,
        400,
        "InvalidParameter.InstanceChargeType",
    );
    let client = bed.client(Product::Clb, Some("slb.s1.small"));
    let made = |name: &'static str, spec: &'static str, charge: &'static str| {
        let client = &client;
        async move {
            let mut lb = lb_emulator::testing::spec(name, lb_emulator::DEFAULT_VPC_ID, "k8s-80-x");
            lb.listeners.clear();
            lb.clb_instance = ClbInstance {
                spec: spec.into(),
                charge_type: charge.into(),
            };
            client.ensure_load_balancer(&lb).await.unwrap()
        }
    };
    let clcu = made("by-clcu", "", "PayByCLCU").await;
    assert_eq!(
        clcu.clb_instance,
        Some(ClbInstance {
            spec: String::new(),
            charge_type: "PayByCLCU".into()
        })
    );
    assert!(clcu.clb_instance.unwrap().takes_pod_backends());
    // A spec alone (CCM's default `slb.s1.small` is in most CCM-era manifests), even
    // with a configured one: pay-by-CLCU, no spec. Before issue 43 this created a
    // pay-by-spec instance, which is no longer sold.
    let spec_alone = made("spec-alone", "slb.s2.small", "").await;
    assert_eq!(
        spec_alone.clb_instance,
        Some(ClbInstance {
            spec: String::new(),
            charge_type: "PayByCLCU".into()
        })
    );
    // Pay-by-spec only when asked for, with the Service's spec.
    let s2 = made("by-spec", "slb.s2.small", "PayBySpec").await;
    assert_eq!(
        s2.clb_instance,
        Some(ClbInstance {
            spec: "slb.s2.small".into(),
            charge_type: "PayBySpec".into()
        })
    );
    // Neither a spec (Service or configured) nor a charge type: pay-by-CLCU, never the
    // API's pay-by-spec default, which is no longer sold.
    let unconfigured = bed.client(Product::Clb, None);
    let mut lb = lb_emulator::testing::spec("by-default", lb_emulator::DEFAULT_VPC_ID, "k8s-80-y");
    lb.listeners.clear();
    let default = unconfigured.ensure_load_balancer(&lb).await.unwrap();
    assert_eq!(
        default.clb_instance,
        Some(ClbInstance {
            spec: String::new(),
            charge_type: "PayByCLCU".into()
        })
    );
}

/// Account quotas (rows 59-62): an instance past the region's quota, a server past the
/// CLB instances it may join, and servers past an NLB group's quota are refused with
/// the quota's name; what is already there is kept. The defaults are the published
/// ones; `POST /_emulator/quotas` sets a test's own, as Quota Center raises them.
#[tokio::test]
async fn account_quotas_refuse_what_passes_them_and_name_the_quota() {
    let bed = Bed::new().await;
    let quotas = bed.control("quotas", json!({})).await;
    assert_eq!(quotas["slb_quota_instances_num"], 30, "{quotas}");
    assert_eq!(quotas["nlb_quota_loadbalancers_num"], 60, "{quotas}");
    assert_eq!(
        quotas["nlb_quota_servergroup_noeci_servers_num"], 400,
        "{quotas}"
    );
    let quotas = bed
        .control(
            "quotas",
            json!({"slb_quota_instances_num": 2, "nlb_quota_loadbalancers_num": 2,
                   "slb_quota_backendserver_attached_num": 1,
                   "nlb_quota_servergroup_noeci_servers_num": 2}),
        )
        .await;
    assert_eq!(quotas["slb_quota_instances_num"], 2, "{quotas}");
    fn quota_named<T: std::fmt::Debug>(result: Result<T>, name: &str) {
        match result {
            Err(Error::Api {
                status: 400,
                code,
                message,
                ..
            }) if code == "QuotaExceeded" => {
                assert!(message.contains(name), "{message}");
            }
            other => panic!("not refused by {name}: {other:?}"),
        }
    }

    // CLB instances: the two groups' instances use the quota of 2.
    let (clb, first) = bed.group(Product::Clb, Some("slb.s1.small")).await;
    let (_, second) = bed.group(Product::Clb, Some("slb.s2.small")).await;
    quota_named(
        bed.call(
            Service::Clb,
            "CreateLoadBalancer",
            &[("LoadBalancerSpec", "slb.s1.small")],
        )
        .await,
        "slb_quota_instances_num",
    );
    // One server (an ENI) may join one CLB instance here: the second is refused.
    let eni = bed
        .eni("10.1.0.1", lb_emulator::DEFAULT_VPC_ID, "InUse")
        .await;
    let server = backend(BackendType::Eni, &eni, "10.1.0.1", "");
    clb.add_backends(&first, std::slice::from_ref(&server))
        .await
        .unwrap();
    quota_named(
        clb.add_backends(&second, std::slice::from_ref(&server))
            .await,
        "slb_quota_backendserver_attached_num",
    );

    // NLB instances and servers per group.
    let (nlb, group) = bed.group(Product::Nlb, None).await;
    bed.call(
        Service::Nlb,
        "CreateLoadBalancer",
        &nlb_create_pairs(&[], &[]),
    )
    .await
    .unwrap();
    quota_named(
        bed.call(
            Service::Nlb,
            "CreateLoadBalancer",
            &nlb_create_pairs(&[], &[]),
        )
        .await,
        "nlb_quota_loadbalancers_num",
    );
    let ip = |i: u8| {
        backend(
            BackendType::Ip,
            &format!("10.2.0.{i}"),
            &format!("10.2.0.{i}"),
            "",
        )
    };
    nlb.add_backends(&group, &[ip(1), ip(2)]).await.unwrap();
    quota_named(
        nlb.add_backends(&group, &[ip(3)]).await,
        "nlb_quota_servergroup_noeci_servers_num",
    );
}

/// Row 59: the health report carries every documented field, and two pods sharing one
/// ENI (Terway's shared-ENI mode) have an entry each, told apart by IP.
#[tokio::test]
async fn clb_health_reports_every_documented_field_and_an_entry_per_ip_of_a_shared_eni() {
    let bed = Bed::new().await;
    let (client, group) = bed.group(Product::Clb, Some("slb.s1.small")).await;
    let eni = bed
        .control(
            "enis",
            json!({"private_ips": ["10.3.0.1", "10.3.0.2"], "vpc_id": lb_emulator::DEFAULT_VPC_ID}),
        )
        .await;
    let eni = eni["network_interface_id"].as_str().unwrap().to_string();
    let pods = [
        backend(BackendType::Eni, &eni, "10.3.0.1", ""),
        backend(BackendType::Eni, &eni, "10.3.0.2", ""),
    ];
    client.add_backends(&group, &pods).await.unwrap();
    // Reported once registered (the registration delay).
    let mut entries = vec![];
    for _ in 0..100 {
        let report = bed
            .call(
                Service::Clb,
                "DescribeHealthStatus",
                &[("LoadBalancerId", &group.load_balancer_id)],
            )
            .await
            .unwrap();
        entries = report["BackendServers"]["BackendServer"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if entries.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(entries.len(), 2, "{entries:?}");
    for (entry, ip) in entries.iter().zip(["10.3.0.1", "10.3.0.2"]) {
        for field in [
            "ServerId",
            "ServerIp",
            "EniHost",
            "Type",
            "Port",
            "ListenerPort",
            "Protocol",
            "ServerHealthStatus",
        ] {
            assert!(!entry[field].is_null(), "{field} missing: {entry}");
        }
        assert_eq!(entry["ServerId"], eni.as_str(), "{entry}");
        assert_eq!(entry["Type"], "eni", "{entry}");
        assert_eq!(entry["EniHost"], ip, "{entry}");
        assert_eq!(entry["ServerIp"], ip, "{entry}");
    }
}

/// Row 60: a CLB listener is created `stopped` (its backends read `unavailable`), says
/// so in its attribute, and runs once started; `fail_next` fails exactly the next N
/// calls of the action it names.
#[tokio::test]
async fn clb_listeners_are_created_stopped_and_run_once_started() {
    let bed = Bed::new().await;
    let lb = bed.clb_instance(Some("slb.s1.small")).await;
    let group = bed.vserver_group(&lb, "web").await.unwrap();
    let group = group["VServerGroupId"].as_str().unwrap().to_string();
    bed.clb_listener(
        "CreateLoadBalancerTCPListener",
        &lb,
        "80",
        &[("VServerGroupId", &group)],
    )
    .await
    .unwrap();
    let status = |attribute: Value| attribute["Status"].as_str().unwrap_or_default().to_string();
    let attribute = bed.clb_listener_attribute("TCP", &lb, "80").await.unwrap();
    assert_eq!(status(attribute), "stopped");
    bed.control(
        "faults",
        json!({"fail_next": {"StartLoadBalancerListener": 2}}),
    )
    .await;
    let start = || {
        let (bed, lb) = (&bed, lb.clone());
        async move {
            bed.call(
                Service::Clb,
                "StartLoadBalancerListener",
                &[("LoadBalancerId", lb.as_str()), ("ListenerPort", "80")],
            )
            .await
        }
    };
    for _ in 0..2 {
        match start().await {
            Err(Error::Api { status: 500, .. }) => {}
            other => panic!("not the injected failure: {other:?}"),
        }
    }
    let attribute = bed.clb_listener_attribute("TCP", &lb, "80").await.unwrap();
    assert_eq!(status(attribute), "stopped");
    start().await.unwrap();
    let attribute = bed.clb_listener_attribute("TCP", &lb, "80").await.unwrap();
    assert_eq!(status(attribute), "running");
}

/// Row 63: the NLB health report names servers that are not healthy (a new one as
/// `Initial`), and with `nlb_report_delay_ms` a registered server is left out of it
/// for that long.
#[tokio::test]
async fn nlb_health_report_names_a_new_server_only_after_the_report_delay() {
    let bed = Bed::new().await;
    // Registered at once, healthy only much later: `Initial` while reported.
    bed.control(
        "timing",
        json!({"registration_delay_ms": 0, "health_delay_ms": 60000, "nlb_report_delay_ms": 400}),
    )
    .await;
    let (client, group) = bed.group(Product::Nlb, None).await;
    let listener = group.listener_id.clone().unwrap();
    client
        .add_backends(
            &group,
            &[backend(BackendType::Ip, "10.4.0.1", "10.4.0.1", "")],
        )
        .await
        .unwrap();
    let named = || {
        let (bed, listener) = (&bed, listener.clone());
        async move {
            let report = bed
                .call(
                    Service::Nlb,
                    "GetListenerHealthStatus",
                    &[("ListenerId", &listener)],
                )
                .await
                .unwrap();
            report["ListenerHealthStatus"][0]["ServerGroupInfos"][0]["NonNormalServers"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        }
    };
    let early = named().await;
    assert!(early.is_empty(), "named inside the report delay: {early:?}");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let later = named().await;
    assert_eq!(later.len(), 1, "{later:?}");
    assert_eq!(later[0]["Status"], "Initial", "{later:?}");
}

/// Row 64: while an NLB is being created (`Provisioning`), a listener cannot be added:
/// 400 `IncorrectStatus.loadBalancer`, which the client retries as busy (the same call
/// goes through once the instance is `Active`).
#[tokio::test]
async fn nlb_a_load_balancer_being_made_takes_no_listener_yet_and_the_client_retries() {
    let bed = Bed::new().await;
    bed.control("jobs", json!({"delay_ms": 1500})).await;
    let lb = bed
        .call(
            Service::Nlb,
            "CreateLoadBalancer",
            &nlb_create_pairs(&[], &[]),
        )
        .await
        .unwrap();
    let lb = lb["LoadbalancerId"].as_str().unwrap().to_string();
    let listener = [
        ("LoadBalancerId", lb.as_str()),
        ("ListenerProtocol", "TCP"),
        ("ListenerPort", "80"),
    ];
    let refused_now = bed.call(Service::Nlb, "CreateListener", &listener).await;
    match &refused_now {
        Err(
            e @ Error::Api {
                status: 400, code, ..
            },
        ) if code == "IncorrectStatus.loadBalancer" => {
            assert!(e.is_retryable(), "{e}");
        }
        other => panic!("not refused as busy: {other:?}"),
    }
}
