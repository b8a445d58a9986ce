//! Builds the service: opens the database and applies migrations, binds the
//! listeners (port 0 picks a free one), assembles the routers, and runs them
//! until a shutdown signal, then drains in-flight requests and closes the pool.

use std::{
    future::Future,
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context;
use axum::{
    Router,
    extract::{DefaultBodyLimit, State},
    middleware,
    routing::get,
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower_http::{catch_panic::CatchPanicLayer, limit::RequestBodyLimitLayer};

use ractor::{Actor, ActorRef};
use secrecy::ExposeSecret;

use crate::{
    actors::{
        accounts::Accounts,
        admission::{Admission, AdmissionArgs},
        provisioning::{DeliveryWriter, ProvisioningArgs, ProvisioningHandle},
        reconciler::ReconcilerArgs,
        services::{ServicesArgs, ServicesMsg, ServicesSupervisor},
        supplier_orders::{SupplierOrders, SupplierOrdersArgs},
        writer::CommitWriter,
    },
    auth::KeyDirectory,
    catalogue::{self, Catalogue},
    config::{SANDBOX_BAND, Settings},
    deposits::Deposits,
    docs,
    domain::cursor::CursorCodec,
    domain::rate::Window,
    http::server::{ConnectionLimits, serve},
    http::{
        self,
        envelope::{EnvelopeContext, envelope},
        error::{ApiError, ErrorCode},
    },
    limits::Limiter,
    operator,
    payments::{PaymentProvider, btcpay::BtcPayClient},
    simulators,
    simulators::{
        payments::PaymentsSim,
        supplier::{Faults, SupplierSim},
    },
    state::{AppState, Shared, Suppliers},
    store::{self, Db},
    supplier::{
        esim_access::EsimAccessClient,
        gate::RateGate,
        metered::{Metered, Tally},
        sandbox::SandboxSupplier,
    },
};

/// A built, bound, not yet running service.
pub struct Application {
    state: AppState,
    catalogue_refresh: Duration,
    /// How often admission reads the backlog.
    admission_refresh: Duration,
    /// How often deposits are reconciled with the provider (nodes that
    /// provision, as the order reconciler).
    deposit_reconcile: Option<Duration>,
    body_limit: usize,
    operator_body_limit: usize,
    connection_limits: ConnectionLimits,
    public: TcpListener,
    public_addr: SocketAddr,
    operator: TcpListener,
    operator_addr: SocketAddr,
    simulators: Option<TcpListener>,
    simulators_addr: Option<SocketAddr>,
    heartbeat: Heartbeat,
    /// Whether `/metrics` asks for the operator token.
    metrics_require_token: bool,
    /// Provisioning passes under way, waited for (bounded) at shutdown.
    provisioning_tasks: tokio_util::task::TaskTracker,
    supplier_sim: Arc<SupplierSim>,
    payments_sim: Arc<PaymentsSim>,
    services: Option<ActorRef<ServicesMsg>>,
    /// This node's ear on key and account changes made on other nodes
    /// (PostgreSQL); listening starts before the first request is accepted.
    changes: Option<store::changes::Subscription>,
}

impl Application {
    /// Connects, migrates and binds; logs a `listening` line per listener.
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        refuse_development_secrets(&settings)?;
        crate::metrics::install();
        let db = store::connect(&settings.database).await?;
        store::migrate(&db).await?;
        let changes = store::changes::subscribe(&db)
            .await
            .context("listening for key and account changes")?;
        if settings.catalogue.seed {
            catalogue::seed_if_empty(&db).await?;
        }
        let catalogue = Catalogue::load(
            db.clone(),
            Duration::from_secs(settings.catalogue.destinations_cache_seconds),
        )
        .await?;
        let catalogue_refresh = Duration::from_secs(settings.catalogue.refresh_seconds);
        let metrics_require_token = settings.metrics_require_token();

        let public = bind("public", settings.http.public_addr).await?;
        let operator = bind("operator", settings.http.operator_addr).await?;
        let simulators = match settings.simulators.enabled {
            true => Some(bind("simulators", settings.simulators.addr).await?),
            false => None,
        };
        let public_addr = public.local_addr()?;
        let operator_addr = operator.local_addr()?;
        let node_id = node_identity(&settings.node.id, settings.http.public_addr.port());
        let node_started = crate::domain::time::now();
        // Alive before the first order is claimed in its name.
        store::nodes::beat(&db, &node_id, node_started, node_started).await?;
        tracing::info!(node_id = %node_id, "node starting");
        let simulators_addr = simulators
            .as_ref()
            .map(TcpListener::local_addr)
            .transpose()?;
        let docs_base: Arc<str> = match &settings.docs_url {
            Some(url) => url.trim_end_matches('/').into(),
            None => format!("http://{public_addr}/docs").into(),
        };
        let supplier_sim = SupplierSim::new(
            settings.supplier.access_code.expose_secret(),
            settings.supplier.secret.expose_secret(),
            Faults {
                latency_ms: settings.simulators.supplier_latency_ms,
                fail_rate: settings.simulators.supplier_fail_rate,
                ..Faults::default()
            },
            settings.simulators.supplier_rate_limit,
        );
        supplier_sim.set_notify_url(format!("http://{public_addr}/callbacks/esim-access"));
        let shared_supplier_window = match settings.rate_limit.backend {
            crate::config::RateLimitBackend::Redis => {
                Some(Arc::new(Limiter::connect(&settings.rate_limit).await?))
            }
            crate::config::RateLimitBackend::Memory => None,
        };
        let supplier_gate = Arc::new(RateGate::new(
            settings.supplier.requests_per_second,
            shared_supplier_window,
        ));
        let (suppliers, supplier_tally) =
            build_suppliers(&settings, simulators_addr, supplier_gate.clone())?;
        let admission = (settings.admission.enabled && settings.supplier.requests_per_second > 0)
            .then(|| {
                Arc::new(Admission::new(AdmissionArgs {
                    calls_per_second: settings.supplier.requests_per_second,
                    batch_size: settings.supplier.batch_size,
                    horizon_seconds: settings
                        .admission
                        .horizon(settings.supplier.deadline_seconds),
                    tally: supplier_tally,
                    gate: supplier_gate,
                }))
            });
        let batching = settings.store.commit_mode == crate::config::CommitMode::Batch;
        // SQLite takes one writer at a time: batch across partners too.
        let shared_writer = (batching && db.get_database_backend() == sea_orm::DbBackend::Sqlite)
            .then(|| CommitWriter::start(db.clone()));
        let provisioning_handle = settings
            .provisioning
            .enabled
            .then(ProvisioningHandle::default);
        let accounts = Accounts::start(
            db.clone(),
            Duration::from_secs(settings.accounts.idle_seconds),
            batching,
            shared_writer,
            provisioning_handle.clone(),
            admission.clone(),
        )
        .await?;
        let payments_sim = PaymentsSim::new(
            settings.payments.api_key.expose_secret(),
            settings.payments.webhook_secret.expose_secret(),
        );
        payments_sim.set_callback_url(format!("http://{public_addr}/callbacks/btcpay"));
        let deposits = Deposits::new(
            db.clone(),
            build_payment_provider(&settings, simulators_addr)?,
            accounts.clone(),
            settings.payments.webhook_secret.clone(),
            settings.payments.invoice_minutes,
        );
        let supplier_orders = SupplierOrders::start(SupplierOrdersArgs {
            db: db.clone(),
            live: suppliers.live.clone(),
            sandbox: suppliers.sandbox.clone(),
            batch_size: settings.supplier.batch_size,
            batch_window: Duration::from_millis(settings.supplier.batch_window_ms),
            placements_in_flight: match settings.supplier.requests_per_second {
                0 => 64,
                rate => (rate as usize / 4).max(1),
            },
            max_attempts: settings.supplier.max_attempts,
            retry_backoff: Duration::from_millis(settings.supplier.retry_backoff_ms),
            poll_interval: Duration::from_millis(settings.supplier.poll_interval_ms),
            max_poll_interval: Duration::from_millis(settings.supplier.max_poll_interval_ms),
            deadline: Duration::from_secs(settings.supplier.deadline_seconds),
            node_id: node_id.clone(),
        });
        let provisioning_tasks = tokio_util::task::TaskTracker::new();
        let services = if let Some(handle) = provisioning_handle.clone() {
            let provisioning = ProvisioningArgs {
                writer: DeliveryWriter::start(db.clone()),
                db: db.clone(),
                accounts: accounts.clone(),
                supplier_orders: supplier_orders.clone(),
                concurrency: settings.provisioning.concurrency,
                max_attempts: settings.supplier.max_attempts,
                lease: Duration::from_secs(settings.provisioning.lease_seconds),
                liveness: settings.node.liveness_timeout(),
                node_id: node_id.clone(),
                in_flight: Arc::default(),
                tasks: provisioning_tasks.clone(),
            };
            let reconciler = ReconcilerArgs {
                db: db.clone(),
                accounts: accounts.clone(),
                interval: Duration::from_secs(settings.reconciler.interval_seconds),
                grace: Duration::from_secs(settings.reconciler.grace_seconds),
                liveness: settings.node.liveness_timeout(),
            };
            let (services, _) = Actor::spawn(
                None,
                ServicesSupervisor,
                ServicesArgs {
                    handle,
                    provisioning,
                    reconciler,
                },
            )
            .await?;
            Some(services)
        } else {
            tracing::info!("provisioning is off on this node");
            None
        };
        let limiter = Limiter::connect(&settings.rate_limit).await?;
        let bands = settings.rate_limit.bands;
        let fallback_band = *bands
            .get(SANDBOX_BAND)
            .context("the sandbox band is configured")?;
        let state = AppState::new(Shared {
            keys: Arc::new(KeyDirectory::new(
                db.clone(),
                Duration::from_secs(settings.auth.key_cache_seconds),
            )),
            limiter,
            trusted_proxies: settings.http.trusted_proxies,
            bands,
            fallback_band,
            failed_auth: Window {
                limit: settings.rate_limit.failed_auth_limit,
                window_seconds: settings.rate_limit.failed_auth_window_seconds,
            },
            accounts,
            suppliers,
            supplier_orders,
            fault_injection: settings.operator.fault_injection,
            provisioning_lease: settings
                .provisioning
                .enabled
                .then(|| chrono::Duration::seconds(settings.provisioning.lease_seconds as i64)),
            node_id,
            deposits,
            catalogue,
            admission,
            cursors: CursorCodec::new(settings.cursor.secret.expose_secret().as_bytes()),
            db,
            probe_timeout: Duration::from_millis(settings.database.probe_timeout_ms),
            started_at: Instant::now(),
            tiers: settings.tiers,
            sandbox_initial_float_cents: settings.sandbox.initial_float_cents,
            operator_token: settings.operator.token,
            docs_base,
        });
        Ok(Self {
            state,
            catalogue_refresh,
            admission_refresh: Duration::from_millis(settings.admission.refresh_ms),
            deposit_reconcile: settings
                .provisioning
                .enabled
                .then(|| Duration::from_secs(settings.reconciler.interval_seconds)),
            body_limit: settings.http.body_limit_bytes,
            operator_body_limit: settings.http.operator_body_limit_bytes,
            connection_limits: ConnectionLimits {
                header_read_timeout: Duration::from_millis(settings.http.header_read_timeout_ms),
                max_header_bytes: settings.http.max_header_bytes,
            },
            public,
            public_addr,
            operator,
            operator_addr,
            simulators,
            simulators_addr,
            metrics_require_token,
            provisioning_tasks,
            heartbeat: Heartbeat {
                started_at: node_started,
                every: Duration::from_secs(settings.node.heartbeat_seconds),
            },
            supplier_sim,
            payments_sim,
            services,
            changes,
        })
    }

    /// The bound partner API address.
    pub fn public_addr(&self) -> SocketAddr {
        self.public_addr
    }

    /// The bound operator API address.
    pub fn operator_addr(&self) -> SocketAddr {
        self.operator_addr
    }

    /// The bound simulators address, when they run.
    pub fn simulators_addr(&self) -> Option<SocketAddr> {
        self.simulators_addr
    }

    /// The database pool (tests use it to sabotage the database).
    pub fn db(&self) -> Db {
        self.state.db.clone()
    }

    /// Serves until `shutdown` resolves, then stops accepting, lets in-flight
    /// requests finish, and closes the pool.
    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let stop = CancellationToken::new();
        tokio::spawn({
            let stop = stop.clone();
            async move {
                shutdown.await;
                tracing::info!("shutdown requested; draining in-flight requests");
                stop.cancel();
            }
        });
        let envelope_ctx = EnvelopeContext {
            docs_base: self.state.docs_base.clone(),
        };
        let public_router = Router::new()
            .nest("/partner/v1", http::partner_routes(&self.state))
            .nest("/docs", docs::routes())
            .nest("/callbacks", http::callback_routes())
            .with_state(self.state.clone());
        let mut metrics = Router::new().route("/metrics", get(render_metrics));
        if self.metrics_require_token {
            metrics = metrics.route_layer(middleware::from_fn_with_state(
                self.state.clone(),
                operator::require_operator_token,
            ));
        }
        let operator_router = Router::new()
            .nest("/operator/v1", operator::routes(self.state.clone()))
            .merge(metrics)
            .with_state(self.state.clone());

        let public = serve(
            self.public,
            finish(public_router, &envelope_ctx, self.body_limit).layer(
                middleware::from_fn_with_state("public", crate::metrics::track_requests),
            ),
            self.connection_limits,
            stop.clone(),
        );
        let operator = serve(
            self.operator,
            finish(operator_router, &envelope_ctx, self.operator_body_limit).layer(
                middleware::from_fn_with_state("operator", crate::metrics::track_requests),
            ),
            self.connection_limits,
            stop.clone(),
        );
        let refresher = tokio::spawn(refresh_catalogue(
            self.state.clone(),
            self.catalogue_refresh,
            stop.clone(),
        ));
        let follower = self.changes.map(|subscription| {
            tokio::spawn(crate::auth::follow_changes(
                self.state.keys.clone(),
                subscription,
                stop.clone(),
            ))
        });
        let admission = self.state.admission.clone().map(|admission| {
            tokio::spawn(crate::actors::admission::refresh_until_stopped(
                admission,
                self.state.db.clone(),
                self.admission_refresh,
                stop.clone(),
            ))
        });
        let deposit_reconciler = self.deposit_reconcile.map(|every| {
            tokio::spawn(crate::deposits::reconcile_until_stopped(
                self.state.deposits.clone(),
                every,
                stop.clone(),
            ))
        });
        let heartbeat = tokio::spawn(beat_until_stopped(
            self.state.clone(),
            self.heartbeat,
            stop.clone(),
        ));
        let simulators = async {
            match self.simulators {
                Some(listener) => {
                    serve(
                        listener,
                        finish(
                            simulators::routes(
                                self.supplier_sim.clone(),
                                self.payments_sim.clone(),
                            ),
                            &envelope_ctx,
                            self.operator_body_limit,
                        ),
                        self.connection_limits,
                        stop.clone(),
                    )
                    .await
                }
                None => Ok(()),
            }
        };
        let served = tokio::try_join!(public, operator, simulators);
        stop.cancel();
        let _ = refresher.await;
        let _ = heartbeat.await;
        for task in [follower, admission, deposit_reconciler]
            .into_iter()
            .flatten()
        {
            let _ = task.await;
        }
        // Orderly, each step bounded: every account actor commits what is
        // queued (no new actor starts); provisioning stops taking work and
        // the passes under way get a moment to finish; then the node says it
        // stopped, so other nodes take over what it still holds at once.
        let patience = Duration::from_secs(10);
        self.state.accounts.drain_all(patience).await;
        if let Some(handle) = self.state.accounts.provisioning() {
            handle.detach();
        }
        if let Some(services) = &self.services {
            let _ = services
                .stop_and_wait(Some("shutdown".into()), Some(patience))
                .await;
        }
        self.provisioning_tasks.close();
        if tokio::time::timeout(patience, self.provisioning_tasks.wait())
            .await
            .is_err()
        {
            tracing::info!(
                passes = self.provisioning_tasks.len(),
                "provisioning passes still under way at shutdown are left to the other nodes or the next start"
            );
        }
        // Whatever this node still holds is free for the others now.
        if let Err(err) = store::nodes::stopped(
            &self.state.db,
            &self.state.node_id,
            crate::domain::time::now(),
        )
        .await
        {
            tracing::warn!(error = %err, "could not record this node's stop; its claims lapse with their lease");
        }
        self.state.db.close_by_ref().await.ok();
        tracing::info!("stopped");
        served.map(|_| ())
    }
}

