//! Orders, units, profiles, idempotency keys and the ledger rows they write.
//!
//! Every money movement here is guarded twice: the float update is
//! conditional (`balance >= amount` for a debit) and the ledger row carries a
//! unique `movement_key`; a unit moves out of `pending` only once.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use entities::{esim, float, idempotency_key, ledger_entry, order, order_unit};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, Condition, ConnectionTrait, DbErr, EntityTrait, QueryFilter,
    QueryOrder, QuerySelect,
    sea_query::{Expr, ExprTrait},
};

use super::{bulk, nodes};
use crate::domain::{
    ids::LedgerEntryId,
    order::{self as rules, FailureCode, OrderStatus, UnitStatus},
    ordering::{Binding, Bound, Refusal},
    partner::Mode,
    states::LedgerKind,
};

/// Both floats of a partner: (live, sandbox).
pub async fn balances<C: ConnectionTrait>(db: &C, partner_id: &str) -> Result<(i64, i64), DbErr> {
    let rows = float::Entity::find()
        .filter(float::Column::PartnerId.eq(partner_id))
        .all(db)
        .await?;
    let of = |mode: Mode| {
        rows.iter()
            .find(|f| f.mode == mode)
            .map_or(0, |f| f.balance_cents)
    };
    Ok((of(Mode::Live), of(Mode::Sandbox)))
}

/// An order ready to be written.
#[derive(Debug, Clone)]
pub struct NewOrder {
    pub order: order::Model,
    /// Fingerprint of the request body its key is bound to.
    pub fingerprint: String,
}

/// A refusal that binds its key, ready to be written.
#[derive(Debug, Clone)]
pub struct RefusalRow {
    pub key: String,
    pub mode: Mode,
    /// Fingerprint of the request body its key is bound to.
    pub fingerprint: String,
    pub refusal: Refusal,
}

/// What the keys of a partner are bound to, for those of `keys` that are,
/// in one query. A refusal stored in a form nobody can read is an error:
/// answering anything else would break the key's promise.
pub async fn find_bindings<C: ConnectionTrait>(
    db: &C,
    partner_id: &str,
    keys: &[String],
) -> Result<Vec<(String, Binding)>, DbErr> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let rows = idempotency_key::Entity::find()
        .filter(idempotency_key::Column::PartnerId.eq(partner_id))
        .filter(bulk::column_in(
            db,
            idempotency_key::Column::Key,
            keys.iter().map(String::as_str),
        ))
        .all(db)
        .await?;
    rows.into_iter()
        .map(|row| {
            let bound = match (&row.order_id, &row.error_body) {
                (Some(order_id), _) => Bound::Order(order_id.clone()),
                (None, Some(stored)) => {
                    Bound::Refusal(Refusal::from_stored(stored).ok_or_else(|| {
                        DbErr::Custom(format!(
                            "the refusal bound to key {} is unreadable",
                            row.key
                        ))
                    })?)
                }
                (None, None) => {
                    return Err(DbErr::Custom(format!(
                        "key {} is bound to nothing",
                        row.key
                    )));
                }
            };
            let mode = row.mode;
            Ok((
                row.key,
                Binding {
                    mode,
                    fingerprint: row.fingerprint,
                    bound,
                },
            ))
        })
        .collect()
}

/// What an Idempotency-Key of a partner is bound to, as stored.
pub async fn find_key<C: ConnectionTrait>(
    db: &C,
    partner_id: &str,
    key: &str,
) -> Result<Option<idempotency_key::Model>, DbErr> {
    idempotency_key::Entity::find_by_id((partner_id.to_owned(), key.to_owned()))
        .one(db)
        .await
}

/// Why an acceptance did not commit.
#[derive(Debug)]
pub enum AcceptError {
    /// The conditional debit found less money than expected (another node moved it).
    Insufficient,
    /// The database refused (a unique key lost a race, or it is down).
    Db(DbErr),
}

impl From<DbErr> for AcceptError {
    fn from(err: DbErr) -> Self {
        AcceptError::Db(err)
    }
}

/// The units an order is accepted with: one per quantity, pending.
pub fn pending_units(order: &order::Model, now: DateTime<Utc>) -> Vec<order_unit::Model> {
    (1..=order.quantity)
        .map(|n| order_unit::Model {
            id: unit_id(&order.id, n),
            order_id: order.id.clone(),
            unit_index: n,
            status: UnitStatus::Pending,
            supplier_order_no: None,
            supplier_txn_id: None,
            attempts: 0,
            last_error: None,
            updated_at: now,
        })
        .collect()
}

