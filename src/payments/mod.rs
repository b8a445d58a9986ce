//! The crypto payment provider: a [`PaymentProvider`] trait and the adapter of
//! BTCPay Server's Greenfield API ([`btcpay`]), with callback verification.
//!
//! A callback is only a nudge: the service verifies its signature, then asks
//! the provider for the invoice's state and moves the deposit forward from
//! that. Duplicated, redelivered and reordered callbacks are therefore
//! harmless, and a lost one is made up for by the reconciler asking.

pub mod btcpay;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

/// An invoice just opened.
#[derive(Debug, Clone)]
pub struct OpenedInvoice {
    pub invoice_id: String,
    /// The provider's hosted payment page.
    pub checkout_url: String,
    pub expires_at: DateTime<Utc>,
}

/// The provider's view of an invoice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvoiceStatus {
    /// Open, nothing or not enough paid.
    New,
    /// Payments seen, not final.
    Processing,
    /// Final: what was paid is what it is.
    Settled,
    /// Lapsed.
    Expired,
    /// Invalidated.
    Invalid,
}

/// What the provider says about an invoice now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvoiceState {
    pub status: InvoiceStatus,
    /// Paid so far, in US cents.
    pub paid_cents: i64,
    /// The payment was paid late (broadcast before the lapse, confirmed after).
    pub paid_late: bool,
    /// What was received has been refunded.
    pub refunded: bool,
}

/// Why the provider could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PaymentError {
    /// No provider is configured.
    #[error("no payment provider is configured")]
    Unconfigured,
    /// The provider answered no; `retryable` when it is expected to say yes later.
    #[error("the payment provider refused: {message}")]
    Refused { retryable: bool, message: String },
}

/// What the service needs from a payment provider.
#[async_trait]
pub trait PaymentProvider: Send + Sync {
    /// Opens an invoice for a deposit (our deposit id is its order id).
    async fn open_invoice(
        &self,
        deposit_id: &str,
        amount_cents: i64,
        minutes: u32,
    ) -> Result<OpenedInvoice, PaymentError>;
    /// The invoice's state now.
    async fn invoice_state(&self, invoice_id: &str) -> Result<InvoiceState, PaymentError>;
}
