//! Crypto deposits: opening invoices, and moving deposits through the
//! spec's state table from what the payment provider says.
//!
//! The table itself is pure and lives in [`crate::domain::deposit`]; this
//! module reads the provider, applies the step the table names, and takes the
//! provider's webhooks. A webhook is a hint: its signature is checked over the
//! raw body, then the invoice is read back through the API and that reading
//! is what counts. Deliveries are deduplicated on `originalDeliveryId` (a
//! redelivery carries a new `deliveryId` and the first one's id there), and
//! every step only moves forward and is idempotent, so duplicated, redelivered
//! and reordered webhooks change nothing twice.
//!
//! Refunds are the one thing the invoice does not show: the store creates a
//! refund pull payment, BTCPay sends `InvoiceRefund` with its id, and the pull
//! payment is read back before the deposit becomes `refunded` (or, once
//! credited, raises a `refunded_after_credit` review).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use entities::deposit;
use serde_json::Value;

use crate::{
    actors::{account::AccountError, accounts::Accounts},
    domain::deposit::{
        self as rules,
        DepositStatus::{Cancelled, Pending, Refunded},
        ReviewReason, Step,
    },
    domain::{ids::DepositId, partner::Status, time},
    payments::{PaymentError, PaymentProvider, btcpay},
    store::{self, Db},
};

/// Why a deposit operation did not go through. The edges turn it into the
/// spec's error.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DepositError {
    /// The payment provider could not open or read the invoice; nothing
    /// was stored or charged.
    #[error("the payment provider is unavailable")]
    Unavailable {
        /// Whether the provider said trying again may work.
        retryable: bool,
    },
    /// A callback whose signature does not verify.
    #[error("the callback signature does not verify")]
    BadSignature,
    /// A callback whose body is not JSON.
    #[error("the callback body is not JSON")]
    NotJson,
    /// The account actor failed to credit.
    #[error(transparent)]
    Account(#[from] AccountError),
    /// The database failed, or a stored deposit cannot be read.
    #[error("{0}")]
    Internal(String),
}

impl From<sea_orm::DbErr> for DepositError {
    fn from(err: sea_orm::DbErr) -> Self {
        Self::Internal(format!("database: {err}"))
    }
}

/// The deposit service.
#[derive(Clone)]
pub struct Deposits {
    db: Db,
    provider: Option<Arc<dyn PaymentProvider>>,
    accounts: Accounts,
    webhook_secret: Arc<secrecy::SecretString>,
    invoice_minutes: u32,
}

impl Deposits {
    pub fn new(
        db: Db,
        provider: Option<Arc<dyn PaymentProvider>>,
        accounts: Accounts,
        webhook_secret: secrecy::SecretString,
        invoice_minutes: u32,
    ) -> Self {
        Self {
            db,
            provider,
            accounts,
            webhook_secret: Arc::new(webhook_secret),
            invoice_minutes,
        }
    }

    /// Opens a crypto invoice and stores the pending deposit. Nothing is
    /// stored if the provider cannot open the invoice.
    pub async fn open(
        &self,
        partner_id: &str,
        amount_cents: i64,
    ) -> Result<deposit::Model, DepositError> {
        let provider = self
            .provider
            .as_ref()
            .ok_or_else(|| unavailable(&PaymentError::Unconfigured))?;
        let id = DepositId::generate().into_string();
        let invoice = provider
            .open_invoice(&id, amount_cents, self.invoice_minutes)
            .await
            .map_err(|e| unavailable(&e))?;
        let now = time::now();
        let row = deposit::Model {
            id,
            partner_id: partner_id.to_owned(),
            status: Pending,
            method: "crypto".to_owned(),
            requested_cents: amount_cents,
            credited_cents: None,
            reference: None,
            provider_invoice_id: Some(invoice.invoice_id),
            ledger_entry_id: None,
            payment_url: Some(invoice.checkout_url),
            expires_at: Some(invoice.expires_at),
            created_at: now,
            credited_at: None,
            updated_at: now,
        };
        let stored = store::deposits::insert(&self.db, row).await?;
        tracing::info!(partner_id, deposit_id = %stored.id, amount_cents, "crypto invoice opened");
        crate::metrics::deposit_transition("none", Pending.as_str());
        Ok(stored)
    }