/// The id of an order's `n`-th unit (also the supplier transaction id).
pub fn unit_id(order_id: &str, n: i32) -> String {
    format!("{order_id}_{n}")
}

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
async fn move_float<C: ConnectionTrait>(
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

/// An order of a partner in a mode.
pub async fn find_order<C: ConnectionTrait>(
    db: &C,
    partner_id: &str,
    mode: Mode,
    id: &str,
) -> Result<Option<order::Model>, DbErr> {
    order::Entity::find_by_id(id.to_owned())
        .filter(order::Column::PartnerId.eq(partner_id))
        .filter(order::Column::Mode.eq(mode))
        .one(db)
        .await
}

/// One order by id, whoever owns it (internal use).
pub async fn get_order<C: ConnectionTrait>(
    db: &C,
    id: &str,
) -> Result<Option<order::Model>, DbErr> {
    order::Entity::find_by_id(id.to_owned()).one(db).await
}

/// Several orders by id, in one query (internal use).
pub async fn get_orders<C: ConnectionTrait>(
    db: &C,
    ids: &[String],
) -> Result<Vec<order::Model>, DbErr> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    order::Entity::find()
        .filter(bulk::column_in(
            db,
            order::Column::Id,
            ids.iter().map(String::as_str),
        ))
        .all(db)
        .await
}

/// Filters of the order list.
#[derive(Debug, Default)]
pub struct OrderQuery {
    pub status: Option<OrderStatus>,
    pub created_after: Option<DateTime<Utc>>,
    pub created_before: Option<DateTime<Utc>>,
    /// Keyset of the last row served: (created_at, id), newest first.
    pub before: Option<(DateTime<Utc>, String)>,
    pub limit: u64,
}

/// A page of a partner's orders in one mode, newest first.
pub async fn list_orders<C: ConnectionTrait>(
    db: &C,
    partner_id: &str,
    mode: Mode,
    query: &OrderQuery,
) -> Result<Vec<order::Model>, DbErr> {
    let mut select = order::Entity::find()
        .filter(order::Column::PartnerId.eq(partner_id))
        .filter(order::Column::Mode.eq(mode));
    if let Some(status) = &query.status {
        select = select.filter(order::Column::Status.eq(*status));
    }
    if let Some(after) = query.created_after {
        select = select.filter(order::Column::CreatedAt.gt(after));
    }
    if let Some(before) = query.created_before {
        select = select.filter(order::Column::CreatedAt.lt(before));
    }
    if let Some((at, id)) = &query.before {
        select = select.filter(
            Condition::any().add(order::Column::CreatedAt.lt(*at)).add(
                Condition::all()
                    .add(order::Column::CreatedAt.eq(*at))
                    .add(order::Column::Id.lt(id.as_str())),
            ),
        );
    }
    select
        .order_by_desc(order::Column::CreatedAt)
        .order_by_desc(order::Column::Id)
        .limit(query.limit)
        .all(db)
        .await
}

/// The units of an order, in order.
pub async fn units_of<C: ConnectionTrait>(
    db: &C,
    order_id: &str,
) -> Result<Vec<order_unit::Model>, DbErr> {
    order_unit::Entity::find()
        .filter(order_unit::Column::OrderId.eq(order_id))
        .order_by_asc(order_unit::Column::UnitIndex)
        .all(db)
        .await
}

/// The profiles delivered for some orders.
pub async fn esims_of<C: ConnectionTrait>(
    db: &C,
    order_ids: &[String],
) -> Result<Vec<esim::Model>, DbErr> {
    if order_ids.is_empty() {
        return Ok(Vec::new());
    }
    esim::Entity::find()
        .filter(bulk::column_in(
            db,
            esim::Column::OrderId,
            order_ids.iter().map(String::as_str),
        ))
        .order_by_asc(esim::Column::UnitId)
        .all(db)
        .await
}

