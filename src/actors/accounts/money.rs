//! The directory's money requests: each asks the partner's account actor,
//! the only writer of its floats.

use entities::ledger_entry;

use super::Accounts;
use crate::actors::account::{AccountError, AccountMsg, Authority, Movement};

impl Accounts {
    /// Asks the partner's actor to move money on the live float.
    pub async fn movement(
        &self,
        partner_id: &str,
        movement: Movement,
        authority: Authority,
    ) -> Result<ledger_entry::Model, AccountError> {
        self.ask(partner_id, |reply| {
            AccountMsg::Movement(movement, Box::new(authority), reply)
        })
        .await?
    }

    /// Asks the partner's actor to credit a confirmed crypto deposit.
    pub async fn credit_deposit(
        &self,
        partner_id: &str,
        deposit_id: &str,
        amount_cents: i64,
    ) -> Result<bool, AccountError> {
        let deposit_id = deposit_id.to_owned();
        self.ask(partner_id, |reply| {
            AccountMsg::CreditDeposit(deposit_id, amount_cents, reply)
        })
        .await?
    }

    /// Asks the partner's actor to approve a deposit review (its movement
    /// happens once, whoever asks how often).
    pub async fn approve_review(
        &self,
        partner_id: &str,
        review_id: &str,
        note: &str,
        authority: Authority,
    ) -> Result<entities::review::Model, AccountError> {
        let (review_id, note) = (review_id.to_owned(), note.to_owned());
        self.ask(partner_id, |reply| AccountMsg::ApproveReview {
            review_id,
            note,
            authority: Box::new(authority),
            reply,
        })
        .await?
    }

    /// Asks the partner's actor to record a wire deposit.
    pub async fn wire_deposit(
        &self,
        partner_id: &str,
        amount_cents: i64,
        reference: &str,
        authority: Authority,
    ) -> Result<entities::deposit::Model, AccountError> {
        let reference = reference.to_owned();
        self.ask(partner_id, |reply| {
            AccountMsg::WireDeposit(amount_cents, reference, Box::new(authority), reply)
        })
        .await?
    }

    /// Asks the partner's actor to set the sandbox float.
    pub async fn set_sandbox_float(
        &self,
        partner_id: &str,
        cents: i64,
        authority: Authority,
    ) -> Result<(), AccountError> {
        self.ask(partner_id, |reply| {
            AccountMsg::SetSandboxFloat(cents, Box::new(authority), reply)
        })
        .await?
    }
}
