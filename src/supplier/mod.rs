//! The eSIM supplier: a [`Supplier`] trait, the HTTP adapter of the real
//! wholesale API ([`esim_access`]), the in-process supplier that sandbox
//! orders use ([`sandbox`]), a rate gate every live call passes ([`gate`]),
//! and [`metered`], which counts and times the calls of another.
//!
//! One supplier order carries many units (its `count`), across our orders
//! and partners, under a transaction id written down before the call: the
//! supplier treats a repeated transaction id as the same order, so a retry,
//! a re-drive or a crash between the call and its answer never buys twice.

pub mod esim_access;
pub mod gate;
pub(crate) mod metered;
pub(crate) mod sandbox;

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
    /// Time-out, 5xx, garbage, "busy", "slow down", clock skew, or an answer
    /// not known to be final: the same call (same transaction id) may
    /// succeed later, and repeating it never buys twice.
    #[error("supplier unavailable: {0}")]
    Transient(String),
    /// The supplier answered that it will not do this (no stock, unknown
    /// package, no balance): nothing was bought.
    #[error("supplier refused: {0}")]
    Refused(String),
}

/// What the service needs from a supplier.
#[async_trait]
pub trait Supplier: Send + Sync {
    /// Places (or finds again) the supplier order `transaction_id` for
    /// `count` profiles of a package; returns the supplier's order number.
    async fn place_order(
        &self,
        transaction_id: &str,
        package_code: &str,
        count: u32,
    ) -> Result<String, SupplierError>;
    /// Asks which profiles of a supplier order are allocated.
    async fn query(&self, order_no: &str) -> Result<Allocation, SupplierError>;
    /// Asks how much data a profile used: by its `esimTranNo` when known,
    /// else by its ICCID.
    async fn usage(&self, iccid: &str, esim_tran_no: Option<&str>) -> Result<Usage, SupplierError>;
}