/// Claims an order for provisioning by `node` until `until`: it succeeds
/// when nobody holds the order, the holder's claim has lapsed, the holder
/// is not alive (no heartbeat since `alive_since`, or it stopped), or `node`
/// holds it already (the claim made at acceptance, or one of its earlier
/// incarnation). Counts a pass.
pub async fn claim<C: ConnectionTrait>(
    db: &C,
    order_id: &str,
    node: &str,
    now: DateTime<Utc>,
    until: DateTime<Utc>,
    alive_since: DateTime<Utc>,
) -> Result<bool, DbErr> {
    let result = order::Entity::update_many()
        .col_expr(order::Column::ClaimedUntil, Expr::value(Some(until)))
        .col_expr(order::Column::ClaimedBy, Expr::value(Some(node)))
        .col_expr(
            order::Column::Attempts,
            Expr::col(order::Column::Attempts).add(1),
        )
        .filter(order::Column::Id.eq(order_id))
        .filter(order::Column::Status.eq(OrderStatus::Processing))
        .filter(claim_is_free(now, alive_since).add(order::Column::ClaimedBy.eq(node)))
        .exec(db)
        .await?;
    Ok(result.rows_affected == 1)
}

/// Extends `node`'s claim on an order to `until`, or says why it could not.
pub async fn renew<C: ConnectionTrait>(
    db: &C,
    order_id: &str,
    node: &str,
    until: DateTime<Utc>,
) -> Result<Renewal, DbErr> {
    let result = order::Entity::update_many()
        .col_expr(order::Column::ClaimedUntil, Expr::value(Some(until)))
        .filter(order::Column::Id.eq(order_id))
        .filter(order::Column::Status.eq(OrderStatus::Processing))
        .filter(order::Column::ClaimedBy.eq(node))
        .exec(db)
        .await?;
    if result.rows_affected == 1 {
        return Ok(Renewal::Renewed);
    }
    // Not renewed: either the order is final already (the pass settled it
    // a moment ago) or another node holds it.
    let status: Option<OrderStatus> = order::Entity::find_by_id(order_id.to_owned())
        .select_only()
        .column(order::Column::Status)
        .into_tuple()
        .one(db)
        .await?;
    Ok(match status {
        Some(status) if status != OrderStatus::Processing => Renewal::Final,
        _ => Renewal::Lost,
    })
}

/// What renewing a claim found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// The claim is this node's for another lease.
    Renewed,
    /// The order is settled: there is nothing left to hold.
    Final,
    /// Another node holds the order now.
    Lost,
}

/// Lets go of `node`'s claim after a pass; another node's claim is left alone.
pub async fn release<C: ConnectionTrait>(db: &C, order_id: &str, node: &str) -> Result<(), DbErr> {
    order::Entity::update_many()
        .col_expr(
            order::Column::ClaimedUntil,
            Expr::value(Option::<DateTime<Utc>>::None),
        )
        .col_expr(
            order::Column::ClaimedBy,
            Expr::value(Option::<String>::None),
        )
        .filter(order::Column::Id.eq(order_id))
        .filter(order::Column::ClaimedBy.eq(node))
        .exec(db)
        .await
        .map(|_| ())
}

/// Orders still `processing` that nobody holds, created before `older_than`:
/// unclaimed, their claim lapsed, or their holder is not alive (no heartbeat
/// since `alive_since`, or it stopped cleanly).
pub async fn stranded<C: ConnectionTrait>(
    db: &C,
    older_than: DateTime<Utc>,
    now: DateTime<Utc>,
    alive_since: DateTime<Utc>,
    limit: u64,
) -> Result<Vec<String>, DbErr> {
    order::Entity::find()
        .select_only()
        .column(order::Column::Id)
        .filter(order::Column::Status.eq(OrderStatus::Processing))
        .filter(order::Column::CreatedAt.lt(older_than))
        .filter(claim_is_free(now, alive_since))
        .order_by_asc(order::Column::CreatedAt)
        .limit(limit)
        .into_tuple()
        .all(db)
        .await
}

/// An order's claim is free: never taken, lapsed, or its holder is not
/// alive (no heartbeat since `alive_since`, or it stopped cleanly).
fn claim_is_free(now: DateTime<Utc>, alive_since: DateTime<Utc>) -> Condition {
    Condition::any()
        .add(order::Column::ClaimedUntil.is_null())
        .add(order::Column::ClaimedUntil.lt(now))
        .add(order::Column::ClaimedBy.not_in_subquery(nodes::alive(alive_since)))
}

/// Orders still `processing` that `node` holds: at start, what an earlier
/// incarnation of the node was working on, taken back at once.
pub async fn held_by<C: ConnectionTrait>(db: &C, node: &str) -> Result<Vec<String>, DbErr> {
    order::Entity::find()
        .select_only()
        .column(order::Column::Id)
        .filter(order::Column::Status.eq(OrderStatus::Processing))
        .filter(order::Column::ClaimedBy.eq(node))
        .order_by_asc(order::Column::CreatedAt)
        .into_tuple()
        .all(db)
        .await
}

