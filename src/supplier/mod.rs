//! The eSIM supplier: a [`Supplier`] trait, the HTTP adapter of the real
//! wholesale API ([`esim_access`]), the in-process supplier that sandbox
//! orders use ([`sandbox`]), a rate gate every live call passes ([`gate`]),
//! and [`metered`], which counts and times the calls of another.
//!
//! One supplier order carries many units (its `count`), across our orders
//! and partners, under a transaction id written down before the call: the
//! supplier treats a repeated transaction id as the same order, so a retry,
//! a re-drive or a crash between the call and its answer never buys twice.

pub mod airalo;
pub mod esim_access;
pub mod gate;
pub(crate) mod metered;
pub(crate) mod sandbox;
pub(crate) mod set;

use async_trait::async_trait;

/// A profile the supplier allocated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    pub iccid: String,
    /// `LPA:1$<smdp>$<matching id>`.
    pub activation_code: String,
    /// The supplier's number of the profile (`esimTranNo`), which its usage
    /// query asks by.
    pub esim_tran_no: Option<String>,
}

/// The HTTP client of a supplier adapter: one per supplier, so connections
/// are kept and reused; every call bounded by `timeout`.
pub(crate) fn http_client(timeout: std::time::Duration) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .timeout(timeout)
        .pool_max_idle_per_host(16)
        .tcp_nodelay(true)
        .build()
}

/// A supplier order the supplier took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    /// The supplier's own number of the order (what [`Supplier::query`] asks by).
    pub order_no: String,
    /// What the supplier charges for one profile, in US cents, when its
    /// answer says (rounded up to the cent).
    pub unit_cost_cents: Option<i64>,
    /// The profiles, when the answer already carries them (a synchronous
    /// order): no query is needed when they are all there.
    pub profiles: Vec<Profile>,
}

impl Placed {
    /// An order number with no price and no profiles in the answer.
    pub fn unpriced(order_no: impl Into<String>) -> Self {
        Self {
            order_no: order_no.into(),
            unit_cost_cents: None,
            profiles: Vec::new(),
        }
    }
}

/// Where a placed supplier order stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allocation {
    /// Still allocating; ask again later (or when the supplier's webhook says so).
    Pending,
    /// The profiles allocated so far, in no particular order.
    Ready(Vec<Profile>),
}

/// Data used by a profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage {
    pub data_used_mb: i64,
    pub data_total_mb: i64,
}

/// Why a supplier call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SupplierError {
    /// Time-out, 5xx, garbage, clock skew, or an answer
    /// not known to be final: the same call (same transaction id) may
    /// succeed later, and repeating it never buys twice.
    #[error("supplier unavailable: {0}")]
    Transient(String),
    /// The supplier answered "slow down" (HTTP 429, "system busy"): the
    /// call was not served and may be made again later. An answer, so the
    /// supplier is up: it never counts toward taking it out of the route.
    #[error("supplier asked to slow down: {0}")]
    SlowDown(String),
    /// The supplier answered that it will not do this (no stock, unknown
    /// package, no balance): nothing was bought.
    #[error("supplier refused: {0}")]
    Refused(String),
    /// The request never left (connection refused, name not resolved, the
    /// supplier out of the route): nothing was taken, so the units may go to
    /// another supplier at once.
    #[error("supplier not reached: {0}")]
    NotSent(String),
}

impl SupplierError {
    /// Whether the supplier is certainly not going to deliver what this
    /// call asked for (a refusal, or a request that never left).
    pub fn certainly_not_taken(&self) -> bool {
        matches!(self, SupplierError::Refused(_) | SupplierError::NotSent(_))
    }
}

/// What the service needs from a supplier.
#[async_trait]
pub trait Supplier: Send + Sync {
    /// Places (or, for a supplier that treats a repeated transaction id as
    /// the same order, finds again) the supplier order `transaction_id` for
    /// `count` profiles of a package.
    async fn place_order(
        &self,
        transaction_id: &str,
        package_code: &str,
        count: u32,
    ) -> Result<Placed, SupplierError>;
    /// Asks which profiles of a supplier order are allocated.
    async fn query(&self, order_no: &str) -> Result<Allocation, SupplierError>;
    /// Asks how much data a profile used: by its `esimTranNo` when known,
    /// else by its ICCID.
    async fn usage(&self, iccid: &str, esim_tran_no: Option<&str>) -> Result<Usage, SupplierError>;
    /// Whether placing again under the same transaction id is the same
    /// order (eSIM Access: yes). A supplier without such a key answers
    /// false, and before any placement that may repeat an earlier one whose
    /// answer was lost, the caller asks [`Supplier::find_order`] first.
    fn idempotent_placement(&self) -> bool {
        true
    }
    /// The order placed under `transaction_id`, if the supplier has one
    /// (`Ok(None)`: it certainly has none, so placing cannot buy twice).
    async fn find_order(&self, transaction_id: &str) -> Result<Option<Placed>, SupplierError> {
        let _ = transaction_id;
        Ok(None)
    }
    /// Most profiles one supplier order may carry.
    fn max_units_per_order(&self) -> u32 {
        u32::MAX
    }
}
