//! Floats and ledger rows: every debit is conditional and every movement
//! carries a unique `movement_key`.

use super::*;

/// Moves `delta` cents on a float, refusing to go below zero for a debit.
/// Returns the balance after and, for the live float, the ledger `seq` the
/// movement takes; `None` when a debit would overdraw.
pub async fn move_money<C: ConnectionTrait>(
    db: &C,
    partner_id: &str,
    mode: Mode,
    delta: i64,
    now: DateTime<Utc>,
) -> Result<Option<(i64, Option<i64>)>, DbErr> {
    move_money_with(db, partner_id, mode, delta, false, now).await
}

/// [`move_money`], optionally letting a debit take the float below zero
/// (a chargeback: the money is gone whatever the balance says).
pub async fn move_money_with<C: ConnectionTrait>(
    db: &C,
    partner_id: &str,
    mode: Mode,
    delta: i64,
    allow_overdraft: bool,
    now: DateTime<Utc>,
) -> Result<Option<(i64, Option<i64>)>, DbErr> {
    let Some(row) = move_float(db, partner_id, mode, delta, 1, allow_overdraft, now).await? else {
        return Ok(None);
    };
    let seq = (mode == Mode::Live).then_some(row.next_seq - 1);
    Ok(Some((row.balance_cents, seq)))
}

/// Moves `delta` cents on a float in one statement and reads the float back
/// (RETURNING). On the live float it also takes `ledger_rows` ledger `seq`s
/// (the row's `next_seq` after is one past the last). A debit is refused
/// (`None`) when it would overdraw, unless `allow_overdraft`.
pub(super) async fn move_float<C: ConnectionTrait>(
    db: &C,
    partner_id: &str,
    mode: Mode,
    delta: i64,
    ledger_rows: i64,
    allow_overdraft: bool,
    now: DateTime<Utc>,
) -> Result<Option<float::Model>, DbErr> {
    let mut update = float::Entity::update_many()
        .col_expr(
            float::Column::BalanceCents,
            Expr::col(float::Column::BalanceCents).add(delta),
        )
        .col_expr(float::Column::UpdatedAt, Expr::value(now))
        .filter(float::Column::PartnerId.eq(partner_id))
        .filter(float::Column::Mode.eq(mode));
    if mode == Mode::Live {
        update = update.col_expr(
            float::Column::NextSeq,
            Expr::col(float::Column::NextSeq).add(ledger_rows),
        );
    }
    if delta < 0 && !allow_overdraft {
        update = update.filter(float::Column::BalanceCents.gte(-delta));
    }
    Ok(update.exec_with_returning(db).await?.into_iter().next())
}

/// A ledger row to write.
pub struct LedgerRow<'a> {
    pub partner_id: &'a str,
    pub seq: i64,
    pub kind: LedgerKind,
    pub amount_cents: i64,
    pub balance_after_cents: i64,
    pub description: String,
    pub order_id: Option<&'a str>,
    pub deposit_id: Option<&'a str>,
    pub movement_key: Option<String>,
    pub now: DateTime<Utc>,
}

pub async fn insert_ledger<C: ConnectionTrait>(
    db: &C,
    row: LedgerRow<'_>,
) -> Result<ledger_entry::Model, DbErr> {
    ledger_entry::ActiveModel::from(ledger_entry::Model {
        id: LedgerEntryId::generate().into_string(),
        partner_id: row.partner_id.to_owned(),
        seq: row.seq,
        kind: row.kind,
        amount_cents: row.amount_cents,
        balance_after_cents: row.balance_after_cents,
        description: row.description,
        order_id: row.order_id.map(str::to_owned),
        deposit_id: row.deposit_id.map(str::to_owned),
        movement_key: row.movement_key,
        created_at: row.now,
    })
    .insert(db)
    .await
}

/// Sets the sandbox float to an amount (play money: no ledger row).
pub async fn set_sandbox_float<C: ConnectionTrait>(
    db: &C,
    partner_id: &str,
    cents: i64,
    now: DateTime<Utc>,
) -> Result<bool, DbErr> {
    let result = float::Entity::update_many()
        .col_expr(float::Column::BalanceCents, Expr::value(cents))
        .col_expr(float::Column::UpdatedAt, Expr::value(now))
        .filter(float::Column::PartnerId.eq(partner_id))
        .filter(float::Column::Mode.eq(Mode::Sandbox.as_str()))
        .exec(db)
        .await?;
    Ok(result.rows_affected == 1)
}