    /// Handles a provider webhook: verify the signature over the raw body
    /// first, then bring the deposit in line with the provider.
    pub async fn on_callback(
        &self,
        body: &[u8],
        signature: Option<&str>,
    ) -> Result<(), DepositError> {
        use secrecy::ExposeSecret;
        if !btcpay::verify(self.webhook_secret.expose_secret(), body, signature) {
            tracing::warn!(
                bytes = body.len(),
                signed = signature.is_some(),
                "payment callback with a missing or wrong signature ignored"
            );
            return Err(DepositError::BadSignature);
        }
        let event: Value = serde_json::from_slice(body).map_err(|_| DepositError::NotJson)?;
        let hint = WebhookHint::read(&event);
        if let Some(delivery) = &hint.delivery_key
            && store::deposits::delivery_seen(&self.db, delivery).await?
        {
            tracing::info!(
                delivery_id = delivery,
                invoice_id = hint.invoice_id,
                kind = hint.kind,
                redelivery = hint.redelivery,
                "payment webhook already processed"
            );
            return Ok(());
        }
        let Some(deposit) = self.deposit_of(&hint, &event).await? else {
            tracing::warn!(
                invoice_id = hint.invoice_id,
                kind = hint.kind,
                "payment webhook for an unknown deposit ignored"
            );
            return Ok(());
        };
        tracing::info!(deposit_id = %deposit.id, invoice_id = hint.invoice_id, kind = hint.kind, redelivery = hint.redelivery, "payment webhook");
        match event["pullPaymentId"].as_str() {
            Some(pull_payment_id) if hint.kind == "InvoiceRefund" => {
                self.on_refund(&deposit, pull_payment_id).await?
            }
            _ => self.sync(deposit).await?,
        }
        if let Some(delivery) = &hint.delivery_key {
            store::deposits::record_delivery(&self.db, delivery, &hint.invoice_id, time::now())
                .await?;
        }
        Ok(())
    }

    /// The deposit a webhook names: by invoice id, or by our deposit id in
    /// the invoice metadata when that deposit carries the same invoice id.
    async fn deposit_of(
        &self,
        hint: &WebhookHint,
        event: &Value,
    ) -> Result<Option<deposit::Model>, DepositError> {
        if let Some(deposit) = store::deposits::by_invoice(&self.db, &hint.invoice_id).await? {
            return Ok(Some(deposit));
        }
        let Some(id) = event["metadata"]["orderId"].as_str() else {
            return Ok(None);
        };
        Ok(store::deposits::get(&self.db, id)
            .await?
            .filter(|d| d.provider_invoice_id.as_deref() == Some(hint.invoice_id.as_str())))
    }

    /// A refund announced by the provider: read the pull payment back, then
    /// take the table's refund step.
    async fn on_refund(
        &self,
        deposit: &deposit::Model,
        pull_payment_id: &str,
    ) -> Result<(), DepositError> {
        let Some(provider) = &self.provider else {
            return Ok(());
        };
        let refund = provider
            .refund(pull_payment_id)
            .await
            .map_err(|e| unavailable(&e))?;
        // A refund in crypto has no USD amount: what is in question is then
        // the whole credit (the detail names the refunded crypto amount, so
        // an operator can reject and move part of it by hand instead).
        let in_question = refund.usd_cents.or(deposit.credited_cents).unwrap_or(0);
        let step = rules::refund_step(deposit.status, in_question);
        let detail = format!(
            "The store created refund pull payment {} for {} {} on invoice {}; the float was not taken back.",
            refund.id,
            refund.amount,
            refund.currency,
            deposit.provider_invoice_id.as_deref().unwrap_or("?")
        );
        self.take(deposit, step, &detail).await
    }

    /// Asks the provider about a deposit and applies what it says.
    pub async fn sync(&self, deposit: deposit::Model) -> Result<(), DepositError> {
        let (Some(provider), Some(invoice_id)) =
            (&self.provider, deposit.provider_invoice_id.clone())
        else {
            return Ok(());
        };
        let reading = provider
            .invoice_state(&invoice_id)
            .await
            .map_err(|e| unavailable(&e))?;
        let view = rules::DepositView {
            status: deposit.status,
            credited_cents: deposit.credited_cents,
            expires_at: deposit.expires_at,
        };
        let step = rules::step(view, reading, time::now());
        tracing::debug!(deposit_id = %deposit.id, invoice_id, ?reading, ?step, "deposit read back");
        let detail = format!(
            "Invoice {invoice_id} is {:?}/{:?} with {} cents received.",
            reading.status, reading.additional, reading.received_cents
        );
        self.take(&deposit, step, &detail).await
    }

