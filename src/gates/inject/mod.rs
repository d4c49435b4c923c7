//! The readiness-gate injection webhook: at pod creation, in namespaces labelled
//! `rollgate.io/readiness-gate-inject: enabled`, a pod gets
//! `service.readiness.alibabacloud.com/<svc>` for each Service rollgate manages that
//! selects it, so Deployments need no hand-written gates.
//!
//! Every replica serves it (not only the leader): admissions read the shared stores and
//! write nothing. observe (the stores) -> `plan` (pure) -> the admission answer
//! (`review`), over HTTPS (`server`), with certificates rollgate makes and renews itself
//! (`certs`, pure; `cert_secret`, the Secret and the CA bundle) or that cert-manager
//! issues (`issued`); `missing` counts the pods that lack a gate it would have given
//! them.
pub mod cert_secret;
pub mod certs;
pub mod issued;
pub mod metrics;
pub mod missing;
pub mod plan;
pub mod review;
pub mod server;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use tokio::sync::watch;

use crate::duration_flag::parse_interval;
use crate::gates::service::ClassSelection;
use crate::metrics::Metrics;
use crate::runtime::Shutdown;
use crate::watch::Watches;
use cert_secret::{ensure_ca_bundle, get_or_create, one_secret_changes, read_bundle, Wanted};
use certs::{serving_names, CertBundle};
use server::ServingCert;

/// The injection webhook's flags.
#[derive(Debug, Clone, Args)]
pub struct InjectArgs {
    /// Serve the readiness-gate injection webhook (HTTPS, `POST /mutate-pods`) on this
    /// address, e.g. `0.0.0.0:9443`. Off when unset, and off (with a warning) while the
    /// readiness gates are (no `--cloud-region`): a gate nobody turns True would hold
    /// its pod unready forever.
    #[arg(long, env = "ROLLGATE_WEBHOOK_LISTEN")]
    pub webhook_listen: Option<SocketAddr>,
    /// The Service in front of the webhook, in rollgate's namespace: its DNS names are
    /// the serving certificate's.
    #[arg(
        long,
        env = "ROLLGATE_WEBHOOK_SERVICE",
        default_value = "rollgate-webhook"
    )]
    pub webhook_service: String,
    /// The MutatingWebhookConfiguration whose CA bundle rollgate keeps equal to its CA.
    #[arg(
        long,
        env = "ROLLGATE_WEBHOOK_CONFIGURATION",
        default_value = "rollgate-readiness-gate-injector"
    )]
    pub webhook_configuration: String,
    /// The Secret in rollgate's namespace holding the webhook's serving certificate
    /// (with `--webhook-cert-source rollgate`, made by rollgate when absent).
    #[arg(
        long,
        env = "ROLLGATE_WEBHOOK_CERT_SECRET",
        default_value = "rollgate-webhook-cert"
    )]
    pub webhook_cert_secret: String,
    /// Who makes the webhook's certificate: `rollgate` (a CA and serving certificate of
    /// its own in the Secret, renewed, and the configuration's CA bundle written) or
    /// `cert-manager` (a Certificate writes the Secret and the CA injector the bundle;
    /// rollgate only serves what the Secret holds).
    #[arg(
        long,
        env = "ROLLGATE_WEBHOOK_CERT_SOURCE",
        value_enum,
        default_value_t = CertSource::Rollgate
    )]
    pub webhook_cert_source: CertSource,
    /// How long a serving certificate is valid (renewed at two thirds of it; the CA
    /// lives ten times as long). Default one year; short values are for tests.
    #[arg(
        long,
        env = "ROLLGATE_WEBHOOK_CERT_VALIDITY",
        default_value = "525600m",
        value_parser = parse_interval,
        hide = true
    )]
    pub webhook_cert_validity: Duration,
}

/// Who makes the webhook's certificate and its CA bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CertSource {
    /// rollgate: its own CA, serving certificate and CA bundle, renewed by itself.
    Rollgate,
    /// cert-manager: a Certificate's Secret and the CA injector's bundle.
    CertManager,
}

/// The webhook, started: its work, and whether it is listening (for `/readyz`).
pub struct Webhook {
    pub serving: Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>,
    pub listening: watch::Receiver<bool>,
}

/// Said at start when the webhook is asked for without the gates; it stays off.
pub const WEBHOOK_WITHOUT_GATES: &str = "injection webhook off: --webhook-listen (ROLLGATE_WEBHOOK_LISTEN) needs the readiness gates on (--cloud-region), as a gate that no controller turns True would keep its pod unready forever; pods of labelled namespaces are created without gates (failurePolicy: Ignore)";

