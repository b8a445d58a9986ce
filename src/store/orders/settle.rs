//! Settling units and orders: deliveries, refunds with their ledger rows, and
//! the final status of an order once no unit is pending.

use super::*;
use sea_orm::{
    DbBackend, QueryTrait, Statement, UpdateMany,
    sea_query::{Query, ReturningClause},
};

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

/// Moves the units of `unit_ids` (of `order_id`, when given) that are still
/// `pending` to `to`, in one statement; returns the ids this call moved, so
/// a unit settles once however many passes race for it.
async fn settle_pending<'a, C: ConnectionTrait>(
    txn: &C,
    unit_ids: impl IntoIterator<Item = &'a str>,
    order_id: Option<&str>,
    to: UnitStatus,
    now: DateTime<Utc>,
) -> Result<Vec<String>, DbErr> {
    let backend = txn.get_database_backend();
    // Only the ids come back: the whole rows would be decoded to be dropped.
    let mut update = settle_pending_update(backend, unit_ids, order_id, to, now).into_query();
    update.returning_col(order_unit::Column::Id);
    txn.query_all_raw(backend.build(&update))
        .await?
        .iter()
        .map(|row| row.try_get_by_index(0))
        .collect()
}

/// The update [`settle_pending`] runs (without its RETURNING).
pub(super) fn settle_pending_update<'a>(
    backend: DbBackend,
    unit_ids: impl IntoIterator<Item = &'a str>,
    order_id: Option<&str>,
    to: UnitStatus,
    now: DateTime<Utc>,
) -> UpdateMany<order_unit::Entity> {
    let mut update = order_unit::Entity::update_many()
        .col_expr(order_unit::Column::Status, Expr::value(to))
        .col_expr(order_unit::Column::UpdatedAt, Expr::value(now))
        .filter(bulk::column_in_for(
            backend,
            order_unit::Column::Id,
            unit_ids,
        ))
        .filter(order_unit::Column::Status.eq(UnitStatus::Pending));
    if let Some(order_id) = order_id {
        update = update.filter(order_unit::Column::OrderId.eq(order_id));
    }
    update
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
    let settled: HashSet<String> = settle_pending(
        txn,
        profiles.iter().map(|p| p.unit_id.as_str()),
        None,
        UnitStatus::Delivered,
        now,
    )
    .await?
    .into_iter()
    .collect();
    let (stored, rows) = profiles_to_store(profiles, &settled);
    bulk::insert_models::<esim::Entity, _>(txn, &rows).await?;
    Ok(stored)
}

/// [`deliver_units`] then [`finalize_many`] of their orders, in the
/// caller's transaction: per profile whether it was stored, and the orders
/// it settled.
pub async fn deliver_and_settle<C: ConnectionTrait>(
    txn: &C,
    profiles: &[esim::Model],
    now: DateTime<Utc>,
) -> Result<DeliveredAndSettled, DbErr> {
    let stored = deliver_units(txn, profiles, now).await?;
    let settled = finalize_many(txn, &orders_of(profiles), now).await?;
    Ok((stored, settled))
}

/// What storing a batch of deliveries did: per profile whether it was
/// stored, and the orders it settled.
pub type DeliveredAndSettled = (Vec<bool>, Vec<(String, Settled)>);

/// The orders the profiles are dealt to, each once.
pub(super) fn orders_of(profiles: &[esim::Model]) -> Vec<String> {
    let mut orders: Vec<String> = profiles.iter().map(|p| p.order_id.clone()).collect();
    orders.sort_unstable();
    orders.dedup();
    orders
}

/// Per profile, whether its unit was `settled` by this call, and the
/// profiles to store (those).
pub(super) fn profiles_to_store(
    profiles: &[esim::Model],
    settled: &HashSet<String>,
) -> (Vec<bool>, Vec<esim::Model>) {
    let stored: Vec<bool> = profiles
        .iter()
        .map(|p| settled.contains(&p.unit_id))
        .collect();
    let rows = profiles
        .iter()
        .zip(&stored)
        .filter(|(_, stored)| **stored)
        .map(|(p, _)| p.clone())
        .collect();
    (stored, rows)
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
    let mut refunded = settle_pending(
        txn,
        unit_ids.iter().map(String::as_str),
        Some(&order.id),
        UnitStatus::Refunded,
        now,
    )
    .await?;
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
    /// Live or sandbox.
    pub mode: Mode,
    /// Why it failed, when it did.
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
    let backend = db.get_database_backend();
    let counts = db
        .query_all_raw(unit_tally(backend, order_ids))
        .await?
        .iter()
        .map(|row| row.try_get_many_by_index())
        .collect::<Result<Vec<(String, UnitStatus, i64)>, DbErr>>()?;
    let mut settled = Vec::new();
    for (status, ids) in final_statuses(&counts) {
        let mut update = settle_orders_update(backend, status, ids, now).into_query();
        update.returning(settled_returning());
        for row in db.query_all_raw(backend.build(&update)).await? {
            let (id, mode, failure_code, created_at) = row.try_get_many_by_index()?;
            let settled_order = Settled {
                status,
                mode,
                failure_code,
                created_at,
            };
            settled.push((id, settled_order));
        }
    }
    Ok(settled)
}

