//! Approving a deposit review: the movement, the deposit's change and the
//! review's closing in one transaction. The review is closed only if it was
//! still open, and the movement carries the unique key `rev_x:approved`, so
//! two operators approving at once (or a form submitted twice) move the
//! money once: the second transaction rolls back and is told so.

use entities::review;

use super::*;
use crate::domain::review::{Approval, DepositEffect, approval};

/// Approves review `review_id` of this partner with the operator's `note`.
pub(super) async fn approve_review(
    state: &mut AccountState,
    review_id: &str,
    note: &str,
) -> Result<review::Model, AccountError> {
    let db = state.args.db.clone();
    let review = store::deposits::review(&db, review_id)
        .await?
        .filter(|r| r.partner_id == state.args.partner_id)
        .ok_or_else(|| {
            AccountError::internal(format!("review {review_id} is not this account's"))
        })?;
    let deposit = store::deposits::get(&db, &review.deposit_id)
        .await?
        .ok_or_else(|| AccountError::internal(format!("deposit {} is gone", review.deposit_id)))?;
    let approval = approval(
        review.status,
        review.reason,
        review.amount_cents,
        deposit.status,
    )
    .map_err(|why| conflict(format!("This review cannot be approved: {why}.")))?;
    let now = time::now();
    let txn = store::begin_write(&db).await?;
    // On any error the transaction is dropped, which rolls it back.
    let (balance_after, entry) =
        write_movement(state, &txn, &review, &deposit, approval, note).await?;
    let decision = store::deposits::Decision {
        status: ReviewStatus::Approved,
        note,
        ledger_entry_id: Some(entry.id.clone()),
        now,
    };
    if !store::deposits::decide_review(&txn, review_id, decision).await? {
        // Dropping the transaction rolls the movement back.
        return Err(decided_elsewhere());
    }
    txn.commit().await?;
    state.floats.live = balance_after;
    tracing::info!(partner_id = %review.partner_id, review_id, deposit_id = %deposit.id, amount_cents = entry.amount_cents, ledger_entry_id = %entry.id, "review approved");
    match approval.deposit {
        DepositEffect::Credit => crate::metrics::deposit_transition(
            deposit.status.as_str(),
            DepositStatus::Credited.as_str(),
        ),
        DepositEffect::Reverse => crate::metrics::deposit_transition(
            DepositStatus::Credited.as_str(),
            DepositStatus::Reversed.as_str(),
        ),
        DepositEffect::Unchanged => {}
    }
    store::deposits::review(&db, review_id)
        .await?
        .ok_or_else(|| AccountError::internal("the approved review vanished"))
}

/// Writes the approval's movement (and the deposit's change) in `txn`;
/// returns the balance after and the ledger row.
async fn write_movement(
    state: &AccountState,
    txn: &sea_orm::DatabaseTransaction,
    review: &review::Model,
    deposit: &deposit::Model,
    approval: Approval,
    note: &str,
) -> Result<(i64, ledger_entry::Model), AccountError> {
    let now = time::now();
    if approval.deposit == DepositEffect::Credit {
        // The deposit's own credit: `dep_x:credit`, so it never happens twice.
        return store::deposits::credit(txn, deposit, approval.amount_cents, now)
            .await
            .map_err(unique_is_decided)?
            .ok_or_else(decided_elsewhere);
    }
    let moved = store::orders::move_money_with(
        txn,
        &state.args.partner_id,
        Mode::Live,
        approval.amount_cents,
        approval.allow_overdraft,
        now,
    )
    .await?;
    let Some((balance_after, Some(seq))) = moved else {
        return Err(AccountError::Refused(Refusal::Insufficient {
            mode: Mode::Live,
            balance_cents: state.floats.live,
            required_cents: -approval.amount_cents,
        }));
    };
    let description: String = format!("Review {} approved: {note}", review.id)
        .chars()
        .take(255)
        .collect();
    let entry = store::orders::insert_ledger(
        txn,
        store::orders::LedgerRow {
            partner_id: &state.args.partner_id,
            seq,
            kind: approval.kind,
            amount_cents: approval.amount_cents,
            balance_after_cents: balance_after,
            description,
            order_id: None,
            deposit_id: Some(&deposit.id),
            movement_key: Some(format!("{}:approved", review.id)),
            now,
        },
    )
    .await
    .map_err(unique_is_decided)?;
    if approval.deposit == DepositEffect::Reverse {
        let reversed = store::deposits::transition(
            txn,
            &deposit.id,
            &[DepositStatus::Credited],
            DepositStatus::Reversed,
            now,
        )
        .await?;
        if !reversed {
            return Err(decided_elsewhere());
        }
    }
    Ok((balance_after, entry))
}

fn conflict(message: String) -> AccountError {
    AccountError::Conflict {
        message,
        param: None,
    }
}

fn decided_elsewhere() -> AccountError {
    conflict("This review was decided by someone else meanwhile; nothing moved.".into())
}

/// A unique movement key already taken means the approval happened already.
fn unique_is_decided(err: sea_orm::DbErr) -> AccountError {
    if store::is_unique_violation(&err) {
        decided_elsewhere()
    } else {
        AccountError::from(err)
    }
}