/// The webhook's work, `None` when `--webhook-listen` is unset. It listens once its
/// certificate is in hand and the shared caches (namespaces, Services) have synced, so
/// its first answers already see every Service.
pub fn start(
    args: &InjectArgs,
    own_namespace: &str,
    classes: ClassSelection,
    watches: &Watches,
    client: Client,
    metrics: &Metrics,
    shutdown: Shutdown,
) -> Option<Webhook> {
    // Registered whether the webhook serves or not, so the alert on the missing pods
    // reads a series that exists (0 without the webhook).
    let injection_metrics = metrics::InjectionMetrics::register(metrics);
    let addr = args.webhook_listen?;
    let (listening_tx, listening) = watch::channel(false);
    let injector = review::Injector {
        scope: Arc::new(plan::Scope {
            own_namespace: own_namespace.to_string(),
            classes,
        }),
        namespaces: watches.namespaces(),
        services: watches.services(),
        metrics: injection_metrics,
    };
    let wanted = Wanted {
        secret: args.webhook_cert_secret.clone(),
        sans: serving_names(&args.webhook_service, own_namespace),
        validity: args.webhook_cert_validity,
    };
    let cert = Arc::new(ServingCert::default());
    let secrets = Api::namespaced(client.clone(), own_namespace);
    let supply = match args.webhook_cert_source {
        CertSource::Rollgate => CertSupply::Own(CertKeeper {
            secrets,
            configs: Api::all(client),
            configuration: args.webhook_configuration.clone(),
            wanted,
            cert: cert.clone(),
        }),
        CertSource::CertManager => CertSupply::Issued(issued::IssuedCert {
            secrets,
            secret: args.webhook_cert_secret.clone(),
            cert: cert.clone(),
        }),
    };
    let mut synced = watches.synced();
    let pods = watches.pods();
    let serving = async move {
        let Some(certs) = supply.serve_first(&shutdown).await? else {
            return Ok(());
        };
        tokio::select! {
            _ = synced.wait_for(|s| *s) => {}
            _ = shutdown.clone().requested() => return Ok(()),
        }
        let tls = server::tls_config(cert)?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding the injection webhook on {addr}"))?;
        tracing::info!(addr = %listener.local_addr()?, path = server::MUTATE_PODS_PATH, "serving the readiness-gate injection webhook");
        let _ = listening_tx.send(true);
        let (served, (), ()) = tokio::join!(
            server::serve(listener, tls, injector.clone(), shutdown.clone()),
            certs.keep(shutdown.clone()),
            count_missing_pods(injector, pods, shutdown)
        );
        let _ = listening_tx.send(false);
        served.context("the injection webhook's server")
    };
    Some(Webhook {
        serving: Box::pin(serving),
        listening,
    })
}

/// Where the served certificate comes from.
#[allow(
    clippy::large_enum_variant,
    reason = "one per process, moved once: boxing would only add an allocation"
)]
enum CertSupply {
    Own(CertKeeper),
    Issued(issued::IssuedCert),
}

/// A supply serving its first certificate, which it compares the next ones with.
#[allow(
    clippy::large_enum_variant,
    reason = "one per process, moved once: boxing would only add an allocation"
)]
enum Serving {
    Own(CertKeeper, CertBundle),
    Issued(issued::IssuedCert, issued::IssuedPair),
}

impl CertSupply {
    /// Waits for the first certificate and serves it; `None` when shutdown came first.
    async fn serve_first(self, shutdown: &Shutdown) -> anyhow::Result<Option<Serving>> {
        Ok(match self {
            CertSupply::Own(keeper) => match keeper.first_bundle(shutdown).await {
                Some(bundle) => {
                    keeper.cert.set(&bundle)?;
                    Some(Serving::Own(keeper, bundle))
                }
                None => None,
            },
            CertSupply::Issued(issued) => issued
                .serve_first(shutdown)
                .await
                .map(|pair| Serving::Issued(issued, pair)),
        })
    }
}

impl Serving {
    /// Until shutdown, serves each new certificate of the supply.
    async fn keep(self, shutdown: Shutdown) {
        match self {
            Serving::Own(keeper, bundle) => keeper.keep(bundle, shutdown).await,
            Serving::Issued(issued, pair) => issued.keep(pair, shutdown).await,
        }
    }
}

/// How often the pods lacking an injected gate are counted.
const MISSING_EVERY: Duration = Duration::from_secs(30);