    /// Carries out one step of the state table.
    async fn take(
        &self,
        deposit: &deposit::Model,
        step: Step,
        detail: &str,
    ) -> Result<(), DepositError> {
        let now = time::now();
        let db = &self.db;
        match step {
            Step::Nothing => {}
            Step::Wait => store::deposits::touch(db, &deposit.id, now).await?,
            Step::Cancel => self.cancel(deposit, now).await?,
            Step::Refund => {
                if store::deposits::transition(
                    db,
                    &deposit.id,
                    &[Pending, Cancelled],
                    Refunded,
                    now,
                )
                .await?
                {
                    tracing::info!(deposit_id = %deposit.id, "deposit refunded before credit");
                    crate::metrics::deposit_transition(deposit.status.as_str(), Refunded.as_str());
                }
            }
            Step::Review {
                reason,
                cents,
                cancel,
            } => {
                if cancel {
                    self.cancel(deposit, now).await?;
                } else {
                    store::deposits::touch(db, &deposit.id, now).await?;
                }
                let detail = format!("{detail} Amount in question: {cents} cents.");
                store::deposits::raise_review(db, deposit, reason, cents, &detail, now).await?;
            }
            Step::Credit(cents) => self.credit(deposit, cents, detail, now).await?,
        }
        Ok(())
    }

    async fn cancel(
        &self,
        deposit: &deposit::Model,
        now: DateTime<Utc>,
    ) -> Result<(), DepositError> {
        if store::deposits::transition(&self.db, &deposit.id, &[Pending], Cancelled, now).await? {
            tracing::info!(deposit_id = %deposit.id, "deposit invoice lapsed");
            crate::metrics::deposit_transition(Pending.as_str(), Cancelled.as_str());
        } else {
            store::deposits::touch(&self.db, &deposit.id, now).await?;
        }
        Ok(())
    }

    /// Credits what arrived, unless the account closed meanwhile: then a
    /// person decides.
    async fn credit(
        &self,
        deposit: &deposit::Model,
        cents: i64,
        detail: &str,
        now: DateTime<Utc>,
    ) -> Result<(), DepositError> {
        if self.account_closed(&deposit.partner_id).await? {
            // Touched so the reconciler moves on to other quiet deposits.
            store::deposits::touch(&self.db, &deposit.id, now).await?;
            let detail =
                format!("{detail} {cents} cents paid after the account closed; not credited.");
            return Ok(store::deposits::raise_review(
                &self.db,
                deposit,
                ReviewReason::PaidOnClosedAccount,
                cents,
                &detail,
                now,
            )
            .await?);
        }
        self.accounts
            .credit_deposit(&deposit.partner_id, &deposit.id, cents)
            .await?;
        Ok(())
    }

    async fn account_closed(&self, partner_id: &str) -> Result<bool, DepositError> {
        let partner = store::partners::find(&self.db, partner_id).await?;
        Ok(partner.is_some_and(|p| p.status == Status::Closed))
    }

    /// The reconciler's pass: lapse expired invoices and ask about quiet ones.
    pub async fn reconcile(&self, quiet_for: chrono::Duration) {
        let now = time::now();
        let due = match store::deposits::needing_sync(&self.db, now, now - quiet_for, 200).await {
            Ok(due) => due,
            Err(err) => {
                tracing::warn!(error = %err, "deposit reconciliation could not list deposits");
                return;
            }
        };
        for deposit in due {
            let id = deposit.id.clone();
            if let Err(err) = self.sync(deposit).await {
                tracing::warn!(deposit_id = %id, error = %err, "deposit reconciliation step failed");
            }
        }
    }
}

/// Reconciles deposits every `every` until `stop`: lapses invoices past
/// their time and asks the provider about a pending invoice whose callback
/// has been quiet for two passes (a lost webhook is found this way).
pub(crate) async fn reconcile_until_stopped(
    deposits: Deposits,
    every: std::time::Duration,
    stop: tokio_util::sync::CancellationToken,
) {
    let quiet_for = chrono::Duration::from_std(every * 2).unwrap_or_default();
    crate::periodic::every(every, &stop, || deposits.reconcile(quiet_for)).await;
}

/// What a webhook says about itself; none of it is trusted beyond finding the deposit.
struct WebhookHint {
    /// `originalDeliveryId` if present (redeliveries), else `deliveryId`.
    delivery_key: Option<String>,
    invoice_id: String,
    kind: String,
    redelivery: bool,
}

impl WebhookHint {
    fn read(event: &Value) -> Self {
        let text = |field: &str| event[field].as_str().filter(|s| !s.is_empty());
        Self {
            delivery_key: text("originalDeliveryId")
                .or_else(|| text("deliveryId"))
                .map(str::to_owned),
            invoice_id: text("invoiceId").unwrap_or_default().to_owned(),
            kind: text("type").unwrap_or_default().to_owned(),
            redelivery: event["isRedelivery"].as_bool().unwrap_or(false),
        }
    }
}

fn unavailable(error: &PaymentError) -> DepositError {
    tracing::warn!(error = %error, "payment provider unavailable");
    DepositError::Unavailable {
        retryable: matches!(
            error,
            PaymentError::Refused {
                retryable: true,
                ..
            }
        ),
    }
}
