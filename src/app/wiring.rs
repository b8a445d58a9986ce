//! Building a node, step by step: the database, the listeners, the node's
//! identity, the suppliers and admission, the actors, and the state the
//! handlers share.

use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context;
use ractor::{Actor, ActorRef};
use secrecy::ExposeSecret;
use tokio::net::TcpListener;

use super::{
    Application, Bound,
    running::Heartbeat,
    supply::{Supply, build_payment_provider, simulators},
};
use crate::{
    actors::{
        accounts::Accounts,
        claims::HeldClaims,
        deliveries::DeliveryWriter,
        provisioning::{ProvisioningArgs, ProvisioningHandle},
        reconciler::ReconcilerArgs,
        services::{ServicesArgs, ServicesMsg, ServicesSupervisor},
        supplier_orders::{SupplierOrders, SupplierOrdersArgs},
        writer::CommitWriter,
    },
    auth::KeyDirectory,
    catalogue::{self, Catalogue},
    config::{CommitMode, SANDBOX_BAND, Settings},
    deposits::Deposits,
    domain::{cursor::CursorCodec, rate::Window, time},
    http::server::ConnectionLimits,
    state::{AppState, Shared},
    store::{self, Db, changes::Subscription},
};

impl Application {
    /// Connects, migrates and binds; logs a `listening` line per listener.
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        refuse_development_secrets(&settings)?;
        crate::metrics::install();
        let (db, changes) = open_database(&settings).await?;
        let catalogue = Arc::new(
            Catalogue::load(
                db.clone(),
                Duration::from_secs(settings.catalogue.destinations_cache_seconds),
            )
            .await?,
        );
        let listeners = Listeners::bind(&settings).await?;
        let node_id = node_identity(&settings.node.id, settings.http.public_addr.port());
        let heartbeat = Heartbeat {
            started_at: time::now(),
            every: Duration::from_secs(settings.node.heartbeat_seconds),
        };
        // Alive before the first order is claimed in its name.
        store::nodes::beat(&db, &node_id, heartbeat.started_at, heartbeat.started_at).await?;
        tracing::info!(node_id = %node_id, "node starting");
        let sims = simulators(&settings, listeners.public_addr);
        let supply = Supply::start(&settings, listeners.simulators_addr, &catalogue).await?;
        let actors = Actors::start(
            &settings,
            &db,
            &node_id,
            &supply,
            &catalogue,
            listeners.simulators_addr,
        )
        .await?;
        let tuning = Tuning::of(&settings);
        let state = shared_state(
            settings, db, node_id, catalogue, supply, &actors, &listeners,
        )
        .await?;
        Ok(Self {
            state,
            tuning,
            public_addr: listeners.public_addr,
            operator_addr: listeners.operator_addr,
            simulators_addr: listeners.simulators_addr,
            bound: Some(Bound {
                public: listeners.public,
                operator: listeners.operator,
                simulators: listeners.simulators,
            }),
            provisioning_tasks: actors.provisioning_tasks,
            heartbeat,
            sims,
            services: actors.services,
            changes,
        })
    }
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

/// Connects and migrates, starts listening for other nodes' changes (before
/// the first request is accepted), and seeds the catalogue if asked.
async fn open_database(settings: &Settings) -> anyhow::Result<(Db, Option<Subscription>)> {
    let db = store::connect(&settings.database).await?;
    store::migrate(&db).await?;
    let changes = store::changes::subscribe(&db)
        .await
        .context("listening for key and account changes")?;
    if settings.catalogue.seed {
        catalogue::seed_if_empty(&db).await?;
    }
    Ok((db, changes))
}

/// The bound listeners and their addresses.
struct Listeners {
    public: TcpListener,
    public_addr: SocketAddr,
    operator: TcpListener,
    operator_addr: SocketAddr,
    simulators: Option<TcpListener>,
    simulators_addr: Option<SocketAddr>,
}

impl Listeners {
    async fn bind(settings: &Settings) -> anyhow::Result<Self> {
        let public = bind("public", settings.http.public_addr).await?;
        let operator = bind("operator", settings.http.operator_addr).await?;
        let simulators = match settings.simulators.enabled {
            true => Some(bind("simulators", settings.simulators.addr).await?),
            false => None,
        };
        Ok(Self {
            public_addr: public.local_addr()?,
            operator_addr: operator.local_addr()?,
            simulators_addr: simulators
                .as_ref()
                .map(TcpListener::local_addr)
                .transpose()?,
            public,
            operator,
            simulators,
        })
    }
}