/// Counts a failed attempt on a unit.
pub async fn unit_failed_attempt<C: ConnectionTrait>(
    db: &C,
    unit_id: &str,
    error: &str,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let error: String = error.chars().take(255).collect();
    order_unit::Entity::update_many()
        .col_expr(
            order_unit::Column::Attempts,
            Expr::col(order_unit::Column::Attempts).add(1),
        )
        .col_expr(order_unit::Column::LastError, Expr::value(error))
        .col_expr(order_unit::Column::UpdatedAt, Expr::value(now))
        .filter(order_unit::Column::Id.eq(unit_id))
        .exec(db)
        .await
        .map(|_| ())
}

/// Stores delivered profiles and marks their units delivered, each once,
/// in a constant number of statements whatever their number: one update
/// that settles the units still pending (and says which), one insert of
/// their profiles. Returns, per profile, whether it was stored (false: its
/// unit was already settled, nothing written).
pub async fn deliver_units<C: ConnectionTrait>(
    txn: &C,
    profiles: &[esim::Model],
    now: DateTime<Utc>,
) -> Result<Vec<bool>, DbErr> {
    if profiles.is_empty() {
        return Ok(Vec::new());
    }
    let settled: HashSet<String> = order_unit::Entity::update_many()
        .col_expr(
            order_unit::Column::Status,
            Expr::value(UnitStatus::Delivered),
        )
        .col_expr(order_unit::Column::UpdatedAt, Expr::value(now))
        .filter(bulk::column_in(
            txn,
            order_unit::Column::Id,
            profiles.iter().map(|p| p.unit_id.as_str()),
        ))
        .filter(order_unit::Column::Status.eq(UnitStatus::Pending))
        .exec_with_returning(txn)
        .await?
        .into_iter()
        .map(|unit| unit.id)
        .collect();
    let stored: Vec<bool> = profiles
        .iter()
        .map(|p| settled.contains(&p.unit_id))
        .collect();
    let rows: Vec<esim::Model> = profiles
        .iter()
        .zip(&stored)
        .filter(|(_, stored)| **stored)
        .map(|(p, _)| p.clone())
        .collect();
    bulk::insert_models::<esim::Entity, _>(txn, &rows).await?;
    Ok(stored)
}

/// Refunds the units of `unit_ids` still pending, in a constant number of
/// statements whatever their number: one update that marks them refunded
/// (and says which), one credit of the float for all of them, one insert of
/// their `refund` rows (live; each with its own `seq`, `balance_after` and
/// `movement_key`), one addition to the order's `refunded_cents`. Returns
/// the balance after, or `None` when every unit was already settled.
pub async fn refund_units<C: ConnectionTrait>(
    txn: &C,
    order: &order::Model,
    unit_ids: &[String],
    failure: FailureCode,
    now: DateTime<Utc>,
) -> Result<Option<i64>, DbErr> {
    if unit_ids.is_empty() {
        return Ok(None);
    }
    let mut refunded: Vec<String> = order_unit::Entity::update_many()
        .col_expr(
            order_unit::Column::Status,
            Expr::value(UnitStatus::Refunded),
        )
        .col_expr(order_unit::Column::UpdatedAt, Expr::value(now))
        .filter(bulk::column_in(
            txn,
            order_unit::Column::Id,
            unit_ids.iter().map(String::as_str),
        ))
        .filter(order_unit::Column::OrderId.eq(order.id.as_str()))
        .filter(order_unit::Column::Status.eq(UnitStatus::Pending))
        .exec_with_returning(txn)
        .await?
        .into_iter()
        .map(|unit| unit.id)
        .collect();
    if refunded.is_empty() {
        return Ok(None);
    }
    refunded.sort_unstable();
    let mode = order.mode;
    let count = refunded.len() as i64;
    let total = order.unit_price_cents * count;
    let float = move_float(txn, &order.partner_id, mode, total, count, false, now)
        .await?
        .ok_or_else(|| DbErr::RecordNotFound("float".into()))?;
    if mode == Mode::Live {
        let mut balance = float.balance_cents - total;
        let rows: Vec<ledger_entry::Model> = (float.next_seq - count..)
            .zip(&refunded)
            .map(|(seq, unit_id)| {
                balance += order.unit_price_cents;
                ledger_entry::Model {
                    id: LedgerEntryId::generate().into_string(),
                    partner_id: order.partner_id.clone(),
                    seq,
                    kind: LedgerKind::Refund,
                    amount_cents: order.unit_price_cents,
                    balance_after_cents: balance,
                    description: format!(
                        "refund of undelivered unit {unit_id} ({})",
                        failure.as_str()
                    ),
                    order_id: Some(order.id.clone()),
                    deposit_id: None,
                    movement_key: Some(format!("{unit_id}:refund")),
                    created_at: now,
                }
            })
            .collect();
        bulk::insert_models::<ledger_entry::Entity, _>(txn, &rows).await?;
    }
    order::Entity::update_many()
        .col_expr(
            order::Column::RefundedCents,
            Expr::col(order::Column::RefundedCents).add(total),
        )
        .col_expr(order::Column::FailureCode, Expr::value(failure))
        .filter(order::Column::Id.eq(order.id.as_str()))
        .exec(txn)
        .await?;
    Ok(Some(float.balance_cents))
}