/// What a settling update returns: the columns [`Settled`] keeps (after the
/// order's id), in this order. The whole row would carry every order's
/// metadata back to be decoded and dropped.
pub(super) fn settled_returning() -> ReturningClause {
    Query::returning().columns([
        order::Column::Id,
        order::Column::Mode,
        order::Column::FailureCode,
        order::Column::CreatedAt,
    ])
}

/// Counts the units of `order_ids` by order and status: (order, status,
/// units), one probe of the units' order index per order.
///
/// On PostgreSQL each order's units are counted in a lateral subquery of
/// their own. Matched as one list (`= ANY`, [`bulk::column_in_for`]), the
/// count is planned against a list of guessed size; while the table's
/// statistics still call it small (a young database, before autovacuum's
/// first analyses) PostgreSQL reads the whole table for it, and the prepared
/// statement keeps that plan as the table grows: every settled batch read
/// every unit, comparing each with every order of the batch. A lateral
/// subquery runs once per order, and a read of the table repeated for every
/// order is never the cheaper guess past a page or two, so the planner
/// probes. SQLite always probes the index for the list.
pub(super) fn unit_tally(backend: DbBackend, order_ids: &[String]) -> Statement {
    if backend == DbBackend::Postgres {
        return Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT o.order_id, u.status, u.units \
             FROM (SELECT DISTINCT jsonb_array_elements_text($1::jsonb) AS order_id) AS o \
             CROSS JOIN LATERAL (SELECT \"status\", COUNT(\"id\") AS units FROM \"order_units\" \
             WHERE \"order_id\" = o.order_id GROUP BY \"status\") AS u",
            [serde_json::Value::from(order_ids).to_string().into()],
        );
    }
    order_unit::Entity::find()
        .select_only()
        .column(order_unit::Column::OrderId)
        .column(order_unit::Column::Status)
        .column_as(order_unit::Column::Id.count(), "units")
        .filter(bulk::column_in_for(
            backend,
            order_unit::Column::OrderId,
            order_ids.iter().map(String::as_str),
        ))
        .group_by(order_unit::Column::OrderId)
        .group_by(order_unit::Column::Status)
        .build(backend)
}

/// The orders of a [`unit_tally`] that no pending unit holds back, by the
/// final status each settles in.
pub(super) fn final_statuses(
    counts: &[(String, UnitStatus, i64)],
) -> HashMap<OrderStatus, Vec<&str>> {
    let mut tally: HashMap<&str, [usize; 3]> = HashMap::new();
    for (order_id, status, units) in counts {
        let slot = match status {
            UnitStatus::Delivered => 0,
            UnitStatus::Refunded => 1,
            UnitStatus::Pending => 2,
        };
        tally.entry(order_id.as_str()).or_default()[slot] += usize::try_from(*units).unwrap_or(0);
    }
    let mut by_status: HashMap<OrderStatus, Vec<&str>> = HashMap::new();
    for (order_id, [delivered, refunded, pending]) in tally {
        if let Some(status) = rules::settled_status(delivered, refunded, pending) {
            by_status.entry(status).or_default().push(order_id);
        }
    }
    by_status
}

/// The update that settles the still-processing orders of `ids` in `status`
/// (without its RETURNING).
pub(super) fn settle_orders_update(
    backend: DbBackend,
    status: OrderStatus,
    ids: Vec<&str>,
    now: DateTime<Utc>,
) -> UpdateMany<order::Entity> {
    order::Entity::update_many()
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
        .filter(bulk::column_in_for(backend, order::Column::Id, ids))
        .filter(bulk::checked_only(
            order::Column::Status.eq(OrderStatus::Processing),
        ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::assert_planned_through;

    /// The settling update finds its orders by primary key: through the
    /// status index it walked every processing order (the whole backlog)
    /// for each batch it settled.
    #[tokio::test]
    async fn settling_finds_its_orders_by_primary_key_not_by_status() {
        let update = settle_orders_update(
            DbBackend::Sqlite,
            OrderStatus::Completed,
            vec!["ord_a", "ord_b"],
            Utc::now(),
        );
        assert_planned_through(
            DbBackend::Sqlite.build(&update.into_query()),
            "orders USING INDEX sqlite_autoindex_orders_1 (id=?)",
            "idx_orders_status",
        )
        .await;
    }
}