async fn bind(listener: &'static str, addr: SocketAddr) -> anyhow::Result<TcpListener> {
    let bound = TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the {listener} listener to {addr}"))?;
    tracing::info!(listener, addr = %bound.local_addr()?, "listening");
    Ok(bound)
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

/// The actors and services of a node.
struct Actors {
    accounts: Accounts,
    deposits: Deposits,
    supplier_orders: SupplierOrders,
    /// The provisioning supervisor, on nodes that provision.
    services: Option<ActorRef<ServicesMsg>>,
    provisioning_tasks: tokio_util::task::TaskTracker,
}

impl Actors {
    async fn start(
        settings: &Settings,
        db: &Db,
        node_id: &Arc<str>,
        supply: &Supply,
        catalogue: &Arc<Catalogue>,
        simulators_addr: Option<SocketAddr>,
    ) -> anyhow::Result<Self> {
        let provisioning = settings
            .provisioning
            .enabled
            .then(ProvisioningHandle::default);
        let accounts = start_accounts(settings, db, provisioning.clone(), supply).await?;
        let deposits = Deposits::new(
            db.clone(),
            build_payment_provider(settings, simulators_addr)?,
            accounts.clone(),
            settings.payments.webhook_secret.clone(),
            settings.payments.invoice_minutes,
        );
        let supplier_orders = SupplierOrders::start(supplier_orders_args(
            settings, db, node_id, supply, catalogue,
        ));
        let provisioning_tasks = tokio_util::task::TaskTracker::new();
        let services = match provisioning {
            Some(handle) => {
                let lease = Duration::from_secs(settings.provisioning.lease_seconds);
                let claims = HeldClaims::default();
                claims.renew_every_third_of(lease, db.clone(), node_id.clone());
                let provisioning = ProvisioningArgs {
                    writer: DeliveryWriter::start(db.clone()),
                    db: db.clone(),
                    accounts: accounts.clone(),
                    supplier_orders: supplier_orders.clone(),
                    concurrency: settings.provisioning.concurrency,
                    max_attempts: settings.supplier.max_attempts,
                    lease,
                    claims,
                    liveness: settings.node.liveness_timeout(),
                    node_id: node_id.clone(),
                    in_flight: Arc::default(),
                    tasks: provisioning_tasks.clone(),
                };
                Some(start_services(settings, db, &accounts, handle, provisioning).await?)
            }
            None => {
                tracing::info!("provisioning is off on this node");
                None
            }
        };
        Ok(Self {
            accounts,
            deposits,
            supplier_orders,
            services,
            provisioning_tasks,
        })
    }
}

/// The account actors' directory, batching per the configured commit mode.
async fn start_accounts(
    settings: &Settings,
    db: &Db,
    provisioning: Option<ProvisioningHandle>,
    supply: &Supply,
) -> anyhow::Result<Accounts> {
    let batching = settings.store.commit_mode == CommitMode::Batch;
    // Batch across partners too: the batches of many account actors go in
    // one transaction of a constant number of statements (SQLite takes one
    // writer at a time; PostgreSQL is spared a commit and its round trips
    // per partner).
    let shared_writer = batching.then(|| CommitWriter::start(db.clone()));
    Accounts::start(
        db.clone(),
        Duration::from_secs(settings.accounts.idle_seconds),
        batching,
        shared_writer,
        provisioning,
        supply.admission.clone(),
    )
    .await
}

fn supplier_orders_args(
    settings: &Settings,
    db: &Db,
    node_id: &Arc<str>,
    supply: &Supply,
    catalogue: &Arc<Catalogue>,
) -> SupplierOrdersArgs {
    let supplier = &settings.supplier;
    SupplierOrdersArgs {
        db: db.clone(),
        // Two: the supplier orders' drivers write concurrently.
        writes: crate::store::WriterDb::new(db, 2),
        inline: crate::actors::inline_writer(db, "supplier_orders").map(Arc::new),
        live: supply.suppliers.live.clone(),
        sandbox: supply.suppliers.sandbox.clone(),
        catalogue: catalogue.clone(),
        batch_size: supplier.batch_size,
        batch_window: Duration::from_millis(supplier.batch_window_ms),
        retry_backoff: Duration::from_millis(supplier.retry_backoff_ms),
        max_retry_backoff: Duration::from_millis(supplier.max_retry_backoff_ms),
        // Never more than a quarter of the deadline, so a short deadline
        // still leaves time to retry.
        reserve: Duration::from_secs(supplier.reserve_seconds.min(supplier.deadline_seconds / 4)),
        poll_interval: Duration::from_millis(supplier.poll_interval_ms),
        max_poll_interval: Duration::from_millis(supplier.max_poll_interval_ms),
        deadline: Duration::from_secs(supplier.deadline_seconds),
        node_id: node_id.clone(),
    }
}

/// The supervisor of provisioning and the reconciler.
async fn start_services(
    settings: &Settings,
    db: &Db,
    accounts: &Accounts,
    handle: ProvisioningHandle,
    provisioning: ProvisioningArgs,
) -> anyhow::Result<ActorRef<ServicesMsg>> {
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
    Ok(services)
}

/// What the running node reads from the configuration, taken before the
/// configuration is handed to the shared state.
pub(super) struct Tuning {
    pub(super) catalogue_refresh: Duration,
    /// How often admission reads the backlog.
    pub(super) admission_refresh: Duration,
    /// How often deposits are reconciled with the provider (nodes that
    /// provision, as the order reconciler).
    pub(super) deposit_reconcile: Option<Duration>,
    pub(super) body_limit: usize,
    pub(super) operator_body_limit: usize,
    pub(super) connection_limits: ConnectionLimits,
    /// Whether `/metrics` asks for the operator token.
    pub(super) metrics_require_token: bool,
    /// Periodic backups of the SQLite database, when configured.
    pub(super) backup: Option<crate::backup::Schedule>,
    /// Longest a partner request may take.
    pub(super) request_timeout: Duration,
}

impl Tuning {
    fn of(settings: &Settings) -> Self {
        Self {
            catalogue_refresh: Duration::from_secs(settings.catalogue.refresh_seconds),
            admission_refresh: Duration::from_millis(settings.admission.refresh_ms),
            // Deposits are reconciled by the nodes that provision, as orders are.
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
            metrics_require_token: settings.metrics_require_token(),
            request_timeout: Duration::from_millis(settings.http.request_timeout_ms),
            backup: (settings.backup.every_minutes > 0.0).then(|| crate::backup::Schedule {
                every: Duration::try_from_secs_f64(settings.backup.every_minutes * 60.0)
                    .unwrap_or(Duration::from_secs(60)),
                dir: settings.backup.dir.clone(),
                keep: settings.backup.keep,
            }),
        }
    }
}

/// What every handler shares; takes the rest of the configuration.
async fn shared_state(
    settings: Settings,
    db: Db,
    node_id: Arc<str>,
    catalogue: Arc<Catalogue>,
    supply: Supply,
    actors: &Actors,
    listeners: &Listeners,
) -> anyhow::Result<AppState> {
    let limiter = supply.limiter.clone();
    let bands = settings.rate_limit.bands;
    let fallback_band = *bands
        .get(SANDBOX_BAND)
        .context("the sandbox band is configured")?;
    let docs_base: Arc<str> = match &settings.docs_url {
        Some(url) => url.trim_end_matches('/').into(),
        None => format!("http://{}/docs", listeners.public_addr).into(),
    };
    Ok(AppState::new(Shared {
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
        accounts: actors.accounts.clone(),
        suppliers: supply.suppliers,
        supplier_orders: actors.supplier_orders.clone(),
        fault_injection: settings.operator.fault_injection,
        four_eyes_cents: settings.operator.four_eyes_cents,
        approval_lapse: chrono::Duration::seconds(settings.operator.approval_lapse_seconds),
        console_secure_cookie: settings.operator.console_secure_cookie,
        order_deadline: chrono::Duration::from_std(Duration::from_secs(
            settings.supplier.deadline_seconds,
        ))
        .unwrap_or(chrono::Duration::MAX),
        provisioning_lease: settings
            .provisioning
            .enabled
            .then(|| chrono::Duration::seconds(settings.provisioning.lease_seconds as i64)),
        node_id,
        deposits: actors.deposits.clone(),
        catalogue,
        airalo_webhook_secret: settings.airalo.client_secret.clone(),
        last_backup: crate::backup::LastBackup::default(),
        backups_on: settings.backup.every_minutes > 0.0,
        admission: supply.admission,
        cursors: CursorCodec::new(settings.cursor.secret.expose_secret().as_bytes()),
        inline_reads: store::inline::InlineReader::for_db(&db),
        float_reads: store::partners::float_reads(&db),
        db,
        probe_timeout: Duration::from_millis(settings.database.probe_timeout_ms),
        started_at: Instant::now(),
        tiers: settings.tiers,
        sandbox_initial_float_cents: settings.sandbox.initial_float_cents,
        operator_token: settings.operator.token,
        docs_base,
    }))
}