/// Until shutdown, `rollgate_gate_injection_missing_pods` from the shared stores.
async fn count_missing_pods(
    injector: review::Injector,
    pods: kube::runtime::reflector::Store<crate::object::CachedPod>,
    shutdown: Shutdown,
) {
    let mut tick = tokio::time::interval(MISSING_EVERY);
    let stop = shutdown.requested();
    let mut stop = std::pin::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = tick.tick() => {}
        }
        let count = missing::count_missing(
            &pods,
            &injector.namespaces,
            &injector.services,
            &injector.scope,
        );
        injector.metrics.missing_pods.set(count as i64);
    }
}

/// Keeps the served certificate, the Secret and the configuration's CA bundle in step.
struct CertKeeper {
    secrets: Api<Secret>,
    configs: Api<MutatingWebhookConfiguration>,
    configuration: String,
    wanted: Wanted,
    cert: Arc<ServingCert>,
}

/// How often a failed first read of the Secret is tried again.
const RETRY: Duration = Duration::from_secs(5);

impl CertKeeper {
    /// The Secret's certificates (made first if absent), tried until they come or
    /// shutdown starts (`None`).
    async fn first_bundle(&self, shutdown: &Shutdown) -> Option<CertBundle> {
        loop {
            tokio::select! {
                got = get_or_create(&self.secrets, &self.wanted) => match got {
                    Ok(bundle) => return Some(bundle),
                    Err(error) => tracing::warn!(%error, "webhook certificate: not available yet, retrying"),
                },
                _ = shutdown.clone().requested() => return None,
            }
            tokio::select! {
                _ = tokio::time::sleep(RETRY) => {}
                _ = shutdown.clone().requested() => return None,
            }
        }
    }

    /// Until shutdown: a Secret changed by any replica is served at once (watch);
    /// periodically, the serving certificate is renewed when due and the
    /// configuration's CA bundle set (it may be created or re-applied after rollgate
    /// started).
    async fn keep(&self, mut current: CertBundle, shutdown: Shutdown) {
        let changes = one_secret_changes(self.secrets.clone(), &self.wanted.secret);
        let mut changes = std::pin::pin!(changes);
        let mut tick = tokio::time::interval(refresh_every(self.wanted.validity));
        let stop = shutdown.requested();
        let mut stop = std::pin::pin!(stop);
        loop {
            let seen = tokio::select! {
                _ = &mut stop => return,
                change = changes.next() => match change {
                    Some(Ok(secret)) => read_bundle(&secret),
                    Some(Err(error)) => {
                        tracing::warn!(%error, "webhook certificate: Secret watch error, retrying with backoff");
                        None
                    }
                    None => None,
                },
                _ = tick.tick() => {
                    match ensure_ca_bundle(&self.configs, &self.configuration, &current.ca_bundle_pem()).await {
                        Ok(true) => {}
                        Ok(false) => tracing::debug!(configuration = %self.configuration, "webhook certificate: no MutatingWebhookConfiguration yet"),
                        Err(error) => tracing::warn!(%error, configuration = %self.configuration, "webhook certificate: writing the CA bundle failed"),
                    }
                    match get_or_create(&self.secrets, &self.wanted).await {
                        Ok(bundle) => Some(bundle),
                        Err(error) => {
                            tracing::warn!(%error, "webhook certificate: reading or renewing it failed");
                            None
                        }
                    }
                }
            };
            if let Some(bundle) = seen.filter(|b| *b != current) {
                match self.cert.set(&bundle) {
                    Ok(()) => {
                        tracing::info!(not_after = %bundle.not_after, "webhook certificate: serving the Secret's new certificate");
                        if bundle.ca_bundle_pem() != current.ca_bundle_pem() {
                            if let Err(error) = ensure_ca_bundle(
                                &self.configs,
                                &self.configuration,
                                &bundle.ca_bundle_pem(),
                            )
                            .await
                            {
                                tracing::warn!(%error, "webhook certificate: writing the new CA bundle failed");
                            }
                        }
                        current = bundle;
                    }
                    Err(error) => {
                        tracing::warn!(%error, "webhook certificate: the Secret's certificate is unusable")
                    }
                }
            }
        }
    }
}

/// The keeper's period: every 30 s, or more often for short-lived test certificates
/// (their renewal must come well before their end).
fn refresh_every(validity: Duration) -> Duration {
    (validity / 20).clamp(Duration::from_secs(1), Duration::from_secs(30))
}