/// An order that [`finalize`] settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    /// The final status.
    pub status: OrderStatus,
    pub mode: Mode,
    pub failure_code: Option<FailureCode>,
    /// When it was accepted.
    pub created_at: DateTime<Utc>,
}

/// Settles the order once no unit is pending. Returns the settled order if
/// this call settled it.
pub async fn finalize<C: ConnectionTrait>(
    db: &C,
    order_id: &str,
    now: DateTime<Utc>,
) -> Result<Option<Settled>, DbErr> {
    let mut settled = finalize_many(db, &[order_id.to_owned()], now).await?;
    Ok(settled.pop().map(|(_, settled)| settled))
}

/// Settles every order of `order_ids` with no unit pending, in at most four
/// statements whatever their number: one count of their units by status,
/// then one update per final status (RETURNING, on SQLite and PostgreSQL
/// alike; an order another pass settled first is not returned). Returns the
/// orders this call settled.
pub async fn finalize_many<C: ConnectionTrait>(
    db: &C,
    order_ids: &[String],
    now: DateTime<Utc>,
) -> Result<Vec<(String, Settled)>, DbErr> {
    if order_ids.is_empty() {
        return Ok(Vec::new());
    }
    let counts: Vec<(String, UnitStatus, i64)> = order_unit::Entity::find()
        .select_only()
        .column(order_unit::Column::OrderId)
        .column(order_unit::Column::Status)
        .column_as(order_unit::Column::Id.count(), "units")
        .filter(bulk::column_in(
            db,
            order_unit::Column::OrderId,
            order_ids.iter().map(String::as_str),
        ))
        .group_by(order_unit::Column::OrderId)
        .group_by(order_unit::Column::Status)
        .into_tuple()
        .all(db)
        .await?;
    let mut tally: HashMap<&str, [usize; 3]> = HashMap::new();
    for (order_id, status, units) in &counts {
        let slot = match status {
            UnitStatus::Delivered => 0,
            UnitStatus::Refunded => 1,
            UnitStatus::Pending => 2,
        };
        tally.entry(order_id.as_str()).or_default()[slot] += usize::try_from(*units).unwrap_or(0);
    }
    let mut by_status: HashMap<OrderStatus, Vec<&str>> = HashMap::new();
    for (order_id, [delivered, refunded, pending]) in &tally {
        if let Some(status) = rules::settled_status(*delivered, *refunded, *pending) {
            by_status.entry(status).or_default().push(order_id);
        }
    }
    let mut settled = Vec::new();
    for (status, ids) in by_status {
        let rows = order::Entity::update_many()
            .col_expr(order::Column::Status, Expr::value(status))
            .col_expr(order::Column::CompletedAt, Expr::value(Some(now)))
            .col_expr(
                order::Column::ClaimedUntil,
                Expr::value(Option::<DateTime<Utc>>::None),
            )
            .col_expr(
                order::Column::ClaimedBy,
                Expr::value(Option::<String>::None),
            )
            .filter(bulk::column_in(db, order::Column::Id, ids))
            .filter(order::Column::Status.eq(OrderStatus::Processing))
            .exec_with_returning(db)
            .await?;
        settled.extend(rows.into_iter().map(|order| {
            (
                order.id,
                Settled {
                    status,
                    mode: order.mode,
                    failure_code: order.failure_code,
                    created_at: order.created_at,
                },
            )
        }));
    }
    Ok(settled)
}

