//! The state every handler reads: the database, the actors and services
//! behind the edges, and the settings the edges need. Built by
//! [`crate::app`], read by [`crate::http`], [`crate::operator`] and
//! [`crate::docs`]; it knows nothing of HTTP itself, so the edges depend on
//! it and never on the wiring.

use std::{
    collections::BTreeMap,
    ops::Deref,
    sync::Arc,
    time::{Duration, Instant},
};

use ipnet::IpNet;
use secrecy::SecretString;

use crate::{
    actors::{accounts::Accounts, admission::Admission, supplier_orders::SupplierOrders},
    auth::KeyDirectory,
    catalogue::Catalogue,
    config::TierSettings,
    deposits::Deposits,
    domain::{
        cursor::CursorCodec,
        rate::{Band, Window},
    },
    limits::Limiter,
    store::Db,
    supplier::Supplier,
};

/// State shared by every handler.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    /// Shares `shared` with every handler.
    pub fn new(shared: Shared) -> Self {
        Self(Arc::new(shared))
    }
}

/// What [`AppState`] holds.
pub struct Shared {
    /// The database pool.
    pub db: Db,
    /// Point reads of a SQLite file on the handler's thread (none on
    /// PostgreSQL): the hottest fresh reads, without the pool's hand-off.
    pub inline_reads: Option<Arc<crate::store::inline::InlineReader>>,
    /// Fresh reads of floats through the pool, gathered into one query per
    /// round (where there is no inline reader, or its read fell back).
    pub float_reads: crate::store::partners::FloatReads,
    /// Health reports the database down past this.
    pub probe_timeout: Duration,
    /// When this process started serving.
    pub started_at: Instant,
    /// Commercial tiers by name.
    pub tiers: BTreeMap<String, TierSettings>,
    /// What a new partner's sandbox float starts with.
    pub sandbox_initial_float_cents: i64,
    /// Bearer token of the operator API.
    pub operator_token: SecretString,
    /// Base of `doc_url`.
    pub docs_base: Arc<str>,
    /// Cached key lookups.
    pub keys: Arc<KeyDirectory>,
    /// Rate-limit and failed-authentication counters.
    pub limiter: Arc<Limiter>,
    /// Peers whose `X-Forwarded-For` is believed.
    pub trusted_proxies: Vec<IpNet>,
    /// Rate-limit bands by name.
    pub bands: BTreeMap<String, Band>,
    /// Used if a tier names a band that vanished (validation prevents it).
    pub fallback_band: Band,
    /// The failed-authentication budget per source address.
    pub failed_auth: Window,
    /// The plan catalogue, in memory.
    pub catalogue: Arc<Catalogue>,
    /// What Airalo signs its webhooks with (the account's client secret).
    pub airalo_webhook_secret: secrecy::SecretString,
    /// When this node last took a good periodic backup.
    pub last_backup: crate::backup::LastBackup,
    /// Whether this node takes periodic backups.
    pub backups_on: bool,
    /// Signs and verifies pagination cursors.
    pub cursors: CursorCodec,
    /// The account actors.
    pub accounts: Accounts,
    /// Suppliers of live and sandbox orders.
    pub suppliers: Suppliers,
    /// Whether the operator may inject actor failures.
    pub fault_injection: bool,
    /// A money movement above this (either sign) waits for a second operator.
    pub four_eyes_cents: i64,
    /// How long a held movement waits for its approval.
    pub approval_lapse: chrono::Duration,
    /// Whether the console's session cookie is `Secure` (HTTPS only).
    pub console_secure_cookie: bool,
    /// Crypto deposits.
    pub deposits: Deposits,
    /// When this node provisions: how long a freshly accepted order is
    /// claimed for it (the order is inserted claimed, saving a write).
    pub provisioning_lease: Option<chrono::Duration>,
    /// This process's id (`nd_...`): it names the provisioning claims it holds.
    pub node_id: Arc<str>,
    /// Supplier orders of this node; the supplier's webhook wakes them.
    pub supplier_orders: SupplierOrders,
    /// How long the supplier may take over an order (`supplier.deadline_seconds`):
    /// an order still processing past it is shown to operators as stuck.
    pub order_deadline: chrono::Duration,
    /// Admission of live orders within the supplier's capacity (`None`: off).
    pub admission: Option<Arc<Admission>>,
}

/// The supplier of each mode.
#[derive(Clone)]
pub struct Suppliers {
    /// The live suppliers, their route and breakers.
    pub live: Arc<crate::supplier::set::SupplierSet>,
    pub sandbox: Arc<dyn Supplier>,
}

impl Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}