/// `GET /metrics` on the operator listener: the gauges read from their
/// sources at scrape time, then every series.
async fn render_metrics(State(state): State<AppState>) -> axum::response::Response {
    let load = state.accounts.load();
    crate::metrics::render(crate::metrics::ScrapeGauges {
        accounts_live: load.live,
        accounts_queued: load.queued,
        accounts_max_queued: load.max_queued,
        provisioning_running: state
            .accounts
            .provisioning()
            .is_some_and(ProvisioningHandle::is_running),
        pool: store::pool_use(&state.db),
    })
}

/// Outside development, refuses to start while any public development
/// secret is configured, naming each setting to change.
fn refuse_development_secrets(settings: &Settings) -> anyhow::Result<()> {
    let problems = settings.production_problems();
    if problems.is_empty() {
        return Ok(());
    }
    anyhow::bail!(
        "refusing to start with development secrets outside development ({}):\n  - {}\n\
         (`esim-reseller config check` lists what would be refused)",
        settings.why_not_development(),
        problems.join("\n  - ")
    )
}

/// When this node started and how often it says it is alive.
#[derive(Debug, Clone, Copy)]
struct Heartbeat {
    started_at: chrono::DateTime<chrono::Utc>,
    every: Duration,
}

/// Records this node's heartbeat until `stop`; a missed beat is logged and
/// retried at the next tick (three missed and other nodes take its claims).
async fn beat_until_stopped(state: AppState, heartbeat: Heartbeat, stop: CancellationToken) {
    crate::periodic::every(heartbeat.every, &stop, || async {
        let now = crate::domain::time::now();
        if let Err(err) =
            store::nodes::beat(&state.db, &state.node_id, heartbeat.started_at, now).await
        {
            tracing::warn!(error = %err, node_id = %state.node_id, "heartbeat not recorded");
        }
    })
    .await;
}

