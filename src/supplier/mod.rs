//! The eSIM supplier: a [`Supplier`] trait, the HTTP adapter of the real
//! wholesale API ([`esim_access`]), and the in-process supplier that sandbox
//! orders use ([`sandbox`]); [`metered`] counts and times the calls of another.
//!
//! One supplier order is placed per unit, with the unit id as the supplier's
//! transaction id: the supplier treats a repeated transaction id as the same
//! order, so a retry or a re-drive never buys twice.

pub mod esim_access;
pub mod metered;
pub mod sandbox;

use async_trait::async_trait;

/// A profile the supplier allocated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    pub iccid: String,
    /// `LPA:1$<smdp>$<matching id>`.
    pub activation_code: String,
}

/// Where a placed order stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allocation {
    /// Still allocating; ask again later.
    Pending,
    /// Ready.
    Ready(Profile),
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
    /// Time-out, 5xx, garbage: the same call may succeed later.
    #[error("supplier unavailable: {0}")]
    Transient(String),
    /// The supplier answered that it cannot provision this (no stock, unknown package).
    #[error("supplier refused: {0}")]
    Refused(String),
}

/// What the service needs from a supplier.
#[async_trait]
pub trait Supplier: Send + Sync {
    /// Places (or finds again) the order of one unit; returns the supplier's order number.
    async fn place_order(
        &self,
        transaction_id: &str,
        package_code: &str,
    ) -> Result<String, SupplierError>;
    /// Asks whether the order's profile is allocated.
    async fn query(&self, order_no: &str) -> Result<Allocation, SupplierError>;
    /// Asks how much data a profile used.
    async fn usage(&self, iccid: &str) -> Result<Usage, SupplierError>;
}