/// Persists a planned batch of one partner in the caller's transaction:
/// one conditional debit per mode for the batch's total, then every order,
/// unit, key binding and (live) purchase row, then the refusal bindings.
/// Orders are in acceptance order; each purchase row gets its own `seq` and
/// `balance_after`. Returns the balances after: (live, sandbox).
pub async fn accept_batch<C: ConnectionTrait>(
    txn: &C,
    partner_id: &str,
    orders: &[NewOrder],
    refusals: &[RefusalRow],
    now: DateTime<Utc>,
) -> Result<(Option<i64>, Option<i64>), AcceptError> {
    let mut after = (None, None);
    let mut ledger_rows = Vec::new();
    for mode in [Mode::Live, Mode::Sandbox] {
        let mine: Vec<&NewOrder> = orders.iter().filter(|o| o.order.mode == mode).collect();
        if mine.is_empty() {
            continue;
        }
        let total: i64 = mine.iter().map(|o| o.order.total_cents).sum();
        let count = mine.len() as i64;
        let Some(row) = move_float(txn, partner_id, mode, -total, count, false, now).await? else {
            return Err(AcceptError::Insufficient);
        };
        match mode {
            Mode::Live => {
                let mut balance = row.balance_cents + total;
                for (seq, new) in (row.next_seq - count..).zip(&mine) {
                    balance -= new.order.total_cents;
                    ledger_rows.push(ledger_entry::Model {
                        id: LedgerEntryId::generate().into_string(),
                        partner_id: partner_id.to_owned(),
                        seq,
                        kind: LedgerKind::Purchase,
                        amount_cents: -new.order.total_cents,
                        balance_after_cents: balance,
                        description: format!("{} × {}", new.order.quantity, new.order.plan_id),
                        order_id: Some(new.order.id.clone()),
                        deposit_id: None,
                        movement_key: Some(format!("{}:purchase", new.order.id)),
                        created_at: now,
                    });
                }
                after.0 = Some(row.balance_cents);
            }
            Mode::Sandbox => after.1 = Some(row.balance_cents),
        }
    }
    let order_rows: Vec<order::Model> = orders.iter().map(|o| o.order.clone()).collect();
    let unit_rows: Vec<order_unit::Model> = orders
        .iter()
        .flat_map(|o| pending_units(&o.order, now))
        .collect();
    let mut key_rows: Vec<idempotency_key::Model> = orders
        .iter()
        .map(|o| idempotency_key::Model {
            partner_id: o.order.partner_id.clone(),
            key: o.order.idempotency_key.clone(),
            mode: o.order.mode,
            fingerprint: o.fingerprint.clone(),
            order_id: Some(o.order.id.clone()),
            error_status: None,
            error_body: None,
            created_at: now,
        })
        .collect();
    key_rows.extend(refusals.iter().map(|r| idempotency_key::Model {
        partner_id: partner_id.to_owned(),
        key: r.key.clone(),
        mode: r.mode,
        fingerprint: r.fingerprint.clone(),
        order_id: None,
        error_status: None,
        error_body: Some(r.refusal.to_stored()),
        created_at: now,
    }));
    bulk::insert_models::<order::Entity, _>(txn, &order_rows).await?;
    bulk::insert_models::<order_unit::Entity, _>(txn, &unit_rows).await?;
    bulk::insert_models::<idempotency_key::Entity, _>(txn, &key_rows).await?;
    bulk::insert_models::<ledger_entry::Entity, _>(txn, &ledger_rows).await?;
    Ok(after)
}

/// Live units of orders still processing, per partner: the backlog the
/// supplier has yet to deliver (every node's orders).
pub async fn live_backlog<C: ConnectionTrait>(db: &C) -> Result<HashMap<String, u64>, DbErr> {
    let rows: Vec<(String, Option<i64>)> = order::Entity::find()
        .select_only()
        .column(order::Column::PartnerId)
        .column_as(Expr::col(order::Column::Quantity).sum(), "units")
        .filter(order::Column::Status.eq(OrderStatus::Processing))
        .filter(order::Column::Mode.eq(Mode::Live))
        .group_by(order::Column::PartnerId)
        .into_tuple()
        .all(db)
        .await?;
    Ok(rows
        .into_iter()
        .map(|(partner, units)| (partner, u64::try_from(units.unwrap_or(0)).unwrap_or(0)))
        .collect())
}
