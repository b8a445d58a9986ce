//! Approving a deposit review: the movement, the deposit's change and the
//! review's closing in one transaction. The review is closed only if it was
//! still open, and the movement carries the unique key `rev_x:approved`, so
//! two operators approving at once (or a form submitted twice) move the
//! money once: the second transaction rolls back and is told so.

use entities::review;

use super::{
    money::{AgainstDeposit, insufficient, write_live_movement},
    *,
};
use crate::domain::review::{Approval, DepositEffect, approval};

/// Approves review `review_id` of this partner with the operator's `note`.
pub(super) async fn approve_review(
    state: &mut AccountState,
    review_id: &str,
    note: &str,
    authority: &Authority,
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
    let entry = write_movement(state, &txn, &review, &deposit, approval, note, now).await?;
    let decision = store::deposits::Decision {
        status: ReviewStatus::Approved,
        note,
        ledger_entry_id: Some(entry.id.clone()),
        now,
    };
    if !store::deposits::decide_review(&txn, review_id, decision).await? {
        return Err(decided_elsewhere());
    }
    let after = serde_json::json!({
        "status": ReviewStatus::Approved, "ledger_entry_id": entry.id,
        "amount_cents": entry.amount_cents, "balance_after_cents": entry.balance_after_cents,
    });
    authority.record(&txn, review_id, after).await?;
    txn.commit().await?;
    state.floats.live = entry.balance_after_cents;
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
    // What `decide_review` wrote (`now` is already at the stored precision).
    Ok(review::Model {
        status: ReviewStatus::Approved,
        resolution: Some(note.to_owned()),
        resolved_at: Some(now),
        ledger_entry_id: Some(entry.id),
        ..review
    })
}

/// Writes the approval's movement (and the deposit's change) in `txn`;
/// returns its ledger row.
async fn write_movement(
    state: &AccountState,
    txn: &sea_orm::DatabaseTransaction,
    review: &review::Model,
    deposit: &deposit::Model,
    approval: Approval,
    note: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<ledger_entry::Model, AccountError> {
    if approval.deposit == DepositEffect::Credit {
        // The deposit's own credit: `dep_x:credit`, so it never happens twice.
        return store::deposits::credit(txn, deposit, approval.amount_cents, now)
            .await
            .map_err(unique_is_decided)?
            .map(|(_, entry)| entry)
            .ok_or_else(decided_elsewhere);
    }
    let movement = Movement {
        kind: approval.kind,
        amount_cents: approval.amount_cents,
        description: format!("Review {} approved: {note}", review.id)
            .chars()
            .take(255)
            .collect(),
        allow_overdraft: approval.allow_overdraft,
    };
    let against = AgainstDeposit {
        deposit_id: &deposit.id,
        movement_key: format!("{}:approved", review.id),
    };
    let entry = write_live_movement(txn, &state.args.partner_id, movement, Some(against), now)
        .await
        .map_err(unique_is_decided)?
        .ok_or_else(|| insufficient(state, -approval.amount_cents))?;
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
    Ok(entry)
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
