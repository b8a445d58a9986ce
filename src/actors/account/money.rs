//! The account's other money: refunds of undelivered units, operators'
//! movements, deposit credits, each one transaction with its ledger rows.

use serde_json::json;

use super::*;

/// Refunds undelivered units and settles the order if nothing is left
/// pending, all in one transaction.
pub(super) async fn refund(
    state: &mut AccountState,
    order_id: &str,
    unit_ids: &[String],
    failure: FailureCode,
) -> Result<(), sea_orm::DbErr> {
    let db = state.args.db.clone();
    let Some(order) = store::orders::get_order(&db, order_id).await? else {
        return Ok(());
    };
    let mode = order.mode;
    let now = time::now();
    let txn = store::begin_write(&db).await?;
    let refunded = store::orders::refund_units(&txn, &order, unit_ids, failure, now).await?;
    let settled = store::orders::finalize(&txn, order_id, now).await?;
    txn.commit().await?;
    if let Some(balance_after) = refunded {
        *state.floats.of_mut(mode) = balance_after;
        tracing::info!(partner_id = %order.partner_id, order_id, units = unit_ids.len(), failure_code = failure.as_str(), "units refunded");
    }
    if let Some(settled) = settled {
        crate::actors::order_settled(order_id, &settled, now);
    }
    Ok(())
}

/// Moves money on the live float and writes its ledger row, in one transaction.
pub(super) async fn apply_movement(
    state: &mut AccountState,
    movement: Movement,
    authority: &Authority,
) -> Result<ledger_entry::Model, AccountError> {
    let db = state.args.db.clone();
    let required_cents = -movement.amount_cents;
    let txn = store::begin_write(&db).await?;
    let written =
        write_live_movement(&txn, &state.args.partner_id, movement, None, time::now()).await?;
    let Some(entry) = written else {
        drop(txn);
        state.reload_balances().await?;
        return Err(insufficient(state, required_cents));
    };
    // On an error the transaction is dropped, which rolls the movement back.
    let after = json!({
        "ledger_entry_id": entry.id, "kind": entry.kind, "amount_cents": entry.amount_cents,
        "balance_before_cents": entry.balance_after_cents - entry.amount_cents,
        "balance_after_cents": entry.balance_after_cents,
    });
    authority.record(&txn, &entry.id, after).await?;
    txn.commit().await?;
    state.floats.live = entry.balance_after_cents;
    tracing::info!(partner_id = %state.args.partner_id, kind = %entry.kind, amount_cents = entry.amount_cents, balance_after = entry.balance_after_cents, "money moved by the operator");
    Ok(entry)
}

/// Where a movement stands against a deposit: its id, and the unique key
/// that keeps the movement from happening twice.
pub(super) struct AgainstDeposit<'a> {
    pub deposit_id: &'a str,
    pub movement_key: String,
}

/// Writes `movement` on the live float and its ledger row in `txn`; `None`
/// when it is a debit the float cannot pay and may not overdraw.
pub(super) async fn write_live_movement(
    txn: &sea_orm::DatabaseTransaction,
    partner_id: &str,
    movement: Movement,
    against: Option<AgainstDeposit<'_>>,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Option<ledger_entry::Model>, sea_orm::DbErr> {
    let moved = store::orders::move_money_with(
        txn,
        partner_id,
        Mode::Live,
        movement.amount_cents,
        movement.allow_overdraft,
        now,
    )
    .await?;
    let Some((balance_after, Some(seq))) = moved else {
        return Ok(None);
    };
    let (deposit_id, movement_key) = match against {
        Some(against) => (Some(against.deposit_id), Some(against.movement_key)),
        None => (None, None),
    };
    store::orders::insert_ledger(
        txn,
        store::orders::LedgerRow {
            partner_id,
            seq,
            kind: movement.kind,
            amount_cents: movement.amount_cents,
            balance_after_cents: balance_after,
            description: movement.description,
            order_id: None,
            deposit_id,
            movement_key,
            now,
        },
    )
    .await
    .map(Some)
}

/// The refusal of a debit of `required_cents` the live float cannot pay.
pub(super) fn insufficient(state: &AccountState, required_cents: i64) -> AccountError {
    AccountError::Refused(Refusal::Insufficient {
        mode: Mode::Live,
        balance_cents: state.floats.live,
        required_cents,
    })
}

/// Credits a crypto deposit in one transaction; `false` if it was already credited.
pub(super) async fn credit_deposit(
    state: &mut AccountState,
    deposit_id: &str,
    amount: i64,
) -> Result<bool, AccountError> {
    let db = state.args.db.clone();
    let Some(deposit) = store::deposits::get(&db, deposit_id).await? else {
        return Ok(false);
    };
    let txn = store::begin_write(&db).await?;
    let credited = store::deposits::credit(&txn, &deposit, amount, time::now()).await;
    match credited {
        Ok(Some((balance_after, entry))) => {
            txn.commit().await?;
            state.floats.live = balance_after;
            tracing::info!(partner_id = %deposit.partner_id, deposit_id, amount_cents = amount, ledger_entry_id = %entry.id, "deposit credited");
            crate::metrics::deposit_transition(
                deposit.status.as_str(),
                DepositStatus::Credited.as_str(),
            );
            Ok(true)
        }
        Ok(None) => Ok(false),
        Err(err) if store::is_unique_violation(&err) => Ok(false),
        Err(err) => Err(AccountError::from(err)),
    }
}

/// Sets the sandbox float (play money, no ledger row) with its audit row.
pub(super) async fn set_sandbox_float(
    state: &mut AccountState,
    cents: i64,
    authority: &Authority,
) -> Result<(), AccountError> {
    let db = state.args.db.clone();
    let before = state.floats.sandbox;
    let txn = store::begin_write(&db).await?;
    let set =
        store::orders::set_sandbox_float(&txn, &state.args.partner_id, cents, time::now()).await?;
    if set {
        let after = json!({ "sandbox_before_cents": before, "sandbox_after_cents": cents });
        authority
            .record(&txn, &state.args.partner_id, after)
            .await?;
    }
    txn.commit().await?;
    if set {
        state.floats.sandbox = cents;
    }
    Ok(())
}

/// Records a wire deposit already credited.
pub(super) async fn wire_deposit(
    state: &mut AccountState,
    amount: i64,
    reference: &str,
    authority: &Authority,
) -> Result<deposit::Model, AccountError> {
    let db = state.args.db.clone();
    let txn = store::begin_write(&db).await?;
    match store::deposits::record_wire(&txn, &state.args.partner_id, amount, reference, time::now())
        .await
    {
        Ok((deposit, balance_after)) => {
            let after = json!({
                "deposit_id": deposit.id, "reference": reference, "amount_cents": amount,
                "balance_before_cents": balance_after - amount, "balance_after_cents": balance_after,
            });
            authority.record(&txn, &deposit.id, after).await?;
            txn.commit().await?;
            state.floats.live = balance_after;
            tracing::info!(partner_id = %deposit.partner_id, deposit_id = %deposit.id, amount_cents = amount, "wire deposit recorded");
            crate::metrics::deposit_transition("none", DepositStatus::Credited.as_str());
            Ok(deposit)
        }
        Err(err) if store::is_unique_violation(&err) => Err(AccountError::Conflict {
            message: "A deposit with this reference exists for this partner.".into(),
            param: Some("reference"),
        }),
        Err(err) => Err(AccountError::from(err)),
    }
}