/// This node's id: the configured one, else `<host name>-<public port>`,
/// stable across restarts of the same service on the same host (a random
/// one when the port was picked by the system, as in tests).
fn node_identity(configured: &str, public_port: u16) -> Arc<str> {
    if !configured.is_empty() {
        return configured.into();
    }
    if public_port == 0 {
        return format!("nd_{}", uuid::Uuid::now_v7().simple()).into();
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default();
    let host: String = host
        .trim()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(32)
        .collect();
    let host = if host.is_empty() {
        "node".to_owned()
    } else {
        host
    };
    format!("{host}-{public_port}").into()
}

/// The live supplier (the configured API, or the simulator on this node) and
/// the in-process sandbox supplier.
fn build_suppliers(
    settings: &Settings,
    simulators_addr: Option<SocketAddr>,
    gate: Arc<RateGate>,
) -> anyhow::Result<(Suppliers, Arc<Tally>)> {
    let base_url = match (&settings.supplier.base_url, simulators_addr) {
        (Some(url), _) => url.clone(),
        (None, Some(addr)) => format!("http://{addr}"),
        (None, None) => {
            anyhow::bail!("`supplier.base_url` is required when the simulators are off")
        }
    };
    let live = EsimAccessClient::new(
        &base_url,
        settings.supplier.access_code.clone(),
        settings.supplier.secret.clone(),
        Duration::from_millis(settings.supplier.timeout_ms),
        gate,
    )?;
    let live = Metered::new(Arc::new(live));
    let tally = live.tally();
    let suppliers = Suppliers {
        live: Arc::new(live),
        sandbox: Arc::new(SandboxSupplier::new(Duration::from_millis(
            settings.sandbox.slow_provisioning_ms,
        ))),
    };
    Ok((suppliers, tally))
}

/// The payment provider: the configured BTCPay server, or the simulator on
/// this node, or none (then `POST /deposits` answers 503).
fn build_payment_provider(
    settings: &Settings,
    simulators_addr: Option<SocketAddr>,
) -> anyhow::Result<Option<Arc<dyn PaymentProvider>>> {
    let base_url = match (&settings.payments.base_url, simulators_addr) {
        (Some(url), _) => url.clone(),
        (None, Some(addr)) => format!("http://{addr}"),
        (None, None) => return Ok(None),
    };
    let client = BtcPayClient::new(
        &base_url,
        &settings.payments.store_id,
        settings.payments.api_key.clone(),
        Duration::from_secs(15),
    )?;
    Ok(Some(Arc::new(client)))
}

/// Notices catalogue changes made through other nodes.
async fn refresh_catalogue(state: AppState, every: Duration, stop: CancellationToken) {
    crate::periodic::every(every, &stop, || async {
        if let Err(err) = state.catalogue.refresh_if_changed().await {
            tracing::warn!(error = %err, "catalogue refresh failed; serving the last snapshot");
        }
    })
    .await;
}

/// Adds what every listener shares: the unknown-path fallback, panic
/// catching, the body limit, and (outermost) the error envelope.
fn finish(router: Router, ctx: &EnvelopeContext, body_limit: usize) -> Router {
    router
        .fallback(|| async { ApiError::new(ErrorCode::NotFound).with_message("No such path.") })
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(RequestBodyLimitLayer::new(body_limit))
        .layer(CatchPanicLayer::new())
        .layer(middleware::from_fn_with_state(ctx.clone(), envelope))
}

async fn bind(listener: &'static str, addr: SocketAddr) -> anyhow::Result<TcpListener> {
    let bound = TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the {listener} listener to {addr}"))?;
    tracing::info!(listener, addr = %bound.local_addr()?, "listening");
    Ok(bound)
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let interrupt = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {},
        () = terminate => {},
    }
}
