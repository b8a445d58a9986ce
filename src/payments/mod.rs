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

pub use crate::domain::deposit::{AdditionalStatus, InvoiceReading, InvoiceStatus};

/// A refund the store created for an invoice: in Greenfield, a pull payment
/// the payer claims. Read back through the API before it changes a deposit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundPullPayment {
    /// The pull payment's id.
    pub id: String,
    /// Its amount, a decimal in `currency`.
    pub amount: String,
    /// `BTC` for refunds at the rate of the day or then, `USD` for fiat ones.
    pub currency: String,
    /// The amount in US cents when `currency` is `USD`.
    pub usd_cents: Option<i64>,
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
    async fn invoice_state(&self, invoice_id: &str) -> Result<InvoiceReading, PaymentError>;
    /// A refund pull payment, read back by its id.
    async fn refund(&self, pull_payment_id: &str) -> Result<RefundPullPayment, PaymentError>;
}
