//! Crypto deposits: opening invoices, and moving deposits through the
//! spec's state table from what the payment provider says.
//!
//! | provider says | deposit was | becomes |
//! |---|---|---|
//! | settled, paid > 0 | pending or cancelled | credited with what arrived (account actor, one ledger row) |
//! | settled, paid 0 | pending | pending, review `zero_settlement` |
//! | open, part paid | pending | pending (nothing until final) |
//! | expired, nothing settled | pending | cancelled (still claimable) |
//! | refunded | pending or cancelled | refunded (terminal) |
//! | refunded | credited | credited; float not taken back; review `refunded_after_credit` |
//! | settled, paid > 0 | any, account closed | unchanged; review `paid_on_closed_account` |
//!
//! Status only moves forward, and every step is idempotent, so duplicated,
//! redelivered and reordered callbacks change nothing twice.

use std::sync::Arc;

use entities::deposit;
use serde_json::Value;

use crate::{
    actors::accounts::Accounts,
    domain::{ids::DepositId, partner::Status, time},
    http::error::{ApiError, ErrorCode},
    payments::{InvoiceState, InvoiceStatus, PaymentError, PaymentProvider, btcpay},
    store::{
        self, Db,
        deposits::{CANCELLED, CREDITED, PENDING, REFUNDED},
    },
};

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
    ) -> Result<deposit::Model, ApiError> {
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
            status: PENDING.to_owned(),
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
        crate::metrics::deposit_transition("none", PENDING);
        Ok(stored)
    }

    /// Handles a provider callback: verify the signature over the raw body
    /// first, then bring the deposit in line with the provider.
    pub async fn on_callback(&self, body: &[u8], signature: Option<&str>) -> Result<(), ApiError> {
        use secrecy::ExposeSecret;
        if !btcpay::verify(self.webhook_secret.expose_secret(), body, signature) {
            tracing::warn!(
                bytes = body.len(),
                signed = signature.is_some(),
                "payment callback with a missing or wrong signature ignored"
            );
            return Err(ApiError::new(ErrorCode::AuthInvalidKey)
                .with_message("The callback signature does not verify."));
        }
        let event: Value = serde_json::from_slice(body)
            .map_err(|_| ApiError::invalid_request("The callback body is not JSON."))?;
        let delivery_id = event["deliveryId"].as_str().unwrap_or_default().to_owned();
        let invoice_id = event["invoiceId"].as_str().unwrap_or_default().to_owned();
        if !delivery_id.is_empty() && store::deposits::delivery_seen(&self.db, &delivery_id).await?
        {
            tracing::info!(
                delivery_id,
                invoice_id,
                "payment callback already processed"
            );
            return Ok(());
        }
        let deposit = match store::deposits::by_invoice(&self.db, &invoice_id).await? {
            Some(deposit) => Some(deposit),
            None => match event["metadata"]["orderId"].as_str() {
                Some(id) => store::deposits::get(&self.db, id)
                    .await?
                    .filter(|d| d.provider_invoice_id.as_deref() == Some(invoice_id.as_str())),
                None => None,
            },
        };
        let Some(deposit) = deposit else {
            tracing::warn!(
                invoice_id,
                delivery_id,
                kind = event["type"].as_str().unwrap_or(""),
                "payment callback for an unknown deposit ignored"
            );
            return Ok(());
        };
        self.sync(deposit).await?;
        if !delivery_id.is_empty() {
            store::deposits::record_delivery(&self.db, &delivery_id, &invoice_id, time::now())
                .await?;
        }
        Ok(())
    }

    /// Asks the provider about a deposit and applies what it says.
    pub async fn sync(&self, deposit: deposit::Model) -> Result<(), ApiError> {
        let (Some(provider), Some(invoice_id)) =
            (&self.provider, deposit.provider_invoice_id.clone())
        else {
            return Ok(());
        };
        let state = provider
            .invoice_state(&invoice_id)
            .await
            .map_err(|e| unavailable(&e))?;
        self.apply(&deposit, state).await
    }

    /// One step of the state table.
    async fn apply(&self, deposit: &deposit::Model, state: InvoiceState) -> Result<(), ApiError> {
        let now = time::now();
        let db = &self.db;
        if state.refunded {
            return match deposit.status.as_str() {
                PENDING | CANCELLED => {
                    if store::deposits::transition(db, &deposit.id, &[PENDING, CANCELLED], REFUNDED, now).await? {
                        tracing::info!(deposit_id = %deposit.id, "deposit refunded before credit");
                        crate::metrics::deposit_transition(&deposit.status, REFUNDED);
                    }
                    Ok(())
                }
                CREDITED => Ok(store::deposits::raise_review(db, deposit, "refunded_after_credit", "The provider refunded a payment that was already credited; the float was not taken back.", now).await?),
                _ => Ok(()),
            };
        }
        match state.status {
            InvoiceStatus::Settled if state.paid_cents > 0 => {
                if deposit.status != PENDING && deposit.status != CANCELLED {
                    return Ok(());
                }
                if self.account_closed(&deposit.partner_id).await? {
                    // Touched so the reconciler moves on to other quiet deposits.
                    store::deposits::touch(db, &deposit.id, now).await?;
                    return Ok(store::deposits::raise_review(
                        db,
                        deposit,
                        "paid_on_closed_account",
                        &format!(
                            "{} cents paid after the account closed; not credited.",
                            state.paid_cents
                        ),
                        now,
                    )
                    .await?);
                }
                self.accounts
                    .credit_deposit(&deposit.partner_id, &deposit.id, state.paid_cents)
                    .await?;
                Ok(())
            }
            InvoiceStatus::Settled => {
                store::deposits::touch(db, &deposit.id, now).await?;
                Ok(store::deposits::raise_review(
                    db,
                    deposit,
                    "zero_settlement",
                    "The provider settled the invoice with nothing received.",
                    now,
                )
                .await?)
            }
            InvoiceStatus::Expired | InvoiceStatus::Invalid => {
                if store::deposits::transition(db, &deposit.id, &[PENDING], CANCELLED, now).await? {
                    tracing::info!(deposit_id = %deposit.id, "deposit invoice lapsed");
                    crate::metrics::deposit_transition(PENDING, CANCELLED);
                }
                Ok(())
            }
            InvoiceStatus::New | InvoiceStatus::Processing => {
                let lapsed = deposit.expires_at.is_some_and(|at| at <= now);
                if lapsed && state.paid_cents == 0 {
                    if store::deposits::transition(db, &deposit.id, &[PENDING], CANCELLED, now)
                        .await?
                    {
                        crate::metrics::deposit_transition(PENDING, CANCELLED);
                    }
                } else {
                    store::deposits::touch(db, &deposit.id, now).await?;
                }
                Ok(())
            }
        }
    }

    async fn account_closed(&self, partner_id: &str) -> Result<bool, ApiError> {
        let partner = store::partners::find(&self.db, partner_id).await?;
        Ok(partner.is_some_and(|p| Status::parse(&p.status) == Some(Status::Closed)))
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

fn unavailable(error: &PaymentError) -> ApiError {
    tracing::warn!(error = %error, "payment provider unavailable");
    let refusal = ApiError::new(ErrorCode::ServiceUnavailable)
        .with_message("The invoice could not be opened; nothing was charged.");
    match error {
        PaymentError::Refused {
            retryable: true, ..
        } => refusal.with_extra("retryable", true),
        _ => refusal,
    }
}
