//! The cloud load balancer: the `lb-emulator` binary, as `make demo` and users run it, in a
//! process of its own (cargo builds it beside `rollgate`; `make test` builds it first).
use super::*;

/// A running `lb-emulator` process; killed on drop.
pub struct EmulatorProcess {
    child: std::process::Child,
    pub addr: std::net::SocketAddr,
    /// Whether the emulator enforces the API rate limits.
    api_rate_limits: bool,
}

impl EmulatorProcess {
    /// Starts the binary on a free loopback port with `config`'s timings and API rate
    /// limits (the settings the tests vary; faults are set later through
    /// `/_emulator/faults`).
    pub fn start(config: &lb_emulator::EmulatorConfig) -> Self {
        use std::io::BufRead as _;
        let bin = PathBuf::from(env!("CARGO_BIN_EXE_rollgate"))
            .with_file_name(format!("lb-emulator{}", std::env::consts::EXE_SUFFIX));
        assert!(
            bin.exists(),
            "{} is missing: build it first with `cargo build -p lb-emulator` (make test does)",
            bin.display()
        );
        let ms = |d: Duration| d.as_millis().to_string();
        let mut command = std::process::Command::new(&bin);
        command
            .args(["--listen", "127.0.0.1:0"])
            .args(["--registration-delay-ms", &ms(config.registration_delay)])
            .args(["--health-delay-ms", &ms(config.health_delay)])
            .args(["--job-delay-ms", &ms(config.job_delay)])
            .args(["--tick-ms", &ms(config.tick)]);
        // The API rate limits, when a test or bench asks for them (off otherwise).
        if config.api_rate_limits {
            command.arg("--api-rate-limits");
        }
        for ((product, action), limit) in &config.api_rate_limit_overrides {
            command.arg(format!("--api-rate-limit={product}:{action}={limit}"));
        }
        for (name, value) in config.account_quotas.iter() {
            command.arg(format!("--quota={name}={value}"));
        }
        let mut child = command
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let mut first = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut first)
            .expect("reading the emulator's address");
        let addr = first
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("the emulator's first line {first:?}: {e}"));
        note(format!("lb-emulator pid {} on {addr}", child.id()));
        EmulatorProcess {
            child,
            addr,
            api_rate_limits: config.api_rate_limits,
        }
    }

    /// `127.0.0.1:PORT`, the endpoint override for the cloud client.
    pub fn endpoint(&self) -> String {
        self.addr.to_string()
    }

    /// The environment that points a `rollgate controller` at this emulator, for every
    /// product, with the emulator's credentials, and never at the instance metadata
    /// service (not loopback). The controller keeps each action under its quota when
    /// the emulator enforces them, and not when it does not: the suites that run with
    /// the limits off burst past them on purpose, to test other things.
    pub fn controller_env(&self) -> Vec<(String, String)> {
        let endpoint = self.endpoint();
        let action_quotas = self.api_rate_limits.to_string();
        [
            ("ALIBABA_CLOUD_REGION_ID", "cn-hangzhou"),
            ("ALIBABA_CLOUD_SLB_ENDPOINT", &endpoint),
            ("ALIBABA_CLOUD_NLB_ENDPOINT", &endpoint),
            ("ALIBABA_CLOUD_ECS_ENDPOINT", &endpoint),
            ("ALIBABA_CLOUD_VPC_ENDPOINT", &endpoint),
            ("ROLLGATE_CLOUD_SCHEME", "http"),
            ("ALIBABA_CLOUD_ACCESS_KEY_ID", "emulator-access-key-id"),
            (
                "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
                "emulator-access-key-secret",
            ),
            ("ALIBABA_CLOUD_ECS_METADATA_DISABLED", "true"),
            ("ROLLGATE_CLOUD_ACTION_QUOTAS", &action_quotas),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A client configuration for this emulator (the shared test one), for a test
    /// that needs to change a setting before building its client.
    pub fn cloud_config(&self) -> alibaba_lb::ClientConfig {
        lb_emulator::testing::client_config(&self.endpoint(), 4)
    }

    /// A cloud client of `product` for this emulator, for what a test makes by hand
    /// (a user's load balancer, listener or backend).
    pub fn cloud_client(
        &self,
        product: alibaba_lb::Product,
    ) -> std::sync::Arc<dyn alibaba_lb::LoadBalancerBackends> {
        lb_emulator::testing::client(&self.endpoint(), product, 4)
    }

    pub fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for EmulatorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The annotation the system sets on pods that run as elastic container instances.
pub const ECI_INSTANCE_ID_ANNOTATION: &str = "k8s.aliyun.com/eci-instance-id";

/// Gives every pod IP in `namespace` an ENI in the emulator's `vpc_id`, as Terway does
/// on a real cluster (it attaches the ENI, or a secondary IP of one, before the pod
/// runs): one `InUse` ENI per pod IP, added once the pod has its IP. Pods that run as
/// elastic container instances (the annotation above) get none. Polls until aborted.
pub fn give_pod_ips_enis(
    client: Client,
    namespace: &str,
    emulator: &EmulatorProcess,
    vpc_id: &str,
) -> tokio::task::JoinHandle<()> {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client, namespace);
    let url = format!("{}/_emulator/enis", emulator.base_url());
    let vpc_id = vpc_id.to_string();
    tokio::spawn(async move {
        let http = alibaba_lb::http::build_http_client(Duration::from_secs(10)).unwrap();
        let mut given: std::collections::HashSet<String> = Default::default();
        loop {
            if let Ok(list) = pods.list(&Default::default()).await {
                for pod in list.items {
                    let eci = pod
                        .metadata
                        .annotations
                        .as_ref()
                        .is_some_and(|a| a.contains_key(ECI_INSTANCE_ID_ANNOTATION));
                    let Some(ip) = pod.status.and_then(|s| s.pod_ip) else {
                        continue;
                    };
                    if eci || given.contains(&ip) {
                        continue;
                    }
                    let body = json!({"private_ips": [ip], "vpc_id": vpc_id});
                    let sent = http
                        .post(&url)
                        .header("content-type", "application/json")
                        .body(body.to_string())
                        .send()
                        .await;
                    if sent.is_ok_and(|r| r.status().is_success()) {
                        given.insert(ip);
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}
